/*
 * cpu_matmul_quant_q8_0.h - the x86 kernels of quant_gemm for Q8_0 weights,
 * and for Q4_0, Q5_0 and IQ4_NL, whose blocks are 32 values with an f16
 * scale too:
 * part of the cpu_matmul_quant_tile.h template (included by it once per
 * SIMD level, after its helpers; no include guard). Hand-written.
 *
 * Q4_0 / Q5_0 in the in-place tiles: their unsigned quants (0..15 / 0..31)
 * are vpmaddubsw's unsigned operand as they are, against the activations
 * unchanged, and the offset (8 / 16 times the activation block's sum, one
 * more vpmaddubsw by ones per activation row and block) starts the sums;
 * in the packed kernel they are unpacked to signed bytes while packing and
 * then go through the Q8_0 code. IQ4_NL's 4-bit codes become their signed
 * levels by one vpshufb (the 16-entry table in both lanes) and then take
 * the Q8_0 path, the levels looked up again per activation row rather than
 * held (registers). Each output is the same integer sum as the
 * reference's, so the four types share every rule below.
 *
 * Q8_0 has a float scale per 32 values on both sides, so every block's
 * integer sum has to be turned into float on its own: the cost the K types
 * pay once per 256 values. Two kernels, chosen by the number of activation
 * rows:
 *
 * Few rows (decode): strips of 4 weight rows read in place (q_tile_q8_0).
 * Per block and (weight row, activation row) pair: vpsignb (the weight's
 * sign moves to the activation, |w| is the unsigned operand), vpmaddubsw,
 * vpmaddwd by ones; the four rows' int32 lane sums are reduced across rows
 * and lanes (3 vphaddd and an add of the two halves per activation row),
 * converted and scaled by [dw0..dw3] times the row's dx.
 *
 * Many rows (batched decode, prefill: from Q8P_MIN_ROWS): 8 weight rows are
 * first packed, per K segment, into a strip where each 32-byte vector holds
 * 4 consecutive quants of each of the 8 rows (q8p_pack: an 8 x 8 dword
 * transpose per block). Against it, 4 bytes of an activation row broadcast
 * to all lanes make every int32 lane of vpmaddwd's result the partial sum
 * of one weight row: 8 vectors of a block accumulate with plain vpaddd,
 * and the block's 8 sums come out side by side, ready for a convert and
 * an FMA with [dw0..dw7] x dx, and are finally stored as 8 consecutive
 * outputs. No horizontal reduction at all: per 32 multiply-adds vpsignb,
 * vpmaddubsw, vpmaddwd, vpaddd and a broadcast load, where the in-place
 * tile also pays 3/4 of a vphaddd and a quarter of the float work. The
 * packing (~40 instructions per block of 8 rows) is paid once per strip and
 * pass of up to Q8P_ROWS activation rows. With AVX512-VNNI (Q_VNNI) one
 * vpdpbusd does vpmaddubsw + vpmaddwd + vpaddd's work (q8_dot4).
 *
 * Both kernels compute every output as the sum over blocks, in order, of
 * fma(float(block's integer sum), dw * dx, sum so far), per K segment of
 * Q8_SEG blocks: the same bits, so a row's result never depends on the
 * size of the batch it is in. (Keeping the in-place tile's two half-block
 * sums apart instead, as it once did, is ~5% faster at 9-23 rows but cost
 * the packed kernel, which would have to follow, ~4% of prefill.)
 */

/* acc plus the sums of each 4 consecutive u8 x s8 products of u and s, in
 * int32 lanes: one vpdpbusd with VNNI, else vpmaddubsw and vpmaddwd by
 * ones; the same integers, as vpmaddubsw's pair sums never saturate on
 * these operands (|u| <= 128, |s| <= 127). */
