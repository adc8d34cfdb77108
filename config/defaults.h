/*
 * defaults.h - nanovllm's default settings in one place.
 *
 * Values follow nano-vllm and vLLM where they have one; the CPU ones are
 * sized for a small host (the CPU runner's scratch grows with the token
 * budget, and untouched KV pages cost nothing).
 */
#ifndef NANOVLLM_DEFAULTS_H
#define NANOVLLM_DEFAULTS_H

#define DEFAULT_BLOCK_SIZE 256 /* nano-vllm's kvcache_block_size */
#define MIN_BLOCK_SIZE 16
#define MAX_BLOCK_SIZE 256
#define DEFAULT_KV_CACHE_BYTES (4ull << 30) /* CPU KV budget, as vLLM's VLLM_CPU_KVCACHE_SPACE */
#define DEFAULT_GPU_MEMORY_UTILIZATION 0.9
#define DEFAULT_MAX_NUM_SEQS 256
#define DEFAULT_MAX_NUM_BATCHED_TOKENS 2048
#define DEFAULT_MAX_TOKENS 16 /* generate: completion length when --max-tokens is absent */

#endif
