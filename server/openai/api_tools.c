/*
 * api_tools.c - a chat request's tools: "tools", "tool_choice" and
 * "parallel_tool_calls" checked (loop, after the other fields), and what
 * they decide downstream - the constraint that forces calls for
 * tool_choice "required" or a named function (compiled with the request's
 * other constraints, api_structured.c), and how each answer's text is split
 * into reasoning, content and tool calls (chat/).
 */
#include <stdio.h>
#include <string.h>

#include "api_internal.h"
#include "base/log.h"
#include "chat/tool_calls/forced_calls.h"

#define MAX_TOOLS 256

/* The function name of tools[i], checked. */
static const char *tool_name(const json_t *tool, size_t i, ApiError *err) {
    if (!json_is_object(tool)) return api_error(err, 400, "tools", "'tools[%zu]' must be an object", i), NULL;
    const json_t *type = json_object_get(tool, "type"); /* vLLM's default: "function" */
    if (type && !json_is_null(type) && (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0))
        return api_error(err, 400, "tools", "'tools[%zu].type' must be \"function\"", i), NULL;
    const json_t *fn = json_object_get(tool, "function");
    const json_t *name = json_object_get(fn, "name");
    if (!json_is_object(fn) || !json_is_string(name) || json_string_length(name) == 0)
        return api_error(err, 400, "tools", "'tools[%zu].function.name' must be a non-empty string", i), NULL;
    const json_t *params = json_object_get(fn, "parameters");
    if (params && !json_is_null(params) && !json_is_object(params))
        return api_error(err, 400, "tools", "'tools[%zu].function.parameters' must be a JSON Schema object", i), NULL;
    return json_string_value(name);
}

/* The function name of a tool already checked by tool_name. */
static const char *name_of(const json_t *tool) {
    return json_string_value(json_object_get(json_object_get(tool, "function"), "name"));
}

/* Whether tools[0..n) has a function called name. */
static bool offered(const json_t *tools, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(name_of(json_array_get(tools, i)), name) == 0) return true;
    return false;
}

/* tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}}. */
static int parse_tool_choice(const json_t *v, OpenAIParams *p, ApiError *err) {
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strcmp(s, "none") == 0) p->tool_choice = TOOL_CHOICE_NONE;
        else if (strcmp(s, "auto") == 0) p->tool_choice = TOOL_CHOICE_AUTO;
        else if (strcmp(s, "required") == 0) p->tool_choice = TOOL_CHOICE_REQUIRED;
        else return api_error(err, 400, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a function");
        return 0;
    }
    const json_t *type = json_object_get(v, "type");
    const json_t *name = json_object_get(json_object_get(v, "function"), "name");
    bool function = !type || json_is_null(type) || /* vLLM's default */
                    (json_is_string(type) && strcmp(json_string_value(type), "function") == 0);
    if (!json_is_object(v) || !function || !json_is_string(name))
        return api_error(err, 400, "tool_choice",
                         "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                         "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    p->tool_choice = TOOL_CHOICE_NAMED;
    p->tool_choice_name = json_string_value(name);
    return 0;
}

/* The spec forced_calls.h compiles: the offered (or the named) functions in
 * the template's format. A new reference. */
static json_t *forced_calls_spec(const OpenAIParams *p, const ToolCallFormat *format) {
    json_t *list = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(p->tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        const char *name = name_of(t);
        if (p->tool_choice == TOOL_CHOICE_NAMED && strcmp(name, p->tool_choice_name) != 0) continue;
        json_t *params = json_object_get(fn, "parameters");
        json_array_append_new(list, json_pack("{s:s, s:O}", "name", name, "parameters", params ? params : json_null()));
    }
    bool one = p->tool_choice == TOOL_CHOICE_NAMED || !p->parallel_tool_calls;
    return json_pack("{s:s, s:o, s:i}", "format", format->name, "tools", list, "max_calls", one ? 1 : 0);
}

