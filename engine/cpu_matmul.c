/*
 * cpu_matmul.c - the two matmul strategies of cpu_matmul.h and their kernels.
 *
 * Own kernels (small M): each task owns a range of weight rows and walks them
 * four at a time, widening 16 (AVX-512) or 8 (AVX2) bf16 values per load
 * with a zero-extend and a 16-bit shift, and accumulating up to four
 * activation rows per pass so that every weight byte is read once per four
 * rows. Partial sums are reduced once per output, after the K loop.
 *
 * BLAS (large M): each task widens PANEL_ROWS weight rows into its own f32
 * panel (cache-sized) and calls cblas_sgemm on it. OpenBLAS is told to use
 * one thread, because the parallelism is ours.
 */
#include "cpu_matmul.h"

#include <cblas.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Activation rows at or below this use our kernels; above, sgemm. Measured by
 * `nanovllm bench --matmul` (see the performance notes): at M=8 our kernels
 * still read the weights once, which wins; sgemm's advantage grows with M. */
#define SMALL_M_MAX 8

/* Weight rows per widened panel: 128 rows x K=3072 x 4 bytes = 1.5 MiB, in L2. */
#define PANEL_ROWS 128

/* Weight rows per task of the small-M kernels: a multiple of 4 rows, large
 * enough to amortise the task hand-off, small enough to balance threads. */
#define GEMV_ROWS_PER_TASK 64

struct CpuMatmul {
    ThreadPool *pool;
    int max_cols;
    float **panels; /* one PANEL_ROWS x max_cols buffer per thread */
};

typedef void (*RowsKernel)(float *y, int ldy, const float *x, int ldx, int M, const void *w, int K,
                           int n0, int n1);

/* ---- portable kernels ---------------------------------------------------- */

static float weight_at(const void *w, int bf16, size_t i) {
    return bf16 ? bf16_to_f32(((const uint16_t *)w)[i]) : ((const float *)w)[i];
}

static void rows_scalar(float *y, int ldy, const float *x, int ldx, int M, const void *w, int K,
                        int n0, int n1, int bf16) {
    for (int n = n0; n < n1; n++) {
        for (int m = 0; m < M; m++) {
            const float *xr = x + (size_t)m * ldx;
            float s = 0.0f;
            for (int k = 0; k < K; k++) s += xr[k] * weight_at(w, bf16, (size_t)n * K + k);
            y[(size_t)m * ldy + n] = s;
        }
    }
}

static void rows_bf16_scalar(float *y, int ldy, const float *x, int ldx, int M, const void *w,
                             int K, int n0, int n1) {
    rows_scalar(y, ldy, x, ldx, M, w, K, n0, n1, 1);
}

static void rows_f32_scalar(float *y, int ldy, const float *x, int ldx, int M, const void *w, int K,
                            int n0, int n1) {
    rows_scalar(y, ldy, x, ldx, M, w, K, n0, n1, 0);
}

static void widen_scalar(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

#if defined(__x86_64__)
/* ---- AVX-512 ------------------------------------------------------------- */
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define INLINE static inline __attribute__((always_inline))

AVX512 INLINE __m512 load16_avx512(const void *w, int bf16, size_t i) {
    if (bf16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i))),
            16));
    return _mm512_loadu_ps((const float *)w + i);
}

/* NR weight rows (1 or 4) starting at n, times MB activation rows (1, 2 or 4). */
AVX512 INLINE void block_avx512(float *y, int ldy, const float *x, int ldx, const void *w, int K,
                                int n, int NR, int MB, int bf16) {
    __m512 acc[4][4];
    for (int r = 0; r < NR; r++)
        for (int m = 0; m < MB; m++) acc[r][m] = _mm512_setzero_ps();
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 wv[4];
        for (int r = 0; r < NR; r++) wv[r] = load16_avx512(w, bf16, (size_t)(n + r) * K + k);
        for (int m = 0; m < MB; m++) {
            __m512 xv = _mm512_loadu_ps(x + (size_t)m * ldx + k);
            for (int r = 0; r < NR; r++) acc[r][m] = _mm512_fmadd_ps(wv[r], xv, acc[r][m]);
        }
    }
    for (int r = 0; r < NR; r++) {
        for (int m = 0; m < MB; m++) {
            float s = _mm512_reduce_add_ps(acc[r][m]);
            for (int kk = k; kk < K; kk++)
                s += x[(size_t)m * ldx + kk] * weight_at(w, bf16, (size_t)(n + r) * K + kk);
            y[(size_t)m * ldy + n + r] = s;
        }
    }
}

