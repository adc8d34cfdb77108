/*
 * test_cuda_sampler.c - the CUDA sampler token for token against the CPU
 * sampler: the same logits rows (ties, flat, peaked, underflowing, negative;
 * sampler_cases.h) with every parameter set, penalties with histories, and
 * many seeds and positions, all mixed in one launch, must give exactly the
 * tokens sampler_sample() gives; so must rows with logit_bias entries and
 * allowed-token masks. Anything short of equality is a failure:
 * the two share sampler_math.h's arithmetic, so a difference is a bug.
 * Skipped, with the reason, where there is no GPU (the host-side packing
 * test runs everywhere).
 */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"
#include "sampler_cases.h"
#include "cuda/cuda_sampler.h"
#include "engine/sampler.h"

#define PROMPT_LEN 40
#define OUTPUT_LEN 24
#define QWEN3_VOCAB 151936

/* One launch: rows of the given kinds x parameter sets x seeds. */
typedef struct Launch {
    int vocab, rows;
    float *logits;            /* [rows, vocab], the CPU's copy stays untouched */
    SamplingParams *params;   /* [rows] */
    SampleInput *inputs;      /* [rows] */
    int32_t *history;         /* [rows, PROMPT_LEN + OUTPUT_LEN] */
    int *kind;                /* [rows] */
} Launch;

/* with_bias: every other row also carries logit_bias entries. */
static void launch_init(Launch *L, int vocab, const int *kinds, int num_kinds, int seeds,
                        int positions, bool with_bias) {
    SamplingParams sets[64];
    int num_sets = case_params(sets, 64);
    memset(L, 0, sizeof *L);
    L->vocab = vocab;
    L->rows = num_kinds * num_sets * seeds * positions;
    size_t rows = (size_t)L->rows;
    L->logits = malloc(sizeof(float) * rows * (size_t)vocab);
    L->params = malloc(sizeof(SamplingParams) * rows);
    L->inputs = malloc(sizeof(SampleInput) * rows);
    L->history = malloc(sizeof(int32_t) * rows * (PROMPT_LEN + OUTPUT_LEN));
    L->kind = malloc(sizeof(int) * rows);
    cr_assert(L->logits && L->params && L->inputs && L->history && L->kind);
    int r = 0;
    for (int s = 0; s < seeds; s++)
        for (int k = 0; k < num_kinds; k++)
            for (int j = 0; j < num_sets; j++)
                for (int pos = 0; pos < positions; pos++, r++) {
                    float *row = L->logits + (size_t)r * vocab;
                    case_logits(row, vocab, kinds[k], (uint64_t)(s * 7 + vocab));
                    int32_t *h = L->history + (size_t)r * (PROMPT_LEN + OUTPUT_LEN);
                    case_history(h, PROMPT_LEN, h + PROMPT_LEN, OUTPUT_LEN, vocab, (uint64_t)(s + j));
                    L->params[r] = sets[j];
                    if (with_bias && r % 2 == 1) case_logit_bias(&L->params[r], row, vocab, (uint64_t)r);
                    L->kind[r] = kinds[k];
                    L->inputs[r] = (SampleInput){.params = &L->params[r],
                                                 .seed = 0x123456789ull * (uint64_t)(s + 1) + (uint64_t)j,
                                                 .sample_index = (uint32_t)(pos % 2),
                                                 .position = (uint32_t)(pos * 31 + j),
                                                 .prompt = h,
                                                 .prompt_len = PROMPT_LEN,
                                                 .output = h + PROMPT_LEN,
                                                 .output_len = OUTPUT_LEN};
                }
}

static void launch_free(Launch *L) {
    free(L->logits);
    free(L->params);
    free(L->inputs);
    free(L->history);
    free(L->kind);
}

/* Samples R rows of `vocab` logits on the CPU sampler (want) and, in one
 * launch, on the GPU's (got). A row's mask (inputs[r].allowed) must lie in
 * masks, [R, words], which goes to the GPU whole; NULL: no row is masked. */
