/*
 * cuda_gated_deltanet.cu - Gated DeltaNet's token mixer on the GPU (see
 * cuda_gated_deltanet.h; the work division is cuda_gdn_plan.h's).
 *
 * conv kernel: a block per (channel tile, sequence); rows in tiles staged in
 * shared memory behind a K-1-row halo, conv + SiLU written in place over
 * qkv, the final halo written back as the conv state.
 *
 * head kernel: a block per (value head, sequence), the head's [dk][dv]
 * state in registers from the first row to the last (read once, written
 * once: a decode step is one pass over the state, a prompt of any length
 * too). Per row, with S the state before the row (the CPU module's
 * recurrent step):
 *   [qS; kS] = [q; k] S               per thread over its rows, partial sums
 *                                      in shared memory, one barrier
 *   delta = beta (v - exp(g) kS); o = exp(g) qS + (q.k) delta
 *                                      every thread for its column
 *   S = exp(g) S + k delta^T           in registers
 * It serves decode and short prompts (the call's longest sequence under
 * GDN_CHUNK_MIN_ROWS rows): its barrier per row makes a long prompt slow.
 *
 * chunk kernel (calls with a longer sequence): a block per (value head,
 * GDN_CHUNK_COLS state columns, sequence) takes GDN_CHUNK_ROWS rows at a
 * time in the chunked WY/UT form, phase by phase as cuda_gdn_chunk.h
 * defines them (and tests/test_gdn_chunk.c runs on the CPU); the rows'
 * outputs before the norm go over their v in qkv, and the norm kernel
 * (a warp per row and head) applies the gated RMSNorm into out. Products
 * on CUDA cores in float32: the tensor cores are the next step.
 */
#include <math.h>

#include "cuda_bf16.h"
#include "cuda_check.h"
#include "cuda_gated_deltanet.h"
#include "cuda_gdn_chunk_tiles.h"
#include "cuda_variants.h"

#define WARP 32

static_assert(GDN_MAX_CONV_KERNEL - 1 <= GDN_CONV_ROW_LANES, "one row lane per halo row");
static_assert(GDN_CONV_CHANNELS == WARP, "a conv warp covers one tile row");
static_assert(GDN_CHUNK_ROWS == WARP, "one warp scans a chunk's decays");
static_assert(GDN_CHUNK_THREADS % WARP == 0, "whole warps");

__device__ __forceinline__ float gdn_silu(float x) { return x / (1.0f + expf(-x)); }

/* log(1 + e^x), as torch's softplus (linear above 20). */
__device__ __forceinline__ float gdn_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ---- conv + SiLU ---------------------------------------------------------- */

