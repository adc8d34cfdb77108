/*
 * cuda_bench.cu - decode attention against the copy bandwidth (cuda_bench.h).
 *
 * The KV cache and q are filled with hashed values in [-1, 1) (random enough
 * that the current and the previous decode kernel can be compared output
 * for output), each sequence's blocks are spread over the cache as the
 * block manager would leave them, and every launch is timed with CUDA
 * events, best of several after a warm-up.
 *
 * NANOVLLM_BENCH_KV=fp8 (or fp8_e4m3; cuda_bench.h) times the fp8 cache
 * instead: the values rounded to e4m3 fill an fp8 cache and, widened, a
 * bf16 cache, and the "previous kernel" figures become the current kernel
 * on that bf16 cache, so one run gives fp8 against bf16 on the same values
 * (same splits) and the largest difference of their outputs.
 */
#include "cuda_bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "cuda_check.h"
#include "cuda_kernels.h"
#include "cuda_kv_fp8.h"

extern "C" {
#include "engine/runner.h" /* KV_FP8_DEFAULT_SCALE */
}

#define RUNS 10

typedef struct Buffers {
    uint16_t *k, *v, *q, *out;
    uint8_t *k8, *v8; /* NANOVLLM_BENCH_KV=fp8: the fp8 cache (k and v then hold its values in bf16) */
    CudaAttnSeq *seqs;
    CudaAttnItem *items;
    int32_t *tables;
    float *split;
    int *counters;
    uint16_t *out_legacy;
    void *copy_src, *copy_dst;
    cudaEvent_t start, stop;
} Buffers;

static void free_buffers(Buffers *b) {
    void *p[] = {b->k,      b->v,        b->q,        b->out,      b->seqs,     b->items,   b->tables,
                 b->split,  b->counters, b->out_legacy, b->copy_src, b->copy_dst, b->k8,    b->v8};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) cuda_free(p[i]);
    if (b->start) cudaEventDestroy(b->start);
    if (b->stop) cudaEventDestroy(b->stop);
}

/* Which kernel and cache a timing runs. */
typedef enum BenchKernel { BENCH_CURRENT, BENCH_LEGACY, BENCH_FP8 } BenchKernel;

/* Seconds of the fastest of RUNS launches (after one warm-up), of the
 * current decode kernel, the previous one or the current one on the fp8
 * cache, writing to out. */
static int time_attention(Buffers *b, BenchKernel kernel, uint16_t *out, int batch, int nh, int nkv, int D, int bs,
                          int splits, double *seconds, Error *err) {
    *seconds = 1e30;
    for (int run = -1; run < RUNS; run++) {
        CUDA_TRY(cudaEventRecord(b->start, 0), "recording an event", err);
        int rc = kernel == BENCH_LEGACY
                     ? cuda_attention(out, b->q, b->k, b->v, b->seqs, b->items, batch, b->tables, nh, nkv, D, bs,
                                      splits, b->split, NULL, err)
                 : kernel == BENCH_FP8
                     ? cuda_decode_attention_fp8(out, b->q, b->k8, b->v8, b->seqs, b->items, batch, b->tables, nh,
                                                 nkv, D, bs, splits, b->split, b->counters, KV_FP8_DEFAULT_SCALE,
                                                 KV_FP8_DEFAULT_SCALE, NULL, err)
                     : cuda_decode_attention(out, b->q, b->k, b->v, b->seqs, b->items, batch, b->tables, nh, nkv, D,
                                             bs, splits, b->split, b->counters, NULL, err);
        if (rc) return -1;
        CUDA_TRY(cudaEventRecord(b->stop, 0), "recording an event", err);
        CUDA_TRY(cudaEventSynchronize(b->stop), "running attention", err);
        float ms = 0;
        CUDA_TRY(cudaEventElapsedTime(&ms, b->start, b->stop), "reading an event", err);
        if (run >= 0 && ms / 1e3 < *seconds) *seconds = ms / 1e3;
    }
    return 0;
}

