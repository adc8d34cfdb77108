/*
 * half.h - bfloat16 and IEEE half conversions (scalar, exact where exact is possible).
 *
 * bf16 is the top 16 bits of a float32, so widening is a shift; narrowing
 * rounds to nearest even, as PyTorch and numpy do.
 */
#ifndef NANOVLLM_HALF_H
#define NANOVLLM_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40); /* quiet NaN */
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13); /* inf or NaN */
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign; /* signed zero */
    } else {         /* subnormal: normalise the mantissa */
        exp = 113;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            exp--;
        }
        bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* float -> IEEE half, rounding to nearest even; overflow to infinity. */
static inline uint16_t f32_to_f16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t abs_bits = bits & 0x7fffffffu;
    if (abs_bits > 0x7f800000u) return sign | 0x7e00u; /* NaN */
    if (abs_bits >= 0x477ff000u) return sign | 0x7c00u; /* rounds past 65504 */
    if (abs_bits < 0x38800000u) { /* under 2^-14: a multiple of 2^-24 (1024 carries into the exponent) */
        float a;
        memcpy(&a, &abs_bits, sizeof a);
        return (uint16_t)(sign | (uint16_t)lrintf(a * 16777216.0f));
    }
    uint32_t r = abs_bits - ((127u - 15u) << 23);
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

#endif
