/*
 * bench_matmul.c - `nanovllm bench --matmul` (see bench_matmul.h).
 *
 * Every strategy (row kernels, small-batch GEMM, OpenBLAS, AMX) on each of
 * Qwen3-0.6B's projection shapes, lm_head included, at 1..512 activation
 * rows, and the automatic choice with bf16 inputs (--dtype bfloat16). The
 * strategies take turns within each repetition (interleaved, so a noisy
 * shared host slows them alike) and the median is reported, in microseconds
 * and GFLOP/s, beside the machine's float32 FMA peak and bf16 dot-product
 * peak (vdpbf16ps, where the CPU has it) measured in the same run with
 * register-only loops on every thread. Each call reads
 * the next of several copies of the weight, 256 MiB in all, so that the
 * weights come from memory as in decode (1.2 GB of weights per step) rather
 * than from the 32 MiB L3 that would hold one small matrix.
 *
 * Environment (optional): NANOVLLM_BENCH_SHAPE=name keeps the shapes whose
 * name contains it; NANOVLLM_BENCH_M=1,16,64 sets the row counts.
 * NANOVLLM_BENCH_WEIGHT=q4_0|q5_0|iq4_nl|q4_k|q5_k|q6_k|q8_0 times that block-quantized
 * weight (cpu_matmul_quant.h) instead, beside the bf16 weight of the same
 * shape in the same run (automatic strategy for both, interleaved), with
 * the GB/s of weight bytes read: the number that sets decode speed. The
 * bf16 weight runs with bf16 inputs, as a bf16 model does (--dtype
 * bfloat16). NANOVLLM_BENCH_WEIGHT=fp8 does the same for FP8 weights
 * (cpu_matmul_fp8.h: random e4m3 bytes, NaN excepted, and random scales):
 * fp8_gemm with float32 inputs ("gemm"), decoded panels for OpenBLAS
 * ("blas") and, where the CPU has it, fp8_gemm_bf16 with bf16 inputs
 * (the automatic choice then, as a model with bf16 activations runs it).
 */
#include "bench_matmul.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cpu/cpu_matmul.h"
#include "cpu/cpu_matmul_fp8.h"
#include "model/weight_format.h"
#include "cpu/thread_pool.h"
#include "base/log.h"
#include "bench_limits.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---- the machine's FMA peak ---------------------------------------------- */

/* Vector FMAs x lanes per task of the peak loop: ~40 ms at 3.7 GHz, long
 * enough to reach steady clocks. */
#define PEAK_ITERS 200000000L

typedef struct PeakJob {
    CpuIsa isa;
    bool bf16; /* the bf16 dot-product loop (isa >= AVX512_BF16) */
    float sink[64];
} PeakJob;

/* 12 independent accumulators hide the FMA latency (4 cycles) on two pipes. */
#if defined(__x86_64__)
__attribute__((target("avx512f"))) static float peak_avx512(long iters) {
    __m512 a[12], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], m, c);
    __m512 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}

/* vdpbf16ps: 32 multiply-adds per instruction (16 lanes x 2 pairs). */
__attribute__((target("avx512f,avx512bf16"))) static float peak_bf16(long iters) {
    __m512 a[12];
    __m512bh m = (__m512bh)_mm512_set1_epi16(0x3f80), c = (__m512bh)_mm512_set1_epi16(0x3380);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 12; i++) a[i] = _mm512_dpbf16_ps(a[i], m, c);
    __m512 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float peak_avx2(long iters) {
    __m256 a[12], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
    __m256 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}
#endif

static int peak_lanes(CpuIsa isa) {
    return isa >= CPU_ISA_AVX512 ? 16 : isa == CPU_ISA_AVX2 ? 8 : 1;
}

static void peak_task(void *ctx, int task, int thread) {
    (void)task;
    PeakJob *j = ctx;
    float r = 0;
#if defined(__x86_64__)
    if (j->bf16) r = peak_bf16(PEAK_ITERS / 32);
    else if (j->isa >= CPU_ISA_AVX512) r = peak_avx512(PEAK_ITERS / 16);
    else if (j->isa == CPU_ISA_AVX2) r = peak_avx2(PEAK_ITERS / 8);
#endif
    if (j->isa < CPU_ISA_AVX2) {
        float a[12];
        for (int i = 0; i < 12; i++) a[i] = (float)i;
        for (long it = 0; it < PEAK_ITERS / 16; it++)
            for (int i = 0; i < 12; i++) a[i] = a[i] * 0.999999f + 1e-7f;
        for (int i = 0; i < 12; i++) r += a[i];
    }
    j->sink[thread % 64] += r;
}

