/*
 * test_tokenizer_load.c - tokenizer.json files written by the tests: a small
 * byte-level BPE model with each component swapped in turn, so that every
 * supported configuration (merges in both forms, escapes, the GPT-2 and
 * Llama 3 regexes, added-token flags) encodes as Hugging Face would, and
 * every unsupported one or malformed file fails with an error naming it.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "text/tokenizer/bpe.h"
#include "text/tokenizer/tokenizer.h"
#include "text/tokenizer/tokenizer_internal.h"
#include "text/tokenizer/utf8.h"

/* The 256 byte tokens (ids 0..255, GPT-2 alphabet), then merges:
 * h+e=he 256, l+l=ll 257, he+ll=hell 258, Ġ+w=Ġw 259, hell+o=hello 260, 1+2=12 261. */
static const char *const MERGES[][2] = {{"h", "e"},      {"l", "l"}, {"he", "ll"},
                                        {"\xC4\xA0", "w"}, {"hell", "o"}, {"1", "2"}};
#define N_MERGES 6
#define QWEN_REGEX                                                                                 \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static char *byte_token(unsigned b) {
    static char s[8];
    s[utf8_encode(bpe_byte_to_char((unsigned char)b), s)] = '\0';
    return s;
}

static json_t *base_doc(bool pair_merges) {
    json_t *vocab = json_object(), *merges = json_array();
    for (unsigned b = 0; b < 256; b++) json_object_set_new(vocab, byte_token(b), json_integer(b));
    for (int i = 0; i < N_MERGES; i++) {
        char merged[32];
        snprintf(merged, sizeof merged, "%s%s", MERGES[i][0], MERGES[i][1]);
        json_object_set_new(vocab, merged, json_integer(256 + i));
        if (pair_merges) {
            json_array_append_new(merges, json_pack("[s,s]", MERGES[i][0], MERGES[i][1]));
        } else {
            char line[32];
            snprintf(line, sizeof line, "%s %s", MERGES[i][0], MERGES[i][1]);
            json_array_append_new(merges, json_string(line));
        }
    }
    json_t *model = json_pack("{s:s, s:n, s:n, s:s, s:s, s:b, s:b, s:b, s:o, s:o}", "type", "BPE",
                              "dropout", "unk_token", "continuing_subword_prefix", "",
                              "end_of_word_suffix", "", "fuse_unk", 0, "byte_fallback", 0,
                              "ignore_merges", 0, "vocab", vocab, "merges", merges);
    json_t *added = json_pack("[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}]", "id", 300, "content",
                              "<|end|>", "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized",
                              0, "special", 1);
    json_t *pretok = json_pack(
        "{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}", "type", "Sequence",
        "pretokenizers", "type", "Split", "pattern", "Regex", QWEN_REGEX, "behavior", "Isolated",
        "invert", 0, "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0);
    return json_pack("{s:s, s:n, s:n, s:o, s:{s:s}, s:o, s:{s:s}, s:{s:s}, s:o}", "version", "1.0",
                     "truncation", "padding", "added_tokens", added, "normalizer", "type", "NFC",
                     "pre_tokenizer", pretok, "post_processor", "type", "ByteLevel", "decoder",
                     "type", "ByteLevel", "model", model);
}

/* Merges JSON text into doc: top-level keys replace doc's; "model" keys
 * replace the model's (null deletes). */
static void apply(json_t *doc, const char *overrides) {
    if (!overrides) return;
    json_error_t jerr;
    json_t *o = json_loads(overrides, 0, &jerr);
    cr_assert(o, "test override is not JSON: %s", jerr.text);
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        json_t *target = strcmp(key, "model") == 0 ? json_object_get(doc, "model") : NULL;
        if (target && json_is_object(v)) {
            const char *k2;
            json_t *v2;
            json_object_foreach(v, k2, v2) {
                if (json_is_null(v2)) json_object_del(target, k2);
                else json_object_set(target, k2, v2);
            }
        } else if (json_is_null(v) && strcmp(key, "truncation") && strcmp(key, "padding") &&
                   strcmp(key, "decoder")) {
            json_object_del(doc, key);
        } else {
            json_object_set(doc, key, v);
        }
    }
    json_decref(o);
}

/* A model folder with tokenizer.json (flags: JSON_* for json_dumps) and,
 * when config is not NULL, tokenizer_config.json. */
static char *synth_dir(const char *overrides, bool pair_merges, size_t flags, const char *config) {
    char *dir = make_temp_dir(), path[512];
    json_t *doc = base_doc(pair_merges);
    apply(doc, overrides);
    char *text = json_dumps(doc, flags | JSON_INDENT(2));
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    write_text(path, text);
    free(text);
    json_decref(doc);
    if (config) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        write_text(path, config);
    }
    return dir;
}

