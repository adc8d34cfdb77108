/*
 * gbnf.h - grammars written in GBNF (llama.cpp's EBNF dialect) into a
 * Grammar, for vLLM's guided_grammar / structured_outputs.grammar.
 *
 * The dialect: rules `name ::= alternatives` (names of letters, digits, -
 * and _), the start rule is `root`; literals "..." with \n \t \r \\ \"
 * \xHH \uHHHH \UHHHHHHHH escapes; character classes [...] with ranges,
 * negation [^...] and the same escapes; the dot (any character); groups
 * ( ... ); alternation |; postfix * + ? {m} {m,} {m,n}; comments from # to
 * the end of the line; a rule may continue over several lines. Undefined
 * rules, syntax errors and left recursion are errors with the line number.
 *
 * Hand-written: no packaged C library parses GBNF.
 */
#ifndef NANOVLLM_GBNF_H
#define NANOVLLM_GBNF_H

#include <stddef.h>

#include "grammar.h"

/* Defines the text's rules in g and sets the root to `root`. Returns 0, or
 * -1 with grammar_error(g) ("grammar line N: ..."). */
int gbnf_to_grammar(Grammar *g, const char *text, size_t len);

#endif
