/*
 * cuda_runner_hybrid.cu - the CUDA runner's Qwen3.5 (hybrid) layers: what
 * cpu_runner.c's linear_mixer, attention_mixer (attn_output_gate, partial
 * RoPE) and shared_expert do, on the GPU, plus the state pool.
 *
 * A linear layer: in_proj_qkv, _z, _a, _b GEMMs (float32 outputs) ->
 * cuda_gdn_forward over each sequence's state slot -> out_proj GEMM into
 * delta. A full layer: the fused GEMM of q_proj (query and gate rows per
 * head), k_proj and v_proj -> cuda_gated_qk_norm_rope_store (q/k norm, RoPE
 * on the first rotary_dim dims, K/V into the layer's cache) -> the Qwen3
 * attention kernels as they are -> attn *= sigmoid(gate) -> o_proj into
 * delta. Only full layers have KV cache (kv_index, as the CPU's).
 *
 * The state pool is one device allocation of num_slots + num_checkpoints
 * units in cpu_state_pool.h's layout (so cuda_gdn_plan.h's offsets hold):
 * a launch gets slot 0's part for its layer and the unit size; each
 * sequence's slot comes from the step's CudaGdnSeq array in the metadata
 * (StepLayout.gdn), at an offset fixed per graph bucket, so decode graphs
 * replay with new slots. Restore and save are whole-unit device copies on
 * the stream before and after the step, never inside a graph.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_gated_deltanet.h"
#include "cuda_hybrid_kernels.h"
#include "cuda_runner.h"
#include "cuda_runner_internal.h"

extern "C" {
#include "base/log.h"
}

static CudaGdnShape gdn_shape(const ModelConfig *c) {
    return (CudaGdnShape){c->linear_num_k_heads, c->linear_num_v_heads, c->linear_k_dim, c->linear_v_dim,
                          c->linear_conv_kernel, (float)c->rms_norm_eps, c->linear_value_heads_tiled};
}

static int mm(CudaRunner *r, float *y, const uint16_t *x, CudaMatrix w, int rows, int out, int in, Error *err) {
    return cuda_matmul(r->matmul, y, x, w, rows, out, in, err);
}

/* Slots and checkpoints out of what --gpu-memory-utilization leaves now
 * (runner_plan_state_units; the KV blocks get the rest). */
static int plan_states(CudaRunner *r, size_t unit_bytes, Error *err) {
    RunnerOptions *o = &r->base.options;
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes), "reading the GPU's free memory", err);
    double budget = (double)total_bytes * o->gpu_memory_utilization - (double)(total_bytes - free_bytes);
    if (runner_plan_state_units(budget, unit_bytes, o->max_num_seqs, &r->hy.num_slots, &r->hy.num_checkpoints))
        return error_set(err, "no GPU memory left for the recurrent state of one sequence (%.3g MB); raise "
                              "--gpu-memory-utilization or lower --max-num-batched-tokens",
                         unit_bytes / 1e6);
    if (r->hy.num_slots < o->max_num_seqs) {
        log_info("max_num_seqs %d -> %d: each sequence's recurrent state takes %.3g MB, and half the GPU "
                 "memory left holds %d of them with as many checkpoints",
                 o->max_num_seqs, r->hy.num_slots, unit_bytes / 1e6, r->hy.num_slots);
        o->max_num_seqs = r->hy.num_slots;
    }
    return 0;
}

