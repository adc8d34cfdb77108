/*
 * grammar.c - the grammar builder: expressions in flat arrays, rules by
 * name, and Unicode code point sets lowered to UTF-8 (or JSON-escaped)
 * byte sequences, so everything after this file works on bytes.
 */
#include "grammar_internal.h"

#include "text/tokenizer/utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bounds on what a (possibly hostile) request may make us build. */
#define MAX_EXPRS (1 << 21)
#define MAX_BYTES (1 << 24)
#define MAX_RULES (1 << 16)

Grammar *grammar_new(void) {
    Grammar *g = calloc(1, sizeof *g);
    if (g) g->root = -1;
    return g;
}

void grammar_free(Grammar *g) {
    if (!g) return;
    for (int i = 0; i < g->num_rules; i++) free(g->rules[i].name);
    free(g->rules);
    free(g->rule_index);
    free(g->exprs);
    free(g->bytes);
    free(g->children);
    free(g);
}

const char *grammar_error(const Grammar *g) { return g->failed ? g->error.msg : NULL; }

void grammar_error_prefix(Grammar *g, const char *fmt, ...) {
    if (!g->failed) return;
    char prefix[512], msg[sizeof g->error.msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t n = strlen(prefix) < sizeof msg - 3 ? strlen(prefix) : sizeof msg - 3;
    memcpy(msg, prefix, n);
    memcpy(msg + n, ": ", 2);
    size_t rest = strnlen(g->error.msg, sizeof msg - n - 3);
    memcpy(msg + n + 2, g->error.msg, rest);
    msg[n + 2 + rest] = '\0';
    memcpy(g->error.msg, msg, sizeof msg);
}

GExpr grammar_fail(Grammar *g, ErrorKind kind, const char *fmt, ...) {
    if (g->failed) return G_ERROR;
    g->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->error.msg, sizeof g->error.msg, fmt, ap);
    va_end(ap);
    g->error.kind = kind;
    return G_ERROR;
}

static int grow(Grammar *g, void **array, int32_t *cap, int32_t need, size_t elem, int32_t limit) {
    if (need <= *cap) return 0;
    if (need > limit) return grammar_fail(g, ERROR_INVALID, "the grammar is too large (over %d elements)", limit);
    int32_t c = *cap ? *cap : 64;
    while (c < need) c = c > limit / 2 ? limit : c * 2;
    void *p = realloc(*array, (size_t)c * elem);
    if (!p) return grammar_fail(g, ERROR_INTERNAL, "out of memory building a grammar");
    *array = p;
    *cap = c;
    return 0;
}

static GExpr new_expr(Grammar *g, Expr e) {
    if (g->failed) return G_ERROR;
    if (grow(g, (void **)&g->exprs, &g->cap_exprs, g->num_exprs + 1, sizeof(Expr), MAX_EXPRS) < 0) return G_ERROR;
    g->exprs[g->num_exprs] = e;
    return g->num_exprs++;
}

static bool valid(const Grammar *g, GExpr e) { return !g->failed && e >= 0 && e < g->num_exprs; }

/* ---- rules ---------------------------------------------------------------- */

