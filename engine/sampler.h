/*
 * sampler.h - choosing the next token from a row of logits (CPU reference).
 *
 * Order, as vLLM's sampler: logprobs (if asked) from the raw logits; then
 * repetition, frequency and presence penalties; then, unless greedy,
 * temperature, min-p, top-k, top-p; then one uniform draw from
 * philox_uniform(seed, sample index, position), walked through the kept
 * tokens in ascending id order with double accumulation (in fixed chunks of
 * 64). The result is a pure
 * function of (logits, parameters, seed, position), whatever shares the batch,
 * and the CUDA sampler implements the same steps.
 */
#ifndef NANOVLLM_SAMPLER_H
#define NANOVLLM_SAMPLER_H

#include <stdint.h>

#include "error.h"
#include "sampling_params.h"

/* What the sampler needs to know about the sequence besides its logits. */
typedef struct SampleInput {
    const SamplingParams *params;
    uint64_t seed;         /* the request's seed (chosen by the engine if unseeded) */
    uint32_t sample_index; /* which of the request's n samples */
    uint32_t position;     /* position of the token being chosen */
    const int32_t *prompt; /* for the repetition penalty */
    int prompt_len;
    const int32_t *output; /* tokens generated so far (all penalties) */
    int output_len;
} SampleInput;

typedef struct SampleLogprobs {
    float logprob; /* of the chosen token, from the raw logits */
    int num_top;
    int32_t top_ids[MAX_TOP_LOGPROBS];
    float top_logprobs[MAX_TOP_LOGPROBS];
} SampleLogprobs;

/* Per-thread working memory, sized for one vocabulary. */
typedef struct SamplerScratch {
    int vocab;
    float *values;     /* [vocab] */
    int32_t *ids;      /* [vocab] */
    int32_t *counts;   /* [vocab], all zero between calls */
    uint8_t *seen;     /* [vocab], all zero between calls */
} SamplerScratch;

int sampler_scratch_init(SamplerScratch *s, int vocab, Error *err);
void sampler_scratch_free(SamplerScratch *s);

/* Chooses a token from logits[vocab] (the row is modified: penalties,
 * temperature). Fills *lp when it is not NULL and params->logprobs >= 0. */
int32_t sampler_sample(float *logits, const SampleInput *in, SamplerScratch *s, SampleLogprobs *lp);

#endif
