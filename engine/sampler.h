/*
 * sampler.h - choosing the next token from a row of logits (CPU reference).
 *
 * Order, as vLLM's sampler: the allowed-token mask, if any (disallowed
 * tokens get -inf: structured outputs, and the engine's min_tokens, which
 * masks the end ids); then logit_bias (each entry's bias added to its
 * token's logit, in float: a masked -inf stays -inf); logprobs (if asked)
 * from the logits so far; then repetition, frequency and presence
 * penalties; then greedy (temperature
 * < 1e-5: the largest logit, the lowest id among equals), or temperature,
 * exp, min-p, top-k, top-p and one uniform draw. The CUDA sampler
 * (cuda/cuda_sampler.h) implements the same steps with the same arithmetic
 * (sampler_math.h), so when the logits agree the token agrees, bit for bit;
 * the result is a pure function of (logits, parameters, seed, position),
 * whatever shares the batch. The canonical semantics, for finite logits:
 *
 *  0. l = mask ? l : -inf, then l = l + bias for each logit_bias entry.
 *  1. penalties, per distinct token: repetition over prompt and output
 *     (l > 0 ? l / r : l * r), then l - (frequency * count + presence) over
 *     the output counts.
 *  2. p_i = sm_exp(l_i * inv_t - max_j(l_j) * inv_t), inv_t = 1 / temperature;
 *     the top token has p = 1.
 *  3. min-p keeps p >= min_p; top-k keeps the k best of those by (p
 *     descending, id ascending); the rest get p = 0.
 *  4. total(S) is the canonical total of a set (sampler_math.h): double sums
 *     of fixed 64-token chunks, then a fixed pairwise tree over the chunks.
 *     top-p keeps every remaining token with p >= tau, tau the largest value
 *     with total({p >= tau}) >= top_p * total(kept). An order-independent
 *     threshold: it differs from sort-and-cut only in keeping every token
 *     tied at the cut.
 *  5. u = philox_uniform(seed, sample index, position); the target u * total
 *     descends the tree to a chunk and walks it token by token (the first
 *     token where the running sum passes it). If rounding carries the target
 *     past that chunk, the answer is the last kept token (p > 0) before the
 *     chunk's end (token 0 if there is none, which needs a row of NaNs).
 */
#ifndef NANOVLLM_SAMPLER_H
#define NANOVLLM_SAMPLER_H

#include <stdint.h>

#include "sampling_params.h"
#include "base/error.h"

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
    /* A bitmask over the vocabulary (bit t of word t / 32 set: token t
     * allowed), or NULL for every token: structured outputs' constraint and
     * min_tokens' banned end ids (engine_masks.c). Applied first, before
     * logit_bias, logprobs and penalties: a disallowed token's logit becomes
     * -inf. */
    const uint32_t *allowed;
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
    int chunks, leaves; /* of the canonical total (sampler_math.h) */
    float *values;      /* [vocab] raw logits, for logprobs */
    float *sorted;      /* [vocab] top-p: candidate values, or the candidates' row */
    int32_t *ids;       /* [vocab] kept tokens, ascending */
    int32_t *cand;      /* [vocab] top-p candidates, ascending */
    int32_t *counts;    /* [vocab], all zero between calls */
    uint8_t *seen;      /* [vocab], all zero between calls */
    double *sums;       /* [leaves] chunk sums of the whole row */
    double *tree;       /* [leaves] chunk sums, then the tree */
    int32_t *node_ids;  /* [chunks] a sparse level of the tree */
    double *node_sums;  /* [chunks] */
} SamplerScratch;

int sampler_scratch_init(SamplerScratch *s, int vocab, Error *err);
void sampler_scratch_free(SamplerScratch *s);

/* Chooses a token from logits[vocab] (the row is modified: penalties, then
 * unnormalised probabilities). Fills *lp when it is not NULL and
 * params->logprobs >= 0. */
/* Sets logits[t] = -inf for every token t the mask leaves out. */
void sampler_apply_allowed(float *logits, const uint32_t *allowed, int vocab);

/* Adds p's logit_bias entries to their logits (tokens outside [0, vocab)
 * skipped, as the GPU does; sampling_params_validate rejects them anyway). */
void sampler_apply_logit_bias(float *logits, const SamplingParams *p, int vocab);

int32_t sampler_sample(float *logits, const SampleInput *in, SamplerScratch *s, SampleLogprobs *lp);

#endif
