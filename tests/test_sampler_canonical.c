/*
 * test_sampler_canonical.c - the sampler's exact arithmetic (sampler_math.h)
 * and semantics (sampler.h): the exp against libm, the canonical total
 * against a long double sum, the tree's layout, top-p's tie rule, the draw's
 * distribution, and sampler_sample() token for token against a reference
 * written straight from sampler.h's definition (dense arrays, a full sort,
 * every total recomputed) on every ISA level the CPU has.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler_cases.h"
#include "base/cpu_isa.h"
#include "engine/philox.h"
#include "engine/sampler.h"
#include "engine/sampler_math.h"

static int64_t ulps_apart(float a, float b) { /* both >= 0 */
    int64_t x = sm_float_bits(a), y = sm_float_bits(b);
    return x > y ? x - y : y - x;
}

Test(sampler_math, exp_accuracy) {
    int64_t worst = 0, worst_libm = 0;
    float worst_at = 0.0f;
    /* every 61st float from -0 down to the cut-off (an exhaustive run found
     * the same maximum, 1 ulp) */
    for (uint32_t b = 0x80000000u; b < 0xC3000000u; b += 61) {
        float x = sm_bits_float(b), y = sm_exp(x);
        if (x < SM_EXP_MIN_X) break;
        cr_assert(y >= FLT_MIN, "sm_exp(%a) = %a is not a normal float", x, y);
        int64_t d = ulps_apart(y, (float)exp((double)x));
        if (d > worst) worst = d, worst_at = x;
        d = ulps_apart(y, expf(x));
        if (d > worst_libm) worst_libm = d;
    }
    cr_expect(worst <= 1, "%lld ulp from the correctly rounded e^x at %a", (long long)worst, worst_at);
    cr_expect(worst_libm <= 2, "%lld ulp from expf", (long long)worst_libm);
    for (float x = 0.001f; x < 88.0f; x *= 1.01f)
        cr_expect(ulps_apart(sm_exp(x), (float)exp((double)x)) <= 1, "positive x %g", x);
    cr_expect(sm_exp(0.0f) == 1.0f && sm_exp(-0.0f) == 1.0f, "the top token's probability is exactly 1");
    cr_expect(sm_exp(nextafterf(SM_EXP_MIN_X, -INFINITY)) == 0.0f);
    cr_expect(sm_exp(-INFINITY) == 0.0f && sm_exp(-1e30f) == 0.0f);
    cr_expect(isnan(sm_exp(NAN)));
}

/* Pairwise sum of leaves [a, a + len), by recursion: the tree's definition. */
static double pairwise(const double *leaf, int a, int len) {
    if (len == 1) return leaf[a];
    return SM_DADD(pairwise(leaf, a, len / 2), pairwise(leaf, a + len / 2, len / 2));
}

Test(sampler_math, tree_total_and_layout) {
    const int sizes[] = {1, 7, 63, 64, 65, 129, 1000, 4097, 151936};
    uint64_t st = 7;
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        int n = sizes[k], leaves = sm_tree_leaves(n), chunks = sm_num_chunks(n);
        float *p = malloc(sizeof(float) * (size_t)n);
        double *leaf = malloc(sizeof(double) * (size_t)leaves), *tree = malloc(sizeof(double) * (size_t)leaves);
        cr_assert(p && leaf && tree);
        long double exact = 0;
        for (int i = 0; i < n; i++) {
            double u = case_uniform(&st);
            p[i] = u < 0.3 ? 0.0f : (float)(u < 0.6 ? u * 1e-6 : u);
            exact += p[i];
        }
        for (int c = 0; c < leaves; c++)
            leaf[c] = c < chunks ? sm_chunk_sum(p + c * SM_CHUNK, n - c * SM_CHUNK < SM_CHUNK ? n - c * SM_CHUNK : SM_CHUNK, 0.0f) : 0.0;
        memcpy(tree, leaf, sizeof(double) * (size_t)leaves);
        sm_tree_upsweep(tree, leaves);
        double total = tree[leaves - 1];
        cr_expect(fabsl(total - exact) <= 40 * DBL_EPSILON * exact, "n %d: %.17g vs %.17Lg", n, total, exact);
        cr_expect(total == pairwise(leaf, 0, leaves), "n %d: the up-sweep is the pairwise tree", n);
        /* every node's left half is where the walk reads it */
        for (int s = 1; s < leaves; s *= 2)
            for (int a = 0; a < leaves; a += 2 * s)
                cr_assert(tree[a + s - 1] == pairwise(leaf, a, s), "n %d: node [%d, %d)", n, a, a + 2 * s);
        free(p);
        free(leaf);
        free(tree);
    }
}

