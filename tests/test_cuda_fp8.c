/*
 * test_cuda_fp8.c - FP8 weights on the GPU (cuda/cuda_fp8.cu,
 * cuda/cuda_matmul.cu, the MoE's FP8 grouped GEMM, the runner) against
 * float64 references built from model/weight_format.h's
 * fp8_dequantize_rows, the definition of Qwen's FP8 layout. Matrices are
 * random non-NaN e4m3 bytes (subnormals included) with a different scale in
 * every 128 x 128 tile, stacked from parts whose row counts are not
 * multiples of 128 (96-row parts, as the tiny models' MLPs), so a scale
 * read from the wrong tile or the wrong part shows. Skipped, with the
 * reason, where there is no GPU; the gemv's refusals run anywhere.
 *
 * The runner-level tests need no CPU FP8 kernels: the reference is the CPU
 * runner in float32 on a model whose layer matrices are float32 copies of
 * the FP8 ones, dequantized by fp8_dequantize_rows (the same dummy model's
 * bytes and scales). The GPU computes in bf16 (activations, KV cache, and
 * the weights of the dequantize-then-cuBLAS path), so logits must agree to
 * the dense CUDA tests' 2e-2 relative error.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "cpu/cpu_moe.h"
#include "cpu/cpu_runner.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_fp8_gemm.h"
#include "cuda/cuda_fp8_plan.h"
#include "cuda/cuda_matmul.h"
#include "cuda/cuda_moe.h"
#include "cuda/cuda_runner.h"
#include "cuda_test.h"
#include "helpers.h"

#define REL_TOL 2e-2

/* ---- random FP8 matrices stacked from parts ------------------------------------------------- */

#define MAX_PARTS 4

/* A stacked FP8 matrix as the upload makes it, and its float32 reference. */
typedef struct Fp8Stack {
    int rows, cols;
    uint8_t *q;          /* [rows, cols] */
    float *row_scales;   /* [rows, tiles]: the device layout */
    float *ref;          /* [rows, cols]: each part's fp8_dequantize_rows */
    uint8_t *d_q;        /* device copies */
    float *d_scales;
    float *d_tiles; /* cuBLASLt's tile scales when every part is whole 128 x 128 tiles, else NULL */
} Fp8Stack;

static void random_bytes(uint8_t *q, size_t n, uint64_t *s) {
    for (size_t i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        q[i] = (uint8_t)(*s >> 56);
        if (fp8_e4m3_is_nan(q[i])) q[i] ^= 1;
    }
}

/* parts: row counts, 0-terminated (at most MAX_PARTS). Scales: 2^-10 to
 * 2^-6 times 1..2, different in every tile of every part. */
static Fp8Stack fp8_stack(const int *parts, int cols, uint64_t seed) {
    Fp8Stack m = {.cols = cols};
    for (int p = 0; p < MAX_PARTS && parts[p]; p++) m.rows += parts[p];
    const size_t n = (size_t)m.rows * cols;
    m.q = malloc(n);
    m.row_scales = malloc(sizeof(float) * fp8_row_scale_count(m.rows, cols));
    m.ref = malloc(sizeof(float) * n);
    cr_assert(m.q && m.row_scales && m.ref);
    random_bytes(m.q, n, &seed);
    bool whole_tiles = cols % FP8_BLOCK == 0;
    for (int p = 0; p < MAX_PARTS && parts[p]; p++) whole_tiles = whole_tiles && parts[p] % FP8_BLOCK == 0;
    float *tiles_host = whole_tiles ? malloc(sizeof(float) * fp8_tile_scale_count(m.rows, cols)) : NULL;
    cr_assert(tiles_host || !whole_tiles);
    int row0 = 0;
    for (int p = 0; p < MAX_PARTS && parts[p]; p++) {
        const size_t tiles = fp8_scale_count(parts[p], cols);
        float *tile = malloc(sizeof(float) * tiles);
        cr_assert(tile);
        for (size_t t = 0; t < tiles; t++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            tile[t] = ldexpf(1.0f + (float)((seed >> 40) & 0xffff) / 65536.0f, -6 - (int)((seed >> 60) % 5));
        }
        fp8_row_scales(m.row_scales + fp8_row_scale_count(row0, cols), tile, parts[p], cols);
        if (tiles_host) fp8_padded_tile_scales(tiles_host + fp8_tile_scale_count(row0, cols), tile, parts[p], cols);
        fp8_dequantize_rows(m.q + (size_t)row0 * cols, tile, cols, 0, parts[p], m.ref + (size_t)row0 * cols);
        free(tile);
        row0 += parts[p];
    }
    m.d_q = dev_copy(m.q, n);
    m.d_scales = dev_copy(m.row_scales, sizeof(float) * fp8_row_scale_count(m.rows, cols));
    if (tiles_host) m.d_tiles = dev_copy(tiles_host, sizeof(float) * fp8_tile_scale_count(m.rows, cols));
    free(tiles_host);
    return m;
}

