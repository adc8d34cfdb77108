/*
 * test_cpu_gated_deltanet.c - the Gated DeltaNet mixer (cpu_gated_deltanet.h)
 * against a float64 reference written here straight from the equations
 * (conv + SiLU, L2 norms, the per-token delta rule, the gated RMSNorm),
 * run over each sequence's whole history: decode one token per call, whole
 * prefills of odd lengths through the chunked form and the recurrent step,
 * a prompt split over calls at odd points (equal to one call), several
 * sequences of different lengths in one call (fresh and continuing), value
 * heads sharing key heads with dk != dv, the real 0.8B shape, and every
 * SIMD level this machine has against the portable one; the AVX-512 gemm
 * gives the AVX2 one's bits on odd shapes.
 *
 * Inputs look like real projections: rows ~ N(0, 1), b ~ N(0, 2) (beta in
 * (0, 1)), a ~ N(0, 1), A_log = log U(0.5, 4), dt_bias ~ U(-1, 1), conv
 * weights ~ U(-0.5, 0.5), norm weights ~ U(0.5, 1.5).
 *
 * Tolerances: max |out - reference| over all outputs, measured on an AMD
 * EPYC (AVX2) with these seeds (TOL below).
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "base/cpu_isa.h"
#include "cpu/cpu_gated_deltanet.h"
#include "cpu/cpu_gated_deltanet_kernels.h"

/* Largest errors measured against the float64 reference (outputs up to
 * ~18 in size), chunks of 16: 1.4e-6 decode, 3e-6..9e-6 prefills of 63..200
 * tokens (the recurrent step and the chunked form alike), 4.6e-6 the real
 * shape (dk 128); split calls vs one call 3.8e-6, AVX2 vs portable 2.3e-6.
 * Chunks of 64 measured up to 1.9e-5 (real shape), so the bound holds for
 * either with 5x to spare. */
#define TOL 1e-4

