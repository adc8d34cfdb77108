/*
 * cuda_moe.cu - the MoE layer's kernels (see cuda_moe.h).
 *
 * Written for clarity first, as the other kernels here: a warp per token to
 * route, one block to lay out the rows, a WMMA GEMM where each warp owns a
 * 16 x 16 output tile and streams its expert's weight rows from global
 * memory (decode reads each routed expert's matrices once per tile of 16
 * rows, i.e. once for a small batch, which is what bounds it). Steps of up
 * to CUDA_MOE_GEMV_MAX_TOKENS tokens skip the layout: each (token, choice)
 * pair is a row of the gemv kernels (cuda_gemv_experts), which read a
 * weight row with whole 16-byte loads per lane where the WMMA tile reads 32
 * bytes of each of 16 rows. Larger steps whose experts average few rows
 * (decode batches) pad the groups to 8 rows instead of 16 and multiply
 * them with the gemv kernels, a tile a block (cuda_gemv_expert_tiles).
 * NANOVLLM_CUDA_LEGACY=moe keeps the GEMM for both. The arithmetic mirrors
 * cpu_moe.c: float32 softmax, the same tie rule, the same order of the
 * weighted sum.
 */
#include <cuda_bf16.h>
#include <mma.h>

#include <limits.h>
#include <math.h>
#include <string.h>

#include "cuda_bf16.h"
#include "cuda_check.h"
#include "cuda_fp8_convert.h"
#include "cuda_moe.h"
#include "cuda_variants.h"

using namespace nvcuda;

#define WARP 32
#define TILE 16 /* rows per tile: WMMA's M */
#define GEMM_WARPS 4
#define MAX_EXPERTS 2048 /* counts, offsets and fill in 48 KiB of shared memory */
#define ALIGN_THREADS 1024
#define ROW_THREADS 256

static cudaStream_t as_stream(CudaStream s) { return (cudaStream_t)s; }


/* ---- route: one warp per token --------------------------------------------------------- */

__global__ void route_kernel(int32_t *ids, float *weights, const float *logits, int T, int E, int k,
                             int norm) {
    int lane = threadIdx.x % WARP;
    int t = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (t >= T) return;
    const float *l = logits + (size_t)t * E;
    float top = -INFINITY;
    for (int e = lane; e < E; e += WARP) top = fmaxf(top, l[e]);
    for (int o = WARP / 2; o > 0; o /= 2) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, o));
    float sum = 0.0f;
    for (int e = lane; e < E; e += WARP) sum += expf(l[e] - top);
    for (int o = WARP / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    int32_t *out_ids = ids + (size_t)t * k;
    float *out_w = weights + (size_t)t * k;
    float kept = 0.0f;
    for (int j = 0; j < k; j++) {
        /* The largest untaken probability, the lower id among equals; NaN
         * counts as -inf, so garbage still routes to valid experts. */
        float best = -INFINITY;
        int best_id = INT_MAX;
        for (int e = lane; e < E; e += WARP) {
            bool taken = false;
            for (int q = 0; q < j; q++) taken |= out_ids[q] == e;
            if (taken) continue;
            float p = expf(l[e] - top) / sum;
            if (p != p) p = -INFINITY;
            if (p > best || (p == best && e < best_id)) {
                best = p;
                best_id = e;
            }
        }
        for (int o = WARP / 2; o > 0; o /= 2) {
            float other = __shfl_xor_sync(0xffffffffu, best, o);
            int other_id = __shfl_xor_sync(0xffffffffu, best_id, o);
            if (other > best || (other == best && other_id < best_id)) {
                best = other;
                best_id = other_id;
            }
        }
        if (lane == 0) {
            out_ids[j] = best_id;
            out_w[j] = best;
        }
        kept += best;
        __syncwarp(); /* lane 0's write is seen by the next choice's scan */
    }
    if (norm && lane == 0)
        for (int j = 0; j < k; j++) out_w[j] /= kept;
}

/* ---- align: rows grouped by expert, groups padded to whole tiles ------------------------- */

