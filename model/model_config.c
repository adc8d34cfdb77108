/*
 * model_config.c - Hugging Face config.json -> ModelConfig (see model_config.h).
 *
 * Defaults are those of transformers' Qwen3Config, so a config.json that
 * leaves a field out means what it means to Hugging Face.
 */
#include "model_config.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_model.h"
#include "model_config_hybrid.h"
#include "weight_format.h"

/* Reads an integer field into *out. A missing field is an error when
 * required, else *out keeps its default. Bounds keep every size product in
 * the forward pass far from overflow. */
int config_read_int(json_t *root, const char *key, bool required, long long lo, long long hi,
                    int *out, Error *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required) return error_set(err, "config.json: missing required field '%s'", key);
        return 0;
    }
    if (!json_is_integer(v))
        return error_set(err, "config.json: field '%s' must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return error_set(err, "config.json: field '%s' = %lld is out of range [%lld, %lld]", key, x,
                         lo, hi);
    *out = (int)x;
    return 0;
}

int config_read_number(json_t *root, const char *key, double lo, double hi, double *out,
                       Error *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return error_set(err, "config.json: field '%s' must be a number", key);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi)
        return error_set(err, "config.json: field '%s' = %g is out of range [%g, %g]", key, x, lo,
                         hi);
    *out = x;
    return 0;
}

static int add_eos(ModelConfig *cfg, long long id, const char *file, Error *err) {
    if (id < 0 || id >= cfg->vocab_size)
        return error_set(err, "%s: eos_token_id %lld is outside the vocabulary (size %d)", file, id,
                         cfg->vocab_size);
    for (int i = 0; i < cfg->num_eos_ids; i++)
        if (cfg->eos_ids[i] == id) return 0;
    if (cfg->num_eos_ids == MODEL_MAX_EOS_IDS)
        return error_set(err, "%s: more than %d eos_token_id values", file, MODEL_MAX_EOS_IDS);
    cfg->eos_ids[cfg->num_eos_ids++] = (int)id;
    return 0;
}

/* eos_token_id may be absent, null, an integer, or a list of integers. */
static int read_eos(ModelConfig *cfg, json_t *root, const char *file, Error *err) {
    json_t *v = json_object_get(root, "eos_token_id");
    if (!v || json_is_null(v)) return 0;
    if (json_is_integer(v)) return add_eos(cfg, json_integer_value(v), file, err);
    if (!json_is_array(v))
        return error_set(err, "%s: field 'eos_token_id' must be an integer or a list of integers",
                         file);
    size_t i;
    json_t *item;
    json_array_foreach(v, i, item) {
        if (!json_is_integer(item))
            return error_set(err, "%s: field 'eos_token_id' must be an integer or a list of integers",
                             file);
        if (add_eos(cfg, json_integer_value(item), file, err)) return -1;
    }
    return 0;
}

/* The families config.json may name: model_type, the architecture class
 * transformers builds for it, and whether it is a mixture of experts. The
 * multimodal Qwen3.5 classes keep the text model's fields under text_config. */
typedef struct Family {
    const char *model_type, *architecture;
    bool moe, hybrid, multimodal;
} Family;

static const Family FAMILIES[] = {
    {"qwen3", "Qwen3ForCausalLM", false, false, false},
    {"qwen3_moe", "Qwen3MoeForCausalLM", true, false, false},
    {"qwen3_5", "Qwen3_5ForConditionalGeneration", false, true, true},
    {"qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration", true, true, true},
    {"qwen3_5_text", "Qwen3_5ForCausalLM", false, true, false},
    {"qwen3_5_moe_text", "Qwen3_5MoeForCausalLM", true, true, false},
};

