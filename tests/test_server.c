/*
 * test_server.c - `nanovllm serve` end to end: the real server on 127.0.0.1
 * with the tiny model on the CPU, driven with curl. OpenAI's response shapes,
 * streaming, stop strings, seeds, logprobs, 30+ bad requests, concurrency,
 * disconnects, authentication, limits and shutdown.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "server_helpers.h"

#define MODEL_NAME TINY_MODEL

static const char *str(json_t *o, const char *path) {
    json_t *v = o;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *tok = strtok(buf, "."); tok && v; tok = strtok(NULL, ".")) {
        if (tok[0] >= '0' && tok[0] <= '9') v = json_array_get(v, (size_t)atoi(tok));
        else v = json_object_get(v, tok);
    }
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static json_int_t num(json_t *o, const char *a, const char *b) {
    return json_integer_value(json_object_get(json_object_get(o, a), b));
}

/* ---- shapes ---------------------------------------------------------------- */

Test(server, completions_and_chat_shapes, .timeout = 60) {
    TestServer s;
    server_start(&s, "");
    int status;
    json_t *c = http_json(&s, "/v1/completions",
                          "{\"model\": \"" MODEL_NAME "\", \"prompt\": \"Hello, world\", "
                          "\"max_tokens\": 5, \"temperature\": 0}", &status);
    cr_expect_eq(status, 200);
    cr_expect(strncmp(str(c, "id"), "cmpl-", 5) == 0);
    cr_expect_str_eq(str(c, "object"), "text_completion");
    cr_expect(json_is_integer(json_object_get(c, "created")));
    cr_expect_str_eq(str(c, "model"), MODEL_NAME);
    cr_expect_str_eq(str(c, "choices.0.finish_reason"), "length");
    cr_expect(str(c, "choices.0.text") != NULL);
    cr_expect_eq(num(c, "usage", "prompt_tokens"), 3);
    cr_expect_eq(num(c, "usage", "completion_tokens"), 5);
    cr_expect_eq(num(c, "usage", "total_tokens"), 8);

    /* the same prompt as ids gives the same text; echo puts the prompt first */
    json_t *ids = http_json(&s, "/v1/completions", "{\"prompt\": [9707, 11, 1879], \"max_tokens\": 5, "
                                                   "\"temperature\": 0, \"echo\": true}", &status);
    cr_expect_eq(status, 200);
    char want[512];
    snprintf(want, sizeof want, "Hello, world%s", str(c, "choices.0.text"));
    cr_expect_str_eq(str(ids, "choices.0.text"), want);

    /* several prompts, n samples each: choices prompt-major */
    json_t *many = http_json(&s, "/v1/completions", "{\"prompt\": [\"a\", \"Hello, world\"], "
                                                    "\"max_tokens\": 5, \"temperature\": 0, \"n\": 2}", &status);
    cr_expect_eq(status, 200);
    cr_expect_eq(json_array_size(json_object_get(many, "choices")), 4);
    cr_expect_str_eq(str(many, "choices.2.text"), str(c, "choices.0.text"));
    cr_expect_str_eq(str(many, "choices.3.text"), str(c, "choices.0.text"));
    json_t *lists = http_json(&s, "/v1/completions", "{\"prompt\": [[1, 2], [9707, 11, 1879]], "
                                                     "\"max_tokens\": 5, \"temperature\": 0}", &status);
    cr_expect_eq(status, 200);
    cr_expect_str_eq(str(lists, "choices.1.text"), str(c, "choices.0.text"));
    cr_expect_eq(num(lists, "usage", "prompt_tokens"), 5);

    json_t *chat = http_json(&s, "/v1/chat/completions",
                             "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                             "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi\"}]}], "
                             "\"max_completion_tokens\": 4, \"temperature\": 0, "
                             "\"chat_template_kwargs\": {\"enable_thinking\": false}}", &status);
    cr_expect_eq(status, 200);
    cr_expect(strncmp(str(chat, "id"), "chatcmpl-", 9) == 0);
    cr_expect_str_eq(str(chat, "object"), "chat.completion");
    cr_expect_str_eq(str(chat, "choices.0.message.role"), "assistant");
    cr_expect(str(chat, "choices.0.message.content") != NULL);
    cr_expect_eq(num(chat, "usage", "completion_tokens"), 4);

    json_t *models = http_json(&s, "/v1/models", NULL, &status);
    cr_expect_eq(status, 200);
    cr_expect_str_eq(str(models, "object"), "list");
    cr_expect_str_eq(str(models, "data.0.id"), MODEL_NAME);

    json_t *tok = http_json(&s, "/tokenize", "{\"prompt\": \"Hello, world\"}", &status);
    cr_expect_eq(status, 200);
    cr_expect_eq(json_integer_value(json_object_get(tok, "count")), 3);
    json_t *detok = http_json(&s, "/detokenize", "{\"tokens\": [9707, 11, 1879]}", &status);
    cr_expect_str_eq(str(detok, "prompt"), "Hello, world");

    json_decref(c);
    json_decref(ids);
    json_decref(many);
    json_decref(lists);
    json_decref(chat);
    json_decref(models);
    json_decref(tok);
    json_decref(detok);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* ---- streaming --------------------------------------------------------------- */

/* The texts of a completion stream's chunks, joined (NUL-safe). */
static json_t *joined_stream_text(json_t *events) {
    json_t *all = json_string("");
    for (size_t k = 0; k < json_array_size(events); k++) {
        json_t *choice = json_array_get(json_object_get(json_array_get(events, k), "choices"), 0);
        json_t *t = json_object_get(choice, "text");
        if (!json_is_string(t)) continue;
        size_t a = json_string_length(all), b = json_string_length(t);
        char *joined = malloc(a + b + 1);
        cr_assert(joined);
        memcpy(joined, json_string_value(all), a);
        memcpy(joined + a, json_string_value(t), b);
        json_string_setn_nocheck(all, joined, a + b);
        free(joined);
    }
    return all;
}

Test(server, streaming, .timeout = 60) {
    TestServer s;
    server_start(&s, "");
    int status, done;
    json_t *whole = http_json(&s, "/v1/completions", "{\"prompt\": \"Streaming\", \"max_tokens\": 12, "
                                                     "\"temperature\": 0}", &status);
    HttpResult r = http(&s, "POST", "/v1/completions",
                        "{\"prompt\": \"Streaming\", \"max_tokens\": 12, \"temperature\": 0, "
                        "\"stream\": true, \"stream_options\": {\"include_usage\": true}}", NULL);
    cr_expect_eq(r.status, 200);
    cr_expect(strstr(r.headers, "text/event-stream"), "%s", r.headers);
    json_t *ev = sse_events(r.body, &done);
    cr_expect(done, "ends with data: [DONE]");
    size_t n = json_array_size(ev);
    for (size_t i = 0; i + 1 < n; i++)
        cr_expect_str_eq(str(json_array_get(ev, i), "object"), "text_completion");
    json_t *text = joined_stream_text(ev);
    cr_expect(json_equal(text, json_object_get(json_array_get(json_object_get(whole, "choices"), 0), "text")),
              "streamed text equals the whole answer");
    json_decref(text);
    cr_expect_str_eq(str(json_array_get(ev, n - 2), "choices.0.finish_reason"), "length");
    json_t *usage = json_array_get(ev, n - 1);
    cr_expect_eq(json_array_size(json_object_get(usage, "choices")), 0);
    cr_expect_eq(num(usage, "usage", "completion_tokens"), 12);
    json_decref(ev);
    http_free(&r);

    r = http(&s, "POST", "/v1/chat/completions",
             "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 6, "
             "\"temperature\": 0, \"stream\": true}", NULL);
    ev = sse_events(r.body, &done);
    n = json_array_size(ev);
    cr_expect(done);
    cr_expect_geq(n, 3);
    json_t *first = json_array_get(ev, 0), *last = json_array_get(ev, n - 1);
    cr_expect_str_eq(str(first, "object"), "chat.completion.chunk");
    cr_expect_str_eq(str(first, "choices.0.delta.role"), "assistant");
    for (size_t i = 1; i + 1 < n; i++)
        cr_expect(str(json_array_get(ev, i), "choices.0.delta.content") != NULL);
    cr_expect_str_eq(str(last, "choices.0.finish_reason"), "length");
    cr_expect(json_object_size(json_object_get(json_array_get(json_object_get(last, "choices"), 0), "delta")) == 0);
    cr_expect(!json_object_get(last, "usage"), "no usage chunk unless asked");
    json_decref(ev);
    http_free(&r);
    json_decref(whole);
    cr_expect_eq(server_stop(&s, SIGINT), 0);
}

/* ---- stop strings, seeds, logprobs ---------------------------------------------- */

Test(server, stop_seed_logprobs, .timeout = 60) {
    TestServer s;
    server_start(&s, "");
    int status;
    json_t *full = http_json(&s, "/v1/completions", "{\"prompt\": \"Stop here\", \"max_tokens\": 24, "
                                                    "\"temperature\": 0, \"ignore_eos\": true}", &status);
    const char *text = str(full, "choices.0.text");
    size_t len = strlen(text);
    cr_assert_gt(len, 20);
    size_t a = len / 2, b;
    while (((unsigned char)text[a] & 0xC0) == 0x80) a++;
    b = a + 1;
    while (b < len && ((unsigned char)text[b] & 0xC0) == 0x80) b++;
    char stop[16];
    memcpy(stop, text + a, b - a);
    stop[b - a] = '\0';
    json_t *req = json_pack("{s:s, s:i, s:i, s:b, s:[s]}", "prompt", "Stop here", "max_tokens", 24,
                            "temperature", 0, "ignore_eos", 1, "stop", stop);
    char *body = json_dumps(req, 0);
    json_t *cut = http_json(&s, "/v1/completions", body, &status);
    size_t first = (size_t)(strstr(text, stop) - text);
    cr_expect_eq(strlen(str(cut, "choices.0.text")), first);
    cr_expect(strncmp(str(cut, "choices.0.text"), text, first) == 0);
    cr_expect_str_eq(str(cut, "choices.0.finish_reason"), "stop");
    cr_expect_str_eq(str(cut, "choices.0.stop_reason"), stop);
    free(body);
    json_decref(req);

    const char *seeded = "{\"prompt\": \"Dice\", \"max_tokens\": 10, \"temperature\": 1.0, "
                         "\"top_p\": 0.9, \"seed\": 1234}";
    json_t *s1 = http_json(&s, "/v1/completions", seeded, &status);
    json_t *s2 = http_json(&s, "/v1/completions", seeded, &status);
    json_t *s3 = http_json(&s, "/v1/completions", "{\"prompt\": \"Dice\", \"max_tokens\": 10, "
                                                  "\"temperature\": 1.0, \"top_p\": 0.9, \"seed\": 99}", &status);
    cr_expect_str_eq(str(s1, "choices.0.text"), str(s2, "choices.0.text"), "same seed, same text");
    cr_expect_str_neq(str(s1, "choices.0.text"), str(s3, "choices.0.text"));

    json_t *lp = http_json(&s, "/v1/completions", "{\"prompt\": \"Log\", \"max_tokens\": 6, "
                                                  "\"temperature\": 0, \"logprobs\": 3}", &status);
    json_t *l = json_object_get(json_array_get(json_object_get(lp, "choices"), 0), "logprobs");
    cr_expect_eq(json_array_size(json_object_get(l, "tokens")), 6);
    cr_expect_eq(json_array_size(json_object_get(l, "token_logprobs")), 6);
    cr_expect_eq(json_array_size(json_object_get(l, "text_offset")), 6);
    cr_expect_eq(json_object_size(json_array_get(json_object_get(l, "top_logprobs"), 0)), 3);
    json_t *clp = http_json(&s, "/v1/chat/completions",
                            "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 3, "
                            "\"temperature\": 0, \"logprobs\": true, \"top_logprobs\": 2}", &status);
    json_t *content = json_object_get(json_object_get(json_array_get(json_object_get(clp, "choices"), 0),
                                                      "logprobs"), "content");
    cr_expect_eq(json_array_size(content), 3);
    json_t *entry = json_array_get(content, 0);
    cr_expect(json_is_real(json_object_get(entry, "logprob")) && json_real_value(json_object_get(entry, "logprob")) <= 0);
    cr_expect(json_is_array(json_object_get(entry, "bytes")));
    cr_expect_eq(json_array_size(json_object_get(entry, "top_logprobs")), 2);
    json_decref(full);
    json_decref(cut);
    json_decref(s1);
    json_decref(s2);
    json_decref(s3);
    json_decref(lp);
    json_decref(clp);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* ---- bad input ------------------------------------------------------------------ */

typedef struct BadCase {
    const char *method, *path, *body;
    int status;
    const char *type;
} BadCase;

Test(server, bad_requests_table, .timeout = 120) {
    TestServer s;
    server_start(&s, "");
    /* A long greedy stream runs while the bad requests arrive: it must end
     * exactly as the same request does alone. */
    const char *long_request = "{\"prompt\": \"in flight\", \"max_tokens\": 1500, \"temperature\": 0, "
                               "\"ignore_eos\": true%s}";
    char body_alone[256], body_stream[256], cmd[1024];
    snprintf(body_alone, sizeof body_alone, long_request, "");
    snprintf(body_stream, sizeof body_stream, long_request, ", \"stream\": true");
    int alone_status;
    json_t *alone = http_json(&s, "/v1/completions", body_alone, &alone_status);
    cr_assert_eq(alone_status, 200);
    snprintf(cmd, sizeof cmd, "curl -s -N http://127.0.0.1:%d/v1/completions -d '%s' > %s/inflight.txt "
             "&& touch %s/inflight.done &", s.port, body_stream, s.dir, s.dir);
    cr_assert_eq(system(cmd), 0);
    cr_assert(wait_for_gauge(&s, "num_requests_running", 1), "the long stream never started");
    static const BadCase cases[] = {
        {"POST", "/v1/completions", "{", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "[1, 2]", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"max_tokens\": 5}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": \"5\"}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 5.5}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 0}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": -3}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"top_k\": 2.5}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"top_k\": 3.0}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"temperature\": \"hot\"}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"temperature\": -1}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"temperature\": 9}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"top_p\": 0}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"top_p\": 1.5}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"n\": 0}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"n\": true}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"presence_penalty\": 3}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"logprobs\": 99}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"stop\": 5}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"stop\": [\"\"]}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"stream\": \"yes\"}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": true}}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"seed\": \"1\"}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"logit_bias\": {\"999999999\": 10}}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"logit_bias\": {\"5\": 101}}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"logit_bias\": {\"five\": 1}}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"logit_bias\": [1]}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"min_tokens\": 9, \"max_tokens\": 3}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"min_tokens\": -1}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"truncate_prompt_tokens\": 0}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"priority\": 1}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"use_beam_search\": true}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"stream_options\": {\"continuous_usage_stats\": true}}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"functions\": [{\"name\": \"f\"}]}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": \"required\"}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": \"sometimes\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": \"function\"}]}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": {}}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": \"required\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"response_format\": {\"type\": \"json_object\"}}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"parallel_tool_calls\": 1}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"echo\": true}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"\"}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": []}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": 7}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": [1, 999999999]}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": [-1]}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": [\"a\", 3]}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 5000}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"model\": \"gpt-4\"}", 404, "not_found_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"model\": 3}", 400, "invalid_request_error"},
        {"POST", "/v1/completions", "{\"prompt\": \"\\xff\"}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{\"messages\": []}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{\"messages\": \"hi\"}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\"}]}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": 2}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}", 400, "invalid_request_error"},
        {"POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_completion_tokens\": 99999}", 400, "invalid_request_error"},
        {"POST", "/tokenize", "{\"prompt\": 3}", 400, "invalid_request_error"},
        {"POST", "/detokenize", "{\"tokens\": [\"a\"]}", 400, "invalid_request_error"},
        {"POST", "/detokenize", "{\"tokens\": [999999999]}", 400, "invalid_request_error"},
        {"GET", "/v1/completions", NULL, 405, "invalid_request_error"},
        {"POST", "/v1/models", "{}", 405, "invalid_request_error"},
        {"GET", "/v2/anything", NULL, 404, "not_found_error"},
        {"DELETE", "/health", NULL, 405, "invalid_request_error"},
    };
    size_t n = sizeof cases / sizeof cases[0];
    cr_assert_geq(n, 30);
    for (size_t i = 0; i < n; i++) {
        const BadCase *c = &cases[i];
        char *body = NULL;
        if (c->body && strstr(c->body, "\\xff")) { /* invalid UTF-8 inside a JSON string */
            body = strdup("{\"prompt\": \"\xff\xfe\"}");
        }
        HttpResult r = http(&s, c->method, c->path, body ? body : c->body, NULL);
        cr_expect_eq(r.status, c->status, "case %zu (%s %s %s): status %d, body %s", i, c->method,
                     c->path, c->body ? c->body : "", r.status, r.body);
        json_t *j = json_loads(r.body, JSON_ALLOW_NUL, NULL);
        const char *type = str(json_object_get(j, "error"), "type");
        cr_expect(type && strcmp(type, c->type) == 0, "case %zu: type %s, body %s", i,
                  type ? type : "(none)", r.body);
        cr_expect(str(json_object_get(j, "error"), "message") != NULL, "case %zu: no message", i);
        cr_expect(json_object_get(json_object_get(j, "error"), "param") != NULL);
        json_t *code = json_object_get(json_object_get(j, "error"), "code");
        cr_expect(json_is_string(code) || json_is_null(code), "case %zu: code must be a string or null", i);
        json_decref(j);
        http_free(&r);
        free(body);
    }
    /* the context-length error carries the numbers */
    HttpResult ctx = http(&s, "POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 5000}", NULL);
    cr_expect(strstr(ctx.body, "maximum context length is 2048") && strstr(ctx.body, "5001"), "%s", ctx.body);
    http_free(&ctx);
    /* and after all of them a good request still works */
    int status;
    json_t *ok = http_json(&s, "/v1/completions", "{\"prompt\": \"still alive\", \"max_tokens\": 3}", &status);
    cr_expect_eq(status, 200);
    cr_expect_eq(num(ok, "usage", "completion_tokens"), 3);
    json_decref(ok);
    /* the stream that was in flight throughout is whole and unchanged */
    char path[512];
    snprintf(path, sizeof path, "%s/inflight.done", s.dir);
    for (int i = 0; i < 2400 && access(path, F_OK) != 0; i++) usleep(25000);
    cr_assert(access(path, F_OK) == 0, "the in-flight stream never finished");
    snprintf(path, sizeof path, "%s/inflight.txt", s.dir);
    char *streamed = read_text(path);
    int done;
    json_t *events = sse_events(streamed, &done);
    cr_expect(done, "the in-flight stream ended with [DONE]");
    json_t *text = joined_stream_text(events);
    json_t *alone_text = json_object_get(json_array_get(json_object_get(alone, "choices"), 0), "text");
    cr_expect(json_equal(text, alone_text), "the stream beside the bad requests differs from the request alone "
              "(%zu vs %zu bytes)", json_string_length(text), json_string_length(alone_text));
    json_decref(text);
    json_decref(events);
    json_decref(alone);
    free(streamed);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* ---- concurrency ------------------------------------------------------------------ */

