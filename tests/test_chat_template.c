/*
 * test_chat_template.c - a chat request to prompt text, beyond the
 * fixtures: the request fields (defaults, chat_template_kwargs, content
 * formats, null content, tool-call arguments as JSON strings,
 * continue_final_message), which template a folder's list form picks, the
 * ChatML fallback, the clock, and clear errors for malformed requests.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat/chat_template.h"
#include "helpers.h"

static Tokenizer *tok;

static void setup(void) { tok = tiny_tokenizer(); }
static void teardown(void) { tokenizer_free(tok); }

TestSuite(chat_template, .init = setup, .fini = teardown);

static ChatTemplate *make(const char *text, ChatContentFormat format) {
    Error err = {0};
    ChatTemplate *ct = chat_template_new(tok, text, format, NULL, &err);
    cr_assert(ct, "%s", err.msg);
    return ct;
}

static char *render_with(const ChatTemplate *ct, const char *request, Error *err) {
    json_error_t jerr;
    json_t *req = json_loads(request, JSON_DECODE_ANY, &jerr);
    cr_assert(req, "bad test JSON: %s", jerr.text);
    size_t len;
    char *out = chat_template_render(ct, req, 1722002400.0, &len, err);
    if (out) cr_expect_eq(strlen(out), len);
    json_decref(req);
    return out;
}

static void expect_render(const ChatTemplate *ct, const char *request, const char *want) {
    Error err = {0};
    char *out = render_with(ct, request, &err);
    cr_assert(out, "%s: %s", request, err.msg);
    cr_expect_str_eq(out, want, "%s", request);
    free(out);
}

static void expect_error(const ChatTemplate *ct, const char *request, const char *needle) {
    Error err = {0};
    char *out = render_with(ct, request, &err);
    cr_expect_null(out, "%s rendered: %s", request, out);
    cr_expect(strstr(err.msg, needle), "%s: '%s' lacks '%s'", request, err.msg, needle);
    cr_expect_eq(err.kind, ERROR_INVALID, "%s", request);
    free(out);
}

#define HI "{\"role\": \"user\", \"content\": \"Hi\"}"

Test(chat_template, request_fields) {
    ChatTemplate *qwen3 = make(NULL, CHAT_CONTENT_AUTO);
    /* add_generation_prompt defaults to true (as OpenAI-style servers do). */
    expect_render(qwen3, "{\"messages\": [" HI "]}",
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect_render(qwen3, "{\"messages\": [" HI "], \"chat_template_kwargs\": {\"enable_thinking\": false}}",
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    /* A top-level enable_thinking is shorthand; chat_template_kwargs wins. */
    expect_render(qwen3, "{\"messages\": [" HI "], \"enable_thinking\": false}",
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    expect_render(qwen3, "{\"messages\": [" HI "], \"enable_thinking\": false, "
                         "\"chat_template_kwargs\": {\"enable_thinking\": true}}",
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* Qwen3's template does not loop over content: text parts are joined. */
    expect_render(qwen3, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", "
                         "\"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}], "
                         "\"add_generation_prompt\": false}",
                  "<|im_start|>user\na\nb<|im_end|>\n");
    /* OpenAI clients send null content with tool calls and the arguments as
     * a JSON string: the template gets "" and the object (vLLM does the same). */
    expect_render(qwen3, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": "
                         "\"assistant\", \"content\": null, \"tool_calls\": [{\"type\": \"function\", "
                         "\"function\": {\"name\": \"f\", \"arguments\": \"{\\\"x\\\":1.0}\"}}]}], "
                         "\"add_generation_prompt\": false}",
                  "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
                  "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1.0}}\n</tool_call><|im_end|>\n");
    /* Arguments that are not a JSON object stay the string they were. */
    expect_render(qwen3, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": "
                         "\"assistant\", \"content\": \"\", \"tool_calls\": [{\"function\": {\"name\": "
                         "\"f\", \"arguments\": \"not json\"}}]}], \"add_generation_prompt\": false}",
                  "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
                  "<tool_call>\n{\"name\": \"f\", \"arguments\": not json}\n</tool_call><|im_end|>\n");
    chat_template_free(qwen3);
}

Test(chat_template, content_formats) {
    const char *show = "{% for m in messages %}{{ m.content }}|{% endfor %}";
    const char *req = "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": "
                      "\"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", "
                      "\"content\": null}, {\"role\": \"user\", \"content\": \"s\"}]}";
    ChatTemplate *ct = make(show, CHAT_CONTENT_STRING);
    expect_render(ct, req, "a\nb||s|");
    chat_template_free(ct);
    ct = make(show, CHAT_CONTENT_OPENAI);
    expect_render(ct, req, "[{'type': 'text', 'text': 'a'}, {'type': 'text', 'text': 'b'}]|[]|s|");
    chat_template_free(ct);
    ct = make(show, CHAT_CONTENT_VERBATIM);
    expect_render(ct, req, "[{'type': 'text', 'text': 'a'}, {'type': 'text', 'text': 'b'}]|None|s|");
    chat_template_free(ct);
    /* auto: the parts for a template that loops over content. */
    ct = make("{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}"
              "{% for p in m.content %}<{{ p.text }}>{% endfor %}{% endif %}{% endfor %}",
              CHAT_CONTENT_AUTO);
    expect_render(ct, req, "<a><b>s");
    chat_template_free(ct);
    ChatContentFormat f;
    cr_expect_eq(chat_content_format_parse("openai", &f), 0);
    cr_expect_eq(f, CHAT_CONTENT_OPENAI);
    cr_expect_eq(chat_content_format_parse("text", &f), -1);
}

Test(chat_template, variables_and_kwargs) {
    ChatTemplate *ct = make("{{ eos_token }}|{{ bos_token is defined }}|{{ tools }}|{{ documents }}|"
                            "{{ add_generation_prompt }}|{{ custom }}|{{ strftime_now('%d %b %Y') }}",
                            CHAT_CONTENT_AUTO);
    setenv("TZ", "UTC", 1);
    expect_render(ct, "{\"messages\": [" HI "], \"chat_template_kwargs\": {\"custom\": [1, \"x\"]}}",
                  "<|im_end|>|False|None|None|True|[1, 'x']|26 Jul 2024");
    expect_render(ct, "{\"messages\": [" HI "], \"tools\": [], \"documents\": [{\"title\": \"t\"}], "
                      "\"add_generation_prompt\": false}",
                  "<|im_end|>|False|[]|[{'title': 't'}]|False||26 Jul 2024");
    /* kwargs may override a special token (transformers lets them), not a field. */
    expect_render(ct, "{\"messages\": [" HI "], \"chat_template_kwargs\": {\"eos_token\": \"E\"}}",
                  "E|False|None|None|True||26 Jul 2024");
    expect_error(ct, "{\"messages\": [" HI "], \"chat_template_kwargs\": {\"messages\": []}}",
                 "may not set 'messages'");
    /* null is "not given", as for every optional field (it was an "out of memory" 500) */
    expect_render(ct, "{\"messages\": [" HI "], \"chat_template_kwargs\": null}",
                  "<|im_end|>|False|None|None|True||26 Jul 2024");
    chat_template_free(ct);
}

Test(chat_template, continue_final_message) {
    ChatTemplate *qwen3 = make(NULL, CHAT_CONTENT_AUTO);
    const char *req = "{\"messages\": [" HI ", {\"role\": \"assistant\", \"content\": \"The answer is\"}], "
                      "\"add_generation_prompt\": false, \"continue_final_message\": true}";
    expect_render(qwen3, req, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                              "<think>\n\n</think>\n\nThe answer is");
    /* Trailing space the template strips is not restored. */
    ChatTemplate *trim = make("{% for m in messages %}[{{ m.content | trim }}]{% endfor %}",
                              CHAT_CONTENT_AUTO);
    expect_render(trim, "{\"messages\": [{\"role\": \"assistant\", \"content\": \"abc  \"}], "
                        "\"add_generation_prompt\": false, \"continue_final_message\": true}",
                  "[abc");
    expect_error(trim, "{\"messages\": [" HI "], \"continue_final_message\": true}",
                 "'continue_final_message' needs \"add_generation_prompt\": false");
    ChatTemplate *drop = make("nothing", CHAT_CONTENT_AUTO);
    expect_error(drop, "{\"messages\": [" HI "], \"add_generation_prompt\": false, "
                       "\"continue_final_message\": true}", "does not appear");
    chat_template_free(drop);
    chat_template_free(trim);
    chat_template_free(qwen3);
}

/* A model folder of the tiny tokenizer with this tokenizer_config.json. */
static char *folder_with_config(const char *config) {
    char *dir = make_temp_dir(), path[512], *src = realpath(TINY_MODEL "/tokenizer.json", NULL);
    cr_assert(src);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    cr_assert_eq(symlink(src, path), 0);
    free(src);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    write_text(path, config);
    return dir;
}

/* A folder's tokenizer with that config, and its compiled template. */
typedef struct Folder {
    char *dir;
    Tokenizer *tok;
    ChatTemplate *ct;
    const char *warning;
} Folder;

static Folder open_folder(const char *config) {
    Folder f = {.dir = folder_with_config(config)};
    Error err = {0};
    f.tok = tokenizer_load(f.dir, 0, &err);
    cr_assert(f.tok, "%s", err.msg);
    f.ct = chat_template_new(f.tok, NULL, CHAT_CONTENT_AUTO, &f.warning, &err);
    cr_assert(f.ct, "%s", err.msg);
    return f;
}

static void close_folder(Folder *f) {
    chat_template_free(f->ct);
    tokenizer_free(f->tok);
    rm_rf(f->dir);
    free(f->dir);
}

Test(chat_template, named_templates_and_fallback) {
    Folder f = open_folder("{\"eos_token\": \"<|im_end|>\", \"chat_template\": ["
                           "{\"name\": \"default\", \"template\": \"D{{ tools }}\"}, "
                           "{\"name\": \"tool_use\", \"template\": \"T{{ tools | length }}\"}]}");
    expect_render(f.ct, "{\"messages\": [" HI "]}", "DNone");
    expect_render(f.ct, "{\"messages\": [" HI "], \"tools\": [{}]}", "T1");
    close_folder(&f);

    /* Only a tool_use template: requests without tools are refused. */
    f = open_folder("{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}]}");
    expect_render(f.ct, "{\"messages\": [" HI "], \"tools\": []}", "T");
    expect_error(f.ct, "{\"messages\": [" HI "]}", "for requests with 'tools' only");
    close_folder(&f);

    /* No template at all: ChatML, with a warning, and tools refused. */
    f = open_folder("{\"eos_token\": \"<|im_end|>\"}");
    cr_expect(f.warning && strstr(f.warning, "no chat template"), "%s", f.warning);
    expect_render(f.ct, "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, " HI "]}",
                  "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                  "<|im_start|>assistant\n");
    expect_error(f.ct, "{\"messages\": [" HI "], \"tools\": [{\"type\": \"function\"}]}",
                 "tools need a chat template");
    cr_expect_null(chat_template_tool_call_format(f.ct));
    cr_expect_not(chat_template_takes_tools(f.ct));
    close_folder(&f);
}

Test(chat_template, template_errors) {
    Error err = {0};
    cr_expect_null(chat_template_new(tok, "{% if %}", CHAT_CONTENT_AUTO, NULL, &err));
    cr_expect(strstr(err.msg, "the chat template: line 1"), "%s", err.msg);
    cr_expect_eq(err.kind, ERROR_INVALID);
    ChatTemplate *ct = make("{{ raise_exception('Only user and assistant roles are supported!') }}",
                            CHAT_CONTENT_AUTO);
    Error e = {0};
    char *out = render_with(ct, "{\"messages\": [" HI "]}", &e);
    cr_expect_null(out);
    cr_expect_str_eq(e.msg, "Only user and assistant roles are supported!");
    chat_template_free(ct);
    ct = make("{{ messages[0].content.nope.x }}", CHAT_CONTENT_AUTO);
    expect_error(ct, "{\"messages\": [" HI "]}", "the chat template failed: line 1: 'str object' has "
                                                 "no attribute 'nope'");
    chat_template_free(ct);
    /* A template that would run forever ends with an error. */
    ct = make("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
              CHAT_CONTENT_AUTO);
    expect_error(ct, "{\"messages\": [" HI "]}", "iterations");
    chat_template_free(ct);
}

Test(chat_template, malformed_requests) {
    ChatTemplate *ct = make(NULL, CHAT_CONTENT_AUTO);
    expect_error(ct, "[]", "must be a JSON object");
    expect_error(ct, "{}", "'messages' must be a list");
    expect_error(ct, "{\"messages\": []}", "'messages' is empty");
    expect_error(ct, "{\"messages\": [1]}", "messages[0] must be an object with a string 'role'");
    expect_error(ct, "{\"messages\": [{\"content\": \"x\"}]}", "messages[0] must be an object");
    expect_error(ct, "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}",
                 "messages[0].role 'wizard' is not one of system, developer, user");
    expect_error(ct, "{\"messages\": [{\"role\": \"user\"}]}", "messages[0].content is required for "
                                                            "role 'user'");
    expect_error(ct, "{\"messages\": [{\"role\": \"tool\", \"content\": null}]}",
                 "messages[0].content is required");
    expect_error(ct, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}",
                 "messages[0].content must be a string");
    expect_error(ct, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}",
                 "messages[0].content[0]: 'image_url' parts are not supported: nanovllm serves the text model");
    expect_error(ct, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"video\"}]}]}",
                 "image, video and audio inputs are refused");
    expect_error(ct, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"json\"}]}]}",
                 "messages[0].content[0]: only {\"type\": \"text\"");
    expect_error(ct, "{\"messages\": [{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": 3}]}",
                 "tool_calls must be a list");
    expect_error(ct, "{\"messages\": [" HI "], \"tools\": {}}", "'tools' must be a list");
    expect_error(ct, "{\"messages\": [" HI "], \"documents\": 1}", "'documents' must be a list");
    expect_error(ct, "{\"messages\": [" HI "], \"enable_thinking\": \"no\"}",
                 "'enable_thinking' must be true or false");
    expect_error(ct, "{\"messages\": [" HI "], \"add_generation_prompt\": 1}",
                 "'add_generation_prompt' must be true or false");
    expect_error(ct, "{\"messages\": [" HI "], \"chat_template_kwargs\": []}",
                 "'chat_template_kwargs' must be an object");
    chat_template_free(ct);
}

Test(chat_template, clock) {
    setenv("SOURCE_DATE_EPOCH", "1722002400", 1);
    cr_expect_eq(chat_template_clock(), 1722002400.0);
    setenv("SOURCE_DATE_EPOCH", "junk", 1);
    cr_expect_gt(chat_template_clock(), 1.7e9);
    unsetenv("SOURCE_DATE_EPOCH");
    cr_expect_gt(chat_template_clock(), 1.7e9);
}
