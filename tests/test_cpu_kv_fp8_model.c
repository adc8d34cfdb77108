/*
 * test_cpu_kv_fp8_model.c - the whole tiny model with an fp8 (e4m3) KV
 * cache against the same model with a bf16 cache: logits within a
 * measured rule at every prompt position and decode step, greedy tokens
 * equal while the bf16 run's margins stay above 0.3, and the block
 * arithmetic (twice bf16's tokens for the same memory). Both runs use
 * float32 matmuls, so the cache is the only difference. The engine's
 * invariants with an fp8 cache (batches, preemption, prefix cache) are in
 * test_engine.c's _fp8 tests.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#define VOCAB 151936
#define DECODE_STEPS 16
#define GREEDY_MIN_MARGIN 0.3 /* the issue's: greedy tokens equal while margins exceed it */

/* The rule, from measurements. Unit: the largest |logit_fp8 - logit_bf16|
 * over the vocabulary in one row, divided by the standard deviation of
 * the bf16 run's logits in that row; float32 matmuls in both runs;
 * teacher-forced decode steps (both runs fed the bf16 run's greedy token).
 *  - This test (tiny-qwen3, logit std 5.5-6, the 10 golden prompts of 1..300
 *    tokens, 1,179 prompt rows and 160 decode rows, scattered blocks of 16):
 *    worst 0.617 (max |diff| 3.49) over prompt rows, 0.458 (2.63) over
 *    decode rows, mean 0.111; greedy tokens equal in all 32 decode steps
 *    before each prompt's first bf16 margin <= 0.3.
 *  - tiny-qwen3, random prompts of 1, 7, 64, 300, 1,000 and 2,100 tokens,
 *    chunks of 256, 16 decode steps each: worst 0.50, 0.43, 0.40, 0.64,
 *    0.68, 0.39; mean 0.23, 0.18, 0.16, 0.11, 0.07, 0.04.
 *  - Random full-size Qwen3-0.6B (scripts/make_random_qwen3.py --preset
 *    qwen3-0.6b; logit std ~32), the same random prompts of 7, 64, 300,
 *    1,000 and 2,100 tokens: worst 0.67, 0.77, 0.75, 0.71, 0.81 (max |diff|
 *    up to 26); mean 0.58, 0.46, 0.30, 0.18, 0.13. There the bf16 run's
 *    top-1 changes at 6-43% of the positions whose margin is > 0.3 (margins
 *    up to 16, 0.5 std): "greedy equal while margins > 0.3" does not hold
 *    on that model; a bf16 cache against float32 already flips one such
 *    position in 22 at 7 tokens.
 * Against a float32 cache a bf16 one measures 16x less on both models
 * (tiny: worst 0.039, mean <= 0.012; 0.6B: worst 0.056, mean <= 0.037):
 * e4m3 keeps 4 significant bits where bf16 keeps 8, and these random
 * models (projections scaled up so that greedy output varies) amplify
 * whatever the cache loses. No saturation is involved (K and V are ~N(0, 1)
 * there). Rule for this test: every row within 1.0 std, the mean over rows
 * within 0.25, and the greedy check above. */
#define MAX_DIFF_PER_STD 1.0
#define MEAN_DIFF_PER_STD 0.25

typedef struct RowStats {
    double worst, worst_abs, sum;
    long rows;
} RowStats;

/* Largest |a - b| over the row, per standard deviation of a. */
static double row_diff(const float *a, const float *b, RowStats *st) {
    double mean = 0, sq = 0, d = 0;
    for (int v = 0; v < VOCAB; v++) {
        mean += a[v];
        sq += (double)a[v] * a[v];
        d = fmax(d, fabs((double)a[v] - b[v]));
    }
    mean /= VOCAB;
    double sd = sqrt(sq / VOCAB - mean * mean), rel = d / sd;
    st->worst = fmax(st->worst, rel);
    st->worst_abs = fmax(st->worst_abs, d);
    st->sum += rel;
    st->rows++;
    return rel;
}

static void step(Runner *r, const RunnerSeq *q, float *all_logits) {
    RunnerBatch b = {.seqs = q, .num_seqs = 1, .all_logits = all_logits};
    int32_t out;
    Error err = {0};
    cr_assert(runner_step(r, &b, &out, &err) == 0, "%s", err.msg);
}

