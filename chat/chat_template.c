/*
 * chat_template.c - a chat request to prompt text (see chat_template.h):
 * the request checked and shaped as vLLM shapes it, the template chosen as
 * transformers chooses it, rendered by text/jinja, and
 * continue_final_message cut as transformers cuts it.
 *
 * A folder without a template gets ChatML written as a Jinja template
 * here, so that every prompt comes out of one mechanism.
 */
#include "chat_template.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/jinja/jinja.h"

static const char CHATML_TEMPLATE[] =
    "{%- if tools %}{{ raise_exception('tools need a chat template, and the model folder has "
    "none (see --chat-template)') }}{% endif %}"
    "{%- for message in messages %}"
    "{%- if message.tool_calls %}{{ raise_exception('tool calls need a chat template, and the "
    "model folder has none (see --chat-template)') }}{% endif %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

struct ChatTemplate {
    const Tokenizer *tok;
    JinjaTemplate *main;     /* NULL when the folder has only a "tool_use" template */
    JinjaTemplate *tool_use; /* for requests with tools; NULL: main */
    ChatContentFormat format;
    bool takes_tools;
    const ToolCallFormat *tool_calls; /* NULL: none, or not known */
    ChatTemplateReasoning reasoning;
};

int chat_content_format_parse(const char *name, ChatContentFormat *out) {
    static const char *const names[] = {"auto", "string", "openai", "verbatim"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = (ChatContentFormat)i;
            return 0;
        }
    return -1;
}

static JinjaTemplate *compile(const char *text, const char *what, Error *err) {
    JinjaError je;
    JinjaTemplate *t = jinja_compile(text, strlen(text), &je);
    if (!t) error_set_kind(err, ERROR_INVALID, "%s: %s", what, je.msg);
    return t;
}

ChatTemplate *chat_template_new(const Tokenizer *t, const char *text, ChatContentFormat format,
                                const char **warning, Error *err) {
    ChatTemplate *ct = calloc(1, sizeof *ct);
    if (!ct) {
        error_set(err, "out of memory");
        return NULL;
    }
    ct->tok = t;
    ct->format = format;
    if (warning) *warning = NULL;
    const char *main_text = text ? text : tokenizer_chat_template(t);
    const char *tool_text = text ? NULL : tokenizer_tool_use_template(t);
    if (!main_text && !tool_text) {
        main_text = CHATML_TEMPLATE;
        if (warning)
            *warning = "the model folder has no chat template; chat prompts use plain ChatML "
                       "(<|im_start|>role\\ncontent<|im_end|>) and tools are refused";
    }
    if ((main_text && !(ct->main = compile(main_text, "the chat template", err))) ||
        (tool_text && !(ct->tool_use = compile(tool_text, "the tool_use chat template", err)))) {
        chat_template_free(ct);
        return NULL;
    }
    /* The tool_use template, when there is one, is the one tools reach. */
    const char *with_tools = tool_text ? tool_text : main_text;
    ct->takes_tools = main_text != CHATML_TEMPLATE && with_tools && strstr(with_tools, "tools");
    ct->tool_calls = ct->takes_tools ? tool_call_format_taught_by(with_tools) : NULL;
    const char *const texts[] = {main_text, tool_text};
    for (int i = 0; i < 2; i++) {
        ct->reasoning.thinking_switch |= texts[i] && strstr(texts[i], "enable_thinking");
        ct->reasoning.effort |= texts[i] && strstr(texts[i], "reasoning_effort");
    }
    return ct;
}

void chat_template_free(ChatTemplate *ct) {
    if (!ct) return;
    jinja_free(ct->main);
    jinja_free(ct->tool_use);
    free(ct);
}

bool chat_template_takes_tools(const ChatTemplate *ct) { return ct->takes_tools; }

const ToolCallFormat *chat_template_tool_call_format(const ChatTemplate *ct) { return ct->tool_calls; }

ChatTemplateReasoning chat_template_reasoning(const ChatTemplate *ct) { return ct->reasoning; }

double chat_template_clock(void) {
    const char *fixed = getenv("SOURCE_DATE_EPOCH");
    char *end;
    if (fixed && *fixed) {
        double v = strtod(fixed, &end);
        if (!*end) return v;
    }
    return (double)time(NULL);
}

/* ---- the request, shaped as vLLM shapes it ---- */

