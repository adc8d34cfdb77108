/*
 * cpu_matmul_quant_tile.h - the x86 tile kernels of cpu_matmul_quant.h, as
 * a template: hand-written, included once per SIMD level by
 * cpu_matmul_quant_avx2.c and cpu_matmul_quant_avx512.c, which define
 *   QT        the functions' target attribute ("avx2,fma", ...)
 *   QMR       activation rows per tile by default (4 at both levels, see
 *             cpu_matmul_quant_avx2.c); tiles of 1..4 rows are compiled at
 *             every level, so the tests run each on AVX2-only machines too
 *   QGEMM, QQUANT, QDECODE  the names of the exported functions
 *             (quant_gemm_<level>, quant_act_rows_<level>, ...)
 *   Q_VNNI    (optional) Q8_0's products by vpdpbusd (AVX512-VNNI)
 *   Q_GEMM_ONLY (optional) export quant_gemm only
 * Deliberately no include guard.
 *
 * A tile is 4 weight rows (QNR) x MR activation rows over the whole K. Per
 * 32 values: each weight row's 32 quants are unpacked to unsigned bytes
 * once (Q8_0: |w|, the sign moving to the activation) and multiplied with
 * every activation row of the tile by vpmaddubsw (u8 x s8 pairs -> s16).
 *
 * K types (q_tile_k): then vpmaddwd by the sub-block's scale
 * (-> s32, exact: at most 2 x 63 x 127 x 128 per pair) into one int32
 * accumulator per (row, row) pair, weight row by weight row through a block
 * so that only MR accumulators are live. At the end of a block (256 values)
 * the four accumulators of one activation row are summed across lanes
 * together (3 vphaddd), which gives that activation row's 4 outputs side by
 * side in one vector: scaled by the four weight rows' d times the
 * activation's d and added to a float accumulator that is finally stored as
 * 4 consecutive outputs. The Q4_K/Q5_K mins come from the activation's
 * bsums (sum of the quants per 16), the Q6_K offset of 32 likewise, so no
 * subtraction touches the 256 values. Q6_K with one activation row
 * (q_row_q6_k) first sums two chunks' products in int16 (vphaddw).
 *
 * Q8_0, Q4_0, Q5_0, IQ4_NL (cpu_matmul_quant_q8_0.h): a float scale per 32 values on both sides, so each
 * block's int32 sums are reduced across the 4 weight rows (2 vphaddd
 * levels, leaving the two 128-bit halves apart), converted, and added with
 * one FMA per activation row into a float accumulator of [rows 0..3 | rows
 * 0..3]; the halves are summed once per output. The f16 scales of weights
 * and activations are decoded to float once per call (q_gemm_q8_0),
 * except a single activation row's weights, decoded in the tile.
 *
 * A strip past the last weight row (N not a multiple of 4) repeats the last
 * row and drops the extra outputs; MR takes every value 1..4 (one compiled
 * tile each), so no activation row is computed twice.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "cpu_matmul_quant.h"
#include "cpu_simd.h"
#include "base/half.h"

#define QFN static inline __attribute__((always_inline, target(QT)))
#define QTILE static __attribute__((noinline, target(QT)))
#define QUNROLL _Pragma("GCC unroll 8")
/* Pins an accumulator to a register at this point of the sums: without it
 * GCC reassociates the unrolled adds, computes every product first and
 * spills them (measured: 2x slower at 1 row). */
#define Q_KEEP(v) __asm__("" : "+x"(v))

#ifndef QUANT_TILE_COMMON
#define QUANT_TILE_COMMON
/* Weight rows per strip. */
#define QNR 4
/* Activation rows per tile at most, at any level. */
#define QMR_MAX 4
/* Software prefetch distance in the weight stream (q_prefetch): one thread,
 * 1 row, 3072 x 1024 q4_k from memory: 1 KiB 36, 4 KiB 44, 8 KiB 48,
 * 32 KiB 48 GFLOP/s (65 with the weights in cache); q8_0 4 KiB 11.6,
 * 8 KiB 15.8 GB/s. */
