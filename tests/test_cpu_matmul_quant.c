/*
 * test_cpu_matmul_quant.c - the quantized-weight kernels (cpu_matmul_quant.h)
 * and cpu_matmul on quantized weights.
 *
 * Kernels: for every block type, every SIMD level this machine runs, row
 * counts around the tiles (1..8, 17, 64, 130), weight row counts that leave
 * partial strips (1, 7, 33, 300) and K of 1, 2 and 5 blocks of 256,
 * quant_gemm must equal (a) the float64 product of the dequantized weights
 * and the dequantized 8-bit activations and (b) weight_dot_q8_ref, both
 * within 1e-5 of sum |w x|: the integer sums are exact at every level, only
 * the float sums over blocks (and the float products of the scales) round.
 *
 * End to end: cpu_matmul against the float64 product of the dequantized
 * weights and the float activations, within the error the 8-bit activations
 * can make (each value moves at most half a step, d / 2 <= amax / 254 of its
 * block), plus float rounding; and the result must not depend on the number
 * of threads, on the other weights of a multi call, or on the batch size.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_matmul.h"
#include "cpu/cpu_matmul_quant.h"
#include "base/half.h"
#include "matmul_reference.h"

static const WeightType TYPES[] = {WEIGHT_Q8_0, WEIGHT_Q4_K, WEIGHT_Q5_K, WEIGHT_Q6_K,
                                   WEIGHT_Q4_0, WEIGHT_Q5_0, WEIGHT_IQ4_NL};
/* The 32-value types (one kernel family, cpu_matmul_quant_q8_0.h). */
static const WeightType Q32_TYPES[] = {WEIGHT_Q8_0, WEIGHT_Q4_0, WEIGHT_Q5_0, WEIGHT_IQ4_NL};
#define NTYPES (int)(sizeof TYPES / sizeof TYPES[0])

/* A quantized N x K matrix from random floats, and its dequantized values. */
typedef struct QuantWeight {
    Weight w;
    void *data;
    double *deq; /* N x K */
} QuantWeight;

static QuantWeight make_quant_weight(WeightType t, int N, int K) {
    QuantWeight q = {0};
    size_t rb = weight_row_bytes(t, K);
    cr_assert(rb > 0);
    q.data = malloc(rb * (size_t)N);
    q.deq = malloc(sizeof(double) * (size_t)N * K);
    float *row = malloc(sizeof(float) * (size_t)K);
    cr_assert(q.data && q.deq && row);
    for (int n = 0; n < N; n++) {
        /* Rows of varied magnitude and sign balance, so mins and offsets matter. */
        float scale = 0.05f + 0.01f * (float)(n % 7), shift = 0.02f * (float)(n % 3 - 1);
        for (int k = 0; k < K; k++) row[k] = scale * matmul_uniform() + shift;
        void *dst = (uint8_t *)q.data + rb * (size_t)n;
        weight_quantize_row(t, row, dst, K);
        weight_dequantize_row(t, dst, row, K);
        for (int k = 0; k < K; k++) q.deq[(size_t)n * K + k] = row[k];
    }
    free(row);
    q.w = (Weight){.data = q.data, .type = t, .rows = N, .cols = K};
    return q;
}

static void free_quant_weight(QuantWeight *q) {
    free(q->data);
    free(q->deq);
}

static float *random_rows(int M, int K) {
    float *x = malloc(sizeof(float) * (size_t)M * K);
    cr_assert(x);
    for (size_t i = 0; i < (size_t)M * K; i++) x[i] = matmul_uniform() * (1.0f + (float)(i % 5));
    return x;
}

/* Value k of quantized activation row xr, as float64. */
static double act_value(QuantActType a, const void *xr, int k) {
    if (a == QUANT_ACT_Q8_0) {
        const BlockQ8_0 *b = (const BlockQ8_0 *)xr + k / QK8_0;
        return (double)f16_to_f32(b->d) * b->qs[k % QK8_0];
    }
    const BlockQ8K *b = (const BlockQ8K *)xr + k / QK_K;
    return (double)b->d * b->qs[k % QK_K];
}

