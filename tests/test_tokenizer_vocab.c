/*
 * test_tokenizer_vocab.c - tokenizer_load_vocab (a GGUF file's tokenizer
 * tables) against tokenizer_load (tokenizer.json) for the real Qwen3
 * tokenizer.
 *
 * The tables are built here from the fixture's tokenizer.json and
 * tokenizer_config.json the way llama.cpp's convert_hf_to_gguf.py writes
 * them: one token per id up to the model's 151936 rows (vocabulary entries
 * NORMAL, added tokens CONTROL when special else USER_DEFINED, ids with no
 * token "[PAD<id>]" UNUSED), merges as "a b" strings, eos/pad ids from the
 * config. Every encode and decode of the Hugging Face fixtures must then
 * give the same ids and bytes on both paths. Each refusal has its own test
 * on a small hand-made vocabulary.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer/pretokenizer.h"
#include "text/tokenizer/tokenizer.h"
#include "helpers.h"

#define EMBED_MODEL "tests/fixtures/tiny-qwen3-embedding"

/* ---- the tables of a model folder, as convert_hf_to_gguf.py writes them ---- */

typedef struct GgufTables {
    TokenizerVocab v;
    TokenizerText *tokens, *merges;
    int32_t *types;
    char *strings; /* "[PAD<id>]" and joined merges, back to back */
    json_t *tokenizer_json, *config;
} GgufTables;

static int32_t token_id(json_t *tokenizer_json, const char *content) {
    json_t *id = json_object_get(json_object_get(json_object_get(tokenizer_json, "model"), "vocab"),
                                 content);
    if (id) return (int32_t)json_integer_value(id);
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(tokenizer_json, "added_tokens"), i, a)
        if (strcmp(json_string_value(json_object_get(a, "content")), content) == 0)
            return (int32_t)json_integer_value(json_object_get(a, "id"));
    return -1;
}