/* content: a string stays; text parts are joined or kept; null is "" or []. */
static json_t *shape_content(json_t *content, bool as_parts, size_t i, Error *err) {
    if (json_is_string(content)) return json_incref(content);
    if (!content || json_is_null(content)) return as_parts ? json_array() : json_string("");
    if (!json_is_array(content)) {
        error_set_kind(err, ERROR_INVALID, "messages[%zu].content must be a string, a list of text "
                                           "parts or null", i);
        return NULL;
    }
    size_t k;
    json_t *part;
    json_array_foreach(content, k, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        if (type && (strstr(type, "image") || strstr(type, "video") || strstr(type, "audio"))) {
            /* A multimodal checkpoint (Qwen3.5) serves its text model only. */
            error_set_kind(err, ERROR_INVALID, "messages[%zu].content[%zu]: '%s' parts are not "
                                               "supported: nanovllm serves the text model only (image, "
                                               "video and audio inputs are refused)", i, k, type);
            return NULL;
        }
        if (!type || strcmp(type, "text") != 0 || !json_is_string(json_object_get(part, "text"))) {
            error_set_kind(err, ERROR_INVALID, "messages[%zu].content[%zu]: only {\"type\": \"text\", "
                                               "\"text\": ...} parts are supported", i, k);
            return NULL;
        }
    }
    if (as_parts) return json_incref(content);
    ByteBuf text = {0};
    json_array_foreach(content, k, part) {
        json_t *t = json_object_get(part, "text");
        if ((k && byte_buf_append(&text, "\n", 1)) ||
            byte_buf_append(&text, json_string_value(t), json_string_length(t))) {
            byte_buf_free(&text);
            error_set(err, "out of memory");
            return NULL;
        }
    }
    json_t *s = json_stringn(text.data ? text.data : "", text.len);
    byte_buf_free(&text);
    if (!s) error_set(err, "out of memory");
    return s;
}

/* SDKs send null for every field a caller left unset; a template testing
 * `is defined` (or printing a tool with tojson) must see the same thing
 * either way, so null members go. o may be any value. */
static void drop_nulls(json_t *o) {
    const char *key;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(o, tmp, key, v) {
        if (json_is_null(v)) json_object_del(o, key);
    }
}

/* OpenAI sends a tool call's arguments as a JSON string; templates expect
 * the object (vLLM parses it too). A string that is not a JSON object stays. */
static json_t *shape_tool_calls(json_t *calls, size_t i, Error *err) {
    if (!json_is_array(calls)) {
        error_set_kind(err, ERROR_INVALID, "messages[%zu].tool_calls must be a list", i);
        return NULL;
    }
    json_t *out = json_deep_copy(calls);
    if (!out) {
        error_set(err, "out of memory");
        return NULL;
    }
    size_t k;
    json_t *call;
    json_array_foreach(out, k, call) {
        drop_nulls(call);
        json_t *f = json_object_get(call, "function");
        drop_nulls(f);
        json_t *args = json_object_get(f, "arguments");
        if (!json_is_string(args)) continue;
        json_t *parsed = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
        if (json_is_object(parsed)) json_object_set(f, "arguments", parsed);
        json_decref(parsed);
    }
    return out;
}

/* OpenAI's roles (others are a 400 there too: a template would drop a
 * message it does not know without a word); content may be missing or null
 * only for an assistant's turn. */
static int check_message(json_t *m, size_t i, Error *err) {
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool", "function"};
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!json_is_object(m) || !role)
        return error_set_kind(err, ERROR_INVALID, "messages[%zu] must be an object with a string 'role'", i);
    size_t k = 0;
    while (k < sizeof roles / sizeof roles[0] && strcmp(role, roles[k]) != 0) k++;
    if (k == sizeof roles / sizeof roles[0])
        return error_set_kind(err, ERROR_INVALID, "messages[%zu].role '%.40s' is not one of system, "
                                                  "developer, user, assistant, tool, function", i, role);
    json_t *content = json_object_get(m, "content");
    if ((!content || json_is_null(content)) && strcmp(role, "assistant") != 0)
        return error_set_kind(err, ERROR_INVALID, "messages[%zu].content is required for role '%s'", i,
                              role);
    return 0;
}

/* A message's copy, its unset (null) fields gone. */
static json_t *without_nulls(json_t *o) {
    json_t *out = json_copy(o);
    drop_nulls(out);
    return out;
}

/* The thinking of an earlier assistant turn, which clients pass back as
 * vLLM's older "reasoning_content" or its current "reasoning": templates
 * (Qwen3's) read reasoning_content, newer ones reasoning, so the message
 * gets both. reasoning_content wins when both are given. */
static int shape_reasoning(json_t *copy, size_t i, Error *err) {
    json_t *given = json_object_get(copy, "reasoning_content");
    if (!given) given = json_object_get(copy, "reasoning");
    if (!given) return 0;
    if (!json_is_string(given))
        return error_set_kind(err, ERROR_INVALID, "messages[%zu].reasoning_content (or reasoning) must "
                                                  "be a string", i);
    if (json_object_set(copy, "reasoning", given) || json_object_set(copy, "reasoning_content", given))
        return error_set(err, "out of memory");
    return 0;
}