__global__ void align_kernel(int32_t *row_token, int32_t *pair_row, int32_t *tile_expert,
                             int32_t *used_rows, const int32_t *ids, int pairs, int E, int k,
                             int max_rows, int tile_rows) {
    __shared__ int32_t count[MAX_EXPERTS], offset[MAX_EXPERTS + 1], fill[MAX_EXPERTS];
    for (int e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < pairs; i += blockDim.x) atomicAdd(&count[ids[i]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int at = 0;
        for (int e = 0; e < E; e++) {
            offset[e] = at;
            at += (count[e] + tile_rows - 1) / tile_rows * tile_rows;
        }
        offset[E] = at;
        *used_rows = at;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) fill[e] = offset[e];
    for (int r = threadIdx.x; r < max_rows; r += blockDim.x) row_token[r] = -1;
    for (int tile = threadIdx.x; tile < max_rows / tile_rows; tile += blockDim.x) {
        int r = tile * tile_rows, expert = -1;
        if (r < offset[E]) { /* the last e with offset[e] <= r: binary search */
            int lo = 0, hi = E - 1;
            while (lo < hi) {
                int mid = (lo + hi + 1) / 2;
                if (offset[mid] <= r) lo = mid;
                else hi = mid - 1;
            }
            expert = lo;
        }
        tile_expert[tile] = expert;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
        int r = atomicAdd(&fill[ids[i]], 1); /* order within a group does not change any result */
        row_token[r] = i / k;
        pair_row[i] = r;
    }
}

/* ---- gather, combine -------------------------------------------------------------- */

__global__ void gather_kernel(uint16_t *x, const uint16_t *h, const int32_t *row_token,
                              const int32_t *used_rows, int H) {
    int r = blockIdx.x;
    if (r >= *used_rows) return;
    int t = row_token[r];
    uint16_t *dst = x + (size_t)r * H;
    for (int i = threadIdx.x; i < H; i += blockDim.x) dst[i] = t >= 0 ? h[(size_t)t * H + i] : 0;
}

/* pair_row NULL: pair i's row is row i (the expert gemvs' layout). */
__global__ void combine_kernel(float *delta, const float *y, const int32_t *pair_row,
                               const float *weights, int k, int H) {
    int t = blockIdx.x;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < k; j++)
            acc += weights[t * k + j] * y[(size_t)(pair_row ? pair_row[t * k + j] : t * k + j) * H + i];
        delta[(size_t)t * H + i] = acc;
    }
}

/* ---- the grouped GEMM: y[tile rows, N] = x[tile rows, K] . w[expert][N, K]^T ------------- */

__global__ void __launch_bounds__(GEMM_WARPS * WARP)
grouped_gemm_kernel(float *y, const uint16_t *x, const uint16_t *w, size_t expert_elems,
                    const int32_t *tile_expert, int N, int K) {
    int tile = blockIdx.y;
    int e = tile_expert[tile];
    int n0 = (blockIdx.x * GEMM_WARPS + threadIdx.x / WARP) * 16;
    if (e < 0 || n0 >= N) return; /* a whole warp leaves: no block-wide barrier follows */
    const __nv_bfloat16 *a = (const __nv_bfloat16 *)x + (size_t)tile * TILE * K;
    const __nv_bfloat16 *b = (const __nv_bfloat16 *)w + (size_t)e * expert_elems + (size_t)n0 * K;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k0 = 0; k0 < K; k0 += 16) {
        wmma::load_matrix_sync(fa, a + k0, K); /* x row-major, rows of K */
        wmma::load_matrix_sync(fb, b + k0, K); /* w[n][k] read as a column-major K x 16 */
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(y + (size_t)tile * TILE * N + n0, acc, N, wmma::mem_row_major);
}

/* The same over FP8 experts (per-row scales, cuda_fp8_plan.h): each warp
 * turns its 16 x 16 tile of w into bf16 in shared memory - lane l takes row
 * l / 2, 8 bytes at column (l % 2) * 8, and its row's scale - and WMMA
 * reads it from there. The next tile's bytes are loaded before this one's
 * product. N and K are multiples of 16 (cuda_moe_create). */
