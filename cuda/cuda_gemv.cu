/*
 * cuda_gemv.cu - y = x W^T for a handful of rows: the projections and the
 * lm_head of decode steps at small batch (see cuda_kernels.h).
 *
 * With one to four rows a projection is a pure read of its weights, and
 * what decides its speed is how many bytes are in flight, not arithmetic.
 * cuBLAS's kernels for such shapes tile for reuse the rows cannot give and
 * add a split-K reduction launch, so a single-sequence decode step spent
 * more time in its four GEMMs a layer than the weights take to read. Here
 * one warp owns one output column (a weight row of K bf16): each lane reads
 * 8 weights with one 16-byte load, four such loads in flight before their
 * first use, multiplies them with the matching 8 inputs of every row (x is
 * a few KB and stays in L1), and the warp sums its lanes with shuffles.
 * Below 4,096 outputs four warps share each output's K (k_split), so the
 * launch fills the GPU at any N. cuBLAS keeps the
 * larger batches, and all of them under NANOVLLM_CUDA_LEGACY=gemv. The same
 * kernel runs an MoE decode step's experts, one launch over its routed
 * pairs (cuda_gemv_experts).
 *
 * At one sequence a decode step is a chain of ~9 launches a layer, each a
 * few microseconds of latency whatever its bytes, so the gemvs that follow
 * a residual add + RMSNorm also do it (NORM): every block normalises the
 * rows itself into shared memory - they are a few KB, read from L2, where
 * the separate kernel was a launch and a round trip to memory - and block 0
 * writes the new residual and h for whoever reads them next. The gate/up
 * gemv also applies SiLU x up in its epilogue (GLU): a warp computes an
 * output's gate and up rows together and writes the bf16 activation. Both
 * do cuda_kernels.cu's arithmetic (cuda_fused_math.h) with the same split of
 * K, so the fused step has the unfused one's bits; FP8 matrices go to
 * cuda_fp8.cu's gemv with the same prologue and epilogue.
 * NANOVLLM_CUDA_LEGACY=fuse keeps the separate launches.
 */
#include "cuda_bf16.h"
#include "cuda_check.h"
#include "cuda_fused_math.h"
#include "cuda_gemv_norm.h"
#include "cuda_gemv_reduce.h"
#include "cuda_pdl.h"
#include "cuda_kernels.h"

#define WARP 32
#define WARPS_PER_BLOCK 8
#define GEMV_UNROLL 4

/* M rows of x [M, K] bf16 times W [N, K] bf16 -> y [M, N] float32. KSPLIT
 * warps share one output, each taking every KSPLIT-th 256-wide chunk of K,
 * their sums added in shared memory: for small N (Qwen3-0.6B's o_proj and
 * down_proj have 1,024 outputs) one warp an output would leave each warp
 * several load round trips deep in K with too few warps to cover them.
 * NORM: x is RMSNorm(norm.x_in + norm.delta), made in shared memory first.
 * GLU: W is [2N, K], gate rows then up rows; y is bf16 [M, N] =
 * SiLU(x gate^T) x (x up^T). */
