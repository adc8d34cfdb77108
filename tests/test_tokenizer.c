/*
 * test_tokenizer.c - properties of the Qwen3 tokenizer beyond the fixtures:
 * round trips, robustness on arbitrary bytes, streaming == full decode,
 * bad ids, lookups, concurrent use, and agreement between the two
 * implementations of the pre-tokenizer (hand-written and PCRE2), of BPE
 * merging (scan and heap), and of NFC (ours and utf8proc's on text of
 * Unicode 9.0 characters).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "helpers.h"
#include "text/tokenizer/tokenizer.h"
#include "text/tokenizer/tokenizer_internal.h"
#include "text/tokenizer/unicode9_assigned.h"
#include "text/tokenizer/unicode_nfc.h"
#include "text/tokenizer/unicode_props.h"
#include "text/tokenizer/utf8.h"

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

/* Characters that exercise every branch: ASCII classes, white space of all
 * kinds, contractions, combining marks, scripts, emoji, added tokens. */
static const char *const PALETTE[] = {
    "a", "Z", "7", " ", "  ", "\t", "\n", "\r\n", "\r", "'", "'s", "'LL", "'re", "'ſ", "!", "...",
    "(", "_", "\xC2\xA0", "\xE3\x80\x80", "\xC2\x85", "\xE2\x80\xA8", "\xEF\xBB\xBF", "é",
    "e\xCC\x81", "\xCC\x81", "a\xCC\xA8\xCC\x81", "ß", "你", "好", "世界", "日本語", "한국어",
    "\xE1\x84\x80\xE1\x85\xA1", "Привет", "مرحبا", "नमस्ते", "😀", "👨‍👩‍👧", "🇩🇪", "½", "٣",
    "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "<|endoftext|>",
    "<|im_start", "<|IM_END|>", "\xE0\xA7\xBE", "\xF0\x91\xA4\xB5", "\xF0\x91\xA4\xB0", "x"};

static size_t random_text(char *buf, size_t cap) {
    size_t n = 0;
    int parts = (int)rnd(40);
    for (int i = 0; i < parts; i++) {
        const char *p = PALETTE[rnd(sizeof PALETTE / sizeof PALETTE[0])];
        size_t k = strlen(p);
        if (n + k >= cap) break;
        memcpy(buf + n, p, k);
        n += k;
    }
    if (rnd(4) == 0 && n + 1 < cap) buf[n++] = '\0'; /* U+0000 is text too */
    return n;
}

static void encode_ok(const Tokenizer *t, const char *s, size_t n, int32_t **ids, size_t *k) {
    Error err = {0};
    cr_assert_eq(tokenizer_encode(t, s, n, ids, k, &err), 0, "%s", err.msg);
    for (size_t i = 0; i < *k; i++) cr_assert((*ids)[i] >= 0 && (*ids)[i] < tokenizer_size(t));
}

static char *decode_ok(const Tokenizer *t, const int32_t *ids, size_t k, bool skip, size_t *len) {
    char *text;
    Error err = {0};
    cr_assert_eq(tokenizer_decode(t, ids, k, skip, &text, len, &err), 0, "%s", err.msg);
    return text;
}

/* utf8proc's NFC of s[0..n) (a reference for text of Unicode 9.0 characters). */
static char *reference_nfc(const char *s, size_t n, size_t *len) {
    utf8proc_uint8_t *out;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &out,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    cr_assert(m >= 0);
    *len = (size_t)m;
    return (char *)out;
}

Test(tokenizer, decode_of_encode_is_nfc) {
    Tokenizer *t = tiny_tokenizer();
    rng_state = 1;
    char buf[2048];
    ByteBuf nb = {0};
    NfcScratch ns = {0};
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = random_text(buf, sizeof buf);
        int32_t *ids;
        size_t k, len, want_len;
        encode_ok(t, buf, n, &ids, &k);
        char *text = decode_ok(t, ids, k, false, &len);
        const char *want;
        cr_assert_eq(unicode_nfc(buf, n, &nb, &ns, &want, &want_len), 0);
        cr_assert(len == want_len && memcmp(text, want, len) == 0, "round trip of '%.*s'", (int)n,
                  buf);
        free(text);
        free(ids);
    }
    byte_buf_free(&nb);
    nfc_scratch_free(&ns);
    tokenizer_free(t);
}