QFN __m256i q8_dot4(__m256i acc, __m256i u, __m256i s) {
#ifdef Q_VNNI
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* Q4_0 / Q5_0 / IQ4_NL: the 32 quants (IQ4_NL: codes) of a block as
 * unsigned bytes, in value order (value l the low nibble of qs[l], 16 + l
 * the high; Q5_0: bit l of the 32-bit qh the fifth bit of value l). */
QFN __m256i q32_unsigned(WeightType t, const uint8_t *blk) {
    const uint8_t *qs = blk + (t == WEIGHT_Q5_0 ? 6 : 2);
    __m128i v = _mm_loadu_si128((const __m128i *)qs);
    __m256i q = _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0f));
    if (t == WEIGHT_Q5_0) {
        int32_t h;
        memcpy(&h, blk + 2, sizeof h);
        /* byte l takes qh byte l / 8 (vpshufb per 128-bit lane: the dword is
         * in both), then its bit l % 8 */
        __m256i hb = _mm256_shuffle_epi8(_mm256_set1_epi32(h),
                                         _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
        const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
        __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit);
        q = _mm256_or_si256(q, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
    }
    return q;
}

/* IQ4_NL's levels for 32 codes (unsigned bytes 0..15). */
QFN __m256i q32_iq4_nl_levels(__m256i codes) {
    static const int8_t levels[16] = IQ4_NL_VALUES;
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)levels)), codes);
}

/* A 32-value block's quants as signed bytes (the packed kernel's form). */
QFN __m256i q32_signed(WeightType t, const uint8_t *blk) {
    if (t == WEIGHT_Q8_0) return _mm256_loadu_si256((const __m256i *)(blk + 2));
    if (t == WEIGHT_IQ4_NL) return q32_iq4_nl_levels(q32_unsigned(t, blk));
    return _mm256_sub_epi8(q32_unsigned(t, blk), _mm256_set1_epi8(t == WEIGHT_Q4_0 ? 8 : 16));
}

/* ---- strips of 4 weight rows in place, for few activation rows ---- */

/* One Q8_0 block (32 values) of the strip times MR activation rows: the
 * four weight rows' int32 lane sums per activation row, reduced across
 * rows and lanes (3 vphaddd and an add of the 128-bit halves) to the
 * block's four sums, converted and scaled by [dw0..dw3] times the row's
 * dx: per (weight row, activation row) pair vpsignb + vpmaddubsw +
 * vpmaddwd and 3/4 of a vphaddd, per activation row one convert, multiply
 * and FMA. */
QFN void q_q8_0_step(WeightType t, int MR, const uint8_t *const *wr, int b, const uint8_t *const *xr,
                     const float *const *dx, const float *dw, __m128 *facc) {
    const size_t bs = weight_block_bytes_const(t);
    /* Q8_0: |w| (-128 reads as 128 unsigned); Q4_0, Q5_0: the unsigned quants; IQ4_NL: the codes */
    __m256i aw[QNR];
    QUNROLL for (int j = 0; j < QNR; j++)
        aw[j] = t == WEIGHT_Q8_0 ? _mm256_abs_epi8(_mm256_loadu_si256((const __m256i *)(wr[j] + (size_t)b * bs + 2)))
                                 : q32_unsigned(t, wr[j] + (size_t)b * bs);
    __m128 dv;
    if (dw) {
        dv = _mm_loadu_ps(dw + 4 * b);
    } else { /* one activation row: not worth a pass of its own */
        uint16_t dh[QNR];
        QUNROLL for (int j = 0; j < QNR; j++) memcpy(&dh[j], wr[j] + (size_t)b * bs, 2);
        dv = q_f16x4(dh[0], dh[1], dh[2], dh[3]);
    }
    QUNROLL for (int i = 0; i < MR; i++) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(xr[i] + (size_t)b * sizeof(BlockQ8_0) + 2));
        __m256i s[QNR];
        if (t == WEIGHT_Q8_0) {
            QUNROLL for (int j = 0; j < QNR; j++) {
                __m256i w = _mm256_loadu_si256((const __m256i *)(wr[j] + (size_t)b * bs + 2));
                s[j] = q8_dot4(_mm256_setzero_si256(), aw[j], _mm256_sign_epi8(a, w));
            }
        } else if (t == WEIGHT_IQ4_NL) {
            QUNROLL for (int j = 0; j < QNR; j++) {
                __m256i w = q32_iq4_nl_levels(aw[j]);
                s[j] = q8_dot4(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(a, w));
            }
        } else { /* sum (q - half) a = sum q a - half sum a: the sums start at -half sum a */
            __m256i off = q8_dot4(_mm256_setzero_si256(), _mm256_set1_epi8(1), a);
            off = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, t == WEIGHT_Q4_0 ? 3 : 4));
            QUNROLL for (int j = 0; j < QNR; j++) s[j] = q8_dot4(off, aw[j], a);
        }
        __m128 scale = _mm_mul_ps(dv, _mm_broadcast_ss(dx[i] + b));
        facc[i] = _mm_fmadd_ps(_mm_cvtepi32_ps(q_reduce4(s[0], s[1], s[2], s[3])), scale, facc[i]);
        Q_KEEP(facc[i]);
    }
}

