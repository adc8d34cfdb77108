/*
 * jinja_value.c - the arena and the values: Python's types with the
 * semantics Jinja2 templates see (truthiness, ==, ordering, len, iteration,
 * str() and repr()).
 *
 * Hand-written (see jinja.h). Python details that change output: True == 1
 * and 1 == 1.0; a dict compares by content, not order; strings order by code
 * point (UTF-8 byte order is the same); repr() quotes with ' unless the text
 * has ' and no "; str(1e16) is '1e+16'; Undefined prints nothing, iterates
 * empty, equals only another Undefined, and raises for anything else.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "jinja_internal.h"

/* ---- arena ------------------------------------------------------------------------------------ */

struct JChunk {
    JChunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

#define CHUNK_BYTES (64 * 1024)

void *arena_alloc(JArena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!n) n = 16;
    JChunk *c = a->chunks;
    if (!c || c->size - c->used < n) {
        if (a->limit && (n > a->limit || a->used > a->limit - n)) {
            if (a->owner) jinja_fail(a->owner, "the template used more than %zu MiB of memory", a->limit >> 20);
            return NULL;
        }
        size_t size = n > CHUNK_BYTES / 4 ? n : CHUNK_BYTES;
        c = malloc(sizeof *c + size);
        if (!c) {
            if (a->owner) jinja_fail(a->owner, "out of memory");
            return NULL;
        }
        c->size = size;
        c->used = 0;
        if (size == n && a->chunks) { /* a big block: keep filling the current chunk */
            c->next = a->chunks->next;
            a->chunks->next = c;
        } else {
            c->next = a->chunks;
            a->chunks = c;
        }
    }
    void *p = c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void arena_free(JArena *a) {
    for (JChunk *c = a->chunks, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->chunks = NULL;
    a->used = 0;
}

void *arena_grow(JArena *a, const void *old, size_t used, size_t size) {
    void *p = arena_alloc(a, size);
    if (p && used) memcpy(p, old, used);
    return p;
}

static void *ralloc(JRender *r, size_t n) { return arena_alloc(&r->arena, n); }

/* ---- construction --------------------------------------------------------------------------- */

JValue jv_none(void) { return (JValue){.type = JT_NONE}; }
JValue jv_bool(bool b) { return (JValue){.type = JT_BOOL, .b = b}; }
JValue jv_int(int64_t i) { return (JValue){.type = JT_INT, .i = i}; }
JValue jv_float(double f) { return (JValue){.type = JT_FLOAT, .f = f}; }
JValue jv_static_str(JStr *s) { return (JValue){.type = JT_STR, .s = s}; }

JValue jv_str(JRender *r, const char *s, size_t n) {
    if (n > r->limits->max_output) jinja_fail(r, "a string of %zu bytes is over the limit", n);
    JStr *js = ralloc(r, sizeof *js + n + 1);
    if (n) memcpy(js->s, s, n);
    js->len = n;
    return jv_static_str(js);
}

JValue jv_cstr(JRender *r, const char *s) { return jv_str(r, s, strlen(s)); }

JValue jv_undefined(JRender *r, const char *name, const char *owner) {
    JUndef *u = ralloc(r, sizeof *u);
    u->name = name;
    u->owner = owner;
    return (JValue){.type = JT_UNDEFINED, .u = u};
}

JValue jv_undefined_hint(JRender *r, const char *hint) {
    JUndef *u = ralloc(r, sizeof *u);
    u->hint = hint;
    return (JValue){.type = JT_UNDEFINED, .u = u};
}

JValue jv_list(JRender *r, size_t cap) {
    JList *l = ralloc(r, sizeof *l);
    if (cap) {
        if (cap > r->limits->max_memory / sizeof(JValue)) jinja_fail(r, "a list of %zu items is over the limit", cap);
        l->items = ralloc(r, cap * sizeof *l->items);
        l->cap = cap;
    }
    return (JValue){.type = JT_LIST, .l = l};
}

JValue jv_dict(JRender *r, size_t cap) {
    JDict *d = ralloc(r, sizeof *d);
    if (cap) {
        d->keys = ralloc(r, cap * sizeof *d->keys);
        d->vals = ralloc(r, cap * sizeof *d->vals);
        d->cap = cap;
    }
    return (JValue){.type = JT_DICT, .d = d};
}

JValue jv_func(JRender *r, const char *name, JBuiltin fn, JValue self) {
    JFunc *f = ralloc(r, sizeof *f);
    f->name = name;
    f->fn = fn;
    f->self = self;
    return (JValue){.type = JT_FUNC, .fn = f};
}

void jv_list_push(JRender *r, JList *l, JValue v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        l->items = arena_grow(&r->arena, l->items, l->n * sizeof *l->items, cap * sizeof *l->items);
        l->cap = cap;
    }
    l->items[l->n++] = v;
}

static bool key_equal(JValue a, JValue b) { return jv_equal(a, b); }

JValue *jv_dict_get(const JDict *d, JValue key) {
    for (size_t i = 0; i < d->n; i++)
        if (key_equal(d->keys[i], key)) return &d->vals[i];
    return NULL;
}

JValue *jv_dict_get_str(const JDict *d, const char *key) {
    size_t n = strlen(key);
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].type == JT_STR && d->keys[i].s->len == n && memcmp(d->keys[i].s->s, key, n) == 0)
            return &d->vals[i];
    return NULL;
}

