/*
 * test_server_gguf.c - `nanovllm serve --model FILE.gguf` with nothing
 * beside the file: the model list, a chat through the file's own chat
 * template, a tool call forced through its tokenizer, a stream, and
 * /tokenize agreeing with the tokenizer.json folder of the same model.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "server_helpers.h"

#define GGUF_FILE "tests/fixtures/tiny-qwen3-gguf/q4_k.gguf"

static const char TOOL_CHAT[] =
    "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather in Paris?\"}], \"max_tokens\": 60, "
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 12}}, "
    "\"required\": [\"city\"], \"additionalProperties\": false}}}], \"tool_choice\": \"required\", "
    "\"parallel_tool_calls\": false, \"seed\": 1, \"chat_template_kwargs\": {\"enable_thinking\": false}}";

Test(server_gguf, serves_a_file_alone, .timeout = 120) {
    TestServer s;
    server_start(&s, "--model " GGUF_FILE);
    int status;
    json_t *models = http_json(&s, "/v1/models", NULL, &status);
    cr_assert_eq(status, 200);
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(models, "data"), 0), "id")),
                     GGUF_FILE);
    json_decref(models);

    json_t *r = http_json(&s, "/v1/chat/completions", TOOL_CHAT, &status);
    cr_assert_eq(status, 200, "%s", json_dumps(r, 0));
    json_t *choice = json_array_get(json_object_get(r, "choices"), 0);
    json_t *call = json_array_get(json_object_get(json_object_get(choice, "message"), "tool_calls"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(call, "function"), "name")),
                     "get_weather");
    json_t *args = json_loads(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")),
                              0, NULL);
    cr_expect(json_is_string(json_object_get(args, "city")), "arguments follow the schema");
    json_decref(args);
    json_decref(r);

    HttpResult st = http(&s, "POST", "/v1/chat/completions",
                         "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 8, "
                         "\"stream\": true}", NULL);
    cr_expect_eq(st.status, 200);
    int done = 0;
    json_t *events = sse_events(st.body, &done);
    cr_expect(done && json_array_size(events) >= 2, "a stream of chunks ending in [DONE]");
    json_decref(events);
    http_free(&st);

    /* the file's tokenizer and template give the folder's prompt tokens */
    json_t *tok = http_json(&s, "/tokenize", "{\"messages\": [{\"role\": \"user\", \"content\": \"Héllo, wörld!\"}]}",
                            &status);
    cr_assert_eq(status, 200);
    server_stop(&s, SIGTERM);
    TestServer folder;
    server_start(&folder, "");
    json_t *want = http_json(&folder, "/tokenize",
                             "{\"messages\": [{\"role\": \"user\", \"content\": \"Héllo, wörld!\"}]}", &status);
    cr_assert_eq(status, 200);
    cr_expect(json_equal(json_object_get(tok, "tokens"), json_object_get(want, "tokens")),
              "%s vs %s", json_dumps(json_object_get(tok, "tokens"), 0), json_dumps(json_object_get(want, "tokens"), 0));
    json_decref(tok);
    json_decref(want);
    cr_expect_eq(server_stop(&folder, SIGTERM), 0);
}
