/*
 * test_cuda_gated_deltanet.c - the Gated DeltaNet kernels
 * (cuda/cuda_gated_deltanet.cu) against the CPU module (cpu_gated_deltanet.h,
 * itself checked against float64 in test_cpu_gated_deltanet.c) on the same
 * random inputs, call by call: decode steps, whole prefills of 1, 3, 63, 64,
 * 65 and 200 rows (calls from GDN_CHUNK_MIN_ROWS rows on through the chunked
 * kernels; also with every call chunked, and none), a prompt split over
 * calls at odd points (some shorter than the conv's K-1), several sequences in one call with scattered slots
 * (fresh, continuing, a padding entry of 0 rows), rows of no sequence
 * around them; the real 0.8B shape (Hk = Hv = 16, dk = dv = 128, K = 4), an
 * odd one (Hk 2, Hv 4, dk 32, dv 24) with K = 4 and K = 8, and a head past
 * the default 48 KB of shared memory (dk 256). Both sides keep their states
 * in a pool of the runner's layout (2 linear layers, the call for the
 * second), compared whole after every call: outputs, the conv's output left
 * in qkv, conv states (bit-exact: raw rows copied), recurrent states, and
 * everything the call must not touch. Skipped without a GPU.
 *
 * Tolerances (re-measure on a GPU): both sides work in float32; the GPU
 * rounds out to bf16 once (round to nearest even: |bf16(y) - y| <= 2^-9 |y|).
 * The CPU module's float32 error against float64 was measured at <= 9e-6
 * (outputs up to ~18); allowing the GPU as much again, |y_gpu - y_cpu| <=
 * 2e-5, so |out - want| <= 2^-9 |want| + 2e-5 (+ its rounding). Bound used:
 * 2^-8 |want| + 1e-4 (2x and 5x). Recurrent states and the conv output carry
 * no bf16 rounding: 1e-4 (1 + |want|) and 1e-5 (1 + |want|).
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cuda_test.h"
#include "helpers.h"
#include "cpu/cpu_gated_deltanet.h"
#include "cuda/cuda_gated_deltanet.h"
#include "cuda/cuda_gdn_chunk.h"

#define LAYERS 2 /* linear layers in the pool; the calls are the second's */
#define LAYER 1
#define MAX_SEQS 6
#define OUT_REL (1.0 / 256)
#define OUT_ABS 1e-4
#define STATE_TOL 1e-4
#define CONV_TOL 1e-5

static TestRng rng;

typedef struct Harness {
    CudaGdnShape s;
    GdnShape cs;
    size_t cd, vd, conv_f, rec_f, slot_floats, pool_floats;
    int slots;
    float *conv_w, *A_log, *dt_bias, *norm_w; /* host */
    CudaGdnLayer dw;                          /* device */
    float *pool, *d_pool;                     /* the CPU's states and the GPU's, one layout */
    ThreadPool *tp;
    CpuGdn *cpu;
    double worst_out, worst_state; /* in units of the bounds */
    int chunk_min_rows;            /* cuda_gdn_set_chunk_min_rows */
} Harness;

