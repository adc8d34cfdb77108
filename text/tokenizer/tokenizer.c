/*
 * tokenizer.c - loading a Hugging Face tokenizer.json (+ tokenizer_config.json)
 * and looking tokens up (see tokenizer.h; encoding is in tokenizer_encode.c,
 * decoding in detokenizer.c).
 *
 * What is implemented is the byte-level BPE family, as configuration:
 *   model          BPE (vocab, merges in either form, unk_token, fuse_unk,
 *                  ignore_merges); no dropout, byte fallback or affixes
 *   normalizer     none or NFC (alone or in a Sequence)
 *   pre_tokenizer  Split(regex, Isolated) + ByteLevel(use_regex=false)
 *                  (Qwen2/3, Llama 3), or ByteLevel(use_regex=true) (GPT-2);
 *                  no prefix space
 *   post_processor none, ByteLevel (which changes no ids), TemplateProcessing
 *                  (special tokens around a single sequence, e.g.
 *                  Qwen3-Embedding's trailing <|endoftext|>; added only by
 *                  tokenizer_add_special_tokens), or a Sequence of those
 *   decoder        ByteLevel
 * Anything else is refused with an error that names the component and its
 * type, because a tokenizer that half-understands its file gives wrong ids
 * without any sign.
 */
#include "tokenizer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/read_file.h"
#include "tokenizer_internal.h"
#include "tokenizer_json.h"
#include "unicode_props.h"
#include "utf8.h"


/* ---- small jansson helpers ---- */

static const char *type_of(json_t *obj) {
    const char *t = json_string_value(json_object_get(obj, "type"));
    return t ? t : "(no type)";
}

/* A boolean field; absent means dflt. */
static int get_bool(json_t *obj, const char *key, bool dflt, bool *out, Error *err) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_boolean(v)) return error_set(err, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

/* null, absent or "" */
static bool is_empty(json_t *v) {
    return !v || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0);
}

/* ---- tokenizer.json components ---- */

static int vocab_entry(void *ctx, const char *tok, size_t len, int64_t id, Error *err) {
    return bpe_add_token(ctx, tok, len, id, err);
}

static int vocab_end(void *ctx, Error *err) { return bpe_finish_vocab(ctx, err); }

static int merge_entry(void *ctx, const char *a, size_t an, const char *b, size_t bn, Error *err) {
    return bpe_add_merge(ctx, a, an, b, bn, err);
}

static int load_model(Tokenizer *t, json_t *model, TokenizerJson *tj, const TableReader *r,
                      Error *err) {
    if (!json_is_object(model)) return error_set(err, "'model' is missing or not an object");
    if (strcmp(type_of(model), "BPE") != 0)
        return error_set(err, "model type '%s' is not supported (only byte-level BPE is)",
                         type_of(model));
    if (!json_is_null(json_object_get(model, "dropout")) && json_object_get(model, "dropout"))
        return error_set(err, "BPE dropout is not supported");
    if (!is_empty(json_object_get(model, "continuing_subword_prefix")) ||
        !is_empty(json_object_get(model, "end_of_word_suffix")))
        return error_set(err, "BPE with continuing_subword_prefix or end_of_word_suffix is not "
                              "supported (not a byte-level BPE)");
    bool byte_fallback = false;
    if (get_bool(model, "byte_fallback", false, &byte_fallback, err) ||
        get_bool(model, "fuse_unk", false, &t->bpe.fuse_unk, err) ||
        get_bool(model, "ignore_merges", false, &t->bpe.ignore_merges, err))
        return error_prefix(err, "model");
    if (byte_fallback) return error_set(err, "BPE byte_fallback is not supported");
    /* Tables the one-pass reader left (their keys came before "type"). */
    if (!tj->vocab_read) {
        if (!tj->vocab.p) return error_set(err, "model.vocab is missing");
        if (tokenizer_json_vocab(tj->vocab, r, err)) return -1;
    }
    if (!tj->merges_read) {
        if (!tj->merges.p) return error_set(err, "model.merges is missing");
        if (tokenizer_json_merges(tj->merges, r, err)) return -1;
    }
    if (bpe_finish(&t->bpe, err)) return error_prefix(err, "model");
    json_t *unk = json_object_get(model, "unk_token");
    if (json_is_string(unk)) {
        t->bpe.unk_id = bpe_token_to_id(&t->bpe, json_string_value(unk), json_string_length(unk));
        if (t->bpe.unk_id < 0)
            return error_set(err, "model.unk_token '%.60s' is not in the vocabulary",
                             json_string_value(unk));
    } else if (unk && !json_is_null(unk)) {
        return error_set(err, "model.unk_token must be a string or null");
    }
    return 0;
}

