/*
 * cuda_device.cu - CUDA device discovery.
 *
 * Linked with the static CUDA runtime, so the binary starts on machines with
 * no CUDA installed at all; the runtime then reports "no driver" here and the
 * caller falls back to (or refuses) the CPU runner with that reason.
 */
#include "cuda_device.h"

#include <cuda_runtime.h>
#include <stdio.h>

extern "C" bool cuda_compiled(void) { return true; }

extern "C" int cuda_device_probe(char *why, size_t why_size) {
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess) {
        snprintf(why, why_size, "no CUDA GPU available (%s)", cudaGetErrorString(rc));
        return 0;
    }
    if (count == 0) {
        snprintf(why, why_size, "no CUDA GPU available (the driver reports no devices)");
        return 0;
    }
    cudaDeviceProp prop;
    rc = cudaGetDeviceProperties(&prop, 0);
    if (rc != cudaSuccess) {
        snprintf(why, why_size, "no CUDA GPU available (%s)", cudaGetErrorString(rc));
        return 0;
    }
    snprintf(why, why_size, "%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
             (double)prop.totalGlobalMem / (1 << 30));
    return count;
}
