/*
 * cpu_matmul_fp8_bf16.c - FP8 weights against bf16 activations with
 * vdpbf16ps (AVX512-BF16 and AVX512-VBMI: Zen 4, Sapphire Rapids and
 * later): fp8_gemm_bf16 of cpu_matmul_fp8.h. Hand-written (no library
 * multiplies e4m3 on a CPU).
 *
 * Why: every e4m3 value is exactly a bf16 (4 significant bits, exponents
 * 2^-9..2^8), so when the activations are bf16 already (--dtype bfloat16
 * rounds every matmul input) vdpbf16ps multiplies weight and activation
 * exactly, 32 pairs per instruction: twice the float32 FMA rate, with a
 * widening that is two table lookups instead of a half-to-float
 * conversion per 16 weights.
 *
 * The widening, 64 weights at a time: vpermi2b looks up the low and the
 * high byte of each magnitude's bf16 in two 128-entry tables (the index's
 * 7 low bits are the magnitude; the tables are built once from
 * fp8_e4m3_to_float, subnormals and zeros included), the sign bit goes
 * into the high byte, and two vpermt2b interleave low and high bytes into
 * 2 x 32 bf16 in K order.
 *
 * The sums: per output, one float32 accumulator of 16 lanes per 128-column
 * chunk (vdpbf16ps adds each lane's two products in order), then total =
 * partial * scale + total once per chunk, and the total's lanes summed at
 * the end: exact products, float32 sums, as fp8_gemm's. Both paths below
 * do exactly these operations in this order (64 columns per step, masked
 * zeros past K), so a row's result does not depend on its batch or on the
 * split of the weight rows:
 *   - up to FEW_M activation rows (decode): a strip of weight rows widened
 *     in registers and used at once;
 *   - more (prefill, large batches): a strip of NR weight rows widened once
 *     into the caller's scratch, then MR x NR tiles over chunks of
 *     activation rows that stay in L2 (as cpu_matmul_bf16.c).
 */
#include "cpu_matmul_fp8.h"

#include <stdbool.h>
#include <stddef.h>

#if defined(__x86_64__)
#include <immintrin.h>
#include <pthread.h>

#include "base/half.h"
#include "cpu_fp8_byte_lut.h"
#include "cpu_simd.h"

#define FT "avx512f,avx512bw,avx512vl,avx512bf16,avx512vbmi"
#define FN static inline __attribute__((always_inline, target(FT)))
#define UNROLL _Pragma("GCC unroll 8")

/* Activation rows up to which weights are widened in registers, and the
 * accumulators of one such strip (mr x nr, each with its chunk total). */
#define FEW_M 4
#define FEW_ACC 8

/* The tiles of the scratch path: MR x NR partials and as many totals,
 * NR weight vectors and an activation: 28 of the 32 zmm registers. */
#define MR 4
#define NR 3

/* Activation rows per chunk of the scratch path: about this many bytes of
 * them stay in L2 while strips pass (as cpu_matmul_bf16.c). */
#define CHUNK_BYTES (256 * 1024)

/* Software prefetch distance in a weight row (bytes), as fp8_gemm's. */
#define PREFETCH_BYTES 4096

/* ---- the widening ---------------------------------------------------------- */

static uint8_t lut_bytes[2][128]; /* [0]: the low byte of each magnitude's bf16, [1]: the high */
static pthread_once_t lut_once = PTHREAD_ONCE_INIT;

static void lut_build(void) {
    for (int v = 0; v < 128; v++) {
        uint16_t h = f32_to_bf16(fp8_e4m3_to_float((uint8_t)v));
        lut_bytes[0][v] = (uint8_t)(h & 0xff);
        lut_bytes[1][v] = (uint8_t)(h >> 8);
    }
}

typedef struct Lut {
    Fp8ByteLut bytes;
    __m512i first, second; /* interleaves: bf16 0..31 and 32..63 of (lo, hi) */
} Lut;

FN Lut lut_load(void) {
    pthread_once(&lut_once, lut_build);
    Lut t;
    fp8_byte_lut_load(&t.bytes, lut_bytes);
    uint8_t a[64], b[64];
    for (int i = 0; i < 32; i++) { /* index bit 6 picks the second source (hi) */
        a[2 * i] = (uint8_t)i;
        a[2 * i + 1] = (uint8_t)(64 + i);
        b[2 * i] = (uint8_t)(32 + i);
        b[2 * i + 1] = (uint8_t)(96 + i);
    }
    t.first = _mm512_loadu_si512(a);
    t.second = _mm512_loadu_si512(b);
    return t;
}

