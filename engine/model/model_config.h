/*
 * model_config.h - a Hugging Face Qwen3 config.json, as the forward pass needs it.
 *
 * model_config_load() reads DIR/config.json (and DIR/generation_config.json for
 * extra end-of-sequence ids) with jansson, fills HF's defaults where HF has one,
 * and rejects anything the forward pass does not implement (other
 * architectures, rope scaling, sliding windows, attention biases) with an error
 * naming the field, so an unsupported model fails at start-up instead of
 * producing wrong tokens.
 */
#ifndef NANOVLLM_MODEL_CONFIG_H
#define NANOVLLM_MODEL_CONFIG_H

#include <stdbool.h>

#include "engine/base/error.h"

#define MODEL_MAX_EOS_IDS 8

typedef struct ModelConfig {
    int vocab_size;
    int hidden_size;
    int intermediate_size;
    int num_layers;
    int num_heads;    /* query heads */
    int num_kv_heads; /* key/value heads (GQA: num_heads is a multiple) */
    int head_dim;     /* config's head_dim, else hidden_size / num_heads */
    int max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    bool tie_word_embeddings;
    int bos_token_id; /* -1 when absent */
    int num_eos_ids;  /* config.json's ids, then generation_config.json's new ones */
    int eos_ids[MODEL_MAX_EOS_IDS];
    char torch_dtype[16]; /* as written in config.json ("" when absent) */
    /* generation_config.json's sampling defaults, for requests that leave a
     * field out (as vLLM does); has_* false when the file does not say. */
    bool has_temperature, has_top_p, has_top_k, has_min_p, has_repetition_penalty;
    double temperature, top_p, min_p, repetition_penalty;
    int top_k;
} ModelConfig;

/* Reads DIR/config.json and, when present, DIR/generation_config.json. */
int model_config_load(ModelConfig *cfg, const char *model_dir, Error *err);

/* Same, from a config.json text already in memory (gen_text may be NULL). */
int model_config_parse(ModelConfig *cfg, const char *config_text, const char *gen_text, Error *err);

bool model_config_is_eos(const ModelConfig *cfg, int token_id);

#endif
