/*
 * cpu_matmul_quant.c - activation quantization, the portable (scalar)
 * quantized-weight kernel and the dispatch of cpu_matmul_quant.h; the x86
 * tile kernels live in cpu_matmul_quant_tile.h. Hand-written.
 *
 * The scalar kernel is the reference the SIMD levels are tested against: it
 * does the same integer arithmetic (per sub-block int sums times the 6- or
 * 8-bit sub-block scale, mins and offsets through the activation's bsums)
 * one value at a time, and turns each block's sums into float once.
 */
#include "cpu_matmul_quant.h"

#include <stdint.h>
#include <string.h>

#include "cpu_matmul_quant_x86.h"
#include "base/half.h"

QuantActType quant_act_type(WeightType t) {
    return weight_type_q32(t) ? QUANT_ACT_Q8_0 : QUANT_ACT_Q8_K;
}

size_t quant_act_row_bytes(QuantActType a, int K) {
    int per = a == QUANT_ACT_Q8_0 ? QK8_0 : QK_K;
    if (K <= 0 || K % per) return 0;
    return (size_t)(K / per) * (a == QUANT_ACT_Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ8K));
}

void quant_act_rows(CpuIsa isa, QuantActType a, const float *x, int ldx, int M, int K, void *xq) {
    if (quant_act_row_bytes(a, K) == 0) return;
#if defined(__x86_64__)
    if (isa >= CPU_ISA_AVX512) return quant_act_rows_avx512(a, x, ldx, M, K, xq);
    if (isa == CPU_ISA_AVX2) return quant_act_rows_avx2(a, x, ldx, M, K, xq);
#else
    (void)isa;
#endif
    size_t rb = quant_act_row_bytes(a, K);
    for (int m = 0; m < M; m++) {
        void *row = (uint8_t *)xq + (size_t)m * rb;
        if (a == QUANT_ACT_Q8_0) quantize_row_q8_0(x + (size_t)m * ldx, row, K);
        else quantize_row_q8_k(x + (size_t)m * ldx, row, K);
    }
}

/* Activation rows per task when quantizing a large input in parallel. */
#define QUANT_INPUT_ROWS_PER_TASK 16

typedef struct QuantInputJob {
    CpuIsa isa;
    QuantActType a;
    const float *x;
    int M, K;
    void *xq;
} QuantInputJob;

static void quant_input_task(void *ctx, int task, int thread) {
    (void)thread;
    const QuantInputJob *j = ctx;
    int m0 = task * QUANT_INPUT_ROWS_PER_TASK;
    int rows = j->M - m0 < QUANT_INPUT_ROWS_PER_TASK ? j->M - m0 : QUANT_INPUT_ROWS_PER_TASK;
    quant_act_rows(j->isa, j->a, j->x + (size_t)m0 * j->K, j->K, rows, j->K,
                   (uint8_t *)j->xq + (size_t)m0 * quant_act_row_bytes(j->a, j->K));
}

void quant_act_rows_pool(ThreadPool *pool, CpuIsa isa, QuantActType a, const float *x, int M, int K,
                         void *xq) {
    QuantInputJob job = {isa, a, x, M, K, xq};
    int tasks = (M + QUANT_INPUT_ROWS_PER_TASK - 1) / QUANT_INPUT_ROWS_PER_TASK;
    if (tasks > 1) thread_pool_run(pool, tasks, quant_input_task, &job);
    else quant_act_rows(isa, a, x, K, M, K, xq);
}

/* ---- scalar -------------------------------------------------------------- */

/* Q4_K/Q5_K's packed 6-bit scale and min of sub-block j (0..7). */
static void k_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Quant l (0..31) of chunk c (values 32c..32c+31) of a K-type block,
 * unsigned (Q6_K: q + 32). */
static int k_quant(WeightType t, const uint8_t *blk, int c, int l) {
    if (t == WEIGHT_Q6_K) {
        const BlockQ6K *x = (const BlockQ6K *)blk;
        int half = c >> 2, q = c & 3;
        int lo = x->ql[64 * half + 32 * (q & 1) + l];
        lo = q < 2 ? lo & 15 : lo >> 4;
        return lo | (((x->qh[32 * half + l] >> (2 * q)) & 3) << 4);
    }
    const uint8_t *qs = t == WEIGHT_Q4_K ? ((const BlockQ4K *)blk)->qs : ((const BlockQ5K *)blk)->qs;
    int v = qs[32 * (c >> 1) + l];
    v = (c & 1) ? v >> 4 : v & 15;
    if (t == WEIGHT_Q5_K) v |= ((((const BlockQ5K *)blk)->qh[l] >> c) & 1) << 4;
    return v;
}

