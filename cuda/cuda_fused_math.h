/*
 * cuda_fused_math.h - the arithmetic that a fused kernel and the separate
 * kernels it stands for must do alike, to the bit: RMSNorm's sum of squares,
 * its scale and its bf16 output (cuda_kernels.cu's add_rmsnorm and
 * cuda_gemv.cu's normalising prologue), and SiLU(gate) x up (silu_mul and
 * the gate/up gemv's epilogue). The sums are explicit fmaf chains, so the
 * compiler's contraction of `a * a + b * b` cannot differ between the two
 * places; the fused decode path is then the unfused one's bits, which is
 * what its GPU test holds it to.
 */
#ifndef NANOVLLM_CUDA_FUSED_MATH_H
#define NANOVLLM_CUDA_FUSED_MATH_H

#include "cuda_bf16.h"

/* One lane's running sum of squares, four values at a time, in order. */
__device__ __forceinline__ float rms_sum4(float sum, float4 v) {
    sum = fmaf(v.x, v.x, sum);
    sum = fmaf(v.y, v.y, sum);
    sum = fmaf(v.z, v.z, sum);
    return fmaf(v.w, v.w, sum);
}

/* A warp's lanes' sums added, every lane getting the total. */
__device__ __forceinline__ float rms_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* 1 / RMS of a row of `hidden` values whose squares sum to sum. */
__device__ __forceinline__ float rms_inv(float sum, int hidden, float eps) {
    return 1.0f / sqrtf(sum / (float)hidden + eps);
}

/* Four normalised values times their weights, as four bf16. */
__device__ __forceinline__ uint2 rms_scale4(float4 v, float inv, float4 w) {
    return pack_bf16x4(make_float4(v.x * inv * w.x, v.y * inv * w.y, v.z * inv * w.z, v.w * inv * w.w));
}

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

/* SiLU(gate) x up, before its rounding to bf16. */
__device__ __forceinline__ float silu_mul1(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }

#endif
