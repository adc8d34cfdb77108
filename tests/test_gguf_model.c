/*
 * test_gguf_model.c - GGUF files end to end on the CPU: the generated
 * fixtures (tests/fixtures/tiny-qwen3-gguf, written by scripts/make_gguf.py
 * with our own encoders; `make` generates them) load, compute the float64
 * reference forward of their own decoded weights (X.ref) within each
 * type's bound at every position, decode greedily as the reference does
 * while its margins are clear, and carry a tokenizer and chat template
 * identical to the tokenizer.json path. X.ref's layout and the checks:
 * reference_check.h.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_template.h"
#include "cuda/cuda_runner.h"
#include "engine/model_tokenizer.h"
#include "model/gguf.h"
#include "model/model_pooling.h"
#include "helpers.h"
#include "reference_check.h"

#define GGUF_DIR "tests/fixtures/tiny-qwen3-gguf"

static char *fixture_path(const char *name) {
    static char path[256];
    snprintf(path, sizeof path, GGUF_DIR "/%s.gguf", name);
    return path;
}

static char *ref_path(const char *name) {
    static char path[256];
    snprintf(path, sizeof path, GGUF_DIR "/%s.ref", name);
    return path;
}

static void logits_within(const char *name, double bound) {
    reference_logits_within(ref_path(name), fixture_path(name), bound);
}

static void greedy_matches(const char *name, double min_margin) {
    reference_greedy_matches(ref_path(name), fixture_path(name), min_margin);
}

/* Bounds: bf16 weights compute in float32 against a float64 reference
 * (measured 5e-7); the quantized types also quantize each activation row to
 * 8 bits per block before the integer products (as llama.cpp does), which
 * is most of their distance: measured 2.0% (q8_0) to 3.1% (mix). */
Test(gguf_model, bf16_logits) { logits_within("bf16", 1e-4); }
Test(gguf_model, q8_0_logits) { logits_within("q8_0", 0.05); }
Test(gguf_model, q6_k_logits) { logits_within("q6_k", 0.05); }
Test(gguf_model, q5_k_logits) { logits_within("q5_k", 0.05); }
Test(gguf_model, q4_k_logits) { logits_within("q4_k", 0.05); }
Test(gguf_model, q5_0_logits) { logits_within("q5_0", 0.05); }
Test(gguf_model, q4_0_logits) { logits_within("q4_0", 0.05); }
Test(gguf_model, iq4_nl_logits) { logits_within("iq4_nl", 0.05); }
Test(gguf_model, mix_logits) { logits_within("mix", 0.05); }
Test(gguf_model, moe_q4_k_logits) { logits_within("moe-q4_k", 0.05); }
Test(gguf_model, moe_q8_0_logits) { logits_within("moe-q8_0", 0.05); }

Test(gguf_model, bf16_greedy) { greedy_matches("bf16", 0.01); }
/* Margins of three typical errors (the logits tests' rms error: 0.33 for
 * q8_0, 0.47-0.49 for the K types) */
Test(gguf_model, q8_0_greedy) { greedy_matches("q8_0", 1.0); }
Test(gguf_model, q4_k_greedy) { greedy_matches("q4_k", 1.5); }
Test(gguf_model, q4_0_greedy) { greedy_matches("q4_0", 1.5); }
Test(gguf_model, mix_greedy) { greedy_matches("mix", 1.5); }
Test(gguf_model, moe_q4_k_greedy) { greedy_matches("moe-q4_k", 1.5); }

/* The metadata means what the Hugging Face config it was written from says. */
Test(gguf_model, config_from_metadata) {
    ModelConfig c;
    Error err = {0};
    cr_assert(model_config_load(&c, fixture_path("q4_k"), &err) == 0, "%s", err.msg);
    cr_expect_eq(c.hidden_size, 256);
    cr_expect_eq(c.intermediate_size, 512);
    cr_expect_eq(c.num_layers, 2);
    cr_expect_eq(c.num_heads, 2);
    cr_expect_eq(c.num_kv_heads, 1);
    cr_expect_eq(c.head_dim, 128);
    cr_expect_eq(c.vocab_size, 151936);
    cr_expect(c.tie_word_embeddings);
    cr_expect_eq(c.num_experts, 0);
    cr_expect(fabs(c.rope_theta - 1e6) < 1e-3);
    cr_expect(fabs(c.rms_norm_eps - 1e-6) < 1e-12);
    cr_expect(model_config_is_eos(&c, 151645));
    cr_assert(model_config_load(&c, fixture_path("moe-q4_k"), &err) == 0, "%s", err.msg);
    cr_expect_eq(c.num_experts, 8);
    cr_expect_eq(c.num_experts_per_tok, 2);
    cr_expect_eq(c.moe_intermediate_size, 256);
    cr_expect(c.norm_topk_prob);
    cr_expect(!model_config_layer_is_sparse(&c, 0));
    cr_expect(model_config_layer_is_sparse(&c, 1));
    cr_expect(!c.tie_word_embeddings);
}

