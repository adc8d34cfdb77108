/*
 * test_server_responses.c - the Responses API (POST /v1/responses, GET and
 * DELETE /v1/responses/{id}) through the real `nanovllm serve` on the tiny
 * random-weight model.
 *
 * The conformance checks: every streamed event named on its "event:" line
 * as in its "type", numbered 0, 1, 2, ... in order, items opened, filled
 * and closed in OpenAI's order, and the items assembled from the deltas
 * equal to the final response's output and to the non-streamed body's;
 * the same request through chat and through Responses producing the same
 * tokens with the same seed; tool calls and both ways of continuing after
 * one (previous_response_id, and the items passed back) rendering the same
 * prompt; the store's limits; reasoning.effort; and a 400 naming each
 * thing that cannot be honoured. (null for every optional field:
 * test_server_nulls.c.)
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server_helpers.h"

/* Forces reasoning then text (the default parser splits them). */
#define THINK_THEN_TEXT "\"chat_template_kwargs\": {\"enable_thinking\": false}, " \
                        "\"guided_regex\": \"<think>\\\\nhmm\\\\n</think>\\\\n\\\\nyes\""

#define WEATHER_TOOL "{\"type\": \"function\", \"name\": \"get_weather\", \"description\": \"the weather\", " \
                     "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", " \
                     "\"enum\": [\"Paris\", \"Oslo\"]}}, \"required\": [\"city\"]}}"

static json_t *post(const TestServer *s, const char *body, int want_status) {
    int status;
    json_t *r = http_json(s, "/v1/responses", body, &status);
    cr_assert_eq(status, want_status, "%s -> %d: %s", body, status, r ? json_dumps(r, 0) : "(not JSON)");
    return r;
}

static const char *str(const json_t *o, const char *key) { return json_string_value(json_object_get(o, key)); }

/* An output list without its generated ids, for comparing two runs. */
static json_t *without_ids(const json_t *output) {
    json_t *copy = json_deep_copy(output);
    size_t i;
    json_t *item;
    json_array_foreach(copy, i, item) {
        json_object_del(item, "id");
        json_object_del(item, "call_id");
    }
    return copy;
}

static char *text_of(const json_t *response, const char *item_type) {
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(response, "output"), i, item)
        if (strcmp(str(item, "type"), item_type) == 0)
            return strdup(str(json_array_get(json_object_get(item, "content"), 0), "text"));
    return NULL;
}

/* ---- the stream's shape ------------------------------------------------------------------------- */

/* Parses "event: T\ndata: {...}\n\n" blocks, checking each T against the
 * data's type and the numbering; returns the events. */
static json_t *typed_events(const char *body) {
    json_t *events = json_array();
    const char *p = body;
    long long expect = 0;
    while (*p) {
        cr_assert(strncmp(p, "event: ", 7) == 0, "a block not starting with 'event: ': %.80s", p);
        const char *nl = strchr(p, '\n');
        cr_assert(nl && strncmp(nl + 1, "data: ", 6) == 0, "an event line without its data line");
        char type[96];
        snprintf(type, sizeof type, "%.*s", (int)(nl - p - 7), p + 7);
        const char *data = nl + 7, *end = strstr(data, "\n\n");
        cr_assert(end, "an event without its blank line");
        json_t *e = json_loadb(data, (size_t)(end - data), 0, NULL);
        cr_assert(e, "an event's data is not JSON: %.*s", (int)(end - data), data);
        cr_expect_str_eq(str(e, "type"), type);
        cr_expect_eq(json_integer_value(json_object_get(e, "sequence_number")), expect, "sequence_number of %s", type);
        expect++;
        json_array_append_new(events, e);
        p = end + 2;
    }
    cr_assert(strstr(body, "[DONE]") == NULL, "Responses streams end with their last event, not [DONE]");
    return events;
}

/* Replays the events as a client would, checking their order; returns the
 * output the deltas assembled, and *final the last event's response. */
