/*
 * test_gguf_model.c - GGUF files end to end on the CPU: the generated
 * fixtures (tests/fixtures/tiny-qwen3-gguf, written by scripts/make_gguf.py
 * with our own encoders; `make` generates them) load, compute the float64
 * reference forward of their own decoded weights (X.ref) within each
 * type's bound at every position, decode greedily as the reference does
 * while its margins are clear, and carry a tokenizer and chat template
 * identical to the tokenizer.json path.
 *
 * X.ref (little-endian): int32 n_prompt, n_vocab, n_greedy; int32
 * prompt[n_prompt]; int32 greedy[n_greedy]; float32 margin[n_greedy] (top-1
 * minus top-2 at each greedy step); float32 logits[n_prompt][n_vocab].
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
#include "helpers.h"

#define GGUF_DIR "tests/fixtures/tiny-qwen3-gguf"

typedef struct Reference {
    int n_prompt, n_vocab, n_greedy;
    int32_t *prompt, *greedy;
    float *margin, *logits;
} Reference;

static void read_exact(FILE *f, void *dst, size_t bytes, const char *path) {
    cr_assert_eq(fread(dst, 1, bytes, f), bytes, "%s: short read", path);
}

static Reference load_reference(const char *name) {
    char path[256];
    snprintf(path, sizeof path, GGUF_DIR "/%s.ref", name);
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s is missing (make generates it)", path);
    Reference r;
    int32_t head[3];
    read_exact(f, head, sizeof head, path);
    r.n_prompt = head[0];
    r.n_vocab = head[1];
    r.n_greedy = head[2];
    cr_assert(r.n_prompt > 0 && r.n_prompt < 1000 && r.n_greedy > 0 && r.n_greedy < 1000);
    r.prompt = malloc(sizeof *r.prompt * (size_t)r.n_prompt);
    r.greedy = malloc(sizeof *r.greedy * (size_t)r.n_greedy);
    r.margin = malloc(sizeof *r.margin * (size_t)r.n_greedy);
    r.logits = malloc(sizeof *r.logits * (size_t)r.n_prompt * (size_t)r.n_vocab);
    cr_assert(r.prompt && r.greedy && r.margin && r.logits);
    read_exact(f, r.prompt, sizeof *r.prompt * (size_t)r.n_prompt, path);
    read_exact(f, r.greedy, sizeof *r.greedy * (size_t)r.n_greedy, path);
    read_exact(f, r.margin, sizeof *r.margin * (size_t)r.n_greedy, path);
    read_exact(f, r.logits, sizeof *r.logits * (size_t)r.n_prompt * (size_t)r.n_vocab, path);
    fclose(f);
    return r;
}

static void free_reference(Reference *r) {
    free(r->prompt);
    free(r->greedy);
    free(r->margin);
    free(r->logits);
}

static char *fixture_path(const char *name) {
    static char path[256];
    snprintf(path, sizeof path, GGUF_DIR "/%s.gguf", name);
    return path;
}

static double want_gap(const float *want, int best, int second) {
    return second < 0 ? INFINITY : (double)want[best] - want[second];
}

/* Every position's logits against the reference (relative L2 over
 * positions x vocabulary), and each position's argmax the reference's
 * where the reference's top two are apart. */
static void logits_within(const char *name, double bound) {
    Reference ref = load_reference(name);
    ModelWeights w;
    Runner *r;
    fixture_open_dtype(fixture_path(name), &w, &r, 16, 512, KV_CACHE_F32, COMPUTE_F32);
    cr_assert_eq(w.config.vocab_size, ref.n_vocab);
    int n = ref.n_prompt, nb = (n + 15) / 16;
    int32_t table[64];
    for (int i = 0; i < nb; i++) table[i] = nb - 1 - i;
    float *all = malloc(sizeof(float) * (size_t)n * (size_t)ref.n_vocab);
    cr_assert(all);
    RunnerSeq seq = {.tokens = ref.prompt, .num_tokens = n, .block_table = table, .num_blocks = nb,
                     .compute_logits = true};
    RunnerBatch batch = {.seqs = &seq, .num_seqs = 1, .all_logits = all};
    int32_t next;
    Error err = {0};
    cr_assert(runner_step(r, &batch, &next, &err) == 0, "%s", err.msg);
    double diff = 0, norm = 0;
    int argmax_checked = 0;
    typedef struct Top {
        int best, ref_best;
        double gap;
    } Top;
    Top tops[1000];
    for (int t = 0; t < n; t++) {
        const float *got = all + (size_t)t * ref.n_vocab, *want = ref.logits + (size_t)t * ref.n_vocab;
        int best = 0, ref_best = 0, ref_second = -1;
        for (int v = 0; v < ref.n_vocab; v++) {
            diff += ((double)got[v] - want[v]) * ((double)got[v] - want[v]);
            norm += (double)want[v] * want[v];
            if (got[v] > got[best]) best = v;
            if (want[v] > want[ref_best]) {
                ref_second = ref_best;
                ref_best = v;
            } else if (ref_second < 0 || want[v] > want[ref_second]) {
                ref_second = v;
            }
        }
        tops[t] = (Top){best, ref_best, want_gap(want, ref_best, ref_second)};
    }
    /* Our argmax must be a token the reference rates within a few typical
     * errors of its own top one (exactly its top one where nothing is close). */
    double rms = sqrt(diff / ((double)n * ref.n_vocab));
    for (int t = 0; t < n; t++) {
        if (tops[t].gap < 6 * rms) continue;
        argmax_checked++;
        cr_expect_eq(tops[t].best, tops[t].ref_best, "%s position %d: argmax %d, reference %d "
                     "(gap %.3f, rms error %.3f)", name, t, tops[t].best, tops[t].ref_best, tops[t].gap, rms);
    }
    double rel = sqrt(diff / norm);
    cr_log_info("%s: relative L2 from the float64 reference %.3g (bound %.3g), rms error %.3g, "
                "%d/%d argmax checked", name, rel, bound, rms, argmax_checked, n);
    cr_expect(rel <= bound, "%s: logits %.3g from the reference (bound %.3g)", name, rel, bound);
    free(all);
    tiny_close(&w, r);
    free_reference(&ref);
}

