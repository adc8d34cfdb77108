/*
 * cuda_gemv_reduce.h - the end every gemv kernel shares (cuda_gemv.cu's bf16
 * one, cuda_fp8.cu's FP8 one): each warp's lanes summed with shuffles, then
 * the KSPLIT warps that share an output (consecutive in the block) added in
 * shared memory, one store per output and row (or, for the gate/up gemv,
 * one SiLU x up) - and the offsets of a launch over an MoE step's routed
 * pairs (GemvExperts).
 */
#ifndef NANOVLLM_CUDA_GEMV_REDUCE_H
#define NANOVLLM_CUDA_GEMV_REDUCE_H

#include "cuda_fused_math.h"
#include "cuda_pdl.h"

/* acc[m]: this lane's partial sum for row m of its output; warp / lane:
 * this thread's place in a block of WARPS warps; part: which of the
 * output's KSPLIT warps this is. Sums the lanes, then the KSPLIT warps in
 * order, into acc of the output's lead thread (lane 0 of part 0), and
 * returns whether this is it. Every thread of the block must call it. */
template <int M, int KSPLIT, int WARPS>
__device__ __forceinline__ bool gemv_reduce(float (&acc)[M], int warp, int lane, int part) {
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (int o = 16; o > 0; o /= 2) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
    if (KSPLIT == 1) return lane == 0;
    __shared__ float partial[WARPS][M];
    if (lane == 0)
#pragma unroll
        for (int m = 0; m < M; m++) partial[warp][m] = acc[m];
    __syncthreads();
    if (part != 0 || lane != 0) return false;
#pragma unroll
    for (int m = 0; m < M; m++) {
        float sum = 0.0f;
#pragma unroll
        for (int p = 0; p < KSPLIT; p++) sum += partial[warp + p][m];
        acc[m] = sum;
    }
    return true;
}

/* The sums into y [M, N] at column n (valid: n < N). */
template <int M, int KSPLIT, int WARPS>
__device__ __forceinline__ void gemv_reduce_store(float (&acc)[M], float *__restrict__ y, int N, int n,
                                                  bool valid, int warp, int lane, int part) {
    if (gemv_reduce<M, KSPLIT, WARPS>(acc, warp, lane, part) && valid)
#pragma unroll
        for (int m = 0; m < M; m++) y[(size_t)m * N + n] = acc[m];
}

/* The end of a gemv: ROWS = 1, acc [M] into y [M, N] as float32; ROWS =
 * 2 (GLU), acc [2][M] (gate, up) into y_out [M, N] as the bf16 SiLU x up. */
template <int M, int KSPLIT, int WARPS, int ROWS>
__device__ __forceinline__ void gemv_finish(float (&acc)[ROWS * M], void *__restrict__ y_out, int N, int n,
                                            bool valid, int warp, int lane, int part) {
    if constexpr (ROWS == 1) {
        gemv_reduce_store<M, KSPLIT, WARPS>(acc, static_cast<float *>(y_out), N, n, valid, warp, lane, part);
    } else if (gemv_reduce<ROWS * M, KSPLIT, WARPS>(acc, warp, lane, part) && valid) {
        uint16_t *act = static_cast<uint16_t *>(y_out);
#pragma unroll
        for (int m = 0; m < M; m++) act[(size_t)m * N + n] = float_to_bf16_bits(silu_mul1(acc[m], acc[M + m]));
    }
}

/* A gemv launched once over an MoE step's rows, grid y the unit of work:
 *  - pairs (tile_expert NULL): pair p = blockIdx.y multiplies x's row
 *    p / x_div (the token's hidden row for gate/up, x_div = k; the pair's
 *    own activation row for down, x_div = 1) by its expert's matrix,
 *    experts stacked [experts][N, K], into y's row p;
 *  - tiles (tile_expert set): the rows laid out by expert in tiles of
 *    `rows` (the gemv's M; cuda_moe.cu's align), block y taking tile y:
 *    tile_expert[y] names the expert (-1: past the used rows), and a first
 *    row with row_token -1 means only padding follows;
 * expert_of NULL and tile_expert NULL: one matrix, grid y 1. */
struct GemvExperts {
    const int32_t *expert_of;
    int x_div;
    const int32_t *tile_expert, *row_token;
    int rows;
};

/* This block's expert (0 for a plain launch; -1: nothing to do, the whole
 * block returns), and x and y moved to its rows (y's rows y_row_bytes
 * apart: N float32 sums, or the GLU's N bf16 activations). The routing is
 * the previous kernels' output: a programmatic launch waits for it first. */
__device__ __forceinline__ long long gemv_pair(GemvExperts g, const uint16_t *__restrict__ &x, void *&y,
                                               size_t y_row_bytes, int K) {
    pdl_wait();
    char *y_bytes = static_cast<char *>(y);
    if (g.tile_expert) {
        const int first = blockIdx.y * g.rows, e = g.tile_expert[blockIdx.y];
        if (e < 0 || g.row_token[first] < 0) return -1;
        x += (size_t)first * K;
        y = y_bytes + (size_t)first * y_row_bytes;
        return e;
    }
    if (!g.expert_of) return 0;
    const int p = blockIdx.y;
    x += (size_t)(p / g.x_div) * K;
    y = y_bytes + (size_t)p * y_row_bytes;
    return g.expert_of[p];
}

#endif
