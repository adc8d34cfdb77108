/*
 * chat_template.c - the Qwen3 chat template in C, and the ChatML fallback
 * (see tokenizer.h).
 *
 * render_qwen3() follows the Jinja template statement by statement; the
 * comments name the template's own conditions. Python semantics that
 * matter for exact output:
 *   - s.strip('\n') / lstrip / rstrip remove only '\n' characters;
 *   - s.split('</think>')[-1] is the text after the last '</think>',
 *     [0] the text before the first; .split('<think>')[-1] after the last;
 *   - a string is "truthy" when non-empty, a list when non-empty;
 *   - `enable_thinking is false` holds only for the boolean false;
 *   - tojson is json.dumps(x, ensure_ascii=False) (pyjson.c).
 * Where the template would silently render garbage or fail inside Jinja
 * (an unknown role, a missing content, a tool call without a name), this
 * code returns an error naming the message and field instead.
 */
#include "tokenizer.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pyjson.h"
#include "engine/base/byte_buf.h"

/* FNV-1a of Qwen3's chat_template (tokenizer_config.json of Qwen3-0.6B ...
 * Qwen3-32B), and its length: the template is recognised, not parsed. */
#define QWEN3_TEMPLATE_FNV1A 0x2bfdb7aa9754484eull
#define QWEN3_TEMPLATE_BYTES 4116

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

ChatTemplateKind chat_template_detect(const char *text, char *warning, size_t warning_size) {
    if (warning_size) warning[0] = '\0';
    if (text && strlen(text) == QWEN3_TEMPLATE_BYTES &&
        fnv1a(text, QWEN3_TEMPLATE_BYTES) == QWEN3_TEMPLATE_FNV1A)
        return CHAT_TEMPLATE_QWEN3;
    snprintf(warning, warning_size,
             text ? "the model's chat template is not the Qwen3 template this server implements; "
                    "chat prompts use plain ChatML (<|im_start|>role\\ncontent<|im_end|>) and "
                    "tools are refused"
                  : "the model folder has no chat template; chat prompts use plain ChatML "
                    "(<|im_start|>role\\ncontent<|im_end|>) and tools are refused");
    return CHAT_TEMPLATE_CHATML;
}

/* ---- a message, checked and flattened ---- */

typedef enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL } Role;

typedef struct Message {
    Role role;
    const char *role_name;
    char *content; /* owned; "" when an assistant has only tool calls */
    size_t content_len;
    json_t *tool_calls;      /* a non-empty list, or NULL */
    json_t *reasoning;       /* a string, or NULL when absent or null */
} Message;

typedef struct Builder {
    ByteBuf out;
    Error *err;
    bool failed;
} Builder;

static void add(Builder *b, const char *s, size_t n) {
    if (!b->failed && byte_buf_append(&b->out, s, n)) {
        b->failed = true;
        error_set(b->err, "out of memory");
    }
}
static void adds(Builder *b, const char *s) { add(b, s, strlen(s)); }

static void add_json(Builder *b, const json_t *v) {
    if (!b->failed && pyjson_dump(v, &b->out)) {
        b->failed = true;
        error_set(b->err, "out of memory");
    }
}

/* content: a string, or text parts joined with "\n"; NULL content is "" */
static int flatten_content(json_t *content, Message *m, size_t i, bool null_ok, Error *err) {
    ByteBuf text = {0};
    if (json_is_string(content)) {
        if (byte_buf_append(&text, json_string_value(content), json_string_length(content)))
            goto oom;
    } else if (json_is_array(content)) {
        size_t k;
        json_t *part;
        json_array_foreach(content, k, part) {
            const char *type = json_string_value(json_object_get(part, "type"));
            json_t *t = json_object_get(part, "text");
            if (!type || strcmp(type, "text") != 0 || !json_is_string(t)) {
                byte_buf_free(&text);
                return error_set(err, "messages[%zu].content[%zu]: only {\"type\": \"text\", "
                                      "\"text\": ...} parts are supported", i, k);
            }
            if ((k && byte_buf_append(&text, "\n", 1)) ||
                byte_buf_append(&text, json_string_value(t), json_string_length(t)))
                goto oom;
        }
    } else if (!null_ok || (content && !json_is_null(content))) {
        return error_set(err, "messages[%zu].content must be a string or a list of text parts%s",
                         i, content ? "" : " (it is missing)");
    }
    if (byte_buf_append(&text, "", 1)) goto oom;
    m->content = text.data;
    m->content_len = text.len - 1;
    return 0;
oom:
    byte_buf_free(&text);
    return error_set(err, "out of memory");
}

