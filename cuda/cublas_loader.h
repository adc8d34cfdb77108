/*
 * cublas_loader.h - cuBLAS and cuBLASLt, opened at run time (C++, for the
 * CUDA runner).
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

#include <cublasLt.h>
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

/* cuBLASLt, for the block-scaled FP8 GEMM (cuda_fp8_gemm.cu): optional,
 * since only that path needs it. */
typedef struct CublasLtApi {
    void *library;
    cublasStatus_t (*create)(cublasLtHandle_t *handle);
    cublasStatus_t (*destroy)(cublasLtHandle_t handle);
    cublasStatus_t (*desc_create)(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute, cudaDataType_t scale);
    cublasStatus_t (*desc_destroy)(cublasLtMatmulDesc_t desc);
    cublasStatus_t (*desc_set)(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void *buf,
                               size_t size);
    cublasStatus_t (*layout_create)(cublasLtMatrixLayout_t *layout, cudaDataType type, uint64_t rows, uint64_t cols,
                                    int64_t ld);
    cublasStatus_t (*layout_destroy)(cublasLtMatrixLayout_t layout);
    cublasStatus_t (*pref_create)(cublasLtMatmulPreference_t *pref);
    cublasStatus_t (*pref_destroy)(cublasLtMatmulPreference_t pref);
    cublasStatus_t (*pref_set)(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                               const void *buf, size_t size);
    cublasStatus_t (*heuristic)(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                cublasLtMatmulPreference_t pref, int requested,
                                cublasLtMatmulHeuristicResult_t *results, int *returned);
    cublasStatus_t (*matmul)(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                             cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta,
                             const void *C, cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t d,
                             const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes,
                             cudaStream_t stream);
} CublasLtApi;

int cublaslt_load(CublasLtApi *api, Error *err);
void cublaslt_unload(CublasLtApi *api);

/* Opens cuBLAS (LD_LIBRARY_PATH, the system paths, then /usr/local/cuda). */
int cublas_load(CublasApi *api, Error *err);
void cublas_unload(CublasApi *api);

/* "what failed: cuBLAS's reason". */
int cublas_fail(const CublasApi *api, Error *err, const char *what, cublasStatus_t status);

#endif