/* model_type and architectures must name one family and agree. */
static const Family *check_architecture(json_t *root, Error *err) {
    json_t *type = json_object_get(root, "model_type");
    if (!type) {
        error_set(err, "config.json: missing required field 'model_type'");
        return NULL;
    }
    const char *name = json_is_string(type) ? json_string_value(type) : NULL;
    const Family *f = NULL;
    for (size_t i = 0; name && i < sizeof FAMILIES / sizeof FAMILIES[0]; i++)
        if (strcmp(name, FAMILIES[i].model_type) == 0) f = &FAMILIES[i];
    if (!f) {
        error_set(err,
                  "config.json: unsupported model_type %s%s%s (nanovllm serves Qwen3 and Qwen3.5 "
                  "models: model_type 'qwen3', 'qwen3_moe', 'qwen3_5', 'qwen3_5_moe', "
                  "'qwen3_5_text' or 'qwen3_5_moe_text')",
                  name ? "'" : "", name ? name : "(not a string)", name ? "'" : "");
        return NULL;
    }
    json_t *archs = json_object_get(root, "architectures");
    if (archs && !json_is_null(archs)) {
        if (!json_is_array(archs)) {
            error_set(err, "config.json: field 'architectures' must be a list of strings");
            return NULL;
        }
        bool found = false;
        size_t i;
        json_t *a;
        json_array_foreach(archs, i, a) {
            /* A multimodal folder may name its text-only class (two entries down) too. */
            if (json_is_string(a) && (strcmp(json_string_value(a), f->architecture) == 0 ||
                                      (f->multimodal && strcmp(json_string_value(a), f[2].architecture) == 0)))
                found = true;
        }
        if (!found) {
            json_t *first = json_array_get(archs, 0);
            error_set(err,
                      "config.json: unsupported architectures ['%s'] for model_type '%s' "
                      "(nanovllm implements %s)",
                      json_is_string(first) ? json_string_value(first) : "?", name, f->architecture);
            return NULL;
        }
    }
    return f;
}

/* Features of the Qwen3 family that this forward pass does not implement:
 * refusing them is the difference between an error and wrong tokens. */
static int check_unsupported_features(json_t *root, bool hybrid, Error *err) {
    json_t *v = json_object_get(root, "hidden_act");
    if (v && !(json_is_string(v) && strcmp(json_string_value(v), "silu") == 0))
        return error_set(err, "config.json: unsupported hidden_act (only 'silu' is implemented)");
    v = json_object_get(root, "attention_bias");
    if (v && json_is_true(v))
        return error_set(err, "config.json: attention_bias=true is not supported");
    v = json_object_get(root, "rope_scaling");
    if (v && !json_is_null(v) && !hybrid) /* Qwen3.5's early configs: its rope_parameters */
        return error_set(err, "config.json: rope_scaling is not supported (only plain RoPE)");
    v = json_object_get(root, "use_sliding_window");
    if (v && json_is_true(v))
        return error_set(err, "config.json: use_sliding_window=true is not supported");
    /* DeepSeek's shared experts (a count of full-width ones, no gate) differ
     * from the gated one of shared_expert_intermediate_size read below. */
    static const char *const shared[] = {"n_shared_experts", "num_shared_experts"};
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++) {
        v = json_object_get(root, shared[i]);
        if (v && !json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 0))
            return error_set(err, "config.json: %s: DeepSeek-style shared experts are not "
                                  "supported (only a gated shared_expert_intermediate_size)",
                             shared[i]);
    }
    return 0;
}

/* Qwen3MoeConfig's fields, with transformers' defaults, and which layers
 * are sparse: all but those in mlp_only_layers or off decoder_sparse_step. */
static int read_moe(ModelConfig *cfg, json_t *root, Error *err) {
    cfg->num_experts = 128;
    cfg->num_experts_per_tok = 8;
    cfg->moe_intermediate_size = 768;
    int step = 1;
    if (config_read_int(root, "num_experts", false, 1, 4096, &cfg->num_experts, err) ||
        config_read_int(root, "num_experts_per_tok", false, 1, 4096, &cfg->num_experts_per_tok, err) ||
        config_read_int(root, "moe_intermediate_size", false, 1, 1 << 18, &cfg->moe_intermediate_size,
                 err) ||
        config_read_int(root, "decoder_sparse_step", false, 1, MODEL_MAX_LAYERS, &step, err) ||
        config_read_int(root, "shared_expert_intermediate_size", false, 0, 1 << 18,
                        &cfg->shared_expert_intermediate_size, err))
        return -1;
    if (cfg->num_experts_per_tok > cfg->num_experts)
        return error_set(err, "config.json: num_experts_per_tok (%d) exceeds num_experts (%d)",
                         cfg->num_experts_per_tok, cfg->num_experts);
    json_t *norm = json_object_get(root, "norm_topk_prob");
    if (norm && !json_is_null(norm)) {
        if (!json_is_boolean(norm))
            return error_set(err, "config.json: field 'norm_topk_prob' must be true or false");
        cfg->norm_topk_prob = json_is_true(norm);
    }
    for (int l = 0; l < cfg->num_layers; l++) cfg->sparse_layer[l] = (l + 1) % step == 0;
    json_t *dense = json_object_get(root, "mlp_only_layers");
    if (dense && !json_is_null(dense)) {
        if (!json_is_array(dense))
            return error_set(err, "config.json: field 'mlp_only_layers' must be a list of layers");
        size_t i;
        json_t *l;
        json_array_foreach(dense, i, l) {
            if (!json_is_integer(l) || json_integer_value(l) < 0 ||
                json_integer_value(l) >= cfg->num_layers)
                return error_set(err, "config.json: mlp_only_layers: entries must be layer "
                                      "numbers in [0, %d)", cfg->num_layers);
            cfg->sparse_layer[json_integer_value(l)] = 0;
        }
    }
    return 0;
}

