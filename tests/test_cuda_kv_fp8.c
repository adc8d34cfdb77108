/*
 * test_cuda_kv_fp8.c - the fp8 KV cache on the GPU (--kv-cache-dtype fp8:
 * cuda/cuda_kv_fp8.h and the *_fp8 kernels), skipped with the reason where
 * there is no GPU (the block-size arithmetic runs anywhere; the encoder and
 * the lane mapping are checked on the CPU by test_kv_fp8_plan.c).
 *
 *  - The store: every K and V byte the q/k norm + RoPE + store kernel
 *    writes. V (stored as it comes) must be fp8_e4m3_from_float(x / scale)
 *    bit for bit over every e4m3 value, the midpoints between neighbours
 *    and the floats either side of them, values past 448 and infinities,
 *    the subnormals and underflow, at three scales; K (normed and rotated
 *    on the GPU, the CPU's float32 arithmetic differing by an ulp or two)
 *    must be the nearest e4m3 of the CPU's value, or its other neighbour
 *    where that value sits within float noise of the midpoint; q stays
 *    bf16; slots not written keep their poison.
 *  - Decode attention over an fp8 cache against a float64 softmax over the
 *    dequantized cache (e4m3 * scale): only the float32 arithmetic and the
 *    bf16 rounding of the output remain, so the bound is tight (2^-8
 *    relative plus 2e-4, plus 2^-10 of max |v| for the tensor-core kernel's
 *    f16 P on sm_89 and newer, 2^-8 for the bf16 cache's bf16 P where it
 *    compares with it; the FMA kernel on its own under
 *    NANOVLLM_CUDA_LEGACY=fp8decode); every head group (1, 2, 4, 5, 8, 16: 16 values a
 *    lane up to two heads a block, 8 beyond), head_dim 64/128/256, lengths
 *    at the pass and split edges, 1 to 64 splits, each launched twice (the
 *    split counters must come back to zero). At scale 1 also against the
 *    bf16 kernel on a bf16 cache holding the same values: the same result
 *    up to summation order.
 *  - Prefill attention (the WMMA kernel and the flash one) over an fp8
 *    cache against the same float64 reference, at the bf16 prefill tests'
 *    tolerances (P is rounded to bf16 there).
 *  - The runner on the tiny fixture with an fp8 cache against the CUDA
 *    runner with a bf16 cache, teacher-forced on the golden prompts and
 *    their greedy tokens (prefill, then decode steps replayed from CUDA
 *    graphs), and against itself without graphs.
 *
 * The runner bounds are NOT measured on a GPU (none was available when
 * this was written) and must be re-measured on one. They come from
 * scripts/kv_fp8_emulate.py, the float64 forward with K and V rounded as
 * each cache holds them: e4m3 against bf16 moves the tiny model's logits by
 * 2.4e-2 to 5.4e-2 (relative L2 per prompt), 0.127 at the worst position,
 * and changes the argmax at bf16 top-1/top-2 margins of up to 1.05 (3 mantissa
 * bits; the random tiny model is harsher than a trained one). The GPU adds
 * its own bf16 noise (~1e-2 against float64), so: 0.10 per prompt, 0.25 per
 * position, and greedy tokens must agree where the bf16 cache's margin is
 * at least 2.0. (A margin of 0.3 would not hold: the emulation flips at
 * 0.37, 0.47, 0.61, 0.64, 0.94 and 1.05.) A wrong scale or a misread byte
 * moves the logits by O(1).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_ops.h"
#include "cuda/cuda_kv_fp8.h"
#include "cuda/cuda_runner.h"
#include "cuda_test.h"
#include "helpers.h"
#include "model/weight_format.h"

#define VOCAB 151936

static float e4m3(uint8_t b) { return fp8_e4m3_to_float(b); }

/* ---- the store ------------------------------------------------------------------------------- */

/* The values the store must encode exactly: every e4m3 value, each
 * midpoint and the floats beside it, both signs; saturation, infinities,
 * subnormals, underflow, zeros. */
static size_t edge_values(float *out, size_t cap) {
    size_t n = 0;
    for (int b = 0; b < 0x7e; b++) {
        const float lo = e4m3((uint8_t)b), hi = e4m3((uint8_t)(b + 1)), mid = (lo + hi) / 2;
        const float xs[] = {lo, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY), -mid, -hi};
        for (size_t i = 0; i < sizeof xs / sizeof xs[0] && n < cap; i++) out[n++] = xs[i];
    }
    const float named[] = {448.0f,        449.0f,         463.99f,         464.0f,         464.01f,
                           465.0f,        480.0f,         1e4f,            1e30f,          INFINITY,
                           -INFINITY,     -500.0f,        ldexpf(1, -9),   ldexpf(1, -10), ldexpf(3, -11),
                           ldexpf(1, -11), ldexpf(5, -12), ldexpf(1, -126), ldexpf(1, -140), 0.0f,
                           -0.0f,         -ldexpf(1, -10)};
    for (size_t i = 0; i < sizeof named / sizeof named[0] && n < cap; i++) out[n++] = named[i];
    return n;
}

