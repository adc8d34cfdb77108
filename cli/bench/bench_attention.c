/*
 * bench_attention.c - `nanovllm bench --attention` (see bench_attention.h).
 */
#include "bench_attention.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/cuda_bench.h"

/* The head shape: Qwen3-0.6B's (16 query / 8 KV heads x 128) unless
 * NANOVLLM_BENCH_HEADS says e.g. "32/4" (Qwen3-30B-A3B) or "32/4x128". */
static int head_shape(int *heads, int *kv_heads, int *head_dim, Error *err) {
    *heads = 16, *kv_heads = 8, *head_dim = 128;
    const char *env = getenv("NANOVLLM_BENCH_HEADS");
    if (!env || !*env) return 0;
    char tail = 0;
    int n = sscanf(env, "%d/%dx%d%c", heads, kv_heads, head_dim, &tail);
    if ((n != 2 && n != 3) || *heads < 1 || *kv_heads < 1 || *heads % *kv_heads)
        return error_set(err, "NANOVLLM_BENCH_HEADS=%s: expected HEADS/KV_HEADS[xHEAD_DIM], e.g. 32/4", env);
    return 0;
}

int bench_attention(int num_seqs, int input_len, int block_size, bool json, Error *err) {
    int heads, kv_heads, head_dim;
    if (head_shape(&heads, &kv_heads, &head_dim, err)) return -1;
    CudaAttentionBench r;
    if (cuda_bench_attention(num_seqs, input_len, heads, kv_heads, head_dim, block_size, &r, err))
        return error_prefix(err, "--attention");
    double achieved = r.kv_bytes / r.seconds, unsplit = r.kv_bytes / r.seconds_unsplit;
    double legacy = r.kv_bytes / r.seconds_legacy;
    if (json) {
        json_t *o = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i, s:f, s:f}",
                              "device", r.device, "batch", num_seqs, "context", input_len, "heads", heads,
                              "kv_heads", kv_heads, "head_dim", head_dim, "splits", r.splits,
                              "us_per_launch", r.seconds * 1e6, "us_unsplit", r.seconds_unsplit * 1e6,
                              "kv_gb_per_s", achieved / 1e9, "kv_gb_per_s_unsplit", unsplit / 1e9,
                              "copy_gb_per_s", r.copy_bytes_per_s / 1e9,
                              "fraction_of_copy", achieved / r.copy_bytes_per_s,
                              "us_legacy", r.seconds_legacy * 1e6, "legacy_splits", r.legacy_splits,
                              "kv_gb_per_s_legacy", legacy / 1e9, "max_diff_vs_legacy", r.max_diff_legacy);
        if (!o) return error_set(err, "out of memory");
        char *text = json_dumps(o, JSON_REAL_PRECISION(6));
        json_decref(o);
        if (!text) return error_set(err, "out of memory");
        puts(text);
        free(text);
        return 0;
    }
    printf("%s: decode attention, %d sequences x %d tokens (%d/%d heads x %d, block %d)\n", r.device,
           num_seqs, input_len, heads, kv_heads, head_dim, block_size);
    printf("  %d splits: %.1f us, %.0f GB/s of KV = %.0f%% of the copy bandwidth (%.0f GB/s)\n", r.splits,
           r.seconds * 1e6, achieved / 1e9, 100 * achieved / r.copy_bytes_per_s, r.copy_bytes_per_s / 1e9);
    printf("  unsplit: %.1f us, %.0f GB/s\n", r.seconds_unsplit * 1e6, unsplit / 1e9);
    printf("  previous kernel (%d splits): %.1f us, %.0f GB/s; outputs differ by at most %.3g\n",
           r.legacy_splits, r.seconds_legacy * 1e6, legacy / 1e9, r.max_diff_legacy);
    return 0;
}

