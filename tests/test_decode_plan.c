/*
 * test_decode_plan.c - the decode attention kernel's division of work
 * (cuda/cuda_decode_plan.h) checked on the CPU, so it holds on machines
 * without a GPU: every key of a sequence is read exactly once whatever the
 * length and split count, and attention computed the way the kernel walks
 * the keys (per lane subgroup an online softmax in base 2, then subgroups,
 * warps and splits merged by rescaling to the larger max) equals the plain
 * softmax over the keys.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda/cuda_decode_plan.h"

static const int LENGTHS[] = {1, 2, 31, 32, 33, 63, 64, 65, 255, 256, 257, 1000, 16384};
static const int SPLITS[] = {1, 2, 3, 7, 16, 33, 64};
static const int HEAD_DIMS[] = {64, 128, 256};
static const int GROUPS[] = {1, 2, 5, 8, 16};

/* A running softmax state: max (base 2), sum, weighted value sum (one dim). */
typedef struct State {
    double m, l, o;
} State;

static void fold(State *s, double score, double v) {
    double m = fmax(s->m, score);
    double a = s->m == -INFINITY ? 0 : exp2(s->m - m), p = exp2(score - m);
    s->l = s->l * a + p;
    s->o = s->o * a + p * v;
    s->m = m;
}

static void merge(State *s, State t) {
    double m = fmax(s->m, t.m);
    if (m == -INFINITY) return;
    double a = s->m == -INFINITY ? 0 : exp2(s->m - m), b = t.m == -INFINITY ? 0 : exp2(t.m - m);
    s->l = s->l * a + t.l * b;
    s->o = s->o * a + t.o * b;
    s->m = m;
}

Test(decode_plan, heads_per_block_cover_every_group) {
    for (size_t i = 0; i < sizeof GROUPS / sizeof GROUPS[0]; i++) {
        int g = GROUPS[i], hb = decode_heads_per_block(g);
        cr_assert(hb >= 1 && hb <= DECODE_MAX_HEADS_PER_BLOCK && (hb & (hb - 1)) == 0, "group %d: %d", g, hb);
        cr_assert(hb >= g || hb == DECODE_MAX_HEADS_PER_BLOCK, "group %d fits %d heads per block", g, hb);
        int chunks = (g + hb - 1) / hb;
        cr_assert((chunks - 1) * hb < g, "group %d: no empty block", g);
    }
}

/* Every key of [0, num_keys) read once, by a split that has keys, and only
 * by blocks whose range holds it. */
Test(decode_plan, every_key_once_at_any_length_and_split_count) {
    for (size_t li = 0; li < sizeof LENGTHS / sizeof LENGTHS[0]; li++) {
        const int n = LENGTHS[li];
        int *seen = calloc((size_t)n, sizeof(int));
        cr_assert(seen);
        for (size_t si = 0; si < sizeof SPLITS / sizeof SPLITS[0]; si++)
            for (size_t di = 0; di < sizeof HEAD_DIMS / sizeof HEAD_DIMS[0]; di++) {
                    const int splits = SPLITS[si], D = HEAD_DIMS[di];
                    const int per = decode_split_keys(n, splits), used = decode_splits_used(n, splits);
                    const int kpl = decode_keys_per_load(D), T = decode_keys_per_lane();
                    const int pass = decode_keys_per_pass(D);
                    cr_assert(used >= 1 && used <= splits, "%d keys, %d splits: %d used", n, splits, used);
                    cr_assert(per >= DECODE_MIN_SPLIT_KEYS && per % DECODE_SPLIT_ALIGN == 0);
                    cr_assert((used - 1) * per < n, "%d keys, %d splits: the last used split has keys", n, splits);
                    cr_assert_eq(pass, DECODE_WARPS * kpl * T);
                    for (int k = 0; k < n; k++) seen[k] = 0;
                    for (int z = 0; z < used; z++) {
                        int begin = z * per, end = begin + per < n ? begin + per : n;
                        for (int p0 = begin; p0 < end; p0 += pass)
                            for (int t = 0; t < T; t++)
                                for (int w = 0; w < DECODE_WARPS; w++)
                                    for (int sub = 0; sub < kpl; sub++) {
                                        int key = decode_key(p0, t, w, sub, kpl);
                                        cr_assert(key >= p0 && key < p0 + pass, "key %d outside its pass", key);
                                        if (key < end) seen[key]++;
                                    }
                    }
                    for (int k = 0; k < n; k++)
                        cr_assert_eq(seen[k], 1, "%d keys, %d splits, D %d: key %d read %d times", n, splits, D,
                                     k, seen[k]);
                }
        free(seen);
    }
}