/* 64 e4m3 bytes -> bf16 values 0..31 (*a) and 32..63 (*b), exactly. */
FN void widen64(const Lut *t, __m512i bytes, __m512i *a, __m512i *b) {
    __m512i lo, hi;
    fp8_byte_lut_lookup(&t->bytes, bytes, &lo, &hi);
    *a = _mm512_permutex2var_epi8(lo, t->first, hi);
    *b = _mm512_permutex2var_epi8(lo, t->second, hi);
}

FN __m512 dot(__m512 acc, __m512i x, __m512i w) { return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w); }

/* The two halves of a 64-column step of an activation row; `left`
 * columns remain (under 64: masked, zeros past them, nothing read). */
FN void x_step(const uint16_t *x, int left, __m512i *xa, __m512i *xb) {
    if (left >= 64) {
        *xa = _mm512_loadu_si512(x);
        *xb = _mm512_loadu_si512(x + 32);
        return;
    }
    __mmask32 ma = left >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << left) - 1);
    __mmask32 mb = left > 32 ? (__mmask32)((1u << (left - 32)) - 1) : 0;
    *xa = _mm512_maskz_loadu_epi16(ma, x);
    *xb = _mm512_maskz_loadu_epi16(mb, x + 32);
}

/* 64 weight bytes of a row (under 64 left: masked, zeros after). */
FN __m512i w_step(const uint8_t *p, int left) {
    return left >= 64 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8((__mmask64)((1ull << left) - 1), p);
}

FN int chunk_end(int k, int K) { return K - k < FP8_BLOCK ? K : k + FP8_BLOCK; }

FN size_t wrap(size_t off, int K, int nr) { return off < (size_t)K ? off : off + (size_t)(nr - 1) * K; }

/* ---- up to FEW_M activation rows: widened in registers -------------------- */

/* One 64-column step at column k of the strip's rows wr (left columns
 * remain: under 64, the masked tail). */
FN void few_step(__m512 *acc, const uint16_t *x, int ldx, const uint8_t *const *wr, int k, int left,
                 int mr, int nr, const Lut *t) {
    UNROLL for (int j = 0; j < nr; j++) {
        __m512i a, b;
        widen64(t, w_step(wr[j] + k, left), &a, &b);
        UNROLL for (int i = 0; i < mr; i++) {
            __m512i xa, xb;
            x_step(x + (size_t)i * ldx + k, left, &xa, &xb);
            acc[i * nr + j] = dot(dot(acc[i * nr + j], xa, a), xb, b);
        }
    }
}

FN void few(float *y, int ldy, const uint16_t *x, int ldx, const uint8_t *q, const float *scales,
            int K, int n, int mr, int nr, const Lut *t) {
    __m512 tot[FEW_ACC];
    UNROLL for (int a = 0; a < mr * nr; a++) tot[a] = _mm512_setzero_ps();
    int kb = (K + FP8_BLOCK - 1) / FP8_BLOCK;
    const uint8_t *wr[4];
    const float *sr[4];
    UNROLL for (int j = 0; j < nr; j++) {
        wr[j] = q + (size_t)(n + j) * K;
        sr[j] = scales + (size_t)((n + j) / FP8_BLOCK) * kb;
    }
    for (int c = 0; c < kb; c++) {
        int k = c * FP8_BLOCK, end = chunk_end(k, K);
        __m512 acc[FEW_ACC];
        UNROLL for (int a = 0; a < mr * nr; a++) acc[a] = _mm512_setzero_ps();
        for (; k + 64 <= end; k += 64) {
            UNROLL for (int j = 0; j < nr; j++) prefetch_l2(wr[j] + wrap((size_t)k + PREFETCH_BYTES, K, nr));
            few_step(acc, x, ldx, wr, k, 64, mr, nr, t);
        }
        if (k < end) few_step(acc, x, ldx, wr, k, end - k, mr, nr, t);
        UNROLL for (int j = 0; j < nr; j++) {
            __m512 s = _mm512_set1_ps(sr[j][c]);
            UNROLL for (int i = 0; i < mr; i++) tot[i * nr + j] = _mm512_fmadd_ps(acc[i * nr + j], s, tot[i * nr + j]);
        }
    }
    UNROLL for (int i = 0; i < mr; i++)
        UNROLL for (int j = 0; j < nr; j++) y[(size_t)i * ldy + n + j] = _mm512_reduce_add_ps(tot[i * nr + j]);
}

/* Strips of 4 weight rows for 1 or 2 activation rows, of 2 for 3 or 4
 * (mr x nr within FEW_ACC), mr and nr constants in each call. */