static int load_added_tokens(Tokenizer *t, json_t *list, Error *err) {
    if (!list || json_is_null(list)) return 0;
    if (!json_is_array(list)) return error_set(err, "'added_tokens' must be a list");
    size_t i;
    json_t *a;
    json_array_foreach(list, i, a) {
        json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= (1 << 24) || !json_is_string(content))
            return error_set(err, "added_tokens[%zu] needs an integer 'id' in [0, 2^24) and a "
                                  "string 'content'", i);
        AddedToken tok = {.content = (char *)json_string_value(content),
                          .len = json_string_length(content),
                          .id = (int32_t)json_integer_value(id)};
        if (get_bool(a, "special", false, &tok.special, err) ||
            get_bool(a, "single_word", false, &tok.single_word, err) ||
            get_bool(a, "lstrip", false, &tok.lstrip, err) ||
            get_bool(a, "rstrip", false, &tok.rstrip, err) ||
            get_bool(a, "normalized", !tok.special, &tok.normalized, err))
            return error_prefix(err, "added_tokens[%zu]", i);
        if (!utf8_is_valid(tok.content, tok.len))
            return error_set(err, "added_tokens[%zu] is not valid UTF-8", i);
        if (added_tokens_add(&t->added, &tok, err)) return -1;
    }
    return 0;
}

static int load_normalizer(Tokenizer *t, json_t *n, Error *err) {
    if (!n || json_is_null(n)) return 0;
    const char *type = type_of(n);
    if (strcmp(type, "NFC") == 0) {
        t->nfc = true;
        return 0;
    }
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(n, "normalizers"), *item;
        size_t i;
        if (!json_is_array(list)) return error_set(err, "normalizer Sequence needs 'normalizers'");
        json_array_foreach(list, i, item) {
            if (load_normalizer(t, item, err)) return -1;
        }
        return 0;
    }
    return error_set(err, "normalizer type '%s' is not supported (supported: NFC)", type);
}

/* Collects the pre-tokenizer steps: at most one Split and one ByteLevel. */
typedef struct PretokSpec {
    json_t *split, *byte_level;
} PretokSpec;

static int collect_pretok(json_t *p, PretokSpec *spec, Error *err) {
    const char *type = type_of(p);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(p, "pretokenizers"), *item;
        size_t i;
        if (!json_is_array(list))
            return error_set(err, "pre_tokenizer Sequence needs 'pretokenizers'");
        json_array_foreach(list, i, item) {
            if (collect_pretok(item, spec, err)) return -1;
        }
        return 0;
    }
    if (strcmp(type, "Split") == 0 && !spec->split && !spec->byte_level) {
        spec->split = p;
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0 && !spec->byte_level) {
        spec->byte_level = p;
        return 0;
    }
    return error_set(err, "pre_tokenizer '%s' is not supported here (supported: Split with a "
                          "regex, then ByteLevel)", type);
}

