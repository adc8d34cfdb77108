/*
 * test_flash_plan.c - the tensor-core prefill attention's index arithmetic
 * (cuda/cuda_flash_plan.h) on the CPU: the mma.m16n8k16 fragment patterns
 * cover each matrix element once, the ldmatrix addresses the kernel gives
 * deliver exactly the fragment elements the mma expects (Q, K, and V
 * transposed), S's accumulators become P's A fragments element for
 * element, and the key tiles and the causal-mask choice are right at odd
 * prompt lengths. ldmatrix is emulated from its PTX definition: lane l
 * names row l % 8 of matrix l / 8; register m of lane l receives elements
 * (l / 4, 2 (l % 4) + 0..1) of matrix m, or (2 (l % 4) + 0..1, l / 4) with
 * .trans.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "cuda/cuda_flash_plan.h"

#define D 128
#define STRIDE (D + FLASH_PAD)

/* Element e (0, 1) of register m of lane l after ldmatrix.x4, given each
 * lane's (row, col) address into a matrix of values val[row * STRIDE + col]. */
static int ldmatrix(const int *val, const int *row_of_lane, const int *col_of_lane, int l, int m, int e, int trans) {
    if (!trans) {
        int src = 8 * m + l / 4;
        return val[row_of_lane[src] * STRIDE + col_of_lane[src] + 2 * (l % 4) + e];
    }
    int src = 8 * m + 2 * (l % 4) + e;
    return val[row_of_lane[src] * STRIDE + col_of_lane[src] + l / 4];
}

static int *numbered(int rows) { /* val = row * 1000 + col: each element names itself */
    int *v = malloc(sizeof(int) * rows * STRIDE);
    cr_assert(v);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < STRIDE; c++) v[r * STRIDE + c] = r * 1000 + c;
    return v;
}

Test(flash_plan, fragments_cover_each_element_once) {
    int a[16][16] = {{0}}, b[16][8] = {{0}}, c[16][8] = {{0}};
    for (int l = 0; l < 32; l++) {
        for (int i = 0; i < 8; i++) a[flash_a_row(l, i)][flash_a_col(l, i)]++;
        for (int i = 0; i < 4; i++) b[flash_b_k(l, i)][flash_b_n(l, i)]++;
        for (int i = 0; i < 4; i++) c[flash_c_row(l, i)][flash_c_col(l, i)]++;
    }
    for (int r = 0; r < 16; r++) {
        for (int k = 0; k < 16; k++) cr_assert_eq(a[r][k], 1, "A (%d, %d)", r, k);
        for (int n = 0; n < 8; n++) cr_assert_eq(c[r][n], 1, "C (%d, %d)", r, n);
    }
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 8; n++) cr_assert_eq(b[k][n], 1, "B (%d, %d)", k, n);
}

/* Q's ldmatrix gives each lane A's elements of warp w's rows, k-step ks. */
Test(flash_plan, q_fragments_from_ldmatrix) {
    int *q = numbered(FLASH_ROWS), rows[32], cols[32];
    for (int w = 0; w < FLASH_WARPS; w++)
        for (int ks = 0; ks < D / 16; ks++) {
            for (int l = 0; l < 32; l++) rows[l] = 16 * w + flash_ldq_row(l), cols[l] = flash_ldq_col(l, ks);
            for (int l = 0; l < 32; l++)
                for (int i = 0; i < 8; i++) {
                    int got = ldmatrix(q, rows, cols, l, i / 2, i % 2, 0);
                    int want = (16 * w + flash_a_row(l, i)) * 1000 + 16 * ks + flash_a_col(l, i);
                    cr_assert_eq(got, want, "warp %d ks %d lane %d element %d", w, ks, l, i);
                }
        }
    free(q);
}

