/*
 * json_schema_internal.h - internal to json_schema.c (the grammar-emitting
 * walk) and json_schema_flatten.c (one flat form per schema object): the
 * compiler state both work on, the limits that bound a hostile schema, the
 * type and keyword vocabulary, and the functions one file calls in the other.
 */
#ifndef NANOVLLM_JSON_SCHEMA_INTERNAL_H
#define NANOVLLM_JSON_SCHEMA_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "grammar.h"
#include "json_schema_scalars.h"

#define MAX_DEPTH 64           /* schema objects nested, and allOf / $ref chains */
#define MAX_WORK 2000000       /* keywords, properties and values handled, allOf and anyOf expanded */
#define MAX_ENUM_VALUES 10000
#define MAX_ALTERNATIVES 1024  /* anyOf branches, after allOf distributes them too */
#define MAX_REFS 1024          /* distinct $ref targets, one rule each */
#define MAX_PROPERTIES 4096    /* properties, and required names, of one object */
#define MAX_TUPLE_ITEMS 128    /* prefixItems: the expression nests once per item */
#define MAX_EXCLUDED_NAME 256  /* bytes of a listed name kept out of additional keys */
#define PATH_CAPACITY 256

enum {
    T_NULL = 1, T_BOOLEAN = 2, T_INTEGER = 4, T_NUMBER = 8, T_STRING = 16, T_ARRAY = 32, T_OBJECT = 64,
    T_ANY = 127,
};

/* What a keyword constrains (KW_ANNOTATION: nothing; KW_GENERAL: any type). */
enum { KW_ANNOTATION, KW_GENERAL, KW_OBJECT, KW_ARRAY, KW_STRING, KW_NUMBER };

typedef struct RefRule {
    const json_t *target;
    int rule;
    char *pointer; /* for error messages about the target */
} RefRule;

typedef struct SchemaCompiler {
    Grammar *g;
    const json_t *root;
    int depth;
    long work;
    char path[PATH_CAPACITY]; /* JSON pointer of the schema being compiled */
    size_t path_len;
    JsonRules json_rules;
    RefRule *refs;
    int num_refs, refs_capacity;
    char *nothing_reason; /* why the schema being compiled matches nothing (malloc'ed), or NULL */
} SchemaCompiler;

/* ---- json_schema.c ---- */

/* An ERROR_INVALID naming the path of the schema being compiled; G_ERROR. */
GExpr schema_fail(SchemaCompiler *sc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An ERROR_INTERNAL; G_ERROR. */
GExpr schema_out_of_memory(SchemaCompiler *sc);

/* ---- json_schema_flatten.c ---- */

/* The KW_* kind of a keyword, or -1 for one not supported. */
int schema_keyword_kind(const char *name);
/* The types a "type" value names (checked already), integer included in number. */
int schema_type_mask(const json_t *type);
/* Counts work against MAX_WORK; true (after an error) once it is over. */
bool schema_over_budget(SchemaCompiler *sc, size_t cost);
/* The schema a "#..." $ref names, or NULL after an error. */
json_t *schema_resolve_ref(SchemaCompiler *sc, const json_t *ref);
/* "a and b" for two flattened schemas; a new reference, json_false() when
 * they exclude each other, NULL after an error. */
json_t *schema_merge_pair(SchemaCompiler *sc, json_t *a, json_t *b);
/* The schema as one object without allOf or $ref (both intersected into it),
 * normalized; json_false() when it matches nothing; NULL after an error. */
json_t *schema_flatten(SchemaCompiler *sc, json_t *schema, int chain_depth);

#endif
