/*
 * test_cpu_kernels.c - CPU kernels against plain float64 references (llm.c
 * style): every matmul strategy at every SIMD level this machine has, bf16
 * and f32 weights, odd sizes; the AMX activation split; attention over
 * scattered paged blocks; the small per-token ops.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_attention.h"
#include "cpu/cpu_matmul.h"
#include "cpu/cpu_matmul_amx.h"
#include "cpu/cpu_ops.h"
#include "base/cpu_isa.h"
#include "base/half.h"
#include "base/row_max.h"

static uint64_t rng = 88172645463325252ull;
static float uniform(void) { /* xorshift64, uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

static float *random_floats(size_t n) {
    float *v = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) v[i] = uniform();
    return v;
}

/* Relative error of y against a float64 reference, scaled by sum |x w| so
 * that cancellation does not inflate it. */
static void check_matmul(int M, int N, int K, WeightType type, MatmulStrategy strategy, CpuIsa isa,
                         CpuMatmul *mm) {
    float *x = random_floats((size_t)M * K);
    float *wf = random_floats((size_t)N * K);
    uint16_t *wb = malloc(sizeof(uint16_t) * (size_t)N * K);
    for (size_t i = 0; i < (size_t)N * K; i++) {
        wb[i] = f32_to_bf16(wf[i]);
        if (type == WEIGHT_BF16) wf[i] = bf16_to_f32(wb[i]);
    }
    Weight w = {.data = type == WEIGHT_BF16 ? (const void *)wb : wf, .type = type, .rows = N, .cols = K};
    float *y = malloc(sizeof(float) * (size_t)M * N);
    for (size_t i = 0; i < (size_t)M * N; i++) y[i] = NAN;
    cpu_matmul_with(mm, y, x, M, &w, strategy, isa);
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                ref += (double)x[(size_t)m * K + k] * wf[(size_t)n * K + k];
                mag += fabs((double)x[(size_t)m * K + k] * wf[(size_t)n * K + k]);
            }
            double err = fabs(y[(size_t)m * N + n] - ref) / (mag + 1e-30);
            /* float32 sums measure <= 2.1e-7 here at every level; dropping
             * AMX's third term (16-bit activations) gives ~1e-6. */
            cr_assert(err < 5e-7, "M=%d N=%d K=%d %s %s %s: y[%d,%d] = %.9g, want %.9g",
                      M, N, K, type == WEIGHT_BF16 ? "bf16" : "f32", matmul_strategy_name(strategy),
                      cpu_isa_name(isa), m, n, y[(size_t)m * N + n], ref);
        }
    }
    free(x);
    free(wf);
    free(wb);
    free(y);
}

Test(cpu_kernels, matmul_every_strategy_and_isa) {
    Error err = {0};
    ThreadPool *pool = thread_pool_create(3, &err);
    cr_assert(pool, "%s", err.msg);
    CpuMatmul *mm = cpu_matmul_create(pool, 80, 1100, &err);
    cr_assert(mm, "%s", err.msg);
    /* Odd shapes exercise every tail; the multiples of 16/32 reach AMX. */
    int shapes[][3] = {{1, 37, 33}, {2, 130, 100}, {3, 64, 64}, {5, 48, 1030}, {7, 17, 15},
                       {17, 96, 96}, {33, 160, 512}, {80, 48, 64}, {4, 32, 1024}};
    MatmulStrategy strategies[] = {MATMUL_ROWS, MATMUL_BLAS, MATMUL_AMX};
    for (int isa = CPU_ISA_SCALAR; isa <= (int)cpu_isa_detect(); isa++)
        for (size_t s = 0; s < 3; s++)
            for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
                for (int t = 0; t < 2; t++)
                    check_matmul(shapes[i][0], shapes[i][1], shapes[i][2], (WeightType)t,
                                 strategies[s], (CpuIsa)isa, mm);
    cr_log_info("matmul checked at SIMD levels scalar..%s", cpu_isa_name(cpu_isa_detect()));
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
}

