/*
 * api_responses.c - a Responses request on arrival: checked, and turned
 * into the chat body it stands for (see api_responses.h); and the stored
 * responses' own routes, GET and DELETE /v1/responses/{id}.
 *
 * Input items map onto chat messages as the chat templates expect them:
 * a message keeps its role (developer is system), its text parts become
 * the content; the model's earlier reasoning, text and function calls
 * between two other items fold into one assistant message (reasoning as
 * reasoning_content, calls as tool_calls); a function_call_output is a
 * tool message. Instructions come first as a system message and, as
 * OpenAI specifies, are not carried over by previous_response_id. What
 * cannot be honoured (hosted tools, files and images, background runs,
 * includes, server-side truncation) is a 400 naming it, never ignored.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "base/log.h" /* now_seconds */

void api_responses_free(ResponsesState *st) {
    if (!st) return;
    json_decref(st->request);
    json_decref(st->conversation);
    json_decref(st->output);
    byte_buf_free(&st->open_text);
    free(st);
}

/* A field that is absent or null is not given (SDKs send null for unset ones). */
static json_t *given(const json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

/* ---- input items to chat messages ------------------------------------------------------------ */

/* A content list's text parts joined (the model's own text, a tool's
 * output), or its parts as chat's [{type: text}] (a user's message). */
static json_t *content_of(const json_t *content, const char *where, bool join, ApiError *err) {
    if (json_is_string(content)) return json_incref((json_t *)content);
    if (!json_is_array(content)) {
        api_error(err, 400, "input", "%s: 'content' must be a string or a list of parts", where);
        return NULL;
    }
    ByteBuf joined = {0};
    json_t *parts = json_array();
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *key = type && strcmp(type, "refusal") == 0 ? "refusal" : "text";
        const json_t *text = json_object_get(part, key);
        bool textual = type && (strcmp(type, "input_text") == 0 || strcmp(type, "output_text") == 0 ||
                                strcmp(type, "text") == 0 || strcmp(type, "refusal") == 0);
        if (!textual) {
            api_error(err, 400, "input", "%s: content part type '%s' is not supported (text only)", where,
                      type ? type : "(none)");
            goto fail;
        }
        if (!json_is_string(text)) {
            api_error(err, 400, "input", "%s: a '%s' part needs a string '%s'", where, type, key);
            goto fail;
        }
        if (byte_buf_append(&joined, json_string_value(text), json_string_length(text)) ||
            !parts || json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text", text)))
            goto oom;
    }
    json_t *out = join || json_array_size(parts) == 1 ? json_stringn(joined.data ? joined.data : "", joined.len)
                                                       : json_incref(parts);
    byte_buf_free(&joined);
    json_decref(parts);
    if (!out) api_error(err, 500, NULL, "out of memory");
    return out;
oom:
    api_error(err, 500, NULL, "out of memory");
fail:
    byte_buf_free(&joined);
    json_decref(parts);
    return NULL;
}

/* The assistant message the model's items fold into: the open one, or a new one. */
static json_t *assistant(json_t *messages, json_t **open) {
    if (!*open) {
        *open = json_pack("{s:s, s:n}", "role", "assistant", "content");
        if (!*open || json_array_append_new(messages, *open)) return *open = NULL;
    }
    return *open;
}

static int add_reasoning(json_t *msg, const json_t *item, ApiError *err) {
    ByteBuf text = {0};
    const json_t *lists[2] = {json_object_get(item, "content"), json_object_get(item, "summary")};
    for (int l = 0; l < 2; l++) {
        size_t i;
        json_t *part;
        json_array_foreach(lists[l], i, part) {
            const json_t *t = json_object_get(part, "text");
            if (!json_is_string(t)) {
                byte_buf_free(&text);
                return api_error(err, 400, "input", "a reasoning item's parts need a string 'text'");
            }
            byte_buf_append(&text, json_string_value(t), json_string_length(t));
        }
        if (text.len > 0) break; /* the full text when given, else the summary */
    }
    int rc = text.len == 0 ? 0
             : json_object_set_new(msg, "reasoning_content", json_stringn(text.data, text.len))
                 ? api_error(err, 500, NULL, "out of memory")
                 : 0;
    byte_buf_free(&text);
    return rc;
}

static int add_function_call(json_t *msg, const json_t *item, ApiError *err) {
    const json_t *call_id = json_object_get(item, "call_id"), *name = json_object_get(item, "name"),
                 *args = json_object_get(item, "arguments");
    if (!json_is_string(call_id) || !json_is_string(name) || !json_is_string(args))
        return api_error(err, 400, "input", "a function_call item needs string 'call_id', 'name' and 'arguments'");
    json_t *calls = json_object_get(msg, "tool_calls");
    if (!calls && json_object_set_new(msg, "tool_calls", calls = json_array())) return api_error(err, 500, NULL, "out of memory");
    if (json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", call_id, "type", "function",
                                               "function", "name", name, "arguments", args)))
        return api_error(err, 500, NULL, "out of memory");
    return 0;
}

