/*
 * test_cpu_attention_dot.c - the vdpbf16ps decode kernels
 * (cpu/cpu_attention_decode_dot.h) over a bf16 and an fp8 cache, where
 * this CPU has them (AVX512-BF16 and VBMI): any q gives the bits of
 * q rounded to bf16 first (nearest even, as f32_to_bf16), and with such a
 * q the outputs stay within float32 sums plus p's rounding of the float64
 * reference: each weight within 2^-8 of itself moves an output by at most
 * 2^-8 of the largest |v|. Groups of 1-8 heads, head sizes 64-256 (and
 * 40, which takes the float32 kernels), block sizes 16 and 1,024 (past
 * the kernels' 256-row chunks of p), contexts with odd tails, split key
 * ranges merged as one.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_reference.h"
#include "cpu/cpu_attention_decode.h"
#include "cpu/cpu_attention_decode_dot.h"
#include "cpu/cpu_kv_fp8.h"
#include "cpu/cpu_matmul_bf16.h"
#include "base/cpu_isa.h"
#include "base/half.h"
#include "model/weight_format.h"

static uint64_t rng = 0x853C49E6748FEA9Bull;
static float uniform(void) { /* xorshift64, uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

enum { KV_HEADS = 3, MAX_G = 8, MAX_D = 256, MAX_PARTS = 3, MAX_KEYS = 1024 };

/* n values of K and V in the cache's bytes (bf16 or e4m3 with scales 0.25
 * and 3), with their float values: K up to ~8 (e4m3's exponents all used),
 * V up to max_v. */
typedef struct Cache {
    void *k, *v;
    float *kf, *vf;
    float k_scale, v_scale, max_v;
    bool fp8;
} Cache;

static Cache make_cache(size_t n, bool fp8) {
    Cache c = {malloc(n * 2), malloc(n * 2), malloc(sizeof(float) * n), malloc(sizeof(float) * n),
               fp8 ? 0.25f : 1.0f, fp8 ? 3.0f : 1.0f, 0, fp8};
    cr_assert(c.k && c.v && c.kf && c.vf);
    c.max_v = 2 * c.v_scale;
    for (size_t i = 0; i < n; i++) {
        float k = 8 * uniform() * uniform(), v = c.max_v * uniform();
        if (fp8) {
            uint8_t *kq = c.k, *vq = c.v;
            kv_fp8_store(CPU_ISA_SCALAR, &kq[i], &k, 1, c.k_scale);
            kv_fp8_store(CPU_ISA_SCALAR, &vq[i], &v, 1, c.v_scale);
            c.kf[i] = fp8_e4m3_to_float(kq[i]) * c.k_scale;
            c.vf[i] = fp8_e4m3_to_float(vq[i]) * c.v_scale;
        } else {
            uint16_t *kb = c.k, *vb = c.v;
            kb[i] = f32_to_bf16(k);
            vb[i] = f32_to_bf16(v);
            c.kf[i] = bf16_to_f32(kb[i]);
            c.vf[i] = bf16_to_f32(vb[i]);
        }
    }
    return c;
}

static void free_cache(Cache *c) {
    free(c->k);
    free(c->v);
    free(c->kf);
    free(c->vf);
}

typedef struct Scratch {
    float scores[MAX_G * MAX_KEYS], max[MAX_PARTS * MAX_G], sum[MAX_PARTS * MAX_G], acc[MAX_PARTS * MAX_G * MAX_D];
} Scratch;

static void decode(float *out, const DecodeKv *kv, const float *q, int G, int ctx, int parts, Scratch *s) {
    const DecodeScratch ds = {s->scores, s->max, s->sum, s->acc};
    decode_in_parts(out, CPU_ISA_AVX512_BF16, kv, q, G, ctx, parts, &ds);
}


/* Every case over one cache kind: cases run, worst |out - float64| per
 * unit of max |v|. */
