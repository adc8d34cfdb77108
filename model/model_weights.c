/*
 * model_weights.c - checkpoint tensors (or dummy ones) -> ModelWeights (see
 * model_weights.h).
 *
 * Both ways of loading walk the same list of tensors, each named as in the
 * Hugging Face checkpoint: load_layer() asks source_matrix() and
 * source_vector() for them, which read the checkpoint or make dummies.
 */
#include "model_weights.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dummy_weights.h"
#include "gguf_model.h"
#include "base/half.h"

static void *own(ModelWeights *w, size_t bytes, Error *err) {
    void **owned = realloc(w->owned, sizeof *owned * (size_t)(w->num_owned + 1));
    if (!owned) {
        error_set(err, "out of memory");
        return NULL;
    }
    w->owned = owned;
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        error_set(err, "out of memory (%zu bytes for a converted weight)", bytes);
        return NULL;
    }
    w->owned[w->num_owned++] = p;
    return p;
}

static void shape_string(char *buf, size_t size, const int64_t *shape, int ndim) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "",
                                 (long long)shape[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
}

/* A tensor of the text model as the checkpoint names it: a multimodal
 * Qwen3.5 folder keeps "model.X" as "model.language_model.X". */
static const char *checkpoint_name(const ModelWeights *w, const char *name, char *buf, size_t size) {
    if (!w->config.multimodal || strncmp(name, "model.", 6) != 0) return name;
    snprintf(buf, size, "model.language_model.%s", name + 6);
    return buf;
}

/* Finds NAME and checks it is a float tensor of exactly the expected shape
 * (float8_e4m3fn too where fp8 says it may be). */
static const TensorInfo *find_checked(ModelWeights *w, const char *logical_name, int ndim,
                                      const int64_t *shape, bool fp8, Error *err) {
    char buf[256];
    const char *name = checkpoint_name(w, logical_name, buf, sizeof buf);
    const TensorInfo *t = safetensors_find(&w->checkpoint, name);
    /* A sentence-transformers checkpoint (Qwen3-Embedding) saves the base
     * model alone: the same tensors without the "model." prefix. */
    if (!t && strncmp(name, "model.", 6) == 0) t = safetensors_find(&w->checkpoint, name + 6);
    if (!t) {
        error_set(err, "checkpoint is missing tensor '%s'", name);
        return NULL;
    }
    if (t->dtype == DTYPE_OTHER || (t->dtype == DTYPE_F8_E4M3 && !fp8)) {
        error_set(err, "tensor '%s' has dtype %s; expected BF16, F16 or F32%s", name, t->dtype_name,
                  t->dtype != DTYPE_F8_E4M3              ? ""
                  : !w->config.fp8_weights              ? " (F8_E4M3 needs config.json's fp8 quantization_config)"
                                                        : " (FP8 checkpoints keep it in bf16)");
        return NULL;
    }
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char got[128], want[128];
        shape_string(got, sizeof got, t->shape, t->ndim);
        shape_string(want, sizeof want, shape, ndim);
        error_set(err, "tensor '%s' has shape %s but config.json implies %s", name, got, want);
        return NULL;
    }
    return t;
}

/* A small tensor of this shape (a norm, a conv kernel, a per-head constant)
 * converted to an owned float32 array. */
static int checkpoint_floats(ModelWeights *w, const char *name, int ndim, const int64_t *shape,
                             float **out, Error *err) {
    const TensorInfo *t = find_checked(w, name, ndim, shape, false, err);
    if (!t) return -1;
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    float *v = own(w, sizeof(float) * n, err);
    if (!v) return -1;
    const uint8_t *src = t->data;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        switch (t->dtype) {
        case DTYPE_BF16: memcpy(&h, src + 2 * i, 2); v[i] = bf16_to_f32(h); break;
        case DTYPE_F16: memcpy(&h, src + 2 * i, 2); v[i] = f16_to_f32(h); break;
        default: memcpy(&v[i], src + 4 * i, 4); break;
        }
    }
    *out = v;
    return 0;
}

/* n f32 or f16 values from src (any alignment) into an owned f32 buffer. */
static float *widen_to_f32(ModelWeights *w, const void *src, size_t n, bool f16, Error *err) {
    float *f = own(w, n * sizeof(float), err);
    if (!f) return NULL;
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++) {
        if (!f16) {
            memcpy(&f[i], p + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            f[i] = f16_to_f32(h);
        }
    }
    return f;
}

