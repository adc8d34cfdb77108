/*
 * regex.c - regular expressions (the common subset of ECMAScript and
 * Python) into grammar expressions, by recursive descent over the UTF-8
 * pattern (regex.h is the spec).
 *
 * A pattern here is only ever a set of strings, so greedy and lazy
 * quantifiers build the same expression, and anything whose meaning
 * depends on how a backtracking matcher runs (backreferences, lookaround,
 * \b) is refused rather than approximated. Where the two dialects read the
 * same text differently ([]a], {,3}, \0 followed by a digit) the pattern is
 * refused too: we cannot know which one the caller meant.
 */
#include "regex.h"
#include "text/tokenizer/utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define REGEX_MAX_DEPTH 200    /* nested groups: recursion depth, never the C stack's limit */
#define REGEX_MAX_REPEAT 10000 /* the largest count of {m,n} */
#define MAX_CODEPOINT 0x10FFFFu

/* Ranges as g_codepoints takes them: ranges[2i] .. ranges[2i+1]. */
static const uint32_t DIGIT_RANGES[] = {'0', '9'};
static const uint32_t WORD_RANGES[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'};
/* ECMAScript's WhiteSpace and LineTerminator (a superset of Python's \s for ASCII). */
static const uint32_t SPACE_RANGES[] = {0x09,   0x0D,   0x20,   0x20,   0xA0,   0xA0,   0x1680, 0x1680,
                                        0x2000, 0x200A, 0x2028, 0x2029, 0x202F, 0x202F, 0x205F, 0x205F,
                                        0x3000, 0x3000, 0xFEFF, 0xFEFF};
/* What the dot leaves out: ECMAScript's line terminators (Python leaves out
 * only \n, so every output is also a Python match). */
static const uint32_t NEWLINE_RANGE[] = {'\n', '\n', '\r', '\r', 0x2028, 0x2029};
static const uint32_t NO_RANGES[1] = {0}; /* the empty set, as a valid pointer */
#define NUM_RANGES(table) ((int)(sizeof(table) / sizeof(table)[0] / 2))

typedef struct RegexParser {
    Grammar *g;
    const unsigned char *src;
    size_t len, pos;
    RegexMode mode;
    GEncoding enc;
    int depth;
} RegexParser;

/* One escape or class member: a single code point, or a predefined class
 * (\d \w \s, complemented when negated). */
typedef struct CharItem {
    uint32_t cp;
    const uint32_t *set; /* NULL for a single code point */
    int set_ranges;
    bool negated;
} CharItem;

typedef struct CodepointSet {
    uint32_t *ranges;
    int num_ranges, cap_ranges;
} CodepointSet;

typedef struct ExprList {
    GExpr *items;
    int n, cap;
} ExprList;

static GExpr fail_at(RegexParser *p, size_t offset, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static GExpr fail_at(RegexParser *p, size_t offset, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return grammar_fail(p->g, ERROR_INVALID, "regex: %s at offset %zu", what, offset);
}

static GExpr out_of_memory(RegexParser *p) {
    return grammar_fail(p->g, ERROR_INTERNAL, "regex: out of memory");
}

static bool at(const RegexParser *p, char c) { return p->pos < p->len && p->src[p->pos] == (unsigned char)c; }

static bool is_hex(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static uint32_t hex_value(unsigned char c) {
    return c <= '9' ? (uint32_t)(c - '0') : (uint32_t)((c | 0x20) - 'a' + 10);
}

/* Exactly `digits` hex digits at p->pos (consumed), or false. */
static bool read_hex(RegexParser *p, int digits, uint32_t *value) {
    if (p->len - p->pos < (size_t)digits) return false;
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        if (!is_hex(p->src[p->pos + i])) return false;
        v = v * 16 + hex_value(p->src[p->pos + i]);
    }
    p->pos += digits;
    *value = v;
    return true;
}

/* \u after the "\u": HHHH (a surrogate pair \uD83D\uDE00 is one character,
 * as ECMAScript's u mode reads it) or {H...}. */
static int read_unicode_escape(RegexParser *p, size_t start, uint32_t *cp) {
    if (at(p, '{')) {
        p->pos++;
        uint32_t v = 0;
        int digits = 0;
        while (p->pos < p->len && is_hex(p->src[p->pos])) {
            if (v <= MAX_CODEPOINT) v = v * 16 + hex_value(p->src[p->pos]);
            p->pos++, digits++;
        }
        if (digits == 0 || !at(p, '}')) return fail_at(p, start, "bad escape \\u{...}");
        p->pos++;
        if (v > MAX_CODEPOINT) return fail_at(p, start, "escape \\u{...} above U+10FFFF");
        if (v >= 0xD800 && v <= 0xDFFF) return fail_at(p, start, "lone surrogate escape");
        *cp = v;
        return 0;
    }
    uint32_t v;
    if (!read_hex(p, 4, &v)) return fail_at(p, start, "bad escape \\u (4 hex digits expected)");
    if (v >= 0xD800 && v <= 0xDBFF && p->len - p->pos >= 6 && p->src[p->pos] == '\\' && p->src[p->pos + 1] == 'u') {
        size_t second = p->pos;
        uint32_t low;
        p->pos += 2;
        if (read_hex(p, 4, &low) && low >= 0xDC00 && low <= 0xDFFF) {
            *cp = 0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00);
            return 0;
        }
        p->pos = second;
    }
    if (v >= 0xD800 && v <= 0xDFFF) return fail_at(p, start, "lone surrogate escape");
    *cp = v;
    return 0;
}

/* The escape at p->pos (a backslash). Inside a class \b is a backspace. */
static int parse_escape(RegexParser *p, bool in_class, CharItem *out) {
    size_t start = p->pos++;
    *out = (CharItem){0};
    if (p->pos >= p->len) return fail_at(p, start, "trailing backslash");
    unsigned char c = p->src[p->pos++];
    switch (c) {
    case 'd': case 'D':
        *out = (CharItem){.set = DIGIT_RANGES, .set_ranges = NUM_RANGES(DIGIT_RANGES), .negated = c == 'D'};
        return 0;
    case 'w': case 'W':
        *out = (CharItem){.set = WORD_RANGES, .set_ranges = NUM_RANGES(WORD_RANGES), .negated = c == 'W'};
        return 0;
    case 's': case 'S':
        *out = (CharItem){.set = SPACE_RANGES, .set_ranges = NUM_RANGES(SPACE_RANGES), .negated = c == 'S'};
        return 0;
    case 'n': out->cp = '\n'; return 0;
    case 't': out->cp = '\t'; return 0;
    case 'r': out->cp = '\r'; return 0;
    case 'f': out->cp = '\f'; return 0;
    case 'v': out->cp = '\v'; return 0;
    case '0':
        /* Python reads \01 as octal, ECMAScript's u mode refuses it. */
        if (p->pos < p->len && p->src[p->pos] >= '0' && p->src[p->pos] <= '9')
            return fail_at(p, start, "octal escape");
        out->cp = 0;
        return 0;
    case 'b':
        if (in_class) {
            out->cp = '\b';
            return 0;
        }
        return fail_at(p, start, "word boundary \\b is not supported");
    case 'B': return fail_at(p, start, "word boundary \\B is not supported");
    case 'x':
        if (!read_hex(p, 2, &out->cp)) return fail_at(p, start, "bad escape \\x (2 hex digits expected)");
        return 0;
    case 'u': return read_unicode_escape(p, start, &out->cp);
    case 'U': /* Python's eight-digit form */
        if (!read_hex(p, 8, &out->cp)) return fail_at(p, start, "bad escape \\U (8 hex digits expected)");
        if (out->cp > MAX_CODEPOINT) return fail_at(p, start, "escape \\U above U+10FFFF");
        if (out->cp >= 0xD800 && out->cp <= 0xDFFF) return fail_at(p, start, "lone surrogate escape");
        return 0;
    case 'k': return fail_at(p, start, "backreference \\k is not supported");
    case 'p': case 'P': return fail_at(p, start, "Unicode property escape \\%c is not supported", c);
    case 'c': return fail_at(p, start, "control escape \\c is not supported");
    case 'A': case 'Z': case 'z': case 'G': return fail_at(p, start, "anchor \\%c is not supported", c);
    case 'N': return fail_at(p, start, "named character escape \\N is not supported");
    default: break;
    }
    if (c >= '1' && c <= '9') return fail_at(p, start, "backreference \\%c is not supported", c);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return fail_at(p, start, "unknown escape \\%c", c);
    /* Escaped punctuation (or any other character) stands for itself. */
    p->pos--;
    int n = p->len - p->pos > 0 ? utf8_next(p->src + p->pos, p->len - p->pos, &out->cp) : 0;
    if (n <= 0) return fail_at(p, p->pos, "invalid UTF-8");
    p->pos += n;
    return 0;
}

static int set_add(RegexParser *p, CodepointSet *s, uint32_t lo, uint32_t hi) {
    if (s->num_ranges == s->cap_ranges) {
        int cap = s->cap_ranges ? s->cap_ranges * 2 : 8;
        uint32_t *grown = realloc(s->ranges, (size_t)cap * 2 * sizeof *grown);
        if (!grown) return out_of_memory(p);
        s->ranges = grown, s->cap_ranges = cap;
    }
    s->ranges[2 * s->num_ranges] = lo;
    s->ranges[2 * s->num_ranges + 1] = hi;
    s->num_ranges++;
    return 0;
}

/* Adds the item's characters; a negated class is complemented here because
 * a class may mix it with other members ([\D_]). The tables are sorted. */
static int set_add_item(RegexParser *p, CodepointSet *s, const CharItem *item) {
    if (!item->set) return set_add(p, s, item->cp, item->cp);
    if (!item->negated) {
        for (int i = 0; i < item->set_ranges; i++)
            if (set_add(p, s, item->set[2 * i], item->set[2 * i + 1]) < 0) return -1;
        return 0;
    }
    uint32_t next = 0;
    for (int i = 0; i < item->set_ranges; i++) {
        if (item->set[2 * i] > next && set_add(p, s, next, item->set[2 * i] - 1) < 0) return -1;
        next = item->set[2 * i + 1] + 1;
    }
    return next <= MAX_CODEPOINT ? set_add(p, s, next, MAX_CODEPOINT) : 0;
}

/* One member of a class: an escape or a literal character. */
static int parse_class_char(RegexParser *p, CharItem *out) {
    if (at(p, '\\')) return parse_escape(p, true, out);
    if (at(p, '[') && p->pos + 1 < p->len &&
        (p->src[p->pos + 1] == ':' || p->src[p->pos + 1] == '=' || p->src[p->pos + 1] == '.'))
        return fail_at(p, p->pos, "POSIX character class is not supported");
    *out = (CharItem){0};
    int n = p->len - p->pos > 0 ? utf8_next(p->src + p->pos, p->len - p->pos, &out->cp) : 0;
    if (n <= 0) return fail_at(p, p->pos, "invalid UTF-8");
    p->pos += n;
    return 0;
}

static GExpr parse_class(RegexParser *p) {
    size_t start = p->pos++;
    bool negated = at(p, '^');
    if (negated) p->pos++;
    /* Python reads []a] as a class holding ']', ECMAScript as an empty class. */
    if (at(p, ']')) return fail_at(p, start, "empty character class");
    CodepointSet set = {0};
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
        CharItem lo, hi;
        if (parse_class_char(p, &lo) < 0) goto done;
        if (at(p, '-') && p->pos + 1 < p->len && p->src[p->pos + 1] != ']') {
            size_t dash = p->pos++;
            if (parse_class_char(p, &hi) < 0) goto done;
            if (lo.set || hi.set) {
                fail_at(p, dash, "class escape as a range bound");
                goto done;
            }
            if (lo.cp > hi.cp) {
                fail_at(p, dash, "bad character range (U+%04X > U+%04X)", (unsigned)lo.cp, (unsigned)hi.cp);
                goto done;
            }
            if (set_add(p, &set, lo.cp, hi.cp) < 0) goto done;
        } else if (set_add_item(p, &set, &lo) < 0) {
            goto done;
        }
    }
    result = negated ? g_codepoints_not(p->g, set.ranges, set.num_ranges, p->enc)
                     : g_codepoints(p->g, set.ranges, set.num_ranges, p->enc);
done:
    free(set.ranges);
    return result;
}

