/*
 * cpu_attention.c - tiled attention with online softmax (see cpu_attention.h).
 *
 * Work is split into tasks of (sequence, KV head, tile of query tokens). A
 * task gathers its queries - every query head of the KV head's group, for
 * each token of the tile - into one matrix, then walks the context one KV
 * block at a time: S = scale * Q K^T (sgemm straight from the cache block,
 * where a head's rows are adjacent), causal mask, running
 * max/sum rescaling (flash-attention's online softmax), O += P V. The score
 * matrix never exceeds one block, whatever the context length, and each K/V
 * block is read once per tile rather than once per query. A bf16 or fp8
 * cache is widened block by block into per-thread float32 scratch for sgemm
 * (fp8: SIMD at the active level, the cache's scale applied there).
 *
 * Under bf16 matmul inputs (cpu_attention_set_bf16_inputs, --dtype
 * bfloat16) with a bf16 cache, Q and the softmax's P are rounded to bf16 at
 * the two products' inputs, as a GPU's flash attention does: with
 * AVX512-BF16 both products run on cpu_matmul_bf16's kernel straight from the
 * cache (twice the float32 FMA rate, nothing widened; the V block is
 * transposed so that its keys run along the kernel's K); without it sgemm
 * gets the same rounded inputs, so every ISA computes the same products.
 *
 * An fp8 cache's prompt tiles keep float32 products whatever --dtype says:
 * its values are exact in float32 and in bf16 alike, and the bf16 kernel's
 * path (Q and P rounded, products from a bf16 cache) is not written for it.
 *
 * A tile of one token (decode) goes to cpu_attention_decode.c instead: at
 * G = 2 rows sgemm's per-call overhead dominates, and its kernels read the
 * bf16 or fp8 cache directly; under bf16 inputs they too round q and p to
 * bf16 where the CPU has AVX512-BF16 and VBMI, on vdpbf16ps
 * (cpu_attention_decode_dot.h).
 */
#include "cpu_attention.h"

#include "cpu_attention_decode.h"
#include "cpu_kv_fp8.h"
#include "cpu_matmul_bf16.h"
#include "cpu_ops.h"
#include "base/cpu_isa.h"
#include "base/half.h"
#include "base/row_max.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Query rows (tokens x heads of a group) per task. */
#define TILE_ROWS 128

typedef struct AttnTask {
    int seq;
    int token0;    /* index of the sequence's first new token in the batch */
    int tile0;     /* first new token of this tile, relative to the sequence */
    int tile_len;  /* tokens in this tile */
    int kv_head;
} AttnTask;

typedef struct ThreadScratch {
    float *q;      /* [rows, head_dim] */
    float *scores; /* [rows, block_size] */
    float *acc;    /* [rows, head_dim] */
    float *row_max, *row_sum;
    float *k_wide, *v_wide; /* [block_size, head_dim]: a bf16 or fp8 block widened for sgemm */
    /* bf16 inputs with AVX512-BF16 */
    uint16_t *q_bf16;   /* [rows, head_dim] */
    uint16_t *p_bf16;   /* [rows, block_size] */
    uint16_t *v_t;      /* [head_dim, block_size]: the V block transposed */
    float *pv;          /* [rows, head_dim]: one block's P V */
} ThreadScratch;

struct CpuAttention {
    ThreadPool *pool;
    AttentionShape shape;
    KvCacheDtype kv_dtype; /* resolved: float32, bf16 or fp8 */
    bool kv_bf16;          /* kv_dtype is bf16 */
    float k_scale, v_scale; /* fp8: read = e4m3 * scale (runner.h) */
    bool bf16_inputs;  /* round Q and P to bf16 (cpu_attention_set_bf16_inputs) */
    int group;         /* query heads per KV head */
    int tile_tokens;   /* query tokens per task */
    int max_rows;      /* tile_tokens * group */
    AttnTask *tasks;
    int max_tasks;
    ThreadScratch *scratch;
    /* per call */
    float *out;
    const float *q;
    const void *k_cache, *v_cache;
    const RunnerBatch *batch;
    CpuIsa isa;
    Bf16DotKernel bf16_dot; /* under bf16 inputs where the CPU has it, else NULL */
};

/* Rows [0, n) of one KV head of a bf16 or fp8 cache block at element
 * `base` (adjacent: head-major blocks), as float32 [n, D]. */
static void widen_rows(const CpuAttention *a, float *dst, const void *cache, size_t base, int n,
                       float scale) {
    size_t count = (size_t)n * a->shape.head_dim;
    if (a->kv_dtype == KV_CACHE_FP8) {
        kv_fp8_widen_rows(a->isa, dst, (const uint8_t *)cache + base, count, scale);
        return;
    }
    const uint16_t *src = (const uint16_t *)cache + base;
    for (size_t i = 0; i < count; i++) dst[i] = bf16_to_f32(src[i]);
}

