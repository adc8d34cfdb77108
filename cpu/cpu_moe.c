/*
 * cpu_moe.c - the sparse MLP of a MoE layer (see cpu_moe.h).
 *
 * One call: router matmul -> route every token -> count tokens per expert
 * and give each (token, choice) pair a row in expert order -> gather the
 * rows of h -> gate/up of every expert with tokens, over its rows, as one
 * grouped matmul (cpu_matmul_grouped) -> SiLU-and-mul -> the downs likewise
 * -> each token's weighted sum of its k rows.
 *
 * Under bf16 matmul inputs (--dtype bfloat16) the gathered rows and the
 * SiLU-and-mul results are rounded to bf16 where they are written: with
 * AVX512-BF16 (and bf16 experts) stored as bf16, and the experts' products
 * run on the bf16 dot kernel (cpu_matmul_bf16.h) at twice the float32 FMA
 * rate; elsewhere stored as rounded float32, from which the grouped
 * matmul's float32 kernels compute the same products.
 */
#include "cpu_moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_matmul_bf16.h"
#include "cpu_ops.h"

struct CpuMoe {
    ThreadPool *pool;
    CpuMatmul *mm;
    int experts, k, hidden, width; /* width: moe_intermediate_size */
    bool norm;
    float *logits;   /* [T, experts] */
    int32_t *ids;    /* [T, k] routed experts */
    float *weights;  /* [T, k] their weights */
    int32_t *offset; /* [experts + 1]: first row of each expert's group */
    int32_t *fill;   /* [experts] */
    int32_t *source; /* [T * k]: the token of each row */
    int32_t *row_of; /* [T * k]: the row of each (token, choice) */
    float *x, *gate, *up, *y; /* rows: [T * k, hidden / width / width / hidden] */
    uint16_t *xb, *gate_b;    /* x and the SiLU-and-mul rows as bf16 (bf16_rows) */
    MatmulGroup *groups;      /* [2 * experts]: one call's products */
    void *memory;             /* the one allocation all of the above live in */

    /* the call in progress, for the pool's tasks */
    const float *h;
    float *out;
    int tokens;
    bool round_inputs; /* bf16 matmul inputs: round x and the SiLU-and-mul rows */
    bool bf16_rows;    /* ...as bf16 copies only, for the dot kernel (bf16_rows_apply) */
    CpuIsa isa;
};

void moe_route(const float *logits, int num_experts, int k, bool norm_topk_prob, int32_t *ids,
               float *weights) {
    float p[num_experts];
    float top = logits[0];
    for (int e = 1; e < num_experts; e++) top = logits[e] > top ? logits[e] : top;
    float sum = 0.0f;
    for (int e = 0; e < num_experts; e++) sum += p[e] = expf(logits[e] - top);
    for (int e = 0; e < num_experts; e++) p[e] /= sum;
    /* k passes of selection: the largest remaining, the lower id among equals
     * (strict >, in id order; a NaN never wins, so garbage in still routes). */
    unsigned char taken[num_experts];
    memset(taken, 0, sizeof taken);
    float kept = 0.0f;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < num_experts; e++)
            if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
        taken[best] = 1;
        ids[j] = best;
        weights[j] = p[best];
        kept += p[best];
    }
    if (norm_topk_prob)
        for (int j = 0; j < k; j++) weights[j] /= kept;
}

/* ---- row-parallel steps, on the pool --------------------------------------------------- */

#define ROWS_PER_TASK 16

static void gather_task(void *ctx, int task, int thread) {
    (void)thread;
    CpuMoe *m = ctx;
    int r0 = task * ROWS_PER_TASK, r1 = r0 + ROWS_PER_TASK, rows = m->tokens * m->k;
    if (r1 > rows) r1 = rows;
    for (int r = r0; r < r1; r++) {
        float *x = m->x + (size_t)r * m->hidden;
        const float *h = m->h + (size_t)m->source[r] * m->hidden;
        if (m->bf16_rows) bf16_round_rows(m->isa, m->xb + (size_t)r * m->hidden, h, (size_t)m->hidden);
        else if (m->round_inputs) bf16_round_in_f32(x, h, (size_t)m->hidden);
        else memcpy(x, h, sizeof(float) * (size_t)m->hidden);
    }
}