static void fp8_stack_free(Fp8Stack *m) {
    cuda_free(m->d_q);
    cuda_free(m->d_scales);
    cuda_free(m->d_tiles);
    free(m->q);
    free(m->row_scales);
    free(m->ref);
}

/* y [rows, m.rows] against the float64 product of x (bf16, widened in x_f)
 * and the reference weights: |error| <= tol x sum |x w| (+ a tiny floor). */
static void check_product(const float *y, const float *x_f, const Fp8Stack *m, int rows, double tol,
                          const char *what) {
    for (int r = 0; r < rows; r++)
        for (int n = 0; n < m->rows; n++) {
            double want = 0, scale = 0;
            for (int k = 0; k < m->cols; k++) {
                double p = (double)x_f[(size_t)r * m->cols + k] * m->ref[(size_t)n * m->cols + k];
                want += p;
                scale += fabs(p);
            }
            float got = y[(size_t)r * m->rows + n];
            cr_assert(fabs(got - want) <= tol * scale + 1e-6, "%s: %d rows x [%d, %d]: y[%d, %d] %g vs %g", what,
                      rows, m->rows, m->cols, r, n, got, want);
        }
}

/* Shapes: stacked parts (0-terminated) and the width. Partial column
 * tiles (96, 160, 272, 1040, 3088), 96-row parts, every k split (1, 2, 4),
 * and more outputs than the last block has warps for. */
static const struct {
    int parts[MAX_PARTS];
    int cols;
} SHAPES[] = {
    {{96, 96, 96, 0}, 160}, {{7, 0}, 16},       {{33, 0}, 272},    {{96, 96, 0}, 96},     {{1000, 0}, 1024},
    {{1024, 0}, 3072},      {{4096, 0}, 1040},  {{129, 0}, 3088},  {{192, 96, 0}, 2048},  {{20000, 0}, 64},
};
#define NUM_SHAPES (sizeof SHAPES / sizeof SHAPES[0])

Test(cuda_fp8, gemv_matches_float64_at_every_row_count, .timeout = 120) {
    require_gpu();
    for (size_t s = 0; s < NUM_SHAPES; s++) {
        Fp8Stack m = fp8_stack(SHAPES[s].parts, SHAPES[s].cols, 100 + s);
        for (int rows = 1; rows <= CUDA_GEMV_MAX_ROWS; rows++) {
            float *x_f;
            uint16_t *x = random_bf16((size_t)rows * m.cols, 1.0f, 7 * s + (uint64_t)rows, &x_f);
            uint16_t *d_x = dev_copy(x, sizeof(uint16_t) * rows * m.cols);
            float *d_y = dev_poisoned(sizeof(float) * rows * m.rows), *y = malloc(sizeof(float) * rows * m.rows);
            cr_assert(y);
            Error err = {0};
            cr_assert(cuda_gemv_fp8_fits(rows, m.cols, d_x, m.d_q));
            cr_assert(cuda_gemv_fp8(d_y, d_x, m.d_q, m.d_scales, rows, m.rows, m.cols, NULL, &err) == 0, "%s",
                      err.msg);
            dev_fetch(y, d_y, sizeof(float) * rows * m.rows);
            check_product(y, x_f, &m, rows, 3e-5, "gemv");
            cuda_free(d_x);
            cuda_free(d_y);
            free(x);
            free(x_f);
            free(y);
        }
        fp8_stack_free(&m);
    }
}

Test(cuda_fp8, gemv_refuses_what_it_does_not_cover) {
    static uint8_t buf[64] __attribute__((aligned(16)));
    cr_expect(cuda_gemv_fp8_fits(1, 1024, buf, buf));
    cr_expect(!cuda_gemv_fp8_fits(0, 1024, buf, buf));
    cr_expect(!cuda_gemv_fp8_fits(CUDA_GEMV_MAX_ROWS + 1, 1024, buf, buf));
    cr_expect(!cuda_gemv_fp8_fits(1, 1032, buf, buf), "width not a multiple of 16");
    cr_expect(!cuda_gemv_fp8_fits(1, 1024, buf + 2, buf), "misaligned x");
    cr_expect(!cuda_gemv_fp8_fits(1, 1024, buf, buf + 8), "misaligned W");
    Error err = {0};
    cr_expect(cuda_gemv_fp8(NULL, (const uint16_t *)buf, buf, NULL, 5, 16, 16, NULL, &err) == -1 && err.msg[0]);
}

/* bf16(e4m3 * scale) bit for bit against the host reference, on the
 * 16-value path and the any-shape one (widths 100 and 33). */
