/*
 * test_cpu_matmul_fp8.c - FP8 weights on the CPU (cpu_matmul_fp8.h) and
 * cpu_matmul on them.
 *
 * Weights: random bytes over the whole float8_e4m3fn range (every byte but
 * the two NaNs, subnormals and both zeros included) with random block
 * scales from 2^-60 to 2^20, so a mistaken scale index or exponent shows.
 * The reference is float64 over fp8_dequantize_rows' values (each weight
 * e4m3 * scale rounded to float32 once, model/weight_format.h).
 *
 * Tolerance rule: |y - ref| <= 2e-6 x sum_k |x_k w_k| for every output.
 * The kernels sum float32 products in per-lane partial sums of at most 128
 * columns (the scalar level: all of K in order), so their error is a few
 * float32 roundings of that magnitude; the bound is relative to the sum of
 * magnitudes so that cancellation cannot inflate it, and a wrong scale,
 * a dropped or doubled tail or a wrong sign is off by far more.
 *
 * Kernels (fp8_gemm, every SIMD level this machine runs and the scalar
 * one): M = 1, 2, 3, 4, 5, 8, 17, 64, 200, K = 32, 96, 200, 1024 and 203
 * (not a multiple of any vector), N = 300 (a partial 128-row scale tile),
 * written in three calls of unaligned row ranges with the outputs around
 * them untouched, with and without scratch. Decoding to panels
 * (fp8_decode_rows) equals fp8_dequantize_rows bit for bit. Then
 * cpu_matmul (automatic choice), cpu_matmul_with (every strategy),
 * bf16 inputs, cpu_matmul_multi mixing FP8, bf16 and Q8_0 weights,
 * cpu_matmul_grouped and a MoE layer with FP8 experts. Where the CPU has
 * AVX512-BF16 and VBMI, fp8_gemm_bf16 too: every byte widened exactly, the
 * same row counts and K against the reference of the rounded inputs, and
 * a row's bits whatever its batch (elsewhere these tests say so and pass).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_matmul.h"
#include "cpu/cpu_matmul_fp8.h"
#include "cpu/cpu_moe.h"
#include "base/half.h"
#include "matmul_reference.h"

#define TOL 2e-6

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* An FP8 matrix, its scales and its float32 values (fp8_dequantize_rows). */
typedef struct Fp8Weight {
    Weight w;
    uint8_t *q;
    float *scales;
    float *deq;
} Fp8Weight;

static Fp8Weight make_fp8(int N, int K) {
    Fp8Weight f = {0};
    size_t ns = fp8_scale_count(N, K);
    f.q = malloc((size_t)N * K + 1);
    f.scales = malloc(sizeof(float) * ns);
    f.deq = malloc(sizeof(float) * (size_t)N * K + 4);
    cr_assert(f.q && f.scales && f.deq);
    for (size_t i = 0; i < (size_t)N * K; i++) {
        uint8_t b = (uint8_t)next_u32();
        f.q[i] = fp8_e4m3_is_nan(b) ? (uint8_t)(b & 0x80) : b; /* a NaN becomes a zero */
    }
    /* Tiny, ordinary and large scales, either sign. */
    for (size_t i = 0; i < ns; i++) {
        uint32_t r = next_u32();
        int e = i % 5 == 0 ? -60 : i % 5 == 1 ? 20 : (int)(r % 24) - 16;
        f.scales[i] = ldexpf(1.0f + (float)(r % 1000) / 1000.0f, e) * (r & 0x1000 ? -1.0f : 1.0f);
    }
    fp8_dequantize_rows(f.q, f.scales, K, 0, N, f.deq);
    f.w = (Weight){.data = f.q, .type = WEIGHT_F8_E4M3, .rows = N, .cols = K, .scales = f.scales};
    return f;
}

static void free_fp8(Fp8Weight *f) {
    free(f->q);
    free(f->scales);
    free(f->deq);
}

static float *random_rows(int M, int K) {
    float *x = malloc(sizeof(float) * (size_t)M * K + 4);
    cr_assert(x);
    for (size_t i = 0; i < (size_t)M * K; i++) x[i] = matmul_uniform() * (1.0f + (float)(i % 7));
    return x;
}

