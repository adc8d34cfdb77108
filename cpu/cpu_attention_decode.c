/*
 * cpu_attention_decode.c - one query token's attention over the paged cache
 * (see cpu_attention_decode.h): the scalar reference and the AVX2 / AVX-512
 * kernels for its two inner loops, scores = scale * Q k_j and acc += p_j v_j,
 * each for a float32, bf16 and fp8 cache (one template per ISA, the
 * element a constant; fp8 widens through cpu_kv_fp8.h, or by table lookup
 * where the CPU has AVX512-VBMI: the same values). Under bf16 products
 * (--dtype bfloat16) on CPUs with AVX512-BF16 and VBMI, an fp8 cache (and a
 * bf16 one from groups of 5 heads) takes the vdpbf16ps kernels of
 * cpu_attention_decode_dot.c instead: they round q and p to bf16, as that
 * dtype rounds every matmul's input.
 *
 * Each K/V row (head_dim values of one token) is read once and used for all
 * G heads of the group. A block's rows of one head are adjacent (the CPU
 * cache is head-major), so each block is one sequential stream of K and one
 * of V; the kernels prefetch 8 KiB ahead of each into L2, and the start of
 * the next stream before it begins (PREFETCH_BYTES,
 * cpu_attention_decode_kernels.h).
 */
#include "cpu_attention_decode.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "cpu_attention_decode_dot.h"
#include "cpu_attention_decode_kernels.h"
#include "cpu_fp8_byte_lut.h"
#include "cpu_kv_fp8.h"
#include "cpu_ops.h"
#include "cpu_simd.h"
#include "base/half.h"
#include "base/row_max.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* The cache's element: a constant in every kernel once inlined. fp8 reads
 * as e4m3 * 2^-8 (cpu_kv_fp8.h); decode_attend_range folds the 2^8 and the
 * cache's scales into the score scale and the accumulators. */
enum { ELEM_F32, ELEM_BF16, ELEM_FP8 };

SIMD_INLINE size_t elem_bytes(int kind) { return kind == ELEM_FP8 ? 1 : kind == ELEM_BF16 ? 2 : 4; }

SIMD_INLINE float elem_at(const void *base, int kind, size_t i) {
    if (kind == ELEM_FP8) return kv_fp8_widen_scaled(((const uint8_t *)base)[i]);
    return widen_at(base, kind == ELEM_BF16, i);
}

#if defined(__x86_64__)
/* Elements i..i+15 (i..i+7) as float32. */
__attribute__((target("avx512f"))) SIMD_INLINE __m512 load16(const void *base, int kind, size_t i) {
    if (kind == ELEM_FP8) return kv_fp8_widen16((const uint8_t *)base + i);
    return widen16(base, kind == ELEM_BF16, i);
}
__attribute__((target("avx2,f16c"))) SIMD_INLINE __m256 load8(const void *base, int kind, size_t i) {
    if (kind == ELEM_FP8) return kv_fp8_widen8((const uint8_t *)base + i);
    return widen8(base, kind == ELEM_BF16, i);
}
#endif

/* ---- scalar reference ------------------------------------------------------ */

static inline void qk_scalar(float *s, int lds, const float *q, int G, int D, const void *k,
                             size_t stride, int n, float scale, int kind) {
    for (int j = 0; j < n; j++) {
        for (int g = 0; g < G; g++) {
            float d = 0.0f;
            for (int e = 0; e < D; e++) d += q[(size_t)g * D + e] * elem_at(k, kind, (size_t)j * stride + e);
            s[(size_t)g * lds + j] = d * scale;
        }
    }
}

static inline void pv_scalar(float *acc, const float *p, int lds, int G, int D, const void *v,
                             size_t stride, int n, int kind) {
    for (int j = 0; j < n; j++) {
        for (int g = 0; g < G; g++) {
            float pj = p[(size_t)g * lds + j];
            for (int e = 0; e < D; e++) acc[(size_t)g * D + e] += pj * elem_at(v, kind, (size_t)j * stride + e);
        }
    }
}

#define SCALAR_PAIR(SUFFIX, KIND)                                                                  \
    static void qk_scalar_##SUFFIX(float *s, int lds, const float *q, int G, int D, const void *k, \
                                   size_t stride, int n, float scale) {                            \
        qk_scalar(s, lds, q, G, D, k, stride, n, scale, KIND);                                     \
    }                                                                                              \
    static void pv_scalar_##SUFFIX(float *acc, const float *p, int lds, int G, int D,             \
                                   const void *v, size_t stride, int n) {                          \
        pv_scalar(acc, p, lds, G, D, v, stride, n, KIND);                                          \
    }
