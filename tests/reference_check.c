/*
 * reference_check.c - a model's logits and greedy decoding against a
 * float64 reference file (reference_check.h), shared by the GGUF and FP8
 * checkpoint tests.
 */
#include "reference_check.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static void read_exact(FILE *f, void *dst, size_t bytes, const char *path) {
    cr_assert_eq(fread(dst, 1, bytes, f), bytes, "%s: short read", path);
}

Reference reference_load(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s is missing (make generates it)", path);
    Reference r;
    int32_t head[3];
    read_exact(f, head, sizeof head, path);
    r.n_prompt = head[0];
    r.n_vocab = head[1];
    r.n_greedy = head[2];
    cr_assert(r.n_prompt > 0 && r.n_prompt < 1000 && r.n_greedy > 0 && r.n_greedy < 1000);
    r.prompt = malloc(sizeof *r.prompt * (size_t)r.n_prompt);
    r.greedy = malloc(sizeof *r.greedy * (size_t)r.n_greedy);
    r.margin = malloc(sizeof *r.margin * (size_t)r.n_greedy);
    r.logits = malloc(sizeof *r.logits * (size_t)r.n_prompt * (size_t)r.n_vocab);
    cr_assert(r.prompt && r.greedy && r.margin && r.logits);
    read_exact(f, r.prompt, sizeof *r.prompt * (size_t)r.n_prompt, path);
    read_exact(f, r.greedy, sizeof *r.greedy * (size_t)r.n_greedy, path);
    read_exact(f, r.margin, sizeof *r.margin * (size_t)r.n_greedy, path);
    read_exact(f, r.logits, sizeof *r.logits * (size_t)r.n_prompt * (size_t)r.n_vocab, path);
    fclose(f);
    return r;
}

void reference_free(Reference *r) {
    free(r->prompt);
    free(r->greedy);
    free(r->margin);
    free(r->logits);
}

static double want_gap(const float *want, int best, int second) {
    return second < 0 ? INFINITY : (double)want[best] - want[second];
}

/* Every position's logits against the reference (relative L2 over
 * positions x vocabulary), and each position's argmax the reference's
 * where the reference's top two are apart. */
void reference_logits_within(const char *ref_path, const char *model, double bound) {
    reference_logits_within_dtype(ref_path, model, bound, COMPUTE_F32);
}

void reference_logits_within_dtype(const char *ref_path, const char *model, double bound, ComputeDtype dtype) {
    Reference ref = reference_load(ref_path);
    const char *name = model;
    ModelWeights w;
    Runner *r;
    fixture_open_dtype(model, &w, &r, 16, 512, KV_CACHE_F32, dtype);
    cr_assert_eq(w.config.vocab_size, ref.n_vocab);
    int n = ref.n_prompt, nb = (n + 15) / 16;
    int32_t table[64];
    for (int i = 0; i < nb; i++) table[i] = nb - 1 - i;
    float *all = malloc(sizeof(float) * (size_t)n * (size_t)ref.n_vocab);
    cr_assert(all);
    RunnerSeq seq = {.tokens = ref.prompt, .num_tokens = n, .block_table = table, .num_blocks = nb,
                     .compute_logits = true};
    RunnerBatch batch = {.seqs = &seq, .num_seqs = 1, .all_logits = all};
    int32_t next;
    Error err = {0};
    cr_assert(runner_step(r, &batch, &next, &err) == 0, "%s", err.msg);
    double diff = 0, norm = 0;
    int argmax_checked = 0;
    typedef struct Top {
        int best, ref_best;
        double gap;
    } Top;
    Top tops[1000];
    for (int t = 0; t < n; t++) {
        const float *got = all + (size_t)t * ref.n_vocab, *want = ref.logits + (size_t)t * ref.n_vocab;
        int best = 0, ref_best = 0, ref_second = -1;
        for (int v = 0; v < ref.n_vocab; v++) {
            diff += ((double)got[v] - want[v]) * ((double)got[v] - want[v]);
            norm += (double)want[v] * want[v];
            if (got[v] > got[best]) best = v;
            if (want[v] > want[ref_best]) {
                ref_second = ref_best;
                ref_best = v;
            } else if (v != ref_best && (ref_second < 0 || want[v] > want[ref_second])) {
                ref_second = v;
            }
        }
        tops[t] = (Top){best, ref_best, want_gap(want, ref_best, ref_second)};
    }
    /* Our argmax must be a token the reference rates within a few typical
     * errors of its own top one (exactly its top one where nothing is close). */
    double rms = sqrt(diff / ((double)n * ref.n_vocab));
    for (int t = 0; t < n; t++) {
        if (tops[t].gap < 6 * rms) continue;
        argmax_checked++;
        cr_expect_eq(tops[t].best, tops[t].ref_best, "%s position %d: argmax %d, reference %d "
                     "(gap %.3f, rms error %.3f)", name, t, tops[t].best, tops[t].ref_best, tops[t].gap, rms);
    }
    double rel = sqrt(diff / norm);
    cr_log_info("%s: relative L2 from the float64 reference %.3g (bound %.3g), rms error %.3g, "
                "%d/%d argmax checked", name, rel, bound, rms, argmax_checked, n);
    cr_expect(rel <= bound, "%s: logits %.3g from the reference (bound %.3g)", name, rel, bound);
    free(all);
    tiny_close(&w, r);
    reference_free(&ref);
}

/* Decoding through the KV cache (one prefill, then a token per step),
 * fed the reference's greedy tokens: at every step whose reference margin
 * is at least min_margin our argmax is the reference's token (where the
 * top two are closer, 8-bit activations may order them either way). */
void reference_greedy_matches(const char *ref_path, const char *model, double min_margin) {
    Reference ref = reference_load(ref_path);
    const char *name = model;
    ModelWeights w;
    Runner *r;
    fixture_open_dtype(model, &w, &r, 16, 512, KV_CACHE_F32, COMPUTE_F32);
    int n = ref.n_prompt, total = n + ref.n_greedy, nb = (total + 15) / 16;
    int32_t table[64], *tokens = malloc(sizeof *tokens * (size_t)total);
    cr_assert(tokens && nb <= 64);
    for (int i = 0; i < nb; i++) table[i] = (i * 7 + 3) % nb;
    memcpy(tokens, ref.prompt, sizeof *tokens * (size_t)n);
    memcpy(tokens + n, ref.greedy, sizeof *tokens * (size_t)ref.n_greedy);
    int compared = 0;
    for (int step = 0; step < ref.n_greedy; step++) {
        int start = step == 0 ? 0 : n + step - 1, len = step == 0 ? n : 1;
        RunnerSeq seq = {.tokens = tokens + start, .num_tokens = len, .start_pos = start,
                         .block_table = table, .num_blocks = nb, .compute_logits = true};
        RunnerBatch batch = {.seqs = &seq, .num_seqs = 1};
        int32_t next;
        Error err = {0};
        cr_assert(runner_step(r, &batch, &next, &err) == 0, "%s", err.msg);
        if (ref.margin[step] < min_margin) continue;
        cr_expect_eq(next, ref.greedy[step], "%s step %d: %d, reference %d (margin %.3f)", name, step,
                     next, ref.greedy[step], ref.margin[step]);
        compared++;
    }
    cr_log_info("%s: %d of %d greedy steps compared (margins >= %.2f)", name, compared, ref.n_greedy,
                min_margin);
    cr_expect(compared >= 4, "%s: only %d greedy steps had a clear margin", name, compared);
    free(tokens);
    tiny_close(&w, r);
    reference_free(&ref);
}

