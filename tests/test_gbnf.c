/*
 * test_gbnf.c - GBNF text into grammars (structured/gbnf.h), through
 * the public path: text -> Grammar -> grammar_compile -> matching whole
 * texts. Real grammars (JSON, arithmetic), each construct of the dialect,
 * and errors with the line they point at.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "structured/gbnf.h"

#define TEXTS(...) ((const char *const[]){__VA_ARGS__, NULL})

static CompiledGrammar *compile_gbnf(const char *text) {
    Grammar *g = grammar_new();
    cr_assert(g);
    int rc = gbnf_to_grammar(g, text, strlen(text));
    cr_assert_eq(rc, 0, "refused: %s\n%s", grammar_error(g), text);
    Error err;
    CompiledGrammar *cg = grammar_compile(g, &err);
    cr_assert(cg, "does not compile: %s\n%s", err.msg, text);
    grammar_free(g);
    return cg;
}

static void check(const char *grammar, const char *const *yes, const char *const *no) {
    CompiledGrammar *cg = compile_gbnf(grammar);
    for (int i = 0; yes && yes[i]; i++)
        cr_expect_eq(compiled_grammar_match(cg, yes[i], strlen(yes[i]), NULL), 1, "should match '%s' in:\n%s",
                     yes[i], grammar);
    for (int i = 0; no && no[i]; i++)
        cr_expect_eq(compiled_grammar_match(cg, no[i], strlen(no[i]), NULL), 0, "should not match '%s' in:\n%s",
                     no[i], grammar);
    compiled_grammar_free(cg);
}

/* gbnf_to_grammar refuses the text with a message holding needle. */
static void check_refused(const char *grammar, const char *needle) {
    Grammar *g = grammar_new();
    cr_assert(g);
    cr_expect_eq(gbnf_to_grammar(g, grammar, strlen(grammar)), -1, "accepted:\n%s", grammar);
    const char *msg = grammar_error(g);
    cr_expect(msg && strstr(msg, needle), "message '%s' lacks '%s' for:\n%s", msg ? msg : "(none)", needle,
              grammar);
    grammar_free(g);
}