static void check_kernels(WeightType t, const QuantWeight *q, const float *x, int M) {
    int N = q->w.rows, K = q->w.cols, ldy = N + 3;
    QuantActType a = quant_act_type(t);
    size_t xrb = quant_act_row_bytes(a, K);
    void *xq = malloc(xrb * (size_t)M);
    void *xq2 = malloc(xrb * (size_t)M);
    float *y = malloc(sizeof(float) * (size_t)M * ldy);
    double *ref = malloc(sizeof(double) * (size_t)M * N), *mag = malloc(sizeof(double) * (size_t)M * N);
    cr_assert(xq && xq2 && y && ref && mag);
    quant_act_rows(CPU_ISA_SCALAR, a, x, K, M, K, xq);
    for (int m = 0; m < M; m++) {
        const void *xr = (const uint8_t *)xq + xrb * (size_t)m;
        for (int n = 0; n < N; n++) {
            double s = 0, g = 0;
            for (int k = 0; k < K; k++) {
                double p = q->deq[(size_t)n * K + k] * act_value(a, xr, k);
                s += p;
                g += fabs(p);
            }
            ref[(size_t)m * N + n] = s;
            mag[(size_t)m * N + n] = g;
        }
    }
    for (int isa = CPU_ISA_SCALAR; isa <= (int)cpu_isa_detect(); isa++) {
        /* Every level quantizes the input to the same bytes. */
        quant_act_rows((CpuIsa)isa, a, x, K, M, K, xq2);
        cr_assert(memcmp(xq, xq2, xrb * (size_t)M) == 0, "%s input quantized differently at %s",
                  weight_type_name(t), cpu_isa_name((CpuIsa)isa));
        /* Every tile height (0: the level's own) at the SIMD levels: the
         * AVX-512 level's 4-row tiles run on AVX2-only machines too. */
        for (int tile = 0; tile <= (isa == CPU_ISA_SCALAR ? 0 : 4); tile++) {
        for (size_t i = 0; i < (size_t)M * ldy; i++) y[i] = NAN;
        /* In two calls that split the rows unevenly, as tasks do. */
        int split = N / 3;
        quant_gemm_tiles((CpuIsa)isa, tile, t, q->data, K, xq, M, y, ldy, 0, split);
        quant_gemm_tiles((CpuIsa)isa, tile, t, q->data, K, xq, M, y, ldy, split, N);
        for (int m = 0; m < M; m++) {
            for (int n = 0; n < ldy; n++) {
                float got = y[(size_t)m * ldy + n];
                if (n >= N) { /* past the rows: untouched */
                    cr_assert(isnan(got), "%s wrote y[%d,%d] past N=%d", weight_type_name(t), m, n, N);
                    continue;
                }
                double r = ref[(size_t)m * N + n], tol = 1e-5 * mag[(size_t)m * N + n] + 1e-30;
                float dot = weight_dot_q8_ref(t, (const uint8_t *)q->data + weight_row_bytes(t, K) * n,
                                              (const uint8_t *)xq + xrb * (size_t)m, K);
                cr_assert(fabs(got - r) <= tol && fabs(got - dot) <= tol,
                          "%s %s tile %d M=%d N=%d K=%d: y[%d,%d] = %.9g, float64 %.9g, "
                          "weight_dot_q8_ref %.9g",
                          weight_type_name(t), cpu_isa_name((CpuIsa)isa), tile, M, N, K, m, n, got,
                          r, dot);
            }
        }
        }
    }
    free(xq);
    free(xq2);
    free(y);
    free(ref);
    free(mag);
}

Test(cpu_matmul_quant, kernels_match_references, .timeout = 600) {
    static const int Ms[] = {1, 2, 3, 5, 8, 17, 64, 130};
    static const int Ns[] = {1, 7, 33, 300};
    static const int Ks[] = {256, 512, 1024 + 256};
    for (int ti = 0; ti < NTYPES; ti++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
            for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++) {
                QuantWeight q = make_quant_weight(TYPES[ti], Ns[ni], Ks[ki]);
                for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
                    float *x = random_rows(Ms[mi], Ks[ki]);
                    check_kernels(TYPES[ti], &q, x, Ms[mi]);
                    free(x);
                }
                free_quant_weight(&q);
            }
    cr_log_info("quant_gemm checked at SIMD levels scalar..%s", cpu_isa_name(cpu_isa_detect()));
}

