/*
 * runner.h - the boundary between the engine and a compute backend.
 *
 * The engine (scheduler, block manager, sampler) decides *what* to compute;
 * a runner computes it: given a batch of sequences, each with its new tokens,
 * where they start and the KV blocks that hold (and will hold) its context,
 * it runs the model over the new tokens, writes their K/V into those blocks
 * and returns one sampled token per sequence. Prefill, prefill on top of a
 * cached prefix, chunked prefill and decode are the same call with different
 * numbers. Sampling happens inside the runner (logits never leave the
 * device), with the semantics of sampler.h. Both backends (cpu/ and cuda/)
 * fill the same vtable, so nothing above this file knows which one runs; the
 * program that assembles them chooses (cli/backend_setup.c).
 *
 * KV blocks (both backends): the token at position p of a sequence lives
 * at offset p % block_size of block block_table[p / block_size]. Inside a
 * block each backend lays out what suits its attention: CUDA per layer
 * [num_blocks, block_size, num_kv_heads, head_dim]; the CPU head-major,
 * [num_blocks, num_kv_heads, block_size, head_dim], so one head's rows of a
 * block are one sequential read.
 */
#ifndef NANOVLLM_RUNNER_H
#define NANOVLLM_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sampler.h"
#include "model/model_pooling.h"
#include "model/model_weights.h"

typedef struct RunnerSeq {
    const int32_t *tokens;      /* the new tokens of this step */
    int num_tokens;             /* >= 1 */
    int start_pos;              /* tokens already in the KV cache = position of tokens[0] */
    const int32_t *block_table; /* KV block ids covering positions [0, start_pos + num_tokens) */
    int num_blocks;
    /* A model with recurrent state (Runner.num_state_slots > 0: Qwen3.5's
     * Gated DeltaNet layers): the slot holding this sequence's state, in
     * [0, num_state_slots), the same slot for all its steps; a step with
     * start_pos 0 starts it afresh, a later one continues what the previous
     * step left. -1 for other models. */
    int state_slot;
    /* Prefix caching for such models, with Runner.num_state_checkpoints > 0:
     * restore copies checkpoint restore_checkpoint into the slot before the
     * step (a sequence starting at start_pos > 0 from a cached prefix whose
     * state was saved there); save copies the slot, as the step leaves it,
     * into save_checkpoint after the step. */
    bool restore, save;
    int restore_checkpoint, save_checkpoint;
    bool compute_logits; /* false for a prefill chunk that is not the prompt's last */
    SampleInput sample;  /* how to choose the token; sample.params NULL means greedy */
    /* An embedding request's rows (POOLING_NONE for generation): the
     * final-normed hidden states, float32, into pooled [hidden_size] (host
     * memory, the engine's): POOLING_LAST writes the step's last new token's
     * (the engine asks for it only on the prompt's last chunk); POOLING_MEAN
     * adds the sum over the step's new tokens (the engine zeroes it before
     * the first and divides at the end); POOLING_CLS writes position 0's,
     * in the step whose start_pos is 0. Such a row has no compute_logits:
     * no lm_head, no sampling. */
    PoolingMode pooling;
    float *pooled;
} RunnerSeq;

typedef struct RunnerBatch {
    const RunnerSeq *seqs;
    int num_seqs;
    /* Optional copies of the logits for tests and tools (NULL: not wanted):
     * last_logits [num_seqs, vocab], row of each sequence's last token (left
     * untouched for sequences without compute_logits); all_logits
     * [total new tokens, vocab], every new token of every sequence, in order. */
    float *last_logits;
    float *all_logits;
    /* Optional [num_seqs]: filled for sequences whose params ask for logprobs. */
    SampleLogprobs *logprobs;
} RunnerBatch;

/* What the KV cache stores, as vLLM's --kv-cache-dtype: auto is bf16 when
 * the model's weights are bf16 (its activations were trained at that
 * precision, and the cache is then half the bytes to read per decode token),
 * else float32. A backend resolves auto with kv_cache_dtype_resolve().
 *
 * fp8 (vLLM's "fp8", alias "fp8_e4m3") stores each K and V value as one
 * float8_e4m3fn byte with a float scale per cache, one for K and one for V:
 * stored = e4m3(x / scale) (round to nearest even, as
 * fp8_e4m3_from_float in model/weight_format.h), read = e4m3 * scale. Both
 * scales are 1.0 (KV_FP8_DEFAULT_SCALE), vLLM's default for a checkpoint
 * without calibrated k_scale / v_scale; nothing is calibrated. Values
 * beyond +-448 (e4m3's largest) are stored as +-448: saturation is the
 * defined behaviour, as in vLLM's fp8 cache. Half the bytes of bf16 per
 * token, so twice the tokens for the same cache memory and half the bytes
 * decode attention reads; 3 significant bits instead of 8. */
typedef enum KvCacheDtype { KV_CACHE_AUTO, KV_CACHE_BF16, KV_CACHE_F32, KV_CACHE_FP8 } KvCacheDtype;

#define KV_FP8_DEFAULT_SCALE 1.0f

/* "bfloat16", "float32", "fp8_e4m3" or "auto": for logs and JSON. */
const char *kv_cache_dtype_name(KvCacheDtype d);

