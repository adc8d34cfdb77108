/*
 * cpu_gated_deltanet_avx512.c - the AVX-512 inner loops of the Gated
 * DeltaNet module (cpu_gated_deltanet_kernels.h).
 *
 * gemm keeps a tile of C in 16 zmm registers over the whole sum: 8 rows x
 * 32 columns, 4 x 64 or 2 x 128. Decode's two rows (q and k against the
 * state) thus read each state row whole, 512 contiguous bytes per k: with
 * the state coming from memory, as it does between a model's tokens,
 * narrower tiles walk it in strided strips that the prefetchers do not
 * follow (93 against 124 us per layer at AVX2's 32 columns, 154 at its
 * former 16; cpu/PERFORMANCE_QWEN3_5.md). Per k: 16 / rows loads of B,
 * one broadcast of X per row, 16 FMAs. Columns left over take 32- and
 * 16-wide tiles, the last ones a masked vector. Every C[m][w] is
 * cs * C[m][w] followed by one FMA per k in k order, as the AVX2 level
 * computes it: the two levels give the same bits (the tests hold them to
 * it), so a model's DeltaNet state does not depend on which CPU ran it.
 * SiLU's exponential is exp_avx512 (cpu_simd.h, cpu_ops.c's too).
 */
#include "cpu_gated_deltanet_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "cpu_simd.h"

#define AVX512 __attribute__((target("avx512f,avx512dq,fma")))
#define AVX512_INLINE static inline __attribute__((always_inline, target("avx512f,avx512dq,fma")))

#define MR 8
#define NV_MAX 8
#define ACCS 16 /* mr x NV at most */

/* C[0..mr)[0..16*NV) of gemm's definition, the last vector's lanes below
 * `tail` only when tail > 0 (then NV is 1); mr, NV constants once inlined. */
AVX512_INLINE void tile(float *C, int ldc, float cs, const float *X, int ldx, const float *B, int ldb,
                        int N, int mr, int NV, int tail) {
    __mmask16 m16 = tail > 0 ? (__mmask16)((1u << tail) - 1) : (__mmask16)0xffff;
    __m512 acc[MR][NV_MAX];
    __m512 s = _mm512_set1_ps(cs);
    for (int m = 0; m < mr; m++)
        for (int v = 0; v < NV; v++)
            acc[m][v] = cs == 0.0f ? _mm512_setzero_ps()
                                   : _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m16, C + (size_t)m * ldc + 16 * v));
    for (int k = 0; k < N; k++) {
        __m512 b[NV_MAX];
        b[0] = _mm512_maskz_loadu_ps(m16, B + (size_t)k * ldb);
        for (int v = 1; v < NV; v++) b[v] = _mm512_loadu_ps(B + (size_t)k * ldb + 16 * v);
        for (int m = 0; m < mr; m++) {
            __m512 x = _mm512_set1_ps(X[(size_t)m * ldx + k]);
            for (int v = 0; v < NV; v++) acc[m][v] = _mm512_fmadd_ps(x, b[v], acc[m][v]);
        }
    }
    for (int m = 0; m < mr; m++)
        for (int v = 0; v < NV; v++) _mm512_mask_storeu_ps(C + (size_t)m * ldc + 16 * v, m16, acc[m][v]);
}

/* The tile for mr (1..MR) rows and NV vectors (mr x NV within ACCS), both
 * constants in each call. */
AVX512_INLINE void tile_rows(float *C, int ldc, float cs, const float *X, int ldx, const float *B,
                             int ldb, int N, int mr, int NV, int tail) {
#define TILE(r, v) tile(C, ldc, cs, X, ldx, B, ldb, N, r, v, tail)
    if (NV == 8) {
        if (mr == 2) TILE(2, 8);
        else TILE(1, 8);
    } else if (NV == 4) {
        switch (mr) {
        case 4: TILE(4, 4); break;
        case 3: TILE(3, 4); break;
        case 2: TILE(2, 4); break;
        default: TILE(1, 4); break;
        }
    } else {
        switch (mr) {
        case 8: TILE(8, NV); break;
        case 7: TILE(7, NV); break;
        case 6: TILE(6, NV); break;
        case 5: TILE(5, NV); break;
        case 4: TILE(4, NV); break;
        case 3: TILE(3, NV); break;
        case 2: TILE(2, NV); break;
        default: TILE(1, NV); break;
        }
    }
#undef TILE
}

/* Columns [w, W) of rows x, c (mr of them): the widest tiles that fit mr,
 * then 32, 16 and a masked rest. */
AVX512_INLINE void tile_columns(float *c, int ldc, float cs, const float *x, int ldx, const float *B,
                                int ldb, int N, int mr, int W) {
    int w = 0;
    if (mr <= 2)
        for (; w + 128 <= W; w += 128) tile_rows(c + w, ldc, cs, x, ldx, B + w, ldb, N, mr, 8, 0);
    if (mr <= 4)
        for (; w + 64 <= W; w += 64) tile_rows(c + w, ldc, cs, x, ldx, B + w, ldb, N, mr, 4, 0);
    for (; w + 32 <= W; w += 32) tile_rows(c + w, ldc, cs, x, ldx, B + w, ldb, N, mr, 2, 0);
    if (w + 16 <= W) {
        tile_rows(c + w, ldc, cs, x, ldx, B + w, ldb, N, mr, 1, 0);
        w += 16;
    }
    if (w < W) tile_rows(c + w, ldc, cs, x, ldx, B + w, ldb, N, mr, 1, W - w);
}

AVX512 static void gemm_avx512(float *C, int ldc, float cs, const float *X, int ldx, const float *B,
                               int ldb, int M, int N, int W) {
    for (int m0 = 0; m0 < M; m0 += MR) {
        int mr = M - m0 < MR ? M - m0 : MR;
        tile_columns(C + (size_t)m0 * ldc, ldc, cs, X + (size_t)m0 * ldx, ldx, B, ldb, N, mr, W);
    }
}

AVX512 static float dot_avx512(const float *x, const float *y, int n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

AVX512 static void silu_avx512(float *x, int n) {
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512 e = exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), v));
        _mm512_mask_storeu_ps(x + i, m, _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
    }
}

const GdnKernels gdn_kernels_avx512 = {gemm_avx512, dot_avx512, silu_avx512, "avx512"};

#else
typedef int cpu_gated_deltanet_avx512_empty; /* ISO C: a translation unit needs a declaration */
#endif
