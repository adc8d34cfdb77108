/*
 * test_cpu_matmul_small.c - the small-batch GEMM (cpu_matmul_small.h, the
 * "gemm" strategy of cpu_matmul.h) against a float64 reference: every row
 * count 1..70 (all tile remainders of 6- and 4-row tiles), K and N that are
 * not multiples of the 16/8-lane vectors or the 4/2-row strips, bf16 and f32
 * weights, at every SIMD level this machine can run; plus the automatic
 * choice, cpu_matmul_multi and cpu_matmul_grouped going through it, and
 * rows whose results do not depend on the batch they are in.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_matmul.h"
#include "cpu/cpu_matmul_small.h"
#include "matmul_reference.h"

static void check_gemm(CpuMatmul *mm, int M, int N, int K, WeightType type, CpuIsa isa) {
    TestWeight t = make_test_weight(N, K, type);
    float *x = malloc(sizeof(float) * (size_t)M * K);
    float *y = malloc(sizeof(float) * (size_t)M * N);
    cr_assert(x && y);
    for (size_t i = 0; i < (size_t)M * K; i++) x[i] = matmul_uniform();
    for (size_t i = 0; i < (size_t)M * N; i++) y[i] = NAN; /* every output must be written */
    cpu_matmul_with(mm, y, x, M, &t.w, MATMUL_GEMM, isa);
    check_matmul_reference(y, x, M, &t, 5e-7, "gemm", isa);
    free(x);
    free(y);
    free_test_weight(&t);
}

static const int KS[] = {1, 15, 17, 64, 100, 1000};
static const int NS[] = {1, 3, 31, 33, 257};
#define NK (int)(sizeof KS / sizeof KS[0])
#define NN (int)(sizeof NS / sizeof NS[0])

/* Every row count 1..70, walking through the (K, N) pairs so that each pair
 * meets several row counts; three threads so that tasks split unevenly. */
Test(cpu_matmul_small, every_row_count_odd_sizes_every_isa, .timeout = 300) {
    Error err = {0};
    ThreadPool *pool = thread_pool_create(3, &err);
    cr_assert(pool, "%s", err.msg);
    CpuMatmul *mm = cpu_matmul_create(pool, 70, 1000, &err);
    cr_assert(mm, "%s", err.msg);
    for (int isa = CPU_ISA_SCALAR; isa <= (int)cpu_isa_detect(); isa++)
        for (int M = 1; M <= 70; M++)
            for (int t = 0; t < 2; t++)
                check_gemm(mm, M, NS[(M / NK + t) % NN], KS[(M + t) % NK], (WeightType)t,
                           (CpuIsa)isa);
    cr_log_info("gemm checked at SIMD levels scalar..%s", cpu_isa_name(cpu_isa_detect()));
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
}

/* The full (K, N) cross product at row counts around the tile sizes. */
Test(cpu_matmul_small, all_shapes_at_tile_edges, .timeout = 300) {
    Error err = {0};
    ThreadPool *pool = thread_pool_create(2, &err);
    cr_assert(pool, "%s", err.msg);
    CpuMatmul *mm = cpu_matmul_create(pool, 70, 1000, &err);
    cr_assert(mm, "%s", err.msg);
    int rows[] = {1, 2, 3, 5, 7, 13, 24, 70};
    for (int isa = CPU_ISA_AVX2; isa <= (int)cpu_isa_detect(); isa++)
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
            for (int k = 0; k < NK; k++)
                for (int n = 0; n < NN; n++)
                    for (int t = 0; t < 2; t++)
                        check_gemm(mm, rows[r], NS[n], KS[k], (WeightType)t, (CpuIsa)isa);
    /* More weight rows than one task holds: the task boundaries. */
    for (int t = 0; t < 2; t++) check_gemm(mm, 9, 1000, 100, (WeightType)t, cpu_isa_detect());
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
}

/* Where the CPU has a kernel, a decode batch is routed to it by default. */
Test(cpu_matmul_small, auto_choice) {
    Weight w = {.data = NULL, .type = WEIGHT_BF16, .rows = 3072, .cols = 1024};
    for (int isa = CPU_ISA_SCALAR; isa <= (int)cpu_isa_detect(); isa++) {
        bool has = small_gemm_kernel((CpuIsa)isa, WEIGHT_BF16) != NULL;
        cr_expect_eq(has, isa >= CPU_ISA_AVX2);
        /* From 1 row: the GEMM reads weights at the memory rate, and one
         * kernel for every decode batch keeps a row's sums batch-independent. */
        cr_expect_eq(cpu_matmul_choose(1, &w, (CpuIsa)isa), has ? MATMUL_GEMM : MATMUL_ROWS);
        if (has && isa < CPU_ISA_AMX) {
            cr_expect_eq(cpu_matmul_choose(16, &w, (CpuIsa)isa), MATMUL_GEMM, "%s",
                         cpu_isa_name((CpuIsa)isa));
            cr_expect_eq(cpu_matmul_choose(2, &w, (CpuIsa)isa), MATMUL_GEMM);
        }
        /* Prefill-sized inputs stay with OpenBLAS or AMX. */
        cr_expect_eq(cpu_matmul_choose(4096, &w, (CpuIsa)isa) == MATMUL_GEMM, false);
    }
}

/* cpu_matmul_multi and cpu_matmul_grouped reach the same kernel: q/k/v-like
 * products sharing one input, and MoE-like products with their own inputs
 * and row counts (all on the gemm, 1 row included) in one loop, at every
 * SIMD level (the other tests of the grouped path run at the best one); the
 * last two groups share an input, as a MoE layer's gate and up do. */
