/*
 * cpu_matmul_amx.c - the AMX tile kernel and activation packing (see the header).
 *
 * Packed layout: for token group g (16 tokens), K step s (32 values) and term
 * t (hi, mid, lo), one 1 KiB tile B[kp][m][2] = x[16g + m][32s + 2kp + {0,1}],
 * at ((g * steps + s) * 3 + t) * 512. Packing turns each token's 32 values of a
 * step into 16 pairs and transposes the 16 tokens x 16 pairs (AVX-512).
 *
 * Kernel: 2 weight tiles (32 rows) x 2 token groups (32 tokens) accumulate in
 * 4 of the 8 tile registers; per K step, 2 weight + 6 activation tile loads
 * feed 12 tile multiplies. The 32-row weight block (at most 192 KiB for K =
 * 3072) stays in L2 while all token groups pass over it. Results come out
 * transposed (rows = weights, columns = tokens) and are transposed back on
 * the way to y.
 */
#include "cpu_matmul_amx.h"

#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))

typedef struct TileConfig {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

AMX static void load_tile_config(void) {
    TileConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) {
        cfg.rows[i] = 16;
        cfg.colsb[i] = 64;
    }
    _tile_loadconfig(&cfg);
}

/* In-register transpose of a 16x16 matrix of 32-bit values. */
AMX static void transpose16(__m512i r[16]) {
    __m512i a[16], b[16];
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) { /* b[4i + j], lane L: rows 4i..4i+3 of column 4L + j */
        b[4 * i + 0] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    for (int j = 0; j < 4; j++) {
        __m512i c1 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x88);
        __m512i c2 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xdd);
        __m512i c3 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0x88);
        __m512i c4 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0xdd);
        r[0 + j] = _mm512_shuffle_i32x4(c1, c3, 0x88);
        r[8 + j] = _mm512_shuffle_i32x4(c1, c3, 0xdd);
        r[4 + j] = _mm512_shuffle_i32x4(c2, c4, 0x88);
        r[12 + j] = _mm512_shuffle_i32x4(c2, c4, 0xdd);
    }
}

AMX static inline __m512 bf16_low_to_f32(__m512i v, int upper) {
    __m256i half = upper ? _mm512_extracti64x4_epi64(v, 1) : _mm512_castsi512_si256(v);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

size_t amx_packed_elems(int M, int K) {
    size_t groups = (size_t)(M + AMX_GROUP - 1) / AMX_GROUP;
    return groups * (size_t)(K / 32) * 3 * 512;
}

AMX void amx_pack_group(uint16_t *packed, const float *x, int M, int K, int group) {
    int steps = K / 32, m0 = group * AMX_GROUP;
    for (int s = 0; s < steps; s++) {
        __m512i term[3][16];
        for (int i = 0; i < 16; i++) {
            if (m0 + i >= M) {
                term[0][i] = term[1][i] = term[2][i] = _mm512_setzero_si512();
                continue;
            }
            const float *row = x + (size_t)(m0 + i) * K + 32 * s;
            __m512 x0 = _mm512_loadu_ps(row), x1 = _mm512_loadu_ps(row + 16);
            for (int t = 0; t < 3; t++) { /* each term: round to bf16, keep the exact rest */
                __m512i bf = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);
                term[t][i] = bf;
                x0 = _mm512_sub_ps(x0, bf16_low_to_f32(bf, 0));
                x1 = _mm512_sub_ps(x1, bf16_low_to_f32(bf, 1));
            }
        }
        for (int t = 0; t < 3; t++) {
            transpose16(term[t]); /* [token][pair] -> [pair][token] */
            uint16_t *tile = packed + (((size_t)group * steps + s) * 3 + t) * 512;
            for (int kp = 0; kp < 16; kp++) _mm512_storeu_si512(tile + 32 * kp, term[t][kp]);
        }
    }
}