AVX512 INLINE void rows_avx512(float *y, int ldy, const float *x, int ldx, int M, const void *w,
                               int K, int n0, int n1, int bf16) {
    for (int m = 0; m < M;) {
        int left = M - m, MB = left >= 4 ? 4 : left >= 2 ? 2 : 1;
        const float *xm = x + (size_t)m * ldx;
        float *ym = y + (size_t)m * ldy;
        int n = n0;
        for (; n + 4 <= n1; n += 4) {
            if (MB == 4) block_avx512(ym, ldy, xm, ldx, w, K, n, 4, 4, bf16);
            else if (MB == 2) block_avx512(ym, ldy, xm, ldx, w, K, n, 4, 2, bf16);
            else block_avx512(ym, ldy, xm, ldx, w, K, n, 4, 1, bf16);
        }
        for (; n < n1; n++) {
            if (MB == 4) block_avx512(ym, ldy, xm, ldx, w, K, n, 1, 4, bf16);
            else if (MB == 2) block_avx512(ym, ldy, xm, ldx, w, K, n, 1, 2, bf16);
            else block_avx512(ym, ldy, xm, ldx, w, K, n, 1, 1, bf16);
        }
        m += MB;
    }
}

AVX512 static void rows_bf16_avx512(float *y, int ldy, const float *x, int ldx, int M,
                                    const void *w, int K, int n0, int n1) {
    rows_avx512(y, ldy, x, ldx, M, w, K, n0, n1, 1);
}

AVX512 static void rows_f32_avx512(float *y, int ldy, const float *x, int ldx, int M, const void *w,
                                   int K, int n0, int n1) {
    rows_avx512(y, ldy, x, ldx, M, w, K, n0, n1, 0);
}

AVX512 static void widen_avx512(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, load16_avx512(src, 1, i));
    widen_scalar(dst + i, src + i, n - i);
}

/* ---- AVX2 ---------------------------------------------------------------- */
#define AVX2 __attribute__((target("avx2,fma")))

AVX2 INLINE __m256 load8_avx2(const void *w, int bf16, size_t i) {
    if (bf16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i))), 16));
    return _mm256_loadu_ps((const float *)w + i);
}

AVX2 INLINE float hsum_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Same blocking as AVX-512 with 8-wide vectors: 4 rows x up to 2 tokens keeps
 * the 16 ymm registers from spilling. */
AVX2 INLINE void block_avx2(float *y, int ldy, const float *x, int ldx, const void *w, int K, int n,
                            int NR, int MB, int bf16) {
    __m256 acc[4][2];
    for (int r = 0; r < NR; r++)
        for (int m = 0; m < MB; m++) acc[r][m] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 wv[4];
        for (int r = 0; r < NR; r++) wv[r] = load8_avx2(w, bf16, (size_t)(n + r) * K + k);
        for (int m = 0; m < MB; m++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)m * ldx + k);
            for (int r = 0; r < NR; r++) acc[r][m] = _mm256_fmadd_ps(wv[r], xv, acc[r][m]);
        }
    }
    for (int r = 0; r < NR; r++) {
        for (int m = 0; m < MB; m++) {
            float s = hsum_avx2(acc[r][m]);
            for (int kk = k; kk < K; kk++)
                s += x[(size_t)m * ldx + kk] * weight_at(w, bf16, (size_t)(n + r) * K + kk);
            y[(size_t)m * ldy + n + r] = s;
        }
    }
}

AVX2 INLINE void rows_avx2(float *y, int ldy, const float *x, int ldx, int M, const void *w, int K,
                           int n0, int n1, int bf16) {
    for (int m = 0; m < M;) {
        int MB = M - m >= 2 ? 2 : 1;
        const float *xm = x + (size_t)m * ldx;
        float *ym = y + (size_t)m * ldy;
        int n = n0;
        for (; n + 4 <= n1; n += 4) {
            if (MB == 2) block_avx2(ym, ldy, xm, ldx, w, K, n, 4, 2, bf16);
            else block_avx2(ym, ldy, xm, ldx, w, K, n, 4, 1, bf16);
        }
        for (; n < n1; n++) {
            if (MB == 2) block_avx2(ym, ldy, xm, ldx, w, K, n, 1, 2, bf16);
            else block_avx2(ym, ldy, xm, ldx, w, K, n, 1, 1, bf16);
        }
        m += MB;
    }
}

AVX2 static void rows_bf16_avx2(float *y, int ldy, const float *x, int ldx, int M, const void *w,
                                int K, int n0, int n1) {
    rows_avx2(y, ldy, x, ldx, M, w, K, n0, n1, 1);
}

AVX2 static void rows_f32_avx2(float *y, int ldy, const float *x, int ldx, int M, const void *w,
                               int K, int n0, int n1) {
    rows_avx2(y, ldy, x, ldx, M, w, K, n0, n1, 0);
}

