/*
 * row_max.c - see row_max.h. The compiler does not vectorize a float max
 * reduction without -ffast-math, hence the explicit AVX-512 loop.
 */
#include "row_max.h"

#include "cpu_isa.h"

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static float row_max_avx512(const float *x, int n) {
    __m512 m = _mm512_set1_ps(x[0]);
    int i = 0;
    for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + i));
    float r = _mm512_reduce_max_ps(m);
    for (; i < n; i++) r = x[i] > r ? x[i] : r;
    return r;
}
#endif

float row_max(const float *x, int n) {
#if defined(__x86_64__)
    if (cpu_isa_active() >= CPU_ISA_AVX512) return row_max_avx512(x, n);
#endif
    float m = x[0];
    for (int i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}
