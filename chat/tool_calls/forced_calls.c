/*
 * forced_calls.c - the grammar of forced tool calls (see forced_calls.h): the
 * fixed text of the call format around each tool's arguments, which the
 * JSON Schema compiler (json_schema.h) builds, one rule per tool, in the
 * same grammar.
 */
#include "forced_calls.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "structured/json_schema.h"

#define MAX_TOOLS 256

/* The schema's own rule in g: compiled into fresh rules, its root returned.
 * A tool without parameters takes any object. */
static int schema_rule(Grammar *g, const json_t *schema, const char *tool) {
    json_t *any = NULL;
    if (!schema || json_is_null(schema)) schema = any = json_pack("{s:s}", "type", "object");
    if (!schema) return grammar_fail(g, ERROR_INTERNAL, "out of memory"), -1;
    int saved_root = grammar_root(g);
    int rc = json_schema_to_grammar(g, schema);
    json_decref(any);
    if (rc < 0) {
        grammar_error_prefix(g, "tool '%s' parameters", tool);
        return -1;
    }
    int rule = grammar_root(g);
    grammar_set_root(g, saved_root);
    return rule;
}

/* {"name": "NAME", "arguments": ARGS} with the name as a JSON string. */
static GExpr hermes_call(Grammar *g, const char *name, int args_rule) {
    json_t *n = json_string(name);
    char *quoted = n ? json_dumps(n, JSON_ENCODE_ANY) : NULL;
    json_decref(n);
    if (!quoted) return grammar_fail(g, ERROR_INTERNAL, "out of memory");
    GExpr parts[] = {g_str(g, "<tool_call>\n{\"name\": "), g_str(g, quoted), g_str(g, ", \"arguments\": "),
                     g_ref(g, args_rule), g_str(g, "}\n</tool_call>")};
    free(quoted);
    return g_seq(g, parts, 5);
}

static bool is_string_schema(const json_t *schema) {
    const json_t *type = json_object_get(schema, "type");
    return json_is_string(type) && strcmp(json_string_value(type), "string") == 0;
}

static bool is_required(const json_t *parameters, const char *name) {
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(parameters, "required"), i, r)
        if (json_is_string(r) && strcmp(json_string_value(r), name) == 0) return true;
    return false;
}

/* <function=NAME>\n then each parameter, </function>. */
static GExpr xml_call(Grammar *g, const char *name, const json_t *parameters) {
    GExpr body = g_seq2(g, g_str(g, "<tool_call>\n<function="), g_str(g, name));
    body = g_seq2(g, body, g_str(g, ">\n"));
    const json_t *props = json_object_get(parameters, "properties");
    const char *key;
    json_t *schema;
    json_object_foreach((json_t *)props, key, schema) {
        GExpr value;
        if (is_string_schema(schema) || !json_is_object(schema)) {
            const uint32_t lt[] = {'<', '<'};
            value = g_repeat(g, g_codepoints_not(g, lt, 1, G_UTF8), 0, G_UNBOUNDED);
        } else {
            int rule = schema_rule(g, schema, name);
            if (rule < 0) return G_ERROR;
            value = g_ref(g, rule);
        }
        GExpr parts[] = {g_str(g, "<parameter="), g_str(g, key), g_str(g, ">\n"), value, g_str(g, "\n</parameter>\n")};
        GExpr param = g_seq(g, parts, 5);
        body = g_seq2(g, body, is_required(parameters, key) ? param : g_optional(g, param));
    }
    return g_seq2(g, body, g_str(g, "</function>\n</tool_call>"));
}

int tool_calls_to_grammar(Grammar *g, const json_t *spec) {
    if (!g || grammar_error(g)) return -1;
    const char *format = json_string_value(json_object_get(spec, "format"));
    const json_t *tools = json_object_get(spec, "tools");
    const json_t *max = json_object_get(spec, "max_calls");
    bool xml = format && strcmp(format, "qwen3_xml") == 0;
    if (!format || (!xml && strcmp(format, "hermes") != 0))
        return grammar_fail(g, ERROR_INVALID, "tool calls: format must be \"hermes\" or \"qwen3_xml\""), -1;
    if (!json_is_array(tools) || json_array_size(tools) == 0 || json_array_size(tools) > MAX_TOOLS)
        return grammar_fail(g, ERROR_INVALID, "tool calls: 1 to %d tools", MAX_TOOLS), -1;
    if (max && !json_is_integer(max))
        return grammar_fail(g, ERROR_INVALID, "tool calls: max_calls must be an integer"), -1;
    int call = grammar_fresh_rule(g, "tool-call");
    size_t n = json_array_size(tools);
    GExpr *alts = malloc(n * sizeof *alts);
    if (!alts) return grammar_fail(g, ERROR_INTERNAL, "out of memory"), -1;
    for (size_t i = 0; i < n && !grammar_error(g); i++) {
        const json_t *tool = json_array_get(tools, i);
        const char *name = json_string_value(json_object_get(tool, "name"));
        const json_t *parameters = json_object_get(tool, "parameters");
        if (!name || !*name) {
            grammar_fail(g, ERROR_INVALID, "tool calls: tool %zu has no name", i);
            break;
        }
        if (parameters && !json_is_object(parameters) && !json_is_null(parameters)) {
            grammar_fail(g, ERROR_INVALID, "tool '%s': parameters must be a JSON Schema object", name);
            break;
        }
        if (xml) {
            alts[i] = xml_call(g, name, parameters);
        } else {
            int args = schema_rule(g, parameters, name);
            alts[i] = args < 0 ? G_ERROR : hermes_call(g, name, args);
        }
    }
    if (!grammar_error(g)) grammar_define(g, call, g_alt(g, alts, (int)n));
    free(alts);
    int root = grammar_fresh_rule(g, "tool-calls");
    GExpr lead = g_repeat(g, g_str(g, "\n"), 0, 2);
    GExpr more = g_repeat(g, g_seq2(g, g_str(g, "\n"), g_ref(g, call)), 0, G_UNBOUNDED);
    GExpr first = g_seq2(g, lead, g_ref(g, call));
    grammar_define(g, root, json_integer_value(max) == 1 ? first : g_seq2(g, first, more));
    grammar_set_root(g, root);
    return grammar_error(g) ? -1 : 0;
}
