/*
 * cuda_kernels.cu - the CUDA runner's per-token kernels (see cuda_kernels.h).
 *
 * The row kernels (embedding, residual add + RMSNorm, q/k norm + RoPE + KV
 * store, SiLU-and-mul) move a few KB per token, so at decode they are
 * latency-bound: what costs is the number of dependent trips to memory and
 * the block-wide barriers, not bandwidth. Hence:
 *  - one warp per row (RMSNorm, embedding), one group of head_dim / 8 lanes
 *    per head (q/k norm + RoPE), so a reduction is a handful of warp
 *    shuffles and never a __syncthreads or shared memory round;
 *  - 16-byte loads and 8- or 16-byte stores, a row's loads all issued
 *    before the first is used, so a row costs about one memory latency
 *    (two where an index must be read first: a token, a position);
 *  - RMSNorm keeps its row in registers between the sum of squares and the
 *    output (a compile-time number of float4s per lane, the smallest that
 *    fits the row), instead of reading x back;
 *  - several rows (or heads) per block and grids sized to the work, so a
 *    256-row decode batch spreads over the SMs rather than queueing on a
 *    few, and SiLU-and-mul gets many blocks even for one token.
 * Shapes or pointers the vector kernels cannot take (a row width that is not
 * a multiple of 4 or 8, a row wider than RMSNORM_MAX_VPL float4s a lane,
 * misaligned buffers) fall back to the previous kernels, one thread block
 * per token, which are also what NANOVLLM_CUDA_LEGACY=kernels selects for
 * A/B timings (cuda_variants.h).
 *
 * Their arithmetic mirrors the CPU runner's (cpu_ops.c): float32, 1/sqrt for
 * RMSNorm, the same RoPE table computed in double on the host, so that the
 * two backends differ only by bf16 rounding of GEMM inputs and the cache
 * (and, within float32, the order of a sum of squares).
 * Attention lives in cuda_decode_attention.cu (decode), cuda_prefill_attention.cu
 * and cuda_flash_attention.cu (prompt tokens); the few-row products in cuda_gemv.cu.
 */
#include <cuda_bf16.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "cuda_bf16.h"
#include "cuda_check.h"
#include "cuda_fused_math.h"
#include "cuda_kernels.h"
#include "cuda_kv_fp8.h"
#include "cuda_variants.h"

#define ROW_THREADS 256
#define WARP 32
/* float4s a lane may hold for RMSNorm: rows up to 32 x 4 x 32 = 4096 wide
 * (more would not fit in registers); wider rows take the block kernel. */
#define RMSNORM_MAX_VPL 32
/* Threads per block of the element-wise kernels: small blocks, so that one
 * decode token's few thousand elements still land on several SMs. */
#define VEC_THREADS 128
/* Grid cap of the grid-stride loops: a few waves on any current GPU. */
#define VEC_MAX_BLOCKS 8192

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

/* ---- vector kernels: a warp (or part of one) per row --------------------------------- */

/* One warp per token row; a lane reads 8 bf16 (16 bytes) and writes two
 * float4s per step. The row-wide unroll keeps several loads in flight. */
__global__ void embed_vec_kernel(float *__restrict__ x, const uint16_t *__restrict__ table,
                                 const int32_t *__restrict__ tokens, int n, int hidden) {
    int t = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (t >= n) return;
    const uint4 *row = (const uint4 *)(table + (size_t)tokens[t] * hidden);
    float4 *dst = (float4 *)(x + (size_t)t * hidden);
    int n8 = hidden / 8;
#pragma unroll 4
    for (int i = lane; i < n8; i += WARP) {
        uint4 b = row[i];
        dst[2 * i] = make_float4(__uint_as_float(b.x << 16), __uint_as_float(b.x & 0xffff0000u),
                                 __uint_as_float(b.y << 16), __uint_as_float(b.y & 0xffff0000u));
        dst[2 * i + 1] = make_float4(__uint_as_float(b.z << 16), __uint_as_float(b.z & 0xffff0000u),
                                     __uint_as_float(b.w << 16), __uint_as_float(b.w & 0xffff0000u));
    }
}

