/*
 * cuda_gdn_chunk.h - the chunked (WY/UT) form of the gated delta rule as the
 * GPU's prefill kernel runs it (cuda_gated_deltanet.cu: gdn_chunk_kernel),
 * phase by phase, in plain C for the kernel and for a CPU test that runs
 * every phase's elements one after another (tests/test_gdn_chunk.c), so the
 * arithmetic and the indexing are checked on machines without a GPU.
 * Hand-written: no library has it.
 *
 * Why: the recurrent kernel (gdn_head_kernel) takes a prompt one row at a
 * time, a barrier per row, on one block per value head. Columns of a head's
 * state S [dk][dv] evolve independently (column c only meets column c of v),
 * so here a block owns (sequence, value head, GDN_CHUNK_COLS columns) and
 * takes GDN_CHUNK_ROWS rows per step as small matrix products, 6 barriers a
 * chunk. With S the state before a chunk of n rows, G_t = g_0 + ... + g_t
 * (the log decays, <= 0) and D the new deltas (cpu_gated_deltanet.c's
 * chunk(), the same equations):
 *   L[t][i]  = beta_t exp(G_t - G_i) k_t.k_i          (i < t)
 *   (I + L) [U | W] = [beta v | beta exp(G) k]         forward substitution
 *   D        = U - W S
 *   o_t      = exp(G_t) q_t S + sum_{i<=t} exp(G_t - G_i) (q_t.k_i) D_i
 *   S'       = exp(G_n-1) S + sum_i exp(G_n-1 - G_i) k_i D_i^T
 * Only differences G_t - G_i (t >= i) and G_t itself are exponentiated:
 * every factor is in [0, 1].
 *
 * The block's norm cannot see the head's other columns, so o (float32) is
 * written over the rows' v in qkv (only this block reads those values), and
 * gdn_norm_kernel applies the gated RMSNorm afterwards.
 *
 * Phases of a chunk, each a loop of independent elements (idx = thread,
 * thread + threads, ...) between barriers; no element reads what another
 * element of its phase writes:
 *   stage  q, k rows -> q_s, k_s; v columns -> u; per row g, beta (gdn_chunk_gate)
 *   scale  q, k rows by their inverse norms (a warp per row on the GPU);
 *          G cumulated, exp(G_t) and exp(G_n-1 - G_t) (one warp)
 *   gram   L and QK (gdn_chunk_gram); W's right side (gdn_chunk_w_rhs); u *= beta
 *   solve  a column of [U | W] per element (gdn_chunk_solve)
 *   delta  u <- U - W S and o <- exp(G_t) q_t S (gdn_chunk_delta)
 *   out    o += intra-chunk part, to global (gdn_chunk_out); S updated (gdn_chunk_state)
 */
#ifndef NANOVLLM_CUDA_GDN_CHUNK_H
#define NANOVLLM_CUDA_GDN_CHUNK_H

#include <math.h>

#include "cuda_gdn_plan.h"

#define GDN_CHUNK_ROWS 32    /* rows per chunk (C) */
#define GDN_CHUNK_COLS 32    /* state columns per block */
#define GDN_CHUNK_THREADS 256
#define GDN_CHUNK_MIN_ROWS 32 /* a call whose longest sequence has this many rows takes the chunked kernels */
#define GDN_CHUNK_MAX_SMEM (227 << 10) /* an H100's (and an A100's 163 KB: shapes past it refused at launch) */
#define GDN_NORM_ROWS 8               /* rows per gdn_norm_kernel block */

/* Shared memory of a chunk block, floats from the start. Rows of q, k and w
 * are dk + 1 apart, so a warp reading one value of 32 rows hits 32 banks.
 *   S  [dk][COLS]  the state's columns, for the whole call
 *   q, k, w [C][dk + 1]
 *   u, o [C][COLS]
 *   L, QK [C][C]
 *   G, beta, eg, dend [C]   cumulated log decay, beta, exp(G_t), exp(G_n-1 - G_t) */
typedef struct GdnChunkSmem {
    size_t S, q, k, w, u, o, L, QK, G, beta, eg, dend, floats;
    int ldk;
} GdnChunkSmem;

GDN_PLAN_FN GdnChunkSmem gdn_chunk_smem(int dk) {
    GdnChunkSmem m;
    const size_t C = GDN_CHUNK_ROWS, W = GDN_CHUNK_COLS;
    m.ldk = dk + 1;
    m.S = 0;
    m.q = m.S + (size_t)dk * W;
    m.k = m.q + C * m.ldk;
    m.w = m.k + C * m.ldk;
    m.u = m.w + C * m.ldk;
    m.o = m.u + C * W;
    m.L = m.o + C * W;
    m.QK = m.L + C * C;
    m.G = m.QK + C * C;
    m.beta = m.G + C;
    m.eg = m.beta + C;
    m.dend = m.eg + C;
    m.floats = m.dend + C;
    return m;
}

