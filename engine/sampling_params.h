/*
 * sampling_params.h - how one request wants its tokens chosen and stopped.
 *
 * The fields and their neutral values follow the OpenAI API and vLLM's
 * extras (top_k, min_p, repetition_penalty, ignore_eos, stop_token_ids,
 * min_tokens), so
 * the HTTP layer maps a request onto this struct one field at a time. The
 * engine copies it at submission; sampling_params_validate() is the single
 * place where values are range-checked.
 */
#ifndef NANOVLLM_SAMPLING_PARAMS_H
#define NANOVLLM_SAMPLING_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

#define MAX_TOP_LOGPROBS 20 /* OpenAI's limit for top_logprobs */
#define MAX_STOP_TOKEN_IDS 64
#define MAX_LOGIT_BIAS 300 /* OpenAI's limit on logit_bias entries */

/* One logit_bias entry (OpenAI semantics): bias is added to the token's
 * logit before anything else reads it (sampler.h has the order). */
typedef struct LogitBias {
    int32_t token;
    float bias; /* finite, in [-100, 100]: -100 in effect bans, +100 forces */
} LogitBias;

typedef struct SamplingParams {
    float temperature;        /* 0: greedy */
    int top_k;                /* <= 0: off */
    float top_p;              /* 1: off */
    float min_p;              /* 0: off */
    float repetition_penalty; /* 1: off; prompt and output tokens (HF / vLLM semantics) */
    float presence_penalty;   /* 0: off; output tokens (OpenAI semantics) */
    float frequency_penalty;  /* 0: off; output tokens */
    bool has_seed;
    uint64_t seed;            /* when has_seed; else the engine picks one per request */
    int logprobs;             /* -1: none; 0: the chosen token's; N: also the top N */
    int max_tokens;           /* completion tokens, >= 1 */
    /* vLLM's min_tokens (0: off, at most max_tokens): until the output has
     * this many tokens, the model's EOS ids (even with ignore_eos) and
     * stop_token_ids cannot be sampled and stop strings are not looked for. */
    int min_tokens;
    bool ignore_eos;
    int n;                    /* parallel samples of the prompt, >= 1 */
    int num_stop_token_ids;
    int32_t stop_token_ids[MAX_STOP_TOKEN_IDS];
    int num_logit_bias;       /* entries of logit_bias; distinct tokens */
    LogitBias logit_bias[MAX_LOGIT_BIAS];
} SamplingParams;

/* Greedy, 16 tokens, one sample, no penalties, no logprobs. */
SamplingParams sampling_params_default(void);

/* Range checks with the OpenAI/vLLM bounds; vocab_size bounds stop_token_ids
 * and logit_bias tokens (which must also be distinct: the samplers add each
 * entry on its own, the GPU's in parallel). */
int sampling_params_validate(const SamplingParams *p, int vocab_size, Error *err);

static inline bool sampling_needs_penalties(const SamplingParams *p) {
    return p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f ||
           p->frequency_penalty != 0.0f;
}

#endif
