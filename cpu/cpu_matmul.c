/*
 * cpu_matmul.c - the strategies of cpu_matmul.h: which kernel runs a
 * product, and the parallel drivers that split it into tasks.
 *
 * Row kernels (small M at the scalar level, and the "rows" strategy when
 * forced; with AVX2 and up every decode batch, 1 row included, takes the
 * small-batch GEMM, see GEMM_MIN_ROWS): cpu_matmul_rows.c.
 *
 * Small-batch GEMM (a decode batch): cpu_matmul_small.c; here it is only
 * another pair of kernels with the row kernels' signature and task split.
 *
 * BLAS (large M): each task widens PANEL_ROWS weight rows into its own f32
 * panel (cache-sized) and calls cblas_sgemm on it. OpenBLAS is told to use
 * one thread, because the parallelism is ours.
 *
 * FP8 weights (cpu_matmul_fp8.c) take the same task split: fp8_gemm with
 * the thread's panel as its scratch, or decoded panels for BLAS; under bf16
 * inputs, fp8_gemm_bf16 where the CPU has it (as the bf16 dot kernel); a list is
 * split by weight class (block-quantized, FP8, plain) and each class runs
 * as one parallel loop of its own.
 */
#include "cpu_matmul.h"

#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_matmul_amx.h"
#include "cpu_matmul_bf16.h"
#include "cpu_matmul_fp8.h"
#include "cpu_matmul_quant.h"
#include "cpu_matmul_rows.h"
#include "cpu_matmul_small.h"

/* Activation rows above which the AMX tiles (where present) take over from
 * our row kernels, and above which OpenBLAS does (elsewhere). Measured with
 * `nanovllm bench --matmul`; see cpu/PERFORMANCE.md. */
#define AMX_MIN_ROWS 3
#define SMALL_M_MAX 8

/* Activation rows [GEMM_MIN_ROWS, GEMM_MAX_ROWS_*] go to the small-batch
 * GEMM where this SIMD level has one (AVX2 and up). Since its weight
 * prefetches go to L2 (cpu_simd.h), it reads weights at the memory rate
 * from 1 row on: at 1 row it ties the row kernels (AVX-512,
 * `NANOVLLM_BENCH_M=1 bench --matmul`, 8 runs: -9%..+4% per shape, lm_head
 * 8.7-10.1 vs 9.3-10.7 ms), at 2 it tied or beat them on every
 * Qwen3-0.6B shape at AVX2 and AVX-512 (down_proj 181 vs 266 us AVX2), from
 * 3 rows it won everywhere (lm_head at 4 rows: 8.6 vs 14.1 ms AVX2). Taking
 * single rows too makes a row's result independent of the batch it is in
 * (the GEMM sums each output in one order whatever the row count): a
 * greedy request gives the same text alone as beside other requests. The
 * row kernels keep the scalar level and forced strategies. Above
 * GEMM_MAX_ROWS_*, OpenBLAS wins: with AVX-512 the GEMM still won at 512
 * rows (94 vs 84 GFLOP/s per thread at 512 x 1024 x 1024) but not at 2048
 * (the activations no longer fit the caches it re-reads them from); with
 * AVX2 it won at 128 rows (88 vs 75) and lost at 512 (81 vs 87).
 * SMALL_M_MAX is then the row kernels' limit at the scalar level only.
 * Measured on Zen 4 with `nanovllm bench --matmul` (NANOVLLM_BENCH_M=1,2,3,4
 * for the small counts); see cpu/PERFORMANCE.md. */
#define GEMM_MIN_ROWS 1
#define GEMM_MAX_ROWS_AVX512 512
#define GEMM_MAX_ROWS_AVX2 128

/* Weight rows per task of the small-batch GEMM. */
#define GEMM_ROWS_PER_TASK 256

/* Activation rows converted to bf16 at a time under bf16 inputs (the
 * scratch holds this many rows of the widest input, as float32). */
#define BF16_CHUNK_ROWS 512

/* Weights sharing one input at most per pass (q/k/v is 3). */
#define MAX_SHARED 8

/* Weight rows per task of the bf16 dot kernel: as the float32 GEMM. */
#define BF16_ROWS_PER_TASK 256

/* Weight rows per AMX task (a multiple of 32, the kernel's block). */
#define AMX_TASK_ROWS 128

/* Weight rows per task of the quantized kernels: as the float32 GEMM (at
 * 1 row, k/v_proj's 1024 rows make 4 tasks for 2 threads). */
#define QUANT_ROWS_PER_TASK 256

