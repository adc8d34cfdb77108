/*
 * test_qwen3_5.c - the CPU forward pass of Qwen3.5 (hybrid Gated DeltaNet +
 * gated attention) against the float64 reference (scripts/qwen3_5_ref.py)
 * on the two tiny random fixtures `make fixtures` writes:
 * tests/fixtures/tiny-qwen3_5/dense (the multimodal folder layout, tied
 * embeddings) and moe (the text-only layout, 8 experts + a shared one).
 *
 * Checks: every position of all ten golden prompts within the README's
 * float32 tolerance (one-shot prefill: the chunked form of the delta rule);
 * the 16 greedy tokens exactly through the KV cache and the state slot
 * (the recurrent form); a prompt prefilled in chunks of odd sizes equal to
 * one-shot; several sequences of different lengths in one batch, each in
 * its own slot, equal to each alone; a slot reused by a new sequence
 * starting afresh; and the bf16 runs under the rules below. The same
 * models as llama.cpp's GGUF files: bf16 (the same weights) under the same
 * golden, q8_0 under the golden of its decoded weights. The engine-level
 * checks (preemption, n > 1, no prefix reuse) are in test_engine_hybrid.c.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "cpu/cpu_runner.h"

#define VOCAB 151936
#define HYBRID_TOL 2e-3 /* the fixtures' golden README: numpy float32 is 7e-4 from float64 */

/* bf16 (the golden README's bf16 rule does not fit these models): a bf16 KV
 * cache alone moves the logits by 0.007 (dense) and 0.027 (MoE), measured,
 * so its checks are tight (0.1). Rounding every matmul input to bf16 moves them far more:
 * the numpy reference itself, with its projections' inputs rounded the same
 * way, is up to 3.09 from float64 (len255; 0.37-1.0 on the other prompts),
 * this random model's logits having std 8 and its recurrence carrying the
 * error on; ours measured 3.81 (AVX2, float32 sums of bf16 products). So
 * those runs are held to 6.0, about twice numpy's own bf16 distance (a
 * weak check: it catches a broken bf16 path, not a small bias), and to
 * greedy tokens while the golden margins stay above 1.0. */
typedef enum Precision { ALL_F32, KV_BF16, ALL_BF16 } Precision;
static const double TOL[3] = {HYBRID_TOL, 0.1, 6.0};
static const double MIN_MARGIN[3] = {0.0, 0.1, 1.0};

static const GoldenFixture DENSE = {"tests/fixtures/tiny-qwen3_5/dense",
                                    "tests/fixtures/tiny-qwen3_5/dense-golden"};
static const GoldenFixture MOE = {"tests/fixtures/tiny-qwen3_5/moe",
                                  "tests/fixtures/tiny-qwen3_5/moe-golden"};
/* The same weights as llama.cpp's GGUF (norms as 1 + w, A as -exp(A_log),
 * value heads tiled: gguf_model.c), so the same golden holds. */
static const GoldenFixture DENSE_GGUF = {"tests/fixtures/tiny-qwen3_5/dense-bf16.gguf",
                                         "tests/fixtures/tiny-qwen3_5/dense-golden"};
static const GoldenFixture MOE_GGUF = {"tests/fixtures/tiny-qwen3_5/moe-bf16.gguf",
                                       "tests/fixtures/tiny-qwen3_5/moe-golden"};
static const GoldenFixture DENSE_Q8 = {"tests/fixtures/tiny-qwen3_5/dense-q8_0.gguf",
                                       "tests/fixtures/tiny-qwen3_5/dense-q8_0-golden"};
static const GoldenFixture MOE_Q8 = {"tests/fixtures/tiny-qwen3_5/moe-q8_0.gguf",
                                     "tests/fixtures/tiny-qwen3_5/moe-q8_0-golden"};

static void open_hybrid(const GoldenFixture *f, ModelWeights *w, Runner **r, Precision prec) {
    fixture_open_dtype(f->model, w, r, 16, 512, prec == ALL_F32 ? KV_CACHE_F32 : KV_CACHE_BF16,
                       prec == ALL_BF16 ? COMPUTE_BF16 : COMPUTE_F32);
    cr_assert_gt((*r)->num_state_slots, 1, "a hybrid model's runner has state slots");
}