static int check_tool_calls(json_t *calls, size_t i, Error *err) {
    if (!json_is_array(calls)) return error_set(err, "messages[%zu].tool_calls must be a list", i);
    size_t k;
    json_t *call;
    json_array_foreach(calls, k, call) {
        json_t *f = json_object_get(call, "function");
        /* {%- if tool_call.function %}: a non-empty object replaces the call */
        if (json_is_object(f) && json_object_size(f)) call = f;
        if (!json_is_object(call) || !json_is_string(json_object_get(call, "name")) ||
            !json_object_get(call, "arguments"))
            return error_set(err, "messages[%zu].tool_calls[%zu] needs a function with a string "
                                  "'name' and 'arguments'", i, k);
    }
    return 0;
}

static int parse_messages(json_t *list, Message **out, size_t *count, Error *err) {
    if (!json_is_array(list)) return error_set(err, "'messages' must be a list");
    size_t n = json_array_size(list);
    if (n == 0) return error_set(err, "'messages' is empty");
    Message *ms = calloc(n, sizeof *ms);
    if (!ms) return error_set(err, "out of memory");
    static const char *names[] = {"system", "user", "assistant", "tool"};
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(list, i);
        Message *msg = &ms[i];
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || !role) {
            error_set(err, "messages[%zu] must be an object with a string 'role'", i);
            goto fail;
        }
        int r = -1;
        for (int k = 0; k < 4; k++)
            if (strcmp(role, names[k]) == 0) r = k;
        if (r < 0) {
            error_set(err, "messages[%zu].role '%.40s' is not one of system, user, assistant, "
                           "tool", i, role);
            goto fail;
        }
        msg->role = (Role)r;
        msg->role_name = names[r];
        json_t *calls = json_object_get(m, "tool_calls");
        if (calls && !json_is_null(calls)) {
            if (msg->role != ROLE_ASSISTANT) {
                error_set(err, "messages[%zu]: only assistant messages have tool_calls", i);
                goto fail;
            }
            if (check_tool_calls(calls, i, err)) goto fail;
            if (json_array_size(calls)) msg->tool_calls = calls;
        }
        if (flatten_content(json_object_get(m, "content"), msg, i, msg->tool_calls != NULL, err))
            goto fail;
        json_t *reasoning = json_object_get(m, "reasoning_content");
        if (reasoning && !json_is_null(reasoning)) {
            if (!json_is_string(reasoning)) {
                error_set(err, "messages[%zu].reasoning_content must be a string", i);
                goto fail;
            }
            if (msg->role == ROLE_ASSISTANT) msg->reasoning = reasoning;
        }
    }
    *out = ms;
    *count = n;
    return 0;
fail:
    for (size_t i = 0; i < n; i++) free(ms[i].content);
    free(ms);
    return -1;
}

/* ---- Python string helpers on (pointer, length) ---- */

typedef struct Str {
    const char *p;
    size_t n;
} Str;

static const char *find_last(Str s, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = s.n >= k ? s.n - k + 1 : 0; i-- > 0;)
        if (memcmp(s.p + i, needle, k) == 0) return s.p + i;
    return NULL;
}

static const char *find_first(Str s, const char *needle) {
    return memmem(s.p, s.n, needle, strlen(needle));
}

