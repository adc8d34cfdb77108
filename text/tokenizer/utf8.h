/*
 * utf8.h - UTF-8 decoding with Hugging Face's (and Python's, WHATWG's) error rule.
 *
 * Text reaches the tokenizer as bytes from HTTP clients, and token bytes
 * leave it in pieces that may split a character. Both directions use one
 * rule for bad input: every maximal subpart of an ill-formed sequence
 * becomes one U+FFFD (Unicode's "substitution of maximal subparts", the
 * rule of Rust's String::from_utf8_lossy, which Hugging Face uses, and of
 * Python's bytes.decode('utf-8', 'replace')).
 */
#ifndef NANOVLLM_UTF8_H
#define NANOVLLM_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UTF8_REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */

/* Looks at the sequence starting at s[0] (n >= 1 bytes available):
 *   > 0  a well-formed character of that many bytes (*cp set);
 *   < 0  an ill-formed maximal subpart of -result bytes (one U+FFFD);
 *   0    a well-formed prefix that runs to the end of s: more bytes
 *        could complete it (a streaming caller waits; at the end of the
 *        input it is one U+FFFD). */
int utf8_next(const unsigned char *s, size_t n, uint32_t *cp);

/* True when s[0..n) is well-formed UTF-8 (U+0000 allowed). */
bool utf8_is_valid(const char *s, size_t n);

/* Bytes needed to write s[0..n) with each maximal ill-formed subpart
 * replaced by U+FFFD (a final incomplete sequence counts as one). */
size_t utf8_lossy_size(const char *s, size_t n);

/* Writes that text to out (utf8_lossy_size(s, n) bytes); returns the
 * number written. */
size_t utf8_lossy_copy(const char *s, size_t n, char *out);

/* Writes cp (<= 0x10FFFF) as UTF-8; returns 1..4. */
int utf8_encode(uint32_t cp, char *out);

/* Decodes one character of text known to be well-formed. */
static inline uint32_t utf8_decode_valid(const unsigned char *s, int *len) {
    unsigned c = s[0];
    if (c < 0x80) {
        *len = 1;
        return c;
    }
    if (c < 0xE0) {
        *len = 2;
        return ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu);
    }
    if (c < 0xF0) {
        *len = 3;
        return ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
    }
    *len = 4;
    return ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
}

#endif