Test(tokenizer, arbitrary_bytes_never_fail) {
    Tokenizer *t = tiny_tokenizer();
    rng_state = 2;
    unsigned char buf[600];
    ByteBuf nb = {0};
    NfcScratch ns = {0};
    for (int iter = 0; iter < 4000; iter++) {
        size_t n = rnd(sizeof buf);
        for (size_t i = 0; i < n; i++) /* bias toward UTF-8 lead and continuation bytes */
            buf[i] = (unsigned char)(rnd(3) ? rnd(256) : 0x80 + rnd(0x80));
        int32_t *ids;
        size_t k, len, want_len;
        encode_ok(t, (char *)buf, n, &ids, &k);
        char *text = decode_ok(t, ids, k, false, &len);
        cr_assert(utf8_is_valid(text, len));
        /* Invalid bytes read as U+FFFD first (maximal subparts), then NFC. */
        char *lossy = malloc(utf8_lossy_size((char *)buf, n) + 1);
        size_t lossy_len = utf8_lossy_copy((char *)buf, n, lossy);
        const char *want;
        cr_assert_eq(unicode_nfc(lossy, lossy_len, &nb, &ns, &want, &want_len), 0);
        cr_assert(len == want_len && memcmp(text, want, len) == 0, "iteration %d", iter);
        free(lossy);
        free(text);
        free(ids);
    }
    byte_buf_free(&nb);
    nfc_scratch_free(&ns);
    tokenizer_free(t);
}

Test(tokenizer, pathological_inputs) {
    Tokenizer *t = tiny_tokenizer();
    size_t n = 1 << 20;
    char *s = malloc(n);
    const char fills[] = {'a', ' ', '\n', '7', '!', '\xE4'};
    for (size_t f = 0; f < sizeof fills; f++) {
        memset(s, fills[f], n);
        int32_t *ids;
        size_t k;
        encode_ok(t, s, n, &ids, &k);
        cr_expect(k > 0);
        free(ids);
    }
    /* One huge CJK "word" goes through heap merging. */
    for (size_t i = 0; i + 3 <= n; i += 3) memcpy(s + i, "\xE4\xBD\xA0", 3);
    int32_t *ids;
    size_t k;
    encode_ok(t, s, n - n % 3, &ids, &k);
    cr_expect(k > 0 && k <= n / 3);
    free(ids);
    encode_ok(t, "", 0, &ids, &k);
    cr_expect_eq(k, 0);
    free(ids);
    free(s);
    tokenizer_free(t);
}

static void check_stream(const Tokenizer *t, const int32_t *ids, size_t n, bool skip) {
    size_t len;
    char *full = decode_ok(t, ids, n, skip, &len);
    Detokenizer d;
    detokenizer_init(&d, t, skip);
    ByteBuf joined = {0};
    const char *piece;
    size_t plen;
    Error err = {0};
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(detokenizer_push(&d, ids[i], &piece, &plen, &err), 0, "%s", err.msg);
        cr_assert(utf8_is_valid(piece, plen), "a piece splits a character");
        cr_assert_eq(byte_buf_append(&joined, piece, plen), 0);
    }
    cr_assert_eq(detokenizer_finish(&d, &piece, &plen, &err), 0);
    cr_assert_eq(byte_buf_append(&joined, piece, plen), 0);
    cr_assert(joined.len == len && (len == 0 || memcmp(joined.data, full, len) == 0),
              "stream != decode");
    byte_buf_free(&joined);
    detokenizer_free(&d);
    free(full);
}