/* llama.cpp's grammars/json.gbnf, as shipped. */
static const char JSON_GBNF[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "            string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "\n"
    "array  ::=\n"
    "  \"[\" ws (\n"
    "            value\n"
    "    (\",\" ws value)*\n"
    "  )? \"]\" ws\n"
    "\n"
    "string ::=\n"
    "  \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
    "  )* \"\\\"\" ws\n"
    "\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
    "\n"
    "# Optional space: by convention, applied in this grammar after literal chars when allowed\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

Test(gbnf, llama_cpp_json_grammar) {
    check(JSON_GBNF,
          TEXTS("{}", "{\"a\":1}", "{ \"a\": [1, 2.5, -3e4], \"b\": {\"c\": null} }", "{\"s\":\"x\\\"y\\u00e9\"}",
                "{\"t\":true,\"f\":false}", "{\"é\":\"日本\"}"),
          TEXTS("", "[]", "{", "{\"a\":}", "{\"a\" 1}", "{\"a\":01}", "{'a':1}", "{\"a\":\"\x01\"}",
                "{\"a\":\"\\q\"}", "{\"a\":1,}"));
}

static const char ARITHMETIC_GBNF[] = "root ::= expr\n"
                                      "expr ::= term ((\"+\" | \"-\") term)*\n"
                                      "term ::= factor ((\"*\" | \"/\") factor)*\n"
                                      "factor ::= number | \"(\" expr \")\" | \"-\" factor\n"
                                      "number ::= [0-9]+\n";

Test(gbnf, arithmetic_with_recursion) {
    check(ARITHMETIC_GBNF, TEXTS("1", "1+2", "3*(4-5)/6", "((((7))))", "-(-1)", "12*34+56"),
          TEXTS("", "1+", "(1", "1)", "1 + 2", "a", "()", "1**2"));
}

Test(gbnf, left_recursion_is_refused_by_the_compiler) {
    const char *text = "root ::= expr\nexpr ::= expr \"+\" num | num\nnum ::= [0-9]\n";
    Grammar *g = grammar_new();
    cr_assert(g);
    cr_assert_eq(gbnf_to_grammar(g, text, strlen(text)), 0, "%s", grammar_error(g));
    Error err;
    CompiledGrammar *cg = grammar_compile(g, &err);
    cr_expect_null(cg);
    cr_expect(strstr(err.msg, "left-recursive") && strstr(err.msg, "expr"), "message: %s", err.msg);
    compiled_grammar_free(cg);
    grammar_free(g);
}

Test(gbnf, literals_and_escapes) {
    check("root ::= \"abc\"", TEXTS("abc"), TEXTS("ab", "abcd", ""));
    check("root ::= \"\"", TEXTS(""), TEXTS("a"));
    check("root ::= \"a\\nb\\tc\\rd\"", TEXTS("a\nb\tc\rd"), TEXTS("a\\nb\\tc\\rd"));
    check("root ::= \"\\\"\\\\\"", TEXTS("\"\\"), TEXTS("\"", "\\"));
    check("root ::= \"\\x41\\u00e9\\U0001F600\"", TEXTS("Aé😀"), TEXTS("A"));
    check("root ::= \"\\xe9\"", TEXTS("é"), TEXTS("\xe9")); /* code point U+00E9, not the byte */
    check("root ::= \"日本\" \"語\"", TEXTS("日本語"), TEXTS("日本"));
    check("root ::= \"# not a comment\"", TEXTS("# not a comment"), TEXTS(""));
}

Test(gbnf, character_classes_and_dot) {
    check("root ::= [a-c0-9_]", TEXTS("a", "c", "5", "_"), TEXTS("d", "", "ab"));
    check("root ::= [^a-c]", TEXTS("d", "é", "😀", "\n"), TEXTS("a", "b", ""));
    check("root ::= [α-ω]+", TEXTS("αβγ"), TEXTS("a", "Ω"));
    check("root ::= [\\x00-\\x1f\\]\\[\\-]", TEXTS("\t", "]", "[", "-"), TEXTS("a", " "));
    check("root ::= [a-]", TEXTS("a", "-"), TEXTS("b"));
    check("root ::= [\\u4e00-\\u9fff]", TEXTS("中"), TEXTS("a", "中文"));
    check("root ::= . .", TEXTS("ab", "\n\n", "é😀"), TEXTS("a", "abc"));
}

Test(gbnf, repetition) {
    check("root ::= \"a\"* \"b\"+ \"c\"?", TEXTS("b", "aabbc", "bbb"), TEXTS("", "a", "bcc", "ac"));
    check("root ::= \"ab\"{2}", TEXTS("abab"), TEXTS("ab", "ababab"));
    check("root ::= [0-9]{2,}", TEXTS("12", "12345"), TEXTS("1"));
    check("root ::= [0-9]{1,3}", TEXTS("1", "123"), TEXTS("", "1234"));
    check("root ::= [0-9]{ 1 , 2 }", TEXTS("1", "12"), TEXTS("123"));
    check("root ::= (\"a\" | \"b\"){0,2} \"c\"", TEXTS("c", "ac", "bac"), TEXTS("abac"));
    check("root ::= \"a\"*?", TEXTS("", "aaa"), TEXTS("b"));
}

Test(gbnf, comments_whitespace_and_multiline_rules) {
    check("# a grammar\n"
          "root ::= greeting # the start\n"
          "   \" \" name\n"
          "   | \"bye\"\n"
          "\r\n"
          "greeting ::= (\n"
          "  \"hi\" # short\n"
          "  | \"hello\"\n"
          ")\n"
          "name::=[a-z]+\n",
          TEXTS("hi bob", "hello x", "bye"), TEXTS("hi", "hi Bob", "bye bob", "hellobob"));
    check("root ::=\n  a\n  b\na ::= \"x\"\nb ::= \"y\"", TEXTS("xy"), TEXTS("x", "yx"));
    check("root-rule_2 ::= \"z\"\nroot ::= root-rule_2 root-rule_2", TEXTS("zz"), TEXTS("z"));
    check("root ::= \"a\" | | \"b\"", TEXTS("a", "", "b"), TEXTS("ab"));
}

static void check_refused_at_line(const char *text, int line, const char *needle) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "grammar line %d: ", line);
    check_refused(text, prefix);
    check_refused(text, needle);
}