static int add_item(json_t *messages, json_t **open, const json_t *item, size_t index, ApiError *err) {
    char where[48];
    snprintf(where, sizeof where, "input[%zu]", index);
    if (!json_is_object(item)) return api_error(err, 400, "input", "%s must be an object", where);
    const json_t *type = given(item, "type");
    const char *t = type ? json_string_value(type) : "message";
    if (!t) return api_error(err, 400, "input", "%s: 'type' must be a string", where);
    if (strcmp(t, "message") == 0) {
        const char *role = json_string_value(json_object_get(item, "role"));
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") &&
                      strcmp(role, "developer")))
            return api_error(err, 400, "input", "%s: 'role' must be user, assistant, system or developer", where);
        bool mine = strcmp(role, "assistant") == 0;
        json_t *content = content_of(json_object_get(item, "content"), where, mine, err);
        if (!content) return -1;
        if (mine) {
            json_t *msg = *open && json_is_null(json_object_get(*open, "content")) &&
                                  !json_object_get(*open, "tool_calls") ? *open : NULL;
            if (!msg) *open = NULL;
            if (!(msg = assistant(messages, open)) || json_object_set_new(msg, "content", content))
                return api_error(err, 500, NULL, "out of memory");
            return 0;
        }
        *open = NULL;
        if (json_array_append_new(messages, json_pack("{s:s, s:o}", "role", strcmp(role, "developer") == 0 ? "system" : role,
                                                      "content", content)))
            return api_error(err, 500, NULL, "out of memory");
        return 0;
    }
    if (strcmp(t, "reasoning") == 0 || strcmp(t, "function_call") == 0) {
        if (strcmp(t, "reasoning") == 0 && *open && json_object_get(*open, "reasoning_content")) *open = NULL;
        json_t *msg = assistant(messages, open);
        if (!msg) return api_error(err, 500, NULL, "out of memory");
        return strcmp(t, "reasoning") == 0 ? add_reasoning(msg, item, err) : add_function_call(msg, item, err);
    }
    if (strcmp(t, "function_call_output") == 0) {
        *open = NULL;
        const json_t *call_id = json_object_get(item, "call_id");
        if (!json_is_string(call_id)) return api_error(err, 400, "input", "%s: a function_call_output needs a string 'call_id'", where);
        json_t *output = content_of(json_object_get(item, "output"), where, true, err);
        if (!output) return -1;
        if (json_array_append_new(messages, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", call_id,
                                                      "content", output)))
            return api_error(err, 500, NULL, "out of memory");
        return 0;
    }
    return api_error(err, 400, "input", "%s: items of type '%s' are not supported (message, function_call, "
                     "function_call_output and reasoning are)", where, t);
}

/* The conversation so far: the previous response's, then this input. */
static json_t *conversation(ApiRequest *r, const json_t *body, ApiError *err) {
    const json_t *input = given(body, "input"), *prev = given(body, "previous_response_id");
    if (!input) {
        api_error(err, 400, "input", "'input' is required");
        return NULL;
    }
    json_t *messages = NULL;
    if (prev) {
        json_t *stored = NULL;
        if (!json_is_string(prev)) {
            api_error(err, 400, "previous_response_id", "'previous_response_id' must be a string");
            return NULL;
        }
        if (!response_store_get(r->srv->responses, json_string_value(prev), now_seconds(), NULL, &stored)) {
            api_error(err, 404, "previous_response_id", "Previous response with id '%s' not found.",
                      json_string_value(prev));
            err->code = "previous_response_not_found";
            return NULL;
        }
        messages = json_deep_copy(stored);
    } else {
        messages = json_array();
    }
    if (!messages) {
        api_error(err, 500, NULL, "out of memory");
        return NULL;
    }
    if (json_is_string(input)) {
        if (json_array_append_new(messages, json_pack("{s:s, s:O}", "role", "user", "content", input)))
            goto oom;
        return messages;
    }
    if (!json_is_array(input)) {
        api_error(err, 400, "input", "'input' must be a string or a list of items");
        goto fail;
    }
    json_t *open = NULL;
    size_t i;
    json_t *item;
    json_array_foreach(input, i, item) if (add_item(messages, &open, item, i, err)) goto fail;
    if (json_array_size(messages) == 0) {
        api_error(err, 400, "input", "'input' must not be empty");
        goto fail;
    }
    return messages;
oom:
    api_error(err, 500, NULL, "out of memory");
fail:
    json_decref(messages);
    return NULL;
}

