/*
 * cuda_prefill_attention.cu - paged causal attention for steps with prompt
 * tokens, on the tensor cores (see cuda_kernels.h).
 *
 * Prefill attention is arithmetic-bound (a T-token prompt does T^2 / 2
 * query-key pairs per head), so it belongs on the tensor cores; decode
 * (one query per sequence) is bound by reading the KV cache and stays on
 * cuda_attention.cu's kernel. The work split is the same as there: a thread
 * block takes one item (16 query rows = tokens x the query heads of one KV
 * head) and walks the sequence's keys through the block table, 64 keys at a
 * time:
 *   K and V rows of the chunk gathered into shared memory (zeros past the
 *   end, so no garbage meets a zero probability) ->
 *   S = Q K^T, each warp 16 keys, WMMA bf16 with float32 accumulation ->
 *   online softmax per row (8 threads a row): causal mask, running max and
 *   sum, P rounded to bf16 (the sum uses the rounded values, so numerator
 *   and denominator agree) ->
 *   O = O * correction + P V, each warp a quarter of the head dimensions,
 *   its accumulators kept in shared memory (WMMA's register layout is
 *   opaque, and the per-row rescale needs to know rows).
 * One item per block keeps the ranking of work simple; the grid is items x
 * KV heads, as for decode.
 */
#include <cuda_bf16.h>
#include <mma.h>

#include <math.h>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "cuda_kv_fp8.h"

using namespace nvcuda;

#define ROWS 16        /* query rows per block: WMMA's M */
#define CHUNK_KEYS 64  /* keys per step: 16 per warp */
#define PF_WARPS 4
#define PF_THREADS (PF_WARPS * 32)
#define THREADS_PER_ROW (PF_THREADS / ROWS)

/* Shared memory layout, in bytes; every WMMA operand 32-byte aligned. */
struct PrefillSmem {
    size_t q, k, v, s, p, o, m, l, corr, total;
    __host__ __device__ explicit PrefillSmem(int D) {
        q = 0;
        k = q + sizeof(__nv_bfloat16) * ROWS * D;
        v = k + sizeof(__nv_bfloat16) * CHUNK_KEYS * D;
        s = v + sizeof(__nv_bfloat16) * CHUNK_KEYS * D;
        p = s + sizeof(float) * ROWS * CHUNK_KEYS;
        o = p + sizeof(__nv_bfloat16) * ROWS * CHUNK_KEYS;
        m = o + sizeof(float) * ROWS * D;
        l = m + sizeof(float) * ROWS;
        corr = l + sizeof(float) * ROWS;
        total = corr + sizeof(float) * ROWS;
    }
};

/* KV: the cache's element, uint16_t (bf16) or uint8_t (fp8 e4m3: each row
 * piece of 8 values read as 8 bytes and widened to bf16 on its way into
 * the shared tile, e4m3 * scale rounded once, cuda_kv_fp8.h; the rest of
 * the kernel is the bf16 one). */
