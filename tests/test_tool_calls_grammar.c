/*
 * test_tool_calls_grammar.c - the grammar of forced tool calls
 * (chat/tool_calls/forced_calls.h) through compiled_grammar_match: the
 * texts a chat template's format allows (Hermes JSON, Qwen3-Coder XML),
 * one call or several, and the ones it must refuse (an unknown function,
 * arguments outside the schema, a second call when one is asked, a
 * missing required parameter), then the spec's own errors and the
 * builder the server hands the constraint cache (the spec as JSON text).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "chat/tool_calls/forced_calls.h"
#include "structured_test_helpers.h"

static const char SPEC_TOOLS[] =
    "[{\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"city\": {\"type\": \"string\", \"maxLength\": 8}, \"days\": {\"type\": \"integer\", \"minimum\": 1, "
    "\"maximum\": 7}}, \"required\": [\"city\"], \"additionalProperties\": false}}, "
    "{\"name\": \"ping\"}]";

static CompiledGrammar *compile_spec(const char *format, int max_calls) {
    char text[2048];
    snprintf(text, sizeof text, "{\"format\": \"%s\", \"tools\": %s, \"max_calls\": %d}", format, SPEC_TOOLS, max_calls);
    json_error_t jerr;
    json_t *spec = json_loads(text, 0, &jerr);
    cr_assert_not_null(spec, "%s", jerr.text);
    Grammar *g = grammar_new();
    cr_assert_eq(tool_calls_to_grammar(g, spec), 0, "%s", grammar_error(g));
    Error err;
    CompiledGrammar *cg = grammar_compile(g, &err);
    cr_assert_not_null(cg, "%s", err.msg);
    grammar_free(g);
    json_decref(spec);
    return cg;
}

#define CALL(body) "<tool_call>\n" body "\n</tool_call>"

Test(tool_calls_grammar, hermes_calls) {
    CompiledGrammar *one = compile_spec("hermes", 1), *many = compile_spec("hermes", 0);
    static const char *const good[] = {
        CALL("{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}"),
        CALL("{\"name\": \"get_weather\", \"arguments\": {\"city\":\"東京\",\"days\":3}}"),
        CALL("{\"name\": \"ping\", \"arguments\": {}}"),
        CALL("{\"name\": \"ping\", \"arguments\": {\"anything\":[1,{\"x\":null}]}}"),
        "\n\n" CALL("{\"name\": \"ping\", \"arguments\": {}}"),
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        cr_expect(matches(one, good[i]), "one call: %s", escaped(good[i], strlen(good[i]), 0));
        cr_expect(matches(many, good[i]), "calls: %s", escaped(good[i], strlen(good[i]), 0));
    }
    static const char two[] = CALL("{\"name\": \"ping\", \"arguments\": {}}") "\n"
                              CALL("{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Rome\"}}");
    cr_expect(matches(many, two));
    cr_expect_not(matches(one, two), "max_calls 1 takes one call");
    static const char *const bad[] = {
        "",
        "Sure! " CALL("{\"name\": \"ping\", \"arguments\": {}}"),
        CALL("{\"name\": \"launch\", \"arguments\": {}}"),
        CALL("{\"name\": \"get_weather\", \"arguments\": {}}"),                        /* city is required */
        CALL("{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Amsterdam!\"}}"), /* maxLength 8 */
        CALL("{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\",\"days\":9}}"),
        CALL("{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\",\"wind\":1}}"),
        CALL("{\"name\": \"ping\", \"arguments\": {}}") "\n",
        "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_not(matches(many, bad[i]), "refused: %s", escaped(bad[i], strlen(bad[i]), 0));
    }
    static const char prefix[] = "<tool_call>\n{\"name\": \"get_";
    cr_expect(viable(one, prefix, sizeof prefix - 1));
    compiled_grammar_free(one);
    compiled_grammar_free(many);
}

Test(tool_calls_grammar, qwen3_xml_calls) {
    CompiledGrammar *cg = compile_spec("qwen3_xml", 0);
    static const char *const good[] = {
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo, \"quoted\"\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=ping>\n</function>\n</tool_call>",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        cr_expect(matches(cg, good[i]), "%s", escaped(good[i], strlen(good[i]), 0));
    static const char *const bad[] = {
        "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>", /* city is required */
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n9\n"
        "</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\na<b\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=nope>\n</function>\n</tool_call>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_not(matches(cg, bad[i]), "%s", escaped(bad[i], strlen(bad[i]), 0));
    compiled_grammar_free(cg);
}

Test(tool_calls_grammar, spec_errors) {
    static const char *const specs[] = {
        "{\"format\": \"llama\", \"tools\": [{\"name\": \"f\"}]}",
        "{\"format\": \"hermes\", \"tools\": []}",
        "{\"format\": \"hermes\", \"tools\": [{\"parameters\": {}}]}",
        "{\"format\": \"hermes\", \"tools\": [{\"name\": \"f\", \"parameters\": 3}]}",
        "{\"format\": \"hermes\", \"tools\": [{\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"uniqueItems\": true}}]}",
        "{\"format\": \"hermes\", \"tools\": [{\"name\": \"f\"}], \"max_calls\": \"one\"}",
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        json_t *spec = json_loads(specs[i], 0, NULL);
        cr_assert_not_null(spec);
        Grammar *g = grammar_new();
        cr_expect_eq(tool_calls_to_grammar(g, spec), -1, "%s", specs[i]);
        cr_expect_not_null(grammar_error(g), "%s", specs[i]);
        if (strstr(specs[i], "uniqueItems")) cr_expect(strstr(grammar_error(g), "tool 'f' parameters"), "%s", grammar_error(g));
        if (strstr(specs[i], "llama"))
            cr_expect(strstr(grammar_error(g), "\"hermes\"") && strstr(grammar_error(g), "\"qwen3_xml\""), "%s",
                      grammar_error(g));
        grammar_free(g);
        json_decref(spec);
    }
}

Test(tool_calls_grammar, constraint_builder) {
    cr_expect_str_eq(forced_tool_calls.name, "tool_calls");
    static const char good[] = "{\"format\": \"hermes\", \"tools\": [{\"name\": \"ping\"}], \"max_calls\": 1}";
    Grammar *g = grammar_new();
    Error err = {"", ERROR_INVALID};
    cr_expect_eq(forced_tool_calls.build(g, good, strlen(good), &err), 0, "%s %s", err.msg, grammar_error(g));
    Error cerr;
    CompiledGrammar *cg = grammar_compile(g, &cerr);
    cr_assert_not_null(cg, "%s", cerr.msg);
    static const char call[] = CALL("{\"name\": \"ping\", \"arguments\": {}}");
    cr_expect(matches(cg, call));
    compiled_grammar_free(cg);
    grammar_free(g);
    static const char bad[] = "{\"format\": ";
    g = grammar_new();
    cr_expect_eq(forced_tool_calls.build(g, bad, strlen(bad), &err), -1);
    cr_expect_eq(err.kind, ERROR_INVALID);
    cr_expect(strstr(err.msg, "tool calls: not valid JSON"), "%s", err.msg);
    grammar_free(g);
}
