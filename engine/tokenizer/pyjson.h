/*
 * pyjson.h - JSON written the way Python's json.dumps writes it.
 *
 * Chat templates serialise tools and tool-call arguments with `tojson`,
 * which transformers defines as json.dumps(x, ensure_ascii=False): ", " and
 * ": " separators, keys in their input order, non-ASCII written raw, only
 * '"', '\' and control characters escaped, and floats as Python's repr()
 * writes them (1.0, 1e-07, 1e+16). The prompt must be byte-identical to
 * what Hugging Face renders, so jansson's own writer will not do.
 */
#ifndef NANOVLLM_PYJSON_H
#define NANOVLLM_PYJSON_H

#include <jansson.h>

#include "engine/base/byte_buf.h"

/* Appends json.dumps(v, ensure_ascii=False) to out; -1 when out of memory. */
int pyjson_dump(const json_t *v, ByteBuf *out);

/* Appends Python's repr() of a float. */
int pyjson_float(double x, ByteBuf *out);

#endif
