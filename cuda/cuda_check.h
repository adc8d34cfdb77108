/*
 * cuda_check.h - CUDA error checks that end in an Error, for the .cu files.
 *
 * Every CUDA runtime call's status is checked; a failure becomes a sentence
 * naming what was being done, and the function returns -1 (or NULL through
 * the caller). Kernel launches are checked with cudaGetLastError() right
 * after, which catches bad launch configurations without waiting for the GPU.
 */
#ifndef NANOVLLM_CUDA_CHECK_H
#define NANOVLLM_CUDA_CHECK_H

#include <cuda_runtime.h>

extern "C" {
#include "base/error.h"
}

static inline int cuda_fail(Error *err, const char *what, cudaError_t code) {
    return error_set(err, "CUDA error while %s: %s (%s)", what, cudaGetErrorString(code),
                     cudaGetErrorName(code));
}

/* `what` is a gerund phrase: "copying the batch to the GPU". */
#define CUDA_TRY(call, what, err)                                                                  \
    do {                                                                                           \
        cudaError_t cuda_try_status_ = (call);                                                     \
        if (cuda_try_status_ != cudaSuccess) return cuda_fail((err), (what), cuda_try_status_);    \
    } while (0)

#define CUDA_LAUNCHED(what, err) CUDA_TRY(cudaGetLastError(), "launching " what, err)

#endif
