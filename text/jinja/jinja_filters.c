/*
 * jinja_filters.c - Jinja2's filters and tests, with transformers' tojson.
 *
 * Hand-written (see jinja.h), each with Jinja2 3.1's behaviour: select,
 * reject, map, selectattr, rejectattr, unique, batch and items return
 * generators (always true, no length, iterated once); reverse of a list is
 * an iterator; first/last of nothing is Undefined; sort and unique ignore
 * case unless told; default replaces only Undefined unless boolean=true;
 * int("42.23") is 42; round returns a float; attribute paths may be dotted
 * ("a.b.0").
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

static JValue iter_of(JValue list) {
    list.type = JT_ITER;
    return list;
}

static JValue str_of(JRender *r, JValue v) { return jv_to_str(r, v); }

/* Dotted attribute path lookup, as make_attrgetter does (integer parts index). */
static JValue get_path(JRender *r, JValue item, JValue attr, JValue dflt) {
    if (attr.type == JT_INT) return jinja_getitem(r, item, attr);
    const JStr *path = jv_to_str(r, attr).s;
    size_t start = 0;
    while (start <= path->len) {
        size_t end = start;
        while (end < path->len && path->s[end] != '.') end++;
        bool digits = end > start;
        for (size_t i = start; i < end; i++) digits = digits && path->s[i] >= '0' && path->s[i] <= '9';
        JValue key = digits ? jv_int(strtoll(path->s + start, NULL, 10)) : jv_str(r, path->s + start, end - start);
        item = jinja_getitem(r, item, key);
        if (item.type == JT_UNDEFINED && dflt.type != JT_NONE) item = dflt;
        start = end + 1;
    }
    return item;
}

static JValue lower_if_str(JRender *r, JValue v, bool case_sensitive) {
    return !case_sensitive && v.type == JT_STR ? py_lower(r, v) : v;
}

/* ---- filters -------------------------------------------------------------------------------------------- */

static JValue f_abs(JRender *r, JValue v, JArgs *a) {
    (void)a;
    if (v.type == JT_INT) return v.i == INT64_MIN ? (jinja_fail(r, "integer overflow"), v) : jv_int(v.i < 0 ? -v.i : v.i);
    if (v.type == JT_BOOL) return jv_int(v.b);
    if (v.type == JT_FLOAT) return jv_float(fabs(v.f));
    if (v.type == JT_UNDEFINED) jv_raise_undefined(r, v);
    jinja_fail(r, "bad operand type for abs(): '%s'", jv_type_name(v));
}

/* An attribute only: a dict's keys are not its attributes. */
static JValue f_attr(JRender *r, JValue v, JArgs *a) {
    const char *name = str_of(r, jarg(a, 0, "name", jv_none())).s->s;
    if (v.type != JT_DICT) return jinja_getattr(r, v, name);
    JValue m = jinja_method(r, v, name);
    return m.type != JT_UNDEFINED ? m : jv_undefined(r, name, jv_owner_name(v));
}

static JValue f_batch(JRender *r, JValue v, JArgs *a) {
    int64_t size = jv_as_int(r, jarg(a, 0, "linecount", jv_none()), "batch size");
    JValue fill = jarg(a, 1, "fill_with", jv_none());
    if (size <= 0) jinja_fail(r, "batch size must be positive");
    JList *items = jv_iterate(r, v);
    JValue out = jv_list(r, 0), row = {0};
    for (size_t i = 0; i < items->n; i++) {
        if (i % (size_t)size == 0) {
            row = jv_list(r, (size_t)size);
            jv_list_push(r, out.l, row);
        }
        jv_list_push(r, row.l, items->items[i]);
    }
    if (row.l && fill.type != JT_NONE)
        while (row.l->n < (size_t)size) jv_list_push(r, row.l, fill);
    return iter_of(out);
}

static JValue f_capitalize(JRender *r, JValue v, JArgs *a) { return jinja_call(r, jinja_getattr(r, str_of(r, v), "capitalize"), a); }

static JValue f_center(JRender *r, JValue v, JArgs *a) {
    JValue s = str_of(r, v);
    int64_t width = jv_as_int(r, jarg(a, 0, "width", jv_int(80)), "width");
    int64_t len = jv_length(r, s);
    if (width <= len) return s;
    if (width > (int64_t)r->limits->max_output) jinja_fail(r, "center() width over the limit");
    int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
    JBuf b = {0};
    for (int64_t i = 0; i < left; i++) jbuf_put(r, &b, " ", 1);
    jbuf_put(r, &b, s.s->s, s.s->len);
    for (int64_t i = 0; i < pad - left; i++) jbuf_put(r, &b, " ", 1);
    return jbuf_value(r, &b);
}

