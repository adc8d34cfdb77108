/*
 * jinja_format.c - Python's string formatting for templates: `fmt % args`
 * (printf-style conversions with flags, width and precision, a tuple or a
 * mapping of arguments) and str.format's replacement fields ({}, {0},
 * {name}, !r, and a format spec with fill, align, width, precision and
 * type). Hand-written with the rest of the interpreter (see jinja.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

/* One printf-style conversion (%s %r %d %i %f %e %g %x %o %c) with flags, width, precision. */
static void percent_one(JRender *r, JBuf *b, char conv, const char *flags, int width, int prec, JValue v) {
    char spec[32], num[512];
    if (width > 400 || prec > 400) jinja_fail(r, "a %% format's width or precision over 400 is not supported");
    if (conv == 's' || conv == 'r' || conv == 'a') {
        JBuf t = {0};
        if (conv == 's') jv_write_str(r, &t, v);
        else jv_write_repr(r, &t, v);
        size_t len = t.len;
        if (prec >= 0 && (size_t)prec < len) len = jinja_utf8_offset(t.data, t.len, prec);
        int pad = width - (int)jinja_utf8_count(t.data ? t.data : "", len);
        bool left = strchr(flags, '-') != NULL;
        for (int i = 0; !left && i < pad; i++) jbuf_put(r, b, " ", 1);
        jbuf_put(r, b, t.data ? t.data : "", len);
        for (int i = 0; left && i < pad; i++) jbuf_put(r, b, " ", 1);
        return;
    }
    if (v.type == JT_UNDEFINED) jv_raise_undefined(r, v);
    bool integral = strchr("dixXoc", conv) != NULL;
    if (v.type != JT_INT && v.type != JT_BOOL && v.type != JT_FLOAT)
        jinja_fail(r, "%%%c format: a real number is required, not %s", conv, jv_type_name(v));
    if (integral) {
        long long x = v.type == JT_FLOAT ? (long long)v.f : v.type == JT_INT ? (long long)v.i : v.b;
        if (conv == 'i') conv = 'd';
        if (conv == 'c') {
            jinja_put_cp(r, b, (uint32_t)x);
            return;
        }
        /* C drops the 0 flag when a precision is given: give none unless asked */
        if (prec < 0) {
            snprintf(spec, sizeof spec, "%%%s*ll%c", flags, conv);
            snprintf(num, sizeof num, spec, width, x);
        } else {
            snprintf(spec, sizeof spec, "%%%s*.*ll%c", flags, conv);
            snprintf(num, sizeof num, spec, width, prec, x);
        }
    } else {
        double x = v.type == JT_FLOAT ? v.f : v.type == JT_INT ? (double)v.i : v.b;
        snprintf(spec, sizeof spec, "%%%s*.*%c", flags, conv);
        snprintf(num, sizeof num, spec, width, prec < 0 ? 6 : prec, x);
    }
    jbuf_puts(r, b, num);
}

JValue py_percent_format(JRender *r, JValue fmt, JValue args) {
    const JStr *f = jinja_need_str(r, fmt, "the format");
    bool tuple = args.type == JT_TUPLE, mapping = args.type == JT_DICT;
    size_t next = 0;
    JBuf b = {0};
    for (size_t i = 0; i < f->len; i++) {
        if (f->s[i] != '%') {
            jbuf_put(r, &b, f->s + i, 1);
            continue;
        }
        if (++i >= f->len) jinja_fail(r, "incomplete format");
        JValue v = {0};
        bool have = false;
        if (f->s[i] == '(') {
            size_t close = i;
            while (close < f->len && f->s[close] != ')') close++;
            if (close >= f->len || !mapping) jinja_fail(r, "format requires a mapping");
            JValue *found = jv_dict_get(args.d, jv_str(r, f->s + i + 1, close - i - 1));
            if (!found) jinja_fail(r, "a format key is missing");
            v = *found;
            have = true;
            i = close + 1;
        }
        char flags[8] = "";
        size_t nf = 0;
        while (i < f->len && strchr("-+ #0", f->s[i]) && nf < sizeof flags - 1) flags[nf++] = f->s[i++];
        int width = 0, prec = -1;
        while (i < f->len && f->s[i] >= '0' && f->s[i] <= '9') width = width * 10 + (f->s[i++] - '0');
        if (i < f->len && f->s[i] == '.') {
            prec = 0;
            i++;
            while (i < f->len && f->s[i] >= '0' && f->s[i] <= '9') prec = prec * 10 + (f->s[i++] - '0');
        }
        if (width > 4096 || prec > 4096) jinja_fail(r, "a format width over 4096");
        if (i >= f->len) jinja_fail(r, "incomplete format");
        char conv = f->s[i];
        if (conv == '%') {
            jbuf_put(r, &b, "%", 1);
            continue;
        }
        if (!strchr("srdifeEgGxXoca", conv)) jinja_fail(r, "unsupported format character '%c'", conv);
        if (!have) {
            if (tuple) {
                if (next >= args.l->n) jinja_fail(r, "not enough arguments for format string");
                v = args.l->items[next++];
            } else {
                if (next++) jinja_fail(r, "not enough arguments for format string");
                v = args;
            }
        }
        percent_one(r, &b, conv, flags, width, prec, v);
    }
    if (tuple && next < args.l->n) jinja_fail(r, "not all arguments converted during string formatting");
    return jbuf_value(r, &b);
}

