/*
 * sampler.c - the CPU sampler (sampler.h has the semantics, sampler_math.h
 * the arithmetic it shares with the CUDA sampler).
 *
 * Cost: one pass for the max and one that turns logits into probabilities
 * and chunk sums, vectorized per ISA (the variants run the same IEEE
 * operations, lane by lane, so they give the same bits). After that only the
 * tokens that can matter are touched: a chunk's sum bounds each of its
 * probabilities (a sum of non-negative terms is at least each term), so
 * min-p, top-k and top-p's candidates skip whole chunks. top-p sorts its
 * candidates only when they are few; otherwise it binary-searches the
 * threshold over float bit patterns, as the GPU does. Both searches find the
 * same threshold, which is defined without reference to either.
 */
#include "sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "philox.h"
#include "sampler_math.h"
#include "base/cpu_isa.h"
#include "base/row_max.h"

int sampler_scratch_init(SamplerScratch *s, int vocab, Error *err) {
    memset(s, 0, sizeof *s);
    s->vocab = vocab;
    s->chunks = sm_num_chunks(vocab);
    s->leaves = sm_tree_leaves(vocab);
    size_t v = (size_t)vocab, leaves = (size_t)s->leaves, chunks = (size_t)s->chunks;
    s->values = malloc(sizeof(float) * v);
    s->sorted = malloc(sizeof(float) * v);
    s->ids = malloc(sizeof(int32_t) * v);
    s->cand = malloc(sizeof(int32_t) * v);
    s->counts = calloc(v, sizeof(int32_t));
    s->seen = calloc(v, 1);
    s->sums = malloc(sizeof(double) * leaves);
    s->tree = malloc(sizeof(double) * leaves);
    s->node_ids = malloc(sizeof(int32_t) * chunks);
    s->node_sums = malloc(sizeof(double) * chunks);
    if (!s->values || !s->sorted || !s->ids || !s->cand || !s->counts || !s->seen || !s->sums ||
        !s->tree || !s->node_ids || !s->node_sums) {
        sampler_scratch_free(s);
        return error_set(err, "out of memory (sampler scratch)");
    }
    return 0;
}

void sampler_scratch_free(SamplerScratch *s) {
    free(s->values);
    free(s->sorted);
    free(s->ids);
    free(s->cand);
    free(s->counts);
    free(s->seen);
    free(s->sums);
    free(s->tree);
    free(s->node_ids);
    free(s->node_sums);
    memset(s, 0, sizeof *s);
}

/* ---- logprobs (CPU only: rows that ask for them never go to the GPU sampler) ---- */

/* The n largest of v[0..vocab) into ids (sorted), by a bounded insertion:
 * n <= MAX_TOP_LOGPROBS, so this is one pass over the vocabulary. */
static int top_n(const float *v, int vocab, int n, int32_t *ids) {
    if (n <= 0) return 0; /* logprobs 0: the chosen token's only (ids[n - 1] would be before the array) */
    int have = 0;
    for (int i = 0; i < vocab; i++) {
        if (have == n && !(v[i] > v[ids[n - 1]])) continue;
        int j = have < n ? have++ : n - 1;
        while (j > 0 && v[i] > v[ids[j - 1]]) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = i;
    }
    return have;
}

static void fill_logprobs(const float *raw, int vocab, int n_top, int32_t chosen,
                          SampleLogprobs *lp) {
    float mx = row_max(raw, vocab);
    double sum = 0;
    for (int i = 0; i < vocab; i++) sum += exp((double)raw[i] - mx);
    double lse = mx + log(sum);
    lp->logprob = (float)(raw[chosen] - lse);
    lp->num_top = top_n(raw, vocab, n_top, lp->top_ids);
    for (int i = 0; i < lp->num_top; i++) lp->top_logprobs[i] = (float)(raw[lp->top_ids[i]] - lse);
}

/* ---- penalties and greedy ------------------------------------------------------- */

