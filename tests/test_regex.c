/*
 * test_regex.c - regular expressions into grammars (structured/regex.h),
 * through the public path: pattern -> Grammar -> grammar_compile -> matching
 * whole texts. Each construct with texts it must and must not match, both
 * modes (full match and JSON Schema's search), both encodings (UTF-8 and
 * inside a JSON string), and every refused construct with the message that
 * names it.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "structured/regex.h"

#define TEXTS(...) ((const char *const[]){__VA_ARGS__, NULL})

static CompiledGrammar *compile_pattern(const char *pattern, RegexMode mode, GEncoding enc) {
    Grammar *g = grammar_new();
    cr_assert(g);
    GExpr e = regex_to_grammar(g, pattern, strlen(pattern), mode, enc);
    cr_assert_neq(e, G_ERROR, "/%s/ refused: %s", pattern, grammar_error(g));
    int root = grammar_rule(g, "root");
    grammar_define(g, root, e);
    grammar_set_root(g, root);
    Error err;
    CompiledGrammar *cg = grammar_compile(g, &err);
    cr_assert(cg, "/%s/ does not compile: %s", pattern, err.msg);
    grammar_free(g);
    return cg;
}

static bool matches(const CompiledGrammar *cg, const char *text) {
    return compiled_grammar_match(cg, text, strlen(text), NULL) == 1;
}

/* The pattern accepts every text of yes and none of no. */
static void check_mode(const char *pattern, RegexMode mode, GEncoding enc, const char *const *yes,
                       const char *const *no) {
    CompiledGrammar *cg = compile_pattern(pattern, mode, enc);
    for (int i = 0; yes && yes[i]; i++)
        cr_expect(matches(cg, yes[i]), "/%s/ (mode %d, enc %d) should match '%s'", pattern, mode, enc, yes[i]);
    for (int i = 0; no && no[i]; i++)
        cr_expect(!matches(cg, no[i]), "/%s/ (mode %d, enc %d) should not match '%s'", pattern, mode, enc, no[i]);
    compiled_grammar_free(cg);
}

static void check(const char *pattern, const char *const *yes, const char *const *no) {
    check_mode(pattern, REGEX_FULL_MATCH, G_UTF8, yes, no);
}

static void check_refused_mode(const char *pattern, size_t len, RegexMode mode, const char *needle) {
    Grammar *g = grammar_new();
    cr_assert(g);
    GExpr e = regex_to_grammar(g, pattern, len, mode, G_UTF8);
    cr_expect_eq(e, G_ERROR, "/%s/ should be refused (%s)", pattern, needle);
    const char *msg = grammar_error(g);
    cr_expect(msg && strstr(msg, "regex: ") && strstr(msg, needle) && strstr(msg, " at offset "),
              "/%s/: message '%s' lacks '%s'", pattern, msg ? msg : "(none)", needle);
    /* The error is sticky: compiling what was built fails too. */
    Error err;
    CompiledGrammar *cg = grammar_compile(g, &err);
    cr_expect_null(cg, "/%s/: a failed builder compiled", pattern);
    compiled_grammar_free(cg);
    grammar_free(g);
}

static void check_refused(const char *pattern, const char *needle) {
    check_refused_mode(pattern, strlen(pattern), REGEX_FULL_MATCH, needle);
    check_refused_mode(pattern, strlen(pattern), REGEX_SEARCH, needle);
}

Test(regex, literals_and_concatenation) {
    check("abc", TEXTS("abc"), TEXTS("", "ab", "abcd", "abd", "xabc"));
    check("", TEXTS(""), TEXTS("a", " "));
    check("a b", TEXTS("a b"), TEXTS("ab", "a  b"));
    check("]}", TEXTS("]}"), TEXTS("]", "}"));
    check("a{b", TEXTS("a{b"), TEXTS("ab", "a{{b"));
    check("x{1,a}", TEXTS("x{1,a}"), TEXTS("x", "x{1,}"));
    check("héllo→😀", TEXTS("héllo→😀"), TEXTS("hello→😀", "héllo", "héllo→"));
}

