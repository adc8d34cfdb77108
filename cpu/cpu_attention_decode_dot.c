/*
 * cpu_attention_decode_dot.c - decode attention's two inner loops on
 * vdpbf16ps, for a bf16 or an fp8 cache under bf16 products (see
 * cpu_attention_decode_dot.h for what they round). Hand-written, as the
 * other attention kernels.
 *
 * Why: the float32 kernels widen every K and V value to float32 and spend
 * one FMA per value and head; vdpbf16ps multiplies 32 bf16 pairs per
 * instruction. A bf16 row is bf16 already; e4m3 * 2^-8 is exactly a bf16,
 * so the two bytes the table lookup gives (cpu_fp8_byte_lut.h) are that
 * bf16 once interleaved. With the fp8 cache's float32 kernels at ~74% of
 * its rows' read rate on Zen 4 (two heads a KV head), and every group of
 * four or more heads compute-bound in float32:
 *  - QK: a row's 64 values as 64 bf16 (bf16: two loads; fp8: the lookup
 *    and two unpacks, which leave the columns in lane order); q is rounded
 *    to bf16 once per call and laid out in the same column order (a dot
 *    product does not care which column pairs with which, only that q and
 *    K agree).
 *  - PV: vdpbf16ps sums over pairs of V rows. A two-source permute per 32
 *    columns (vpermt2w of two bf16 rows; vpermt2b of two fp8 rows before
 *    the lookup) makes each dword (v_j[e], v_j+1[e]) for 16 consecutive e,
 *    against the pair (p_j, p_j+1) in bf16 broadcast; the accumulators
 *    stay in natural column order, in registers over the block's rows.
 * Products are exact (bf16 x bf16 in float32); the sums are float32.
 */
#include "cpu_attention_decode_dot.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "cpu_attention_decode_kernels.h"
#include "cpu_fp8_byte_lut.h"
#include "cpu_kv_fp8.h"

#define DOT __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16,fma")))
#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")

/* The cache's element: a constant in every kernel once inlined. */
enum { DOT_FP8, DOT_BF16 };
#define ELEM_BYTES(KIND) ((KIND) == DOT_BF16 ? 2 : 1)

/* Head sizes the kernels take: q's bf16 lives on the stack. */
#define MAX_DOT_D 512
/* PV converts p to bf16 pairs this many rows at a time. */
#define P_ROWS 256
/* PV's heads per pass: 4 x 16 floats each in registers. */
#define PV_HEADS 4

static uint8_t bf16_lut[2][128]; /* [0] low, [1] high byte of each magnitude's bf16 */
static pthread_once_t bf16_lut_once = PTHREAD_ONCE_INIT;

/* kv_fp8_widen_scaled's floats (e4m3 * 2^-8, the other kernels' values):
 * their two low bytes are zero, so the two high bytes are the bf16. */
static void bf16_lut_build(void) {
    for (int v = 0; v < 128; v++) {
        float f = kv_fp8_widen_scaled((uint8_t)v);
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        bf16_lut[0][v] = (uint8_t)(bits >> 16);
        bf16_lut[1][v] = (uint8_t)(bits >> 24);
    }
}

DOT INLINE void lut_load(Fp8ByteLut *t) {
    pthread_once(&bf16_lut_once, bf16_lut_build);
    fp8_byte_lut_load(t, bf16_lut);
}

/* 64 e4m3 bytes as 64 bf16: *a the columns 16L + 0..7 of each 16-byte
 * lane L, *b the columns 16L + 8..15 (the unpacks work within lanes). */
DOT INLINE void bf16_words(const Fp8ByteLut *t, __m512i bytes, __m512i *a, __m512i *b) {
    __m512i lo, hi;
    fp8_byte_lut_lookup(t, bytes, &lo, &hi);
    *a = _mm512_unpacklo_epi8(lo, hi);
    *b = _mm512_unpackhi_epi8(lo, hi);
}

/* Columns e..e+63 of a row as 64 bf16, *a and *b in bf16_words' order
 * for fp8 (lane order), in column order for bf16 (e..e+31, e+32..e+63). */
DOT INLINE void row_words(int kind, const Fp8ByteLut *t, const uint8_t *row, int e, __m512i *a, __m512i *b) {
    if (kind == DOT_BF16) {
        *a = _mm512_loadu_si512(row + 2 * e);
        *b = _mm512_loadu_si512(row + 2 * e + 64);
    } else {
        bf16_words(t, _mm512_loadu_si512(row + e), a, b);
    }
}

DOT INLINE __m512 dot(__m512 acc, __m512i x, __m512i y) { return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)y); }

