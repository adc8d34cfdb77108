/*
 * detokenizer.c - tokenizer_decode() and the streaming Detokenizer (see
 * tokenizer.h).
 *
 * Hugging Face decodes by joining the bytes of all kept tokens (an added
 * token contributes its text) and converting the whole once with
 * String::from_utf8_lossy. Both paths here run the same converter over
 * the same bytes, token by token: it copies well-formed characters, writes
 * U+FFFD for each maximal ill-formed subpart, and keeps an unfinished
 * character (at most 3 bytes) pending until more bytes or the end.
 */
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"
#include "utf8.h"

/* Converts bytes[0..n) after the pending ones into out. */
static int feed(ByteBuf *out, unsigned char *pending, size_t *n_pending, const char *bytes,
                size_t n) {
    const unsigned char *p = (const unsigned char *)bytes;
    uint32_t cp;
    /* Output never exceeds 3 bytes per input byte (U+FFFD for each). */
    if (byte_buf_reserve(out, 3 * (n + *n_pending))) return -1;
    char *o = out->data + out->len;
    size_t i = 0;
    while (*n_pending && i < n) {
        /* Complete (or refute) the pending character with the next bytes. */
        unsigned char tmp[4];
        size_t np = *n_pending, take = 4 - np < n - i ? 4 - np : n - i;
        memcpy(tmp, pending, np);
        memcpy(tmp + np, p + i, take);
        int k = utf8_next(tmp, np + take, &cp);
        if (k == 0) { /* still unfinished: all of the input joins it */
            memcpy(pending + np, p + i, take);
            *n_pending = np + take;
            i += take;
            break;
        }
        if (k > 0) {
            memcpy(o, tmp, (size_t)k);
            o += k;
        } else {
            memcpy(o, UTF8_REPLACEMENT, 3);
            o += 3;
            k = -k;
        }
        /* The pending bytes were a valid prefix, so k covers all of them. */
        i += (size_t)k - np;
        *n_pending = 0;
    }
    while (i < n) {
        if (p[i] < 0x80) {
            *o++ = (char)p[i++];
            continue;
        }
        int k = utf8_next(p + i, n - i, &cp);
        if (k > 0) {
            memcpy(o, p + i, (size_t)k);
            o += k;
            i += (size_t)k;
        } else if (k < 0) {
            memcpy(o, UTF8_REPLACEMENT, 3);
            o += 3;
            i += (size_t)-k;
        } else {
            memcpy(pending, p + i, n - i);
            *n_pending = n - i;
            i = n;
        }
    }
    out->len = (size_t)(o - out->data);
    return 0;
}

static int finish(ByteBuf *out, size_t *n_pending) {
    if (!*n_pending) return 0;
    *n_pending = 0;
    return byte_buf_append(out, UTF8_REPLACEMENT, 3);
}

/* The bytes id contributes (none for skipped or padding ids), or -1. */
static int id_bytes(const Tokenizer *t, int32_t id, bool skip_special, const char **b, size_t *n,
                    Error *err) {
    if (id < 0 || id >= t->model_vocab_size)
        return error_set(err, "token id %d is outside the vocabulary [0, %d)", id,
                         t->model_vocab_size);
    *n = 0;
    if (id >= t->size) return 0;
    uint8_t f = t->flags[id];
    if (!(f & TOKEN_PRESENT) || (skip_special && (f & TOKEN_SPECIAL))) return 0;
    *b = t->bytes[id];
    *n = t->bytes_len[id];
    return 0;
}

int tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, bool skip_special_tokens,
                     char **text, size_t *len, Error *err) {
    *text = NULL;
    *len = 0;
    ByteBuf out = {0};
    unsigned char pending[4];
    size_t n_pending = 0;
    for (size_t i = 0; i < n; i++) {
        const char *b = NULL;
        size_t k = 0;
        if (id_bytes(t, ids[i], skip_special_tokens, &b, &k, err)) {
            byte_buf_free(&out);
            return -1;
        }
        if (k && feed(&out, pending, &n_pending, b, k)) goto oom;
    }
    if (finish(&out, &n_pending) || byte_buf_append(&out, "", 1)) goto oom;
    *text = out.data;
    *len = out.len - 1;
    return 0;
oom:
    byte_buf_free(&out);
    return error_set(err, "out of memory");
}

void detokenizer_init(Detokenizer *d, const Tokenizer *t, bool skip_special_tokens) {
    memset(d, 0, sizeof *d);
    d->t = t;
    d->skip_special_tokens = skip_special_tokens;
}

int detokenizer_push(Detokenizer *d, int32_t id, const char **out, size_t *out_len, Error *err) {
    const char *b = NULL;
    size_t k = 0;
    *out = "";
    *out_len = 0;
    if (id_bytes(d->t, id, d->skip_special_tokens, &b, &k, err)) return -1;
    d->out.len = 0;
    if (k && feed(&d->out, d->pending, &d->n_pending, b, k))
        return error_set(err, "out of memory");
    if (d->out.len) {
        *out = d->out.data;
        *out_len = d->out.len;
    }
    return 0;
}

int detokenizer_finish(Detokenizer *d, const char **out, size_t *out_len, Error *err) {
    *out = "";
    *out_len = 0;
    d->out.len = 0;
    if (finish(&d->out, &d->n_pending)) return error_set(err, "out of memory");
    if (d->out.len) {
        *out = d->out.data;
        *out_len = d->out.len;
    }
    return 0;
}

void detokenizer_free(Detokenizer *d) {
    byte_buf_free(&d->out);
    d->n_pending = 0;
}
