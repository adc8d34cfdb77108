/*
 * cuda_decode_block.h - what both decode attention kernels
 * (cuda_decode_attention.cu on FMAs, cuda_decode_attention_mma.cu on the
 * tensor cores) share: their launch arguments, which work a thread block
 * has (decode_block: its token, query heads and range of keys, by
 * cuda_decode_plan.h's split arithmetic) and how it ends (decode_finish).
 *
 * Each warp of a block leaves its partial output (unnormalised), running
 * max and sum per query head in DecodeShared; decode_finish merges the
 * warps, then either writes the bf16 output (one split) or leaves the
 * block's partial in the split workspace and bumps a per-(sequence, head
 * chunk) counter: the block that finds itself last merges the splits and
 * puts the counter back to zero for the next launch (no second kernel).
 * Softmax is in base 2 throughout (q pre-scaled by log2(e) / sqrt(D)).
 */
#ifndef NANOVLLM_CUDA_DECODE_BLOCK_H
#define NANOVLLM_CUDA_DECODE_BLOCK_H

#include <math.h>

#include <type_traits>

#include "base/error.h"
#include "cuda_bf16.h"
#include "cuda_decode_plan.h"
#include "cuda_kernels.h"

#define DECODE_THREADS (DECODE_WARPS * 32)

/* One launch's arguments, whatever the cache's element. */
template <typename KV> struct DecodeArgs {
    uint16_t *out;
    const uint16_t *q;
    const KV *k_cache, *v_cache;
    const CudaAttnSeq *seqs;
    const CudaAttnItem *items;
    int num_items;
    const int32_t *block_tables;
    int num_heads, num_kv_heads, block_size, num_splits;
    float *part;
    int *counters;
    float k_scale, v_scale; /* fp8 only */
    cudaStream_t stream;
};

/* The kernel on the tensor cores (cuda_decode_attention_mma.cu), for an
 * fp8 cache (uint8_t) or a bf16 one (uint16_t), where
 * cuda_decode_attention_{fp8,bf16}_tensor_cores say so. */
template <typename KV> int decode_attention_mma(const DecodeArgs<KV> &a, int head_dim, Error *err);

/* The grid of a launch with HB query heads a block: items x (KV heads x
 * chunks of the group) x splits. */
template <typename KV> static inline dim3 decode_grid(const DecodeArgs<KV> &a, int hb) {
    const int group = a.num_heads / a.num_kv_heads, chunks = (group + hb - 1) / hb;
    return dim3((unsigned)a.num_items, (unsigned)(a.num_kv_heads * chunks), (unsigned)a.num_splits);
}

/* log2(e) / sqrt(D): q's scale for a softmax in base 2. */
static inline float decode_q_scale(int head_dim) { return 1.4426950408889634f / sqrtf((float)head_dim); }

/* launch(std::integral_constant<int, HB>()) for the block's head count
 * (decode_heads_per_block of the group). */
template <typename Launch> static inline int decode_for_heads(int group, Launch &&launch) {
    switch (decode_heads_per_block(group)) {
    case 1: return launch(std::integral_constant<int, 1>());
    case 2: return launch(std::integral_constant<int, 2>());
    case 4: return launch(std::integral_constant<int, 4>());
    default: return launch(std::integral_constant<int, 8>());
    }
}

/* log2(block_size) when a power of two, else -1 (a division per key). */
static inline int decode_block_shift(int block_size) {
    for (int b = 0; b < 31; b++)
        if (block_size == 1 << b) return b;
    return -1;
}

#ifdef __CUDACC__

/* exp2(x - max) for a running max that may still be -inf (nothing seen). */
__device__ __forceinline__ float scale_from(float x, float max) { return x == -INFINITY ? 0.0f : exp2f(x - max); }

template <int D, int HB> struct DecodeShared {
    float warp_o[DECODE_WARPS][HB][D];
    float warp_m[DECODE_WARPS][HB], warp_l[DECODE_WARPS][HB];
    int is_last;
    float split_w[DECODE_MAX_SPLITS][HB];
    float4 group_sum[DECODE_THREADS];
};

/* A block's work: blockIdx.x is the item (one new token), y the KV head
 * and chunk of HB of its query heads, z the split of its keys. */
struct DecodeBlock {
    int kv_head, head0, heads_here; /* heads [head0, head0 + heads_here) */
    int token, table0;              /* the token's row of q and out; its sequence's block table */
    int split, used;                /* used: splits with keys (split >= used: none here) */
    int key_begin, key_end;
};

template <int HB>
__device__ __forceinline__ DecodeBlock decode_block(const CudaAttnSeq *seqs, const CudaAttnItem *items, int num_heads,
                                                    int num_kv_heads, int num_splits) {
    DecodeBlock b;
    const int group = num_heads / num_kv_heads, chunks = gridDim.y / num_kv_heads;
    b.kv_head = blockIdx.y / chunks;
    b.head0 = b.kv_head * group + (blockIdx.y % chunks) * HB;
    b.heads_here = min(HB, b.kv_head * group + group - b.head0);
    const CudaAttnItem item = items[blockIdx.x];
    const CudaAttnSeq seq = seqs[item.seq];
    const int num_keys = seq.start_pos + item.tile0 + 1;
    b.token = seq.token0 + item.tile0;
    b.table0 = seq.table0;
    b.split = blockIdx.z;
    b.used = decode_splits_used(num_keys, num_splits);
    const int per = decode_split_keys(num_keys, num_splits);
    b.key_begin = b.split * per;
    b.key_end = min(num_keys, b.key_begin + per);
    return b;
}

