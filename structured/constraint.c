/*
 * constraint.c - constraints compiled from their text, reference counted,
 * and an LRU cache of them keyed by (kind or builder, text) within a byte
 * budget.
 */
#include "constraint.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gbnf.h"
#include "json_schema.h"
#include "regex.h"

#define MAX_CHOICES 10000

struct Constraint {
    int refs; /* atomic */
    ConstraintKind kind;
    const ConstraintBuilder *builder; /* CONSTRAINT_BUILT's */
    TokenGrammar *tg;
    double compile_ms;
    /* cache bookkeeping (under the cache's lock) */
    char *key;
    size_t key_len, bytes;
    struct Constraint *prev, *next;
};

struct ConstraintCache {
    const TokenVocab *v;
    size_t budget, used;
    pthread_mutex_t lock;
    Constraint *head, *tail; /* most recently used first */
};

const char *constraint_kind_name(ConstraintKind kind) {
    switch (kind) {
    case CONSTRAINT_JSON_SCHEMA: return "json";
    case CONSTRAINT_JSON_OBJECT: return "json_object";
    case CONSTRAINT_REGEX: return "regex";
    case CONSTRAINT_CHOICE: return "choice";
    case CONSTRAINT_GRAMMAR: return "grammar";
    case CONSTRAINT_BUILT: return "built";
    }
    return "?";
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int build_choice(Grammar *g, const char *text, size_t len, Error *err) {
    json_error_t jerr;
    json_t *list = json_loadb(text, len, 0, &jerr);
    int rc = -1;
    if (!json_is_array(list) || json_array_size(list) == 0) {
        error_set_kind(err, ERROR_INVALID, "choice: expected a non-empty list of strings");
        goto out;
    }
    if (json_array_size(list) > MAX_CHOICES) {
        error_set_kind(err, ERROR_INVALID, "choice: at most %d choices", MAX_CHOICES);
        goto out;
    }
    size_t n = json_array_size(list);
    GExpr *alts = malloc(n * sizeof *alts);
    if (!alts) {
        error_set(err, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(list, i);
        if (!json_is_string(s)) {
            free(alts);
            error_set_kind(err, ERROR_INVALID, "choice: entry %zu is not a string", i);
            goto out;
        }
        alts[i] = g_bytes(g, json_string_value(s), json_string_length(s));
    }
    int root = grammar_rule(g, "root");
    grammar_define(g, root, g_alt(g, alts, (int)n));
    free(alts);
    rc = 0;
out:
    json_decref(list);
    return rc;
}

static int build_grammar(Grammar *g, ConstraintKind kind, const ConstraintBuilder *builder, const char *text,
                         size_t len, Error *err) {
    switch (kind) {
    case CONSTRAINT_JSON_OBJECT:
    case CONSTRAINT_JSON_SCHEMA: {
        json_error_t jerr;
        json_t *schema = kind == CONSTRAINT_JSON_OBJECT ? json_pack("{s:s}", "type", "object")
                                                        : json_loadb(text, len, JSON_DECODE_ANY, &jerr);
        if (!schema)
            return error_set_kind(err, ERROR_INVALID, "json schema: not valid JSON (%s)", jerr.text);
        int rc = json_schema_to_grammar(g, schema);
        json_decref(schema);
        return rc;
    }
    case CONSTRAINT_REGEX: {
        int root = grammar_rule(g, "root");
        return grammar_define(g, root, regex_to_grammar(g, text, len, REGEX_FULL_MATCH, G_UTF8));
    }
    case CONSTRAINT_CHOICE: return build_choice(g, text, len, err);
    case CONSTRAINT_GRAMMAR: return gbnf_to_grammar(g, text, len);
    case CONSTRAINT_BUILT:
        if (!builder) return error_set(err, "a built constraint needs its builder");
        return builder->build(g, text, len, err);
    }
    return error_set(err, "unknown constraint kind %d", (int)kind);
}

static Constraint *compile(ConstraintKind kind, const ConstraintBuilder *builder, const char *text, size_t len,
                           const TokenVocab *v, Error *err) {
    double start = now_ms();
    Grammar *g = grammar_new();
    Constraint *c = calloc(1, sizeof *c);
    TokenMatcher *probe = NULL;
    uint32_t *mask = NULL;
    if (!g || !c) {
        error_set(err, "out of memory");
        goto fail;
    }
    Error build_err = {"", ERROR_INVALID};
    if (build_grammar(g, kind, builder, text, len, &build_err) < 0 || grammar_error(g)) {
        if (grammar_error(g)) error_set_kind(err, ERROR_INVALID, "%s", grammar_error(g));
        else *err = build_err;
        goto fail;
    }
    CompiledGrammar *cg = grammar_compile(g, err);
    if (!cg) goto fail;
    if (!(c->tg = token_grammar_new(cg, v, err))) goto fail;
    /* A constraint no token can start is refused now, not after a prefill. */
    int words = token_mask_words(token_vocab_size(v));
    if (!(mask = malloc((size_t)words * sizeof *mask))) {
        error_set(err, "out of memory");
        goto fail;
    }
    int32_t no_end = -1;
    if (!(probe = token_matcher_new(c->tg, err)) || token_matcher_fill_mask(probe, mask, &no_end, 0, err) < 0)
        goto fail;
    bool any = token_matcher_can_end(probe);
    for (int i = 0; i < words && !any; i++) any = mask[i] != 0;
    if (!any) {
        error_set_kind(err, ERROR_INVALID, "%s: no output can satisfy the constraint with this model's vocabulary",
                       builder ? builder->name : constraint_kind_name(kind));
        goto fail;
    }
    token_matcher_free(probe);
    free(mask);
    grammar_free(g);
    c->refs = 1;
    c->kind = kind;
    c->builder = builder;
    c->compile_ms = now_ms() - start;
    return c;
fail:
    token_matcher_free(probe);
    free(mask);
    grammar_free(g);
    if (c) token_grammar_free(c->tg);
    free(c);
    return NULL;
}

Constraint *constraint_compile(ConstraintKind kind, const char *text, size_t len, const TokenVocab *v, Error *err) {
    return compile(kind, NULL, text, len, v, err);
}

Constraint *constraint_ref(Constraint *c) {
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
    return c;
}

void constraint_unref(Constraint *c) {
    if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    token_grammar_free(c->tg);
    free(c->key);
    free(c);
}

const TokenGrammar *constraint_grammar(const Constraint *c) { return c->tg; }
const char *constraint_name(const Constraint *c) {
    return c->builder ? c->builder->name : constraint_kind_name(c->kind);
}
double constraint_compile_ms(const Constraint *c) { return c->compile_ms; }

/* ---- cache ------------------------------------------------------------------ */

ConstraintCache *constraint_cache_new(const TokenVocab *v, size_t budget_bytes, Error *err) {
    ConstraintCache *cache = calloc(1, sizeof *cache);
    if (!cache) {
        error_set(err, "out of memory");
        return NULL;
    }
    cache->v = v;
    cache->budget = budget_bytes;
    pthread_mutex_init(&cache->lock, NULL);
    return cache;
}

void constraint_cache_free(ConstraintCache *cache) {
    if (!cache) return;
    for (Constraint *c = cache->head, *next; c; c = next) {
        next = c->next;
        constraint_unref(c);
    }
    pthread_mutex_destroy(&cache->lock);
    free(cache);
}

static void lru_unlink(ConstraintCache *cache, Constraint *c) {
    if (c->prev) c->prev->next = c->next; else cache->head = c->next;
    if (c->next) c->next->prev = c->prev; else cache->tail = c->prev;
    c->prev = c->next = NULL;
}

static void lru_push_front(ConstraintCache *cache, Constraint *c) {
    c->prev = NULL;
    c->next = cache->head;
    if (cache->head) cache->head->prev = c; else cache->tail = c;
    cache->head = c;
}

/* The key: the kind's byte, the builder's address (CONSTRAINT_BUILT), then
 * the text. */
static char *make_key(ConstraintKind kind, const ConstraintBuilder *builder, const char *text, size_t len,
                      size_t *key_len) {
    size_t head = 1 + (builder ? sizeof builder : 0);
    char *key = malloc(head + len);
    if (!key) return NULL;
    key[0] = (char)('0' + kind);
    if (builder) memcpy(key + 1, &builder, sizeof builder);
    if (len) memcpy(key + head, text, len);
    *key_len = head + len;
    return key;
}

static Constraint *cache_get(ConstraintCache *cache, ConstraintKind kind, const ConstraintBuilder *builder,
                             const char *text, size_t len, bool *hit, Error *err) {
    size_t key_len;
    char *key = make_key(kind, builder, text, len, &key_len);
    if (hit) *hit = false;
    if (!key) {
        error_set(err, "out of memory");
        return NULL;
    }
    pthread_mutex_lock(&cache->lock);
    for (Constraint *c = cache->head; c; c = c->next) {
        if (c->key_len == key_len && memcmp(c->key, key, key_len) == 0) {
            lru_unlink(cache, c);
            lru_push_front(cache, c);
            constraint_ref(c);
            pthread_mutex_unlock(&cache->lock);
            free(key);
            if (hit) *hit = true;
            return c;
        }
    }
    pthread_mutex_unlock(&cache->lock);
    /* Compiled outside the lock: two requests with the same new constraint
     * may both compile it; the second copy simply replaces nothing. */
    Constraint *c = compile(kind, builder, text, len, cache->v, err);
    if (!c) {
        free(key);
        return NULL;
    }
    c->bytes = token_grammar_bytes(c->tg) + key_len;
    if (c->bytes > cache->budget) {
        free(key);
        return c;
    }
    c->key = key;
    c->key_len = key_len;
    pthread_mutex_lock(&cache->lock);
    lru_push_front(cache, constraint_ref(c));
    cache->used += c->bytes;
    while (cache->used > cache->budget && cache->tail) {
        Constraint *old = cache->tail;
        lru_unlink(cache, old);
        cache->used -= old->bytes;
        constraint_unref(old);
    }
    pthread_mutex_unlock(&cache->lock);
    return c;
}

Constraint *constraint_cache_get(ConstraintCache *cache, ConstraintKind kind, const char *text, size_t len,
                                 bool *hit, Error *err) {
    return cache_get(cache, kind, NULL, text, len, hit, err);
}

Constraint *constraint_cache_get_built(ConstraintCache *cache, const ConstraintBuilder *builder, const char *text,
                                       size_t len, bool *hit, Error *err) {
    return cache_get(cache, CONSTRAINT_BUILT, builder, text, len, hit, err);
}
