/*
 * cli_generate.c - `nanovllm generate`: offline generation for one prompt.
 *
 * Submits one request (n samples) to the engine and steps it in this thread
 * until it finishes: the same scheduler, block manager and sampler as the
 * server, without the HTTP part. A text prompt is encoded with the model's
 * tokenizer, which also decodes the completions for --json's "text". A
 * chat (--chat: a chat request's JSON) is rendered with the model's chat
 * template first, and --json then also shows each answer as the server's
 * message would: content, reasoning(_content) and tool_calls
 * (chat/).
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "commands.h"
#include "config/defaults.h"
#include "engine/engine.h"
#include "text/tokenizer/tokenizer.h"
#include "base/read_file.h"
#include "chat/chat_template.h"
#include "chat/chat_output.h"
#include "backend_setup.h"
#include "engine/model_tokenizer.h"

static const char USAGE[] =
    "usage: nanovllm generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3 | --chat FILE) [options]\n";

static const char HELP[] =
    "Generates a completion of a prompt (text or token ids) and prints the new ids.\n"
    "\n"
    "  --model DIR                   Hugging Face model folder (config.json, model.safetensors)\n"
    "  --prompt TEXT                 prompt as text, encoded with the model's tokenizer\n"
    "  --prompt-ids IDS              prompt as comma-separated token ids\n"
    "  --chat FILE                   a chat request's JSON ({\"messages\", \"tools\",\n"
    "                                \"chat_template_kwargs\"}; - reads stdin), rendered with the\n"
    "                                model's chat template; --json adds each answer's \"message\"\n"
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
    const char *chat_file;
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
        {"chat", required_argument, 0, 'c'},
        COMMON_LONG_OPTIONS, {0, 0, 0, 0}};
    *a = (GenerateArgs){.sampling = sampling_params_default(), .runner = runner_default_options()};
    optind = 0;
    int c, index;
    while ((c = getopt_long(argc, argv, "", options, &index)) != -1) {
        switch (c) {
        case 'm': a->model_dir = optarg; break;
        case 'p': a->prompt_ids = optarg; break;
        case 'T': a->prompt_text = optarg; break;
        case 'c': a->chat_file = optarg; break;
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
    if ((a->prompt_ids != NULL) + (a->prompt_text != NULL) + (a->chat_file != NULL) != 1)
        return error_set(err, "give exactly one of --prompt, --prompt-ids and --chat");
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
    if (!a->prompt_text && !a->chat_file && !model_has_tokenizer(a->model_dir)) return NULL;
    return model_tokenizer_load(a->model_dir, vocab, err);
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

/* --chat: the request read and rendered into prompt text (malloc'ed). */
static char *render_chat(const char *file, const Tokenizer *tok, json_t **request, ChatTemplate **ct, Error *err) {
    ByteBuf in = {0};
    size_t len;
    if (strcmp(file, "-") == 0 ? read_stdin(&in, err) : read_file(file, &in.data, &in.len, err))
        return error_prefix(err, "--chat"), byte_buf_free(&in), NULL;
    json_error_t jerr;
    *request = json_loadb(in.data, in.len, 0, &jerr);
    byte_buf_free(&in);
    if (!json_is_object(*request))
        return error_set(err, "--chat: not a JSON object (%s)", *request ? "another value" : jerr.text), NULL;
    const char *warning;
    if (!(*ct = chat_template_new(tok, NULL, CHAT_CONTENT_AUTO, &warning, err))) return NULL;
    char *prompt = chat_template_render(*ct, *request, chat_template_clock(), &len, err);
    if (!prompt) error_prefix(err, "--chat");
    return prompt;
}

/* A chat answer as the server's message shows it: its text through the
 * reasoning and tool-call parser. */
static json_t *chat_message(const Tokenizer *tok, const ChatTemplate *ct, const json_t *request,
                            const int32_t *prompt, int prompt_len, const char *text, size_t len) {
    const json_t *tools = json_object_get(request, "tools");
    bool has_tools = json_is_array(tools) && json_array_size(tools) > 0;
    int last = chat_prompt_last_think_tag(tok, prompt, prompt_len, NULL);
    ChatOutputOptions o = {.parse_reasoning = tokenizer_token_to_id(tok, "</think>", 8) >= 0,
                           .starts_in_reasoning = last == 1,
                           .tool_format = has_tools ? chat_template_tool_call_format(ct) : NULL,
                           .tools = has_tools ? tools : NULL};
    ChatOutputParser *p = chat_output_parser_new(&o);
    ChatOutputDelta d = {0};
    json_t *m = NULL;
    if (p && chat_output_feed(p, text, len, &d) == 0 && chat_output_finish(p, &d) == 0) {
        json_t *calls = json_array();
        for (int i = 0; calls && i < d.num_calls; i++)
            json_array_append_new(calls, json_pack("{s:s, s:{s:s, s:s}}", "type", "function", "function", "name",
                                                   d.calls[i].name, "arguments", d.calls[i].arguments));
        json_t *reasoning = d.reasoning.len ? json_stringn(d.reasoning.data, d.reasoning.len) : json_null();
        /* both of vLLM's names for the thinking, as the server's message has them */
        m = json_pack("{s:s%, s:O, s:o, s:o}", "content", d.content.data ? d.content.data : "", d.content.len,
                      "reasoning", reasoning, "reasoning_content", reasoning, "tool_calls", calls ? calls : json_array());
    }
    chat_output_delta_free(&d);
    chat_output_parser_free(p);
    return m;
}

