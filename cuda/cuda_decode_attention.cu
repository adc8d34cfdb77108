/*
 * cuda_decode_attention.cu - decode attention at the copy bandwidth (see
 * cuda_kernels.h; the work division is cuda_decode_plan.h's).
 *
 * A decode step reads every cached K and V byte of its sequences once and
 * does little arithmetic with them, so the kernel is built around the read:
 *  - a K or V row (head_dim bf16) is read by head_dim / 8 lanes with one
 *    16-byte load each, so every load instruction of a warp moves whole
 *    rows (512 bytes) and the L2 sectors it touches are used in full;
 *  - each lane holds its 8 dimensions of q for every query head of the
 *    block, so one K load serves the whole GQA group, and the score's sum
 *    over the row is a few shuffles inside the lane subgroup;
 *  - each lane issues the K and V loads of several keys before using any
 *    (decode_keys_per_lane), the online softmax (flash attention's running
 *    max and sum, in base 2: q is pre-scaled by log2(e) / sqrt(head_dim))
 *    then folds them in from registers;
 *  - the keys of a sequence are split over blocks so that a step fills the
 *    GPU whatever its batch (cuda_decode_attention_choose_splits), and the
 *    splits merge without a second kernel: each block leaves its partial
 *    output, max and sum in the workspace and bumps a per-(sequence, head)
 *    counter; the block that finds itself last merges them and puts the
 *    counter back to zero for the next launch.
 * The previous kernel (cuda_attention.cu, one lane per key reading its own
 * row) stays for A/B under NANOVLLM_CUDA_LEGACY=attention, and this one
 * without the next pass's loads in flight under NANOVLLM_CUDA_LEGACY=prefetch
 * (an fp8 cache's kernel always runs without them). With three or more
 * query heads a KV head (where this kernel's FMAs per value outrun the
 * bytes) both caches run on the tensor cores where
 * cuda_decode_attention_mma.cu serves the head size and the GPU;
 * NANOVLLM_CUDA_LEGACY=fp8decode / bf16decode keep them here. The block's
 * work and its end (warps and splits merged) are cuda_decode_block.h's,
 * shared with that one.
 */
#include <math.h>

#include "cuda_bf16.h"
#include "cuda_check.h"
#include "cuda_decode_block.h"
#include "cuda_kernels.h"
#include "cuda_kv_fp8.h"
#include "cuda_pdl.h"
#include "cuda_variants.h"

#define WARP 32
#define THREADS DECODE_THREADS

/* What a lane loads of a K or V row and how it widens it: 8 bf16 in 16
 * bytes; an fp8 cache 16 e4m3 in 16 bytes or 8 in 8 bytes
 * (decode_elems_per_lane), widened to e4m3 / FP8_UNIT (cuda_fp8_convert.h). */
template <typename KV, int EPL> struct KvLoad;
template <> struct KvLoad<uint16_t, 8> {
    using Raw = uint4;
    __device__ static void widen(const Raw raw, float f[8]) { widen8(raw, f); }
};
template <> struct KvLoad<uint8_t, 16> {
    using Raw = uint4;
    __device__ static void widen(const Raw raw, float f[16]) { fp8x16_to_float(raw, f); }
};
template <> struct KvLoad<uint8_t, 8> {
    using Raw = uint2;
    __device__ static void widen(const Raw raw, float f[8]) {
        fp8x4_to_float(raw.x, f);
        fp8x4_to_float(raw.y, f + 4);
    }
};

__device__ __forceinline__ void zero_raw(uint4 &r) { r = make_uint4(0, 0, 0, 0); }
__device__ __forceinline__ void zero_raw(uint2 &r) { r = make_uint2(0, 0); }

