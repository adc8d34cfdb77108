/*
 * test_server_nulls.c - `null` is "not given" for every optional field of
 * the API, through the real `nanovllm serve` on the tiny model.
 *
 * SDKs (OpenAI's among them, and pydantic-built clients) send null for the
 * fields a caller left unset, so a server that reads null as a value
 * answers them differently from a request without the field, or not at
 * all. The table below names every optional field the server reads (and
 * the common ones it ignores): for each, the base request with that field
 * null must get the same status and the same answer (ids and timestamps
 * aside; greedy or seeded, so the same text) as the base request without
 * it. The second table holds the fields that are required, where null is a
 * 400 naming the problem, never a 5xx.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "server_helpers.h"

/* Greedy, or seeded where a null field brings back sampling. */
#define CHAT_MESSAGES                                                                                   \
    "[{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"hi\"}, "          \
    "{\"role\": \"assistant\", \"content\": \"yo\"}, {\"role\": \"user\", \"content\": \"again\"}]"
static const char CHAT[] = "{\"messages\": " CHAT_MESSAGES ", \"max_tokens\": 4, \"temperature\": 0, \"seed\": 7}";
static const char COMPLETION[] = "{\"prompt\": \"Hello\", \"max_tokens\": 4, \"temperature\": 0, \"seed\": 7}";
static const char TOKENIZE_PROMPT[] = "{\"prompt\": \"hi\"}";
static const char TOKENIZE_CHAT[] = "{\"messages\": " CHAT_MESSAGES "}";
static const char DETOKENIZE[] = "{\"tokens\": [1, 2, 3]}";
static const char RESPONSES[] = "{\"input\": \"hi\", \"max_output_tokens\": 4, \"temperature\": 0, \"seed\": 7}";
/* served by a second server, on the embedding fixture (embed_server) */
#define EMBED_MODEL "tests/fixtures/tiny-qwen3-embedding"
static const char EMBED[] = "{\"input\": [\"hi\", \"there\"], \"model\": \"" EMBED_MODEL "\", \"encoding_format\": "
                            "\"float\", \"dimensions\": 8, \"user\": \"u\", \"truncate_prompt_tokens\": 16}";

/* Fragments for `with`: what a field needs beside it to be read at all. */
#define TOOLS "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"add\", \"description\": \"adds\", " \
              "\"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}, "      \
              "\"strict\": false}}]"
#define CALL_TURN                                                                                       \
    "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": "  \
    "null, \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": "      \
    "\"add\", \"arguments\": \"{\\\"a\\\": 1}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", " \
    "\"name\": \"add\", \"content\": \"2\"}]"
#define PARTS "\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi\", " \
              "\"cache_control\": {\"type\": \"ephemeral\"}}]}]"
#define THOUGHT_TURN                                                                                    \
    "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": "  \
    "\"a\", \"reasoning_content\": \"r\", \"reasoning\": \"r\"}], \"add_generation_prompt\": false"
#define SCHEMA_FORMAT                                                                                   \
    "\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"n\", \"description\": " \
    "\"d\", \"strict\": true, \"schema\": {\"type\": \"object\"}}}, \"max_tokens\": 8"

#define RTOOLS "\"tools\": [{\"type\": \"function\", \"name\": \"get_weather\", \"description\": \"w\", " \
               "\"parameters\": {\"type\": \"object\"}, \"strict\": false}]"
#define R_ITEMS                                                                                          \
    "{\"input\": [{\"type\": \"message\", \"role\": \"user\", \"content\": [{\"type\": \"input_text\", "        \
    "\"text\": \"weather?\"}]}, {\"type\": \"reasoning\", \"id\": \"rs_1\", \"summary\": [], \"content\": "       \
    "[{\"type\": \"reasoning_text\", \"text\": \"r\"}], \"encrypted_content\": \"x\"}, {\"type\": \"function_call\", " \
    "\"id\": \"fc_1\", \"call_id\": \"call_1\", \"name\": \"get_weather\", \"arguments\": \"{}\", \"status\": "   \
    "\"completed\"}, {\"type\": \"function_call_output\", \"id\": \"fco_1\", \"call_id\": \"call_1\", \"output\": " \
    "\"Sunny\", \"status\": \"completed\"}], " RTOOLS "}"
