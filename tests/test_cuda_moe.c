/*
 * test_cuda_moe.c - the MoE layer on the GPU against the CPU: the routing
 * kernel against moe_route, the whole sparse MLP against cpu_moe with
 * uneven expert loads, the sparse layer alone against a float64 reference
 * at 1 to 256 tokens under three forced routings, the CUDA runner on the
 * MoE fixture's decode graphs against eager steps (its golden is in
 * test_cuda_runner.c) and dummy weights generated on the device against
 * the same generated on the host. Skipped, with the reason, where there is
 * no GPU. The token counts cover the three ways cuda_moe multiplies: at
 * most 8 tokens the pair gemvs, then (16 experts, 4 a token) up to 96 the
 * tile gemvs, beyond the WMMA GEMM. Tolerances against the CPU are the
 * dense CUDA tests' (bf16 GEMM inputs): relative error 2e-2; against the
 * float64 reference, see there.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "cpu/cpu_moe.h"
#include "cpu/cpu_runner.h"
#include "cuda/cuda_moe.h"
#include "cuda/cuda_runner.h"
#include "cuda_test.h"
#include "helpers.h"

#define VOCAB 151936
#define REL_TOL 2e-2

Test(cuda_moe, routing_matches_the_cpu, .timeout = 60) {
    require_gpu();
    enum { T = 64, E = 16, K = 4 };
    float *logits = random_floats((size_t)T * E, 3.0f, 11);
    for (int e = 0; e < E; e++) logits[5 * E + e] = 0.25f;           /* all tied */
    logits[6 * E + 3] = logits[6 * E + 9] = logits[6 * E + 12] = 8.0f; /* three tied on top */
    for (int norm = 0; norm < 2; norm++) {
        Error err = {0};
        float *d_logits = dev_copy(logits, sizeof(float) * T * E);
        int32_t *d_ids = dev_poisoned(sizeof(int32_t) * T * K);
        float *d_w = dev_poisoned(sizeof(float) * T * K);
        cr_assert(cuda_moe_route(d_ids, d_w, d_logits, T, E, K, norm, NULL, &err) == 0, "%s", err.msg);
        int32_t ids[T * K];
        float w[T * K];
        dev_fetch(ids, d_ids, sizeof ids);
        dev_fetch(w, d_w, sizeof w);
        for (int t = 0; t < T; t++) {
            int32_t want_ids[K];
            float want_w[K];
            moe_route(logits + (size_t)t * E, E, K, norm, want_ids, want_w);
            for (int j = 0; j < K; j++) {
                cr_expect_eq(ids[t * K + j], want_ids[j], "token %d choice %d: GPU %d, CPU %d", t, j,
                             ids[t * K + j], want_ids[j]);
                cr_expect(fabsf(w[t * K + j] - want_w[j]) <= 1e-5f, "token %d choice %d: %g vs %g", t,
                          j, w[t * K + j], want_w[j]);
            }
        }
        cuda_free(d_logits);
        cuda_free(d_ids);
        cuda_free(d_w);
    }
    free(logits);
}

/* The sparse MLP of random experts, one of which every token picks and one
 * none does, for 1, 7 and 13 tokens: GPU against cpu_moe. */