static JValue f_default(JRender *r, JValue v, JArgs *a) {
    JValue dflt = jarg(a, 0, "default_value", jv_cstr(r, ""));
    bool boolean = jv_truthy(jarg(a, 1, "boolean", jv_bool(false)));
    return v.type == JT_UNDEFINED || (boolean && !jv_truthy(v)) ? dflt : v;
}

static JValue sorted(JRender *r, JList *items, bool reverse, bool case_sensitive, JValue attr, int pair_index);

static JValue f_dictsort(JRender *r, JValue v, JArgs *a) {
    if (v.type != JT_DICT) jinja_fail(r, "dictsort needs a mapping, not %s", jv_type_name(v));
    bool cs = jv_truthy(jarg(a, 0, "case_sensitive", jv_bool(false)));
    JValue by = jarg(a, 1, "by", jv_cstr(r, "key"));
    bool reverse = jv_truthy(jarg(a, 2, "reverse", jv_bool(false)));
    bool by_value = by.type == JT_STR && !strcmp(by.s->s, "value");
    if (!by_value && !(by.type == JT_STR && !strcmp(by.s->s, "key"))) jinja_fail(r, "You can only sort by either \"key\" or \"value\"");
    JArgs none = {0};
    JValue pairs = jinja_call(r, jinja_getattr(r, v, "items"), &none);
    return sorted(r, pairs.l, reverse, cs, jv_none(), by_value ? 1 : 0);
}

static JValue f_escape(JRender *r, JValue v, JArgs *a) {
    (void)a;
    JValue s = str_of(r, v);
    JBuf b = {0};
    for (size_t i = 0; i < s.s->len; i++) {
        const char *esc = NULL;
        switch (s.s->s[i]) {
        case '&': esc = "&amp;"; break;
        case '<': esc = "&lt;"; break;
        case '>': esc = "&gt;"; break;
        case '"': esc = "&#34;"; break;
        case '\'': esc = "&#39;"; break;
        default: break;
        }
        if (esc) jbuf_puts(r, &b, esc);
        else jbuf_put(r, &b, s.s->s + i, 1);
    }
    return jbuf_value(r, &b);
}

static JValue f_first(JRender *r, JValue v, JArgs *a) {
    (void)a;
    JList *items = jv_iterate(r, v);
    return items->n ? items->items[0] : jv_undefined_hint(r, "No first item, sequence was empty.");
}

static JValue f_last(JRender *r, JValue v, JArgs *a) {
    (void)a;
    if (v.type == JT_ITER) jinja_fail(r, "'generator' object is not reversible");
    JList *items = jv_iterate(r, v);
    return items->n ? items->items[items->n - 1] : jv_undefined_hint(r, "No last item, sequence was empty.");
}

static bool parse_number(const char *s, size_t n, bool integer, int base, double *out_f, int64_t *out_i) {
    char buf[128];
    size_t start = 0, end = n;
    while (start < end && py_isspace_cp((unsigned char)s[start])) start++;
    while (end > start && py_isspace_cp((unsigned char)s[end - 1])) end--;
    if (end - start == 0 || end - start >= sizeof buf) return false;
    size_t k = 0;
    for (size_t i = start; i < end; i++)
        if (s[i] != '_') buf[k++] = s[i];
    buf[k] = '\0';
    char *stop;
    if (integer) {
        *out_i = strtoll(buf, &stop, base == 10 ? 10 : 0);
    } else {
        *out_f = strtod(buf, &stop);
    }
    return *stop == '\0';
}

static JValue f_int(JRender *r, JValue v, JArgs *a) {
    JValue dflt = jarg(a, 0, "default", jv_int(0));
    int64_t base = jv_as_int(r, jarg(a, 1, "base", jv_int(10)), "base");
    int64_t i;
    double f;
    switch (v.type) {
    case JT_INT: return v;
    case JT_BOOL: return jv_int(v.b);
    case JT_FLOAT: return isfinite(v.f) && fabs(v.f) < 9.2e18 ? jv_int((int64_t)v.f) : dflt;
    case JT_STR:
        if (parse_number(v.s->s, v.s->len, true, (int)base, &f, &i)) return jv_int(i);
        if (parse_number(v.s->s, v.s->len, false, 10, &f, &i) && isfinite(f) && fabs(f) < 9.2e18) return jv_int((int64_t)f);
        return dflt;
    default: return dflt;
    }
}

static JValue f_float(JRender *r, JValue v, JArgs *a) {
    JValue dflt = jarg(a, 0, "default", jv_float(0.0));
    double f;
    int64_t i;
    switch (v.type) {
    case JT_FLOAT: return v;
    case JT_INT: return jv_float((double)v.i);
    case JT_BOOL: return jv_float(v.b);
    case JT_STR: return parse_number(v.s->s, v.s->len, false, 10, &f, &i) ? jv_float(f) : dflt;
    default: (void)r; return dflt;
    }
}


