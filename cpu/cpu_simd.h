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

/* ---- the exponential of cpu_ops.c's softmax and SiLU, shared by the kernels that need one ---- */

/* exp(x) for x in about [-87, 88] (inputs here are <= 0 or SiLU's -g):
 * x = n ln2 + r with |r| <= ln2/2 (ln2 split in a part exact in float and
 * a correction), e^r by Cephes expf's minimax polynomial
 * 1 + r + r^2 (EXP_P5 + EXP_P4 r + ... + EXP_P0 r^5), times 2^n. */
#define EXP_LOG2E 1.44269504088896341f
#define EXP_LN2_HI 0.693359375f
#define EXP_LN2_LO -2.12194440e-4f
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f

/* 2^n by scalef, which also saturates out-of-range n. */
__attribute__((target("avx512f,fma"))) SIMD_INLINE __m512 exp_avx512(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.3762626647949f)),
                      _mm512_set1_ps(-88.3762626647949f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P5));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* AVX2 has no scalef: 2^n is built in the exponent field, so x is clamped
 * to where n stays a normal exponent ([-126, 127]): above, the result
 * saturates at e^88 (~1.6e38) instead of inf; below, it is flushed to 0. */
#define EXP_LOW -87.3365478515625f
#define EXP_HIGH 88.0296919311f

__attribute__((target("avx2,fma"))) SIMD_INLINE __m256 exp_avx2(__m256 x) {
    __m256 in_range = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_LOW), _CMP_GE_OQ);
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(EXP_HIGH)), _mm256_set1_ps(EXP_LOW));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23));
    return _mm256_and_ps(_mm256_mul_ps(p, scale), in_range);
}

#endif /* __x86_64__ */

#endif
