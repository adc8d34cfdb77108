/*
 * gguf_model.c - GGUF metadata -> ModelConfig, Hugging Face tensor names ->
 * GGUF tensors (see gguf_model.h).
 *
 * The key names and tensor names are those llama.cpp's converter writes for
 * Qwen3 (qwen3), Qwen3-MoE (qwen3moe) and Qwen3.5 (qwen35, qwen35moe); the
 * meaning of each is the config.json field it was converted from.
 *
 * Qwen3.5 files differ from its Hugging Face folders in three ways, which
 * the loader takes as they are rather than undoing: the zero-centred norms
 * hold 1 + w already (what model_weights.h stores anyway), the decay is
 * stored as A = -exp(A_log) (read back as log(-A)), and the value heads of
 * the linear layers are tiled (value head v belongs to key head v % Hk)
 * instead of grouped (v / (Hv / Hk)): ModelConfig.linear_value_heads_tiled
 * tells the forward pass, so no quantized row or column is permuted.
 */
#include "gguf_model.h"

#include <stdio.h>
#include <string.h>

#include "model_config_hybrid.h"

/* ---- config ---------------------------------------------------------------- */

typedef struct Keys {
    const Gguf *g;
    const char *arch;
    char name[128];
} Keys;

static const char *key(Keys *k, const char *suffix) {
    snprintf(k->name, sizeof k->name, "%s.%s", k->arch, suffix);
    return k->name;
}

