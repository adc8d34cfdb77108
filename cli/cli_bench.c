/*
 * cli_bench.c - `nanovllm bench`: its flags, and which benchmark of
 * cli/bench/ runs on what.
 *
 * Default (throughput, bench_throughput.h): nano-vllm's bench.py workload
 * through the engine; with --device null, the engine's own cost per step.
 * --latency (bench_latency.h): one prefill and single-stream decode beside
 * the machine's limits. --matmul (bench_matmul.h): the CPU matmul
 * strategies. --attention (bench_attention.h): decode attention, the GPU's or
 * (--device cpu) the CPU's. --deltanet (bench_deltanet.h): the CPU's Gated
 * DeltaNet mixer at every SIMD level.
 * --structured (bench_structured.h): structured outputs' compile and mask
 * costs over the model's vocabulary, and constrained generation beside free.
 * --admission (bench_admission.h): a long prompt admitted while --num-seqs
 * sequences decode.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli_args.h"
#include "commands.h"
#include "config/defaults.h"
#include "cli/bench/bench_admission.h"
#include "cli/bench/bench_attention.h"
#include "cli/bench/bench_deltanet.h"
#include "cli/bench/bench_latency.h"
#include "cli/bench/bench_matmul.h"
#include "cli/bench/bench_structured.h"
#include "cli/bench/bench_throughput.h"
#include "backend_setup.h"

/* Rows of --structured's generation comparison unless --num-seqs says. */
#define STRUCTURED_BENCH_NUM_SEQS 32
/* --admission: the decoding sequences unless --num-seqs says, and their prompts. */
#define ADMISSION_BENCH_NUM_SEQS 32
#define ADMISSION_PROMPT_LEN 128

static const char USAGE[] = "usage: nanovllm bench --model DIR [options]\n";

static const char HELP[] =
    "Benchmarks generation (default), single-stream latency (--latency), the matmul (--matmul),\n"
    "structured outputs (--structured) or a long prompt's admission (--admission).\n"
    "\n"
    "  --model DIR                   Hugging Face model folder\n"
    "throughput (nano-vllm's bench.py workload, prompt ids uniform in [0, 10000]):\n"
    "  --num-seqs N                  requests (default " DEFAULT_TEXT(DEFAULT_BENCH_NUM_SEQS) ")\n"
    "  --min-input N --max-input N   prompt lengths (default " DEFAULT_TEXT(DEFAULT_BENCH_MIN_INPUT)
    ", " DEFAULT_TEXT(DEFAULT_BENCH_MAX_INPUT) ")\n"
    "  --min-output N --max-output N output lengths (default " DEFAULT_TEXT(DEFAULT_BENCH_MIN_OUTPUT)
    ", " DEFAULT_TEXT(DEFAULT_BENCH_MAX_OUTPUT) ")\n"
    "  --seed N                      workload seed (default 0: bench.py's)\n"
    "latency:\n"
    "  --latency                     load, one prefill, single-stream decode, peak RSS\n"
    "  --input-len N --output-len N  prompt and decode lengths (default "
    DEFAULT_TEXT(DEFAULT_BENCH_INPUT_LEN) ", " DEFAULT_TEXT(DEFAULT_BENCH_OUTPUT_LEN) ")\n"
    "  --matmul                      time the matmul strategies instead\n"
    "  --deltanet                    time the CPU's Gated DeltaNet mixer (Qwen3.5) at every SIMD level\n"
    "  --attention                   time the GPU's decode attention (--num-seqs sequences of\n"
    "                                --input-len tokens) against its copy bandwidth; with\n"
    "                                --device cpu the CPU's, against reads of the same rows\n"
    "admission:\n"
    "  --admission                   a prompt of --input-len tokens arriving while --num-seqs sequences\n"
    "                                (default " DEFAULT_TEXT(ADMISSION_BENCH_NUM_SEQS) ") decode: its time to first token, their decode rate\n"
    "                                before and meanwhile, the longest step (--max-num-batched-tokens\n"
    "                                is the chunk the prompt is prefilled in)\n"
    "  --prompt-len N                the decoding sequences' prompts (default " DEFAULT_TEXT(ADMISSION_PROMPT_LEN) "): their\n"
    "                                decode rate \"before\" is --num-seqs sequences' at that context\n"
    "structured outputs:\n"
    "  --structured                  compile and per-token mask times of a JSON schema, a regex\n"
    "                                and a choice over the model's vocabulary, then --num-seqs\n"
    "                                rows (default " DEFAULT_TEXT(STRUCTURED_BENCH_NUM_SEQS) ") x --output-len tokens generated free and\n"
    "                                with every row constrained by the schema (--seed: walks,\n"
    "                                prompts, sampling)\n"
    "  --json                        print one JSON object with the results\n"
    "  --quiet                       no log or progress on stderr\n" RUNNER_OPTIONS_USAGE;

typedef enum BenchMode {
    BENCH_THROUGHPUT,
    BENCH_LATENCY,
    BENCH_MATMUL,
    BENCH_DELTANET,
    BENCH_ATTENTION,
    BENCH_STRUCTURED,
    BENCH_ADMISSION,
} BenchMode;