/* The float64 product and the sum of magnitudes, M x N each. */
typedef struct Reference {
    double *ref, *mag;
} Reference;

static Reference reference(const float *x, int M, const float *deq, int N, int K) {
    Reference r = {malloc(sizeof(double) * (size_t)M * N), malloc(sizeof(double) * (size_t)M * N)};
    cr_assert(r.ref && r.mag);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0, g = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)x[(size_t)m * K + k] * deq[(size_t)n * K + k];
                s += p;
                g += fabs(p);
            }
            r.ref[(size_t)m * N + n] = s;
            r.mag[(size_t)m * N + n] = g;
        }
    return r;
}

static void free_reference(Reference *r) {
    free(r->ref);
    free(r->mag);
}

/* y (M rows of ldy, outputs [0, N)) against the reference. */
static void check_y(const float *y, int ldy, const Reference *r, int M, int N, int K, const char *what,
                    CpuIsa isa) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double got = y[(size_t)m * ldy + n], want = r->ref[(size_t)m * N + n];
            double tol = TOL * r->mag[(size_t)m * N + n];
            cr_assert(fabs(got - want) <= tol, "%s %s M=%d N=%d K=%d: y[%d,%d] = %.9g, want %.9g (+- %.3g)",
                      what, cpu_isa_name(isa), M, N, K, m, n, got, want, tol);
        }
}

/* ---- the decode ------------------------------------------------------------ */

/* Every byte value, in rows of K and row ranges not aligned to anything:
 * fp8_decode_rows writes exactly fp8_dequantize_rows' floats (signed zeros
 * and subnormals included) at every level, and nothing past its rows. */
Test(cpu_matmul_fp8, decode_equals_the_reference_bitwise) {
    static const int Ks[] = {32, 96, 200, 1024, 7, 129, 256};
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
        int K = Ks[ki], N = 300;
        Fp8Weight f = make_fp8(N, K);
        for (size_t i = 0; i < (size_t)N * K && i < 256 * 40; i++) /* every byte, many scales */
            f.q[i] = fp8_e4m3_is_nan((uint8_t)i) ? 0x80 : (uint8_t)i;
        fp8_dequantize_rows(f.q, f.scales, K, 0, N, f.deq);
        float *got = malloc(sizeof(float) * ((size_t)N * K + 1));
        cr_assert(got);
        for (int isa = CPU_ISA_SCALAR; isa <= (int)cpu_isa_detect(); isa++) {
            static const int cuts[][2] = {{0, 300}, {5, 133}, {127, 129}, {299, 300}};
            for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
                int n0 = cuts[c][0], n1 = cuts[c][1];
                size_t count = (size_t)(n1 - n0) * K;
                memset(got, 0x5a, sizeof(float) * (count + 1));
                fp8_decode_rows((CpuIsa)isa, f.q, f.scales, K, n0, n1, got);
                for (size_t i = 0; i < count; i++) {
                    uint32_t a, b;
                    memcpy(&a, &got[i], 4);
                    memcpy(&b, &f.deq[(size_t)n0 * K + i], 4);
                    cr_assert(a == b, "%s K=%d rows %d..%d: value %zu (byte 0x%02x) is 0x%08x, want 0x%08x",
                              cpu_isa_name((CpuIsa)isa), K, n0, n1, i, f.q[(size_t)n0 * K + i], a, b);
                }
                uint32_t past;
                memcpy(&past, &got[count], 4);
                cr_assert(past == 0x5a5a5a5au, "%s wrote past its rows", cpu_isa_name((CpuIsa)isa));
            }
        }
        free(got);
        free_fp8(&f);
    }
}

/* ---- the kernels ----------------------------------------------------------- */

/* Row counts through both paths (1..4 in registers, more from scratch) and
 * K of whole, partial and tiny chunks (203: not a multiple of any vector). */
static const int KERNEL_MS[] = {1, 2, 3, 4, 5, 8, 17, 64, 200};
static const int KERNEL_KS[] = {32, 96, 200, 1024, 203};