template <int D, typename KV = uint16_t>
__global__ void __launch_bounds__(PF_THREADS)
prefill_attention_kernel(uint16_t *out, const uint16_t *q, const KV *k_cache,
                         const KV *v_cache, const CudaAttnSeq *seqs, const CudaAttnItem *items,
                         const int32_t *block_tables, int num_heads, int num_kv_heads, int block_size,
                         float scale, float k_scale, float v_scale) {
    extern __shared__ __align__(128) unsigned char smem[];
    const PrefillSmem L(D);
    __nv_bfloat16 *q_s = (__nv_bfloat16 *)(smem + L.q);
    __nv_bfloat16 *k_s = (__nv_bfloat16 *)(smem + L.k);
    __nv_bfloat16 *v_s = (__nv_bfloat16 *)(smem + L.v);
    float *s_s = (float *)(smem + L.s);
    __nv_bfloat16 *p_s = (__nv_bfloat16 *)(smem + L.p);
    float *o_s = (float *)(smem + L.o);
    float *m_s = (float *)(smem + L.m), *l_s = (float *)(smem + L.l), *corr_s = (float *)(smem + L.corr);

    const CudaAttnItem item = items[blockIdx.x];
    const CudaAttnSeq seq = seqs[item.seq];
    const int kv_head = blockIdx.y, group = num_heads / num_kv_heads;
    const int rows = item.tile_len * group;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int32_t *table = block_tables + seq.table0;
    const int first_pos = seq.start_pos + item.tile0;
    const int num_keys = first_pos + item.tile_len;
    const uint16_t zero_bits = 0;

    /* Q rows (zeros past `rows`), O = 0, running max -inf, sums 0 */
    for (int idx = tid; idx < ROWS * D; idx += PF_THREADS) {
        int r = idx / D, d = idx % D;
        uint16_t bits = zero_bits;
        if (r < rows) {
            int token = seq.token0 + item.tile0 + r / group, head = kv_head * group + r % group;
            bits = q[((size_t)token * num_heads + head) * D + d];
        }
        ((uint16_t *)q_s)[idx] = bits;
        o_s[idx] = 0.0f;
    }
    if (tid < ROWS) {
        m_s[tid] = -INFINITY;
        l_s[tid] = 0.0f;
    }

    for (int c0 = 0; c0 < num_keys; c0 += CHUNK_KEYS) {
        /* K and V rows of the chunk, 8 values (16 bytes) per load */
        for (int idx = tid; idx < CHUNK_KEYS * D / 8; idx += PF_THREADS) {
            int j = idx / (D / 8), part = idx % (D / 8), key = c0 + j;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
            if (key < num_keys) {
                size_t slot = (size_t)table[key / block_size] * block_size + key % block_size;
                size_t at = (slot * num_kv_heads + kv_head) * D + (size_t)part * 8;
                if constexpr (sizeof(KV) == 1) {
                    kv = kv_fp8x8_to_bf16(*reinterpret_cast<const uint2 *>(k_cache + at), k_scale * FP8_UNIT);
                    vv = kv_fp8x8_to_bf16(*reinterpret_cast<const uint2 *>(v_cache + at), v_scale * FP8_UNIT);
                } else {
                    kv = *reinterpret_cast<const uint4 *>(k_cache + at);
                    vv = *reinterpret_cast<const uint4 *>(v_cache + at);
                }
            }
            reinterpret_cast<uint4 *>(k_s)[idx] = kv;
            reinterpret_cast<uint4 *>(v_s)[idx] = vv;
        }
        __syncthreads();

        /* S[:, 16 w .. 16 w + 16) = Q K^T for this warp's 16 keys */
        {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
                wmma::load_matrix_sync(a, q_s + kk * 16, D);
                wmma::load_matrix_sync(b, k_s + (size_t)warp * 16 * D + kk * 16, D); /* K^T */
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(s_s + warp * 16, acc, CHUNK_KEYS, wmma::mem_row_major);
        }
        __syncthreads();

        /* online softmax: THREADS_PER_ROW consecutive lanes per row */
        {
            const int r = tid / THREADS_PER_ROW, part = tid % THREADS_PER_ROW;
            const int per = CHUNK_KEYS / THREADS_PER_ROW;
            const int pos = first_pos + r / group; /* the row's token position */
            float sc[CHUNK_KEYS / THREADS_PER_ROW];
            float mx = -INFINITY;
#pragma unroll
            for (int i = 0; i < per; i++) {
                int j = part * per + i, key = c0 + j;
                bool visible = r < rows && key < num_keys && key <= pos;
                sc[i] = visible ? s_s[r * CHUNK_KEYS + j] * scale : -INFINITY;
                mx = fmaxf(mx, sc[i]);
            }
#pragma unroll
            for (int o = THREADS_PER_ROW / 2; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            const float m_old = m_s[r], m_new = fmaxf(m_old, mx);
            float sum = 0.0f;
#pragma unroll
            for (int i = 0; i < per; i++) {
                float p = sc[i] == -INFINITY ? 0.0f : __expf(sc[i] - m_new);
                __nv_bfloat16 pb = __float2bfloat16(p);
                p_s[r * CHUNK_KEYS + part * per + i] = pb;
                sum += __bfloat162float(pb);
            }
#pragma unroll
            for (int o = THREADS_PER_ROW / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            __syncwarp();
            if (part == 0) {
                float corr = m_old == -INFINITY ? 0.0f : __expf(m_old - m_new);
                corr_s[r] = corr;
                l_s[r] = l_s[r] * corr + sum;
                m_s[r] = m_new;
            }
        }
        __syncthreads();

        /* O[:, this warp's columns] = O * corr + P V */
        {
            const int cols = D / PF_WARPS, col0 = warp * cols;
            for (int idx = lane; idx < ROWS * cols; idx += 32) {
                int r = idx / cols, d = col0 + idx % cols;
                o_s[r * D + d] *= corr_s[r];
            }
            __syncwarp();
#pragma unroll
            for (int f = 0; f < cols / 16; f++) {
                wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
                wmma::load_matrix_sync(acc, o_s + col0 + f * 16, D, wmma::mem_row_major);
#pragma unroll
                for (int kk = 0; kk < CHUNK_KEYS / 16; kk++) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
                    wmma::load_matrix_sync(a, p_s + kk * 16, CHUNK_KEYS);
                    wmma::load_matrix_sync(b, v_s + (size_t)kk * 16 * D + col0 + f * 16, D);
                    wmma::mma_sync(acc, a, b, acc);
                }
                wmma::store_matrix_sync(o_s + col0 + f * 16, acc, D, wmma::mem_row_major);
            }
        }
        __syncthreads(); /* K, V, P and O are rewritten by the next chunk */
    }

    for (int idx = tid; idx < rows * D; idx += PF_THREADS) {
        int r = idx / D, d = idx % D;
        int token = seq.token0 + item.tile0 + r / group, head = kv_head * group + r % group;
        out[((size_t)token * num_heads + head) * D + d] = __bfloat16_as_ushort(__float2bfloat16(o_s[idx] / l_s[r]));
    }
}

template <int D, typename KV>
static int launch_prefill(uint16_t *out, const uint16_t *q, const KV *k_cache, const KV *v_cache,
                          const CudaAttnSeq *seqs, const CudaAttnItem *items, int num_items,
                          const int32_t *block_tables, int num_heads, int num_kv_heads, int block_size,
                          float k_scale, float v_scale, cudaStream_t stream, Error *err) {
    const size_t shared = PrefillSmem(D).total;
    static bool shared_raised = false; /* once per instantiation, before any graph capture (warm-up) */
    if (shared > 48 * 1024 && !shared_raised) {
        CUDA_TRY(cudaFuncSetAttribute(prefill_attention_kernel<D, KV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)shared),
                 "raising the prefill attention kernel's shared memory", err);
        shared_raised = true;
    }
    dim3 grid((unsigned)num_items, (unsigned)num_kv_heads);
    prefill_attention_kernel<D, KV><<<grid, PF_THREADS, shared, stream>>>(
        out, q, k_cache, v_cache, seqs, items, block_tables, num_heads, num_kv_heads, block_size,
        1.0f / sqrtf((float)D), k_scale, v_scale);
    CUDA_LAUNCHED("the prefill attention kernel", err);
    return 0;
}

