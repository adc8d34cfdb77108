/*
 * unicode_nfc.c - NFC as Hugging Face computes it (see unicode_nfc.h).
 *
 * One pass finds the characters NFC could touch (NFC class UNSAFE in
 * unicode_props.h). Text before the last INERT character ahead of such a
 * character can never interact with it (an INERT character has combining
 * class 0 and never combines with what precedes it), and neither can text
 * from the next INERT or BLOCKER character on. So only that region goes
 * through utf8proc; the rest is copied, and text with no UNSAFE character
 * at all (nearly all text) is returned without a copy.
 */
#include "unicode_nfc.h"

#include <stdlib.h>
#include <utf8proc.h>

#include "unicode_props.h"
#include "utf8.h"

void nfc_scratch_free(NfcScratch *s) {
    free(s->cps);
    s->cps = NULL;
    s->cap = 0;
}

/* Appends utf8proc's NFC of s[0..n) (no BLOCKER inside) to buf. */
static int normalize_region(const char *s, size_t n, ByteBuf *buf, NfcScratch *w) {
    const utf8proc_option_t opts = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    /* Decompositions grow a region; the call reports the size it needs. */
    size_t want = n + 8;
    for (;;) {
        /* One spare entry: reencode writes a NUL after the UTF-8 it produces. */
        if (array_reserve((void **)&w->cps, &w->cap, want + 1, sizeof *w->cps)) return -1;
        utf8proc_ssize_t m = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n,
                                                w->cps, (utf8proc_ssize_t)want, opts);
        if (m < 0) return -1; /* only on invalid UTF-8, which callers never pass */
        if ((size_t)m > want) {
            want = (size_t)m;
            continue;
        }
        utf8proc_ssize_t bytes = utf8proc_reencode(w->cps, m, opts);
        if (bytes < 0) return -1;
        return byte_buf_append(buf, w->cps, (size_t)bytes);
    }
}

int unicode_nfc(const char *s, size_t n, ByteBuf *buf, NfcScratch *w, const char **out,
                size_t *out_len) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, boundary = 0, copied = 0;
    bool changed = false;
    buf->len = 0;
    while (i < n) {
        if (p[i] < 0x80) { /* ASCII is INERT */
            boundary = i++;
            continue;
        }
        int len;
        uint32_t cp = utf8_decode_valid(p + i, &len);
        unsigned cls = unicode_nfc_class(cp);
        if (cls == NFC_INERT) {
            boundary = i;
            i += (size_t)len;
            continue;
        }
        if (cls == NFC_BLOCKER) {
            i += (size_t)len;
            boundary = i;
            continue;
        }
        /* An UNSAFE character: the region runs from the last boundary to the
         * next INERT or BLOCKER character. */
        size_t end = i + (size_t)len;
        while (end < n) {
            if (p[end] < 0x80) break;
            uint32_t c = utf8_decode_valid(p + end, &len);
            if (unicode_nfc_class(c) != NFC_UNSAFE) break;
            end += (size_t)len;
        }
        if (byte_buf_append(buf, s + copied, boundary - copied) ||
            normalize_region(s + boundary, end - boundary, buf, w))
            return -1;
        changed = true;
        copied = boundary = i = end;
    }
    if (!changed) {
        *out = s;
        *out_len = n;
        return 0;
    }
    if (byte_buf_append(buf, s + copied, n - copied)) return -1;
    *out = buf->data;
    *out_len = buf->len;
    return 0;
}