static void sample_on_both(int vocab, int R, const float *logits, const SampleInput *inputs, const uint32_t *masks,
                           int32_t *want, int32_t *got) {
    const int words = (vocab + 31) / 32;
    const size_t row_bytes = sizeof(float) * (size_t)vocab;
    float *row = malloc(row_bytes);
    CudaSampleRow *rows = malloc(sizeof(CudaSampleRow) * (size_t)R);
    int capacity = R * (PROMPT_LEN + OUTPUT_LEN) + 1, used = 0;
    CudaPenalty *entries = malloc(sizeof(CudaPenalty) * (size_t)capacity);
    int bias_capacity = R * MAX_LOGIT_BIAS, biases_used = 0;
    LogitBias *biases = malloc(sizeof(LogitBias) * (size_t)(bias_capacity > 0 ? bias_capacity : 1));
    cr_assert(row && rows && entries && biases);
    SamplerScratch s;
    Error err = {0};
    cr_assert(sampler_scratch_init(&s, vocab, &err) == 0, "%s", err.msg);
    for (int r = 0; r < R; r++) {
        memcpy(row, logits + (size_t)r * vocab, row_bytes);
        want[r] = sampler_sample(row, &inputs[r], &s, NULL);
        int n = cuda_sample_row_prepare(&rows[r], entries, capacity, used, biases, bias_capacity, biases_used,
                                        &inputs[r], &s);
        cr_assert(n >= 0);
        cr_assert_eq(rows[r].mask_offset, -1, "prepare leaves the mask to the caller");
        if (inputs[r].allowed) {
            cr_assert(masks && inputs[r].allowed >= masks && inputs[r].allowed < masks + (size_t)R * words);
            rows[r].mask_offset = (int32_t)(inputs[r].allowed - masks);
        }
        used += n;
        biases_used += rows[r].bias_count;
    }
    float *d_logits = dev_copy(logits, row_bytes * (size_t)R);
    CudaSampleRow *d_rows = dev_copy(rows, sizeof(CudaSampleRow) * (size_t)R);
    CudaPenalty *d_entries = dev_copy(entries, sizeof(CudaPenalty) * (size_t)(used > 0 ? used : 1));
    LogitBias *d_biases = biases_used > 0 ? dev_copy(biases, sizeof(LogitBias) * (size_t)biases_used) : NULL;
    uint32_t *d_masks = masks ? dev_copy(masks, sizeof(uint32_t) * (size_t)words * (size_t)R) : NULL;
    void *d_work = dev_copy(NULL, cuda_sampler_workspace_bytes(R, vocab) + 1);
    int32_t *d_tokens = dev_poisoned(sizeof(int32_t) * (size_t)R);
    cr_assert(cuda_sample(d_tokens, d_logits, R, vocab, d_rows, d_entries, d_biases, d_masks, d_work, NULL, &err) ==
                  0,
              "%s", err.msg);
    dev_fetch(got, d_tokens, sizeof(int32_t) * (size_t)R);
    void *dev[] = {d_logits, d_rows, d_entries, d_biases, d_masks, d_work, d_tokens};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) cuda_free(dev[i]);
    free(row);
    free(rows);
    free(entries);
    free(biases);
    sampler_scratch_free(&s);
}

/* Samples every row on both samplers and expects the same tokens. */
static void expect_same_tokens(Launch *L) {
    const int V = L->vocab, R = L->rows;
    int32_t *want = malloc(sizeof(int32_t) * (size_t)R), *got = malloc(sizeof(int32_t) * (size_t)R);
    cr_assert(want && got);
    sample_on_both(V, R, L->logits, L->inputs, NULL, want, got);

    int mismatches = 0;
    for (int r = 0; r < R; r++) {
        if (got[r] == want[r]) continue;
        if (++mismatches <= 20) {
            const SamplingParams *p = &L->params[r];
            cr_expect_eq(got[r], want[r],
                         "vocab %d row %d (kind %d; t %g, top_k %d, top_p %.9g, min_p %g, rep %g, "
                         "freq %g, pres %g, %d biases; seed %llu, position %u): GPU %d, CPU %d",
                         V, r, L->kind[r], p->temperature, p->top_k, p->top_p, p->min_p,
                         p->repetition_penalty, p->frequency_penalty, p->presence_penalty,
                         p->num_logit_bias, (unsigned long long)L->inputs[r].seed,
                         L->inputs[r].position, got[r], want[r]);
        }
    }
    cr_expect_eq(mismatches, 0, "%d of %d rows differ (vocab %d)", mismatches, R, V);
    free(want);
    free(got);
}

static const int all_kinds[NUM_ROW_KINDS] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};

