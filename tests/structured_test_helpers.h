/*
 * structured_test_helpers.h - shared by test_token_matcher.c and
 * test_grammar_compile.c: a seeded xorshift PRNG, random texts, match /
 * viable shortcuts over compiled_grammar_match, hand-picked grammars, and
 * random grammars built both as a Grammar and as plain productions (Cfg)
 * for an independent recognizer.
 */
#ifndef NANOVLLM_STRUCTURED_TEST_HELPERS_H
#define NANOVLLM_STRUCTURED_TEST_HELPERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "structured/grammar.h"

#define STRS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define EXPRS(...) ((GExpr[]){__VA_ARGS__}), (int)(sizeof((GExpr[]){__VA_ARGS__}) / sizeof(GExpr))

/* ---- small utilities ---- */

typedef struct Rng {
    uint64_t state;
} Rng;

Rng rng_seeded(uint64_t seed);
uint64_t rng_next(Rng *r);
uint32_t rng_below(Rng *r, uint32_t n);

/* bytes as a C-like literal for messages (static buffer, one at a time per slot). */
const char *escaped(const void *bytes, size_t len, int slot);
bool matches(const CompiledGrammar *cg, const char *text);
bool viable(const CompiledGrammar *cg, const void *text, size_t len);
/* A random string of 0..max_pieces pieces. */
size_t random_text(Rng *rng, const char *const *pieces, int max_pieces, char *buf, size_t cap);
int utf8_encode_cp(uint32_t c, uint8_t *b);

/* ---- grammars ---- */

typedef void (*BuildGrammar)(Grammar *g);

void build_json_small_ws(Grammar *g);
void build_json_any_ws(Grammar *g);
/* The code points of the bounded string grammar. */
extern const uint32_t bounded_string_set[8];
/* A JSON string literal of 0 to 5 characters from bounded_string_set. */
void build_bounded_string(Grammar *g);
void build_nested_rules(Grammar *g);
void build_nullable_rules(Grammar *g);
void build_ambiguous(Grammar *g);
extern const char *const choice_literals[];
void build_choice(Grammar *g);
/* Independent of the compiler: whether text is a prefix of (or equal to) a literal. */
bool choice_viable(const void *text, size_t len);
bool choice_matches(const void *text, size_t len);
CompiledGrammar *compile_built(BuildGrammar build, const char *what);

extern const char *const choice_pieces[];
extern const char *const choice_curated[];
extern const char *const random_grammar_pieces[];

/* ---- random grammars ---- */

/* Productions: lhs -> rhs; a symbol >= 0 is a nonterminal, -1 - b the byte b.
 * Nonterminals 0..num_rules-1 are the rules. */
#define CFG_MAX_PRODS 8192
#define CFG_MAX_SYMS 32768

typedef struct Cfg {
    int num_nts, num_prods, num_syms;
    int lhs[CFG_MAX_PRODS], begin[CFG_MAX_PRODS], len[CFG_MAX_PRODS];
    int syms[CFG_MAX_SYMS];
    bool usable[CFG_MAX_PRODS]; /* every symbol can derive a string */
    bool *nullable, *productive;
    int start_prod; /* S' -> root */
} Cfg;

/* Grammar seed in both forms; NULL-free: the Cfg is the caller's to cfg_free. */
Grammar *random_grammar(uint64_t seed, Cfg *c);
void cfg_free(Cfg *c);

#endif
