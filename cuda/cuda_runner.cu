/*
 * cuda_runner.cu - Qwen3 forward pass on the GPU (see cuda_runner.h).
 *
 * One step, read top to bottom in step_on_stream():
 *   copy the step's metadata (tokens, positions, KV slots, block tables,
 *   attention work items) to the GPU in one transfer ->
 *   the layers (cuda_runner_layers.cu): embed -> N x [RMSNorm -> qkv GEMM -> q/k norm + RoPE + KV store ->
 *   paged attention -> o_proj GEMM -> residual + RMSNorm -> gate_up GEMM ->
 *   SiLU-and-mul -> down GEMM (a sparse layer: router GEMM -> the experts,
 *   cuda_moe.h) -> residual + RMSNorm] -> the embedding rows' pooled final
 *   norm (float32, copied back) -> gather the rows that need logits ->
 *   lm_head GEMM -> the GPU sampler (cuda_sampler.h) -> copy
 *   the tokens back
 * all on one stream, with one synchronisation at the end of the step.
 * Activations are allocated once for the largest step
 * (max_num_batched_tokens tokens, max_num_seqs logits rows).
 *
 * Decode steps (one new token per sequence) replay a CUDA graph captured at
 * start-up for a bucket of batch sizes (1, 2, 4, 8, then multiples of 16):
 * the batch is padded to its bucket with dummy sequences whose one token
 * lives in a padding block the block manager never sees, and the step's
 * metadata sits at offsets that depend only on the bucket, so the graph's
 * baked-in pointers stay right. Decode attention splits long contexts over
 * thread blocks (cuda_decode_attention.cu); the split count is fixed per
 * bucket and each sequence uses as many of its splits as its length needs.
 * Steps with prompt tokens use the tensor-core attention
 * (cuda_prefill_attention.cu). Qwen3.5 (hybrid) models swap each layer's
 * attention for cuda_runner_hybrid.cu's mixers and keep state slots there.
 */
#include "cuda_runner.h"
#include "cuda_runner_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_gdn_plan.h"
#include "cuda_kernels.h"
#include "cuda_moe.h"
#include "cuda_pdl.h"
#include "cuda_sampler.h"
#include "cuda_variants.h"
#include "cuda_weights.h"

extern "C" {
#include "base/log.h"
#include "engine/sampler.h"
}


/* The bf16 matrices (embeddings, lm_head). */
static CudaMatrix bf16_matrix(const uint16_t *w) { return (CudaMatrix){w, NULL, NULL}; }

/* ---- one step -------------------------------------------------------------------------- */


/* The token range [*first, *first + return) sequence q pools this step
 * (runner.h), its tokens starting at t0 in the batch; 0: none. */
static int pool_range(const RunnerSeq *q, int t0, int *first) {
    *first = t0;
    switch (q->pooling) {
    case POOLING_LAST: *first = t0 + q->num_tokens - 1; return 1;
    case POOLING_MEAN: return q->num_tokens;
    case POOLING_CLS: return q->start_pos == 0 ? 1 : 0;
    default: return 0;
    }
}

/* Flattens the batch into meta_host: per token its id, position and KV slot;
 * per sequence its CudaAttnSeq and block table; the attention items; the
 * rows whose logits are needed; the embedding rows' token ranges. */
