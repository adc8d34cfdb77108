/*
 * test_token_matcher.c - token masks (engine/structured/token_matcher.h)
 * against a brute-force oracle, and the grammar compiler (grammar.h)
 * through compiled_grammar_match.
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
 * oracle's own base, compiled_grammar_match, is checked against hand-written
 * predicates and equivalent grammars written differently; then the
 * compiler's refusals and code point edge cases.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/structured/grammar.h"
#include "engine/structured/token_matcher.h"
#include "engine/tokenizer/tokenizer.h"

#define STRS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define EXPRS(...) ((GExpr[]){__VA_ARGS__}), (int)(sizeof((GExpr[]){__VA_ARGS__}) / sizeof(GExpr))

/* ---- small utilities --------------------------------------------------------- */

typedef struct Rng {
    uint64_t state;
} Rng;

static Rng rng_seeded(uint64_t seed) { return (Rng){seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull}; }

static uint64_t rng_next(Rng *r) {
    uint64_t x = r->state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return r->state = x;
}

static uint32_t rng_below(Rng *r, uint32_t n) { return (uint32_t)(rng_next(r) % n); }

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

/* bytes as a C-like literal for messages (static buffer, one at a time per slot). */
static const char *escaped(const void *bytes, size_t len, int slot) {
    static char buf[4][1024];
    char *out = buf[slot & 3];
    const uint8_t *b = bytes;
    size_t at = 0;
    for (size_t i = 0; i < len && at + 8 < sizeof buf[0]; i++) {
        if (b[i] >= 0x20 && b[i] < 0x7F && b[i] != '\\' && b[i] != '"') out[at++] = (char)b[i];
        else at += (size_t)snprintf(out + at, 8, "\\x%02x", b[i]);
    }
    out[at] = 0;
    return out;
}

static bool matches(const CompiledGrammar *cg, const char *text) {
    return compiled_grammar_match(cg, text, strlen(text), NULL) == 1;
}

static bool viable(const CompiledGrammar *cg, const void *text, size_t len) {
    bool v = false;
    compiled_grammar_match(cg, text, len, &v);
    return v;
}

/* A random string of 0..max_pieces pieces. */
static size_t random_text(Rng *rng, const char *const *pieces, int max_pieces, char *buf, size_t cap) {
    int num_pieces = 0;
    while (pieces[num_pieces]) num_pieces++;
    size_t len = 0;
    int n = (int)rng_below(rng, (uint32_t)max_pieces + 1);
    for (int k = 0; k < n; k++) {
        const char *p = pieces[rng_below(rng, (uint32_t)num_pieces)];
        size_t pl = strlen(p);
        if (len + pl >= cap) break;
        memcpy(buf + len, p, pl);
        len += pl;
    }
    buf[len] = 0;
    return len;
}