Test(regex, alternation_and_groups) {
    check("cat|dog", TEXTS("cat", "dog"), TEXTS("", "catdog", "ca", "cot"));
    check("a(b|c)d", TEXTS("abd", "acd"), TEXTS("ad", "abcd", "abd "));
    check("(?:ab)+", TEXTS("ab", "abab", "ababab"), TEXTS("", "aba", "ba"));
    check("(?<year>\\d{4})-(?P<month>\\d\\d)", TEXTS("2024-07", "0000-99"), TEXTS("2024-7", "24-07", "2024/07"));
    check("a|", TEXTS("a", ""), TEXTS("aa", "b"));
    check("|a", TEXTS("a", ""), TEXTS("aa"));
    check("()", TEXTS(""), TEXTS("()", "a"));
    check("((((a))))", TEXTS("a"), TEXTS("", "aa"));
    check("(a|b|)(c|)", TEXTS("", "a", "b", "c", "ac", "bc"), TEXTS("ca", "ab", "cc"));
}

Test(regex, quantifiers) {
    check("a*", TEXTS("", "a", "aaaa"), TEXTS("b", "ab"));
    check("a+", TEXTS("a", "aaa"), TEXTS("", "ba"));
    check("ab?c", TEXTS("ac", "abc"), TEXTS("abbc", "a"));
    check("a{3}", TEXTS("aaa"), TEXTS("aa", "aaaa", ""));
    check("a{2,}", TEXTS("aa", "aaaaaaa"), TEXTS("a", ""));
    check("a{2,4}", TEXTS("aa", "aaa", "aaaa"), TEXTS("a", "aaaaa"));
    check("a{0}b", TEXTS("b"), TEXTS("ab"));
    check("(ab){1,2}c", TEXTS("abc", "ababc"), TEXTS("c", "abababc"));
    check("[ab]{2}", TEXTS("aa", "ab", "ba", "bb"), TEXTS("a", "abc"));
#ifdef __SANITIZE_ADDRESS__
    /* The compiler refuses a grammar after 5 s of CPU time (grammar_compile.c);
     * under ASan this one takes about 5x its 1.2 s and crossed that on a
     * slow CI host. The sanitizer build checks a tenth as many copies, the
     * plain build the full count. */
    check("x{1000}", NULL, TEXTS("x"));
#else
    check("x{10000}", NULL, TEXTS("x"));
#endif
}

Test(regex, lazy_quantifiers_are_the_same_language) {
    check("a*?", TEXTS("", "a", "aaa"), TEXTS("b"));
    check("a+?b", TEXTS("ab", "aaab"), TEXTS("b", "a"));
    check("a??b", TEXTS("b", "ab"), TEXTS("aab"));
    check("a{2,3}?", TEXTS("aa", "aaa"), TEXTS("a", "aaaa"));
    check("<.+?>", TEXTS("<a>", "<a><b>"), TEXTS("<>", "<a"));
}

Test(regex, dot_is_any_character_but_a_line_terminator) {
    check(".", TEXTS("a", " ", "é", "😀", "\t"), TEXTS("", "\n", "\r", "\u2028", "\u2029", "ab"));
    check("a.c", TEXTS("abc", "a.c", "a€c"), TEXTS("a\nc", "ac", "abbc"));
}

Test(regex, escapes) {
    check("\\d+", TEXTS("0", "1234567890"), TEXTS("", "a", "١")); /* ASCII digits only */
    check("\\D", TEXTS("a", "é", " "), TEXTS("5", ""));
    check("\\w+", TEXTS("abc_XYZ_09"), TEXTS("é", "a-b", ""));
    check("\\W", TEXTS("-", "é", " "), TEXTS("a", "_", "0"));
    check("\\s", TEXTS(" ", "\t", "\n", "\v", "\f", "\r", "\u00a0", "\u2003", "\u200a", "\u3000", "\ufeff", "\u2028"),
          TEXTS("a", "", "\u200b"));
    check("\\S", TEXTS("a", "é"), TEXTS(" ", "\n", "\u00a0"));
    check("\\n\\t\\r\\f\\v", TEXTS("\n\t\r\f\v"), TEXTS("ntrfv", "\\n\\t\\r\\f\\v"));
    check("\\x41\\x7a", TEXTS("Az"), TEXTS("x41x7a"));
    check("\\u00e9\\u20AC", TEXTS("é€"), TEXTS("e€"));
    check("\\u{1F600}\\u{41}", TEXTS("😀A"), TEXTS("A"));
    check("\\uD83D\\uDE00", TEXTS("😀"), TEXTS(""));
    check("\\U0001F600", TEXTS("😀"), TEXTS("U0001F600"));
    check("\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\\\\\/\\-", TEXTS(".*+?()[]{}|^$\\/-"), TEXTS("a"));
    check("a\\.b", TEXTS("a.b"), TEXTS("axb"));
    /* \0 is NUL: a one-byte text that strlen cannot express. */
    CompiledGrammar *cg = compile_pattern("a\\0", REGEX_FULL_MATCH, G_UTF8);
    cr_expect_eq(compiled_grammar_match(cg, "a\0", 2, NULL), 1);
    cr_expect_eq(compiled_grammar_match(cg, "a0", 2, NULL), 0);
    compiled_grammar_free(cg);
}

