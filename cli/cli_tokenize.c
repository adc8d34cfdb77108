/*
 * cli_tokenize.c - `nanovllm tokenize`: the tokenizer and chat template
 * from the command line.
 *
 * Reads all of stdin as text (or, with --chat, as an OpenAI-style chat
 * request), encodes it with the model folder's tokenizer and prints the
 * ids with the text they stand for: the decoded ids for plain text, the
 * rendered prompt for --chat. --bench runs the tokenizer benchmark
 * (bench_tokenizer.c) instead.
 */
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "commands.h"
#include "base/byte_buf.h"
#include "base/log.h"
#include "chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"
#include "cli/bench/bench_tokenizer.h"
#include "engine/model_tokenizer.h"
#include "model/gguf.h"
#include "model/model_config.h"

static const char USAGE[] =
    "usage: nanovllm tokenize --model DIR [--chat [--chat-template FILE|TEXT]] [--json] < input\n";

static const char HELP[] =
    "Encodes stdin with the model's tokenizer and prints the token ids.\n"
    "\n"
    "  --model DIR          Hugging Face model folder (tokenizer.json, tokenizer_config.json)\n"
    "  --chat               stdin is a chat request {\"messages\": [...], \"tools\": [...],\n"
    "                       \"add_generation_prompt\": true, \"chat_template_kwargs\": {...}}:\n"
    "                       render it with the chat template, then encode\n"
    CHAT_TEMPLATE_USAGE
    "  --json               print one JSON object {\"ids\": [...], \"text\": \"...\"} (text: the\n"
    "                       decoded ids, or the rendered prompt with --chat)\n"
    "  --quiet              no log on stderr\n"
    "\n"
    "Benchmark (single thread; see scripts/bench_tokenizer.sh, scripts/bench_chat_template.sh):\n"
    "  --bench              time loading, encoding and decoding instead; with --chat, time\n"
    "                       rendering stdin's request --bench-runs times\n"
    "  --bench-mb N         size of the generated mixed text (default 5)\n"
    "  --bench-text FILE    use this text (JSON lines of strings, one document each)\n"
    "  --bench-write FILE   also write the text used, as JSON lines\n"
    "  --bench-runs N       encode/decode passes, or chat renders (default 3)\n"
    "  --bench-check FILE   compare the ids with FILE (JSON lines of id lists, one per document)\n"
    "  --pcre2              run the pre-tokenizer regex on PCRE2, not the hand-written splitter\n";

typedef struct TokenizeArgs {
    const char *model_dir;
    char *chat_template; /* --chat-template's text, or NULL */
    ChatContentFormat content_format;
    bool chat, json, pcre2;
    TokenizerBenchArgs bench;
    bool run_bench;
} TokenizeArgs;