Test(cuda_moe, sparse_mlp_matches_the_cpu, .timeout = 60) {
    require_gpu();
    enum { E = 8, K = 2, H = 32, MI = 16, T = 13 };
    float *unused;
    uint16_t *router = random_bf16((size_t)E * H, 0.3f, 1, &unused);
    free(unused);
    for (int i = 0; i < H; i++) {
        router[2 * H + i] = f32_to_bf16(0.5f);
        router[5 * H + i] = f32_to_bf16(-1.0f);
    }
    uint16_t *gate_up = random_bf16((size_t)E * 2 * MI * H, 0.4f, 2, &unused); /* [E][gate; up] */
    free(unused);
    uint16_t *down = random_bf16((size_t)E * H * MI, 0.4f, 3, &unused);
    free(unused);
    ExpertWeights experts[E];
    for (int e = 0; e < E; e++)
        experts[e] = (ExpertWeights){
            {.data = gate_up + (size_t)e * 2 * MI * H, .type = WEIGHT_BF16, .rows = MI, .cols = H},
            {.data = gate_up + ((size_t)e * 2 + 1) * MI * H, .type = WEIGHT_BF16, .rows = MI, .cols = H},
            {.data = down + (size_t)e * H * MI, .type = WEIGHT_BF16, .rows = H, .cols = MI}};
    LayerWeights L = {.router = {.data = router, .type = WEIGHT_BF16, .rows = E, .cols = H},
                      .experts = experts};
    ModelConfig c = {.hidden_size = H, .num_experts = E, .num_experts_per_tok = K,
                     .moe_intermediate_size = MI, .norm_topk_prob = true};
    /* h as the GPU sees it: bf16, so both sides start from the same values */
    uint16_t h[T * H];
    float x[T * H];
    uint64_t seed = 9;
    for (int i = 0; i < T * H; i++) {
        h[i] = f32_to_bf16(0.5f + 0.5f * fabsf(test_uniform(&seed)));
        x[i] = bf16_to_f32(h[i]);
    }
    Error err = {0};
    ThreadPool *pool = thread_pool_create(2, &err);
    CpuMatmul *mm = pool ? cpu_matmul_create(pool, T, H, &err) : NULL;
    CpuMoe *cpu = mm ? cpu_moe_create(pool, mm, &c, T, &err) : NULL;
    cr_assert(cpu, "%s", err.msg);
    CudaMoe gpu;
    cr_assert(cuda_moe_create(&gpu, H, MI, E, K, true, T, &err) == 0, "%s", err.msg);
    uint16_t *d_h = dev_copy(h, sizeof h), *d_gate_up = dev_copy(gate_up, sizeof(uint16_t) * E * 2 * MI * H);
    uint16_t *d_down = dev_copy(down, sizeof(uint16_t) * E * H * MI);
    float *d_delta = dev_poisoned(sizeof(float) * T * H);
    for (int n = 1; n <= T; n += 6) {
        float want[T * H], got[T * H];
        cpu_moe(cpu, want, x, n, &L);
        upload_router_logits(gpu.logits, router, x, n, E, H);
        cr_assert(cuda_moe(&gpu, d_delta, d_h, n, (CudaMatrix){d_gate_up, NULL, NULL}, (CudaMatrix){d_down, NULL, NULL}, NULL,
                           &err) == 0,
                  "%s", err.msg);
        dev_fetch(got, d_delta, sizeof(float) * n * H);
        double rel = rel_error(got, want, (size_t)n * H);
        cr_expect(rel <= REL_TOL, "%d tokens: GPU vs CPU relative error %g", n, rel);
        cr_log_info("MoE layer, %d tokens: GPU vs CPU relative error %.2e", n, rel);
    }
    cuda_free(d_h);
    cuda_free(d_gate_up);
    cuda_free(d_down);
    cuda_free(d_delta);
    cuda_moe_free(&gpu);
    cpu_moe_destroy(cpu);
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
    free(router);
    free(gate_up);
    free(down);
}

/* ---- the runner on the MoE fixture --------------------------------------------------------- */

static Runner *open_moe(ModelWeights *w, bool cuda, bool eager, bool dummy) {
    Error err = {0};
    if (dummy) {
        ModelConfig c;
        cr_assert(model_config_load(&c, TINY_MOE_MODEL, &err) == 0, "%s", err.msg);
        cr_assert(model_weights_load_dummy(w, &c, 7, &err) == 0, "%s", err.msg);
    } else {
        cr_assert(model_weights_load(w, TINY_MOE_MODEL, &err) == 0, "%s", err.msg);
    }
    /* The CPU runner is the reference: float32 cache (CUDA's is bf16). */
    RunnerOptions o = runner_test_options(cuda ? "cuda" : "cpu", &w->config, 16, 256,
                                          cuda ? KV_CACHE_BF16 : KV_CACHE_F32, cuda ? COMPUTE_BF16 : COMPUTE_F32,
                                          eager);
    Runner *r = cuda ? cuda_runner_create(w, &o, &err) : cpu_runner_create(w, &o, &err);
    cr_assert(r, "%s", err.msg);
    return r;
}

