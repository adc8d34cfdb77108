/*
 * test_server_tools.c - tool calls, reasoning content and the sampling
 * fields of the chat API through the real `nanovllm serve` on the tiny
 * random-weight model.
 *
 * tools_e2e runs tests/e2e/tools.mjs with the official OpenAI SDK, on the
 * tiny Qwen3 and on the tiny Qwen3.5 (hybrid) fixture (forced
 * calls valid against their schemas, a two-turn tool conversation,
 * answers forced by guided_regex split into reasoning, content and calls,
 * streams assembling to the non-streamed message, logit_bias, min_tokens,
 * truncate_prompt_tokens, continuous usage). The others need no node:
 * --scheduling-policy priority accepting "priority", --reasoning-parser
 * none leaving <think> in the content, the thinking under both of vLLM's
 * names (reasoning, reasoning_content) out and back in, and `generate
 * --chat --json`.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "server_helpers.h"

static void tools_e2e(const char *extra, const char *name) {
    if (access("tests/e2e/node_modules/openai/package.json", R_OK) != 0 ||
        access("tests/e2e/node_modules/ajv/package.json", R_OK) != 0)
        cr_assert_fail("the e2e packages are not installed: run scripts/setup.sh (npm ci --prefix tests/e2e)");
    TestServer s;
    char args[512];
    snprintf(args, sizeof args, "%s --api-key sekrit --served-model-name %s --block-size 16 --kv-cache-memory 512MiB",
             extra, name);
    server_start(&s, args);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "node tests/e2e/tools.mjs %d %s sekrit > %s/tools.txt 2>&1", s.port, name, s.dir);
    int rc = system(cmd);
    char path[300];
    snprintf(path, sizeof path, "%s/tools.txt", s.dir);
    char *out = read_text(path);
    cr_expect_eq(rc, 0, "the tool-call checks failed:\n%s", out);
    cr_expect(strstr(out, "\nok "), "%s", out);
    free(out);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

Test(server_tools, tools_e2e, .timeout = 600) { tools_e2e("", "tiny-qwen3"); }

/* The same checks on the tiny Qwen3.5 (hybrid) model: its recurrent state
 * under the server's batching, streaming and structured decoding. */
Test(server_tools, tools_e2e_qwen3_5, .timeout = 600) {
    tools_e2e("--model tests/fixtures/tiny-qwen3_5/dense", "tiny-qwen3_5");
}

static const char FORCED_THINK[] =
    "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 40, \"temperature\": 0, "
    "\"chat_template_kwargs\": {\"enable_thinking\": false}, "
    "\"guided_regex\": \"<think>\\\\nhmm\\\\n</think>\\\\n\\\\nyes\"}";