FN void few_rows(float *y, int ldy, const uint16_t *x, int ldx, int M, const uint8_t *q,
                 const float *scales, int K, int n0, int n1, const Lut *t) {
    int n = n0;
    switch (M) {
    case 1:
        for (; n + 4 <= n1; n += 4) few(y, ldy, x, ldx, q, scales, K, n, 1, 4, t);
        for (; n < n1; n++) few(y, ldy, x, ldx, q, scales, K, n, 1, 1, t);
        break;
    case 2:
        for (; n + 4 <= n1; n += 4) few(y, ldy, x, ldx, q, scales, K, n, 2, 4, t);
        for (; n < n1; n++) few(y, ldy, x, ldx, q, scales, K, n, 2, 1, t);
        break;
    case 3:
        for (; n + 2 <= n1; n += 2) few(y, ldy, x, ldx, q, scales, K, n, 3, 2, t);
        if (n < n1) few(y, ldy, x, ldx, q, scales, K, n, 3, 1, t);
        break;
    default:
        for (; n + 2 <= n1; n += 2) few(y, ldy, x, ldx, q, scales, K, n, 4, 2, t);
        if (n < n1) few(y, ldy, x, ldx, q, scales, K, n, 4, 1, t);
        break;
    }
}

/* ---- more rows: a strip widened into scratch, then tiles ------------------ */

/* Rows [n, n + nr) as bf16 at h, kp (K rounded up to 64) per row, zeros
 * from K to kp. */
FN void widen_strip(const uint8_t *q, int K, int kp, int n, int nr, uint16_t *h, const Lut *t) {
    for (int j = 0; j < nr; j++) {
        const uint8_t *row = q + (size_t)(n + j) * K;
        uint16_t *dst = h + (size_t)j * kp;
        for (int k = 0; k < K; k += 64) {
            prefetch_l2(row + k + PREFETCH_BYTES);
            __m512i a, b;
            widen64(t, w_step(row + k, K - k), &a, &b);
            _mm512_storeu_si512(dst + k, a);
            _mm512_storeu_si512(dst + k + 32, b);
        }
    }
}

/* One 64-column step of a tile: the first 32 columns for every output,
 * then the next 32 (each output's two products in K order, as few_step). */
FN void tile_step(__m512 acc[MR][NR], const uint16_t *x, int ldx, const uint16_t *h, int kp, int k,
                  int left, int mr, int nr) {
    UNROLL for (int half = 0; half < 2; half++) {
        __m512i w[NR];
        UNROLL for (int j = 0; j < nr; j++) w[j] = _mm512_loadu_si512(h + (size_t)j * kp + k + 32 * half);
        int cols = left - 32 * half; /* of this half */
        __mmask32 m = cols >= 32 ? ~(__mmask32)0 : cols > 0 ? (__mmask32)((1u << cols) - 1) : 0;
        UNROLL for (int i = 0; i < mr; i++) {
            const uint16_t *xp = x + (size_t)i * ldx + k + 32 * half;
            __m512i xv = left >= 64 ? _mm512_loadu_si512(xp) : _mm512_maskz_loadu_epi16(m, xp);
            UNROLL for (int j = 0; j < nr; j++) acc[i][j] = dot(acc[i][j], xv, w[j]);
        }
    }
}

FN void tile(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *h, int kp,
             const float *scales, int K, int n, int mr, int nr) {
    __m512 tot[MR][NR];
    UNROLL for (int i = 0; i < mr; i++)
        UNROLL for (int j = 0; j < nr; j++) tot[i][j] = _mm512_setzero_ps();
    int kb = (K + FP8_BLOCK - 1) / FP8_BLOCK;
    for (int c = 0; c < kb; c++) {
        int k = c * FP8_BLOCK, end = chunk_end(k, K);
        __m512 acc[MR][NR];
        UNROLL for (int i = 0; i < mr; i++)
            UNROLL for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_ps();
        for (; k + 64 <= end; k += 64) tile_step(acc, x, ldx, h, kp, k, 64, mr, nr);
        if (k < end) tile_step(acc, x, ldx, h, kp, k, end - k, mr, nr);
        UNROLL for (int j = 0; j < nr; j++) {
            __m512 s = _mm512_set1_ps(scales[(size_t)((n + j) / FP8_BLOCK) * kb + c]);
            UNROLL for (int i = 0; i < mr; i++) tot[i][j] = _mm512_fmadd_ps(acc[i][j], s, tot[i][j]);
        }
    }
    UNROLL for (int i = 0; i < mr; i++)
        UNROLL for (int j = 0; j < nr; j++) y[(size_t)i * ldy + n + j] = _mm512_reduce_add_ps(tot[i][j]);
}

/* The widened strip against activation rows [0, M), MR at a time. */
FN void strip(float *y, int ldy, const uint16_t *x, int ldx, int M, const uint16_t *h, int kp,
              const float *scales, int K, int n, int nr) {
    int m = 0;
    for (; m + MR <= M; m += MR)
        tile(y + (size_t)m * ldy, ldy, x + (size_t)m * ldx, ldx, h, kp, scales, K, n, MR, nr);
    float *ym = y + (size_t)m * ldy;
    const uint16_t *xm = x + (size_t)m * ldx;
    switch (M - m) {
    case 3: tile(ym, ldy, xm, ldx, h, kp, scales, K, n, 3, nr); break;
    case 2: tile(ym, ldy, xm, ldx, h, kp, scales, K, n, 2, nr); break;
    case 1: tile(ym, ldy, xm, ldx, h, kp, scales, K, n, 1, nr); break;
    default: break;
    }
}

