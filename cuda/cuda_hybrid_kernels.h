/*
 * cuda_hybrid_kernels.h - the kernels only Qwen3.5 (hybrid) models use, beside
 * the Gated DeltaNet (cuda_gated_deltanet.h): its full layers' gated
 * attention with partial RoPE, and the shared expert's gated residual.
 * Kept apart from cuda_kernels.cu so that the Qwen3 kernels stay as they
 * were verified. Conventions as cuda_kernels.h: device pointers, bf16 as raw
 * uint16_t, float32 GEMM outputs; each launcher checks its launch and
 * returns 0, or -1 with the error in err, waiting for nothing.
 */
#ifndef NANOVLLM_CUDA_HYBRID_KERNELS_H
#define NANOVLLM_CUDA_HYBRID_KERNELS_H

#include <stdint.h>

#include "cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* qkv: [n, 2 * num_heads * head_dim + 2 * num_kv_heads * head_dim] float32,
 * the fused projection of a gated full layer: per query head its query then
 * its gate (head_dim each), then the K heads, then the V heads. Per token:
 * each query and K head RMS-normed with q_norm / k_norm, then its first
 * rotary_dim dims rotated (NeoX halves of rotary_dim: pairs (i, i +
 * rotary_dim / 2)) at positions[t], the rest left as normed; queries to
 * q_out [n, num_heads, head_dim] bf16, K and V to the bf16 caches at
 * slots[t] ([slots, num_kv_heads, head_dim]). The gates stay in qkv for
 * cuda_attn_output_gate. rope: (cos, sin) pairs, [max_pos, rotary_dim / 2,
 * 2]. head_dim <= 256, rotary_dim even and <= head_dim. */
int cuda_gated_qk_norm_rope_store(uint16_t *q_out, uint16_t *k_cache, uint16_t *v_cache, const float *qkv,
                                  const float *q_norm, const float *k_norm, const float *rope,
                                  const int32_t *positions, const int32_t *slots, int n, int num_heads,
                                  int num_kv_heads, int head_dim, int rotary_dim, float eps, CudaStream stream,
                                  Error *err);

/* attn [n, num_heads * head_dim] bf16 *= sigmoid(gate), the gate of (t, h, i)
 * read from qkv as cuda_gated_qk_norm_rope_store's input (row t, offset
 * h * 2 * head_dim + head_dim + i, rows 2 * num_heads * head_dim +
 * 2 * num_kv_heads * head_dim wide); the product rounded to bf16. */
int cuda_attn_output_gate(uint16_t *attn, const float *qkv, int n, int num_heads, int num_kv_heads, int head_dim,
                          CudaStream stream, Error *err);

/* delta [n, hidden] += sigmoid(gate[t]) * shared[t] (shared [n, hidden],
 * gate [n], float32): the shared expert's output added to the experts'. */
int cuda_shared_expert_add(float *delta, const float *shared, const float *gate, int n, int hidden,
                           CudaStream stream, Error *err);

#ifdef __cplusplus
}
#endif

#endif