/* One warp per row; lane l holds float4s l, l + 32, ... (VPL of them at
 * most, the rest of the array predicated off) from the load to the output,
 * so x is read once and written once. */
template <int VPL>
__global__ void __launch_bounds__(256)
    add_rmsnorm_warp_kernel(float *__restrict__ x, const float *__restrict__ delta,
                            uint16_t *__restrict__ out, const float *__restrict__ weight, int n,
                            int hidden, float eps) {
    int t = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (t >= n) return; /* a whole warp: the shuffles below see all 32 lanes */
    const int n4 = hidden / 4;
    float4 *xr = (float4 *)(x + (size_t)t * hidden);
    const float4 *w4 = (const float4 *)weight;
    /* Narrow rows (decode's 1024) also load their weights up front, so the
     * output does not wait a second memory latency after the reduction;
     * wide rows have no registers to spare for them, and their output loop
     * keeps enough weight loads in flight to overlap that latency. */
    constexpr bool early_w = VPL <= 8;
    float4 v[VPL], wv[early_w ? VPL : 1];
#pragma unroll
    for (int k = 0; k < VPL; k++)
        if (lane + k * WARP < n4) {
            v[k] = xr[lane + k * WARP];
            if constexpr (early_w) wv[k] = w4[lane + k * WARP];
        }
    if (delta) {
        const float4 *dr = (const float4 *)(delta + (size_t)t * hidden);
#pragma unroll
        for (int k = 0; k < VPL; k++) {
            int i = lane + k * WARP;
            if (i < n4) {
                v[k] = add4(v[k], dr[i]);
                xr[i] = v[k];
            }
        }
    }
    /* cuda_fused_math.h: the gemv's normalising prologue does the same */
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < VPL; k++)
        if (lane + k * WARP < n4) sum = rms_sum4(sum, v[k]);
    const float inv = rms_inv(rms_warp_sum(sum), hidden, eps);
    uint2 *o = (uint2 *)(out + (size_t)t * hidden);
#pragma unroll
    for (int k = 0; k < VPL; k++) {
        int i = lane + k * WARP;
        if (i < n4) {
            float4 w;
            if constexpr (early_w) w = wv[k];
            else w = w4[i];
            o[i] = rms_scale4(v[k], inv, w);
        }
    }
}

/* One group of G = head_dim / 8 lanes per head (8, 16 or 32 lanes for
 * head_dim 64, 128, 256), the heads of all tokens side by side over the
 * grid: q heads, then k, then v, token after token. A q/k lane owns the
 * RoPE pairs (i, i + half) for i = 4 lane .. 4 lane + 3, one float4 from
 * each half, and their (cos, sin) as two float4s; a v lane copies 8 values
 * as one 16-byte store. The sum of squares needs log2(G) shuffles within
 * the group. KV: the cache's element, uint16_t (bf16) or uint8_t (fp8
 * e4m3, cuda_kv_fp8.h: k and v divided by k_scale / v_scale and encoded,
 * 4-byte stores of k, 8-byte stores of v; q stays bf16). */
