/*
 * test_token_matcher.c - token masks (structured/token_matcher.h)
 * against a brute-force oracle.
 *
 * The oracle: after the text P accepted so far, a token with bytes b is
 * allowed iff P+b is a viable prefix (compiled_grammar_match leaves viable
 * set: every compiled state can still complete, so viable means it can be
 * finished); an end id iff P is a whole match; empty and special tokens
 * never. Random walks (seeded xorshift) over synthetic vocabularies - multi
 * byte tokens, tokens across rule boundaries, pieces of UTF-8 characters,
 * empty entries, duplicates - for hand-picked and random grammars, and over
 * the real Qwen3 vocabulary, compare every bit of every mask with it, plus
 * can_end / done, refused tokens (the matcher unchanged after them) and the
 * end of the grammar; deep nesting runs the matcher through compaction. The
 * oracle's own base, compiled_grammar_match, is tested in
 * test_grammar_compile.c.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "structured/grammar.h"
#include "structured/token_matcher.h"
#include "text/tokenizer/tokenizer.h"
#include "structured_test_helpers.h"

/* ---- text buffers ---------------------------------------------------------- */

typedef struct Text {
    uint8_t *bytes;
    size_t len, cap;
} Text;

static void text_reserve(Text *t, size_t need) {
    if (need <= t->cap) return;
    size_t cap = t->cap ? t->cap : 64;
    while (cap < need) cap *= 2;
    t->bytes = realloc(t->bytes, cap);
    cr_assert(t->bytes);
    t->cap = cap;
}

static void text_append(Text *t, const void *bytes, size_t len) {
    text_reserve(t, t->len + len + 1);
    if (len) memcpy(t->bytes + t->len, bytes, len);
    t->len += len;
}

static void text_free(Text *t) {
    free(t->bytes);
    *t = (Text){0};
}

/* ---- vocabularies ---------------------------------------------------------------- */

/* A vocabulary as the oracle sees it. */
typedef struct OracleVocab {
    int size;
    const char **bytes;
    size_t *lens;
    bool *never;  /* special or missing: no bit, ever */
    bool *is_end; /* the end ids given to fill_mask */
    int32_t end_ids[4];
    int num_end_ids;
    char **owned; /* synthetic: the token strings */
} OracleVocab;

static void oracle_vocab_free(OracleVocab *v) {
    if (v->owned)
        for (int i = 0; i < v->size; i++) free(v->owned[i]);
    free(v->owned), free(v->bytes), free(v->lens), free(v->never), free(v->is_end);
    *v = (OracleVocab){0};
}

static void oracle_vocab_alloc(OracleVocab *v, int size) {
    *v = (OracleVocab){.size = size};
    v->bytes = calloc((size_t)size, sizeof *v->bytes);
    v->lens = calloc((size_t)size, sizeof *v->lens);
    v->never = calloc((size_t)size, sizeof *v->never);
    v->is_end = calloc((size_t)size, sizeof *v->is_end);
    v->owned = calloc((size_t)size, sizeof *v->owned);
    cr_assert(v->bytes && v->lens && v->never && v->is_end && v->owned);
}

static void set_token(OracleVocab *v, int id, const void *bytes, size_t len) {
    v->owned[id] = malloc(len + 1);
    cr_assert(v->owned[id]);
    if (len) memcpy(v->owned[id], bytes, len);
    v->bytes[id] = v->owned[id];
    v->lens[id] = len;
}

#define SYNTHETIC_VOCAB_SIZE 320

/* Ids 0 and size-1 are empty end ids; every 37th id is an empty entry that
 * never matches; then the curated tokens, every piece on its own, the first
 * curated tokens again (duplicates), and random tokens: 1 to 4 pieces
 * joined, a quarter of them cut to a random byte range (pieces of UTF-8
 * characters, odd boundaries). */
static void synthetic_vocab(OracleVocab *v, const char *const *pieces, const char *const *curated, uint64_t seed) {
    oracle_vocab_alloc(v, SYNTHETIC_VOCAB_SIZE);
    Rng rng = rng_seeded(seed);
    int num_pieces = 0, num_curated = 0;
    while (pieces[num_pieces]) num_pieces++;
    while (curated[num_curated]) num_curated++;
    int next_curated = 0, next_piece = 0, duplicates = 0;
    for (int id = 0; id < v->size; id++) {
        if (id == 0 || id == v->size - 1) {
            set_token(v, id, "", 0);
            v->is_end[id] = true;
            v->end_ids[v->num_end_ids++] = id;
        } else if (id % 37 == 0) {
            set_token(v, id, "", 0);
        } else if (next_curated < num_curated) {
            set_token(v, id, curated[next_curated], strlen(curated[next_curated]));
            next_curated++;
        } else if (next_piece < num_pieces) {
            set_token(v, id, pieces[next_piece], strlen(pieces[next_piece]));
            next_piece++;
        } else if (duplicates < 4 && duplicates < num_curated) {
            set_token(v, id, curated[duplicates], strlen(curated[duplicates]));
            duplicates++;
        } else {
            char buf[64];
            size_t len = 0;
            int n = 1 + (int)rng_below(&rng, 4);
            for (int k = 0; k < n; k++) {
                const char *p = pieces[rng_below(&rng, (uint32_t)num_pieces)];
                size_t pl = strlen(p);
                if (len + pl >= sizeof buf) break;
                memcpy(buf + len, p, pl);
                len += pl;
            }
            size_t from = 0, to = len;
            if (len > 1 && rng_below(&rng, 4) == 0) {
                from = rng_below(&rng, (uint32_t)len);
                to = from + 1 + rng_below(&rng, (uint32_t)(len - from));
            }
            set_token(v, id, buf + from, to - from);
        }
    }
    cr_assert_eq(next_curated, num_curated, "the vocabulary is too small for the curated tokens");
}