Test(cpu_matmul_fp8, kernels_match_the_reference, .timeout = 600) {
    enum { N = 300, LDY = N + 5 };
    float *scratch = malloc(sizeof(float) * FP8_SCRATCH_ROWS * 1024);
    cr_assert(scratch);
    int checked = 0;
    for (size_t ki = 0; ki < sizeof KERNEL_KS / sizeof KERNEL_KS[0]; ki++) {
        int K = KERNEL_KS[ki];
        Fp8Weight f = make_fp8(N, K);
        for (size_t mi = 0; mi < sizeof KERNEL_MS / sizeof KERNEL_MS[0]; mi++) {
            int M = KERNEL_MS[mi];
            float *x = random_rows(M, K), *y = malloc(sizeof(float) * (size_t)M * LDY);
            cr_assert(y);
            Reference r = reference(x, M, f.deq, N, K);
            for (int isa = CPU_ISA_SCALAR; isa <= (int)cpu_isa_detect(); isa++) {
                for (int with_scratch = 0; with_scratch < 2; with_scratch++) {
                    for (size_t i = 0; i < (size_t)M * LDY; i++) y[i] = NAN;
                    /* Three calls over unaligned row ranges, as tasks split a weight. */
                    static const int cuts[] = {0, 77, 130, N};
                    for (int c = 0; c < 3; c++)
                        fp8_gemm((CpuIsa)isa, f.q, f.scales, K, x, K, M, y, LDY, cuts[c], cuts[c + 1],
                                 with_scratch ? scratch : NULL);
                    check_y(y, LDY, &r, M, N, K, with_scratch ? "fp8_gemm" : "fp8_gemm (no scratch)",
                            (CpuIsa)isa);
                    for (int m = 0; m < M; m++)
                        for (int n = N; n < LDY; n++)
                            cr_assert(isnan(y[(size_t)m * LDY + n]), "wrote y[%d,%d] past N", m, n);
                    checked++;
                }
            }
            free_reference(&r);
            free(x);
            free(y);
        }
        free_fp8(&f);
    }
    free(scratch);
    cr_log_info("fp8_gemm: %d cases at levels scalar..%s", checked, cpu_isa_name(cpu_isa_detect()));
}

/* A row's result is the same bits whichever batch it is in (1..70 rows:
 * the paths for 1..4 rows and for more), with or without scratch, however
 * the weight rows are split: what lets a greedy request give the same text
 * alone as beside others. */
Test(cpu_matmul_fp8, rows_do_not_depend_on_the_batch_or_split, .timeout = 300) {
    enum { MAXM = 70, N = 261, K = 1037 };
    Fp8Weight f = make_fp8(N, K);
    float *x = random_rows(MAXM, K), *alone = malloc(sizeof(float) * MAXM * N),
          *batch = malloc(sizeof(float) * MAXM * N), *scratch = malloc(sizeof(float) * FP8_SCRATCH_ROWS * K);
    cr_assert(alone && batch && scratch);
    static const int batches[] = {2, 3, 4, 5, 7, 13, 24, 64, 70};
    int checked = 0;
    for (int isa = CPU_ISA_AVX2; isa <= (int)cpu_isa_detect(); isa++) {
        for (int m = 0; m < MAXM; m++)
            fp8_gemm((CpuIsa)isa, f.q, f.scales, K, x + (size_t)m * K, K, 1, alone + (size_t)m * N, N, 0, N,
                     scratch);
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
            int M = batches[b];
            for (int m0 = 0; m0 + M <= MAXM; m0 += M) {
                const float *xm = x + (size_t)m0 * K;
                for (int split = 0; split < 2; split++) {
                    if (split) { /* uneven ranges, the second without scratch */
                        fp8_gemm((CpuIsa)isa, f.q, f.scales, K, xm, K, M, batch, N, 0, 101, scratch);
                        fp8_gemm((CpuIsa)isa, f.q, f.scales, K, xm, K, M, batch, N, 101, N, NULL);
                    } else {
                        fp8_gemm((CpuIsa)isa, f.q, f.scales, K, xm, K, M, batch, N, 0, N, scratch);
                    }
                    cr_assert(memcmp(batch, alone + (size_t)m0 * N, sizeof(float) * (size_t)M * N) == 0,
                              "%s: rows %d..%d in a batch of %d (split %d) differ from the same rows alone",
                              cpu_isa_name((CpuIsa)isa), m0, m0 + M - 1, M, split);
                    checked++;
                }
            }
        }
    }
    cr_log_info("fp8 batch independence: %d batches checked bit for bit", checked);
    free(x);
    free(alone);
    free(batch);
    free(scratch);
    free_fp8(&f);
}

