/*
 * test_cuda_kernels.c - each CUDA kernel against a CPU reference (the CPU
 * runner's own functions, or a float64 loop), on random inputs of odd sizes,
 * with output buffers poisoned with NaN so nothing unwritten passes.
 * Skipped, with the reason, where there is no GPU.
 */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdio.h>
#include <string.h>

#include "cuda_test.h"
#include "cpu/cpu_ops.h"

/* Criterion reports skipped tests only with --verbose; make test must say
 * plainly when the GPU tests did not run. */
ReportHook(POST_ALL)(struct criterion_global_stats *stats) {
    size_t skipped = 0;
    const char *why = "";
    for (struct criterion_suite_stats *s = stats->suites; s; s = s->next)
        for (struct criterion_test_stats *t = s->tests; t; t = t->next)
            if (t->test_status == CR_STATUS_SKIPPED && t->message && strncmp(t->message, "no GPU", 6) == 0) {
                skipped++;
                why = t->message;
            }
    if (skipped) fprintf(stderr, "[SKIP] %zu CUDA tests did not run: %s\n", skipped, why);
}

/* bf16 rounding of a float32 result: within one bf16 ulp (2^-8 relative)
 * plus what the summation order moves in float32. */
static void expect_bf16_close(const uint16_t *got, const float *want, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++) {
        float g = bf16_to_f32(got[i]);
        float tol = fabsf(want[i]) * (1.0f / 128) + 1e-5f;
        cr_assert(fabsf(g - want[i]) <= tol, "%s[%zu]: GPU %g, CPU %g", what, i, g, want[i]);
    }
}

/* n rows of a V x H table, the output `offset` floats into its allocation. */
static void embed_case(int V, int H, int n, int offset) {
    float *table_f;
    uint16_t *table = random_bf16((size_t)V * H, 1.0f, 210 + H, &table_f);
    int32_t *tokens = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++) tokens[i] = (int32_t)(((long)i * 389 + 7) % V);
    tokens[0] = V - 1; /* both ends of the table */
    if (n > 1) tokens[1] = 0;
    uint16_t *d_table = dev_copy(table, sizeof(uint16_t) * V * H);
    int32_t *d_tokens = dev_copy(tokens, sizeof(int32_t) * n);
    float *d_x = dev_poisoned(sizeof(float) * ((size_t)n * H + offset));
    Error err = {0};
    cr_assert(cuda_embed(d_x + offset, d_table, d_tokens, n, H, NULL, &err) == 0, "%s", err.msg);
    float *x = malloc(sizeof(float) * ((size_t)n * H + offset));
    dev_fetch(x, d_x, sizeof(float) * ((size_t)n * H + offset));
    for (int t = 0; t < n; t++)
        cr_assert(memcmp(x + offset + (size_t)t * H, table_f + (size_t)tokens[t] * H, sizeof(float) * H) == 0,
                  "row %d of %d (H %d)", t, n, H);
    cuda_free(d_table);
    cuda_free(d_tokens);
    cuda_free(d_x);
    free(table);
    free(table_f);
    free(tokens);
    free(x);
}

Test(cuda_kernels, embedding) {
    require_gpu();
    embed_case(1003, 96, 37, 0);
}

/* residual add + RMSNorm of n rows of H against the CPU, the buffers
 * starting `offset` floats (or bf16) into their allocations. */
