/*
 * test_server_embeddings.c - POST /v1/embeddings end to end: a real server
 * on the tiny Qwen3-Embedding fixture, checked against the float64
 * reference vectors (tests/fixtures/tiny-qwen3-embedding-golden) with
 * chunked prefill and a shared prefix; base64 against float; dimensions;
 * truncation and the context limit; every malformed field a 400 naming
 * it; which endpoints each kind of model refuses (--runner); and the
 * OpenAI SDK's client.embeddings.create (tests/e2e/embeddings.mjs).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "server_helpers.h"

#define EMBED_MODEL "tests/fixtures/tiny-qwen3-embedding"
#define EMBED_GOLDEN "tests/fixtures/tiny-qwen3-embedding-golden/golden.json"
#define EMBED_GGUF "tests/fixtures/tiny-qwen3-embedding.gguf"
#define EMBED_TOL 1e-4
#define HIDDEN 32
/* float32 everywhere, and prefill in chunks of 64 tokens */
#define EMBED_FLAGS "--model " EMBED_MODEL " --kv-cache-dtype float32 --dtype float32 --block-size 16 " \
                    "--max-num-batched-tokens 64"

static json_t *golden_case(const char *name) {
    json_error_t jerr;
    json_t *g = json_load_file(EMBED_GOLDEN, 0, &jerr);
    cr_assert(g, "%s: %s", EMBED_GOLDEN, jerr.text);
    json_t *c = json_incref(json_object_get(json_object_get(g, "cases"), name));
    json_decref(g);
    cr_assert(c, "no case %s", name);
    return c;
}

static double cosine(json_t *a, json_t *b) {
    double dot = 0, na = 0, nb = 0;
    size_t n = json_array_size(a);
    cr_assert_eq(n, json_array_size(b));
    for (size_t i = 0; i < n; i++) {
        double x = json_number_value(json_array_get(a, i)), y = json_number_value(json_array_get(b, i));
        dot += x * y, na += x * x, nb += y * y;
    }
    return 1 - dot / sqrt(na * nb);
}

/* POST /v1/embeddings; asserts the status. */
static json_t *embed(const TestServer *s, const char *body, int want_status) {
    int status;
    json_t *r = http_json(s, "/v1/embeddings", body, &status);
    cr_assert_eq(status, want_status, "%s -> %d: %s", body, status, r ? json_dumps(r, 0) : "(not JSON)");
    return r;
}

/* The case's inputs as texts (when it has them) or token ids, in one request. */
static char *case_body(json_t *c, bool as_ids, const char *extra) {
    json_t *input = json_array();
    size_t i;
    json_t *row;
    json_array_foreach(c, i, row) {
        json_t *text = json_object_get(row, "text");
        json_array_append(input, !as_ids && json_is_string(text) ? text : json_object_get(row, "ids"));
    }
    json_t *body = json_pack("{s:o}", "input", input);
    if (extra) {
        json_t *more = json_loads(extra, 0, NULL);
        json_object_update(body, more);
        json_decref(more);
    }
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    return text;
}

static double check_against_golden(const TestServer *s, const char *name, bool as_ids) {
    json_t *c = golden_case(name);
    char *body = case_body(c, as_ids, NULL);
    json_t *r = embed(s, body, 200);
    json_t *data = json_object_get(r, "data");
    cr_assert_eq(json_array_size(data), json_array_size(c));
    double worst = 0;
    long tokens = 0;
    for (size_t i = 0; i < json_array_size(c); i++) {
        json_t *d = json_array_get(data, i), *row = json_array_get(c, i);
        cr_assert_str_eq(json_string_value(json_object_get(d, "object")), "embedding");
        cr_assert_eq(json_integer_value(json_object_get(d, "index")), (json_int_t)i);
        double dist = cosine(json_object_get(d, "embedding"), json_object_get(row, "last"));
        cr_assert(dist <= EMBED_TOL, "%s input %zu: cosine distance %g", name, i, dist);
        worst = fmax(worst, dist);
        tokens += (long)json_array_size(json_object_get(row, "ids"));
    }
    json_t *usage = json_object_get(r, "usage");
    cr_assert_eq(json_integer_value(json_object_get(usage, "prompt_tokens")), tokens, "%s", body);
    cr_assert_eq(json_integer_value(json_object_get(usage, "total_tokens")), tokens);
    cr_assert_str_eq(json_string_value(json_object_get(r, "object")), "list");
    cr_assert_str_eq(json_string_value(json_object_get(r, "model")), EMBED_MODEL);
    cr_log_info("server, %s (%s): largest cosine distance %.3g", name, as_ids ? "ids" : "texts", worst);
    json_decref(r);
    json_decref(c);
    free(body);
    return worst;
}

