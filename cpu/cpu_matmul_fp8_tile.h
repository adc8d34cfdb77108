/*
 * cpu_matmul_fp8_tile.h - the x86 kernels of cpu_matmul_fp8.h, as a
 * template: hand-written, included once per SIMD level by
 * cpu_matmul_fp8_avx2.c and cpu_matmul_fp8_avx512.c, which define first
 *   FT, FFN   the target attribute, and static inline always_inline with it
 *   FV, FVL   the vector type and its float lanes (8 or 16)
 *   FMR, FNR  activation rows x weight rows of a tile from 5 activation
 *             rows on; FNR_FEW weight rows side by side for 1 or 2
 *   FGEMM, FDECODE  the names of the exported functions
 *   and the vector primitives called below: fv_zero, fv_set1, fv_mul,
 *   fv_fma, fv_sum (the lanes' sum), fv_load / fv_load_part (floats;
 *   _part: the first n lanes, zeros past them, nothing past them read),
 *   fv_store / fv_store_part, fv_fp8 (FVL bytes -> e4m3 * 2^-8 as floats,
 *   see cpu_matmul_fp8.h), fv_fp8_part (the first n bytes, zeros past
 *   them) and fv_fp8x2 (2 x FVL bytes to two vectors).
 * Deliberately no include guard.
 *
 * The sums: every output has a total of FVL lanes and, per 128-column
 * chunk, a partial of FVL lanes that gets x * h for the chunk's columns FVL
 * at a time in K order (h = e4m3 * 2^-8 as widened, the last step on
 * partial loads whose zero lanes add +0); at the chunk's end the total
 * becomes total + partial * (scale * 2^8) in one FMA, and after the last
 * chunk the total's lanes are summed. Multiplying by the scale once per
 * chunk rather than every weight saves a multiply per vector, which counts
 * where the widening sets the speed: cvtph2ps on Zen 3 converts about 4
 * values a cycle, and one sequence's decode (fp8_few) is bound by it, not by
 * memory. Both paths below do exactly these operations, so a row's result
 * is the same bits whichever path its batch takes, whatever the tile's shape
 * and the split of the weight rows into tasks.
 *
 * One to four activation rows (a few sequences decoding; fp8_few): a strip
 * of weight rows (FNR_FEW for 1 or 2 activation rows, 2 for 3 or 4) is
 * read side by side, 2 x FVL bytes of each per step, widened and used at
 * once. Software prefetches 4 KiB ahead into L2, moved past the strip's
 * other rows when they leave this one (cpu_matmul_small.c's measured
 * scheme).
 *
 * Five rows and more (fp8_tiles): a strip of FNR rows (nr x K bytes, one
 * contiguous run) is widened once into the caller's scratch (fp8_halves:
 * the h values as float32), and every tile of FMR activation rows
 * multiplies it from cache with cpu_matmul_small.c's register tiling (each
 * weight vector loaded once per step for FMR FMAs). Without scratch these
 * rows go through fp8_few four at a time: slower, the same bits.
 */
#include <stddef.h>
#include <stdint.h>

#include "cpu_matmul_fp8.h"
#include "cpu_simd.h"

#define FUNROLL _Pragma("GCC unroll 8")
/* Array bounds of the accumulators, no larger than the tiles need (GCC
 * keeps small arrays of vectors in registers, not large ones). */
#define F_NR_MAX (FNR > FNR_FEW ? FNR : FNR_FEW)

/* Activation rows up to which the weights are widened in registers
 * (fp8_few), and its accumulators per set (mr x nr: 1..2 x FNR_FEW, 3..4 x 2).
 * One thread, 3072 x 1024 from cache, us at 3 / 4 rows: 385 / 466 in
 * registers, 474 / 556 through the scratch (two passes, widen then
 * multiply, that do not overlap); at 8 rows 930 vs 886. */
#define FEW_M 4
#define FEW_ACC 8
/* Software prefetch distance in each weight row of a strip (bytes). */
#define F_PREFETCH 4096

FFN size_t fp8_wrap(size_t off, int K, int nr) {
    return off < (size_t)K ? off : off + (size_t)(nr - 1) * (size_t)K;
}

/* The end of the chunk starting at column k. */
FFN int fp8_chunk_end(int k, int K) { return K - k < FP8_BLOCK ? K : k + FP8_BLOCK; }

/* ---- up to FEW_M activation rows: widen in registers ---------------------- */