#ifndef QPF
#define QPF 8192
#endif
/* Activation rows per pass over a task's weight rows: 64 rows of Q8_K at
 * K = 3072 are 219 KiB, which stay in L2 while every strip sweeps them. */
#define QMB 64
/* Offsets inside a BlockQ8K: d, then the 256 quants, then the 16 bsums. */
#define Q8K_QS 4
#define Q8K_BSUMS 260

/* weight_block_bytes, constant-folded where t is. */
static inline size_t weight_block_bytes_const(WeightType t) {
    return t == WEIGHT_Q8_0 ? sizeof(BlockQ8_0)
           : t == WEIGHT_Q4_0 || t == WEIGHT_IQ4_NL ? sizeof(BlockQ4_0)
           : t == WEIGHT_Q5_0 ? sizeof(BlockQ5_0)
           : t == WEIGHT_Q4_K ? sizeof(BlockQ4K)
           : t == WEIGHT_Q5_K ? sizeof(BlockQ5K)
                              : sizeof(BlockQ6K);
}

/* f16 to f32 as q_f16x4 below, one value (an activation block's d). */
static inline float f16_scalar(uint16_t h) {
    uint32_t mag = (uint32_t)(h & 0x7fff) << 13, sign = (uint32_t)(h & 0x8000) << 16;
    float f;
    memcpy(&f, &mag, sizeof f);
    f *= 0x1p112f;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    bits |= sign;
    memcpy(&f, &bits, sizeof f);
    return f;
}
#endif

/* f16 to f32 for four values without F16C (cpu_isa does not check for it):
 * the magnitude's bits moved into a float and multiplied by 2^112 rebias the
 * exponent exactly, subnormals included. Weights are finite. */
QFN __m128 q_f16x4v(__m128i h) { /* the low 16 bits of each dword */
    __m128i mag = _mm_slli_epi32(_mm_and_si128(h, _mm_set1_epi32(0x7fff)), 13);
    __m128i sign = _mm_slli_epi32(_mm_and_si128(h, _mm_set1_epi32(0x8000)), 16);
    __m128 f = _mm_mul_ps(_mm_castsi128_ps(mag), _mm_castsi128_ps(_mm_set1_epi32(0x77800000)));
    return _mm_or_ps(f, _mm_castsi128_ps(sign));
}

QFN __m128 q_f16x4(uint16_t a, uint16_t b, uint16_t c, uint16_t d) {
    return q_f16x4v(_mm_setr_epi32(a, b, c, d));
}

/* Software prefetch of the weights, QPF bytes ahead. A strip's rows are
 * consecutive in memory and read side by side, QNR x bs bytes per block,
 * so the strip, and the strips after it, are one sequential stream: per
 * block this prefetches the next QNR x bs bytes of it. (Per row, wrapping
 * past a row's end as the bf16 GEMM does, measured no better; without
 * software prefetch a 1-row q4_k product read 4 GB/s.) */
QFN void q_prefetch(const uint8_t *strip, int b, size_t bs) {
    const uint8_t *p = strip + (size_t)b * QNR * bs + QPF;
    QUNROLL for (size_t l = 0; l < QNR * bs; l += 64) prefetch_l2(p + l);
}

/* [sum a, sum b, sum c, sum d | the same] partial sums of the two 128-bit
 * halves. (vphaddd takes 2 cycles of throughput on Zen 4, but two vpblendd,
 * a vpshufd and an add per pair of vectors in its place measured 8% slower
 * in the Q8_0 tile.) */
QFN __m256i q_reduce4h(__m256i a, __m256i b, __m256i c, __m256i d) {
    return _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
}