/* ---- the other fields -------------------------------------------------------------------------- */

static int refuse_unsupported(const json_t *body, ApiError *err) {
    if (json_is_true(json_object_get(body, "background")))
        return api_error(err, 400, "background", "'background' responses are not supported");
    static const char *const never_given[] = {"conversation", "prompt", "max_tool_calls", "context_management"};
    for (size_t i = 0; i < sizeof never_given / sizeof never_given[0]; i++)
        if (given(body, never_given[i]))
            return api_error(err, 400, never_given[i], "'%s' is not supported", never_given[i]);
    const json_t *include = given(body, "include");
    if (include && (!json_is_array(include) || json_array_size(include) > 0))
        return api_error(err, 400, "include", "'include' is not supported (nothing extra can be included)");
    const json_t *truncation = given(body, "truncation");
    if (truncation && !(json_is_string(truncation) && strcmp(json_string_value(truncation), "disabled") == 0))
        return api_error(err, 400, "truncation", "only \"truncation\": \"disabled\" is supported (use "
                                                 "'truncate_prompt_tokens' to cut the prompt)");
    const json_t *top_logprobs = given(body, "top_logprobs");
    if (top_logprobs && !(json_is_integer(top_logprobs) && json_integer_value(top_logprobs) == 0))
        return api_error(err, 400, "top_logprobs", "'top_logprobs' is not supported in /v1/responses (use "
                                                   "/v1/chat/completions)");
    const json_t *text = given(body, "text");
    if (text && !json_is_object(text)) return api_error(err, 400, "text", "'text' must be an object");
    const json_t *verbosity = given(text, "verbosity");
    if (verbosity && !(json_is_string(verbosity) && strcmp(json_string_value(verbosity), "medium") == 0))
        return api_error(err, 400, "text.verbosity", "'text.verbosity' other than \"medium\" is not supported");
    const json_t *metadata = given(body, "metadata");
    if (metadata) {
        if (!json_is_object(metadata) || json_object_size(metadata) > 16)
            return api_error(err, 400, "metadata", "'metadata' must be an object of at most 16 strings");
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)metadata, key, v)
            if (!json_is_string(v) || strlen(key) > 64 || json_string_length(v) > 512)
                return api_error(err, 400, "metadata", "'metadata' values must be strings (keys up to 64 "
                                                       "characters, values up to 512)");
    }
    return 0;
}

/* tools: [{type: function, name, description, parameters, strict}] as chat's. */
static int set_tools(json_t *chat, const json_t *body, ApiError *err) {
    const json_t *tools = given(body, "tools");
    if (!tools) return 0;
    if (!json_is_array(tools)) return api_error(err, 400, "tools", "'tools' must be a list");
    json_t *out = json_array();
    if (!out || json_object_set_new(chat, "tools", out)) return api_error(err, 500, NULL, "out of memory");
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool) {
        const char *type = json_string_value(json_object_get(tool, "type"));
        if (!json_is_object(tool) || !type)
            return api_error(err, 400, "tools", "tools[%zu] must be an object with a 'type'", i);
        if (strcmp(type, "function") != 0)
            return api_error(err, 400, "tools", "tools[%zu]: '%s' tools are not supported (only 'function')", i, type);
        json_t *fn = json_object();
        const char *keys[] = {"name", "description", "parameters", "strict"};
        for (int k = 0; fn && k < 4; k++) {
            json_t *v = given(tool, keys[k]);
            if (v && json_object_set(fn, keys[k], v)) json_decref(fn), fn = NULL;
        }
        if (!fn || json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn)))
            return api_error(err, 500, NULL, "out of memory");
    }
    return 0;
}

