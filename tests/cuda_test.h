/*
 * cuda_test.h - shared pieces of the CUDA tests (built only with CUDA=1).
 *
 * require_gpu() skips a test, visibly and with the reason, on a machine with
 * no usable GPU (CI, the development machine); everything else here is
 * random data and device buffers for the kernel comparisons.
 */
#ifndef NANOVLLM_TEST_CUDA_TEST_H
#define NANOVLLM_TEST_CUDA_TEST_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda/cuda_device.h"
#include "cuda/cuda_kernels.h"
#include "base/half.h"

static inline void require_gpu(void) {
    char why[256];
    if (cuda_device_probe(why, sizeof why) < 1) cr_skip_test("no GPU here: %s", why);
}

/* Uniform in [-1, 1) from a 64-bit LCG: reproducible, never all zeros. */
static inline float test_uniform(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*state >> 40) * (1.0 / (1u << 24))) * 2.0f - 1.0f; /* 24 bits: [-1, 1) */
}

static inline float *random_floats(size_t n, float scale, uint64_t seed) {
    float *v = malloc(sizeof(float) * n);
    cr_assert(v);
    for (size_t i = 0; i < n; i++) v[i] = scale * test_uniform(&seed);
    return v;
}

/* bf16 values and their exact float32 widening (what the GPU will read). */
static inline uint16_t *random_bf16(size_t n, float scale, uint64_t seed, float **widened) {
    uint16_t *v = malloc(sizeof(uint16_t) * n);
    float *w = malloc(sizeof(float) * n);
    cr_assert(v && w);
    for (size_t i = 0; i < n; i++) {
        v[i] = f32_to_bf16(scale * test_uniform(&seed));
        w[i] = bf16_to_f32(v[i]);
    }
    *widened = w;
    return v;
}

/* A device copy of n bytes of host data (NULL: uninitialised). */
static inline void *dev_copy(const void *host, size_t bytes) {
    Error err = {0};
    void *d = cuda_alloc(bytes, &err);
    cr_assert(d, "%s", err.msg);
    if (host) cr_assert(cuda_upload(d, host, bytes, &err) == 0, "%s", err.msg);
    return d;
}

static inline void dev_fetch(void *host, const void *dev, size_t bytes) {
    Error err = {0};
    cr_assert(cuda_synchronize(&err) == 0, "%s", err.msg);
    cr_assert(cuda_download(host, dev, bytes, &err) == 0, "%s", err.msg);
}

/* Fills a device buffer with 0xff bytes: NaN as bf16 and float32, so an
 * element a kernel forgot to write cannot pass. */
static inline void *dev_poisoned(size_t bytes) {
    unsigned char *h = malloc(bytes);
    cr_assert(h);
    for (size_t i = 0; i < bytes; i++) h[i] = 0xff;
    void *d = dev_copy(h, bytes);
    free(h);
    return d;
}

/* ||a - b|| / ||b|| */
static inline double rel_error(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline float *widen_bf16(const uint16_t *v, size_t n) {
    float *w = malloc(sizeof(float) * n);
    cr_assert(w);
    for (size_t i = 0; i < n; i++) w[i] = bf16_to_f32(v[i]);
    return w;
}

#endif
