/*
 * matmul_reference.h - what the matmul kernel tests share: random weights in
 * bf16 and f32 form and a float64 reference of y = x . W^T.
 */
#ifndef NANOVLLM_TESTS_MATMUL_REFERENCE_H
#define NANOVLLM_TESTS_MATMUL_REFERENCE_H

#include <stdint.h>

#include "base/cpu_isa.h"
#include "model/model_weights.h"

/* Uniform in [-1, 1) from a fixed xorshift64 sequence. */
float matmul_uniform(void);

/* One weight in both forms: bf16 and its exact f32 value (or plain f32). */
typedef struct TestWeight {
    Weight w;
    float *wf;    /* the values the kernel multiplies by */
    uint16_t *wb; /* bf16 storage (bf16 weights) */
} TestWeight;

TestWeight make_test_weight(int N, int K, WeightType type);
void free_test_weight(TestWeight *t);

/* Asserts |y - x . W^T| <= tol x sum |x w| for every output (float64
 * reference; scaling by the magnitudes keeps cancellation from inflating it). */
void check_matmul_reference(const float *y, const float *x, int M, const TestWeight *t, double tol,
                            const char *what, CpuIsa isa);

#endif
