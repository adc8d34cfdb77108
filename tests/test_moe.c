/*
 * test_moe.c - Qwen3 mixture of experts on the CPU: routing (ties, k equal
 * to the number of experts, norm_topk_prob off, NaN), the sparse MLP against
 * a naive double-precision reference with uneven expert loads (one expert
 * every token picks, one none does), and the MoE fixture's golden greedy
 * tokens through the whole engine with chunked prefill, preemption and the
 * prefix cache. The golden logits themselves are in test_golden.c.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/cpu_moe.h"
#include "base/half.h"
#include "engine/engine.h"
#include "helpers.h"

/* ---- routing ------------------------------------------------------------------------------ */

Test(moe_route, ties_go_to_the_lower_expert) {
    float logits[8] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    int32_t ids[3];
    float w[3];
    moe_route(logits, 8, 3, true, ids, w);
    for (int j = 0; j < 3; j++) {
        cr_expect_eq(ids[j], j);
        cr_expect_float_eq(w[j], 1.0f / 3, 1e-6);
    }
    moe_route(logits, 8, 3, false, ids, w);
    for (int j = 0; j < 3; j++) cr_expect_float_eq(w[j], 1.0f / 8, 1e-6, "unnormalised: softmax");
    float some_tied[5] = {1, 3, 2, 3, 2};
    int32_t ids5[4];
    float w5[4];
    moe_route(some_tied, 5, 4, false, ids5, w5);
    int32_t want[4] = {1, 3, 2, 4};
    for (int j = 0; j < 4; j++) cr_expect_eq(ids5[j], want[j], "choice %d: %d", j, ids5[j]);
}

Test(moe_route, k_equal_to_the_number_of_experts) {
    float logits[6] = {-1.0f, 4.0f, 0.25f, 2.0f, -3.0f, 1.0f};
    int32_t ids[6];
    float w[6];
    moe_route(logits, 6, 6, true, ids, w);
    int32_t want[6] = {1, 3, 5, 2, 0, 4};
    double sum = 0, z = 0;
    for (int e = 0; e < 6; e++) z += exp(logits[e] - 4.0);
    for (int j = 0; j < 6; j++) {
        cr_expect_eq(ids[j], want[j]);
        cr_expect_float_eq(w[j], exp(logits[ids[j]] - 4.0) / z, 1e-6);
        sum += w[j];
    }
    cr_expect_float_eq(sum, 1.0, 1e-6);
}

Test(moe_route, norm_topk_prob_off_keeps_softmax_weights) {
    float logits[4] = {2.0f, 1.0f, 0.0f, -1.0f};
    int32_t ids[2];
    float on[2], off[2];
    moe_route(logits, 4, 2, true, ids, on);
    moe_route(logits, 4, 2, false, ids, off);
    double z = exp(0.0) + exp(-1.0) + exp(-2.0) + exp(-3.0);
    cr_expect_float_eq(off[0], 1.0 / z, 1e-6);
    cr_expect_float_eq(off[1], exp(-1.0) / z, 1e-6);
    cr_expect_float_eq(on[0], off[0] / (off[0] + off[1]), 1e-6);
    cr_expect_lt(off[0] + off[1], 0.99);
}

Test(moe_route, nan_logits_still_route_in_range) {
    float logits[4] = {NAN, NAN, NAN, NAN};
    int32_t ids[2] = {-1, -1};
    float w[2];
    moe_route(logits, 4, 2, true, ids, w);
    cr_expect(ids[0] == 0 && ids[1] == 1, "%d %d", ids[0], ids[1]);
}

/* ---- the sparse MLP against a naive reference --------------------------------------------- */

enum { E = 8, K = 2, H = 32, MI = 16, T = 13 };