SCALAR_PAIR(f32, ELEM_F32)
SCALAR_PAIR(bf16, ELEM_BF16)
SCALAR_PAIR(fp8, ELEM_FP8)

#if defined(__x86_64__)
#define INLINE static inline __attribute__((always_inline))
/* Constant-count loops over rows and heads: unrolled, their accumulators
 * live in registers. */
#define UNROLL _Pragma("GCC unroll 8")

/* ---- AVX-512 ---------------------------------------------------------------- */
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

/* G (a constant after inlining, <= MAX_G) dot products per K row, QK_ROWS
 * rows per pass when G is small: one row's G accumulators alone form G
 * dependency chains of D / 16 FMAs, too few to hide the FMA latency. */
AVX512 INLINE void qk_avx512_g(float *s, int lds, const float *q, int G, int D, const void *k,
                               size_t stride, int n, float scale, int kind) {
    size_t esz = elem_bytes(kind);
    int D16 = D & ~15, j = 0, pfr = prefetch_rows(stride * esz);
    if (G <= 4) {
        for (; j + QK_ROWS <= n; j += QK_ROWS) {
            const char *row[QK_ROWS];
            UNROLL for (int r = 0; r < QK_ROWS; r++) {
                row[r] = (const char *)k + (size_t)(j + r) * stride * esz;
                if (j + r + pfr < n) prefetch_span(row[r] + pfr * stride * esz, (size_t)D * esz);
            }
            __m512 acc[QK_ROWS][4]; /* all set: G may be a run-time value here */
            UNROLL for (int r = 0; r < QK_ROWS; r++)
                UNROLL for (int g = 0; g < 4; g++) acc[r][g] = _mm512_setzero_ps();
            for (int e = 0; e < D16; e += 16) {
                __m512 kv[QK_ROWS];
                UNROLL for (int r = 0; r < QK_ROWS; r++) kv[r] = load16(row[r], kind, (size_t)e);
                UNROLL for (int g = 0; g < G; g++) {
                    __m512 qv = _mm512_loadu_ps(q + (size_t)g * D + e);
                    UNROLL for (int r = 0; r < QK_ROWS; r++) acc[r][g] = _mm512_fmadd_ps(qv, kv[r], acc[r][g]);
                }
            }
            UNROLL for (int g = 0; g < G; g++) {
                float d[QK_ROWS];
                _mm_storeu_ps(d, reduce4_512(acc[0][g], acc[1][g], acc[2][g], acc[3][g]));
                UNROLL for (int r = 0; r < QK_ROWS; r++) {
                    for (int e = D16; e < D; e++) d[r] += q[(size_t)g * D + e] * elem_at(row[r], kind, (size_t)e);
                    s[(size_t)g * lds + j + r] = d[r] * scale;
                }
            }
        }
    }
    for (; j < n; j++) {
        const char *row = (const char *)k + (size_t)j * stride * esz;
        if (j + pfr < n) prefetch_span(row + pfr * stride * esz, (size_t)D * esz);
        __m512 acc[MAX_G];
        for (int g = 0; g < G; g++) acc[g] = _mm512_setzero_ps();
        for (int e = 0; e < D16; e += 16) {
            __m512 kv = load16(row, kind, (size_t)e);
            for (int g = 0; g < G; g++)
                acc[g] = _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)g * D + e), kv, acc[g]);
        }
        for (int g = 0; g < G; g++) {
            float d = _mm512_reduce_add_ps(acc[g]);
            for (int e = D16; e < D; e++) d += q[(size_t)g * D + e] * elem_at(row, kind, (size_t)e);
            s[(size_t)g * lds + j] = d * scale;
        }
    }
}

/* acc_g += p_gj v_j, two rows per pass so each accumulator load/store
 * serves two FMAs. */
