/*
 * test_json_schema.c - JSON Schema into grammars (structured/json_schema.h),
 * through the public path: schema text -> Grammar -> grammar_compile ->
 * matching whole JSON texts. Each keyword with texts it must accept and
 * texts it must refuse; integer and number ranges checked exhaustively
 * against arithmetic; and every refused keyword with the message naming it.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "structured/json_schema.h"

#define TEXTS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* The schema compiled, or NULL with its message in *msg (malloc'ed). */
static CompiledGrammar *try_compile(const char *schema_text, char **msg) {
    json_error_t jerr;
    json_t *schema = json_loads(schema_text, JSON_DECODE_ANY, &jerr);
    cr_assert(schema, "bad test JSON: %s (%s)", schema_text, jerr.text);
    Grammar *g = grammar_new();
    cr_assert(g);
    CompiledGrammar *cg = NULL;
    *msg = NULL;
    if (json_schema_to_grammar(g, schema) == 0) {
        Error err;
        cg = grammar_compile(g, &err);
        if (!cg) *msg = strdup(err.msg);
    } else {
        const char *e = grammar_error(g);
        *msg = strdup(e ? e : "(json_schema_to_grammar failed without a message)");
    }
    grammar_free(g);
    json_decref(schema);
    return cg;
}

static CompiledGrammar *compile(const char *schema_text) {
    char *msg;
    CompiledGrammar *cg = try_compile(schema_text, &msg);
    cr_assert(cg, "%s refused: %s", schema_text, msg);
    return cg;
}

static bool matches(const CompiledGrammar *cg, const char *text) {
    return compiled_grammar_match(cg, text, strlen(text), NULL) == 1;
}

/* The schema accepts every text of yes and none of no. */
static void check(const char *schema, const char *const *yes, const char *const *no) {
    CompiledGrammar *cg = compile(schema);
    for (int i = 0; yes && yes[i]; i++) cr_expect(matches(cg, yes[i]), "%s should accept %s", schema, yes[i]);
    for (int i = 0; no && no[i]; i++) cr_expect(!matches(cg, no[i]), "%s should refuse %s", schema, no[i]);
    compiled_grammar_free(cg);
}

/* The schema is refused with a message holding every needle. */
static void refused(const char *schema, const char *needle, const char *needle2) {
    char *msg;
    CompiledGrammar *cg = try_compile(schema, &msg);
    cr_expect_null(cg, "%s should be refused (%s)", schema, needle);
    compiled_grammar_free(cg);
    cr_expect(msg && strstr(msg, needle) && (!needle2 || strstr(msg, needle2)), "%s: message '%s' lacks '%s' / '%s'",
              schema, msg ? msg : "(none)", needle, needle2 ? needle2 : "");
    free(msg);
}

/* ---- any value ------------------------------------------------------------------- */

Test(json_schema, empty_and_true_schemas_accept_any_compact_json) {
    const char *const yes[] = {"0", "-0", "12.5e-3", "1E+9", "true", "null", "\"\"", "\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
                               "\"\\u00e9\\uD83D\\uDE00\"", "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"", "[]", "{}",
                               "[1,\"x\",[{}],{\"a\":{\"b\":null}}]", NULL};
    const char *const no[] = {" 1", "1 ", "[1, 2]", "{\"a\": 1}", "01", "1.", ".5", "+1", "\"\x01\"", "\"\\x\"",
                              "\"\\ud800\"", "\"\\ude00\"", "[1,]", "{\"a\":1,}", "{a:1}", "tru", "\"abc", NULL};
    check("{}", yes, no);
    check("true", yes, no);
    check("{\"title\":\"t\",\"description\":\"d\",\"$schema\":\"x\",\"examples\":[1],\"default\":2}", yes, no);
}

Test(json_schema, scalar_types_and_type_lists) {
    check("{\"type\":\"boolean\"}", TEXTS("true", "false"), TEXTS("null", "1", "\"true\""));
    check("{\"type\":\"null\"}", TEXTS("null"), TEXTS("0", "\"null\""));
    check("{\"type\":\"string\"}", TEXTS("\"\"", "\"x y\"", "\"\\u0000\""), TEXTS("1", "null", "\"\n\""));
    check("{\"type\":\"integer\"}", TEXTS("0", "-7", "123456789012345678901234567890"),
          TEXTS("-0", "1.0", "1e3", "007", "+1"));
    check("{\"type\":\"number\"}", TEXTS("0", "-0.25", "6.02e23", "1E-7"), TEXTS("1.", "--1", "0x1", "NaN"));
    check("{\"type\":[\"string\",\"null\"]}", TEXTS("null", "\"a\""), TEXTS("1", "true"));
    check("{\"type\":[\"integer\",\"number\"]}", TEXTS("1", "1.5"), TEXTS("\"1\""));
    /* Without "type", the keywords' types are the ones written: a subset of what the schema allows. */
    check("{\"maxLength\":2}", TEXTS("\"ab\""), TEXTS("1", "null", "\"abc\""));
    check("{\"minimum\":3,\"required\":[\"a\"]}", TEXTS("3", "4.5", "{\"a\":0}"), TEXTS("2", "\"x\"", "{}"));
}