static void prepare(CudaRunner *r, const RunnerBatch *b, StepLayout *L) {
    int bs = r->base.options.block_size, T = 0, n_items = 0, n_rows = 0, n_pool = 0;
    L->max_seq_rows = 0;
    for (int s = 0; s < b->num_seqs; s++) {
        T += b->seqs[s].num_tokens;
        if (b->seqs[s].num_tokens > L->max_seq_rows) L->max_seq_rows = b->seqs[s].num_tokens;
    }
    L->num_tokens = T;
    L->tokens = 0;
    L->positions = cuda_align4((size_t)T);
    L->slots = L->positions + cuda_align4((size_t)T);
    L->logit_rows = L->slots + cuda_align4((size_t)T);
    L->pool = L->logit_rows + cuda_align4((size_t)b->num_seqs);
    L->seqs = L->pool + cuda_align4(2 * (size_t)b->num_seqs);
    L->items = L->seqs + 4 * (size_t)b->num_seqs;
    size_t items_cap = 3 * (size_t)r->max_items;
    L->gdn = L->items + cuda_align4(items_cap);
    L->tables = L->gdn + (r->hybrid ? 4 * (size_t)b->num_seqs : 0);
    L->num_seqs = b->num_seqs;
    int32_t *m = r->meta_host;
    CudaAttnSeq *seqs = (CudaAttnSeq *)(m + L->seqs);
    CudaGdnSeq *gdn = (CudaGdnSeq *)(m + L->gdn);
    CudaAttnItem *items = (CudaAttnItem *)(m + L->items);
    size_t table_at = L->tables;
    int t = 0;
    for (int s = 0; s < b->num_seqs; s++) {
        const RunnerSeq *q = &b->seqs[s];
        int blocks = (q->start_pos + q->num_tokens + bs - 1) / bs, first;
        int count = pool_range(q, t, &first);
        if (count > 0) {
            m[L->pool + 2 * n_pool] = first;
            m[L->pool + 2 * n_pool++ + 1] = count;
        }
        seqs[s] = (CudaAttnSeq){t, q->start_pos, q->num_tokens, (int32_t)(table_at - L->tables)};
        if (r->hybrid) /* a padding sequence (no slot): 0 rows, a no-op */
            gdn[s] = q->state_slot >= 0 ? (CudaGdnSeq){t, q->num_tokens, q->state_slot, q->start_pos == 0}
                                        : (CudaGdnSeq){t, 0, 0, 0};
        memcpy(m + table_at, q->block_table, sizeof(int32_t) * (size_t)blocks);
        table_at += (size_t)blocks;
        for (int i = 0; i < q->num_tokens; i++, t++) {
            int pos = q->start_pos + i;
            m[L->tokens + t] = q->tokens[i];
            m[L->positions + t] = pos;
            m[L->slots + t] = q->block_table[pos / bs] * bs + pos % bs;
        }
        for (int t0 = 0; t0 < q->num_tokens; t0 += r->tile_tokens) {
            int len = q->num_tokens - t0 < r->tile_tokens ? q->num_tokens - t0 : r->tile_tokens;
            items[n_items++] = (CudaAttnItem){s, t0, len};
        }
        if (q->compute_logits) m[L->logit_rows + n_rows++] = t - 1;
    }
    L->num_items = n_items;
    L->num_logit_rows = n_rows;
    L->num_pool_rows = n_pool;
    L->total = table_at;
}

/* The split count of a decode step over num_items sequences of at most
 * max_keys keys, for the decode kernel in use. */
static int decode_splits(const CudaRunner *r, int num_items, int max_keys) {
    const ModelConfig *c = &r->cfg;
    const int sms = r->prop.multiProcessorCount;
    if (r->legacy_attention)
        return cuda_attention_choose_splits(num_items, c->num_kv_heads, max_keys, sms, CUDA_MAX_SPLIT_BLOCKS);
    return cuda_decode_attention_choose_splits(num_items, c->num_heads, c->num_kv_heads, max_keys, sms,
                                               CUDA_MAX_SPLIT_BLOCKS);
}

/* Every token's logits into the caller's all_logits, max_num_seqs rows at a time. */
static int copy_all_logits(CudaRunner *r, const RunnerBatch *b, int num_tokens, Error *err) {
    const int H = r->cfg.hidden_size, V = r->cfg.vocab_size, S = r->base.options.max_num_seqs;
    for (int t0 = 0; t0 < num_tokens; t0 += S) {
        int n = num_tokens - t0 < S ? num_tokens - t0 : S;
        if (runner_gemm(r, r->logits, r->h + (size_t)t0 * H, bf16_matrix(r->weights.lm_head), n, V, H, err))
            return -1;
        CUDA_TRY(cudaMemcpyAsync(b->all_logits + (size_t)t0 * V, r->logits, sizeof(float) * n * V,
                                 cudaMemcpyDeviceToHost, r->stream),
                 "copying logits from the GPU", err);
    }
    return 0;
}