__global__ void __launch_bounds__(GEMM_WARPS * WARP)
grouped_gemm_fp8_kernel(float *y, const uint16_t *x, const uint8_t *w, const float *scales,
                        const int32_t *tile_expert, int N, int K) {
    __shared__ __align__(32) uint16_t stage[GEMM_WARPS][16 * 16];
    const int tile = blockIdx.y, warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int e = tile_expert[tile];
    const int n0 = (blockIdx.x * GEMM_WARPS + warp) * 16;
    if (e < 0 || n0 >= N) return; /* a whole warp leaves: only warp-level barriers follow */
    const __nv_bfloat16 *a = (const __nv_bfloat16 *)x + (size_t)tile * TILE * K;
    const size_t row = (size_t)e * N + n0 + lane / 2;
    const uint2 *b = reinterpret_cast<const uint2 *>(w + row * K + (lane % 2) * 8); /* 8 bytes a step of 16 */
    const float *s_row = scales + row * fp8_col_tiles(K);
    uint16_t *mine = &stage[warp][(lane / 2) * 16 + (lane % 2) * 8];
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    uint2 raw = __ldcs(b);
    for (int k0 = 0; k0 < K; k0 += 16) {
        const uint2 next = k0 + 16 < K ? __ldcs(b + (k0 + 16) / 8) : raw;
        const float s = __ldg(s_row + k0 / FP8_BLOCK) * FP8_UNIT;
        float f[8];
        fp8x4_to_float(raw.x, f);
        fp8x4_to_float(raw.y, f + 4);
        *reinterpret_cast<uint4 *>(mine) = make_uint4(pack_bf16x2(f[0] * s, f[1] * s), pack_bf16x2(f[2] * s, f[3] * s),
                                                      pack_bf16x2(f[4] * s, f[5] * s), pack_bf16x2(f[6] * s, f[7] * s));
        __syncwarp();
        wmma::load_matrix_sync(fa, a + k0, K);
        wmma::load_matrix_sync(fb, (const __nv_bfloat16 *)stage[warp], 16); /* [n][k]: column-major K x 16 */
        wmma::mma_sync(acc, fa, fb, acc);
        __syncwarp(); /* every lane's reads of the tile done before the next is written */
        raw = next;
    }
    wmma::store_matrix_sync(y + (size_t)tile * TILE * N + n0, acc, N, wmma::mem_row_major);
}

/* y = x w^T per tile, w the tile's expert's [N, K] of w [experts][N, K]:
 * bf16 (w.scales NULL) or FP8. */
static int grouped_gemm(float *y, const uint16_t *x, CudaMatrix w, const int32_t *tile_expert, int tiles,
                        int N, int K, cudaStream_t s, Error *err) {
    dim3 grid((unsigned)((N + 16 * GEMM_WARPS - 1) / (16 * GEMM_WARPS)), (unsigned)tiles);
    if (w.scales)
        grouped_gemm_fp8_kernel<<<grid, GEMM_WARPS * WARP, 0, s>>>(y, x, (const uint8_t *)w.data, w.scales,
                                                                   tile_expert, N, K);
    else
        grouped_gemm_kernel<<<grid, GEMM_WARPS * WARP, 0, s>>>(y, x, (const uint16_t *)w.data, (size_t)N * K,
                                                               tile_expert, N, K);
    CUDA_LAUNCHED("the grouped expert GEMM", err);
    return 0;
}

/* ---- launchers --------------------------------------------------------------------------- */

/* Rows of a step's layout when every expert's group is padded to whole
 * tiles of tile_rows. */
static int layout_rows(int T, int experts, int k, int tile_rows) {
    long rows = (long)T * k + (long)experts * (tile_rows - 1);
    return (int)((rows + tile_rows - 1) / tile_rows * tile_rows);
}

extern "C" int cuda_moe_max_rows(int T, int experts, int k) { return layout_rows(T, experts, k, TILE); }

