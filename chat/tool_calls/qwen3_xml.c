/*
 * qwen3_xml.c - the Qwen3-Coder tool-call format (tool_call_format.h;
 * --tool-call-parser qwen3_xml or qwen3_coder): XML-like text between
 * <tool_call> and </tool_call>,
 *
 *     <tool_call>
 *     <function=NAME>
 *     <parameter=P>
 *     VALUE
 *     </parameter>
 *     ...
 *     </function>
 *     </tool_call>
 *
 * A template teaches it when it writes <function= (its templates write
 * <tool_call> too, so the registry tries this format before Hermes).
 *
 * A forced call takes the parameters in the schema's order, each required
 * one present, and a value is JSON by the parameter's schema except for
 * strings, which are written raw: any text without '<' (the reader below
 * reads them back by type; enum and pattern on a string parameter are not
 * enforced there).
 *
 * Reading: values are raw text, not JSON, so the request's tool schema
 * says what each is: parameters.properties[P].type turns the text into a
 * JSON value (see convert_value). Exactly one "\n" is taken off each end of
 * a value (the template's own line breaks); the rest is the value,
 * verbatim. Strict about structure: whitespace between elements is fine,
 * but a missing "<function=", an unclosed <parameter=...> or </function>,
 * or anything after </function> rejects the call (the caller releases the
 * block as content). A parameter given twice keeps its last value.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "forced_calls.h"
#include "text/tokenizer/utf8.h"
#include "tool_call_format.h"
#include "tool_call_json.h"

typedef struct Cursor {
    const char *p, *end;
} Cursor;

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void skip_space(Cursor *c) {
    while (c->p < c->end && is_space(*c->p)) c->p++;
}

static bool take(Cursor *c, const char *lit) {
    size_t n = strlen(lit);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n) != 0) return false;
    c->p += n;
    return true;
}

/* The name after "<function=" or "<parameter=", up to '>', trimmed; one
 * line, no '<' and no U+0000 in it. NULL when there is none. */
static const char *take_name(Cursor *c, size_t *len) {
    const char *s = c->p;
    while (c->p < c->end && *c->p != '>' && *c->p != '<' && *c->p != '\n' && *c->p != '\0') c->p++;
    if (c->p == c->end || *c->p != '>') return NULL;
    const char *e = c->p++;
    while (s < e && is_space(*s)) s++;
    while (e > s && is_space(e[-1])) e--;
    *len = (size_t)(e - s);
    return *len ? s : NULL;
}

/* The parameter's declared type in the tool's schema, or NULL (unknown:
 * the value stays a string). A list of types (["integer", "null"]) gives
 * its first one that is not "null"; *nullable says whether "null" is
 * allowed. */
static const char *param_type(const json_t *fn, const char *param, bool *nullable) {
    *nullable = false;
    const json_t *props = json_object_get(json_object_get(fn, "parameters"), "properties");
    const json_t *type = json_object_get(json_object_get(props, param), "type");
    if (json_is_string(type)) {
        *nullable = strcmp(json_string_value(type), "null") == 0;
        return json_string_value(type);
    }
    const char *first = NULL;
    size_t i;
    const json_t *t;
    json_array_foreach(type, i, t) {
        if (!json_is_string(t)) continue;
        if (strcmp(json_string_value(t), "null") == 0) *nullable = true;
        else if (!first) first = json_string_value(t);
    }
    return first;
}

static bool text_is(const char *s, size_t n, const char *word) {
    return n == strlen(word) && strncasecmp(s, word, n) == 0;
}

/* JSON text s[0..n) when it parses (and, for want_number, is a number):
 * *out set, or left NULL when it does not. -1: out of memory. */
static int parse_json(const char *s, size_t n, bool want_number, json_t **out) {
    json_error_t e;
    *out = json_loadb(s, n, JSON_DECODE_ANY, &e);
    if (!*out) return json_error_code(&e) == json_error_out_of_memory ? -1 : 0;
    if (want_number && !json_is_number(*out)) {
        json_decref(*out);
        *out = NULL;
    }
    return 0;
}

/* The value text (valid UTF-8) as JSON by its declared type: "integer" and
 * "number" a number when the text is one, "boolean" true/false for
 * "true"/"false" in any case, "object" and "array" the JSON the text holds,
 * "null" null for "null"; anything else, and text that is not what its
 * type says, a string. NULL: out of memory. */