static Str lstrip_nl(Str s) {
    while (s.n && s.p[0] == '\n') s.p++, s.n--;
    return s;
}
static Str rstrip_nl(Str s) {
    while (s.n && s.p[s.n - 1] == '\n') s.n--;
    return s;
}

static bool starts_with(Str s, const char *pre) {
    size_t k = strlen(pre);
    return s.n >= k && memcmp(s.p, pre, k) == 0;
}
static bool ends_with(Str s, const char *suf) {
    size_t k = strlen(suf);
    return s.n >= k && memcmp(s.p + s.n - k, suf, k) == 0;
}

/* ---- the Qwen3 template ---- */

static void render_tool_calls(Builder *b, json_t *calls, Str content) {
    size_t k;
    json_t *call;
    json_array_foreach(calls, k, call) {
        /* {%- if (loop.first and content) or (not loop.first) %} */
        if (k > 0 || content.n) adds(b, "\n");
        json_t *f = json_object_get(call, "function");
        if (json_is_object(f) && json_object_size(f)) call = f;
        json_t *name = json_object_get(call, "name"), *args = json_object_get(call, "arguments");
        adds(b, "<tool_call>\n{\"name\": \"");
        add(b, json_string_value(name), json_string_length(name));
        adds(b, "\", \"arguments\": ");
        if (json_is_string(args)) add(b, json_string_value(args), json_string_length(args));
        else add_json(b, args);
        adds(b, "}\n</tool_call>");
    }
}

static void render_assistant(Builder *b, const Message *m, bool after_last_query, bool last) {
    Str content = {m->content, m->content_len}, reasoning = {"", 0};
    if (m->reasoning) {
        reasoning = (Str){json_string_value(m->reasoning), json_string_length(m->reasoning)};
    } else if (find_first(content, "</think>")) {
        const char *close_last = find_last(content, "</think>");
        const char *close_first = find_first(content, "</think>");
        Str after = {close_last + 8, (size_t)(content.p + content.n - close_last - 8)};
        Str before = rstrip_nl((Str){content.p, (size_t)(close_first - content.p)});
        const char *open = find_last(before, "<think>");
        if (open) before = (Str){open + 7, (size_t)(before.p + before.n - open - 7)};
        reasoning = lstrip_nl(before);
        content = lstrip_nl(after);
    }
    adds(b, "<|im_start|>assistant\n");
    /* {%- if loop.index0 > ns.last_query_index %} and (loop.last or reasoning_content) */
    Str shown = content;
    if (after_last_query && (last || reasoning.n)) {
        adds(b, "<think>\n");
        Str r = rstrip_nl(lstrip_nl(reasoning));
        add(b, r.p, r.n);
        adds(b, "\n</think>\n\n");
        shown = lstrip_nl(content);
    }
    add(b, shown.p, shown.n);
    /* The tool calls test `content` itself, not the stripped text shown. */
    if (m->tool_calls) render_tool_calls(b, m->tool_calls, content);
    adds(b, "<|im_end|>\n");
}

