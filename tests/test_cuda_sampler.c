/*
 * test_cuda_sampler.c - the CUDA sampler token for token against the CPU
 * sampler: the same logits rows (ties, flat, peaked, underflowing, negative;
 * sampler_cases.h) with every parameter set, penalties with histories, and
 * many seeds and positions, all mixed in one launch, must give exactly the
 * tokens sampler_sample() gives. Anything short of equality is a failure:
 * the two share sampler_math.h's arithmetic, so a difference is a bug.
 * Skipped, with the reason, where there is no GPU (the host-side packing
 * test runs everywhere).
 */
#include <criterion/criterion.h>
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

static void launch_init(Launch *L, int vocab, const int *kinds, int num_kinds, int seeds,
                        int positions) {
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

/* Samples every row on both samplers and expects the same tokens. */
static void expect_same_tokens(Launch *L) {
    const int V = L->vocab, R = L->rows;
    const size_t row_bytes = sizeof(float) * (size_t)V;
    SamplerScratch s;
    Error err = {0};
    cr_assert(sampler_scratch_init(&s, V, &err) == 0, "%s", err.msg);

    /* CPU tokens, and the rows packed for the GPU */
    int32_t *want = malloc(sizeof(int32_t) * (size_t)R), *got = malloc(sizeof(int32_t) * (size_t)R);
    float *row = malloc(row_bytes);
    CudaSampleRow *rows = malloc(sizeof(CudaSampleRow) * (size_t)R);
    int capacity = R * (PROMPT_LEN + OUTPUT_LEN) + 1, used = 0;
    CudaPenalty *entries = malloc(sizeof(CudaPenalty) * (size_t)capacity);
    cr_assert(want && got && row && rows && entries);
    for (int r = 0; r < R; r++) {
        memcpy(row, L->logits + (size_t)r * V, row_bytes);
        want[r] = sampler_sample(row, &L->inputs[r], &s, NULL);
        int n = cuda_sample_row_prepare(&rows[r], entries, capacity, used, &L->inputs[r], &s);
        cr_assert(n >= 0);
        used += n;
    }

    float *d_logits = dev_copy(L->logits, row_bytes * (size_t)R);
    CudaSampleRow *d_rows = dev_copy(rows, sizeof(CudaSampleRow) * (size_t)R);
    CudaPenalty *d_entries = dev_copy(entries, sizeof(CudaPenalty) * (size_t)(used > 0 ? used : 1));
    void *d_work = dev_copy(NULL, cuda_sampler_workspace_bytes(R, V) + 1);
    int32_t *d_tokens = dev_poisoned(sizeof(int32_t) * (size_t)R);
    cr_assert(cuda_sample(d_tokens, d_logits, R, V, d_rows, d_entries, d_work, NULL, &err) == 0,
              "%s", err.msg);
    dev_fetch(got, d_tokens, sizeof(int32_t) * (size_t)R);

    int mismatches = 0;
    for (int r = 0; r < R; r++) {
        if (got[r] == want[r]) continue;
        if (++mismatches <= 20) {
            const SamplingParams *p = &L->params[r];
            cr_expect_eq(got[r], want[r],
                         "vocab %d row %d (kind %d; t %g, top_k %d, top_p %.9g, min_p %g, rep %g, "
                         "freq %g, pres %g; seed %llu, position %u): GPU %d, CPU %d",
                         V, r, L->kind[r], p->temperature, p->top_k, p->top_p, p->min_p,
                         p->repetition_penalty, p->frequency_penalty, p->presence_penalty,
                         (unsigned long long)L->inputs[r].seed, L->inputs[r].position, got[r],
                         want[r]);
        }
    }
    cr_expect_eq(mismatches, 0, "%d of %d rows differ (vocab %d)", mismatches, R, V);

    cuda_free(d_logits);
    cuda_free(d_rows);
    cuda_free(d_entries);
    cuda_free(d_work);
    cuda_free(d_tokens);
    free(want);
    free(got);
    free(row);
    free(rows);
    free(entries);
    sampler_scratch_free(&s);
}

static const int all_kinds[NUM_ROW_KINDS] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};

Test(cuda_sampler, matches_cpu_at_qwen_vocabulary, .timeout = 300) {
    require_gpu();
    Launch L;
    launch_init(&L, QWEN3_VOCAB, all_kinds, NUM_ROW_KINDS, 2, 1);
    expect_same_tokens(&L);
    launch_free(&L);
}

Test(cuda_sampler, matches_cpu_at_odd_vocabularies, .timeout = 300) {
    require_gpu();
    const int sizes[] = {1, 2, 63, 64, 65, 1000, 4097, 70001};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        Launch L;
        launch_init(&L, sizes[i], all_kinds, NUM_ROW_KINDS, 2, 1);
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
    launch_init(&L, 5003, kinds, 4, 1, 40);
    expect_same_tokens(&L);
    launch_free(&L);
}

/* A vocabulary whose tree needs more than 48 KB of shared memory. */
Test(cuda_sampler, matches_cpu_at_huge_vocabulary, .timeout = 300) {
    require_gpu();
    const int kinds[] = {0, 1, 3};
    Launch L;
    launch_init(&L, 300007, kinds, 3, 1, 1);
    expect_same_tokens(&L);
    launch_free(&L);
}

Test(cuda_sampler, no_rows_is_a_no_op) {
    require_gpu();
    Error err = {0};
    cr_expect(cuda_sample(NULL, NULL, 0, QWEN3_VOCAB, NULL, NULL, NULL, NULL, &err) == 0, "%s", err.msg);
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
    cr_expect_eq(cuda_sample_row_prepare(&row, e, 16, 3, &in, &s), 0, "no penalties, no entries");
    cr_expect(row.seed_lo == 0x55667788u && row.seed_hi == 0x11223344u && row.sample_index == 2 &&
              row.position == 17 && row.penalty_offset == 3 && row.penalty_count == 0);

    p.frequency_penalty = 0.5f; /* output tokens only */
    cr_expect_eq(cuda_sample_row_prepare(&row, e, 16, 0, &in, &s), 3);
    int count[V] = {0};
    for (int i = 0; i < 3; i++) count[e[i].token] = e[i].output_count;
    cr_expect(count[7] == 1 && count[11] == 3 && count[2] == 1);

    p.repetition_penalty = 1.2f; /* prompt and output */
    cr_expect_eq(cuda_sample_row_prepare(&row, e, 16, 5, &in, &s), 5);
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

    cr_expect_eq(cuda_sample_row_prepare(&row, e, 16, 12, &in, &s), -1, "5 entries do not fit in 4");
    for (int t = 0; t < V; t++) cr_assert(s.counts[t] == 0 && s.seen[t] == 0, "scratch left dirty");
    sampler_scratch_free(&s);
}
