/*
 * cuda_runner_memory.cu - the device memory a CUDA runner holds from
 * start-up on: the RoPE table, the activations and the step's metadata
 * buffers (sized once for the largest step), and the KV cache, which takes
 * what the GPU memory budget leaves once everything else is allocated.
 */
#include "cuda_runner.h" /* first: the C headers under extern "C" */
#include "cuda_runner_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "cuda_sampler.h"
#include "cuda_variants.h"

extern "C" {
#include "base/log.h"
}

/* Graph memory is allocated after the KV cache is sized: keep this much back. */
#define GRAPH_RESERVE_BYTES(n) ((size_t)(64u << 20) + (size_t)(n) * (4u << 20))

/* cos and sin of every (position, frequency), in double as the CPU runner;
 * the frequencies of rotary_dim (head_dim but in a hybrid, partial RoPE). */
int cuda_runner_upload_rope(CudaRunner *r, Error *err) {
    const int R = model_config_rotary_dim(&r->cfg);
    int half = R / 2, P = r->base.options.max_model_len;
    size_t n = (size_t)P * half * 2;
    float *table = (float *)malloc(sizeof(float) * n);
    if (!table) return error_set(err, "out of memory (RoPE table)");
    for (int i = 0; i < half; i++) {
        double inv_freq = 1.0 / pow(r->cfg.rope_theta, (2.0 * i) / R);
        for (int p = 0; p < P; p++) {
            double angle = (double)p * inv_freq;
            table[((size_t)p * half + i) * 2] = (float)cos(angle);
            table[((size_t)p * half + i) * 2 + 1] = (float)sin(angle);
        }
    }
    r->rope = (float *)cuda_alloc(sizeof(float) * n, err);
    int rc = r->rope ? cuda_upload(r->rope, table, sizeof(float) * n, err) : -1;
    free(table);
    return rc;
}

