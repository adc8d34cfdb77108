/*
 * cpu_gated_deltanet_avx2.c - the AVX2+FMA inner loops of the Gated
 * DeltaNet module (cpu_gated_deltanet_kernels.h).
 *
 * gemm keeps a tile of up to 4 rows x 16 columns of C in 8 ymm registers
 * over the whole sum: per k, two loads of B, up to four broadcasts of X and
 * eight FMAs; one or two rows (decode's q and k against the state) take 32
 * columns, so each k reads 128 contiguous bytes of the state: with the
 * state in memory, 64-byte strips 512 bytes apart left the prefetchers
 * behind (cpu/PERFORMANCE_QWEN3_5.md). Decode's products are 2 rows (q and k against the state) and
 * dk rows of one term (the state update); the chunked form's are 2*C, C or
 * dk rows of dk or C terms. Columns past the last multiple of 8 take a
 * scalar loop in the same k order. SiLU's exponential is exp_avx2
 * (cpu_simd.h, cpu_ops.c's too).
 */
#include "cpu_gated_deltanet_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>

#include "cpu_simd.h"

#define AVX2 __attribute__((target("avx2,fma")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

/* C[0..MR)[0..8*NV) of gemm's definition; MR and NV constants once inlined. */
AVX2_INLINE void tile(float *C, int ldc, float cs, const float *X, int ldx, const float *B, int ldb,
                      int N, int MR, int NV) {
    __m256 acc[4][4];
    __m256 s = _mm256_set1_ps(cs);
    for (int m = 0; m < MR; m++)
        for (int v = 0; v < NV; v++)
            acc[m][v] = cs == 0.0f ? _mm256_setzero_ps()
                                   : _mm256_mul_ps(s, _mm256_loadu_ps(C + (size_t)m * ldc + 8 * v));
    for (int k = 0; k < N; k++) {
        __m256 b[4];
        for (int v = 0; v < NV; v++) b[v] = _mm256_loadu_ps(B + (size_t)k * ldb + 8 * v);
        for (int m = 0; m < MR; m++) {
            __m256 x = _mm256_broadcast_ss(X + (size_t)m * ldx + k);
            for (int v = 0; v < NV; v++) acc[m][v] = _mm256_fmadd_ps(x, b[v], acc[m][v]);
        }
    }
    for (int m = 0; m < MR; m++)
        for (int v = 0; v < NV; v++) _mm256_storeu_ps(C + (size_t)m * ldc + 8 * v, acc[m][v]);
}

AVX2_INLINE void tile_rows(float *C, int ldc, float cs, const float *X, int ldx, const float *B,
                           int ldb, int N, int mr, int NV) {
    switch (mr) {
    case 4: tile(C, ldc, cs, X, ldx, B, ldb, N, 4, NV); break;
    case 3: tile(C, ldc, cs, X, ldx, B, ldb, N, 3, NV); break;
    case 2: tile(C, ldc, cs, X, ldx, B, ldb, N, 2, NV); break;
    default: tile(C, ldc, cs, X, ldx, B, ldb, N, 1, NV); break;
    }
}

AVX2 static void gemm_avx2(float *C, int ldc, float cs, const float *X, int ldx, const float *B,
                           int ldb, int M, int N, int W) {
    for (int m0 = 0; m0 < M; m0 += 4) {
        int mr = M - m0 < 4 ? M - m0 : 4;
        float *c = C + (size_t)m0 * ldc;
        const float *x = X + (size_t)m0 * ldx;
        int w = 0;
        if (mr <= 2) /* 32 columns: each k reads 128 contiguous bytes of B (see the top) */
            for (; w + 32 <= W; w += 32) {
                if (mr == 2) tile(c + w, ldc, cs, x, ldx, B + w, ldb, N, 2, 4);
                else tile(c + w, ldc, cs, x, ldx, B + w, ldb, N, 1, 4);
            }
        for (; w + 16 <= W; w += 16) tile_rows(c + w, ldc, cs, x, ldx, B + w, ldb, N, mr, 2);
        if (w + 8 <= W) {
            tile_rows(c + w, ldc, cs, x, ldx, B + w, ldb, N, mr, 1);
            w += 8;
        }
        for (; w < W; w++)
            for (int m = 0; m < mr; m++) {
                float acc = cs == 0.0f ? 0.0f : cs * c[(size_t)m * ldc + w];
                for (int k = 0; k < N; k++) acc = fmaf(x[(size_t)m * ldx + k], B[(size_t)k * ldb + w], acc);
                c[(size_t)m * ldc + w] = acc;
            }
    }
}

AVX2 static float dot_avx2(const float *x, const float *y, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
    }
    if (i + 8 <= n) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        i += 8;
    }
    float s = hsum256(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += x[i] * y[i];
    return s;
}

AVX2 static void silu_avx2(float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), v));
        _mm256_storeu_ps(x + i, _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
    }
    for (; i < n; i++) x[i] = x[i] / (1.0f + expf(-x[i]));
}

const GdnKernels gdn_kernels_avx2 = {gemm_avx2, dot_avx2, silu_avx2, "avx2"};

#else
typedef int cpu_gated_deltanet_avx2_empty; /* ISO C: a translation unit needs a declaration */
#endif