/* bf16 values in [-1, 1) from a hash of the index: the same on every run. */
__global__ void fill_kernel(uint16_t *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed * 0x9e3779b9u;
        h ^= h >> 15;
        h *= 0x85ebca6bu;
        h ^= h >> 13;
        float f = (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
        p[i] = (uint16_t)(__float_as_uint(f) >> 16);
    }
}

/* The same values rounded to e4m3: the bytes in p8, their exact bf16 in p16. */
__global__ void fill_fp8_kernel(uint8_t *p8, uint16_t *p16, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed * 0x9e3779b9u;
        h ^= h >> 15;
        h *= 0x85ebca6bu;
        h ^= h >> 13;
        float f = (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
        const uint8_t byte = (uint8_t)(kv_fp8x2_encode(f, 0.0f) & 0xffu);
        float w[4];
        fp8x4_to_float(byte, w); /* e4m3 / FP8_UNIT, exactly */
        p8[i] = byte;
        p16[i] = (uint16_t)(__float_as_uint(w[0] * FP8_UNIT) >> 16); /* exact: 3 mantissa bits */
    }
}

static int setup(Buffers *b, int batch, int context, int nh, int nkv, int D, int bs, bool fp8, Error *err) {
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
        (b->out_legacy = (uint16_t *)cuda_alloc((size_t)batch * nh * D * 2, err)) &&
        (b->split = (float *)cuda_alloc(cuda_attention_split_workspace_bytes(D, CUDA_MAX_SPLIT_BLOCKS), err)) &&
        (b->counters = (int *)cuda_alloc(cuda_decode_attention_counters_bytes(CUDA_MAX_SPLIT_BLOCKS), err)) &&
        cuda_upload(b->seqs, seqs, sizeof(CudaAttnSeq) * batch, err) == 0 &&
        cuda_upload(b->items, items, sizeof(CudaAttnItem) * batch, err) == 0 &&
        cuda_upload(b->tables, tables, sizeof(int32_t) * blocks, err) == 0 &&
        (!fp8 || ((b->k8 = (uint8_t *)cuda_alloc(cache, err)) && (b->v8 = (uint8_t *)cuda_alloc(cache, err)))))
        rc = 0;
    free(seqs);
    free(items);
    free(tables);
    if (rc) return -1;
    CUDA_TRY(cudaMemset(b->counters, 0, cuda_decode_attention_counters_bytes(CUDA_MAX_SPLIT_BLOCKS)),
             "clearing the split counters", err);
    if (fp8) {
        fill_fp8_kernel<<<1024, 256>>>(b->k8, b->k, cache, 1);
        fill_fp8_kernel<<<1024, 256>>>(b->v8, b->v, cache, 2);
    } else {
        fill_kernel<<<1024, 256>>>(b->k, cache, 1);
        fill_kernel<<<1024, 256>>>(b->v, cache, 2);
    }
    fill_kernel<<<64, 256>>>(b->q, (size_t)batch * nh * D, 3);
    CUDA_LAUNCHED("the fill kernel", err);
    CUDA_TRY(cudaEventCreate(&b->start), "creating an event", err);
    CUDA_TRY(cudaEventCreate(&b->stop), "creating an event", err);
    return 0;
}

/* The largest |a - b| over n bf16 values on the device. */
static int max_difference(const uint16_t *a, const uint16_t *b, size_t n, double *diff, Error *err) {
    uint16_t *ha = (uint16_t *)malloc(n * 2), *hb = (uint16_t *)malloc(n * 2);
    int rc = ha && hb ? 0 : error_set(err, "out of memory");
    if (rc == 0 && (cuda_download(ha, a, n * 2, err) || cuda_download(hb, b, n * 2, err))) rc = -1;
    *diff = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        uint32_t ua = (uint32_t)ha[i] << 16, ub = (uint32_t)hb[i] << 16;
        float fa, fb;
        memcpy(&fa, &ua, 4);
        memcpy(&fb, &ub, 4);
        double d = fabs((double)fa - fb);
        if (isnan(d)) {
            *diff = NAN;
            break;
        }
        if (d > *diff) *diff = d;
    }
    free(ha);
    free(hb);
    return rc;
}