/* Sequence s's blocks: 40 blocks of 16 apart from the others'. */
static int32_t *table_for(int s, int nb) {
    int32_t *t = malloc(sizeof *t * (size_t)nb);
    for (int i = 0; i < nb; i++) t[i] = s * 40 + i;
    return t;
}

static int step_one(Runner *r, const int32_t *tokens, int n, int start, const int32_t *table, int slot,
                    float *all, int32_t *next) {
    RunnerSeq seq = {.tokens = tokens, .num_tokens = n, .start_pos = start, .block_table = table,
                     .num_blocks = (start + n + 15) / 16, .state_slot = slot, .compute_logits = true};
    RunnerBatch batch = {.seqs = &seq, .num_seqs = 1, .all_logits = all};
    Error err = {0};
    int rc = runner_step(r, &batch, next, &err);
    cr_assert(rc == 0, "%s", err.msg);
    return rc;
}

/* Every position's top-5 golden logits, the last position's top 20 and,
 * where the fixture keeps it, the whole last row. */
static double check_prompt(const GoldenFixture *f, json_t *p, const float *all, int n, double tol) {
    json_t *topk = json_object_get(p, "topk_per_position");
    const char *name = json_string_value(json_object_get(p, "name"));
    double worst = 0;
    for (int t = 0; t < n; t++) {
        const float *row = all + (size_t)t * VOCAB;
        json_t *ids = json_array_get(json_object_get(topk, "ids"), (size_t)t);
        json_t *vals = json_array_get(json_object_get(topk, "values"), (size_t)t);
        for (size_t k = 0; k < json_array_size(ids); k++) {
            int id = (int)json_integer_value(json_array_get(ids, k));
            double diff = fabs(row[id] - json_real_value(json_array_get(vals, k)));
            worst = fmax(worst, diff);
            cr_expect(diff <= tol, "%s pos %d id %d: off by %g", name, t, id, diff);
        }
    }
    json_t *top20 = json_object_get(p, "last_logits_top20");
    const float *last = all + (size_t)(n - 1) * VOCAB;
    for (size_t k = 0; k < json_array_size(json_object_get(top20, "ids")); k++) {
        int id = (int)json_integer_value(json_array_get(json_object_get(top20, "ids"), k));
        double diff = fabs(last[id] - json_real_value(json_array_get(json_object_get(top20, "values"), k)));
        worst = fmax(worst, diff);
        cr_expect(diff <= tol, "%s top20 id %d: off by %g", name, id, diff);
    }
    float *golden = golden_logits_from(f, name);
    if (golden) {
        double full = max_abs_diff(last, golden, VOCAB);
        worst = fmax(worst, full);
        cr_expect(full <= tol, "%s: last-position logits differ by up to %g", name, full);
        free(golden);
    }
    return worst;
}

static const char *const PRECISION[3] = {"float32", "bf16 KV cache", "bf16 KV cache and matmuls"};

/* Golden prompt i (p) prefilled in one call: every position's logits
 * (malloc'ed, *n rows), its blocks and slot chosen by i. */
static float *prompt_logits(Runner *r, json_t *p, int i, int *n) {
    int32_t *ids = json_ids(json_object_get(p, "prompt_ids"), n), next;
    int32_t *table = table_for(i % 4, (*n + 15) / 16);
    float *all = malloc(sizeof(float) * (size_t)*n * VOCAB);
    step_one(r, ids, *n, 0, table, i % r->num_state_slots, all, &next);
    free(table);
    free(ids);
    return all;
}

static void every_position(const GoldenFixture *f, Precision prec) {
    ModelWeights w;
    Runner *r;
    open_hybrid(f, &w, &r, prec);
    json_t *g = golden_load_from(f);
    size_t i;
    json_t *p;
    double worst = 0;
    json_array_foreach(json_object_get(g, "prompts"), i, p) {
        int n;
        float *all = prompt_logits(r, p, (int)i, &n);
        worst = fmax(worst, check_prompt(f, p, all, n, TOL[prec]));
        free(all);
    }
    cr_log_info("%s, %s: largest logit difference from golden %.3g", f->model, PRECISION[prec], worst);
    json_decref(g);
    tiny_close(&w, r);
}

