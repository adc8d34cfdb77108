/*
 * cuda_weights.cu - upload of the weights (see cuda_weights.h).
 *
 * Two passes over the same plan: the first only adds up the sizes (every
 * piece 256-byte aligned), the second places and copies. bf16 matrices are
 * copied straight from the checkpoint mapping; f32 ones go through a small
 * host buffer in slices, rounded to bf16 as half.h does.
 */
#include "cuda_weights.h"

#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_kernels.h"

extern "C" {
#include "base/half.h"
}
#include "model/dummy_weights.h"

#define ALIGN 256
#define CONVERT_SLICE (1u << 22) /* values per f32 -> bf16 slice */

typedef struct Plan {
    char *base; /* NULL in the sizing pass */
    size_t used;
    uint16_t *convert; /* [CONVERT_SLICE] host buffer for f32 matrices */
} Plan;

static void *place(Plan *p, size_t bytes) {
    size_t at = (p->used + ALIGN - 1) / ALIGN * ALIGN;
    p->used = at + bytes;
    return p->base ? p->base + at : NULL;
}

__global__ void dummy_fill_kernel(uint16_t *dst, size_t n, uint64_t key, float amplitude) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = dummy_bf16(dummy_value(key, i, amplitude));
}

static int put_matrix(Plan *p, uint16_t *dst, const Weight *w, Error *err) {
    size_t n = (size_t)w->rows * w->cols;
    if (!w->data) { /* dummy: made where it lives */
        size_t blocks = (n + 255) / 256;
        dummy_fill_kernel<<<(unsigned)(blocks < 65535 ? blocks : 65535), 256>>>(dst, n, w->key, w->amplitude);
        CUDA_LAUNCHED("the dummy weight kernel", err);
        return 0;
    }
    if (w->type == WEIGHT_BF16) {
        CUDA_TRY(cudaMemcpy(dst, w->data, n * sizeof(uint16_t), cudaMemcpyHostToDevice),
                 "uploading the weights", err);
        return 0;
    }
    const float *src = (const float *)w->data;
    for (size_t at = 0; at < n; at += CONVERT_SLICE) {
        size_t len = n - at < CONVERT_SLICE ? n - at : CONVERT_SLICE;
        for (size_t i = 0; i < len; i++) p->convert[i] = f32_to_bf16(src[at + i]);
        CUDA_TRY(cudaMemcpy(dst + at, p->convert, len * sizeof(uint16_t), cudaMemcpyHostToDevice),
                 "uploading the weights", err);
    }
    return 0;
}

/* Places the matrices one after another (rows stacked) as one bf16 matrix. */
static int stack(Plan *p, uint16_t **out, const Weight *const *parts, int n, Error *err) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)parts[i]->rows * parts[i]->cols;
    uint16_t *dst = (uint16_t *)place(p, total * sizeof(uint16_t));
    *out = dst;
    if (!p->base) return 0;
    for (int i = 0; i < n; i++) {
        if (put_matrix(p, dst, parts[i], err)) return -1;
        dst += (size_t)parts[i]->rows * parts[i]->cols;
    }
    return 0;
}

static int vector(Plan *p, float **out, const float *src, int n, Error *err) {
    *out = (float *)place(p, (size_t)n * sizeof(float));
    if (p->base)
        CUDA_TRY(cudaMemcpy(*out, src, (size_t)n * sizeof(float), cudaMemcpyHostToDevice),
                 "uploading the weights", err);
    return 0;
}

/* A sparse layer's router and its experts, each expert's gate and up stacked. */
static int lay_out_experts(Plan *p, CudaLayerWeights *dst, const LayerWeights *src, int experts,
                           Error *err) {
    const Weight **parts = (const Weight **)malloc(sizeof *parts * 2 * (size_t)experts);
    if (!parts) return error_set(err, "out of memory");
    const Weight *router[1] = {&src->router};
    int rc = stack(p, &dst->router, router, 1, err);
    for (int e = 0; e < experts; e++) {
        parts[2 * e] = &src->experts[e].gate_proj;
        parts[2 * e + 1] = &src->experts[e].up_proj;
    }
    if (rc == 0) rc = stack(p, &dst->experts_gate_up, parts, 2 * experts, err);
    for (int e = 0; e < experts; e++) parts[e] = &src->experts[e].down_proj;
    if (rc == 0) rc = stack(p, &dst->experts_down, parts, experts, err);
    free(parts);
    return rc;
}

static int lay_out(Plan *p, CudaWeights *w, const ModelWeights *m, Error *err) {
    const ModelConfig *c = &m->config;
    const Weight *embed[1] = {&m->embed_tokens};
    if (stack(p, &w->embed, embed, 1, err)) return -1;
    if (model_weights_tied(m)) {
        w->lm_head = w->embed;
    } else {
        const Weight *head[1] = {&m->lm_head};
        if (stack(p, &w->lm_head, head, 1, err)) return -1;
    }
    if (vector(p, &w->final_norm, m->final_norm, c->hidden_size, err)) return -1;
    for (int l = 0; l < c->num_layers; l++) {
        const LayerWeights *src = &m->layers[l];
        CudaLayerWeights *dst = &w->layers[l];
        const Weight *qkv[3] = {&src->q_proj, &src->k_proj, &src->v_proj};
        const Weight *o[1] = {&src->o_proj};
        const Weight *gate_up[2] = {&src->gate_proj, &src->up_proj};
        const Weight *down[1] = {&src->down_proj};
        int mlp = src->experts ? lay_out_experts(p, dst, src, c->num_experts, err)
                               : (stack(p, &dst->gate_up, gate_up, 2, err) ||
                                  stack(p, &dst->down, down, 1, err));
        if (mlp || stack(p, &dst->qkv, qkv, 3, err) || stack(p, &dst->o_proj, o, 1, err) ||
            vector(p, &dst->input_norm, src->input_norm, c->hidden_size, err) ||
            vector(p, &dst->post_attention_norm, src->post_attention_norm, c->hidden_size, err) ||
            vector(p, &dst->q_norm, src->q_norm, c->head_dim, err) ||
            vector(p, &dst->k_norm, src->k_norm, c->head_dim, err))
            return -1;
    }
    return 0;
}

extern "C" int cuda_weights_upload(CudaWeights *w, const ModelWeights *m, Error *err) {
    memset(w, 0, sizeof *w);
    w->num_layers = m->config.num_layers;
    w->layers = (CudaLayerWeights *)calloc((size_t)w->num_layers, sizeof *w->layers);
    Plan plan = {NULL, 0, NULL};
    if (!w->layers) return error_set(err, "out of memory");
    if (lay_out(&plan, w, m, err)) return -1; /* sizes only */
    w->bytes = plan.used;
    plan.convert = (uint16_t *)malloc(CONVERT_SLICE * sizeof(uint16_t));
    w->memory = plan.convert ? cuda_alloc(w->bytes, err) : NULL;
    if (!plan.convert) error_set(err, "out of memory");
    if (!w->memory) {
        double gb = (double)w->bytes / 1e9;
        free(plan.convert);
        cuda_weights_free(w);
        return error_prefix(err, "the weights (%.2f GB)", gb);
    }
    plan.base = (char *)w->memory;
    plan.used = 0;
    int rc = lay_out(&plan, w, m, err);
    free(plan.convert);
    if (rc) cuda_weights_free(w);
    return rc;
}

extern "C" void cuda_weights_free(CudaWeights *w) {
    cuda_free(w->memory);
    free(w->layers);
    memset(w, 0, sizeof *w);
}
