/*
 * cuda_sampler.cu - sampling on the GPU (see cuda_sampler.h) in two kernels:
 * a grid of (slice, row) blocks, then one thread block of 1024 threads per
 * row.
 *
 * Why two passes: one block per row left most of the GPU idle for the small
 * batches of decoding (a single greedy row of Qwen3's 151,936 logits took
 * 44 us on an H100, one block streaming the row three times). Now
 * split_kernel gives each row SPLIT_BLOCKS(vocab) blocks of SPLIT_THREADS
 * threads, each owning a contiguous slice of SPLIT_SLICE tokens: it applies
 * the row's mask, logit_bias entries and penalties to the tokens of its
 * slice (every block scans the row's entries and takes those in its slice,
 * so one block does mask, bias and penalty of a token, in that order, with
 * barriers between, as sampler.h's step 0-1), then reduces the slice to its
 * maximum and the lowest id holding it. sample_kernel then combines a row's
 * partials in one warp: the maximum of the maxima (NaN never wins: every
 * comparison is `>` from -inf, as the CPU's), and the lowest id among the
 * slices whose maximum equals it - the slices are disjoint and each reports
 * its own lowest id, so that is the row's first index of the maximum, the
 * id greedy returns (token 0 when no id holds it: a row of NaNs). A greedy
 * row ends there; a sampled row takes that maximum as raw_max and goes on
 * as before over the edited row. No sum is split: the canonical totals stay
 * entirely in sample_kernel, so their order cannot change.
 * NANOVLLM_CUDA_LEGACY=sampler (cuda_variants.h) runs sample_kernel alone,
 * doing the edits and the maximum itself, as before the split.
 *
 * The row is worked on in place in the logits buffer. Elementwise passes
 * stride over it (coalesced); the canonical total is one thread per 64-token
 * chunk (sm_chunk_sum, the CPU's exact order of additions) and then the
 * fixed pairwise tree over the chunk sums in shared memory, a level per
 * step. Filters become thresholds, so no pass needs the row sorted:
 *  - top-k: a radix select over the float bits (non-negative floats order
 *    like their bits) finds the k-th value; an exclusive scan over
 *    contiguous segments finds the id where the tied values stop being kept.
 *  - top-p: a binary search over float bits for the largest tau whose tokens
 *    (p >= tau) still reach the target; totals only shrink as tau grows. The
 *    search starts from a checked lower bound and re-reads only the chunks
 *    that hold a token above it.
 * The CPU sampler finds the same thresholds differently; both are defined
 * by sampler.h, not by either search.
 *
 * Every float and double operation that decides a token goes through
 * sampler_math.h's macros (the _rn intrinsics here, so nvcc never fuses an
 * FMA). Comparisons, integer work and the maxima are exact anyway.
 */
#include "cuda_check.h"
#include "cuda_sampler.h"
#include "cuda_variants.h"

#include <math.h>
#include <string.h>

#include "engine/philox.h"
#include "engine/sampler_math.h"

#define THREADS 1024
#define WARPS (THREADS / 32)
#define FULL_MASK 0xffffffffu
#define STATIC_SHARED_LIMIT (48u << 10) /* above it, dynamic shared memory must be opted into */

/* split_kernel: each block owns SPLIT_SLICE consecutive tokens of a row,
 * SPLIT_PER_THREAD of them a thread (kept in registers for the maximum). */
#define SPLIT_THREADS 256
#define SPLIT_WARPS (SPLIT_THREADS / 32)
#define SPLIT_PER_THREAD 8
#define SPLIT_SLICE (SPLIT_THREADS * SPLIT_PER_THREAD)
#define SPLIT_BLOCKS(vocab) (((vocab) + SPLIT_SLICE - 1) / SPLIT_SLICE)
#define MAX_GRID_Y 65535 /* rows of split_kernel's grid; more rows run the one-kernel path */

/* One slice's reduction: its maximum (-inf when it holds only NaNs) and the
 * lowest id holding it (vocab when none does). */
struct Partial {
    float max;
    int32_t first;
};

/* Per-block scratch for reductions and for broadcasting one thread's answer. */
struct Shared {
    float f[WARPS];
    int i[WARPS];
    int hist[256];
    int word[4];
};

