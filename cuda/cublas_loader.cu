/*
 * cublas_loader.cu - dlopen of cuBLAS (see cublas_loader.h).
 */
#include "cublas_loader.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)

#define CUDA_LIB_PATHS(name)                                                                              \
    {name ".so." STR(CUBLAS_VER_MAJOR), "/usr/local/cuda/lib64/" name ".so." STR(CUBLAS_VER_MAJOR),              \
     "/usr/local/cuda/targets/x86_64-linux/lib/" name ".so." STR(CUBLAS_VER_MAJOR)}

static const char *const CUBLAS_NAMES[] = CUDA_LIB_PATHS("libcublas");
static const char *const CUBLASLT_NAMES[] = CUDA_LIB_PATHS("libcublasLt");

/* The first of names[3] that opens; first_error: why the first failed. */
static void *open_first(const char *const names[3], char *first_error, size_t cap) {
    void *library = NULL;
    for (size_t i = 0; i < 3 && !library; i++) {
        library = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!library && !first_error[0]) {
            const char *e = dlerror();
            snprintf(first_error, cap, "%s", e ? e : "not found");
        }
    }
    return library;
}

template <typename F>
static bool take(void *library, const char *name, F *out) {
    void *sym = dlsym(library, name);
    *out = reinterpret_cast<F>(sym);
    return sym != NULL;
}

int cublas_load(CublasApi *api, Error *err) {
    memset(api, 0, sizeof *api);
    char first_error[512] = "";
    api->library = open_first(CUBLAS_NAMES, first_error, sizeof first_error);
    if (!api->library)
        return error_set(err, "cannot load cuBLAS (%s); put the CUDA %d libraries on LD_LIBRARY_PATH",
                         first_error, CUBLAS_VER_MAJOR);
    bool ok = take(api->library, "cublasCreate_v2", &api->create) &&
              take(api->library, "cublasDestroy_v2", &api->destroy) &&
              take(api->library, "cublasSetStream_v2", &api->set_stream) &&
              take(api->library, "cublasSetWorkspace_v2", &api->set_workspace) &&
              take(api->library, "cublasSetMathMode", &api->set_math_mode) &&
              take(api->library, "cublasGemmEx", &api->gemm_ex) &&
              take(api->library, "cublasGetStatusString", &api->status_string);
    if (!ok) {
        cublas_unload(api);
        return error_set(err, "the cuBLAS library found lacks a function nanovllm needs (%s)", dlerror());
    }
    return 0;
}

int cublaslt_load(CublasLtApi *api, Error *err) {
    memset(api, 0, sizeof *api);
    char first_error[512] = "";
    api->library = open_first(CUBLASLT_NAMES, first_error, sizeof first_error);
    if (!api->library) return error_set(err, "cannot load cuBLASLt (%s)", first_error);
    bool ok = take(api->library, "cublasLtCreate", &api->create) &&
              take(api->library, "cublasLtDestroy", &api->destroy) &&
              take(api->library, "cublasLtMatmulDescCreate", &api->desc_create) &&
              take(api->library, "cublasLtMatmulDescDestroy", &api->desc_destroy) &&
              take(api->library, "cublasLtMatmulDescSetAttribute", &api->desc_set) &&
              take(api->library, "cublasLtMatrixLayoutCreate", &api->layout_create) &&
              take(api->library, "cublasLtMatrixLayoutDestroy", &api->layout_destroy) &&
              take(api->library, "cublasLtMatmulPreferenceCreate", &api->pref_create) &&
              take(api->library, "cublasLtMatmulPreferenceDestroy", &api->pref_destroy) &&
              take(api->library, "cublasLtMatmulPreferenceSetAttribute", &api->pref_set) &&
              take(api->library, "cublasLtMatmulAlgoGetHeuristic", &api->heuristic) &&
              take(api->library, "cublasLtMatmul", &api->matmul);
    if (!ok) {
        cublaslt_unload(api);
        return error_set(err, "the cuBLASLt library found lacks a function nanovllm needs (%s)", dlerror());
    }
    return 0;
}

void cublaslt_unload(CublasLtApi *api) {
    if (api->library) dlclose(api->library);
    memset(api, 0, sizeof *api);
}

void cublas_unload(CublasApi *api) {
    if (api->library) dlclose(api->library);
    memset(api, 0, sizeof *api);
}

int cublas_fail(const CublasApi *api, Error *err, const char *what, cublasStatus_t status) {
    const char *reason = api->status_string ? api->status_string(status) : NULL;
    return error_set(err, "cuBLAS error while %s: %s (status %d)", what, reason ? reason : "unknown",
                     (int)status);
}
