/*
 * cuda_fp8_gemm.cu - FP8 x FP8 prompt products through cuBLASLt's
 * block-scaled GEMM (see cuda_fp8_gemm.h): the activations' quantization
 * kernel, one cached algorithm per shape, and the start-up check.
 *
 * cuBLASLt is column-major and takes FP8 only as "TN": A transposed, B not.
 * With A = W ([out, in] row-major: column-major in x out, K contiguous) and
 * B = fp8(x) ([rows, in]: in x rows, K contiguous), D = A^T B is out x rows
 * column-major, which is y [rows, out] row-major. W's tile scales and the
 * activations' block scales are in cuda_fp8_plan.h's layouts. Those
 * layouts are this file's reading of cuBLAS's documentation and PyTorch's
 * use of it, not something a compiler can check, so cuda_fp8_gemm_create
 * runs the whole path on a product whose every tile and row has its own
 * scale and compares it with float64 on the host before any model uses it.
 */
#include <cuda_fp8.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublas_loader.h"
#include "cuda_check.h"
#include "cuda_fp8_gemm.h"
#include "cuda_fp8_plan.h"

extern "C" {
#include "model/weight_format.h"
}

#define WARP 32
#define QUANT_THREADS 256
#define E4M3_MAX 448.0f
#define SHAPE_CACHE 32 /* (rows, out, in) algorithms kept: a model has ~4 matrices x a few row counts */

/* One warp per (row, 128-column block), 4 values a lane; consecutive warps
 * take consecutive rows of a block, so the scales' stores are contiguous. */
__global__ void __launch_bounds__(QUANT_THREADS)
fp8_quantize_kernel(uint8_t *__restrict__ q, float *__restrict__ scales, const uint16_t *__restrict__ x, int rows,
                    int cols) {
    const int id = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) / WARP), lane = threadIdx.x % WARP;
    if (id >= rows * (cols / FP8_BLOCK)) return;
    const int b = id / rows, r = id % rows;
    const size_t at = (size_t)r * cols + (size_t)b * FP8_BLOCK + (size_t)lane * 4;
    const uint2 raw = *reinterpret_cast<const uint2 *>(x + at);
    const float v[4] = {__uint_as_float(raw.x << 16), __uint_as_float(raw.x & 0xffff0000u),
                        __uint_as_float(raw.y << 16), __uint_as_float(raw.y & 0xffff0000u)};
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
    for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = amax > 0.0f ? amax / E4M3_MAX : 1.0f;
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(v[0] / scale, v[1] / scale), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(v[2] / scale, v[3] / scale), __NV_SATFINITE, __NV_E4M3);
    *reinterpret_cast<uint32_t *>(q + at) = lo | hi << 16;
    if (lane == 0) scales[fp8_act_scale_index(r, b * FP8_BLOCK, rows)] = scale;
}

extern "C" int cuda_fp8_quantize_rows(uint8_t *q, float *scales, const uint16_t *x, int rows, int cols,
                                      CudaStream stream, Error *err) {
    if (rows <= 0) return 0;
    if (cols <= 0 || cols % FP8_BLOCK || ((uintptr_t)x & 7) || ((uintptr_t)q & 3))
        return error_set(err, "FP8 quantization: %d columns (a multiple of %d) or misaligned rows", cols, FP8_BLOCK);
    const size_t threads = (size_t)rows * (cols / FP8_BLOCK) * WARP;
    fp8_quantize_kernel<<<(unsigned)((threads + QUANT_THREADS - 1) / QUANT_THREADS), QUANT_THREADS, 0,
                          (cudaStream_t)stream>>>(q, scales, x, rows, cols);
    CUDA_LAUNCHED("the FP8 activation quantization kernel", err);
    return 0;
}

/* ---- cuBLASLt ---------------------------------------------------------------------------- */

typedef struct {
    int rows, out, in; /* rows 0: unused */
    bool ok;           /* an algorithm was found */
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} Fp8Shape;