static int32_t config_token_id(GgufTables *g, const char *key) {
    json_t *v = json_object_get(g->config, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? token_id(g->tokenizer_json, json_string_value(v)) : -1;
}

/* convert_hf_to_gguf.py's does_token_look_special, for the <|...|> form. */
static bool looks_special(const char *s) {
    size_t n = strlen(s);
    return n >= 4 && strncmp(s, "<|", 2) == 0 && strcmp(s + n - 2, "|>") == 0;
}

/* look_special: mark added tokens that look like <|...|> CONTROL even when
 * not special, as the real converter does (Qwen's <|fim_prefix|> ...). */
static void gguf_tables(GgufTables *g, const char *dir, int rows, bool look_special) {
    memset(g, 0, sizeof *g);
    char path[512];
    json_error_t jerr;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    cr_assert_not_null(g->tokenizer_json = json_load_file(path, 0, &jerr), "%s: %s", path, jerr.text);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    cr_assert_not_null(g->config = json_load_file(path, 0, &jerr), "%s: %s", path, jerr.text);
    json_t *model = json_object_get(g->tokenizer_json, "model");
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    size_t num_merges = json_array_size(merges);
    g->tokens = calloc((size_t)rows, sizeof *g->tokens);
    g->types = calloc((size_t)rows, sizeof *g->types);
    g->merges = calloc(num_merges + 1, sizeof *g->merges);
    size_t strings_cap = (size_t)rows * 16 + 0;
    json_t *m;
    size_t i;
    json_array_foreach(merges, i, m) {
        strings_cap += json_is_string(m) ? 1
                                         : json_string_length(json_array_get(m, 0)) +
                                               json_string_length(json_array_get(m, 1)) + 2;
    }
    g->strings = malloc(strings_cap);
    cr_assert(g->tokens && g->types && g->merges && g->strings);
    size_t used = 0;

    const char *key;
    json_t *idv;
    json_object_foreach(vocab, key, idv) {
        json_int_t id = json_integer_value(idv);
        cr_assert(id >= 0 && id < rows);
        g->tokens[id] = (TokenizerText){key, strlen(key)};
        g->types[id] = TOKEN_KIND_NORMAL;
    }
    json_t *a;
    json_array_foreach(json_object_get(g->tokenizer_json, "added_tokens"), i, a) {
        json_int_t id = json_integer_value(json_object_get(a, "id"));
        json_t *content = json_object_get(a, "content");
        cr_assert(id >= 0 && id < rows);
        g->tokens[id] = (TokenizerText){json_string_value(content), json_string_length(content)};
        bool special = json_is_true(json_object_get(a, "special")) ||
                       (look_special && looks_special(json_string_value(content)));
        g->types[id] = special ? TOKEN_KIND_CONTROL : TOKEN_KIND_USER_DEFINED;
    }
    for (int id = 0; id < rows; id++) {
        if (g->types[id]) continue;
        char *s = g->strings + used;
        int n = snprintf(s, 16, "[PAD%d]", id);
        used += (size_t)n + 1;
        g->tokens[id] = (TokenizerText){s, (size_t)n};
        g->types[id] = TOKEN_KIND_UNUSED;
    }
    /* Merges: "a b" strings as they are, ["a", "b"] pairs joined. */
    json_array_foreach(merges, i, m) {
        if (json_is_string(m)) {
            g->merges[i] = (TokenizerText){json_string_value(m), json_string_length(m)};
            continue;
        }
        json_t *l = json_array_get(m, 0), *r = json_array_get(m, 1);
        char *s = g->strings + used;
        size_t ln = json_string_length(l), rn = json_string_length(r);
        memcpy(s, json_string_value(l), ln);
        s[ln] = ' ';
        memcpy(s + ln + 1, json_string_value(r), rn);
        used += ln + rn + 2;
        g->merges[i] = (TokenizerText){s, ln + 1 + rn};
    }
    cr_assert(used <= strings_cap);

    json_t *ct = json_object_get(g->config, "chat_template");
    g->v = (TokenizerVocab){
        .model = {"gpt2", 4},
        .pre = {"qwen2", 5},
        .tokens = g->tokens,
        .token_types = g->types,
        .num_tokens = rows,
        .merges = g->merges,
        .num_merges = (int)num_merges,
        .bos_id = config_token_id(g, "bos_token"),
        .eos_id = config_token_id(g, "eos_token"),
        .pad_id = config_token_id(g, "pad_token"),
        .add_bos = json_is_true(json_object_get(g->config, "add_bos_token")),
        .add_eos = json_is_true(json_object_get(g->config, "add_eos_token")),
        .chat_template = {json_string_value(ct), json_string_length(ct)},
    };
}

static void gguf_tables_free(GgufTables *g) {
    free(g->tokens);
    free(g->types);
    free(g->merges);
    free(g->strings);
    json_decref(g->tokenizer_json);
    json_decref(g->config);
}

static Tokenizer *load_vocab_ok(const TokenizerVocab *v, int rows) {
    Error err = {0};
    Tokenizer *t = tokenizer_load_vocab(v, rows, &err);
    cr_assert_not_null(t, "%s", err.msg);
    return t;
}

static Tokenizer *load_json_ok(const char *dir) {
    Error err = {0};
    Tokenizer *t = tokenizer_load(dir, QWEN3_VOCAB_ROWS, &err);
    cr_assert_not_null(t, "%s", err.msg);
    return t;
}

/* ---- comparing the two paths ---- */

static void encode_ok(const Tokenizer *t, const char *s, size_t n, int32_t **ids, size_t *len) {
    Error err = {0};
    cr_assert_eq(tokenizer_encode(t, s, n, ids, len, &err), 0, "%s", err.msg);
}

static void expect_same_decode(const Tokenizer *a, const Tokenizer *b, const int32_t *ids, size_t n,
                               bool skip, size_t row) {
    char *ta, *tb;
    size_t la, lb;
    Error err = {0};
    cr_assert_eq(tokenizer_decode(a, ids, n, skip, &ta, &la, &err), 0, "%s", err.msg);
    cr_assert_eq(tokenizer_decode(b, ids, n, skip, &tb, &lb, &err), 0, "%s", err.msg);
    cr_expect(la == lb && memcmp(ta, tb, la) == 0, "row %zu (skip %d): '%s' vs '%s'", row, skip,
              ta, tb);
    free(ta);
    free(tb);
}

/* Every text of encode.jsonl: the same ids, and the same text back. */
static size_t expect_same_encodes(const Tokenizer *json_tok, const Tokenizer *vocab_tok,
                                  bool compare_skip_decode) {
    json_t *rows = jsonl_load(TOKENIZER_FIXTURES "/encode.jsonl");
    cr_assert_gt(json_array_size(rows), 400);
    size_t i, same = 0;
    json_t *row;
    json_array_foreach(rows, i, row) {
        json_t *text = json_object_get(row, "text");
        int32_t *a, *b;
        size_t na, nb;
        encode_ok(json_tok, json_string_value(text), json_string_length(text), &a, &na);
        encode_ok(vocab_tok, json_string_value(text), json_string_length(text), &b, &nb);
        bool eq = na == nb && memcmp(a, b, na * sizeof *a) == 0;
        cr_expect(eq, "row %zu (%s): different ids", i,
                  json_string_value(json_object_get(row, "tag")));
        same += eq;
        expect_same_decode(json_tok, vocab_tok, a, na, false, i);
        if (compare_skip_decode) expect_same_decode(json_tok, vocab_tok, a, na, true, i);
        free(a);
        free(b);
    }
    size_t total = json_array_size(rows);
    json_decref(rows);
    cr_expect_eq(same, total);
    return same;
}

static void expect_same_id_to_token(const Tokenizer *a, const Tokenizer *b, int32_t id) {
    Error err = {0};
    char *sa = tokenizer_id_to_token(a, id, &err), *sb = tokenizer_id_to_token(b, id, &err);
    cr_assert(sa && sb, "id %d: %s", id, err.msg);
    cr_expect_str_eq(sa, sb, "id %d", id);
    free(sa);
    free(sb);
}

static const char *special_string(const Tokenizer *t, const char *key) {
    return json_string_value(json_object_get(tokenizer_special_token_strings(t), key));
}

Test(tokenizer_vocab, qwen3_tables_tokenize_as_tokenizer_json) {
    GgufTables g;
    gguf_tables(&g, TINY_MODEL, QWEN3_VOCAB_ROWS, false);
    Tokenizer *json_tok = load_json_ok(TINY_MODEL);
    Tokenizer *vocab_tok = load_vocab_ok(&g.v, QWEN3_VOCAB_ROWS);

    expect_same_encodes(json_tok, vocab_tok, true);

    /* decode.jsonl's ids, both ways. */
    json_t *rows = jsonl_load(TOKENIZER_FIXTURES "/decode.jsonl");
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        int n;
        int32_t *ids = json_ids(json_object_get(row, "ids"), &n);
        expect_same_decode(json_tok, vocab_tok, ids, (size_t)n, false, i);
        expect_same_decode(json_tok, vocab_tok, ids, (size_t)n, true, i);
        free(ids);
    }
    json_decref(rows);

    cr_expect_eq(tokenizer_size(vocab_tok), 151669);
    cr_expect_eq(tokenizer_size(vocab_tok), tokenizer_size(json_tok));
    cr_expect_eq(tokenizer_model_vocab_size(vocab_tok), tokenizer_model_vocab_size(json_tok));
    cr_expect_eq(tokenizer_eos_id(vocab_tok), 151645);
    cr_expect_eq(tokenizer_eos_id(vocab_tok), tokenizer_eos_id(json_tok));
    cr_expect_eq(tokenizer_pad_id(vocab_tok), tokenizer_pad_id(json_tok));
    cr_expect_eq(tokenizer_bos_id(vocab_tok), -1);
    cr_expect_eq(tokenizer_bos_id(json_tok), -1);
    cr_assert_not_null(tokenizer_chat_template(vocab_tok));
    cr_expect_str_eq(tokenizer_chat_template(vocab_tok), tokenizer_chat_template(json_tok));
    cr_expect_str_eq(special_string(vocab_tok, "eos_token"), special_string(json_tok, "eos_token"));
    cr_expect_str_eq(special_string(vocab_tok, "pad_token"), special_string(json_tok, "pad_token"));
    cr_expect_null(special_string(vocab_tok, "bos_token"));

    const char *lookups[] = {"Ġhello", "hello", "<|im_start|>", "<|im_end|>", "<think>",
                             "</tool_call>", "<|fim_prefix|>", "ĠĠĠĠ", "[PAD151700]", "nope-token"};
    for (size_t k = 0; k < sizeof lookups / sizeof lookups[0]; k++)
        cr_expect_eq(tokenizer_token_to_id(vocab_tok, lookups[k], strlen(lookups[k])),
                     tokenizer_token_to_id(json_tok, lookups[k], strlen(lookups[k])), "%s", lookups[k]);
    cr_expect_eq(tokenizer_token_to_id(vocab_tok, "[PAD151700]", 11), -1);
    const int32_t ids[] = {0, 220, 9707, 151643, 151644, 151657, 151667, 151668};
    for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++) {
        expect_same_id_to_token(json_tok, vocab_tok, ids[k]);
        cr_expect_eq(tokenizer_is_special(vocab_tok, ids[k]), tokenizer_is_special(json_tok, ids[k]),
                     "id %d", ids[k]);
    }
    cr_expect(tokenizer_is_special(vocab_tok, 151644));
    cr_expect(!tokenizer_is_special(vocab_tok, 151667));

    /* Padding ids decode to nothing, on both sides of the tokenizer's size. */
    const int32_t pads[] = {151669, 151700, 151935};
    for (size_t k = 0; k < sizeof pads / sizeof pads[0]; k++) {
        char *text;
        size_t len;
        Error err = {0};
        cr_assert_eq(tokenizer_decode(vocab_tok, &pads[k], 1, false, &text, &len, &err), 0, "%s",
                     err.msg);
        cr_expect_eq(len, 0);
        free(text);
    }
    int32_t bad = QWEN3_VOCAB_ROWS;
    char *text;
    size_t len;
    Error err = {0};
    cr_expect_eq(tokenizer_decode(vocab_tok, &bad, 1, false, &text, &len, &err), -1);

    /* Qwen3 adds nothing around a text. */
    int32_t *enc = malloc(sizeof *enc);
    size_t n = 1;
    enc[0] = 9707;
    cr_assert_eq(tokenizer_add_special_tokens(vocab_tok, &enc, &n, &err), 0);
    cr_expect_eq(n, 1);
    free(enc);

    tokenizer_free(vocab_tok);
    tokenizer_free(json_tok);
    gguf_tables_free(&g);
}