static int load_pre_tokenizer(Tokenizer *t, json_t *p, Error *err) {
    if (!p || json_is_null(p))
        return error_set(err, "pre_tokenizer is missing (only byte-level BPE is supported)");
    PretokSpec spec = {0};
    if (collect_pretok(p, &spec, err)) return -1;
    if (!spec.byte_level)
        return error_set(err, "pre_tokenizer has no ByteLevel step (only byte-level BPE is "
                              "supported)");
    bool prefix_space = false, use_regex = false;
    if (get_bool(spec.byte_level, "add_prefix_space", true, &prefix_space, err) ||
        get_bool(spec.byte_level, "use_regex", true, &use_regex, err))
        return error_prefix(err, "pre_tokenizer ByteLevel");
    if (prefix_space)
        return error_set(err, "pre_tokenizer ByteLevel add_prefix_space=true is not supported");
    if (spec.split && use_regex)
        return error_set(err, "pre_tokenizer Split followed by ByteLevel(use_regex=true) is not "
                              "supported");
    if (!spec.split) {
        if (!use_regex) { /* the whole text is one word */
            t->pretok = (PreTokenizer){.kind = PRETOK_WHOLE};
            return 0;
        }
        return pretokenizer_init_regex(&t->pretok, PRETOK_GPT2_PATTERN, false, err);
    }
    json_t *pattern = json_object_get(spec.split, "pattern");
    json_t *regex = json_object_get(pattern, "Regex");
    const char *behavior = json_string_value(json_object_get(spec.split, "behavior"));
    bool invert = false;
    if (get_bool(spec.split, "invert", false, &invert, err)) return error_prefix(err, "Split");
    if (!json_is_string(regex))
        return error_set(err, "pre_tokenizer Split: only a {\"Regex\": ...} pattern is supported");
    if (!behavior || strcmp(behavior, "Isolated") != 0 || invert)
        return error_set(err, "pre_tokenizer Split: behavior '%s'%s is not supported (only "
                              "Isolated)", behavior ? behavior : "(none)", invert ? " inverted" : "");
    return pretokenizer_init_regex(&t->pretok, json_string_value(regex), false, err);
}

/* TemplateProcessing's "single" template: [SpecialToken...] Sequence A
 * [SpecialToken...], each special token's ids from "special_tokens". The
 * pair template is never used (one text per encode). */
static int load_template(Tokenizer *t, json_t *pp, Error *err) {
    json_t *single = json_object_get(pp, "single"), *specials = json_object_get(pp, "special_tokens");
    if (!json_is_array(single)) return error_set(err, "post_processor TemplateProcessing: 'single' must be a list");
    bool seen_a = false;
    size_t i;
    json_t *piece;
    json_array_foreach(single, i, piece) {
        json_t *seq = json_object_get(piece, "Sequence"), *sp = json_object_get(piece, "SpecialToken");
        if (seq) {
            const char *id = json_string_value(json_object_get(seq, "id"));
            if (seen_a || !id || strcmp(id, "A") != 0)
                return error_set(err, "post_processor TemplateProcessing: 'single' must hold Sequence A once");
            seen_a = true;
            continue;
        }
        const char *name = json_string_value(json_object_get(sp, "id"));
        json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
        if (!name || !json_is_array(ids))
            return error_set(err, "post_processor TemplateProcessing: special token '%s' has no ids",
                             name ? name : "(unnamed)");
        size_t k;
        json_t *idv;
        json_array_foreach(ids, k, idv) {
            int *n = seen_a ? &t->num_post_after : &t->num_post_before;
            int32_t *dst = seen_a ? t->post_after : t->post_before;
            json_int_t id = json_integer_value(idv);
            if (!json_is_integer(idv) || id < 0 || id > INT32_MAX)
                return error_set(err, "post_processor TemplateProcessing: '%s' has a bad id", name);
            if (*n == TOKENIZER_MAX_TEMPLATE_IDS)
                return error_set(err, "post_processor TemplateProcessing: more than %d special ids on a side",
                                 TOKENIZER_MAX_TEMPLATE_IDS);
            dst[(*n)++] = (int32_t)id;
        }
    }
    if (!seen_a) return error_set(err, "post_processor TemplateProcessing: 'single' has no Sequence A");
    return 0;
}

