/*
 * sampler.c - the CPU sampler (see sampler.h for the order of operations).
 *
 * Cost: every step touches the whole vocabulary a few times (max, exp, sum),
 * using the vectorized exp of cpu_ops.c; only top-p sorts, and only the
 * tokens that can possibly be in the nucleus (probability >= (1 - top_p) /
 * kept, since the rest together cannot reach the remaining mass).
 */
#include "sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"
#include "philox.h"

int sampler_scratch_init(SamplerScratch *s, int vocab, Error *err) {
    memset(s, 0, sizeof *s);
    s->vocab = vocab;
    s->values = malloc(sizeof(float) * (size_t)vocab);
    s->ids = malloc(sizeof(int32_t) * (size_t)vocab);
    s->counts = calloc((size_t)vocab, sizeof(int32_t));
    s->seen = calloc((size_t)vocab, 1);
    if (!s->values || !s->ids || !s->counts || !s->seen) {
        sampler_scratch_free(s);
        return error_set(err, "out of memory (sampler scratch)");
    }
    return 0;
}

void sampler_scratch_free(SamplerScratch *s) {
    free(s->values);
    free(s->ids);
    free(s->counts);
    free(s->seen);
    memset(s, 0, sizeof *s);
}

/* Descending value, then ascending id: the order numpy/HF ties break in. */
static int by_value_desc(const void *a, const void *b, void *ctx) {
    const float *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (v[x] != v[y]) return v[x] > v[y] ? -1 : 1;
    return (x > y) - (x < y);
}

/* The n largest of v[0..vocab) into ids (sorted), by a bounded insertion:
 * n <= MAX_TOP_LOGPROBS, so this is one pass over the vocabulary. */
static int top_n(const float *v, int vocab, int n, int32_t *ids) {
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
    float mx = max_of(raw, vocab);
    double sum = 0;
    for (int i = 0; i < vocab; i++) sum += exp((double)raw[i] - mx);
    double lse = mx + log(sum);
    lp->logprob = (float)(raw[chosen] - lse);
    lp->num_top = top_n(raw, vocab, n_top, lp->top_ids);
    for (int i = 0; i < lp->num_top; i++) lp->top_logprobs[i] = (float)(raw[lp->top_ids[i]] - lse);
}

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
                logits[t] = logits[t] > 0 ? logits[t] / p->repetition_penalty
                                          : logits[t] * p->repetition_penalty;
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
            logits[t] -= p->frequency_penalty * (float)s->counts[t] + p->presence_penalty;
            s->counts[t] = 0;
        }
    }
}

/* a ranks above b: larger value, or equal value and lower id. */
static inline bool ranks_above(const float *v, int32_t a, int32_t b) {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
}

static void sift_down(const float *v, int32_t *heap, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, worst = i;
        if (l < n && ranks_above(v, heap[worst], heap[l])) worst = l;
        if (r < n && ranks_above(v, heap[worst], heap[r])) worst = r;
        if (worst == i) return;
        int32_t t = heap[i];
        heap[i] = heap[worst];
        heap[worst] = t;
        i = worst;
    }
}

/* Keeps the k best of the n candidate ids (in place, any order) with a
 * min-heap of the k best so far: O(n log k). */
static int keep_top_k(const float *v, int32_t *ids, int n, int k) {
    if (k <= 0 || k >= n) return n;
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(v, ids, k, i);
    for (int i = k; i < n; i++) {
        if (ranks_above(v, ids[i], ids[0])) {
            ids[0] = ids[i];
            sift_down(v, ids, k, 0);
        }
    }
    return k;
}

