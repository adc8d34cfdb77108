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

/* Finds NAME and checks it is a float tensor of exactly the expected shape. */
static const TensorInfo *find_checked(ModelWeights *w, const char *name, int ndim,
                                      const int64_t *shape, Error *err) {
    const TensorInfo *t = safetensors_find(&w->checkpoint, name);
    /* A sentence-transformers checkpoint (Qwen3-Embedding) saves the base
     * model alone: the same tensors without the "model." prefix. */
    if (!t && strncmp(name, "model.", 6) == 0) t = safetensors_find(&w->checkpoint, name + 6);
    if (!t) {
        error_set(err, "checkpoint is missing tensor '%s'", name);
        return NULL;
    }
    if (t->dtype == DTYPE_OTHER) {
        error_set(err, "tensor '%s' has dtype %s; expected BF16, F16 or F32", name, t->dtype_name);
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

static int checkpoint_vector(ModelWeights *w, const char *name, int n, const float **out,
                             Error *err) {
    int64_t shape[1] = {n};
    const TensorInfo *t = find_checked(w, name, 1, shape, err);
    if (!t) return -1;
    float *v = own(w, sizeof(float) * (size_t)n, err);
    if (!v) return -1;
    const uint8_t *src = t->data;
    for (int i = 0; i < n; i++) {
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

/* bf16 and f32 matrices are used in place when aligned to their element size;
 * f16 (and anything misaligned) is converted into an owned buffer. */
static int checkpoint_matrix(ModelWeights *w, const char *name, int rows, int cols, Weight *out,
                             Error *err) {
    int64_t shape[2] = {rows, cols};
    const TensorInfo *t = find_checked(w, name, 2, shape, err);
    if (!t) return -1;
    size_t n = (size_t)rows * (size_t)cols;
    out->rows = rows;
    out->cols = cols;
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
    float *f = own(w, n * sizeof(float), err);
    if (!f) return -1;
    const uint8_t *src = t->data;
    for (size_t i = 0; i < n; i++) {
        if (t->dtype == DTYPE_F32) {
            memcpy(&f[i], src + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            f[i] = f16_to_f32(h);
        }
    }
    out->data = f;
    return 0;
}

/* ---- dummies: the same tensors from (seed, name) ---- */

/* Norms near 1 (1 + 0.1 u), as trained models have them. */
static int dummy_vector(ModelWeights *w, const char *name, int n, const float **out, Error *err) {
    float *v = own(w, sizeof(float) * (size_t)n, err);
    if (!v) return -1;
    uint64_t key = dummy_key(name, w->dummy_seed);
    for (int i = 0; i < n; i++) v[i] = 1.0f + dummy_value(key, (uint64_t)i, 0.1f);
    *out = v;
    return 0;
}

/* Variance 1 / fan_in (uniform of amplitude sqrt(3 / cols)); the embedding's 1. */
static void dummy_matrix(ModelWeights *w, const char *name, int rows, int cols, Weight *out) {
    bool embed = strcmp(name, "model.embed_tokens.weight") == 0;
    *out = (Weight){NULL, WEIGHT_BF16, rows, cols, dummy_key(name, w->dummy_seed),
                    embed ? 1.7320508f : (float)sqrt(3.0 / cols)};
}

static int source_vector(ModelWeights *w, const char *name, int n, const float **out, Error *err) {
    return w->dummy ? dummy_vector(w, name, n, out, err) : checkpoint_vector(w, name, n, out, err);
}

static int source_matrix(ModelWeights *w, const char *name, int rows, int cols, Weight *out,
                         Error *err) {
    if (!w->dummy) return checkpoint_matrix(w, name, rows, cols, out, err);
    dummy_matrix(w, name, rows, cols, out);
    return 0;
}

/* ---- the tensors of a layer ---- */

static int load_experts(ModelWeights *w, int i, LayerWeights *L, Error *err) {
    const ModelConfig *c = &w->config;
    int H = c->hidden_size, MI = c->moe_intermediate_size;
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
    return 0;
}

static int load_layer(ModelWeights *w, int i, Error *err) {
    const ModelConfig *c = &w->config;
    LayerWeights *L = &w->layers[i];
    int H = c->hidden_size, D = c->head_dim, I = c->intermediate_size;
    int q_dim = c->num_heads * D, kv_dim = c->num_kv_heads * D;
    char name[128];
#define NAME(suffix) (snprintf(name, sizeof name, "model.layers.%d.%s", i, suffix), name)
    if (source_vector(w, NAME("input_layernorm.weight"), H, &L->input_norm, err) ||
        source_vector(w, NAME("post_attention_layernorm.weight"), H, &L->post_attention_norm, err) ||
        source_vector(w, NAME("self_attn.q_norm.weight"), D, &L->q_norm, err) ||
        source_vector(w, NAME("self_attn.k_norm.weight"), D, &L->k_norm, err) ||
        source_matrix(w, NAME("self_attn.q_proj.weight"), q_dim, H, &L->q_proj, err) ||
        source_matrix(w, NAME("self_attn.k_proj.weight"), kv_dim, H, &L->k_proj, err) ||
        source_matrix(w, NAME("self_attn.v_proj.weight"), kv_dim, H, &L->v_proj, err) ||
        source_matrix(w, NAME("self_attn.o_proj.weight"), H, q_dim, &L->o_proj, err))
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
        source_vector(w, "model.norm.weight", H, &w->final_norm, err))
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

int model_weights_load(ModelWeights *w, const char *model_dir, Error *err) {
    ModelConfig cfg;
    if (model_config_load(&cfg, model_dir, err)) return -1;
    return model_weights_load_with_config(w, &cfg, model_dir, err);
}

void model_weights_free(ModelWeights *w) {
    for (int i = 0; i < w->num_owned; i++) free(w->owned[i]);
    free(w->owned);
    free(w->layers);
    free(w->experts);
    safetensors_close(&w->checkpoint);
    memset(w, 0, sizeof *w);
}

size_t weight_bytes(const Weight *m) {
    return (size_t)m->rows * (size_t)m->cols * (m->type == WEIGHT_BF16 ? 2 : 4);
}

int model_weights_copy_matrix(const ModelWeights *m, const Weight *w, void *dst, Error *err) {
    size_t n = weight_bytes(w);
    if (!w->data) { /* dummy */
        uint16_t *out = dst;
        for (size_t i = 0; i < n / 2; i++) out[i] = dummy_bf16(dummy_value(w->key, i, w->amplitude));
        return 0;
    }
    uintptr_t p = (uintptr_t)w->data;
    for (int i = 0; i < m->checkpoint.num_files; i++) {
        const MappedFile *f = &m->checkpoint.files[i];
        uintptr_t base = (uintptr_t)f->map;
        if (p < base || p - base > f->size || n > f->size - (p - base)) continue;
        int fd = open(f->path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return error_set(err, "cannot reopen %s: %s", f->path, strerror(errno));
        size_t done = 0;
        while (done < n) {
            ssize_t got = pread(fd, (char *)dst + done, n - done, (off_t)(p - base + done));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                int e = got < 0 ? errno : EIO;
                close(fd);
                return error_set(err, "cannot read %s: %s", f->path, strerror(e));
            }
            done += (size_t)got;
        }
        close(fd);
        return 0;
    }
    memcpy(dst, w->data, n); /* converted at load time: not in any file */
    return 0;
}

bool model_weights_tied(const ModelWeights *w) { return w->config.tie_word_embeddings; }

int model_layer_max_matrices(const ModelConfig *c) { return 4 + (c->num_experts ? 1 + 3 * c->num_experts : 3); }

int model_layer_matrices(const ModelConfig *c, LayerWeights *L, Weight **out) {
    int n = 0;
    out[n++] = &L->q_proj;
    out[n++] = &L->k_proj;
    out[n++] = &L->v_proj;
    out[n++] = &L->o_proj;
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
    return n;
}

size_t model_weights_bytes(const ModelWeights *w) {
    const ModelConfig *c = &w->config;
    size_t bytes = weight_bytes(&w->embed_tokens) + sizeof(float) * (size_t)c->hidden_size;
    if (!model_weights_tied(w)) bytes += weight_bytes(&w->lm_head);
    Weight *mats[model_layer_max_matrices(c)];
    for (int l = 0; l < c->num_layers; l++) {
        int n = model_layer_matrices(c, &w->layers[l], mats);
        for (int i = 0; i < n; i++) bytes += weight_bytes(mats[i]);
        bytes += sizeof(float) * (size_t)(2 * c->hidden_size + 2 * c->head_dim);
    }
    return bytes;
}

ModelSize model_weights_size(const ModelWeights *w) {
    const ModelConfig *c = &w->config;
    double per_param = w->embed_tokens.type == WEIGHT_BF16 ? 2 : 4;
    double embed = (double)w->embed_tokens.rows * w->embed_tokens.cols;
    double head = model_weights_tied(w) ? 0 : (double)w->lm_head.rows * w->lm_head.cols;
    ModelSize s = {embed + head, (double)w->embed_tokens.cols + (double)w->lm_head.rows * w->lm_head.cols, 0};
    Weight *mats[model_layer_max_matrices(c)];
    for (int l = 0; l < c->num_layers; l++) {
        int n = model_layer_matrices(c, &w->layers[l], mats);
        double total = 0, norms = 2.0 * c->hidden_size + 2.0 * c->head_dim;
        for (int i = 0; i < n; i++) total += (double)mats[i]->rows * mats[i]->cols;
        double active = total;
        if (w->layers[l].experts) { /* only k of the experts */
            const ExpertWeights *x = &w->layers[l].experts[0];
            double expert = (double)x->gate_proj.rows * x->gate_proj.cols +
                            (double)x->up_proj.rows * x->up_proj.cols +
                            (double)x->down_proj.rows * x->down_proj.cols;
            active -= expert * (c->num_experts - c->num_experts_per_tok);
        }
        s.total_params += total + norms;
        s.active_params += active + norms;
    }
    s.total_params += c->hidden_size;
    s.active_params += c->hidden_size;
    s.bytes_per_token = s.active_params * per_param;
    return s;
}
