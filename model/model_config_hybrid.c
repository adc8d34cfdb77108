/*
 * model_config_hybrid.c - Qwen3.5's hybrid fields (see model_config_hybrid.h).
 *
 * Defaults are transformers' Qwen3_5TextConfig's. Text positions are the
 * same on MRoPE's three streams, so mrope_section changes nothing for text
 * and is accepted as it is; every other RoPE variant is refused by name.
 */
#include "model_config_hybrid.h"

#include <string.h>

/* "linear_attention" / "full_attention" (and transformers' legacy short
 * names); absent: every full_attention_interval-th layer is full. */
static int read_layer_types(ModelConfig *cfg, json_t *text, Error *err) {
    json_t *types = json_object_get(text, "layer_types");
    if (!types || json_is_null(types)) {
        int interval = 4;
        if (config_read_int(text, "full_attention_interval", false, 1, MODEL_MAX_LAYERS, &interval, err))
            return -1;
        for (int l = 0; l < cfg->num_layers; l++) cfg->linear_layer[l] = (l + 1) % interval != 0;
        return 0;
    }
    if (!json_is_array(types) || json_array_size(types) != (size_t)cfg->num_layers)
        return error_set(err, "config.json: layer_types must be a list of %d strings (one per layer)",
                         cfg->num_layers);
    size_t i;
    json_t *t;
    json_array_foreach(types, i, t) {
        const char *s = json_string_value(t);
        if (s && (strcmp(s, "linear_attention") == 0 || strcmp(s, "linear") == 0))
            cfg->linear_layer[i] = 1;
        else if (s && (strcmp(s, "full_attention") == 0 || strcmp(s, "attention") == 0))
            cfg->linear_layer[i] = 0;
        else
            return error_set(err, "config.json: layer_types[%zu] is %s%s%s; expected "
                                  "'linear_attention' or 'full_attention'",
                             i, s ? "'" : "", s ? s : "not a string", s ? "'" : "");
    }
    return 0;
}

/* rope_parameters (or, in early configs, rope_scaling / top-level fields):
 * rope_theta and partial_rotary_factor; rope_type must be plain. */
static int read_rope(ModelConfig *cfg, json_t *text, Error *err) {
    double factor = 0.25, theta = cfg->rope_theta;
    if (config_read_number(text, "partial_rotary_factor", 0.0, 1.0, &factor, err)) return -1;
    json_t *rope = json_object_get(text, "rope_parameters");
    if (!json_is_object(rope)) rope = json_object_get(text, "rope_scaling");
    if (rope && !json_is_null(rope)) {
        if (!json_is_object(rope)) return error_set(err, "config.json: rope_parameters must be an object");
        const char *type = json_string_value(json_object_get(rope, "rope_type"));
        if (!type) type = json_string_value(json_object_get(rope, "type"));
        if (type && strcmp(type, "default") != 0 && strcmp(type, "mrope") != 0)
            return error_set(err, "config.json: rope_parameters.rope_type '%s' is not supported "
                                  "(only 'default')", type);
        if (config_read_number(rope, "rope_theta", 1.0, 1e12, &theta, err) ||
            config_read_number(rope, "partial_rotary_factor", 0.0, 1.0, &factor, err))
            return -1;
    }
    cfg->rope_theta = theta;
    cfg->rotary_dim = (int)(cfg->head_dim * factor);
    if (cfg->rotary_dim < 2 || cfg->rotary_dim % 2 != 0)
        return error_set(err, "config.json: partial_rotary_factor %g of head_dim %d leaves %d "
                              "rotary dims; RoPE needs a positive even number", factor, cfg->head_dim,
                         cfg->rotary_dim);
    return 0;
}

int model_config_read_hybrid(ModelConfig *cfg, json_t *text, Error *err) {
    cfg->linear_num_k_heads = 16;
    cfg->linear_num_v_heads = 32;
    cfg->linear_k_dim = 128;
    cfg->linear_v_dim = 128;
    cfg->linear_conv_kernel = 4;
    cfg->attn_output_gate = true;
    if (config_read_int(text, "linear_num_key_heads", false, 1, 1024, &cfg->linear_num_k_heads, err) ||
        config_read_int(text, "linear_num_value_heads", false, 1, 1024, &cfg->linear_num_v_heads, err) ||
        config_read_int(text, "linear_key_head_dim", false, 1, 1024, &cfg->linear_k_dim, err) ||
        config_read_int(text, "linear_value_head_dim", false, 1, 1024, &cfg->linear_v_dim, err) ||
        config_read_int(text, "linear_conv_kernel_dim", false, 2, 64, &cfg->linear_conv_kernel, err))
        return -1;
    if (cfg->linear_num_v_heads % cfg->linear_num_k_heads != 0)
        return error_set(err, "config.json: linear_num_value_heads (%d) must be a multiple of "
                              "linear_num_key_heads (%d)",
                         cfg->linear_num_v_heads, cfg->linear_num_k_heads);
    json_t *gate = json_object_get(text, "attn_output_gate");
    if (gate && !json_is_null(gate)) {
        if (!json_is_boolean(gate))
            return error_set(err, "config.json: field 'attn_output_gate' must be true or false");
        cfg->attn_output_gate = json_is_true(gate);
    }
    if (read_layer_types(cfg, text, err) || read_rope(cfg, text, err)) return -1;
    return model_config_count_linear_layers(cfg, "config.json: layer_types / full_attention_interval", err);
}

int model_config_count_linear_layers(ModelConfig *cfg, const char *source, Error *err) {
    cfg->num_linear_layers = 0;
    for (int l = 0; l < cfg->num_layers; l++) cfg->num_linear_layers += cfg->linear_layer[l];
    if (cfg->num_linear_layers == cfg->num_layers)
        return error_set(err, "%s: all %d layers are linear attention; a Qwen3.5 model needs at least one "
                              "full-attention layer", source, cfg->num_layers);
    return 0;
}
