/*
 * test_jinja.c - the Jinja interpreter, one construct at a time.
 *
 * tests/fixtures/jinja/cases.jsonl holds small templates with what Python's
 * Jinja2 renders from them in transformers' environment (written by
 * scripts/jinja_cases.py): each must render byte for byte the same, and each
 * raising case must fail with a message naming the same problem. The rest
 * are what a table cannot say: the bounds on a render, the clock, repeated
 * renders of one compiled template, and what the compiler notices.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja/jinja.h"
#include "helpers.h"

#define JINJA_CASES "tests/fixtures/jinja/cases.jsonl"
#define FIXED_NOW 1722002400.0 /* 2024-07-26 14:00 UTC: the fixtures' date */

/* Renders source with vars (JSON text); NULL and err set on failure. */
static char *render(const char *source, const char *vars_json, const JinjaLimits *limits,
                    JinjaError *err) {
    json_t *vars = json_loads(vars_json ? vars_json : "{}", 0, NULL);
    cr_assert(vars, "bad test JSON: %s", vars_json);
    JinjaTemplate *t = jinja_compile(source, strlen(source), err);
    size_t len = 0;
    char *out = t ? jinja_render(t, vars, FIXED_NOW, limits, &len, err) : NULL;
    if (out) cr_expect_eq(strlen(out), len);
    jinja_free(t);
    json_decref(vars);
    return out;
}

static void expect_error_with(const char *source, const char *vars, const JinjaLimits *limits,
                              const char *needle) {
    JinjaError err;
    char *out = render(source, vars, limits, &err);
    cr_expect_null(out, "%s rendered '%.80s'", source, out);
    cr_expect(strstr(err.msg, needle), "%s: '%s' lacks '%s'", source, err.msg, needle);
    free(out);
}

static void expect_error(const char *source, const JinjaLimits *limits, const char *needle) {
    expect_error_with(source, NULL, limits, needle);
}

Test(jinja, every_case_as_jinja2_renders_it) {
    json_t *rows = jsonl_load(JINJA_CASES);
    cr_assert_gt(json_array_size(rows), 140);
    size_t i, passed = 0;
    json_t *row;
    json_array_foreach(rows, i, row) {
        const char *name = json_string_value(json_object_get(row, "name"));
        const char *source = json_string_value(json_object_get(row, "template"));
        json_t *want = json_object_get(row, "expected");
        JinjaError err;
        JinjaTemplate *t = jinja_compile(source, strlen(source), &err);
        size_t len = 0;
        char *out = t ? jinja_render(t, json_object_get(row, "vars"), FIXED_NOW, NULL, &len, &err)
                      : NULL;
        if (want) {
            cr_expect(out, "%s: %s", name, err.msg);
            bool same = out && len == json_string_length(want) &&
                        memcmp(out, json_string_value(want), len) == 0;
            cr_expect(!out || same, "%s:\n--- got\n%s\n--- want\n%s", name, out,
                      json_string_value(want));
            passed += same;
        } else {
            const char *needle = json_string_value(json_object_get(row, "error"));
            cr_expect_null(out, "%s: Jinja2 raises (%s) but this rendered '%s'", name,
                           json_string_value(json_object_get(row, "python_error")), out);
            cr_expect(out || strstr(err.msg, needle), "%s: '%s' lacks '%s'", name, err.msg, needle);
            passed += !out && strstr(err.msg, needle);
        }
        free(out);
        jinja_free(t);
    }
    cr_expect_eq(passed, json_array_size(rows));
    json_decref(rows);
}

Test(jinja, bounds_end_a_render_with_an_error) {
    JinjaLimits small = jinja_default_limits();
    small.max_iterations = 1000;
    expect_error("{% for i in range(100000) %}x{% endfor %}", &small, "iterations");
    /* Nested loops count together. */
    expect_error("{% for i in range(40) %}{% for j in range(40) %}{% endfor %}{% endfor %}", &small,
                 "iterations");
    /* Unbounded recursion stops at the depth bound, not on the C stack. */
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, "deep");
    expect_error_with("{% for n in xs recursive %}{{ loop(xs) }}{% endfor %}", "{\"xs\": [1]}", NULL,
                      "deep");
    /* Output and memory. */
    small = jinja_default_limits();
    small.max_output = 1 << 16;
    expect_error("{% for i in range(100000) %}0123456789{% endfor %}", &small, "output");
    expect_error("{{ 'x' * 100000 }}", &small, "");
    expect_error("{% set s = 'ab' * 40000 %}{% for i in range(3) %}{% set s = s ~ s %}{% endfor %}",
                 &small, "");
    small = jinja_default_limits();
    small.max_memory = 1 << 20;
    expect_error("{% set ns = namespace(l=[]) %}{% for i in range(10000) %}{% set ns.l = ns.l + "
                 "[i] %}{% endfor %}", &small, "memory");
    /* A huge repetition is refused before it is built. */
    expect_error("{{ 'x' * 1000000000000 }}", NULL, "");
    expect_error("{{ [1] * 1000000000000 }}", NULL, "");
    /* Deeply nested expressions and blocks fail to compile, cleanly. */
    char deep[8192];
    size_t n = 0;
    n += (size_t)snprintf(deep + n, sizeof deep - n, "{{ ");
    for (int i = 0; i < 2000; i++) deep[n++] = '(';
    deep[n++] = '1';
    for (int i = 0; i < 2000; i++) deep[n++] = ')';
    snprintf(deep + n, sizeof deep - n, " }}");
    expect_error(deep, NULL, "");
    n = 0;
    for (int i = 0; i < 600; i++) n += (size_t)snprintf(deep + n, sizeof deep - n, "{%% if 1 %%}");
    expect_error(deep, NULL, "");
}