Test(cuda_sampler, matches_cpu_at_qwen_vocabulary, .timeout = 300) {
    require_gpu();
    Launch L;
    launch_init(&L, QWEN3_VOCAB, all_kinds, NUM_ROW_KINDS, 2, 1, false);
    expect_same_tokens(&L);
    launch_free(&L);
}

/* logit_bias (case_logit_bias: the top token banned, forced or nudged, and
 * others) on every other row, mixed with the rows without. */
Test(cuda_sampler, logit_bias_rows_match_cpu, .timeout = 300) {
    require_gpu();
    const int sizes[] = {1, 2, 65, 4097, QWEN3_VOCAB};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        Launch L;
        launch_init(&L, sizes[i], all_kinds, NUM_ROW_KINDS, 2, 1, true);
        expect_same_tokens(&L);
        launch_free(&L);
    }
}

Test(cuda_sampler, matches_cpu_at_odd_vocabularies, .timeout = 300) {
    require_gpu();
    const int sizes[] = {1, 2, 63, 64, 65, 1000, 4097, 70001};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        Launch L;
        launch_init(&L, sizes[i], all_kinds, NUM_ROW_KINDS, 2, 1, false);
        expect_same_tokens(&L);
        launch_free(&L);
    }
}

/* Many draws from the same rows: the walk lands everywhere in the tree,
 * including chunk edges. */
Test(cuda_sampler, matches_cpu_over_many_positions, .timeout = 300) {
    require_gpu();
    const int kinds[] = {0, 3, 5, 9};
    Launch L;
    launch_init(&L, 5003, kinds, 4, 1, 40, true);
    expect_same_tokens(&L);
    launch_free(&L);
}

/* A vocabulary whose tree needs more than 48 KB of shared memory. */
Test(cuda_sampler, matches_cpu_at_huge_vocabulary, .timeout = 300) {
    require_gpu();
    const int kinds[] = {0, 1, 3};
    Launch L;
    launch_init(&L, 300007, kinds, 3, 1, 1, false);
    expect_same_tokens(&L);
    launch_free(&L);
}

Test(cuda_sampler, no_rows_is_a_no_op) {
    require_gpu();
    Error err = {0};
    cr_expect(cuda_sample(NULL, NULL, 0, QWEN3_VOCAB, NULL, NULL, NULL, NULL, NULL, NULL, &err) == 0,
              "%s", err.msg);
}

/* ---- structured outputs: the allowed-token mask ---- */

enum { MASK_NONE, MASK_DENSE, MASK_SPARSE, MASK_ONE, MASK_LAST, MASK_ALL, NUM_MASK_KINDS };

/* Row r's mask into m[words] (bits past vocab random: both samplers must
 * ignore them); returns the one allowed token of MASK_ONE / MASK_LAST, else -1. */
static int32_t make_mask(uint32_t *m, int words, int vocab, int kind, uint64_t *st) {
    int32_t only = -1;
    for (int w = 0; w < words; w++) {
        uint32_t bits = (uint32_t)case_next(st);
        switch (kind) {
        case MASK_DENSE: m[w] = bits; break; /* about half */
        case MASK_SPARSE: /* about 1 in 64 */
            m[w] = bits & (uint32_t)case_next(st) & (uint32_t)case_next(st) &
                   (uint32_t)case_next(st) & (uint32_t)case_next(st) & (uint32_t)case_next(st);
            break;
        case MASK_ALL: m[w] = 0xFFFFFFFFu; break;
        default: m[w] = 0; break;
        }
    }
    if (kind == MASK_ONE || kind == MASK_LAST) {
        only = kind == MASK_LAST ? vocab - 1 : (int32_t)(case_next(st) % (uint64_t)vocab);
        m[only / 32] = 1u << (only % 32);
        if (vocab % 32) m[words - 1] |= ~0u << (vocab % 32); /* garbage past vocab */
    }
    if (kind == MASK_DENSE || kind == MASK_SPARSE) { /* at least one allowed token */
        int32_t t = (int32_t)(case_next(st) % (uint64_t)vocab);
        m[t / 32] |= 1u << (t % 32);
    }
    return only;
}

/* Rows of every mask kind x parameter set x logits kind x position, one
 * launch: the GPU's token must be the CPU's (sampler_sample with the same
 * SampleInput.allowed) and an allowed one. Every other row also carries
 * logit_bias entries, +100 on a masked token among them: the bias comes
 * after the mask and cannot revive it. */