template <typename KV>
static int prefill_attention(uint16_t *out, const uint16_t *q, const KV *k_cache, const KV *v_cache,
                             const CudaAttnSeq *seqs, const CudaAttnItem *items, int num_items,
                             const int32_t *block_tables, int num_heads, int num_kv_heads, int head_dim,
                             int block_size, float k_scale, float v_scale, CudaStream stream, Error *err) {
    if (cuda_kernels_check_shape(num_heads, num_kv_heads, head_dim, err)) return -1;
    if (num_items <= 0) return 0;
    if (cuda_attention_tile_tokens(num_heads, num_kv_heads) * (num_heads / num_kv_heads) > ROWS)
        return error_set(err, "prefill attention: a tile has more than %d rows", ROWS);
    cudaStream_t s = (cudaStream_t)stream;
    switch (head_dim) {
    case 64:
        return launch_prefill<64>(out, q, k_cache, v_cache, seqs, items, num_items, block_tables, num_heads,
                                  num_kv_heads, block_size, k_scale, v_scale, s, err);
    case 128:
        return launch_prefill<128>(out, q, k_cache, v_cache, seqs, items, num_items, block_tables, num_heads,
                                   num_kv_heads, block_size, k_scale, v_scale, s, err);
    default:
        return launch_prefill<256>(out, q, k_cache, v_cache, seqs, items, num_items, block_tables, num_heads,
                                   num_kv_heads, block_size, k_scale, v_scale, s, err);
    }
}

extern "C" int cuda_prefill_attention(uint16_t *out, const uint16_t *q, const uint16_t *k_cache,
                                      const uint16_t *v_cache, const CudaAttnSeq *seqs,
                                      const CudaAttnItem *items, int num_items,
                                      const int32_t *block_tables, int num_heads, int num_kv_heads,
                                      int head_dim, int block_size, CudaStream stream, Error *err) {
    return prefill_attention(out, q, k_cache, v_cache, seqs, items, num_items, block_tables, num_heads, num_kv_heads,
                             head_dim, block_size, 1.0f, 1.0f, stream, err);
}

extern "C" int cuda_prefill_attention_fp8(uint16_t *out, const uint16_t *q, const uint8_t *k_cache,
                                          const uint8_t *v_cache, const CudaAttnSeq *seqs,
                                          const CudaAttnItem *items, int num_items, const int32_t *block_tables,
                                          int num_heads, int num_kv_heads, int head_dim, int block_size,
                                          float k_scale, float v_scale, CudaStream stream, Error *err) {
    return prefill_attention(out, q, k_cache, v_cache, seqs, items, num_items, block_tables, num_heads, num_kv_heads,
                             head_dim, block_size, k_scale, v_scale, stream, err);
}