#define R_SCHEMA                                                                                         \
    "{\"text\": {\"format\": {\"type\": \"json_schema\", \"name\": \"n\", \"description\": \"d\", \"strict\": " \
    "true, \"schema\": {\"type\": \"object\"}}, \"verbosity\": \"medium\"}, \"max_output_tokens\": 8}"

typedef struct NullCase {
    const char *base; /* the request */
    const char *path; /* the field: object keys and list indexes, dot-separated */
    const char *with; /* JSON object merged into the base first (NULL: none) */
} NullCase;

#define C(path, with) {CHAT, path, with}
#define P(path, with) {COMPLETION, path, with}
#define R(path, with) {RESPONSES, path, with}

/* Every optional field, as /v1/chat/completions, /v1/completions, /tokenize
 * and /detokenize read them (api_parse.c, api_tools.c, api_structured.c,
 * api_tokenize.c, chat/chat_template.c), and the common ones they ignore. */
static const NullCase OPTIONAL[] = {
    /* /v1/chat/completions: sampling and output */
    C("model", NULL), C("max_tokens", NULL), C("max_completion_tokens", NULL), C("n", NULL),
    C("temperature", NULL), C("top_p", NULL), C("top_k", NULL), C("min_p", NULL), C("seed", NULL),
    C("presence_penalty", NULL), C("frequency_penalty", NULL), C("repetition_penalty", NULL),
    C("logit_bias", NULL), C("logprobs", NULL), C("top_logprobs", NULL),
    C("top_logprobs", "{\"logprobs\": true, \"top_logprobs\": 2}"), C("logprobs", "{\"logprobs\": true}"),
    C("stop", NULL), C("stop_token_ids", NULL), C("ignore_eos", NULL), C("min_tokens", NULL),
    C("truncate_prompt_tokens", NULL), C("priority", NULL), C("skip_special_tokens", NULL),
    C("stream", NULL), C("stream_options", NULL), C("stream_options", "{\"stream\": true}"),
    C("stream_options.include_usage", "{\"stream\": true, \"stream_options\": {\"include_usage\": true}}"),
    C("stream_options.continuous_usage_stats", "{\"stream\": true, \"stream_options\": {\"include_usage\": true}}"),
    /* refused when set, so null must not count as set */
    C("echo", NULL), C("best_of", NULL), C("use_beam_search", NULL), C("include_stop_str_in_output", NULL),
    C("return_tokens_as_token_ids", NULL), C("functions", NULL), C("function_call", NULL), C("audio", NULL),
    C("web_search_options", NULL), C("reasoning_effort", NULL), C("verbosity", NULL), C("bad_words", NULL),
    C("allowed_token_ids", NULL), C("prompt_logprobs", NULL), C("logits_processors", NULL),
    C("modalities", NULL), C("prediction", NULL),
    /* accepted and ignored */
    C("user", NULL), C("metadata", NULL), C("store", NULL), C("service_tier", NULL), C("cache_salt", NULL),
    C("request_id", NULL), C("length_penalty", NULL), C("spaces_between_special_tokens", NULL),
    C("mm_processor_kwargs", NULL), C("parallel_tool_calls", NULL),
    /* the chat template's */
    C("chat_template", NULL), C("chat_template_kwargs", NULL), C("chat_template_kwargs", "{\"chat_template_kwargs\": {}}"),
    C("enable_thinking", NULL), C("add_generation_prompt", NULL), C("continue_final_message", NULL),
    C("documents", NULL),
    /* messages */
    C("messages.1.name", NULL), C("messages.0.name", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\", \"name\": \"ann\"}]}"),
    C("messages.2.content", NULL), C("messages.2.tool_calls", NULL), C("messages.2.reasoning", NULL),
    C("messages.2.reasoning_content", NULL), C("messages.2.refusal", NULL), C("messages.2.audio", NULL),
    C("messages.0.content.0.cache_control", "{" PARTS "}"),
    C("messages.1.tool_calls.0.id", "{" CALL_TURN ", " TOOLS "}"),
    C("messages.1.tool_calls.0.type", "{" CALL_TURN ", " TOOLS "}"),
    C("messages.2.tool_call_id", "{" CALL_TURN ", " TOOLS "}"), C("messages.2.name", "{" CALL_TURN ", " TOOLS "}"),
    C("messages.1.content", "{" CALL_TURN ", " TOOLS "}"),
    C("messages.1.reasoning", "{" THOUGHT_TURN "}"),
    /* tools */
    C("tools", NULL), C("tool_choice", NULL), C("tools", "{" TOOLS "}"), C("tool_choice", "{" TOOLS "}"),
    C("tools.0.type", "{" TOOLS "}"), C("tools.0.function.description", "{" TOOLS "}"),
    C("tools.0.function.parameters", "{" TOOLS "}"), C("tools.0.function.strict", "{" TOOLS "}"),
    C("parallel_tool_calls", "{" TOOLS ", \"tool_choice\": \"required\", \"max_tokens\": 12}"),
    C("tool_choice.type", "{" TOOLS ", \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"add\"}}, "
                          "\"max_tokens\": 12}"),
    /* structured outputs */
    C("response_format", NULL), C("structured_outputs", NULL), C("guided_json", NULL), C("guided_regex", NULL),
    C("guided_choice", NULL), C("guided_grammar", NULL), C("guided_decoding_backend", NULL),
    C("guided_whitespace_pattern", NULL),
    C("response_format.json_schema.description", "{" SCHEMA_FORMAT "}"),
    C("response_format.json_schema.strict", "{" SCHEMA_FORMAT "}"),
    C("response_format.json_schema.schema", "{" SCHEMA_FORMAT "}"),
    C("response_format.json_schema.name", "{" SCHEMA_FORMAT "}"),
    C("structured_outputs.json", "{\"structured_outputs\": {\"regex\": \"[ab]+\"}}"),
    C("structured_outputs.choice", "{\"structured_outputs\": {\"regex\": \"[ab]+\"}}"),
    C("structured_outputs.grammar", "{\"structured_outputs\": {\"regex\": \"[ab]+\"}}"),
    C("structured_outputs.json_object", "{\"structured_outputs\": {\"regex\": \"[ab]+\"}}"),
    C("structured_outputs.disable_fallback", "{\"structured_outputs\": {\"regex\": \"[ab]+\"}}"),
    C("structured_outputs.disable_any_whitespace", "{\"structured_outputs\": {\"regex\": \"[ab]+\"}}"),
    C("structured_outputs.regex", "{\"structured_outputs\": {\"regex\": \"[ab]+\", \"json\": null}}"),
    C("guided_decoding_backend", "{\"guided_regex\": \"[ab]+\", \"guided_decoding_backend\": \"xgrammar\"}"),

    /* /v1/completions */
    P("model", NULL), P("max_tokens", NULL), P("n", NULL), P("temperature", NULL), P("top_p", NULL),
    P("top_k", NULL), P("min_p", NULL), P("seed", NULL), P("presence_penalty", NULL),
    P("frequency_penalty", NULL), P("repetition_penalty", NULL), P("logit_bias", NULL), P("logprobs", NULL),
    P("logprobs", "{\"logprobs\": 2}"), P("echo", NULL), P("echo", "{\"echo\": true}"), P("best_of", NULL),
    P("best_of", "{\"n\": 2, \"best_of\": 2}"), P("suffix", NULL), P("stop", NULL), P("stop_token_ids", NULL),
    P("ignore_eos", NULL), P("min_tokens", NULL), P("truncate_prompt_tokens", NULL), P("priority", NULL),
    P("skip_special_tokens", NULL), P("stream", NULL), P("stream_options", NULL),
    P("stream_options.include_usage", "{\"stream\": true, \"stream_options\": {\"include_usage\": true}}"),
    P("stream_options.continuous_usage_stats", "{\"stream\": true, \"stream_options\": {}}"),
    P("user", NULL), P("use_beam_search", NULL), P("include_stop_str_in_output", NULL),
    P("return_tokens_as_token_ids", NULL), P("prompt_logprobs", NULL), P("allowed_token_ids", NULL),
    P("bad_words", NULL), P("logits_processors", NULL), P("response_format", NULL), P("structured_outputs", NULL),
    P("guided_json", NULL), P("guided_regex", NULL), P("guided_choice", NULL), P("guided_grammar", NULL),
    P("guided_decoding_backend", NULL), P("guided_whitespace_pattern", NULL),
    P("structured_outputs.choice", "{\"structured_outputs\": {\"regex\": \"[ab]+\"}}"),
    P("max_completion_tokens", NULL), P("chat_template_kwargs", NULL), P("tools", NULL),

    /* /tokenize with a prompt, then with messages */
    {TOKENIZE_PROMPT, "model", NULL}, {TOKENIZE_PROMPT, "messages", NULL},
    {TOKENIZE_PROMPT, "add_special_tokens", NULL}, {TOKENIZE_PROMPT, "return_token_strs", NULL},
    {TOKENIZE_CHAT, "prompt", NULL}, {TOKENIZE_CHAT, "model", NULL}, {TOKENIZE_CHAT, "add_special_tokens", NULL},
    {TOKENIZE_CHAT, "add_generation_prompt", NULL}, {TOKENIZE_CHAT, "continue_final_message", NULL},
    {TOKENIZE_CHAT, "tools", NULL}, {TOKENIZE_CHAT, "documents", NULL}, {TOKENIZE_CHAT, "chat_template", NULL},
    {TOKENIZE_CHAT, "chat_template_kwargs", NULL}, {TOKENIZE_CHAT, "enable_thinking", NULL},
    {TOKENIZE_CHAT, "mm_processor_kwargs", NULL}, {TOKENIZE_CHAT, "return_token_strs", NULL},
    {TOKENIZE_CHAT, "messages.1.name", NULL}, {TOKENIZE_CHAT, "messages.2.content", NULL},
    {TOKENIZE_CHAT, "messages.2.tool_calls", NULL}, {TOKENIZE_CHAT, "messages.2.reasoning_content", NULL},
    {TOKENIZE_CHAT, "tools.0.function.description", "{" TOOLS "}"},
    {TOKENIZE_CHAT, "tools.0.function.parameters", "{" TOOLS "}"},
    {TOKENIZE_CHAT, "tools.0.function.strict", "{" TOOLS "}"},
    {TOKENIZE_CHAT, "messages.1.tool_calls.0.id", "{" CALL_TURN ", " TOOLS "}"},
    {TOKENIZE_CHAT, "messages.2.tool_call_id", "{" CALL_TURN ", " TOOLS "}"},
    {TOKENIZE_CHAT, "messages.1.reasoning", "{" THOUGHT_TURN "}"},
    {TOKENIZE_CHAT, "messages.1.reasoning_content", "{" THOUGHT_TURN "}"},

    /* /detokenize */
    {DETOKENIZE, "model", NULL},

    /* /v1/responses (api_responses.c): its own fields, chat's extras, the items */
    R("model", NULL), R("instructions", NULL), R("previous_response_id", NULL), R("tools", NULL),
    R("tool_choice", NULL), R("parallel_tool_calls", NULL), R("text", NULL), R("max_output_tokens", NULL),
    R("temperature", NULL), R("top_p", NULL), R("reasoning", NULL), R("metadata", NULL), R("user", NULL),
    R("store", NULL), R("stream", NULL), R("include", NULL), R("truncation", NULL), R("background", NULL),
    R("top_logprobs", NULL), R("max_tool_calls", NULL), R("conversation", NULL), R("prompt", NULL),
    R("service_tier", NULL), R("prompt_cache_key", NULL), R("safety_identifier", NULL), R("seed", NULL),
    R("top_k", NULL), R("stop", NULL), R("chat_template_kwargs", NULL), R("context_management", NULL),
    R("stream", "{\"stream\": true}"),
    R("reasoning.effort", "{\"reasoning\": {\"effort\": \"none\", \"summary\": \"auto\"}}"),
    R("reasoning.summary", "{\"reasoning\": {\"effort\": \"none\", \"summary\": \"auto\"}}"),
    R("text.format", R_SCHEMA), R("text.verbosity", R_SCHEMA), R("text.format.description", R_SCHEMA),
    R("text.format.strict", R_SCHEMA), R("tools.0.description", R_ITEMS), R("tools.0.parameters", R_ITEMS),
    R("tools.0.strict", R_ITEMS), R("tool_choice", R_ITEMS), R("input.0.type", R_ITEMS),
    R("input.0.content.0.annotations", R_ITEMS), R("input.1.encrypted_content", R_ITEMS),
    R("input.1.summary", R_ITEMS), R("input.1.id", R_ITEMS), R("input.2.id", R_ITEMS),
    R("input.2.status", R_ITEMS), R("input.3.id", R_ITEMS), R("input.3.status", R_ITEMS),

    /* /v1/embeddings (api_embeddings.c) */
    {EMBED, "model", NULL}, {EMBED, "encoding_format", NULL}, {EMBED, "dimensions", NULL},
    {EMBED, "user", NULL}, {EMBED, "truncate_prompt_tokens", NULL},
    {EMBED, "encoding_format", "{\"encoding_format\": \"base64\"}"},
};