static int load_post_processor(Tokenizer *t, json_t *pp, Error *err) {
    if (!pp || json_is_null(pp) || strcmp(type_of(pp), "ByteLevel") == 0) return 0;
    if (strcmp(type_of(pp), "TemplateProcessing") == 0) return load_template(t, pp, err);
    if (strcmp(type_of(pp), "Sequence") == 0) {
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(pp, "processors"), i, p)
            if (load_post_processor(t, p, err)) return -1;
        return 0;
    }
    return error_set(err, "post_processor '%s' is not supported (supported: ByteLevel, "
                          "TemplateProcessing, a Sequence of them, or none)", type_of(pp));
}

static int check_rest(Tokenizer *t, json_t *doc, Error *err) {
    if (load_post_processor(t, json_object_get(doc, "post_processor"), err)) return -1;
    json_t *dec = json_object_get(doc, "decoder");
    if (!dec || json_is_null(dec) || strcmp(type_of(dec), "ByteLevel") != 0)
        return error_set(err, "decoder '%s' is not supported (supported: ByteLevel)",
                         dec && !json_is_null(dec) ? type_of(dec) : "none");
    const char *off[] = {"truncation", "padding"};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(doc, off[i]);
        if (v && !json_is_null(v))
            return error_set(err, "'%s' is set; tokenizer-side %s is not supported", off[i], off[i]);
    }
    return 0;
}

/* Per-id tables for decoding: vocabulary bytes, then added tokens on top
 * (an added token's text goes through the ByteLevel decoder too: mapped
 * back to bytes when all its characters are in the byte alphabet, else
 * its UTF-8 as is). */
int tokenizer_build_id_tables(Tokenizer *t, Error *err) {
    int32_t size = t->bpe.num_ids;
    for (size_t i = 0; i < t->added.count; i++)
        if (t->added.tokens[i].id >= size) size = t->added.tokens[i].id + 1;
    t->size = size;
    t->flags = calloc((size_t)size + 1, 1);
    t->bytes = calloc((size_t)size + 1, sizeof *t->bytes);
    t->bytes_len = calloc((size_t)size + 1, sizeof *t->bytes_len);
    if (!t->flags || !t->bytes || !t->bytes_len) return error_set(err, "out of memory");
    for (int32_t id = 0; id < t->bpe.num_ids; id++) {
        if (t->bpe.len[id] < 0) continue;
        t->flags[id] = TOKEN_PRESENT;
        t->bytes[id] = t->bpe.bytes.data + t->bpe.offset[id];
        t->bytes_len[id] = (uint32_t)t->bpe.len[id];
    }
    size_t *offsets = malloc((t->added.count + 1) * sizeof *offsets);
    if (!offsets) return error_set(err, "out of memory");
    for (size_t i = 0; i < t->added.count; i++) {
        const AddedToken *a = &t->added.tokens[i];
        offsets[i] = t->added_bytes.len;
        if (byte_buf_reserve(&t->added_bytes, a->len)) {
            free(offsets);
            return error_set(err, "out of memory");
        }
        size_t o = t->added_bytes.len, k = 0;
        bool in_alphabet = true;
        while (k < a->len && in_alphabet) {
            int len;
            uint32_t cp = utf8_decode_valid((const unsigned char *)a->content + k, &len);
            int b = bpe_char_to_byte(cp);
            if (b < 0) in_alphabet = false;
            else t->added_bytes.data[o++] = (char)b;
            k += (size_t)len;
        }
        if (!in_alphabet) {
            memcpy(t->added_bytes.data + t->added_bytes.len, a->content, a->len);
            o = t->added_bytes.len + a->len;
        }
        t->added_bytes.len = o;
    }
    for (size_t i = 0; i < t->added.count; i++) {
        const AddedToken *a = &t->added.tokens[i];
        size_t end = i + 1 < t->added.count ? offsets[i + 1] : t->added_bytes.len;
        t->flags[a->id] = TOKEN_PRESENT | TOKEN_ADDED | (a->special ? TOKEN_SPECIAL : 0);
        t->bytes[a->id] = t->added_bytes.data + offsets[i];
        t->bytes_len[a->id] = (uint32_t)(end - offsets[i]);
    }
    free(offsets);
    return 0;
}

