/*
 * cuda_runner_layers.cu - the decoder layers of one CUDA step, top to
 * bottom in cuda_runner_forward(): embed -> N x [qkv projection -> q/k norm
 * + RoPE + KV store -> paged attention -> o_proj -> the MLP block] -> the
 * final norm. cuda_runner.cu wraps it (metadata, graphs, logits, sampling).
 *
 * It also owns the residual stream (Residual): steps of a few rows let the
 * qkv, gate/up and router gemvs add the pending sublayer output and
 * normalise their own input (cuda_gemv_norm.h), checked at start-up against
 * the separate launches byte for byte (cuda_runner_check_fused_decode);
 * larger steps add and normalise in a launch of their own.
 */
#include "cuda_runner.h"
#include "cuda_runner_internal.h"

#include "cuda_check.h"
#include "cuda_gemv_check.h"
#include "cuda_kernels.h"
#include "cuda_moe.h"

extern "C" {
#include "base/log.h"
}

/* Layer l's K or V cache: bf16 values, or e4m3 bytes (kv_fp8). */
static void *k_layer(CudaRunner *r, int l) {
    return (char *)r->kv + (size_t)l * r->layer_elems * (r->kv_fp8 ? 1 : sizeof(uint16_t));
}
static void *v_layer(CudaRunner *r, int l) {
    return (char *)r->kv + ((size_t)r->num_kv_layers + l) * r->layer_elems * (r->kv_fp8 ? 1 : sizeof(uint16_t));
}
static uint16_t *k_bf16(CudaRunner *r, int l) { return (uint16_t *)k_layer(r, l); }
static uint16_t *v_bf16(CudaRunner *r, int l) { return (uint16_t *)v_layer(r, l); }
static uint8_t *k_fp8(CudaRunner *r, int l) { return (uint8_t *)k_layer(r, l); }
static uint8_t *v_fp8(CudaRunner *r, int l) { return (uint8_t *)v_layer(r, l); }

/* Decode steps (splits >= 1) read the KV cache on CUDA cores, split over
 * blocks; steps with prompt tokens (splits 0) compute on the tensor cores.
 * An fp8 cache goes to each kernel's fp8 entry point (there is no previous
 * decode kernel for it: legacy_attention is off then). */
int cuda_runner_attention(CudaRunner *r, int l, const StepLayout *L, int splits, Error *err) {
    const ModelConfig *c = &r->cfg;
    const CudaAttnSeq *seqs = (const CudaAttnSeq *)(r->meta_dev + L->seqs);
    const CudaAttnItem *items = (const CudaAttnItem *)(r->meta_dev + L->items);
    const int32_t *tables = r->meta_dev + L->tables;
    const int nh = c->num_heads, nkv = c->num_kv_heads, D = c->head_dim, bs = r->base.options.block_size;
    if (r->kv_fp8) {
        if (splits == 0 && r->flash_prefill)
            return cuda_flash_attention_fp8(r->attn, r->q, k_fp8(r, l), v_fp8(r, l), seqs, items, L->num_items,
                                            tables, nh, nkv, D, bs, r->k_scale, r->v_scale, r->stream, err);
        if (splits == 0)
            return cuda_prefill_attention_fp8(r->attn, r->q, k_fp8(r, l), v_fp8(r, l), seqs, items, L->num_items,
                                              tables, nh, nkv, D, bs, r->k_scale, r->v_scale, r->stream, err);
        return cuda_decode_attention_fp8(r->attn, r->q, k_fp8(r, l), v_fp8(r, l), seqs, items, L->num_items, tables,
                                         nh, nkv, D, bs, splits, r->split_workspace, r->split_counters, r->k_scale,
                                         r->v_scale, r->stream, err);
    }
    if (splits == 0 && r->flash_prefill)
        return cuda_flash_attention(r->attn, r->q, k_bf16(r, l), v_bf16(r, l), seqs, items, L->num_items, tables, nh,
                                    nkv, D, bs, r->stream, err);
    if (splits == 0)
        return cuda_prefill_attention(r->attn, r->q, k_bf16(r, l), v_bf16(r, l), seqs, items, L->num_items, tables,
                                      nh, nkv, D, bs, r->stream, err);
    if (r->legacy_attention)
        return cuda_attention(r->attn, r->q, k_bf16(r, l), v_bf16(r, l), seqs, items, L->num_items, tables, nh, nkv,
                              D, bs, splits, r->split_workspace, r->stream, err);
    return cuda_decode_attention(r->attn, r->q, k_bf16(r, l), v_bf16(r, l), seqs, items, L->num_items, tables, nh,
                                 nkv, D, bs, splits, r->split_workspace, r->split_counters, r->stream, err);
}

