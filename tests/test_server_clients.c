/*
 * test_server_clients.c - the clients people build on, run against the real
 * `nanovllm serve` on the tiny random-weight model, each parsing the server's
 * answers with its own code (versions pinned by tests/e2e/package-lock.json).
 *
 * chat_completions_clients runs tests/e2e/clients.mjs: the OpenAI Agents SDK
 * (an agent calling its tool, then finishing; streamed; maxTurns), LangChain.js
 * ChatOpenAI (bindTools with a required or named tool, withStructuredOutput
 * with a JSON schema, streaming) and the Vercel AI SDK's OpenAI-compatible
 * provider (generateText and streamText with a required tool, generateObject
 * and streamObject, streamText), all over /v1/chat/completions.
 *
 * responses_api_clients runs tests/e2e/responses.mjs: the official SDK's
 * responses.create (text, streamed events, a function tool, text.format
 * json_schema, two turns by previous_response_id and by items passed back)
 * and the Agents SDK over the Responses API, its default.
 *
 * A package missing from tests/e2e/node_modules fails the test, naming the
 * set-up step; nothing is skipped.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "server_helpers.h"

static const char *const PACKAGES[] = {
    "openai", "@openai/agents", "@langchain/openai", "@langchain/core", "ai", "@ai-sdk/openai-compatible",
    "zod",    "ajv",
};

static void require_packages(void) {
    for (size_t i = 0; i < sizeof PACKAGES / sizeof *PACKAGES; i++) {
        char path[256];
        snprintf(path, sizeof path, "tests/e2e/node_modules/%s/package.json", PACKAGES[i]);
        if (access(path, R_OK) != 0)
            cr_assert_fail("the e2e package %s is not installed: run scripts/setup.sh (npm ci --prefix tests/e2e)",
                           PACKAGES[i]);
    }
}

/* Runs tests/e2e/SCRIPT against a fresh server; expects exit 0 and "ok CHECKS" last. */
static void run_script(const char *script, int checks) {
    require_packages();
    TestServer s;
    server_start(&s, "--api-key sekrit --served-model-name tiny-qwen3 --block-size 16 --kv-cache-memory 512MiB");
    char cmd[768];
    snprintf(cmd, sizeof cmd, "node tests/e2e/%s %d tiny-qwen3 sekrit > %s/out.txt 2>&1", script, s.port, s.dir);
    int rc = system(cmd);
    char path[300], last[32];
    snprintf(path, sizeof path, "%s/out.txt", s.dir);
    snprintf(last, sizeof last, "\nok %d\n", checks);
    char *out = read_text(path);
    cr_expect_eq(rc, 0, "%s failed:\n%s", script, out);
    cr_expect(strstr(out, last), "%s: expected \"ok %d\" last:\n%s", script, checks, out);
    free(out);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

Test(server_clients, chat_completions_clients, .timeout = 600) { run_script("clients.mjs", 11); }

Test(server_clients, responses_api_clients, .timeout = 600) { run_script("responses.mjs", 11); }
