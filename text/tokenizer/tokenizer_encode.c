/*
 * tokenizer_encode.c - text to token ids, Hugging Face's pipeline in order:
 *
 *   1. bytes that are not UTF-8 -> U+FFFD (maximal subparts), as a Python
 *      str decoded with errors='replace' would reach Hugging Face;
 *   2. added tokens with normalized=false are cut out of the raw text;
 *   3. each piece between them is normalized (NFC, Unicode 9.0 data), and
 *      added tokens with normalized=true are cut out of the result;
 *   4. the pre-tokenizer regex splits what is left into words;
 *   5. each word is merged by BPE on its bytes (byte-level), or found in
 *      the word cache.
 *
 * Concurrency: the tables built at load are only read. Everything a call
 * writes (the word cache, NFC and BPE work memory, PCRE2 match data) lives
 * in an EncodeState that the call takes from the tokenizer's pool under a
 * mutex and puts back when it returns: two lock operations per call, none
 * per word, and each state's cache stays warm for whichever thread takes
 * it next. The pool grows to the number of concurrent calls.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"
#include "unicode_nfc.h"
#include "utf8.h"
#include "word_cache.h"

struct EncodeState {
    EncodeState *next_idle, *next_all;
    WordCache cache;
    NfcScratch nfc;
    ByteBuf normalized, lossy;
    PretokScratch pretok;
    BpeScratch bpe;
};

typedef struct Encoding {
    const Tokenizer *t;
    EncodeState *st;
    int32_t *ids;
    size_t n, cap;
    Error *err;
} Encoding;

static EncodeState *take_state(StatePool *pool) {
    pthread_mutex_lock(&pool->lock);
    EncodeState *s = pool->idle;
    if (s) pool->idle = s->next_idle;
    pthread_mutex_unlock(&pool->lock);
    if (s) return s;
    s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_lock(&pool->lock);
    s->next_all = pool->all;
    pool->all = s;
    pthread_mutex_unlock(&pool->lock);
    return s;
}

static void put_state(StatePool *pool, EncodeState *s) {
    pthread_mutex_lock(&pool->lock);
    s->next_idle = pool->idle;
    pool->idle = s;
    pthread_mutex_unlock(&pool->lock);
}

void tokenizer_free_states(StatePool *pool) {
    for (EncodeState *s = pool->all, *next; s; s = next) {
        next = s->next_all;
        word_cache_free(&s->cache);
        nfc_scratch_free(&s->nfc);
        byte_buf_free(&s->normalized);
        byte_buf_free(&s->lossy);
        pretok_scratch_free(&s->pretok);
        bpe_scratch_free(&s->bpe);
        free(s);
    }
    pool->all = pool->idle = NULL;
}

static int reserve_ids(Encoding *e, size_t more) {
    if (more <= e->cap - e->n) return 0;
    if (array_reserve((void **)&e->ids, &e->cap, e->n + more, sizeof *e->ids))
        return error_set(e->err, "out of memory");
    return 0;
}

static int on_word(void *ctx, const char *word, size_t n) {
    Encoding *e = ctx;
    /* A word of n bytes never has more than n tokens. */
    if (reserve_ids(e, n)) return -1;
    const unsigned char *w = (const unsigned char *)word;
    int32_t *out = e->ids + e->n;
    uint64_t hash = 0;
    if (n > 1 && n <= WORD_CACHE_MAX_WORD) {
        const int32_t *hit;
        hash = bpe_hash_bytes(w, n);
        int k = word_cache_get(&e->st->cache, w, n, hash, &hit);
        if (k >= 0) {
            memcpy(out, hit, (size_t)k * sizeof *out);
            e->n += (size_t)k;
            return 0;
        }
    }
    int k = bpe_encode_word(&e->t->bpe, w, n, out, &e->st->bpe);
    if (k < 0) return error_set(e->err, "out of memory");
    if (hash) word_cache_put(&e->st->cache, w, n, hash, out, k);
    e->n += (size_t)k;
    return 0;
}

static int push_id(Encoding *e, int32_t id) {
    if (reserve_ids(e, 1)) return -1;
    e->ids[e->n++] = id;
    return 0;
}

static int on_normalized_piece(void *ctx, int32_t id, const char *s, size_t n) {
    Encoding *e = ctx;
    if (id >= 0) return push_id(e, id);
    return pretokenizer_split(&e->t->pretok, s, n, &e->st->pretok, on_word, e, e->err);
}

static int on_raw_piece(void *ctx, int32_t id, const char *s, size_t n) {
    Encoding *e = ctx;
    if (id >= 0) return push_id(e, id);
    const char *norm = s;
    size_t norm_len = n;
    if (e->t->nfc && unicode_nfc(s, n, &e->st->normalized, &e->st->nfc, &norm, &norm_len))
        return error_set(e->err, "out of memory");
    if (e->t->added.normalized.count)
        return added_tokens_split(&e->t->added, true, norm, norm_len, on_normalized_piece, e);
    return pretokenizer_split(&e->t->pretok, norm, norm_len, &e->st->pretok, on_word, e, e->err);
}

int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int32_t **ids,
                     size_t *n_ids, Error *err) {
    *ids = NULL;
    *n_ids = 0;
    if (len && !text) return error_set(err, "no text");
    EncodeState *st = take_state(t->pool);
    if (!st) return error_set(err, "out of memory");
    Encoding e = {.t = t, .st = st, .err = err};
    int rc = 0;
    if (!utf8_is_valid(text, len)) {
        size_t size = utf8_lossy_size(text, len);
        st->lossy.len = 0;
        if (byte_buf_reserve(&st->lossy, size)) {
            rc = error_set(err, "out of memory");
        } else {
            st->lossy.len = utf8_lossy_copy(text, len, st->lossy.data);
            text = st->lossy.data;
            len = st->lossy.len;
        }
    }
    /* Roughly one token per four bytes of text: one allocation for most calls. */
    if (rc == 0) rc = reserve_ids(&e, len / 3 + 16);
    if (rc == 0 && len) rc = added_tokens_split(&t->added, false, text, len, on_raw_piece, &e);
    put_state(t->pool, st);
    if (rc) {
        free(e.ids);
        return -1;
    }
    *ids = e.ids;
    *n_ids = e.n;
    return 0;
}

int tokenizer_use_pcre2(Tokenizer *t, Error *err) {
    if (t->pretok.kind != PRETOK_NATIVE) return 0;
    PreTokenizer pcre;
    if (pretokenizer_init_regex(&pcre, t->pretok.pattern, true, err)) return -1;
    pretokenizer_free(&t->pretok);
    t->pretok = pcre;
    return 0;
}
