/*
 * cuda_runner_internal.h - the CUDA runner's state, shared by the files that
 * make up one step: cuda_runner.cu (the forward pass, graphs, creation) and
 * cuda_runner_sampling.cu (each row's sampling inputs to the GPU, and the
 * rows the CPU sampler takes).
 */
#ifndef NANOVLLM_CUDA_RUNNER_INTERNAL_H
#define NANOVLLM_CUDA_RUNNER_INTERNAL_H

#include <stdint.h>

#include "cuda_matmul.h"
#include "cuda_moe.h"
#include "cuda_sampler.h"
#include "cuda_weights.h"

extern "C" {
#include "engine/runner.h"
#include "engine/sampler.h"
}

#define MAX_GRAPHS 64

typedef struct CudaRunner {
    Runner base;
    ModelConfig cfg;
    cudaDeviceProp prop;
    cudaStream_t stream;
    CudaMatmul *matmul; /* every projection: gemv, cuBLAS, FP8 (cuda_matmul.h) */
    CudaWeights weights;
    float *rope;       /* [max_model_len, head_dim / 2, 2]: cos, sin */
    void *kv;           /* K of every layer, then V of every layer: bf16, or e4m3 bytes when kv_fp8 */
    size_t layer_elems; /* values of K (or V) per layer */
    bool kv_fp8;        /* --kv-cache-dtype fp8: one byte a value (cuda_kv_fp8.h) */
    float k_scale, v_scale; /* the fp8 cache's scales (KV_FP8_DEFAULT_SCALE) */

    /* activations, [max_num_batched_tokens, width] each; logits [max_num_seqs, vocab] */
    float *x, *delta, *qkv, *gate_up, *logits;
    uint16_t *h, *q, *attn, *act, *normed;
    int32_t *tokens_dev;
    CudaMoe moe; /* a MoE model's expert activations (memory NULL when dense) */

    /* The step's metadata: built in pinned host memory, copied in one go to
     * the device buffer of the same layout. */
    int32_t *meta_host, *meta_dev;
    size_t meta_capacity; /* int32 values */
    int32_t *tokens_host; /* pinned [max_num_seqs] */
    float *logits_host;   /* pinned [max_num_seqs, vocab]: rows the CPU sampler takes */
    /* embedding rows (runner.h's pooling): float32 [max_num_seqs, hidden] */
    float *pooled_dev, *pooled_host;
    SamplerScratch sampler;
    /* the GPU sampler's inputs, pinned and on the device, and its workspace */
    CudaSampleRow *sample_rows_host, *sample_rows_dev; /* [max_num_seqs] */
    CudaPenalty *penalties_host, *penalties_dev;       /* [penalty_capacity] */
    int penalty_capacity;
    /* logit_bias entries: at most MAX_LOGIT_BIAS a row (sampling_params_validate),
     * so [max_num_seqs * MAX_LOGIT_BIAS] always holds a step's; never grown */
    LogitBias *biases_host, *biases_dev;
    int bias_capacity;
    /* structured outputs: row i's allowed-token bitmask at word i * mask_words
     * ([max_num_seqs, mask_words]); allocated once, so the addresses never move */
    uint32_t *masks_host, *masks_dev;
    int mask_words; /* (vocab + 31) / 32 */
    void *sampler_workspace;
    int tile_tokens;
    int max_blocks_per_seq;
    int max_items;

    float *split_workspace; /* partial attention results of split decode */
    int *split_counters;    /* per (sequence, KV head): splits done, zero between launches */
    bool legacy_attention;  /* NANOVLLM_CUDA_LEGACY=attention: the previous decode kernel (bf16 cache only) */
    bool flash_prefill;     /* NANOVLLM_CUDA_PREFILL=flash: prompt steps on cuda_flash_attention */
    int32_t pad_block;      /* the KV block padding sequences write to */
    RunnerSeq *padded;      /* [max graph batch]: a decode batch padded to its bucket */
    int num_graphs;
    int graph_batch[MAX_GRAPHS]; /* bucket sizes, ascending */
    int graph_splits[MAX_GRAPHS];
    cudaGraphExec_t graphs[MAX_GRAPHS];
} CudaRunner;

/* Where each part of the metadata sits in meta_host / meta_dev (int32 offsets). */
typedef struct StepLayout {
    int num_tokens, num_items, num_logit_rows, num_pool_rows;
    size_t tokens, positions, slots, logit_rows, pool, seqs, items, tables, total;
} StepLayout;

/* cuda_runner_sampling.cu */

/* Logprobs are the CPU sampler's alone; every other row samples on the GPU. */
bool cuda_runner_sampled_on_host(const SampleInput *in);
/* Room for `entries` penalty tokens, keeping the first `keep` written this step. */
int cuda_runner_reserve_penalties(CudaRunner *r, int entries, int keep, Error *err);
/* Each logits row's sampling parameters, penalty tokens, logit_bias entries
 * and allowed-token mask, copied to the device on the runner's stream. */
int cuda_runner_upload_sampling(CudaRunner *r, const RunnerBatch *b, Error *err);
/* Sequence s's token from its logits row on the host (CPU sampler). */
int32_t cuda_runner_sample_on_host(CudaRunner *r, float *row, const RunnerBatch *b, int s);

#endif