/* float32 FLOP/s of all threads doing register-only FMAs (or, with bf16,
 * bf16 dot products) at once (best of 3). */
static double fma_peak(ThreadPool *pool, CpuIsa isa, bool bf16) {
    PeakJob job = {isa, bf16, {0}};
    int threads = thread_pool_size(pool), lanes = bf16 ? 32 : peak_lanes(isa);
    long iters = isa >= CPU_ISA_AVX2 ? PEAK_ITERS / lanes : PEAK_ITERS / 16;
    double best = bench_fastest_run(pool, threads, peak_task, &job, 3);
    return (double)threads * (double)iters * 12.0 * lanes * 2.0 / best;
}

/* ---- the table ------------------------------------------------------------ */

typedef struct Shape {
    const char *name;
    int N, K;
} Shape;

/* Qwen3-0.6B: hidden 1024, intermediate 3072, 16 query and 8 KV heads of
 * 128, vocabulary 151936 (the tied lm_head: ~26% of a decode step's FLOPs). */
static const Shape SHAPES[] = {
    {"q_proj", 2048, 1024},   {"k/v_proj", 1024, 1024}, {"o_proj", 1024, 2048},
    {"gate/up", 3072, 1024},  {"down", 1024, 3072},     {"lm_head", 151936, 1024},
};

/* The last column: the automatic choice with bf16 inputs. */
enum { NSTRAT = 5, BF16_COL = 4, MAX_REPS = 15 };
static const MatmulStrategy STRATEGIES[NSTRAT] = {MATMUL_ROWS, MATMUL_GEMM, MATMUL_BLAS, MATMUL_AMX,
                                                  MATMUL_AUTO};

/* A cell is skipped once its predicted time (the last one scaled by rows)
 * passes this: the row kernels at 512 rows of the lm_head would take seconds. */
#define MAX_CELL_SECONDS 0.5

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int parse_rows(int *rows, int max) {
    const char *env = getenv("NANOVLLM_BENCH_M");
    static const int defaults[] = {1, 2, 4, 8, 16, 32, 64, 128, 512};
    int n = 0;
    if (env) {
        for (char *end; *env && n < max; env = *end ? end + 1 : end) {
            long v = strtol(env, &end, 10);
            if (end == env) break;
            if (v >= 1 && v <= 512) rows[n++] = (int)v;
        }
        if (n > 0) return n;
    }
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) rows[n++] = defaults[i];
    return n;
}

