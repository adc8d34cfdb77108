/*
 * cpu_state_pool.h - where a hybrid model's recurrent state lives on the CPU.
 *
 * Qwen3.5's Gated DeltaNet layers keep, per sequence and per linear layer, a
 * conv state and a recurrent state (cpu_gated_deltanet.h gives their sizes
 * and layouts). The pool holds two kinds of units of that size, in one
 * mapping: slots, one per running sequence (RunnerSeq.state_slot), and
 * checkpoints, copies of a slot taken at a block boundary so that a prompt
 * whose prefix is cached can start from the state at that point
 * (RunnerSeq.restore / save, prefix caching for hybrid models). Unit u is
 * slot u for u < num_slots, checkpoint u - num_slots after; inside a unit,
 * linear layer after linear layer, each its conv then its recurrent state.
 */
#ifndef NANOVLLM_CPU_STATE_POOL_H
#define NANOVLLM_CPU_STATE_POOL_H

#include <stddef.h>

#include "cpu_gated_deltanet.h"
#include "base/error.h"
#include "model/model_config.h"

typedef struct CpuStatePool {
    float *memory; /* anonymous mapping, huge pages where the kernel gives them */
    size_t bytes;
    int num_slots, num_checkpoints;
    size_t conv_floats, recurrent_floats; /* per unit per linear layer */
    size_t unit_floats;
} CpuStatePool;

/* The shape of a hybrid model's Gated DeltaNet layers, as the mixer takes it. */
GdnShape cpu_state_gdn_shape(const ModelConfig *cfg);

/* Bytes of one unit (a sequence's whole state); 0 for a model without
 * linear layers. */
size_t cpu_state_unit_bytes(const ModelConfig *cfg);

int cpu_state_pool_init(CpuStatePool *p, const ModelConfig *cfg, int num_slots, int num_checkpoints,
                        Error *err);
void cpu_state_pool_free(CpuStatePool *p);

/* Linear layer `layer`'s conv state of slot `slot` (its recurrent state
 * follows it, conv_floats later). */
float *cpu_state_layer(const CpuStatePool *p, int slot, int layer);

/* The whole state of a slot copied from or to a checkpoint. */
void cpu_state_restore(CpuStatePool *p, int slot, int checkpoint);
void cpu_state_save(CpuStatePool *p, int slot, int checkpoint);

#endif