/* ---- block-wide reductions: every thread calls, every thread gets the result ---- */

__device__ float block_max_float(float v, Shared &sh) {
    for (int o = 16; o > 0; o /= 2) {
        float u = __shfl_xor_sync(FULL_MASK, v, o);
        v = u > v ? u : v;
    }
    if (threadIdx.x % 32 == 0) sh.f[threadIdx.x / 32] = v;
    __syncthreads();
    v = sh.f[0];
    for (int w = 1; w < WARPS; w++) v = sh.f[w] > v ? sh.f[w] : v;
    __syncthreads();
    return v;
}

/* op: 0 sum, 1 max, 2 min */
__device__ int block_reduce_int(int v, int op, Shared &sh) {
    for (int o = 16; o > 0; o /= 2) {
        int u = __shfl_xor_sync(FULL_MASK, v, o);
        v = op == 0 ? v + u : op == 1 ? max(v, u) : min(v, u);
    }
    if (threadIdx.x % 32 == 0) sh.i[threadIdx.x / 32] = v;
    __syncthreads();
    v = sh.i[0];
    for (int w = 1; w < WARPS; w++) v = op == 0 ? v + sh.i[w] : op == 1 ? max(v, sh.i[w]) : min(v, sh.i[w]);
    __syncthreads();
    return v;
}

/* The sum of v over the threads before this one. */
__device__ int block_exclusive_scan(int v, Shared &sh) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, x = v;
    for (int o = 1; o < 32; o *= 2) {
        int y = __shfl_up_sync(FULL_MASK, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) sh.i[warp] = x;
    __syncthreads();
    int before = 0;
    for (int w = 0; w < warp; w++) before += sh.i[w];
    __syncthreads();
    return before + x - v;
}

/* ---- the canonical total ------------------------------------------------------------ */

__device__ __forceinline__ int chunk_len(int c, int vocab) {
    int base = c * SM_CHUNK;
    return vocab - base < SM_CHUNK ? vocab - base : SM_CHUNK;
}

/* sm_tree_upsweep with each level's additions spread over the block. */
__device__ void upsweep(double *x, int leaves) {
    for (int s = 1; s < leaves; s *= 2) {
        for (int i = 2 * s - 1 + 2 * s * (int)threadIdx.x; i < leaves; i += 2 * s * THREADS)
            x[i] = SM_DADD(x[i - s], x[i]);
        __syncthreads();
    }
}

/* The tree over the chunk sums of the p >= v, left up-swept in tree;
 * returns the total. The caller syncs before writing tree again. */
__device__ double tree_total(const float *P, int vocab, float v, double *tree, int leaves, int chunks) {
    for (int c = threadIdx.x; c < leaves; c += THREADS)
        tree[c] = c < chunks ? sm_chunk_sum(P + (size_t)c * SM_CHUNK, chunk_len(c, vocab), v) : 0.0;
    __syncthreads();
    upsweep(tree, leaves);
    return tree[leaves - 1];
}

/* ---- the steps ----------------------------------------------------------------------- */

/* The edits of tokens lo..hi-1 of a row by a block of `threads` threads
 * (the whole row by sample_kernel, a slice by split_kernel). */

/* sampler_apply_allowed: -inf for every token whose bit is clear. Strided
 * tokens keep the logits accesses coalesced; the 32 lanes of a warp read the
 * same mask word (a broadcast). Bits past vocab in the last word are unused. */
__device__ void apply_allowed(float *P, int lo, int hi, int threads, const uint32_t *mask) {
    for (int i = lo + threadIdx.x; i < hi; i += threads)
        if (!((mask[i >> 5] >> (i & 31)) & 1u)) P[i] = -INFINITY;
}

/* sampler_apply_logit_bias: one thread per entry; the tokens are distinct
 * (sampling_params_validate), so no two threads touch the same logit. The
 * add is SM_FADD, the CPU's rounding; -inf + bias stays -inf. */
__device__ void apply_logit_bias(float *P, int lo, int hi, int threads, const LogitBias *biases,
                                 int count) {
    for (int e = threadIdx.x; e < count; e += threads) {
        LogitBias b = biases[e];
        if (b.token >= lo && b.token < hi) P[b.token] = SM_FADD(P[b.token], b.bias);
    }
}

