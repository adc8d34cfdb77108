/*
 * unicode_props.h - what the tokenizer needs to know about each code point.
 *
 * Two small facts per code point, looked up millions of times a second by
 * the pre-tokenizer and the NFC quick check, so they live in one packed
 * table (4 bits per code point, 557 KB) built once per process from
 * utf8proc and the Unicode 9.0 age table:
 *
 *   the pre-tokenizer class: letter (\p{L}), number (\p{N}), white space
 *   (\s, i.e. White_Space), or other;
 *
 *   the NFC class: INERT (Hugging Face's NFC leaves it alone and never
 *   combines it with what came before: combining class 0, NFC-stable, not
 *   the second half of a composition), UNSAFE (NFC may change it or the
 *   text around it), or BLOCKER (not assigned in Unicode 9.0: Hugging Face
 *   treats it as an unassigned, inert character even where newer Unicode,
 *   and utf8proc, would decompose, reorder or compose it).
 */
#ifndef NANOVLLM_UNICODE_PROPS_H
#define NANOVLLM_UNICODE_PROPS_H

#include <stdint.h>

enum { CHAR_OTHER = 0, CHAR_LETTER = 1, CHAR_NUMBER = 2, CHAR_SPACE = 3 };
enum { NFC_INERT = 0, NFC_UNSAFE = 1, NFC_BLOCKER = 2 };

/* Builds the table on first use (thread-safe, ~7 ms); later calls return at once. */
void unicode_props_init(void);

extern uint8_t unicode_props_table[0x110000 / 2];

/* Both classes of cp (<= 0x10FFFF) after unicode_props_init():
 * bits 0-1 the pre-tokenizer class, bits 2-3 the NFC class. */
static inline unsigned unicode_props(uint32_t cp) {
    return (unicode_props_table[cp >> 1] >> ((cp & 1) * 4)) & 0xF;
}
static inline unsigned unicode_char_class(uint32_t cp) { return unicode_props(cp) & 3; }
static inline unsigned unicode_nfc_class(uint32_t cp) { return unicode_props(cp) >> 2; }

/* \s in the pre-tokenizer regex: Unicode's White_Space property (as
 * Oniguruma, Hugging Face's regex engine, defines \s). */
int unicode_is_white_space(uint32_t cp);

/* Rust's char::is_alphanumeric() || '_': the "word character" of the
 * single_word rule of added tokens. */
int unicode_is_word_char(uint32_t cp);

#endif
