/*
 * tokenizer_vocab.c - a Tokenizer from tables rather than tokenizer.json:
 * what a GGUF file's tokenizer.ggml.* keys hold (tokenizer_load_vocab in
 * tokenizer.h).
 *
 * Such a file names its pre-tokenizer ("qwen2") instead of stating it, and
 * lists every id with a kind instead of a vocabulary plus added tokens. This
 * file owns the translation back: each supported pre-tokenizer name stands
 * for the normalizer and Split regex its tokenizer.json states (the
 * ByteLevel steps and decoder are what byte-level BPE always has), NORMAL
 * tokens and the merges go into the same BPE model tokenizer.json's tables
 * go into, CONTROL and USER_DEFINED tokens become added tokens, and the
 * special ids, post-processor ids and chat template fill the fields
 * tokenizer_config.json fills. Everything after that (matching, BPE,
 * decoding) is the tokenizer.json path's own code, so the two give the same
 * ids and text.
 */
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"
#include "utf8.h"

#define MAX_VOCAB_IDS (1 << 24) /* bpe.c's bound on ids */

/* What a tokenizer.ggml.pre name stands for: the normalizer and the
 * Split(regex, Isolated) step before ByteLevel(use_regex=false). */
typedef struct PreTokenizerPreset {
    const char *name;
    bool nfc;
    const char *split_regex;
} PreTokenizerPreset;

/* qwen2: Qwen2/2.5/3's tokenizer.json (NFC, then Qwen's regex; the tests
 * check it against the fixture's). */
static const PreTokenizerPreset PRESETS[] = {
    {"qwen2", true, PRETOK_QWEN_PATTERN},
};
#define NUM_PRESETS (sizeof PRESETS / sizeof PRESETS[0])

static bool text_is(TokenizerText t, const char *want) {
    return t.p && t.len == strlen(want) && memcmp(t.p, want, t.len) == 0;
}

/* A text for messages: at most 60 bytes (%.*s). */
static int shown_len(TokenizerText t) { return t.p ? (int)(t.len < 60 ? t.len : 60) : 0; }
static const char *shown(TokenizerText t) { return t.p ? t.p : ""; }

static const char *kind_name(int32_t kind) {
    switch (kind) {
    case TOKEN_KIND_NORMAL: return "NORMAL";
    case TOKEN_KIND_UNKNOWN: return "UNKNOWN";
    case TOKEN_KIND_CONTROL: return "CONTROL";
    case TOKEN_KIND_USER_DEFINED: return "USER_DEFINED";
    case TOKEN_KIND_UNUSED: return "UNUSED";
    case TOKEN_KIND_BYTE: return "BYTE";
    default: return "?";
    }
}

static int32_t kind_of(const TokenizerVocab *v, int32_t id) {
    return v->token_types ? v->token_types[id] : TOKEN_KIND_NORMAL;
}

static int check_header(const TokenizerVocab *v, int model_vocab_size, const PreTokenizerPreset **preset,
                        Error *err) {
    if (!v->model.p) return error_set(err, "tokenizer.ggml.model is missing");
    if (!text_is(v->model, "gpt2"))
        return error_set(err, "tokenizer.ggml.model '%.*s' is not supported (only \"gpt2\", "
                              "byte-level BPE, is)", shown_len(v->model), shown(v->model));
    *preset = NULL;
    for (size_t i = 0; i < NUM_PRESETS && !*preset; i++)
        if (text_is(v->pre, PRESETS[i].name)) *preset = &PRESETS[i];
    if (!*preset) {
        char names[256] = "";
        for (size_t i = 0; i < NUM_PRESETS; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     PRESETS[i].name);
        if (!v->pre.p)
            return error_set(err, "tokenizer.ggml.pre is missing (supported: %s)", names);
        return error_set(err, "tokenizer.ggml.pre '%.*s' is not supported (supported: %s)",
                         shown_len(v->pre), shown(v->pre), names);
    }
    if (v->num_tokens < 1)
        return error_set(err, "tokenizer.ggml.tokens is empty (%d tokens)", v->num_tokens);
    if (!v->tokens) return error_set(err, "tokenizer.ggml.tokens is missing");
    if (v->num_tokens > MAX_VOCAB_IDS)
        return error_set(err, "tokenizer.ggml.tokens has %d tokens, over the limit of %d",
                         v->num_tokens, MAX_VOCAB_IDS);
    if (model_vocab_size > 0 && v->num_tokens > model_vocab_size)
        return error_set(err, "tokenizer.ggml.tokens has %d tokens but the model's vocabulary has "
                              "only %d rows", v->num_tokens, model_vocab_size);
    if (v->num_merges < 0 || (v->num_merges > 0 && !v->merges))
        return error_set(err, "tokenizer.ggml.merges is missing or has a negative count (%d)",
                         v->num_merges);
    for (int32_t id = 0; id < v->num_tokens; id++) {
        int32_t kind = kind_of(v, id);
        if (kind < TOKEN_KIND_NORMAL || kind > TOKEN_KIND_BYTE)
            return error_set(err, "tokenizer.ggml.token_type[%d] is %d, not a token type (1..6)",
                             id, kind);
        if (kind == TOKEN_KIND_BYTE)
            return error_set(err, "tokenizer.ggml.token_type[%d] is BYTE: byte tokens belong to "
                                  "byte-fallback tokenizers, not byte-level BPE (\"gpt2\")", id);
        if (kind == TOKEN_KIND_UNUSED) continue;
        TokenizerText tok = v->tokens[id];
        if (!tok.p || tok.len == 0)
            return error_set(err, "tokenizer.ggml.tokens[%d] (%s) is empty", id, kind_name(kind));
        if (!utf8_is_valid(tok.p, tok.len))
            return error_set(err, "tokenizer.ggml.tokens[%d] is not valid UTF-8", id);
    }
    return 0;
}