/* Quantized weights run in integers at every batch size (MATMUL_QUANT),
 * prefill included: Q8_0's packed kernel and the K types' tiles beat
 * decoding to float32 for OpenBLAS. 2 threads of an EPYC exposing AVX2
 * only, GFLOP/s at 64 / 512 rows (NANOVLLM_BENCH_WEIGHT; Qwen3-0.6B's
 * gate/up for q8_0, o_proj for q4_k): q8_0 integer 175 / 182 vs decode +
 * sgemm 133 / 154; q4_k 160 / 209 vs 106 / 156. The float paths stay for forced strategies. */

/* FP8 weights (cpu_matmul_fp8.h) up to FP8_GEMM_MAX_ROWS activation rows
 * run on fp8_gemm (strategy "gemm"), above on OpenBLAS with 128-row panels
 * decoded to float32 ("blas"); at the scalar level from SMALL_M_MAX rows.
 * One thread of an EPYC exposing AVX2 only (Zen 3), CPU time, GFLOP/s of
 * fp8_gemm / decode + sgemm at 32, 48, 64, 96 rows: gate/up (3072 x 1024)
 * 50 / 49, 50 / 58, 54 / 62, 61 / 70; down (1024 x 3072) 61 / 56, 63 / 63,
 * 62 / 67, 58 / 71; q_proj 60 / 57, 62 / 64, 62 / 66, 62 / 71; o_proj
 * 64 / 59, 66 / 65, 66 / 67, 65 / 72: a tie at 48. fp8_gemm's tiles run
 * at the float32 GEMM's rate, less the widening of every weight once per
 * call, which sgemm's panels pay too but amortize over more rows. At
 * AVX-512 (Zen 4, 2 threads, `bench --matmul`, us) fp8_gemm still wins at
 * 64 rows (q_proj 1933 vs 2309, down 2326 vs 3528) and loses at 512
 * (14558 vs 12504, 20892 vs 21276): 48 stays. Under bf16 inputs that CPU
 * takes fp8_gemm_bf16 at every row count instead (run_bf16). */
#define FP8_GEMM_MAX_ROWS 48

/* Rows decoded at a time into a thread's panel by the forced "gemm" path
 * for quantized weights (in L2 for the small-batch GEMM's f32 kernel). */
#define QUANT_DECODE_ROWS 32

/* Weight rows per widened panel: 128 rows x K=3072 x 4 bytes = 1.5 MiB, in L2. */
#define PANEL_ROWS 128

/* Weight rows per task of the small-M kernels: long sequential streams for
 * the prefetchers, yet enough tasks to balance threads on the smallest
 * matrices (k/v_proj of Qwen3-0.6B: 1024 rows). 64 and 1024 both measured
 * slower on decode. */
#define GEMV_ROWS_PER_TASK 256

typedef struct MatmulTask MatmulTask;

struct CpuMatmul {
    ThreadPool *pool;
    int max_rows, max_cols;
    float **panels;   /* BLAS: one PANEL_ROWS x max_cols buffer per thread */
    uint16_t *packed; /* AMX: the packed activations of the current input */
    bool bf16_inputs; /* round activations to bf16 (cpu_matmul_set_bf16_inputs) */
    float *inputs;    /* bf16 inputs: BF16_CHUNK_ROWS x max_cols, as bf16 or rounded f32 */
    int input_rows;   /* rows of `inputs` */
    MatmulTask *tasks;
    int max_tasks;
    /* Quantized weights: the current input quantized once per call, as Q8_0
     * and as Q8_K blocks (a q/k/v group may mix Q8_0 and K types), room for
     * max_rows rows of max_cols (rounded up to a block). */
    void *xq[2];
    int xq_cols; /* max_cols rounded up to 256 */
};

/* ---- parallel drivers ---------------------------------------------------- */

/* One parallel loop computes several products that share the input x: task
 * i covers rows [n0, n1) of weight ws[wi]. */
struct MatmulTask {
    int wi, n0, n1; /* weight ws[wi], its rows [n0, n1) */
    int m0, m1;     /* AMX: activation rows [m0, m1) (others: all; grouped: m0 = GroupedKernel) */
};

typedef struct MatmulJob {
    CpuMatmul *mm;
    const float *x;
    int M;
    const Weight *const *ws;
    float *const *ys;
    MatmulStrategy strategy;
    CpuIsa isa;
    RowsKernel kernels[2]; /* by weight type */
    const MatmulTask *tasks;
    const uint16_t *xb; /* non-NULL: x as bf16, for `dot` (every weight bf16) */
    Bf16DotKernel dot;
} MatmulJob;

/* The kernel of a row-split strategy (rows or gemm) for this weight type:
 * gemm falls back to the row kernels where it has no kernel (scalar). */
static RowsKernel split_kernel(MatmulStrategy s, CpuIsa isa, WeightType type) {
    RowsKernel k = s == MATMUL_GEMM ? small_gemm_kernel(isa, type) : NULL;
    return k ? k : rows_kernel(isa, type);
}