/* Decode: every sequence brings one token and wants its logits. */
static bool is_decode(const RunnerBatch *b) {
    for (int s = 0; s < b->num_seqs; s++)
        if (b->seqs[s].num_tokens != 1 || !b->seqs[s].compute_logits) return false;
    return b->num_seqs > 0;
}

/* The smallest captured bucket that holds n sequences, or -1. */
static int graph_for(const CudaRunner *r, int n) {
    for (int g = 0; g < r->num_graphs; g++)
        if (r->graph_batch[g] >= n) return g;
    return -1;
}

/* A padding sequence: token 0 at position 0, written to the padding block. */
static RunnerSeq padding_seq(CudaRunner *r) {
    static const int32_t token = 0;
    return (RunnerSeq){&token, 1, 0, &r->pad_block, 1, -1, false, false, -1, -1, true, {}, POOLING_NONE, NULL};
}

/* b's sequences followed by padding up to n, in r->padded. */
static RunnerBatch pad_batch(CudaRunner *r, const RunnerBatch *b, int n) {
    for (int s = 0; s < n; s++) r->padded[s] = s < b->num_seqs ? b->seqs[s] : padding_seq(r);
    return (RunnerBatch){r->padded, n, NULL, NULL, NULL};
}

/* The forward and the lm_head over the rows that need logits, into
 * r->logits (row i: the i-th sequence with compute_logits). A decode step
 * replays its bucket's graph; any other step is launched kernel by kernel. */
static int run_model(CudaRunner *r, const RunnerBatch *b, StepLayout *L, Error *err) {
    const ModelConfig *c = &r->cfg;
    const bool decode = is_decode(b);
    const int g = decode && !b->all_logits ? graph_for(r, b->num_seqs) : -1;
    RunnerBatch padded;
    if (g >= 0) padded = pad_batch(r, b, r->graph_batch[g]);
    prepare(r, g >= 0 ? &padded : b, L);
    CUDA_TRY(cudaMemcpyAsync(r->meta_dev, r->meta_host, sizeof(int32_t) * L->total,
                             cudaMemcpyHostToDevice, r->stream),
             "copying the batch to the GPU", err);
    if (g >= 0) {
        CUDA_TRY(cudaGraphLaunch(r->graphs[g], r->stream), "launching the decode graph", err);
        return 0;
    }
    int splits = 0; /* prompt tokens: tensor cores */
    if (decode) {
        int longest = 0;
        for (int s = 0; s < b->num_seqs; s++)
            if (b->seqs[s].start_pos + 1 > longest) longest = b->seqs[s].start_pos + 1;
        splits = decode_splits(r, L->num_items, longest);
    }
    if (cuda_runner_forward(r, L, splits, err)) return -1;
    if (L->num_pool_rows > 0) { /* x: the residual stream after the last layer */
        const size_t bytes = sizeof(float) * (size_t)L->num_pool_rows * c->hidden_size;
        if (cuda_pool_rows(r->pooled_dev, r->residual, r->weights.final_norm, r->meta_dev + L->pool,
                           L->num_pool_rows, c->hidden_size, (float)c->rms_norm_eps, r->stream, err))
            return -1;
        CUDA_TRY(cudaMemcpyAsync(r->pooled_host, r->pooled_dev, bytes, cudaMemcpyDeviceToHost, r->stream),
                 "copying embeddings from the GPU", err);
    }
    if (b->all_logits || L->num_logit_rows == 0) return 0;
    const uint16_t *rows = r->h; /* decode: every token is a logits row, in order */
    if (!decode) {
        if (cuda_gather_rows(r->normed, r->h, r->meta_dev + L->logit_rows, L->num_logit_rows,
                             c->hidden_size, r->stream, err))
            return -1;
        rows = r->normed;
    }
    return runner_gemm(r, r->logits, rows, bf16_matrix(r->weights.lm_head), L->num_logit_rows, c->vocab_size,
                c->hidden_size, err);
}