/* One thread per distinct token, so no two threads touch the same logit. */
__device__ void apply_penalties(float *P, int lo, int hi, int threads, const CudaSampleRow &row,
                                const CudaPenalty *penalties) {
    const bool repetition = row.repetition_penalty != 1.0f;
    const bool frequency = row.presence_penalty != 0.0f || row.frequency_penalty != 0.0f;
    if (!repetition && !frequency) return;
    for (int e = threadIdx.x; e < row.penalty_count; e += threads) {
        CudaPenalty q = penalties[row.penalty_offset + e];
        if (q.token < lo || q.token >= hi) continue;
        float l = P[q.token];
        if (repetition && q.in_prompt_or_output) l = sm_repetition(l, row.repetition_penalty);
        if (frequency && q.output_count > 0)
            l = sm_frequency_presence(l, q.output_count, row.frequency_penalty, row.presence_penalty);
        P[q.token] = l;
    }
}

/* The mask first, then the biases, then the penalties, as the CPU: a bias or
 * penalty thread may read a logit another thread masked or biased, hence the
 * barriers (the conditions are the row's, the same for every thread). Ends
 * with a barrier. */
__device__ void apply_edits(float *P, int lo, int hi, int threads, const CudaSampleRow &row,
                            const CudaPenalty *penalties, const LogitBias *biases,
                            const uint32_t *masks) {
    if (row.mask_offset >= 0 && masks) {
        apply_allowed(P, lo, hi, threads, masks + row.mask_offset);
        __syncthreads();
    }
    if (row.bias_count > 0 && biases) {
        apply_logit_bias(P, lo, hi, threads, biases + row.bias_offset, row.bias_count);
        __syncthreads();
    }
    apply_penalties(P, lo, hi, threads, row, penalties);
    __syncthreads();
}

/* Zeroes all but the k best of the p >= floor_p by (p descending, id
 * ascending); k is below their number. */
__device__ void keep_top_k(float *P, int vocab, int k, float floor_p, Shared &sh) {
    const int tid = threadIdx.x;
    uint32_t prefix = 0, mask = 0;
    int need = k; /* rank of the k-th value among the tokens matching prefix */
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = tid; b < 256; b += THREADS) sh.hist[b] = 0;
        __syncthreads();
        for (int i = tid; i < vocab; i += THREADS) {
            float p = P[i];
            uint32_t bits = sm_float_bits(p);
            if (p >= floor_p && (bits & mask) == prefix) atomicAdd(&sh.hist[(bits >> shift) & 255u], 1);
        }
        __syncthreads();
        if (tid == 0) { /* the digit where the count from the top reaches need */
            int d = 255, above = 0;
            while (d > 0 && above + sh.hist[d] < need) above += sh.hist[d--];
            sh.word[0] = d;
            sh.word[1] = need - above;
        }
        __syncthreads();
        prefix |= (uint32_t)sh.word[0] << shift;
        mask |= 255u << shift;
        need = sh.word[1];
        /* tid 0 rewrites word only after the next two barriers: no sync here */
    }
    const float vk = sm_bits_float(prefix);
    /* need tokens equal to vk are kept: the need lowest ids among them */
    const int seg = (vocab + THREADS - 1) / THREADS;
    const int lo = min(vocab, tid * seg), hi = min(vocab, lo + seg);
    int eq = 0;
    for (int i = lo; i < hi; i++) eq += P[i] == vk;
    int before = block_exclusive_scan(eq, sh);
    if (before < need && need <= before + eq) {
        int left = need - before;
        for (int i = lo; i < hi; i++)
            if (P[i] == vk && --left == 0) {
                sh.word[2] = i;
                break;
            }
    }
    __syncthreads();
    const int cut = sh.word[2];
    for (int i = tid; i < vocab; i += THREADS) {
        float p = P[i];
        P[i] = (p > vk || (p == vk && i <= cut)) ? p : 0.0f;
    }
}