static void render_qwen3(Builder *b, const Message *ms, size_t n, json_t *tools, bool gen,
                         int thinking /* -1 unset, 0 false, 1 true */) {
    bool has_tools = json_array_size(tools) > 0;
    if (has_tools) {
        adds(b, "<|im_start|>system\n");
        if (ms[0].role == ROLE_SYSTEM) {
            add(b, ms[0].content, ms[0].content_len);
            adds(b, "\n\n");
        }
        adds(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n"
                "<tools>");
        for (size_t i = 0; i < json_array_size(tools); i++) {
            adds(b, "\n");
            add_json(b, json_array_get(tools, i));
        }
        adds(b, "\n</tools>\n\nFor each function call, return a json object with function name "
                "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
                "</tool_call><|im_end|>\n");
    } else if (ms[0].role == ROLE_SYSTEM) {
        adds(b, "<|im_start|>system\n");
        add(b, ms[0].content, ms[0].content_len);
        adds(b, "<|im_end|>\n");
    }
    /* The last user message that is not a wrapped tool response. */
    size_t last_query = n - 1;
    for (size_t k = n; k-- > 0;) {
        Str c = {ms[k].content, ms[k].content_len};
        if (ms[k].role == ROLE_USER &&
            !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const Message *m = &ms[i];
        if (m->role == ROLE_USER || (m->role == ROLE_SYSTEM && i > 0)) {
            adds(b, "<|im_start|>");
            adds(b, m->role_name);
            adds(b, "\n");
            add(b, m->content, m->content_len);
            adds(b, "<|im_end|>\n");
        } else if (m->role == ROLE_ASSISTANT) {
            render_assistant(b, m, i > last_query, i + 1 == n);
        } else if (m->role == ROLE_TOOL) {
            if (i == 0 || ms[i - 1].role != ROLE_TOOL) adds(b, "<|im_start|>user");
            adds(b, "\n<tool_response>\n");
            add(b, m->content, m->content_len);
            adds(b, "\n</tool_response>");
            if (i + 1 == n || ms[i + 1].role != ROLE_TOOL) adds(b, "<|im_end|>\n");
        }
    }
    if (gen) {
        adds(b, "<|im_start|>assistant\n");
        if (thinking == 0) adds(b, "<think>\n\n</think>\n\n");
    }
}

static void render_chatml(Builder *b, const Message *ms, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        adds(b, "<|im_start|>");
        adds(b, ms[i].role_name);
        adds(b, "\n");
        add(b, ms[i].content, ms[i].content_len);
        adds(b, "<|im_end|>\n");
    }
    if (gen) adds(b, "<|im_start|>assistant\n");
}

/* A boolean option; absent (or null) keeps dflt. */
static int option(const json_t *obj, const char *key, int dflt, int *out, Error *err) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_boolean(v)) return error_set(err, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

char *chat_template_render(ChatTemplateKind kind, const json_t *request, size_t *len, Error *err) {
    if (!json_is_object(request)) {
        error_set(err, "the chat request must be a JSON object");
        return NULL;
    }
    int gen = 1, thinking = -1;
    json_t *kwargs = json_object_get(request, "chat_template_kwargs");
    if (kwargs && !json_is_null(kwargs) && !json_is_object(kwargs)) {
        error_set(err, "'chat_template_kwargs' must be an object");
        return NULL;
    }
    if (option(request, "add_generation_prompt", 1, &gen, err) ||
        option(request, "enable_thinking", -1, &thinking, err) ||
        option(kwargs, "enable_thinking", thinking, &thinking, err))
        return NULL;
    json_t *tools = json_object_get(request, "tools");
    if (tools && !json_is_null(tools) && !json_is_array(tools)) {
        error_set(err, "'tools' must be a list");
        return NULL;
    }
    Message *ms = NULL;
    size_t n = 0;
    if (parse_messages(json_object_get(request, "messages"), &ms, &n, err)) return NULL;
    Builder b = {.err = err};
    if (kind == CHAT_TEMPLATE_QWEN3) {
        render_qwen3(&b, ms, n, tools, gen, thinking);
    } else if (json_array_size(tools)) {
        b.failed = true;
        error_set(err, "'tools' need the Qwen3 chat template; this model's template is not "
                       "supported");
    } else {
        for (size_t i = 0; i < n && !b.failed; i++)
            if (ms[i].tool_calls) {
                b.failed = true;
                error_set(err, "messages[%zu].tool_calls need the Qwen3 chat template", i);
            }
        if (!b.failed) render_chatml(&b, ms, n, gen);
    }
    for (size_t i = 0; i < n; i++) free(ms[i].content);
    free(ms);
    add(&b, "", 1);
    if (b.failed) {
        byte_buf_free(&b.out);
        return NULL;
    }
    *len = b.out.len - 1;
    return b.out.data;
}
