/*
 * fuzz_structured.c - libFuzzer target for structured outputs (make fuzz):
 * constraint text compiled over a vocabulary, then token masks walked.
 *
 * Input: the first byte picks the kind (JSON schema, regex, GBNF, choice,
 * any JSON object), the rest up to a NUL byte is the constraint's text,
 * and the bytes after the NUL steer a walk: each picks the (byte mod
 * count)-th token the mask allows and accepts it. The vocabulary is fixed
 * and synthetic (every single byte, JSON and UTF-8 pieces, one special
 * token, one end id), so the target needs no model files.
 *
 * Checked, besides no crash, leak or undefined behaviour: a failed compile
 * says why; a compiled constraint's first mask allows something or it may
 * end there; the end id is allowed exactly where the matcher can end; an
 * allowed token is always accepted; a token the mask leaves out is refused
 * (probed once per step on a fresh matcher replaying the walk); the mask
 * never empties mid-walk (every byte is a token, so any continuation of the
 * grammar can be spelled). Hitting a limit (too large, too ambiguous) is an
 * error like any other and ends the input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "structured/constraint.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_INPUT_BYTES 4096
#define MAX_WALK_STEPS 128

/* Multi-byte tokens after the 256 single bytes: JSON punctuation runs,
 * literals, numbers, escapes, words, GBNF-ish text, whole and partial UTF-8
 * characters (é, 中, 😀 and their pieces), an invalid pair. */
static const char *const PIECES[] = {
    "{\"", "\"}", "\":", "\",", "\":\"", "\",\"", "\"},", "},{\"", "[{", "}]", "],", "[]", "{}", "\"\"",
    "\"]", "\"]}", "}}", "]]", ",\"", "a\"", "\"a", "{\"a\":", "true", "false", "null", "tr", "ue", "00",
    "01", "12", "123", "999", "2024", "-1", ".5", "e+", "E-", "1e", "1,", "\\n", "\\\"", "\\\\", "\\u00",
    "\\u", " \"", "  ", "\n ", "ab", "abc", "name", "id", "type", "hello", " world", "com", ".com", "--",
    "::=", " | ", "root", "\xc3\xa9", "\xe4\xb8\xad", "\xe4\xb8", "\xc3", "\xf0\x9f\x98\x80", "\xf0\x9f",
    "\x98\x80", "\xff\xfe", "-01-", "T12:", ":00Z",
};
#define NUM_PIECES ((int)(sizeof PIECES / sizeof PIECES[0]))
#define SPECIAL_ID (256 + NUM_PIECES) /* no bytes: never text */
#define END_ID (SPECIAL_ID + 1)
#define VOCAB_SIZE (END_ID + 1)

static TokenVocab *vocab;
static const char *token_text[VOCAB_SIZE];
static size_t token_len[VOCAB_SIZE];

static const ConstraintKind KINDS[] = {CONSTRAINT_JSON_SCHEMA, CONSTRAINT_REGEX, CONSTRAINT_GRAMMAR,
                                       CONSTRAINT_CHOICE, CONSTRAINT_JSON_OBJECT};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    static char single_bytes[256];
    for (int b = 0; b < 256; b++) {
        single_bytes[b] = (char)b;
        token_text[b] = &single_bytes[b];
        token_len[b] = 1;
    }
    for (int i = 0; i < NUM_PIECES; i++) {
        token_text[256 + i] = PIECES[i];
        token_len[256 + i] = strlen(PIECES[i]);
    }
    token_text[SPECIAL_ID] = token_text[END_ID] = "";
    Error err;
    if (!(vocab = token_vocab_from_strings(token_text, token_len, VOCAB_SIZE, &err))) {
        fprintf(stderr, "fuzz_structured: %s\n", err.msg);
        abort();
    }
    return 0;
}

static bool allowed(const uint32_t *mask, int32_t t) { return mask[t >> 5] >> (t & 31) & 1; }

/* A limit (too ambiguous, out of memory) rather than a wrong answer. */
static bool is_limit(const Error *err) {
    return err->kind == ERROR_INVALID || strstr(err->msg, "out of memory") != NULL;
}

