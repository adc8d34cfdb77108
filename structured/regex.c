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
#include "parse_cursor.h"

#include <stdlib.h>

#define REGEX_MAX_REPEAT 10000 /* the largest count of {m,n} */

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
#define NUM_RANGES(table) ((int)(sizeof(table) / sizeof(table)[0] / 2))

typedef struct RegexParser {
    ParseCursor cur;
    RegexMode mode;
    GEncoding enc;
} RegexParser;

/* \u after the "\u": HHHH (a surrogate pair \uD83D\uDE00 is one character,
 * as ECMAScript's u mode reads it) or {H...}. */
static int read_unicode_escape(ParseCursor *c, size_t start, uint32_t *cp) {
    uint32_t v, digit;
    if (cursor_at(c, '{')) {
        c->pos++;
        v = 0;
        int digits = 0;
        while (cursor_hex_digit(c, &digit)) {
            if (v <= PARSE_MAX_CODEPOINT) v = v * 16 + digit;
            c->pos++, digits++;
        }
        if (digits == 0 || !cursor_at(c, '}')) return cursor_fail_at(c, start, "bad escape \\u{...}");
        c->pos++;
        if (v > PARSE_MAX_CODEPOINT) return cursor_fail_at(c, start, "escape \\u{...} above U+10FFFF");
        if (is_surrogate(v)) return cursor_fail_at(c, start, "lone surrogate escape");
        *cp = v;
        return 0;
    }
    if (!cursor_read_hex(c, 4, &v)) return cursor_fail_at(c, start, "bad escape \\u (4 hex digits expected)");
    if (v >= 0xD800 && v <= 0xDBFF && c->len - c->pos >= 6 && c->src[c->pos] == '\\' && c->src[c->pos + 1] == 'u') {
        size_t second = c->pos;
        uint32_t low;
        c->pos += 2;
        if (cursor_read_hex(c, 4, &low) && low >= 0xDC00 && low <= 0xDFFF) {
            *cp = 0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00);
            return 0;
        }
        c->pos = second;
    }
    if (is_surrogate(v)) return cursor_fail_at(c, start, "lone surrogate escape");
    *cp = v;
    return 0;
}

/* The escape at c->pos (a backslash). Inside a class \b is a backspace. */
static int parse_escape(ParseCursor *c, bool in_class, CharItem *out) {
    size_t start = c->pos++;
    *out = (CharItem){0};
    if (c->pos >= c->len) return cursor_fail_at(c, start, "trailing backslash");
    unsigned char ch = c->src[c->pos++];
    switch (ch) {
    case 'd': case 'D':
        *out = (CharItem){.set = DIGIT_RANGES, .set_ranges = NUM_RANGES(DIGIT_RANGES), .negated = ch == 'D'};
        return 0;
    case 'w': case 'W':
        *out = (CharItem){.set = WORD_RANGES, .set_ranges = NUM_RANGES(WORD_RANGES), .negated = ch == 'W'};
        return 0;
    case 's': case 'S':
        *out = (CharItem){.set = SPACE_RANGES, .set_ranges = NUM_RANGES(SPACE_RANGES), .negated = ch == 'S'};
        return 0;
    case 'n': out->cp = '\n'; return 0;
    case 't': out->cp = '\t'; return 0;
    case 'r': out->cp = '\r'; return 0;
    case 'f': out->cp = '\f'; return 0;
    case 'v': out->cp = '\v'; return 0;
    case '0':
        /* Python reads \01 as octal, ECMAScript's u mode refuses it. */
        if (cursor_digit_at(c, c->pos)) return cursor_fail_at(c, start, "octal escape");
        out->cp = 0;
        return 0;
    case 'b':
        if (in_class) {
            out->cp = '\b';
            return 0;
        }
        return cursor_fail_at(c, start, "word boundary \\b is not supported");
    case 'B': return cursor_fail_at(c, start, "word boundary \\B is not supported");
    case 'x':
        if (!cursor_read_hex(c, 2, &out->cp))
            return cursor_fail_at(c, start, "bad escape \\x (2 hex digits expected)");
        return 0;
    case 'u': return read_unicode_escape(c, start, &out->cp);
    case 'U': /* Python's eight-digit form */
        if (!cursor_read_hex(c, 8, &out->cp))
            return cursor_fail_at(c, start, "bad escape \\U (8 hex digits expected)");
        if (out->cp > PARSE_MAX_CODEPOINT) return cursor_fail_at(c, start, "escape \\U above U+10FFFF");
        if (is_surrogate(out->cp)) return cursor_fail_at(c, start, "lone surrogate escape");
        return 0;
    case 'k': return cursor_fail_at(c, start, "backreference \\k is not supported");
    case 'p': case 'P': return cursor_fail_at(c, start, "Unicode property escape \\%c is not supported", ch);
    case 'c': return cursor_fail_at(c, start, "control escape \\c is not supported");
    case 'A': case 'Z': case 'z': case 'G': return cursor_fail_at(c, start, "anchor \\%c is not supported", ch);
    case 'N': return cursor_fail_at(c, start, "named character escape \\N is not supported");
    default: break;
    }
    if (ch >= '1' && ch <= '9') return cursor_fail_at(c, start, "backreference \\%c is not supported", ch);
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))
        return cursor_fail_at(c, start, "unknown escape \\%c", ch);
    /* Escaped punctuation (or any other character) stands for itself. */
    c->pos--;
    return cursor_read_utf8(c, &out->cp);
}