/* ---- bf16 activations (fp8_gemm_bf16, AVX512-BF16 + VBMI) ------------------ */

/* x rounded to bf16, as --dtype bfloat16 rounds the matmul inputs. */
static float *rounded(const float *x, size_t n) {
    float *r = malloc(sizeof(float) * n + 4);
    cr_assert(r);
    for (size_t i = 0; i < n; i++) r[i] = bf16_to_f32(f32_to_bf16(x[i]));
    return r;
}

/* x rounded to bf16, as bf16 bits. */
static uint16_t *bf16_bits(const float *x, size_t n) {
    uint16_t *b = malloc(sizeof(uint16_t) * n + 2);
    cr_assert(b);
    for (size_t i = 0; i < n; i++) b[i] = f32_to_bf16(x[i]);
    return b;
}

/* Every byte widens to its float value exactly (subnormals, both zeros),
 * in row ranges and lengths not aligned to the 64-byte step, nothing
 * written past the rows. */
Test(cpu_matmul_fp8, bf16_widening_is_exact) {
    CpuIsa isa = cpu_isa_detect();
    if (!fp8_bf16_kernel(isa)) {
        cr_log_warn("fp8_gemm_bf16 not checked: this CPU (%s) lacks AVX512-BF16 or VBMI", cpu_isa_name(isa));
        return;
    }
    static const int Ks[] = {256, 7, 64, 100, 129};
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
        int K = Ks[ki], N = 40;
        uint8_t *q = malloc((size_t)N * K);
        uint16_t *got = malloc(sizeof(uint16_t) * ((size_t)N * K + 1));
        cr_assert(q && got);
        for (size_t i = 0; i < (size_t)N * K; i++) { /* every byte but the NaNs, in a shuffled order */
            uint8_t v = (uint8_t)(i * 7 + i / 256);
            q[i] = fp8_e4m3_is_nan(v) ? 0x80 : v;
        }
        int n0 = 3, n1 = N - 1;
        size_t count = (size_t)(n1 - n0) * K;
        for (size_t i = 0; i <= count; i++) got[i] = 0x5a5a;
        cr_assert(fp8_widen_bf16(isa, q, K, n0, n1, got));
        for (size_t i = 0; i < count; i++) {
            uint8_t b = q[(size_t)n0 * K + i];
            uint16_t want = f32_to_bf16(fp8_e4m3_to_float(b));
            cr_assert(got[i] == want && bf16_to_f32(want) == fp8_e4m3_to_float(b),
                      "K=%d: byte 0x%02x widened to 0x%04x, want 0x%04x", K, b, got[i], want);
        }
        cr_assert(got[count] == 0x5a5a, "wrote past the rows");
        free(q);
        free(got);
    }
}

/* Within the float32 bound of the products of the rounded inputs, every
 * row count and K of kernels_match_the_reference, over unaligned row
 * ranges, with and without scratch; and a row's bits do not depend on its
 * batch or on the split. */
