/*
 * test_grammar_compile.c - the grammar compiler (structured/grammar.h)
 * through compiled_grammar_match, the base of the token-mask oracle in
 * test_token_matcher.c: random grammars against an independent Earley
 * recognizer, hand-written predicates, equivalent grammars written
 * differently, then the compiler's refusals and code point edge cases.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "structured/grammar.h"
#include "structured_test_helpers.h"

/* ---- an independent Earley recognizer ------------------------------------------ */

/* Runs on the plain productions (Cfg) that random_grammar builds alongside
 * each Grammar, and knows nothing of automata or stacks. */

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


/* compiled_grammar_match against Earley: texts grown byte by byte along
 * viable paths (every candidate byte compared), and random texts. */
Test(grammar_compile, random_grammars_compile_to_their_languages) {
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

Test(grammar_compile, compiler_bounded_string_agrees_with_a_hand_written_check) {
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

Test(grammar_compile, compiler_choice_agrees_with_a_hand_written_check) {
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

Test(grammar_compile, compiler_equivalent_grammars_agree_after_minimization) {
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

Test(grammar_compile, compiler_minimization_merges_equivalent_states) {
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

Test(grammar_compile, compiler_bounded_repetition_when_every_state_is_final) {
    GExpr (*const makers[])(Grammar *g) = {ab_up_to_three, optional_ab_one_to_three};
    for (size_t i = 0; i < sizeof makers / sizeof *makers; i++) {
        CompiledGrammar *cg = compile_one(makers[i]);
        cr_expect(matches(cg, "") && matches(cg, "b") && matches(cg, "aba"), "case %zu", i);
        cr_expect(!matches(cg, "abab") && !viable(cg, "abab", 4), "case %zu: four letters of at most three", i);
        compiled_grammar_free(cg);
    }
}

/* ---- refusals ---- */

Test(grammar_compile, compiler_refuses_left_recursion) {
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

Test(grammar_compile, compiler_accepts_recursion_that_reads_first) {
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

Test(grammar_compile, compiler_refuses_undefined_and_twice_defined_rules) {
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

Test(grammar_compile, compiler_refuses_grammars_that_accept_nothing) {
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
Test(grammar_compile, compiler_cuts_branches_that_never_complete) {
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

Test(grammar_compile, codepoints_leave_out_surrogates) {
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

Test(grammar_compile, codepoints_reach_u10ffff_and_no_further) {
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

Test(grammar_compile, codepoints_every_scalar_value_is_one_character) {
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
Test(grammar_compile, codepoints_random_sets_and_complements) {
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

Test(grammar_compile, codepoints_encoding_boundaries_and_reversed_ranges) {
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

Test(grammar_compile, codepoints_json_string_escapes) {
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
