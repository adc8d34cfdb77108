/*
 * cpu_matmul_rows.c - the row kernels of cpu_matmul.c: y = x . W^T for up to
 * four activation rows, one weight row at a time (hand-written; scalar,
 * AVX2 and AVX-512).
 *
 * Each task owns a range of weight rows and reads them one after another as
 * a single sequential stream (measured faster than four rows side by side:
 * the prefetchers follow one stream best), widening 16 (AVX-512) or 8
 * (AVX2) bf16 values per load with a zero-extend and a 16-bit shift. Up to
 * four activation rows share each weight load, and a task's rows stay in L2
 * for the next four. Partial sums are reduced once per output, after the K
 * loop. widen_bf16_rows is the bf16 -> f32 widening of the BLAS panels.
 */
#include "cpu_matmul_rows.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cpu_simd.h"
#include "base/half.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Software prefetch distance of the small-M kernels (1 KiB: best of
 * 256 B..4 KiB on decode). */
#define PREFETCH_BYTES 1024

/* ---- portable kernels ---------------------------------------------------- */

static void rows_scalar(float *y, int ldy, const float *x, int ldx, int M, const void *w, int K,
                        int n0, int n1, int bf16) {
    for (int n = n0; n < n1; n++) {
        for (int m = 0; m < M; m++) {
            const float *xr = x + (size_t)m * ldx;
            float s = 0.0f;
            for (int k = 0; k < K; k++) s += xr[k] * widen_at(w, bf16, (size_t)n * K + k);
            y[(size_t)m * ldy + n] = s;
        }
    }
}

static void rows_bf16_scalar(float *y, int ldy, const float *x, int ldx, int M, const void *w,
                             int K, int n0, int n1) {
    rows_scalar(y, ldy, x, ldx, M, w, K, n0, n1, 1);
}

static void rows_f32_scalar(float *y, int ldy, const float *x, int ldx, int M, const void *w, int K,
                            int n0, int n1) {
    rows_scalar(y, ldy, x, ldx, M, w, K, n0, n1, 0);
}

static void widen_scalar(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

#if defined(__x86_64__)
/* ---- AVX-512 ------------------------------------------------------------- */
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define INLINE static inline __attribute__((always_inline))
/* The register-blocking loops below have constant trip counts once inlined;
 * unrolled, their accumulators live in registers instead of on the stack. */
#define UNROLL _Pragma("GCC unroll 4")

/* Prefetches the bytes one step (64 weights) will need PREFETCH_BYTES from
 * now: the hardware prefetcher alone leaves DRAM bandwidth unused on a
 * single sequential stream (measured: +7% decode). Into L1, unlike the
 * GEMM kernels' prefetch_l2 (cpu_simd.h says why). */
INLINE void prefetch_ahead(const void *w, int bf16, size_t i) {
    const char *p = (const char *)w + i * (bf16 ? 2 : 4) + PREFETCH_BYTES;
    for (int off = 0; off < 64 * (bf16 ? 2 : 4); off += 64) __builtin_prefetch(p + off, 0, 3);
}

/* One weight row n against MB activation rows (1, 2 or 4): the row is read
 * once as one sequential stream, 64 weights per step into 4 x MB accumulators. */
AVX512 INLINE void row_avx512(float *y, int ldy, const float *x, int ldx, const void *w, int K,
                              int n, int MB, int bf16) {
    __m512 acc[4][4];
    UNROLL for (int u = 0; u < 4; u++)
        UNROLL for (int m = 0; m < MB; m++) acc[u][m] = _mm512_setzero_ps();
    size_t base = (size_t)n * K;
    int k = 0;
    for (; k + 64 <= K; k += 64) {
        prefetch_ahead(w, bf16, base + k);
        UNROLL for (int u = 0; u < 4; u++) {
            __m512 wv = widen16(w, bf16, base + k + 16 * u);
            UNROLL for (int m = 0; m < MB; m++)
                acc[u][m] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + (size_t)m * ldx + k + 16 * u),
                                            acc[u][m]);
        }
    }
    for (; k + 16 <= K; k += 16) {
        __m512 wv = widen16(w, bf16, base + k);
        UNROLL for (int m = 0; m < MB; m++)
            acc[0][m] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + (size_t)m * ldx + k), acc[0][m]);
    }
    UNROLL for (int m = 0; m < MB; m++) {
        __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[0][m], acc[1][m]),
                                   _mm512_add_ps(acc[2][m], acc[3][m]));
        float s = _mm512_reduce_add_ps(sum);
        for (int kk = k; kk < K; kk++) s += x[(size_t)m * ldx + kk] * widen_at(w, bf16, base + kk);
        y[(size_t)m * ldy + n] = s;
    }
}

