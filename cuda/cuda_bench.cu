/*
 * cuda_bench.cu - decode attention against the copy bandwidth (cuda_bench.h).
 *
 * The KV cache is filled with a constant (the values do not change the
 * work), each sequence's blocks are spread over the cache as the block
 * manager would leave them, and every launch is timed with CUDA events,
 * best of several after a warm-up.
 */
#include "cuda_bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_kernels.h"

#define RUNS 10

typedef struct Buffers {
    uint16_t *k, *v, *q, *out;
    CudaAttnSeq *seqs;
    CudaAttnItem *items;
    int32_t *tables;
    float *split;
    void *copy_src, *copy_dst;
    cudaEvent_t start, stop;
} Buffers;

static void free_buffers(Buffers *b) {
    void *p[] = {b->k, b->v, b->q, b->out, b->seqs, b->items, b->tables, b->split, b->copy_src, b->copy_dst};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) cuda_free(p[i]);
    if (b->start) cudaEventDestroy(b->start);
    if (b->stop) cudaEventDestroy(b->stop);
}

/* Seconds of the fastest of RUNS launches (after one warm-up). */
static int time_attention(Buffers *b, int batch, int nh, int nkv, int D, int bs, int splits,
                          double *seconds, Error *err) {
    *seconds = 1e30;
    for (int run = -1; run < RUNS; run++) {
        CUDA_TRY(cudaEventRecord(b->start, 0), "recording an event", err);
        if (cuda_attention(b->out, b->q, b->k, b->v, b->seqs, b->items, batch, b->tables, nh, nkv, D, bs,
                           splits, b->split, NULL, err))
            return -1;
        CUDA_TRY(cudaEventRecord(b->stop, 0), "recording an event", err);
        CUDA_TRY(cudaEventSynchronize(b->stop), "running attention", err);
        float ms = 0;
        CUDA_TRY(cudaEventElapsedTime(&ms, b->start, b->stop), "reading an event", err);
        if (run >= 0 && ms / 1e3 < *seconds) *seconds = ms / 1e3;
    }
    return 0;
}

static int setup(Buffers *b, int batch, int context, int nh, int nkv, int D, int bs, Error *err) {
    int per_seq = (context + bs - 1) / bs;
    size_t blocks = (size_t)batch * per_seq, cache = blocks * bs * nkv * D;
    CudaAttnSeq *seqs = (CudaAttnSeq *)malloc(sizeof(CudaAttnSeq) * batch);
    CudaAttnItem *items = (CudaAttnItem *)malloc(sizeof(CudaAttnItem) * batch);
    int32_t *tables = (int32_t *)malloc(sizeof(int32_t) * blocks);
    if (!seqs || !items || !tables) {
        free(seqs);
        free(items);
        free(tables);
        return error_set(err, "out of memory");
    }
    for (int s = 0; s < batch; s++) {
        seqs[s] = (CudaAttnSeq){s, context - 1, 1, s * per_seq};
        items[s] = (CudaAttnItem){s, 0, 1};
        for (int j = 0; j < per_seq; j++) /* block j of every sequence side by side */
            tables[s * per_seq + j] = (int32_t)((size_t)j * batch + s);
    }
    int rc = -1;
    if ((b->k = (uint16_t *)cuda_alloc(cache * 2, err)) && (b->v = (uint16_t *)cuda_alloc(cache * 2, err)) &&
        (b->q = (uint16_t *)cuda_alloc((size_t)batch * nh * D * 2, err)) &&
        (b->out = (uint16_t *)cuda_alloc((size_t)batch * nh * D * 2, err)) &&
        (b->seqs = (CudaAttnSeq *)cuda_alloc(sizeof(CudaAttnSeq) * batch, err)) &&
        (b->items = (CudaAttnItem *)cuda_alloc(sizeof(CudaAttnItem) * batch, err)) &&
        (b->tables = (int32_t *)cuda_alloc(sizeof(int32_t) * blocks, err)) &&
        (b->split = (float *)cuda_alloc(cuda_attention_split_workspace_bytes(D, CUDA_MAX_SPLIT_BLOCKS), err)) &&
        cuda_upload(b->seqs, seqs, sizeof(CudaAttnSeq) * batch, err) == 0 &&
        cuda_upload(b->items, items, sizeof(CudaAttnItem) * batch, err) == 0 &&
        cuda_upload(b->tables, tables, sizeof(int32_t) * blocks, err) == 0)
        rc = 0;
    free(seqs);
    free(items);
    free(tables);
    if (rc) return -1;
    /* 0x3c3c: bf16 0.0115 everywhere, a harmless value */
    CUDA_TRY(cudaMemset(b->k, 0x3c, cache * 2), "filling the cache", err);
    CUDA_TRY(cudaMemset(b->v, 0x3c, cache * 2), "filling the cache", err);
    CUDA_TRY(cudaMemset(b->q, 0x3c, (size_t)batch * nh * D * 2), "filling q", err);
    CUDA_TRY(cudaEventCreate(&b->start), "creating an event", err);
    CUDA_TRY(cudaEventCreate(&b->stop), "creating an event", err);
    return 0;
}

