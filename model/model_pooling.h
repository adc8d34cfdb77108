/*
 * model_pooling.h - how an embedding model turns hidden states into one
 * vector, read from its folder as sentence-transformers configures it:
 * modules.json names the modules in order (Transformer, Pooling,
 * Normalize, ...), the Pooling module's folder holds config.json with one
 * pooling_mode_* set true. Here in model/ because it is a property of the
 * checkpoint, read beside config.json; the engine and the backends use the
 * mode, the server the normalisation.
 */
#ifndef NANOVLLM_MODEL_POOLING_H
#define NANOVLLM_MODEL_POOLING_H

#include <stdbool.h>

#include "gguf.h"
#include "base/error.h"

typedef enum PoolingMode {
    POOLING_NONE, /* a generation request (or model) */
    POOLING_LAST, /* the final-normed hidden state of the last token (Qwen3-Embedding) */
    POOLING_MEAN, /* the mean over every token of the input */
    POOLING_CLS,  /* the first token's */
} PoolingMode;

typedef struct ModelPooling {
    PoolingMode mode;
    bool normalize;        /* a Normalize module follows: L2-normalised vectors */
    bool from_folder;      /* the model says so: modules.json named a Pooling module, or a
                            * GGUF file's pooling_type */
} ModelPooling;

/* Reads DIR/modules.json (absent: mode POOLING_NONE, from_folder false) and
 * the Pooling module's config.json. A mode this code does not implement
 * (max_tokens, weightedmean_tokens, ...) set true is an error naming its
 * key, as is a Pooling module without one. */
int model_pooling_load(ModelPooling *p, const char *model_dir, Error *err);

/* A GGUF file's `{general.architecture}.pooling_type` (what llama.cpp's
 * converter writes from the same modules.json: 1 mean, 2 cls, 3 last; 0 or
 * absent: none), into *p as model_pooling_load would read the folder, the
 * vectors L2-normalised (the Normalize module GGUF has no key for; what
 * llama-server and vLLM do by default). 4 (rank: a reranker) is refused. */
int model_pooling_from_gguf(ModelPooling *p, const Gguf *g, Error *err);

const char *pooling_mode_name(PoolingMode m); /* "none", "last", "mean", "cls" */

#endif
