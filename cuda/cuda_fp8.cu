/*
 * cuda_fp8.cu - the kernels of FP8 weight matrices (see cuda_kernels.h):
 * the few-row product straight from the FP8 bytes, and the dequantization
 * to bf16 that larger batches run cuBLAS on (cuda_matmul.cu).
 *
 * The gemv is cuda_gemv.cu's with one byte a weight: one warp owns one
 * output (a weight row of K bytes), each lane reads 16 weights with one
 * 16-byte load, four loads in flight before their first use (the tail
 * predicated, so short rows keep their loads in flight too), and below
 * 4,096 outputs 2 or 4 warps share an output's K. A 16-weight load never
 * straddles a 128-column tile, so each lane multiplies the partial sum of
 * its 16 products by that tile's scale (cuda_fp8_plan.h's per-row layout)
 * and the warp sums its lanes with shuffles. The conversion is the
 * architecture's (cuda_fp8_convert.h). Scales are read with __ldg (each is
 * read by the 8 lanes of its tile in one instruction, 3% of the bytes),
 * weights with __ldcs (read once). It also runs an MoE decode step's FP8
 * experts, one launch over the routed pairs (cuda_gemv_fp8_experts), and
 * the decode step's normalising forms (cuda_gemv.cu's NORM and GLU).
 */
#include "cuda_bf16.h"
#include "cuda_check.h"
#include "cuda_fp8_convert.h"
#include "cuda_gemv_norm.h"
#include "cuda_gemv_reduce.h"
#include "cuda_pdl.h"
#include "cuda_kernels.h"

#define WARP 32
#define WARPS_PER_BLOCK 8
#define FP8_UNROLL 4
#define DEQUANT_THREADS 256

/* M rows of x [M, K] bf16 times W [N, K] e4m3 with per-row scales ->
 * y [M, N] float32; KSPLIT warps share one output (every KSPLIT-th
 * 512-value chunk of K each), their sums added in shared memory. NORM and
 * GLU as cuda_gemv.cu's: x made in shared memory by the normalising
 * prologue; W [2N, K] (gate rows, then up rows) and y the bf16 SiLU x up. */
