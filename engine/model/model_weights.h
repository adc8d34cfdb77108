/*
 * model_weights.h - the Qwen3 weights, named and shaped for the forward pass.
 *
 * model_weights_load() maps the checkpoint (safetensors.h), finds every tensor
 * the config implies and checks its shape against the config. Matrices stay
 * where they are in the mapping when their dtype is one the kernels read
 * (bf16 or f32, suitably aligned): no copy, so resident memory is the
 * checkpoint itself. f16 matrices are widened to f32 (exact). Norm vectors,
 * being tiny, are always converted to f32. A tied lm_head is the embedding
 * matrix itself.
 */
#ifndef NANOVLLM_MODEL_WEIGHTS_H
#define NANOVLLM_MODEL_WEIGHTS_H

#include "model_config.h"
#include "safetensors.h"

typedef enum WeightType { WEIGHT_BF16, WEIGHT_F32 } WeightType;

/* A row-major [rows, cols] matrix; as in PyTorch's Linear, rows = out_features. */
typedef struct Weight {
    const void *data;
    WeightType type;
    int rows;
    int cols;
} Weight;

typedef struct LayerWeights {
    const float *input_norm;          /* [hidden] */
    const float *post_attention_norm; /* [hidden] */
    const float *q_norm, *k_norm;     /* [head_dim], applied per head */
    Weight q_proj;                    /* [num_heads * head_dim, hidden] */
    Weight k_proj, v_proj;            /* [num_kv_heads * head_dim, hidden] */
    Weight o_proj;                    /* [hidden, num_heads * head_dim] */
    Weight gate_proj, up_proj;        /* [intermediate, hidden] */
    Weight down_proj;                 /* [hidden, intermediate] */
} LayerWeights;

typedef struct ModelWeights {
    ModelConfig config;
    Safetensors checkpoint;
    Weight embed_tokens; /* [vocab, hidden] */
    Weight lm_head;      /* [vocab, hidden]; == embed_tokens when tied */
    const float *final_norm;
    LayerWeights *layers;
    void **owned; /* buffers converted at load time, freed with the weights */
    int num_owned;
} ModelWeights;

/* Loads DIR/config.json and the checkpoint in DIR. */
int model_weights_load(ModelWeights *w, const char *model_dir, Error *err);

/* Same with a config already parsed (tests build odd configs). */
int model_weights_load_with_config(ModelWeights *w, const ModelConfig *cfg, const char *model_dir,
                                   Error *err);

void model_weights_free(ModelWeights *w);

/* Bytes of all matrices and vectors the forward pass reads (tied counted once). */
size_t model_weights_bytes(const ModelWeights *w);

/* Bytes of one matrix as stored (bf16 or f32). */
size_t weight_bytes(const Weight *w);

/* Copies matrix w's bytes into dst. A matrix that lives in the checkpoint
 * mapping is read from its file with pread, which never faults the mapping's
 * pages in (a backend copying weights into memory of its own choosing pays
 * one read, not a page fault per 4 KiB); others are copied from memory. */
int model_weights_copy_matrix(const ModelWeights *m, const Weight *w, void *dst, Error *err);

#endif