static void expect_masked_tokens(int vocab) {
    const int words = (vocab + 31) / 32;
    const int logit_kinds[] = {0, 3, 6}; /* gaussian, ties, large negative */
    const int num_lk = 3, positions = 2;
    SamplingParams sets[8];
    int ns = 0;
    SamplingParams base = sampling_params_default();
    base.temperature = 1.0f;
    sets[ns] = base, sets[ns].temperature = 0.0f, ns++; /* greedy */
    sets[ns] = base, ns++;                              /* plain temperature */
    sets[ns] = base, sets[ns].temperature = 0.7f, sets[ns].top_k = 5, ns++;
    sets[ns] = base, sets[ns].top_p = 0.9f, ns++;
    sets[ns] = base, sets[ns].min_p = 0.1f, sets[ns].top_k = 40, sets[ns].top_p = 0.8f, ns++;
    sets[ns] = base, sets[ns].repetition_penalty = 1.3f, sets[ns].frequency_penalty = 0.5f,
    sets[ns].presence_penalty = -0.25f, ns++;
    sets[ns] = base, sets[ns].repetition_penalty = 0.7f, sets[ns].temperature = 0.0f, ns++;
    const int R = NUM_MASK_KINDS * ns * num_lk * positions;
    const size_t row_bytes = sizeof(float) * (size_t)vocab;

    float *logits = malloc(row_bytes * (size_t)R);
    uint32_t *masks = malloc(sizeof(uint32_t) * (size_t)words * (size_t)R);
    SamplingParams *params = malloc(sizeof(SamplingParams) * (size_t)R);
    SampleInput *inputs = malloc(sizeof(SampleInput) * (size_t)R);
    int32_t *history = malloc(sizeof(int32_t) * (size_t)R * (PROMPT_LEN + OUTPUT_LEN));
    int32_t *only = malloc(sizeof(int32_t) * (size_t)R), *want = malloc(sizeof(int32_t) * (size_t)R),
            *got = malloc(sizeof(int32_t) * (size_t)R);
    cr_assert(logits && masks && params && inputs && history && only && want && got);

    uint64_t st = 0xA11017EDull + (uint64_t)vocab;
    int r = 0;
    for (int mk = 0; mk < NUM_MASK_KINDS; mk++)
        for (int j = 0; j < ns; j++)
            for (int k = 0; k < num_lk; k++)
                for (int pos = 0; pos < positions; pos++, r++) {
                    case_logits(logits + (size_t)r * vocab, vocab, logit_kinds[k], (uint64_t)(r + vocab));
                    uint32_t *m = masks + (size_t)r * words;
                    only[r] = make_mask(m, words, vocab, mk, &st);
                    int32_t *h = history + (size_t)r * (PROMPT_LEN + OUTPUT_LEN);
                    case_history(h, PROMPT_LEN, h + PROMPT_LEN, OUTPUT_LEN, vocab, (uint64_t)r);
                    params[r] = sets[j];
                    if (r % 2 == 1) {
                        case_logit_bias(&params[r], logits + (size_t)r * vocab, vocab, (uint64_t)r);
                        int32_t banned = -1; /* a masked token, forced */
                        for (int t = 0; t < vocab && banned < 0; t++)
                            if (!(m[t / 32] >> (t % 32) & 1u)) banned = t;
                        bool dup = false;
                        for (int b = 0; b < params[r].num_logit_bias; b++) dup |= params[r].logit_bias[b].token == banned;
                        if (mk != MASK_NONE && banned >= 0 && !dup)
                            params[r].logit_bias[params[r].num_logit_bias++] = (LogitBias){banned, 100.0f};
                    }
                    inputs[r] = (SampleInput){.params = &params[r],
                                              .seed = 0x5EEDull * (uint64_t)(r + 1),
                                              .sample_index = (uint32_t)pos,
                                              .position = (uint32_t)(pos * 17 + j),
                                              .prompt = h,
                                              .prompt_len = PROMPT_LEN,
                                              .output = h + PROMPT_LEN,
                                              .output_len = OUTPUT_LEN,
                                              .allowed = mk == MASK_NONE ? NULL : m};
                }
    sample_on_both(vocab, R, logits, inputs, masks, want, got);

    int mismatches = 0;
    for (r = 0; r < R; r++) {
        const SamplingParams *p = &params[r];
        const uint32_t *m = inputs[r].allowed;
        bool ok = got[r] == want[r] && got[r] >= 0 && got[r] < vocab &&
                  (!m || (m[got[r] / 32] >> (got[r] % 32) & 1u)) && (only[r] < 0 || got[r] == only[r]);
        if (ok) continue;
        if (++mismatches <= 20)
            cr_expect(ok,
                      "vocab %d row %d (mask kind %d, only %d; t %g, top_k %d, top_p %g, min_p %g, "
                      "rep %g): GPU %d, CPU %d, CPU's allowed: %d",
                      vocab, r, r / (R / NUM_MASK_KINDS), only[r], p->temperature, p->top_k, p->top_p,
                      p->min_p, p->repetition_penalty, got[r], want[r],
                      !m || (want[r] >= 0 && want[r] < vocab && (m[want[r] / 32] >> (want[r] % 32) & 1u)));
    }
    cr_expect_eq(mismatches, 0, "%d of %d masked rows wrong (vocab %d)", mismatches, R, vocab);
    void *host[] = {logits, masks, params, inputs, history, only, want, got};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

Test(cuda_sampler, masked_rows_match_cpu, .timeout = 300) {
    require_gpu();
    const int sizes[] = {1, 33, 1000, QWEN3_VOCAB}; /* a lone token, partial last words, whole words */
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) expect_masked_tokens(sizes[i]);
}