/* dst[d * n + j] = src[j * D + d]: a head's V rows [n, D] of a bf16 block
 * with the keys along rows, for the bf16 kernel's K. 8 x 8 blocks through
 * SSE2 (baseline x86-64) where the sizes allow; a scalar loop otherwise. */
static void transpose_bf16(uint16_t *dst, const uint16_t *src, int n, int D) {
    int j = 0;
#if defined(__x86_64__)
    if (D % 8 == 0) {
        for (; j + 8 <= n; j += 8) {
            for (int d = 0; d < D; d += 8) {
                __m128i r[8], t[8];
                for (int i = 0; i < 8; i++) r[i] = _mm_loadu_si128((const __m128i *)(src + (size_t)(j + i) * D + d));
                for (int i = 0; i < 4; i++) {
                    t[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
                    t[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
                }
                /* t: pairs of rows interleaved; then pairs of pairs, then quads */
                __m128i u[8] = {_mm_unpacklo_epi32(t[0], t[2]), _mm_unpackhi_epi32(t[0], t[2]),
                                _mm_unpacklo_epi32(t[1], t[3]), _mm_unpackhi_epi32(t[1], t[3]),
                                _mm_unpacklo_epi32(t[4], t[6]), _mm_unpackhi_epi32(t[4], t[6]),
                                _mm_unpacklo_epi32(t[5], t[7]), _mm_unpackhi_epi32(t[5], t[7])};
                for (int i = 0; i < 4; i++) {
                    uint16_t *o = dst + (size_t)(d + 2 * i) * n + j;
                    _mm_storeu_si128((__m128i *)o, _mm_unpacklo_epi64(u[i], u[i + 4]));
                    _mm_storeu_si128((__m128i *)(o + n), _mm_unpackhi_epi64(u[i], u[i + 4]));
                }
            }
        }
    }
#endif
    for (; j < n; j++)
        for (int d = 0; d < D; d++) dst[(size_t)d * n + j] = src[(size_t)j * D + d];
}

/* A one-token tile: the decode kernels over the whole context. */
static void attend_decode(CpuAttention *a, const AttnTask *t, ThreadScratch *s) {
    const AttentionShape *sh = &a->shape;
    const RunnerSeq *seq = &a->batch->seqs[t->seq];
    int D = sh->head_dim, G = a->group;
    size_t q_off = (size_t)(t->token0 + t->tile0) * sh->num_heads * D + (size_t)t->kv_head * G * D;
    DecodeKv kv = {.k = a->k_cache, .v = a->v_cache, .dtype = a->kv_dtype,
                   .block_table = seq->block_table, .block_size = sh->block_size,
                   .num_kv_heads = sh->num_kv_heads, .kv_head = t->kv_head, .head_dim = D,
                   .k_scale = a->k_scale, .v_scale = a->v_scale, .bf16_products = a->bf16_inputs};
    DecodePart part = {s->row_max, s->row_sum, s->acc};
    decode_attend_range(a->isa, &kv, a->q + q_off, G, 0, seq->start_pos + t->tile0 + 1, s->scores,
                        part);
    decode_finish(a->out + q_off, D, &part, 1, G, D);
}

/* scores [rows, n] = scale * Q K^T over the n keys of the block at `base`
 * (element offset of this head's rows). */
static void block_scores(CpuAttention *a, ThreadScratch *s, int rows, size_t base, int n) {
    int D = a->shape.head_dim;
    float scale = 1.0f / sqrtf((float)D);
    if (a->bf16_dot) {
        a->bf16_dot(s->scores, n, s->q_bf16, D, rows, (const uint16_t *)a->k_cache + base, D, 0, n);
        for (size_t i = 0; i < (size_t)rows * n; i++) s->scores[i] *= scale;
        return;
    }
    const float *k = (const float *)a->k_cache + base;
    if (a->kv_dtype != KV_CACHE_F32) {
        widen_rows(a, s->k_wide, a->k_cache, base, n, a->k_scale);
        k = s->k_wide;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, D, scale, s->q, D, k, D, 0.0f,
                s->scores, n);
}

/* acc [rows, D] += P V, P = the block's softmax weights in scores [rows, n]. */
static void block_values(CpuAttention *a, ThreadScratch *s, int rows, size_t base, int n) {
    int D = a->shape.head_dim;
    if (a->bf16_dot) {
        bf16_round_rows(a->isa, s->p_bf16, s->scores, (size_t)rows * n);
        transpose_bf16(s->v_t, (const uint16_t *)a->v_cache + base, n, D);
        a->bf16_dot(s->pv, D, s->p_bf16, n, rows, s->v_t, n, 0, D);
        for (size_t i = 0; i < (size_t)rows * D; i++) s->acc[i] += s->pv[i];
        return;
    }
    const float *v = (const float *)a->v_cache + base;
    if (a->kv_dtype != KV_CACHE_F32) {
        widen_rows(a, s->v_wide, a->v_cache, base, n, a->v_scale);
        v = s->v_wide;
        if (a->bf16_inputs && a->kv_bf16) bf16_round_in_f32(s->scores, s->scores, (size_t)rows * n);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, n, 1.0f, s->scores, n, v, D,
                1.0f, s->acc, D);
}

static void attend_tile(CpuAttention *a, const AttnTask *t, ThreadScratch *s) {
    const AttentionShape *sh = &a->shape;
    const RunnerSeq *seq = &a->batch->seqs[t->seq];
    int D = sh->head_dim, G = a->group, bs = sh->block_size;
    int q_stride = sh->num_heads * D;
    int rows = t->tile_len * G;

    /* Row r = (token r / G, head kv_head * G + r % G): a group's heads are
     * adjacent in q, so each token contributes G * D contiguous floats. */
    for (int i = 0; i < t->tile_len; i++) {
        const float *src = a->q + (size_t)(t->token0 + t->tile0 + i) * q_stride + (size_t)t->kv_head * G * D;
        memcpy(s->q + (size_t)i * G * D, src, sizeof(float) * (size_t)G * D);
    }
    if (a->bf16_dot) bf16_round_rows(a->isa, s->q_bf16, s->q, (size_t)rows * D);
    else if (a->bf16_inputs && a->kv_bf16) bf16_round_in_f32(s->q, s->q, (size_t)rows * D);
    for (int r = 0; r < rows; r++) {
        s->row_max[r] = -INFINITY;
        s->row_sum[r] = 0.0f;
    }
    memset(s->acc, 0, sizeof(float) * (size_t)rows * D);

    int first_pos = seq->start_pos + t->tile0;
    int last_pos = first_pos + t->tile_len - 1;
    for (int kb = 0; kb <= last_pos / bs; kb++) {
        int key0 = kb * bs;
        int n = last_pos + 1 - key0 < bs ? last_pos + 1 - key0 : bs;
        size_t base = ((size_t)seq->block_table[kb] * sh->num_kv_heads + t->kv_head) * bs * D;
        block_scores(a, s, rows, base, n);
        for (int r = 0; r < rows; r++) {
            float *sc = s->scores + (size_t)r * n;
            int visible = first_pos + r / G - key0 + 1; /* keys this query may see */
            if (visible > n) visible = n;
            if (visible <= 0) { /* whole block is in this query's future */
                memset(sc, 0, sizeof(float) * (size_t)n);
                continue;
            }
            float mx = row_max(sc, visible);
            float new_max = mx > s->row_max[r] ? mx : s->row_max[r];
            float correction = expf(s->row_max[r] - new_max); /* 0 on the first block */
            float sum = exp_shifted_sum(sc, visible, new_max);
            for (int j = visible; j < n; j++) sc[j] = 0.0f;
            s->row_sum[r] = s->row_sum[r] * correction + sum;
            s->row_max[r] = new_max;
            if (correction != 1.0f) {
                float *acc = s->acc + (size_t)r * D;
                for (int d = 0; d < D; d++) acc[d] *= correction;
            }
        }
        block_values(a, s, rows, base, n);
    }

    for (int i = 0; i < t->tile_len; i++) {
        float *dst = a->out + (size_t)(t->token0 + t->tile0 + i) * q_stride + (size_t)t->kv_head * G * D;
        for (int g = 0; g < G; g++) {
            int r = i * G + g;
            float inv = 1.0f / s->row_sum[r];
            const float *acc = s->acc + (size_t)r * D;
            for (int d = 0; d < D; d++) dst[(size_t)g * D + d] = acc[d] * inv;
        }
    }
}

static void attention_task(void *ctx, int task, int thread) {
    CpuAttention *a = ctx;
    const AttnTask *t = &a->tasks[task];
    if (t->tile_len == 1) attend_decode(a, t, &a->scratch[thread]);
    else attend_tile(a, t, &a->scratch[thread]);
}

void cpu_attention(CpuAttention *a, float *out, const float *q, const void *k_cache,
                   const void *v_cache, const RunnerBatch *batch) {
    a->isa = cpu_isa_active();
    a->bf16_dot = a->bf16_inputs && a->kv_bf16 ? bf16_dot_kernel(a->isa) : NULL;
    a->out = out;
    a->q = q;
    a->k_cache = k_cache;
    a->v_cache = v_cache;
    a->batch = batch;
    int n = 0, token0 = 0;
    for (int s = 0; s < batch->num_seqs; s++) {
        int len = batch->seqs[s].num_tokens;
        for (int t0 = 0; t0 < len; t0 += a->tile_tokens) {
            int tl = len - t0 < a->tile_tokens ? len - t0 : a->tile_tokens;
            for (int h = 0; h < a->shape.num_kv_heads; h++)
                a->tasks[n++] = (AttnTask){s, token0, t0, tl, h};
        }
        token0 += len;
    }
    thread_pool_run(a->pool, n, attention_task, a);
}

CpuAttention *cpu_attention_create(ThreadPool *pool, AttentionShape shape, int max_num_seqs,
                                   int max_num_tokens, Error *err) {
    return cpu_attention_create_kv(pool, shape, KV_CACHE_F32, max_num_seqs, max_num_tokens, err);
}

CpuAttention *cpu_attention_create_kv(ThreadPool *pool, AttentionShape shape, KvCacheDtype kv_dtype,
                                      int max_num_seqs, int max_num_tokens, Error *err) {
    if (kv_dtype != KV_CACHE_F32 && kv_dtype != KV_CACHE_BF16 && kv_dtype != KV_CACHE_FP8) {
        error_set(err, "attention: KV cache dtype %s is not resolved", kv_cache_dtype_name(kv_dtype));
        return NULL;
    }
    CpuAttention *a = calloc(1, sizeof *a);
    if (!a) {
        error_set(err, "out of memory");
        return NULL;
    }
    a->pool = pool;
    a->shape = shape;
    a->kv_dtype = kv_dtype;
    a->kv_bf16 = kv_dtype == KV_CACHE_BF16;
    a->k_scale = a->v_scale = KV_FP8_DEFAULT_SCALE;
    a->group = shape.num_heads / shape.num_kv_heads;
    a->tile_tokens = TILE_ROWS / a->group > 0 ? TILE_ROWS / a->group : 1;
    a->max_rows = a->tile_tokens * a->group;
    /* Each sequence splits into at most ceil(len / tile) tiles. */
    a->max_tasks = (max_num_tokens / a->tile_tokens + max_num_seqs) * shape.num_kv_heads;
    a->tasks = calloc((size_t)a->max_tasks, sizeof *a->tasks);
    int threads = thread_pool_size(pool);
    a->scratch = calloc((size_t)threads, sizeof *a->scratch);
    bool ok = a->tasks && a->scratch;
    size_t rows = (size_t)a->max_rows, D = (size_t)shape.head_dim;
    for (int i = 0; ok && i < threads; i++) {
        ThreadScratch *s = &a->scratch[i];
        s->q = malloc(sizeof(float) * rows * D);
        s->scores = malloc(sizeof(float) * rows * (size_t)shape.block_size);
        s->acc = malloc(sizeof(float) * rows * D);
        s->row_max = malloc(sizeof(float) * rows);
        s->row_sum = malloc(sizeof(float) * rows);
        ok = s->q && s->scores && s->acc && s->row_max && s->row_sum;
        if (ok && kv_dtype != KV_CACHE_F32) {
            s->k_wide = malloc(sizeof(float) * (size_t)shape.block_size * D);
            s->v_wide = malloc(sizeof(float) * (size_t)shape.block_size * D);
            ok = s->k_wide && s->v_wide;
        }
        if (ok && a->kv_bf16) {
            s->q_bf16 = malloc(sizeof(uint16_t) * rows * D);
            s->p_bf16 = malloc(sizeof(uint16_t) * rows * (size_t)shape.block_size);
            s->v_t = malloc(sizeof(uint16_t) * D * (size_t)shape.block_size);
            s->pv = malloc(sizeof(float) * rows * D);
            ok = s->q_bf16 && s->p_bf16 && s->v_t && s->pv;
        }
    }
    if (!ok) {
        cpu_attention_destroy(a);
        error_set(err, "out of memory (attention scratch)");
        return NULL;
    }
    return a;
}

void cpu_attention_set_bf16_inputs(CpuAttention *a, bool on) { a->bf16_inputs = on; }

void cpu_attention_set_fp8_scales(CpuAttention *a, float k_scale, float v_scale) {
    a->k_scale = k_scale;
    a->v_scale = v_scale;
}

void cpu_attention_destroy(CpuAttention *a) {
    if (!a) return;
    if (a->scratch) {
        for (int i = 0; i < thread_pool_size(a->pool); i++) {
            ThreadScratch *s = &a->scratch[i];
            free(s->q);
            free(s->scores);
            free(s->acc);
            free(s->row_max);
            free(s->row_sum);
            free(s->k_wide);
            free(s->v_wide);
            free(s->q_bf16);
            free(s->p_bf16);
            free(s->v_t);
            free(s->pv);
        }
    }
    free(a->scratch);
    free(a->tasks);
    free(a);
}
