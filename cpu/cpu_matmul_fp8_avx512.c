/*
 * cpu_matmul_fp8_avx512.c - the FP8 kernels (cpu_matmul_fp8_tile.h) for
 * AVX-512: 16 lanes, 32 zmm registers, masked loads and stores for the K
 * tail. The widening is AVX2's (cpu_matmul_fp8_avx2.c) on 16 bytes at a
 * time, then one vcvtph2ps to 16 floats.
 *
 * The tile of 4 activation rows x 4 weight rows (16 accumulators, 4
 * weight vectors and an activation in the K loop, the chunks' totals
 * beside them) is a safe size rather than a tuned one. First run (tests
 * and `bench --matmul`) on a Zen 4 EPYC: at one row it reads ~30 GB/s
 * with two threads and the bf16 weight takes 1.45-1.78x its time; from 4
 * rows on it is compute-bound at 0.65-0.81x bf16's speed
 * (cpu/PERFORMANCE_FP8.md). Under bf16 inputs
 * that CPU runs fp8_gemm_bf16 instead (cpu_matmul_fp8_bf16.c).
 */
#include "cpu_matmul_fp8_x86.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define FT "avx512f,avx512bw,avx512vl,avx2,fma,f16c"
#define FFN static inline __attribute__((always_inline, target(FT)))
#define FV __m512
#define FVL 16
#define FMR 4
#define FNR 4
#define FNR_FEW 4
#define FGEMM fp8_gemm_avx512
#define FDECODE fp8_decode_avx512

FFN __m512 fv_zero(void) { return _mm512_setzero_ps(); }
FFN __m512 fv_set1(float v) { return _mm512_set1_ps(v); }
FFN __m512 fv_mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
FFN __m512 fv_fma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
FFN float fv_sum(__m512 v) { return _mm512_reduce_add_ps(v); }

/* Lanes below n set (n in 1..15). */
FFN __mmask16 fv_mask(int n) { return (__mmask16)((1u << n) - 1); }

FFN __m512 fv_load(const float *p) { return _mm512_loadu_ps(p); }
FFN __m512 fv_load_part(const float *p, int n) { return _mm512_maskz_loadu_ps(fv_mask(n), p); }
FFN void fv_store(float *p, __m512 v) { _mm512_storeu_ps(p, v); }
FFN void fv_store_part(float *p, __m512 v, int n) { _mm512_mask_storeu_ps(p, fv_mask(n), v); }

FFN __m512 fv_widen(__m128i b) {
    __m256i s = _mm256_cvtepi8_epi16(b);
    __m256i h = _mm256_and_si256(_mm256_slli_epi16(s, 7), _mm256_set1_epi16((short)0xBF80));
    return _mm512_cvtph_ps(h);
}

/* 16 bytes at p as e4m3 * 2^-8 (cpu_matmul_fp8.h). */
FFN __m512 fv_fp8(const uint8_t *p) { return fv_widen(_mm_loadu_si128((const __m128i *)p)); }

/* 32 bytes at p as two vectors. */
FFN void fv_fp8x2(const uint8_t *p, __m512 *lo, __m512 *hi) {
    __m512i s = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)p));
    __m512i h = _mm512_and_si512(_mm512_slli_epi16(s, 7), _mm512_set1_epi16((short)0xBF80));
    *lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    *hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

/* The first n (1..15) bytes at p, zeros after them; nothing past them read. */
FFN __m512 fv_fp8_part(const uint8_t *p, int n) {
    return fv_widen(_mm_maskz_loadu_epi8(fv_mask(n), p));
}

#include "cpu_matmul_fp8_tile.h"
#endif