/* Weights in transparent huge pages, as the runner loads them (cpu_weights.c). */
static void *alloc_huge(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

/* Bytes of weight copies the calls rotate over (more than any L3). */
#define ARENA_BYTES ((size_t)256 << 20)

static void bench_shape(CpuMatmul *mm, const Shape *s, const int *rows, int nrows, float *x,
                        float *y, uint16_t *arena, size_t arena_elems, double peak,
                        double bf16_peak) {
    CpuIsa isa = cpu_isa_active();
    size_t elems = (size_t)s->N * s->K, copies = arena_elems / elems, call = 0;
    Weight wt = {.data = arena, .type = WEIGHT_BF16, .rows = s->N, .cols = s->K};
    bool have[NSTRAT] = {true, true, true, isa >= CPU_ISA_AMX, true};
    double last[NSTRAT] = {0};
    int last_m = 1;
    printf("\n%s: bf16 weight %dx%d. Median us (GFLOP/s) per matmul, strategies interleaved\n",
           s->name, s->N, s->K);
    printf("%5s %18s %18s %18s %18s %18s  %-5s %-9s %s\n", "rows", "rows", "gemm", "blas", "amx",
           "bf16 inputs", "auto", "best/peak", "bf16/peak");
    for (int r = 0; r < nrows; r++) {
        int M = rows[r];
        double flop = 2.0 * M * s->N * s->K, t[NSTRAT][MAX_REPS], med[NSTRAT] = {0};
        bool on[NSTRAT];
        for (int k = 0; k < NSTRAT; k++)
            on[k] = have[k] && !(last[k] > 0 && last[k] * M / last_m > MAX_CELL_SECONDS);
        int reps = 0;
        double spent = 0;
        /* At least 3 repetitions, more while they are cheap. */
        for (; reps < MAX_REPS && (reps < 3 || spent < 1.0); reps++) {
            for (int k = 0; k < NSTRAT; k++) {
                if (!on[k]) continue;
                wt.data = arena + (call++ % copies) * elems;
                cpu_matmul_set_bf16_inputs(mm, k == BF16_COL);
                double t0 = now_seconds();
                cpu_matmul_with(mm, y, x, M, &wt, STRATEGIES[k], isa);
                t[k][reps] = now_seconds() - t0;
                spent += t[k][reps];
            }
        }
        double best = 1e30;
        printf("%5d", M);
        for (int k = 0; k < NSTRAT; k++) {
            if (!on[k]) {
                printf(" %18s", "-");
                last[k] = have[k] ? 1e30 : 0;
                continue;
            }
            qsort(t[k], (size_t)reps, sizeof(double), cmp_double);
            med[k] = t[k][reps / 2];
            last[k] = med[k];
            if (med[k] < best && k != BF16_COL) best = med[k];
            char cell[40];
            snprintf(cell, sizeof cell, "%.0f (%.0f)", med[k] * 1e6, flop / med[k] * 1e-9);
            printf(" %18s", cell);
        }
        last_m = M;
        char best_share[16], bf16_share[16] = "-";
        snprintf(best_share, sizeof best_share, "%.0f%%", 100.0 * flop / best / peak);
        if (on[BF16_COL])
            snprintf(bf16_share, sizeof bf16_share, "%.0f%%", 100.0 * flop / med[BF16_COL] / bf16_peak);
        printf("  %-5s %-9s %s\n", matmul_strategy_name(cpu_matmul_choose(M, &wt, isa)), best_share,
               bf16_share);
        fflush(stdout);
    }
}

/* ---- quantized weights ------------------------------------------------------ */

/* Distinct random rows quantized per shape; copies of them fill the arena
 * (the reference encoder is too slow to quantize 256 MiB per shape). */
#define QUANT_DISTINCT_ROWS 1024

/* Fills `bytes` of q with quantized N x K rows (type t), repeating; FP8:
 * random bytes (no NaN), which fp8_fill_scales' scales make weights of
 * about the bf16 weights' size. */
static int fill_quant(uint8_t *q, size_t bytes, WeightType t, int K) {
    size_t rb = weight_row_bytes(t, K), rows = bytes / rb;
    if (t == WEIGHT_F8_E4M3) {
        uint64_t r = 0x9e3779b97f4a7c15ull;
        for (size_t i = 0; i < rows * rb; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            q[i] = fp8_e4m3_is_nan((uint8_t)(r >> 24)) ? 0 : (uint8_t)(r >> 24);
        }
        return 0;
    }
    float *row = malloc(sizeof(float) * (size_t)K);
    if (!row) return -1;
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (size_t n = 0; n < rows && n < QUANT_DISTINCT_ROWS; n++) {
        for (int k = 0; k < K; k++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            row[k] = (float)((double)(r >> 11) / 9007199254740992.0 - 0.5) * 0.1f;
        }
        weight_quantize_row(t, row, q + n * rb, K);
    }
    for (size_t n = QUANT_DISTINCT_ROWS; n < rows; n++)
        memcpy(q + n * rb, q + (n % QUANT_DISTINCT_ROWS) * rb, rb);
    free(row);
    return 0;
}

/* Random scales around 1 / 448 / 10 for an FP8 matrix of this shape
 * (NULL when out of memory). */
static float *fp8_fill_scales(const Shape *s) {
    size_t n = fp8_scale_count(s->N, s->K);
    float *sc = malloc(sizeof(float) * n);
    for (size_t i = 0; sc && i < n; i++) sc[i] = (1.0f + (float)(i % 7) / 7.0f) / 4480.0f;
    return sc;
}

/* Quantized weight, multiplied in integers (MATMUL_QUANT) and decoded to
 * float32 panels for the small-batch GEMM (MATMUL_GEMM) and for OpenBLAS
 * (MATMUL_BLAS), vs the bf16 weight of the same shape at its automatic
 * strategy. FP8: fp8_gemm (MATMUL_GEMM), then the same blas and bf16. */
enum { QCOLS = 4, QBF16 = 3 };

static void bench_quant_shape(CpuMatmul *mm, const Shape *s, WeightType t, const int *rows,
                              int nrows, float *x, float *y, uint16_t *arena, size_t arena_elems,
                              uint8_t *qarena, size_t qarena_bytes) {
    CpuIsa isa = cpu_isa_active();
    size_t elems = (size_t)s->N * s->K, copies = arena_elems / elems;
    size_t qbytes = weight_row_bytes(t, s->K) * (size_t)s->N, qcopies = qarena_bytes / qbytes;
    if (qcopies == 0 || copies == 0 || fill_quant(qarena, qcopies * qbytes, t, s->K) != 0) {
        printf("\n%s: skipped (arena too small or out of memory)\n", s->name);
        return;
    }
    bool fp8 = t == WEIGHT_F8_E4M3, fp8_bf16 = fp8 && fp8_bf16_kernel(isa);
    float *scales = fp8 ? fp8_fill_scales(s) : NULL;
    if (fp8 && !scales) {
        printf("\n%s: skipped (out of memory)\n", s->name);
        return;
    }
    Weight wb = {.data = arena, .type = WEIGHT_BF16, .rows = s->N, .cols = s->K};
    Weight wq = {.data = qarena, .type = t, .rows = s->N, .cols = s->K, .scales = scales};
    MatmulStrategy strat[QCOLS] = {fp8 ? MATMUL_AUTO : MATMUL_QUANT, MATMUL_GEMM, MATMUL_BLAS, MATMUL_AUTO};
    double last[QCOLS] = {0};
    int last_m = 1;
    printf("\n%s: %s weight %dx%d (%.2f MB) vs bf16 (%.2f MB). Median us, GFLOP/s, GB/s of "
           "weights read; interleaved\n",
           s->name, weight_type_name(t), s->N, s->K, (double)qbytes * 1e-6, (double)elems * 2e-6);
    printf("%5s %27s %27s %27s %27s  %-9s %s\n", "rows",
           fp8 ? (fp8_bf16 ? "fp8_gemm_bf16 (bf16 inputs)" : "-") : "integer (quant)",
           fp8 ? "fp8_gemm (gemm)" : "decode + gemm", "decode + sgemm (blas)", "bf16 (auto)",
           "bf16/auto", "auto");
    for (int r = 0; r < nrows; r++) {
        int M = rows[r];
        double flop = 2.0 * M * s->N * s->K, tm[QCOLS][MAX_REPS], med[QCOLS] = {0};
        bool on[QCOLS];
        for (int k = 0; k < QCOLS; k++)
            on[k] = !(fp8 && !fp8_bf16 && k == 0) && !(last[k] > 0 && last[k] * M / last_m > MAX_CELL_SECONDS);
        int reps = 0;
        double spent = 0;
        for (; reps < MAX_REPS && (reps < 3 || spent < 1.0); reps++) {
            for (int k = 0; k < QCOLS; k++) {
                if (!on[k]) continue;
                bool quant = k != QBF16;
                if (quant) wq.data = qarena + (reps % qcopies) * qbytes;
                else wb.data = arena + (reps % copies) * elems;
                cpu_matmul_set_bf16_inputs(mm, k == QBF16 || (fp8 && k == 0));
                double t0 = now_seconds();
                cpu_matmul_with(mm, y, x, M, quant ? &wq : &wb, strat[k], isa);
                tm[k][reps] = now_seconds() - t0;
                spent += tm[k][reps];
            }
        }
        printf("%5d", M);
        for (int k = 0; k < QCOLS; k++) {
            if (!on[k]) {
                printf(" %27s", "-");
                last[k] = 1e30;
                continue;
            }
            qsort(tm[k], (size_t)reps, sizeof(double), cmp_double);
            med[k] = last[k] = tm[k][reps / 2];
            double bytes = k != QBF16 ? (double)qbytes : (double)elems * 2;
            char cell[48];
            snprintf(cell, sizeof cell, "%.0f us %.0f GF %.1f GB/s", med[k] * 1e6, flop / med[k] * 1e-9,
                     bytes / med[k] * 1e-9);
            printf(" %27s", cell);
        }
        last_m = M;
        MatmulStrategy pick = cpu_matmul_choose(M, &wq, isa);
        int col = fp8_bf16 ? 0 : pick == MATMUL_BLAS ? 2 : pick == MATMUL_GEMM ? 1 : 0;
        char ratio[16] = "-";
        if (on[QBF16] && on[col] && med[col] > 0)
            snprintf(ratio, sizeof ratio, "%.2fx", med[QBF16] / med[col]);
        printf("  %-9s %s\n", ratio, fp8_bf16 ? "bf16 inputs" : matmul_strategy_name(pick));
        fflush(stdout);
    }
    free(scales);
}

static bool parse_weight(const char *name, WeightType *t) {
    static const WeightType types[] = {WEIGHT_Q8_0, WEIGHT_Q4_0, WEIGHT_Q5_0, WEIGHT_IQ4_NL, WEIGHT_Q4_K,
                                       WEIGHT_Q5_K, WEIGHT_Q6_K, WEIGHT_F8_E4M3};
    if (strcmp(name, "fp8") == 0) {
        *t = WEIGHT_F8_E4M3;
        return true;
    }
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(name, weight_type_name(types[i])) == 0) {
            *t = types[i];
            return true;
        }
    return false;
}

