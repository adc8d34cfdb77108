/*
 * cuda_gdn_plan.h - how the Gated DeltaNet kernels (cuda_gated_deltanet.cu)
 * divide their work and where they find things, in plain C for the kernels
 * and for a CPU test (tests/test_gdn_plan.c).
 *
 * Two launches per layer (three for a call with a long prompt: the chunked
 * kernels of cuda_gdn_chunk.h in place of the head kernel):
 *  - conv: a block per (sequence, tile of GDN_CONV_CHANNELS channels) runs
 *    the causal conv + SiLU in place over the sequence's qkv rows, in tiles
 *    of GDN_CONV_TILE_ROWS rows staged in shared memory behind a halo of the
 *    K-1 previous raw rows (the conv state at first), so no row is
 *    overwritten before the rows after it have read it; the halo left at the
 *    end is the new conv state.
 *  - head: a block per (sequence, value head) holds the head's [dk][dv]
 *    state in registers for the whole call: thread (g, c) owns column c and
 *    rows [g * R, g * R + R) of the key dim (gdn_head_plan), so the state is
 *    read from global memory once and written once whatever the row count.
 *    Rows go through in chunks of GDN_HEAD_CHUNK: their normalised q and k,
 *    v, exp(g), beta and q.k staged in shared memory by warps in parallel,
 *    then the recurrent step row by row, then the gated norm of the chunk's
 *    outputs by warps in parallel.
 *
 * The state pool has the CPU runner's layout (cpu/cpu_runner.c): slot-major,
 * then linear layer, then per layer the conv state [K-1][conv_dim] and the
 * recurrent state [Hv][dk][dv], float32. A launch gets the address of slot
 * 0's part for its layer and the floats between slots; each sequence's slot
 * number is read from device memory (CudaGdnSeq), so a CUDA graph replays
 * with new slots and row counts without new pointers.
 */
#ifndef NANOVLLM_CUDA_GDN_PLAN_H
#define NANOVLLM_CUDA_GDN_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define GDN_PLAN_FN __host__ __device__ static inline
#else
#define GDN_PLAN_FN static inline
#endif

/* The shape, as cpu_gated_deltanet.h's GdnShape (same fields, same order). */
typedef struct CudaGdnShape {
    int num_k_heads, num_v_heads; /* Hk, Hv; Hv a multiple of Hk */
    int k_dim, v_dim;             /* dk, dv per head */
    int conv_kernel;              /* 2 <= K <= GDN_MAX_CONV_KERNEL */
    float norm_eps;               /* rms_norm_eps of the gated output norm */
    bool value_heads_tiled;       /* value head v reads key head v % Hk, not v / (Hv / Hk) */
} CudaGdnShape;

/* One sequence of a call, in device memory (16 bytes). */
typedef struct CudaGdnSeq {
    int32_t first_row, num_rows; /* its new tokens: rows [first_row, first_row + num_rows) */
    int32_t slot;                /* its state slot */
    int32_t fresh;               /* nonzero: position 0, both states zeroed first */
} CudaGdnSeq;

#define GDN_CONV_CHANNELS 32  /* channels per conv block: one warp's coalesced row piece */
#define GDN_CONV_ROW_LANES 8  /* rows of a tile worked at once: 256 threads */
#define GDN_CONV_THREADS (GDN_CONV_CHANNELS * GDN_CONV_ROW_LANES)
#define GDN_CONV_TILE_ROWS 64 /* rows staged per tile */
#define GDN_MAX_CONV_KERNEL 8 /* K - 1 halo rows: one row lane each */

#define GDN_HEAD_CHUNK 16      /* rows staged in shared memory at once */
#define GDN_HEAD_MAX_ROWS 32   /* state rows one thread holds in registers */
#define GDN_HEAD_MIN_THREADS 128
#define GDN_HEAD_MAX_THREADS 512 /* __launch_bounds__: 128 registers a thread */
#define GDN_QK_EPS 1e-6f       /* inside the L2 norms' sqrt */