Test(qwen3_5, every_position_dense) { every_position(&DENSE, ALL_F32); }
Test(qwen3_5, every_position_moe) { every_position(&MOE, ALL_F32); }
Test(qwen3_5, every_position_dense_bf16_cache) { every_position(&DENSE, KV_BF16); }
Test(qwen3_5, every_position_moe_bf16_cache) { every_position(&MOE, KV_BF16); }
Test(qwen3_5, every_position_dense_bf16_matmuls) { every_position(&DENSE, ALL_BF16); }
Test(qwen3_5, every_position_dense_gguf) { every_position(&DENSE_GGUF, ALL_F32); }
Test(qwen3_5, every_position_moe_gguf) { every_position(&MOE_GGUF, ALL_F32); }

/* q8_0 against the golden of the very weights the file holds: what is left
 * is our q8_0 products' own rounding (each activation row quantized to 8
 * bits per block first, as llama.cpp does), which this random model's
 * recurrence carries on: measured 2.4-4.5% (dense) and 2.6-6.7% (MoE)
 * relative L2 on the last positions' logits, where Qwen3's tiny q8_0 file
 * measures 2.0%. Held to 10%: the grouped value-head order instead of
 * the file's tiled one measured 65%. */
static void q8_last_logits(const GoldenFixture *f) {
    ModelWeights w;
    Runner *r;
    open_hybrid(f, &w, &r, ALL_F32);
    json_t *g = golden_load_from(f);
    size_t i;
    json_t *p;
    int compared = 0;
    json_array_foreach(json_object_get(g, "prompts"), i, p) {
        const char *name = json_string_value(json_object_get(p, "name"));
        float *golden = golden_logits_from(f, name);
        if (!golden) continue;
        int n;
        float *all = prompt_logits(r, p, (int)i, &n);
        double num = 0, den = 0;
        const float *last = all + (size_t)(n - 1) * VOCAB;
        for (int v = 0; v < VOCAB; v++) {
            num += (double)(last[v] - golden[v]) * (last[v] - golden[v]);
            den += (double)golden[v] * golden[v];
        }
        cr_expect(sqrt(num / den) <= 0.10, "%s %s: relative L2 %.4f", f->model, name, sqrt(num / den));
        cr_log_info("%s %s: relative L2 %.4f from the golden of its decoded weights", f->model, name,
                    sqrt(num / den));
        compared++;
        free(all);
        free(golden);
    }
    cr_expect_geq(compared, 4, "prompts with a full golden row: %d", compared);
    json_decref(g);
    tiny_close(&w, r);
}

Test(qwen3_5, gguf_q8_0_dense) { q8_last_logits(&DENSE_Q8); }
Test(qwen3_5, gguf_q8_0_moe) { q8_last_logits(&MOE_Q8); }

/* Prefill, then one token a step through the cache and the state slot. */
static void greedy(const GoldenFixture *f, Precision prec) {
    ModelWeights w;
    Runner *r;
    open_hybrid(f, &w, &r, prec);
    json_t *g = golden_load_from(f);
    size_t i;
    json_t *p;
    int compared = 0;
    json_array_foreach(json_object_get(g, "prompts"), i, p) {
        int n, steps;
        int32_t *prompt = json_ids(json_object_get(p, "prompt_ids"), &n);
        int32_t *want = json_ids(json_object_get(p, "greedy_ids"), &steps);
        int32_t *table = table_for(1, (n + steps + 15) / 16), got[16];
        int slot = (int)(i * 3) % r->num_state_slots;
        step_one(r, prompt, n, 0, table, slot, NULL, &got[0]);
        for (int s = 1; s < steps; s++) step_one(r, &got[s - 1], 1, n + s - 1, table, slot, NULL, &got[s]);
        int check = steps;
        if (prec != ALL_F32)
            for (int s = 0; s < steps; s++)
                if (json_real_value(json_array_get(json_object_get(p, "greedy_margins"), (size_t)s)) <
                    MIN_MARGIN[prec]) {
                    check = s;
                    break;
                }
        for (int s = 0; s < check; s++)
            cr_expect_eq(got[s], want[s], "%s step %d: %d, golden %d",
                         json_string_value(json_object_get(p, "name")), s, got[s], want[s]);
        compared += check;
        free(table);
        free(want);
        free(prompt);
    }
    cr_log_info("%s, %s: %d of 160 greedy steps compared", f->model, PRECISION[prec], compared);
    json_decref(g);
    tiny_close(&w, r);
}