void jv_dict_set(JRender *r, JDict *d, JValue key, JValue val) {
    JValue *slot = jv_dict_get(d, key);
    if (slot) {
        *slot = val;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        d->keys = arena_grow(&r->arena, d->keys, d->n * sizeof *d->keys, cap * sizeof *d->keys);
        d->vals = arena_grow(&r->arena, d->vals, d->n * sizeof *d->vals, cap * sizeof *d->vals);
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n++] = val;
}

/* ---- Python's semantics ------------------------------------------------------------------------ */

bool jv_truthy(JValue v) {
    switch (v.type) {
    case JT_UNDEFINED:
    case JT_NONE: return false;
    case JT_BOOL: return v.b;
    case JT_INT: return v.i != 0;
    case JT_FLOAT: return v.f != 0.0;
    case JT_STR: return v.s->len != 0;
    case JT_LIST:
    case JT_TUPLE: return v.l->n != 0;
    case JT_DICT: return v.d->n != 0;
    default: return true; /* namespaces, iterators, functions, macros, loops */
    }
}

static bool is_number(JValue v) { return v.type == JT_INT || v.type == JT_FLOAT || v.type == JT_BOOL; }
static double as_double(JValue v) { return v.type == JT_FLOAT ? v.f : v.type == JT_INT ? (double)v.i : (double)v.b; }

bool jv_equal(JValue a, JValue b) {
    if (is_number(a) && is_number(b)) {
        if (a.type != JT_FLOAT && b.type != JT_FLOAT)
            return (a.type == JT_INT ? a.i : a.b) == (b.type == JT_INT ? b.i : b.b);
        return as_double(a) == as_double(b);
    }
    if (a.type == JT_UNDEFINED || b.type == JT_UNDEFINED) return a.type == b.type;
    if (a.type != b.type) return false;
    switch (a.type) {
    case JT_NONE: return true;
    case JT_STR: return a.s->len == b.s->len && memcmp(a.s->s, b.s->s, a.s->len) == 0;
    case JT_LIST:
    case JT_TUPLE:
        if (a.l->n != b.l->n) return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!jv_equal(a.l->items[i], b.l->items[i])) return false;
        return true;
    case JT_DICT:
    case JT_NAMESPACE:
        if (a.d->n != b.d->n) return false;
        for (size_t i = 0; i < a.d->n; i++) {
            JValue *v = jv_dict_get(b.d, a.d->keys[i]);
            if (!v || !jv_equal(a.d->vals[i], *v)) return false;
        }
        return true;
    case JT_ITER: return a.l == b.l;
    case JT_FUNC: return a.fn == b.fn;
    case JT_MACRO: return a.m == b.m;
    case JT_LOOP: return a.loop == b.loop;
    default: return false;
    }
}

int jv_compare(JRender *r, JValue a, JValue b) {
    if (a.type == JT_UNDEFINED) jv_raise_undefined(r, a);
    if (b.type == JT_UNDEFINED) jv_raise_undefined(r, b);
    if (is_number(a) && is_number(b)) {
        if (a.type != JT_FLOAT && b.type != JT_FLOAT) {
            int64_t x = a.type == JT_INT ? a.i : a.b, y = b.type == JT_INT ? b.i : b.b;
            return x < y ? -1 : x > y;
        }
        double x = as_double(a), y = as_double(b);
        return x < y ? -1 : x > y;
    }
    if (a.type == JT_STR && b.type == JT_STR) {
        size_t n = a.s->len < b.s->len ? a.s->len : b.s->len;
        int c = memcmp(a.s->s, b.s->s, n);
        return c ? c : a.s->len < b.s->len ? -1 : a.s->len > b.s->len;
    }
    if ((a.type == JT_LIST && b.type == JT_LIST) || (a.type == JT_TUPLE && b.type == JT_TUPLE)) {
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++)
            if (!jv_equal(a.l->items[i], b.l->items[i])) return jv_compare(r, a.l->items[i], b.l->items[i]);
        return a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
    }
    jinja_fail(r, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a), jv_type_name(b));
}