extern "C" int cuda_moe_route(int32_t *ids, float *weights, const float *logits, int T, int experts,
                              int k, bool norm, CudaStream stream, Error *err) {
    if (T <= 0) return 0;
    int per_block = ROW_THREADS / WARP;
    route_kernel<<<(T + per_block - 1) / per_block, ROW_THREADS, 0, as_stream(stream)>>>(
        ids, weights, logits, T, experts, k, norm ? 1 : 0);
    CUDA_LAUNCHED("the MoE routing kernel", err);
    return 0;
}

/* Whether a step of T tokens takes the expert gemvs: a few tokens, so
 * each routed expert has a row or two, and x, the activations and the
 * weights as the gemv kernels need them (16-byte rows). */
static bool moe_gemv_fits(const CudaMoe *m, const uint16_t *h, int T, CudaMatrix gate_up, CudaMatrix down) {
    if (T > CUDA_MOE_GEMV_MAX_TOKENS || cuda_variant_legacy("moe")) return false;
    const int mult = gate_up.scales ? 16 : 8;
    return m->hidden % mult == 0 && m->width % mult == 0 && ((uintptr_t)h & 15) == 0 &&
           ((uintptr_t)m->act & 15) == 0 && ((uintptr_t)gate_up.data & 15) == 0 && ((uintptr_t)down.data & 15) == 0 &&
           (gate_up.scales != NULL) == (down.scales != NULL);
}

/* Whether a larger step's laid-out tiles take the tile gemvs: the routed
 * experts get few rows on average (CUDA_MOE_TILE_GEMV_MAX_ROWS), so the
 * WMMA GEMM would mostly multiply padding at a fraction of the read rate,
 * where the gemv reads each weight row once per 8 rows at full width. */
static bool moe_tile_gemv_fits(const CudaMoe *m, int T, CudaMatrix gate_up, CudaMatrix down) {
    return (long)T * m->k <= (long)CUDA_MOE_TILE_GEMV_MAX_ROWS * m->experts && !cuda_variant_legacy("moe") &&
           m->hidden % (gate_up.scales ? 16 : 8) == 0 && m->width % (gate_up.scales ? 16 : 8) == 0 &&
           ((uintptr_t)gate_up.data & 15) == 0 && ((uintptr_t)down.data & 15) == 0 &&
           (gate_up.scales != NULL) == (down.scales != NULL);
}

extern "C" int cuda_moe(CudaMoe *m, float *delta, const uint16_t *h, int T, CudaMatrix gate_up,
                        CudaMatrix down, CudaStream stream, Error *err) {
    if (T <= 0) return 0;
    if (T > m->max_tokens) return error_set(err, "MoE step of %d tokens (room for %d)", T, m->max_tokens);
    cudaStream_t s = as_stream(stream);
    int H = m->hidden, W = m->width, E = m->experts, k = m->k;
    int rows = cuda_moe_max_rows(T, E, k), tiles = rows / TILE; /* the GEMM's layout; the tile gemvs' below */
    if (cuda_moe_route(m->ids, m->weights, m->logits, T, E, k, m->norm, stream, err)) return -1;
    if (moe_gemv_fits(m, h, T, gate_up, down)) {
        /* a row per (token, choice) in routing order, each its expert's gemv */
        const int pairs = T * k;
        if ((m->glu ? cuda_gemv_experts_glu(m->act, h, k, gate_up, m->ids, pairs, W, H, stream, err)
                    : cuda_gemv_experts(m->gate_up, h, k, gate_up, m->ids, pairs, 2 * W, H, stream, err) ||
                          cuda_silu_mul_rows(m->act, m->gate_up, pairs, NULL, W, stream, err)) ||
            cuda_gemv_experts(m->y, m->act, 1, down, m->ids, pairs, H, W, stream, err))
            return -1;
        combine_kernel<<<T, ROW_THREADS, 0, s>>>(delta, m->y, NULL, m->weights, k, H);
        CUDA_LAUNCHED("the MoE combine kernel", err);
        return 0;
    }
    /* the tile gemvs take 8 rows a block, so the groups are padded to 8 for
     * them: an expert with a few rows is one block, not one and a padding one */
    const bool tile_gemv = moe_tile_gemv_fits(m, T, gate_up, down);
    if (tile_gemv) {
        rows = layout_rows(T, E, k, CUDA_GEMV_TILE_ROWS);
        tiles = rows / CUDA_GEMV_TILE_ROWS;
    }
    align_kernel<<<1, ALIGN_THREADS, 0, s>>>(m->row_token, m->pair_row, m->tile_expert, m->used_rows,
                                             m->ids, T * k, E, k, rows, tile_gemv ? CUDA_GEMV_TILE_ROWS : TILE);
    CUDA_LAUNCHED("the MoE row layout kernel", err);
    gather_kernel<<<rows, ROW_THREADS, 0, s>>>(m->x, h, m->row_token, m->used_rows, H);
    CUDA_LAUNCHED("the MoE gather kernel", err);
    if (tile_gemv) {
        if (cuda_gemv_expert_tiles(m->gate_up, m->x, gate_up, m->tile_expert, m->row_token, tiles, 2 * W, H, stream,
                                   err) ||
            cuda_silu_mul_rows(m->act, m->gate_up, rows, m->used_rows, W, stream, err) ||
            cuda_gemv_expert_tiles(m->y, m->act, down, m->tile_expert, m->row_token, tiles, H, W, stream, err))
            return -1;
    } else if (grouped_gemm(m->gate_up, m->x, gate_up, m->tile_expert, tiles, 2 * W, H, s, err) ||
               cuda_silu_mul_rows(m->act, m->gate_up, rows, m->used_rows, W, stream, err) ||
               grouped_gemm(m->y, m->act, down, m->tile_expert, tiles, H, W, s, err))
        return -1;
    combine_kernel<<<T, ROW_THREADS, 0, s>>>(delta, m->y, m->pair_row, m->weights, k, H);
    CUDA_LAUNCHED("the MoE combine kernel", err);
    return 0;
}

