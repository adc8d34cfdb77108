/*
 * cli_args.h - parsing and validating command-line values.
 *
 * Options themselves are parsed with getopt_long in each command; these
 * helpers turn a value into a number or list and say exactly what was wrong
 * ("--max-tokens: 'abc' is not an integer"), so every bad flag is an error
 * with a message and never a silent default.
 */
#ifndef NANOVLLM_CLI_ARGS_H
#define NANOVLLM_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "config/defaults.h"
#include "base/byte_buf.h"
#include "base/error.h"
#include "engine/runner.h"

int parse_int_arg(const char *flag, const char *text, long lo, long hi, int *out, Error *err);
int parse_double_arg(const char *flag, const char *text, double lo, double hi, double *out,
                     Error *err);

/* "4GiB", "512M", "1000000": K/M/G/T (and KiB/MiB/...) are powers of 1024,
 * KB/MB/GB/TB powers of 1000. */
int parse_size_arg(const char *flag, const char *text, size_t *out, Error *err);

/* "1,2,3" (spaces allowed) -> malloc'ed ids; each in [0, max_id). */
int parse_id_list_arg(const char *flag, const char *text, int max_id, int32_t **ids, int *count,
                      Error *err);

/* --chat-template FILE|TEXT, as vLLM reads it: the file's text when value
 * names a readable file, else value itself when it looks like a template
 * (has '{', '}' or a newline), else an error (a mistyped path). *text is
 * malloc'ed. */
int read_chat_template_arg(const char *value, char **text, Error *err);

/* All of stdin appended to *b. */
int read_stdin(ByteBuf *b, Error *err);

/* --chat-template and --chat-template-content-format, for the tables and
 * the help of the commands that render chats. */
#define CHAT_TEMPLATE_USAGE                                                                        \
    "  --chat-template FILE|TEXT     the chat template (default: the model folder's)\n"           \
    "  --chat-template-content-format auto|string|openai|verbatim\n"                               \
    "                                how a message's content reaches the template: string joins\n" \
    "                                text parts with newlines, openai passes the parts, auto\n"    \
    "                                picks openai for templates that loop over content;\n"        \
    "                                verbatim passes the messages exactly as sent (default auto)\n"

/* Options shared by every command that runs the model (--device, --block-size,
 * --kv-cache-memory, --max-model-len, --max-num-seqs, --max-num-batched-tokens,
 * --gpu-memory-utilization, --num-gpu-blocks-override, --enforce-eager, --threads,
 * --load-format, --kv-cache-dtype, --dtype). Returns 1 if the option was one of
 * them, 0 if not, -1 on a bad value. */
int parse_runner_option(const char *name, const char *value, RunnerOptions *opts, Error *err);

/* getopt_long entries for the options of parse_runner_option (for the tables
 * of the commands): all take a value and set flag to 0, val to 0. */
#define RUNNER_LONG_OPTIONS                                                                        \
    {"device", required_argument, 0, 0}, {"block-size", required_argument, 0, 0},                 \
        {"kv-cache-memory", required_argument, 0, 0},                                              \
        {"max-model-len", required_argument, 0, 0},                                                \
        {"max-num-seqs", required_argument, 0, 0},                                                 \
        {"max-num-batched-tokens", required_argument, 0, 0},                                       \
        {"gpu-memory-utilization", required_argument, 0, 0},                                       \
        {"num-gpu-blocks-override", required_argument, 0, 0},                                      \
        {"enforce-eager", no_argument, 0, 0}, {"threads", required_argument, 0, 0},               \
        {"load-format", required_argument, 0, 0}, {"kv-cache-dtype", required_argument, 0, 0},     \
        {"dtype", required_argument, 0, 0}

/* Options every model command shares: --quiet, --help and the runner options. */
#define COMMON_LONG_OPTIONS                                                                        \
    {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'}, RUNNER_LONG_OPTIONS

/* Handles one getopt_long result `c` (with `name`, the long option's name,
 * when c is 0) if it is a common option. Returns 1 when handled, 0 when it
 * is not a common option, 2 when --help was printed (usage + help on
 * stdout), -1 on a bad value. */
int parse_common_option(int c, const char *name, const char *value, RunnerOptions *opts,
                        const char *usage, const char *help, Error *err);

#define RUNNER_OPTIONS_USAGE                                                                       \
    "  --device auto|cuda|cpu        where to run (default auto: GPU if usable, else CPU)\n"       \
    "  --threads N                   CPU threads (default: one per core)\n"                        \
    "  --kv-cache-memory BYTES       CPU KV cache budget, e.g. 4GiB (default "                     \
    DEFAULT_TEXT(DEFAULT_KV_CACHE_GIB) "GiB). Qwen3.5 models take a\n"                               \
    "                                recurrent state per running sequence and as many state\n"     \
    "                                checkpoints (their prefix caching) out of it first, at most\n"\
    "                                half of it (fewer sequences run when it holds fewer)\n"       \
    "  --kv-cache-dtype auto|bfloat16|float32|fp8|fp8_e4m3\n"                                      \
    "                                what the KV cache stores (default auto: bfloat16 when the\n"  \
    "                                model's weights are bf16, else float32; CUDA: bfloat16).\n"   \
    "                                fp8 (= fp8_e4m3): one e4m3 byte per value, scale 1.0 for K\n" \
    "                                and V (no calibration), saturating at +-448 (CUDA: not for\n" \
    "                                Qwen3.5)\n"                                                  \
    "  --dtype auto|bfloat16|float32 what each matmul's input is rounded to (default auto:\n"      \
    "                                bfloat16 for a bf16 model on CUDA and on CPUs with\n"        \
    "                                AVX512-BF16 or AMX, else float32: exact, the slower)\n"      \
    "  --block-size N                tokens per KV block, power of two " DEFAULT_TEXT(            \
        MIN_BLOCK_SIZE) ".." DEFAULT_TEXT(MAX_BLOCK_SIZE) " (default "                             \
    DEFAULT_TEXT(DEFAULT_BLOCK_SIZE) ")\n"                                                         \
    "  --max-model-len N             longest context (default: the model's)\n"                     \
    "  --max-num-seqs N              sequences per step (default "                                 \
    DEFAULT_TEXT(DEFAULT_MAX_NUM_SEQS) ")\n"                                                       \
    "  --max-num-batched-tokens N    tokens per step (default "                                    \
    DEFAULT_TEXT(DEFAULT_MAX_NUM_BATCHED_TOKENS) ")\n"                                             \
    "  --gpu-memory-utilization F    GPU memory fraction for the model (default "                  \
    DEFAULT_TEXT(DEFAULT_GPU_MEMORY_UTILIZATION) ")\n"                                             \
    "  --num-gpu-blocks-override N   exactly N KV blocks on the GPU (tests, preemption)\n"        \
    "  --enforce-eager               no CUDA graphs (every step launched kernel by kernel)\n"       \
    "  --load-format auto|dummy      dummy: random weights from config.json alone (benchmarks)\n"

#endif
