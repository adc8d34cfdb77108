/*
 * cpu_matmul_bf16.c - the AVX512-BF16 kernel of cpu_matmul_bf16.h and the
 * rounding of activations to bf16.
 *
 * Layout as in cpu_matmul_small.c: x rows and weight rows are contiguous
 * along K, so vector lanes run along K. vdpbf16ps adds the products of 16
 * pairs of consecutive values into 16 float32 lanes, so one step covers 32
 * values of K per register: a tile of MR activation rows x NR weight rows
 * keeps MR x NR accumulators live and reduces them once after the K loop.
 * Per step: NR weight loads (64 bytes each, straight from the checkpoint's
 * bf16, nothing widened) and MR activation loads feed MR x NR dot products.
 *
 * Loop order: activation rows in chunks that fit L2 (CHUNK_BYTES); within a
 * chunk, a task's weight rows NR at a time (a strip is read once from memory
 * or L3 and then stays in L1), every MR-row tile of the chunk over the whole
 * K; its second tile prefetches the next strip. For a single row
 * (single-stream decode) a task instead reads one weight row at a time as
 * one sequential stream.
 */
#include "cpu_matmul_bf16.h"

#include "cpu_simd.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")

/* 6 x 4 accumulators + 4 weight vectors + 1 activation vector = 29 of the 32
 * zmm registers (the same tile as the float32 GEMM, measured best there). */
#define MR 6
#define NR 4

/* Activation rows per chunk: about this many bytes of them, in L2 while a
 * task's weight rows pass (Zen 4 and Sapphire Rapids have 1-2 MiB of L2). */
#define CHUNK_BYTES (256 * 1024)

/* Software prefetch distance of the one-row streams (as the row kernels). */
#define ROW_PREFETCH_BYTES 1024

/* Software prefetch distance on the weights' first pass (as the float32 GEMM). */
#define PREFETCH_BYTES 4096

/* The prefetch offset `off` bytes into a row of an NR-row strip, moved past
 * the rest of the strip once it leaves the row (the next strip's rows would
 * otherwise start cold; see cpu_matmul_small.c). */
INLINE size_t wrap(size_t off, int K, int nr) {
    size_t row = (size_t)K * 2;
    return off < row ? off : off + (size_t)(nr - 1) * row;
}

