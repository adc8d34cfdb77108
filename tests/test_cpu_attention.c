/*
 * test_cpu_attention.c - the CPU attention kernels on float32 and bf16 KV
 * caches: the one-token (decode) kernels of cpu_attention_decode.h at every
 * SIMD level this machine runs, against the scalar reference and a float64
 * one, at odd sizes; split key ranges merged as one; and cpu_attention()
 * over a bf16 cache with prefill and decode sequences in one batch, exact
 * and with bf16 inputs (--dtype bfloat16) at every level. (Kept
 * apart from test_cpu_kernels.c, which covers the matmuls.)
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_reference.h"
#include "cpu/cpu_attention.h"
#include "cpu/cpu_attention_decode.h"
#include "cpu/cpu_attention_decode_dot.h"
#include "cpu/cpu_matmul_bf16.h"
#include "base/cpu_isa.h"
#include "base/half.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float uniform(void) { /* xorshift64, uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

/* A cache of `blocks` blocks of kv_heads x bs tokens x D: random values, kept
 * both as bf16 and as their exact float32 widening (so one reference serves
 * both dtypes). */
typedef struct Cache {
    float *kf, *vf;
    uint16_t *kb, *vb;
} Cache;

static Cache make_cache(size_t n) {
    Cache c = {malloc(sizeof(float) * n), malloc(sizeof(float) * n), malloc(sizeof(uint16_t) * n),
               malloc(sizeof(uint16_t) * n)};
    cr_assert(c.kf && c.vf && c.kb && c.vb);
    for (size_t i = 0; i < n; i++) {
        c.kb[i] = f32_to_bf16(uniform());
        c.vb[i] = f32_to_bf16(uniform());
        c.kf[i] = bf16_to_f32(c.kb[i]);
        c.vf[i] = bf16_to_f32(c.vb[i]);
    }
    return c;
}

static void free_cache(Cache *c) {
    free(c->kf);
    free(c->vf);
    free(c->kb);
    free(c->vb);
}

/* Every (dtype, block size, group, head_dim, context) at `isa`, against the
 * scalar kernels and float64. */
static double check_level(CpuIsa isa, double *worst_vs_scalar) {
    enum { KV_HEADS = 3, MAX_G = 4, MAX_D = 128, MAX_PARTS = 3 };
    static const int contexts_extra[] = {129, 256, 257, 300, 511, 600};
    double worst = 0;
    /* 600 tokens need 38 blocks of 16 or 3 of 256: room for 40 blocks of 256. */
    size_t n = (size_t)40 * 256 * KV_HEADS * MAX_D;
    Cache c = make_cache(n);
    DecodeScratch s = {malloc(sizeof(float) * MAX_G * 256), malloc(sizeof(float) * MAX_PARTS * MAX_G),
                       malloc(sizeof(float) * MAX_PARTS * MAX_G), malloc(sizeof(float) * MAX_PARTS * MAX_G * MAX_D)};
    float *q = malloc(sizeof(float) * MAX_G * MAX_D), *out = malloc(sizeof(float) * MAX_G * MAX_D),
          *ref_out = malloc(sizeof(float) * MAX_G * MAX_D);
    double *want = malloc(sizeof(double) * MAX_G * MAX_D);
    int32_t table[64];
    cr_assert(s.scores && s.max && s.sum && s.acc && q && out && ref_out && want);
    static const int block_sizes[] = {16, 256}, groups[] = {1, 2, 4}, dims[] = {64, 128};
    for (int bsi = 0; bsi < 2; bsi++) {
        int bs = block_sizes[bsi], num_blocks = (int)(n / ((size_t)bs * KV_HEADS * MAX_D));
        for (int b = 0; b < 64; b++) table[b] = (int32_t)((b * 7 + 3) % num_blocks); /* scattered */
        for (int gi = 0; gi < 3; gi++) {
            for (int di = 0; di < 2; di++) {
                int G = groups[gi], D = dims[di], kv_head = (gi + di) % KV_HEADS;
                for (int k = 0; k < G * D; k++) q[k] = 3 * uniform(); /* peaky softmax */
                for (int ci = 0; ci < 70 + 6; ci++) {
                    int ctx = ci < 70 ? ci + 1 : contexts_extra[ci - 70];
                    paged_attention_reference(want, q, c.kf, c.vf, table, ctx, bs, KV_HEADS, kv_head, G, D);
                    for (int bf = 0; bf < 2; bf++) {
                        DecodeKv kv = {.k = bf ? (const void *)c.kb : c.kf,
                                       .v = bf ? (const void *)c.vb : c.vf,
                                       .dtype = bf ? KV_CACHE_BF16 : KV_CACHE_F32,
                                       .block_table = table, .block_size = bs,
                                       .num_kv_heads = KV_HEADS, .kv_head = kv_head, .head_dim = D};
                        int parts = ctx >= 3 ? 1 + ci % MAX_PARTS : 1;
                        decode_in_parts(ref_out, CPU_ISA_SCALAR, &kv, q, G, ctx, 1, &s);
                        decode_in_parts(out, isa, &kv, q, G, ctx, parts, &s);
                        for (int k = 0; k < G * D; k++) {
                            double e = fabs(out[k] - want[k]), es = fabs(out[k] - ref_out[k]);
                            worst = fmax(worst, e);
                            *worst_vs_scalar = fmax(*worst_vs_scalar, es);
                            if (e > 2e-6 || es > 2e-6)
                                cr_assert_fail("%s %s bs %d G %d D %d ctx %d parts %d: out[%d] = %.9g, "
                                         "scalar %.9g, float64 %.9g",
                                         cpu_isa_name(isa), bf ? "bf16" : "f32", bs, G, D, ctx,
                                         parts, k, out[k], ref_out[k], want[k]);
                        }
                    }
                }
            }
        }
    }
    free(q);
    free(out);
    free(ref_out);
    free(want);
    free(s.scores);
    free(s.max);
    free(s.sum);
    free(s.acc);
    free_cache(&c);
    return worst;
}