/* The weights keep the file's encodings; a token reads bytes of those. */
Test(gguf_model, weights_keep_their_types) {
    ModelWeights w;
    Error err = {0};
    cr_assert(model_weights_load(&w, fixture_path("mix"), &err) == 0, "%s", err.msg);
    cr_expect_eq(w.layers[0].q_proj.type, WEIGHT_Q4_K);
    cr_expect_eq(w.layers[0].down_proj.type, WEIGHT_Q6_K);
    cr_expect_eq(w.embed_tokens.type, WEIGHT_Q6_K);
    ModelSize s = model_weights_size(&w);
    /* mostly the tied q6_k head (0.82 bytes a weight) */
    cr_expect(s.bytes_per_token < 0.5 * s.active_params * 2, "%g bytes per token", s.bytes_per_token);
    model_weights_free(&w);
}

/* The file's tokenizer tables and chat template are the tokenizer.json's. */
Test(gguf_model, tokenizer_from_the_file) {
    Error err = {0};
    Tokenizer *g = model_tokenizer_load(fixture_path("q8_0"), 151936, &err);
    cr_assert(g, "%s", err.msg);
    Tokenizer *t = tiny_tokenizer();
    cr_expect_eq(tokenizer_size(g), tokenizer_size(t));
    cr_expect_eq(tokenizer_eos_id(g), tokenizer_eos_id(t));
    cr_expect_eq(tokenizer_pad_id(g), tokenizer_pad_id(t));
    cr_expect_str_eq(tokenizer_chat_template(g), tokenizer_chat_template(t));
    json_t *rows = jsonl_load(TOKENIZER_FIXTURES "/encode.jsonl");
    size_t i, same = 0;
    json_t *row;
    json_array_foreach(rows, i, row) {
        json_t *text = json_object_get(row, "text");
        int32_t *a, *b;
        size_t na, nb;
        cr_assert(tokenizer_encode(g, json_string_value(text), json_string_length(text), &a, &na, &err) == 0);
        cr_assert(tokenizer_encode(t, json_string_value(text), json_string_length(text), &b, &nb, &err) == 0);
        same += na == nb && memcmp(a, b, sizeof *a * na) == 0;
        free(a);
        free(b);
    }
    cr_expect_eq(same, json_array_size(rows), "%zu of %zu encodes identical", same, json_array_size(rows));
    json_decref(rows);
    tokenizer_free(g);
    tokenizer_free(t);
}

/* The command line takes the file where it takes a folder. */
Test(gguf_model, generate_from_the_file) {
    char *out = NULL, *err = NULL;
    int rc = run_nanovllm("generate --model " GGUF_DIR "/q4_k.gguf --device cpu --prompt Hello "
                          "--max-tokens 4 --temperature 0", &out, &err);
    cr_expect_eq(rc, 0, "stderr: %s", err);
    cr_expect(strstr(err, "q4_k") != NULL, "the log names the weights' encodings: %s", err);
    free(out);
    free(err);
}

/* The CUDA runner reads bf16 Hugging Face weights only, and says so. */
Test(gguf_model, cuda_refuses_gguf) {
    ModelWeights w;
    Error err = {0};
    cr_assert(model_weights_load(&w, fixture_path("q8_0"), &err) == 0, "%s", err.msg);
    RunnerOptions o = runner_default_options();
    Runner *r = cuda_runner_create(&w, &o, &err);
    cr_expect_null(r);
    /* refused before any device is touched, so a GPU-less CUDA build says it too */
    cr_expect(strstr(err.msg, "GGUF files run on the CPU") || strstr(err.msg, "built without CUDA"),
              "%s", err.msg);
    model_weights_free(&w);
}

/* ---- files the loader must refuse, made by patching a fixture's bytes ---- */