extern "C" int cuda_moe_create(CudaMoe *m, int hidden, int width, int experts, int k, bool norm,
                               int max_tokens, Error *err) {
    memset(m, 0, sizeof *m);
    if (hidden % 16 || width % 16)
        return error_set(err, "the CUDA MoE kernels need hidden_size (%d) and "
                              "moe_intermediate_size (%d) to be multiples of 16", hidden, width);
    if (experts > MAX_EXPERTS)
        return error_set(err, "the CUDA MoE kernels handle at most %d experts, not %d", MAX_EXPERTS,
                         experts);
    m->hidden = hidden;
    m->width = width;
    m->experts = experts;
    m->k = k;
    m->norm = norm;
    m->glu = !cuda_variant_legacy("fuse") && !cuda_variant_legacy("gemv");
    m->max_tokens = max_tokens;
    /* rows: the GEMM's layout, the larger of the two (padding to 8 adds
     * fewer rows than to 16); tile_expert: one per tile of the tile gemvs'
     * layout, the one with more tiles */
    size_t T = (size_t)max_tokens, pairs = T * k, rows = (size_t)cuda_moe_max_rows(max_tokens, experts, k);
    struct {
        void **p;
        size_t bytes;
    } parts[] = {
        {(void **)&m->logits, T * experts * 4}, {(void **)&m->ids, pairs * 4},
        {(void **)&m->weights, pairs * 4},      {(void **)&m->pair_row, pairs * 4},
        {(void **)&m->row_token, rows * 4},     {(void **)&m->tile_expert, rows / CUDA_GEMV_TILE_ROWS * 4},
        {(void **)&m->used_rows, 4},            {(void **)&m->x, rows * hidden * 2},
        {(void **)&m->act, rows * width * 2},   {(void **)&m->gate_up, rows * 2 * width * 4},
        {(void **)&m->y, rows * hidden * 4},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) total += (parts[i].bytes + 255) / 256 * 256;
    if (!(m->memory = cuda_alloc(total, err))) return error_prefix(err, "MoE activations for %d tokens", max_tokens);
    char *at = (char *)m->memory;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        *parts[i].p = at;
        at += (parts[i].bytes + 255) / 256 * 256;
    }
    return 0;
}

extern "C" void cuda_moe_free(CudaMoe *m) {
    cuda_free(m->memory);
    memset(m, 0, sizeof *m);
}
