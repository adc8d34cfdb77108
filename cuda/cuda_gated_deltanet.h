/*
 * cuda_gated_deltanet.h - the token mixer of Qwen3.5's linear-attention
 * layers (Gated DeltaNet) on the GPU, between the projections: the CUDA
 * twin of cpu/cpu_gated_deltanet.h, with the same inputs, state layouts,
 * `fresh` semantics and outputs, and the same equations (HF's
 * modeling_qwen3_5.py; per token t and value head, key head j / (Hv/Hk)):
 *
 *   conv[t][c] = silu(sum_j W[c][j] * mixed[t-(K-1)+j][c]); split q, k, v
 *   q = q / sqrt(|q|^2 + 1e-6) / sqrt(dk); k = k / sqrt(|k|^2 + 1e-6)
 *   beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias)
 *   S = exp(g) S; delta = beta (v - k^T S); S += k delta^T; o = q^T S
 *   y = o / sqrt(mean(o^2) + eps) * norm_weight * silu(z)
 *
 * Data types, following the runner's (cuda_kernels.h: GEMM outputs float32,
 * GEMM inputs bf16): qkv, z, a and b are the in_proj products as cuda_matmul
 * writes them, float32; out is bf16 (raw uint16_t bits, cuda_bf16.h), the
 * x of the out_proj cuda_matmul; the states, the weights and all arithmetic
 * are float32. So the one rounding beyond float32's is out's, to bf16.
 *
 * The division of work, the device-side sequence array and the state pool's
 * layout (the CPU runner's: slot-major, then linear layer, then conv +
 * recurrent floats) are cuda_gdn_plan.h's. The runner's linear layers call it
 * (cuda_runner_hybrid.cu).
 */
#ifndef NANOVLLM_CUDA_GATED_DELTANET_H
#define NANOVLLM_CUDA_GATED_DELTANET_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_gdn_plan.h"
#include "cuda_kernels.h"
#include "base/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One layer's weights on the device, float32 (as GdnLayerWeights). */
typedef struct CudaGdnLayer {
    const float *conv_weight;     /* [conv_dim, K] */
    const float *A_log, *dt_bias; /* [Hv] */
    const float *norm_weight;     /* [dv], used as is (not 1 + w) */
} CudaGdnLayer;

/* The state pool as one layer sees it: slot s's conv state at
 * layer_base + s * slot_floats ([K-1][conv_dim], oldest raw row first), its
 * recurrent state right after ([Hv][dk][dv]); cuda_gdn_plan.h. */
typedef struct CudaGdnStates {
    float *layer_base;
    size_t slot_floats;
} CudaGdnStates;

/* 0 if the kernels take this shape, else -1 with the reason in err. */
int cuda_gdn_check_shape(const CudaGdnShape *s, Error *err);

/* seqs: num_seqs CudaGdnSeq in device memory (rows of different sequences
 * must not overlap, nor their slots); max_rows: the most rows any of them
 * has (host-side: from GDN_CHUNK_MIN_ROWS on the chunked kernels run,
 * cuda_gdn_chunk.h, when the head's shared memory fits the GPU). qkv [rows, conv_dim] float32 (in_proj_qkv's output;
 * overwritten as scratch: the conv's output, and in a chunked call the
 * sequences' v columns then hold their outputs before the norm),
 * z [rows, Hv*dv], a and b [rows, Hv] float32; out [rows, Hv*dv] bf16: each
 * sequence's rows of out ready for out_proj, its states advanced past them.
 * Rows of no sequence are left alone; a sequence of 0 rows changes nothing
 * unless fresh (then its states are zeroed), so a graph captured for
 * num_seqs sequences serves fewer with the rest given 0 rows. Two kernels
 * on `stream` (three when chunked), launch errors checked, nothing waited for. */
int cuda_gdn_forward(const CudaGdnShape *s, const CudaGdnLayer *w, CudaGdnStates states, const CudaGdnSeq *seqs,
                     int num_seqs, int max_rows, float *qkv, const float *z, const float *a, const float *b,
                     uint16_t *out, CudaStream stream, Error *err);

/* Calls whose longest sequence has at least this many rows take the
 * chunked kernels (default GDN_CHUNK_MIN_ROWS; tests: 1 chunks every call,
 * INT_MAX none). */
void cuda_gdn_set_chunk_min_rows(int rows);

#ifdef __cplusplus
}
#endif

#endif
