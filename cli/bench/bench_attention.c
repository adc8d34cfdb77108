/*
 * bench_attention.c - `nanovllm bench --attention` (see bench_attention.h).
 */
#include "bench_attention.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/cuda_bench.h"

int bench_attention(int num_seqs, int input_len, int block_size, bool json, Error *err) {
    enum { HEADS = 16, KV_HEADS = 8, HEAD_DIM = 128 }; /* Qwen3-0.6B */
    CudaAttentionBench r;
    if (cuda_bench_attention(num_seqs, input_len, HEADS, KV_HEADS, HEAD_DIM, block_size, &r,
                             err))
        return error_prefix(err, "--attention");
    double achieved = r.kv_bytes / r.seconds, unsplit = r.kv_bytes / r.seconds_unsplit;
    if (json) {
        json_t *o = json_pack("{s:s, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "device", r.device,
                              "batch", num_seqs, "context", input_len, "splits", r.splits,
                              "us_per_launch", r.seconds * 1e6, "us_unsplit", r.seconds_unsplit * 1e6,
                              "kv_gb_per_s", achieved / 1e9, "kv_gb_per_s_unsplit", unsplit / 1e9,
                              "copy_gb_per_s", r.copy_bytes_per_s / 1e9,
                              "fraction_of_copy", achieved / r.copy_bytes_per_s);
        if (!o) return error_set(err, "out of memory");
        char *text = json_dumps(o, JSON_REAL_PRECISION(6));
        json_decref(o);
        if (!text) return error_set(err, "out of memory");
        puts(text);
        free(text);
        return 0;
    }
    printf("%s: decode attention, %d sequences x %d tokens (16/8 heads x 128, block %d)\n", r.device,
           num_seqs, input_len, block_size);
    printf("  %d splits: %.1f us, %.0f GB/s of KV = %.0f%% of the copy bandwidth (%.0f GB/s)\n", r.splits,
           r.seconds * 1e6, achieved / 1e9, 100 * achieved / r.copy_bytes_per_s, r.copy_bytes_per_s / 1e9);
    printf("  unsplit: %.1f us, %.0f GB/s\n", r.seconds_unsplit * 1e6, unsplit / 1e9);
    return 0;
}