static void rows_task(const MatmulJob *j, const MatmulTask *t) {
    const Weight *w = j->ws[t->wi];
    j->kernels[w->type](j->ys[t->wi], w->rows, j->x, w->cols, j->M, w->data, w->cols, t->n0, t->n1);
}

static void blas_task(const MatmulJob *j, const MatmulTask *t, int thread) {
    const Weight *w = j->ws[t->wi];
    int N = w->rows, K = w->cols, rows = t->n1 - t->n0;
    const float *panel;
    if (w->type == WEIGHT_BF16) {
        float *buf = j->mm->panels[thread];
        widen_bf16_rows(j->isa, buf, (const uint16_t *)w->data + (size_t)t->n0 * K, (size_t)rows * K);
        panel = buf;
    } else if (weight_type_quantized(w->type)) {
        float *buf = j->mm->panels[thread];
        quant_decode_rows(j->isa, w->type, w->data, K, t->n0, t->n1, buf);
        panel = buf;
    } else if (w->type == WEIGHT_F8_E4M3) {
        float *buf = j->mm->panels[thread];
        fp8_decode_rows(j->isa, w->data, w->scales, K, t->n0, t->n1, buf);
        panel = buf;
    } else {
        panel = (const float *)w->data + (size_t)t->n0 * K;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->M, rows, K, 1.0f, j->x, K, panel, K,
                0.0f, j->ys[t->wi] + t->n0, N);
}

/* Rows [n0, n1) of a quantized weight: against the job's quantized input
 * (MATMUL_QUANT), or decoded to float32 QUANT_DECODE_ROWS at a time into
 * the thread's panel and multiplied by the float input with the
 * small-batch GEMM's f32 kernel (MATMUL_GEMM), or by OpenBLAS (blas_task). */
static void quant_task(const MatmulJob *j, const MatmulTask *t, int thread) {
    const Weight *w = j->ws[t->wi];
    int K = w->cols;
    if (j->strategy == MATMUL_BLAS) return blas_task(j, t, thread);
    if (j->strategy == MATMUL_GEMM) {
        SmallGemmKernel gemm = small_gemm_kernel(j->isa, WEIGHT_F32);
        float *panel = j->mm->panels[thread];
        for (int n0 = t->n0; n0 < t->n1; n0 += QUANT_DECODE_ROWS) {
            int n1 = t->n1 - n0 < QUANT_DECODE_ROWS ? t->n1 : n0 + QUANT_DECODE_ROWS;
            quant_decode_rows(j->isa, w->type, w->data, K, n0, n1, panel);
            gemm(j->ys[t->wi] + n0, w->rows, j->x, K, j->M, panel, K, 0, n1 - n0);
        }
        return;
    }
    quant_gemm(j->isa, w->type, w->data, K, j->mm->xq[quant_act_type(w->type)], j->M, j->ys[t->wi],
               w->rows, t->n0, t->n1);
}

/* Rows [n0, n1) of an FP8 weight: decoded panels for OpenBLAS (blas), else
 * fp8_gemm, with the thread's panel as its scratch. */
static void fp8_task(const MatmulJob *j, const MatmulTask *t, int thread) {
    const Weight *w = j->ws[t->wi];
    if (j->strategy == MATMUL_BLAS) return blas_task(j, t, thread);
    fp8_gemm(j->isa, w->data, w->scales, w->cols, j->x, w->cols, j->M, j->ys[t->wi], w->rows, t->n0,
             t->n1, j->mm->panels[thread]);
}

static void matmul_task(void *ctx, int task, int thread) {
    const MatmulJob *j = ctx;
    const MatmulTask *t = &j->tasks[task];
    if (j->xb) {
        const Weight *w = j->ws[t->wi];
        if (w->type == WEIGHT_F8_E4M3)
            fp8_gemm_bf16(j->isa, w->data, w->scales, w->cols, j->xb, w->cols, j->M, j->ys[t->wi], w->rows,
                          t->n0, t->n1, j->mm->panels[thread]);
        else
            j->dot(j->ys[t->wi], w->rows, j->xb, w->cols, j->M, w->data, w->cols, t->n0, t->n1);
        return;
    }
    if (weight_type_quantized(j->ws[t->wi]->type)) return quant_task(j, t, thread);
    if (j->ws[t->wi]->type == WEIGHT_F8_E4M3) return fp8_task(j, t, thread);
    switch (j->strategy) {
    case MATMUL_AMX:
        amx_matmul(j->ys[t->wi], j->ws[t->wi]->rows, j->mm->packed, j->M, t->m0, t->m1,
                   j->ws[t->wi], t->n0, t->n1);
        break;
    case MATMUL_BLAS: blas_task(j, t, thread); break;
    default: rows_task(j, t); break;
    }
}

