/*
 * cuda_decode_attention_mma.cu - decode attention over an fp8 KV cache on
 * the tensor cores (see cuda_kernels.h's cuda_decode_attention_fp8; the
 * fragment arithmetic is cuda_decode_mma_plan.h's).
 *
 * The FMA kernel (cuda_decode_attention.cu) widens every e4m3 value to
 * float32 and spends an FMA per query head on it: ~3.5 instructions a byte,
 * so on an H200 it read an fp8 cache at 67% of the copy bandwidth where the
 * bf16 cache's reads run at ~100% (cuda/PERFORMANCE.md, v6). Here the bytes
 * go to the tensor cores as they are:
 *  - a warp loads the K and V rows of 32 keys (two groups of 16) with
 *    16-byte loads before using any: whole 64- and 128-byte row pieces per
 *    instruction, 8 KB in flight a warp at head_dim 128;
 *  - one cvt.rn.f16x2.e4m3x2 turns two K bytes into B's register of
 *    S = Q K^T (exact: every e4m3 is an f16); V's pairs of rows take a byte
 *    permute first; ~1.2 instructions a byte in all;
 *  - mma.m16n8k16 (f16 in, float32 accumulate) with the block's query heads
 *    as A's rows 0-7 and rows 8-15 zero (their results are never kept);
 *  - the online softmax on S's accumulators, the four lanes of a head
 *    exchanging the running max by shuffles, P rounded to f16 straight into
 *    A's registers for O += P V (the flash kernel's pattern);
 *  - the warps and the splits merge as the FMA kernel's do
 *    (cuda_decode_block.h): the same grid, workspace and counters.
 * Rounding: q goes to f16 times a power of two chosen from the block's
 * largest |q| (exact for bf16 q: 8 significant bits in f16's 11, no
 * overflow whatever q's range), the power undone on S in float32; P (in
 * [0, 1]) is rounded to f16, within 2^-11 of itself, so the output is
 * within 2^-11 of max |v| of the float32 kernel's on top of the bf16
 * rounding both share. sm_89 and newer (the e4m3 conversion); the binary
 * built for sm_80 has an empty kernel that the host never launches
 * (cuda_decode_attention_fp8_tensor_cores asks the loaded binary's version).
 */
#include <math.h>

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <type_traits>

#include "cuda_check.h"
#include "cuda_decode_block.h"
#include "cuda_decode_mma_plan.h"
#include "cuda_pdl.h"
#include "cuda_variants.h"

#define WARP 32

/* d (row gid's two columns) += a b, m16n8k16, f16 in, float32 accumulate;
 * A's rows 8-15 (registers 1 and 3) zero, C's for them zero and dropped. */
__device__ __forceinline__ void mma_f16_rows0_7(float d[2], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
    float c[4] = {d[0], d[1], 0.0f, 0.0f};
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %5}, {%7, %8}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(0u), "r"(a2), "r"(b0), "r"(b1));
    d[0] = c[0];
    d[1] = c[1];
}

__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
    const __half2_raw r = __half2_raw(__floats2half2_rn(lo, hi));
    return (uint32_t)r.x | (uint32_t)r.y << 16;
}

/* Two e4m3 bytes (the low one first) as an f16 pair, exactly. */
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(two_bytes & 0xffffu), __NV_E4M3);
    return (uint32_t)r.x | (uint32_t)r.y << 16;
#else
    (void)two_bytes; /* no such conversion: the kernel below is empty there */
    return 0u;
#endif
}

__device__ __forceinline__ uint32_t word_of(const uint4 &r, int w) {
    return w == 0 ? r.x : w == 1 ? r.y : w == 2 ? r.z : r.w;
}
__device__ __forceinline__ uint32_t word_of(const uint2 &r, int w) { return w == 0 ? r.x : r.y; }
__device__ __forceinline__ void zero_raw(uint4 &r) { r = make_uint4(0, 0, 0, 0); }
__device__ __forceinline__ void zero_raw(uint2 &r) { r = make_uint2(0, 0); }