static TokenVocab *token_vocab_of(const OracleVocab *v) {
    Error err;
    TokenVocab *tv = token_vocab_from_strings(v->bytes, v->lens, v->size, &err);
    cr_assert(tv, "token_vocab_from_strings: %s", err.msg);
    cr_assert_eq(token_vocab_size(tv), v->size);
    return tv;
}

/* ---- the oracle ------------------------------------------------------------------- */

typedef struct Oracle {
    const CompiledGrammar *cg; /* compiled separately from the matcher's copy */
    const OracleVocab *v;
    bool (*independent_viable)(const void *text, size_t len); /* optional second opinion */
    Text scratch;
    int8_t *first_two; /* [65536 + 256]: viability of P + 1 or 2 bytes; -1 unknown */
    bool limits_end_walks; /* "too ambiguous" ends a walk instead of failing it */
} Oracle;

static bool oracle_extends(Oracle *o, const Text *prefix, const uint8_t *bytes, size_t len) {
    int8_t *cache = NULL;
    if (o->first_two && len <= 2) {
        cache = len == 1 ? &o->first_two[65536 + bytes[0]] : &o->first_two[bytes[0] << 8 | bytes[1]];
        if (*cache >= 0) return *cache;
        /* Viability is closed under prefixes: a dead first byte kills the token. */
        if (len == 2 && !oracle_extends(o, prefix, bytes, 1)) {
            *cache = 0;
            return false;
        }
    }
    o->scratch.len = 0;
    text_append(&o->scratch, prefix->bytes, prefix->len);
    text_append(&o->scratch, bytes, len);
    bool result = viable(o->cg, o->scratch.bytes, o->scratch.len);
    if (cache) *cache = result;
    if (o->independent_viable)
        cr_assert_eq(result, o->independent_viable(o->scratch.bytes, o->scratch.len),
                     "the oracle and the hand-written check disagree on \"%s\"",
                     escaped(o->scratch.bytes, o->scratch.len, 0));
    return result;
}

/* Whether token id's bit must be set after prefix; long tokens (len > 2) go
 * through the byte cache for their first two bytes first. */
static bool oracle_allows(Oracle *o, const Text *prefix, bool prefix_complete, int32_t id) {
    const OracleVocab *v = o->v;
    if (v->is_end[id]) return prefix_complete;
    if (v->never[id] || v->lens[id] == 0) return false;
    const uint8_t *b = (const uint8_t *)v->bytes[id];
    size_t len = v->lens[id];
    if (o->first_two && len > 2 && !oracle_extends(o, prefix, b, 2)) return false;
    return oracle_extends(o, prefix, b, len);
}

static void oracle_reset_cache(Oracle *o) {
    if (o->first_two) memset(o->first_two, -1, 65536 + 256);
}

/* Every bit of mask against the oracle; the padding bits past the
 * vocabulary must be clear. */
static void check_mask(Oracle *o, const Text *prefix, const uint32_t *mask, const char *what, int step) {
    const OracleVocab *v = o->v;
    bool complete = compiled_grammar_match(o->cg, prefix->bytes, prefix->len, NULL) == 1;
    int mismatches = 0;
    for (int32_t id = 0; id < v->size; id++) {
        bool got = mask[id >> 5] >> (id & 31) & 1;
        bool want = oracle_allows(o, prefix, complete, id);
        if (got != want && ++mismatches <= 6)
            cr_expect(false, "%s, step %d, after \"%s\": token %d \"%s\"%s is %s by the mask but %s by the oracle", what,
                      step, escaped(prefix->bytes, prefix->len, 1), id, escaped(v->bytes[id], v->lens[id], 2),
                      v->is_end[id] ? " (end id)" : v->never[id] ? " (special)" : "", got ? "allowed" : "refused",
                      want ? "allowed" : "refused");
    }
    int words = token_mask_words(v->size);
    if (v->size % 32)
        cr_expect_eq(mask[words - 1] >> (v->size % 32), 0, "%s, step %d: mask bits set past the vocabulary", what, step);
    cr_assert_eq(mismatches, 0, "%s, step %d: %d mask bits differ from the oracle", what, step, mismatches);
}

