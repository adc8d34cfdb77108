/*
 * cuda_runner_internal.h - the CUDA runner's state, shared by the files that
 * make it up: cuda_runner.cu (a step around the layers, graphs, creation),
 * cuda_runner_layers.cu (the decoder layers and the residual stream),
 * cuda_runner_memory.cu (the buffers it allocates at start-up),
 * cuda_runner_sampling.cu (each row's sampling inputs to the GPU, and the
 * rows the CPU sampler takes) and cuda_runner_hybrid.cu (Qwen3.5's layers).
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

/* A hybrid (Qwen3.5) model's part of the runner (cuda_runner_hybrid.cu). */
typedef struct CudaHybrid {
    /* The recurrent-state pool, cpu_state_pool.h's layout: units of
     * unit_floats (every linear layer's conv state then recurrent state, one
     * layer after another); unit u is slot u for u < num_slots, checkpoint
     * u - num_slots after. */
    float *states;
    size_t unit_floats, layer_floats, bytes;
    int num_slots, num_checkpoints;
    int *kv_index, *linear_index; /* [num_layers]: the layer's place among the full / linear ones, or -1 */
    /* activations: wide [tokens, max(conv_dim, 2Q + 2KV)] float32 (in_proj_qkv's
     * output, or a full layer's fused q+gate/k/v); z [tokens, value_dim],
     * a and b [tokens, Hv] float32; out [tokens, value_dim] bf16 */
    float *wide, *z, *a, *b;
    uint16_t *out;
    /* the shared expert: gate_up [tokens, 2 SI], its act [tokens, SI] bf16,
     * its output [tokens, hidden] and gate [tokens] */
    float *sh_gate_up, *sh_out, *sh_gate;
    uint16_t *sh_act;
} CudaHybrid;

typedef struct CudaRunner {
    Runner base;
    ModelConfig cfg;
    cudaDeviceProp prop;
    cudaStream_t stream;
    CudaMatmul *matmul; /* every projection: gemv, cuBLAS, FP8 (cuda_matmul.h) */
    CudaWeights weights;
    float *rope;       /* [max_model_len, rotary_dim / 2, 2]: cos, sin (rotary_dim: head_dim but in hybrids) */
    void *kv;           /* K of every layer, then V of every layer: bf16, or e4m3 bytes when kv_fp8 */
    size_t layer_elems; /* values of K (or V) per layer */
    int num_kv_layers;  /* layers with K/V (cuda_runner_kv_layers): V starts after their K */
    bool hybrid;        /* Qwen3.5: Gated DeltaNet and gated full layers (hy) */
    CudaHybrid hy;
    bool kv_fp8;        /* --kv-cache-dtype fp8: one byte a value (cuda_kv_fp8.h) */
    float k_scale, v_scale; /* the fp8 cache's scales (KV_FP8_DEFAULT_SCALE) */

    /* activations, [max_num_batched_tokens, width] each; logits [max_num_seqs, vocab] */
    float *x, *delta, *qkv, *gate_up, *logits;
    /* [CUDA_GEMV_MAX_ROWS, hidden]: the residual stream's second buffer when
     * the gemvs add delta into it (a gemv's blocks all read x while one
     * writes the sum); residual: where the last forward left the stream */
    float *x_spare, *residual;
    bool fuse_decode; /* steps of a few rows: RMSNorm and SiLU inside the gemvs (cuda_gemv.cu) */
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
    bool flash_prefill;     /* prompt steps on cuda_flash_attention (else the WMMA kernel) */
    int32_t pad_block;      /* the KV block padding sequences write to */
    RunnerSeq *padded;      /* [max graph batch]: a decode batch padded to its bucket */
    int num_graphs;
    int graph_batch[MAX_GRAPHS]; /* bucket sizes, ascending */
    int graph_splits[MAX_GRAPHS];
    cudaGraphExec_t graphs[MAX_GRAPHS];
} CudaRunner;

/* Where each part of the metadata sits in meta_host / meta_dev (int32 offsets). */
typedef struct StepLayout {
    int num_tokens, num_items, num_logit_rows, num_pool_rows, num_seqs, max_seq_rows;
    size_t tokens, positions, slots, logit_rows, pool, seqs, items, gdn, tables, total;
} StepLayout;
/* gdn: a hybrid model's CudaGdnSeq per sequence (4 int32 each, padding
 * sequences 0 rows), before the tables; none otherwise (gdn == tables). */

/* Y[rows, out] = X[rows, in] . W[out, in]^T, bf16 inputs, float32 output and
 * accumulation; W bf16 or FP8, the kernel chosen by cuda_matmul.h. */
static inline int runner_gemm(CudaRunner *r, float *y, const uint16_t *x, CudaMatrix w, int rows, int out, int in,
                              Error *err) {
    return cuda_matmul(r->matmul, y, x, w, rows, out, in, err);
}

/* cuda_runner_layers.cu */

/* splits: how decode attention splits contexts, or 0 for a step with prompt
 * tokens. Leaves h = the final norm of the stream, r->residual the stream. */
int cuda_runner_forward(CudaRunner *r, const StepLayout *L, int splits, Error *err);
/* Paged attention over KV layer kv_layer (the q in r->q, out in r->attn);
 * the hybrid layers' full attention too. */
int cuda_runner_attention(CudaRunner *r, int kv_layer, const StepLayout *L, int splits, Error *err);
/* Once at start-up: the fused decode gemvs against the separate launches;
 * a difference turns them off (logged). */
int cuda_runner_check_fused_decode(CudaRunner *r, Error *err);

/* cuda_runner_hybrid.cu */

/* Before the warm-up: the hybrid activations, the layer indexes and the
 * state pool (slots and checkpoints out of the memory budget, max_num_seqs
 * lowered to the slots there is room for); sets Runner.num_state_*. */
int cuda_hybrid_setup(CudaRunner *r, Error *err);
void cuda_hybrid_free(CudaRunner *r);
/* Layer l's token mixer into r->delta (r->h its input): Gated DeltaNet or gated attention. */
int cuda_hybrid_mixer(CudaRunner *r, int l, const StepLayout *L, int splits, Error *err);
/* A sparse layer's shared expert added into r->delta (nothing without one). */
int cuda_hybrid_shared_expert(CudaRunner *r, const CudaLayerWeights *W, int T, Error *err);
/* Checkpoints copied into slots before the step (restore), slots into
 * checkpoints after it (save), on the stream, outside any graph. */
int cuda_hybrid_restore(CudaRunner *r, const RunnerBatch *b, Error *err);
int cuda_hybrid_save(CudaRunner *r, const RunnerBatch *b, Error *err);


static inline size_t cuda_align4(size_t n) { return (n + 3) & ~(size_t)3; }

static inline KvCacheDtype cuda_runner_kv_dtype(const CudaRunner *r) {
    return r->kv_fp8 ? KV_CACHE_FP8 : KV_CACHE_BF16;
}

/* cuda_runner_memory.cu: the RoPE table, the activations and metadata
 * buffers, and the KV cache (last: it takes what the budget leaves). */
int cuda_runner_upload_rope(CudaRunner *r, Error *err);
int cuda_runner_alloc_activations(CudaRunner *r, Error *err);
int cuda_runner_alloc_kv_cache(CudaRunner *r, Error *err);

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