/* Whether a matrix may be FP8 in an FP8 checkpoint: the layers' linear
 * weights (experts and router included); the embeddings and lm_head stay
 * bf16 in Qwen's, and their kernels (row lookup, the logits) read bf16. */
static bool fp8_allowed(const ModelWeights *w, const char *name) {
    return w->config.fp8_weights && strncmp(name, "model.layers.", 13) == 0;
}

/* Any of e4m3's two NaN bytes among n: 8 bytes at a time, (b & 0x7f) == 0x7f. */
static bool has_fp8_nan(const uint8_t *p, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        uint64_t low7 = v & 0x7f7f7f7f7f7f7f7full;                       /* each byte's low 7 bits */
        if ((low7 + 0x0101010101010101ull) & 0x8080808080808080ull) break; /* some byte == 0x7f */
    }
    for (; i < n; i++)
        if (fp8_e4m3_is_nan(p[i])) return true;
    return false;
}

/* NAME_scale_inv (NAME ends in "weight"): ceil(rows / 128) x ceil(cols / 128)
 * float scales in F32, BF16 or F16, converted to an owned float32 array; a
 * scale that is not finite is refused (it would poison every value of its tile). */
static int checkpoint_fp8_scales(ModelWeights *w, const char *name, int rows, int cols, Weight *out,
                                 Error *err) {
    char scale_name[192], buf[256];
    snprintf(scale_name, sizeof scale_name, "%s_scale_inv", name);
    if (!safetensors_find(&w->checkpoint, checkpoint_name(w, scale_name, buf, sizeof buf)))
        return error_set(err, "tensor '%s' is F8_E4M3 but the checkpoint has no '%s' (its block scales)", name,
                         scale_name);
    int64_t shape[2] = {(rows + FP8_BLOCK - 1) / FP8_BLOCK, (cols + FP8_BLOCK - 1) / FP8_BLOCK};
    const TensorInfo *t = find_checked(w, scale_name, 2, shape, false, err);
    if (!t) return -1;
    size_t n = (size_t)(shape[0] * shape[1]);
    float *scales = own(w, n * sizeof(float), err);
    if (!scales) return -1;
    const uint8_t *src = t->data;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        switch (t->dtype) {
        case DTYPE_BF16: memcpy(&h, src + 2 * i, 2); scales[i] = bf16_to_f32(h); break;
        case DTYPE_F16: memcpy(&h, src + 2 * i, 2); scales[i] = f16_to_f32(h); break;
        default: memcpy(&scales[i], src + 4 * i, 4); break;
        }
        if (!isfinite(scales[i]))
            return error_set(err, "tensor '%s': scale %zu of %zu is %g", scale_name, i, n, (double)scales[i]);
    }
    out->scales = scales;
    return 0;
}

/* bf16 and f32 matrices are used in place when aligned to their element size;
 * f16 (and anything misaligned) is converted into an owned buffer. FP8 ones
 * are used in place (bytes need no alignment) with their scales beside,
 * after a scan for NaN bytes (a checkpoint never holds one; one would
 * silently poison every sum it enters). */
static int checkpoint_matrix(ModelWeights *w, const char *name, int rows, int cols, Weight *out,
                             Error *err) {
    int64_t shape[2] = {rows, cols};
    const TensorInfo *t = find_checked(w, name, 2, shape, fp8_allowed(w, name), err);
    if (!t) return -1;
    size_t n = (size_t)rows * (size_t)cols;
    out->rows = rows;
    out->cols = cols;
    if (t->dtype == DTYPE_F8_E4M3) {
        out->type = WEIGHT_F8_E4M3;
        out->data = t->data;
        if (has_fp8_nan(t->data, n))
            return error_set(err, "tensor '%s' holds a NaN (float8_e4m3fn byte 0x7f or 0xff)", name);
        return checkpoint_fp8_scales(w, name, rows, cols, out, err);
    }
    bool aligned = ((uintptr_t)t->data % tensor_dtype_size(t->dtype)) == 0;
    if (t->dtype == DTYPE_BF16) {
        out->type = WEIGHT_BF16;
        if (aligned) {
            out->data = t->data;
            return 0;
        }
        void *copy = own(w, t->nbytes, err);
        if (!copy) return -1;
        memcpy(copy, t->data, t->nbytes);
        out->data = copy;
        return 0;
    }
    out->type = WEIGHT_F32;
    if (t->dtype == DTYPE_F32 && aligned) {
        out->data = t->data;
        return 0;
    }
    out->data = widen_to_f32(w, t->data, n, t->dtype == DTYPE_F16, err);
    return out->data ? 0 : -1;
}