static uint32_t name_hash(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static int index_rule(Grammar *g, int rule) {
    if (g->num_rules * 2 >= g->rule_index_cap) {
        int32_t cap = g->rule_index_cap ? g->rule_index_cap * 2 : 64;
        int32_t *index = calloc((size_t)cap, sizeof *index);
        if (!index) return grammar_fail(g, ERROR_INTERNAL, "out of memory building a grammar");
        free(g->rule_index);
        g->rule_index = index;
        g->rule_index_cap = cap;
        for (int r = 0; r < g->num_rules; r++) {
            if (r == rule) continue;
            uint32_t i = name_hash(g->rules[r].name) & (uint32_t)(cap - 1);
            while (index[i]) i = (i + 1) & (uint32_t)(cap - 1);
            index[i] = r + 1;
        }
    }
    uint32_t i = name_hash(g->rules[rule].name) & (uint32_t)(g->rule_index_cap - 1);
    while (g->rule_index[i]) i = (i + 1) & (uint32_t)(g->rule_index_cap - 1);
    g->rule_index[i] = rule + 1;
    return 0;
}

static int find_rule(const Grammar *g, const char *name) {
    if (!g->rule_index_cap) return -1;
    uint32_t i = name_hash(name) & (uint32_t)(g->rule_index_cap - 1);
    for (; g->rule_index[i]; i = (i + 1) & (uint32_t)(g->rule_index_cap - 1))
        if (strcmp(g->rules[g->rule_index[i] - 1].name, name) == 0) return g->rule_index[i] - 1;
    return -1;
}

int grammar_rule(Grammar *g, const char *name) {
    if (g->failed) return G_ERROR;
    int found = find_rule(g, name);
    if (found >= 0) return found;
    if (grow(g, (void **)&g->rules, &g->cap_rules, g->num_rules + 1, sizeof(GRule), MAX_RULES) < 0) return G_ERROR;
    char *copy = strdup(name);
    if (!copy) return grammar_fail(g, ERROR_INTERNAL, "out of memory building a grammar");
    g->rules[g->num_rules] = (GRule){copy, G_ERROR};
    int rule = g->num_rules++;
    if (index_rule(g, rule) < 0) return G_ERROR;
    if (g->root < 0) g->root = rule;
    return rule;
}

int grammar_fresh_rule(Grammar *g, const char *prefix) {
    char name[256];
    do snprintf(name, sizeof name, "%.200s-%d", prefix, g->fresh_counter++);
    while (find_rule(g, name) >= 0);
    return grammar_rule(g, name);
}

bool grammar_rule_defined(const Grammar *g, int rule) {
    return rule >= 0 && rule < g->num_rules && g->rules[rule].body >= 0;
}

int grammar_define(Grammar *g, int rule, GExpr body) {
    if (g->failed) return -1;
    if (rule < 0 || rule >= g->num_rules) return grammar_fail(g, ERROR_INTERNAL, "grammar: no rule %d", rule);
    if (!valid(g, body)) return grammar_fail(g, ERROR_INTERNAL, "grammar: bad expression for rule '%s'", g->rules[rule].name);
    if (g->rules[rule].body >= 0) return grammar_fail(g, ERROR_INVALID, "grammar: rule '%s' is defined twice", g->rules[rule].name);
    g->rules[rule].body = body;
    return 0;
}

void grammar_set_root(Grammar *g, int rule) {
    if (rule >= 0 && rule < g->num_rules) g->root = rule;
}

int grammar_root(const Grammar *g) { return g->root; }

/* ---- expressions ---------------------------------------------------------- */

GExpr g_empty(Grammar *g) { return new_expr(g, (Expr){.kind = E_EMPTY}); }

static GExpr g_nothing(Grammar *g) { return new_expr(g, (Expr){.kind = E_NOTHING}); }

GExpr g_bytes(Grammar *g, const void *bytes, size_t len) {
    if (g->failed) return G_ERROR;
    if (len == 0) return g_empty(g);
    if (len > MAX_BYTES || grow(g, (void **)&g->bytes, &g->cap_bytes, g->num_bytes + (int32_t)len, 1, MAX_BYTES) < 0)
        return grammar_fail(g, ERROR_INVALID, "the grammar is too large (over %d bytes of literals)", MAX_BYTES);
    memcpy(g->bytes + g->num_bytes, bytes, len);
    GExpr e = new_expr(g, (Expr){.kind = E_BYTES, .a = g->num_bytes, .n = (int32_t)len});
    if (e >= 0) g->num_bytes += (int32_t)len;
    return e;
}

GExpr g_str(Grammar *g, const char *s) { return g_bytes(g, s, strlen(s)); }

GExpr g_byte_range(Grammar *g, uint8_t lo, uint8_t hi) {
    if (lo > hi) return g_nothing(g);
    return new_expr(g, (Expr){.kind = E_RANGE, .lo = lo, .hi = hi});
}

static GExpr list_expr(Grammar *g, ExprKind kind, const GExpr *items, int n) {
    if (g->failed) return G_ERROR;
    if (n < 0) return grammar_fail(g, ERROR_INTERNAL, "grammar: negative list");
    for (int i = 0; i < n; i++)
        if (!valid(g, items[i])) return grammar_fail(g, ERROR_INTERNAL, "grammar: bad expression in a list");
    if (n == 0) return kind == E_SEQ ? g_empty(g) : g_nothing(g);
    if (n == 1) return items[0];
    if (grow(g, (void **)&g->children, &g->cap_children, g->num_children + n, sizeof(int32_t), MAX_EXPRS) < 0)
        return G_ERROR;
    memcpy(g->children + g->num_children, items, (size_t)n * sizeof *items);
    GExpr e = new_expr(g, (Expr){.kind = (uint8_t)kind, .a = g->num_children, .n = n});
    if (e >= 0) g->num_children += n;
    return e;
}

GExpr g_seq(Grammar *g, const GExpr *items, int n) { return list_expr(g, E_SEQ, items, n); }
GExpr g_alt(Grammar *g, const GExpr *items, int n) { return list_expr(g, E_ALT, items, n); }
GExpr g_seq2(Grammar *g, GExpr a, GExpr b) { return g_seq(g, (GExpr[]){a, b}, 2); }
GExpr g_alt2(Grammar *g, GExpr a, GExpr b) { return g_alt(g, (GExpr[]){a, b}, 2); }

GExpr g_repeat(Grammar *g, GExpr e, int min, int max) {
    if (!valid(g, e)) return grammar_fail(g, ERROR_INTERNAL, "grammar: bad expression to repeat");
    if (min < 0 || (max != G_UNBOUNDED && max < min))
        return grammar_fail(g, ERROR_INVALID, "grammar: bad repetition {%d,%d}", min, max);
    if (min == 1 && max == 1) return e;
    return new_expr(g, (Expr){.kind = E_REPEAT, .a = e, .min = min, .max = max});
}

GExpr g_optional(Grammar *g, GExpr e) { return g_repeat(g, e, 0, 1); }

GExpr g_ref(Grammar *g, int rule) {
    if (g->failed) return G_ERROR;
    if (rule < 0 || rule >= g->num_rules) return grammar_fail(g, ERROR_INTERNAL, "grammar: reference to no rule");
    return new_expr(g, (Expr){.kind = E_REF, .a = rule});
}

/* ---- code points ---------------------------------------------------------- */

#define MAX_CODEPOINT 0x10FFFFu

typedef struct CpRange {
    uint32_t lo, hi;
} CpRange;

static int cmp_range(const void *a, const void *b) {
    const CpRange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorted, merged, clamped to Unicode scalar values. *n in, *n out; the
 * array must have room for one more range (splitting the surrogate gap). */
static void normalize(CpRange *r, int *n) {
    int m = 0;
    for (int i = 0; i < *n; i++) {
        uint32_t lo = r[i].lo, hi = r[i].hi > MAX_CODEPOINT ? MAX_CODEPOINT : r[i].hi;
        if (lo <= hi) r[m++] = (CpRange){lo, hi};
    }
    qsort(r, (size_t)m, sizeof *r, cmp_range);
    int k = 0;
    for (int i = 0; i < m; i++) {
        if (k && r[i].lo <= r[k - 1].hi + 1) {
            if (r[i].hi > r[k - 1].hi) r[k - 1].hi = r[i].hi;
        } else {
            r[k++] = r[i];
        }
    }
    /* Drop the surrogates D800-DFFF: they are not characters. */
    int out = 0;
    CpRange tmp[2];
    for (int i = 0; i < k; i++) {
        CpRange x = r[i];
        int parts = 0;
        if (x.hi < 0xD800 || x.lo > 0xDFFF) tmp[parts++] = x;
        else {
            if (x.lo < 0xD800) tmp[parts++] = (CpRange){x.lo, 0xD7FF};
            if (x.hi > 0xDFFF) tmp[parts++] = (CpRange){0xE000, x.hi};
        }
        /* At most one range grows into two, and only the one spanning the gap. */
        if (parts == 2) {
            memmove(r + i + 2, r + i + 1, (size_t)(k - i - 1) * sizeof *r);
            r[out++] = tmp[0];
            r[out++] = tmp[1];
            k++;
            i++;
        } else if (parts == 1) {
            r[out++] = tmp[0];
        }
    }
    *n = out;
}

typedef struct AltList {
    GExpr *items;
    int n, cap;
} AltList;

static int alt_push(Grammar *g, AltList *l, GExpr e) {
    if (e < 0) return -1;
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        GExpr *p = realloc(l->items, (size_t)cap * sizeof *p);
        if (!p) return grammar_fail(g, ERROR_INTERNAL, "out of memory building a grammar");
        l->items = p;
        l->cap = cap;
    }
    l->items[l->n++] = e;
    return 0;
}

/* A range of code points of one encoded length, as sequences of byte
 * ranges: split until every byte position ranges independently. */
static int utf8_range(Grammar *g, AltList *out, uint32_t lo, uint32_t hi) {
    uint8_t a[4], b[4];
    int len = utf8_encode(lo, (char *)a);
    for (int i = 1; i < len; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                if (utf8_range(g, out, lo, lo | m) < 0) return -1;
                return utf8_range(g, out, (lo | m) + 1, hi);
            }
            if ((hi & m) != m) {
                if (utf8_range(g, out, lo, (hi & ~m) - 1) < 0) return -1;
                return utf8_range(g, out, hi & ~m, hi);
            }
        }
    }
    utf8_encode(hi, (char *)b);
    GExpr seq[4];
    for (int i = 0; i < len; i++) seq[i] = g_byte_range(g, a[i], b[i]);
    return alt_push(g, out, g_seq(g, seq, len));
}