/* Whether token would be accepted after history: 1 yes, 0 no, -1 a limit. */
static int accepted_after(const TokenGrammar *tg, const int32_t *history, int n, int32_t token) {
    Error err;
    TokenMatcher *m = token_matcher_new(tg, &err);
    if (!m) return -1;
    int result = 1;
    for (int i = 0; i < n && result == 1; i++)
        if (token_matcher_accept(m, history[i], false, &err) < 0) result = -1;
    if (result == 1 && token_matcher_accept(m, token, false, &err) < 0) result = is_limit(&err) ? -1 : 0;
    token_matcher_free(m);
    return result;
}

static void fail(const char *what, int step, int32_t token) {
    bool known = token >= 0 && token < VOCAB_SIZE;
    fprintf(stderr, "fuzz_structured: %s (step %d, token %d \"%.*s\")\n", what, step, token,
            known ? (int)token_len[token] : 0, known ? token_text[token] : "");
    abort();
}

static void walk(const Constraint *c, const uint8_t *steer, size_t steps) {
    const TokenGrammar *tg = constraint_grammar(c);
    uint32_t mask[(VOCAB_SIZE + 31) / 32];
    int32_t options[VOCAB_SIZE], left_out[VOCAB_SIZE], history[MAX_WALK_STEPS];
    const int32_t end = END_ID;
    Error err;
    TokenMatcher *m = token_matcher_new(tg, &err);
    if (!m) return;
    for (size_t step = 0; step <= steps && step < MAX_WALK_STEPS; step++) {
        if (token_matcher_fill_mask(m, mask, &end, 1, &err) < 0) {
            if (!err.msg[0]) fail("a mask failed without a message", (int)step, -1);
            break;
        }
        if (allowed(mask, end) != token_matcher_can_end(m))
            fail("the end id disagrees with can_end", (int)step, end);
        if (allowed(mask, SPECIAL_ID)) fail("a special token is allowed", (int)step, SPECIAL_ID);
        int num_options = 0, num_left_out = 0;
        for (int32_t t = 0; t < VOCAB_SIZE; t++) {
            if (allowed(mask, t)) options[num_options++] = t;
            else if (t < SPECIAL_ID) left_out[num_left_out++] = t;
        }
        if (num_options == 0)
            fail(step == 0 ? "the first mask is empty" : "the mask emptied mid-walk", (int)step, -1);
        if (step == steps) break; /* the steering bytes are spent: the last mask was checked */
        uint8_t byte = steer[step];
        /* Completeness: one token the mask leaves out must be refused. */
        if (num_left_out > 0) {
            int32_t probe = left_out[(byte * 131u + step) % (unsigned)num_left_out];
            if (accepted_after(tg, history, (int)step, probe) == 1)
                fail("a token the mask left out is accepted", (int)step, probe);
        }
        int32_t token = options[byte % num_options];
        if (token_matcher_accept(m, token, token == end, &err) < 0) {
            if (!is_limit(&err)) {
                fprintf(stderr, "fuzz_structured: %s\n", err.msg);
                fail("an allowed token was refused", (int)step, token);
            }
            break;
        }
        if (token == end) break;
        history[step] = token;
    }
    token_matcher_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > MAX_INPUT_BYTES) return 0;
    ConstraintKind kind = KINDS[data[0] % (sizeof KINDS / sizeof KINDS[0])];
    const char *text = (const char *)data + 1;
    const char *nul = memchr(text, '\0', size - 1);
    size_t text_len = nul ? (size_t)(nul - text) : size - 1;
    const uint8_t *steer = nul ? (const uint8_t *)nul + 1 : NULL;
    size_t steps = nul ? size - 1 - text_len - 1 : 0;
    Error err;
    err.msg[0] = '\0';
    Constraint *c = constraint_compile(kind, text, text_len, vocab, &err);
    if (!c) {
        if (!err.msg[0]) {
            fprintf(stderr, "fuzz_structured: a %s constraint failed to compile without a message\n",
                    constraint_kind_name(kind));
            abort();
        }
        return 0;
    }
    walk(c, steer, steps);
    constraint_unref(c);
    return 0;
}