Test(sampler_math, chunk_walk_and_descent) {
    float p[5] = {0.25f, 0.0f, 0.5f, 0.25f, 0.0f};
    cr_expect_eq(sm_chunk_walk(p, 5, 0.0), 0);
    cr_expect_eq(sm_chunk_walk(p, 5, 0.25), 2, "a zero-probability token is never chosen");
    cr_expect_eq(sm_chunk_walk(p, 5, 0.9999), 3);
    cr_expect_eq(sm_chunk_walk(p, 5, 1.0), -1, "a target at the total is carried past the chunk");
    double tree[4] = {1.0, 2.0, 0.0, 4.0}; /* leaves 1, 2, 0, 4 */
    sm_tree_upsweep(tree, 4);
    cr_expect(tree[3] == 7.0 && tree[1] == 3.0 && tree[0] == 1.0 && tree[2] == 0.0);
    double t = 2.5;
    cr_expect_eq(sm_tree_descend(tree, 4, &t), 1);
    cr_expect(t == 1.5);
    t = 3.0;
    cr_expect_eq(sm_tree_descend(tree, 4, &t), 3, "an empty leaf is stepped over");
    cr_expect(t == 0.0);
}

/* ---- the reference: sampler.h's steps, the slow and obvious way ---------------- */

static const float *rank_of;
static int by_rank(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (rank_of[x] != rank_of[y]) return rank_of[x] > rank_of[y] ? -1 : 1;
    return (x > y) - (x < y);
}

static int by_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

static double ref_total(const float *q, int vocab, float v, double *leaf) {
    int leaves = sm_tree_leaves(vocab);
    for (int c = 0; c < leaves; c++) {
        int base = c * SM_CHUNK;
        leaf[c] = base < vocab ? sm_chunk_sum(q + base, vocab - base < SM_CHUNK ? vocab - base : SM_CHUNK, v) : 0.0;
    }
    return pairwise(leaf, 0, leaves);
}

