/*
 * bench_attention_cpu.c - `nanovllm bench --attention --device cpu` (see
 * bench_attention.h): the CPU runner's decode attention (cpu_attention, the
 * runner's own path) over every layer of Qwen3-0.6B's shape, for num_seqs
 * sequences of input_len cached tokens, against two reads in the same run:
 * the same K/V rows read plainly through the same thread pool (what the
 * paged layout allows) and a flat huge-page buffer of the same size (the
 * machine's read rate). Attention and the block read take turns within each
 * repetition, so a noisy shared host slows both alike; medians are reported.
 *
 * The cache is laid out as the runner's ([block, kv_head, token, dim] per
 * layer, 4 KiB pages) with each sequence's blocks scattered over it, as a
 * cache looks after the scheduler has recycled blocks.
 */
#include "bench_attention.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cpu/cpu_attention.h"
#include "cpu/thread_pool.h"
#include "base/cpu_isa.h"
#include "base/log.h"
#include "bench_limits.h"

enum { LAYERS = 28, HEADS = 16, KV_HEADS = 8, HEAD_DIM = 128 }; /* Qwen3-0.6B */
#define REPS 11
/* Larger caches than this are refused rather than swapped. */
#define MAX_CACHE_BYTES (16ull << 30)

typedef struct BlockRead {
    const char *k, *v; /* one layer's cache */
    const int32_t *tables;
    int blocks_per_seq, block_size, keys;
    size_t row_bytes;
    uint64_t sums[64];
} BlockRead;

/* One (sequence, KV head): its K rows, then its V rows, block by block, as
 * the attention kernels walk them. */