/* ---- GGUF files: the same tensors under their GGUF names (gguf_model.h) ---- */

/* A small tensor (a norm, the DeltaNet's conv taps [rows x cols] and
 * per-head values; cols 0: a vector of rows), widened to float32. */
static int gguf_floats(ModelWeights *w, const char *name, int rows, int cols, float **out, Error *err) {
    GgufSlice s;
    if (gguf_model_find(&w->gguf, name, rows, cols, &s, err)) return -1;
    if (s.type != GGUF_TYPE_F32 && s.type != GGUF_TYPE_F16 && s.type != GGUF_TYPE_BF16)
        return error_set(err, "tensor '%s' is %s; a norm or other small tensor must be f32, f16 or "
                              "bf16", s.gguf_name, gguf_type_name(s.type));
    size_t n = (size_t)rows * (size_t)(cols ? cols : 1);
    float *v = own(w, sizeof(float) * n, err);
    if (!v) return -1;
    const uint8_t *src = s.data;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        if (s.type == GGUF_TYPE_F32) {
            memcpy(&v[i], src + 4 * i, 4);
            continue;
        }
        memcpy(&h, src + 2 * i, 2);
        v[i] = s.type == GGUF_TYPE_F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    *out = v;
    return 0;
}

/* Quantized, bf16 and f32 matrices are used in place (the data section is
 * aligned); f16 is widened to f32 as from safetensors. */
static int gguf_matrix(ModelWeights *w, const char *name, int rows, int cols, Weight *out,
                       Error *err) {
    GgufSlice s;
    if (gguf_model_find(&w->gguf, name, rows, cols, &s, err)) return -1;
    *out = (Weight){.data = s.data, .rows = rows, .cols = cols};
    switch (s.type) {
    case GGUF_TYPE_BF16: out->type = WEIGHT_BF16; return 0;
    case GGUF_TYPE_F32: out->type = WEIGHT_F32; return 0;
    case GGUF_TYPE_Q8_0: out->type = WEIGHT_Q8_0; return 0;
    case GGUF_TYPE_Q4_K: out->type = WEIGHT_Q4_K; return 0;
    case GGUF_TYPE_Q5_K: out->type = WEIGHT_Q5_K; return 0;
    case GGUF_TYPE_Q6_K: out->type = WEIGHT_Q6_K; return 0;
    case GGUF_TYPE_Q4_0: out->type = WEIGHT_Q4_0; return 0;
    case GGUF_TYPE_Q5_0: out->type = WEIGHT_Q5_0; return 0;
    case GGUF_TYPE_IQ4_NL: out->type = WEIGHT_IQ4_NL; return 0;
    case GGUF_TYPE_F16:
        out->type = WEIGHT_F32;
        out->data = widen_to_f32(w, s.data, (size_t)rows * (size_t)cols, true, err);
        return out->data ? 0 : -1;
    default:
        return error_set(err, "tensor '%s' is %s; supported types: f32, f16, bf16, q8_0, q4_0, q5_0, "
                              "iq4_nl, q4_K, q5_K, q6_K (Q4_0, Q5_0, IQ4_NL, Q4_K_M, Q5_K_M, Q6_K and Q8_0 "
                              "files)",
                         s.gguf_name, gguf_type_name(s.type));
    }
}

/* ---- dummies: the same tensors from (seed, name) ---- */

/* Norms near 1 (1 + 0.1 u), as trained models have them; the DeltaNet's
 * small tensors (conv taps, A_log, dt_bias) get the same, which keeps its
 * decay moderate (g near -exp(1) * softplus(1)). */
static int dummy_floats(ModelWeights *w, const char *name, size_t n, float **out, Error *err) {
    float *v = own(w, sizeof(float) * n, err);
    if (!v) return -1;
    uint64_t key = dummy_key(name, w->dummy_seed);
    for (size_t i = 0; i < n; i++) v[i] = 1.0f + dummy_value(key, (uint64_t)i, 0.1f);
    *out = v;
    return 0;
}