static uint64_t rng = 0x1234567;
static float uniform(void) { /* [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static double bf(uint16_t v) { return bf16_to_f32(v); }

static void random_bf16(uint16_t *v, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) v[i] = f32_to_bf16(uniform() * scale);
}

/* Round the matmuls' inputs to bf16 as --dtype bfloat16 does. */
static bool reference_rounds;

static double input(double v) { return reference_rounds ? bf16_to_f32(f32_to_bf16((float)v)) : v; }

/* out[H] for token x, in double: route, then each chosen expert's MLP. */
static void reference(const uint16_t *router, uint16_t (*gate)[MI * H], uint16_t (*up)[MI * H],
                      uint16_t (*down)[H * MI], const float *x_in, double *out, int *chosen) {
    double logit[E], p[E], top = -1e300, z = 0, x[H];
    for (int i = 0; i < H; i++) x[i] = input(x_in[i]);
    for (int e = 0; e < E; e++) {
        logit[e] = 0;
        for (int i = 0; i < H; i++) logit[e] += bf(router[e * H + i]) * x[i];
        top = fmax(top, logit[e]);
    }
    for (int e = 0; e < E; e++) z += p[e] = exp(logit[e] - top);
    int ids[K];
    double w[K], kept = 0;
    bool taken[E] = {0};
    for (int j = 0; j < K; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
        taken[best] = true;
        ids[j] = best;
        kept += w[j] = p[best] / z;
        chosen[best]++;
    }
    memset(out, 0, sizeof(double) * H);
    for (int j = 0; j < K; j++) {
        int e = ids[j];
        double act[MI];
        for (int m = 0; m < MI; m++) {
            double g = 0, u = 0;
            for (int i = 0; i < H; i++) {
                g += bf(gate[e][m * H + i]) * x[i];
                u += bf(up[e][m * H + i]) * x[i];
            }
            act[m] = input(g / (1 + exp(-g)) * u);
        }
        for (int i = 0; i < H; i++) {
            double y = 0;
            for (int m = 0; m < MI; m++) y += bf(down[e][i * MI + m]) * act[m];
            out[i] += w[j] / kept * y;
        }
    }
}

/* bf16: the matmul inputs rounded (cpu_matmul_set_bf16_inputs; the router
 * through cpu_matmul, the experts through cpu_moe's own rounding), against
 * a reference that rounds the same values; the tolerance allows for a
 * value near a bf16 rounding boundary going the other way (float32 vs
 * double before the rounding). */
static void sparse_mlp_against_reference(bool bf16) {
    static uint16_t router[E * H], gate[E][MI * H], up[E][MI * H], down[E][H * MI];
    random_bf16(router, E * H, 0.3f);
    for (int i = 0; i < H; i++) {
        router[2 * H + i] = f32_to_bf16(0.5f);  /* every token's first choice */
        router[5 * H + i] = f32_to_bf16(-1.0f); /* nobody's */
    }
    for (int e = 0; e < E; e++) {
        random_bf16(gate[e], MI * H, 0.4f);
        random_bf16(up[e], MI * H, 0.4f);
        random_bf16(down[e], H * MI, 0.4f);
    }
    ExpertWeights experts[E];
    for (int e = 0; e < E; e++)
        experts[e] = (ExpertWeights){
            {.data = gate[e], .type = WEIGHT_BF16, .rows = MI, .cols = H},
            {.data = up[e], .type = WEIGHT_BF16, .rows = MI, .cols = H},
            {.data = down[e], .type = WEIGHT_BF16, .rows = H, .cols = MI}};
    LayerWeights L = {.router = {.data = router, .type = WEIGHT_BF16, .rows = E, .cols = H},
                      .experts = experts};
    ModelConfig c = {.hidden_size = H, .num_experts = E, .num_experts_per_tok = K,
                     .moe_intermediate_size = MI, .norm_topk_prob = true};
    float x[T * H], out[T * H];
    for (int i = 0; i < T * H; i++) x[i] = 0.5f + 0.5f * fabsf(uniform());

    Error err = {0};
    ThreadPool *pool = thread_pool_create(2, &err);
    cr_assert(pool, "%s", err.msg);
    CpuMatmul *mm = cpu_matmul_create(pool, T, H, &err);
    cr_assert(mm, "%s", err.msg);
    cpu_matmul_set_bf16_inputs(mm, bf16);
    reference_rounds = bf16;
    double tol = bf16 ? 2e-3 : 1e-4;
    CpuMoe *moe = cpu_moe_create(pool, mm, &c, T, &err);
    cr_assert(moe, "%s", err.msg);
    for (int n = 1; n <= T; n += 6) { /* 1, 7 and 13 tokens in a step */
        cpu_moe(moe, out, x, n, &L);
        int chosen[E] = {0};
        double worst = 0;
        for (int t = 0; t < n; t++) {
            double want[H];
            reference(router, gate, up, down, x + t * H, want, chosen);
            for (int i = 0; i < H; i++) worst = fmax(worst, fabs(out[t * H + i] - want[i]) / (1 + fabs(want[i])));
        }
        cr_expect_lt(worst, tol, "%s, %d tokens: relative error %g", bf16 ? "bf16" : "float32", n, worst);
        cr_expect_eq(chosen[2], n, "expert 2 is every token's");
        cr_expect_eq(chosen[5], 0, "expert 5 is nobody's");
    }
    /* A token alone or among others: the same up to the matmul kernels' rounding. */
    float alone[H];
    cpu_moe(moe, alone, x + 6 * H, 1, &L);
    cpu_moe(moe, out, x, T, &L);
    for (int i = 0; i < H; i++)
        cr_expect(fabsf(alone[i] - out[6 * H + i]) <= (float)tol / 10 * (1 + fabsf(alone[i])),
                  "token 6 alone vs among 13");
    if (bf16) { /* the rounding happened: the unrounded reference is further off */
        reference_rounds = false;
        double want[H], off = 0;
        int chosen[E] = {0};
        reference(router, gate, up, down, x + 6 * H, want, chosen);
        for (int i = 0; i < H; i++) off = fmax(off, fabs(out[6 * H + i] - want[i]));
        cr_expect_gt(off, 1e-4, "bf16 inputs gave the float32 result");
    }
    cpu_moe_destroy(moe);
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
}

Test(moe, sparse_mlp_matches_a_naive_reference) { sparse_mlp_against_reference(false); }
Test(moe, sparse_mlp_with_bf16_inputs) { sparse_mlp_against_reference(true); }

/* ---- loading ---------------------------------------------------------------------------- */

/* The fixture's checkpoint under a config that disagrees with it. */
static void expect_load_error(const char *from, const char *to, const char *needle) {
    char *dir = make_temp_dir(), cwd[1024], path[1400], target[1400];
    cr_assert(getcwd(cwd, sizeof cwd));
    snprintf(target, sizeof target, "%s/" TINY_MOE_MODEL "/model.safetensors", cwd);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    cr_assert(symlink(target, path) == 0);
    char *cfg = read_text(TINY_MOE_MODEL "/config.json");
    char *at = strstr(cfg, from);
    cr_assert(at, "%s not in the fixture's config", from);
    char edited[4096];
    snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - cfg), cfg, to, at + strlen(from));
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, edited);
    ModelWeights w;
    Error err = {0};
    cr_expect(model_weights_load(&w, dir, &err) == -1, "loaded with %s", to);
    cr_expect(strstr(err.msg, needle), "'%s' does not say '%s'", err.msg, needle);
    free(cfg);
    rm_rf(dir);
    free(dir);
}

