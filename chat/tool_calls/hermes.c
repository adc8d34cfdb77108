/*
 * hermes.c - the Hermes tool-call format (tool_call_format.h), which
 * Qwen3's own template (and Hermes, Qwen2.5, QwQ) teaches: a JSON object
 * between <tool_call> and </tool_call>,
 *
 *     <tool_call>
 *     {"name": "NAME", "arguments": {...}}
 *     </tool_call>
 *
 * A template teaches it when it writes <tool_call>. A forced call is
 * exactly that text, the name a JSON string and the arguments JSON the
 * tool's schema accepts.
 *
 * Reading a body is lenient where models are known to vary, strict where
 * guessing would hand a client arguments the model did not write:
 *   - "arguments" may be an object, or a string holding a JSON object
 *     (some models double-encode); missing or null means no arguments,
 *     "{}"; "parameters" is read when "arguments" is absent;
 *   - other keys (an "id", say) are ignored;
 *   - anything else (text that is not JSON, JSON that is not an object, a
 *     name that is not a non-empty string, arguments of another type, a
 *     string that does not hold an object) rejects the call, and the caller
 *     releases the block as content.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "forced_calls.h"
#include "tool_call_format.h"
#include "tool_call_json.h"

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* json_loadb's failure: 0 (rejected, why says where) or -1 (out of memory). */
static int json_failure(const json_error_t *e, const char *what, char *why) {
    if (json_error_code(e) == json_error_out_of_memory) return -1;
    tool_call_why(why, TOOL_CALL_WHY_SIZE, "%snot valid JSON: %s (byte %d)", what, e->text,
                  e->position);
    return 0;
}

/* The arguments value as compact JSON text in *out: 1, 0 (rejected) or -1. */
static int arguments_text(const json_t *args, char **out, char *why) {
    if (!args || json_is_null(args)) {
        *out = strdup("{}");
        return *out ? 1 : -1;
    }
    if (json_is_object(args)) {
        *out = tool_call_json_text(args);
        return *out ? 1 : -1;
    }
    if (!json_is_string(args)) {
        tool_call_why(why, TOOL_CALL_WHY_SIZE, "\"arguments\" is not an object");
        return 0;
    }
    json_error_t e;
    json_t *inner = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, &e);
    if (!inner) return json_failure(&e, "\"arguments\" string is ", why);
    int rc = 1;
    if (!json_is_object(inner)) {
        tool_call_why(why, TOOL_CALL_WHY_SIZE, "\"arguments\" string does not hold a JSON object");
        rc = 0;
    } else if (!(*out = tool_call_json_text(inner))) {
        rc = -1;
    }
    json_decref(inner);
    return rc;
}

static int read_call(const char *body, size_t len, const json_t *tools, char **name, char **arguments,
                     char why[TOOL_CALL_WHY_SIZE]) {
    (void)tools; /* JSON says each value's type itself */
    *name = *arguments = NULL;
    while (len && is_space(*body)) body++, len--;
    while (len && is_space(body[len - 1])) len--;
    json_error_t e;
    json_t *root = json_loadb(body, len, JSON_DECODE_ANY, &e);
    if (!root) return json_failure(&e, "", why);
    int rc = 0;
    const json_t *n = json_object_get(root, "name");
    const json_t *args = json_object_get(root, "arguments");
    if (!args) args = json_object_get(root, "parameters");
    if (!json_is_object(root)) {
        tool_call_why(why, TOOL_CALL_WHY_SIZE, "not a JSON object");
    } else if (!json_is_string(n) || json_string_length(n) == 0) {
        tool_call_why(why, TOOL_CALL_WHY_SIZE, "no function name (a non-empty string \"name\")");
    } else if ((rc = arguments_text(args, arguments, why)) == 1) {
        if (!(*name = strdup(json_string_value(n)))) {
            free(*arguments);
            *arguments = NULL;
            rc = -1;
        }
    }
    json_decref(root);
    return rc;
}

static bool taught_by(const char *template_text) { return strstr(template_text, "<tool_call>") != NULL; }

/* <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>, the name
 * as a JSON string. */
static GExpr call_grammar(Grammar *g, const char *name, const json_t *parameters) {
    int args_rule = tool_call_arguments_rule(g, parameters, name);
    if (args_rule < 0) return G_ERROR;
    json_t *n = json_string(name);
    char *quoted = n ? json_dumps(n, JSON_ENCODE_ANY) : NULL;
    json_decref(n);
    if (!quoted) return grammar_fail(g, ERROR_INTERNAL, "out of memory");
    GExpr parts[] = {g_str(g, "<tool_call>\n{\"name\": "), g_str(g, quoted), g_str(g, ", \"arguments\": "),
                     g_ref(g, args_rule), g_str(g, "}\n</tool_call>")};
    free(quoted);
    return g_seq(g, parts, 5);
}

const ToolCallFormat tool_call_format_hermes = {
    .name = "hermes",
    .call_open = "<tool_call>",
    .call_close = "</tool_call>",
    .taught_by = taught_by,
    .call_grammar = call_grammar,
    .read_call = read_call,
};