/* The lane sums of a, b, c, d as one vector [sum a, sum b, sum c, sum d]. */
QFN __m128i q_reduce4(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i s = q_reduce4h(a, b, c, d);
    return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

QFN __m128i q_reduce4x128(__m128i a, __m128i b, __m128i c, __m128i d) {
    return _mm_hadd_epi32(_mm_hadd_epi32(a, b), _mm_hadd_epi32(c, d));
}

QFN __m256i q_low4(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
QFN __m256i q_high4(__m256i v) {
    return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
}

/* 16-bit shifts by a count that is constant once the chunk loop is unrolled;
 * a negative count shifts right. */
QFN __m256i q_shift16(__m256i v, int left) {
    return left >= 0 ? _mm256_slli_epi16(v, left) : _mm256_srli_epi16(v, -left);
}

/* Values 32c..32c+31 of a K-type block as unsigned bytes (Q6_K: q + 32). */
QFN __m256i q_unpack(WeightType t, const uint8_t *blk, int c) {
    if (t == WEIGHT_Q6_K) {
        /* 128-value halves; in each, ql[0..31] holds chunks 0 (low nibbles)
         * and 2 (high), ql[32..63] chunks 1 and 3, and qh byte l bits
         * 2q..2q+1 the top two bits of value l of chunk q. */
        const BlockQ6K *x = (const BlockQ6K *)blk;
        int half = c >> 2, q = c & 3;
        __m256i l = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * half + 32 * (q & 1)));
        __m256i h = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * half));
        __m256i lo = q < 2 ? q_low4(l) : q_high4(l);
        __m256i hi = _mm256_and_si256(q_shift16(h, 4 - 2 * q), _mm256_set1_epi8(0x30));
        return _mm256_or_si256(lo, hi);
    }
    /* Q4_K/Q5_K: qs[32p..32p+31] holds chunk 2p (low nibbles) and 2p+1
     * (high); Q5_K's bit c of qh[l] is the fifth bit of value l of chunk c. */
    const uint8_t *qs = t == WEIGHT_Q4_K ? ((const BlockQ4K *)blk)->qs : ((const BlockQ5K *)blk)->qs;
    __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * (c >> 1)));
    __m256i q = (c & 1) ? q_high4(v) : q_low4(v);
    if (t == WEIGHT_Q5_K) {
        __m256i h = _mm256_loadu_si256((const __m256i *)((const BlockQ5K *)blk)->qh);
        q = _mm256_or_si256(q, _mm256_and_si256(q_shift16(h, 4 - c), _mm256_set1_epi8(0x10)));
    }
    return q;
}

/* Q4_K/Q5_K's 12 bytes of 6-bit scales and mins as int16: the scales
 * 0..7 in both 128-bit lanes of *sc (for q_scale's byte shuffle), the mins
 * in *mn. Bytes 0-3 and 4-7 hold scales and mins 0-3 in their low 6 bits
 * and the top 2 bits of 4-7 in their high 2; bytes 8-11 hold the low 4
 * bits of scales (low nibble) and mins (high) 4-7. */
QFN void q_k_scales(__m128i head, __m256i *sc, __m128i *mn) {
    /* head: the block's first 16 bytes, dwords [d | dmin, u0, u1, u2] with
     * u0..u2 the scale bytes 0-3, 4-7, 8-11. Built in vectors: as scalar
     * code this was a quarter of a 1-row tile's instructions. */
    __m128i a = _mm_srlv_epi32(_mm_shuffle_epi32(head, _MM_SHUFFLE(3, 2, 3, 1)), _mm_setr_epi32(0, 0, 0, 4));
    a = _mm_and_si128(a, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    __m128i b = _mm_srli_epi32(_mm_shuffle_epi32(head, _MM_SHUFFLE(2, 2, 1, 1)), 2);
    b = _mm_and_si128(b, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    /* [scales 0-3, scales 4-7, mins 0-3, mins 4-7] */
    __m256i all = _mm256_cvtepu8_epi16(_mm_or_si128(a, b));
    *sc = _mm256_permute2x128_si256(all, all, 0x00);
    *mn = _mm256_extracti128_si256(all, 1);
}

/* Element c of each 128-bit lane of sc (eight int16), in every int16 of
 * that lane: one byte shuffle (GCC made a broadcast from a scalar slot two
 * instructions). */
QFN __m256i q_scale(__m256i sc, int c) {
    return _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)((2 * c + 1) << 8 | 2 * c)));
}