Test(tokenizer, streaming_equals_decode) {
    Tokenizer *t = tiny_tokenizer();
    rng_state = 3;
    /* Ids of single-byte tokens split characters; 151643+ are added
     * tokens; 151669..151935 are padding rows. */
    int32_t byte_ids[256];
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        byte_ids[b] = t->bpe.byte_id[(unsigned char)c];
        cr_assert(byte_ids[b] >= 0);
    }
    int32_t ids[64];
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = rnd(64);
        for (size_t i = 0; i < n; i++) {
            switch (rnd(5)) {
            case 0: ids[i] = byte_ids[0x80 + rnd(0x80)]; break;
            case 1: ids[i] = byte_ids[rnd(256)]; break;
            case 2: ids[i] = 151643 + (int32_t)rnd(151936 - 151643); break;
            default: ids[i] = (int32_t)rnd(151643);
            }
        }
        check_stream(t, ids, n, iter & 1);
    }
    /* Real text split at every token. */
    char buf[2048];
    for (int iter = 0; iter < 500; iter++) {
        size_t n = random_text(buf, sizeof buf), k;
        int32_t *enc;
        encode_ok(t, buf, n, &enc, &k);
        check_stream(t, enc, k, iter & 1);
        free(enc);
    }
    tokenizer_free(t);
}

Test(tokenizer, bad_ids_are_errors) {
    Tokenizer *t = tiny_tokenizer();
    const int32_t bad[] = {-1, 151936, INT32_MAX, INT32_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t ids[] = {9707, bad[i]};
        char *text = (char *)"unchanged";
        size_t len;
        Error err = {0};
        cr_expect_eq(tokenizer_decode(t, ids, 2, false, &text, &len, &err), -1);
        cr_expect(strstr(err.msg, "outside the vocabulary [0, 151936)"), "%s", err.msg);
        cr_expect_null(text);
        const char *b;
        cr_expect_eq(tokenizer_token_bytes(t, bad[i], &b, &len, &err), -1);
        cr_expect_null(tokenizer_id_to_token(t, bad[i], &err));
        Detokenizer d;
        detokenizer_init(&d, t, false);
        cr_expect_eq(detokenizer_push(&d, bad[i], &b, &len, &err), -1);
        detokenizer_free(&d);
    }
    /* The model's padding rows decode to nothing. */
    int32_t pad[] = {151669, 151935, 9707};
    size_t len;
    char *text = decode_ok(t, pad, 3, false, &len);
    cr_expect_str_eq(text, "Hello");
    free(text);
    const char *b;
    Error err = {0};
    cr_expect_eq(tokenizer_token_bytes(t, 151700, &b, &len, &err), 0);
    cr_expect_eq(len, 0);
    tokenizer_free(t);
}

Test(tokenizer, lookups) {
    Tokenizer *t = tiny_tokenizer();
    cr_expect_eq(tokenizer_size(t), 151669);
    cr_expect_eq(tokenizer_model_vocab_size(t), 151936);
    cr_expect_eq(tokenizer_eos_id(t), 151645);
    cr_expect_eq(tokenizer_pad_id(t), 151643);
    cr_expect_eq(tokenizer_bos_id(t), -1);
    cr_expect_eq(tokenizer_token_to_id(t, "<|im_end|>", 10), 151645);
    cr_expect_eq(tokenizer_token_to_id(t, "<think>", 7), 151667);
    cr_expect_eq(tokenizer_token_to_id(t, "\xC4\xA0world", 7), 1879); /* "Ġworld" */
    cr_expect_eq(tokenizer_token_to_id(t, " world", 6), -1);
    cr_expect_eq(tokenizer_token_to_id(t, "\xff", 1), -1);
    Error err = {0};
    char *s = tokenizer_id_to_token(t, 1879, &err);
    cr_expect_str_eq(s, "\xC4\xA0world");
    free(s);
    s = tokenizer_id_to_token(t, 151644, &err);
    cr_expect_str_eq(s, "<|im_start|>");
    free(s);
    cr_expect_null(tokenizer_id_to_token(t, 151700, &err));
    cr_expect(tokenizer_is_special(t, 151644));
    cr_expect(!tokenizer_is_special(t, 151667)); /* <think> is added but not special */
    cr_expect(!tokenizer_is_special(t, 9707));
    const char *b;
    size_t len;
    cr_expect_eq(tokenizer_token_bytes(t, 1879, &b, &len, &err), 0);
    cr_expect(len == 6 && memcmp(b, " world", 6) == 0);
    cr_expect(tokenizer_chat_template(t) && strstr(tokenizer_chat_template(t), "<|im_start|>"));
    tokenizer_free(t);
}