/* Q8_0, Q4_0 and Q5_0 rows of an odd number of blocks (the in-place tiles
 * take two at a time), in both kernels (the packed one from 16 activation rows). */
Test(cpu_matmul_quant, q8_0_odd_block_counts) {
    static const int Ks[] = {32, 96, 288};
    static const int Ms[] = {1, 5, 25};
    for (int ti = 0; ti < 4; ti++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
            QuantWeight q = make_quant_weight(Q32_TYPES[ti], 7, Ks[ki]);
            for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
                int M = Ms[mi];
                float *x = random_rows(M, Ks[ki]);
                check_kernels(Q32_TYPES[ti], &q, x, M);
                free(x);
            }
            free_quant_weight(&q);
        }
}

/* Q8_0 / Q4_0 / Q5_0 rows longer than the kernels' K segment (64 blocks, whose scales
 * they decode per segment) and more activation rows than one pass holds. */
Test(cpu_matmul_quant, q8_0_long_rows) {
    static const int Ks[] = {8192 + 32 * 9, 3 * 8192};
    for (int ti = 0; ti < 4; ti++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
            QuantWeight q = make_quant_weight(Q32_TYPES[ti], 6, Ks[ki]);
            for (int M = 1; M <= 41; M += 40) {
                float *x = random_rows(M, Ks[ki]);
                check_kernels(Q32_TYPES[ti], &q, x, M);
                free(x);
            }
            free_quant_weight(&q);
        }
}

/* A Q8_0 (Q4_0, Q5_0) row's outputs are the same bits whichever kernel its batch takes
 * (in place below 16 rows, packed from 16), over several K segments and a
 * partial strip of 8 weight rows. */
Test(cpu_matmul_quant, q8_0_kernels_agree_bitwise) {
    enum { N = 13, K = 32 * 150, M = 27 };
    for (int ti = 0; ti < 4; ti++) {
        const WeightType t = Q32_TYPES[ti];
        QuantWeight q = make_quant_weight(t, N, K);
        float *x = random_rows(M, K);
        size_t xrb = quant_act_row_bytes(QUANT_ACT_Q8_0, K);
        uint8_t *xq = malloc(xrb * M);
        float *all = malloc(sizeof(float) * M * N), *one = malloc(sizeof(float) * N);
        cr_assert(xq && all && one);
        CpuIsa isa = cpu_isa_active();
        quant_act_rows(isa, QUANT_ACT_Q8_0, x, K, M, K, xq);
        quant_gemm(isa, t, q.data, K, xq, M, all, N, 0, N);
        for (int m = 0; m < M; m++) {
            quant_gemm(isa, t, q.data, K, xq + xrb * m, 1, one, N, 0, N);
            cr_assert(memcmp(one, all + (size_t)m * N, sizeof(float) * N) == 0,
                      "%s %s: row %d alone differs from row %d of %d", weight_type_name(t), cpu_isa_name(isa), m,
                      m, M);
        }
        free(xq);
        free(all);
        free(one);
        free(x);
        free_quant_weight(&q);
    }
}

/* Every quant at its largest (Q8_0: -128) times activations of +-127: the
 * kernels' int16 partial sums at their bounds (cpu_matmul_quant_tile.h's
 * q_row_block sums up to 8 vpmaddubsw pairs of Q4_K in int16), with 3 rows
 * and with 25 (Q8_0's packed kernel). */