static json_t *assemble(const json_t *events, json_t **final) {
    json_t *output = json_array();
    cr_assert(json_array_size(events) >= 3);
    cr_expect_str_eq(str(json_array_get(events, 0), "type"), "response.created");
    cr_expect_str_eq(str(json_array_get(events, 1), "type"), "response.in_progress");
    cr_expect_str_eq(str(json_object_get(json_array_get(events, 0), "response"), "status"), "in_progress");
    json_t *open = NULL; /* the item being written */
    enum { IDLE, ITEM, PART } state = IDLE;
    size_t i;
    json_t *e;
    *final = NULL;
    json_array_foreach(events, i, e) {
        if (i < 2) continue;
        const char *type = str(e, "type");
        cr_assert(!*final, "an event after the response ended: %s", type);
        if (strcmp(type, "response.completed") == 0 || strcmp(type, "response.incomplete") == 0) {
            cr_expect_eq(state, IDLE, "the response ended with an item open");
            *final = json_object_get(e, "response");
            continue;
        }
        int index = (int)json_integer_value(json_object_get(e, "output_index"));
        if (strcmp(type, "response.output_item.added") == 0) {
            cr_assert_eq(state, IDLE, "an item opened inside another");
            cr_expect_eq(index, (int)json_array_size(output));
            open = json_deep_copy(json_object_get(e, "item"));
            cr_expect_str_eq(str(open, "status"), "in_progress");
            state = ITEM;
            continue;
        }
        cr_assert(open, "%s outside an item", type);
        cr_expect_eq(index, (int)json_array_size(output), "%s: output_index", type);
        if (strcmp(type, "response.output_item.done") == 0) {
            cr_expect_eq(state, ITEM, "an item closed with its part open");
            json_t *item = json_object_get(e, "item");
            cr_expect(json_equal(json_object_get(item, "content"), json_object_get(open, "content")) ||
                          json_equal(json_object_get(item, "arguments"), json_object_get(open, "arguments")),
                      "output_item.done differs from what the deltas built");
            json_array_append(output, item);
            json_decref(open);
            open = NULL;
            state = IDLE;
        } else if (strcmp(type, "response.content_part.added") == 0) {
            cr_expect_eq(state, ITEM);
            json_array_append(json_object_get(open, "content"), json_object_get(e, "part"));
            state = PART;
        } else if (strcmp(type, "response.content_part.done") == 0) {
            cr_expect_eq(state, PART);
            cr_expect(json_equal(json_object_get(e, "part"), json_array_get(json_object_get(open, "content"), 0)));
            state = ITEM;
        } else if (strstr(type, "_text.delta")) {
            cr_expect_eq(state, PART);
            json_t *part = json_array_get(json_object_get(open, "content"), 0);
            cr_expect(strstr(type, str(part, "type")), "%s into a %s part", type, str(part, "type"));
            char *text = NULL;
            cr_assert(asprintf(&text, "%s%s", str(part, "text"), str(e, "delta")) > 0);
            json_object_set_new(part, "text", json_string(text));
            free(text);
            cr_expect_str_eq(str(e, "item_id"), str(open, "id"));
        } else if (strstr(type, "_text.done")) {
            json_t *part = json_array_get(json_object_get(open, "content"), 0);
            cr_expect_str_eq(str(e, "text"), str(part, "text"), "%s: text differs from its deltas", type);
        } else if (strcmp(type, "response.function_call_arguments.delta") == 0) {
            char *args = NULL;
            cr_assert(asprintf(&args, "%s%s", str(open, "arguments"), str(e, "delta")) > 0);
            json_object_set_new(open, "arguments", json_string(args));
            free(args);
        } else if (strcmp(type, "response.function_call_arguments.done") == 0) {
            cr_expect_str_eq(str(e, "arguments"), str(open, "arguments"));
            json_object_set_new(open, "status", json_string("completed"));
        } else {
            cr_assert_fail("an unexpected event %s", type);
        }
    }
    cr_assert(*final, "the stream never ended with response.completed or response.incomplete");
    return output;
}

static void stream_matches_body(const TestServer *s, const char *fields) {
    char body[2048];
    snprintf(body, sizeof body, "{%s, \"stream\": true}", fields);
    HttpResult h = http(s, "POST", "/v1/responses", body, NULL);
    cr_assert_eq(h.status, 200, "%s", h.body);
    cr_expect(strstr(h.headers, "text/event-stream"));
    json_t *events = typed_events(h.body), *final;
    json_t *assembled = assemble(events, &final);
    cr_expect(json_equal(assembled, json_object_get(final, "output")), "the deltas assemble to another output");
    snprintf(body, sizeof body, "{%s}", fields);
    json_t *whole = post(s, body, 200);
    json_t *a = without_ids(assembled), *b = without_ids(json_object_get(whole, "output"));
    cr_expect(json_equal(a, b), "stream and body differ:\n%s\n%s", json_dumps(a, 0), json_dumps(b, 0));
    cr_expect(json_equal(json_object_get(final, "usage"), json_object_get(whole, "usage")));
    cr_expect_str_eq(str(final, "status"), str(whole, "status"));
    json_decref(a);
    json_decref(b);
    json_decref(whole);
    json_decref(assembled);
    json_decref(events);
    http_free(&h);
}

