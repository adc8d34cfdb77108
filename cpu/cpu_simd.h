/*
 * cpu_simd.h - the small pieces every CPU kernel file needs: a bf16-or-f32
 * element read, loads that widen bf16 to float32 in registers, and
 * horizontal sums. One copy here, inlined into the kernels of cpu_matmul.c,
 * cpu_matmul_small.c, cpu_matmul_bf16.c and cpu_attention_decode.c.
 *
 * The x86 helpers carry the narrowest target that has their instructions,
 * so that every kernel whose own target includes it can inline them
 * (widening bf16 is a zero-extend and a 16-bit shift: bf16 is the top half
 * of a float32).
 */
#ifndef NANOVLLM_CPU_SIMD_H
#define NANOVLLM_CPU_SIMD_H

#include <stddef.h>
#include <stdint.h>

#include "base/half.h"

#define SIMD_INLINE static inline __attribute__((always_inline))

/* Software prefetch of what the small-batch GEMM and the bf16 dot kernel
 * (weights) and the decode attention (K/V rows) stream from memory: into
 * L2 (prefetcht1), not L1. Measured on
 * Zen 4 with `bench --matmul`, alternating builds: 4-row GEMMs 1.5x faster
 * (lm_head 14.0 -> 8.1 ms AVX2, 11.9 -> 7.9 ms AVX-512: at the memory read
 * rate), 16 rows 10-35% faster, 64 rows up to 8%, the bf16 kernel's
 * single-row streams ~10%; an L1 prefetch holds one of L1's few miss
 * buffers for the whole DRAM latency. The float32 row kernels
 * (cpu_matmul.c) keep L1 prefetches: there L2 ones measured slower at 2
 * rows of K >= 2048 and no better at 1. */
#define prefetch_l2(addr) __builtin_prefetch((addr), 0, 2)

/* Element i of a bf16 (bf16 != 0) or float32 array, as float32. */
SIMD_INLINE float widen_at(const void *base, int bf16, size_t i) {
    return bf16 ? bf16_to_f32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

#if defined(__x86_64__)
#include <immintrin.h>

/* Elements i..i+15 as float32. */
__attribute__((target("avx512f"))) SIMD_INLINE __m512 widen16(const void *base, int bf16, size_t i) {
    if (bf16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)base + i))),
            16));
    return _mm512_loadu_ps((const float *)base + i);
}

/* The same for the lanes set in m, zeros elsewhere; memory past them is not read. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) SIMD_INLINE __m512
widen16_mask(const void *base, int bf16, size_t i, __mmask16 m) {
    if (bf16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)base + i)), 16));
    return _mm512_maskz_loadu_ps(m, (const float *)base + i);
}

/* The sums of a, b, c and d as one 4-float vector: 13 instructions where
 * four _mm512_reduce_add_ps take ~32 (it matters when a tile's K loop is
 * only a few dozen steps). */
__attribute__((target("avx512f"))) SIMD_INLINE __m128 reduce4_512(__m512 a, __m512 b, __m512 c,
                                                                   __m512 d) {
    /* Per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3], then the same for c, d. */
    __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    /* Per lane: [a, b, c, d] partial sums. */
    __m512 s = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xEE));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* Elements i..i+7 as float32. */
__attribute__((target("avx2"))) SIMD_INLINE __m256 widen8(const void *base, int bf16, size_t i) {
    if (bf16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + i))), 16));
    return _mm256_loadu_ps((const float *)base + i);
}

__attribute__((target("avx2"))) SIMD_INLINE float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
/* The sums of a, b, c and d as one 4-float vector (as reduce4_512). */
__attribute__((target("avx2"))) SIMD_INLINE __m128 reduce4_256(__m256 a, __m256 b, __m256 c,
                                                                __m256 d) {
    __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}
#endif /* __x86_64__ */

#endif