/* Variance 1 / fan_in (uniform of amplitude sqrt(3 / cols)); the embedding's 1.
 * An FP8 config's layer matrices (but the router, bf16 in Qwen's
 * checkpoints) are FP8 dummies (dummy_fp8) with one scale for every tile
 * that gives them the same variance. */
static int dummy_matrix(ModelWeights *w, const char *name, int rows, int cols, Weight *out, Error *err) {
    bool embed = strcmp(name, "model.embed_tokens.weight") == 0;
    *out = (Weight){.type = WEIGHT_BF16, .rows = rows, .cols = cols, .key = dummy_key(name, w->dummy_seed),
                    .amplitude = embed ? 1.7320508f : (float)sqrt(3.0 / cols)};
    if (!fp8_allowed(w, name) || strstr(name, "mlp.gate.weight")) return 0;
    size_t n = fp8_scale_count(rows, cols);
    float *scales = own(w, n * sizeof(float), err);
    if (!scales) return -1;
    for (size_t i = 0; i < n; i++) scales[i] = out->amplitude / (1.7320508f * DUMMY_FP8_RMS);
    out->type = WEIGHT_F8_E4M3;
    out->scales = scales;
    return 0;
}

static int source_floats(ModelWeights *w, const char *name, int ndim, const int64_t *shape,
                         float **out, Error *err) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    if (w->dummy) return dummy_floats(w, name, n, out, err);
    /* GGUF: [rows, 1, cols] (the conv taps) is a rows x cols matrix there */
    if (w->gguf.map)
        return gguf_floats(w, name, (int)shape[0], ndim == 1 ? 0 : (int)shape[ndim - 1], out, err);
    return checkpoint_floats(w, name, ndim, shape, out, err);
}

/* A model RMSNorm's weight: Qwen3.5's are zero-centred (x * (1 + w)), and
 * are stored as 1 + w so every norm is applied alike (model_weights.h); a
 * dummy one is near 1 already. */
static int source_norm(ModelWeights *w, const char *name, int n, const float **out, Error *err) {
    int64_t shape[1] = {n};
    float *v;
    if (source_floats(w, name, 1, shape, &v, err)) return -1;
    if (w->config.hybrid && !w->dummy && !w->gguf.map) /* a GGUF file holds 1 + w */
        for (int i = 0; i < n; i++) v[i] += 1.0f;
    *out = v;
    return 0;
}

static int source_matrix(ModelWeights *w, const char *name, int rows, int cols, Weight *out,
                         Error *err) {
    if (w->gguf.map) return gguf_matrix(w, name, rows, cols, out, err);
    if (!w->dummy) return checkpoint_matrix(w, name, rows, cols, out, err);
    return dummy_matrix(w, name, rows, cols, out, err);
}

/* ---- the tensors of a layer ---- */

static int load_experts(ModelWeights *w, int i, LayerWeights *L, Error *err) {
    const ModelConfig *c = &w->config;
    int H = c->hidden_size, MI = c->moe_intermediate_size, SI = c->shared_expert_intermediate_size;
    char name[160];
    snprintf(name, sizeof name, "model.layers.%d.mlp.gate.weight", i);
    if (source_matrix(w, name, c->num_experts, H, &L->router, err)) return -1;
    for (int e = 0; e < c->num_experts; e++) {
        ExpertWeights *x = &L->experts[e];
#define EXPERT(proj) (snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.%s", i, e, proj), name)
        if (source_matrix(w, EXPERT("gate_proj.weight"), MI, H, &x->gate_proj, err) ||
            source_matrix(w, EXPERT("up_proj.weight"), MI, H, &x->up_proj, err) ||
            source_matrix(w, EXPERT("down_proj.weight"), H, MI, &x->down_proj, err))
            return -1;
#undef EXPERT
    }
    if (SI == 0) { /* tensors of a shared expert the config says nothing of would be dropped silently */
        char buf[256];
        snprintf(name, sizeof name, "model.layers.%d.mlp.shared_expert.gate_proj.weight", i);
        const char *found = NULL;
        if (w->gguf.map) {
            snprintf(buf, sizeof buf, "blk.%d.ffn_gate_shexp.weight", i);
            if (gguf_find_tensor(&w->gguf, buf)) found = buf;
        } else if (!w->dummy) {
            const char *cname = checkpoint_name(w, name, buf, sizeof buf);
            if (safetensors_find(&w->checkpoint, cname)) found = cname;
        }
        if (found)
            return error_set(err, "tensor '%s' is a shared expert's, but the config gives it no size "
                                  "(shared_expert_intermediate_size / expert_shared_feed_forward_length 0 "
                                  "or missing)", found);
        return 0;
    }
    SharedExpertWeights *s = &L->shared;
#define SHARED(proj) (snprintf(name, sizeof name, "model.layers.%d.mlp.%s", i, proj), name)
    if (source_matrix(w, SHARED("shared_expert.gate_proj.weight"), SI, H, &s->gate_proj, err) ||
        source_matrix(w, SHARED("shared_expert.up_proj.weight"), SI, H, &s->up_proj, err) ||
        source_matrix(w, SHARED("shared_expert.down_proj.weight"), H, SI, &s->down_proj, err) ||
        source_matrix(w, SHARED("shared_expert_gate.weight"), 1, H, &s->gate, err))
        return -1;
#undef SHARED
    return 0;
}