template <int G, typename KV>
__global__ void __launch_bounds__(VEC_THREADS)
    qk_norm_rope_store_vec_kernel(uint16_t *__restrict__ q_out, KV *__restrict__ k_cache,
                                  KV *__restrict__ v_cache, const float *__restrict__ qkv,
                                  const float *__restrict__ q_norm, const float *__restrict__ k_norm,
                                  const float *__restrict__ rope, const int32_t *__restrict__ positions,
                                  const int32_t *__restrict__ slots, int n, int num_heads,
                                  int num_kv_heads, float eps, float k_scale, float v_scale) {
    constexpr bool FP8 = sizeof(KV) == 1;
    const int D = 8 * G, half = 4 * G;
    const int heads = num_heads + 2 * num_kv_heads;
    unsigned gid = blockIdx.x * blockDim.x + threadIdx.x, item = gid / G;
    int lane = gid % G;
    if (item >= (unsigned)n * (unsigned)heads) return; /* whole groups: G divides 32 */
    int t = item / heads, h = item % heads;
    const float *src = qkv + (size_t)item * D;
    if (h >= num_heads + num_kv_heads) { /* v: stored as it is */
        const float4 *s4 = (const float4 *)src + 2 * lane;
        float4 a = s4[0], b = s4[1];
        if constexpr (FP8) {
            uint2 o = make_uint2(kv_fp8x4_encode(a, v_scale), kv_fp8x4_encode(b, v_scale));
            size_t slot = (size_t)slots[t];
            KV *dst = v_cache + (slot * num_kv_heads + (h - num_heads - num_kv_heads)) * D;
            ((uint2 *)dst)[lane] = o;
        } else {
            uint4 o = make_uint4(pack_bf16x2(a.x, a.y), pack_bf16x2(a.z, a.w), pack_bf16x2(b.x, b.y),
                                 pack_bf16x2(b.z, b.w));
            size_t slot = (size_t)slots[t];
            KV *dst = v_cache + (slot * num_kv_heads + (h - num_heads - num_kv_heads)) * D;
            ((uint4 *)dst)[lane] = o;
        }
        return;
    }
    bool is_q = h < num_heads;
    float4 x1 = ((const float4 *)src)[lane], x2 = ((const float4 *)(src + half))[lane];
    const float *w = is_q ? q_norm : k_norm;
    float4 w1 = ((const float4 *)w)[lane], w2 = ((const float4 *)(w + half))[lane];
    const float4 *cs = (const float4 *)(rope + (size_t)positions[t] * D) + 2 * lane;
    float4 cs0 = cs[0], cs1 = cs[1]; /* (cos, sin) of pairs 4 lane .. 4 lane + 3 */
    float sum = x1.x * x1.x + x1.y * x1.y + x1.z * x1.z + x1.w * x1.w + x2.x * x2.x + x2.y * x2.y +
                x2.z * x2.z + x2.w * x2.w;
    /* only this group's lanes: the warp's other groups may be v heads */
    unsigned mask = G == WARP ? 0xffffffffu : ((1u << (G % WARP)) - 1) << (threadIdx.x % WARP / G * G);
#pragma unroll
    for (int o = G / 2; o > 0; o /= 2) sum += __shfl_xor_sync(mask, sum, o);
    float inv = 1.0f / sqrtf(sum / (float)D + eps);
    float a0 = x1.x * inv * w1.x, a1 = x1.y * inv * w1.y, a2 = x1.z * inv * w1.z, a3 = x1.w * inv * w1.w;
    float b0 = x2.x * inv * w2.x, b1 = x2.y * inv * w2.y, b2 = x2.z * inv * w2.z, b3 = x2.w * inv * w2.w;
    float4 lo = make_float4(a0 * cs0.x - b0 * cs0.y, a1 * cs0.z - b1 * cs0.w, a2 * cs1.x - b2 * cs1.y,
                            a3 * cs1.z - b3 * cs1.w);
    float4 hi = make_float4(b0 * cs0.x + a0 * cs0.y, b1 * cs0.z + a1 * cs0.w, b2 * cs1.x + a2 * cs1.y,
                            b3 * cs1.z + a3 * cs1.w);
    if constexpr (FP8) {
        if (!is_q) {
            KV *dst = k_cache + ((size_t)slots[t] * num_kv_heads + (h - num_heads)) * D;
            ((uint32_t *)dst)[lane] = kv_fp8x4_encode(lo, k_scale);
            ((uint32_t *)(dst + half))[lane] = kv_fp8x4_encode(hi, k_scale);
            return;
        }
        uint16_t *dst = q_out + ((size_t)t * num_heads + h) * D;
        ((uint2 *)dst)[lane] = pack_bf16x4(lo);
        ((uint2 *)(dst + half))[lane] = pack_bf16x4(hi);
    } else {
        uint16_t *dst = is_q ? q_out + ((size_t)t * num_heads + h) * D
                             : k_cache + ((size_t)slots[t] * num_kv_heads + (h - num_heads)) * D;
        ((uint2 *)dst)[lane] = pack_bf16x4(lo);
        ((uint2 *)(dst + half))[lane] = pack_bf16x4(hi);
    }
}