/* One Q8_0 tile over nb blocks: dx[i][b] is activation row i's scale of
 * block b, dw[4b..4b+3] the strip's (both decoded once per call by
 * q_gemm_q8_0, not per tile; dw NULL: decoded here). Adds to y instead of
 * storing when add (the K segments after the first). */
QFN void q_tile_q8_0(WeightType t, int MR, const uint8_t *const *wr, int nb, const uint8_t *const *xr,
                     const float *const *dx, const float *dw, float *y, int ldy, int nvalid, int add,
                     int pf) {
    __m128 facc[QMR_MAX];
    QUNROLL for (int i = 0; i < MR; i++) facc[i] = _mm_setzero_ps();
    int b = 0;
    for (; b + 2 <= nb; b += 2) {
        if (pf) q_prefetch(wr[0], b / 2, 2 * weight_block_bytes_const(t));
        q_q8_0_step(t, MR, wr, b, xr, dx, dw, facc);
        q_q8_0_step(t, MR, wr, b + 1, xr, dx, dw, facc);
    }
    if (b < nb) q_q8_0_step(t, MR, wr, b, xr, dx, dw, facc);
    QUNROLL for (int i = 0; i < MR; i++) {
        float out[4];
        _mm_storeu_ps(out, facc[i]);
        float *yi = y + (size_t)i * ldy;
        for (int j = 0; j < nvalid; j++) yi[j] = add ? yi[j] + out[j] : out[j];
    }
}

/* One compiled tile per (type, MR): the loops above unroll fully only with both constant. */
#define Q8_TILE(NAME, T, MR)                                                                      \
    QTILE void q_tile_##NAME##_##MR(const uint8_t *const *wr, int nb, const uint8_t *const *xr,  \
                                    const float *const *dx, const float *dw, float *y, int ldy,  \
                                    int nv, int add, int pf) {                                   \
        q_tile_q8_0(T, MR, wr, nb, xr, dx, dw, y, ldy, nv, add, pf);                             \
    }
#define Q8_TILES(NAME, T) Q8_TILE(NAME, T, 1) Q8_TILE(NAME, T, 2) Q8_TILE(NAME, T, 3) Q8_TILE(NAME, T, 4)

typedef void (*QTileQ8Fn)(const uint8_t *const *wr, int nb, const uint8_t *const *xr,
                          const float *const *dx, const float *dw, float *y, int ldy, int nv,
                          int add, int pf);

Q8_TILES(q8_0, WEIGHT_Q8_0)
Q8_TILES(q4_0, WEIGHT_Q4_0)
Q8_TILES(q5_0, WEIGHT_Q5_0)
Q8_TILES(iq4_nl, WEIGHT_IQ4_NL)