static json_t *shape_messages(const ChatTemplate *ct, const JinjaTemplate *jt, json_t *list,
                              Error *err) {
    if (!json_is_array(list)) {
        error_set_kind(err, ERROR_INVALID, "'messages' must be a list");
        return NULL;
    }
    if (json_array_size(list) == 0) {
        error_set_kind(err, ERROR_INVALID, "'messages' is empty");
        return NULL;
    }
    size_t i;
    json_t *m;
    json_array_foreach(list, i, m) {
        if (check_message(m, i, err)) return NULL;
    }
    if (ct->format == CHAT_CONTENT_VERBATIM) return json_incref(list);
    bool as_parts = ct->format == CHAT_CONTENT_OPENAI ||
                    (ct->format == CHAT_CONTENT_AUTO && jinja_iterates_content(jt));
    json_t *out = json_array();
    if (!out) goto oom;
    json_array_foreach(list, i, m) {
        json_t *copy = without_nulls(m), *content, *calls;
        if (!copy || json_array_append_new(out, copy)) {
            json_decref(copy);
            goto oom_out;
        }
        if (!(content = shape_content(json_object_get(m, "content"), as_parts, i, err))) goto fail;
        if (json_object_set_new(copy, "content", content)) goto oom_out;
        if (shape_reasoning(copy, i, err)) goto fail;
        json_t *tc = json_object_get(copy, "tool_calls");
        if (!tc) continue;
        if (!(calls = shape_tool_calls(tc, i, err))) goto fail;
        if (json_object_set_new(copy, "tool_calls", calls)) goto oom_out;
    }
    return out;
oom_out:
    json_decref(out);
oom:
    error_set(err, "out of memory");
    return NULL;
fail:
    json_decref(out);
    return NULL;
}

