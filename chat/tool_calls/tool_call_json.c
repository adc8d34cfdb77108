/*
 * tool_call_json.c - what the tool-call formats' readers share
 * (tool_call_json.h): finding a function in the request's "tools", writing
 * arguments as compact JSON, and formatting a rejection's reason.
 *
 * The arguments are written here rather than with json_dumps because
 * jansson prints reals with 17 significant digits (0.1 becomes
 * 0.10000000000000001); a client reading tool arguments should see the
 * number the model wrote. Everything else matches json_dumps(JSON_COMPACT |
 * JSON_PRESERVE_ORDER): no spaces, keys in order, UTF-8 kept as is.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool_call_json.h"

const json_t *tool_call_find_function(const json_t *tools, const char *name) {
    if (!json_is_array(tools)) return NULL;
    size_t i;
    const json_t *tool;
    json_array_foreach(tools, i, tool) {
        const json_t *type = json_object_get(tool, "type");
        if (type && !json_is_null(type) && !(json_is_string(type) && strcmp(json_string_value(type), "function") == 0))
            continue;
        const json_t *fn = json_object_get(tool, "function");
        if (!json_is_object(fn)) fn = tool; /* the flat shape */
        const json_t *n = json_object_get(fn, "name");
        if (json_is_string(n) && strcmp(json_string_value(n), name) == 0) return fn;
    }
    return NULL;
}

static int dump_string(const char *s, size_t n, ByteBuf *b) {
    if (byte_buf_append(b, "\"", 1)) return -1;
    size_t run = 0; /* bytes copied as they are, pending */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        if (byte_buf_append(b, s + run, i - run)) return -1;
        run = i + 1;
        char esc[8];
        switch (c) {
        case '"': memcpy(esc, "\\\"", 3); break;
        case '\\': memcpy(esc, "\\\\", 3); break;
        case '\b': memcpy(esc, "\\b", 3); break;
        case '\f': memcpy(esc, "\\f", 3); break;
        case '\n': memcpy(esc, "\\n", 3); break;
        case '\r': memcpy(esc, "\\r", 3); break;
        case '\t': memcpy(esc, "\\t", 3); break;
        default: snprintf(esc, sizeof esc, "\\u%04x", c); break;
        }
        if (byte_buf_append(b, esc, strlen(esc))) return -1;
    }
    if (byte_buf_append(b, s + run, n - run)) return -1;
    return byte_buf_append(b, "\"", 1);
}

/* The fewest significant digits that read back as d, always with a '.' or
 * an exponent so that it stays a real ("1.0", as Python writes it). */
static int dump_real(double d, ByteBuf *b) {
    char s[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, sizeof s - 2, "%.*g", prec, d);
        if (strtod(s, NULL) == d) break;
    }
    if (!strpbrk(s, ".eEni")) strcat(s, ".0"); /* "inf" and "nan" cannot come from JSON */
    return byte_buf_append(b, s, strlen(s));
}

int tool_call_dump_json(const json_t *v, ByteBuf *b) {
    char num[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        if (byte_buf_append(b, "{", 1)) return -1;
        const char *key;
        json_t *val;
        bool first = true;
        json_object_foreach((json_t *)v, key, val) {
            if (!first && byte_buf_append(b, ",", 1)) return -1;
            first = false;
            if (dump_string(key, strlen(key), b) || byte_buf_append(b, ":", 1) ||
                tool_call_dump_json(val, b))
                return -1;
        }
        return byte_buf_append(b, "}", 1);
    }
    case JSON_ARRAY: {
        if (byte_buf_append(b, "[", 1)) return -1;
        size_t i;
        json_t *val;
        json_array_foreach(v, i, val) {
            if (i && byte_buf_append(b, ",", 1)) return -1;
            if (tool_call_dump_json(val, b)) return -1;
        }
        return byte_buf_append(b, "]", 1);
    }
    case JSON_STRING: return dump_string(json_string_value(v), json_string_length(v), b);
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return byte_buf_append(b, num, strlen(num));
    case JSON_REAL: return dump_real(json_real_value(v), b);
    case JSON_TRUE: return byte_buf_append(b, "true", 4);
    case JSON_FALSE: return byte_buf_append(b, "false", 5);
    case JSON_NULL: return byte_buf_append(b, "null", 4);
    }
    return -1;
}

char *tool_call_json_text(const json_t *v) {
    ByteBuf b = {0};
    if (tool_call_dump_json(v, &b) || byte_buf_append(&b, "", 1)) {
        byte_buf_free(&b);
        return NULL;
    }
    return b.data;
}

void tool_call_why(char *why, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(why, size, fmt, ap);
    va_end(ap);
    if (n < 0) {
        why[0] = '\0';
        return;
    }
    if ((size_t)n < size) return;
    /* Cut: drop the last character if vsnprintf kept only part of it. */
    size_t end = size - 1, start = end;
    while (start > 0 && ((unsigned char)why[start - 1] & 0xC0) == 0x80) start--;
    if (start == 0) return;
    unsigned char lead = (unsigned char)why[start - 1];
    size_t need = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (end - (start - 1) < need) why[start - 1] = '\0';
}