static JValue f_format(JRender *r, JValue v, JArgs *a) {
    if (a->npos && a->nkw) jinja_fail(r, "can't handle positional and keyword arguments at the same time");
    JValue args;
    if (a->nkw) {
        args = jv_dict(r, a->nkw);
        for (size_t k = 0; k < a->nkw; k++) jv_dict_set(r, args.d, jv_cstr(r, a->kw_names[k]), a->kw[k]);
    } else {
        args = jv_list(r, a->npos);
        args.type = JT_TUPLE;
        for (size_t i = 0; i < a->npos; i++) jv_list_push(r, args.l, a->pos[i]);
    }
    return py_percent_format(r, str_of(r, v), args);
}

static JValue f_indent(JRender *r, JValue v, JArgs *a) {
    JValue width = jarg(a, 0, "width", jv_int(4));
    bool first = jv_truthy(jarg(a, 1, "first", jv_bool(false))), blank = jv_truthy(jarg(a, 2, "blank", jv_bool(false)));
    const char *indent;
    if (width.type == JT_STR) {
        indent = width.s->s;
    } else {
        int64_t n = jv_as_int(r, width, "indent width");
        if (n < 0) n = 0;
        if (n > 4096) jinja_fail(r, "indent width over 4096");
        char *spaces = arena_alloc(&r->arena, (size_t)n + 1);
        memset(spaces, ' ', (size_t)n);
        indent = spaces;
    }
    return py_splitlines_join(r, v, indent, first, blank);
}

static JValue f_items(JRender *r, JValue v, JArgs *a) {
    if (v.type == JT_UNDEFINED) return iter_of(jv_list(r, 0));
    if (v.type != JT_DICT) jinja_fail(r, "Can only get item pairs from a mapping.");
    return iter_of(jinja_call(r, jinja_getattr(r, v, "items"), a));
}

static JValue f_join(JRender *r, JValue v, JArgs *a) {
    JValue sep = str_of(r, jarg(a, 0, "d", jv_cstr(r, ""))), attr = jarg(a, 1, "attribute", jv_none());
    JList *items = jv_iterate(r, v);
    JBuf b = {0};
    for (size_t i = 0; i < items->n; i++) {
        if (i) jbuf_put(r, &b, sep.s->s, sep.s->len);
        jv_write_str(r, &b, attr.type == JT_NONE ? items->items[i] : get_path(r, items->items[i], attr, jv_none()));
    }
    return jbuf_value(r, &b);
}

static JValue f_length(JRender *r, JValue v, JArgs *a) { (void)a; return jv_int(jv_length(r, v)); }

static JValue f_list(JRender *r, JValue v, JArgs *a) {
    (void)a;
    JList *items = jv_iterate(r, v);
    JValue out = jv_list(r, items->n);
    for (size_t i = 0; i < items->n; i++) jv_list_push(r, out.l, items->items[i]);
    return out;
}

static JValue f_lower(JRender *r, JValue v, JArgs *a) { (void)a; return py_lower(r, str_of(r, v)); }
static JValue f_upper(JRender *r, JValue v, JArgs *a) { (void)a; return py_upper(r, str_of(r, v)); }

/* A filter or test applied per item with the remaining arguments. */
static JArgs rest_args(JArgs *a, size_t skip) {
    JArgs out = *a;
    out.pos = skip < a->npos ? a->pos + skip : NULL;
    out.npos = skip < a->npos ? a->npos - skip : 0;
    return out;
}

static JValue f_map(JRender *r, JValue v, JArgs *a) {
    JValue out = jv_list(r, 0);
    if (!jv_truthy(v)) return iter_of(out);
    JValue attr = jarg(a, SIZE_MAX, "attribute", jv_none());
    JList *items = jv_iterate(r, v);
    if (!a->npos && attr.type == JT_NONE) jinja_fail(r, "map requires a filter argument");
    if (attr.type != JT_NONE) {
        JValue dflt = jarg(a, SIZE_MAX, "default", jv_none());
        for (size_t i = 0; i < items->n; i++) jv_list_push(r, out.l, get_path(r, items->items[i], attr, dflt));
        return iter_of(out);
    }
    const char *name = str_of(r, a->pos[0]).s->s;
    JFilterFn fn = jinja_filter(name);
    if (!fn) jinja_fail(r, "No filter named '%s'.", name);
    JArgs rest = rest_args(a, 1);
    rest.callee = name;
    for (size_t i = 0; i < items->n; i++) jv_list_push(r, out.l, fn(r, items->items[i], &rest));
    return iter_of(out);
}