/* Where null is not "not given" but a missing required field: a 400. */
static const NullCase REQUIRED[] = {
    C("messages", NULL), C("messages.1", NULL), C("messages.1.role", NULL), C("messages.1.content", NULL),
    C("messages.0.content.0.text", "{" PARTS "}"), C("messages.0.content.0.type", "{" PARTS "}"),
    C("tools.0.function", "{" TOOLS "}"), C("tools.0.function.name", "{" TOOLS "}"),
    C("tool_choice.function", "{" TOOLS ", \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"add\"}}}"),
    C("response_format.type", "{\"response_format\": {\"type\": \"json_object\"}}"),
    C("response_format.json_schema", "{" SCHEMA_FORMAT "}"),
    P("prompt", NULL),
    {TOKENIZE_PROMPT, "prompt", NULL}, {TOKENIZE_CHAT, "messages", NULL},
    {TOKENIZE_CHAT, "messages.0.role", NULL},
    {DETOKENIZE, "tokens", NULL},
    R("input", NULL), R("input.0", R_ITEMS), R("input.0.role", R_ITEMS), R("input.0.content", R_ITEMS),
    R("input.0.content.0.text", R_ITEMS), R("input.0.content.0.type", R_ITEMS), R("input.2.call_id", R_ITEMS),
    R("input.2.name", R_ITEMS), R("input.2.arguments", R_ITEMS), R("input.3.call_id", R_ITEMS),
    R("input.3.output", R_ITEMS), R("tools.0.name", R_ITEMS), R("tools.0.type", R_ITEMS),
    R("text.format.type", R_SCHEMA), R("text.format.schema", R_SCHEMA),
    /* /v1/embeddings */
    {EMBED, "input", NULL}, {EMBED, "input.1", NULL}, {EMBED, "input.0", "{\"input\": [[1, 2], [3]]}"},
    {EMBED, "input.0.1", "{\"input\": [[1, 2], [3]]}"},
};