/* n rows, or *n_dev of them when given (a count only the GPU knows, at most
 * n); a thread takes 4 gate and 4 up values per step and writes 4 bf16 as
 * one 8-byte store. 32-bit indices: the launcher checks they fit. */
__global__ void __launch_bounds__(VEC_THREADS)
    silu_mul_vec_kernel(uint16_t *__restrict__ out, const float *__restrict__ gate_up, int n,
                        const int32_t *__restrict__ n_dev, int intermediate) {
    int rows = n_dev ? min(*n_dev, n) : n;
    unsigned q = (unsigned)intermediate / 4, total = (unsigned)max(rows, 0) * q;
    const float4 *gu = (const float4 *)gate_up;
    uint2 *o = (uint2 *)out;
    for (unsigned idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += gridDim.x * blockDim.x) {
        unsigned t = idx / q, i = idx - t * q;
        float4 g = gu[(size_t)t * 2 * q + i], u = gu[(size_t)t * 2 * q + q + i];
        o[idx] = pack_bf16x4(make_float4(silu_mul1(g.x, u.x), silu_mul1(g.y, u.y), silu_mul1(g.z, u.z),
                                         silu_mul1(g.w, u.w)));
    }
}

/* ---- the previous kernels: one thread block per row ------------------------------------ */

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

/* ---- row gather, pooling ------------------------------------------------------------- */

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

static bool aligned(const void *p, uintptr_t bytes) { return ((uintptr_t)p & (bytes - 1)) == 0; }

/* Whether the launchers use the previous kernels (NANOVLLM_CUDA_LEGACY). */
static bool legacy_kernels(void) { return cuda_variant_legacy("kernels"); }

/* Rows per block of the warp-per-row kernels: two up to a few rows per SM
 * (a 132-SM H100 at 1024 rows), so that a decode batch reaches as many SMs
 * as it can; four beyond, where blocks are plenty and fewer, larger ones
 * cost the block scheduler less. */
static int rows_per_block(int n) { return n < 1024 ? 2 : 4; }

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
    cudaStream_t s = as_stream(stream);
    if (!legacy_kernels() && hidden % 8 == 0 && aligned(x, 16) && aligned(table, 16)) {
        int rows = rows_per_block(n);
        embed_vec_kernel<<<(n + rows - 1) / rows, rows * WARP, 0, s>>>(x, table, tokens, n, hidden);
    } else {
        embed_kernel<<<n, ROW_THREADS, 0, s>>>(x, table, tokens, hidden);
    }
    CUDA_LAUNCHED("the embedding kernel", err);
    return 0;
}

template <int VPL>
static void launch_add_rmsnorm(float *x, const float *delta, uint16_t *out, const float *weight, int n,
                               int hidden, float eps, cudaStream_t s) {
    int rows = rows_per_block(n);
    add_rmsnorm_warp_kernel<VPL><<<(n + rows - 1) / rows, rows * WARP, 0, s>>>(x, delta, out, weight, n,
                                                                                hidden, eps);
}