template <int M, int KSPLIT, bool EXPERTS = false, bool NORM = false, bool GLU = false>
__global__ void __launch_bounds__(WARPS_PER_BLOCK * WARP)
gemv_fp8_kernel(void *__restrict__ y_out, const uint16_t *__restrict__ x, const uint8_t *__restrict__ w,
                const float *__restrict__ scales, int N, int K, GemvExperts experts, CudaGemvNorm norm) {
    constexpr int OUTS = WARPS_PER_BLOCK / KSPLIT; /* outputs per block */
    constexpr int STEP = KSPLIT * WARP;            /* 16-byte loads between one lane's */
    constexpr int ROWS = GLU ? 2 : 1;              /* weight rows per output */
    extern __shared__ uint4 x_shared[];            /* NORM: [M][K] bf16 */
    void *y = y_out;
    pdl_trigger();
    if (EXPERTS) {
        const long long e = gemv_pair(experts, x, y, (size_t)N * (GLU ? sizeof(uint16_t) : sizeof(float)), K);
        if (e < 0) return; /* the whole block: no barrier is waiting for it */
        const size_t expert_rows = (size_t)e * ROWS * N;
        w += expert_rows * K;
        scales += expert_rows * fp8_col_tiles(K);
    }
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, part = warp % KSPLIT;
    const int n = blockIdx.x * OUTS + warp / KSPLIT;
    const bool valid = n < N;
    const uint4 *w_row[ROWS];
    const float *s_row[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const size_t row = (size_t)r * N + (valid ? n : 0);
        w_row[r] = reinterpret_cast<const uint4 *>(w + row * K);
        s_row[r] = scales + row * fp8_col_tiles(K);
    }
    const int k16_count = valid ? K / 16 : 0, x8_row = K / 8;
    uint4 wr[ROWS][FP8_UNROLL];
    float sc[ROWS][FP8_UNROLL];
    int k16 = part * WARP + lane;
    /* every load of a step issued before any use; the first step's before
     * the wait for the previous kernel and the prologue */
    auto load = [&](int k0) {
#pragma unroll
        for (int r = 0; r < ROWS; r++)
#pragma unroll
            for (int u = 0; u < FP8_UNROLL; u++) {
                const int at = k0 + u * STEP;
                wr[r][u] = at < k16_count ? __ldcs(w_row[r] + at) : make_uint4(0u, 0u, 0u, 0u);
                sc[r][u] = at < k16_count ? __ldg(s_row[r] + at / (FP8_BLOCK / 16)) * FP8_UNIT : 0.0f;
            }
    };
    bool preloaded = !EXPERTS && k16 < k16_count; /* in flight across the waits below (cuda_pdl.h) */
    if (preloaded) load(k16);
    if (!EXPERTS) pdl_wait();
    if (NORM) {
        gemv_normalise<M>(norm, K, reinterpret_cast<uint2 *>(x_shared), warp, lane);
        __syncthreads();
    }
    const uint4 *x8 = NORM ? x_shared : reinterpret_cast<const uint4 *>(x); /* 8 bf16 a load */
    float acc[ROWS * M] = {};                                                /* [r][m] */
    for (; k16 < k16_count; k16 += FP8_UNROLL * STEP) {
        if (!preloaded) load(k16);
        preloaded = false;
#pragma unroll
        for (int u = 0; u < FP8_UNROLL; u++) {
            const int at = k16 + u * STEP;
            if (at >= k16_count) break;
            float wf[ROWS][16];
#pragma unroll
            for (int r = 0; r < ROWS; r++) fp8x16_to_float(wr[r][u], wf[r]);
#pragma unroll
            for (int m = 0; m < M; m++) {
                float xf[16];
                const uint4 *xp = x8 + (size_t)m * x8_row + 2 * at;
                widen8(NORM ? xp[0] : __ldg(xp), xf);
                widen8(NORM ? xp[1] : __ldg(xp + 1), xf + 8);
#pragma unroll
                for (int r = 0; r < ROWS; r++) {
                    float even = 0.0f, odd = 0.0f; /* two chains: half the dependent FMAs */
#pragma unroll
                    for (int e = 0; e < 16; e += 2) {
                        even = fmaf(wf[r][e], xf[e], even);
                        odd = fmaf(wf[r][e + 1], xf[e + 1], odd);
                    }
                    acc[r * M + m] = fmaf(even + odd, sc[r][u], acc[r * M + m]);
                }
            }
        }
    }
    gemv_finish<M, KSPLIT, WARPS_PER_BLOCK, ROWS>(acc, y, N, n, valid, warp, lane, part);
}

extern "C" bool cuda_gemv_fp8_fits(int rows, int in, const void *x, const void *w) {
    return rows >= 1 && rows <= CUDA_GEMV_MAX_ROWS && in > 0 && in % 16 == 0 && ((uintptr_t)x & 15) == 0 &&
           ((uintptr_t)w & 15) == 0;
}

template <int M, bool EXPERTS = false, bool NORM = false, bool GLU = false>
static void launch_gemv_fp8(int split, dim3 blocks, cudaStream_t s, void *y, const uint16_t *x, const uint8_t *w,
                            const float *scales, int out, int in, GemvExperts experts = {NULL, 1, NULL, NULL, 0},
                            const CudaGemvNorm &norm = {}, size_t shared = 0) {
    const unsigned threads = WARPS_PER_BLOCK * WARP;
    if (split == 4)
        pdl_launch(gemv_fp8_kernel<M, 4, EXPERTS, NORM, GLU>, blocks, threads, shared, s, y, x, w, scales, out, in, experts,
                                                                                 norm);
    else if (split == 2)
        pdl_launch(gemv_fp8_kernel<M, 2, EXPERTS, NORM, GLU>, blocks, threads, shared, s, y, x, w, scales, out, in, experts,
                                                                                 norm);
    else
        pdl_launch(gemv_fp8_kernel<M, 1, EXPERTS, NORM, GLU>, blocks, threads, shared, s, y, x, w, scales, out, in, experts,
                                                                                 norm);
}

