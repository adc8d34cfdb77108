/*
 * cuda_flash_attention.cu - prefill attention as flash attention on the
 * tensor cores (see cuda_kernels.h; the index arithmetic is
 * cuda_flash_plan.h's).
 *
 * The WMMA kernel (cuda_prefill_attention.cu) keeps 16 query rows a block
 * and moves its output accumulator through shared memory every 64 keys,
 * because WMMA's register layout is opaque. mma.sync's is documented, so
 * here everything a row needs stays in the registers of the lanes that own
 * it:
 *  - a block holds 64 query rows (tokens x the group's heads of one KV
 *    head), 16 a warp; each warp keeps its Q fragments for the whole walk;
 *  - K and V tiles of 64 keys are gathered through the block table into
 *    shared memory with cp.async, two tiles deep (the next tile's copy runs
 *    during this tile's arithmetic), rows padded so ldmatrix is bank-free;
 *  - S = Q K^T on mma.m16n8k16 (bf16, float32 accumulate), scaled into base
 *    2; the online softmax (running max and sum per row) on S's registers,
 *    the four lanes of a row exchanging by shuffles; the causal mask only on
 *    tiles that reach past the block's first row;
 *  - P is rounded to bf16 straight from S's accumulators into A fragments
 *    (the accumulator and A layouts line up two n-tiles to one k-step), and
 *    O += P V on mma with V through ldmatrix.trans.
 * head_dim 64 and 128; head_dim 256 stays on the WMMA kernel (O would need
 * 128 registers a lane). The runner's prompt attention since the H200 run
 * of 2026-11-28 (cuda/PERFORMANCE_HISTORY.md, v4); NANOVLLM_CUDA_LEGACY=prefill
 * keeps the WMMA kernel for A/B.
 */
#include <math.h>

#include "cuda_bf16.h"
#include "cuda_check.h"
#include "cuda_flash_plan.h"
#include "cuda_kernels.h"
#include "cuda_kv_fp8.h"

#define WARP 32
#define THREADS (FLASH_WARPS * WARP)

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *smem_row) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *smem_row) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem_row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* d += a b, m16n8k16, bf16 in, float32 accumulate. */
__device__ __forceinline__ void mma_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 16 bytes global -> shared, zeros where bytes == 0 (rows past the end). */
__device__ __forceinline__ void cp_async16(void *smem, const void *global, int bytes) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(a), "l"(global), "r"(bytes));
}

__device__ __forceinline__ float scale_from(float x, float max) { return x == -INFINITY ? 0.0f : exp2f(x - max); }

/* bf16 K/V tiles in shared memory: two (cp.async double buffering) for a
 * bf16 cache; one for an fp8 cache, whose double buffer is of raw bytes
 * (flash_shared_bytes). */
template <typename KV> __host__ __device__ constexpr int flash_bf16_tiles() { return sizeof(KV) == 1 ? 1 : 2; }

/* Dynamic shared memory of flash_attention_kernel<D, KV>. */
template <int D, typename KV> constexpr size_t flash_shared_bytes() {
    return sizeof(uint16_t) * (size_t)(FLASH_ROWS + 2 * flash_bf16_tiles<KV>() * FLASH_KEYS) * (D + FLASH_PAD) +
           (sizeof(KV) == 1 ? (size_t)2 * 2 * FLASH_KEYS * D : 0);
}

/* KV: the cache's element. An fp8 cache (uint8_t) is gathered by cp.async
 * as bytes, 16 values a copy, into a double buffer of raw tiles; once a
 * tile has landed the block widens it to bf16 (e4m3 * scale rounded once,
 * cuda_kv_fp8.h) into one shared bf16 tile, one barrier more per tile,
 * and the tensor-core part below is the bf16 kernel's unchanged. */
