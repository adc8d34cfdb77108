/*
 * cublas_loader.cu - dlopen of cuBLAS (see cublas_loader.h).
 */
#include "cublas_loader.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)

static const char *const LIBRARY_NAMES[] = {
    "libcublas.so." STR(CUBLAS_VER_MAJOR),
    "/usr/local/cuda/lib64/libcublas.so." STR(CUBLAS_VER_MAJOR),
    "/usr/local/cuda/targets/x86_64-linux/lib/libcublas.so." STR(CUBLAS_VER_MAJOR),
};

template <typename F>
static bool take(void *library, const char *name, F *out) {
    void *sym = dlsym(library, name);
    *out = reinterpret_cast<F>(sym);
    return sym != NULL;
}

int cublas_load(CublasApi *api, Error *err) {
    memset(api, 0, sizeof *api);
    char first_error[512] = "";
    for (size_t i = 0; i < sizeof LIBRARY_NAMES / sizeof LIBRARY_NAMES[0] && !api->library; i++) {
        api->library = dlopen(LIBRARY_NAMES[i], RTLD_NOW | RTLD_LOCAL);
        if (!api->library && !first_error[0]) {
            const char *e = dlerror();
            snprintf(first_error, sizeof first_error, "%s", e ? e : "not found");
        }
    }
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

void cublas_unload(CublasApi *api) {
    if (api->library) dlclose(api->library);
    memset(api, 0, sizeof *api);
}

int cublas_fail(const CublasApi *api, Error *err, const char *what, cublasStatus_t status) {
    const char *reason = api->status_string ? api->status_string(status) : NULL;
    return error_set(err, "cuBLAS error while %s: %s (status %d)", what, reason ? reason : "unknown",
                     (int)status);
}
