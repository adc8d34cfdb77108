/*
 * engine_masks.c - each batch row's allowed-token mask: a structured-output
 * constraint's (its token matcher) and min_tokens' ban of the end ids, in
 * one buffer of [max_num_seqs] rows made at the first step that needs it,
 * and the matcher moved past each sampled token. Apart from the step so
 * that how a constraint and min_tokens combine reads in one place.
 */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* Ends of the output the constraint lets through where it may end: the
 * model's EOS ids and the request's stop ids. */
static int end_ids(const Engine *e, const Sequence *s, int32_t *ids) {
    const ModelConfig *c = &e->model->config;
    int n = 0;
    for (int i = 0; i < c->num_eos_ids; i++) ids[n++] = c->eos_ids[i];
    for (int i = 0; i < s->params->num_stop_token_ids; i++) ids[n++] = s->params->stop_token_ids[i];
    return n;
}

/* Row i's words of the step's mask buffer, made at the first step that
 * masks a row and kept ([max_num_seqs] rows: a batch has at most that many);
 * NULL when out of memory, which marks the sample to end with an error. */
static uint32_t *mask_row(Engine *e, Sequence *s, int i) {
    size_t words = (size_t)token_mask_words(e->model->config.vocab_size);
    if (!e->masks && !(e->masks = malloc(sizeof *e->masks * words * (size_t)e->runner->options.max_num_seqs))) {
        s->mask_failed = true;
        return NULL;
    }
    return e->masks + (size_t)i * words;
}

/* Row i's mask of allowed tokens; NULL (every token) when the constraint
 * cannot go on, which marks the sample to end with an error instead. */
uint32_t *engine_constraint_mask(Engine *e, Sequence *s, int i) {
    int words = token_mask_words(e->model->config.vocab_size);
    uint32_t *mask = mask_row(e, s, i);
    if (!mask) return NULL;
    int32_t ends[MODEL_MAX_EOS_IDS + MAX_STOP_TOKEN_IDS];
    Error err;
    if (token_matcher_fill_mask(s->matcher, mask, ends, end_ids(e, s, ends), &err) < 0) {
        log_info("structured output: %s", err.msg);
        s->constraint_failed = true;
        return NULL;
    }
    for (int w = 0; w < words; w++)
        if (mask[w]) return mask;
    s->constraint_failed = true; /* the vocabulary cannot spell what must come next */
    return NULL;
}

/* min_tokens: row i's mask without the end ids (end_ids: the model's EOS
 * ids, even with ignore_eos, as vLLM's _all_stop_token_ids, and the stop
 * ids). `allowed` is the constraint's mask (row i of the buffer) or NULL for
 * a free row, which gets every token but those. If no token would be left,
 * the mask is kept as it was: a constraint that can only end now ends (the
 * constraint wins over min_tokens, and end_forced lets that end id end the
 * sample); a vocabulary of nothing but end ids is left to them. NULL (and
 * mask_failed) when out of memory. */
const uint32_t *engine_min_tokens_mask(Engine *e, Sequence *s, int i, uint32_t *allowed) {
    int vocab = e->model->config.vocab_size, words = token_mask_words(vocab);
    uint32_t *mask = allowed;
    if (!mask) {
        if (!(mask = mask_row(e, s, i))) return NULL;
        memset(mask, 0xFF, sizeof *mask * (size_t)words);
        if (vocab % 32) mask[words - 1] = (1u << (vocab % 32)) - 1; /* no bits past the vocabulary */
    }
    int32_t ends[MODEL_MAX_EOS_IDS + MAX_STOP_TOKEN_IDS], cleared[MODEL_MAX_EOS_IDS + MAX_STOP_TOKEN_IDS];
    int n = end_ids(e, s, ends), num_cleared = 0;
    for (int k = 0; k < n; k++) {
        uint32_t bit = 1u << (ends[k] % 32);
        if (mask[ends[k] / 32] & bit) {
            mask[ends[k] / 32] &= ~bit;
            cleared[num_cleared++] = ends[k];
        }
    }
    if (num_cleared == 0) return mask;
    uint32_t last = vocab % 32 ? (1u << (vocab % 32)) - 1 : 0xFFFFFFFFu; /* bits past vocab are not tokens */
    for (int w = 0; w < words; w++)
        if (mask[w] & (w == words - 1 ? last : 0xFFFFFFFFu)) return mask;
    for (int k = 0; k < num_cleared; k++) mask[cleared[k] / 32] |= 1u << (cleared[k] % 32);
    s->end_forced = true;
    return mask;
}

/* Moves the sample's matcher past its new token; -1 if it does not fit. */
int engine_constraint_advance(Engine *e, Sequence *s, int32_t token, Error *err) {
    if (s->constraint_waiting) {
        if (token == ((Request *)s->owner)->constraint_after) s->constraint_waiting = false;
        return 0;
    }
    int32_t ends[MODEL_MAX_EOS_IDS + MAX_STOP_TOKEN_IDS];
    int n = end_ids(e, s, ends);
    bool is_end = false;
    for (int k = 0; k < n; k++) is_end |= ends[k] == token;
    return token_matcher_accept(s->matcher, token, is_end, err);
}
