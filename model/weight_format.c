/*
 * weight_format.c - the reference definition of each block-quantized type:
 * decode, a simple encoder, the activations' 8-bit quantization and the
 * integer dot product the SIMD kernels compute (cpu/cpu_matmul_quant.c is
 * tested against these).
 *
 * Hand-written from the GGUF format's block layouts (no packaged C library
 * decodes them). Plain C, one value at a time, float32 arithmetic in the
 * order the layout implies (Q4_K: (d * sc) * q - (dmin * m)), so decoding
 * is bit-exact with any other faithful decoder (scripts/make_gguf.py's,
 * gguf-py's). The encoders choose scales by max-abs / min-max: valid
 * encodings with sensible error, not llama-quantize's search.
 */
#include "weight_format.h"

#include <math.h>
#include <string.h>

#include "base/half.h"

int weight_block_elems(WeightType t) {
    switch (t) {
    case WEIGHT_Q8_0:
    case WEIGHT_Q4_0:
    case WEIGHT_Q5_0:
    case WEIGHT_IQ4_NL: return QK8_0;
    case WEIGHT_Q4_K:
    case WEIGHT_Q5_K:
    case WEIGHT_Q6_K: return QK_K;
    default: return 1;
    }
}

size_t weight_block_bytes(WeightType t) {
    switch (t) {
    case WEIGHT_BF16: return 2;
    case WEIGHT_F32: return 4;
    case WEIGHT_Q8_0: return sizeof(BlockQ8_0);
    case WEIGHT_Q4_K: return sizeof(BlockQ4K);
    case WEIGHT_Q5_K: return sizeof(BlockQ5K);
    case WEIGHT_Q6_K: return sizeof(BlockQ6K);
    case WEIGHT_F8_E4M3: return 1;
    case WEIGHT_Q4_0: return sizeof(BlockQ4_0);
    case WEIGHT_Q5_0: return sizeof(BlockQ5_0);
    case WEIGHT_IQ4_NL: return sizeof(BlockIQ4NL);
    }
    return 0;
}

size_t weight_row_bytes(WeightType t, int cols) {
    int per = weight_block_elems(t);
    if (cols < 0 || cols % per) return 0;
    return (size_t)(cols / per) * weight_block_bytes(t);
}

bool weight_type_quantized(WeightType t) {
    return t != WEIGHT_BF16 && t != WEIGHT_F32 && t != WEIGHT_F8_E4M3;
}

const char *weight_type_name(WeightType t) {
    switch (t) {
    case WEIGHT_BF16: return "bf16";
    case WEIGHT_F32: return "f32";
    case WEIGHT_Q8_0: return "q8_0";
    case WEIGHT_Q4_K: return "q4_k";
    case WEIGHT_Q5_K: return "q5_k";
    case WEIGHT_Q6_K: return "q6_k";
    case WEIGHT_F8_E4M3: return "fp8_e4m3";
    case WEIGHT_Q4_0: return "q4_0";
    case WEIGHT_Q5_0: return "q5_0";
    case WEIGHT_IQ4_NL: return "iq4_nl";
    }
    return "unknown";
}

/* ---- the K types' packed 6-bit scales and mins ----------------------------
 * Eight scales sc[j] and eight mins m[j] in 12 bytes: bytes 0-3 hold sc[0..3]
 * in their low 6 bits, bytes 4-7 m[0..3]; bytes 8-11 hold the low nibbles of
 * sc[4..7] (low) and m[4..7] (high), whose top 2 bits sit in the spare top
 * bits of bytes 0-3 (sc) and 4-7 (m). */

static void k_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

static void k_pack_scales(uint8_t *s, const int *sc, const int *m) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

/* ---- decode ---------------------------------------------------------------- */

static const int8_t iq4_nl_values[16] = IQ4_NL_VALUES;

int weight_q32_value(WeightType t, const void *block, int i) {
    if (t == WEIGHT_Q8_0) return ((const BlockQ8_0 *)block)->qs[i];
    const uint8_t *qs = t == WEIGHT_Q5_0 ? ((const BlockQ5_0 *)block)->qs : ((const BlockQ4_0 *)block)->qs;
    int q = i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4;
    if (t == WEIGHT_Q4_0) return q - 8;
    if (t == WEIGHT_IQ4_NL) return iq4_nl_values[q];
    const uint8_t *qh = ((const BlockQ5_0 *)block)->qh;
    return (q | ((qh[i / 8] >> (i % 8)) & 1) << 4) - 16;
}

