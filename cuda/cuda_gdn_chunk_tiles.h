/*
 * cuda_gdn_chunk_tiles.h - the chunk's products (cuda_gdn_chunk.h's gram,
 * delta, out and state phases) two rows by two columns an element, as
 * gdn_chunk_kernel runs them: each operand read from shared memory serves
 * two outputs instead of one, and adjacent state or delta columns come in
 * one 8-byte load. Every output keeps its own sum in the order of the
 * one-output functions of cuda_gdn_chunk.h, so the results are the same
 * bits (tests/test_gdn_chunk.c runs both). Hand-written, as that header.
 *
 * Why: on an H200 the one-output phases took ~47 us a 32-row chunk where
 * the arithmetic predicted ~3 (cuda/PERFORMANCE_HISTORY.md, v4-v8 measured): both
 * operands of every FMA came from shared memory, 1.5-3 loads an FMA; here
 * 0.6-1. Needs GDN_CHUNK_ROWS and GDN_CHUNK_COLS even; any dk.
 */
#ifndef NANOVLLM_CUDA_GDN_CHUNK_TILES_H
#define NANOVLLM_CUDA_GDN_CHUNK_TILES_H

#include "cuda_gdn_chunk.h"

#if GDN_CHUNK_ROWS % 2 || GDN_CHUNK_COLS % 2
#error "the 2 x 2 tiles need an even chunk and column tile"
#endif

#define GDN_ROW_PAIRS (GDN_CHUNK_ROWS / 2)
#define GDN_COL_PAIRS (GDN_CHUNK_COLS / 2)

/* Elements of each phase: the idx range of its loop. */
GDN_PLAN_FN int gdn_tiles_gram(void) { return GDN_ROW_PAIRS * GDN_ROW_PAIRS; }
GDN_PLAN_FN int gdn_tiles_rows_cols(void) { return GDN_ROW_PAIRS * GDN_COL_PAIRS; } /* delta, out */
GDN_PLAN_FN int gdn_tiles_state(int dk) { return (dk + 1) / 2 * GDN_COL_PAIRS; }

/* Two adjacent floats (p 8-byte aligned: an even column of a row of COLS). */
GDN_PLAN_FN void gdn_load2(const float *p, float *a, float *b) {
#ifdef __CUDA_ARCH__
    const float2 x = *reinterpret_cast<const float2 *>(p);
    *a = x.x, *b = x.y;
#else
    *a = p[0], *b = p[1];
#endif
}

/* gram for t in {t0, t0 + 1}, i in {i0, i0 + 1}: idx = (t0 / 2) * ROW_PAIRS
 * + i0 / 2 (a warp: two t pairs, sixteen i pairs). gdn_chunk_gram's writes. */
GDN_PLAN_FN void gdn_chunk_gram2(GdnChunkView v, int idx) {
    const int t0 = 2 * (idx / GDN_ROW_PAIRS), i0 = 2 * (idx % GDN_ROW_PAIRS);
    if (t0 >= v.n || i0 > t0 + 1) return;
    const float *q0 = v.q + (size_t)t0 * v.ldk, *q1 = q0 + v.ldk;
    const float *k0 = v.k + (size_t)t0 * v.ldk, *k1 = k0 + v.ldk;
    const float *a0 = v.k + (size_t)i0 * v.ldk, *a1 = a0 + v.ldk;
    float kk00 = 0.0f, kk01 = 0.0f, kk10 = 0.0f, kk11 = 0.0f, qk00 = 0.0f, qk01 = 0.0f, qk10 = 0.0f, qk11 = 0.0f;
    for (int r = 0; r < v.dk; r++) {
        const float x0 = k0[r], x1 = k1[r], y0 = q0[r], y1 = q1[r], z0 = a0[r], z1 = a1[r];
        kk00 = fmaf(x0, z0, kk00), kk01 = fmaf(x0, z1, kk01), kk10 = fmaf(x1, z0, kk10), kk11 = fmaf(x1, z1, kk11);
        qk00 = fmaf(y0, z0, qk00), qk01 = fmaf(y0, z1, qk01), qk10 = fmaf(y1, z0, qk10), qk11 = fmaf(y1, z1, qk11);
    }
    const float kk[2][2] = {{kk00, kk01}, {kk10, kk11}}, qk[2][2] = {{qk00, qk01}, {qk10, qk11}};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            const int t = t0 + a, i = i0 + b;
            if (t >= v.n || i > t) continue;
            const float decay = expf(v.G[t] - v.G[i]);
            if (i < t) v.L[t * GDN_CHUNK_ROWS + i] = v.beta[t] * decay * kk[a][b];
            v.QK[t * GDN_CHUNK_ROWS + i] = decay * qk[a][b];
        }
}

/* delta for t in {t0, t0 + 1}, c in {c0, c0 + 1}: idx = (t0 / 2) *
 * COL_PAIRS + c0 / 2. gdn_chunk_delta's writes. */