/* q [G, D] as bf16 in row_words' order: qb[g * D / 32 + 2c] for chunk c's
 * *a, + 1 for its *b. */
DOT INLINE void q_words(int kind, __m512i *qb, const float *q, int G, int D) {
    uint16_t ia[32], ib[32];
    for (int w = 0; w < 32; w++) {
        ia[w] = (uint16_t)(kind == DOT_BF16 ? w : 16 * (w / 8) + w % 8);
        ib[w] = (uint16_t)(kind == DOT_BF16 ? 32 + w : 16 * (w / 8) + 8 + w % 8);
    }
    __m512i idx_a = _mm512_loadu_si512(ia), idx_b = _mm512_loadu_si512(ib);
    for (int g = 0; g < G; g++)
        for (int e = 0; e < D; e += 64) {
            const float *x = q + (size_t)g * D + e;
            __m512i lo = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x));
            __m512i hi = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 48), _mm512_loadu_ps(x + 32));
            qb[(g * D + e) / 32] = _mm512_permutex2var_epi16(lo, idx_a, hi);
            qb[(g * D + e) / 32 + 1] = _mm512_permutex2var_epi16(lo, idx_b, hi);
        }
}

/* G (a constant after inlining) heads' scores, QK_ROWS rows per pass when
 * G <= 4 (one row's G chains alone would wait on vdpbf16ps' latency). */
DOT INLINE void qk_dot_g(int kind, float *s, int lds, const __m512i *qb, int G, int D, const uint8_t *k,
                         size_t stride, int n, float scale, const Fp8ByteLut *t) {
    size_t row_bytes = stride * ELEM_BYTES(kind), bytes = (size_t)D * ELEM_BYTES(kind);
    int j = 0, pfr = prefetch_rows(row_bytes), W = D / 32;
    if (G <= 4) {
        for (; j + QK_ROWS <= n; j += QK_ROWS) {
            const uint8_t *row[QK_ROWS];
            qk_rows(row, k, j, n, row_bytes, pfr, bytes);
            __m512 acc[QK_ROWS][4];
            UNROLL for (int r = 0; r < QK_ROWS; r++)
                UNROLL for (int g = 0; g < 4; g++) acc[r][g] = _mm512_setzero_ps();
            for (int e = 0; e < D; e += 64) {
                UNROLL for (int r = 0; r < QK_ROWS; r++) {
                    __m512i a, b;
                    row_words(kind, t, row[r], e, &a, &b);
                    UNROLL for (int g = 0; g < G; g++) {
                        acc[r][g] = dot(acc[r][g], a, qb[g * W + e / 32]);
                        acc[r][g] = dot(acc[r][g], b, qb[g * W + e / 32 + 1]);
                    }
                }
            }
            UNROLL for (int g = 0; g < G; g++) {
                float d[QK_ROWS];
                _mm_storeu_ps(d, reduce4_512(acc[0][g], acc[1][g], acc[2][g], acc[3][g]));
                UNROLL for (int r = 0; r < QK_ROWS; r++) s[(size_t)g * lds + j + r] = d[r] * scale;
            }
        }
    }
    for (; j < n; j++) {
        const uint8_t *row = k + (size_t)j * row_bytes;
        if (j + pfr < n) prefetch_span(row + pfr * row_bytes, bytes);
        __m512 acc[MAX_G];
        for (int g = 0; g < G; g++) acc[g] = _mm512_setzero_ps();
        for (int e = 0; e < D; e += 64) {
            __m512i a, b;
            row_words(kind, t, row, e, &a, &b);
            for (int g = 0; g < G; g++) {
                acc[g] = dot(acc[g], a, qb[g * W + e / 32]);
                acc[g] = dot(acc[g], b, qb[g * W + e / 32 + 1]);
            }
        }
        for (int g = 0; g < G; g++) s[(size_t)g * lds + j] = _mm512_reduce_add_ps(acc[g]) * scale;
    }
}

#define QKDOT(kind, s, lds, qb, D, k, stride, n, scale, t, G) qk_dot_g(kind, s, lds, qb, G, D, k, stride, n, scale, t)

DOT INLINE void qk_dot(int kind, float *s, int lds, const float *q, int G, int D, const void *k, size_t stride,
                       int n, float scale) {
    Fp8ByteLut t;
    if (kind == DOT_FP8) lut_load(&t);
    __m512i qb[MAX_G * MAX_DOT_D / 32];
    for (int g0 = 0; g0 < G; g0 += MAX_G) {
        int g = G - g0 < MAX_G ? G - g0 : MAX_G;
        q_words(kind, qb, q + (size_t)g0 * D, g, D);
        GROUP_DISPATCH(QKDOT, g, kind, s + (size_t)g0 * lds, lds, qb, D, (const uint8_t *)k, stride, n, scale, &t)
    }
}