/* D: head_dim (64 or 128); HB: query heads per block (heads_here of them
 * real), at most 8. Arguments as decode_attention_kernel's. */
template <int D, int HB>
__global__ void __launch_bounds__(DECODE_THREADS, 2)
decode_attention_mma_kernel(uint16_t *__restrict__ out, const uint16_t *__restrict__ q,
                            const uint8_t *__restrict__ k_cache, const uint8_t *__restrict__ v_cache,
                            const CudaAttnSeq *__restrict__ seqs, const CudaAttnItem *__restrict__ items,
                            const int32_t *__restrict__ block_tables, int num_heads, int num_kv_heads,
                            int block_size, int block_shift, float q_scale, int num_splits,
                            float *__restrict__ part, int *__restrict__ counters, float k_scale, float v_scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    static_assert(HB <= 8 && (D == 64 || D == 128), "rows 0-7 of A, D / 64 K loads and D / 8 V bytes a lane");
    constexpr int KSTEPS = D / 16, NTILES = D / 8, KLOADS = D / 64, VBYTES = D / 8;
    using VRaw = typename std::conditional<VBYTES == 16, uint4, uint2>::type;
    __shared__ DecodeShared<D, HB> sh;

    pdl_trigger(); /* the o_proj gemv after it may start and load its weights (cuda_pdl.h) */
    const DecodeBlock b = decode_block<HB>(seqs, items, num_heads, num_kv_heads, num_splits);
    if (b.split >= b.used) return; /* a short context: this split has no keys */
    const int key_end = b.key_end;
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, gid = lane / 4;

    /* q of head gid at the lane's K dimensions (dmma_k_dim), as A's f16
     * pairs: word s of chunk c holds k-step 4 c + s's four dimensions. */
    float qf[KSTEPS][4];
    float amax = 0.0f;
#pragma unroll
    for (int c = 0; c < KLOADS; c++) {
        float f[16] = {};
        if (gid < b.heads_here) {
            const uint16_t *qh = q + ((size_t)b.token * num_heads + b.head0 + gid) * D + dmma_k_offset(lane, c);
            widen8(*reinterpret_cast<const uint4 *>(qh), f);
            widen8(*reinterpret_cast<const uint4 *>(qh + 8), f + 8);
        }
#pragma unroll
        for (int j = 0; j < 16; j++) {
            qf[4 * c + j / 4][j % 4] = f[j];
            amax = fmaxf(amax, fabsf(f[j]));
        }
    }
#pragma unroll
    for (int o = WARP / 2; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    int q_exp = 0; /* the block's largest |q| times 2^q_exp is in [2^14, 2^15): f16 holds it */
    if (amax > 0.0f) {
        frexpf(amax, &q_exp);
        q_exp = min(15 - q_exp, 100);
    }
    uint32_t qa[KSTEPS][2];
#pragma unroll
    for (int s = 0; s < KSTEPS; s++) {
        qa[s][0] = pack_f16x2(ldexpf(qf[s][0], q_exp), ldexpf(qf[s][1], q_exp));
        qa[s][1] = pack_f16x2(ldexpf(qf[s][2], q_exp), ldexpf(qf[s][3], q_exp));
    }
    const float s_scale = ldexpf(q_scale * k_scale, -q_exp); /* FP8_UNIT is 1 here */

    const int32_t *table = block_tables + b.table0;
    const size_t row_stride = (size_t)num_kv_heads * D;
    const uint8_t *k_head = k_cache + (size_t)b.kv_head * D, *v_head = v_cache + (size_t)b.kv_head * D;
    const bool group_in_one_block = block_size % DMMA_GROUP_KEYS == 0; /* groups start at multiples of 16 */
    auto slot_of = [&](int key) -> size_t {
        const int block = block_shift >= 0 ? key >> block_shift : key / block_size;
        return (size_t)table[block] * block_size + (key - block * block_size);
    };

    float m = -INFINITY, l = 0.0f; /* head gid's running max (base 2) and this lane's share of its sum */
    float o[NTILES][2];
#pragma unroll
    for (int nt = 0; nt < NTILES; nt++) o[nt][0] = o[nt][1] = 0.0f;

    for (int pass0 = b.key_begin; dmma_group_key0(pass0, warp, 0) < key_end;
         pass0 += DECODE_WARPS * DMMA_WARP_KEYS) {
        uint4 kr[DMMA_GROUPS][2][KLOADS];
        VRaw vr[DMMA_GROUPS][4];
#pragma unroll
        for (int g = 0; g < DMMA_GROUPS; g++) {
            const int key0 = dmma_group_key0(pass0, warp, g);
            const size_t slot0 = group_in_one_block && key0 < key_end ? slot_of(key0) : 0;
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                const int key = key0 + dmma_k_key(lane, nt);
#pragma unroll
                for (int c = 0; c < KLOADS; c++) zero_raw(kr[g][nt][c]);
                if (key < key_end) {
                    const size_t slot = group_in_one_block ? slot0 + (key - key0) : slot_of(key);
                    const uint8_t *row = k_head + slot * row_stride;
#pragma unroll
                    for (int c = 0; c < KLOADS; c++)
                        kr[g][nt][c] = __ldg(reinterpret_cast<const uint4 *>(row + dmma_k_offset(lane, c)));
                }
            }
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int key = key0 + dmma_v_key(lane, r);
                zero_raw(vr[g][r]); /* past the end: zeros, never a NaN byte times p = 0 */
                if (key < key_end) {
                    const size_t slot = group_in_one_block ? slot0 + (key - key0) : slot_of(key);
                    vr[g][r] = __ldg(reinterpret_cast<const VRaw *>(v_head + slot * row_stride + dmma_v_offset(D, lane)));
                }
            }
        }

        /* S of the pass's keys for head gid: s[g][nt][e] is key
         * dmma_group_key0 + 8 nt + 2 tig + e (flash_c_col). */
        float s[DMMA_GROUPS][2][2];
        float m_new = m;
#pragma unroll
        for (int g = 0; g < DMMA_GROUPS; g++) {
            const int key0 = dmma_group_key0(pass0, warp, g);
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                float acc[2] = {0.0f, 0.0f};
#pragma unroll
                for (int ks = 0; ks < KSTEPS; ks++) {
                    const uint32_t w = word_of(kr[g][nt][ks / 4], ks % 4);
                    mma_f16_rows0_7(acc, qa[ks][0], qa[ks][1], e4m3x2_to_f16x2(w), e4m3x2_to_f16x2(w >> 16));
                }
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int key = key0 + 8 * nt + 2 * (lane % 4) + e;
                    s[g][nt][e] = key < key_end ? acc[e] * s_scale : -INFINITY;
                    m_new = fmaxf(m_new, s[g][nt][e]);
                }
            }
        }
        m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 1));
        m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 2));
        /* the pass's first key is in range, so m_new is finite from here */
        if (m_new > m) {
            const float correction = scale_from(m, m_new);
            l *= correction;
#pragma unroll
            for (int nt = 0; nt < NTILES; nt++) o[nt][0] *= correction, o[nt][1] *= correction;
            m = m_new;
        }

