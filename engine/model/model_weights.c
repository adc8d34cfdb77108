/*
 * model_weights.c - checkpoint tensors -> ModelWeights (see model_weights.h).
 */
#include "model_weights.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/half.h"

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

static int load_vector(ModelWeights *w, const char *name, int n, const float **out, Error *err) {
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
static int load_matrix(ModelWeights *w, const char *name, int rows, int cols, Weight *out,
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

static int load_layer(ModelWeights *w, int i, Error *err) {
    const ModelConfig *c = &w->config;
    LayerWeights *L = &w->layers[i];
    int H = c->hidden_size, D = c->head_dim, I = c->intermediate_size;
    int q_dim = c->num_heads * D, kv_dim = c->num_kv_heads * D;
    char name[128];
#define NAME(suffix) (snprintf(name, sizeof name, "model.layers.%d.%s", i, suffix), name)
    if (load_vector(w, NAME("input_layernorm.weight"), H, &L->input_norm, err) ||
        load_vector(w, NAME("post_attention_layernorm.weight"), H, &L->post_attention_norm, err) ||
        load_vector(w, NAME("self_attn.q_norm.weight"), D, &L->q_norm, err) ||
        load_vector(w, NAME("self_attn.k_norm.weight"), D, &L->k_norm, err) ||
        load_matrix(w, NAME("self_attn.q_proj.weight"), q_dim, H, &L->q_proj, err) ||
        load_matrix(w, NAME("self_attn.k_proj.weight"), kv_dim, H, &L->k_proj, err) ||
        load_matrix(w, NAME("self_attn.v_proj.weight"), kv_dim, H, &L->v_proj, err) ||
        load_matrix(w, NAME("self_attn.o_proj.weight"), H, q_dim, &L->o_proj, err) ||
        load_matrix(w, NAME("mlp.gate_proj.weight"), I, H, &L->gate_proj, err) ||
        load_matrix(w, NAME("mlp.up_proj.weight"), I, H, &L->up_proj, err) ||
        load_matrix(w, NAME("mlp.down_proj.weight"), H, I, &L->down_proj, err))
        return -1;
#undef NAME
    return 0;
}

int model_weights_load_with_config(ModelWeights *w, const ModelConfig *cfg, const char *model_dir,
                                   Error *err) {
    memset(w, 0, sizeof *w);
    w->config = *cfg;
    if (safetensors_open_dir(&w->checkpoint, model_dir, err)) return -1;
    int V = cfg->vocab_size, H = cfg->hidden_size;
    int rc = 0;
    w->layers = calloc((size_t)cfg->num_layers, sizeof *w->layers);
    if (!w->layers) rc = error_set(err, "out of memory");
    if (rc == 0) rc = load_matrix(w, "model.embed_tokens.weight", V, H, &w->embed_tokens, err);
    if (rc == 0) rc = load_vector(w, "model.norm.weight", H, &w->final_norm, err);
    for (int i = 0; rc == 0 && i < cfg->num_layers; i++) rc = load_layer(w, i, err);
    if (rc == 0) {
        /* Hugging Face ignores lm_head.weight when the embeddings are tied. */
        if (cfg->tie_word_embeddings)
            w->lm_head = w->embed_tokens;
        else
            rc = load_matrix(w, "lm_head.weight", V, H, &w->lm_head, err);
    }
    if (rc) {
        error_prefix(err, "%s", model_dir);
        model_weights_free(w);
    }
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
    safetensors_close(&w->checkpoint);
    memset(w, 0, sizeof *w);
}

size_t weight_bytes(const Weight *m) {
    return (size_t)m->rows * (size_t)m->cols * (m->type == WEIGHT_BF16 ? 2 : 4);
}

int model_weights_copy_matrix(const ModelWeights *m, const Weight *w, void *dst, Error *err) {
    size_t n = weight_bytes(w);
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

size_t model_weights_bytes(const ModelWeights *w) {
    const ModelConfig *c = &w->config;
    size_t bytes = weight_bytes(&w->embed_tokens) + sizeof(float) * (size_t)c->hidden_size;
    if (w->lm_head.data != w->embed_tokens.data) bytes += weight_bytes(&w->lm_head);
    for (int i = 0; i < c->num_layers; i++) {
        const LayerWeights *L = &w->layers[i];
        bytes += weight_bytes(&L->q_proj) + weight_bytes(&L->k_proj) + weight_bytes(&L->v_proj) +
                 weight_bytes(&L->o_proj) + weight_bytes(&L->gate_proj) +
                 weight_bytes(&L->up_proj) + weight_bytes(&L->down_proj);
        bytes += sizeof(float) * (size_t)(2 * c->hidden_size + 2 * c->head_dim);
    }
    return bytes;
}