/* A copy of fixture `name` with `len` bytes at byte offset `at` replaced,
 * in a temporary folder (*dir, removed by the caller). */
static char *patched_copy(const char *name, size_t at, const void *bytes, size_t len, char **dir) {
    static char path[512];
    *dir = make_temp_dir();
    snprintf(path, sizeof path, "%s/patched.gguf", *dir);
    FILE *in = fopen(fixture_path(name), "rb");
    cr_assert(in);
    fseek(in, 0, SEEK_END);
    size_t size = (size_t)ftell(in);
    rewind(in);
    char *data = malloc(size);
    cr_assert(data && fread(data, 1, size, in) == size);
    fclose(in);
    cr_assert(at + len <= size);
    memcpy(data + at, bytes, len);
    write_file(path, data, size);
    free(data);
    return path;
}

/* Byte offset (in the file) of the first occurrence of `text` in its header. */
static size_t offset_of(const char *name, const char *text) {
    Gguf g;
    Error err = {0};
    cr_assert(gguf_open(&g, fixture_path(name), &err) == 0, "%s", err.msg);
    size_t n = strlen(text), at = 0;
    const char *base = g.map;
    for (at = 0; at + n <= g.data_offset && memcmp(base + at, text, n) != 0; at++) {}
    cr_assert(at + n <= g.data_offset, "'%s' is not in the header", text);
    gguf_close(&g);
    return at;
}

static void expect_refused(const char *path, const char *needle) {
    ModelWeights w;
    Error err = {0};
    cr_expect(model_weights_load(&w, path, &err) != 0, "loaded a file that should be refused");
    cr_expect(strstr(err.msg, needle) != NULL, "error '%s' does not say '%s'", err.msg, needle);
}

/* Fixture q8_0 with bytes at `at` replaced must be refused with `needle`. */
static void expect_patch_refused(size_t at, const void *bytes, size_t len, const char *needle) {
    char *dir;
    expect_refused(patched_copy("q8_0", at, bytes, len, &dir), needle);
    rm_rf(dir);
    free(dir);
}

Test(gguf_model, refuses_another_architecture) {
    /* the value string "qwen3" directly follows its key */
    size_t at = offset_of("q8_0", "general.architecture") + strlen("general.architecture") + 4 + 8;
    expect_patch_refused(at, "llama", 5, "supported: qwen3, qwen3moe, qwen35, qwen35moe");
}

Test(gguf_model, refuses_a_missing_key) {
    size_t at = offset_of("q8_0", "qwen3.block_count");
    expect_patch_refused(at, "qwen3.block_cXunt", 17, "'qwen3.block_count'");
}

Test(gguf_model, refuses_a_shape_the_metadata_contradicts) {
    size_t at = offset_of("q8_0", "qwen3.embedding_length") + strlen("qwen3.embedding_length") + 4;
    uint32_t hidden = 128;
    expect_patch_refused(at, &hidden, 4, "token_embd.weight");
}

Test(gguf_model, refuses_an_unsupported_tensor_type) {
    /* the type field follows the name, n_dims and two dimensions; q4_1 blocks
     * are smaller than q8_0's, so the file stays self-consistent */
    const char *name = "blk.0.attn_q.weight";
    size_t at = offset_of("q8_0", name) + strlen(name) + 4 + 2 * 8;
    uint32_t q4_1 = GGUF_TYPE_Q4_1;
    expect_patch_refused(at, &q4_1, 4, "q4_1");
}

/* An embedding file's {arch}.pooling_type (tests/fixtures/tiny-qwen3-embedding.gguf:
 * 3, last) and what other values mean; the server's end: test_server_embeddings.c. */
static int pooling_of(const char *path, ModelPooling *p, Error *err) {
    Gguf g;
    cr_assert(gguf_open(&g, path, err) == 0, "%s", err->msg);
    int rc = model_pooling_from_gguf(p, &g, err);
    gguf_close(&g);
    return rc;
}

