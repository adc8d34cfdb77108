/*
 * cublas_loader.h - cuBLAS, opened at run time (C++, for the CUDA runner).
 *
 * The binary links the CUDA runtime statically so that it starts anywhere,
 * GPU or not. cuBLAS is only shipped as a shared library here (600 MB with
 * cuBLASLt), so rather than making every machine need it, the CUDA runner
 * opens libcublas.so.<major> with dlopen when it starts and takes the few
 * functions it calls. Missing cuBLAS is then a clear start-up error for
 * --device cuda (and a reason to fall back for --device auto), not a loader
 * failure of the whole program.
 */
#ifndef NANOVLLM_CUBLAS_LOADER_H
#define NANOVLLM_CUBLAS_LOADER_H

#include <cublas_api.h>

extern "C" {
#include "base/error.h"
}

typedef struct CublasApi {
    void *library;
    cublasStatus_t (*create)(cublasHandle_t *handle);
    cublasStatus_t (*destroy)(cublasHandle_t handle);
    cublasStatus_t (*set_stream)(cublasHandle_t handle, cudaStream_t stream);
    cublasStatus_t (*set_workspace)(cublasHandle_t handle, void *workspace, size_t bytes);
    cublasStatus_t (*set_math_mode)(cublasHandle_t handle, cublasMath_t mode);
    cublasStatus_t (*gemm_ex)(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const void *alpha,
                              const void *A, cudaDataType Atype, int lda, const void *B,
                              cudaDataType Btype, int ldb, const void *beta, void *C,
                              cudaDataType Ctype, int ldc, cublasComputeType_t compute,
                              cublasGemmAlgo_t algo);
    const char *(*status_string)(cublasStatus_t status);
} CublasApi;

/* Opens cuBLAS (LD_LIBRARY_PATH, the system paths, then /usr/local/cuda). */
int cublas_load(CublasApi *api, Error *err);
void cublas_unload(CublasApi *api);

/* "what failed: cuBLAS's reason". */
int cublas_fail(const CublasApi *api, Error *err, const char *what, cublasStatus_t status);

#endif