/* Called by every thread of the block once its warps' partials are in sh
 * (before any barrier: this starts with one). */
template <int D, int HB>
__device__ void decode_finish(DecodeShared<D, HB> &sh, const DecodeBlock &b, uint16_t *out, float *part, int *counters,
                              int num_heads, int num_splits) {
    __syncthreads();
    /* The block's warps into one, then out (one split) or to the workspace. */
    const size_t pair = (size_t)blockIdx.x * gridDim.y + blockIdx.y;
    /* outputs, then (max, sum) pairs: float4-aligned */
    const size_t part_floats = (size_t)HB * D + (2 * HB + 3) / 4 * 4;
    float *mine = part + (pair * num_splits + b.split) * part_floats;
    for (int i = threadIdx.x; i < b.heads_here * D; i += DECODE_THREADS) {
        const int h = i / D, d = i % D;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < DECODE_WARPS; w++) mx = fmaxf(mx, sh.warp_m[w][h]);
        float o = 0.0f, sum = 0.0f;
#pragma unroll
        for (int w = 0; w < DECODE_WARPS; w++) {
            const float a = scale_from(sh.warp_m[w][h], mx);
            o += sh.warp_o[w][h][d] * a;
            sum += sh.warp_l[w][h] * a;
        }
        if (b.used == 1) {
            out[((size_t)b.token * num_heads + b.head0 + h) * D + d] = float_to_bf16_bits(o / sum);
        } else {
            mine[h * D + d] = o;
            if (d == 0) {
                mine[HB * D + 2 * h] = mx;
                mine[HB * D + 2 * h + 1] = sum;
            }
        }
    }
    if (b.used == 1) return;
    __threadfence(); /* the partial is visible before the counter says so */
    __syncthreads();
    if (threadIdx.x == 0) sh.is_last = atomicAdd(&counters[pair], 1) == b.used - 1;
    __syncthreads();
    if (!sh.is_last) return;
    __threadfence();

    /* The last block merges the splits. Each split's weight is exp2(its max -
     * the max) / the total sum, found by one warp per head; then every
     * thread sums float4s of the outputs over a share of the splits, several
     * loads in flight (a serial walk over 64 splits' partials in L2 would
     * cost more than the attention itself). */
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, used = b.used;
    const float *parts = part + pair * num_splits * part_floats;
    for (int h = warp; h < b.heads_here; h += DECODE_WARPS) {
        float mx = -INFINITY, sum = 0.0f;
        for (int z = lane; z < used; z += 32) mx = fmaxf(mx, __ldcg(parts + z * part_floats + HB * D + 2 * h));
        for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        for (int z = lane; z < used; z += 32) {
            const float *ml = parts + z * part_floats + HB * D + 2 * h;
            sum += __ldcg(ml + 1) * scale_from(__ldcg(ml), mx);
        }
        for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        for (int z = lane; z < used; z += 32)
            sh.split_w[z][h] = scale_from(__ldcg(parts + z * part_floats + HB * D + 2 * h), mx) / sum;
    }
    __syncthreads();
    const int n4 = b.heads_here * D / 4, groups = n4 < DECODE_THREADS ? DECODE_THREADS / n4 : 1;
    for (int i4 = threadIdx.x % n4; i4 < n4; i4 += (groups > 1 ? n4 : DECODE_THREADS)) {
        const int g = groups > 1 ? threadIdx.x / n4 : 0, h = i4 * 4 / D;
        float4 sum4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (g < groups) {
#pragma unroll 4
            for (int z = g; z < used; z += groups) {
                const float4 v = __ldcg(reinterpret_cast<const float4 *>(parts + z * part_floats) + i4);
                const float w = sh.split_w[z][h];
                sum4.x = fmaf(v.x, w, sum4.x);
                sum4.y = fmaf(v.y, w, sum4.y);
                sum4.z = fmaf(v.z, w, sum4.z);
                sum4.w = fmaf(v.w, w, sum4.w);
            }
        }
        if (groups > 1) { /* each thread has one i4: add the groups' sums */
            sh.group_sum[threadIdx.x] = sum4;
            __syncthreads();
            if (threadIdx.x >= n4) break;
            for (int k = 1; k < groups; k++) {
                const float4 o = sh.group_sum[k * n4 + i4];
                sum4.x += o.x, sum4.y += o.y, sum4.z += o.z, sum4.w += o.w;
            }
        }
        const int d0 = i4 * 4 % D;
        *reinterpret_cast<uint2 *>(out + ((size_t)b.token * num_heads + b.head0 + h) * D + d0) =
            pack_bf16x4(sum4);
    }
    if (threadIdx.x == 0) counters[pair] = 0;
}

#endif

#endif
