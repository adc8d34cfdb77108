/*
 * test_cpu_attention.c - the CPU attention kernels on float32 and bf16 KV
 * caches: the one-token (decode) kernels of cpu_attention_decode.h at every
 * SIMD level this machine runs, against the scalar reference and a float64
 * one, at odd sizes; split key ranges merged as one; and cpu_attention()
 * over a bf16 cache with prefill and decode sequences in one batch. (Kept
 * apart from test_cpu_kernels.c, which covers the matmuls.)
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_attention.h"
#include "cpu/cpu_attention_decode.h"
#include "engine/base/cpu_isa.h"
#include "engine/base/half.h"

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

/* float64 softmax(q K^T / sqrt(D)) V for G heads of one KV head over keys [0, ctx). */
static void reference(double *out, const float *q, const Cache *c, const int32_t *table, int ctx,
                      int bs, int kv_heads, int kv_head, int G, int D) {
    double *score = malloc(sizeof(double) * (size_t)ctx);
    cr_assert(score);
    for (int g = 0; g < G; g++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < ctx; j++) {
            size_t row = (((size_t)table[j / bs] * kv_heads + kv_head) * bs + j % bs) * D;
            double d = 0;
            for (int e = 0; e < D; e++) d += (double)q[g * D + e] * c->kf[row + e];
            score[j] = d / sqrt((double)D);
            mx = fmax(mx, score[j]);
        }
        for (int j = 0; j < ctx; j++) sum += (score[j] = exp(score[j] - mx));
        for (int e = 0; e < D; e++) {
            double o = 0;
            for (int j = 0; j < ctx; j++) {
                size_t row = (((size_t)table[j / bs] * kv_heads + kv_head) * bs + j % bs) * D;
                o += score[j] / sum * c->vf[row + e];
            }
            out[g * D + e] = o;
        }
    }
    free(score);
}

typedef struct Scratch {
    float *scores, *max, *sum, *acc;
} Scratch;

/* Keys [0, ctx) in `parts` ranges of about equal size, merged. */
static void decode(float *out, CpuIsa isa, const DecodeKv *kv, const float *q, int G, int ctx,
                   int parts, Scratch *s) {
    DecodePart p[4];
    int D = kv->head_dim;
    for (int i = 0; i < parts; i++)
        p[i] = (DecodePart){s->max + i * G, s->sum + i * G, s->acc + (size_t)i * G * D};
    for (int i = 0; i < parts; i++) {
        int k0 = (int)((long)ctx * i / parts), k1 = (int)((long)ctx * (i + 1) / parts);
        cr_assert(k0 < k1);
        decode_attend_range(isa, kv, q, G, k0, k1, s->scores, p[i]);
    }
    decode_finish(out, D, p, parts, G, D);
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
    Scratch s = {malloc(sizeof(float) * MAX_G * 256), malloc(sizeof(float) * MAX_PARTS * MAX_G),
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
                    reference(want, q, &c, table, ctx, bs, KV_HEADS, kv_head, G, D);
                    for (int bf = 0; bf < 2; bf++) {
                        DecodeKv kv = {bf ? (const void *)c.kb : c.kf, bf ? (const void *)c.vb : c.vf,
                                       bf, table, bs, KV_HEADS, kv_head, D};
                        int parts = ctx >= 3 ? 1 + ci % MAX_PARTS : 1;
                        decode(ref_out, CPU_ISA_SCALAR, &kv, q, G, ctx, 1, &s);
                        decode(out, isa, &kv, q, G, ctx, parts, &s);
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

/* cpu_attention() over a bf16 cache: prefill tiles (sgemm on widened
 * blocks) and decode sequences (the kernels above) in one batch, against
 * float64 on the widened values. */
Test(cpu_attention, paged_bf16_cache_mixed_batch) {
    enum { HEADS = 8, KV_HEADS = 2, D = 128, BS = 16, BLOCKS = 64, S = 4 };
    Error err = {0};
    ThreadPool *pool = thread_pool_create(2, &err);
    cr_assert(pool, "%s", err.msg);
    AttentionShape shape = {HEADS, KV_HEADS, D, BS};
    CpuAttention *a = cpu_attention_create_kv(pool, shape, true, S, 256, &err);
    cr_assert(a, "%s", err.msg);
    Cache c = make_cache((size_t)BLOCKS * BS * KV_HEADS * D);
    int starts[S] = {0, 37, 100, 250}, lens[S] = {70, 1, 33, 1};
    int32_t tables[S][17];
    for (int s = 0; s < S; s++)
        for (int b = 0; b < 17; b++) tables[s][b] = (int32_t)((s * 17 + b) * 7 % BLOCKS);
    RunnerSeq seqs[S];
    int32_t dummy[256] = {0};
    int T = 0;
    for (int s = 0; s < S; s++) {
        seqs[s] = (RunnerSeq){.tokens = dummy, .num_tokens = lens[s], .start_pos = starts[s], .block_table = tables[s], .num_blocks = 17, .compute_logits = true};
        T += lens[s];
    }
    RunnerBatch batch = {.seqs = seqs, .num_seqs = S};
    float *q = malloc(sizeof(float) * (size_t)T * HEADS * D);
    float *out = malloc(sizeof(float) * (size_t)T * HEADS * D);
    double want[4 * D];
    cr_assert(q && out);
    for (size_t i = 0; i < (size_t)T * HEADS * D; i++) q[i] = 3 * uniform();
    cpu_attention(a, out, q, c.kb, c.vb, &batch);
    double worst = 0;
    int t = 0;
    for (int s = 0; s < S; s++) {
        for (int i = 0; i < lens[s]; i++, t++) {
            for (int h = 0; h < KV_HEADS; h++) {
                int G = HEADS / KV_HEADS;
                const float *qh = q + ((size_t)t * HEADS + (size_t)h * G) * D;
                reference(want, qh, &c, tables[s], starts[s] + i + 1, BS, KV_HEADS, h, G, D);
                for (int k = 0; k < G * D; k++)
                    worst = fmax(worst, fabs(want[k] - out[((size_t)t * HEADS + (size_t)h * G) * D + k]));
            }
        }
    }
    cr_expect(worst < 1e-5, "attention on a bf16 cache differs from float64 by %g", worst);
    free(q);
    free(out);
    free_cache(&c);
    cpu_attention_destroy(a);
    thread_pool_destroy(pool);
}
