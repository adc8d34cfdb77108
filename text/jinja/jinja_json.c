/*
 * jinja_json.c - values to and from JSON, the way Python writes them.
 *
 * transformers defines the tojson filter as json.dumps(x, ensure_ascii=False,
 * indent=indent, separators=separators, sort_keys=sort_keys): ", " and ": "
 * by default ("," between items once indent is given), keys in their order,
 * non-ASCII written raw, only '"', '\' and control characters escaped, and
 * floats as repr() writes them (1.0, 1e-07, 1e+16, NaN, Infinity). A prompt
 * must be byte-identical to Hugging Face's, so jansson's writer will not do;
 * jansson only reads the request. Hand-written (see jinja.h).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

/* repr(float): the shortest digits that read back as f, fixed notation when
 * the decimal exponent is in [-4, 16), else d.ddde+XX; json spells the
 * non-finite ones NaN/Infinity, str() nan/inf. */
void jinja_write_float(JBuf *b, JRender *r, double f, bool json) {
    if (isnan(f)) return jbuf_puts(r, b, json ? "NaN" : "nan");
    if (isinf(f)) return jbuf_puts(r, b, f < 0 ? (json ? "-Infinity" : "-inf") : (json ? "Infinity" : "inf"));
    char buf[40];
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
    const char *p = buf;
    char digits[24];
    int nd = 0;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
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
        o += snprintf(res + o, sizeof res - (size_t)o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
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
    jbuf_put(r, b, res, (size_t)o);
}

static void json_write_string(JRender *r, JBuf *b, const char *s, size_t n) {
    jbuf_put(r, b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char u[8];
        const char *esc = NULL;
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
        jbuf_put(r, b, s + run, i - run);
        jbuf_puts(r, b, esc);
        run = i + 1;
    }
    jbuf_put(r, b, s + run, n - run);
    jbuf_put(r, b, "\"", 1);
}

/* Dict keys as json.dumps converts them: str as is, numbers, True/False/None. */
static void json_key(JRender *r, JBuf *b, JValue k) {
    char num[32];
    switch (k.type) {
    case JT_STR: return json_write_string(r, b, k.s->s, k.s->len);
    case JT_INT:
        snprintf(num, sizeof num, "\"%lld\"", (long long)k.i);
        return jbuf_puts(r, b, num);
    case JT_BOOL: return jbuf_puts(r, b, k.b ? "\"true\"" : "\"false\"");
    case JT_NONE: return jbuf_puts(r, b, "\"null\"");
    case JT_FLOAT: {
        JBuf f = {0};
        jinja_write_float(&f, r, k.f, true);
        return json_write_string(r, b, f.data, f.len);
    }
    default: jinja_fail(r, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

static void newline_indent(JRender *r, JBuf *b, const JsonStyle *st, int level) {
    jbuf_put(r, b, "\n", 1);
    for (int i = 0; i < level; i++) jbuf_puts(r, b, st->indent);
}

static void dump(JRender *r, JBuf *b, JValue v, const JsonStyle *st, int level) {
    char num[32];
    if (level > r->limits->max_depth) jinja_fail(r, "a value nests deeper than %d levels", r->limits->max_depth);
    switch (v.type) {
    case JT_NONE: return jbuf_put(r, b, "null", 4);
    case JT_BOOL: return jbuf_puts(r, b, v.b ? "true" : "false");
    case JT_INT:
        snprintf(num, sizeof num, "%lld", (long long)v.i);
        return jbuf_puts(r, b, num);
    case JT_FLOAT: return jinja_write_float(b, r, v.f, true);
    case JT_STR: return json_write_string(r, b, v.s->s, v.s->len);
    case JT_LIST:
    case JT_TUPLE:
        if (!v.l->n) return jbuf_put(r, b, "[]", 2);
        jbuf_put(r, b, "[", 1);
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) jbuf_puts(r, b, st->item_sep);
            if (st->indent) newline_indent(r, b, st, level + 1);
            dump(r, b, v.l->items[i], st, level + 1);
        }
        if (st->indent) newline_indent(r, b, st, level);
        return jbuf_put(r, b, "]", 1);
    case JT_DICT: {
        if (!v.d->n) return jbuf_put(r, b, "{}", 2);
        size_t *order = arena_alloc(&r->arena, v.d->n * sizeof *order);
        for (size_t i = 0; i < v.d->n; i++) order[i] = i;
        if (st->sort_keys) /* insertion sort: stable, and dicts are small */
            for (size_t i = 1; i < v.d->n; i++)
                for (size_t j = i; j > 0 && jv_compare(r, v.d->keys[order[j - 1]], v.d->keys[order[j]]) > 0; j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        jbuf_put(r, b, "{", 1);
        for (size_t k = 0; k < v.d->n; k++) {
            size_t i = order[k];
            if (k) jbuf_puts(r, b, st->item_sep);
            if (st->indent) newline_indent(r, b, st, level + 1);
            json_key(r, b, v.d->keys[i]);
            jbuf_puts(r, b, st->key_sep);
            dump(r, b, v.d->vals[i], st, level + 1);
        }
        if (st->indent) newline_indent(r, b, st, level);
        return jbuf_put(r, b, "}", 1);
    }
    case JT_UNDEFINED: jinja_fail(r, "Object of type Undefined is not JSON serializable");
    default: jinja_fail(r, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

void jinja_tojson(JRender *r, JBuf *b, JValue v, const JsonStyle *style) { dump(r, b, v, style, 0); }

JValue jinja_from_json(JRender *r, const void *json) {
    const json_t *j = json;
    if (++r->depth > r->limits->max_depth) jinja_fail(r, "the variables nest deeper than %d levels", r->limits->max_depth);
    JValue v;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        v = jv_dict(r, json_object_size(j));
        const char *key;
        size_t key_len;
        json_t *val;
        json_object_keylen_foreach((json_t *)j, key, key_len, val) {
            JDict *d = v.d; /* keys are unique in a JSON object: append without a search */
            d->keys[d->n] = jv_str(r, key, key_len);
            d->vals[d->n++] = jinja_from_json(r, val);
        }
        break;
    }
    case JSON_ARRAY:
        v = jv_list(r, json_array_size(j));
        for (size_t i = 0; i < json_array_size(j); i++) jv_list_push(r, v.l, jinja_from_json(r, json_array_get(j, i)));
        break;
    case JSON_STRING: v = jv_str(r, json_string_value(j), json_string_length(j)); break;
    case JSON_INTEGER: v = jv_int(json_integer_value(j)); break;
    case JSON_REAL: v = jv_float(json_real_value(j)); break;
    case JSON_TRUE: v = jv_bool(true); break;
    case JSON_FALSE: v = jv_bool(false); break;
    default: v = jv_none(); break;
    }
    r->depth--;
    return v;
}