static int get_flag(const json_t *o, const char *key, bool dflt, bool *out, Error *err) {
    json_t *v = json_object_get(o, key);
    *out = dflt;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return error_set_kind(err, ERROR_INVALID, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

static int get_list(const json_t *o, const char *key, json_t **out, Error *err) {
    json_t *v = json_object_get(o, key);
    *out = v && !json_is_null(v) ? v : NULL;
    if (*out && !json_is_array(v)) return error_set_kind(err, ERROR_INVALID, "'%s' must be a list", key);
    return 0;
}

/* The tools as the template sees them: their unset (null) fields gone, so
 * that `tool | tojson` prints the same tool whether a client left a field
 * out or sent it as null. A new reference, NULL when out of memory. */
static json_t *shape_tools(json_t *tools) {
    json_t *out = json_deep_copy(tools);
    size_t i;
    json_t *tool;
    json_array_foreach(out, i, tool) {
        drop_nulls(tool);
        drop_nulls(json_object_get(tool, "function"));
    }
    return out;
}

static const char *const RESERVED_KWARGS[] = {"messages", "tools", "documents", "add_generation_prompt",
                                              "continue_final_message"};

int chat_template_kwargs_check(const json_t *kwargs, const char *what, Error *err) {
    if (!json_is_object(kwargs)) return error_set_kind(err, ERROR_INVALID, "'%s' must be an object", what);
    for (size_t i = 0; i < sizeof RESERVED_KWARGS / sizeof RESERVED_KWARGS[0]; i++)
        if (json_object_get(kwargs, RESERVED_KWARGS[i]))
            return error_set_kind(err, ERROR_INVALID, "'%s' may not set '%s' (it is a field of the "
                                                      "request)", what, RESERVED_KWARGS[i]);
    return 0;
}

json_t *chat_template_kwargs_merge(const json_t *defaults, const json_t *request, Error *err) {
    json_t *kwargs = json_object_get(request, "chat_template_kwargs");
    if (json_is_null(kwargs)) kwargs = NULL; /* SDKs send null for an unset field */
    if (kwargs && chat_template_kwargs_check(kwargs, "chat_template_kwargs", err)) return NULL;
    json_t *thinking = json_object_get(request, "enable_thinking"); /* shorthand for the kwarg */
    if (json_is_null(thinking)) thinking = NULL;
    if (thinking && !json_is_boolean(thinking)) {
        error_set_kind(err, ERROR_INVALID, "'enable_thinking' must be true or false");
        return NULL;
    }
    json_t *out = json_is_object(defaults) ? json_copy((json_t *)defaults) : json_object();
    bool failed = !out || (thinking && json_object_set(out, "enable_thinking", thinking));
    const char *key;
    json_t *value;
    /* a variable given as null is not given: the server's default stays */
    json_object_foreach(kwargs, key, value) failed |= !json_is_null(value) && json_object_set(out, key, value);
    if (failed) {
        json_decref(out);
        error_set(err, "out of memory");
        return NULL;
    }
    return out;
}

/* The template's variables; *jt is the template to run. */
static json_t *build_vars(const ChatTemplate *ct, const json_t *req, const json_t *default_kwargs,
                          const JinjaTemplate **jt, bool *cont, Error *err) {
    bool gen;
    json_t *tools, *documents;
    if (get_flag(req, "add_generation_prompt", true, &gen, err) ||
        get_flag(req, "continue_final_message", false, cont, err) ||
        get_list(req, "tools", &tools, err) || get_list(req, "documents", &documents, err))
        return NULL;
    if (gen && *cont) {
        error_set_kind(err, ERROR_INVALID, "'continue_final_message' needs \"add_generation_prompt\": "
                                           "false");
        return NULL;
    }
    /* transformers: "tool_use" when tools are given and the folder has one. */
    *jt = tools && ct->tool_use ? ct->tool_use : ct->main;
    if (!*jt) {
        error_set_kind(err, ERROR_INVALID, "this model's chat templates are for requests with "
                                           "'tools' only (it has a \"tool_use\" template and no "
                                           "\"default\")");
        return NULL;
    }
    json_t *kwargs = chat_template_kwargs_merge(default_kwargs, req, err);
    if (!kwargs) return NULL;
    json_t *messages = shape_messages(ct, *jt, json_object_get(req, "messages"), err);
    if (!messages) {
        json_decref(kwargs);
        return NULL;
    }
    json_t *vars = json_copy((json_t *)tokenizer_special_token_strings(ct->tok));
    if (!vars) vars = json_object();
    if (!vars || json_object_set_new(vars, "messages", messages) ||
        json_object_set_new(vars, "tools", tools ? shape_tools(tools) : json_null()) ||
        json_object_set(vars, "documents", documents ? documents : json_null()) ||
        json_object_set_new(vars, "add_generation_prompt", json_boolean(gen)) ||
        json_object_update(vars, kwargs)) {
        json_decref(vars);
        json_decref(kwargs);
        error_set(err, "out of memory");
        return NULL;
    }
    json_decref(kwargs);
    return vars;
}

/* transformers' continue_final_message: the prompt ends where the final
 * message's text does, so the model continues it. */
static int cut_after_final_message(const json_t *messages, char *text, size_t *len, Error *err) {
    json_t *final = json_object_get(json_array_get(messages, json_array_size(messages) - 1), "content");
    if (json_is_array(final)) {
        json_t *found = NULL;
        for (size_t k = json_array_size(final); k-- > 0 && !found;)
            found = json_object_get(json_array_get(final, k), "text");
        final = found;
    }
    if (!json_is_string(final))
        return error_set_kind(err, ERROR_INVALID, "continue_final_message: the final message has no "
                                                  "text to continue");
    const char *f = json_string_value(final);
    size_t n = json_string_length(final), lo, hi;
    jinja_py_strip(f, n, &lo, &hi);
    const char *at = NULL; /* the last occurrence of the stripped text */
    for (size_t i = *len + 1; i-- > 0;)
        if (i + (hi - lo) <= *len && memcmp(text + i, f + lo, hi - lo) == 0) {
            at = text + i;
            break;
        }
    if (!at)
        return error_set_kind(err, ERROR_INVALID, "continue_final_message: the final message does "
                                                  "not appear in the rendered chat");
    size_t keep = (size_t)(at - text);
    /* the text as sent when the template kept its spaces, else stripped */
    if (lo == 0 && keep + n <= *len && memcmp(at, f, n) == 0) keep += n;
    else keep += hi - lo;
    text[keep] = '\0';
    *len = keep;
    return 0;
}

char *chat_template_render(const ChatTemplate *ct, const json_t *request, double now, size_t *len,
                           Error *err) {
    return chat_template_render_with(ct, request, NULL, now, len, err);
}

char *chat_template_render_with(const ChatTemplate *ct, const json_t *request, const json_t *default_kwargs,
                                double now, size_t *len, Error *err) {
    if (!json_is_object(request)) {
        error_set_kind(err, ERROR_INVALID, "the chat request must be a JSON object");
        return NULL;
    }
    const JinjaTemplate *jt;
    bool cont = false;
    json_t *vars = build_vars(ct, request, default_kwargs, &jt, &cont, err);
    if (!vars) return NULL;
    JinjaError je;
    char *text = jinja_render(jt, vars, now, NULL, len, &je);
    if (!text) {
        if (je.raised) error_set_kind(err, ERROR_INVALID, "%s", je.msg);
        else error_set_kind(err, ERROR_INVALID, "the chat template failed: %s", je.msg);
    } else if (cont && cut_after_final_message(json_object_get(vars, "messages"), text, len, err)) {
        free(text);
        text = NULL;
    }
    json_decref(vars);
    return text;
}
