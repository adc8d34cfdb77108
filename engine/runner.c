/*
 * runner.c - backend selection and the batch checks shared by all runners.
 */
#include "runner.h"

#include <stdio.h>
#include <string.h>

#include "../config/defaults.h"
#include "../cuda/cuda_device.h"
#include "../cuda/cuda_runner.h"
#include "cpu_runner.h"
#include "null_runner.h"

RunnerOptions runner_default_options(void) {
    return (RunnerOptions){
        .device = "auto",
        .block_size = DEFAULT_BLOCK_SIZE,
        .kv_cache_bytes = DEFAULT_KV_CACHE_BYTES,
        .gpu_memory_utilization = DEFAULT_GPU_MEMORY_UTILIZATION,
        .max_num_seqs = DEFAULT_MAX_NUM_SEQS,
        .max_num_batched_tokens = DEFAULT_MAX_NUM_BATCHED_TOKENS,
        .max_model_len = 0, /* 0: the model's max_position_embeddings */
        .num_threads = 0,
    };
}

static void write_note(char *note, size_t size, const char *text) {
    if (note && size) snprintf(note, size, "%s", text);
}

Runner *runner_create(const ModelWeights *model, const RunnerOptions *opts, char *note,
                      size_t note_size, Error *err) {
    write_note(note, note_size, "");
    const char *device = opts->device ? opts->device : "auto";
    bool want_cuda = strcmp(device, "cuda") == 0, want_auto = strcmp(device, "auto") == 0;
    if (strcmp(device, "null") == 0) return null_runner_create(model, opts, err);
    if (!want_cuda && !want_auto && strcmp(device, "cpu") != 0) {
        error_set(err, "unknown device '%s' (expected auto, cuda or cpu)", device);
        return NULL;
    }
    if (want_cuda || want_auto) {
        char why[256];
        int gpus = cuda_device_probe(why, sizeof why);
        if (gpus > 0) {
            Error cuda_err = {{0}};
            Runner *r = cuda_runner_create(model, opts, &cuda_err);
            if (r) return r;
            if (want_cuda) return error_set(err, "--device cuda: %s", cuda_err.msg), NULL;
            /* auto: a GPU that cannot run the model (too small, no cuBLAS)
             * still leaves the CPU, and the log says why */
            snprintf(why, sizeof why, "the GPU cannot run it (%.200s)", cuda_err.msg);
        } else if (want_cuda) {
            error_set(err, "--device cuda: %s", why);
            return NULL;
        }
        char text[400];
        snprintf(text, sizeof text, "%s; using the CPU", why);
        write_note(note, note_size, text);
    }
    return cpu_runner_create(model, opts, err);
}

int runner_resolve_options(RunnerOptions *o, const ModelConfig *c, Error *err) {
    if (o->max_model_len == 0) o->max_model_len = c->max_position_embeddings;
    if (o->block_size < 1 || (o->block_size & (o->block_size - 1)) != 0)
        return error_set(err, "block size %d is not a power of two", o->block_size);
    if (o->max_num_seqs < 1 || o->max_num_batched_tokens < 1)
        return error_set(err, "max_num_seqs and max_num_batched_tokens must be positive");
    if (o->max_model_len < 1 || o->max_model_len > c->max_position_embeddings)
        return error_set(err, "max_model_len %d is outside [1, %d] (max_position_embeddings)",
                         o->max_model_len, c->max_position_embeddings);
    return 0;
}

int runner_step(Runner *r, const RunnerBatch *batch, int32_t *tokens_out, Error *err) {
    return r->ops->step(r, batch, tokens_out, err);
}

void runner_destroy(Runner *r) {
    if (r) r->ops->destroy(r);
}

int runner_validate_batch(const Runner *r, const RunnerBatch *batch, Error *err) {
    const RunnerOptions *o = &r->options;
    if (batch->num_seqs < 1 || batch->num_seqs > o->max_num_seqs)
        return error_set(err, "batch of %d sequences (limit %d)", batch->num_seqs, o->max_num_seqs);
    long total = 0;
    int vocab = r->model->config.vocab_size;
    for (int s = 0; s < batch->num_seqs; s++) {
        const RunnerSeq *q = &batch->seqs[s];
        if (q->num_tokens < 1 || !q->tokens || q->start_pos < 0)
            return error_set(err, "sequence %d: empty step or negative start position", s);
        total += q->num_tokens;
        long end = (long)q->start_pos + q->num_tokens;
        if (end > o->max_model_len)
            return error_set(err, "sequence %d: context of %ld tokens exceeds max_model_len %d", s,
                             end, o->max_model_len);
        for (int i = 0; i < q->num_tokens; i++)
            if (q->tokens[i] < 0 || q->tokens[i] >= vocab)
                return error_set(err, "sequence %d: token id %d is outside the vocabulary [0, %d)",
                                 s, q->tokens[i], vocab);
        long blocks_needed = (end + o->block_size - 1) / o->block_size;
        if (!q->block_table || q->num_blocks < blocks_needed)
            return error_set(err, "sequence %d: %d KV blocks cannot hold %ld tokens", s,
                             q->num_blocks, end);
        for (long b = 0; b < blocks_needed; b++)
            if (q->block_table[b] < 0 || q->block_table[b] >= r->num_kv_blocks)
                return error_set(err, "sequence %d: KV block id %d is outside [0, %d)", s,
                                 q->block_table[b], r->num_kv_blocks);
    }
    if (total > o->max_num_batched_tokens)
        return error_set(err, "batch of %ld tokens exceeds max_num_batched_tokens %d", total,
                         o->max_num_batched_tokens);
    return 0;
}
