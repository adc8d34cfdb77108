/*
 * grammar.h - the one form every output constraint is compiled into: a
 * context-free grammar over bytes.
 *
 * JSON Schema (json_schema.h), regular expressions (regex.h), GBNF text
 * (gbnf.h) and lists of choices all build a Grammar through this builder:
 * named rules whose bodies are expressions (byte strings, sets of Unicode
 * code points, sequences, alternatives, bounded or unbounded repetition,
 * references to rules, recursion included). grammar_compile() turns each
 * rule into a deterministic automaton over bytes whose edges may also call
 * another rule, so a matcher is a stack of (rule, state) frames
 * (token_matcher.h). Left recursion is refused (it has no finite stack);
 * sizes are bounded so a hostile input is an error, never an explosion.
 *
 * Hand-written: no packaged C library compiles grammars into token masks.
 *
 * Builder errors are sticky: the first failure (a limit, an undefined rule)
 * is kept, every later call returns G_ERROR, and grammar_compile() reports
 * it. Callers can chain calls without checking each one.
 */
#ifndef NANOVLLM_GRAMMAR_H
#define NANOVLLM_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct Grammar Grammar;
typedef int32_t GExpr; /* an expression of one Grammar; G_ERROR after a failure */
#define G_ERROR (-1)
#define G_UNBOUNDED (-1) /* max of g_repeat */

/* How g_codepoints writes a character: as its UTF-8 bytes, or as it must
 * appear inside a JSON string literal (", \ and control characters
 * escaped as \" \\ \n \t \r \b \f or \u00XX; everything else as UTF-8). */
typedef enum GEncoding { G_UTF8, G_JSON_STRING } GEncoding;

Grammar *grammar_new(void); /* NULL when out of memory */
void grammar_free(Grammar *g);

/* The first error, or NULL. */
const char *grammar_error(const Grammar *g);
/* Puts "prefix: " before the recorded error (no-op without one), so an
 * embedding front end can say where a nested part failed. */
void grammar_error_prefix(Grammar *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records an error (the first one wins) with the given kind; returns G_ERROR. */
GExpr grammar_fail(Grammar *g, ErrorKind kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A rule by name, created (undefined) on first use. Names are any bytes;
 * builders that generate rules pick unique names (grammar_fresh_rule). */
int grammar_rule(Grammar *g, const char *name);
/* A new rule named after prefix, never equal to an existing name. */
int grammar_fresh_rule(Grammar *g, const char *prefix);
/* Whether the rule has a body yet. */
bool grammar_rule_defined(const Grammar *g, int rule);
/* Gives the rule its body; defining a rule twice is an error. */
int grammar_define(Grammar *g, int rule, GExpr body);
/* Which rule a match starts with (default: the first rule created). */
void grammar_set_root(Grammar *g, int rule);
int grammar_root(const Grammar *g); /* -1 before any rule exists */

GExpr g_empty(Grammar *g);                                /* matches "" */
GExpr g_bytes(Grammar *g, const void *bytes, size_t len); /* exactly these bytes */
GExpr g_str(Grammar *g, const char *s);                   /* g_bytes of a C string */
GExpr g_byte_range(Grammar *g, uint8_t lo, uint8_t hi);   /* one byte in [lo, hi] */
/* One character from a set of code points: ranges[2i] .. ranges[2i+1]
 * inclusive, any order, overlaps allowed; surrogates (D800-DFFF) and values
 * above 10FFFF are left out. An empty set matches nothing. */
GExpr g_codepoints(Grammar *g, const uint32_t *ranges, int num_ranges, GEncoding enc);
/* Everything but the set, among U+0000..U+10FFFF. */
GExpr g_codepoints_not(Grammar *g, const uint32_t *ranges, int num_ranges, GEncoding enc);
GExpr g_seq(Grammar *g, const GExpr *items, int n); /* n == 0: empty */
GExpr g_alt(Grammar *g, const GExpr *items, int n); /* n == 0: nothing */
GExpr g_seq2(Grammar *g, GExpr a, GExpr b);
GExpr g_alt2(Grammar *g, GExpr a, GExpr b);
/* e repeated min..max times (max G_UNBOUNDED: no limit). */
GExpr g_repeat(Grammar *g, GExpr e, int min, int max);
GExpr g_optional(Grammar *g, GExpr e); /* g_repeat(e, 0, 1) */
GExpr g_ref(Grammar *g, int rule);

/* ---- compiled form -------------------------------------------------------- */

typedef struct CompiledGrammar CompiledGrammar;

/* Checks (undefined rules, left recursion, rules matching nothing) and
 * builds the automata; NULL with err (ERROR_INVALID for a grammar that is
 * wrong or too large). The Grammar may be freed afterwards. */
CompiledGrammar *grammar_compile(const Grammar *g, Error *err);
void compiled_grammar_free(CompiledGrammar *cg);

int compiled_grammar_num_states(const CompiledGrammar *cg);

/* For tests and tools: 1 when the whole text is in the language, 0 when
 * it is not; *viable_prefix (if not NULL) tells whether the text can still
 * be extended into a match. */
int compiled_grammar_match(const CompiledGrammar *cg, const void *text, size_t len, bool *viable_prefix);

#endif