Test(cpu_matmul_fp8, bf16_kernel_matches_the_reference_batch_free, .timeout = 600) {
    CpuIsa isa = cpu_isa_detect();
    if (!fp8_bf16_kernel(isa)) {
        cr_log_warn("fp8_gemm_bf16 not checked: this CPU (%s) lacks AVX512-BF16 or VBMI", cpu_isa_name(isa));
        return;
    }
    enum { N = 300, LDY = N + 5 };
    float *scratch = malloc(sizeof(float) * FP8_SCRATCH_ROWS * 1024);
    cr_assert(scratch);
    int checked = 0;
    for (size_t ki = 0; ki < sizeof KERNEL_KS / sizeof KERNEL_KS[0]; ki++) {
        int K = KERNEL_KS[ki];
        Fp8Weight f = make_fp8(N, K);
        float *alone = malloc(sizeof(float) * 200 * N);
        cr_assert(alone);
        for (size_t mi = 0; mi < sizeof KERNEL_MS / sizeof KERNEL_MS[0]; mi++) {
            int M = KERNEL_MS[mi];
            float *x = random_rows(M, K), *xr = rounded(x, (size_t)M * K), *y = malloc(sizeof(float) * (size_t)M * LDY);
            uint16_t *xb = bf16_bits(x, (size_t)M * K);
            cr_assert(y);
            Reference r = reference(xr, M, f.deq, N, K);
            for (int m = 0; m < M; m++) /* each row by itself */
                fp8_gemm_bf16(isa, f.q, f.scales, K, xb + (size_t)m * K, K, 1, alone + (size_t)m * N, N, 0, N, NULL);
            for (int with_scratch = 0; with_scratch < 2; with_scratch++) {
                for (size_t i = 0; i < (size_t)M * LDY; i++) y[i] = NAN;
                static const int cuts[] = {0, 77, 130, N};
                for (int c = 0; c < 3; c++)
                    cr_assert(fp8_gemm_bf16(isa, f.q, f.scales, K, xb, K, M, y, LDY, cuts[c], cuts[c + 1],
                                            with_scratch ? scratch : NULL));
                check_y(y, LDY, &r, M, N, K, with_scratch ? "fp8_gemm_bf16" : "fp8_gemm_bf16 (no scratch)", isa);
                for (int m = 0; m < M; m++) {
                    cr_assert(memcmp(y + (size_t)m * LDY, alone + (size_t)m * N, sizeof(float) * N) == 0,
                              "K=%d: row %d of a batch of %d (scratch %d) differs from the row alone", K, m, M,
                              with_scratch);
                    for (int n = N; n < LDY; n++) cr_assert(isnan(y[(size_t)m * LDY + n]), "wrote y[%d,%d] past N", m, n);
                }
                checked++;
            }
            free_reference(&r);
            free(x);
            free(xr);
            free(xb);
            free(y);
        }
        free(alone);
        free_fp8(&f);
    }
    free(scratch);
    cr_log_info("fp8_gemm_bf16: %d cases at %s", checked, cpu_isa_name(isa));
}

/* ---- through cpu_matmul ---------------------------------------------------- */

static const MatmulStrategy STRATEGIES[] = {MATMUL_AUTO, MATMUL_ROWS, MATMUL_BLAS, MATMUL_AMX,
                                            MATMUL_GEMM, MATMUL_QUANT};
#define NSTRAT (int)(sizeof STRATEGIES / sizeof STRATEGIES[0])

/* Every strategy, forced or automatic, at every level, with float32 and
 * bf16 inputs; with 1 and 3 threads the same bits; the automatic choice
 * is fp8_gemm ("gemm") for decode batches (17 rows here) and decoded panels
 * for OpenBLAS ("blas") for prefills (200), whatever the limit between. */