Test(qwen3_5, greedy_dense) { greedy(&DENSE, ALL_F32); }
Test(qwen3_5, greedy_moe) { greedy(&MOE, ALL_F32); }
Test(qwen3_5, greedy_dense_bf16_cache) { greedy(&DENSE, KV_BF16); }
Test(qwen3_5, greedy_moe_bf16_cache) { greedy(&MOE, KV_BF16); }
Test(qwen3_5, greedy_dense_bf16_matmuls) { greedy(&DENSE, ALL_BF16); }
Test(qwen3_5, greedy_dense_gguf) { greedy(&DENSE_GGUF, ALL_F32); }
Test(qwen3_5, greedy_moe_gguf) { greedy(&MOE_GGUF, ALL_F32); }

/* len300 prefilled in chunks of odd sizes (each continuing the state the
 * previous one left) against one call: every position's logits. */
static void chunked_prefill(const GoldenFixture *f) {
    ModelWeights w;
    Runner *r;
    open_hybrid(f, &w, &r, ALL_F32);
    json_t *g = golden_load_from(f);
    int n;
    int32_t *ids = json_ids(json_object_get(golden_prompt(g, "len300"), "prompt_ids"), &n), next;
    int32_t *table = table_for(0, (n + 15) / 16);
    float *one = malloc(sizeof(float) * (size_t)n * VOCAB), *parts = malloc(sizeof(float) * (size_t)n * VOCAB);
    step_one(r, ids, n, 0, table, 0, one, &next);
    static const int chunks[] = {1, 7, 63, 64, 65, 3, 97};
    int pos = 0;
    for (size_t c = 0; pos < n; c++) {
        int len = chunks[c % (sizeof chunks / sizeof chunks[0])];
        if (len > n - pos) len = n - pos;
        step_one(r, ids + pos, len, pos, table, 1, parts + (size_t)pos * VOCAB, &next);
        pos += len;
    }
    double diff = max_abs_diff(one, parts, (size_t)n * VOCAB);
    cr_log_info("%s: chunked vs one-shot prefill, every position: max diff %.3g", f->model, diff);
    cr_expect(diff <= HYBRID_TOL, "chunked prefill differs by %g", diff);
    free(one);
    free(parts);
    free(table);
    free(ids);
    json_decref(g);
    tiny_close(&w, r);
}

Test(qwen3_5, chunked_prefill_dense) { chunked_prefill(&DENSE); }
Test(qwen3_5, chunked_prefill_moe) { chunked_prefill(&MOE); }

/* Four prompts at once (prefill and decode of different lengths side by
 * side, each in its own slot), then a slot reused by a fresh sequence:
 * every greedy token as the golden says. */
Test(qwen3_5, batch_of_sequences_and_reused_slots) {
    ModelWeights w;
    Runner *r;
    open_hybrid(&DENSE, &w, &r, ALL_F32);
    json_t *g = golden_load_from(&DENSE);
    static const char *const names[] = {"len007", "len031", "len064", "len016"};
    int32_t *prompt[4], *want[4], *table[4], got[4][16];
    int len[4], steps = 0;
    for (int s = 0; s < 4; s++) {
        json_t *p = golden_prompt(g, names[s]);
        prompt[s] = json_ids(json_object_get(p, "prompt_ids"), &len[s]);
        want[s] = json_ids(json_object_get(p, "greedy_ids"), &steps);
        table[s] = table_for(s, (len[s] + steps + 15) / 16);
    }
    /* Step 0 prefills the first two; step 1 decodes them beside the others'
     * prefill; then all four decode. Slots 3, 2, 1, 0. */
    int started[4] = {0}, done[4] = {0};
    for (int step = 0; step < steps + 1; step++) {
        RunnerSeq seqs[4];
        int which[4], nseq = 0;
        for (int s = 0; s < 4; s++) {
            if (s >= 2 && step == 0) continue;
            if (done[s] == steps) continue;
            bool prefill = !started[s];
            seqs[nseq] = (RunnerSeq){.tokens = prefill ? prompt[s] : &got[s][done[s] - 1],
                                     .num_tokens = prefill ? len[s] : 1,
                                     .start_pos = prefill ? 0 : len[s] + done[s] - 1,
                                     .block_table = table[s], .num_blocks = (len[s] + steps + 15) / 16,
                                     .state_slot = 3 - s, .compute_logits = true};
            which[nseq++] = s;
            started[s] = 1;
        }
        if (nseq == 0) break;
        int32_t out[4];
        RunnerBatch batch = {.seqs = seqs, .num_seqs = nseq};
        Error err = {0};
        cr_assert(runner_step(r, &batch, out, &err) == 0, "%s", err.msg);
        for (int i = 0; i < nseq; i++) got[which[i]][done[which[i]]++] = out[i];
    }
    for (int s = 0; s < 4; s++)
        for (int i = 0; i < steps; i++)
            cr_expect_eq(got[s][i], want[s][i], "%s step %d: %d, golden %d", names[s], i, got[s][i], want[s][i]);
    /* Slot 3 (len007's, its state now 7 + 15 tokens deep) for len031 from its start. */
    int32_t first;
    step_one(r, prompt[1], len[1], 0, table[0], 3, NULL, &first);
    cr_expect_eq(first, want[1][0], "a reused slot starts afresh: %d, golden %d", first, want[1][0]);
    for (int s = 0; s < 4; s++) {
        free(prompt[s]);
        free(want[s]);
        free(table[s]);
    }
    json_decref(g);
    tiny_close(&w, r);
}