/* One member of a class: an escape or a literal character. */
static int read_class_member(ParseCursor *c, CharItem *out) {
    if (cursor_at(c, '\\')) return parse_escape(c, true, out);
    if (cursor_at(c, '[') && c->pos + 1 < c->len &&
        (c->src[c->pos + 1] == ':' || c->src[c->pos + 1] == '=' || c->src[c->pos + 1] == '.'))
        return cursor_fail_at(c, c->pos, "POSIX character class is not supported");
    *out = (CharItem){0};
    return cursor_read_utf8(c, &out->cp);
}

static GExpr parse_class(RegexParser *p) {
    ParseCursor *c = &p->cur;
    /* Python reads []a] as a class holding ']', ECMAScript as an empty class. */
    size_t first = c->pos + 1;
    if (first < c->len && c->src[first] == '^') first++;
    if (first < c->len && c->src[first] == ']') return cursor_fail_at(c, c->pos, "empty character class");
    return cursor_class(c, read_class_member, p->enc);
}

static GExpr item_expr(RegexParser *p, const CharItem *item) {
    if (!item->set) {
        uint32_t one[2] = {item->cp, item->cp};
        return g_codepoints(p->cur.g, one, 1, p->enc);
    }
    return item->negated ? g_codepoints_not(p->cur.g, item->set, item->set_ranges, p->enc)
                         : g_codepoints(p->cur.g, item->set, item->set_ranges, p->enc);
}

/* A quantifier at c->pos: 1 (consumed, bounds in *min and *max), 0 when there
 * is none (a '{' that does not start {m}, {m,} or {m,n} is a literal, as
 * both dialects read it), -1 on error. */
static int parse_quantifier(ParseCursor *c, int *min, int *max) {
    if (c->pos >= c->len) return 0;
    size_t start = c->pos;
    switch (c->src[c->pos]) {
    case '*': c->pos++, *min = 0, *max = G_UNBOUNDED; return 1;
    case '+': c->pos++, *min = 1, *max = G_UNBOUNDED; return 1;
    case '?': c->pos++, *min = 0, *max = 1; return 1;
    case '{': break;
    default: return 0;
    }
    c->pos++;
    long lo = cursor_read_count(c, REGEX_MAX_REPEAT), hi;
    if (lo < 0) {
        /* Python reads {,n} as {0,n}, ECMAScript as literal text. */
        if (cursor_at(c, ',') && cursor_digit_at(c, c->pos + 1))
            return cursor_fail_at(c, start, "quantifier {,n} is ambiguous (write {0,n})");
        c->pos = start;
        return 0;
    }
    if (cursor_at(c, '}')) {
        hi = lo;
    } else if (cursor_at(c, ',')) {
        c->pos++;
        hi = cursor_at(c, '}') ? -1 : cursor_read_count(c, REGEX_MAX_REPEAT);
        if (!cursor_at(c, '}')) {
            c->pos = start;
            return 0;
        }
    } else {
        c->pos = start;
        return 0;
    }
    c->pos++;
    if (lo > REGEX_MAX_REPEAT || hi > REGEX_MAX_REPEAT)
        return cursor_fail_at(c, start, "repeat count above %d", REGEX_MAX_REPEAT);
    if (hi >= 0 && lo > hi) return cursor_fail_at(c, start, "bad quantifier {%ld,%ld} (min > max)", lo, hi);
    *min = (int)lo;
    *max = hi < 0 ? G_UNBOUNDED : (int)hi;
    return 1;
}