DOT void qk_fp8_dot(float *s, int lds, const float *q, int G, int D, const void *k, size_t stride, int n,
                    float scale) {
    qk_dot(DOT_FP8, s, lds, q, G, D, k, stride, n, scale);
}

DOT void qk_bf16_dot(float *s, int lds, const float *q, int G, int D, const void *k, size_t stride, int n,
                     float scale) {
    qk_dot(DOT_BF16, s, lds, q, G, D, k, stride, n, scale);
}

/* The byte indices that interleave two V rows' 64 bytes at columns
 * 32h..32h+31 (x0's bytes 0-63, x1's 64-127) so that bf16_words' *a and *b
 * hold (row 0, row 1) dword pairs of columns 32h + 0..15 and 32h + 16..31:
 * lane L's bytes 2i, 2i+1 are column 4L + i of the two rows, its bytes
 * 8 + 2i, 8 + 2i + 1 column 16 + 4L + i (i < 4). */
DOT INLINE __m512i pair_index(int h) {
    uint8_t idx[64];
    for (int L = 0; L < 4; L++)
        for (int i = 0; i < 4; i++)
            for (int r = 0; r < 2; r++) {
                idx[16 * L + 2 * i + r] = (uint8_t)(64 * r + 32 * h + 4 * L + i);
                idx[16 * L + 8 + 2 * i + r] = (uint8_t)(64 * r + 32 * h + 16 + 4 * L + i);
            }
    return _mm512_loadu_si512(idx);
}

/* The word indices that interleave two bf16 rows' 32 columns (x0's words
 * 0-31, x1's 32-63) into (row 0, row 1) dword pairs of columns 16h..16h+15. */
DOT INLINE __m512i pair_index_bf16(int h) {
    uint16_t idx[32];
    for (int i = 0; i < 16; i++) {
        idx[2 * i] = (uint16_t)(16 * h + i);
        idx[2 * i + 1] = (uint16_t)(32 + 16 * h + i);
    }
    return _mm512_loadu_si512(idx);
}

/* Columns e..e+63 of rows r0 and r1 as 4 x 16 (v_r0[c], v_r1[c]) dword
 * pairs in column order; idx: pair_index(0, 1) for fp8, pair_index_bf16(0,
 * 1) for bf16. */
DOT INLINE void pair_words(int kind, const Fp8ByteLut *t, const uint8_t *r0, const uint8_t *r1, int e, __m512i idx0,
                           __m512i idx1, __m512i w[4]) {
    if (kind == DOT_BF16) {
        UNROLL for (int h = 0; h < 2; h++) {
            __m512i x0 = _mm512_loadu_si512(r0 + 2 * e + 64 * h), x1 = _mm512_loadu_si512(r1 + 2 * e + 64 * h);
            w[2 * h] = _mm512_permutex2var_epi16(x0, idx0, x1);
            w[2 * h + 1] = _mm512_permutex2var_epi16(x0, idx1, x1);
        }
    } else {
        __m512i x0 = _mm512_loadu_si512(r0 + e), x1 = _mm512_loadu_si512(r1 + e);
        bf16_words(t, _mm512_permutex2var_epi8(x0, idx0, x1), &w[0], &w[1]);
        bf16_words(t, _mm512_permutex2var_epi8(x0, idx1, x1), &w[2], &w[3]);
    }
}

/* p [HG heads, n] (n <= P_ROWS) as bf16 pairs: pairs[g * P_ROWS / 2 + i] =
 * (p[2i], p[2i + 1]), a zero after the last row when n is odd. */
DOT INLINE void p_pairs(uint32_t *pairs, const float *p, int lds, int HG, int n) {
    for (int g = 0; g < HG; g++)
        for (int j = 0; j < n; j += 32) {
            int left = n - j;
            __mmask16 m0 = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
            __mmask16 m1 = left >= 32 ? 0xffff : left <= 16 ? 0 : (__mmask16)((1u << (left - 16)) - 1);
            const float *x = p + (size_t)g * lds + j;
            __m512i w = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, x + 16), _mm512_maskz_loadu_ps(m0, x));
            _mm512_storeu_si512(pairs + (size_t)g * (P_ROWS / 2) + j / 2, w);
        }
}

/* acc [HG, D] += p V over rows [0, n) of v (n <= P_ROWS), 64 x CH
 * columns a pass: the pass's 4 x CH x HG accumulators stay in registers
 * over the rows. */