Test(server_embed, matches_the_reference, .timeout = 120) {
    TestServer s;
    server_start(&s, EMBED_FLAGS);
    check_against_golden(&s, "single", false); /* text: the tokenizer appends <|endoftext|> */
    check_against_golden(&s, "single", true);
    check_against_golden(&s, "batch", false);
    check_against_golden(&s, "long", true); /* 700 tokens in chunks of 64 */
    check_against_golden(&s, "shared_prefix", true);
    check_against_golden(&s, "shared_prefix", true); /* again: now from the prefix cache */
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* The same model as a GGUF file (make_gguf.py writes qwen3.pooling_type = 3
 * from modules.json and add_eos_token from the tokenizer's template, as
 * llama.cpp's converter does): embeddings with no flag, the reference's
 * vectors (served under the folder's name so that the same checks apply). */
Test(server_embed, gguf_file_with_its_pooling_type, .timeout = 120) {
    TestServer s;
    server_start(&s, "--model " EMBED_GGUF " --served-model-name " EMBED_MODEL " --kv-cache-dtype float32 "
                     "--dtype float32 --block-size 16 --max-num-batched-tokens 64");
    check_against_golden(&s, "single", false);
    check_against_golden(&s, "batch", false);
    check_against_golden(&s, "long", true);
    json_t *r = embed(&s, "{\"input\": \"hi\"}", 200);
    json_decref(r);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* base64 decodes to the float answer's floats; dimensions cuts and renormalises. */
Test(server_embed, base64_and_dimensions, .timeout = 120) {
    TestServer s;
    server_start(&s, EMBED_FLAGS);
    json_t *f = embed(&s, "{\"input\": [\"Hello, world\", \"nanovllm\"]}", 200);
    json_t *b = embed(&s, "{\"input\": [\"Hello, world\", \"nanovllm\"], \"encoding_format\": \"base64\"}", 200);
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < 2; i++) {
        json_t *floats = json_object_get(json_array_get(json_object_get(f, "data"), i), "embedding");
        const char *text = json_string_value(json_object_get(json_array_get(json_object_get(b, "data"), i), "embedding"));
        cr_assert(text, "base64 is a string");
        cr_assert_eq(strlen(text), (HIDDEN * 4 + 2) / 3 * 4);
        unsigned char bytes[HIDDEN * 4 + 3];
        size_t n = 0;
        uint32_t acc = 0;
        int bits = 0;
        for (const char *p = text; *p && *p != '='; p++) {
            acc = acc << 6 | (uint32_t)(strchr(abc, *p) - abc);
            if ((bits += 6) >= 8) bytes[n++] = (unsigned char)(acc >> (bits -= 8));
        }
        cr_assert_eq(n, HIDDEN * 4);
        for (int j = 0; j < HIDDEN; j++) {
            uint32_t u = (uint32_t)bytes[4 * j] | (uint32_t)bytes[4 * j + 1] << 8 | (uint32_t)bytes[4 * j + 2] << 16 |
                         (uint32_t)bytes[4 * j + 3] << 24; /* little-endian */
            float v;
            memcpy(&v, &u, 4);
            cr_assert_eq(v, (float)json_number_value(json_array_get(floats, (size_t)j)), "input %zu value %d", i, j);
        }
    }
    json_t *full = json_object_get(json_array_get(json_object_get(f, "data"), 0), "embedding");
    double norm = 0;
    for (int j = 0; j < HIDDEN; j++) norm += pow(json_number_value(json_array_get(full, (size_t)j)), 2);
    cr_assert(fabs(sqrt(norm) - 1) < 1e-6, "normalised (the folder has Normalize): %g", sqrt(norm));
    for (int d = 1; d <= HIDDEN; d *= 2) {
        char body[128];
        snprintf(body, sizeof body, "{\"input\": \"Hello, world\", \"dimensions\": %d}", d);
        json_t *r = embed(&s, body, 200);
        json_t *v = json_object_get(json_array_get(json_object_get(r, "data"), 0), "embedding");
        cr_assert_eq(json_array_size(v), (size_t)d);
        double n2 = 0, want2 = 0;
        for (int j = 0; j < d; j++) want2 += pow(json_number_value(json_array_get(full, (size_t)j)), 2);
        for (int j = 0; j < d; j++) {
            double x = json_number_value(json_array_get(v, (size_t)j));
            n2 += x * x;
            cr_assert(fabs(x - json_number_value(json_array_get(full, (size_t)j)) / sqrt(want2)) < 1e-6,
                      "dimensions %d, value %d", d, j);
        }
        cr_assert(fabs(sqrt(n2) - 1) < 1e-6, "dimensions %d: norm %g", d, sqrt(n2));
        json_decref(r);
    }
    json_decref(f);
    json_decref(b);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* Longer than max_model_len: a 400, unless truncate_prompt_tokens keeps
 * the last tokens (-1: as many as the model takes). */
Test(server_embed, context_limit_and_truncation, .timeout = 120) {
    TestServer s;
    server_start(&s, EMBED_FLAGS " --max-model-len 64");
    char body[2048];
    int o = snprintf(body, sizeof body, "{\"input\": [");
    for (int i = 0; i < 100; i++) o += snprintf(body + o, sizeof body - (size_t)o, "%s%d", i ? "," : "", 1000 + i);
    snprintf(body + o, sizeof body - (size_t)o, "]");
    char with[2300];
    snprintf(with, sizeof with, "%s}", body);
    json_t *r = embed(&s, with, 400);
    json_t *err = json_object_get(r, "error");
    cr_assert_str_eq(json_string_value(json_object_get(err, "code")), "context_length_exceeded");
    cr_assert_str_eq(json_string_value(json_object_get(err, "param")), "input");
    json_decref(r);
    snprintf(with, sizeof with, "%s, \"truncate_prompt_tokens\": 10}", body);
    r = embed(&s, with, 200);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(r, "usage"), "prompt_tokens")), 10);
    json_decref(r);
    json_t *last10 = embed(&s, "{\"input\": [1090,1091,1092,1093,1094,1095,1096,1097,1098,1099], \"encoding_format\": \"base64\"}", 200);
    snprintf(with, sizeof with, "%s, \"truncate_prompt_tokens\": 10, \"encoding_format\": \"base64\"}", body);
    r = embed(&s, with, 200);
    cr_assert(json_equal(json_object_get(r, "data"), json_object_get(last10, "data")), "the last 10 tokens are kept");
    json_decref(r);
    json_decref(last10);
    snprintf(with, sizeof with, "%s, \"truncate_prompt_tokens\": -1}", body);
    r = embed(&s, with, 200);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(r, "usage"), "prompt_tokens")), 64);
    json_decref(r);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