int cuda_runner_alloc_activations(CudaRunner *r, Error *err) {
    const ModelConfig *c = &r->cfg;
    const RunnerOptions *o = &r->base.options;
    size_t T = (size_t)o->max_num_batched_tokens, S = (size_t)o->max_num_seqs;
    size_t H = (size_t)c->hidden_size, I = 0; /* the dense MLP's width, if any layer has one */
    for (int l = 0; l < c->num_layers; l++)
        if (!model_config_layer_is_sparse(c, l)) I = (size_t)c->intermediate_size;
    size_t Q = (size_t)c->num_heads * c->head_dim, KV = (size_t)c->num_kv_heads * c->head_dim;
    r->mask_words = (c->vocab_size + 31) / 32;
    const size_t mask_bytes = S * (size_t)r->mask_words * sizeof(uint32_t);
    if (S * (size_t)r->mask_words > (size_t)INT32_MAX) /* CudaSampleRow.mask_offset is int32 */
        return error_set(err, "allowed-token masks of %zu rows x %d words do not fit int32 offsets",
                         S, r->mask_words);
    if (S * MAX_LOGIT_BIAS > (size_t)INT32_MAX) /* CudaSampleRow.bias_offset is int32 */
        return error_set(err, "logit_bias entries of %zu rows do not fit int32 offsets", S);
    r->bias_capacity = (int)(S * MAX_LOGIT_BIAS);
    const size_t bias_bytes = (size_t)r->bias_capacity * sizeof(LogitBias);
    struct {
        void **p;
        size_t bytes;
    } bufs[] = {
        {(void **)&r->x, T * H * 4},          {(void **)&r->delta, T * H * 4},
        {(void **)&r->x_spare, CUDA_GEMV_MAX_ROWS * H * 4},
        {(void **)&r->qkv, T * (Q + 2 * KV) * 4}, {(void **)&r->gate_up, T * 2 * I * 4},
        {(void **)&r->logits, S * c->vocab_size * 4}, {(void **)&r->h, T * H * 2},
        {(void **)&r->q, T * Q * 2},          {(void **)&r->attn, T * Q * 2},
        {(void **)&r->act, T * I * 2},        {(void **)&r->normed, S * H * 2},
        {(void **)&r->tokens_dev, S * 4},     {(void **)&r->pooled_dev, S * H * 4},
        {(void **)&r->sample_rows_dev, S * sizeof(CudaSampleRow)},
        {&r->sampler_workspace, cuda_sampler_workspace_bytes((int)S, c->vocab_size)},
        {(void **)&r->masks_dev, mask_bytes},
        {(void **)&r->biases_dev, bias_bytes},
        {(void **)&r->split_workspace, cuda_attention_split_workspace_bytes(c->head_dim, CUDA_MAX_SPLIT_BLOCKS)},
        {(void **)&r->split_counters, cuda_decode_attention_counters_bytes(CUDA_MAX_SPLIT_BLOCKS)},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (!(*bufs[i].p = cuda_alloc(bufs[i].bytes, err)))
            return error_prefix(err, "activations for %zu tokens", T);
    CUDA_TRY(cudaMemset(r->split_counters, 0, cuda_decode_attention_counters_bytes(CUDA_MAX_SPLIT_BLOCKS)),
             "clearing the attention split counters", err);
    /* the previous decode kernel reads a bf16 cache only */
    r->legacy_attention = cuda_variant_legacy("attention") && !r->kv_fp8;
    if (r->kv_fp8 && cuda_variant_legacy("attention"))
        log_info("NANOVLLM_CUDA_LEGACY=attention ignored: the previous decode kernel reads a bf16 KV cache only");
    if (r->kv_fp8) /* also asks, once, before any graph capture, which binary the GPU runs */
        log_info("fp8 KV cache: decode attention %s",
                 cuda_decode_attention_fp8_tensor_cores(c->head_dim, c->num_heads / c->num_kv_heads)
                     ? "on the tensor cores (mma.sync, q and P in f16)"
                     : "on FMAs (head group, head size, GPU or NANOVLLM_CUDA_LEGACY=fp8decode)");
    else if (!r->legacy_attention && cuda_decode_attention_bf16_tensor_cores(c->head_dim, c->num_heads / c->num_kv_heads))
        log_info("decode attention on the tensor cores (mma.sync, P in bf16): %d query heads a KV head",
                 c->num_heads / c->num_kv_heads);

    /* NANOVLLM_CUDA_LEGACY=fuse keeps RMSNorm and SiLU x up as launches of
     * their own; "gemv" (cuBLAS for every batch) has no gemv to fuse into */
    r->fuse_decode = !cuda_variant_legacy("fuse") && !cuda_variant_legacy("gemv");

    /* prompt steps on the mma.sync flash attention where it covers the head
     * size (cuda_flash_attention.cu); NANOVLLM_CUDA_LEGACY=prefill keeps the
     * WMMA kernel, as head_dim 256 does */
    r->flash_prefill = !cuda_variant_legacy("prefill") &&
                       cuda_flash_attention_supports(c->num_heads, c->num_kv_heads, c->head_dim);
    r->tile_tokens = r->flash_prefill ? cuda_flash_attention_tile_tokens(c->num_heads, c->num_kv_heads)
                                      : cuda_attention_tile_tokens(c->num_heads, c->num_kv_heads);
    r->max_blocks_per_seq = (o->max_model_len + o->block_size - 1) / o->block_size;
    r->max_items = (int)(T / (size_t)r->tile_tokens + S);
    r->meta_capacity = 3 * cuda_align4(T) + cuda_align4(S) + cuda_align4(2 * S) + 4 * S + cuda_align4(3 * (size_t)r->max_items) +
                       S * (size_t)r->max_blocks_per_seq + (r->hybrid ? 4 * S : 0);
    r->meta_dev = (int32_t *)cuda_alloc(sizeof(int32_t) * r->meta_capacity, err);
    if (!r->meta_dev) return -1;
    CUDA_TRY(cudaMallocHost((void **)&r->meta_host, sizeof(int32_t) * r->meta_capacity),
             "allocating pinned host memory", err);
    CUDA_TRY(cudaMallocHost((void **)&r->sample_rows_host, sizeof(CudaSampleRow) * S),
             "allocating pinned host memory", err);
    CUDA_TRY(cudaMallocHost((void **)&r->masks_host, mask_bytes), "allocating pinned host memory", err);
    CUDA_TRY(cudaMallocHost((void **)&r->biases_host, bias_bytes), "allocating pinned host memory", err);
    if (cuda_runner_reserve_penalties(r, (int)S * 64, 0, err)) return -1;
    CUDA_TRY(cudaMallocHost((void **)&r->tokens_host, sizeof(int32_t) * S),
             "allocating pinned host memory", err);
    CUDA_TRY(cudaMallocHost((void **)&r->logits_host, sizeof(float) * S * c->vocab_size),
             "allocating pinned host memory", err);
    CUDA_TRY(cudaMallocHost((void **)&r->pooled_host, sizeof(float) * S * H),
             "allocating pinned host memory", err);
    r->padded = (RunnerSeq *)calloc(S, sizeof(RunnerSeq));
    if (!r->padded) return error_set(err, "out of memory");
    if (c->num_experts > 0 &&
        cuda_moe_create(&r->moe, c->hidden_size, c->moe_intermediate_size, c->num_experts,
                        c->num_experts_per_tok, c->norm_topk_prob, (int)T, err))
        return -1;
    return sampler_scratch_init(&r->sampler, c->vocab_size, err);
}

/* The KV cache gets total * utilisation minus what is in use now (weights,
 * activations, workspace, the CUDA context), in whole blocks, less what the
 * decode graphs will take. nano-vllm also subtracts (peak - current) of
 * PyTorch's allocator, memory a warm-up touched and released for reuse;
 * here every buffer the warm-up used stays allocated for good (and cuBLAS
 * has a fixed workspace), so what is in use now is the peak. One block more
 * than the block manager is told of is the padding block. */
int cuda_runner_alloc_kv_cache(CudaRunner *r, Error *err) {
    const RunnerOptions *o = &r->base.options;
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes), "reading the GPU's free memory", err);
    double used = (double)(total_bytes - free_bytes);
    double budget = (double)total_bytes * o->gpu_memory_utilization - used;
    if (!o->enforce_eager) budget -= (double)GRAPH_RESERVE_BYTES(MAX_GRAPHS);
    size_t block_bytes = cuda_runner_block_bytes(&r->cfg, o->block_size, cuda_runner_kv_dtype(r));
    size_t blocks = budget > 0 ? (size_t)(budget / (double)block_bytes) : 0;
    if (o->num_gpu_blocks_override > 0) blocks = (size_t)o->num_gpu_blocks_override;
    if (blocks < 1)
        return error_set(err, "no GPU memory left for the KV cache: %.2f GB of %.2f GB are in use "
                              "(weights, activations, CUDA) and --gpu-memory-utilization %.2f allows "
                              "%.2f GB; raise it or lower --max-num-batched-tokens / --max-num-seqs",
                         used / 1e9, total_bytes / 1e9, o->gpu_memory_utilization,
                         total_bytes * o->gpu_memory_utilization / 1e9);
    size_t max_blocks = (size_t)INT32_MAX / (size_t)o->block_size - 1; /* slots are int32 */
    if (blocks > max_blocks) blocks = max_blocks;
    r->kv = cuda_alloc((blocks + 1) * block_bytes, err);
    if (!r->kv) return error_prefix(err, "KV cache of %zu blocks", blocks);
    r->pad_block = (int32_t)blocks;
    r->layer_elems = (blocks + 1) * (size_t)o->block_size * r->cfg.num_kv_heads * r->cfg.head_dim;
    r->base.num_kv_blocks = (int)blocks;
    r->base.kv_cache_bytes = blocks * block_bytes + r->hy.bytes; /* runner.h: the state included */
    return 0;
}
