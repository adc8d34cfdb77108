/*
 * cuda_bf16.h - bf16 <-> float32 in device code, for the .cu files.
 *
 * bf16 travels as its raw 16 bits (uint16_t, as in half.h): the top half of
 * a float32, so widening is a shift and rounding is round-to-nearest-even
 * (the same as f32_to_bf16 on the host). One copy of these for every
 * kernel file, so the backends round alike everywhere.
 */
#ifndef NANOVLLM_CUDA_BF16_H
#define NANOVLLM_CUDA_BF16_H

#include <cuda_bf16.h>
#include <stdint.h>

__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

/* Two bf16 in one word, a at the lower address (one cvt.rn.bf16x2.f32). */
__device__ __forceinline__ uint32_t pack_bf16x2(float a, float b) {
    __nv_bfloat162 p = __floats2bfloat162_rn(a, b);
    return (uint32_t)__bfloat16_as_ushort(p.x) | ((uint32_t)__bfloat16_as_ushort(p.y) << 16);
}

__device__ __forceinline__ uint2 pack_bf16x4(float4 v) {
    return make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
}

/* The 8 bf16 of one 16-byte load, widened. */
__device__ __forceinline__ void widen8(const uint4 raw, float f[8]) {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int e = 0; e < 4; e++) {
        f[2 * e] = __uint_as_float(w[e] << 16);
        f[2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u);
    }
}

#endif