/* ---- integers and numbers ----------------------------------------------------------- */

static void check_integer_range(long long lo, long long hi) {
    char schema[200], text[64];
    snprintf(schema, sizeof schema, "{\"type\":\"integer\",\"minimum\":%lld,\"maximum\":%lld}", lo, hi);
    CompiledGrammar *cg = compile(schema);
    for (long long v = lo - 50; v <= hi + 50; v++) {
        snprintf(text, sizeof text, "%lld", v);
        cr_expect_eq(matches(cg, text), v >= lo && v <= hi, "%s on %s", schema, text);
    }
    const char *const never[] = {"-0", "007", "+1", "1.0", "1e1", "00", "-", ""};
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        cr_expect(!matches(cg, never[i]), "%s accepts %s", schema, never[i]);
    compiled_grammar_free(cg);
}

Test(json_schema, integer_ranges_exactly) {
    static const long long RANGES[][2] = {{0, 0},     {0, 9},      {1, 10},     {-10, 10},   {-1, 0},    {7, 7},
                                          {5, 1234},  {-999, -17}, {-305, 42},  {99, 101},   {100, 999}, {0, 99999},
                                          {-57, -57}, {10, 100},   {19, 2099},  {-1000, 1000}};
    for (size_t i = 0; i < sizeof RANGES / sizeof RANGES[0]; i++) check_integer_range(RANGES[i][0], RANGES[i][1]);
}

Test(json_schema, integer_bounds_exclusive_fractional_and_one_sided) {
    CompiledGrammar *cg = compile("{\"type\":\"integer\",\"exclusiveMinimum\":-3,\"exclusiveMaximum\":12}");
    char text[32];
    for (int v = -60; v <= 60; v++) {
        snprintf(text, sizeof text, "%d", v);
        cr_expect_eq(matches(cg, text), v > -3 && v < 12, "exclusive -3..12 on %d", v);
    }
    compiled_grammar_free(cg);
    cg = compile("{\"type\":\"integer\",\"minimum\":-2.5,\"maximum\":7.9}"); /* rounded inward: -2..7 */
    for (int v = -60; v <= 60; v++) {
        snprintf(text, sizeof text, "%d", v);
        cr_expect_eq(matches(cg, text), v >= -2 && v <= 7, "-2.5..7.9 on %d", v);
    }
    compiled_grammar_free(cg);
    cg = compile("{\"type\":\"integer\",\"minimum\":95}");
    for (int v = -60; v <= 2000; v++) {
        snprintf(text, sizeof text, "%d", v);
        cr_expect_eq(matches(cg, text), v >= 95, ">= 95 on %d", v);
    }
    cr_expect(matches(cg, "123456789012345678901234567890"));
    compiled_grammar_free(cg);
    cg = compile("{\"type\":\"integer\",\"exclusiveMaximum\":-20}");
    for (int v = -2000; v <= 60; v++) {
        snprintf(text, sizeof text, "%d", v);
        cr_expect_eq(matches(cg, text), v < -20, "< -20 on %d", v);
    }
    compiled_grammar_free(cg);
    /* draft 4: boolean exclusiveMinimum makes minimum exclusive */
    check("{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true,\"maximum\":3,\"exclusiveMaximum\":false}",
          TEXTS("1", "2", "3"), TEXTS("0", "4", "-1"));
}

Test(json_schema, integer_bounds_at_the_ends_of_int64) {
    check("{\"type\":\"integer\",\"minimum\":-9223372036854775808,\"maximum\":9223372036854775807}",
          TEXTS("-9223372036854775808", "9223372036854775807", "0", "-1", "1000000000000000000"),
          TEXTS("-9223372036854775809", "9223372036854775808", "10000000000000000000", "-0"));
    check("{\"type\":\"integer\",\"format\":\"int32\"}", TEXTS("2147483647", "-2147483648", "0"),
          TEXTS("2147483648", "-2147483649"));
    check("{\"type\":\"integer\",\"minimum\":1e20}", TEXTS("100000000000000000000", "100000000000000000001"),
          TEXTS("99999999999999999999", "1"));
}

