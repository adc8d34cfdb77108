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
 *
 * FP8 checkpoints (model/weight_format.h): a stack whose parts are all
 * float8_e4m3fn stays FP8 on the device, one byte a weight, with float32
 * scales per row and 128-column tile (cuda_fp8_plan.h says why per row);
 * the kernels read it as such (cuda_matmul.h, the MoE's grouped GEMM). A
 * stack that mixes FP8 and bf16 parts (no Qwen checkpoint does) is
 * dequantized to bf16 at upload, logged: one kernel path per matrix. The
 * embeddings and lm_head are bf16 in every FP8 checkpoint.
 */
#ifndef NANOVLLM_CUDA_WEIGHTS_H
#define NANOVLLM_CUDA_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "cuda_kernels.h"
#include "model/model_weights.h"

/* Matrices are CudaMatrix (cuda_kernels.h): bf16, or FP8 with per-row scales. */
typedef struct CudaLayerWeights {
    float *input_norm, *post_attention_norm; /* [hidden] */
    float *q_norm, *k_norm;                  /* [head_dim] */
    CudaMatrix qkv;     /* [(num_heads + 2 * num_kv_heads) * head_dim, hidden] */
    CudaMatrix o_proj;  /* [hidden, num_heads * head_dim] */
    CudaMatrix gate_up; /* [2 * intermediate, hidden]: gate rows, then up rows */
    CudaMatrix down;    /* [hidden, intermediate] */
    /* sparse layers (data NULL otherwise) */
    CudaMatrix router;          /* [experts, hidden] */
    CudaMatrix experts_gate_up; /* [experts][2 * moe_intermediate, hidden]: gate rows, then up */
    CudaMatrix experts_down;    /* [experts][hidden, moe_intermediate] */
    /* Qwen3.5 (hybrid). A full layer's qkv has q_proj's 2 * num_heads *
     * head_dim rows with attn_output_gate (per head: query, then gate). A
     * linear (Gated DeltaNet) layer has no qkv, o_proj or q/k norms, but: */
    bool linear;
    CudaMatrix lin_qkv, lin_z, lin_a, lin_b; /* in_proj_*: [conv_dim | value_dim | Hv | Hv, hidden] */
    CudaMatrix lin_out;                      /* out_proj [hidden, value_dim] */
    float *conv, *A_log, *dt_bias, *lin_norm; /* float32 as LinearAttnWeights */
    /* a sparse layer's shared expert (data NULL without one) */
    CudaMatrix shared_gate_up; /* [2 * shared_intermediate, hidden]: gate rows, then up */
    CudaMatrix shared_down;    /* [hidden, shared_intermediate] */
    CudaMatrix shared_gate;    /* [1, hidden] */
} CudaLayerWeights;

typedef struct CudaWeights {
    void *memory; /* the one device allocation */
    size_t bytes;
    uint16_t *embed;   /* [vocab, hidden] */
    uint16_t *lm_head; /* [vocab, hidden]; == embed when tied */
    float *final_norm; /* [hidden] */
    CudaLayerWeights *layers;
    int num_layers;
    int fp8_stacks;         /* stacked matrices kept FP8 on the device */
    int fp8_tiled_stacks;   /* of those, ones with tile scales (CudaMatrix.tile_scales) */
    int fp8_widest;         /* the widest input of those */
    int dequantized_stacks; /* stacks with FP8 parts uploaded as bf16 (mixed) */
    size_t fp8_bytes;       /* FP8 weight bytes and their scales */
    size_t fp8_largest;     /* values of the largest FP8 matrix cuda_matmul multiplies (not experts) */
} CudaWeights;

int cuda_weights_upload(CudaWeights *w, const ModelWeights *m, Error *err);
void cuda_weights_free(CudaWeights *w);

#ifdef __cplusplus
}
#endif

#endif