/* After the step's synchronisation: each embedding row's pooled vector
 * from pooled_host (in prepare's order) into its sequence's buffer. */
static void deliver_pooled(CudaRunner *r, const RunnerBatch *b) {
    const size_t H = (size_t)r->cfg.hidden_size;
    for (int s = 0, t = 0, row = 0; s < b->num_seqs; t += b->seqs[s].num_tokens, s++) {
        const RunnerSeq *q = &b->seqs[s];
        int first;
        if (pool_range(q, t, &first) == 0) continue;
        const float *v = r->pooled_host + (size_t)row++ * H;
        if (q->pooling == POOLING_MEAN)
            for (size_t j = 0; j < H; j++) q->pooled[j] += v[j];
        else
            memcpy(q->pooled, v, sizeof(float) * H);
    }
}

static int step_on_stream(Runner *base, const RunnerBatch *b, int32_t *out, Error *err) {
    CudaRunner *r = (CudaRunner *)base;
    if (runner_validate_batch(base, b, err)) return -1;
    const size_t V = (size_t)r->cfg.vocab_size;
    StepLayout L;
    if ((r->hybrid && cuda_hybrid_restore(r, b, err)) || run_model(r, b, &L, err) ||
        (r->hybrid && cuda_hybrid_save(r, b, err)))
        return -1;

    if (b->all_logits) { /* tests and tools: everything through the host */
        if (copy_all_logits(r, b, L.num_tokens, err)) return -1;
        CUDA_TRY(cudaStreamSynchronize(r->stream), "running the step", err);
        deliver_pooled(r, b);
        int t = 0;
        for (int s = 0; s < b->num_seqs; s++) {
            t += b->seqs[s].num_tokens;
            out[s] = -1;
            if (!b->seqs[s].compute_logits) continue;
            const float *row = b->all_logits + (size_t)(t - 1) * V;
            if (b->last_logits) memcpy(b->last_logits + (size_t)s * V, row, sizeof(float) * V);
            memcpy(r->logits_host, row, sizeof(float) * V); /* the caller's stay raw */
            out[s] = cuda_runner_sample_on_host(r, r->logits_host, b, s);
        }
        return 0;
    }

    /* The real rows come first (padding, if any, after them). Raw logits
     * leave before the GPU sampler rewrites the rows in place: rows the CPU
     * sampler takes (logprobs) and logits a caller asked for. */
    int n = 0;
    for (int s = 0; s < b->num_seqs; s++) {
        if (!b->seqs[s].compute_logits) continue;
        const float *src = r->logits + (size_t)n * V;
        if (cuda_runner_sampled_on_host(&b->seqs[s].sample))
            CUDA_TRY(cudaMemcpyAsync(r->logits_host + (size_t)n * V, src, sizeof(float) * V,
                                     cudaMemcpyDeviceToHost, r->stream),
                     "copying logits from the GPU", err);
        if (b->last_logits)
            CUDA_TRY(cudaMemcpyAsync(b->last_logits + (size_t)s * V, src, sizeof(float) * V,
                                     cudaMemcpyDeviceToHost, r->stream),
                     "copying logits from the GPU", err);
        n++;
    }
    if (n > 0) {
        if (cuda_runner_upload_sampling(r, b, err) ||
            cuda_sample(r->tokens_dev, r->logits, n, (int)V, r->sample_rows_dev, r->penalties_dev,
                        r->biases_dev, r->masks_dev, r->sampler_workspace, r->stream, err))
            return -1;
        CUDA_TRY(cudaMemcpyAsync(r->tokens_host, r->tokens_dev, sizeof(int32_t) * n,
                                 cudaMemcpyDeviceToHost, r->stream),
                 "copying tokens from the GPU", err);
    }
    CUDA_TRY(cudaStreamSynchronize(r->stream), "running the step", err);
    deliver_pooled(r, b);
    for (int s = 0, row = 0; s < b->num_seqs; s++) {
        out[s] = -1;
        if (!b->seqs[s].compute_logits) continue;
        out[s] = cuda_runner_sampled_on_host(&b->seqs[s].sample)
                     ? cuda_runner_sample_on_host(r, r->logits_host + (size_t)row * V, b, s)
                     : r->tokens_host[row];
        row++;
    }
    return 0;
}