Test(regex, character_classes) {
    check("[abc]", TEXTS("a", "b", "c"), TEXTS("d", "", "ab"));
    check("[a-cx-z0-2]", TEXTS("a", "c", "x", "z", "1"), TEXTS("d", "w", "3"));
    check("[^abc]", TEXTS("d", "é", "😀", "\n"), TEXTS("a", "c", ""));
    check("[-a]", TEXTS("-", "a"), TEXTS("b"));
    check("[a-]", TEXTS("-", "a"), TEXTS("b"));
    check("[a-c-e]", TEXTS("a", "b", "-", "e"), TEXTS("d"));
    check("[\\]\\\\^]", TEXTS("]", "\\", "^"), TEXTS("a"));
    check("[.*+?]", TEXTS(".", "*", "+", "?"), TEXTS("a"));
    check("[\\d_]", TEXTS("5", "_"), TEXTS("a"));
    check("[\\D]", TEXTS("a", "é"), TEXTS("5"));
    check("[^\\D]", TEXTS("5"), TEXTS("a", "é"));
    check("[\\W\\d]", TEXTS("-", "3", "é"), TEXTS("a", "_"));
    check("[\\s,]", TEXTS(" ", ",", "\u2009"), TEXTS("a"));
    check("[^\\s]", TEXTS("a", "é"), TEXTS(" ", "\u3000"));
    check("[\\b]", TEXTS("\b"), TEXTS("b"));
    check("[\\x41-\\x43\\u00e9]", TEXTS("A", "C", "é"), TEXTS("D", "e"));
}

Test(regex, unicode_classes) {
    check("[α-ω]+", TEXTS("αβγ", "ω"), TEXTS("a", "Α", "ά", ""));
    check("[^α-ω]", TEXTS("a", "€", "😀", "Ω"), TEXTS("α", "λ"));
    check("[😀-😂]", TEXTS("😀", "😁", "😂"), TEXTS("😃", "😿"));
    check("[^a]", TEXTS("\xF4\x8F\xBF\xBF", "\xEF\xBF\xBF"), TEXTS("a", "\xED\xA0\x80", "\xFF", "\xC3"));
    check("[\\u4e00-\\u9fff]{2}", TEXTS("中文", "汉字"), TEXTS("中", "中a"));
    check("[\\u{10000}-\\u{10FFFF}]", TEXTS("😀", "\xF4\x8F\xBF\xBF"), TEXTS("\xEF\xBF\xBF", "a"));
}

Test(regex, search_mode_allows_text_around_unanchored_ends) {
    check_mode("abc", REGEX_SEARCH, G_UTF8, TEXTS("abc", "xxabc", "abcyy", "x\nabc\ny", "ababc"),
               TEXTS("", "ab", "acb", "a\nbc"));
    check_mode("^abc", REGEX_SEARCH, G_UTF8, TEXTS("abc", "abcde"), TEXTS("xabc", " abc"));
    check_mode("abc$", REGEX_SEARCH, G_UTF8, TEXTS("abc", "xxabc"), TEXTS("abcx", "abc\n"));
    check_mode("^abc$", REGEX_SEARCH, G_UTF8, TEXTS("abc"), TEXTS("xabc", "abcx"));
    check_mode("^\\d+$", REGEX_SEARCH, G_UTF8, TEXTS("1", "123"), TEXTS("", "1a", "a1"));
    check_mode("", REGEX_SEARCH, G_UTF8, TEXTS("", "anything", "\n"), NULL);
    check_mode("^a|b$", REGEX_SEARCH, G_UTF8, TEXTS("a", "axx", "xxb", "b"), TEXTS("xa", "bx", "c"));
    check_mode("^(?:a|b)$", REGEX_SEARCH, G_UTF8, TEXTS("a", "b"), TEXTS("ab", "xa"));
    /* Full match: ^ and $ anchor what is anchored anyway. */
    check("^abc$", TEXTS("abc"), TEXTS("xabc", "abcx"));
    check("^abc", TEXTS("abc"), TEXTS("abcde"));
    check("abc", TEXTS("abc"), TEXTS("xabc"));
}

