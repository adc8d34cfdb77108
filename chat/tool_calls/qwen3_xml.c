/*
 * qwen3_xml.c - one Qwen3-Coder tool call body, the XML-like text
 * between <tool_call> and </tool_call> that Qwen3-Coder's template teaches:
 *
 *     <function=NAME>
 *     <parameter=P>
 *     VALUE
 *     </parameter>
 *     ...
 *     </function>
 *
 * Values are raw text, not JSON, so the request's tool schema says what
 * each is: parameters.properties[P].type turns the text into a JSON value
 * (see convert_value). Exactly one "\n" is taken off each end of a value
 * (the template's own line breaks); the rest is the value, verbatim.
 *
 * Strict about structure: whitespace between elements is fine, but a
 * missing "<function=", an unclosed <parameter=...> or </function>, or
 * anything after </function> rejects the call (the caller releases the
 * block as content). A parameter given twice keeps its last value.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "chat/chat_output_internal.h"
#include "text/tokenizer/utf8.h"

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

int xml_tool_call_parse(const char *body, size_t len, const json_t *tools, char **name,
                        char **arguments, char why[TOOL_CALL_WHY_SIZE]) {
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