/* Bytes read + written per second by cudaMemcpy between two n-byte
 * buffers (b's events created). */
static int copy_bandwidth(Buffers *b, size_t n, double *bytes_per_s, Error *err) {
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
    out->splits = cuda_decode_attention_choose_splits(batch, num_heads, num_kv_heads, context,
                                                      prop.multiProcessorCount, CUDA_MAX_SPLIT_BLOCKS);
    bool fp8 = false;
    if (cuda_bench_kv_fp8(&fp8, err)) return -1;
    out->fp8 = fp8;
    const size_t len = strlen(out->device);
    if (fp8) { /* the "previous kernel": the current one on the bf16 cache, same splits */
        out->legacy_splits = out->splits;
        snprintf(out->device + len, sizeof out->device - len, ", fp8 KV cache on %s (previous = bf16 cache)",
                 cuda_decode_attention_fp8_tensor_cores(head_dim, num_heads / num_kv_heads) ? "the tensor cores"
                                                                                            : "FMAs");
    } else {
        out->legacy_splits = cuda_attention_choose_splits(batch, num_kv_heads, context, prop.multiProcessorCount,
                                                          CUDA_MAX_SPLIT_BLOCKS);
        snprintf(out->device + len, sizeof out->device - len, ", bf16 KV cache on %s",
                 cuda_decode_attention_bf16_tensor_cores(head_dim, num_heads / num_kv_heads) ? "the tensor cores"
                                                                                               : "FMAs");
    }
    out->kv_bytes = 2.0 * context * batch * num_kv_heads * head_dim * (fp8 ? 1 : 2);
    Buffers b;
    memset(&b, 0, sizeof b);
    const BenchKernel timed = fp8 ? BENCH_FP8 : BENCH_CURRENT, other = fp8 ? BENCH_CURRENT : BENCH_LEGACY;
    int rc = setup(&b, batch, context, num_heads, num_kv_heads, head_dim, block_size, fp8, err);
    if (rc == 0)
        rc = time_attention(&b, timed, b.out, batch, num_heads, num_kv_heads, head_dim, block_size, out->splits,
                            &out->seconds, err);
    if (rc == 0)
        rc = time_attention(&b, timed, b.out, batch, num_heads, num_kv_heads, head_dim, block_size, 1,
                            &out->seconds_unsplit, err);
    if (rc == 0)
        rc = time_attention(&b, other, b.out_legacy, batch, num_heads, num_kv_heads, head_dim, block_size,
                            out->legacy_splits, &out->seconds_legacy, err);
    if (rc == 0) rc = max_difference(b.out, b.out_legacy, (size_t)batch * num_heads * head_dim,
                                     &out->max_diff_legacy, err);
    if (rc == 0) rc = copy_bandwidth(&b, (size_t)1 << 30, &out->copy_bytes_per_s, err);
    free_buffers(&b);
    return rc;
}

extern "C" int cuda_bench_kv_fp8(bool *fp8, Error *err) {
    const char *env = getenv("NANOVLLM_BENCH_KV");
    *fp8 = false;
    if (!env || !*env || strcmp(env, "bf16") == 0 || strcmp(env, "bfloat16") == 0 || strcmp(env, "auto") == 0)
        return 0;
    if (strcmp(env, "fp8") == 0 || strcmp(env, "fp8_e4m3") == 0) {
        *fp8 = true;
        return 0;
    }
    return error_set(err, "NANOVLLM_BENCH_KV=%s: expected fp8, fp8_e4m3, bf16 or auto", env);
}

/* ---- the copy bandwidth alone (cuda_bench_copy_bandwidth) ------------------------------------ */

/* copy_bandwidth() on buffers sized to what is free: a
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
    int rc = cudaEventCreate(&b.start) == cudaSuccess && cudaEventCreate(&b.stop) == cudaSuccess
                 ? copy_bandwidth(&b, n, bytes_per_s, err)
                 : error_set(err, "cannot create CUDA events for timing a copy");
    free_buffers(&b);
    return rc;
}
