/*
 * test_server_chat_template.c - chat templates through the HTTP server:
 * --chat-template with a real template (Qwen3-Coder's, XML tool calls)
 * gives the fixture's exact prompt on /tokenize and /v1/chat/completions;
 * a template that raises is a 400 with its message; a request's own
 * chat_template needs --trust-request-chat-template; a broken template
 * stops the server at start-up with the reason; --default-chat-template-kwargs
 * sits under a request's own kwargs, and a bad one stops the start.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>

#include "helpers.h"
#include "server_helpers.h"

#define CODER "tests/fixtures/chat-templates/Qwen3-Coder"
#define GEMMA "tests/fixtures/chat-templates/google-gemma-2-2b-it"

static json_t *fixture_case(const char *folder, const char *tag) {
    char path[512];
    snprintf(path, sizeof path, "%s/cases.jsonl", folder);
    json_t *rows = jsonl_load(path), *found = NULL;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
        if (strcmp(json_string_value(json_object_get(row, "tag")), tag) == 0) found = json_incref(row);
    json_decref(rows);
    cr_assert(found, "%s: no case %s", folder, tag);
    return found;
}

/* The request body of a fixture case, with more fields from extra (JSON). */
static char *case_body(json_t *c, const char *extra) {
    json_t *req = json_loads(extra, 0, NULL);
    cr_assert(req);
    json_object_set(req, "messages", json_object_get(c, "messages"));
    json_object_set(req, "add_generation_prompt", json_object_get(c, "add_generation_prompt"));
    json_object_set(req, "chat_template_kwargs", json_object_get(c, "kwargs"));
    if (json_object_get(c, "tools")) json_object_set(req, "tools", json_object_get(c, "tools"));
    char *body = json_dumps(req, 0);
    json_decref(req);
    return body;
}

Test(server_chat_template, fixture_prompts_over_http, .timeout = 120) {
    setenv("SOURCE_DATE_EPOCH", "1722002400", 1);
    TestServer s;
    server_start(&s, "--chat-template " CODER "/template.jinja --trust-request-chat-template");
    Tokenizer *tok = tiny_tokenizer();
    static const char *const tags[] = {"user", "system-user", "tools", "tool-call-dict-empty-content",
                                       "multi-turn", "thinking-off"};
    for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++) {
        json_t *c = fixture_case(CODER, tags[i]);
        const char *want = json_string_value(json_object_get(c, "expected"));
        cr_assert(want, "%s raises in transformers", tags[i]);
        int32_t *ids;
        size_t n;
        Error err = {0};
        cr_assert_eq(tokenizer_encode(tok, want, strlen(want), &ids, &n, &err), 0, "%s", err.msg);
        char *body = case_body(c, "{}");
        int status;
        json_t *got = http_json(&s, "/tokenize", body, &status);
        cr_expect_eq(status, 200, "%s", tags[i]);
        json_t *tokens = json_object_get(got, "tokens");
        bool same = json_array_size(tokens) == n;
        for (size_t k = 0; same && k < n; k++)
            same = json_integer_value(json_array_get(tokens, k)) == ids[k];
        cr_expect(same, "%s: /tokenize differs from the fixture's prompt", tags[i]);
        json_decref(got);
        free(body);
        /* The chat endpoint renders the same prompt. */
        body = case_body(c, "{\"max_tokens\": 1}");
        got = http_json(&s, "/v1/chat/completions", body, &status);
        cr_expect_eq(status, 200, "%s", tags[i]);
        cr_expect_eq(json_integer_value(json_object_get(json_object_get(got, "usage"), "prompt_tokens")),
                     (json_int_t)n, "%s", tags[i]);
        json_decref(got);
        free(body);
        free(ids);
        json_decref(c);
    }
    /* A trusted request's own template: Gemma's refuses a system message,
     * and the client gets its words in a 400. */
    char *gemma = read_text(GEMMA "/template.jinja");
    json_t *c = fixture_case(GEMMA, "system-user");
    json_t *extra = json_pack("{s:s}", "chat_template", gemma);
    char *extra_text = json_dumps(extra, 0);
    char *body = case_body(c, extra_text);
    int status;
    json_t *got = http_json(&s, "/v1/chat/completions", body, &status);
    cr_expect_eq(status, 400);
    const char *msg = json_string_value(json_object_get(json_object_get(got, "error"), "message"));
    cr_expect(msg && strcmp(msg, "System role not supported") == 0, "%s", msg);
    json_decref(got);
    free(body);
    free(extra_text);
    json_decref(extra);
    json_decref(c);
    free(gemma);
    /* A template that fails is a 400 too, and the server goes on serving. */
    got = http_json(&s, "/v1/chat/completions",
                    "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template\": "
                    "\"{{ messages[0].nope.x }}\", \"max_tokens\": 1}", &status);
    cr_expect_eq(status, 400);
    msg = json_string_value(json_object_get(json_object_get(got, "error"), "message"));
    cr_expect(msg && strstr(msg, "the chat template failed: line 1"), "%s", msg);
    json_decref(got);
    got = http_json(&s, "/v1/chat/completions",
                    "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 1}", &status);
    cr_expect_eq(status, 200);
    json_decref(got);
    tokenizer_free(tok);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

