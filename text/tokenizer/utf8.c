/*
 * utf8.c - UTF-8 decoding with maximal-subpart replacement (see utf8.h).
 *
 * The table of well-formed sequences is Unicode's Table 3-7: the second
 * byte's range depends on the first byte (E0 and F0 exclude overlongs, ED
 * excludes surrogates, F4 stops at U+10FFFF); later bytes are 80..BF.
 */
#include "utf8.h"

#include <string.h>

int utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int need;
    unsigned lo = 0x80, hi = 0xBF; /* range of the second byte */
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return -1; /* continuation byte, C0, C1 or F5..FF: never starts a character */
    }
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n) return 0;
        unsigned b = s[i];
        if (b < lo || b > hi) return -i;
        v = (v << 6) | (b & 0x3F);
        lo = 0x80;
        hi = 0xBF;
    }
    *cp = v;
    return need + 1;
}

bool utf8_is_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    uint32_t cp;
    while (i < n) {
        /* ASCII runs are the common case: skip them 8 bytes at a time. */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        int k = utf8_next(p + i, n - i, &cp);
        if (k <= 0) return false;
        i += (size_t)k;
    }
    return true;
}

size_t utf8_lossy_size(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, out = 0;
    uint32_t cp;
    while (i < n) {
        int k = utf8_next(p + i, n - i, &cp);
        if (k > 0) {
            i += (size_t)k;
            out += (size_t)k;
        } else {
            i += k < 0 ? (size_t)-k : n - i;
            out += 3;
        }
    }
    return out;
}

size_t utf8_lossy_copy(const char *s, size_t n, char *out) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0;
    uint32_t cp;
    while (i < n) {
        int k = utf8_next(p + i, n - i, &cp);
        if (k > 0) {
            memcpy(out + o, s + i, (size_t)k);
            i += (size_t)k;
            o += (size_t)k;
        } else {
            i += k < 0 ? (size_t)-k : n - i;
            memcpy(out + o, UTF8_REPLACEMENT, 3);
            o += 3;
        }
    }
    return o;
}

int utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}