static void pack_task(void *ctx, int group, int thread) {
    (void)thread;
    const MatmulJob *j = ctx;
    amx_pack_group(j->mm->packed, j->x, j->M, j->ws[0]->cols, group);
}

/* Weight rows per task of each strategy. */
static int rows_per_task(MatmulStrategy s) {
    return s == MATMUL_AMX      ? AMX_TASK_ROWS
           : s == MATMUL_QUANT ? QUANT_ROWS_PER_TASK
           : s == MATMUL_BLAS ? PANEL_ROWS
           : s == MATMUL_GEMM ? GEMM_ROWS_PER_TASK
                              : GEMV_ROWS_PER_TASK;
}

/* AMX tasks also split the tokens, so that the packed activations a task
 * sweeps once per 32 weight rows (tokens x K x 3 terms x 2 bytes) stay in
 * L2: about 768 KiB, a multiple of 32 tokens. */
static int amx_tokens_per_task(int K) {
    int tokens = (768 * 1024) / (K * 6) / 32 * 32;
    return tokens < 32 ? 32 : tokens;
}

MatmulStrategy cpu_matmul_choose(int M, const Weight *w, CpuIsa isa) {
    if (weight_type_quantized(w->type)) return MATMUL_QUANT;
    if (w->type == WEIGHT_F8_E4M3)
        return M <= (fp8_simd(isa) ? FP8_GEMM_MAX_ROWS : SMALL_M_MAX) ? MATMUL_GEMM : MATMUL_BLAS;
    if (M > AMX_MIN_ROWS && isa >= CPU_ISA_AMX && amx_supports(w)) return MATMUL_AMX;
    if (small_gemm_kernel(isa, w->type)) {
        if (M < GEMM_MIN_ROWS) return MATMUL_ROWS;
        int max = isa >= CPU_ISA_AVX512 ? GEMM_MAX_ROWS_AVX512 : GEMM_MAX_ROWS_AVX2;
        return M <= max ? MATMUL_GEMM : MATMUL_BLAS;
    }
    if (M > SMALL_M_MAX) return MATMUL_BLAS;
    return MATMUL_ROWS;
}

/* Splits every weight of the job into tasks of `per` rows (and, for AMX,
 * `tokens` activation rows) and runs them on the pool. */
static void run_tasks(CpuMatmul *mm, MatmulJob *job, int count, int per, int tokens) {
    int n = 0, M = job->M;
    for (int i = 0; i < count; i++) {
        const Weight *w = job->ws[i];
        for (int n0 = 0; n0 < w->rows; n0 += per) {
            for (int m0 = 0; m0 < M; m0 += tokens) {
                if (n == mm->max_tasks) { /* more than planned: run what we have */
                    thread_pool_run(mm->pool, n, matmul_task, job);
                    n = 0;
                }
                mm->tasks[n++] = (MatmulTask){i, n0, n0 + per < w->rows ? n0 + per : w->rows, m0,
                                              m0 + tokens < M ? m0 + tokens : M};
            }
        }
    }
    thread_pool_run(mm->pool, n, matmul_task, job);
}

/* FP8 weights sharing the input x, float32 (or already rounded to bf16):
 * the automatic choice, or blas if forced, else fp8_gemm (which is FP8's
 * row kernel and small-batch GEMM both: forced rows, gemm, amx and quant
 * all run it). */
static void run_fp8(CpuMatmul *mm, const float *x, int M, const Weight *const *ws,
                    float *const *ys, int count, MatmulStrategy strategy, CpuIsa isa) {
    if (strategy == MATMUL_AUTO) strategy = cpu_matmul_choose(M, ws[0], isa);
    if (strategy != MATMUL_BLAS) strategy = MATMUL_GEMM;
    MatmulJob job = {mm, x, M, ws, ys, strategy, isa, {NULL, NULL}, mm->tasks, NULL, NULL};
    run_tasks(mm, &job, count, rows_per_task(strategy), M);
}