/* y[i][n + j] for i < mr (1..FEW_M), j < nr, over the whole K; mr x nr at
 * most FEW_ACC (the accumulators are flat arrays of that size: small
 * enough for GCC to keep in registers). */
FFN void fp8_few(float *y, int ldy, const float *x, int ldx, const uint8_t *q, const float *scales,
                 int K, int n, int mr, int nr) {
    FV tot[FEW_ACC];
    FUNROLL for (int a = 0; a < mr * nr; a++) tot[a] = fv_zero();
    int kb = (K + FP8_BLOCK - 1) / FP8_BLOCK;
    const uint8_t *wr[F_NR_MAX];
    const float *sr[F_NR_MAX];
    FUNROLL for (int j = 0; j < nr; j++) {
        wr[j] = q + (size_t)(n + j) * K;
        sr[j] = scales + (size_t)((n + j) / FP8_BLOCK) * kb;
    }
    for (int c = 0; c < kb; c++) {
        int k = c * FP8_BLOCK, end = fp8_chunk_end(k, K);
        FV acc[FEW_ACC];
        FUNROLL for (int a = 0; a < mr * nr; a++) acc[a] = fv_zero();
        for (; k + 2 * FVL <= end; k += 2 * FVL) {
            if ((k & 63) == 0)
                FUNROLL for (int j = 0; j < nr; j++)
                    prefetch_l2(wr[j] + fp8_wrap((size_t)k + F_PREFETCH, K, nr));
            FV w0[F_NR_MAX], w1[F_NR_MAX];
            FUNROLL for (int j = 0; j < nr; j++) fv_fp8x2(wr[j] + k, &w0[j], &w1[j]);
            FUNROLL for (int i = 0; i < mr; i++) {
                FV x0 = fv_load(x + (size_t)i * ldx + k), x1 = fv_load(x + (size_t)i * ldx + k + FVL);
                FUNROLL for (int j = 0; j < nr; j++) {
                    acc[i * nr + j] = fv_fma(x0, w0[j], acc[i * nr + j]);
                    acc[i * nr + j] = fv_fma(x1, w1[j], acc[i * nr + j]);
                }
            }
        }
        /* The K tail (the last chunk only): one whole vector, then a part. */
        for (; k < end; k += FVL) {
            int left = end - k;
            FV w[F_NR_MAX];
            FUNROLL for (int j = 0; j < nr; j++)
                w[j] = left >= FVL ? fv_fp8(wr[j] + k) : fv_fp8_part(wr[j] + k, left);
            FUNROLL for (int i = 0; i < mr; i++) {
                const float *xr = x + (size_t)i * ldx + k;
                FV xv = left >= FVL ? fv_load(xr) : fv_load_part(xr, left);
                FUNROLL for (int j = 0; j < nr; j++) acc[i * nr + j] = fv_fma(xv, w[j], acc[i * nr + j]);
            }
        }
        FUNROLL for (int j = 0; j < nr; j++) {
            FV s = fv_set1(sr[j][c] * 256.0f);
            FUNROLL for (int i = 0; i < mr; i++) tot[i * nr + j] = fv_fma(acc[i * nr + j], s, tot[i * nr + j]);
        }
    }
    FUNROLL for (int i = 0; i < mr; i++)
        FUNROLL for (int j = 0; j < nr; j++) y[(size_t)i * ldy + n + j] = fv_sum(tot[i * nr + j]);
}

/* fp8_few for 1..FEW_M rows, with mr and nr constants in each call (the
 * loops then unroll into registers): strips of FNR_FEW weight rows for 1
 * or 2 activation rows, of 2 for 3 or 4 (at most FEW_ACC accumulators). */
FFN void fp8_few_12(float *y, int ldy, const float *x, int ldx, int M, const uint8_t *q,
                    const float *scales, int K, int n, int nr) {
    if (M == 2) fp8_few(y, ldy, x, ldx, q, scales, K, n, 2, nr);
    else fp8_few(y, ldy, x, ldx, q, scales, K, n, 1, nr);
}

FFN void fp8_few_34(float *y, int ldy, const float *x, int ldx, int M, const uint8_t *q,
                    const float *scales, int K, int n, int nr) {
    if (M == 4) fp8_few(y, ldy, x, ldx, q, scales, K, n, 4, nr);
    else fp8_few(y, ldy, x, ldx, q, scales, K, n, 3, nr);
}

