/*
 * cuda_decode_attention_mma.cu - decode attention on the tensor cores, for
 * an fp8 KV cache and for a bf16 cache with wide head groups (see
 * cuda_kernels.h's cuda_decode_attention_*_tensor_cores; the fragment
 * arithmetic is cuda_decode_mma_plan.h's).
 *
 * The FMA kernel (cuda_decode_attention.cu) spends an FMA per value per
 * query head, and an fp8 value a conversion to float32 first: on an H200 it
 * read an fp8 cache at 67% of the copy bandwidth and, at eight heads a KV
 * head (Qwen3-30B-A3B, Qwen3-32B), a bf16 cache at ~30%, where two heads'
 * bf16 reads run at ~100% (cuda/PERFORMANCE_HISTORY.md, v3 and v6). Here the values
 * go to the tensor cores as they are:
 *  - a warp loads the K and V rows of 16 or 32 keys with 16-byte loads
 *    before using any: whole 64- and 128-byte row pieces per instruction,
 *    8 KB in flight a warp at head_dim 128;
 *  - fp8: one cvt.rn.f16x2.e4m3x2 turns two K bytes into B's register of
 *    S = Q K^T (exact: every e4m3 is an f16); V's pairs of rows take a byte
 *    permute first; ~1.2 instructions a byte in all. bf16: K's words are B's
 *    registers, V's pairs one permute;
 *  - mma.m16n8k16 (f16 or bf16 in, float32 accumulate) with the block's
 *    query heads as A's rows 0-7 and rows 8-15 zero (never kept);
 *  - the online softmax on S's accumulators, the four lanes of a head
 *    exchanging the running max by shuffles, P rounded straight into A's
 *    registers for O += P V (the flash kernel's pattern);
 *  - the warps and the splits merge as the FMA kernel's do
 *    (cuda_decode_block.h): the same grid, workspace and counters.
 * Rounding: fp8's q goes to f16 times a power of two chosen from the
 * block's largest |q| (exact for bf16 q: 8 significant bits in f16's 11
 * down to 2^-31 of the largest; no overflow whatever q's range), the power
 * undone on S in float32, and P (in [0, 1]) to f16, within 2^-11 of
 * itself; bf16's q is exact and P is rounded to bf16 (2^-9, as the flash
 * prefill kernel's). So the output is
 * within 2^-11 (2^-9) of max |v| of the FMA kernel's, on top of the bf16
 * rounding both share. The fp8 kernel needs sm_89 (the e4m3 conversion):
 * its sm_80 binary, which an sm_89 card runs, is empty and never launched
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

/* d (row gid's two columns) += a b, m16n8k16 with bf16 or f16 inputs,
 * float32 accumulate; A's rows 8-15 (registers 1 and 3) zero, C's for them
 * zero and dropped. */
#define MMA_ROWS0_7(in)                                                                                          \
    "mma.sync.aligned.m16n8k16.row.col.f32." in "." in ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %5}, {%7, %8}, " \
    "{%0, %1, %2, %3};"
