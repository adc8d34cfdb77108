/*
 * model_config.h - a Hugging Face Qwen3 config.json, as the forward pass needs it.
 *
 * Two architectures: Qwen3ForCausalLM (model_type qwen3, dense) and
 * Qwen3MoeForCausalLM (model_type qwen3_moe: a layer's MLP is a router and
 * experts unless mlp_only_layers or decoder_sparse_step keep it dense).
 * model_config_load() reads DIR/config.json (and DIR/generation_config.json for
 * extra end-of-sequence ids) with jansson, fills HF's defaults where HF has one,
 * and rejects anything the forward pass does not implement (other
 * architectures, rope scaling, sliding windows, attention biases, shared
 * experts, quantization methods other than Qwen's block FP8) with an error
 * naming the field, so an unsupported model fails at start-up instead of
 * producing wrong tokens.
 */
#ifndef NANOVLLM_MODEL_CONFIG_H
#define NANOVLLM_MODEL_CONFIG_H

#include <stdbool.h>

#include "base/error.h"

#define MODEL_MAX_EOS_IDS 8
#define MODEL_MAX_LAYERS 1024

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
    /* Mixture of experts (qwen3_moe); num_experts is 0 in a dense model. */
    int num_experts;           /* routed experts per sparse layer */
    int num_experts_per_tok;   /* k: experts each token goes to */
    int moe_intermediate_size; /* each expert's MLP width */
    bool norm_topk_prob;       /* renormalise the k routing weights to sum to 1 */
    unsigned char sparse_layer[MODEL_MAX_LAYERS]; /* 1: the layer's MLP is the experts */
    /* quantization_config {"quant_method": "fp8", "fmt": "e4m3",
     * "weight_block_size": [128, 128], "activation_scheme": "dynamic"}:
     * the layers' linear weights may be float8_e4m3fn with 128x128 block
     * scales (model/weight_format.h); every other quantization_config is
     * refused by name. */
    bool fp8_weights;
} ModelConfig;

/* Reads DIR/config.json and, when present, DIR/generation_config.json; or,
 * when DIR is a GGUF file, its metadata (gguf_model.h). */
int model_config_load(ModelConfig *cfg, const char *model_dir, Error *err);

/* Same, from a config.json text already in memory (gen_text may be NULL). */
int model_config_parse(ModelConfig *cfg, const char *config_text, const char *gen_text, Error *err);

bool model_config_is_eos(const ModelConfig *cfg, int token_id);

/* Whether layer l's MLP is the router and experts (else a dense MLP of
 * intermediate_size). */
bool model_config_layer_is_sparse(const ModelConfig *cfg, int l);

#endif