Test(gguf_model, pooling_type_from_metadata) {
    const char *emb = "../tiny-qwen3-embedding", *k = "qwen3.pooling_type";
    ModelPooling p;
    Error err = {0};
    cr_assert(pooling_of(fixture_path(emb), &p, &err) == 0, "%s", err.msg);
    cr_expect(p.mode == POOLING_LAST && p.normalize && p.from_folder);
    cr_assert(pooling_of(fixture_path("q8_0"), &p, &err) == 0, "%s", err.msg); /* no key: generation */
    cr_expect(p.mode == POOLING_NONE && !p.from_folder);
    static const struct {
        uint32_t type;
        PoolingMode mode;
        const char *error;
    } cases[] = {{0, POOLING_NONE, NULL}, {1, POOLING_MEAN, NULL}, {2, POOLING_CLS, NULL},
                 {4, POOLING_NONE, "reranker"}, {9, POOLING_NONE, "not a pooling type"}};
    size_t at = offset_of(emb, k) + strlen(k) + 4;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *dir, *path = patched_copy(emb, at, &cases[i].type, 4, &dir);
        err = (Error){0};
        int rc = pooling_of(path, &p, &err);
        if (cases[i].error)
            cr_expect(rc != 0 && strstr(err.msg, cases[i].error), "type %u: '%s'", cases[i].type, err.msg);
        else
            cr_expect(rc == 0 && p.mode == cases[i].mode, "type %u: rc %d mode %d", cases[i].type, rc, p.mode);
        rm_rf(dir);
        free(dir);
    }
}

/* Qwen3.5 (the tiny qwen35 fixture, tests/fixtures/tiny-qwen3_5): value
 * heads that do not divide into whole heads, and a decay A = -exp(A_log)
 * that is not negative (log(-A) would be NaN). */
#define QWEN35_Q8 "../tiny-qwen3_5/dense-q8_0"

static void expect_qwen35_patch_refused(size_t at, const void *bytes, size_t len, const char *needle) {
    char *dir;
    expect_refused(patched_copy(QWEN35_Q8, at, bytes, len, &dir), needle);
    rm_rf(dir);
    free(dir);
}

Test(gguf_model, refuses_qwen35_partial_value_heads) {
    size_t at = offset_of(QWEN35_Q8, "qwen35.ssm.inner_size") + strlen("qwen35.ssm.inner_size") + 4;
    uint32_t inner = 97;
    expect_qwen35_patch_refused(at, &inner, 4, "do not make whole value heads");
}

/* One layer of the four, before the first full-attention one (a crash
 * once: no KV layer meant KV blocks of 0 bytes). */
Test(gguf_model, refuses_qwen35_without_a_full_attention_layer) {
    size_t at = offset_of(QWEN35_Q8, "qwen35.block_count") + strlen("qwen35.block_count") + 4;
    uint32_t layers = 1;
    expect_qwen35_patch_refused(at, &layers, 4, "all 1 layers are linear attention");
}

/* A shared expert's tensors with no size for it in the metadata: refused,
 * not dropped (they were, silently). */
Test(gguf_model, refuses_qwen35_shared_expert_tensors_without_a_size) {
    const char *moe = "../tiny-qwen3_5/moe-q8_0", *k = "qwen35moe.expert_shared_feed_forward_length";
    char *dir;
    uint32_t zero = 0;
    expect_refused(patched_copy(moe, offset_of(moe, k) + strlen(k) + 4, &zero, 4, &dir),
                   "'blk.0.ffn_gate_shexp.weight' is a shared expert's");
    rm_rf(dir);
    free(dir);
}

Test(gguf_model, refuses_qwen35_a_decay_that_is_not_negative) {
    Gguf g;
    Error err = {0};
    cr_assert(gguf_open(&g, fixture_path(QWEN35_Q8), &err) == 0, "%s", err.msg);
    const GgufTensor *t = gguf_find_tensor(&g, "blk.1.ssm_a");
    cr_assert(t && t->type == GGUF_TYPE_F32);
    size_t at = (size_t)((const char *)t->data - (const char *)g.map) + sizeof(float);
    gguf_close(&g);
    float positive = 0.5f;
    expect_qwen35_patch_refused(at, &positive, sizeof positive, "'blk.1.ssm_a': value 1 is 0.5");
}

Test(gguf_model, refuses_a_truncated_file) {
    char *dir = make_temp_dir(), path[512];
    snprintf(path, sizeof path, "%s/cut.gguf", dir);
    FILE *in = fopen(fixture_path("q4_k"), "rb");
    cr_assert(in);
    char *data = malloc(1 << 20);
    cr_assert(data && fread(data, 1, 1 << 20, in) == 1 << 20);
    fclose(in);
    write_file(path, data, 1 << 20);
    expect_refused(path, "cannot fit");
    free(data);
    rm_rf(dir);
    free(dir);
}