/* A sample's completion as text, special tokens (<|im_end|>) left out. */
typedef struct ChatContext {
    const ChatTemplate *ct; /* NULL: not a chat */
    const json_t *request;
    const int32_t *prompt;
    int prompt_len;
} ChatContext;

static void add_text(json_t *o, const Tokenizer *tok, const Sample *s, const ChatContext *chat) {
    char *text = NULL;
    size_t len;
    Error err;
    if (tok && tokenizer_decode(tok, s->ids, (size_t)s->num_ids, true, &text, &len, &err) == 0) {
        json_object_set_new(o, "text", json_stringn(text, len));
        if (chat->ct)
            json_object_set_new(o, "message", chat_message(tok, chat->ct, chat->request, chat->prompt,
                                                           chat->prompt_len, text, len));
    }
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
 * folder has a tokenizer; with --chat, "message": {"content", "reasoning",
 * "reasoning_content", "tool_calls"} beside it). */
static int print_result(const GenerateArgs *a, const Tokenizer *tok, const int32_t *prompt,
                        int prompt_len, const Result *r, const ChatContext *chat) {
    int n = a->sampling.n;
    if (a->json) {
        json_t *o;
        if (n == 1) {
            o = json_pack("{s:o, s:o, s:s}", "prompt_ids", ids_to_json(prompt, prompt_len), "ids",
                          ids_to_json(r->samples[0].ids, r->samples[0].num_ids), "finish_reason",
                          finish_name(r->samples[0].finish));
            if (o) add_text(o, tok, &r->samples[0], chat);
        } else {
            json_t *choices = json_array();
            for (int i = 0; choices && i < n; i++) {
                json_t *c = json_pack("{s:o, s:s}", "ids",
                                      ids_to_json(r->samples[i].ids, r->samples[i].num_ids),
                                      "finish_reason", finish_name(r->samples[i].finish));
                if (c) add_text(c, tok, &r->samples[i], chat);
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
    /* From here on every path ends at `done`, which releases whatever was made. */
    int status = 1;
    LoadedModel m; /* loaded_model_close is safe after a failed open */
    Tokenizer *tok = NULL;
    json_t *chat_request = NULL;
    ChatTemplate *ct = NULL;
    char *chat_text = NULL;
    Result r = {0};
    Engine *e = NULL;
    if (loaded_model_open(&m, a.model_dir, &a.runner, &err)) {
        fprintf(stderr, "nanovllm generate: %s\n", err.msg);
        goto done;
    }
    int vocab = m.weights.config.vocab_size;
    Error tok_err = {0};
    tok = open_tokenizer(&a, vocab, &tok_err);
    if (tok && a.chat_file) chat_text = render_chat(a.chat_file, tok, &chat_request, &ct, &tok_err);
    const char *text = a.prompt_text ? a.prompt_text : chat_text;
    if ((!tok && tok_err.msg[0]) || (a.chat_file && !chat_text) ||
        (text && encode_prompt(tok, text, &prompt, &prompt_len, &tok_err))) {
        fprintf(stderr, "nanovllm generate: %s\n", tok_err.msg);
        goto done;
    }
    for (int i = 0; i < prompt_len; i++) {
        if (prompt[i] >= vocab) {
            fprintf(stderr, "nanovllm generate: --prompt-ids: token id %d is outside the "
                            "vocabulary [0, %d)\n%s", prompt[i], vocab, USAGE);
            status = 2;
            goto done;
        }
    }
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
    else if (print_result(&a, tok, prompt, prompt_len, &r, &(ChatContext){ct, chat_request, prompt, prompt_len}))
        fprintf(stderr, "nanovllm generate: cannot write the result to stdout\n");
    else
        status = 0;

done:
    engine_destroy(e);
    for (int i = 0; r.samples && i < a.sampling.n; i++) free(r.samples[i].ids);
    free(r.samples);
    free(prompt);
    free(chat_text);
    json_decref(chat_request);
    chat_template_free(ct);
    tokenizer_free(tok);
    loaded_model_close(&m);
    return status;
}