/* q/k norm + RoPE, and K and V into layer l's cache in its element type. */
static int store_kv(CudaRunner *r, int l, const CudaLayerWeights *W, const StepLayout *L, Error *err) {
    const ModelConfig *c = &r->cfg;
    const int32_t *meta = r->meta_dev;
    const float eps = (float)c->rms_norm_eps;
    if (r->kv_fp8)
        return cuda_qk_norm_rope_store_fp8(r->q, k_fp8(r, l), v_fp8(r, l), r->qkv, W->q_norm, W->k_norm, r->rope,
                                           meta + L->positions, meta + L->slots, L->num_tokens, c->num_heads,
                                           c->num_kv_heads, c->head_dim, eps, r->k_scale, r->v_scale, r->stream,
                                           err);
    return cuda_qk_norm_rope_store(r->q, k_bf16(r, l), v_bf16(r, l), r->qkv, W->q_norm, W->k_norm, r->rope,
                                   meta + L->positions, meta + L->slots, L->num_tokens, c->num_heads, c->num_kv_heads,
                                   c->head_dim, eps, r->stream, err);
}

/* delta = the layer's MLP of h: dense, or the router and the experts. */
static int mlp(CudaRunner *r, const CudaLayerWeights *W, int T, Error *err) {
    const ModelConfig *c = &r->cfg;
    const int H = c->hidden_size, I = c->intermediate_size;
    if (W->router.data)
        return runner_gemm(r, r->moe.logits, r->h, W->router, T, c->num_experts, H, err) ||
                       cuda_moe(&r->moe, r->delta, r->h, T, W->experts_gate_up, W->experts_down,
                                r->stream, err)
                   ? -1
                   : 0;
    return runner_gemm(r, r->gate_up, r->h, W->gate_up, T, 2 * I, H, err) ||
                   cuda_silu_mul(r->act, r->gate_up, T, I, r->stream, err) ||
                   runner_gemm(r, r->delta, r->act, W->down, T, H, I, err)
               ? -1
               : 0;
}

/* The residual stream through a step: x holds it, and r->delta, when
 * pending, is a sublayer's output still to be added - by cuda_add_rmsnorm
 * in place, or by the next normalising gemv, which writes the sum into the
 * spare buffer (so the two swap). */
typedef struct Residual {
    float *x, *spare;
    bool pending;
    bool fuse; /* a step of a few rows: gemvs may normalise their input */
} Residual;

/* h = RMSNorm(x += delta) * weight, as a launch of its own. */
static int add_norm(CudaRunner *r, Residual *res, const float *weight, int T, Error *err) {
    const ModelConfig *c = &r->cfg;
    const bool pending = res->pending;
    res->pending = false;
    return cuda_add_rmsnorm(res->x, pending ? r->delta : NULL, r->h, weight, T, c->hidden_size,
                            (float)c->rms_norm_eps, r->stream, err);
}

/* What a gemv over w (bf16 or FP8) needs to normalise its own input, or
 * false (then add_norm and a plain product). */
static bool fused_norm(CudaRunner *r, const Residual *res, const float *weight, CudaMatrix w, int T,
                       CudaGemvNorm *n) {
    *n = (CudaGemvNorm){res->x, res->pending ? r->delta : NULL, weight, res->spare, r->h,
                        (float)r->cfg.rms_norm_eps};
    return res->fuse && cuda_gemv_norm_fits(T, r->cfg.hidden_size, n, w);
}

/* The stream after a fused gemv added delta. */
static void fused_done(Residual *res) {
    if (res->pending) {
        float *t = res->x;
        res->x = res->spare;
        res->spare = t;
    }
    res->pending = false;
}

/* qkv = RMSNorm(x + delta) W_qkv^T: the attention's input. */
static int qkv_projection(CudaRunner *r, Residual *res, const CudaLayerWeights *W, int T, Error *err) {
    const ModelConfig *c = &r->cfg;
    const int H = c->hidden_size, QKV = (c->num_heads + 2 * c->num_kv_heads) * c->head_dim;
    CudaGemvNorm n;
    if (!fused_norm(r, res, W->input_norm, W->qkv, T, &n))
        return add_norm(r, res, W->input_norm, T, err) || runner_gemm(r, r->qkv, r->h, W->qkv, T, QKV, H, err) ? -1 : 0;
    if (cuda_gemv_norm(r->qkv, &n, W->qkv, T, QKV, H, r->stream, err)) return -1;
    fused_done(res);
    return 0;
}

/* delta = the layer's MLP of RMSNorm(x + delta); a dense one of a few rows
 * is two launches: gate/up with the norm and SiLU x up, then down; a
 * sparse one normalises in its router's gemv (whose block 0 leaves h for
 * the experts). */