static JValue minmax(JRender *r, JValue v, JArgs *a, int sign) {
    bool cs = jv_truthy(jarg(a, 0, "case_sensitive", jv_bool(false)));
    JValue attr = jarg(a, 1, "attribute", jv_none());
    JList *items = jv_iterate(r, v);
    if (!items->n) return jv_undefined_hint(r, "No aggregated item, sequence was empty.");
    size_t best = 0;
    for (size_t i = 1; i < items->n; i++) {
        JValue x = items->items[i], y = items->items[best];
        if (attr.type != JT_NONE) {
            x = get_path(r, x, attr, jv_none());
            y = get_path(r, y, attr, jv_none());
        }
        if (jv_compare(r, lower_if_str(r, x, cs), lower_if_str(r, y, cs)) * sign > 0) best = i;
    }
    return items->items[best];
}
static JValue f_min(JRender *r, JValue v, JArgs *a) { return minmax(r, v, a, -1); }
static JValue f_max(JRender *r, JValue v, JArgs *a) { return minmax(r, v, a, 1); }

static JValue select_reject(JRender *r, JValue v, JArgs *a, bool attr_first, bool keep) {
    JValue out = jv_list(r, 0);
    if (!jv_truthy(v)) return iter_of(out);
    JList *items = jv_iterate(r, v);
    size_t off = 0;
    JValue attr = jv_none();
    if (attr_first) {
        if (!a->npos) jinja_fail(r, "Missing parameter for attribute name");
        attr = a->pos[0];
        off = 1;
    }
    JTestFn test = NULL;
    JArgs rest = rest_args(a, off + 1);
    if (a->npos > off) {
        const char *name = str_of(r, a->pos[off]).s->s;
        test = jinja_test(name);
        if (!test) jinja_fail(r, "No test named '%s'.", name);
        rest.callee = name;
    }
    for (size_t i = 0; i < items->n; i++) {
        JValue x = attr_first ? get_path(r, items->items[i], attr, jv_none()) : items->items[i];
        bool pass = test ? test(r, x, &rest) : jv_truthy(x);
        if (pass == keep) jv_list_push(r, out.l, items->items[i]);
    }
    return iter_of(out);
}
static JValue f_select(JRender *r, JValue v, JArgs *a) { return select_reject(r, v, a, false, true); }
static JValue f_reject(JRender *r, JValue v, JArgs *a) { return select_reject(r, v, a, false, false); }
static JValue f_selectattr(JRender *r, JValue v, JArgs *a) { return select_reject(r, v, a, true, true); }
static JValue f_rejectattr(JRender *r, JValue v, JArgs *a) { return select_reject(r, v, a, true, false); }

static JValue f_replace(JRender *r, JValue v, JArgs *a) {
    JValue count = jarg(a, 2, "count", jv_none());
    return py_replace(r, str_of(r, v), str_of(r, jarg(a, 0, "old", jv_none())), str_of(r, jarg(a, 1, "new", jv_none())),
                      count.type == JT_NONE ? -1 : jv_as_int(r, count, "count"));
}

static JValue f_reverse(JRender *r, JValue v, JArgs *a) {
    (void)a;
    if (v.type == JT_STR) {
        JList *chars = jv_iterate(r, v);
        JBuf b = {0};
        for (size_t i = chars->n; i-- > 0;) jbuf_put(r, &b, chars->items[i].s->s, chars->items[i].s->len);
        return jbuf_value(r, &b);
    }
    bool reversible = v.type == JT_LIST || v.type == JT_TUPLE || v.type == JT_DICT;
    JList *items = jv_iterate(r, v);
    JValue out = jv_list(r, items->n);
    for (size_t i = items->n; i-- > 0;) jv_list_push(r, out.l, items->items[i]);
    return reversible ? iter_of(out) : out;
}

static JValue f_round(JRender *r, JValue v, JArgs *a) {
    int64_t prec = jv_as_int(r, jarg(a, 0, "precision", jv_int(0)), "precision");
    JValue method = jarg(a, 1, "method", jv_cstr(r, "common"));
    if (method.type != JT_STR || (strcmp(method.s->s, "common") && strcmp(method.s->s, "ceil") && strcmp(method.s->s, "floor")))
        jinja_fail(r, "method must be common, ceil or floor");
    if (v.type == JT_UNDEFINED) jv_raise_undefined(r, v);
    if (v.type != JT_INT && v.type != JT_BOOL && v.type != JT_FLOAT) jinja_fail(r, "type %s doesn't define __round__ method", jv_type_name(v));
    double x = v.type == JT_FLOAT ? v.f : v.type == JT_INT ? (double)v.i : v.b, scale = pow(10.0, (double)prec);
    if (!strcmp(method.s->s, "common")) {
        if (v.type != JT_FLOAT) return v.type == JT_BOOL ? jv_int(v.b) : v; /* round(int, n) stays an int */
        double y = x * scale, fl = floor(y), diff = y - fl;
        double rounded = diff > 0.5 ? fl + 1 : diff < 0.5 ? fl : (fmod(fl, 2) == 0 ? fl : fl + 1); /* half to even */
        return jv_float(rounded / scale);
    }
    return jv_float((!strcmp(method.s->s, "ceil") ? ceil(x * scale) : floor(x * scale)) / scale);
}

