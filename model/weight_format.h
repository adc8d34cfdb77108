/*
 * weight_format.h - how a weight matrix's values are encoded in memory.
 *
 * bf16 and f32 come from safetensors checkpoints; the block-quantized types
 * come from GGUF files (llama.cpp's format, model/gguf.h) and are laid out
 * exactly as there, so a matrix is used in place from the file: each row of
 * `cols` values is cols / block_elems consecutive blocks, rows one after
 * another. The structs below are written from the format's definition
 * (ggml's block layouts are part of the GGUF file format); nothing here
 * is a copy of ggml's code. All multi-byte fields are little-endian.
 *
 *   Q8_0  32 values: x = d * q                    (q int8, d f16)
 *   Q4_0  32 values: x = d * (q - 8)              (q 4 bits: value l the low
 *         nibble of qs[l], value 16 + l its high nibble; d f16)
 *   Q5_0  as Q4_0 with a fifth bit (bit l of the 32-bit qh) and x = d * (q - 16)
 *   IQ4_NL as Q4_0's layout with x = d * IQ4_NL_VALUES[q]: 16 fixed levels,
 *         denser near 0 (the table is part of the format)
 *   Q4_K 256 values in 8 sub-blocks of 32:  x = d * sc[j] * q - dmin * m[j]
 *        (q 4 bits; sc, m 6 bits each, packed in 12 bytes; d, dmin f16)
 *   Q5_K as Q4_K with a fifth bit of q in qh
 *   Q6_K 256 values in 16 sub-blocks of 16: x = d * sc[j] * (q - 32)
 *        (q 6 bits: low 4 in ql, high 2 in qh; sc int8; d f16)
 *   Q8_K 256 values: x = d * q (q int8, d f32) with the sum of each 16
 *        values' q kept beside: the activations' side of the integer dot
 *        products, never a weight.
 *
 * F8_E4M3 comes from Hugging Face FP8 checkpoints (Qwen's "fp8" quant_method,
 * DeepSeek's layout): each value one float8_e4m3fn byte (sign, 4 exponent bits
 * biased by 7, 3 mantissa bits; subnormals at exponent 0; 0x7f/0xff NaN, no
 * infinities; largest 448), rows of `cols` bytes, and a separate float32
 * matrix of scales, one per FP8_BLOCK x FP8_BLOCK tile (the checkpoint's
 * `weight_scale_inv`): W[n, k] = e4m3(q[n, k]) * scale[n / 128][k / 128],
 * the scale matrix ceil(rows / 128) x ceil(cols / 128), edge tiles partial.
 * It is not "quantized" in the sense below (no inline blocks, no integer
 * products): its kernels multiply float32 activations (cpu_matmul_fp8.h).
 *
 * The reference functions (weight_format.c) are the definition the SIMD
 * kernels are tested against: plain C, one value at a time.
 */
#ifndef NANOVLLM_WEIGHT_FORMAT_H
#define NANOVLLM_WEIGHT_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum WeightType {
    WEIGHT_BF16,
    WEIGHT_F32,
    WEIGHT_Q8_0,
    WEIGHT_Q4_K,
    WEIGHT_Q5_K,
    WEIGHT_Q6_K,
    WEIGHT_F8_E4M3, /* Qwen's FP8 checkpoints: one byte a value, block scales beside (below) */
    WEIGHT_Q4_0,
    WEIGHT_Q5_0,
    WEIGHT_IQ4_NL,
} WeightType;
#define WEIGHT_TYPE_COUNT (WEIGHT_IQ4_NL + 1)

/* IQ4_NL's 16 levels, in the order of their 4-bit codes. */
#define IQ4_NL_VALUES {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

#define QK8_0 32
#define QK_K 256

typedef struct BlockQ8_0 {
    uint16_t d; /* f16 */
    int8_t qs[QK8_0];
} BlockQ8_0;

typedef struct BlockQ4_0 {
    uint16_t d; /* f16 */
    uint8_t qs[QK8_0 / 2];
} BlockQ4_0;

typedef struct BlockQ5_0 {
    uint16_t d;    /* f16 */
    uint8_t qh[4]; /* bit l (little-endian 32-bit) the fifth bit of value l */
    uint8_t qs[QK8_0 / 2];
} BlockQ5_0;

typedef struct BlockIQ4NL {
    uint16_t d; /* f16 */
    uint8_t qs[QK8_0 / 2]; /* codes into IQ4_NL_VALUES, ordered as Q4_0's */
} BlockIQ4NL;

typedef struct BlockQ4K {
    uint16_t d;    /* f16: scale of the 6-bit sub-block scales */
    uint16_t dmin; /* f16: scale of the 6-bit sub-block mins */
    uint8_t scales[12];
    uint8_t qs[QK_K / 2]; /* 4-bit values, see weight_format.c for the order */
} BlockQ4K;

typedef struct BlockQ5K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[QK_K / 8]; /* the fifth bit of each value */
    uint8_t qs[QK_K / 2];
} BlockQ5K;