AVX512 INLINE void rows_avx512(float *y, int ldy, const float *x, int ldx, int M, const void *w,
                               int K, int n0, int n1, int bf16) {
    for (int m = 0; m < M;) {
        int left = M - m, MB = left >= 4 ? 4 : left >= 2 ? 2 : 1;
        const float *xm = x + (size_t)m * ldx;
        float *ym = y + (size_t)m * ldy;
        for (int n = n0; n < n1; n++) {
            if (MB == 4) row_avx512(ym, ldy, xm, ldx, w, K, n, 4, bf16);
            else if (MB == 2) row_avx512(ym, ldy, xm, ldx, w, K, n, 2, bf16);
            else row_avx512(ym, ldy, xm, ldx, w, K, n, 1, bf16);
        }
        m += MB;
    }
}

AVX512 static void rows_bf16_avx512(float *y, int ldy, const float *x, int ldx, int M,
                                    const void *w, int K, int n0, int n1) {
    rows_avx512(y, ldy, x, ldx, M, w, K, n0, n1, 1);
}

AVX512 static void rows_f32_avx512(float *y, int ldy, const float *x, int ldx, int M, const void *w,
                                   int K, int n0, int n1) {
    rows_avx512(y, ldy, x, ldx, M, w, K, n0, n1, 0);
}

AVX512 static void widen_avx512(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, widen16(src, 1, i));
    widen_scalar(dst + i, src + i, n - i);
}

/* ---- AVX2 ---------------------------------------------------------------- */
#define AVX2 __attribute__((target("avx2,fma")))

/* As row_avx512 with 8-wide vectors and MB <= 2: 8 accumulators, 4 weight
 * vectors and an activation fit the 16 ymm registers. */
AVX2 INLINE void row_avx2(float *y, int ldy, const float *x, int ldx, const void *w, int K, int n,
                          int MB, int bf16) {
    __m256 acc[4][2];
    UNROLL for (int u = 0; u < 4; u++)
        UNROLL for (int m = 0; m < MB; m++) acc[u][m] = _mm256_setzero_ps();
    size_t base = (size_t)n * K;
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        if ((k & 63) == 0) prefetch_ahead(w, bf16, base + k);
        UNROLL for (int u = 0; u < 4; u++) {
            __m256 wv = widen8(w, bf16, base + k + 8 * u);
            UNROLL for (int m = 0; m < MB; m++)
                acc[u][m] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + (size_t)m * ldx + k + 8 * u),
                                            acc[u][m]);
        }
    }
    for (; k + 8 <= K; k += 8) {
        __m256 wv = widen8(w, bf16, base + k);
        UNROLL for (int m = 0; m < MB; m++)
            acc[0][m] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + (size_t)m * ldx + k), acc[0][m]);
    }
    UNROLL for (int m = 0; m < MB; m++) {
        __m256 sum = _mm256_add_ps(_mm256_add_ps(acc[0][m], acc[1][m]),
                                   _mm256_add_ps(acc[2][m], acc[3][m]));
        float s = hsum256(sum);
        for (int kk = k; kk < K; kk++) s += x[(size_t)m * ldx + kk] * widen_at(w, bf16, base + kk);
        y[(size_t)m * ldy + n] = s;
    }
}

AVX2 INLINE void rows_avx2(float *y, int ldy, const float *x, int ldx, int M, const void *w, int K,
                           int n0, int n1, int bf16) {
    for (int m = 0; m < M;) {
        int MB = M - m >= 2 ? 2 : 1;
        const float *xm = x + (size_t)m * ldx;
        float *ym = y + (size_t)m * ldy;
        for (int n = n0; n < n1; n++) {
            if (MB == 2) row_avx2(ym, ldy, xm, ldx, w, K, n, 2, bf16);
            else row_avx2(ym, ldy, xm, ldx, w, K, n, 1, bf16);
        }
        m += MB;
    }
}

AVX2 static void rows_bf16_avx2(float *y, int ldy, const float *x, int ldx, int M, const void *w,
                                int K, int n0, int n1) {
    rows_avx2(y, ldy, x, ldx, M, w, K, n0, n1, 1);
}

AVX2 static void rows_f32_avx2(float *y, int ldy, const float *x, int ldx, int M, const void *w,
                               int K, int n0, int n1) {
    rows_avx2(y, ldy, x, ldx, M, w, K, n0, n1, 0);
}

AVX2 static void widen_avx2(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, widen8(src, 1, i));
    widen_scalar(dst + i, src + i, n - i);
}
#endif /* __x86_64__ */

RowsKernel rows_kernel(CpuIsa isa, WeightType type) {
    int bf16 = type == WEIGHT_BF16;
#if defined(__x86_64__)
    if (isa >= CPU_ISA_AVX512) return bf16 ? rows_bf16_avx512 : rows_f32_avx512;
    if (isa == CPU_ISA_AVX2) return bf16 ? rows_bf16_avx2 : rows_f32_avx2;
#else
    (void)isa;
#endif
    return bf16 ? rows_bf16_scalar : rows_f32_scalar;
}

void widen_bf16_rows(CpuIsa isa, float *dst, const uint16_t *src, size_t n) {
#if defined(__x86_64__)
    if (isa >= CPU_ISA_AVX512) return widen_avx512(dst, src, n);
    if (isa == CPU_ISA_AVX2) return widen_avx2(dst, src, n);
#else
    (void)isa;
#endif
    widen_scalar(dst, src, n);
}
