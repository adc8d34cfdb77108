/*
 * model_weights.h - the Qwen3 weights, named and shaped for the forward pass.
 *
 * model_weights_load() maps the checkpoint (safetensors.h), finds every tensor
 * the config implies and checks its shape against the config. Matrices stay
 * where they are in the mapping when their dtype is one the kernels read
 * (bf16 or f32, suitably aligned): no copy, so resident memory is the
 * checkpoint itself. f16 matrices are widened to f32 (exact). Norm vectors,
 * being tiny, are always converted to f32. A tied lm_head is the embedding
 * matrix itself. A sparse (MoE) layer has a router and experts where a dense
 * one has gate/up/down_proj.
 *
 * model_weights_load_dummy() builds the same structure from the config
 * alone (dummy_weights.h): matrices have no data, only a generator key,
 * and a backend fills its own copy (model_weights_copy_matrix on the host,
 * a kernel on the GPU), so nothing of their size is ever held twice.
 */
#ifndef NANOVLLM_MODEL_WEIGHTS_H
#define NANOVLLM_MODEL_WEIGHTS_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf.h"
#include "model_config.h"
#include "safetensors.h"
#include "weight_format.h"

/* A row-major [rows, cols] matrix; as in PyTorch's Linear, rows = out_features. */
typedef struct Weight {
    const void *data; /* NULL in a dummy model: values come from (key, amplitude) */
    WeightType type;
    int rows;
    int cols;
    uint64_t key;    /* dummy: dummy_value(key, i, amplitude) is element i (bf16-rounded) */
    float amplitude;
    /* WEIGHT_F8_E4M3 only: the float32 block scales, fp8_scale_count(rows,
     * cols) of them, row-major by 128-row then 128-column tile
     * (model/weight_format.h); NULL for every other type. */
    const float *scales;
} Weight;

/* One expert of a sparse layer: an MLP of moe_intermediate_size. */
typedef struct ExpertWeights {
    Weight gate_proj, up_proj; /* [moe_intermediate, hidden] */
    Weight down_proj;          /* [hidden, moe_intermediate] */
} ExpertWeights;

/* A Gated DeltaNet layer (Qwen3.5's linear attention; model_config.h's
 * Hk, Hv, k_dim, v_dim, conv_kernel; key_dim = Hk*k_dim, value_dim = Hv*v_dim). */
typedef struct LinearAttnWeights {
    Weight in_proj_qkv;    /* [2*key_dim + value_dim, hidden]: q, k, v */
    Weight in_proj_z;      /* [value_dim, hidden]: the output gate */
    Weight in_proj_b;      /* [Hv, hidden]: beta = sigmoid(b) */
    Weight in_proj_a;      /* [Hv, hidden]: decay input */
    Weight out_proj;       /* [hidden, value_dim] */
    const float *conv;     /* [conv_dim, conv_kernel] (conv1d.weight [conv_dim, 1, K]) */
    const float *A_log, *dt_bias; /* [Hv] */
    const float *norm;     /* [v_dim], used as is */
} LinearAttnWeights;

/* The shared expert of a MoE layer that has one. */
typedef struct SharedExpertWeights {
    Weight gate_proj, up_proj; /* [shared_expert_intermediate, hidden] */
    Weight down_proj;          /* [hidden, shared_expert_intermediate] */
    Weight gate;               /* [1, hidden]: sigmoid(gate . x) scales its output */
} SharedExpertWeights;

typedef struct LayerWeights {
    bool linear;                      /* a Gated DeltaNet layer: `linear_attn` instead of q..o */
    const float *input_norm;          /* [hidden] */
    const float *post_attention_norm; /* [hidden] */
    const float *q_norm, *k_norm;     /* [head_dim], applied per head */
    Weight q_proj;                    /* [num_heads * head_dim, hidden]; with attn_output_gate
                                         [num_heads * 2 * head_dim]: per head, query then gate */
    Weight k_proj, v_proj;            /* [num_kv_heads * head_dim, hidden] */
    Weight o_proj;                    /* [hidden, num_heads * head_dim] */
    Weight gate_proj, up_proj;        /* dense: [intermediate, hidden] */
    Weight down_proj;                 /* dense: [hidden, intermediate] */
    Weight router;                    /* sparse: [num_experts, hidden] (mlp.gate) */
    ExpertWeights *experts;           /* sparse: [num_experts]; NULL in a dense layer */
    SharedExpertWeights shared;       /* sparse with shared_expert_intermediate_size only */
    LinearAttnWeights linear_attn;    /* linear layers only */
} LayerWeights;

typedef struct ModelWeights {
    ModelConfig config;
    Safetensors checkpoint;
    Gguf gguf; /* a GGUF file's mapping (gguf.map NULL for a Hugging Face folder) */
    Weight embed_tokens; /* [vocab, hidden] */
    Weight lm_head;      /* [vocab, hidden]; == embed_tokens when tied */
    const float *final_norm;
    LayerWeights *layers;
    ExpertWeights *experts; /* every sparse layer's experts, one allocation */
    bool dummy;             /* random from the config: no checkpoint (see above) */
    uint64_t dummy_seed;
    void **owned; /* buffers converted at load time, freed with the weights */
    int num_owned;
} ModelWeights;

/* What one decode token costs: parameters in all and those a token actually
 * goes through (attention, its k routed experts, the router, the lm_head and
 * one embedding row), and the bytes of weights read for it. */
typedef struct ModelSize {
    double total_params, active_params;
    double bytes_per_token;
} ModelSize;

/* Loads DIR/config.json and the checkpoint in DIR, or a GGUF file (gguf_model.h). */
int model_weights_load(ModelWeights *w, const char *model_dir, Error *err);

/* Same with a config already parsed (tests build odd configs). */
int model_weights_load_with_config(ModelWeights *w, const ModelConfig *cfg, const char *model_dir,
                                   Error *err);

/* Random bf16 weights of cfg's shapes, deterministic in seed (see above). */
int model_weights_load_dummy(ModelWeights *w, const ModelConfig *cfg, uint64_t seed, Error *err);

void model_weights_free(ModelWeights *w);

/* Bytes of all matrices and vectors the forward pass reads (tied counted once). */
size_t model_weights_bytes(const ModelWeights *w);

ModelSize model_weights_size(const ModelWeights *w);

/* Every matrix of a layer (attention, then the dense MLP or the router and
 * the experts), written to out (room for model_layer_max_matrices); returns
 * how many. */
int model_layer_matrices(const ModelConfig *c, LayerWeights *L, Weight **out);
int model_layer_max_matrices(const ModelConfig *cfg);

/* Whether lm_head is the embedding matrix itself. */
bool model_weights_tied(const ModelWeights *w);

/* "196 q4_k, 57 q6_k": how many matrices each encoding holds (for the log). */
void model_weights_encodings(const ModelWeights *w, char *out, size_t size);

/* Bytes of one matrix as stored (weight_row_bytes per row). */
size_t weight_bytes(const Weight *w);

/* Copies matrix w's bytes into dst. A matrix that lives in the checkpoint
 * mapping is read from its file with pread, which never faults the mapping's
 * pages in (a backend copying weights into memory of its own choosing pays
 * one read, not a page fault per 4 KiB); others are copied from memory; a
 * dummy one is generated. */
int model_weights_copy_matrix(const ModelWeights *m, const Weight *w, void *dst, Error *err);

#endif