template <bool BF16>
__device__ __forceinline__ void mma_rows0_7(float d[2], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
    float c[4] = {d[0], d[1], 0.0f, 0.0f};
    if constexpr (BF16)
        asm(MMA_ROWS0_7("bf16") : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(0u), "r"(a2), "r"(b0), "r"(b1));
    else
        asm(MMA_ROWS0_7("f16") : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
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
    (void)two_bytes; /* no such conversion: the fp8 kernel is empty there */
    return 0u;
#endif
}

/* What differs between the caches: B's registers from the loaded words, P's
 * packing and the mma's input type. kw: one key's words (chunk c at words
 * [4 BYTES c, 4 BYTES (c + 1))); va, vb: two rows' words. */
template <typename KV> struct MmaKv;
template <> struct MmaKv<uint8_t> { /* e4m3 bytes, f16 products */
    static constexpr int GROUPS = 2;
    __device__ static void k_regs(const uint32_t *kw, int s, uint32_t &b0, uint32_t &b1) {
        b0 = e4m3x2_to_f16x2(kw[s]);
        b1 = e4m3x2_to_f16x2(kw[s] >> 16);
    }
    __device__ static uint32_t v_reg(const uint32_t *va, const uint32_t *vb, int nt) {
        const uint32_t pair = __byte_perm(va[nt / 4], vb[nt / 4], dmma_pair_selector(nt / 2 % 2));
        return e4m3x2_to_f16x2(nt % 2 ? pair >> 16 : pair);
    }
    __device__ static uint32_t pack_p(float a, float b) { return pack_f16x2(a, b); }
    __device__ static void mma(float d[2], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
        mma_rows0_7<false>(d, a0, a2, b0, b1);
    }
};
template <> struct MmaKv<uint16_t> { /* bf16 values, bf16 products */
    static constexpr int GROUPS = 1;
    __device__ static void k_regs(const uint32_t *kw, int s, uint32_t &b0, uint32_t &b1) {
        b0 = kw[2 * s];
        b1 = kw[2 * s + 1];
    }
    __device__ static uint32_t v_reg(const uint32_t *va, const uint32_t *vb, int nt) {
        return __byte_perm(va[nt / 2], vb[nt / 2], dmma_bf16_pair_selector(nt % 2));
    }
    __device__ static uint32_t pack_p(float a, float b) { return pack_bf16x2(a, b); }
    __device__ static void mma(float d[2], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
        mma_rows0_7<true>(d, a0, a2, b0, b1);
    }
};

/* n words from p (16-byte aligned for n >= 4, else 8), or zeros. */
template <int N> __device__ __forceinline__ void load_words(uint32_t *w, const void *p, bool in_range) {
    static_assert(N == 2 || N % 4 == 0, "uint2 or uint4 loads");
    if constexpr (N == 2) {
        const uint2 v = in_range ? __ldg(reinterpret_cast<const uint2 *>(p)) : make_uint2(0, 0);
        w[0] = v.x, w[1] = v.y;
    } else {
#pragma unroll
        for (int i = 0; i < N / 4; i++) {
            const uint4 v = in_range ? __ldg(reinterpret_cast<const uint4 *>(p) + i) : make_uint4(0, 0, 0, 0);
            w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
        }
    }
}

/* D: head_dim (64 or 128); HB: query heads per block (heads_here of them
 * real), at most 8; KV: the cache's element, uint8_t (fp8 e4m3, read as
 * e4m3 itself: FP8_UNIT is 1 on sm_89) or uint16_t (bf16; the scales are
 * 1). Arguments as decode_attention_kernel's. */
template <int D, int HB, typename KV>
__global__ void __launch_bounds__(DECODE_THREADS, 2)
decode_attention_mma_kernel(uint16_t *__restrict__ out, const uint16_t *__restrict__ q,
                            const KV *__restrict__ k_cache, const KV *__restrict__ v_cache,
                            const CudaAttnSeq *__restrict__ seqs, const CudaAttnItem *__restrict__ items,
                            const int32_t *__restrict__ block_tables, int num_heads, int num_kv_heads,
                            int block_size, int block_shift, float q_scale, int num_splits,
                            float *__restrict__ part, int *__restrict__ counters, float k_scale, float v_scale) {
    constexpr bool FP8 = sizeof(KV) == 1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
    if constexpr (FP8) return; /* no e4m3 conversion: never launched (cuda_decode_attention_fp8_tensor_cores) */
#endif
    static_assert(HB <= 8 && (D == 64 || D == 128), "rows 0-7 of A; D / 64 chunks of K and D / 8 values of V a lane");
    using Kv = MmaKv<KV>;
    constexpr int KSTEPS = D / 16, NTILES = D / 8, CHUNKS = D / 64, GROUPS = Kv::GROUPS;
    constexpr int CHUNK_WORDS = 16 * (int)sizeof(KV) / 4, KWORDS = CHUNKS * CHUNK_WORDS;
    constexpr int VWORDS = D / 8 * (int)sizeof(KV) / 4;
    static_assert(GROUPS == dmma_groups((int)sizeof(KV)), "cuda_decode_mma_plan.h's group count");
    __shared__ DecodeShared<D, HB> sh;

    pdl_trigger(); /* the o_proj gemv after it may start and load its weights (cuda_pdl.h) */
    const DecodeBlock b = decode_block<HB>(seqs, items, num_heads, num_kv_heads, num_splits);
    if (b.split >= b.used) return; /* a short context: this split has no keys */
    const int key_end = b.key_end;
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, gid = lane / 4;

    /* q of head gid at the lane's K dimensions (dmma_k_dim) as bf16 words,
     * 8 a chunk: k-step s's dimensions are words 2 s and 2 s + 1. */
    uint32_t qw[CHUNKS * 8];
#pragma unroll
    for (int c = 0; c < CHUNKS; c++)
        load_words<8>(qw + 8 * c, q + ((size_t)b.token * num_heads + b.head0 + gid) * D + dmma_k_offset(lane, c),
                      gid < b.heads_here);
    uint32_t qa[KSTEPS][2]; /* A's registers 0 and 2 of k-step s */
    float s_scale = q_scale;
    if constexpr (FP8) { /* f16 q, times 2^q_exp (dmma_q_exponent), undone on S */
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < CHUNKS * 8; i++)
            amax = fmaxf(amax, fmaxf(fabsf(bf16_bits_to_float((uint16_t)qw[i])),
                                     fabsf(bf16_bits_to_float((uint16_t)(qw[i] >> 16)))));
#pragma unroll
        for (int o = WARP / 2; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const int q_exp = dmma_q_exponent(amax);
#pragma unroll
        for (int s = 0; s < KSTEPS; s++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t w = qw[2 * s + h];
                qa[s][h] = pack_f16x2(ldexpf(bf16_bits_to_float((uint16_t)w), q_exp),
                                      ldexpf(bf16_bits_to_float((uint16_t)(w >> 16)), q_exp));
            }
        s_scale = ldexpf(q_scale * k_scale, -q_exp);
    } else {
#pragma unroll
        for (int s = 0; s < KSTEPS; s++) qa[s][0] = qw[2 * s], qa[s][1] = qw[2 * s + 1];
    }

    const int32_t *table = block_tables + b.table0;
    const size_t row_stride = (size_t)num_kv_heads * D;
    const KV *k_head = k_cache + (size_t)b.kv_head * D, *v_head = v_cache + (size_t)b.kv_head * D;
    const bool group_in_one_block = block_size % DMMA_GROUP_KEYS == 0; /* groups start at multiples of 16 */
    auto slot_of = [&](int key) -> size_t {
        const int block = block_shift >= 0 ? key >> block_shift : key / block_size;
        return (size_t)table[block] * block_size + (key - block * block_size);
    };

    float m = -INFINITY, l = 0.0f; /* head gid's running max (base 2) and this lane's share of its sum */
    float o[NTILES][2];
#pragma unroll
    for (int nt = 0; nt < NTILES; nt++) o[nt][0] = o[nt][1] = 0.0f;

    for (int pass0 = b.key_begin; dmma_group_key0(pass0, warp, 0, sizeof(KV)) < key_end;
         pass0 += DECODE_WARPS * dmma_warp_keys(sizeof(KV))) {
        uint32_t kw[GROUPS][2][KWORDS], vw[GROUPS][4][VWORDS]; /* zeros past the end: never a NaN times p = 0 */
#pragma unroll
        for (int g = 0; g < GROUPS; g++) {
            const int key0 = dmma_group_key0(pass0, warp, g, sizeof(KV));
            const size_t slot0 = group_in_one_block && key0 < key_end ? slot_of(key0) : 0;
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                const int key = key0 + dmma_k_key(lane, nt);
                const bool in = key < key_end;
                const size_t slot = !in ? 0 : group_in_one_block ? slot0 + (key - key0) : slot_of(key);
#pragma unroll
                for (int c = 0; c < CHUNKS; c++)
                    load_words<CHUNK_WORDS>(kw[g][nt] + CHUNK_WORDS * c,
                                            k_head + slot * row_stride + dmma_k_offset(lane, c), in);
            }
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int key = key0 + dmma_v_key(lane, r);
                const bool in = key < key_end;
                const size_t slot = !in ? 0 : group_in_one_block ? slot0 + (key - key0) : slot_of(key);
                load_words<VWORDS>(vw[g][r], v_head + slot * row_stride + dmma_v_offset(D, lane), in);
            }
        }

        /* S of the pass's keys for head gid: s[g][nt][e] is key
         * dmma_group_key0 + 8 nt + 2 tig + e (flash_c_col). */
        float s[GROUPS][2][2];
        float m_new = m;
#pragma unroll
        for (int g = 0; g < GROUPS; g++) {
            const int key0 = dmma_group_key0(pass0, warp, g, sizeof(KV));
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                float acc[2] = {0.0f, 0.0f};
#pragma unroll
                for (int ks = 0; ks < KSTEPS; ks++) {
                    uint32_t b0, b1;
                    Kv::k_regs(kw[g][nt], ks, b0, b1);
                    Kv::mma(acc, qa[ks][0], qa[ks][1], b0, b1);
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
        for (int g = 0; g < GROUPS; g++) {
            float p[2][2];
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    p[nt][e] = scale_from(s[g][nt][e], m);
                    l += p[nt][e];
                }
            /* S's n-tiles 0 and 1 are A's registers 0 and 2 of the group's k-step */
            const uint32_t a0 = Kv::pack_p(p[0][0], p[0][1]), a2 = Kv::pack_p(p[1][0], p[1][1]);
#pragma unroll
            for (int nt = 0; nt < NTILES; nt++)
                Kv::mma(o[nt], a0, a2, Kv::v_reg(vw[g][0], vw[g][1], nt), Kv::v_reg(vw[g][2], vw[g][3], nt));
        }
    }

    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (gid < b.heads_here) {
        const float v_mul = FP8 ? v_scale : 1.0f; /* V's scale, once: the merges are linear in the outputs */
#pragma unroll
        for (int nt = 0; nt < NTILES; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) sh.warp_o[warp][gid][dmma_o_dim(D, lane, nt, e)] = o[nt][e] * v_mul;
        if (lane % 4 == 0) {
            sh.warp_m[warp][gid] = m;
            sh.warp_l[warp][gid] = l;
        }
    }
    decode_finish<D, HB>(sh, b, out, part, counters, num_heads, num_splits);
}

