/*
 * sampling_params.c - defaults and validation (see sampling_params.h).
 */
#include "sampling_params.h"

#include <math.h>

#include "config/defaults.h"

SamplingParams sampling_params_default(void) {
    return (SamplingParams){
        .temperature = 0.0f,
        .top_k = 0,
        .top_p = 1.0f,
        .min_p = 0.0f,
        .repetition_penalty = 1.0f,
        .logprobs = -1,
        .max_tokens = DEFAULT_MAX_TOKENS,
        .n = 1,
    };
}

static int check(const SamplingParams *p, int vocab_size, Error *err) {
    if (!isfinite(p->temperature) || p->temperature < 0.0f || p->temperature > 100.0f)
        return error_set(err, "temperature must be in [0, 100], got %g", p->temperature);
    if (!isfinite(p->top_p) || p->top_p <= 0.0f || p->top_p > 1.0f)
        return error_set(err, "top_p must be in (0, 1], got %g", p->top_p);
    if (!isfinite(p->min_p) || p->min_p < 0.0f || p->min_p > 1.0f)
        return error_set(err, "min_p must be in [0, 1], got %g", p->min_p);
    if (p->top_k < -1 || p->top_k > vocab_size)
        return error_set(err, "top_k must be -1, 0 (off) or at most the vocabulary size, got %d",
                         p->top_k);
    if (!isfinite(p->repetition_penalty) || p->repetition_penalty <= 0.0f ||
        p->repetition_penalty > 100.0f)
        return error_set(err, "repetition_penalty must be in (0, 100], got %g",
                         p->repetition_penalty);
    if (!isfinite(p->presence_penalty) || fabsf(p->presence_penalty) > 2.0f)
        return error_set(err, "presence_penalty must be in [-2, 2], got %g", p->presence_penalty);
    if (!isfinite(p->frequency_penalty) || fabsf(p->frequency_penalty) > 2.0f)
        return error_set(err, "frequency_penalty must be in [-2, 2], got %g", p->frequency_penalty);
    if (p->logprobs < -1 || p->logprobs > MAX_TOP_LOGPROBS)
        return error_set(err, "logprobs must be at most %d, got %d", MAX_TOP_LOGPROBS, p->logprobs);
    if (p->max_tokens < 1) return error_set(err, "max_tokens must be at least 1, got %d", p->max_tokens);
    if (p->n < 1 || p->n > 128) return error_set(err, "n must be in [1, 128], got %d", p->n);
    if (p->num_stop_token_ids < 0 || p->num_stop_token_ids > MAX_STOP_TOKEN_IDS)
        return error_set(err, "at most %d stop_token_ids", MAX_STOP_TOKEN_IDS);
    for (int i = 0; i < p->num_stop_token_ids; i++)
        if (p->stop_token_ids[i] < 0 || p->stop_token_ids[i] >= vocab_size)
            return error_set(err, "stop_token_ids: %d is outside the vocabulary [0, %d)",
                             p->stop_token_ids[i], vocab_size);
    if (p->min_tokens < 0 || p->min_tokens > p->max_tokens)
        return error_set(err, "min_tokens must be in [0, max_tokens %d], got %d", p->max_tokens,
                         p->min_tokens);
    if (p->num_logit_bias < 0 || p->num_logit_bias > MAX_LOGIT_BIAS)
        return error_set(err, "logit_bias: at most %d entries, got %d", MAX_LOGIT_BIAS,
                         p->num_logit_bias);
    for (int i = 0; i < p->num_logit_bias; i++) {
        const LogitBias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= vocab_size)
            return error_set(err, "logit_bias: token %d is outside the vocabulary [0, %d)", b->token,
                             vocab_size);
        if (!isfinite(b->bias) || fabsf(b->bias) > 100.0f)
            return error_set(err, "logit_bias: the bias of token %d must be in [-100, 100], got %g",
                             b->token, b->bias);
        /* quadratic, but at most 300 entries: 45k comparisons, no allocation */
        for (int j = 0; j < i; j++)
            if (p->logit_bias[j].token == b->token)
                return error_set(err, "logit_bias: token %d appears twice", b->token);
    }
    return 0;
}

int sampling_params_validate(const SamplingParams *p, int vocab_size, Error *err) {
    if (check(p, vocab_size, err) == 0) return 0;
    if (err) err->kind = ERROR_INVALID;
    return -1;
}