static int utf8_encode_cp(uint32_t c, uint8_t *b) {
    if (c < 0x80) return b[0] = (uint8_t)c, 1;
    if (c < 0x800) return b[0] = (uint8_t)(0xC0 | c >> 6), b[1] = (uint8_t)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000) {
        b[0] = (uint8_t)(0xE0 | c >> 12), b[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F)), b[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    b[0] = (uint8_t)(0xF0 | c >> 18), b[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
    b[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F)), b[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

/* ---- grammars ------------------------------------------------------------------ */

typedef void (*BuildGrammar)(Grammar *g);

/* JSON values: objects, arrays, escaped strings of any code point, numbers,
 * literals; ws is its own (nullable) rule. */
static void build_json_grammar(Grammar *g, bool any_whitespace) {
    int value = grammar_rule(g, "value"), object = grammar_rule(g, "object"), member = grammar_rule(g, "member");
    int array = grammar_rule(g, "array"), string = grammar_rule(g, "string"), number = grammar_rule(g, "number");
    int ws = grammar_rule(g, "ws");
    grammar_define(g, value,
                   g_alt(g, EXPRS(g_ref(g, object), g_ref(g, array), g_ref(g, string), g_ref(g, number),
                                  g_str(g, "true"), g_str(g, "false"), g_str(g, "null"))));
    GExpr more_members = g_repeat(g, g_seq(g, EXPRS(g_str(g, ","), g_ref(g, ws), g_ref(g, member))), 0, G_UNBOUNDED);
    grammar_define(g, object,
                   g_seq(g, EXPRS(g_str(g, "{"), g_ref(g, ws), g_optional(g, g_seq2(g, g_ref(g, member), more_members)),
                                  g_str(g, "}"))));
    grammar_define(g, member,
                   g_seq(g, EXPRS(g_ref(g, string), g_ref(g, ws), g_str(g, ":"), g_ref(g, ws), g_ref(g, value),
                                  g_ref(g, ws))));
    GExpr element = g_seq2(g, g_ref(g, value), g_ref(g, ws));
    GExpr more_elements = g_repeat(g, g_seq(g, EXPRS(g_str(g, ","), g_ref(g, ws), element)), 0, G_UNBOUNDED);
    grammar_define(g, array,
                   g_seq(g, EXPRS(g_str(g, "["), g_ref(g, ws), g_optional(g, g_seq2(g, element, more_elements)),
                                  g_str(g, "]"))));
    GExpr any_char = g_codepoints_not(g, NULL, 0, G_JSON_STRING);
    grammar_define(g, string, g_seq(g, EXPRS(g_str(g, "\""), g_repeat(g, any_char, 0, G_UNBOUNDED), g_str(g, "\""))));
    GExpr digit = g_byte_range(g, '0', '9');
    GExpr integer = g_alt2(g, g_str(g, "0"), g_seq2(g, g_byte_range(g, '1', '9'), g_repeat(g, digit, 0, G_UNBOUNDED)));
    GExpr fraction = g_optional(g, g_seq2(g, g_str(g, "."), g_repeat(g, digit, 1, G_UNBOUNDED)));
    grammar_define(g, number, g_seq(g, EXPRS(g_optional(g, g_str(g, "-")), integer, fraction)));
    if (any_whitespace)
        grammar_define(g, ws, g_repeat(g, g_alt(g, EXPRS(g_str(g, " "), g_str(g, "\t"), g_str(g, "\n"))), 0, G_UNBOUNDED));
    else
        grammar_define(g, ws, g_repeat(g, g_str(g, " "), 0, 2));
    grammar_set_root(g, value);
}

static void build_json_small_ws(Grammar *g) { build_json_grammar(g, false); }
static void build_json_any_ws(Grammar *g) { build_json_grammar(g, true); }

/* The code points of the bounded string grammar. */
static const uint32_t bounded_string_set[] = {0x00, 0x7E, 0xE9, 0xE9, 0x4E00, 0x9FFF, 0x1F600, 0x1F64F};

/* A JSON string literal of 0 to 5 characters from bounded_string_set. */
static void build_bounded_string(Grammar *g) {
    int root = grammar_rule(g, "root");
    GExpr character = g_codepoints(g, bounded_string_set, 4, G_JSON_STRING);
    grammar_define(g, root, g_seq(g, EXPRS(g_str(g, "\""), g_repeat(g, character, 0, 5), g_str(g, "\""))));
}

/* Rules that end in the middle of a token while the caller goes on:
 * "a=1,bb=(c=x1);" - key, num and word finish on the byte before "=", ","
 * ";" or ")", two or three frames down. */
static void build_nested_rules(Grammar *g) {
    int root = grammar_rule(g, "root"), item = grammar_rule(g, "item"), key = grammar_rule(g, "key");
    int val = grammar_rule(g, "val"), num = grammar_rule(g, "num"), word = grammar_rule(g, "word");
    int list = grammar_rule(g, "list");
    GExpr more_items = g_repeat(g, g_seq2(g, g_str(g, ","), g_ref(g, item)), 0, G_UNBOUNDED);
    grammar_define(g, root, g_seq(g, EXPRS(g_ref(g, item), more_items, g_str(g, ";"))));
    grammar_define(g, item, g_seq(g, EXPRS(g_ref(g, key), g_str(g, "="), g_ref(g, val))));
    grammar_define(g, key, g_repeat(g, g_byte_range(g, 'a', 'c'), 1, G_UNBOUNDED));
    grammar_define(g, val, g_alt(g, EXPRS(g_ref(g, num), g_ref(g, word), g_ref(g, list))));
    grammar_define(g, num, g_repeat(g, g_byte_range(g, '0', '9'), 1, G_UNBOUNDED));
    GExpr word_tail = g_repeat(g, g_alt2(g, g_byte_range(g, 'a', 'c'), g_byte_range(g, '0', '9')), 0, G_UNBOUNDED);
    grammar_define(g, word, g_seq2(g, g_byte_range(g, 'a', 'c'), word_tail));
    grammar_define(g, list, g_seq(g, EXPRS(g_str(g, "("), g_ref(g, item), more_items, g_str(g, ")"))));
}

/* Rules that match "" inside repetitions and recursion:
 * root ::= "<" part* ">" ("!" opt_a)? | nest | opt_b   (so root matches "" too)
 * part ::= opt_a opt_b   opt_a ::= "a"?   opt_b ::= ("b" inner)?   inner ::= "c"*
 * nest ::= opt_a "(" nest? ")" opt_b */
static void build_nullable_rules(Grammar *g) {
    int root = grammar_rule(g, "root"), part = grammar_rule(g, "part"), opt_a = grammar_rule(g, "opt_a");
    int opt_b = grammar_rule(g, "opt_b"), inner = grammar_rule(g, "inner"), nest = grammar_rule(g, "nest");
    GExpr brackets = g_seq(g, EXPRS(g_str(g, "<"), g_repeat(g, g_ref(g, part), 0, G_UNBOUNDED), g_str(g, ">"),
                                    g_optional(g, g_seq2(g, g_str(g, "!"), g_ref(g, opt_a)))));
    grammar_define(g, root, g_alt(g, EXPRS(brackets, g_ref(g, nest), g_ref(g, opt_b))));
    grammar_define(g, part, g_seq2(g, g_ref(g, opt_a), g_ref(g, opt_b)));
    grammar_define(g, opt_a, g_optional(g, g_str(g, "a")));
    grammar_define(g, opt_b, g_optional(g, g_seq2(g, g_str(g, "b"), g_ref(g, inner))));
    grammar_define(g, inner, g_repeat(g, g_str(g, "c"), 0, G_UNBOUNDED));
    grammar_define(g, nest, g_seq(g, EXPRS(g_ref(g, opt_a), g_str(g, "("), g_optional(g, g_ref(g, nest)), g_str(g, ")"),
                                           g_ref(g, opt_b))));
}

/* Alternatives that share prefixes through different rules, and a
 * repetition with many parses of the same text:
 * root ::= A "x" | B "y" | "<" S ">"    A ::= ("ab")+    B ::= "a" ("ba")* "b"
 * S ::= T*    T ::= "a" | "aa" | U    U ::= "a" V    V ::= "b"? */
static void build_ambiguous(Grammar *g) {
    int root = grammar_rule(g, "root"), a = grammar_rule(g, "A"), b = grammar_rule(g, "B"), s = grammar_rule(g, "S");
    int t = grammar_rule(g, "T"), u = grammar_rule(g, "U"), v = grammar_rule(g, "V");
    grammar_define(g, root,
                   g_alt(g, EXPRS(g_seq2(g, g_ref(g, a), g_str(g, "x")), g_seq2(g, g_ref(g, b), g_str(g, "y")),
                                  g_seq(g, EXPRS(g_str(g, "<"), g_ref(g, s), g_str(g, ">"))))));
    grammar_define(g, a, g_repeat(g, g_str(g, "ab"), 1, G_UNBOUNDED));
    grammar_define(g, b, g_seq(g, EXPRS(g_str(g, "a"), g_repeat(g, g_str(g, "ba"), 0, G_UNBOUNDED), g_str(g, "b"))));
    grammar_define(g, s, g_repeat(g, g_ref(g, t), 0, G_UNBOUNDED));
    grammar_define(g, t, g_alt(g, EXPRS(g_str(g, "a"), g_str(g, "aa"), g_ref(g, u))));
    grammar_define(g, u, g_seq2(g, g_str(g, "a"), g_ref(g, v)));
    grammar_define(g, v, g_optional(g, g_str(g, "b")));
}

static const char *const choice_literals[] = {"apple", "apricot", "banana", "band", "ban", "b", "{\"a\":1}", "\xc3\xa9\xe4\xb8\xad", NULL};

static void build_choice(Grammar *g) {
    int root = grammar_rule(g, "root");
    GExpr alts[16];
    int n = 0;
    for (; choice_literals[n]; n++) alts[n] = g_str(g, choice_literals[n]);
    grammar_define(g, root, g_alt(g, alts, n));
}

/* Independent of the compiler: whether text is a prefix of (or equal to) a literal. */
static bool choice_viable(const void *text, size_t len) {
    for (int i = 0; choice_literals[i]; i++)
        if (strlen(choice_literals[i]) >= len && memcmp(choice_literals[i], text, len) == 0) return true;
    return false;
}

static bool choice_matches(const void *text, size_t len) {
    for (int i = 0; choice_literals[i]; i++)
        if (strlen(choice_literals[i]) == len && memcmp(choice_literals[i], text, len) == 0) return true;
    return false;
}

static CompiledGrammar *compile_built(BuildGrammar build, const char *what) {
    Grammar *g = grammar_new();
    cr_assert(g);
    build(g);
    cr_assert_null(grammar_error(g), "%s: %s", what, grammar_error(g));
    Error err;
    CompiledGrammar *cg = grammar_compile(g, &err);
    cr_assert(cg, "%s does not compile: %s", what, err.msg);
    grammar_free(g);
    return cg;
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

static const char *const choice_pieces[] = {"a", "p", "l", "e", "r", "i", "c", "o", "t", "b", "n", "d", "{", "}",
                                            "\"", ":", "1", "\xc3\xa9", "\xe4\xb8\xad", NULL};

static const char *const choice_curated[] = {"apple", "ap", "pple", "apr", "icot", "ban", "ana", "nana", "band", "and",
                                             "{\"", "\"a\"", ":1}", "\xc3", "\xa9\xe4", "\xb8\xad", "bandana", NULL};

Test(token_matcher, choice_of_literals_matches_the_oracle) {
    WalkCase wc = {"choice", build_choice, choice_pieces, choice_curated, choice_viable};
    run_walk_case(&wc, 40, 10);
}

/* ---- random grammars --------------------------------------------------------------- */

/*
 * A random grammar is built twice: as a Grammar, and as plain productions
 * for an Earley recognizer written here, which knows nothing of automata or
 * stacks - the independent check of compiled_grammar_match (and so of the
 * oracle) on grammars nobody picked by hand.
 *
 * Productions: lhs -> rhs; a symbol >= 0 is a nonterminal, -1 - b the byte b.
 * Nonterminals 0..num_rules-1 are the rules.
 */
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

static int cfg_nt(Cfg *c) { return c->num_nts++; }

static void cfg_prod(Cfg *c, int lhs, const int *rhs, int n) {
    cr_assert(c->num_prods < CFG_MAX_PRODS && c->num_syms + n <= CFG_MAX_SYMS, "random grammar too large");
    c->lhs[c->num_prods] = lhs, c->begin[c->num_prods] = c->num_syms, c->len[c->num_prods] = n;
    c->num_prods++;
    for (int i = 0; i < n; i++) c->syms[c->num_syms++] = rhs[i];
}

static void cfg_bytes(Cfg *c, int lhs, const uint8_t *bytes, int n) {
    int rhs[8];
    for (int i = 0; i < n; i++) rhs[i] = -1 - bytes[i];
    cfg_prod(c, lhs, rhs, n);
}

/* nt -> e^k, for k copies */
static void cfg_copies(Cfg *c, int lhs, int e, int k, int tail) {
    int rhs[8], n = 0;
    for (int i = 0; i < k; i++) rhs[n++] = e;
    if (tail >= 0) rhs[n++] = tail;
    cfg_prod(c, lhs, rhs, n);
}

/* A random expression in both forms; *nt is its nonterminal. */
static GExpr random_expr(Grammar *g, Cfg *c, Rng *rng, const int *rules, int num_rules, int depth, int *nt) {
    static const char letters[] = "abcd";
    switch (rng_below(rng, depth >= 3 ? 5 : 10)) {
    case 0:
    case 1: {
        uint8_t lit[4];
        int n = 1 + (int)rng_below(rng, 3);
        for (int i = 0; i < n; i++) lit[i] = (uint8_t)letters[rng_below(rng, 3)];
        cfg_bytes(c, *nt = cfg_nt(c), lit, n);
        return g_bytes(g, lit, (size_t)n);
    }
    case 2: {
        uint8_t lo = (uint8_t)('a' + rng_below(rng, 4)), hi = (uint8_t)(lo + rng_below(rng, (uint32_t)('d' - lo + 1)));
        *nt = cfg_nt(c);
        for (int b = lo; b <= hi; b++) cfg_bytes(c, *nt, &(uint8_t){(uint8_t)b}, 1);
        return g_byte_range(g, lo, hi);
    }
    case 3: {
        int r = (int)rng_below(rng, (uint32_t)num_rules);
        *nt = r;
        return g_ref(g, rules[r]);
    }
    case 4: {
        static const uint32_t sets[][4] = {{'a', 'b', 0xE9, 0xE9}, {0x4E2D, 0x4E2E, 'c', 'c'}, {0xEA, 0xE9, 'd', 'd'}};
        const uint32_t *set = sets[rng_below(rng, 3)];
        int n = 1 + (int)rng_below(rng, 2);
        *nt = cfg_nt(c);
        for (int i = 0; i < n; i++) {
            uint32_t lo = set[2 * i] < set[2 * i + 1] ? set[2 * i] : set[2 * i + 1];
            uint32_t hi = set[2 * i] ^ set[2 * i + 1] ^ lo;
            for (uint32_t cp = lo; cp <= hi; cp++) {
                uint8_t b[4];
                cfg_bytes(c, *nt, b, utf8_encode_cp(cp, b));
            }
        }
        return g_codepoints(g, set, n, G_UTF8);
    }
    case 5:
    case 6: {
        GExpr items[3];
        int child[3], n = 2 + (int)rng_below(rng, 2);
        for (int i = 0; i < n; i++) items[i] = random_expr(g, c, rng, rules, num_rules, depth + 1, &child[i]);
        *nt = cfg_nt(c);
        if (rng_below(rng, 2)) {
            cfg_prod(c, *nt, child, n);
            return g_seq(g, items, n);
        }
        for (int i = 0; i < n; i++) cfg_prod(c, *nt, &child[i], 1);
        return g_alt(g, items, n);
    }
    case 7:
    case 8: {
        int min = (int)rng_below(rng, 3), max = rng_below(rng, 3) == 0 ? G_UNBOUNDED : min + (int)rng_below(rng, 3);
        int e;
        GExpr x = random_expr(g, c, rng, rules, num_rules, depth + 1, &e);
        *nt = cfg_nt(c);
        if (max == G_UNBOUNDED) { /* nt -> e^min T, T -> "" | e T */
            int t = cfg_nt(c);
            cfg_copies(c, *nt, e, min, t);
            cfg_prod(c, t, NULL, 0);
            cfg_copies(c, t, e, 1, t);
        } else {
            for (int k = min; k <= max; k++) cfg_copies(c, *nt, e, k, -1);
        }
        return g_repeat(g, x, min, max);
    }
    default:
        cfg_prod(c, *nt = cfg_nt(c), NULL, 0);
        return g_empty(g);
    }
}

/* Grammar seed in both forms; NULL-free: the Cfg is the caller's to cfg_free. */
static Grammar *random_grammar(uint64_t seed, Cfg *c) {
    Rng rng = rng_seeded(seed);
    Grammar *g = grammar_new();
    cr_assert(g);
    memset(c, 0, offsetof(Cfg, lhs));
    c->num_prods = c->num_syms = 0;
    int rules[4], num_rules = 1 + (int)rng_below(&rng, 4);
    for (int r = 0; r < num_rules; r++) {
        char name[8];
        snprintf(name, sizeof name, "r%d", r);
        rules[r] = grammar_rule(g, name);
        cr_assert_eq(rules[r], r);
    }
    c->num_nts = num_rules;
    for (int r = 0; r < num_rules; r++) {
        int body;
        grammar_define(g, rules[r], random_expr(g, c, &rng, rules, num_rules, 0, &body));
        cfg_prod(c, r, &body, 1);
    }
    cr_assert_null(grammar_error(g), "%s", grammar_error(g));
    int start = cfg_nt(c), root = 0;
    c->start_prod = c->num_prods;
    cfg_prod(c, start, &root, 1);
    /* Productive symbols and usable productions, then nullable ones. */
    c->nullable = calloc((size_t)c->num_nts, 1);
    c->productive = calloc((size_t)c->num_nts, 1);
    cr_assert(c->nullable && c->productive);
    for (bool changed = true; changed;) {
        changed = false;
        for (int p = 0; p < c->num_prods; p++) {
            bool ok = true;
            for (int i = 0; i < c->len[p] && ok; i++) ok = c->syms[c->begin[p] + i] < 0 || c->productive[c->syms[c->begin[p] + i]];
            if (ok && !c->productive[c->lhs[p]]) c->productive[c->lhs[p]] = changed = true;
        }
    }
    for (int p = 0; p < c->num_prods; p++) {
        c->usable[p] = true;
        for (int i = 0; i < c->len[p]; i++)
            if (c->syms[c->begin[p] + i] >= 0 && !c->productive[c->syms[c->begin[p] + i]]) c->usable[p] = false;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int p = 0; p < c->num_prods; p++) {
            bool ok = c->usable[p];
            for (int i = 0; i < c->len[p] && ok; i++) ok = c->syms[c->begin[p] + i] >= 0 && c->nullable[c->syms[c->begin[p] + i]];
            if (ok && !c->nullable[c->lhs[p]]) c->nullable[c->lhs[p]] = changed = true;
        }
    }
    return g;
}

static void cfg_free(Cfg *c) {
    free(c->nullable), free(c->productive);
    c->nullable = c->productive = NULL;
}

typedef struct EarleyItem {
    int prod, dot, origin;
} EarleyItem;

typedef struct EarleySet {
    EarleyItem *items;
    int n, cap;
    int *table; /* item index + 1, open addressing */
    int table_cap;
} EarleySet;

static bool earley_add(EarleySet *s, EarleyItem it) {
    if (2 * (s->n + 1) > s->table_cap) {
        int cap = s->table_cap ? 2 * s->table_cap : 64;
        int *t = calloc((size_t)cap, sizeof *t);
        cr_assert(t);
        for (int i = 0; i < s->n; i++) {
            uint32_t h = (uint32_t)(s->items[i].prod * 7919 + s->items[i].dot * 131 + s->items[i].origin) * 2654435761u;
            uint32_t k = h & (uint32_t)(cap - 1);
            while (t[k]) k = (k + 1) & (uint32_t)(cap - 1);
            t[k] = i + 1;
        }
        free(s->table);
        s->table = t, s->table_cap = cap;
    }
    uint32_t h = (uint32_t)(it.prod * 7919 + it.dot * 131 + it.origin) * 2654435761u;
    uint32_t k = h & (uint32_t)(s->table_cap - 1);
    for (; s->table[k]; k = (k + 1) & (uint32_t)(s->table_cap - 1)) {
        const EarleyItem *x = &s->items[s->table[k] - 1];
        if (x->prod == it.prod && x->dot == it.dot && x->origin == it.origin) return false;
    }
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->items = realloc(s->items, (size_t)s->cap * sizeof *s->items);
        cr_assert(s->items);
    }
    s->items[s->n] = it;
    s->table[k] = ++s->n;
    return true;
}

/* Earley with the Aycock-Horspool rule for nullable symbols: 1 when text is
 * in the language, 0 when not; *viable: some word of it starts with text. */
static int earley_match(const Cfg *c, const uint8_t *text, size_t len, bool *viable) {
    EarleySet *sets = calloc(len + 1, sizeof *sets);
    cr_assert(sets);
    earley_add(&sets[0], (EarleyItem){c->start_prod, 0, 0});
    size_t k = 0;
    for (;; k++) {
        EarleySet *s = &sets[k];
        for (int i = 0; i < s->n; i++) {
            EarleyItem it = s->items[i];
            if (it.dot < c->len[it.prod]) {
                int sym = c->syms[c->begin[it.prod] + it.dot];
                if (sym < 0) {
                    if (k < len && text[k] == (uint8_t)(-1 - sym))
                        earley_add(&sets[k + 1], (EarleyItem){it.prod, it.dot + 1, it.origin});
                    continue;
                }
                for (int p = 0; p < c->num_prods; p++)
                    if (c->lhs[p] == sym && c->usable[p]) earley_add(s, (EarleyItem){p, 0, (int)k});
                if (c->nullable[sym]) earley_add(s, (EarleyItem){it.prod, it.dot + 1, it.origin});
            } else {
                const EarleySet *from = &sets[it.origin];
                for (int j = 0; j < from->n; j++) {
                    EarleyItem up = from->items[j];
                    if (up.dot < c->len[up.prod] && c->syms[c->begin[up.prod] + up.dot] == c->lhs[it.prod])
                        earley_add(s, (EarleyItem){up.prod, up.dot + 1, up.origin});
                }
            }
        }
        if (k == len || sets[k + 1].n == 0) break;
    }
    *viable = k == len && sets[len].n > 0;
    int result = 0;
    for (int i = 0; *viable && i < sets[len].n; i++)
        if (sets[len].items[i].prod == c->start_prod && sets[len].items[i].dot == 1) result = 1;
    for (size_t i = 0; i <= len; i++) free(sets[i].items), free(sets[i].table);
    free(sets);
    return result;
}

static const char *const random_grammar_pieces[] = {"a", "b", "c", "d", "\xc3\xa9", "\xc3\xaa", "\xe4\xb8\xad",
                                                    "\xe4\xb8\xae", "\xc3", "\xa9", "\xe4\xb8", "\xad", NULL};

/* compiled_grammar_match against Earley: texts grown byte by byte along
 * viable paths (every candidate byte compared), and random texts. */
Test(token_matcher, random_grammars_compile_to_their_languages) {
    static Cfg cfg;
    const uint8_t candidates[] = {'a', 'b', 'c', 'd', 'e', 0xC3, 0xA9, 0xAA, 0xE4, 0xB8, 0xAD, 0xAE, 0x80};
    int compiled = 0, refused_empty = 0, compared = 0, positives = 0;
    for (uint64_t seed = 1; seed <= 400; seed++) {
        Grammar *g = random_grammar(seed, &cfg);
        Error err;
        CompiledGrammar *cg = grammar_compile(g, &err);
        grammar_free(g);
        bool accepts_something = cfg.productive[0];
        if (!cg) {
            cr_assert(strstr(err.msg, "left-recursive") || strstr(err.msg, "accepts nothing"), "seed %llu: %s",
                      (unsigned long long)seed, err.msg);
            if (strstr(err.msg, "accepts nothing")) {
                cr_assert(!accepts_something, "seed %llu: refused as accepting nothing, but it does", (unsigned long long)seed);
                refused_empty++;
            }
            cfg_free(&cfg);
            continue;
        }
        cr_assert(accepts_something, "seed %llu: compiled, but its root accepts nothing", (unsigned long long)seed);
        compiled++;
        Rng rng = rng_seeded(seed ^ 0xABCDEF);
        for (int walk = 0; walk < 4; walk++) {
            uint8_t text[24]; /* short: some random grammars have exponentially many parse stacks */
            size_t len = 0;
            for (;;) {
                bool v_cg = false, v_earley = false;
                int m_cg = compiled_grammar_match(cg, text, len, &v_cg), m_earley = earley_match(&cfg, text, len, &v_earley);
                cr_assert(m_cg == m_earley && v_cg == v_earley,
                          "seed %llu, \"%s\": compiled match %d viable %d, Earley match %d viable %d",
                          (unsigned long long)seed, escaped(text, len, 0), m_cg, v_cg, m_earley, v_earley);
                compared++, positives += m_cg;
                if (len + 1 >= sizeof text || (m_cg && rng_below(&rng, 4) == 0)) break;
                uint8_t next[sizeof candidates];
                int num_next = 0;
                for (size_t i = 0; i < sizeof candidates; i++) {
                    text[len] = candidates[i];
                    v_cg = viable(cg, text, len + 1);
                    earley_match(&cfg, text, len + 1, &v_earley);
                    cr_assert_eq(v_cg, v_earley, "seed %llu, \"%s\": viable %d compiled, %d Earley", (unsigned long long)seed,
                                 escaped(text, len + 1, 0), v_cg, v_earley);
                    compared++;
                    if (v_cg) next[num_next++] = candidates[i];
                }
                if (!num_next) break;
                text[len++] = next[rng_below(&rng, (uint32_t)num_next)];
            }
        }
        for (int i = 0; i < 100; i++) {
            char buf[64];
            size_t len = random_text(&rng, random_grammar_pieces, 6, buf, sizeof buf);
            bool v_cg = false, v_earley = false;
            int m_cg = compiled_grammar_match(cg, buf, len, &v_cg), m_earley = earley_match(&cfg, (const uint8_t *)buf, len, &v_earley);
            cr_assert(m_cg == m_earley && v_cg == v_earley, "seed %llu, \"%s\": compiled match %d viable %d, Earley %d %d",
                      (unsigned long long)seed, escaped(buf, len, 0), m_cg, v_cg, m_earley, v_earley);
            compared++;
        }
        compiled_grammar_free(cg);
        cfg_free(&cfg);
    }
    cr_assert_geq(compiled, 250, "only %d of 400 random grammars compiled", compiled);
    cr_assert_gt(refused_empty, 0, "no random grammar accepted nothing: that check never ran");
    cr_assert_gt(positives, 1000, "only %d whole matches among %d comparisons", positives, compared);
}

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

/* ---- the compiler, through compiled_grammar_match ------------------------------- */

/* Defines rule "root" as body and compiles; the Grammar stays the caller's. */
static CompiledGrammar *compile_root(Grammar *g, GExpr body) {
    int root = grammar_rule(g, "root");
    grammar_define(g, root, body);
    grammar_set_root(g, root);
    cr_assert_null(grammar_error(g), "%s", grammar_error(g));
    Error err;
    CompiledGrammar *cg = grammar_compile(g, &err);
    cr_assert(cg, "does not compile: %s", err.msg);
    return cg;
}

static CompiledGrammar *compile_one(GExpr (*make)(Grammar *g)) {
    Grammar *g = grammar_new();
    cr_assert(g);
    CompiledGrammar *cg = compile_root(g, make(g));
    grammar_free(g);
    return cg;
}

/* The message of a grammar that must not compile (kind ERROR_INVALID). */
static const char *compile_error(const Grammar *g) {
    static Error err;
    err = (Error){0};
    CompiledGrammar *cg = grammar_compile(g, &err);
    cr_assert_null(cg, "the grammar should be refused");
    cr_expect_eq(err.kind, ERROR_INVALID, "'%s' has kind %d", err.msg, err.kind);
    return err.msg;
}



/* The length of the one well-formed UTF-8 scalar value at s (shortest form,
 * no surrogates, at most U+10FFFF), or 0. */
static size_t utf8_decode_cp(const uint8_t *s, size_t len, uint32_t *cp) {
    if (!len) return 0;
    size_t n = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || n > len) return 0;
    uint32_t c = n == 1 ? s[0] : n == 2 ? s[0] & 0x1Fu : n == 3 ? s[0] & 0x0Fu : s[0] & 0x07u;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = c << 6 | (s[i] & 0x3Fu);
    }
    static const uint32_t min_of_len[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min_of_len[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return n;
}

static bool in_bounded_string_set(uint32_t c) {
    for (int i = 0; i < 4; i++)
        if (c >= bounded_string_set[2 * i] && c <= bounded_string_set[2 * i + 1]) return true;
    return false;
}

/* build_bounded_string by hand: 1 match, 0 not, -1 unspecified (a \u escape
 * of a character that has another form, or upper-case hex: one spelling per
 * character is what the grammar writes, and which one is not pinned here). */
static int bounded_string_by_hand(const uint8_t *s, size_t len) {
    if (len < 2 || s[0] != '"' || s[len - 1] != '"') return 0;
    size_t i = 1, end = len - 1;
    int count = 0;
    while (i < end) {
        uint32_t c;
        size_t n;
        if (s[i] == '\\') {
            if (i + 1 >= end) return 0;
            n = 2;
            switch (s[i + 1]) {
            case '"': c = '"'; break;
            case '\\': c = '\\'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u': {
                if (i + 6 > end) return 0;
                c = 0;
                for (int k = 2; k < 6; k++) {
                    uint8_t h = s[i + (size_t)k];
                    int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? -2 : -1;
                    if (d == -1) return 0;
                    if (d == -2) return -1;
                    c = c << 4 | (uint32_t)d;
                }
                if (c >= 0x20 || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t') return -1;
                n = 6;
                break;
            }
            default: return 0;
            }
        } else {
            n = utf8_decode_cp(s + i, end - i, &c);
            if (!n || c < 0x20 || c == '"' || c == '\\') return 0;
        }
        if (!in_bounded_string_set(c)) return 0;
        i += n;
        count++;
    }
    return count <= 5;
}

Test(token_matcher, compiler_bounded_string_agrees_with_a_hand_written_check) {
    CompiledGrammar *cg = compile_built(build_bounded_string, "bounded string");
    const char *const pieces[] = {"\"", "\"", "a", "~", "\\", "\\\"", "\\\\", "\\n", "\\b", "\\u00", "\\u001f",
                                  "\\u0007", "1", "f", "F", "0", "\xc3\xa9", "\xc3\xa8", "\xe4\xb8\xad", "\xe4",
                                  "\xb8\xad", "\xf0\x9f\x98\x80", "\xf0\x9f\x9a\x80", "\x80", "\x7f", "\n", "\x1f",
                                  "\xed\xa0\x80", "\xe0\x80\xa1", NULL};
    Rng rng = rng_seeded(5);
    int positives = 0, checked = 0;
    for (int i = 0; i < 30000; i++) {
        char buf[128];
        size_t len = random_text(&rng, pieces, 8, buf + 1, sizeof buf - 2) + 1;
        buf[0] = '"'; /* most texts start right */
        if (rng_below(&rng, 2)) buf[len++] = '"';
        int want = bounded_string_by_hand((const uint8_t *)buf, len);
        if (want < 0) continue;
        bool got = compiled_grammar_match(cg, buf, len, NULL) == 1;
        cr_assert_eq(got, want, "\"%s\": match %d, by hand %d", escaped(buf, len, 0), got, want);
        positives += want, checked++;
    }
    cr_assert_gt(positives, 500, "only %d of %d random texts match: the test proves little", positives, checked);
    /* The bounds, exactly. */
    cr_expect(matches(cg, "\"\""));
    cr_expect(matches(cg, "\"\\u001f\\\"\xf0\x9f\x98\x80\xe4\xb8\xad\xc3\xa9\""));
    cr_expect(!matches(cg, "\"abcdef\""));
    cr_expect(!matches(cg, "\"\xe4\xb8\""), "half a character");
    cr_expect(viable(cg, "\"\xe4\xb8", 3));
    cr_expect(!viable(cg, "\"\xe4\xb8\"", 4));
    cr_expect(!viable(cg, "\"abcde\\", 7), "a sixth character may not start");
    compiled_grammar_free(cg);
}

Test(token_matcher, compiler_choice_agrees_with_a_hand_written_check) {
    CompiledGrammar *cg = compile_built(build_choice, "choice");
    Rng rng = rng_seeded(9);
    int positives = 0;
    for (int i = 0; i < 20000; i++) {
        char buf[128];
        size_t len = random_text(&rng, i % 2 ? choice_pieces : choice_curated, i % 2 ? 7 : 3, buf, sizeof buf);
        bool v = false;
        bool got = compiled_grammar_match(cg, buf, len, &v) == 1;
        cr_assert_eq(got, choice_matches(buf, len), "\"%s\": match %d", escaped(buf, len, 0), got);
        cr_assert_eq(v, choice_viable(buf, len), "\"%s\": viable %d", escaped(buf, len, 0), v);
        positives += got;
    }
    cr_assert_gt(positives, 20);
    compiled_grammar_free(cg);
}

/* ---- equivalent grammars written differently ---- */

/* ("a"|"b")* "c"  and  "a"* ("b" "a"*)* "c" */
static GExpr star_ab_c(Grammar *g) {
    return g_seq2(g, g_repeat(g, g_alt2(g, g_str(g, "a"), g_str(g, "b")), 0, G_UNBOUNDED), g_str(g, "c"));
}
static GExpr star_a_b_star_a_c(Grammar *g) {
    GExpr as = g_repeat(g, g_str(g, "a"), 0, G_UNBOUNDED);
    return g_seq(g, EXPRS(as, g_repeat(g, g_seq2(g, g_str(g, "b"), as), 0, G_UNBOUNDED), g_str(g, "c")));
}
/* "x"{2,4}  and  "xx" | "xxx" | "xxxx" */
static GExpr x_two_to_four(Grammar *g) { return g_repeat(g, g_str(g, "x"), 2, 4); }
static GExpr x_listed(Grammar *g) { return g_alt(g, EXPRS(g_str(g, "xx"), g_str(g, "xxx"), g_str(g, "xxxx"))); }
/* "ac" | "bc" | "abc"  and  ("a" "b"? | "b") "c" */
static GExpr ac_bc_abc(Grammar *g) { return g_alt(g, EXPRS(g_str(g, "ac"), g_str(g, "bc"), g_str(g, "abc"))); }
static GExpr a_opt_b_or_b_then_c(Grammar *g) {
    return g_seq2(g, g_alt2(g, g_seq2(g, g_str(g, "a"), g_optional(g, g_str(g, "b"))), g_str(g, "b")), g_str(g, "c"));
}
/* Balanced parentheses: S ::= "(" S ")" S | ""  and  S ::= ("(" S ")")* */
static GExpr dyck_recursive(Grammar *g) {
    int s = grammar_rule(g, "S");
    grammar_define(g, s, g_alt2(g, g_seq(g, EXPRS(g_str(g, "("), g_ref(g, s), g_str(g, ")"), g_ref(g, s))), g_empty(g)));
    return g_ref(g, s);
}
static GExpr dyck_starred(Grammar *g) {
    int s = grammar_rule(g, "S");
    grammar_define(g, s, g_repeat(g, g_seq(g, EXPRS(g_str(g, "("), g_ref(g, s), g_str(g, ")"))), 0, G_UNBOUNDED));
    return g_ref(g, s);
}
/* 1 to 3 letters: code points (given reversed, overlapping) and a rule of byte ranges */
static GExpr letters_codepoints(Grammar *g) {
    const uint32_t ranges[] = {'z', 'a', 'A', 'Z', 'c', 'f'};
    return g_repeat(g, g_codepoints(g, ranges, 3, G_UTF8), 1, 3);
}
static GExpr letters_rule(Grammar *g) {
    int letter = grammar_rule(g, "letter");
    grammar_define(g, letter, g_alt2(g, g_byte_range(g, 'a', 'z'), g_byte_range(g, 'A', 'Z')));
    GExpr l = g_ref(g, letter);
    return g_seq2(g, l, g_optional(g, g_seq2(g, l, g_optional(g, l))));
}
/* (a? b?){0,3} "!"  and  a? b? a? b? a? b? "!" through nullable rules */
static GExpr nullable_repeat(Grammar *g) {
    GExpr body = g_seq2(g, g_optional(g, g_str(g, "a")), g_optional(g, g_str(g, "b")));
    return g_seq2(g, g_repeat(g, body, 0, 3), g_str(g, "!"));
}
static GExpr nullable_rules_unrolled(Grammar *g) {
    int oa = grammar_rule(g, "oa"), ob = grammar_rule(g, "ob");
    grammar_define(g, oa, g_optional(g, g_str(g, "a")));
    grammar_define(g, ob, g_optional(g, g_str(g, "b")));
    GExpr a = g_ref(g, oa), b = g_ref(g, ob);
    return g_seq(g, EXPRS(a, b, a, b, a, b, g_str(g, "!")));
}
/* X "z" | Y "z" with X ::= "ab", Y ::= "a" "b"  and  "abz" */
static GExpr two_rules_same_text(Grammar *g) {
    int x = grammar_rule(g, "X"), y = grammar_rule(g, "Y");
    grammar_define(g, x, g_str(g, "ab"));
    grammar_define(g, y, g_seq2(g, g_str(g, "a"), g_str(g, "b")));
    return g_alt2(g, g_seq2(g, g_ref(g, x), g_str(g, "z")), g_seq2(g, g_ref(g, y), g_str(g, "z")));
}
static GExpr abz(Grammar *g) { return g_str(g, "abz"); }
/* "a" X "!" | "b" Y "!" with X ::= "x", Y ::= "y" (states that differ only in
 * the rule they call)  and  "ax!" | "by!" */
static GExpr calls_differ(Grammar *g) {
    int x = grammar_rule(g, "X"), y = grammar_rule(g, "Y");
    grammar_define(g, x, g_str(g, "x"));
    grammar_define(g, y, g_str(g, "y"));
    return g_alt2(g, g_seq(g, EXPRS(g_str(g, "a"), g_ref(g, x), g_str(g, "!"))),
                  g_seq(g, EXPRS(g_str(g, "b"), g_ref(g, y), g_str(g, "!"))));
}
static GExpr ax_or_by(Grammar *g) { return g_alt2(g, g_str(g, "ax!"), g_str(g, "by!")); }
/* U+0000..U+007F inside a JSON string: the code point set and the escapes spelled out */
static GExpr ascii_json_codepoints(Grammar *g) {
    const uint32_t ranges[] = {0, 0x7F};
    return g_codepoints(g, ranges, 1, G_JSON_STRING);
}
static GExpr ascii_json_by_hand(Grammar *g) {
    GExpr alts[48];
    int n = 0;
    for (uint32_t c = 0; c < 0x20; c++) {
        char buf[8];
        const char *named = c == '\b' ? "\\b" : c == '\f' ? "\\f" : c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
        if (!named) snprintf(buf, sizeof buf, "\\u%04x", c);
        alts[n++] = g_str(g, named ? named : buf);
    }
    alts[n++] = g_byte_range(g, 0x20, 0x21);
    alts[n++] = g_str(g, "\\\"");
    alts[n++] = g_byte_range(g, 0x23, 0x5B);
    alts[n++] = g_str(g, "\\\\");
    alts[n++] = g_byte_range(g, 0x5D, 0x7F);
    return g_alt(g, alts, n);
}

typedef struct EquivalentPair {
    const char *name;
    GExpr (*a)(Grammar *g);
    GExpr (*b)(Grammar *g);
    const char *const *pieces;
    bool same_states; /* single rules without dead branches: the minimal automata are the same size */
} EquivalentPair;

Test(token_matcher, compiler_equivalent_grammars_agree_after_minimization) {
    const EquivalentPair pairs[] = {
        {"(a|b)*c", star_ab_c, star_a_b_star_a_c, STRS("a", "b", "c", "d"), true},
        {"x{2,4}", x_two_to_four, x_listed, STRS("x", "x", "y"), true},
        {"ac|bc|abc", ac_bc_abc, a_opt_b_or_b_then_c, STRS("a", "b", "c"), true},
        {"dyck", dyck_recursive, dyck_starred, STRS("(", ")", "()", "x"), false},
        {"letters", letters_codepoints, letters_rule, STRS("a", "z", "A", "Z", "m", "{", "@", "`", "[", "0", "\xc3\xa9"), false},
        {"(a?b?){0,3}!", nullable_repeat, nullable_rules_unrolled, STRS("a", "b", "!", "ab", "ba"), false},
        {"X z | Y z", two_rules_same_text, abz, STRS("a", "b", "z", "ab"), false},
        {"a X ! | b Y !", calls_differ, ax_or_by, STRS("a", "b", "x", "y", "!", "ax", "by", "ay", "bx", "ax!", "by!", "ay!", "bx!"), false},
        {"ascii json", ascii_json_codepoints, ascii_json_by_hand,
         STRS("a", "\"", "\\", "\\\"", "\\\\", "\\n", "\\u00", "1f", "0a", "\x7f", "\x1f", "\n", "\\b", "/", "]", "\\u"), false},
    };
    for (size_t p = 0; p < sizeof pairs / sizeof *pairs; p++) {
        CompiledGrammar *a = compile_one(pairs[p].a), *b = compile_one(pairs[p].b);
        if (pairs[p].same_states)
            cr_expect_eq(compiled_grammar_num_states(a), compiled_grammar_num_states(b), "%s: %d states against %d",
                         pairs[p].name, compiled_grammar_num_states(a), compiled_grammar_num_states(b));
        Rng rng = rng_seeded(100 + p);
        int positives = 0;
        for (int i = 0; i < 4000; i++) {
            char buf[128];
            size_t len = random_text(&rng, pairs[p].pieces, 9, buf, sizeof buf);
            bool va = false, vb = false;
            int ma = compiled_grammar_match(a, buf, len, &va), mb = compiled_grammar_match(b, buf, len, &vb);
            cr_assert_eq(ma, mb, "%s: \"%s\" matches %d one way, %d the other", pairs[p].name, escaped(buf, len, 0), ma, mb);
            cr_assert_eq(va, vb, "%s: \"%s\" viable %d one way, %d the other", pairs[p].name, escaped(buf, len, 0), va, vb);
            positives += ma;
        }
        cr_expect_gt(positives, 10, "%s: only %d random texts match", pairs[p].name, positives);
        compiled_grammar_free(a);
        compiled_grammar_free(b);
    }
}

/* Minimization merges states that behave the same: "ac" | "bc" is [ab] "c". */
static GExpr ac_or_bc(Grammar *g) { return g_alt2(g, g_str(g, "ac"), g_str(g, "bc")); }
static GExpr ab_class_c(Grammar *g) { return g_seq2(g, g_byte_range(g, 'a', 'b'), g_str(g, "c")); }

Test(token_matcher, compiler_minimization_merges_equivalent_states) {
    CompiledGrammar *a = compile_one(ac_or_bc), *b = compile_one(ab_class_c);
    cr_expect_eq(compiled_grammar_num_states(a), compiled_grammar_num_states(b), "%d states against %d",
                 compiled_grammar_num_states(a), compiled_grammar_num_states(b));
    cr_expect_eq(compiled_grammar_num_states(b), 3, "[ab]c needs 3 states, has %d", compiled_grammar_num_states(b));
    cr_expect(matches(a, "ac") && matches(a, "bc") && !matches(a, "cc") && !matches(a, "a"));
    compiled_grammar_free(a);
    compiled_grammar_free(b);
}

/* Minimization when every state of the grammar is final: the partition
 * starts as one block, and a bounded repetition must not become a star. */
static GExpr ab_up_to_three(Grammar *g) { return g_repeat(g, g_byte_range(g, 'a', 'b'), 0, 3); }
static GExpr optional_ab_one_to_three(Grammar *g) {
    return g_repeat(g, g_optional(g, g_byte_range(g, 'a', 'b')), 1, 3);
}

Test(token_matcher, compiler_bounded_repetition_when_every_state_is_final) {
    GExpr (*const makers[])(Grammar *g) = {ab_up_to_three, optional_ab_one_to_three};
    for (size_t i = 0; i < sizeof makers / sizeof *makers; i++) {
        CompiledGrammar *cg = compile_one(makers[i]);
        cr_expect(matches(cg, "") && matches(cg, "b") && matches(cg, "aba"), "case %zu", i);
        cr_expect(!matches(cg, "abab") && !viable(cg, "abab", 4), "case %zu: four letters of at most three", i);
        compiled_grammar_free(cg);
    }
}

/* ---- refusals ---- */

Test(token_matcher, compiler_refuses_left_recursion) {
    /* A ::= A "x" | "y" */
    Grammar *g = grammar_new();
    int a = grammar_rule(g, "A");
    grammar_define(g, a, g_alt2(g, g_seq2(g, g_ref(g, a), g_str(g, "x")), g_str(g, "y")));
    const char *msg = compile_error(g);
    cr_expect(strstr(msg, "left-recursive") && strstr(msg, "'A'"), "direct: %s", msg);
    grammar_free(g);

    /* A ::= N A "x" | "y", N ::= "n"? - through a rule that matches "" */
    g = grammar_new();
    a = grammar_rule(g, "A");
    int n = grammar_rule(g, "N");
    grammar_define(g, a, g_alt2(g, g_seq(g, EXPRS(g_ref(g, n), g_ref(g, a), g_str(g, "x"))), g_str(g, "y")));
    grammar_define(g, n, g_optional(g, g_str(g, "n")));
    msg = compile_error(g);
    cr_expect(strstr(msg, "left-recursive"), "through a nullable rule: %s", msg);
    grammar_free(g);

    /* A ::= N B "x" | "y", B ::= A "z" | "w", N ::= ("n" | E), E ::= "" - indirect, two nullable levels */
    g = grammar_new();
    a = grammar_rule(g, "A");
    int b = grammar_rule(g, "B");
    n = grammar_rule(g, "N");
    int e = grammar_rule(g, "E");
    grammar_define(g, a, g_alt2(g, g_seq(g, EXPRS(g_ref(g, n), g_ref(g, b), g_str(g, "x"))), g_str(g, "y")));
    grammar_define(g, b, g_alt2(g, g_seq2(g, g_ref(g, a), g_str(g, "z")), g_str(g, "w")));
    grammar_define(g, n, g_alt2(g, g_str(g, "n"), g_ref(g, e)));
    grammar_define(g, e, g_empty(g));
    msg = compile_error(g);
    cr_expect(strstr(msg, "left-recursive"), "indirect through nullable rules: %s", msg);
    grammar_free(g);

    /* R ::= "(" R? ")" | S, S ::= S? "s" - left recursion in a rule below the root */
    g = grammar_new();
    int r = grammar_rule(g, "R"), s = grammar_rule(g, "S");
    grammar_define(g, r, g_alt2(g, g_seq(g, EXPRS(g_str(g, "("), g_optional(g, g_ref(g, r)), g_str(g, ")"))), g_ref(g, s)));
    grammar_define(g, s, g_seq2(g, g_optional(g, g_ref(g, s)), g_str(g, "s")));
    msg = compile_error(g);
    cr_expect(strstr(msg, "left-recursive") && strstr(msg, "'S'"), "below the root: %s", msg);
    grammar_free(g);
}

Test(token_matcher, compiler_accepts_recursion_that_reads_first) {
    /* A ::= N "m" A | "y" with N nullable; A ::= "x" A?; S ::= "(" S ")" S | "" */
    Grammar *g = grammar_new();
    int a = grammar_rule(g, "A"), n = grammar_rule(g, "N"), x = grammar_rule(g, "X");
    grammar_define(g, a, g_alt2(g, g_seq(g, EXPRS(g_ref(g, n), g_str(g, "m"), g_ref(g, a))), g_ref(g, x)));
    grammar_define(g, n, g_optional(g, g_str(g, "n")));
    grammar_define(g, x, g_seq2(g, g_str(g, "x"), g_optional(g, g_ref(g, x))));
    Error err;
    CompiledGrammar *cg = grammar_compile(g, &err);
    cr_assert(cg, "%s", err.msg);
    cr_expect(matches(cg, "x") && matches(cg, "mnmxxx") && matches(cg, "nmx"));
    cr_expect(!matches(cg, "") && !matches(cg, "m") && !matches(cg, "nnmx") && !matches(cg, "xm"));
    compiled_grammar_free(cg);
    grammar_free(g);
}

Test(token_matcher, compiler_refuses_undefined_and_twice_defined_rules) {
    Grammar *g = grammar_new();
    int root = grammar_rule(g, "root");
    grammar_define(g, root, g_seq2(g, g_str(g, "a"), g_ref(g, grammar_rule(g, "missing-rule"))));
    cr_expect_null(grammar_error(g));
    const char *msg = compile_error(g);
    cr_expect(strstr(msg, "without defining it") && strstr(msg, "missing-rule"), "%s", msg);
    grammar_free(g);

    g = grammar_new();
    root = grammar_rule(g, "root");
    cr_assert_eq(grammar_define(g, root, g_str(g, "a")), 0);
    cr_expect(grammar_rule_defined(g, root));
    cr_expect_eq(grammar_define(g, root, g_str(g, "b")), -1);
    cr_assert(grammar_error(g) && strstr(grammar_error(g), "defined twice") && strstr(grammar_error(g), "root"), "%s",
              grammar_error(g) ? grammar_error(g) : "(no error)");
    /* Sticky: later calls fail, and compiling reports the first error. */
    cr_expect_eq(g_str(g, "c"), G_ERROR);
    msg = compile_error(g);
    cr_expect(strstr(msg, "defined twice"), "%s", msg);
    grammar_free(g);

    g = grammar_new();
    msg = compile_error(g);
    cr_expect(strstr(msg, "no rules"), "%s", msg);
    grammar_free(g);
}

static GExpr endless_recursion(Grammar *g) {
    int loop = grammar_rule(g, "loop");
    grammar_define(g, loop, g_seq2(g, g_str(g, "x"), g_ref(g, loop)));
    return g_ref(g, loop);
}
static GExpr empty_alternative(Grammar *g) { return g_alt(g, NULL, 0); }
static GExpr empty_codepoint_set(Grammar *g) { return g_codepoints(g, NULL, 0, G_UTF8); }
static GExpr only_surrogates(Grammar *g) {
    const uint32_t ranges[] = {0xD800, 0xDFFF};
    return g_codepoints(g, ranges, 1, G_UTF8);
}
static GExpr reversed_byte_range(Grammar *g) { return g_seq2(g, g_str(g, "a"), g_byte_range(g, 'z', 'a')); }
static GExpr everything_negated(Grammar *g) {
    const uint32_t ranges[] = {0, 0x10FFFF};
    return g_codepoints_not(g, ranges, 1, G_JSON_STRING);
}

Test(token_matcher, compiler_refuses_grammars_that_accept_nothing) {
    GExpr (*const makers[])(Grammar *g) = {endless_recursion, empty_alternative, empty_codepoint_set, only_surrogates,
                                           reversed_byte_range, everything_negated};
    for (size_t i = 0; i < sizeof makers / sizeof *makers; i++) {
        Grammar *g = grammar_new();
        int root = grammar_rule(g, "root");
        grammar_define(g, root, makers[i](g));
        cr_expect_null(grammar_error(g), "case %zu: %s", i, grammar_error(g));
        const char *msg = compile_error(g);
        cr_expect(strstr(msg, "accepts nothing"), "case %zu: %s", i, msg);
        grammar_free(g);
    }
}

/* A branch that can never complete is cut: its first byte is not even viable. */
Test(token_matcher, compiler_cuts_branches_that_never_complete) {
    Grammar *g = grammar_new();
    int root = grammar_rule(g, "root"), bad = grammar_rule(g, "bad");
    grammar_define(g, root, g_alt2(g, g_str(g, "a"), g_seq2(g, g_str(g, "b"), g_ref(g, bad))));
    grammar_define(g, bad, g_seq2(g, g_str(g, "c"), g_ref(g, bad)));
    Error err;
    CompiledGrammar *cg = grammar_compile(g, &err);
    cr_assert(cg, "%s", err.msg);
    cr_expect(matches(cg, "a"));
    cr_expect(!viable(cg, "b", 1), "\"b\" can never be completed");
    cr_expect(!viable(cg, "bcc", 3));
    compiled_grammar_free(cg);
    grammar_free(g);
}

/* ---- code points ---- */

static CompiledGrammar *compile_codepoints(const uint32_t *ranges, int n, bool negate, GEncoding enc) {
    Grammar *g = grammar_new();
    GExpr e = negate ? g_codepoints_not(g, ranges, n, enc) : g_codepoints(g, ranges, n, enc);
    CompiledGrammar *cg = compile_root(g, e);
    grammar_free(g);
    return cg;
}

static bool matches_cp(const CompiledGrammar *cg, uint32_t c) {
    uint8_t b[4];
    int n = utf8_encode_cp(c, b);
    return compiled_grammar_match(cg, b, (size_t)n, NULL) == 1;
}

static bool is_surrogate(uint32_t c) { return c >= 0xD800 && c <= 0xDFFF; }

Test(token_matcher, codepoints_leave_out_surrogates) {
    const uint32_t around[] = {0xD000, 0xE000};
    CompiledGrammar *cg = compile_codepoints(around, 1, false, G_UTF8);
    cr_expect(matches(cg, "\xed\x80\x80"), "U+D000");
    cr_expect(matches(cg, "\xed\x9f\xbf"), "U+D7FF");
    cr_expect(!matches(cg, "\xed\xa0\x80"), "U+D800 is a surrogate");
    cr_expect(!matches(cg, "\xed\xbf\xbf"), "U+DFFF is a surrogate");
    cr_expect(!viable(cg, "\xed\xa0", 2));
    cr_expect(matches(cg, "\xee\x80\x80"), "U+E000");
    cr_expect(!matches(cg, "\xee\x80\x81"), "U+E001 is past the range");
    compiled_grammar_free(cg);
    const uint32_t a_only[] = {'a', 'a'};
    cg = compile_codepoints(a_only, 1, true, G_UTF8);
    cr_expect(!matches(cg, "\xed\xa0\x80") && !matches(cg, "\xed\xb0\x80"), "surrogates are not characters");
    cr_expect(matches(cg, "b") && !matches(cg, "a"));
    compiled_grammar_free(cg);
}

Test(token_matcher, codepoints_reach_u10ffff_and_no_further) {
    const uint32_t top[] = {0x10FFFF, 0x10FFFF};
    CompiledGrammar *cg = compile_codepoints(top, 1, false, G_UTF8);
    cr_expect(matches(cg, "\xf4\x8f\xbf\xbf"));
    cr_expect(!matches(cg, "\xf4\x8f\xbf\xbe"));
    compiled_grammar_free(cg);
    const uint32_t beyond[] = {0x10FFF0, 0x7FFFFFFF};
    cg = compile_codepoints(beyond, 1, false, G_UTF8);
    cr_expect(matches(cg, "\xf4\x8f\xbf\xbf") && matches(cg, "\xf4\x8f\xbf\xb0"));
    cr_expect(!matches(cg, "\xf4\x90\x80\x80"), "U+110000 is not a code point");
    compiled_grammar_free(cg);
    cg = compile_codepoints(NULL, 0, true, G_UTF8); /* every character */
    cr_expect(matches(cg, "\xf4\x8f\xbf\xbf"));
    cr_expect(!viable(cg, "\xf4\x90", 2) && !viable(cg, "\xf5", 1) && !viable(cg, "\xf8", 1) && !viable(cg, "\xff", 1));
    cr_expect(!viable(cg, "\xc0", 1) && !viable(cg, "\xc1", 1), "overlong two-byte forms");
    cr_expect(!viable(cg, "\xe0\x80", 2) && !viable(cg, "\xf0\x80", 2), "overlong three and four-byte forms");
    cr_expect(!viable(cg, "\x80", 1), "a lone continuation byte");
    cr_expect(compiled_grammar_match(cg, "\0", 1, NULL) == 1, "U+0000");
    compiled_grammar_free(cg);
}

Test(token_matcher, codepoints_every_scalar_value_is_one_character) {
    CompiledGrammar *cg = compile_codepoints(NULL, 0, true, G_UTF8);
    for (uint32_t c = 0; c <= 0x10FFFF; c++) {
        if (c >= 0x800 && (c & 0x3F) != 0 && (c & 0x3F) != 0x3F && c % 61 != 0 && !(c >= 0xD7F0 && c <= 0xE010)) continue;
        cr_assert_eq(matches_cp(cg, c), !is_surrogate(c), "U+%04X", c);
    }
    /* Random byte strings: a match iff they are one well-formed character. */
    Rng rng = rng_seeded(3);
    for (int i = 0; i < 60000; i++) {
        uint8_t b[4];
        size_t len = 1 + rng_below(&rng, 4);
        for (size_t k = 0; k < len; k++)
            b[k] = (uint8_t)(k == 0 ? (rng_below(&rng, 2) ? 0xC0 + rng_below(&rng, 0x40) : rng_below(&rng, 256))
                                    : rng_below(&rng, 4) ? 0x80 + rng_below(&rng, 0x40) : rng_below(&rng, 256));
        uint32_t c;
        bool want = utf8_decode_cp(b, len, &c) == len;
        cr_assert_eq(compiled_grammar_match(cg, b, len, NULL) == 1, want, "\"%s\"", escaped(b, len, 0));
    }
    compiled_grammar_free(cg);
}

/* Random sets of ranges (any order, overlapping, reversed) and their
 * complements against direct membership. */
Test(token_matcher, codepoints_random_sets_and_complements) {
    Rng rng = rng_seeded(11);
    static const uint32_t scales[] = {0x80, 0x800, 0x10000, 0x110000, 0x200000};
    for (int set = 0; set < 150; set++) {
        uint32_t ranges[8];
        int n = 1 + (int)rng_below(&rng, 4);
        for (int i = 0; i < 2 * n; i += 2) {
            uint32_t scale = scales[rng_below(&rng, 5)];
            ranges[i] = rng_below(&rng, scale);
            ranges[i + 1] = rng_below(&rng, 3) ? ranges[i] + rng_below(&rng, scale / 4 + 1) : rng_below(&rng, scale);
        }
        bool all_surrogate_or_empty = true;
        for (int i = 0; i < 2 * n; i += 2) {
            uint32_t lo = ranges[i] < ranges[i + 1] ? ranges[i] : ranges[i + 1], hi = ranges[i] ^ ranges[i + 1] ^ lo;
            if (lo <= 0x10FFFF && !(lo >= 0xD800 && hi <= 0xDFFF)) all_surrogate_or_empty = false;
        }
        if (all_surrogate_or_empty) continue; /* that grammar accepts nothing: refused, tested above */
        CompiledGrammar *in = compile_codepoints(ranges, n, false, G_UTF8);
        CompiledGrammar *out = compile_codepoints(ranges, n, true, G_UTF8);
        for (int probe = 0; probe < 300; probe++) {
            uint32_t c;
            if (probe < 4 * n) { /* every range's ends, and one past them */
                int i = probe / 2;
                c = ranges[i] + (probe % 2 ? 1 : 0) - (probe % 4 == 2 ? 1 : 0);
            } else {
                c = rng_below(&rng, scales[rng_below(&rng, 4)]);
            }
            if (c > 0x10FFFF) continue;
            bool member = false;
            for (int i = 0; i < 2 * n; i += 2) {
                uint32_t lo = ranges[i] < ranges[i + 1] ? ranges[i] : ranges[i + 1], hi = ranges[i] ^ ranges[i + 1] ^ lo;
                member |= c >= lo && c <= hi;
            }
            member &= !is_surrogate(c);
            cr_assert_eq(matches_cp(in, c), member, "set %d, U+%04X: in the set %d", set, c, member);
            cr_assert_eq(matches_cp(out, c), !member && !is_surrogate(c), "set %d, U+%04X: complement", set, c);
        }
        compiled_grammar_free(in);
        compiled_grammar_free(out);
    }
}

Test(token_matcher, codepoints_encoding_boundaries_and_reversed_ranges) {
    const uint32_t across_lengths[] = {0x7F, 0x80, 0x800, 0x7FF, 0xFFFF, 0x10000};
    CompiledGrammar *cg = compile_codepoints(across_lengths, 3, false, G_UTF8);
    cr_expect(matches(cg, "\x7f") && matches(cg, "\xc2\x80") && !matches(cg, "\xc2\x81"));
    cr_expect(matches(cg, "\xdf\xbf") && matches(cg, "\xe0\xa0\x80") && !matches(cg, "\xe0\xa0\x81"));
    cr_expect(matches(cg, "\xef\xbf\xbf") && matches(cg, "\xf0\x90\x80\x80") && !matches(cg, "\xf0\x90\x80\x81"));
    compiled_grammar_free(cg);
    const uint32_t reversed[] = {'z', 'a'}, forward[] = {'a', 'z'};
    CompiledGrammar *r = compile_codepoints(reversed, 1, false, G_UTF8), *f = compile_codepoints(forward, 1, false, G_UTF8);
    for (int c = 0; c < 256; c++) {
        uint8_t b = (uint8_t)c;
        cr_expect_eq(compiled_grammar_match(r, &b, 1, NULL), compiled_grammar_match(f, &b, 1, NULL), "byte 0x%02x", c);
        cr_expect_eq(compiled_grammar_match(r, &b, 1, NULL) == 1, c >= 'a' && c <= 'z', "byte 0x%02x", c);
    }
    compiled_grammar_free(r);
    compiled_grammar_free(f);
    const uint32_t not_alnum[] = {'z', 'a', '0', '9'};
    cg = compile_codepoints(not_alnum, 2, true, G_UTF8);
    cr_expect(matches(cg, "A") && matches(cg, "\xc3\xa9") && matches(cg, "\xf0\x9f\x98\x80") && matches(cg, "/"));
    cr_expect(compiled_grammar_match(cg, "\0", 1, NULL) == 1);
    cr_expect(!matches(cg, "a") && !matches(cg, "5") && !matches(cg, "z") && !matches(cg, "0") && !matches(cg, "ab"));
    compiled_grammar_free(cg);
}

Test(token_matcher, codepoints_json_string_escapes) {
    CompiledGrammar *cg = compile_codepoints(NULL, 0, true, G_JSON_STRING); /* any character */
    const char *const yes[] = {"\\\"", "\\\\", "\\n", "\\t", "\\r", "\\b", "\\f", "\\u001f", "\\u0001", "\\u0000",
                               "a", " ", "/", "\x7f", "\xc3\xa9", "\xf4\x8f\xbf\xbf", NULL};
    const char *const no[] = {"\"", "\\", "\n", "\x1f", "\t", "\\x", "\\u00", "\\u001", "\\a", "\"\"", "ab",
                              "\xed\xa0\x80", NULL};
    for (int i = 0; yes[i]; i++) cr_expect(matches(cg, yes[i]), "should match \"%s\"", escaped(yes[i], strlen(yes[i]), 0));
    for (int i = 0; no[i]; i++) cr_expect(!matches(cg, no[i]), "should not match \"%s\"", escaped(no[i], strlen(no[i]), 0));
    cr_expect(compiled_grammar_match(cg, "\0", 1, NULL) == 0, "raw U+0000");
    compiled_grammar_free(cg);
    const uint32_t quote[] = {'"', '"'};
    cg = compile_codepoints(quote, 1, false, G_JSON_STRING);
    cr_expect(matches(cg, "\\\"") && !matches(cg, "\"") && !matches(cg, "\\u0022"));
    compiled_grammar_free(cg);
    const uint32_t unit_separator[] = {0x1F, 0x1F};
    cg = compile_codepoints(unit_separator, 1, false, G_JSON_STRING);
    cr_expect(matches(cg, "\\u001f") && !matches(cg, "\x1f"));
    compiled_grammar_free(cg);
    /* A range across escaped and plain characters: 0x1E..0x23 (", #) */
    const uint32_t mixed[] = {0x23, 0x1E};
    cg = compile_codepoints(mixed, 1, false, G_JSON_STRING);
    const char *const mixed_yes[] = {"\\u001e", "\\u001f", " ", "!", "\\\"", "#", NULL};
    const char *const mixed_no[] = {"\"", "$", "\x1e", "\\u001d", "\\\\", NULL};
    for (int i = 0; mixed_yes[i]; i++) cr_expect(matches(cg, mixed_yes[i]), "0x1E-0x23 should match \"%s\"", mixed_yes[i]);
    for (int i = 0; mixed_no[i]; i++) cr_expect(!matches(cg, mixed_no[i]), "0x1E-0x23 should not match \"%s\"", escaped(mixed_no[i], strlen(mixed_no[i]), 0));
    compiled_grammar_free(cg);
    /* Not [\"\\]: everything else, escapes included, but neither of those two. */
    const uint32_t quote_backslash[] = {'"', '"', '\\', '\\'};
    cg = compile_codepoints(quote_backslash, 2, true, G_JSON_STRING);
    cr_expect(matches(cg, "a") && matches(cg, "\\n") && !matches(cg, "\\\"") && !matches(cg, "\\\\") && !matches(cg, "\""));
    compiled_grammar_free(cg);
}