template <int D, int HB, typename KV>
static int launch(const DecodeArgs<KV> &a, Error *err) {
    decode_attention_mma_kernel<D, HB, KV><<<decode_grid(a, HB), DECODE_THREADS, 0, a.stream>>>(
        a.out, a.q, a.k_cache, a.v_cache, a.seqs, a.items, a.block_tables, a.num_heads, a.num_kv_heads, a.block_size,
        decode_block_shift(a.block_size), decode_q_scale(D), a.num_splits, a.part, a.counters, a.k_scale, a.v_scale);
    CUDA_LAUNCHED("the decode attention kernel on the tensor cores", err);
    return 0;
}

template <int D, typename KV> static int launch_heads(const DecodeArgs<KV> &a, Error *err) {
    return decode_for_heads(a.num_heads / a.num_kv_heads,
                            [&](auto hb) { return launch<D, decltype(hb)::value>(a, err); });
}

template <typename KV>
int decode_attention_mma(const DecodeArgs<KV> &a, int head_dim, Error *err) {
    if (!dmma_supports(head_dim)) return error_set(err, "decode attention on the tensor cores: head_dim %d", head_dim);
    return head_dim == 64 ? launch_heads<64>(a, err) : launch_heads<128>(a, err);
}
template int decode_attention_mma<uint8_t>(const DecodeArgs<uint8_t> &, int, Error *);
template int decode_attention_mma<uint16_t>(const DecodeArgs<uint16_t> &, int, Error *);

/* The binary the driver loaded for this GPU: built for sm_80 (an sm_89 card
 * such as an L40S runs that one) the fp8 kernel is empty. Asked once. */
extern "C" bool cuda_decode_attention_fp8_tensor_cores(int head_dim, int group) {
    static int binary_version = -1;
    if (!dmma_supports(head_dim) || group < DMMA_MIN_GROUP || cuda_variant_legacy("fp8decode")) return false;
    if (binary_version < 0) {
        cudaFuncAttributes attr;
        if (cudaFuncGetAttributes(&attr, decode_attention_mma_kernel<128, 2, uint8_t>) == cudaSuccess) {
            binary_version = attr.binaryVersion;
        } else {
            (void)cudaGetLastError(); /* no binary for this GPU: the FMA kernel's launch reports it */
            binary_version = 0;
        }
    }
    return binary_version >= 89;
}

extern "C" bool cuda_decode_attention_bf16_tensor_cores(int head_dim, int group) {
    return dmma_supports(head_dim) && group >= DMMA_MIN_GROUP && !cuda_variant_legacy("bf16decode");
}