static uint64_t rng_state;
static double uniform(void) { /* [0, 1) */
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static double gauss(void) {
    double u = uniform() + 1e-12, v = uniform();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

typedef struct Model {
    GdnShape s;
    size_t cd, vd; /* conv_dim, Hv*dv */
    float *conv_w, *A_log, *dt_bias, *norm_w;
    GdnLayerWeights w;
} Model;

static Model make_model(int hk, int hv, int dk, int dv, int K, uint64_t seed) {
    Model m = {.s = {hk, hv, dk, dv, K, 1e-6f, false}};
    rng_state = seed;
    m.cd = gdn_conv_dim(&m.s);
    m.vd = (size_t)hv * dv;
    m.conv_w = malloc(sizeof(float) * m.cd * K);
    m.A_log = malloc(sizeof(float) * hv);
    m.dt_bias = malloc(sizeof(float) * hv);
    m.norm_w = malloc(sizeof(float) * dv);
    cr_assert(m.conv_w && m.A_log && m.dt_bias && m.norm_w);
    for (size_t i = 0; i < m.cd * K; i++) m.conv_w[i] = (float)(uniform() - 0.5);
    for (int h = 0; h < hv; h++) {
        m.A_log[h] = (float)log(0.5 + 3.5 * uniform());
        m.dt_bias[h] = (float)(2.0 * uniform() - 1.0);
    }
    for (int c = 0; c < dv; c++) m.norm_w[c] = (float)(0.5 + uniform());
    m.w = (GdnLayerWeights){m.conv_w, m.A_log, m.dt_bias, m.norm_w};
    return m;
}

static void free_model(Model *m) {
    free(m->conv_w);
    free(m->A_log);
    free(m->dt_bias);
    free(m->norm_w);
}

/* One sequence: all its tokens' inputs, its states, the reference output and
 * what the module gave, token by token. */
typedef struct Seq {
    int T, done;
    float *mixed, *z, *a, *b; /* [T][cd], [T][vd], [T][Hv], [T][Hv] */
    float *conv_state, *rec_state;
    double *ref; /* [T][vd] */
    float *got;  /* [T][vd] */
} Seq;

static double silu_d(double x) { return x / (1.0 + exp(-x)); }

/* The float64 reference over the whole sequence, token by token. */
static void reference(const Model *m, Seq *q) {
    const GdnShape *s = &m->s;
    int hk = s->num_k_heads, hv = s->num_v_heads, dk = s->k_dim, dv = s->v_dim, K = s->conv_kernel;
    size_t cd = m->cd;
    double *S = calloc((size_t)hv * dk * dv, sizeof(double));
    double *x = malloc(sizeof(double) * cd), *o = malloc(sizeof(double) * dv);
    double *kv = malloc(sizeof(double) * dv);
    cr_assert(S && x && o && kv);
    for (int t = 0; t < q->T; t++) {
        for (size_t c = 0; c < cd; c++) {
            double acc = 0.0;
            for (int j = 0; j < K; j++) {
                int p = t - (K - 1) + j;
                if (p >= 0) acc += (double)m->conv_w[c * K + j] * q->mixed[(size_t)p * cd + c];
            }
            x[c] = silu_d(acc);
        }
        for (int h = 0; h < 2 * hk; h++) { /* q heads then k heads */
            double ss = 0.0, *v = x + (size_t)h * dk;
            for (int i = 0; i < dk; i++) ss += v[i] * v[i];
            double inv = 1.0 / sqrt(ss + 1e-6) / (h < hk ? sqrt((double)dk) : 1.0);
            for (int i = 0; i < dk; i++) v[i] *= inv;
        }
        for (int h = 0; h < hv; h++) {
            int kh = h / (hv / hk);
            const double *qh = x + (size_t)kh * dk, *kh_ = x + (size_t)(hk + kh) * dk;
            const double *vh = x + 2 * (size_t)hk * dk + (size_t)h * dv;
            double av = q->a[(size_t)t * hv + h] + (double)m->dt_bias[h];
            double sp = av > 20.0 ? av : log1p(exp(av));
            double g = -exp((double)m->A_log[h]) * sp;
            double beta = 1.0 / (1.0 + exp(-(double)q->b[(size_t)t * hv + h]));
            double *Sh = S + (size_t)h * dk * dv, eg = exp(g);
            for (size_t i = 0; i < (size_t)dk * dv; i++) Sh[i] *= eg;
            for (int c = 0; c < dv; c++) {
                kv[c] = 0.0;
                for (int r = 0; r < dk; r++) kv[c] += kh_[r] * Sh[(size_t)r * dv + c];
                kv[c] = beta * (vh[c] - kv[c]); /* delta */
            }
            for (int r = 0; r < dk; r++)
                for (int c = 0; c < dv; c++) Sh[(size_t)r * dv + c] += kh_[r] * kv[c];
            double ss = 0.0;
            for (int c = 0; c < dv; c++) {
                o[c] = 0.0;
                for (int r = 0; r < dk; r++) o[c] += qh[r] * Sh[(size_t)r * dv + c];
                ss += o[c] * o[c];
            }
            double inv = 1.0 / sqrt(ss / dv + (double)s->norm_eps);
            for (int c = 0; c < dv; c++)
                q->ref[(size_t)t * m->vd + (size_t)h * dv + c] =
                    o[c] * inv * m->norm_w[c] * silu_d(q->z[(size_t)t * m->vd + (size_t)h * dv + c]);
        }
    }
    free(S);
    free(x);
    free(o);
    free(kv);
}

static Seq make_seq(const Model *m, int T, uint64_t seed) {
    Seq q = {.T = T};
    int hv = m->s.num_v_heads;
    rng_state = seed;
    q.mixed = malloc(sizeof(float) * T * m->cd);
    q.z = malloc(sizeof(float) * T * m->vd);
    q.a = malloc(sizeof(float) * T * hv);
    q.b = malloc(sizeof(float) * T * hv);
    q.conv_state = malloc(sizeof(float) * gdn_conv_state_floats(&m->s));
    q.rec_state = malloc(sizeof(float) * gdn_recurrent_state_floats(&m->s));
    q.ref = malloc(sizeof(double) * T * m->vd);
    q.got = malloc(sizeof(float) * T * m->vd);
    cr_assert(q.mixed && q.z && q.a && q.b && q.conv_state && q.rec_state && q.ref && q.got);
    for (size_t i = 0; i < (size_t)T * m->cd; i++) q.mixed[i] = (float)gauss();
    for (size_t i = 0; i < (size_t)T * m->vd; i++) q.z[i] = (float)gauss();
    for (size_t i = 0; i < (size_t)T * hv; i++) {
        q.a[i] = (float)gauss();
        q.b[i] = (float)(2.0 * gauss());
    }
    /* garbage that a fresh sequence must not read */
    for (size_t i = 0; i < gdn_conv_state_floats(&m->s); i++) q.conv_state[i] = NAN;
    for (size_t i = 0; i < gdn_recurrent_state_floats(&m->s); i++) q.rec_state[i] = NAN;
    reference(m, &q);
    return q;
}

static void free_seq(Seq *q) {
    free(q->mixed);
    free(q->z);
    free(q->a);
    free(q->b);
    free(q->conv_state);
    free(q->rec_state);
    free(q->ref);
    free(q->got);
}

/* One forward call: counts[i] next tokens of seqs[i] (0 allowed), their
 * rows packed in the order given, after `gap` rows that belong to none. */
static void step(CpuGdn *g, const Model *m, Seq **seqs, const int *counts, int n, int gap) {
    int rows = gap, hv = m->s.num_v_heads;
    for (int i = 0; i < n; i++) rows += counts[i];
    float *qkv = malloc(sizeof(float) * rows * m->cd), *z = malloc(sizeof(float) * rows * m->vd);
    float *a = malloc(sizeof(float) * rows * hv), *b = malloc(sizeof(float) * rows * hv);
    float *out = malloc(sizeof(float) * rows * m->vd);
    GdnSeq gs[8];
    cr_assert(qkv && z && a && b && out && n <= 8);
    for (size_t i = 0; i < (size_t)rows * m->vd; i++) out[i] = NAN;
    int r = gap;
    for (int i = 0; i < n; i++) {
        Seq *q = seqs[i];
        int c = counts[i], t0 = q->done;
        cr_assert(t0 + c <= q->T);
        memcpy(qkv + (size_t)r * m->cd, q->mixed + (size_t)t0 * m->cd, sizeof(float) * c * m->cd);
        memcpy(z + (size_t)r * m->vd, q->z + (size_t)t0 * m->vd, sizeof(float) * c * m->vd);
        memcpy(a + (size_t)r * hv, q->a + (size_t)t0 * hv, sizeof(float) * c * hv);
        memcpy(b + (size_t)r * hv, q->b + (size_t)t0 * hv, sizeof(float) * c * hv);
        gs[i] = (GdnSeq){r, c, q->conv_state, q->rec_state, t0 == 0};
        r += c;
    }
    cpu_gdn_forward(g, &m->w, gs, n, qkv, z, a, b, out);
    for (int i = 0; i < n; i++) {
        memcpy(seqs[i]->got + (size_t)seqs[i]->done * m->vd, out + (size_t)gs[i].first_row * m->vd,
               sizeof(float) * counts[i] * m->vd);
        seqs[i]->done += counts[i];
    }
    for (size_t i = 0; i < (size_t)gap * m->vd; i++) cr_assert(isnan(out[i]), "a row of no sequence was written");
    free(qkv);
    free(z);
    free(a);
    free(b);
    free(out);
}

/* max |got - ref| over the tokens done so far. */
static double max_err(const Model *m, const Seq *q) {
    double e = 0.0;
    for (size_t i = 0; i < (size_t)q->done * m->vd; i++) {
        double d = fabs(q->got[i] - q->ref[i]);
        if (isnan(d)) return d; /* a NaN anywhere fails the comparison */
        if (d > e) e = d;
    }
    return e;
}

static ThreadPool *pool;
static void setup(void) {
    Error err = {0};
    pool = thread_pool_create(3, &err); /* 3: tasks split unevenly */
    cr_assert(pool, "%s", err.msg);
}
static void teardown(void) { thread_pool_destroy(pool); }

static CpuGdn *make_gdn(const Model *m, int max_rows, int chunk_min_rows) {
    Error err = {0};
    CpuGdn *g = cpu_gdn_create(pool, &m->s, max_rows, &err);
    cr_assert(g, "%s", err.msg);
    if (chunk_min_rows) cpu_gdn_set_chunk_min_rows(g, chunk_min_rows);
    return g;
}

TestSuite(gdn, .init = setup, .fini = teardown, .timeout = 120);

Test(gdn, shape_sizes_and_bad_shapes) {
    GdnShape s = {16, 32, 128, 128, 4, 1e-6f, false};
    cr_expect_eq(gdn_conv_dim(&s), 2 * 16 * 128 + 32 * 128);
    cr_expect_eq(gdn_conv_state_floats(&s), 3 * gdn_conv_dim(&s));
    cr_expect_eq(gdn_recurrent_state_floats(&s), (size_t)32 * 128 * 128);
    Error err = {0};
    GdnShape bad[] = {{3, 4, 8, 8, 4, 1e-6f, false}, {2, 4, 8, 8, 1, 1e-6f, false}, {2, 4, 0, 8, 4, 1e-6f, false}};
    for (int i = 0; i < 3; i++) {
        cr_expect_null(cpu_gdn_create(pool, &bad[i], 8, &err));
        cr_expect(strstr(err.msg, "bad shape"), "%s", err.msg);
    }
}

/* Decode: one token per call from the first. */
Test(gdn, decode_one_token_per_call) {
    Model m = make_model(2, 4, 32, 24, 4, 1);
    Seq q = make_seq(&m, 40, 2);
    CpuGdn *g = make_gdn(&m, 1, 0);
    Seq *p = &q;
    for (int t = 0; t < q.T; t++) step(g, &m, &p, (int[]){1}, 1, t % 3);
    double e = max_err(&m, &q);
    cr_log_info("gdn decode: max err %.2e (%s)", e, cpu_isa_name(cpu_isa_active()));
    cr_expect(e < TOL, "decode: max err %g", e);
    cpu_gdn_destroy(g);
    free_seq(&q);
    free_model(&m);
}

/* A whole prompt in one call, chunked (every length) and token by token. */
Test(gdn, prefill_odd_lengths_chunked_and_recurrent) {
    Model m = make_model(2, 4, 32, 24, 4, 3);
    static const int lens[] = {1, 3, 63, 64, 65, 200};
    for (int path = 0; path < 2; path++)
        for (int i = 0; i < 6; i++) {
            Seq q = make_seq(&m, lens[i], 10 + i);
            CpuGdn *g = make_gdn(&m, lens[i], path == 0 ? 1 : INT_MAX);
            Seq *p = &q;
            step(g, &m, &p, &lens[i], 1, 0);
            double e = max_err(&m, &q);
            cr_log_info("gdn prefill %d %s: max err %.2e", lens[i], path ? "recurrent" : "chunked", e);
            cr_expect(e < TOL, "prefill %d (%s): max err %g", lens[i], path ? "recurrent" : "chunked", e);
            cpu_gdn_destroy(g);
            free_seq(&q);
        }
    free_model(&m);
}

/* A prompt split at odd points equals the prompt in one call. */
Test(gdn, split_prefill_equals_one_call) {
    Model m = make_model(2, 4, 32, 24, 3, 4);
    Seq one = make_seq(&m, 230, 5), split = make_seq(&m, 230, 5);
    CpuGdn *g = make_gdn(&m, 230, 0);
    Seq *p = &one;
    step(g, &m, &p, (int[]){230}, 1, 0);
    static const int parts[] = {37, 1, 2, 64, 70, 9, 47};
    p = &split;
    for (int i = 0; i < 7; i++) step(g, &m, &p, &parts[i], 1, 1);
    double e = max_abs_diff(one.got, split.got, (size_t)230 * m.vd);
    double e1 = max_err(&m, &one), e2 = max_err(&m, &split);
    cr_log_info("gdn split: vs one call %.2e; vs reference %.2e / %.2e", e, e1, e2);
    cr_expect(e < TOL && e1 < TOL && e2 < TOL, "split %g, one call %g, split %g", e, e1, e2);
    cr_expect(max_abs_diff(one.rec_state, split.rec_state, gdn_recurrent_state_floats(&m.s)) < TOL);
    cr_expect(max_abs_diff(one.conv_state, split.conv_state, gdn_conv_state_floats(&m.s)) == 0.0);
    cpu_gdn_destroy(g);
    free_seq(&one);
    free_seq(&split);
    free_model(&m);
}

/* Sequences of different lengths in one call, fresh and continuing. */
Test(gdn, several_sequences_one_call) {
    Model m = make_model(2, 4, 32, 24, 4, 6);
    Seq q[4] = {make_seq(&m, 70, 7), make_seq(&m, 31, 8), make_seq(&m, 5, 9), make_seq(&m, 130, 10)};
    CpuGdn *g = make_gdn(&m, 256, 0);
    Seq *first[2] = {&q[1], &q[3]};
    step(g, &m, first, (int[]){30, 30}, 2, 0); /* q[1], q[3] continue below */
    Seq *all[4] = {&q[2], &q[0], &q[1], &q[3]};
    step(g, &m, all, (int[]){5, 70, 1, 100}, 4, 2);
    for (int i = 0; i < 4; i++) {
        double e = max_err(&m, &q[i]);
        cr_expect(e < TOL, "sequence %d: max err %g", i, e);
        free_seq(&q[i]);
    }
    cpu_gdn_destroy(g);
    free_model(&m);
}

/* The real 0.8B shape: a short prompt, then decode. */
Test(gdn, real_shape_short_run) {
    Model m = make_model(16, 16, 128, 128, 4, 11);
    Seq q = make_seq(&m, 76, 12);
    CpuGdn *g = make_gdn(&m, 70, 0);
    Seq *p = &q;
    step(g, &m, &p, (int[]){70}, 1, 0);
    for (int t = 0; t < 6; t++) step(g, &m, &p, (int[]){1}, 1, 0);
    double e = max_err(&m, &q);
    double big = 0.0;
    for (size_t i = 0; i < (size_t)q.T * m.vd; i++) big = fmax(big, fabs(q.ref[i]));
    cr_log_info("gdn real shape: max err %.2e, largest output %.2f", e, big);
    cr_expect(e < TOL, "real shape: max err %g", e);
    cpu_gdn_destroy(g);
    free_seq(&q);
    free_model(&m);
}

/* Every SIMD level against the portable kernels (and the reference). */
Test(gdn, every_isa_matches_portable) {
    Model m = make_model(2, 4, 32, 40, 4, 13); /* dv 40: a 16-, an 8- and no scalar column tail */
    Model m2 = make_model(1, 2, 16, 20, 2, 14); /* dv 20: a scalar column tail */
    CpuIsa best = cpu_isa_active();
    for (int k = 0; k < 2; k++) {
        Model *mm = k ? &m2 : &m;
        float *portable = NULL;
        for (int isa = CPU_ISA_SCALAR; isa <= (int)cpu_isa_detect(); isa++) {
            cr_assert(cpu_isa_set((CpuIsa)isa) == 0);
            Seq q = make_seq(mm, 140, 15);
            CpuGdn *g = make_gdn(mm, 130, 0);
            Seq *p = &q;
            step(g, mm, &p, (int[]){130}, 1, 0);
            for (int t = 0; t < 10; t++) step(g, mm, &p, (int[]){1}, 1, 0);
            double e = max_err(mm, &q);
            cr_expect(e < TOL, "%s: max err %g", cpu_isa_name((CpuIsa)isa), e);
            if (!portable) {
                portable = q.got;
                q.got = NULL;
            } else {
                double d = max_abs_diff(portable, q.got, (size_t)140 * mm->vd);
                cr_log_info("gdn %s vs portable: %.2e (reference %.2e)", cpu_isa_name((CpuIsa)isa), d, e);
                cr_expect(d < TOL, "%s vs portable: %g", cpu_isa_name((CpuIsa)isa), d);
            }
            cpu_gdn_destroy(g);
            free_seq(&q);
        }
        free(portable);
    }
    cpu_isa_set(best);
    free_model(&m);
    free_model(&m2);
}

#if defined(__x86_64__)
/* The AVX-512 gemm computes each output as the AVX2 one does (cs * C, then
 * one FMA per k in k order), so the bits agree on every shape: rows past
 * its 8-row and AVX2's 4-row tiles, columns past 32, 16 and none of them,
 * cs 0 and not, and nothing written past W. SiLU and dot within float32
 * rounding (their lanes and tails differ). */
Test(gdn, avx512_kernels_match_avx2) {
    if (cpu_isa_detect() < CPU_ISA_AVX512) {
        cr_log_warn("AVX-512 DeltaNet kernels not checked: this CPU is %s", cpu_isa_name(cpu_isa_detect()));
        return;
    }
    static const int Ms[] = {1, 2, 3, 5, 8, 9, 17, 33}, Ns[] = {1, 3, 16, 40}, Ws[] = {1, 5, 15, 16, 17, 31, 32, 33, 40, 128, 130};
    enum { LD = 140, MAXM = 33, MAXN = 40 };
    float *X = malloc(sizeof(float) * MAXM * MAXN), *B = malloc(sizeof(float) * MAXN * LD),
          *C0 = malloc(sizeof(float) * MAXM * LD), *C1 = malloc(sizeof(float) * MAXM * LD),
          *C2 = malloc(sizeof(float) * MAXM * LD);
    cr_assert(X && B && C0 && C1 && C2);
    rng_state = 21;
    for (int i = 0; i < MAXM * MAXN; i++) X[i] = (float)gauss();
    for (int i = 0; i < MAXN * LD; i++) B[i] = (float)gauss();
    for (int i = 0; i < MAXM * LD; i++) C0[i] = (float)gauss();
    int checked = 0;
    for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
        for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
            for (size_t c = 0; c < sizeof Ws / sizeof *Ws; c++)
                for (int k = 0; k < 2; k++) {
                    int M = Ms[a], N = Ns[b], W = Ws[c];
                    float cs = k ? 0.7f : 0.0f;
                    memcpy(C1, C0, sizeof(float) * MAXM * LD);
                    memcpy(C2, C0, sizeof(float) * MAXM * LD);
                    gdn_kernels_avx2.gemm(C1, LD, cs, X, MAXN, B, LD, M, N, W);
                    gdn_kernels_avx512.gemm(C2, LD, cs, X, MAXN, B, LD, M, N, W);
                    cr_assert(memcmp(C1, C2, sizeof(float) * MAXM * LD) == 0,
                              "gemm M=%d N=%d W=%d cs=%g: AVX-512 and AVX2 bits differ", M, N, W, cs);
                    checked++;
                }
    for (int n = 1; n <= 70; n += 3) {
        float d2 = gdn_kernels_avx2.dot(X, B, n), d5 = gdn_kernels_avx512.dot(X, B, n);
        double mag = 0;
        for (int i = 0; i < n; i++) mag += fabs((double)X[i] * B[i]);
        cr_expect(fabs(d2 - d5) <= 1e-6 * mag, "dot n=%d: %g vs %g", n, d2, d5);
        memcpy(C1, B, sizeof(float) * n);
        memcpy(C2, B, sizeof(float) * n);
        gdn_kernels_avx2.silu(C1, n);
        gdn_kernels_avx512.silu(C2, n);
        for (int i = 0; i < n; i++)
            cr_expect(fabsf(C1[i] - C2[i]) <= 1e-6f * (1.0f + fabsf(C1[i])), "silu n=%d [%d]: %g vs %g", n, i, C1[i], C2[i]);
    }
    cr_log_info("gdn gemm: AVX-512 = AVX2 bit for bit on %d shapes", checked);
    free(X);
    free(B);
    free(C0);
    free(C1);
    free(C2);
}
#endif
