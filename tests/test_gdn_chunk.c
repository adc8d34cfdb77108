/*
 * test_gdn_chunk.c - the GPU's chunked Gated DeltaNet (cuda/cuda_gdn_chunk.h,
 * the phases gdn_chunk_kernel and gdn_norm_kernel run) executed on the CPU:
 * every block in turn, every phase's elements one after another, through the
 * same functions the kernel calls, with the block's shared memory poisoned
 * with NaN before each chunk so that a read of anything a phase did not
 * write shows. The reductions the GPU does by warps (the rows' sums of
 * squares, the cumulative decay) are plain loops here. Compared with the
 * CPU module's recurrent step (cpu_gated_deltanet.h, token by token: an
 * independent derivation), call by call on one sequence: a fresh prompt over
 * several chunks, continuations of 33, 1 and 64 rows; shapes with a partial
 * column tile, several column tiles, value heads tiled, dk 256 and an odd
 * dk. The kernel runs the products two by two (cuda_gdn_chunk_tiles.h):
 * every call runs both forms, which must agree to the bit, and the tiled
 * one is compared with the recurrent step. Runs on
 * every machine: what it cannot see is the launch itself (grid, barriers,
 * shared memory size), which the GPU tests cover.
 *
 * Tolerance: both sides float32 with different summation orders; measured
 * worst |chunked - recurrent| / (1 + |recurrent|) is printed; bound 2e-5.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "cpu/cpu_gated_deltanet.h"
#include "cuda/cuda_gdn_chunk_tiles.h"

#define TOL 2e-5

static TestRng rng;

static float silu(float x) { return x / (1.0f + expf(-x)); }

typedef struct Weights {
    float *A_log, *dt_bias, *norm_w;
} Weights;

/* gdn_chunk_kernel for one sequence of `rows` rows at row 0 of qkv (the
 * conv's output), every (value head, column tile) block in turn; its
 * recurrent state [Hv][dk][dv] in `state`, zeroed first when fresh. */
static void chunk_blocks(const CudaGdnShape *s, const Weights *w, float *state, bool fresh, float *qkv,
                         const float *a, const float *b, int rows, bool tiled_products) {
    const int hk = s->num_k_heads, hv = s->num_v_heads, dk = s->k_dim, dv = s->v_dim;
    const int C = GDN_CHUNK_ROWS, W = GDN_CHUNK_COLS, tiles = gdn_chunk_col_tiles(dv);
    const size_t cd = gdn_plan_conv_dim(s), floats = gdn_chunk_smem(dk).floats;
    float *smem = malloc(sizeof(float) * floats);
    cr_assert(smem);
    for (int blk = 0; blk < hv * tiles; blk++) {
        const int h = blk / tiles, c0 = (blk % tiles) * W, nc = dv - c0 < W ? dv - c0 : W;
        const int kh = s->value_heads_tiled ? h % hk : h / (hv / hk);
        const size_t v_at = 2 * (size_t)hk * dk + (size_t)h * dv + c0;
        float *S = state + (size_t)h * dk * dv;
        for (size_t i = 0; i < floats; i++) smem[i] = NAN;
        GdnChunkView v = gdn_chunk_view(smem, dk, C, nc);
        for (int i = 0; i < dk * W; i++)
            v.S[i] = i % W < nc && !fresh ? S[(size_t)(i / W) * dv + c0 + i % W] : 0.0f;
        const float neg_A = -expf(w->A_log[h]), bias = w->dt_bias[h], qscale = 1.0f / sqrtf((float)dk);
        for (int t0 = 0; t0 < rows; t0 += C) {
            const int n = rows - t0 < C ? rows - t0 : C;
            for (size_t i = (size_t)dk * W; i < floats; i++) smem[i] = NAN; /* all but S */
            v.n = n;
            for (int i = 0; i < n * dk; i++) {
                const float *x = qkv + (size_t)(t0 + i / dk) * cd;
                v.q[(i / dk) * v.ldk + i % dk] = x[(size_t)kh * dk + i % dk];
                v.k[(i / dk) * v.ldk + i % dk] = x[(size_t)(hk + kh) * dk + i % dk];
            }
            for (int i = 0; i < n * W; i++)
                if (i % W < nc) v.u[i] = qkv[(size_t)(t0 + i / W) * cd + v_at + i % W];
            for (int t = 0; t < n; t++) {
                const size_t ab = (size_t)(t0 + t) * hv + h;
                gdn_chunk_gate(a[ab], b[ab], neg_A, bias, &v.G[t], &v.beta[t]);
            }
            for (int t = 1; t < n; t++) v.G[t] += v.G[t - 1];
            for (int t = 0; t < n; t++) gdn_chunk_decays(v, t);
            for (int t = 0; t < n; t++) {
                float *qt = v.q + t * v.ldk, *kt = v.k + t * v.ldk, qq = 0.0f, kk = 0.0f;
                for (int r = 0; r < dk; r++) qq += qt[r] * qt[r], kk += kt[r] * kt[r];
                const float iq = gdn_chunk_inv_norm(qq, qscale), ik = gdn_chunk_inv_norm(kk, 1.0f);
                for (int r = 0; r < dk; r++) qt[r] *= iq, kt[r] *= ik;
            }
            if (tiled_products)
                for (int i = 0; i < gdn_tiles_gram(); i++) gdn_chunk_gram2(v, i);
            else
                for (int i = 0; i < C * C; i++) gdn_chunk_gram(v, i);
            for (int i = 0; i < n * dk; i++) gdn_chunk_w_rhs(v, i);
            for (int i = 0; i < n * W; i++) gdn_chunk_u_rhs(v, i);
            for (int i = 0; i < dk + W; i++) gdn_chunk_solve(v, i);
            if (tiled_products) {
                for (int i = 0; i < gdn_tiles_rows_cols(); i++) gdn_chunk_delta2(v, i);
                for (int i = 0; i < gdn_tiles_rows_cols(); i++) {
                    int r, c;
                    float o[2][2];
                    const int valid = gdn_chunk_out2(v, i, &r, &c, o);
                    for (int e = 0; e < 4; e++)
                        if (valid >> e & 1) qkv[(size_t)(t0 + r + e / 2) * cd + v_at + c + e % 2] = o[e / 2][e % 2];
                }
                for (int i = 0; i < gdn_tiles_state(dk); i++) gdn_chunk_state2(v, i);
                continue;
            }
            for (int i = 0; i < n * W; i++) gdn_chunk_delta(v, i);
            for (int i = 0; i < n * W; i++) {
                int valid;
                const float o = gdn_chunk_out(v, i, &valid);
                if (valid) qkv[(size_t)(t0 + i / W) * cd + v_at + i % W] = o;
            }
            for (int i = 0; i < dk * W; i++) gdn_chunk_state(v, i);
        }
        for (int i = 0; i < dk * W; i++)
            if (i % W < nc) S[(size_t)(i / W) * dv + c0 + i % W] = v.S[i];
    }
    free(smem);
}

