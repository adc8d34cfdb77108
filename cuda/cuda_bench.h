/*
 * cuda_bench.h - kernel benchmarks for `nanovllm bench --attention` (plain C).
 *
 * Decode attention is most of the bytes a decode step moves, so its speed
 * is read against the device's own copy bandwidth, measured in the same
 * run: achieved bytes/s over copy bytes/s is the fraction of the reachable
 * limit (the guide's rule: ratios against a baseline from the same run).
 * Built without CUDA, cuda_bench_attention() says so (cuda_device_none.c).
 *
 * NANOVLLM_BENCH_KV=fp8 (or fp8_e4m3) times decode attention over an fp8
 * (e4m3) KV cache: seconds and kv_bytes are then the fp8 kernel's (one
 * byte a value), and the legacy fields hold the current kernel on a bf16
 * cache of the same values with the same splits (max_diff_legacy: fp8
 * against bf16 output), so one run is the fp8 / bf16 comparison; the
 * device string says so. Unset, bf16 or auto: the bf16 cache as before.
 */
#ifndef NANOVLLM_CUDA_BENCH_H
#define NANOVLLM_CUDA_BENCH_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdbool.h>

#include "base/error.h"

typedef struct CudaAttentionBench {
    char device[192];
    int splits;               /* what the runner would choose for this batch */
    double seconds;           /* one decode attention launch (with its merge), best of the runs */
    double seconds_unsplit;   /* the same with one block per (sequence, KV head) */
    int legacy_splits;        /* the previous kernel (NANOVLLM_CUDA_LEGACY=attention): its splits */
    double seconds_legacy;    /* and its time, with its merge kernel */
    double max_diff_legacy;   /* largest |difference| of the two kernels' outputs (random K, V, q) */
    double kv_bytes;          /* K and V bytes one launch must read */
    double copy_bytes_per_s;  /* device-to-device copy, bytes read + written per second */
    bool fp8;                 /* NANOVLLM_BENCH_KV=fp8: the timed cache is fp8, "legacy" the bf16 one */
} CudaAttentionBench;

/* Whether NANOVLLM_BENCH_KV asks for the fp8 cache (an unknown value is an error). */
int cuda_bench_kv_fp8(bool *fp8, Error *err);

/* Times decode attention for `batch` sequences of `context` tokens each
 * (one layer, the given head shape), on GPU 0. */
int cuda_bench_attention(int batch, int context, int num_heads, int num_kv_heads, int head_dim,
                         int block_size, CudaAttentionBench *out, Error *err);

/* Bytes read + written per second by a device-to-device copy on GPU 0 (best
 * of several, buffers sized to the free memory so a loaded runner leaves
 * room): the rate at which a decode step can stream its weights, so
 * weight bytes per token over it is decode's floor. Built without CUDA, it
 * says so (cuda_device_none.c). */
int cuda_bench_copy_bandwidth(double *bytes_per_s, Error *err);

#ifdef __cplusplus
}
#endif

#endif