static void rmsnorm_case(int n, int H, bool with_delta, int offset) {
    size_t len = (size_t)n * H;
    float *x = random_floats(len, 3.0f, 200 + H), *delta = random_floats(len, 1.0f, 201);
    float *w = random_floats((size_t)H, 0.5f, 202);
    for (int i = 0; i < H; i++) w[i] += 1.0f;
    float *d_x = dev_poisoned(sizeof(float) * (len + offset)), *d_delta = dev_poisoned(sizeof(float) * (len + offset));
    float *d_w = dev_poisoned(sizeof(float) * (H + offset));
    uint16_t *d_out = dev_poisoned(sizeof(uint16_t) * (len + offset));
    Error err = {0};
    cr_assert(cuda_upload(d_x + offset, x, sizeof(float) * len, &err) == 0, "%s", err.msg);
    cr_assert(cuda_upload(d_delta + offset, delta, sizeof(float) * len, &err) == 0, "%s", err.msg);
    cr_assert(cuda_upload(d_w + offset, w, sizeof(float) * H, &err) == 0, "%s", err.msg);
    cr_assert(cuda_add_rmsnorm(d_x + offset, with_delta ? d_delta + offset : NULL, d_out + offset, d_w + offset,
                               n, H, 1e-6f, NULL, &err) == 0, "%s", err.msg);
    float *x_gpu = malloc(sizeof(float) * (len + offset)), *want = malloc(sizeof(float) * len);
    uint16_t *out = malloc(sizeof(uint16_t) * (len + offset));
    dev_fetch(x_gpu, d_x, sizeof(float) * (len + offset));
    dev_fetch(out, d_out, sizeof(uint16_t) * (len + offset));
    for (int t = 0; t < n; t++) {
        if (with_delta) add_rmsnorm(x + (size_t)t * H, delta + (size_t)t * H, want + (size_t)t * H, w, H, 1e-6f);
        else rmsnorm(want + (size_t)t * H, x + (size_t)t * H, w, H, 1e-6f);
    }
    cr_assert(memcmp(x_gpu + offset, x, sizeof(float) * len) == 0, "the residual sum is exact (n %d, H %d)", n, H);
    for (int i = 0; i < offset; i++) cr_assert(out[i] == 0xffff, "nothing written before the output");
    expect_bf16_close(out + offset, want, len, "rmsnorm");
    void *dev[] = {d_x, d_delta, d_w, d_out};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cuda_free(dev[i]);
    void *host[] = {x, delta, w, x_gpu, want, out};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

Test(cuda_kernels, residual_add_rmsnorm) {
    require_gpu();
    rmsnorm_case(5, 1000, true, 0);  /* not a multiple of the block */
    rmsnorm_case(3, 1024, false, 0); /* the embedding's norm: no residual add */
    rmsnorm_case(1, 32, true, 0);
}

/* q/k norm + RoPE of n tokens' random heads at the given positions (below
 * max_pos) into the given slots of an S-slot cache, against the CPU; K and
 * V land in their slots and nowhere else. */
static void qk_rope_check(int n, int nh, int nkv, int D, const int32_t *positions, const int32_t *slots, int S,
                          int max_pos) {
    const int width = (nh + 2 * nkv) * D;
    float *qkv = random_floats((size_t)n * width, 2.0f, 220 + D);
    float *qn = random_floats((size_t)D, 0.3f, 221), *kn = random_floats((size_t)D, 0.3f, 222);
    for (int i = 0; i < D; i++) {
        qn[i] += 1.0f;
        kn[i] += 1.0f;
    }
    double *inv_freq = malloc(sizeof(double) * D / 2);
    rope_inv_freq(inv_freq, D, 1e6);
    float *rope = malloc(sizeof(float) * (size_t)max_pos * D);
    for (int p = 0; p < max_pos; p++) rope_cos_sin(rope + (size_t)p * D, p, inv_freq, D / 2);

    size_t cache_elems = (size_t)S * nkv * D;
    float *d_qkv = dev_copy(qkv, sizeof(float) * n * width);
    float *d_qn = dev_copy(qn, sizeof(float) * D), *d_kn = dev_copy(kn, sizeof(float) * D);
    float *d_rope = dev_copy(rope, sizeof(float) * (size_t)max_pos * D);
    int32_t *d_pos = dev_copy(positions, sizeof(int32_t) * n), *d_slots = dev_copy(slots, sizeof(int32_t) * n);
    uint16_t *d_q = dev_poisoned(sizeof(uint16_t) * n * nh * D);
    uint16_t *d_k = dev_poisoned(sizeof(uint16_t) * cache_elems), *d_v = dev_poisoned(sizeof(uint16_t) * cache_elems);
    Error err = {0};
    cr_assert(cuda_qk_norm_rope_store(d_q, d_k, d_v, d_qkv, d_qn, d_kn, d_rope, d_pos, d_slots, n, nh, nkv, D,
                                      1e-6f, NULL, &err) == 0, "%s", err.msg);
    uint16_t *q = malloc(sizeof(uint16_t) * n * nh * D);
    uint16_t *k = malloc(sizeof(uint16_t) * cache_elems), *v = malloc(sizeof(uint16_t) * cache_elems);
    dev_fetch(q, d_q, sizeof(uint16_t) * n * nh * D);
    dev_fetch(k, d_k, sizeof(uint16_t) * cache_elems);
    dev_fetch(v, d_v, sizeof(uint16_t) * cache_elems);

    float *head = malloc(sizeof(float) * D);
    bool *written = calloc((size_t)S, sizeof(bool));
    for (int t = 0; t < n; t++) {
        const float *row = qkv + (size_t)t * width;
        const float *cs = rope + (size_t)positions[t] * D;
        written[slots[t]] = true;
        for (int h = 0; h < nh + 2 * nkv; h++) {
            memcpy(head, row + (size_t)h * D, sizeof(float) * D);
            if (h < nh + nkv) {
                rmsnorm(head, head, h < nh ? qn : kn, D, 1e-6f);
                rope_apply(head, D, cs);
            }
            const uint16_t *got = h < nh ? q + ((size_t)t * nh + h) * D
                                  : h < nh + nkv ? k + ((size_t)slots[t] * nkv + h - nh) * D
                                                 : v + ((size_t)slots[t] * nkv + h - nh - nkv) * D;
            expect_bf16_close(got, head, (size_t)D, h < nh ? "q" : h < nh + nkv ? "k" : "v");
        }
    }
    expect_unwritten_slots(k, v, sizeof(uint16_t) * nkv * D, written, S);
    void *dev[] = {d_qkv, d_qn, d_kn, d_rope, d_pos, d_slots, d_q, d_k, d_v};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cuda_free(dev[i]);
    void *host[] = {qkv, qn, kn, inv_freq, rope, q, k, v, head, written};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

/* At any token count: positions spread over the table, every token in its
 * own slot, the slots not in token order. */
static void qk_rope_rows_case(int n, int nh, int nkv, int D) {
    const int max_pos = 4096;
    int S = n + 8;
    if (S % 5 == 0) S++; /* t -> (5t + 3) mod S is then one to one */
    int32_t *positions = malloc(sizeof(int32_t) * n), *slots = malloc(sizeof(int32_t) * n);
    cr_assert(positions && slots);
    for (int t = 0; t < n; t++) {
        positions[t] = (int32_t)(((long)t * 997 + 5) % max_pos);
        slots[t] = (int32_t)(((long)t * 5 + 3) % S);
    }
    qk_rope_check(n, nh, nkv, D, positions, slots, S, max_pos);
    free(positions);
    free(slots);
}

/* Nine tokens at scattered positions, their table's edges among them. */
static void qk_rope_case(int nh, int nkv, int D) {
    static const int32_t positions[9] = {0, 1, 17, 255, 256, 1000, 4095, 4999, 3};
    static const int32_t slots[9] = {5, 63, 0, 17, 33, 2, 40, 12, 50};
    qk_rope_check(9, nh, nkv, D, positions, slots, 64, 5000);
}

Test(cuda_kernels, qk_norm_rope_kv_store) {
    require_gpu();
    qk_rope_case(4, 2, 128);  /* the tiny model */
    qk_rope_case(16, 8, 128); /* Qwen3-0.6B */
    qk_rope_case(5, 1, 64);
    qk_rope_case(2, 2, 256);
}

/* silu_mul over max_n rows, or cuda_silu_mul_rows over the first n_rows
 * of them (n_rows < 0: all, through cuda_silu_mul); rows past the count
 * stay untouched. */
static void silu_case(int max_n, int n_rows, int I, int offset) {
    int n = n_rows < 0 ? max_n : n_rows;
    size_t len = (size_t)max_n * I;
    float *gu = random_floats(2 * len, 6.0f, 230 + I);
    float *d_gu = dev_poisoned(sizeof(float) * (2 * len + offset));
    uint16_t *d_out = dev_poisoned(sizeof(uint16_t) * (len + offset));
    int32_t *d_n = dev_copy(&n, sizeof n);
    Error err = {0};
    cr_assert(cuda_upload(d_gu + offset, gu, sizeof(float) * 2 * len, &err) == 0, "%s", err.msg);
    if (n_rows < 0) cr_assert(cuda_silu_mul(d_out + offset, d_gu + offset, max_n, I, NULL, &err) == 0, "%s", err.msg);
    else cr_assert(cuda_silu_mul_rows(d_out + offset, d_gu + offset, max_n, d_n, I, NULL, &err) == 0, "%s", err.msg);
    uint16_t *out = malloc(sizeof(uint16_t) * (len + offset));
    dev_fetch(out, d_out, sizeof(uint16_t) * (len + offset));
    float *want = malloc(sizeof(float) * len);
    for (int t = 0; t < n; t++) {
        memcpy(want + (size_t)t * I, gu + (size_t)t * 2 * I, sizeof(float) * I);
        silu_mul(want + (size_t)t * I, gu + (size_t)t * 2 * I + I, (size_t)I);
    }
    for (int i = 0; i < offset; i++) cr_assert(out[i] == 0xffff, "nothing written before the output");
    expect_bf16_close(out + offset, want, (size_t)n * I, "silu_mul");
    for (size_t i = (size_t)n * I; i < len; i++)
        cr_assert(out[offset + i] == 0xffff, "element %zu is past the %d rows to compute", i, n);
    cuda_free(d_gu);
    cuda_free(d_out);
    cuda_free(d_n);
    free(gu);
    free(out);
    free(want);
}

Test(cuda_kernels, silu_mul) {
    require_gpu();
    silu_case(7, -1, 3001, 0);
}

Test(cuda_kernels, gather_rows) {
    require_gpu();
    const int rows = 50, width = 1027, n = 6;
    float *unused;
    uint16_t *in = random_bf16((size_t)rows * width, 1.0f, 30, &unused);
    int32_t pick[6] = {49, 0, 7, 7, 31, 2};
    uint16_t *d_in = dev_copy(in, sizeof(uint16_t) * rows * width);
    int32_t *d_pick = dev_copy(pick, sizeof pick);
    uint16_t *d_out = dev_poisoned(sizeof(uint16_t) * n * width);
    Error err = {0};
    cr_assert(cuda_gather_rows(d_out, d_in, d_pick, n, width, NULL, &err) == 0, "%s", err.msg);
    uint16_t *out = malloc(sizeof(uint16_t) * n * width);
    dev_fetch(out, d_out, sizeof(uint16_t) * n * width);
    for (int i = 0; i < n; i++)
        cr_assert(memcmp(out + (size_t)i * width, in + (size_t)pick[i] * width, 2 * (size_t)width) == 0);
    cuda_free(d_in);
    cuda_free(d_pick);
    cuda_free(d_out);
    free(in);
    free(unused);
    free(out);
}

/* ---- paged attention ------------------------------------------------------------------ */

/* splits 0: the tensor-core kernel (cuda_prefill_attention) */
static void attention_case_split(const AttnCase *c, uint64_t seed, int splits) {
    int T = 0;
    for (int s = 0; s < c->num_seqs; s++) T += c->len[s];
    size_t cache = (size_t)c->num_blocks * c->block_size * c->nkv * c->D;
    float *q_f, *k_f, *v_f;
    uint16_t *q = random_bf16((size_t)T * c->nh * c->D, 2.0f, seed, &q_f);
    uint16_t *k = random_bf16(cache, 2.0f, seed + 1, &k_f), *v = random_bf16(cache, 1.0f, seed + 2, &v_f);

    int32_t *tables[ATTN_MAX_SEQS], flat[1024];
    CudaAttnSeq seqs[ATTN_MAX_SEQS] = {{0}};
    int at = attention_tables(c, flat, 1024, tables, seqs);
    CudaAttnItem items[512];
    int n_items = attention_items(c, cuda_attention_tile_tokens(c->nh, c->nkv), items, 512);

    uint16_t *d_q = dev_copy(q, sizeof(uint16_t) * T * c->nh * c->D);
    uint16_t *d_k = dev_copy(k, sizeof(uint16_t) * cache), *d_v = dev_copy(v, sizeof(uint16_t) * cache);
    CudaAttnSeq *d_seqs = dev_copy(seqs, sizeof seqs);
    CudaAttnItem *d_items = dev_copy(items, sizeof(CudaAttnItem) * n_items);
    int32_t *d_tables = dev_copy(flat, sizeof(int32_t) * (size_t)at);
    uint16_t *d_out = dev_poisoned(sizeof(uint16_t) * T * c->nh * c->D);
    float *d_split = splits > 1 ? dev_poisoned(cuda_attention_split_workspace_bytes(
                                      c->D, n_items * c->nkv * splits))
                                : NULL;
    Error err = {0};
    if (splits == 0)
        cr_assert(cuda_prefill_attention(d_out, d_q, d_k, d_v, d_seqs, d_items, n_items, d_tables, c->nh,
                                         c->nkv, c->D, c->block_size, NULL, &err) == 0, "%s", err.msg);
    else
        cr_assert(cuda_attention(d_out, d_q, d_k, d_v, d_seqs, d_items, n_items, d_tables, c->nh, c->nkv,
                                 c->D, c->block_size, splits, d_split, NULL, &err) == 0, "%s", err.msg);
    size_t n_out = (size_t)T * c->nh * c->D;
    uint16_t *out = malloc(sizeof(uint16_t) * n_out);
    dev_fetch(out, d_out, sizeof(uint16_t) * n_out);
    float *want = malloc(sizeof(float) * n_out), *got = widen_bf16(out, n_out);
    attention_reference(want, q_f, k_f, v_f, c, tables);
    for (size_t i = 0; i < n_out; i++) cr_assert(!isnan(got[i]), "output %zu was never written", i);
    double rel = rel_error(got, want, n_out);
    cr_expect(rel < 5e-3, "attention (%d/%d heads x %d, block %d, %d splits, 0 = tensor cores): relative error %g", c->nh,
              c->nkv, c->D, c->block_size, splits, rel);
    for (size_t i = 0; i < n_out; i++)
        cr_assert(fabsf(got[i] - want[i]) <= 0.02f + 0.01f * fabsf(want[i]), "out[%zu] %g vs %g", i,
                  got[i], want[i]);
    void *dev[] = {d_q, d_k, d_v, d_seqs, d_items, d_tables, d_out, d_split};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cuda_free(dev[i]);
    void *host[] = {q, k, v, q_f, k_f, v_f, out, want, got};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

/* Both kernels on the same case: CUDA cores, then tensor cores. */
static void attention_case(const AttnCase *c, uint64_t seed) {
    attention_case_split(c, seed, 1);
    attention_case_split(c, seed, 0);
}

/* Prefill from zero, a chunk on top of a cached prefix, and decodes whose
 * contexts cross many blocks, all in one batch. */
Test(cuda_kernels, paged_attention_mixed_batch) {
    require_gpu();
    AttnCase tiny = {4, 2, 128, 16, 160, 4, {0, 100, 300, 41}, {37, 20, 1, 1}};
    attention_case(&tiny, 50);
    AttnCase qwen06 = {16, 8, 128, 16, 160, 3, {0, 700, 1500}, {70, 1, 1}};
    attention_case(&qwen06, 60);
    AttnCase big_group = {32, 4, 128, 32, 96, 2, {5, 1000}, {33, 3}}; /* group 8: 2 tokens per tile */
    attention_case(&big_group, 70);
    AttnCase d64 = {6, 2, 64, 64, 40, 2, {0, 200}, {129, 1}};
    attention_case(&d64, 80);
    AttnCase d256 = {4, 4, 256, 256, 8, 2, {0, 511}, {19, 1}};
    attention_case(&d256, 90);
}

/* Decode steps with the context split over blocks (flash-decoding): split
 * counts that divide the keys unevenly, splits left with no keys (short
 * contexts), a single-key context, and one split per 32 keys. */
Test(cuda_kernels, paged_attention_split_decode) {
    require_gpu();
    AttnCase qwen06 = {16, 8, 128, 16, 400, 4, {2999, 0, 40, 1234}, {1, 1, 1, 1}};
    for (int splits = 2; splits <= cuda_attention_max_splits(); splits += 5)
        attention_case_split(&qwen06, 100 + (uint64_t)splits, splits);
    AttnCase group4 = {16, 4, 64, 32, 64, 2, {1500, 17}, {1, 1}};
    attention_case_split(&group4, 120, cuda_attention_max_splits());
    AttnCase d256 = {8, 8, 256, 256, 8, 1, {1000}, {1}};
    attention_case_split(&d256, 130, 3);
    Error err = {0};
    cr_expect(cuda_attention_choose_splits(1, 8, 40960, 132, 4096) == cuda_attention_max_splits());
    cr_expect(cuda_attention_choose_splits(256, 8, 40960, 132, 4096) == 1);
    cr_expect(cuda_attention_choose_splits(1, 8, 300, 132, 4096) == 2, "short contexts: few splits");
    cr_expect(cuda_attention(NULL, NULL, NULL, NULL, NULL, NULL, 1, NULL, 16, 8, 128, 16, 2, NULL, NULL,
                             &err) == -1, "splits without a workspace are refused");
}

/* ---- the vector row kernels' edge cases ------------------------------------------------- */
/* The launchers take the warp-per-row kernels where the shape and the
 * pointers allow and the block-per-row ones elsewhere; these cases sit on
 * both sides of each boundary: row counts of 1 (decode), 3 (a partly empty
 * block) and 257 (one row past a round batch), widths that fill a lane's
 * registers exactly, leave lanes idle or are not a multiple of the vector
 * width, and buffers one element off their 16-byte alignment. */

Test(cuda_kernels, rmsnorm_row_shapes) {
    require_gpu();
    const int rows[] = {1, 3, 257};
    for (int r = 0; r < 3; r++) {
        rmsnorm_case(rows[r], 1024, true, 0); /* Qwen3-0.6B: 8 float4s a lane */
        rmsnorm_case(rows[r], 1024, false, 0);
        rmsnorm_case(rows[r], 12, true, 0);   /* 3 float4s: most lanes idle */
        rmsnorm_case(rows[r], 2564, true, 0); /* 641 float4s: 20 a lane and one over */
    }
    rmsnorm_case(1025, 128, true, 0);  /* rows past the larger blocks' threshold */
    rmsnorm_case(3, 4096, true, 0);    /* the widest row kept in registers */
    rmsnorm_case(3, 4100, true, 0);    /* one float4 a lane too many: the block kernel */
    rmsnorm_case(3, 1002, true, 0);    /* not a multiple of 4 */
    rmsnorm_case(3, 1024, true, 1);    /* misaligned buffers */
    rmsnorm_case(257, 8192, false, 0); /* wider than registers hold: the block kernel */
}

Test(cuda_kernels, embedding_row_shapes) {
    require_gpu();
    embed_case(50, 1024, 1, 0);
    embed_case(50, 1024, 3, 0);
    embed_case(300, 1024, 257, 0);
    embed_case(20, 8, 257, 0);   /* one 16-byte load a row */
    embed_case(20, 1000, 3, 0);  /* 125 loads: lanes left over */
    embed_case(20, 1004, 3, 0);  /* not a multiple of 8: the block kernel */
    embed_case(20, 1024, 3, 1);  /* misaligned output */
}

Test(cuda_kernels, qk_norm_rope_row_shapes) {
    require_gpu();
    const int rows[] = {1, 3, 257};
    for (int r = 0; r < 3; r++) {
        qk_rope_rows_case(rows[r], 16, 8, 128); /* Qwen3-0.6B: two heads a warp */
        qk_rope_rows_case(rows[r], 5, 1, 64);   /* 7 heads a token: warps straddle tokens and q/k/v */
        qk_rope_rows_case(rows[r], 2, 2, 256);  /* a warp a head */
    }
    qk_rope_rows_case(1, 1, 1, 64); /* 3 heads: most of the block idle */
    qk_rope_rows_case(3, 32, 4, 128);
}

Test(cuda_kernels, silu_mul_row_shapes) {
    require_gpu();
    const int rows[] = {1, 3, 257};
    for (int r = 0; r < 3; r++) {
        silu_case(rows[r], -1, 3072, 0); /* Qwen3-0.6B */
        silu_case(rows[r], -1, 4, 0);    /* one float4 a row */
        silu_case(rows[r], -1, 3002, 0); /* not a multiple of 4: the scalar kernel */
    }
    silu_case(1500, -1, 3072, 0); /* more float4s than the grid has threads */
    silu_case(3, -1, 3072, 1);    /* misaligned buffers: the scalar kernel */
    silu_case(300, 257, 3072, 0); /* a graph's grid for 300 rows, 257 of them used */
    silu_case(300, 1, 64, 0);
    silu_case(8, 0, 3072, 0);     /* no rows at all this step */
    silu_case(5, 3, 3001, 0);     /* the scalar kernel with a device count */
}