static int mlp_block(CudaRunner *r, Residual *res, const CudaLayerWeights *W, int T, Error *err) {
    const ModelConfig *c = &r->cfg;
    const int H = c->hidden_size, I = c->intermediate_size;
    CudaGemvNorm n;
    if (W->router.data && !r->hybrid && fused_norm(r, res, W->post_attention_norm, W->router, T, &n)) {
        if (cuda_gemv_norm(r->moe.logits, &n, W->router, T, c->num_experts, H, r->stream, err)) return -1;
        fused_done(res);
        return cuda_moe(&r->moe, r->delta, r->h, T, W->experts_gate_up, W->experts_down, r->stream, err);
    }
    if (W->router.data || r->hybrid || !fused_norm(r, res, W->post_attention_norm, W->gate_up, T, &n))
        return add_norm(r, res, W->post_attention_norm, T, err) || mlp(r, W, T, err) ||
                       (r->hybrid && cuda_hybrid_shared_expert(r, W, T, err))
                   ? -1
                   : 0;
    if (cuda_gemv_norm_glu(r->act, &n, W->gate_up, T, I, H, r->stream, err)) return -1;
    fused_done(res);
    return runner_gemm(r, r->delta, r->act, W->down, T, H, I, err);
}

/* The fused decode path against the separate launches at the model's
 * width, once (cuda_gemv_check.h): a difference turns it off, with the
 * reason in the log, rather than letting steps of a few rows compute
 * other numbers than the rest. */
int cuda_runner_check_fused_decode(CudaRunner *r, Error *err) {
    const int H = r->cfg.hidden_size;
    const bool fp8 = r->weights.fp8_stacks > 0;
    if (r->cfg.num_experts > 0 && r->moe.glu) { /* the experts' gate/up with SiLU x up, at the model's widths */
        const int k = r->cfg.num_experts_per_tok;
        const CudaGemvExpertsCase ec = {r->cfg.num_experts < 8 ? r->cfg.num_experts : 8, 2 * k, k,
                                        r->cfg.moe_intermediate_size, H, fp8};
        char why[300];
        const int rc = cuda_gemv_experts_glu_check(ec, 5, r->stream, why, sizeof why, err);
        if (rc < 0) return error_prefix(err, "checking the experts' fused gate/up gemv");
        if (rc > 0) {
            log_info("MoE decode: SiLU x up as a launch of its own (%s)", why);
            r->moe.glu = false;
        }
    }
    if (!r->fuse_decode || r->hybrid) return 0;
    const CudaGemvNormCase cases[] = {{2, 4096, H, true, false, false}, {3, 128, H, true, true, false},
                                      {2, 4096, H, true, false, true},  {1, 128, H, true, true, true}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].fp8 && !fp8) continue;
        char why[300];
        const int rc = cuda_gemv_norm_check(cases[i], 7 + i, r->stream, why, sizeof why, err);
        if (rc < 0) return error_prefix(err, "checking the fused decode gemvs");
        if (rc > 0) {
            log_info("decode steps of up to %d rows: RMSNorm and SiLU as launches of their own (%s)",
                     CUDA_GEMV_MAX_ROWS, why);
            r->fuse_decode = false;
            r->moe.glu = false; /* the experts' gate/up shares the GLU epilogue checked here */
            return 0;
        }
    }
    log_info("decode steps of up to %d rows: RMSNorm and SiLU inside the gemvs (the same bytes as separate "
             "launches, checked)", CUDA_GEMV_MAX_ROWS);
    return 0;
}

/* splits: how decode attention splits contexts, or 0 for a step with prompt
 * tokens. Leaves h = the final norm of the stream, r->residual the stream. */
int cuda_runner_forward(CudaRunner *r, const StepLayout *L, int splits, Error *err) {
    const ModelConfig *c = &r->cfg;
    const int T = L->num_tokens, H = c->hidden_size, Q = c->num_heads * c->head_dim;
    Residual res = {r->x, r->x_spare, false, r->fuse_decode && T <= CUDA_GEMV_MAX_ROWS};
    if (cuda_embed(r->x, r->weights.embed, r->meta_dev + L->tokens, T, H, r->stream, err)) return -1;
    for (int l = 0; l < c->num_layers; l++) {
        const CudaLayerWeights *W = &r->weights.layers[l];
        int rc = r->hybrid ? add_norm(r, &res, W->input_norm, T, err) || cuda_hybrid_mixer(r, l, L, splits, err)
                           : qkv_projection(r, &res, W, T, err) || store_kv(r, l, W, L, err) ||
                                 cuda_runner_attention(r, l, L, splits, err) ||
                                 runner_gemm(r, r->delta, r->attn, W->o_proj, T, H, Q, err);
        res.pending = true;
        if (rc || mlp_block(r, &res, W, T, err)) return error_prefix(err, "layer %d", l);
        res.pending = true;
    }
    r->residual = res.x;
    return add_norm(r, &res, r->weights.final_norm, T, err);
}
