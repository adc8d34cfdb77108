/*
 * gbnf.c - GBNF text (llama.cpp's grammar dialect, gbnf.h is the spec) into
 * the rules of a Grammar, by recursive descent.
 *
 * Newlines are whitespace everywhere; a rule ends where the next one starts
 * (a name followed by ::=). Every grammar llama.cpp accepts reads the same
 * here, and a rule may also continue on a line that starts with '|'. Groups
 * become inline expressions, not generated rules, so no generated name can
 * ever collide with one written later in the text. Line numbers are counted
 * only when an error needs one.
 */
#include "gbnf.h"
#include "text/tokenizer/utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GBNF_MAX_DEPTH 200    /* nested groups: recursion depth, never the C stack's limit */
#define GBNF_MAX_REPEAT 10000 /* the largest count of {m,n} */
#define MAX_CODEPOINT 0x10FFFFu
#define NAME_IN_MESSAGE 64 /* how much of a rule name an error quotes */

/* A use of a rule by name, checked once every rule is known. */
typedef struct RuleUse {
    int rule;
    size_t offset, name_len;
} RuleUse;

typedef struct GbnfParser {
    Grammar *g;
    const unsigned char *src;
    size_t len, pos;
    int depth;
    RuleUse *uses;
    size_t num_uses, cap_uses;
    bool root_defined;
} GbnfParser;

typedef struct ExprList {
    GExpr *items;
    int n, cap;
} ExprList;

static const uint32_t NO_RANGES[1] = {0}; /* the empty set, as a valid pointer */

static int line_at(const GbnfParser *p, size_t offset) {
    int line = 1;
    for (size_t i = 0; i < offset && i < p->len; i++) line += p->src[i] == '\n';
    return line;
}