FN void strips(float *y, int ldy, const uint16_t *x, int ldx, int M, const uint8_t *q,
               const float *scales, int K, int n0, int n1, uint16_t *h, const Lut *t) {
    int kp = (K + 63) / 64 * 64;
    int chunk = CHUNK_BYTES / (2 * kp) / MR * MR;
    if (chunk < MR) chunk = MR;
    for (int m0 = 0; m0 < M; m0 += chunk) {
        int rows = M - m0 < chunk ? M - m0 : chunk;
        float *yc = y + (size_t)m0 * ldy;
        const uint16_t *xc = x + (size_t)m0 * ldx;
        for (int n = n0; n < n1; n += NR) {
            int nr = n1 - n < NR ? n1 - n : NR;
            widen_strip(q, K, kp, n, nr, h, t);
            switch (nr) { /* a constant in each call: the tiles unroll into registers */
            case 3: strip(yc, ldy, xc, ldx, rows, h, kp, scales, K, n, 3); break;
            case 2: strip(yc, ldy, xc, ldx, rows, h, kp, scales, K, n, 2); break;
            default: strip(yc, ldy, xc, ldx, rows, h, kp, scales, K, n, 1); break;
            }
        }
    }
}

__attribute__((target(FT))) static void gemm_bf16(const uint8_t *q, const float *scales, int K,
                                                  const uint16_t *x, int ldx, int M, float *y, int ldy,
                                                  int n0, int n1, float *scratch) {
    Lut t = lut_load();
    int kp = (K + 63) / 64 * 64;
    /* The strip's bf16 must fit the scratch fp8_gemm is given (K floats a row). */
    bool roomy = scratch && (size_t)NR * kp * sizeof(uint16_t) <= (size_t)FP8_SCRATCH_ROWS * K * sizeof(float);
    if (M > FEW_M && roomy) return strips(y, ldy, x, ldx, M, q, scales, K, n0, n1, (uint16_t *)scratch, &t);
    for (int m = 0; m < M; m += FEW_M)
        few_rows(y + (size_t)m * ldy, ldy, x + (size_t)m * ldx, ldx, M - m < FEW_M ? M - m : FEW_M, q,
                 scales, K, n0, n1, &t);
}

__attribute__((target(FT))) static void widen_bf16(const uint8_t *q, int K, int n0, int n1, uint16_t *dst) {
    Lut t = lut_load();
    for (int n = n0; n < n1; n++) {
        const uint8_t *row = q + (size_t)n * K;
        uint16_t *out = dst + (size_t)(n - n0) * K;
        for (int k = 0; k < K; k += 64) {
            __m512i a, b;
            widen64(&t, w_step(row + k, K - k), &a, &b);
            int left = K - k;
            __mmask32 ma = left >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << left) - 1);
            __mmask32 mb = left >= 64 ? ~(__mmask32)0 : left > 32 ? (__mmask32)((1u << (left - 32)) - 1) : 0;
            _mm512_mask_storeu_epi16(out + k, ma, a);
            _mm512_mask_storeu_epi16(out + k + 32, mb, b);
        }
    }
}
#endif /* __x86_64__ */

bool fp8_bf16_kernel(CpuIsa isa) { return cpu_isa_byte_lookup(isa); }

bool fp8_gemm_bf16(CpuIsa isa, const uint8_t *q, const float *scales, int K, const uint16_t *x, int ldx,
                   int M, float *y, int ldy, int n0, int n1, float *scratch) {
    if (!fp8_bf16_kernel(isa)) return false;
    if (M <= 0 || n1 <= n0) return true;
    if (K <= 0) {
        for (int m = 0; m < M; m++)
            for (int n = n0; n < n1; n++) y[(size_t)m * ldy + n] = 0.0f;
        return true;
    }
#if defined(__x86_64__)
    gemm_bf16(q, scales, K, x, ldx, M, y, ldy, n0, n1, scratch);
#else
    (void)q, (void)scales, (void)x, (void)ldx, (void)y, (void)ldy, (void)scratch;
#endif
    return true;
}

bool fp8_widen_bf16(CpuIsa isa, const uint8_t *q, int K, int n0, int n1, uint16_t *dst) {
    if (!fp8_bf16_kernel(isa)) return false;
#if defined(__x86_64__)
    if (n1 > n0 && K > 0) widen_bf16(q, K, n0, n1, dst);
#else
    (void)q, (void)K, (void)n0, (void)n1, (void)dst;
#endif
    return true;
}
