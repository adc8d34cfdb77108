/*
 * cpu_kv_fp8.h - the fp8 KV cache's element on the CPU (--kv-cache-dtype
 * fp8): float8_e4m3fn bytes with a float scale per cache (runner.h says
 * what is stored and why the scale is 1.0). This file owns the two
 * conversions and nothing else: float32 -> e4m3 where the runner writes a
 * token's K and V (once per token per layer), and e4m3 -> float32 where
 * attention reads them (every key of every decode step: in registers, no
 * widened copy of the cache).
 *
 * Reading: byte b becomes the IEEE half with bits
 * ((b & 0x80) << 8) | ((b & 0x7f) << 7), which is e4m3(b) * 2^-8 exactly,
 * subnormals included (e4m3's 4-bit exponent and 3-bit mantissa land in
 * the low bits of half's 5 and 10; the bias differs by 8). F16C's vcvtph2ps
 * (AVX2 machines) and AVX-512's widen 8 or 16 of them per instruction;
 * the kernels fold the 2^8 into the scale they multiply by anyway
 * (KV_FP8_WIDEN_SCALE). The NaN bytes 0x7f / 0xff read as +-480 (half's
 * 1.875 * 2^8); the store never writes them for finite inputs.
 *
 * Writing: round to nearest even, saturating at +-448, NaN -> 0x7f: the
 * same bytes as fp8_e4m3_from_float (model/weight_format.h, the committed
 * reference; test cpu_kv_fp8/narrow_matches_reference), computed on the
 * float's bits so that 8 lanes of AVX2 do it at once.
 */
#ifndef NANOVLLM_CPU_KV_FP8_H
#define NANOVLLM_CPU_KV_FP8_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cpu_simd.h"
#include "base/cpu_isa.h"

/* What the widened values are multiplied by to give e4m3's (times the
 * cache's scale). */
#define KV_FP8_WIDEN_SCALE 256.0f

/* e4m3(b) * 2^-8 as float32, exactly (the scalar kernels' read, equal to
 * the SIMD ones' lane by lane). */
static inline float kv_fp8_widen_scaled(uint8_t b) {
    uint32_t e = (b >> 3) & 15u, m = b & 7u;
    float mag;
    if (e) {
        uint32_t bits = ((e + 112u) << 23) | (m << 20); /* 2^(e - 15) * (1 + m / 8) */
        memcpy(&mag, &bits, sizeof mag);
    } else {
        mag = (float)m * 0x1p-17f; /* subnormal: m * 2^-9, times 2^-8 */
    }
    return (b & 0x80) ? -mag : mag;
}

/* float -> e4m3 byte, round to nearest even, +-448 beyond, NaN -> 0x7f. */
static inline uint8_t kv_fp8_narrow(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7f;            /* NaN */
    if (a >= 0x43e00000u) return (uint8_t)(sign | 0x7e); /* >= 448 (and inf) */
    if (a < 0x3c800000u) {                       /* < 2^-6: subnormal, multiples of 2^-9 */
        float f;
        memcpy(&f, &a, sizeof f);
        return (uint8_t)(sign | (uint32_t)__builtin_lrintf(f * 512.0f)); /* 8 is the first normal */
    }
    /* Round the float's mantissa to 3 bits (a carry moves into the
     * exponent), then rebias the exponent from 127 to 7. */
    uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
    return (uint8_t)(sign | ((r >> 20) - (120u << 3)));
}

#if defined(__x86_64__)
#include <immintrin.h>

/* 8 bytes at p as e4m3 * 2^-8 (see the top). */
__attribute__((target("avx2,f16c"))) SIMD_INLINE __m256 kv_fp8_widen8(const uint8_t *p) {
    /* b << 8 per 16-bit lane; an arithmetic shift right by 1 puts the sign
     * at bit 15 and the magnitude at bits 13..7, with a copy of the sign
     * at bit 14 that the mask clears. */
    __m128i hi = _mm_unpacklo_epi8(_mm_setzero_si128(), _mm_loadl_epi64((const __m128i *)p));
    __m128i h = _mm_and_si128(_mm_srai_epi16(hi, 1), _mm_set1_epi16((short)0xbf80));
    return _mm256_cvtph_ps(h);
}

/* 16 bytes at p as e4m3 * 2^-8. */
__attribute__((target("avx512f"))) SIMD_INLINE __m512 kv_fp8_widen16(const uint8_t *p) {
    __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p));
    __m256i h = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(b, 8), 1),
                                 _mm256_set1_epi16((short)0xbf80));
    return _mm512_cvtph_ps(h);
}
#endif

/* dst[i] = e4m3(src[i] / scale) for i < n: the cache's write. */
void kv_fp8_store(CpuIsa isa, uint8_t *dst, const float *src, size_t n, float scale);

/* dst[i] = e4m3(src[i]) * scale for i < n (float32 rows for sgemm: prefill
 * attention's blocks). */
void kv_fp8_widen_rows(CpuIsa isa, float *dst, const uint8_t *src, size_t n, float scale);

#endif