/* D: head_dim; HB: query heads per block (heads_here of them real); T: keys
 * per lane per pass; PREFETCH: the next pass's rows in flight during this
 * pass (32 more registers: not with eight heads, already at ~240); KV: the
 * cache's element, uint16_t (bf16) or uint8_t (fp8 e4m3: its values read
 * as e4m3 / FP8_UNIT, k_scale * FP8_UNIT folded into q's scale and v_scale
 * * FP8_UNIT into the output before the merges; the bf16 kernel ignores
 * both scales). EPL: the row's values one lane holds (decode_elems_per_lane).
 * block_shift: log2(block_size) when a power of two (a shift instead of an
 * integer division per key), else -1. part / counters: the split
 * workspace (num_splits > 1). */
template <int D, int HB, int T, bool PREFETCH, typename KV = uint16_t, int EPL = 8>
__global__ void __launch_bounds__(THREADS)
decode_attention_kernel(uint16_t *__restrict__ out, const uint16_t *__restrict__ q,
                        const KV *__restrict__ k_cache, const KV *__restrict__ v_cache,
                        const CudaAttnSeq *__restrict__ seqs, const CudaAttnItem *__restrict__ items,
                        const int32_t *__restrict__ block_tables, int num_heads, int num_kv_heads,
                        int block_size, int block_shift, float q_scale, int num_splits, float *__restrict__ part,
                        int *__restrict__ counters, float k_scale, float v_scale) {
    constexpr bool FP8 = sizeof(KV) == 1;
    using Load = KvLoad<KV, EPL>;
    using Raw = typename Load::Raw;
    constexpr int LPK = D / EPL;    /* lanes per key */
    constexpr int KPL = WARP / LPK; /* keys per warp load */
    constexpr int PASS = DECODE_WARPS * KPL * T;
    __shared__ DecodeShared<D, HB> sh;

    pdl_trigger(); /* the o_proj gemv after it may start and load its weights (cuda_pdl.h) */
    const DecodeBlock b = decode_block<HB>(seqs, items, num_heads, num_kv_heads, num_splits);
    if (b.split >= b.used) return; /* a short context: this split has no keys */
    const int kv_head = b.kv_head, head0 = b.head0, heads_here = b.heads_here, token = b.token;
    const int key_begin = b.key_begin, key_end = b.key_end;

    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    const int sub = decode_lane_sub(lane, LPK), dim0 = decode_lane_dim0(lane, LPK, EPL);
    const int32_t *table = block_tables + b.table0;
    const size_t row_stride = (size_t)num_kv_heads * D;
    const KV *k_head = k_cache + (size_t)kv_head * D + dim0, *v_head = v_cache + (size_t)kv_head * D + dim0;

    if constexpr (FP8) q_scale *= k_scale * FP8_UNIT;
    float qv[HB][EPL], acc[HB][EPL], m[HB], l[HB];
#pragma unroll
    for (int h = 0; h < HB; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
        float f[EPL] = {};
        if (h < heads_here) {
            const uint16_t *qh = q + ((size_t)token * num_heads + head0 + h) * D + dim0;
#pragma unroll
            for (int c = 0; c < EPL / 8; c++) widen8(*reinterpret_cast<const uint4 *>(qh + 8 * c), f + 8 * c);
        }
#pragma unroll
        for (int e = 0; e < EPL; e++) {
            qv[h][e] = f[e] * q_scale;
            acc[h][e] = 0.0f;
        }
    }

    /* The pass's K and V rows: with PREFETCH, the next pass's are loaded
     * before this pass's arithmetic, so the loads overlap it. */
    Raw kr[T], vr[T];
    unsigned ok = 0; /* bit t: the t-th key is in range */
    auto load_pass = [&](int pass0) {
        ok = 0;
#pragma unroll
        for (int t = 0; t < T; t++) {
            const int key = decode_key(pass0, t, warp, sub, KPL);
            zero_raw(kr[t]);
            zero_raw(vr[t]);
            if (key < key_end) {
                ok |= 1u << t;
                const int block = block_shift >= 0 ? key >> block_shift : key / block_size;
                const size_t slot = (size_t)table[block] * block_size + (key - block * block_size);
                kr[t] = __ldg(reinterpret_cast<const Raw *>(k_head + slot * row_stride));
                vr[t] = __ldg(reinterpret_cast<const Raw *>(v_head + slot * row_stride));
            }
        }
    };
    if (PREFETCH) load_pass(key_begin);
    for (int pass0 = key_begin; pass0 < key_end; pass0 += PASS) {
        Raw kc[T], vc[T];
        unsigned ok_here;
        if (PREFETCH) {
#pragma unroll
            for (int t = 0; t < T; t++) kc[t] = kr[t], vc[t] = vr[t];
            ok_here = ok;
            if (pass0 + PASS < key_end) load_pass(pass0 + PASS);
        } else {
            load_pass(pass0);
#pragma unroll
            for (int t = 0; t < T; t++) kc[t] = kr[t], vc[t] = vr[t];
            ok_here = ok;
        }
        float s[T][HB];
#pragma unroll
        for (int t = 0; t < T; t++) {
            float k8[EPL];
            Load::widen(kc[t], k8);
#pragma unroll
            for (int h = 0; h < HB; h++) {
                float d = 0.0f;
#pragma unroll
                for (int e = 0; e < EPL; e++) d = fmaf(qv[h][e], k8[e], d);
#pragma unroll
                for (int o = LPK / 2; o > 0; o /= 2) d += __shfl_xor_sync(0xffffffffu, d, o);
                s[t][h] = ok_here >> t & 1 ? d : -INFINITY;
            }
        }
        if constexpr (FP8) {
            /* The same arithmetic in the same order per head, key by key:
             * one key's V widened at a time (16 floats live, not T x 16). */
#pragma unroll
            for (int h = 0; h < HB; h++) {
                float m_new = m[h];
#pragma unroll
                for (int t = 0; t < T; t++) m_new = fmaxf(m_new, s[t][h]);
                if (m_new > m[h]) { /* never from -inf to -inf: nothing to rescale then */
                    const float correction = scale_from(m[h], m_new);
                    l[h] *= correction;
#pragma unroll
                    for (int e = 0; e < EPL; e++) acc[h][e] *= correction;
                    m[h] = m_new;
                }
            }
#pragma unroll
            for (int t = 0; t < T; t++) {
                float v8[EPL];
                Load::widen(vc[t], v8);
#pragma unroll
                for (int h = 0; h < HB; h++) {
                    if (m[h] == -INFINITY) continue; /* no key of this subgroup yet */
                    const float p = scale_from(s[t][h], m[h]);
                    l[h] += p;
#pragma unroll
                    for (int e = 0; e < EPL; e++) acc[h][e] = fmaf(p, v8[e], acc[h][e]);
                }
            }
        } else {
            float v8[T][EPL];
#pragma unroll
            for (int t = 0; t < T; t++) Load::widen(vc[t], v8[t]);
#pragma unroll
            for (int h = 0; h < HB; h++) {
                float m_new = m[h];
#pragma unroll
                for (int t = 0; t < T; t++) m_new = fmaxf(m_new, s[t][h]);
                if (m_new == -INFINITY) continue; /* no key of this subgroup yet */
                if (m_new > m[h]) { /* rescale only when the max grows: rarely, after the first keys */
                    const float correction = scale_from(m[h], m_new);
                    l[h] *= correction;
#pragma unroll
                    for (int e = 0; e < EPL; e++) acc[h][e] *= correction;
                    m[h] = m_new;
                }
#pragma unroll
                for (int t = 0; t < T; t++) {
                    const float p = scale_from(s[t][h], m_new);
                    l[h] += p;
#pragma unroll
                    for (int e = 0; e < EPL; e++) acc[h][e] = fmaf(p, v8[t][e], acc[h][e]);
                }
            }
        }
    }
    if constexpr (FP8) { /* V's scale, once: every merge below is linear in the outputs */
        const float v_mul = v_scale * FP8_UNIT;
#pragma unroll
        for (int h = 0; h < HB; h++)
#pragma unroll
            for (int e = 0; e < EPL; e++) acc[h][e] *= v_mul;
    }

    /* The warp's subgroups (same dimensions, different keys) into one. */
#pragma unroll
    for (int o = LPK; o < WARP; o *= 2) {
#pragma unroll
        for (int h = 0; h < HB; h++) {
            const float m_other = __shfl_xor_sync(0xffffffffu, m[h], o);
            const float l_other = __shfl_xor_sync(0xffffffffu, l[h], o);
            const float m_new = fmaxf(m[h], m_other);
            const float a = scale_from(m[h], m_new), b = scale_from(m_other, m_new);
#pragma unroll
            for (int e = 0; e < EPL; e++) acc[h][e] = acc[h][e] * a + __shfl_xor_sync(0xffffffffu, acc[h][e], o) * b;
            l[h] = l[h] * a + l_other * b;
            m[h] = m_new;
        }
    }
    if (sub == 0) {
#pragma unroll
        for (int h = 0; h < HB; h++) {
#pragma unroll
            for (int e = 0; e < EPL; e++) sh.warp_o[warp][h][dim0 + e] = acc[h][e];
            if (lane == 0) {
                sh.warp_m[warp][h] = m[h];
                sh.warp_l[warp][h] = l[h];
            }
        }
    }
    decode_finish<D, HB>(sh, b, out, part, counters, num_heads, num_splits);
}

