/*
 * cuda_hybrid_kernels.cu - Qwen3.5's gated attention and shared-expert
 * kernels (see cuda_hybrid_kernels.h).
 *
 * Latency-bound row work, as the Qwen3 kernels of cuda_kernels.cu, but
 * plain: one warp per head (the q/k norm, RoPE and store), grid-stride
 * loops for the element-wise ones. The arithmetic follows the CPU runner
 * (cpu_runner.c: qk_norm_rope_store, apply_attn_gate, shared_add): float32,
 * 1/sqrt for the norm, the RoPE table in double on the host, sigmoid as
 * 1 / (1 + exp(-x)).
 */
#include <math.h>
#include <stdint.h>

#include "cuda_bf16.h"
#include "cuda_check.h"
#include "cuda_hybrid_kernels.h"

#define HY_WARP 32
#define HY_THREADS 128
#define HY_MAX_BLOCKS 8192
#define HY_MAX_PER_LANE 8 /* head_dim <= 256 */

__device__ __forceinline__ float hy_warp_sum(float v) {
    for (int o = HY_WARP / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float hy_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* A warp per (token, head): heads [0, nh) are queries, [nh, nh + nkv) K,
 * the rest V. Lane l holds dims l, l + 32, ...; a rotated dim's partner
 * (i +- R/2) lives in another lane, so the normed head goes through
 * shared memory once (one row of D floats per warp). */
__global__ void __launch_bounds__(HY_THREADS)
gated_qk_norm_rope_store_kernel(uint16_t *q_out, uint16_t *k_cache, uint16_t *v_cache, const float *qkv,
                                const float *q_norm, const float *k_norm, const float *rope,
                                const int32_t *positions, const int32_t *slots, int n, int nh, int nkv, int D,
                                int R, float eps) {
    __shared__ float row_s[HY_THREADS / HY_WARP][HY_MAX_PER_LANE * HY_WARP];
    const int lane = threadIdx.x % HY_WARP, wib = threadIdx.x / HY_WARP;
    const int heads = nh + 2 * nkv;
    const size_t task = (size_t)blockIdx.x * (HY_THREADS / HY_WARP) + wib;
    if (task >= (size_t)n * heads) return; /* a whole warp at once: no shuffle is left half-empty */
    const int t = (int)(task / heads), h = (int)(task % heads);
    const size_t width = (size_t)2 * nh * D + (size_t)2 * nkv * D;
    const float *row = qkv + (size_t)t * width;
    const size_t slot = (size_t)slots[t];
    if (h >= nh + nkv) { /* V: stored as it is */
        const int kh = h - nh - nkv;
        const float *src = row + (size_t)2 * nh * D + (size_t)nkv * D + (size_t)kh * D;
        uint16_t *dst = v_cache + (slot * nkv + kh) * D;
        for (int i = lane; i < D; i += HY_WARP) dst[i] = float_to_bf16_bits(src[i]);
        return;
    }
    const bool is_q = h < nh;
    const float *src = is_q ? row + (size_t)h * 2 * D : row + (size_t)2 * nh * D + (size_t)(h - nh) * D;
    uint16_t *dst = is_q ? q_out + ((size_t)t * nh + h) * D : k_cache + (slot * nkv + (h - nh)) * D;
    const float *w = is_q ? q_norm : k_norm;
    float x[HY_MAX_PER_LANE], sum = 0.0f;
#pragma unroll
    for (int p = 0; p < HY_MAX_PER_LANE; p++) {
        const int i = lane + p * HY_WARP;
        x[p] = i < D ? src[i] : 0.0f;
        sum += x[p] * x[p];
    }
    const float inv = 1.0f / sqrtf(hy_warp_sum(sum) / (float)D + eps);
    float *ns = row_s[wib];
#pragma unroll
    for (int p = 0; p < HY_MAX_PER_LANE; p++) {
        const int i = lane + p * HY_WARP;
        if (i < D) ns[i] = x[p] * inv * w[i];
    }
    __syncwarp();
    const int half = R / 2;
    const float *cs = rope + (size_t)positions[t] * half * 2;
    for (int i = lane; i < D; i += HY_WARP) {
        float y = ns[i];
        if (i < half) y = ns[i] * cs[2 * i] - ns[i + half] * cs[2 * i + 1];
        else if (i < R) y = ns[i] * cs[2 * (i - half)] + ns[i - half] * cs[2 * (i - half) + 1];
        dst[i] = float_to_bf16_bits(y);
    }
}

__global__ void attn_output_gate_kernel(uint16_t *attn, const float *qkv, int n, int nh, int nkv, int D) {
    const size_t Q = (size_t)nh * D, width = 2 * Q + (size_t)2 * nkv * D, total = (size_t)n * Q;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        const size_t t = e / Q, j = e % Q, h = j / D, i = j % D;
        const float g = qkv[t * width + h * 2 * D + D + i];
        attn[e] = float_to_bf16_bits(bf16_bits_to_float(attn[e]) * hy_sigmoid(g));
    }
}

__global__ void shared_expert_add_kernel(float *delta, const float *shared, const float *gate, int n, int H) {
    const size_t total = (size_t)n * H;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x)
        delta[e] += hy_sigmoid(gate[e / H]) * shared[e];
}