AVX512 INLINE void pv_avx512_g(float *acc, const float *p, int lds, int G, int D, const void *v,
                               size_t stride, int n, int kind) {
    size_t esz = elem_bytes(kind);
    int D16 = D & ~15, j = 0, pfr = prefetch_rows(stride * esz);
    for (; j + 2 <= n; j += 2) {
        const char *r0 = (const char *)v + (size_t)j * stride * esz, *r1 = r0 + stride * esz;
        if (j + 2 + pfr < n) {
            prefetch_span(r0 + pfr * stride * esz, (size_t)D * esz);
            prefetch_span(r1 + pfr * stride * esz, (size_t)D * esz);
        }
        __m512 p0[MAX_G], p1[MAX_G];
        for (int g = 0; g < G; g++) {
            p0[g] = _mm512_set1_ps(p[(size_t)g * lds + j]);
            p1[g] = _mm512_set1_ps(p[(size_t)g * lds + j + 1]);
        }
        for (int e = 0; e < D16; e += 16) {
            __m512 v0 = load16(r0, kind, (size_t)e), v1 = load16(r1, kind, (size_t)e);
            for (int g = 0; g < G; g++) {
                float *a = acc + (size_t)g * D + e;
                _mm512_storeu_ps(a, _mm512_fmadd_ps(p1[g], v1, _mm512_fmadd_ps(p0[g], v0, _mm512_loadu_ps(a))));
            }
        }
        for (int g = 0; g < G; g++)
            for (int e = D16; e < D; e++)
                acc[(size_t)g * D + e] += p[(size_t)g * lds + j] * elem_at(r0, kind, (size_t)e) +
                                          p[(size_t)g * lds + j + 1] * elem_at(r1, kind, (size_t)e);
    }
    for (; j < n; j++) {
        const char *r0 = (const char *)v + (size_t)j * stride * esz;
        for (int g = 0; g < G; g++) {
            __m512 p0 = _mm512_set1_ps(p[(size_t)g * lds + j]);
            for (int e = 0; e < D16; e += 16) {
                float *a = acc + (size_t)g * D + e;
                _mm512_storeu_ps(a, _mm512_fmadd_ps(p0, load16(r0, kind, (size_t)e), _mm512_loadu_ps(a)));
            }
            for (int e = D16; e < D; e++) acc[(size_t)g * D + e] += p[(size_t)g * lds + j] * elem_at(r0, kind, (size_t)e);
        }
    }
}

#define QK512(KIND, s, lds, q, D, k, stride, n, scale, G) qk_avx512_g(s, lds, q, G, D, k, stride, n, scale, KIND)
#define PV512(KIND, acc, p, lds, D, v, stride, n, G) pv_avx512_g(acc, p, lds, G, D, v, stride, n, KIND)

#define DEFINE_AVX512(SUFFIX, KIND)                                                                \
    AVX512 static void qk_avx512_##SUFFIX(float *s, int lds, const float *q, int G, int D,        \
                                          const void *k, size_t stride, int n, float scale) {      \
        for (int g0 = 0; g0 < G; g0 += MAX_G) {                                                    \
            int g = G - g0 < MAX_G ? G - g0 : MAX_G;                                               \
            GROUP_DISPATCH(QK512, g, KIND, s + (size_t)g0 * lds, lds, q + (size_t)g0 * D, D, k,    \
                           stride, n, scale)                                                       \
        }                                                                                          \
    }                                                                                              \
    AVX512 static void pv_avx512_##SUFFIX(float *acc, const float *p, int lds, int G, int D,      \
                                          const void *v, size_t stride, int n) {                   \
        for (int g0 = 0; g0 < G; g0 += MAX_G) {                                                    \
            int g = G - g0 < MAX_G ? G - g0 : MAX_G;                                               \
            GROUP_DISPATCH(PV512, g, KIND, acc + (size_t)g0 * D, p + (size_t)g0 * lds, lds, D, v,  \
                           stride, n)                                                              \
        }                                                                                          \
    }
DEFINE_AVX512(f32, ELEM_F32)
DEFINE_AVX512(bf16, ELEM_BF16)
DEFINE_AVX512(fp8, ELEM_FP8)

/* ---- AVX-512 with VBMI: the fp8 cache widened by table lookup ------------- */

/* kv_fp8_widen16 converts 16 bytes with five operations, and with two
 * heads per K/V row that bound an fp8 cache's decode attention to ~63% of
 * its rows' read rate (Zen 4). Here 64 bytes at a time: vpermi2b looks up
 * the high and the low byte of each magnitude's float32 (e4m3 * 2^-8 is
 * exactly a bf16, so the other two bytes are zero), the sign goes into the
 * high byte, and a zero-masking vpermt2b per 16 places them: seven
 * shuffles for 64 values. The floats are kv_fp8_widen16's (the table is
 * built from the same half bits), so these kernels give the AVX-512 fp8
 * kernels' bits; head sizes not a multiple of 64 take those. */
#define VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,fma")))

static uint8_t fp8_lut[2][128]; /* [0] byte 2, [1] byte 3 of each magnitude's float */
static pthread_once_t fp8_lut_once = PTHREAD_ONCE_INIT;

