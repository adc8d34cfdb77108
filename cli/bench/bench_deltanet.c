/*
 * bench_deltanet.c - `nanovllm bench --deltanet` (bench_deltanet.h).
 *
 * One linear-attention layer of Qwen3.5-0.8B (16 key and value heads of
 * 128 x 128, conv 4; no projections: in_proj's outputs are random rows)
 * through cpu_gdn_forward, as a model calls it: single-stream decode (one
 * row a call) with the state of each call another of STATES sequences' or
 * layers', 64 MiB of them, so that each 1 MiB state comes from memory as it
 * does in a model, where a token's weights stream through the caches
 * between a layer's two visits; and a 512-token prefill from a fresh
 * state. The scalar, AVX2 and AVX-512 kernels where the CPU runs them
 * (the levels above AVX-512 use its kernels), interleaved call by call so
 * that a slow moment of the machine hits them alike; medians of wall
 * time, per token and layer.
 */
#include "bench_deltanet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_isa.h"
#include "base/log.h"
#include "cpu/cpu_gated_deltanet.h"
#include "cpu/thread_pool.h"

#define STATES 64
#define PREFILL_ROWS 512
#define DECODE_CALLS 640
#define PREFILL_CALLS 7
#define MAX_LEVELS 3 /* scalar, AVX2, AVX-512 */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static float uniform(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 16777216.0f - 0.5f;
}

/* Everything a level's mixer reads and writes; the states per layer. */
typedef struct Bench {
    GdnShape s;
    size_t cd, vd;
    float *conv_w, *A_log, *dt_bias, *norm_w;
    float *qkv_src, *qkv, *z, *a, *b, *out;
    float *conv_state[STATES], *rec_state[STATES];
} Bench;

static void bench_free(Bench *b) {
    free(b->conv_w), free(b->A_log), free(b->dt_bias), free(b->norm_w);
    free(b->qkv_src), free(b->qkv), free(b->z), free(b->a), free(b->b), free(b->out);
    for (int l = 0; l < STATES; l++) free(b->conv_state[l]), free(b->rec_state[l]);
}

static int bench_init(Bench *b) {
    memset(b, 0, sizeof *b);
    b->s = (GdnShape){16, 16, 128, 128, 4, 1e-6f, false};
    b->cd = gdn_conv_dim(&b->s);
    b->vd = (size_t)b->s.num_v_heads * b->s.v_dim;
    size_t rows = PREFILL_ROWS, hv = (size_t)b->s.num_v_heads;
    b->conv_w = malloc(sizeof(float) * b->cd * 4);
    b->A_log = malloc(sizeof(float) * hv);
    b->dt_bias = malloc(sizeof(float) * hv);
    b->norm_w = malloc(sizeof(float) * b->s.v_dim);
    b->qkv_src = malloc(sizeof(float) * rows * b->cd);
    b->qkv = malloc(sizeof(float) * rows * b->cd);
    b->z = malloc(sizeof(float) * rows * b->vd);
    b->a = malloc(sizeof(float) * rows * hv);
    b->b = malloc(sizeof(float) * rows * hv);
    b->out = malloc(sizeof(float) * rows * b->vd);
    bool ok = b->conv_w && b->A_log && b->dt_bias && b->norm_w && b->qkv_src && b->qkv && b->z && b->a &&
              b->b && b->out;
    for (int l = 0; ok && l < STATES; l++) {
        b->conv_state[l] = calloc(gdn_conv_state_floats(&b->s), sizeof(float));
        b->rec_state[l] = calloc(gdn_recurrent_state_floats(&b->s), sizeof(float));
        ok = b->conv_state[l] && b->rec_state[l];
    }
    if (!ok) return -1;
    unsigned seed = 1;
    for (size_t i = 0; i < b->cd * 4; i++) b->conv_w[i] = uniform(&seed);
    for (size_t i = 0; i < hv; i++) b->A_log[i] = 0.5f + uniform(&seed), b->dt_bias[i] = uniform(&seed);
    for (int i = 0; i < b->s.v_dim; i++) b->norm_w[i] = 1.0f + 0.1f * uniform(&seed);
    for (size_t i = 0; i < rows * b->cd; i++) b->qkv_src[i] = 2.0f * uniform(&seed);
    for (size_t i = 0; i < rows * b->vd; i++) b->z[i] = 2.0f * uniform(&seed);
    for (size_t i = 0; i < rows * hv; i++) b->a[i] = 2.0f * uniform(&seed), b->b[i] = 4.0f * uniform(&seed);
    return 0;
}

