/*
 * cuda_attention.cu - paged causal attention over the KV cache (see
 * cuda_kernels.h).
 *
 * One kernel for every kind of step. A thread block takes one item (a tile
 * of up to TILE_ROWS / group new tokens of one sequence) and one KV head, so
 * its rows are every query head of that head's group for each token of the
 * tile, and each K/V row it reads serves all of them. The block's four
 * warps split the context into chunks of 32 keys (warp w takes chunks w,
 * w + 4, ...): in a chunk, lane j scores key j against every row (q sits in
 * shared memory, scaled), the chunk's max updates each row's running max
 * (flash attention's online softmax: earlier sums and outputs are rescaled),
 * and the warp adds P V for its 32 keys, each lane owning head_dim / 32
 * output dimensions. The four warps' partial results are merged at the end.
 *
 * Decode is the same kernel with one token per item. This is the simple,
 * correct version: the CUDA-core arithmetic and one block per (sequence, KV
 * head) leave a single long decode sequence far from the memory bandwidth;
 * splitting the context over blocks and tensor-core prefill are the next
 * step (see engine/PERFORMANCE.md).
 */
#include <math.h>

#include "cuda_check.h"
#include "cuda_kernels.h"

#define WARP 32
#define ATTN_WARPS 4
#define TILE_ROWS 16 /* query rows (tokens x group heads) per block */

__device__ __forceinline__ float bf16_to_f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ __forceinline__ uint16_t f_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = WARP / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_add(float v) {
    for (int o = WARP / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* exp(a - b) where a may be -inf (gives 0) and b the larger or equal. */
__device__ __forceinline__ float exp_diff(float a, float b) {
    return a == -INFINITY ? 0.0f : expf(a - b);
}

/* DL = head_dim / 32: the output dimensions each lane owns. */
template <int DL>
__global__ void __launch_bounds__(ATTN_WARPS * WARP)
paged_attention_kernel(uint16_t *out, const uint16_t *q, const uint16_t *k_cache,
                       const uint16_t *v_cache, const CudaAttnSeq *seqs, const CudaAttnItem *items,
                       const int32_t *block_tables, int num_heads, int num_kv_heads, int block_size,
                       float scale) {
    const int D = DL * WARP;
    extern __shared__ float smem[];
    float *q_s = smem;                                 /* [TILE_ROWS, D] */
    float *p_s = q_s + TILE_ROWS * D;                  /* [ATTN_WARPS, TILE_ROWS, 32] */
    float *m_s = p_s + ATTN_WARPS * TILE_ROWS * WARP;  /* [TILE_ROWS] merged running max */
    float *l_s = m_s + TILE_ROWS;                      /* [TILE_ROWS] merged sum */

    const CudaAttnItem item = items[blockIdx.x];
    const CudaAttnSeq seq = seqs[item.seq];
    const int kv_head = blockIdx.y, group = num_heads / num_kv_heads;
    const int rows = item.tile_len * group;
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    const int32_t *table = block_tables + seq.table0;
    const int first_pos = seq.start_pos + item.tile0;
    const int num_keys = first_pos + item.tile_len; /* the last row sees keys [0, num_keys) */

    /* row r: token r / group of the tile, query head kv_head * group + r % group */
    for (int idx = threadIdx.x; idx < rows * D; idx += blockDim.x) {
        int r = idx / D, d = idx % D;
        int token = seq.token0 + item.tile0 + r / group, head = kv_head * group + r % group;
        q_s[idx] = bf16_to_f(q[((size_t)token * num_heads + head) * D + d]) * scale;
    }
    __syncthreads();

    float m[TILE_ROWS], l[TILE_ROWS], acc[TILE_ROWS][DL];
#pragma unroll
    for (int r = 0; r < TILE_ROWS; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int i = 0; i < DL; i++) acc[r][i] = 0.0f;
    }
    float *p_warp = p_s + warp * TILE_ROWS * WARP;

    for (int chunk0 = warp * WARP; chunk0 < num_keys; chunk0 += ATTN_WARPS * WARP) {
        const int key = chunk0 + lane;
        const bool valid = key < num_keys;
        size_t slot = 0;
        float s[TILE_ROWS];
#pragma unroll
        for (int r = 0; r < TILE_ROWS; r++) s[r] = 0.0f;
        if (valid) {
            slot = (size_t)table[key / block_size] * block_size + key % block_size;
            const uint16_t *k_row = k_cache + (slot * num_kv_heads + kv_head) * D;
            for (int d0 = 0; d0 < D; d0 += 8) {
                uint4 raw = *reinterpret_cast<const uint4 *>(k_row + d0);
                const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
                float k8[8];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    k8[2 * e] = __uint_as_float(w[e] << 16);
                    k8[2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u);
                }
#pragma unroll
                for (int r = 0; r < TILE_ROWS; r++) {
                    if (r < rows) {
                        const float *qr = q_s + r * D + d0;
#pragma unroll
                        for (int e = 0; e < 8; e++) s[r] += qr[e] * k8[e];
                    }
                }
            }
        }
        /* causal mask: row r (position first_pos + r / group) sees keys <= its position */
#pragma unroll
        for (int r = 0; r < TILE_ROWS; r++) {
            if (r >= rows) continue;
            float sr = valid && key <= first_pos + r / group ? s[r] : -INFINITY;
            float m_new = fmaxf(m[r], warp_max(sr));
            float correction = exp_diff(m[r], m_new); /* the running max grew: rescale */
            float p = exp_diff(sr, m_new);
            l[r] = l[r] * correction + p; /* per lane; summed over the warp at the end */
#pragma unroll
            for (int i = 0; i < DL; i++) acc[r][i] *= correction;
            m[r] = m_new;
            p_warp[r * WARP + lane] = p;
        }
        __syncwarp();
        int keys_here = num_keys - chunk0 < WARP ? num_keys - chunk0 : WARP;
        for (int j = 0; j < keys_here; j++) {
            size_t slot_j = __shfl_sync(0xffffffffu, slot, j);
            const uint16_t *v_row = v_cache + (slot_j * num_kv_heads + kv_head) * D;
            float v[DL];
#pragma unroll
            for (int i = 0; i < DL; i++) v[i] = bf16_to_f(v_row[lane + i * WARP]);
#pragma unroll
            for (int r = 0; r < TILE_ROWS; r++) {
                if (r < rows) {
                    float p = p_warp[r * WARP + j];
#pragma unroll
                    for (int i = 0; i < DL; i++) acc[r][i] += p * v[i];
                }
            }
        }
        __syncwarp();
    }
#pragma unroll
    for (int r = 0; r < TILE_ROWS; r++) l[r] = warp_add(l[r]);

    /* Merge the warps one after another into o_s (q_s's space, no longer needed). */
    float *o_s = q_s;
    __syncthreads();
    for (int w = 0; w < ATTN_WARPS; w++) {
        if (warp == w) {
#pragma unroll
            for (int r = 0; r < TILE_ROWS; r++) {
                if (r >= rows) continue;
                float *o = o_s + r * D;
                if (w == 0) {
#pragma unroll
                    for (int i = 0; i < DL; i++) o[lane + i * WARP] = acc[r][i];
                    if (lane == 0) {
                        m_s[r] = m[r];
                        l_s[r] = l[r];
                    }
                } else {
                    float mo = m_s[r], m_new = fmaxf(mo, m[r]);
                    float a = exp_diff(mo, m_new), b = exp_diff(m[r], m_new);
#pragma unroll
                    for (int i = 0; i < DL; i++) o[lane + i * WARP] = o[lane + i * WARP] * a + acc[r][i] * b;
                    __syncwarp();
                    if (lane == 0) {
                        l_s[r] = l_s[r] * a + l[r] * b;
                        m_s[r] = m_new;
                    }
                }
            }
        }
        __syncthreads();
    }
    for (int idx = threadIdx.x; idx < rows * D; idx += blockDim.x) {
        int r = idx / D, d = idx % D;
        int token = seq.token0 + item.tile0 + r / group, head = kv_head * group + r % group;
        out[((size_t)token * num_heads + head) * D + d] = f_to_bf16(o_s[idx] / l_s[r]);
    }
}