GDN_PLAN_FN void gdn_chunk_delta2(GdnChunkView v, int idx) {
    const int t0 = 2 * (idx / GDN_COL_PAIRS), c0 = 2 * (idx % GDN_COL_PAIRS);
    if (t0 >= v.n || c0 >= v.nc) return;
    const float *w0 = v.w + (size_t)t0 * v.ldk, *w1 = w0 + v.ldk, *q0 = v.q + (size_t)t0 * v.ldk, *q1 = q0 + v.ldk;
    float ws00 = 0.0f, ws01 = 0.0f, ws10 = 0.0f, ws11 = 0.0f, qs00 = 0.0f, qs01 = 0.0f, qs10 = 0.0f, qs11 = 0.0f;
    for (int r = 0; r < v.dk; r++) {
        float s0, s1;
        gdn_load2(v.S + r * GDN_CHUNK_COLS + c0, &s0, &s1);
        const float x0 = w0[r], x1 = w1[r], y0 = q0[r], y1 = q1[r];
        ws00 = fmaf(x0, s0, ws00), ws01 = fmaf(x0, s1, ws01), ws10 = fmaf(x1, s0, ws10), ws11 = fmaf(x1, s1, ws11);
        qs00 = fmaf(y0, s0, qs00), qs01 = fmaf(y0, s1, qs01), qs10 = fmaf(y1, s0, qs10), qs11 = fmaf(y1, s1, qs11);
    }
    const float ws[2][2] = {{ws00, ws01}, {ws10, ws11}}, qs[2][2] = {{qs00, qs01}, {qs10, qs11}};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            const int t = t0 + a, c = c0 + b;
            if (t >= v.n || c >= v.nc) continue;
            v.u[t * GDN_CHUNK_COLS + c] -= ws[a][b];
            v.o[t * GDN_CHUNK_COLS + c] = v.eg[t] * qs[a][b];
        }
}

/* out for t in {t0, t0 + 1}, c in {c0, c0 + 1} (idx as delta): o[a][b] the
 * row t0 + a, column c0 + b output before the norm, as gdn_chunk_out; bit
 * a * 2 + b of the result set where that element is valid. */
GDN_PLAN_FN int gdn_chunk_out2(GdnChunkView v, int idx, int *t0_out, int *c0_out, float o[2][2]) {
    const int t0 = 2 * (idx / GDN_COL_PAIRS), c0 = 2 * (idx % GDN_COL_PAIRS);
    *t0_out = t0, *c0_out = c0;
    if (t0 >= v.n || c0 >= v.nc) return 0;
    const bool row1 = t0 + 1 < v.n;
    int valid = 0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            const bool ok = t0 + a < v.n && c0 + b < v.nc;
            o[a][b] = ok ? v.o[(t0 + a) * GDN_CHUNK_COLS + c0 + b] : 0.0f;
            valid |= (int)ok << (a * 2 + b);
        }
    const float *p0 = v.QK + t0 * GDN_CHUNK_ROWS, *p1 = p0 + GDN_CHUNK_ROWS;
    for (int i = 0; i <= t0; i++) {
        float u0, u1;
        gdn_load2(v.u + i * GDN_CHUNK_COLS + c0, &u0, &u1);
        const float x0 = p0[i];
        o[0][0] = fmaf(x0, u0, o[0][0]), o[0][1] = fmaf(x0, u1, o[0][1]);
        if (row1) {
            const float x1 = p1[i];
            o[1][0] = fmaf(x1, u0, o[1][0]), o[1][1] = fmaf(x1, u1, o[1][1]);
        }
    }
    if (row1) {
        float u0, u1;
        gdn_load2(v.u + (t0 + 1) * GDN_CHUNK_COLS + c0, &u0, &u1);
        const float x1 = p1[t0 + 1];
        o[1][0] = fmaf(x1, u0, o[1][0]), o[1][1] = fmaf(x1, u1, o[1][1]);
    }
    return valid;
}

/* state for r in {r0, r0 + 1}, c in {c0, c0 + 1}: idx = (r0 / 2) *
 * COL_PAIRS + c0 / 2. gdn_chunk_state's update. */
GDN_PLAN_FN void gdn_chunk_state2(GdnChunkView v, int idx) {
    const int r0 = 2 * (idx / GDN_COL_PAIRS), c0 = 2 * (idx % GDN_COL_PAIRS);
    if (r0 >= v.dk || c0 >= v.nc) return;
    const bool r1 = r0 + 1 < v.dk; /* an odd dk's last pair: row r0 alone */
    const float e = v.eg[v.n - 1];
    float *S0 = v.S + r0 * GDN_CHUNK_COLS + c0, *S1 = S0 + GDN_CHUNK_COLS;
    float s00 = e * S0[0], s01 = e * S0[1], s10 = r1 ? e * S1[0] : 0.0f, s11 = r1 ? e * S1[1] : 0.0f;
    for (int i = 0; i < v.n; i++) {
        float u0, u1;
        gdn_load2(v.u + i * GDN_CHUNK_COLS + c0, &u0, &u1);
        const float d = v.dend[i], x0 = d * v.k[(size_t)i * v.ldk + r0], x1 = d * v.k[(size_t)i * v.ldk + r0 + 1];
        s00 = fmaf(x0, u0, s00), s01 = fmaf(x0, u1, s01), s10 = fmaf(x1, u0, s10), s11 = fmaf(x1, u1, s11);
    }
    S0[0] = s00;
    if (c0 + 1 < v.nc) S0[1] = s01;
    if (r1) {
        S1[0] = s10;
        if (c0 + 1 < v.nc) S1[1] = s11;
    }
}

#endif