static json_t *convert_value(const char *s, size_t n, const char *type, bool nullable) {
    const char *t = s;
    size_t tn = n;
    while (tn && is_space(*t)) t++, tn--;
    while (tn && is_space(t[tn - 1])) tn--;
    json_t *v = NULL;
    if (nullable && tn == 4 && memcmp(t, "null", 4) == 0) return json_null();
    if (!type) {
        /* unknown parameter or type: a string */
    } else if (!strcmp(type, "integer") || !strcmp(type, "number")) {
        if (parse_json(t, tn, true, &v)) return NULL;
    } else if (!strcmp(type, "boolean")) {
        if (text_is(t, tn, "true")) v = json_true();
        else if (text_is(t, tn, "false")) v = json_false();
    } else if (!strcmp(type, "object") || !strcmp(type, "array")) {
        if (parse_json(t, tn, false, &v)) return NULL;
    }
    return v ? v : json_stringn(s, n);
}

static int read_call(const char *body, size_t len, const json_t *tools, char **name, char **arguments,
                     char why[TOOL_CALL_WHY_SIZE]) {
    *name = *arguments = NULL;
    if (!utf8_is_valid(body, len)) {
        tool_call_why(why, TOOL_CALL_WHY_SIZE, "not valid UTF-8");
        return 0;
    }
    Cursor c = {body, body + len};
    size_t name_len;
    const char *fname;
    skip_space(&c);
    if (!take(&c, "<function=") || !(fname = take_name(&c, &name_len))) {
        tool_call_why(why, TOOL_CALL_WHY_SIZE, "no <function=NAME> at the start");
        return 0;
    }
    if (!(*name = strndup(fname, name_len))) return -1;
    const json_t *fn = tool_call_find_function(tools, *name);
    json_t *args = json_object();
    if (!args) goto oom;
    for (;;) {
        skip_space(&c);
        if (take(&c, "</function>")) break;
        if (c.p == c.end) {
            tool_call_why(why, TOOL_CALL_WHY_SIZE, "no </function>");
            goto rejected;
        }
        size_t pn;
        const char *pname;
        if (!take(&c, "<parameter=") || !(pname = take_name(&c, &pn))) {
            tool_call_why(why, TOOL_CALL_WHY_SIZE, "expected <parameter=NAME> or </function>");
            goto rejected;
        }
        const char *close = memmem(c.p, (size_t)(c.end - c.p), "</parameter>", 12);
        if (!close) {
            tool_call_why(why, TOOL_CALL_WHY_SIZE, "<parameter=%.*s> is not closed", (int)pn, pname);
            goto rejected;
        }
        const char *v = c.p, *ve = close;
        if (v < ve && *v == '\n') v++;
        if (v < ve && ve[-1] == '\n') ve--;
        c.p = close + 12;
        char *key = strndup(pname, pn);
        if (!key) goto oom;
        bool nullable;
        const char *type = param_type(fn, key, &nullable);
        json_t *val = convert_value(v, (size_t)(ve - v), type, nullable);
        int rc = val ? json_object_set_new(args, key, val) : -1;
        free(key);
        if (rc) goto oom;
    }
    skip_space(&c);
    if (c.p != c.end) {
        tool_call_why(why, TOOL_CALL_WHY_SIZE, "text after </function>");
        goto rejected;
    }
    *arguments = tool_call_json_text(args);
    json_decref(args);
    if (*arguments) return 1;
    free(*name);
    *name = NULL;
    return -1;
rejected:
    json_decref(args);
    free(*name);
    *name = NULL;
    return 0;
oom:
    json_decref(args);
    free(*name);
    *name = NULL;
    return -1;
}

static bool taught_by(const char *template_text) { return strstr(template_text, "<function=") != NULL; }

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

/* <tool_call>\n<function=NAME>\n, then each parameter, then
 * </function>\n</tool_call>. */
static GExpr call_grammar(Grammar *g, const char *name, const json_t *parameters) {
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
            int rule = tool_call_arguments_rule(g, schema, name);
            if (rule < 0) return G_ERROR;
            value = g_ref(g, rule);
        }
        GExpr parts[] = {g_str(g, "<parameter="), g_str(g, key), g_str(g, ">\n"), value, g_str(g, "\n</parameter>\n")};
        GExpr param = g_seq(g, parts, 5);
        body = g_seq2(g, body, is_required(parameters, key) ? param : g_optional(g, param));
    }
    return g_seq2(g, body, g_str(g, "</function>\n</tool_call>"));
}

static const char *const ALIASES[] = {"qwen3_coder", NULL};

const ToolCallFormat tool_call_format_qwen3_xml = {
    .name = "qwen3_xml",
    .aliases = ALIASES,
    .call_open = "<tool_call>",
    .call_close = "</tool_call>",
    .taught_by = taught_by,
    .call_grammar = call_grammar,
    .read_call = read_call,
};