/* The fp8 and the bf16 cache's runs, both with `compute` matmuls. */
static void logits_near_the_bf16_cache(ComputeDtype compute) {
    ModelWeights wb, wf;
    Runner *rb, *rf;
    fixture_open_dtype(TINY_MODEL, &wb, &rb, 16, 512, KV_CACHE_BF16, compute);
    fixture_open_dtype(TINY_MODEL, &wf, &rf, 16, 512, KV_CACHE_FP8, compute);
    json_t *g = golden_load();
    json_t *prompts = json_object_get(g, "prompts");
    enum { MAX_PROMPT = 300 }; /* the golden prompts' longest */
    float *lb = malloc(sizeof(float) * MAX_PROMPT * VOCAB), *lf = malloc(sizeof(float) * MAX_PROMPT * VOCAB);
    int32_t table[64];
    for (int i = 0; i < 64; i++) table[i] = (int32_t)((i * 37 + 5) % 64); /* scattered blocks */
    cr_assert(lb && lf);
    RowStats prefill = {0}, decode = {0};
    int greedy_checked = 0;
    size_t pi;
    json_t *p;
    json_array_foreach(prompts, pi, p) {
        int n;
        int32_t *ids = json_ids(json_object_get(p, "prompt_ids"), &n);
        int32_t *toks = malloc(sizeof(int32_t) * (size_t)(n + DECODE_STEPS));
        cr_assert(toks && n <= MAX_PROMPT);
        memcpy(toks, ids, sizeof(int32_t) * (size_t)n);
        RunnerSeq q = {.tokens = toks, .num_tokens = n, .start_pos = 0, .block_table = table,
                       .num_blocks = 64, .compute_logits = true};
        step(rb, &q, lb);
        step(rf, &q, lf);
        for (int t = 0; t < n - 1; t++) row_diff(lb + (size_t)t * VOCAB, lf + (size_t)t * VOCAB, &prefill);
        /* The last prompt row picks the first generated token; then one
         * decode step per token, both runs fed the bf16 run's greedy tokens
         * (the same contexts, so each step compares one step's deviation). */
        const float *b_row = lb + (size_t)(n - 1) * VOCAB, *f_row = lf + (size_t)(n - 1) * VOCAB;
        bool equal_so_far = true;
        for (int s = 0; s < DECODE_STEPS; s++) {
            double rel = row_diff(b_row, f_row, &decode), margin, unused;
            int want = argmax_margin(b_row, VOCAB, &margin), got = argmax_margin(f_row, VOCAB, &unused);
            if (equal_so_far && margin <= GREEDY_MIN_MARGIN) equal_so_far = false;
            if (equal_so_far) {
                cr_expect_eq(got, want, "%s step %d: fp8 greedy %d, bf16 %d (margin %.3f, diff %.3f std)",
                             json_string_value(json_object_get(p, "name")), s, got, want, margin, rel);
                greedy_checked++;
            }
            if (s + 1 == DECODE_STEPS) break;
            toks[n + s] = want;
            q = (RunnerSeq){.tokens = toks + n + s, .num_tokens = 1, .start_pos = n + s,
                            .block_table = table, .num_blocks = 64, .compute_logits = true};
            step(rb, &q, lb);
            step(rf, &q, lf);
            b_row = lb;
            f_row = lf;
        }
        free(ids);
        free(toks);
    }
    RowStats all = {fmax(prefill.worst, decode.worst), fmax(prefill.worst_abs, decode.worst_abs),
                    prefill.sum + decode.sum, prefill.rows + decode.rows};
    cr_log_info("fp8 vs bf16 cache, %s matmuls: prompt rows %ld worst %.3f std (max |diff| %.3f), decode rows "
                "%ld worst %.3f std (max |diff| %.3f); mean %.3f std; greedy equal over %d steps",
                compute == COMPUTE_BF16 ? "bf16" : "float32", prefill.rows, prefill.worst, prefill.worst_abs, decode.rows, decode.worst, decode.worst_abs,
                all.sum / all.rows, greedy_checked);
    cr_expect_leq(all.worst, MAX_DIFF_PER_STD, "worst row %.3f std", all.worst);
    cr_expect_leq(all.sum / all.rows, MEAN_DIFF_PER_STD, "mean %.3f std", all.sum / all.rows);
    cr_expect_gt(all.worst, 0.0, "the fp8 cache changed nothing: is it in use?");
    cr_expect_gt(greedy_checked, 20, "only %d greedy steps above the margin", greedy_checked);
    free(lb);
    free(lf);
    json_decref(g);
    tiny_close(&wb, rb);
    tiny_close(&wf, rf);
}

Test(cpu_kv_fp8_model, logits_near_the_bf16_cache, .timeout = 300) { logits_near_the_bf16_cache(COMPUTE_F32); }

/* Under bf16 matmuls (--dtype bfloat16), where the CPU has AVX512-BF16 and
 * VBMI the fp8 run's decode steps also round q and p to bf16
 * (cpu_attention_decode_dot.h): the same rule. */
Test(cpu_kv_fp8_model, logits_near_the_bf16_cache_bf16_matmuls, .timeout = 300) {
    logits_near_the_bf16_cache(COMPUTE_BF16);
}

/* One byte per value: twice the blocks of bf16 (four times float32's) in
 * the same memory, and the start-up line says which cache it is. */
Test(cpu_kv_fp8_model, block_bytes_and_description) {
    ModelWeights w;
    Runner *r;
    fixture_open_dtype(TINY_MODEL, &w, &r, 16, 64, KV_CACHE_FP8, COMPUTE_F32);
    const ModelConfig *c = &w.config;
    size_t fp8 = cpu_runner_block_bytes(c, 16, KV_CACHE_FP8);
    cr_expect_eq(fp8, 2 * (size_t)c->num_layers * 16 * c->num_kv_heads * c->head_dim);
    cr_expect_eq(cpu_runner_block_bytes(c, 16, KV_CACHE_BF16), 2 * fp8);
    cr_expect_eq(cpu_runner_block_bytes(c, 16, KV_CACHE_F32), 4 * fp8);
    cr_expect_eq(r->num_kv_blocks, (int)((64u << 20) / fp8), "64 MiB of fp8 blocks"); /* fixture_open's budget */
    cr_expect_eq(r->options.kv_cache_dtype, KV_CACHE_FP8);
    cr_expect(strstr(r->description, "fp8_e4m3 (scales 1.0) KV cache"), "%s", r->description);
    tiny_close(&w, r);
}