static GExpr item_expr(RegexParser *p, const CharItem *item) {
    if (!item->set) {
        uint32_t one[2] = {item->cp, item->cp};
        return g_codepoints(p->g, one, 1, p->enc);
    }
    return item->negated ? g_codepoints_not(p->g, item->set, item->set_ranges, p->enc)
                         : g_codepoints(p->g, item->set, item->set_ranges, p->enc);
}

/* A decimal count at p->pos, clamped above the limit so that it cannot
 * overflow; -1 when there is no digit. */
static long read_count(RegexParser *p) {
    if (p->pos >= p->len || p->src[p->pos] < '0' || p->src[p->pos] > '9') return -1;
    long v = 0;
    while (p->pos < p->len && p->src[p->pos] >= '0' && p->src[p->pos] <= '9') {
        if (v <= REGEX_MAX_REPEAT) v = v * 10 + (p->src[p->pos] - '0');
        p->pos++;
    }
    return v;
}

/* A quantifier at p->pos: 1 (consumed, bounds in *min and *max), 0 when there
 * is none (a '{' that does not start {m}, {m,} or {m,n} is a literal, as
 * both dialects read it), -1 on error. */
static int parse_quantifier(RegexParser *p, int *min, int *max) {
    if (p->pos >= p->len) return 0;
    size_t start = p->pos;
    switch (p->src[p->pos]) {
    case '*': p->pos++, *min = 0, *max = G_UNBOUNDED; return 1;
    case '+': p->pos++, *min = 1, *max = G_UNBOUNDED; return 1;
    case '?': p->pos++, *min = 0, *max = 1; return 1;
    case '{': break;
    default: return 0;
    }
    p->pos++;
    long lo = read_count(p), hi;
    if (lo < 0) {
        /* Python reads {,n} as {0,n}, ECMAScript as literal text. */
        if (at(p, ',') && p->pos + 1 < p->len && p->src[p->pos + 1] >= '0' && p->src[p->pos + 1] <= '9')
            return fail_at(p, start, "quantifier {,n} is ambiguous (write {0,n})");
        p->pos = start;
        return 0;
    }
    if (at(p, '}')) {
        hi = lo;
    } else if (at(p, ',')) {
        p->pos++;
        hi = at(p, '}') ? -1 : read_count(p);
        if (!at(p, '}')) {
            p->pos = start;
            return 0;
        }
    } else {
        p->pos = start;
        return 0;
    }
    p->pos++;
    if (lo > REGEX_MAX_REPEAT || hi > REGEX_MAX_REPEAT)
        return fail_at(p, start, "repeat count above %d", REGEX_MAX_REPEAT);
    if (hi >= 0 && lo > hi) return fail_at(p, start, "bad quantifier {%ld,%ld} (min > max)", lo, hi);
    *min = (int)lo;
    *max = hi < 0 ? G_UNBOUNDED : (int)hi;
    return 1;
}