/* Column tiles of a value head: the grid's x is Hv times this. */
GDN_PLAN_FN int gdn_chunk_col_tiles(int dv) { return (dv + GDN_CHUNK_COLS - 1) / GDN_CHUNK_COLS; }

/* A block's view of its chunk: pointers into its shared memory and the
 * sizes. n rows (1..C), nc columns (1..COLS) of the head. */
typedef struct GdnChunkView {
    float *S, *q, *k, *w, *u, *o, *L, *QK, *G, *beta, *eg, *dend;
    int dk, ldk, n, nc;
} GdnChunkView;

GDN_PLAN_FN GdnChunkView gdn_chunk_view(float *smem, int dk, int n, int nc) {
    const GdnChunkSmem m = gdn_chunk_smem(dk);
    GdnChunkView v;
    v.S = smem + m.S, v.q = smem + m.q, v.k = smem + m.k, v.w = smem + m.w, v.u = smem + m.u;
    v.o = smem + m.o, v.L = smem + m.L, v.QK = smem + m.QK, v.G = smem + m.G, v.beta = smem + m.beta;
    v.eg = smem + m.eg, v.dend = smem + m.dend;
    v.dk = dk, v.ldk = m.ldk, v.n = n, v.nc = nc;
    return v;
}

/* log(1 + e^x), as torch's softplus (linear above 20). */
GDN_PLAN_FN float gdn_softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* A row's log decay g = -exp(A_log) softplus(a + dt_bias) (neg_A is
 * -exp(A_log)) and beta = sigmoid(b). */
GDN_PLAN_FN void gdn_chunk_gate(float a, float b, float neg_A, float bias, float *g, float *beta) {
    *g = neg_A * gdn_softplus_f(a + bias);
    *beta = 1.0f / (1.0f + expf(-b));
}

/* The L2 normalisations' factors from the rows' sums of squares (q's with
 * 1/sqrt(dk)), as the recurrent kernel's. */
GDN_PLAN_FN float gdn_chunk_inv_norm(float sumsq, float scale) { return scale / sqrtf(sumsq + GDN_QK_EPS); }

/* After G is cumulated: exp(G_t) and exp(G_n-1 - G_t) for row t. */
GDN_PLAN_FN void gdn_chunk_decays(GdnChunkView v, int t) {
    v.eg[t] = expf(v.G[t]);
    v.dend[t] = expf(v.G[v.n - 1] - v.G[t]);
}

/* gram, idx in [0, C*C): t = idx / C, i = idx % C (a warp shares t: q_t and
 * k_t broadcast, k_i on 32 banks). L[t][i] for i < t, QK[t][i] for i <= t,
 * each with its decay; the rest of both left alone (never read). */
GDN_PLAN_FN void gdn_chunk_gram(GdnChunkView v, int idx) {
    const int t = idx / GDN_CHUNK_ROWS, i = idx % GDN_CHUNK_ROWS;
    if (t >= v.n || i > t) return;
    const float *qt = v.q + (size_t)t * v.ldk, *kt = v.k + (size_t)t * v.ldk, *ki = v.k + (size_t)i * v.ldk;
    float kk = 0.0f, qk = 0.0f;
    for (int r = 0; r < v.dk; r++) {
        kk = fmaf(kt[r], ki[r], kk);
        qk = fmaf(qt[r], ki[r], qk);
    }
    const float decay = expf(v.G[t] - v.G[i]);
    if (i < t) v.L[t * GDN_CHUNK_ROWS + i] = v.beta[t] * decay * kk;
    v.QK[t * GDN_CHUNK_ROWS + i] = decay * qk;
}

/* w's right side, idx in [0, C*dk): w[t][r] = beta_t exp(G_t) k_t[r]. */
GDN_PLAN_FN void gdn_chunk_w_rhs(GdnChunkView v, int idx) {
    const int t = idx / v.dk, r = idx % v.dk;
    if (t >= v.n) return;
    v.w[(size_t)t * v.ldk + r] = v.beta[t] * v.eg[t] * v.k[(size_t)t * v.ldk + r];
}

