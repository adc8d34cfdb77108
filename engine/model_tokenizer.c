/*
 * model_tokenizer.c - the tokenizer of a model path (see model_tokenizer.h).
 *
 * It lives here, not in text/, because a GGUF file is read by model/
 * (gguf.h) and text/ depends on nothing above base/: this is the one place
 * both are in reach.
 */
#include "model_tokenizer.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/log.h"
#include "model/gguf.h"

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The folder holding a GGUF file, into out. */
static void folder_of(const char *path, char *out, size_t size) {
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", path);
    snprintf(out, size, "%s", dirname(copy));
}

static TokenizerText text_of(GgufString s) { return (TokenizerText){s.p, (size_t)s.len}; }

/* An optional string key: p NULL when absent. */
static int optional_string(const Gguf *g, const char *key, TokenizerText *out, Error *err) {
    *out = (TokenizerText){NULL, 0};
    GgufString s;
    if (!gguf_find_kv(g, key)) return 0;
    if (gguf_get_string(g, key, &s, err)) return -1;
    *out = text_of(s);
    return 0;
}

static int optional_id(const Gguf *g, const char *key, int32_t *out, Error *err) {
    *out = -1;
    int64_t v;
    if (!gguf_find_kv(g, key)) return 0;
    if (gguf_get_i64(g, key, &v, err)) return -1;
    if (v < 0 || v > INT32_MAX) return error_set(err, "metadata key '%s' = %lld is not a token id", key, (long long)v);
    *out = (int32_t)v;
    return 0;
}

static int optional_bool(const Gguf *g, const char *key, bool *out, Error *err) {
    *out = false;
    return gguf_find_kv(g, key) ? gguf_get_bool(g, key, out, err) : 0;
}

/* The tokenizer.ggml.* tables as a TokenizerVocab; the arrays it points to
 * are allocated into *texts (one block) and *types. */
static int read_vocab(const Gguf *g, TokenizerVocab *v, TokenizerText **texts, int32_t **types,
                      Error *err) {
    const GgufKv *tokens, *merges = NULL, *kinds = NULL;
    GgufString model;
    memset(v, 0, sizeof *v);
    if (gguf_get_string(g, "tokenizer.ggml.model", &model, err) ||
        gguf_get_array(g, "tokenizer.ggml.tokens", GGUF_STRING, &tokens, err))
        return -1;
    if (gguf_find_kv(g, "tokenizer.ggml.merges") &&
        gguf_get_array(g, "tokenizer.ggml.merges", GGUF_STRING, &merges, err))
        return -1;
    if (gguf_find_kv(g, "tokenizer.ggml.token_type") &&
        gguf_get_array(g, "tokenizer.ggml.token_type", GGUF_INT32, &kinds, err))
        return -1;
    if (tokens->arr_count > (1u << 24) || (merges && merges->arr_count > (1u << 24)))
        return error_set(err, "tokenizer.ggml.tokens/merges: more than 2^24 entries");
    if (kinds && kinds->arr_count != tokens->arr_count)
        return error_set(err, "tokenizer.ggml.token_type has %llu entries for %llu tokens",
                         (unsigned long long)kinds->arr_count, (unsigned long long)tokens->arr_count);
    size_t n_tokens = tokens->arr_count, n_merges = merges ? merges->arr_count : 0;
    *texts = malloc(sizeof **texts * (n_tokens + n_merges + 1));
    *types = kinds ? malloc(sizeof **types * (n_tokens + 1)) : NULL;
    if (!*texts || (kinds && !*types)) return error_set(err, "out of memory");
    for (size_t i = 0; i < n_tokens; i++) (*texts)[i] = text_of(tokens->arr_strings[i]);
    for (size_t i = 0; i < n_merges; i++) (*texts)[n_tokens + i] = text_of(merges->arr_strings[i]);
    for (size_t i = 0; kinds && i < n_tokens; i++) (*types)[i] = (int32_t)gguf_array_i64(kinds, i);
    v->model = text_of(model);
    v->tokens = *texts;
    v->num_tokens = (int)n_tokens;
    v->merges = *texts + n_tokens;
    v->num_merges = (int)n_merges;
    v->token_types = *types;
    return optional_string(g, "tokenizer.ggml.pre", &v->pre, err) ||
                   optional_id(g, "tokenizer.ggml.bos_token_id", &v->bos_id, err) ||
                   optional_id(g, "tokenizer.ggml.eos_token_id", &v->eos_id, err) ||
                   optional_id(g, "tokenizer.ggml.padding_token_id", &v->pad_id, err) ||
                   optional_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err) ||
                   optional_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err) ||
                   optional_string(g, "tokenizer.chat_template", &v->chat_template, err)
               ? -1
               : 0;
}

Tokenizer *model_tokenizer_from_gguf(const Gguf *g, int model_vocab_size, Error *err) {
    TokenizerVocab v;
    TokenizerText *texts = NULL;
    int32_t *types = NULL;
    Tokenizer *t = NULL;
    if (read_vocab(g, &v, &texts, &types, err) == 0) t = tokenizer_load_vocab(&v, model_vocab_size, err);
    free(texts);
    free(types);
    return t;
}

static Tokenizer *load_from_gguf(const char *path, int model_vocab_size, Error *err) {
    Gguf g;
    if (gguf_open(&g, path, err)) return NULL;
    Tokenizer *t = model_tokenizer_from_gguf(&g, model_vocab_size, err);
    gguf_close(&g);
    if (!t) error_prefix(err, "%s", path);
    return t;
}

Tokenizer *model_tokenizer_load(const char *model_path, int model_vocab_size, Error *err) {
    if (!gguf_is_file(model_path)) return tokenizer_load(model_path, model_vocab_size, err);
    char folder[4096], beside[4200];
    folder_of(model_path, folder, sizeof folder);
    snprintf(beside, sizeof beside, "%s/tokenizer.json", folder);
    if (!file_exists(beside)) return load_from_gguf(model_path, model_vocab_size, err);
    log_info("tokenizer: %s overrides the GGUF file's own", beside);
    return tokenizer_load(folder, model_vocab_size, err);
}

bool model_has_tokenizer(const char *model_path) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", model_path);
    return gguf_is_file(model_path) || file_exists(path);
}