static int utf8_ranges(Grammar *g, AltList *out, uint32_t lo, uint32_t hi) {
    static const uint32_t limits[] = {0x7F, 0x7FF, 0xFFFF, MAX_CODEPOINT};
    uint32_t start = lo;
    for (int i = 0; i < 4 && start <= hi; i++) {
        if (start > limits[i]) continue;
        uint32_t end = hi < limits[i] ? hi : limits[i];
        if (utf8_range(g, out, start, end) < 0) return -1;
        start = end + 1;
    }
    return 0;
}

/* The JSON escape of a character that may not appear raw in a string. */
static int json_escape(uint32_t c, char *buf) {
    switch (c) {
    case '"': return (int)strlen(strcpy(buf, "\\\""));
    case '\\': return (int)strlen(strcpy(buf, "\\\\"));
    case '\b': return (int)strlen(strcpy(buf, "\\b"));
    case '\f': return (int)strlen(strcpy(buf, "\\f"));
    case '\n': return (int)strlen(strcpy(buf, "\\n"));
    case '\r': return (int)strlen(strcpy(buf, "\\r"));
    case '\t': return (int)strlen(strcpy(buf, "\\t"));
    default: return snprintf(buf, 8, "\\u%04x", c);
    }
}

static bool needs_json_escape(uint32_t c) { return c < 0x20 || c == '"' || c == '\\'; }