AVX2 static void widen_avx2(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8_avx2(src, 1, i));
    widen_scalar(dst + i, src + i, n - i);
}
#endif /* __x86_64__ */

static RowsKernel rows_kernel(CpuIsa isa, WeightType type) {
    int bf16 = type == WEIGHT_BF16;
#if defined(__x86_64__)
    if (isa == CPU_ISA_AVX512) return bf16 ? rows_bf16_avx512 : rows_f32_avx512;
    if (isa == CPU_ISA_AVX2) return bf16 ? rows_bf16_avx2 : rows_f32_avx2;
#else
    (void)isa;
#endif
    return bf16 ? rows_bf16_scalar : rows_f32_scalar;
}

static void widen(CpuIsa isa, float *dst, const uint16_t *src, size_t n) {
#if defined(__x86_64__)
    if (isa == CPU_ISA_AVX512) return widen_avx512(dst, src, n);
    if (isa == CPU_ISA_AVX2) return widen_avx2(dst, src, n);
#else
    (void)isa;
#endif
    widen_scalar(dst, src, n);
}

/* ---- parallel drivers ---------------------------------------------------- */

typedef struct MatmulJob {
    CpuMatmul *mm;
    float *y;
    const float *x;
    int M;
    const Weight *w;
    CpuIsa isa;
    RowsKernel kernel;
    int rows_per_task;
} MatmulJob;

static void small_m_task(void *ctx, int task, int thread) {
    (void)thread;
    const MatmulJob *j = ctx;
    int N = j->w->rows, n0 = task * j->rows_per_task;
    int n1 = n0 + j->rows_per_task < N ? n0 + j->rows_per_task : N;
    j->kernel(j->y, N, j->x, j->w->cols, j->M, j->w->data, j->w->cols, n0, n1);
}

static void blas_task(void *ctx, int task, int thread) {
    const MatmulJob *j = ctx;
    int N = j->w->rows, K = j->w->cols, n0 = task * PANEL_ROWS;
    int rows = n0 + PANEL_ROWS < N ? PANEL_ROWS : N - n0;
    const float *panel;
    if (j->w->type == WEIGHT_BF16) {
        float *buf = j->mm->panels[thread];
        widen(j->isa, buf, (const uint16_t *)j->w->data + (size_t)n0 * K, (size_t)rows * K);
        panel = buf;
    } else {
        panel = (const float *)j->w->data + (size_t)n0 * K;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->M, rows, K, 1.0f, j->x, K, panel, K,
                0.0f, j->y + n0, N);
}

void cpu_matmul_with(CpuMatmul *mm, float *y, const float *x, int M, const Weight *w, int use_blas,
                     CpuIsa isa) {
    if (M <= 0) return;
    MatmulJob job = {mm, y, x, M, w, isa, rows_kernel(isa, w->type), GEMV_ROWS_PER_TASK};
    if (use_blas) {
        int tasks = (w->rows + PANEL_ROWS - 1) / PANEL_ROWS;
        thread_pool_run(mm->pool, tasks, blas_task, &job);
    } else {
        int tasks = (w->rows + job.rows_per_task - 1) / job.rows_per_task;
        thread_pool_run(mm->pool, tasks, small_m_task, &job);
    }
}

void cpu_matmul(CpuMatmul *mm, float *y, const float *x, int M, const Weight *w) {
    cpu_matmul_with(mm, y, x, M, w, M > SMALL_M_MAX, cpu_isa_active());
}

CpuMatmul *cpu_matmul_create(ThreadPool *pool, int max_cols, Error *err) {
    CpuMatmul *mm = calloc(1, sizeof *mm);
    int threads = thread_pool_size(pool);
    if (mm) mm->panels = calloc((size_t)threads, sizeof *mm->panels);
    if (!mm || !mm->panels) {
        free(mm);
        error_set(err, "out of memory");
        return NULL;
    }
    mm->pool = pool;
    mm->max_cols = max_cols;
    for (int i = 0; i < threads; i++) {
        mm->panels[i] = aligned_alloc(64, sizeof(float) * PANEL_ROWS * (size_t)max_cols);
        if (!mm->panels[i]) {
            cpu_matmul_destroy(mm);
            error_set(err, "out of memory (matmul panels)");
            return NULL;
        }
    }
    /* Our pool supplies the parallelism; OpenBLAS threads would fight it. */
    openblas_set_num_threads(1);
    return mm;
}

void cpu_matmul_destroy(CpuMatmul *mm) {
    if (!mm) return;
    if (mm->panels)
        for (int i = 0; i < thread_pool_size(mm->pool); i++) free(mm->panels[i]);
    free(mm->panels);
    free(mm);
}