static Tokenizer *load_ok(const char *dir) {
    Error err = {0};
    Tokenizer *t = tokenizer_load(dir, 0, &err);
    cr_assert(t, "%s", err.msg);
    return t;
}

static void expect_ids(const Tokenizer *t, const char *text, const int32_t *want, size_t n) {
    int32_t *ids;
    size_t k;
    Error err = {0};
    cr_assert_eq(tokenizer_encode(t, text, strlen(text), &ids, &k, &err), 0, "%s", err.msg);
    char got[256] = "";
    for (size_t i = 0; i < k; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", ids[i]);
    cr_expect(k == n && memcmp(ids, want, n * sizeof *ids) == 0, "'%s' -> %s", text, got);
    free(ids);
}

static void expect_load_error(const char *overrides, const char *needle) {
    char *dir = synth_dir(overrides, false, 0, NULL);
    Error err = {0};
    Tokenizer *t = tokenizer_load(dir, 0, &err);
    cr_expect_null(t, "%s loaded", overrides);
    cr_expect(strstr(err.msg, needle), "%s: error '%s' lacks '%s'", overrides, err.msg, needle);
    cr_expect(strstr(err.msg, "tokenizer.json"), "the message names the file: %s", err.msg);
    tokenizer_free(t);
    rm_rf(dir);
    free(dir);
}

#define B(c) ((int32_t)(unsigned char)(c)) /* id of the token of printable byte c */
#define SPACE 32                           /* byte ' ' has id 32 too (ids are bytes) */

Test(tokenizer_load, synthetic_model_encodes_and_decodes) {
    char *dir = synth_dir(NULL, false, 0, NULL);
    Tokenizer *t = load_ok(dir);
    cr_expect_eq(tokenizer_size(t), 301);
    const int32_t want[] = {260, 259, B('o'), B('r'), B('l'), B('d'), 300, B('1'), B('2')};
    expect_ids(t, "hello world<|end|>12", want, 9);
    char *text;
    size_t len;
    Error err = {0};
    cr_assert_eq(tokenizer_decode(t, want, 9, false, &text, &len, &err), 0);
    cr_expect_str_eq(text, "hello world<|end|>12");
    free(text);
    cr_assert_eq(tokenizer_decode(t, want, 9, true, &text, &len, &err), 0);
    cr_expect_str_eq(text, "hello world12");
    free(text);
    cr_expect_eq(tokenizer_eos_id(t), -1); /* no tokenizer_config.json */
    cr_expect_null(tokenizer_chat_template(t));
    tokenizer_free(t);
    rm_rf(dir);
    free(dir);
}

Test(tokenizer_load, merge_forms_and_escapes_agree) {
    /* "a b" strings, ["a", "b"] pairs, and every non-ASCII character as \uXXXX. */
    const int32_t want[] = {258, B('p'), 259, 260, SPACE, 300};
    const bool pairs[] = {false, true, true};
    const size_t flags[] = {0, 0, JSON_ENSURE_ASCII};
    for (int i = 0; i < 3; i++) {
        char *dir = synth_dir(NULL, pairs[i], flags[i], NULL);
        Tokenizer *t = load_ok(dir);
        expect_ids(t, "hellp whello <|end|>", want, 6);
        tokenizer_free(t);
        rm_rf(dir);
        free(dir);
    }
}

Test(tokenizer_load, gpt2_and_llama3_regexes) {
    /* GPT-2: ByteLevel's own regex (on PCRE2): digits stay together. */
    char *dir = synth_dir("{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false,"
                          " \"use_regex\": true}}", false, 0, NULL);
    Tokenizer *t = load_ok(dir);
    const int32_t gpt2[] = {261, B('3'), B('a'), SPACE, 259};
    expect_ids(t, "123a  w", gpt2, 5);
    tokenizer_free(t);
    rm_rf(dir);
    free(dir);
    /* Llama 3: \p{N}{1,3} on the hand-written splitter. */
    dir = synth_dir("{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
                    "\"Split\", \"pattern\": {\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n"
                    "\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|"
                    "\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\":"
                    " false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": "
                    "false}]}}", false, 0, NULL);
    t = load_ok(dir);
    cr_expect(t->pretok.kind == PRETOK_NATIVE && t->pretok.max_digits == 3);
    const int32_t llama[] = {261, B('3'), 261, B('1'), B('2')};
    expect_ids(t, "1231212", llama, 5);
    tokenizer_free(t);
    rm_rf(dir);
    free(dir);
}

Test(tokenizer_load, qwen_digits_are_single) {
    char *dir = synth_dir(NULL, false, 0, NULL);
    Tokenizer *t = load_ok(dir);
    const int32_t want[] = {B('1'), B('2'), B('3')};
    expect_ids(t, "123", want, 3);
    tokenizer_free(t);
    rm_rf(dir);
    free(dir);
}

Test(tokenizer_load, added_token_flags) {
    char *dir = synth_dir(
        "{\"added_tokens\": ["
        "{\"id\": 300, \"content\": \"<L>\", \"lstrip\": true, \"special\": true},"
        "{\"id\": 301, \"content\": \"<R>\", \"rstrip\": true, \"special\": true},"
        "{\"id\": 302, \"content\": \"he\", \"single_word\": true, \"special\": false, "
        "\"normalized\": false},"
        "{\"id\": 303, \"content\": \"caf\\u00e9\", \"normalized\": true, \"special\": false},"
        "{\"id\": 304, \"content\": \"<P>\", \"special\": true}]}",
        false, 0, NULL);
    Tokenizer *t = load_ok(dir);
    const int32_t l[] = {B('a'), 300, SPACE, B('b')};
    expect_ids(t, "a  <L> b", l, 4); /* lstrip takes the spaces before <L> */
    const int32_t r[] = {B('a'), SPACE, 301, B('b')};
    expect_ids(t, "a <R>  b", r, 4); /* rstrip takes the spaces after <R> */
    const int32_t word[] = {302, SPACE, 260};
    expect_ids(t, "he hello", word, 3); /* single_word: "he" inside "hello" is not the token */
    const int32_t norm[] = {303, 304};
    expect_ids(t, "cafe\xCC\x81<P>", norm, 2); /* matched after NFC */
    cr_expect(tokenizer_is_special(t, 304));
    cr_expect(!tokenizer_is_special(t, 303));
    tokenizer_free(t);
    rm_rf(dir);
    free(dir);
}

Test(tokenizer_load, unsupported_components_are_named) {
    expect_load_error("{\"model\": {\"type\": \"WordPiece\"}}", "model type 'WordPiece'");
    expect_load_error("{\"model\": {\"byte_fallback\": true}}", "byte_fallback");
    expect_load_error("{\"model\": {\"dropout\": 0.1}}", "dropout");
    expect_load_error("{\"model\": {\"continuing_subword_prefix\": \"##\"}}",
                      "continuing_subword_prefix");
    expect_load_error("{\"normalizer\": {\"type\": \"Lowercase\"}}", "normalizer type 'Lowercase'");
    expect_load_error("{\"pre_tokenizer\": {\"type\": \"Whitespace\"}}",
                      "pre_tokenizer 'Whitespace' is not supported");
    expect_load_error("{\"pre_tokenizer\": null}", "pre_tokenizer is missing");
    expect_load_error("{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true}}",
                      "add_prefix_space=true");
    expect_load_error("{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
                      "\"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Removed\"}, "
                      "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}}",
                      "behavior 'Removed'");
    expect_load_error("{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
                      "\"Split\", \"pattern\": {\"String\": \" \"}, \"behavior\": \"Isolated\"}, "
                      "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}}",
                      "only a {\"Regex\"");
    expect_load_error("{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
                      "\"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}, "
                      "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}}",
                      "does not compile");
    expect_load_error("{\"decoder\": {\"type\": \"WordPiece\"}}", "decoder 'WordPiece'");
    expect_load_error("{\"decoder\": null}", "decoder 'none'");
    expect_load_error("{\"post_processor\": {\"type\": \"BertProcessing\"}}",
                      "post_processor 'BertProcessing'");
    /* TemplateProcessing is read (Qwen3-Embedding's), so a malformed one is named */
    expect_load_error("{\"post_processor\": {\"type\": \"TemplateProcessing\"}}",
                      "post_processor TemplateProcessing: 'single' must be a list");
    expect_load_error("{\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
                      "{\"id\": \"<x>\"}}, {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {}}}",
                      "special token '<x>' has no ids");
    expect_load_error("{\"post_processor\": {\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\"}, "
                      "{\"type\": \"RobertaProcessing\"}]}}",
                      "post_processor 'RobertaProcessing'");
    expect_load_error("{\"truncation\": {\"max_length\": 8}}", "'truncation' is set");
}

Test(tokenizer_load, malformed_files) {
    expect_load_error("{\"model\": {\"merges\": [\"h zzz\"]}}",
                      "merge part 'zzz' is not in the vocabulary");
    expect_load_error("{\"model\": {\"merges\": [\"e h\"]}}", "the merged token is not in the vocabulary");
    expect_load_error("{\"model\": {\"merges\": [\"h e x\"]}}", "not two tokens separated by one space");
    expect_load_error("{\"model\": {\"merges\": [[\"h\"]]}}", "model.merges");
    expect_load_error("{\"model\": {\"vocab\": {\"a\": 1, \"b\": 1}}}", "two vocabulary tokens have id 1");
    expect_load_error("{\"model\": {\"vocab\": {\"a\": -1}}}", "outside");
    expect_load_error("{\"model\": {\"vocab\": {\"a\": 1.5}}}", "token ids must be integers");
    expect_load_error("{\"model\": {\"vocab\": [1, 2]}}", "model.vocab");
    expect_load_error("{\"model\": {\"vocab\": null}}", "model.vocab");
    expect_load_error("{\"added_tokens\": [{\"id\": \"x\", \"content\": \"a\"}]}", "added_tokens[0]");
    expect_load_error("{\"added_tokens\": [{\"id\": 400, \"content\": \"\"}]}", "empty content");

    /* Raw texts jansson would never write. */
    const char *raw[][2] = {
        {"{", "not valid JSON"},
        {"", "non-empty"},
        {"[]", "not an object"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\\ud800\": 1}, \"merges\": []}}", "lone surrogate"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1}, \"merges\": []}} x", "not valid JSON"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1, \"a\": 2}, \"merges\": []}}", "twice"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1}, \"vocab\": {}, \"merges\": []}}", "duplicate"},
        {"{\"model\": {\"type\": \"BPE\", \"merges\": []}}", "model.vocab is missing"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1", "model.vocab"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\x01\": 1}, \"merges\": []}}", "control character"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\xff\": 1}, \"merges\": []}}", "invalid UTF-8"},
        {"{\"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {\"a\": 99999999999}}}", "outside"},
    };
    for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) {
        char *dir = make_temp_dir(), path[512];
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        write_text(path, raw[i][0]);
        Error err = {0};
        Tokenizer *t = tokenizer_load(dir, 0, &err);
        cr_expect_null(t, "raw %zu loaded", i);
        cr_expect(strstr(err.msg, raw[i][1]), "raw %zu: '%s' lacks '%s'", i, err.msg, raw[i][1]);
        tokenizer_free(t);
        rm_rf(dir);
        free(dir);
    }
    Error err = {0};
    cr_expect_null(tokenizer_load("/nonexistent", 0, &err));
    cr_expect(strstr(err.msg, "cannot open /nonexistent/tokenizer.json"), "%s", err.msg);
}