/* "qwen2" must mean exactly what Qwen3's tokenizer.json states. */
Test(tokenizer_vocab, qwen2_preset_is_the_fixture_pre_tokenizer) {
    json_error_t jerr;
    json_t *doc = json_load_file(TINY_MODEL "/tokenizer.json", 0, &jerr);
    cr_assert_not_null(doc, "%s", jerr.text);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(doc, "normalizer"), "type")),
                     "NFC");
    json_t *pre = json_object_get(doc, "pre_tokenizer");
    cr_expect_str_eq(json_string_value(json_object_get(pre, "type")), "Sequence");
    json_t *steps = json_object_get(pre, "pretokenizers");
    cr_assert_eq(json_array_size(steps), 2);
    json_t *split = json_array_get(steps, 0), *byte_level = json_array_get(steps, 1);
    cr_expect_str_eq(json_string_value(json_object_get(split, "type")), "Split");
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(split, "pattern"), "Regex")),
                     PRETOK_QWEN_PATTERN);
    cr_expect_str_eq(json_string_value(json_object_get(split, "behavior")), "Isolated");
    cr_expect(json_is_false(json_object_get(split, "invert")));
    cr_expect_str_eq(json_string_value(json_object_get(byte_level, "type")), "ByteLevel");
    cr_expect(json_is_false(json_object_get(byte_level, "add_prefix_space")));
    cr_expect(json_is_false(json_object_get(byte_level, "use_regex")));
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(doc, "decoder"), "type")),
                     "ByteLevel");
    json_decref(doc);
}

