/*
 * unicode_props.c - the per-code-point table of unicode_props.h.
 *
 * Categories come from utf8proc (Unicode 15 in Debian 12). Hugging Face's
 * regex engine is at Unicode 16 and the fixtures avoid code points assigned
 * after 14.0, so the version gap shows only on brand-new characters.
 *
 * The NFC class is derived, not stored by utf8proc, so it is computed here:
 * a code point assigned by Unicode 9.0 is INERT when its combining class is
 * 0, NFC maps it to itself, and it is not the last character of any
 * canonical composition (which covers both combining marks and starters
 * such as U+0B3E or the Hangul vowel and trailing jamo). Everything not
 * assigned by 9.0 is a BLOCKER, whatever utf8proc knows about it.
 */
#include "unicode_props.h"

#include <pthread.h>
#include <stdbool.h>
#include <utf8proc.h>

#include "unicode9_assigned.h"

uint8_t unicode_props_table[0x110000 / 2];

static pthread_once_t once = PTHREAD_ONCE_INIT;

int unicode_is_white_space(uint32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x85) return 0;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

int unicode_is_word_char(uint32_t cp) {
    if (cp == '_') return 1;
    unsigned c = unicode_char_class(cp);
    return c == CHAR_LETTER || c == CHAR_NUMBER;
}

static void set_props(uint32_t cp, unsigned v) {
    uint8_t *b = &unicode_props_table[cp >> 1];
    unsigned shift = (cp & 1) * 4;
    *b = (uint8_t)((*b & ~(0xFu << shift)) | (v << shift));
}

static unsigned char_class(uint32_t cp) {
    if (unicode_is_white_space(cp)) return CHAR_SPACE;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: return CHAR_LETTER;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO: return CHAR_NUMBER;
    default: return CHAR_OTHER;
    }
}

/* NFC class of a code point assigned by Unicode 9.0; marks the second half
 * of its composition (when it is a primary composite) as UNSAFE. */
static unsigned nfc_class(uint32_t cp) {
    utf8proc_int32_t d[8];
    utf8proc_int32_t c = (utf8proc_int32_t)cp;
    int last_bound = 0;
    utf8proc_ssize_t n = utf8proc_decompose_char(c, d, 8, UTF8PROC_DECOMPOSE, &last_bound);
    if (n < 1 || n > 8) return NFC_UNSAFE; /* cannot happen for canonical decompositions */
    bool stable = true;
    if (n > 1 || d[0] != c) {
        utf8proc_int32_t comp[8];
        for (int i = 0; i < n; i++) comp[i] = d[i];
        utf8proc_ssize_t m = utf8proc_normalize_utf32(comp, n, UTF8PROC_COMPOSE | UTF8PROC_STABLE);
        stable = m == 1 && comp[0] == c;
        /* A primary composite: the last character of its decomposition can
         * combine with what precedes it. */
        if (stable && n > 1) {
            uint32_t second = (uint32_t)d[n - 1];
            unsigned old = unicode_props(second);
            if ((old >> 2) == NFC_INERT) set_props(second, (old & 3) | (NFC_UNSAFE << 2));
        }
    }
    if (!stable || utf8proc_get_property(c)->combining_class != 0) return NFC_UNSAFE;
    return (unicode_nfc_class(cp) == NFC_UNSAFE) ? NFC_UNSAFE : NFC_INERT;
}

static void build(void) {
    /* Pass 1: pre-tokenizer classes; every code point starts as a BLOCKER. */
    for (uint32_t cp = 0; cp < 0x110000; cp++) set_props(cp, char_class(cp) | (NFC_BLOCKER << 2));
    /* Pass 2: code points of Unicode 9.0 start INERT... */
    size_t nr = sizeof UNICODE9_ASSIGNED / sizeof UNICODE9_ASSIGNED[0];
    for (size_t r = 0; r < nr; r++)
        for (uint32_t cp = UNICODE9_ASSIGNED[r][0]; cp <= UNICODE9_ASSIGNED[r][1]; cp++)
            set_props(cp, (unicode_props(cp) & 3) | (NFC_INERT << 2));
    /* ...and pass 3 finds the UNSAFE ones (a composition may mark a code
     * point it has already passed, which nfc_class() keeps). */
    for (size_t r = 0; r < nr; r++) {
        for (uint32_t cp = UNICODE9_ASSIGNED[r][0]; cp <= UNICODE9_ASSIGNED[r][1]; cp++) {
            if (cp >= 0xD800 && cp <= 0xDFFF) continue; /* surrogates never reach NFC */
            unsigned cls = nfc_class(cp);
            set_props(cp, (unicode_props(cp) & 3) | (cls << 2));
        }
    }
}

void unicode_props_init(void) { pthread_once(&once, build); }