/* Decode steps of 5 sequences (bucket 8, padded) from a graph and eagerly:
 * the same logits, bit for bit (the same kernels on the same inputs). */
Test(cuda_moe, decode_graphs_match_eager_steps, .timeout = 120) {
    require_gpu();
    ModelWeights wg, we;
    Runner *graphs = open_moe(&wg, true, false, false), *eager = open_moe(&we, true, true, false);
    enum { S = 5, LEN = 40 };
    int32_t ids[S][LEN + 4], tables[S][4];
    uint64_t seed = 3;
    for (int s = 0; s < S; s++) {
        for (int i = 0; i < LEN + 4; i++) ids[s][i] = (int32_t)((test_uniform(&seed) + 1.0f) * 70000);
        for (int b = 0; b < 4; b++) tables[s][b] = s * 4 + b;
    }
    Runner *both[2] = {graphs, eager};
    float *logits[2];
    for (int k = 0; k < 2; k++) {
        logits[k] = malloc(sizeof(float) * S * VOCAB);
        RunnerSeq seqs[S];
        int32_t tok[S];
        Error err = {0};
        for (int s = 0; s < S; s++)
            seqs[s] = (RunnerSeq){.tokens = ids[s], .num_tokens = LEN, .block_table = tables[s],
                                  .num_blocks = 4, .compute_logits = true};
        RunnerBatch prefill = {.seqs = seqs, .num_seqs = S};
        cr_assert(runner_step(both[k], &prefill, tok, &err) == 0, "%s", err.msg);
        for (int s = 0; s < S; s++)
            seqs[s] = (RunnerSeq){.tokens = &ids[s][LEN], .num_tokens = 1, .start_pos = LEN,
                                  .block_table = tables[s], .num_blocks = 4, .compute_logits = true};
        RunnerBatch decode = {.seqs = seqs, .num_seqs = S, .last_logits = logits[k]};
        cr_assert(runner_step(both[k], &decode, tok, &err) == 0, "%s", err.msg);
    }
    cr_expect(memcmp(logits[0], logits[1], sizeof(float) * S * VOCAB) == 0,
              "graph replay and eager decode differ");
    free(logits[0]);
    free(logits[1]);
    runner_destroy(graphs);
    runner_destroy(eager);
    model_weights_free(&wg);
    model_weights_free(&we);
}

/* --load-format dummy: the GPU fills its matrices itself; the model must be
 * the one the CPU builds on the host from the same seed. */
Test(cuda_moe, dummy_weights_on_the_device_match_the_host, .timeout = 120) {
    require_gpu();
    ModelWeights wc, wg;
    Runner *cpu = open_moe(&wc, false, true, true), *gpu = open_moe(&wg, true, true, true);
    int32_t ids[24], table[2] = {0, 1};
    for (int i = 0; i < 24; i++) ids[i] = 1000 + 3571 * i;
    float *a = malloc(sizeof(float) * 24 * VOCAB), *b = malloc(sizeof(float) * 24 * VOCAB);
    Runner *both[2] = {cpu, gpu};
    float *outs[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        Error err = {0};
        int32_t tok;
        RunnerSeq seq = {.tokens = ids, .num_tokens = 24, .block_table = table, .num_blocks = 2,
                         .compute_logits = true};
        RunnerBatch batch = {.seqs = &seq, .num_seqs = 1, .all_logits = outs[k]};
        cr_assert(runner_step(both[k], &batch, &tok, &err) == 0, "%s", err.msg);
    }
    double rel = rel_error(b, a, (size_t)24 * VOCAB);
    cr_expect(rel <= REL_TOL, "dummy weights: GPU vs CPU logits relative error %g", rel);
    cr_log_info("dummy MoE: GPU vs CPU logits relative error %.2e", rel);
    free(a);
    free(b);
    runner_destroy(cpu);
    runner_destroy(gpu);
    model_weights_free(&wc);
    model_weights_free(&wg);
}

