/*
 * cuda_variants.h - run-time choice between a CUDA kernel and the one it
 * replaced, for A/B timings on the same build (scripts/gpu_ab.sh).
 *
 * NANOVLLM_CUDA_LEGACY is a comma-separated list of parts that keep their
 * previous kernels: "attention" (decode attention: one lane per key and a
 * separate split merge), "kernels" (the row kernels: embedding, RMSNorm, q/k
 * norm + RoPE + store, SiLU x up), "sampler" (one thread block per row),
 * "gemv" (cuBLAS for the few-row projections too; FP8 matrices then
 * dequantized to bf16 for it at every batch), "prefetch" (decode
 * attention without the next pass's loads in flight), "gdn" (Qwen3.5's
 * Gated DeltaNet row by row in prompts too, no chunked kernel), "prefill"
 * (prompt attention on the WMMA kernel instead of the flash one), "moe" (the
 * grouped expert GEMM at every batch, no expert gemvs), "fuse" (steps of a
 * few rows launch the residual add + RMSNorm and SiLU x up on their own, not
 * inside the gemvs, the experts' SiLU x up too; "gemv" implies it), "fp8gemm" (FP8 prompt steps
 * dequantize to bf16 for cuBLAS instead of cuBLASLt's FP8 x FP8 GEMM),
 * "pdl" (the gemvs launched plainly, not as programmatic dependents of the
 * kernel before them), "fp8decode" (an fp8 KV cache's decode attention on
 * FMAs, not on the tensor cores), "bf16decode" (the same for a bf16 cache
 * with three or more query heads a KV head).
 * Unset, every part runs
 * its current kernel. With an fp8 KV cache (--kv-cache-dtype fp8) "prefetch"
 * changes nothing (its decode kernel never prefetches) and "attention" is ignored (logged)
 * and "kernels" keeps the cache store on the vector kernel: neither previous
 * kernel reads or writes fp8. Read once per process.
 */
#ifndef NANOVLLM_CUDA_VARIANTS_H
#define NANOVLLM_CUDA_VARIANTS_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Whether `part` ("attention", "kernels", "sampler", "gemv", "gdn", "prefill",
 * "prefetch", "moe", "fuse", "fp8gemm", "pdl", "fp8decode", "bf16decode") is
 * listed in NANOVLLM_CUDA_LEGACY. */
bool cuda_variant_legacy(const char *part);

#ifdef __cplusplus
}
#endif

#endif
