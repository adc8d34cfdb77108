/*
 * constraint.h - what a request asks its output to match, compiled once and
 * shared: the front door of structured/.
 *
 * A constraint is one of: a JSON Schema, any JSON object, a regular
 * expression, a list of choices, a GBNF grammar, or a text in a language
 * structured/ does not know, whose grammar a builder from a room above
 * writes (chat's forced tool calls). constraint_cache_get()
 * compiles it over the model's vocabulary (grammar, automata, token
 * masks) or returns the copy compiled earlier for the same text; compiled
 * constraints are reference counted, immutable and shared by every
 * sequence using them, and the cache keeps the most recently used ones
 * within a byte budget. Compiling can take milliseconds to seconds, so the
 * server calls this from its worker pool, never from the event loop or the
 * engine thread; a constraint too large or too slow to compile is an
 * ERROR_INVALID, as is one that no token sequence can satisfy.
 */
#ifndef NANOVLLM_CONSTRAINT_H
#define NANOVLLM_CONSTRAINT_H

#include <stddef.h>

#include "grammar.h"
#include "token_matcher.h"

typedef enum ConstraintKind {
    CONSTRAINT_JSON_SCHEMA, /* text: the schema, JSON */
    CONSTRAINT_JSON_OBJECT, /* text unused: any JSON object */
    CONSTRAINT_REGEX,       /* text: the pattern; the whole output matches it */
    CONSTRAINT_CHOICE,      /* text: a JSON array of strings; the output is one of them */
    CONSTRAINT_GRAMMAR,     /* text: GBNF */
    CONSTRAINT_BUILT,       /* text: what a ConstraintBuilder reads (constraint_cache_get_built) */
} ConstraintKind;

/* A constraint's grammar written by its caller from the text: build defines
 * the rules and sets the root, returning 0, or -1 with err (or
 * grammar_error(g)) saying why. name stands for the kind in messages and
 * logs ("tool_calls"). The cache keys on the builder's address, so it must
 * outlive the cache (a static const). */
typedef struct ConstraintBuilder {
    const char *name;
    int (*build)(Grammar *g, const char *text, size_t len, Error *err);
} ConstraintBuilder;

typedef struct Constraint Constraint;

const char *constraint_kind_name(ConstraintKind kind);

/* Compiles without a cache (tests, tools). */
Constraint *constraint_compile(ConstraintKind kind, const char *text, size_t len, const TokenVocab *v, Error *err);
Constraint *constraint_ref(Constraint *c);
void constraint_unref(Constraint *c); /* NULL is fine */
const TokenGrammar *constraint_grammar(const Constraint *c);
/* Its kind's name, or its builder's. */
const char *constraint_name(const Constraint *c);
double constraint_compile_ms(const Constraint *c); /* how long compiling took */

typedef struct ConstraintCache ConstraintCache;

/* Thread-safe. budget_bytes: compiled constraints kept (0: none kept). */
ConstraintCache *constraint_cache_new(const TokenVocab *v, size_t budget_bytes, Error *err);
void constraint_cache_free(ConstraintCache *cache);
/* A reference the caller releases with constraint_unref; *hit (if not NULL)
 * tells whether it came from the cache. */
Constraint *constraint_cache_get(ConstraintCache *cache, ConstraintKind kind, const char *text, size_t len,
                                 bool *hit, Error *err);
/* The same for a CONSTRAINT_BUILT constraint: builder writes its grammar. */
Constraint *constraint_cache_get_built(ConstraintCache *cache, const ConstraintBuilder *builder, const char *text,
                                       size_t len, bool *hit, Error *err);

#endif