/* can_end and done against the oracle: done iff no byte extends the text. */
static void check_end_state(Oracle *o, const TokenMatcher *m, const Text *prefix, const char *what, int step) {
    bool complete = compiled_grammar_match(o->cg, prefix->bytes, prefix->len, NULL) == 1;
    cr_assert_eq(token_matcher_can_end(m), complete, "%s, step %d, after \"%s\": can_end %d, oracle %d", what, step,
                 escaped(prefix->bytes, prefix->len, 0), token_matcher_can_end(m), complete);
    bool extendable = false;
    for (int c = 0; c < 256 && !extendable; c++) {
        uint8_t byte = (uint8_t)c;
        o->scratch.len = 0;
        text_append(&o->scratch, prefix->bytes, prefix->len);
        text_append(&o->scratch, &byte, 1);
        extendable = viable(o->cg, o->scratch.bytes, o->scratch.len);
    }
    cr_assert_eq(token_matcher_done(m), !extendable, "%s, step %d, after \"%s\": done %d, while %s", what, step,
                 escaped(prefix->bytes, prefix->len, 0), token_matcher_done(m),
                 extendable ? "some byte extends the text" : "no byte extends the text");
}

/* ---- random walks ------------------------------------------------------------------ */

typedef struct WalkCase {
    const char *name;
    BuildGrammar build;
    const char *const *pieces;  /* the alphabet, in units that random tokens join */
    const char *const *curated; /* tokens worth having: across rules, partial UTF-8 */
    bool (*independent_viable)(const void *text, size_t len);
} WalkCase;

typedef struct Compiled {
    CompiledGrammar *oracle_cg;
    TokenGrammar *tg;
} Compiled;

/* The grammar compiled twice: the matcher's copy goes to token_grammar_new. */
static Compiled compile_for_vocab(BuildGrammar build, const char *name, const TokenVocab *tv) {
    Grammar *g = grammar_new();
    cr_assert(g);
    build(g);
    cr_assert_null(grammar_error(g), "%s: %s", name, grammar_error(g));
    Error err;
    Compiled c = {grammar_compile(g, &err), NULL};
    cr_assert(c.oracle_cg, "%s does not compile: %s", name, err.msg);
    CompiledGrammar *for_tokens = grammar_compile(g, &err);
    cr_assert(for_tokens, "%s does not compile twice: %s", name, err.msg);
    grammar_free(g);
    c.tg = token_grammar_new(for_tokens, tv, &err);
    cr_assert(c.tg, "%s: token_grammar_new: %s", name, err.msg);
    cr_assert_gt(token_grammar_bytes(c.tg), 0);
    return c;
}

static void compiled_free(Compiled *c) {
    token_grammar_free(c->tg);
    compiled_grammar_free(c->oracle_cg);
}

static void fill_mask(TokenMatcher *m, const OracleVocab *v, uint32_t *mask) {
    Error err;
    int rc = token_matcher_fill_mask(m, mask, v->end_ids, v->num_end_ids, &err);
    cr_assert_eq(rc, 0, "fill_mask: %s", err.msg);
}

/* A wrong token, the wrong end, empty and out-of-range ids are refused
 * with a message, and the matcher is as it was: the same mask again. */
static void check_refusals(TokenMatcher *m, const OracleVocab *v, const uint32_t *mask, const int32_t *refused,
                           int num_refused, Rng *rng, const char *what, int step) {
    int words = token_mask_words(v->size);
    uint32_t *again = malloc((size_t)words * sizeof *again);
    cr_assert(again);
    Error err;
    int32_t tries[6];
    int num_tries = 0;
    for (int k = 0; k < 3 && num_refused; k++) tries[num_tries++] = refused[rng_below(rng, (uint32_t)num_refused)];
    tries[num_tries++] = -1;
    tries[num_tries++] = v->size;
    for (int32_t id = 1; id < v->size; id++)
        if (v->lens[id] == 0 && !v->is_end[id]) {
            tries[num_tries++] = id; /* an empty entry */
            break;
        }
    for (int k = 0; k < num_tries; k++) {
        err.msg[0] = 0;
        int32_t id = tries[k];
        cr_assert_eq(token_matcher_accept(m, id, false, &err), -1, "%s, step %d: refused token %d was accepted", what,
                     step, id);
        cr_assert_neq(err.msg[0], 0, "%s, step %d: refusing token %d left no message", what, step, id);
        fill_mask(m, v, again);
        cr_assert(memcmp(again, mask, (size_t)words * sizeof *mask) == 0,
                  "%s, step %d: refusing token %d changed the mask", what, step, id);
    }
    if (!token_matcher_can_end(m)) {
        err.msg[0] = 0;
        cr_assert_eq(token_matcher_accept(m, v->end_ids[0], true, &err), -1, "%s, step %d: an early end was accepted",
                     what, step);
        cr_assert_neq(err.msg[0], 0);
        fill_mask(m, v, again);
        cr_assert(memcmp(again, mask, (size_t)words * sizeof *mask) == 0, "%s, step %d: an early end changed the mask",
                  what, step);
    }
    free(again);
}