BF16 INLINE __m512 dot(__m512 acc, __m512i a, __m512i b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

/* What a tile prefetches while it computes: the strip it reads, ahead of
 * its loads (the first tile of a strip: its loads come from memory), or the
 * next strip's rows at the same K (the strip's other tiles, which read L1:
 * without this, memory sat idle while they ran and a 16-row batch took the
 * read time plus the multiply time). */
enum { PF_NONE, PF_AHEAD, PF_NEXT_STRIP };

/* One mr x nr tile: y[i][n + j] over the whole K. */
BF16 INLINE void tile(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *w, int K,
                      int n, int mr, int nr, int pf) {
    __m512 acc[MR][NR];
    UNROLL for (int i = 0; i < mr; i++)
        UNROLL for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_ps();
    const uint16_t *wr[NR];
    UNROLL for (int j = 0; j < nr; j++) wr[j] = w + (size_t)(n + j) * K;
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        if (pf == PF_AHEAD) {
            size_t off = wrap((size_t)k * 2 + PREFETCH_BYTES, K, nr);
            UNROLL for (int j = 0; j < nr; j++) prefetch_l2((const char *)wr[j] + off);
        } else if (pf == PF_NEXT_STRIP) {
            UNROLL for (int j = 0; j < nr; j++) prefetch_l2(wr[j] + (size_t)nr * K + k);
        }
        __m512i wv[NR];
        UNROLL for (int j = 0; j < nr; j++) wv[j] = _mm512_loadu_si512(wr[j] + k);
        UNROLL for (int i = 0; i < mr; i++) {
            __m512i xv = _mm512_loadu_si512(x + (size_t)i * ldx + k);
            UNROLL for (int j = 0; j < nr; j++) acc[i][j] = dot(acc[i][j], xv, wv[j]);
        }
    }
    if (k < K) { /* masked loads: zeros past K on both sides */
        __mmask32 m = (__mmask32)((1ull << (K - k)) - 1);
        __m512i wv[NR];
        UNROLL for (int j = 0; j < nr; j++) wv[j] = _mm512_maskz_loadu_epi16(m, wr[j] + k);
        UNROLL for (int i = 0; i < mr; i++) {
            __m512i xv = _mm512_maskz_loadu_epi16(m, x + (size_t)i * ldx + k);
            UNROLL for (int j = 0; j < nr; j++) acc[i][j] = dot(acc[i][j], xv, wv[j]);
        }
    }
    /* One reduction tree for every output (row() uses it too): a row's
     * results do not depend on how many rows share the call. */
    UNROLL for (int j = nr; j < NR; j++)
        UNROLL for (int i = 0; i < mr; i++) acc[i][j] = _mm512_setzero_ps();
    UNROLL for (int i = 0; i < mr; i++) {
        float sums[NR];
        _mm_storeu_ps(sums, reduce4_512(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
        UNROLL for (int j = 0; j < nr; j++) y[(size_t)i * ldy + n + j] = sums[j];
    }
}

/* The tile starting at row m: the first reads ahead, the second asks for
 * the next strip (once is enough; more tiles would repeat it for nothing). */
static inline int strip_prefetch(int m) { return m == 0 ? PF_AHEAD : m == MR ? PF_NEXT_STRIP : PF_NONE; }

/* A strip of nr weight rows against rows [0, M) of the chunk, MR at a time. */
BF16 INLINE void strip(float *y, int ldy, const uint16_t *x, int ldx, int M, const uint16_t *w,
                       int K, int n, int nr) {
    int m = 0;
    for (; m + MR <= M; m += MR)
        tile(y + (size_t)m * ldy, ldy, x + (size_t)m * ldx, ldx, w, K, n, MR, nr, strip_prefetch(m));
    float *ym = y + (size_t)m * ldy;
    const uint16_t *xm = x + (size_t)m * ldx;
    int pf = strip_prefetch(m);
    switch (M - m) {
    case 5: tile(ym, ldy, xm, ldx, w, K, n, 5, nr, pf); break;
    case 4: tile(ym, ldy, xm, ldx, w, K, n, 4, nr, pf); break;
    case 3: tile(ym, ldy, xm, ldx, w, K, n, 3, nr, pf); break;
    case 2: tile(ym, ldy, xm, ldx, w, K, n, 2, nr, pf); break;
    case 1: tile(ym, ldy, xm, ldx, w, K, n, 1, nr, pf); break;
    default: break;
    }
}

/* One weight row n against the single activation row, read as one
 * sequential stream. Its sums are the tiles' to the bit: one accumulator
 * over 32 values per step, the same masked tail, the same reduction. (One
 * dependency chain per row; the out-of-order window overlaps the next
 * rows', and the read of the row is the limit anyway.) */
BF16 INLINE void row(float *y, const uint16_t *x, const uint16_t *w, int K, int n) {
    __m512 acc = _mm512_setzero_ps(), zero = _mm512_setzero_ps();
    const uint16_t *wr = w + (size_t)n * K;
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        if ((k & 63) == 0) {
            prefetch_l2((const char *)(wr + k) + ROW_PREFETCH_BYTES);
            prefetch_l2((const char *)(wr + k) + ROW_PREFETCH_BYTES + 64);
        }
        acc = dot(acc, _mm512_loadu_si512(x + k), _mm512_loadu_si512(wr + k));
    }
    if (k < K) {
        __mmask32 m = (__mmask32)((1ull << (K - k)) - 1);
        acc = dot(acc, _mm512_maskz_loadu_epi16(m, x + k), _mm512_maskz_loadu_epi16(m, wr + k));
    }
    y[n] = _mm_cvtss_f32(reduce4_512(acc, zero, zero, zero));
}

BF16 static void dot_avx512bf16(float *y, int ldy, const uint16_t *x, int ldx, int M,
                                const uint16_t *w, int K, int n0, int n1) {
    /* A single row (single-stream decode) reads each weight row as one
     * sequential stream (as cpu_matmul.c's row kernels): 27.4-43.0 against
     * 23.2-23.8 tokens/s for 4 rows side by side (`bench --latency
     * --input-len 16 --output-len 64`, alternating, 3 runs each, with L1
     * prefetches then). Up to 4 rows took that path too until the
     * prefetches went to L2 (cpu_simd.h): since, the tiles read as fast from
     * 2 rows and win from 3 (`bench --matmul`, 4 rows: lm_head 6.9 vs 10.0
     * ms, down 177 vs 281 us). */
    if (M == 1) {
        for (int n = n0; n < n1; n++) row(y, x, w, K, n);
        return;
    }
    int chunk = CHUNK_BYTES / (2 * (K > 0 ? K : 1)) / MR * MR;
    if (chunk < MR) chunk = MR;
    for (int m0 = 0; m0 < M; m0 += chunk) {
        int rows = M - m0 < chunk ? M - m0 : chunk;
        float *yc = y + (size_t)m0 * ldy;
        const uint16_t *xc = x + (size_t)m0 * ldx;
        int n = n0;
        for (; n + NR <= n1; n += NR) strip(yc, ldy, xc, ldx, rows, w, K, n, NR);
        if (n + 2 <= n1) {
            strip(yc, ldy, xc, ldx, rows, w, K, n, 2);
            n += 2;
        }
        if (n < n1) strip(yc, ldy, xc, ldx, rows, w, K, n, 1);
    }
}

BF16 static void round_avx512bf16(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
        _mm512_storeu_si512(dst + i, (__m512i)v);
    }
    for (; i < n; i++) dst[i] = f32_to_bf16(src[i]);
}
#endif /* __x86_64__ */

Bf16DotKernel bf16_dot_kernel(CpuIsa isa) {
#if defined(__x86_64__)
    if (isa >= CPU_ISA_AVX512_BF16) return dot_avx512bf16;
#else
    (void)isa;
#endif
    return NULL;
}

void bf16_round_rows(CpuIsa isa, uint16_t *dst, const float *src, size_t n) {
#if defined(__x86_64__)
    if (isa >= CPU_ISA_AVX512_BF16) return round_avx512bf16(dst, src, n);
#else
    (void)isa;
#endif
    for (size_t i = 0; i < n; i++) dst[i] = f32_to_bf16(src[i]);
}

void bf16_round_in_f32(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(f32_to_bf16(src[i]));
}
