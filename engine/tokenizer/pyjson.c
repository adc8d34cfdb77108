/*
 * pyjson.c - Python's json.dumps formatting (see pyjson.h).
 */
#include "pyjson.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int put(ByteBuf *b, const char *s) { return byte_buf_append(b, s, strlen(s)); }

static int dump_string(const char *s, size_t n, ByteBuf *out) {
    if (byte_buf_append(out, "\"", 1)) return -1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (!esc) continue;
        if (byte_buf_append(out, s + run, i - run) || put(out, esc)) return -1;
        run = i + 1;
    }
    return byte_buf_append(out, s + run, n - run) || byte_buf_append(out, "\"", 1) ? -1 : 0;
}

/* repr(float): the shortest digits that read back as x, in fixed notation
 * when the decimal exponent is in [-4, 16), else d.ddde+XX. */
int pyjson_float(double x, ByteBuf *out) {
    if (isnan(x)) return put(out, "NaN");
    if (isinf(x)) return put(out, x < 0 ? "-Infinity" : "Infinity");
    char buf[40];
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
    /* buf: [-]d[.ddd]e[+-]XX -> sign, digits, exponent */
    const char *p = buf;
    char digits[24];
    int nd = 0;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--; /* %e pads to the precision asked */
    digits[nd] = '\0';
    char res[64];
    int o = 0;
    if (neg) res[o++] = '-';
    int point = exp10 + 1; /* digits before the decimal point */
    if (exp10 < -4 || exp10 >= 16) {
        res[o++] = digits[0];
        if (nd > 1) {
            res[o++] = '.';
            memcpy(res + o, digits + 1, (size_t)nd - 1);
            o += nd - 1;
        }
        o += snprintf(res + o, sizeof res - (size_t)o, "e%c%02d", exp10 < 0 ? '-' : '+',
                      exp10 < 0 ? -exp10 : exp10);
    } else if (point <= 0) {
        res[o++] = '0';
        res[o++] = '.';
        for (int i = 0; i < -point; i++) res[o++] = '0';
        memcpy(res + o, digits, (size_t)nd);
        o += nd;
    } else if (point >= nd) {
        memcpy(res + o, digits, (size_t)nd);
        o += nd;
        for (int i = nd; i < point; i++) res[o++] = '0';
        res[o++] = '.';
        res[o++] = '0';
    } else {
        memcpy(res + o, digits, (size_t)point);
        o += point;
        res[o++] = '.';
        memcpy(res + o, digits + point, (size_t)(nd - point));
        o += nd - point;
    }
    return byte_buf_append(out, res, (size_t)o);
}

int pyjson_dump(const json_t *v, ByteBuf *out) {
    char num[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        if (put(out, "{")) return -1;
        const char *key;
        size_t key_len;
        json_t *val;
        bool first = true;
        /* jansson keeps keys in insertion order, as Python's dict does. */
        json_object_keylen_foreach((json_t *)v, key, key_len, val) {
            if ((!first && put(out, ", ")) || dump_string(key, key_len, out) ||
                put(out, ": ") || pyjson_dump(val, out))
                return -1;
            first = false;
        }
        return put(out, "}");
    }
    case JSON_ARRAY: {
        if (put(out, "[")) return -1;
        for (size_t i = 0; i < json_array_size(v); i++)
            if ((i && put(out, ", ")) || pyjson_dump(json_array_get(v, i), out)) return -1;
        return put(out, "]");
    }
    case JSON_STRING: return dump_string(json_string_value(v), json_string_length(v), out);
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return put(out, num);
    case JSON_REAL: return pyjson_float(json_real_value(v), out);
    case JSON_TRUE: return put(out, "true");
    case JSON_FALSE: return put(out, "false");
    case JSON_NULL:
    default: return put(out, "null");
    }
}