/* [q32_index(t)][MR - 1] */
static const QTileQ8Fn q_tiles_q32[4][QMR_MAX] = {
    {q_tile_q8_0_1, q_tile_q8_0_2, q_tile_q8_0_3, q_tile_q8_0_4},
    {q_tile_q4_0_1, q_tile_q4_0_2, q_tile_q4_0_3, q_tile_q4_0_4},
    {q_tile_q5_0_1, q_tile_q5_0_2, q_tile_q5_0_3, q_tile_q5_0_4},
    {q_tile_iq4_nl_1, q_tile_iq4_nl_2, q_tile_iq4_nl_3, q_tile_iq4_nl_4},
};

#ifndef QUANT_TILE_Q8_COMMON
#define QUANT_TILE_Q8_COMMON
/* Q8_0: blocks per K segment, for both kernels (a segment's result is
 * added to the previous ones', so equal segments keep them bit-identical;
 * a packed segment of 8 rows is 16 KiB, in L1), and activation scales
 * decoded per pass of the in-place kernel (a stack buffer of 16 KiB). */
#define Q8_SEG 64
#define Q8_DX 4096

/* Row of the per-type tables: Q8_0 0, Q4_0 1, Q5_0 2, IQ4_NL 3. */
static inline int q32_index(WeightType t) {
    return t == WEIGHT_Q8_0 ? 0 : t == WEIGHT_Q4_0 ? 1 : t == WEIGHT_Q5_0 ? 2 : 3;
}

/* The scales of blocks [k0, k0 + seg) of activation rows [mb, me) (rows of
 * xrb bytes at xb) as float, seg per row, at dx. */
static inline void q8_decode_dx(const uint8_t *xb, size_t xrb, int k0, int seg, int mb, int me,
                                float *dx) {
    for (int m = mb; m < me; m++)
        for (int b = 0; b < seg; b++) {
            uint16_t h;
            memcpy(&h, xb + (size_t)m * xrb + (size_t)(k0 + b) * sizeof(BlockQ8_0), sizeof h);
            dx[(size_t)(m - mb) * seg + b] = f16_scalar(h);
        }
}

/* A tile's QMR_MAX activation rows from row m (r of them real, the last
 * repeated): their blocks from k0 in xr, their scales (decoded by
 * q8_decode_dx from row mb) in dxr. */
static inline void q8_tile_rows(const uint8_t *xb, size_t xrb, int k0, const float *dx, int seg,
                                int mb, int m, int r, const uint8_t **xr, const float **dxr) {
    for (int i = 0; i < QMR_MAX; i++) {
        int mi = m + (i < r ? i : r - 1);
        xr[i] = xb + (size_t)mi * xrb + (size_t)k0 * sizeof(BlockQ8_0);
        dxr[i] = dx + (size_t)(mi - mb) * seg;
    }
}
#endif

/* quant_gemm for Q8_0 weights and few activation rows: as the K types'
 * (QGEMM in cpu_matmul_quant_tile.h), but the f16 scales are decoded to
 * float once per call (the activations' per pass, each strip's per strip)
 * rather than in every tile, where they cost as much as the products at 4
 * activation rows; K in segments of Q8_SEG blocks so that the buffers stay
 * on the stack. */