const char *jv_type_name(JValue v) {
    static const char *const names[] = {"Undefined", "NoneType", "bool", "int", "float", "str", "list", "tuple",
                                        "dict", "Namespace", "generator", "builtin_function_or_method", "Macro", "LoopContext"};
    return names[v.type];
}

const char *jv_owner_name(JValue v) {
    static const char *const names[] = {"jinja2.runtime.Undefined object", "None", "bool object", "int object",
                                        "float object", "str object", "list object", "tuple object", "dict object",
                                        "jinja2.utils.Namespace object", "generator object",
                                        "builtin_function_or_method object", "jinja2.runtime.Macro object",
                                        "jinja2.runtime.LoopContext object"};
    return names[v.type];
}

_Noreturn void jv_raise_undefined(JRender *r, JValue u) {
    const JUndef *d = u.u;
    if (d && d->hint) jinja_fail(r, "%s", d->hint);
    if (d && d->owner) jinja_fail(r, "'%s' has no attribute '%s'", d->owner, d->name);
    jinja_fail(r, "'%s' is undefined", d && d->name ? d->name : "value");
}

/* ---- UTF-8 ---------------------------------------------------------------------------------------- */

uint32_t jinja_utf8_next(const char *s, size_t n, size_t *i) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + *i, (utf8proc_ssize_t)(n - *i), &cp);
    if (k <= 0) { /* not UTF-8 (cannot come from JSON input): one byte, one character */
        cp = (unsigned char)s[*i];
        k = 1;
    }
    *i += (size_t)k;
    return (uint32_t)cp;
}

size_t jinja_utf8_count(const char *s, size_t n) {
    size_t count = 0;
    for (size_t i = 0; i < n; i++) count += ((unsigned char)s[i] & 0xC0) != 0x80;
    return count;
}

size_t jinja_utf8_offset(const char *s, size_t n, int64_t index) {
    size_t i = 0;
    for (int64_t k = 0; k < index && i < n; k++) jinja_utf8_next(s, n, &i);
    return i;
}

/* ---- str() and repr() ----------------------------------------------------------------------------- */

