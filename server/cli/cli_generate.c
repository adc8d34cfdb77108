/*
 * cli_generate.c - `nanovllm generate`: offline generation for one prompt.
 *
 * Submits one request (n samples) to the engine and steps it in this thread
 * until it finishes: the same scheduler, block manager and sampler as the
 * server, without the HTTP part. A text prompt is encoded with the model's
 * tokenizer, which also decodes the completions for --json's "text".
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_args.h"
#include "commands.h"
#include "config/defaults.h"
#include "engine/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/model_setup.h"

static const char USAGE[] =
    "usage: nanovllm generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [options]\n";

static const char HELP[] =
    "Generates a completion of a prompt (text or token ids) and prints the new ids.\n"
    "\n"
    "  --model DIR                   Hugging Face model folder (config.json, model.safetensors)\n"
    "  --prompt TEXT                 prompt as text, encoded with the model's tokenizer\n"
    "  --prompt-ids IDS              prompt as comma-separated token ids\n"
    "  --max-tokens N                tokens to generate (default " DEFAULT_TEXT(DEFAULT_MAX_TOKENS) ")\n"
    "  --temperature T               0 = greedy (default), else sampling\n"
    "  --top-p P  --top-k K  --min-p P\n"
    "  --repetition-penalty R  --presence-penalty P  --frequency-penalty F\n"
    "  --seed S                      makes sampling reproducible\n"
    "  --n N                         independent samples of the prompt (default 1)\n"
    "  --ignore-eos                  do not stop at end-of-sequence tokens\n"
    "  --json                        print one JSON object (see README)\n"
    "  --dump-logits FILE            also write the prompt's logits, float32 [prompt tokens, vocab]\n"
    "  --quiet                       no start-up log on stderr\n" RUNNER_OPTIONS_USAGE;

typedef struct GenerateArgs {
    const char *model_dir;
    const char *prompt_ids;
    const char *prompt_text;
    const char *dump_logits;
    SamplingParams sampling;
    bool json;
    RunnerOptions runner;
} GenerateArgs;

/* Sampling flags: one table row per flag, parsed the same way. */
static int parse_sampling_flag(int c, const char *value, SamplingParams *p, Error *err) {
    double d;
    int i;
    switch (c) {
    case 'n': return parse_int_arg("--max-tokens", value, 1, 1 << 24, &p->max_tokens, err);
    case 't':
        if (parse_double_arg("--temperature", value, 0, 100, &d, err)) return -1;
        p->temperature = (float)d;
        return 0;
    case 'P':
        if (parse_double_arg("--top-p", value, 1e-6, 1, &d, err)) return -1;
        p->top_p = (float)d;
        return 0;
    case 'K': return parse_int_arg("--top-k", value, -1, 1 << 24, &p->top_k, err);
    case 'M':
        if (parse_double_arg("--min-p", value, 0, 1, &d, err)) return -1;
        p->min_p = (float)d;
        return 0;
    case 'R':
        if (parse_double_arg("--repetition-penalty", value, 1e-6, 100, &d, err)) return -1;
        p->repetition_penalty = (float)d;
        return 0;
    case 'E':
        if (parse_double_arg("--presence-penalty", value, -2, 2, &d, err)) return -1;
        p->presence_penalty = (float)d;
        return 0;
    case 'F':
        if (parse_double_arg("--frequency-penalty", value, -2, 2, &d, err)) return -1;
        p->frequency_penalty = (float)d;
        return 0;
    case 'S':
        if (parse_int_arg("--seed", value, 0, 0x7fffffff, &i, err)) return -1;
        p->seed = (uint64_t)i;
        p->has_seed = true;
        return 0;
    case 'N': return parse_int_arg("--n", value, 1, 128, &p->n, err);
    default: return error_set(err, "internal: unknown sampling flag");
    }
}