static void fp8_lut_build(void) {
    for (int v = 0; v < 128; v++) {
        float f = f16_to_f32((uint16_t)(v << 7)); /* kv_fp8_widen16's half: e4m3 * 2^-8 */
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        fp8_lut[0][v] = (uint8_t)(bits >> 16);
        fp8_lut[1][v] = (uint8_t)(bits >> 24);
    }
}

typedef struct Fp8Lut {
    Fp8ByteLut bytes;
    __m512i place[4]; /* values 16q..16q+15 into bytes 2 and 3 of each lane */
} Fp8Lut;

VBMI INLINE void fp8_lut_load(Fp8Lut *t) {
    pthread_once(&fp8_lut_once, fp8_lut_build);
    fp8_byte_lut_load(&t->bytes, fp8_lut);
    for (int q = 0; q < 4; q++) {
        uint8_t idx[64] = {0};
        for (int i = 0; i < 16; i++) {
            idx[4 * i + 2] = (uint8_t)(16 * q + i);      /* lo */
            idx[4 * i + 3] = (uint8_t)(64 + 16 * q + i); /* hi: the second source */
        }
        t->place[q] = _mm512_loadu_si512(idx);
    }
}

/* 64 bytes at p as 4 x 16 floats, kv_fp8_widen16's values. */
VBMI INLINE void fp8_widen64(const Fp8Lut *t, const uint8_t *p, __m512 w[4]) {
    __m512i lo, hi;
    fp8_byte_lut_lookup(&t->bytes, _mm512_loadu_si512(p), &lo, &hi);
    UNROLL for (int q = 0; q < 4; q++)
        w[q] = _mm512_castsi512_ps(_mm512_maskz_permutex2var_epi8(0xCCCCCCCCCCCCCCCCull, lo, t->place[q], hi));
}

/* qk_avx512_g for an fp8 cache and D a multiple of 64: every accumulator
 * takes the same FMAs in the same order. */
VBMI INLINE void qk_fp8_lut_g(float *s, int lds, const float *q, int G, int D, const void *k, size_t stride,
                              int n, float scale) {
    Fp8Lut t;
    fp8_lut_load(&t);
    int j = 0, pfr = prefetch_rows(stride);
    if (G <= 4) {
        for (; j + QK_ROWS <= n; j += QK_ROWS) {
            const uint8_t *row[QK_ROWS];
            qk_rows(row, k, j, n, stride, pfr, (size_t)D);
            __m512 acc[QK_ROWS][4];
            UNROLL for (int r = 0; r < QK_ROWS; r++)
                UNROLL for (int g = 0; g < 4; g++) acc[r][g] = _mm512_setzero_ps();
            for (int e = 0; e < D; e += 64) {
                UNROLL for (int r = 0; r < QK_ROWS; r++) {
                    __m512 kv[4];
                    fp8_widen64(&t, row[r] + e, kv);
                    UNROLL for (int c = 0; c < 4; c++)
                        UNROLL for (int g = 0; g < G; g++)
                            acc[r][g] = _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)g * D + e + 16 * c), kv[c], acc[r][g]);
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
        const uint8_t *row = (const uint8_t *)k + (size_t)j * stride;
        if (j + pfr < n) prefetch_span(row + pfr * stride, (size_t)D);
        __m512 acc[MAX_G];
        for (int g = 0; g < G; g++) acc[g] = _mm512_setzero_ps();
        for (int e = 0; e < D; e += 64) {
            __m512 kv[4];
            fp8_widen64(&t, row + e, kv);
            for (int c = 0; c < 4; c++)
                for (int g = 0; g < G; g++)
                    acc[g] = _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)g * D + e + 16 * c), kv[c], acc[g]);
        }
        for (int g = 0; g < G; g++) s[(size_t)g * lds + j] = _mm512_reduce_add_ps(acc[g]) * scale;
    }
}

