/*
 * test_embeddings.c - embedding requests through the engine on the CPU
 * runner, against the float64 reference vectors of the tiny
 * Qwen3-Embedding fixture (tests/fixtures/tiny-qwen3-embedding-golden,
 * scripts/make_embedding_golden.py): last-token, mean and CLS pooling, one
 * input and a batch, chunked prefill, a prefix served from the cache, side
 * by side with a generation request; plus what the folder says (pooling,
 * tokenizer post-processor, unprefixed weight names). Every comparison is
 * a cosine distance within EMBED_TOL; the largest seen is logged.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "helpers.h"
#include "engine/engine.h"
#include "model/model_pooling.h"

#define EMBED_MODEL "tests/fixtures/tiny-qwen3-embedding"
#define EMBED_GOLDEN "tests/fixtures/tiny-qwen3-embedding-golden/golden.json"
#define EMBED_TOL 1e-4
#define HIDDEN 32

static json_t *golden_case(const char *name) {
    static json_t *golden;
    if (!golden) {
        json_error_t jerr;
        golden = json_load_file(EMBED_GOLDEN, 0, &jerr);
        cr_assert(golden, "%s: %s", EMBED_GOLDEN, jerr.text);
    }
    json_t *c = json_object_get(json_object_get(golden, "cases"), name);
    cr_assert(json_is_array(c), "no case %s", name);
    return c;
}

double cosine_distance(const float *a, json_t *ref, int n);
double cosine_distance(const float *a, json_t *ref, int n) {
    double dot = 0, na = 0, nb = 0;
    for (int i = 0; i < n; i++) {
        double b = json_real_value(json_array_get(ref, (size_t)i));
        dot += a[i] * b, na += (double)a[i] * a[i], nb += b * b;
    }
    return 1 - dot / sqrt(na * nb);
}

typedef struct Got {
    float v[HIDDEN];
    int dim, finishes, tokens;
    FinishReason finish;
    int32_t first_token;
} Got;

static void collect(const EngineOutput *o, void *user) {
    Got *g = user;
    if (o->has_token && g->tokens++ == 0) g->first_token = o->token;
    if (o->finish == FINISH_NONE) return;
    g->finishes++;
    g->finish = o->finish;
    if (o->embedding) {
        g->dim = o->embedding_dim;
        memcpy(g->v, o->embedding, sizeof(float) * HIDDEN);
    }
}

typedef struct Setup {
    ModelWeights w;
    Runner *r;
    Engine *e;
} Setup;

static void open_engine(Setup *t, int block_size, int max_tokens, KvCacheDtype kv) {
    fixture_open_dtype(EMBED_MODEL, &t->w, &t->r, block_size, max_tokens, kv, COMPUTE_F32);
    Error err = {0};
    t->e = engine_create(&t->w, t->r, &err);
    cr_assert(t->e, "%s", err.msg);
}

static void close_engine(Setup *t) {
    engine_destroy(t->e);
    tiny_close(&t->w, t->r);
}

static void run_all(Engine *e) {
    Error err = {0};
    for (int i = 0; i < 10000 && engine_has_work(e); i++) cr_assert(engine_step(e, &err) >= 0, "%s", err.msg);
    cr_assert(!engine_has_work(e));
}

static void submit(Engine *e, json_t *input, PoolingMode mode, Got *g) {
    int n;
    int32_t *ids = json_ids(json_object_get(input, "ids"), &n);
    EngineRequest req = {.prompt = ids, .prompt_len = n, .pooling = mode, .on_output = collect, .user = g};
    Error err = {0};
    cr_assert(engine_submit(e, &req, NULL, &err) == 0, "%s", err.msg);
    free(ids);
}

static const char *const MODE_KEYS[] = {NULL, "last", "mean", "cls"};

/* Every input of the case submitted at once (one batch), checked. */
static double check_case(Setup *t, const char *name, PoolingMode mode) {
    json_t *c = golden_case(name);
    size_t n = json_array_size(c);
    Got *got = calloc(n, sizeof *got);
    for (size_t i = 0; i < n; i++) submit(t->e, json_array_get(c, i), mode, &got[i]);
    run_all(t->e);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(got[i].finishes, 1);
        cr_assert_eq(got[i].finish, FINISH_STOP);
        cr_assert_eq(got[i].tokens, 0, "an embedding request samples nothing");
        cr_assert_eq(got[i].dim, HIDDEN);
        double d = cosine_distance(got[i].v, json_object_get(json_array_get(c, i), MODE_KEYS[mode]), HIDDEN);
        cr_assert(d <= EMBED_TOL, "%s input %zu, %s pooling: cosine distance %g", name, i, MODE_KEYS[mode], d);
        worst = fmax(worst, d);
    }
    free(got);
    cr_log_info("%s, %s pooling: largest cosine distance %.3g", name, MODE_KEYS[mode], worst);
    return worst;
}