template <int D, int HB, typename KV>
static int launch(const DecodeArgs<KV> &a, Error *err) {
    constexpr int EPL = sizeof(KV) == 1 && HB <= 2 ? 16 : 8; /* decode_elems_per_lane, as a constant */
    if (decode_elems_per_lane((int)sizeof(KV), HB) != EPL)
        return error_set(err, "decode attention: elements per lane out of step");
    const float q_scale = decode_q_scale(D);
    constexpr int T = 4; /* decode_keys_per_lane, as a constant */
    if (decode_keys_per_lane() != T) return error_set(err, "decode attention: keys per lane out of step");
    const dim3 grid = decode_grid(a, HB);
    const int block_shift = decode_block_shift(a.block_size);
    /* the next pass's loads in flight pay for bf16 rows only: an fp8 cache's
     * kernel ran 1-20% slower with them on an H200 (cuda/PERFORMANCE_HISTORY.md, v6) */
    if (HB <= 4 && sizeof(KV) == 2 && !cuda_variant_legacy("prefetch"))
        decode_attention_kernel<D, HB, T, (HB <= 4), KV, EPL><<<grid, THREADS, 0, a.stream>>>(
            a.out, a.q, a.k_cache, a.v_cache, a.seqs, a.items, a.block_tables, a.num_heads, a.num_kv_heads,
            a.block_size, block_shift, q_scale, a.num_splits, a.part, a.counters, a.k_scale, a.v_scale);
    else
        decode_attention_kernel<D, HB, T, false, KV, EPL><<<grid, THREADS, 0, a.stream>>>(
            a.out, a.q, a.k_cache, a.v_cache, a.seqs, a.items, a.block_tables, a.num_heads, a.num_kv_heads,
            a.block_size, block_shift, q_scale, a.num_splits, a.part, a.counters, a.k_scale, a.v_scale);
    CUDA_LAUNCHED("the decode attention kernel", err);
    return 0;
}