Test(cpu_matmul_small, multi_and_grouped) {
    Error err = {0};
    ThreadPool *pool = thread_pool_create(2, &err);
    cr_assert(pool, "%s", err.msg);
    CpuMatmul *mm = cpu_matmul_create(pool, 40, 200, &err);
    cr_assert(mm, "%s", err.msg);
    enum { K = 200, G = 6 };
    int rows[G] = {300, 33, 33, 7, 50, 17}, ms[G] = {12, 1, 5, 40, 40, 40};
    TestWeight t[G];
    float *x[G], *y[G];
    for (int i = 0; i < G; i++) {
        t[i] = make_test_weight(rows[i], K, i == 3 ? WEIGHT_F32 : WEIGHT_BF16);
        x[i] = malloc(sizeof(float) * 40 * K);
        y[i] = malloc(sizeof(float) * 40 * rows[i]);
        cr_assert(x[i] && y[i]);
        for (size_t j = 0; j < (size_t)40 * K; j++) x[i][j] = matmul_uniform();
    }
    memcpy(x[5], x[4], sizeof(float) * 40 * K);
    CpuIsa best = cpu_isa_active();
    for (int isa = CPU_ISA_SCALAR; isa <= (int)cpu_isa_detect(); isa++) {
        cr_assert(cpu_isa_set((CpuIsa)isa) == 0);
        for (int i = 0; i < G; i++)
            for (size_t j = 0; j < (size_t)40 * rows[i]; j++) y[i][j] = NAN;
        const Weight *ws[3] = {&t[0].w, &t[1].w, &t[2].w};
        cpu_matmul_multi(mm, x[0], 12, ws, y, 3);
        for (int i = 0; i < 3; i++) check_matmul_reference(y[i], x[0], 12, &t[i], 5e-7, "multi", (CpuIsa)isa);
        MatmulGroup groups[G];
        for (int i = 0; i < G; i++) {
            for (size_t j = 0; j < (size_t)40 * rows[i]; j++) y[i][j] = NAN;
            groups[i] = (MatmulGroup){i == 5 ? x[4] : x[i], ms[i], &t[i].w, y[i], NULL};
        }
        cpu_matmul_grouped(mm, groups, G);
        for (int i = 0; i < G; i++)
            check_matmul_reference(y[i], x[i], ms[i], &t[i], 5e-7, "grouped", (CpuIsa)isa);
    }
    cpu_isa_set(best);
    for (int i = 0; i < G; i++) {
        free_test_weight(&t[i]);
        free(x[i]);
        free(y[i]);
    }
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
}

/* A row's result does not depend on how many rows share the call (up to the
 * GEMM's limit; above it OpenBLAS takes over): the same inputs alone and at
 * every position of batches of 2..70, bit for bit, for both weight types,
 * float32 and bf16 inputs, at every level with a GEMM (AMX, which takes
 * batches from 4 rows, excepted). That is what lets a greedy request give the
 * same text whether the server runs it alone or beside others. */
Test(cpu_matmul_small, rows_do_not_depend_on_the_batch, .timeout = 300) {
    enum { MAXM = 70, N = 303, K = 1037 };
    Error err = {0};
    ThreadPool *pool = thread_pool_create(2, &err);
    cr_assert(pool, "%s", err.msg);
    CpuMatmul *mm = cpu_matmul_create(pool, MAXM, K, &err);
    cr_assert(mm, "%s", err.msg);
    float *x = malloc(sizeof(float) * MAXM * K), *alone = malloc(sizeof(float) * MAXM * N),
          *batch = malloc(sizeof(float) * MAXM * N);
    cr_assert(x && alone && batch);
    for (size_t i = 0; i < (size_t)MAXM * K; i++) x[i] = matmul_uniform();
    static const int batches[] = {2, 3, 4, 5, 7, 13, 24, 64, 70};
    CpuIsa top = cpu_isa_detect() >= CPU_ISA_AMX ? CPU_ISA_AVX512_BF16 : cpu_isa_detect();
    int checked = 0;
    for (int isa = CPU_ISA_AVX2; isa <= (int)top; isa++) {
        for (int t = 0; t < 2; t++) {
            TestWeight w = make_test_weight(N, K, (WeightType)t);
            for (int bf16_inputs = 0; bf16_inputs < 2; bf16_inputs++) {
                cpu_matmul_set_bf16_inputs(mm, bf16_inputs);
                for (int m = 0; m < MAXM; m++)
                    cpu_matmul_with(mm, alone + (size_t)m * N, x + (size_t)m * K, 1, &w.w, MATMUL_AUTO, (CpuIsa)isa);
                for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
                    int M = batches[b];
                    for (int m0 = 0; m0 + M <= MAXM; m0 += M) {
                        cpu_matmul_with(mm, batch, x + (size_t)m0 * K, M, &w.w, MATMUL_AUTO, (CpuIsa)isa);
                        cr_assert(memcmp(batch, alone + (size_t)m0 * N, sizeof(float) * (size_t)M * N) == 0,
                                  "%s %s weights, %s inputs: rows %d..%d in a batch of %d differ from "
                                  "the same rows alone",
                                  cpu_isa_name((CpuIsa)isa), t ? "f32" : "bf16", bf16_inputs ? "bf16" : "f32",
                                  m0, m0 + M - 1, M);
                        checked++;
                    }
                }
            }
            free_test_weight(&w);
        }
    }
    cr_log_info("batch independence: %d batches checked bit for bit", checked);
    cpu_matmul_set_bf16_inputs(mm, false);
    free(x);
    free(alone);
    free(batch);
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
}
