/*
 * gguf_model.h - a GGUF file's Qwen3 or Qwen3.5 model: the config from its
 * metadata, its tensors under Hugging Face's names.
 *
 * Architectures qwen3, qwen3moe, qwen35 and qwen35moe (as llama.cpp's
 * converter writes them): the ARCH.* keys fill the same ModelConfig a
 * config.json does, and anything the forward pass does not implement
 * (another architecture, rope scaling, per-layer head counts, qwen3moe
 * shared experts) is refused with the key's name. model_weights.c asks for
 * tensors by their Hugging Face names; gguf_model_find() answers with the
 * GGUF tensor ("model.layers.3.self_attn.q_proj.weight" is
 * "blk.3.attn_q.weight"; expert e of a layer is slice e of the stacked
 * "blk.N.ffn_gate_exps.weight"), its shape checked.
 */
#ifndef NANOVLLM_GGUF_MODEL_H
#define NANOVLLM_GGUF_MODEL_H

#include <stddef.h>

#include "gguf.h"
#include "model_config.h"

int model_config_from_gguf(ModelConfig *cfg, const Gguf *g, Error *err);

/* Opens path, reads its config, closes it. */
int model_config_load_gguf(ModelConfig *cfg, const char *path, Error *err);

/* One tensor (or one expert's slice of a stacked tensor) as the forward
 * pass names it. */
typedef struct GgufSlice {
    char gguf_name[128]; /* the file's tensor (for messages) */
    GgufTensorType type;
    const void *data;
    size_t nbytes;
} GgufSlice;

/* hf_name's tensor, checked to be [rows, cols] (a vector of `rows` values
 * when cols is 0). A missing tensor or another shape is an error naming both
 * names. */
int gguf_model_find(const Gguf *g, const char *hf_name, int rows, int cols, GgufSlice *out,
                    Error *err);

#endif
