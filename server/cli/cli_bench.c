/*
 * cli_bench.c - `nanovllm bench`: throughput, latency and matmul benchmarks.
 *
 * Default (throughput): nano-vllm's bench.py workload (bench_workload.h):
 * --num-seqs requests with prompt and output lengths drawn uniformly from
 * the ranges, temperature 0.6, ignore_eos, all submitted at once; reports
 * output tokens/s and, for the engine itself, the mean time of a step in
 * which every running sequence decodes (with --device null that is the
 * scheduling + block management + batch building cost alone).
 *
 * --latency: model load time, prefill tokens/s for one prompt of
 * --input-len random tokens, single-stream decode tokens/s over --output-len
 * tokens and the peak resident memory. Beside them it measures this machine's own
 * limits in the same run, so results read as ratios rather than absolute
 * numbers: the bandwidth of reading a weights-sized buffer from huge pages
 * (decode must read every matrix per token, so bytes / bandwidth is its
 * floor) and the rate of a large float32 matmul through prefill's path.
 * `--matmul` instead times both matmul strategies at several row counts
 * (how SMALL_M_MAX in cpu_matmul.c was chosen). `--attention` times the
 * GPU's decode attention for --num-seqs sequences of --input-len tokens
 * (Qwen3-0.6B's head shape) against the GPU's copy bandwidth (cuda_bench.h).
 */
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "cli_args.h"
#include "cuda/cuda_bench.h"
#include "cpu/cpu_matmul.h"
#include "engine/base/log.h"
#include "cpu/thread_pool.h"
#include "server/bench/bench_throughput.h"
#include "commands.h"
#include "server/model_setup.h"

static const char USAGE[] = "usage: nanovllm bench --model DIR [options]\n";

static const char HELP[] =
    "Benchmarks generation (default), single-stream latency (--latency) or the matmul (--matmul).\n"
    "\n"
    "  --model DIR                   Hugging Face model folder\n"
    "throughput (nano-vllm's bench.py workload, prompt ids uniform in [0, 10000]):\n"
    "  --num-seqs N                  requests (default 256)\n"
    "  --min-input N --max-input N   prompt lengths (default 100, 1024)\n"
    "  --min-output N --max-output N output lengths (default 100, 1024)\n"
    "  --seed N                      workload seed (default 0: bench.py's)\n"
    "latency:\n"
    "  --latency                     load, one prefill, single-stream decode, peak RSS\n"
    "  --input-len N --output-len N  prompt and decode lengths (default 512, 64)\n"
    "  --matmul                      time the matmul strategies instead\n"
    "  --attention                   time the GPU's decode attention (--num-seqs sequences of\n"
    "                                --input-len tokens) against its copy bandwidth\n"
    "  --json                        print one JSON object with the results\n"
    "  --quiet                       no log or progress on stderr\n" RUNNER_OPTIONS_USAGE;

typedef enum BenchMode { BENCH_THROUGHPUT, BENCH_LATENCY, BENCH_MATMUL, BENCH_ATTENTION } BenchMode;

typedef struct BenchArgs {
    const char *model_dir;
    BenchMode mode;
    int num_seqs, min_input, max_input, min_output, max_output;
    int input_len, output_len, seed;
    bool json, quiet;
    RunnerOptions runner;
} BenchArgs;