Test(server_chat_template, request_templates_need_trust, .timeout = 60) {
    TestServer s;
    server_start(&s, "");
    int status;
    json_t *got = http_json(&s, "/v1/chat/completions",
                            "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                            "\"chat_template\": \"{{ 'pwned' }}\"}", &status);
    cr_expect_eq(status, 400);
    json_t *error = json_object_get(got, "error");
    cr_expect_str_eq(json_string_value(json_object_get(error, "param")), "chat_template");
    cr_expect(strstr(json_string_value(json_object_get(error, "message")), "--trust-request-chat-template"));
    json_decref(got);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

Test(server_chat_template, a_broken_template_stops_the_start, .timeout = 60) {
    char *out, *err;
    int rc = run_nanovllm("serve --model " TINY_MODEL " --port 0 --chat-template '{% if %}'", &out, &err);
    cr_expect_eq(rc, 1);
    cr_expect(strstr(err, "nanovllm serve: the chat template: line 1"), "%s", err);
    free(out);
    free(err);
    rc = run_nanovllm("serve --model " TINY_MODEL " --chat-template /no/such/file.jinja", &out, &err);
    cr_expect_eq(rc, 2);
    cr_expect(strstr(err, "--chat-template: cannot open '/no/such/file.jinja'"), "%s", err);
    free(out);
    free(err);
}

/* The prompt ids of a one-message chat with more fields (JSON members). */
static json_t *chat_ids(const TestServer *s, const char *fields) {
    char body[512];
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]%s%s}", *fields ? ", " : "",
             fields);
    int status;
    json_t *got = http_json(s, "/tokenize", body, &status);
    cr_assert_eq(status, 200, "%s", body);
    json_t *ids = json_incref(json_object_get(got, "tokens"));
    json_decref(got);
    return ids;
}

/* --default-chat-template-kwargs: the server's variables, under each
 * request's own key by key. */
Test(server_chat_template, default_kwargs_under_the_requests, .timeout = 120) {
    TestServer s;
    server_start(&s, "");
    json_t *thinking = chat_ids(&s, "");
    json_t *not_thinking = chat_ids(&s, "\"chat_template_kwargs\": {\"enable_thinking\": false}");
    cr_assert(!json_equal(thinking, not_thinking), "enable_thinking changes nothing in this template");
    cr_expect_eq(server_stop(&s, SIGTERM), 0);

    server_start(&s, "--default-chat-template-kwargs '{\"enable_thinking\": false, \"unused\": [1]}'");
    static const struct {
        const char *fields;
        bool thinks;
    } cases[] = {
        {"", false},
        {"\"chat_template_kwargs\": null", false},
        {"\"chat_template_kwargs\": {}", false},
        {"\"chat_template_kwargs\": {\"enable_thinking\": null}", false}, /* null: not given */
        {"\"chat_template_kwargs\": {\"unused\": 2}", false},
        {"\"chat_template_kwargs\": {\"enable_thinking\": true}", true},
        {"\"enable_thinking\": true", true}, /* the shorthand is the request's too */
        {"\"enable_thinking\": true, \"chat_template_kwargs\": {\"enable_thinking\": false}", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *ids = chat_ids(&s, cases[i].fields);
        cr_expect(json_equal(ids, cases[i].thinks ? thinking : not_thinking), "{%s}: thinking should be %s",
                  cases[i].fields, cases[i].thinks ? "on" : "off");
        json_decref(ids);
    }
    /* the chat endpoint renders through the same function */
    int status;
    json_t *got = http_json(&s, "/v1/chat/completions",
                            "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 1}", &status);
    cr_expect_eq(status, 200);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(got, "usage"), "prompt_tokens")),
                 (json_int_t)json_array_size(not_thinking));
    json_decref(got);
    /* and /v1/responses, where reasoning.effort is the request's own say */
    static const struct {
        const char *body;
        bool thinks;
    } responses[] = {{"{\"input\": \"hi\", \"max_output_tokens\": 1}", false},
                     {"{\"input\": \"hi\", \"max_output_tokens\": 1, \"reasoning\": {\"effort\": \"high\"}}", true}};
    for (size_t i = 0; i < 2; i++) {
        got = http_json(&s, "/v1/responses", responses[i].body, &status);
        cr_expect_eq(status, 200);
        cr_expect_eq(json_integer_value(json_object_get(json_object_get(got, "usage"), "input_tokens")),
                     (json_int_t)json_array_size(responses[i].thinks ? thinking : not_thinking), "%s", responses[i].body);
        json_decref(got);
    }
    /* a request's bad kwargs are still its own 400 */
    got = http_json(&s, "/tokenize", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                                     "\"chat_template_kwargs\": {\"tools\": []}}", &status);
    cr_expect_eq(status, 400);
    json_decref(got);
    json_decref(thinking);
    json_decref(not_thinking);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

Test(server_chat_template, default_kwargs_checked_at_start, .timeout = 60) {
    static const struct {
        const char *arg, *says;
    } cases[] = {
        {"'{\"enable_thinking\": fals}'", "--default-chat-template-kwargs: not JSON"},
        {"'[1]'", "'--default-chat-template-kwargs' must be an object"},
        {"'null'", "--default-chat-template-kwargs: not JSON"},
        {"'{\"messages\": []}'", "'--default-chat-template-kwargs' may not set 'messages'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "serve --model " TINY_MODEL " --port 0 --default-chat-template-kwargs %s",
                 cases[i].arg);
        char *out, *err;
        int rc = run_nanovllm(args, &out, &err);
        cr_expect_eq(rc, 2, "%s", cases[i].arg);
        cr_expect(strstr(err, cases[i].says), "%s: %s", cases[i].arg, err);
        free(out);
        free(err);
    }
}
