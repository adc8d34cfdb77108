/*
 * sampler_math.h - the arithmetic that decides a sampled token, shared by the
 * CPU sampler (sampler.c) and the CUDA sampler (cuda/cuda_sampler.cu).
 *
 * A seeded request must give the same token on either backend when the
 * logits agree, so every floating-point operation on the way from logits to
 * token must round identically on both. That rules out libm's expf (each
 * libm and CUDA's expf differ in the last bit), compiler-chosen FMA
 * contraction (nvcc fuses a*b+c by default), and any summation whose order
 * depends on thread count or vector width. Everything here is therefore
 * written with the SM_* operator macros: plain operators in C (built as ISO
 * C11, where gcc does not contract) and the _rn intrinsics on the device,
 * which nvcc never fuses. Compiled as C11 and as CUDA (like philox.h).
 *
 * (nvcc's host pass compiles these functions as C++, where g++ may contract;
 * the CUDA sampler's host code only uses their integer helpers.)
 *
 * The canonical quantities (see sampler.h for how the sampler uses them):
 *  - sm_exp: branch-free exp for x <= 0, within 1 ulp of the correctly
 *    rounded value, never subnormal, 0 below SM_EXP_MIN_X.
 *  - chunk sum: tokens in fixed chunks of SM_CHUNK ids, each summed in double
 *    with 8 strided accumulators combined in a fixed order, then the tail.
 *  - total: a fixed-shape pairwise tree over the chunk sums (leaves padded
 *    with zeros to a power of two), stored in place the way a Blelloch
 *    up-sweep leaves it, so the GPU reduces in log steps and the walk can
 *    still read every left-subtree sum. Adding a zero is exact, so a sparse
 *    evaluation that skips empty chunks or subtrees gets the same bits.
 *  - walk: descend the tree with the target, then step through one chunk.
 */
#ifndef NANOVLLM_SAMPLER_MATH_H
#define NANOVLLM_SAMPLER_MATH_H

#include <stdint.h>

#ifdef __CUDACC__
#define SM_FN static inline __host__ __device__
#else
#define SM_FN static inline
#include <float.h>
#if FLT_EVAL_METHOD != 0
#error "sampler_math.h needs float and double evaluated in their own precision"
#endif
#if defined(__GNUC__) && !defined(__clang__) && !defined(__STRICT_ANSI__)
#error "sampler_math.h needs ISO C mode (-std=c11): in GNU mode gcc may contract a*b+c into FMA"
#endif
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif
#endif

#if defined(__CUDA_ARCH__) && defined(__USE_FAST_MATH__)
#error "the sampler's arithmetic must not be built with --use_fast_math"
#endif

#if defined(__CUDA_ARCH__)
#define SM_FMUL(a, b) __fmul_rn((a), (b))
#define SM_FADD(a, b) __fadd_rn((a), (b))
#define SM_FSUB(a, b) __fsub_rn((a), (b))
#define SM_FDIV(a, b) __fdiv_rn((a), (b))
#define SM_DMUL(a, b) __dmul_rn((a), (b))
#define SM_DADD(a, b) __dadd_rn((a), (b))
#define SM_DSUB(a, b) __dsub_rn((a), (b))
#define SM_DDIV(a, b) __ddiv_rn((a), (b))
#else
#define SM_FMUL(a, b) ((a) * (b))
#define SM_FADD(a, b) ((a) + (b))
#define SM_FSUB(a, b) ((a) - (b))
#define SM_FDIV(a, b) ((a) / (b))
#define SM_DMUL(a, b) ((a) * (b))
#define SM_DADD(a, b) ((a) + (b))
#define SM_DSUB(a, b) ((a) - (b))
#define SM_DDIV(a, b) ((a) / (b))
#endif

/* Tokens per chunk of the canonical total. */
#define SM_CHUNK 64

/* Below this a probability is 0. Chosen so that every result above it is a
 * normal float (e^x >= FLT_MIN with room for the 1 ulp error): no subnormal
 * is ever produced, so a flush-to-zero setting cannot make backends differ. */
#define SM_EXP_MIN_X (-87.3365f)

SM_FN uint32_t sm_float_bits(float x) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    union { float f; uint32_t u; } c = {x};
    return c.u;
#endif
}

SM_FN float sm_bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    union { uint32_t u; float f; } c = {u};
    return c.f;
#endif
}

/* e^x for x <= 0 (the inputs after max subtraction; correct up to x = 88),
 * within 1 ulp of the correctly rounded value (checked over every float in
 * [-87.3365, 0]): x = n ln2 + r by a two-part Cody-Waite reduction, e^r by
 * Cephes expf's degree-7 polynomial, times 2^n built in the exponent bits.
 * Branch-free (one final select), so a loop over it vectorizes. Below
 * SM_EXP_MIN_X (and for -inf) the reduction computes garbage that the
 * select discards. */
SM_FN float sm_exp(float x) {
    /* adding 1.5 * 2^23 rounds to the nearest integer, which lands in the
     * low mantissa bits */
    float t = SM_FADD(SM_FMUL(x, 1.44269504088896341f), 12582912.0f);
    float n = SM_FSUB(t, 12582912.0f);
    uint32_t e = sm_float_bits(t) - 0x4B400000u + 127u; /* the biased exponent of 2^n */
    float r = SM_FSUB(x, SM_FMUL(n, 0.693359375f)); /* n * 0.693359375 is exact */
    r = SM_FSUB(r, SM_FMUL(n, -2.12194440e-4f));
    float p = 1.9875691500e-4f;
    p = SM_FADD(SM_FMUL(p, r), 1.3981999507e-3f);
    p = SM_FADD(SM_FMUL(p, r), 8.3334519073e-3f);
    p = SM_FADD(SM_FMUL(p, r), 4.1665795894e-2f);
    p = SM_FADD(SM_FMUL(p, r), 1.6666665459e-1f);
    p = SM_FADD(SM_FMUL(p, r), 5.0000001201e-1f);
    p = SM_FADD(SM_FADD(SM_FMUL(p, SM_FMUL(r, r)), r), 1.0f);
    float y = SM_FMUL(p, sm_bits_float(e << 23));
    return x < SM_EXP_MIN_X ? 0.0f : y;
}

