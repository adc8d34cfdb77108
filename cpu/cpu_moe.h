/*
 * cpu_moe.h - the sparse MLP of a Qwen3 MoE layer on the CPU.
 *
 * Hugging Face's Qwen3MoeSparseMoeBlock, exactly: router logits h . gate^T,
 * softmax over all experts, the k largest probabilities (ties to the lower
 * expert id), divided by their sum when norm_topk_prob, and the sum of the
 * chosen experts' down(silu(gate(h)) * up(h)) weighted by them. No shared
 * expert.
 *
 * The tokens of a step are grouped by expert, so each expert with work runs
 * one matmul per projection over all of its tokens (prefill: a GEMM per
 * expert; decode: a GEMV that reads only the k routed experts' weights, the
 * point of MoE), each parallel over weight rows on the thread pool. The
 * weighted sum then runs per token in routing order, whatever the grouping.
 * (As in a dense layer, how many rows a matmul gets picks its kernel, so a
 * token's result can differ in the last bits with the step's other tokens.)
 */
#ifndef NANOVLLM_CPU_MOE_H
#define NANOVLLM_CPU_MOE_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu_matmul.h"
#include "thread_pool.h"
#include "model/model_weights.h"

typedef struct CpuMoe CpuMoe;

/* For up to max_tokens tokens per step; mm must take max_tokens rows. */
CpuMoe *cpu_moe_create(ThreadPool *pool, CpuMatmul *mm, const ModelConfig *cfg, int max_tokens,
                       Error *err);
void cpu_moe_destroy(CpuMoe *m);

/* out[T, hidden] = the experts' weighted sum for h[T, hidden], layer L sparse. */
void cpu_moe(CpuMoe *m, float *out, const float *h, int T, const LayerWeights *L);

/* One token's routing from its router logits[num_experts]: ids[k] by
 * probability, descending (ties: lower id), and their weights. */
void moe_route(const float *logits, int num_experts, int k, bool norm_topk_prob, int32_t *ids,
               float *weights);

#endif
