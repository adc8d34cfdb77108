/*
 * cpu_fp8_byte_lut.h - e4m3 bytes widened by table lookup, 64 at a time
 * (AVX-512 with VBMI): what the FP8 weight kernel (cpu_matmul_fp8_bf16.c,
 * bf16 out) and the fp8 KV cache's decode attention share (its vdpbf16ps
 * kernels in cpu_attention_decode_dot.c, bf16 out; its float32 kernels by
 * table lookup in cpu_attention_decode.c, float32 out). Hand-written, as
 * all three.
 *
 * Each user fills two 128-entry byte tables once: for every magnitude (the
 * byte's 7 low bits) the low and the high significant byte of its value in
 * the wider format; every other byte of that value is zero, and the sign is
 * the e4m3 byte's top bit, which goes to the high byte's top bit. A lookup
 * is two vpermi2b and one ternary-logic; placing the two bytes into bf16 or
 * float32 lanes is the user's.
 */
#ifndef NANOVLLM_CPU_FP8_BYTE_LUT_H
#define NANOVLLM_CPU_FP8_BYTE_LUT_H

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>

#define FP8_LUT_TARGET __attribute__((always_inline, target("avx512f,avx512bw,avx512vbmi")))

typedef struct Fp8ByteLut {
    __m512i lo0, lo1, hi0, hi1; /* the tables, 64 entries a register */
    __m512i sign;               /* 0x80 in every byte */
} Fp8ByteLut;

static inline FP8_LUT_TARGET void fp8_byte_lut_load(Fp8ByteLut *t, const uint8_t tables[2][128]) {
    t->lo0 = _mm512_loadu_si512(tables[0]);
    t->lo1 = _mm512_loadu_si512(tables[0] + 64);
    t->hi0 = _mm512_loadu_si512(tables[1]);
    t->hi1 = _mm512_loadu_si512(tables[1] + 64);
    t->sign = _mm512_set1_epi8((char)0x80);
}

/* 64 e4m3 bytes -> their values' low bytes (*lo) and high bytes with the
 * sign (*hi), byte for byte. */
static inline FP8_LUT_TARGET void fp8_byte_lut_lookup(const Fp8ByteLut *t, __m512i bytes, __m512i *lo,
                                                      __m512i *hi) {
    *lo = _mm512_permutex2var_epi8(t->lo0, bytes, t->lo1);
    *hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t->hi0, bytes, t->hi1), bytes, t->sign,
                                    0xF8); /* hi | (bytes & sign) */
}

#endif /* __x86_64__ */
#endif
