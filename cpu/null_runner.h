/*
 * null_runner.h - a runner that computes nothing (device "null").
 *
 * It returns a fixed, position-dependent token for every sequence at once,
 * so the engine's own cost per step (scheduling, block management, building
 * the batch, delivering tokens) can be measured apart from the model:
 * `nanovllm bench --device null`. It holds as many KV blocks as the CPU
 * runner would for the same --kv-cache-memory, but allocates none.
 */
#ifndef NANOVLLM_NULL_RUNNER_H
#define NANOVLLM_NULL_RUNNER_H

#include "engine/runner.h"

Runner *null_runner_create(const ModelWeights *model, const RunnerOptions *opts, Error *err);

#endif
