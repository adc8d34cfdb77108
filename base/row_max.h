/*
 * row_max.h - the largest value of a float row, vectorized per CPU ISA.
 *
 * The sampler (engine/) and the CPU backend's attention (cpu/) both reduce
 * rows this way; it lives below both so neither depends on the other. A
 * max is exact in any order, so every ISA gives the same value.
 */
#ifndef NANOVLLM_ROW_MAX_H
#define NANOVLLM_ROW_MAX_H

/* Largest of x[0..n), n >= 1. */
float row_max(const float *x, int n);

#endif