static bool quantifier_follows(RegexParser *p) {
    size_t saved = p->pos;
    int min, max;
    /* A malformed one ({,3}, {99999}) has recorded its error: the first wins. */
    int found = parse_quantifier(p, &min, &max);
    p->pos = saved;
    return found != 0;
}

static GExpr parse_alternation(RegexParser *p, bool top_level);

static GExpr parse_group(RegexParser *p) {
    size_t start = p->pos++;
    if (p->depth >= REGEX_MAX_DEPTH) return fail_at(p, start, "groups nested deeper than %d", REGEX_MAX_DEPTH);
    if (at(p, '?')) {
        unsigned char kind = p->pos + 1 < p->len ? p->src[p->pos + 1] : 0;
        unsigned char next = p->pos + 2 < p->len ? p->src[p->pos + 2] : 0;
        if (kind == ':') {
            p->pos += 2;
        } else if ((kind == '<' && next != '=' && next != '!') || (kind == 'P' && next == '<')) {
            p->pos += kind == 'P' ? 3 : 2;
            size_t name = p->pos;
            while (p->pos < p->len && (p->src[p->pos] == '_' || p->src[p->pos] >= 0x80 ||
                                       (p->src[p->pos] >= '0' && p->src[p->pos] <= '9') ||
                                       ((p->src[p->pos] | 0x20) >= 'a' && (p->src[p->pos] | 0x20) <= 'z')))
                p->pos++;
            if (p->pos == name || !at(p, '>') || (p->src[name] >= '0' && p->src[name] <= '9'))
                return fail_at(p, start, "bad group name");
            p->pos++;
        } else if (kind == '=' || kind == '!') {
            return fail_at(p, start, "lookahead (?%c is not supported", kind);
        } else if (kind == '<') {
            return fail_at(p, start, "lookbehind (?<%c is not supported", next);
        } else if (kind == 'P' && (next == '=' || next == '>')) {
            return fail_at(p, start, "backreference (?P%c is not supported", next);
        } else if (kind == '#') {
            return fail_at(p, start, "comment group (?# is not supported");
        } else if (kind == '>') {
            return fail_at(p, start, "atomic group (?> is not supported");
        } else if (kind == '(') {
            return fail_at(p, start, "conditional group (?( is not supported");
        } else if ((kind >= 'a' && kind <= 'z') || (kind >= 'A' && kind <= 'Z') || kind == '-' || kind == '^') {
            return fail_at(p, start, "inline flags (?%c are not supported", kind);
        } else {
            return fail_at(p, start, "unknown group syntax after '(?'");
        }
    }
    p->depth++;
    GExpr inner = parse_alternation(p, false);
    p->depth--;
    if (inner == G_ERROR) return G_ERROR;
    if (!at(p, ')')) return fail_at(p, start, "unbalanced '(' (missing ')')");
    p->pos++;
    return inner;
}