/* Transposes a finished [16 weights][16 tokens] tile into y[token][weight]. */
AMX static void store_transposed(float *y, int ldy, const float *tile, int m0, int M, int n) {
    __m512i r[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(tile + 16 * i);
    transpose16(r);
    for (int m = 0; m < 16 && m0 + m < M; m++)
        _mm512_storeu_si512(y + (size_t)(m0 + m) * ldy + n, r[m]);
}

/* One 16- or 32-row weight block (two_n) against one or two token groups
 * (two_m). Tiles: 0-3 results, 4-5 weights, 6-7 activations. */
AMX static inline __attribute__((always_inline)) void block(float *y, int ldy,
                                                            const uint16_t *packed, int M,
                                                            const uint16_t *w, int K, int n,
                                                            int g, bool two_n, bool two_m) {
    int steps = K / 32;
    size_t stride = (size_t)K * 2;
    _tile_zero(0);
    if (two_m) _tile_zero(1);
    if (two_n) _tile_zero(2);
    if (two_n && two_m) _tile_zero(3);
    const uint16_t *p0 = packed + (size_t)g * steps * 3 * 512;
    const uint16_t *p1 = p0 + (size_t)steps * 3 * 512;
    for (int s = 0; s < steps; s++) {
        _tile_loadd(4, w + (size_t)n * K + 32 * s, stride);
        if (two_n) _tile_loadd(5, w + (size_t)(n + 16) * K + 32 * s, stride);
        for (int t = 0; t < 3; t++) {
            _tile_loadd(6, p0 + ((size_t)s * 3 + t) * 512, 64);
            if (two_m) _tile_loadd(7, p1 + ((size_t)s * 3 + t) * 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            if (two_m) _tile_dpbf16ps(1, 4, 7);
            if (two_n) _tile_dpbf16ps(2, 5, 6);
            if (two_n && two_m) _tile_dpbf16ps(3, 5, 7);
        }
    }
    float tile[256];
    int m0 = g * AMX_GROUP, m1 = m0 + AMX_GROUP;
    _tile_stored(0, tile, 64);
    store_transposed(y, ldy, tile, m0, M, n);
    if (two_m) {
        _tile_stored(1, tile, 64);
        store_transposed(y, ldy, tile, m1, M, n);
    }
    if (two_n) {
        _tile_stored(2, tile, 64);
        store_transposed(y, ldy, tile, m0, M, n + 16);
    }
    if (two_n && two_m) {
        _tile_stored(3, tile, 64);
        store_transposed(y, ldy, tile, m1, M, n + 16);
    }
}

AMX void amx_matmul(float *y, int ldy, const uint16_t *packed, int M, int m0, int m1,
                    const Weight *w, int n0, int n1) {
    load_tile_config();
    const uint16_t *wd = w->data;
    int K = w->cols, g0 = m0 / AMX_GROUP, g1 = (m1 + AMX_GROUP - 1) / AMX_GROUP;
    for (int n = n0; n < n1; n += 32) {
        bool two_n = n + 32 <= n1;
        for (int g = g0; g < g1; g += 2) {
            bool two_m = g + 1 < g1;
            if (two_n && two_m) block(y, ldy, packed, M, wd, K, n, g, true, true);
            else if (two_n) block(y, ldy, packed, M, wd, K, n, g, true, false);
            else if (two_m) block(y, ldy, packed, M, wd, K, n, g, false, true);
            else block(y, ldy, packed, M, wd, K, n, g, false, false);
        }
    }
    _tile_release();
}

#else /* not x86-64: no AMX */

size_t amx_packed_elems(int M, int K) { (void)M, (void)K; return 0; }
void amx_pack_group(uint16_t *packed, const float *x, int M, int K, int group) {
    (void)packed, (void)x, (void)M, (void)K, (void)group;
}
void amx_matmul(float *y, int ldy, const uint16_t *packed, int M, int m0, int m1, const Weight *w,
                int n0, int n1) {
    (void)y, (void)ldy, (void)packed, (void)M, (void)m0, (void)m1, (void)w, (void)n0, (void)n1;
}

#endif

bool amx_supports(const Weight *w) {
    return w->type == WEIGHT_BF16 && w->rows % 16 == 0 && w->cols % 32 == 0;
}
