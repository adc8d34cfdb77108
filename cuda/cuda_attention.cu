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
 * Decode is the same kernel with one token per item. With a few sequences,
 * one block per (sequence, KV head) would leave most SMs idle while each
 * block walks a long context, so decode steps may split the context
 * (flash-decoding): the grid's third dimension cuts every sequence's keys
 * into num_splits equal ranges (multiples of 32), each block writes its
 * unnormalised output with its running max and sum, and a merge kernel
 * combines the splits. The split count is fixed per launch and the ranges
 * are derived on the GPU from each sequence's length, so the launch shape
 * does not depend on the lengths and the decode step can be a CUDA graph.
 *
 * The runner's decode steps now use cuda_decode_attention.cu (16-byte row
 * loads, several keys in flight, a fused split merge: 2-6x this kernel on
 * an H200) and its prompt steps cuda_prefill_attention.cu; this kernel
 * stays as the previous decode path for A/B (NANOVLLM_CUDA_LEGACY=attention)
 * and as the general reference the CUDA tests hold the others to.
 */
#include <math.h>

#include "cuda_bf16.h"
#include "cuda_check.h"
#include "cuda_kernels.h"

#define WARP 32
#define ATTN_WARPS 4
#define TILE_ROWS 16 /* query rows (tokens x group heads) per block */
#define MAX_SPLITS 16
#define MIN_KEYS_PER_SPLIT 256

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
                       float scale, int num_splits, float *part_o, float *part_ml) {
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
    int key_begin = 0, key_end = num_keys;
    if (num_splits > 1) { /* this block's share of the keys, in whole chunks */
        int per = ((num_keys + num_splits - 1) / num_splits + WARP - 1) / WARP * WARP;
        key_begin = min(num_keys, (int)blockIdx.z * per);
        key_end = min(num_keys, key_begin + per);
    }

    /* row r: token r / group of the tile, query head kv_head * group + r % group */
    for (int idx = threadIdx.x; idx < rows * D; idx += blockDim.x) {
        int r = idx / D, d = idx % D;
        int token = seq.token0 + item.tile0 + r / group, head = kv_head * group + r % group;
        q_s[idx] = bf16_bits_to_float(q[((size_t)token * num_heads + head) * D + d]) * scale;
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

    for (int chunk0 = key_begin + warp * WARP; chunk0 < key_end; chunk0 += ATTN_WARPS * WARP) {
        const int key = chunk0 + lane;
        const bool valid = key < key_end;
        size_t slot = 0;
        float s[TILE_ROWS];
#pragma unroll
        for (int r = 0; r < TILE_ROWS; r++) s[r] = 0.0f;
        if (valid) {
            slot = (size_t)table[key / block_size] * block_size + key % block_size;
            const uint16_t *k_row = k_cache + (slot * num_kv_heads + kv_head) * D;
            for (int d0 = 0; d0 < D; d0 += 8) {
                uint4 raw = *reinterpret_cast<const uint4 *>(k_row + d0);
                float k8[8];
                widen8(raw, k8);
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
        int keys_here = key_end - chunk0 < WARP ? key_end - chunk0 : WARP;
        for (int j = 0; j < keys_here; j++) {
            size_t slot_j = __shfl_sync(0xffffffffu, slot, j);
            const uint16_t *v_row = v_cache + (slot_j * num_kv_heads + kv_head) * D;
            float v[DL];
#pragma unroll
            for (int i = 0; i < DL; i++) v[i] = bf16_bits_to_float(v_row[lane + i * WARP]);
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
                    __syncwarp();
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
    if (num_splits > 1) { /* unnormalised, with max and sum, for merge_splits_kernel */
        size_t part = ((size_t)blockIdx.x * gridDim.y + kv_head) * num_splits + blockIdx.z;
        for (int idx = threadIdx.x; idx < rows * D; idx += blockDim.x)
            part_o[part * TILE_ROWS * D + idx] = o_s[idx];
        for (int r = threadIdx.x; r < rows; r += blockDim.x) {
            part_ml[(part * TILE_ROWS + r) * 2] = m_s[r];
            part_ml[(part * TILE_ROWS + r) * 2 + 1] = l_s[r];
        }
        return;
    }
    for (int idx = threadIdx.x; idx < rows * D; idx += blockDim.x) {
        int r = idx / D, d = idx % D;
        int token = seq.token0 + item.tile0 + r / group, head = kv_head * group + r % group;
        out[((size_t)token * num_heads + head) * D + d] = float_to_bf16_bits(o_s[idx] / l_s[r]);
    }
}

/* Combines the splits of one (item, KV head): each split's output scaled by
 * exp(its max - the overall max), over the sum scaled alike. A split that
 * got no keys has max -inf and sum 0 and drops out. */
__global__ void merge_splits_kernel(uint16_t *out, const float *part_o, const float *part_ml,
                                    const CudaAttnSeq *seqs, const CudaAttnItem *items, int num_heads,
                                    int head_dim, int num_splits) {
    const CudaAttnItem item = items[blockIdx.x];
    const CudaAttnSeq seq = seqs[item.seq];
    const int kv_head = blockIdx.y, group = num_heads / gridDim.y, D = head_dim;
    const int rows = item.tile_len * group;
    const size_t part0 = ((size_t)blockIdx.x * gridDim.y + kv_head) * num_splits;
    for (int idx = threadIdx.x; idx < rows * D; idx += blockDim.x) {
        int r = idx / D, d = idx % D;
        float m = -INFINITY;
        for (int s = 0; s < num_splits; s++) m = fmaxf(m, part_ml[((part0 + s) * TILE_ROWS + r) * 2]);
        float num = 0.0f, den = 0.0f;
        for (int s = 0; s < num_splits; s++) {
            const float *ml = part_ml + ((part0 + s) * TILE_ROWS + r) * 2;
            float w = exp_diff(ml[0], m);
            num += w * part_o[(part0 + s) * TILE_ROWS * D + idx];
            den += w * ml[1];
        }
        int token = seq.token0 + item.tile0 + r / group, head = kv_head * group + r % group;
        out[((size_t)token * num_heads + head) * D + d] = float_to_bf16_bits(num / den);
    }
}

extern "C" int cuda_attention_max_splits(void) { return MAX_SPLITS; }

extern "C" size_t cuda_attention_split_workspace_bytes(int head_dim, int max_split_blocks) {
    return sizeof(float) * (size_t)max_split_blocks * TILE_ROWS * ((size_t)head_dim + 2);
}

extern "C" int cuda_attention_choose_splits(int num_items, int num_kv_heads, int max_keys,
                                            int num_sms, int max_split_blocks) {
    int blocks = num_items * num_kv_heads;
    if (blocks <= 0) return 1;
    int splits = (2 * num_sms + blocks - 1) / blocks; /* two waves of blocks */
    int by_keys = (max_keys + MIN_KEYS_PER_SPLIT - 1) / MIN_KEYS_PER_SPLIT;
    if (splits > by_keys) splits = by_keys;
    if (splits > MAX_SPLITS) splits = MAX_SPLITS;
    if (splits > max_split_blocks / blocks) splits = max_split_blocks / blocks;
    return splits < 1 ? 1 : splits;
}

extern "C" int cuda_attention_tile_tokens(int num_heads, int num_kv_heads) {
    int group = num_heads / num_kv_heads;
    return group >= TILE_ROWS ? 1 : TILE_ROWS / group;
}

template <int DL>
static int launch(uint16_t *out, const uint16_t *q, const uint16_t *k_cache, const uint16_t *v_cache,
                  const CudaAttnSeq *seqs, const CudaAttnItem *items, int num_items,
                  const int32_t *block_tables, int num_heads, int num_kv_heads, int block_size,
                  int num_splits, float *split_workspace, cudaStream_t stream, Error *err) {
    const int D = DL * WARP;
    size_t shared = sizeof(float) * ((size_t)TILE_ROWS * D + ATTN_WARPS * TILE_ROWS * WARP + 2 * TILE_ROWS);
    /* Once, in the warm-up before any graph capture: raise the shared-memory
     * limit, and load the merge kernel (warm-up never splits) so that lazy
     * module loading never has to happen inside a capture. */
    static bool prepared = false;
    if (!prepared) {
        if (shared > 48 * 1024)
            CUDA_TRY(cudaFuncSetAttribute(paged_attention_kernel<DL>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared),
                     "raising the attention kernel's shared memory", err);
        cudaFuncAttributes attributes;
        CUDA_TRY(cudaFuncGetAttributes(&attributes, merge_splits_kernel), "loading the attention merge kernel",
                 err);
        prepared = true;
    }
    float *part_o = split_workspace;
    float *part_ml = part_o ? part_o + (size_t)num_items * num_kv_heads * num_splits * TILE_ROWS * D : NULL;
    dim3 grid((unsigned)num_items, (unsigned)num_kv_heads, (unsigned)num_splits);
    paged_attention_kernel<DL><<<grid, ATTN_WARPS * WARP, shared, stream>>>(
        out, q, k_cache, v_cache, seqs, items, block_tables, num_heads, num_kv_heads, block_size,
        1.0f / sqrtf((float)D), num_splits, part_o, part_ml);
    CUDA_LAUNCHED("the attention kernel", err);
    if (num_splits > 1) {
        merge_splits_kernel<<<dim3((unsigned)num_items, (unsigned)num_kv_heads), 128, 0, stream>>>(
            out, part_o, part_ml, seqs, items, num_heads, D, num_splits);
        CUDA_LAUNCHED("the attention merge kernel", err);
    }
    return 0;
}

extern "C" int cuda_attention(uint16_t *out, const uint16_t *q, const uint16_t *k_cache,
                              const uint16_t *v_cache, const CudaAttnSeq *seqs,
                              const CudaAttnItem *items, int num_items, const int32_t *block_tables,
                              int num_heads, int num_kv_heads, int head_dim, int block_size,
                              int num_splits, float *split_workspace, CudaStream stream, Error *err) {
    if (cuda_kernels_check_shape(num_heads, num_kv_heads, head_dim, err)) return -1;
    if (num_items <= 0) return 0;
    if (num_splits < 1 || num_splits > MAX_SPLITS || (num_splits > 1 && !split_workspace))
        return error_set(err, "attention: %d splits (1..%d, with a workspace)", num_splits, MAX_SPLITS);
    cudaStream_t s = (cudaStream_t)stream;
    switch (head_dim) {
    case 64:
        return launch<2>(out, q, k_cache, v_cache, seqs, items, num_items, block_tables, num_heads,
                         num_kv_heads, block_size, num_splits, split_workspace, s, err);
    case 128:
        return launch<4>(out, q, k_cache, v_cache, seqs, items, num_items, block_tables, num_heads,
                         num_kv_heads, block_size, num_splits, split_workspace, s, err);
    default:
        return launch<8>(out, q, k_cache, v_cache, seqs, items, num_items, block_tables, num_heads,
                         num_kv_heads, block_size, num_splits, split_workspace, s, err);
    }
}