extern "C" int cuda_gemv_fp8(float *y, const uint16_t *x, const uint8_t *w, const float *scales, int rows,
                             int out, int in, CudaStream stream, Error *err) {
    if (!cuda_gemv_fp8_fits(rows, in, x, w))
        return error_set(err, "FP8 gemv: %d rows of %d (1..%d rows, a multiple of 16 wide, 16-byte aligned)",
                         rows, in, CUDA_GEMV_MAX_ROWS);
    if (out <= 0) return 0;
    const int split = fp8_gemv_k_split(out, in), outs_per_block = WARPS_PER_BLOCK / split;
    const unsigned blocks = (unsigned)((out + outs_per_block - 1) / outs_per_block);
    cudaStream_t s = (cudaStream_t)stream;
    switch (rows) {
    case 1: launch_gemv_fp8<1>(split, blocks, s, y, x, w, scales, out, in); break;
    case 2: launch_gemv_fp8<2>(split, blocks, s, y, x, w, scales, out, in); break;
    case 3: launch_gemv_fp8<3>(split, blocks, s, y, x, w, scales, out, in); break;
    default: launch_gemv_fp8<4>(split, blocks, s, y, x, w, scales, out, in); break;
    }
    CUDA_LAUNCHED("the FP8 gemv kernel", err);
    return 0;
}

extern "C" int cuda_gemv_fp8_experts(void *y, const uint16_t *x, int x_div, const uint8_t *w, const float *scales,
                                     const int32_t *expert_of, int pairs, int out, int in, bool glu,
                                     CudaStream stream, Error *err) {
    if (pairs <= 0 || out <= 0) return 0;
    if (!cuda_gemv_fp8_fits(1, in, x, w) || x_div < 1)
        return error_set(err, "FP8 expert gemv: rows of %d (a multiple of 16 wide, 16-byte aligned)", in);
    const int split = fp8_gemv_k_split(glu ? 2 * out : out, in), outs_per_block = WARPS_PER_BLOCK / split;
    const dim3 grid((unsigned)((out + outs_per_block - 1) / outs_per_block), (unsigned)pairs);
    const GemvExperts experts = {expert_of, x_div, NULL, NULL, 0};
    if (glu) launch_gemv_fp8<1, true, false, true>(split, grid, (cudaStream_t)stream, y, x, w, scales, out, in, experts);
    else launch_gemv_fp8<1, true>(split, grid, (cudaStream_t)stream, y, x, w, scales, out, in, experts);
    CUDA_LAUNCHED("the FP8 expert gemv kernel", err);
    return 0;
}

extern "C" int cuda_gemv_fp8_expert_tiles(float *y, const uint16_t *x, const uint8_t *w, const float *scales,
                                          const int32_t *tile_expert, const int32_t *row_token, int tiles, int out,
                                          int in, CudaStream stream, Error *err) {
    if (tiles <= 0 || out <= 0) return 0;
    if (!cuda_gemv_fp8_fits(1, in, x, w))
        return error_set(err, "FP8 expert tile gemv: rows of %d (a multiple of 16 wide, 16-byte aligned)", in);
    const int split = fp8_gemv_k_split(out, in), outs_per_block = WARPS_PER_BLOCK / split;
    const dim3 grid((unsigned)((out + outs_per_block - 1) / outs_per_block), (unsigned)tiles);
    launch_gemv_fp8<CUDA_GEMV_TILE_ROWS, true>(split, grid, (cudaStream_t)stream, y, x, w, scales, out, in,
                                               GemvExperts{NULL, 1, tile_expert, row_token, CUDA_GEMV_TILE_ROWS});
    CUDA_LAUNCHED("the FP8 expert tile gemv kernel", err);
    return 0;
}

/* The normalising forms (cuda_gemv.cu checked the shapes): K split as the
 * plain FP8 gemv splits W's row count, so the sums are its sums. */