static int compare_ids(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The draw walks probabilities in chunks of this many tokens: a chunk's sum
 * (8 double accumulators, combined in a fixed order) either stays below the
 * target, or the walk steps through that chunk one token at a time. */
#define CHUNK 64

static double chunk_sum(const float *p, int n) {
    double a[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) a[j] += p[i + j];
    double s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    for (; i < n; i++) s += p[i];
    return s;
}

static double dense_total(const float *p, int vocab) {
    double total = 0;
    for (int c = 0; c < vocab; c += CHUNK) total += chunk_sum(p + c, vocab - c < CHUNK ? vocab - c : CHUNK);
    return total;
}

/* The token where the running sum of p passes target (< total). */
static int32_t dense_walk(const float *p, int vocab, double target) {
    double cum = 0;
    for (int c = 0; c < vocab; c += CHUNK) {
        int n = vocab - c < CHUNK ? vocab - c : CHUNK;
        double s = chunk_sum(p + c, n);
        if (cum + s > target) {
            for (int i = c; i < vocab; i++) { /* rounding may carry it past the chunk */
                cum += p[i];
                if (target < cum) return i;
            }
            break;
        }
        cum += s;
    }
    for (int i = vocab - 1; i > 0; i--) /* target at the very top: the last possible token */
        if (p[i] > 0) return i;
    return 0;
}

/* min-p, top-k, top-p over the probabilities, then the draw over the kept
 * tokens in ascending id order. Only a reordered (hence small) set is sorted. */
static int32_t sample_filtered(float *prob, int vocab, const SamplingParams *p, double u,
                               SamplerScratch *s) {
    int n = 0;
    float floor_p = p->min_p > 0.0f ? p->min_p : 0.0f; /* relative to the max, which is 1 */
    for (int i = 0; i < vocab; i++)
        if (prob[i] >= floor_p) s->ids[n++] = i;
    bool reordered = false;
    if (p->top_k > 0 && p->top_k < n) {
        n = keep_top_k(prob, s->ids, n, p->top_k);
        reordered = true;
    }
    if (p->top_p < 1.0f) {
        double total = 0;
        for (int i = 0; i < n; i++) total += prob[s->ids[i]];
        /* Tokens below this cannot be in the nucleus: together they hold
         * less than the (1 - top_p) share left outside it. */
        double cut = (1.0 - p->top_p) * total / n;
        int m = 0;
        for (int i = 0; i < n; i++)
            if (prob[s->ids[i]] >= cut) s->ids[m++] = s->ids[i];
        qsort_r(s->ids, (size_t)m, sizeof *s->ids, by_value_desc, prob);
        double cum = 0, target = p->top_p * total;
        int keep = 0;
        while (keep < m) {
            cum += prob[s->ids[keep++]];
            if (cum >= target) break;
        }
        n = keep;
        reordered = true;
    }
    if (reordered) qsort(s->ids, (size_t)n, sizeof *s->ids, compare_ids);
    double total = 0;
    for (int i = 0; i < n; i++) total += prob[s->ids[i]];
    double target = u * total, cum = 0;
    for (int i = 0; i < n; i++) {
        cum += prob[s->ids[i]];
        if (target < cum) return s->ids[i];
    }
    return s->ids[n - 1];
}

int32_t sampler_sample(float *logits, const SampleInput *in, SamplerScratch *s, SampleLogprobs *lp) {
    const SamplingParams *p = in->params;
    int vocab = s->vocab;
    bool want_logprobs = lp && p->logprobs >= 0;
    if (want_logprobs) memcpy(s->values, logits, sizeof(float) * (size_t)vocab);
    if (sampling_needs_penalties(p)) apply_penalties(logits, in, s);

    int32_t chosen;
    if (p->temperature < 1e-5f) {
        chosen = argmax(logits, vocab);
    } else {
        /* probabilities (unnormalised) in place of the logits */
        float inv_t = 1.0f / p->temperature;
        for (int i = 0; i < vocab; i++) logits[i] *= inv_t;
        float mx = max_of(logits, vocab);
        exp_shifted_sum(logits, vocab, mx); /* logits[i] = exp(l_i - max): max maps to 1 */
        double u = philox_uniform(in->seed, in->sample_index, in->position);
        if (p->top_k <= 0 && p->top_p >= 1.0f && p->min_p <= 0.0f) {
            chosen = dense_walk(logits, vocab, u * dense_total(logits, vocab));
        } else {
            chosen = sample_filtered(logits, vocab, p, u, s);
        }
    }
    if (want_logprobs) fill_logprobs(s->values, vocab, p->logprobs, chosen, lp);
    return chosen;
}