static int parse_args(int argc, char **argv, BenchArgs *a, Error *err) {
    static const struct option options[] = {
        {"model", required_argument, 0, 'm'}, {"num-seqs", required_argument, 0, 'N'},
        {"min-input", required_argument, 0, 'a'}, {"max-input", required_argument, 0, 'b'},
        {"min-output", required_argument, 0, 'c'}, {"max-output", required_argument, 0, 'd'},
        {"input-len", required_argument, 0, 'i'}, {"output-len", required_argument, 0, 'o'},
        {"seed", required_argument, 0, 's'}, {"latency", no_argument, 0, 'l'},
        {"matmul", no_argument, 0, 'x'}, {"attention", no_argument, 0, 't'},
        {"json", no_argument, 0, 'j'},
        COMMON_LONG_OPTIONS, {0, 0, 0, 0}};
    *a = (BenchArgs){.num_seqs = 256, .min_input = 100, .max_input = 1024, .min_output = 100,
                     .max_output = 1024, .input_len = 512, .output_len = 64,
                     .runner = runner_default_options()};
    optind = 0;
    int c, index;
    struct {
        int flag;
        const char *name;
        long lo, hi;
        int *dst;
    } ints[] = {{'N', "--num-seqs", 1, 1 << 20, &a->num_seqs},
                {'a', "--min-input", 1, 1 << 20, &a->min_input},
                {'b', "--max-input", 1, 1 << 20, &a->max_input},
                {'c', "--min-output", 1, 1 << 20, &a->min_output},
                {'d', "--max-output", 1, 1 << 20, &a->max_output},
                {'i', "--input-len", 1, 1 << 20, &a->input_len},
                {'o', "--output-len", 1, 1 << 20, &a->output_len},
                {'s', "--seed", 0, 0x7fffffff, &a->seed}};
    while ((c = getopt_long(argc, argv, "", options, &index)) != -1) {
        bool handled = false;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
            if (ints[k].flag != c) continue;
            if (parse_int_arg(ints[k].name, optarg, ints[k].lo, ints[k].hi, ints[k].dst, err)) return -1;
            handled = true;
        }
        if (handled) continue;
        switch (c) {
        case 'm': a->model_dir = optarg; break;
        case 'l': a->mode = BENCH_LATENCY; break;
        case 'x': a->mode = BENCH_MATMUL; break;
        case 't': a->mode = BENCH_ATTENTION; break;
        case 'j': a->json = true; break;
        default: {
            if (c == 'q') a->quiet = true;
            int common = parse_common_option(c, c == 0 ? options[index].name : NULL, optarg,
                                             &a->runner, USAGE, HELP, err);
            if (common == 0) return error_set(err, "invalid option (see nanovllm bench --help)");
            if (common != 1) return common < 0 ? -1 : 1;
        }
        }
    }
    if (optind < argc) return error_set(err, "unexpected argument '%s'", argv[optind]);
    if (!a->model_dir && a->mode != BENCH_MATMUL && a->mode != BENCH_ATTENTION)
        return error_set(err, "--model is required");
    if (a->min_input > a->max_input || a->min_output > a->max_output)
        return error_set(err, "each --min-* must be at most its --max-*");
    return 0;
}

/* ---- the machine's limits, measured in the same run ---------------------- */

typedef struct StreamJob {
    const uint64_t *data;
    size_t words_per_task;
    uint64_t sums[64];
} StreamJob;

static void stream_task(void *ctx, int task, int thread) {
    StreamJob *j = ctx;
    const uint64_t *p = j->data + (size_t)task * j->words_per_task;
    uint64_t acc = 0;
    for (size_t i = 0; i < j->words_per_task; i++) acc ^= p[i];
    j->sums[thread % 64] ^= acc;
}

/* Bytes per second of reading `bytes` of memory once, with the CPU runner's
 * threads, from huge pages: the best case of decode's weight read (best of
 * 3 passes over a buffer the size of the weights, so caches cannot hold it). */