int cuda_hybrid_setup(CudaRunner *r, Error *err) {
    const ModelConfig *c = &r->cfg;
    CudaHybrid *y = &r->hy;
    if (!c->attn_output_gate)
        return error_set(err, "Qwen3.5 models without attn_output_gate run on the CPU backend only for now; "
                              "use --device cpu");
    const CudaGdnShape s = gdn_shape(c);
    if (c->num_linear_layers > 0 && cuda_gdn_check_shape(&s, err)) return -1;
    const size_t T = (size_t)r->base.options.max_num_batched_tokens, H = (size_t)c->hidden_size;
    const size_t D = (size_t)c->head_dim, full = 2 * (size_t)c->num_heads * D + 2 * (size_t)c->num_kv_heads * D;
    const size_t conv = (size_t)model_config_linear_conv_dim(c), VD = (size_t)model_config_linear_value_dim(c);
    const size_t HV = (size_t)c->linear_num_v_heads, SI = (size_t)c->shared_expert_intermediate_size;
    y->kv_index = (int *)malloc(sizeof(int) * (size_t)c->num_layers);
    y->linear_index = (int *)malloc(sizeof(int) * (size_t)c->num_layers);
    if (!y->kv_index || !y->linear_index) return error_set(err, "out of memory");
    for (int l = 0, kv = 0, lin = 0; l < c->num_layers; l++) {
        const bool is_lin = model_config_layer_is_linear(c, l);
        y->kv_index[l] = is_lin ? -1 : kv++;
        y->linear_index[l] = is_lin ? lin++ : -1;
    }
    struct {
        void **p;
        size_t bytes;
    } bufs[] = {
        {(void **)&y->wide, T * (conv > full ? conv : full) * 4},
        {(void **)&y->z, T * VD * 4},
        {(void **)&y->a, T * HV * 4},
        {(void **)&y->b, T * HV * 4},
        {(void **)&y->out, T * VD * 2},
        {(void **)&y->sh_gate_up, T * 2 * SI * 4},
        {(void **)&y->sh_act, T * SI * 2},
        {(void **)&y->sh_out, SI ? T * H * 4 : 0},
        {(void **)&y->sh_gate, SI ? T * 4 : 0},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (bufs[i].bytes == 0) continue;
        if (!(*bufs[i].p = cuda_alloc(bufs[i].bytes, err))) return error_prefix(err, "hybrid activations");
    }
    /* Rows of no sequence (graph padding) keep what out held: never NaN. */
    CUDA_TRY(cudaMemset(y->out, 0, T * VD * 2), "clearing the linear attention output", err);

    y->layer_floats = gdn_plan_conv_state_floats(&s) + gdn_plan_recurrent_state_floats(&s);
    y->unit_floats = (size_t)c->num_linear_layers * y->layer_floats;
    if (y->unit_floats == 0) return 0; /* no linear layer: no state */
    if (plan_states(r, y->unit_floats * sizeof(float), err)) return -1;
    y->bytes = y->unit_floats * sizeof(float) * (size_t)(y->num_slots + y->num_checkpoints);
    if (!(y->states = (float *)cuda_alloc(y->bytes, err))) return error_prefix(err, "recurrent state");
    CUDA_TRY(cudaMemset(y->states, 0, y->bytes), "clearing the recurrent state", err);
    log_info("recurrent state: %d slots and %d checkpoints of %.3g MB on the GPU", y->num_slots,
             y->num_checkpoints, y->unit_floats * sizeof(float) / 1e6);
    r->base.num_state_slots = y->num_slots;
    r->base.num_state_checkpoints = y->num_checkpoints;
    return 0;
}

void cuda_hybrid_free(CudaRunner *r) {
    CudaHybrid *y = &r->hy;
    void *device[] = {y->states, y->wide, y->z, y->a, y->b, y->out, y->sh_gate_up, y->sh_act, y->sh_out, y->sh_gate};
    for (size_t i = 0; i < sizeof device / sizeof device[0]; i++) cuda_free(device[i]);
    free(y->kv_index);
    free(y->linear_index);
    memset(y, 0, sizeof *y);
}

static int linear_mixer(CudaRunner *r, const CudaLayerWeights *W, int l, const StepLayout *L, Error *err) {
    const ModelConfig *c = &r->cfg;
    CudaHybrid *y = &r->hy;
    const int T = L->num_tokens, H = c->hidden_size, HV = c->linear_num_v_heads;
    const int conv = model_config_linear_conv_dim(c), VD = model_config_linear_value_dim(c);
    const CudaGdnShape s = gdn_shape(c);
    const CudaGdnLayer w = {W->conv, W->A_log, W->dt_bias, W->lin_norm};
    const CudaGdnStates states = {y->states + (size_t)y->linear_index[l] * y->layer_floats, y->unit_floats};
    const CudaGdnSeq *seqs = (const CudaGdnSeq *)(r->meta_dev + L->gdn);
    return mm(r, y->wide, r->h, W->lin_qkv, T, conv, H, err) || mm(r, y->z, r->h, W->lin_z, T, VD, H, err) ||
                   mm(r, y->a, r->h, W->lin_a, T, HV, H, err) || mm(r, y->b, r->h, W->lin_b, T, HV, H, err) ||
                   cuda_gdn_forward(&s, &w, states, seqs, L->num_seqs, L->max_seq_rows, y->wide, y->z, y->a, y->b,
                                    y->out, r->stream, err) ||
                   mm(r, r->delta, y->out, W->lin_out, T, H, VD, err)
               ? -1
               : 0;
}