/* After the end id: only end ids, done, and a token that was allowed just
 * before (text_token, if >= 0) refused. */
static void check_after_end(TokenMatcher *m, const OracleVocab *v, uint32_t *mask, int32_t text_token,
                            const char *what) {
    fill_mask(m, v, mask);
    for (int32_t id = 0; id < v->size; id++)
        cr_assert_eq(mask[id >> 5] >> (id & 31) & 1, v->is_end[id], "%s: after the end, token %d has bit %d", what, id,
                     mask[id >> 5] >> (id & 31) & 1);
    cr_assert(token_matcher_done(m));
    cr_assert(token_matcher_can_end(m));
    Error err;
    if (text_token >= 0)
        cr_assert_eq(token_matcher_accept(m, text_token, false, &err), -1, "%s: a token after the end", what);
}

/* One random walk of up to max_steps tokens (and, when max_text is not 0,
 * until the text reaches max_text bytes); every mask checked in full.
 * Returns the number of masks checked. */
static int random_walk(Oracle *o, const TokenGrammar *tg, uint64_t seed, int max_steps, size_t max_text,
                       const char *what) {
    const OracleVocab *v = o->v;
    Rng rng = rng_seeded(seed);
    Error err;
    TokenMatcher *m = token_matcher_new(tg, &err);
    cr_assert(m, "token_matcher_new: %s", err.msg);
    int words = token_mask_words(v->size);
    uint32_t *mask = malloc((size_t)words * sizeof *mask);
    int32_t *allowed = malloc((size_t)v->size * sizeof *allowed), *refused = malloc((size_t)v->size * sizeof *refused);
    cr_assert(mask && allowed && refused);
    Text text = {0};
    text_reserve(&text, 1);
    char name[160];
    snprintf(name, sizeof name, "%s (seed %llu)", what, (unsigned long long)seed);
    int masks = 0;
    for (int step = 0; step < max_steps && (!max_text || text.len < max_text); step++) {
        oracle_reset_cache(o);
        if (token_matcher_fill_mask(m, mask, v->end_ids, v->num_end_ids, &err) < 0) {
            cr_assert(o->limits_end_walks && err.kind == ERROR_INVALID && strstr(err.msg, "too ambiguous"),
                      "%s, step %d: fill_mask: %s", name, step, err.msg);
            break;
        }
        check_mask(o, &text, mask, name, step);
        masks++;
        check_end_state(o, m, &text, name, step);
        int num_allowed = 0, num_refused = 0;
        bool end_allowed = false;
        for (int32_t id = 0; id < v->size; id++) {
            bool bit = mask[id >> 5] >> (id & 31) & 1;
            if (v->is_end[id]) end_allowed |= bit;
            else if (bit) allowed[num_allowed++] = id;
            else if (v->lens[id] && !v->never[id]) refused[num_refused++] = id;
        }
        if (step % 3 == 0) check_refusals(m, v, mask, refused, num_refused, &rng, name, step);
        if (end_allowed && (num_allowed == 0 || rng_below(&rng, 10) == 0)) {
            cr_assert_eq(token_matcher_accept(m, v->end_ids[rng_below(&rng, (uint32_t)v->num_end_ids)], true, &err), 0,
                         "%s, step %d: the end was refused: %s", name, step, err.msg);
            check_after_end(m, v, mask, num_allowed ? allowed[0] : -1, name);
            break;
        }
        if (num_allowed == 0) break; /* the vocabulary lacks what the grammar needs next */
        int32_t id = allowed[rng_below(&rng, (uint32_t)num_allowed)];
        if (token_matcher_accept(m, id, false, &err) < 0) {
            cr_assert(o->limits_end_walks && err.kind == ERROR_INVALID && strstr(err.msg, "too ambiguous"),
                      "%s, step %d: allowed token %d \"%s\" refused: %s", name, step, id,
                      escaped(v->bytes[id], v->lens[id], 0), err.msg);
            break;
        }
        text_append(&text, v->bytes[id], v->lens[id]);
    }
    text_free(&text);
    free(mask), free(allowed), free(refused);
    token_matcher_free(m);
    return masks;
}

static void run_walk_case(const WalkCase *wc, int walks, int max_steps) {
    OracleVocab v;
    synthetic_vocab(&v, wc->pieces, wc->curated, 0xC0FFEE + (uint64_t)strlen(wc->name));
    TokenVocab *tv = token_vocab_of(&v);
    Compiled c = compile_for_vocab(wc->build, wc->name, tv);
    Oracle o = {.cg = c.oracle_cg, .v = &v, .independent_viable = wc->independent_viable};
    int checked = 0;
    for (int w = 0; w < walks; w++) checked += random_walk(&o, c.tg, 1000 + (uint64_t)w, max_steps, 0, wc->name);
    cr_assert_geq(checked, 4 * walks, "%s: the walks are too short (%d masks) to prove much", wc->name, checked);
    text_free(&o.scratch);
    compiled_free(&c);
    token_vocab_free(tv);
    oracle_vocab_free(&v);
}