static JValue f_safe(JRender *r, JValue v, JArgs *a) { (void)r; (void)a; return v; }

static JValue f_slice(JRender *r, JValue v, JArgs *a) {
    int64_t slices = jv_as_int(r, jarg(a, 0, "slices", jv_none()), "slices");
    JValue fill = jarg(a, 1, "fill_with", jv_none());
    if (slices <= 0) jinja_fail(r, "slices must be positive");
    JList *items = jv_iterate(r, v);
    size_t n = items->n, per = n / (size_t)slices, extra = n % (size_t)slices, offset = 0;
    JValue out = jv_list(r, (size_t)slices);
    for (size_t s = 0; s < (size_t)slices; s++) {
        size_t start = offset + s * per;
        if (s < extra) offset++;
        size_t end = offset + (s + 1) * per;
        JValue part = jv_list(r, end - start + 1);
        for (size_t i = start; i < end; i++) jv_list_push(r, part.l, items->items[i]);
        if (fill.type != JT_NONE && s >= extra) jv_list_push(r, part.l, fill);
        jv_list_push(r, out.l, part);
    }
    return iter_of(out);
}

/* A stable sort (Python's sorted) by each item, its attribute, or for
 * dictsort the pair's key (pair_index 0) or value (1); -1: no pairs. */
static JValue sorted(JRender *r, JList *items, bool reverse, bool case_sensitive, JValue attr, int pair_index) {
    size_t n = items->n;
    JValue *keys = arena_alloc(&r->arena, (n + 1) * sizeof *keys);
    size_t *order = arena_alloc(&r->arena, (n + 1) * sizeof *order);
    for (size_t i = 0; i < n; i++) {
        JValue k = items->items[i];
        if (pair_index >= 0) k = k.l->items[pair_index];
        else if (attr.type != JT_NONE) k = get_path(r, k, attr, jv_none());
        keys[i] = lower_if_str(r, k, case_sensitive);
        order[i] = i;
    }
    /* merge sort on the order (stable); the comparison raises for unordered types as Python's does */
    size_t *tmp = arena_alloc(&r->arena, (n + 1) * sizeof *tmp);
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int c = jv_compare(r, keys[order[j]], keys[order[i]]);
                if (reverse ? c > 0 : c < 0) tmp[k++] = order[j++];
                else tmp[k++] = order[i++];
            }
            while (i < mid) tmp[k++] = order[i++];
            while (j < hi) tmp[k++] = order[j++];
        }
        memcpy(order, tmp, n * sizeof *order);
    }
    JValue out = jv_list(r, n);
    for (size_t i = 0; i < n; i++) jv_list_push(r, out.l, items->items[order[i]]);
    return out;
}

static JValue f_sort(JRender *r, JValue v, JArgs *a) {
    bool reverse = jv_truthy(jarg(a, 0, "reverse", jv_bool(false)));
    bool cs = jv_truthy(jarg(a, 1, "case_sensitive", jv_bool(false)));
    return sorted(r, jv_iterate(r, v), reverse, cs, jarg(a, 2, "attribute", jv_none()), -1);
}

static JValue f_string(JRender *r, JValue v, JArgs *a) { (void)a; return str_of(r, v); }

static JValue f_sum(JRender *r, JValue v, JArgs *a) {
    JValue attr = jarg(a, 0, "attribute", jv_none()), total = jarg(a, 1, "start", jv_int(0));
    JList *items = jv_iterate(r, v);
    for (size_t i = 0; i < items->n; i++) {
        JValue x = attr.type == JT_NONE ? items->items[i] : get_path(r, items->items[i], attr, jv_none());
        if ((total.type == JT_INT || total.type == JT_BOOL) && (x.type == JT_INT || x.type == JT_BOOL)) {
            int64_t s;
            if (__builtin_add_overflow(total.type == JT_INT ? total.i : total.b, x.type == JT_INT ? x.i : x.b, &s)) jinja_fail(r, "integer overflow");
            total = jv_int(s);
        } else if ((total.type == JT_INT || total.type == JT_FLOAT || total.type == JT_BOOL) &&
                   (x.type == JT_INT || x.type == JT_FLOAT || x.type == JT_BOOL)) {
            double t = total.type == JT_FLOAT ? total.f : total.type == JT_INT ? (double)total.i : total.b;
            total = jv_float(t + (x.type == JT_FLOAT ? x.f : x.type == JT_INT ? (double)x.i : x.b));
        } else {
            jinja_fail(r, "unsupported operand type(s) for +: '%s' and '%s'", jv_type_name(total), jv_type_name(x));
        }
    }
    return total;
}

