/*
 * attention_reference.h - the float64 decode attention the CPU kernels are
 * checked against (test_cpu_attention.c, test_cpu_kv_fp8.c,
 * test_cpu_attention_dot.c), over the CPU runner's paged layout: block b of
 * KV head h at ((b * kv_heads + h) * bs) * D; and the driver that runs the
 * kernels over split key ranges, as the runner does.
 */
#ifndef NANOVLLM_TESTS_ATTENTION_REFERENCE_H
#define NANOVLLM_TESTS_ATTENTION_REFERENCE_H

#include <stdint.h>

#include "cpu/cpu_attention_decode.h"

/* out[g * D + e] = softmax(q K^T / sqrt(D)) V for the G query heads of KV
 * head kv_head over keys [0, ctx), K and V as floats (kf, vf) in the
 * layout above, block j / bs of the sequence at table[j / bs]. */
void paged_attention_reference(double *out, const float *q, const float *kf, const float *vf,
                               const int32_t *table, int ctx, int bs, int kv_heads, int kv_head, int G, int D);

/* decode_in_parts' scratch: scores [G, block size]; max, sum [parts, G];
 * acc [parts, G, D]. */
typedef struct DecodeScratch {
    float *scores, *max, *sum, *acc;
} DecodeScratch;

/* out [G, D]: decode_attend_range at `isa` over keys [0, ctx) in `parts`
 * (at most 4) ranges of about equal size, merged by decode_finish. */
void decode_in_parts(float *out, CpuIsa isa, const DecodeKv *kv, const float *q, int G, int ctx, int parts,
                     const DecodeScratch *s);

#endif
