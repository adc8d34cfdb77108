/*
 * test_cuda_decode_attention.c - the decode attention kernel
 * (cuda/cuda_decode_attention.cu) against a float64 softmax over the paged
 * cache and against the previous kernel (cuda_attention), at the lengths
 * where its key ranges turn (1, 31-33, 255-257 keys, long contexts), every
 * head shape it serves (groups of 1, 2, 5, 8 and 16; head_dim 64, 128,
 * 256), and split counts from none to the largest, each launched twice so
 * that a split counter left non-zero would show; groups of 3 and more on
 * the tensor-core kernel and on the FMA one. Skipped without a GPU, except
 * the split choice, which is arithmetic.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_test.h"

static void check_close(const uint16_t *out, const float *want, size_t n, const AttnCase *c, const char *what,
                        int splits) {
    float *got = widen_bf16(out, n);
    for (size_t i = 0; i < n; i++) {
        cr_assert(!isnan(got[i]), "%s: output %zu never written (%d/%d x %d, %d splits)", what, i, c->nh, c->nkv,
                  c->D, splits);
        cr_assert(fabsf(got[i] - want[i]) <= 0.01f + 0.01f * fabsf(want[i]), "%s (%d/%d x %d, %d splits): out[%zu] %g vs %g",
                  what, c->nh, c->nkv, c->D, splits, i, got[i], want[i]);
    }
    double rel = rel_error(got, want, n);
    cr_expect(rel < 5e-3, "%s (%d/%d heads x %d, %d splits): relative error %g", what, c->nh, c->nkv, c->D, splits,
              rel);
    free(got);
}

static void run_case(const DecodeCase *dc, uint64_t seed, const int *split_counts, int num_split_counts) {
    const AttnCase case_ = decode_attn_case(dc), *c = &case_;
    const int S = c->num_seqs;
    size_t cache = (size_t)c->num_blocks * c->block_size * c->nkv * c->D, nq = (size_t)S * c->nh * c->D;
    float *q_f, *k_f, *v_f;
    uint16_t *q = random_bf16(nq, 2.0f, seed, &q_f);
    uint16_t *k = random_bf16(cache, 2.0f, seed + 1, &k_f), *v = random_bf16(cache, 1.0f, seed + 2, &v_f);
    int32_t *tables[ATTN_MAX_SEQS], flat[4096];
    CudaAttnSeq seqs[ATTN_MAX_SEQS] = {{0}};
    CudaAttnItem items[ATTN_MAX_SEQS] = {{0}};
    const int at = attention_tables(c, flat, 4096, tables, seqs);
    attention_items(c, 1, items, ATTN_MAX_SEQS);
    float *want = malloc(sizeof(float) * nq);
    uint16_t *out = malloc(sizeof(uint16_t) * nq);
    cr_assert(want && out);
    attention_reference(want, q_f, k_f, v_f, c, tables);

    uint16_t *d_q = dev_copy(q, nq * 2), *d_k = dev_copy(k, cache * 2), *d_v = dev_copy(v, cache * 2);
    CudaAttnSeq *d_seqs = dev_copy(seqs, sizeof seqs);
    CudaAttnItem *d_items = dev_copy(items, sizeof items);
    int32_t *d_tables = dev_copy(flat, sizeof(int32_t) * (size_t)(at > 0 ? at : 1));
    const int max_blocks = cuda_decode_attention_blocks(S, c->nh, c->nkv) * 64;
    float *d_split = dev_poisoned(cuda_attention_split_workspace_bytes(c->D, max_blocks));
    int *d_counters = dev_copy(NULL, cuda_decode_attention_counters_bytes(max_blocks));
    Error err = {0};
    int *zeros = calloc((size_t)max_blocks, sizeof(int));
    cr_assert(zeros && cuda_upload(d_counters, zeros, cuda_decode_attention_counters_bytes(max_blocks), &err) == 0,
              "%s", err.msg);
    free(zeros);
    for (int i = 0; i < num_split_counts; i++) {
        const int splits = split_counts[i];
        for (int launch = 0; launch < 2; launch++) { /* the second finds the counters back at zero */
            uint16_t *d_out = dev_poisoned(nq * 2);
            cr_assert(cuda_decode_attention(d_out, d_q, d_k, d_v, d_seqs, d_items, S, d_tables, c->nh, c->nkv, c->D,
                                            c->block_size, splits, d_split, d_counters, NULL, &err) == 0,
                      "%s", err.msg);
            dev_fetch(out, d_out, nq * 2);
            cuda_free(d_out);
            check_close(out, want, nq, c, launch ? "decode attention, relaunched" : "decode attention", splits);
        }
    }
    /* the previous kernel on the same inputs */
    uint16_t *d_out = dev_poisoned(nq * 2);
    cr_assert(cuda_attention(d_out, d_q, d_k, d_v, d_seqs, d_items, S, d_tables, c->nh, c->nkv, c->D,
                             c->block_size, 1, NULL, NULL, &err) == 0,
              "%s", err.msg);
    dev_fetch(out, d_out, nq * 2);
    check_close(out, want, nq, c, "previous kernel", 1);
    void *dev[] = {d_q, d_k, d_v, d_seqs, d_items, d_tables, d_split, d_counters, d_out};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cuda_free(dev[i]);
    void *host[] = {q, k, v, q_f, k_f, v_f, want, out};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

static const int ALL_SPLITS[] = {1, 2, 3, 7, 64};

Test(cuda_decode_attention, odd_lengths_qwen3_0_6b_shape, .timeout = 120) {
    require_gpu();
    DecodeCase c = {16, 8, 128, 16, 200, 8, {1, 31, 32, 33, 255, 256, 257, 1000}};
    run_case(&c, 10, ALL_SPLITS, 5);
    DecodeCase big_blocks = {16, 8, 128, 256, 8, 3, {1, 257, 700}};
    run_case(&big_blocks, 20, ALL_SPLITS, 5);
}

