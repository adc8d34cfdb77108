/*
 * cuda_weights.cu - upload of the weights (see cuda_weights.h).
 *
 * Two passes over the same plan: the first only adds up the sizes (every
 * piece 256-byte aligned), the second places and copies. bf16 matrices are
 * copied straight from the checkpoint mapping; f32 ones go through a small
 * host buffer in slices, rounded to bf16 as half.h does. FP8 stacks copy
 * their bytes as they are and their scales spread to one row each
 * (fp8_row_scales); an FP8 part of a bf16 stack is dequantized on the host
 * with the reference (fp8_dequantize_rows) and rounded to bf16.
 */
#include "cuda_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_fp8_plan.h"
#include "cuda_kernels.h"

extern "C" {
#include "base/half.h"
#include "base/log.h"
}
#include "model/dummy_weights.h"

#define ALIGN 256
#define CONVERT_SLICE (1u << 22) /* values per f32 -> bf16 slice */

typedef struct Plan {
    char *base; /* NULL in the sizing pass */
    size_t used;
    uint16_t *convert; /* [CONVERT_SLICE] host buffer for f32 and FP8 -> bf16 */
    float *widened;    /* [CONVERT_SLICE] host buffer for FP8 -> float32 */
    const ModelWeights *model;
    CudaWeights *out;
} Plan;

static void *place(Plan *p, size_t bytes) {
    size_t at = (p->used + ALIGN - 1) / ALIGN * ALIGN;
    p->used = at + bytes;
    return p->base ? p->base + at : NULL;
}

static unsigned fill_grid(size_t n) {
    size_t blocks = (n + 255) / 256;
    return (unsigned)(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

__global__ void dummy_fill_kernel(uint16_t *dst, size_t n, uint64_t key, float amplitude) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = dummy_bf16(dummy_value(key, i, amplitude));
}

__global__ void dummy_fp8_fill_kernel(uint8_t *dst, size_t n, uint64_t key) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = dummy_fp8(key, i);
}

/* An FP8 matrix into a bf16 stack: its bytes (generated for a dummy) on the
 * host, dequantized a slice of rows at a time and rounded to bf16. */
static int put_fp8_as_bf16(Plan *p, uint16_t *dst, const Weight *w, Error *err) {
    const size_t n = (size_t)w->rows * w->cols;
    const uint8_t *q = (const uint8_t *)w->data;
    uint8_t *bytes = NULL;
    if (!q) {
        if (!(bytes = (uint8_t *)malloc(n))) return error_set(err, "out of memory (FP8 weights, %zu bytes)", n);
        if (model_weights_copy_matrix(p->model, w, bytes, err)) {
            free(bytes);
            return -1;
        }
        q = bytes;
    }
    int rows_per_slice = (int)(CONVERT_SLICE / (size_t)w->cols), rc = 0;
    if (rows_per_slice < 1) rc = error_set(err, "an FP8 matrix of %d columns (at most %u)", w->cols, CONVERT_SLICE);
    for (int n0 = 0; rc == 0 && n0 < w->rows; n0 += rows_per_slice) {
        const int n1 = w->rows - n0 < rows_per_slice ? w->rows : n0 + rows_per_slice;
        const size_t len = (size_t)(n1 - n0) * w->cols;
        fp8_dequantize_rows(q, w->scales, w->cols, n0, n1, p->widened);
        for (size_t i = 0; i < len; i++) p->convert[i] = f32_to_bf16(p->widened[i]);
        cudaError_t st = cudaMemcpy(dst + (size_t)n0 * w->cols, p->convert, len * sizeof(uint16_t),
                                    cudaMemcpyHostToDevice);
        if (st != cudaSuccess) rc = cuda_fail(err, "uploading the weights", st);
    }
    free(bytes);
    return rc;
}