static JValue f_title(JRender *r, JValue v, JArgs *a) {
    (void)a;
    /* Jinja2's own: words begin after '-', whitespace, '(', '{', '[' or '<' */
    JValue s = str_of(r, v);
    JBuf b = {0};
    bool start = true;
    for (size_t i = 0; i < s.s->len;) {
        size_t at = i;
        uint32_t cp = jinja_utf8_next(s.s->s, s.s->len, &i);
        bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py_isspace_cp(cp);
        JValue ch = jv_str(r, s.s->s + at, i - at);
        JValue mapped = sep ? ch : start ? py_upper(r, ch) : py_lower(r, ch);
        jbuf_put(r, &b, mapped.s->s, mapped.s->len);
        start = sep;
    }
    return jbuf_value(r, &b);
}

static JValue f_tojson(JRender *r, JValue v, JArgs *a) {
    JValue indent = jarg(a, 0, "indent", jv_none()), seps = jarg(a, SIZE_MAX, "separators", jv_none());
    bool sort_keys = jv_truthy(jarg(a, SIZE_MAX, "sort_keys", jv_bool(false)));
    JsonStyle st = {.item_sep = ", ", .key_sep = ": ", .sort_keys = sort_keys};
    if (indent.type == JT_STR) {
        st.indent = indent.s->s;
    } else if (indent.type != JT_NONE) {
        int64_t n = jv_as_int(r, indent, "indent");
        if (n > 4096) jinja_fail(r, "indent over 4096");
        char *spaces = arena_alloc(&r->arena, n > 0 ? (size_t)n + 1 : 1);
        if (n > 0) memset(spaces, ' ', (size_t)n);
        st.indent = spaces;
    }
    if (st.indent) st.item_sep = ",";
    if (seps.type != JT_NONE) {
        JList *l = jv_iterate(r, seps);
        if (l->n != 2 || l->items[0].type != JT_STR || l->items[1].type != JT_STR) jinja_fail(r, "separators must be two strings");
        st.item_sep = l->items[0].s->s;
        st.key_sep = l->items[1].s->s;
    }
    JBuf b = {0};
    jinja_tojson(r, &b, v, &st);
    return jbuf_value(r, &b);
}

static JValue f_trim(JRender *r, JValue v, JArgs *a) { return py_strip(r, str_of(r, v), jarg(a, 0, "chars", jv_none()), true, true); }

static JValue f_truncate(JRender *r, JValue v, JArgs *a) {
    JValue s = str_of(r, v);
    int64_t length = jv_as_int(r, jarg(a, 0, "length", jv_int(255)), "length");
    bool killwords = jv_truthy(jarg(a, 1, "killwords", jv_bool(false)));
    JValue end = str_of(r, jarg(a, 2, "end", jv_cstr(r, "...")));
    int64_t leeway = jv_as_int(r, jarg(a, 3, "leeway", jv_int(5)), "leeway");
    int64_t n = jv_length(r, s), end_len = jv_length(r, end);
    if (length < end_len) jinja_fail(r, "expected length >= %lld, got %lld", (long long)end_len, (long long)length);
    if (n <= length + leeway) return s;
    size_t cut = jinja_utf8_offset(s.s->s, s.s->len, length - end_len);
    JBuf b = {0};
    if (killwords) {
        jbuf_put(r, &b, s.s->s, cut);
    } else {
        size_t at = cut;
        while (at > 0 && s.s->s[at - 1] != ' ') at--;
        jbuf_put(r, &b, s.s->s, at ? at - 1 : cut);
    }
    jbuf_put(r, &b, end.s->s, end.s->len);
    return jbuf_value(r, &b);
}

static JValue f_unique(JRender *r, JValue v, JArgs *a) {
    bool cs = jv_truthy(jarg(a, 0, "case_sensitive", jv_bool(false)));
    JValue attr = jarg(a, 1, "attribute", jv_none());
    JList *items = jv_iterate(r, v);
    JValue out = jv_list(r, items->n), seen = jv_list(r, items->n);
    for (size_t i = 0; i < items->n; i++) {
        JValue key = lower_if_str(r, attr.type == JT_NONE ? items->items[i] : get_path(r, items->items[i], attr, jv_none()), cs);
        bool dup = false;
        for (size_t k = 0; k < seen.l->n && !dup; k++) dup = jv_equal(seen.l->items[k], key);
        if (dup) continue;
        jv_list_push(r, seen.l, key);
        jv_list_push(r, out.l, items->items[i]);
    }
    return iter_of(out);
}