__global__ void __launch_bounds__(GDN_CONV_THREADS)
gdn_conv_kernel(float *__restrict__ qkv, float *__restrict__ states, size_t slot_floats,
                const CudaGdnSeq *__restrict__ seqs, const float *__restrict__ conv_weight, int conv_dim, int K) {
    __shared__ float win[GDN_MAX_CONV_KERNEL - 1 + GDN_CONV_TILE_ROWS][GDN_CONV_CHANNELS];
    const CudaGdnSeq seq = seqs[blockIdx.y];
    if (seq.num_rows <= 0 && !seq.fresh) return;
    const int lane = threadIdx.x % GDN_CONV_CHANNELS, rl = threadIdx.x / GDN_CONV_CHANNELS;
    const int c = blockIdx.x * GDN_CONV_CHANNELS + lane;
    const bool ok = c < conv_dim;
    float *cst = states + gdn_plan_conv_state_offset(seq.slot, slot_floats); /* [K-1][conv_dim] */
    float w[GDN_MAX_CONV_KERNEL];
#pragma unroll
    for (int j = 0; j < GDN_MAX_CONV_KERNEL; j++) w[j] = ok && j < K ? conv_weight[(size_t)c * K + j] : 0.0f;
    /* the halo: the K-1 raw rows before the sequence's first new one */
    if (rl < K - 1) win[rl][lane] = ok && !seq.fresh ? cst[(size_t)rl * conv_dim + c] : 0.0f;
    float *rows = qkv + (size_t)seq.first_row * conv_dim + c;
    for (int t0 = 0; t0 < seq.num_rows; t0 += GDN_CONV_TILE_ROWS) {
        const int tr = min(GDN_CONV_TILE_ROWS, seq.num_rows - t0);
        for (int i = rl; i < tr; i += GDN_CONV_ROW_LANES)
            win[K - 1 + i][lane] = ok ? rows[(size_t)(t0 + i) * conv_dim] : 0.0f;
        __syncthreads();
        for (int i = rl; i < tr; i += GDN_CONV_ROW_LANES) {
            float acc = 0.0f;
#pragma unroll
            for (int j = 0; j < GDN_MAX_CONV_KERNEL; j++)
                if (j < K) acc += w[j] * win[i + j][lane];
            if (ok) rows[(size_t)(t0 + i) * conv_dim] = gdn_silu(acc);
        }
        /* the next halo: the last K-1 rows of [halo, tile] */
        float keep = rl < K - 1 ? win[tr + rl][lane] : 0.0f;
        __syncthreads();
        if (rl < K - 1) win[rl][lane] = keep;
        __syncthreads();
    }
    if (ok && rl < K - 1) cst[(size_t)rl * conv_dim + c] = win[rl][lane];
}

/* ---- the delta rule and the gated norm ------------------------------------ */

