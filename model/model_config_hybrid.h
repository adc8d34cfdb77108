/*
 * model_config_hybrid.h - the Qwen3.5 (hybrid) part of config.json, and the
 * field readers model_config.c shares with it. Internal to model/.
 */
#ifndef NANOVLLM_MODEL_CONFIG_HYBRID_H
#define NANOVLLM_MODEL_CONFIG_HYBRID_H

#include <jansson.h>
#include <stdbool.h>

#include "model_config.h"

/* An integer (double) field into *out, range-checked; a missing field is an
 * error when required, else *out keeps its default. */
int config_read_int(json_t *obj, const char *key, bool required, long long lo, long long hi, int *out,
                    Error *err);
int config_read_number(json_t *obj, const char *key, double lo, double hi, double *out, Error *err);

/* layer_types, the linear attention shapes, rope_parameters and
 * attn_output_gate of a Qwen3.5 text config (text: the text_config object
 * of a multimodal folder, else the root). */
int model_config_read_hybrid(ModelConfig *cfg, json_t *text, Error *err);

/* Counts linear_layer[] into num_linear_layers; -1 (naming `source`, where
 * the layer layout came from) when no layer is full attention: the paged
 * KV cache the engine schedules by would hold nothing. */
int model_config_count_linear_layers(ModelConfig *cfg, const char *source, Error *err);

#endif