static int parse_args(int argc, char **argv, TokenizeArgs *a, Error *err) {
    static const struct option options[] = {
        {"model", required_argument, 0, 'm'},      {"chat", no_argument, 0, 'c'},
        {"json", no_argument, 0, 'j'},             {"bench", no_argument, 0, 'b'},
        {"bench-mb", required_argument, 0, 'M'},   {"bench-text", required_argument, 0, 'T'},
        {"bench-write", required_argument, 0, 'W'}, {"bench-runs", required_argument, 0, 'R'},
        {"bench-check", required_argument, 0, 'C'}, {"pcre2", no_argument, 0, 'p'},
        {"quiet", no_argument, 0, 'q'},            {"chat-template", required_argument, 0, 't'},
        {"chat-template-content-format", required_argument, 0, 'F'},
        {"help", no_argument, 0, 'h'},             {0, 0, 0, 0}};
    *a = (TokenizeArgs){.bench = {.megabytes = 5, .runs = 3}};
    optind = 0;
    int c, index;
    RunnerOptions unused = runner_default_options();
    while ((c = getopt_long(argc, argv, "", options, &index)) != -1) {
        switch (c) {
        case 'm': a->model_dir = optarg; break;
        case 'c': a->chat = true; break;
        case 'j': a->json = true; break;
        case 'b': a->run_bench = true; break;
        case 'p': a->pcre2 = true; break;
        case 't':
            free(a->chat_template);
            a->chat_template = NULL;
            if (read_chat_template_arg(optarg, &a->chat_template, err)) return -1;
            break;
        case 'F':
            if (chat_content_format_parse(optarg, &a->content_format))
                return error_set(err, "--chat-template-content-format: '%s' is not auto, string, "
                                      "openai or verbatim", optarg);
            break;
        case 'T': a->bench.text_path = optarg; break;
        case 'W': a->bench.write_path = optarg; break;
        case 'C': a->bench.check_path = optarg; break;
        case 'M':
            if (parse_int_arg("--bench-mb", optarg, 1, 1024, &a->bench.megabytes, err)) return -1;
            break;
        case 'R':
            if (parse_int_arg("--bench-runs", optarg, 1, 100000, &a->bench.runs, err)) return -1;
            break;
        default: {
            int common = c == 'q' || c == 'h'
                             ? parse_common_option(c, NULL, optarg, &unused, USAGE, HELP, err)
                             : 0;
            if (common == 0) return error_set(err, "invalid option (see nanovllm tokenize --help)");
            if (common != 1) return common < 0 ? -1 : 1;
        }
        }
    }
    if (optind < argc) return error_set(err, "unexpected argument '%s'", argv[optind]);
    if (!a->model_dir) return error_set(err, "--model is required");
    if (a->chat_template && !a->chat) return error_set(err, "--chat-template needs --chat");
    return 0;
}

/* The model's embedding rows from config.json, or 0 (the tokenizer's size)
 * when the folder has no readable config.json: tokenizing needs no weights. */
static int model_vocab_size(const char *dir) {
    ModelConfig gguf_config;
    Error ignored;
    if (gguf_is_file(dir)) return model_config_load(&gguf_config, dir, &ignored) ? 0 : gguf_config.vocab_size;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cfg = json_load_file(path, 0, NULL);
    json_t *v = json_object_get(cfg, "vocab_size");
    int n = json_is_integer(v) && json_integer_value(v) > 0 &&
                    json_integer_value(v) < (1 << 30) ? (int)json_integer_value(v) : 0;
    json_decref(cfg);
    return n;
}

/* A chat request read from stdin, and the model's template (or
 * --chat-template's) to render it with. */
static json_t *load_chat(const Tokenizer *t, const TokenizeArgs *a, const ByteBuf *in,
                         ChatTemplate **ct, Error *err) {
    json_error_t jerr;
    json_t *req = json_loadb(in->data, in->len, 0, &jerr);
    if (!req) {
        error_set(err, "stdin is not a JSON chat request: %s (line %d)", jerr.text, jerr.line);
        return NULL;
    }
    const char *warning;
    json_t *own = json_object_get(req, "chat_template");
    if (own && !json_is_null(own))
        error_set(err, "give the template with --chat-template, not in the request");
    else if ((*ct = chat_template_new(t, a->chat_template, a->content_format, &warning, err))) {
        if (warning) log_info("%s", warning);
        return req;
    }
    json_decref(req);
    return NULL;
}

static char *render_chat(const Tokenizer *t, const TokenizeArgs *a, const ByteBuf *in, size_t *len,
                         Error *err) {
    ChatTemplate *ct = NULL;
    json_t *req = load_chat(t, a, in, &ct, err);
    char *prompt = req ? chat_template_render(ct, req, chat_template_clock(), len, err) : NULL;
    chat_template_free(ct);
    json_decref(req);
    return prompt;
}

static int bench_chat(const Tokenizer *t, const TokenizeArgs *a, Error *err) {
    ByteBuf in = {0};
    ChatTemplate *ct = NULL;
    json_t *req = read_stdin(&in, err) == 0 ? load_chat(t, a, &in, &ct, err) : NULL;
    int rc = req ? bench_chat_template(ct, req, a->bench.runs, a->json, err) : -1;
    chat_template_free(ct);
    json_decref(req);
    byte_buf_free(&in);
    return rc;
}

