/*
 * test_gdn_plan.c - the Gated DeltaNet kernels' division of work and state
 * addressing (cuda/cuda_gdn_plan.h) checked on the CPU, so it holds on
 * machines without a GPU: the sizes equal the CPU module's, a sequence's
 * states sit where the CPU runner puts them (slot-major, then linear layer,
 * then conv + recurrent), the head block's threads own every state value
 * exactly once within the register and thread limits, the shared memory
 * regions do not overlap, the conv tiles cover every channel, and shapes
 * past the kernels' limits are refused.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_gated_deltanet.h"
#include "cuda/cuda_gdn_plan.h"

static const CudaGdnShape SHAPES[] = {
    {16, 16, 128, 128, 4, 1e-6f, false}, /* Qwen3.5-0.8B */
    {16, 32, 128, 128, 4, 1e-6f, false}, /* the larger Qwen3.5s: value heads share key heads */
    {2, 4, 32, 24, 4, 1e-6f, false},     /* the tests' odd shape */
    {1, 3, 5, 7, 2, 1e-6f, false},
    {3, 3, 64, 100, 8, 1e-6f, false},
    {1, 1, 256, 64, 3, 1e-6f, false},
    {1, 1, 1, 1, 2, 1e-6f, false},
};
#define NUM_SHAPES (int)(sizeof SHAPES / sizeof SHAPES[0])

Test(gdn_plan, sizes_equal_the_cpu_modules) {
    for (int i = 0; i < NUM_SHAPES; i++) {
        const CudaGdnShape *s = &SHAPES[i];
        GdnShape c = {s->num_k_heads, s->num_v_heads, s->k_dim, s->v_dim, s->conv_kernel, s->norm_eps,
                      s->value_heads_tiled};
        cr_expect_eq(gdn_plan_conv_dim(s), gdn_conv_dim(&c));
        cr_expect_eq(gdn_plan_conv_state_floats(s), gdn_conv_state_floats(&c));
        cr_expect_eq(gdn_plan_recurrent_state_floats(s), gdn_recurrent_state_floats(&c));
    }
}

/* cpu_runner.c's linear_mixer: base = states + slot * slot_floats + linear
 * layer * (conv + recurrent); conv state at base, recurrent right after. */
Test(gdn_plan, states_where_the_cpu_runner_keeps_them) {
    const CudaGdnShape *s = &SHAPES[2];
    const size_t conv = gdn_plan_conv_state_floats(s), rec = gdn_plan_recurrent_state_floats(s);
    const int layers = 3;
    const size_t slot_floats = layers * (conv + rec);
    for (int slot = 0; slot < 5; slot++)
        for (int l = 0; l < layers; l++) {
            const size_t layer_base = l * (conv + rec); /* what a launch for layer l is given */
            const size_t cpu_base = slot * slot_floats + l * (conv + rec);
            cr_expect_eq(layer_base + gdn_plan_conv_state_offset(slot, slot_floats), cpu_base);
            for (int h = 0; h < s->num_v_heads; h++)
                cr_expect_eq(layer_base + gdn_plan_recurrent_state_offset(s, slot, slot_floats, h),
                             cpu_base + conv + (size_t)h * s->k_dim * s->v_dim);
        }
}