/* A failed step may leave copies in flight from the pinned staging buffers
 * the next step rewrites: drain the stream before the error goes up. */
static int cuda_step(Runner *base, const RunnerBatch *b, int32_t *out, Error *err) {
    int rc = step_on_stream(base, b, out, err);
    if (rc) cudaStreamSynchronize(((CudaRunner *)base)->stream);
    return rc;
}

/* ---- creation ---------------------------------------------------------------------------- */

static void cuda_destroy(Runner *base) {
    CudaRunner *r = (CudaRunner *)base;
    if (!r) return;
    if (r->stream) cudaStreamSynchronize(r->stream); /* nothing may still use what is freed */
    for (int g = 0; g < r->num_graphs; g++) cudaGraphExecDestroy(r->graphs[g]);
    free(r->padded);
    cuda_matmul_destroy(r->matmul);
    cuda_weights_free(&r->weights);
    cuda_moe_free(&r->moe);
    cuda_hybrid_free(r);
    void *device[] = {r->rope, r->kv, r->x, r->x_spare, r->delta, r->qkv, r->gate_up,
                      r->logits, r->h, r->q, r->attn, r->act, r->normed, r->tokens_dev, r->meta_dev,
                      r->split_workspace, r->split_counters, r->sample_rows_dev, r->penalties_dev, r->sampler_workspace,
                      r->masks_dev, r->biases_dev, r->pooled_dev};
    for (size_t i = 0; i < sizeof device / sizeof device[0]; i++) cuda_free(device[i]);
    void *pinned[] = {r->meta_host, r->tokens_host, r->logits_host, r->sample_rows_host,
                      r->penalties_host, r->masks_host, r->biases_host, r->pooled_host};
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++)
        if (pinned[i]) cudaFreeHost(pinned[i]);
    if (r->stream) cudaStreamDestroy(r->stream);
    sampler_scratch_free(&r->sampler);
    free(r);
}

static const RunnerOps CUDA_OPS = {cuda_step, cuda_destroy};

static int pick_device(CudaRunner *r, Error *err) {
    int count = 0;
    CUDA_TRY(cudaGetDeviceCount(&count), "looking for a GPU", err);
    if (count < 1) return error_set(err, "no CUDA GPU available");
    CUDA_TRY(cudaSetDevice(0), "selecting GPU 0", err);
    CUDA_TRY(cudaGetDeviceProperties(&r->prop, 0), "reading GPU 0's properties", err);
    if (r->prop.major < 8)
        return error_set(err, "%s (sm_%d%d) has no bf16 support; the CUDA runner needs sm_80 or newer",
                         r->prop.name, r->prop.major, r->prop.minor);
    return 0;
}

/* cuBLAS, before the weights (a missing library fails fast); its FP8
 * scratch once they are known (cuda_matmul_reserve_fp8). */
static int setup_matmul(CudaRunner *r, Error *err) {
    r->matmul = cuda_matmul_create(r->stream, err);
    return r->matmul ? 0 : -1;
}

/* Runs the largest prefill and the largest decode step once on a KV cache
 * just big enough, so that whatever the first real steps would allocate
 * (cuBLAS's heuristics, lazily loaded kernels) is allocated now. */