#pragma unroll
        for (int g = 0; g < DMMA_GROUPS; g++) {
            float p[2][2];
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    p[nt][e] = scale_from(s[g][nt][e], m);
                    l += p[nt][e];
                }
            /* S's n-tiles 0 and 1 are A's registers 0 and 2 of the group's k-step */
            const uint32_t a0 = pack_f16x2(p[0][0], p[0][1]), a2 = pack_f16x2(p[1][0], p[1][1]);
#pragma unroll
            for (int w = 0; w < VBYTES / 4; w++) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint32_t ab = __byte_perm(word_of(vr[g][0], w), word_of(vr[g][1], w), dmma_pair_selector(h));
                    const uint32_t cd = __byte_perm(word_of(vr[g][2], w), word_of(vr[g][3], w), dmma_pair_selector(h));
                    mma_f16_rows0_7(o[4 * w + 2 * h], a0, a2, e4m3x2_to_f16x2(ab), e4m3x2_to_f16x2(cd));
                    mma_f16_rows0_7(o[4 * w + 2 * h + 1], a0, a2, e4m3x2_to_f16x2(ab >> 16),
                                    e4m3x2_to_f16x2(cd >> 16));
                }
            }
        }
    }

    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (gid < b.heads_here) {
        /* V's scale, once: the merges are linear in the outputs */
#pragma unroll
        for (int nt = 0; nt < NTILES; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) sh.warp_o[warp][gid][dmma_o_dim(D, lane, nt, e)] = o[nt][e] * v_scale;
        if (lane % 4 == 0) {
            sh.warp_m[warp][gid] = m;
            sh.warp_l[warp][gid] = l;
        }
    }
    decode_finish<D, HB>(sh, b, out, part, counters, num_heads, num_splits);