static bool quantifier_follows(ParseCursor *c) {
    size_t saved = c->pos;
    int min, max;
    /* A malformed one ({,3}, {99999}) has recorded its error: the first wins. */
    int found = parse_quantifier(c, &min, &max);
    c->pos = saved;
    return found != 0;
}

static GExpr parse_inner_alternation(void *parser);

/* A group's inside, after its '(': (?:...), named groups and refusals. */
static GExpr parse_group_inside(void *parser) {
    RegexParser *p = parser;
    ParseCursor *c = &p->cur;
    size_t start = c->pos - 1; /* the '(' */
    if (cursor_at(c, '?')) {
        unsigned char kind = c->pos + 1 < c->len ? c->src[c->pos + 1] : 0;
        unsigned char next = c->pos + 2 < c->len ? c->src[c->pos + 2] : 0;
        if (kind == ':') {
            c->pos += 2;
        } else if ((kind == '<' && next != '=' && next != '!') || (kind == 'P' && next == '<')) {
            c->pos += kind == 'P' ? 3 : 2;
            size_t name = c->pos;
            while (c->pos < c->len && (c->src[c->pos] == '_' || c->src[c->pos] >= 0x80 ||
                                       cursor_digit_at(c, c->pos) ||
                                       ((c->src[c->pos] | 0x20) >= 'a' && (c->src[c->pos] | 0x20) <= 'z')))
                c->pos++;
            if (c->pos == name || !cursor_at(c, '>') || cursor_digit_at(c, name))
                return cursor_fail_at(c, start, "bad group name");
            c->pos++;
        } else if (kind == '=' || kind == '!') {
            return cursor_fail_at(c, start, "lookahead (?%c is not supported", kind);
        } else if (kind == '<') {
            return cursor_fail_at(c, start, "lookbehind (?<%c is not supported", next);
        } else if (kind == 'P' && (next == '=' || next == '>')) {
            return cursor_fail_at(c, start, "backreference (?P%c is not supported", next);
        } else if (kind == '#') {
            return cursor_fail_at(c, start, "comment group (?# is not supported");
        } else if (kind == '>') {
            return cursor_fail_at(c, start, "atomic group (?> is not supported");
        } else if (kind == '(') {
            return cursor_fail_at(c, start, "conditional group (?( is not supported");
        } else if ((kind >= 'a' && kind <= 'z') || (kind >= 'A' && kind <= 'Z') || kind == '-' || kind == '^') {
            return cursor_fail_at(c, start, "inline flags (?%c are not supported", kind);
        } else {
            return cursor_fail_at(c, start, "unknown group syntax after '(?'");
        }
    }
    return parse_inner_alternation(p);
}

static GExpr parse_atom(RegexParser *p) {
    ParseCursor *c = &p->cur;
    size_t start = c->pos;
    CharItem item;
    switch (c->src[c->pos]) {
    case '(': return cursor_group(c, parse_group_inside, p, "unbalanced '(' (missing ')')");
    case '[': return parse_class(p);
    case '.':
        c->pos++;
        return g_codepoints_not(c->g, NEWLINE_RANGE, NUM_RANGES(NEWLINE_RANGE), p->enc);
    case '\\':
        if (parse_escape(c, false, &item) < 0) return G_ERROR;
        return item_expr(p, &item);
    case '*': case '+': case '?':
        return cursor_fail_at(c, start, "quantifier '%c' with nothing to repeat", c->src[c->pos]);
    case '{':
        if (quantifier_follows(c)) return cursor_fail_at(c, start, "quantifier '{' with nothing to repeat");
        break;
    default: break;
    }
    item = (CharItem){0};
    if (cursor_read_utf8(c, &item.cp) < 0) return G_ERROR;
    return item_expr(p, &item);
}