static int set_tool_choice(json_t *chat, const json_t *body, ApiError *err) {
    const json_t *choice = given(body, "tool_choice");
    if (!choice || json_is_string(choice)) return choice ? json_object_set(chat, "tool_choice", (json_t *)choice) : 0;
    const char *type = json_string_value(json_object_get(choice, "type"));
    if (!json_is_object(choice) || !type)
        return api_error(err, 400, "tool_choice", "'tool_choice' must be auto, none, required or {\"type\": "
                                                  "\"function\", \"name\": ...}");
    if (strcmp(type, "function") != 0)
        return api_error(err, 400, "tool_choice", "'tool_choice' of type '%s' is not supported", type);
    const json_t *name = json_object_get(choice, "name");
    if (!json_is_string(name)) return api_error(err, 400, "tool_choice", "'tool_choice' needs a string 'name'");
    if (json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name)))
        return api_error(err, 500, NULL, "out of memory");
    return 0;
}

/* text.format: text, json_object, or json_schema {name, schema, strict, description}. */
static int set_format(json_t *chat, const json_t *body, ApiError *err) {
    const json_t *format = given(given(body, "text"), "format");
    if (!format) return 0;
    const char *type = json_string_value(json_object_get(format, "type"));
    if (!json_is_object(format) || !type)
        return api_error(err, 400, "text.format", "'text.format' must be an object with a 'type'");
    json_t *rf = NULL;
    if (strcmp(type, "text") == 0) return 0;
    if (strcmp(type, "json_object") == 0) {
        rf = json_pack("{s:s}", "type", "json_object");
    } else if (strcmp(type, "json_schema") == 0) {
        json_t *schema = json_object();
        const char *keys[] = {"name", "schema", "strict", "description"};
        for (int k = 0; schema && k < 4; k++) {
            json_t *v = given(format, keys[k]);
            if (v && json_object_set(schema, keys[k], v)) json_decref(schema), schema = NULL;
        }
        if (schema && !json_object_get(schema, "schema")) {
            json_decref(schema);
            return api_error(err, 400, "text.format", "'text.format' of type json_schema needs a 'schema'");
        }
        rf = schema ? json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", schema) : NULL;
    } else {
        return api_error(err, 400, "text.format", "'text.format' type must be text, json_object or json_schema");
    }
    if (!rf || json_object_set_new(chat, "response_format", rf)) return api_error(err, 500, NULL, "out of memory");
    return 0;
}

/* A reasoning effort as the template can take it: Qwen3's templates switch
 * thinking on or off (enable_thinking: none and minimal are off), others
 * take the level itself (reasoning_effort); a template with neither
 * cannot honour it. Set in the chat body's chat_template_kwargs, unless
 * the request set that variable itself: then they must agree. */
int api_reasoning_effort(ApiRequest *r, json_t *chat, const json_t *effort, const char *param, ApiError *err) {
    const char *e = json_string_value(effort);
    static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
    bool known = false;
    for (size_t i = 0; e && i < sizeof efforts / sizeof efforts[0]; i++) known |= strcmp(e, efforts[i]) == 0;
    if (!known) return api_error(err, 400, param, "'%s' must be none, minimal, low, medium, high or xhigh", param);
    ChatTemplateReasoning controls = chat_template_reasoning(r->srv->chat);
    if (!controls.effort && !controls.thinking_switch)
        return api_error(err, 400, param, "this model's chat template has no control of its reasoning: "
                                          "'%s' cannot be honoured", param);
    const char *key = controls.effort ? "reasoning_effort" : "enable_thinking";
    json_t *kwargs = json_object_get(chat, "chat_template_kwargs");
    if (!json_is_object(kwargs) &&
        (!(kwargs = json_object()) || json_object_set_new(chat, "chat_template_kwargs", kwargs)))
        return api_error(err, 500, NULL, "out of memory");
    json_t *value = controls.effort ? json_string(e) : json_boolean(strcmp(e, "none") != 0 && strcmp(e, "minimal") != 0);
    const json_t *own = json_object_get(kwargs, key);
    if (own && !json_equal((json_t *)own, value)) {
        json_decref(value);
        return api_error(err, 400, param, "'%s' \"%s\" contradicts chat_template_kwargs.%s", param, e, key);
    }
    if (json_object_set_new(kwargs, key, value)) return api_error(err, 500, NULL, "out of memory");
    return 0;
}

