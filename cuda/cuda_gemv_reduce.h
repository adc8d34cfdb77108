/*
 * cuda_gemv_reduce.h - the end every gemv kernel shares (cuda_gemv.cu's bf16
 * one, cuda_fp8.cu's FP8 one): each warp's lanes summed with shuffles, then
 * the KSPLIT warps that share an output (consecutive in the block) added in
 * shared memory, one store per output and row.
 */
#ifndef NANOVLLM_CUDA_GEMV_REDUCE_H
#define NANOVLLM_CUDA_GEMV_REDUCE_H

/* acc[m]: this lane's partial sum for row m of output n (valid: n < N);
 * warp / lane: this thread's place in a block of WARPS warps; part: which
 * of the output's KSPLIT warps this is. y is [M, N]. */
template <int M, int KSPLIT, int WARPS>
__device__ __forceinline__ void gemv_reduce_store(float (&acc)[M], float *__restrict__ y, int N, int n,
                                                  bool valid, int warp, int lane, int part) {
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (int o = 16; o > 0; o /= 2) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
    if (KSPLIT == 1) {
        if (valid && lane == 0)
#pragma unroll
            for (int m = 0; m < M; m++) y[(size_t)m * N + n] = acc[m];
        return;
    }
    __shared__ float partial[WARPS][M];
    if (lane == 0)
#pragma unroll
        for (int m = 0; m < M; m++) partial[warp][m] = acc[m];
    __syncthreads();
    if (valid && part == 0 && lane < M) {
        float sum = 0.0f;
#pragma unroll
        for (int p = 0; p < KSPLIT; p++) sum += partial[warp + p][lane];
        y[(size_t)lane * N + n] = sum;
    }
}

#endif
