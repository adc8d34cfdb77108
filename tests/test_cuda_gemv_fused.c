/*
 * test_cuda_gemv_fused.c - the normalising gemvs (cuda/cuda_gemv.cu's NORM
 * and GLU forms) against the launches they stand for, to the bit: residual
 * add + RMSNorm (cuda_add_rmsnorm) then cuda_gemv, and for gate/up also
 * cuda_silu_mul. The decode step's fused path is only worth its speed if it
 * is the unfused path's numbers, so every output is compared with memcmp:
 * the product, the new residual and h (the bf16 rows some other kernel may
 * read), at every row count, with and without a pending delta, at widths
 * where K is split over 1 and 4 warps, for bf16 and FP8 matrices (the FP8
 * gemv, cuda_gemv_fp8, as the unfused product). Outputs start as NaN. The
 * refusals are arithmetic and run without a GPU.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "cuda/cuda_fp8_plan.h"
#include "cuda_test.h"
#include "model/weight_format.h"

typedef struct {
    int rows, out, in;
    bool delta, glu, fp8;
} FusedCase;

static void *dev_floats(size_t n, uint64_t seed, float scale) {
    float *h = random_floats(n, scale, seed);
    void *d = dev_copy(h, sizeof(float) * n);
    free(h);
    return d;
}

static void expect_same_bytes(void *d_a, void *d_b, size_t bytes, const char *what, const FusedCase *c) {
    unsigned char *a = malloc(bytes), *b = malloc(bytes);
    cr_assert(a && b);
    dev_fetch(a, d_a, bytes);
    dev_fetch(b, d_b, bytes);
    size_t first = bytes;
    for (size_t i = 0; i < bytes && first == bytes; i++)
        if (a[i] != b[i]) first = i;
    cr_expect(first == bytes,
              "%s differs from the unfused launches at byte %zu of %zu (%d rows, %d x %d, delta %d, glu %d, fp8 %d)",
              what, first, bytes, c->rows, c->out, c->in, c->delta, c->glu, c->fp8);
    free(a);
    free(b);
}

static void fused_case(FusedCase c, uint64_t seed) {
    const int rows = c.rows, in = c.in, w_rows = c.glu ? 2 * c.out : c.out;
    const size_t xs = (size_t)rows * in;
    /* W: bf16, or e4m3 bytes (no NaNs) with per-row scales of 2^-9 .. 2^-6 */
    void *d_w, *d_w_scales = NULL;
    {
        const size_t n = (size_t)w_rows * in;
        if (c.fp8) {
            uint8_t *q = malloc(n);
            float *sc = malloc(sizeof(float) * fp8_row_scale_count(w_rows, in));
            cr_assert(q && sc);
            uint64_t st = seed;
            for (size_t i = 0; i < n; i++) {
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                q[i] = (uint8_t)(st >> 56);
                if (fp8_e4m3_is_nan(q[i])) q[i] ^= 1;
            }
            for (size_t i = 0; i < fp8_row_scale_count(w_rows, in); i++) sc[i] = ldexpf(1.0f, -6 - (int)(i % 4));
            d_w = dev_copy(q, n);
            d_w_scales = dev_copy(sc, sizeof(float) * fp8_row_scale_count(w_rows, in));
            free(q);
            free(sc);
        } else {
            float *w_f;
            uint16_t *w = random_bf16(n, 0.05f, seed, &w_f);
            d_w = dev_copy(w, sizeof(uint16_t) * n);
            free(w);
            free(w_f);
        }
    }
    const CudaMatrix wm = {d_w, d_w_scales, NULL};
    float *d_x = dev_floats(xs, seed + 1, 2.0f), *d_x_ref = dev_copy(NULL, sizeof(float) * xs);
    float *d_delta = c.delta ? dev_floats(xs, seed + 2, 1.0f) : NULL;
    float *d_norm = dev_floats((size_t)in, seed + 3, 1.5f);
    float *d_x_out = dev_poisoned(sizeof(float) * xs);
    uint16_t *d_h = dev_poisoned(sizeof(uint16_t) * xs), *d_h_ref = dev_poisoned(sizeof(uint16_t) * xs);
    const size_t y_bytes = (size_t)rows * c.out * (c.glu ? sizeof(uint16_t) : sizeof(float));
    void *d_y = dev_poisoned(y_bytes), *d_y_ref = dev_poisoned(y_bytes);
    float *d_gate_up = c.glu ? dev_poisoned(sizeof(float) * rows * w_rows) : NULL;
    Error err = {0};
    const float eps = 1e-6f;

    /* the unfused launches, on a copy of the residual (add_rmsnorm adds in place) */
    float *x_host = malloc(sizeof(float) * xs);
    cr_assert(x_host);
    dev_fetch(x_host, d_x, sizeof(float) * xs);
    cr_assert(cuda_upload(d_x_ref, x_host, sizeof(float) * xs, &err) == 0, "%s", err.msg);
    cr_assert(cuda_add_rmsnorm(d_x_ref, d_delta, d_h_ref, d_norm, rows, in, eps, NULL, &err) == 0, "%s", err.msg);
    float *d_plain = c.glu ? d_gate_up : d_y_ref;
    cr_assert((c.fp8 ? cuda_gemv_fp8(d_plain, d_h_ref, d_w, d_w_scales, rows, w_rows, in, NULL, &err)
                     : cuda_gemv(d_plain, d_h_ref, d_w, rows, w_rows, in, NULL, &err)) == 0,
              "%s", err.msg);
    if (c.glu) cr_assert(cuda_silu_mul(d_y_ref, d_gate_up, rows, c.out, NULL, &err) == 0, "%s", err.msg);

    const CudaGemvNorm n = {d_x, d_delta, d_norm, d_x_out, d_h, eps};
    cr_assert(cuda_gemv_norm_fits(rows, in, &n, wm));
    if (c.glu) cr_assert(cuda_gemv_norm_glu(d_y, &n, wm, rows, c.out, in, NULL, &err) == 0, "%s", err.msg);
    else cr_assert(cuda_gemv_norm(d_y, &n, wm, rows, c.out, in, NULL, &err) == 0, "%s", err.msg);

    expect_same_bytes(d_y, d_y_ref, y_bytes, c.glu ? "SiLU x up" : "the product", &c);
    expect_same_bytes(d_h, d_h_ref, sizeof(uint16_t) * xs, "h", &c);
    if (c.delta) expect_same_bytes(d_x_out, d_x_ref, sizeof(float) * xs, "the new residual", &c);
    float *x_after = malloc(sizeof(float) * xs);
    cr_assert(x_after);
    dev_fetch(x_after, d_x, sizeof(float) * xs);
    cr_expect(memcmp(x_after, x_host, sizeof(float) * xs) == 0, "x_in is read, never written");

    void *dev[] = {d_w, d_w_scales, d_x, d_x_ref, d_delta, d_norm, d_x_out, d_h, d_h_ref, d_y, d_y_ref, d_gate_up};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cuda_free(dev[i]);
    free(x_host);
    free(x_after);
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
                        fused_case((FusedCase){rows, shapes[s][0], shapes[s][1], delta, false, fp8},
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
                    fused_case((FusedCase){rows, shapes[s][0], shapes[s][1], true, true, fp8},
                               500 + (uint64_t)rows * 13 + s);
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