/* top-p's tau over the kept row (sampler.h, step 4): the largest float
 * whose tokens p >= tau total at least target. total(v) never grows with v,
 * so a binary search over the bits keeps total(lo) >= target > total(hi). */
__device__ float top_p_threshold(const float *P, int vocab, float top_p, double total,
                                 double target, int kept, float pmax, double *tree, int leaves,
                                 int chunks, int32_t *active, Shared &sh) {
    const int tid = threadIdx.x;
    const float guess = sm_top_p_floor(top_p, total, kept);
    if (tid == 0) sh.word[3] = 0;
    __syncthreads();
    /* the guess's total, and the chunks holding a token above it: below the
     * guess every other chunk's sum is 0 */
    for (int c = tid; c < leaves; c += THREADS) {
        double sum = 0.0;
        if (c < chunks) {
            sum = sm_chunk_sum(P + (size_t)c * SM_CHUNK, chunk_len(c, vocab), guess);
            if (sum > 0.0) active[atomicAdd(&sh.word[3], 1)] = c;
        }
        tree[c] = sum;
    }
    __syncthreads();
    upsweep(tree, leaves);
    uint32_t lo = sm_float_bits(guess);
    int num_active = sh.word[3];
    if (!(tree[leaves - 1] >= target)) { /* rounding beat the guess: start from 0, every chunk */
        lo = 0;
        for (int c = tid; c < chunks; c += THREADS) active[c] = c;
        num_active = chunks;
    }
    __syncthreads();
    uint32_t hi = sm_float_bits(pmax) + 1;
    while (hi - lo > 1) {
        const uint32_t mid = lo + (hi - lo) / 2;
        const float v = sm_bits_float(mid);
        for (int c = tid; c < leaves; c += THREADS) tree[c] = 0.0;
        __syncthreads();
        for (int j = tid; j < num_active; j += THREADS) {
            int c = active[j];
            tree[c] = sm_chunk_sum(P + (size_t)c * SM_CHUNK, chunk_len(c, vocab), v);
        }
        __syncthreads();
        upsweep(tree, leaves);
        if (tree[leaves - 1] >= target) lo = mid;
        else hi = mid;
        __syncthreads();
    }
    return sm_bits_float(lo);
}

/* Pass 1 (grid: SPLIT_BLOCKS(vocab) x rows): block (x, r) edits tokens
 * [x * SPLIT_SLICE, +SPLIT_SLICE) of row r and writes their Partial to
 * partials[r * SPLIT_BLOCKS(vocab) + x]. */
__global__ void __launch_bounds__(SPLIT_THREADS)
    split_kernel(float *logits, int vocab, const CudaSampleRow *rows, const CudaPenalty *penalties,
                 const LogitBias *biases, const uint32_t *masks, Partial *partials) {
    __shared__ float wmax[SPLIT_WARPS];
    __shared__ int wfirst[SPLIT_WARPS];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const CudaSampleRow row = rows[blockIdx.y];
    float *P = logits + (size_t)blockIdx.y * vocab;
    const int lo = blockIdx.x * SPLIT_SLICE, hi = min(vocab, lo + SPLIT_SLICE);
    apply_edits(P, lo, hi, SPLIT_THREADS, row, penalties, biases, masks);

    /* the slice in registers; NaN past its end (never a maximum, never equal) */
    float v[SPLIT_PER_THREAD];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < SPLIT_PER_THREAD; k++) {
        const int i = lo + tid + k * SPLIT_THREADS;
        v[k] = i < hi ? P[i] : __int_as_float(0x7fffffff);
        m = v[k] > m ? v[k] : m;
    }
    for (int o = 16; o > 0; o /= 2) {
        float u = __shfl_xor_sync(FULL_MASK, m, o);
        m = u > m ? u : m;
    }
    if (lane == 0) wmax[warp] = m;
    __syncthreads();
    m = wmax[0];
    for (int w = 1; w < SPLIT_WARPS; w++) m = wmax[w] > m ? wmax[w] : m;

    /* a thread's tokens ascend with k: its first match is its lowest */
    int first = vocab;
