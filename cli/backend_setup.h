/*
 * backend_setup.h - where the program is assembled: every command that runs
 * the model (serve, generate, bench) loads the checkpoint, chooses a backend
 * and creates its runner here, and logs what was chosen (model, device,
 * dtype, KV capacity) and how long it took. The engine itself never knows
 * which backend it drives.
 */
#ifndef NANOVLLM_BACKEND_SETUP_H
#define NANOVLLM_BACKEND_SETUP_H

#include "engine/runner.h"

int loaded_model_open(LoadedModel *m, const char *model_dir, const RunnerOptions *opts,
                      Error *err);
void loaded_model_close(LoadedModel *m);
/* The two above, for the server (api_server.h). */
extern const ModelLoader backend_model_loader;

/* The runner for opts->device: "cpu", "cuda", "null" (no computation:
 * the engine's own cost), or "auto", which takes the GPU when one is usable
 * and otherwise the CPU, writing why into note (may be NULL). */
Runner *runner_create(const ModelWeights *model, const RunnerOptions *opts, char *note,
                      size_t note_size, Error *err);

#endif