/* Returns 0 to run, 1 when --help was printed, -1 on a usage error. */
static int parse_args(int argc, char **argv, GenerateArgs *a, Error *err) {
    static const struct option options[] = {
        {"model", required_argument, 0, 'm'}, {"prompt-ids", required_argument, 0, 'p'},
        {"prompt", required_argument, 0, 'T'}, {"max-tokens", required_argument, 0, 'n'}, {"temperature", required_argument, 0, 't'},
        {"top-p", required_argument, 0, 'P'}, {"top-k", required_argument, 0, 'K'},
        {"min-p", required_argument, 0, 'M'}, {"repetition-penalty", required_argument, 0, 'R'},
        {"presence-penalty", required_argument, 0, 'E'},
        {"frequency-penalty", required_argument, 0, 'F'}, {"seed", required_argument, 0, 'S'},
        {"n", required_argument, 0, 'N'}, {"ignore-eos", no_argument, 0, 'e'},
        {"json", no_argument, 0, 'j'}, {"dump-logits", required_argument, 0, 'D'},
        COMMON_LONG_OPTIONS, {0, 0, 0, 0}};
    *a = (GenerateArgs){.sampling = sampling_params_default(), .runner = runner_default_options()};
    optind = 0;
    int c, index;
    while ((c = getopt_long(argc, argv, "", options, &index)) != -1) {
        switch (c) {
        case 'm': a->model_dir = optarg; break;
        case 'p': a->prompt_ids = optarg; break;
        case 'T': a->prompt_text = optarg; break;
        case 'e': a->sampling.ignore_eos = true; break;
        case 'j': a->json = true; break;
        case 'D': a->dump_logits = optarg; break;
        case 'n': case 't': case 'P': case 'K': case 'M': case 'R': case 'E': case 'F': case 'S':
        case 'N':
            if (parse_sampling_flag(c, optarg, &a->sampling, err)) return -1;
            break;
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

typedef struct Sample {
    int32_t *ids;
    int num_ids;
    FinishReason finish;
} Sample;

typedef struct Result {
    Sample *samples;
    int finished;
    char error[512];
} Result;

static void on_output(const EngineOutput *o, void *user) {
    Result *r = user;
    Sample *s = &r->samples[o->sample_index];
    if (o->has_token) s->ids[s->num_ids++] = o->token;
    if (o->finish != FINISH_NONE) {
        s->finish = o->finish;
        r->finished++;
        if (o->error) snprintf(r->error, sizeof r->error, "%s", o->error);
    }
}

/* The tokenizer: needed for --prompt, used for "text" when the folder has one. */
static Tokenizer *open_tokenizer(const GenerateArgs *a, int vocab, Error *err) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/tokenizer.json", a->model_dir);
    if (!a->prompt_text && stat(path, &st) != 0) return NULL;
    return tokenizer_load(a->model_dir, vocab, err);
}

static int encode_prompt(const Tokenizer *tok, const char *text, int32_t **prompt, int *len,
                         Error *err) {
    size_t n;
    if (tokenizer_encode(tok, text, strlen(text), prompt, &n, err)) return -1;
    if (n == 0) return error_set(err, "--prompt: the text encodes to no tokens");
    if (n > INT32_MAX) return error_set(err, "--prompt: too long");
    *len = (int)n;
    return 0;
}

/* A sample's completion as text, special tokens (<|im_end|>) left out. */
static void add_text(json_t *o, const Tokenizer *tok, const Sample *s) {
    char *text = NULL;
    size_t len;
    Error err;
    if (tok && tokenizer_decode(tok, s->ids, (size_t)s->num_ids, true, &text, &len, &err) == 0)
        json_object_set_new(o, "text", json_stringn(text, len));
    free(text);
}

static const char *finish_name(FinishReason f) {
    switch (f) {
    case FINISH_STOP: return "stop";
    case FINISH_LENGTH: return "length";
    case FINISH_ABORT: return "abort";
    case FINISH_ERROR: return "error";
    default: return "none";
    }
}

static json_t *ids_to_json(const int32_t *ids, int n) {
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
    return arr;
}

/* n = 1: {"prompt_ids", "ids", "text", "finish_reason"}; n > 1: {"prompt_ids",
 * "choices": [{"ids", "text", "finish_reason"}, ...]} ("text" when the model
 * folder has a tokenizer). */
static int print_result(const GenerateArgs *a, const Tokenizer *tok, const int32_t *prompt,
                        int prompt_len, const Result *r) {
    int n = a->sampling.n;
    if (a->json) {
        json_t *o;
        if (n == 1) {
            o = json_pack("{s:o, s:o, s:s}", "prompt_ids", ids_to_json(prompt, prompt_len), "ids",
                          ids_to_json(r->samples[0].ids, r->samples[0].num_ids), "finish_reason",
                          finish_name(r->samples[0].finish));
            if (o) add_text(o, tok, &r->samples[0]);
        } else {
            json_t *choices = json_array();
            for (int i = 0; choices && i < n; i++) {
                json_t *c = json_pack("{s:o, s:s}", "ids",
                                      ids_to_json(r->samples[i].ids, r->samples[i].num_ids),
                                      "finish_reason", finish_name(r->samples[i].finish));
                if (c) add_text(c, tok, &r->samples[i]);
                json_array_append_new(choices, c);
            }
            o = json_pack("{s:o, s:o}", "prompt_ids", ids_to_json(prompt, prompt_len), "choices", choices);
        }
        if (!o || json_dumpf(o, stdout, JSON_COMPACT) != 0) {
            json_decref(o);
            return -1;
        }
        json_decref(o);
        putchar('\n');
    } else {
        for (int s = 0; s < n; s++) {
            for (int i = 0; i < r->samples[s].num_ids; i++) printf("%s%d", i ? " " : "", r->samples[s].ids[i]);
            printf("\n");
        }
    }
    return fflush(stdout) == 0 ? 0 : -1;
}

/* --dump-logits: one runner step over the prompt before generation, every
 * position's logits written raw (little-endian float32, no header), for
 * comparing backends and references (scripts/gpu_check.sh). */
static int dump_prompt_logits(Runner *r, const int32_t *prompt, int n, const char *path, Error *err) {
    int bs = r->options.block_size, blocks = (n + bs - 1) / bs;
    if (n > r->options.max_num_batched_tokens || blocks > r->num_kv_blocks)
        return error_set(err, "--dump-logits: the prompt (%d tokens) does not fit in one step "
                              "(--max-num-batched-tokens %d)", n, r->options.max_num_batched_tokens);
    size_t vocab = (size_t)r->model->config.vocab_size;
    int32_t *table = malloc(sizeof(int32_t) * (size_t)blocks);
    float *logits = malloc(sizeof(float) * vocab * (size_t)n);
    int rc = -1;
    if (!table || !logits) {
        error_set(err, "out of memory (logits of %d positions)", n);
    } else {
        for (int i = 0; i < blocks; i++) table[i] = i;
        RunnerSeq seq = {.tokens = prompt, .num_tokens = n, .block_table = table, .num_blocks = blocks,
                         .compute_logits = true};
        RunnerBatch batch = {.seqs = &seq, .num_seqs = 1, .all_logits = logits};
        int32_t token;
        FILE *f = NULL;
        if (runner_step(r, &batch, &token, err) == 0) {
            f = fopen(path, "wb");
            if (!f) error_set(err, "--dump-logits: cannot create %s: %s", path, strerror(errno));
            else if (fwrite(logits, sizeof(float) * vocab, (size_t)n, f) != (size_t)n)
                error_set(err, "--dump-logits: cannot write %s: %s", path, strerror(errno));
            else rc = 0;
            if (f && fclose(f) != 0 && rc == 0)
                rc = error_set(err, "--dump-logits: cannot write %s: %s", path, strerror(errno));
        }
    }
    free(table);
    free(logits);
    return rc;
}

static int run(Engine *e, const GenerateArgs *a, const int32_t *prompt, int prompt_len, Result *r,
               Error *err) {
    EngineRequest req = {.prompt = prompt, .prompt_len = prompt_len, .params = a->sampling, .on_output = on_output, .user = r};
    if (engine_submit(e, &req, NULL, err)) return -1;
    while (r->finished < a->sampling.n)
        if (engine_step(e, err) < 0) return -1;
    if (r->error[0]) return error_set(err, "%s", r->error);
    return 0;
}

int command_generate(int argc, char **argv) {
    GenerateArgs a;
    Error err = {0};
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
    int status = 1, vocab = m.weights.config.vocab_size;
    Error tok_err = {0};
    Tokenizer *tok = open_tokenizer(&a, vocab, &tok_err);
    if ((!tok && tok_err.msg[0]) ||
        (a.prompt_text && encode_prompt(tok, a.prompt_text, &prompt, &prompt_len, &tok_err))) {
        fprintf(stderr, "nanovllm generate: %s\n", tok_err.msg);
        tokenizer_free(tok);
        loaded_model_close(&m);
        free(prompt);
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
    Result r = {0};
    Engine *e = NULL;
    if (status != 2) {
        r.samples = calloc((size_t)a.sampling.n, sizeof *r.samples);
        for (int i = 0; r.samples && i < a.sampling.n; i++)
            if (!(r.samples[i].ids = malloc(sizeof(int32_t) * (size_t)a.sampling.max_tokens))) break;
        e = engine_create(&m.weights, m.runner, &err);
        if (!r.samples || !r.samples[a.sampling.n - 1].ids)
            fprintf(stderr, "nanovllm generate: out of memory\n");
        else if (!e || (a.dump_logits && dump_prompt_logits(m.runner, prompt, prompt_len,
                                                            a.dump_logits, &err)) ||
                 run(e, &a, prompt, prompt_len, &r, &err))
            fprintf(stderr, "nanovllm generate: %s\n", err.msg);
        else if (print_result(&a, tok, prompt, prompt_len, &r))
            fprintf(stderr, "nanovllm generate: cannot write the result to stdout\n");
        else
            status = 0;
    }
    engine_destroy(e);
    for (int i = 0; r.samples && i < a.sampling.n; i++) free(r.samples[i].ids);
    free(r.samples);
    free(prompt);
    tokenizer_free(tok);
    loaded_model_close(&m);
    return status;
}