template <int D, typename KV> static int launch_heads(const DecodeArgs<KV> &a, Error *err) {
    return decode_for_heads(a.num_heads / a.num_kv_heads,
                            [&](auto hb) { return launch<D, decltype(hb)::value>(a, err); });
}

/* The checks and the head_dim dispatch of both entry points. */
template <typename KV>
static int decode_attention(const DecodeArgs<KV> &a, int head_dim, Error *err) {
    if (cuda_kernels_check_shape(a.num_heads, a.num_kv_heads, head_dim, err)) return -1;
    if (a.num_items <= 0) return 0;
    if (a.num_splits < 1 || a.num_splits > DECODE_MAX_SPLITS || (a.num_splits > 1 && (!a.part || !a.counters)))
        return error_set(err, "decode attention: %d splits (1..%d, with a workspace and counters)", a.num_splits,
                         DECODE_MAX_SPLITS);
    const int group = a.num_heads / a.num_kv_heads;
    const bool tensor_cores = sizeof(KV) == 1 ? cuda_decode_attention_fp8_tensor_cores(head_dim, group)
                                              : cuda_decode_attention_bf16_tensor_cores(head_dim, group);
    if (tensor_cores) return decode_attention_mma(a, head_dim, err);
    switch (head_dim) {
    case 64: return launch_heads<64>(a, err);
    case 128: return launch_heads<128>(a, err);
    default: return launch_heads<256>(a, err);
    }
}