__attribute__((target(QT))) static void q_gemm_q8_0_strips(WeightType t, const void *w, int K, const void *xq,
                                                           int M, float *y, int ldy, int n0,
                                                           int n1, int mr) {
    const size_t bs = weight_block_bytes(t);
    const QTileQ8Fn *tiles = q_tiles_q32[q32_index(t)];
    size_t wrb = weight_row_bytes(t, K);
    size_t xrb = quant_act_row_bytes(QUANT_ACT_Q8_0, K);
    int nb = K / QK8_0;
    const uint8_t *wb = w, *xb = xq;
    float dx[Q8_DX], dw[4 * Q8_SEG];
    for (int k0 = 0; k0 < nb; k0 += Q8_SEG) {
        int seg = nb - k0 < Q8_SEG ? nb - k0 : Q8_SEG;
        int rows = Q8_DX / seg < QMB ? Q8_DX / seg : QMB;
        for (int mb = 0; mb < M; mb += rows) {
            int me = M - mb < rows ? M : mb + rows;
            q8_decode_dx(xb, xrb, k0, seg, mb, me, dx);
            for (int n = n0; n < n1; n += QNR) {
                int nv = n1 - n < QNR ? n1 - n : QNR;
                const uint8_t *wr[QNR];
                for (int j = 0; j < QNR; j++)
                    wr[j] = wb + (size_t)(n + (j < nv ? j : nv - 1)) * wrb + (size_t)k0 * bs;
                for (int b = 0; M > 1 && b < seg; b++) {
                    uint16_t h[QNR];
                    for (int j = 0; j < QNR; j++) memcpy(&h[j], wr[j] + (size_t)b * bs, sizeof h[j]);
                    _mm_storeu_ps(dw + 4 * b, q_f16x4(h[0], h[1], h[2], h[3]));
                }
                for (int m = mb; m < me;) {
                    int r = me - m < mr ? me - m : mr;
                    const uint8_t *xr[QMR_MAX];
                    const float *dxr[QMR_MAX];
                    q8_tile_rows(xb, xrb, k0, dx, seg, mb, m, r, xr, dxr);
                    tiles[r - 1](wr, seg, xr, dxr, M > 1 ? dw : NULL,
                                        y + (size_t)m * ldy + n, ldy, nv, k0 > 0, m == mb);
                    m += r;
                }
            }
        }
    }
}

/* ---- packed strips, for many activation rows ---- */

#ifndef QUANT_Q8_PACK_COMMON
#define QUANT_Q8_PACK_COMMON
/* Weight rows per packed strip. */
#define Q8P_NR 8
/* Activation rows per pass over the packed strips (their scales decoded
 * once per pass: 128 x 64 floats on the stack). */
#define Q8P_ROWS 128
/* Activation rows per tile: 4, as the in-place tiles (q8_tile_rows serves
 * both; 5, 6 and 8 measured no faster: the products, not the registers,
 * bound it). */
#define Q8P_MR QMR_MAX
/* Activation rows from which the packed kernel runs. 2 threads (EPYC,
 * AVX2), Qwen3-0.6B's projections, GFLOP/s in place / packed: 8 rows 132 /
 * 99, 16 rows ~137 / ~137, 24 rows 131-138 / 146-162, 64 rows 141 / 175,
 * 512 rows 140 / 182. */
#define Q8P_MIN_ROWS 16
#endif

/* Packs blocks [0, seg) of the 8 weight rows wr[0..7] (each at its first
 * block of the segment): pk + 256 b + 32 c holds quants 4c..4c+3 of block
 * b of rows 0..7 in turn; dw[8 b + r] is row r's scale of block b. */
QFN void q8p_pack(WeightType type, const uint8_t *const *wr, int seg, uint8_t *pk, float *dw) {
    const size_t bs = weight_block_bytes_const(type);
    for (int b = 0; b < seg; b++) {
        __m256i r[Q8P_NR], t[Q8P_NR], u[Q8P_NR];
        uint16_t h[Q8P_NR];
        QUNROLL for (int j = 0; j < Q8P_NR; j++) {
            r[j] = q32_signed(type, wr[j] + (size_t)b * bs);
            memcpy(&h[j], wr[j] + (size_t)b * bs, sizeof h[j]);
        }
        /* Dwords (chunks of 4 quants) transposed per 128-bit lane: t holds
         * row pairs, u row quads [r0 r1 r2 r3 of chunk c | of chunk c + 4]. */
        QUNROLL for (int j = 0; j < Q8P_NR; j += 2) {
            t[j] = _mm256_unpacklo_epi32(r[j], r[j + 1]);
            t[j + 1] = _mm256_unpackhi_epi32(r[j], r[j + 1]);
        }
        QUNROLL for (int q = 0; q < 2; q++) { /* rows 0-3, rows 4-7 */
            __m256i *tq = t + 4 * q;
            u[4 * q + 0] = _mm256_unpacklo_epi64(tq[0], tq[2]);
            u[4 * q + 1] = _mm256_unpackhi_epi64(tq[0], tq[2]);
            u[4 * q + 2] = _mm256_unpacklo_epi64(tq[1], tq[3]);
            u[4 * q + 3] = _mm256_unpackhi_epi64(tq[1], tq[3]);
        }
        uint8_t *out = pk + (size_t)b * 256;
        QUNROLL for (int c = 0; c < 4; c++) {
            _mm256_store_si256((__m256i *)(out + 32 * c), _mm256_permute2x128_si256(u[c], u[c + 4], 0x20));
            _mm256_store_si256((__m256i *)(out + 32 * (c + 4)),
                               _mm256_permute2x128_si256(u[c], u[c + 4], 0x31));
        }
        _mm_storeu_ps(dw + 8 * b, q_f16x4(h[0], h[1], h[2], h[3]));
        _mm_storeu_ps(dw + 8 * b + 4, q_f16x4(h[4], h[5], h[6], h[7]));
    }
}