static int warm_up(CudaRunner *r, Error *err) {
    RunnerOptions *o = &r->base.options;
    int prefill = o->max_num_batched_tokens < o->max_model_len ? o->max_num_batched_tokens
                                                               : o->max_model_len;
    int blocks = (prefill + o->block_size - 1) / o->block_size;
    int decode = o->max_num_seqs < o->max_num_batched_tokens ? o->max_num_seqs : o->max_num_batched_tokens;
    size_t block_bytes = cuda_runner_block_bytes(&r->cfg, o->block_size, cuda_runner_kv_dtype(r));
    r->kv = cuda_alloc(blocks * block_bytes, err);
    int32_t *tokens = (int32_t *)calloc((size_t)prefill, sizeof(int32_t));
    int32_t *table = (int32_t *)calloc((size_t)blocks, sizeof(int32_t));
    RunnerSeq *seqs = (RunnerSeq *)calloc((size_t)decode, sizeof(RunnerSeq));
    int32_t *out = (int32_t *)calloc((size_t)decode, sizeof(int32_t));
    int rc = -1;
    if (!r->kv) goto done;
    if (!tokens || !table || !seqs || !out) {
        error_set(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < blocks; i++) table[i] = i;
    r->layer_elems = (size_t)blocks * o->block_size * r->cfg.num_kv_heads * r->cfg.head_dim;
    r->base.num_kv_blocks = blocks;
    {
        seqs[0] = (RunnerSeq){tokens, prefill, 0, table, blocks, -1, false, false, -1, -1, true, {}, POOLING_NONE, NULL};
        if (r->hybrid) seqs[0].state_slot = 0; /* the slots are as free as the blocks */
        RunnerBatch one = {seqs, 1, NULL, NULL, NULL};
        if (cuda_step(&r->base, &one, out, err)) goto done;
        for (int s = 0; s < decode; s++) seqs[s] = (RunnerSeq){tokens, 1, 0, table, 1, r->hybrid ? s : -1, false, false, -1, -1, true, {}, POOLING_NONE, NULL};
        RunnerBatch many = {seqs, decode, NULL, NULL, NULL};
        if (cuda_step(&r->base, &many, out, err)) goto done;
    }
    rc = 0;
done:
    if (rc) error_prefix(err, "warm-up step");
    cuda_free(r->kv);
    r->kv = NULL;
    r->base.num_kv_blocks = 0;
    free(tokens);
    free(table);
    free(seqs);
    free(out);
    return rc;
}

/* A decode step's forward and lm_head: every row is a logits row. */
static int decode_forward(CudaRunner *r, const StepLayout *L, int batch, int splits, Error *err) {
    if (cuda_runner_forward(r, L, splits, err)) return -1;
    return runner_gemm(r, r->logits, r->h, bf16_matrix(r->weights.lm_head), batch, r->cfg.vocab_size,
                r->cfg.hidden_size, err);
}

/* Captures the decode step (forward and lm_head) of one bucket of batch
 * sizes, on a batch of padding sequences laid out as the real ones will be. */
static int capture_graph(CudaRunner *r, int batch, int splits, cudaGraphExec_t *exec, Error *err) {
    RunnerBatch none = {NULL, 0, NULL, NULL, NULL};
    RunnerBatch padded = pad_batch(r, &none, batch);
    StepLayout L;
    prepare(r, &padded, &L);
    CUDA_TRY(cudaMemcpyAsync(r->meta_dev, r->meta_host, sizeof(int32_t) * L.total,
                             cudaMemcpyHostToDevice, r->stream),
             "copying the batch to the GPU", err);
    CUDA_TRY(cudaStreamSynchronize(r->stream), "copying the batch to the GPU", err);
    /* One eager run of exactly this shape first: every kernel it uses (the
     * split path and merge, cuBLAS's choice for this row count) is loaded
     * and set up outside the capture, where lazy loading is always legal. */
    if (decode_forward(r, &L, batch, splits, err)) return -1;
    CUDA_TRY(cudaStreamSynchronize(r->stream), "running a decode step before its capture", err);
    cudaGraph_t graph = NULL;
    CUDA_TRY(cudaStreamBeginCapture(r->stream, cudaStreamCaptureModeThreadLocal),
             "starting a graph capture", err);
    int rc = decode_forward(r, &L, batch, splits, err);
    cudaError_t end = cudaStreamEndCapture(r->stream, &graph); /* always: the stream must leave capture */
    if (rc || end != cudaSuccess) {
        if (graph) cudaGraphDestroy(graph);
        return rc ? -1 : cuda_fail(err, "ending a graph capture", end);
    }
    cudaError_t inst = cudaGraphInstantiate(exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_TRY(inst, "instantiating a graph", err);
    /* One replay now: it must run, and the first replay's set-up cost is paid here. */
    cudaError_t replay = cudaGraphLaunch(*exec, r->stream);
    if (replay == cudaSuccess) replay = cudaStreamSynchronize(r->stream);
    if (replay != cudaSuccess) {
        cudaGraphExecDestroy(*exec);
        return cuda_fail(err, "replaying a graph", replay);
    }
    return 0;
}

/* Graphs for batch sizes 1, 2, 4, 8, 16, 32, ... up to the largest decode
 * batch; on failure none are kept and err says why. */
static int capture_all(CudaRunner *r, Error *err) {
    const RunnerOptions *o = &r->base.options;
    int largest = o->max_num_seqs < o->max_num_batched_tokens ? o->max_num_seqs : o->max_num_batched_tokens;
    int sizes[MAX_GRAPHS], n = 0;
    for (int b = 1; b < 16 && b < largest; b *= 2) sizes[n++] = b;
    int step = largest <= 16 * (MAX_GRAPHS - 5) ? 16 : (largest + MAX_GRAPHS - 6) / (MAX_GRAPHS - 5);
    for (int b = 16; b < largest; b += step) sizes[n++] = b;
    sizes[n++] = largest;
    for (int g = 0; g < n; g++) {
        int splits = decode_splits(r, sizes[g], o->max_model_len);
        if (capture_graph(r, sizes[g], splits, &r->graphs[g], err)) {
            for (int i = 0; i < g; i++) cudaGraphExecDestroy(r->graphs[i]);
            r->num_graphs = 0;
            cudaGetLastError(); /* clear it: eager steps must not inherit it */
            return -1;
        }
        r->graph_batch[g] = sizes[g];
        r->graph_splits[g] = splits;
        r->num_graphs = g + 1;
    }
    return 0;
}

/* A failure is not fatal: with programmatic launches on (cuda_pdl.h) the
 * runner tries again without them, then logs it and stays eager. */
static void capture_graphs(CudaRunner *r) {
    Error err = {};
    if (capture_all(r, &err) == 0) return;
    if (cuda_pdl_enabled()) {
        log_info("CUDA graphs with programmatic dependent launches failed (%s); capturing without them", err.msg);
        cuda_pdl_enable(false);
        err = (Error){};
        if (capture_all(r, &err) == 0) return;
    }
    log_info("CUDA graphs unavailable (%s); running eagerly", err.msg);
}

extern "C" Runner *cuda_runner_create(const ModelWeights *model, const RunnerOptions *opts, Error *err) {
    const ModelConfig *c = &model->config;
    RunnerOptions o = *opts;
    o.device = "cuda";
    if (runner_resolve_options(&o, c, err) ||
        cuda_kernels_check_shape(c->num_heads, c->num_kv_heads, c->head_dim, err))
        return NULL;
    /* The kernels read and write a bf16 or an fp8 (e4m3) cache; auto means
     * bf16 here whatever the weights (bf16 on the GPU, or FP8 read as such). */
    if (o.kv_cache_dtype == KV_CACHE_F32) {
        error_set(err, "--kv-cache-dtype float32 is not supported on CUDA (its KV cache is "
                       "bfloat16 or fp8; use auto, bfloat16 or fp8, or --device cpu)");
        return NULL;
    }
    o.kv_cache_dtype = o.kv_cache_dtype == KV_CACHE_FP8 ? KV_CACHE_FP8 : KV_CACHE_BF16;
    /* Activations are bf16 from end to end (cuBLAS bf16 GEMMs). */
    if (o.dtype == COMPUTE_F32) {
        error_set(err, "--dtype float32 is not supported on CUDA (it computes in bfloat16; use "
                       "auto or bfloat16, or --device cpu)");
        return NULL;
    }
    o.dtype = COMPUTE_BF16;
    if (model->gguf.map) {
        error_set(err, "GGUF files run on the CPU backend only for now (the CUDA runner reads "
                       "Hugging Face bf16 weights); use --device cpu");
        return NULL;
    }
    if ((c->hybrid || c->shared_expert_intermediate_size) &&
        (c->fp8_weights || o.kv_cache_dtype == KV_CACHE_FP8 || !c->hybrid)) {
        error_set(err, "Qwen3.5 models on CUDA take bf16 weights and a bf16 KV cache for now (FP8 "
                       "checkpoints and --kv-cache-dtype fp8 run on the CPU backend); use --device cpu");
        return NULL;
    }
    CudaRunner *r = (CudaRunner *)calloc(1, sizeof *r);
    if (!r) {
        error_set(err, "out of memory");
        return NULL;
    }
    r->base.ops = &CUDA_OPS;
    r->base.device = "cuda";
    r->base.model = model;
    r->base.options = o;
    r->cfg = *c;
    r->kv_fp8 = o.kv_cache_dtype == KV_CACHE_FP8;
    r->hybrid = c->hybrid;
    r->num_kv_layers = cuda_runner_kv_layers(c);
    r->k_scale = r->v_scale = KV_FP8_DEFAULT_SCALE;
    double t0 = now_seconds();
    int rc = pick_device(r, err);
    if (rc == 0 && cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking) != cudaSuccess)
        rc = error_set(err, "cannot create a CUDA stream");
    /* the decode chain's gemvs start before the kernel ahead of them ends
     * (cuda_pdl.h): sm_90's, unless NANOVLLM_CUDA_LEGACY=pdl */
    if (rc == 0) cuda_pdl_enable(r->prop.major >= 9 && !cuda_variant_legacy("pdl"));
    if (rc == 0) rc = setup_matmul(r, err);
    if (rc == 0) rc = cuda_weights_upload(&r->weights, model, err);
    double t_weights = now_seconds();
    if (rc == 0 && (r->weights.fp8_stacks || r->weights.dequantized_stacks))
        log_info("FP8 weights: %d stacked matrices read as FP8 on the GPU, %.2f GB with their per-row "
                 "scales; %d uploaded as bf16",
                 r->weights.fp8_stacks, r->weights.fp8_bytes / 1e9, r->weights.dequantized_stacks);
    if (rc == 0) rc = cuda_matmul_reserve_fp8(r->matmul, r->weights.fp8_largest, err);
    if (rc == 0 && r->weights.fp8_tiled_stacks)
        rc = cuda_matmul_reserve_fp8_gemm(r->matmul, r->base.options.max_num_batched_tokens, r->weights.fp8_widest,
                                          err);
    if (rc == 0) rc = cuda_runner_upload_rope(r, err);
    /* Those uploads ran on the legacy stream, which the compute stream does
     * not wait for (non-blocking): they must have landed before it starts. */
    if (rc == 0 && cudaDeviceSynchronize() != cudaSuccess) rc = error_set(err, "uploading the model to the GPU");
    if (rc == 0) rc = cuda_runner_alloc_activations(r, err);
    if (rc == 0 && r->hybrid) rc = cuda_hybrid_setup(r, err);
    if (rc == 0) rc = cuda_runner_check_fused_decode(r, err);
    if (rc == 0) rc = warm_up(r, err);
    if (rc == 0) rc = cuda_runner_alloc_kv_cache(r, err);
    if (rc) {
        cuda_destroy(&r->base);
        return NULL;
    }
    double t_kv = now_seconds();
    if (!o.enforce_eager) capture_graphs(r);
    snprintf(r->base.description, sizeof r->base.description,
             "cuda (%.64s, sm_%d%d, %.1f GiB), %s weights (%.2f GB, uploaded in %.2f s) and %s KV "
             "cache, float32 residual; warm-up and KV sizing %.2f s; %d decode graphs (up to batch %d) "
             "in %.2f s",
             r->prop.name, r->prop.major, r->prop.minor, (double)r->prop.totalGlobalMem / (1u << 30),
             r->weights.fp8_stacks ? "fp8 + bf16" : "bf16", r->weights.bytes / 1e9, t_weights - t0,
             r->kv_fp8 ? "fp8 e4m3" : "bf16", t_kv - t_weights, r->num_graphs, r->num_graphs ? r->graph_batch[r->num_graphs - 1] : 0,
             now_seconds() - t_kv);
    return &r->base;
}
