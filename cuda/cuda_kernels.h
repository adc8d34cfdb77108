/*
 * cuda_kernels.h - the CUDA runner's own kernels, callable from C.
 *
 * Everything here but the larger GEMMs (those go through cuBLAS): the
 * embedding gather, residual-add + RMSNorm, per-head q/k RMSNorm + RoPE + the
 * store of K and V into the paged cache, paged attention (decode, prefill,
 * flash prefill), SiLU-and-mul, the few-row products (gemv, bf16 and FP8),
 * FP8 dequantization, the row gather in front of the lm_head (greedy and
 * sampling are in cuda_sampler.h; which product a projection runs,
 * cuda_matmul.h). Each launcher checks its launch and returns 0, or -1 with
 * the CUDA error in err; none waits for the GPU. Pointers are device memory; bf16 values travel as their raw 16 bits
 * (uint16_t), the top half of a float32, as in half.h. The tests call these
 * directly against the CPU runner's functions (llm.c style).
 *
 * Data types follow where precision matters: the residual stream and GEMM
 * outputs are float32, GEMM inputs and the KV cache bf16 (or, with
 * --kv-cache-dtype fp8, the cache e4m3 with a scale: the *_fp8 entry
 * points, cuda_kv_fp8.h).
 */
#ifndef NANOVLLM_CUDA_KERNELS_H
#define NANOVLLM_CUDA_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void *CudaStream; /* cudaStream_t; NULL is the legacy default stream */

/* One sequence of a step, for attention: where its new tokens start in the
 * flattened batch, its position, and where its block table starts in the
 * flattened tables. */
typedef struct CudaAttnSeq {
    int32_t token0;
    int32_t start_pos;
    int32_t num_tokens;
    int32_t table0;
} CudaAttnSeq;

/* One thread block's work: up to cuda_attention_tile_tokens() new tokens of
 * one sequence (times every KV head, the grid's second dimension). */
typedef struct CudaAttnItem {
    int32_t seq;
    int32_t tile0; /* first new token of the tile, relative to the sequence */
    int32_t tile_len;
} CudaAttnItem;

/* Whether the kernels handle this head shape (head_dim 64, 128 or 256; a
 * query-head group of at most 16); if not, why. */
int cuda_kernels_check_shape(int num_heads, int num_kv_heads, int head_dim, Error *err);

/* x[t] = table[tokens[t]] widened to float32; x is [n, hidden]. */
int cuda_embed(float *x, const uint16_t *table, const int32_t *tokens, int n, int hidden,
               CudaStream stream, Error *err);

/* Per token: x += delta (skipped when delta is NULL), then
 * out = bf16(x / rms(x) * weight). x, delta: [n, hidden] float32. */
int cuda_add_rmsnorm(float *x, const float *delta, uint16_t *out, const float *weight, int n,
                     int hidden, float eps, CudaStream stream, Error *err);

/* qkv: [n, (num_heads + 2 * num_kv_heads) * head_dim] float32, the fused
 * projection. Per token: each q and k head RMS-normed with q_norm / k_norm
 * and rotated by RoPE (NeoX halves) at positions[t]; q goes to q_out
 * [n, num_heads, head_dim] bf16, k and v to the caches at slots[t]
 * ([num_blocks * block_size, num_kv_heads, head_dim] bf16). rope holds
 * (cos, sin) pairs, [max_pos, head_dim / 2, 2]. */
int cuda_qk_norm_rope_store(uint16_t *q_out, uint16_t *k_cache, uint16_t *v_cache,
                            const float *qkv, const float *q_norm, const float *k_norm,
                            const float *rope, const int32_t *positions, const int32_t *slots,
                            int n, int num_heads, int num_kv_heads, int head_dim, float eps,
                            CudaStream stream, Error *err);

/* The same with an fp8 KV cache (cuda_kv_fp8.h): k and v stored as
 * e4m3(x / k_scale), e4m3(x / v_scale), exactly fp8_e4m3_from_float's
 * bytes; q bf16 as above. Needs qkv, the norms and rope 16-byte aligned,
 * q_out and v_cache 8-byte, k_cache 4-byte (it has no block-per-token
 * fallback, NANOVLLM_CUDA_LEGACY=kernels included). */
