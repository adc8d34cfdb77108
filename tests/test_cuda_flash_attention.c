/*
 * test_cuda_flash_attention.c - the mma.sync prefill attention
 * (cuda/cuda_flash_attention.cu) against a float64 causal softmax over the
 * paged cache: prompts of 1, 15-17, 63-65, 255-257 and 4,097 tokens, chunks
 * on a cached prefix, decode tokens in the same batch, groups of 1 to 16
 * query heads, head_dim 64 and 128, block sizes 16 and 256, and scattered
 * block tables. Outputs are poisoned with NaN, so a row never written
 * fails. Skipped without a GPU.
 */
#include <criterion/criterion.h>

#include "cuda_test.h"

static void flash_case(const AttnCase *c, uint64_t seed) {
    int T = 0;
    for (int s = 0; s < c->num_seqs; s++) T += c->len[s];
    const size_t cache = (size_t)c->num_blocks * c->block_size * c->nkv * c->D, nq = (size_t)T * c->nh * c->D;
    float *q_f, *k_f, *v_f;
    uint16_t *q = random_bf16(nq, 2.0f, seed, &q_f);
    uint16_t *k = random_bf16(cache, 2.0f, seed + 1, &k_f), *v = random_bf16(cache, 1.0f, seed + 2, &v_f);
    int32_t *tables[ATTN_MAX_SEQS], *flat = malloc(sizeof(int32_t) * c->num_blocks);
    CudaAttnSeq seqs[ATTN_MAX_SEQS] = {{0}};
    const int tile = cuda_flash_attention_tile_tokens(c->nh, c->nkv), item_cap = T / tile + 2 * c->num_seqs;
    CudaAttnItem *items = malloc(sizeof(CudaAttnItem) * item_cap);
    cr_assert(flat && items);
    const int at = attention_tables(c, flat, c->num_blocks, tables, seqs);
    const int n_items = attention_items(c, tile, items, item_cap);
    float *want = malloc(sizeof(float) * nq);
    uint16_t *out = malloc(sizeof(uint16_t) * nq);
    cr_assert(want && out);
    attention_reference(want, q_f, k_f, v_f, c, tables);
    uint16_t *d_q = dev_copy(q, nq * 2), *d_k = dev_copy(k, cache * 2), *d_v = dev_copy(v, cache * 2);
    CudaAttnSeq *d_seqs = dev_copy(seqs, sizeof seqs);
    CudaAttnItem *d_items = dev_copy(items, sizeof(CudaAttnItem) * n_items);
    int32_t *d_tables = dev_copy(flat, sizeof(int32_t) * (size_t)at);
    uint16_t *d_out = dev_poisoned(nq * 2);
    Error err = {0};
    cr_assert(cuda_flash_attention(d_out, d_q, d_k, d_v, d_seqs, d_items, n_items, d_tables, c->nh, c->nkv, c->D,
                                   c->block_size, NULL, &err) == 0,
              "%s", err.msg);
    dev_fetch(out, d_out, nq * 2);
    float *got = widen_bf16(out, nq);
    for (size_t i = 0; i < nq; i++) {
        cr_assert(!isnan(got[i]), "output %zu never written (%d/%d x %d)", i, c->nh, c->nkv, c->D);
        cr_assert(fabsf(got[i] - want[i]) <= 0.02f + 0.01f * fabsf(want[i]), "%d/%d x %d: out[%zu] %g vs %g", c->nh,
                  c->nkv, c->D, i, got[i], want[i]);
    }
    double rel = rel_error(got, want, nq);
    cr_expect(rel < 5e-3, "flash attention (%d/%d heads x %d, block %d): relative error %g", c->nh, c->nkv, c->D,
              c->block_size, rel);
    void *dev[] = {d_q, d_k, d_v, d_seqs, d_items, d_tables, d_out};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cuda_free(dev[i]);
    void *host[] = {q, k, v, q_f, k_f, v_f, want, out, got, flat, items};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

Test(cuda_flash_attention, odd_prompt_lengths, .timeout = 120) {
    require_gpu();
    static const int lengths[] = {1, 15, 16, 17, 63, 64, 65, 255, 256, 257};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        AttnCase c = {16, 8, 128, 16, 64, 1, {0}, {lengths[i]}};
        flash_case(&c, 10 + i);
    }
    AttnCase long_prompt = {2, 1, 64, 256, 20, 1, {0}, {4097}};
    flash_case(&long_prompt, 30);
}

/* A prompt from zero, a chunk on a cached prefix and decode tokens in one step. */
Test(cuda_flash_attention, chunks_and_decodes_in_one_step, .timeout = 120) {
    require_gpu();
    AttnCase mixed = {16, 8, 128, 16, 200, 4, {0, 300, 700, 40}, {97, 130, 1, 1}};
    flash_case(&mixed, 40);
    AttnCase big_blocks = {16, 8, 128, 256, 12, 3, {0, 257, 511}, {300, 33, 1}};
    flash_case(&big_blocks, 50);
}

Test(cuda_flash_attention, every_group_and_head_dim, .timeout = 120) {
    require_gpu();
    AttnCase g1 = {4, 4, 64, 16, 80, 2, {0, 100}, {77, 40}};
    flash_case(&g1, 60);
    AttnCase g5 = {40, 8, 128, 16, 80, 2, {0, 65}, {50, 20}}; /* 12 tokens of 5 heads a block */
    flash_case(&g5, 70);
    AttnCase g8 = {32, 4, 128, 16, 80, 2, {0, 200}, {70, 9}};
    flash_case(&g8, 80);
    AttnCase g16 = {64, 4, 128, 32, 40, 2, {0, 31}, {21, 5}}; /* 4 tokens a block */
    flash_case(&g16, 90);
    AttnCase d64 = {6, 2, 64, 64, 40, 2, {0, 200}, {129, 3}};
    flash_case(&d64, 100);
}

Test(cuda_flash_attention, refuses_head_dim_256) {
    cr_expect(!cuda_flash_attention_supports(8, 8, 256));
    cr_expect(cuda_flash_attention_supports(16, 8, 128) && cuda_flash_attention_supports(4, 2, 64));
    cr_expect_eq(cuda_flash_attention_tile_tokens(16, 8), 32);
    Error err = {0};
    cr_expect(cuda_flash_attention(NULL, NULL, NULL, NULL, NULL, NULL, 1, NULL, 8, 8, 256, 16, NULL, &err) == -1);
}
