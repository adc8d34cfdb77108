/*
 * cuda_pdl.h - programmatic dependent launch (sm_90) for the decode chain's
 * gemvs (C++, for the .cu files).
 *
 * A decode step at one sequence is a chain of small launches, each waiting
 * for the previous one to drain before its blocks even start, and then
 * waiting a memory latency for its first weights. With PDL a kernel
 * launched with cudaLaunchAttributeProgrammaticStreamSerialization may
 * start as soon as every block of the kernel before it has called
 * pdl_trigger() (which the gemvs and the decode attention do first thing);
 * it then issues its weight loads - weights are never written by a step -
 * and calls pdl_wait(), which returns once the previous kernel has
 * finished and its writes are visible, before it reads or writes anything
 * else. A kernel launched this way must call pdl_wait() before touching
 * any activation; one that is not launched this way waits as always, and
 * for it pdl_wait() returns at once. Both are no-ops before sm_90.
 * cuda_pdl_enable() turns the attribute on for the process (the runner, on
 * sm_90, unless NANOVLLM_CUDA_LEGACY=pdl); graphs capture it as
 * programmatic edges.
 */
#ifndef NANOVLLM_CUDA_PDL_H
#define NANOVLLM_CUDA_PDL_H

#include <cuda_runtime.h>

#include <utility>

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Whether launches through pdl_launch carry the attribute (cuda_gemv.cu). */
extern "C" bool cuda_pdl_enabled(void);
extern "C" void cuda_pdl_enable(bool on);

/* kernel<<<grid, block, shared, stream>>>(args...), with the PDL attribute
 * when enabled; errors are left for cudaGetLastError (CUDA_LAUNCHED). */
template <typename... Params, typename... Args>
static inline void pdl_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                              Args &&...args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared;
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = cuda_pdl_enabled() ? 1 : 0;
    (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

#endif