Test(jinja, errors_say_where) {
    JinjaError err;
    char *out = render("line one\n{% if x %}\n{{ x.y.z }}\n{% endif %}", "{\"x\": {\"a\": 1}}", NULL,
                       &err);
    cr_expect_null(out);
    cr_expect_eq(err.line, 3);
    cr_expect(strstr(err.msg, "line 3") && strstr(err.msg, "has no attribute 'y'"), "%s", err.msg);
    cr_expect_eq(err.raised, 0);
    out = render("\n{{ raise_exception('exact text') }}", NULL, NULL, &err);
    cr_expect_null(out);
    cr_expect_str_eq(err.msg, "exact text");
    cr_expect_eq(err.raised, 1);
    out = render("{% for %}", NULL, NULL, &err);
    cr_expect_null(out);
    cr_expect_eq(err.line, 1);
}

Test(jinja, strftime_now_reads_the_clock_given) {
    setenv("TZ", "UTC", 1);
    JinjaError err;
    JinjaTemplate *t = jinja_compile("{{ strftime_now('%Y-%m-%d %H:%M') }}", 36, &err);
    cr_assert(t, "%s", err.msg);
    json_t *vars = json_object();
    size_t len;
    char *a = jinja_render(t, vars, FIXED_NOW, NULL, &len, &err);
    char *b = jinja_render(t, vars, FIXED_NOW + 86400 * 366, NULL, &len, &err);
    cr_expect_str_eq(a, "2024-07-26 14:00");
    cr_expect_str_eq(b, "2025-07-27 14:00");
    free(a);
    free(b);
    json_decref(vars);
    jinja_free(t);
}

Test(jinja, one_template_renders_many_times_alike) {
    const char *src = "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                      "{{ m.content }}{% endfor %}{{ ns.n }}";
    JinjaError err;
    JinjaTemplate *t = jinja_compile(src, strlen(src), &err);
    cr_assert(t, "%s", err.msg);
    json_t *vars = json_loads("{\"messages\": [{\"content\": \"a\"}, {\"content\": \"b\"}]}", 0, NULL);
    for (int i = 0; i < 3; i++) {
        size_t len;
        char *out = jinja_render(t, vars, FIXED_NOW, NULL, &len, &err);
        cr_expect_str_eq(out, "ab2");
        free(out);
    }
    json_decref(vars);
    jinja_free(t);
}

Test(jinja, notices_templates_that_loop_over_content) {
    static const struct {
        const char *src;
        int iterates;
    } cases[] = {
        {"{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}", 1},
        {"{% for m in messages %}{% for p in m['content'] %}{% endfor %}{% endfor %}", 1},
        {"{% for m in messages %}{{ m.content }}{% endfor %}", 0},
        {"{% for m in messages %}{% for c in m.tool_calls %}{% endfor %}{% endfor %}", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        JinjaError err;
        JinjaTemplate *t = jinja_compile(cases[i].src, strlen(cases[i].src), &err);
        cr_assert(t, "%s", err.msg);
        cr_expect_eq(jinja_iterates_content(t), cases[i].iterates, "%s", cases[i].src);
        jinja_free(t);
    }
}

Test(jinja, python_strip) {
    size_t lo, hi;
    const char *s = " \t\xc2\xa0x y\n\xe3\x80\x80";
    jinja_py_strip(s, strlen(s), &lo, &hi);
    cr_expect_eq(lo, 4);
    cr_expect_eq(hi, 7);
    jinja_py_strip("   ", 3, &lo, &hi);
    cr_expect_eq(hi - lo, 0);
}