#pragma unroll
    for (int k = SPLIT_PER_THREAD - 1; k >= 0; k--)
        if (v[k] == m) first = lo + tid + k * SPLIT_THREADS;
    for (int o = 16; o > 0; o /= 2) first = min(first, __shfl_xor_sync(FULL_MASK, first, o));
    if (lane == 0) wfirst[warp] = first;
    __syncthreads();
    if (tid == 0) {
        for (int w = 1; w < SPLIT_WARPS; w++) first = min(first, wfirst[w]);
        partials[(size_t)blockIdx.y * gridDim.x + blockIdx.x] = Partial{m, first};
    }
}

/* Pass 2's start: the row's maximum and the lowest id holding it from its
 * `blocks` partials, combined by warp 0 and broadcast through sh (every
 * thread calls). */
__device__ void combine_partials(const Partial *part, int blocks, int vocab, float *max_out,
                                 int *first_out, Shared &sh) {
    if (threadIdx.x < 32) {
        float m = -INFINITY;
        for (int b = threadIdx.x; b < blocks; b += 32) m = part[b].max > m ? part[b].max : m;
        for (int o = 16; o > 0; o /= 2) {
            float u = __shfl_xor_sync(FULL_MASK, m, o);
            m = u > m ? u : m;
        }
        int first = vocab;
        for (int b = threadIdx.x; b < blocks; b += 32) {
            Partial q = part[b];
            if (q.max == m && q.first < first) first = q.first;
        }
        for (int o = 16; o > 0; o /= 2) first = min(first, __shfl_xor_sync(FULL_MASK, first, o));
        if (threadIdx.x == 0) {
            sh.f[0] = m;
            sh.i[0] = first;
        }
    }
    __syncthreads();
    *max_out = sh.f[0];
    *first_out = sh.i[0];
    __syncthreads(); /* sh is reused next */
}

/* Pass 2, or the whole sampler (kSplit false): one block per row. With
 * kSplit, split_kernel has edited the row and left its partials. */