__global__ void __launch_bounds__(GDN_HEAD_MAX_THREADS)
gdn_head_kernel(const float *__restrict__ qkv, const float *__restrict__ z, const float *__restrict__ a,
                const float *__restrict__ b, uint16_t *__restrict__ out, float *__restrict__ states,
                size_t slot_floats, const CudaGdnSeq *__restrict__ seqs, const float *__restrict__ A_log,
                const float *__restrict__ dt_bias, const float *__restrict__ norm_weight, CudaGdnShape shape,
                GdnHeadPlan plan) {
    extern __shared__ float smem[];
    const CudaGdnSeq seq = seqs[blockIdx.y];
    if (seq.num_rows <= 0 && !seq.fresh) return;
    const int h = blockIdx.x, hk = shape.num_k_heads, hv = shape.num_v_heads;
    const int dk = shape.k_dim, dv = shape.v_dim, kh = shape.value_heads_tiled ? h % hk : h / (hv / hk);
    const size_t cd = gdn_plan_conv_dim(&shape), ldo = (size_t)hv * dv;
    const GdnHeadSmem L = gdn_head_smem(dk, dv, plan.row_groups);
    float *q_s = smem + L.q, *k_s = smem + L.k, *v_s = smem + L.v, *o_s = smem + L.o, *red = smem + L.red,
          *sc = smem + L.sc;

    const int tid = threadIdx.x, lane = tid % WARP, warp = tid / WARP, warps = blockDim.x / WARP;
    const int c = tid % dv, grp = tid / dv;
    const int r0 = grp * plan.rows;
    const int rows_here = grp < plan.row_groups ? min(plan.rows, dk - r0) : 0;
    float *S = states + gdn_plan_recurrent_state_offset(&shape, seq.slot, slot_floats, h);

    float s[GDN_HEAD_MAX_ROWS];
#pragma unroll
    for (int i = 0; i < GDN_HEAD_MAX_ROWS; i++)
        s[i] = i < rows_here && !seq.fresh ? S[(size_t)(r0 + i) * dv + c] : 0.0f;

    const float neg_A = -expf(A_log[h]), bias = dt_bias[h], qscale = 1.0f / sqrtf((float)dk);
    int parity = 0;
    for (int t0 = 0; t0 < seq.num_rows; t0 += GDN_HEAD_CHUNK) {
        const int n = min(GDN_HEAD_CHUNK, seq.num_rows - t0), row0 = seq.first_row + t0;
        /* stage: a warp per row normalises its q and k, copies v, and lane 0
         * its exp(g), beta and q.k */
        for (int j = warp; j < n; j += warps) {
            const float *x = qkv + (size_t)(row0 + j) * cd;
            const float *xq = x + (size_t)kh * dk, *xk = x + (size_t)(hk + kh) * dk;
            const float *xv = x + 2 * (size_t)hk * dk + (size_t)h * dv;
            float qq = 0.0f, kk = 0.0f, qk = 0.0f;
            for (int i = lane; i < dk; i += WARP) {
                const float qi = xq[i], ki = xk[i];
                qq += qi * qi;
                kk += ki * ki;
                qk += qi * ki;
            }
            qq = warp_sum(qq), kk = warp_sum(kk), qk = warp_sum(qk);
            const float iq = qscale / sqrtf(qq + GDN_QK_EPS), ik = 1.0f / sqrtf(kk + GDN_QK_EPS);
            for (int i = lane; i < dk; i += WARP) {
                q_s[j * dk + i] = xq[i] * iq;
                k_s[j * dk + i] = xk[i] * ik;
            }
            for (int i = lane; i < dv; i += WARP) v_s[j * dv + i] = xv[i];
            if (lane == 0) {
                const size_t ab = (size_t)(row0 + j) * hv + h;
                sc[4 * j] = expf(neg_A * gdn_softplus(a[ab] + bias));
                sc[4 * j + 1] = 1.0f / (1.0f + expf(-b[ab]));
                sc[4 * j + 2] = qk * iq * ik;
            }
        }
        __syncthreads();
        /* the rows in order, the state in registers */
        for (int j = 0; j < n; j++, parity ^= 1) {
            float *red_k = red + (size_t)parity * 2 * plan.row_groups * dv, *red_q = red_k + (size_t)plan.row_groups * dv;
            const float *qj = q_s + j * dk + r0, *kj = k_s + j * dk + r0;
            if (rows_here > 0) {
                float kp = 0.0f, qp = 0.0f;
#pragma unroll
                for (int i = 0; i < GDN_HEAD_MAX_ROWS; i++)
                    if (i < rows_here) {
                        kp = fmaf(kj[i], s[i], kp);
                        qp = fmaf(qj[i], s[i], qp);
                    }
                red_k[grp * dv + c] = kp;
                red_q[grp * dv + c] = qp;
            }
            __syncthreads(); /* the partial sums of this row; the other parity's are free again */
            if (rows_here > 0) {
                float ks = 0.0f, qs = 0.0f;
                for (int g2 = 0; g2 < plan.row_groups; g2++) {
                    ks += red_k[g2 * dv + c];
                    qs += red_q[g2 * dv + c];
                }
                const float eg = sc[4 * j], beta = sc[4 * j + 1], qk = sc[4 * j + 2];
                const float delta = beta * (v_s[j * dv + c] - eg * ks);
                if (grp == 0) o_s[j * dv + c] = eg * qs + qk * delta;
#pragma unroll
                for (int i = 0; i < GDN_HEAD_MAX_ROWS; i++)
                    if (i < rows_here) s[i] = fmaf(kj[i], delta, eg * s[i]);
            }
        }
        __syncthreads(); /* o complete; q, k, v and sc free for the next chunk */
        /* y = o / sqrt(mean(o^2) + eps) * norm_weight * silu(z), a warp per row */
        for (int j = warp; j < n; j += warps) {
            const float *o = o_s + j * dv;
            float ss = 0.0f;
            for (int i = lane; i < dv; i += WARP) ss += o[i] * o[i];
            const float inv = 1.0f / sqrtf(warp_sum(ss) / (float)dv + shape.norm_eps);
            const size_t at = (size_t)(row0 + j) * ldo + (size_t)h * dv;
            for (int i = lane; i < dv; i += WARP)
                out[at + i] = float_to_bf16_bits(o[i] * inv * norm_weight[i] * gdn_silu(z[at + i]));
        }
        /* no barrier: the next chunk's staging writes q, k, v and sc, which
         * this pass does not read; its o is written after the next barrier */
    }
#pragma unroll
    for (int i = 0; i < GDN_HEAD_MAX_ROWS; i++)
        if (i < rows_here) S[(size_t)(r0 + i) * dv + c] = s[i];
}