static int load_tokenizer_json(Tokenizer *t, const char *path, Error *err) {
    /* Mapped, not read: no copy and no zeroed pages for 11 MB of text. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return error_set(err, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        close(fd);
        return error_set(err, "%s is not a regular, non-empty file", path);
    }
    size_t size = (size_t)st.st_size;
    char *text = mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    if (text == MAP_FAILED) return error_set(err, "cannot mmap %s: %s", path, strerror(errno));
    TokenizerJson tj;
    TableReader r = {&t->bpe, vocab_entry, vocab_end, merge_entry};
    int rc = bpe_init(&t->bpe, err);
    if (rc == 0) rc = tokenizer_json_open(text, size, &r, &tj, err);
    json_t *doc = rc == 0 ? tj.doc : NULL;
    if (rc == 0 && !json_is_object(doc)) rc = error_set(err, "the top level is not an object");
    if (rc == 0) rc = load_model(t, json_object_get(doc, "model"), &tj, &r, err);
    if (rc == 0) rc = load_added_tokens(t, json_object_get(doc, "added_tokens"), err);
    if (rc == 0) rc = load_normalizer(t, json_object_get(doc, "normalizer"), err);
    if (rc == 0) rc = load_pre_tokenizer(t, json_object_get(doc, "pre_tokenizer"), err);
    if (rc == 0) rc = check_rest(t, doc, err);
    if (rc == 0) rc = added_tokens_build(&t->added, t->nfc, err);
    if (rc == 0) rc = tokenizer_build_id_tables(t, err);
    json_decref(doc);
    munmap(text, size);
    return rc ? error_prefix(err, "%s", path) : 0;
}

/* ---- tokenizer_config.json ---- */

/* A special token given as "text" or {"content": "text", ...}; -1 when null. */
static int config_token(Tokenizer *t, json_t *cfg, const char *key, int32_t *id, Error *err) {
    json_t *v = json_object_get(cfg, key);
    *id = -1;
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return error_set(err, "'%s' must be a string or null", key);
    *id = tokenizer_token_to_id(t, json_string_value(v), json_string_length(v));
    if (*id < 0)
        return error_set(err, "%s '%.80s' is not a token of tokenizer.json", key,
                         json_string_value(v));
    return 0;
}

/* chat_template: one text, or transformers' named list [{"name", "template"}]
 * of which "default" and "tool_use" are the ones apply_chat_template picks. */
static int load_chat_template(Tokenizer *t, json_t *cfg, const char *dir, Error *err) {
    json_t *v = json_object_get(cfg, "chat_template");
    if (json_is_string(v)) {
        t->chat_template = strdup(json_string_value(v));
        return t->chat_template ? 0 : error_set(err, "out of memory");
    }
    if (json_is_array(v)) {
        size_t i;
        json_t *item;
        json_array_foreach(v, i, item) {
            const char *name = json_string_value(json_object_get(item, "name"));
            const char *text = json_string_value(json_object_get(item, "template"));
            if (!name || !text)
                return error_set(err, "chat_template[%zu] must be {\"name\": ..., \"template\": ...}", i);
            char **slot = strcmp(name, "default") == 0    ? &t->chat_template
                          : strcmp(name, "tool_use") == 0 ? &t->tool_use_template
                                                          : NULL;
            if (!slot) continue;
            free(*slot);
            if (!(*slot = strdup(text))) return error_set(err, "out of memory");
        }
        return 0;
    }
    if (v && !json_is_null(v)) return error_set(err, "'chat_template' must be a string or a list");
    /* Newer transformers save it beside the config. */
    char path[4096];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    size_t size;
    return read_file(path, &t->chat_template, &size, err);
}

/* The special tokens' texts as transformers hands them to the template
 * (special_tokens_map): "bos_token": "<s>", ..., additional_special_tokens. */
static int load_special_token_strings(Tokenizer *t, json_t *cfg, Error *err) {
    static const char *const keys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                       "pad_token", "cls_token", "mask_token"};
    if (!(t->special_strings = json_object())) return error_set(err, "out of memory");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        json_t *v = json_object_get(cfg, keys[i]);
        if (json_is_object(v)) v = json_object_get(v, "content");
        if (json_is_string(v) && json_object_set(t->special_strings, keys[i], v))
            return error_set(err, "out of memory");
    }
    json_t *extra = json_object_get(cfg, "additional_special_tokens"), *list = json_array();
    size_t i;
    json_t *v;
    if (!list) return error_set(err, "out of memory");
    json_array_foreach(extra, i, v) {
        if (json_is_object(v)) v = json_object_get(v, "content");
        if (json_is_string(v) && json_array_append(list, v)) {
            json_decref(list);
            return error_set(err, "out of memory");
        }
    }
    if (json_array_size(list) == 0) {
        json_decref(list);
        return 0;
    }
    return json_object_set_new(t->special_strings, "additional_special_tokens", list)
               ? error_set(err, "out of memory") : 0;
}

