/*
 * dummy_weights.h - random weights from a config alone (`--load-format
 * dummy`, as vLLM's flag), for benchmarks of shapes nobody wants to
 * download.
 *
 * Every value is a pure function of (the tensor's key, its index): the key
 * hashes the tensor's Hugging Face name with the seed, the value is a
 * uniform draw in [-amplitude, amplitude) from splitmix64, rounded to bf16.
 * Exact integer and IEEE single-rounding float steps only, so the CPU and
 * the GPU (which fills its matrices in place, never holding them on the
 * host) produce the same bits. Header-only so that cuda/ compiles the same
 * code for the device.
 */
#ifndef NANOVLLM_DUMMY_WEIGHTS_H
#define NANOVLLM_DUMMY_WEIGHTS_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define DUMMY_FN static inline __host__ __device__
#else
#define DUMMY_FN static inline
#endif

DUMMY_FN uint64_t dummy_mix(uint64_t x) { /* splitmix64's finaliser */
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Value i of the tensor with this key, in [-amplitude, amplitude). */
DUMMY_FN float dummy_value(uint64_t key, uint64_t i, float amplitude) {
    uint64_t r = dummy_mix(key + (i + 1) * 0x9E3779B97F4A7C15ull);
    int32_t v = (int32_t)(r >> 40) - (1 << 23); /* 24 bits, centred */
    float u = (float)v * 0x1p-23f;                /* exact */
    return u * amplitude;                         /* one rounding */
}

/* bf16 of a float, round to nearest even (base/half.h's rule; no NaN here). */
DUMMY_FN uint16_t dummy_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Byte i of an FP8 dummy matrix (float8_e4m3fn, model/weight_format.h): a
 * random sign and one of the 64 codes 0x30..0x6f (exponents 6..13, values
 * 0.5..120, log-uniform), never NaN. Their root mean square is
 * DUMMY_FP8_RMS, so a scale of amplitude / (sqrt(3) * DUMMY_FP8_RMS) gives
 * the matrix the spread of the bf16 dummies' uniform [-amplitude,
 * amplitude). Integer steps only: one byte per value costs one hash. */
#define DUMMY_FP8_RMS 38.2968f /* sqrt(mean over the 64 codes of value^2) = sqrt(1466.6) */
DUMMY_FN uint8_t dummy_fp8(uint64_t key, uint64_t i) {
    uint64_t r = dummy_mix(key + (i + 1) * 0x9E3779B97F4A7C15ull);
    return (uint8_t)(((r >> 56) & 0x80) | (0x30 + ((r >> 40) & 0x3f)));
}

/* The key of a tensor: FNV-1a of its name, mixed with the seed. */
static inline uint64_t dummy_key(const char *name, uint64_t seed) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001B3ull;
    return dummy_mix(h ^ dummy_mix(seed + 0x9E3779B97F4A7C15ull));
}

#endif