static JValue f_wordcount(JRender *r, JValue v, JArgs *a) {
    (void)a;
    JValue s = str_of(r, v);
    int64_t words = 0;
    bool in_word = false;
    for (size_t i = 0; i < s.s->len;) {
        uint32_t cp = jinja_utf8_next(s.s->s, s.s->len, &i);
        bool w = cp == '_' || (cp < 0x80 ? ((cp | 32) >= 'a' && (cp | 32) <= 'z') || (cp >= '0' && cp <= '9') : !py_isspace_cp(cp));
        if (w && !in_word) words++;
        in_word = w;
    }
    return jv_int(words);
}

typedef struct Named {
    const char *name;
    JFilterFn fn;
} Named;

static const Named FILTERS[] = {
    {"abs", f_abs},         {"attr", f_attr},           {"batch", f_batch},       {"capitalize", f_capitalize},
    {"center", f_center},   {"count", f_length},        {"d", f_default},         {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape},          {"escape", f_escape},     {"first", f_first},
    {"float", f_float},     {"forceescape", f_escape},  {"format", f_format},     {"indent", f_indent},
    {"int", f_int},         {"items", f_items},         {"join", f_join},         {"last", f_last},
    {"length", f_length},   {"list", f_list},           {"lower", f_lower},       {"map", f_map},
    {"max", f_max},         {"min", f_min},             {"reject", f_reject},     {"rejectattr", f_rejectattr},
    {"replace", f_replace}, {"reverse", f_reverse},     {"round", f_round},       {"safe", f_safe},
    {"select", f_select},   {"selectattr", f_selectattr}, {"slice", f_slice},     {"sort", f_sort},
    {"string", f_string},   {"sum", f_sum},             {"title", f_title},       {"tojson", f_tojson},
    {"trim", f_trim},       {"truncate", f_truncate},   {"unique", f_unique},     {"upper", f_upper},
    {"wordcount", f_wordcount},
};

JFilterFn jinja_filter(const char *name) {
    for (size_t i = 0; i < sizeof FILTERS / sizeof *FILTERS; i++)
        if (!strcmp(FILTERS[i].name, name)) return FILTERS[i].fn;
    return NULL;
}

/* ---- tests ------------------------------------------------------------------------------------------------- */

static JValue targ(JRender *r, JArgs *a) {
    if (!a->npos) jinja_fail(r, "the test '%s' needs an argument", a->callee);
    return a->pos[0];
}