/* gdn_norm_kernel: out[row][h*dv + c] from o in qkv's v columns. */
static void norm_rows(const CudaGdnShape *s, const Weights *w, const float *qkv, const float *z, float *out,
                      int rows) {
    const int hv = s->num_v_heads, dv = s->v_dim;
    const size_t cd = gdn_plan_conv_dim(s), ldo = (size_t)hv * dv;
    for (int row = 0; row < rows; row++)
        for (int h = 0; h < hv; h++) {
            const float *o = qkv + (size_t)row * cd + 2 * (size_t)s->num_k_heads * s->k_dim + (size_t)h * dv;
            float ss = 0.0f;
            for (int i = 0; i < dv; i++) ss += o[i] * o[i];
            const float inv = gdn_norm_inv(ss, dv, s->norm_eps);
            const size_t at = (size_t)row * ldo + (size_t)h * dv;
            for (int i = 0; i < dv; i++) out[at + i] = o[i] * inv * w->norm_w[i] * silu(z[at + i]);
        }
}

static double worst_of(const float *got, const float *want, size_t n, const char *what, int call) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - want[i]) / (1.0 + fabs(want[i]));
        cr_assert(d <= TOL, "call %d: %s[%zu] %.8g vs %.8g", call, what, i, got[i], want[i]);
        if (d > worst) worst = d;
    }
    return worst;
}