/* Qwen's FP8 checkpoints (and DeepSeek's layout, which they share): dynamic
 * activation scales are what weight-only kernels do anyway (activations stay
 * float); anything else would be silently wrong, so it is refused by name. */
static int read_quantization(ModelConfig *cfg, json_t *root, Error *err) {
    json_t *q = json_object_get(root, "quantization_config");
    if (!q || json_is_null(q)) return 0;
    if (!json_is_object(q)) return error_set(err, "config.json: quantization_config must be an object");
    const char *method = json_string_value(json_object_get(q, "quant_method"));
    if (!method || strcmp(method, "fp8") != 0)
        return error_set(err,
                         "config.json: quantization_config.quant_method '%s' is not supported "
                         "(supported: 'fp8', Qwen's FP8 checkpoints; GGUF files for q8_0/q4_k/...)",
                         method ? method : "(missing)");
    const char *fmt = json_string_value(json_object_get(q, "fmt"));
    if (fmt && strcmp(fmt, "e4m3") != 0)
        return error_set(err, "config.json: quantization_config.fmt '%s' is not supported (only 'e4m3')", fmt);
    const char *act = json_string_value(json_object_get(q, "activation_scheme"));
    if (act && strcmp(act, "dynamic") != 0)
        return error_set(err,
                         "config.json: quantization_config.activation_scheme '%s' is not supported "
                         "(only 'dynamic': no activation scales in the checkpoint)",
                         act);
    json_t *block = json_object_get(q, "weight_block_size");
    if (!json_is_array(block) || json_array_size(block) != 2 ||
        json_integer_value(json_array_get(block, 0)) != FP8_BLOCK ||
        json_integer_value(json_array_get(block, 1)) != FP8_BLOCK)
        return error_set(err,
                         "config.json: quantization_config.weight_block_size must be [%d, %d] "
                         "(per-tensor and per-channel FP8 scales are not supported)",
                         FP8_BLOCK, FP8_BLOCK);
    cfg->fp8_weights = true;
    return 0;
}

/* tie_word_embeddings: the text model's, unless the top level (a multimodal
 * folder's) says otherwise, as transformers' composite config reads it. */
static int read_tie(ModelConfig *cfg, json_t *obj, Error *err) {
    json_t *tie = json_object_get(obj, "tie_word_embeddings");
    if (!tie || json_is_null(tie)) return 0;
    if (!json_is_boolean(tie))
        return error_set(err, "config.json: field 'tie_word_embeddings' must be true or false");
    cfg->tie_word_embeddings = json_is_true(tie);
    return 0;
}

