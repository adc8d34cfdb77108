/*
 * cpu_matmul_fp8_avx2.c - the FP8 kernels (cpu_matmul_fp8_tile.h) for AVX2 +
 * FMA + F16C: 8 lanes, 16 ymm registers.
 *
 * A byte becomes a float in four instructions per 8: vpmovsxbw (the sign
 * copied into the high byte), a 16-bit shift left by 7 (which puts the sign
 * at bit 15, a copy of it at bit 14, the exponent at 13..10 and the
 * mantissa at 9..7), an AND with 0xBF80 (clears the copy) and vcvtph2ps.
 */
#include "cpu_matmul_fp8_x86.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#define FT "avx2,fma,f16c"
#define FFN static inline __attribute__((always_inline, target(FT)))
#define FV __m256
#define FVL 8
#define FMR 4
#define FNR 3
#define FNR_FEW 4
#define FGEMM fp8_gemm_avx2
#define FDECODE fp8_decode_avx2

FFN __m256 fv_zero(void) { return _mm256_setzero_ps(); }
FFN __m256 fv_set1(float v) { return _mm256_set1_ps(v); }
FFN __m256 fv_mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
FFN __m256 fv_fma(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }

FFN float fv_sum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Lanes below n set (n in 1..7). */
FFN __m256i fv_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

FFN __m256 fv_load(const float *p) { return _mm256_loadu_ps(p); }
FFN __m256 fv_load_part(const float *p, int n) { return _mm256_maskload_ps(p, fv_mask(n)); }
FFN void fv_store(float *p, __m256 v) { _mm256_storeu_ps(p, v); }
FFN void fv_store_part(float *p, __m256 v, int n) { _mm256_maskstore_ps(p, fv_mask(n), v); }

/* 8 bytes at p as e4m3 * 2^-8 (cpu_matmul_fp8.h). */
FFN __m256 fv_fp8(const uint8_t *p) {
    __m128i s = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)p));
    __m128i h = _mm_and_si128(_mm_slli_epi16(s, 7), _mm_set1_epi16((short)0xBF80));
    return _mm256_cvtph_ps(h);
}

/* 16 bytes at p as two vectors: the 16-bit steps on all of them at once. */
FFN void fv_fp8x2(const uint8_t *p, __m256 *lo, __m256 *hi) {
    __m256i s = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p));
    __m256i h = _mm256_and_si256(_mm256_slli_epi16(s, 7), _mm256_set1_epi16((short)0xBF80));
    *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

/* The first n (1..7) bytes at p, zeros after them. */
FFN __m256 fv_fp8_part(const uint8_t *p, int n) {
    uint8_t b[8] = {0};
    memcpy(b, p, (size_t)n);
    return fv_fp8(b);
}

#include "cpu_matmul_fp8_tile.h"
#endif