static GExpr parse_quantified(RegexParser *p) {
    ParseCursor *c = &p->cur;
    GExpr atom = parse_atom(p);
    if (atom == G_ERROR) return G_ERROR;
    int min, max;
    int found = parse_quantifier(c, &min, &max);
    if (found <= 0) return found < 0 ? G_ERROR : atom;
    if (cursor_at(c, '?')) c->pos++; /* lazy: the same language */
    else if (cursor_at(c, '+')) return cursor_fail_at(c, c->pos, "possessive quantifier is not supported");
    if (quantifier_follows(c))
        return cursor_fail_at(c, c->pos, "quantifier with nothing to repeat (multiple quantifiers)");
    return g_repeat(c->g, atom, min, max);
}

/* Any text at all: what an unanchored search allows around a match. */
static GExpr any_text(RegexParser *p) { return g_repeat(p->cur.g, any_char(p->cur.g, p->enc), 0, G_UNBOUNDED); }

/* One alternative. At the top level it may open with ^ and close with $,
 * and in search mode what it does not anchor gets any text around it. */
static GExpr parse_concat(RegexParser *p, bool top_level) {
    ParseCursor *c = &p->cur;
    ExprList seq = {0};
    GExpr result = G_ERROR;
    bool anchored_start = false, anchored_end = false;
    if (top_level && cursor_at(c, '^')) c->pos++, anchored_start = true;
    while (c->pos < c->len && !cursor_at(c, '|') && !cursor_at(c, ')')) {
        if (cursor_at(c, '$')) {
            if (top_level && (c->pos + 1 == c->len || c->src[c->pos + 1] == '|')) {
                c->pos++, anchored_end = true;
                break;
            }
            cursor_fail_at(c, c->pos, "anchor $ is only supported at the end");
            goto done;
        }
        if (cursor_at(c, '^')) {
            cursor_fail_at(c, c->pos, "anchor ^ is only supported at the start");
            goto done;
        }
        if (expr_list_push(c, &seq, parse_quantified(p)) < 0) goto done;
    }
    result = expr_list_seq(c->g, &seq);
    if (top_level && p->mode == REGEX_SEARCH) {
        if (!anchored_start) result = g_seq2(c->g, any_text(p), result);
        if (!anchored_end) result = g_seq2(c->g, result, any_text(p));
    }
done:
    free(seq.items);
    return result;
}

static GExpr parse_top_concat(void *parser) { return parse_concat(parser, true); }
static GExpr parse_inner_concat(void *parser) { return parse_concat(parser, false); }

static GExpr parse_inner_alternation(void *parser) {
    RegexParser *p = parser;
    return cursor_alternation(&p->cur, parse_inner_concat, p);
}

GExpr regex_to_grammar(Grammar *g, const char *pattern, size_t len, RegexMode mode, GEncoding enc) {
    if (!g) return G_ERROR;
    if (!pattern && len) return grammar_fail(g, ERROR_INVALID, "regex: no pattern");
    RegexParser p = {.cur = {.g = g,
                             .src = (const unsigned char *)pattern,
                             .len = len,
                             .dialect = "regex",
                             .place = PLACE_BY_OFFSET},
                     .mode = mode,
                     .enc = enc};
    ParseCursor *c = &p.cur;
    /* Checked once up front so that names and escapes never see broken text. */
    for (uint32_t cp; c->pos < c->len;)
        if (cursor_read_utf8(c, &cp) < 0) return G_ERROR;
    c->pos = 0;
    GExpr e = cursor_alternation(c, parse_top_concat, &p);
    if (e == G_ERROR) return G_ERROR;
    if (c->pos < c->len) return cursor_fail_at(c, c->pos, "unbalanced ')'");
    return e;
}