Test(cpu_matmul_quant, largest_quants) {
    enum { N = 5, K = 512, M = 25 };
    for (int ti = 0; ti < NTYPES; ti++) {
        WeightType t = TYPES[ti];
        QuantWeight q = make_quant_weight(t, N, K);
        size_t rb = weight_row_bytes(t, K), bs = weight_block_bytes(t);
        float *row = malloc(sizeof(float) * K);
        cr_assert(row);
        for (int n = 0; n < N; n++) {
            uint8_t *r = (uint8_t *)q.data + rb * n;
            for (size_t b = 0; b < rb / bs; b++) {
                uint8_t *blk = r + b * bs;
                uint16_t d = f32_to_f16(0.001f * (float)(n + 1));
                if (t == WEIGHT_Q8_0) {
                    memcpy(blk, &d, 2);
                    memset(blk + 2, 0x80, QK8_0);
                } else if (t == WEIGHT_Q4_0 || t == WEIGHT_Q5_0 || t == WEIGHT_IQ4_NL) { /* code 0: -8 / -16 / -127 */
                    memset(blk, 0, bs);
                    memcpy(blk, &d, 2);
                } else if (t == WEIGHT_Q6_K) {
                    BlockQ6K *x = (BlockQ6K *)blk;
                    memset(x->ql, 0xff, sizeof x->ql);
                    memset(x->qh, 0xff, sizeof x->qh);
                    for (int j = 0; j < 16; j++) x->scales[j] = (int8_t)(j % 2 ? 127 : -128);
                    x->d = d;
                } else {
                    memset(blk, 0xff, bs); /* scales and mins 63, quants 15 (Q5_K: 31) */
                    memcpy(blk, &d, 2);
                    memcpy(blk + 2, &d, 2);
                }
            }
            weight_dequantize_row(t, r, row, K);
            for (int k = 0; k < K; k++) q.deq[(size_t)n * K + k] = row[k];
        }
        float x[M * K];
        for (int m = 0; m < M; m++)
            for (int k = 0; k < K; k++) /* all +127, all -127, alternating */
                x[m * K + k] = m % 3 == 0 ? 1.0f : m % 3 == 1 ? -1.0f : k % 2 ? 1.0f : -1.0f;
        check_kernels(t, &q, x, 3);
        check_kernels(t, &q, x, M);
        free(row);
        free_quant_weight(&q);
    }
}

/* Zero blocks (d = 0) and extreme activations: exact where the reference is. */
Test(cpu_matmul_quant, zero_and_extreme_inputs) {
    enum { N = 9, K = 512, M = 3 };
    for (int ti = 0; ti < NTYPES; ti++) {
        WeightType t = TYPES[ti];
        QuantWeight q = make_quant_weight(t, N, K);
        float *x = random_rows(M, K);
        for (int k = 0; k < 256; k++) x[k] = 0;           /* row 0: a zero block */
        for (int k = 0; k < K; k++) x[K + k] = k % 2 ? 3e4f : -3e4f; /* row 1: large (Q8_0 keeps d in f16) */
        check_kernels(t, &q, x, M);
        free(x);
        free_quant_weight(&q);
    }
}

/* Non-finite activations quantize to the reference's bytes at every level
 * (NaN to -127 as lrintf's INT_MIN clamped; an infinity makes d infinite). */
Test(cpu_matmul_quant, nonfinite_inputs_quantize_alike) {
    enum { K = 512 };
    float x[3 * K];
    for (int i = 0; i < 3 * K; i++) x[i] = matmul_uniform();
    x[5] = NAN;
    x[K + 300] = INFINITY;
    x[2 * K + 7] = -INFINITY;
    x[2 * K + 8] = NAN;
    for (int a = 0; a < 2; a++) {
        size_t rb = quant_act_row_bytes((QuantActType)a, K);
        uint8_t ref[3 * 2 * 292], got[3 * 2 * 292];
        cr_assert(3 * rb <= sizeof ref);
        quant_act_rows(CPU_ISA_SCALAR, (QuantActType)a, x, K, 3, K, ref);
        for (int isa = CPU_ISA_AVX2; isa <= (int)cpu_isa_detect(); isa++) {
            quant_act_rows((CpuIsa)isa, (QuantActType)a, x, K, 3, K, got);
            cr_assert(memcmp(ref, got, 3 * rb) == 0, "act type %d at %s", a, cpu_isa_name((CpuIsa)isa));
        }
    }
}