/* float32 inputs as given; the list holds either FP8 weights or bf16/f32 ones. */
static void run_f32(CpuMatmul *mm, const float *x, int M, const Weight *const *ws,
                    float *const *ys, int count, MatmulStrategy strategy, CpuIsa isa) {
    if (ws[0]->type == WEIGHT_F8_E4M3) return run_fp8(mm, x, M, ws, ys, count, strategy, isa);
    if (strategy == MATMUL_AUTO) strategy = cpu_matmul_choose(M, ws[0], isa);
    for (int i = 0; i < count; i++) {
        bool amx_ok = isa >= CPU_ISA_AMX && amx_supports(ws[i]) && ws[i]->cols == ws[0]->cols &&
                      M <= mm->max_rows;
        if (strategy == MATMUL_AMX && !amx_ok) strategy = MATMUL_ROWS;
    }
    MatmulJob job = {mm, x, M, ws, ys, strategy, isa,
                     {split_kernel(strategy, isa, WEIGHT_BF16), split_kernel(strategy, isa, WEIGHT_F32)},
                     mm->tasks, NULL, NULL};
    if (strategy == MATMUL_AMX)
        thread_pool_run(mm->pool, (M + AMX_GROUP - 1) / AMX_GROUP, pack_task, &job);
    run_tasks(mm, &job, count, rows_per_task(strategy),
              strategy == MATMUL_AMX ? amx_tokens_per_task(ws[0]->cols) : M);
}

/* Inputs rounded to bf16, BF16_CHUNK_ROWS rows at a time: multiplied as bf16
 * by the dot kernel where the CPU has one (and every weight is bf16, and no
 * other strategy was forced), or by fp8_gemm_bf16 where every weight is FP8
 * and the CPU has it, at every row count (no OpenBLAS panels: it beats them
 * at 512 rows, cpu/PERFORMANCE.md); else the rounded values go to the
 * float32 strategies, which then compute the same products exactly. AMX
 * stays the float32 path's: its tiles outrun the dot kernel on prefill,
 * and on rounded inputs its exact three-term split computes the bf16
 * products. */
static void run_bf16(CpuMatmul *mm, const float *x, int M, const Weight *const *ws,
                     float *const *ys, int count, MatmulStrategy strategy, CpuIsa isa) {
    Bf16DotKernel dot = bf16_dot_kernel(isa);
    WeightType type = ws[0]->type == WEIGHT_F8_E4M3 && fp8_bf16_kernel(isa) ? WEIGHT_F8_E4M3 : WEIGHT_BF16;
    bool native = dot && (strategy == MATMUL_AUTO || strategy == MATMUL_ROWS ||
                          strategy == MATMUL_GEMM);
    if (strategy == MATMUL_AUTO && cpu_matmul_choose(M, ws[0], isa) == MATMUL_AMX) native = false;
    for (int i = 0; i < count; i++) native = native && ws[i]->type == type;
    int K = ws[0]->cols;
    for (int m0 = 0; m0 < M; m0 += mm->input_rows) {
        int rows = M - m0 < mm->input_rows ? M - m0 : mm->input_rows;
        float *yc[MAX_SHARED];
        for (int i = 0; i < count; i++) yc[i] = ys[i] + (size_t)m0 * ws[i]->rows;
        const float *xc = x + (size_t)m0 * K;
        if (native) {
            uint16_t *xb = (uint16_t *)mm->inputs;
            bf16_round_rows(isa, xb, xc, (size_t)rows * K);
            MatmulJob job = {mm, NULL, rows, ws, yc, MATMUL_AUTO, isa, {NULL, NULL},
                             mm->tasks, xb, dot};
            run_tasks(mm, &job, count, BF16_ROWS_PER_TASK, rows);
        } else {
            bf16_round_in_f32(mm->inputs, xc, (size_t)rows * K);
            run_f32(mm, mm->inputs, rows, ws, yc, count, strategy, isa);
        }
    }
}

/* ---- quantized weights ---- */

/* Quantized weights sharing the input x. Those on MATMUL_QUANT (see
 * cpu_matmul_choose) need x quantized, once per block format (in parallel
 * when large), max_rows rows at a time; those on MATMUL_GEMM or BLAS are
 * decoded to float32 panels per task and multiplied by x as it is. Then every
 * weight's rows are split into tasks as the other strategies' are. A
 * forced strategy other than blas or gemm runs as quant, and bf16
 * inputs do not apply: the activations are rounded to 8 bits per block
 * anyway, rounding them to bf16 first would only add error. A weight the
 * kernels cannot take (K not a whole number of blocks, or wider than
 * max_cols) gets NaN outputs rather than a read out of bounds. */
