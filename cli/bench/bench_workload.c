/*
 * bench_workload.c - Python's random, and bench.py's draws (see the header).
 *
 * MT19937 as in Matsumoto and Nishimura's reference, seeded the way CPython
 * seeds it from an int (init_by_array over the int's 32-bit words; 0 is one
 * zero word), and randint as CPython's _randbelow: k = bit length of the
 * range, getrandbits(k) (the top k bits of one output), retried until below.
 */
#include "bench_workload.h"

#include <stdlib.h>
#include <string.h>

#define MT_N 624
#define MT_M 397

static void init_genrand(PyRandom *r, uint32_t s) {
    r->mt[0] = s;
    for (int i = 1; i < MT_N; i++)
        r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
    r->index = MT_N;
}

void pyrandom_seed(PyRandom *r, uint32_t seed) {
    uint32_t key[1] = {seed};
    int key_len = 1, i = 1, j = 0;
    init_genrand(r, 19650218u);
    for (int k = MT_N > key_len ? MT_N : key_len; k; k--) {
        r->mt[i] = (r->mt[i] ^ ((r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        i++;
        j++;
        if (i >= MT_N) {
            r->mt[0] = r->mt[MT_N - 1];
            i = 1;
        }
        if (j >= key_len) j = 0;
    }
    for (int k = MT_N - 1; k; k--) {
        r->mt[i] = (r->mt[i] ^ ((r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        i++;
        if (i >= MT_N) {
            r->mt[0] = r->mt[MT_N - 1];
            i = 1;
        }
    }
    r->mt[0] = 0x80000000u;
    r->index = MT_N;
}

uint32_t pyrandom_uint32(PyRandom *r) {
    static const uint32_t mag[2] = {0, 0x9908b0dfu};
    if (r->index >= MT_N) {
        int k = 0;
        for (; k < MT_N - MT_M; k++) {
            uint32_t y = (r->mt[k] & 0x80000000u) | (r->mt[k + 1] & 0x7fffffffu);
            r->mt[k] = r->mt[k + MT_M] ^ (y >> 1) ^ mag[y & 1];
        }
        for (; k < MT_N - 1; k++) {
            uint32_t y = (r->mt[k] & 0x80000000u) | (r->mt[k + 1] & 0x7fffffffu);
            r->mt[k] = r->mt[k + (MT_M - MT_N)] ^ (y >> 1) ^ mag[y & 1];
        }
        uint32_t y = (r->mt[MT_N - 1] & 0x80000000u) | (r->mt[0] & 0x7fffffffu);
        r->mt[MT_N - 1] = r->mt[MT_M - 1] ^ (y >> 1) ^ mag[y & 1];
        r->index = 0;
    }
    uint32_t y = r->mt[r->index++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

long pyrandom_randint(PyRandom *r, long a, long b) {
    uint64_t n = (uint64_t)(b - a + 1);
    int k = 0;
    while ((n >> k) != 0) k++; /* bit length */
    uint32_t v;
    do v = pyrandom_uint32(r) >> (32 - k);
    while (v >= n);
    return a + (long)v;
}

int bench_workload_make(BenchWorkload *w, int num_seqs, int min_in, int max_in, int min_out,
                        int max_out, uint32_t seed) {
    memset(w, 0, sizeof *w);
    w->num_seqs = num_seqs;
    w->prompts = calloc((size_t)num_seqs, sizeof *w->prompts);
    w->prompt_lens = calloc((size_t)num_seqs, sizeof *w->prompt_lens);
    w->max_tokens = calloc((size_t)num_seqs, sizeof *w->max_tokens);
    if (!w->prompts || !w->prompt_lens || !w->max_tokens) {
        bench_workload_free(w);
        return -1;
    }
    PyRandom r;
    pyrandom_seed(&r, seed);
    for (int i = 0; i < num_seqs; i++) {
        int len = (int)pyrandom_randint(&r, min_in, max_in);
        w->prompts[i] = malloc(sizeof(int32_t) * (size_t)len);
        if (!w->prompts[i]) {
            bench_workload_free(w);
            return -1;
        }
        for (int t = 0; t < len; t++) w->prompts[i][t] = (int32_t)pyrandom_randint(&r, 0, 10000);
        w->prompt_lens[i] = len;
        w->total_prompt_tokens += len;
    }
    for (int i = 0; i < num_seqs; i++) {
        w->max_tokens[i] = (int)pyrandom_randint(&r, min_out, max_out);
        w->total_output_tokens += w->max_tokens[i];
    }
    return 0;
}

void bench_workload_free(BenchWorkload *w) {
    for (int i = 0; w->prompts && i < w->num_seqs; i++) free(w->prompts[i]);
    free(w->prompts);
    free(w->prompt_lens);
    free(w->max_tokens);
    memset(w, 0, sizeof *w);
}