int cuda_qk_norm_rope_store_fp8(uint16_t *q_out, uint8_t *k_cache, uint8_t *v_cache, const float *qkv,
                                const float *q_norm, const float *k_norm, const float *rope,
                                const int32_t *positions, const int32_t *slots, int n, int num_heads,
                                int num_kv_heads, int head_dim, float eps, float k_scale, float v_scale,
                                CudaStream stream, Error *err);

/* New tokens per attention item for this head shape. */
int cuda_attention_tile_tokens(int num_heads, int num_kv_heads);

/* Causal attention of every new token over its sequence's cached context
 * (prefill, prefill over a cached prefix, chunked prefill and decode alike):
 * out [tokens, num_heads, head_dim] bf16 from q (same shape, already normed
 * and rotated) and the layer's caches through block_tables. num_splits > 1
 * cuts each sequence's keys into that many ranges, one thread block each,
 * merged afterwards (flash-decoding); it needs split_workspace of
 * cuda_attention_split_workspace_bytes() for num_items * num_kv_heads *
 * num_splits blocks. */
int cuda_attention(uint16_t *out, const uint16_t *q, const uint16_t *k_cache,
                   const uint16_t *v_cache, const CudaAttnSeq *seqs, const CudaAttnItem *items,
                   int num_items, const int32_t *block_tables, int num_heads, int num_kv_heads,
                   int head_dim, int block_size, int num_splits, float *split_workspace,
                   CudaStream stream, Error *err);

/* The same attention on the tensor cores (cuda_prefill_attention.cu), for
 * steps with prompt tokens; decode-only steps belong to cuda_attention. */
int cuda_prefill_attention(uint16_t *out, const uint16_t *q, const uint16_t *k_cache,
                           const uint16_t *v_cache, const CudaAttnSeq *seqs,
                           const CudaAttnItem *items, int num_items, const int32_t *block_tables,
                           int num_heads, int num_kv_heads, int head_dim, int block_size,
                           CudaStream stream, Error *err);

/* The same over an fp8 cache (cuda_kv_fp8.h): each K/V piece widened to
 * bf16 (e4m3 * scale, rounded once) as it enters the kernel's shared tile. */
int cuda_prefill_attention_fp8(uint16_t *out, const uint16_t *q, const uint8_t *k_cache, const uint8_t *v_cache,
                               const CudaAttnSeq *seqs, const CudaAttnItem *items, int num_items,
                               const int32_t *block_tables, int num_heads, int num_kv_heads, int head_dim,
                               int block_size, float k_scale, float v_scale, CudaStream stream, Error *err);

/* The same attention as flash attention on mma.sync (cuda_flash_attention.cu):
 * items of up to cuda_flash_attention_tile_tokens() tokens (64 query rows),
 * head_dim 64 or 128 (cuda_flash_attention_supports). */
bool cuda_flash_attention_supports(int num_heads, int num_kv_heads, int head_dim);
int cuda_flash_attention_tile_tokens(int num_heads, int num_kv_heads);
int cuda_flash_attention(uint16_t *out, const uint16_t *q, const uint16_t *k_cache, const uint16_t *v_cache,
                         const CudaAttnSeq *seqs, const CudaAttnItem *items, int num_items,
                         const int32_t *block_tables, int num_heads, int num_kv_heads, int head_dim,
                         int block_size, CudaStream stream, Error *err);

/* The same over an fp8 cache: the tiles gathered as bytes (cp.async, two
 * deep), each widened to bf16 in shared memory once it has landed. */
int cuda_flash_attention_fp8(uint16_t *out, const uint16_t *q, const uint8_t *k_cache, const uint8_t *v_cache,
                             const CudaAttnSeq *seqs, const CudaAttnItem *items, int num_items,
                             const int32_t *block_tables, int num_heads, int num_kv_heads, int head_dim,
                             int block_size, float k_scale, float v_scale, CudaStream stream, Error *err);

/* The most attention blocks one split decode launch may use (it sizes the
 * split workspace; cuda_attention_choose_splits keeps launches under it). */
