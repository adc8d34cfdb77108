/*
 * cuda_device.h - what the rest of the program may ask about CUDA (plain C).
 *
 * Implemented by cuda_device.cu when nvcc built the CUDA sources, and by
 * cuda_device_none.c otherwise, so callers never need an #ifdef.
 */
#ifndef NANOVLLM_CUDA_DEVICE_H
#define NANOVLLM_CUDA_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* True when this binary contains CUDA code. */
bool cuda_compiled(void);

/* Number of usable CUDA GPUs. On 0, why[] says why (no driver, no device,
 * built without CUDA); on > 0 it names device 0. */
int cuda_device_probe(char *why, size_t why_size);

#ifdef __cplusplus
}
#endif

#endif