static int32_t reference_sample(const float *logits, int vocab, const SampleInput *in) {
    const SamplingParams *sp = in->params;
    int leaves = sm_tree_leaves(vocab);
    float *l = malloc(sizeof(float) * (size_t)vocab), *q = malloc(sizeof(float) * (size_t)vocab);
    float *vals = malloc(sizeof(float) * (size_t)vocab);
    int32_t *order = malloc(sizeof(int32_t) * (size_t)vocab);
    double *leaf = malloc(sizeof(double) * (size_t)leaves);
    cr_assert(l && q && vals && order && leaf);
    memcpy(l, logits, sizeof(float) * (size_t)vocab);
    int32_t token = 0;

    /* 0. logit_bias (no mask here) */
    for (int i = 0; i < sp->num_logit_bias; i++)
        l[sp->logit_bias[i].token] = SM_FADD(l[sp->logit_bias[i].token], sp->logit_bias[i].bias);

    /* 1. penalties */
    bool rep = sp->repetition_penalty != 1.0f;
    bool freq = sp->presence_penalty != 0.0f || sp->frequency_penalty != 0.0f;
    for (int t = 0; t < vocab && (rep || freq); t++) {
        bool seen = false;
        int count = 0;
        for (int i = 0; i < in->prompt_len; i++) seen |= in->prompt[i] == t;
        for (int i = 0; i < in->output_len; i++) count += in->output[i] == t;
        if (rep && (seen || count > 0)) l[t] = sm_repetition(l[t], sp->repetition_penalty);
        if (freq && count > 0)
            l[t] = sm_frequency_presence(l[t], count, sp->frequency_penalty, sp->presence_penalty);
    }
    if (sp->temperature < 1e-5f) {
        for (int i = 1; i < vocab; i++)
            if (l[i] > l[token]) token = i;
        goto done;
    }
    /* 2. probabilities */
    float inv_t = SM_FDIV(1.0f, sp->temperature), mx = l[0];
    for (int i = 1; i < vocab; i++) mx = l[i] > mx ? l[i] : mx;
    mx = SM_FMUL(mx, inv_t);
    for (int i = 0; i < vocab; i++) q[i] = sm_prob(l[i], inv_t, mx);
    /* 3. min-p, top-k */
    int n = vocab;
    if (sp->min_p > 0.0f) {
        n = 0;
        for (int i = 0; i < vocab; i++) {
            if (q[i] >= sp->min_p) n++;
            else q[i] = 0.0f;
        }
    }
    if (sp->top_k > 0 && sp->top_k < n) {
        for (int i = 0; i < vocab; i++) order[i] = i;
        rank_of = q;
        qsort(order, (size_t)vocab, sizeof *order, by_rank);
        for (int j = sp->top_k; j < vocab; j++) q[order[j]] = 0.0f;
    }
    /* 4. top-p: the largest kept value whose tokens reach the target */
    if (sp->top_p < 1.0f) {
        double target = sm_top_p_target(sp->top_p, ref_total(q, vocab, 0.0f, leaf));
        if (target > 0.0) {
            int d = 0;
            memcpy(vals, q, sizeof(float) * (size_t)vocab);
            qsort(vals, (size_t)vocab, sizeof *vals, by_desc);
            for (int i = 0; i < vocab; i++)
                if (d == 0 || vals[i] != vals[d - 1]) vals[d++] = vals[i];
            int lo = 0, hi = d - 1; /* total only grows down the values */
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (ref_total(q, vocab, vals[mid], leaf) >= target) hi = mid;
                else lo = mid + 1;
            }
            if (vocab <= 300) /* a linear scan agrees where it is cheap */
                for (int j = 0; j < d; j++)
                    if (ref_total(q, vocab, vals[j], leaf) >= target) {
                        cr_assert_eq(j, lo, "total is monotone");
                        break;
                    }
            for (int i = 0; i < vocab; i++) q[i] = sm_at_least(q[i], vals[lo]);
        }
    }
    /* 5. the draw */
    double total = ref_total(q, vocab, 0.0f, leaf);
    double target = SM_DMUL(philox_uniform(in->seed, in->sample_index, in->position), total);
    int a = 0;
    for (int len = leaves; len > 1; len /= 2) {
        double left = pairwise(leaf, a, len / 2);
        if (!(target < left)) target = SM_DSUB(target, left), a += len / 2;
    }
    int base = a * SM_CHUNK, end = vocab - base < SM_CHUNK ? vocab : base + SM_CHUNK;
    double cum = 0.0;
    for (int i = base; i < end; i++) {
        cum = SM_DADD(cum, (double)q[i]);
        if (target < cum) {
            token = i;
            goto done;
        }
    }
    for (int i = end - 1; i >= 0; i--)
        if (q[i] > 0.0f) {
            token = i;
            goto done;
        }
done:
    free(l);
    free(q);
    free(vals);
    free(order);
    free(leaf);
    return token;
}

/* Every row kind x parameter set x seed on one vocabulary size; with_bias:
 * every set also carries logit_bias entries (case_logit_bias). */
