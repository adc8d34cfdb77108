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
#include "parse_cursor.h"
#include "text/tokenizer/utf8.h"

#include <stdlib.h>
#include <string.h>

#define GBNF_MAX_REPEAT 10000 /* the largest count of {m,n} */
#define NAME_IN_MESSAGE 64    /* how much of a rule name an error quotes */

/* A use of a rule by name, checked once every rule is known. */
typedef struct RuleUse {
    int rule;
    size_t offset, name_len;
} RuleUse;

typedef struct GbnfParser {
    ParseCursor cur;
    RuleUse *uses;
    size_t num_uses, cap_uses;
    bool root_defined;
} GbnfParser;

static bool is_name_char(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Spaces, newlines and # comments. */
static void skip_space(ParseCursor *c) {
    while (c->pos < c->len) {
        unsigned char ch = c->src[c->pos];
        if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n') {
            c->pos++;
        } else if (ch == '#') {
            while (c->pos < c->len && c->src[c->pos] != '\n') c->pos++;
        } else {
            break;
        }
    }
}

static size_t name_end(const ParseCursor *c, size_t from) {
    while (from < c->len && is_name_char(c->src[from])) from++;
    return from;
}

static bool at_defines(const ParseCursor *c) {
    return c->len - c->pos >= 3 && memcmp(c->src + c->pos, "::=", 3) == 0;
}

/* Whether a rule definition (name ::=) starts at c->pos. */
static bool at_rule_start(ParseCursor *c) {
    size_t saved = c->pos;
    c->pos = name_end(c, c->pos);
    bool named = c->pos > saved;
    skip_space(c);
    bool defines = named && at_defines(c);
    c->pos = saved;
    return defines;
}

/* The rule called src[from, from + n), created on first use. */
static int rule_named(ParseCursor *c, size_t from, size_t n) {
    char *name = malloc(n + 1);
    if (!name) return cursor_out_of_memory(c);
    memcpy(name, c->src + from, n);
    name[n] = '\0';
    int rule = grammar_rule(c->g, name);
    free(name);
    if (rule < 0 && !grammar_error(c->g)) return cursor_out_of_memory(c);
    return rule < 0 ? -1 : rule;
}

/* The character at c->pos of a literal or class: an escape or UTF-8. */
static int parse_char(ParseCursor *c, uint32_t *cp) {
    size_t start = c->pos;
    if (!cursor_at(c, '\\')) return cursor_read_utf8(c, cp);
    c->pos++;
    if (c->pos >= c->len) return cursor_fail_at(c, start, "unterminated escape");
    unsigned char ch = c->src[c->pos++];
    int digits = 0;
    switch (ch) {
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case '\\': case '"': case '[': case ']': case '-': *cp = ch; return 0;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default:
        if (ch >= 0x20 && ch < 0x7F) return cursor_fail_at(c, start, "unknown escape '\\%c'", ch);
        return cursor_fail_at(c, start, "unknown escape");
    }
    uint32_t v;
    if (!cursor_read_hex(c, digits, &v))
        return cursor_fail_at(c, start, "escape '\\%c' needs %d hex digits", ch, digits);
    if (v > PARSE_MAX_CODEPOINT || is_surrogate(v))
        return cursor_fail_at(c, start, "escape U+%X is not a character", (unsigned)v);
    *cp = v;
    return 0;
}

static GExpr parse_literal(ParseCursor *c) {
    size_t start = c->pos++;
    unsigned char *bytes = NULL;
    size_t n = 0, cap = 0;
    GExpr result = G_ERROR;
    int more;
    while ((more = cursor_before_close(c, '"', start, "unterminated string literal")) > 0) {
        uint32_t cp;
        if (parse_char(c, &cp) < 0) goto done;
        if (cap - n < 4) {
            cap = cap ? cap * 2 : 32;
            unsigned char *grown = realloc(bytes, cap);
            if (!grown) {
                cursor_out_of_memory(c);
                goto done;
            }
            bytes = grown;
        }
        n += (size_t)utf8_encode(cp, (char *)bytes + n);
    }
    if (more < 0) goto done;
    result = n ? g_bytes(c->g, bytes, n) : g_empty(c->g);
done:
    free(bytes);
    return result;
}

