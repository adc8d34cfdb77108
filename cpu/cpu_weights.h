/*
 * cpu_weights.h - where the CPU runner keeps the weight matrices.
 *
 * Decode reads every matrix once per token, so its speed is the memory
 * bandwidth of that read, and reads through 4 KiB pages are measurably
 * slower than through 2 MiB ones (TLB misses): the decode GEMV sequence of
 * Qwen3-0.6B streamed 23-24 GB/s from the checkpoint mapping and 28 GB/s
 * from a transparent-huge-page copy, on the same machine in the same run.
 * So the CPU runner "uploads" its matrices, as the CUDA runner uploads to
 * the GPU: one anonymous MADV_HUGEPAGE region, populated in parallel and
 * then filled with pread (no page faults on the mapping; ~0.5 s for 1.2 GB). Still bf16, still one copy
 * (the file's pages are not mapped in), so resident memory stays the weight
 * bytes. Where huge pages are off, or NANOVLLM_CPU_WEIGHTS=mapped, the
 * matrices are used in place from the mapping instead; a dummy model's
 * (model_weights_load_dummy) are always generated into a copy.
 */
#ifndef NANOVLLM_CPU_WEIGHTS_H
#define NANOVLLM_CPU_WEIGHTS_H

#include <stdbool.h>

#include "thread_pool.h"
#include "model/model_weights.h"

typedef struct CpuWeights {
    LayerWeights *layers;   /* the model's layers with matrices repointed */
    ExpertWeights *experts; /* likewise, the sparse layers' experts */
    Weight embed_tokens, lm_head;
    void *memory; /* the huge-page region; NULL when matrices are used in place */
    size_t size;
} CpuWeights;

int cpu_weights_init(CpuWeights *cw, const ModelWeights *model, ThreadPool *pool, Error *err);
void cpu_weights_free(CpuWeights *cw);

#endif