Test(server_tools, reasoning_parser_none_keeps_the_tags, .timeout = 120) {
    TestServer s;
    server_start(&s, "--reasoning-parser none");
    int status;
    json_t *r = http_json(&s, "/v1/chat/completions", FORCED_THINK, &status);
    cr_assert_eq(status, 200);
    json_t *m = json_object_get(json_array_get(json_object_get(r, "choices"), 0), "message");
    cr_expect_str_eq(json_string_value(json_object_get(m, "content")), "<think>\nhmm\n</think>\n\nyes");
    cr_expect_null(json_object_get(m, "reasoning_content"));
    cr_expect_null(json_object_get(m, "reasoning"));
    json_decref(r);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* vLLM renamed reasoning_content to reasoning; clients read either, so the
 * thinking goes out under both names, in messages and stream deltas. */
Test(server_tools, reasoning_under_both_names, .timeout = 120) {
    TestServer s;
    server_start(&s, "");
    int status;
    json_t *r = http_json(&s, "/v1/chat/completions", FORCED_THINK, &status);
    cr_assert_eq(status, 200);
    json_t *m = json_object_get(json_array_get(json_object_get(r, "choices"), 0), "message");
    cr_expect_str_eq(json_string_value(json_object_get(m, "reasoning_content")), "hmm");
    cr_expect_str_eq(json_string_value(json_object_get(m, "reasoning")), "hmm");
    cr_expect_str_eq(json_string_value(json_object_get(m, "content")), "yes");
    json_decref(r);

    /* without thinking: both null, as reasoning_content always was */
    static const char plain[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 4, "
                                "\"chat_template_kwargs\": {\"enable_thinking\": false}, \"guided_regex\": \"yes\"}";
    r = http_json(&s, "/v1/chat/completions", plain, &status);
    cr_assert_eq(status, 200);
    m = json_object_get(json_array_get(json_object_get(r, "choices"), 0), "message");
    cr_expect(json_is_null(json_object_get(m, "reasoning_content")));
    cr_expect(json_is_null(json_object_get(m, "reasoning")));
    json_decref(r);

    /* streamed: every delta that has one has the other, equal */
    json_t *req = json_loads(FORCED_THINK, 0, NULL);
    json_object_set_new(req, "stream", json_true());
    char *body = json_dumps(req, 0);
    json_decref(req);
    HttpResult h = http(&s, "POST", "/v1/chat/completions", body, NULL);
    cr_assert_eq(h.status, 200);
    int done;
    json_t *events = sse_events(h.body, &done);
    char both[64] = "";
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        json_t *d = json_object_get(json_array_get(json_object_get(e, "choices"), 0), "delta");
        json_t *a = json_object_get(d, "reasoning"), *b = json_object_get(d, "reasoning_content");
        cr_expect(json_equal(a, b) || (!a && !b), "chunk %zu: reasoning and reasoning_content differ", i);
        if (json_is_string(a)) strncat(both, json_string_value(a), sizeof both - strlen(both) - 1);
    }
    cr_expect_str_eq(both, "hmm");
    json_decref(events);
    http_free(&h);
    free(body);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* A previous turn's thinking comes back as reasoning or reasoning_content;
 * the template reads reasoning_content, which wins when both differ. */
Test(server_tools, reasoning_passed_back_under_either_name, .timeout = 120) {
    TestServer s;
    server_start(&s, "");
#define TURN(fields)                                                                                   \
    "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"a\", " \
    fields "}], \"add_generation_prompt\": false}"
    static const char *const bodies[] = {
        TURN("\"reasoning_content\": \"R1\""), TURN("\"reasoning\": \"R1\""),
        TURN("\"reasoning_content\": \"R1\", \"reasoning\": \"other\""),
        TURN("\"reasoning\": \"R1\", \"reasoning_content\": null")};
#undef TURN
    int status;
    json_t *want = http_json(&s, "/tokenize", bodies[0], &status);
    cr_assert_eq(status, 200);
    json_t *ids = json_pack("{s:O}", "tokens", json_object_get(want, "tokens"));
    char *detokenize = json_dumps(ids, 0);
    json_decref(ids);
    json_t *text = http_json(&s, "/detokenize", detokenize, &status);
    free(detokenize);
    cr_expect(strstr(json_string_value(json_object_get(text, "prompt")), "<think>\nR1\n</think>"),
              "the thinking is not in the prompt: %s", json_string_value(json_object_get(text, "prompt")));
    json_decref(text);
    for (size_t i = 1; i < sizeof bodies / sizeof bodies[0]; i++) {
        json_t *got = http_json(&s, "/tokenize", bodies[i], &status);
        cr_expect_eq(status, 200, "%s", bodies[i]);
        cr_expect(json_equal(json_object_get(got, "tokens"), json_object_get(want, "tokens")), "%s", bodies[i]);
        json_decref(got);
    }
    json_decref(want);
    /* anything but a string is a 400 */
    json_t *bad = http_json(&s, "/tokenize",
                            "{\"messages\": [{\"role\": \"assistant\", \"content\": \"a\", \"reasoning\": 5}]}", &status);
    cr_expect_eq(status, 400);
    json_decref(bad);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

Test(server_tools, priority_needs_the_priority_policy, .timeout = 120) {
    TestServer s;
    server_start(&s, "--scheduling-policy priority");
    static const char *const bodies[] = {
        "{\"prompt\": \"a\", \"max_tokens\": 4, \"priority\": -5}",
        "{\"prompt\": \"b\", \"max_tokens\": 4, \"priority\": 7}",
        "{\"prompt\": \"c\", \"max_tokens\": 4}",
    };
    for (size_t i = 0; i < 3; i++) {
        int status;
        json_t *r = http_json(&s, "/v1/completions", bodies[i], &status);
        cr_expect_eq(status, 200, "%s", bodies[i]);
        json_decref(r);
    }
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

Test(server_tools, generate_chat_json_parses_the_answer, .timeout = 120) {
    static const char chat[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                               "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"add\"}}]}";
    /* The tiny model's answer is random text: its "message" is there, with
     * whatever split it has, and "text" is the raw answer. */
    char *out, *err;
    int rc = run_nanovllm_stdin("generate --model " TINY_MODEL " --chat - --max-tokens 8 --json --quiet", chat,
                                sizeof chat - 1, &out, &err);
    cr_assert_eq(rc, 0, "%s", err);
    json_error_t jerr;
    json_t *o = json_loads(out, 0, &jerr);
    cr_assert_not_null(o, "%s: %s", jerr.text, out);
    json_t *m = json_object_get(o, "message");
    cr_assert(json_is_object(m), "%s", out);
    cr_expect(json_is_string(json_object_get(m, "content")));
    cr_expect(json_is_array(json_object_get(m, "tool_calls")));
    cr_expect(json_is_string(json_object_get(o, "text")));
    json_decref(o);
    free(out);
    free(err);
    rc = run_nanovllm_stdin("generate --model " TINY_MODEL " --chat - --prompt x --json --quiet", chat,
                            sizeof chat - 1, &out, &err);
    cr_expect_eq(rc, 2, "--chat with --prompt is a usage error");
    free(out);
    free(err);
}
