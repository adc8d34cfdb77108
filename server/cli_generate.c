/*
 * cli_generate.c - `nanovllm generate`: offline greedy decoding of one prompt.
 *
 * Runs the prompt through the runner (in chunks of max_num_batched_tokens,
 * each chunk on top of the previous one's KV blocks), then decodes one token
 * per step until max_tokens or an end-of-sequence token. The KV blocks of
 * the single sequence are simply 0, 1, 2, ...; the block manager and the
 * scheduler take over this loop when the engine lands.
 */
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../config/cli_args.h"
#include "../config/defaults.h"
#include "../engine/tokenizer.h"
#include "commands.h"
#include "model_setup.h"

static const char USAGE[] =
    "usage: nanovllm generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [options]\n";

static const char HELP[] =
    "Greedy-decodes a prompt (text or token ids) and prints the new ids.\n"
    "\n"
    "  --model DIR                   Hugging Face model folder (config.json, model.safetensors)\n"
    "  --prompt TEXT                 prompt as text, encoded with the model's tokenizer\n"
    "  --prompt-ids IDS              prompt as comma-separated token ids\n"
    "  --max-tokens N                tokens to generate (default 16)\n"
    "  --temperature T               0 = greedy (the only mode until the sampler lands)\n"
    "  --ignore-eos                  do not stop at end-of-sequence tokens\n"
    "  --json                        print one JSON object {\"prompt_ids\", \"ids\", \"text\", ...}\n"
    "  --quiet                       no start-up log on stderr\n" RUNNER_OPTIONS_USAGE;

typedef struct GenerateArgs {
    const char *model_dir;
    const char *prompt_ids;
    const char *prompt_text;
    int max_tokens;
    bool ignore_eos, json;
    RunnerOptions runner;
} GenerateArgs;

/* Returns 0 to run, 1 when --help was printed, -1 on a usage error. */
static int parse_args(int argc, char **argv, GenerateArgs *a, Error *err) {
    static const struct option options[] = {
        {"model", required_argument, 0, 'm'}, {"prompt-ids", required_argument, 0, 'p'},
        {"prompt", required_argument, 0, 'P'},
        {"max-tokens", required_argument, 0, 'n'}, {"temperature", required_argument, 0, 't'},
        {"ignore-eos", no_argument, 0, 'e'}, {"json", no_argument, 0, 'j'},
        COMMON_LONG_OPTIONS, {0, 0, 0, 0}};
    *a = (GenerateArgs){.max_tokens = DEFAULT_MAX_TOKENS, .runner = runner_default_options()};
    optind = 0;
    int c, index;
    double temperature;
    while ((c = getopt_long(argc, argv, "", options, &index)) != -1) {
        switch (c) {
        case 'm': a->model_dir = optarg; break;
        case 'p': a->prompt_ids = optarg; break;
        case 'P': a->prompt_text = optarg; break;
        case 'n':
            if (parse_int_arg("--max-tokens", optarg, 1, 1 << 24, &a->max_tokens, err)) return -1;
            break;
        case 't':
            if (parse_double_arg("--temperature", optarg, 0.0, 100.0, &temperature, err)) return -1;
            if (temperature != 0.0)
                return error_set(err, "--temperature: only 0 (greedy) is supported until the "
                                      "sampler is implemented");
            break;
        case 'e': a->ignore_eos = true; break;
        case 'j': a->json = true; break;
        default: {
            int common = parse_common_option(c, c == 0 ? options[index].name : NULL, optarg,
                                             &a->runner, USAGE, HELP, err);
            if (common == 0) return error_set(err, "invalid option (see nanovllm generate --help)");
            if (common != 1) return common < 0 ? -1 : 1;
        }
        }
    }
    if (optind < argc) return error_set(err, "unexpected argument '%s'", argv[optind]);
    if (!a->model_dir) return error_set(err, "--model is required");
    if (!a->prompt_ids == !a->prompt_text)
        return error_set(err, "give exactly one of --prompt and --prompt-ids");
    return 0;
}

/* Greedy decoding of one sequence; out receives up to max_tokens ids. */
static int generate(Runner *r, const int32_t *prompt, int prompt_len, const GenerateArgs *a,
                    int32_t *out, int *out_len, const char **finish, Error *err) {
    const RunnerOptions *o = &r->options;
    long total = (long)prompt_len + a->max_tokens;
    if (total > o->max_model_len)
        return error_set(err, "prompt (%d tokens) + max_tokens (%d) exceeds max_model_len %d",
                         prompt_len, a->max_tokens, o->max_model_len);
    int blocks = (int)((total + o->block_size - 1) / o->block_size);
    if (blocks > r->num_kv_blocks)
        return error_set(err, "KV cache too small for this request: it needs %d blocks of %d "
                              "tokens, the cache has %d (raise --kv-cache-memory)",
                         blocks, o->block_size, r->num_kv_blocks);
    int32_t *table = malloc(sizeof *table * (size_t)blocks);
    if (!table) return error_set(err, "out of memory");
    for (int i = 0; i < blocks; i++) table[i] = i;

    int rc = 0, n = 0, pos = 0;
    int32_t next = -1;
    *finish = "length";
    while (pos < prompt_len && rc == 0) { /* prefill, chunked by the token budget */
        int chunk = prompt_len - pos < o->max_num_batched_tokens ? prompt_len - pos
                                                                 : o->max_num_batched_tokens;
        RunnerSeq seq = {prompt + pos, chunk, pos, table, blocks, pos + chunk == prompt_len};
        RunnerBatch batch = {.seqs = &seq, .num_seqs = 1};
        rc = runner_step(r, &batch, &next, err);
        pos += chunk;
    }
    while (rc == 0) {
        out[n++] = next;
        if (!a->ignore_eos && model_config_is_eos(&r->model->config, next)) {
            *finish = "stop";
            break;
        }
        if (n == a->max_tokens) break;
        RunnerSeq seq = {&out[n - 1], 1, prompt_len + n - 1, table, blocks, true};
        RunnerBatch batch = {.seqs = &seq, .num_seqs = 1};
        rc = runner_step(r, &batch, &next, err);
    }
    free(table);
    *out_len = n;
    return rc;
}