/* The kernel's order of folding and merging gives the plain softmax. */
Test(decode_plan, split_merge_equals_plain_softmax) {
    const int D = 128, kpl = decode_keys_per_load(D), T = decode_keys_per_lane();
    const int pass = decode_keys_per_pass(D);
    for (size_t li = 0; li < sizeof LENGTHS / sizeof LENGTHS[0]; li++) {
        const int n = LENGTHS[li];
        double *score = malloc(sizeof(double) * n), *v = malloc(sizeof(double) * n);
        cr_assert(score && v);
        uint64_t x = 0x9e3779b97f4a7c15ull + (uint64_t)n;
        for (int k = 0; k < n; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            score[k] = (double)(x >> 40) / (1 << 24) * 24 - 12; /* base-2 scores in [-12, 12) */
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            v[k] = (double)(x >> 40) / (1 << 24) * 2 - 1;
        }
        double mx = -INFINITY, sum = 0, want = 0;
        for (int k = 0; k < n; k++) mx = fmax(mx, score[k]);
        for (int k = 0; k < n; k++) {
            sum += exp2(score[k] - mx);
            want += exp2(score[k] - mx) * v[k];
        }
        want /= sum;
        for (size_t si = 0; si < sizeof SPLITS / sizeof SPLITS[0]; si++) {
            const int splits = SPLITS[si], per = decode_split_keys(n, splits), used = decode_splits_used(n, splits);
            State total = {-INFINITY, 0, 0};
            for (int z = used - 1; z >= 0; z--) { /* the last block may be any: merge in reverse */
                int begin = z * per, end = begin + per < n ? begin + per : n;
                State block = {-INFINITY, 0, 0};
                for (int w = 0; w < DECODE_WARPS; w++) {
                    State lanes[32 / 8]; /* kpl subgroups at most (D 64: 4) */
                    for (int sub = 0; sub < kpl; sub++) lanes[sub] = (State){-INFINITY, 0, 0};
                    for (int p0 = begin; p0 < end; p0 += pass)
                        for (int sub = 0; sub < kpl; sub++)
                            for (int t = 0; t < T; t++) {
                                int key = decode_key(p0, t, w, sub, kpl);
                                if (key < end) fold(&lanes[sub], score[key], v[key]);
                            }
                    for (int stride = 1; stride < kpl; stride *= 2) /* the shuffle tree */
                        for (int sub = 0; sub < kpl; sub += 2 * stride) merge(&lanes[sub], lanes[sub + stride]);
                    merge(&block, lanes[0]);
                }
                merge(&total, block);
            }
            double got = total.o / total.l;
            cr_assert(fabs(got - want) <= 1e-12 * (1 + fabs(want)), "%d keys, %d splits: %.17g vs %.17g", n,
                      splits, got, want);
        }
        free(score);
        free(v);
    }
}

/* A fully masked start: merging an empty state changes nothing. */
Test(decode_plan, empty_states_drop_out) {
    State s = {-INFINITY, 0, 0}, t = {3.0, 2.0, 1.5};
    merge(&s, t);
    cr_assert(s.m == 3.0 && s.l == 2.0 && s.o == 1.5);
    merge(&s, (State){-INFINITY, 0, 0});
    cr_assert(s.m == 3.0 && s.l == 2.0 && s.o == 1.5);
}
