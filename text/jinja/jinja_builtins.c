/*
 * jinja_builtins.c - the globals a template can call (Jinja2's range, dict,
 * namespace; transformers' raise_exception and strftime_now), the methods
 * of dicts and lists, and argument helpers.
 *
 * Hand-written (see jinja.h). As in the immutable sandbox transformers
 * uses, methods that would modify a list or dict (append, update, pop, ...)
 * exist but refuse to run: "access to attribute 'append' of 'list' object
 * is unsafe". String methods are in jinja_strings.c.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "jinja_internal.h"

JValue jarg(JArgs *a, size_t i, const char *kw, JValue dflt) {
    if (i < a->npos) return a->pos[i];
    for (size_t k = 0; kw && k < a->nkw; k++)
        if (!strcmp(a->kw_names[k], kw)) return a->kw[k];
    return dflt;
}

void jargs_check(JRender *r, JArgs *a, size_t max_pos, const char *const *kw_allowed) {
    if (a->npos > max_pos) jinja_fail(r, "%s() takes at most %zu positional arguments (%zu given)", a->callee, max_pos, a->npos);
    for (size_t k = 0; k < a->nkw; k++) {
        bool ok = false;
        for (size_t i = 0; kw_allowed && kw_allowed[i]; i++) ok = ok || !strcmp(kw_allowed[i], a->kw_names[k]);
        if (!ok) jinja_fail(r, "%s() got an unexpected keyword argument '%s'", a->callee, a->kw_names[k]);
    }
}

/* ---- dict and list methods --------------------------------------------------------------------------------- */

static JValue d_items(JRender *r, JValue d, JArgs *a) {
    (void)a;
    JValue out = jv_list(r, d.d->n);
    for (size_t i = 0; i < d.d->n; i++) {
        JValue pair = jv_list(r, 2);
        pair.type = JT_TUPLE;
        jv_list_push(r, pair.l, d.d->keys[i]);
        jv_list_push(r, pair.l, d.d->vals[i]);
        jv_list_push(r, out.l, pair);
    }
    return out;
}

static JValue d_keys(JRender *r, JValue d, JArgs *a) {
    (void)a;
    JValue out = jv_list(r, d.d->n);
    for (size_t i = 0; i < d.d->n; i++) jv_list_push(r, out.l, d.d->keys[i]);
    return out;
}

static JValue d_values(JRender *r, JValue d, JArgs *a) {
    (void)a;
    JValue out = jv_list(r, d.d->n);
    for (size_t i = 0; i < d.d->n; i++) jv_list_push(r, out.l, d.d->vals[i]);
    return out;
}

static JValue d_get(JRender *r, JValue d, JArgs *a) {
    if (!a->npos) jinja_fail(r, "get expected at least 1 argument, got 0");
    JValue *v = jv_dict_get(d.d, a->pos[0]);
    return v ? *v : jarg(a, 1, NULL, jv_none());
}

static JValue d_copy(JRender *r, JValue d, JArgs *a) {
    (void)a;
    JValue out = jv_dict(r, d.d->n);
    for (size_t i = 0; i < d.d->n; i++) jv_dict_set(r, out.d, d.d->keys[i], d.d->vals[i]);
    return out;
}

static JValue l_index(JRender *r, JValue l, JArgs *a) {
    JValue want = jarg(a, 0, NULL, jv_none());
    for (size_t i = 0; i < l.l->n; i++)
        if (jv_equal(l.l->items[i], want)) return jv_int((int64_t)i);
    jinja_fail(r, "value is not in list");
}

static JValue l_count(JRender *r, JValue l, JArgs *a) {
    (void)r;
    JValue want = jarg(a, 0, NULL, jv_none());
    int64_t n = 0;
    for (size_t i = 0; i < l.l->n; i++) n += jv_equal(l.l->items[i], want);
    return jv_int(n);
}

static JValue l_copy(JRender *r, JValue l, JArgs *a) {
    (void)a;
    JValue out = jv_list(r, l.l->n);
    for (size_t i = 0; i < l.l->n; i++) jv_list_push(r, out.l, l.l->items[i]);
    return out;
}

typedef struct Method {
    const char *name;
    JBuiltin fn;
} Method;