Test(cuda_fp8, dequantization_is_the_reference_rounded_to_bf16, .timeout = 60) {
    require_gpu();
    static const struct {
        int parts[MAX_PARTS];
        int cols;
    } shapes[] = {{{96, 96, 96, 0}, 160}, {{300, 0}, 1040}, {{96, 0}, 100}, {{129, 0}, 33}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        Fp8Stack m = fp8_stack(shapes[s].parts, shapes[s].cols, 40 + s);
        const size_t n = (size_t)m.rows * m.cols;
        uint16_t *d_out = dev_poisoned(sizeof(uint16_t) * n), *out = malloc(sizeof(uint16_t) * n);
        cr_assert(out);
        Error err = {0};
        cr_assert(cuda_fp8_dequantize(d_out, m.d_q, m.d_scales, m.rows, m.cols, NULL, &err) == 0, "%s", err.msg);
        dev_fetch(out, d_out, sizeof(uint16_t) * n);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(out[i], f32_to_bf16(m.ref[i]), "[%d, %d]: %d x %d: 0x%04x vs 0x%04x", (int)(i / m.cols),
                         (int)(i % m.cols), m.rows, m.cols, out[i], f32_to_bf16(m.ref[i]));
        /* rows 1.. alone (a row tile, as cuda_matmul cuts them; for widths
         * that are not a multiple of 16, a start that is not 16-aligned) */
        {
            const size_t skip = (size_t)m.cols;
            cr_assert(cuda_fp8_dequantize(d_out, m.d_q + skip, m.d_scales + fp8_row_scale_count(1, m.cols),
                                          m.rows - 1, m.cols, NULL, &err) == 0,
                      "%s", err.msg);
            dev_fetch(out, d_out, sizeof(uint16_t) * (n - skip));
            for (size_t i = 0; i < n - skip; i++)
                cr_assert_eq(out[i], f32_to_bf16(m.ref[skip + i]), "offset rows: value %zu", i);
        }
        cuda_free(d_out);
        free(out);
        fp8_stack_free(&m);
    }
}

/* cuda_matmul of random bf16 rows (seed) by m's matrix as w, checked by
 * check_product to tol. */
static void matmul_case(CudaMatmul *mm, const Fp8Stack *m, CudaMatrix w, int rows, uint64_t seed, double tol,
                        const char *what) {
    float *x_f;
    uint16_t *x = random_bf16((size_t)rows * m->cols, 1.0f, seed, &x_f);
    uint16_t *d_x = dev_copy(x, sizeof(uint16_t) * rows * m->cols);
    float *d_y = dev_poisoned(sizeof(float) * rows * m->rows), *y = malloc(sizeof(float) * rows * m->rows);
    cr_assert(y);
    Error err = {0};
    cr_assert(cuda_matmul(mm, d_y, d_x, w, rows, m->rows, m->cols, &err) == 0, "%s", err.msg);
    dev_fetch(y, d_y, sizeof(float) * rows * m->rows);
    check_product(y, x_f, m, rows, tol, what);
    cuda_free(d_x);
    cuda_free(d_y);
    free(x);
    free(x_f);
    free(y);
}

/* cuda_matmul at batches past the gemv: 5 and 16 rows (the gemv in passes
 * of 4), 17, 64 and 300 (dequantized to bf16, cuBLAS), with a scratch of
 * 97 rows so that the row tiles cut parts and 128-row tiles; width 100
 * (no gemv) goes through the scratch at every batch. bf16 weights: 2^-8 of
 * sum |x w| (one bf16 rounding of each weight). */
Test(cuda_fp8, matmul_matches_float64_at_larger_batches, .timeout = 120) {
    require_gpu();
    static const struct {
        int parts[MAX_PARTS];
        int cols;
    } shapes[] = {{{96, 96, 96, 0}, 160}, {{1000, 0}, 1040}, {{300, 0}, 100}};
    static const int BATCHES[] = {5, 16, 17, 64, 300};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        Fp8Stack m = fp8_stack(shapes[s].parts, shapes[s].cols, 60 + s);
        Error err = {0};
        CudaMatmul *mm = cuda_matmul_create(NULL, &err);
        cr_assert(mm, "%s", err.msg);
        cr_assert(cuda_matmul_reserve_fp8(mm, (size_t)97 * m.cols, &err) == 0, "%s", err.msg);
        for (size_t b = 0; b < sizeof BATCHES / sizeof BATCHES[0]; b++) {
            const bool gemv = BATCHES[b] <= CUDA_FP8_GEMV_MAX_ROWS && m.cols % 16 == 0;
            matmul_case(mm, &m, (CudaMatrix){m.d_q, m.d_scales, NULL}, BATCHES[b], 11 * s + b, gemv ? 3e-5 : 4e-3,
                        gemv ? "gemv passes" : "dequantized GEMM");
        }
        cuda_matmul_destroy(mm);
        fp8_stack_free(&m);
    }
}

