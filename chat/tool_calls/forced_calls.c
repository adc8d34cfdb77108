/*
 * forced_calls.c - the grammar of forced tool calls (see forced_calls.h):
 * the part every format shares - the spec checked, one alternative per
 * offered tool, the leading newlines, the number of calls - around each
 * call's own grammar, which its format writes (tool_call_format.h) with
 * the tool's arguments compiled by the JSON Schema compiler
 * (json_schema.h) into the same grammar.
 */
#include "forced_calls.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "structured/json_schema.h"
#include "tool_call_format.h"

#define MAX_TOOLS 256

int tool_call_arguments_rule(Grammar *g, const json_t *schema, const char *tool) {
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

/* The format the spec names, if its calls can be forced; else NULL, with
 * the error (which lists the names that would do) recorded in g. */
static const ToolCallFormat *spec_format(Grammar *g, const char *name) {
    const ToolCallFormat *f;
    char names[256] = "";
    size_t used = 0, listed = 0, forcible = 0;
    for (size_t i = 0; (f = tool_call_format_at(i)); i++) {
        if (!f->call_grammar) continue;
        if (name && strcmp(f->name, name) == 0) return f;
        forcible++;
    }
    for (size_t i = 0; (f = tool_call_format_at(i)) && used < sizeof names; i++) {
        if (!f->call_grammar) continue;
        listed++;
        const char *sep = listed == 1 ? "" : listed == forcible ? " or " : ", ";
        int n = snprintf(names + used, sizeof names - used, "%s\"%s\"", sep, f->name);
        used += n < 0 ? sizeof names : (size_t)n;
    }
    grammar_fail(g, ERROR_INVALID, "tool calls: format must be %s", names);
    return NULL;
}

int tool_calls_to_grammar(Grammar *g, const json_t *spec) {
    if (!g || grammar_error(g)) return -1;
    const json_t *tools = json_object_get(spec, "tools");
    const json_t *max = json_object_get(spec, "max_calls");
    const ToolCallFormat *format = spec_format(g, json_string_value(json_object_get(spec, "format")));
    if (!format) return -1;
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
        alts[i] = format->call_grammar(g, name, json_is_null(parameters) ? NULL : parameters);
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

/* The spec's JSON text into the grammar (ConstraintBuilder). */
static int build_from_text(Grammar *g, const char *text, size_t len, Error *err) {
    json_error_t jerr;
    json_t *spec = json_loadb(text, len, 0, &jerr);
    if (!spec) return error_set_kind(err, ERROR_INVALID, "tool calls: not valid JSON (%s)", jerr.text);
    int rc = tool_calls_to_grammar(g, spec);
    json_decref(spec);
    return rc;
}

const ConstraintBuilder forced_tool_calls = {"tool_calls", build_from_text};