template <int M, int KSPLIT, bool EXPERTS = false, bool NORM = false, bool GLU = false>
__global__ void __launch_bounds__(WARPS_PER_BLOCK * WARP)
gemv_kernel(void *__restrict__ y_out, const uint16_t *__restrict__ x, const uint16_t *__restrict__ w, int N, int K,
            GemvExperts experts, CudaGemvNorm norm) {
    constexpr int OUTS = WARPS_PER_BLOCK / KSPLIT; /* outputs per block */
    constexpr int ROWS = GLU ? 2 : 1;              /* weight rows per output */
    extern __shared__ uint4 x_shared[];            /* NORM: [M][K] bf16 */
    void *y = y_out;
    pdl_trigger();
    if (EXPERTS) {
        const long long e = gemv_pair(experts, x, y, (size_t)N * (GLU ? sizeof(uint16_t) : sizeof(float)), K);
        if (e < 0) return; /* the whole block: no barrier is waiting for it */
        w += (size_t)e * ROWS * N * K;
    }
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, part = warp % KSPLIT;
    const int n = blockIdx.x * OUTS + warp / KSPLIT;
    const bool valid = n < N;
    const uint4 *w_row[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++)
        w_row[r] = reinterpret_cast<const uint4 *>(w + ((size_t)r * N + (valid ? n : 0)) * K);
    const int k8_count = valid ? K / 8 : 0, x_stride = K / 8;
    constexpr int STEP = KSPLIT * WARP; /* one chunk of this warp to its next */
    /* chunk c (32 lanes x 8 elements) of this warp: c = part + KSPLIT * j */
    int k8 = part * WARP + lane;
    uint4 wr[ROWS][GEMV_UNROLL];
    /* The first weights do not wait for x: in flight across the wait for
     * the previous kernel (cuda_pdl.h) and the normalising prologue. */
    bool preloaded = !EXPERTS && k8 + (GEMV_UNROLL - 1) * STEP < k8_count;
    if (preloaded)
#pragma unroll
        for (int r = 0; r < ROWS; r++)
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; u++) wr[r][u] = __ldcs(w_row[r] + k8 + u * STEP); /* read once */
    if (!EXPERTS) pdl_wait();
    if (NORM) {
        gemv_normalise<M>(norm, K, reinterpret_cast<uint2 *>(x_shared), warp, lane);
        __syncthreads();
    }
    const uint4 *x4 = NORM ? x_shared : reinterpret_cast<const uint4 *>(x);
    float acc[ROWS * M] = {}; /* [r][m] */
    for (; k8 + (GEMV_UNROLL - 1) * STEP < k8_count; k8 += GEMV_UNROLL * STEP) {
        if (!preloaded)
#pragma unroll
            for (int r = 0; r < ROWS; r++)
#pragma unroll
                for (int u = 0; u < GEMV_UNROLL; u++) wr[r][u] = __ldcs(w_row[r] + k8 + u * STEP);
        preloaded = false;
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++)
#pragma unroll
            for (int m = 0; m < M; m++) {
                float xf[8];
                const uint4 *xp = x4 + (size_t)m * x_stride + k8 + u * STEP;
                widen8(NORM ? *xp : __ldg(xp), xf);
#pragma unroll
                for (int r = 0; r < ROWS; r++) {
                    float wf[8];
                    widen8(wr[r][u], wf);
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[r * M + m] = fmaf(wf[e], xf[e], acc[r * M + m]);
                }
            }
    }
    for (; k8 < k8_count; k8 += STEP) { /* the remainder */
#pragma unroll
        for (int m = 0; m < M; m++) {
            float xf[8];
            const uint4 *xp = x4 + (size_t)m * x_stride + k8;
            widen8(NORM ? *xp : __ldg(xp), xf);
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                float wf[8];
                widen8(__ldcs(w_row[r] + k8), wf);
#pragma unroll
                for (int e = 0; e < 8; e++) acc[r * M + m] = fmaf(wf[e], xf[e], acc[r * M + m]);
            }
        }
    }
    gemv_finish<M, KSPLIT, WARPS_PER_BLOCK, ROWS>(acc, y, N, n, valid, warp, lane, part);
}

static bool pdl_on = false; /* set once by the runner before its first launch */

extern "C" bool cuda_pdl_enabled(void) { return pdl_on; }
extern "C" void cuda_pdl_enable(bool on) { pdl_on = on; }

/* Warps per output: enough warps in all for a few per SM's worth of loads. */
static int k_split(int out, int in) { return out < 4096 && in >= 1024 ? 4 : 1; }

extern "C" bool cuda_gemv_fits(int rows, int in, const void *x, const void *w) {
    return rows >= 1 && rows <= CUDA_GEMV_MAX_ROWS && in > 0 && in % 8 == 0 && ((uintptr_t)x & 15) == 0 &&
           ((uintptr_t)w & 15) == 0;
}

extern "C" int cuda_gemv(float *y, const uint16_t *x, const uint16_t *w, int rows, int out, int in,
                         CudaStream stream, Error *err) {
    if (!cuda_gemv_fits(rows, in, x, w))
        return error_set(err, "gemv: %d rows of %d (1..%d rows, a multiple of 8 wide, 16-byte aligned)", rows, in,
                         CUDA_GEMV_MAX_ROWS);
    if (out <= 0) return 0;
    const int split = k_split(out, in), outs_per_block = WARPS_PER_BLOCK / split;
    const unsigned blocks = (unsigned)((out + outs_per_block - 1) / outs_per_block);
    const unsigned threads = WARPS_PER_BLOCK * WARP;
    cudaStream_t s = (cudaStream_t)stream;
    const GemvExperts one = {NULL, 1, NULL, NULL, 0};
    const CudaGemvNorm none = {};
#define GEMV_LAUNCH(M)                                                                                       \
    (split == 4 ? pdl_launch(gemv_kernel<M, 4>, blocks, threads, 0, s, y, x, w, out, in, one, none)                   \
                : pdl_launch(gemv_kernel<M, 1>, blocks, threads, 0, s, y, x, w, out, in, one, none))
    switch (rows) {
    case 1: GEMV_LAUNCH(1); break;
    case 2: GEMV_LAUNCH(2); break;
    case 3: GEMV_LAUNCH(3); break;
    default: GEMV_LAUNCH(4); break;
    }
#undef GEMV_LAUNCH
    CUDA_LAUNCHED("the gemv kernel", err);
    return 0;
}