/* ---- the sparse layer alone against a float64 reference -------------------------------------
 *
 * The fixture's shape (16 experts, 4 per token, hidden 32, width 48) at
 * token counts on both sides of the 16-row tiles and beyond, with three
 * routings forced by the router weights alone: random; one expert first
 * for every token (its router row holds a bias the others lack); every
 * token to the same four experts. h's last element is 1.0 for every token,
 * the bias column: a router row that is zero but for a bias B beats rows
 * of random entries in [-a, a] whenever B > 2 a (H - 1), whatever the other
 * elements of h in [-1, 1].
 *
 * The reference is routed by the GPU (its ids and weights, downloaded) on
 * the router logits the GPU was given, so a near-tie cannot move it away;
 * the routing itself is checked against moe_route. The expert MLPs are
 * then summed in double on the host from the same bf16 weights and bf16 h,
 * which are exact, rounding only where the GPU rounds: gate and up to
 * float32 (the GEMM's accumulator), the SiLU-and-mul to bf16 (the
 * activation's storage). What is left is the float32 accumulation order
 * (relative 1e-7 on an H100 in a similar check) and, rarely, an activation
 * whose float32 value sits on a bf16 rounding boundary and rounds the
 * other way: one element off by 2^-8 relative moves its token's output by
 * about 2^-8 / sqrt(width) = 6e-4. Hence: the whole output within 1e-4
 * relative, each token's row within 2e-3; a wrong expert, weight, row or
 * padding tile is off by order 1. On the development machine a float32
 * emulation of these steps came within 7e-7 of the reference (worst token
 * 1.1e-5) under all three routings, which held for all 256 tokens, and
 * cpu_moe (float32 activation) within 1.7e-3. */
enum { LE = 16, LK = 4, LH = 32, LW = 48, LMAX = 256 };

typedef enum { ROUTE_RANDOM, ROUTE_ONE_FIRST, ROUTE_ALL_TO_ONE_SET } Routing;

static const int FIRST_EXPERT = 5;
static const int SET_EXPERTS[LK] = {2, 7, 11, 13};

/* router [LE][LH] bf16 for a routing (the last column multiplies h's 1.0) */
static uint16_t *craft_router(Routing how) {
    float a = how == ROUTE_RANDOM ? 0.3f : 0.03f; /* bound 0.03 * 31 = 0.93 */
    uint64_t seed = 21;
    uint16_t *r = malloc(sizeof(uint16_t) * LE * LH);
    cr_assert(r);
    for (int e = 0; e < LE; e++)
        for (int i = 0; i < LH; i++) r[e * LH + i] = f32_to_bf16(a * test_uniform(&seed));
    if (how == ROUTE_ONE_FIRST) {
        for (int i = 0; i < LH; i++) r[FIRST_EXPERT * LH + i] = 0;
        r[FIRST_EXPERT * LH + LH - 1] = f32_to_bf16(2.0f); /* 2.0 > 2 x 0.93 */
    } else if (how == ROUTE_ALL_TO_ONE_SET) {
        for (int j = 0; j < LK; j++) {
            for (int i = 0; i < LH; i++) r[SET_EXPERTS[j] * LH + i] = 0;
            /* 3.0, 2.6, 2.2, 1.8: the last still beats 0.93 by more than 0.93 */
            r[SET_EXPERTS[j] * LH + LH - 1] = f32_to_bf16(3.0f - 0.4f * (float)j);
        }
    }
    return r;
}

