/*
 * matmul_reference.c - see matmul_reference.h.
 */
#include "matmul_reference.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "base/half.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

float matmul_uniform(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

TestWeight make_test_weight(int N, int K, WeightType type) {
    TestWeight t = {0};
    t.wf = malloc(sizeof(float) * (size_t)N * K + 4);
    t.wb = malloc(sizeof(uint16_t) * (size_t)N * K + 2);
    cr_assert(t.wf && t.wb);
    for (size_t i = 0; i < (size_t)N * K; i++) {
        t.wf[i] = matmul_uniform();
        t.wb[i] = f32_to_bf16(t.wf[i]);
        if (type == WEIGHT_BF16) t.wf[i] = bf16_to_f32(t.wb[i]);
    }
    t.w = (Weight){.data = type == WEIGHT_BF16 ? (const void *)t.wb : t.wf, .type = type, .rows = N,
                   .cols = K};
    return t;
}

void free_test_weight(TestWeight *t) {
    free(t->wf);
    free(t->wb);
}

void check_matmul_reference(const float *y, const float *x, int M, const TestWeight *t, double tol,
                            const char *what, CpuIsa isa) {
    int N = t->w.rows, K = t->w.cols;
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)x[(size_t)m * K + k] * t->wf[(size_t)n * K + k];
                ref += p;
                mag += fabs(p);
            }
            double got = y[(size_t)m * N + n];
            double err = fabs(got - ref) / (mag + 1e-30);
            cr_assert(err < tol, "%s M=%d N=%d K=%d %s %s: y[%d,%d] = %.9g, want %.9g", what, M, N,
                      K, t->w.type == WEIGHT_BF16 ? "bf16" : "f32", cpu_isa_name(isa), m, n, got,
                      ref);
        }
    }
}