template <bool kSplit>
__global__ void __launch_bounds__(THREADS)
    sample_kernel(int32_t *tokens, float *logits, int vocab, const CudaSampleRow *rows,
                  const CudaPenalty *penalties, const LogitBias *biases, const uint32_t *masks,
                  int32_t *workspace, const Partial *partials) {
    extern __shared__ double tree[]; /* [leaves] */
    __shared__ Shared sh;
    const int tid = threadIdx.x;
    const CudaSampleRow row = rows[blockIdx.x];
    float *P = logits + (size_t)blockIdx.x * vocab;
    const int chunks = sm_num_chunks(vocab), leaves = sm_tree_leaves(vocab);
    int32_t *active = workspace + (size_t)blockIdx.x * chunks;

    float raw_max;
    if (kSplit) {
        const int blocks = SPLIT_BLOCKS(vocab);
        int first;
        combine_partials(partials + (size_t)blockIdx.x * blocks, blocks, vocab, &raw_max, &first, sh);
        if (row.temperature < 1e-5f) { /* greedy: the first index of the maximum */
            if (tid == 0) tokens[blockIdx.x] = first < vocab ? first : 0;
            return;
        }
    } else {
        apply_edits(P, 0, vocab, THREADS, row, penalties, biases, masks);
        raw_max = -INFINITY;
        for (int i = tid; i < vocab; i += THREADS) raw_max = P[i] > raw_max ? P[i] : raw_max;
        raw_max = block_max_float(raw_max, sh);

        if (row.temperature < 1e-5f) { /* greedy: the first index of the maximum */
            int first = vocab;
            for (int i = tid; i < vocab; i += THREADS)
                if (P[i] == raw_max) {
                    first = i;
                    break;
                }
            first = block_reduce_int(first, 2, sh);
            if (tid == 0) tokens[blockIdx.x] = first < vocab ? first : 0;
            return;
        }
    }

    const float inv_t = SM_FDIV(1.0f, row.temperature);
    const float mx = SM_FMUL(raw_max, inv_t);
    const bool min_p_on = row.min_p > 0.0f;
    int over_min_p = 0;
    float pmax = 0.0f;
    for (int i = tid; i < vocab; i += THREADS) {
        float p = sm_prob(P[i], inv_t, mx);
        P[i] = p;
        over_min_p += min_p_on && p >= row.min_p;
        pmax = p > pmax ? p : pmax;
    }
    int kept = min_p_on ? block_reduce_int(over_min_p, 0, sh) : vocab;
    pmax = block_max_float(pmax, sh); /* the top token's: min-p and top-k always keep it */

    if (row.top_k > 0 && row.top_k < kept) {
        keep_top_k(P, vocab, row.top_k, min_p_on ? row.min_p : 0.0f, sh);
        kept = row.top_k;
    } else if (min_p_on) {
        for (int i = tid; i < vocab; i += THREADS) P[i] = sm_at_least(P[i], row.min_p);
    }
    __syncthreads();

    double total = tree_total(P, vocab, 0.0f, tree, leaves, chunks);
    if (row.top_p < 1.0f) {
        const double target = sm_top_p_target(row.top_p, total);
        if (target > 0.0) {
            __syncthreads(); /* everyone has read the total before the tree is reused */
            const float tau = top_p_threshold(P, vocab, row.top_p, total, target, kept, pmax, tree,
                                              leaves, chunks, active, sh);
            for (int i = tid; i < vocab; i += THREADS) P[i] = sm_at_least(P[i], tau);
            __syncthreads();
            total = tree_total(P, vocab, 0.0f, tree, leaves, chunks);
        }
    }

    /* the draw (sampler.h, step 5): one thread descends the tree and walks
     * the chunk - at most log2(leaves) + 64 steps */
    if (tid == 0) {
        uint64_t seed = ((uint64_t)row.seed_hi << 32) | row.seed_lo;
        double target = SM_DMUL(philox_uniform(seed, row.sample_index, row.position), total);
        int c = sm_tree_descend(tree, leaves, &target);
        int base = c * SM_CHUNK, end = vocab - base < SM_CHUNK ? vocab : base + SM_CHUNK;
        int token = -1;
        if (base < vocab) {
            int i = sm_chunk_walk(P + base, end - base, target);
            if (i >= 0) token = base + i;
        }
        sh.word[0] = token;
        sh.word[1] = end;
    }
    __syncthreads();
    if (sh.word[0] >= 0) {
        if (tid == 0) tokens[blockIdx.x] = sh.word[0];
        return;
    }
    /* carried past the chunk: the last kept token (p > 0) before its end */
    const int end = sh.word[1];
    int last = -1;
    for (int i = tid; i < end; i += THREADS)
        if (P[i] > 0.0f) last = i;
    last = block_reduce_int(last, 1, sh);
    if (tid == 0) tokens[blockIdx.x] = last >= 0 ? last : 0;
}

/* ---- host side ----------------------------------------------------------------------- */

extern "C" int cuda_sample_row_prepare(CudaSampleRow *row, CudaPenalty *entries, int capacity,
                                       int offset, LogitBias *biases, int bias_capacity,
                                       int bias_offset, const SampleInput *in,
                                       SamplerScratch *scratch) {
    const SamplingParams *p = in->params;
    memset(row, 0, sizeof *row);
    row->temperature = p->temperature;
    row->top_p = p->top_p;
    row->min_p = p->min_p;
    row->repetition_penalty = p->repetition_penalty;
    row->presence_penalty = p->presence_penalty;
    row->frequency_penalty = p->frequency_penalty;
    row->top_k = p->top_k;
    row->seed_lo = (uint32_t)in->seed;
    row->seed_hi = (uint32_t)(in->seed >> 32);
    row->sample_index = in->sample_index;
    row->position = in->position;
    row->penalty_offset = offset;
    row->bias_offset = bias_offset;
    row->mask_offset = -1;
    /* the biases first: failing here leaves scratch untouched */
    if (p->num_logit_bias > 0) {
        if (p->num_logit_bias > bias_capacity - bias_offset) return -2;
        memcpy(biases + bias_offset, p->logit_bias, sizeof(LogitBias) * (size_t)p->num_logit_bias);
        row->bias_count = p->num_logit_bias;
    }
    const bool repetition = p->repetition_penalty != 1.0f;
    const bool frequency = p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    if (!repetition && !frequency) return 0;

    /* the repetition penalty sees prompt and output, the others the output */
    const int32_t *lists[2] = {in->output, in->prompt};
    int lens[2] = {in->output_len, repetition ? in->prompt_len : 0};
    for (int i = 0; i < in->output_len; i++) scratch->counts[in->output[i]]++;
    int n = 0;
    for (int l = 0; l < 2; l++) {
        for (int i = 0; i < lens[l]; i++) {
            int32_t t = lists[l][i];
            if (scratch->seen[t]) continue;
            scratch->seen[t] = 1;
            if (offset + n < capacity) {
                CudaPenalty *e = &entries[offset + n];
                e->token = t;
                e->in_prompt_or_output = 1;
                e->output_count = scratch->counts[t];
            }
            n++;
        }
    }
    for (int i = 0; i < in->output_len; i++) scratch->counts[in->output[i]] = 0;
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < lens[l]; i++) scratch->seen[lists[l][i]] = 0;
    if (offset + n > capacity) return -1;
    row->penalty_count = n;
    return n;
}

