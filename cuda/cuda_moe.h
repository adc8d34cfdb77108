/*
 * cuda_moe.h - the sparse MLP of a Qwen3 MoE layer on the GPU (the CPU's
 * is cpu/cpu_moe.h, the reference these kernels are tested against).
 *
 * One call, all on the stream, no host synchronisation, and every launch
 * shaped by the step's token count alone, so the decode CUDA graphs
 * capture it like any other layer:
 *   route: per token, softmax over the router logits (computed by the
 *     caller's GEMM), top k by probability (ties: lower id), renormalised
 *     when norm_topk_prob - one warp per token;
 *   align: each (token, choice) pair gets a row; rows are grouped by expert
 *     and each expert's group padded to a multiple of 16, so every 16-row
 *     tile belongs to one expert (one block, counts and offsets in shared
 *     memory);
 *   gather h's rows; grouped GEMM gate_up on the tensor cores (WMMA bf16,
 *     float32 accumulation): tile i multiplies its rows by its expert's
 *     stacked gate/up weights, and tiles beyond the used rows return at
 *     once; SiLU-and-mul; grouped GEMM down;
 *   combine: each token's k rows weighted, in routing order.
 * Steps of at most CUDA_MOE_GEMV_MAX_TOKENS tokens (decode at small batch)
 * skip align and gather: gate/up and down run as gemvs over the routed
 * pairs, an expert read once per pair that chose it, the gate/up gemv
 * writing SiLU x up itself (glu: one launch less a layer, the same bits). Larger steps whose
 * experts average at most CUDA_MOE_TILE_GEMV_MAX_ROWS rows pad the groups
 * to 8 rows instead and multiply with gemvs, one 8-row tile a block.
 * Only routed experts' weights are read: an expert no token chose has no
 * tile. Needs hidden and moe_intermediate_size multiples of 16 and at most
 * 2048 experts (checked by cuda_moe_create).
 *
 * FP8 experts (cuda_weights.h: per-row scales) stay FP8: each warp of the
 * grouped GEMM converts its 16 x 16 weight tile to bf16 (e4m3 times the
 * row's tile scale, rounded once, as cuda_fp8_dequantize) in shared memory
 * and multiplies that, so each routed expert costs one byte a weight read.
 */
#ifndef NANOVLLM_CUDA_MOE_H
#define NANOVLLM_CUDA_MOE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CudaMoe {
    int hidden, width, experts, k; /* width: moe_intermediate_size */
    bool norm;
    bool glu; /* the gemv paths' gate/up writes SiLU x up itself (cuda_gemv_experts_glu): not under
                 NANOVLLM_CUDA_LEGACY=fuse or gemv, nor where the runner's start-up check of the
                 fused decode turned it off */
    int max_tokens;
    float *logits;         /* [max_tokens, experts]: the caller's router GEMM writes here */
    int32_t *ids;          /* [max_tokens * k] routed experts */
    float *weights;        /* [max_tokens * k] their weights */
    int32_t *pair_row;     /* [max_tokens * k] the row of each (token, choice) */
    int32_t *row_token;    /* [max rows] the token of each row, -1 for padding */
    int32_t *tile_expert;  /* [max tiles] the expert of each 16-row tile, -1 past the used rows */
    int32_t *used_rows;    /* [1] */
    uint16_t *x, *act;     /* [max rows, hidden], [max rows, width] bf16 */
    float *gate_up, *y;    /* [max rows, 2 * width], [max rows, hidden] */
    void *memory;          /* the one device allocation */
} CudaMoe;

#define CUDA_MOE_GEMV_MAX_TOKENS 8

/* Larger steps take the tile gemvs (cuda_gemv_expert_tiles) while the
 * routed rows average at most this many per expert (T * k <= it x experts:
 * Qwen3-30B-A3B's decode up to 384 sequences), the WMMA GEMM beyond. */
#define CUDA_MOE_TILE_GEMV_MAX_ROWS 24

/* Rows (and so 16-row tiles) a step of T tokens may need. */
int cuda_moe_max_rows(int T, int experts, int k);

int cuda_moe_create(CudaMoe *m, int hidden, int width, int experts, int k, bool norm,
                    int max_tokens, Error *err);
void cuda_moe_free(CudaMoe *m);

/* delta[T, hidden] = the experts' weighted sum for h [T, hidden] bf16,
 * whose router logits are in m->logits. gate_up: [experts][2 * width,
 * hidden], down: [experts][hidden, width], each bf16 or FP8 (CudaMatrix). */
int cuda_moe(CudaMoe *m, float *delta, const uint16_t *h, int T, CudaMatrix gate_up, CudaMatrix down,
             CudaStream stream, Error *err);

/* The route step alone, for the tests (ids, weights: [T * k] device memory). */
int cuda_moe_route(int32_t *ids, float *weights, const float *logits, int T, int experts, int k,
                   bool norm, CudaStream stream, Error *err);

#ifdef __cplusplus
}
#endif

#endif