/* Host-side packing: no GPU needed. */
Test(cuda_sampler, row_prepare_packs_distinct_penalty_tokens) {
    enum { V = 50 };
    SamplerScratch s;
    Error err;
    cr_assert(sampler_scratch_init(&s, V, &err) == 0);
    SamplingParams p = sampling_params_default();
    int32_t prompt[4] = {3, 7, 3, 9}, output[5] = {7, 11, 11, 11, 2};
    SampleInput in = {.params = &p, .seed = 0x1122334455667788ull, .sample_index = 2, .position = 17,
                      .prompt = prompt, .prompt_len = 4, .output = output, .output_len = 5};
    CudaSampleRow row;
    CudaPenalty e[16];
    cr_expect_eq(cuda_sample_row_prepare(&row, e, 16, 3, NULL, 0, 0, &in, &s), 0, "no penalties, no entries");
    cr_expect(row.seed_lo == 0x55667788u && row.seed_hi == 0x11223344u && row.sample_index == 2 &&
              row.position == 17 && row.penalty_offset == 3 && row.penalty_count == 0);
    cr_expect_eq(row.mask_offset, -1, "the caller places the mask");
    cr_expect_eq(row.bias_count, 0, "no logit_bias, no bias entries");

    p.frequency_penalty = 0.5f; /* output tokens only */
    cr_expect_eq(cuda_sample_row_prepare(&row, e, 16, 0, NULL, 0, 0, &in, &s), 3);
    int count[V] = {0};
    for (int i = 0; i < 3; i++) count[e[i].token] = e[i].output_count;
    cr_expect(count[7] == 1 && count[11] == 3 && count[2] == 1);

    p.repetition_penalty = 1.2f; /* prompt and output */
    cr_expect_eq(cuda_sample_row_prepare(&row, e, 16, 5, NULL, 0, 0, &in, &s), 5);
    cr_expect_eq(row.penalty_offset, 5);
    cr_expect_eq(row.penalty_count, 5);
    memset(count, 0, sizeof count);
    int present[V] = {0};
    for (int i = 5; i < 10; i++) {
        cr_expect(!present[e[i].token], "token %d twice", e[i].token);
        present[e[i].token] = 1;
        count[e[i].token] = e[i].output_count;
        cr_expect_eq(e[i].in_prompt_or_output, 1);
    }
    cr_expect(present[3] && present[7] && present[9] && present[11] && present[2]);
    cr_expect(count[3] == 0 && count[9] == 0 && count[7] == 1 && count[11] == 3);

    cr_expect_eq(cuda_sample_row_prepare(&row, e, 16, 12, NULL, 0, 0, &in, &s), -1, "5 entries do not fit in 4");
    for (int t = 0; t < V; t++) cr_assert(s.counts[t] == 0 && s.seen[t] == 0, "scratch left dirty");
    sampler_scratch_free(&s);
}

