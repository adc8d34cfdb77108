/*
 * cpu_runner.c - Qwen3 forward pass on the CPU (see cpu_runner.h).
 *
 * One step, read top to bottom in cpu_step():
 *   embed -> N x [RMSNorm -> q,k,v proj -> per-head q/k RMSNorm -> RoPE ->
 *   store K,V in the paged cache -> attention -> o_proj -> residual ->
 *   RMSNorm -> down(silu(gate) * up), or the experts in a sparse layer
 *   (cpu_moe.h) -> residual] -> RMSNorm -> lm_head
 * Qwen3.5 (hybrid) layers differ in three places: a linear layer's mixer is
 * the Gated DeltaNet (in_proj -> cpu_gated_deltanet.h -> out_proj) over
 * the sequence's state slot instead of attention; a full layer's attention
 * output is scaled by sigmoid of its gate and RoPE turns only the first
 * rotary_dim dims of each head; a sparse layer may add a gated shared
 * expert. Only the full layers have K/V blocks.
 * over all new tokens of all sequences at once (prefill and decode tokens
 * side by side), then greedy selection per sequence. The lm_head runs only
 * for the rows whose logits someone needs; an embedding request's rows
 * take their final-normed hidden states instead (pool_rows), the same
 * place for every ISA path since all of them end in that norm.
 */
#include "cpu_runner.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cpu_attention.h"
#include "cpu_gated_deltanet.h"
#include "cpu_kv_fp8.h"
#include "cpu_state_pool.h"
#include "cpu_matmul.h"
#include "cpu_moe.h"
#include "cpu_ops.h"
#include "cpu_weights.h"
#include "thread_pool.h"
#include "base/cpu_isa.h"
#include "base/half.h"
#include "base/log.h"

/* Where a step's time goes, kept when NANOVLLM_PROFILE is set and printed
 * when the runner is destroyed (for tuning; see cpu/PERFORMANCE.md). */
typedef enum Phase {
    PHASE_QKV,
    PHASE_ATTENTION,
    PHASE_O_PROJ,
    PHASE_GATE_UP,
    PHASE_DOWN,
    PHASE_MOE,
    PHASE_LINEAR_ATTN, /* the Gated DeltaNet between its projections */
    PHASE_ELEMENTWISE, /* embedding, norms, RoPE, KV store, SiLU, residuals */
    PHASE_LM_HEAD,
    PHASE_SAMPLE,
    NUM_PHASES
} Phase;

static const char *const PHASE_NAMES[NUM_PHASES] = {"qkv", "attention", "o_proj", "gate_up",
                                                    "down", "moe", "linear_attn", "elementwise",
                                                    "lm_head", "sample"};

typedef struct CpuRunner {
    Runner base;
    ModelConfig cfg;
    ThreadPool *pool;
    CpuWeights weights; /* the matrices the forward pass reads (cpu_weights.h) */
    CpuMatmul *matmul;
    CpuAttention *attention;
    CpuMoe *moe; /* NULL for a dense model */
    double *inv_freq; /* [head_dim / 2] */

    void *kv;              /* one mapping: K of every full layer, then V of every full layer */
    KvCacheDtype kv_dtype; /* resolved: float32, bf16 (uint16_t) or fp8 (uint8_t e4m3) */
    float k_scale, v_scale; /* fp8: stored = e4m3(x / scale) (runner.h) */
    size_t layer_elems;    /* elements of K (or V) per layer */
    int num_kv_layers;     /* layers with K/V: all but the linear ones */
    int *kv_index;         /* [num_layers]: the layer's place among them (-1: linear) */

    /* Qwen3.5's linear layers: the mixer and every sequence's state. */
    CpuGdn *gdn;           /* NULL without linear layers */
    CpuStatePool states;   /* slots and checkpoints (cpu_state_pool.h) */
    int *linear_index;     /* [num_layers]: the layer's place among the linear ones (-1: full) */
    GdnSeq *gdn_seqs;      /* [max_num_seqs] */
    float *mixed, *lin_z, *lin_a, *lin_b, *lin_out; /* in_proj outputs, mixer output */
    float *qgate;          /* [tokens, 2 * q width]: q_proj with attn_output_gate */
    float *attn_gate;      /* [tokens, q width] */
    float *shared_out, *shared_gate; /* the shared expert's [tokens, hidden] and [tokens] */

    /* activations, [max_num_batched_tokens, width] each */
    float *x, *h, *q, *k, *v, *attn, *gate, *up, *tmp;
    float *cos_sin;  /* [tokens, head_dim]: interleaved cos, sin per frequency */
    int32_t *slots;  /* KV slot of each new token */
    int32_t *tokens; /* the batch's new tokens, flattened */
    int *logit_rows; /* token index whose logits are computed, per logits row */
    int *sample_rows; /* per sequence: its row of `logits`, or -1 */
    int32_t *tokens_out;
    float *normed;   /* [max rows, hidden]: final-normed rows for the lm_head */
    float *logits;   /* [max_num_seqs, vocab] */
    SamplerScratch *samplers; /* one per thread */

    bool profile;
    double phase_seconds[NUM_PHASES];
    double phase_start;

    /* per step */
    const RunnerBatch *batch;
    int num_tokens;
    int layer;
} CpuRunner;