static bool t_defined(JRender *r, JValue v, JArgs *a) { (void)r; (void)a; return v.type != JT_UNDEFINED; }
static bool t_undefined(JRender *r, JValue v, JArgs *a) { (void)r; (void)a; return v.type == JT_UNDEFINED; }
static bool t_none(JRender *r, JValue v, JArgs *a) { (void)r; (void)a; return v.type == JT_NONE; }
static bool t_boolean(JRender *r, JValue v, JArgs *a) { (void)r; (void)a; return v.type == JT_BOOL; }
static bool t_true(JRender *r, JValue v, JArgs *a) { (void)r; (void)a; return v.type == JT_BOOL && v.b; }
static bool t_false(JRender *r, JValue v, JArgs *a) { (void)r; (void)a; return v.type == JT_BOOL && !v.b; }
static bool t_integer(JRender *r, JValue v, JArgs *a) { (void)r; (void)a; return v.type == JT_INT; }
static bool t_float(JRender *r, JValue v, JArgs *a) { (void)r; (void)a; return v.type == JT_FLOAT; }
static bool t_number(JRender *r, JValue v, JArgs *a) { (void)r; (void)a; return v.type == JT_INT || v.type == JT_FLOAT || v.type == JT_BOOL; }
static bool t_string(JRender *r, JValue v, JArgs *a) { (void)r; (void)a; return v.type == JT_STR; }
static bool t_mapping(JRender *r, JValue v, JArgs *a) { (void)r; (void)a; return v.type == JT_DICT; }
static bool t_sequence(JRender *r, JValue v, JArgs *a) {
    (void)r; (void)a;
    return v.type == JT_STR || v.type == JT_LIST || v.type == JT_TUPLE || v.type == JT_DICT || v.type == JT_UNDEFINED;
}
static bool t_iterable(JRender *r, JValue v, JArgs *a) {
    (void)r; (void)a;
    return v.type == JT_STR || v.type == JT_LIST || v.type == JT_TUPLE || v.type == JT_DICT || v.type == JT_ITER ||
           v.type == JT_UNDEFINED;
}
static bool t_callable(JRender *r, JValue v, JArgs *a) { (void)r; (void)a; return v.type == JT_FUNC || v.type == JT_MACRO || v.type == JT_LOOP; }
static bool t_escaped(JRender *r, JValue v, JArgs *a) { (void)r; (void)a; (void)v; return false; }
static int64_t int_of(JRender *r, JValue v) {
    if (v.type == JT_UNDEFINED) jv_raise_undefined(r, v);
    if (v.type != JT_INT && v.type != JT_BOOL) jinja_fail(r, "unsupported operand type(s) for %%: '%s' and 'int'", jv_type_name(v));
    return v.type == JT_INT ? v.i : v.b;
}
static bool t_odd(JRender *r, JValue v, JArgs *a) { (void)a; return (int_of(r, v) % 2 + 2) % 2 == 1; }
static bool t_even(JRender *r, JValue v, JArgs *a) { (void)a; return int_of(r, v) % 2 == 0; }
static bool t_divisibleby(JRender *r, JValue v, JArgs *a) {
    int64_t d = int_of(r, targ(r, a));
    if (!d) jinja_fail(r, "integer division or modulo by zero");
    return int_of(r, v) % d == 0;
}
static bool t_eq(JRender *r, JValue v, JArgs *a) { return jv_equal(v, targ(r, a)); }
static bool t_ne(JRender *r, JValue v, JArgs *a) { return !jv_equal(v, targ(r, a)); }
static bool t_lt(JRender *r, JValue v, JArgs *a) { return jv_compare(r, v, targ(r, a)) < 0; }
static bool t_le(JRender *r, JValue v, JArgs *a) { return jv_compare(r, v, targ(r, a)) <= 0; }
static bool t_gt(JRender *r, JValue v, JArgs *a) { return jv_compare(r, v, targ(r, a)) > 0; }
static bool t_ge(JRender *r, JValue v, JArgs *a) { return jv_compare(r, v, targ(r, a)) >= 0; }
static bool t_sameas(JRender *r, JValue v, JArgs *a) {
    JValue o = targ(r, a);
    if (v.type != o.type) return false;
    switch (v.type) {
    case JT_NONE: case JT_UNDEFINED: return true;
    case JT_BOOL: return v.b == o.b;
    case JT_INT: return v.i == o.i && v.i >= -5 && v.i <= 256; /* CPython's cached small ints */
    case JT_STR: return v.s == o.s;
    default: return v.l == o.l;
    }
}
static bool t_in(JRender *r, JValue v, JArgs *a) {
    JValue seq = targ(r, a);
    if (seq.type == JT_STR) {
        if (v.type != JT_STR) jinja_fail(r, "'in <string>' requires string as left operand, not %s", jv_type_name(v));
        return strstr(seq.s->s, v.s->s) != NULL || !v.s->len;
    }
    if (seq.type == JT_DICT) return jv_dict_get(seq.d, v) != NULL;
    JList *items = jv_iterate(r, seq);
    for (size_t i = 0; i < items->n; i++)
        if (jv_equal(items->items[i], v)) return true;
    return false;
}
static bool t_lower(JRender *r, JValue v, JArgs *a) { (void)a; JValue s = str_of(r, v); return jv_equal(py_lower(r, s), s) && !jv_equal(py_upper(r, s), s); }
static bool t_upper(JRender *r, JValue v, JArgs *a) { (void)a; JValue s = str_of(r, v); return jv_equal(py_upper(r, s), s) && !jv_equal(py_lower(r, s), s); }
static bool t_filter(JRender *r, JValue v, JArgs *a) { (void)r; (void)a; return v.type == JT_STR && jinja_filter(v.s->s); }
static bool t_test(JRender *r, JValue v, JArgs *a) { (void)r; (void)a; return v.type == JT_STR && jinja_test(v.s->s); }

typedef struct NamedTest {
    const char *name;
    JTestFn fn;
} NamedTest;

static const NamedTest TESTS[] = {
    {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none},       {"boolean", t_boolean},
    {"true", t_true},       {"false", t_false},         {"integer", t_integer}, {"float", t_float},
    {"number", t_number},   {"string", t_string},       {"mapping", t_mapping}, {"sequence", t_sequence},
    {"iterable", t_iterable}, {"callable", t_callable}, {"escaped", t_escaped}, {"odd", t_odd},
    {"even", t_even},       {"divisibleby", t_divisibleby}, {"eq", t_eq},       {"==", t_eq},
    {"equalto", t_eq},      {"ne", t_ne},               {"!=", t_ne},           {"lt", t_lt},
    {"<", t_lt},            {"lessthan", t_lt},         {"le", t_le},           {"<=", t_le},
    {"gt", t_gt},           {">", t_gt},                {"greaterthan", t_gt},  {"ge", t_ge},
    {">=", t_ge},           {"sameas", t_sameas},       {"in", t_in},           {"lower", t_lower},
    {"upper", t_upper},     {"filter", t_filter},       {"test", t_test},
};

JTestFn jinja_test(const char *name) {
    for (size_t i = 0; i < sizeof TESTS / sizeof *TESTS; i++)
        if (!strcmp(TESTS[i].name, name)) return TESTS[i].fn;
    return NULL;
}