/* Qwen3.5's Gated DeltaNet tensors (model_weights.h's LinearAttnWeights). */
static int load_linear_attn(ModelWeights *w, int i, LinearAttnWeights *A, Error *err) {
    const ModelConfig *c = &w->config;
    int H = c->hidden_size, Hv = c->linear_num_v_heads, V = model_config_linear_value_dim(c);
    int conv = model_config_linear_conv_dim(c);
    int64_t conv_shape[3] = {conv, 1, c->linear_conv_kernel}, heads[1] = {Hv}, dv[1] = {c->linear_v_dim};
    float *conv_w, *A_log, *dt_bias, *norm;
    char name[128];
#define NAME(suffix) (snprintf(name, sizeof name, "model.layers.%d.linear_attn.%s", i, suffix), name)
    if (source_matrix(w, NAME("in_proj_qkv.weight"), conv, H, &A->in_proj_qkv, err) ||
        source_matrix(w, NAME("in_proj_z.weight"), V, H, &A->in_proj_z, err) ||
        source_matrix(w, NAME("in_proj_b.weight"), Hv, H, &A->in_proj_b, err) ||
        source_matrix(w, NAME("in_proj_a.weight"), Hv, H, &A->in_proj_a, err) ||
        source_matrix(w, NAME("out_proj.weight"), H, V, &A->out_proj, err) ||
        source_floats(w, NAME("conv1d.weight"), 3, conv_shape, &conv_w, err) ||
        source_floats(w, NAME("A_log"), 1, heads, &A_log, err) ||
        source_floats(w, NAME("dt_bias"), 1, heads, &dt_bias, err) ||
        source_floats(w, NAME("norm.weight"), 1, dv, &norm, err))
        return -1;
#undef NAME
    if (w->gguf.map) /* the file holds A = -exp(A_log) (gguf_model.c) */
        for (int h = 0; h < Hv; h++) {
            if (!(A_log[h] < 0.0f) || !isfinite(A_log[h]))
                return error_set(err, "tensor 'blk.%d.ssm_a': value %d is %g (the decay -exp(A_log) "
                                      "must be negative)", i, h, (double)A_log[h]);
            A_log[h] = logf(-A_log[h]);
        }
    for (int h = 0; h < Hv; h++)
        if (!isfinite(A_log[h]) || A_log[h] > 30.0f)
            return error_set(err, "tensor 'model.layers.%d.linear_attn.A_log': value %d is %g (the "
                                  "decay exp(A_log) must be finite)", i, h, (double)A_log[h]);
    A->conv = conv_w;
    A->A_log = A_log;
    A->dt_bias = dt_bias;
    A->norm = norm;
    return 0;
}

static int load_attention(ModelWeights *w, int i, LayerWeights *L, Error *err) {
    const ModelConfig *c = &w->config;
    int H = c->hidden_size, D = c->head_dim;
    int q_dim = c->num_heads * D, kv_dim = c->num_kv_heads * D;
    int q_rows = c->attn_output_gate ? 2 * q_dim : q_dim;
    char name[128];
#define NAME(suffix) (snprintf(name, sizeof name, "model.layers.%d.self_attn.%s", i, suffix), name)
    if (source_norm(w, NAME("q_norm.weight"), D, &L->q_norm, err) ||
        source_norm(w, NAME("k_norm.weight"), D, &L->k_norm, err) ||
        source_matrix(w, NAME("q_proj.weight"), q_rows, H, &L->q_proj, err) ||
        source_matrix(w, NAME("k_proj.weight"), kv_dim, H, &L->k_proj, err) ||
        source_matrix(w, NAME("v_proj.weight"), kv_dim, H, &L->v_proj, err) ||
        source_matrix(w, NAME("o_proj.weight"), H, q_dim, &L->o_proj, err))
        return -1;
#undef NAME
    return 0;
}

