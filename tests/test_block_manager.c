/*
 * test_block_manager.c - the block manager under random workloads, with
 * every invariant checked after every operation, and the worked example.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/block_manager.h"

/* ---- the worked example -------------------------------------------------- */

Test(block_manager, shared_prefix_worked_example) {
    Error err = {0};
    BlockManager *bm = block_manager_create(16, 256, &err);
    cr_assert(bm, "%s", err.msg);
    int32_t s1[600], s2[520];
    for (int i = 0; i < 600; i++) s1[i] = (i * 7919) % 151936;
    memcpy(s2, s1, sizeof(int32_t) * 512);
    for (int i = 512; i < 520; i++) s2[i] = 100000 + i;

    BlockTable t1 = {0}, t2 = {0};
    PrefixMatch m = block_manager_match(bm, s1, 600, (600 - 1) / 256, true);
    cr_expect_eq(m.num_blocks, 0);
    cr_assert(block_manager_take_match(bm, &t1, &m) == 0 && block_manager_grow(bm, &t1, 600) == 0);
    cr_expect_eq(t1.num_blocks, 3);
    block_manager_commit(bm, &t1, s1, 600); /* S1's prefill is done */

    m = block_manager_match(bm, s2, 520, (520 - 1) / 256, true);
    cr_expect_eq(m.num_blocks, 2, "S2 finds S1's two full blocks");
    cr_assert(block_manager_take_match(bm, &t2, &m) == 0 && block_manager_grow(bm, &t2, 520) == 0);
    cr_expect_eq(t2.ids[0], t1.ids[0]);
    cr_expect_eq(t2.ids[1], t1.ids[1]);
    cr_expect_neq(t2.ids[2], t1.ids[2]);
    cr_expect_eq(block_manager_ref_count(bm, t1.ids[0]), 2);
    cr_expect_eq(block_manager_ref_count(bm, t1.ids[2]), 1);
    BlockManagerStats st = block_manager_stats(bm);
    cr_expect_eq(st.prefix_query_tokens, 1120);
    cr_expect_eq(st.prefix_hit_tokens, 512, "512 cached tokens");

    /* Released blocks keep their prefix: S1 again hits both full blocks. */
    block_manager_release(bm, &t1);
    block_manager_release(bm, &t2);
    m = block_manager_match(bm, s1, 600, (600 - 1) / 256, false);
    cr_expect_eq(m.num_blocks, 2);
    char why[256];
    cr_expect(block_manager_check_invariants(bm, why, sizeof why), "%s", why);
    block_table_free(&t1);
    block_table_free(&t2);
    block_manager_destroy(bm);
}

/* A prompt that is entirely cached still leaves its last token to compute,
 * and a prompt that is an exact multiple of the block size never shares the
 * block it must write. */
Test(block_manager, fully_cached_prompt_keeps_a_query) {
    Error err = {0};
    BlockManager *bm = block_manager_create(8, 16, &err);
    int32_t p[32];
    for (int i = 0; i < 32; i++) p[i] = i;
    BlockTable a = {0}, b = {0};
    PrefixMatch m = block_manager_match(bm, p, 32, (32 - 1) / 16, true);
    block_manager_take_match(bm, &a, &m);
    cr_assert(block_manager_grow(bm, &a, 32) == 0);
    block_manager_commit(bm, &a, p, 32);
    m = block_manager_match(bm, p, 32, (32 - 1) / 16, true);
    cr_expect_eq(m.num_blocks, 1, "at most (32 - 1) / 16 blocks are reused");
    block_manager_take_match(bm, &b, &m);
    cr_assert(block_manager_grow(bm, &b, 32) == 0);
    cr_expect_neq(b.ids[1], a.ids[1], "the block holding the last token is fresh");
    cr_expect_eq(block_manager_ref_count(bm, b.ids[1]), 1);
    block_table_free(&a);
    block_table_free(&b);
    block_manager_destroy(bm);
}

Test(block_manager, eviction_order) {
    Error err = {0};
    BlockManager *bm = block_manager_create(4, 16, &err);
    int32_t x[32], y[32];
    for (int i = 0; i < 32; i++) x[i] = i, y[i] = 1000 + i;
    BlockTable a = {0}, b = {0}, c = {0};
    cr_assert(block_manager_grow(bm, &a, 32) == 0);
    block_manager_commit(bm, &a, x, 32);
    cr_assert(block_manager_grow(bm, &b, 32) == 0);
    block_manager_commit(bm, &b, y, 32);
    block_manager_release(bm, &a); /* x's blocks freed first: least recently used */
    block_manager_release(bm, &b);
    cr_expect_eq(block_manager_num_free(bm), 4);
    cr_assert(block_manager_grow(bm, &c, 16) == 0); /* evicts x's tail block first */
    cr_expect_eq(block_manager_match(bm, x, 32, 2, false).num_blocks, 1, "x keeps its first block");
    cr_expect_eq(block_manager_match(bm, y, 32, 2, false).num_blocks, 2, "y untouched");
    cr_assert(block_manager_grow(bm, &c, 48) == 0); /* two more: x's first, then y's tail */
    cr_expect_eq(block_manager_match(bm, x, 32, 2, false).num_blocks, 0);
    cr_expect_eq(block_manager_match(bm, y, 32, 2, false).num_blocks, 1);
    cr_expect(block_manager_grow(bm, &c, 80) == -1, "no fifth block");
    cr_expect_eq(c.num_blocks, 3, "a failed grow changes nothing");
    char why[256];
    cr_expect(block_manager_check_invariants(bm, why, sizeof why), "%s", why);
    block_table_free(&a);
    block_table_free(&b);
    block_table_free(&c);
    block_manager_destroy(bm);
}