DOT INLINE void pv_dot_g(int kind, float *acc, const uint32_t *pairs, int HG, int CH, int D, const uint8_t *v,
                         size_t stride, int n, const Fp8ByteLut *t, __m512i idx0, __m512i idx1) {
    size_t row_bytes = stride * ELEM_BYTES(kind), bytes = (size_t)D * ELEM_BYTES(kind);
    int pfr = prefetch_rows(row_bytes);
    for (int e = 0; e < D; e += 64 * CH) {
        __m512 a[PV_HEADS][2][4];
        UNROLL for (int g = 0; g < HG; g++)
            UNROLL for (int h = 0; h < CH; h++)
                UNROLL for (int c = 0; c < 4; c++) a[g][h][c] = _mm512_loadu_ps(acc + (size_t)g * D + e + 64 * h + 16 * c);
        for (int j = 0; j < n; j += 2) {
            const uint8_t *r0 = v + (size_t)j * row_bytes, *r1 = j + 1 < n ? r0 + row_bytes : r0; /* p is 0 there */
            if (e == 0 && j + pfr < n) {
                prefetch_span(r0 + pfr * row_bytes, bytes);
                prefetch_span(r0 + (pfr + 1) * row_bytes, bytes);
            }
            __m512i pb[PV_HEADS];
            UNROLL for (int g = 0; g < HG; g++) pb[g] = _mm512_set1_epi32((int)pairs[(size_t)g * (P_ROWS / 2) + j / 2]);
            UNROLL for (int h = 0; h < CH; h++) {
                __m512i w[4];
                pair_words(kind, t, r0, r1, e + 64 * h, idx0, idx1, w);
                UNROLL for (int g = 0; g < HG; g++)
                    UNROLL for (int c = 0; c < 4; c++) a[g][h][c] = dot(a[g][h][c], w[c], pb[g]);
            }
        }
        UNROLL for (int g = 0; g < HG; g++)
            UNROLL for (int h = 0; h < CH; h++)
                UNROLL for (int c = 0; c < 4; c++) _mm512_storeu_ps(acc + (size_t)g * D + e + 64 * h + 16 * c, a[g][h][c]);
    }
}

#define PVDOT(HG, CH) pv_dot_g(kind, a, pairs, HG, CH, D, vj, stride, rows, &t, idx0, idx1)

DOT INLINE void pv_dot(int kind, float *acc, const float *p, int lds, int G, int D, const void *v, size_t stride,
                       int n) {
    Fp8ByteLut t;
    if (kind == DOT_FP8) lut_load(&t);
    __m512i idx0 = kind == DOT_BF16 ? pair_index_bf16(0) : pair_index(0);
    __m512i idx1 = kind == DOT_BF16 ? pair_index_bf16(1) : pair_index(1);
    uint32_t pairs[PV_HEADS * P_ROWS / 2];
    for (int j0 = 0; j0 < n; j0 += P_ROWS) {
        int rows = n - j0 < P_ROWS ? n - j0 : P_ROWS;
        const uint8_t *vj = (const uint8_t *)v + (size_t)j0 * stride * ELEM_BYTES(kind);
        for (int g0 = 0; g0 < G; g0 += PV_HEADS) {
            int hg = G - g0 < PV_HEADS ? G - g0 : PV_HEADS, two = D % 128 == 0;
            p_pairs(pairs, p + (size_t)g0 * lds + j0, lds, hg, rows);
            float *a = acc + (size_t)g0 * D;
            switch (hg) { /* 128 columns a pass where 8 x hg accumulators fit */
            case 1: if (two) PVDOT(1, 2); else PVDOT(1, 1); break;
            case 2: if (two) PVDOT(2, 2); else PVDOT(2, 1); break;
            case 3: PVDOT(3, 1); break;
            default: PVDOT(4, 1); break;
            }
        }
    }
}

DOT void pv_fp8_dot(float *acc, const float *p, int lds, int G, int D, const void *v, size_t stride, int n) {
    pv_dot(DOT_FP8, acc, p, lds, G, D, v, stride, n);
}

DOT void pv_bf16_dot(float *acc, const float *p, int lds, int G, int D, const void *v, size_t stride, int n) {
    pv_dot(DOT_BF16, acc, p, lds, G, D, v, stride, n);
}

bool dot_kernels_fit(CpuIsa isa, bool fp8, int head_dim, int group) {
    /* VBMI for a bf16 cache too: every kernel here is compiled for it */
    bool level = cpu_isa_byte_lookup(isa) && (fp8 || group >= DOT_BF16_MIN_GROUP);
    return level && head_dim % 64 == 0 && head_dim <= MAX_DOT_D;
}

#else

bool dot_kernels_fit(CpuIsa isa, bool fp8, int head_dim, int group) {
    (void)isa;
    (void)fp8;
    (void)head_dim;
    (void)group;
    return false;
}

#endif
