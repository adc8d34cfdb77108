/*
 * cpu_attention_decode_kernels.h - what cpu_attention_decode.c's kernels
 * and the vdpbf16ps kernels (cpu_attention_decode_dot.c)
 * share: the two inner loops' signatures, how far ahead they prefetch, and
 * the dispatch that makes a group's head count a constant.
 */
#ifndef NANOVLLM_CPU_ATTENTION_DECODE_KERNELS_H
#define NANOVLLM_CPU_ATTENTION_DECODE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "cpu_simd.h"

/* scores s[g * lds + j] = scale * q_g . k_j for the n rows of k (stride
 * elements apart), G heads of head_dim D. */
typedef void (*QkFn)(float *s, int lds, const float *q, int G, int D, const void *k, size_t stride,
                     int n, float scale);
/* acc[g * D + e] += sum_j p[g * lds + j] * v_j[e]. */
typedef void (*PvFn)(float *acc, const float *p, int lds, int G, int D, const void *v, size_t stride,
                     int n);

/* How far ahead of the row being read the kernels prefetch, into L2: 8 KiB
 * (32 bf16 rows of 128), and how much of each block's streams is prefetched
 * before they start. Against 4 rows into L1 and no block-start prefetch:
 * 10-20% less time over 28 layers x 8 KV heads, one sequence at 2048 tokens
 * and 64 sequences at 160, at the plain read of the same rows (`bench
 * --attention --device cpu`; cpu/PERFORMANCE.md). */
#define PREFETCH_BYTES 8192

/* The cache lines of [p, p + bytes), into L2. */
SIMD_INLINE void prefetch_span(const void *p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += 64) prefetch_l2((const char *)p + off);
}

/* Rows between the one being read and the one prefetched. */
SIMD_INLINE int prefetch_rows(size_t row_bytes) {
    size_t rows = PREFETCH_BYTES / row_bytes;
    return rows < 4 ? 4 : (int)rows;
}

/* K rows per pass of the score kernels for small groups (the reductions
 * take 4 rows at a time). */
#define QK_ROWS 4

/* The QK_ROWS rows from row j of k (row_bytes apart) into row[], each
 * prefetching its `bytes` pfr rows further on while there is one. */
SIMD_INLINE void qk_rows(const uint8_t *row[QK_ROWS], const void *k, int j, int n, size_t row_bytes, int pfr,
                         size_t bytes) {
    for (int r = 0; r < QK_ROWS; r++) {
        row[r] = (const uint8_t *)k + (size_t)(j + r) * row_bytes;
        if (j + r + pfr < n) prefetch_span(row[r] + pfr * row_bytes, bytes);
    }
}

/* Heads handled per pass of a SIMD kernel: their accumulators stay in registers. */
#define MAX_G 8

/* Heads in passes of at most MAX_G, with the common group sizes as constants
 * so that the per-head loops unroll and the accumulators stay in registers. */
#define GROUP_DISPATCH(KERNEL, G, ...)                                                             \
    switch (G) {                                                                                   \
    case 1: KERNEL(__VA_ARGS__, 1); break;                                                         \
    case 2: KERNEL(__VA_ARGS__, 2); break;                                                         \
    case 4: KERNEL(__VA_ARGS__, 4); break;                                                         \
    case 8: KERNEL(__VA_ARGS__, 8); break;                                                         \
    default: KERNEL(__VA_ARGS__, G); break;                                                        \
    }

#endif