static void apply_penalties(float *logits, const SampleInput *in, SamplerScratch *s) {
    const SamplingParams *p = in->params;
    if (p->repetition_penalty != 1.0f) {
        const int32_t *lists[2] = {in->prompt, in->output};
        int lens[2] = {in->prompt_len, in->output_len};
        for (int l = 0; l < 2; l++) {
            for (int i = 0; i < lens[l]; i++) {
                int32_t t = lists[l][i];
                if (s->seen[t]) continue;
                s->seen[t] = 1;
                logits[t] = sm_repetition(logits[t], p->repetition_penalty);
            }
        }
        for (int l = 0; l < 2; l++)
            for (int i = 0; i < lens[l]; i++) s->seen[lists[l][i]] = 0;
    }
    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
        for (int i = 0; i < in->output_len; i++) s->counts[in->output[i]]++;
        for (int i = 0; i < in->output_len; i++) {
            int32_t t = in->output[i];
            if (s->counts[t] == 0) continue; /* already applied */
            logits[t] = sm_frequency_presence(logits[t], s->counts[t], p->frequency_penalty,
                                              p->presence_penalty);
            s->counts[t] = 0;
        }
    }
}

/* The first index of the maximum: a vectorized max, then one scan for it. */
static int32_t greedy(const float *x, int n) {
    float m = row_max(x, n);
    for (int i = 0; i < n; i++)
        if (x[i] == m) return i;
    return 0; /* NaN in the row: unspecified, but in range */
}

/* ---- the dense passes, one copy per ISA ------------------------------------------ */

/* x[i] = probability of logit x[i]; sums[c] = chunk c's canonical sum. */
#define PROBS_BODY                                                                                 \
    for (int base = 0, c = 0; base < n; base += SM_CHUNK, c++) {                                   \
        int len = n - base < SM_CHUNK ? n - base : SM_CHUNK;                                       \
        float *q = x + base;                                                                       \
        if (len == SM_CHUNK) { /* a known trip count: whole vectors, no masks */                   \
            for (int i = 0; i < SM_CHUNK; i++) q[i] = sm_prob(q[i], inv_t, mx);                    \
            sums[c] = sm_chunk_sum(q, SM_CHUNK, 0.0f);                                             \
            continue;                                                                              \
        }                                                                                          \
        for (int i = 0; i < len; i++) q[i] = sm_prob(q[i], inv_t, mx);                           \
        sums[c] = sm_chunk_sum(q, len, 0.0f);                                                      \
    }

/* sums[c] = chunk c's sum of the x >= v; 0 without looking where bound[c] < v. */
#define MASKED_SUMS_BODY                                                                           \
    for (int base = 0, c = 0; base < n; base += SM_CHUNK, c++) {                                   \
        int len = n - base < SM_CHUNK ? n - base : SM_CHUNK;                                       \
        if (bound[c] < (double)v) sums[c] = 0.0;                                                   \
        else if (len == SM_CHUNK) sums[c] = sm_chunk_sum(x + base, SM_CHUNK, v);                   \
        else sums[c] = sm_chunk_sum(x + base, len, v);                                             \
    }

#define PROBS_PARAMS float *x, int n, float inv_t, float mx, double *sums
#define MASKED_SUMS_PARAMS const float *x, int n, float v, const double *bound, double *sums

static void probs_scalar(PROBS_PARAMS) { PROBS_BODY }
static void masked_sums_scalar(MASKED_SUMS_PARAMS) { MASKED_SUMS_BODY }

#if defined(__x86_64__)
#define TARGET_AVX2 __attribute__((target("avx2")))
#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
TARGET_AVX2 static void probs_avx2(PROBS_PARAMS) { PROBS_BODY }
TARGET_AVX512 static void probs_avx512(PROBS_PARAMS) { PROBS_BODY }
TARGET_AVX2 static void masked_sums_avx2(MASKED_SUMS_PARAMS) { MASKED_SUMS_BODY }
TARGET_AVX512 static void masked_sums_avx512(MASKED_SUMS_PARAMS) { MASKED_SUMS_BODY }
#endif