/* The real converter also marks <|fim_prefix|> and its kin CONTROL (they
 * look special though Qwen's file says special: false). Encoding is the
 * same; only skip_special_tokens then drops them, which a GGUF file
 * cannot tell apart. */
Test(tokenizer_vocab, converter_control_marking_encodes_the_same) {
    GgufTables g;
    gguf_tables(&g, TINY_MODEL, QWEN3_VOCAB_ROWS, true);
    Tokenizer *json_tok = load_json_ok(TINY_MODEL);
    Tokenizer *vocab_tok = load_vocab_ok(&g.v, QWEN3_VOCAB_ROWS);
    expect_same_encodes(json_tok, vocab_tok, false);
    cr_expect(tokenizer_is_special(vocab_tok, 151659));
    cr_expect(!tokenizer_is_special(json_tok, 151659));
    cr_expect(!tokenizer_is_special(vocab_tok, 151667)); /* <think> */
    tokenizer_free(vocab_tok);
    tokenizer_free(json_tok);
    gguf_tables_free(&g);
}

/* Qwen3-Embedding's post-processor appends <|endoftext|>; the converter
 * writes that as eos_token_id 151643 with add_eos_token true. */
Test(tokenizer_vocab, add_eos_appends_as_the_post_processor_does) {
    GgufTables g;
    gguf_tables(&g, EMBED_MODEL, QWEN3_VOCAB_ROWS, false);
    g.v.eos_id = 151643;
    g.v.add_eos = true;
    Tokenizer *json_tok = load_json_ok(EMBED_MODEL);
    Tokenizer *vocab_tok = load_vocab_ok(&g.v, QWEN3_VOCAB_ROWS);
    const char *texts[] = {"", "Hello, world!", "What is the capital of China?"};
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        int32_t *a, *b;
        size_t na, nb;
        Error err = {0};
        encode_ok(json_tok, texts[k], strlen(texts[k]), &a, &na);
        encode_ok(vocab_tok, texts[k], strlen(texts[k]), &b, &nb);
        cr_assert_eq(tokenizer_add_special_tokens(json_tok, &a, &na, &err), 0, "%s", err.msg);
        cr_assert_eq(tokenizer_add_special_tokens(vocab_tok, &b, &nb, &err), 0, "%s", err.msg);
        cr_assert_gt(na, 0);
        cr_expect_eq(a[na - 1], 151643);
        cr_expect(na == nb && memcmp(a, b, na * sizeof *a) == 0, "text %zu", k);
        free(a);
        free(b);
    }
    tokenizer_free(vocab_tok);
    tokenizer_free(json_tok);
    gguf_tables_free(&g);
}

