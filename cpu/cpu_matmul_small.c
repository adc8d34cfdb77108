/*
 * cpu_matmul_small.c - the register-tiled small-batch GEMM of
 * cpu_matmul_small.h, in AVX-512 and AVX2+FMA variants chosen at run time.
 *
 * Layout: x rows and weight rows are both contiguous along K, so the vector
 * lanes run along K. A tile keeps MR activation rows x NR weight rows of
 * accumulators live (16 or 8 partial sums each) and reduces them once, after
 * the K loop. Each step loads and widens NR weight vectors (zero-extend +
 * 16-bit shift for bf16) and reuses each for MR FMAs, then loads each of the
 * MR activation vectors once for NR FMAs: (MR + NR) loads per MR x NR FMAs.
 *
 * Loop order: a task's weight rows are walked NR at a time (the strip,
 * NR x K x 2 bytes, is read from memory once and then stays in L1/L2), and
 * for each strip every tile of MR activation rows runs over the full K. The
 * activations (M x K x 4 bytes: 64 KiB at 16 x 1024) are re-read per strip
 * from L2, which keeps up: about MR x 64 bytes per MR x NR FMAs.
 */
#include "cpu_matmul_small.h"

#include <stddef.h>
#include <stdint.h>

#include "cpu_simd.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))
/* The tile loops have constant trip counts once inlined; fully unrolled,
 * the accumulators live in registers instead of on the stack. */
#define UNROLL _Pragma("GCC unroll 8")

/* Software prefetch distance for the weight rows on the first pass over a
 * strip (the later tiles find it in cache). NR rows are read side by side,
 * so this is further than the row kernels' 1 KiB: 4 KiB measured 10-20%
 * faster than 1 KiB on the lm_head at 2..16 rows. */
#define PREFETCH_BYTES 4096

/* The prefetch offset `off` bytes into a row of a strip of NR rows, moved
 * past the rest of the strip once it leaves the row: the row it runs into
 * is the strip's next one, already being read, while the next strip's rows
 * would otherwise start cold (measured: half the DRAM bandwidth at K = 1024,
 * where a row is only twice the prefetch distance). */
INLINE size_t wrap(size_t off, int K, int NR, int esz) {
    size_t row = (size_t)K * esz;
    return off < row ? off : off + (size_t)(NR - 1) * row;
}

/* ---- AVX-512: 32 zmm registers ------------------------------------------- */
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

/* Activation rows x weight rows per tile: 6 x 4 accumulators + 4 weight
 * vectors + 1 activation vector = 29 of the 32 registers. Measured on Zen 4
 * (one thread, 3072 x 1024, 16 and 64 rows): 90-92% of FMA peak, against
 * 87% for 4 x 6 and 44% for 8 x 3 (which spills). */
#define MR512 6
#define NR512 4

/* One MR x NR tile: y[m][n + j] for m < MR, j < NR, over the whole K. pf:
 * first tile of the strip, whose weight loads come from memory. */