Test(cpu_matmul_fp8, cpu_matmul_every_strategy, .timeout = 600) {
    enum { N = 300, K = 200, MAXM = 200 };
    Error err = {0};
    ThreadPool *one = thread_pool_create(1, &err), *three = thread_pool_create(3, &err);
    cr_assert(one && three, "%s", err.msg);
    CpuMatmul *mm1 = cpu_matmul_create(one, MAXM, K, &err), *mm3 = cpu_matmul_create(three, MAXM, K, &err);
    cr_assert(mm1 && mm3, "%s", err.msg);
    Fp8Weight f = make_fp8(N, K);
    static const int Ms[] = {1, 3, 17, 64, 200};
    float *y1 = malloc(sizeof(float) * MAXM * N), *y3 = malloc(sizeof(float) * MAXM * N);
    cr_assert(y1 && y3);
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
        int M = Ms[mi];
        float *x = random_rows(M, K), *xr = rounded(x, (size_t)M * K);
        Reference r = reference(x, M, f.deq, N, K), rr = reference(xr, M, f.deq, N, K);
        for (int isa = CPU_ISA_SCALAR; isa <= (int)cpu_isa_detect(); isa++) {
            MatmulStrategy pick = cpu_matmul_choose(M, &f.w, (CpuIsa)isa);
            cr_assert(pick == MATMUL_GEMM || pick == MATMUL_BLAS);
            cr_assert(isa == CPU_ISA_SCALAR || M == 64 || (M <= 17) == (pick == MATMUL_GEMM),
                      "M=%d at %s chose %s", M, cpu_isa_name((CpuIsa)isa), matmul_strategy_name(pick));
            for (int s = 0; s < NSTRAT; s++) {
                for (int bf16 = 0; bf16 < 2; bf16++) {
                    cpu_matmul_set_bf16_inputs(mm1, bf16);
                    cpu_matmul_set_bf16_inputs(mm3, bf16);
                    for (size_t i = 0; i < (size_t)M * N; i++) y1[i] = y3[i] = NAN;
                    cpu_matmul_with(mm1, y1, x, M, &f.w, STRATEGIES[s], (CpuIsa)isa);
                    cpu_matmul_with(mm3, y3, x, M, &f.w, STRATEGIES[s], (CpuIsa)isa);
                    char what[64];
                    snprintf(what, sizeof what, "cpu_matmul_with(%s)%s", matmul_strategy_name(STRATEGIES[s]),
                             bf16 ? " bf16 inputs" : "");
                    check_y(y1, N, bf16 ? &rr : &r, M, N, K, what, (CpuIsa)isa);
                    cr_assert(memcmp(y1, y3, sizeof(float) * (size_t)M * N) == 0, "%s %s M=%d: 1 and 3 threads differ",
                              what, cpu_isa_name((CpuIsa)isa), M);
                    bool native = fp8_bf16_kernel((CpuIsa)isa) && (STRATEGIES[s] == MATMUL_AUTO ||
                                  STRATEGIES[s] == MATMUL_ROWS || STRATEGIES[s] == MATMUL_GEMM);
                    if (bf16 && native) { /* fp8_gemm_bf16 on the rounded inputs */
                        uint16_t *xb = bf16_bits(x, (size_t)M * K);
                        fp8_gemm_bf16((CpuIsa)isa, f.q, f.scales, K, xb, K, M, y3, N, 0, N, NULL);
                        free(xb);
                        cr_assert(memcmp(y1, y3, sizeof(float) * (size_t)M * N) == 0,
                                  "%s %s M=%d: not fp8_gemm_bf16's bits", what, cpu_isa_name((CpuIsa)isa), M);
                    } else if (bf16) { /* the same as float32 inputs already rounded */
                        cpu_matmul_set_bf16_inputs(mm3, false);
                        cpu_matmul_with(mm3, y3, xr, M, &f.w, STRATEGIES[s], (CpuIsa)isa);
                        cr_assert(memcmp(y1, y3, sizeof(float) * (size_t)M * N) == 0,
                                  "%s %s M=%d: not the product of the rounded inputs", what,
                                  cpu_isa_name((CpuIsa)isa), M);
                    }
                }
            }
        }
        free_reference(&r);
        free_reference(&rr);
        free(x);
        free(xr);
    }
    cpu_matmul_set_bf16_inputs(mm1, false);
    free(y1);
    free(y3);
    free_fp8(&f);
    cpu_matmul_destroy(mm1);
    cpu_matmul_destroy(mm3);
    thread_pool_destroy(one);
    thread_pool_destroy(three);
}

/* A multi call mixing FP8, bf16 and Q8_0 weights gives each what it gets
 * alone (more rows than max_rows: in chunks), and cpu_matmul_grouped with
 * FP8 and bf16 products, small and prefill-sized, each with its own input,
 * gives what cpu_matmul does. At every level. */