static json_t *ids_to_json(const int32_t *ids, int n) {
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
    return arr;
}

static int print_result(const GenerateArgs *a, const Tokenizer *tok, const int32_t *prompt,
                        int prompt_len, const int32_t *ids, int n, const char *finish) {
    if (a->json) {
        json_t *o = json_pack("{s:o, s:o, s:s}", "prompt_ids", ids_to_json(prompt, prompt_len),
                              "ids", ids_to_json(ids, n), "finish_reason", finish);
        char *text = NULL;
        size_t len;
        Error err;
        /* The completion as text, special tokens (<|im_end|>) left out. */
        if (o && tok && tokenizer_decode(tok, ids, (size_t)n, true, &text, &len, &err) == 0)
            json_object_set_new(o, "text", json_stringn(text, len));
        free(text);
        if (!o || json_dumpf(o, stdout, JSON_COMPACT) != 0) {
            json_decref(o);
            return -1;
        }
        json_decref(o);
        putchar('\n');
    } else {
        for (int i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
        printf("\n");
    }
    return fflush(stdout) == 0 ? 0 : -1;
}

/* The model's tokenizer: needed for --prompt; otherwise loaded only when
 * the folder has one (it adds "text" to --json output). */
static Tokenizer *open_tokenizer(const GenerateArgs *a, int vocab, Error *err) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/tokenizer.json", a->model_dir);
    if (!a->prompt_text && stat(path, &st) != 0) return NULL;
    return tokenizer_load(a->model_dir, vocab, err);
}

/* Encodes --prompt into *prompt (malloc'ed). */
static int encode_prompt(const Tokenizer *tok, const char *text, int32_t **prompt, int *len,
                         Error *err) {
    size_t n;
    if (tokenizer_encode(tok, text, strlen(text), prompt, &n, err)) return -1;
    if (n == 0) return error_set(err, "--prompt: the text encodes to no tokens");
    if (n > INT32_MAX) return error_set(err, "--prompt: too long");
    *len = (int)n;
    return 0;
}

int command_generate(int argc, char **argv) {
    GenerateArgs a;
    Error err = {{0}};
    int parsed = parse_args(argc, argv, &a, &err);
    int32_t *prompt = NULL;
    int prompt_len = 0;
    /* The ids' syntax is checked before the model loads, their range after. */
    if (parsed == 0 && a.prompt_ids)
        parsed = parse_id_list_arg("--prompt-ids", a.prompt_ids, INT32_MAX, &prompt, &prompt_len, &err);
    if (parsed != 0) {
        if (parsed > 0) return 0;
        fprintf(stderr, "nanovllm generate: %s\n%s", err.msg, USAGE);
        return 2;
    }
    LoadedModel m;
    if (loaded_model_open(&m, a.model_dir, &a.runner, &err)) {
        fprintf(stderr, "nanovllm generate: %s\n", err.msg);
        free(prompt);
        return 1;
    }
    int32_t *ids = NULL;
    int n = 0, status = 1, vocab = m.weights.config.vocab_size;
    const char *finish = "length";
    Error tok_err = {{0}};
    Tokenizer *tok = open_tokenizer(&a, vocab, &tok_err);
    if (!tok && tok_err.msg[0]) {
        fprintf(stderr, "nanovllm generate: %s\n", tok_err.msg);
        loaded_model_close(&m);
        free(prompt);
        return 1;
    }
    if (a.prompt_text && encode_prompt(tok, a.prompt_text, &prompt, &prompt_len, &tok_err)) {
        fprintf(stderr, "nanovllm generate: %s\n", tok_err.msg);
        tokenizer_free(tok);
        loaded_model_close(&m);
        return 1;
    }
    for (int i = 0; i < prompt_len; i++) {
        if (prompt[i] >= vocab) {
            fprintf(stderr, "nanovllm generate: --prompt-ids: token id %d is outside the "
                            "vocabulary [0, %d)\n%s", prompt[i], vocab, USAGE);
            status = 2;
            break;
        }
    }
    if (status == 2) {
        /* reported above */
    } else if (!(ids = malloc(sizeof *ids * (size_t)a.max_tokens))) {
        fprintf(stderr, "nanovllm generate: out of memory\n");
    } else if (generate(m.runner, prompt, prompt_len, &a, ids, &n, &finish, &err)) {
        fprintf(stderr, "nanovllm generate: %s\n", err.msg);
    } else if (print_result(&a, tok, prompt, prompt_len, ids, n, finish)) {
        fprintf(stderr, "nanovllm generate: cannot write the result to stdout\n");
    } else {
        status = 0;
    }
    free(prompt);
    free(ids);
    tokenizer_free(tok);
    loaded_model_close(&m);
    return status;
}
