/*
 * cuda_matmul.cu - the projections' kernel choice (see cuda_matmul.h).
 */
#include <stdlib.h>

#include "cuda_check.h" /* first: base/error.h with C linkage */
extern "C" {
#include "base/log.h"
}
#include "cublas_loader.h"
#include "cuda_fp8_gemm.h"
#include "cuda_fp8_plan.h"
#include "cuda_matmul.h"
#include "cuda_variants.h"

#define CUBLAS_WORKSPACE_BYTES (32u << 20)

struct CudaMatmul {
    CublasApi blas;
    cublasHandle_t handle;
    cudaStream_t stream;
    void *workspace;
    uint16_t *fp8_scratch; /* [fp8_scratch_elems] bf16 */
    size_t fp8_scratch_elems;
    CudaFp8Gemm *fp8_gemm; /* prompt steps of tile-scaled FP8 matrices on the FP8 tensor cores, or NULL */
    bool legacy_gemv; /* NANOVLLM_CUDA_LEGACY=gemv: cuBLAS for few-row products too */
};

extern "C" void cuda_matmul_destroy(CudaMatmul *m) {
    if (!m) return;
    if (m->handle) m->blas.destroy(m->handle);
    cublas_unload(&m->blas);
    cuda_fp8_gemm_destroy(m->fp8_gemm);
    cuda_free(m->workspace);
    cuda_free(m->fp8_scratch);
    free(m);
}

extern "C" CudaMatmul *cuda_matmul_create(CudaStream stream, Error *err) {
    CudaMatmul *m = (CudaMatmul *)calloc(1, sizeof *m);
    if (!m) {
        error_set(err, "out of memory");
        return NULL;
    }
    m->stream = (cudaStream_t)stream;
    m->legacy_gemv = cuda_variant_legacy("gemv");
    int rc = cublas_load(&m->blas, err);
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (rc == 0 && (st = m->blas.create(&m->handle)) != CUBLAS_STATUS_SUCCESS) {
        m->handle = NULL;
        rc = cublas_fail(&m->blas, err, "creating a handle", st);
    }
    /* A fixed workspace: cuBLAS then allocates nothing behind our back, so
     * the memory measured after the runner's warm-up is all there is. */
    if (rc == 0 && !(m->workspace = cuda_alloc(CUBLAS_WORKSPACE_BYTES, err))) rc = -1;
    if (rc == 0 && ((st = m->blas.set_stream(m->handle, m->stream)) != CUBLAS_STATUS_SUCCESS ||
                    (st = m->blas.set_workspace(m->handle, m->workspace, CUBLAS_WORKSPACE_BYTES)) !=
                        CUBLAS_STATUS_SUCCESS))
        rc = cublas_fail(&m->blas, err, "configuring the handle", st);
    if (rc) {
        cuda_matmul_destroy(m);
        return NULL;
    }
    return m;
}

extern "C" int cuda_matmul_reserve_fp8(CudaMatmul *m, size_t elems, Error *err) {
    if (elems > CUDA_FP8_SCRATCH_MAX_ELEMS) elems = CUDA_FP8_SCRATCH_MAX_ELEMS;
    if (m->fp8_scratch) return error_set(err, "the FP8 scratch is reserved once");
    if (elems == 0) return 0;
    if (!(m->fp8_scratch = (uint16_t *)cuda_alloc(elems * sizeof(uint16_t), err)))
        return error_prefix(err, "the FP8 dequantization scratch (%zu values)", elems);
    m->fp8_scratch_elems = elems;
    return 0;
}

