/*
 * cpu_gated_deltanet.c - Gated DeltaNet's token mixer (see
 * cpu_gated_deltanet.h): the conv, the two forms of the delta rule, the
 * gated norm, the threading, and the portable inner loops.
 *
 * A call runs two parallel loops. The first, over (sequence, block of
 * CONV_BLOCK channels), runs the causal conv + SiLU in place over qkv, rows
 * last to first (row t reads rows t-K+1..t, not yet overwritten), after
 * setting aside the K-1 inputs that become the new conv state. The second,
 * over (sequence, value head), normalises the head's q and k rows into
 * scratch (a key head's rows are normalised once per value head that
 * shares it: O(rows * dk), nothing beside the state's O(rows * dk * dv)),
 * advances its state, and writes and norms its out rows.
 *
 * Recurrent step (per token; S' = exp(g) S):
 *   [qS; kS] = [q; k] S           (one pass reading S)
 *   delta = beta (v - exp(g) kS); o = exp(g) qS + (q.k) delta
 *   S = exp(g) S + k delta^T      (one pass writing S)
 * Chunked form (per chunk of n <= GDN_CHUNK tokens, G the cumulative sum of
 * g in the chunk, D[i][j] = exp(G_i - G_j)): with the chunk's state S0,
 *   delta_i = beta_i (v_i - exp(G_i) k_i S0) - sum_{j<i} A[i][j] delta_j,
 *   A[i][j] = beta_i (k_i.k_j) D[i][j], i.e. delta = (I + A)^-1 R: T =
 *   (I + A)^-1 by forward substitution over the n x n matrix, then one
 *   product T R; o_i = exp(G_i) q_i S0 + sum_{j<=i} (q_i.k_j) D[i][j] delta_j;
 *   S = exp(G_n-1) S0 + sum_i exp(G_n-1 - G_i) k_i delta_i^T.
 * Those are the spec's U - W S0 and the WY/UT update, equal to the token
 * loop in exact arithmetic; the chunk's work is five gemm calls, matrix
 * products the kernels tile in registers, where the token loop does
 * matrix-vector products bound by reading S.
 */
#include "cpu_gated_deltanet.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gated_deltanet_kernels.h"
#include "base/cpu_isa.h"

/* Tokens per chunk of the chunked form, and how many new rows a sequence
 * needs to take it (fewer: the recurrent step per token). At dk = dv = 128
 * both forms do 3 dk*dv products per token; the chunk adds ~4 C*128 more,
 * so a short chunk does least work: on the 0.8B shape (16 heads of
 * 128x128), AVX2, one thread, 512 tokens took 48-55 us/token/layer with
 * C = 16, 56-66 with 32, 68-77 with 64, 77-80 token by token; 2 rows are
 * already faster chunked, 1 row recurrent (cpu/PERFORMANCE_QWEN3_5.md). */
#define GDN_CHUNK 16
#define GDN_CHUNK_MIN_ROWS 2
/* Channels per conv task. */
#define CONV_BLOCK 256

/* ---- portable inner loops: the reference ---------------------------------- */

static void gemm_portable(float *C, int ldc, float cs, const float *X, int ldx, const float *B,
                          int ldb, int M, int N, int W) {
    /* Each C[m][w] sums in k order; w innermost so that the compiler can
     * vectorize over it (3-5x slower with k innermost). */
    for (int m = 0; m < M; m++) {
        float *c = C + (size_t)m * ldc;
        for (int w = 0; w < W; w++) c[w] = cs == 0.0f ? 0.0f : cs * c[w];
        for (int k = 0; k < N; k++) {
            float x = X[(size_t)m * ldx + k];
            const float *b = B + (size_t)k * ldb;
            for (int w = 0; w < W; w++) c[w] += x * b[w];
        }
    }
}