GDN_PLAN_FN size_t gdn_plan_conv_dim(const CudaGdnShape *s) {
    return 2 * (size_t)s->num_k_heads * s->k_dim + (size_t)s->num_v_heads * s->v_dim;
}
GDN_PLAN_FN size_t gdn_plan_conv_state_floats(const CudaGdnShape *s) {
    return (size_t)(s->conv_kernel - 1) * gdn_plan_conv_dim(s);
}
GDN_PLAN_FN size_t gdn_plan_recurrent_state_floats(const CudaGdnShape *s) {
    return (size_t)s->num_v_heads * s->k_dim * s->v_dim;
}

/* Where a sequence's states for the launch's layer start: `layer_base` is
 * slot 0's part for that layer, slot_floats the floats per slot (all
 * linear layers' conv + recurrent states). */
GDN_PLAN_FN size_t gdn_plan_conv_state_offset(int32_t slot, size_t slot_floats) {
    return (size_t)slot * slot_floats;
}
GDN_PLAN_FN size_t gdn_plan_recurrent_state_offset(const CudaGdnShape *s, int32_t slot, size_t slot_floats,
                                                   int head) {
    return (size_t)slot * slot_floats + gdn_plan_conv_state_floats(s) + (size_t)head * s->k_dim * s->v_dim;
}

/* Conv blocks along the channels (the grid's x; y is the sequence). */
GDN_PLAN_FN int gdn_plan_conv_blocks(const CudaGdnShape *s) {
    return (int)((gdn_plan_conv_dim(s) + GDN_CONV_CHANNELS - 1) / GDN_CONV_CHANNELS);
}

/* The head block's division of the state: row_groups groups of dv threads,
 * group g holding rows [g * rows, min(dk, g * rows + rows)) of every column;
 * threads = row_groups * dv rounded up to whole warps (the rest idle in the
 * recurrence but staging and norming with the others). Enough groups that a
 * thread holds at most GDN_HEAD_MAX_ROWS rows, and more while the block has
 * under GDN_HEAD_MIN_THREADS threads (small heads). */
typedef struct GdnHeadPlan {
    int row_groups, rows, threads;
} GdnHeadPlan;

GDN_PLAN_FN GdnHeadPlan gdn_head_plan(int dk, int dv) {
    GdnHeadPlan p;
    int g = (dk + GDN_HEAD_MAX_ROWS - 1) / GDN_HEAD_MAX_ROWS;
    while (g < dk && g * dv < GDN_HEAD_MIN_THREADS) g++;
    p.rows = (dk + g - 1) / g;
    p.row_groups = (dk + p.rows - 1) / p.rows; /* no empty group */
    p.threads = (p.row_groups * dv + 31) / 32 * 32;
    return p;
}

/* The head block's dynamic shared memory, floats from the start:
 *   q [C][dk], k [C][dk]  normalised (q with 1/sqrt(dk))
 *   v [C][dv], o [C][dv]  the value rows, the delta rule's outputs
 *   red [2][2][groups][dv] per-group partial k.S and q.S (two tokens' worth:
 *                         one barrier per token)
 *   sc [C][4]             exp(g), beta, q.k, unused */
typedef struct GdnHeadSmem {
    size_t q, k, v, o, red, sc, floats;
} GdnHeadSmem;

GDN_PLAN_FN GdnHeadSmem gdn_head_smem(int dk, int dv, int row_groups) {
    GdnHeadSmem m;
    const size_t C = GDN_HEAD_CHUNK;
    m.q = 0;
    m.k = m.q + C * dk;
    m.v = m.k + C * dk;
    m.o = m.v + C * dv;
    m.red = m.o + C * dv;
    m.sc = m.red + 4 * (size_t)row_groups * dv;
    m.floats = m.sc + 4 * C;
    return m;
}

/* Whether the kernels take this shape: 0, or why not (a static string). */
GDN_PLAN_FN const char *gdn_plan_check(const CudaGdnShape *s) {
    if (s->num_k_heads <= 0 || s->num_v_heads <= 0 || s->num_v_heads % s->num_k_heads)
        return "value heads must be a positive multiple of key heads";
    if (s->k_dim <= 0 || s->v_dim <= 0) return "head dims must be positive";
    if (s->conv_kernel < 2 || s->conv_kernel > GDN_MAX_CONV_KERNEL) return "conv kernel outside 2..8";
    if (gdn_head_plan(s->k_dim, s->v_dim).threads > GDN_HEAD_MAX_THREADS)
        return "head state too large for one block's registers (dk * dv over 512 x 32)";
    return 0;
}

#endif