/* cpu_matmul's answer against float64 with float activations. */
static void check_end_to_end(CpuMatmul *mm, const QuantWeight *q, const float *x, int M,
                             const float *y, const char *what) {
    int N = q->w.rows, K = q->w.cols;
    int per = quant_act_type(q->w.type) == QUANT_ACT_Q8_0 ? QK8_0 : QK_K;
    (void)mm;
    for (int m = 0; m < M; m++) {
        const float *xr = x + (size_t)m * K;
        for (int n = 0; n < N; n++) {
            const double *wr = q->deq + (size_t)n * K;
            double ref = 0, mag = 0, bound = 0;
            for (int b = 0; b < K / per; b++) {
                double amax = 0, wsum = 0;
                for (int k = b * per; k < (b + 1) * per; k++) {
                    ref += wr[k] * xr[k];
                    mag += fabs(wr[k] * xr[k]);
                    wsum += fabs(wr[k]);
                    if (fabs(xr[k]) > amax) amax = fabs(xr[k]);
                }
                /* Q8_0's d is rounded to f16 (relative 2^-11) first. */
                bound += amax / 254.0 * (1.0 + 1.0 / 1024) * wsum;
            }
            double got = y[(size_t)m * N + n], tol = bound + 1e-5 * (mag + bound) + 1e-30;
            cr_assert(fabs(got - ref) <= tol, "%s %s M=%d N=%d K=%d: y[%d,%d] = %.9g, want %.9g +- %.3g",
                      what, weight_type_name(q->w.type), M, N, K, m, n, got, ref, tol);
        }
    }
}

Test(cpu_matmul_quant, cpu_matmul_end_to_end_and_thread_split, .timeout = 300) {
    Error err = {0};
    ThreadPool *one = thread_pool_create(1, &err), *three = thread_pool_create(3, &err);
    cr_assert(one && three, "%s", err.msg);
    CpuMatmul *mm1 = cpu_matmul_create(one, 40, 1280, &err);
    CpuMatmul *mm3 = cpu_matmul_create(three, 40, 1280, &err);
    cr_assert(mm1 && mm3, "%s", err.msg);
    static const int Ms[] = {1, 4, 40};
    for (int ti = 0; ti < NTYPES; ti++) {
        /* More rows than one task holds (256), and a partial strip. */
        QuantWeight q = make_quant_weight(TYPES[ti], 601, 1280);
        cr_assert_eq(cpu_matmul_choose(1, &q.w, cpu_isa_active()), MATMUL_QUANT);
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            int M = Ms[mi];
            float *x = random_rows(M, 1280);
            float *y1 = malloc(sizeof(float) * (size_t)M * 601), *y3 = malloc(sizeof(float) * (size_t)M * 601);
            cr_assert(x && y1 && y3);
            cpu_matmul(mm1, y1, x, M, &q.w);
            cpu_matmul(mm3, y3, x, M, &q.w);
            check_end_to_end(mm1, &q, x, M, y1, "cpu_matmul");
            cr_assert(memcmp(y1, y3, sizeof(float) * (size_t)M * 601) == 0,
                      "%s M=%d: 1 and 3 threads differ", weight_type_name(q.w.type), M);
            /* A row's result does not depend on the batch it is in (while
             * the batch takes the same strategy; quantized weights keep
             * theirs at every M, and Q8_0's two kernels agree bit for bit). */
            if (M > 1 && cpu_matmul_choose(M, &q.w, cpu_isa_active()) ==
                             cpu_matmul_choose(1, &q.w, cpu_isa_active())) {
                cpu_matmul(mm3, y3, x + 1280, 1, &q.w);
                cr_assert(memcmp(y1 + 601, y3, sizeof(float) * 601) == 0,
                          "%s: row 1 alone differs from row 1 of %d", weight_type_name(q.w.type), M);
            }
            /* The float paths, forced: decoded weights times float inputs. */
            MatmulStrategy forced[] = {MATMUL_GEMM, MATMUL_BLAS, MATMUL_ROWS};
            for (size_t f = 0; f < sizeof forced / sizeof forced[0]; f++) {
                for (size_t k = 0; k < (size_t)M * 601; k++) y3[k] = NAN;
                cpu_matmul_with(mm3, y3, x, M, &q.w, forced[f], cpu_isa_active());
                check_end_to_end(mm3, &q, x, M, y3, matmul_strategy_name(forced[f]));
            }
            /* bf16 inputs do not apply to quantized weights. */
            cpu_matmul_set_bf16_inputs(mm3, true);
            cpu_matmul(mm3, y3, x, M, &q.w);
            cpu_matmul_set_bf16_inputs(mm3, false);
            cr_assert(memcmp(y1, y3, sizeof(float) * (size_t)M * 601) == 0);
            free(x);
            free(y1);
            free(y3);
        }
        free_quant_weight(&q);
    }
    cpu_matmul_destroy(mm1);
    cpu_matmul_destroy(mm3);
    thread_pool_destroy(one);
    thread_pool_destroy(three);
}