/* K's ldmatrix gives B fragments (k = dims, n = keys) of n-tiles nt, nt + 1. */
Test(flash_plan, k_fragments_from_ldmatrix) {
    int *k = numbered(FLASH_KEYS), rows[32], cols[32];
    for (int ks = 0; ks < D / 16; ks++)
        for (int nt = 0; nt < FLASH_KEYS / 8; nt += 2) {
            for (int l = 0; l < 32; l++) rows[l] = flash_ldk_key(l, nt), cols[l] = flash_ldk_dim(l, ks);
            for (int l = 0; l < 32; l++)
                for (int reg = 0; reg < 4; reg++)
                    for (int e = 0; e < 2; e++) {
                        int tile = nt + reg / 2, i = 2 * (reg % 2) + e;
                        int want = (8 * tile + flash_b_n(l, i)) * 1000 + 16 * ks + flash_b_k(l, i);
                        cr_assert_eq(ldmatrix(k, rows, cols, l, reg, e, 0), want, "ks %d nt %d lane %d reg %d", ks,
                                     nt, l, reg);
                    }
        }
    free(k);
}

/* V's ldmatrix.trans gives B fragments (k = keys, n = dims) of dt, dt + 1. */
Test(flash_plan, v_fragments_from_ldmatrix_trans) {
    int *v = numbered(FLASH_KEYS), rows[32], cols[32];
    for (int kk = 0; kk < FLASH_KEYS / 16; kk++)
        for (int dt = 0; dt < D / 8; dt += 2) {
            for (int l = 0; l < 32; l++) rows[l] = flash_ldv_key(l, kk), cols[l] = flash_ldv_dim(l, dt);
            for (int l = 0; l < 32; l++)
                for (int reg = 0; reg < 4; reg++)
                    for (int e = 0; e < 2; e++) {
                        int tile = dt + reg / 2, i = 2 * (reg % 2) + e;
                        int want = (16 * kk + flash_b_k(l, i)) * 1000 + 8 * tile + flash_b_n(l, i);
                        cr_assert_eq(ldmatrix(v, rows, cols, l, reg, e, 1), want, "kk %d dt %d lane %d reg %d", kk,
                                     dt, l, reg);
                    }
        }
    free(v);
}

/* P's A fragment of k-step kk, register j, half e, is the kernel's pack of
 * S's accumulators: n-tile 2 kk + j / 2, elements 2 (j % 2) + e. */
Test(flash_plan, scores_become_a_fragments) {
    for (int l = 0; l < 32; l++)
        for (int j = 0; j < 4; j++)
            for (int e = 0; e < 2; e++) {
                int i_a = 2 * j + e, nt = j / 2, i_c = 2 * (j % 2) + e;
                /* A's element (register j = i_a / 2) in a 16-key k-step vs the C element's (row, key) */
                cr_assert_eq(flash_a_row(l, i_a), flash_c_row(l, i_c), "lane %d reg %d", l, j);
                cr_assert_eq(flash_a_col(l, i_a), 8 * nt + flash_c_col(l, i_c), "lane %d reg %d", l, j);
            }
}

/* Tiles cover [0, num_keys); a tile without the mask has every key at or
 * before the first row's position, and so before every row's. */
Test(flash_plan, key_tiles_and_the_causal_diagonal) {
    static const int lengths[] = {1, 15, 16, 17, 63, 64, 65, 255, 256, 257, 4097};
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
        for (int start = 0; start <= 300; start += 100)
            for (int group = 1; group <= 16; group *= 2) {
                int len = lengths[li], tt = flash_tile_tokens(group);
                cr_assert(tt >= 1 && tt * group <= FLASH_ROWS);
                for (int t0 = 0; t0 < len; t0 += tt) {
                    int tile_len = len - t0 < tt ? len - t0 : tt;
                    int first_pos = start + t0, num_keys = first_pos + tile_len;
                    int tiles = flash_key_tiles(num_keys);
                    cr_assert((tiles - 1) * FLASH_KEYS < num_keys && tiles * FLASH_KEYS >= num_keys);
                    for (int t = 0; t < tiles; t++) {
                        int last_key = (t + 1) * FLASH_KEYS - 1;
                        if (!flash_tile_needs_mask(t, first_pos))
                            cr_assert(last_key <= first_pos, "len %d tile %d unmasked past %d", len, t, first_pos);
                        else
                            cr_assert(last_key > first_pos);
                    }
                }
            }
}