Test(moe, checkpoint_must_match_the_config) {
    expect_load_error("\"num_experts\": 16", "\"num_experts\": 17",
                      "'model.layers.0.mlp.gate.weight' has shape [16, 32] but config.json implies [17, 32]");
    expect_load_error("\"moe_intermediate_size\": 48", "\"moe_intermediate_size\": 40",
                      "'model.layers.0.mlp.experts.0.gate_proj.weight' has shape [48, 32]");
    expect_load_error("\"mlp_only_layers\": [\n    1\n  ]", "\"mlp_only_layers\": []",
                      "model.layers.1.mlp.gate.weight");
}

Test(moe, sizes_count_routed_experts_only) {
    ModelWeights w;
    Error err = {0};
    cr_assert(model_weights_load(&w, TINY_MOE_MODEL, &err) == 0, "%s", err.msg);
    ModelSize s = model_weights_size(&w);
    const ModelConfig *c = &w.config;
    double expert = 3.0 * c->moe_intermediate_size * c->hidden_size;
    cr_expect_float_eq(s.total_params - s.active_params, 2 * (c->num_experts - c->num_experts_per_tok) * expert +
                       ((double)c->vocab_size - 1) * c->hidden_size, 0.5,
                       "two sparse layers' idle experts and all but one embedding row");
    /* bf16 matrices, float32 norms (as they are held in memory) */
    double norms = c->num_layers * (2.0 * c->hidden_size + 2.0 * c->head_dim) + c->hidden_size;
    cr_expect_float_eq(s.bytes_per_token, 2 * (s.active_params - norms) + 4 * norms, 0.5, "bf16");
    model_weights_free(&w);
}

/* ---- the fixture through the engine ------------------------------------------------------- */

typedef struct Greedy {
    int32_t ids[16];
    int n;
    bool done;
} Greedy;

static void collect(const EngineOutput *o, void *user) {
    Greedy *g = user;
    if (o->has_token && g->n < 16) g->ids[g->n++] = o->token;
    if (o->finish != FINISH_NONE) g->done = true;
}

/* All ten golden prompts at once, twice: 40 blocks of 16 tokens cannot hold
 * them all (preemption), 64 tokens per step splits the long prompts (chunked
 * prefill), and the second round finds the first's blocks (prefix cache). */
