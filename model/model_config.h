/*
 * model_config.h - a Hugging Face Qwen3 config.json, as the forward pass needs it.
 *
 * Two families. Qwen3: Qwen3ForCausalLM (model_type qwen3, dense) and
 * Qwen3MoeForCausalLM (model_type qwen3_moe: a layer's MLP is a router and
 * experts unless mlp_only_layers or decoder_sparse_step keep it dense).
 * Qwen3.5 / 3.6 (model_type qwen3_5, qwen3_5_moe and their *_text forms,
 * model_config_hybrid.c): hybrid layers, three Gated DeltaNet linear
 * attention layers to one gated full attention layer, partial RoPE,
 * zero-centred norms, a shared expert beside the routed ones; the
 * multimodal folders' text_config is read and their vision tower ignored.
 * model_config_load() reads DIR/config.json (and DIR/generation_config.json for
 * extra end-of-sequence ids) with jansson, fills HF's defaults where HF has one,
 * and rejects anything the forward pass does not implement (other
 * architectures, rope scaling, sliding windows, attention biases,
 * quantization methods other than Qwen's block FP8) with an error
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
    /* A shared expert beside the routed ones (Qwen3.5 MoE, Qwen2-MoE style):
     * sigmoid(shared_expert_gate . x) * MLP of this width; 0 = none. */
    int shared_expert_intermediate_size;

    /* Qwen3.5 (hybrid): rotary_dim = head_dim * partial_rotary_factor (the
     * rest of each head passes unrotated; head_dim for Qwen3); q_proj holds
     * a gate per query head (attn_output_gate: query then gate, head_dim
     * each) that scales the attention output by its sigmoid; the model's
     * RMSNorm weights are zero-centred (x * (1 + w)), which the loader
     * folds in (model_weights.h), so the forward pass sees plain weights. */
    bool hybrid;
    int rotary_dim;
    bool attn_output_gate;
    bool multimodal; /* tensors under model.language_model. (a *ForConditionalGeneration folder) */
    /* Gated DeltaNet layers (linear_layer[l] = 1): Hk key/query heads and
     * Hv value heads of k_dim / v_dim, a causal conv of conv_kernel taps. */
    unsigned char linear_layer[MODEL_MAX_LAYERS];
    int num_linear_layers;
    int linear_num_k_heads, linear_num_v_heads, linear_k_dim, linear_v_dim, linear_conv_kernel;
    /* Value head v reads key head v % Hk (llama.cpp's GGUF order) instead of
     * v / (Hv / Hk) (Hugging Face's); the tensors of a layer agree with it. */
    bool linear_value_heads_tiled;
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

/* The dims of a head RoPE turns: rotary_dim, or all of them where a config
 * built elsewhere (a GGUF file's, a test's) leaves it 0. */
int model_config_rotary_dim(const ModelConfig *cfg);

/* Whether layer l is a Gated DeltaNet (linear attention) layer. */
bool model_config_layer_is_linear(const ModelConfig *cfg, int l);

/* A linear layer's widths: q and k are key_dim = Hk * k_dim each, v is
 * value_dim = Hv * v_dim; the conv runs over all of them (conv_dim). */
int model_config_linear_key_dim(const ModelConfig *cfg);
int model_config_linear_value_dim(const ModelConfig *cfg);
int model_config_linear_conv_dim(const ModelConfig *cfg);

#endif
