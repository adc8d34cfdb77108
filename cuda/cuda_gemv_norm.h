/*
 * cuda_gemv_norm.h - the normalising prologue the decode gemvs share
 * (cuda_gemv.cu's bf16 one, cuda_fp8.cu's FP8 one): the rows a gemv is to
 * multiply are RMSNorm(x_in + delta) * weight, and each block makes them
 * itself, in shared memory, with cuda_kernels.cu's add_rmsnorm arithmetic
 * (cuda_fused_math.h), instead of a launch of its own.
 */
#ifndef NANOVLLM_CUDA_GEMV_NORM_H
#define NANOVLLM_CUDA_GEMV_NORM_H

#include "cuda_fused_math.h"
#include "cuda_kernels.h"

/* Rows [0, M) of RMSNorm(x_in + delta) * weight into xs ([M][K] bf16), a
 * warp a row, with add_rmsnorm_warp_kernel's arithmetic and order (a lane
 * sums float4s lane, lane + 32, ...; then the warp); block (0, 0) also
 * writes x_out = x_in + delta and h. The row is read twice (L1), not kept
 * in registers: the gemv's loop after it needs them more. */
template <int M>
__device__ __forceinline__ void gemv_normalise(const CudaGemvNorm &g, int K, uint2 *xs, int warp, int lane) {
    if (warp >= M) return;
    constexpr int WARP_LANES = 32;
    const int n4 = K / 4;
    const float4 *xr = reinterpret_cast<const float4 *>(g.x_in + (size_t)warp * K);
    const float4 *dr = g.delta ? reinterpret_cast<const float4 *>(g.delta + (size_t)warp * K) : NULL;
    const float4 *w4 = reinterpret_cast<const float4 *>(g.weight);
    float sum = 0.0f;
    for (int i = lane; i < n4; i += WARP_LANES) sum = rms_sum4(sum, dr ? add4(xr[i], dr[i]) : xr[i]);
    const float inv = rms_inv(rms_warp_sum(sum), K, g.eps);
    const bool lead = blockIdx.x == 0 && blockIdx.y == 0;
    float4 *x_out = dr ? reinterpret_cast<float4 *>(g.x_out + (size_t)warp * K) : NULL;
    uint2 *h = reinterpret_cast<uint2 *>(g.h + (size_t)warp * K);
    for (int i = lane; i < n4; i += WARP_LANES) {
        const float4 v = dr ? add4(xr[i], dr[i]) : xr[i];
        const uint2 o = rms_scale4(v, inv, w4[i]);
        xs[(size_t)warp * n4 + i] = o;
        if (lead) {
            if (x_out) x_out[i] = v;
            h[i] = o;
        }
    }
}

#endif