Test(moe, golden_greedy_through_the_engine, .timeout = 120) {
    ModelWeights w;
    Error err = {0};
    cr_assert(model_weights_load(&w, TINY_MOE_MODEL, &err) == 0, "%s", err.msg);
    RunnerOptions o = runner_default_options();
    o.block_size = 16;
    o.kv_cache_dtype = KV_CACHE_F32; /* golden greedy tokens: float32 precision throughout */
    o.dtype = COMPUTE_F32;
    o.kv_cache_bytes = cpu_runner_block_bytes(&w.config, 16, o.kv_cache_dtype) * 40;
    o.max_num_batched_tokens = 64;
    o.max_num_seqs = 16;
    o.max_model_len = 1024;
    Runner *r = cpu_runner_create(&w, &o, &err);
    cr_assert(r, "%s", err.msg);
    Engine *e = engine_create(&w, r, &err);
    cr_assert(e, "%s", err.msg);
    json_t *g = golden_load_from(&TINY_MOE);
    json_t *prompts = json_object_get(g, "prompts");
    size_t n = json_array_size(prompts);
    for (int round = 0; round < 2; round++) {
        Greedy got[10] = {0};
        int32_t *ids[10];
        for (size_t i = 0; i < n; i++) {
            int len;
            ids[i] = json_ids(json_object_get(json_array_get(prompts, i), "prompt_ids"), &len);
            SamplingParams p = sampling_params_default();
            p.max_tokens = 16;
            p.ignore_eos = true;
            EngineRequest req = {.prompt = ids[i], .prompt_len = len, .params = p,
                                 .on_output = collect, .user = &got[i]};
            cr_assert(engine_submit(e, &req, NULL, &err) == 0, "%s", err.msg);
        }
        for (int steps = 0; engine_has_work(e); steps++) {
            cr_assert(engine_step(e, &err) >= 0, "%s", err.msg);
            cr_assert_lt(steps, 10000);
        }
        for (size_t i = 0; i < n; i++) {
            json_t *p = json_array_get(prompts, i);
            int steps;
            int32_t *want = json_ids(json_object_get(p, "greedy_ids"), &steps);
            cr_expect(got[i].done && got[i].n == steps, "%s: %d tokens", json_string_value(json_object_get(p, "name")), got[i].n);
            for (int s = 0; s < steps && s < got[i].n; s++)
                cr_expect_eq(got[i].ids[s], want[s], "round %d, %s step %d: %d, golden %d", round,
                             json_string_value(json_object_get(p, "name")), s, got[i].ids[s], want[s]);
            free(want);
            free(ids[i]);
        }
    }
    EngineStats st = engine_stats(e);
    cr_expect_gt(st.preemptions, 0, "the cache was meant to be too small for all at once");
    cr_expect_gt(st.prefix_hit_tokens, 0, "the second round reuses the first's blocks");
    json_decref(g);
    engine_destroy(e);
    runner_destroy(r);
    model_weights_free(&w);
}

/* ---- --load-format dummy -------------------------------------------------------------------- */

/* A folder with the MoE config and nothing else: no weights, no tokenizer. */
Test(moe, dummy_weights_from_the_config_alone, .timeout = 60) {
    char *dir = make_temp_dir(), path[512], args[1024];
    char *cfg = read_text(TINY_MOE_MODEL "/config.json");
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, cfg);
    char *out1, *out2, *err;
    snprintf(args, sizeof args, "generate --model %s --load-format dummy --prompt-ids 1,2,3 "
                                "--max-tokens 6 --ignore-eos --json --quiet", dir);
    cr_assert_eq(run_nanovllm(args, &out1, &err), 0, "%s", err);
    free(err);
    cr_assert_eq(run_nanovllm(args, &out2, &err), 0, "%s", err);
    free(err);
    cr_expect_str_eq(out1, out2, "the same seed, the same weights, the same tokens");
    free(out2);
    json_t *g = json_loads(out1, 0, NULL);
    cr_expect_eq(json_array_size(json_object_get(g, "ids")), 6);
    json_decref(g);
    snprintf(args, sizeof args, "bench --model %s --load-format dummy --num-seqs 4 --min-input 8 "
                                "--max-input 16 --min-output 4 --max-output 8 --json --quiet", dir);
    char *bench;
    cr_assert_eq(run_nanovllm(args, &bench, &err), 0, "%s", err);
    free(err);
    json_t *b = json_loads(bench, 0, NULL);
    cr_assert(b, "%s", bench);
    double total = json_real_value(json_object_get(b, "total_params"));
    double active = json_real_value(json_object_get(b, "active_params"));
    cr_expect(active > 0 && active < total, "active %g of %g", active, total);
    cr_expect_gt(json_integer_value(json_object_get(b, "output_tokens")), 0);
    json_decref(b);
    snprintf(args, sizeof args, "generate --model %s --prompt-ids 1,2,3", dir);
    cr_expect_eq(run_nanovllm(args, &out2, &err), 1, "without dummy, the missing checkpoint");
    cr_expect(strstr(err, "model.safetensors"), "%s", err);
    free(err);
    free(out2);
    snprintf(args, sizeof args, "generate --model %s --load-format pt --prompt-ids 1", dir);
    cr_expect_eq(run_nanovllm(args, &out2, &err), 2);
    cr_expect(strstr(err, "--load-format"), "%s", err);
    free(err);
    free(out2);
    free(out1);
    free(bench);
    free(cfg);
    rm_rf(dir);
    free(dir);
}
