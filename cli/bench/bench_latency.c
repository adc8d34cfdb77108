/*
 * bench_latency.c - `nanovllm bench --latency` (see bench_latency.h).
 *
 * Beside the model's timings it measures this machine's own limits in the
 * same run, so results read as ratios rather than absolute numbers: the
 * bandwidth of reading a weights-sized buffer from huge pages (decode must
 * read every matrix per token, so bytes / bandwidth is its floor) and the
 * rate of a large float32 matmul through prefill's path. On a GPU the floor
 * is the device's own: its copy bandwidth (bytes read + written per second,
 * cuda_bench_copy_bandwidth), at which the weights a token reads stream
 * from device memory; the host's memory probe says nothing about it.
 */
#include "bench_latency.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cpu/cpu_matmul.h"
#include "cpu/thread_pool.h"
#include "base/log.h"
#include "cuda/cuda_bench.h"
#include "bench_limits.h"

/* ---- the machine's limits, measured in the same run ---------------------- */

/* float32 GFLOP/s of prefill's matmul path on a Qwen3-0.6B-sized projection. */
static double sgemm_gflops(ThreadPool *pool, Error *err) {
    enum { M = 512, K = 1024, N = 3072 };
    CpuMatmul *mm = cpu_matmul_create(pool, M, K, err);
    float *x = malloc(sizeof(float) * M * K), *y = malloc(sizeof(float) * M * N);
    uint16_t *wdata = malloc(sizeof(uint16_t) * N * K);
    double gflops = 0;
    if (mm && x && y && wdata) {
        for (size_t i = 0; i < (size_t)M * K; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f;
        for (size_t i = 0; i < (size_t)N * K; i++) wdata[i] = (uint16_t)(0x3c00 + (i * 31) % 512);
        Weight w = {.data = wdata, .type = WEIGHT_BF16, .rows = N, .cols = K};
        double best = 1e30;
        for (int i = 0; i < 4; i++) {
            double t0 = now_seconds();
            cpu_matmul(mm, y, x, M, &w);
            double dt = now_seconds() - t0;
            if (dt < best) best = dt;
        }
        gflops = 2.0 * M * N * K / best / 1e9;
    }
    free(x);
    free(y);
    free(wdata);
    cpu_matmul_destroy(mm);
    return gflops;
}

/* ---- the model ----------------------------------------------------------- */

typedef struct BenchResult {
    double load_s, prefill_s, decode_s;
    double bandwidth, gflops;
    bool device_copy; /* bandwidth is the GPU's copy rate, not the host's read rate */
    size_t weight_bytes, stream_bytes, peak_rss;
    ModelSize size;
} BenchResult;

static int run_model(Runner *r, const LatencyConfig *a, BenchResult *res, Error *err) {
    const RunnerOptions *o = &r->options;
    int total = a->input_len + a->output_len;
    if (total > o->max_model_len)
        return error_set(err, "--input-len + --output-len (%d) exceeds max_model_len %d", total,
                         o->max_model_len);
    if (a->input_len > o->max_num_batched_tokens)
        return error_set(err, "--input-len %d exceeds --max-num-batched-tokens %d (one prefill "
                              "step is timed)", a->input_len, o->max_num_batched_tokens);
    int blocks = (total + o->block_size - 1) / o->block_size;
    if (blocks > r->num_kv_blocks)
        return error_set(err, "KV cache too small: %d blocks needed, %d available", blocks,
                         r->num_kv_blocks);
    int32_t *table = malloc(sizeof *table * (size_t)blocks);
    int32_t *tokens = malloc(sizeof *tokens * (size_t)total);
    if (!table || !tokens) {
        free(table);
        free(tokens);
        return error_set(err, "out of memory");
    }
    for (int i = 0; i < blocks; i++) table[i] = i;
    uint64_t state = 0x9e3779b97f4a7c15ull ^ (uint64_t)a->seed;
    for (int i = 0; i < a->input_len; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        tokens[i] = (int32_t)((state >> 33) % (uint64_t)r->model->config.vocab_size);
    }

    /* Warm-up: one short step touches every weight page once. */
    int32_t next;
    int warm = a->input_len < 16 ? a->input_len : 16;
    RunnerSeq seq = {.tokens = tokens, .num_tokens = warm, .start_pos = 0, .block_table = table, .num_blocks = blocks, .compute_logits = true};
    RunnerBatch batch = {.seqs = &seq, .num_seqs = 1};
    int rc = runner_step(r, &batch, &next, err);

    double t0 = now_seconds();
    seq = (RunnerSeq){.tokens = tokens, .num_tokens = a->input_len, .start_pos = 0, .block_table = table, .num_blocks = blocks, .compute_logits = true};
    if (rc == 0) rc = runner_step(r, &batch, &next, err);
    res->prefill_s = now_seconds() - t0;

    t0 = now_seconds();
    for (int i = 0; rc == 0 && i < a->output_len; i++) {
        tokens[a->input_len + i] = next;
        seq = (RunnerSeq){.tokens = &tokens[a->input_len + i], .num_tokens = 1, .start_pos = a->input_len + i, .block_table = table, .num_blocks = blocks, .compute_logits = true};
        rc = runner_step(r, &batch, &next, err);
    }
    res->decode_s = now_seconds() - t0;
    free(table);
    free(tokens);
    return rc;
}

static void print_results(const LatencyConfig *a, const BenchResult *r, const Runner *runner) {
    double prefill_tps = a->input_len / r->prefill_s, decode_tps = a->output_len / r->decode_s;
    double floor_tps = r->bandwidth / (double)r->stream_bytes;
    if (a->json) {
        json_t *o = json_pack(
            "{s:s, s:s, s:i, s:i, s:i, s:f, s:f, s:f, s:I, s:I, s:I, s:f, s:s, s:f, s:f, s:f, s:f, s:f}",
            "model",
            a->model_dir, "device", runner->description, "threads", runner->options.num_threads,
            "input_len", a->input_len, "output_len", a->output_len, "load_s", r->load_s,
            "prefill_tokens_per_s", prefill_tps, "decode_tokens_per_s", decode_tps,
            "peak_rss_bytes", (json_int_t)r->peak_rss, "weight_bytes",
            (json_int_t)r->weight_bytes, "kv_cache_bytes", (json_int_t)runner->kv_cache_bytes,
            "memory_read_gb_per_s", r->bandwidth / 1e9, "memory_read_source",
            r->device_copy ? "device copy" : "host memory read", "decode_floor_tokens_per_s", floor_tps,
            "matmul_gflops", r->gflops, "total_params", r->size.total_params, "active_params",
            r->size.active_params, "weight_bytes_per_token", r->size.bytes_per_token);
        if (o) json_dumpf(o, stdout, JSON_COMPACT);
        json_decref(o);
        putchar('\n');
        return;
    }
    printf("device            %s\n", runner->description);
    printf("model             %.3gB parameters, %.3gB active per token (%.3g GB of weights read "
           "per decode token)\n",
           r->size.total_params / 1e9, r->size.active_params / 1e9, r->size.bytes_per_token / 1e9);
    printf("model load        %.3f s\n", r->load_s);
    printf("prefill           %d tokens in %.3f s = %.1f tokens/s\n", a->input_len, r->prefill_s,
           prefill_tps);
    printf("decode            %d tokens in %.3f s = %.2f tokens/s\n", a->output_len, r->decode_s,
           decode_tps);
    printf("peak RSS          %.1f MB (weights %.1f MB, KV budget %.1f MB)\n", r->peak_rss / 1e6,
           r->weight_bytes / 1e6, runner->kv_cache_bytes / 1e6);
    printf("same-run limits   %s %.1f GB/s -> decode floor %.2f tokens/s (decode at %.0f%%); "
           "%smatmul %.1f GFLOP/s\n",
           r->device_copy ? "device copy" : "memory read", r->bandwidth / 1e9, floor_tps,
           100.0 * decode_tps / floor_tps, r->device_copy ? "host " : "", r->gflops);
}

int bench_latency(const ModelWeights *w, Runner *runner, double load_seconds,
                  const LatencyConfig *c, Error *err) {
    BenchResult res = {.load_s = load_seconds, .weight_bytes = model_weights_bytes(w),
                       .size = model_weights_size(w)};
    int rc = run_model(runner, c, &res, err);
    if (rc != 0) return rc;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    res.peak_rss = (size_t)ru.ru_maxrss * 1024;
    ThreadPool *pool = thread_pool_create(runner->options.num_threads, err);
    if (pool) {
        res.stream_bytes = (size_t)res.size.bytes_per_token;
        if (strcmp(runner->device, "cuda") == 0) {
            /* the weights live on the device: its copy rate is the floor's */
            Error cerr = {0};
            res.device_copy = true;
            if (cuda_bench_copy_bandwidth(&res.bandwidth, &cerr))
                fprintf(stderr, "bench: cannot measure the device's copy bandwidth: %s\n", cerr.msg);
        } else {
            res.bandwidth = memory_read_bandwidth(pool, res.stream_bytes);
        }
        res.gflops = sgemm_gflops(pool, err);
        thread_pool_destroy(pool);
    }
    print_results(c, &res, runner);
    return 0;
}
