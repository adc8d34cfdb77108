/*
 * parse_cursor.c - the reading position gbnf.c and regex.c share
 * (parse_cursor.h): errors at a place of the text, counts, hex digits,
 * lists, and the alternation, group and character-class shapes the two
 * dialects spell alike.
 *
 * Lines are counted only when an error needs one.
 */
#include "parse_cursor.h"
#include "text/tokenizer/utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static const uint32_t NO_RANGES[1] = {0}; /* the empty set, as a valid pointer */

/* The code points a class collects: ranges[2i] .. ranges[2i+1]. */
typedef struct CodepointSet {
    uint32_t *ranges;
    int num_ranges, cap_ranges;
} CodepointSet;

static int line_at(const ParseCursor *c, size_t offset) {
    int line = 1;
    for (size_t i = 0; i < offset && i < c->len; i++) line += c->src[i] == '\n';
    return line;
}

int cursor_fail_at(ParseCursor *c, size_t offset, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (c->place == PLACE_BY_LINE)
        return grammar_fail(c->g, ERROR_INVALID, "%s line %d: %s", c->dialect, line_at(c, offset), what);
    return grammar_fail(c->g, ERROR_INVALID, "%s: %s at offset %zu", c->dialect, what, offset);
}

int cursor_out_of_memory(ParseCursor *c) {
    return grammar_fail(c->g, ERROR_INTERNAL, "%s: out of memory", c->dialect);
}

bool cursor_at(const ParseCursor *c, char ch) { return c->pos < c->len && c->src[c->pos] == (unsigned char)ch; }

bool cursor_digit_at(const ParseCursor *c, size_t offset) {
    return offset < c->len && c->src[offset] >= '0' && c->src[offset] <= '9';
}

int cursor_expect(ParseCursor *c, char ch, size_t error_at, const char *message) {
    if (!cursor_at(c, ch)) return cursor_fail_at(c, error_at, "%s", message);
    c->pos++;
    return 0;
}

int cursor_before_close(ParseCursor *c, char close, size_t open, const char *unterminated) {
    if (c->pos >= c->len) return cursor_fail_at(c, open, "%s", unterminated);
    if (!cursor_at(c, close)) return 1;
    c->pos++;
    return 0;
}

int cursor_read_utf8(ParseCursor *c, uint32_t *cp) {
    int n = c->len - c->pos > 0 ? utf8_next(c->src + c->pos, c->len - c->pos, cp) : 0;
    if (n <= 0) return cursor_fail_at(c, c->pos, "invalid UTF-8");
    c->pos += (size_t)n;
    return 0;
}

bool cursor_hex_digit(const ParseCursor *c, uint32_t *value) {
    if (c->pos >= c->len) return false;
    unsigned char h = c->src[c->pos];
    if (h >= '0' && h <= '9') *value = (uint32_t)(h - '0');
    else if ((h | 0x20) >= 'a' && (h | 0x20) <= 'f') *value = (uint32_t)((h | 0x20) - 'a' + 10);
    else return false;
    return true;
}

bool cursor_read_hex(ParseCursor *c, int digits, uint32_t *value) {
    size_t start = c->pos;
    uint32_t v = 0, digit;
    for (int i = 0; i < digits; i++, c->pos++) {
        if (!cursor_hex_digit(c, &digit)) {
            c->pos = start;
            return false;
        }
        v = v * 16 + digit;
    }
    *value = v;
    return true;
}

long cursor_read_count(ParseCursor *c, long limit) {
    if (!cursor_digit_at(c, c->pos)) return -1;
    long v = 0;
    while (cursor_digit_at(c, c->pos)) {
        if (v <= limit) v = v * 10 + (c->src[c->pos] - '0');
        c->pos++;
    }
    return v;
}

int expr_list_push(ParseCursor *c, ExprList *l, GExpr e) {
    if (e == G_ERROR) return -1;
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 8;
        GExpr *grown = realloc(l->items, (size_t)cap * sizeof *grown);
        if (!grown) return cursor_out_of_memory(c);
        l->items = grown, l->cap = cap;
    }
    l->items[l->n++] = e;
    return 0;
}

GExpr expr_list_seq(Grammar *g, const ExprList *l) {
    return l->n == 0 ? g_empty(g) : l->n == 1 ? l->items[0] : g_seq(g, l->items, l->n);
}