/* Q8_0, Q4_0, Q5_0, IQ4_NL: d * (the block's value). */
static void dequant_q32(WeightType t, const uint8_t *b, float *y) {
    uint16_t h;
    memcpy(&h, b, sizeof h);
    float d = f16_to_f32(h);
    for (int i = 0; i < QK8_0; i++) y[i] = d * (float)weight_q32_value(t, b, i);
}

/* Q4_K and Q5_K: value 64c + l of a block is the low nibble of qs[32c + l]
 * (sub-block 2c), value 64c + 32 + l its high nibble (sub-block 2c + 1);
 * Q5_K's fifth bits for those are bits 2c and 2c + 1 of qh[l]. */
static void dequant_q45_k(const uint8_t *qs, const uint8_t *qh, const uint8_t *scales,
                          uint16_t d16, uint16_t dmin16, float *y) {
    float d = f16_to_f32(d16), dmin = f16_to_f32(dmin16);
    for (int c = 0; c < 4; c++) {
        int sc0, m0, sc1, m1;
        k_scale_min(scales, 2 * c, &sc0, &m0);
        k_scale_min(scales, 2 * c + 1, &sc1, &m1);
        float d0 = d * (float)sc0, min0 = dmin * (float)m0;
        float d1 = d * (float)sc1, min1 = dmin * (float)m1;
        const uint8_t *q = qs + 32 * c;
        for (int l = 0; l < 32; l++) {
            int lo = q[l] & 0xF, hi = q[l] >> 4;
            if (qh) {
                lo |= ((qh[l] >> (2 * c)) & 1) << 4;
                hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
            }
            y[64 * c + l] = d0 * (float)lo - min0;
            y[64 * c + 32 + l] = d1 * (float)hi - min1;
        }
    }
}

/* Q6_K value index of (half h, lane l, quarter r): 128h + 32r + l, its low
 * nibble from ql[64h + l + 32 (r & 1)] (low nibble for r < 2, high for r >= 2),
 * its high two bits from qh[32h + l] >> 2r, its scale scales[8h + l/16 + 2r]. */
static int q6_value(const BlockQ6K *b, int h, int r, int l) {
    int low = b->ql[64 * h + l + 32 * (r & 1)];
    low = r < 2 ? low & 0xF : low >> 4;
    int high = (b->qh[32 * h + l] >> (2 * r)) & 3;
    return (low | (high << 4)) - 32;
}

static void dequant_q6_k(const BlockQ6K *b, float *y) {
    float d = f16_to_f32(b->d);
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < 4; r++)
            for (int l = 0; l < 32; l++) {
                float ds = d * (float)b->scales[8 * h + l / 16 + 2 * r];
                y[128 * h + 32 * r + l] = ds * (float)q6_value(b, h, r, l);
            }
}

void weight_dequantize_row(WeightType t, const void *src, float *dst, int n) {
    const uint8_t *p = src;
    int per = weight_block_elems(t);
    size_t bytes = weight_block_bytes(t);
    for (int i = 0; i < n / per; i++, p += bytes, dst += per) {
        switch (t) {
        case WEIGHT_BF16: {
            uint16_t h;
            memcpy(&h, p, 2);
            *dst = bf16_to_f32(h);
            break;
        }
        case WEIGHT_F32: memcpy(dst, p, 4); break;
        case WEIGHT_Q8_0:
        case WEIGHT_Q4_0:
        case WEIGHT_Q5_0:
        case WEIGHT_IQ4_NL: dequant_q32(t, p, dst); break;
        case WEIGHT_Q4_K: {
            const BlockQ4K *b = (const BlockQ4K *)p;
            dequant_q45_k(b->qs, NULL, b->scales, b->d, b->dmin, dst);
            break;
        }
        case WEIGHT_Q5_K: {
            const BlockQ5K *b = (const BlockQ5K *)p;
            dequant_q45_k(b->qs, b->qh, b->scales, b->d, b->dmin, dst);
            break;
        }
        case WEIGHT_Q6_K: dequant_q6_k((const BlockQ6K *)p, dst); break;
        case WEIGHT_F8_E4M3: *dst = fp8_e4m3_to_float(*p); break; /* before its block scale */
        }
    }
}

/* ---- float8_e4m3fn ----------------------------------------------------------- */

float fp8_e4m3_to_float(uint8_t b) {
    if (fp8_e4m3_is_nan(b)) return NAN;
    int exp = (b >> 3) & 15, mant = b & 7;
    float mag = exp == 0 ? ldexpf((float)mant, -9) : ldexpf((float)(8 + mant), exp - 10);
    return (b & 0x80) ? -mag : mag;
}