struct CudaFp8Gemm {
    CublasLtApi lt;
    cublasLtHandle_t handle;
    cublasLtMatmulDesc_t desc;
    cublasLtMatmulPreference_t pref;
    cudaStream_t stream;
    void *workspace;
    size_t workspace_bytes;
    uint8_t *xq;     /* [max_rows, max_in] e4m3 */
    float *x_scales; /* [max_in / 128, max_rows] */
    int max_rows, max_in;
    Fp8Shape shapes[SHAPE_CACHE];
    int next; /* the slot the next new shape replaces */
};

static int lt_fail(Error *err, const char *what, cublasStatus_t st) {
    return error_set(err, "cuBLASLt error while %s (status %d)", what, (int)st);
}

static void drop_shape(CudaFp8Gemm *g, Fp8Shape *s) {
    if (s->a) g->lt.layout_destroy(s->a);
    if (s->b) g->lt.layout_destroy(s->b);
    if (s->d) g->lt.layout_destroy(s->d);
    memset(s, 0, sizeof *s);
}

extern "C" void cuda_fp8_gemm_destroy(CudaFp8Gemm *g) {
    if (!g) return;
    for (int i = 0; i < SHAPE_CACHE; i++) drop_shape(g, &g->shapes[i]);
    if (g->pref) g->lt.pref_destroy(g->pref);
    if (g->desc) g->lt.desc_destroy(g->desc);
    if (g->handle) g->lt.destroy(g->handle);
    cublaslt_unload(&g->lt);
    cuda_free(g->xq);
    cuda_free(g->x_scales);
    free(g);
}

/* The cached shape, or a new one with its layouts and algorithm (ok false
 * when cuBLASLt has none for it). NULL: a cuBLASLt error, in err. */
static Fp8Shape *shape_for(CudaFp8Gemm *g, int rows, int out, int in, Error *err) {
    for (int i = 0; i < SHAPE_CACHE; i++) {
        Fp8Shape *s = &g->shapes[i];
        if (s->rows == rows && s->out == out && s->in == in) return s;
    }
    Fp8Shape *s = &g->shapes[g->next];
    g->next = (g->next + 1) % SHAPE_CACHE;
    drop_shape(g, s);
    cublasStatus_t st;
    if ((st = g->lt.layout_create(&s->a, CUDA_R_8F_E4M3, (uint64_t)in, (uint64_t)out, in)) ||
        (st = g->lt.layout_create(&s->b, CUDA_R_8F_E4M3, (uint64_t)in, (uint64_t)rows, in)) ||
        (st = g->lt.layout_create(&s->d, CUDA_R_32F, (uint64_t)out, (uint64_t)rows, out))) {
        drop_shape(g, s);
        lt_fail(err, "describing an FP8 product", st);
        return NULL;
    }
    s->rows = rows;
    s->out = out;
    s->in = in;
    cublasLtMatmulHeuristicResult_t result;
    memset(&result, 0, sizeof result);
    int found = 0;
    st = g->lt.heuristic(g->handle, g->desc, s->a, s->b, s->d, s->d, g->pref, 1, &result, &found);
    s->ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
    if (s->ok) s->algo = result.algo;
    return s;
}

extern "C" bool cuda_fp8_gemm_fits(const CudaFp8Gemm *g, CudaMatrix w, int rows, int out, int in) {
    return g && w.tile_scales && rows >= 1 && rows <= g->max_rows && in <= g->max_in && in % FP8_BLOCK == 0 &&
           out > 0 && out % 4 == 0;
}

extern "C" int cuda_fp8_gemm(CudaFp8Gemm *g, float *y, const uint16_t *x, CudaMatrix w, int rows, int out, int in,
                             Error *err) {
    if (!cuda_fp8_gemm_fits(g, w, rows, out, in)) return 1;
    Fp8Shape *s = shape_for(g, rows, out, in, err);
    if (!s) return -1;
    if (!s->ok) return 1;
    if (cuda_fp8_quantize_rows(g->xq, g->x_scales, x, rows, in, g->stream, err)) return -1;
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st;
    if ((st = g->lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w.tile_scales, sizeof w.tile_scales)) ||
        (st = g->lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g->x_scales, sizeof g->x_scales)) ||
        (st = g->lt.matmul(g->handle, g->desc, &one, w.data, s->a, g->xq, s->b, &zero, y, s->d, y, s->d, &s->algo,
                           g->workspace, g->workspace_bytes, g->stream)))
        return lt_fail(err, "multiplying FP8 matrices", st);
    return 0;
}