Test(gbnf, errors_name_the_problem_and_line) {
    check_refused_at_line("root ::= b\n\n# comment\nb ::= c", 4, "undefined rule 'c'");
    check_refused_at_line("root ::= x\n", 1, "undefined rule 'x'");
    check_refused("a ::= \"x\"\n", "no rule named 'root'");
    check_refused("", "no rule named 'root'");
    check_refused_at_line("root ::= \"a\"\nroot ::= \"b\"", 2, "defined twice");
    check_refused_at_line("root ::= \"abc\n\n", 1, "unterminated string");
    check_refused_at_line("root ::= [abc\n", 1, "unterminated character class");
    check_refused_at_line("root ::= \"a\"\nx ::= [z-a]", 2, "bad character range");
    check_refused_at_line("root ::= (\"a\"\n  \"b\"\n", 1, "never closed");
    check_refused_at_line("root ::= \"a\"\n\"b\")", 2, "unexpected ')'");
    check_refused_at_line("root ::= * \"a\"", 1, "nothing before it to repeat");
    check_refused_at_line("root ::= (| *)", 1, "nothing before it to repeat");
    check_refused_at_line("\n\nroot \"a\"", 3, "expected '::='");
    check_refused_at_line("root ::= \"a\"\n\n  = \"b\"", 3, "unexpected '='");
    check_refused_at_line("root ::= \"\\q\"", 1, "unknown escape '\\q'");
    check_refused_at_line("root ::= \"\\x4\"", 1, "hex digits");
    check_refused_at_line("root ::= \"\\uD800\"", 1, "not a character");
    check_refused_at_line("root ::= \"\\U00110000\"", 1, "not a character");
    check_refused_at_line("root ::= \"a\"{10001}", 1, "above 10000");
    check_refused_at_line("root ::= \"a\"{2,99999999999999999999999}", 1, "above 10000");
    check_refused_at_line("root ::= \"a\"{3,2}", 1, "min > max");
    check_refused_at_line("root ::= \"a\"{,2}", 1, "expected a number");
    check_refused_at_line("root ::= \"a\"{2", 1, "expected '}'");
    check_refused_at_line("root ::= \"\xff\"", 1, "invalid UTF-8");
    check_refused_at_line("root ::= <think>", 1, "unexpected '<'");
    check_refused_at_line("|", 1, "expected a rule name");
}

/* gbnf_to_grammar refuses the text with exactly this message. */
static void check_message(const char *grammar, const char *message) {
    Grammar *g = grammar_new();
    cr_assert(g);
    cr_expect_eq(gbnf_to_grammar(g, grammar, strlen(grammar)), -1, "accepted:\n%s", grammar);
    const char *msg = grammar_error(g);
    cr_expect(msg && strcmp(msg, message) == 0, "message '%s', expected '%s' for:\n%s", msg ? msg : "(none)",
              message, grammar);
    grammar_free(g);
}

/* What GBNF reads with the code it shares with regexes (classes, groups,
 * hex escapes, UTF-8) still words its errors as GBNF: "grammar line N". */
Test(gbnf, shared_syntax_keeps_the_gbnf_wording) {
    check_message("root ::= \"a\"\n  [abc", "grammar line 2: unterminated character class");
    check_message("root ::= \"a\"\nx ::= \"b\" |\n  [^", "grammar line 3: unterminated character class");
    check_message("root ::= [z-a]", "grammar line 1: bad character range (U+007A > U+0061)");
    check_message("root ::=\n(\"a\"", "grammar line 2: '(' is never closed");
    check_message("root ::= \"a\"\n\"\xff\"", "grammar line 2: invalid UTF-8");
    check_message("root ::= \"\\x4g\"", "grammar line 1: escape '\\x' needs 2 hex digits");
    check_message("root ::= \"a\"{2", "grammar line 1: expected '}' to close the repetition");
    check_message("root ::= \"abc", "grammar line 1: unterminated string literal");
}

Test(gbnf, nesting_is_bounded) {
    char text[1024] = "root ::= ";
    size_t n = strlen(text);
    for (int i = 0; i < 300; i++) text[n++] = '(';
    text[n] = '\0';
    check_refused(text, "nested deeper than 200");

    char ok[512] = "root ::= ";
    n = strlen(ok);
    for (int i = 0; i < 100; i++) ok[n++] = '(';
    ok[n++] = '"', ok[n++] = 'a', ok[n++] = '"';
    for (int i = 0; i < 100; i++) ok[n++] = ')';
    ok[n] = '\0';
    check(ok, TEXTS("a"), TEXTS("aa"));
}

Test(gbnf, rules_can_be_used_before_they_are_defined) {
    check("root ::= item (\",\" item)*\nitem ::= key \"=\" val\nkey ::= [a-z]+\nval ::= [0-9]+",
          TEXTS("a=1", "a=1,bc=23"), TEXTS("a=", "a=1,", "=1"));
}