/* n tokens' q/k/v heads into a poisoned fp8 cache of S slots; V heads hold
 * the edge values (all of them from 2 KV heads of 128 up; the smaller
 * shapes take the first ones), then random values over many binades; q and
 * k random. */
static void store_case(int nh, int nkv, int D, float k_scale, float v_scale) {
    static const int32_t positions[9] = {0, 1, 17, 255, 256, 1000, 4095, 4999, 3};
    static const int32_t slots[9] = {5, 63, 0, 17, 33, 2, 40, 12, 50};
    const int n = 9, S = 64, max_pos = 5000, width = (nh + 2 * nkv) * D;
    float *qkv = random_floats((size_t)n * width, 2.0f, 300 + (uint64_t)D);
    float edges[1024];
    const size_t num_edges = edge_values(edges, 1024);
    uint64_t seed = 301;
    size_t at = 0;
    for (int t = 0; t < n; t++)
        for (int h = nh + nkv; h < nh + 2 * nkv; h++)
            for (int e = 0; e < D; e++, at++) {
                float x;
                if (at < num_edges) {
                    x = edges[at] * v_scale; /* x / v_scale near the edge itself */
                } else {
                    const float u = test_uniform(&seed);
                    x = ldexpf(u, (int)((test_uniform(&seed) + 1.0f) * 14.0f) - 18); /* 2^-18 .. 2^10 */
                }
                qkv[(size_t)t * width + (size_t)h * D + e] = x;
            }
    float *qn = random_floats((size_t)D, 0.3f, 302), *kn = random_floats((size_t)D, 0.3f, 303);
    for (int i = 0; i < D; i++) qn[i] += 1.0f, kn[i] += 1.0f;
    double *inv_freq = malloc(sizeof(double) * D / 2);
    float *rope = malloc(sizeof(float) * (size_t)max_pos * D);
    cr_assert(inv_freq && rope);
    rope_inv_freq(inv_freq, D, 1e6);
    for (int p = 0; p < max_pos; p++) rope_cos_sin(rope + (size_t)p * D, p, inv_freq, D / 2);

    const size_t cache = (size_t)S * nkv * D;
    float *d_qkv = dev_copy(qkv, sizeof(float) * n * width);
    float *d_qn = dev_copy(qn, sizeof(float) * D), *d_kn = dev_copy(kn, sizeof(float) * D);
    float *d_rope = dev_copy(rope, sizeof(float) * (size_t)max_pos * D);
    int32_t *d_pos = dev_copy(positions, sizeof positions), *d_slots = dev_copy(slots, sizeof slots);
    uint16_t *d_q = dev_poisoned(sizeof(uint16_t) * n * nh * D);
    uint8_t *d_k = dev_poisoned(cache), *d_v = dev_poisoned(cache);
    Error err = {0};
    cr_assert(cuda_qk_norm_rope_store_fp8(d_q, d_k, d_v, d_qkv, d_qn, d_kn, d_rope, d_pos, d_slots, n, nh, nkv, D,
                                          1e-6f, k_scale, v_scale, NULL, &err) == 0,
              "%s", err.msg);
    uint16_t *q = malloc(sizeof(uint16_t) * n * nh * D);
    uint8_t *k = malloc(cache), *v = malloc(cache);
    cr_assert(q && k && v);
    dev_fetch(q, d_q, sizeof(uint16_t) * n * nh * D);
    dev_fetch(k, d_k, cache);
    dev_fetch(v, d_v, cache);

    float *head = malloc(sizeof(float) * D);
    bool *written = calloc((size_t)S, sizeof(bool));
    cr_assert(head && written);
    int k_exact = 0, k_total = 0;
    for (int t = 0; t < n; t++) {
        const float *row = qkv + (size_t)t * width, *cs = rope + (size_t)positions[t] * D;
        written[slots[t]] = true;
        for (int h = 0; h < nh + 2 * nkv; h++) {
            memcpy(head, row + (size_t)h * D, sizeof(float) * D);
            if (h >= nh + nkv) { /* v: bit for bit */
                const uint8_t *got = v + ((size_t)slots[t] * nkv + h - nh - nkv) * D;
                for (int e = 0; e < D; e++) {
                    const uint8_t want = fp8_e4m3_from_float(head[e] / v_scale);
                    cr_assert_eq(got[e], want, "v scale %g: %.9g / scale stored as 0x%02x, want 0x%02x", v_scale,
                                 head[e], got[e], want);
                }
                continue;
            }
            rmsnorm(head, head, h < nh ? qn : kn, D, 1e-6f);
            rope_apply(head, D, cs);
            if (h < nh) { /* q: bf16, as the bf16 cache's kernel writes it */
                const uint16_t *got = q + ((size_t)t * nh + h) * D;
                for (int e = 0; e < D; e++)
                    cr_assert(fabsf(bf16_to_f32(got[e]) - head[e]) <= fabsf(head[e]) / 128 + 1e-5f,
                              "q[%d]: GPU %g, CPU %g", e, bf16_to_f32(got[e]), head[e]);
                continue;
            }
            const uint8_t *got = k + ((size_t)slots[t] * nkv + h - nh) * D;
            for (int e = 0; e < D; e++, k_total++) {
                const float x = head[e] / k_scale;
                const uint8_t want = fp8_e4m3_from_float(x);
                if (got[e] == want) {
                    k_exact++;
                    continue;
                }
                /* the other neighbour, only if x is within float noise of their midpoint */
                const float dg = fabsf(e4m3(got[e]) - x), dw = fabsf(e4m3(want) - x);
                cr_assert(!isnan(dg) && dg <= dw + 1e-5f * fabsf(x) + 1e-12f,
                          "k scale %g: %.9g stored as 0x%02x (%g), nearest 0x%02x (%g)", k_scale, x, got[e],
                          e4m3(got[e]), want, e4m3(want));
            }
        }
    }
    cr_expect(k_exact >= k_total - k_total / 100, "k: %d of %d bytes exact", k_exact, k_total);
    expect_unwritten_slots(k, v, (size_t)nkv * D, written, S);
    void *dev[] = {d_qkv, d_qn, d_kn, d_rope, d_pos, d_slots, d_q, d_k, d_v};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cuda_free(dev[i]);
    void *host[] = {qkv, qn, kn, inv_freq, rope, q, k, v, head, written};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

Test(cuda_kv_fp8, store_is_fp8_e4m3_from_float, .timeout = 120) {
    require_gpu();
    const float scales[][2] = {{1.0f, 1.0f}, {0.37f, 1.7f}, {2.0f, 0.5f}};
    for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++) {
        store_case(4, 2, 128, scales[i][0], scales[i][1]); /* the tiny model */
        store_case(16, 8, 128, scales[i][0], scales[i][1]); /* Qwen3-0.6B */
        store_case(5, 1, 64, scales[i][0], scales[i][1]);
        store_case(2, 2, 256, scales[i][0], scales[i][1]);
    }
    Error err = {0};
    cr_expect(cuda_qk_norm_rope_store_fp8(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1, 4, 2, 128, 1e-6f,
                                          0.0f, 1.0f, NULL, &err) == -1,
              "a zero scale is refused");
}