static int load_config(Tokenizer *t, const char *dir, Error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    t->eos_id = t->pad_id = t->bos_id = -1;
    struct stat st;
    if (stat(path, &st) != 0)
        return load_special_token_strings(t, NULL, err) || load_chat_template(t, NULL, dir, err) ? -1 : 0;
    json_error_t jerr;
    json_t *cfg = json_load_file(path, 0, &jerr);
    if (!cfg) return error_set(err, "%s: not valid JSON: %s (line %d)", path, jerr.text, jerr.line);
    int rc = json_is_object(cfg) ? 0 : error_set(err, "the top level is not an object");
    if (rc == 0) rc = config_token(t, cfg, "eos_token", &t->eos_id, err);
    if (rc == 0) rc = config_token(t, cfg, "pad_token", &t->pad_id, err);
    if (rc == 0) rc = config_token(t, cfg, "bos_token", &t->bos_id, err);
    if (rc == 0) rc = load_chat_template(t, cfg, dir, err);
    if (rc == 0) rc = load_special_token_strings(t, cfg, err);
    json_decref(cfg);
    return rc ? error_prefix(err, "%s", path) : 0;
}

/* ---- public ---- */

Tokenizer *tokenizer_new(Error *err) {
    Tokenizer *t = calloc(1, sizeof *t);
    StatePool *pool = calloc(1, sizeof *pool);
    if (!t || !pool || pthread_mutex_init(&pool->lock, NULL) != 0) {
        free(t);
        free(pool);
        error_set(err, "out of memory");
        return NULL;
    }
    t->pool = pool;
    t->eos_id = t->pad_id = t->bos_id = -1;
    unicode_props_init();
    return t;
}

int tokenizer_fit_model_vocab(Tokenizer *t, int model_vocab_size, const char *source, Error *err) {
    t->model_vocab_size = model_vocab_size > 0 ? model_vocab_size : t->size;
    if (t->model_vocab_size < t->size)
        return error_set(err, "%s has token ids up to %d but the model's vocabulary has only %d rows",
                         source, t->size - 1, t->model_vocab_size);
    return 0;
}

Tokenizer *tokenizer_load(const char *model_dir, int model_vocab_size, Error *err) {
    Tokenizer *t = tokenizer_new(err);
    if (!t) return NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", model_dir);
    if (load_tokenizer_json(t, path, err) || load_config(t, model_dir, err) ||
        tokenizer_fit_model_vocab(t, model_vocab_size, path, err)) {
        tokenizer_free(t);
        return NULL;
    }
    return t;
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    if (t->pool) {
        tokenizer_free_states(t->pool);
        pthread_mutex_destroy(&t->pool->lock);
        free(t->pool);
    }
    bpe_free(&t->bpe);
    added_tokens_free(&t->added);
    pretokenizer_free(&t->pretok);
    free(t->flags);
    free(t->bytes);
    free(t->bytes_len);
    byte_buf_free(&t->added_bytes);
    free(t->chat_template);
    free(t->tool_use_template);
    json_decref(t->special_strings);
    free(t);
}

