/*
 * cuda_device_none.c - cuda_device.h, cuda_runner.h and cuda_bench.h for
 * builds without nvcc (or with CUDA=0).
 */
#include "cuda_bench.h"
#include "cuda_device.h"
#include "cuda_runner.h"

#include <stdio.h>

bool cuda_compiled(void) { return false; }

int cuda_device_probe(char *why, size_t why_size) {
    snprintf(why, why_size, "no CUDA GPU available (this binary was built without CUDA)");
    return 0;
}

Runner *cuda_runner_create(const ModelWeights *model, const RunnerOptions *opts, Error *err) {
    (void)model;
    (void)opts;
    error_set(err, "this binary was built without CUDA (make CUDA=1 with nvcc installed)");
    return NULL;
}

int cuda_bench_attention(int batch, int context, int num_heads, int num_kv_heads, int head_dim,
                         int block_size, CudaAttentionBench *out, Error *err) {
    (void)batch, (void)context, (void)num_heads, (void)num_kv_heads, (void)head_dim, (void)block_size;
    (void)out;
    return error_set(err, "this binary was built without CUDA (make CUDA=1 with nvcc installed)");
}

int cuda_bench_kv_fp8(bool *fp8, Error *err) {
    *fp8 = false;
    return error_set(err, "this binary was built without CUDA (make CUDA=1 with nvcc installed)");
}

int cuda_bench_copy_bandwidth(double *bytes_per_s, Error *err) {
    *bytes_per_s = 0;
    return error_set(err, "this binary was built without CUDA (make CUDA=1 with nvcc installed)");
}