/* One packed strip (seg blocks) times MR activation rows xr[i] (at the
 * segment's first block; dx[i] their decoded scales): 8 outputs per row
 * at y + i * ldy, of which nvalid are kept; added to y when add. */
QFN void q8p_tile(int MR, const uint8_t *pk, const float *dw, int seg, const uint8_t *const *xr,
                  const float *const *dx, float *y, int ldy, int nvalid, int add) {
    const size_t bs = sizeof(BlockQ8_0);
    __m256 facc[Q8P_MR];
    QUNROLL for (int i = 0; i < MR; i++) facc[i] = _mm256_setzero_ps();
    for (int b = 0; b < seg; b++) {
        __m256i acc[Q8P_MR];
        QUNROLL for (int i = 0; i < MR; i++) acc[i] = _mm256_setzero_si256();
        QUNROLL for (int c = 0; c < 8; c++) {
            __m256i w = _mm256_load_si256((const __m256i *)(pk + (size_t)b * 256 + 32 * c));
            __m256i aw = _mm256_abs_epi8(w); /* -128 reads as 128 unsigned */
            QUNROLL for (int i = 0; i < MR; i++) {
                int32_t q4;
                memcpy(&q4, xr[i] + (size_t)b * bs + 2 + 4 * c, sizeof q4);
                acc[i] = q8_dot4(acc[i], aw, _mm256_sign_epi8(_mm256_set1_epi32(q4), w));
            }
        }
        __m256 d = _mm256_loadu_ps(dw + 8 * b);
        QUNROLL for (int i = 0; i < MR; i++) {
            __m256 scale = _mm256_mul_ps(d, _mm256_broadcast_ss(dx[i] + b));
            facc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i]), scale, facc[i]);
        }
    }
    QUNROLL for (int i = 0; i < MR; i++) {
        float *yi = y + (size_t)i * ldy;
        if (nvalid == Q8P_NR && !add) {
            _mm256_storeu_ps(yi, facc[i]);
            continue;
        }
        float out[Q8P_NR];
        _mm256_storeu_ps(out, facc[i]);
        for (int j = 0; j < nvalid; j++) yi[j] = add ? yi[j] + out[j] : out[j];
    }
}

#define Q8P_TILE(MR)                                                                              \
    QTILE void q8p_tile_##MR(const uint8_t *pk, const float *dw, int seg,                        \
                             const uint8_t *const *xr, const float *const *dx, float *y,         \
                             int ldy, int nv, int add) {                                         \
        q8p_tile(MR, pk, dw, seg, xr, dx, y, ldy, nv, add);                                      \
    }

typedef void (*Q8PTileFn)(const uint8_t *pk, const float *dw, int seg, const uint8_t *const *xr,
                          const float *const *dx, float *y, int ldy, int nv, int add);

Q8P_TILE(1)
Q8P_TILE(2)
Q8P_TILE(3)
Q8P_TILE(4)

