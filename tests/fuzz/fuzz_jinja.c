/*
 * fuzz_jinja.c - libFuzzer target for the Jinja interpreter (make fuzz).
 *
 * The input is a template, then optionally a NUL byte and a JSON object of
 * variables (without one, a small chat with tools). Compiling and rendering
 * must end, under small limits, with text or an error: no crash, no leak,
 * no read out of bounds, and a rendered text as long as it says.
 * Seed it with real templates: build-fuzz/fuzz_jinja CORPUS
 * tests/fixtures/chat-templates/ (copy them into CORPUS first: libFuzzer
 * writes new inputs into the first folder it is given).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja/jinja.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static json_t *default_vars;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    default_vars = json_loads(
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
        "\"content\": \"Hi \\u00e9\"}, {\"role\": \"assistant\", \"content\": \"<think>x</think>ok\", "
        "\"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"f\", "
        "\"arguments\": {\"a\": [1, 2.5, null, true]}}}]}, {\"role\": \"tool\", \"content\": \"42\"}, "
        "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"part\"}]}], \"tools\": "
        "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
        "\"object\"}}}], \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": "
        "\"</s>\"}", 0, NULL);
    if (!default_vars) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    const char *nul = memchr(text, '\0', size);
    size_t tlen = nul ? (size_t)(nul - text) : size;
    json_t *vars = nul ? json_loadb(nul + 1, size - tlen - 1, 0, NULL) : NULL;
    if (!json_is_object(vars)) {
        json_decref(vars);
        vars = json_incref(default_vars);
    }
    JinjaError err;
    JinjaTemplate *t = jinja_compile(text, tlen, &err);
    if (t) {
        JinjaLimits limits = {.max_iterations = 20000, .max_depth = 64, .max_output = 1 << 20,
                              .max_memory = 32 << 20};
        size_t len;
        char *out = jinja_render(t, vars, 1722002400.0, &limits, &len, &err);
        if (out && (len > limits.max_output || out[len] != '\0')) abort();
        free(out);
        jinja_free(t);
    }
    json_decref(vars);
    return 0;
}