static int load_layer(ModelWeights *w, int i, Error *err) {
    const ModelConfig *c = &w->config;
    LayerWeights *L = &w->layers[i];
    int H = c->hidden_size, I = c->intermediate_size;
    char name[128];
#define NAME(suffix) (snprintf(name, sizeof name, "model.layers.%d.%s", i, suffix), name)
    L->linear = model_config_layer_is_linear(c, i);
    if (source_norm(w, NAME("input_layernorm.weight"), H, &L->input_norm, err) ||
        source_norm(w, NAME("post_attention_layernorm.weight"), H, &L->post_attention_norm, err) ||
        (L->linear ? load_linear_attn(w, i, &L->linear_attn, err) : load_attention(w, i, L, err)))
        return -1;
    if (L->experts) return load_experts(w, i, L, err);
    if (source_matrix(w, NAME("mlp.gate_proj.weight"), I, H, &L->gate_proj, err) ||
        source_matrix(w, NAME("mlp.up_proj.weight"), I, H, &L->up_proj, err) ||
        source_matrix(w, NAME("mlp.down_proj.weight"), H, I, &L->down_proj, err))
        return -1;
#undef NAME
    return 0;
}

/* Everything but the checkpoint, which the caller has opened (or not, for a dummy). */
static int load_tensors(ModelWeights *w, Error *err) {
    const ModelConfig *c = &w->config;
    int V = c->vocab_size, H = c->hidden_size, sparse = 0;
    for (int l = 0; l < c->num_layers; l++) sparse += model_config_layer_is_sparse(c, l);
    if (c->num_layers < 1) return error_set(err, "the model has no layers");
    w->layers = calloc((size_t)c->num_layers, sizeof *w->layers);
    if (sparse) w->experts = calloc((size_t)sparse * (size_t)c->num_experts, sizeof *w->experts);
    if (!w->layers || (sparse && !w->experts)) return error_set(err, "out of memory");
    for (int l = 0, s = 0; l < c->num_layers; l++)
        if (model_config_layer_is_sparse(c, l)) w->layers[l].experts = w->experts + (size_t)s++ * c->num_experts;
    if (source_matrix(w, "model.embed_tokens.weight", V, H, &w->embed_tokens, err) ||
        source_norm(w, "model.norm.weight", H, &w->final_norm, err))
        return -1;
    for (int l = 0; l < c->num_layers; l++)
        if (load_layer(w, l, err)) return -1;
    /* Hugging Face ignores lm_head.weight when the embeddings are tied. */
    if (c->tie_word_embeddings) {
        w->lm_head = w->embed_tokens;
        return 0;
    }
    return source_matrix(w, "lm_head.weight", V, H, &w->lm_head, err);
}

int model_weights_load_with_config(ModelWeights *w, const ModelConfig *cfg, const char *model_dir,
                                   Error *err) {
    memset(w, 0, sizeof *w);
    w->config = *cfg;
    if (safetensors_open_dir(&w->checkpoint, model_dir, err)) return -1;
    int rc = load_tensors(w, err);
    if (rc) {
        error_prefix(err, "%s", model_dir);
        model_weights_free(w);
    }
    return rc;
}

int model_weights_load_dummy(ModelWeights *w, const ModelConfig *cfg, uint64_t seed, Error *err) {
    memset(w, 0, sizeof *w);
    w->config = *cfg;
    w->dummy = true;
    w->dummy_seed = seed;
    int rc = load_tensors(w, err);
    if (rc) model_weights_free(w);
    return rc;
}

static int load_gguf(ModelWeights *w, const char *path, Error *err) {
    memset(w, 0, sizeof *w);
    if (gguf_open(&w->gguf, path, err)) return -1; /* its message names the file */
    int rc = model_config_from_gguf(&w->config, &w->gguf, err);
    if (rc == 0) rc = load_tensors(w, err);
    if (rc) {
        error_prefix(err, "%s", path);
        model_weights_free(w);
    }
    return rc;
}