static void to_probs(PROBS_PARAMS) {
#if defined(__x86_64__)
    CpuIsa isa = cpu_isa_active();
    if (isa >= CPU_ISA_AVX512) {
        probs_avx512(x, n, inv_t, mx, sums);
        return;
    }
    if (isa >= CPU_ISA_AVX2) {
        probs_avx2(x, n, inv_t, mx, sums);
        return;
    }
#endif
    probs_scalar(x, n, inv_t, mx, sums);
}

static void masked_sums(MASKED_SUMS_PARAMS) {
#if defined(__x86_64__)
    CpuIsa isa = cpu_isa_active();
    if (isa >= CPU_ISA_AVX512) {
        masked_sums_avx512(x, n, v, bound, sums);
        return;
    }
    if (isa >= CPU_ISA_AVX2) {
        masked_sums_avx2(x, n, v, bound, sums);
        return;
    }
#endif
    masked_sums_scalar(x, n, v, bound, sums);
}

/* ---- totals of token sets --------------------------------------------------------- */

/* The canonical total of the whole row (every token kept). */
static double row_total(SamplerScratch *s) {
    memcpy(s->tree, s->sums, sizeof(double) * (size_t)s->leaves);
    sm_tree_upsweep(s->tree, s->leaves);
    return s->tree[s->leaves - 1];
}

/* The canonical chunk sums of the tokens ids[0..n) (ascending) with p >= v,
 * as (chunk, sum) pairs: sm_chunk_sum's additions less those of a zero,
 * which change nothing. Returns the number of pairs. */
static int sparse_sums(const float *p, int vocab, const int32_t *ids, int n, float v,
                       int32_t *chunk, double *sum) {
    int t = 0;
    for (int k = 0; k < n;) {
        int c = ids[k] / SM_CHUNK, base = c * SM_CHUNK;
        int len = vocab - base < SM_CHUNK ? vocab - base : SM_CHUNK, full = len & ~7;
        double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (; k < n && ids[k] < base + full; k++) {
            float x = p[ids[k]];
            int j = (ids[k] - base) & 7;
            if (x >= v) a[j] = SM_DADD(a[j], (double)x);
        }
        double acc = sm_combine8(a);
        for (; k < n && ids[k] < base + len; k++) {
            float x = p[ids[k]];
            if (x >= v) acc = SM_DADD(acc, (double)x);
        }
        chunk[t] = c;
        sum[t++] = acc;
    }
    return t;
}

/* The tree's root from its nonzero leaves (chunk ascending), level by
 * level: a node with one child present takes its value (x + 0 == x). */
static double sparse_root(int32_t *idx, double *val, int t, int leaves) {
    for (int width = leaves; width > 1; width /= 2) {
        int o = 0;
        for (int k = 0; k < t; o++) {
            int parent = idx[k] >> 1;
            if (k + 1 < t && idx[k + 1] >> 1 == parent) {
                val[o] = SM_DADD(val[k], val[k + 1]);
                k += 2;
            } else {
                val[o] = val[k++];
            }
            idx[o] = parent;
        }
        t = o;
    }
    return t > 0 ? val[0] : 0.0;
}

/* The canonical total of the ids[0..n) with p >= v. */
static double set_total(const float *p, const int32_t *ids, int n, float v, SamplerScratch *s) {
    int t = sparse_sums(p, s->vocab, ids, n, v, s->node_ids, s->node_sums);
    return sparse_root(s->node_ids, s->node_sums, t, s->leaves);
}

/* ---- min-p and top-k ------------------------------------------------------------- */