Test(cuda_sampler, row_prepare_packs_logit_bias) {
    enum { V = 50 };
    SamplerScratch s;
    Error err;
    cr_assert(sampler_scratch_init(&s, V, &err) == 0);
    SamplingParams p = sampling_params_default();
    p.num_logit_bias = 3;
    p.logit_bias[0] = (LogitBias){4, 100.0f};
    p.logit_bias[1] = (LogitBias){49, -2.5f};
    p.logit_bias[2] = (LogitBias){0, 0.125f};
    p.repetition_penalty = 1.3f;
    int32_t prompt[2] = {3, 3};
    SampleInput in = {.params = &p, .prompt = prompt, .prompt_len = 2};
    CudaSampleRow row;
    CudaPenalty e[4];
    LogitBias b[8];
    memset(b, 0xAB, sizeof b);
    cr_expect_eq(cuda_sample_row_prepare(&row, e, 4, 1, b, 8, 2, &in, &s), 1, "one distinct penalty token");
    cr_expect(row.bias_offset == 2 && row.bias_count == 3, "offset %d, count %d", row.bias_offset, row.bias_count);
    cr_expect(memcmp(&b[2], p.logit_bias, sizeof(LogitBias) * 3) == 0, "entries copied in order");
    LogitBias untouched;
    memset(&untouched, 0xAB, sizeof untouched);
    cr_expect(memcmp(&b[1], &untouched, sizeof untouched) == 0 && memcmp(&b[5], &untouched, sizeof untouched) == 0,
              "nothing written outside the row's entries");
    cr_expect(row.penalty_offset == 1 && row.penalty_count == 1 && e[1].token == 3);

    cr_expect_eq(cuda_sample_row_prepare(&row, e, 4, 0, b, 8, 6, &in, &s), -2, "3 biases do not fit in 2");
    cr_expect_eq(cuda_sample_row_prepare(&row, e, 4, 0, b, 8, 5, &in, &s), 1, "3 fit in 3");
    cr_expect_eq(cuda_sample_row_prepare(&row, e, 4, 4, b, 8, 0, &in, &s), -1, "the penalty entry does not fit");
    for (int t = 0; t < V; t++) cr_assert(s.counts[t] == 0 && s.seen[t] == 0, "scratch left dirty");
    sampler_scratch_free(&s);
}

/* ---- the two-pass path: greedy over many blocks ---- */

/* Samples R rows of `vocab` logits on both samplers in one launch and
 * expects the same tokens, and known[r] too where it is >= 0. masks: [R,
 * words] or NULL; a row's mask is used when has_mask[r]. Histories for the
 * penalties come from case_history. */
static void expect_rows(int vocab, int R, const float *logits, const SamplingParams *params,
                        const uint32_t *masks, const bool *has_mask, const int32_t *known) {
    const int words = (vocab + 31) / 32;
    SampleInput *inputs = malloc(sizeof(SampleInput) * (size_t)R);
    int32_t *history = malloc(sizeof(int32_t) * (size_t)R * (PROMPT_LEN + OUTPUT_LEN));
    int32_t *want = malloc(sizeof(int32_t) * (size_t)R), *got = malloc(sizeof(int32_t) * (size_t)R);
    cr_assert(inputs && history && want && got);
    for (int r = 0; r < R; r++) {
        int32_t *h = history + (size_t)r * (PROMPT_LEN + OUTPUT_LEN);
        case_history(h, PROMPT_LEN, h + PROMPT_LEN, OUTPUT_LEN, vocab, (uint64_t)r * 3 + 1);
        const bool masked = masks && has_mask[r];
        inputs[r] = (SampleInput){.params = &params[r],
                                  .seed = 0xC0FFEEull * (uint64_t)(r + 1),
                                  .sample_index = (uint32_t)(r % 3),
                                  .position = (uint32_t)(r * 13),
                                  .prompt = h,
                                  .prompt_len = PROMPT_LEN,
                                  .output = h + PROMPT_LEN,
                                  .output_len = OUTPUT_LEN,
                                  .allowed = masked ? masks + (size_t)r * words : NULL};
    }
    sample_on_both(vocab, R, logits, inputs, masks, want, got);
    int wrong = 0;
    for (int r = 0; r < R; r++) {
        bool ok = got[r] == want[r] && (!known || known[r] < 0 || want[r] == known[r]);
        if (!ok && ++wrong <= 20)
            cr_expect(ok, "vocab %d row %d of %d (t %g, top_k %d, top_p %g, rep %g, %d biases, mask %d): "
                          "GPU %d, CPU %d, expected %d",
                      vocab, r, R, params[r].temperature, params[r].top_k, params[r].top_p,
                      params[r].repetition_penalty, params[r].num_logit_bias,
                      masks && has_mask[r], got[r], want[r], known ? known[r] : -1);
    }
    cr_expect_eq(wrong, 0, "%d of %d rows wrong (vocab %d)", wrong, R, vocab);
    free(inputs);
    free(history);
    free(want);
    free(got);
}