static void run_quant(CpuMatmul *mm, const float *x, int M, const Weight *const *ws,
                      float *const *ys, int count, MatmulStrategy strategy, CpuIsa isa) {
    int K = ws[0]->cols, rows_max = mm->max_rows > 0 ? mm->max_rows : 1;
    const Weight *qw[MAX_SHARED], *bw[MAX_SHARED];
    float *qy[MAX_SHARED], *by[MAX_SHARED];
    MatmulStrategy bs[MAX_SHARED];
    int nq = 0, nb = 0;
    bool need[2] = {false, false};
    for (int i = 0; i < count; i++) {
        const Weight *w = ws[i];
        QuantActType a = quant_act_type(w->type);
        if (w->cols != K || K > mm->max_cols || weight_row_bytes(w->type, K) == 0 ||
            quant_act_row_bytes(a, K) == 0) {
            for (size_t k = 0; k < (size_t)M * w->rows; k++) ys[i][k] = NAN;
            continue;
        }
        MatmulStrategy s = strategy == MATMUL_AUTO ? cpu_matmul_choose(M, w, isa) : strategy;
        if (s == MATMUL_GEMM && !small_gemm_kernel(isa, WEIGHT_F32)) s = MATMUL_QUANT;
        if (s == MATMUL_BLAS || s == MATMUL_GEMM) {
            bs[nb] = s;
            bw[nb] = w;
            by[nb++] = ys[i];
        } else {
            need[a] = true;
            qw[nq] = w;
            qy[nq++] = ys[i];
        }
    }
    /* The float paths: one parallel loop each (only large M takes them). */
    for (int i = 0; i < nb; i++) {
        MatmulJob job = {mm, x, M, &bw[i], &by[i], bs[i], isa, {NULL, NULL}, mm->tasks, NULL, NULL};
        run_tasks(mm, &job, 1, PANEL_ROWS, M);
    }
    if (nq == 0) return;
    for (int m0 = 0; m0 < M; m0 += rows_max) {
        int rows = M - m0 < rows_max ? M - m0 : rows_max;
        const float *xc = x + (size_t)m0 * K;
        for (int a = 0; a < 2; a++)
            if (need[a]) quant_act_rows_pool(mm->pool, isa, (QuantActType)a, xc, rows, K, mm->xq[a]);
        float *yc[MAX_SHARED];
        for (int i = 0; i < nq; i++) yc[i] = qy[i] + (size_t)m0 * qw[i]->rows;
        MatmulJob job = {mm, NULL, rows, qw, yc, MATMUL_QUANT, isa, {NULL, NULL}, mm->tasks, NULL,
                         NULL};
        run_tasks(mm, &job, nq, QUANT_ROWS_PER_TASK, rows);
    }
}

/* The weights of a list that run apart: block-quantized (run_quant), FP8
 * (run_fp8) and plain bf16/f32 ones. */
enum { CLASS_QUANT, CLASS_FP8, CLASS_PLAIN, NCLASS };

typedef struct WeightClasses {
    const Weight *ws[NCLASS][MAX_SHARED];
    float *ys[NCLASS][MAX_SHARED];
    int n[NCLASS];
} WeightClasses;

/* Splits a list of at most MAX_SHARED weights by class, keeping their
 * outputs beside them and their order within a class. */
static void split_classes(const Weight *const *ws, float *const *ys, int count, WeightClasses *c) {
    c->n[CLASS_QUANT] = c->n[CLASS_FP8] = c->n[CLASS_PLAIN] = 0;
    for (int i = 0; i < count; i++) {
        int k = weight_type_quantized(ws[i]->type) ? CLASS_QUANT
                : ws[i]->type == WEIGHT_F8_E4M3    ? CLASS_FP8
                                                   : CLASS_PLAIN;
        c->ws[k][c->n[k]] = ws[i];
        c->ys[k][c->n[k]++] = ys[i];
    }
}

static void run(CpuMatmul *mm, const float *x, int M, const Weight *const *ws, float *const *ys,
                int count, MatmulStrategy strategy, CpuIsa isa) {
    if (M <= 0 || count <= 0) return;
    for (; count > MAX_SHARED; count -= MAX_SHARED, ws += MAX_SHARED, ys += MAX_SHARED)
        run(mm, x, M, ws, ys, MAX_SHARED, strategy, isa);
    WeightClasses c;
    split_classes(ws, ys, count, &c);
    if (c.n[CLASS_QUANT] > 0)
        run_quant(mm, x, M, c.ws[CLASS_QUANT], c.ys[CLASS_QUANT], c.n[CLASS_QUANT], strategy, isa);
    for (int k = CLASS_FP8; k <= CLASS_PLAIN; k++) {
        if (c.n[k] == 0) continue;
        if (mm->bf16_inputs) run_bf16(mm, x, M, c.ws[k], c.ys[k], c.n[k], strategy, isa);
        else run_f32(mm, x, M, c.ws[k], c.ys[k], c.n[k], strategy, isa);
    }
}

/* ---- grouped products, each with its own input ---- */

/* The kernel of a grouped task. */
enum { GROUPED_ROWS, GROUPED_GEMM, GROUPED_BF16 };

typedef struct GroupedJob {
    CpuMatmul *mm;
    CpuIsa isa;
    const MatmulGroup *groups;
    RowsKernel kernels[2][2]; /* [GROUPED_ROWS or GROUPED_GEMM][weight type] */
    Bf16DotKernel dot;        /* GROUPED_BF16 */
    const MatmulTask *tasks;
} GroupedJob;

