/*
 * cuda_sampler.h - sampling on the GPU, token for token the CPU sampler's.
 *
 * The logits of a step stay on the GPU: a first kernel spreads each row over
 * many blocks, which apply the allowed-token mask (disallowed tokens get
 * -inf, as sampler_apply_allowed), the logit_bias entries (as
 * sampler_apply_logit_bias) and the penalties to their slices and reduce
 * them to (maximum, lowest id); then one thread block per row combines
 * those into the greedy token, or goes on with temperature, exp, min-p,
 * top-k, top-p and the draw, and writes one token (cuda_sampler.cu says
 * why; NANOVLLM_CUDA_LEGACY=sampler keeps the former one-kernel path). Every decision uses sampler_math.h, the
 * arithmetic the CPU sampler uses too, so for identical logits the token is
 * identical to sampler_sample()'s (sampler.h states the semantics). Rows that
 * ask for logprobs stay on the CPU path: this sampler ignores logprobs.
 *
 * The host side packs each row's parameters, its distinct penalty tokens and
 * its logit_bias entries (cuda_sample_row_prepare, callable from C without a
 * GPU); the caller
 * uploads them and calls cuda_sample(), which neither allocates nor waits,
 * so it can be captured in a CUDA graph.
 */
#ifndef NANOVLLM_CUDA_SAMPLER_H
#define NANOVLLM_CUDA_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_kernels.h" /* CudaStream */

#ifdef __cplusplus
extern "C" {
#endif

#include "base/error.h"
#include "engine/sampler.h"

/* One row's sampling parameters, as the kernel reads them. */
typedef struct CudaSampleRow {
    float temperature, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
    int32_t top_k;
    uint32_t seed_lo, seed_hi, sample_index, position;
    int32_t penalty_offset, penalty_count; /* the row's entries in the penalty array */
    int32_t bias_offset, bias_count;       /* the row's entries in the logit_bias array */
    /* -1: every token allowed; else where the row's allowed-token bitmask
     * (SampleInput.allowed's layout, (vocab + 31) / 32 words) starts in the
     * masks array, in uint32 words. */
    int32_t mask_offset;
} CudaSampleRow;

/* One distinct token of a row's history. */
typedef struct CudaPenalty {
    int32_t token;
    int32_t in_prompt_or_output; /* 1: the repetition penalty applies */
    int32_t output_count;        /* occurrences in the output: frequency and presence */
} CudaPenalty;

/* Fills *row from in (mask_offset -1: the caller places in->allowed, if
 * any, and sets the offset), writes the row's logit_bias entries to
 * biases[bias_offset...] (row->bias_count of them: in->params->num_logit_bias)
 * and the row's distinct penalty tokens (prompt and output for the
 * repetition penalty, output for frequency/presence; none when the row has
 * no penalties) to entries[offset...]. Returns the number of penalty
 * entries; -1 when they would pass entries[capacity - 1] (grow entries and
 * call again), -2 when the biases would pass biases[bias_capacity - 1].
 * scratch (the CPU sampler's, sized for the vocabulary) is left as it was
 * found. Tokens must be below the vocabulary size, and the bias tokens
 * distinct (sampling_params_validate): the kernel adds them in parallel. */
int cuda_sample_row_prepare(CudaSampleRow *row, CudaPenalty *entries, int capacity, int offset,
                            LogitBias *biases, int bias_capacity, int bias_offset,
                            const SampleInput *in, SamplerScratch *scratch);

/* Device workspace cuda_sample() needs for up to max_rows rows: the first
 * pass's partials and top-p's chunk lists. */
size_t cuda_sampler_workspace_bytes(int max_rows, int vocab);

/* tokens[r] = the token sampled from logits[r, :vocab] (device memory,
 * modified: the mask, logit_bias, penalties, then the kept probabilities)
 * with rows_dev[r], penalties_dev and biases_dev (device copies of what
 * cuda_sample_row_prepare wrote; biases_dev may be NULL when no row has a
 * bias, and then every bias_count is ignored). masks_dev: the rows'
 * allowed-token bitmasks (device memory, indexed by mask_offset); may be
 * NULL when no row has a mask (with NULL, every mask_offset is ignored). workspace: cuda_sampler_workspace_bytes(>= rows,
 * vocab) of device memory. Checks the launch; does not wait for the GPU. */
int cuda_sample(int32_t *tokens, float *logits, int rows, int vocab, const CudaSampleRow *rows_dev,
                const CudaPenalty *penalties_dev, const LogitBias *biases_dev,
                const uint32_t *masks_dev, void *workspace, CudaStream stream, Error *err);

#ifdef __cplusplus
}
#endif

#endif