static double stream_bandwidth(ThreadPool *pool, size_t bytes) {
    enum { TASKS = 64 };
    size_t words = bytes / sizeof(uint64_t) / TASKS * TASKS;
    void *mem = mmap(NULL, words * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return 0;
    madvise(mem, words * sizeof(uint64_t), MADV_HUGEPAGE);
    memset(mem, 1, words * sizeof(uint64_t));
    StreamJob job = {mem, words / TASKS, {0}};
    double best = 1e30;
    for (int pass = 0; pass < 3; pass++) {
        double t0 = now_seconds();
        thread_pool_run(pool, TASKS, stream_task, &job);
        double dt = now_seconds() - t0;
        if (dt < best) best = dt;
    }
    munmap(mem, words * sizeof(uint64_t));
    return (double)(words * sizeof(uint64_t)) / best;
}

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
        Weight w = {wdata, WEIGHT_BF16, N, K};
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

/* Bytes one decode step must read from the weights: every matrix but the
 * embedding (one row of it), with a tied lm_head counted once. */
static size_t streamed_bytes_per_token(const ModelWeights *w) {
    size_t bytes = weight_bytes(&w->lm_head);
    for (int l = 0; l < w->config.num_layers; l++) {
        const LayerWeights *L = &w->layers[l];
        bytes += weight_bytes(&L->q_proj) + weight_bytes(&L->k_proj) + weight_bytes(&L->v_proj) +
                 weight_bytes(&L->o_proj) + weight_bytes(&L->gate_proj) +
                 weight_bytes(&L->up_proj) + weight_bytes(&L->down_proj);
    }
    return bytes;
}

/* ---- the model ----------------------------------------------------------- */

typedef struct BenchResult {
    double load_s, prefill_s, decode_s;
    double bandwidth, gflops;
    size_t weight_bytes, stream_bytes, peak_rss;
} BenchResult;

static int run_model(Runner *r, const BenchArgs *a, BenchResult *res, Error *err) {
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

static void print_results(const BenchArgs *a, const BenchResult *r, const Runner *runner) {
    double prefill_tps = a->input_len / r->prefill_s, decode_tps = a->output_len / r->decode_s;
    double floor_tps = r->bandwidth / (double)r->stream_bytes;
    if (a->json) {
        json_t *o = json_pack(
            "{s:s, s:s, s:i, s:i, s:i, s:f, s:f, s:f, s:I, s:I, s:I, s:f, s:f, s:f}", "model",
            a->model_dir, "device", runner->description, "threads", runner->options.num_threads,
            "input_len", a->input_len, "output_len", a->output_len, "load_s", r->load_s,
            "prefill_tokens_per_s", prefill_tps, "decode_tokens_per_s", decode_tps,
            "peak_rss_bytes", (json_int_t)r->peak_rss, "weight_bytes",
            (json_int_t)r->weight_bytes, "kv_cache_bytes", (json_int_t)runner->kv_cache_bytes,
            "memory_read_gb_per_s", r->bandwidth / 1e9, "decode_floor_tokens_per_s", floor_tps,
            "matmul_gflops", r->gflops);
        if (o) json_dumpf(o, stdout, JSON_COMPACT);
        json_decref(o);
        putchar('\n');
        return;
    }
    printf("device            %s\n", runner->description);
    printf("model load        %.3f s\n", r->load_s);
    printf("prefill           %d tokens in %.3f s = %.1f tokens/s\n", a->input_len, r->prefill_s,
           prefill_tps);
    printf("decode            %d tokens in %.3f s = %.2f tokens/s\n", a->output_len, r->decode_s,
           decode_tps);
    printf("peak RSS          %.1f MB (weights %.1f MB, KV budget %.1f MB)\n", r->peak_rss / 1e6,
           r->weight_bytes / 1e6, runner->kv_cache_bytes / 1e6);
    printf("same-run limits   memory read %.1f GB/s -> decode floor %.2f tokens/s "
           "(decode at %.0f%%); matmul %.1f GFLOP/s\n",
           r->bandwidth / 1e9, floor_tps, 100.0 * decode_tps / floor_tps, r->gflops);
}

/* ---- --matmul: the two strategies side by side --------------------------- */

static int bench_matmul(const BenchArgs *a, Error *err) {
    ThreadPool *pool = thread_pool_create(a->runner.num_threads, err);
    enum { K = 1024, N = 3072, MAX_M = 512 };
    CpuMatmul *mm = pool ? cpu_matmul_create(pool, MAX_M, K, err) : NULL;
    float *x = malloc(sizeof(float) * MAX_M * K), *y = malloc(sizeof(float) * MAX_M * N);
    uint16_t *w = malloc(sizeof(uint16_t) * N * K);
    int rc = (mm && x && y && w) ? 0 : error_set(err, "out of memory");
    if (rc == 0) {
        for (size_t i = 0; i < (size_t)MAX_M * K; i++) x[i] = (float)(i % 97) / 97.0f;
        for (size_t i = 0; i < (size_t)N * K; i++) w[i] = (uint16_t)(0x3c00 + (i * 31) % 512);
        Weight wt = {w, WEIGHT_BF16, N, K};
        printf("bf16 weight %dx%d, %s kernels, %d threads: microseconds per matmul\n", N, K,
               cpu_isa_name(cpu_isa_active()), thread_pool_size(pool));
        MatmulStrategy strategies[3] = {MATMUL_ROWS, MATMUL_BLAS, MATMUL_AMX};
        printf("%6s %10s %10s %10s   auto\n", "rows", "rows", "blas", "amx");
        for (int M = 1; M <= MAX_M; M *= 2) {
            double best[3] = {1e30, 1e30, 1e30};
            for (int s = 0; s < 3; s++) {
                for (int rep = 0; rep < 20; rep++) {
                    double t0 = now_seconds();
                    cpu_matmul_with(mm, y, x, M, &wt, strategies[s], cpu_isa_active());
                    double dt = now_seconds() - t0;
                    if (dt < best[s]) best[s] = dt;
                }
            }
            printf("%6d %10.1f %10.1f %10.1f   %s\n", M, best[0] * 1e6, best[1] * 1e6, best[2] * 1e6,
                   matmul_strategy_name(cpu_matmul_choose(M, &wt, cpu_isa_active())));
        }
    }
    free(x);
    free(y);
    free(w);
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
    return rc;
}

static int bench_latency(const BenchArgs *a, Error *err) {
    LoadedModel m;
    if (loaded_model_open(&m, a->model_dir, &a->runner, err)) return -1;
    BenchResult res = {.load_s = m.load_seconds, .weight_bytes = model_weights_bytes(&m.weights)};
    int rc = run_model(m.runner, a, &res, err);
    if (rc == 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        res.peak_rss = (size_t)ru.ru_maxrss * 1024;
        ThreadPool *pool = thread_pool_create(m.runner->options.num_threads, err);
        if (pool) {
            res.stream_bytes = streamed_bytes_per_token(&m.weights);
            res.bandwidth = stream_bandwidth(pool, res.stream_bytes);
            res.gflops = sgemm_gflops(pool, err);
            thread_pool_destroy(pool);
        }
        print_results(a, &res, m.runner);
    }
    loaded_model_close(&m);
    return rc;
}

static int bench_engine(const BenchArgs *a, Error *err) {
    LoadedModel m;
    if (loaded_model_open(&m, a->model_dir, &a->runner, err)) return -1;
    Engine *e = engine_create(&m.weights, m.runner, err);
    int rc = -1;
    if (e) {
        ThroughputConfig c = {a->num_seqs, a->min_input, a->max_input, a->min_output,
                              a->max_output, a->seed, a->json, !a->quiet};
        rc = bench_throughput(e, &c, err);
        engine_destroy(e);
    }
    loaded_model_close(&m);
    return rc;
}

/* ---- --attention: the GPU's decode attention against its copy bandwidth ----- */

static int bench_attention(const BenchArgs *a, Error *err) {
    enum { HEADS = 16, KV_HEADS = 8, HEAD_DIM = 128 }; /* Qwen3-0.6B */
    CudaAttentionBench r;
    if (cuda_bench_attention(a->num_seqs, a->input_len, HEADS, KV_HEADS, HEAD_DIM, a->runner.block_size, &r,
                             err))
        return error_prefix(err, "--attention");
    double achieved = r.kv_bytes / r.seconds, unsplit = r.kv_bytes / r.seconds_unsplit;
    if (a->json) {
        json_t *o = json_pack("{s:s, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "device", r.device,
                              "batch", a->num_seqs, "context", a->input_len, "splits", r.splits,
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
           a->num_seqs, a->input_len, a->runner.block_size);
    printf("  %d splits: %.1f us, %.0f GB/s of KV = %.0f%% of the copy bandwidth (%.0f GB/s)\n", r.splits,
           r.seconds * 1e6, achieved / 1e9, 100 * achieved / r.copy_bytes_per_s, r.copy_bytes_per_s / 1e9);
    printf("  unsplit: %.1f us, %.0f GB/s\n", r.seconds_unsplit * 1e6, unsplit / 1e9);
    return 0;
}

int command_bench(int argc, char **argv) {
    BenchArgs a;
    Error err = {{0}};
    int parsed = parse_args(argc, argv, &a, &err);
    if (parsed != 0) {
        if (parsed > 0) return 0;
        fprintf(stderr, "nanovllm bench: %s\n%s", err.msg, USAGE);
        return 2;
    }
    int rc = a.mode == BENCH_ATTENTION ? bench_attention(&a, &err)
             : a.mode == BENCH_MATMUL  ? bench_matmul(&a, &err)
             : a.mode == BENCH_LATENCY ? bench_latency(&a, &err)
                                       : bench_engine(&a, &err);
    if (rc != 0) {
        fprintf(stderr, "nanovllm bench: %s\n", err.msg);
        return 1;
    }
    return 0;
}
