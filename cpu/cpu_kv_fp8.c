/*
 * cpu_kv_fp8.c - the fp8 KV cache's whole-row conversions (see
 * cpu_kv_fp8.h): the runner's store of each new token's K and V, and the
 * widening of a cache block for prefill attention's sgemm. Scalar, AVX2
 * and AVX-512 versions chosen by the ISA the caller passes; every level
 * writes the same bytes and the same floats.
 */
#include "cpu_kv_fp8.h"

#if defined(__x86_64__)
#include <immintrin.h>

/* 8 floats (already divided by the scale) to e4m3 bytes at dst, as
 * kv_fp8_narrow lane by lane. */
__attribute__((target("avx2"))) static inline void narrow8_avx2(uint8_t *dst, __m256 x) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    __m256i u = _mm256_castps_si256(x);
    __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
    __m256i a = _mm256_and_si256(u, abs_mask);
    __m256 af = _mm256_castsi256_ps(a);
    /* normal: mantissa rounded to 3 bits, exponent rebiased (wraps harmlessly
     * for the lanes the blends below replace) */
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 20), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(a, _mm256_add_epi32(_mm256_set1_epi32(0x7ffff), odd));
    __m256i mag = _mm256_sub_epi32(_mm256_srli_epi32(r, 20), _mm256_set1_epi32(120 << 3));
    /* subnormal: multiples of 2^-9, the current (nearest-even) rounding */
    __m256i sub = _mm256_cvtps_epi32(_mm256_mul_ps(af, _mm256_set1_ps(512.0f)));
    mag = _mm256_blendv_epi8(mag, sub,
                             _mm256_castps_si256(_mm256_cmp_ps(af, _mm256_set1_ps(0x1p-6f), _CMP_LT_OQ)));
    mag = _mm256_blendv_epi8(mag, _mm256_set1_epi32(0x7e),
                             _mm256_castps_si256(_mm256_cmp_ps(af, _mm256_set1_ps(448.0f), _CMP_GE_OQ)));
    __m256i v = _mm256_or_si256(mag, sign);
    v = _mm256_blendv_epi8(v, _mm256_set1_epi32(0x7f), _mm256_castps_si256(_mm256_cmp_ps(af, af, _CMP_UNORD_Q)));
    /* 8 x int32 in [0, 255] -> 8 bytes */
    __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64((__m128i *)dst, _mm_packus_epi16(w, w));
}

__attribute__((target("avx2"))) static void store_avx2(uint8_t *dst, const float *src, size_t n,
                                                       float scale) {
    size_t i = 0;
    if (scale == 1.0f) { /* the default: no division */
        for (; i + 8 <= n; i += 8) narrow8_avx2(dst + i, _mm256_loadu_ps(src + i));
    } else {
        __m256 s = _mm256_set1_ps(scale);
        for (; i + 8 <= n; i += 8) narrow8_avx2(dst + i, _mm256_div_ps(_mm256_loadu_ps(src + i), s));
    }
    for (; i < n; i++) dst[i] = kv_fp8_narrow(src[i] / scale);
}

__attribute__((target("avx2,f16c"))) static void widen_rows_avx2(float *dst, const uint8_t *src,
                                                                  size_t n, float scale) {
    __m256 s = _mm256_set1_ps(scale * KV_FP8_WIDEN_SCALE);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_mul_ps(kv_fp8_widen8(src + i), s));
    for (; i < n; i++) dst[i] = kv_fp8_widen_scaled(src[i]) * (scale * KV_FP8_WIDEN_SCALE);
}

__attribute__((target("avx512f"))) static void widen_rows_avx512(float *dst, const uint8_t *src,
                                                                 size_t n, float scale) {
    __m512 s = _mm512_set1_ps(scale * KV_FP8_WIDEN_SCALE);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_mul_ps(kv_fp8_widen16(src + i), s));
    for (; i < n; i++) dst[i] = kv_fp8_widen_scaled(src[i]) * (scale * KV_FP8_WIDEN_SCALE);
}
#endif

/* The store is 2 x kv_heads x head_dim values per token and layer (4 KiB
 * of Qwen3-0.6B's K and V): AVX2 at every level that has it, AVX-512 would
 * add nothing measurable. */
void kv_fp8_store(CpuIsa isa, uint8_t *dst, const float *src, size_t n, float scale) {
#if defined(__x86_64__)
    if (isa >= CPU_ISA_AVX2) {
        store_avx2(dst, src, n, scale);
        return;
    }
#endif
    (void)isa;
    for (size_t i = 0; i < n; i++) dst[i] = kv_fp8_narrow(src[i] / scale);
}

void kv_fp8_widen_rows(CpuIsa isa, float *dst, const uint8_t *src, size_t n, float scale) {
#if defined(__x86_64__)
    if (isa >= CPU_ISA_AVX512) {
        widen_rows_avx512(dst, src, n, scale);
        return;
    }
    if (isa == CPU_ISA_AVX2) {
        widen_rows_avx2(dst, src, n, scale);
        return;
    }
#endif
    (void)isa;
    float s = scale * KV_FP8_WIDEN_SCALE;
    for (size_t i = 0; i < n; i++) dst[i] = kv_fp8_widen_scaled(src[i]) * s;
}
