/*
 * cpu_matmul_fp8.c - the portable (scalar) FP8 kernel and the dispatch of
 * cpu_matmul_fp8.h; the x86 kernels live in cpu_matmul_fp8_tile.h.
 *
 * The scalar kernel is the reference order the SIMD levels are tested
 * beside: each weight row is decoded a 128-column chunk at a time into
 * fp8_dequantize_rows' values (one float32 product e4m3 * scale each) and
 * every output is summed along K in order, one term after another.
 */
#include "cpu_matmul_fp8.h"

#include <stddef.h>

#include "cpu_matmul_fp8_x86.h"

bool fp8_simd(CpuIsa isa) {
#if defined(__x86_64__)
    static int f16c = -1; /* every AVX2 CPU so far has F16C; asked once anyway */
    if (f16c < 0) {
        __builtin_cpu_init();
        f16c = __builtin_cpu_supports("f16c") ? 1 : 0;
    }
    return isa >= CPU_ISA_AVX2 && f16c;
#else
    (void)isa;
    return false;
#endif
}

static void fp8_gemm_scalar(const uint8_t *q, const float *scales, int K, const float *x, int ldx,
                            int M, float *y, int ldy, int n0, int n1) {
    float w[FP8_BLOCK];
    for (int n = n0; n < n1; n++) {
        for (int k0 = 0; k0 < K; k0 += FP8_BLOCK) {
            int len = K - k0 < FP8_BLOCK ? K - k0 : FP8_BLOCK;
            /* This chunk of row n, as its own one-row, len-column matrix. */
            const float *s = scales + (size_t)(n / FP8_BLOCK) * ((K + FP8_BLOCK - 1) / FP8_BLOCK) +
                             k0 / FP8_BLOCK;
            for (int k = 0; k < len; k++) w[k] = fp8_e4m3_to_float(q[(size_t)n * K + k0 + k]) * *s;
            for (int m = 0; m < M; m++) {
                const float *xr = x + (size_t)m * ldx + k0;
                float acc = k0 == 0 ? 0.0f : y[(size_t)m * ldy + n];
                for (int k = 0; k < len; k++) acc += xr[k] * w[k];
                y[(size_t)m * ldy + n] = acc;
            }
        }
    }
}

void fp8_gemm(CpuIsa isa, const uint8_t *q, const float *scales, int K, const float *x, int ldx,
              int M, float *y, int ldy, int n0, int n1, float *scratch) {
    if (M <= 0 || n1 <= n0) return;
    if (K <= 0) { /* an empty sum */
        for (int m = 0; m < M; m++)
            for (int n = n0; n < n1; n++) y[(size_t)m * ldy + n] = 0.0f;
        return;
    }
#if defined(__x86_64__)
    if (fp8_simd(isa) && isa >= CPU_ISA_AVX512)
        return fp8_gemm_avx512(q, scales, K, x, ldx, M, y, ldy, n0, n1, scratch);
    if (fp8_simd(isa)) return fp8_gemm_avx2(q, scales, K, x, ldx, M, y, ldy, n0, n1, scratch);
#endif
    (void)scratch;
    fp8_gemm_scalar(q, scales, K, x, ldx, M, y, ldy, n0, n1);
}

void fp8_decode_rows(CpuIsa isa, const uint8_t *q, const float *scales, int K, int n0, int n1,
                     float *dst) {
    if (n1 <= n0 || K <= 0) return;
#if defined(__x86_64__)
    if (fp8_simd(isa) && isa >= CPU_ISA_AVX512) return fp8_decode_avx512(q, scales, K, n0, n1, dst);
    if (fp8_simd(isa)) return fp8_decode_avx2(q, scales, K, n0, n1, dst);
#endif
    fp8_dequantize_rows(q, scales, K, n0, n1, dst);
}