static float dot_portable(const float *x, const float *y, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

static void silu_portable(float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = x[i] / (1.0f + expf(-x[i]));
}

const GdnKernels gdn_kernels_portable = {gemm_portable, dot_portable, silu_portable, "portable"};

/* ---- the module ----------------------------------------------------------- */

struct CpuGdn {
    ThreadPool *pool;
    GdnShape s;
    int max_rows, chunk_min_rows;
    size_t conv_dim;
    const GdnKernels *k;
    int threads;
    size_t scratch_floats; /* per thread */
    float *scratch;        /* [threads][scratch_floats] */

    /* the call in progress, for the pool's tasks */
    const GdnLayerWeights *w;
    const GdnSeq *seqs;
    int conv_blocks;
    float *qkv, *out;
    const float *z, *a, *b;
};

size_t gdn_conv_dim(const GdnShape *s) {
    return 2 * (size_t)s->num_k_heads * s->k_dim + (size_t)s->num_v_heads * s->v_dim;
}

size_t gdn_conv_state_floats(const GdnShape *s) {
    return (size_t)(s->conv_kernel - 1) * gdn_conv_dim(s);
}

size_t gdn_recurrent_state_floats(const GdnShape *s) {
    return (size_t)s->num_v_heads * s->k_dim * s->v_dim;
}

/* A head task's scratch, GDN_CHUNK = C rows at most (the recurrent step
 * uses the first rows of qk, qks and r): */
typedef struct HeadScratch {
    float *qk;   /* [2C][dk]: the chunk's normalised q rows, then its k rows */
    float *kt;   /* [dk][C]: its k rows transposed (then scaled for the update) */
    float *qks;  /* [2C][dv]: qk times the state */
    float *r;    /* [C][dv]: R, then (recurrent step) delta */
    float *dl;   /* [C][dv]: delta */
    float *m;    /* [2C][C]: q.k then k.k, made into P and A */
    float *t;    /* [C][C]: (I + A)^-1 */
    float *gc;   /* [C]: cumulative g */
    float *beta; /* [C] */
    float *zs;   /* [dv]: silu(z) of one row */
} HeadScratch;

static size_t head_scratch_floats(const GdnShape *s) {
    size_t C = GDN_CHUNK, dk = (size_t)s->k_dim, dv = (size_t)s->v_dim;
    return 2 * C * dk + dk * C + 2 * C * dv + 2 * C * dv + 2 * C * C + C * C + 2 * C + dv;
}

static HeadScratch head_scratch(float *p, const GdnShape *s) {
    size_t C = GDN_CHUNK, dk = (size_t)s->k_dim, dv = (size_t)s->v_dim;
    HeadScratch h;
    h.qk = p, p += 2 * C * dk;
    h.kt = p, p += dk * C;
    h.qks = p, p += 2 * C * dv;
    h.r = p, p += C * dv;
    h.dl = p, p += C * dv;
    h.m = p, p += 2 * C * C;
    h.t = p, p += C * C;
    h.gc = p, p += C;
    h.beta = p, p += C;
    h.zs = p;
    return h;
}

/* conv: wT [K][CONV_BLOCK], the new state [K-1][CONV_BLOCK], one row [CONV_BLOCK] */
static size_t conv_scratch_floats(const GdnShape *s) {
    return (size_t)(2 * s->conv_kernel) * CONV_BLOCK;
}

CpuGdn *cpu_gdn_create(ThreadPool *pool, const GdnShape *s, int max_rows, Error *err) {
    if (s->num_k_heads <= 0 || s->num_v_heads <= 0 || s->num_v_heads % s->num_k_heads ||
        s->k_dim <= 0 || s->v_dim <= 0 || s->conv_kernel < 2 || max_rows <= 0) {
        error_set(err, "gated deltanet: bad shape (key heads %d, value heads %d, dims %d/%d, "
                       "conv kernel %d, rows %d)",
                  s->num_k_heads, s->num_v_heads, s->k_dim, s->v_dim, s->conv_kernel, max_rows);
        return NULL;
    }
    CpuGdn *g = calloc(1, sizeof *g);
    if (!g) {
        error_set(err, "gated deltanet: out of memory");
        return NULL;
    }
    g->pool = pool;
    g->s = *s;
    g->max_rows = max_rows;
    g->chunk_min_rows = GDN_CHUNK_MIN_ROWS;
    g->conv_dim = gdn_conv_dim(s);
#if defined(__x86_64__)
    CpuIsa isa = cpu_isa_active();
    g->k = isa >= CPU_ISA_AVX512 ? &gdn_kernels_avx512
           : isa >= CPU_ISA_AVX2 ? &gdn_kernels_avx2
                                 : &gdn_kernels_portable;
#else
    g->k = &gdn_kernels_portable;
#endif
    g->threads = thread_pool_size(pool);
    size_t hs = head_scratch_floats(s), cs = conv_scratch_floats(s);
    g->scratch_floats = ((hs > cs ? hs : cs) + 15) & ~(size_t)15; /* 64-byte strides */
    g->scratch = aligned_alloc(64, sizeof(float) * g->scratch_floats * g->threads);
    if (!g->scratch) {
        error_set(err, "gated deltanet: out of memory for %d threads' scratch", g->threads);
        free(g);
        return NULL;
    }
    return g;
}

void cpu_gdn_destroy(CpuGdn *g) {
    if (!g) return;
    free(g->scratch);
    free(g);
}

void cpu_gdn_set_chunk_min_rows(CpuGdn *g, int rows) { g->chunk_min_rows = rows < 1 ? 1 : rows; }

/* Task: the conv of one sequence's channels [c0, c1). */
static void conv_task(void *ctx, int task, int thread) {
    CpuGdn *g = ctx;
    const GdnSeq *sq = &g->seqs[task / g->conv_blocks];
    int K = g->s.conv_kernel, n = sq->num_rows;
    size_t cd = g->conv_dim;
    size_t c0 = (size_t)(task % g->conv_blocks) * CONV_BLOCK;
    int width = (int)(cd - c0 < CONV_BLOCK ? cd - c0 : CONV_BLOCK);
    float *wt = g->scratch + (size_t)thread * g->scratch_floats; /* [K][CONV_BLOCK] */
    float *ns = wt + (size_t)K * CONV_BLOCK;                      /* [K-1][CONV_BLOCK] */
    float *acc = ns + (size_t)(K - 1) * CONV_BLOCK;               /* [CONV_BLOCK] */
    float *st = sq->conv_state + c0;
    float *rows = g->qkv + (size_t)sq->first_row * cd + c0;
    if (sq->fresh)
        for (int r = 0; r < K - 1; r++) memset(st + (size_t)r * cd, 0, sizeof(float) * width);
    if (n <= 0) return;
    for (int c = 0; c < width; c++)
        for (int j = 0; j < K; j++) wt[(size_t)j * CONV_BLOCK + c] = g->w->conv_weight[(c0 + c) * K + j];
/* Input m of the sequence's window, m in [-(K-1), n): the state before 0. */
#define CONV_IN(m) ((m) < 0 ? st + (size_t)((K - 1) + (m)) * cd : rows + (size_t)(m) * cd)
    for (int r = 0; r < K - 1; r++) memcpy(ns + (size_t)r * CONV_BLOCK, CONV_IN(n - (K - 1) + r), sizeof(float) * width);
    for (int t = n - 1; t >= 0; t--) {
        for (int c = 0; c < width; c++) acc[c] = 0.0f;
        for (int j = 0; j < K; j++) {
            const float *x = CONV_IN(t - (K - 1) + j), *wj = wt + (size_t)j * CONV_BLOCK;
            for (int c = 0; c < width; c++) acc[c] += wj[c] * x[c];
        }
        g->k->silu(acc, width);
        memcpy(rows + (size_t)t * cd, acc, sizeof(float) * width);
    }
#undef CONV_IN
    for (int r = 0; r < K - 1; r++) memcpy(st + (size_t)r * cd, ns + (size_t)r * CONV_BLOCK, sizeof(float) * width);
}

/* x[0..n) * scale / sqrt(|x|^2 + 1e-6) into dst. */
static void l2norm(const GdnKernels *k, float *dst, const float *x, int n, float scale) {
    float inv = scale / sqrtf(k->dot(x, x, n) + 1e-6f);
    for (int i = 0; i < n; i++) dst[i] = x[i] * inv;
}

/* log(1 + e^x), as torch's softplus (linear above 20). */
static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* One value head of one sequence. */
typedef struct HeadJob {
    const CpuGdn *g;
    const GdnKernels *k;
    int h, kh, dk, dv, hk, hv;
    size_t cd, ldo; /* row strides of qkv and out / z */
    float *S;       /* [dk][dv] */
    float neg_A;    /* -exp(A_log[h]) */
    float dt_bias;
    float qscale;   /* 1 / sqrt(dk) */
} HeadJob;

/* Row `row`'s normalised q and k of the head's key head into q and k, and
 * its g and beta. */
static void prepare_row(const HeadJob *j, int row, float *q, float *k, float *gt, float *beta) {
    const float *x = j->g->qkv + (size_t)row * j->cd;
    l2norm(j->k, q, x + (size_t)j->kh * j->dk, j->dk, j->qscale);
    l2norm(j->k, k, x + (size_t)(j->hk + j->kh) * j->dk, j->dk, 1.0f);
    *gt = j->neg_A * softplus(j->g->a[(size_t)row * j->hv + j->h] + j->dt_bias);
    *beta = 1.0f / (1.0f + expf(-j->g->b[(size_t)row * j->hv + j->h]));
}

static const float *value_row(const HeadJob *j, int row) {
    return j->g->qkv + (size_t)row * j->cd + 2 * (size_t)j->hk * j->dk + (size_t)j->h * j->dv;
}

/* The recurrent step over one token. */
static void recurrent_step(const HeadJob *j, const HeadScratch *hs, int row) {
    int dk = j->dk, dv = j->dv;
    float gt, beta;
    prepare_row(j, row, hs->qk, hs->qk + dk, &gt, &beta);
    j->k->gemm(hs->qks, dv, 0.0f, hs->qk, dk, j->S, dv, 2, dk, dv); /* [qS; kS] */
    float eg = expf(gt), qk = j->k->dot(hs->qk, hs->qk + dk, dk);
    const float *v = value_row(j, row), *qs = hs->qks, *ks = hs->qks + dv;
    float *delta = hs->r, *o = j->g->out + (size_t)row * j->ldo + (size_t)j->h * dv;
    for (int c = 0; c < dv; c++) {
        delta[c] = beta * (v[c] - eg * ks[c]);
        o[c] = eg * qs[c] + qk * delta[c];
    }
    j->k->gemm(j->S, dv, eg, hs->qk + dk, 1, delta, dv, dk, 1, dv); /* S = eg S + k delta^T */
}

/* The chunked form over rows [r0, r0 + n), n <= GDN_CHUNK. */
static void chunk(const HeadJob *j, const HeadScratch *hs, int r0, int n) {
    const int C = GDN_CHUNK, dk = j->dk, dv = j->dv;
    const GdnKernels *k = j->k;
    float *qr = hs->qk, *kr = hs->qk + (size_t)n * dk; /* q rows, then k rows: [2n][dk] */
    float gsum = 0.0f;
    for (int i = 0; i < n; i++) {
        float gt;
        prepare_row(j, r0 + i, qr + (size_t)i * dk, kr + (size_t)i * dk, &gt, &hs->beta[i]);
        hs->gc[i] = gsum += gt;
        for (int r = 0; r < dk; r++) hs->kt[(size_t)r * C + i] = kr[(size_t)i * dk + r];
    }
    /* [qS0; kS0] and [q k^T; k k^T] */
    k->gemm(hs->qks, dv, 0.0f, hs->qk, dk, j->S, dv, 2 * n, dk, dv);
    k->gemm(hs->m, C, 0.0f, hs->qk, dk, hs->kt, C, 2 * n, dk, n);
    /* R_i = beta_i (v_i - exp(G_i) k_i S0); o_i = exp(G_i) q_i S0 */
    for (int i = 0; i < n; i++) {
        float eG = expf(hs->gc[i]), be = hs->beta[i];
        const float *v = value_row(j, r0 + i), *qs = hs->qks + (size_t)i * dv,
                    *ks = hs->qks + (size_t)(n + i) * dv;
        float *r = hs->r + (size_t)i * dv, *o = j->g->out + (size_t)(r0 + i) * j->ldo + (size_t)j->h * dv;
        for (int c = 0; c < dv; c++) {
            r[c] = be * (v[c] - eG * ks[c]);
            o[c] = eG * qs[c];
        }
    }
    /* P[i][j] = (q_i.k_j) D[i][j] for j <= i, 0 above (rows 0..n); A[i][j] =
     * beta_i (k_i.k_j) D[i][j] for j < i (rows n..2n, read below the diagonal) */
    float *P = hs->m, *A = hs->m + (size_t)n * C, *T = hs->t;
    for (int i = 0; i < n; i++) {
        for (int jj = 0; jj <= i; jj++) {
            float d = expf(hs->gc[i] - hs->gc[jj]);
            P[(size_t)i * C + jj] *= d;
            A[(size_t)i * C + jj] *= hs->beta[i] * d;
        }
        for (int jj = i + 1; jj < n; jj++) P[(size_t)i * C + jj] = 0.0f;
    }
    /* T = (I + A)^-1, row by row: T_i = e_i - sum_{j<i} A[i][j] T_j (T_j is
     * zero past column j) */
    for (int i = 0; i < n; i++) {
        float *ti = T + (size_t)i * C;
        for (int c = 0; c < n; c++) ti[c] = c == i ? 1.0f : 0.0f;
        for (int jj = 0; jj < i; jj++) {
            float aij = A[(size_t)i * C + jj];
            const float *tj = T + (size_t)jj * C;
            for (int c = 0; c <= jj; c++) ti[c] -= aij * tj[c];
        }
    }
    /* delta = T R; o += P delta */
    k->gemm(hs->dl, dv, 0.0f, T, C, hs->r, dv, n, n, dv);
    k->gemm(j->g->out + (size_t)r0 * j->ldo + (size_t)j->h * dv, (int)j->ldo, 1.0f, P, C, hs->dl,
            dv, n, n, dv);
    /* S = exp(G_last) S0 + sum_i exp(G_last - G_i) k_i delta_i^T */
    float glast = hs->gc[n - 1];
    for (int i = 0; i < n; i++) {
        float d = expf(glast - hs->gc[i]);
        for (int r = 0; r < dk; r++) hs->kt[(size_t)r * C + i] *= d;
    }
    k->gemm(j->S, dv, expf(glast), hs->kt, C, hs->dl, dv, dk, n, dv);
}

/* Task: one value head of one sequence. */
static void head_task(void *ctx, int task, int thread) {
    CpuGdn *g = ctx;
    const GdnShape *s = &g->s;
    const GdnSeq *sq = &g->seqs[task / s->num_v_heads];
    HeadJob j = {
        .g = g,
        .k = g->k,
        .h = task % s->num_v_heads,
        .dk = s->k_dim,
        .dv = s->v_dim,
        .hk = s->num_k_heads,
        .hv = s->num_v_heads,
        .cd = g->conv_dim,
        .ldo = (size_t)s->num_v_heads * s->v_dim,
        .qscale = 1.0f / sqrtf((float)s->k_dim),
    };
    j.kh = s->value_heads_tiled ? j.h % s->num_k_heads : j.h / (s->num_v_heads / s->num_k_heads);
    j.S = sq->recurrent_state + (size_t)j.h * j.dk * j.dv;
    j.neg_A = -expf(g->w->A_log[j.h]);
    j.dt_bias = g->w->dt_bias[j.h];
    if (sq->fresh) memset(j.S, 0, sizeof(float) * j.dk * j.dv);
    HeadScratch hs = head_scratch(g->scratch + (size_t)thread * g->scratch_floats, s);
    int first = sq->first_row, n = sq->num_rows;
    if (n < g->chunk_min_rows)
        for (int t = 0; t < n; t++) recurrent_step(&j, &hs, first + t);
    else
        for (int c = 0; c < n; c += GDN_CHUNK) chunk(&j, &hs, first + c, n - c < GDN_CHUNK ? n - c : GDN_CHUNK);
    /* y = o / sqrt(mean(o^2) + eps) * norm_weight * silu(z) */
    const float *nw = g->w->norm_weight;
    for (int t = first; t < first + n; t++) {
        float *o = g->out + (size_t)t * j.ldo + (size_t)j.h * j.dv;
        memcpy(hs.zs, g->z + (size_t)t * j.ldo + (size_t)j.h * j.dv, sizeof(float) * j.dv);
        g->k->silu(hs.zs, j.dv);
        float inv = 1.0f / sqrtf(g->k->dot(o, o, j.dv) / (float)j.dv + s->norm_eps);
        for (int c = 0; c < j.dv; c++) o[c] = o[c] * inv * nw[c] * hs.zs[c];
    }
}

void cpu_gdn_forward(CpuGdn *g, const GdnLayerWeights *w, const GdnSeq *seqs, int num_seqs,
                     float *qkv, const float *z, const float *a, const float *b, float *out) {
    if (num_seqs <= 0) return;
    g->w = w;
    g->seqs = seqs;
    g->qkv = qkv;
    g->z = z;
    g->a = a;
    g->b = b;
    g->out = out;
    g->conv_blocks = (int)((g->conv_dim + CONV_BLOCK - 1) / CONV_BLOCK);
    thread_pool_run(g->pool, num_seqs * g->conv_blocks, conv_task, g);
    thread_pool_run(g->pool, num_seqs * g->s.num_v_heads, head_task, g);
}