/* ---- penalties and temperature (the CPU's formulas, operation by operation) ---- */

SM_FN float sm_repetition(float logit, float penalty) {
    return logit > 0.0f ? SM_FDIV(logit, penalty) : SM_FMUL(logit, penalty);
}

SM_FN float sm_frequency_presence(float logit, int32_t count, float frequency, float presence) {
    return SM_FSUB(logit, SM_FADD(SM_FMUL(frequency, (float)count), presence));
}

/* Probability (unnormalised, the max maps to 1) of a raw logit: scaled by
 * inv_t = 1 / temperature, minus the scaled maximum. Scaling by inv_t > 0 is
 * monotone, so the scaled maximum is the maximum scaled by inv_t. */
SM_FN float sm_prob(float logit, float inv_t, float scaled_max) {
    return sm_exp(SM_FSUB(SM_FMUL(logit, inv_t), scaled_max));
}

/* ---- the canonical total ----------------------------------------------------- */

/* x when x >= v, else +0 (NaN included). A mask on the bits rather than a
 * conditional: gcc turns `x >= v ? x : 0` into a branch and stops
 * vectorizing; adding the +0 changes no sum. */
SM_FN float sm_at_least(float x, float v) {
    return sm_bits_float(sm_float_bits(x) & (0u - (uint32_t)(x >= v)));
}

/* The chunk's 8 strided accumulators, combined in this fixed order. */
SM_FN double sm_combine8(const double *a) {
    return SM_DADD(SM_DADD(SM_DADD(a[0], a[1]), SM_DADD(a[2], a[3])),
                   SM_DADD(SM_DADD(a[4], a[5]), SM_DADD(a[6], a[7])));
}

/* Sum in double of the p[i] >= v among p[0..n), n <= SM_CHUNK. v = 0 sums
 * every probability; a larger v is top-p's "tokens at or above v". */
SM_FN double sm_chunk_sum(const float *p, int n, float v) {
    double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
        for (int j = 0; j < 8; j++) a[j] = SM_DADD(a[j], (double)sm_at_least(p[i + j], v));
    }
    double s = sm_combine8(a);
    for (; i < n; i++) s = SM_DADD(s, (double)sm_at_least(p[i], v));
    return s;
}

SM_FN int sm_num_chunks(int vocab) { return (vocab + SM_CHUNK - 1) / SM_CHUNK; }

/* Leaves of the tree: the smallest power of two >= the number of chunks. */
SM_FN int sm_tree_leaves(int vocab) {
    int chunks = sm_num_chunks(vocab), leaves = 1;
    while (leaves < chunks) leaves *= 2;
    return leaves;
}

/* In place over x[0..leaves): after it, x[leaves - 1] is the total and
 * x[a + s - 1] is the sum of leaves [a, a + s) for every node [a, a + 2s) -
 * exactly the left-subtree sums the walk needs. (The GPU runs each level's
 * additions in parallel; the additions and their operands are the same.) */
SM_FN void sm_tree_upsweep(double *x, int leaves) {
    for (int s = 1; s < leaves; s *= 2)
        for (int i = 2 * s - 1; i < leaves; i += 2 * s) x[i] = SM_DADD(x[i - s], x[i]);
}

/* From the root of an up-swept tree to the chunk where *target falls: go
 * left when the target is below the left subtree's sum, else subtract that
 * sum and go right. On return *target is what is left for the chunk walk. */
SM_FN int sm_tree_descend(const double *x, int leaves, double *target) {
    int a = 0;
    for (int s = leaves / 2; s >= 1; s /= 2) {
        double left = x[a + s - 1];
        if (!(*target < left)) {
            *target = SM_DSUB(*target, left);
            a += s;
        }
    }
    return a;
}

/* The first i of the chunk's probabilities p[0..n) where the running double
 * sum passes target; -1 when rounding carried the target past the chunk
 * (the caller then takes the last token with p > 0 before the chunk's end). */
SM_FN int sm_chunk_walk(const float *p, int n, double target) {
    double cum = 0.0;
    for (int i = 0; i < n; i++) {
        cum = SM_DADD(cum, (double)p[i]);
        if (target < cum) return i;
    }
    return -1;
}

/* ---- top-p ----------------------------------------------------------------- */

/* The share of the kept total the nucleus must reach. */
SM_FN double sm_top_p_target(float top_p, double total) { return SM_DMUL((double)top_p, total); }

/* A cheap guess at a lower bound of the threshold: in exact arithmetic the
 * tokens below (1 - top_p) * total / kept hold less than the mass outside
 * the nucleus; half of it leaves room for rounding. Only a starting point:
 * both samplers check it (its total must reach the target) before using it. */
SM_FN float sm_top_p_floor(float top_p, double total, int kept) {
    double share = SM_DMUL(SM_DMUL(0.5, SM_DSUB(1.0, (double)top_p)), total);
    return (float)SM_DDIV(share, (double)(kept > 0 ? kept : 1));
}

#endif
