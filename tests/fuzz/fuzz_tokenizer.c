/*
 * fuzz_tokenizer.c - libFuzzer target for the tokenizer (make fuzz).
 *
 * The first input byte picks what the rest is:
 *   0-3  text: encode it; the ids must be in range, decode(encode(s)) must
 *        be the NFC of s read with U+FFFD for invalid UTF-8 (the same rule
 *        Hugging Face applies to a str), and the Detokenizer must stream
 *        exactly that text one id at a time;
 *   4    token ids (3 bytes each, some past the model's vocabulary): decode
 *        and the Detokenizer must agree, on success and on error alike;
 *   5    a chat request (JSON): rendering must not crash, and a rendered
 *        prompt must encode.
 * Any broken invariant aborts, which libFuzzer reports with the input.
 * The model folder is tests/fixtures/tiny-qwen3, or $NANOVLLM_FUZZ_MODEL.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"
#include "text/tokenizer/unicode_nfc.h"
#include "text/tokenizer/utf8.h"

static Tokenizer *tok;
static ChatTemplate *chat;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *dir = getenv("NANOVLLM_FUZZ_MODEL");
    Error err = {0};
    tok = tokenizer_load(dir ? dir : "tests/fixtures/tiny-qwen3", 151936, &err);
    if (!tok) {
        fprintf(stderr, "fuzz_tokenizer: %s (run from the repository root)\n", err.msg);
        exit(1);
    }
    chat = chat_template_new(tok, NULL, CHAT_CONTENT_AUTO, NULL, &err);
    if (!chat) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err.msg);
        exit(1);
    }
    return 0;
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_tokenizer: %s:%d: %s\n", __FILE__, __LINE__, #cond);            \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Streams ids through a Detokenizer; returns 0 and the joined text, or -1
 * at the first bad id. */
static int stream(const int32_t *ids, size_t n, bool skip, ByteBuf *out) {
    Detokenizer d;
    detokenizer_init(&d, tok, skip);
    const char *piece;
    size_t len;
    Error err;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = detokenizer_push(&d, ids[i], &piece, &len, &err);
        if (rc == 0) {
            CHECK(utf8_is_valid(piece, len));
            CHECK(byte_buf_append(out, piece, len) == 0);
        }
    }
    if (rc == 0) {
        CHECK(detokenizer_finish(&d, &piece, &len, &err) == 0);
        CHECK(byte_buf_append(out, piece, len) == 0);
    }
    detokenizer_free(&d);
    return rc;
}

static void check_text(const char *s, size_t n) {
    int32_t *ids;
    size_t k;
    Error err;
    CHECK(tokenizer_encode(tok, s, n, &ids, &k, &err) == 0);
    for (size_t i = 0; i < k; i++) CHECK(ids[i] >= 0 && ids[i] < tokenizer_size(tok));
    char *text;
    size_t len;
    CHECK(tokenizer_decode(tok, ids, k, false, &text, &len, &err) == 0);
    char *lossy = malloc(utf8_lossy_size(s, n) + 1);
    CHECK(lossy);
    size_t lossy_len = utf8_lossy_copy(s, n, lossy);
    ByteBuf nb = {0};
    NfcScratch ns = {0};
    const char *want;
    size_t want_len;
    CHECK(unicode_nfc(lossy, lossy_len, &nb, &ns, &want, &want_len) == 0);
    CHECK(len == want_len && memcmp(text, want, len) == 0);
    ByteBuf streamed = {0};
    CHECK(stream(ids, k, false, &streamed) == 0);
    CHECK(streamed.len == len && (len == 0 || memcmp(streamed.data, text, len) == 0));
    byte_buf_free(&streamed);
    byte_buf_free(&nb);
    nfc_scratch_free(&ns);
    free(lossy);
    free(text);
    free(ids);
}

static void check_ids(const uint8_t *p, size_t n) {
    size_t k = n / 3;
    int32_t *ids = malloc((k ? k : 1) * sizeof *ids);
    CHECK(ids);
    for (size_t i = 0; i < k; i++) /* 0 .. 2^24-1: mostly valid, some past 151936 */
        ids[i] = (int32_t)(((uint32_t)p[3 * i] << 16 | (uint32_t)p[3 * i + 1] << 8 | p[3 * i + 2]) %
                           152000u) - (p[3 * i] == 0xFF ? 200000 : 0);
    for (int skip = 0; skip < 2; skip++) {
        char *text;
        size_t len;
        Error err;
        int rc = tokenizer_decode(tok, ids, k, skip, &text, &len, &err);
        ByteBuf streamed = {0};
        int src = stream(ids, k, skip, &streamed);
        CHECK(rc == src);
        if (rc == 0) {
            CHECK(utf8_is_valid(text, len) && text[len] == '\0');
            CHECK(streamed.len == len && (len == 0 || memcmp(streamed.data, text, len) == 0));
            free(text);
        }
        byte_buf_free(&streamed);
    }
    free(ids);
}

static void check_chat(const uint8_t *p, size_t n) {
    json_t *req = json_loadb((const char *)p, n, JSON_DECODE_ANY, NULL);
    if (!req) return;
    size_t len;
    Error err;
    char *prompt = chat_template_render(chat, req, 0, &len, &err);
    if (prompt) {
        int32_t *ids;
        size_t k;
        CHECK(tokenizer_encode(tok, prompt, len, &ids, &k, &err) == 0);
        free(ids);
        free(prompt);
    }
    json_decref(req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const uint8_t *rest = data + 1;
    size_t n = size - 1;
    switch (data[0] % 6) {
    case 4: check_ids(rest, n); break;
    case 5: check_chat(rest, n); break;
    default: check_text((const char *)rest, n);
    }
    return 0;
}