uint8_t fp8_e4m3_from_float(float f) {
    if (isnan(f)) return 0x7f;
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    uint8_t mag;
    if (a >= 448.0f) {
        mag = 0x7e;
    } else if (a < ldexpf(1.0f, -6)) { /* subnormal: multiples of 2^-9 (8 of them is 0x08, the first normal) */
        mag = (uint8_t)nearbyintf(ldexpf(a, 9));
    } else {
        int e;
        frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1): 1.xxx * 2^(e - 1) */
        int mant = (int)nearbyintf(ldexpf(a, 4 - e)) - 8; /* (a / 2^(e-1) - 1) * 8, rounded to even */
        if (mant == 8) {
            mant = 0;
            e++;
        }
        mag = (uint8_t)(((e - 1 + 7) << 3) | mant);
    }
    return sign | mag;
}

void fp8_dequantize_rows(const uint8_t *q, const float *scales, int cols, int n0, int n1, float *dst) {
    int tiles = (cols + FP8_BLOCK - 1) / FP8_BLOCK;
    for (int n = n0; n < n1; n++, dst += cols) {
        const float *row_scales = scales + (size_t)(n / FP8_BLOCK) * tiles;
        const uint8_t *row = q + (size_t)n * cols;
        for (int k = 0; k < cols; k++) dst[k] = fp8_e4m3_to_float(row[k]) * row_scales[k / FP8_BLOCK];
    }
}

/* ---- encode ---------------------------------------------------------------- */

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static void quant_q8_0(const float *x, BlockQ8_0 *b) {
    float amax = 0;
    for (int i = 0; i < QK8_0; i++) amax = fmaxf(amax, fabsf(x[i]));
    float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    b->d = f32_to_f16(d);
    for (int i = 0; i < QK8_0; i++) b->qs[i] = (int8_t)clamp_int((int)lrintf(x[i] * id), -127, 127);
}

/* Q4_0 / Q5_0 with `half` = 8 or 16: d = amax / (half - 1), values in
 * [-half, half - 1] (the most negative level unused), stored + half. */
static void quant_q45_0(WeightType t, const float *x, uint8_t *b) {
    const int half = t == WEIGHT_Q4_0 ? 8 : 16;
    float amax = 0;
    for (int i = 0; i < QK8_0; i++) amax = fmaxf(amax, fabsf(x[i]));
    uint16_t dh = f32_to_f16(amax / (float)(half - 1));
    memcpy(b, &dh, sizeof dh);
    float d = f16_to_f32(dh), id = d > 0 ? 1.0f / d : 0.0f;
    uint8_t *qs = t == WEIGHT_Q4_0 ? ((BlockQ4_0 *)b)->qs : ((BlockQ5_0 *)b)->qs;
    uint32_t high = 0;
    memset(qs, 0, QK8_0 / 2);
    for (int i = 0; i < QK8_0; i++) {
        int q = clamp_int((int)lrintf(x[i] * id), -half, half - 1) + half;
        qs[i % 16] |= (uint8_t)((q & 0xF) << (i < 16 ? 0 : 4));
        high |= (uint32_t)((q >> 4) & 1) << i;
    }
    if (t == WEIGHT_Q5_0)
        for (int j = 0; j < 4; j++) ((BlockQ5_0 *)b)->qh[j] = (uint8_t)(high >> (8 * j));
}

/* IQ4_NL: d = -(the value of largest magnitude) / 127, so that value is
 * level 0 exactly; every value to its nearest level (ties to the lower). */
static void quant_iq4_nl(const float *x, BlockIQ4NL *b) {
    float big = 0;
    for (int i = 0; i < QK8_0; i++)
        if (fabsf(x[i]) > fabsf(big)) big = x[i];
    b->d = f32_to_f16(-big / 127.0f);
    float d = f16_to_f32(b->d);
    memset(b->qs, 0, sizeof b->qs);
    for (int i = 0; i < QK8_0; i++) {
        int best = d != 0 ? 0 : 8; /* d = 0: the level nearest 0 */
        for (int k = 1; d != 0 && k < 16; k++)
            if (fabsf((float)iq4_nl_values[k] - x[i] / d) < fabsf((float)iq4_nl_values[best] - x[i] / d)) best = k;
        b->qs[i % 16] |= (uint8_t)(best << (i < 16 ? 0 : 4));
    }
}