/* The activations' quantization for the FP8 tensor cores: each row's
 * 128-column block to e4m3 of x / (max |x| / 448), the host's rounding
 * (fp8_e4m3_from_float) to the bit, the scales where cuBLASLt reads them;
 * an all-zero block gets scale 1, and rows of very different magnitudes
 * keep their own scales. */
Test(cuda_fp8, activations_quantize_per_row_and_128_columns, .timeout = 60) {
    require_gpu();
    enum { ROWS = 37, COLS = 384 };
    float *x_f;
    uint16_t *x = random_bf16((size_t)ROWS * COLS, 1.0f, 77, &x_f);
    for (int r = 0; r < ROWS; r++)
        for (int k = 0; k < COLS; k++) {
            const float v = r == 3 && k < 128 ? 0.0f : ldexpf(x_f[(size_t)r * COLS + k], r % 9 - 4);
            x[(size_t)r * COLS + k] = f32_to_bf16(v);
            x_f[(size_t)r * COLS + k] = bf16_to_f32(x[(size_t)r * COLS + k]);
        }
    uint16_t *d_x = dev_copy(x, sizeof(uint16_t) * ROWS * COLS);
    uint8_t *d_q = dev_poisoned(ROWS * COLS), *q = malloc(ROWS * COLS);
    float *d_s = dev_poisoned(sizeof(float) * ROWS * (COLS / 128)), *s = malloc(sizeof(float) * ROWS * (COLS / 128));
    cr_assert(q && s);
    Error err = {0};
    cr_assert(cuda_fp8_quantize_rows(d_q, d_s, d_x, ROWS, COLS, NULL, &err) == 0, "%s", err.msg);
    dev_fetch(q, d_q, ROWS * COLS);
    dev_fetch(s, d_s, sizeof(float) * ROWS * (COLS / 128));
    for (int r = 0; r < ROWS; r++)
        for (int b = 0; b < COLS / 128; b++) {
            float amax = 0.0f;
            for (int k = b * 128; k < (b + 1) * 128; k++) amax = fmaxf(amax, fabsf(x_f[(size_t)r * COLS + k]));
            const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
            const float got_scale = s[fp8_act_scale_index(r, b * 128, ROWS)];
            cr_assert(got_scale == scale, "row %d block %d: scale %g, want %g", r, b, got_scale, scale);
            for (int k = b * 128; k < (b + 1) * 128; k++) {
                const uint8_t want = fp8_e4m3_from_float(x_f[(size_t)r * COLS + k] / scale);
                cr_assert(q[(size_t)r * COLS + k] == want, "x[%d, %d] = %g: byte %#x, want %#x", r, k,
                          x_f[(size_t)r * COLS + k], q[(size_t)r * COLS + k], want);
            }
        }
    cr_expect(cuda_fp8_quantize_rows(d_q, d_s, d_x, ROWS, 200, NULL, &err) == -1, "200 columns: not whole blocks");
    cuda_free(d_x);
    cuda_free(d_q);
    cuda_free(d_s);
    free(x);
    free(x_f);
    free(q);
    free(s);
}

/* Prompt-sized products of tile-scaled FP8 matrices (a q/k/v-like stack of
 * 128-row parts, 1,024 and 3,072 wide) through cuda_matmul with the FP8
 * tensor-core path reserved: where cuBLASLt has a block-scaled FP8
 * algorithm and the start-up check passed it runs, within the activations'
 * rounding, 2^-4 of sum |x w| (bound 0.07); elsewhere (an H200 with CUDA
 * 13's cuBLASLt has none: block scales are Blackwell's) the dequantized
 * path runs, to its own bound. Which one ran is logged. */
Test(cuda_fp8, tensor_core_products_of_tile_scaled_matrices, .timeout = 120) {
    require_gpu();
    char why[256];
    cuda_device_probe(why, sizeof why);
    static const struct {
        int parts[MAX_PARTS];
        int cols;
    } shapes[] = {{{256, 128, 128, 0}, 1024}, {{1024, 0}, 3072}};
    static const int BATCHES[] = {17, 64, 300};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        Fp8Stack m = fp8_stack(shapes[s].parts, shapes[s].cols, 90 + s);
        cr_assert(m.d_tiles);
        Error err = {0};
        CudaMatmul *mm = cuda_matmul_create(NULL, &err);
        cr_assert(mm, "%s", err.msg);
        cr_assert(cuda_matmul_reserve_fp8(mm, (size_t)m.rows * m.cols, &err) == 0, "%s", err.msg);
        cr_assert(cuda_matmul_reserve_fp8_gemm(mm, 300, m.cols, &err) == 0, "%s", err.msg);
        const bool tensor = cuda_matmul_fp8_tensor_cores(mm);
        cr_log_info("%s: FP8 prompt products %s", why,
                    tensor ? "on the FP8 tensor cores" : "dequantized to bf16 (the reason is in the log)");
        for (size_t b = 0; b < sizeof BATCHES / sizeof BATCHES[0]; b++)
            matmul_case(mm, &m, (CudaMatrix){m.d_q, m.d_scales, m.d_tiles}, BATCHES[b], 17 * s + b,
                        tensor ? 0.07 : 4e-3, tensor ? "FP8 x FP8 GEMM" : "dequantized GEMM");
        cuda_matmul_destroy(mm);
        fp8_stack_free(&m);
    }
}