Test(cpu_matmul_fp8, multi_and_grouped_mixed_types, .timeout = 300) {
    enum { K = 256, G = 7 };
    Error err = {0};
    ThreadPool *pool = thread_pool_create(2, &err);
    cr_assert(pool, "%s", err.msg);
    CpuMatmul *mm = cpu_matmul_create(pool, 160, K, &err);
    cr_assert(mm, "%s", err.msg);
    Fp8Weight a = make_fp8(300, K), c = make_fp8(45, K);
    TestWeight b = make_test_weight(70, K, WEIGHT_BF16);
    uint8_t *q8 = malloc(weight_row_bytes(WEIGHT_Q8_0, K) * 33);
    float *row = malloc(sizeof(float) * K);
    cr_assert(q8 && row);
    for (int n = 0; n < 33; n++) {
        for (int k = 0; k < K; k++) row[k] = matmul_uniform();
        weight_quantize_row(WEIGHT_Q8_0, row, q8 + weight_row_bytes(WEIGHT_Q8_0, K) * n, K);
    }
    Weight wq = {.data = q8, .type = WEIGHT_Q8_0, .rows = 33, .cols = K};
    const Weight *ws[4] = {&a.w, &b.w, &c.w, &wq};
    int rows[4] = {300, 70, 45, 33};
    float *ys[4], *alone = malloc(sizeof(float) * 200 * 300);
    cr_assert(alone);
    for (int i = 0; i < 4; i++) {
        ys[i] = malloc(sizeof(float) * 200 * (size_t)rows[i]);
        cr_assert(ys[i]);
    }
    float *x = random_rows(200, K);
    CpuIsa best = cpu_isa_active();
    for (int isa = CPU_ISA_SCALAR; isa <= (int)cpu_isa_detect(); isa++) {
        cr_assert(cpu_isa_set((CpuIsa)isa) == 0);
        static const int Ms[] = {1, 5, 200};
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            int M = Ms[mi];
            cpu_matmul_multi(mm, x, M, ws, ys, 4);
            for (int i = 0; i < 4; i++) {
                cpu_matmul(mm, alone, x, M, ws[i]);
                cr_assert(memcmp(alone, ys[i], sizeof(float) * (size_t)M * rows[i]) == 0,
                          "%s M=%d: weight %d in a multi call differs from alone", cpu_isa_name((CpuIsa)isa),
                          M, i);
            }
            Reference r = reference(x, M, a.deq, 300, K);
            check_y(ys[0], 300, &r, M, 300, K, "multi", (CpuIsa)isa);
            free_reference(&r);
        }
        /* Grouped: two FP8 products of 3 rows sharing an input (gate and
         * up), a bf16 one of 4 rows, an FP8 one of 1 row, an FP8 and a bf16
         * one of 150 rows sharing an input (past the GEMMs: run as a multi
         * call), an FP8 one of 64. */
        const Weight *gw[G] = {&a.w, &c.w, &b.w, &c.w, &a.w, &b.w, &a.w};
        int gm[G] = {3, 3, 4, 1, 150, 150, 64};
        const float *gx[G] = {x, x, x + K, x + 2 * K, x + 3 * K, x + 3 * K, x + 5 * K};
        float *gy[G];
        MatmulGroup groups[G];
        for (int i = 0; i < G; i++) {
            gy[i] = malloc(sizeof(float) * (size_t)gm[i] * gw[i]->rows);
            cr_assert(gy[i]);
            groups[i] = (MatmulGroup){gx[i], gm[i], gw[i], gy[i], NULL};
        }
        cpu_matmul_grouped(mm, groups, G);
        for (int i = 0; i < G; i++) {
            cpu_matmul(mm, alone, gx[i], gm[i], gw[i]);
            cr_assert(memcmp(alone, gy[i], sizeof(float) * (size_t)gm[i] * gw[i]->rows) == 0,
                      "%s: group %d (%d rows) differs from cpu_matmul", cpu_isa_name((CpuIsa)isa), i, gm[i]);
            if (gw[i]->type == WEIGHT_F8_E4M3) {
                const Fp8Weight *f = gw[i] == &a.w ? &a : &c;
                Reference r = reference(gx[i], gm[i], f->deq, f->w.rows, K);
                check_y(gy[i], f->w.rows, &r, gm[i], f->w.rows, K, "grouped", (CpuIsa)isa);
                free_reference(&r);
            }
            free(gy[i]);
        }
    }
    cpu_isa_set(best);
    for (int i = 0; i < 4; i++) free(ys[i]);
    free(alone);
    free(x);
    free(q8);
    free(row);
    free_fp8(&a);
    free_fp8(&c);
    free_test_weight(&b);
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
}

/* ---- a MoE layer with FP8 experts -------------------------------------- */

