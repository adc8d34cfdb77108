/*
 * cuda_kernels.cu - the CUDA runner's per-token kernels (see cuda_kernels.h).
 *
 * Correct and simple first: one thread block per token for the row-wise
 * operations (embedding, RMSNorm, q/k norm + RoPE + KV store), with warp
 * shuffles for the reductions, and a grid-stride loop for SiLU-and-mul.
 * Their arithmetic mirrors the CPU runner's (cpu_ops.c): float32, 1/sqrt for
 * RMSNorm, the same RoPE table computed in double on the host, so that the
 * two backends differ only by bf16 rounding of GEMM inputs and the cache.
 * Paged attention lives in cuda_attention.cu.
 */
#include <cuda_bf16.h>
#include <float.h>
#include <math.h>

#include "cuda_check.h"
#include "cuda_kernels.h"

#define ROW_THREADS 256
#define WARP 32

__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) {
    return __uint_as_float((uint32_t)h << 16);
}

/* Round to nearest even, as f32_to_bf16 in half.h (NaN stays NaN). */
__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = WARP / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over the whole block (blockDim.x a multiple of 32, at most 1024). */
__device__ float block_sum(float v) {
    __shared__ float partial[WARP];
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    v = warp_sum(v);
    __syncthreads(); /* partial[] may still be read by a previous call */
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    int warps = blockDim.x / WARP;
    v = lane < warps ? partial[lane] : 0.0f;
    return warp_sum(v);
}

/* ---- embedding, RMSNorm ---------------------------------------------------------------- */

__global__ void embed_kernel(float *x, const uint16_t *table, const int32_t *tokens, int hidden) {
    int t = blockIdx.x;
    const uint16_t *row = table + (size_t)tokens[t] * hidden;
    float *dst = x + (size_t)t * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = bf16_bits_to_float(row[i]);
}

__global__ void add_rmsnorm_kernel(float *x, const float *delta, uint16_t *out, const float *weight,
                                   int hidden, float eps) {
    int t = blockIdx.x;
    float *xr = x + (size_t)t * hidden;
    const float *dr = delta ? delta + (size_t)t * hidden : NULL;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        float v = xr[i];
        if (dr) {
            v += dr[i];
            xr[i] = v;
        }
        sum += v * v;
    }
    sum = block_sum(sum);
    float inv = 1.0f / sqrtf(sum / (float)hidden + eps);
    uint16_t *o = out + (size_t)t * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
        o[i] = float_to_bf16_bits(xr[i] * inv * weight[i]);
}

/* ---- q/k norm + RoPE + KV store ------------------------------------------------------------ */

/* One block per token, one warp per head (q heads, then k, then v). A lane
 * owns the RoPE pairs (i, i + half) for i = lane, lane + 32, ...; PAIRS is
 * half / 32. */
template <int PAIRS>
__global__ void qk_norm_rope_store_kernel(uint16_t *q_out, uint16_t *k_cache, uint16_t *v_cache,
                                          const float *qkv, const float *q_norm,
                                          const float *k_norm, const float *rope,
                                          const int32_t *positions, const int32_t *slots,
                                          int num_heads, int num_kv_heads, float eps) {
    const int D = PAIRS * 2 * WARP, half = PAIRS * WARP;
    int t = blockIdx.x, lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    int warps = blockDim.x / WARP, heads = num_heads + 2 * num_kv_heads;
    const float *row = qkv + (size_t)t * heads * D;
    const float *cs = rope + (size_t)positions[t] * half * 2;
    size_t slot = (size_t)slots[t];
    for (int h = warp; h < heads; h += warps) {
        const float *src = row + (size_t)h * D;
        uint16_t *dst;
        if (h < num_heads) dst = q_out + ((size_t)t * num_heads + h) * D;
        else if (h < num_heads + num_kv_heads) dst = k_cache + (slot * num_kv_heads + (h - num_heads)) * D;
        else dst = v_cache + (slot * num_kv_heads + (h - num_heads - num_kv_heads)) * D;
        if (h >= num_heads + num_kv_heads) { /* v: stored as it is */
            for (int i = lane; i < D; i += WARP) dst[i] = float_to_bf16_bits(src[i]);
            continue;
        }
        const float *w = h < num_heads ? q_norm : k_norm;
        float x1[PAIRS], x2[PAIRS], sum = 0.0f;
#pragma unroll
        for (int p = 0; p < PAIRS; p++) {
            x1[p] = src[lane + p * WARP];
            x2[p] = src[lane + p * WARP + half];
            sum += x1[p] * x1[p] + x2[p] * x2[p];
        }
        sum = warp_sum(sum);
        float inv = 1.0f / sqrtf(sum / (float)D + eps);
#pragma unroll
        for (int p = 0; p < PAIRS; p++) {
            int i = lane + p * WARP;
            float a = x1[p] * inv * w[i], b = x2[p] * inv * w[i + half];
            float c = cs[2 * i], s = cs[2 * i + 1];
            dst[i] = float_to_bf16_bits(a * c - b * s);
            dst[i + half] = float_to_bf16_bits(b * c + a * s);
        }
    }
}