/* Tokens with p >= v, ascending; chunks whose bound is below v are skipped. */
static int collect(const float *p, int vocab, const double *bound, float v, int32_t *out) {
    int n = 0;
    for (int base = 0, c = 0; base < vocab; base += SM_CHUNK, c++) {
        if (bound[c] < (double)v) continue;
        int end = vocab - base < SM_CHUNK ? vocab : base + SM_CHUNK;
        for (int i = base; i < end; i++)
            if (p[i] >= v) out[n++] = i;
    }
    return n;
}

/* The ids[0..n) with p >= v, in order (out may be ids). */
static int filter(const float *p, const int32_t *ids, int n, float v, int32_t *out) {
    int m = 0;
    for (int k = 0; k < n; k++)
        if (p[ids[k]] >= v) out[m++] = ids[k];
    return m;
}

/* Token (a, value va) ranks above (b, vb): larger value, or equal and lower id. */
static inline bool ranks_above(float va, int32_t a, float vb, int32_t b) {
    return va > vb || (va == vb && a < b);
}

/* A min-heap by rank of (val, id) pairs: the values travel with the ids so
 * that sifting never reaches back into the row. */
static void sift_down(float *val, int32_t *id, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, worst = i;
        if (l < n && ranks_above(val[worst], id[worst], val[l], id[l])) worst = l;
        if (r < n && ranks_above(val[worst], id[worst], val[r], id[r])) worst = r;
        if (worst == i) return;
        float tv = val[i];
        int32_t ti = id[i];
        val[i] = val[worst];
        id[i] = id[worst];
        val[worst] = tv;
        id[worst] = ti;
        i = worst;
    }
}

static int compare_ids(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The k best by (p descending, id ascending) of the candidates - ids[0..n),
 * or every token when ids is NULL - into out, ascending, through the heap of
 * the best so far (values in val[k]). Candidates come in ascending id order,
 * so a newcomer beats the heap's worst only with a strictly larger value.
 * out may be ids: the heap only ever fills slots the scan has passed. */
static int top_k(const float *p, int vocab, const double *bound, const int32_t *ids, int n, int k,
                 int32_t *out, float *val) {
    int have = 0;
#define OFFER(token)                                                                               \
    do {                                                                                           \
        int32_t t_ = (token);                                                                      \
        if (have < k) {                                                                            \
            val[have] = p[t_];                                                                     \
            out[have++] = t_;                                                                      \
            if (have == k)                                                                         \
                for (int j = k / 2 - 1; j >= 0; j--) sift_down(val, out, k, j);                    \
        } else if (p[t_] > val[0]) {                                                               \
            val[0] = p[t_];                                                                        \
            out[0] = t_;                                                                           \
            sift_down(val, out, k, 0);                                                             \
        }                                                                                          \
    } while (0)
    if (ids) {
        for (int j = 0; j < n; j++) OFFER(ids[j]);
    } else {
        for (int base = 0, c = 0; base < vocab; base += SM_CHUNK, c++) {
            if (have == k && !(bound[c] > (double)val[0])) continue; /* nothing here beats the worst */
            int end = vocab - base < SM_CHUNK ? vocab : base + SM_CHUNK;
            for (int i = base; i < end; i++) OFFER(i);
        }
    }
#undef OFFER
    qsort(out, (size_t)have, sizeof *out, compare_ids);
    return have;
}

/* ---- top-p ------------------------------------------------------------------------ */

static int by_value_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* Few candidates: tau is one of their values, and total(>= value) only grows
 * down the sorted values, so binary-search the sorted distinct values. */
static float threshold_sorted(const float *p, const int32_t *cand, int m, double target,
                              SamplerScratch *s) {
    float *v = s->sorted;
    for (int k = 0; k < m; k++) v[k] = p[cand[k]];
    qsort(v, (size_t)m, sizeof *v, by_value_desc);
    int d = 0;
    for (int k = 0; k < m; k++)
        if (d == 0 || v[k] != v[d - 1]) v[d++] = v[k];
    int lo = 0, hi = d - 1; /* total(>= v[d - 1]) is the candidates' total: it reaches the target */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (set_total(p, cand, m, v[mid], s) >= target) hi = mid;
        else lo = mid + 1;
    }
    return v[lo];
}