/* pv_avx512_g for an fp8 cache and D a multiple of 64, in the same order. */
VBMI INLINE void pv_fp8_lut_g(float *acc, const float *p, int lds, int G, int D, const void *v, size_t stride,
                              int n) {
    Fp8Lut t;
    fp8_lut_load(&t);
    int j = 0, pfr = prefetch_rows(stride);
    for (; j + 4 <= n; j += 4) { /* four rows a pass: each accumulator load and store serves four FMAs */
        const uint8_t *r[4];
        __m512 pr[4][MAX_G];
        UNROLL for (int i = 0; i < 4; i++) {
            r[i] = (const uint8_t *)v + (size_t)(j + i) * stride;
            if (j + 4 + pfr < n) prefetch_span(r[i] + pfr * stride, (size_t)D);
            for (int g = 0; g < G; g++) pr[i][g] = _mm512_set1_ps(p[(size_t)g * lds + j + i]);
        }
        for (int e = 0; e < D; e += 64) {
            __m512 w[4][4];
            UNROLL for (int i = 0; i < 4; i++) fp8_widen64(&t, r[i] + e, w[i]);
            UNROLL for (int c = 0; c < 4; c++)
                for (int g = 0; g < G; g++) {
                    float *a = acc + (size_t)g * D + e + 16 * c;
                    __m512 x = _mm512_loadu_ps(a);
                    UNROLL for (int i = 0; i < 4; i++) x = _mm512_fmadd_ps(pr[i][g], w[i][c], x);
                    _mm512_storeu_ps(a, x);
                }
        }
    }
    for (; j + 2 <= n; j += 2) {
        const uint8_t *r0 = (const uint8_t *)v + (size_t)j * stride, *r1 = r0 + stride;
        if (j + 2 + pfr < n) {
            prefetch_span(r0 + pfr * stride, (size_t)D);
            prefetch_span(r1 + pfr * stride, (size_t)D);
        }
        __m512 p0[MAX_G], p1[MAX_G];
        for (int g = 0; g < G; g++) {
            p0[g] = _mm512_set1_ps(p[(size_t)g * lds + j]);
            p1[g] = _mm512_set1_ps(p[(size_t)g * lds + j + 1]);
        }
        for (int e = 0; e < D; e += 64) {
            __m512 v0[4], v1[4];
            fp8_widen64(&t, r0 + e, v0);
            fp8_widen64(&t, r1 + e, v1);
            UNROLL for (int c = 0; c < 4; c++)
                for (int g = 0; g < G; g++) {
                    float *a = acc + (size_t)g * D + e + 16 * c;
                    _mm512_storeu_ps(a, _mm512_fmadd_ps(p1[g], v1[c], _mm512_fmadd_ps(p0[g], v0[c], _mm512_loadu_ps(a))));
                }
        }
    }
    for (; j < n; j++) {
        const uint8_t *r0 = (const uint8_t *)v + (size_t)j * stride;
        for (int g = 0; g < G; g++) {
            __m512 p0 = _mm512_set1_ps(p[(size_t)g * lds + j]);
            for (int e = 0; e < D; e += 64) {
                __m512 v0[4];
                fp8_widen64(&t, r0 + e, v0);
                for (int c = 0; c < 4; c++) {
                    float *a = acc + (size_t)g * D + e + 16 * c;
                    _mm512_storeu_ps(a, _mm512_fmadd_ps(p0, v0[c], _mm512_loadu_ps(a)));
                }
            }
        }
    }
}

#define QKLUT(s, lds, q, D, k, stride, n, scale, G) qk_fp8_lut_g(s, lds, q, G, D, k, stride, n, scale)
#define PVLUT(acc, p, lds, D, v, stride, n, G) pv_fp8_lut_g(acc, p, lds, G, D, v, stride, n)

VBMI static void qk_fp8_lut(float *s, int lds, const float *q, int G, int D, const void *k, size_t stride,
                            int n, float scale) {
    if (D % 64 != 0) return qk_avx512_fp8(s, lds, q, G, D, k, stride, n, scale);
    for (int g0 = 0; g0 < G; g0 += MAX_G) {
        int g = G - g0 < MAX_G ? G - g0 : MAX_G;
        GROUP_DISPATCH(QKLUT, g, s + (size_t)g0 * lds, lds, q + (size_t)g0 * D, D, k, stride, n, scale)
    }
}

VBMI static void pv_fp8_lut(float *acc, const float *p, int lds, int G, int D, const void *v, size_t stride,
                            int n) {
    if (D % 64 != 0) return pv_avx512_fp8(acc, p, lds, G, D, v, stride, n);
    for (int g0 = 0; g0 < G; g0 += MAX_G) {
        int g = G - g0 < MAX_G ? G - g0 : MAX_G;
        GROUP_DISPATCH(PVLUT, g, acc + (size_t)g0 * D, p + (size_t)g0 * lds, lds, D, v, stride, n)
    }
}

/* ---- AVX2 + FMA ------------------------------------------------------------- */
#define AVX2 __attribute__((target("avx2,fma,f16c")))

