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
 */
#include "cuda_bf16.h"
#include "cuda_check.h"
#include "cuda_gemv_reduce.h"
#include "cuda_kernels.h"

#define WARP 32
#define WARPS_PER_BLOCK 8
#define GEMV_UNROLL 4

/* M rows of x [M, K] bf16 times W [N, K] bf16 -> y [M, N] float32. KSPLIT
 * warps share one output, each taking every KSPLIT-th 256-wide chunk of K,
 * their sums added in shared memory: for small N (Qwen3-0.6B's o_proj and
 * down_proj have 1,024 outputs) one warp an output would leave each warp
 * several load round trips deep in K with too few warps to cover them. */
template <int M, int KSPLIT, bool EXPERTS = false>
__global__ void __launch_bounds__(WARPS_PER_BLOCK * WARP)
gemv_kernel(float *__restrict__ y, const uint16_t *__restrict__ x, const uint16_t *__restrict__ w, int N, int K,
            GemvExperts experts) {
    constexpr int OUTS = WARPS_PER_BLOCK / KSPLIT; /* outputs per block */
    if (EXPERTS) w += gemv_pair(experts, x, y, N, K) * N * K;
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, part = warp % KSPLIT;
    const int n = blockIdx.x * OUTS + warp / KSPLIT;
    const bool valid = n < N;
    const uint4 *w_row = reinterpret_cast<const uint4 *>(w + (size_t)(valid ? n : 0) * K);
    const uint4 *x4 = reinterpret_cast<const uint4 *>(x);
    const int k8_count = valid ? K / 8 : 0;
    float acc[M] = {};
    /* chunk c (32 lanes x 8 elements) of this warp: c = part + KSPLIT * j */
    int k8 = part * WARP + lane;
    for (; k8 + (GEMV_UNROLL - 1) * KSPLIT * WARP < k8_count; k8 += GEMV_UNROLL * KSPLIT * WARP) {
        uint4 wr[GEMV_UNROLL];
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) wr[u] = __ldcs(w_row + k8 + u * KSPLIT * WARP); /* read once */
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            float wf[8];
            widen8(wr[u], wf);
#pragma unroll
            for (int m = 0; m < M; m++) {
                float xf[8];
                widen8(__ldg(x4 + (size_t)m * k8_count + k8 + u * KSPLIT * WARP), xf);
#pragma unroll
                for (int e = 0; e < 8; e++) acc[m] = fmaf(wf[e], xf[e], acc[m]);
            }
        }
    }
    for (; k8 < k8_count; k8 += KSPLIT * WARP) { /* the remainder */
        float wf[8];
        widen8(__ldcs(w_row + k8), wf);
#pragma unroll
        for (int m = 0; m < M; m++) {
            float xf[8];
            widen8(__ldg(x4 + (size_t)m * k8_count + k8), xf);
#pragma unroll
            for (int e = 0; e < 8; e++) acc[m] = fmaf(wf[e], xf[e], acc[m]);
        }
    }
    gemv_reduce_store<M, KSPLIT, WARPS_PER_BLOCK>(acc, y, N, n, valid, warp, lane, part);
}

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
    const GemvExperts one = {NULL, 1};
#define GEMV_LAUNCH(M)                                                                                       \
    (split == 4 ? gemv_kernel<M, 4><<<blocks, threads, 0, s>>>(y, x, w, out, in, one)                         \
                : gemv_kernel<M, 1><<<blocks, threads, 0, s>>>(y, x, w, out, in, one))
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

extern "C" int cuda_gemv_experts(float *y, const uint16_t *x, int x_div, CudaMatrix w, const int32_t *expert_of,
                                 int pairs, int out, int in, CudaStream stream, Error *err) {
    if (pairs <= 0 || out <= 0) return 0;
    if (w.scales)
        return cuda_gemv_fp8_experts(y, x, x_div, (const uint8_t *)w.data, w.scales, expert_of, pairs, out, in,
                                     stream, err);
    if (!cuda_gemv_fits(1, in, x, w.data) || x_div < 1)
        return error_set(err, "expert gemv: rows of %d (a multiple of 8 wide, 16-byte aligned)", in);
    const int split = k_split(out, in), outs_per_block = WARPS_PER_BLOCK / split;
    const dim3 grid((unsigned)((out + outs_per_block - 1) / outs_per_block), (unsigned)pairs);
    const GemvExperts experts = {expert_of, x_div};
    const uint16_t *wb = (const uint16_t *)w.data;
    cudaStream_t s = (cudaStream_t)stream;
    if (split == 4) gemv_kernel<1, 4, true><<<grid, WARPS_PER_BLOCK * WARP, 0, s>>>(y, x, wb, out, in, experts);
    else gemv_kernel<1, 1, true><<<grid, WARPS_PER_BLOCK * WARP, 0, s>>>(y, x, wb, out, in, experts);
    CUDA_LAUNCHED("the expert gemv kernel", err);
    return 0;
}
