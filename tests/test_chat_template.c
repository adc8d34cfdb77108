/*
 * test_chat_template.c - the chat template beyond the fixtures: request
 * options (defaults, chat_template_kwargs, text parts, null content with
 * tool calls), the ChatML fallback, clear errors for malformed requests,
 * and Python's json.dumps formatting that tojson relies on.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/pyjson.h"
#include "engine/tokenizer/tokenizer.h"

static char *render(ChatTemplateKind kind, const char *request, Error *err) {
    json_error_t jerr;
    json_t *req = json_loads(request, 0, &jerr);
    cr_assert(req, "bad test JSON: %s", jerr.text);
    size_t len;
    char *out = chat_template_render(kind, req, &len, err);
    if (out) cr_expect_eq(strlen(out), len);
    json_decref(req);
    return out;
}

static void expect_render(ChatTemplateKind kind, const char *request, const char *want) {
    Error err = {0};
    char *out = render(kind, request, &err);
    cr_assert(out, "%s: %s", request, err.msg);
    cr_expect_str_eq(out, want, "%s", request);
    free(out);
}

static void expect_error(const char *request, const char *needle) {
    Error err = {0};
    char *out = render(CHAT_TEMPLATE_QWEN3, request, &err);
    cr_expect_null(out, "%s rendered: %s", request, out);
    cr_expect(strstr(err.msg, needle), "%s: '%s' lacks '%s'", request, err.msg, needle);
    free(out);
}

Test(chat_template, options) {
    /* add_generation_prompt defaults to true (as OpenAI-style servers do). */
    expect_render(CHAT_TEMPLATE_QWEN3, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}",
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect_render(CHAT_TEMPLATE_QWEN3,
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
                  "\"chat_template_kwargs\": {\"enable_thinking\": false}}",
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    /* chat_template_kwargs wins over the top-level flag. */
    expect_render(CHAT_TEMPLATE_QWEN3,
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"enable_thinking\": "
                  "false, \"chat_template_kwargs\": {\"enable_thinking\": true}}",
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* Text parts are joined with newlines. */
    expect_render(CHAT_TEMPLATE_QWEN3,
                  "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": "
                  "\"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}], \"add_generation_prompt\": false}",
                  "<|im_start|>user\na\nb<|im_end|>\n");
    /* An assistant turn with only tool calls may have null content. */
    expect_render(CHAT_TEMPLATE_QWEN3,
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\","
                  " \"content\": null, \"tool_calls\": [{\"type\": \"function\", \"function\": "
                  "{\"name\": \"f\", \"arguments\": {\"x\": 1.0}}}]}], \"add_generation_prompt\": false}",
                  "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
                  "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1.0}}\n</tool_call><|im_end|>\n");
}

Test(chat_template, chatml_fallback) {
    char warning[512];
    cr_expect_eq(chat_template_detect(NULL, warning, sizeof warning), CHAT_TEMPLATE_CHATML);
    cr_expect(strstr(warning, "no chat template"), "%s", warning);
    cr_expect_eq(chat_template_detect("{{ bos_token }}", warning, sizeof warning),
                 CHAT_TEMPLATE_CHATML);
    cr_expect(strstr(warning, "not the Qwen3 template") && strstr(warning, "ChatML"), "%s", warning);
    expect_render(CHAT_TEMPLATE_CHATML,
                  "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", "
                  "\"content\": \"U\"}], \"enable_thinking\": false}",
                  "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
                  "<|im_start|>assistant\n");
    Error err = {0};
    char *out = render(CHAT_TEMPLATE_CHATML,
                       "{\"messages\": [{\"role\": \"user\", \"content\": \"U\"}], \"tools\": "
                       "[{\"type\": \"function\"}]}", &err);
    cr_expect_null(out);
    cr_expect(strstr(err.msg, "'tools' need the Qwen3 chat template"), "%s", err.msg);
    free(out);
}

Test(chat_template, malformed_requests) {
    expect_error("[]", "must be a JSON object");
    expect_error("{}", "'messages' must be a list");
    expect_error("{\"messages\": []}", "'messages' is empty");
    expect_error("{\"messages\": [1]}", "messages[0] must be an object with a string 'role'");
    expect_error("{\"messages\": [{\"content\": \"x\"}]}", "messages[0] must be an object");
    expect_error("{\"messages\": [{\"role\": \"developer\", \"content\": \"x\"}]}",
                 "messages[0].role 'developer' is not one of");
    expect_error("{\"messages\": [{\"role\": \"user\"}]}", "messages[0].content must be a string");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": 5}]}",
                 "messages[0].content must be a string");
    expect_error("{\"messages\": [{\"role\": \"assistant\", \"content\": null}]}",
                 "messages[0].content");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}",
                 "messages[0].content[0]: only {\"type\": \"text\"");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"tool_calls\": []}]}",
                 "only assistant messages have tool_calls");
    expect_error("{\"messages\": [{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": "
                 "[{\"function\": {\"arguments\": \"{}\"}}]}]}",
                 "messages[0].tool_calls[0] needs a function");
    expect_error("{\"messages\": [{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": 3}]}",
                 "tool_calls must be a list");
    expect_error("{\"messages\": [{\"role\": \"assistant\", \"content\": \"\", "
                 "\"reasoning_content\": 1}]}", "reasoning_content must be a string");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": {}}",
                 "'tools' must be a list");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                 "\"enable_thinking\": \"no\"}", "'enable_thinking' must be true or false");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                 "\"add_generation_prompt\": 1}", "'add_generation_prompt' must be true or false");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                 "\"chat_template_kwargs\": []}", "'chat_template_kwargs' must be an object");
}

static void expect_dump(const char *json, const char *want) {
    json_t *v = json_loads(json, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    cr_assert(v, "%s", json);
    ByteBuf out = {0};
    cr_assert_eq(pyjson_dump(v, &out), 0);
    cr_expect(out.len == strlen(want) && memcmp(out.data, want, out.len) == 0, "%s -> %.*s", json,
              (int)out.len, out.data);
    byte_buf_free(&out);
    json_decref(v);
}

Test(chat_template, python_json_dumps) {
    expect_dump("{\"b\": 1, \"a\": [true, false, null], \"c\": {}}",
                "{\"b\": 1, \"a\": [true, false, null], \"c\": {}}");
    expect_dump("\"é \\\" \\\\ \\n \\t \\r \\b \\f \\u0001 \\u001f \\u007f / \\u2028\"",
                "\"é \\\" \\\\ \\n \\t \\r \\b \\f \\u0001 \\u001f \x7f / \xE2\x80\xA8\"");
    expect_dump("\"a\\u0000b\"", "\"a\\u0000b\"");
    expect_dump("[1.0, 0.1, 1e-7, 1e16, 1.5e300, -0.0, 123.456, 1e-4, 0.00012, 2.5e-05]",
                "[1.0, 0.1, 1e-07, 1e+16, 1.5e+300, -0.0, 123.456, 0.0001, 0.00012, 2.5e-05]");
    expect_dump("[1e15, 123456789012345678, -5, 3.141592653589793]",
                "[1000000000000000.0, 123456789012345678, -5, 3.141592653589793]");
    expect_dump("[]", "[]");
}
