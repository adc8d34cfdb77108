/*
 * model_setup.h - the start-up every command that runs the model shares:
 * load the checkpoint, pick and create the runner, log what was chosen
 * (model, device, dtype, KV capacity) and how long it took.
 */
#ifndef NANOVLLM_MODEL_SETUP_H
#define NANOVLLM_MODEL_SETUP_H

#include "../engine/runner.h"

typedef struct LoadedModel {
    ModelWeights weights;
    Runner *runner;
    double load_seconds; /* config + checkpoint + runner creation */
} LoadedModel;

int loaded_model_open(LoadedModel *m, const char *model_dir, const RunnerOptions *opts,
                      Error *err);
void loaded_model_close(LoadedModel *m);

#endif