/* Activation rows [0, M), M in 1..FEW_M, weight rows [n0, n1). */
FFN void fp8_gemm_few(float *y, int ldy, const float *x, int ldx, int M, const uint8_t *q,
                      const float *scales, int K, int n0, int n1) {
    int n = n0;
    if (M >= 3) {
        for (; n + 2 <= n1; n += 2) fp8_few_34(y, ldy, x, ldx, M, q, scales, K, n, 2);
        if (n < n1) fp8_few_34(y, ldy, x, ldx, M, q, scales, K, n, 1);
        return;
    }
    for (; n + FNR_FEW <= n1; n += FNR_FEW) fp8_few_12(y, ldy, x, ldx, M, q, scales, K, n, FNR_FEW);
    switch (n1 - n) {
#if FNR_FEW > 3
    case 3: fp8_few_12(y, ldy, x, ldx, M, q, scales, K, n, 3); break;
#endif
#if FNR_FEW > 2
    case 2: fp8_few_12(y, ldy, x, ldx, M, q, scales, K, n, 2); break;
#endif
    case 1: fp8_few_12(y, ldy, x, ldx, M, q, scales, K, n, 1); break;
    default: break;
    }
}

/* ---- five activation rows and more: widen a strip, then tiles ------------- */

/* Rows [n0, n1) as h = e4m3 * 2^-8 (the scales not applied), K floats per
 * row at dst; the bytes read ahead are one contiguous run. */
FFN void fp8_halves(const uint8_t *q, int K, int n0, int n1, float *dst) {
    const uint8_t *row = q + (size_t)n0 * K;
    size_t total = (size_t)(n1 - n0) * K, i = 0;
    for (; i + 2 * FVL <= total; i += 2 * FVL) {
        if ((i & 63) == 0) prefetch_l2(row + i + F_PREFETCH);
        FV lo, hi;
        fv_fp8x2(row + i, &lo, &hi);
        fv_store(dst + i, lo);
        fv_store(dst + i + FVL, hi);
    }
    for (; i < total; i += FVL) {
        int left = total - i < FVL ? (int)(total - i) : FVL;
        if (left == FVL) fv_store(dst + i, fv_fp8(row + i));
        else fv_store_part(dst + i, fv_fp8_part(row + i, left), left);
    }
}

/* y[i][n + j] for i < mr, j < nr over the whole K, from the nr rows'
 * h values at h (K per row), with the rows' scales. */
FFN void fp8_tile(float *y, int ldy, const float *x, int ldx, const float *h,
                  const float *scales, int K, int n, int mr, int nr) {
    FV tot[FMR][FNR];
    FUNROLL for (int i = 0; i < mr; i++)
        FUNROLL for (int j = 0; j < nr; j++) tot[i][j] = fv_zero();
    int kb = (K + FP8_BLOCK - 1) / FP8_BLOCK;
    for (int c = 0; c < kb; c++) {
        int k = c * FP8_BLOCK, end = fp8_chunk_end(k, K);
        FV acc[FMR][FNR];
        FUNROLL for (int i = 0; i < mr; i++)
            FUNROLL for (int j = 0; j < nr; j++) acc[i][j] = fv_zero();
        for (; k + FVL <= end; k += FVL) {
            FV wv[FNR];
            FUNROLL for (int j = 0; j < nr; j++) wv[j] = fv_load(h + (size_t)j * K + k);
            FUNROLL for (int i = 0; i < mr; i++) {
                FV xv = fv_load(x + (size_t)i * ldx + k);
                FUNROLL for (int j = 0; j < nr; j++) acc[i][j] = fv_fma(xv, wv[j], acc[i][j]);
            }
        }
        if (k < end) {
            int left = end - k;
            FV wv[FNR];
            FUNROLL for (int j = 0; j < nr; j++) wv[j] = fv_load_part(h + (size_t)j * K + k, left);
            FUNROLL for (int i = 0; i < mr; i++) {
                FV xv = fv_load_part(x + (size_t)i * ldx + k, left);
                FUNROLL for (int j = 0; j < nr; j++) acc[i][j] = fv_fma(xv, wv[j], acc[i][j]);
            }
        }
        FUNROLL for (int j = 0; j < nr; j++) {
            FV s = fv_set1(scales[(size_t)((n + j) / FP8_BLOCK) * kb + c] * 256.0f);
            FUNROLL for (int i = 0; i < mr; i++) tot[i][j] = fv_fma(acc[i][j], s, tot[i][j]);
        }
    }
    FUNROLL for (int i = 0; i < mr; i++)
        FUNROLL for (int j = 0; j < nr; j++) y[(size_t)i * ldy + n + j] = fv_sum(tot[i][j]);
}