/* NORMAL and UNKNOWN texts must be distinct (tokenizer.json's vocabulary is
 * a map): an open-addressing set of ids over their texts. */
static int check_distinct(const TokenizerVocab *v, Error *err) {
    size_t cap = 16;
    while (cap < 2 * (size_t)v->num_tokens) cap *= 2;
    int32_t *slots = malloc(cap * sizeof *slots);
    if (!slots) return error_set(err, "out of memory");
    memset(slots, 0xFF, cap * sizeof *slots); /* all -1 */
    int rc = 0;
    for (int32_t id = 0; id < v->num_tokens && rc == 0; id++) {
        int32_t kind = kind_of(v, id);
        if (kind != TOKEN_KIND_NORMAL && kind != TOKEN_KIND_UNKNOWN) continue;
        TokenizerText tok = v->tokens[id];
        size_t i = (size_t)bpe_hash_bytes(tok.p, tok.len) & (cap - 1);
        for (int32_t other; (other = slots[i]) >= 0; i = (i + 1) & (cap - 1)) {
            TokenizerText o = v->tokens[other];
            if (o.len == tok.len && memcmp(o.p, tok.p, tok.len) == 0) {
                rc = error_set(err, "tokenizer.ggml.tokens[%d] and [%d] are both '%.*s'", other,
                               id, shown_len(tok), tok.p);
                break;
            }
        }
        slots[i] = id;
    }
    free(slots);
    return rc;
}

/* A merge "a b": exactly one space, with a token on either side. */
static int add_merge(Bpe *bpe, int index, TokenizerText m, Error *err) {
    const char *space = m.p ? memchr(m.p, ' ', m.len) : NULL;
    if (!space || space == m.p || space == m.p + m.len - 1 ||
        memchr(space + 1, ' ', m.len - (size_t)(space - m.p) - 1))
        return error_set(err, "tokenizer.ggml.merges[%d] '%.*s' is not two tokens separated by "
                              "one space", index, shown_len(m), shown(m));
    if (!utf8_is_valid(m.p, m.len))
        return error_set(err, "tokenizer.ggml.merges[%d] is not valid UTF-8", index);
    size_t left = (size_t)(space - m.p);
    if (bpe_add_merge(bpe, m.p, left, space + 1, m.len - left - 1, err))
        return error_prefix(err, "tokenizer.ggml.merges[%d]", index);
    return 0;
}

/* The BPE model: NORMAL and UNKNOWN tokens at their ids, then the merges. */
static int load_bpe(Tokenizer *t, const TokenizerVocab *v, Error *err) {
    if (bpe_init(&t->bpe, err) || check_distinct(v, err)) return -1;
    for (int32_t id = 0; id < v->num_tokens; id++) {
        int32_t kind = kind_of(v, id);
        if (kind != TOKEN_KIND_NORMAL && kind != TOKEN_KIND_UNKNOWN) continue;
        if (kind == TOKEN_KIND_UNKNOWN && t->bpe.unk_id >= 0)
            return error_set(err, "tokenizer.ggml.token_type: ids %d and %d are both UNKNOWN "
                                  "(BPE has one unknown token)", t->bpe.unk_id, id);
        if (bpe_add_token(&t->bpe, v->tokens[id].p, v->tokens[id].len, id, err))
            return error_prefix(err, "tokenizer.ggml.tokens");
        if (kind == TOKEN_KIND_UNKNOWN) t->bpe.unk_id = id;
    }
    if (bpe_finish_vocab(&t->bpe, err)) return error_prefix(err, "tokenizer.ggml.tokens");
    for (int i = 0; i < v->num_merges; i++)
        if (add_merge(&t->bpe, i, v->merges[i], err)) return -1;
    return bpe_finish(&t->bpe, err) ? error_prefix(err, "tokenizer.ggml.merges") : 0;
}