ComputeDtype cpu_runner_dtype_resolve(ComputeDtype d, const ModelWeights *model) {
    if (d != COMPUTE_AUTO) return d;
    return model_is_bf16(model) && cpu_isa_active() >= CPU_ISA_AVX512_BF16 ? COMPUTE_BF16
                                                                          : COMPUTE_F32;
}

static size_t kv_dtype_bytes(KvCacheDtype dtype) {
    return dtype == KV_CACHE_FP8 ? 1 : dtype == KV_CACHE_BF16 ? sizeof(uint16_t) : sizeof(float);
}

size_t cpu_runner_block_bytes(const ModelConfig *cfg, int block_size, KvCacheDtype dtype) {
    size_t elem = kv_dtype_bytes(dtype);
    size_t kv_layers = (size_t)(cfg->num_layers - (cfg->hybrid ? cfg->num_linear_layers : 0));
    return 2 * elem * kv_layers * (size_t)block_size * (size_t)cfg->num_kv_heads *
           (size_t)cfg->head_dim;
}

size_t cpu_runner_state_slot_bytes(const ModelConfig *cfg) { return cpu_state_unit_bytes(cfg); }

static size_t kv_elem_size(const CpuRunner *r) { return kv_dtype_bytes(r->kv_dtype); }
static void *k_layer(CpuRunner *r, int l) {
    return (char *)r->kv + (size_t)r->kv_index[l] * r->layer_elems * kv_elem_size(r);
}
static void *v_layer(CpuRunner *r, int l) {
    return (char *)r->kv + ((size_t)r->num_kv_layers + (size_t)r->kv_index[l]) * r->layer_elems *
                               kv_elem_size(r);
}

/* n values into the cache at element `slot` of dst: copied, rounded to bf16
 * or to e4m3 of value / scale (nearest even both; e4m3 saturates at +-448). */
static void store_kv(const CpuRunner *r, void *dst, size_t slot, const float *src, size_t n,
                     float scale) {
    switch (r->kv_dtype) {
    case KV_CACHE_FP8: kv_fp8_store(cpu_isa_active(), (uint8_t *)dst + slot, src, n, scale); return;
    case KV_CACHE_BF16: {
        uint16_t *d = (uint16_t *)dst + slot;
        for (size_t i = 0; i < n; i++) d[i] = f32_to_bf16(src[i]);
        return;
    }
    default: memcpy((float *)dst + slot, src, sizeof(float) * n); return;
    }
}

/* Charges the time since the previous mark to `phase`. */
static void mark(CpuRunner *r, Phase phase) {
    if (!r->profile) return;
    double t = now_seconds();
    r->phase_seconds[phase] += t - r->phase_start;
    r->phase_start = t;
}

/* ---- per-token stages, run over token ranges by the pool ---------------- */

typedef void (*TokenFn)(CpuRunner *r, int token);

typedef struct TokenJob {
    CpuRunner *r;
    TokenFn fn;
    int per_task;
} TokenJob;

static void token_range_task(void *ctx, int task, int thread) {
    (void)thread;
    TokenJob *j = ctx;
    int t0 = task * j->per_task, t1 = t0 + j->per_task;
    if (t1 > j->r->num_tokens) t1 = j->r->num_tokens;
    for (int t = t0; t < t1; t++) j->fn(j->r, t);
}

static void for_each_token(CpuRunner *r, TokenFn fn) {
    int threads = thread_pool_size(r->pool);
    int per_task = (r->num_tokens + 4 * threads - 1) / (4 * threads);
    TokenJob job = {r, fn, per_task > 0 ? per_task : 1};
    thread_pool_run(r->pool, (r->num_tokens + job.per_task - 1) / job.per_task, token_range_task,
                    &job);
}

static void embed_token(CpuRunner *r, int t) {
    int H = r->cfg.hidden_size;
    embed_row(r->x + (size_t)t * H, &r->weights.embed_tokens, r->tokens[t]);
    rmsnorm(r->h + (size_t)t * H, r->x + (size_t)t * H, r->weights.layers[0].input_norm, H,
            (float)r->cfg.rms_norm_eps);
}

