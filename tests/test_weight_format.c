/*
 * test_weight_format.c - the reference definition of the quantized block
 * types (model/weight_format.c): half-precision rounding, encode/decode
 * round trips with the error each type should have, hand-built blocks
 * decoding to the values the layout defines, and the integer dot product
 * agreeing with the float product of what the blocks decode to.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/half.h"
#include "model/weight_format.h"

static const WeightType QUANT_TYPES[] = {WEIGHT_Q8_0, WEIGHT_Q4_K, WEIGHT_Q5_K, WEIGHT_Q6_K,
                                         WEIGHT_Q4_0, WEIGHT_Q5_0, WEIGHT_IQ4_NL};

static uint64_t rng_state = 88172645463325252ull;
static double gaussian(void) {
    double u[2];
    for (int i = 0; i < 2; i++) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        u[i] = ((rng_state >> 11) + 0.5) / 9007199254740992.0;
    }
    return sqrt(-2 * log(u[0])) * cos(2 * M_PI * u[1]);
}

Test(weight_format, half_rounding_is_exact_and_nearest_even) {
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN payloads */
        cr_assert_eq(f32_to_f16(f16_to_f32((uint16_t)h)), h, "half %04x", h);
    }
    /* halfway between 1 and 1 + 2^-10 rounds to even (1), 3/4 of the way up */
    cr_assert_eq(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    cr_assert_eq(f32_to_f16(1.0f + 3 * 0x1p-12f), 0x3c01);
    cr_assert_eq(f32_to_f16(65519.0f), 0x7bff);
    cr_assert_eq(f32_to_f16(65520.0f), 0x7c00);
    cr_assert_eq(f32_to_f16(0x1p-25f), 0x0000); /* half of the smallest subnormal: to even */
    cr_assert_eq(f32_to_f16(0x1p-24f * 1.5f), 0x0002);
    cr_assert_eq(f32_to_f16(-2.0f), 0xc000);
}

Test(weight_format, sizes) {
    cr_assert_eq(weight_row_bytes(WEIGHT_Q4_K, 1024), 4 * 144);
    cr_assert_eq(weight_row_bytes(WEIGHT_Q8_0, 96), 3 * 34);
    cr_assert_eq(weight_row_bytes(WEIGHT_Q6_K, 100), 0);
    cr_assert_eq(weight_row_bytes(WEIGHT_BF16, 7), 14);
    cr_assert_eq(weight_row_bytes(WEIGHT_Q4_0, 96), 3 * 18);
    cr_assert_eq(weight_row_bytes(WEIGHT_Q5_0, 64), 2 * 22);
    cr_assert_eq(weight_row_bytes(WEIGHT_Q5_0, 48), 0);
    cr_assert(weight_type_quantized(WEIGHT_Q4_0) && weight_type_q32(WEIGHT_Q5_0) && !weight_type_q32(WEIGHT_Q4_K));
    cr_assert(weight_type_quantized(WEIGHT_Q5_K));
    cr_assert(!weight_type_quantized(WEIGHT_BF16));
}

/* Relative RMS error of encode + decode on Gaussian rows: what each type's
 * bits allow (Q8_0 ~0.5%, Q6_K ~2%, Q5_K ~4%, Q4_K ~8% with simple scales;
 * Q4_0 and Q5_0 scale each 32 by its max-abs: ~12% and ~6%). */
Test(weight_format, round_trip_error_per_type) {
    const int n = 3 * 256;
    const double bound[] = {0.01, 0.10, 0.05, 0.03, 0.15, 0.08, 0.12};
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    unsigned char *q = malloc(weight_row_bytes(WEIGHT_Q8_0, n));
    cr_assert(x && y && q);
    for (size_t t = 0; t < sizeof QUANT_TYPES / sizeof QUANT_TYPES[0]; t++) {
        for (int i = 0; i < n; i++) x[i] = (float)gaussian();
        x[5] = 9.0f; /* one outlier per row, as real weights have */
        weight_quantize_row(QUANT_TYPES[t], x, q, n);
        weight_dequantize_row(QUANT_TYPES[t], q, y, n);
        double err = 0, ref = 0;
        for (int i = 0; i < n; i++) {
            err += (double)(x[i] - y[i]) * (x[i] - y[i]);
            ref += (double)x[i] * x[i];
        }
        double rel = sqrt(err / ref);
        cr_assert(rel < bound[t], "%s: relative error %g", weight_type_name(QUANT_TYPES[t]), rel);
        cr_log_info("%s: round trip relative error %.3g", weight_type_name(QUANT_TYPES[t]), rel);
        cr_assert(rel > 1e-5, "%s: suspiciously exact", weight_type_name(QUANT_TYPES[t]));
    }
    free(x);
    free(y);
    free(q);
}