static void silu_task(void *ctx, int task, int thread) {
    (void)thread;
    CpuMoe *m = ctx;
    int r0 = task * ROWS_PER_TASK, r1 = r0 + ROWS_PER_TASK, rows = m->tokens * m->k;
    if (r1 > rows) r1 = rows;
    size_t w = (size_t)m->width;
    float *g = m->gate + (size_t)r0 * w;
    silu_mul(g, m->up + (size_t)r0 * w, (size_t)(r1 - r0) * w);
    if (m->bf16_rows) bf16_round_rows(m->isa, m->gate_b + (size_t)r0 * w, g, (size_t)(r1 - r0) * w);
    else if (m->round_inputs) bf16_round_in_f32(g, g, (size_t)(r1 - r0) * w);
}

/* out[t] = sum over its choices j, in order, of weight * its expert's row. */
static void combine_task(void *ctx, int task, int thread) {
    (void)thread;
    CpuMoe *m = ctx;
    int t0 = task * ROWS_PER_TASK, t1 = t0 + ROWS_PER_TASK, H = m->hidden;
    if (t1 > m->tokens) t1 = m->tokens;
    for (int t = t0; t < t1; t++) {
        float *o = m->out + (size_t)t * H;
        for (int j = 0; j < m->k; j++) {
            const float *y = m->y + (size_t)m->row_of[t * m->k + j] * H;
            float w = m->weights[t * m->k + j];
            if (j == 0)
                for (int i = 0; i < H; i++) o[i] = w * y[i];
            else
                for (int i = 0; i < H; i++) o[i] += w * y[i];
        }
    }
}

static void run_rows(CpuMoe *m, int rows, ThreadTaskFn fn) {
    thread_pool_run(m->pool, (rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK, fn, m);
}

/* Whether the experts' products all run on the bf16 dot kernel, so that
 * the rounded rows are needed as bf16 only (not also as float32). */
static bool bf16_rows_apply(const CpuMoe *m, const LayerWeights *L) {
    if (!m->round_inputs || !bf16_dot_kernel(m->isa)) return false;
    for (int e = 0; e < m->experts; e++) {
        const ExpertWeights *x = &L->experts[e];
        if (x->gate_proj.type != WEIGHT_BF16 || x->up_proj.type != WEIGHT_BF16 ||
            x->down_proj.type != WEIGHT_BF16)
            return false;
    }
    return true;
}

/* ---- the layer ---------------------------------------------------------------------------- */

/* Rows in expert order, tokens ascending within an expert. */
static void group_by_expert(CpuMoe *m, int T) {
    int E = m->experts, k = m->k;
    memset(m->offset, 0, sizeof *m->offset * (size_t)(E + 1));
    for (int i = 0; i < T * k; i++) m->offset[m->ids[i] + 1]++;
    for (int e = 0; e < E; e++) m->offset[e + 1] += m->offset[e];
    memcpy(m->fill, m->offset, sizeof *m->fill * (size_t)E);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            int row = m->fill[m->ids[t * k + j]]++;
            m->source[row] = t;
            m->row_of[t * k + j] = row;
        }
}