/* CONTROL (special) and USER_DEFINED tokens, matched in the raw text as
 * Qwen's added tokens are (normalized false, no stripping). */
static int load_added_tokens(Tokenizer *t, const TokenizerVocab *v, Error *err) {
    for (int32_t id = 0; id < v->num_tokens; id++) {
        int32_t kind = kind_of(v, id);
        if (kind != TOKEN_KIND_CONTROL && kind != TOKEN_KIND_USER_DEFINED) continue;
        AddedToken tok = {.content = (char *)v->tokens[id].p, .len = v->tokens[id].len, .id = id,
                          .special = kind == TOKEN_KIND_CONTROL};
        if (added_tokens_add(&t->added, &tok, err)) return error_prefix(err, "tokenizer.ggml.tokens");
    }
    return 0;
}

/* One of tokenizer.ggml.{bos,eos,padding}_token_id: -1, or a token's id. */
static int special_id(Tokenizer *t, const TokenizerVocab *v, const char *key, const char *name,
                      int32_t id, int32_t *out, Error *err) {
    *out = -1;
    if (id == -1) return 0;
    if (id < 0 || id >= v->num_tokens)
        return error_set(err, "tokenizer.ggml.%s %d is outside the tokens [0, %d)", key, id,
                         v->num_tokens);
    if (kind_of(v, id) == TOKEN_KIND_UNUSED)
        return error_set(err, "tokenizer.ggml.%s %d is an UNUSED (padding) id", key, id);
    json_t *text = json_stringn(v->tokens[id].p, v->tokens[id].len);
    if (!text || json_object_set_new(t->special_strings, name, text))
        return error_set(err, "out of memory");
    *out = id;
    return 0;
}

/* What tokenizer_config.json gives on the other path: special ids and
 * texts, the post-processor's ids, the chat template. */
static int load_config_fields(Tokenizer *t, const TokenizerVocab *v, Error *err) {
    if (!(t->special_strings = json_object())) return error_set(err, "out of memory");
    if (special_id(t, v, "bos_token_id", "bos_token", v->bos_id, &t->bos_id, err) ||
        special_id(t, v, "eos_token_id", "eos_token", v->eos_id, &t->eos_id, err) ||
        special_id(t, v, "padding_token_id", "pad_token", v->pad_id, &t->pad_id, err))
        return -1;
    if (v->add_bos) {
        if (t->bos_id < 0)
            return error_set(err, "tokenizer.ggml.add_bos_token is true but there is no "
                                  "tokenizer.ggml.bos_token_id");
        t->post_before[t->num_post_before++] = t->bos_id;
    }
    if (v->add_eos) {
        if (t->eos_id < 0)
            return error_set(err, "tokenizer.ggml.add_eos_token is true but there is no "
                                  "tokenizer.ggml.eos_token_id");
        t->post_after[t->num_post_after++] = t->eos_id;
    }
    TokenizerText ct = v->chat_template;
    if (!ct.p) return 0;
    if (memchr(ct.p, '\0', ct.len) || !utf8_is_valid(ct.p, ct.len))
        return error_set(err, "tokenizer.chat_template is not valid UTF-8 text (it has a NUL "
                              "byte or a bad sequence)");
    if (!(t->chat_template = malloc(ct.len + 1))) return error_set(err, "out of memory");
    memcpy(t->chat_template, ct.p, ct.len);
    t->chat_template[ct.len] = '\0';
    return 0;
}

Tokenizer *tokenizer_load_vocab(const TokenizerVocab *v, int model_vocab_size, Error *err) {
    const PreTokenizerPreset *preset;
    if (!v) {
        error_set(err, "no tokenizer tables were given");
        return NULL;
    }
    if (check_header(v, model_vocab_size, &preset, err)) return NULL;
    Tokenizer *t = tokenizer_new(err);
    if (!t) return NULL;
    t->nfc = preset->nfc;
    int rc = load_bpe(t, v, err);
    if (rc == 0) rc = load_added_tokens(t, v, err);
    if (rc == 0) rc = pretokenizer_init_regex(&t->pretok, preset->split_regex, false, err);
    if (rc == 0) rc = added_tokens_build(&t->added, t->nfc, err);
    if (rc == 0) rc = tokenizer_build_id_tables(t, err);
    if (rc == 0) rc = load_config_fields(t, v, err);
    if (rc == 0) rc = tokenizer_fit_model_vocab(t, model_vocab_size, "tokenizer.ggml.tokens", err);
    if (rc) {
        tokenizer_free(t);
        return NULL;
    }
    return t;
}