/* The workspace: [rows][SPLIT_BLOCKS(vocab)] Partials, then top-p's
 * [rows][chunks] active chunk ids. */
static size_t partials_bytes(int rows, int vocab) {
    return (size_t)rows * (size_t)SPLIT_BLOCKS(vocab) * sizeof(Partial);
}

extern "C" size_t cuda_sampler_workspace_bytes(int max_rows, int vocab) {
    if (max_rows <= 0 || vocab <= 0) return 0;
    return partials_bytes(max_rows, vocab) + (size_t)max_rows * (size_t)sm_num_chunks(vocab) * sizeof(int32_t);
}

/* sample_kernel<kSplit>, allowed the dynamic shared memory its tree needs. */
template <bool kSplit>
static int launch_sample_kernel(int32_t *tokens, float *logits, int rows, int vocab,
                                const CudaSampleRow *rows_dev, const CudaPenalty *penalties_dev,
                                const LogitBias *biases_dev, const uint32_t *masks_dev,
                                int32_t *active, const Partial *partials, cudaStream_t stream,
                                Error *err) {
    size_t shared = sizeof(double) * (size_t)sm_tree_leaves(vocab);
    if (shared + sizeof(Shared) > STATIC_SHARED_LIMIT)
        CUDA_TRY(cudaFuncSetAttribute(sample_kernel<kSplit>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)shared),
                 "allowing the sampler its shared memory", err);
    sample_kernel<kSplit><<<rows, THREADS, shared, stream>>>(tokens, logits, vocab, rows_dev, penalties_dev,
                                                             biases_dev, masks_dev, active, partials);
    CUDA_LAUNCHED("the sampling kernel", err);
    return 0;
}

extern "C" int cuda_sample(int32_t *tokens, float *logits, int rows, int vocab,
                           const CudaSampleRow *rows_dev, const CudaPenalty *penalties_dev,
                           const LogitBias *biases_dev, const uint32_t *masks_dev, void *workspace,
                           CudaStream stream, Error *err) {
    if (rows <= 0) return 0;
    if (vocab <= 0) return error_set(err, "cuda_sample: vocabulary size %d", vocab);
    cudaStream_t s = (cudaStream_t)stream;
    if (cuda_variant_legacy("sampler") || rows > MAX_GRID_Y) /* one block per row does it all */
        return launch_sample_kernel<false>(tokens, logits, rows, vocab, rows_dev, penalties_dev,
                                           biases_dev, masks_dev,
                                           (int32_t *)((char *)workspace + partials_bytes(rows, vocab)),
                                           NULL, s, err);
    Partial *partials = (Partial *)workspace;
    split_kernel<<<dim3((unsigned)SPLIT_BLOCKS(vocab), (unsigned)rows), SPLIT_THREADS, 0, s>>>(
        logits, vocab, rows_dev, penalties_dev, biases_dev, masks_dev, partials);
    CUDA_LAUNCHED("the sampler's first pass", err);
    return launch_sample_kernel<true>(tokens, logits, rows, vocab, rows_dev, penalties_dev, biases_dev,
                                      masks_dev, (int32_t *)((char *)workspace + partials_bytes(rows, vocab)),
                                      partials, s, err);
}
