/*
 * model_tokenizer.h - the tokenizer of whatever --model names: a Hugging
 * Face folder's tokenizer.json (+ tokenizer_config.json), or a GGUF file's
 * tokenizer.ggml.* tables and chat template. A tokenizer.json beside a GGUF
 * file overrides the file's own (as llama.cpp's users sometimes need for a
 * fixed chat template), and the log says so.
 */
#ifndef NANOVLLM_MODEL_TOKENIZER_H
#define NANOVLLM_MODEL_TOKENIZER_H

#include <stdbool.h>

#include "model/gguf.h"
#include "text/tokenizer/tokenizer.h"

Tokenizer *model_tokenizer_load(const char *model_path, int model_vocab_size, Error *err);

/* An open GGUF file's own tokenizer (the fuzz target's entry: no path). */
Tokenizer *model_tokenizer_from_gguf(const Gguf *g, int model_vocab_size, Error *err);

/* Whether the model has a tokenizer to load (a GGUF file always has). */
bool model_has_tokenizer(const char *model_path);

#endif
