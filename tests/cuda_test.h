/*
 * cuda_test.h - shared pieces of the CUDA tests (built only with CUDA=1).
 *
 * require_gpu() skips a test, visibly and with the reason, on a machine with
 * no usable GPU (CI, the development machine); everything else here is
 * random data and device buffers for the kernel comparisons, the paged
 * attention cases, and the runner options the runner tests share.
 */
#ifndef NANOVLLM_TEST_CUDA_TEST_H
#define NANOVLLM_TEST_CUDA_TEST_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu/cpu_runner.h"
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

/* The slots a store was not to write (written[s] false, of S) still hold
 * dev_poisoned's 0xff bytes in both the K and the V cache (slot_bytes a
 * slot in each). */
static inline void expect_unwritten_slots(const void *k, const void *v, size_t slot_bytes, const bool *written,
                                          int S) {
    const unsigned char *kb = k, *vb = v;
    for (int s = 0; s < S; s++)
        if (!written[s])
            for (size_t i = 0; i < slot_bytes; i++)
                cr_assert(kb[(size_t)s * slot_bytes + i] == 0xff && vb[(size_t)s * slot_bytes + i] == 0xff,
                          "slot %d was not to be written", s);
}

/* The router logits the runner's GEMM would write for n tokens: float32
 * sums of the bf16 router rows ([E][H]) times x ([n][H]), uploaded to
 * d_logits ([n][E]). */
static inline void upload_router_logits(float *d_logits, const uint16_t *router, const float *x, int n, int E,
                                        int H) {
    float *logits = malloc(sizeof(float) * (size_t)n * E);
    cr_assert(logits);
    for (int t = 0; t < n; t++)
        for (int e = 0; e < E; e++) {
            float s = 0;
            for (int i = 0; i < H; i++) s += bf16_to_f32(router[e * H + i]) * x[t * H + i];
            logits[t * E + e] = s;
        }
    Error err = {0};
    cr_assert(cuda_upload(d_logits, logits, sizeof(float) * (size_t)n * E, &err) == 0, "%s", err.msg);
    free(logits);
}

/* The runner tests' options: up to 512 tokens and 16 sequences a step,
 * 2048 positions, a cache of `blocks` blocks of block_size tokens of kv,
 * matmul inputs at dtype. The CUDA runner takes the block count
 * (num_gpu_blocks_override); the CPU runner a byte budget, sized from
 * config for the same blocks (config NULL: the default budget). */
static inline RunnerOptions runner_test_options(const char *device, const ModelConfig *config, int block_size,
                                                int blocks, KvCacheDtype kv, ComputeDtype dtype, bool eager) {
    RunnerOptions o = runner_default_options();
    o.device = device;
    o.block_size = block_size;
    o.max_num_batched_tokens = 512;
    o.max_num_seqs = 16;
    o.max_model_len = 2048;
    o.num_gpu_blocks_override = blocks;
    o.kv_cache_dtype = kv;
    o.dtype = dtype;
    if (config) o.kv_cache_bytes = cpu_runner_block_bytes(config, block_size, kv) * (size_t)blocks;
    o.enforce_eager = eager;
    return o;
}

/* ---- paged attention cases, shared by the attention kernels' tests ---- */

#define ATTN_MAX_SEQS 8

typedef struct AttnCase {
    int nh, nkv, D, block_size, num_blocks;
    int num_seqs;
    int start[ATTN_MAX_SEQS], len[ATTN_MAX_SEQS]; /* per sequence: cached tokens, new tokens */
} AttnCase;

/* A decode step: one new token per sequence, the last of its keys. */
typedef struct DecodeCase {
    int nh, nkv, D, block_size, num_blocks, num_seqs;
    int keys[ATTN_MAX_SEQS]; /* context length of each sequence, its new token included */
} DecodeCase;

/* The AttnCase of a decode step: each sequence's keys but the last cached,
 * the last its one new token. */