static Harness make(int hk, int hv, int dk, int dv, int K, int slots, uint64_t seed) {
    Harness h = {.s = {hk, hv, dk, dv, K, 1e-6f, false}, .cs = {hk, hv, dk, dv, K, 1e-6f, false}, .slots = slots,
                 .chunk_min_rows = GDN_CHUNK_MIN_ROWS};
    Error err = {0};
    cr_assert(cuda_gdn_check_shape(&h.s, &err) == 0, "%s", err.msg);
    h.cd = gdn_conv_dim(&h.cs);
    h.vd = (size_t)hv * dv;
    h.conv_f = gdn_conv_state_floats(&h.cs);
    h.rec_f = gdn_recurrent_state_floats(&h.cs);
    h.slot_floats = LAYERS * (h.conv_f + h.rec_f);
    h.pool_floats = (size_t)slots * h.slot_floats;
    rng.state = seed;
    h.conv_w = malloc(sizeof(float) * h.cd * K);
    h.A_log = malloc(sizeof(float) * hv);
    h.dt_bias = malloc(sizeof(float) * hv);
    h.norm_w = malloc(sizeof(float) * dv);
    h.pool = malloc(sizeof(float) * h.pool_floats);
    cr_assert(h.conv_w && h.A_log && h.dt_bias && h.norm_w && h.pool);
    for (size_t i = 0; i < h.cd * K; i++) h.conv_w[i] = (float)(test_rng_uniform(&rng) - 0.5);
    for (int i = 0; i < hv; i++) {
        h.A_log[i] = (float)log(0.5 + 3.5 * test_rng_uniform(&rng));
        h.dt_bias[i] = (float)(2.0 * test_rng_uniform(&rng) - 1.0);
    }
    for (int c = 0; c < dv; c++) h.norm_w[c] = (float)(0.5 + test_rng_uniform(&rng));
    /* NaN everywhere: a fresh sequence must not read its old states, and
     * what no call touches stays NaN on both sides */
    for (size_t i = 0; i < h.pool_floats; i++) h.pool[i] = NAN;
    h.d_pool = dev_copy(h.pool, sizeof(float) * h.pool_floats);
    h.dw = (CudaGdnLayer){dev_copy(h.conv_w, sizeof(float) * h.cd * K), dev_copy(h.A_log, sizeof(float) * hv),
                          dev_copy(h.dt_bias, sizeof(float) * hv), dev_copy(h.norm_w, sizeof(float) * dv)};
    h.tp = thread_pool_create(2, &err);
    cr_assert(h.tp, "%s", err.msg);
    h.cpu = cpu_gdn_create(h.tp, &h.cs, 1024, &err);
    cr_assert(h.cpu, "%s", err.msg);
    return h;
}

static void destroy(Harness *h) {
    cpu_gdn_destroy(h->cpu);
    thread_pool_destroy(h->tp);
    cuda_free((void *)h->dw.conv_weight);
    cuda_free((void *)h->dw.A_log);
    cuda_free((void *)h->dw.dt_bias);
    cuda_free((void *)h->dw.norm_weight);
    cuda_free(h->d_pool);
    free(h->conv_w);
    free(h->A_log);
    free(h->dt_bias);
    free(h->norm_w);
    free(h->pool);
}

static bool close_to(double got, double want, double abs_tol, double rel_tol, double *worst) {
    if (isnan(want)) return isnan(got);
    const double bound = abs_tol + rel_tol * fabs(want), d = fabs(got - want);
    if (!(d / bound <= *worst)) *worst = d / bound;
    return d <= bound;
}

static bool row_of_a_sequence(int row, const int *counts, int n, int gap) {
    int r = gap;
    for (int i = 0; i < n; r += counts[i] + gap, i++)
        if (row >= r && row < r + counts[i]) return true;
    return false;
}

/* One call on both sides: n sequences, sequence i counts[i] new rows in
 * state slot slots[i] (fresh or not), their rows packed after `gap` rows of
 * no sequence, with `gap` more rows of none between each two. */