/* ---- attention over an fp8 cache ------------------------------------------------------------- */

/* n e4m3 bytes of values over eight binades (subnormals among them), and
 * their dequantized floats e4m3 * scale. */
static uint8_t *random_fp8_cache(size_t n, float amplitude, float scale, uint64_t seed, float **dequantized) {
    uint8_t *b = malloc(n);
    float *f = malloc(sizeof(float) * n);
    cr_assert(b && f);
    for (size_t i = 0; i < n; i++) {
        const float u = test_uniform(&seed);
        const int j = (int)((test_uniform(&seed) + 1.0f) * 4.0f); /* 0 .. 7 */
        b[i] = fp8_e4m3_from_float(ldexpf(amplitude * u, -j));
        f[i] = e4m3(b[i]) * scale;
    }
    *dequantized = f;
    return b;
}

/* The tensor-core kernel's rounding beyond the FMA kernel's, a bound, not
 * a measurement: P in f16 (fp8 cache) or bf16 (bf16 cache), each weight
 * within 2^-11 or 2^-9 of itself (f16's p under 2^-14 within 2^-25), so the
 * output moves by at most that of max |v|; twice it, for the subnormal p of
 * long contexts. q is exact (f16 at the power of two the kernel chooses, or
 * bf16). Zero where the FMA kernel runs. */
static float p_rounding_slack(bool tensor_cores, int p_bits, const float *v, size_t n) {
    if (!tensor_cores) return 0.0f;
    float max_v = 0.0f;
    for (size_t i = 0; i < n; i++) max_v = fmaxf(max_v, fabsf(v[i]));
    return ldexpf(max_v, 1 - p_bits);
}