/* One activation row times one Q6_K block: the sub-block scales times the
 * integer sums as 8 int32 lanes (offset of 32 not yet taken off). A pair
 * of chunks' int16 products is first summed across lanes by one vphaddw
 * (a product pair is at most 2 x 63 x 127 = 16002, two fit in int16), so
 * the scales cost a vpshufb and a vpmaddwd per 64 values instead of per
 * 32. s6eo: the scales as int16, even sub-blocks in the low lane, odd in
 * the high (q_tile_k). */
QFN __m256i q_row_q6_k_block(const uint8_t *blk, const uint8_t *xq, __m256i s6eo) {
    __m256i s = _mm256_setzero_si256();
    QUNROLL for (int k = 0; k < 4; k++) {
        __m256i p0 = _mm256_maddubs_epi16(q_unpack(WEIGHT_Q6_K, blk, 2 * k),
                                          _mm256_loadu_si256((const __m256i *)(xq + 64 * k)));
        __m256i p1 = _mm256_maddubs_epi16(q_unpack(WEIGHT_Q6_K, blk, 2 * k + 1),
                                          _mm256_loadu_si256((const __m256i *)(xq + 64 * k + 32)));
        /* Per lane: chunk 2k's four pair sums, then 2k+1's; the low lane
         * holds sub-blocks 4k and 4k+2, the high 4k+1 and 4k+3: elements 2k
         * and 2k+1 of each lane of s6eo. */
        const char e = (char)(4 * k), f = (char)(4 * k + 1);
        const char g = (char)(4 * k + 2), h = (char)(4 * k + 3);
        __m256i sv = _mm256_shuffle_epi8(
            s6eo, _mm256_setr_epi8(e, f, e, f, e, f, e, f, g, h, g, h, g, h, g, h,
                                   e, f, e, f, e, f, e, f, g, h, g, h, g, h, g, h));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_hadd_epi16(p0, p1), sv));
    }
    return s;
}

/* The one-activation-row Q6_K tile (decode, and the tied lm_head of
 * Qwen3 GGUF files): one thread, 3072 x 1024, 127.6 -> 118.5 us with the
 * weights in cache, 133.4 -> 123.9 from memory against q_tile_k. The same
 * vphaddw fold measured slower for Q4_K (99 -> 106 us) and Q5_K, whose
 * scales are per 32 values already: vphaddw takes 2 cycles on Zen 4. */
QFN void q_row_q6_k(const uint8_t *const *wr, int nb, const uint8_t *x, float *y, int nvalid, int pf) {
    const size_t bs = sizeof(BlockQ6K);
    __m128 facc = _mm_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *xb = x + (size_t)b * sizeof(BlockQ8K);
        if (pf) q_prefetch(wr[0], b, bs);
        float dx;
        memcpy(&dx, xb, sizeof dx);
        __m256i bsum = _mm256_loadu_si256((const __m256i *)(xb + Q8K_BSUMS));
        __m256i sum[QNR];
        uint16_t dh[QNR];
        QUNROLL for (int j = 0; j < QNR; j++) {
            const BlockQ6K *w = (const BlockQ6K *)(wr[j] + (size_t)b * bs);
            dh[j] = w->d;
            __m128i sc = _mm_loadu_si128((const __m128i *)w->scales);
            __m256i s6eo = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(
                sc, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15)));
            /* minus 32 sum_j sc_j bsum_j: the offset of the unsigned quants */
            __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc), bsum), 5);
            sum[j] = _mm256_sub_epi32(q_row_q6_k_block((const uint8_t *)w, xb + Q8K_QS, s6eo), off);
        }
        __m128 dv = q_f16x4(dh[0], dh[1], dh[2], dh[3]);
        facc = _mm_fmadd_ps(_mm_cvtepi32_ps(q_reduce4(sum[0], sum[1], sum[2], sum[3])),
                            _mm_mul_ps(dv, _mm_set1_ps(dx)), facc);
    }
    if (nvalid == QNR) {
        _mm_storeu_ps(y, facc);
    } else {
        float out[4];
        _mm_storeu_ps(out, facc);
        memcpy(y, out, sizeof(float) * (size_t)nvalid);
    }
}