Test(embed, single_and_batched_every_pooling) {
    Setup t;
    open_engine(&t, 16, 512, KV_CACHE_F32);
    for (PoolingMode m = POOLING_LAST; m <= POOLING_CLS; m++) {
        check_case(&t, "single", m);
        check_case(&t, "batch", m);
    }
    close_engine(&t);
}

Test(embed, chunked_prefill) {
    Setup t;
    open_engine(&t, 16, 64, KV_CACHE_F32); /* 700 tokens in chunks of 64 */
    for (PoolingMode m = POOLING_LAST; m <= POOLING_CLS; m++) check_case(&t, "long", m);
    close_engine(&t);
}

/* The second input's 300-token prefix is in the cache once the first is
 * done: last-token pooling reads it from there, mean and CLS recompute it
 * (they need every token's hidden state); all three match the reference. */
Test(embed, shared_prefix) {
    json_t *c = golden_case("shared_prefix");
    for (PoolingMode m = POOLING_LAST; m <= POOLING_CLS; m++) {
        Setup t;
        open_engine(&t, 16, 512, KV_CACHE_F32);
        Got got[2] = {0};
        for (int i = 0; i < 2; i++) {
            long long hits = engine_stats(t.e).prefix_hit_tokens;
            submit(t.e, json_array_get(c, (size_t)i), m, &got[i]);
            run_all(t.e);
            long long new_hits = engine_stats(t.e).prefix_hit_tokens - hits;
            if (i == 1 && m == POOLING_LAST) cr_assert_geq(new_hits, 288, "the prefix came from the cache");
            if (m != POOLING_LAST) cr_assert_eq(new_hits, 0, "mean and CLS must not skip cached tokens");
            double d = cosine_distance(got[i].v, json_object_get(json_array_get(c, (size_t)i), MODE_KEYS[m]), HIDDEN);
            cr_assert(d <= EMBED_TOL, "input %d, %s pooling: cosine distance %g", i, MODE_KEYS[m], d);
            cr_log_info("shared_prefix input %d, %s pooling: cosine distance %.3g", i, MODE_KEYS[m], d);
        }
        close_engine(&t);
    }
}

/* An embedding and a generation request in the same steps: the generation's
 * greedy tokens are those it gets alone, the embedding is right. */
Test(embed, batched_with_generation) {
    json_t *c = golden_case("long");
    int32_t prompt[] = {9707, 11, 1879};
    SamplingParams p = sampling_params_default();
    p.temperature = 0;
    p.max_tokens = 8;
    int32_t alone[2];
    for (int pass = 0; pass < 2; pass++) {
        Setup t;
        open_engine(&t, 16, 128, KV_CACHE_F32);
        Got gen = {0}, emb = {0};
        EngineRequest req = {.prompt = prompt, .prompt_len = 3, .params = p, .on_output = collect, .user = &gen};
        Error err = {0};
        cr_assert(engine_submit(t.e, &req, NULL, &err) == 0, "%s", err.msg);
        if (pass == 1) submit(t.e, json_array_get(c, 0), POOLING_LAST, &emb);
        run_all(t.e);
        cr_assert_eq(gen.tokens, 8);
        alone[pass] = gen.first_token;
        if (pass == 1) {
            double d = cosine_distance(emb.v, json_object_get(json_array_get(c, 0), "last"), HIDDEN);
            cr_assert(d <= EMBED_TOL, "cosine distance %g", d);
            cr_assert_eq(alone[0], alone[1]);
        }
        close_engine(&t);
    }
}

/* The serving default on CPUs without native bf16 multiplies: a bf16 KV cache. */
Test(embed, bf16_kv_cache) {
    Setup t;
    open_engine(&t, 16, 64, KV_CACHE_BF16);
    check_case(&t, "batch", POOLING_LAST);
    check_case(&t, "long", POOLING_LAST);
    close_engine(&t);
}

Test(embed, submit_refuses_bad_pooling_requests) {
    Setup t;
    open_engine(&t, 16, 64, KV_CACHE_F32);
    int32_t ids[] = {1, 2, 3};
    Got g = {0};
    const char *stop[] = {"x"};
    EngineRequest req = {.prompt = ids, .prompt_len = 3, .pooling = (PoolingMode)9, .on_output = collect, .user = &g};
    Error err = {0};
    cr_assert_neq(engine_submit(t.e, &req, NULL, &err), 0);
    req.pooling = POOLING_LAST;
    req.stop = stop;
    req.num_stop = 1;
    cr_assert_neq(engine_submit(t.e, &req, NULL, &err), 0);
    req.num_stop = 0;
    req.params.max_tokens = -5; /* ignored: nothing is sampled */
    cr_assert_eq(engine_submit(t.e, &req, NULL, &err), 0, "%s", err.msg);
    run_all(t.e);
    cr_assert_eq(g.finish, FINISH_STOP);
    close_engine(&t);
}