/* A class member is one character: GBNF has no predefined classes. */
static int read_class_char(ParseCursor *c, CharItem *out) {
    *out = (CharItem){0};
    return parse_char(c, &out->cp);
}

/* {m} {m,} {m,n} at c->pos, spaces allowed inside as llama.cpp allows them. */
static int parse_braces(ParseCursor *c, int *min, int *max) {
    size_t start = c->pos++;
    skip_space(c);
    if (!cursor_digit_at(c, c->pos)) return cursor_fail_at(c, start, "expected a number after '{'");
    long lo = cursor_read_count(c, GBNF_MAX_REPEAT), hi = lo;
    skip_space(c);
    if (cursor_at(c, ',')) {
        c->pos++;
        skip_space(c);
        hi = -1;
        if (cursor_digit_at(c, c->pos)) hi = cursor_read_count(c, GBNF_MAX_REPEAT);
        skip_space(c);
    }
    if (cursor_expect(c, '}', start, "expected '}' to close the repetition") < 0) return -1;
    if (lo > GBNF_MAX_REPEAT || hi > GBNF_MAX_REPEAT)
        return cursor_fail_at(c, start, "repetition count above %d", GBNF_MAX_REPEAT);
    if (hi >= 0 && lo > hi) return cursor_fail_at(c, start, "repetition {%ld,%ld} has min > max", lo, hi);
    *min = (int)lo;
    *max = hi < 0 ? G_UNBOUNDED : (int)hi;
    return 0;
}

static GExpr parse_reference(GbnfParser *p) {
    ParseCursor *c = &p->cur;
    size_t start = c->pos;
    c->pos = name_end(c, start);
    int rule = rule_named(c, start, c->pos - start);
    if (rule < 0) return G_ERROR;
    if (p->num_uses == p->cap_uses) {
        size_t cap = p->cap_uses ? p->cap_uses * 2 : 16;
        RuleUse *grown = realloc(p->uses, cap * sizeof *grown);
        if (!grown) return cursor_out_of_memory(c);
        p->uses = grown, p->cap_uses = cap;
    }
    p->uses[p->num_uses++] = (RuleUse){.rule = rule, .offset = start, .name_len = c->pos - start};
    return g_ref(c->g, rule);
}

static GExpr parse_alternates(void *parser);

/* Items up to '|', ')', the next rule or anything that cannot start one
 * (the callers say what was expected there). */
static GExpr parse_sequence(void *parser) {
    GbnfParser *p = parser;
    ParseCursor *c = &p->cur;
    ExprList seq = {0};
    GExpr result = G_ERROR;
    for (;;) {
        skip_space(c);
        if (c->pos >= c->len) break;
        unsigned char ch = c->src[c->pos];
        GExpr item;
        if (ch == '"') {
            item = parse_literal(c);
        } else if (ch == '[') {
            item = cursor_class(c, read_class_char, G_UTF8);
        } else if (ch == '.') {
            c->pos++;
            item = any_char(c->g, G_UTF8);
        } else if (ch == '(') {
            item = cursor_group(c, parse_alternates, p, "'(' is never closed");
        } else if (is_name_char(ch)) {
            if (at_rule_start(c)) break;
            item = parse_reference(p);
        } else if (ch == '*' || ch == '+' || ch == '?' || ch == '{') {
            if (seq.n == 0) {
                cursor_fail_at(c, c->pos, "'%c' has nothing before it to repeat", ch);
                goto done;
            }
            int min = ch == '+', max = ch == '?' ? 1 : G_UNBOUNDED;
            if (ch == '{') {
                if (parse_braces(c, &min, &max) < 0) goto done;
            } else {
                c->pos++;
            }
            /* Repeats the item just before, itself perhaps repeated: "a"*? */
            seq.items[seq.n - 1] = g_repeat(c->g, seq.items[seq.n - 1], min, max);
            if (seq.items[seq.n - 1] == G_ERROR) goto done;
            continue;
        } else {
            break;
        }
        if (expr_list_push(c, &seq, item) < 0) goto done;
    }
    result = expr_list_seq(c->g, &seq);
done:
    free(seq.items);
    return result;
}

