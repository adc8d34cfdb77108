/*
 * cuda_device_none.c - cuda_device.h and cuda_runner.h for builds without
 * nvcc (or with CUDA=0).
 */
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