/* ---- a small hand-made vocabulary, and each refusal ---- */

enum { MINI_TOKENS = 7 };
static const TokenizerText MINI_TEXTS[MINI_TOKENS] = {
    {"a", 1}, {"b", 1}, {"ab", 2}, {"Ġ", 2}, {"<|end|>", 7}, {"<x>", 3}, {"[PAD6]", 6}};
static const int32_t MINI_TYPES[MINI_TOKENS] = {
    TOKEN_KIND_NORMAL,  TOKEN_KIND_NORMAL,       TOKEN_KIND_NORMAL, TOKEN_KIND_NORMAL,
    TOKEN_KIND_CONTROL, TOKEN_KIND_USER_DEFINED, TOKEN_KIND_UNUSED};
static const TokenizerText MINI_MERGES[] = {{"a b", 3}};

/* Tables a test may change: its own copies of the texts and types. */
typedef struct Mini {
    TokenizerVocab v;
    TokenizerText tokens[MINI_TOKENS], merges[1];
    int32_t types[MINI_TOKENS];
} Mini;

static void mini(Mini *m) {
    memcpy(m->tokens, MINI_TEXTS, sizeof m->tokens);
    memcpy(m->types, MINI_TYPES, sizeof m->types);
    memcpy(m->merges, MINI_MERGES, sizeof m->merges);
    m->v = (TokenizerVocab){.model = {"gpt2", 4}, .pre = {"qwen2", 5}, .tokens = m->tokens,
                            .token_types = m->types, .num_tokens = MINI_TOKENS,
                            .merges = m->merges, .num_merges = 1, .bos_id = -1, .eos_id = 4,
                            .pad_id = -1, .chat_template = {NULL, 0}};
}