/* One call of `rows` rows on layer l's states (fresh: zeroed first); seconds. */
static double timed_call(CpuGdn *g, Bench *b, int l, int rows, bool fresh) {
    GdnLayerWeights w = {b->conv_w, b->A_log, b->dt_bias, b->norm_w};
    memcpy(b->qkv, b->qkv_src, sizeof(float) * (size_t)rows * b->cd); /* the mixer overwrites it */
    GdnSeq seq = {0, rows, b->conv_state[l], b->rec_state[l], fresh};
    double t0 = now_seconds();
    cpu_gdn_forward(g, &w, &seq, 1, b->qkv, b->z, b->a, b->b, b->out);
    return now_seconds() - t0;
}

int bench_deltanet(int num_threads, Error *err) {
    ThreadPool *pool = thread_pool_create(num_threads, err);
    if (!pool) return -1;
    Bench b = {0};
    CpuIsa best = cpu_isa_active();
    int levels = (int)cpu_isa_detect() + 1 < MAX_LEVELS ? (int)cpu_isa_detect() + 1 : MAX_LEVELS;
    CpuGdn *g[MAX_LEVELS] = {0};
    double *dec = malloc(sizeof(double) * MAX_LEVELS * DECODE_CALLS);
    double pre[MAX_LEVELS][PREFILL_CALLS];
    int rc = -1;
    if (!dec || bench_init(&b) != 0) {
        error_set(err, "out of memory");
        goto done;
    }
    for (int v = 0; v < levels; v++) { /* each mixer keeps the kernels of the level it was made at */
        cpu_isa_set((CpuIsa)v);
        g[v] = cpu_gdn_create(pool, &b.s, PREFILL_ROWS, err);
        if (!g[v]) goto done;
    }
    cpu_isa_set(best);
    printf("Gated DeltaNet mixer, Qwen3.5-0.8B's shape (16 heads of 128 x 128, conv 4), %d thread(s); "
           "decode over %d states, prefill of %d tokens; median us per token and layer\n",
           thread_pool_size(pool), STATES, PREFILL_ROWS);
    for (int l = 0; l < STATES; l++) timed_call(g[0], &b, l, 1, true);
    for (int i = 0; i < DECODE_CALLS; i++)
        for (int v = 0; v < levels; v++) /* each level another state: none finds it cached */
            dec[v * DECODE_CALLS + i] = timed_call(g[v], &b, (i + v * STATES / MAX_LEVELS) % STATES, 1, false);
    for (int i = 0; i < PREFILL_CALLS; i++)
        for (int v = 0; v < levels; v++) pre[v][i] = timed_call(g[v], &b, 0, PREFILL_ROWS, true);
    printf("%-12s %14s %14s\n", "level", "decode", "prefill 512");
    for (int v = 0; v < levels; v++) {
        qsort(dec + v * DECODE_CALLS, DECODE_CALLS, sizeof(double), cmp_double);
        qsort(pre[v], PREFILL_CALLS, sizeof(double), cmp_double);
        printf("%-12s %14.1f %14.1f\n", cpu_isa_name((CpuIsa)v), dec[v * DECODE_CALLS + DECODE_CALLS / 2] * 1e6,
               pre[v][PREFILL_CALLS / 2] * 1e6 / PREFILL_ROWS);
    }
    rc = 0;
done:
    for (int v = 0; v < MAX_LEVELS; v++) cpu_gdn_destroy(g[v]);
    cpu_isa_set(best);
    bench_free(&b);
    free(dec);
    thread_pool_destroy(pool);
    return rc;
}