/* ---- the MoE layer with FP8 experts ------------------------------------------------------------ */

/* 8 experts of width 96 (gate and up 96-row parts) over hidden 160, 1 to 13
 * tokens: the GPU's FP8 grouped GEMM against cpu_moe on the float32
 * dequantized experts. */
Test(cuda_fp8, moe_fp8_experts_match_the_dequantized_experts, .timeout = 60) {
    require_gpu();
    enum { E = 8, K = 2, H = 160, MI = 96, T = 13 };
    float *unused;
    uint16_t *router = random_bf16((size_t)E * H, 0.3f, 1, &unused);
    free(unused);
    /* each expert's gate and up (two 96-row parts) and down, stacked expert after expert */
    Fp8Stack gu[E], dn[E];
    const int two[3] = {MI, MI, 0}, one[2] = {H, 0};
    for (int e = 0; e < E; e++) {
        gu[e] = fp8_stack(two, H, 500 + (uint64_t)e);
        dn[e] = fp8_stack(one, MI, 600 + (uint64_t)e);
    }
    const size_t gu_n = (size_t)2 * MI * H, dn_n = (size_t)H * MI;
    const size_t gu_s = fp8_row_scale_count(2 * MI, H), dn_s = fp8_row_scale_count(H, MI);
    uint8_t *q_gu = malloc(E * gu_n), *q_dn = malloc(E * dn_n);
    float *s_gu = malloc(sizeof(float) * E * gu_s), *s_dn = malloc(sizeof(float) * E * dn_s);
    cr_assert(q_gu && q_dn && s_gu && s_dn);
    ExpertWeights experts[E];
    for (int e = 0; e < E; e++) {
        memcpy(q_gu + e * gu_n, gu[e].q, gu_n);
        memcpy(q_dn + e * dn_n, dn[e].q, dn_n);
        memcpy(s_gu + e * gu_s, gu[e].row_scales, sizeof(float) * gu_s);
        memcpy(s_dn + e * dn_s, dn[e].row_scales, sizeof(float) * dn_s);
        experts[e] = (ExpertWeights){
            {.data = gu[e].ref, .type = WEIGHT_F32, .rows = MI, .cols = H},
            {.data = gu[e].ref + (size_t)MI * H, .type = WEIGHT_F32, .rows = MI, .cols = H},
            {.data = dn[e].ref, .type = WEIGHT_F32, .rows = H, .cols = MI}};
    }
    LayerWeights L = {.router = {.data = router, .type = WEIGHT_BF16, .rows = E, .cols = H}, .experts = experts};
    ModelConfig c = {.hidden_size = H, .num_experts = E, .num_experts_per_tok = K, .moe_intermediate_size = MI,
                     .norm_topk_prob = true};
    uint16_t h[T * H];
    float x[T * H];
    uint64_t seed = 9;
    for (int i = 0; i < T * H; i++) {
        h[i] = f32_to_bf16(test_uniform(&seed));
        x[i] = bf16_to_f32(h[i]);
    }
    Error err = {0};
    ThreadPool *pool = thread_pool_create(2, &err);
    CpuMatmul *mm = pool ? cpu_matmul_create(pool, T, H, &err) : NULL;
    CpuMoe *cpu = mm ? cpu_moe_create(pool, mm, &c, T, &err) : NULL;
    cr_assert(cpu, "%s", err.msg);
    CudaMoe gpu;
    cr_assert(cuda_moe_create(&gpu, H, MI, E, K, true, T, &err) == 0, "%s", err.msg);
    uint16_t *d_h = dev_copy(h, sizeof h);
    uint8_t *d_qgu = dev_copy(q_gu, E * gu_n), *d_qdn = dev_copy(q_dn, E * dn_n);
    float *d_sgu = dev_copy(s_gu, sizeof(float) * E * gu_s), *d_sdn = dev_copy(s_dn, sizeof(float) * E * dn_s);
    float *d_delta = dev_poisoned(sizeof(float) * T * H);
    for (int n = 1; n <= T; n += 6) {
        float want[T * H], got[T * H];
        cpu_moe(cpu, want, x, n, &L);
        upload_router_logits(gpu.logits, router, x, n, E, H);
        cr_assert(cuda_moe(&gpu, d_delta, d_h, n, (CudaMatrix){d_qgu, d_sgu, NULL}, (CudaMatrix){d_qdn, d_sdn, NULL}, NULL,
                           &err) == 0,
                  "%s", err.msg);
        dev_fetch(got, d_delta, sizeof(float) * n * H);
        double rel = rel_error(got, want, (size_t)n * H);
        cr_expect(rel <= REL_TOL, "%d tokens: GPU (FP8 experts) vs CPU (float32) relative error %g", n, rel);
        cr_log_info("MoE layer, FP8 experts, %d tokens: relative error %.2e", n, rel);
    }
    void *dev[] = {d_h, d_qgu, d_qdn, d_sgu, d_sdn, d_delta};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cuda_free(dev[i]);
    cuda_moe_free(&gpu);
    cpu_moe_destroy(cpu);
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
    for (int e = 0; e < E; e++) {
        fp8_stack_free(&gu[e]);
        fp8_stack_free(&dn[e]);
    }
    free(q_gu);
    free(q_dn);
    free(s_gu);
    free(s_dn);
    free(router);
}