typedef struct Job {
    const Tokenizer *t;
    json_t *rows;
    int mismatches;
} Job;

static void *encode_all(void *arg) {
    Job *j = arg;
    for (int round = 0; round < 3; round++) {
        size_t i;
        json_t *row;
        json_array_foreach(j->rows, i, row) {
            json_t *text = json_object_get(row, "text"), *want = json_object_get(row, "ids");
            int32_t *ids;
            size_t n;
            Error err;
            if (tokenizer_encode(j->t, json_string_value(text), json_string_length(text), &ids, &n,
                                 &err)) {
                j->mismatches++;
                continue;
            }
            bool same = n == json_array_size(want);
            for (size_t k = 0; same && k < n; k++)
                same = ids[k] == json_integer_value(json_array_get(want, k));
            j->mismatches += !same;
            free(ids);
        }
    }
    return NULL;
}

Test(tokenizer, concurrent_encode) {
    Tokenizer *t = tiny_tokenizer();
    json_t *rows = jsonl_load(TOKENIZER_FIXTURES "/encode.jsonl");
    enum { THREADS = 6 };
    pthread_t th[THREADS];
    Job jobs[THREADS];
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (Job){t, rows, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, encode_all, &jobs[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(jobs[i].mismatches, 0, "thread %d", i);
    }
    json_decref(rows);
    tokenizer_free(t);
}

Test(tokenizer, pcre2_splitter_agrees) {
    Tokenizer *native = tiny_tokenizer(), *pcre = tiny_tokenizer();
    Error err = {0};
    cr_assert_eq(tokenizer_use_pcre2(pcre, &err), 0, "%s", err.msg);
    cr_assert_eq(pcre->pretok.kind, PRETOK_PCRE2);
    cr_assert_eq(native->pretok.kind, PRETOK_NATIVE);
    rng_state = 4;
    char buf[2048];
    for (int iter = 0; iter < 4000; iter++) {
        size_t n;
        if (iter % 2) {
            n = random_text(buf, sizeof buf);
        } else { /* code points of Unicode 9.0, where both engines' tables agree */
            n = 0;
            for (int c = (int)rnd(30); c > 0; c--) {
                const uint32_t *r = UNICODE9_ASSIGNED[rnd(sizeof UNICODE9_ASSIGNED / 8)];
                uint32_t cp = r[0] + rnd(r[1] - r[0] + 1);
                if (rnd(3) == 0) cp = " \t\n'sA1.,"[rnd(9)];
                if (cp >= 0xD800 && cp <= 0xDFFF) continue;
                n += (size_t)utf8_encode(cp, buf + n);
            }
        }
        int32_t *a, *b;
        size_t na, nb;
        encode_ok(native, buf, n, &a, &na);
        encode_ok(pcre, buf, n, &b, &nb);
        cr_assert(na == nb && memcmp(a, b, na * sizeof *a) == 0, "splitters differ on '%.*s'",
                  (int)n, buf);
        free(a);
        free(b);
    }
    tokenizer_free(native);
    tokenizer_free(pcre);
}

Test(tokenizer, bpe_scan_and_heap_agree) {
    Tokenizer *t = tiny_tokenizer();
    BpeScratch s = {0};
    rng_state = 5;
    char buf[512];
    int32_t a[512], b[512];
    for (int iter = 0; iter < 5000; iter++) {
        size_t n = 0;
        while (n == 0) n = random_text(buf, 200);
        int na = bpe_encode_word_with(&t->bpe, (unsigned char *)buf, n, a, &s, 1);
        int nb = bpe_encode_word_with(&t->bpe, (unsigned char *)buf, n, b, &s, 2);
        cr_assert(na > 0 && na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0);
    }
    bpe_scratch_free(&s);
    tokenizer_free(t);
}

/* Code points that make NFC work: marks of several combining classes,
 * precomposed letters, Hangul jamo, composition starters that are not marks. */
static uint32_t nfc_stress_cp(void) {
    static const uint32_t cps[] = {'a', 'e', 'A', 'o', 0x300, 0x301, 0x308, 0x316, 0x323,
                                   0x327, 0x328, 0x345, 0x5B0, 0x5BC, 0x64B, 0x651, 0x9BE,
                                   0x9C7, 0xB47, 0xB3E, 0xB57, 0x1100, 0x1161, 0x11A8, 0xAC00,
                                   0xE9, 0xC5, 0x212B, 0x1E0A, 0x1FBC, 0xF900, 0x340, 0x344,
                                   0x0F73, 0x3099, 0x304B, 0x0915, 0x093C, 0x094D, ' '};
    return cps[rnd(sizeof cps / sizeof cps[0])];
}

Test(tokenizer, nfc_matches_utf8proc_on_unicode9_text) {
    unicode_props_init();
    rng_state = 6;
    ByteBuf nb = {0};
    NfcScratch ns = {0};
    char buf[256];
    for (int iter = 0; iter < 20000; iter++) {
        size_t n = 0;
        for (int c = (int)rnd(12); c > 0; c--) n += (size_t)utf8_encode(nfc_stress_cp(), buf + n);
        const char *got;
        size_t got_len, want_len;
        cr_assert_eq(unicode_nfc(buf, n, &nb, &ns, &got, &got_len), 0);
        char *want = reference_nfc(buf, n, &want_len);
        cr_assert(got_len == want_len && memcmp(got, want, got_len) == 0, "NFC of '%.*s'", (int)n,
                  buf);
        free(want);
    }
    byte_buf_free(&nb);
    nfc_scratch_free(&ns);
}

Test(tokenizer, nfc_keeps_later_characters_inert) {
    unicode_props_init();
    ByteBuf nb = {0};
    NfcScratch ns = {0};
    /* U+09FE (Unicode 10, class 230) must not be reordered before U+0361
     * (class 234); U+11935 U+11930 (Unicode 13) must not compose. */
    const char *cases[] = {"a\xCD\xA1\xE0\xA7\xBE", "\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0"};
    for (int i = 0; i < 2; i++) {
        const char *out;
        size_t len;
        cr_assert_eq(unicode_nfc(cases[i], strlen(cases[i]), &nb, &ns, &out, &len), 0);
        cr_expect(len == strlen(cases[i]) && memcmp(out, cases[i], len) == 0, "case %d", i);
    }
    /* ...while the same text with Unicode 9.0 marks is normalized. */
    const char *out;
    size_t len;
    cr_assert_eq(unicode_nfc("e\xCC\x81", 3, &nb, &ns, &out, &len), 0);
    cr_expect(len == 2 && memcmp(out, "\xC3\xA9", 2) == 0);
    byte_buf_free(&nb);
    nfc_scratch_free(&ns);
}

Test(tokenizer, utf8_maximal_subparts) {
    const struct {
        const char *in;
        size_t n;
        const char *out;
    } cases[] = {
        {"\xE4\xBD", 2, "\xEF\xBF\xBD"},
        {"\xED\xA0\x80", 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xC0\x80", 2, "\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xF0\x90\x80" "A", 4, "\xEF\xBF\xBD" "A"},
        {"\xF4\x90\x80\x80", 4, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"a\0b", 3, "a\0b"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[64];
        size_t want = strlen(cases[i].out) + (i == 5 ? 2 : 0);
        cr_expect_eq(utf8_lossy_size(cases[i].in, cases[i].n), want, "case %zu", i);
        cr_expect_eq(utf8_lossy_copy(cases[i].in, cases[i].n, out), want, "case %zu", i);
        cr_expect(memcmp(out, cases[i].out, want) == 0, "case %zu", i);
    }
}