Test(cuda_decode_attention, long_context, .timeout = 120) {
    require_gpu();
    DecodeCase c = {16, 8, 128, 256, 66, 1, {16384}};
    static const int splits[] = {1, 16, 33, 64};
    run_case(&c, 30, splits, 4);
}

Test(cuda_decode_attention, every_group_and_head_dim, .timeout = 120) {
    require_gpu();
    DecodeCase g1 = {4, 4, 64, 16, 80, 3, {1, 33, 600}};
    run_case(&g1, 40, ALL_SPLITS, 5);
    DecodeCase g5 = {40, 8, 128, 16, 80, 3, {2, 65, 777}}; /* Qwen3-14B: 5 heads in a block of 8 */
    run_case(&g5, 50, ALL_SPLITS, 5);
    DecodeCase g8 = {32, 4, 128, 16, 80, 3, {1, 257, 900}}; /* Qwen3-30B-A3B */
    run_case(&g8, 60, ALL_SPLITS, 5);
    DecodeCase g16 = {64, 4, 128, 32, 40, 2, {31, 1000}}; /* two blocks per KV head */
    run_case(&g16, 70, ALL_SPLITS, 5);
    DecodeCase d64 = {6, 2, 64, 64, 40, 2, {129, 200}};
    run_case(&d64, 80, ALL_SPLITS, 5);
    DecodeCase d256 = {8, 8, 256, 256, 8, 2, {1, 1000}};
    run_case(&d256, 90, ALL_SPLITS, 5);
    DecodeCase block48 = {16, 8, 128, 48, 80, 3, {1, 97, 1000}}; /* not a power of two: divisions */
    run_case(&block48, 95, ALL_SPLITS, 5);
}

/* Groups of 3 and more run on the tensor cores (cuda_decode_attention_mma.cu,
 * P in bf16: within 2^-9 of max |v| = 1 here, inside check_close's 0.01)
 * at head_dim 64 and 128; the same shapes once more on the FMA kernel
 * (NANOVLLM_CUDA_LEGACY=bf16decode, read once per process: criterion runs
 * each test in its own). */
static void wide_groups(void) {
    DecodeCase g4 = {32, 8, 128, 16, 80, 4, {1, 17, 65, 777}}; /* Qwen3-4B/8B */
    run_case(&g4, 100, ALL_SPLITS, 5);
    DecodeCase g4d64 = {8, 2, 64, 16, 80, 4, {15, 16, 33, 500}};
    run_case(&g4d64, 105, ALL_SPLITS, 5);
    DecodeCase g8_block48 = {32, 4, 128, 48, 80, 3, {1, 97, 1000}}; /* a group of 16 keys in one block, 48 % 16 == 0 */
    run_case(&g8_block48, 110, ALL_SPLITS, 5);
    DecodeCase g8_long = {32, 4, 128, 256, 66, 1, {16384}};
    static const int splits[] = {1, 16, 64};
    run_case(&g8_long, 115, splits, 3);
}

Test(cuda_decode_attention, wide_groups_on_the_tensor_cores, .timeout = 180) {
    require_gpu();
    cr_assert(cuda_decode_attention_bf16_tensor_cores(128, 4) && !cuda_decode_attention_bf16_tensor_cores(128, 2) &&
              !cuda_decode_attention_bf16_tensor_cores(256, 8));
    wide_groups();
}

Test(cuda_decode_attention, wide_groups_on_fmas, .timeout = 180) {
    require_gpu();
    setenv("NANOVLLM_CUDA_LEGACY", "bf16decode", 1);
    cr_assert(!cuda_decode_attention_bf16_tensor_cores(128, 8), "bf16decode keeps the FMA kernel");
    wide_groups();
}

/* Pure arithmetic: runs without a GPU in CUDA builds. */
Test(cuda_decode_attention, split_choice) {
    for (int batch = 1; batch <= 256; batch++)
        for (int keys = 1; keys <= 40960; keys = keys * 3 + 1) {
            int blocks = cuda_decode_attention_blocks(batch, 16, 8);
            int s = cuda_decode_attention_choose_splits(batch, 16, 8, keys, 132, CUDA_MAX_SPLIT_BLOCKS);
            cr_assert(s >= 1 && s <= 64 && (s == 1 || s * blocks <= CUDA_MAX_SPLIT_BLOCKS), "%d x %d: %d", batch,
                      keys, s);
            cr_assert(s == 1 || (keys + 63) / 64 >= s, "%d keys: %d splits of under 64 keys", keys, s);
        }
    cr_expect_eq(cuda_decode_attention_choose_splits(1, 16, 8, 40960, 132, 4096), 64, "one long sequence");
    cr_expect_eq(cuda_decode_attention_choose_splits(256, 16, 8, 40960, 132, 4096), 1, "a full batch");
    cr_expect_eq(cuda_decode_attention_choose_splits(1, 16, 8, 300, 132, 4096), 5, "short: 64 keys a split");
    cr_expect_eq(cuda_decode_attention_choose_splits(16, 16, 8, 2048, 132, 4096), 4, "one wave: 512 of 528 places");
    cr_expect_eq(cuda_decode_attention_blocks(3, 64, 4), 3 * 4 * 2, "groups of 16: two blocks per KV head");
    Error err = {0};
    cr_expect(cuda_decode_attention(NULL, NULL, NULL, NULL, NULL, NULL, 1, NULL, 16, 8, 128, 16, 2, NULL, NULL, NULL,
                                    &err) == -1,
              "splits without a workspace are refused");
}