static const char *endpoint(const char *base) {
    if (base == CHAT) return "/v1/chat/completions";
    if (base == COMPLETION) return "/v1/completions";
    if (base == RESPONSES) return "/v1/responses";
    if (base == EMBED) return "/v1/embeddings";
    if (base == DETOKENIZE) return "/detokenize";
    return "/tokenize";
}

/* The field's parent and its last key (or index), in body. */
static json_t *parent_of(json_t *body, const char *path, char *last, size_t last_size) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *at = body;
    char *save = NULL, *part = strtok_r(buf, ".", &save), *next;
    for (; part && (next = strtok_r(NULL, ".", &save)); part = next) {
        at = json_is_array(at) ? json_array_get(at, strtoul(part, NULL, 10)) : json_object_get(at, part);
        cr_assert(at, "%s: the base has no %s", path, part);
    }
    snprintf(last, last_size, "%s", part);
    return at;
}

/* The base (with c->with merged) and the field null (or absent). */
static char *variant(const NullCase *c, bool null) {
    json_t *body = json_loads(c->base, 0, NULL);
    cr_assert(body);
    if (c->with) {
        json_t *with = json_loads(c->with, 0, NULL);
        cr_assert(with, "bad with: %s", c->with);
        json_object_update(body, with);
        json_decref(with);
    }
    char last[64];
    json_t *parent = parent_of(body, c->path, last, sizeof last);
    if (json_is_array(parent)) {
        size_t i = strtoul(last, NULL, 10);
        cr_assert(i < json_array_size(parent), "%s: no such item", c->path);
        if (null) json_array_set_new(parent, i, json_null());
        else json_array_remove(parent, i);
    } else if (null) {
        json_object_set_new(parent, last, json_null());
    } else {
        json_object_del(parent, last);
    }
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    return text;
}

