/*
 * test_cuda_embeddings.c - embedding requests on the CUDA runner: the tiny
 * Qwen3-Embedding fixture's float64 reference vectors under last-token,
 * mean and CLS pooling, batched, in chunks of 64 tokens, and beside a
 * generation request whose greedy tokens must not change. Skipped, with
 * the reason, where there is no GPU.
 *
 * Tolerance: the GPU rounds GEMM inputs and the KV cache to bf16 (the CPU
 * tests run float32 and hold 1e-4); the pooled norm itself is float32.
 * EMBED_GPU_TOL is the bf16 bound; the distances seen are logged.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <string.h>

#include "cuda_test.h"
#include "helpers.h"
#include "cuda/cuda_runner.h"
#include "engine/engine.h"

#define EMBED_MODEL "tests/fixtures/tiny-qwen3-embedding"
#define EMBED_GOLDEN "tests/fixtures/tiny-qwen3-embedding-golden/golden.json"
#define EMBED_GPU_TOL 2e-3
#define HIDDEN 32

typedef struct Got {
    float v[HIDDEN];
    int finishes, tokens;
    int32_t tokens_seen[8];
    FinishReason finish;
} Got;

static void collect(const EngineOutput *o, void *user) {
    Got *g = user;
    if (o->has_token && g->tokens < 8) g->tokens_seen[g->tokens++] = o->token;
    if (o->finish == FINISH_NONE) return;
    g->finishes++;
    g->finish = o->finish;
    if (o->embedding) memcpy(g->v, o->embedding, sizeof(float) * HIDDEN);
}

static double cosine_distance(const float *a, json_t *ref) {
    double dot = 0, na = 0, nb = 0;
    for (int i = 0; i < HIDDEN; i++) {
        double b = json_real_value(json_array_get(ref, (size_t)i));
        dot += a[i] * b, na += (double)a[i] * a[i], nb += b * b;
    }
    return 1 - dot / sqrt(na * nb);
}

static Engine *open_engine(ModelWeights *w, Runner **r, int max_tokens) {
    Error err = {0};
    cr_assert(model_weights_load(w, EMBED_MODEL, &err) == 0, "%s", err.msg);
    RunnerOptions o = runner_default_options();
    o.device = "cuda";
    o.block_size = 16;
    o.max_num_batched_tokens = max_tokens;
    o.max_num_seqs = 16;
    o.max_model_len = 2048;
    o.num_gpu_blocks_override = 512;
    *r = cuda_runner_create(w, &o, &err);
    cr_assert(*r, "%s", err.msg);
    Engine *e = engine_create(w, *r, &err);
    cr_assert(e, "%s", err.msg);
    return e;
}

static void run_all(Engine *e) {
    Error err = {0};
    for (int i = 0; i < 10000 && engine_has_work(e); i++) cr_assert(engine_step(e, &err) >= 0, "%s", err.msg);
}

static void submit(Engine *e, json_t *row, PoolingMode mode, Got *g) {
    int n;
    int32_t *ids = json_ids(json_object_get(row, "ids"), &n);
    EngineRequest req = {.prompt = ids, .prompt_len = n, .pooling = mode, .on_output = collect, .user = g};
    Error err = {0};
    cr_assert(engine_submit(e, &req, NULL, &err) == 0, "%s", err.msg);
    free(ids);
}

Test(cuda_embed, golden_every_pooling_batched_and_chunked, .timeout = 120) {
    require_gpu();
    json_error_t jerr;
    json_t *golden = json_load_file(EMBED_GOLDEN, 0, &jerr);
    cr_assert(golden, "%s", jerr.text);
    static const char *const keys[] = {NULL, "last", "mean", "cls"};
    const char *cases[] = {"single", "batch", "shared_prefix", "long"};
    ModelWeights w;
    Runner *r;
    Engine *e = open_engine(&w, &r, 64);
    for (PoolingMode m = POOLING_LAST; m <= POOLING_CLS; m++) {
        double worst = 0;
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            json_t *c = json_object_get(json_object_get(golden, "cases"), cases[k]);
            size_t n = json_array_size(c);
            Got got[4] = {0};
            for (size_t i = 0; i < n; i++) submit(e, json_array_get(c, i), m, &got[i]);
            run_all(e);
            for (size_t i = 0; i < n; i++) {
                cr_assert_eq(got[i].finish, FINISH_STOP);
                cr_assert_eq(got[i].tokens, 0);
                double d = cosine_distance(got[i].v, json_object_get(json_array_get(c, i), keys[m]));
                cr_expect(d <= EMBED_GPU_TOL, "%s input %zu, %s pooling: cosine distance %g", cases[k], i, keys[m], d);
                worst = fmax(worst, d);
            }
        }
        cr_log_info("cuda, %s pooling: largest cosine distance %.3g", keys[m], worst);
    }
    engine_destroy(e);
    runner_destroy(r);
    model_weights_free(&w);
    json_decref(golden);
}

/* Pooling rows in a step with a generation row: its greedy tokens are the
 * ones it gets alone. */
Test(cuda_embed, beside_generation, .timeout = 120) {
    require_gpu();
    json_error_t jerr;
    json_t *golden = json_load_file(EMBED_GOLDEN, 0, &jerr);
    cr_assert(golden, "%s", jerr.text);
    json_t *row = json_array_get(json_object_get(json_object_get(golden, "cases"), "long"), 0);
    int32_t prompt[] = {9707, 11, 1879};
    SamplingParams p = sampling_params_default();
    p.temperature = 0;
    p.max_tokens = 8;
    Got gen[2] = {0}, emb = {0};
    for (int pass = 0; pass < 2; pass++) {
        ModelWeights w;
        Runner *r;
        Engine *e = open_engine(&w, &r, 128);
        EngineRequest req = {.prompt = prompt, .prompt_len = 3, .params = p, .on_output = collect, .user = &gen[pass]};
        Error err = {0};
        cr_assert(engine_submit(e, &req, NULL, &err) == 0, "%s", err.msg);
        if (pass == 1) submit(e, row, POOLING_MEAN, &emb);
        run_all(e);
        engine_destroy(e);
        runner_destroy(r);
        model_weights_free(&w);
    }
    cr_assert_eq(gen[0].tokens, 8);
    cr_assert_arr_eq(gen[0].tokens_seen, gen[1].tokens_seen, sizeof gen[0].tokens_seen);
    double d = cosine_distance(emb.v, json_object_get(row, "mean"));
    cr_expect(d <= EMBED_GPU_TOL, "cosine distance %g", d);
    cr_log_info("cuda, mean pooling beside generation: cosine distance %.3g", d);
    json_decref(golden);
}