static const Q8PTileFn q8p_tiles[Q8P_MR] = {q8p_tile_1, q8p_tile_2, q8p_tile_3, q8p_tile_4};

/* The packing, compiled per type. */
#define Q8P_PACK(NAME, T)                                                                         \
    QTILE void q8p_pack_##NAME(const uint8_t *const *wr, int seg, uint8_t *pk, float *dw) {      \
        q8p_pack(T, wr, seg, pk, dw);                                                             \
    }
Q8P_PACK(q8_0, WEIGHT_Q8_0)
Q8P_PACK(q4_0, WEIGHT_Q4_0)
Q8P_PACK(q5_0, WEIGHT_Q5_0)
Q8P_PACK(iq4_nl, WEIGHT_IQ4_NL)

typedef void (*Q8PPackFn)(const uint8_t *const *wr, int seg, uint8_t *pk, float *dw);
static const Q8PPackFn q8p_packs[4] = {q8p_pack_q8_0, q8p_pack_q4_0, q8p_pack_q5_0, q8p_pack_iq4_nl};

/* quant_gemm for Q8_0 weights and many activation rows: per K segment of
 * Q8_SEG blocks and pass of Q8P_ROWS activation rows (their scales
 * decoded once), each strip of 8 weight rows is packed and multiplied by
 * every activation row of the pass, mr (1..4) at a time. */
__attribute__((target(QT))) static void q8p_gemm(WeightType t, const void *w, int K, const void *xq, int M,
                                                 float *y, int ldy, int n0, int n1, int mr) {
    const size_t bs = weight_block_bytes(t);
    const Q8PPackFn pack = q8p_packs[q32_index(t)];
    size_t wrb = weight_row_bytes(t, K);
    size_t xrb = quant_act_row_bytes(QUANT_ACT_Q8_0, K);
    int nb = K / QK8_0;
    const uint8_t *wb = w, *xb = xq;
    _Alignas(32) uint8_t pk[Q8_SEG * 256];
    float dw[Q8P_NR * Q8_SEG], dx[Q8P_ROWS * Q8_SEG];
    for (int k0 = 0; k0 < nb; k0 += Q8_SEG) {
        int seg = nb - k0 < Q8_SEG ? nb - k0 : Q8_SEG;
        for (int mb = 0; mb < M; mb += Q8P_ROWS) {
            int me = M - mb < Q8P_ROWS ? M : mb + Q8P_ROWS;
            q8_decode_dx(xb, xrb, k0, seg, mb, me, dx);
            for (int n = n0; n < n1; n += Q8P_NR) {
                int nv = n1 - n < Q8P_NR ? n1 - n : Q8P_NR;
                const uint8_t *wr[Q8P_NR];
                for (int j = 0; j < Q8P_NR; j++)
                    wr[j] = wb + (size_t)(n + (j < nv ? j : nv - 1)) * wrb + (size_t)k0 * bs;
                pack(wr, seg, pk, dw);
                for (int m = mb; m < me;) {
                    int r = me - m < mr ? me - m : mr;
                    const uint8_t *xr[QMR_MAX];
                    const float *dxr[QMR_MAX];
                    q8_tile_rows(xb, xrb, k0, dx, seg, mb, m, r, xr, dxr);
                    q8p_tiles[r - 1](pk, dw, seg, xr, dxr, y + (size_t)m * ldy + n, ldy, nv, k0 > 0);
                    m += r;
                }
            }
        }
    }
}

/* quant_gemm for Q8_0, Q4_0, Q5_0 and IQ4_NL weights at this level. */
__attribute__((target(QT))) static void q_gemm_q32(WeightType t, const void *w, int K, const void *xq, int M,
                                                   float *y, int ldy, int n0, int n1, int mr) {
    if (M >= Q8P_MIN_ROWS) return q8p_gemm(t, w, K, xq, M, y, ldy, n0, n1, mr);
    q_gemm_q8_0_strips(t, w, K, xq, M, y, ldy, n0, n1, mr);
}
