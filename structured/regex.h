/*
 * regex.h - regular expressions into grammar expressions (grammar.h).
 *
 * Two users: vLLM's guided_regex / structured_outputs.regex (the whole
 * output must match, as outlines and xgrammar read it) and JSON Schema's
 * "pattern" (ECMA-262 semantics: a match anywhere in the string unless
 * anchored with ^ and $, and the string is written JSON-escaped).
 *
 * The syntax is the common subset of ECMAScript and Python: literals,
 * escapes (\d \D \w \W \s \S \n \t \r \f \v \0 \xHH \uHHHH \u{H..}
 * and escaped punctuation), classes [...] with ranges and negation, the dot
 * (any character but a line terminator: \n \r U+2028 U+2029, as ECMAScript), groups (...) (?:...) (?<name>...) (?P<name>...),
 * alternation, quantifiers * + ? {m} {m,} {m,n} and their lazy forms
 * (the same language), ^ at the start and $ at the end. Anything else
 * (backreferences, lookaround, \b, anchors in the middle, flags) is an
 * ERROR_INVALID naming the construct: a pattern we cannot honour is refused,
 * never loosened. Characters are Unicode code points; the automaton is over
 * their UTF-8 (or JSON-escaped) bytes.
 *
 * Hand-written: PCRE2 matches strings but cannot enumerate a language.
 */
#ifndef NANOVLLM_REGEX_H
#define NANOVLLM_REGEX_H

#include <stdbool.h>
#include <stddef.h>

#include "grammar.h"

typedef enum RegexMode {
    REGEX_FULL_MATCH, /* the text is exactly a match (guided_regex) */
    REGEX_SEARCH,     /* a match anywhere in the text, unless ^ / $ anchor it (JSON Schema pattern) */
} RegexMode;

/* The pattern's language as an expression of g (characters written with
 * enc), or G_ERROR with grammar_error(g) saying why ("regex: ..."). */
GExpr regex_to_grammar(Grammar *g, const char *pattern, size_t len, RegexMode mode, GEncoding enc);

#endif