static int fail_at(GbnfParser *p, size_t offset, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail_at(GbnfParser *p, size_t offset, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    grammar_fail(p->g, ERROR_INVALID, "grammar line %d: %s", line_at(p, offset), what);
    return -1;
}

static int out_of_memory(GbnfParser *p) {
    grammar_fail(p->g, ERROR_INTERNAL, "grammar: out of memory");
    return -1;
}

static bool at(const GbnfParser *p, char c) { return p->pos < p->len && p->src[p->pos] == (unsigned char)c; }

static bool is_name_char(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static bool isxdigit_ascii(unsigned char c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Spaces, newlines and # comments. */
static void skip_space(GbnfParser *p) {
    while (p->pos < p->len) {
        unsigned char c = p->src[p->pos];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->len && p->src[p->pos] != '\n') p->pos++;
        } else {
            break;
        }
    }
}

static size_t name_end(const GbnfParser *p, size_t from) {
    while (from < p->len && is_name_char(p->src[from])) from++;
    return from;
}

/* Whether a rule definition (name ::=) starts at p->pos. */
static bool at_rule_start(GbnfParser *p) {
    size_t saved = p->pos;
    p->pos = name_end(p, p->pos);
    bool named = p->pos > saved;
    skip_space(p);
    bool defines = named && p->len - p->pos >= 3 && memcmp(p->src + p->pos, "::=", 3) == 0;
    p->pos = saved;
    return defines;
}

/* The rule called src[from, from + n), created on first use. */
static int rule_named(GbnfParser *p, size_t from, size_t n) {
    char *name = malloc(n + 1);
    if (!name) return out_of_memory(p);
    memcpy(name, p->src + from, n);
    name[n] = '\0';
    int rule = grammar_rule(p->g, name);
    free(name);
    if (rule < 0 && !grammar_error(p->g)) return out_of_memory(p);
    return rule < 0 ? -1 : rule;
}

/* The character at p->pos of a literal or class: an escape or UTF-8. */
static int parse_char(GbnfParser *p, uint32_t *cp) {
    size_t start = p->pos;
    if (!at(p, '\\')) {
        int n = p->len - p->pos > 0 ? utf8_next(p->src + p->pos, p->len - p->pos, cp) : 0;
        if (n <= 0) return fail_at(p, start, "invalid UTF-8");
        p->pos += (size_t)n;
        return 0;
    }
    p->pos++;
    if (p->pos >= p->len) return fail_at(p, start, "unterminated escape");
    unsigned char c = p->src[p->pos++];
    int digits = 0;
    switch (c) {
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case '\\': case '"': case '[': case ']': case '-': *cp = c; return 0;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default:
        if (c >= 0x20 && c < 0x7F) return fail_at(p, start, "unknown escape '\\%c'", c);
        return fail_at(p, start, "unknown escape");
    }
    uint32_t v = 0;
    for (int i = 0; i < digits; i++, p->pos++) {
        if (p->pos >= p->len || !isxdigit_ascii(p->src[p->pos]))
            return fail_at(p, start, "escape '\\%c' needs %d hex digits", c, digits);
        unsigned char h = p->src[p->pos];
        v = v * 16 + (uint32_t)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    if (v > MAX_CODEPOINT || (v >= 0xD800 && v <= 0xDFFF))
        return fail_at(p, start, "escape U+%X is not a character", (unsigned)v);
    *cp = v;
    return 0;
}

static GExpr parse_literal(GbnfParser *p) {
    size_t start = p->pos++;
    unsigned char *bytes = NULL;
    size_t n = 0, cap = 0;
    GExpr result = G_ERROR;
    for (;;) {
        if (p->pos >= p->len) {
            fail_at(p, start, "unterminated string literal");
            goto done;
        }
        if (at(p, '"')) {
            p->pos++;
            break;
        }
        uint32_t cp;
        if (parse_char(p, &cp) < 0) goto done;
        if (cap - n < 4) {
            cap = cap ? cap * 2 : 32;
            unsigned char *grown = realloc(bytes, cap);
            if (!grown) {
                out_of_memory(p);
                goto done;
            }
            bytes = grown;
        }
        n += (size_t)utf8_encode(cp, (char *)bytes + n);
    }
    result = n ? g_bytes(p->g, bytes, n) : g_empty(p->g);
done:
    free(bytes);
    return result;
}

static GExpr parse_class(GbnfParser *p) {
    size_t start = p->pos++;
    bool negated = at(p, '^');
    if (negated) p->pos++;
    uint32_t *ranges = NULL;
    int num_ranges = 0, cap_ranges = 0;
    GExpr result = G_ERROR;
    for (;;) {
        if (p->pos >= p->len) {
            fail_at(p, start, "unterminated character class");
            goto done;
        }
        if (at(p, ']')) {
            p->pos++;
            break;
        }
        uint32_t lo, hi;
        if (parse_char(p, &lo) < 0) goto done;
        hi = lo;
        /* As in llama.cpp, a '-' just before ']' is a literal dash. */
        if (at(p, '-') && p->pos + 1 < p->len && p->src[p->pos + 1] != ']') {
            size_t dash = p->pos++;
            if (parse_char(p, &hi) < 0) goto done;
            if (lo > hi) {
                fail_at(p, dash, "bad character range (U+%04X > U+%04X)", (unsigned)lo, (unsigned)hi);
                goto done;
            }
        }
        if (num_ranges == cap_ranges) {
            cap_ranges = cap_ranges ? cap_ranges * 2 : 8;
            uint32_t *grown = realloc(ranges, (size_t)cap_ranges * 2 * sizeof *grown);
            if (!grown) {
                out_of_memory(p);
                goto done;
            }
            ranges = grown;
        }
        ranges[2 * num_ranges] = lo;
        ranges[2 * num_ranges + 1] = hi;
        num_ranges++;
    }
    result = negated ? g_codepoints_not(p->g, ranges ? ranges : NO_RANGES, num_ranges, G_UTF8)
                     : g_codepoints(p->g, ranges ? ranges : NO_RANGES, num_ranges, G_UTF8);
done:
    free(ranges);
    return result;
}

/* A decimal count, clamped above the limit so that it cannot overflow. */
static long read_count(GbnfParser *p) {
    long v = 0;
    while (p->pos < p->len && is_digit(p->src[p->pos])) {
        if (v <= GBNF_MAX_REPEAT) v = v * 10 + (p->src[p->pos] - '0');
        p->pos++;
    }
    return v;
}

/* {m} {m,} {m,n} at p->pos, spaces allowed inside as llama.cpp allows them. */
static int parse_braces(GbnfParser *p, int *min, int *max) {
    size_t start = p->pos++;
    skip_space(p);
    if (p->pos >= p->len || !is_digit(p->src[p->pos])) return fail_at(p, start, "expected a number after '{'");
    long lo = read_count(p), hi = lo;
    skip_space(p);
    if (at(p, ',')) {
        p->pos++;
        skip_space(p);
        hi = -1;
        if (p->pos < p->len && is_digit(p->src[p->pos])) hi = read_count(p);
        skip_space(p);
    }
    if (!at(p, '}')) return fail_at(p, start, "expected '}' to close the repetition");
    p->pos++;
    if (lo > GBNF_MAX_REPEAT || hi > GBNF_MAX_REPEAT)
        return fail_at(p, start, "repetition count above %d", GBNF_MAX_REPEAT);
    if (hi >= 0 && lo > hi) return fail_at(p, start, "repetition {%ld,%ld} has min > max", lo, hi);
    *min = (int)lo;
    *max = hi < 0 ? G_UNBOUNDED : (int)hi;
    return 0;
}

static int list_push(GbnfParser *p, ExprList *l, GExpr e) {
    if (e == G_ERROR) return -1;
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 8;
        GExpr *grown = realloc(l->items, (size_t)cap * sizeof *grown);
        if (!grown) return out_of_memory(p);
        l->items = grown, l->cap = cap;
    }
    l->items[l->n++] = e;
    return 0;
}

static GExpr parse_alternates(GbnfParser *p);

static GExpr parse_reference(GbnfParser *p) {
    size_t start = p->pos;
    p->pos = name_end(p, start);
    int rule = rule_named(p, start, p->pos - start);
    if (rule < 0) return G_ERROR;
    if (p->num_uses == p->cap_uses) {
        size_t cap = p->cap_uses ? p->cap_uses * 2 : 16;
        RuleUse *grown = realloc(p->uses, cap * sizeof *grown);
        if (!grown) return out_of_memory(p);
        p->uses = grown, p->cap_uses = cap;
    }
    p->uses[p->num_uses++] = (RuleUse){.rule = rule, .offset = start, .name_len = p->pos - start};
    return g_ref(p->g, rule);
}

static GExpr parse_group(GbnfParser *p) {
    size_t start = p->pos++;
    if (p->depth >= GBNF_MAX_DEPTH) return fail_at(p, start, "groups nested deeper than %d", GBNF_MAX_DEPTH);
    p->depth++;
    GExpr inner = parse_alternates(p);
    p->depth--;
    if (inner == G_ERROR) return G_ERROR;
    if (!at(p, ')')) return fail_at(p, start, "'(' is never closed");
    p->pos++;
    return inner;
}

/* Items up to '|', ')', the next rule or anything that cannot start one
 * (the callers say what was expected there). */
static GExpr parse_sequence(GbnfParser *p) {
    ExprList seq = {0};
    GExpr result = G_ERROR;
    for (;;) {
        skip_space(p);
        if (p->pos >= p->len) break;
        unsigned char c = p->src[p->pos];
        GExpr item;
        if (c == '"') {
            item = parse_literal(p);
        } else if (c == '[') {
            item = parse_class(p);
        } else if (c == '.') {
            p->pos++;
            item = g_codepoints_not(p->g, NO_RANGES, 0, G_UTF8);
        } else if (c == '(') {
            item = parse_group(p);
        } else if (is_name_char(c)) {
            if (at_rule_start(p)) break;
            item = parse_reference(p);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (seq.n == 0) {
                fail_at(p, p->pos, "'%c' has nothing before it to repeat", c);
                goto done;
            }
            int min = c == '+', max = c == '?' ? 1 : G_UNBOUNDED;
            if (c == '{') {
                if (parse_braces(p, &min, &max) < 0) goto done;
            } else {
                p->pos++;
            }
            /* Repeats the item just before, itself perhaps repeated: "a"*? */
            seq.items[seq.n - 1] = g_repeat(p->g, seq.items[seq.n - 1], min, max);
            if (seq.items[seq.n - 1] == G_ERROR) goto done;
            continue;
        } else {
            break;
        }
        if (list_push(p, &seq, item) < 0) goto done;
    }
    result = seq.n == 0 ? g_empty(p->g) : seq.n == 1 ? seq.items[0] : g_seq(p->g, seq.items, seq.n);
done:
    free(seq.items);
    return result;
}

static GExpr parse_alternates(GbnfParser *p) {
    ExprList alts = {0};
    GExpr result = G_ERROR;
    for (;;) {
        if (list_push(p, &alts, parse_sequence(p)) < 0) goto done;
        if (!at(p, '|')) break;
        p->pos++;
    }
    result = alts.n == 1 ? alts.items[0] : g_alt(p->g, alts.items, alts.n);
done:
    free(alts.items);
    return result;
}

static int parse_rule(GbnfParser *p) {
    size_t start = p->pos;
    size_t end = name_end(p, start);
    if (end == start) {
        if (at(p, '|') || at(p, ')'))
            return fail_at(p, start, "unexpected '%c' (expected a rule name)", p->src[p->pos]);
        return fail_at(p, start, "expected a rule name");
    }
    int name_len = (int)(end - start < NAME_IN_MESSAGE ? end - start : NAME_IN_MESSAGE);
    const char *name = (const char *)p->src + start;
    p->pos = end;
    skip_space(p);
    if (p->len - p->pos < 3 || memcmp(p->src + p->pos, "::=", 3) != 0)
        return fail_at(p, p->pos, "expected '::=' after rule name '%.*s'", name_len, name);
    p->pos += 3;
    int rule = rule_named(p, start, end - start);
    if (rule < 0) return -1;
    if (grammar_rule_defined(p->g, rule)) return fail_at(p, start, "rule '%.*s' is defined twice", name_len, name);
    GExpr body = parse_alternates(p);
    if (body == G_ERROR) return -1;
    skip_space(p);
    if (p->pos < p->len && !at_rule_start(p)) {
        if (p->src[p->pos] >= 0x20 && p->src[p->pos] < 0x7F)
            return fail_at(p, p->pos, "unexpected '%c'", p->src[p->pos]);
        return fail_at(p, p->pos, "unexpected character");
    }
    if (grammar_define(p->g, rule, body) < 0) return -1;
    if (end - start == 4 && memcmp(name, "root", 4) == 0) p->root_defined = true;
    return 0;
}

/* Only now is every rule known: a rule may be used before its definition. */
static int check_and_finish(GbnfParser *p) {
    if (!p->root_defined) {
        grammar_fail(p->g, ERROR_INVALID, "grammar: no rule named 'root' (the start rule)");
        return -1;
    }
    for (size_t i = 0; i < p->num_uses; i++) {
        const RuleUse *use = &p->uses[i];
        if (!grammar_rule_defined(p->g, use->rule)) {
            int shown = (int)(use->name_len < NAME_IN_MESSAGE ? use->name_len : NAME_IN_MESSAGE);
            return fail_at(p, use->offset, "undefined rule '%.*s'", shown, (const char *)p->src + use->offset);
        }
    }
    int root = grammar_rule(p->g, "root");
    if (root < 0) return -1;
    grammar_set_root(p->g, root);
    return grammar_error(p->g) ? -1 : 0;
}

int gbnf_to_grammar(Grammar *g, const char *text, size_t len) {
    if (!g) return -1;
    if (!text && len) {
        grammar_fail(g, ERROR_INVALID, "grammar: no text");
        return -1;
    }
    GbnfParser p = {.g = g, .src = (const unsigned char *)text, .len = len};
    int rc = 0;
    skip_space(&p);
    while (rc == 0 && p.pos < p.len) {
        rc = parse_rule(&p);
        skip_space(&p);
    }
    if (rc == 0) rc = check_and_finish(&p);
    free(p.uses);
    return rc;
}