/* Numbers in [lo, hi] hundredths (inclusive flags given) against the texts
 * of every hundredth around them, written with 0, 1 and 2 decimals. */
static void check_number_range(const char *schema, int lo, bool lo_incl, int hi, bool hi_incl) {
    CompiledGrammar *cg = compile(schema);
    char text[64];
    for (int v = lo - 300; v <= hi + 300; v++) {
        bool in = (lo_incl ? v >= lo : v > lo) && (hi_incl ? v <= hi : v < hi);
        int mag = abs(v);
        const char *sign = v < 0 ? "-" : "";
        snprintf(text, sizeof text, "%s%d.%02d", sign, mag / 100, mag % 100);
        cr_expect_eq(matches(cg, text), in, "%s on %s", schema, text);
        snprintf(text, sizeof text, "%s%d.%02d0", sign, mag / 100, mag % 100);
        cr_expect_eq(matches(cg, text), in, "%s on %s", schema, text);
        if (mag % 10 == 0) {
            snprintf(text, sizeof text, "%s%d.%d", sign, mag / 100, mag % 100 / 10);
            cr_expect_eq(matches(cg, text), in, "%s on %s", schema, text);
        }
        if (mag % 100 == 0) {
            snprintf(text, sizeof text, "%s%d", sign, mag / 100);
            cr_expect_eq(matches(cg, text), in, "%s on %s", schema, text);
        }
    }
    cr_expect(!matches(cg, "-0"), "%s accepts -0", schema);
    cr_expect(!matches(cg, "1e0"), "%s accepts an exponent", schema);
    compiled_grammar_free(cg);
}

Test(json_schema, number_ranges_exactly) {
    check_number_range("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", 0, true, 100, true);
    check_number_range("{\"type\":\"number\",\"minimum\":-1.5,\"maximum\":2.25}", -150, true, 225, true);
    check_number_range("{\"type\":\"number\",\"exclusiveMinimum\":-1.5,\"exclusiveMaximum\":2.25}", -150, false, 225, false);
    check_number_range("{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":0.07}", 0, false, 7, true);
    check_number_range("{\"type\":\"number\",\"minimum\":-3.33,\"exclusiveMaximum\":-3.05}", -333, true, -305, false);
    check_number_range("{\"type\":\"number\",\"minimum\":12.34,\"maximum\":12.34}", 1234, true, 1234, true);
    check_number_range("{\"type\":\"number\",\"minimum\":-10,\"exclusiveMaximum\":0}", -1000, true, 0, false);
    check_number_range("{\"type\":\"number\",\"minimum\":0.5,\"maximum\":19.99}", 50, true, 1999, true);
    check("{\"type\":\"number\",\"minimum\":0.1}", TEXTS("0.1", "0.10000000001", "7", "123456.5"),
          TEXTS("0.09999999", "0", "-1", "1e3"));
    check("{\"type\":\"number\",\"exclusiveMaximum\":-0.001}", TEXTS("-0.0011", "-5", "-123456789"),
          TEXTS("-0.001", "0", "-0.0001", "-0.00099"));
}