/* The strategies whose tasks are row ranges of one product with no scratch,
 * so that products of different inputs can share one parallel loop. */
static bool row_split(MatmulStrategy s) { return s == MATMUL_ROWS || s == MATMUL_GEMM; }

static void grouped_task(void *ctx, int task, int thread) {
    const GroupedJob *j = ctx;
    const MatmulTask *t = &j->tasks[task];
    const MatmulGroup *g = &j->groups[t->wi];
    const Weight *w = g->w;
    if (t->m0 == GROUPED_BF16 && w->type == WEIGHT_F8_E4M3)
        fp8_gemm_bf16(j->isa, w->data, w->scales, w->cols, g->xb, w->cols, g->M, g->y, w->rows, t->n0,
                      t->n1, j->mm->panels[thread]);
    else if (w->type == WEIGHT_F8_E4M3)
        fp8_gemm(j->isa, w->data, w->scales, w->cols, g->x, w->cols, g->M, g->y, w->rows, t->n0, t->n1,
                 j->mm->panels[thread]);
    else if (t->m0 == GROUPED_BF16)
        j->dot(g->y, w->rows, g->xb, w->cols, g->M, w->data, w->cols, t->n0, t->n1);
    else
        j->kernels[t->m0][w->type](g->y, w->rows, g->x, w->cols, g->M, w->data, w->cols, t->n0, t->n1);
}

/* Whether a group runs on the bf16 dot kernel or fp8_gemm_bf16 (any row
 * count: they have no large-M strategy to hand over to). */
static bool grouped_bf16(const MatmulGroup *g, Bf16DotKernel dot, CpuIsa isa) {
    return dot && g->xb &&
           (g->w->type == WEIGHT_BF16 || (g->w->type == WEIGHT_F8_E4M3 && fp8_bf16_kernel(isa)));
}

void cpu_matmul_grouped(CpuMatmul *mm, const MatmulGroup *groups, int count) {
    CpuIsa isa = cpu_isa_active();
    Bf16DotKernel dot = bf16_dot_kernel(isa);
    /* Large ones first, each run by itself (run() reuses mm->tasks). */
    for (int i = 0; i < count;) {
        const MatmulGroup *g = &groups[i];
        int same = 1;
        if (g->M <= 0 || grouped_bf16(g, dot, isa) || row_split(cpu_matmul_choose(g->M, g->w, isa))) {
            i++;
            continue;
        }
        const Weight *ws[MAX_SHARED] = {g->w};
        float *ys[MAX_SHARED] = {g->y};
        while (i + same < count && same < MAX_SHARED && groups[i + same].x == g->x &&
               groups[i + same].M == g->M && groups[i + same].w->cols == g->w->cols &&
               !grouped_bf16(&groups[i + same], dot, isa)) {
            ws[same] = groups[i + same].w;
            ys[same] = groups[i + same].y;
            same++;
        }
        WeightClasses c;
        split_classes(ws, ys, same, &c);
        if (c.n[CLASS_QUANT] > 0)
            run_quant(mm, g->x, g->M, c.ws[CLASS_QUANT], c.ys[CLASS_QUANT], c.n[CLASS_QUANT],
                      MATMUL_AUTO, isa);
        for (int k = CLASS_FP8; k <= CLASS_PLAIN; k++)
            if (c.n[k] > 0) run_f32(mm, g->x, g->M, c.ws[k], c.ys[k], c.n[k], MATMUL_AUTO, isa);
        i += same;
    }
    GroupedJob job = {mm, isa, groups,
                      {{rows_kernel(isa, WEIGHT_BF16), rows_kernel(isa, WEIGHT_F32)},
                       {split_kernel(MATMUL_GEMM, isa, WEIGHT_BF16),
                        split_kernel(MATMUL_GEMM, isa, WEIGHT_F32)}},
                      dot, mm->tasks};
    int n = 0;
    for (int i = 0; i < count; i++) {
        const MatmulGroup *g = &groups[i];
        if (g->M <= 0) continue;
        MatmulStrategy s = cpu_matmul_choose(g->M, g->w, isa);
        bool bf16 = grouped_bf16(g, dot, isa);
        if (!bf16 && !row_split(s)) continue;
        int per = bf16 ? BF16_ROWS_PER_TASK : rows_per_task(s);
        int kind = bf16 ? GROUPED_BF16 : s == MATMUL_GEMM ? GROUPED_GEMM : GROUPED_ROWS;
        for (int n0 = 0; n0 < g->w->rows; n0 += per) {
            if (n == mm->max_tasks) {
                thread_pool_run(mm->pool, n, grouped_task, &job);
                n = 0;
            }
            int n1 = n0 + per < g->w->rows ? n0 + per : g->w->rows;
            mm->tasks[n++] = (MatmulTask){i, n0, n1, kind, g->M};
        }
    }
    if (n > 0) thread_pool_run(mm->pool, n, grouped_task, &job);
}

