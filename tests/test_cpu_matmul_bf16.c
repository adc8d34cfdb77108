/*
 * test_cpu_matmul_bf16.c - matmuls with bf16 inputs (--dtype bfloat16,
 * cpu_matmul_bf16.h): against a float64 reference of the activations rounded
 * to bf16, at every row count 1..70, K and N off the 32-value steps and the
 * 4-row strips, past the kernel's L2 chunk and the 512-row conversion chunk,
 * at every SIMD level this machine can run (AVX512-BF16 multiplies bf16
 * natively; below it the float32 kernels get the rounded values) and with
 * every strategy forced. And that the rounding happens at all.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "cpu/cpu_matmul.h"
#include "cpu/cpu_matmul_bf16.h"
#include "base/half.h"
#include "matmul_reference.h"

/* Relative to sum |x w|: the float32 kernels meet 5e-7; vdpbf16ps rounds
 * each pair's sum into the accumulator, a little more. */
#define TOL 2e-6

typedef struct Inputs {
    float *x, *rounded, *y;
} Inputs;

static Inputs make_inputs(int M, int K, int N) {
    Inputs in = {malloc(sizeof(float) * (size_t)M * K), malloc(sizeof(float) * (size_t)M * K),
                 malloc(sizeof(float) * (size_t)M * N)};
    cr_assert(in.x && in.rounded && in.y);
    for (size_t i = 0; i < (size_t)M * K; i++) {
        in.x[i] = matmul_uniform();
        in.rounded[i] = bf16_to_f32(f32_to_bf16(in.x[i]));
    }
    for (size_t i = 0; i < (size_t)M * N; i++) in.y[i] = NAN; /* every output must be written */
    return in;
}

static void free_inputs(Inputs *in) {
    free(in->x);
    free(in->rounded);
    free(in->y);
}

static void check(CpuMatmul *mm, int M, int N, int K, WeightType type, MatmulStrategy s, CpuIsa isa) {
    TestWeight t = make_test_weight(N, K, type);
    Inputs in = make_inputs(M, K, N);
    cpu_matmul_with(mm, in.y, in.x, M, &t.w, s, isa);
    check_matmul_reference(in.y, in.rounded, M, &t, TOL, matmul_strategy_name(s), isa);
    free_inputs(&in);
    free_test_weight(&t);
}

static CpuMatmul *create(ThreadPool **pool, int threads, int max_rows, int max_cols) {
    Error err = {0};
    *pool = thread_pool_create(threads, &err);
    cr_assert(*pool, "%s", err.msg);
    CpuMatmul *mm = cpu_matmul_create(*pool, max_rows, max_cols, &err);
    cr_assert(mm, "%s", err.msg);
    cpu_matmul_set_bf16_inputs(mm, true);
    return mm;
}

static const int KS[] = {1, 17, 31, 33, 64, 1000};
static const int NS[] = {1, 3, 31, 33, 257};
#define NK (int)(sizeof KS / sizeof KS[0])
#define NN (int)(sizeof NS / sizeof NS[0])

Test(cpu_matmul_bf16, every_row_count_odd_sizes_every_isa, .timeout = 300) {
    ThreadPool *pool;
    CpuMatmul *mm = create(&pool, 3, 70, 1000);
    for (int isa = CPU_ISA_SCALAR; isa <= (int)cpu_isa_detect(); isa++)
        for (int M = 1; M <= 70; M++)
            check(mm, M, NS[(M / NK) % NN], KS[M % NK], WEIGHT_BF16, MATMUL_AUTO, (CpuIsa)isa);
    cr_log_info("bf16 inputs checked at SIMD levels scalar..%s (native bf16 dot: %s)",
                cpu_isa_name(cpu_isa_detect()), bf16_dot_kernel(cpu_isa_detect()) ? "yes" : "no");
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
}

/* Every (K, N) pair at rows around the tiles, every strategy forced, f32
 * weights too (those go to the float32 kernels on the rounded inputs). */
Test(cpu_matmul_bf16, all_shapes_every_strategy, .timeout = 300) {
    ThreadPool *pool;
    CpuMatmul *mm = create(&pool, 2, 70, 1000);
    const int rows[] = {1, 4, 6, 7, 13, 70};
    const MatmulStrategy strategies[] = {MATMUL_AUTO, MATMUL_ROWS, MATMUL_GEMM, MATMUL_BLAS};
    CpuIsa isa = cpu_isa_detect();
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
        for (int k = 0; k < NK; k++)
            for (int n = 0; n < NN; n++)
                check(mm, rows[r], NS[n], KS[k], WEIGHT_BF16, strategies[(r + k + n) % 4], isa);
    for (int s = 0; s < 4; s++) check(mm, 9, 33, 100, WEIGHT_F32, strategies[s], isa);
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
}

/* Prefill sizes: more rows than one conversion chunk (512) and than one L2
 * chunk of the kernel (256 KiB of rows: 131 at K = 1000); task boundaries. */