Test(cpu_kernels, matmul_multi_matches_single) {
    Error err = {0};
    ThreadPool *pool = thread_pool_create(2, &err);
    CpuMatmul *mm = cpu_matmul_create(pool, 40, 256, &err);
    cr_assert(mm, "%s", err.msg);
    int M = 40, K = 256, rows[3] = {512, 128, 128};
    float *x = random_floats((size_t)M * K);
    Weight w[3];
    uint16_t *data[3];
    float *multi[3], *single[3];
    for (int i = 0; i < 3; i++) {
        data[i] = malloc(sizeof(uint16_t) * (size_t)rows[i] * K);
        for (size_t j = 0; j < (size_t)rows[i] * K; j++) data[i][j] = f32_to_bf16(uniform());
        w[i] = (Weight){.data = data[i], .type = WEIGHT_BF16, .rows = rows[i], .cols = K};
        multi[i] = malloc(sizeof(float) * (size_t)M * rows[i]);
        single[i] = malloc(sizeof(float) * (size_t)M * rows[i]);
        cpu_matmul(mm, single[i], x, M, &w[i]);
    }
    const Weight *ws[3] = {&w[0], &w[1], &w[2]};
    cpu_matmul_multi(mm, x, M, ws, multi, 3);
    for (int i = 0; i < 3; i++) {
        cr_expect(memcmp(multi[i], single[i], sizeof(float) * (size_t)M * rows[i]) == 0);
        free(data[i]);
        free(multi[i]);
        free(single[i]);
    }
    free(x);
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
}

/* The three bf16 terms of the AMX packing add up to each float32 exactly. */
Test(cpu_kernels, amx_split_is_exact) {
    if (!amx_available()) cr_skip_test("this CPU has no AMX (or the kernel refused tile state)");
    int M = 19, K = 64;
    float *x = random_floats((size_t)M * K);
    x[5] = 1e-30f;
    x[6] = -3.3e38f;
    x[7] = 1.0f + 0x1p-23f;
    uint16_t *packed = calloc(amx_packed_elems(M, K), sizeof(uint16_t));
    for (int g = 0; g < 2; g++) amx_pack_group(packed, x, M, K, g);
    for (int m = 0; m < 32; m++) {
        for (int k = 0; k < K; k++) {
            int g = m / 16, s = k / 32, kp = (k % 32) / 2, e = k % 2, steps = K / 32;
            float sum = 0;
            for (int t = 0; t < 3; t++)
                sum += bf16_to_f32(packed[(((size_t)g * steps + s) * 3 + t) * 512 + kp * 32 + (m % 16) * 2 + e]);
            float want = m < M ? x[(size_t)m * K + k] : 0.0f;
            cr_expect(sum == want, "x[%d,%d] = %.9g packs to %.9g", m, k, want, sum);
        }
    }
    free(packed);
    free(x);
}

/* Attention over a paged cache against a float64 reference: several
 * sequences with cached prefixes, scattered block ids, GQA group 4. */
Test(cpu_kernels, paged_attention) {
    enum { HEADS = 8, KV_HEADS = 2, D = 64, BS = 16, BLOCKS = 64 };
    Error err = {0};
    ThreadPool *pool = thread_pool_create(2, &err);
    AttentionShape shape = {HEADS, KV_HEADS, D, BS};
    CpuAttention *a = cpu_attention_create(pool, shape, 4, 256, &err);
    cr_assert(a, "%s", err.msg);
    float *kc = random_floats((size_t)BLOCKS * BS * KV_HEADS * D);
    float *vc = random_floats((size_t)BLOCKS * BS * KV_HEADS * D);
    int starts[3] = {0, 37, 100}, lens[3] = {70, 1, 33};
    int32_t tables[3][16];
    for (int s = 0; s < 3; s++)
        for (int b = 0; b < 16; b++) tables[s][b] = (int32_t)((s * 16 + b) * 7 % BLOCKS);
    RunnerSeq seqs[3];
    int32_t dummy[256] = {0};
    int T = 0;
    for (int s = 0; s < 3; s++) {
        seqs[s] = (RunnerSeq){.tokens = dummy, .num_tokens = lens[s], .start_pos = starts[s], .block_table = tables[s], .num_blocks = 16, .compute_logits = true};
        T += lens[s];
    }
    RunnerBatch batch = {.seqs = seqs, .num_seqs = 3};
    float *q = random_floats((size_t)T * HEADS * D);
    for (size_t i = 0; i < (size_t)T * HEADS * D; i++) q[i] *= 3; /* peaky softmax */
    float *out = malloc(sizeof(float) * (size_t)T * HEADS * D);
    cpu_attention(a, out, q, kc, vc, &batch);

    int t = 0;
    double worst = 0;
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < lens[s]; i++, t++) {
            int pos = starts[s] + i;
            for (int h = 0; h < HEADS; h++) {
                int g = h / (HEADS / KV_HEADS);
                double *score = malloc(sizeof(double) * (size_t)(pos + 1)), mx = -INFINITY, sum = 0;
                for (int j = 0; j <= pos; j++) {
                    size_t row = ((size_t)tables[s][j / BS] * KV_HEADS + g) * BS + j % BS; /* head-major blocks */
                    double d = 0;
                    for (int e = 0; e < D; e++)
                        d += (double)q[((size_t)t * HEADS + h) * D + e] * kc[row * D + e];
                    score[j] = d / sqrt((double)D);
                    mx = fmax(mx, score[j]);
                }
                for (int j = 0; j <= pos; j++) sum += (score[j] = exp(score[j] - mx));
                for (int e = 0; e < D; e++) {
                    double o = 0;
                    for (int j = 0; j <= pos; j++) {
                        size_t row = ((size_t)tables[s][j / BS] * KV_HEADS + g) * BS + j % BS;
                        o += score[j] / sum * vc[row * D + e];
                    }
                    worst = fmax(worst, fabs(o - out[((size_t)t * HEADS + h) * D + e]));
                }
                free(score);
            }
        }
    }
    cr_expect(worst < 1e-5, "attention differs from the float64 reference by %g", worst);
    free(q);
    free(out);
    free(kc);
    free(vc);
    cpu_attention_destroy(a);
    thread_pool_destroy(pool);
}

