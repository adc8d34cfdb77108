/*
 * test_cpu_kv_fp8.c - the fp8 (e4m3) KV cache on the CPU, below the runner:
 * the store's rounding against the committed reference
 * (fp8_e4m3_from_float), the widening against fp8_e4m3_to_float, every
 * SIMD level against the scalar one, and attention over an fp8 cache
 * (decode kernels, and cpu_attention() with prefill and decode sequences
 * in one batch) at every level this machine runs, against the scalar
 * level and a float64 reference on the dequantized values. The inputs are
 * the same bytes at every level, so only the order of float32 sums (and
 * the exp's last bit) may differ: the tolerances are float32's, except
 * where the vdpbf16ps kernels run (bf16 products, as under --dtype
 * bfloat16; cpu_attention_decode_dot.h): they round q and p to bf16. The
 * tests give them bf16 q (test_cpu_attention_dot.c checks their rounding of
 * other q bit for bit, and more shapes), so what remains is p's:
 * each weight within 2^-8 of itself moves an output by at most 2^-8 of
 * the largest |v| (DOT_P_ROUNDING), on top of float32's tolerance.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_reference.h"
#include "cpu/cpu_attention.h"
#include "cpu/cpu_attention_decode.h"
#include "cpu/cpu_attention_decode_dot.h"
#include "cpu/cpu_kv_fp8.h"
#include "cpu/cpu_matmul_bf16.h"
#include "base/cpu_isa.h"
#include "model/weight_format.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t next_u64(void) { /* xorshift64 */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static float uniform(void) { return (float)((next_u64() >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0); }

/* p's rounding to bf16, per unit of the largest |v|, with room for the
 * float32 sums around it. */
#define DOT_P_ROUNDING (0x1p-8 * 1.01)

/* The highest level the attention kernels have: AVX512-BF16 where the CPU
 * has VBMI too (the fp8 cache by table lookup), AMX adds nothing. */
static CpuIsa top_level(void) {
    CpuIsa best = cpu_isa_detect(), top = cpu_isa_byte_lookup(best) ? CPU_ISA_AVX512_BF16 : CPU_ISA_AVX512;
    return best > top ? top : best;
}

/* ---- the conversions ------------------------------------------------------- */

static void expect_narrow(float x) {
    uint8_t want = fp8_e4m3_from_float(x), got = kv_fp8_narrow(x);
    cr_assert_eq(got, want, "%a: %02x, reference %02x", (double)x, got, want);
}

Test(cpu_kv_fp8, narrow_matches_reference) {
    /* Around every rounding boundary: each pair of neighbours' midpoint and
     * the floats either side of it, both signs. */
    for (int b = 0; b < 0x7e; b++) {
        float lo = fp8_e4m3_to_float((uint8_t)b), hi = fp8_e4m3_to_float((uint8_t)(b + 1));
        float mid = (lo + hi) / 2, pts[5] = {lo, mid, nextafterf(mid, lo), nextafterf(mid, hi), hi};
        for (int i = 0; i < 5; i++) {
            expect_narrow(pts[i]);
            expect_narrow(-pts[i]);
        }
    }
    static const float specials[] = {0.0f, -0.0f, 448.0f, 449.0f, 464.0f, 479.0f, 480.0f, 1e30f,
                                     INFINITY, -INFINITY, NAN, -NAN, 0x1p-6f, 0x1p-9f, 0x1p-10f,
                                     0x1p-11f, 0x1.8p-10f, 1e-30f, 0x1p-149f, 3.4e38f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        expect_narrow(specials[i]);
        expect_narrow(-specials[i]);
    }
    /* Random floats over e4m3's range and beyond: 2^-14 .. 2^10. */
    for (int i = 0; i < 1 << 20; i++) {
        uint32_t bits = (uint32_t)next_u64();
        bits = (bits & 0x807fffffu) | ((113u + (bits >> 23) % 24u) << 23);
        float x;
        memcpy(&x, &bits, sizeof x);
        expect_narrow(x);
    }
}

/* kv_fp8_store at every level writes the scalar level's bytes, which are
 * the reference's of value / scale (lengths that leave SIMD tails). */
Test(cpu_kv_fp8, store_every_isa) {
    enum { N = 4099 };
    float *src = malloc(sizeof(float) * N);
    uint8_t *want = malloc(N), *got = malloc(N);
    cr_assert(src && want && got);
    for (int i = 0; i < N; i++) src[i] = ldexpf(uniform(), (int)(next_u64() % 24) - 14);
    src[0] = NAN, src[1] = -INFINITY, src[2] = 1000.0f, src[3] = -0.0f, src[4] = 0x1p-10f;
    static const float scales[] = {1.0f, 0.5f, 3.0f};
    for (int si = 0; si < 3; si++) {
        for (int i = 0; i < N; i++) want[i] = fp8_e4m3_from_float(src[i] / scales[si]);
        for (int isa = CPU_ISA_SCALAR; isa <= (int)cpu_isa_detect(); isa++) {
            for (int n = 0; n <= 17; n++) { /* short rows: tails alone */
                memset(got, 0xaa, 32);
                kv_fp8_store((CpuIsa)isa, got, src, (size_t)n, scales[si]);
                cr_assert(memcmp(got, want, (size_t)n) == 0 && got[n] == 0xaa, "%s n %d",
                          cpu_isa_name((CpuIsa)isa), n);
            }
            kv_fp8_store((CpuIsa)isa, got, src, N, scales[si]);
            for (int i = 0; i < N; i++)
                cr_assert_eq(got[i], want[i], "%s scale %g: %a -> %02x, reference %02x",
                             cpu_isa_name((CpuIsa)isa), scales[si], (double)src[i], got[i], want[i]);
        }
    }
    free(src);
    free(want);
    free(got);
}

/* Every byte widens to its value (times the scale) at every level; the
 * NaN bytes, which the store never writes from finite values, read as +-480. */
Test(cpu_kv_fp8, widen_every_byte_every_isa) {
    uint8_t bytes[256 + 7];
    float want[256 + 7], got[256 + 7];
    for (int i = 0; i < 256 + 7; i++) bytes[i] = (uint8_t)(i * 37 + 11);
    static const float scales[] = {1.0f, 0.25f, 3.0f};
    for (int si = 0; si < 3; si++) {
        for (int i = 0; i < 256 + 7; i++) {
            uint8_t b = bytes[i];
            float v = fp8_e4m3_is_nan(b) ? ((b & 0x80) ? -480.0f : 480.0f) : fp8_e4m3_to_float(b);
            cr_assert_eq(kv_fp8_widen_scaled(b) * KV_FP8_WIDEN_SCALE, v, "byte %02x", b);
            want[i] = v * scales[si];
        }
        for (int isa = CPU_ISA_SCALAR; isa <= (int)cpu_isa_detect(); isa++) {
            kv_fp8_widen_rows((CpuIsa)isa, got, bytes, 256 + 7, scales[si]);
            for (int i = 0; i < 256 + 7; i++)
                cr_assert_eq(got[i], want[i], "%s byte %02x scale %g: %g, want %g",
                             cpu_isa_name((CpuIsa)isa), bytes[i], scales[si], got[i], want[i]);
        }
    }
}

/* ---- attention over an fp8 cache ------------------------------------------- */

/* n values of K and V as e4m3 bytes, with their float values (times the
 * scales): what every level reads and the float64 reference uses. */
typedef struct Fp8Cache {
    uint8_t *kq, *vq;
    float *kf, *vf;
    float k_scale, v_scale;
} Fp8Cache;

/* Values spread like a model's K (|x| up to ~8, so e4m3's exponents are
 * all used) and V (up to ~2). */
static Fp8Cache make_cache(size_t n, float k_scale, float v_scale) {
    Fp8Cache c = {malloc(n), malloc(n), malloc(sizeof(float) * n), malloc(sizeof(float) * n), k_scale, v_scale};
    cr_assert(c.kq && c.vq && c.kf && c.vf);
    for (size_t i = 0; i < n; i++) {
        float k = 8 * uniform() * uniform(), v = 2 * uniform();
        kv_fp8_store(CPU_ISA_SCALAR, &c.kq[i], &k, 1, k_scale);
        kv_fp8_store(CPU_ISA_SCALAR, &c.vq[i], &v, 1, v_scale);
        c.kf[i] = fp8_e4m3_to_float(c.kq[i]) * k_scale;
        c.vf[i] = fp8_e4m3_to_float(c.vq[i]) * v_scale;
    }
    return c;
}

static void free_cache(Fp8Cache *c) {
    free(c->kq);
    free(c->vq);
    free(c->kf);
    free(c->vf);
}


enum { KV_HEADS = 3, MAX_G = 8, MAX_D = 128, MAX_PARTS = 3 };

/* The decode kernels at `isa` over every (scales, block size, group, head
 * size, context): max differences from the scalar level and from float64.
 * bf16_products: as under --dtype bfloat16 (the vdpbf16ps kernels where
 * they run). */
static void check_decode_level(CpuIsa isa, bool bf16_products, double *vs_scalar, double *vs_f64) {
    static const int contexts_extra[] = {129, 256, 257, 300, 511, 600};
    static const int block_sizes[] = {16, 256}, groups[] = {1, 2, 4, 8, 3}, dims[] = {128, 64, 40};
    static const float scales[][2] = {{1.0f, 1.0f}, {0.25f, 3.0f}};
    size_t n = (size_t)40 * 256 * KV_HEADS * MAX_D; /* 600 tokens at either block size */
    DecodeScratch s = {malloc(sizeof(float) * MAX_G * 256), malloc(sizeof(float) * MAX_PARTS * MAX_G),
                       malloc(sizeof(float) * MAX_PARTS * MAX_G), malloc(sizeof(float) * MAX_PARTS * MAX_G * MAX_D)};
    float *q = malloc(sizeof(float) * MAX_G * MAX_D), *out = malloc(sizeof(float) * MAX_G * MAX_D),
          *ref_out = malloc(sizeof(float) * MAX_G * MAX_D);
    double *want = malloc(sizeof(double) * MAX_G * MAX_D);
    cr_assert(s.scores && s.max && s.sum && s.acc && q && out && ref_out && want);
    int32_t table[64];
    for (int sc = 0; sc < 2; sc++) {
        Fp8Cache c = make_cache(n, scales[sc][0], scales[sc][1]);
        for (int bsi = 0; bsi < 2; bsi++) {
            int bs = block_sizes[bsi], num_blocks = (int)(n / ((size_t)bs * KV_HEADS * MAX_D));
            for (int b = 0; b < 64; b++) table[b] = (int32_t)((b * 7 + 3) % num_blocks); /* scattered */
            for (int gi = 0; gi < 5; gi++) {
                for (int di = 0; di < 3; di++) {
                    int G = groups[gi], D = dims[di], kv_head = (gi + di) % KV_HEADS;
                    /* peaky softmax: |q.k| / sqrt(D) reaches ~10 */
                    for (int k = 0; k < G * D; k++) q[k] = 1.5f * uniform() / c.k_scale;
                    bf16_round_in_f32(q, q, (size_t)G * D); /* as the vdpbf16ps kernels read it */
                    DecodeKv kv = {.k = c.kq, .v = c.vq, .dtype = KV_CACHE_FP8, .block_table = table,
                                   .block_size = bs, .num_kv_heads = KV_HEADS, .kv_head = kv_head,
                                   .head_dim = D, .k_scale = c.k_scale, .v_scale = c.v_scale,
                                   .bf16_products = bf16_products};
                    /* float32 sums of values up to 2 * v_scale, and p's rounding */
                    bool rounds = bf16_products && dot_kernels_fit(isa, true, D, G);
                    double tol = (3e-6 + (rounds ? DOT_P_ROUNDING : 0)) * 2 * c.v_scale;
                    for (int ci = 0; ci < 40 + 6; ci++) {
                        int ctx = ci < 40 ? ci + 1 : contexts_extra[ci - 40];
                        int parts = ctx >= 3 ? 1 + ci % MAX_PARTS : 1;
                        paged_attention_reference(want, q, c.kf, c.vf, table, ctx, bs, KV_HEADS, kv_head, G, D);
                        decode_in_parts(ref_out, CPU_ISA_SCALAR, &kv, q, G, ctx, 1, &s);
                        decode_in_parts(out, isa, &kv, q, G, ctx, parts, &s);
                        for (int k = 0; k < G * D; k++) {
                            double e = fabs(out[k] - want[k]), es = fabs(out[k] - ref_out[k]);
                            *vs_f64 = fmax(*vs_f64, e / c.v_scale);
                            *vs_scalar = fmax(*vs_scalar, es / c.v_scale);
                            if (e > tol || es > tol)
                                cr_assert_fail("%s scales %g/%g bs %d G %d D %d ctx %d parts %d: out[%d] = "
                                               "%.9g, scalar %.9g, float64 %.9g",
                                               cpu_isa_name(isa), c.k_scale, c.v_scale, bs, G, D, ctx,
                                               parts, k, out[k], ref_out[k], want[k]);
                        }
                    }
                }
            }
        }
        free_cache(&c);
    }
    free(q);
    free(out);
    free(ref_out);
    free(want);
    free(s.scores);
    free(s.max);
    free(s.sum);
    free(s.acc);
}

Test(cpu_kv_fp8, decode_kernels_every_isa) {
    CpuIsa best = cpu_isa_detect();
    for (int isa = CPU_ISA_SCALAR; isa <= (int)top_level(); isa++) {
        cr_assert(cpu_isa_set((CpuIsa)isa) == 0); /* the softmax's exp follows it, as in the runner */
        for (int bf = 0; bf < 2; bf++) {
            double vs_scalar = 0, vs_f64 = 0;
            check_decode_level((CpuIsa)isa, bf, &vs_scalar, &vs_f64);
            cr_log_info("fp8 decode attention %s%s: max diff %.3g from float64, %.3g from scalar (per unit of "
                        "v_scale)", cpu_isa_name((CpuIsa)isa), bf ? " bf16 products" : "", vs_f64, vs_scalar);
        }
    }
    cpu_isa_set(best);
}

/* Where the CPU has VBMI, the table-lookup kernels (AVX512-BF16 level)
 * give the AVX-512 fp8 kernels' bits: the same floats, the same FMAs in
 * the same order (head sizes not a multiple of 64 are those kernels). */
Test(cpu_kv_fp8, table_lookup_kernels_have_avx512_bits) {
    if (!cpu_isa_byte_lookup(cpu_isa_detect())) {
        cr_log_warn("fp8 table-lookup attention not checked: this CPU (%s) lacks AVX512-BF16 or VBMI",
                    cpu_isa_name(cpu_isa_detect()));
        return;
    }
    static const int groups[] = {1, 2, 3, 8}, dims[] = {128, 64, 192, 40}, contexts[] = {1, 2, 3, 5, 17, 64, 257, 600};
    size_t n = (size_t)40 * 256 * KV_HEADS * 192;
    DecodeScratch s = {malloc(sizeof(float) * MAX_G * 600), malloc(sizeof(float) * MAX_PARTS * MAX_G),
                       malloc(sizeof(float) * MAX_PARTS * MAX_G), malloc(sizeof(float) * MAX_PARTS * MAX_G * 192)};
    float *q = malloc(sizeof(float) * MAX_G * 192), *a = malloc(sizeof(float) * MAX_G * 192),
          *b = malloc(sizeof(float) * MAX_G * 192);
    cr_assert(s.scores && s.max && s.sum && s.acc && q && a && b);
    Fp8Cache c = make_cache(n, 0.25f, 3.0f);
    int32_t table[64];
    for (int i = 0; i < 64; i++) table[i] = (int32_t)((i * 7 + 3) % 40);
    CpuIsa best = cpu_isa_active();
    int checked = 0;
    for (int gi = 0; gi < 4; gi++)
        for (int di = 0; di < 4; di++)
            for (int ci = 0; ci < 8; ci++) {
                int G = groups[gi], D = dims[di], ctx = contexts[ci], parts = ctx >= 3 ? 1 + ci % MAX_PARTS : 1;
                for (int k = 0; k < G * D; k++) q[k] = 1.5f * uniform() / c.k_scale;
                DecodeKv kv = {.k = c.kq, .v = c.vq, .dtype = KV_CACHE_FP8, .block_table = table, .block_size = 16,
                               .num_kv_heads = KV_HEADS, .kv_head = (gi + di) % KV_HEADS, .head_dim = D,
                               .k_scale = c.k_scale, .v_scale = c.v_scale};
                cr_assert(cpu_isa_set(CPU_ISA_AVX512) == 0);
                decode_in_parts(a, CPU_ISA_AVX512, &kv, q, G, ctx, parts, &s);
                cr_assert(cpu_isa_set(CPU_ISA_AVX512_BF16) == 0);
                decode_in_parts(b, CPU_ISA_AVX512_BF16, &kv, q, G, ctx, parts, &s);
                cr_assert(memcmp(a, b, sizeof(float) * (size_t)G * D) == 0, "G %d D %d ctx %d: bits differ", G, D, ctx);
                checked++;
            }
    cpu_isa_set(best);
    cr_log_info("fp8 decode attention by table lookup: %d cases, AVX-512's bits", checked);
    free_cache(&c);
    free(q), free(a), free(b);
    free(s.scores), free(s.max), free(s.sum), free(s.acc);
}

/* cpu_attention() with prefill tiles (fp8 blocks widened for sgemm) and
 * decode sequences (the kernels above) in one batch. */
enum { MB_HEADS = 8, MB_KV_HEADS = 2, MB_BLOCKS = 64, MB_S = 4 };
static const int MB_STARTS[MB_S] = {0, 37, 100, 250}, MB_LENS[MB_S] = {70, 1, 33, 1};

typedef struct MixedBatch {
    int D, bs, T;
    Fp8Cache c;
    int32_t tables[MB_S][17];
    RunnerSeq seqs[MB_S];
    RunnerBatch batch;
    float *q;
} MixedBatch;

static int32_t dummy_tokens[256];

static MixedBatch *mixed_batch_create(int D, int bs, float k_scale, float v_scale) {
    MixedBatch *m = calloc(1, sizeof *m);
    cr_assert(m);
    m->D = D;
    m->bs = bs;
    m->c = make_cache((size_t)MB_BLOCKS * bs * MB_KV_HEADS * D, k_scale, v_scale);
    for (int s = 0; s < MB_S; s++) {
        for (int b = 0; b < 17; b++) m->tables[s][b] = (int32_t)((s * 17 + b) * 7 % MB_BLOCKS);
        m->seqs[s] = (RunnerSeq){.tokens = dummy_tokens, .num_tokens = MB_LENS[s], .start_pos = MB_STARTS[s],
                                 .block_table = m->tables[s], .num_blocks = 17, .compute_logits = true};
        m->T += MB_LENS[s];
    }
    m->batch = (RunnerBatch){.seqs = m->seqs, .num_seqs = MB_S};
    m->q = malloc(sizeof(float) * (size_t)m->T * MB_HEADS * D);
    cr_assert(m->q);
    for (size_t i = 0; i < (size_t)m->T * MB_HEADS * D; i++) m->q[i] = 1.5f * uniform() / k_scale;
    bf16_round_in_f32(m->q, m->q, (size_t)m->T * MB_HEADS * D);
    return m;
}

static void mixed_batch_destroy(MixedBatch *m) {
    free_cache(&m->c);
    free(m->q);
    free(m);
}

static void mixed_batch_run(const MixedBatch *m, bool bf16_inputs, float *out) {
    Error err = {0};
    ThreadPool *pool = thread_pool_create(2, &err);
    cr_assert(pool, "%s", err.msg);
    AttentionShape shape = {MB_HEADS, MB_KV_HEADS, m->D, m->bs};
    CpuAttention *a = cpu_attention_create_kv(pool, shape, KV_CACHE_FP8, MB_S, 256, &err);
    cr_assert(a, "%s", err.msg);
    cpu_attention_set_bf16_inputs(a, bf16_inputs);
    cpu_attention_set_fp8_scales(a, m->c.k_scale, m->c.v_scale);
    cpu_attention(a, out, m->q, m->c.kq, m->c.vq, &m->batch);
    cpu_attention_destroy(a);
    thread_pool_destroy(pool);
}

/* Largest difference of out from float64 attention on the dequantized cache. */
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

/* Every level within float32 sums of the scalar level and of float64, at
 * head sizes and block sizes that leave SIMD tails, with scales 1 and not;
 * --dtype bfloat16 changes nothing over an fp8 cache (cpu_attention.c). */
Test(cpu_kv_fp8, attention_mixed_batch_every_isa) {
    static const int dims[] = {128, 40}, block_sizes[] = {16, 256};
    static const float scales[][2] = {{1.0f, 1.0f}, {0.5f, 4.0f}};
    CpuIsa best = cpu_isa_detect();
    for (int di = 0; di < 2; di++) {
        for (int bi = 0; bi < 2; bi++) {
            MixedBatch *m = mixed_batch_create(dims[di], block_sizes[bi], scales[(di + bi) % 2][0],
                                               scales[(di + bi) % 2][1]);
            size_t n = (size_t)m->T * MB_HEADS * m->D;
            float *scalar = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * n);
            cr_assert(scalar && out);
            cr_assert(cpu_isa_set(CPU_ISA_SCALAR) == 0);
            mixed_batch_run(m, false, scalar);
            for (int isa = CPU_ISA_SCALAR; isa <= (int)best; isa++) {
                cr_assert(cpu_isa_set((CpuIsa)isa) == 0);
                for (int bf = 0; bf < 2; bf++) {
                    /* values up to 2 * v_scale; p's rounding where the vdpbf16ps kernels run */
                    bool rounds = bf && dot_kernels_fit((CpuIsa)isa, true, m->D, MB_HEADS / MB_KV_HEADS);
                    double tol = 1e-5 * m->c.v_scale + (rounds ? DOT_P_ROUNDING * 2 * m->c.v_scale : 0);
                    mixed_batch_run(m, bf, out);
                    double vs_scalar = 0, vs_f64 = mixed_batch_error(m, out);
                    for (size_t i = 0; i < n; i++) vs_scalar = fmax(vs_scalar, fabs(out[i] - scalar[i]));
                    cr_log_info("fp8 cache, D %d bs %d scales %g/%g, %s%s: %.3g from float64, %.3g from scalar",
                                m->D, m->bs, m->c.k_scale, m->c.v_scale, cpu_isa_name((CpuIsa)isa),
                                bf ? " bf16 inputs" : "", vs_f64, vs_scalar);
                    cr_expect(vs_f64 < tol, "%s D %d bs %d: %g from float64", cpu_isa_name((CpuIsa)isa), m->D, m->bs, vs_f64);
                    cr_expect(vs_scalar < tol, "%s D %d bs %d: %g from the scalar level", cpu_isa_name((CpuIsa)isa), m->D, m->bs, vs_scalar);
                }
            }
            cpu_isa_set(best);
            free(scalar);
            free(out);
            mixed_batch_destroy(m);
        }
    }
}