/* One K-type tile: y[i * ldy + j] for i < MR, j < nvalid. */
QFN void q_tile_k(WeightType t, int MR, const uint8_t *const *wr, int nb,
                      const uint8_t *const *xr, float *y, int ldy, int nvalid, int pf) {
    if (t == WEIGHT_Q6_K && MR == 1) return q_row_q6_k(wr, nb, xr[0], y, nvalid, pf);
    const size_t bs = weight_block_bytes_const(t);
    __m128 facc[QMR_MAX];
    QUNROLL for (int i = 0; i < MR; i++) facc[i] = _mm_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk[QNR];
        QUNROLL for (int j = 0; j < QNR; j++) blk[j] = wr[j] + (size_t)b * bs;
        if (pf) q_prefetch(wr[0], b, bs);
        /* Per weight row: its scales (and mins) and d (and dmin). */
        __m256i scl[QNR];
        __m128i mins[QNR];
        __m256i s6[QNR], s6eo[QNR];
        uint16_t dh[QNR] = {0};
        __m128i head[QNR];
        QUNROLL for (int j = 0; j < QNR; j++) {
            if (t == WEIGHT_Q6_K) {
                const BlockQ6K *x = (const BlockQ6K *)blk[j];
                dh[j] = x->d;
                __m128i sc = _mm_loadu_si128((const __m128i *)x->scales);
                s6[j] = _mm256_cvtepi8_epi16(sc);
                /* Even scales in the low lane, odd in the high: chunk c's
                 * two sub-blocks 2c and 2c+1 are then element c of each
                 * lane, one vpshufb away (q_scale), where a vpermd per
                 * chunk took two uops on this EPYC. */
                s6eo[j] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(
                    sc, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15)));
            } else { /* Q4_K and Q5_K start with d, dmin and the 12 scale bytes */
                head[j] = _mm_loadu_si128((const __m128i *)blk[j]);
                q_k_scales(head[j], &scl[j], &mins[j]);
            }
        }
        __m128 dv, dmv = _mm_setzero_ps();
        if (t == WEIGHT_Q6_K) {
            dv = q_f16x4(dh[0], dh[1], dh[2], dh[3]);
        } else { /* dword 0 of each head is d | dmin << 16 */
            __m128i dd = _mm_unpacklo_epi64(_mm_unpacklo_epi32(head[0], head[1]),
                                            _mm_unpacklo_epi32(head[2], head[3]));
            dv = q_f16x4v(dd);
            dmv = q_f16x4v(_mm_srli_epi32(dd, 16));
        }
        /* Weight row by weight row: only that row's MR accumulators are live
         * through the chunks (the activations come in as vpmaddubsw memory
         * operands), so 4-row tiles fit AVX2's 16 registers; a row's sums
         * then wait in acc for the reduction across rows. Chunk-major with
         * all 4 x MR accumulators live spilled most of them (281 stack
         * accesses in the 4-row Q6_K tile). */
        __m256i acc[QNR][QMR_MAX];
        QUNROLL for (int j = 0; j < QNR; j++) {
            __m256i r[QMR_MAX];
            QUNROLL for (int i = 0; i < MR; i++) r[i] = _mm256_setzero_si256();
            QUNROLL for (int c = 0; c < 8; c++) {
                __m256i wv = q_unpack(t, blk[j], c);
                /* Q6_K: sub-blocks 2c (low 128 bits) and 2c+1 (high). */
                __m256i sv = q_scale(t == WEIGHT_Q6_K ? s6eo[j] : scl[j], c);
                QUNROLL for (int i = 0; i < MR; i++) {
                    __m256i av = _mm256_loadu_si256(
                        (const __m256i *)(xr[i] + (size_t)b * sizeof(BlockQ8K) + Q8K_QS + 32 * c));
                    r[i] = _mm256_add_epi32(r[i], _mm256_madd_epi16(_mm256_maddubs_epi16(wv, av), sv));
                    Q_KEEP(r[i]);
                }
            }
            if (t == WEIGHT_Q6_K) {
                /* sum sc_j (q - 32) a = sum sc_j q a - 32 sum_j sc_j bsum_j */
                QUNROLL for (int i = 0; i < MR; i++) {
                    __m256i bsum = _mm256_loadu_si256(
                        (const __m256i *)(xr[i] + (size_t)b * sizeof(BlockQ8K) + Q8K_BSUMS));
                    r[i] = _mm256_sub_epi32(r[i], _mm256_slli_epi32(_mm256_madd_epi16(s6[j], bsum), 5));
                }
            }
            QUNROLL for (int i = 0; i < MR; i++) acc[j][i] = r[i];
        }
        QUNROLL for (int i = 0; i < MR; i++) {
            const uint8_t *xb = xr[i] + (size_t)b * sizeof(BlockQ8K);
            float dx;
            memcpy(&dx, xb, sizeof dx);
            __m128 dxv = _mm_set1_ps(dx);
            __m128i sum = q_reduce4(acc[0][i], acc[1][i], acc[2][i], acc[3][i]);
            facc[i] = _mm_fmadd_ps(_mm_cvtepi32_ps(sum), _mm_mul_ps(dv, dxv), facc[i]);
            if (t != WEIGHT_Q6_K) {
                /* Minus dmin * m_j * (sum of the activation's quants in sub-block j). */
                __m128i bp = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)(xb + Q8K_BSUMS)),
                                            _mm_loadu_si128((const __m128i *)(xb + Q8K_BSUMS + 16)));
                __m128i m[QNR];
                QUNROLL for (int j = 0; j < QNR; j++)
                    m[j] = _mm_madd_epi16(mins[j], bp);
                __m128i msum = q_reduce4x128(m[0], m[1], m[2], m[3]);
                facc[i] = _mm_fnmadd_ps(_mm_cvtepi32_ps(msum), _mm_mul_ps(dmv, dxv), facc[i]);
            }
        }
    }
    QUNROLL for (int i = 0; i < MR; i++) {
        if (nvalid == QNR) {
            _mm_storeu_ps(y + (size_t)i * ldy, facc[i]);
        } else {
            float out[4];
            _mm_storeu_ps(out, facc[i]);
            memcpy(y + (size_t)i * ldy, out, sizeof(float) * (size_t)nvalid);
        }
    }
}

