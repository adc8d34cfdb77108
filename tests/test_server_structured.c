/*
 * test_server_structured.c - structured outputs (constrained decoding) through
 * the real `nanovllm serve` on the tiny random-weight model.
 *
 * structured_outputs_e2e runs tests/e2e/structured.mjs: 50+ JSON Schemas,
 * regexes, choice lists and GBNF grammars sampled through the official OpenAI
 * SDK, every finished answer validated (ajv for the schemas), streaming,
 * seeds and the 400s. The other tests need no node: guided_choice and
 * guided_regex answers checked here, and the 400s for each malformed
 * constraint field and for JSON Schemas the compiler refuses, each message
 * naming what it refuses.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "server_helpers.h"

/* ---- the SDK suite --------------------------------------------------------------- */

Test(server_structured, structured_outputs_e2e, .timeout = 600) {
    if (access("tests/e2e/node_modules/openai/package.json", R_OK) != 0 ||
        access("tests/e2e/node_modules/ajv/package.json", R_OK) != 0 ||
        access("tests/e2e/node_modules/ajv-formats/package.json", R_OK) != 0)
        cr_assert_fail("the e2e packages are not installed: run scripts/setup.sh (npm ci --prefix tests/e2e)");
    TestServer s;
    /* Small KV blocks and room for them: the script samples 8 constraints at once,
     * up to 40 answers each. */
    server_start(&s, "--api-key sekrit --served-model-name tiny-qwen3 --block-size 16 --kv-cache-memory 1GiB");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "node tests/e2e/structured.mjs %d tiny-qwen3 sekrit > %s/structured.txt 2>&1",
             s.port, s.dir);
    int rc = system(cmd);
    char path[300];
    snprintf(path, sizeof path, "%s/structured.txt", s.dir);
    char *out = read_text(path);
    cr_expect_eq(rc, 0, "the structured-output checks failed:\n%s", out);
    cr_expect(strstr(out, "\nok "), "%s", out);
    free(out);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* ---- answers checked without node ---------------------------------------------------- */

static const char *choice_text(json_t *response, size_t i, bool chat) {
    json_t *choice = json_array_get(json_object_get(response, "choices"), i);
    json_t *text = chat ? json_object_get(json_object_get(choice, "message"), "content") : json_object_get(choice, "text");
    return json_string_value(text);
}

static const char *finish_reason(json_t *response, size_t i) {
    json_t *choice = json_array_get(json_object_get(response, "choices"), i);
    return json_string_value(json_object_get(choice, "finish_reason"));
}