/* ---- the chunked form and its norm (cuda_gdn_chunk.h) --------------------- */

__global__ void __launch_bounds__(GDN_CHUNK_THREADS)
gdn_chunk_kernel(float *__restrict__ qkv, const float *__restrict__ a, const float *__restrict__ b,
                 float *__restrict__ states, size_t slot_floats, const CudaGdnSeq *__restrict__ seqs,
                 const float *__restrict__ A_log, const float *__restrict__ dt_bias, CudaGdnShape shape) {
    extern __shared__ float smem[];
    const CudaGdnSeq seq = seqs[blockIdx.y];
    if (seq.num_rows <= 0 && !seq.fresh) return;
    const int hk = shape.num_k_heads, hv = shape.num_v_heads, dk = shape.k_dim, dv = shape.v_dim;
    const int tiles = gdn_chunk_col_tiles(dv), h = blockIdx.x / tiles, c0 = (blockIdx.x % tiles) * GDN_CHUNK_COLS;
    const int kh = shape.value_heads_tiled ? h % hk : h / (hv / hk), nc = min(GDN_CHUNK_COLS, dv - c0);
    const size_t cd = gdn_plan_conv_dim(&shape), v_at = 2 * (size_t)hk * dk + (size_t)h * dv + c0;
    const int tid = threadIdx.x, lane = tid % WARP, warp = tid / WARP, warps = GDN_CHUNK_THREADS / WARP;
    const int C = GDN_CHUNK_ROWS, W = GDN_CHUNK_COLS, NT = GDN_CHUNK_THREADS;
    float *S = states + gdn_plan_recurrent_state_offset(&shape, seq.slot, slot_floats, h);
    GdnChunkView v = gdn_chunk_view(smem, dk, C, nc);

    for (int i = tid; i < dk * W; i += NT) {
        const int r = i / W, c = i % W;
        v.S[i] = c < nc && !seq.fresh ? S[(size_t)r * dv + c0 + c] : 0.0f;
    }
    const float neg_A = -expf(A_log[h]), bias = dt_bias[h], qscale = 1.0f / sqrtf((float)dk);
    for (int t0 = 0; t0 < seq.num_rows; t0 += C) {
        const int n = min(C, seq.num_rows - t0), row0 = seq.first_row + t0;
        v.n = n;
        /* stage */
        for (int i = tid; i < n * dk; i += NT) {
            const int t = i / dk, r = i % dk;
            const float *x = qkv + (size_t)(row0 + t) * cd;
            v.q[t * v.ldk + r] = x[(size_t)kh * dk + r];
            v.k[t * v.ldk + r] = x[(size_t)(hk + kh) * dk + r];
        }
        for (int i = tid; i < n * W; i += NT)
            if (i % W < nc) v.u[i] = qkv[(size_t)(row0 + i / W) * cd + v_at + i % W];
        for (int t = tid; t < n; t += NT) {
            const size_t ab = (size_t)(row0 + t) * hv + h;
            gdn_chunk_gate(a[ab], b[ab], neg_A, bias, &v.G[t], &v.beta[t]);
        }
        __syncthreads();
        /* scale: G cumulated by warp 0, q and k normalised a warp per row */
        if (warp == 0) {
            float g = lane < n ? v.G[lane] : 0.0f;
#pragma unroll
            for (int o = 1; o < WARP; o *= 2) {
                const float y = __shfl_up_sync(0xffffffffu, g, o);
                if (lane >= o) g += y;
            }
            if (lane < n) v.G[lane] = g;
            __syncwarp();
            if (lane < n) gdn_chunk_decays(v, lane);
        }
        for (int t = warp; t < n; t += warps) {
            float *qt = v.q + t * v.ldk, *kt = v.k + t * v.ldk;
            float qq = 0.0f, kk = 0.0f;
            for (int r = lane; r < dk; r += WARP) qq = fmaf(qt[r], qt[r], qq), kk = fmaf(kt[r], kt[r], kk);
            const float iq = gdn_chunk_inv_norm(warp_sum(qq), qscale), ik = gdn_chunk_inv_norm(warp_sum(kk), 1.0f);
            for (int r = lane; r < dk; r += WARP) qt[r] *= iq, kt[r] *= ik;
        }
        __syncthreads();
        for (int i = tid; i < gdn_tiles_gram(); i += NT) gdn_chunk_gram2(v, i);
        for (int i = tid; i < n * dk; i += NT) gdn_chunk_w_rhs(v, i);
        for (int i = tid; i < n * W; i += NT) gdn_chunk_u_rhs(v, i);
        __syncthreads();
        for (int i = tid; i < dk + W; i += NT) gdn_chunk_solve(v, i);
        __syncthreads();
        for (int i = tid; i < gdn_tiles_rows_cols(); i += NT) gdn_chunk_delta2(v, i);
        __syncthreads();
        for (int i = tid; i < gdn_tiles_rows_cols(); i += NT) {
            int t, c;
            float o[2][2];
            const int valid = gdn_chunk_out2(v, i, &t, &c, o);
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (valid >> e & 1) qkv[(size_t)(row0 + t + e / 2) * cd + v_at + c + e % 2] = o[e / 2][e % 2];
        }
        for (int i = tid; i < gdn_tiles_state(dk); i += NT) gdn_chunk_state2(v, i);
        __syncthreads(); /* the next chunk's stage overwrites what these read */
    }
    for (int i = tid; i < dk * W; i += NT)
        if (i % W < nc) S[(size_t)(i / W) * dv + c0 + i % W] = v.S[i];
}