static int put_matrix(Plan *p, uint16_t *dst, const Weight *w, Error *err) {
    size_t n = (size_t)w->rows * w->cols;
    if (w->type == WEIGHT_F8_E4M3) return put_fp8_as_bf16(p, dst, w, err);
    if (!w->data) { /* dummy: made where it lives */
        dummy_fill_kernel<<<fill_grid(n), 256>>>(dst, n, w->key, w->amplitude);
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

/* An FP8 stack: each part's bytes (a dummy's generated in place), then
 * every row's scales, spread on the host and copied in one go. */
static int put_fp8_stack(uint8_t *bytes, float *scales, const Weight *const *parts, int n, Error *err) {
    const int cols = parts[0]->cols;
    size_t rows = 0;
    for (int i = 0; i < n; i++) rows += (size_t)parts[i]->rows;
    float *host = (float *)malloc(rows * (size_t)fp8_col_tiles(cols) * sizeof(float));
    if (!host) return error_set(err, "out of memory (FP8 scales of %zu rows)", rows);
    size_t row0 = 0;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const Weight *w = parts[i];
        const size_t count = (size_t)w->rows * cols;
        uint8_t *dst = bytes + row0 * cols;
        if (!w->data) {
            dummy_fp8_fill_kernel<<<fill_grid(count), 256>>>(dst, count, w->key);
            cudaError_t st = cudaGetLastError();
            if (st != cudaSuccess) rc = cuda_fail(err, "launching the dummy FP8 weight kernel", st);
        } else {
            cudaError_t st = cudaMemcpy(dst, w->data, count, cudaMemcpyHostToDevice);
            if (st != cudaSuccess) rc = cuda_fail(err, "uploading the weights", st);
        }
        fp8_row_scales(host + fp8_row_scale_count((int)row0, cols), w->scales, w->rows, cols);
        row0 += (size_t)w->rows;
    }
    if (rc == 0) {
        cudaError_t st = cudaMemcpy(scales, host, rows * (size_t)fp8_col_tiles(cols) * sizeof(float),
                                    cudaMemcpyHostToDevice);
        if (st != cudaSuccess) rc = cuda_fail(err, "uploading the FP8 scales", st);
    }
    free(host);
    return rc;
}

/* Places the matrices one after another (rows stacked) as one matrix: FP8
 * with per-row scales when every part is FP8 and keep_fp8 (the kernels
 * that read this stack take FP8), else bf16. `what` names it in the log. */
static int stack(Plan *p, CudaMatrix *out, const Weight *const *parts, int n, bool keep_fp8, const char *what,
                 Error *err) {
    size_t total = 0;
    int fp8 = 0;
    for (int i = 0; i < n; i++) {
        total += (size_t)parts[i]->rows * parts[i]->cols;
        fp8 += parts[i]->type == WEIGHT_F8_E4M3;
    }
    if (keep_fp8 && n > 0 && fp8 == n) {
        const size_t rows = total / (size_t)parts[0]->cols;
        const size_t scale_bytes = fp8_row_scale_count((int)rows, parts[0]->cols) * sizeof(float);
        uint8_t *bytes = (uint8_t *)place(p, total);
        float *scales = (float *)place(p, scale_bytes);
        *out = (CudaMatrix){bytes, scales, NULL};
        if (!p->base) return 0;
        p->out->fp8_stacks++;
        p->out->fp8_bytes += total + scale_bytes;
        return put_fp8_stack(bytes, scales, parts, n, err);
    }
    uint16_t *dst = (uint16_t *)place(p, total * sizeof(uint16_t));
    *out = (CudaMatrix){dst, NULL, NULL};
    if (!p->base) return 0;
    if (fp8 > 0) {
        p->out->dequantized_stacks++;
        log_info("%s: %d of %d matrices are FP8 and %s; dequantized to bf16 on upload (2 bytes a weight)", what,
                 fp8, n, keep_fp8 ? "the others are not" : "the kernels here read bf16");
    }
    for (int i = 0; i < n; i++) {
        if (put_matrix(p, dst, parts[i], err)) return -1;
        dst += (size_t)parts[i]->rows * parts[i]->cols;
    }
    return 0;
}

/* A bf16-only matrix (embeddings, lm_head): its data pointer. */
static int stack_bf16(Plan *p, uint16_t **out, const Weight *w, const char *what, Error *err) {
    const Weight *parts[1] = {w};
    CudaMatrix m;
    if (stack(p, &m, parts, 1, false, what, err)) return -1;
    *out = (uint16_t *)m.data;
    return 0;
}

/* An FP8 stack's scales per 128 x 128 tile (cuBLASLt's layout), when every
 * part is whole tiles: the stack's tiles are then the parts' tiles. */
static int put_tile_scales(Plan *p, CudaMatrix *out, const Weight *const *parts, int n, Error *err) {
    const int cols = parts[0]->cols;
    int rows = 0;
    for (int i = 0; i < n; i++) {
        if (parts[i]->rows % FP8_BLOCK || parts[i]->cols != cols) return 0;
        rows += parts[i]->rows;
    }
    if (cols % FP8_BLOCK) return 0;
    const size_t count = fp8_tile_scale_count(rows, cols);
    float *tiles = (float *)place(p, count * sizeof(float));
    out->tile_scales = tiles;
    if (!p->base) return 0;
    float *host = (float *)malloc(count * sizeof(float));
    if (!host) return error_set(err, "out of memory (FP8 tile scales of %d rows)", rows);
    for (int i = 0, row0 = 0; i < n; row0 += parts[i]->rows, i++)
        fp8_padded_tile_scales(host + fp8_tile_scale_count(row0, cols), parts[i]->scales, parts[i]->rows, cols);
    cudaError_t st = cudaMemcpy(tiles, host, count * sizeof(float), cudaMemcpyHostToDevice);
    free(host);
    if (st != cudaSuccess) return cuda_fail(err, "uploading the FP8 tile scales", st);
    p->out->fp8_bytes += count * sizeof(float);
    p->out->fp8_tiled_stacks++;
    if (cols > p->out->fp8_widest) p->out->fp8_widest = cols;
    return 0;
}

/* A stack cuda_matmul multiplies: the FP8 scratch must hold it (or a tile). */
static int dense(Plan *p, CudaMatrix *out, const Weight *const *parts, int n, const char *what, Error *err) {
    if (stack(p, out, parts, n, true, what, err)) return -1;
    if (out->scales) {
        size_t elems = 0;
        for (int i = 0; i < n; i++) elems += (size_t)parts[i]->rows * parts[i]->cols;
        if (elems > p->out->fp8_largest) p->out->fp8_largest = elems;
        if (put_tile_scales(p, out, parts, n, err)) return -1;
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
static int lay_out_experts(Plan *p, CudaLayerWeights *dst, const LayerWeights *src, int experts, int l,
                           Error *err) {
    const Weight **parts = (const Weight **)malloc(sizeof *parts * 2 * (size_t)experts);
    if (!parts) return error_set(err, "out of memory");
    char what[64];
    snprintf(what, sizeof what, "layer %d's router", l);
    const Weight *router[1] = {&src->router};
    int rc = dense(p, &dst->router, router, 1, what, err);
    for (int e = 0; e < experts; e++) {
        parts[2 * e] = &src->experts[e].gate_proj;
        parts[2 * e + 1] = &src->experts[e].up_proj;
    }
    snprintf(what, sizeof what, "layer %d's experts' gate/up", l);
    if (rc == 0) rc = stack(p, &dst->experts_gate_up, parts, 2 * experts, true, what, err);
    for (int e = 0; e < experts; e++) parts[e] = &src->experts[e].down_proj;
    snprintf(what, sizeof what, "layer %d's experts' down", l);
    if (rc == 0) rc = stack(p, &dst->experts_down, parts, experts, true, what, err);
    free(parts);
    return rc;
}

/* A Gated DeltaNet layer's projections (bf16) and its float32 vectors. */
static int lay_out_linear(Plan *p, CudaLayerWeights *dst, const LayerWeights *src, const ModelConfig *c, int l,
                          Error *err) {
    const LinearAttnWeights *A = &src->linear_attn;
    const Weight *qkv[1] = {&A->in_proj_qkv}, *z[1] = {&A->in_proj_z}, *a[1] = {&A->in_proj_a},
                 *b[1] = {&A->in_proj_b}, *out[1] = {&A->out_proj};
    const int hv = c->linear_num_v_heads, conv = model_config_linear_conv_dim(c);
    char what[48];
    snprintf(what, sizeof what, "layer %d's linear attention", l);
    dst->linear = true;
    return dense(p, &dst->lin_qkv, qkv, 1, what, err) || dense(p, &dst->lin_z, z, 1, what, err) ||
                   dense(p, &dst->lin_a, a, 1, what, err) || dense(p, &dst->lin_b, b, 1, what, err) ||
                   dense(p, &dst->lin_out, out, 1, what, err) ||
                   vector(p, &dst->conv, A->conv, conv * c->linear_conv_kernel, err) ||
                   vector(p, &dst->A_log, A->A_log, hv, err) || vector(p, &dst->dt_bias, A->dt_bias, hv, err) ||
                   vector(p, &dst->lin_norm, A->norm, c->linear_v_dim, err)
               ? -1
               : 0;
}

/* A sparse layer's shared expert: gate and up stacked, down, the gate row. */
static int lay_out_shared(Plan *p, CudaLayerWeights *dst, const LayerWeights *src, int l, Error *err) {
    const SharedExpertWeights *S = &src->shared;
    const Weight *gate_up[2] = {&S->gate_proj, &S->up_proj}, *down[1] = {&S->down_proj}, *gate[1] = {&S->gate};
    char what[48];
    snprintf(what, sizeof what, "layer %d's shared expert", l);
    return dense(p, &dst->shared_gate_up, gate_up, 2, what, err) || dense(p, &dst->shared_down, down, 1, what, err) ||
                   dense(p, &dst->shared_gate, gate, 1, what, err)
               ? -1
               : 0;
}

static int lay_out(Plan *p, CudaWeights *w, const ModelWeights *m, Error *err) {
    const ModelConfig *c = &m->config;
    if (stack_bf16(p, &w->embed, &m->embed_tokens, "the embeddings", err)) return -1;
    if (model_weights_tied(m)) {
        w->lm_head = w->embed;
    } else if (stack_bf16(p, &w->lm_head, &m->lm_head, "lm_head", err)) {
        return -1;
    }
    if (vector(p, &w->final_norm, m->final_norm, c->hidden_size, err)) return -1;
    for (int l = 0; l < c->num_layers; l++) {
        const LayerWeights *src = &m->layers[l];
        CudaLayerWeights *dst = &w->layers[l];
        const Weight *qkv[3] = {&src->q_proj, &src->k_proj, &src->v_proj};
        const Weight *o[1] = {&src->o_proj};
        const Weight *gate_up[2] = {&src->gate_proj, &src->up_proj};
        const Weight *down[1] = {&src->down_proj};
        char what[4][48];
        snprintf(what[0], sizeof what[0], "layer %d's q/k/v", l);
        snprintf(what[1], sizeof what[1], "layer %d's o_proj", l);
        snprintf(what[2], sizeof what[2], "layer %d's gate/up", l);
        snprintf(what[3], sizeof what[3], "layer %d's down_proj", l);
        int mlp = src->experts ? lay_out_experts(p, dst, src, c->num_experts, l, err)
                               : (dense(p, &dst->gate_up, gate_up, 2, what[2], err) ||
                                  dense(p, &dst->down, down, 1, what[3], err));
        if (src->experts && c->shared_expert_intermediate_size && !mlp) mlp = lay_out_shared(p, dst, src, l, err);
        if (src->linear) { /* Qwen3.5's Gated DeltaNet layer: no q/k/v, o_proj or q/k norms */
            if (mlp || lay_out_linear(p, dst, src, c, l, err) ||
                vector(p, &dst->input_norm, src->input_norm, c->hidden_size, err) ||
                vector(p, &dst->post_attention_norm, src->post_attention_norm, c->hidden_size, err))
                return -1;
            continue;
        }
        if (mlp || dense(p, &dst->qkv, qkv, 3, what[0], err) || dense(p, &dst->o_proj, o, 1, what[1], err) ||
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
    Plan plan = {NULL, 0, NULL, NULL, m, w};
    if (!w->layers) return error_set(err, "out of memory");
    if (lay_out(&plan, w, m, err)) return -1; /* sizes only */
    w->bytes = plan.used;
    w->fp8_largest = 0;
    plan.convert = (uint16_t *)malloc(CONVERT_SLICE * sizeof(uint16_t));
    plan.widened = m->config.fp8_weights ? (float *)malloc(CONVERT_SLICE * sizeof(float)) : NULL;
    bool host_ok = plan.convert && (plan.widened || !m->config.fp8_weights);
    w->memory = host_ok ? cuda_alloc(w->bytes, err) : NULL;
    if (!host_ok) error_set(err, "out of memory");
    if (!w->memory) {
        double gb = (double)w->bytes / 1e9;
        free(plan.convert);
        free(plan.widened);
        cuda_weights_free(w);
        return error_prefix(err, "the weights (%.2f GB)", gb);
    }
    plan.base = (char *)w->memory;
    plan.used = 0;
    int rc = lay_out(&plan, w, m, err);
    free(plan.convert);
    free(plan.widened);
    if (rc) cuda_weights_free(w);
    return rc;
}

extern "C" void cuda_weights_free(CudaWeights *w) {
    cuda_free(w->memory);
    free(w->layers);
    memset(w, 0, sizeof *w);
}