Test(cpu_kernels, per_token_ops) {
    float x[8] = {1, -2, 3, -4, 5, -6, 7, -8}, w[8] = {1, 1, 1, 1, 2, 2, 2, 2}, out[8];
    rmsnorm(out, x, w, 8, 1e-6f);
    double ms = (1 + 4 + 9 + 16 + 25 + 36 + 49 + 64) / 8.0;
    for (int i = 0; i < 8; i++)
        cr_expect(fabs(out[i] - x[i] / sqrt(ms + 1e-6) * w[i]) < 1e-6);

    double inv_freq[4];
    rope_inv_freq(inv_freq, 8, 10000.0);
    cr_expect(fabs(inv_freq[1] - pow(10000.0, -0.25)) < 1e-15);
    float cs[8], head[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    rope_cos_sin(cs, 3, inv_freq, 4);
    rope_apply(head, 8, cs);
    for (int i = 0; i < 4; i++) { /* NeoX: pairs (i, i + 4) rotate by 3 * inv_freq[i] */
        double c = cos(3 * inv_freq[i]), s = sin(3 * inv_freq[i]);
        cr_expect(fabs(head[i] - ((i + 1) * c - (i + 5) * s)) < 1e-5);
        cr_expect(fabs(head[i + 4] - ((i + 5) * c + (i + 1) * s)) < 1e-5);
    }

    float g[3] = {0.5f, -1.0f, 2.0f}, u[3] = {2, 3, -1};
    silu_mul(g, u, 3);
    cr_expect(fabs(g[0] - 0.5 / (1 + exp(-0.5)) * 2) < 1e-6);
    cr_expect(fabs(g[1] - -1.0 / (1 + exp(1.0)) * 3) < 1e-6);

    float v[5] = {1, 7, 3, 7, -2};
    cr_expect_eq(argmax(v, 5), 1, "ties go to the lowest index, as numpy");

    uint16_t row[4] = {0x3f80, 0xc000, 0x0000, 0x7f80};
    Weight e = {.data = row, .type = WEIGHT_BF16, .rows = 2, .cols = 2};
    float r[2];
    embed_row(r, &e, 1);
    cr_expect(r[0] == 0.0f && isinf(r[1]));
}

Test(cpu_kernels, half_conversions) {
    cr_expect(f32_to_bf16(1.0f) == 0x3f80);
    cr_expect(f32_to_bf16(1.00390625f) == 0x3f80, "ties round to even");
    cr_expect(f32_to_bf16(1.01171875f) == 0x3f82);
    cr_expect(isnan(bf16_to_f32(f32_to_bf16(NAN))));
    cr_expect(f16_to_f32(0x3c00) == 1.0f);
    cr_expect(f16_to_f32(0xc000) == -2.0f);
    cr_expect(f16_to_f32(0x0001) == 0x1p-24f, "smallest subnormal");
    cr_expect(isinf(f16_to_f32(0x7c00)));
    cr_expect(f16_to_f32(0x8000) == 0.0f && signbit(f16_to_f32(0x8000)));
}

/* The exp of softmax and SiLU against double precision at one ISA level. */
static void check_exp_and_silu(CpuIsa isa) {
    enum { N = 4099 };
    const char *name = cpu_isa_name(isa);
    float *x = malloc(sizeof(float) * N), *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N);
    cr_assert(x && g && u);
    double worst = 0, sum = 0;
    for (int i = 0; i < N; i++) x[i] = -87.0f * i / (N - 1); /* the softmax range: <= 0 */
    memcpy(g, x, sizeof(float) * N);
    float got_sum = exp_shifted_sum(x, N, -0.5f);
    for (int i = 0; i < N; i++) {
        double want = exp((double)g[i] + 0.5);
        sum += want;
        if (want > 1e-30) worst = fmax(worst, fabs(x[i] - want) / want);
    }
    cr_expect(worst < 3e-7, "%s: exp relative error %g", name, worst);
    /* a float32 running sum of 4099 terms: ~sqrt(n) * eps on the scalar path */
    cr_expect(fabs(got_sum - sum) / sum < 2e-5, "%s: sum off by %g", name, fabs(got_sum - sum) / sum);

    /* Far below the range (a masked-out score is -inf): 0, never NaN, and
     * the tail past the last full vector too. */
    float far[11] = {-INFINITY, -1e30f, -200, -104, -88, -87.5f, 0, -INFINITY, -150, -1e10f, -90};
    float far_sum = exp_shifted_sum(far, 11, 0.0f);
    for (int i = 0; i < 11; i++)
        if (i != 6) cr_expect(far[i] >= 0 && far[i] < 1e-37f, "%s: exp far[%d] = %g", name, i, far[i]);
    cr_expect(far[6] == 1.0f && far_sum >= 1.0f && far_sum < 1.0f + 1e-6f, "%s: sum %g", name, far_sum);

    for (int i = 0; i < N; i++) {
        g[i] = 40.0f * uniform();
        u[i] = uniform();
    }
    float *g0 = malloc(sizeof(float) * N);
    cr_assert(g0);
    memcpy(g0, g, sizeof(float) * N);
    silu_mul(g, u, N);
    worst = 0;
    for (int i = 0; i < N; i++) {
        double want = g0[i] / (1.0 + exp(-(double)g0[i])) * u[i];
        worst = fmax(worst, fabs(g[i] - want) / (fabs(want) + 1e-30));
    }
    cr_expect(worst < 1e-6, "%s: silu relative error %g", name, worst);
    cr_expect_float_eq(row_max(g0, N), g0[argmax(g0, N)], 0);

    /* SiLU's ends: large negative gates give (minus) zero, large positive
     * ones the gate itself; nothing overflows into NaN. */
    float ends[9] = {-1e30f, -1000, -100, -89, 89, 100, 1000, 1e30f, -20};
    float ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    float ends0[9];
    memcpy(ends0, ends, sizeof(ends));
    silu_mul(ends, ones, 9);
    for (int i = 0; i < 8; i++) {
        float want = ends0[i] < 0 ? 0.0f : ends0[i];
        cr_expect(fabsf(ends[i] - want) <= 1e-6f * fabsf(ends0[i]), "%s: silu(%g) = %g", name, ends0[i], ends[i]);
    }
    cr_expect(fabs(ends[8] - -20.0 / (1.0 + exp(20.0))) < 1e-12, "%s: silu(-20) = %g", name, ends[8]);
    free(x);
    free(g);
    free(g0);
    free(u);
}

/* The vectorized exp and SiLU at every level this CPU can run (the scalar
 * loops are the reference the others are held to). */
Test(cpu_kernels, exp_and_silu_accuracy) {
    CpuIsa best = cpu_isa_detect();
    for (int isa = CPU_ISA_SCALAR; isa <= (int)best; isa++) {
        cr_assert(cpu_isa_set((CpuIsa)isa) == 0);
        check_exp_and_silu((CpuIsa)isa);
    }
    cpu_isa_set(best);
}