/* ---- the start-up check ------------------------------------------------------------------ */

#define CHECK_ROWS 40
#define CHECK_OUT 256
#define CHECK_IN 256

/* The product of a random W with a different scale in each of its 4 tiles
 * and rows of magnitudes 2^-2 .. 2^2, against float64 of the unquantized
 * rows: the activations' rounding is at most 2^-4 of each |x w|, where a
 * scale read from the wrong tile or row is off by a factor of 2 or more. */
static int check_product(CudaFp8Gemm *g, char *why, size_t why_cap, Error *err) {
    const int N = CHECK_OUT, K = CHECK_IN, M = CHECK_ROWS;
    const float tile_scale[4] = {0.5f, 2.0f, 0.125f, 4.0f};
    uint8_t *wq = (uint8_t *)malloc((size_t)N * K);
    float *scales = (float *)calloc(fp8_tile_scale_count(N, K), sizeof(float));
    float *tiles = (float *)malloc(fp8_scale_count(N, K) * sizeof(float));
    float *wf = (float *)malloc((size_t)N * K * sizeof(float));
    uint16_t *x = (uint16_t *)malloc((size_t)M * K * sizeof(uint16_t));
    float *y = (float *)malloc((size_t)M * N * sizeof(float));
    uint8_t *d_w = NULL;
    float *d_scales = NULL, *d_y = NULL;
    uint16_t *d_x = NULL;
    int rc = -1;
    if (!wq || !scales || !tiles || !wf || !x || !y) {
        error_set(err, "out of memory (the FP8 GEMM check)");
        goto done;
    }
    {
        uint64_t state = 0x9e3779b97f4a7c15ull;
        for (size_t i = 0; i < (size_t)N * K; i++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            uint8_t b = (uint8_t)(state >> 56);
            wq[i] = fp8_e4m3_is_nan(b) ? (uint8_t)(b ^ 1) : b;
        }
        for (int t = 0; t < 4; t++) tiles[t] = tile_scale[t];
        fp8_padded_tile_scales(scales, tiles, N, K);
        fp8_dequantize_rows(wq, tiles, K, 0, N, wf);
        for (int m = 0; m < M; m++)
            for (int k = 0; k < K; k++) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                float v = ((float)(state >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * ldexpf(1.0f, m % 5 - 2);
                uint32_t bits;
                memcpy(&bits, &v, 4);
                x[(size_t)m * K + k] = (uint16_t)(bits >> 16); /* truncated to bf16: exact below */
            }
    }
    if (!(d_w = (uint8_t *)cuda_alloc((size_t)N * K, err)) ||
        !(d_scales = (float *)cuda_alloc(fp8_tile_scale_count(N, K) * sizeof(float), err)) ||
        !(d_x = (uint16_t *)cuda_alloc((size_t)M * K * sizeof(uint16_t), err)) ||
        !(d_y = (float *)cuda_alloc((size_t)M * N * sizeof(float), err)) ||
        cuda_upload(d_w, wq, (size_t)N * K, err) ||
        cuda_upload(d_scales, scales, fp8_tile_scale_count(N, K) * sizeof(float), err) ||
        cuda_upload(d_x, x, (size_t)M * K * sizeof(uint16_t), err))
        goto done;
    {
        const CudaMatrix w = {d_w, NULL, d_scales};
        int st = cuda_fp8_gemm(g, d_y, d_x, w, M, N, K, err);
        if (st < 0) goto done;
        if (st == 1) {
            snprintf(why, why_cap, "cuBLASLt has no block-scaled FP8 algorithm on this GPU");
            rc = 1;
            goto done;
        }
    }
    if (cudaStreamSynchronize(g->stream) != cudaSuccess || cuda_download(y, d_y, (size_t)M * N * sizeof(float), err)) {
        if (!err->msg[0]) error_set(err, "running the FP8 GEMM check");
        goto done;
    }
    rc = 0;
    for (int m = 0; m < M && rc == 0; m++)
        for (int n = 0; n < N && rc == 0; n++) {
            double want = 0, bound = 0;
            for (int k = 0; k < K; k++) {
                uint32_t bits = (uint32_t)x[(size_t)m * K + k] << 16;
                float xv;
                memcpy(&xv, &bits, 4);
                want += (double)xv * wf[(size_t)n * K + k];
                bound += fabs((double)xv * wf[(size_t)n * K + k]);
            }
            double got = y[(size_t)m * N + n];
            if (!(fabs(got - want) <= 0.07 * bound + 1e-6)) {
                snprintf(why, why_cap, "its check failed: y[%d, %d] = %g where float64 gives %g (bound %g)", m, n, got,
                         want, 0.07 * bound);
                rc = 1;
            }
        }
done:
    cuda_free(d_w);
    cuda_free(d_scales);
    cuda_free(d_x);
    cuda_free(d_y);
    free(wq);
    free(scales);
    free(tiles);
    free(wf);
    free(x);
    free(y);
    return rc;
}

extern "C" CudaFp8Gemm *cuda_fp8_gemm_create(int max_rows, int max_in, void *workspace, size_t workspace_bytes,
                                             CudaStream stream, char *why, size_t why_cap, Error *err) {
    why[0] = '\0';
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        error_set(err, "cannot read the GPU's compute capability");
        return NULL;
    }
    if (major != 9 || minor != 0) { /* block scales of this kind are Hopper's (Blackwell's are MX) */
        snprintf(why, why_cap, "the GPU is sm_%d%d, and cuBLASLt's 128 x 128 block scales are sm_90's", major, minor);
        return NULL;
    }
    if (max_rows <= 0 || max_in < CHECK_IN || max_in % FP8_BLOCK) {
        snprintf(why, why_cap, "no FP8 product of %d rows x %d needs it", max_rows, max_in);
        return NULL;
    }
    CudaFp8Gemm *g = (CudaFp8Gemm *)calloc(1, sizeof *g);
    if (!g) {
        error_set(err, "out of memory");
        return NULL;
    }
    g->stream = (cudaStream_t)stream;
    g->workspace = workspace;
    g->workspace_bytes = workspace_bytes;
    g->max_rows = max_rows < CHECK_ROWS ? CHECK_ROWS : max_rows;
    g->max_in = max_in;
    Error lt_err;
    memset(&lt_err, 0, sizeof lt_err);
    if (cublaslt_load(&g->lt, &lt_err)) {
        snprintf(why, why_cap, "%s", lt_err.msg);
        cuda_fp8_gemm_destroy(g);
        return NULL;
    }
    const cublasOperation_t transpose = CUBLAS_OP_T, plain = CUBLAS_OP_N;
    const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    cublasStatus_t st;
    if ((st = g->lt.create(&g->handle)) || (st = g->lt.desc_create(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) ||
        (st = g->lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose)) ||
        (st = g->lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &plain, sizeof plain)) ||
        (st = g->lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof a_mode)) ||
        (st = g->lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof b_mode)) ||
        (st = g->lt.pref_create(&g->pref)) ||
        (st = g->lt.pref_set(g->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                             sizeof workspace_bytes))) {
        snprintf(why, why_cap, "cuBLASLt refused the block-scaled FP8 set-up (status %d)", (int)st);
        cuda_fp8_gemm_destroy(g);
        return NULL;
    }
    if (!(g->xq = (uint8_t *)cuda_alloc((size_t)g->max_rows * max_in, err)) ||
        !(g->x_scales = (float *)cuda_alloc((size_t)g->max_rows * (max_in / FP8_BLOCK) * sizeof(float), err))) {
        error_prefix(err, "the FP8 activations (%d rows x %d)", g->max_rows, max_in);
        cuda_fp8_gemm_destroy(g);
        return NULL;
    }
    int rc = check_product(g, why, why_cap, err);
    if (rc) {
        cuda_fp8_gemm_destroy(g);
        return NULL;
    }
    return g;
}