/* As qk_avx512_g: QK_ROWS rows per pass for groups of up to 2 heads (the
 * 16 ymm registers hold QK_ROWS x 2 accumulators, the rows and a q vector). */
AVX2 INLINE void qk_avx2_g(float *s, int lds, const float *q, int G, int D, const void *k,
                           size_t stride, int n, float scale, int kind) {
    size_t esz = elem_bytes(kind);
    int D8 = D & ~7, j = 0, pfr = prefetch_rows(stride * esz);
    if (G <= 2) {
        for (; j + QK_ROWS <= n; j += QK_ROWS) {
            const char *row[QK_ROWS];
            UNROLL for (int r = 0; r < QK_ROWS; r++) {
                row[r] = (const char *)k + (size_t)(j + r) * stride * esz;
                if (j + r + pfr < n) prefetch_span(row[r] + pfr * stride * esz, (size_t)D * esz);
            }
            __m256 acc[QK_ROWS][2]; /* all set: G may be a run-time value here */
            UNROLL for (int r = 0; r < QK_ROWS; r++)
                UNROLL for (int g = 0; g < 2; g++) acc[r][g] = _mm256_setzero_ps();
            for (int e = 0; e < D8; e += 8) {
                __m256 kv[QK_ROWS];
                UNROLL for (int r = 0; r < QK_ROWS; r++) kv[r] = load8(row[r], kind, (size_t)e);
                UNROLL for (int g = 0; g < G; g++) {
                    __m256 qv = _mm256_loadu_ps(q + (size_t)g * D + e);
                    UNROLL for (int r = 0; r < QK_ROWS; r++) acc[r][g] = _mm256_fmadd_ps(qv, kv[r], acc[r][g]);
                }
            }
            UNROLL for (int g = 0; g < G; g++) {
                float d[QK_ROWS];
                _mm_storeu_ps(d, reduce4_256(acc[0][g], acc[1][g], acc[2][g], acc[3][g]));
                UNROLL for (int r = 0; r < QK_ROWS; r++) {
                    for (int e = D8; e < D; e++) d[r] += q[(size_t)g * D + e] * elem_at(row[r], kind, (size_t)e);
                    s[(size_t)g * lds + j + r] = d[r] * scale;
                }
            }
        }
    }
    for (; j < n; j++) {
        const char *row = (const char *)k + (size_t)j * stride * esz;
        if (j + pfr < n) prefetch_span(row + pfr * stride * esz, (size_t)D * esz);
        __m256 acc[MAX_G];
        for (int g = 0; g < G; g++) acc[g] = _mm256_setzero_ps();
        for (int e = 0; e < D8; e += 8) {
            __m256 kv = load8(row, kind, (size_t)e);
            for (int g = 0; g < G; g++)
                acc[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)g * D + e), kv, acc[g]);
        }
        for (int g = 0; g < G; g++) {
            float d = hsum256(acc[g]);
            for (int e = D8; e < D; e++) d += q[(size_t)g * D + e] * elem_at(row, kind, (size_t)e);
            s[(size_t)g * lds + j] = d * scale;
        }
    }
}

AVX2 INLINE void pv_avx2_g(float *acc, const float *p, int lds, int G, int D, const void *v,
                           size_t stride, int n, int kind) {
    size_t esz = elem_bytes(kind);
    int D8 = D & ~7, j = 0, pfr = prefetch_rows(stride * esz);
    for (; j + 2 <= n; j += 2) {
        const char *r0 = (const char *)v + (size_t)j * stride * esz, *r1 = r0 + stride * esz;
        if (j + 2 + pfr < n) {
            prefetch_span(r0 + pfr * stride * esz, (size_t)D * esz);
            prefetch_span(r1 + pfr * stride * esz, (size_t)D * esz);
        }
        __m256 p0[MAX_G], p1[MAX_G];
        for (int g = 0; g < G; g++) {
            p0[g] = _mm256_set1_ps(p[(size_t)g * lds + j]);
            p1[g] = _mm256_set1_ps(p[(size_t)g * lds + j + 1]);
        }
        for (int e = 0; e < D8; e += 8) {
            __m256 v0 = load8(r0, kind, (size_t)e), v1 = load8(r1, kind, (size_t)e);
            for (int g = 0; g < G; g++) {
                float *a = acc + (size_t)g * D + e;
                _mm256_storeu_ps(a, _mm256_fmadd_ps(p1[g], v1, _mm256_fmadd_ps(p0[g], v0, _mm256_loadu_ps(a))));
            }
        }
        for (int g = 0; g < G; g++)
            for (int e = D8; e < D; e++)
                acc[(size_t)g * D + e] += p[(size_t)g * lds + j] * elem_at(r0, kind, (size_t)e) +
                                          p[(size_t)g * lds + j + 1] * elem_at(r1, kind, (size_t)e);
    }
    for (; j < n; j++) {
        const char *r0 = (const char *)v + (size_t)j * stride * esz;
        for (int g = 0; g < G; g++) {
            __m256 p0 = _mm256_set1_ps(p[(size_t)g * lds + j]);
            for (int e = 0; e < D8; e += 8) {
                float *a = acc + (size_t)g * D + e;
                _mm256_storeu_ps(a, _mm256_fmadd_ps(p0, load8(r0, kind, (size_t)e), _mm256_loadu_ps(a)));
            }
            for (int e = D8; e < D; e++) acc[(size_t)g * D + e] += p[(size_t)g * lds + j] * elem_at(r0, kind, (size_t)e);
        }
    }
}

