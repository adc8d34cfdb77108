/*
 * reference_check.h - checks of a model against a float64 reference of its
 * own weights, written by scripts/make_gguf.py and scripts/make_fp8_qwen3.py
 * (--ref-logits). The file (little-endian): int32 n_prompt, n_vocab,
 * n_greedy; int32 prompt[n_prompt]; int32 greedy[n_greedy]; float32
 * margin[n_greedy] (top-1 minus top-2 at each greedy step); float32
 * logits[n_prompt][n_vocab].
 */
#ifndef NANOVLLM_TESTS_REFERENCE_CHECK_H
#define NANOVLLM_TESTS_REFERENCE_CHECK_H

#include <stdint.h>

#include "engine/runner.h"

typedef struct Reference {
    int n_prompt, n_vocab, n_greedy;
    int32_t *prompt, *greedy;
    float *margin, *logits;
} Reference;

Reference reference_load(const char *path); /* asserts: a missing file fails the test */
void reference_free(Reference *r);

/* One prefill of the reference prompt on the CPU (float32 compute and
 * cache): every position's logits within `bound` (relative L2 over
 * positions x vocabulary) and each position's argmax the reference's where
 * its top two are further apart than 6 rms errors. */
void reference_logits_within(const char *ref_path, const char *model, double bound);
/* The same with the matmuls' inputs in `dtype` (COMPUTE_BF16: --dtype bfloat16). */
void reference_logits_within_dtype(const char *ref_path, const char *model, double bound, ComputeDtype dtype);

/* Decoding through the KV cache (one prefill, then a token per step), fed
 * the reference's greedy tokens: at every step whose reference margin is
 * at least min_margin, our argmax is the reference's token; at least 4
 * steps must be compared. */
void reference_greedy_matches(const char *ref_path, const char *model, double min_margin);

#endif