GExpr cursor_alternation(ParseCursor *c, ExprReader read_branch, void *parser) {
    ExprList alts = {0};
    GExpr result = G_ERROR;
    for (;;) {
        if (expr_list_push(c, &alts, read_branch(parser)) < 0) goto done;
        if (!cursor_at(c, '|')) break;
        c->pos++;
    }
    result = alts.n == 1 ? alts.items[0] : g_alt(c->g, alts.items, alts.n);
done:
    free(alts.items);
    return result;
}

GExpr cursor_group(ParseCursor *c, ExprReader read_inside, void *parser, const char *unclosed) {
    size_t start = c->pos++;
    if (c->depth >= PARSE_MAX_DEPTH)
        return cursor_fail_at(c, start, "groups nested deeper than %d", PARSE_MAX_DEPTH);
    c->depth++;
    GExpr inner = read_inside(parser);
    c->depth--;
    if (inner == G_ERROR) return G_ERROR;
    return cursor_expect(c, ')', start, unclosed) < 0 ? G_ERROR : inner;
}

static int set_add(ParseCursor *c, CodepointSet *s, uint32_t lo, uint32_t hi) {
    if (s->num_ranges == s->cap_ranges) {
        int cap = s->cap_ranges ? s->cap_ranges * 2 : 8;
        uint32_t *grown = realloc(s->ranges, (size_t)cap * 2 * sizeof *grown);
        if (!grown) return cursor_out_of_memory(c);
        s->ranges = grown, s->cap_ranges = cap;
    }
    s->ranges[2 * s->num_ranges] = lo;
    s->ranges[2 * s->num_ranges + 1] = hi;
    s->num_ranges++;
    return 0;
}

/* Adds the item's characters; a negated predefined class is complemented
 * here because a class may mix it with other members ([\D_]). */
static int set_add_item(ParseCursor *c, CodepointSet *s, const CharItem *item) {
    if (!item->set) return set_add(c, s, item->cp, item->cp);
    if (!item->negated) {
        for (int i = 0; i < item->set_ranges; i++)
            if (set_add(c, s, item->set[2 * i], item->set[2 * i + 1]) < 0) return -1;
        return 0;
    }
    uint32_t next = 0;
    for (int i = 0; i < item->set_ranges; i++) {
        if (item->set[2 * i] > next && set_add(c, s, next, item->set[2 * i] - 1) < 0) return -1;
        next = item->set[2 * i + 1] + 1;
    }
    return next <= PARSE_MAX_CODEPOINT ? set_add(c, s, next, PARSE_MAX_CODEPOINT) : 0;
}

GExpr cursor_class(ParseCursor *c, CharItemReader read_member, GEncoding enc) {
    size_t start = c->pos++;
    bool negated = cursor_at(c, '^');
    if (negated) c->pos++;
    CodepointSet set = {0};
    GExpr result = G_ERROR;
    int more;
    while ((more = cursor_before_close(c, ']', start, "unterminated character class")) > 0) {
        CharItem lo, hi;
        if (read_member(c, &lo) < 0) goto done;
        if (cursor_at(c, '-') && c->pos + 1 < c->len && c->src[c->pos + 1] != ']') {
            size_t dash = c->pos++;
            if (read_member(c, &hi) < 0) goto done;
            if (lo.set || hi.set) {
                cursor_fail_at(c, dash, "class escape as a range bound");
                goto done;
            }
            if (lo.cp > hi.cp) {
                cursor_fail_at(c, dash, "bad character range (U+%04X > U+%04X)", (unsigned)lo.cp, (unsigned)hi.cp);
                goto done;
            }
            if (set_add(c, &set, lo.cp, hi.cp) < 0) goto done;
        } else if (set_add_item(c, &set, &lo) < 0) {
            goto done;
        }
    }
    if (more < 0) goto done;
    const uint32_t *ranges = set.ranges ? set.ranges : NO_RANGES;
    result = negated ? g_codepoints_not(c->g, ranges, set.num_ranges, enc)
                     : g_codepoints(c->g, ranges, set.num_ranges, enc);
done:
    free(set.ranges);
    return result;
}

GExpr any_char(Grammar *g, GEncoding enc) { return g_codepoints_not(g, NO_RANGES, 0, enc); }