void cpu_moe(CpuMoe *m, float *out, const float *h, int T, const LayerWeights *L) {
    int E = m->experts, k = m->k;
    cpu_matmul(m->mm, m->logits, h, T, &L->router);
    for (int t = 0; t < T; t++)
        moe_route(m->logits + (size_t)t * E, E, k, m->norm, m->ids + (size_t)t * k,
                  m->weights + (size_t)t * k);
    group_by_expert(m, T);
    m->h = h;
    m->out = out;
    m->tokens = T;
    m->round_inputs = cpu_matmul_bf16_inputs(m->mm);
    m->isa = cpu_isa_active();
    m->bf16_rows = bf16_rows_apply(m, L);
    run_rows(m, T * k, gather_task);
    /* An expert no token chose gets no product: its weights are not read. */
    int g = 0;
    for (int e = 0; e < E; e++) {
        int r0 = m->offset[e], n = m->offset[e + 1] - r0;
        if (n == 0) continue;
        const float *x = m->bf16_rows ? NULL : m->x + (size_t)r0 * m->hidden;
        const uint16_t *xb = m->bf16_rows ? m->xb + (size_t)r0 * m->hidden : NULL;
        m->groups[g++] = (MatmulGroup){x, n, &L->experts[e].gate_proj, m->gate + (size_t)r0 * m->width, xb};
        m->groups[g++] = (MatmulGroup){x, n, &L->experts[e].up_proj, m->up + (size_t)r0 * m->width, xb};
    }
    cpu_matmul_grouped(m->mm, m->groups, g);
    run_rows(m, T * k, silu_task);
    g = 0;
    for (int e = 0; e < E; e++) {
        int r0 = m->offset[e], n = m->offset[e + 1] - r0;
        if (n > 0)
            m->groups[g++] = (MatmulGroup){m->bf16_rows ? NULL : m->gate + (size_t)r0 * m->width, n,
                                           &L->experts[e].down_proj, m->y + (size_t)r0 * m->hidden,
                                           m->bf16_rows ? m->gate_b + (size_t)r0 * m->width : NULL};
    }
    cpu_matmul_grouped(m->mm, m->groups, g);
    run_rows(m, T, combine_task);
}

/* ---- creation ----------------------------------------------------------------------------- */

void cpu_moe_destroy(CpuMoe *m) {
    if (m) free(m->memory);
    free(m);
}

/* Carves n elements of size `each` from *at (64-byte aligned pieces). */
static void *carve(char **at, size_t n, size_t each) {
    void *p = *at;
    *at += (n * each + 63) / 64 * 64;
    return p;
}

CpuMoe *cpu_moe_create(ThreadPool *pool, CpuMatmul *mm, const ModelConfig *c, int max_tokens,
                       Error *err) {
    CpuMoe *m = calloc(1, sizeof *m);
    if (!m) {
        error_set(err, "out of memory");
        return NULL;
    }
    *m = (CpuMoe){.pool = pool, .mm = mm, .experts = c->num_experts, .k = c->num_experts_per_tok,
                  .hidden = c->hidden_size, .width = c->moe_intermediate_size,
                  .norm = c->norm_topk_prob};
    size_t T = (size_t)max_tokens, rows = T * (size_t)m->k, E = (size_t)m->experts;
    size_t H = (size_t)m->hidden, W = (size_t)m->width;
    /* One block for all: its size is what the carving below adds up to. */
    size_t floats = T * E + rows + rows * (2 * H + 2 * W), ints = 2 * E + 1 + 3 * rows;
    size_t halves = rows * (H + W);
    m->memory = malloc(4 * (floats + ints) + 2 * halves + 2 * E * sizeof(MatmulGroup) + 64 * 18);
    if (!m->memory) {
        free(m);
        error_set(err, "out of memory (expert activations for %d tokens)", max_tokens);
        return NULL;
    }
    char *at = (char *)m->memory;
    m->logits = carve(&at, T * E, sizeof(float));
    m->weights = carve(&at, rows, sizeof(float));
    m->x = carve(&at, rows * H, sizeof(float));
    m->gate = carve(&at, rows * W, sizeof(float));
    m->up = carve(&at, rows * W, sizeof(float));
    m->y = carve(&at, rows * H, sizeof(float));
    m->xb = carve(&at, rows * H, sizeof(uint16_t));
    m->gate_b = carve(&at, rows * W, sizeof(uint16_t));
    m->ids = carve(&at, rows, sizeof(int32_t));
    m->offset = carve(&at, E + 1, sizeof(int32_t));
    m->fill = carve(&at, E, sizeof(int32_t));
    m->source = carve(&at, rows, sizeof(int32_t));
    m->row_of = carve(&at, rows, sizeof(int32_t));
    m->groups = carve(&at, 2 * E, sizeof(MatmulGroup));
    return m;
}