/* Token bytes for a human: printable ASCII as is, the rest escaped. */
static void print_piece(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c >= 0x20 && c < 0x7F) putchar(c);
        else if (c >= 0x80) putchar(c); /* UTF-8 passes through; a split character shows as is */
        else printf("\\x%02x", c);
    }
    putchar('"');
}

static int print_result(const Tokenizer *t, const TokenizeArgs *a, const int32_t *ids, size_t n,
                        const char *text, size_t text_len, Error *err) {
    if (a->json) {
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < n; i++)
            if (json_array_append_new(arr, json_integer(ids[i]))) {
                json_decref(arr);
                arr = NULL;
            }
        json_t *o = arr ? json_pack("{s:o, s:s%}", "ids", arr, "text", text, text_len) : NULL;
        int rc = o ? json_dumpf(o, stdout, JSON_COMPACT) : -1;
        json_decref(o);
        if (rc) return error_set(err, "cannot write the result");
        putchar('\n');
    } else {
        for (size_t i = 0; i < n; i++) {
            const char *bytes;
            size_t len;
            if (tokenizer_token_bytes(t, ids[i], &bytes, &len, err)) return -1;
            printf("%d\t", ids[i]);
            print_piece(bytes, len);
            putchar('\n');
        }
        printf("%zu tokens\n", n);
    }
    return fflush(stdout) == 0 ? 0 : error_set(err, "cannot write to stdout");
}

static int tokenize(const Tokenizer *t, const TokenizeArgs *a, Error *err) {
    ByteBuf in = {0};
    char *text = NULL;
    size_t text_len = 0, n = 0;
    int32_t *ids = NULL;
    int rc = read_stdin(&in, err);
    if (rc == 0 && a->chat) {
        text = render_chat(t, a, &in, &text_len, err);
        rc = text ? 0 : -1;
    }
    if (rc == 0)
        rc = a->chat ? tokenizer_encode(t, text, text_len, &ids, &n, err)
                     : tokenizer_encode(t, in.data, in.len, &ids, &n, err);
    if (rc == 0 && !a->chat) rc = tokenizer_decode(t, ids, n, false, &text, &text_len, err);
    if (rc == 0) rc = print_result(t, a, ids, n, text, text_len, err);
    free(ids);
    free(text);
    byte_buf_free(&in);
    return rc;
}

int command_tokenize(int argc, char **argv) {
    TokenizeArgs a;
    Error err = {0};
    int parsed = parse_args(argc, argv, &a, &err);
    if (parsed != 0) {
        free(a.chat_template);
        if (parsed > 0) return 0;
        fprintf(stderr, "nanovllm tokenize: %s\n%s", err.msg, USAGE);
        return 2;
    }
    double t0 = now_seconds();
    Tokenizer *t = model_tokenizer_load(a.model_dir, model_vocab_size(a.model_dir), &err);
    if (!t || (a.pcre2 && tokenizer_use_pcre2(t, &err))) {
        fprintf(stderr, "nanovllm tokenize: %s\n", err.msg);
        tokenizer_free(t);
        free(a.chat_template);
        return 1;
    }
    log_info("tokenizer %s: %d tokens, loaded in %.0f ms", a.model_dir, tokenizer_size(t),
             (now_seconds() - t0) * 1e3);
    int rc = a.run_bench && a.chat ? bench_chat(t, &a, &err)
             : a.run_bench          ? bench_tokenizer(t, a.model_dir, &a.bench, a.json, &err)
                                    : tokenize(t, &a, &err);
    if (rc) fprintf(stderr, "nanovllm tokenize: %s\n", err.msg);
    tokenizer_free(t);
    free(a.chat_template);
    return rc ? 1 : 0;
}