static GExpr parse_alternates(void *parser) {
    GbnfParser *p = parser;
    return cursor_alternation(&p->cur, parse_sequence, p);
}

static int parse_rule(GbnfParser *p) {
    ParseCursor *c = &p->cur;
    size_t start = c->pos;
    size_t end = name_end(c, start);
    if (end == start) {
        if (cursor_at(c, '|') || cursor_at(c, ')'))
            return cursor_fail_at(c, start, "unexpected '%c' (expected a rule name)", c->src[c->pos]);
        return cursor_fail_at(c, start, "expected a rule name");
    }
    int name_len = (int)(end - start < NAME_IN_MESSAGE ? end - start : NAME_IN_MESSAGE);
    const char *name = (const char *)c->src + start;
    c->pos = end;
    skip_space(c);
    if (!at_defines(c)) return cursor_fail_at(c, c->pos, "expected '::=' after rule name '%.*s'", name_len, name);
    c->pos += 3;
    int rule = rule_named(c, start, end - start);
    if (rule < 0) return -1;
    if (grammar_rule_defined(c->g, rule))
        return cursor_fail_at(c, start, "rule '%.*s' is defined twice", name_len, name);
    GExpr body = parse_alternates(p);
    if (body == G_ERROR) return -1;
    skip_space(c);
    if (c->pos < c->len && !at_rule_start(c)) {
        if (c->src[c->pos] >= 0x20 && c->src[c->pos] < 0x7F)
            return cursor_fail_at(c, c->pos, "unexpected '%c'", c->src[c->pos]);
        return cursor_fail_at(c, c->pos, "unexpected character");
    }
    if (grammar_define(c->g, rule, body) < 0) return -1;
    if (end - start == 4 && memcmp(name, "root", 4) == 0) p->root_defined = true;
    return 0;
}

/* Only now is every rule known: a rule may be used before its definition. */
static int check_and_finish(GbnfParser *p) {
    ParseCursor *c = &p->cur;
    if (!p->root_defined) {
        grammar_fail(c->g, ERROR_INVALID, "grammar: no rule named 'root' (the start rule)");
        return -1;
    }
    for (size_t i = 0; i < p->num_uses; i++) {
        const RuleUse *use = &p->uses[i];
        if (!grammar_rule_defined(c->g, use->rule)) {
            int shown = (int)(use->name_len < NAME_IN_MESSAGE ? use->name_len : NAME_IN_MESSAGE);
            const char *name = (const char *)c->src + use->offset;
            return cursor_fail_at(c, use->offset, "undefined rule '%.*s'", shown, name);
        }
    }
    int root = grammar_rule(c->g, "root");
    if (root < 0) return -1;
    grammar_set_root(c->g, root);
    return grammar_error(c->g) ? -1 : 0;
}

int gbnf_to_grammar(Grammar *g, const char *text, size_t len) {
    if (!g) return -1;
    if (!text && len) {
        grammar_fail(g, ERROR_INVALID, "grammar: no text");
        return -1;
    }
    GbnfParser p = {.cur = {.g = g,
                            .src = (const unsigned char *)text,
                            .len = len,
                            .dialect = "grammar",
                            .place = PLACE_BY_LINE}};
    int rc = 0;
    skip_space(&p.cur);
    while (rc == 0 && p.cur.pos < p.cur.len) {
        rc = parse_rule(&p);
        skip_space(&p.cur);
    }
    if (rc == 0) rc = check_and_finish(&p);
    free(p.uses);
    return rc;
}