extern "C" int cuda_attention_tile_tokens(int num_heads, int num_kv_heads) {
    int group = num_heads / num_kv_heads;
    return group >= TILE_ROWS ? 1 : TILE_ROWS / group;
}

template <int DL>
static int launch(uint16_t *out, const uint16_t *q, const uint16_t *k_cache, const uint16_t *v_cache,
                  const CudaAttnSeq *seqs, const CudaAttnItem *items, int num_items,
                  const int32_t *block_tables, int num_heads, int num_kv_heads, int block_size,
                  cudaStream_t stream, Error *err) {
    const int D = DL * WARP;
    size_t shared = sizeof(float) * ((size_t)TILE_ROWS * D + ATTN_WARPS * TILE_ROWS * WARP + 2 * TILE_ROWS);
    if (shared > 48 * 1024)
        CUDA_TRY(cudaFuncSetAttribute(paged_attention_kernel<DL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)shared),
                 "raising the attention kernel's shared memory", err);
    dim3 grid((unsigned)num_items, (unsigned)num_kv_heads);
    paged_attention_kernel<DL><<<grid, ATTN_WARPS * WARP, shared, stream>>>(
        out, q, k_cache, v_cache, seqs, items, block_tables, num_heads, num_kv_heads, block_size,
        1.0f / sqrtf((float)D));
    CUDA_LAUNCHED("the attention kernel", err);
    return 0;
}

extern "C" int cuda_attention(uint16_t *out, const uint16_t *q, const uint16_t *k_cache,
                              const uint16_t *v_cache, const CudaAttnSeq *seqs,
                              const CudaAttnItem *items, int num_items, const int32_t *block_tables,
                              int num_heads, int num_kv_heads, int head_dim, int block_size,
                              CudaStream stream, Error *err) {
    if (cuda_kernels_check_shape(num_heads, num_kv_heads, head_dim, err)) return -1;
    if (num_items <= 0) return 0;
    cudaStream_t s = (cudaStream_t)stream;
    switch (head_dim) {
    case 64:
        return launch<2>(out, q, k_cache, v_cache, seqs, items, num_items, block_tables, num_heads,
                         num_kv_heads, block_size, s, err);
    case 128:
        return launch<4>(out, q, k_cache, v_cache, seqs, items, num_items, block_tables, num_heads,
                         num_kv_heads, block_size, s, err);
    default:
        return launch<8>(out, q, k_cache, v_cache, seqs, items, num_items, block_tables, num_heads,
                         num_kv_heads, block_size, s, err);
    }
}