/* y = o / sqrt(mean(o^2) + eps) * norm_weight * silu(z), o from qkv's v
 * columns (the chunk kernel's), a warp per (row, head). */
__global__ void __launch_bounds__(GDN_CHUNK_THREADS)
gdn_norm_kernel(const float *__restrict__ qkv, const float *__restrict__ z, uint16_t *__restrict__ out,
                const CudaGdnSeq *__restrict__ seqs, const float *__restrict__ norm_weight, CudaGdnShape shape) {
    const CudaGdnSeq seq = seqs[blockIdx.y];
    const int r0 = blockIdx.x * GDN_NORM_ROWS;
    if (r0 >= seq.num_rows) return;
    const int hv = shape.num_v_heads, dv = shape.v_dim, lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    const int rows = min(GDN_NORM_ROWS, seq.num_rows - r0);
    const size_t cd = gdn_plan_conv_dim(&shape), ldo = (size_t)hv * dv;
    for (int p = warp; p < rows * hv; p += GDN_CHUNK_THREADS / WARP) {
        const int row = seq.first_row + r0 + p / hv, h = p % hv;
        const float *o = qkv + (size_t)row * cd + 2 * (size_t)shape.num_k_heads * shape.k_dim + (size_t)h * dv;
        float ss = 0.0f;
        for (int i = lane; i < dv; i += WARP) ss = fmaf(o[i], o[i], ss);
        const float inv = gdn_norm_inv(warp_sum(ss), dv, shape.norm_eps);
        const size_t at = (size_t)row * ldo + (size_t)h * dv;
        for (int i = lane; i < dv; i += WARP)
            out[at + i] = float_to_bf16_bits(o[i] * inv * norm_weight[i] * gdn_silu(z[at + i]));
    }
}

/* ---- host ----------------------------------------------------------------- */

extern "C" int cuda_gdn_check_shape(const CudaGdnShape *s, Error *err) {
    const char *why = gdn_plan_check(s);
    if (why)
        return error_set(err, "gated deltanet on the GPU: %s (key heads %d, value heads %d, dims %d/%d, conv %d)",
                         why, s->num_k_heads, s->num_v_heads, s->k_dim, s->v_dim, s->conv_kernel);
    return 0;
}