Test(server_embed, malformed_fields_are_400s_naming_them, .timeout = 120) {
    TestServer s;
    server_start(&s, EMBED_FLAGS);
    static const struct {
        const char *body, *param;
        int status;
    } cases[] = {
        {"{}", "input", 400},
        {"{\"input\": null}", "input", 400},
        {"{\"input\": 5}", "input", 400},
        {"{\"input\": []}", "input", 400},
        {"{\"input\": [1, \"a\"]}", "input", 400},
        {"{\"input\": [\"a\", 1]}", "input", 400},
        {"{\"input\": [[]]}", "input", 400},
        {"{\"input\": [[1], 2]}", "input", 400},
        {"{\"input\": [-1]}", "input", 400},
        {"{\"input\": [[1], [999999999]]}", "input", 400},
        {"{\"input\": [1.5]}", "input", 400},
        {"{\"input\": [{}]}", "input", 400},
        {"{\"input\": \"x\", \"encoding_format\": \"hex\"}", "encoding_format", 400},
        {"{\"input\": \"x\", \"encoding_format\": 1}", "encoding_format", 400},
        {"{\"input\": \"x\", \"dimensions\": 0}", "dimensions", 400},
        {"{\"input\": \"x\", \"dimensions\": 33}", "dimensions", 400},
        {"{\"input\": \"x\", \"dimensions\": \"4\"}", "dimensions", 400},
        {"{\"input\": \"x\", \"dimensions\": 4.5}", "dimensions", 400},
        {"{\"input\": \"x\", \"user\": 5}", "user", 400},
        {"{\"input\": \"x\", \"truncate_prompt_tokens\": 0}", "truncate_prompt_tokens", 400},
        {"{\"input\": \"x\", \"truncate_prompt_tokens\": -2}", "truncate_prompt_tokens", 400},
        {"{\"input\": \"x\", \"truncate_prompt_tokens\": \"5\"}", "truncate_prompt_tokens", 400},
        {"{\"input\": \"x\", \"model\": 3}", "model", 400},
        {"{\"input\": \"x\", \"model\": \"other\"}", "model", 404},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *r = embed(&s, cases[i].body, cases[i].status);
        json_t *err = json_object_get(r, "error");
        cr_expect_str_eq(json_string_value(json_object_get(err, "param")), cases[i].param, "%s", cases[i].body);
        cr_expect(json_string_length(json_object_get(err, "message")) > 0);
        json_decref(r);
    }
    /* an empty string still has its <|endoftext|>; accepted, as user and model */
    json_decref(embed(&s, "{\"input\": \"\", \"user\": \"u\", \"model\": \"" EMBED_MODEL "\"}", 200));
    HttpResult get = http(&s, "GET", "/v1/embeddings", NULL, NULL);
    cr_expect_eq(get.status, 405);
    http_free(&get);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

static void expect_refused(const TestServer *s, const char *path, const char *body, const char *words) {
    int status;
    json_t *r = http_json(s, path, body, &status);
    cr_expect_eq(status, 400, "%s -> %d", path, status);
    const char *msg = json_string_value(json_object_get(json_object_get(r, "error"), "message"));
    cr_expect(msg && strstr(msg, words), "%s: %s", path, msg ? msg : "(no message)");
    json_decref(r);
}

static const char *task_of(const TestServer *s, json_t **keep) {
    int status;
    *keep = http_json(s, "/v1/models", NULL, &status);
    return json_string_value(json_object_get(json_array_get(json_object_get(*keep, "data"), 0), "task"));
}

/* An embedding model refuses generation and a generation model refuses
 * embeddings; --runner overrides what the folder says. */
Test(server_embed, runner_kinds_and_refusals, .timeout = 180) {
    json_t *models;
    TestServer s;
    server_start(&s, EMBED_FLAGS);
    cr_expect_str_eq(task_of(&s, &models), "embed");
    json_decref(models);
    expect_refused(&s, "/v1/completions", "{\"prompt\": \"hi\"}", "embeddings only");
    expect_refused(&s, "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}",
                   "embeddings only");
    expect_refused(&s, "/v1/responses", "{\"input\": \"hi\"}", "embeddings only");
    char *log = server_log(&s);
    cr_expect(strstr(log, "embeddings: last pooling, L2-normalised (from modules.json)"), "%s", log);
    free(log);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);

    server_start(&s, ""); /* the tiny generation model */
    cr_expect_str_eq(task_of(&s, &models), "generate");
    json_decref(models);
    expect_refused(&s, "/v1/embeddings", "{\"input\": \"hi\"}", "--runner pooling");
    cr_expect_eq(server_stop(&s, SIGTERM), 0);

    /* --runner pooling on the plain folder: last token, normalised (vLLM's default) */
    server_start(&s, "--runner pooling --kv-cache-dtype float32 --dtype float32");
    json_t *c = golden_case("single");
    json_t *r = embed(&s, "{\"input\": [9707, 11, 1879, 151643]}", 200);
    double d = cosine(json_object_get(json_array_get(json_object_get(r, "data"), 0), "embedding"),
                      json_object_get(json_array_get(c, 0), "last"));
    cr_expect(d <= EMBED_TOL, "cosine distance %g", d);
    json_decref(r);
    json_decref(c);
    expect_refused(&s, "/v1/completions", "{\"prompt\": \"hi\"}", "embeddings only");
    cr_expect_eq(server_stop(&s, SIGTERM), 0);

    server_start(&s, "--model " EMBED_MODEL " --runner generate");
    int status;
    json_t *gen = http_json(&s, "/v1/completions", "{\"prompt\": \"hi\", \"max_tokens\": 2}", &status);
    cr_expect_eq(status, 200);
    json_decref(gen);
    expect_refused(&s, "/v1/embeddings", "{\"input\": \"hi\"}", "does not serve embeddings");
    cr_expect_eq(server_stop(&s, SIGTERM), 0);

    char *out, *err;
    int rc = run_nanovllm("serve --model " EMBED_MODEL " --runner sideways --port 0", &out, &err);
    cr_expect_neq(rc, 0, "an unknown --runner is refused");
    cr_expect(strstr(err, "--runner"), "%s", err);
    free(out);
    free(err);
}

/* The official SDK's client.embeddings.create: float, base64 (asked for,
 * and the SDK's own default, which it decodes), dimensions, token ids. */
Test(server_embed, openai_sdk, .timeout = 120) {
    if (access("tests/e2e/node_modules/openai/package.json", R_OK) != 0)
        cr_assert_fail("the e2e package openai is not installed: run scripts/setup.sh (npm ci --prefix tests/e2e)");
    TestServer s;
    server_start(&s, EMBED_FLAGS " --api-key sekrit --served-model-name tiny-embed");
    char cmd[768], path[300];
    snprintf(cmd, sizeof cmd, "node tests/e2e/embeddings.mjs %d tiny-embed sekrit " EMBED_GOLDEN " > %s/out.txt 2>&1",
             s.port, s.dir);
    int rc = system(cmd);
    snprintf(path, sizeof path, "%s/out.txt", s.dir);
    char *out = read_text(path);
    cr_expect_eq(rc, 0, "embeddings.mjs failed:\n%s", out);
    cr_expect(strstr(out, "\nok 6\n"), "expected \"ok 6\" last:\n%s", out);
    free(out);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}