extern "C" int cuda_add_rmsnorm(float *x, const float *delta, uint16_t *out, const float *weight,
                                int n, int hidden, float eps, CudaStream stream, Error *err) {
    if (n <= 0) return 0;
    cudaStream_t s = as_stream(stream);
    int vpl = (hidden / 4 + WARP - 1) / WARP; /* float4s per lane */
    bool vec = !legacy_kernels() && hidden % 4 == 0 && vpl <= RMSNORM_MAX_VPL && aligned(x, 16) &&
               aligned(delta, 16) && aligned(weight, 16) && aligned(out, 8);
    if (!vec) add_rmsnorm_kernel<<<n, ROW_THREADS, 0, s>>>(x, delta, out, weight, hidden, eps);
    /* the smallest array that holds the row: a larger one would cost only
     * registers (its extra slots are predicated off), and registers are
     * what bounds this kernel's occupancy for wide rows */
    else if (vpl <= 1) launch_add_rmsnorm<1>(x, delta, out, weight, n, hidden, eps, s);
    else if (vpl <= 2) launch_add_rmsnorm<2>(x, delta, out, weight, n, hidden, eps, s);
    else if (vpl <= 4) launch_add_rmsnorm<4>(x, delta, out, weight, n, hidden, eps, s);
    else if (vpl <= 8) launch_add_rmsnorm<8>(x, delta, out, weight, n, hidden, eps, s);
    else if (vpl <= 12) launch_add_rmsnorm<12>(x, delta, out, weight, n, hidden, eps, s);
    else if (vpl <= 16) launch_add_rmsnorm<16>(x, delta, out, weight, n, hidden, eps, s);
    else if (vpl <= 24) launch_add_rmsnorm<24>(x, delta, out, weight, n, hidden, eps, s);
    else launch_add_rmsnorm<RMSNORM_MAX_VPL>(x, delta, out, weight, n, hidden, eps, s);
    CUDA_LAUNCHED("the RMSNorm kernel", err);
    return 0;
}

template <int G, typename KV>
static void launch_qk_norm_rope_store(uint16_t *q_out, KV *k_cache, KV *v_cache, const float *qkv,
                                      const float *q_norm, const float *k_norm, const float *rope,
                                      const int32_t *positions, const int32_t *slots, int n, int num_heads,
                                      int num_kv_heads, float eps, float k_scale, float v_scale, cudaStream_t s) {
    size_t threads = (size_t)n * (num_heads + 2 * num_kv_heads) * G;
    unsigned blocks = (unsigned)((threads + VEC_THREADS - 1) / VEC_THREADS);
    qk_norm_rope_store_vec_kernel<G, KV><<<blocks, VEC_THREADS, 0, s>>>(q_out, k_cache, v_cache, qkv, q_norm, k_norm,
                                                                        rope, positions, slots, n, num_heads,
                                                                        num_kv_heads, eps, k_scale, v_scale);
}