Test(cpu_attention, decode_kernels_every_isa) {
    CpuIsa best = cpu_isa_detect();
    /* AMX adds nothing to these kernels: AVX-512 is the top level they have. */
    CpuIsa top = best > CPU_ISA_AVX512 ? CPU_ISA_AVX512 : best;
    for (int isa = CPU_ISA_SCALAR; isa <= (int)top; isa++) {
        /* The softmax's exp follows the active level, as in the runner. */
        cr_assert(cpu_isa_set((CpuIsa)isa) == 0);
        double vs_scalar = 0, worst = check_level((CpuIsa)isa, &vs_scalar);
        cr_log_info("decode attention %s: max diff %.3g from float64, %.3g from scalar",
                    cpu_isa_name((CpuIsa)isa), worst, vs_scalar);
    }
    cpu_isa_set(best);
}

/* A batch of prefill tiles and decode sequences over a bf16 cache. */
enum { MB_HEADS = 8, MB_KV_HEADS = 2, MB_BLOCKS = 64, MB_S = 4 };
typedef struct MixedBatch {
    int D, bs, T;
    Cache c;
    int32_t tables[MB_S][17];
    RunnerSeq seqs[MB_S];
    RunnerBatch batch;
    float *q;
} MixedBatch;

static const int MB_STARTS[MB_S] = {0, 37, 100, 250}, MB_LENS[MB_S] = {70, 1, 33, 1};
static int32_t mb_dummy_tokens[256];

static MixedBatch *mixed_batch_create(int D, int bs) {
    MixedBatch *m = calloc(1, sizeof *m);
    cr_assert(m);
    m->D = D;
    m->bs = bs;
    m->c = make_cache((size_t)MB_BLOCKS * bs * MB_KV_HEADS * D);
    int blocks_used = 17; /* 320 tokens of context at block size 16 */
    for (int s = 0; s < MB_S; s++) {
        for (int b = 0; b < blocks_used; b++) m->tables[s][b] = (int32_t)((s * 17 + b) * 7 % MB_BLOCKS);
        m->seqs[s] = (RunnerSeq){.tokens = mb_dummy_tokens, .num_tokens = MB_LENS[s], .start_pos = MB_STARTS[s],
                                 .block_table = m->tables[s], .num_blocks = blocks_used, .compute_logits = true};
        m->T += MB_LENS[s];
    }
    m->batch = (RunnerBatch){.seqs = m->seqs, .num_seqs = MB_S};
    m->q = malloc(sizeof(float) * (size_t)m->T * MB_HEADS * D);
    cr_assert(m->q);
    for (size_t i = 0; i < (size_t)m->T * MB_HEADS * D; i++) m->q[i] = 3 * uniform();
    /* bf16 values: bf16 inputs leave them as they are, so the paths differ
     * by P's rounding alone */
    bf16_round_in_f32(m->q, m->q, (size_t)m->T * MB_HEADS * D);
    return m;
}

static void mixed_batch_destroy(MixedBatch *m) {
    free_cache(&m->c);
    free(m->q);
    free(m);
}

/* out [T, heads * D] of cpu_attention() on the batch at the active ISA. */
static void mixed_batch_run(const MixedBatch *m, bool bf16_inputs, float *out) {
    Error err = {0};
    ThreadPool *pool = thread_pool_create(2, &err);
    cr_assert(pool, "%s", err.msg);
    AttentionShape shape = {MB_HEADS, MB_KV_HEADS, m->D, m->bs};
    CpuAttention *a = cpu_attention_create_kv(pool, shape, KV_CACHE_BF16, MB_S, 256, &err);
    cr_assert(a, "%s", err.msg);
    cpu_attention_set_bf16_inputs(a, bf16_inputs);
    cpu_attention(a, out, m->q, m->c.kb, m->c.vb, &m->batch);
    cpu_attention_destroy(a);
    thread_pool_destroy(pool);
}