template <bool GLU>
static void launch_gemv_fp8_norm(void *y, const CudaGemvNorm &norm, const uint8_t *w, const float *scales, int rows,
                                 int out, int in, cudaStream_t s) {
    const int split = fp8_gemv_k_split(GLU ? 2 * out : out, in), outs_per_block = WARPS_PER_BLOCK / split;
    const unsigned blocks = (unsigned)((out + outs_per_block - 1) / outs_per_block);
    const size_t shared = (size_t)rows * in * sizeof(uint16_t);
    const GemvExperts one = {NULL, 1, NULL, NULL, 0};
    switch (rows) {
    case 1: launch_gemv_fp8<1, false, true, GLU>(split, blocks, s, y, NULL, w, scales, out, in, one, norm, shared); break;
    case 2: launch_gemv_fp8<2, false, true, GLU>(split, blocks, s, y, NULL, w, scales, out, in, one, norm, shared); break;
    case 3: launch_gemv_fp8<3, false, true, GLU>(split, blocks, s, y, NULL, w, scales, out, in, one, norm, shared); break;
    default: launch_gemv_fp8<4, false, true, GLU>(split, blocks, s, y, NULL, w, scales, out, in, one, norm, shared); break;
    }
}

extern "C" int cuda_gemv_fp8_norm(void *y, const CudaGemvNorm *norm, const uint8_t *w, const float *scales, int rows,
                                  int out, int in, bool glu, CudaStream stream, Error *err) {
    if (glu) launch_gemv_fp8_norm<true>(y, *norm, w, scales, rows, out, in, (cudaStream_t)stream);
    else launch_gemv_fp8_norm<false>(y, *norm, w, scales, rows, out, in, (cudaStream_t)stream);
    CUDA_LAUNCHED("a normalising FP8 gemv kernel", err);
    return 0;
}

/* ---- dequantization to bf16 -------------------------------------------------------------- */

/* 16 values a thread: cols a multiple of 16, so a 16-byte group lies in one
 * row and one 128-column tile. */
__global__ void __launch_bounds__(DEQUANT_THREADS)
fp8_dequantize16_kernel(uint4 *__restrict__ dst, const uint4 *__restrict__ w, const float *__restrict__ scales,
                        size_t groups, int cols) {
    const int per_row = cols / 16, tiles = fp8_col_tiles(cols);
    for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += (size_t)gridDim.x * blockDim.x) {
        const size_t row = g / (size_t)per_row;
        const int c16 = (int)(g - row * (size_t)per_row);
        const float s = __ldg(scales + row * tiles + c16 / (FP8_BLOCK / 16)) * FP8_UNIT;
        float f[16];
        fp8x16_to_float(__ldcs(w + g), f);
        uint32_t p[8];
#pragma unroll
        for (int i = 0; i < 8; i++) p[i] = pack_bf16x2(f[2 * i] * s, f[2 * i + 1] * s);
        dst[2 * g] = make_uint4(p[0], p[1], p[2], p[3]);
        dst[2 * g + 1] = make_uint4(p[4], p[5], p[6], p[7]);
    }
}

/* One value a thread, any shape. */
__global__ void fp8_dequantize1_kernel(uint16_t *__restrict__ dst, const uint8_t *__restrict__ w,
                                       const float *__restrict__ scales, size_t n, int cols) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = i / (size_t)cols;
        const int col = (int)(i - row * (size_t)cols);
        float f[4];
        fp8x4_to_float(w[i], f);
        dst[i] = float_to_bf16_bits(f[0] * (scales[fp8_row_scale_index((int)row, col, cols)] * FP8_UNIT));
    }
}

static unsigned grid_for(size_t items) {
    size_t blocks = (items + DEQUANT_THREADS - 1) / DEQUANT_THREADS;
    return (unsigned)(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

extern "C" int cuda_fp8_dequantize(uint16_t *dst, const uint8_t *w, const float *scales, int rows, int cols,
                                   CudaStream stream, Error *err) {
    if (rows <= 0 || cols <= 0) return 0;
    cudaStream_t s = (cudaStream_t)stream;
    const size_t n = (size_t)rows * (size_t)cols;
    if (cols % 16 == 0 && ((uintptr_t)w & 15) == 0 && ((uintptr_t)dst & 15) == 0) {
        fp8_dequantize16_kernel<<<grid_for(n / 16), DEQUANT_THREADS, 0, s>>>(
            reinterpret_cast<uint4 *>(dst), reinterpret_cast<const uint4 *>(w), scales, n / 16, cols);
    } else {
        fp8_dequantize1_kernel<<<grid_for(n), DEQUANT_THREADS, 0, s>>>(dst, w, scales, n, cols);
    }
    CUDA_LAUNCHED("the FP8 dequantization kernel", err);
    return 0;
}