static int check_kind(bool fp8, double *worst) {
    static const int groups[] = {1, 2, 3, 5, 8}, dims[] = {128, 64, 256, 40},
                     contexts[] = {1, 2, 3, 5, 17, 64, 257, 600, 1023, 1500};
    size_t n = (size_t)40 * 256 * KV_HEADS * MAX_D;
    Cache c = make_cache(n, fp8);
    Scratch *s = malloc(sizeof *s);
    float *q = malloc(sizeof(float) * MAX_G * MAX_D), *qr = malloc(sizeof(float) * MAX_G * MAX_D),
          *a = malloc(sizeof(float) * MAX_G * MAX_D), *b = malloc(sizeof(float) * MAX_G * MAX_D);
    double *want = malloc(sizeof(double) * MAX_G * MAX_D);
    cr_assert(s && q && qr && a && b && want);
    int32_t table[64];
    int checked = 0;
    for (int gi = 0; gi < 5; gi++)
        for (int di = 0; di < 4; di++)
            for (int ci = 0; ci < 10; ci++) {
                int G = groups[gi], D = dims[di], ctx = contexts[ci], parts = ctx >= 3 ? 1 + ci % MAX_PARTS : 1;
                int bs = ctx > 600 ? 1024 : 16, num_blocks = (int)(n / ((size_t)bs * KV_HEADS * D));
                if (num_blocks * bs < ctx + bs) continue; /* not enough blocks for a scattered table */
                for (int i = 0; i < 64; i++) table[i] = (int32_t)((i * 7 + 3) % num_blocks);
                for (int k = 0; k < G * D; k++) q[k] = 1.5f * uniform() / c.k_scale; /* |q.k| / sqrt(D) ~10 */
                bf16_round_in_f32(qr, q, (size_t)G * D);
                DecodeKv kv = {.k = c.k, .v = c.v, .dtype = fp8 ? KV_CACHE_FP8 : KV_CACHE_BF16,
                               .block_table = table, .block_size = bs, .num_kv_heads = KV_HEADS,
                               .kv_head = (gi + di) % KV_HEADS, .head_dim = D, .k_scale = c.k_scale,
                               .v_scale = c.v_scale, .bf16_products = true};
                decode(a, &kv, q, G, ctx, parts, s);
                decode(b, &kv, qr, G, ctx, parts, s);
                cr_assert(memcmp(a, b, sizeof(float) * (size_t)G * D) == 0 ||
                              !dot_kernels_fit(CPU_ISA_AVX512_BF16, fp8, D, G),
                          "%s G %d D %d ctx %d: q and bf16(q) differ", fp8 ? "fp8" : "bf16", G, D, ctx);
                paged_attention_reference(want, qr, c.kf, c.vf, table, ctx, bs, KV_HEADS, kv.kv_head, G, D);
                double tol = (3e-6 + 0x1p-8 * 1.01) * c.max_v; /* float32 sums, and p's rounding */
                for (int k = 0; k < G * D; k++) {
                    *worst = fmax(*worst, fabs(b[k] - want[k]) / c.max_v);
                    cr_assert(fabs(b[k] - want[k]) <= tol, "%s G %d D %d bs %d ctx %d: out[%d] = %.9g, float64 %.9g",
                              fp8 ? "fp8" : "bf16", G, D, bs, ctx, k, b[k], want[k]);
                }
                checked++;
            }
    free_cache(&c);
    free(s), free(q), free(qr), free(a), free(b), free(want);
    return checked;
}

static void check_if_present(bool fp8) {
    CpuIsa best = cpu_isa_detect();
    if (!dot_kernels_fit(best, fp8, 128, 8)) {
        cr_log_warn("%s decode attention on vdpbf16ps not checked: this CPU (%s) lacks AVX512-BF16 or VBMI",
                    fp8 ? "fp8" : "bf16", cpu_isa_name(best));
        return;
    }
    cr_assert(cpu_isa_set(CPU_ISA_AVX512_BF16) == 0); /* the softmax's exp follows it, as in the runner */
    double worst = 0;
    int checked = check_kind(fp8, &worst);
    cpu_isa_set(best);
    cr_log_info("%s decode attention on vdpbf16ps: %d cases, q rounded as bf16(q), %.3g of max |v| from float64",
                fp8 ? "fp8" : "bf16", checked, worst);
}

Test(cpu_attention_dot, bf16_cache) { check_if_present(false); }
Test(cpu_attention_dot, fp8_cache) { check_if_present(true); }