/* Hand-built Q4_K: scales and mins above 15 use the packed high bits. */
Test(weight_format, q4_k_block_decodes_as_laid_out) {
    BlockQ4K b;
    memset(&b, 0, sizeof b);
    b.d = f32_to_f16(0.5f);
    b.dmin = f32_to_f16(0.25f);
    int sc[8] = {1, 17, 33, 63, 2, 20, 47, 60}, m[8] = {0, 5, 16, 63, 31, 32, 9, 48};
    for (int j = 0; j < 4; j++) {
        b.scales[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        b.scales[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        b.scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
    for (int i = 0; i < 128; i++) b.qs[i] = (uint8_t)((i * 7) & 0xff);
    float y[256];
    weight_dequantize_row(WEIGHT_Q4_K, &b, y, 256);
    for (int i = 0; i < 256; i++) {
        int j = i / 32, l = i % 32, chunk = i / 64, upper = (i / 32) & 1;
        int q = (b.qs[32 * chunk + l] >> (4 * upper)) & 15;
        float want = 0.5f * (float)sc[j] * (float)q - 0.25f * (float)m[j];
        cr_assert_eq(y[i], want, "value %d: %g != %g", i, y[i], want);
    }
}

/* Hand-built Q6_K: quarter r of half h reads ql's low (r < 2) or high nibbles. */
Test(weight_format, q6_k_block_decodes_as_laid_out) {
    BlockQ6K b;
    for (int i = 0; i < 128; i++) b.ql[i] = (uint8_t)(i * 13 + 5);
    for (int i = 0; i < 64; i++) b.qh[i] = (uint8_t)(i * 29 + 3);
    for (int i = 0; i < 16; i++) b.scales[i] = (int8_t)(i * 9 - 60);
    b.d = f32_to_f16(0.125f);
    float y[256];
    weight_dequantize_row(WEIGHT_Q6_K, &b, y, 256);
    for (int i = 0; i < 256; i++) {
        int h = i / 128, r = (i % 128) / 32, l = i % 32;
        int low = b.ql[64 * h + l + (r == 1 || r == 3 ? 32 : 0)];
        low = r < 2 ? low & 15 : low >> 4;
        int q = (low | (((b.qh[32 * h + l] >> (2 * r)) & 3) << 4)) - 32;
        float want = 0.125f * (float)b.scales[8 * h + l / 16 + 2 * r] * (float)q;
        cr_assert_eq(y[i], want, "value %d", i);
    }
}

/* Hand-built Q4_0, Q5_0 and IQ4_NL: value l the low nibble of qs[l], 16 + l
 * the high one; Q5_0's fifth bit of value l bit l of the little-endian qh;
 * IQ4_NL's nibble a code into its 16 levels. */
Test(weight_format, q4_0_q5_0_iq4_nl_blocks_decode_as_laid_out) {
    BlockQ4_0 a;
    BlockQ5_0 b;
    a.d = b.d = f32_to_f16(0.5f);
    for (int i = 0; i < 16; i++) a.qs[i] = b.qs[i] = (uint8_t)(i * 37 + 11);
    const uint32_t high = 0x9a3c51e7u;
    for (int j = 0; j < 4; j++) b.qh[j] = (uint8_t)(high >> (8 * j));
    float ya[32], yb[32], yn[32];
    weight_dequantize_row(WEIGHT_Q4_0, &a, ya, 32);
    weight_dequantize_row(WEIGHT_Q5_0, &b, yb, 32);
    weight_dequantize_row(WEIGHT_IQ4_NL, &a, yn, 32); /* the same bytes as IQ4_NL codes */
    static const int8_t levels[16] = IQ4_NL_VALUES;
    for (int i = 0; i < 32; i++) {
        int nib = i < 16 ? a.qs[i] & 15 : a.qs[i - 16] >> 4;
        cr_assert_eq(ya[i], 0.5f * (float)(nib - 8), "q4_0 value %d", i);
        cr_assert_eq(yb[i], 0.5f * (float)((nib | (int)((high >> i) & 1) << 4) - 16), "q5_0 value %d", i);
        cr_assert_eq(yn[i], 0.5f * (float)levels[nib], "iq4_nl value %d", i);
    }
}

/* Q5_K's fifth bits: bit 2c (low half of chunk c) and 2c + 1 (high half) of qh[l]. */
Test(weight_format, q5_k_fifth_bit) {
    BlockQ5K b;
    memset(&b, 0, sizeof b);
    b.d = f32_to_f16(1.0f);
    for (int j = 0; j < 4; j++) b.scales[j] = 1; /* sc 1 for sub-blocks 0-3 */
    b.scales[8] = b.scales[9] = b.scales[10] = b.scales[11] = 1; /* and 4-7 */
    b.qh[3] = 1u << 5; /* value 64*2 + 32 + 3 = 163 gets 16 */
    float y[256];
    weight_dequantize_row(WEIGHT_Q5_K, &b, y, 256);
    for (int i = 0; i < 256; i++) cr_assert_eq(y[i], i == 163 ? 16.0f : 0.0f, "value %d", i);
}

/* The integer dot product equals the float64 product of the two decoded rows
 * up to float32 summation. */
Test(weight_format, integer_dot_matches_decoded_product) {
    const int n = 5 * 256;
    float *w = malloc(n * sizeof *w), *x = malloc(n * sizeof *x), *wd = malloc(n * sizeof *wd);
    unsigned char *wq = malloc(weight_row_bytes(WEIGHT_Q8_0, n));
    BlockQ8K *xk = malloc(n / QK_K * sizeof *xk);
    BlockQ8_0 *x0 = malloc(n / QK8_0 * sizeof *x0);
    cr_assert(w && x && wd && wq && xk && x0);
    for (int trial = 0; trial < 20; trial++) {
        for (size_t t = 0; t < sizeof QUANT_TYPES / sizeof QUANT_TYPES[0]; t++) {
            WeightType type = QUANT_TYPES[t];
            for (int i = 0; i < n; i++) {
                w[i] = (float)gaussian();
                x[i] = (float)(gaussian() * (trial + 1));
            }
            weight_quantize_row(type, w, wq, n);
            weight_dequantize_row(type, wq, wd, n);
            double want = 0, mag = 0;
            if (weight_type_q32(type)) {
                quantize_row_q8_0(x, x0, n);
                for (int i = 0; i < n; i++) {
                    double xv = (double)f16_to_f32(x0[i / 32].d) * x0[i / 32].qs[i % 32];
                    want += wd[i] * xv;
                    mag += fabs(wd[i] * xv);
                }
            } else {
                quantize_row_q8_k(x, xk, n);
                for (int b = 0; b < n / QK_K; b++) {
                    for (int j = 0; j < 16; j++) {
                        int s = 0;
                        for (int i = 0; i < 16; i++) s += xk[b].qs[16 * j + i];
                        cr_assert_eq(xk[b].bsums[j], s);
                    }
                }
                for (int i = 0; i < n; i++) {
                    double xv = (double)xk[i / 256].d * xk[i / 256].qs[i % 256];
                    want += wd[i] * xv;
                    mag += fabs(wd[i] * xv);
                }
            }
            float got = weight_dot_q8_ref(type, wq, weight_type_q32(type) ? (void *)x0 : (void *)xk, n);
            cr_assert(fabs(got - want) <= 1e-5 * mag, "%s trial %d: %g vs %g (|.| %g)",
                      weight_type_name(type), trial, got, want, mag);
        }
    }
    free(w);
    free(x);
    free(wd);
    free(wq);
    free(xk);
    free(x0);
}

/* The activations' 8-bit blocks keep each value within half a step. */
Test(weight_format, activation_quantization_error) {
    const int n = 512;
    float x[512];
    BlockQ8K q[2];
    for (int i = 0; i < n; i++) x[i] = (float)gaussian();
    x[300] = 0;
    quantize_row_q8_k(x, q, n);
    for (int i = 0; i < n; i++) {
        float d = q[i / 256].d;
        cr_assert(fabsf(d * q[i / 256].qs[i % 256] - x[i]) <= 0.5f * d * 1.0001f, "value %d", i);
    }
    memset(x, 0, sizeof x);
    quantize_row_q8_k(x, q, n);
    cr_assert_eq(q[0].d, 0.0f);
    cr_assert_eq(q[1].qs[7], 0);
}

/* float8_e4m3fn built bit by bit into a float32: normals move their exponent
 * (bias 7 -> 127) and mantissa (3 -> 23 bits) over; subnormals are m * 2^-9. */
static float e4m3_by_bits(uint8_t b) {
    uint32_t exp = (b >> 3) & 15, mant = b & 7, sign = (uint32_t)(b & 0x80) << 24;
    if (exp == 0) return (b & 0x80 ? -1.0f : 1.0f) * (float)mant / 512.0f;
    uint32_t bits = sign | ((exp - 7 + 127) << 23) | (mant << 20);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

Test(weight_format, fp8_e4m3_every_value) {
    for (int b = 0; b < 256; b++) {
        float v = fp8_e4m3_to_float((uint8_t)b);
        if (fp8_e4m3_is_nan((uint8_t)b)) {
            cr_assert(isnan(v), "byte %02x", b);
            cr_assert(b == 0x7f || b == 0xff);
            continue;
        }
        cr_assert_eq(v, e4m3_by_bits((uint8_t)b), "byte %02x: %g", b, v);
        cr_assert_eq(fp8_e4m3_from_float(v), (uint8_t)b, "byte %02x round trip", b);
    }
    cr_assert_eq(fp8_e4m3_to_float(0x7e), 448.0f);
    cr_assert_eq(fp8_e4m3_to_float(0x01), 0x1p-9f); /* the smallest subnormal */
    cr_assert_eq(fp8_e4m3_to_float(0x08), 0x1p-6f); /* the smallest normal */
}

Test(weight_format, fp8_e4m3_rounds_to_nearest_even_and_saturates) {
    /* between every two neighbours (positive, finite): just below the
     * midpoint rounds down, just above rounds up, the midpoint to the even
     * mantissa (the even byte, since the mantissa is the low bits) */
    for (int b = 0; b < 0x7e; b++) {
        float lo = fp8_e4m3_to_float((uint8_t)b), hi = fp8_e4m3_to_float((uint8_t)(b + 1));
        float mid = (lo + hi) / 2;
        cr_assert_eq(fp8_e4m3_from_float(nextafterf(mid, lo)), b, "below the midpoint after %02x", b);
        cr_assert_eq(fp8_e4m3_from_float(nextafterf(mid, hi)), b + 1, "above the midpoint after %02x", b);
        cr_assert_eq(fp8_e4m3_from_float(mid), (b & 1) ? b + 1 : b, "midpoint after %02x", b);
        cr_assert_eq(fp8_e4m3_from_float(-mid), 0x80 | ((b & 1) ? b + 1 : b));
    }
    cr_assert_eq(fp8_e4m3_from_float(449.0f), 0x7e);
    cr_assert_eq(fp8_e4m3_from_float(1e30f), 0x7e);
    cr_assert_eq(fp8_e4m3_from_float(-INFINITY), 0xfe);
    cr_assert_eq(fp8_e4m3_from_float(NAN), 0x7f);
    cr_assert_eq(fp8_e4m3_from_float(0x1p-11f), 0x00);
    cr_assert_eq(fp8_e4m3_from_float(-0.0f), 0x80);
}

Test(weight_format, fp8_rows_take_their_tiles_scale) {
    /* 130 x 200: tiles 2 x 2, the last row and column tiles partial */
    enum { ROWS = 130, COLS = 200 };
    static uint8_t q[ROWS * COLS];
    static float out[ROWS * COLS];
    float scales[4] = {0.5f, 2.0f, -1.0f, 0x1p-20f};
    cr_assert_eq(fp8_scale_count(ROWS, COLS), 4);
    for (int i = 0; i < ROWS * COLS; i++) q[i] = (uint8_t)(((i * 37) % 256) & 0xf7); /* bit 3 clear: no NaN */
    fp8_dequantize_rows(q, scales, COLS, 120, 130, out);
    for (int n = 120; n < 130; n++)
        for (int k = 0; k < COLS; k++) {
            float s = scales[(n / 128) * 2 + k / 128];
            cr_assert_eq(out[(n - 120) * COLS + k], fp8_e4m3_to_float(q[n * COLS + k]) * s, "[%d, %d]", n, k);
        }
}