/* The strip of nr weight rows from row n, widened at h, against all M
 * activation rows: FMR at a time, then the rest in one smaller tile. */
FFN void fp8_tiles(float *y, int ldy, const float *x, int ldx, int M, const float *h,
                   const float *scales, int K, int n, int nr) {
    int m = 0;
    for (; m + FMR <= M; m += FMR)
        fp8_tile(y + (size_t)m * ldy, ldy, x + (size_t)m * ldx, ldx, h, scales, K, n, FMR, nr);
    float *ym = y + (size_t)m * ldy;
    const float *xm = x + (size_t)m * ldx;
    switch (M - m) {
#if FMR > 5
    case 5: fp8_tile(ym, ldy, xm, ldx, h, scales, K, n, 5, nr); break;
#endif
#if FMR > 4
    case 4: fp8_tile(ym, ldy, xm, ldx, h, scales, K, n, 4, nr); break;
#endif
    case 3: fp8_tile(ym, ldy, xm, ldx, h, scales, K, n, 3, nr); break;
    case 2: fp8_tile(ym, ldy, xm, ldx, h, scales, K, n, 2, nr); break;
    case 1: fp8_tile(ym, ldy, xm, ldx, h, scales, K, n, 1, nr); break;
    default: break;
    }
}

_Static_assert(FNR <= FP8_SCRATCH_ROWS && FNR_FEW <= 4 && FMR >= 3 && FMR <= 6,
               "strips of up to 4 rows (FNR within the scratch), tiles of 3..6 rows");

__attribute__((target(FT))) void FGEMM(const uint8_t *q, const float *scales, int K,
                                       const float *x, int ldx, int M, float *y, int ldy, int n0,
                                       int n1, float *scratch) {
    if (M <= 0 || n1 <= n0 || K <= 0) return;
    if (M <= FEW_M || !scratch) {
        for (int m = 0; m < M; m += FEW_M)
            fp8_gemm_few(y + (size_t)m * ldy, ldy, x + (size_t)m * ldx, ldx, M - m < FEW_M ? M - m : FEW_M, q,
                         scales, K, n0, n1);
        return;
    }
    for (int n = n0; n < n1; n += FNR) {
        int nr = n1 - n < FNR ? n1 - n : FNR;
        fp8_halves(q, K, n, n + nr, scratch);
        switch (nr) { /* nr a constant in each call: the loops unroll into registers */
#if FNR > 3
        case 4: fp8_tiles(y, ldy, x, ldx, M, scratch, scales, K, n, 4); break;
#endif
#if FNR > 2
        case 3: fp8_tiles(y, ldy, x, ldx, M, scratch, scales, K, n, 3); break;
#endif
        case 2: fp8_tiles(y, ldy, x, ldx, M, scratch, scales, K, n, 2); break;
        default: fp8_tiles(y, ldy, x, ldx, M, scratch, scales, K, n, 1); break;
        }
    }
}

/* The panels for OpenBLAS: each weight's exact value, h * (scale * 2^8). */
__attribute__((target(FT))) void FDECODE(const uint8_t *q, const float *scales, int K, int n0,
                                         int n1, float *dst) {
    int kb = (K + FP8_BLOCK - 1) / FP8_BLOCK;
    for (int n = n0; n < n1; n++, dst += K) {
        const uint8_t *row = q + (size_t)n * K;
        const float *sr = scales + (size_t)(n / FP8_BLOCK) * kb;
        for (int c = 0; c < kb; c++) {
            int k = c * FP8_BLOCK, end = fp8_chunk_end(k, K);
            FV s = fv_set1(sr[c] * 256.0f);
            for (; k + 2 * FVL <= end; k += 2 * FVL) {
                FV lo, hi;
                fv_fp8x2(row + k, &lo, &hi);
                fv_store(dst + k, fv_mul(lo, s));
                fv_store(dst + k + FVL, fv_mul(hi, s));
            }
            for (; k < end; k += FVL) {
                int left = end - k;
                if (left >= FVL) fv_store(dst + k, fv_mul(fv_fp8(row + k), s));
                else fv_store_part(dst + k, fv_mul(fv_fp8_part(row + k, left), s), left);
            }
        }
    }
}
