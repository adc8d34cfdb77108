/*
 * cuda_sampler.h - sampling on the GPU, token for token the CPU sampler's.
 *
 * The logits of a step stay on the GPU: one thread block per row applies the
 * structured-output mask (disallowed tokens get -inf, as sampler_apply_allowed)
 * and the penalties, then greedy or temperature, exp, min-p, top-k, top-p and the
 * draw, and writes one token. Every decision uses sampler_math.h, the
 * arithmetic the CPU sampler uses too, so for identical logits the token is
 * identical to sampler_sample()'s (sampler.h states the semantics). Rows that
 * ask for logprobs stay on the CPU path: this sampler ignores logprobs.
 *
 * The host side packs each row's parameters and its distinct penalty tokens
 * (cuda_sample_row_prepare, callable from C without a GPU); the caller
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

#include "engine/base/error.h"
#include "engine/sampler.h"

/* One row's sampling parameters, as the kernel reads them. */
typedef struct CudaSampleRow {
    float temperature, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
    int32_t top_k;
    uint32_t seed_lo, seed_hi, sample_index, position;
    int32_t penalty_offset, penalty_count; /* the row's entries in the penalty array */
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
 * any, and sets the offset) and writes the row's distinct penalty tokens
 * (prompt and output for the repetition penalty, output for frequency/presence; none
 * when the row has no penalties) to entries[offset...]. Returns how many, or
 * -1 when they would pass entries[capacity - 1]. scratch (the CPU sampler's,
 * sized for the vocabulary) is left as it was found. Tokens must be below
 * the vocabulary size. */
int cuda_sample_row_prepare(CudaSampleRow *row, CudaPenalty *entries, int capacity, int offset,
                            const SampleInput *in, SamplerScratch *scratch);

/* Device workspace cuda_sample() needs for up to max_rows rows. */
size_t cuda_sampler_workspace_bytes(int max_rows, int vocab);

/* tokens[r] = the token sampled from logits[r, :vocab] (device memory,
 * modified: the mask, penalties, then the kept probabilities) with rows_dev[r]
 * and penalties_dev (device copies of what cuda_sample_row_prepare wrote).
 * masks_dev: the rows' allowed-token bitmasks (device memory, indexed by
 * mask_offset); may be NULL when no row has a mask (with NULL, every
 * mask_offset is ignored). workspace: cuda_sampler_workspace_bytes(>= rows,
 * vocab) of device memory. Checks the launch; does not wait for the GPU. */
int cuda_sample(int32_t *tokens, float *logits, int rows, int vocab, const CudaSampleRow *rows_dev,
                const CudaPenalty *penalties_dev, const uint32_t *masks_dev, void *workspace,
                CudaStream stream, Error *err);

#ifdef __cplusplus
}
#endif

#endif