/* str.format: {} {0} {name}, !r/!s, and the spec [[fill]align][0][width][.prec][type]. */
static void format_field(JRender *r, JBuf *b, JValue v, const char *spec, size_t n) {
    char fill = ' ', align = 0, type = 0;
    size_t i = 0;
    if (n >= 2 && strchr("<>^", spec[1])) {
        fill = spec[0];
        align = spec[1];
        i = 2;
    } else if (n >= 1 && strchr("<>^", spec[0])) {
        align = spec[0];
        i = 1;
    }
    if (i < n && spec[i] == '0') {
        fill = '0';
        if (!align) align = '=';
        i++;
    }
    int width = 0, prec = -1;
    while (i < n && spec[i] >= '0' && spec[i] <= '9') width = width * 10 + (spec[i++] - '0');
    if (i < n && spec[i] == '.') {
        prec = 0;
        i++;
        while (i < n && spec[i] >= '0' && spec[i] <= '9') prec = prec * 10 + (spec[i++] - '0');
    }
    if (i < n) type = spec[i++];
    if (i != n || width > 4096 || prec > 4096) jinja_fail(r, "unsupported format spec '%.*s'", (int)n, spec);
    JBuf t = {0};
    if (type == 'f' || type == 'e' || type == '%' || (prec >= 0 && v.type == JT_FLOAT && type != 's')) {
        if (v.type != JT_FLOAT && v.type != JT_INT && v.type != JT_BOOL) jinja_fail(r, "unknown format code for '%s'", jv_type_name(v));
        char num[512];
        double x = v.type == JT_FLOAT ? v.f : v.type == JT_INT ? (double)v.i : v.b;
        snprintf(num, sizeof num, type == 'e' ? "%.*e" : "%.*f", prec < 0 ? 6 : prec, type == '%' ? x * 100 : x);
        jbuf_puts(r, &t, num);
        if (type == '%') jbuf_put(r, &t, "%", 1);
    } else {
        jv_write_str(r, &t, v);
        if (prec >= 0 && v.type == JT_STR && (size_t)prec < jinja_utf8_count(t.data, t.len)) t.len = jinja_utf8_offset(t.data, t.len, prec);
    }
    if (!align) align = v.type == JT_INT || v.type == JT_FLOAT ? '>' : '<';
    int pad = width - (int)jinja_utf8_count(t.data ? t.data : "", t.len);
    int before = pad <= 0 ? 0 : align == '<' ? 0 : align == '^' ? pad / 2 : pad;
    int after = pad <= 0 ? 0 : pad - before;
    for (int k = 0; k < before; k++) jbuf_put(r, b, &fill, 1);
    jbuf_put(r, b, t.data ? t.data : "", t.len);
    for (int k = 0; k < after; k++) jbuf_put(r, b, &fill, 1);
}

JValue py_str_format(JRender *r, JValue fmt, JArgs *a) {
    const JStr *f = jinja_need_str(r, fmt, "the format");
    JBuf b = {0};
    size_t auto_index = 0;
    for (size_t i = 0; i < f->len; i++) {
        char c = f->s[i];
        if (c == '}' ) {
            if (i + 1 < f->len && f->s[i + 1] == '}') i++;
            else jinja_fail(r, "single '}' encountered in format string");
            jbuf_put(r, &b, "}", 1);
            continue;
        }
        if (c != '{') {
            jbuf_put(r, &b, &c, 1);
            continue;
        }
        if (i + 1 < f->len && f->s[i + 1] == '{') {
            jbuf_put(r, &b, "{", 1);
            i++;
            continue;
        }
        size_t close = i + 1;
        while (close < f->len && f->s[close] != '}') close++;
        if (close >= f->len) jinja_fail(r, "single '{' encountered in format string");
        const char *field = f->s + i + 1;
        size_t flen = close - i - 1, name_len = 0;
        while (name_len < flen && field[name_len] != '!' && field[name_len] != ':') name_len++;
        JValue v;
        if (name_len == 0 || (field[0] >= '0' && field[0] <= '9')) {
            size_t idx = name_len ? (size_t)strtoul(field, NULL, 10) : auto_index++;
            if (idx >= a->npos) jinja_fail(r, "Replacement index %zu out of range for positional args tuple", idx);
            v = a->pos[idx];
        } else {
            size_t k = 0;
            while (k < a->nkw && (strlen(a->kw_names[k]) != name_len || memcmp(a->kw_names[k], field, name_len))) k++;
            if (k == a->nkw) jinja_fail(r, "KeyError: '%.*s'", (int)name_len, field);
            v = a->kw[k];
        }
        size_t p = name_len;
        if (p < flen && field[p] == '!') {
            if (p + 1 < flen && field[p + 1] == 'r') {
                JBuf t = {0};
                jv_write_repr(r, &t, v);
                v = jbuf_value(r, &t);
            }
            p += 2;
        }
        if (p < flen && field[p] == ':') p++;
        format_field(r, &b, v, field + p, flen > p ? flen - p : 0);
        i = close;
    }
    return jbuf_value(r, &b);
}