template <int D, typename KV = uint16_t>
__global__ void __launch_bounds__(THREADS)
flash_attention_kernel(uint16_t *__restrict__ out, const uint16_t *__restrict__ q,
                       const KV *__restrict__ k_cache, const KV *__restrict__ v_cache,
                       const CudaAttnSeq *__restrict__ seqs, const CudaAttnItem *__restrict__ items,
                       const int32_t *__restrict__ block_tables, int num_heads, int num_kv_heads, int block_size,
                       float scale_log2, float k_scale, float v_scale) {
    constexpr bool FP8 = sizeof(KV) == 1;
    constexpr int STRIDE = D + FLASH_PAD; /* bf16 per shared row */
    constexpr int KS = D / 16;            /* k-steps of S = Q K^T */
    constexpr int DT = D / 8;             /* n-tiles of O */
    constexpr int NT = FLASH_KEYS / 8;    /* n-tiles of S */
    constexpr int CHUNKS = D / 8;         /* 16-byte pieces of a row */
    constexpr int TILES = flash_bf16_tiles<KV>();
    extern __shared__ __align__(16) uint16_t smem[];
    uint16_t *q_s = smem;                              /* [FLASH_ROWS][STRIDE] */
    uint16_t *k_s = q_s + FLASH_ROWS * STRIDE;         /* [TILES][FLASH_KEYS][STRIDE] */
    uint16_t *v_s = k_s + TILES * FLASH_KEYS * STRIDE; /* [TILES][FLASH_KEYS][STRIDE] */
    uint8_t *k8_s = reinterpret_cast<uint8_t *>(v_s + TILES * FLASH_KEYS * STRIDE); /* fp8: [2][FLASH_KEYS][D] */
    uint8_t *v8_s = k8_s + 2 * FLASH_KEYS * D;                                      /* fp8: [2][FLASH_KEYS][D] */

    const CudaAttnItem item = items[blockIdx.x];
    const CudaAttnSeq seq = seqs[item.seq];
    const int kv_head = blockIdx.y, group = num_heads / num_kv_heads;
    const int rows = item.tile_len * group;
    const int first_pos = seq.start_pos + item.tile0, num_keys = first_pos + item.tile_len;
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    const int32_t *table = block_tables + seq.table0;
    const size_t row_stride = (size_t)num_kv_heads * D;

    /* Gather the tile's K and V rows (zeros past the end) into buffer b. */
    auto load_tile = [&](int tile, int b) {
        if constexpr (FP8) {
            constexpr int CHUNKS8 = D / 16; /* 16-byte pieces of an fp8 row */
            for (int c = threadIdx.x; c < FLASH_KEYS * CHUNKS8; c += THREADS) {
                const int r = c / CHUNKS8, piece = c % CHUNKS8, key = tile * FLASH_KEYS + r;
                const bool in = key < num_keys;
                size_t at = 0;
                if (in) at = ((size_t)table[key / block_size] * block_size + key % block_size) * row_stride +
                             (size_t)kv_head * D + piece * 16;
                const size_t to = ((size_t)b * FLASH_KEYS + r) * D + piece * 16;
                cp_async16(k8_s + to, k_cache + at, in ? 16 : 0);
                cp_async16(v8_s + to, v_cache + at, in ? 16 : 0);
            }
        } else {
            for (int c = threadIdx.x; c < FLASH_KEYS * CHUNKS; c += THREADS) {
                const int r = c / CHUNKS, piece = c % CHUNKS, key = tile * FLASH_KEYS + r;
                const bool in = key < num_keys;
                size_t at = 0;
                if (in) at = ((size_t)table[key / block_size] * block_size + key % block_size) * row_stride +
                             (size_t)kv_head * D + piece * 8;
                uint16_t *kd = k_s + ((size_t)b * FLASH_KEYS + r) * STRIDE + piece * 8;
                uint16_t *vd = v_s + ((size_t)b * FLASH_KEYS + r) * STRIDE + piece * 8;
                cp_async16(kd, k_cache + at, in ? 16 : 0);
                cp_async16(vd, v_cache + at, in ? 16 : 0);
            }
        }
        asm volatile("cp.async.commit_group;");
    };

    const int tiles = flash_key_tiles(num_keys);
    load_tile(0, 0);
    /* Q rows (zeros past the item's rows) while the first tile arrives. */
    for (int c = threadIdx.x; c < FLASH_ROWS * CHUNKS; c += THREADS) {
        const int r = c / CHUNKS, piece = c % CHUNKS;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r < rows) {
            const int token = seq.token0 + item.tile0 + r / group, head = kv_head * group + r % group;
            v = *reinterpret_cast<const uint4 *>(q + ((size_t)token * num_heads + head) * D + piece * 8);
        }
        *reinterpret_cast<uint4 *>(q_s + r * STRIDE + piece * 8) = v;
    }
    __syncthreads();
    uint32_t qf[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
        ldmatrix_x4(qf[ks], q_s + (16 * warp + flash_ldq_row(lane)) * STRIDE + flash_ldq_col(lane, ks));

    /* This lane's two rows (C layout rows lane / 4 and + 8) and what they see. */
    int row_pos[2];
#pragma unroll
    for (int h = 0; h < 2; h++) row_pos[h] = first_pos + (16 * warp + flash_c_row(lane, 2 * h)) / group;
    float o[DT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int dt = 0; dt < DT; dt++)
#pragma unroll
        for (int i = 0; i < 4; i++) o[dt][i] = 0.0f;

    for (int tile = 0; tile < tiles; tile++) {
        const int b = tile & 1;
        if (tile + 1 < tiles) {
            load_tile(tile + 1, b ^ 1);
            asm volatile("cp.async.wait_group 1;");
        } else {
            asm volatile("cp.async.wait_group 0;");
        }
        __syncthreads();
        if constexpr (FP8) { /* the landed raw tile b, widened into the one bf16 tile */
            for (int c = threadIdx.x; c < 2 * FLASH_KEYS * CHUNKS; c += THREADS) {
                const bool is_v = c >= FLASH_KEYS * CHUNKS; /* K's pieces, then V's */
                const int cc = is_v ? c - FLASH_KEYS * CHUNKS : c, r = cc / CHUNKS, piece = cc % CHUNKS;
                const uint8_t *from = (is_v ? v8_s : k8_s) + ((size_t)b * FLASH_KEYS + r) * D + piece * 8;
                *reinterpret_cast<uint4 *>((is_v ? v_s : k_s) + r * STRIDE + piece * 8) = kv_fp8x8_to_bf16(
                    *reinterpret_cast<const uint2 *>(from), (is_v ? v_scale : k_scale) * FP8_UNIT);
            }
            __syncthreads();
        }
        const uint16_t *kt = k_s + (size_t)(TILES - 1) * b * FLASH_KEYS * STRIDE;
        const uint16_t *vt = v_s + (size_t)(TILES - 1) * b * FLASH_KEYS * STRIDE;

        float s[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) s[nt][i] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < KS; ks++)
#pragma unroll
            for (int nt = 0; nt < NT; nt += 2) {
                uint32_t kb[4];
                ldmatrix_x4(kb, kt + flash_ldk_key(lane, nt) * STRIDE + flash_ldk_dim(lane, ks));
                mma_bf16(s[nt], qf[ks], kb[0], kb[1]);
                mma_bf16(s[nt + 1], qf[ks], kb[2], kb[3]);
            }

        /* Scale into base 2, mask, and fold the tile into each row's state. */
        const bool masked = flash_tile_needs_mask(tile, first_pos);
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int key = tile * FLASH_KEYS + 8 * nt + flash_c_col(lane, i);
                float v = s[nt][i] * scale_log2;
                if (masked && key > row_pos[i / 2]) v = -INFINITY;
                s[nt][i] = v;
                tile_max[i / 2] = fmaxf(tile_max[i / 2], v);
            }
        float correction[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
            tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
            const float m_new = fmaxf(m[h], tile_max[h]);
            correction[h] = m_new == -INFINITY ? 1.0f : scale_from(m[h], m_new);
            m[h] = m_new;
        }
        float sum[2] = {0.0f, 0.0f};
        uint32_t pf[NT / 2][4]; /* P as A fragments: k-step kk = n-tiles 2kk, 2kk + 1 */
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            float p[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                p[i] = scale_from(s[nt][i], m[i / 2]);
                /* the sum of what P V will use: bf16-rounded, as the WMMA kernel */
                sum[i / 2] += bf16_bits_to_float(float_to_bf16_bits(p[i]));
            }
            pf[nt / 2][(nt % 2) * 2 + 0] = pack_bf16x2(p[0], p[1]);
            pf[nt / 2][(nt % 2) * 2 + 1] = pack_bf16x2(p[2], p[3]);
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 1);
            sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 2);
            l[h] = l[h] * correction[h] + sum[h];
        }