AVX512 INLINE void tile512(float *y, int ldy, const float *x, int ldx, const void *w, int K, int n,
                           int MR, int NR, int bf16, int pf) {
    __m512 acc[MR512][NR512];
    UNROLL for (int i = 0; i < MR; i++)
        UNROLL for (int j = 0; j < NR; j++) acc[i][j] = _mm512_setzero_ps();
    size_t base[NR512];
    UNROLL for (int j = 0; j < NR; j++) base[j] = (size_t)(n + j) * K;
    const char *wb = (const char *)w;
    int esz = bf16 ? 2 : 4;
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        /* One 64-byte line per row every 32 bf16 (16 f32) weights. */
        if (pf && (!bf16 || (k & 31) == 0)) {
            size_t off = (size_t)k * esz + PREFETCH_BYTES;
            UNROLL for (int j = 0; j < NR; j++) prefetch_l2(wb + base[j] * esz + wrap(off, K, NR, esz));
        }
        __m512 wv[NR512];
        UNROLL for (int j = 0; j < NR; j++) wv[j] = widen16(w, bf16, base[j] + k);
        UNROLL for (int i = 0; i < MR; i++) {
            __m512 xv = _mm512_loadu_ps(x + (size_t)i * ldx + k);
            UNROLL for (int j = 0; j < NR; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    if (k < K) {
        __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
        __m512 wv[NR512];
        UNROLL for (int j = 0; j < NR; j++) wv[j] = widen16_mask(w, bf16, base[j] + k, m);
        UNROLL for (int i = 0; i < MR; i++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + (size_t)i * ldx + k);
            UNROLL for (int j = 0; j < NR; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    UNROLL for (int i = 0; i < MR; i++) {
        if (NR == 4) {
            _mm_storeu_ps(y + (size_t)i * ldy + n,
                          reduce4_512(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
        } else {
            UNROLL for (int j = 0; j < NR; j++)
                y[(size_t)i * ldy + n + j] = _mm512_reduce_add_ps(acc[i][j]);
        }
    }
}

/* A strip of NR weight rows against all M activation rows, MR at a time. */
AVX512 INLINE void strip512(float *y, int ldy, const float *x, int ldx, int M, const void *w, int K,
                            int n, int NR, int bf16) {
    int m = 0;
    for (; m + MR512 <= M; m += MR512)
        tile512(y + (size_t)m * ldy, ldy, x + (size_t)m * ldx, ldx, w, K, n, MR512, NR, bf16, m == 0);
    float *ym = y + (size_t)m * ldy;
    const float *xm = x + (size_t)m * ldx;
    int pf = m == 0;
    switch (M - m) {
    case 5: tile512(ym, ldy, xm, ldx, w, K, n, 5, NR, bf16, pf); break;
    case 4: tile512(ym, ldy, xm, ldx, w, K, n, 4, NR, bf16, pf); break;
    case 3: tile512(ym, ldy, xm, ldx, w, K, n, 3, NR, bf16, pf); break;
    case 2: tile512(ym, ldy, xm, ldx, w, K, n, 2, NR, bf16, pf); break;
    case 1: tile512(ym, ldy, xm, ldx, w, K, n, 1, NR, bf16, pf); break;
    default: break;
    }
}

AVX512 INLINE void gemm512(float *y, int ldy, const float *x, int ldx, int M, const void *w, int K,
                           int n0, int n1, int bf16) {
    int n = n0;
    for (; n + NR512 <= n1; n += NR512) strip512(y, ldy, x, ldx, M, w, K, n, NR512, bf16);
    if (n + 2 <= n1) {
        strip512(y, ldy, x, ldx, M, w, K, n, 2, bf16);
        n += 2;
    }
    if (n < n1) strip512(y, ldy, x, ldx, M, w, K, n, 1, bf16);
}

AVX512 static void gemm_bf16_avx512(float *y, int ldy, const float *x, int ldx, int M,
                                    const void *w, int K, int n0, int n1) {
    gemm512(y, ldy, x, ldx, M, w, K, n0, n1, 1);
}

AVX512 static void gemm_f32_avx512(float *y, int ldy, const float *x, int ldx, int M, const void *w,
                                   int K, int n0, int n1) {
    gemm512(y, ldy, x, ldx, M, w, K, n0, n1, 0);
}

/* ---- AVX2 + FMA: 16 ymm registers ---------------------------------------- */
#define AVX2 __attribute__((target("avx2,fma")))

/* 4 x 3 accumulators + 3 weight vectors + 1 activation vector = all 16
 * (the widening happens in the weight register). Measured on Zen 4 at the
 * AVX2 level: 69-74% of FMA peak at 16-64 rows, against 50% for 4 x 2 and
 * 65-68% for 3 x 3. */
#define MR256 4
#define NR256 3

AVX2 INLINE void tile256(float *y, int ldy, const float *x, int ldx, const void *w, int K, int n,
                         int MR, int NR, int bf16, int pf) {
    __m256 acc[MR256][NR256];
    UNROLL for (int i = 0; i < MR; i++)
        UNROLL for (int j = 0; j < NR; j++) acc[i][j] = _mm256_setzero_ps();
    size_t base[NR256];
    UNROLL for (int j = 0; j < NR; j++) base[j] = (size_t)(n + j) * K;
    const char *wb = (const char *)w;
    int esz = bf16 ? 2 : 4;
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        /* One 64-byte line per row every 32 bf16 (16 f32) weights. */
        if (pf && (k & (bf16 ? 31 : 15)) == 0) {
            size_t off = (size_t)k * esz + PREFETCH_BYTES;
            UNROLL for (int j = 0; j < NR; j++) prefetch_l2(wb + base[j] * esz + wrap(off, K, NR, esz));
        }
        __m256 wv[NR256];
        UNROLL for (int j = 0; j < NR; j++) wv[j] = widen8(w, bf16, base[j] + k);
        UNROLL for (int i = 0; i < MR; i++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)i * ldx + k);
            UNROLL for (int j = 0; j < NR; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    /* AVX2 has no 16-bit masked load: the last K % 8 terms are scalar. */
    UNROLL for (int i = 0; i < MR; i++)
        UNROLL for (int j = 0; j < NR; j++) {
            float s = hsum256(acc[i][j]);
            for (int kk = k; kk < K; kk++) s += x[(size_t)i * ldx + kk] * widen_at(w, bf16, base[j] + kk);
            y[(size_t)i * ldy + n + j] = s;
        }
}

AVX2 INLINE void strip256(float *y, int ldy, const float *x, int ldx, int M, const void *w, int K,
                          int n, int NR, int bf16) {
    int m = 0;
    for (; m + MR256 <= M; m += MR256)
        tile256(y + (size_t)m * ldy, ldy, x + (size_t)m * ldx, ldx, w, K, n, MR256, NR, bf16, m == 0);
    float *ym = y + (size_t)m * ldy;
    const float *xm = x + (size_t)m * ldx;
    int pf = m == 0;
    switch (M - m) {
    case 3: tile256(ym, ldy, xm, ldx, w, K, n, 3, NR, bf16, pf); break;
    case 2: tile256(ym, ldy, xm, ldx, w, K, n, 2, NR, bf16, pf); break;
    case 1: tile256(ym, ldy, xm, ldx, w, K, n, 1, NR, bf16, pf); break;
    default: break;
    }
}

AVX2 INLINE void gemm256(float *y, int ldy, const float *x, int ldx, int M, const void *w, int K,
                         int n0, int n1, int bf16) {
    int n = n0;
    for (; n + NR256 <= n1; n += NR256) strip256(y, ldy, x, ldx, M, w, K, n, NR256, bf16);
    if (n + 2 <= n1 && NR256 > 2) {
        strip256(y, ldy, x, ldx, M, w, K, n, 2, bf16);
        n += 2;
    }
    if (n < n1) strip256(y, ldy, x, ldx, M, w, K, n, 1, bf16);
}

AVX2 static void gemm_bf16_avx2(float *y, int ldy, const float *x, int ldx, int M, const void *w,
                                int K, int n0, int n1) {
    gemm256(y, ldy, x, ldx, M, w, K, n0, n1, 1);
}

AVX2 static void gemm_f32_avx2(float *y, int ldy, const float *x, int ldx, int M, const void *w,
                               int K, int n0, int n1) {
    gemm256(y, ldy, x, ldx, M, w, K, n0, n1, 0);
}
#endif /* __x86_64__ */

SmallGemmKernel small_gemm_kernel(CpuIsa isa, WeightType type) {
    int bf16 = type == WEIGHT_BF16;
#if defined(__x86_64__)
    if (isa >= CPU_ISA_AVX512) return bf16 ? gemm_bf16_avx512 : gemm_f32_avx512;
    if (isa == CPU_ISA_AVX2) return bf16 ? gemm_bf16_avx2 : gemm_f32_avx2;
#else
    (void)isa;
    (void)bf16;
#endif
    return NULL;
}