Test(server_structured, guided_choice_answers_are_choices, .timeout = 120) {
    TestServer s;
    server_start(&s, "");
    static const char *const choices[] = {"red", "green", "blue", "dark red", "日本語"};
    static const struct {
        const char *path, *body;
        bool chat;
    } requests[] = {
        {"/v1/completions",
         "{\"prompt\": \"Pick one:\", \"n\": 16, \"seed\": 3, \"temperature\": 1.0, \"max_tokens\": 20, "
         "\"guided_choice\": [\"red\", \"green\", \"blue\", \"dark red\", \"日本語\"]}",
         false},
        {"/v1/completions",
         "{\"prompt\": \"x\", \"n\": 16, \"seed\": 4, \"temperature\": 1.0, \"max_tokens\": 20, "
         "\"structured_outputs\": {\"choice\": [\"red\", \"green\", \"blue\", \"dark red\", \"日本語\"]}}",
         false},
        {"/v1/chat/completions",
         "{\"messages\": [{\"role\": \"user\", \"content\": \"Pick one\"}], \"n\": 16, \"seed\": 5, "
         "\"temperature\": 1.0, \"max_tokens\": 20, \"chat_template_kwargs\": {\"enable_thinking\": false}, "
         "\"guided_choice\": [\"red\", \"green\", \"blue\", \"dark red\", \"日本語\"]}",
         true},
    };
    for (size_t r = 0; r < sizeof requests / sizeof requests[0]; r++) {
        int status;
        json_t *resp = http_json(&s, requests[r].path, requests[r].body, &status);
        cr_assert_eq(status, 200, "%s", requests[r].body);
        cr_assert_eq(json_array_size(json_object_get(resp, "choices")), 16);
        for (size_t i = 0; i < 16; i++) {
            const char *text = choice_text(resp, i, requests[r].chat);
            cr_assert(text, "choice %zu has no text", i);
            /* A choice is a handful of tokens: every answer finishes. */
            cr_expect_str_eq(finish_reason(resp, i), "stop", "request %zu choice %zu: '%s'", r, i, text);
            bool listed = false;
            for (size_t c = 0; c < sizeof choices / sizeof choices[0]; c++) listed |= strcmp(text, choices[c]) == 0;
            cr_expect(listed, "request %zu choice %zu: '%s' is not one of the choices", r, i, text);
        }
        json_decref(resp);
    }
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* [0-9]{3}-[a-z]{2}(!|\?)? as a full match. */
static bool matches_code(const char *t) {
    for (int i = 0; i < 3; i++)
        if (t[i] < '0' || t[i] > '9') return false;
    if (t[3] != '-') return false;
    for (int i = 4; i < 6; i++)
        if (t[i] < 'a' || t[i] > 'z') return false;
    return t[6] == '\0' || ((t[6] == '!' || t[6] == '?') && t[7] == '\0');
}

Test(server_structured, guided_regex_answers_match, .timeout = 120) {
    TestServer s;
    server_start(&s, "");
    int status;
    json_t *resp = http_json(&s, "/v1/completions",
                             "{\"prompt\": \"Code:\", \"n\": 16, \"seed\": 9, \"temperature\": 1.0, "
                             "\"max_tokens\": 30, \"guided_regex\": \"[0-9]{3}-[a-z]{2}(!|\\\\?)?\"}",
                             &status);
    cr_assert_eq(status, 200);
    for (size_t i = 0; i < 16; i++) {
        const char *text = choice_text(resp, i, false);
        cr_expect_str_eq(finish_reason(resp, i), "stop", "choice %zu: '%s'", i, text);
        cr_expect(text && matches_code(text), "choice %zu: '%s' does not match", i, text ? text : "(none)");
    }
    json_decref(resp);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* ---- 400s ----------------------------------------------------------------------------- */

/* POSTs body to path and expects a 400 invalid_request_error whose message holds
 * every needle (a NULL-terminated list) and whose param is param. */
static void expect_400(const TestServer *s, const char *path, const char *body, const char *param, ...) {
    HttpResult r = http(s, "POST", path, body, NULL);
    cr_expect_eq(r.status, 400, "%s -> %d %s", body, r.status, r.body);
    json_t *j = json_loads(r.body, 0, NULL);
    json_t *error = json_object_get(j, "error");
    const char *type = json_string_value(json_object_get(error, "type"));
    const char *message = json_string_value(json_object_get(error, "message"));
    const char *got_param = json_string_value(json_object_get(error, "param"));
    cr_expect(type && strcmp(type, "invalid_request_error") == 0, "%s -> %s", body, r.body);
    cr_expect(got_param && strcmp(got_param, param) == 0, "%s: param should be %s: %s", body, param, r.body);
    va_list ap;
    va_start(ap, param);
    for (const char *needle = va_arg(ap, const char *); needle; needle = va_arg(ap, const char *))
        cr_expect(message && strstr(message, needle), "%s: the message lacks \"%s\": %s", body, needle, r.body);
    va_end(ap);
    json_decref(j);
    http_free(&r);
}

#define COMPLETION(fields) "{\"prompt\": \"x\", \"max_tokens\": 4, " fields "}"
#define CHAT(fields)                                                                                      \
    "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 4, "                      \
    "\"chat_template_kwargs\": {\"enable_thinking\": false}, " fields "}"

Test(server_structured, malformed_constraint_fields_are_400s, .timeout = 60) {
    TestServer s;
    server_start(&s, "");
    const char *c = "/v1/completions", *chat = "/v1/chat/completions";
    /* structured_outputs must be an object */
    expect_400(&s, c, COMPLETION("\"structured_outputs\": \"json\""), "structured_outputs", "'structured_outputs'",
               "object", NULL);
    expect_400(&s, c, COMPLETION("\"structured_outputs\": [{\"regex\": \"a\"}]"), "structured_outputs",
               "must be an object", NULL);
    expect_400(&s, chat, CHAT("\"structured_outputs\": 5"), "structured_outputs", "must be an object", NULL);
    /* guided_choice: a non-empty list of strings */
    expect_400(&s, c, COMPLETION("\"guided_choice\": [\"a\", 1]"), "guided_choice", "'guided_choice'", "strings",
               NULL);
    expect_400(&s, c, COMPLETION("\"guided_choice\": [\"a\", null]"), "guided_choice", "strings", NULL);
    expect_400(&s, c, COMPLETION("\"guided_choice\": \"a\""), "guided_choice", "list", NULL);
    expect_400(&s, c, COMPLETION("\"guided_choice\": []"), "guided_choice", "non-empty", NULL);
    expect_400(&s, chat, CHAT("\"structured_outputs\": {\"choice\": [true]}"), "structured_outputs.choice",
               "'structured_outputs.choice'", "strings", NULL);
    /* response_format: an object with a known type, and a json_schema object for json_schema */
    expect_400(&s, c, COMPLETION("\"response_format\": {\"type\": \"xml\"}"), "response_format", "xml",
               "json_schema", NULL);
    expect_400(&s, chat, CHAT("\"response_format\": {\"type\": \"yaml\"}"), "response_format", "yaml", NULL);
    expect_400(&s, chat, CHAT("\"response_format\": \"json_object\""), "response_format", "must be an object", NULL);
    expect_400(&s, chat, CHAT("\"response_format\": {}"), "response_format", "response_format.type", NULL);
    expect_400(&s, chat, CHAT("\"response_format\": {\"type\": \"json_schema\"}"), "response_format",
               "response_format.json_schema", NULL);
    expect_400(&s, chat, CHAT("\"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
                              "{\"name\": \"x\", \"schema\": [1]}}"),
               "response_format", "json_schema.schema", NULL);
    expect_400(&s, chat, CHAT("\"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
                              "{\"name\": \"x\", \"schema\": {}, \"strict\": \"yes\"}}"),
               "response_format", "strict", NULL);
    /* options that would change the output are refused, never ignored */
    expect_400(&s, c, COMPLETION("\"structured_outputs\": {\"json\": {\"type\": \"object\"}, \"whitespace_pattern\": \" \"}"),
               "structured_outputs", "whitespace_pattern", NULL);
    expect_400(&s, c, COMPLETION("\"guided_json\": {\"type\": \"object\"}, \"guided_whitespace_pattern\": \"\\\\s*\""),
               "guided_whitespace_pattern", "guided_whitespace_pattern", NULL);
    expect_400(&s, chat, CHAT("\"guided_whitespace_pattern\": \" \""), "guided_whitespace_pattern",
               "guided_whitespace_pattern", NULL);
    /* regex / grammar: non-empty strings */
    expect_400(&s, c, COMPLETION("\"guided_regex\": 5"), "guided_regex", "non-empty string", NULL);
    expect_400(&s, c, COMPLETION("\"guided_grammar\": \"\""), "guided_grammar", "non-empty string", NULL);
    expect_400(&s, c, COMPLETION("\"structured_outputs\": {\"json_object\": \"yes\"}"), "structured_outputs",
               "json_object", NULL);
    /* exactly one constraint */
    expect_400(&s, c, COMPLETION("\"guided_regex\": \"a\", \"guided_grammar\": \"root ::= \\\"a\\\"\""),
               "guided_grammar", "only one", "guided_regex", NULL);
    expect_400(&s, chat, CHAT("\"response_format\": {\"type\": \"json_object\"}, \"guided_choice\": [\"a\"]"),
               "guided_choice", "only one", "response_format", NULL);
    /* after all of them, the server still answers */
    int status;
    json_t *ok = http_json(&s, c, COMPLETION("\"guided_choice\": [\"fine\"]"), &status);
    cr_expect_eq(status, 200);
    cr_expect_str_eq(choice_text(ok, 0, false), "fine");
    json_decref(ok);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

Test(server_structured, json_schema_errors_name_the_keyword, .timeout = 60) {
    TestServer s;
    server_start(&s, "");
    const char *c = "/v1/completions", *chat = "/v1/chat/completions";
    static const struct {
        const char *schema, *needle, *where;
    } cases[] = {
        {"{\"type\": \"array\", \"uniqueItems\": true}", "'uniqueItems'", "#"},
        {"{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\", \"multipleOf\": 5}}}", "'multipleOf'",
         "#/properties/n"},
        {"{\"type\": \"object\", \"patternProperties\": {\"^x\": {}}}", "'patternProperties'", "#"},
        {"{\"type\": \"object\", \"propertyNames\": {\"maxLength\": 3}}", "'propertyNames'", "#"},
        {"{\"not\": {\"type\": \"string\"}}", "'not'", "#"},
        {"{\"if\": {\"type\": \"string\"}, \"then\": {\"maxLength\": 2}}", "'if'", "#"},
        {"{\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"contains\": {\"const\": \"x\"}}", "'contains'",
         "#"},
        {"{\"type\": \"array\", \"items\": {\"type\": \"string\", \"format\": \"ipv4\"}}", "'ipv4'", "#/items"},
        {"{\"$ref\": \"#/$defs/absent\"}", "#/$defs/absent", "#"},
        {"{\"type\": \"strange\"}", "'strange'", "#"},
        {"{\"type\": \"string\", \"minLength\": 2, \"pattern\": \"a\"}", "'pattern'", "#"},
        {"{\"type\": \"integer\", \"minimum\": 10, \"maximum\": 1}", "minimum", "#"},
        {"{\"anyOf\": []}", "'anyOf'", "#"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[1024];
        /* guided_json, structured_outputs.json and response_format all compile the same way */
        switch (i % 3) {
        case 0:
            snprintf(body, sizeof body, COMPLETION("\"guided_json\": %s"), cases[i].schema);
            expect_400(&s, c, body, "guided_json", "json schema", cases[i].needle, cases[i].where, NULL);
            break;
        case 1:
            snprintf(body, sizeof body, COMPLETION("\"structured_outputs\": {\"json\": %s}"), cases[i].schema);
            expect_400(&s, c, body, "structured_outputs.json", "json schema", cases[i].needle, cases[i].where, NULL);
            break;
        default:
            snprintf(body, sizeof body,
                     CHAT("\"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
                          "{\"name\": \"x\", \"strict\": true, \"schema\": %s}}"),
                     cases[i].schema);
            expect_400(&s, chat, body, "response_format", "json schema", cases[i].needle, cases[i].where, NULL);
        }
    }
    /* a schema given as a string must be JSON */
    expect_400(&s, c, COMPLETION("\"guided_json\": \"{not json\""), "guided_json", "json", NULL);
    /* regex and grammar errors say where */
    expect_400(&s, c, COMPLETION("\"guided_regex\": \"(ab\""), "guided_regex", "regex", "'('", NULL);
    expect_400(&s, c, COMPLETION("\"guided_regex\": \"a(?<=b)\""), "guided_regex", "regex", "lookbehind", NULL);
    expect_400(&s, c, COMPLETION("\"guided_grammar\": \"root ::= \\\"a\\\" b\\n\\nb ::= [x\\n\""), "guided_grammar",
               "grammar line 3", NULL);
    expect_400(&s, chat, CHAT("\"structured_outputs\": {\"grammar\": \"root ::= undefined-rule\"}"),
               "structured_outputs.grammar", "undefined rule 'undefined-rule'", NULL);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}