Test(regex, json_string_encoding_escapes_what_json_escapes) {
    check_mode("a\"b", REGEX_FULL_MATCH, G_JSON_STRING, TEXTS("a\\\"b"), TEXTS("a\"b"));
    check_mode("\\n", REGEX_FULL_MATCH, G_JSON_STRING, TEXTS("\\n"), TEXTS("\n", "n"));
    check_mode("a\\\\b", REGEX_FULL_MATCH, G_JSON_STRING, TEXTS("a\\\\b"), TEXTS("a\\b"));
    check_mode("\\t+", REGEX_FULL_MATCH, G_JSON_STRING, TEXTS("\\t", "\\t\\t"), TEXTS("\t"));
    check_mode("[\"x]", REGEX_FULL_MATCH, G_JSON_STRING, TEXTS("\\\"", "x"), TEXTS("\""));
    check_mode("é", REGEX_FULL_MATCH, G_JSON_STRING, TEXTS("é"), TEXTS("e"));
    /* The dot never yields a raw control character nor an unescaped quote. */
    check_mode(".", REGEX_FULL_MATCH, G_JSON_STRING, TEXTS("a", "\\\"", "\\t"), TEXTS("\"", "\t", "\\n", "\n"));
    /* Search mode's surrounding text is any character, \n included, JSON-escaped. */
    check_mode("b", REGEX_SEARCH, G_JSON_STRING, TEXTS("b", "ab", "\\nb\\n", "\\\"b", "é b"),
               TEXTS("\nb", "\"b", "a"));
}

Test(regex, viable_prefixes) {
    CompiledGrammar *cg = compile_pattern("ab+c", REGEX_FULL_MATCH, G_UTF8);
    bool viable = false;
    cr_expect_eq(compiled_grammar_match(cg, "abb", 3, &viable), 0);
    cr_expect(viable);
    cr_expect_eq(compiled_grammar_match(cg, "ac", 2, &viable), 0);
    cr_expect(!viable);
    cr_expect_eq(compiled_grammar_match(cg, "abbc", 4, &viable), 1);
    compiled_grammar_free(cg);
}

Test(regex, refuses_what_it_cannot_honour) {
    check_refused("(a)\\1", "backreference \\1");
    check_refused("(?<n>a)\\k<n>", "backreference \\k");
    check_refused("(?P<n>a)(?P=n)", "backreference (?P=");
    check_refused("a(?=b)", "lookahead (?=");
    check_refused("a(?!b)", "lookahead (?!");
    check_refused("(?<=a)b", "lookbehind (?<=");
    check_refused("(?<!a)b", "lookbehind (?<!");
    check_refused("\\bword", "word boundary \\b");
    check_refused("a\\Bb", "word boundary \\B");
    check_refused("(?i)abc", "inline flags");
    check_refused("(?i:abc)", "inline flags");
    check_refused("(?-i:abc)", "inline flags");
    check_refused("a*+", "possessive");
    check_refused("a++", "possessive");
    check_refused("a{2}+", "possessive");
    check_refused("a^b", "anchor ^");
    check_refused("(^a)", "anchor ^");
    check_refused("a$b", "anchor $");
    check_refused("(a$)", "anchor $");
    check_refused("(ab", "unbalanced '('");
    check_refused("ab)", "unbalanced ')'");
    check_refused("a)(", "unbalanced ')'");
    check_refused("[z-a]", "bad character range");
    check_refused("[\\d-z]", "range bound");
    check_refused("[abc", "unterminated character class");
    check_refused("[]a]", "empty character class");
    check_refused("[^]", "empty character class");
    check_refused("[[:alpha:]]", "POSIX");
    check_refused("a{3,2}", "min > max");
    check_refused("a{,3}", "{,n}");
    check_refused("*a", "nothing to repeat");
    check_refused("a|+", "nothing to repeat");
    check_refused("(?:?)", "nothing to repeat");
    check_refused("^*", "nothing to repeat");
    check_refused("{2}", "nothing to repeat");
    check_refused("a**", "multiple quantifiers");
    check_refused("a{2}{3}", "multiple quantifiers");
    check_refused("ab\\", "trailing backslash");
    check_refused("a{10001}", "above 10000");
    check_refused("a{1,99999999999999999999}", "above 10000");
    check_refused("\\q", "unknown escape \\q");
    check_refused("\\x4", "\\x");
    check_refused("\\uD800", "surrogate");
    check_refused("\\u{110000}", "above U+10FFFF");
    check_refused("\\p{L}", "Unicode property");
    check_refused("\\Aabc", "anchor \\A");
    check_refused("abc\\Z", "anchor \\Z");
    check_refused("\\01", "octal");
    check_refused("\\cA", "control escape");
    check_refused("(?>a)", "atomic group");
    check_refused("(?#note)", "comment group");
    check_refused("(?<1x>a)", "bad group name");
    check_refused("a\xff", "invalid UTF-8");
    check_refused("\xc3", "invalid UTF-8");
    check_refused("\xed\xa0\x80", "invalid UTF-8"); /* an encoded surrogate */
    check_refused("\xc0\xaf", "invalid UTF-8");     /* overlong */
    check_refused_mode("a\0\xfe", 3, REGEX_FULL_MATCH, "invalid UTF-8 at offset 2");
}

