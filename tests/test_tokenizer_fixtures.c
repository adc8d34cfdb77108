/*
 * test_tokenizer_fixtures.c - the tokenizer and chat template against
 * Hugging Face's own output: every row of encode.jsonl, decode.jsonl and
 * chat.jsonl (tests/fixtures/tokenizer, see its README) must match exactly,
 * ids and text, byte for byte.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"
#include "helpers.h"

static bool ids_equal(const int32_t *ids, size_t n, json_t *want) {
    if (json_array_size(want) != n) return false;
    for (size_t i = 0; i < n; i++)
        if (json_integer_value(json_array_get(want, i)) != ids[i]) return false;
    return true;
}

static char *ids_text(const int32_t *ids, size_t n) {
    static char buf[4096];
    size_t o = 0;
    for (size_t i = 0; i < n && o + 16 < sizeof buf; i++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%d", i ? "," : "", ids[i]);
    return buf;
}

Test(tokenizer_fixtures, encode_every_row) {
    Tokenizer *t = tiny_tokenizer();
    json_t *rows = jsonl_load(TOKENIZER_FIXTURES "/encode.jsonl");
    cr_assert_eq(json_array_size(rows), 474);
    size_t i, matched = 0, nfc9 = 0;
    json_t *row;
    json_array_foreach(rows, i, row) {
        json_t *text = json_object_get(row, "text"), *want = json_object_get(row, "ids");
        const char *tag = json_string_value(json_object_get(row, "tag"));
        int32_t *ids;
        size_t n;
        Error err = {0};
        cr_assert_eq(tokenizer_encode(t, json_string_value(text), json_string_length(text), &ids,
                                      &n, &err), 0, "row %zu: %s", i, err.msg);
        bool same = ids_equal(ids, n, want);
        cr_expect(same, "row %zu (%s): got %s", i, tag, ids_text(ids, n));
        matched += same;
        if (strcmp(tag, "hf_nfc_unicode9") == 0) {
            nfc9++;
            /* transformers.js (Unicode 15 NFC) gives other ids; we follow Rust. */
            cr_expect(!ids_equal(ids, n, json_object_get(row, "tfjs_ids")), "row %zu", i);
        }
        free(ids);
    }
    cr_expect_eq(matched, 474);
    cr_expect_eq(nfc9, 5);
    json_decref(rows);
    tokenizer_free(t);
}

Test(tokenizer_fixtures, decode_every_row) {
    Tokenizer *t = tiny_tokenizer();
    json_t *rows = jsonl_load(TOKENIZER_FIXTURES "/decode.jsonl");
    cr_assert_eq(json_array_size(rows), 102);
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        int n;
        int32_t *ids = json_ids(json_object_get(row, "ids"), &n);
        bool skip = json_is_true(json_object_get(row, "skip_special_tokens"));
        json_t *want = json_object_get(row, "text");
        char *text;
        size_t len;
        Error err = {0};
        cr_assert_eq(tokenizer_decode(t, ids, (size_t)n, skip, &text, &len, &err), 0, "row %zu: %s",
                     i, err.msg);
        cr_expect(len == json_string_length(want) && memcmp(text, json_string_value(want), len) == 0,
                  "row %zu (%s): got '%s'", i, json_string_value(json_object_get(row, "tag")), text);
        cr_expect_eq(text[len], '\0');
        /* Streaming the same ids one at a time gives the same text. */
        Detokenizer d;
        detokenizer_init(&d, t, skip);
        char *joined = malloc(len + 16);
        size_t o = 0;
        const char *piece;
        size_t plen;
        for (int k = 0; k < n; k++) {
            cr_assert_eq(detokenizer_push(&d, ids[k], &piece, &plen, &err), 0, "%s", err.msg);
            cr_assert(o + plen <= len);
            memcpy(joined + o, piece, plen);
            o += plen;
        }
        cr_assert_eq(detokenizer_finish(&d, &piece, &plen, &err), 0);
        cr_assert(o + plen <= len);
        memcpy(joined + o, piece, plen);
        o += plen;
        cr_expect(o == len && memcmp(joined, text, len) == 0, "row %zu: streaming differs", i);
        detokenizer_free(&d);
        free(joined);
        free(text);
        free(ids);
    }
    json_decref(rows);
    tokenizer_free(t);
}

Test(tokenizer_fixtures, chat_every_row) {
    Tokenizer *t = tiny_tokenizer();
    Error err = {0};
    const char *warning;
    ChatTemplate *ct = chat_template_new(t, NULL, CHAT_CONTENT_AUTO, &warning, &err);
    cr_assert(ct, "%s", err.msg);
    cr_expect_null(warning);
    json_t *rows = jsonl_load(TOKENIZER_FIXTURES "/chat.jsonl");
    cr_assert_eq(json_array_size(rows), 41);
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        const char *tag = json_string_value(json_object_get(row, "tag"));
        json_t *want = json_object_get(row, "text");
        size_t len, n;
        char *prompt = chat_template_render(ct, row, 0, &len, &err);
        cr_assert(prompt, "row %zu (%s): %s", i, tag, err.msg);
        cr_expect(len == json_string_length(want) && memcmp(prompt, json_string_value(want), len) == 0,
                  "row %zu (%s):\n--- got\n%s\n--- want\n%s", i, tag, prompt,
                  json_string_value(want));
        int32_t *ids;
        cr_assert_eq(tokenizer_encode(t, prompt, len, &ids, &n, &err), 0, "%s", err.msg);
        cr_expect(ids_equal(ids, n, json_object_get(row, "ids")), "row %zu (%s): ids differ", i,
                  tag);
        free(ids);
        free(prompt);
    }
    json_decref(rows);
    chat_template_free(ct);
    tokenizer_free(t);
}