#define CUDA_MAX_SPLIT_BLOCKS 4096

int cuda_attention_max_splits(void);
size_t cuda_attention_split_workspace_bytes(int head_dim, int max_split_blocks);

/* How many splits keep num_sms busy (about two waves of blocks) without
 * splits shorter than a few hundred keys or more than max_split_blocks
 * blocks in all. max_keys: the longest context the launch may see. */
int cuda_attention_choose_splits(int num_items, int num_kv_heads, int max_keys, int num_sms,
                                 int max_split_blocks);

/* Decode attention (cuda_decode_attention.cu): one new token per item, the
 * same result as cuda_attention. Each (item, KV head) is split into up to
 * num_splits key ranges (the ranges follow each sequence's length on the
 * GPU, cuda_decode_plan.h), merged by the last block of each; with
 * num_splits > 1 it needs split_workspace (cuda_attention_split_workspace_bytes
 * for max_split_blocks >= cuda_decode_attention_blocks() * num_splits) and
 * split_counters (cuda_decode_attention_counters_bytes of the same count,
 * zeroed once after allocation; every launch leaves them zero). */
int cuda_decode_attention(uint16_t *out, const uint16_t *q, const uint16_t *k_cache,
                          const uint16_t *v_cache, const CudaAttnSeq *seqs, const CudaAttnItem *items,
                          int num_items, const int32_t *block_tables, int num_heads, int num_kv_heads,
                          int head_dim, int block_size, int num_splits, float *split_workspace,
                          int *split_counters, CudaStream stream, Error *err);

/* The same over an fp8 cache (cuda_kv_fp8.h): K and V read as e4m3 * k_scale
 * and e4m3 * v_scale, straight from the bytes (16 a lane where the block
 * has at most two query heads, else 8: cuda_decode_plan.h); the same
 * workspace, counters and splits. */
int cuda_decode_attention_fp8(uint16_t *out, const uint16_t *q, const uint8_t *k_cache, const uint8_t *v_cache,
                              const CudaAttnSeq *seqs, const CudaAttnItem *items, int num_items,
                              const int32_t *block_tables, int num_heads, int num_kv_heads, int head_dim,
                              int block_size, int num_splits, float *split_workspace, int *split_counters,
                              float k_scale, float v_scale, CudaStream stream, Error *err);

/* Whether cuda_decode_attention_fp8 runs on the tensor cores at head_dim
 * with `group` query heads a KV head (cuda_decode_attention_mma.cu: q and
 * P rounded to f16, head sizes 64 and 128, groups of 3 and more, a GPU of
 * sm_89 or newer, not NANOVLLM_CUDA_LEGACY=fp8decode) rather than on FMAs. */
bool cuda_decode_attention_fp8_tensor_cores(int head_dim, int group);

/* Whether cuda_decode_attention runs on the tensor cores at head_dim with
 * `group` query heads a KV head (the same kernel: q exact, P rounded to
 * bf16 as the flash prefill's; head sizes 64 and 128, groups of 3 and more,
 * not NANOVLLM_CUDA_LEGACY=bf16decode). */
bool cuda_decode_attention_bf16_tensor_cores(int head_dim, int group);

/* Thread blocks per split of a decode launch (items x KV heads x blocks per group). */
int cuda_decode_attention_blocks(int num_items, int num_heads, int num_kv_heads);
size_t cuda_decode_attention_counters_bytes(int max_split_blocks);

/* Splits for cuda_decode_attention: enough blocks for a few per SM, no
 * split under 64 keys of max_keys, at most max_split_blocks blocks. */
int cuda_decode_attention_choose_splits(int num_items, int num_heads, int num_kv_heads, int max_keys,
                                        int num_sms, int max_split_blocks);

/* y [rows, out] float32 = x [rows, in] bf16 times W [out, in] bf16
 * transposed, for decode steps of a few rows (cuda_gemv.cu): what the
 * runner's projections and lm_head use when cuda_gemv_fits(), cuBLAS
 * otherwise. */