#pragma unroll
        for (int dt = 0; dt < DT; dt++)
#pragma unroll
            for (int i = 0; i < 4; i++) o[dt][i] *= correction[i / 2];
#pragma unroll
        for (int kk = 0; kk < NT / 2; kk++)
#pragma unroll
            for (int dt = 0; dt < DT; dt += 2) {
                uint32_t vb[4];
                ldmatrix_x4_trans(vb, vt + flash_ldv_key(lane, kk) * STRIDE + flash_ldv_dim(lane, dt));
                mma_bf16(o[dt], pf[kk], vb[0], vb[1]);
                mma_bf16(o[dt + 1], pf[kk], vb[2], vb[3]);
            }
        __syncthreads(); /* every warp is done with buffer b before it is refilled */
    }

    /* Normalise and store the item's rows. */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int r = 16 * warp + flash_c_row(lane, 2 * h);
        if (r >= rows) continue;
        const int token = seq.token0 + item.tile0 + r / group, head = kv_head * group + r % group;
        const float inv = 1.0f / l[h];
        uint16_t *dst = out + ((size_t)token * num_heads + head) * D;
#pragma unroll
        for (int dt = 0; dt < DT; dt++)
            *reinterpret_cast<uint32_t *>(dst + 8 * dt + flash_c_col(lane, 2 * h)) =
                pack_bf16x2(o[dt][2 * h] * inv, o[dt][2 * h + 1] * inv);
    }
}