/* Q4_K / Q5_K with `levels` = 15 or 31: each 32-value sub-block spans
 * [-min, -min + levels * scale] with min >= 0; the eight scales and mins are
 * then themselves quantized to 6 bits against d and dmin. */
static void quant_q45_k(const float *x, int levels, uint8_t *qs, uint8_t *qh, uint8_t *scales,
                        uint16_t *d16, uint16_t *dmin16) {
    float sub_scale[8], sub_min[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float lo = 0, hi = 0;
        for (int l = 0; l < 32; l++) {
            lo = fminf(lo, x[32 * j + l]);
            hi = fmaxf(hi, x[32 * j + l]);
        }
        sub_scale[j] = (hi - lo) / (float)levels;
        sub_min[j] = -lo;
        max_scale = fmaxf(max_scale, sub_scale[j]);
        max_min = fmaxf(max_min, sub_min[j]);
    }
    *d16 = f32_to_f16(max_scale / 63.0f);
    *dmin16 = f32_to_f16(max_min / 63.0f);
    float d = f16_to_f32(*d16), dmin = f16_to_f32(*dmin16);
    int sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = d > 0 ? clamp_int((int)lrintf(sub_scale[j] / d), 0, 63) : 0;
        m[j] = dmin > 0 ? clamp_int((int)lrintf(sub_min[j] / dmin), 0, 63) : 0;
    }
    k_pack_scales(scales, sc, m);
    memset(qs, 0, QK_K / 2);
    if (qh) memset(qh, 0, QK_K / 8);
    for (int j = 0; j < 8; j++) {
        float ds = d * (float)sc[j], dm = dmin * (float)m[j];
        int c = j / 2, hi = j & 1;
        for (int l = 0; l < 32; l++) {
            int q = ds > 0 ? clamp_int((int)lrintf((x[32 * j + l] + dm) / ds), 0, levels) : 0;
            qs[32 * c + l] |= (uint8_t)((q & 0xF) << (4 * hi));
            if (qh) qh[l] |= (uint8_t)(((q >> 4) & 1) << (2 * c + hi));
        }
    }
}

static void quant_q6_k(const float *x, BlockQ6K *b) {
    float sub_scale[16], max_scale = 0;
    for (int j = 0; j < 16; j++) {
        float amax = 0;
        for (int l = 0; l < 16; l++) amax = fmaxf(amax, fabsf(x[16 * j + l]));
        sub_scale[j] = amax / 31.0f;
        max_scale = fmaxf(max_scale, sub_scale[j]);
    }
    b->d = f32_to_f16(max_scale / 127.0f);
    float d = f16_to_f32(b->d);
    for (int j = 0; j < 16; j++)
        b->scales[j] = (int8_t)(d > 0 ? clamp_int((int)lrintf(sub_scale[j] / d), 0, 127) : 0);
    memset(b->ql, 0, sizeof b->ql);
    memset(b->qh, 0, sizeof b->qh);
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < 4; r++)
            for (int l = 0; l < 32; l++) {
                int i = 128 * h + 32 * r + l;
                float ds = d * (float)b->scales[8 * h + l / 16 + 2 * r];
                int q = (ds > 0 ? clamp_int((int)lrintf(x[i] / ds), -32, 31) : 0) + 32;
                b->ql[64 * h + l + 32 * (r & 1)] |= (uint8_t)((q & 0xF) << (r < 2 ? 0 : 4));
                b->qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * r));
            }
}

void weight_quantize_row(WeightType t, const float *src, void *dst, int n) {
    uint8_t *p = dst;
    int per = weight_block_elems(t);
    size_t bytes = weight_block_bytes(t);
    for (int i = 0; i < n / per; i++, p += bytes, src += per) {
        switch (t) {
        case WEIGHT_BF16: {
            uint16_t h = f32_to_bf16(*src);
            memcpy(p, &h, 2);
            break;
        }
        case WEIGHT_F32: memcpy(p, src, 4); break;
        case WEIGHT_Q8_0: quant_q8_0(src, (BlockQ8_0 *)p); break;
        case WEIGHT_Q4_K: {
            BlockQ4K *b = (BlockQ4K *)p;
            quant_q45_k(src, 15, b->qs, NULL, b->scales, &b->d, &b->dmin);
            break;
        }
        case WEIGHT_Q5_K: {
            BlockQ5K *b = (BlockQ5K *)p;
            quant_q45_k(src, 31, b->qs, b->qh, b->scales, &b->d, &b->dmin);
            break;
        }
        case WEIGHT_Q6_K: quant_q6_k(src, (BlockQ6K *)p); break;
        case WEIGHT_F8_E4M3: *p = fp8_e4m3_from_float(*src); break;
        case WEIGHT_Q4_0:
        case WEIGHT_Q5_0: quant_q45_0(t, src, p); break;
        case WEIGHT_IQ4_NL: quant_iq4_nl(src, (BlockIQ4NL *)p); break;
        }
    }
}