static void block_read_task(void *ctx, int task, int thread) {
    BlockRead *b = ctx;
    int seq = task / KV_HEADS, head = task % KV_HEADS;
    uint64_t acc = 0;
    for (int i = 0; i * b->block_size < b->keys; i++) {
        int rows = b->keys - i * b->block_size < b->block_size ? b->keys - i * b->block_size : b->block_size;
        size_t off = ((size_t)b->tables[seq * b->blocks_per_seq + i] * KV_HEADS + head) * b->block_size * b->row_bytes;
        size_t words = (size_t)rows * b->row_bytes / sizeof(uint64_t);
        const uint64_t *k = (const uint64_t *)(b->k + off), *v = (const uint64_t *)(b->v + off);
        for (size_t w = 0; w < words; w++) acc ^= k[w];
        for (size_t w = 0; w < words; w++) acc ^= v[w];
    }
    b->sums[thread % 64] ^= acc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int bench_attention_cpu(int num_seqs, int input_len, int block_size, KvCacheDtype dtype,
                        ComputeDtype compute, int num_threads, bool json, Error *err) {
    if (dtype == KV_CACHE_AUTO) dtype = KV_CACHE_BF16; /* the benchmark's model shape is bf16 */
    /* --dtype as the runner resolves it for a bf16 model (cpu_runner_dtype_resolve) */
    bool bf16_products =
        compute == COMPUTE_BF16 || (compute == COMPUTE_AUTO && cpu_isa_active() >= CPU_ISA_AVX512_BF16);
    const char *dtype_name = kv_cache_dtype_name(dtype);
    size_t esz = dtype == KV_CACHE_FP8 ? 1 : dtype == KV_CACHE_BF16 ? 2 : 4, row_bytes = HEAD_DIM * esz;
    int keys = input_len + 1; /* the decoded token attends to itself too */
    int bps = (keys + block_size - 1) / block_size;
    size_t block_bytes = (size_t)KV_HEADS * block_size * row_bytes;
    size_t layer_bytes = (size_t)num_seqs * bps * block_bytes, total = 2 * LAYERS * layer_bytes;
    if (total > MAX_CACHE_BYTES)
        return error_set(err, "--attention --device cpu: %d x %d tokens need %.1f GB of cache "
                              "(at most %.0f GB)", num_seqs, input_len, total / 1e9, MAX_CACHE_BYTES / 1e9);
    int blocks = num_seqs * bps; /* fits: the cache is at most 16 GB of >= 16 KiB blocks */
    double kv_bytes = 2.0 * LAYERS * num_seqs * (double)keys * KV_HEADS * row_bytes;

    ThreadPool *pool = thread_pool_create(num_threads, err);
    AttentionShape shape = {HEADS, KV_HEADS, HEAD_DIM, block_size};
    CpuAttention *att = pool ? cpu_attention_create_kv(pool, shape, dtype, num_seqs, num_seqs, err) : NULL;
    char *cache = MAP_FAILED;
    int32_t *tables = NULL, *tokens = NULL;
    float *q = NULL, *out = NULL;
    RunnerSeq *seqs = NULL;
    int rc = -1;
    if (!att) goto done;
    cpu_attention_set_bf16_inputs(att, bf16_products);
    cache = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    tables = malloc(sizeof *tables * (size_t)blocks);
    tokens = calloc((size_t)num_seqs, sizeof *tokens);
    q = malloc(sizeof *q * (size_t)num_seqs * HEADS * HEAD_DIM);
    out = malloc(sizeof *out * (size_t)num_seqs * HEADS * HEAD_DIM);
    seqs = calloc((size_t)num_seqs, sizeof *seqs);
    if (cache == MAP_FAILED || !tables || !tokens || !q || !out || !seqs) {
        error_set(err, "out of memory for a %.1f GB cache", total / 1e9);
        goto done;
    }
    /* Values near 1 in bf16 and float (0x3f80.., 0x3f80....), of either sign
     * and magnitudes 2^-7..1.875 as e4m3 bytes: any finite pattern serves, the
     * kernels' time does not depend on it. */
    for (size_t i = 0; i < total / 2; i++) ((uint16_t *)cache)[i] = (uint16_t)(0x3f80 + (i * 7) % 64);
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < blocks; i++) tables[i] = i;
    for (int i = blocks - 1; i > 0; i--) { /* Fisher-Yates: scattered blocks */
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((state >> 33) % (uint64_t)(i + 1)), t = tables[i];
        tables[i] = tables[j];
        tables[j] = t;
    }
    for (size_t i = 0; i < (size_t)num_seqs * HEADS * HEAD_DIM; i++) q[i] = (float)((i * 37) % 17) * 0.01f;
    for (int s = 0; s < num_seqs; s++)
        seqs[s] = (RunnerSeq){.tokens = &tokens[s], .num_tokens = 1, .start_pos = input_len,
                              .block_table = &tables[s * bps], .num_blocks = bps, .compute_logits = true};
    RunnerBatch batch = {.seqs = seqs, .num_seqs = num_seqs};

    double t_att[REPS], t_read[REPS];
    for (int r = -1; r < REPS; r++) { /* r = -1: warm-up */
        double t0 = now_seconds();
        for (int l = 0; l < LAYERS; l++) {
            const char *k = cache + 2 * l * layer_bytes;
            cpu_attention(att, out, q, k, k + layer_bytes, &batch);
        }
        double t1 = now_seconds();
        for (int l = 0; l < LAYERS; l++) {
            BlockRead b = {cache + 2 * l * layer_bytes, cache + (2 * l + 1) * layer_bytes, tables, bps,
                           block_size, keys, row_bytes, {0}};
            thread_pool_run(pool, num_seqs * KV_HEADS, block_read_task, &b);
        }
        double t2 = now_seconds();
        if (r >= 0) {
            t_att[r] = t1 - t0;
            t_read[r] = t2 - t1;
        }
    }
    qsort(t_att, REPS, sizeof(double), cmp_double);
    qsort(t_read, REPS, sizeof(double), cmp_double);
    double att_s = t_att[REPS / 2], read_s = t_read[REPS / 2];
    double flat = memory_read_bandwidth(pool, (size_t)kv_bytes);
    double att_rate = kv_bytes / att_s, read_rate = kv_bytes / read_s;
    const char *isa = cpu_isa_name(cpu_isa_active());
    int threads = thread_pool_size(pool);
    if (json) {
        json_t *o = json_pack("{s:s, s:i, s:s, s:s, s:s, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f}",
                              "device", "cpu", "threads", threads, "isa", isa, "dtype",
                              bf16_products ? "bfloat16" : "float32", "kv_cache_dtype", dtype_name, "batch",
                              num_seqs, "context", input_len,
                              "layers", LAYERS, "ms_per_step", att_s * 1e3, "kv_gb_per_s", att_rate / 1e9,
                              "block_read_gb_per_s", read_rate / 1e9, "memory_read_gb_per_s", flat / 1e9,
                              "fraction_of_block_read", att_rate / read_rate,
                              "fraction_of_memory_read", flat > 0 ? att_rate / flat : 0.0);
        char *text = o ? json_dumps(o, JSON_REAL_PRECISION(6)) : NULL;
        json_decref(o);
        if (!text) {
            error_set(err, "out of memory");
            goto done;
        }
        puts(text);
        free(text);
    } else {
        printf("cpu (%d threads, %s kernels, %s products), %s KV cache: decode attention, %d sequence%s x %d "
               "tokens, %d layers (16/8 heads x 128, block %d), median of %d\n", threads, isa,
               bf16_products ? "bf16" : "float32", dtype_name, num_seqs, num_seqs == 1 ? "" : "s", input_len,
               LAYERS, block_size, REPS);
        printf("  attention          %8.2f ms per step, %.0f MB of K/V: %.1f GB/s\n", att_s * 1e3,
               kv_bytes / 1e6, att_rate / 1e9);
        printf("  same rows read     %8.2f ms: %.1f GB/s (attention at %.0f%%)\n", read_s * 1e3,
               read_rate / 1e9, 100 * att_rate / read_rate);
        printf("  memory read        %.1f GB/s from huge pages (attention at %.0f%%)\n", flat / 1e9,
               flat > 0 ? 100 * att_rate / flat : 0.0);
    }
    rc = 0;
done:
    if (cache != MAP_FAILED) munmap(cache, total);
    free(tables);
    free(tokens);
    free(q);
    free(out);
    free(seqs);
    cpu_attention_destroy(att);
    thread_pool_destroy(pool);
    return rc;
}