#define QK256(KIND, s, lds, q, D, k, stride, n, scale, G) qk_avx2_g(s, lds, q, G, D, k, stride, n, scale, KIND)
#define PV256(KIND, acc, p, lds, D, v, stride, n, G) pv_avx2_g(acc, p, lds, G, D, v, stride, n, KIND)

#define DEFINE_AVX2(SUFFIX, KIND)                                                                  \
    AVX2 static void qk_avx2_##SUFFIX(float *s, int lds, const float *q, int G, int D,            \
                                      const void *k, size_t stride, int n, float scale) {          \
        for (int g0 = 0; g0 < G; g0 += MAX_G) {                                                    \
            int g = G - g0 < MAX_G ? G - g0 : MAX_G;                                               \
            GROUP_DISPATCH(QK256, g, KIND, s + (size_t)g0 * lds, lds, q + (size_t)g0 * D, D, k,    \
                           stride, n, scale)                                                       \
        }                                                                                          \
    }                                                                                              \
    AVX2 static void pv_avx2_##SUFFIX(float *acc, const float *p, int lds, int G, int D,          \
                                      const void *v, size_t stride, int n) {                       \
        for (int g0 = 0; g0 < G; g0 += MAX_G) {                                                    \
            int g = G - g0 < MAX_G ? G - g0 : MAX_G;                                               \
            GROUP_DISPATCH(PV256, g, KIND, acc + (size_t)g0 * D, p + (size_t)g0 * lds, lds, D, v,  \
                           stride, n)                                                              \
        }                                                                                          \
    }
DEFINE_AVX2(f32, ELEM_F32)
DEFINE_AVX2(bf16, ELEM_BF16)
DEFINE_AVX2(fp8, ELEM_FP8)
#endif

static void kernels(CpuIsa isa, int kind, int head_dim, int group, bool bf16_products, QkFn *qk, PvFn *pv) {
    static const QkFn scalar_qk[3] = {qk_scalar_f32, qk_scalar_bf16, qk_scalar_fp8};
    static const PvFn scalar_pv[3] = {pv_scalar_f32, pv_scalar_bf16, pv_scalar_fp8};
    *qk = scalar_qk[kind];
    *pv = scalar_pv[kind];
#if defined(__x86_64__)
    static const QkFn avx512_qk[3] = {qk_avx512_f32, qk_avx512_bf16, qk_avx512_fp8};
    static const PvFn avx512_pv[3] = {pv_avx512_f32, pv_avx512_bf16, pv_avx512_fp8};
    static const QkFn avx2_qk[3] = {qk_avx2_f32, qk_avx2_bf16, qk_avx2_fp8};
    static const PvFn avx2_pv[3] = {pv_avx2_f32, pv_avx2_bf16, pv_avx2_fp8};
    if (kind == ELEM_FP8 && bf16_products && dot_kernels_fit(isa, true, head_dim, group)) {
        *qk = qk_fp8_dot;
        *pv = pv_fp8_dot;
    } else if (kind == ELEM_BF16 && bf16_products && dot_kernels_fit(isa, false, head_dim, group)) {
        *qk = qk_bf16_dot;
        *pv = pv_bf16_dot;
    } else if (kind == ELEM_FP8 && cpu_isa_byte_lookup(isa)) {
        *qk = qk_fp8_lut;
        *pv = pv_fp8_lut;
    } else if (isa >= CPU_ISA_AVX512) {
        *qk = avx512_qk[kind];
        *pv = avx512_pv[kind];
    } else if (isa == CPU_ISA_AVX2) {
        *qk = avx2_qk[kind];
        *pv = avx2_pv[kind];
    }
#else
    (void)isa;
#endif
}