static void step(Harness *h, const int *slots, const int *counts, const bool *fresh, int n, int gap, const char *what) {
    cr_assert_leq(n, MAX_SEQS);
    int rows = gap;
    for (int i = 0; i < n; i++) rows += counts[i] + gap;
    if (rows == 0) rows = 1;
    const int hv = h->s.num_v_heads;
    float *qkv = malloc(sizeof(float) * rows * h->cd), *qkv_in = malloc(sizeof(float) * rows * h->cd);
    float *z = malloc(sizeof(float) * rows * h->vd), *a = malloc(sizeof(float) * rows * hv);
    float *b = malloc(sizeof(float) * rows * hv), *want = malloc(sizeof(float) * rows * h->vd);
    float *got_qkv = malloc(sizeof(float) * rows * h->cd), *got_pool = malloc(sizeof(float) * h->pool_floats);
    uint16_t *out = malloc(sizeof(uint16_t) * rows * h->vd);
    cr_assert(qkv && qkv_in && z && a && b && want && got_qkv && got_pool && out);
    for (size_t i = 0; i < (size_t)rows * h->cd; i++) qkv[i] = qkv_in[i] = test_rng_gauss(&rng);
    for (size_t i = 0; i < (size_t)rows * h->vd; i++) z[i] = test_rng_gauss(&rng), want[i] = NAN;
    for (size_t i = 0; i < (size_t)rows * hv; i++) a[i] = test_rng_gauss(&rng), b[i] = 2.0f * test_rng_gauss(&rng);

    GdnSeq cs[MAX_SEQS];
    CudaGdnSeq gs[MAX_SEQS] = {{0}};
    int r = gap;
    const size_t layer_off = LAYER * (h->conv_f + h->rec_f);
    for (int i = 0; i < n; i++) {
        float *base = h->pool + (size_t)slots[i] * h->slot_floats + layer_off; /* cpu_runner.c's linear_mixer */
        cs[i] = (GdnSeq){r, counts[i], base, base + h->conv_f, fresh[i]};
        gs[i] = (CudaGdnSeq){r, counts[i], slots[i], fresh[i]};
        r += counts[i] + gap;
    }
    cpu_gdn_forward(h->cpu, &(GdnLayerWeights){h->conv_w, h->A_log, h->dt_bias, h->norm_w}, cs, n, qkv, z, a, b,
                    want);

    float *d_qkv = dev_copy(qkv_in, sizeof(float) * rows * h->cd), *d_z = dev_copy(z, sizeof(float) * rows * h->vd);
    float *d_a = dev_copy(a, sizeof(float) * rows * hv), *d_b = dev_copy(b, sizeof(float) * rows * hv);
    uint16_t *d_out = dev_poisoned(sizeof(uint16_t) * rows * h->vd);
    CudaGdnSeq *d_seqs = dev_copy(gs, sizeof gs);
    Error err = {0};
    CudaGdnStates st = {h->d_pool + layer_off, h->slot_floats};
    int max_rows = 0;
    for (int i = 0; i < n; i++) max_rows = counts[i] > max_rows ? counts[i] : max_rows;
    cr_assert(cuda_gdn_forward(&h->s, &h->dw, st, d_seqs, n, max_rows, d_qkv, d_z, d_a, d_b, d_out, NULL, &err) == 0,
              "%s", err.msg);
    dev_fetch(out, d_out, sizeof(uint16_t) * rows * h->vd);
    dev_fetch(got_qkv, d_qkv, sizeof(float) * rows * h->cd);
    dev_fetch(got_pool, h->d_pool, sizeof(float) * h->pool_floats);

    /* outputs: the sequences' rows within the bound, the others untouched */
    double worst = 0.0;
    for (int t = 0; t < rows; t++)
        for (size_t c = 0; c < h->vd; c++) {
            const size_t i = (size_t)t * h->vd + c;
            if (isnan(want[i])) {
                cr_assert_eq(out[i], 0xffff, "%s: out[%d][%zu] of no sequence was written", what, t, c);
                continue;
            }
            const float g = bf16_to_f32(out[i]);
            cr_assert(close_to(g, want[i], OUT_ABS, OUT_REL, &worst), "%s: out[%d][%zu] %.6g vs %.6g", what, t, c, g,
                      want[i]);
        }
    if (worst > h->worst_out) h->worst_out = worst;
    /* the conv's output in qkv (rows of no sequence as they came in); a
     * chunked call leaves its outputs before the norm in the sequences' v */
    double conv_worst = 0.0;
    const bool chunked = max_rows >= h->chunk_min_rows && gdn_chunk_fits(h->s.k_dim);
    const size_t v_from = 2 * (size_t)h->s.num_k_heads * h->s.k_dim;
    for (size_t i = 0; i < (size_t)rows * h->cd; i++)
        if (!(chunked && i % h->cd >= v_from && row_of_a_sequence((int)(i / h->cd), counts, n, gap)))
            cr_assert(close_to(got_qkv[i], qkv[i], CONV_TOL, CONV_TOL, &conv_worst),
                      "%s: qkv[%zu][%zu] %.8g vs %.8g", what, i / h->cd, i % h->cd, got_qkv[i], qkv[i]);
    /* the pool: conv states bit for bit, recurrent states within the bound */
    double st_worst = 0.0;
    for (int sl = 0; sl < h->slots; sl++)
        for (int l = 0; l < LAYERS; l++) {
            const size_t off = (size_t)sl * h->slot_floats + l * (h->conv_f + h->rec_f);
            for (size_t i = 0; i < h->conv_f; i++) {
                const float g = got_pool[off + i], w = h->pool[off + i];
                cr_assert(isnan(w) ? isnan(g) : g == w, "%s: slot %d layer %d conv state [%zu][%zu] %.8g vs %.8g",
                          what, sl, l, i / h->cd, i % h->cd, g, w);
            }
            for (size_t i = 0; i < h->rec_f; i++)
                cr_assert(close_to(got_pool[off + h->conv_f + i], h->pool[off + h->conv_f + i], STATE_TOL, STATE_TOL,
                                   &st_worst),
                          "%s: slot %d layer %d recurrent state %zu: %.8g vs %.8g", what, sl, l, i,
                          got_pool[off + h->conv_f + i], h->pool[off + h->conv_f + i]);
        }
    if (st_worst > h->worst_state) h->worst_state = st_worst;
    /* the next call continues from the CPU's states on both sides, so the
     * comparison is per call, not drift accumulated over calls */
    Error e2 = {0};
    cr_assert(cuda_upload(h->d_pool, h->pool, sizeof(float) * h->pool_floats, &e2) == 0, "%s", e2.msg);

    cuda_free(d_qkv);
    cuda_free(d_z);
    cuda_free(d_a);
    cuda_free(d_b);
    cuda_free(d_out);
    cuda_free(d_seqs);
    free(qkv);
    free(qkv_in);
    free(z);
    free(a);
    free(b);
    free(want);
    free(got_qkv);
    free(got_pool);
    free(out);
}