typedef struct BlockQ6K {
    uint8_t ql[QK_K / 2];      /* low 4 bits */
    uint8_t qh[QK_K / 4];      /* high 2 bits */
    int8_t scales[QK_K / 16];  /* one per 16 values */
    uint16_t d;                /* f16 */
} BlockQ6K;

typedef struct BlockQ8K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16]; /* sum of each 16 consecutive qs */
} BlockQ8K;

#ifndef __cplusplus /* C11 keyword; the CUDA sources see only the layouts */
_Static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block is 18 bytes");
_Static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block is 22 bytes");
_Static_assert(sizeof(BlockIQ4NL) == 18, "IQ4_NL block is 18 bytes");
_Static_assert(sizeof(BlockQ4K) == 144, "Q4_K block is 144 bytes");
_Static_assert(sizeof(BlockQ5K) == 176, "Q5_K block is 176 bytes");
_Static_assert(sizeof(BlockQ6K) == 210, "Q6_K block is 210 bytes");
_Static_assert(sizeof(BlockQ8K) == 292, "Q8_K block is 292 bytes");
#endif

/* FP8 checkpoints' scale tile: FP8_BLOCK x FP8_BLOCK values share a scale. */
#define FP8_BLOCK 128

/* Values per block (1 for bf16/f32/f8_e4m3) and bytes per block. */
int weight_block_elems(WeightType t);
size_t weight_block_bytes(WeightType t);

/* Bytes of one row of `cols` values; 0 when cols is not a whole number of blocks. */
size_t weight_row_bytes(WeightType t, int cols);

/* GGUF's inline-block types (Q8_0, Q4_K, ...): integer kernels, quantized inputs. */
bool weight_type_quantized(WeightType t);
const char *weight_type_name(WeightType t); /* "bf16", "q4_k", ... */

/* The types whose blocks are 32 values with one f16 scale d first and
 * whose products take Q8_0 activations: Q8_0, Q4_0, Q5_0, IQ4_NL. */
static inline bool weight_type_q32(WeightType t) {
    return t == WEIGHT_Q8_0 || t == WEIGHT_Q4_0 || t == WEIGHT_Q5_0 || t == WEIGHT_IQ4_NL;
}

/* Value i (0..31) of such a block as the signed integer d multiplies. */
int weight_q32_value(WeightType t, const void *block, int i);

/* Reference decode of n values (n a multiple of the block) from src to dst
 * (F8_E4M3: the bytes' values, before their block scale). */
void weight_dequantize_row(WeightType t, const void *src, float *dst, int n);

/* Reference encoders (tests and fixtures build quantized matrices with
 * them): n a multiple of the block; the choice of scales is simple
 * (max-abs based), decoding what they write is exact by definition. */
void weight_quantize_row(WeightType t, const float *src, void *dst, int n);

/* float8_e4m3fn: the value of one byte (NaN for 0x7f and 0xff), exactly. */
float fp8_e4m3_to_float(uint8_t b);

/* float -> float8_e4m3fn, rounding to nearest even, saturating to +-448
 * (as PyTorch's .to(float8_e4m3fn) after clamping, which checkpoints
 * do); NaN -> 0x7f. */
uint8_t fp8_e4m3_from_float(float f);

/* Whether a byte is one of e4m3's NaNs (a checkpoint holding one is refused). */
static inline bool fp8_e4m3_is_nan(uint8_t b) { return (b & 0x7f) == 0x7f; }

/* Scale tiles of a rows x cols FP8 matrix: ceil(rows / 128) * ceil(cols / 128). */
static inline size_t fp8_scale_count(int rows, int cols) {
    return (size_t)((rows + FP8_BLOCK - 1) / FP8_BLOCK) * (size_t)((cols + FP8_BLOCK - 1) / FP8_BLOCK);
}

/* Reference decode of rows [n0, n1) of an FP8 matrix of `cols` columns
 * (q: the whole matrix's bytes, scales: its whole scale matrix) to float32
 * at dst, cols per row: e4m3(q) * scale, one float32 product per value. */
void fp8_dequantize_rows(const uint8_t *q, const float *scales, int cols, int n0, int n1, float *dst);

/* The activations' side: n (a multiple of 256) floats to Q8_K blocks
 * (d = max|x| / 127, q = round(x / d)), and to Q8_0 blocks for Q8_0
 * weights (d rounded to f16 first, as the weights' own). */
void quantize_row_q8_k(const float *x, BlockQ8K *y, int n);
void quantize_row_q8_0(const float *x, BlockQ8_0 *y, int n);

/* Reference dot product of one weight row (type t, n values) with the
 * matching quantized activation row (Q8_0 blocks for WEIGHT_Q8_0, Q8_K for
 * the K types), summed in the integers per block as the kernels do. */
float weight_dot_q8_ref(WeightType t, const void *w_row, const void *x_q8, int n);

#endif