/* Sets l[i] = top for each listed index inside the row; returns the lowest. */
static int32_t put_max(float *l, int vocab, float top, const int *at, int n) {
    int32_t lowest = -1;
    for (int j = 0; j < n; j++)
        if (at[j] >= 0 && at[j] < vocab) {
            l[at[j]] = top;
            if (lowest < 0 || at[j] < lowest) lowest = at[j];
        }
    return lowest;
}

enum { TIE_SPREAD, TIE_EDGES, TIE_LAST, TIE_FIRST_LAST, TIE_ALL_EQUAL, TIE_ALL_NEG_INF,
       TIE_ONLY_LAST_FINITE, TIE_SIGNED_ZERO, TIE_MASKED_MAX, NUM_TIE_KINDS };

/* Greedy rows whose maximum sits where the slices of the first pass meet:
 * ties in different blocks (the lowest id wins), at every power-of-two
 * boundary, in the last element, in a row of equal values, of -inf, of -0
 * and +0; and a masked maximum with the allowed one tied across blocks. */
static void expect_greedy_ties(int vocab) {
    const int words = (vocab + 31) / 32, R = NUM_TIE_KINDS;
    float *logits = malloc(sizeof(float) * (size_t)vocab * R);
    uint32_t *masks = malloc(sizeof(uint32_t) * (size_t)words * R);
    SamplingParams *params = malloc(sizeof(SamplingParams) * R);
    bool has_mask[NUM_TIE_KINDS] = {0};
    int32_t known[NUM_TIE_KINDS];
    cr_assert(logits && masks && params);
    uint64_t st = 0x71E5ull + (uint64_t)vocab;
    for (int r = 0; r < R; r++) {
        float *l = logits + (size_t)r * vocab;
        uint32_t *m = masks + (size_t)r * words;
        for (int i = 0; i < vocab; i++) l[i] = (float)case_gauss(&st);
        for (int w = 0; w < words; w++) m[w] = 0xFFFFFFFFu;
        params[r] = sampling_params_default();
        params[r].temperature = 0.0f;
        switch (r) {
        case TIE_SPREAD: { /* in several blocks, listed out of order */
            int at[] = {vocab - 1, vocab / 2 + 1, 3 * vocab / 4, vocab / 3 + 7, vocab - 2049};
            known[r] = put_max(l, vocab, 9.0f, at, 5);
            break;
        }
        case TIE_EDGES: { /* both sides of 64-token chunks and of power-of-two slices */
            int at[32], n = 0;
            for (int b = 1 << 16; b >= 64 && n < 30; b /= 2) at[n++] = b, at[n++] = b - 1;
            known[r] = put_max(l, vocab, 9.0f, at, n);
            break;
        }
        case TIE_LAST: {
            int at[] = {vocab - 1};
            known[r] = put_max(l, vocab, 9.0f, at, 1);
            break;
        }
        case TIE_FIRST_LAST: {
            int at[] = {vocab - 1, 0};
            known[r] = put_max(l, vocab, 9.0f, at, 2);
            break;
        }
        case TIE_ALL_EQUAL:
            for (int i = 0; i < vocab; i++) l[i] = 0.5f;
            known[r] = 0;
            break;
        case TIE_ALL_NEG_INF:
            for (int i = 0; i < vocab; i++) l[i] = -INFINITY;
            known[r] = 0;
            break;
        case TIE_ONLY_LAST_FINITE:
            for (int i = 0; i < vocab - 1; i++) l[i] = -INFINITY;
            l[vocab - 1] = -1e30f;
            known[r] = vocab - 1;
            break;
        case TIE_SIGNED_ZERO: /* -0 == +0: the first zero wins, whichever its sign */
            for (int i = 0; i < vocab; i++) l[i] = -1.0f - (float)(i % 7);
            for (int i = vocab / 2; i < vocab; i += 4099) l[i] = 0.0f;
            if (vocab > 5) l[vocab - 5] = -0.0f;
            l[vocab - 1] = 0.0f;
            known[r] = -1; /* the CPU decides */
            break;
        case TIE_MASKED_MAX: { /* the max is masked; the allowed runner-up is tied in two blocks */
            l[vocab / 2] = 20.0f;
            m[(vocab / 2) / 32] &= ~(1u << ((vocab / 2) % 32));
            int at[] = {vocab - 1, vocab / 2 + 1 < vocab ? vocab / 2 + 1 : vocab - 1};
            known[r] = vocab == 1 ? 0 : put_max(l, vocab, 9.0f, at, 2);
            has_mask[r] = true;
            break;
        }
        }
    }
    expect_rows(vocab, R, logits, params, masks, has_mask, known);
    /* the same rows with penalties and a nudging bias: the CPU decides */
    for (int r = 0; r < R; r++) {
        params[r].repetition_penalty = 1.25f;
        params[r].presence_penalty = 0.5f;
        case_logit_bias(&params[r], logits + (size_t)r * vocab, vocab, (uint64_t)r);
    }
    expect_rows(vocab, R, logits, params, masks, has_mask, NULL);
    free(logits);
    free(masks);
    free(params);
}

