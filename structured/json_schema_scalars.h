/*
 * json_schema_scalars.h - internal to json_schema*.c: the texts of JSON
 * scalars. Numbers within bounds first (a bounded number or integer is an
 * exact grammar of its decimal texts: no exponent, no leading zeros, never
 * "-0", so bounds hold by construction), then JSON's own lexical rules,
 * string formats and object keys outside a list; and the two combinators
 * the schema files use to carry "this matches nothing" past the grammar
 * builder.
 */
#ifndef NANOVLLM_JSON_SCHEMA_SCALARS_H
#define NANOVLLM_JSON_SCHEMA_SCALARS_H

#include <jansson.h>
#include <stdbool.h>

#include "grammar.h"

/* An expression for the empty language. The builder never sees it: an
 * unsatisfiable part of a schema (false, an empty enum, min above max) is
 * dropped from alternatives, and makes a sequence around it unsatisfiable,
 * by js_alt and js_seq; only a whole schema that matches nothing is an error. */
#define JS_NOTHING (-2)

/* g_seq with JS_NOTHING anywhere giving JS_NOTHING (G_ERROR wins over both). */
GExpr js_seq(Grammar *g, const GExpr *items, int n);
GExpr js_seq2(Grammar *g, GExpr a, GExpr b);
/* g_alt without the JS_NOTHING items; JS_NOTHING when none is left. Reorders
 * items in place. */
GExpr js_alt(Grammar *g, GExpr *items, int n);
GExpr js_alt2(Grammar *g, GExpr a, GExpr b);

/* One side of a range: a JSON number (NULL for no bound), and whether the
 * bound itself is left out. */
typedef struct JsBound {
    const json_t *value;
    bool exclusive;
} JsBound;

/* Compares two JSON numbers by their decimal values (a real by its shortest
 * text that reads back as the same double). <0, 0 or >0. */
int js_number_compare(const json_t *a, const json_t *b);

/* Whether a JSON number has no fractional part (1 and 1.0 both do). */
bool js_number_is_integral(const json_t *v);

/* The compact JSON texts of the integers (integer_only) or of the numbers
 * between lower and upper, at least one of them present: "-"? digits, and
 * for numbers an optional fraction; JS_NOTHING when the range is empty. */
GExpr js_number_range(Grammar *g, bool integer_only, JsBound lower, JsBound upper);

/* JSON's own syntax as shared rules, made on first use (-1 until then):
 * one string character (raw or escaped), a string, a number, any value
 * (compact: no whitespace). Each returns the rule, or -1 after an error. */
typedef struct JsonRules {
    int character, string, number, value; /* character: what follows a backslash */
} JsonRules;
/* One JSON string character, raw or escaped (the escape is a shared rule). */
GExpr js_char_expr(Grammar *g, JsonRules *rules);
int js_string_rule(Grammar *g, JsonRules *rules);
int js_number_rule(Grammar *g, JsonRules *rules);
int js_value_rule(Grammar *g, JsonRules *rules);
/* -?(0|[1-9][0-9]*) without "-0". */
GExpr js_unbounded_integer(Grammar *g);

/* The text of a string format between the quotes (date, time, date-time,
 * uuid, email: a subset of what validators accept, never more), or
 * JS_NOTHING for a format not supported. */
GExpr js_format_grammar(Grammar *g, const char *format);

/* The text between the quotes of an object key that is none of the names
 * (UTF-8, any bytes), written without escapes so that no listed name can
 * come back in another spelling. */
GExpr js_key_not_listed(Grammar *g, const char *const *names, const size_t *lengths, int num_names);

#endif