/* What must match: the answer without its ids and timestamps. */
static void strip_volatile(json_t *v) {
    if (json_is_object(v)) {
        json_object_del(v, "id");
        json_object_del(v, "created");
        json_object_del(v, "created_at");
        json_object_del(v, "call_id");
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) strip_volatile(x);
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) strip_volatile(x);
    }
}

/* The answer as JSON: a body, or a stream's events as a list. */
static json_t *answer(const TestServer *s, const char *path, const char *body, int *status) {
    HttpResult r = http(s, "POST", path, body, NULL);
    *status = r.status;
    json_t *out;
    if (strstr(r.headers, "text/event-stream")) {
        int done;
        out = sse_events(r.body, &done);
        cr_expect(done || strcmp(path, "/v1/responses") == 0, "%s: the stream did not end with [DONE]", body);
    } else {
        out = json_loads(r.body, 0, NULL);
        cr_expect(out, "%s -> %d, not JSON: %s", body, r.status, r.body);
    }
    http_free(&r);
    strip_volatile(out);
    return out;
}

Test(server_nulls, null_is_absent_for_every_optional_field, .timeout = 600) {
    TestServer gen, embed_server;
    server_start(&gen, "");
    server_start(&embed_server, "--model " EMBED_MODEL);
    for (size_t i = 0; i < sizeof OPTIONAL / sizeof OPTIONAL[0]; i++) {
        const NullCase *c = &OPTIONAL[i];
        const TestServer s = c->base == EMBED ? embed_server : gen;
        char *absent = variant(c, false), *null = variant(c, true);
        int want_status, got_status;
        json_t *want = answer(&s, endpoint(c->base), absent, &want_status);
        json_t *got = answer(&s, endpoint(c->base), null, &got_status);
        cr_expect(want_status >= 200 && want_status < 300, "%s %s: the base fails (%d): %s", endpoint(c->base),
                  c->path, want_status, absent);
        cr_expect_eq(got_status, want_status, "%s %s: null -> %d, absent -> %d: %s", endpoint(c->base), c->path,
                     got_status, want_status, null);
        if (got_status == want_status && !json_equal(want, got)) {
            char *a = json_dumps(want, JSON_COMPACT), *b = json_dumps(got, JSON_COMPACT);
            cr_expect_fail("%s %s: null answers differently\n absent: %s\n null:   %s", endpoint(c->base),
                           c->path, a, b);
            free(a);
            free(b);
        }
        json_decref(want);
        json_decref(got);
        free(absent);
        free(null);
    }
    cr_expect_eq(server_stop(&gen, SIGTERM), 0);
    cr_expect_eq(server_stop(&embed_server, SIGTERM), 0);
}

Test(server_nulls, null_is_a_400_for_required_fields, .timeout = 300) {
    TestServer gen, embed_server;
    server_start(&gen, "");
    server_start(&embed_server, "--model " EMBED_MODEL);
    for (size_t i = 0; i < sizeof REQUIRED / sizeof REQUIRED[0]; i++) {
        const NullCase *c = &REQUIRED[i];
        const TestServer s = c->base == EMBED ? embed_server : gen;
        char *null = variant(c, true);
        int status;
        json_t *got = http_json(&s, endpoint(c->base), null, &status);
        cr_expect_eq(status, 400, "%s %s: null -> %d: %s", endpoint(c->base), c->path, status, null);
        json_t *message = json_object_get(json_object_get(got, "error"), "message");
        cr_expect(json_is_string(message) && json_string_length(message) > 0, "%s %s: no error message",
                  endpoint(c->base), c->path);
        json_decref(got);
        free(null);
    }
    cr_expect_eq(server_stop(&gen, SIGTERM), 0);
    cr_expect_eq(server_stop(&embed_server, SIGTERM), 0);
}
