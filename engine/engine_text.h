/*
 * engine_text.h - when a sample ends and what text it delivers: the end ids,
 * max_tokens and min_tokens (engine_stop_reason), and each new token's text through
 * the sample's detokenizer, with what may begin a stop string held back and
 * a stop string found cutting the text (engine_next_text). Apart because stop
 * strings are the engine's one piece of text handling, with vLLM's rules.
 *
 * Inline, and included by the step loop (engine_step.c) alone: it runs them
 * for every token of every sample. Out of line (with engine_emit), the split
 * of engine.c cost the engine's own step 14-17% (`nanovllm bench --device
 * null`, old and new binaries alternating); inline it is within noise.
 */
#ifndef NANOVLLM_ENGINE_TEXT_H
#define NANOVLLM_ENGINE_TEXT_H

#include <string.h>

#include "engine_internal.h"

/* Whether the output (the new token included) is long enough for an end id
 * to end it: vLLM's check_stop returns early while num_output < min_tokens.
 * The mask keeps end ids out until then, unless a constraint forced one. */
static inline bool may_end(const Sequence *s) {
    return sequence_num_output(s) >= s->params->min_tokens || s->end_forced;
}

static inline FinishReason engine_stop_reason(const Engine *e, const Sequence *s, int32_t token) {
    const SamplingParams *p = s->params;
    if (may_end(s)) {
        if (!p->ignore_eos && model_config_is_eos(&e->model->config, token)) return FINISH_STOP;
        for (int i = 0; i < p->num_stop_token_ids; i++)
            if (p->stop_token_ids[i] == token) return FINISH_STOP;
    }
    if (sequence_num_output(s) >= p->max_tokens || s->num_tokens >= s->capacity)
        return FINISH_LENGTH;
    return FINISH_NONE;
}

/* The new token's text, through the sample's detokenizer, with the stop
 * strings applied: text that could still turn out to begin a stop string is
 * held back (the longest stop string's length - 1 bytes, cut at a character
 * boundary), the rest is delivered. A stop string found ends the sample and
 * cuts the text before it; at any other end everything held is delivered.
 * As vLLM's stop checker, only a stop string that ends in the new text is
 * looked for (an earlier one would have been found earlier, except in text
 * from before min_tokens), and none while the output has at most min_tokens
 * tokens. */
static inline Text engine_next_text(Engine *e, Sequence *s, int32_t token, bool ending) {
    Request *r = s->owner;
    if (!e->tok) return NO_TEXT;
    const char *piece;
    size_t n;
    Error err;
    size_t old = s->held.len;
    if (detokenizer_push(&s->detok, token, &piece, &n, &err) == 0 && n > 0)
        byte_buf_append(&s->held, piece, n); /* out of memory: the text lacks this piece */
    size_t best = s->held.len;
    int which = -1;
    bool check = sequence_num_output(s) > s->params->min_tokens;
    for (int i = 0; check && i < r->num_stop; i++) {
        size_t len = strlen(r->stop[i]);
        size_t from = old + 1 > len ? old + 1 - len : 0; /* a match from here on ends past old */
        if (from >= s->held.len) continue;
        const char *p = memmem(s->held.data + from, s->held.len - from, r->stop[i], len);
        if (p && (size_t)(p - s->held.data) < best) {
            best = (size_t)(p - s->held.data);
            which = i;
        }
    }
    if (which >= 0) return (Text){s->held.data, best, which};
    if (ending) {
        if (detokenizer_finish(&s->detok, &piece, &n, &err) == 0 && n > 0)
            byte_buf_append(&s->held, piece, n);
        return (Text){s->held.data, s->held.len, -1};
    }
    size_t keep = r->num_stop ? r->max_stop_len - 1 : 0;
    size_t cut = s->held.len > keep ? s->held.len - keep : 0;
    while (cut > 0 && cut < s->held.len && ((unsigned char)s->held.data[cut] & 0xC0) == 0x80) cut--;
    return (Text){s->held.data, cut, -1};
}

/* Drops the delivered start of the held text. */
static inline void engine_consume_held(Sequence *s, size_t n) {
    if (n == 0) return;
    memmove(s->held.data, s->held.data + n, s->held.len - n);
    s->held.len -= n;
}

#endif