/* The expert gemvs, over pairs or tiles (GemvExperts); over pairs GLU
 * writes the bf16 SiLU x up of gate and up rows (W [experts][2 out, in])
 * with K split as the plain gemv splits 2 out rows, so its bits are
 * cuda_silu_mul's of the plain gemv's sums. (Not over tiles: the FP8 tile
 * gemv at 8 rows spilled with both rows' sums, and steps of that many
 * tokens are bound by their experts' bytes, not by one launch.) */
template <int M, bool GLU>
static void launch_experts(int split, dim3 grid, cudaStream_t s, void *y, const uint16_t *x, const uint16_t *w,
                           int out, int in, const GemvExperts &experts) {
    const CudaGemvNorm none = {};
    if (split == 4)
        pdl_launch(gemv_kernel<M, 4, true, false, GLU>, grid, WARPS_PER_BLOCK * WARP, 0, s, y, x, w, out, in, experts,
                   none);
    else
        pdl_launch(gemv_kernel<M, 1, true, false, GLU>, grid, WARPS_PER_BLOCK * WARP, 0, s, y, x, w, out, in, experts,
                   none);
}

template <bool GLU>
static int gemv_experts(void *y, const uint16_t *x, int x_div, CudaMatrix w, const int32_t *expert_of, int pairs,
                        int out, int in, CudaStream stream, Error *err) {
    if (pairs <= 0 || out <= 0) return 0;
    if (w.scales)
        return cuda_gemv_fp8_experts(y, x, x_div, (const uint8_t *)w.data, w.scales, expert_of, pairs, out, in, GLU,
                                     stream, err);
    if (!cuda_gemv_fits(1, in, x, w.data) || x_div < 1)
        return error_set(err, "expert gemv: rows of %d (a multiple of 8 wide, 16-byte aligned)", in);
    const int split = k_split(GLU ? 2 * out : out, in), outs_per_block = WARPS_PER_BLOCK / split;
    const dim3 grid((unsigned)((out + outs_per_block - 1) / outs_per_block), (unsigned)pairs);
    launch_experts<1, GLU>(split, grid, (cudaStream_t)stream, y, x, (const uint16_t *)w.data, out, in,
                           GemvExperts{expert_of, x_div, NULL, NULL, 0});
    CUDA_LAUNCHED("the expert gemv kernel", err);
    return 0;
}

extern "C" int cuda_gemv_expert_tiles(float *y, const uint16_t *x, CudaMatrix w, const int32_t *tile_expert,
                                      const int32_t *row_token, int tiles, int out, int in, CudaStream stream,
                                      Error *err) {
    if (tiles <= 0 || out <= 0) return 0;
    if (w.scales)
        return cuda_gemv_fp8_expert_tiles(y, x, (const uint8_t *)w.data, w.scales, tile_expert, row_token, tiles, out,
                                          in, stream, err);
    if (!cuda_gemv_fits(1, in, x, w.data))
        return error_set(err, "expert tile gemv: rows of %d (a multiple of 8 wide, 16-byte aligned)", in);
    const int split = k_split(out, in), outs_per_block = WARPS_PER_BLOCK / split;
    const dim3 grid((unsigned)((out + outs_per_block - 1) / outs_per_block), (unsigned)tiles);
    launch_experts<CUDA_GEMV_TILE_ROWS, false>(split, grid, (cudaStream_t)stream, y, x, (const uint16_t *)w.data, out,
                                               in, GemvExperts{NULL, 1, tile_expert, row_token, CUDA_GEMV_TILE_ROWS});
    CUDA_LAUNCHED("the expert tile gemv kernel", err);
    return 0;
}

extern "C" int cuda_gemv_experts(float *y, const uint16_t *x, int x_div, CudaMatrix w, const int32_t *expert_of,
                                 int pairs, int out, int in, CudaStream stream, Error *err) {
    return gemv_experts<false>(y, x, x_div, w, expert_of, pairs, out, in, stream, err);
}