/* Largest difference of out from float64 attention on the widened cache. */
static double mixed_batch_error(const MixedBatch *m, const float *out) {
    int D = m->D, G = MB_HEADS / MB_KV_HEADS, t = 0;
    double *want = malloc(sizeof(double) * (size_t)G * D), worst = 0;
    cr_assert(want);
    for (int s = 0; s < MB_S; s++) {
        for (int i = 0; i < MB_LENS[s]; i++, t++) {
            for (int h = 0; h < MB_KV_HEADS; h++) {
                const float *qh = m->q + ((size_t)t * MB_HEADS + (size_t)h * G) * D;
                paged_attention_reference(want, qh, m->c.kf, m->c.vf, m->tables[s], MB_STARTS[s] + i + 1, m->bs, MB_KV_HEADS, h, G, D);
                for (int k = 0; k < G * D; k++)
                    worst = fmax(worst, fabs(want[k] - out[((size_t)t * MB_HEADS + (size_t)h * G) * D + k]));
            }
        }
    }
    free(want);
    return worst;
}

/* cpu_attention() over a bf16 cache: prefill tiles (sgemm on widened
 * blocks) and decode sequences (the kernels above) in one batch, against
 * float64 on the widened values. */
Test(cpu_attention, paged_bf16_cache_mixed_batch) {
    MixedBatch *m = mixed_batch_create(128, 16);
    float *out = malloc(sizeof(float) * (size_t)m->T * MB_HEADS * m->D);
    cr_assert(out);
    mixed_batch_run(m, false, out);
    double worst = mixed_batch_error(m, out);
    cr_expect(worst < 1e-5, "attention on a bf16 cache differs from float64 by %g", worst);
    free(out);
    mixed_batch_destroy(m);
}

/* --dtype bfloat16: prefill tiles round Q and P to bf16 (on AVX512-BF16 the
 * bf16 kernel runs both products); decode tokens do so where the vdpbf16ps
 * decode kernels run (cpu_attention_decode_dot.h), the float32 kernels
 * stay exact. Every ISA level must compute the same rounded products (only
 * the order of float32 sums and the exp's last bit differ, and a decode
 * token's p rounded or not: at most 2^-8 of max |v|, which is 1 here),
 * stay within bf16 rounding of float64, and differ from the exact path
 * (the rounding is not skipped). Head sizes and block sizes that leave
 * tails in the kernel (K of 40) and the transpose (n not a multiple of 8). */
Test(cpu_attention, bf16_inputs_same_at_every_isa) {
    static const int dims[] = {128, 40}, block_sizes[] = {16, 256};
    CpuIsa best = cpu_isa_detect();
    for (int di = 0; di < 2; di++) {
        for (int bi = 0; bi < 2; bi++) {
            MixedBatch *m = mixed_batch_create(dims[di], block_sizes[bi]);
            size_t n = (size_t)m->T * MB_HEADS * m->D;
            float *exact = malloc(sizeof(float) * n), *scalar = malloc(sizeof(float) * n),
                  *out = malloc(sizeof(float) * n);
            cr_assert(exact && scalar && out);
            cr_assert(cpu_isa_set(CPU_ISA_SCALAR) == 0);
            mixed_batch_run(m, false, exact);
            mixed_batch_run(m, true, scalar);
            double rounding = 0;
            for (size_t i = 0; i < n; i++) rounding = fmax(rounding, fabs(scalar[i] - exact[i]));
            cr_expect(rounding > 1e-4, "D %d bs %d: bf16 inputs changed nothing (%g)", m->D, m->bs, rounding);
            for (int isa = CPU_ISA_SCALAR; isa <= (int)best; isa++) {
                cr_assert(cpu_isa_set((CpuIsa)isa) == 0);
                mixed_batch_run(m, true, out);
                double vs_scalar = 0, vs_f64 = mixed_batch_error(m, out);
                for (size_t i = 0; i < n; i++) vs_scalar = fmax(vs_scalar, fabs(out[i] - scalar[i]));
                cr_log_info("bf16 inputs, D %d bs %d, %s: %.3g from float64, %.3g from scalar (rounding %.3g)",
                            m->D, m->bs, cpu_isa_name((CpuIsa)isa), vs_f64, vs_scalar, rounding);
                cr_expect(vs_f64 < 5e-3, "%s D %d bs %d: %g from float64", cpu_isa_name((CpuIsa)isa), m->D, m->bs, vs_f64);
                double tol = 2e-4 + (dot_kernels_fit((CpuIsa)isa, false, m->D, MB_HEADS / MB_KV_HEADS) ? 0x1p-8 * 1.01 : 0);
                cr_expect(vs_scalar < tol, "%s D %d bs %d: %g from the scalar level", cpu_isa_name((CpuIsa)isa), m->D, m->bs, vs_scalar);
            }
            cpu_isa_set(best);
            free(exact);
            free(scalar);
            free(out);
            mixed_batch_destroy(m);
        }
    }
}