Test(regex, error_offsets_point_at_the_construct) {
    check_refused("abc(?=x)", "at offset 3");
    check_refused("abc\\1", "at offset 3");
    check_refused("ab[z-a]", "at offset 4");
}

/* regex_to_grammar refuses the pattern with exactly this message. */
static void check_message(const char *pattern, const char *message) {
    Grammar *g = grammar_new();
    cr_assert(g);
    cr_expect_eq(regex_to_grammar(g, pattern, strlen(pattern), REGEX_SEARCH, G_UTF8), G_ERROR, "/%s/ accepted",
                 pattern);
    const char *msg = grammar_error(g);
    cr_expect(msg && strcmp(msg, message) == 0, "/%s/: message '%s', expected '%s'", pattern, msg ? msg : "(none)",
              message);
    grammar_free(g);
}

/* What a regex reads with the code it shares with GBNF (classes, groups,
 * hex escapes, UTF-8) still words its errors as a regex: "at offset N". */
Test(regex, shared_syntax_keeps_the_regex_wording) {
    check_message("ab[abc", "regex: unterminated character class at offset 2");
    check_message("x[z-a]", "regex: bad character range (U+007A > U+0061) at offset 3");
    check_message("[a-\\d]", "regex: class escape as a range bound at offset 2");
    check_message("a(b", "regex: unbalanced '(' (missing ')') at offset 1");
    check_message("((a)", "regex: unbalanced '(' (missing ')') at offset 0");
    check_message("ab\xff", "regex: invalid UTF-8 at offset 2");
    check_message("\\x4g", "regex: bad escape \\x (2 hex digits expected) at offset 0");
}

Test(regex, nesting_is_bounded) {
    char deep[1000];
    int depth = 300;
    for (int i = 0; i < depth; i++) deep[i] = '(';
    deep[depth] = 'a';
    for (int i = 0; i < depth; i++) deep[depth + 1 + i] = ')';
    deep[2 * depth + 1] = '\0';
    check_refused(deep, "nested deeper than 200");

    depth = 150;
    for (int i = 0; i < depth; i++) deep[i] = '(';
    deep[depth] = 'a';
    for (int i = 0; i < depth; i++) deep[depth + 1 + i] = ')';
    deep[2 * depth + 1] = '\0';
    check(deep, TEXTS("a"), TEXTS("", "aa"));
}

Test(regex, huge_repetition_fails_cleanly) {
    /* Each count is within the limit; the product is the compiler's to refuse. */
    const char *pattern = "((a{10000}){10000}){10000}";
    Grammar *g = grammar_new();
    cr_assert(g);
    GExpr e = regex_to_grammar(g, pattern, strlen(pattern), REGEX_FULL_MATCH, G_UTF8);
    int root = grammar_rule(g, "root");
    grammar_define(g, root, e);
    grammar_set_root(g, root);
    Error err;
    CompiledGrammar *cg = grammar_compile(g, &err);
    cr_expect_null(cg, "a 10^12-state automaton compiled");
    cr_expect_eq(err.kind, ERROR_INVALID);
    compiled_grammar_free(cg);
    grammar_free(g);
}