static const Method DICT_METHODS[] = {{"items", d_items}, {"keys", d_keys}, {"values", d_values}, {"get", d_get}, {"copy", d_copy}};
static const char *const DICT_MUTATORS[] = {"clear", "pop", "popitem", "setdefault", "update", "fromkeys", NULL};
static const Method LIST_METHODS[] = {{"index", l_index}, {"count", l_count}, {"copy", l_copy}};
static const char *const LIST_MUTATORS[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear", NULL};

static JValue unsafe(JRender *r, const char *name, JValue obj) {
    char hint[128];
    snprintf(hint, sizeof hint, "access to attribute '%s' of '%s' object is unsafe.", name, jv_type_name(obj));
    return jv_undefined_hint(r, jv_cstr(r, hint).s->s);
}

JValue jinja_method(JRender *r, JValue obj, const char *name) {
    const Method *table = NULL;
    size_t n = 0;
    const char *const *mutators = NULL;
    switch (obj.type) {
    case JT_STR: return jinja_str_method(r, obj, name);
    case JT_DICT:
        table = DICT_METHODS;
        n = sizeof DICT_METHODS / sizeof *DICT_METHODS;
        mutators = DICT_MUTATORS;
        break;
    case JT_LIST:
        table = LIST_METHODS;
        n = sizeof LIST_METHODS / sizeof *LIST_METHODS;
        mutators = LIST_MUTATORS;
        break;
    case JT_TUPLE:
        table = LIST_METHODS;
        n = 2; /* index, count */
        break;
    default: return jv_undefined(r, name, jv_owner_name(obj));
    }
    for (size_t i = 0; i < n; i++)
        if (!strcmp(table[i].name, name)) return jv_func(r, table[i].name, table[i].fn, obj);
    for (size_t i = 0; mutators && mutators[i]; i++)
        if (!strcmp(mutators[i], name)) return unsafe(r, name, obj);
    return jv_undefined(r, name, jv_owner_name(obj));
}

/* ---- globals ----------------------------------------------------------------------------------------------- */

static JValue g_range(JRender *r, JValue self, JArgs *a) {
    (void)self;
    if (a->nkw) jinja_fail(r, "range() takes no keyword arguments");
    if (a->npos < 1 || a->npos > 3) jinja_fail(r, "range expected 1 to 3 arguments, got %zu", a->npos);
    int64_t start = 0, stop, step = 1;
    if (a->npos == 1) {
        stop = jv_as_int(r, a->pos[0], "range()'s argument");
    } else {
        start = jv_as_int(r, a->pos[0], "range()'s argument");
        stop = jv_as_int(r, a->pos[1], "range()'s argument");
        if (a->npos == 3) step = jv_as_int(r, a->pos[2], "range()'s argument");
    }
    if (step == 0) jinja_fail(r, "range() arg 3 must not be zero");
    int64_t count = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                             : (start > stop ? (start - stop - step - 1) / -step : 0);
    /* Jinja2's sandbox (and so transformers) refuses the same ranges. */
    if (count > 100000) jinja_fail(r, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    JValue out = jv_list(r, (size_t)count);
    for (int64_t i = 0; i < count; i++) jv_list_push(r, out.l, jv_int(start + i * step));
    return out;
}

/* dict(mapping or pairs, **kw) and namespace(...) */
static JValue make_mapping(JRender *r, JArgs *a, JType type) {
    JValue out = jv_dict(r, a->nkw);
    if (a->npos > 1) jinja_fail(r, "%s expected at most 1 argument, got %zu", a->callee, a->npos);
    if (a->npos) {
        JValue src = a->pos[0];
        if (src.type == JT_DICT || src.type == JT_NAMESPACE) {
            for (size_t i = 0; i < src.d->n; i++) jv_dict_set(r, out.d, src.d->keys[i], src.d->vals[i]);
        } else {
            JList *pairs = jv_iterate(r, src);
            for (size_t i = 0; i < pairs->n; i++) {
                JList *kv = jv_iterate(r, pairs->items[i]);
                if (kv->n != 2) jinja_fail(r, "dictionary update sequence element #%zu has length %zu; 2 is required", i, kv->n);
                jv_dict_set(r, out.d, kv->items[0], kv->items[1]);
            }
        }
    }
    for (size_t k = 0; k < a->nkw; k++) jv_dict_set(r, out.d, jv_cstr(r, a->kw_names[k]), a->kw[k]);
    out.type = (uint8_t)type;
    return out;
}

static JValue g_dict(JRender *r, JValue self, JArgs *a) { (void)self; return make_mapping(r, a, JT_DICT); }
static JValue g_namespace(JRender *r, JValue self, JArgs *a) { (void)self; return make_mapping(r, a, JT_NAMESPACE); }

static JValue g_raise_exception(JRender *r, JValue self, JArgs *a) {
    (void)self;
    JValue msg = jv_to_str(r, jarg(a, 0, "message", jv_cstr(r, "the chat template raised an error")));
    r->err->raised = 1;
    snprintf(r->err->msg, sizeof r->err->msg, "%s", msg.s->s);
    r->err->line = r->line;
    longjmp(r->fail_jump, 1);
}

static JValue g_strftime_now(JRender *r, JValue self, JArgs *a) {
    (void)self;
    JValue fmt = jarg(a, 0, "format", jv_none());
    if (fmt.type != JT_STR) jinja_fail(r, "strftime_now() needs a format string");
    time_t t = (time_t)r->now;
    struct tm tm;
    if (!localtime_r(&t, &tm)) jinja_fail(r, "strftime_now(): the time cannot be represented");
    char out[512];
    size_t n = fmt.s->len ? strftime(out, sizeof out, fmt.s->s, &tm) : 0;
    if (fmt.s->len && n == 0) jinja_fail(r, "strftime_now(): the formatted time is empty or too long");
    return jv_str(r, out, n);
}

void jinja_add_globals(JRender *r, Scope *s) {
    static const Method globals[] = {{"range", g_range},
                                     {"dict", g_dict},
                                     {"namespace", g_namespace},
                                     {"raise_exception", g_raise_exception},
                                     {"strftime_now", g_strftime_now}};
    for (size_t i = 0; i < sizeof globals / sizeof *globals; i++)
        scope_set(r, s, globals[i].name, jv_func(r, globals[i].name, globals[i].fn, jv_none()));
}