#define CUDA_GEMV_MAX_ROWS 4
bool cuda_gemv_fits(int rows, int in, const void *x, const void *w);
int cuda_gemv(float *y, const uint16_t *x, const uint16_t *w, int rows, int out, int in, CudaStream stream,
              Error *err);

/* A weight matrix [out, in] on the device: bf16 (scales NULL), or
 * float8_e4m3fn bytes with float32 scales per row and 128-column tile
 * (cuda_fp8_plan.h: W[n, k] = e4m3(data[n, k]) * scales[n * ceil(in / 128)
 * + k / 128]). */
typedef struct CudaMatrix {
    const void *data;
    const float *scales;
    /* FP8 whose parts are whole 128 x 128 tiles: the scales again, one per
     * tile, in cuBLASLt's layout (cuda_fp8_plan.h), for prompt steps on the
     * tensor cores; else NULL */
    const float *tile_scales;
} CudaMatrix;

/* The residual add and RMSNorm a normalising gemv does before its product
 * (cuda_gemv.cu): its rows are RMSNorm(x_in + delta) * weight with
 * cuda_add_rmsnorm's bits, and one of its blocks writes x_out = x_in +
 * delta (x_out must not be x_in: the other blocks still read it) and h,
 * the bf16 rows. delta NULL: x_in as it is, x_out unused. */
typedef struct CudaGemvNorm {
    const float *x_in, *delta, *weight;
    float *x_out;
    uint16_t *h;
    float eps;
} CudaGemvNorm;

/* y = RMSNorm(...) W^T as cuda_gemv's (or, FP8 W, cuda_gemv_fp8's)
 * product of those rows - the same bits as cuda_add_rmsnorm then the
 * plain gemv - in one launch. The rows live in shared memory: rows x in
 * bf16 at most CUDA_GEMV_NORM_MAX_SHARED bytes (4 rows of 4,096; with the
 * reduction's static array under the 48 KB a launch gets without opting
 * in). in a multiple of 8 (bf16) or 16 (FP8). */
#define CUDA_GEMV_NORM_MAX_SHARED (32 * 1024)
bool cuda_gemv_norm_fits(int rows, int in, const CudaGemvNorm *norm, CudaMatrix w);
int cuda_gemv_norm(float *y, const CudaGemvNorm *norm, CudaMatrix w, int rows, int out, int in, CudaStream stream,
                   Error *err);

/* The gate/up projection and SiLU x up in the same launch: W is [2 out, in]
 * (gate rows, then up rows) and act [rows, out] bf16 gets the bits of
 * cuda_silu_mul of the plain gemv's float32 product. */
int cuda_gemv_norm_glu(uint16_t *act, const CudaGemvNorm *norm, CudaMatrix w, int rows, int out, int in,
                       CudaStream stream, Error *err);

/* The FP8 side of those two (cuda_fp8.cu; glu: y is the bf16 act). */
int cuda_gemv_fp8_norm(void *y, const CudaGemvNorm *norm, const uint8_t *w, const float *scales, int rows, int out,
                       int in, bool glu, CudaStream stream, Error *err);

/* The same few-row product over an FP8 matrix (cuda_fp8.cu): 16 weights a
 * 16-byte load, each 128-column tile's partial sum times its row's scale;
 * x bf16 as above. Needs in a multiple of 16 and x, w 16-byte aligned. */
bool cuda_gemv_fp8_fits(int rows, int in, const void *x, const void *w);
int cuda_gemv_fp8(float *y, const uint16_t *x, const uint8_t *w, const float *scales, int rows, int out, int in,
                  CudaStream stream, Error *err);

/* dst [rows, cols] bf16 = bf16(e4m3(w) * scale), the float32 product rounded
 * once (the same bits as f32_to_bf16 of fp8_dequantize_rows); scales per
 * row as in CudaMatrix. Any cols; 16 values a thread when cols is a
 * multiple of 16 and w 16-byte aligned. */
int cuda_fp8_dequantize(uint16_t *dst, const uint8_t *w, const float *scales, int rows, int cols,
                        CudaStream stream, Error *err);