typedef struct BenchArgs {
    const char *model_dir;
    BenchMode mode;
    int num_seqs, min_input, max_input, min_output, max_output;
    int input_len, output_len, seed;
    int prompt_len; /* --admission: the decoders' prompts */
    bool num_seqs_given; /* --structured has its own default */
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
        {"deltanet", no_argument, 0, 'D'},
        {"structured", no_argument, 0, 'g'}, {"admission", no_argument, 0, 'A'},
        {"json", no_argument, 0, 'j'}, {"prompt-len", required_argument, 0, 'P'},
        COMMON_LONG_OPTIONS, {0, 0, 0, 0}};
    *a = (BenchArgs){.num_seqs = DEFAULT_BENCH_NUM_SEQS,
                     .min_input = DEFAULT_BENCH_MIN_INPUT,
                     .max_input = DEFAULT_BENCH_MAX_INPUT,
                     .min_output = DEFAULT_BENCH_MIN_OUTPUT,
                     .max_output = DEFAULT_BENCH_MAX_OUTPUT,
                     .input_len = DEFAULT_BENCH_INPUT_LEN,
                     .output_len = DEFAULT_BENCH_OUTPUT_LEN,
                     .prompt_len = ADMISSION_PROMPT_LEN,
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
                {'P', "--prompt-len", 1, 1 << 20, &a->prompt_len},
                {'s', "--seed", 0, 0x7fffffff, &a->seed}};
    while ((c = getopt_long(argc, argv, "", options, &index)) != -1) {
        bool handled = false;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
            if (ints[k].flag != c) continue;
            if (parse_int_arg(ints[k].name, optarg, ints[k].lo, ints[k].hi, ints[k].dst, err)) return -1;
            handled = true;
        }
        if (c == 'N') a->num_seqs_given = true;
        if (handled) continue;
        switch (c) {
        case 'm': a->model_dir = optarg; break;
        case 'l': a->mode = BENCH_LATENCY; break;
        case 'x': a->mode = BENCH_MATMUL; break;
        case 'D': a->mode = BENCH_DELTANET; break;
        case 't': a->mode = BENCH_ATTENTION; break;
        case 'g': a->mode = BENCH_STRUCTURED; break;
        case 'A': a->mode = BENCH_ADMISSION; break;
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
    if (!a->model_dir && a->mode != BENCH_MATMUL && a->mode != BENCH_ATTENTION && a->mode != BENCH_DELTANET)
        return error_set(err, "--model is required");
    if (a->json && a->mode == BENCH_STRUCTURED) return error_set(err, "--structured prints a table, not --json");
    if (a->min_input > a->max_input || a->min_output > a->max_output)
        return error_set(err, "each --min-* must be at most its --max-*");
    return 0;
}

static int run_latency(const BenchArgs *a, Error *err) {
    LoadedModel m;
    if (loaded_model_open(&m, a->model_dir, &a->runner, err)) return -1;
    LatencyConfig c = {a->model_dir, a->input_len, a->output_len, a->seed, a->json};
    int rc = bench_latency(&m.weights, m.runner, m.load_seconds, &c, err);
    loaded_model_close(&m);
    return rc;
}

/* The engine benchmarks' bodies: the model's engine in, the result printed. */
static int throughput(Engine *e, const BenchArgs *a, Error *err) {
    ThroughputConfig c = {a->num_seqs, a->min_input, a->max_input, a->min_output,
                          a->max_output, a->seed, a->json, !a->quiet};
    return bench_throughput(e, &c, err);
}

static int admission(Engine *e, const BenchArgs *a, Error *err) {
    AdmissionConfig c = {a->num_seqs_given ? a->num_seqs : ADMISSION_BENCH_NUM_SEQS, a->prompt_len, a->input_len,
                         a->json};
    return bench_admission(e, &c, err);
}

static int structured(Engine *e, const BenchArgs *a, Error *err) {
    StructuredBenchConfig c = {a->model_dir, a->num_seqs_given ? a->num_seqs : STRUCTURED_BENCH_NUM_SEQS,
                               a->output_len, a->seed, !a->quiet};
    return bench_structured(e, &c, err);
}

/* Loads the model, runs bench on an engine over it, and frees both. */
static int run_with_engine(const BenchArgs *a, int (*bench)(Engine *, const BenchArgs *, Error *), Error *err) {
    LoadedModel m;
    if (loaded_model_open(&m, a->model_dir, &a->runner, err)) return -1;
    Engine *e = engine_create(&m.weights, m.runner, err);
    int rc = -1;
    if (e) {
        rc = bench(e, a, err);
        engine_destroy(e);
    }
    loaded_model_close(&m);
    return rc;
}

int command_bench(int argc, char **argv) {
    BenchArgs a;
    Error err = {0};
    int parsed = parse_args(argc, argv, &a, &err);
    if (parsed != 0) {
        if (parsed > 0) return 0;
        fprintf(stderr, "nanovllm bench: %s\n%s", err.msg, USAGE);
        return 2;
    }
    bool cpu = strcmp(a.runner.device, "cpu") == 0;
    int rc = a.mode == BENCH_ATTENTION && cpu
                 ? bench_attention_cpu(a.num_seqs, a.input_len, a.runner.block_size,
                                       a.runner.kv_cache_dtype, a.runner.dtype, a.runner.num_threads, a.json,
                                       &err)
             : a.mode == BENCH_ATTENTION
                 ? bench_attention(a.num_seqs, a.input_len, a.runner.block_size, a.json, &err)
             : a.mode == BENCH_MATMUL  ? bench_matmul(a.runner.num_threads, &err)
             : a.mode == BENCH_DELTANET ? bench_deltanet(a.runner.num_threads, &err)
             : a.mode == BENCH_LATENCY    ? run_latency(&a, &err)
             : a.mode == BENCH_STRUCTURED ? run_with_engine(&a, structured, &err)
             : a.mode == BENCH_ADMISSION  ? run_with_engine(&a, admission, &err)
                                          : run_with_engine(&a, throughput, &err);
    if (rc != 0) {
        fprintf(stderr, "nanovllm bench: %s\n", err.msg);
        return 1;
    }
    return 0;
}
