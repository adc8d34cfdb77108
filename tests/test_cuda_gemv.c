/*
 * test_cuda_gemv.c - the few-row product (cuda/cuda_gemv.cu) against a
 * float64 loop, at every row count it takes, widths on and off its
 * 256-element stride (8 .. 3,080) and output counts from 1 to the Qwen3
 * vocabulary; outputs poisoned with NaN so a skipped column shows. Its
 * refusals (too many rows, a width not a multiple of 8, misaligned
 * pointers) are arithmetic and run without a GPU.
 */
#include <criterion/criterion.h>

#include "cuda_test.h"

static void gemv_case(int rows, int out, int in, uint64_t seed) {
    float *x_f, *w_f;
    uint16_t *x = random_bf16((size_t)rows * in, 1.0f, seed, &x_f);
    uint16_t *w = random_bf16((size_t)out * in, 1.0f, seed + 1, &w_f);
    uint16_t *d_x = dev_copy(x, sizeof(uint16_t) * rows * in), *d_w = dev_copy(w, sizeof(uint16_t) * out * in);
    float *d_y = dev_poisoned(sizeof(float) * rows * out), *y = malloc(sizeof(float) * rows * out);
    cr_assert(y);
    Error err = {0};
    cr_assert(cuda_gemv_fits(rows, in, d_x, d_w));
    cr_assert(cuda_gemv(d_y, d_x, d_w, rows, out, in, NULL, &err) == 0, "%s", err.msg);
    dev_fetch(y, d_y, sizeof(float) * rows * out);
    for (int m = 0; m < rows; m++)
        for (int n = 0; n < out; n++) {
            double want = 0, scale = 0;
            for (int k = 0; k < in; k++) {
                want += (double)x_f[(size_t)m * in + k] * w_f[(size_t)n * in + k];
                scale += fabs((double)x_f[(size_t)m * in + k] * w_f[(size_t)n * in + k]);
            }
            float got = y[(size_t)m * out + n];
            cr_assert(fabs(got - want) <= 3e-5 * scale + 1e-6, "%d x %d x %d: y[%d, %d] %g vs %g", rows, out, in, m,
                      n, got, want);
        }
    void *dev[] = {d_x, d_w, d_y};
    for (size_t i = 0; i < 3; i++) cuda_free(dev[i]);
    void *host[] = {x, w, x_f, w_f, y};
    for (size_t i = 0; i < 5; i++) free(host[i]);
}

Test(cuda_gemv, matches_float64_at_every_row_count, .timeout = 120) {
    require_gpu();
    static const int shapes[][2] = {{1, 8}, {7, 256}, {33, 264}, {1000, 1024}, {1024, 3072}, {4096, 1032}, {129, 3080}};
    for (int rows = 1; rows <= CUDA_GEMV_MAX_ROWS; rows++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            gemv_case(rows, shapes[s][0], shapes[s][1], 1000 + (uint64_t)rows * 17 + s);
    gemv_case(1, 151936, 64, 7); /* the vocabulary: the last block's warps past N return */
}

Test(cuda_gemv, refuses_what_it_does_not_cover) {
    static uint16_t buf[64] __attribute__((aligned(16)));
    cr_expect(cuda_gemv_fits(1, 1024, buf, buf));
    cr_expect(!cuda_gemv_fits(0, 1024, buf, buf));
    cr_expect(!cuda_gemv_fits(CUDA_GEMV_MAX_ROWS + 1, 1024, buf, buf));
    cr_expect(!cuda_gemv_fits(1, 1020, buf, buf), "width not a multiple of 8");
    cr_expect(!cuda_gemv_fits(1, 1024, buf + 1, buf), "misaligned x");
    cr_expect(!cuda_gemv_fits(1, 1024, buf, buf + 4), "misaligned W");
    Error err = {0};
    cr_expect(cuda_gemv(NULL, buf, buf, 5, 8, 8, NULL, &err) == -1 && err.msg[0]);
}