extern "C" int cuda_gemv_experts_glu(uint16_t *act, const uint16_t *x, int x_div, CudaMatrix w,
                                     const int32_t *expert_of, int pairs, int out, int in, CudaStream stream,
                                     Error *err) {
    return gemv_experts<true>(act, x, x_div, w, expert_of, pairs, out, in, stream, err);
}

/* ---- the normalising gemvs (NORM, and GLU for gate/up) ------------------------------------ */

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

extern "C" bool cuda_gemv_norm_fits(int rows, int in, const CudaGemvNorm *norm, CudaMatrix w) {
    return rows >= 1 && rows <= CUDA_GEMV_MAX_ROWS && in > 0 && in % (w.scales ? 16 : 8) == 0 &&
           (size_t)rows * in * sizeof(uint16_t) <= CUDA_GEMV_NORM_MAX_SHARED && norm && norm->x_in && norm->weight &&
           norm->h && (!norm->delta || norm->x_out) && aligned16(norm->x_in) && aligned16(norm->delta) &&
           aligned16(norm->weight) && aligned16(norm->x_out) && ((uintptr_t)norm->h & 7) == 0 && aligned16(w.data);
}

template <int M, bool GLU>
static void launch_gemv_norm(int split, unsigned blocks, size_t shared, cudaStream_t s, void *y, const uint16_t *w,
                             int out, int in, const CudaGemvNorm &norm) {
    const GemvExperts one = {NULL, 1, NULL, NULL, 0};
    if (split == 4)
        pdl_launch(gemv_kernel<M, 4, false, true, GLU>, blocks, WARPS_PER_BLOCK * WARP, shared, s, y, nullptr, w, out, in, one,
                                                                                           norm);
    else
        pdl_launch(gemv_kernel<M, 1, false, true, GLU>, blocks, WARPS_PER_BLOCK * WARP, shared, s, y, nullptr, w, out, in, one,
                                                                                           norm);
}

/* out: the outputs (GLU: the activation's width; W has twice the rows). K is
 * split as the plain gemv splits W's row count, so the sums are its sums. */
template <bool GLU>
static int gemv_norm(void *y, const CudaGemvNorm *norm, CudaMatrix w, int rows, int out, int in, CudaStream stream,
                     Error *err) {
    if (!cuda_gemv_norm_fits(rows, in, norm, w))
        return error_set(err, "normalising gemv: %d rows of %d (1..%d rows, a multiple of %d wide, at most %d bytes "
                              "of bf16 rows, 16-byte aligned)",
                         rows, in, CUDA_GEMV_MAX_ROWS, w.scales ? 16 : 8, CUDA_GEMV_NORM_MAX_SHARED);
    if (out <= 0) return 0;
    if (w.scales)
        return cuda_gemv_fp8_norm(y, norm, (const uint8_t *)w.data, w.scales, rows, out, in, GLU, stream, err);
    const uint16_t *wb = (const uint16_t *)w.data;
    const int split = k_split(GLU ? 2 * out : out, in), outs_per_block = WARPS_PER_BLOCK / split;
    const unsigned blocks = (unsigned)((out + outs_per_block - 1) / outs_per_block);
    const size_t shared = (size_t)rows * in * sizeof(uint16_t);
    cudaStream_t s = (cudaStream_t)stream;
    switch (rows) {
    case 1: launch_gemv_norm<1, GLU>(split, blocks, shared, s, y, wb, out, in, *norm); break;
    case 2: launch_gemv_norm<2, GLU>(split, blocks, shared, s, y, wb, out, in, *norm); break;
    case 3: launch_gemv_norm<3, GLU>(split, blocks, shared, s, y, wb, out, in, *norm); break;
    default: launch_gemv_norm<4, GLU>(split, blocks, shared, s, y, wb, out, in, *norm); break;
    }
    CUDA_LAUNCHED("a normalising gemv kernel", err);
    return 0;
}

extern "C" int cuda_gemv_norm(float *y, const CudaGemvNorm *norm, CudaMatrix w, int rows, int out, int in,
                              CudaStream stream, Error *err) {
    return gemv_norm<false>(y, norm, w, rows, out, in, stream, err);
}

extern "C" int cuda_gemv_norm_glu(uint16_t *act, const CudaGemvNorm *norm, CudaMatrix w, int rows, int out, int in,
                                  CudaStream stream, Error *err) {
    return gemv_norm<true>(act, norm, w, rows, out, in, stream, err);
}