static void expect_reference(int vocab, int seeds, const int *kinds, int num_kinds, bool with_bias) {
    SamplingParams params[64];
    int num_params = case_params(params, 64);
    SamplerScratch s;
    Error err;
    cr_assert(sampler_scratch_init(&s, vocab, &err) == 0);
    float *row = malloc(sizeof(float) * (size_t)vocab), *mine = malloc(sizeof(float) * (size_t)vocab);
    int32_t prompt[24], output[12];
    cr_assert(row && mine);
    for (int seed = 0; seed < seeds; seed++)
        for (int k = 0; k < num_kinds; k++) {
            case_logits(row, vocab, kinds[k], (uint64_t)(seed * 131 + vocab));
            case_history(prompt, 24, output, 12, vocab, (uint64_t)seed);
            for (int j = 0; j < num_params; j++) {
                if (with_bias) case_logit_bias(&params[j], row, vocab, (uint64_t)(seed * 64 + j));
                SampleInput in = {.params = &params[j], .seed = 1000u + (uint64_t)seed * 7919u,
                                  .sample_index = (uint32_t)(j % 3), .position = (uint32_t)(seed * 97 + j),
                                  .prompt = prompt, .prompt_len = 24, .output = output, .output_len = 12};
                memcpy(mine, row, sizeof(float) * (size_t)vocab);
                int32_t got = sampler_sample(mine, &in, &s, NULL);
                int32_t want = reference_sample(row, vocab, &in);
                cr_expect_eq(got, want, "vocab %d, row kind %d, params %d, seed %d: %d, reference %d",
                             vocab, kinds[k], j, seed, got, want);
            }
        }
    free(row);
    free(mine);
    sampler_scratch_free(&s);
}

static const int all_kinds[NUM_ROW_KINDS] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};

Test(sampler_canonical, matches_reference_small_vocabularies) {
    const int sizes[] = {1, 2, 7, 64, 65, 300, 1000};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        expect_reference(sizes[i], 3, all_kinds, NUM_ROW_KINDS, false);
}

Test(sampler_canonical, matches_reference_large_vocabularies, .timeout = 120) {
    expect_reference(4099, 1, all_kinds, NUM_ROW_KINDS, false);
    const int kinds[] = {0, 1, 3, 5, 9};
    expect_reference(151936, 1, kinds, 5, false);
}

/* logit_bias is step 0: the reference adds each bias to its logit first. */
Test(sampler_canonical, matches_reference_with_logit_bias, .timeout = 120) {
    const int sizes[] = {1, 2, 7, 65, 1000, 4099};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        expect_reference(sizes[i], 2, all_kinds, NUM_ROW_KINDS, true);
    const int kinds[] = {0, 3};
    expect_reference(151936, 1, kinds, 2, true);
}

/* ---- top-p ties, the draw's distribution, determinism ---------------------------- */

/* Frequencies of draws at consecutive positions from fixed logits. */
static void frequencies(const float *logits, int vocab, const SamplingParams *p, int draws, double *freq) {
    SamplerScratch s;
    Error err;
    cr_assert(sampler_scratch_init(&s, vocab, &err) == 0);
    float *row = malloc(sizeof(float) * (size_t)vocab);
    cr_assert(row);
    memset(freq, 0, sizeof(double) * (size_t)vocab);
    for (int pos = 0; pos < draws; pos++) {
        memcpy(row, logits, sizeof(float) * (size_t)vocab);
        SampleInput in = {.params = p, .seed = 77, .position = (uint32_t)pos};
        freq[sampler_sample(row, &in, &s, NULL)] += 1.0 / draws;
    }
    free(row);
    sampler_scratch_free(&s);
}

