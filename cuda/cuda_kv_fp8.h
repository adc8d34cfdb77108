/*
 * cuda_kv_fp8.h - the fp8 KV cache's arithmetic (--kv-cache-dtype fp8):
 * K and V stored as float8_e4m3fn bytes with a scale per cache (vLLM's
 * scheme, uncalibrated: KV_FP8_DEFAULT_SCALE), stored = e4m3(x / scale)
 * rounded to nearest even and saturated to +-448, exactly
 * fp8_e4m3_from_float(x / scale) of model/weight_format.h; read = e4m3 *
 * scale.
 *
 * The encoder per architecture: sm_89 and newer have
 * cvt.rn.satfinite.e4m3x2.f32 (cuda_fp8.h's __nv_cvt_float2_to_fp8x2 with
 * __NV_SATFINITE: round to nearest even, finite values past 448 to +-448,
 * NaN to NaN), two values an instruction; sm_80 has no fp8 conversion and
 * takes kv_fp8_from_float_bits below, integer arithmetic on the float's
 * bits. That function is plain C so that tests/test_kv_fp8_plan.c checks it
 * on the CPU against fp8_e4m3_from_float bit for bit (every rounding
 * boundary, the subnormals, the saturation), and the GPU test
 * (tests/test_cuda_kv_fp8.c) checks whichever encoder the GPU runs against
 * the same function.
 *
 * Reading: the kernels widen e4m3 with cuda_fp8_convert.h (values e4m3 /
 * FP8_UNIT) and fold FP8_UNIT * scale into a factor they apply anyway (q's
 * softmax scale for K, the output's normalisation for V; prefill: one
 * multiply before the bf16 rounding of its shared tiles).
 */
#ifndef NANOVLLM_CUDA_KV_FP8_H
#define NANOVLLM_CUDA_KV_FP8_H

#include <stdint.h>

#ifdef __CUDACC__
#define KV_FP8_FN __host__ __device__ static inline
#else
#define KV_FP8_FN static inline
#endif

/* float32 bits -> e4m3 byte, as fp8_e4m3_from_float: NaN -> 0x7f; |x| >= 448
 * (infinity included) -> +-448 (0x7e); |x| >= 2^-6 -> the normal e4m3 with
 * its 3 mantissa bits rounded to nearest even at bit 20 of the float (a
 * carry moves into the exponent by itself); below, a multiple of 2^-9
 * (the subnormals; 8 of them is 0x08, the first normal), rounded to nearest
 * even. The sign is kept, zero and underflow included (-0 -> 0x80). */
KV_FP8_FN uint8_t kv_fp8_from_float_bits(uint32_t u) {
    const uint32_t sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7f;                          /* NaN */
    if (a >= 0x43e00000u) return (uint8_t)(sign | 0x7eu);      /* 448 = 1.75 * 2^8 and past */
    if (a >= 0x3c800000u) {                                    /* 2^-6: e4m3's smallest normal */
        const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);    /* nearest even at bit 20 */
        return (uint8_t)(sign | ((r >> 20) - (120u << 3)));    /* exponent bias 127 -> 7 */
    }
    /* x * 2^9 = significand * 2^(exponent - 141), shifted right by 21 or more */
    const uint32_t e = a >> 23, sig = e ? (a & 0x7fffffu) | 0x800000u : a;
    const uint32_t shift = 141u - (e ? e : 1u);
    if (shift > 25u) return (uint8_t)sign; /* under 2^-11: rounds to zero */
    const uint32_t q = sig >> shift, rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    return (uint8_t)(sign | (q + (rem > half || (rem == half && (q & 1u)))));
}

#ifdef __CUDACC__

#include <cuda_fp8.h>

#include "cuda_bf16.h"
#include "cuda_fp8_convert.h"

/* e4m3 of a and b, a in the low byte. */
__device__ __forceinline__ uint32_t kv_fp8x2_encode(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
#else
    return (uint32_t)kv_fp8_from_float_bits(__float_as_uint(a)) |
           ((uint32_t)kv_fp8_from_float_bits(__float_as_uint(b)) << 8);
#endif
}

/* Four values / scale as four e4m3 bytes in one word, v.x first. The
 * division is IEEE's (correctly rounded), so the bytes are
 * fp8_e4m3_from_float(x / scale) for any scale, not only powers of two. */
__device__ __forceinline__ uint32_t kv_fp8x4_encode(float4 v, float scale) {
    return kv_fp8x2_encode(__fdiv_rn(v.x, scale), __fdiv_rn(v.y, scale)) |
           (kv_fp8x2_encode(__fdiv_rn(v.z, scale), __fdiv_rn(v.w, scale)) << 16);
}

/* Eight e4m3 bytes (raw.x first) times `factor` (the cache's scale times
 * FP8_UNIT) as eight bf16, for the prefill kernels' shared tiles: e4m3 *
 * scale rounded once to bf16 (exact at scale 1: e4m3 has 3 mantissa bits). */
__device__ __forceinline__ uint4 kv_fp8x8_to_bf16(uint2 raw, float factor) {
    float f[8];
    fp8x4_to_float(raw.x, f);
    fp8x4_to_float(raw.y, f + 4);
    return make_uint4(pack_bf16x2(f[0] * factor, f[1] * factor), pack_bf16x2(f[2] * factor, f[3] * factor),
                      pack_bf16x2(f[4] * factor, f[5] * factor), pack_bf16x2(f[6] * factor, f[7] * factor));
}

#endif

#endif