/* One K-type block (256 values) times one Q8_K block. */
static float k_block_dot(WeightType t, const uint8_t *blk, const BlockQ8K *x) {
    int32_t sum = 0, mins = 0;
    float d, dmin = 0;
    if (t == WEIGHT_Q6_K) {
        const BlockQ6K *w = (const BlockQ6K *)blk;
        d = f16_to_f32(w->d);
        for (int c = 0; c < 8; c++)
            for (int h = 0; h < 2; h++) { /* sub-block 2c + h */
                int32_t s = 0;
                for (int l = 16 * h; l < 16 * h + 16; l++) s += k_quant(t, blk, c, l) * x->qs[32 * c + l];
                int sc = w->scales[2 * c + h];
                sum += sc * (s - 32 * x->bsums[2 * c + h]);
            }
    } else {
        const BlockQ4K *w = (const BlockQ4K *)blk; /* Q5_K starts alike */
        d = f16_to_f32(w->d);
        dmin = f16_to_f32(w->dmin);
        for (int c = 0; c < 8; c++) {
            int sc, mn;
            k_scale_min(w->scales, c, &sc, &mn);
            int32_t s = 0;
            for (int l = 0; l < 32; l++) s += k_quant(t, blk, c, l) * x->qs[32 * c + l];
            sum += sc * s;
            mins += mn * (x->bsums[2 * c] + x->bsums[2 * c + 1]);
        }
    }
    return d * x->d * (float)sum - dmin * x->d * (float)mins;
}

static float dot_scalar(WeightType t, const uint8_t *w, const uint8_t *x, int K) {
    float s = 0;
    size_t bs = weight_block_bytes(t);
    if (weight_type_q32(t)) { /* Q8_0, Q4_0, Q5_0: d first in every block */
        for (int b = 0; b < K / QK8_0; b++) {
            const uint8_t *wb = w + (size_t)b * bs;
            const BlockQ8_0 *xb = (const BlockQ8_0 *)x + b;
            uint16_t dw;
            memcpy(&dw, wb, sizeof dw);
            int32_t sum = 0;
            for (int l = 0; l < QK8_0; l++) sum += weight_q32_value(t, wb, l) * xb->qs[l];
            s += f16_to_f32(dw) * f16_to_f32(xb->d) * (float)sum;
        }
        return s;
    }
    for (int b = 0; b < K / QK_K; b++) s += k_block_dot(t, w + b * bs, (const BlockQ8K *)x + b);
    return s;
}

static void quant_gemm_scalar(WeightType t, const void *w, int K, const void *xq, int M, float *y,
                              int ldy, int n0, int n1) {
    size_t wrb = weight_row_bytes(t, K), xrb = quant_act_row_bytes(quant_act_type(t), K);
    for (int n = n0; n < n1; n++)
        for (int m = 0; m < M; m++)
            y[(size_t)m * ldy + n] = dot_scalar(t, (const uint8_t *)w + (size_t)n * wrb,
                                                (const uint8_t *)xq + (size_t)m * xrb, K);
}

void quant_gemm_tiles(CpuIsa isa, int tile_rows, WeightType t, const void *w, int K, const void *xq,
                      int M, float *y, int ldy, int n0, int n1) {
    if (M <= 0 || n1 <= n0 || !weight_type_quantized(t)) return;
#if defined(__x86_64__)
    if (isa >= CPU_ISA_AVX512_BF16)
        return quant_gemm_avx512vnni(t, w, K, xq, M, y, ldy, n0, n1, tile_rows);
    if (isa >= CPU_ISA_AVX512) return quant_gemm_avx512(t, w, K, xq, M, y, ldy, n0, n1, tile_rows);
    if (isa == CPU_ISA_AVX2) return quant_gemm_avx2(t, w, K, xq, M, y, ldy, n0, n1, tile_rows);
#else
    (void)isa;
    (void)tile_rows;
#endif
    quant_gemm_scalar(t, w, K, xq, M, y, ldy, n0, n1);
}

void quant_gemm(CpuIsa isa, WeightType t, const void *w, int K, const void *xq, int M, float *y,
                int ldy, int n0, int n1) {
    quant_gemm_tiles(isa, 0, t, w, K, xq, M, y, ldy, n0, n1);
}

void quant_decode_rows(CpuIsa isa, WeightType t, const void *w, int K, int n0, int n1, float *dst) {
#if defined(__x86_64__)
    if (t == WEIGHT_Q8_0 && isa >= CPU_ISA_AVX512) return quant_decode_q8_0_avx512(w, K, n0, n1, dst);
    if (t == WEIGHT_Q8_0 && isa == CPU_ISA_AVX2) return quant_decode_q8_0_avx2(w, K, n0, n1, dst);
#else
    (void)isa;
#endif
    size_t rb = weight_row_bytes(t, K);
    for (int n = n0; n < n1; n++)
        weight_dequantize_row(t, (const uint8_t *)w + (size_t)n * rb, dst + (size_t)(n - n0) * K, K);
}