static inline AttnCase decode_attn_case(const DecodeCase *dc) {
    AttnCase c = {dc->nh, dc->nkv, dc->D, dc->block_size, dc->num_blocks, dc->num_seqs, {0}, {0}};
    for (int s = 0; s < dc->num_seqs; s++) c.start[s] = dc->keys[s] - 1, c.len[s] = 1;
    return c;
}

/* Each sequence's blocks, a scattered and disjoint pick from the cache,
 * into flat (capacity entries; tables[s] points at sequence s's), and the
 * sequences' CudaAttnSeq; returns the entries used. */
static inline int attention_tables(const AttnCase *c, int32_t *flat, int capacity, int32_t **tables,
                                   CudaAttnSeq *seqs) {
    int next = 0, at = 0, token0 = 0;
    cr_assert_leq(c->num_seqs, ATTN_MAX_SEQS);
    for (int s = 0; s < c->num_seqs; s++) {
        int blocks = (c->start[s] + c->len[s] + c->block_size - 1) / c->block_size;
        cr_assert_leq(at + blocks, capacity, "the case's block tables outgrow the test's array");
        tables[s] = flat + at;
        for (int b = 0; b < blocks; b++) tables[s][b] = (int32_t)(((long)(next++) * 37 + 11) % c->num_blocks);
        seqs[s] = (CudaAttnSeq){token0, c->start[s], c->len[s], at};
        at += blocks;
        token0 += c->len[s];
    }
    cr_assert_leq(next, c->num_blocks, "the case needs more blocks than the cache has");
    return at;
}

/* Items of at most `tile` new tokens of one sequence; returns their count. */
static inline int attention_items(const AttnCase *c, int tile, CudaAttnItem *items, int capacity) {
    int n = 0;
    for (int s = 0; s < c->num_seqs; s++)
        for (int t0 = 0; t0 < c->len[s]; t0 += tile) {
            cr_assert_lt(n, capacity, "more items than the test's array holds");
            items[n++] = (CudaAttnItem){s, t0, c->len[s] - t0 < tile ? c->len[s] - t0 : tile};
        }
    return n;
}

/* float64 reference: softmax(q k^T / sqrt(D)) v over keys 0..position, for
 * every new token of every sequence (out and q: [tokens, nh, D]). */
static inline void attention_reference(float *out, const float *q, const float *k, const float *v,
                                       const AttnCase *c, int32_t *const *tables) {
    int t = 0, G = c->nh / c->nkv, bs = c->block_size, max_keys = 1;
    for (int s = 0; s < c->num_seqs; s++)
        if (c->start[s] + c->len[s] > max_keys) max_keys = c->start[s] + c->len[s];
    double *score = malloc(sizeof(double) * max_keys), *acc = malloc(sizeof(double) * c->D);
    cr_assert(score && acc);
    for (int s = 0; s < c->num_seqs; s++) {
        for (int i = 0; i < c->len[s]; i++, t++) {
            int pos = c->start[s] + i;
            for (int h = 0; h < c->nh; h++) {
                const float *qh = q + ((size_t)t * c->nh + h) * c->D;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= pos; j++) {
                    size_t slot = (size_t)tables[s][j / bs] * bs + j % bs;
                    const float *kr = k + (slot * c->nkv + h / G) * c->D;
                    double d = 0;
                    for (int e = 0; e < c->D; e++) d += (double)qh[e] * kr[e];
                    score[j] = d / sqrt((double)c->D);
                    mx = fmax(mx, score[j]);
                }
                for (int e = 0; e < c->D; e++) acc[e] = 0;
                for (int j = 0; j <= pos; j++) {
                    sum += (score[j] = exp(score[j] - mx));
                    size_t slot = (size_t)tables[s][j / bs] * bs + j % bs;
                    const float *vr = v + (slot * c->nkv + h / G) * c->D;
                    for (int e = 0; e < c->D; e++) acc[e] += score[j] * vr[e];
                }
                float *o = out + ((size_t)t * c->nh + h) * c->D;
                for (int e = 0; e < c->D; e++) o[e] = (float)(acc[e] / sum);
            }
        }
    }
    free(score);
    free(acc);
}

#endif
