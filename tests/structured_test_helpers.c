/*
 * structured_test_helpers.c - see structured_test_helpers.h.
 */
#include "structured_test_helpers.h"

#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small utilities --------------------------------------------------------- */

Rng rng_seeded(uint64_t seed) { return (Rng){seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull}; }

uint64_t rng_next(Rng *r) {
    uint64_t x = r->state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return r->state = x;
}

uint32_t rng_below(Rng *r, uint32_t n) { return (uint32_t)(rng_next(r) % n); }

/* bytes as a C-like literal for messages (static buffer, one at a time per slot). */
const char *escaped(const void *bytes, size_t len, int slot) {
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

bool matches(const CompiledGrammar *cg, const char *text) {
    return compiled_grammar_match(cg, text, strlen(text), NULL) == 1;
}

bool viable(const CompiledGrammar *cg, const void *text, size_t len) {
    bool v = false;
    compiled_grammar_match(cg, text, len, &v);
    return v;
}

/* A random string of 0..max_pieces pieces. */
size_t random_text(Rng *rng, const char *const *pieces, int max_pieces, char *buf, size_t cap) {
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

int utf8_encode_cp(uint32_t c, uint8_t *b) {
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

void build_json_small_ws(Grammar *g) { build_json_grammar(g, false); }
void build_json_any_ws(Grammar *g) { build_json_grammar(g, true); }

/* The code points of the bounded string grammar. */
const uint32_t bounded_string_set[] = {0x00, 0x7E, 0xE9, 0xE9, 0x4E00, 0x9FFF, 0x1F600, 0x1F64F};

/* A JSON string literal of 0 to 5 characters from bounded_string_set. */
void build_bounded_string(Grammar *g) {
    int root = grammar_rule(g, "root");
    GExpr character = g_codepoints(g, bounded_string_set, 4, G_JSON_STRING);
    grammar_define(g, root, g_seq(g, EXPRS(g_str(g, "\""), g_repeat(g, character, 0, 5), g_str(g, "\""))));
}

/* Rules that end in the middle of a token while the caller goes on:
 * "a=1,bb=(c=x1);" - key, num and word finish on the byte before "=", ","
 * ";" or ")", two or three frames down. */
void build_nested_rules(Grammar *g) {
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
void build_nullable_rules(Grammar *g) {
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
void build_ambiguous(Grammar *g) {
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

const char *const choice_literals[] = {"apple", "apricot", "banana", "band", "ban", "b", "{\"a\":1}", "\xc3\xa9\xe4\xb8\xad", NULL};

void build_choice(Grammar *g) {
    int root = grammar_rule(g, "root");
    GExpr alts[16];
    int n = 0;
    for (; choice_literals[n]; n++) alts[n] = g_str(g, choice_literals[n]);
    grammar_define(g, root, g_alt(g, alts, n));
}

/* Independent of the compiler: whether text is a prefix of (or equal to) a literal. */
bool choice_viable(const void *text, size_t len) {
    for (int i = 0; choice_literals[i]; i++)
        if (strlen(choice_literals[i]) >= len && memcmp(choice_literals[i], text, len) == 0) return true;
    return false;
}

bool choice_matches(const void *text, size_t len) {
    for (int i = 0; choice_literals[i]; i++)
        if (strlen(choice_literals[i]) == len && memcmp(choice_literals[i], text, len) == 0) return true;
    return false;
}

CompiledGrammar *compile_built(BuildGrammar build, const char *what) {
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

/* ---- text pieces ---------------------------------------------------------------- */

const char *const choice_pieces[] = {"a", "p", "l", "e", "r", "i", "c", "o", "t", "b", "n", "d", "{", "}",
                                     "\"", ":", "1", "\xc3\xa9", "\xe4\xb8\xad", NULL};

const char *const choice_curated[] = {"apple", "ap", "pple", "apr", "icot", "ban", "ana", "nana", "band", "and",
                                      "{\"", "\"a\"", ":1}", "\xc3", "\xa9\xe4", "\xb8\xad", "bandana", NULL};

const char *const random_grammar_pieces[] = {"a", "b", "c", "d", "\xc3\xa9", "\xc3\xaa", "\xe4\xb8\xad",
                                             "\xe4\xb8\xae", "\xc3", "\xa9", "\xe4\xb8", "\xad", NULL};

/* ---- random grammars --------------------------------------------------------------- */

/*
 * A random grammar is built twice: as a Grammar, and as plain productions
 * for the Earley recognizer in test_grammar_compile.c, which knows nothing
 * of automata or stacks - the independent check of compiled_grammar_match
 * (and so of the oracle) on grammars nobody picked by hand.
 *
 * Productions: lhs -> rhs; a symbol >= 0 is a nonterminal, -1 - b the byte b.
 * Nonterminals 0..num_rules-1 are the rules.
 */
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
Grammar *random_grammar(uint64_t seed, Cfg *c) {
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

void cfg_free(Cfg *c) {
    free(c->nullable), free(c->productive);
    c->nullable = c->productive = NULL;
}