static double silu_mul_as_the_gpu(double gate, double up) {
    float g = (float)gate, u = (float)up; /* the GEMM's float32 outputs */
    return bf16_to_f32(f32_to_bf16(g / (1.0f + expf(-g)) * u));
}

static void sparse_layer_case(Routing how, const char *what) {
    require_gpu();
    uint16_t *router = craft_router(how);
    float *unused;
    uint16_t *gate_up = random_bf16((size_t)LE * 2 * LW * LH, 0.4f, 2, &unused); /* [E][gate; up] */
    free(unused);
    uint16_t *down = random_bf16((size_t)LE * LH * LW, 0.4f, 3, &unused);
    free(unused);
    uint16_t *h = malloc(sizeof(uint16_t) * LMAX * LH);
    float *logits = malloc(sizeof(float) * LMAX * LE), *got = malloc(sizeof(float) * LMAX * LH);
    double *want = malloc(sizeof(double) * LMAX * LH);
    unsigned char *poison = malloc(sizeof(float) * LMAX * LH);
    cr_assert(h && logits && got && want && poison);
    memset(poison, 0xff, sizeof(float) * LMAX * LH);
    uint64_t seed = 9;
    for (int t = 0; t < LMAX; t++) {
        for (int i = 0; i < LH - 1; i++) h[t * LH + i] = f32_to_bf16(test_uniform(&seed));
        h[t * LH + LH - 1] = f32_to_bf16(1.0f);
    }
    /* the router logits the runner's GEMM would write (float32 accumulation) */
    for (int t = 0; t < LMAX; t++)
        for (int e = 0; e < LE; e++) {
            float s = 0;
            for (int i = 0; i < LH; i++) s += bf16_to_f32(router[e * LH + i]) * bf16_to_f32(h[t * LH + i]);
            logits[t * LE + e] = s;
        }
    Error err = {0};
    CudaMoe gpu;
    cr_assert(cuda_moe_create(&gpu, LH, LW, LE, LK, true, LMAX, &err) == 0, "%s", err.msg);
    uint16_t *d_h = dev_copy(h, sizeof(uint16_t) * LMAX * LH);
    uint16_t *d_gate_up = dev_copy(gate_up, sizeof(uint16_t) * LE * 2 * LW * LH);
    uint16_t *d_down = dev_copy(down, sizeof(uint16_t) * LE * LH * LW);
    float *d_delta = dev_copy(NULL, sizeof(float) * LMAX * LH);
    static const int counts[] = {1, 13, 15, 16, 17, 31, 32, 33, 64, 100, 256};
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
        int n = counts[c];
        cr_assert(cuda_upload(d_delta, poison, sizeof(float) * n * LH, &err) == 0, "%s", err.msg);
        cr_assert(cuda_upload(gpu.logits, logits, sizeof(float) * n * LE, &err) == 0, "%s", err.msg);
        cr_assert(cuda_moe(&gpu, d_delta, d_h, n, (CudaMatrix){d_gate_up, NULL, NULL}, (CudaMatrix){d_down, NULL, NULL}, NULL,
                           &err) == 0,
                  "%s", err.msg);
        dev_fetch(got, d_delta, sizeof(float) * n * LH);
        int32_t ids[LMAX * LK];
        float w[LMAX * LK];
        dev_fetch(ids, gpu.ids, sizeof(int32_t) * n * LK);
        dev_fetch(w, gpu.weights, sizeof(float) * n * LK);
        int misrouted = 0, off_plan = 0, bad_rows = 0, first_bad = -1;
        double num = 0, den = 0, worst_row = 0;
        for (int t = 0; t < n; t++) {
            int32_t rid[LK];
            float rw[LK];
            moe_route(logits + (size_t)t * LE, LE, LK, true, rid, rw);
            for (int j = 0; j < LK; j++)
                if (ids[t * LK + j] != rid[j] || fabsf(w[t * LK + j] - rw[j]) > 1e-5f) misrouted++;
            if (how == ROUTE_ONE_FIRST && ids[t * LK] != FIRST_EXPERT) off_plan++;
            if (how == ROUTE_ALL_TO_ONE_SET)
                for (int j = 0; j < LK; j++) {
                    bool in = false;
                    for (int q = 0; q < LK; q++) in |= ids[t * LK + j] == SET_EXPERTS[q];
                    off_plan += !in;
                }
            /* the float64 reference on the GPU's routing */
            double *y = want + (size_t)t * LH;
            for (int i = 0; i < LH; i++) y[i] = 0;
            for (int j = 0; j < LK; j++) {
                int e = ids[t * LK + j];
                cr_assert(e >= 0 && e < LE, "token %d choice %d: expert %d", t, j, e);
                const uint16_t *G = gate_up + (size_t)e * 2 * LW * LH, *U = G + (size_t)LW * LH;
                const uint16_t *D = down + (size_t)e * LH * LW;
                double act[LW];
                for (int r = 0; r < LW; r++) {
                    double g = 0, u = 0;
                    for (int i = 0; i < LH; i++) {
                        double x = bf16_to_f32(h[t * LH + i]);
                        g += bf16_to_f32(G[r * LH + i]) * x;
                        u += bf16_to_f32(U[r * LH + i]) * x;
                    }
                    act[r] = silu_mul_as_the_gpu(g, u);
                }
                for (int i = 0; i < LH; i++) {
                    double s = 0;
                    for (int r = 0; r < LW; r++) s += bf16_to_f32(D[i * LW + r]) * act[r];
                    y[i] += (double)w[t * LK + j] * s;
                }
            }
            double rn = 0, rd = 0;
            for (int i = 0; i < LH; i++) {
                double d = (double)got[t * LH + i] - y[i];
                rn += d * d;
                rd += y[i] * y[i];
            }
            num += rn;
            den += rd;
            double row = rd > 0 ? sqrt(rn / rd) : sqrt(rn);
            if (!(row <= 2e-3)) { /* NaN (an unwritten row) counts */
                if (first_bad < 0) first_bad = t;
                bad_rows++;
            }
            if (!(row <= worst_row)) worst_row = row;
        }
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        cr_log_info("MoE layer %s, %3d tokens: vs float64 reference %.2e (worst token %.2e), %d tokens "
                    "over 2e-3 (first %d), %d choices unlike moe_route, %d off the planned routing",
                    what, n, rel, worst_row, bad_rows, first_bad, misrouted, off_plan);
        cr_expect(rel <= 1e-4, "%s, %d tokens: relative error %g vs the float64 reference", what, n, rel);
        cr_expect(bad_rows == 0, "%s, %d tokens: %d tokens' rows off by more than 2e-3 (first %d)", what,
                  n, bad_rows, first_bad);
        cr_expect(misrouted == 0, "%s, %d tokens: %d choices differ from moe_route", what, n, misrouted);
        cr_expect(off_plan == 0, "%s, %d tokens: %d choices off the crafted routing", what, n, off_plan);
    }
    cuda_free(d_h);
    cuda_free(d_gate_up);
    cuda_free(d_down);
    cuda_free(d_delta);
    cuda_moe_free(&gpu);
    free(router);
    free(gate_up);
    free(down);
    free(h);
    free(logits);
    free(got);
    free(want);
    free(poison);
}

Test(cuda_moe, sparse_layer_random_routing_vs_float64, .timeout = 60) {
    sparse_layer_case(ROUTE_RANDOM, "random routing");
}
Test(cuda_moe, sparse_layer_one_expert_first_vs_float64, .timeout = 60) {
    sparse_layer_case(ROUTE_ONE_FIRST, "one expert first");
}
Test(cuda_moe, sparse_layer_all_to_one_expert_set_vs_float64, .timeout = 60) {
    sparse_layer_case(ROUTE_ALL_TO_ONE_SET, "all to one set of experts");
}
