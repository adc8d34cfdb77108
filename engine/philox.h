/*
 * philox.h - the Philox4x32-10 counter-based random number generator.
 *
 * Sampling randomness must not depend on what else shares a batch, on
 * preemption and recomputation, or on which backend runs: a seeded request
 * must give the same tokens everywhere. A counter-based generator gives that
 * for free - the random numbers for a token are a pure function of (request
 * seed, sample index, token position) - and Philox is the one cuRAND and
 * PyTorch use on GPUs. Written to compile as C and as CUDA (`PHILOX_FN`).
 * Known-answer tests against Random123's vectors are in tests/test_sampler.c.
 */
#ifndef NANOVLLM_PHILOX_H
#define NANOVLLM_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define PHILOX_FN static inline __host__ __device__
#else
#define PHILOX_FN static inline
#endif

/* out = Philox4x32-10(counter, key). */
PHILOX_FN void philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* A uniform double in [0, 1) with 53 random bits, for the token sampled at
 * `position` of sample `sample_index` of a request seeded with `seed`. */
PHILOX_FN double philox_uniform(uint64_t seed, uint32_t sample_index, uint32_t position) {
    uint32_t counter[4] = {position, sample_index, 0, 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t r[4];
    philox4x32_10(counter, key, r);
    uint64_t bits = ((uint64_t)r[0] << 21) ^ (r[1] >> 11); /* 53 bits */
    return (double)(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

#endif