/* One compiled K-type tile per (type, MR): the loops above unroll fully
 * only with both constant. */
#define Q_TILES(MR)                                                                               \
    QTILE void q_tile_q4_k_##MR(const uint8_t *const *wr, int nb,                                \
                                const uint8_t *const *xr, float *y, int ldy, int nv, int pf) {   \
        q_tile_k(WEIGHT_Q4_K, MR, wr, nb, xr, y, ldy, nv, pf);                                   \
    }                                                                                            \
    QTILE void q_tile_q5_k_##MR(const uint8_t *const *wr, int nb,                                \
                                const uint8_t *const *xr, float *y, int ldy, int nv, int pf) {   \
        q_tile_k(WEIGHT_Q5_K, MR, wr, nb, xr, y, ldy, nv, pf);                                   \
    }                                                                                            \
    QTILE void q_tile_q6_k_##MR(const uint8_t *const *wr, int nb,                                \
                                const uint8_t *const *xr, float *y, int ldy, int nv, int pf) {   \
        q_tile_k(WEIGHT_Q6_K, MR, wr, nb, xr, y, ldy, nv, pf);                                   \
    }

typedef void (*QTileFn)(const uint8_t *const *wr, int nb, const uint8_t *const *xr,
                        float *y, int ldy, int nv, int pf);