/* What the runner checks of the slots, and what it tells the engine. */
Test(qwen3_5, slots_are_validated) {
    ModelWeights w;
    Runner *r;
    open_hybrid(&DENSE, &w, &r, ALL_F32);
    int32_t tokens[2] = {1, 2}, table[2] = {0, 1}, out[2];
    RunnerSeq seqs[2] = {
        {.tokens = tokens, .num_tokens = 2, .block_table = table, .num_blocks = 1, .state_slot = 0, .compute_logits = true},
        {.tokens = tokens, .num_tokens = 2, .block_table = table + 1, .num_blocks = 1, .state_slot = 0, .compute_logits = true}};
    RunnerBatch batch = {.seqs = seqs, .num_seqs = 2};
    Error err = {0};
    cr_expect(runner_step(r, &batch, out, &err) != 0);
    cr_expect(strstr(err.msg, "share state slot"), "%s", err.msg);
    seqs[1].state_slot = r->num_state_slots;
    cr_expect(runner_step(r, &batch, out, &err) != 0);
    cr_expect(strstr(err.msg, "state slot"), "%s", err.msg);
    seqs[1].state_slot = -1;
    cr_expect(runner_step(r, &batch, out, &err) != 0);
    seqs[1].state_slot = 1;
    cr_expect(runner_step(r, &batch, out, &err) == 0, "%s", err.msg);
    seqs[1].restore = true; /* at position 0: nothing to restore */
    seqs[1].restore_checkpoint = 0;
    cr_expect(runner_step(r, &batch, out, &err) != 0);
    cr_expect(strstr(err.msg, "restore"), "%s", err.msg);
    seqs[1].restore = false;
    seqs[0].save = seqs[1].save = true;
    seqs[0].save_checkpoint = seqs[1].save_checkpoint = 1;
    cr_expect(runner_step(r, &batch, out, &err) != 0);
    cr_expect(strstr(err.msg, "save to checkpoint"), "%s", err.msg);
    seqs[1].save_checkpoint = r->num_state_checkpoints;
    cr_expect(runner_step(r, &batch, out, &err) != 0);
    cr_expect(strstr(r->description, "recurrent-state slots"), "%s", r->description);
    tiny_close(&w, r);
}

/* The state slots and checkpoints come out of the KV budget: a slot and a
 * checkpoint per max_num_seqs while they take at most half, else as many as
 * half holds, half of them slots (max_num_seqs with them). */