/* ---- SiLU-and-mul, row gather --------------------------------------------------------- */

/* n rows, or *n_dev of them when given (a count only the GPU knows). */
__global__ void silu_mul_kernel(uint16_t *out, const float *gate_up, int n, const int32_t *n_dev,
                                int intermediate) {
    size_t total = (size_t)(n_dev ? *n_dev : n) * intermediate;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        size_t t = idx / intermediate, i = idx % intermediate;
        const float *row = gate_up + t * 2 * intermediate;
        float g = row[i], u = row[intermediate + i];
        out[idx] = float_to_bf16_bits(g / (1.0f + expf(-g)) * u);
    }
}

__global__ void gather_rows_kernel(uint16_t *out, const uint16_t *in, const int32_t *rows, int width) {
    const uint16_t *src = in + (size_t)rows[blockIdx.x] * width;
    uint16_t *dst = out + (size_t)blockIdx.x * width;
    for (int i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
}

/* One block per pooled sequence; its rows one after another, each normed
 * and added into the block's own output row. */
__global__ void pool_rows_kernel(float *out, const float *x, const float *weight, const int32_t *ranges,
                                 int hidden, float eps) {
    int first = ranges[2 * blockIdx.x], count = ranges[2 * blockIdx.x + 1];
    float *o = out + (size_t)blockIdx.x * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = 0.0f;
    for (int t = first; t < first + count; t++) {
        const float *xr = x + (size_t)t * hidden;
        float sum = 0.0f;
        for (int i = threadIdx.x; i < hidden; i += blockDim.x) sum += xr[i] * xr[i];
        sum = block_sum(sum);
        float inv = 1.0f / sqrtf(sum / (float)hidden + eps);
        for (int i = threadIdx.x; i < hidden; i += blockDim.x) o[i] += xr[i] * inv * weight[i];
    }
}

/* ---- launchers ------------------------------------------------------------------------- */

static cudaStream_t as_stream(CudaStream s) { return (cudaStream_t)s; }

extern "C" int cuda_kernels_check_shape(int num_heads, int num_kv_heads, int head_dim, Error *err) {
    if (head_dim != 64 && head_dim != 128 && head_dim != 256)
        return error_set(err, "the CUDA kernels handle head_dim 64, 128 or 256, not %d", head_dim);
    if (num_kv_heads < 1 || num_heads % num_kv_heads != 0 || num_heads / num_kv_heads > 16)
        return error_set(err, "the CUDA kernels handle query-head groups of 1 to 16, not %d heads "
                              "over %d KV heads", num_heads, num_kv_heads);
    if (num_heads + 2 * num_kv_heads > 1024)
        return error_set(err, "too many heads (%d + 2 x %d) for the CUDA kernels", num_heads, num_kv_heads);
    return 0;
}

extern "C" int cuda_embed(float *x, const uint16_t *table, const int32_t *tokens, int n, int hidden,
                          CudaStream stream, Error *err) {
    if (n <= 0) return 0;
    embed_kernel<<<n, ROW_THREADS, 0, as_stream(stream)>>>(x, table, tokens, hidden);
    CUDA_LAUNCHED("the embedding kernel", err);
    return 0;
}

extern "C" int cuda_add_rmsnorm(float *x, const float *delta, uint16_t *out, const float *weight,
                                int n, int hidden, float eps, CudaStream stream, Error *err) {
    if (n <= 0) return 0;
    add_rmsnorm_kernel<<<n, ROW_THREADS, 0, as_stream(stream)>>>(x, delta, out, weight, hidden, eps);
    CUDA_LAUNCHED("the RMSNorm kernel", err);
    return 0;
}

extern "C" int cuda_qk_norm_rope_store(uint16_t *q_out, uint16_t *k_cache, uint16_t *v_cache,
                                       const float *qkv, const float *q_norm, const float *k_norm,
                                       const float *rope, const int32_t *positions,
                                       const int32_t *slots, int n, int num_heads,
                                       int num_kv_heads, int head_dim, float eps,
                                       CudaStream stream, Error *err) {
    if (cuda_kernels_check_shape(num_heads, num_kv_heads, head_dim, err)) return -1;
    if (n <= 0) return 0;
    int heads = num_heads + 2 * num_kv_heads;
    int threads = WARP * (heads < 16 ? heads : 16);
    cudaStream_t s = as_stream(stream);
    switch (head_dim) {
    case 64:
        qk_norm_rope_store_kernel<1><<<n, threads, 0, s>>>(q_out, k_cache, v_cache, qkv, q_norm, k_norm, rope,
                                                           positions, slots, num_heads, num_kv_heads, eps);
        break;
    case 128:
        qk_norm_rope_store_kernel<2><<<n, threads, 0, s>>>(q_out, k_cache, v_cache, qkv, q_norm, k_norm, rope,
                                                           positions, slots, num_heads, num_kv_heads, eps);
        break;
    default:
        qk_norm_rope_store_kernel<4><<<n, threads, 0, s>>>(q_out, k_cache, v_cache, qkv, q_norm, k_norm, rope,
                                                           positions, slots, num_heads, num_kv_heads, eps);
        break;
    }
    CUDA_LAUNCHED("the q/k norm + RoPE + KV store kernel", err);
    return 0;
}

extern "C" int cuda_silu_mul_rows(uint16_t *out, const float *gate_up, int max_n,
                                  const int32_t *n_dev, int intermediate, CudaStream stream,
                                  Error *err) {
    if (max_n <= 0) return 0;
    size_t total = (size_t)max_n * intermediate;
    size_t blocks = (total + ROW_THREADS - 1) / ROW_THREADS;
    if (blocks > 65535) blocks = 65535;
    silu_mul_kernel<<<(unsigned)blocks, ROW_THREADS, 0, as_stream(stream)>>>(out, gate_up, max_n,
                                                                              n_dev, intermediate);
    CUDA_LAUNCHED("the SiLU-and-mul kernel", err);
    return 0;
}

extern "C" int cuda_silu_mul(uint16_t *out, const float *gate_up, int n, int intermediate,
                             CudaStream stream, Error *err) {
    return cuda_silu_mul_rows(out, gate_up, n, NULL, intermediate, stream, err);
}

extern "C" int cuda_gather_rows(uint16_t *out, const uint16_t *in, const int32_t *rows, int n,
                                int width, CudaStream stream, Error *err) {
    if (n <= 0) return 0;
    gather_rows_kernel<<<n, ROW_THREADS, 0, as_stream(stream)>>>(out, in, rows, width);
    CUDA_LAUNCHED("the row gather kernel", err);
    return 0;
}

extern "C" int cuda_pool_rows(float *out, const float *x, const float *weight, const int32_t *ranges,
                              int n, int hidden, float eps, CudaStream stream, Error *err) {
    if (n <= 0) return 0;
    pool_rows_kernel<<<n, ROW_THREADS, 0, as_stream(stream)>>>(out, x, weight, ranges, hidden, eps);
    CUDA_LAUNCHED("the pooling kernel", err);
    return 0;
}

/* ---- memory ------------------------------------------------------------------------------ */

extern "C" void *cuda_alloc(size_t bytes, Error *err) {
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, bytes ? bytes : 1);
    if (rc != cudaSuccess) {
        error_set(err, "cannot allocate %zu bytes of GPU memory: %s", bytes, cudaGetErrorString(rc));
        return NULL;
    }
    return p;
}

extern "C" void cuda_free(void *p) {
    if (p) cudaFree(p); /* nothing useful to do with a failure while freeing */
}

extern "C" int cuda_upload(void *dst, const void *src, size_t bytes, Error *err) {
    CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copying to the GPU", err);
    return 0;
}

extern "C" int cuda_download(void *dst, const void *src, size_t bytes, Error *err) {
    CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copying from the GPU", err);
    return 0;
}

extern "C" int cuda_synchronize(Error *err) {
    CUDA_TRY(cudaDeviceSynchronize(), "waiting for the GPU", err);
    return 0;
}