/* Many candidates: the GPU's search - the largest float, by its bits (which
 * order non-negative floats), whose total still reaches the target - with
 * each total taken densely over a row holding only the candidates. */
static float threshold_bits(const float *p, const int32_t *cand, int m, float floor_v,
                            double target, SamplerScratch *s) {
    int vocab = s->vocab;
    float *row = s->sorted, top = 0.0f;
    memset(row, 0, sizeof(float) * (size_t)vocab);
    for (int k = 0; k < m; k++) {
        row[cand[k]] = p[cand[k]];
        if (p[cand[k]] > top) top = p[cand[k]];
    }
    uint32_t lo = sm_float_bits(floor_v), hi = sm_float_bits(top) + 1; /* total(lo) >= target > total(hi) */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        masked_sums(row, vocab, sm_bits_float(mid), s->sums, s->tree);
        for (int c = s->chunks; c < s->leaves; c++) s->tree[c] = 0.0;
        sm_tree_upsweep(s->tree, s->leaves);
        if (s->tree[s->leaves - 1] >= target) lo = mid;
        else hi = mid;
    }
    return sm_bits_float(lo);
}

/* top-p over the kept tokens (every token when dense, else ids[0..n)) of
 * canonical total `total`: leaves those at or above the threshold in
 * s->cand, ascending, and returns their number. */
static int top_p(const float *p, bool dense, const int32_t *ids, int n, float top_p_value,
                 double total, double target, SamplerScratch *s) {
    int vocab = s->vocab;
    float floor_v = sm_top_p_floor(top_p_value, total, n);
    int m = dense ? collect(p, vocab, s->sums, floor_v, s->cand) : filter(p, ids, n, floor_v, s->cand);
    if (!(set_total(p, s->cand, m, 0.0f, s) >= target)) { /* rounding beat the guess */
        floor_v = 0.0f;
        m = dense ? collect(p, vocab, s->sums, 0.0f, s->cand) : filter(p, ids, n, 0.0f, s->cand);
    }
    float tau = (int64_t)m * 16 <= vocab ? threshold_sorted(p, s->cand, m, target, s)
                                         : threshold_bits(p, s->cand, m, floor_v, target, s);
    return filter(p, s->cand, m, tau, s->cand);
}

/* ---- the draw ------------------------------------------------------------------- */