Test(sampler_canonical, top_p_keeps_every_tie) {
    SamplingParams p = sampling_params_default();
    p.temperature = 1.0f;
    double f[4];
    float equal[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    p.top_p = 0.3f; /* sort-and-cut would keep two of the four */
    frequencies(equal, 4, &p, 20000, f);
    for (int i = 0; i < 4; i++) cr_expect(fabs(f[i] - 0.25) < 0.02, "token %d at %.3f", i, f[i]);

    /* probabilities 1/2, 1/4, 1/8, 1/8 */
    float dyadic[4] = {(float)log(0.5), (float)log(0.25), (float)log(0.125), (float)log(0.125)};
    p.top_p = 0.8f; /* sort-and-cut stops at 0.875 and drops the fourth; the tie keeps it */
    frequencies(dyadic, 4, &p, 20000, f);
    cr_expect(f[3] > 0.1 && fabs(f[2] - f[3]) < 0.02, "tied tokens: %.3f and %.3f", f[2], f[3]);
    p.top_p = 0.75f; /* exactly reached by the first two */
    frequencies(dyadic, 4, &p, 20000, f);
    cr_expect(f[2] == 0.0 && f[3] == 0.0 && fabs(f[0] - 2.0 / 3) < 0.02, "%.3f %.3f %.3f", f[0], f[1], f[2]);
}

Test(sampler_canonical, draw_distribution_chi_square) {
    enum { V = 10, DRAWS = 200000 };
    float logits[V], p[V];
    uint64_t st = 3;
    for (int i = 0; i < V; i++) logits[i] = (float)case_gauss(&st);
    SamplingParams sp = sampling_params_default();
    sp.temperature = 1.0f;
    double f[V], total = 0, chi2 = 0;
    frequencies(logits, V, &sp, DRAWS, f);
    float mx = logits[0];
    for (int i = 1; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int i = 0; i < V; i++) total += p[i] = sm_prob(logits[i], 1.0f, mx);
    for (int i = 0; i < V; i++) {
        double expected = DRAWS * p[i] / total, observed = DRAWS * f[i];
        chi2 += (observed - expected) * (observed - expected) / expected;
    }
    cr_expect(chi2 < 33.7, "chi-square %.1f with 9 degrees of freedom (p < 1e-4 above 33.7)", chi2);
}

/* The same token, and the same probabilities left in the row, from repeated
 * calls and from every ISA level's vectorized passes. */
Test(sampler_canonical, deterministic_across_calls_and_isa) {
    enum { V = 151936 };
    SamplingParams params[64];
    int num_params = case_params(params, 64);
    CpuIsa levels[] = {CPU_ISA_SCALAR, CPU_ISA_AVX2, CPU_ISA_AVX512}, best = cpu_isa_active();
    SamplerScratch s;
    Error err;
    cr_assert(sampler_scratch_init(&s, V, &err) == 0);
    float *base = malloc(sizeof(float) * V), *row = malloc(sizeof(float) * V), *first = malloc(sizeof(float) * V);
    cr_assert(base && row && first);
    for (int kind = 0; kind < NUM_ROW_KINDS; kind += 4) {
        case_logits(base, V, kind, 5);
        for (int j = 1; j < num_params; j += 3) {
            SampleInput in = {.params = &params[j], .seed = 99, .position = (uint32_t)j};
            int32_t want = -1;
            for (size_t lv = 0; lv < sizeof levels / sizeof *levels; lv++) {
                if (cpu_isa_set(levels[lv])) continue; /* this CPU lacks it */
                for (int rep = 0; rep < 2; rep++) {
                    memcpy(row, base, sizeof(float) * V);
                    int32_t t = sampler_sample(row, &in, &s, NULL);
                    if (want < 0) {
                        want = t;
                        memcpy(first, row, sizeof(float) * V);
                    }
                    cr_expect_eq(t, want, "kind %d params %d isa %s", kind, j, cpu_isa_name(levels[lv]));
                    cr_expect(memcmp(row, first, sizeof(float) * V) == 0, "probabilities differ (%s)",
                              cpu_isa_name(levels[lv]));
                }
            }
        }
    }
    cpu_isa_set(best);
    free(base);
    free(row);
    free(first);
    sampler_scratch_free(&s);
}
