/*
 * test_cuda_gemv_fused.c - the normalising gemvs (cuda/cuda_gemv.cu's NORM
 * and GLU forms) against the launches they stand for, to the bit: residual
 * add + RMSNorm (cuda_add_rmsnorm) then cuda_gemv, and for gate/up also
 * cuda_silu_mul. The decode step's fused path is only worth its speed if it
 * is the unfused path's numbers, so every output is compared with memcmp:
 * the product, the new residual and h (the bf16 rows some other kernel may
 * read), at every row count, with and without a pending delta, at widths
 * where K is split over 1 and 4 warps, for bf16 and FP8 matrices (the FP8
 * gemv, cuda_gemv_fp8, as the unfused product); and an MoE step's expert
 * gate/up with SiLU x up the same way. Outputs start as NaN. The
 * comparison is cuda/cuda_gemv_check.cu's, which the runner also runs at
 * start-up. The refusals are arithmetic and run without a GPU.
 */
#include <criterion/criterion.h>

#include "cuda/cuda_gemv_check.h"
#include "cuda_test.h"

static void fused_case(CudaGemvNormCase c, uint64_t seed) {
    char why[300];
    Error err = {0};
    const int rc = cuda_gemv_norm_check(c, seed, NULL, why, sizeof why, &err);
    cr_assert(rc >= 0, "%s", err.msg);
    cr_expect(rc == 0, "%s", why);
}

Test(cuda_gemv_fused, normalising_gemv_is_the_unfused_bits, .timeout = 120) {
    require_gpu();
    /* {out, in}: Qwen3-0.6B's qkv (K on 1 warp), o_proj-like (4 warps), a
     * narrow K, an output count off the block's 8 and the 1.7B's width */
    static const int shapes[][2] = {{4096, 1024}, {1024, 1024}, {40, 264}, {1001, 1024}, {513, 2048}};
    for (int fp8 = 0; fp8 <= 1; fp8++)
        for (int rows = 1; rows <= CUDA_GEMV_MAX_ROWS; rows++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                for (int delta = 0; delta <= 1; delta++)
                    if (!fp8 || shapes[s][1] % 16 == 0)
                        fused_case((CudaGemvNormCase){rows, shapes[s][0], shapes[s][1], delta, false, fp8},
                                   100 + (uint64_t)rows * 31 + s * 7 + (uint64_t)delta);
}

Test(cuda_gemv_fused, gate_up_with_silu_is_the_unfused_bits, .timeout = 120) {
    require_gpu();
    /* {intermediate, in}: the 0.6B's 3,072 x 1,024 (2I on 1 warp), a small
     * MLP whose 2I is under 4,096 (4 warps), an odd width */
    static const int shapes[][2] = {{3072, 1024}, {768, 1024}, {37, 264}, {1000, 2048}};
    for (int fp8 = 0; fp8 <= 1; fp8++)
        for (int rows = 1; rows <= CUDA_GEMV_MAX_ROWS; rows++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                if (!fp8 || shapes[s][1] % 16 == 0)
                    fused_case((CudaGemvNormCase){rows, shapes[s][0], shapes[s][1], true, true, fp8},
                               500 + (uint64_t)rows * 13 + s);
}

/* An MoE decode step's gate/up over routed pairs with SiLU x up in the
 * epilogue (cuda_gemv_experts_glu) against cuda_gemv_experts then
 * cuda_silu_mul_rows: Qwen3-30B-A3B's widths at 1 and 8 tokens, the tiny
 * MoE's, an activation width off the block's outputs. */
Test(cuda_gemv_fused, expert_gate_up_with_silu_is_the_unfused_bits, .timeout = 120) {
    require_gpu();
    static const CudaGemvExpertsCase cases[] = {
        {16, 8, 8, 768, 2048, false}, {16, 64, 8, 768, 2048, false}, {16, 4, 4, 32, 64, false},
        {5, 6, 2, 1001, 1024, false}, {16, 8, 8, 768, 2048, true},   {16, 64, 8, 768, 2048, true},
        {5, 6, 2, 1001, 1024, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char why[300];
        Error err = {0};
        const int rc = cuda_gemv_experts_glu_check(cases[i], 300 + i, NULL, why, sizeof why, &err);
        cr_assert(rc >= 0, "%s", err.msg);
        cr_expect(rc == 0, "%s", why);
    }
}

Test(cuda_gemv_fused, refuses_what_it_does_not_cover) {
    static float buf[64] __attribute__((aligned(16)));
    static uint16_t h[64] __attribute__((aligned(16)));
    const CudaGemvNorm ok = {buf, buf, buf, buf, h, 1e-6f};
    const CudaMatrix w = {buf, NULL, NULL}, w1 = {buf + 1, NULL, NULL}, w8 = {buf, buf, NULL};
    cr_expect(cuda_gemv_norm_fits(1, 1024, &ok, w));
    cr_expect(cuda_gemv_norm_fits(4, 4096, &ok, w), "32 KB of rows");
    cr_expect(cuda_gemv_norm_fits(2, 8192, &ok, w), "32 KB of rows");
    cr_expect(!cuda_gemv_norm_fits(4, 4104, &ok, w), "more than 32 KB of rows");
    cr_expect(!cuda_gemv_norm_fits(0, 1024, &ok, w));
    cr_expect(!cuda_gemv_norm_fits(CUDA_GEMV_MAX_ROWS + 1, 1024, &ok, w));
    cr_expect(!cuda_gemv_norm_fits(1, 1020, &ok, w), "width not a multiple of 8");
    cr_expect(cuda_gemv_norm_fits(1, 1032, &ok, w), "bf16: a multiple of 8");
    cr_expect(!cuda_gemv_norm_fits(1, 1032, &ok, w8), "FP8: not a multiple of 16");
    cr_expect(cuda_gemv_norm_fits(1, 1024, &ok, w8));
    cr_expect(!cuda_gemv_norm_fits(1, 1024, &ok, w1), "misaligned W");
    CudaGemvNorm bad = ok;
    bad.x_out = NULL;
    cr_expect(!cuda_gemv_norm_fits(1, 1024, &bad, w), "a delta with nowhere to put the sum");
    bad.delta = NULL;
    cr_expect(cuda_gemv_norm_fits(1, 1024, &bad, w), "no delta: no sum to write");
    bad = ok;
    bad.x_in = buf + 2;
    cr_expect(!cuda_gemv_norm_fits(1, 1024, &bad, w), "misaligned x");
    bad = ok;
    bad.h = h + 1;
    cr_expect(!cuda_gemv_norm_fits(1, 1024, &bad, w), "misaligned h");
    cr_expect(!cuda_gemv_norm_fits(1, 1024, NULL, w));
    Error err = {0};
    cr_expect(cuda_gemv_norm(NULL, &ok, w, 5, 8, 8, NULL, &err) == -1 && err.msg[0]);
    err = (Error){0};
    cr_expect(cuda_gemv_norm_glu(NULL, &ok, w8, 5, 8, 8, NULL, &err) == -1 && err.msg[0]);
}