/* First k with ids[k] >= id. */
static int lower_bound(const int32_t *ids, int n, int32_t id) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (ids[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The tree over the kept tokens (dense: every token; else ids[0..n)), the
 * target u * total down it, then the chunk walk (sampler.h, step 5). */
static int32_t walk(const float *p, bool dense, const int32_t *ids, int n, double u,
                    SamplerScratch *s) {
    int vocab = s->vocab, leaves = s->leaves;
    double *tree = s->tree;
    if (dense) {
        memcpy(tree, s->sums, sizeof(double) * (size_t)leaves);
    } else {
        memset(tree, 0, sizeof(double) * (size_t)leaves);
        int t = sparse_sums(p, vocab, ids, n, 0.0f, s->node_ids, s->node_sums);
        for (int j = 0; j < t; j++) tree[s->node_ids[j]] = s->node_sums[j];
    }
    sm_tree_upsweep(tree, leaves);
    double target = SM_DMUL(u, tree[leaves - 1]);
    int c = sm_tree_descend(tree, leaves, &target);
    int base = c * SM_CHUNK, end = vocab - base < SM_CHUNK ? vocab : base + SM_CHUNK;
    if (base < vocab) {
        float chunk[SM_CHUNK];
        const float *q = p + base;
        if (!dense) {
            memset(chunk, 0, sizeof chunk);
            for (int k = lower_bound(ids, n, base); k < n && ids[k] < end; k++)
                chunk[ids[k] - base] = p[ids[k]];
            q = chunk;
        }
        int i = sm_chunk_walk(q, end - base, target);
        if (i >= 0) return base + i;
    }
    /* carried past the chunk: the last kept token with p > 0 before its end */
    if (dense) {
        for (int i = end - 1; i >= 0; i--)
            if (p[i] > 0.0f) return i;
    } else {
        for (int k = lower_bound(ids, n, end) - 1; k >= 0; k--)
            if (p[ids[k]] > 0.0f) return ids[k];
    }
    return 0;
}

/* min-p, top-k, top-p over the probabilities, then the draw. */
static int32_t draw(const float *p, const SamplingParams *sp, double u, SamplerScratch *s) {
    int vocab = s->vocab, n = vocab;
    bool dense = true; /* every token kept; else s->ids[0..n) */
    if (sp->min_p > 0.0f) { /* relative to the max, which is 1 */
        n = collect(p, vocab, s->sums, sp->min_p, s->ids);
        dense = false;
    }
    if (sp->top_k > 0 && sp->top_k < n) {
        n = top_k(p, vocab, s->sums, dense ? NULL : s->ids, n, sp->top_k, s->ids, s->sorted);
        dense = false;
    }
    const int32_t *ids = s->ids;
    if (sp->top_p < 1.0f) {
        double total = dense ? row_total(s) : set_total(p, s->ids, n, 0.0f, s);
        double target = sm_top_p_target(sp->top_p, total);
        if (target > 0.0) {
            n = top_p(p, dense, s->ids, n, sp->top_p, total, target, s);
            ids = s->cand;
            dense = false;
        }
    }
    return walk(p, dense, ids, n, u, s);
}

void sampler_apply_allowed(float *logits, const uint32_t *allowed, int vocab) {
    for (int w = 0; w * 32 < vocab; w++) {
        uint32_t bits = allowed[w];
        if (bits == 0xFFFFFFFFu) continue;
        int end = vocab - w * 32 < 32 ? vocab - w * 32 : 32;
        for (int k = 0; k < end; k++)
            if (!(bits >> k & 1)) logits[w * 32 + k] = -INFINITY;
    }
}

void sampler_apply_logit_bias(float *logits, const SamplingParams *p, int vocab) {
    for (int i = 0; i < p->num_logit_bias; i++) {
        int32_t t = p->logit_bias[i].token;
        if (t >= 0 && t < vocab) logits[t] = SM_FADD(logits[t], p->logit_bias[i].bias);
    }
}

int32_t sampler_sample(float *logits, const SampleInput *in, SamplerScratch *s, SampleLogprobs *lp) {
    const SamplingParams *p = in->params;
    int vocab = s->vocab;
    if (in->allowed) sampler_apply_allowed(logits, in->allowed, vocab);
    /* after the mask: -inf + bias is -inf, so a bias never revives a masked token */
    sampler_apply_logit_bias(logits, p, vocab);
    bool want_logprobs = lp && p->logprobs >= 0;
    if (want_logprobs) memcpy(s->values, logits, sizeof(float) * (size_t)vocab);
    if (sampling_needs_penalties(p)) apply_penalties(logits, in, s);

    int32_t chosen;
    if (p->temperature < 1e-5f) {
        chosen = greedy(logits, vocab);
    } else {
        float inv_t = SM_FDIV(1.0f, p->temperature);
        float mx = SM_FMUL(row_max(logits, vocab), inv_t);
        to_probs(logits, vocab, inv_t, mx, s->sums);
        for (int c = s->chunks; c < s->leaves; c++) s->sums[c] = 0.0;
        chosen = draw(logits, p, philox_uniform(in->seed, in->sample_index, in->position), s);
    }
    if (want_logprobs) fill_logprobs(s->values, vocab, p->logprobs, chosen, lp);
    return chosen;
}