static void expect_tight(const uint16_t *out, const float *want, size_t n, const char *what, const DecodeCase *c,
                         int splits, float slack) {
    float *got = widen_bf16(out, n);
    for (size_t i = 0; i < n; i++) {
        cr_assert(!isnan(got[i]), "%s: output %zu never written", what, i);
        cr_assert(fabsf(got[i] - want[i]) <= fabsf(want[i]) / 256 + 2e-4f + slack,
                  "%s (%d/%d x %d, %d splits): out[%zu] %.6g vs %.6g", what, c->nh, c->nkv, c->D, splits, i, got[i],
                  want[i]);
    }
    const double rel = rel_error(got, want, n);
    cr_expect(rel < 2e-3, "%s (%d/%d x %d, %d splits): relative error %g", what, c->nh, c->nkv, c->D, splits, rel);
    free(got);
}

static void decode_case(const DecodeCase *dc, uint64_t seed, float k_scale, float v_scale, const int *split_counts,
                        int num_split_counts) {
    const AttnCase case_ = decode_attn_case(dc), *c = &case_;
    const int S = c->num_seqs;
    const size_t cache = (size_t)c->num_blocks * c->block_size * c->nkv * c->D, nq = (size_t)S * c->nh * c->D;
    float *q_f, *k_f, *v_f;
    uint16_t *q = random_bf16(nq, 2.0f, seed, &q_f);
    uint8_t *k = random_fp8_cache(cache, 2.0f, k_scale, seed + 1, &k_f);
    uint8_t *v = random_fp8_cache(cache, 1.0f, v_scale, seed + 2, &v_f);
    int32_t *tables[ATTN_MAX_SEQS], flat[4096];
    CudaAttnSeq seqs[ATTN_MAX_SEQS] = {{0}};
    CudaAttnItem items[ATTN_MAX_SEQS] = {{0}};
    const int at = attention_tables(c, flat, 4096, tables, seqs);
    attention_items(c, 1, items, ATTN_MAX_SEQS);
    float *want = malloc(sizeof(float) * nq);
    uint16_t *out = malloc(sizeof(uint16_t) * nq), *out_bf16 = malloc(sizeof(uint16_t) * nq);
    cr_assert(want && out && out_bf16);
    attention_reference(want, q_f, k_f, v_f, c, tables);
    const float slack = p_rounding_slack(cuda_decode_attention_fp8_tensor_cores(c->D, c->nh / c->nkv), 11, v_f, cache);
    const bool bf16_tc = cuda_decode_attention_bf16_tensor_cores(c->D, c->nh / c->nkv);
    const float slack_bf16 = p_rounding_slack(bf16_tc, 9, v_f, cache);

    uint16_t *d_q = dev_copy(q, nq * 2);
    uint8_t *d_k = dev_copy(k, cache), *d_v = dev_copy(v, cache);
    CudaAttnSeq *d_seqs = dev_copy(seqs, sizeof seqs);
    CudaAttnItem *d_items = dev_copy(items, sizeof items);
    int32_t *d_tables = dev_copy(flat, sizeof(int32_t) * (size_t)(at > 0 ? at : 1));
    const int max_blocks = cuda_decode_attention_blocks(S, c->nh, c->nkv) * 64;
    float *d_split = dev_poisoned(cuda_attention_split_workspace_bytes(c->D, max_blocks));
    int *zeros = calloc((size_t)max_blocks, sizeof(int));
    cr_assert(zeros);
    int *d_counters = dev_copy(zeros, cuda_decode_attention_counters_bytes(max_blocks));
    free(zeros);
    /* at scale 1 the same values in a bf16 cache, for the bf16 kernel */
    const bool unit = k_scale == 1.0f && v_scale == 1.0f;
    uint16_t *d_kb = NULL, *d_vb = NULL;
    if (unit) {
        uint16_t *kb = malloc(cache * 2), *vb = malloc(cache * 2);
        cr_assert(kb && vb);
        for (size_t i = 0; i < cache; i++) kb[i] = f32_to_bf16(k_f[i]), vb[i] = f32_to_bf16(v_f[i]);
        d_kb = dev_copy(kb, cache * 2);
        d_vb = dev_copy(vb, cache * 2);
        free(kb);
        free(vb);
    }
    Error err = {0};
    for (int i = 0; i < num_split_counts; i++) {
        const int splits = split_counts[i];
        for (int launch = 0; launch < 2; launch++) { /* the second finds the counters back at zero */
            uint16_t *d_out = dev_poisoned(nq * 2);
            cr_assert(cuda_decode_attention_fp8(d_out, d_q, d_k, d_v, d_seqs, d_items, S, d_tables, c->nh, c->nkv,
                                                c->D, c->block_size, splits, d_split, d_counters, k_scale, v_scale,
                                                NULL, &err) == 0,
                      "%s", err.msg);
            dev_fetch(out, d_out, nq * 2);
            cuda_free(d_out);
            expect_tight(out, want, nq, launch ? "fp8 decode attention, relaunched" : "fp8 decode attention", dc,
                         splits, slack);
        }
        if (!unit) continue;
        uint16_t *d_out = dev_poisoned(nq * 2);
        cr_assert(cuda_decode_attention(d_out, d_q, d_kb, d_vb, d_seqs, d_items, S, d_tables, c->nh, c->nkv, c->D,
                                        c->block_size, splits, d_split, d_counters, NULL, &err) == 0,
                  "%s", err.msg);
        dev_fetch(out_bf16, d_out, nq * 2);
        cuda_free(d_out);
        for (size_t j = 0; j < nq; j++) { /* out still holds the fp8 kernel's output of this split count */
            const float a = bf16_to_f32(out[j]), b = bf16_to_f32(out_bf16[j]);
            cr_assert(fabsf(a - b) <= fabsf(b) / 128 + 1e-5f + slack + slack_bf16,
                      "%d/%d x %d, %d splits: fp8 %g, bf16 cache %g", c->nh,
                      c->nkv, c->D, splits, a, b);
        }
    }
    void *dev[] = {d_q, d_k, d_v, d_seqs, d_items, d_tables, d_split, d_counters, d_kb, d_vb};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cuda_free(dev[i]);
    void *host[] = {q, k, v, q_f, k_f, v_f, want, out, out_bf16};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

static const int ALL_SPLITS[] = {1, 2, 3, 7, 64};

Test(cuda_kv_fp8, decode_attention_qwen3_0_6b_shape, .timeout = 120) {
    require_gpu();
    /* group 2: 16 values a lane, 4 keys a warp load, 64 keys a pass */
    DecodeCase c = {16, 8, 128, 16, 200, 8, {1, 31, 63, 64, 65, 129, 257, 1000}};
    decode_case(&c, 10, 1.0f, 1.0f, ALL_SPLITS, 5);
    DecodeCase big_blocks = {16, 8, 128, 256, 8, 3, {1, 257, 700}};
    decode_case(&big_blocks, 20, 1.0f, 1.0f, ALL_SPLITS, 5);
    DecodeCase block48 = {16, 8, 128, 48, 80, 3, {1, 97, 1000}}; /* not a power of two: divisions */
    decode_case(&block48, 25, 1.0f, 1.0f, ALL_SPLITS, 5);
}

Test(cuda_kv_fp8, decode_attention_scales, .timeout = 120) {
    require_gpu();
    DecodeCase c = {16, 8, 128, 16, 120, 3, {5, 300, 777}};
    decode_case(&c, 30, 0.5f, 2.0f, ALL_SPLITS, 5);
    decode_case(&c, 31, 0.37f, 1.7f, ALL_SPLITS, 5);
}

Test(cuda_kv_fp8, decode_attention_long_context, .timeout = 120) {
    require_gpu();
    DecodeCase c = {16, 8, 128, 256, 66, 1, {16384}};
    static const int splits[] = {1, 16, 33, 64};
    decode_case(&c, 40, 1.0f, 1.0f, splits, 4);
}

Test(cuda_kv_fp8, decode_attention_every_group_and_head_dim, .timeout = 180) {
    require_gpu();
    DecodeCase g1 = {4, 4, 64, 16, 80, 3, {1, 33, 600}}; /* head_dim 64: 4 lanes a key, 8 keys a load */
    decode_case(&g1, 50, 1.0f, 1.0f, ALL_SPLITS, 5);
    DecodeCase g2d64 = {6, 3, 64, 64, 40, 2, {129, 200}};
    decode_case(&g2d64, 55, 1.0f, 1.0f, ALL_SPLITS, 5);
    DecodeCase g4 = {32, 8, 128, 16, 80, 3, {2, 65, 777}}; /* four heads a block: 8 values a lane */
    decode_case(&g4, 60, 1.0f, 1.0f, ALL_SPLITS, 5);
    DecodeCase g5 = {40, 8, 128, 16, 80, 3, {2, 65, 777}}; /* Qwen3-14B: 5 heads in a block of 8 */
    decode_case(&g5, 65, 1.0f, 1.0f, ALL_SPLITS, 5);
    DecodeCase g8 = {32, 4, 128, 16, 80, 3, {1, 257, 900}}; /* Qwen3-30B-A3B */
    decode_case(&g8, 70, 1.0f, 1.0f, ALL_SPLITS, 5);
    DecodeCase g16 = {64, 4, 128, 32, 40, 2, {31, 1000}}; /* two blocks per KV head */
    decode_case(&g16, 75, 1.0f, 1.0f, ALL_SPLITS, 5);
    DecodeCase d256 = {8, 8, 256, 256, 8, 2, {1, 1000}}; /* 16 lanes a key, 2 keys a load */
    decode_case(&d256, 80, 1.0f, 1.0f, ALL_SPLITS, 5);
    DecodeCase d256g2 = {8, 4, 256, 16, 80, 2, {63, 700}};
    decode_case(&d256g2, 85, 1.0f, 1.0f, ALL_SPLITS, 5);
}

/* NANOVLLM_CUDA_LEGACY=fp8decode keeps the FMA kernel (read once per
 * process: criterion runs each test in its own): the cases above on it,
 * where the other tests run groups of 3 and more on the tensor-core
 * kernel on sm_89 and newer. */
Test(cuda_kv_fp8, decode_attention_fma_kernel, .timeout = 180) {
    require_gpu();
    setenv("NANOVLLM_CUDA_LEGACY", "fp8decode", 1);
    cr_assert(!cuda_decode_attention_fp8_tensor_cores(128, 8), "fp8decode keeps the FMA kernel");
    DecodeCase g2 = {16, 8, 128, 16, 200, 8, {1, 31, 63, 64, 65, 129, 257, 1000}};
    decode_case(&g2, 90, 1.0f, 1.0f, ALL_SPLITS, 5);
    DecodeCase g8 = {32, 4, 128, 16, 80, 3, {1, 257, 900}};
    decode_case(&g8, 91, 0.37f, 1.7f, ALL_SPLITS, 5);
    DecodeCase d64 = {6, 3, 64, 64, 40, 2, {129, 200}};
    decode_case(&d64, 92, 1.0f, 1.0f, ALL_SPLITS, 5);
}

/* Prompt steps: prefill from zero, a chunk over a cached prefix, decodes in
 * the same batch; the WMMA kernel, and the flash kernel where it applies. */
static void prefill_case(const AttnCase *c, uint64_t seed, bool flash) {
    int T = 0;
    for (int s = 0; s < c->num_seqs; s++) T += c->len[s];
    const size_t cache = (size_t)c->num_blocks * c->block_size * c->nkv * c->D, nq = (size_t)T * c->nh * c->D;
    float *q_f, *k_f, *v_f;
    uint16_t *q = random_bf16(nq, 2.0f, seed, &q_f);
    uint8_t *k = random_fp8_cache(cache, 2.0f, 1.0f, seed + 1, &k_f);
    uint8_t *v = random_fp8_cache(cache, 1.0f, 1.0f, seed + 2, &v_f);
    int32_t *tables[ATTN_MAX_SEQS], flat[1024];
    CudaAttnSeq seqs[ATTN_MAX_SEQS] = {{0}};
    const int at = attention_tables(c, flat, 1024, tables, seqs);
    CudaAttnItem items[512];
    const int tile = flash ? cuda_flash_attention_tile_tokens(c->nh, c->nkv) : cuda_attention_tile_tokens(c->nh, c->nkv);
    const int n_items = attention_items(c, tile, items, 512);
    uint16_t *d_q = dev_copy(q, nq * 2);
    uint8_t *d_k = dev_copy(k, cache), *d_v = dev_copy(v, cache);
    CudaAttnSeq *d_seqs = dev_copy(seqs, sizeof seqs);
    CudaAttnItem *d_items = dev_copy(items, sizeof(CudaAttnItem) * n_items);
    int32_t *d_tables = dev_copy(flat, sizeof(int32_t) * (size_t)at);
    uint16_t *d_out = dev_poisoned(nq * 2);
    Error err = {0};
    if (flash)
        cr_assert(cuda_flash_attention_fp8(d_out, d_q, d_k, d_v, d_seqs, d_items, n_items, d_tables, c->nh, c->nkv, c->D,
                                           c->block_size, 1.0f, 1.0f, NULL, &err) == 0,
                  "%s", err.msg);
    else
        cr_assert(cuda_prefill_attention_fp8(d_out, d_q, d_k, d_v, d_seqs, d_items, n_items, d_tables, c->nh, c->nkv,
                                             c->D, c->block_size, 1.0f, 1.0f, NULL, &err) == 0,
                  "%s", err.msg);
    uint16_t *out = malloc(nq * 2);
    float *want = malloc(sizeof(float) * nq);
    cr_assert(out && want);
    dev_fetch(out, d_out, nq * 2);
    attention_reference(want, q_f, k_f, v_f, c, tables);
    float *got = widen_bf16(out, nq);
    for (size_t i = 0; i < nq; i++) {
        cr_assert(!isnan(got[i]), "output %zu was never written", i);
        cr_assert(fabsf(got[i] - want[i]) <= 0.02f + 0.01f * fabsf(want[i]), "%s (%d/%d x %d): out[%zu] %g vs %g",
                  flash ? "flash" : "wmma", c->nh, c->nkv, c->D, i, got[i], want[i]);
    }
    const double rel = rel_error(got, want, nq);
    cr_expect(rel < 5e-3, "fp8 %s prefill (%d/%d heads x %d): relative error %g", flash ? "flash" : "wmma", c->nh,
              c->nkv, c->D, rel);
    void *dev[] = {d_q, d_k, d_v, d_seqs, d_items, d_tables, d_out};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cuda_free(dev[i]);
    void *host[] = {q, k, v, q_f, k_f, v_f, out, want, got};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

Test(cuda_kv_fp8, prefill_attention_wmma_and_flash, .timeout = 180) {
    require_gpu();
    AttnCase tiny = {4, 2, 128, 16, 160, 4, {0, 100, 300, 41}, {37, 20, 1, 1}};
    AttnCase qwen06 = {16, 8, 128, 16, 160, 3, {0, 700, 1500}, {70, 1, 1}};
    AttnCase big_group = {32, 4, 128, 32, 96, 2, {5, 1000}, {33, 3}};
    AttnCase d64 = {6, 2, 64, 64, 40, 2, {0, 200}, {129, 1}};
    AttnCase chunks = {16, 8, 128, 16, 200, 2, {0, 130}, {200, 67}}; /* several key tiles, a partial last one */
    const AttnCase *both[] = {&tiny, &qwen06, &big_group, &d64, &chunks};
    for (size_t i = 0; i < sizeof both / sizeof both[0]; i++) {
        prefill_case(both[i], 500 + 10 * i, false);
        prefill_case(both[i], 500 + 10 * i, true);
    }
    AttnCase d256 = {4, 4, 256, 256, 8, 2, {0, 511}, {19, 1}}; /* the WMMA kernel only */
    prefill_case(&d256, 600, false);
}

/* ---- the runner ------------------------------------------------------------------------------ */

#define PROMPT_REL_TOL 0.10
#define POSITION_REL_TOL 0.25
#define GREEDY_MARGIN 2.0

static Runner *open_cuda(ModelWeights *w, KvCacheDtype kv, bool eager) {
    Error err = {0};
    cr_assert(model_weights_load(w, TINY_MODEL, &err) == 0, "%s", err.msg);
    RunnerOptions o = runner_test_options("cuda", NULL, 16, 256, kv, COMPUTE_BF16, eager);
    Runner *r = cuda_runner_create(w, &o, &err);
    cr_assert(r, "cuda runner: %s", err.msg);
    return r;
}

/* Every position's logits of ids[0..n): the first `prompt` ids as one
 * prefill step, each later one as a decode step (a CUDA graph unless the
 * runner is eager), all through a scattered block table. */
static void teacher_forced(Runner *r, const int32_t *ids, int n, int prompt, float *logits, int salt) {
    int32_t table[32];
    const int nb = (n + 15) / 16;
    cr_assert(nb <= 32);
    for (int i = 0; i < nb; i++) table[i] = (int32_t)(((long)(i + salt) * 37 + 5) % 256);
    Error err = {0};
    int32_t tok;
    RunnerSeq seq = {.tokens = ids, .num_tokens = prompt, .start_pos = 0, .block_table = table, .num_blocks = nb,
                     .compute_logits = true};
    RunnerBatch batch = {.seqs = &seq, .num_seqs = 1, .all_logits = logits};
    cr_assert(runner_step(r, &batch, &tok, &err) == 0, "%s", err.msg);
    for (int p = prompt; p < n; p++) {
        seq = (RunnerSeq){.tokens = ids + p, .num_tokens = 1, .start_pos = p, .block_table = table, .num_blocks = nb,
                          .compute_logits = true};
        batch = (RunnerBatch){.seqs = &seq, .num_seqs = 1, .last_logits = logits + (size_t)p * VOCAB};
        cr_assert(runner_step(r, &batch, &tok, &err) == 0, "%s", err.msg);
    }
}

Test(cuda_kv_fp8, runner_against_the_bf16_cache, .timeout = 300) {
    require_gpu();
    ModelWeights wb, wf, we;
    Runner *bf = open_cuda(&wb, KV_CACHE_BF16, false), *f8 = open_cuda(&wf, KV_CACHE_FP8, false);
    Runner *f8e = open_cuda(&we, KV_CACHE_FP8, true);
    cr_assert(strstr(f8->description, "fp8 e4m3 KV cache") && strstr(bf->description, "bf16 KV cache"), "%s / %s",
              f8->description, bf->description);
    cr_assert(strstr(f8->description, "decode graphs") && !strstr(f8->description, " 0 decode graphs"), "%s",
              f8->description);
    cr_assert_eq(f8->num_kv_blocks, bf->num_kv_blocks);
    cr_assert_eq(f8->kv_cache_bytes * 2, bf->kv_cache_bytes, "one byte a value: half the bytes for the same blocks");
    json_t *g = golden_load();
    json_t *prompts = json_object_get(g, "prompts");
    for (size_t i = 0; i < json_array_size(prompts); i++) {
        json_t *p = json_array_get(prompts, i);
        const char *name = json_string_value(json_object_get(p, "name"));
        int n, steps;
        int32_t *prompt = json_ids(json_object_get(p, "prompt_ids"), &n);
        int32_t *greedy = json_ids(json_object_get(p, "greedy_ids"), &steps);
        const int P = n + steps - 1; /* the prompt, then its greedy tokens but the last */
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)P);
        float *lb = malloc(sizeof(float) * (size_t)P * VOCAB), *lf = malloc(sizeof(float) * (size_t)P * VOCAB);
        float *le = malloc(sizeof(float) * (size_t)P * VOCAB);
        cr_assert(ids && lb && lf && le);
        memcpy(ids, prompt, sizeof(int32_t) * (size_t)n);
        memcpy(ids + n, greedy, sizeof(int32_t) * (size_t)(steps - 1));
        teacher_forced(bf, ids, P, n, lb, (int)i);
        teacher_forced(f8, ids, P, n, lf, (int)i);
        teacher_forced(f8e, ids, P, n, le, (int)i);

        const double rel = rel_error(lf, lb, (size_t)P * VOCAB);
        double worst = 0;
        int worst_at = 0, flips = 0;
        for (int q = 0; q < P; q++) {
            const double e = rel_error(lf + (size_t)q * VOCAB, lb + (size_t)q * VOCAB, VOCAB);
            if (e > worst) worst = e, worst_at = q;
            double margin, unused;
            const int want = argmax_margin(lb + (size_t)q * VOCAB, VOCAB, &margin);
            const int got = argmax_margin(lf + (size_t)q * VOCAB, VOCAB, &unused);
            if (got != want) {
                flips++;
                cr_log_info("%s position %d: fp8 argmax %d, bf16 %d at bf16 margin %.3f", name, q, got, want, margin);
                cr_expect(margin < GREEDY_MARGIN, "%s position %d: the fp8 cache changes the argmax (%d, not %d) at a "
                          "bf16 margin of %.3f", name, q, got, want, margin);
            }
        }
        const double graphs = rel_error(lf + (size_t)n * VOCAB, le + (size_t)n * VOCAB, (size_t)(P - n) * VOCAB);
        cr_log_info("%s: %d positions, fp8 vs bf16 cache: relative L2 %.3e, worst position %d at %.3e, %d argmax "
                    "changes; decode graphs vs eager %.2e",
                    name, P, rel, worst_at, worst, flips, graphs);
        cr_expect(rel <= PROMPT_REL_TOL, "%s: fp8 vs bf16 cache logits relative error %g", name, rel);
        cr_expect(worst <= POSITION_REL_TOL, "%s: position %d's logits relative error %g", name, worst_at, worst);
        cr_expect(graphs <= 1e-3, "%s: fp8 decode graphs vs eager steps relative error %g", name, graphs);
        free(prompt);
        free(greedy);
        free(ids);
        free(lb);
        free(lf);
        free(le);
    }
    json_decref(g);
    runner_destroy(bf);
    runner_destroy(f8);
    runner_destroy(f8e);
    model_weights_free(&wb);
    model_weights_free(&wf);
    model_weights_free(&we);
}

/* Arithmetic: runs without a GPU. */
Test(cuda_kv_fp8, block_bytes_halve) {
    ModelConfig c = {0};
    c.num_layers = 28, c.num_kv_heads = 8, c.head_dim = 128;
    cr_assert_eq(cuda_runner_block_bytes(&c, 256, KV_CACHE_FP8), (size_t)28 * 256 * 8 * 128 * 2);
    cr_assert_eq(cuda_runner_block_bytes(&c, 256, KV_CACHE_BF16), 2 * cuda_runner_block_bytes(&c, 256, KV_CACHE_FP8));
    cr_assert_eq(cuda_runner_block_bytes(&c, 16, KV_CACHE_AUTO), cuda_runner_block_bytes(&c, 16, KV_CACHE_BF16));
}
