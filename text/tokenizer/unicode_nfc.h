/*
 * unicode_nfc.h - Hugging Face's NFC normalizer: NFC with Unicode 9.0 data.
 *
 * Hugging Face tokenizers normalizes with the crate
 * unicode-normalization-alignments, whose tables are Unicode 9.0. For text
 * of characters assigned by 9.0 that is exactly today's NFC (Unicode's
 * stability policy), and utf8proc computes it. A character assigned later
 * is, to Hugging Face, unassigned: combining class 0, no decomposition, no
 * composition. So it is copied as is and cuts the text into pieces that are
 * normalized separately, which gives Hugging Face's result where utf8proc
 * alone would reorder or compose (the fixtures' hf_nfc_unicode9 rows).
 */
#ifndef NANOVLLM_UNICODE_NFC_H
#define NANOVLLM_UNICODE_NFC_H

#include <stddef.h>
#include <stdint.h>

#include "base/byte_buf.h"

/* Reusable work memory for unicode_nfc (one per thread). */
typedef struct NfcScratch {
    int32_t *cps;
    size_t cap;
} NfcScratch;

/* Normalizes well-formed UTF-8 s[0..n). Most text is already in NFC: then
 * *out points at s itself and nothing is copied. Otherwise the normalized
 * text is written to buf (cleared first) and *out points into it. Returns
 * 0, or -1 when out of memory. unicode_props_init() must have run. */
int unicode_nfc(const char *s, size_t n, ByteBuf *buf, NfcScratch *scratch, const char **out,
                size_t *out_len);

void nfc_scratch_free(NfcScratch *s);

#endif
