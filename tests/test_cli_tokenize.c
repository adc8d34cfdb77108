/*
 * test_cli_tokenize.c - `nanovllm tokenize` and `generate --prompt` as a
 * user runs them: JSON output checked against the Hugging Face fixtures,
 * the human-readable form, and clear errors for bad input.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static json_t *run_json(const char *args, const char *in, size_t in_len) {
    char *out, *err;
    int rc = run_nanovllm_stdin(args, in, in_len, &out, &err);
    cr_assert_eq(rc, 0, "`nanovllm %s` exited %d: %s", args, rc, err);
    json_error_t jerr;
    json_t *res = json_loads(out, JSON_ALLOW_NUL, &jerr);
    cr_assert(res, "stdout is not one JSON object: %s", out);
    free(out);
    free(err);
    return res;
}

/* A row of a fixture file, by its tag. */
static json_t *fixture_row(const char *file, const char *tag) {
    json_t *rows = jsonl_load(file), *found = NULL;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        if (!found && strcmp(json_string_value(json_object_get(row, "tag")), tag) == 0)
            found = json_incref(row);
    }
    json_decref(rows);
    cr_assert(found, "no row tagged %s in %s", tag, file);
    return found;
}

Test(cli_tokenize, text_json_matches_fixture) {
    json_t *row = fixture_row(TOKENIZER_FIXTURES "/encode.jsonl", "code");
    json_t *text = json_object_get(row, "text");
    json_t *res = run_json("tokenize --model " TINY_MODEL " --json --quiet",
                           json_string_value(text), json_string_length(text));
    cr_expect(json_equal(json_object_get(res, "ids"), json_object_get(row, "ids")));
    cr_expect(json_equal(json_object_get(res, "text"), text), "decoded text differs");
    json_decref(res);
    json_decref(row);
}

Test(cli_tokenize, text_with_nul_and_invalid_utf8) {
    /* U+0000 is text; a lone 0xFF byte reads as U+FFFD (Python's errors='replace'). */
    static const char in[] = "a\0b\xff";
    json_t *res = run_json("tokenize --model " TINY_MODEL " --json --quiet", in, sizeof in - 1);
    json_t *text = json_object_get(res, "text");
    cr_expect_eq(json_string_length(text), 6);
    cr_expect(memcmp(json_string_value(text), "a\0b\xEF\xBF\xBD", 6) == 0);
    json_decref(res);
}

Test(cli_tokenize, chat_json_matches_fixture) {
    json_t *row = fixture_row(TOKENIZER_FIXTURES "/chat.jsonl", "tool_call_round_trip");
    char *in = json_dumps(row, JSON_COMPACT);
    json_t *res = run_json("tokenize --model " TINY_MODEL " --chat --json --quiet", in, strlen(in));
    cr_expect(json_equal(json_object_get(res, "text"), json_object_get(row, "text")));
    cr_expect(json_equal(json_object_get(res, "ids"), json_object_get(row, "ids")));
    json_decref(res);
    json_decref(row);
    free(in);
}

Test(cli_tokenize, human_output) {
    char *out, *err;
    cr_assert_eq(run_nanovllm_stdin("tokenize --model " TINY_MODEL " --quiet", "Hello, world", 12,
                                    &out, &err), 0, "%s", err);
    cr_expect_str_eq(out, "9707\t\"Hello\"\n11\t\",\"\n1879\t\" world\"\n3 tokens\n");
    free(out);
    free(err);
}

Test(cli_tokenize, errors) {
    char *out, *err;
    cr_expect_eq(run_nanovllm("tokenize", &out, &err), 2);
    cr_expect(strstr(err, "--model is required") && strstr(err, "usage:"), "%s", err);
    free(out);
    free(err);
    cr_expect_eq(run_nanovllm("tokenize --model /nonexistent", &out, &err), 1);
    cr_expect(strstr(err, "/nonexistent/tokenizer.json"), "%s", err);
    free(out);
    free(err);
    static const char bad_chat[] = "{\"messages\": [{\"role\": \"robot\", \"content\": \"hi\"}]}";
    cr_expect_eq(run_nanovllm_stdin("tokenize --model " TINY_MODEL " --chat --quiet", bad_chat,
                                    sizeof bad_chat - 1, &out, &err), 1);
    cr_expect(strstr(err, "messages[0].role 'robot'"), "%s", err);
    free(out);
    free(err);
    cr_expect_eq(run_nanovllm_stdin("tokenize --model " TINY_MODEL " --chat --quiet", "{", 1, &out,
                                    &err), 1);
    cr_expect(strstr(err, "not a JSON chat request"), "%s", err);
    free(out);
    free(err);
}

Test(cli_tokenize, generate_with_prompt_text) {
    /* The same prompt as text and as ids gives the same completion. */
    json_t *by_text = run_json("generate --model " TINY_MODEL " --prompt 'Hello, world' "
                               "--max-tokens 6 --ignore-eos --json --quiet", NULL, 0);
    json_t *by_ids = run_json("generate --model " TINY_MODEL " --prompt-ids 9707,11,1879 "
                              "--max-tokens 6 --ignore-eos --json --quiet", NULL, 0);
    json_t *want_prompt = json_pack("[i,i,i]", 9707, 11, 1879);
    cr_expect(json_equal(json_object_get(by_text, "prompt_ids"), want_prompt));
    cr_expect(json_equal(json_object_get(by_text, "ids"), json_object_get(by_ids, "ids")));
    cr_expect(json_equal(json_object_get(by_text, "text"), json_object_get(by_ids, "text")));
    /* "text" is the decoded completion. */
    Tokenizer *t = tiny_tokenizer();
    int n;
    int32_t *ids = json_ids(json_object_get(by_text, "ids"), &n);
    char *text;
    size_t len;
    Error err = {0};
    cr_assert_eq(tokenizer_decode(t, ids, (size_t)n, true, &text, &len, &err), 0);
    cr_expect_str_eq(json_string_value(json_object_get(by_text, "text")), text);
    free(text);
    free(ids);
    tokenizer_free(t);
    json_decref(want_prompt);
    json_decref(by_text);
    json_decref(by_ids);
}

Test(cli_tokenize, generate_prompt_errors) {
    char *out, *err;
    cr_expect_eq(run_nanovllm("generate --model " TINY_MODEL " --prompt x --prompt-ids 1", &out,
                              &err), 2);
    cr_expect(strstr(err, "exactly one of --prompt, --prompt-ids and --chat"), "%s", err);
    free(out);
    free(err);
    cr_expect_eq(run_nanovllm("generate --model " TINY_MODEL " --prompt ''", &out, &err), 1);
    cr_expect(strstr(err, "encodes to no tokens"), "%s", err);
    free(out);
    free(err);
}