Q_TILES(1)
Q_TILES(2)
Q_TILES(3)
Q_TILES(4)

/* [type - WEIGHT_Q4_K][MR - 1] */
static const QTileFn q_tiles[3][QMR_MAX] = {
    {q_tile_q4_k_1, q_tile_q4_k_2, q_tile_q4_k_3, q_tile_q4_k_4},
    {q_tile_q5_k_1, q_tile_q5_k_2, q_tile_q5_k_3, q_tile_q5_k_4},
    {q_tile_q6_k_1, q_tile_q6_k_2, q_tile_q6_k_3, q_tile_q6_k_4},
};

#include "cpu_matmul_quant_q8_0.h"

/* quant_gemm at this level (cpu_matmul_quant.h's contract; t quantized,
 * K a whole number of blocks, checked by the caller). Loop order: QMB
 * activation rows at a time (they stay in L2), then the task's weight rows
 * QNR at a time (a strip is read from memory once per QMB rows and stays in
 * L1 for its tiles), then the tiles of up to tile_rows (0: QMR) activation
 * rows. */
void QGEMM(WeightType t, const void *w, int K, const void *xq, int M, float *y, int ldy, int n0,
           int n1, int tile_rows) {
    int mr = tile_rows >= 1 && tile_rows <= QMR_MAX ? tile_rows : QMR;
    if (weight_type_q32(t)) return q_gemm_q32(t, w, K, xq, M, y, ldy, n0, n1, mr);
    size_t wrb = weight_row_bytes(t, K);
    size_t xrb = quant_act_row_bytes(quant_act_type(t), K);
    int nb = K / weight_block_elems(t);
    const QTileFn *tiles = q_tiles[t - WEIGHT_Q4_K];
    const uint8_t *wb = w, *xb = xq;
    for (int mb = 0; mb < M; mb += QMB) {
        int me = M - mb < QMB ? M : mb + QMB;
        for (int n = n0; n < n1; n += QNR) {
            int nv = n1 - n < QNR ? n1 - n : QNR;
            const uint8_t *wr[QNR];
            for (int j = 0; j < QNR; j++) wr[j] = wb + (size_t)(n + (j < nv ? j : nv - 1)) * wrb;
            for (int m = mb; m < me;) {
                int r = me - m < mr ? me - m : mr;
                const uint8_t *xr[QMR_MAX];
                for (int i = 0; i < QMR_MAX; i++) xr[i] = xb + (size_t)(m + (i < r ? i : r - 1)) * xrb;
                tiles[r - 1](wr, nb, xr, y + (size_t)m * ldy + n, ldy, nv, m == mb);
                m += r;
            }
        }
    }
}

#ifndef Q_GEMM_ONLY /* a level that only adds quant_gemm */

/* ---- the activations: float rows to Q8_K / Q8_0 blocks ---- */

/* max |x[0..n)| for n a multiple of 8, ignoring NaNs as fmaxf does (maxps
 * returns its second operand when either is NaN). */
QFN float q_absmax(const float *x, int n) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* 32 values times id, rounded to nearest even (lrintf's default mode) and
 * clamped to [-127, 127], as 32 int8 in order. A NaN becomes 0 as in the
 * reference, where lrintf returns LONG_MIN and the int conversion keeps its
 * low 32 bits (vcvtps2dq gives INT_MIN, which no finite product reaches:
 * |x * id| <= 127). */
QFN __m256i q_round32(const float *x, __m256 id) {
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    const __m256i nan = _mm256_set1_epi32(INT32_MIN);
    __m256i i[4];
    QUNROLL for (int k = 0; k < 4; k++) {
        __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), id));
        v = _mm256_andnot_si256(_mm256_cmpeq_epi32(v, nan), v);
        i[k] = _mm256_min_epi32(_mm256_max_epi32(v, lo), hi);
    }
    /* packs work per 128-bit lane: dwords come out as i0 lo, i1 lo, i2 lo,
     * i3 lo | i0 hi, ... and the permutation puts them back in order. */
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* The sums of each 16 of 128 int8 (four vectors of 32) as 8 int16. */
QFN __m128i q_sums16(__m256i q0, __m256i q1, __m256i q2, __m256i q3) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    __m256i s[4] = {q0, q1, q2, q3};
    QUNROLL for (int k = 0; k < 4; k++) s[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, s[k]), ones16);
    /* Lane 0: the first 16 of each vector, lane 1: the second 16. */
    __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
    __m128i first = _mm256_castsi256_si128(h), second = _mm256_extracti128_si256(h, 1);
    return _mm_packs_epi32(_mm_unpacklo_epi32(first, second), _mm_unpackhi_epi32(first, second));
}