Test(tokenizer_load, tokenizer_config) {
    char *dir = synth_dir(NULL, false, 0, "{\"eos_token\": \"<|end|>\", \"pad_token\": "
                                          "{\"content\": \"<|end|>\"}, \"bos_token\": null, "
                                          "\"chat_template\": \"{{ messages }}\"}");
    Tokenizer *t = load_ok(dir);
    cr_expect_eq(tokenizer_eos_id(t), 300);
    cr_expect_eq(tokenizer_pad_id(t), 300);
    cr_expect_eq(tokenizer_bos_id(t), -1);
    cr_expect_str_eq(tokenizer_chat_template(t), "{{ messages }}");
    cr_expect_null(tokenizer_tool_use_template(t));
    /* The special tokens' texts the template sees: only those set. */
    char *strings = json_dumps(tokenizer_special_token_strings(t), JSON_COMPACT);
    cr_expect_str_eq(strings, "{\"eos_token\":\"<|end|>\",\"pad_token\":\"<|end|>\"}");
    free(strings);
    tokenizer_free(t);
    /* The model's size may exceed the tokenizer's, never the reverse. */
    Error err = {0};
    cr_expect_null(tokenizer_load(dir, 100, &err));
    cr_expect(strstr(err.msg, "only 100 rows"), "%s", err.msg);
    rm_rf(dir);
    free(dir);

    dir = synth_dir(NULL, false, 0, "{\"eos_token\": \"<nope>\"}");
    cr_expect_null(tokenizer_load(dir, 0, &err));
    cr_expect(strstr(err.msg, "eos_token '<nope>' is not a token") &&
                  strstr(err.msg, "tokenizer_config.json"), "%s", err.msg);
    rm_rf(dir);
    free(dir);

    /* A template list, and chat_template.jinja beside a config without one. */
    dir = synth_dir(NULL, false, 0, "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": "
                                    "\"T\"}, {\"name\": \"default\", \"template\": \"D\"}]}");
    t = load_ok(dir);
    cr_expect_str_eq(tokenizer_chat_template(t), "D");
    cr_expect_str_eq(tokenizer_tool_use_template(t), "T");
    tokenizer_free(t);
    rm_rf(dir);
    free(dir);
    dir = synth_dir(NULL, false, 0, "{\"chat_template\": [{\"name\": \"tool_use\"}]}");
    cr_expect_null(tokenizer_load(dir, 0, &err));
    cr_expect(strstr(err.msg, "chat_template[0] must be {\"name\""), "%s", err.msg);
    rm_rf(dir);
    free(dir);
    dir = synth_dir(NULL, false, 0, "{}");
    char path[512];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    write_text(path, "J");
    t = load_ok(dir);
    cr_expect_str_eq(tokenizer_chat_template(t), "J");
    tokenizer_free(t);
    rm_rf(dir);
    free(dir);
}