/* Bytes read + written per second by cudaMemcpy between two 1 GiB buffers. */
static int copy_bandwidth(Buffers *b, double *bytes_per_s, Error *err) {
    const size_t n = (size_t)1 << 30;
    if (!(b->copy_src = cuda_alloc(n, err)) || !(b->copy_dst = cuda_alloc(n, err))) return -1;
    double best = 1e30;
    for (int run = -1; run < RUNS; run++) {
        CUDA_TRY(cudaEventRecord(b->start, 0), "recording an event", err);
        CUDA_TRY(cudaMemcpyAsync(b->copy_dst, b->copy_src, n, cudaMemcpyDeviceToDevice, 0), "copying", err);
        CUDA_TRY(cudaEventRecord(b->stop, 0), "recording an event", err);
        CUDA_TRY(cudaEventSynchronize(b->stop), "copying", err);
        float ms = 0;
        CUDA_TRY(cudaEventElapsedTime(&ms, b->start, b->stop), "reading an event", err);
        if (run >= 0 && ms / 1e3 < best) best = ms / 1e3;
    }
    *bytes_per_s = 2.0 * (double)n / best;
    return 0;
}

extern "C" int cuda_bench_attention(int batch, int context, int num_heads, int num_kv_heads, int head_dim,
                                    int block_size, CudaAttentionBench *out, Error *err) {
    memset(out, 0, sizeof *out);
    if (batch < 1 || context < 1) return error_set(err, "batch and context must be at least 1");
    int count = 0;
    CUDA_TRY(cudaGetDeviceCount(&count), "looking for a GPU", err);
    if (count < 1) return error_set(err, "no CUDA GPU available");
    cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, 0), "reading GPU 0's properties", err);
    snprintf(out->device, sizeof out->device, "%.80s (sm_%d%d, %d SMs)", prop.name, prop.major, prop.minor,
             prop.multiProcessorCount);
    out->splits = cuda_attention_choose_splits(batch, num_kv_heads, context, prop.multiProcessorCount,
                                               CUDA_MAX_SPLIT_BLOCKS);
    out->kv_bytes = 2.0 * context * batch * num_kv_heads * head_dim * 2;
    Buffers b;
    memset(&b, 0, sizeof b);
    int rc = setup(&b, batch, context, num_heads, num_kv_heads, head_dim, block_size, err);
    if (rc == 0)
        rc = time_attention(&b, batch, num_heads, num_kv_heads, head_dim, block_size, out->splits,
                            &out->seconds, err);
    if (rc == 0)
        rc = time_attention(&b, batch, num_heads, num_kv_heads, head_dim, block_size, 1,
                            &out->seconds_unsplit, err);
    if (rc == 0) rc = copy_bandwidth(&b, &out->copy_bytes_per_s, err);
    free_buffers(&b);
    return rc;
}

/* ---- the copy bandwidth alone (cuda_bench_copy_bandwidth) ------------------------------------ */

/* The same copy as copy_bandwidth() on buffers sized to what is free: a
 * runner may already hold most of the device for its KV cache. Each buffer
 * is 1 GiB, or a third of the free memory if less, and never under 64 MiB
 * (the copy's 128 MiB stay beyond an H100's 50 MB L2). */
extern "C" int cuda_bench_copy_bandwidth(double *bytes_per_s, Error *err) {
    *bytes_per_s = 0;
    int count = 0;
    CUDA_TRY(cudaGetDeviceCount(&count), "looking for a GPU", err);
    if (count < 1) return error_set(err, "no CUDA GPU available");
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes), "reading the free GPU memory", err);
    size_t n = (size_t)1 << 30;
    if (n > free_bytes / 3) n = free_bytes / 3 & ~(((size_t)1 << 21) - 1);
    if (n < ((size_t)64 << 20))
        return error_set(err, "only %zu MiB of GPU memory free, too little to time a copy",
                         free_bytes >> 20);
    Buffers b;
    memset(&b, 0, sizeof b);
    int rc = -1;
    double best = 1e30;
    if ((b.copy_src = cuda_alloc(n, err)) && (b.copy_dst = cuda_alloc(n, err)) &&
        cudaEventCreate(&b.start) == cudaSuccess && cudaEventCreate(&b.stop) == cudaSuccess) {
        rc = 0;
        for (int run = -1; rc == 0 && run < RUNS; run++) {
            float ms = 0;
            cudaError_t st = cudaEventRecord(b.start, 0);
            if (st == cudaSuccess) st = cudaMemcpyAsync(b.copy_dst, b.copy_src, n, cudaMemcpyDeviceToDevice, 0);
            if (st == cudaSuccess) st = cudaEventRecord(b.stop, 0);
            if (st == cudaSuccess) st = cudaEventSynchronize(b.stop);
            if (st == cudaSuccess) st = cudaEventElapsedTime(&ms, b.start, b.stop);
            if (st != cudaSuccess) rc = cuda_fail(err, "timing a device copy", st);
            else if (run >= 0 && ms / 1e3 < best) best = ms / 1e3;
        }
    } else if (b.copy_src && b.copy_dst) { /* cuda_alloc said why otherwise */
        error_set(err, "cannot create CUDA events for timing a copy");
    }
    free_buffers(&b);
    if (rc == 0) *bytes_per_s = 2.0 * (double)n / best;
    return rc;
}
