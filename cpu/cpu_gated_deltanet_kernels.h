/*
 * cpu_gated_deltanet_kernels.h - the inner loops of the Gated DeltaNet
 * module (cpu_gated_deltanet.h), one table per instruction set: the
 * portable one in cpu_gated_deltanet.c (the reference the tests hold the
 * others to), AVX2+FMA in cpu_gated_deltanet_avx2.c, AVX-512 in
 * cpu_gated_deltanet_avx512.c (gemm's bits are AVX2's). Everything the module
 * does over a head's dv-wide rows goes through gemm; the rest is O(rows).
 */
#ifndef NANOVLLM_CPU_GATED_DELTANET_KERNELS_H
#define NANOVLLM_CPU_GATED_DELTANET_KERNELS_H

typedef struct GdnKernels {
    /* C[m][w] = c_scale * C[m][w] + sum_{k < N} X[m*ldx + k] * B[k*ldb + w]
     * for m < M, w < W, the sum in k order; c_scale == 0 writes without
     * reading C. C must not overlap X or B. */
    void (*gemm)(float *C, int ldc, float c_scale, const float *X, int ldx, const float *B,
                 int ldb, int M, int N, int W);
    float (*dot)(const float *x, const float *y, int n);
    void (*silu)(float *x, int n); /* in place: x / (1 + exp(-x)) */
    const char *name;
} GdnKernels;

extern const GdnKernels gdn_kernels_portable;
#if defined(__x86_64__)
extern const GdnKernels gdn_kernels_avx2;
extern const GdnKernels gdn_kernels_avx512;
#endif

#endif