/* ---- the runner on a dummy FP8 model ----------------------------------------------------------- */

#define VOCAB 4096
#define QUANT \
    "\"quantization_config\": {\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", \"activation_scheme\": \"dynamic\", " \
    "\"weight_block_size\": [128, 128]}"
/* hidden 160 (a partial column tile), 6/3 heads of 64: k and v are 192
 * rows each (their second tile row straddles the stack's tiles), MLP and
 * expert width 96 (gate and up are 96-row parts) */
#define SHAPE                                                                                                       \
    "\"head_dim\": 64, \"hidden_size\": 160, \"intermediate_size\": 96, \"max_position_embeddings\": 4096, "          \
    "\"num_attention_heads\": 6, \"num_hidden_layers\": 2, \"num_key_value_heads\": 3, \"rms_norm_eps\": 1e-06, " \
    "\"rope_theta\": 1000000, \"tie_word_embeddings\": false, \"vocab_size\": 4096, \"bos_token_id\": 1, "          \
    "\"eos_token_id\": 2, "
static const char *DENSE_CONFIG =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", " SHAPE QUANT "}";
static const char *MOE_CONFIG = "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": \"qwen3_moe\", " SHAPE
                                "\"decoder_sparse_step\": 1, \"mlp_only_layers\": [], \"norm_topk_prob\": true, "
                                "\"num_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 96, " QUANT
                                "}";

/* Buffers the tests own (replaced scales, float32 matrices). */
typedef struct Owned {
    void **p;
    int n, cap;
} Owned;

static void *own_buf(Owned *o, size_t bytes) {
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 64;
        o->p = realloc(o->p, sizeof(void *) * (size_t)o->cap);
        cr_assert(o->p);
    }
    void *b = malloc(bytes);
    cr_assert(b);
    return o->p[o->n++] = b;
}

static void owned_free(Owned *o) {
    for (int i = 0; i < o->n; i++) free(o->p[i]);
    free(o->p);
}

/* The dummy FP8 model of config_text, its tile scales replaced by ones that
 * differ in every tile (the dummies' are one value a matrix, which would
 * hide a scale read from the wrong tile). */
static void load_fp8_dummy(ModelWeights *w, const char *config_text, Owned *own) {
    ModelConfig c;
    Error err = {0};
    cr_assert(model_config_parse(&c, config_text, NULL, &err) == 0, "%s", err.msg);
    cr_assert(c.fp8_weights);
    cr_assert(model_weights_load_dummy(w, &c, 11, &err) == 0, "%s", err.msg);
    Weight *mats[model_layer_max_matrices(&c)];
    int salt = 0, fp8 = 0;
    for (int l = 0; l < c.num_layers; l++) {
        int n = model_layer_matrices(&c, &w->layers[l], mats);
        for (int i = 0; i < n; i++, salt++) {
            if (mats[i]->type != WEIGHT_F8_E4M3) continue;
            size_t count = fp8_scale_count(mats[i]->rows, mats[i]->cols);
            float *s = own_buf(own, sizeof(float) * count);
            for (size_t t = 0; t < count; t++)
                s[t] = mats[i]->scales[t] * (0.5f + 0.25f * (float)((t * 3 + (size_t)salt) % 5));
            mats[i]->scales = s;
            fp8++;
        }
    }
    cr_assert(fp8 > 0, "the dummy FP8 config made no FP8 matrices");
}