static int gated_attention(CudaRunner *r, const CudaLayerWeights *W, int l, const StepLayout *L, int splits,
                           Error *err) {
    const ModelConfig *c = &r->cfg;
    CudaHybrid *y = &r->hy;
    const int T = L->num_tokens, H = c->hidden_size, D = c->head_dim, nh = c->num_heads, nkv = c->num_kv_heads;
    const int kv = y->kv_index[l], width = 2 * nh * D + 2 * nkv * D;
    uint16_t *k_cache = (uint16_t *)r->kv + (size_t)kv * r->layer_elems;
    uint16_t *v_cache = (uint16_t *)r->kv + (size_t)(r->num_kv_layers + kv) * r->layer_elems;
    const int32_t *meta = r->meta_dev;
    return mm(r, y->wide, r->h, W->qkv, T, width, H, err) ||
                   cuda_gated_qk_norm_rope_store(r->q, k_cache, v_cache, y->wide, W->q_norm, W->k_norm, r->rope,
                                                 meta + L->positions, meta + L->slots, T, nh, nkv, D,
                                                 model_config_rotary_dim(c), (float)c->rms_norm_eps, r->stream,
                                                 err) ||
                   cuda_runner_attention(r, kv, L, splits, err) ||
                   cuda_attn_output_gate(r->attn, y->wide, T, nh, nkv, D, r->stream, err) ||
                   mm(r, r->delta, r->attn, W->o_proj, T, H, nh * D, err)
               ? -1
               : 0;
}

int cuda_hybrid_mixer(CudaRunner *r, int l, const StepLayout *L, int splits, Error *err) {
    const CudaLayerWeights *W = &r->weights.layers[l];
    return W->linear ? linear_mixer(r, W, l, L, err) : gated_attention(r, W, l, L, splits, err);
}

int cuda_hybrid_shared_expert(CudaRunner *r, const CudaLayerWeights *W, int T, Error *err) {
    if (!W->shared_gate_up.data) return 0;
    CudaHybrid *y = &r->hy;
    const int H = r->cfg.hidden_size, SI = r->cfg.shared_expert_intermediate_size;
    return mm(r, y->sh_gate_up, r->h, W->shared_gate_up, T, 2 * SI, H, err) ||
                   cuda_silu_mul(y->sh_act, y->sh_gate_up, T, SI, r->stream, err) ||
                   mm(r, y->sh_out, y->sh_act, W->shared_down, T, H, SI, err) ||
                   mm(r, y->sh_gate, r->h, W->shared_gate, T, 1, H, err) ||
                   cuda_shared_expert_add(r->delta, y->sh_out, y->sh_gate, T, H, r->stream, err)
               ? -1
               : 0;
}

static float *unit(CudaRunner *r, int u) { return r->hy.states + (size_t)u * r->hy.unit_floats; }

int cuda_hybrid_restore(CudaRunner *r, const RunnerBatch *b, Error *err) {
    const size_t bytes = r->hy.unit_floats * sizeof(float);
    for (int s = 0; s < b->num_seqs; s++) {
        const RunnerSeq *q = &b->seqs[s];
        if (!q->restore) continue;
        CUDA_TRY(cudaMemcpyAsync(unit(r, q->state_slot), unit(r, r->hy.num_slots + q->restore_checkpoint), bytes,
                                 cudaMemcpyDeviceToDevice, r->stream),
                 "restoring a state checkpoint", err);
    }
    return 0;
}

int cuda_hybrid_save(CudaRunner *r, const RunnerBatch *b, Error *err) {
    const size_t bytes = r->hy.unit_floats * sizeof(float);
    for (int s = 0; s < b->num_seqs; s++) {
        const RunnerSeq *q = &b->seqs[s];
        if (!q->save) continue;
        CUDA_TRY(cudaMemcpyAsync(unit(r, r->hy.num_slots + q->save_checkpoint), unit(r, q->state_slot), bytes,
                                 cudaMemcpyDeviceToDevice, r->stream),
                 "saving a state checkpoint", err);
    }
    return 0;
}