static void report(const Harness *h, const char *what) {
    cr_log_info("cuda gdn, %s (%d/%d heads, %dx%d, K %d): worst output error %.2f of its bound, state %.2f", what,
                h->s.num_k_heads, h->s.num_v_heads, h->s.k_dim, h->s.v_dim, h->s.conv_kernel, h->worst_out,
                h->worst_state);
}

/* A prompt of 5 rows, then decode steps one row each. */
static void decode_case(int hk, int hv, int dk, int dv, int K, int steps) {
    Harness h = make(hk, hv, dk, dv, K, 3, 11);
    step(&h, (int[]){2}, (int[]){5}, (bool[]){true}, 1, 1, "prompt");
    for (int t = 0; t < steps; t++) step(&h, (int[]){2}, (int[]){1}, (bool[]){false}, 1, t % 2, "decode");
    report(&h, "decode");
    destroy(&h);
}

Test(cuda_gdn, decode_steps_odd_shape) {
    require_gpu();
    decode_case(2, 4, 32, 24, 4, 12);
}

Test(cuda_gdn, decode_steps_real_shape) {
    require_gpu();
    decode_case(16, 16, 128, 128, 4, 6);
}

/* chunk_min_rows: which calls take the chunked kernels (the default, 1:
 * all, INT_MAX: none). */
static void prefill_case(int hk, int hv, int dk, int dv, int K, int chunk_min_rows) {
    static const int lens[] = {1, 3, 63, 64, 65, 200};
    Harness h = make(hk, hv, dk, dv, K, 2, 23);
    h.chunk_min_rows = chunk_min_rows;
    cuda_gdn_set_chunk_min_rows(chunk_min_rows);
    for (int i = 0; i < 6; i++) {
        char what[64];
        snprintf(what, sizeof what, "prefill of %d", lens[i]);
        step(&h, (int[]){i % 2}, &lens[i], (bool[]){true}, 1, i % 3, what);
        /* and a decode step after it */
        step(&h, (int[]){i % 2}, (int[]){1}, (bool[]){false}, 1, 0, "decode after prefill");
    }
    report(&h, "prefill");
    destroy(&h);
    cuda_gdn_set_chunk_min_rows(GDN_CHUNK_MIN_ROWS);
}