int api_parse_tools(ApiRequest *r, ApiError *err) {
    OpenAIParams *p = &r->params;
    p->tool_choice = TOOL_CHOICE_NONE;
    p->parallel_tool_calls = true;
    const json_t *body = r->body;
    const json_t *tools = json_object_get(body, "tools");
    const json_t *choice = json_object_get(body, "tool_choice");
    const json_t *parallel = json_object_get(body, "parallel_tool_calls");
    if (parallel && !json_is_null(parallel)) {
        if (!json_is_boolean(parallel)) return api_error(err, 400, "parallel_tool_calls", "'parallel_tool_calls' must be true or false");
        p->parallel_tool_calls = json_is_true(parallel);
    }
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return api_error(err, 400, "tools", "'tools' must be a list");
        if (json_array_size(tools) > MAX_TOOLS) return api_error(err, 400, "tools", "at most %d tools", MAX_TOOLS);
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            const char *name = tool_name(t, i, err);
            if (!name) return -1;
            if (offered(tools, i, name)) return api_error(err, 400, "tools", "two tools are named '%s'", name);
        }
        if (json_array_size(tools) > 0) {
            p->tools = tools;
            p->tool_choice = TOOL_CHOICE_AUTO;
        }
    }
    if (choice && !json_is_null(choice)) {
        if (parse_tool_choice(choice, p, err)) return -1;
        if ((p->tool_choice == TOOL_CHOICE_REQUIRED || p->tool_choice == TOOL_CHOICE_NAMED) && !p->tools)
            return api_error(err, 400, "tool_choice", "'tool_choice' \"%s\" needs 'tools'",
                             p->tool_choice == TOOL_CHOICE_NAMED ? p->tool_choice_name : "required");
        if (p->tool_choice == TOOL_CHOICE_AUTO && !p->tools) p->tool_choice = TOOL_CHOICE_NONE;
    }
    if (p->tool_choice == TOOL_CHOICE_NAMED && !offered(p->tools, json_array_size(p->tools), p->tool_choice_name))
        return api_error(err, 400, "tool_choice", "'tool_choice' names '%s', which is not in 'tools'", p->tool_choice_name);
    if (p->tool_choice != TOOL_CHOICE_REQUIRED && p->tool_choice != TOOL_CHOICE_NAMED) return 0;
    /* Forced calls: decoding is constrained to the template's call format. */
    const ToolCallFormat *format = r->srv->tool_format;
    if (!format || !format->call_grammar)
        return api_error(err, 400, "tool_choice",
                         "'tool_choice' \"required\" or a named function needs a tool-call format the server "
                         "can force (hermes or qwen3_xml); this model's chat template has %s",
                         format || r->srv->tool_format_unknown ? "another one" : "none");
    if (p->constraint_kind >= 0)
        return api_error(err, 400, "tool_choice", "'tool_choice' \"%s\" cannot be combined with '%s'",
                         p->tool_choice == TOOL_CHOICE_NAMED ? p->tool_choice_name : "required", p->constraint_field);
    if (!(r->tool_spec = forced_calls_spec(p, format))) return api_error(err, 500, NULL, "out of memory");
    p->constraint_kind = CONSTRAINT_BUILT;
    r->constraint_builder = &forced_tool_calls;
    p->constraint = r->tool_spec;
    p->constraint_field = "tool_choice";
    return 0;
}

ChatOutputOptions api_chat_output_options(const ApiRequest *r, int prompt_index) {
    const ApiServer *s = r->srv;
    const OpenAIParams *p = &r->params;
    ChatOutputOptions o = {.parse_reasoning = s->reasoning};
    if (o.parse_reasoning) o.starts_in_reasoning = api_prompt_in_reasoning(r, prompt_index);
    if (p->tool_choice != TOOL_CHOICE_NONE) {
        o.tool_format = s->tool_format;
        o.tools = p->tools;
    }
    return o;
}