static int parse_config(ModelConfig *cfg, json_t *root, Error *err) {
    memset(cfg, 0, sizeof *cfg);
    if (!json_is_object(root)) return error_set(err, "config.json: not a JSON object");
    const Family *family = check_architecture(root, err);
    if (!family) return -1;
    json_t *text = root;
    if (family->multimodal) {
        text = json_object_get(root, "text_config");
        if (!json_is_object(text))
            return error_set(err, "config.json: model_type '%s' needs a 'text_config' object",
                             family->model_type);
    }
    if (check_unsupported_features(text, family->hybrid, err)) return -1;
    cfg->hybrid = family->hybrid;
    cfg->multimodal = family->multimodal;

    /* transformers' Qwen3Config defaults for the optional fields. */
    cfg->max_position_embeddings = 32768;
    cfg->rms_norm_eps = 1e-6;
    cfg->rope_theta = 10000.0;
    cfg->bos_token_id = -1;

    if (config_read_int(text, "vocab_size", true, 1, 1 << 24, &cfg->vocab_size, err) ||
        config_read_int(text, "hidden_size", true, 1, 1 << 16, &cfg->hidden_size, err) ||
        config_read_int(text, "intermediate_size", !family->moe || !family->hybrid, 1, 1 << 18,
                        &cfg->intermediate_size, err) ||
        config_read_int(text, "num_hidden_layers", true, 1, MODEL_MAX_LAYERS, &cfg->num_layers, err) ||
        config_read_int(text, "num_attention_heads", true, 1, 1024, &cfg->num_heads, err))
        return -1;
    cfg->num_kv_heads = cfg->num_heads;
    cfg->head_dim = cfg->hidden_size / cfg->num_heads;
    if (config_read_int(text, "num_key_value_heads", false, 1, 1024, &cfg->num_kv_heads, err) ||
        config_read_int(text, "head_dim", false, 1, 1024, &cfg->head_dim, err) ||
        config_read_int(text, "max_position_embeddings", false, 1, 1 << 24, &cfg->max_position_embeddings,
                 err) ||
        config_read_number(text, "rms_norm_eps", 0.0, 1.0, &cfg->rms_norm_eps, err) ||
        config_read_number(text, "rope_theta", 1.0, 1e12, &cfg->rope_theta, err))
        return -1;
    if (read_tie(cfg, text, err) || (text != root && read_tie(cfg, root, err))) return -1;
    json_t *bos = json_object_get(text, "bos_token_id");
    if (json_is_integer(bos) && json_integer_value(bos) >= 0 &&
        json_integer_value(bos) < cfg->vocab_size)
        cfg->bos_token_id = (int)json_integer_value(bos);
    json_t *dtype = json_object_get(text, "torch_dtype");
    if (!json_is_string(dtype)) dtype = json_object_get(text, "dtype");
    if (!json_is_string(dtype)) dtype = json_object_get(root, "torch_dtype");
    if (!json_is_string(dtype)) dtype = json_object_get(root, "dtype");
    if (json_is_string(dtype))
        snprintf(cfg->torch_dtype, sizeof cfg->torch_dtype, "%s", json_string_value(dtype));

    if (cfg->head_dim < 2 || cfg->head_dim % 2 != 0)
        return error_set(err, "config.json: head_dim = %d must be even (RoPE rotates halves)",
                         cfg->head_dim);
    if (cfg->num_heads % cfg->num_kv_heads != 0)
        return error_set(err,
                         "config.json: num_attention_heads (%d) must be a multiple of "
                         "num_key_value_heads (%d)",
                         cfg->num_heads, cfg->num_kv_heads);
    cfg->rotary_dim = cfg->head_dim;
    if (family->moe && read_moe(cfg, text, err)) return -1;
    if (family->moe && family->hybrid) cfg->norm_topk_prob = true; /* its router always renormalises */
    if (family->moe && family->hybrid && cfg->intermediate_size == 0)
        cfg->intermediate_size = cfg->moe_intermediate_size; /* no dense layer uses it */
    if (family->hybrid && model_config_read_hybrid(cfg, text, err)) return -1;
    if (read_quantization(cfg, root, err)) return -1;
    if (read_eos(cfg, text, "config.json", err)) return -1;
    return text != root ? read_eos(cfg, root, "config.json", err) : 0;
}

/* Sampling defaults; values out of range are ignored rather than fatal (the
 * file is advice for sampling, not part of the model). */
static void read_sampling_defaults(ModelConfig *cfg, json_t *gen) {
    json_t *v;
    if (json_is_number(v = json_object_get(gen, "temperature")) && json_number_value(v) >= 0 &&
        json_number_value(v) <= 2) {
        cfg->has_temperature = true;
        cfg->temperature = json_number_value(v);
    }
    if (json_is_number(v = json_object_get(gen, "top_p")) && json_number_value(v) > 0 &&
        json_number_value(v) <= 1) {
        cfg->has_top_p = true;
        cfg->top_p = json_number_value(v);
    }
    if (json_is_integer(v = json_object_get(gen, "top_k")) && json_integer_value(v) >= -1 &&
        json_integer_value(v) <= cfg->vocab_size) {
        cfg->has_top_k = true;
        cfg->top_k = (int)json_integer_value(v);
    }
    if (json_is_number(v = json_object_get(gen, "min_p")) && json_number_value(v) >= 0 &&
        json_number_value(v) <= 1) {
        cfg->has_min_p = true;
        cfg->min_p = json_number_value(v);
    }
    if (json_is_number(v = json_object_get(gen, "repetition_penalty")) && json_number_value(v) > 0 &&
        json_number_value(v) <= 100) {
        cfg->has_repetition_penalty = true;
        cfg->repetition_penalty = json_number_value(v);
    }
}