/* The same model with every FP8 layer matrix as float32 (fp8_dequantize_rows
 * of its bytes and scales); the rest is the same dummy (same names, seed). */
static void load_dequantized(ModelWeights *ref, const ModelWeights *fp8, Owned *own) {
    ModelConfig c = fp8->config;
    c.fp8_weights = false;
    Error err = {0};
    cr_assert(model_weights_load_dummy(ref, &c, 11, &err) == 0, "%s", err.msg);
    Weight *a[model_layer_max_matrices(&c)], *b[model_layer_max_matrices(&c)];
    for (int l = 0; l < c.num_layers; l++) {
        int n = model_layer_matrices(&c, &fp8->layers[l], a);
        cr_assert_eq(model_layer_matrices(&c, &ref->layers[l], b), n);
        for (int i = 0; i < n; i++) {
            if (a[i]->type != WEIGHT_F8_E4M3) continue;
            size_t count = (size_t)a[i]->rows * a[i]->cols;
            uint8_t *q = malloc(count);
            float *f = own_buf(own, sizeof(float) * count);
            cr_assert(q);
            cr_assert(model_weights_copy_matrix(fp8, a[i], q, &err) == 0, "%s", err.msg);
            fp8_dequantize_rows(q, a[i]->scales, a[i]->cols, 0, a[i]->rows, f);
            free(q);
            *b[i] = (Weight){.data = f, .type = WEIGHT_F32, .rows = a[i]->rows, .cols = a[i]->cols};
        }
    }
}

static Runner *open_on(ModelWeights *w, bool cuda, bool eager) {
    Error err = {0};
    RunnerOptions o = runner_test_options(cuda ? "cuda" : "cpu", &w->config, 16, 64,
                                          cuda ? KV_CACHE_BF16 : KV_CACHE_F32, cuda ? COMPUTE_BF16 : COMPUTE_F32, eager);
    Runner *r = cuda ? cuda_runner_create(w, &o, &err) : cpu_runner_create(w, &o, &err);
    cr_assert(r, "%s runner: %s", o.device, err.msg);
    return r;
}

enum { SEQS = 5, PROMPT = 24, MAX_ROWS = SEQS * PROMPT };

/* One step of the script below: sequences first..first + count - 1, each
 * bringing `tokens` tokens from where it stopped. */
typedef struct Step {
    int first, count, tokens;
    const char *what;
} Step;

/* 120 prompt rows (dequantize + cuBLAS), 5 decode rows (the gemv in passes
 * of 4 and 1), 3, 1, then 16 rows of chunked prefill (four passes). */
static const Step SCRIPT[] = {
    {0, SEQS, PROMPT, "prefill, 120 rows"}, {0, SEQS, 1, "decode, 5 rows"}, {0, 3, 1, "decode, 3 rows"},
    {0, 1, 1, "decode, 1 row"},             {1, 4, 4, "4 tokens x 4 sequences"},
};

/* Runs SCRIPT, every token's logits into logits[step] ([rows, VOCAB]). */
static void run_script(Runner *r, const int32_t ids[SEQS][64], float *logits[]) {
    int32_t tables[SEQS][4];
    for (int s = 0; s < SEQS; s++)
        for (int b = 0; b < 4; b++) tables[s][b] = (int32_t)((s * 4 + b) * 7 % 64);
    int pos_of[SEQS] = {0};
    for (size_t k = 0; k < sizeof SCRIPT / sizeof SCRIPT[0]; k++) {
        const Step *st = &SCRIPT[k];
        RunnerSeq seqs[SEQS];
        for (int i = 0; i < st->count; i++) {
            const int s = st->first + i, pos = pos_of[s];
            seqs[i] = (RunnerSeq){.tokens = &ids[s][pos], .num_tokens = st->tokens, .start_pos = pos,
                                  .block_table = tables[s], .num_blocks = 4, .compute_logits = true};
            pos_of[s] = pos + st->tokens;
        }
        RunnerBatch batch = {.seqs = seqs, .num_seqs = st->count, .all_logits = logits[k]};
        int32_t tok[SEQS];
        Error err = {0};
        cr_assert(runner_step(r, &batch, tok, &err) == 0, "%s: %s", st->what, err.msg);
    }
}