int model_weights_load(ModelWeights *w, const char *model_path, Error *err) {
    if (gguf_is_file(model_path)) return load_gguf(w, model_path, err);
    ModelConfig cfg;
    if (model_config_load(&cfg, model_path, err)) return -1;
    return model_weights_load_with_config(w, &cfg, model_path, err);
}

void model_weights_free(ModelWeights *w) {
    for (int i = 0; i < w->num_owned; i++) free(w->owned[i]);
    free(w->owned);
    free(w->layers);
    free(w->experts);
    safetensors_close(&w->checkpoint);
    gguf_close(&w->gguf);
    memset(w, 0, sizeof *w);
}

size_t weight_bytes(const Weight *m) {
    return (size_t)m->rows * weight_row_bytes(m->type, m->cols);
}

/* n bytes at p, which lies inside path's mapping at map, read with pread. */
static int read_from_file(const char *path, const void *map, const void *p, size_t n, void *dst,
                          Error *err) {
    size_t off = (size_t)((uintptr_t)p - (uintptr_t)map);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return error_set(err, "cannot reopen %s: %s", path, strerror(errno));
    size_t done = 0;
    while (done < n) {
        ssize_t got = pread(fd, (char *)dst + done, n - done, (off_t)(off + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            int e = got < 0 ? errno : EIO;
            close(fd);
            return error_set(err, "cannot read %s: %s", path, strerror(e));
        }
        done += (size_t)got;
    }
    close(fd);
    return 0;
}

static bool inside(const void *map, size_t size, const void *p, size_t n) {
    uintptr_t base = (uintptr_t)map, at = (uintptr_t)p;
    return map && at >= base && at - base <= size && n <= size - (at - base);
}

int model_weights_copy_matrix(const ModelWeights *m, const Weight *w, void *dst, Error *err) {
    size_t n = weight_bytes(w);
    if (!w->data && w->type == WEIGHT_F8_E4M3) {
        uint8_t *out = dst;
        for (size_t i = 0; i < n; i++) out[i] = dummy_fp8(w->key, i);
        return 0;
    }
    if (!w->data) { /* dummy */
        uint16_t *out = dst;
        for (size_t i = 0; i < n / 2; i++) out[i] = dummy_bf16(dummy_value(w->key, i, w->amplitude));
        return 0;
    }
    for (int i = 0; i < m->checkpoint.num_files; i++) {
        const MappedFile *f = &m->checkpoint.files[i];
        if (inside(f->map, f->size, w->data, n))
            return read_from_file(f->path, f->map, w->data, n, dst, err);
    }
    if (m->gguf.path && inside(m->gguf.map, m->gguf.size, w->data, n))
        return read_from_file(m->gguf.path, m->gguf.map, w->data, n, dst, err);
    memcpy(dst, w->data, n); /* converted at load time: not in any file */
    return 0;
}

bool model_weights_tied(const ModelWeights *w) { return w->config.tie_word_embeddings; }

int model_layer_max_matrices(const ModelConfig *c) {
    return 5 + (c->num_experts ? 1 + 3 * c->num_experts + 4 : 3);
}

int model_layer_matrices(const ModelConfig *c, LayerWeights *L, Weight **out) {
    int n = 0;
    if (L->linear) {
        LinearAttnWeights *A = &L->linear_attn;
        out[n++] = &A->in_proj_qkv;
        out[n++] = &A->in_proj_z;
        out[n++] = &A->in_proj_b;
        out[n++] = &A->in_proj_a;
        out[n++] = &A->out_proj;
    } else {
        out[n++] = &L->q_proj;
        out[n++] = &L->k_proj;
        out[n++] = &L->v_proj;
        out[n++] = &L->o_proj;
    }
    if (!L->experts) {
        out[n++] = &L->gate_proj;
        out[n++] = &L->up_proj;
        out[n++] = &L->down_proj;
        return n;
    }
    out[n++] = &L->router;
    for (int e = 0; e < c->num_experts; e++) {
        out[n++] = &L->experts[e].gate_proj;
        out[n++] = &L->experts[e].up_proj;
        out[n++] = &L->experts[e].down_proj;
    }
    if (c->shared_expert_intermediate_size) {
        out[n++] = &L->shared.gate_proj;
        out[n++] = &L->shared.up_proj;
        out[n++] = &L->shared.down_proj;
        out[n++] = &L->shared.gate;
    }
    return n;
}

/* The float32 vectors a layer reads besides its matrices (norms, and a
 * linear layer's conv taps and per-head constants). */
static size_t layer_vector_floats(const ModelConfig *c, const LayerWeights *L) {
    size_t n = 2 * (size_t)c->hidden_size;
    if (!L->linear) return n + 2 * (size_t)c->head_dim;
    return n + (size_t)model_config_linear_conv_dim(c) * (size_t)c->linear_conv_kernel +
           2 * (size_t)c->linear_num_v_heads + (size_t)c->linear_v_dim;
}

size_t model_weights_bytes(const ModelWeights *w) {
    const ModelConfig *c = &w->config;
    size_t bytes = weight_bytes(&w->embed_tokens) + sizeof(float) * (size_t)c->hidden_size;
    if (!model_weights_tied(w)) bytes += weight_bytes(&w->lm_head);
    Weight *mats[model_layer_max_matrices(c)];
    for (int l = 0; l < c->num_layers; l++) {
        int n = model_layer_matrices(c, &w->layers[l], mats);
        for (int i = 0; i < n; i++) bytes += weight_bytes(mats[i]);
        bytes += sizeof(float) * layer_vector_floats(c, &w->layers[l]);
    }
    return bytes;
}

/* Bytes per decode token count each matrix in its own encoding (a GGUF
 * file mixes them), the norms as float32 and one embedding row. */
ModelSize model_weights_size(const ModelWeights *w) {
    const ModelConfig *c = &w->config;
    const Weight *embed = &w->embed_tokens, *head = &w->lm_head;
    double embed_params = (double)embed->rows * embed->cols;
    double head_params = (double)head->rows * head->cols;
    ModelSize s = {embed_params + (model_weights_tied(w) ? 0 : head_params), embed->cols + head_params,
                   (double)weight_row_bytes(embed->type, embed->cols) + (double)weight_bytes(head)};
    Weight *mats[model_layer_max_matrices(c)];
    for (int l = 0; l < c->num_layers; l++) {
        int n = model_layer_matrices(c, &w->layers[l], mats);
        double total = 0, bytes = 0, norms = (double)layer_vector_floats(c, &w->layers[l]);
        for (int i = 0; i < n; i++) {
            total += (double)mats[i]->rows * mats[i]->cols;
            bytes += (double)weight_bytes(mats[i]);
        }
        double active = total;
        if (w->layers[l].experts) { /* only k of the experts */
            const ExpertWeights *x = &w->layers[l].experts[0];
            double unused = c->num_experts - c->num_experts_per_tok;
            active -= unused * ((double)x->gate_proj.rows * x->gate_proj.cols +
                                (double)x->up_proj.rows * x->up_proj.cols +
                                (double)x->down_proj.rows * x->down_proj.cols);
            bytes -= unused * (double)(weight_bytes(&x->gate_proj) + weight_bytes(&x->up_proj) +
                                       weight_bytes(&x->down_proj));
        }
        s.total_params += total + norms;
        s.active_params += active + norms;
        s.bytes_per_token += bytes + 4 * norms;
    }
    s.total_params += c->hidden_size;
    s.active_params += c->hidden_size;
    s.bytes_per_token += 4.0 * c->hidden_size;
    return s;
}

void model_weights_encodings(const ModelWeights *w, char *out, size_t size) {
    const ModelConfig *c = &w->config;
    int count[WEIGHT_TYPE_COUNT] = {0};
    count[w->embed_tokens.type]++;
    if (!model_weights_tied(w)) count[w->lm_head.type]++;
    Weight *mats[model_layer_max_matrices(c)];
    for (int l = 0; l < c->num_layers; l++) {
        int n = model_layer_matrices(c, &w->layers[l], mats);
        for (int i = 0; i < n; i++) count[mats[i]->type]++;
    }
    size_t used = 0;
    out[0] = '\0';
    for (int t = 0; t < WEIGHT_TYPE_COUNT && used < size; t++)
        if (count[t])
            used += (size_t)snprintf(out + used, size - used, "%s%d %s", used ? ", " : "", count[t],
                                     weight_type_name((WeightType)t));
}