Test(gdn_plan, head_threads_own_each_state_value_once) {
    for (int i = 0; i < NUM_SHAPES; i++) {
        const int dk = SHAPES[i].k_dim, dv = SHAPES[i].v_dim;
        const GdnHeadPlan p = gdn_head_plan(dk, dv);
        cr_assert_leq(p.threads, GDN_HEAD_MAX_THREADS, "%dx%d", dk, dv);
        cr_expect_eq(p.threads % 32, 0);
        cr_expect_leq(p.rows, GDN_HEAD_MAX_ROWS);
        cr_expect(p.row_groups * dv <= p.threads && p.threads - p.row_groups * dv < 32);
        cr_expect(p.threads >= GDN_HEAD_MIN_THREADS || p.row_groups == dk, "%dx%d: %d threads", dk, dv,
                  p.threads);
        unsigned char *seen = calloc((size_t)dk * dv, 1);
        cr_assert(seen);
        for (int tid = 0; tid < p.threads; tid++) { /* the kernel's mapping */
            const int c = tid % dv, grp = tid / dv, r0 = grp * p.rows;
            const int rows_here = grp < p.row_groups ? (p.rows < dk - r0 ? p.rows : dk - r0) : 0;
            cr_assert(rows_here >= 0 && rows_here <= GDN_HEAD_MAX_ROWS);
            if (grp < p.row_groups) cr_assert_gt(rows_here, 0, "%dx%d: group %d is empty", dk, dv, grp);
            for (int r = r0; r < r0 + rows_here; r++) seen[(size_t)r * dv + c]++;
        }
        for (size_t e = 0; e < (size_t)dk * dv; e++)
            cr_assert_eq(seen[e], 1, "%dx%d: value (%zu, %zu) owned %d times", dk, dv, e / dv, e % dv, seen[e]);
        free(seen);
    }
}

Test(gdn_plan, head_shared_memory_regions_apart) {
    for (int i = 0; i < NUM_SHAPES; i++) {
        const int dk = SHAPES[i].k_dim, dv = SHAPES[i].v_dim, C = GDN_HEAD_CHUNK;
        const GdnHeadPlan p = gdn_head_plan(dk, dv);
        const GdnHeadSmem m = gdn_head_smem(dk, dv, p.row_groups);
        const size_t start[] = {m.q, m.k, m.v, m.o, m.red, m.sc, m.floats};
        const size_t size[] = {(size_t)C * dk, (size_t)C * dk, (size_t)C * dv, (size_t)C * dv,
                               4 * (size_t)p.row_groups * dv, 4 * (size_t)C};
        for (int r = 0; r < 6; r++) cr_expect_eq(start[r] + size[r], start[r + 1], "%dx%d region %d", dk, dv, r);
        /* an H100/A100 block's opt-in shared memory: 227 / 163 KB */
        cr_expect_leq(m.floats * sizeof(float), 163 * 1024, "%dx%d", dk, dv);
    }
    /* the 0.8B shape stays under the default 48 KB (no opt-in needed) */
    const GdnHeadPlan p = gdn_head_plan(128, 128);
    cr_expect_eq(p.threads, 512);
    cr_expect_eq(p.rows, 32);
    cr_expect_leq(gdn_head_smem(128, 128, p.row_groups).floats * sizeof(float), 48 * 1024);
}

Test(gdn_plan, conv_blocks_cover_the_channels) {
    for (int i = 0; i < NUM_SHAPES; i++) {
        const size_t cd = gdn_plan_conv_dim(&SHAPES[i]);
        const int blocks = gdn_plan_conv_blocks(&SHAPES[i]);
        cr_expect((size_t)blocks * GDN_CONV_CHANNELS >= cd && (size_t)(blocks - 1) * GDN_CONV_CHANNELS < cd);
    }
    cr_expect(GDN_MAX_CONV_KERNEL - 1 <= GDN_CONV_ROW_LANES, "one row lane per halo row");
}

Test(gdn_plan, shapes_past_the_limits_refused) {
    for (int i = 0; i < NUM_SHAPES; i++) cr_expect_null(gdn_plan_check(&SHAPES[i]), "shape %d", i);
    const CudaGdnShape bad[] = {
        {3, 4, 8, 8, 4, 1e-6f, false},     /* Hv not a multiple of Hk */
        {2, 4, 8, 8, 1, 1e-6f, false},     /* K < 2 */
        {2, 4, 8, 8, 9, 1e-6f, false},     /* K > 8 */
        {2, 4, 0, 8, 4, 1e-6f, false},     /* dk 0 */
        {1, 1, 128, 256, 4, 1e-6f, false}, /* 4 groups x 256 columns: 1024 threads */
        {1, 1, 1024, 32, 4, 1e-6f, false}, /* 32 groups x 32 columns, too */
    };
    for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) cr_expect_not_null(gdn_plan_check(&bad[i]), "bad %d", i);
}