static GExpr parse_atom(RegexParser *p) {
    size_t start = p->pos;
    CharItem item;
    switch (p->src[p->pos]) {
    case '(': return parse_group(p);
    case '[': return parse_class(p);
    case '.':
        p->pos++;
        return g_codepoints_not(p->g, NEWLINE_RANGE, NUM_RANGES(NEWLINE_RANGE), p->enc);
    case '\\':
        if (parse_escape(p, false, &item) < 0) return G_ERROR;
        return item_expr(p, &item);
    case '*': case '+': case '?':
        return fail_at(p, start, "quantifier '%c' with nothing to repeat", p->src[p->pos]);
    case '{':
        if (quantifier_follows(p)) return fail_at(p, start, "quantifier '{' with nothing to repeat");
        break;
    default: break;
    }
    item = (CharItem){0};
    int n = p->len - p->pos > 0 ? utf8_next(p->src + p->pos, p->len - p->pos, &item.cp) : 0;
    if (n <= 0) return fail_at(p, start, "invalid UTF-8");
    p->pos += n;
    return item_expr(p, &item);
}

static GExpr parse_quantified(RegexParser *p) {
    GExpr atom = parse_atom(p);
    if (atom == G_ERROR) return G_ERROR;
    int min, max;
    int found = parse_quantifier(p, &min, &max);
    if (found <= 0) return found < 0 ? G_ERROR : atom;
    if (at(p, '?')) p->pos++; /* lazy: the same language */
    else if (at(p, '+')) return fail_at(p, p->pos, "possessive quantifier is not supported");
    if (quantifier_follows(p)) return fail_at(p, p->pos, "quantifier with nothing to repeat (multiple quantifiers)");
    return g_repeat(p->g, atom, min, max);
}

