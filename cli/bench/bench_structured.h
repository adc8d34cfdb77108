/*
 * bench_structured.h - `nanovllm bench --structured`: what structured
 * outputs (structured/) cost over a model's full vocabulary.
 *
 * Three measurements, one table: compiling a constraint (fresh, and a hit
 * in the constraint cache), the per-token mask and accept steps of a
 * matcher walking random valid outputs, and generation throughput through
 * the engine with every row constrained against the same rows free.
 */
#ifndef NANOVLLM_BENCH_STRUCTURED_H
#define NANOVLLM_BENCH_STRUCTURED_H

#include <stdbool.h>

#include "engine/engine.h"

typedef struct StructuredBenchConfig {
    const char *model_dir; /* for tokenizer.json: the vocabulary the masks cover */
    int num_seqs;          /* rows of the generation comparison */
    int max_tokens;        /* tokens each row generates */
    int seed;              /* token walks, prompts and sampling */
    bool progress;         /* what is being measured, on stderr */
} StructuredBenchConfig;

/* Runs the three measurements on the engine's model (its tokenizer loaded
 * from model_dir) and prints the table on stdout. */
int bench_structured(Engine *e, const StructuredBenchConfig *cfg, Error *err);

#endif