static int read_int(Keys *k, const char *suffix, bool required, int64_t lo, int64_t hi, int *out,
                    Error *err) {
    const char *name = key(k, suffix);
    const GgufKv *kv = gguf_find_kv(k->g, name);
    if (!kv) return required ? error_set(err, "missing metadata key '%s'", name) : 0;
    if (kv->type == GGUF_ARRAY)
        return error_set(err, "metadata key '%s' is an array (per-layer values are not supported)",
                         name);
    int64_t v;
    if (gguf_get_i64(k->g, name, &v, err)) return -1;
    if (v < lo || v > hi)
        return error_set(err, "metadata key '%s' = %lld is out of range [%lld, %lld]", name,
                         (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return 0;
}

static int read_float(Keys *k, const char *suffix, double lo, double hi, double *out, Error *err) {
    const char *name = key(k, suffix);
    if (!gguf_find_kv(k->g, name)) return 0;
    double v;
    if (gguf_get_f64(k->g, name, &v, err)) return -1;
    if (!(v >= lo && v <= hi))
        return error_set(err, "metadata key '%s' = %g is out of range [%g, %g]", name, v, lo, hi);
    *out = v;
    return 0;
}

static int add_eos(ModelConfig *cfg, const Gguf *g, const char *name, Error *err) {
    int64_t id;
    if (!gguf_find_kv(g, name)) return 0;
    if (gguf_get_i64(g, name, &id, err)) return -1;
    if (id < 0 || id >= cfg->vocab_size)
        return error_set(err, "metadata key '%s' = %lld is outside the vocabulary (%d)", name,
                         (long long)id, cfg->vocab_size);
    for (int i = 0; i < cfg->num_eos_ids; i++)
        if (cfg->eos_ids[i] == id) return 0;
    if (cfg->num_eos_ids < MODEL_MAX_EOS_IDS) cfg->eos_ids[cfg->num_eos_ids++] = (int)id;
    return 0;
}

/* What the forward pass does not implement, refused by key (a gated shared
 * expert is Qwen3.5-MoE's, read there). */
static int check_unsupported(Keys *k, bool hybrid, Error *err) {
    static const char *const refused[] = {
        "rope.scaling.type", "attention.sliding_window", "expert_shared_count",
        "expert_shared_feed_forward_length", "attention.clamp_kqv"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const char *name = key(k, refused[i]);
        const GgufKv *kv = gguf_find_kv(k->g, name);
        if (!kv || (hybrid && strcmp(refused[i], "expert_shared_feed_forward_length") == 0)) continue;
        if (strcmp(refused[i], "rope.scaling.type") == 0) {
            GgufString s;
            if (gguf_get_string(k->g, name, &s, err)) return -1;
            if (s.len == 4 && memcmp(s.p, "none", 4) == 0) continue;
        }
        if (strcmp(refused[i], "expert_shared_count") == 0) {
            int64_t n;
            if (gguf_get_i64(k->g, name, &n, err)) return -1;
            if (n == 0) continue;
        }
        return error_set(err, "metadata key '%s' is not supported (the forward pass does not "
                              "implement it)", name);
    }
    return 0;
}

/* qwen35 / qwen35moe: the hybrid layout (model_config.h's Qwen3.5 fields). */
static int read_hybrid(ModelConfig *cfg, Keys *k, Error *err) {
    int interval = 4, inner = 0;
    cfg->hybrid = true;
    cfg->attn_output_gate = true; /* llama.cpp's qwen35 graph always gates */
    cfg->linear_value_heads_tiled = true;
    cfg->rotary_dim = cfg->head_dim / 4;
    cfg->linear_conv_kernel = 4;
    if (read_int(k, "ssm.conv_kernel", false, 2, 64, &cfg->linear_conv_kernel, err) ||
        read_int(k, "ssm.state_size", true, 1, 1024, &cfg->linear_k_dim, err) ||
        read_int(k, "ssm.group_count", true, 1, 1024, &cfg->linear_num_k_heads, err) ||
        read_int(k, "ssm.time_step_rank", true, 1, 1024, &cfg->linear_num_v_heads, err) ||
        read_int(k, "ssm.inner_size", true, 1, 1 << 20, &inner, err) ||
        read_int(k, "full_attention_interval", false, 1, MODEL_MAX_LAYERS, &interval, err) ||
        read_int(k, "rope.dimension_count", false, 2, 1024, &cfg->rotary_dim, err) ||
        read_int(k, "expert_shared_feed_forward_length", false, 0, 1 << 18,
                 &cfg->shared_expert_intermediate_size, err))
        return -1;
    if (inner % cfg->linear_num_v_heads || cfg->linear_num_v_heads % cfg->linear_num_k_heads)
        return error_set(err, "metadata keys '%s' = %d, ssm.time_step_rank %d and ssm.group_count "
                              "%d do not make whole value heads per key head",
                         key(k, "ssm.inner_size"), inner, cfg->linear_num_v_heads,
                         cfg->linear_num_k_heads);
    cfg->linear_v_dim = inner / cfg->linear_num_v_heads;
    if (cfg->rotary_dim % 2 || cfg->rotary_dim > cfg->head_dim)
        return error_set(err, "metadata key '%s' = %d: RoPE needs an even number of dims up to "
                              "head_dim %d", key(k, "rope.dimension_count"), cfg->rotary_dim,
                         cfg->head_dim);
    for (int l = 0; l < cfg->num_layers; l++) cfg->linear_layer[l] = (l + 1) % interval != 0;
    char where[96];
    snprintf(where, sizeof where, "metadata keys '%s.block_count' and '%s.full_attention_interval'", k->arch,
             k->arch);
    return model_config_count_linear_layers(cfg, where, err);
}

static bool has_tensor(const Gguf *g, const char *fmt, int layer) {
    char name[96];
    snprintf(name, sizeof name, fmt, layer);
    return gguf_find_tensor(g, name) != NULL;
}

int model_config_from_gguf(ModelConfig *cfg, const Gguf *g, Error *err) {
    memset(cfg, 0, sizeof *cfg);
    GgufString arch;
    if (gguf_get_string(g, "general.architecture", &arch, err)) return -1;
    static const struct {
        const char *name;
        bool moe, hybrid;
    } ARCHS[] = {{"qwen3", false, false}, {"qwen3moe", true, false},
                 {"qwen35", false, true}, {"qwen35moe", true, true}};
    int a = -1;
    for (int i = 0; i < 4 && a < 0; i++)
        if (arch.len == strlen(ARCHS[i].name) && memcmp(arch.p, ARCHS[i].name, arch.len) == 0) a = i;
    if (a < 0)
        return error_set(err, "metadata key 'general.architecture' is '%.*s'; supported: qwen3, "
                              "qwen3moe, qwen35, qwen35moe", (int)(arch.len > 64 ? 64 : arch.len), arch.p);
    bool moe = ARCHS[a].moe, hybrid = ARCHS[a].hybrid;
    Keys k = {g, ARCHS[a].name, ""};
    const GgufTensor *embed = gguf_find_tensor(g, "token_embd.weight");
    if (!embed || embed->ndim != 2)
        return error_set(err, "tensor 'token_embd.weight' is missing or not a matrix");
    if (embed->ne[1] < 1 || embed->ne[1] > (1 << 24))
        return error_set(err, "tensor 'token_embd.weight' has %lld rows", (long long)embed->ne[1]);
    cfg->vocab_size = (int)embed->ne[1];
    cfg->max_position_embeddings = 32768;
    cfg->rms_norm_eps = 1e-6;
    cfg->rope_theta = 10000.0;
    cfg->bos_token_id = -1;
    if (read_int(&k, "embedding_length", true, 1, 1 << 16, &cfg->hidden_size, err) ||
        read_int(&k, "block_count", true, 1, MODEL_MAX_LAYERS, &cfg->num_layers, err) ||
        read_int(&k, "attention.head_count", true, 1, 1024, &cfg->num_heads, err) ||
        read_int(&k, "feed_forward_length", !moe, 1, 1 << 18, &cfg->intermediate_size, err))
        return -1;
    cfg->num_kv_heads = cfg->num_heads;
    cfg->head_dim = cfg->hidden_size / cfg->num_heads;
    int value_length = 0;
    if (read_int(&k, "attention.head_count_kv", false, 1, 1024, &cfg->num_kv_heads, err) ||
        read_int(&k, "attention.key_length", false, 1, 1024, &cfg->head_dim, err) ||
        read_int(&k, "attention.value_length", false, 1, 1024, &value_length, err) ||
        read_int(&k, "context_length", false, 1, 1 << 24, &cfg->max_position_embeddings, err) ||
        read_float(&k, "attention.layer_norm_rms_epsilon", 0.0, 1.0, &cfg->rms_norm_eps, err) ||
        read_float(&k, "rope.freq_base", 1.0, 1e12, &cfg->rope_theta, err) ||
        check_unsupported(&k, hybrid, err))
        return -1;
    if (value_length && value_length != cfg->head_dim)
        return error_set(err, "metadata keys '%s' and key_length differ (%d, %d): not supported",
                         key(&k, "attention.value_length"), value_length, cfg->head_dim);
    if (cfg->head_dim % 2 || cfg->num_heads % cfg->num_kv_heads)
        return error_set(err, "head_dim %d / heads %d / kv heads %d: not a Qwen3 attention shape",
                         cfg->head_dim, cfg->num_heads, cfg->num_kv_heads);
    cfg->rotary_dim = cfg->head_dim;
    if (hybrid && read_hybrid(cfg, &k, err)) return -1;
    if (moe) {
        int norm = 1;
        if (read_int(&k, "expert_count", true, 1, 4096, &cfg->num_experts, err) ||
            read_int(&k, "expert_used_count", true, 1, 4096, &cfg->num_experts_per_tok, err) ||
            read_int(&k, "expert_feed_forward_length", true, 1, 1 << 18,
                     &cfg->moe_intermediate_size, err))
            return -1;
        const char *norm_key = key(&k, "expert_weights_norm");
        if (gguf_find_kv(g, norm_key)) {
            bool b;
            if (gguf_get_bool(g, norm_key, &b, err)) return -1;
            norm = b;
        }
        cfg->norm_topk_prob = norm; /* Qwen3(.5)-MoE renormalise; the converter writes no key */
        if (hybrid && !cfg->intermediate_size) /* every Qwen3.5-MoE layer is sparse */
            cfg->intermediate_size = cfg->moe_intermediate_size;
        if (cfg->num_experts_per_tok > cfg->num_experts)
            return error_set(err, "%d experts per token of %d", cfg->num_experts_per_tok,
                             cfg->num_experts);
        for (int l = 0; l < cfg->num_layers; l++) {
            cfg->sparse_layer[l] = has_tensor(g, "blk.%d.ffn_gate_inp.weight", l);
            if (!cfg->sparse_layer[l] && !cfg->intermediate_size)
                return error_set(err, "layer %d is dense but '%s' is missing", l,
                                 key(&k, "feed_forward_length"));
        }
    }
    cfg->tie_word_embeddings = gguf_find_tensor(g, "output.weight") == NULL;
    /* Qwen3 was trained and published in bf16: the KV cache and the
     * activations' dtype follow that, as for its Hugging Face folder. */
    snprintf(cfg->torch_dtype, sizeof cfg->torch_dtype, "bfloat16");
    int64_t bos;
    if (gguf_find_kv(g, "tokenizer.ggml.bos_token_id") &&
        gguf_get_i64(g, "tokenizer.ggml.bos_token_id", &bos, err) == 0 && bos >= 0 &&
        bos < cfg->vocab_size)
        cfg->bos_token_id = (int)bos;
    return add_eos(cfg, g, "tokenizer.ggml.eos_token_id", err) ||
                   add_eos(cfg, g, "tokenizer.ggml.eot_token_id", err) ||
                   add_eos(cfg, g, "tokenizer.ggml.eom_token_id", err)
               ? -1
               : 0;
}

int model_config_load_gguf(ModelConfig *cfg, const char *path, Error *err) {
    Gguf g;
    if (gguf_open(&g, path, err)) return -1;
    int rc = model_config_from_gguf(cfg, &g, err);
    gguf_close(&g);
    return rc ? error_prefix(err, "%s", path) : 0;
}

/* ---- tensor names ------------------------------------------------------------ */

/* "model.layers.N.<hf>" suffixes and their GGUF names "blk.N.<gguf>". */
typedef struct LayerName {
    const char *hf, *gguf;
} LayerName;

static const LayerName LAYER_NAMES[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight"},
    {"linear_attn.in_proj_z.weight", "attn_gate.weight"},
    {"linear_attn.in_proj_b.weight", "ssm_beta.weight"},
    {"linear_attn.in_proj_a.weight", "ssm_alpha.weight"},
    {"linear_attn.out_proj.weight", "ssm_out.weight"},
    {"linear_attn.conv1d.weight", "ssm_conv1d.weight"},
    {"linear_attn.A_log", "ssm_a"}, /* holds -exp(A_log): model_weights.c converts */
    {"linear_attn.dt_bias", "ssm_dt.bias"},
    {"linear_attn.norm.weight", "ssm_norm.weight"},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
};

/* The names another architecture gives the same tensors (qwen35). */
static const LayerName ALT_LAYER_NAMES[] = {
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
};

static const struct {
    const char *hf, *gguf;
} EXPERT_NAMES[] = {
    {"gate_proj.weight", "ffn_gate_exps.weight"},
    {"up_proj.weight", "ffn_up_exps.weight"},
    {"down_proj.weight", "ffn_down_exps.weight"},
};

/* The GGUF name of hf_name into out (alt: its other name, -1 if none); *expert
 * is the slice (-1: the whole tensor). */
static int gguf_name(const char *hf_name, bool alt, char *out, size_t size, int *expert) {
    *expert = -1;
    if (strcmp(hf_name, "model.embed_tokens.weight") == 0) return snprintf(out, size, "token_embd.weight"), 0;
    if (strcmp(hf_name, "model.norm.weight") == 0) return snprintf(out, size, "output_norm.weight"), 0;
    if (strcmp(hf_name, "lm_head.weight") == 0) return snprintf(out, size, "output.weight"), 0;
    int layer, used = 0;
    if (sscanf(hf_name, "model.layers.%d.%n", &layer, &used) != 1 || used == 0) return -1;
    const char *rest = hf_name + used;
    const LayerName *names = alt ? ALT_LAYER_NAMES : LAYER_NAMES;
    size_t count = alt ? sizeof ALT_LAYER_NAMES / sizeof ALT_LAYER_NAMES[0]
                       : sizeof LAYER_NAMES / sizeof LAYER_NAMES[0];
    for (size_t i = 0; i < count; i++)
        if (strcmp(rest, names[i].hf) == 0)
            return snprintf(out, size, "blk.%d.%s", layer, names[i].gguf), 0;
    if (alt) return -1;
    int e, eused = 0;
    if (sscanf(rest, "mlp.experts.%d.%n", &e, &eused) != 1 || eused == 0) return -1;
    for (size_t i = 0; i < sizeof EXPERT_NAMES / sizeof EXPERT_NAMES[0]; i++)
        if (strcmp(rest + eused, EXPERT_NAMES[i].hf) == 0) {
            *expert = e;
            return snprintf(out, size, "blk.%d.%s", layer, EXPERT_NAMES[i].gguf), 0;
        }
    return -1;
}

int gguf_model_find(const Gguf *g, const char *hf_name, int rows, int cols, GgufSlice *out,
                    Error *err) {
    char name[128];
    int expert;
    if (gguf_name(hf_name, false, name, sizeof name, &expert))
        return error_set(err, "tensor '%s' has no GGUF name", hf_name);
    const GgufTensor *t = gguf_find_tensor(g, name);
    char alt[sizeof name];
    if (!t && gguf_name(hf_name, true, alt, sizeof alt, &expert) == 0 && (t = gguf_find_tensor(g, alt)))
        memcpy(name, alt, sizeof name);
    if (!t) return error_set(err, "the file has no tensor '%s' (%s)", name, hf_name);
    /* ggml order: ne[0] is the row length; a 1 x n matrix may be stored as a vector */
    int64_t want[GGUF_MAX_DIMS] = {cols ? cols : rows, cols ? rows : 1, 1, 1};
    int want_dims = cols && !(rows == 1 && t->ndim == 1) ? 2 : 1;
    if (expert >= 0) {
        want[2] = t->ndim == 3 ? t->ne[2] : -1;
        want_dims = 3;
        if (want[2] <= expert)
            return error_set(err, "tensor '%s' has no expert %d (shape [%lld, %lld, %lld])", name,
                             expert, (long long)t->ne[0], (long long)t->ne[1],
                             (long long)t->ne[2]);
    }
    bool same = t->ndim == want_dims;
    for (int i = 0; same && i < want_dims; i++) same = t->ne[i] == want[i];
    if (!same)
        return error_set(err, "tensor '%s' has shape [%lld, %lld, %lld] (ggml order) but the "
                              "metadata implies [%lld, %lld, %lld]",
                         name, (long long)t->ne[0], (long long)(t->ndim > 1 ? t->ne[1] : 1),
                         (long long)(t->ndim > 2 ? t->ne[2] : 1), (long long)want[0],
                         (long long)want[1], (long long)want[2]);
    snprintf(out->gguf_name, sizeof out->gguf_name, "%s", name);
    out->type = t->type;
    out->nbytes = t->nbytes;
    out->data = t->data;
    if (expert >= 0) {
        out->nbytes = t->nbytes / (size_t)t->ne[2];
        out->data = (const char *)t->data + out->nbytes * (size_t)expert;
    }
    return 0;
}