static unsigned hy_grid(size_t work, size_t per_block) {
    size_t b = (work + per_block - 1) / per_block;
    return (unsigned)(b < 1 ? 1 : b > HY_MAX_BLOCKS ? HY_MAX_BLOCKS : b);
}

extern "C" int cuda_gated_qk_norm_rope_store(uint16_t *q_out, uint16_t *k_cache, uint16_t *v_cache, const float *qkv,
                                             const float *q_norm, const float *k_norm, const float *rope,
                                             const int32_t *positions, const int32_t *slots, int n, int num_heads,
                                             int num_kv_heads, int head_dim, int rotary_dim, float eps,
                                             CudaStream stream, Error *err) {
    if (head_dim < 1 || head_dim > HY_MAX_PER_LANE * HY_WARP || rotary_dim < 2 || rotary_dim % 2 ||
        rotary_dim > head_dim)
        return error_set(err, "gated q/k norm: head_dim %d with rotary_dim %d (head_dim <= %d, rotary_dim even)",
                         head_dim, rotary_dim, HY_MAX_PER_LANE * HY_WARP);
    if (n <= 0) return 0;
    const size_t warps = (size_t)n * (num_heads + 2 * num_kv_heads), per_block = HY_THREADS / HY_WARP;
    const size_t blocks = (warps + per_block - 1) / per_block; /* one warp a head: no grid-stride */
    gated_qk_norm_rope_store_kernel<<<(unsigned)blocks, HY_THREADS, 0, (cudaStream_t)stream>>>(
        q_out, k_cache, v_cache, qkv, q_norm, k_norm, rope, positions, slots, n, num_heads, num_kv_heads, head_dim,
        rotary_dim, eps);
    CUDA_LAUNCHED("the gated q/k norm + RoPE + KV store kernel", err);
    return 0;
}

extern "C" int cuda_attn_output_gate(uint16_t *attn, const float *qkv, int n, int num_heads, int num_kv_heads,
                                     int head_dim, CudaStream stream, Error *err) {
    if (n <= 0) return 0;
    attn_output_gate_kernel<<<hy_grid((size_t)n * num_heads * head_dim, HY_THREADS), HY_THREADS, 0,
                              (cudaStream_t)stream>>>(attn, qkv, n, num_heads, num_kv_heads, head_dim);
    CUDA_LAUNCHED("the attention output gate kernel", err);
    return 0;
}

extern "C" int cuda_shared_expert_add(float *delta, const float *shared, const float *gate, int n, int hidden,
                                      CudaStream stream, Error *err) {
    if (n <= 0) return 0;
    shared_expert_add_kernel<<<hy_grid((size_t)n * hidden, HY_THREADS), HY_THREADS, 0, (cudaStream_t)stream>>>(
        delta, shared, gate, n, hidden);
    CUDA_LAUNCHED("the shared expert kernel", err);
    return 0;
}