Test(qwen3_5, state_slots_share_the_kv_budget) {
    ModelWeights w;
    Error err = {0};
    cr_assert(model_weights_load(&w, DENSE.model, &err) == 0, "%s", err.msg);
    size_t slot = cpu_runner_state_slot_bytes(&w.config), block = cpu_runner_block_bytes(&w.config, 16, KV_CACHE_F32);
    cr_assert_gt(slot, 0);
    cr_expect_eq(cpu_runner_state_slot_bytes(&(ModelConfig){.hybrid = false}), 0);
    RunnerOptions o = runner_default_options();
    o.device = "cpu";
    o.block_size = 16;
    o.max_num_batched_tokens = 64;
    o.kv_cache_dtype = KV_CACHE_F32;
    o.dtype = COMPUTE_F32;
    o.max_num_seqs = 4;
    int blocks = (int)((8 * slot + block - 1) / block) + 3; /* the units take under half */
    o.kv_cache_bytes = 8 * slot + (size_t)blocks * block;
    Runner *r = cpu_runner_create(&w, &o, &err);
    cr_assert(r, "%s", err.msg);
    cr_expect_eq(r->num_state_slots, 4);
    cr_expect_eq(r->num_state_checkpoints, 4);
    cr_expect_eq(r->num_kv_blocks, blocks);
    cr_expect_eq(r->options.max_num_seqs, 4);
    runner_destroy(r);
    o.max_num_seqs = 64;
    o.kv_cache_bytes = 18 * slot; /* half holds 9: 4 slots, 5 checkpoints */
    r = cpu_runner_create(&w, &o, &err);
    cr_assert(r, "%s", err.msg);
    cr_expect_eq(r->num_state_slots, 4);
    cr_expect_eq(r->num_state_checkpoints, 5);
    cr_expect_eq(r->options.max_num_seqs, 4);
    cr_expect_eq(r->num_kv_blocks, (int)(9 * slot / block));
    runner_destroy(r);
    o.kv_cache_bytes = 2 * slot + block; /* one unit: a slot, no checkpoint */
    r = cpu_runner_create(&w, &o, &err);
    cr_assert(r, "%s", err.msg);
    cr_expect_eq(r->num_state_slots, 1);
    cr_expect_eq(r->num_state_checkpoints, 0);
    runner_destroy(r);
    o.kv_cache_bytes = slot;
    cr_expect_null(cpu_runner_create(&w, &o, &err));
    cr_expect(strstr(err.msg, "recurrent state"), "%s", err.msg);
    model_weights_free(&w);
}

/* A checkpoint saved after 64 tokens, restored into another slot: the rest
 * of the prompt computed from there equals one call over the whole prompt,
 * at every position. */
Test(qwen3_5, checkpoint_restore_equals_one_call) {
    ModelWeights w;
    Runner *r;
    open_hybrid(&DENSE, &w, &r, ALL_F32);
    cr_assert_gt(r->num_state_checkpoints, 2);
    json_t *g = golden_load_from(&DENSE);
    int n;
    int32_t *ids = json_ids(json_object_get(golden_prompt(g, "len300"), "prompt_ids"), &n), next;
    int32_t *table = table_for(0, (n + 15) / 16);
    float *one = malloc(sizeof(float) * (size_t)n * VOCAB), *rest = malloc(sizeof(float) * (size_t)(n - 64) * VOCAB);
    step_one(r, ids, n, 0, table, 0, one, &next);
    RunnerSeq seq = {.tokens = ids, .num_tokens = 64, .block_table = table, .num_blocks = 4, .state_slot = 1,
                     .save = true, .save_checkpoint = 2, .compute_logits = true};
    RunnerBatch batch = {.seqs = &seq, .num_seqs = 1};
    Error err = {0};
    cr_assert(runner_step(r, &batch, &next, &err) == 0, "%s", err.msg);
    seq = (RunnerSeq){.tokens = ids + 64, .num_tokens = n - 64, .start_pos = 64, .block_table = table,
                      .num_blocks = (n + 15) / 16, .state_slot = 3, .restore = true, .restore_checkpoint = 2,
                      .compute_logits = true};
    batch.all_logits = rest;
    cr_assert(runner_step(r, &batch, &next, &err) == 0, "%s", err.msg);
    double diff = max_abs_diff(one + (size_t)64 * VOCAB, rest, (size_t)(n - 64) * VOCAB);
    cr_log_info("restored from a checkpoint vs one call: max diff %.3g", diff);
    cr_expect(diff <= HYBRID_TOL, "restored run differs by %g", diff);
    free(one);
    free(rest);
    free(table);
    free(ids);
    json_decref(g);
    tiny_close(&w, r);
}