/* What a projection's inputs are rounded to, as vLLM's --dtype: bf16 rounds
 * the activations to bf16 where they enter each matmul (the weights are bf16
 * already; products and sums stay float32, as on a GPU), f32 keeps them
 * float32 (then every product of a bf16 weight is exact). auto is bf16 for a
 * bf16 model where the backend multiplies bf16 natively (CUDA; CPUs with
 * AVX512-BF16 or AMX: twice the float32 rate), else f32. Resolved by the
 * backend (cpu_runner, cuda_runner). */
typedef enum ComputeDtype { COMPUTE_AUTO, COMPUTE_BF16, COMPUTE_F32 } ComputeDtype;

typedef struct RunnerOptions {
    const char *device;            /* "auto", "cpu", "cuda" or "null" (chosen by the caller) */
    int block_size;                /* tokens per KV block (power of two, 16..256) */
    size_t kv_cache_bytes;         /* CPU: KV cache budget */
    double gpu_memory_utilization; /* CUDA: fraction of the GPU memory to use */
    int num_gpu_blocks_override;   /* CUDA: > 0 sets the KV block count (as vLLM's flag) */
    bool enforce_eager;            /* CUDA: no CUDA graphs (as vLLM's flag) */
    int max_num_seqs;              /* sequences per step */
    int max_num_batched_tokens;    /* new tokens per step */
    int max_model_len;             /* longest context */
    int num_threads;               /* CPU threads, 0 = one per core */
    KvCacheDtype kv_cache_dtype;   /* auto (default), bf16, f32 or fp8 (CUDA: bf16 only) */
    ComputeDtype dtype;            /* auto (default), bf16 or f32 (CUDA: bf16 only) */
    /* Where the weights come from, for whoever loads them (cli/backend_setup.c),
     * not the backends: "auto" (the checkpoint) or "dummy" (random, from
     * config.json alone: model_weights_load_dummy), as vLLM's --load-format. */
    const char *load_format;
} RunnerOptions;

typedef struct Runner Runner;

typedef struct RunnerOps {
    /* tokens_out[i]: the token sampled for sequence i (sampler.h), or -1
     * without compute_logits. */
    int (*step)(Runner *r, const RunnerBatch *batch, int32_t *tokens_out, Error *err);
    void (*destroy)(Runner *r);
} RunnerOps;

struct Runner {
    const RunnerOps *ops;
    const char *device;        /* "cpu" or "cuda" */
    const ModelWeights *model; /* borrowed: must outlive the runner */
    RunnerOptions options;     /* as resolved (device, threads, ...) */
    int num_kv_blocks;         /* KV capacity = num_kv_blocks * block_size tokens */
    size_t kv_cache_bytes;     /* actually allocated (the state slots included) */
    int num_state_slots;       /* recurrent-state slots (RunnerSeq.state_slot); 0: none needed */
    int num_state_checkpoints; /* copies of a slot kept for prefix caching (RunnerSeq.save) */
    char description[256];     /* one line for the start-up log */
};

/* auto -> bf16 if the config's torch_dtype is "bfloat16", f32 if it names
 * another dtype, and without one the loaded weights' type (embed_tokens;
 * dummy weights are bf16); bf16, f32 and fp8 stay as they are. */
KvCacheDtype kv_cache_dtype_resolve(KvCacheDtype d, const ModelWeights *model);

/* True if the model's weights are bf16 (the config's torch_dtype, else the
 * loaded embedding's type): what auto means for both dtypes above. */
bool model_is_bf16(const ModelWeights *model);

/* Options with nanovllm's defaults (see config/defaults.h). */
RunnerOptions runner_default_options(void);

/* How a backend shares a memory budget of `budget` bytes (the CPU's
 * --kv-cache-memory, what --gpu-memory-utilization leaves on a GPU) with a
 * hybrid model's state, each unit unit_bytes (a sequence's whole state):
 * the units take at most half of it, two per sequence that may run (a slot
 * and a checkpoint) up to max_num_seqs; with less room, half of them slots
 * (at least one), the rest checkpoints. Returns -1 when not even one unit
 * fits. */
int runner_plan_state_units(double budget, size_t unit_bytes, int max_num_seqs, int *num_slots,
                            int *num_checkpoints);

/* For a backend's create: fills max_model_len 0 with the model's and checks
 * the options every backend relies on. */
int runner_resolve_options(RunnerOptions *o, const ModelConfig *c, Error *err);

int runner_step(Runner *r, const RunnerBatch *batch, int32_t *tokens_out, Error *err);
void runner_destroy(Runner *r);

/* Checks a batch against the model and the runner's limits; both backends
 * call it first, so a bad batch is an error and never an out-of-bounds access. */
int runner_validate_batch(const Runner *r, const RunnerBatch *batch, Error *err);

/* A checkpoint and the runner made for it. Which backend makes it is the
 * program's choice (cli/backend_setup.h: serve, generate and bench); the
 * server is handed the loader, so it depends on no backend. */
typedef struct LoadedModel {
    ModelWeights weights;
    Runner *runner;
    double load_seconds; /* config + checkpoint + runner creation */
} LoadedModel;

typedef struct ModelLoader {
    int (*open)(LoadedModel *m, const char *model_dir, const RunnerOptions *opts, Error *err);
    void (*close)(LoadedModel *m); /* also after a failed open */
} ModelLoader;

#endif