static const char *const json_pieces[] = {
    "{", "}", "[", "]", "\"", ":", ",", " ", "-", "0", "1", "5", "9", ".", "t", "r", "u", "e", "f", "a", "l", "s",
    "n", "x", "\\", "\\n", "\\\"", "\\u00", "1f", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\n", "\x7f", NULL};

static const char *const json_curated[] = {
    "\",", "\"}", "1,", "],[", "\":", "\": ", "{\"", "[\"", "true", "null,", "false]", "0.5", "-1", "12]", "\"\"",
    "{}", "[]", "[[", "]]", "}]", "},{", "\\\\", "\\u001f", "\\u0001", "\\u00", "\xc3\xa9\"", "\xe4\xb8",
    "\xad\"", "\xf0\x9f", "\x98\x80\"", "a\",\"b\":", " ,", ", ", ": [", "01", "1.", ".5", "0]", "5}", "\"]",
    "\"a\":1}", "-0.", "tr", "ue", "nul", "l]", "\\u", "\xc3", "\xa9", "\x80", "\xff", "\xed\xa0\x80",
    "\" :", "[ ", "  ", "   ", "1 ", "[1,2]", "{\"a\":[]}", NULL};

Test(token_matcher, json_grammar_masks_match_the_oracle) {
    WalkCase wc = {"json", build_json_small_ws, json_pieces, json_curated, NULL};
    run_walk_case(&wc, 40, 40);
}

static const char *const bounded_string_pieces[] = {
    "\"", "a", "b", "~", "\\", "\\\"", "\\\\", "\\n", "\\t", "\\u00", "\\u001f", "1", "f", "0", "\xc3\xa9",
    "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\xe4", "\xb8\xad", "\xf0\x9f\x98", "\x80", "\x7f", "\n", "\xc3\xa8", NULL};

static const char *const bounded_string_curated[] = {
    "\"\"", "ab\"", "\"abcde\"", "\"abcdef", "aaaaa", "\"\\", "\\u", "\\u0", "\\u000", "\\u0000", "\\u001", "1f\"",
    "\xe4\xb8", "\xad\"", "\xad", "\"\xe4", "\xf0\x9f\x98\x80\"", "\xf0\x9f\x99\x8f", "\xf0\x9f\x99\x90",
    "\xe9\xbf\xbf", "\xea\x80\x80", "\"\xc3\xa9\xc3\xa9", NULL};

Test(token_matcher, bounded_json_string_masks_match_the_oracle) {
    WalkCase wc = {"bounded string", build_bounded_string, bounded_string_pieces, bounded_string_curated, NULL};
    run_walk_case(&wc, 40, 12);
}

static const char *const nested_pieces[] = {"a", "b", "c", "0", "1", "9", "=", ",", ";", "(", ")", "x", NULL};

static const char *const nested_curated[] = {
    "a=", "=1", "1,", "1;", "b=2,c", "2)", "),", ");", "a=(", "=(b", "1),", "c1", "a=1;", ",a", "=a1,", "ab=",
    "c=c", "1,b=", "0);", "))", "a;", "=;", "(a=", "1)),", "b0,", NULL};

Test(token_matcher, rules_ending_mid_token_match_the_oracle) {
    WalkCase wc = {"nested rules", build_nested_rules, nested_pieces, nested_curated, NULL};
    run_walk_case(&wc, 40, 40);
}

static const char *const nullable_pieces[] = {"<", ">", "a", "b", "c", "!", "(", ")", NULL};

static const char *const nullable_curated[] = {
    "ab", "ba", "bc", "cb", "abc", "a>", "c>", ">!", "!a", "<>", "<a", "aa", "cc", "bb", "a(", ")b", "()", "(a(",
    "))", ")a", "b>", "><", "cba", "<ab", NULL};

Test(token_matcher, nullable_rules_in_repetitions_match_the_oracle) {
    WalkCase wc = {"nullable rules", build_nullable_rules, nullable_pieces, nullable_curated, NULL};
    run_walk_case(&wc, 40, 40);
}

static const char *const ambiguous_pieces[] = {"a", "b", "x", "y", "<", ">", NULL};

static const char *const ambiguous_curated[] = {
    "ab", "ba", "abab", "bx", "by", "aa", "a>", "ab>", "<a", "aab", "bab", "abx", "aby", "<>", "baba", NULL};

Test(token_matcher, ambiguous_rules_match_the_oracle) {
    WalkCase wc = {"ambiguous", build_ambiguous, ambiguous_pieces, ambiguous_curated, NULL};
    run_walk_case(&wc, 40, 40);
}

Test(token_matcher, choice_of_literals_matches_the_oracle) {
    WalkCase wc = {"choice", build_choice, choice_pieces, choice_curated, choice_viable};
    run_walk_case(&wc, 40, 10);
}

/* ---- random grammars --------------------------------------------------------------- */


/* The token masks of random grammars against the oracle. Some of these
 * grammars are ambiguous enough that the number of parse stacks grows
 * exponentially with the text (("d" r0 r0? r0){0,2} has a million after ten
 * bytes); past a few million nodes the matcher gives up with "too
 * ambiguous", which ends the walk, and so does compiled_grammar_match,
 * which then answers "not viable" - walks stop at 32 bytes to stay clear. */
Test(token_matcher, random_grammars_match_the_oracle) {
    static Cfg cfg;
    OracleVocab v;
    synthetic_vocab(&v, random_grammar_pieces, STRS("ab", "ba", "abc", "cab", "dd", "a\xc3\xa9", "\xa9\xe4\xb8\xad" "a"), 99);
    TokenVocab *tv = token_vocab_of(&v);
    int compiled = 0, checked = 0;
    for (uint64_t seed = 1; compiled < 150 && seed < 1000; seed++) {
        Grammar *g = random_grammar(seed, &cfg);
        cfg_free(&cfg);
        Error err;
        CompiledGrammar *oracle_cg = grammar_compile(g, &err);
        if (!oracle_cg) { /* left-recursive, or accepts nothing */
            grammar_free(g);
            continue;
        }
        compiled++;
        CompiledGrammar *for_tokens = grammar_compile(g, &err);
        cr_assert(for_tokens, "%s", err.msg);
        grammar_free(g);
        TokenGrammar *tg = token_grammar_new(for_tokens, tv, &err);
        cr_assert(tg, "seed %llu: %s", (unsigned long long)seed, err.msg);
        Oracle o = {.cg = oracle_cg, .v = &v, .limits_end_walks = true};
        char name[64];
        snprintf(name, sizeof name, "random grammar %llu", (unsigned long long)seed);
        for (uint64_t w = 0; w < 4; w++) checked += random_walk(&o, tg, seed * 10 + w, 15, 32, name);
        text_free(&o.scratch);
        token_grammar_free(tg);
        compiled_grammar_free(oracle_cg);
    }
    cr_assert_geq(compiled, 150, "only %d random grammars compiled", compiled);
    cr_assert_geq(checked, 1500, "the walks are too short (%d masks) to prove much", checked);
    token_vocab_free(tv);
    oracle_vocab_free(&v);
}

/* ---- explicit masks ------------------------------------------------------------- */

/* The ids allowed in mask, as a string "1 4 5" (for readable failures). */
static const char *allowed_ids(const uint32_t *mask, int size) {
    static char buf[512];
    size_t at = 0;
    buf[0] = 0;
    for (int id = 0; id < size && at + 8 < sizeof buf; id++)
        if (mask[id >> 5] >> (id & 31) & 1) at += (size_t)snprintf(buf + at, sizeof buf - at, "%s%d", at ? " " : "", id);
    return buf;
}

/* Hand-checked masks for the nested-rule grammar, no oracle involved: a rule
 * finishing inside a token lets the rule below read the rest. */
Test(token_matcher, tokens_across_rule_boundaries_by_hand) {
    const char *const tokens[] = {"", "a", "=", "a=", "a=1", "1,", "1;", "a;", "1,b=", "=;", "1", ";", "1,b=2;", "b=("};
    enum { N = sizeof tokens / sizeof *tokens };
    size_t lens[N];
    for (int i = 0; i < N; i++) lens[i] = strlen(tokens[i]);
    Error err;
    TokenVocab *tv = token_vocab_from_strings(tokens, lens, N, &err);
    cr_assert(tv, "%s", err.msg);
    Grammar *g = grammar_new();
    build_nested_rules(g);
    CompiledGrammar *cg = grammar_compile(g, &err);
    cr_assert(cg, "%s", err.msg);
    grammar_free(g);
    TokenGrammar *tg = token_grammar_new(cg, tv, &err);
    cr_assert(tg, "%s", err.msg);
    TokenMatcher *m = token_matcher_new(tg, &err);
    cr_assert(m, "%s", err.msg);
    uint32_t mask[1];
    const int32_t end_ids[] = {0};
    cr_assert_eq(token_matcher_fill_mask(m, mask, end_ids, 1, &err), 0);
    /* Start: a key. "a", "a=", "a=1", "b=(" (key ends after one letter; item reads "=", val the rest). */
    cr_expect_str_eq(allowed_ids(mask, N), "1 3 4 13");
    cr_assert_eq(token_matcher_accept(m, 4, false, &err), 0, "%s", err.msg); /* "a=1" */
    /* num may go on ("1", "1,", "1;", "1,b=", "1,b=2;"), or end: then item and
     * root read "," or ";". Not "a", "=" or "a;". */
    cr_assert_eq(token_matcher_fill_mask(m, mask, end_ids, 1, &err), 0);
    cr_expect_str_eq(allowed_ids(mask, N), "5 6 8 10 11 12");
    cr_expect(!token_matcher_can_end(m));
    cr_assert_eq(token_matcher_accept(m, 12, false, &err), 0, "%s", err.msg); /* "1,b=2;" */
    cr_assert_eq(token_matcher_fill_mask(m, mask, end_ids, 1, &err), 0);
    cr_expect_str_eq(allowed_ids(mask, N), "0", "after a=11,b=2; only the end id");
    cr_expect(token_matcher_can_end(m));
    cr_expect(token_matcher_done(m));
    token_matcher_free(m);
    token_grammar_free(tg);
    token_vocab_free(tv);
}

/* Thousands of nested arrays: the matcher's node pool outgrows the point
 * where it compacts; the masks stay right, and the brackets close again. */
Test(token_matcher, deep_nesting_survives_compaction) {
    const char *const tokens[] = {"", "[", "]", "[[", "]]", "[]", ",", "],[", "1", "[[[[", "]]]]"};
    enum { N = sizeof tokens / sizeof *tokens };
    OracleVocab v;
    oracle_vocab_alloc(&v, N);
    for (int i = 0; i < N; i++) set_token(&v, i, tokens[i], strlen(tokens[i]));
    v.is_end[0] = true;
    v.end_ids[v.num_end_ids++] = 0;
    TokenVocab *tv = token_vocab_of(&v);
    Grammar *g = grammar_new();
    int array = grammar_rule(g, "array"), value = grammar_rule(g, "value");
    GExpr more = g_repeat(g, g_seq2(g, g_str(g, ","), g_ref(g, value)), 0, G_UNBOUNDED);
    grammar_define(g, array, g_seq(g, EXPRS(g_str(g, "["), g_optional(g, g_seq2(g, g_ref(g, value), more)), g_str(g, "]"))));
    grammar_define(g, value, g_alt2(g, g_ref(g, array), g_str(g, "1")));
    Error err;
    Compiled c = {grammar_compile(g, &err), NULL};
    cr_assert(c.oracle_cg, "%s", err.msg);
    c.tg = token_grammar_new(grammar_compile(g, &err), tv, &err);
    cr_assert(c.tg, "%s", err.msg);
    grammar_free(g);
    Oracle o = {.cg = c.oracle_cg, .v = &v};
    TokenMatcher *m = token_matcher_new(c.tg, &err);
    cr_assert(m);
    uint32_t mask[1];
    Text text = {0};
    text_reserve(&text, 1);
    enum { DEPTH = 16000 }; /* past 8000 levels the pool compacts, several times by 16000 */
    for (int i = 0; i < DEPTH / 4; i++) {
        cr_assert_eq(token_matcher_accept(m, 9, false, &err), 0, "at depth %d: %s", 4 * i, err.msg); /* "[[[[" */
        text_append(&text, "[[[[", 4);
        if (i % 500 == 0 || i == DEPTH / 4 - 1) {
            fill_mask(m, &v, mask);
            check_mask(&o, &text, mask, "deep nesting", i);
        }
    }
    cr_assert_eq(token_matcher_accept(m, 8, false, &err), 0, "%s", err.msg); /* "1" */
    text_append(&text, "1", 1);
    for (int i = 0; i < DEPTH / 4; i++) {
        if (i % 500 == 0) {
            fill_mask(m, &v, mask);
            check_mask(&o, &text, mask, "deep closing", i);
            cr_assert(!token_matcher_can_end(m));
        }
        cr_assert_eq(token_matcher_accept(m, 10, false, &err), 0, "closing %d: %s", i, err.msg); /* "]]]]" */
        text_append(&text, "]]]]", 4);
    }
    fill_mask(m, &v, mask);
    check_mask(&o, &text, mask, "deep nesting closed", 0);
    cr_assert(token_matcher_can_end(m));
    cr_assert(token_matcher_done(m));
    text_free(&text);
    text_free(&o.scratch);
    token_matcher_free(m);
    compiled_free(&c);
    token_vocab_free(tv);
    oracle_vocab_free(&v);
}

/* ---- the real Qwen3 vocabulary --------------------------------------------------- */

#define QWEN3_VOCAB 151936

/* Whether any byte of chars occurs in bytes[0..len). */
static bool memchr_any(const char *bytes, size_t len, const char *chars) {
    for (size_t i = 0; i < len; i++)
        if (bytes[i] && strchr(chars, bytes[i])) return true;
    return false;
}

Test(token_matcher, qwen3_vocabulary_masks_match_the_oracle, .timeout = 120) {
    Error err;
    Tokenizer *tok = tokenizer_load("tests/fixtures/tiny-qwen3", QWEN3_VOCAB, &err);
    cr_assert(tok, "%s", err.msg);
    TokenVocab *tv = token_vocab_new(tok, QWEN3_VOCAB, &err);
    cr_assert(tv, "token_vocab_new: %s", err.msg);
    cr_assert_eq(token_vocab_size(tv), QWEN3_VOCAB);
    OracleVocab v = {.size = QWEN3_VOCAB};
    v.bytes = calloc(QWEN3_VOCAB, sizeof *v.bytes);
    v.lens = calloc(QWEN3_VOCAB, sizeof *v.lens);
    v.never = calloc(QWEN3_VOCAB, sizeof *v.never);
    v.is_end = calloc(QWEN3_VOCAB, sizeof *v.is_end);
    cr_assert(v.bytes && v.lens && v.never && v.is_end);
    int num_special = 0;
    for (int32_t id = 0; id < QWEN3_VOCAB; id++) {
        if (id >= tokenizer_size(tok)) {
            v.never[id] = true;
            continue;
        }
        cr_assert_eq(tokenizer_token_bytes(tok, id, &v.bytes[id], &v.lens[id], &err), 0, "%s", err.msg);
        if (tokenizer_is_special(tok, id)) v.never[id] = true, num_special++;
    }
    cr_assert_gt(num_special, 0);
    int32_t eos = tokenizer_eos_id(tok), im_end = tokenizer_token_to_id(tok, "<|im_end|>", 10);
    cr_assert(eos >= 0 && im_end >= 0);
    v.end_ids[v.num_end_ids++] = eos;
    if (im_end != eos) v.end_ids[v.num_end_ids++] = im_end;
    for (int i = 0; i < v.num_end_ids; i++) v.is_end[v.end_ids[i]] = true;

    Compiled c = compile_for_vocab(build_json_any_ws, "json (Qwen3)", tv);
    Oracle o = {.cg = c.oracle_cg, .v = &v, .first_two = malloc(65536 + 256)};
    cr_assert(o.first_two);
    int words = token_mask_words(QWEN3_VOCAB);
    uint32_t *mask = malloc((size_t)words * sizeof *mask);
    int32_t *allowed = malloc(QWEN3_VOCAB * sizeof *allowed);
    cr_assert(mask && allowed);
    /* Two walks; a few first tokens forced so the walks reach objects,
     * strings and numbers rather than wander in whitespace. */
    const char *const openings[2][3] = {{"{\"", "name", "\":"}, {"[", "1", ","}};
    for (int walk = 0; walk < 2; walk++) {
        Rng rng = rng_seeded(77 + (uint64_t)walk);
        TokenMatcher *m = token_matcher_new(c.tg, &err);
        cr_assert(m, "%s", err.msg);
        Text text = {0};
        text_reserve(&text, 1);
        for (int step = 0; step < 15; step++) {
            oracle_reset_cache(&o);
            fill_mask(m, &v, mask);
            /* Full check of every id: special ones, missing ones, end ids. */
            check_mask(&o, &text, mask, walk ? "qwen3 walk 1" : "qwen3 walk 0", step);
            check_end_state(&o, m, &text, "qwen3", step);
            /* Mostly tokens with a quote, or else JSON punctuation or a digit,
             * in them, so the walk moves through the structure instead of
             * staying in a long string (the oracle's cost grows with the text)
             * or in whitespace; any allowed token otherwise. */
            uint32_t policy = rng_below(&rng, 4);
            const char *wanted = policy < 2 ? "\"" : policy == 2 ? "{}[]\":,0123456789" : NULL;
            int num_allowed = 0;
            for (int pass = 0; pass < 2 && !num_allowed; pass++, wanted = NULL)
                for (int32_t id = 0; id < QWEN3_VOCAB; id++)
                    if (!v.is_end[id] && (mask[id >> 5] >> (id & 31) & 1) &&
                        (!wanted || memchr_any(v.bytes[id], v.lens[id], wanted)))
                        allowed[num_allowed++] = id;
            int32_t pick = -1;
            if (step < 3) {
                pick = tokenizer_token_to_id(tok, openings[walk][step], strlen(openings[walk][step]));
                cr_assert(pick >= 0, "no token \"%s\"", openings[walk][step]);
                cr_assert(mask[pick >> 5] >> (pick & 31) & 1, "\"%s\" should be allowed", openings[walk][step]);
            } else if (num_allowed) {
                pick = allowed[rng_below(&rng, (uint32_t)num_allowed)];
            }
            if (pick < 0) break;
            cr_assert_eq(token_matcher_accept(m, pick, false, &err), 0, "%s", err.msg);
            text_append(&text, v.bytes[pick], v.lens[pick]);
        }
        text_free(&text);
        token_matcher_free(m);
    }
    free(mask), free(allowed), free(o.first_two);
    text_free(&o.scratch);
    compiled_free(&c);
    free(v.bytes), free(v.lens), free(v.never), free(v.is_end);
    token_vocab_free(tv);
    tokenizer_free(tok);
}