/* Loading fails, and the message names what. */
static void expect_refused(const TokenizerVocab *v, int rows, const char *needle) {
    Error err = {0};
    Tokenizer *t = tokenizer_load_vocab(v, rows, &err);
    cr_expect_null(t, "loaded; expected an error naming '%s'", needle);
    tokenizer_free(t);
    cr_expect_not_null(strstr(err.msg, needle), "error '%s' does not name '%s'", err.msg, needle);
}

Test(tokenizer_vocab, mini_vocabulary_loads) {
    Mini m;
    mini(&m);
    m.v.add_eos = true;
    Tokenizer *t = load_vocab_ok(&m.v, 0);
    cr_expect_eq(tokenizer_size(t), 6); /* the UNUSED last id is not counted */
    cr_expect_eq(tokenizer_model_vocab_size(t), 6);
    int32_t *ids;
    size_t n;
    encode_ok(t, "ab<|end|>a<x> ", 14, &ids, &n);
    const int32_t want[] = {2, 4, 0, 5, 3};
    cr_assert_eq(n, 5);
    cr_expect(memcmp(ids, want, sizeof want) == 0, "%d %d %d %d %d", ids[0], ids[1], ids[2],
              ids[3], ids[4]);
    Error err = {0};
    cr_assert_eq(tokenizer_add_special_tokens(t, &ids, &n, &err), 0);
    cr_expect_eq(n, 6);
    cr_expect_eq(ids[5], 4);
    char *text;
    size_t len;
    cr_assert_eq(tokenizer_decode(t, ids, n, true, &text, &len, &err), 0, "%s", err.msg);
    cr_expect_str_eq(text, "aba<x> ");
    free(text);
    free(ids);
    cr_expect_null(tokenizer_chat_template(t));
    tokenizer_free(t);

    m.v.add_eos = false;
    m.v.bos_id = 4;
    m.v.add_bos = true;
    m.v.token_types = NULL; /* all NORMAL: no added tokens, <|end|> is BPE's */
    t = load_vocab_ok(&m.v, 16);
    cr_expect_eq(tokenizer_size(t), 7);
    cr_expect_eq(tokenizer_model_vocab_size(t), 16);
    cr_expect(!tokenizer_is_special(t, 4));
    encode_ok(t, "ab", 2, &ids, &n);
    cr_assert_eq(tokenizer_add_special_tokens(t, &ids, &n, &err), 0);
    cr_assert_eq(n, 2);
    cr_expect_eq(ids[0], 4);
    cr_expect_eq(ids[1], 2);
    free(ids);
    tokenizer_free(t);
}

Test(tokenizer_vocab, refuses_other_models) {
    Mini m;
    mini(&m);
    m.v.model = (TokenizerText){"llama", 5};
    expect_refused(&m.v, 0, "tokenizer.ggml.model 'llama'");
    m.v.model = (TokenizerText){NULL, 0};
    expect_refused(&m.v, 0, "tokenizer.ggml.model is missing");
    m.v.model = (TokenizerText){"gpt2x", 4}; /* a length, not a C string */
    Tokenizer *t = load_vocab_ok(&m.v, 0);
    tokenizer_free(t);
}