/* q/k RMSNorm per head, RoPE, and the store of K and V into the cache. */
static void qk_norm_rope_store(CpuRunner *r, int t) {
    const ModelConfig *c = &r->cfg;
    const LayerWeights *L = &r->weights.layers[r->layer];
    int D = c->head_dim, R = model_config_rotary_dim(c); /* RoPE turns the first R dims of a head */
    float eps = (float)c->rms_norm_eps;
    const float *cs = r->cos_sin + (size_t)t * R;
    float *q = r->q + (size_t)t * c->num_heads * D;
    if (c->attn_output_gate) { /* q_proj's rows: per head, the query then its gate */
        const float *qg = r->qgate + (size_t)t * c->num_heads * 2 * D;
        float *gate = r->attn_gate + (size_t)t * c->num_heads * D;
        for (int h = 0; h < c->num_heads; h++) {
            memcpy(q + h * D, qg + (size_t)h * 2 * D, sizeof(float) * (size_t)D);
            memcpy(gate + h * D, qg + (size_t)h * 2 * D + D, sizeof(float) * (size_t)D);
        }
    }
    for (int h = 0; h < c->num_heads; h++) {
        rmsnorm(q + h * D, q + h * D, L->q_norm, D, eps);
        rope_apply(q + h * D, R, cs);
    }
    size_t kv_width = (size_t)c->num_kv_heads * D;
    float *k = r->k + (size_t)t * kv_width;
    for (int h = 0; h < c->num_kv_heads; h++) {
        rmsnorm(k + h * D, k + h * D, L->k_norm, D, eps);
        rope_apply(k + h * D, R, cs);
    }
    /* Head-major blocks (cpu_attention.h): each head's rows of a block are
     * contiguous, so attention streams them. */
    size_t bs = (size_t)r->base.options.block_size, block = (size_t)r->slots[t] / bs, off = (size_t)r->slots[t] % bs;
    for (int h = 0; h < c->num_kv_heads; h++) {
        size_t at = ((block * (size_t)c->num_kv_heads + (size_t)h) * bs + off) * (size_t)D;
        store_kv(r, k_layer(r, r->layer), at, k + (size_t)h * D, (size_t)D, r->k_scale);
        store_kv(r, v_layer(r, r->layer), at, r->v + (size_t)t * kv_width + (size_t)h * D, (size_t)D,
                 r->v_scale);
    }
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Gated attention (attn_output_gate): the output times sigmoid(gate). */
static void apply_attn_gate(CpuRunner *r, int t) {
    size_t n = (size_t)r->cfg.num_heads * (size_t)r->cfg.head_dim;
    float *o = r->attn + (size_t)t * n;
    const float *g = r->attn_gate + (size_t)t * n;
    for (size_t i = 0; i < n; i++) o[i] *= sigmoidf(g[i]);
}

/* The shared expert's SwiGLU, and its output added to the routed experts'. */
static void shared_silu_mul(CpuRunner *r, int t) {
    size_t SI = (size_t)r->cfg.shared_expert_intermediate_size;
    silu_mul(r->gate + t * SI, r->up + t * SI, SI);
}

static void shared_add(CpuRunner *r, int t) {
    size_t H = (size_t)r->cfg.hidden_size;
    float s = sigmoidf(r->shared_gate[t]), *out = r->tmp + t * H;
    const float *x = r->shared_out + t * H;
    for (size_t i = 0; i < H; i++) out[i] += s * x[i];
}

/* residual += attention output; h = post-attention norm. */
static void attn_residual_norm(CpuRunner *r, int t) {
    int H = r->cfg.hidden_size;
    add_rmsnorm(r->x + (size_t)t * H, r->tmp + (size_t)t * H, r->h + (size_t)t * H,
                r->weights.layers[r->layer].post_attention_norm, H, (float)r->cfg.rms_norm_eps);
}

static void silu_mul_token(CpuRunner *r, int t) {
    size_t I = (size_t)r->cfg.intermediate_size;
    silu_mul(r->gate + t * I, r->up + t * I, I);
}

/* residual += MLP output; h = next layer's input norm (or the final norm). */
static void mlp_residual_norm(CpuRunner *r, int t) {
    int H = r->cfg.hidden_size;
    const float *w = r->layer + 1 < r->cfg.num_layers ? r->weights.layers[r->layer + 1].input_norm
                                                      : r->base.model->final_norm;
    add_rmsnorm(r->x + (size_t)t * H, r->tmp + (size_t)t * H, r->h + (size_t)t * H, w, H,
                (float)r->cfg.rms_norm_eps);
}

/* ---- one step ------------------------------------------------------------ */

/* Flattens the batch: token ids, RoPE tables and KV slots per new token. */
static void prepare_tokens(CpuRunner *r, const RunnerBatch *b) {
    int R = model_config_rotary_dim(&r->cfg), bs = r->base.options.block_size, t = 0;
    for (int s = 0; s < b->num_seqs; s++) {
        const RunnerSeq *seq = &b->seqs[s];
        if (r->gdn) /* each layer points the states at its own part of the slot */
            r->gdn_seqs[s] = (GdnSeq){.first_row = t, .num_rows = seq->num_tokens,
                                      .fresh = seq->start_pos == 0};
        for (int i = 0; i < seq->num_tokens; i++, t++) {
            int pos = seq->start_pos + i;
            r->tokens[t] = seq->tokens[i];
            r->slots[t] = seq->block_table[pos / bs] * bs + pos % bs;
            rope_cos_sin(r->cos_sin + (size_t)t * R, pos, r->inv_freq, R / 2);
        }
    }
    r->num_tokens = t;
}

/* Layer l's Gated DeltaNet: the four in_proj matmuls, the mixer over each
 * sequence's state, out_proj into tmp. */
static void linear_mixer(CpuRunner *r, int l) {
    const LinearAttnWeights *A = &r->weights.layers[l].linear_attn;
    const RunnerBatch *b = r->batch;
    int T = r->num_tokens;
    const Weight *proj[4] = {&A->in_proj_qkv, &A->in_proj_z, &A->in_proj_a, &A->in_proj_b};
    float *proj_out[4] = {r->mixed, r->lin_z, r->lin_a, r->lin_b};
    cpu_matmul_multi(r->matmul, r->h, T, proj, proj_out, 4);
    mark(r, PHASE_QKV);
    for (int s = 0; s < b->num_seqs; s++) {
        float *base = cpu_state_layer(&r->states, b->seqs[s].state_slot, r->linear_index[l]);
        r->gdn_seqs[s].conv_state = base;
        r->gdn_seqs[s].recurrent_state = base + r->states.conv_floats;
    }
    GdnLayerWeights w = {A->conv, A->A_log, A->dt_bias, A->norm};
    cpu_gdn_forward(r->gdn, &w, r->gdn_seqs, b->num_seqs, r->mixed, r->lin_z, r->lin_a, r->lin_b,
                    r->lin_out);
    mark(r, PHASE_LINEAR_ATTN);
    cpu_matmul(r->matmul, r->tmp, r->lin_out, T, &A->out_proj);
    mark(r, PHASE_O_PROJ);
}

/* Full attention: projections, norms and RoPE, the paged cache, o_proj into tmp. */
static void attention_mixer(CpuRunner *r, int l) {
    const LayerWeights *L = &r->weights.layers[l];
    int T = r->num_tokens;
    const Weight *qkv[3] = {&L->q_proj, &L->k_proj, &L->v_proj};
    float *qkv_out[3] = {r->cfg.attn_output_gate ? r->qgate : r->q, r->k, r->v};
    cpu_matmul_multi(r->matmul, r->h, T, qkv, qkv_out, 3);
    mark(r, PHASE_QKV);
    for_each_token(r, qk_norm_rope_store);
    mark(r, PHASE_ELEMENTWISE);
    cpu_attention(r->attention, r->attn, r->q, k_layer(r, l), v_layer(r, l), r->batch);
    mark(r, PHASE_ATTENTION);
    if (r->cfg.attn_output_gate) {
        for_each_token(r, apply_attn_gate);
        mark(r, PHASE_ELEMENTWISE);
    }
    cpu_matmul(r->matmul, r->tmp, r->attn, T, &L->o_proj);
    mark(r, PHASE_O_PROJ);
}

/* The always-on expert of a sparse layer that has one, added into tmp. */
static void shared_expert(CpuRunner *r, const LayerWeights *L) {
    const SharedExpertWeights *S = &L->shared;
    const Weight *in[3] = {&S->gate_proj, &S->up_proj, &S->gate};
    float *in_out[3] = {r->gate, r->up, r->shared_gate};
    cpu_matmul_multi(r->matmul, r->h, r->num_tokens, in, in_out, 3);
    for_each_token(r, shared_silu_mul);
    cpu_matmul(r->matmul, r->shared_out, r->gate, r->num_tokens, &S->down_proj);
    for_each_token(r, shared_add);
}

static void forward_layer(CpuRunner *r, int l) {
    const LayerWeights *L = &r->weights.layers[l];
    int T = r->num_tokens;
    r->layer = l;
    if (L->linear) linear_mixer(r, l);
    else attention_mixer(r, l);
    for_each_token(r, attn_residual_norm);
    mark(r, PHASE_ELEMENTWISE);
    if (L->experts) {
        cpu_moe(r->moe, r->tmp, r->h, T, L);
        if (r->cfg.shared_expert_intermediate_size) shared_expert(r, L);
        mark(r, PHASE_MOE);
        for_each_token(r, mlp_residual_norm);
        mark(r, PHASE_ELEMENTWISE);
        return;
    }
    const Weight *gate_up[2] = {&L->gate_proj, &L->up_proj};
    float *gate_up_out[2] = {r->gate, r->up};
    cpu_matmul_multi(r->matmul, r->h, T, gate_up, gate_up_out, 2);
    mark(r, PHASE_GATE_UP);
    for_each_token(r, silu_mul_token);
    mark(r, PHASE_ELEMENTWISE);
    cpu_matmul(r->matmul, r->tmp, r->gate, T, &L->down_proj);
    mark(r, PHASE_DOWN);
    for_each_token(r, mlp_residual_norm); /* leaves h = next input (or final) norm */
    mark(r, PHASE_ELEMENTWISE);
}

static void sample_task(void *ctx, int s, int thread) {
    CpuRunner *r = ctx;
    int row = r->sample_rows[s];
    if (row < 0) return;
    const RunnerBatch *b = r->batch;
    const RunnerSeq *q = &b->seqs[s];
    SamplingParams greedy = sampling_params_default();
    SampleInput in = q->sample;
    if (!in.params) in.params = &greedy;
    SampleLogprobs *lp = b->logprobs ? &b->logprobs[s] : NULL;
    r->tokens_out[s] = sampler_sample(r->logits + (size_t)row * r->cfg.vocab_size, &in,
                                      &r->samplers[thread], lp);
}

/* lm_head over the rows that need logits, written to dst [rows, vocab]. */
static void compute_logits(CpuRunner *r, float *dst, const int *rows, int n) {
    int H = r->cfg.hidden_size;
    for (int i = 0; i < n; i++)
        memcpy(r->normed + (size_t)i * H, r->h + (size_t)rows[i] * H, sizeof(float) * H);
    cpu_matmul(r->matmul, dst, r->normed, n, &r->weights.lm_head);
}

/* Embedding rows (runner.h's pooling): h holds every new token's
 * final-normed hidden state, float32. */
static void pool_rows(CpuRunner *r, const RunnerBatch *b) {
    size_t H = (size_t)r->cfg.hidden_size;
    int t = 0;
    for (int s = 0; s < b->num_seqs; t += b->seqs[s].num_tokens, s++) {
        const RunnerSeq *q = &b->seqs[s];
        const float *rows = r->h + (size_t)t * H;
        switch (q->pooling) {
        case POOLING_LAST:
            memcpy(q->pooled, rows + (size_t)(q->num_tokens - 1) * H, sizeof(float) * H);
            break;
        case POOLING_MEAN:
            for (int i = 0; i < q->num_tokens; i++)
                for (size_t j = 0; j < H; j++) q->pooled[j] += rows[(size_t)i * H + j];
            break;
        case POOLING_CLS:
            if (q->start_pos == 0) memcpy(q->pooled, rows, sizeof(float) * H);
            break;
        case POOLING_NONE: break;
        }
    }
}

static int cpu_step(Runner *base, const RunnerBatch *b, int32_t *out, Error *err) {
    CpuRunner *r = (CpuRunner *)base;
    if (runner_validate_batch(base, b, err)) return -1;
    r->batch = b;
    if (r->profile) r->phase_start = now_seconds();
    for (int s = 0; s < b->num_seqs; s++)
        if (b->seqs[s].restore) cpu_state_restore(&r->states, b->seqs[s].state_slot, b->seqs[s].restore_checkpoint);
    prepare_tokens(r, b);
    for_each_token(r, embed_token);
    mark(r, PHASE_ELEMENTWISE);
    for (int l = 0; l < r->cfg.num_layers; l++) forward_layer(r, l);
    for (int s = 0; s < b->num_seqs; s++)
        if (b->seqs[s].save) cpu_state_save(&r->states, b->seqs[s].state_slot, b->seqs[s].save_checkpoint);
    pool_rows(r, b);

    size_t V = (size_t)r->cfg.vocab_size;
    if (b->all_logits) { /* every token's logits, straight into the caller's buffer */
        for (int t0 = 0; t0 < r->num_tokens; t0 += r->base.options.max_num_seqs) {
            int n = r->num_tokens - t0 < r->base.options.max_num_seqs ? r->num_tokens - t0
                                                                      : r->base.options.max_num_seqs;
            for (int i = 0; i < n; i++) r->logit_rows[i] = t0 + i;
            compute_logits(r, b->all_logits + (size_t)t0 * V, r->logit_rows, n);
        }
    }
    int n = 0, last = -1;
    for (int s = 0; s < b->num_seqs; s++) {
        last += b->seqs[s].num_tokens;
        if (b->seqs[s].compute_logits) r->logit_rows[n++] = last;
    }
    if (!b->all_logits) compute_logits(r, r->logits, r->logit_rows, n);
    mark(r, PHASE_LM_HEAD);

    /* Each sequence's row: copy out the raw logits if asked, then sample. */
    int row = 0;
    for (int s = 0; s < b->num_seqs; s++) {
        r->sample_rows[s] = -1;
        out[s] = -1;
        if (!b->seqs[s].compute_logits) continue;
        float *lg = b->all_logits ? b->all_logits + (size_t)r->logit_rows[row] * V
                                  : r->logits + (size_t)row * V;
        if (b->last_logits) memcpy(b->last_logits + (size_t)s * V, lg, sizeof(float) * V);
        if (b->all_logits) { /* sample from a copy: the caller's logits stay raw */
            memcpy(r->logits + (size_t)row * V, lg, sizeof(float) * V);
        }
        r->sample_rows[s] = row++;
    }
    r->tokens_out = out;
    thread_pool_run(r->pool, b->num_seqs, sample_task, r);
    mark(r, PHASE_SAMPLE);
    return 0;
}

/* ---- creation ------------------------------------------------------------ */

static void print_profile(const CpuRunner *r) {
    double total = 0;
    for (int i = 0; i < NUM_PHASES; i++) total += r->phase_seconds[i];
    fprintf(stderr, "nanovllm profile (cpu runner, %.3f s in steps):", total);
    for (int i = 0; i < NUM_PHASES; i++)
        fprintf(stderr, " %s %.3f s (%.0f%%)", PHASE_NAMES[i], r->phase_seconds[i],
                total > 0 ? 100 * r->phase_seconds[i] / total : 0.0);
    fputc('\n', stderr);
}

static void cpu_destroy(Runner *base) {
    CpuRunner *r = (CpuRunner *)base;
    if (r->profile) print_profile(r);
    cpu_moe_destroy(r->moe);
    cpu_gdn_destroy(r->gdn);
    cpu_attention_destroy(r->attention);
    cpu_matmul_destroy(r->matmul);
    cpu_weights_free(&r->weights);
    thread_pool_destroy(r->pool);
    if (r->kv) munmap(r->kv, 2 * (size_t)r->num_kv_layers * r->layer_elems * kv_elem_size(r));
    cpu_state_pool_free(&r->states);
    free(r->inv_freq);
    free(r->kv_index);
    free(r->linear_index);
    free(r->gdn_seqs);
    float *bufs[] = {r->x, r->h, r->q, r->k, r->v, r->attn, r->gate, r->up, r->tmp,
                     r->cos_sin, r->normed, r->logits, r->mixed, r->lin_z, r->lin_a, r->lin_b,
                     r->lin_out, r->qgate, r->attn_gate, r->shared_out, r->shared_gate};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(r->slots);
    free(r->tokens);
    free(r->logit_rows);
    free(r->sample_rows);
    if (r->samplers)
        for (int i = 0; i < r->base.options.num_threads; i++) sampler_scratch_free(&r->samplers[i]);
    free(r->samplers);
    free(r);
}

static const RunnerOps CPU_OPS = {cpu_step, cpu_destroy};

static void *alloc_floats(size_t n, bool *ok) {
    void *p = malloc(sizeof(float) * (n ? n : 1));
    if (!p) *ok = false;
    return p;
}

Runner *cpu_runner_create(const ModelWeights *model, const RunnerOptions *opts, Error *err) {
    const ModelConfig *c = &model->config;
    RunnerOptions o = *opts;
    o.device = "cpu";
    if (runner_resolve_options(&o, c, err)) return NULL;

    o.kv_cache_dtype = kv_cache_dtype_resolve(o.kv_cache_dtype, model);
    o.dtype = cpu_runner_dtype_resolve(o.dtype, model);
    /* A hybrid model's state slots and checkpoints come out of the KV
     * budget first (runner_plan_state_units: at most half of it); max_num_seqs falls
     * to the slots there is room for. */
    size_t slot_bytes = cpu_runner_state_slot_bytes(c);
    int num_slots = 0, num_checkpoints = 0;
    if (slot_bytes) {
        if (runner_plan_state_units((double)o.kv_cache_bytes, slot_bytes, o.max_num_seqs, &num_slots,
                                    &num_checkpoints)) {
            error_set(err, "KV cache budget of %zu bytes cannot hold the recurrent state of one "
                           "sequence (%zu bytes) beside its KV blocks", o.kv_cache_bytes, slot_bytes);
            return NULL;
        }
        if (num_slots < o.max_num_seqs) {
            log_info("max_num_seqs %d -> %d: each sequence's recurrent state takes %.3g MB, and "
                     "half the KV cache budget holds %d of them with as many checkpoints (raise "
                     "--kv-cache-memory to run more)",
                     o.max_num_seqs, num_slots, slot_bytes / 1e6, num_slots);
            o.max_num_seqs = num_slots;
        }
    }
    size_t state_bytes = (size_t)(num_slots + num_checkpoints) * slot_bytes;
    size_t block_bytes = cpu_runner_block_bytes(c, o.block_size, o.kv_cache_dtype);
    size_t num_blocks = (o.kv_cache_bytes - state_bytes) / block_bytes;
    if (num_blocks < 1) {
        error_set(err, "KV cache budget of %zu bytes is smaller than one block (%zu bytes for %d "
                       "tokens)", o.kv_cache_bytes, block_bytes, o.block_size);
        return NULL;
    }
    if (num_blocks > (1u << 30)) num_blocks = 1u << 30;

    CpuRunner *r = calloc(1, sizeof *r);
    if (!r) {
        error_set(err, "out of memory");
        return NULL;
    }
    r->base.ops = &CPU_OPS;
    r->base.device = "cpu";
    r->base.model = model;
    r->cfg = *c;
    r->base.num_kv_blocks = (int)num_blocks;
    r->base.num_state_slots = num_slots;
    r->base.num_state_checkpoints = num_checkpoints;
    r->base.kv_cache_bytes = num_blocks * block_bytes + state_bytes;
    r->kv_dtype = o.kv_cache_dtype;
    r->k_scale = r->v_scale = KV_FP8_DEFAULT_SCALE; /* uncalibrated, as vLLM (runner.h) */
    r->layer_elems = num_blocks * (size_t)o.block_size * c->num_kv_heads * c->head_dim;
    r->kv_index = malloc(sizeof(int) * (size_t)c->num_layers);
    r->linear_index = malloc(sizeof(int) * (size_t)c->num_layers);
    if (!r->kv_index || !r->linear_index) {
        error_set(err, "out of memory");
        goto fail;
    }
    for (int l = 0, kv_layers = 0, linear = 0; l < c->num_layers; l++) {
        bool lin = model_config_layer_is_linear(c, l);
        r->kv_index[l] = lin ? -1 : kv_layers++;
        r->linear_index[l] = lin ? linear++ : -1;
        r->num_kv_layers = kv_layers;
    }

    /* Anonymous mappings: pages cost memory only once a block (or a
     * sequence's state) is written. */
    size_t kv_bytes = num_blocks * block_bytes;
    void *kv = mmap(NULL, kv_bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (kv == MAP_FAILED) {
        error_set(err, "cannot reserve %zu bytes of KV cache: %s", kv_bytes, strerror(errno));
        goto fail;
    }
    r->kv = kv;
    if (num_slots && cpu_state_pool_init(&r->states, c, num_slots, num_checkpoints, err)) goto fail;
    /* No MADV_HUGEPAGE here, unlike the weights: a sequence touches a few
     * KB of each block per layer, and a huge page would zero 2 MiB around it
     * on first touch (measured: 32 short requests 196 -> 235 tokens/s without
     * it; single-stream attention no faster with it). */

    /* Set past the mapping: once set, cpu_destroy (the cleanup of a failure
     * below included) prints the profile. */
    r->profile = getenv("NANOVLLM_PROFILE") != NULL;

    size_t T = (size_t)o.max_num_batched_tokens, H = (size_t)c->hidden_size;
    size_t Q = (size_t)c->num_heads * c->head_dim, KV = (size_t)c->num_kv_heads * c->head_dim;
    size_t I = (size_t)c->intermediate_size, SI = (size_t)c->shared_expert_intermediate_size;
    if (SI > I) I = SI; /* gate and up hold either MLP's */
    size_t max_logit_rows = (size_t)o.max_num_seqs;
    bool ok = true;
    r->x = alloc_floats(T * H, &ok);
    r->h = alloc_floats(T * H, &ok);
    r->tmp = alloc_floats(T * H, &ok);
    r->q = alloc_floats(T * Q, &ok);
    r->attn = alloc_floats(T * Q, &ok);
    r->k = alloc_floats(T * KV, &ok);
    r->v = alloc_floats(T * KV, &ok);
    r->gate = alloc_floats(T * I, &ok);
    r->up = alloc_floats(T * I, &ok);
    r->cos_sin = alloc_floats(T * (size_t)model_config_rotary_dim(c), &ok);
    if (c->attn_output_gate) {
        r->qgate = alloc_floats(T * 2 * Q, &ok);
        r->attn_gate = alloc_floats(T * Q, &ok);
    }
    if (SI) {
        r->shared_out = alloc_floats(T * H, &ok);
        r->shared_gate = alloc_floats(T, &ok);
    }
    size_t VD = (size_t)model_config_linear_value_dim(c), HV = (size_t)c->linear_num_v_heads;
    if (num_slots) {
        r->mixed = alloc_floats(T * (size_t)model_config_linear_conv_dim(c), &ok);
        r->lin_z = alloc_floats(T * VD, &ok);
        r->lin_out = alloc_floats(T * VD, &ok);
        r->lin_a = alloc_floats(T * HV, &ok);
        r->lin_b = alloc_floats(T * HV, &ok);
        r->gdn_seqs = calloc((size_t)o.max_num_seqs, sizeof *r->gdn_seqs);
        if (!r->gdn_seqs) ok = false;
    }
    r->normed = alloc_floats(max_logit_rows * H, &ok);
    r->logits = alloc_floats(max_logit_rows * c->vocab_size, &ok);
    r->slots = malloc(sizeof(int32_t) * T);
    r->tokens = malloc(sizeof(int32_t) * T);
    r->logit_rows = malloc(sizeof(int) * (T > max_logit_rows ? T : max_logit_rows));
    r->sample_rows = malloc(sizeof(int) * max_logit_rows);
    r->inv_freq = malloc(sizeof(double) * (size_t)(model_config_rotary_dim(c) / 2));
    if (!ok || !r->slots || !r->tokens || !r->logit_rows || !r->sample_rows || !r->inv_freq) {
        error_set(err, "out of memory (activations for %zu tokens)", T);
        goto fail;
    }
    rope_inv_freq(r->inv_freq, model_config_rotary_dim(c), c->rope_theta);

    r->pool = thread_pool_create(o.num_threads, err);
    if (!r->pool) goto fail;
    o.num_threads = thread_pool_size(r->pool);
    r->base.options.num_threads = o.num_threads; /* cpu_destroy frees one sampler per thread */
    r->samplers = calloc((size_t)o.num_threads, sizeof *r->samplers);
    if (!r->samplers) {
        error_set(err, "out of memory");
        goto fail;
    }
    for (int i = 0; i < o.num_threads; i++)
        if (sampler_scratch_init(&r->samplers[i], c->vocab_size, err)) goto fail;
    if (cpu_weights_init(&r->weights, model, r->pool, err)) goto fail;
    int max_cols = (int)(H > Q ? H : Q);
    if ((int)I > max_cols) max_cols = (int)I;
    if (c->moe_intermediate_size > max_cols) max_cols = c->moe_intermediate_size;
    if ((int)VD > max_cols) max_cols = (int)VD;
    r->matmul = cpu_matmul_create(r->pool, (int)(T > max_logit_rows ? T : max_logit_rows), max_cols, err);
    if (r->matmul) cpu_matmul_set_bf16_inputs(r->matmul, o.dtype == COMPUTE_BF16);
    AttentionShape shape = {c->num_heads, c->num_kv_heads, c->head_dim, o.block_size};
    if (r->matmul)
        r->attention = cpu_attention_create_kv(r->pool, shape, r->kv_dtype, o.max_num_seqs, (int)T, err);
    if (r->attention) {
        cpu_attention_set_bf16_inputs(r->attention, o.dtype == COMPUTE_BF16);
        cpu_attention_set_fp8_scales(r->attention, r->k_scale, r->v_scale);
    }
    if (r->matmul && r->attention && c->num_experts > 0)
        r->moe = cpu_moe_create(r->pool, r->matmul, c, (int)T, err);
    if (!r->matmul || !r->attention || (c->num_experts > 0 && !r->moe)) goto fail;
    if (num_slots) {
        GdnShape shape = cpu_state_gdn_shape(c);
        r->gdn = cpu_gdn_create(r->pool, &shape, (int)T, err);
        if (!r->gdn) goto fail;
    }
    r->base.options = o;
    /* A level capped below the CPU's (NANOVLLM_CPU_ISA, to measure what an
     * older CPU would do) does not cap OpenBLAS, which prefill and prefill
     * attention also run: say so, since its kernels may then be wider. */
    if (cpu_isa_active() < cpu_isa_detect() && !getenv("OPENBLAS_CORETYPE"))
        log_info("warning: NANOVLLM_CPU_ISA=%s caps our kernels only; OpenBLAS runs its %s kernels "
                 "(set OPENBLAS_CORETYPE, e.g. Haswell for AVX2, to cap it too)",
                 cpu_isa_name(cpu_isa_active()), cpu_matmul_blas_core());
    snprintf(r->base.description, sizeof r->base.description,
             "cpu (%d threads, %s kernels, OpenBLAS %s), %s matmul inputs, %s weights %s, %s KV cache",
             o.num_threads, cpu_isa_name(cpu_isa_active()), cpu_matmul_blas_core(),
             o.dtype == COMPUTE_BF16 ? "bf16" : "float32",
             weight_type_name(model->layers[0].linear ? model->layers[0].linear_attn.in_proj_qkv.type
                                                      : model->layers[0].q_proj.type),
             r->weights.memory ? "in huge pages" : "mapped in place",
             r->kv_dtype == KV_CACHE_FP8 ? "fp8_e4m3 (scales 1.0)"
             : r->kv_dtype == KV_CACHE_BF16 ? "bf16" : "float32");
    if (num_slots) {
        size_t used = strlen(r->base.description);
        snprintf(r->base.description + used, sizeof r->base.description - used,
                 ", %d recurrent-state slots and %d checkpoints of %.3g MB", num_slots, num_checkpoints,
                 slot_bytes / 1e6);
    }
    return &r->base;

fail:
    cpu_destroy(&r->base);
    return NULL;
}