/* reasoning: {effort, summary}. No summaries are written: "auto" (the
 * server's choice) is the one summary setting that can be honoured. */
static int set_reasoning(ApiRequest *r, json_t *chat, const json_t *body, ApiError *err) {
    const json_t *reasoning = given(body, "reasoning");
    if (!reasoning) return 0;
    if (!json_is_object(reasoning)) return api_error(err, 400, "reasoning", "'reasoning' must be an object");
    const json_t *summary = given(reasoning, "summary"), *effort = given(reasoning, "effort");
    if (summary && !(json_is_string(summary) && strcmp(json_string_value(summary), "auto") == 0))
        return api_error(err, 400, "reasoning.summary", "reasoning summaries are not written: 'reasoning.summary' "
                                                        "may only be \"auto\" (the reasoning comes whole, as "
                                                        "reasoning_text)");
    return effort ? api_reasoning_effort(r, chat, effort, "reasoning.effort", err) : 0;
}

/* Chat's own fields a Responses request may carry as extras (vLLM's too). */
static const char *const passed_through[] = {
    "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "logit_bias", "min_tokens", "ignore_eos", "priority",
    "truncate_prompt_tokens", "parallel_tool_calls", "stream", "chat_template_kwargs", "enable_thinking",
    "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar", "model", "user"};

int api_responses_parse(ApiRequest *r, ApiError *err) {
    json_t *body = r->body;
    if (!(r->responses = calloc(1, sizeof *r->responses))) return api_error(err, 500, NULL, "out of memory");
    ResponsesState *st = r->responses;
    st->request = json_incref(body);
    st->store = true;
    const json_t *store = given(body, "store"), *instructions = given(body, "instructions");
    if (store && !json_is_boolean(store)) return api_error(err, 400, "store", "'store' must be true or false");
    if (store) st->store = json_is_true(store);
    if (instructions && !json_is_string(instructions))
        return api_error(err, 400, "instructions", "'instructions' must be a string");
    const json_t *max_output = given(body, "max_output_tokens");
    if (max_output && (!json_is_integer(max_output) || json_integer_value(max_output) < 1))
        return api_error(err, 400, "max_output_tokens", "'max_output_tokens' must be an integer of at least 1");
    if (refuse_unsupported(body, err) || !(st->output = json_array()) ||
        !(st->conversation = conversation(r, body, err)))
        return err->status ? -1 : api_error(err, 500, NULL, "out of memory");
    json_t *chat = json_object();
    json_t *messages = instructions ? json_pack("[{s:s, s:O}]", "role", "system", "content", instructions) : json_array();
    if (!chat || !messages || json_array_extend(messages, st->conversation) ||
        json_object_set_new(chat, "messages", messages) ||
        (max_output && json_object_set(chat, "max_completion_tokens", (json_t *)max_output))) {
        json_decref(chat);
        return api_error(err, 500, NULL, "out of memory");
    }
    for (size_t i = 0; i < sizeof passed_through / sizeof passed_through[0]; i++) {
        json_t *v = given(body, passed_through[i]);
        if (v && json_object_set(chat, passed_through[i], v)) {
            json_decref(chat);
            return api_error(err, 500, NULL, "out of memory");
        }
    }
    r->body = chat;
    json_decref(body); /* st->request holds it */
    return set_tools(chat, body, err) || set_tool_choice(chat, body, err) || set_format(chat, body, err) ||
           set_reasoning(r, chat, body, err);
}

/* ---- GET and DELETE /v1/responses/{id} --------------------------------------------------------- */

void api_responses_stored(ApiRequest *r) {
    const char *id = http_path(r->ex) + strlen("/v1/responses/");
    ApiServer *s = r->srv;
    json_t *response;
    bool deleting = strcmp(http_method(r->ex), "DELETE") == 0;
    bool found = deleting ? response_store_delete(s->responses, id, now_seconds())
                          : response_store_get(s->responses, id, now_seconds(), &response, NULL);
    if (!found) {
        ApiError e;
        api_error(&e, 404, NULL, "Response with id '%s' not found.", id);
        api_respond_error(r, &e);
        return;
    }
    api_respond_json(r, 200, deleting ? json_pack("{s:s, s:s, s:b}", "id", id, "object", "response", "deleted", 1)
                                      : json_incref(response));
}