#endif
}

template <int D, int HB>
static int launch(const DecodeArgs<uint8_t> &a, Error *err) {
    const int group = a.num_heads / a.num_kv_heads, chunks = (group + HB - 1) / HB;
    const float q_scale = 1.4426950408889634f / sqrtf((float)D); /* log2(e) / sqrt(D): softmax in base 2 */
    dim3 grid((unsigned)a.num_items, (unsigned)(a.num_kv_heads * chunks), (unsigned)a.num_splits);
    decode_attention_mma_kernel<D, HB><<<grid, DECODE_THREADS, 0, a.stream>>>(
        a.out, a.q, a.k_cache, a.v_cache, a.seqs, a.items, a.block_tables, a.num_heads, a.num_kv_heads, a.block_size,
        decode_block_shift(a.block_size), q_scale, a.num_splits, a.part, a.counters, a.k_scale, a.v_scale);
    CUDA_LAUNCHED("the fp8 decode attention kernel (tensor cores)", err);
    return 0;
}

template <int D>
static int launch_heads(const DecodeArgs<uint8_t> &a, Error *err) {
    switch (decode_heads_per_block(a.num_heads / a.num_kv_heads)) {
    case 1: return launch<D, 1>(a, err);
    case 2: return launch<D, 2>(a, err);
    case 4: return launch<D, 4>(a, err);
    default: return launch<D, 8>(a, err);
    }
}

int decode_attention_fp8_mma(const DecodeArgs<uint8_t> &a, int head_dim, Error *err) {
    if (!dmma_supports(head_dim)) return error_set(err, "fp8 decode attention on the tensor cores: head_dim %d", head_dim);
    return head_dim == 64 ? launch_heads<64>(a, err) : launch_heads<128>(a, err);
}

/* The binary the driver loaded for this GPU: built for sm_80 (an sm_89 card
 * such as an L40S runs that one) the kernel is empty. Asked once. */
extern "C" bool cuda_decode_attention_fp8_tensor_cores(int head_dim) {
    static int binary_version = -1;
    if (!dmma_supports(head_dim) || cuda_variant_legacy("fp8decode")) return false;
    if (binary_version < 0) {
        cudaFuncAttributes attr;
        if (cudaFuncGetAttributes(&attr, decode_attention_mma_kernel<128, 2>) == cudaSuccess) {
            binary_version = attr.binaryVersion;
        } else {
            (void)cudaGetLastError(); /* no binary for this GPU: the FMA kernel's launch reports it */
            binary_version = 0;
        }
    }
    return binary_version >= 89;
}