static void runner_against_dequantized(const char *config_text, const char *name) {
    require_gpu();
    Owned own = {0};
    ModelWeights fp8, ref;
    load_fp8_dummy(&fp8, config_text, &own);
    load_dequantized(&ref, &fp8, &own);
    Runner *gpu = open_on(&fp8, true, true), *cpu = open_on(&ref, false, true);
    cr_assert(strstr(gpu->description, "fp8"), "%s", gpu->description);
    int32_t ids[SEQS][64];
    uint64_t seed = 21;
    for (int s = 0; s < SEQS; s++)
        for (int i = 0; i < 64; i++) ids[s][i] = (int32_t)((test_uniform(&seed) + 1.0f) * 0.5f * (VOCAB - 1));
    enum { STEPS = sizeof SCRIPT / sizeof SCRIPT[0] };
    float *lg[STEPS], *lc[STEPS];
    for (int k = 0; k < STEPS; k++) {
        lg[k] = malloc(sizeof(float) * MAX_ROWS * VOCAB);
        lc[k] = malloc(sizeof(float) * MAX_ROWS * VOCAB);
        cr_assert(lg[k] && lc[k]);
    }
    run_script(gpu, (const int32_t(*)[64])ids, lg);
    run_script(cpu, (const int32_t(*)[64])ids, lc);
    for (int k = 0; k < STEPS; k++) {
        const int rows = SCRIPT[k].count * SCRIPT[k].tokens;
        double worst = 0;
        for (int r = 0; r < rows; r++) {
            double rel = rel_error(lg[k] + (size_t)r * VOCAB, lc[k] + (size_t)r * VOCAB, VOCAB);
            if (rel > worst) worst = rel;
        }
        cr_expect(worst <= REL_TOL, "%s, %s: worst row's relative error %g", name, SCRIPT[k].what, worst);
        cr_log_info("%s, %s: GPU (FP8) vs CPU (float32 dequantized): worst row %.2e, all rows %.2e", name,
                    SCRIPT[k].what, worst, rel_error(lg[k], lc[k], (size_t)rows * VOCAB));
        free(lg[k]);
        free(lc[k]);
    }
    runner_destroy(gpu);
    runner_destroy(cpu);
    model_weights_free(&fp8);
    model_weights_free(&ref);
    owned_free(&own);
}

Test(cuda_fp8, dense_runner_matches_the_cpu_on_dequantized_weights, .timeout = 120) {
    runner_against_dequantized(DENSE_CONFIG, "dense");
}

Test(cuda_fp8, moe_runner_matches_the_cpu_on_dequantized_weights, .timeout = 120) {
    runner_against_dequantized(MOE_CONFIG, "MoE");
}

/* Decode steps of 5 and 13 sequences (buckets 8 and 16: the FP8 gemv in
 * passes) from graphs and eagerly: the same logits, bit for bit. */
Test(cuda_fp8, decode_graphs_match_eager_steps, .timeout = 120) {
    require_gpu();
    Owned own = {0};
    ModelWeights wg, we;
    load_fp8_dummy(&wg, DENSE_CONFIG, &own);
    load_fp8_dummy(&we, DENSE_CONFIG, &own);
    Runner *both[2] = {open_on(&wg, true, false), open_on(&we, true, true)};
    enum { S = 13, LEN = 20 };
    int32_t ids[S][LEN + 1], tables[S][2];
    uint64_t seed = 5;
    for (int s = 0; s < S; s++) {
        for (int i = 0; i <= LEN; i++) ids[s][i] = (int32_t)((test_uniform(&seed) + 1.0f) * 0.5f * (VOCAB - 1));
        tables[s][0] = 2 * s;
        tables[s][1] = 2 * s + 1;
    }
    static const int BATCH[] = {5, 13};
    for (size_t bi = 0; bi < 2; bi++) {
        const int n = BATCH[bi];
        float *logits[2];
        for (int k = 0; k < 2; k++) {
            logits[k] = malloc(sizeof(float) * S * VOCAB);
            cr_assert(logits[k]);
            RunnerSeq seqs[S];
            int32_t tok[S];
            Error err = {0};
            for (int s = 0; s < n; s++)
                seqs[s] = (RunnerSeq){.tokens = ids[s], .num_tokens = LEN, .block_table = tables[s], .num_blocks = 2,
                                      .compute_logits = true};
            RunnerBatch prefill = {.seqs = seqs, .num_seqs = n};
            cr_assert(runner_step(both[k], &prefill, tok, &err) == 0, "%s", err.msg);
            for (int s = 0; s < n; s++)
                seqs[s] = (RunnerSeq){.tokens = &ids[s][LEN], .num_tokens = 1, .start_pos = LEN,
                                      .block_table = tables[s], .num_blocks = 2, .compute_logits = true};
            RunnerBatch decode = {.seqs = seqs, .num_seqs = n, .last_logits = logits[k]};
            cr_assert(runner_step(both[k], &decode, tok, &err) == 0, "%s", err.msg);
        }
        cr_expect(memcmp(logits[0], logits[1], sizeof(float) * n * VOCAB) == 0,
                  "%d sequences: graph replay and eager decode differ", n);
        free(logits[0]);
        free(logits[1]);
    }
    runner_destroy(both[0]);
    runner_destroy(both[1]);
    model_weights_free(&wg);
    model_weights_free(&we);
    owned_free(&own);
}