static int chunk_min_rows = GDN_CHUNK_MIN_ROWS;

extern "C" void cuda_gdn_set_chunk_min_rows(int rows) { chunk_min_rows = rows; }

/* The chunked kernels' shared memory fits this GPU (its opt-in limit per
 * block, read once), the attribute raised once, before any capture. */
static int chunk_smem_ready(size_t shared, bool *fits, Error *err) {
    static int limit = -1;
    static size_t raised = 48 << 10;
    if (limit < 0) {
        int dev;
        CUDA_TRY(cudaGetDevice(&dev), "finding the current GPU", err);
        CUDA_TRY(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
                 "reading the GPU's shared memory limit", err);
    }
    *fits = shared <= (size_t)limit;
    if (*fits && shared > raised) {
        CUDA_TRY(cudaFuncSetAttribute(gdn_chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared),
                 "raising the chunked gated deltanet kernel's shared memory", err);
        raised = shared;
    }
    return 0;
}

extern "C" int cuda_gdn_forward(const CudaGdnShape *s, const CudaGdnLayer *w, CudaGdnStates states,
                                const CudaGdnSeq *seqs, int num_seqs, int max_rows, float *qkv, const float *z,
                                const float *a, const float *b, uint16_t *out, CudaStream stream, Error *err) {
    if (cuda_gdn_check_shape(s, err)) return -1;
    if (num_seqs <= 0) return 0;
    cudaStream_t st = (cudaStream_t)stream;
    gdn_conv_kernel<<<dim3(gdn_plan_conv_blocks(s), num_seqs), GDN_CONV_THREADS, 0, st>>>(
        qkv, states.layer_base, states.slot_floats, seqs, w->conv_weight, (int)gdn_plan_conv_dim(s), s->conv_kernel);
    CUDA_LAUNCHED("the gated deltanet conv", err);

    if (max_rows >= chunk_min_rows && gdn_chunk_fits(s->k_dim) && !cuda_variant_legacy("gdn")) {
        const size_t shared = gdn_chunk_smem(s->k_dim).floats * sizeof(float);
        bool fits;
        if (chunk_smem_ready(shared, &fits, err)) return -1;
        if (fits) {
            gdn_chunk_kernel<<<dim3(s->num_v_heads * gdn_chunk_col_tiles(s->v_dim), num_seqs), GDN_CHUNK_THREADS,
                               shared, st>>>(qkv, a, b, states.layer_base, states.slot_floats, seqs, w->A_log,
                                             w->dt_bias, *s);
            CUDA_LAUNCHED("the chunked gated deltanet", err);
            gdn_norm_kernel<<<dim3((max_rows + GDN_NORM_ROWS - 1) / GDN_NORM_ROWS, num_seqs), GDN_CHUNK_THREADS, 0,
                              st>>>(qkv, z, out, seqs, w->norm_weight, *s);
            CUDA_LAUNCHED("the gated deltanet norm", err);
            return 0;
        }
    }
    const GdnHeadPlan plan = gdn_head_plan(s->k_dim, s->v_dim);
    const size_t shared = gdn_head_smem(s->k_dim, s->v_dim, plan.row_groups).floats * sizeof(float);
    static size_t shared_raised = 48 << 10; /* the default limit; raised before any graph capture (warm-up) */
    if (shared > shared_raised) {
        CUDA_TRY(cudaFuncSetAttribute(gdn_head_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared),
                 "raising the gated deltanet kernel's shared memory", err);
        shared_raised = shared;
    }
    gdn_head_kernel<<<dim3(s->num_v_heads, num_seqs), plan.threads, shared, st>>>(
        qkv, z, a, b, out, states.layer_base, states.slot_floats, seqs, w->A_log, w->dt_bias, w->norm_weight, *s,
        plan);
    CUDA_LAUNCHED("the gated deltanet heads", err);
    return 0;
}