int model_config_parse(ModelConfig *cfg, const char *config_text, const char *gen_text,
                       Error *err) {
    json_error_t jerr;
    json_t *root = json_loads(config_text, 0, &jerr);
    if (!root)
        return error_set(err, "config.json: invalid JSON at line %d: %s", jerr.line, jerr.text);
    int rc = parse_config(cfg, root, err);
    json_decref(root);
    if (rc || !gen_text) return rc;

    json_t *gen = json_loads(gen_text, 0, &jerr);
    if (!gen)
        return error_set(err, "generation_config.json: invalid JSON at line %d: %s", jerr.line,
                         jerr.text);
    rc = json_is_object(gen) ? read_eos(cfg, gen, "generation_config.json", err)
                             : error_set(err, "generation_config.json: not a JSON object");
    if (rc == 0) read_sampling_defaults(cfg, gen);
    json_decref(gen);
    return rc;
}

/* Reads a whole small text file; NULL with *missing set when it does not exist. */
static char *read_small_file(const char *path, bool *missing, Error *err) {
    *missing = false;
    FILE *f = fopen(path, "rb");
    if (!f) {
        *missing = true;
        error_set(err, "cannot open %s", path);
        return NULL;
    }
    enum { MAX_CONFIG_BYTES = 1 << 20 };
    char *buf = malloc(MAX_CONFIG_BYTES + 1);
    if (!buf) {
        fclose(f);
        error_set(err, "out of memory reading %s", path);
        return NULL;
    }
    size_t n = fread(buf, 1, MAX_CONFIG_BYTES + 1, f);
    int read_error = ferror(f);
    fclose(f);
    if (read_error || n > MAX_CONFIG_BYTES) {
        free(buf);
        error_set(err, "%s: %s", path, read_error ? "read error" : "larger than 1 MiB");
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

int model_config_load(ModelConfig *cfg, const char *model_dir, Error *err) {
    if (gguf_is_file(model_dir)) return model_config_load_gguf(cfg, model_dir, err);
    char path[4096];
    bool missing;
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    char *text = read_small_file(path, &missing, err);
    if (!text)
        return missing ? error_set(err, "%s: no config.json (is this a Hugging Face model folder?)",
                                   model_dir)
                       : -1;
    snprintf(path, sizeof path, "%s/generation_config.json", model_dir);
    char *gen = read_small_file(path, &missing, err);
    if (!gen && !missing) {
        free(text);
        return -1;
    }
    int rc = model_config_parse(cfg, text, gen, err);
    free(text);
    free(gen);
    if (rc) return error_prefix(err, "%s", model_dir);
    return 0;
}

bool model_config_layer_is_sparse(const ModelConfig *cfg, int l) {
    return cfg->num_experts > 0 && l >= 0 && l < cfg->num_layers && cfg->sparse_layer[l];
}

int model_config_rotary_dim(const ModelConfig *cfg) {
    return cfg->rotary_dim > 0 ? cfg->rotary_dim : cfg->head_dim;
}

bool model_config_layer_is_linear(const ModelConfig *cfg, int l) {
    return cfg->hybrid && l >= 0 && l < cfg->num_layers && cfg->linear_layer[l];
}

int model_config_linear_key_dim(const ModelConfig *cfg) {
    return cfg->linear_num_k_heads * cfg->linear_k_dim;
}

int model_config_linear_value_dim(const ModelConfig *cfg) {
    return cfg->linear_num_v_heads * cfg->linear_v_dim;
}

int model_config_linear_conv_dim(const ModelConfig *cfg) {
    return 2 * model_config_linear_key_dim(cfg) + model_config_linear_value_dim(cfg);
}

bool model_config_is_eos(const ModelConfig *cfg, int token_id) {
    for (int i = 0; i < cfg->num_eos_ids; i++)
        if (cfg->eos_ids[i] == token_id) return true;
    return false;
}