/* A multi call mixing every quantized type and a bf16 weight gives each
 * weight what it gets alone; more rows than max_rows run in chunks. */
Test(cpu_matmul_quant, multi_mixed_types_and_chunks, .timeout = 120) {
    Error err = {0};
    ThreadPool *pool = thread_pool_create(2, &err);
    cr_assert(pool, "%s", err.msg);
    CpuMatmul *mm = cpu_matmul_create(pool, 8, 512, &err);
    cr_assert(mm, "%s", err.msg);
    enum { K = 512, M = 19 };
    QuantWeight q[NTYPES];
    const Weight *ws[NTYPES + 1];
    float *ys[NTYPES + 1], *alone = malloc(sizeof(float) * M * 300);
    int rows[NTYPES] = {33, 300, 7, 65, 12, 41, 9};
    for (int i = 0; i < NTYPES; i++) {
        q[i] = make_quant_weight(TYPES[i], rows[i], K);
        ws[i] = &q[i].w;
        ys[i] = malloc(sizeof(float) * M * (size_t)rows[i]);
        cr_assert(ys[i]);
    }
    TestWeight b = make_test_weight(40, K, WEIGHT_BF16);
    ws[NTYPES] = &b.w;
    ys[NTYPES] = malloc(sizeof(float) * M * 40);
    float *x = random_rows(M, K);
    cr_assert(alone && ys[NTYPES] && x);
    cpu_matmul_multi(mm, x, M, ws, ys, NTYPES + 1);
    for (int i = 0; i < NTYPES; i++) {
        check_end_to_end(mm, &q[i], x, M, ys[i], "multi");
        cpu_matmul(mm, alone, x, M, ws[i]);
        cr_assert(memcmp(alone, ys[i], sizeof(float) * M * (size_t)rows[i]) == 0, "%s multi vs alone",
                  weight_type_name(TYPES[i]));
    }
    check_matmul_reference(ys[NTYPES], x, M, &b, 5e-7, "multi bf16", cpu_isa_active());
    /* Grouped: each its own input. */
    MatmulGroup g[2] = {{x, M, ws[1], ys[1], NULL}, {x + K, 3, ws[3], ys[3], NULL}};
    cpu_matmul_grouped(mm, g, 2);
    cpu_matmul(mm, alone, x + K, 3, ws[3]);
    cr_assert(memcmp(alone, ys[3], sizeof(float) * 3 * (size_t)rows[3]) == 0);
    check_end_to_end(mm, &q[1], x, M, ys[1], "grouped");
    for (int i = 0; i <= NTYPES; i++) free(ys[i]);
    for (int i = 0; i < NTYPES; i++) free_quant_weight(&q[i]);
    free_test_weight(&b);
    free(x);
    free(alone);
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
}

/* Inputs the kernels cannot take give NaN, never a bad read. */
Test(cpu_matmul_quant, unusable_shapes_give_nan) {
    Error err = {0};
    ThreadPool *pool = thread_pool_create(1, &err);
    CpuMatmul *mm = pool ? cpu_matmul_create(pool, 2, 256, &err) : NULL;
    cr_assert(mm, "%s", err.msg);
    QuantWeight q = make_quant_weight(WEIGHT_Q4_K, 3, 512); /* wider than max_cols */
    float *x = random_rows(2, 512), y[6];
    cpu_matmul(mm, y, x, 2, &q.w);
    for (int i = 0; i < 6; i++) cr_assert(isnan(y[i]));
    free(x);
    free_quant_weight(&q);
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
}