/* u's right side, idx in [0, C*COLS): u[t][c] *= beta_t. */
GDN_PLAN_FN void gdn_chunk_u_rhs(GdnChunkView v, int idx) {
    const int t = idx / GDN_CHUNK_COLS, c = idx % GDN_CHUNK_COLS;
    if (t >= v.n || c >= v.nc) return;
    v.u[t * GDN_CHUNK_COLS + c] *= v.beta[t];
}

/* solve, idx in [0, dk + COLS): column idx of [W | U] (idx < dk: w's
 * column, else u's column idx - dk), forward substitution down the rows in
 * place: Y_t = X_t - sum_{i<t} L[t][i] Y_i. */
GDN_PLAN_FN void gdn_chunk_solve(GdnChunkView v, int idx) {
    float *col;
    size_t ld;
    if (idx < v.dk) {
        col = v.w + idx, ld = (size_t)v.ldk;
    } else {
        if (idx - v.dk >= v.nc) return;
        col = v.u + (idx - v.dk), ld = GDN_CHUNK_COLS;
    }
    for (int t = 1; t < v.n; t++) {
        float y = col[t * ld];
        const float *Lt = v.L + t * GDN_CHUNK_ROWS;
        for (int i = 0; i < t; i++) y = fmaf(-Lt[i], col[i * ld], y);
        col[t * ld] = y;
    }
}

/* delta, idx in [0, C*COLS): with t = idx / COLS, c = idx % COLS (a warp
 * shares t): u[t][c] <- U[t][c] - W_t . S[:, c] (the new delta) and
 * o[t][c] <- exp(G_t) q_t . S[:, c] (the state's part of the output). */
GDN_PLAN_FN void gdn_chunk_delta(GdnChunkView v, int idx) {
    const int t = idx / GDN_CHUNK_COLS, c = idx % GDN_CHUNK_COLS;
    if (t >= v.n || c >= v.nc) return;
    const float *wt = v.w + (size_t)t * v.ldk, *qt = v.q + (size_t)t * v.ldk;
    float ws = 0.0f, qs = 0.0f;
    for (int r = 0; r < v.dk; r++) {
        const float s = v.S[r * GDN_CHUNK_COLS + c];
        ws = fmaf(wt[r], s, ws);
        qs = fmaf(qt[r], s, qs);
    }
    v.u[t * GDN_CHUNK_COLS + c] -= ws;
    v.o[t * GDN_CHUNK_COLS + c] = v.eg[t] * qs;
}

/* out, idx in [0, C*COLS): o[t][c] + sum_{i<=t} QK[t][i] D_i[c], the row's
 * output before the norm; returned (the kernel stores it over v), or 0 with
 * *valid false for an element past n or nc. */
GDN_PLAN_FN float gdn_chunk_out(GdnChunkView v, int idx, int *valid) {
    const int t = idx / GDN_CHUNK_COLS, c = idx % GDN_CHUNK_COLS;
    *valid = t < v.n && c < v.nc;
    if (!*valid) return 0.0f;
    float o = v.o[t * GDN_CHUNK_COLS + c];
    const float *QKt = v.QK + t * GDN_CHUNK_ROWS;
    for (int i = 0; i <= t; i++) o = fmaf(QKt[i], v.u[i * GDN_CHUNK_COLS + c], o);
    return o;
}

/* state, idx in [0, dk*COLS): r = idx / COLS, c = idx % COLS:
 * S[r][c] <- exp(G_n-1) S[r][c] + sum_i exp(G_n-1 - G_i) k_i[r] D_i[c]. */
GDN_PLAN_FN void gdn_chunk_state(GdnChunkView v, int idx) {
    const int r = idx / GDN_CHUNK_COLS, c = idx % GDN_CHUNK_COLS;
    if (r >= v.dk || c >= v.nc) return;
    float s = v.eg[v.n - 1] * v.S[idx];
    for (int i = 0; i < v.n; i++) s = fmaf(v.dend[i] * v.k[(size_t)i * v.ldk + r], v.u[i * GDN_CHUNK_COLS + c], s);
    v.S[idx] = s;
}

/* The gated RMSNorm's factor for a row of one head from its sum of o^2. */
GDN_PLAN_FN float gdn_norm_inv(float sumsq, int dv, float eps) { return 1.0f / sqrtf(sumsq / (float)dv + eps); }

/* Whether the chunked kernel takes this head size (its shared memory). */
GDN_PLAN_FN int gdn_chunk_fits(int dk) {
    return gdn_chunk_smem(dk).floats * sizeof(float) <= (size_t)GDN_CHUNK_MAX_SMEM;
}

#endif