/* An MoE step's experts as gemvs, one launch over its routed pairs: for
 * pair p, y[p, :out] = x[p / x_div, :in] times W[expert_of[p]]^T, w the
 * stacked [experts][out, in], bf16 or FP8 (w.scales, per-row tile scales
 * of the stack's rows). x_div: k for gate/up (the token's row), 1 for down.
 * Needs in a multiple of 8 (bf16) or 16 (FP8) and x, w 16-byte aligned. */
int cuda_gemv_experts(float *y, const uint16_t *x, int x_div, CudaMatrix w, const int32_t *expert_of, int pairs,
                      int out, int in, CudaStream stream, Error *err);

/* The gate/up form: act[p, :out] = bf16(SiLU(x gate^T) x (x up^T)) for the
 * pair's expert, W [experts][2 out, in] (gate rows, then up rows): the
 * bits of cuda_gemv_experts then cuda_silu_mul_rows, one launch and no
 * float32 round trip. */
int cuda_gemv_experts_glu(uint16_t *act, const uint16_t *x, int x_div, CudaMatrix w, const int32_t *expert_of,
                          int pairs, int out, int in, CudaStream stream, Error *err);

/* FP8 matrices of both (glu: y is the bf16 activation, as above). */
int cuda_gemv_fp8_experts(void *y, const uint16_t *x, int x_div, const uint8_t *w, const float *scales,
                          const int32_t *expert_of, int pairs, int out, int in, bool glu, CudaStream stream,
                          Error *err);

/* The same over an MoE step's rows as cuda_moe.cu lays them out for it
 * (grouped by expert, each group padded to tiles of CUDA_GEMV_TILE_ROWS,
 * tile_expert and row_token as there): a block multiplies its tile's rows
 * by the tile's expert's matrix, so a weight row is read once per 8 rows
 * with whole 16-byte loads, where the WMMA GEMM reads 32 bytes of each of
 * 16 rows at a time; blocks of padding only return. y and x: [tiles * 8,
 * out] and [tiles * 8, in]. */
#define CUDA_GEMV_TILE_ROWS 8
int cuda_gemv_expert_tiles(float *y, const uint16_t *x, CudaMatrix w, const int32_t *tile_expert,
                           const int32_t *row_token, int tiles, int out, int in, CudaStream stream, Error *err);
int cuda_gemv_fp8_expert_tiles(float *y, const uint16_t *x, const uint8_t *w, const float *scales,
                               const int32_t *tile_expert, const int32_t *row_token, int tiles, int out, int in,
                               CudaStream stream, Error *err);

/* out[t, i] = bf16(silu(gate_up[t, i]) * gate_up[t, intermediate + i]). */
int cuda_silu_mul(uint16_t *out, const float *gate_up, int n, int intermediate, CudaStream stream,
                  Error *err);

/* The same over the first *n_dev rows (at most max_n; the grid is sized for
 * max_n, so a graph can capture it while the count changes). */
int cuda_silu_mul_rows(uint16_t *out, const float *gate_up, int max_n, const int32_t *n_dev,
                       int intermediate, CudaStream stream, Error *err);

/* out[i] = in[rows[i]] for n rows of width bf16 values. */
int cuda_gather_rows(uint16_t *out, const uint16_t *in, const int32_t *rows, int n, int width,
                     CudaStream stream, Error *err);

/* Embedding pooling (engine/runner.h): for each i < n, out[i] ([hidden]
 * float32) = the sum over rows [ranges[2i], ranges[2i] + ranges[2i + 1])
 * of x's final norm, x[t] / rms(x[t]) * weight, in float32 (the bf16 copy
 * the lm_head reads would cost the vector precision it does not need to
 * lose). A count of 0 leaves zeros. */
int cuda_pool_rows(float *out, const float *x, const float *weight, const int32_t *ranges, int n,
                   int hidden, float eps, CudaStream stream, Error *err);

/* Plain memory helpers for the runner and the tests. */
void *cuda_alloc(size_t bytes, Error *err);
void cuda_free(void *p);
int cuda_upload(void *dst, const void *src, size_t bytes, Error *err);
int cuda_download(void *dst, const void *src, size_t bytes, Error *err);
int cuda_synchronize(Error *err);

#ifdef __cplusplus
}
#endif

#endif