extern "C" int cuda_matmul_reserve_fp8_gemm(CudaMatmul *m, int max_rows, int max_in, Error *err) {
    if (m->fp8_gemm) return error_set(err, "the FP8 GEMM is set up once");
    if (m->legacy_gemv || cuda_variant_legacy("fp8gemm")) {
        log_info("FP8 prompt steps: weights dequantized to bf16 for cuBLAS (NANOVLLM_CUDA_LEGACY)");
        return 0;
    }
    char why[256];
    m->fp8_gemm = cuda_fp8_gemm_create(max_rows, max_in, m->workspace, CUBLAS_WORKSPACE_BYTES, m->stream, why,
                                       sizeof why, err);
    if (!m->fp8_gemm && err->msg[0]) return -1;
    if (m->fp8_gemm)
        log_info("FP8 prompt steps: FP8 x FP8 on the tensor cores (cuBLASLt, 128 x 128 weight scales, activations "
                 "quantized per row and 128 columns); decode steps of up to %d rows: the weight-only FP8 gemv",
                 CUDA_FP8_GEMV_MAX_ROWS);
    else log_info("FP8 prompt steps: weights dequantized to bf16 for cuBLAS (%s)", why);
    return 0;
}

extern "C" bool cuda_matmul_fp8_tensor_cores(const CudaMatmul *m) { return m->fp8_gemm != NULL; }

/* cuBLAS is column-major: Y^T = W . X^T with W read transposed. `ldy`
 * apart, so a tile of W's rows writes its columns of Y. */
static int blas_gemm(CudaMatmul *m, float *y, int ldy, const uint16_t *x, const uint16_t *w, int rows, int out,
                     int in, Error *err) {
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = m->blas.gemm_ex(m->handle, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &one, w, CUDA_R_16BF,
                                        in, x, CUDA_R_16BF, in, &zero, y, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return cublas_fail(&m->blas, err, "multiplying matrices", st);
    return 0;
}

static int fp8_matmul(CudaMatmul *m, float *y, const uint16_t *x, CudaMatrix w, int rows, int out, int in,
                      Error *err) {
    const uint8_t *q = (const uint8_t *)w.data;
    if (!m->legacy_gemv && rows <= CUDA_FP8_GEMV_MAX_ROWS && cuda_gemv_fp8_fits(1, in, x, q)) {
        for (int r0 = 0; r0 < rows; r0 += CUDA_GEMV_MAX_ROWS) {
            const int n = rows - r0 < CUDA_GEMV_MAX_ROWS ? rows - r0 : CUDA_GEMV_MAX_ROWS;
            if (cuda_gemv_fp8(y + (size_t)r0 * out, x + (size_t)r0 * in, q, w.scales, n, out, in, m->stream, err))
                return -1;
        }
        return 0;
    }
    if (m->fp8_gemm && cuda_fp8_gemm_fits(m->fp8_gemm, w, rows, out, in)) {
        const int rc = cuda_fp8_gemm(m->fp8_gemm, y, x, w, rows, out, in, err);
        if (rc <= 0) return rc; /* 1: no algorithm for this shape, dequantize */
    }
    if (!m->fp8_scratch)
        return error_set(err, "an FP8 matrix [%d, %d] at %d rows, and no FP8 scratch was sized for it", out, in,
                         rows);
    const int tile = fp8_dequant_tile_rows(m->fp8_scratch_elems, out, in);
    for (int n0 = 0; n0 < out; n0 += tile) {
        const int n = out - n0 < tile ? out - n0 : tile;
        if (cuda_fp8_dequantize(m->fp8_scratch, q + (size_t)n0 * in, w.scales + fp8_row_scale_count(n0, in), n, in,
                                m->stream, err) ||
            blas_gemm(m, y + n0, out, x, m->fp8_scratch, rows, n, in, err))
            return -1;
    }
    return 0;
}

extern "C" int cuda_matmul(CudaMatmul *m, float *y, const uint16_t *x, CudaMatrix w, int rows, int out, int in,
                           Error *err) {
    if (rows <= 0 || out <= 0) return 0;
    if (w.scales) return fp8_matmul(m, y, x, w, rows, out, in, err);
    const uint16_t *wb = (const uint16_t *)w.data;
    if (!m->legacy_gemv && cuda_gemv_fits(rows, in, x, wb)) /* decode at small batch: a read of W */
        return cuda_gemv(y, x, wb, rows, out, in, m->stream, err);
    return blas_gemm(m, y, out, x, wb, rows, out, in, err);
}