/* cpu_moe with FP8 experts (one of them bf16, so the grouped lists mix
 * types) against the same layer with every expert as its float32 values:
 * the same routing and, up to the kernels' summation order, the same
 * output; at decode sizes and with a prefill large enough for an expert
 * to get more rows than fp8_gemm takes; float32 and bf16 inputs. */
Test(cpu_matmul_fp8, moe_with_fp8_experts, .timeout = 300) {
    enum { E = 4, TOPK = 2, H = 160, MI = 96, T = 300 };
    Fp8Weight gate[E], up[E], down[E];
    ExpertWeights fp8[E], f32[E];
    TestWeight bf = make_test_weight(MI, H, WEIGHT_BF16);
    for (int e = 0; e < E; e++) {
        gate[e] = make_fp8(MI, H);
        up[e] = make_fp8(MI, H);
        down[e] = make_fp8(H, MI);
        Fp8Weight *fs[3] = {&gate[e], &up[e], &down[e]};
        for (int p = 0; p < 3; p++) /* modest weights: the MLP's values stay finite */
            for (size_t i = 0; i < fp8_scale_count(fs[p]->w.rows, fs[p]->w.cols); i++)
                fs[p]->scales[i] = 1.0f / 2048 * (1.0f + (float)(i % 3));
        for (int p = 0; p < 3; p++)
            fp8_dequantize_rows(fs[p]->q, fs[p]->scales, fs[p]->w.cols, 0, fs[p]->w.rows, fs[p]->deq);
        fp8[e] = (ExpertWeights){gate[e].w, up[e].w, down[e].w};
        f32[e] = (ExpertWeights){{.data = gate[e].deq, .type = WEIGHT_F32, .rows = MI, .cols = H},
                                 {.data = up[e].deq, .type = WEIGHT_F32, .rows = MI, .cols = H},
                                 {.data = down[e].deq, .type = WEIGHT_F32, .rows = H, .cols = MI}};
    }
    /* Expert 1's up projection bf16 in both layers. */
    fp8[1].up_proj = f32[1].up_proj = bf.w;
    TestWeight router = make_test_weight(E, H, WEIGHT_BF16);
    LayerWeights L8 = {.router = router.w, .experts = fp8}, L32 = {.router = router.w, .experts = f32};
    ModelConfig cfg = {.hidden_size = H, .num_experts = E, .num_experts_per_tok = TOPK,
                       .moe_intermediate_size = MI, .norm_topk_prob = true};
    Error err = {0};
    ThreadPool *pool = thread_pool_create(2, &err);
    cr_assert(pool, "%s", err.msg);
    CpuMatmul *mm = cpu_matmul_create(pool, T, H, &err);
    cr_assert(mm, "%s", err.msg);
    CpuMoe *moe = cpu_moe_create(pool, mm, &cfg, T, &err);
    cr_assert(moe, "%s", err.msg);
    float *x = random_rows(T, H), *o8 = malloc(sizeof(float) * T * H), *o32 = malloc(sizeof(float) * T * H);
    cr_assert(o8 && o32);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        cpu_matmul_set_bf16_inputs(mm, bf16);
        static const int Ts[] = {1, 7, T};
        for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
            int n = Ts[ti];
            cpu_moe(moe, o8, x, n, &L8);
            cpu_moe(moe, o32, x, n, &L32);
            double worst = 0, scale = 0;
            for (size_t i = 0; i < (size_t)n * H; i++) {
                cr_assert(isfinite(o8[i]));
                worst = fmax(worst, fabs((double)o8[i] - o32[i]));
                scale = fmax(scale, fabs((double)o32[i]));
            }
            cr_assert(worst <= 1e-4 * scale + 1e-30, "%s inputs, %d tokens: FP8 experts off by %g (largest %g)",
                      bf16 ? "bf16" : "float32", n, worst, scale);
        }
    }
    cpu_matmul_set_bf16_inputs(mm, false);
    cpu_moe_destroy(moe);
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
    free(x);
    free(o8);
    free(o32);
    free_test_weight(&bf);
    free_test_weight(&router);
    for (int e = 0; e < E; e++) {
        free_fp8(&gate[e]);
        free_fp8(&up[e]);
        free_fp8(&down[e]);
    }
}