/* The first PREFETCH_BYTES of a stream of `bytes`, into L2. */
static void prefetch_start(const void *p, size_t bytes) {
    prefetch_span(p, bytes < PREFETCH_BYTES ? bytes : PREFETCH_BYTES);
}

void decode_attend_range(CpuIsa isa, const DecodeKv *kv, const float *q, int G, int k0, int k1,
                         float *scores, DecodePart part) {
    int D = kv->head_dim, bs = kv->block_size;
    int kind = kv->dtype == KV_CACHE_FP8 ? ELEM_FP8 : kv->dtype == KV_CACHE_BF16 ? ELEM_BF16 : ELEM_F32;
    size_t esz = elem_bytes(kind), stride = (size_t)D;
    float scale = 1.0f / sqrtf((float)D);
    if (kind == ELEM_FP8) scale *= kv->k_scale * KV_FP8_WIDEN_SCALE;
    QkFn qk;
    PvFn pv;
    kernels(isa, kind, D, G, kv->bf16_products, &qk, &pv);
    for (int g = 0; g < G; g++) {
        part.max[g] = -INFINITY;
        part.sum[g] = 0.0f;
    }
    memset(part.acc, 0, sizeof(float) * (size_t)G * D);
    for (int kb = k0 / bs; kb * bs < k1; kb++) {
        int key0 = kb * bs;
        int j0 = k0 > key0 ? k0 - key0 : 0;
        int j1 = k1 - key0 < bs ? k1 - key0 : bs;
        int n = j1 - j0;
        size_t first = (((size_t)kv->block_table[kb] * kv->num_kv_heads + kv->kv_head) * bs + j0) * stride;
        const char *krows = (const char *)kv->k + first * esz;
        const char *vrows = (const char *)kv->v + first * esz;
        /* Start the V stream while K is scored, and the next block's K
         * while V is summed: each block's streams would otherwise start cold
         * (a head's rows of one block are only n * D * esz bytes apart). */
        prefetch_start(vrows, (size_t)n * D * esz);
        qk(scores, bs, q, G, D, krows, stride, n, scale);
        if ((kb + 1) * bs < k1) {
            size_t next = ((size_t)kv->block_table[kb + 1] * kv->num_kv_heads + kv->kv_head) * bs * stride;
            prefetch_start((const char *)kv->k + next * esz, (size_t)bs * D * esz);
        }
        /* Online softmax, per head: rescale what came before to the new max. */
        for (int g = 0; g < G; g++) {
            float *sc = scores + (size_t)g * bs;
            float mx = row_max(sc, n);
            float new_max = mx > part.max[g] ? mx : part.max[g];
            float correction = expf(part.max[g] - new_max); /* 0 on the first block */
            float sum = exp_shifted_sum(sc, n, new_max);
            part.sum[g] = part.sum[g] * correction + sum;
            part.max[g] = new_max;
            if (correction != 1.0f) {
                float *acc = part.acc + (size_t)g * D;
                for (int d = 0; d < D; d++) acc[d] *= correction;
            }
        }
        pv(part.acc, scores, bs, G, D, vrows, stride, n);
    }
    if (kind == ELEM_FP8) { /* the values were read as e4m3 * 2^-8 */
        float v_mul = kv->v_scale * KV_FP8_WIDEN_SCALE;
        for (size_t i = 0; i < (size_t)G * D; i++) part.acc[i] *= v_mul;
    }
}

void decode_finish(float *out, int out_stride, const DecodePart *parts, int n, int G,
                   int head_dim) {
    for (int g = 0; g < G; g++) {
        float m = -INFINITY, l = 0.0f;
        for (int c = 0; c < n; c++) m = parts[c].max[g] > m ? parts[c].max[g] : m;
        for (int c = 0; c < n; c++) l += parts[c].sum[g] * expf(parts[c].max[g] - m);
        float *o = out + (size_t)g * out_stride;
        for (int c = 0; c < n; c++) {
            float w = expf(parts[c].max[g] - m) / l;
            const float *acc = parts[c].acc + (size_t)g * head_dim;
            if (c == 0)
                for (int d = 0; d < head_dim; d++) o[d] = acc[d] * w;
            else
                for (int d = 0; d < head_dim; d++) o[d] += acc[d] * w;
        }
    }
}