Test(server, parallel_streams_equal_sequential, .timeout = 120) {
    TestServer s;
    server_start(&s, "");
    enum { N = 32 };
    json_t *alone[N];
    for (int i = 0; i < N; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"prompt\": \"request number %d\", \"max_tokens\": %d, "
                                    "\"temperature\": 0, \"ignore_eos\": true}", i, 8 + i % 9);
        int status;
        json_t *j = http_json(&s, "/v1/completions", body, &status);
        alone[i] = json_incref(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
        json_decref(j);
    }
    /* all at once, streaming, from N curl processes */
    char script[16384];
    int off = 0;
    for (int i = 0; i < N; i++)
        off += snprintf(script + off, sizeof script - (size_t)off,
                        "curl -s -N http://127.0.0.1:%d/v1/completions -d '{\"prompt\": \"request number "
                        "%d\", \"max_tokens\": %d, \"temperature\": 0, \"ignore_eos\": true, \"stream\": "
                        "true}' > %s/par%d.txt & ",
                        s.port, i, 8 + i % 9, s.dir, i);
    snprintf(script + off, sizeof script - (size_t)off, "wait");
    cr_assert_eq(system(script), 0);
    for (int i = 0; i < N; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/par%d.txt", s.dir, i);
        char *body = read_text(path);
        int done;
        json_t *ev = sse_events(body, &done);
        json_t *text = joined_stream_text(ev);
        cr_expect(done);
        cr_expect(json_is_string(alone[i]) && json_equal(text, alone[i]),
                  "request %d differs when run with 31 others", i);
        json_decref(text);
        json_decref(ev);
        free(body);
        json_decref(alone[i]);
    }
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* Clients that hang up mid-stream (after their first events, so however
 * fast the machine, long before 1900 tokens): their requests are aborted
 * and every KV block comes back. */
Test(server, disconnects_free_the_cache, .timeout = 60) {
    TestServer s;
    server_start(&s, "");
    char script[4096];
    int off = 0;
    for (int i = 0; i < 6; i++)
        off += snprintf(script + off, sizeof script - (size_t)off,
                        "(curl -s -N http://127.0.0.1:%d/v1/completions -d '{\"prompt\": \"long %d\", "
                        "\"max_tokens\": 1900, \"ignore_eos\": true, \"stream\": true}' | head -c 400 "
                        "> /dev/null) & ",
                        s.port, i);
    snprintf(script + off, sizeof script - (size_t)off, "wait");
    cr_assert_neq(system(script), -1);
    /* generous limits: under load the aborts may take a while to land */
    int used = -1;
    bool six_aborts = false;
    for (int tries = 0; tries < 500 && (used != 0 || !six_aborts); tries++) {
        usleep(20000);
        HttpResult m = http(&s, "GET", "/metrics", NULL, NULL);
        const char *p = strstr(m.body, "nanovllm:kv_cache_blocks_used{");
        used = p ? atoi(strchr(p, '}') + 2) : -1;
        six_aborts = strstr(m.body, "finished_reason=\"abort\",model_name=\"" MODEL_NAME "\"} 6") != NULL;
        http_free(&m);
    }
    cr_expect_eq(used, 0, "KV blocks still held after the clients left");
    HttpResult m = http(&s, "GET", "/metrics", NULL, NULL);
    cr_expect(six_aborts, "%s", m.body);
    http_free(&m);
    char *log = server_log(&s);
    cr_expect(strstr(log, "client disconnected, aborted"));
    free(log);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* ---- keys, limits, shutdown, logs ---------------------------------------------------- */

Test(server, api_key, .timeout = 60) {
    TestServer s;
    server_start(&s, "--api-key sekrit --served-model-name tiny");
    const char *body = "{\"prompt\": \"x\", \"max_tokens\": 2}";
    HttpResult r = http(&s, "POST", "/v1/completions", body, NULL);
    cr_expect_eq(r.status, 401);
    cr_expect(strstr(r.body, "authentication_error"));
    http_free(&r);
    r = http(&s, "POST", "/v1/completions", body, "-H 'Authorization: Bearer sekri'");
    cr_expect_eq(r.status, 401);
    http_free(&r);
    r = http(&s, "POST", "/v1/completions", body, "-H 'Authorization: Bearer sekritt'");
    cr_expect_eq(r.status, 401);
    http_free(&r);
    r = http(&s, "POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 2, \"model\": \"tiny\"}",
             "-H 'Authorization: Bearer sekrit'");
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect(strstr(r.body, "\"model\":\"tiny\""));
    http_free(&r);
    r = http(&s, "GET", "/health", NULL, NULL);
    cr_expect_eq(r.status, 200, "/health needs no key");
    http_free(&r);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

static int exit_code(const char *cmd) {
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The container image relies on these: the key and the port from the
 * environment, and `nanovllm health` as its HEALTHCHECK. */
Test(server, environment_defaults_and_health_command, .timeout = 60) {
    const char *bin = getenv("NANOVLLM_BIN") ? getenv("NANOVLLM_BIN") : "build/nanovllm";
    TestServer s;
    setenv("NANOVLLM_API_KEY", "from-env", 1);
    server_start(&s, "");
    unsetenv("NANOVLLM_API_KEY");
    const char *body = "{\"prompt\": \"x\", \"max_tokens\": 2}";
    HttpResult r = http(&s, "POST", "/v1/completions", body, NULL);
    cr_expect_eq(r.status, 401, "NANOVLLM_API_KEY is the default --api-key");
    http_free(&r);
    r = http(&s, "POST", "/v1/completions", body, "-H 'Authorization: Bearer from-env'");
    cr_expect_eq(r.status, 200, "%s", r.body);
    http_free(&r);

    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s health --url http://127.0.0.1:%d/health", bin, s.port);
    cr_expect_eq(exit_code(cmd), 0, "health: 200 gives exit 0");
    snprintf(cmd, sizeof cmd, "NANOVLLM_PORT=%d %s health", s.port, bin);
    cr_expect_eq(exit_code(cmd), 0, "health: the port from NANOVLLM_PORT");
    snprintf(cmd, sizeof cmd, "%s health --url http://127.0.0.1:%d/nope 2>/dev/null", bin, s.port);
    cr_expect_eq(exit_code(cmd), 1, "health: a 404 is unhealthy");
    snprintf(cmd, sizeof cmd, "%s health --timeout soon 2>/dev/null", bin);
    cr_expect_eq(exit_code(cmd), 2, "health: a bad flag is a usage error");
    int port = s.port;
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
    snprintf(cmd, sizeof cmd, "%s health --url http://127.0.0.1:%d/health --timeout 1 2>/dev/null",
             bin, port);
    cr_expect_eq(exit_code(cmd), 1, "health: nobody listening is unhealthy");

    snprintf(cmd, sizeof cmd, "NANOVLLM_PORT=99999 %s serve --model " TINY_MODEL " 2>&1 | grep -q NANOVLLM_PORT",
             bin);
    cr_expect_eq(exit_code(cmd), 0, "a bad NANOVLLM_PORT is refused with its name");
}

Test(server, limits, .timeout = 60) {
    TestServer s;
    server_start(&s, "--max-body-bytes 1KiB --max-queued-requests 1 --max-num-seqs 1");
    char big[4096] = "{\"prompt\": \"";
    memset(big + strlen(big), 'a', 2000);
    strcat(big, "\"}");
    HttpResult r = http(&s, "POST", "/v1/completions", big, NULL);
    cr_expect_eq(r.status, 413, "%s", r.body);
    http_free(&r);
    /* one long request runs (max-num-seqs 1), one waits; a third is refused.
     * Each step waits for the server to reach the state the next one needs:
     * fixed sleeps raced on both slow and fast machines. */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "curl -s -o /dev/null http://127.0.0.1:%d/v1/completions -d '{\"prompt\": \"a\", "
             "\"max_tokens\": 2000, \"ignore_eos\": true}' &",
             s.port);
    cr_assert_eq(system(cmd), 0);
    cr_assert(wait_for_gauge(&s, "num_requests_running", 1), "the long request never started");
    snprintf(cmd, sizeof cmd,
             "curl -s -o /dev/null http://127.0.0.1:%d/v1/completions -d '{\"prompt\": \"b\", "
             "\"max_tokens\": 5}' &",
             s.port);
    cr_assert_eq(system(cmd), 0);
    cr_assert(wait_for_gauge(&s, "num_requests_waiting", 1), "the second request never queued");
    snprintf(cmd, sizeof cmd,
             "curl -s -D %s/h503 -o %s/b503 -w '%%{http_code}' http://127.0.0.1:%d/v1/completions "
             "-d '{\"prompt\": \"c\", \"max_tokens\": 5}' > %s/s503",
             s.dir, s.dir, s.port, s.dir);
    cr_assert_eq(system(cmd), 0);
    char path[512];
    snprintf(path, sizeof path, "%s/s503", s.dir);
    char *code = read_text(path);
    cr_expect_str_eq(code, "503");
    snprintf(path, sizeof path, "%s/h503", s.dir);
    char *headers = read_text(path);
    cr_expect(strcasestr(headers, "Retry-After: 1"), "%s", headers);
    free(code);
    free(headers);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* A request too large for the KV cache is the request's fault (400), whether
 * the engine sees it at submission or only once the cache runs out; the
 * status comes from the error's kind, not from its message. */
Test(server, kv_cache_too_small_is_a_bad_request, .timeout = 60) {
    TestServer s;
    /* 10 float32 blocks of 96 KiB */
    server_start(&s, "--block-size 16 --kv-cache-memory 960KiB --kv-cache-dtype float32");
    char ids[2048] = "{\"prompt\": [1";
    for (int i = 1; i < 200; i++) strcat(ids, ", 1");
    strcat(ids, "], \"max_tokens\": 4}");
    int status;
    json_t *submit = http_json(&s, "/v1/completions", ids, &status);
    cr_expect_eq(status, 400);
    cr_expect_str_eq(str(submit, "error.type"), "invalid_request_error");
    cr_expect(strstr(str(submit, "error.message"), "KV cache too small"), "%s", str(submit, "error.message"));
    const char *grows = "{\"prompt\": \"Hello\", \"max_tokens\": 500, \"ignore_eos\": true%s}";
    char body[256];
    snprintf(body, sizeof body, grows, "");
    json_t *whole = http_json(&s, "/v1/completions", body, &status);
    cr_expect_eq(status, 400);
    cr_expect(strstr(str(whole, "error.message"), "KV cache too small"), "%s", str(whole, "error.message"));
    snprintf(body, sizeof body, grows, ", \"stream\": true");
    HttpResult r = http(&s, "POST", "/v1/completions", body, NULL);
    int done = 0;
    json_t *events = sse_events(r.body, &done);
    json_t *last = json_array_get(events, json_array_size(events) - 1);
    cr_expect_eq(r.status, 200, "the stream had begun");
    cr_expect(done, "[DONE] ends the stream");
    cr_expect_str_eq(str(last, "error.type"), "invalid_request_error", "%s", r.body);
    cr_expect(json_is_null(json_object_get(json_object_get(last, "error"), "code")), "code: a string or null, as OpenAI's");
    json_decref(events);
    http_free(&r);
    json_decref(whole);
    json_decref(submit);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* SIGTERM while a request streams: the request still finishes, the process exits 0. */
Test(server, graceful_shutdown_and_logs, .timeout = 90) {
    TestServer s;
    server_start(&s, "--shutdown-grace 60");
    char cmd[2560];
    snprintf(cmd, sizeof cmd,
             "curl -s -N http://127.0.0.1:%d/v1/completions -d '{\"prompt\": \"bye\", \"max_tokens\": "
             "300, \"ignore_eos\": true, \"stream\": true}' > %s/last.txt & "
             /* TERM only once the stream has begun: under load curl may take a while */
             "for i in $(seq 400); do [ -s %s/last.txt ] && break; sleep 0.05; done; kill -TERM %d; wait",
             s.port, s.dir, s.dir, (int)s.pid);
    cr_assert_eq(system(cmd), 0);
    char path[512];
    snprintf(path, sizeof path, "%s/last.txt", s.dir);
    char *body = read_text(path);
    int done;
    json_t *ev = sse_events(body, &done);
    cr_expect(done, "the in-flight stream finished with [DONE]; got %.300s ... %.300s", body,
              strlen(body) > 300 ? body + strlen(body) - 300 : "");
    json_decref(ev);
    free(body);
    char *log = server_log(&s);
    cr_expect(strstr(log, "POST /v1/completions 200 prompt_tokens=1 completion_tokens=300 ttft="),
              "one line per request: %s", log);
    cr_expect(strstr(log, "SIGTERM"));
    free(log);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* ---- the official OpenAI SDK ----------------------------------------------------- */

/* SIGTERM with requests that outlast the grace period: they are aborted,
 * one running and one still queued, and the process exits 0 with nothing
 * left behind (under `make asan` a request never freed fails the exit). */
Test(server, shutdown_after_the_grace_period, .timeout = 60) {
    TestServer s;
    server_start(&s, "--shutdown-grace 0.3 --max-num-seqs 1");
    char cmd[1024];
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd,
                 "curl -s -o /dev/null http://127.0.0.1:%d/v1/completions -d '{\"prompt\": \"a\", "
                 "\"max_tokens\": 2000, \"ignore_eos\": true}' &",
                 s.port);
        cr_assert_eq(system(cmd), 0);
    }
    cr_assert(wait_for_gauge(&s, "num_requests_running", 1), "the first request never started");
    cr_assert(wait_for_gauge(&s, "num_requests_waiting", 1), "the second request never queued");
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

Test(server, openai_sdk, .timeout = 120) {
    if (access("tests/e2e/node_modules/openai/package.json", R_OK) != 0)
        cr_assert_fail("the OpenAI SDK is not installed: run scripts/setup.sh (npm ci --prefix tests/e2e)");
    TestServer s;
    server_start(&s, "--api-key sekrit --served-model-name tiny-qwen3");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "node tests/e2e/openai_sdk.mjs %d tiny-qwen3 sekrit > %s/sdk.txt 2>&1",
             s.port, s.dir);
    int rc = system(cmd);
    char path[300];
    snprintf(path, sizeof path, "%s/sdk.txt", s.dir);
    char *out = read_text(path);
    cr_expect_eq(rc, 0, "the SDK checks failed:\n%s", out);
    cr_expect(strstr(out, "ok 9"), "%s", out);
    free(out);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* ---- every example in README.md --------------------------------------------------- */

/* The fenced blocks of README.md, each with its language tag. */
typedef struct Block {
    char lang[16];
    char *text;
} Block;

static int readme_blocks(Block *blocks, int max) {
    char *readme = read_text("README.md");
    int n = 0;
    for (char *p = strstr(readme, "```"); p && n < max;) {
        char *tag = p + 3, *nl = strchr(tag, '\n');
        if (!nl) break;
        char *end = strstr(nl + 1, "\n```");
        if (!end) break;
        snprintf(blocks[n].lang, sizeof blocks[n].lang, "%.*s", (int)(nl - tag), tag);
        blocks[n].text = strndup(nl + 1, (size_t)(end - nl));
        n++;
        p = strstr(end + 4, "```");
    }
    free(readme);
    return n;
}

/* A copy of s with every "from" replaced by "to". */
static char *replace_all(const char *s, const char *from, const char *to) {
    size_t cap = strlen(s) * 2 + 64, fl = strlen(from), tl = strlen(to), o = 0;
    char *out = malloc(cap);
    for (const char *p = s; *p;) {
        if (strncmp(p, from, fl) == 0) {
            memcpy(out + o, to, tl);
            o += tl;
            p += fl;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
    return out;
}

Test(server, readme_examples, .timeout = 120) {
    TestServer s;
    server_start(&s, "");
    Block blocks[64];
    int n = readme_blocks(blocks, 64), ran = 0;
    char port[32], embed_port[32] = "";
    snprintf(port, sizeof port, "127.0.0.1:%d", s.port);
    TestServer embed_server; /* the embedding examples' server, started at the first */
    for (int b = 0; b < n; b++) {
        if (strcmp(blocks[b].lang, "sh") == 0) {
            /* logical lines: a trailing backslash or pipe continues the command */
            char *cont = replace_all(blocks[b].text, "\\\n", " ");
            char *joined = replace_all(cont, "|\n", "| ");
            free(cont);
            for (char *line = strtok(joined, "\n"); line; line = strtok(NULL, "\n")) {
                bool curl = strncmp(line, "curl ", 5) == 0;
                bool offline = strncmp(line, "build/nanovllm generate", 23) == 0 ||
                               strstr(line, "build/nanovllm tokenize") != NULL;
                if (!curl && !offline) continue; /* set-up, make, docker: not examples to run here */
                bool embeddings = curl && strstr(line, "/v1/embeddings");
                if (embeddings && !embed_port[0]) {
                    server_start(&embed_server, "--model tests/fixtures/tiny-qwen3-embedding");
                    snprintf(embed_port, sizeof embed_port, "127.0.0.1:%d", embed_server.port);
                }
                char *cmd = replace_all(line, "127.0.0.1:8000", embeddings ? embed_port : port);
                char *quiet = offline ? replace_all(cmd, " --json", " --json --quiet") : strdup(cmd);
                char full[4096], out_path[300];
                snprintf(out_path, sizeof out_path, "%s/example.out", s.dir);
                snprintf(full, sizeof full, "( %s ) < /dev/null > %s 2>/dev/null", quiet, out_path);
                cr_expect_eq(system(full), 0, "README example failed: %s", line);
                char *out = read_text(out_path);
                if (embeddings) {
                    cr_expect(strstr(out, "\"object\":\"embedding\""), "no embedding from: %s\n%s", line, out);
                } else if (curl && strstr(line, "/v1/responses")) {
                    cr_expect(strstr(out, "\"object\":\"response\""), "no response from: %s\n%s", line, out);
                } else if (curl) {
                    cr_expect(strstr(out, "\"choices\""), "no choices from: %s\n%s", line, out);
                    if (strstr(line, "\"stream\": true")) cr_expect(strstr(out, "data: [DONE]"));
                }
                /* an example followed by a json block prints exactly that */
                if (offline && b + 1 < n && strcmp(blocks[b + 1].lang, "json") == 0 &&
                    strstr(line, "generate")) {
                    size_t ol = strlen(out);
                    while (ol && out[ol - 1] == '\n') out[--ol] = '\0';
                    char *want = strdup(blocks[b + 1].text);
                    size_t wl = strlen(want);
                    while (wl && want[wl - 1] == '\n') want[--wl] = '\0';
                    cr_expect_str_eq(out, want, "README's output of: %s", line);
                    free(want);
                }
                free(out);
                free(cmd);
                free(quiet);
                ran++;
            }
            free(joined);
        } else if (strcmp(blocks[b].lang, "js") == 0) {
            char *code = replace_all(blocks[b].text, "127.0.0.1:8000", port);
            char path[128], full[512];
            snprintf(path, sizeof path, "tests/e2e/readme-example-%d.mjs", (int)getpid());
            write_text(path, code);
            snprintf(full, sizeof full, "node %s > %s/js.out 2>&1", path, s.dir);
            int rc = system(full);
            unlink(path);
            char out_path[300];
            snprintf(out_path, sizeof out_path, "%s/js.out", s.dir);
            char *out = read_text(out_path);
            cr_expect_eq(rc, 0, "README's SDK example failed:\n%s", out);
            cr_expect_gt(strlen(out), 0);
            free(out);
            free(code);
            ran++;
        }
        free(blocks[b].text);
    }
    cr_expect_geq(ran, 5, "README examples found and run: %d", ran);
    cr_log_info("ran %d README examples", ran);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
    if (embed_port[0]) cr_expect_eq(server_stop(&embed_server, SIGTERM), 0);
}

/* A model folder's generation_config.json sets the defaults of requests
 * that leave sampling fields out (vLLM's behaviour): temperature 0 there
 * makes such requests greedy. */
Test(server, generation_config_defaults, .timeout = 60) {
    const char *files[] = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"};
    char *dir = tiny_model_with_generation_config(files, 4, "{\"temperature\": 0.0, \"top_p\": 0.5}");
    char extra[1500];
    snprintf(extra, sizeof extra, "--model %s --served-model-name g", dir);
    TestServer s;
    server_start(&s, extra);
    int status;
    json_t *plain = http_json(&s, "/v1/completions", "{\"prompt\": \"Defaults\", \"max_tokens\": 10}", &status);
    json_t *greedy = http_json(&s, "/v1/completions", "{\"prompt\": \"Defaults\", \"max_tokens\": 10, "
                                                      "\"temperature\": 0}", &status);
    cr_expect_str_eq(str(plain, "choices.0.text"), str(greedy, "choices.0.text"));
    json_decref(plain);
    json_decref(greedy);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
    rm_rf(dir);
    free(dir);
}
