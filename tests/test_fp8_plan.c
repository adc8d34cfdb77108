/*
 * test_fp8_plan.c - the arithmetic of FP8 weights on the GPU
 * (cuda/cuda_fp8_plan.h) checked on the CPU, so it holds on machines
 * without a GPU: the bit conversion the sm_80 kernels use is e4m3 * 2^-8
 * for every pair of bytes, the byte-permute selectors put the right bytes
 * where that conversion reads them, per-row scales of stacked parts of any
 * row count (96-row parts, tiles straddling parts) give the reference
 * dequantization of each part, and the dequantization's row tiles cover
 * every row once.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/half.h"
#include "cuda/cuda_fp8_plan.h"
#include "model/weight_format.h"

/* PTX prmt.b32 (__byte_perm) in its default mode: byte i of the result is
 * byte (selector nibble i & 7) of the 8 bytes {a, b}. */
static uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t s) {
    uint64_t bytes = (uint64_t)a | ((uint64_t)b << 32);
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)((bytes >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}

Test(fp8_plan, bit_conversion_is_e4m3_times_2_to_the_minus_8_for_every_pair) {
    int checked = 0;
    for (uint32_t b1 = 0; b1 < 256; b1++)
        for (uint32_t b0 = 0; b0 < 256; b0++) {
            if (fp8_e4m3_is_nan((uint8_t)b0) || fp8_e4m3_is_nan((uint8_t)b1)) continue;
            uint32_t h = fp8x2_to_f16x2_scaled(b0 | (b1 << 8) | 0xa5c30000u); /* high bytes ignored */
            float lo = f16_to_f32((uint16_t)(h & 0xffff)) * FP8_F16_UNSCALE;
            float hi = f16_to_f32((uint16_t)(h >> 16)) * FP8_F16_UNSCALE;
            float want0 = fp8_e4m3_to_float((uint8_t)b0), want1 = fp8_e4m3_to_float((uint8_t)b1);
            cr_assert(lo == want0 && signbit(lo) == signbit(want0), "byte 0x%02x: %g, want %g", b0, lo, want0);
            cr_assert(hi == want1 && signbit(hi) == signbit(want1), "byte 0x%02x: %g, want %g", b1, hi, want1);
            checked++;
        }
    cr_assert_eq(checked, 254 * 254);
}

Test(fp8_plan, permute_selectors_place_each_byte_pair_as_the_conversion_reads_it) {
    uint64_t s = 7;
    for (int i = 0; i < 10000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t w = (uint32_t)(s >> 32);
        uint32_t lo = fp8x2_high_bytes_to_f16x2(byte_perm(w, 0, FP8_PRMT_LO));
        uint32_t hi = fp8x2_high_bytes_to_f16x2(byte_perm(w, 0, FP8_PRMT_HI));
        cr_assert_eq(lo, fp8x2_to_f16x2_scaled(w), "word 0x%08x, bytes 0 and 1", w);
        cr_assert_eq(hi, fp8x2_to_f16x2_scaled(w >> 16), "word 0x%08x, bytes 2 and 3", w);
    }
}

/* Random non-NaN bytes and per-tile scales, distinct per tile. */
static uint8_t *random_fp8(size_t n, uint64_t *s) {
    uint8_t *q = malloc(n);
    cr_assert(q);
    for (size_t i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        q[i] = (uint8_t)(*s >> 56);
        if (fp8_e4m3_is_nan(q[i])) q[i] ^= 1;
    }
    return q;
}

Test(fp8_plan, per_row_scales_of_stacked_parts_give_each_parts_reference) {
    static const int PARTS[][4] = {{96, 96, 96, 0}, {256, 192, 192, 0}, {200, 33, 128, 1}};
    static const int COLS[] = {96, 160, 300, 1024};
    uint64_t seed = 3;
    for (size_t pi = 0; pi < sizeof PARTS / sizeof PARTS[0]; pi++)
        for (size_t ci = 0; ci < sizeof COLS / sizeof COLS[0]; ci++) {
            const int cols = COLS[ci], tiles = fp8_col_tiles(cols);
            int total = 0;
            for (int p = 0; p < 4; p++) total += PARTS[pi][p];
            float *row_scales = malloc(sizeof(float) * fp8_row_scale_count(total, cols));
            cr_assert(row_scales);
            cr_assert_eq(fp8_row_scale_count(total, cols), (size_t)total * tiles);
            int row0 = 0;
            for (int p = 0; p < 4 && PARTS[pi][p] > 0; p++) {
                const int rows = PARTS[pi][p];
                const size_t nt = fp8_scale_count(rows, cols);
                float *tile = malloc(sizeof(float) * nt), *want = malloc(sizeof(float) * (size_t)rows * cols);
                cr_assert(tile && want);
                for (size_t t = 0; t < nt; t++) tile[t] = ldexpf(1.0f + (float)t, -(int)(p + 8)); /* all distinct */
                uint8_t *q = random_fp8((size_t)rows * cols, &seed);
                fp8_row_scales(row_scales + fp8_row_scale_count(row0, cols), tile, rows, cols);
                fp8_dequantize_rows(q, tile, cols, 0, rows, want);
                for (int n = 0; n < rows; n++)
                    for (int k = 0; k < cols; k++) {
                        float got = fp8_e4m3_to_float(q[(size_t)n * cols + k]) *
                                    row_scales[fp8_row_scale_index(row0 + n, k, cols)];
                        cr_assert(got == want[(size_t)n * cols + k], "parts %zu, cols %d: part %d W[%d, %d] %g vs %g",
                                  pi, cols, p, n, k, got, want[(size_t)n * cols + k]);
                    }
                free(tile);
                free(want);
                free(q);
                row0 += rows;
            }
            free(row_scales);
        }
}

Test(fp8_plan, dequantization_tiles_cover_every_row_once) {
    static const int ROWS[] = {1, 96, 127, 128, 1000, 6144, 151936};
    static const int COLS[] = {16, 100, 1024, 5120};
    static const size_t SCRATCH[] = {1, 100, 97 * 160, 128 * 1024, (size_t)32 << 20};
    for (size_t r = 0; r < sizeof ROWS / sizeof ROWS[0]; r++)
        for (size_t c = 0; c < sizeof COLS / sizeof COLS[0]; c++)
            for (size_t s = 0; s < sizeof SCRATCH / sizeof SCRATCH[0]; s++) {
                const int rows = ROWS[r], cols = COLS[c], tile = fp8_dequant_tile_rows(SCRATCH[s], rows, cols);
                cr_assert(tile >= 1 && tile <= rows, "%d x %d, scratch %zu: tile %d", rows, cols, SCRATCH[s], tile);
                cr_assert((size_t)tile * cols <= SCRATCH[s] || tile == 1, "%d x %d: tile of %d rows outgrows %zu",
                          rows, cols, tile, SCRATCH[s]);
                int covered = 0;
                for (int n0 = 0; n0 < rows; n0 += tile) covered += rows - n0 < tile ? rows - n0 : tile;
                cr_assert_eq(covered, rows);
            }
}

Test(fp8_plan, gemv_k_split_leaves_no_warp_without_a_chunk) {
    static const int INS[] = {16, 512, 1024, 2048, 3072, 4096};
    for (size_t i = 0; i < sizeof INS / sizeof INS[0]; i++) {
        int split = fp8_gemv_k_split(1024, INS[i]), chunks = (INS[i] + 511) / 512; /* 512 values a warp load */
        cr_assert(split == 1 || split <= chunks, "in %d: %d warps for %d chunks", INS[i], split, chunks);
        cr_assert_eq(fp8_gemv_k_split(4096, INS[i]), 1, "4,096 outputs fill the GPU unsplit");
    }
}

/* cuBLASLt's tile scales of a stack of 128-row parts: tile (i, t) of the
 * stack is the tile scale of the part holding rows 128 i .. 128 i + 127,
 * every tile row padded with zeros to a multiple of 4; the activations'
 * scale of (row, k) is block k / 128's, rows contiguous within a block. */
Test(fp8_plan, padded_tile_scales_of_stacked_parts_are_the_parts_tiles) {
    cr_expect_eq(fp8_tile_scale_ld(768), 8, "6 tiles padded to 8");
    cr_expect_eq(fp8_tile_scale_ld(1024), 8);
    cr_expect_eq(fp8_tile_scale_ld(3072), 24);
    cr_expect_eq(fp8_tile_scale_count(4096, 768), (size_t)32 * 8);
    enum { COLS = 768, TILES = 6, LD = 8 };
    const int part_rows[3] = {256, 128, 512};
    float *parts[3];
    int total = 0;
    for (int p = 0; p < 3; p++) {
        size_t n = fp8_scale_count(part_rows[p], COLS);
        parts[p] = malloc(n * sizeof(float));
        cr_assert(parts[p]);
        for (size_t i = 0; i < n; i++) parts[p][i] = (float)(1000 * p + (int)i + 1);
        total += part_rows[p];
    }
    float *stack = malloc(fp8_tile_scale_count(total, COLS) * sizeof(float));
    cr_assert(stack);
    for (size_t i = 0; i < fp8_tile_scale_count(total, COLS); i++) stack[i] = NAN;
    for (int p = 0, row0 = 0; p < 3; row0 += part_rows[p], p++)
        fp8_padded_tile_scales(stack + fp8_tile_scale_count(row0, COLS), parts[p], part_rows[p], COLS);
    for (int row = 0, p = 0, row0 = 0; row < total; row++) {
        if (row - row0 >= part_rows[p]) row0 += part_rows[p++];
        for (int t = 0; t < LD; t++) {
            float got = stack[(size_t)(row / 128) * LD + t];
            float want = t < TILES ? parts[p][(size_t)((row - row0) / 128) * TILES + t] : 0.0f;
            cr_assert(got == want, "row %d tile %d: %g, want %g", row, t, got, want);
        }
    }
    for (int p = 0; p < 3; p++) free(parts[p]);
    free(stack);
    cr_expect_eq(fp8_act_scale_index(5, 0, 40), 5u);
    cr_expect_eq(fp8_act_scale_index(5, 127, 40), 5u);
    cr_expect_eq(fp8_act_scale_index(5, 128, 40), 45u, "block 1 starts after block 0's 40 rows");
    cr_expect_eq(fp8_act_scale_index(39, 1023, 40), 7u * 40 + 39);
}