/* ---- the folder --------------------------------------------------------------------------------- */

Test(embed, pooling_from_modules_json) {
    ModelPooling p;
    Error err = {0};
    cr_assert_eq(model_pooling_load(&p, EMBED_MODEL, &err), 0, "%s", err.msg);
    cr_assert_eq(p.mode, POOLING_LAST);
    cr_assert(p.normalize && p.from_folder);
    cr_assert_eq(model_pooling_load(&p, TINY_MODEL, &err), 0, "%s", err.msg);
    cr_assert_eq(p.mode, POOLING_NONE);
    cr_assert(!p.from_folder);

    char *dir = make_temp_dir(), path[512];
    snprintf(path, sizeof path, "%s/modules.json", dir);
    write_text(path, "[{\"idx\": 0, \"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"},"
                     " {\"idx\": 1, \"path\": \"pool\", \"type\": \"sentence_transformers.models.Pooling\"}]");
    snprintf(path, sizeof path, "%s/pool", dir);
    cr_assert_eq(mkdir(path, 0755), 0);
    static const struct {
        const char *config;
        int mode; /* -1: refused */
        const char *message;
    } cases[] = {
        {"{\"pooling_mode_mean_tokens\": true, \"pooling_mode_cls_token\": false}", POOLING_MEAN, NULL},
        {"{\"pooling_mode_cls_token\": true}", POOLING_CLS, NULL},
        {"{\"pooling_mode_max_tokens\": true}", -1, "pooling_mode_max_tokens"},
        {"{\"pooling_mode_weightedmean_tokens\": true}", -1, "pooling_mode_weightedmean_tokens"},
        {"{\"pooling_mode_lasttoken\": false}", -1, "no pooling_mode"},
        {"{\"pooling_mode_lasttoken\": true, \"pooling_mode_cls_token\": true}", -1, "more than one"},
        {"[1]", -1, "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "%s/pool/config.json", dir);
        write_text(path, cases[i].config);
        int rc = model_pooling_load(&p, dir, &err);
        if (cases[i].mode < 0) {
            cr_assert_neq(rc, 0, "%s accepted", cases[i].config);
            cr_assert(strstr(err.msg, cases[i].message), "%s: %s", cases[i].config, err.msg);
        } else {
            cr_assert_eq(rc, 0, "%s: %s", cases[i].config, err.msg);
            cr_assert_eq((int)p.mode, cases[i].mode);
            cr_assert(!p.normalize, "no Normalize module: raw vectors");
        }
    }
    rm_rf(dir);
    free(dir);
}

/* Qwen3-Embedding's tokenizer appends <|endoftext|> (TemplateProcessing)
 * when special tokens are added; Qwen3's own adds nothing. */
Test(embed, tokenizer_template_post_processor) {
    Error err = {0};
    Tokenizer *t = tokenizer_load(EMBED_MODEL, QWEN3_VOCAB_ROWS, &err);
    cr_assert(t, "%s", err.msg);
    int32_t *ids;
    size_t n;
    cr_assert_eq(tokenizer_encode(t, "Hello, world", 12, &ids, &n, &err), 0);
    cr_assert_eq(n, 3, "encoding alone adds nothing");
    cr_assert_eq(tokenizer_add_special_tokens(t, &ids, &n, &err), 0);
    int32_t want[] = {9707, 11, 1879, 151643};
    cr_assert_eq(n, 4);
    cr_assert_arr_eq(ids, want, sizeof want);
    free(ids);
    tokenizer_free(t);

    Tokenizer *plain = tiny_tokenizer();
    cr_assert_eq(tokenizer_encode(plain, "Hello, world", 12, &ids, &n, &err), 0);
    cr_assert_eq(tokenizer_add_special_tokens(plain, &ids, &n, &err), 0);
    cr_assert_eq(n, 3);
    free(ids);
    tokenizer_free(plain);
}

/* The fixture saves the tiny model's tensors without "model." (as
 * sentence-transformers does): the same weights load either way. */
Test(embed, unprefixed_weight_names) {
    ModelWeights a, b;
    Error err = {0};
    cr_assert_eq(model_weights_load(&a, TINY_MODEL, &err), 0, "%s", err.msg);
    cr_assert_eq(model_weights_load(&b, EMBED_MODEL, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(a.final_norm, b.final_norm, sizeof(float) * HIDDEN), 0);
    cr_assert_eq(memcmp(a.layers[2].q_norm, b.layers[2].q_norm, sizeof(float) * 128), 0);
    cr_assert_eq(memcmp(a.embed_tokens.data, b.embed_tokens.data, 2 * HIDDEN * 1000), 0);
    model_weights_free(&a);
    model_weights_free(&b);
}