extern "C" int cuda_decode_attention_blocks(int num_items, int num_heads, int num_kv_heads) {
    int group = num_heads / num_kv_heads, hb = decode_heads_per_block(group);
    return num_items * num_kv_heads * ((group + hb - 1) / hb);
}

extern "C" size_t cuda_decode_attention_counters_bytes(int max_split_blocks) {
    return sizeof(int) * (size_t)max_split_blocks;
}

extern "C" int cuda_decode_attention_choose_splits(int num_items, int num_heads, int num_kv_heads, int max_keys,
                                                   int num_sms, int max_split_blocks) {
    const int blocks = cuda_decode_attention_blocks(num_items, num_heads, num_kv_heads);
    if (blocks <= 0) return 1;
    /* About four blocks an SM (what 128 registers a thread leave resident),
     * rounded down: one more split than fits made a second, mostly empty
     * wave (16 x 2,048 keys: 640 blocks for 528 places, 56% of copy). */
    int splits = 4 * num_sms / blocks;
    const int by_keys = (max_keys + DECODE_MIN_SPLIT_KEYS - 1) / DECODE_MIN_SPLIT_KEYS;
    if (splits > by_keys) splits = by_keys;
    if (splits > DECODE_MAX_SPLITS) splits = DECODE_MAX_SPLITS;
    if (splits > max_split_blocks / blocks) splits = max_split_blocks / blocks;
    return splits < 1 ? 1 : splits;
}

extern "C" int cuda_decode_attention(uint16_t *out, const uint16_t *q, const uint16_t *k_cache,
                                     const uint16_t *v_cache, const CudaAttnSeq *seqs, const CudaAttnItem *items,
                                     int num_items, const int32_t *block_tables, int num_heads, int num_kv_heads,
                                     int head_dim, int block_size, int num_splits, float *split_workspace,
                                     int *split_counters, CudaStream stream, Error *err) {
    const DecodeArgs<uint16_t> a = {out,       q,          k_cache,      v_cache,         seqs,
                                    items,     num_items,  block_tables, num_heads,       num_kv_heads,
                                    block_size, num_splits, split_workspace, split_counters, 1.0f,
                                    1.0f,      (cudaStream_t)stream};
    return decode_attention(a, head_dim, err);
}

extern "C" int cuda_decode_attention_fp8(uint16_t *out, const uint16_t *q, const uint8_t *k_cache,
                                         const uint8_t *v_cache, const CudaAttnSeq *seqs, const CudaAttnItem *items,
                                         int num_items, const int32_t *block_tables, int num_heads, int num_kv_heads,
                                         int head_dim, int block_size, int num_splits, float *split_workspace,
                                         int *split_counters, float k_scale, float v_scale, CudaStream stream,
                                         Error *err) {
    const DecodeArgs<uint8_t> a = {out,       q,          k_cache,      v_cache,         seqs,
                                   items,     num_items,  block_tables, num_heads,       num_kv_heads,
                                   block_size, num_splits, split_workspace, split_counters, k_scale,
                                   v_scale,   (cudaStream_t)stream};
    return decode_attention(a, head_dim, err);
}