Test(json_schema, unsatisfiable_bounds_are_errors) {
    refused("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "accepts nothing", "minimum");
    refused("{\"type\":\"integer\",\"minimum\":4.2,\"maximum\":4.8}", "accepts nothing", "integer");
    refused("{\"type\":\"number\",\"exclusiveMinimum\":1,\"exclusiveMaximum\":1}", "accepts nothing", NULL);
    refused("{\"type\":\"integer\",\"multipleOf\":3}", "'multipleOf'", NULL);
    refused("{\"type\":\"number\",\"minimum\":\"1\"}", "'minimum' must be a number", NULL);
}

/* ---- strings ------------------------------------------------------------------------- */

Test(json_schema, string_lengths_count_characters_however_written) {
    check("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
          TEXTS("\"ab\"", "\"abc\"", "\"\xc3\xa9\\n\"", "\"\\ud83d\\ude00x\"", "\"\xf0\x9f\x98\x80\xf0\x9f\x98\x80\"",
                "\"\\u0041\\\"\""),
          TEXTS("\"a\"", "\"abcd\"", "\"\"", "\"\\ud83d\\ude00\"", "\"\\\\\""));
    check("{\"type\":\"string\",\"maxLength\":0}", TEXTS("\"\""), TEXTS("\"a\""));
    refused("{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "accepts nothing", "minLength");
    refused("{\"type\":\"string\",\"minLength\":-1}", "'minLength' must be a whole number", NULL);
}

Test(json_schema, string_patterns_search_unless_anchored) {
    check("{\"type\":\"string\",\"pattern\":\"^[a-z]+[0-9]?$\"}", TEXTS("\"abc\"", "\"ab7\""),
          TEXTS("\"\"", "\"Abc\"", "\"ab77\"", "abc"));
    check("{\"type\":\"string\",\"pattern\":\"ab\"}", TEXTS("\"ab\"", "\"xxaby\""), TEXTS("\"a b\"", "\"\""));
    check("{\"pattern\":\"^\\\"q\\\"$\"}", TEXTS("\"\\\"q\\\"\""), TEXTS("\"q\"", "\"\"q\"\""));
    refused("{\"type\":\"string\",\"pattern\":\"^a+$\",\"maxLength\":3}", "'pattern'", "'maxLength'");
    refused("{\"type\":\"string\",\"pattern\":\"(a\"}", "regex", NULL);
}

Test(json_schema, string_formats) {
    check("{\"type\":\"string\",\"format\":\"date\"}",
          TEXTS("\"2024-02-29\"", "\"2000-02-29\"", "\"2023-12-31\"", "\"1999-04-30\"", "\"0001-01-01\""),
          TEXTS("\"2023-02-29\"", "\"1900-02-29\"", "\"2024-04-31\"", "\"2024-13-01\"", "\"2024-00-10\"",
                "\"2024-01-00\"", "\"2024-1-01\"", "\"2024-01-32\""));
    check("{\"type\":\"string\",\"format\":\"time\"}",
          TEXTS("\"12:34:56Z\"", "\"23:59:59.123456789+05:30\"", "\"00:00:00-23:59\""),
          TEXTS("\"24:00:00Z\"", "\"12:60:00Z\"", "\"12:34:56\"", "\"12:34:56.Z\"", "\"12:34:56+24:00\"", "\"1:02:03Z\""));
    check("{\"type\":\"string\",\"format\":\"date-time\"}", TEXTS("\"2024-06-01T08:30:00Z\"", "\"2024-06-01T08:30:00.5-07:00\""),
          TEXTS("\"2024-06-01 08:30:00Z\"", "\"2024-06-01T08:30Z\"", "\"2024-06-31T08:30:00Z\""));
    check("{\"type\":\"string\",\"format\":\"uuid\"}", TEXTS("\"123e4567-e89b-12d3-a456-426614174000\"", "\"ABCDEF01-2345-6789-abcd-ef0123456789\""),
          TEXTS("\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400\"", "\"g23e4567-e89b-12d3-a456-426614174000\""));
    check("{\"type\":\"string\",\"format\":\"email\"}",
          TEXTS("\"a@b.co\"", "\"first.last+tag@mail.example.org\"", "\"x_y-z!#$%&'*/=?^`{|}~@a-b.c9\""),
          TEXTS("\"a@localhost\"", "\"a..b@x.com\"", "\".a@x.com\"", "\"a.@x.com\"", "\"a@-x.com\"", "\"a@x-.com\"",
                "\"a@x..com\"", "\"@x.com\"", "\"a b@x.com\"", "\"a@b@c.com\""));
    refused("{\"type\":\"string\",\"format\":\"hostname\"}", "format 'hostname'", NULL);
    refused("{\"type\":\"string\",\"format\":\"date\",\"minLength\":1}", "'format'", "'minLength'");
}

/* ---- enum and const --------------------------------------------------------------------- */

Test(json_schema, enum_and_const_are_their_compact_texts) {
    check("{\"enum\":[\"caf\xc3\xa9\",\"a\\\"b/c\",1,2.5,null,true,{\"k\":[1,{\"z\":\"\xe2\x82\xac\"}]},[]]}",
          TEXTS("\"caf\xc3\xa9\"", "\"a\\\"b/c\"", "1", "2.5", "null", "true", "{\"k\":[1,{\"z\":\"\xe2\x82\xac\"}]}", "[]"),
          TEXTS("\"cafe\"", "2", "false", "{\"k\":[1]}", "{\"k\": [1,{\"z\":\"\xe2\x82\xac\"}]}", "\"a\""));
    check("{\"const\":\"\xe6\x97\xa5\xe6\x9c\xac\"}", TEXTS("\"\xe6\x97\xa5\xe6\x9c\xac\""), TEXTS("\"\xe6\x97\xa5\""));
    check("{\"type\":\"string\",\"enum\":[\"a\",1,\"b\"]}", TEXTS("\"a\"", "\"b\""), TEXTS("1"));
    check("{\"enum\":[1,2,3],\"const\":2}", TEXTS("2"), TEXTS("1", "3"));
    refused("{\"enum\":[]}", "accepts nothing", "'enum' is empty");
    refused("{\"type\":\"integer\",\"enum\":[\"a\"]}", "accepts nothing", "'type'");
    refused("{\"enum\":[\"a\",\"bb\"],\"maxLength\":1}", "'maxLength' together with 'enum'", NULL);
}

/* ---- objects ------------------------------------------------------------------------------ */

Test(json_schema, properties_in_order_with_any_subset_of_optional_ones) {
    /* a and d required, b and c optional: exactly the 4 subsets, in schema order. */
    CompiledGrammar *cg = compile("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},"
                                  "\"c\":{\"type\":\"boolean\"},\"d\":{\"type\":\"null\"}},\"required\":[\"d\",\"a\"],"
                                  "\"additionalProperties\":false}");
    const char *member[4] = {"\"a\":1", "\"b\":\"x\"", "\"c\":true", "\"d\":null"};
    for (int subset = 0; subset < 16; subset++) {
        char text[128] = "{";
        for (int i = 0; i < 4; i++)
            if (subset & (1 << i)) {
                if (text[1]) strcat(text, ",");
                strcat(text, member[i]);
            }
        strcat(text, "}");
        bool valid = (subset & 1) && (subset & 8);
        cr_expect_eq(matches(cg, text), valid, "%s", text);
    }
    cr_expect(!matches(cg, "{\"d\":null,\"a\":1}"), "order is the schema's");
    cr_expect(!matches(cg, "{\"a\":1,\"d\":null,\"e\":1}"), "no additional properties");
    cr_expect(!matches(cg, "{\"a\":1,,\"d\":null}"));
    cr_expect(!matches(cg, "{\"a\":\"1\",\"d\":null}"), "values keep their schema");
    compiled_grammar_free(cg);

    cg = compile("{\"properties\":{\"p\":{},\"q\":{},\"r\":{},\"s\":{}},\"additionalProperties\":false}");
    for (int subset = 0; subset < 16; subset++) {
        char text[128] = "{";
        for (int i = 0; i < 4; i++)
            if (subset & (1 << i)) {
                if (text[1]) strcat(text, ",");
                char m[16];
                snprintf(m, sizeof m, "\"%c\":%d", "pqrs"[i], i);
                strcat(text, m);
            }
        strcat(text, "}");
        cr_expect(matches(cg, text), "all-optional subset %s", text);
    }
    cr_expect(!matches(cg, "{,\"p\":1}"));
    cr_expect(!matches(cg, "{\"p\":1,}"));
    compiled_grammar_free(cg);
}

Test(json_schema, additional_properties_forms) {
    const char *props = "\"properties\":{\"a\":{\"type\":\"integer\"},\"ab\":{\"const\":1}}";
    char schema[256];
    snprintf(schema, sizeof schema, "{%s}", props); /* absent: any other key, any value */
    check(schema, TEXTS("{}", "{\"a\":1,\"x\":[true]}", "{\"zz\":{},\"b\":2}", "{\"abc\":1,\"\":2,\"a \":3}"),
          TEXTS("{\"a\":1,\"a\":2}", "{\"ab\":1,\"ab\":1}", "{\"x\":1,\"a\":1}", "{\"a\":\"s\"}"));
    snprintf(schema, sizeof schema, "{%s,\"additionalProperties\":true}", props);
    check(schema, TEXTS("{\"a\":1,\"x\":null}"), TEXTS("{\"a\":1,\"ab\":1,\"a\":1}"));
    snprintf(schema, sizeof schema, "{%s,\"additionalProperties\":false}", props);
    check(schema, TEXTS("{\"a\":1}", "{\"ab\":1}"), TEXTS("{\"x\":1}", "{\"a\":1,\"x\":1}"));
    snprintf(schema, sizeof schema, "{%s,\"additionalProperties\":{\"type\":\"string\"}}", props);
    check(schema, TEXTS("{\"x\":\"1\"}", "{\"a\":2,\"x\":\"y\",\"y\":\"z\"}"), TEXTS("{\"x\":1}", "{\"a\":\"1\"}"));
    /* a required name outside properties takes additionalProperties' schema */
    check("{\"type\":\"object\",\"required\":[\"id\"],\"additionalProperties\":{\"type\":\"integer\"}}",
          TEXTS("{\"id\":3}", "{\"id\":3,\"n\":4}"), TEXTS("{}", "{\"id\":\"3\"}", "{\"n\":4}"));
    refused("{\"required\":[\"id\"],\"additionalProperties\":false}", "accepts nothing", "'id'");
    refused("{\"properties\":{\"a\":false},\"required\":[\"a\"]}", "accepts nothing", "/properties/a");
    check("{\"properties\":{\"a\":false,\"b\":{}},\"additionalProperties\":true}", TEXTS("{\"b\":1}", "{\"c\":1}"),
          TEXTS("{\"a\":1}"));
    /* property names with characters that JSON escapes */
    check("{\"properties\":{\"q\\\"x\":{\"type\":\"integer\"},\"\xc3\xa9\":{}},\"required\":[\"q\\\"x\"]}",
          TEXTS("{\"q\\\"x\":1}", "{\"q\\\"x\":1,\"\xc3\xa9\":2,\"e\":3}"), TEXTS("{\"q\\\"x\":1,\"\xc3\xa9\":2,\"\xc3\xa9\":3}"));
}

Test(json_schema, property_counts) {
    /* Listed properties count as present whether written or not: fewer objects, never more. */
    check("{\"properties\":{\"a\":{}},\"maxProperties\":2}", TEXTS("{}", "{\"a\":1,\"b\":2}", "{\"b\":1}"),
          TEXTS("{\"a\":1,\"b\":2,\"c\":3}", "{\"b\":1,\"c\":2}"));
    check("{\"properties\":{\"a\":{}},\"required\":[\"a\"],\"minProperties\":1}", TEXTS("{\"a\":1}"), TEXTS("{}"));
    refused("{\"properties\":{\"a\":{}},\"minProperties\":2}", "'minProperties'", NULL);
    refused("{\"properties\":{\"a\":{},\"b\":{}},\"maxProperties\":1}", "'maxProperties'", NULL);
    refused("{\"patternProperties\":{\"^x\":{}}}", "unsupported keyword 'patternProperties'", NULL);
    refused("{\"propertyNames\":{\"maxLength\":3}}", "'propertyNames'", NULL);
    refused("{\"dependentRequired\":{\"a\":[\"b\"]}}", "'dependentRequired'", NULL);
}

/* ---- arrays -------------------------------------------------------------------------------- */

Test(json_schema, arrays_items_and_counts) {
    check("{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}", TEXTS("[]", "[1]", "[1,-2,3]"),
          TEXTS("[1,]", "[,1]", "[\"a\"]", "[1, 2]", "[1,2.5]"));
    check("{\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", TEXTS("[1,2]", "[1,2,3]"),
          TEXTS("[]", "[1]", "[1,2,3,4]"));
    check("{\"type\":\"array\",\"maxItems\":1}", TEXTS("[]", "[{\"a\":[1]}]"), TEXTS("[1,2]"));
    check("{\"type\":\"array\",\"items\":false}", TEXTS("[]"), TEXTS("[1]"));
    refused("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "accepts nothing", "minItems");
    refused("{\"type\":\"array\",\"items\":false,\"minItems\":1}", "accepts nothing", "minItems");
    refused("{\"type\":\"array\",\"uniqueItems\":true}", "'uniqueItems'", NULL);
    check("{\"type\":\"array\",\"uniqueItems\":false}", TEXTS("[1,1]"), NULL);
    refused("{\"type\":\"array\",\"contains\":{\"type\":\"integer\"}}", "unsupported keyword 'contains'", NULL);
}

Test(json_schema, tuples) {
    const char *tuple = "{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}";
    check(tuple, TEXTS("[]", "[\"a\"]", "[\"a\",1]"), TEXTS("[1]", "[\"a\",\"b\"]", "[\"a\",1,2]"));
    check("{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":{\"type\":\"null\"},\"minItems\":2}",
          TEXTS("[\"a\",1]", "[\"a\",1,null,null]"), TEXTS("[\"a\"]", "[\"a\",1,2]"));
    check("{\"prefixItems\":[{\"const\":1},{\"const\":2},{\"const\":3}],\"maxItems\":2}", TEXTS("[]", "[1]", "[1,2]"),
          TEXTS("[1,2,3]", "[2]"));
    /* draft 7 spelling: items as a list, additionalItems for the rest */
    check("{\"items\":[{\"type\":\"boolean\"}],\"additionalItems\":{\"type\":\"string\"}}",
          TEXTS("[true]", "[true,\"x\",\"y\"]"), TEXTS("[\"x\"]", "[true,false]"));
    check("{\"items\":[{\"type\":\"boolean\"}]}", TEXTS("[true,1,{}]"), TEXTS("[1]"));
}

/* ---- composition and references ----------------------------------------------------------------- */

Test(json_schema, any_of_one_of_and_all_of) {
    check("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", TEXTS("5", "\"a\""),
          TEXTS("\"ab\"", "null", "1.5"));
    check("{\"oneOf\":[{\"const\":\"x\"},{\"type\":\"boolean\"}]}", TEXTS("\"x\"", "false"), TEXTS("\"y\""));
    /* the parent's keywords apply to every alternative */
    check("{\"type\":\"string\",\"anyOf\":[{\"maxLength\":1},{\"format\":\"date\"}]}", TEXTS("\"a\"", "\"2020-01-01\""),
          TEXTS("\"ab\"", "1"));
    check("{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\"}},\"required\":[\"k\"],"
          "\"anyOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},{\"properties\":{\"b\":{}},\"required\":[\"b\"]}]}",
          TEXTS("{\"k\":\"\",\"a\":1}", "{\"k\":\"\",\"b\":null}"), TEXTS("{\"k\":\"\"}", "{\"a\":1}", "{\"k\":\"\",\"a\":\"1\"}"));
    /* allOf: properties and required merged, bounds intersected */
    check("{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0}},\"required\":[\"a\"]},"
          "{\"properties\":{\"a\":{\"maximum\":5},\"b\":{\"type\":\"string\"}},\"required\":[\"b\"],\"additionalProperties\":false}]}",
          TEXTS("{\"a\":0,\"b\":\"\"}", "{\"a\":5,\"b\":\"x\"}"), TEXTS("{\"a\":6,\"b\":\"\"}", "{\"a\":1}", "{\"b\":\"\"}", "{\"a\":1,\"b\":\"\",\"c\":1}"));
    check("{\"allOf\":[{\"type\":[\"integer\",\"string\"]},{\"type\":[\"number\",\"null\"]}]}", TEXTS("3"),
          TEXTS("3.5", "null", "\"3\""));
    /* allOf keeps additionalProperties: false of one part against the other's properties */
    check("{\"allOf\":[{\"properties\":{\"a\":{}},\"additionalProperties\":false},{\"properties\":{\"b\":{}}}]}",
          TEXTS("{\"a\":1}", "{}"), TEXTS("{\"b\":1}", "{\"a\":1,\"b\":1}"));
    refused("{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "accepts nothing", NULL);
    /* As JSON Schema reads it: "a" is an additional property for the parent, which allows none. */
    refused("{\"properties\":{\"k\":{}},\"additionalProperties\":false,\"anyOf\":[{\"properties\":{\"a\":{}},\"required\":[\"a\"]}]}",
            "accepts nothing", "required property 'a'");
    refused("{\"allOf\":[{\"pattern\":\"a\"},{\"pattern\":\"b\"}]}", "'pattern'", NULL);
    refused("{\"not\":{\"type\":\"string\"}}", "unsupported keyword 'not'", NULL);
}

Test(json_schema, references_and_recursion) {
    /* a tree: children are nodes themselves */
    const char *tree = "{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{"
                       "\"v\":{\"type\":\"integer\"},\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
                       "\"required\":[\"v\"],\"additionalProperties\":false}}}";
    check(tree, TEXTS("{\"v\":1}", "{\"v\":1,\"children\":[]}", "{\"v\":1,\"children\":[{\"v\":2,\"children\":[{\"v\":3}]},{\"v\":4}]}"),
          TEXTS("{\"v\":1,\"children\":[{}]}", "{\"children\":[]}", "{\"v\":1,\"children\":[{\"v\":2,\"x\":1}]}"));
    /* "#" is the root; definitions is the older name of $defs */
    check("{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"integer\"},{\"$ref\":\"#\"}]},\"maxItems\":2}",
          TEXTS("[]", "[1,[2,[[]]]]"), TEXTS("[1,2,3]", "[[1,2,3]]"));
    check("{\"definitions\":{\"a/b\":{\"const\":1},\"c~d\":{\"const\":2},\"e%f\":{\"const\":3}},"
          "\"anyOf\":[{\"$ref\":\"#/definitions/a~1b\"},{\"$ref\":\"#/definitions/c~0d\"},{\"$ref\":\"#/definitions/e%25f\"}]}",
          TEXTS("1", "2", "3"), TEXTS("4"));
    /* a $ref with other keywords is both */
    check("{\"$defs\":{\"n\":{\"type\":\"integer\",\"minimum\":0}},\"$ref\":\"#/$defs/n\",\"maximum\":3}", TEXTS("0", "3"),
          TEXTS("4", "-1"));
    check("{\"$defs\":{\"base\":{\"properties\":{\"id\":{\"type\":\"integer\"}},\"required\":[\"id\"]}},"
          "\"allOf\":[{\"$ref\":\"#/$defs/base\"}],\"properties\":{\"name\":{\"type\":\"string\"}},\"required\":[\"name\"]}",
          TEXTS("{\"name\":\"x\",\"id\":1}"), TEXTS("{\"id\":1}", "{\"name\":\"x\"}"));
    /* a definition with no value only removes the choices that use it */
    check("{\"$defs\":{\"never\":false},\"properties\":{\"x\":{\"$ref\":\"#/$defs/never\"},\"y\":{}},\"additionalProperties\":false}",
          TEXTS("{}", "{\"y\":1}"), TEXTS("{\"x\":1}"));
    refused("{\"$ref\":\"#/$defs/missing\"}", "$ref '#/$defs/missing'", NULL);
    refused("{\"$ref\":\"https://example.com/s.json\"}", "$ref 'https://example.com/s.json'", NULL);
    refused("{\"$ref\":\"other.json#/a\"}", "not supported", NULL);
    refused("{\"$defs\":{\"a\":{\"allOf\":[{\"$ref\":\"#/$defs/a\"}]}},\"$ref\":\"#/$defs/a\"}", "(a $ref cycle?)", NULL);
    refused("{\"$defs\":{\"a\":{\"properties\":{\"x\":{\"$ref\":\"#/$defs/a\"}},\"required\":[\"x\"]}},\"$ref\":\"#/$defs/a\"}",
            "", NULL); /* needs an infinite value: the grammar compiler says so */
}

/* ---- refusals and limits --------------------------------------------------------------------------- */

Test(json_schema, unknown_keywords_are_named_with_their_place) {
    refused("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"frobnicate\":1}}}",
            "unsupported keyword 'frobnicate'", "at #/properties/a");
    refused("{\"items\":{\"if\":{}}}", "unsupported keyword 'if'", "at #/items");
    refused("{\"anyOf\":[{},{\"nullable\":true}]}", "'nullable'", "#/anyOf/1");
    refused("{\"type\":\"strin\"}", "unknown type 'strin'", NULL);
    refused("false", "accepts nothing", NULL);
    refused("{\"properties\":{\"x~y/z\":{\"unevaluatedProperties\":false}}}", "'unevaluatedProperties'", "#/properties/x~0y~1z");
    refused("[]", "a schema must be an object or a boolean", NULL);
}

Test(json_schema, hostile_schemas_are_refused_not_crashed_on) {
    /* nesting far deeper than the limit */
    size_t depth = 1500; /* jansson reads up to 2048 levels */
    char *deep = malloc(depth * 20 + 16);
    cr_assert(deep);
    char *p = deep;
    for (size_t i = 0; i < depth; i++) p += sprintf(p, "{\"items\":");
    p += sprintf(p, "{}");
    for (size_t i = 0; i < depth; i++) *p++ = '}';
    *p = '\0';
    refused(deep, "nested more than 64", NULL);
    free(deep);
    /* an enum too long */
    char *big = malloc(10002 * 8 + 32);
    cr_assert(big);
    p = big + sprintf(big, "{\"enum\":[");
    for (int i = 0; i <= 10000; i++) p += sprintf(p, "%s%d", i ? "," : "", i);
    strcpy(p, "]}");
    refused(big, "'enum' has more than 10000", NULL);
    free(big);
    /* anyOf inside allOf multiplying out */
    char product[4096];
    p = product + sprintf(product, "{\"allOf\":[");
    for (int i = 0; i < 4; i++) {
        p += sprintf(p, "%s{\"anyOf\":[", i ? "," : "");
        for (int j = 0; j < 10; j++) p += sprintf(p, "%s{\"maxLength\":%d}", j ? "," : "", j + i);
        p += sprintf(p, "]}");
    }
    strcpy(p, "]}");
    refused(product, "more than 1024 alternatives", NULL);
    refused("{\"type\":\"array\",\"minItems\":1e300}", "'minItems' must be a whole number", NULL);
    /* many allOf parts naming the same property stay one allOf deep */
    char *parts = malloc(200 * 64 + 32);
    cr_assert(parts);
    p = parts + sprintf(parts, "{\"allOf\":[");
    for (int i = 0; i < 200; i++) p += sprintf(p, "%s{\"properties\":{\"n\":{\"maximum\":%d}}}", i ? "," : "", 1000 - i);
    strcpy(p, "],\"required\":[\"n\"]}");
    check(parts, TEXTS("{\"n\":801}", "{\"n\":-5}"), TEXTS("{\"n\":802}", "{}"));
    free(parts);
    /* a listed name too long to keep out of additional keys */
    char long_name[400];
    memset(long_name, 'k', 300);
    long_name[300] = '\0';
    char schema[512];
    snprintf(schema, sizeof schema, "{\"properties\":{\"%s\":{}}}", long_name);
    refused(schema, "longer than 256 bytes", NULL);
    snprintf(schema, sizeof schema, "{\"properties\":{\"%s\":{}},\"additionalProperties\":false}", long_name);
    check(schema, TEXTS("{}"), TEXTS("{\"k\":1}"));
}
