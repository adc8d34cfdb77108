/*
 * cuda_weights.h - the model's weights in GPU memory, laid out for the
 * CUDA forward pass.
 *
 * Uploaded once at start-up into one allocation: every matrix as bf16 (f32
 * and f16 checkpoints are rounded on the way), norm vectors as float32. The
 * projections that read the same input are stacked so that each is one
 * GEMM: q, k and v into qkv, gate and up into gate_up. A tied lm_head is the
 * embedding matrix itself. A sparse layer's experts are stacked the same
 * way, expert after expert, so an expert's matrix is a fixed stride away
 * (cuda_moe.h). A dummy model's matrices are generated in place on the GPU
 * (dummy_weights.h): they never exist on the host.
 */
#ifndef NANOVLLM_CUDA_WEIGHTS_H
#define NANOVLLM_CUDA_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "model/model_weights.h"

typedef struct CudaLayerWeights {
    float *input_norm, *post_attention_norm; /* [hidden] */
    float *q_norm, *k_norm;                  /* [head_dim] */
    uint16_t *qkv;     /* [(num_heads + 2 * num_kv_heads) * head_dim, hidden] */
    uint16_t *o_proj;  /* [hidden, num_heads * head_dim] */
    uint16_t *gate_up; /* [2 * intermediate, hidden]: gate rows, then up rows */
    uint16_t *down;    /* [hidden, intermediate] */
    /* sparse layers (NULL otherwise) */
    uint16_t *router;          /* [experts, hidden] */
    uint16_t *experts_gate_up; /* [experts][2 * moe_intermediate, hidden]: gate rows, then up */
    uint16_t *experts_down;    /* [experts][hidden, moe_intermediate] */
} CudaLayerWeights;

typedef struct CudaWeights {
    void *memory; /* the one device allocation */
    size_t bytes;
    uint16_t *embed;   /* [vocab, hidden] */
    uint16_t *lm_head; /* [vocab, hidden]; == embed when tied */
    float *final_norm; /* [hidden] */
    CudaLayerWeights *layers;
    int num_layers;
} CudaWeights;

int cuda_weights_upload(CudaWeights *w, const ModelWeights *m, Error *err);
void cuda_weights_free(CudaWeights *w);

#ifdef __cplusplus
}
#endif

#endif