template <int D, typename KV>
static int launch_flash(uint16_t *out, const uint16_t *q, const KV *k_cache, const KV *v_cache,
                        const CudaAttnSeq *seqs, const CudaAttnItem *items, int num_items,
                        const int32_t *block_tables, int num_heads, int num_kv_heads, int block_size, float k_scale,
                        float v_scale, cudaStream_t stream, Error *err) {
    const size_t shared = flash_shared_bytes<D, KV>();
    static bool shared_raised = false; /* once per instantiation, before any graph capture (warm-up) */
    if (!shared_raised) {
        CUDA_TRY(cudaFuncSetAttribute(flash_attention_kernel<D, KV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)shared),
                 "raising the flash attention kernel's shared memory", err);
        shared_raised = true;
    }
    dim3 grid((unsigned)num_items, (unsigned)num_kv_heads);
    flash_attention_kernel<D, KV><<<grid, THREADS, shared, stream>>>(out, q, k_cache, v_cache, seqs, items,
                                                                     block_tables, num_heads, num_kv_heads, block_size,
                                                                     1.4426950408889634f / sqrtf((float)D), k_scale,
                                                                     v_scale);
    CUDA_LAUNCHED("the flash attention kernel", err);
    return 0;
}

template <typename KV>
static int flash_attention(uint16_t *out, const uint16_t *q, const KV *k_cache, const KV *v_cache,
                           const CudaAttnSeq *seqs, const CudaAttnItem *items, int num_items,
                           const int32_t *block_tables, int num_heads, int num_kv_heads, int head_dim, int block_size,
                           float k_scale, float v_scale, CudaStream stream, Error *err) {
    if (cuda_kernels_check_shape(num_heads, num_kv_heads, head_dim, err)) return -1;
    if (!cuda_flash_attention_supports(num_heads, num_kv_heads, head_dim))
        return error_set(err, "flash attention: head_dim %d (64 or 128)", head_dim);
    if (num_items <= 0) return 0;
    cudaStream_t s = (cudaStream_t)stream;
    if (head_dim == 64)
        return launch_flash<64>(out, q, k_cache, v_cache, seqs, items, num_items, block_tables, num_heads,
                                num_kv_heads, block_size, k_scale, v_scale, s, err);
    return launch_flash<128>(out, q, k_cache, v_cache, seqs, items, num_items, block_tables, num_heads, num_kv_heads,
                             block_size, k_scale, v_scale, s, err);
}

extern "C" bool cuda_flash_attention_supports(int num_heads, int num_kv_heads, int head_dim) {
    return (head_dim == 64 || head_dim == 128) && num_kv_heads > 0 && num_heads % num_kv_heads == 0 &&
           num_heads / num_kv_heads <= FLASH_ROWS;
}

extern "C" int cuda_flash_attention_tile_tokens(int num_heads, int num_kv_heads) {
    return flash_tile_tokens(num_heads / num_kv_heads);
}

extern "C" int cuda_flash_attention(uint16_t *out, const uint16_t *q, const uint16_t *k_cache,
                                    const uint16_t *v_cache, const CudaAttnSeq *seqs, const CudaAttnItem *items,
                                    int num_items, const int32_t *block_tables, int num_heads, int num_kv_heads,
                                    int head_dim, int block_size, CudaStream stream, Error *err) {
    return flash_attention(out, q, k_cache, v_cache, seqs, items, num_items, block_tables, num_heads, num_kv_heads,
                           head_dim, block_size, 1.0f, 1.0f, stream, err);
}

extern "C" int cuda_flash_attention_fp8(uint16_t *out, const uint16_t *q, const uint8_t *k_cache,
                                        const uint8_t *v_cache, const CudaAttnSeq *seqs, const CudaAttnItem *items,
                                        int num_items, const int32_t *block_tables, int num_heads, int num_kv_heads,
                                        int head_dim, int block_size, float k_scale, float v_scale, CudaStream stream,
                                        Error *err) {
    return flash_attention(out, q, k_cache, v_cache, seqs, items, num_items, block_tables, num_heads, num_kv_heads,
                           head_dim, block_size, k_scale, v_scale, stream, err);
}