/* quant_act_rows at this level: byte for byte quantize_row_q8_k / _q8_0
 * (the same float operations, in vectors). */
__attribute__((target(QT))) void QQUANT(QuantActType a, const float *x, int ldx, int M, int K, void *xq) {
    size_t rb = quant_act_row_bytes(a, K);
    for (int m = 0; m < M; m++) {
        const float *xr = x + (size_t)m * ldx;
        uint8_t *out = (uint8_t *)xq + (size_t)m * rb;
        if (a == QUANT_ACT_Q8_0) {
            for (int b = 0; b < K / QK8_0; b++) {
                BlockQ8_0 *y = (BlockQ8_0 *)(out + (size_t)b * sizeof(BlockQ8_0));
                float amax = q_absmax(xr + 32 * b, 32);
                float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
                uint16_t dh = f32_to_f16(d);
                memcpy(&y->d, &dh, sizeof dh);
                _mm256_storeu_si256((__m256i *)y->qs, q_round32(xr + 32 * b, _mm256_set1_ps(id)));
            }
            continue;
        }
        for (int b = 0; b < K / QK_K; b++) {
            BlockQ8K *y = (BlockQ8K *)(out + (size_t)b * sizeof(BlockQ8K));
            const float *xb = xr + QK_K * b;
            float amax = q_absmax(xb, QK_K);
            float id = amax > 0 ? 127.0f / amax : 0.0f;
            y->d = amax > 0 ? amax / 127.0f : 0.0f;
            __m256i q[8];
            QUNROLL for (int c = 0; c < 8; c++) {
                q[c] = q_round32(xb + 32 * c, _mm256_set1_ps(id));
                _mm256_storeu_si256((__m256i *)(y->qs + 32 * c), q[c]);
            }
            _mm_storeu_si128((__m128i *)y->bsums, q_sums16(q[0], q[1], q[2], q[3]));
            _mm_storeu_si128((__m128i *)(y->bsums + 8), q_sums16(q[4], q[5], q[6], q[7]));
        }
    }
}

/* ---- decoding weights to float32 (the float paths for Q8_0) ---- */

/* Rows [n0, n1) of a Q8_0 matrix to float32, K per row at dst: d * q, the
 * same single rounding as weight_dequantize_row. */
__attribute__((target(QT))) void QDECODE(const void *w, int K, int n0, int n1, float *dst) {
    size_t rb = weight_row_bytes(WEIGHT_Q8_0, K);
    for (int n = n0; n < n1; n++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)n * rb;
        float *out = dst + (size_t)(n - n0) * K;
        for (int b = 0; b < K / QK8_0; b++) {
            const BlockQ8_0 *x = (const BlockQ8_0 *)(row + (size_t)b * sizeof(BlockQ8_0));
            uint16_t dh;
            memcpy(&dh, &x->d, sizeof dh);
            __m256 d = _mm256_set1_ps(f16_scalar(dh));
            QUNROLL for (int k = 0; k < 4; k++) {
                __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(x->qs + 8 * k)));
                _mm256_storeu_ps(out + 32 * b + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
            }
        }
    }
}

#endif /* Q_GEMM_ONLY */
