/*
 * parse_cursor.h - the reading position over a constraint's text that the
 * two hand-written parsers of the grammar engine share: gbnf.c (GBNF
 * grammars) and regex.c (regular expressions).
 *
 * Both read UTF-8 text by recursive descent into grammar expressions and
 * need the same small machinery: a position with its nesting depth, errors
 * recorded in the Grammar at a place in the text, lists of expressions that
 * grow, decimal counts and hex digits, alternation (a|b), groups (...) and
 * character classes [...] with ranges and negation. What the dialects read
 * differently stays with them and reaches the cursor as a parameter: how an
 * error names its place (a line for GBNF, an offset for a regex), the
 * escapes and whatever else a class member may be, and every message the
 * two do not share.
 */
#ifndef NANOVLLM_PARSE_CURSOR_H
#define NANOVLLM_PARSE_CURSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar.h"

#define PARSE_MAX_DEPTH 200 /* nested groups: recursion depth, never the C stack's limit */
#define PARSE_MAX_CODEPOINT 0x10FFFFu

/* How an error names where it happened. */
typedef enum ErrorPlace {
    PLACE_BY_LINE,   /* "<dialect> line N: what" (a grammar spans lines) */
    PLACE_BY_OFFSET, /* "<dialect>: what at offset N" (a pattern is one line) */
} ErrorPlace;

typedef struct ParseCursor {
    Grammar *g; /* builds the expressions and keeps the first error */
    const unsigned char *src;
    size_t len, pos;
    int depth;           /* groups open around pos */
    const char *dialect; /* the errors' first word: "grammar", "regex" */
    ErrorPlace place;
} ParseCursor;

/* A growing list of expressions: the items of a sequence or alternation. */
typedef struct ExprList {
    GExpr *items;
    int n, cap;
} ExprList;

/* One member of a character class (or one escape): a single code point,
 * or a predefined class such as a regex's \d, complemented when negated. */
typedef struct CharItem {
    uint32_t cp;
    const uint32_t *set; /* NULL for a single code point; else sorted ranges set[2i] .. set[2i+1] */
    int set_ranges;
    bool negated;
} CharItem;

/* Reads the member at the cursor (the dialect's escapes and literals). */
typedef int (*CharItemReader)(ParseCursor *c, CharItem *out);
/* Reads a part of the text into an expression (G_ERROR on failure). */
typedef GExpr (*ExprReader)(void *parser);

static inline bool is_surrogate(uint32_t cp) { return cp >= 0xD800 && cp <= 0xDFFF; }

/* Records "what" (printf-style) as an ERROR_INVALID at offset of the text,
 * named as c->place says; returns -1, which is also G_ERROR. The first
 * error recorded wins. */
int cursor_fail_at(ParseCursor *c, size_t offset, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Records "<dialect>: out of memory"; returns -1. */
int cursor_out_of_memory(ParseCursor *c);

/* Whether the byte at pos is ch (false at the end). */
bool cursor_at(const ParseCursor *c, char ch);
/* Whether a decimal digit stands at offset. */
bool cursor_digit_at(const ParseCursor *c, size_t offset);

/* Consumes ch at pos, or fails with `message` at error_at. */
int cursor_expect(ParseCursor *c, char ch, size_t error_at, const char *message);
/* Whether another item comes before the byte `close` that ends what opened
 * at offset open: 1; 0 once `close` is consumed; -1 with the message
 * `unterminated` at open when the text ends first. */
int cursor_before_close(ParseCursor *c, char close, size_t open, const char *unterminated);

/* The UTF-8 character at pos (consumed), or -1 with "invalid UTF-8" at pos. */
int cursor_read_utf8(ParseCursor *c, uint32_t *cp);
/* Whether a hex digit stands at pos; its value in *value. Not consumed. */
bool cursor_hex_digit(const ParseCursor *c, uint32_t *value);
/* Exactly `digits` hex digits at pos (consumed), or false (pos unchanged). */
bool cursor_read_hex(ParseCursor *c, int digits, uint32_t *value);
/* The decimal count at pos (consumed), clamped above limit so that it cannot
 * overflow; -1 when no digit stands there. */
long cursor_read_count(ParseCursor *c, long limit);

/* Appends e; -1 when e is G_ERROR or memory runs out (recorded). */
int expr_list_push(ParseCursor *c, ExprList *l, GExpr e);
/* The items in a row: empty for none, the item itself for one. */
GExpr expr_list_seq(Grammar *g, const ExprList *l);

/* Branches read by read_branch, separated by '|', as one expression (the
 * branch itself when there is one). Stops before what follows the last. */
GExpr cursor_alternation(ParseCursor *c, ExprReader read_branch, void *parser);
/* The group whose '(' is at pos: fails past PARSE_MAX_DEPTH groups, reads
 * its inside with read_inside one level deeper, then expects ')', failing
 * with `unclosed` at the '(' when it is missing. */
GExpr cursor_group(ParseCursor *c, ExprReader read_inside, void *parser, const char *unclosed);
/* The class whose '[' is at pos, to the closing ']': [^...] negated, a-b
 * ranges between members read by read_member (a '-' just before ']' is a
 * literal dash), a predefined class as a member but never as a range
 * bound. Its characters are written with enc. */
GExpr cursor_class(ParseCursor *c, CharItemReader read_member, GEncoding enc);

/* Any one character (written with enc). */
GExpr any_char(Grammar *g, GEncoding enc);

#endif