Test(cuda_sampler, greedy_ties_across_blocks, .timeout = 300) {
    require_gpu();
    const int sizes[] = {QWEN3_VOCAB, 1000, 1, 65537, 2048, 2049, 4095, 300007};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) expect_greedy_ties(sizes[i]);
}

/* Batches of 1, 3 and 256 rows, greedy and sampled rows mixed, every other
 * row with logit_bias entries, every third with a mask. */
static void expect_mixed_batch(int vocab, int R) {
    const int words = (vocab + 31) / 32;
    SamplingParams sets[64];
    const int num_sets = case_params(sets, 64);
    float *logits = malloc(sizeof(float) * (size_t)vocab * (size_t)R);
    uint32_t *masks = malloc(sizeof(uint32_t) * (size_t)words * (size_t)R);
    SamplingParams *params = malloc(sizeof(SamplingParams) * (size_t)R);
    bool *has_mask = malloc(sizeof(bool) * (size_t)R);
    cr_assert(logits && masks && params && has_mask);
    uint64_t st = 0xBA7C4ull + (uint64_t)R;
    for (int r = 0; r < R; r++) {
        float *l = logits + (size_t)r * vocab;
        case_logits(l, vocab, r % NUM_ROW_KINDS, (uint64_t)(r * 5 + vocab));
        params[r] = sets[(r * 7) % num_sets];
        if (r % 4 == 0) params[r].temperature = 0.0f; /* more greedy rows */
        if (r % 2 == 1) case_logit_bias(&params[r], l, vocab, (uint64_t)r);
        has_mask[r] = r % 3 == 2;
        uint32_t *m = masks + (size_t)r * words;
        for (int w = 0; w < words; w++)
            m[w] = (uint32_t)case_next(&st) | (uint32_t)case_next(&st); /* about 3 in 4 */
        int32_t keep = (int32_t)(case_next(&st) % (uint64_t)vocab);
        m[keep / 32] |= 1u << (keep % 32);
    }
    expect_rows(vocab, R, logits, params, masks, has_mask, NULL);
    free(logits);
    free(masks);
    free(params);
    free(has_mask);
}

Test(cuda_sampler, mixed_batches_match_cpu, .timeout = 600) {
    require_gpu();
    const int batches[] = {1, 3, 256};
    for (size_t i = 0; i < sizeof batches / sizeof *batches; i++) {
        expect_mixed_batch(QWEN3_VOCAB, batches[i]);
        expect_mixed_batch(65537, batches[i]);
        expect_mixed_batch(1000, batches[i]);
    }
}

/* NANOVLLM_CUDA_LEGACY=sampler (read once per process: criterion runs each
 * test in its own) keeps the one-kernel path, token for token the same. */
Test(cuda_sampler, legacy_path_matches_cpu, .timeout = 300) {
    require_gpu();
    setenv("NANOVLLM_CUDA_LEGACY", "sampler", 1);
    expect_greedy_ties(QWEN3_VOCAB);
    expect_mixed_batch(QWEN3_VOCAB, 3);
    expect_mixed_batch(1000, 17);
}