Test(tokenizer_vocab, refuses_other_pre_tokenizers) {
    Mini m;
    mini(&m);
    m.v.pre = (TokenizerText){"llama-bpe", 9};
    expect_refused(&m.v, 0, "tokenizer.ggml.pre 'llama-bpe' is not supported (supported: qwen2)");
    m.v.pre = (TokenizerText){NULL, 0};
    expect_refused(&m.v, 0, "tokenizer.ggml.pre is missing");
}

Test(tokenizer_vocab, refuses_no_tokens) {
    Mini m;
    mini(&m);
    m.v.num_tokens = 0;
    expect_refused(&m.v, 0, "tokenizer.ggml.tokens is empty");
    m.v.num_tokens = -3;
    expect_refused(&m.v, 0, "tokenizer.ggml.tokens is empty");
    m.v.num_tokens = MINI_TOKENS;
    m.v.tokens = NULL;
    expect_refused(&m.v, 0, "tokenizer.ggml.tokens is missing");
    expect_refused(NULL, 0, "no tokenizer tables");
}

Test(tokenizer_vocab, refuses_bad_merges) {
    Mini m;
    mini(&m);
    const char *bad[] = {"ab", "a  b", " a", "a ", "a b b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        m.merges[0] = (TokenizerText){bad[i], strlen(bad[i])};
        expect_refused(&m.v, 0, "tokenizer.ggml.merges[0]");
        expect_refused(&m.v, 0, "separated by one space");
    }
    m.merges[0] = (TokenizerText){"a c", 3};
    expect_refused(&m.v, 0, "tokenizer.ggml.merges[0]: merge part 'c' is not in the vocabulary");
    m.merges[0] = (TokenizerText){"b a", 3};
    expect_refused(&m.v, 0, "the merged token is not in the vocabulary");
    m.merges[0] = (TokenizerText){"a \xff", 3};
    expect_refused(&m.v, 0, "tokenizer.ggml.merges[0] is not valid UTF-8");
    m.merges[0] = (TokenizerText){NULL, 0};
    expect_refused(&m.v, 0, "tokenizer.ggml.merges[0]");
    m.v.merges = NULL;
    expect_refused(&m.v, 0, "tokenizer.ggml.merges is missing");
    m.v.num_merges = -1;
    expect_refused(&m.v, 0, "tokenizer.ggml.merges is missing or has a negative count");
}

Test(tokenizer_vocab, refuses_duplicate_normal_tokens) {
    Mini m;
    mini(&m);
    m.tokens[2] = (TokenizerText){"a", 1};
    expect_refused(&m.v, 0, "tokenizer.ggml.tokens[0] and [2] are both 'a'");
    /* Outside the byte-level alphabet too (such tokens keep their UTF-8). */
    mini(&m);
    m.tokens[0] = m.tokens[1] = (TokenizerText){"\xe4\xbd\xa0", 3};
    expect_refused(&m.v, 0, "tokenizer.ggml.tokens[0] and [1] are both");
    /* An added token may share a vocabulary entry's text, as in tokenizer.json. */
    mini(&m);
    m.tokens[5] = (TokenizerText){"ab", 2};
    Tokenizer *t = load_vocab_ok(&m.v, 0);
    tokenizer_free(t);
}