int tokenizer_size(const Tokenizer *t) { return t->size; }
int tokenizer_model_vocab_size(const Tokenizer *t) { return t->model_vocab_size; }
int32_t tokenizer_eos_id(const Tokenizer *t) { return t->eos_id; }
int32_t tokenizer_pad_id(const Tokenizer *t) { return t->pad_id; }
int32_t tokenizer_bos_id(const Tokenizer *t) { return t->bos_id; }
const char *tokenizer_chat_template(const Tokenizer *t) { return t->chat_template; }
const char *tokenizer_tool_use_template(const Tokenizer *t) { return t->tool_use_template; }
const json_t *tokenizer_special_token_strings(const Tokenizer *t) { return t->special_strings; }

bool tokenizer_is_special(const Tokenizer *t, int32_t id) {
    return id >= 0 && id < t->size && (t->flags[id] & TOKEN_SPECIAL);
}

int32_t tokenizer_token_to_id(const Tokenizer *t, const char *token, size_t len) {
    const AddedToken *a = added_tokens_find(&t->added, token, len);
    return a ? a->id : bpe_token_to_id(&t->bpe, token, len);
}

static int check_id(const Tokenizer *t, int32_t id, Error *err) {
    if (id < 0 || id >= t->model_vocab_size)
        return error_set(err, "token id %d is outside the vocabulary [0, %d)", id,
                         t->model_vocab_size);
    return 0;
}

int tokenizer_token_bytes(const Tokenizer *t, int32_t id, const char **bytes, size_t *len,
                          Error *err) {
    if (check_id(t, id, err)) return -1;
    *bytes = "";
    *len = 0;
    if (id < t->size && (t->flags[id] & TOKEN_PRESENT)) {
        *bytes = t->bytes[id];
        *len = t->bytes_len[id];
    }
    return 0;
}

char *tokenizer_id_to_token(const Tokenizer *t, int32_t id, Error *err) {
    if (check_id(t, id, err)) return NULL;
    if (id >= t->size || !(t->flags[id] & TOKEN_PRESENT)) {
        error_set(err, "token id %d has no token (the model's vocabulary is padded)", id);
        return NULL;
    }
    if (t->flags[id] & TOKEN_ADDED) {
        const AddedToken *a = NULL;
        for (size_t i = 0; i < t->added.count && !a; i++)
            if (t->added.tokens[i].id == id) a = &t->added.tokens[i];
        char *s = a ? strdup(a->content) : NULL;
        if (!s) error_set(err, "out of memory");
        return s;
    }
    /* Vocabulary tokens: back to the byte-level alphabet, unless stored as UTF-8. */
    size_t n = t->bytes_len[id];
    const unsigned char *b = (const unsigned char *)t->bytes[id];
    char *s = malloc(2 * n + 1);
    if (!s) {
        error_set(err, "out of memory");
        return NULL;
    }
    size_t o = 0;
    if (!t->bpe.reachable[id]) {
        memcpy(s, b, n);
        o = n;
    } else {
        for (size_t i = 0; i < n; i++) o += (size_t)utf8_encode(bpe_byte_to_char(b[i]), s + o);
    }
    s[o] = '\0';
    return s;
}

int tokenizer_add_special_tokens(const Tokenizer *t, int32_t **ids, size_t *n, Error *err) {
    int before = t->num_post_before, after = t->num_post_after;
    if (before + after == 0) return 0;
    int32_t *v = realloc(*ids, sizeof *v * (*n + (size_t)before + (size_t)after));
    if (!v) return error_set(err, "out of memory");
    memmove(v + before, v, sizeof *v * *n);
    memcpy(v, t->post_before, sizeof *v * (size_t)before);
    memcpy(v + before + *n, t->post_after, sizeof *v * (size_t)after);
    *ids = v;
    *n += (size_t)before + (size_t)after;
    return 0;
}