Test(cuda_gdn, prefill_odd_lengths_odd_shape) {
    require_gpu();
    prefill_case(2, 4, 32, 24, 4, GDN_CHUNK_MIN_ROWS);
}

Test(cuda_gdn, prefill_odd_lengths_real_shape) {
    require_gpu();
    prefill_case(16, 16, 128, 128, 4, GDN_CHUNK_MIN_ROWS);
}

/* Every call chunked (decode steps too), then none (long prompts row by row). */
Test(cuda_gdn, prefill_all_chunked_odd_shape) {
    require_gpu();
    prefill_case(2, 4, 32, 24, 4, 1);
}

Test(cuda_gdn, prefill_none_chunked_real_shape) {
    require_gpu();
    prefill_case(16, 16, 128, 128, 4, INT_MAX);
}

/* A head past the default 48 KB of shared memory (the opt-in path of both kernels). */
Test(cuda_gdn, prefill_large_key_dim) {
    require_gpu();
    prefill_case(1, 2, 256, 64, 3, GDN_CHUNK_MIN_ROWS);
}

/* A 200-row prompt over calls of 1, 2, 62, 3, 64, 1, 67 rows: some shorter
 * than K-1 (the halo then mixes old state and new rows). */
static void split_case(int K) {
    static const int parts[] = {1, 2, 62, 3, 64, 1, 67};
    Harness h = make(2, 4, 32, 24, K, 1, 37);
    for (int i = 0; i < 7; i++) step(&h, (int[]){0}, &parts[i], (bool[]){i == 0}, 1, 1, "split prefill");
    report(&h, "split prefill");
    destroy(&h);
}

Test(cuda_gdn, split_prefill_k4) {
    require_gpu();
    split_case(4);
}

Test(cuda_gdn, split_prefill_k8) {
    require_gpu();
    split_case(8);
}

/* Several sequences in one call, scattered slots: fresh and continuing,
 * prompt and decode, a fresh one of 0 rows (its states zeroed) and a
 * padding entry of 0 rows (its slot untouched: still NaN). */
static void several_case(int hk, int hv, int dk, int dv, int K) {
    Harness h = make(hk, hv, dk, dv, K, 7, 41);
    step(&h, (int[]){5, 1, 3}, (int[]){17, 1, 70}, (bool[]){true, true, true}, 3, 2, "three prompts");
    step(&h, (int[]){3, 0, 5, 1, 6, 4}, (int[]){1, 65, 1, 2, 0, 0}, (bool[]){false, true, false, false, true, false}, 6,
         1, "mixed batch");
    step(&h, (int[]){1, 3, 5, 0, 6}, (int[]){1, 1, 1, 1, 1}, (bool[]){false, false, false, false, false}, 5, 0,
         "decode batch");
    report(&h, "several sequences");
    destroy(&h);
}

Test(cuda_gdn, several_sequences_odd_shape) {
    require_gpu();
    several_case(2, 4, 32, 24, 4);
}

Test(cuda_gdn, several_sequences_real_shape) {
    require_gpu();
    several_case(16, 16, 128, 128, 4);
}

/* What the kernels refuse, before any launch. */
Test(cuda_gdn, shapes_refused) {
    Error err = {0};
    CudaGdnShape s = {1, 1, 128, 256, 4, 1e-6f, false};
    cr_expect_eq(cuda_gdn_check_shape(&s, &err), -1);
    cr_expect(strstr(err.msg, "registers"), "%s", err.msg);
    s = (CudaGdnShape){16, 16, 128, 128, 4, 1e-6f, false};
    cr_expect_eq(cuda_gdn_check_shape(&s, &err), 0);
}
