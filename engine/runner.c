/*
 * runner.c - what every backend shares: default options, their resolution
 * against the model, and the checks of a batch. Which backend runs is not
 * decided here: the program that assembles engine and backends chooses
 * (cli/backend_setup.c).
 */
#include "runner.h"

#include <string.h>

#include "config/defaults.h"

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
        .load_format = "auto",
        .kv_cache_dtype = KV_CACHE_AUTO,
        .dtype = COMPUTE_AUTO,
    };
}

bool model_is_bf16(const ModelWeights *model) {
    /* The config's torch_dtype is what the model was trained and saved in; a
     * bf16 matrix can still load as f32 (misaligned in the file), so the
     * loaded type only decides when the config does not say. */
    const char *td = model->config.torch_dtype;
    if (td[0]) return strcmp(td, "bfloat16") == 0;
    return model->embed_tokens.type == WEIGHT_BF16;
}

const char *kv_cache_dtype_name(KvCacheDtype d) {
    switch (d) {
    case KV_CACHE_BF16: return "bfloat16";
    case KV_CACHE_F32: return "float32";
    case KV_CACHE_FP8: return "fp8_e4m3";
    case KV_CACHE_AUTO: break;
    }
    return "auto";
}

KvCacheDtype kv_cache_dtype_resolve(KvCacheDtype d, const ModelWeights *model) {
    if (d != KV_CACHE_AUTO) return d;
    return model_is_bf16(model) ? KV_CACHE_BF16 : KV_CACHE_F32;
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

int runner_plan_state_units(double budget, size_t unit_bytes, int max_num_seqs, int *num_slots,
                            int *num_checkpoints) {
    size_t fit = budget > 0 && unit_bytes ? (size_t)(budget / 2 / (double)unit_bytes) : 0;
    if (fit < 1) return -1;
    size_t want = 2 * (size_t)max_num_seqs, units = fit < want ? fit : want;
    size_t slots = units / 2 ? units / 2 : 1;
    *num_slots = (int)slots;
    *num_checkpoints = (int)(units - slots);
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
        if (q->pooling != POOLING_NONE && (!q->pooled || q->compute_logits))
            return error_set(err, "sequence %d: a pooling row needs its output buffer and no logits", s);
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
        if (r->num_state_slots > 0) {
            if (q->state_slot < 0 || q->state_slot >= r->num_state_slots)
                return error_set(err, "sequence %d: state slot %d is outside [0, %d)", s,
                                 q->state_slot, r->num_state_slots);
            for (int t = 0; t < s; t++)
                if (batch->seqs[t].state_slot == q->state_slot)
                    return error_set(err, "sequences %d and %d share state slot %d", t, s,
                                     q->state_slot);
        }
        int nc = r->num_state_checkpoints;
        if ((q->restore || q->save) && r->num_state_slots == 0)
            return error_set(err, "sequence %d: a state checkpoint for a model without state", s);
        if (q->restore && (q->restore_checkpoint < 0 || q->restore_checkpoint >= nc || q->start_pos == 0))
            return error_set(err, "sequence %d: restore from checkpoint %d of %d at position %d", s,
                             q->restore_checkpoint, nc, q->start_pos);
        if (q->save && (q->save_checkpoint < 0 || q->save_checkpoint >= nc))
            return error_set(err, "sequence %d: save to checkpoint %d of %d", s, q->save_checkpoint, nc);
        for (int t = 0; q->save && t < s; t++)
            if (batch->seqs[t].save && batch->seqs[t].save_checkpoint == q->save_checkpoint)
                return error_set(err, "sequences %d and %d save to checkpoint %d", t, s, q->save_checkpoint);
    }
    if (total > o->max_num_batched_tokens)
        return error_set(err, "batch of %ld tokens exceeds max_num_batched_tokens %d", total,
                         o->max_num_batched_tokens);
    return 0;
}