static int list_push(RegexParser *p, ExprList *l, GExpr e) {
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

/* Any text at all: what an unanchored search allows around a match. */
static GExpr any_text(RegexParser *p) {
    return g_repeat(p->g, g_codepoints_not(p->g, NO_RANGES, 0, p->enc), 0, G_UNBOUNDED);
}

/* One alternative. At the top level it may open with ^ and close with $,
 * and in search mode what it does not anchor gets any text around it. */
static GExpr parse_concat(RegexParser *p, bool top_level) {
    ExprList seq = {0};
    GExpr result = G_ERROR;
    bool anchored_start = false, anchored_end = false;
    if (top_level && at(p, '^')) p->pos++, anchored_start = true;
    while (p->pos < p->len && !at(p, '|') && !at(p, ')')) {
        if (at(p, '$')) {
            if (top_level && (p->pos + 1 == p->len || p->src[p->pos + 1] == '|')) {
                p->pos++, anchored_end = true;
                break;
            }
            fail_at(p, p->pos, "anchor $ is only supported at the end");
            goto done;
        }
        if (at(p, '^')) {
            fail_at(p, p->pos, "anchor ^ is only supported at the start");
            goto done;
        }
        if (list_push(p, &seq, parse_quantified(p)) < 0) goto done;
    }
    result = seq.n == 0 ? g_empty(p->g) : seq.n == 1 ? seq.items[0] : g_seq(p->g, seq.items, seq.n);
    if (top_level && p->mode == REGEX_SEARCH) {
        if (!anchored_start) result = g_seq2(p->g, any_text(p), result);
        if (!anchored_end) result = g_seq2(p->g, result, any_text(p));
    }
done:
    free(seq.items);
    return result;
}

static GExpr parse_alternation(RegexParser *p, bool top_level) {
    ExprList alts = {0};
    GExpr result = G_ERROR;
    for (;;) {
        if (list_push(p, &alts, parse_concat(p, top_level)) < 0) goto done;
        if (!at(p, '|')) break;
        p->pos++;
    }
    result = alts.n == 1 ? alts.items[0] : g_alt(p->g, alts.items, alts.n);
done:
    free(alts.items);
    return result;
}

GExpr regex_to_grammar(Grammar *g, const char *pattern, size_t len, RegexMode mode, GEncoding enc) {
    if (!g) return G_ERROR;
    if (!pattern && len) return grammar_fail(g, ERROR_INVALID, "regex: no pattern");
    RegexParser p = {.g = g, .src = (const unsigned char *)pattern, .len = len, .mode = mode, .enc = enc};
    /* Checked once up front so that names and escapes never see broken text. */
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int n = len - i > 0 ? utf8_next(p.src + i, len - i, &cp) : 0;
        if (n <= 0) return fail_at(&p, i, "invalid UTF-8");
        i += (size_t)n;
    }
    GExpr e = parse_alternation(&p, true);
    if (e == G_ERROR) return G_ERROR;
    if (p.pos < p.len) return fail_at(&p, p.pos, "unbalanced ')'");
    return e;
}