Test(server_responses, streams_assemble_to_the_body, .timeout = 300) {
    TestServer s;
    server_start(&s, "");
    stream_matches_body(&s, "\"input\": \"hi\", \"max_output_tokens\": 6, \"temperature\": 0");
    stream_matches_body(&s, "\"input\": \"hi\", \"max_output_tokens\": 40, \"temperature\": 0, " THINK_THEN_TEXT);
    stream_matches_body(&s, "\"input\": \"weather?\", \"max_output_tokens\": 80, \"temperature\": 0, "
                            "\"reasoning\": {\"effort\": \"none\"}, \"tool_choice\": \"required\", "
                            "\"tools\": [" WEATHER_TOOL "]");
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* ---- the items and their text ------------------------------------------------------------------- */

Test(server_responses, reasoning_text_and_usage, .timeout = 120) {
    TestServer s;
    server_start(&s, "");
    json_t *r = post(&s, "{\"input\": \"hi\", \"max_output_tokens\": 40, \"temperature\": 0, " THINK_THEN_TEXT "}", 200);
    cr_expect_str_eq(str(r, "object"), "response");
    cr_expect_str_eq(str(r, "status"), "completed");
    cr_expect(strncmp(str(r, "id"), "resp_", 5) == 0);
    json_t *out = json_object_get(r, "output");
    cr_assert_eq(json_array_size(out), 2, "%s", json_dumps(out, 0));
    cr_expect_str_eq(str(json_array_get(out, 0), "type"), "reasoning");
    cr_expect_str_eq(str(json_array_get(out, 1), "type"), "message");
    char *thought = text_of(r, "reasoning"), *said = text_of(r, "message");
    cr_expect(strstr(thought, "hmm"), "%s", thought);
    cr_expect_str_eq(said, "yes");
    json_t *u = json_object_get(r, "usage");
    long long in = json_integer_value(json_object_get(u, "input_tokens")),
              out_tokens = json_integer_value(json_object_get(u, "output_tokens")),
              reasoning = json_integer_value(json_object_get(json_object_get(u, "output_tokens_details"), "reasoning_tokens"));
    cr_expect_gt(in, 0);
    cr_expect_eq(json_integer_value(json_object_get(u, "total_tokens")), in + out_tokens);
    cr_expect(reasoning > 0 && reasoning < out_tokens, "reasoning_tokens %lld of %lld", reasoning, out_tokens);
    free(thought);
    free(said);
    json_decref(r);
    /* max_output_tokens: incomplete, and says why */
    r = post(&s, "{\"input\": \"hi\", \"max_output_tokens\": 3, \"temperature\": 0}", 200);
    cr_expect_str_eq(str(r, "status"), "incomplete");
    cr_expect_str_eq(str(json_object_get(r, "incomplete_details"), "reason"), "max_output_tokens");
    cr_expect_str_eq(str(json_array_get(json_object_get(r, "output"), 0), "status"), "incomplete");
    json_decref(r);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* The same conversation through chat and through Responses: the same tokens. */
Test(server_responses, same_tokens_as_chat, .timeout = 120) {
    TestServer s;
    server_start(&s, "");
    int status;
    json_t *chat = http_json(&s, "/v1/chat/completions",
                             "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
                             "\"content\": \"Tell me a story\"}], \"max_tokens\": 24, \"temperature\": 0.9, \"seed\": 7, "
                             "\"chat_template_kwargs\": {\"enable_thinking\": false}}", &status);
    cr_assert_eq(status, 200);
    json_t *resp = post(&s, "{\"instructions\": \"Be brief.\", \"input\": [{\"role\": \"user\", \"content\": "
                            "[{\"type\": \"input_text\", \"text\": \"Tell me a story\"}]}], \"max_output_tokens\": 24, "
                            "\"temperature\": 0.9, \"seed\": 7, \"reasoning\": {\"effort\": \"none\"}}", 200);
    json_t *msg = json_object_get(json_array_get(json_object_get(chat, "choices"), 0), "message");
    char *text = text_of(resp, "message");
    cr_expect_str_eq(text, str(msg, "content"));
    json_t *cu = json_object_get(chat, "usage"), *ru = json_object_get(resp, "usage");
    cr_expect_eq(json_integer_value(json_object_get(cu, "prompt_tokens")), json_integer_value(json_object_get(ru, "input_tokens")));
    cr_expect_eq(json_integer_value(json_object_get(cu, "completion_tokens")), json_integer_value(json_object_get(ru, "output_tokens")));
    free(text);
    json_decref(chat);
    json_decref(resp);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* A forced call, then both ways of continuing: previous_response_id and
 * the items passed back render the same prompt. */
Test(server_responses, tool_call_and_two_continuations, .timeout = 120) {
    TestServer s;
    server_start(&s, "");
    json_t *first = post(&s, "{\"input\": \"weather in Paris?\", \"max_output_tokens\": 80, \"temperature\": 0, "
                             "\"reasoning\": {\"effort\": \"none\"}, \"tool_choice\": {\"type\": \"function\", "
                             "\"name\": \"get_weather\"}, \"parallel_tool_calls\": false, \"tools\": [" WEATHER_TOOL "]}", 200);
    json_t *call = json_array_get(json_object_get(first, "output"), 0);
    cr_assert_str_eq(str(call, "type"), "function_call", "%s", json_dumps(first, 0));
    cr_expect_str_eq(str(call, "name"), "get_weather");
    cr_expect(strncmp(str(call, "call_id"), "call_", 5) == 0);
    json_t *args = json_loads(str(call, "arguments"), 0, NULL);
    cr_assert(args, "arguments are not JSON: %s", str(call, "arguments"));
    const char *city = str(args, "city");
    cr_expect(city && (strcmp(city, "Paris") == 0 || strcmp(city, "Oslo") == 0));
    cr_expect(json_is_false(json_object_get(first, "parallel_tool_calls")));

    char body[4096];
    snprintf(body, sizeof body, "{\"previous_response_id\": \"%s\", \"input\": [{\"type\": \"function_call_output\", "
             "\"call_id\": \"%s\", \"output\": \"Sunny\"}], \"max_output_tokens\": 4, \"temperature\": 0, "
             "\"reasoning\": {\"effort\": \"none\"}, \"tools\": [" WEATHER_TOOL "]}", str(first, "id"), str(call, "call_id"));
    json_t *by_id = post(&s, body, 200);
    cr_expect_str_eq(str(by_id, "previous_response_id"), str(first, "id"));
    char *call_text = json_dumps(call, 0);
    snprintf(body, sizeof body, "{\"input\": [{\"role\": \"user\", \"content\": \"weather in Paris?\"}, %s, "
             "{\"type\": \"function_call_output\", \"call_id\": \"%s\", \"output\": [{\"type\": \"input_text\", "
             "\"text\": \"Sunny\"}]}], \"max_output_tokens\": 4, \"temperature\": 0, \"store\": false, "
             "\"reasoning\": {\"effort\": \"none\"}, \"tools\": [" WEATHER_TOOL "]}", call_text, str(call, "call_id"));
    json_t *by_items = post(&s, body, 200);
    json_t *u1 = json_object_get(by_id, "usage"), *u2 = json_object_get(by_items, "usage");
    cr_expect_eq(json_integer_value(json_object_get(u1, "input_tokens")), json_integer_value(json_object_get(u2, "input_tokens")));
    char *t1 = text_of(by_id, "message"), *t2 = text_of(by_items, "message");
    cr_expect_str_eq(t1, t2);
    cr_expect(json_is_false(json_object_get(by_items, "store")));
    free(t1);
    free(t2);
    free(call_text);
    json_decref(args);
    json_decref(first);
    json_decref(by_id);
    json_decref(by_items);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

Test(server_responses, json_schema_format, .timeout = 120) {
    TestServer s;
    server_start(&s, "");
    json_t *r = post(&s, "{\"input\": \"a color\", \"max_output_tokens\": 60, \"temperature\": 0, \"reasoning\": "
                         "{\"effort\": \"minimal\"}, \"text\": {\"format\": {\"type\": \"json_schema\", \"name\": \"c\", "
                         "\"strict\": true, \"schema\": {\"type\": \"object\", \"properties\": {\"color\": {\"enum\": "
                         "[\"red\", \"blue\"]}}, \"required\": [\"color\"], \"additionalProperties\": false}}}}", 200);
    char *text = text_of(r, "message");
    json_t *parsed = json_loads(text, 0, NULL);
    cr_assert(parsed, "not JSON: %s", text);
    const char *color = str(parsed, "color");
    cr_expect(color && (strcmp(color, "red") == 0 || strcmp(color, "blue") == 0), "%s", text);
    cr_expect_str_eq(str(json_object_get(json_object_get(r, "text"), "format"), "type"), "json_schema");
    free(text);
    json_decref(parsed);
    json_decref(r);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* ---- the store ----------------------------------------------------------------------------------- */

static char *new_response(const TestServer *s, const char *extra) {
    char body[256];
    snprintf(body, sizeof body, "{\"input\": \"hi\", \"max_output_tokens\": 2%s}", extra);
    json_t *r = post(s, body, 200);
    char *id = strdup(str(r, "id"));
    json_decref(r);
    return id;
}

static int get_status(const TestServer *s, const char *method, const char *id) {
    char path[128];
    snprintf(path, sizeof path, "/v1/responses/%s", id);
    HttpResult h = http(s, method, path, NULL, NULL);
    int status = h.status;
    if (status == 404) cr_expect(strstr(h.body, "not found"), "%s", h.body);
    http_free(&h);
    return status;
}

Test(server_responses, store_limits_retrieve_and_delete, .timeout = 120) {
    TestServer s;
    server_start(&s, "--responses-store-entries 2");
    char *a = new_response(&s, ""), *b = new_response(&s, ""), *c = new_response(&s, "");
    cr_expect_eq(get_status(&s, "GET", a), 404, "the oldest entry was not evicted");
    cr_expect_eq(get_status(&s, "GET", b), 200);
    cr_expect_eq(get_status(&s, "GET", c), 200);
    cr_expect_eq(get_status(&s, "DELETE", c), 200);
    cr_expect_eq(get_status(&s, "GET", c), 404);
    cr_expect_eq(get_status(&s, "DELETE", c), 404);
    char *unstored = new_response(&s, ", \"store\": false");
    cr_expect_eq(get_status(&s, "GET", unstored), 404);
    char body[256];
    snprintf(body, sizeof body, "{\"previous_response_id\": \"%s\", \"input\": \"more\"}", a);
    json_t *r = post(&s, body, 404);
    json_t *err = json_object_get(r, "error");
    cr_expect_str_eq(str(err, "code"), "previous_response_not_found");
    cr_expect_str_eq(str(err, "param"), "previous_response_id");
    json_decref(r);
    HttpResult h = http(&s, "PUT", "/v1/responses/x", "{}", NULL);
    cr_expect_eq(h.status, 405);
    cr_expect(strstr(h.headers, "Allow: GET, DELETE"), "%s", h.headers);
    http_free(&h);
    free(a);
    free(b);
    free(c);
    free(unstored);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);

    server_start(&s, "--responses-store-ttl 1");
    a = new_response(&s, "");
    cr_expect_eq(get_status(&s, "GET", a), 200);
    usleep(1500 * 1000); /* the limit under test is a time */
    cr_expect_eq(get_status(&s, "GET", a), 404, "an expired response was still served");
    free(a);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);

    server_start(&s, "--responses-store-bytes 1500");
    a = new_response(&s, ""); /* each about 1 kB with its conversation: one fits */
    b = new_response(&s, "");
    cr_expect_eq(get_status(&s, "GET", a), 404, "the byte limit kept two responses");
    cr_expect_eq(get_status(&s, "GET", b), 200, "the byte limit kept none");
    free(a);
    free(b);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* ---- reasoning.effort ---------------------------------------------------------------------------- */

static long long input_tokens(const TestServer *s, const char *fields) {
    char body[512];
    snprintf(body, sizeof body, "{\"input\": \"hi\", \"max_output_tokens\": 1%s}", fields);
    json_t *r = post(s, body, 200);
    long long n = json_integer_value(json_object_get(json_object_get(r, "usage"), "input_tokens"));
    json_decref(r);
    return n;
}

Test(server_responses, reasoning_effort_switches_thinking, .timeout = 120) {
    TestServer s;
    server_start(&s, "");
    long long thinking = input_tokens(&s, ""), off = input_tokens(&s, ", \"reasoning\": {\"effort\": \"none\"}");
    /* Qwen3's template writes an empty <think></think> when thinking is off */
    cr_expect_gt(off, thinking);
    cr_expect_eq(input_tokens(&s, ", \"reasoning\": {\"effort\": \"minimal\"}"), off);
    cr_expect_eq(input_tokens(&s, ", \"chat_template_kwargs\": {\"enable_thinking\": false}"), off);
    cr_expect_eq(input_tokens(&s, ", \"reasoning\": {\"effort\": \"high\", \"summary\": \"auto\"}"), thinking);
    json_t *r = post(&s, "{\"input\": \"hi\", \"reasoning\": {\"effort\": \"high\"}, \"chat_template_kwargs\": "
                         "{\"enable_thinking\": false}}", 400);
    cr_expect_str_eq(str(json_object_get(r, "error"), "param"), "reasoning.effort");
    json_decref(r);
    /* chat's reasoning_effort (the Agents SDK sends it over chat completions) means the same */
    int status;
    r = http_json(&s, "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                                              "\"max_tokens\": 1, \"reasoning_effort\": \"none\"}", &status);
    cr_expect_eq(status, 200);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(r, "usage"), "prompt_tokens")), off);
    json_decref(r);
    r = http_json(&s, "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                                              "\"max_tokens\": 1, \"reasoning_effort\": \"lots\"}", &status);
    cr_expect_eq(status, 400);
    json_decref(r);
    r = http_json(&s, "/v1/completions", "{\"prompt\": \"hi\", \"max_tokens\": 1, \"reasoning_effort\": \"none\"}", &status);
    cr_expect_eq(status, 400);
    cr_expect_str_eq(str(json_object_get(r, "error"), "param"), "reasoning_effort");
    json_decref(r);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* ---- what cannot be honoured -------------------------------------------------------------- */

Test(server_responses, refusals_name_the_field, .timeout = 120) {
    TestServer s;
    server_start(&s, "");
    static const struct {
        const char *body, *param;
    } cases[] = {
        {"{}", "input"},
        {"{\"input\": []}", "input"},
        {"{\"input\": 3}", "input"},
        {"{\"input\": \"hi\", \"background\": true}", "background"},
        {"{\"input\": \"hi\", \"tools\": [{\"type\": \"web_search\"}]}", "tools"},
        {"{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_image\", \"image_url\": \"x\"}]}]}", "input"},
        {"{\"input\": [{\"type\": \"item_reference\", \"id\": \"x\"}]}", "input"},
        {"{\"input\": [{\"role\": \"robot\", \"content\": \"x\"}]}", "input"},
        {"{\"input\": [{\"type\": \"function_call\", \"name\": \"f\"}]}", "input"},
        {"{\"input\": \"hi\", \"include\": [\"reasoning.encrypted_content\"]}", "include"},
        {"{\"input\": \"hi\", \"truncation\": \"auto\"}", "truncation"},
        {"{\"input\": \"hi\", \"reasoning\": {\"summary\": \"detailed\"}}", "reasoning.summary"},
        {"{\"input\": \"hi\", \"reasoning\": {\"effort\": \"max\"}}", "reasoning.effort"},
        {"{\"input\": \"hi\", \"text\": {\"format\": {\"type\": \"xml\"}}}", "text.format"},
        {"{\"input\": \"hi\", \"text\": {\"format\": {\"type\": \"json_schema\", \"name\": \"x\"}}}", "text.format"},
        {"{\"input\": \"hi\", \"tool_choice\": {\"type\": \"file_search\"}}", "tool_choice"},
        {"{\"input\": \"hi\", \"max_output_tokens\": 0}", "max_output_tokens"},
        {"{\"input\": \"hi\", \"store\": \"yes\"}", "store"},
        {"{\"input\": \"hi\", \"top_logprobs\": 2}", "top_logprobs"},
        {"{\"input\": \"hi\", \"conversation\": \"conv_1\"}", "conversation"},
        {"{\"input\": \"hi\", \"metadata\": {\"k\": 1}}", "metadata"},
        {"{\"input\": \"hi\", \"temperature\": 9}", "temperature"},
        {"{\"input\": \"hi\", \"text\": {\"format\": {\"type\": \"json_schema\", \"name\": \"x\", \"schema\": 5}}}", "text.format"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int status;
        json_t *r = http_json(&s, "/v1/responses", cases[i].body, &status);
        cr_expect_eq(status, 400, "%s -> %d", cases[i].body, status);
        cr_expect_str_eq(str(json_object_get(r, "error"), "param"), cases[i].param, "%s", cases[i].body);
        json_decref(r);
    }
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}