void cpu_matmul_multi(CpuMatmul *mm, const float *x, int M, const Weight *const *ws,
                      float *const *ys, int count) {
    run(mm, x, M, ws, ys, count, MATMUL_AUTO, cpu_isa_active());
}

void cpu_matmul(CpuMatmul *mm, float *y, const float *x, int M, const Weight *w) {
    run(mm, x, M, &w, &y, 1, MATMUL_AUTO, cpu_isa_active());
}

void cpu_matmul_with(CpuMatmul *mm, float *y, const float *x, int M, const Weight *w,
                     MatmulStrategy strategy, CpuIsa isa) {
    run(mm, x, M, &w, &y, 1, strategy, isa);
}

void cpu_matmul_set_bf16_inputs(CpuMatmul *mm, bool on) { mm->bf16_inputs = on; }

bool cpu_matmul_bf16_inputs(const CpuMatmul *mm) { return mm->bf16_inputs; }

const char *matmul_strategy_name(MatmulStrategy s) {
    switch (s) {
    case MATMUL_ROWS: return "rows";
    case MATMUL_BLAS: return "blas";
    case MATMUL_AMX: return "amx";
    case MATMUL_GEMM: return "gemm";
    case MATMUL_QUANT: return "quant";
    default: return "auto";
    }
}

CpuMatmul *cpu_matmul_create(ThreadPool *pool, int max_rows, int max_cols, Error *err) {
    CpuMatmul *mm = calloc(1, sizeof *mm);
    int threads = thread_pool_size(pool);
    if (mm) mm->panels = calloc((size_t)threads, sizeof *mm->panels);
    if (!mm || !mm->panels) {
        free(mm);
        error_set(err, "out of memory");
        return NULL;
    }
    mm->pool = pool;
    mm->max_rows = max_rows;
    mm->max_cols = max_cols;
    /* Enough tasks for the widest multi-product (3 x 151936 rows would be
     * absurd; run() flushes when full, so this only sets the batch size). */
    mm->max_tasks = 4096;
    mm->tasks = malloc(sizeof *mm->tasks * (size_t)mm->max_tasks);
    bool ok = mm->tasks != NULL;
    for (int i = 0; ok && i < threads; i++) {
        mm->panels[i] = aligned_alloc(64, sizeof(float) * PANEL_ROWS * (size_t)max_cols);
        ok = mm->panels[i] != NULL;
    }
    if (ok) {
        mm->input_rows = max_rows < BF16_CHUNK_ROWS ? (max_rows > 0 ? max_rows : 1) : BF16_CHUNK_ROWS;
        size_t bytes = sizeof(float) * (size_t)mm->input_rows * (size_t)max_cols;
        mm->inputs = aligned_alloc(64, (bytes + 63) / 64 * 64);
        ok = mm->inputs != NULL;
    }
    if (ok) {
        /* Room for the widest input as Q8_0 and as Q8_K blocks. */
        mm->xq_cols = (max_cols + QK_K - 1) / QK_K * QK_K;
        size_t rows = (size_t)(max_rows > 0 ? max_rows : 1);
        for (int a = 0; ok && a < 2; a++) {
            size_t bytes = rows * quant_act_row_bytes((QuantActType)a, mm->xq_cols > 0 ? mm->xq_cols : QK_K);
            mm->xq[a] = aligned_alloc(64, (bytes + 63) / 64 * 64);
            ok = mm->xq[a] != NULL;
        }
    }
    if (ok && amx_available()) {
        mm->packed = aligned_alloc(64, amx_packed_elems(max_rows, max_cols) * sizeof(uint16_t) + 64);
        ok = mm->packed != NULL;
    }
    if (!ok) {
        cpu_matmul_destroy(mm);
        error_set(err, "out of memory (matmul scratch)");
        return NULL;
    }
    /* Our pool supplies the parallelism; OpenBLAS threads would fight it. */
    openblas_set_num_threads(1);
    return mm;
}

const char *cpu_matmul_blas_core(void) {
    const char *name = openblas_get_corename();
    return name ? name : "unknown";
}

void cpu_matmul_destroy(CpuMatmul *mm) {
    if (!mm) return;
    if (mm->panels)
        for (int i = 0; i < thread_pool_size(mm->pool); i++) free(mm->panels[i]);
    free(mm->panels);
    free(mm->packed);
    free(mm->inputs);
    free(mm->xq[0]);
    free(mm->xq[1]);
    free(mm->tasks);
    free(mm);
}