/* ---- the activations' side -------------------------------------------------- */

void quantize_row_q8_k(const float *x, BlockQ8K *y, int n) {
    for (int b = 0; b < n / QK_K; b++, x += QK_K, y++) {
        float amax = 0;
        for (int i = 0; i < QK_K; i++) amax = fmaxf(amax, fabsf(x[i]));
        float id = amax > 0 ? 127.0f / amax : 0.0f;
        y->d = amax > 0 ? amax / 127.0f : 0.0f;
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int i = 16 * j; i < 16 * j + 16; i++) {
                y->qs[i] = (int8_t)clamp_int((int)lrintf(x[i] * id), -127, 127);
                sum += y->qs[i];
            }
            y->bsums[j] = (int16_t)sum;
        }
    }
}

void quantize_row_q8_0(const float *x, BlockQ8_0 *y, int n) {
    for (int b = 0; b < n / QK8_0; b++) quant_q8_0(x + b * QK8_0, y + b);
}

/* ---- the integer dot product ------------------------------------------------ */

static float dot_q45_k(const uint8_t *qs, const uint8_t *qh, const uint8_t *scales, uint16_t d16,
                       uint16_t dmin16, const BlockQ8K *x) {
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; j++) {
        int sc, m, c = j / 2, hi = j & 1, isum = 0;
        k_scale_min(scales, j, &sc, &m);
        for (int l = 0; l < 32; l++) {
            int q = (qs[32 * c + l] >> (4 * hi)) & 0xF;
            if (qh) q |= ((qh[l] >> (2 * c + hi)) & 1) << 4;
            isum += q * x->qs[32 * j + l];
        }
        sumi += sc * isum;
        summ += m * (x->bsums[2 * j] + x->bsums[2 * j + 1]);
    }
    return f16_to_f32(d16) * x->d * (float)sumi - f16_to_f32(dmin16) * x->d * (float)summ;
}

static float dot_q6_k(const BlockQ6K *b, const BlockQ8K *x) {
    int sumi = 0;
    for (int j = 0; j < 16; j++) {
        int isum = 0;
        for (int i = 16 * j; i < 16 * j + 16; i++) {
            int h = i / 128, r = (i % 128) / 32, l = i % 32;
            isum += q6_value(b, h, r, l) * x->qs[i];
        }
        /* sub-block j covers values 16j.. of one (h, r): its scale index is 8h + l/16 + 2r */
        int h = j / 8, r = (j % 8) / 2, half = j % 2;
        sumi += b->scales[8 * h + half + 2 * r] * isum;
    }
    return f16_to_f32(b->d) * x->d * (float)sumi;
}

float weight_dot_q8_ref(WeightType t, const void *w_row, const void *x_q8, int n) {
    float sum = 0;
    if (weight_type_q32(t)) {
        const BlockQ8_0 *x = x_q8;
        const size_t bs = weight_block_bytes(t);
        for (int b = 0; b < n / QK8_0; b++) {
            const uint8_t *w = (const uint8_t *)w_row + (size_t)b * bs;
            uint16_t dh;
            memcpy(&dh, w, sizeof dh);
            int isum = 0;
            for (int i = 0; i < QK8_0; i++) isum += weight_q32_value(t, w, i) * x[b].qs[i];
            sum += f16_to_f32(dh) * f16_to_f32(x[b].d) * (float)isum;
        }
        return sum;
    }
    const BlockQ8K *x = x_q8;
    for (int b = 0; b < n / QK_K; b++) {
        switch (t) {
        case WEIGHT_Q4_K: {
            const BlockQ4K *w = (const BlockQ4K *)w_row + b;
            sum += dot_q45_k(w->qs, NULL, w->scales, w->d, w->dmin, x + b);
            break;
        }
        case WEIGHT_Q5_K: {
            const BlockQ5K *w = (const BlockQ5K *)w_row + b;
            sum += dot_q45_k(w->qs, w->qh, w->scales, w->d, w->dmin, x + b);
            break;
        }
        case WEIGHT_Q6_K: sum += dot_q6_k((const BlockQ6K *)w_row + b, x + b); break;
        default: return NAN;
        }
    }
    return sum;
}
