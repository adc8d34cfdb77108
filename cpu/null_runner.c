/*
 * null_runner.c - see null_runner.h.
 */
#include "null_runner.h"

#include <stdio.h>
#include <stdlib.h>

#include "cpu_runner.h"

static int null_step(Runner *r, const RunnerBatch *b, int32_t *out, Error *err) {
    (void)err;
    int vocab = r->model->config.vocab_size;
    for (int s = 0; s < b->num_seqs; s++) {
        const RunnerSeq *q = &b->seqs[s];
        /* Away from the low ids where end-of-sequence tokens usually live. */
        out[s] = q->compute_logits ? (int32_t)((q->start_pos + q->num_tokens) * 7919 % (vocab / 2) + vocab / 4)
                                   : -1;
        if (b->logprobs && q->compute_logits) b->logprobs[s] = (SampleLogprobs){.logprob = 0.0f};
        /* Embeddings: a fixed unit vector, so a pooling request still ends. */
        if (q->pooling == POOLING_LAST || (q->pooling == POOLING_CLS && q->start_pos == 0))
            for (int j = 0; j < r->model->config.hidden_size; j++) q->pooled[j] = j == 0;
        else if (q->pooling == POOLING_MEAN) q->pooled[0] += (float)q->num_tokens;
    }
    return 0;
}

static void null_destroy(Runner *r) { free(r); }

static const RunnerOps NULL_OPS = {null_step, null_destroy};

Runner *null_runner_create(const ModelWeights *model, const RunnerOptions *opts, Error *err) {
    const ModelConfig *c = &model->config;
    size_t block_bytes =
        cpu_runner_block_bytes(c, opts->block_size, kv_cache_dtype_resolve(opts->kv_cache_dtype, model));
    size_t blocks = opts->kv_cache_bytes / block_bytes;
    if (blocks < 1) {
        error_set(err, "KV cache budget of %zu bytes is smaller than one block", opts->kv_cache_bytes);
        return NULL;
    }
    Runner *r = calloc(1, sizeof *r);
    if (!r) {
        error_set(err, "out of memory");
        return NULL;
    }
    r->ops = &NULL_OPS;
    r->device = "null";
    r->model = model;
    r->options = *opts;
    r->options.device = "null";
    if (r->options.max_model_len == 0) r->options.max_model_len = c->max_position_embeddings;
    r->num_kv_blocks = blocks > (1u << 30) ? 1 << 30 : (int)blocks;
    snprintf(r->description, sizeof r->description, "null (no model computation)");
    return r;
}