/* Decoding through the KV cache (one prefill, then a token per step),
 * fed the reference's greedy tokens: at every step whose reference margin
 * is at least min_margin our argmax is the reference's token (where the
 * top two are closer, 8-bit activations may order them either way). */
static void greedy_matches(const char *name, double min_margin) {
    Reference ref = load_reference(name);
    ModelWeights w;
    Runner *r;
    fixture_open_dtype(fixture_path(name), &w, &r, 16, 512, KV_CACHE_F32, COMPUTE_F32);
    int n = ref.n_prompt, total = n + ref.n_greedy, nb = (total + 15) / 16;
    int32_t table[64], *tokens = malloc(sizeof *tokens * (size_t)total);
    cr_assert(tokens && nb <= 64);
    for (int i = 0; i < nb; i++) table[i] = (i * 7 + 3) % nb;
    memcpy(tokens, ref.prompt, sizeof *tokens * (size_t)n);
    memcpy(tokens + n, ref.greedy, sizeof *tokens * (size_t)ref.n_greedy);
    int compared = 0;
    for (int step = 0; step < ref.n_greedy; step++) {
        int start = step == 0 ? 0 : n + step - 1, len = step == 0 ? n : 1;
        RunnerSeq seq = {.tokens = tokens + start, .num_tokens = len, .start_pos = start,
                         .block_table = table, .num_blocks = nb, .compute_logits = true};
        RunnerBatch batch = {.seqs = &seq, .num_seqs = 1};
        int32_t next;
        Error err = {0};
        cr_assert(runner_step(r, &batch, &next, &err) == 0, "%s", err.msg);
        if (ref.margin[step] < min_margin) continue;
        cr_expect_eq(next, ref.greedy[step], "%s step %d: %d, reference %d (margin %.3f)", name, step,
                     next, ref.greedy[step], ref.margin[step]);
        compared++;
    }
    cr_log_info("%s: %d of %d greedy steps compared (margins >= %.2f)", name, compared, ref.n_greedy,
                min_margin);
    cr_expect(compared >= 4, "%s: only %d greedy steps had a clear margin", name, compared);
    free(tokens);
    tiny_close(&w, r);
    free_reference(&ref);
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
Test(gguf_model, mix_logits) { logits_within("mix", 0.05); }
Test(gguf_model, moe_q4_k_logits) { logits_within("moe-q4_k", 0.05); }
Test(gguf_model, moe_q8_0_logits) { logits_within("moe-q8_0", 0.05); }

Test(gguf_model, bf16_greedy) { greedy_matches("bf16", 0.01); }
/* Margins of three typical errors (the logits tests' rms error: 0.33 for
 * q8_0, 0.47-0.49 for the K types) */
Test(gguf_model, q8_0_greedy) { greedy_matches("q8_0", 1.0); }
Test(gguf_model, q4_k_greedy) { greedy_matches("q4_k", 1.5); }
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
    expect_patch_refused(at, "llama", 5, "supported: qwen3, qwen3moe");
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
    /* the type field follows the name, n_dims and two dimensions; q4_0 blocks
     * are smaller than q8_0's, so the file stays self-consistent */
    const char *name = "blk.0.attn_q.weight";
    size_t at = offset_of("q8_0", name) + strlen(name) + 4 + 2 * 8;
    uint32_t q4_0 = GGUF_TYPE_Q4_0;
    expect_patch_refused(at, &q4_0, 4, "q4_0");
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