int bench_matmul(int num_threads, Error *err) {
    enum { MAX_M = 512, MAX_K = 3072 };
    size_t max_w = ARENA_BYTES / sizeof(uint16_t);
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
        size_t n = (size_t)SHAPES[i].N * SHAPES[i].K;
        if (n > max_w) max_w = n;
    }
    ThreadPool *pool = thread_pool_create(num_threads, err);
    CpuMatmul *mm = pool ? cpu_matmul_create(pool, MAX_M, MAX_K, err) : NULL;
    float *x = malloc(sizeof(float) * MAX_M * MAX_K);
    float *y = alloc_huge(sizeof(float) * MAX_M * 151936);
    uint16_t *w = alloc_huge(sizeof(uint16_t) * max_w);
    const char *weight_env = getenv("NANOVLLM_BENCH_WEIGHT");
    WeightType qtype = WEIGHT_BF16;
    if (weight_env && !parse_weight(weight_env, &qtype)) {
        free(x);
        cpu_matmul_destroy(mm);
        thread_pool_destroy(pool);
        if (y) munmap(y, sizeof(float) * MAX_M * 151936);
        if (w) munmap(w, sizeof(uint16_t) * max_w);
        return error_set(err, "NANOVLLM_BENCH_WEIGHT: expected q4_0, q5_0, iq4_nl, q4_k, q5_k, q6_k, q8_0 or fp8");
    }
    /* Quantized weights need at most 34/32 bytes per value (Q8_0). */
    size_t qarena_bytes = max_w * 2;
    uint8_t *qarena = weight_env ? alloc_huge(qarena_bytes) : NULL;
    int rc = (pool && mm && x && y && w && (!weight_env || qarena))
                 ? 0
                 : (err->msg[0] ? -1 : error_set(err, "out of memory"));
    if (rc == 0 && weight_env) {
        for (size_t i = 0; i < (size_t)MAX_M * MAX_K; i++) x[i] = (float)(i % 97) / 97.0f - 0.5f;
        for (size_t i = 0; i < max_w; i++) w[i] = (uint16_t)(0x3c00 + (i * 31) % 512);
        printf("%s kernels, %d threads; %s weights vs bf16\n", cpu_isa_name(cpu_isa_active()),
               thread_pool_size(pool), weight_type_name(qtype));
        int rows[16], nrows = parse_rows(rows, 16);
        const char *only = getenv("NANOVLLM_BENCH_SHAPE");
        for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++)
            if (!only || strstr(SHAPES[i].name, only))
                bench_quant_shape(mm, &SHAPES[i], qtype, rows, nrows, x, y, w, max_w, qarena,
                                  qarena_bytes);
    } else if (rc == 0) {
        for (size_t i = 0; i < (size_t)MAX_M * MAX_K; i++) x[i] = (float)(i % 97) / 97.0f;
        for (size_t i = 0; i < max_w; i++) w[i] = (uint16_t)(0x3c00 + (i * 31) % 512);
        CpuIsa isa = cpu_isa_active();
        double peak = fma_peak(pool, isa, false);
        double bf16_peak = isa >= CPU_ISA_AVX512_BF16 ? fma_peak(pool, isa, true) : peak;
        printf("%s kernels, %d threads; register-only loops on all threads: float32 FMA peak "
               "%.0f GFLOP/s, bf16 dot-product peak %.0f GFLOP/s%s\n",
               cpu_isa_name(isa), thread_pool_size(pool), peak * 1e-9, bf16_peak * 1e-9,
               isa >= CPU_ISA_AVX512_BF16 ? "" : " (no AVX512-BF16: float32 FMAs on rounded inputs)");
        int rows[16], nrows = parse_rows(rows, 16);
        const char *only = getenv("NANOVLLM_BENCH_SHAPE");
        for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++)
            if (!only || strstr(SHAPES[i].name, only))
                bench_shape(mm, &SHAPES[i], rows, nrows, x, y, w, max_w, peak, bf16_peak);
    }
    free(x);
    if (qarena) munmap(qarena, qarena_bytes);
    if (y) munmap(y, sizeof(float) * MAX_M * 151936);
    if (w) munmap(w, sizeof(uint16_t) * max_w);
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
    return rc;
}