void jbuf_put(JRender *r, JBuf *b, const char *s, size_t n) {
    if (n > r->limits->max_output - b->len) jinja_fail(r, "the output is over %zu bytes", r->limits->max_output);
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n + 1) cap *= 2;
        b->data = arena_grow(&r->arena, b->data, b->len, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void jbuf_puts(JRender *r, JBuf *b, const char *s) { jbuf_put(r, b, s, strlen(s)); }

JValue jbuf_value(JRender *r, const JBuf *b) { return jv_str(r, b->data ? b->data : "", b->len); }

static bool printable(uint32_t cp) {
    if (cp == ' ') return true;
    if (cp < 0x20 || cp == 0x7F) return false;
    if (cp < 0x7F) return true;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return !(c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CS ||
             c == UTF8PROC_CATEGORY_CO || c == UTF8PROC_CATEGORY_CN || c == UTF8PROC_CATEGORY_ZL ||
             c == UTF8PROC_CATEGORY_ZP || c == UTF8PROC_CATEGORY_ZS);
}

static void write_str_repr(JRender *r, JBuf *b, const JStr *s) {
    bool has_single = memchr(s->s, '\'', s->len) != NULL, has_double = memchr(s->s, '"', s->len) != NULL;
    char quote = has_single && !has_double ? '"' : '\'';
    jbuf_put(r, b, &quote, 1);
    size_t i = 0, run = 0;
    while (i < s->len) {
        size_t at = i;
        uint32_t cp = jinja_utf8_next(s->s, s->len, &i);
        char esc[16];
        esc[0] = '\0';
        if (cp == '\\' || cp == (uint32_t)quote) snprintf(esc, sizeof esc, "\\%c", (char)cp);
        else if (cp == '\n') strcpy(esc, "\\n");
        else if (cp == '\r') strcpy(esc, "\\r");
        else if (cp == '\t') strcpy(esc, "\\t");
        else if (!printable(cp)) snprintf(esc, sizeof esc, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
        if (!esc[0]) continue;
        jbuf_put(r, b, s->s + run, at - run);
        jbuf_puts(r, b, esc);
        run = i;
    }
    jbuf_put(r, b, s->s + run, s->len - run);
    jbuf_put(r, b, &quote, 1);
}

static void write_value(JRender *r, JBuf *b, JValue v, bool repr);

static void write_items(JRender *r, JBuf *b, const JList *l, const char *open, const char *close, bool tuple) {
    jbuf_puts(r, b, open);
    for (size_t i = 0; i < l->n; i++) {
        if (i) jbuf_put(r, b, ", ", 2);
        write_value(r, b, l->items[i], true);
    }
    if (tuple && l->n == 1) jbuf_put(r, b, ",", 1);
    jbuf_puts(r, b, close);
}

static void write_dict(JRender *r, JBuf *b, const JDict *d) {
    jbuf_put(r, b, "{", 1);
    for (size_t i = 0; i < d->n; i++) {
        if (i) jbuf_put(r, b, ", ", 2);
        write_value(r, b, d->keys[i], true);
        jbuf_put(r, b, ": ", 2);
        write_value(r, b, d->vals[i], true);
    }
    jbuf_put(r, b, "}", 1);
}

static void write_value(JRender *r, JBuf *b, JValue v, bool repr) {
    char num[32];
    if (++r->depth > r->limits->max_depth) jinja_fail(r, "a value nests deeper than %d levels", r->limits->max_depth);
    switch (v.type) {
    case JT_UNDEFINED: break;
    case JT_NONE: jbuf_put(r, b, "None", 4); break;
    case JT_BOOL: jbuf_puts(r, b, v.b ? "True" : "False"); break;
    case JT_INT:
        snprintf(num, sizeof num, "%lld", (long long)v.i);
        jbuf_puts(r, b, num);
        break;
    case JT_FLOAT: jinja_write_float(b, r, v.f, false); break;
    case JT_STR:
        if (repr) write_str_repr(r, b, v.s);
        else jbuf_put(r, b, v.s->s, v.s->len);
        break;
    case JT_LIST: write_items(r, b, v.l, "[", "]", false); break;
    case JT_TUPLE: write_items(r, b, v.l, "(", ")", true); break;
    case JT_DICT: write_dict(r, b, v.d); break;
    case JT_NAMESPACE:
        jbuf_puts(r, b, "<Namespace ");
        write_dict(r, b, v.d);
        jbuf_puts(r, b, ">");
        break;
    case JT_ITER: jbuf_puts(r, b, "<generator object>"); break;
    case JT_FUNC:
        jbuf_puts(r, b, "<built-in method ");
        jbuf_puts(r, b, v.fn->name);
        jbuf_puts(r, b, ">");
        break;
    case JT_MACRO: jbuf_puts(r, b, "<Macro>"); break;
    case JT_LOOP: jbuf_puts(r, b, "<LoopContext>"); break;
    }
    r->depth--;
}

void jv_write_str(JRender *r, JBuf *b, JValue v) { write_value(r, b, v, false); }
void jv_write_repr(JRender *r, JBuf *b, JValue v) { write_value(r, b, v, true); }

JValue jv_to_str(JRender *r, JValue v) {
    if (v.type == JT_STR) return v;
    JBuf b = {0};
    jv_write_str(r, &b, v);
    return jbuf_value(r, &b);
}

/* ---- iteration and length ------------------------------------------------------------------------- */

JList *jv_iterate(JRender *r, JValue v) {
    JValue out;
    switch (v.type) {
    case JT_UNDEFINED: return jv_list(r, 0).l;
    case JT_LIST:
    case JT_TUPLE: return v.l;
    case JT_ITER:
        if (v.l->consumed) return jv_list(r, 0).l;
        v.l->consumed = true;
        return v.l;
    case JT_DICT:
        out = jv_list(r, v.d->n);
        for (size_t i = 0; i < v.d->n; i++) jv_list_push(r, out.l, v.d->keys[i]);
        return out.l;
    case JT_STR:
        out = jv_list(r, v.s->len);
        for (size_t i = 0; i < v.s->len;) {
            size_t at = i;
            jinja_utf8_next(v.s->s, v.s->len, &i);
            jv_list_push(r, out.l, jv_str(r, v.s->s + at, i - at));
        }
        return out.l;
    default: jinja_fail(r, "'%s' object is not iterable", jv_type_name(v));
    }
}

int64_t jv_length(JRender *r, JValue v) {
    switch (v.type) {
    case JT_UNDEFINED: return 0;
    case JT_STR: return (int64_t)jinja_utf8_count(v.s->s, v.s->len);
    case JT_LIST:
    case JT_TUPLE: return (int64_t)v.l->n;
    case JT_DICT: return (int64_t)v.d->n;
    case JT_LOOP: return (int64_t)v.loop->items->n;
    default: jinja_fail(r, "object of type '%s' has no len()", jv_type_name(v));
    }
}

int64_t jv_as_int(JRender *r, JValue v, const char *what) {
    if (v.type == JT_INT) return v.i;
    if (v.type == JT_BOOL) return v.b;
    if (v.type == JT_UNDEFINED) jv_raise_undefined(r, v);
    jinja_fail(r, "%s must be an integer, not '%s'", what, jv_type_name(v));
}