static GExpr codepoint_set(Grammar *g, CpRange *r, int n, GEncoding enc) {
    AltList alts = {0};
    for (int i = 0; i < n && !g->failed; i++) {
        uint32_t lo = r[i].lo, hi = r[i].hi;
        if (enc == G_JSON_STRING) {
            /* Escaped characters are all below 0x5D: take them one by one. */
            while (lo <= hi && lo <= '\\') {
                if (needs_json_escape(lo)) {
                    char buf[8];
                    int len = json_escape(lo, buf);
                    if (alt_push(g, &alts, g_bytes(g, buf, (size_t)len)) < 0) break;
                    lo++;
                    continue;
                }
                uint32_t end = lo;
                while (end < hi && !needs_json_escape(end + 1)) end++;
                if (utf8_ranges(g, &alts, lo, end) < 0) break;
                lo = end + 1;
            }
            if (lo > hi) continue;
        }
        if (utf8_ranges(g, &alts, lo, hi) < 0) break;
    }
    GExpr e = g->failed ? G_ERROR : g_alt(g, alts.items, alts.n);
    free(alts.items);
    return e;
}

static CpRange *copy_ranges(Grammar *g, const uint32_t *ranges, int num_ranges, int extra) {
    if (num_ranges < 0 || num_ranges > (1 << 20)) {
        grammar_fail(g, ERROR_INVALID, "grammar: too many character ranges");
        return NULL;
    }
    CpRange *r = malloc(((size_t)num_ranges + (size_t)extra + 2) * sizeof *r);
    if (!r) {
        grammar_fail(g, ERROR_INTERNAL, "out of memory building a grammar");
        return NULL;
    }
    for (int i = 0; i < num_ranges; i++) {
        uint32_t a = ranges[2 * i], b = ranges[2 * i + 1];
        r[i] = a <= b ? (CpRange){a, b} : (CpRange){b, a};
    }
    return r;
}

GExpr g_codepoints(Grammar *g, const uint32_t *ranges, int num_ranges, GEncoding enc) {
    if (g->failed) return G_ERROR;
    CpRange *r = copy_ranges(g, ranges, num_ranges, 0);
    if (!r) return G_ERROR;
    int n = num_ranges;
    normalize(r, &n);
    GExpr e = codepoint_set(g, r, n, enc);
    free(r);
    return e;
}

GExpr g_codepoints_not(Grammar *g, const uint32_t *ranges, int num_ranges, GEncoding enc) {
    if (g->failed) return G_ERROR;
    CpRange *r = copy_ranges(g, ranges, num_ranges, num_ranges + 1);
    if (!r) return G_ERROR;
    int n = num_ranges;
    normalize(r, &n);
    CpRange *gaps = r + n; /* room: num_ranges + 2 after the normalized ones */
    int m = 0;
    uint32_t next = 0;
    for (int i = 0; i < n; i++) {
        if (r[i].lo > next) gaps[m++] = (CpRange){next, r[i].lo - 1};
        next = r[i].hi + 1;
    }
    if (next <= MAX_CODEPOINT) gaps[m++] = (CpRange){next, MAX_CODEPOINT};
    memmove(r, gaps, (size_t)m * sizeof *r);
    normalize(r, &m);
    GExpr e = codepoint_set(g, r, m, enc);
    free(r);
    return e;
}
