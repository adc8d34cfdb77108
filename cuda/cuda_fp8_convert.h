/*
 * cuda_fp8_convert.h - float8_e4m3fn bytes to float32 in device code, for
 * the FP8 kernels (cuda_fp8.cu, cuda_moe.cu).
 *
 * Per architecture: sm_89 and newer convert two bytes to two exact f16 with
 * one instruction (cvt.rn.f16x2.e4m3x2, cuda_fp8.h's
 * __nv_cvt_fp8x2_to_halfraw2); sm_80 has no such instruction and takes the
 * bit construction of cuda_fp8_plan.h (a byte permute, a shift, a mask per
 * two values), whose f16 values are e4m3 * 2^-8. Either way the f16 widen
 * exactly to float32, and FP8_UNIT is what a value must be multiplied by to
 * be e4m3 itself: the kernels fold it into the scale, so
 * value * (scale * FP8_UNIT) is the float32 product e4m3 * scale with the
 * same rounding (powers of two scale without rounding). NaN bytes never
 * reach a kernel (the loader refuses them).
 */
#ifndef NANOVLLM_CUDA_FP8_CONVERT_H
#define NANOVLLM_CUDA_FP8_CONVERT_H

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "cuda_fp8_plan.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define FP8_HARDWARE_CVT 1
#define FP8_UNIT 1.0f
#else
#define FP8_HARDWARE_CVT 0
#define FP8_UNIT FP8_F16_UNSCALE
#endif

__device__ __forceinline__ float2 f16x2_bits_to_float2(uint32_t bits) {
    __half2_raw raw;
    raw.x = (unsigned short)(bits & 0xffffu);
    raw.y = (unsigned short)(bits >> 16);
    return __half22float2(__half2(raw));
}

/* The four bytes of w (byte 0 first) as float32, each e4m3 / FP8_UNIT. */
__device__ __forceinline__ void fp8x4_to_float(uint32_t w, float f[4]) {
#if FP8_HARDWARE_CVT
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w >> 16), __NV_E4M3);
    const float2 a = __half22float2(__half2(lo)), b = __half22float2(__half2(hi));
#else
    const float2 a = f16x2_bits_to_float2(fp8x2_high_bytes_to_f16x2(__byte_perm(w, 0u, FP8_PRMT_LO)));
    const float2 b = f16x2_bits_to_float2(fp8x2_high_bytes_to_f16x2(__byte_perm(w, 0u, FP8_PRMT_HI)));
#endif
    f[0] = a.x;
    f[1] = a.y;
    f[2] = b.x;
    f[3] = b.y;
}

/* The 16 bytes of one 16-byte load, in order. */
__device__ __forceinline__ void fp8x16_to_float(const uint4 raw, float f[16]) {
    fp8x4_to_float(raw.x, f);
    fp8x4_to_float(raw.y, f + 4);
    fp8x4_to_float(raw.z, f + 8);
    fp8x4_to_float(raw.w, f + 12);
}

#endif