static void check_shape(int hk, int hv, int dk, int dv, bool tiled, uint64_t seed) {
    static const int calls[] = {200, 33, 1, 64};
    const CudaGdnShape s = {hk, hv, dk, dv, 4, 1e-6f, tiled};
    const GdnShape cs = {hk, hv, dk, dv, 4, 1e-6f, tiled};
    const size_t cd = gdn_conv_dim(&cs), vd = (size_t)hv * dv, rec = gdn_recurrent_state_floats(&cs);
    const int max_rows = 200;
    rng.state = seed;
    Weights w = {malloc(sizeof(float) * hv), malloc(sizeof(float) * hv), malloc(sizeof(float) * dv)};
    float *conv_w = malloc(sizeof(float) * cd * 4), *conv_state = calloc(gdn_conv_state_floats(&cs), sizeof(float));
    float *want_state = malloc(sizeof(float) * rec), *got_state = malloc(sizeof(float) * rec);
    float *qkv = malloc(sizeof(float) * max_rows * cd), *z = malloc(sizeof(float) * max_rows * vd);
    float *a = malloc(sizeof(float) * max_rows * hv), *b = malloc(sizeof(float) * max_rows * hv);
    float *want = malloc(sizeof(float) * max_rows * vd), *got = malloc(sizeof(float) * max_rows * vd);
    float *qkv_one = malloc(sizeof(float) * max_rows * cd), *state_one = malloc(sizeof(float) * rec);
    cr_assert(w.A_log && w.dt_bias && w.norm_w && conv_w && conv_state && want_state && got_state && qkv && z && a &&
              b && want && got && qkv_one && state_one);
    for (int i = 0; i < hv; i++) {
        w.A_log[i] = (float)log(0.5 + 3.5 * test_rng_uniform(&rng));
        w.dt_bias[i] = test_rng_gauss(&rng);
    }
    for (int i = 0; i < dv; i++) w.norm_w[i] = (float)(0.5 + test_rng_uniform(&rng));
    for (size_t i = 0; i < cd * 4; i++) conv_w[i] = (float)(test_rng_uniform(&rng) - 0.5);
    Error err = {0};
    ThreadPool *tp = thread_pool_create(1, &err);
    cr_assert(tp, "%s", err.msg);
    CpuGdn *cpu = cpu_gdn_create(tp, &cs, max_rows, &err);
    cr_assert(cpu, "%s", err.msg);
    cpu_gdn_set_chunk_min_rows(cpu, INT_MAX); /* the recurrent step only */
    const GdnLayerWeights cw = {conv_w, w.A_log, w.dt_bias, w.norm_w};
    double worst_out = 0.0, worst_state = 0.0;
    for (int call = 0; call < 4; call++) {
        const int rows = calls[call];
        for (size_t i = 0; i < rows * cd; i++) qkv[i] = test_rng_gauss(&rng);
        for (size_t i = 0; i < rows * vd; i++) z[i] = test_rng_gauss(&rng);
        for (size_t i = 0; i < (size_t)rows * hv; i++) a[i] = test_rng_gauss(&rng), b[i] = 2.0f * test_rng_gauss(&rng);
        const GdnSeq seq = {0, rows, conv_state, want_state, call == 0};
        cpu_gdn_forward(cpu, &cw, &seq, 1, qkv, z, a, b, want); /* leaves the conv's output in qkv */
        /* one output an element, then two by two (what the kernel runs): the same bits */
        memcpy(qkv_one, qkv, sizeof(float) * rows * cd);
        if (call) memcpy(state_one, got_state, sizeof(float) * rec);
        chunk_blocks(&s, &w, state_one, call == 0, qkv_one, a, b, rows, false);
        chunk_blocks(&s, &w, got_state, call == 0, qkv, a, b, rows, true);
        cr_assert(memcmp(qkv_one, qkv, sizeof(float) * rows * cd) == 0, "call %d: tiled outputs differ", call);
        cr_assert(memcmp(state_one, got_state, sizeof(float) * rec) == 0, "call %d: tiled states differ", call);
        norm_rows(&s, &w, qkv, z, got, rows);
        double d = worst_of(got, want, rows * vd, "out", call);
        worst_out = d > worst_out ? d : worst_out;
        d = worst_of(got_state, want_state, rec, "state", call);
        worst_state = d > worst_state ? d : worst_state;
    }
    cr_log_info("chunked vs recurrent, Hk %d Hv %d dk %d dv %d%s: worst out %.2e, state %.2e (bound %.0e)", hk, hv,
                dk, dv, tiled ? " tiled" : "", worst_out, worst_state, TOL);
    cpu_gdn_destroy(cpu);
    thread_pool_destroy(tp);
    void *all[] = {w.A_log,    w.dt_bias, w.norm_w, conv_w, conv_state, want_state, got_state, qkv, z, a, b, want,
                   got,        qkv_one,   state_one};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

Test(gdn_chunk, odd_shape_partial_column_tile) { check_shape(2, 4, 32, 24, false, 1); }

Test(gdn_chunk, real_head_size) { check_shape(2, 4, 128, 128, false, 2); }

Test(gdn_chunk, value_heads_tiled_two_tiles) { check_shape(2, 6, 64, 40, true, 3); }

Test(gdn_chunk, large_key_dim) { check_shape(1, 2, 256, 64, false, 4); }

Test(gdn_chunk, odd_key_dim) { check_shape(1, 2, 33, 24, false, 5); }

/* The shared memory regions are disjoint and in bounds, and the sizes the
 * launch asks for are what the kernel's view uses. */
Test(gdn_chunk, shared_memory_layout) {
    static const int dks[] = {1, 24, 32, 128, 256};
    for (int i = 0; i < 5; i++) {
        const int dk = dks[i];
        const GdnChunkSmem m = gdn_chunk_smem(dk);
        const size_t C = GDN_CHUNK_ROWS, W = GDN_CHUNK_COLS;
        const size_t at[] = {m.S, m.q, m.k, m.w, m.u, m.o, m.L, m.QK, m.G, m.beta, m.eg, m.dend, m.floats};
        const size_t len[] = {dk * W, C * (dk + 1), C * (dk + 1), C * (dk + 1), C * W, C * W, C * C, C * C, C, C, C, C};
        for (int r = 0; r < 12; r++) cr_expect_eq(at[r] + len[r], at[r + 1], "dk %d region %d", dk, r);
        cr_expect(gdn_chunk_fits(dk), "dk %d", dk);
    }
    /* 82.8 KB at dk 128: two blocks on an H100's 228 KB */
    cr_expect_eq(gdn_chunk_smem(128).floats * sizeof(float), 82816);
    cr_expect(!gdn_chunk_fits(512));
}