Test(cpu_matmul_bf16, prefill_sized, .timeout = 300) {
    ThreadPool *pool;
    CpuMatmul *mm = create(&pool, 2, 700, 1000);
    check(mm, 700, 33, 1000, WEIGHT_BF16, MATMUL_AUTO, cpu_isa_detect());
    check(mm, 137, 600, 300, WEIGHT_BF16, MATMUL_AUTO, cpu_isa_detect());
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
}

/* The rounding is real: the same product with float32 inputs differs (by
 * far more than the tolerance), and switching back restores float32. */
Test(cpu_matmul_bf16, inputs_are_rounded_only_when_asked) {
    ThreadPool *pool;
    CpuMatmul *mm = create(&pool, 2, 16, 512);
    enum { M = 16, N = 64, K = 512 };
    TestWeight t = make_test_weight(N, K, WEIGHT_BF16);
    Inputs in = make_inputs(M, K, N);
    float *y32 = malloc(sizeof(float) * M * N);
    cr_assert(y32);
    cpu_matmul(mm, in.y, in.x, M, &t.w);
    cpu_matmul_set_bf16_inputs(mm, false);
    cpu_matmul(mm, y32, in.x, M, &t.w);
    check_matmul_reference(y32, in.x, M, &t, 5e-7, "float32 inputs", cpu_isa_active());
    check_matmul_reference(in.y, in.rounded, M, &t, TOL, "bf16 inputs", cpu_isa_active());
    double max_diff = 0;
    for (int i = 0; i < M * N; i++) max_diff = fmax(max_diff, fabs(in.y[i] - y32[i]));
    cr_expect(max_diff > 1e-3, "bf16 inputs gave the float32 result (max diff %g)", max_diff);
    free(y32);
    free_inputs(&in);
    free_test_weight(&t);
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
}

/* q/k/v-like products sharing one input round it once for all of them;
 * cpu_matmul_grouped leaves its inputs alone (cpu_moe rounds them). */
Test(cpu_matmul_bf16, multi_rounds_grouped_does_not) {
    ThreadPool *pool;
    CpuMatmul *mm = create(&pool, 2, 40, 200);
    enum { K = 200, M = 12 };
    TestWeight t[3] = {make_test_weight(300, K, WEIGHT_BF16), make_test_weight(33, K, WEIGHT_BF16),
                       make_test_weight(7, K, WEIGHT_BF16)};
    Inputs in[3];
    for (int i = 0; i < 3; i++) in[i] = make_inputs(M, K, t[i].w.rows);
    const Weight *ws[3] = {&t[0].w, &t[1].w, &t[2].w};
    float *ys[3] = {in[0].y, in[1].y, in[2].y};
    cpu_matmul_multi(mm, in[0].x, M, ws, ys, 3);
    for (int i = 0; i < 3; i++) check_matmul_reference(ys[i], in[0].rounded, M, &t[i], TOL, "multi", cpu_isa_active());
    MatmulGroup groups[3];
    for (int i = 0; i < 3; i++) groups[i] = (MatmulGroup){in[i].x, i == 1 ? 1 : M, &t[i].w, in[i].y, NULL};
    cpu_matmul_grouped(mm, groups, 3);
    for (int i = 0; i < 3; i++)
        check_matmul_reference(in[i].y, in[i].x, groups[i].M, &t[i], 5e-7, "grouped", cpu_isa_active());
    /* Given bf16 copies of rounded inputs (as cpu_moe passes them), the
     * groups run on the bf16 kernel where the CPU has one, on the float32
     * kernels elsewhere: the same products either way, at every level. */
    uint16_t *xb[3];
    for (int i = 0; i < 3; i++) {
        xb[i] = malloc(sizeof(uint16_t) * M * K);
        cr_assert(xb[i]);
        for (int j = 0; j < M * K; j++) xb[i][j] = f32_to_bf16(in[i].rounded[j]);
        groups[i] = (MatmulGroup){in[i].rounded, i == 1 ? 1 : M, &t[i].w, in[i].y, xb[i]};
    }
    CpuIsa best = cpu_isa_detect();
    for (int isa = CPU_ISA_SCALAR; isa <= (int)best; isa++) {
        cr_assert(cpu_isa_set((CpuIsa)isa) == 0);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < M * t[i].w.rows; j++) in[i].y[j] = NAN;
        cpu_matmul_grouped(mm, groups, 3);
        for (int i = 0; i < 3; i++)
            check_matmul_reference(in[i].y, in[i].rounded, groups[i].M, &t[i], TOL, "grouped bf16", (CpuIsa)isa);
    }
    cpu_isa_set(best);
    for (int i = 0; i < 3; i++) free(xb[i]);
    for (int i = 0; i < 3; i++) {
        free_inputs(&in[i]);
        free_test_weight(&t[i]);
    }
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
}