/* The vector kernel for head_dim 64, 128 or 256 (checked by the callers). */
template <typename KV>
static void launch_qk_norm_rope_store_dim(uint16_t *q_out, KV *k_cache, KV *v_cache, const float *qkv,
                                          const float *q_norm, const float *k_norm, const float *rope,
                                          const int32_t *positions, const int32_t *slots, int n, int num_heads,
                                          int num_kv_heads, int head_dim, float eps, float k_scale, float v_scale,
                                          cudaStream_t s) {
    switch (head_dim) {
    case 64:
        launch_qk_norm_rope_store<8>(q_out, k_cache, v_cache, qkv, q_norm, k_norm, rope, positions, slots, n,
                                     num_heads, num_kv_heads, eps, k_scale, v_scale, s);
        break;
    case 128:
        launch_qk_norm_rope_store<16>(q_out, k_cache, v_cache, qkv, q_norm, k_norm, rope, positions, slots, n,
                                      num_heads, num_kv_heads, eps, k_scale, v_scale, s);
        break;
    default:
        launch_qk_norm_rope_store<32>(q_out, k_cache, v_cache, qkv, q_norm, k_norm, rope, positions, slots, n,
                                      num_heads, num_kv_heads, eps, k_scale, v_scale, s);
        break;
    }
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
    cudaStream_t s = as_stream(stream);
    /* the vector kernel's thread index is 32-bit */
    bool vec = !legacy_kernels() && (size_t)n * heads * (head_dim / 8) < ((size_t)1 << 31) &&
               aligned(qkv, 16) && aligned(q_norm, 16) && aligned(k_norm, 16) && aligned(rope, 16) &&
               aligned(q_out, 8) && aligned(k_cache, 8) && aligned(v_cache, 16);
    if (vec) {
        launch_qk_norm_rope_store_dim<uint16_t>(q_out, k_cache, v_cache, qkv, q_norm, k_norm, rope, positions,
                                                slots, n, num_heads, num_kv_heads, head_dim, eps, 1.0f, 1.0f, s);
        CUDA_LAUNCHED("the q/k norm + RoPE + KV store kernel", err);
        return 0;
    }
    int threads = WARP * (heads < 16 ? heads : 16);
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

extern "C" int cuda_qk_norm_rope_store_fp8(uint16_t *q_out, uint8_t *k_cache, uint8_t *v_cache, const float *qkv,
                                           const float *q_norm, const float *k_norm, const float *rope,
                                           const int32_t *positions, const int32_t *slots, int n, int num_heads,
                                           int num_kv_heads, int head_dim, float eps, float k_scale, float v_scale,
                                           CudaStream stream, Error *err) {
    if (cuda_kernels_check_shape(num_heads, num_kv_heads, head_dim, err)) return -1;
    if (!(k_scale > 0.0f) || !(v_scale > 0.0f) || isinf(k_scale) || isinf(v_scale))
        return error_set(err, "fp8 KV store: scales %g and %g (positive and finite)", k_scale, v_scale);
    if (n <= 0) return 0;
    int heads = num_heads + 2 * num_kv_heads;
    /* the vector kernel only (NANOVLLM_CUDA_LEGACY=kernels keeps the bf16
     * cache's previous store kernel; an fp8 cache has no previous one) */
    if ((size_t)n * heads * (head_dim / 8) >= ((size_t)1 << 31) || !aligned(qkv, 16) || !aligned(q_norm, 16) ||
        !aligned(k_norm, 16) || !aligned(rope, 16) || !aligned(q_out, 8) || !aligned(k_cache, 4) ||
        !aligned(v_cache, 8))
        return error_set(err, "fp8 KV store: %d tokens or misaligned buffers (16-byte qkv, norms and RoPE table, "
                              "8-byte q and V cache, 4-byte K cache)", n);
    launch_qk_norm_rope_store_dim<uint8_t>(q_out, k_cache, v_cache, qkv, q_norm, k_norm, rope, positions, slots, n,
                                           num_heads, num_kv_heads, head_dim, eps, k_scale, v_scale,
                                           as_stream(stream));
    CUDA_LAUNCHED("the q/k norm + RoPE + fp8 KV store kernel", err);
    return 0;
}

extern "C" int cuda_silu_mul_rows(uint16_t *out, const float *gate_up, int max_n,
                                  const int32_t *n_dev, int intermediate, CudaStream stream,
                                  Error *err) {
    if (max_n <= 0) return 0;
    cudaStream_t s = as_stream(stream);
    size_t total = (size_t)max_n * intermediate;
    /* the vector kernel's indices are 32-bit, over float4s */
    if (!legacy_kernels() && intermediate % 4 == 0 && total / 4 < ((size_t)1 << 31) && aligned(gate_up, 16) &&
        aligned(out, 8)) {
        /* sized for max_n rows even when n_dev says fewer: a captured graph
         * keeps this grid while the count changes */
        size_t blocks = (total / 4 + VEC_THREADS - 1) / VEC_THREADS;
        if (blocks > VEC_MAX_BLOCKS) blocks = VEC_MAX_BLOCKS;
        silu_mul_vec_kernel<<<(unsigned)blocks, VEC_THREADS, 0, s>>>(out, gate_up, max_n, n_dev, intermediate);
    } else {
        size_t blocks = (total + ROW_THREADS - 1) / ROW_THREADS;
        if (blocks > 65535) blocks = 65535;
        silu_mul_kernel<<<(unsigned)blocks, ROW_THREADS, 0, s>>>(out, gate_up, max_n, n_dev, intermediate);
    }
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