Test(tokenizer_vocab, refuses_bad_token_types_and_texts) {
    Mini m;
    mini(&m);
    m.types[1] = 0;
    expect_refused(&m.v, 0, "tokenizer.ggml.token_type[1] is 0, not a token type");
    m.types[1] = 7;
    expect_refused(&m.v, 0, "tokenizer.ggml.token_type[1] is 7");
    m.types[1] = TOKEN_KIND_BYTE;
    expect_refused(&m.v, 0, "tokenizer.ggml.token_type[1] is BYTE");
    mini(&m);
    m.types[0] = m.types[1] = TOKEN_KIND_UNKNOWN;
    expect_refused(&m.v, 0, "ids 0 and 1 are both UNKNOWN");
    mini(&m);
    m.tokens[1] = (TokenizerText){"", 0};
    expect_refused(&m.v, 0, "tokenizer.ggml.tokens[1] (NORMAL) is empty");
    m.tokens[1] = (TokenizerText){NULL, 0};
    expect_refused(&m.v, 0, "tokenizer.ggml.tokens[1] (NORMAL) is empty");
    m.tokens[1] = (TokenizerText){"\xc3", 1};
    expect_refused(&m.v, 0, "tokenizer.ggml.tokens[1] is not valid UTF-8");
    mini(&m);
    m.tokens[4] = (TokenizerText){"<|\xed\xa0\x80|>", 7}; /* a surrogate */
    expect_refused(&m.v, 0, "tokenizer.ggml.tokens[4] is not valid UTF-8");
    /* UNUSED texts are never read. */
    mini(&m);
    m.tokens[6] = (TokenizerText){NULL, 5};
    Tokenizer *t = load_vocab_ok(&m.v, 0);
    tokenizer_free(t);
}

Test(tokenizer_vocab, refuses_bad_special_ids) {
    Mini m;
    mini(&m);
    m.v.eos_id = MINI_TOKENS;
    expect_refused(&m.v, 0, "tokenizer.ggml.eos_token_id 7 is outside the tokens [0, 7)");
    m.v.eos_id = -2;
    expect_refused(&m.v, 0, "tokenizer.ggml.eos_token_id -2");
    m.v.eos_id = 6;
    expect_refused(&m.v, 0, "tokenizer.ggml.eos_token_id 6 is an UNUSED");
    mini(&m);
    m.v.pad_id = 100;
    expect_refused(&m.v, 0, "tokenizer.ggml.padding_token_id 100");
    mini(&m);
    m.v.bos_id = INT32_MIN;
    expect_refused(&m.v, 0, "tokenizer.ggml.bos_token_id");
    mini(&m);
    m.v.add_bos = true;
    expect_refused(&m.v, 0, "tokenizer.ggml.add_bos_token is true but there is no");
    mini(&m);
    m.v.eos_id = -1;
    m.v.add_eos = true;
    expect_refused(&m.v, 0, "tokenizer.ggml.add_eos_token is true but there is no");
}

Test(tokenizer_vocab, refuses_more_tokens_than_model_rows) {
    Mini m;
    mini(&m);
    expect_refused(&m.v, MINI_TOKENS - 1, "tokenizer.ggml.tokens has 7 tokens but the model's "
                                          "vocabulary has only 6 rows");
    Tokenizer *t = load_vocab_ok(&m.v, MINI_TOKENS);
    cr_expect_eq(tokenizer_model_vocab_size(t), MINI_TOKENS);
    tokenizer_free(t);
}

Test(tokenizer_vocab, chat_template_is_copied_or_refused) {
    Mini m;
    mini(&m);
    char tmpl[] = "{{ messages }}xyz";
    m.v.chat_template = (TokenizerText){tmpl, 14}; /* without "xyz" */
    Tokenizer *t = load_vocab_ok(&m.v, 0);
    tmpl[0] = '!';
    cr_expect_str_eq(tokenizer_chat_template(t), "{{ messages }}");
    cr_expect_eq(tokenizer_eos_id(t), 4);
    cr_expect_str_eq(special_string(t, "eos_token"), "<|end|>");
    tokenizer_free(t);
    m.v.chat_template = (TokenizerText){"a\0b", 3};
    expect_refused(&m.v, 0, "tokenizer.chat_template is not valid UTF-8 text");
    m.v.chat_template = (TokenizerText){"a\xff", 2};
    expect_refused(&m.v, 0, "tokenizer.chat_template");
}