/* ---- property test -------------------------------------------------------- */

#define SEQS 24
#define MAX_TOKENS 200

typedef struct Owner {
    BlockTable table;
    int32_t tokens[MAX_TOKENS];
    int num_tokens;   /* tokens the sequence has (the table covers them) */
    int num_computed; /* tokens whose KV is "computed" (committed) */
    bool live;
} Owner;

static uint64_t state = 0x853c49e6748fea9bull;
static uint32_t rnd(uint32_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(state >> 33) % n;
}

/* A handful of shared prompt prefixes make prefix hits frequent. */
static int32_t prefixes[4][MAX_TOKENS];

static void check_all(BlockManager *bm, Owner *o, int op) {
    char why[256];
    cr_assert(block_manager_check_invariants(bm, why, sizeof why), "op %d: %s", op, why);
    int counts[64] = {0};
    for (int s = 0; s < SEQS; s++)
        for (int b = 0; o[s].live && b < o[s].table.num_blocks; b++) counts[o[s].table.ids[b]]++;
    for (int i = 0; i < block_manager_num_blocks(bm); i++)
        cr_assert_eq(block_manager_ref_count(bm, i), counts[i], "op %d: block %d ref %d, owners %d",
                     op, i, block_manager_ref_count(bm, i), counts[i]);
    /* The blocks a sequence will write next (from num_computed on) are its own. */
    for (int s = 0; s < SEQS; s++) {
        if (!o[s].live) continue;
        int bs = block_manager_block_size(bm);
        for (int b = o[s].num_computed / bs; b < o[s].table.num_blocks; b++)
            cr_assert_eq(block_manager_ref_count(bm, o[s].table.ids[b]), 1,
                         "op %d: seq %d would write shared block %d", op, s, o[s].table.ids[b]);
    }
}

Test(block_manager, random_workload_invariants) {
    Error err = {0};
    int bs = 16;
    BlockManager *bm = block_manager_create(48, bs, &err);
    cr_assert(bm);
    for (int p = 0; p < 4; p++)
        for (int i = 0; i < MAX_TOKENS; i++) prefixes[p][i] = (int32_t)rnd(50) + (p == 3 ? 0 : 100 * p);
    Owner *o = calloc(SEQS, sizeof *o);
    long hits = 0;
    for (int op = 0; op < 100000; op++) {
        int s = (int)rnd(SEQS);
        Owner *q = &o[s];
        uint32_t kind = rnd(10);
        if (!q->live) { /* admit: a prompt sharing a random prefix, prefix-matched */
            int len = 1 + (int)rnd(120), shared = (int)rnd((uint32_t)len + 1);
            const int32_t *pre = prefixes[rnd(4)];
            for (int i = 0; i < len; i++) q->tokens[i] = i < shared ? pre[i] : (int32_t)rnd(50);
            PrefixMatch m = block_manager_match(bm, q->tokens, len, (len - 1) / bs, true);
            /* every hit is a verified prefix: the matched blocks hold exactly these tokens */
            int need = (len + bs - 1) / bs - m.num_blocks;
            if (need > block_manager_num_free(bm) - m.num_free) continue;
            cr_assert(block_manager_take_match(bm, &q->table, &m) == 0);
            cr_assert(block_manager_grow(bm, &q->table, len) == 0);
            hits += m.num_blocks;
            q->num_tokens = len;
            q->num_computed = m.num_blocks * bs;
            q->live = true;
        } else if (kind < 4 && q->num_computed < q->num_tokens) { /* a step computes some tokens */
            q->num_computed += 1 + (int)rnd((uint32_t)(q->num_tokens - q->num_computed));
            block_manager_commit(bm, &q->table, q->tokens, q->num_computed);
        } else if (kind < 7 && q->num_computed == q->num_tokens && q->num_tokens < MAX_TOKENS) {
            /* decode: one more token, maybe a new block */
            if (block_manager_grow(bm, &q->table, q->num_tokens + 1) == 0)
                q->tokens[q->num_tokens++] = (int32_t)rnd(50);
        } else if (kind == 7 && q->table.num_hashed > 0) { /* fork into a free slot */
            int d = (int)rnd(SEQS);
            if (o[d].live) continue;
            int k = 1 + (int)rnd((uint32_t)q->table.num_hashed);
            cr_assert(block_manager_fork(bm, &q->table, k, &o[d].table) == 0);
            memcpy(o[d].tokens, q->tokens, sizeof q->tokens);
            o[d].num_tokens = o[d].num_computed = k * bs;
            o[d].live = true;
        } else if (kind >= 8) { /* finish or preempt */
            block_manager_release(bm, &q->table);
            q->live = false;
        }
        check_all(bm, o, op);
    }
    cr_expect_gt(hits, 1000, "the workload exercised prefix hits (%ld)", hits);
    cr_log_info("100000 operations, %ld prefix-hit blocks", hits);
    for (int s = 0; s < SEQS; s++) block_table_free(&o[s].table);
    free(o);
    block_manager_destroy(bm);
}
