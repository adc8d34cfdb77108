/*
 * bench_matmul.c - `nanovllm bench --matmul` (see bench_matmul.h).
 */
#include "bench_matmul.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu/cpu_matmul.h"
#include "cpu/thread_pool.h"
#include "engine/base/log.h"

int bench_matmul(int num_threads, Error *err) {
    ThreadPool *pool = thread_pool_create(num_threads, err);
    enum { K = 1024, N = 3072, MAX_M = 512 };
    CpuMatmul *mm = pool ? cpu_matmul_create(pool, MAX_M, K, err) : NULL;
    float *x = malloc(sizeof(float) * MAX_M * K), *y = malloc(sizeof(float) * MAX_M * N);
    uint16_t *w = malloc(sizeof(uint16_t) * N * K);
    int rc = (mm && x && y && w) ? 0 : error_set(err, "out of memory");
    if (rc == 0) {
        for (size_t i = 0; i < (size_t)MAX_M * K; i++) x[i] = (float)(i % 97) / 97.0f;
        for (size_t i = 0; i < (size_t)N * K; i++) w[i] = (uint16_t)(0x3c00 + (i * 31) % 512);
        Weight wt = {.data = w, .type = WEIGHT_BF16, .rows = N, .cols = K};
        printf("bf16 weight %dx%d, %s kernels, %d threads: microseconds per matmul\n", N, K,
               cpu_isa_name(cpu_isa_active()), thread_pool_size(pool));
        MatmulStrategy strategies[3] = {MATMUL_ROWS, MATMUL_BLAS, MATMUL_AMX};
        printf("%6s %10s %10s %10s   auto\n", "rows", "rows", "blas", "amx");
        for (int M = 1; M <= MAX_M; M *= 2) {
            double best[3] = {1e30, 1e30, 1e30};
            for (int s = 0; s < 3; s++) {
                for (int rep = 0; rep < 20; rep++) {
                    double t0 = now_seconds();
                    cpu_matmul_with(mm, y, x, M, &wt, strategies[s], cpu_isa_active());
                    double dt = now_seconds() - t0;
                    if (dt < best[s]) best[s] = dt;
                }
            }
            printf("%6d %10.1f %10.1f %10.1f   %s\n", M, best[0] * 1e6, best[1] * 1e6, best[2] * 1e6,
                   matmul_strategy_name(cpu_matmul_choose(M, &wt, cpu_isa_active())));
        }
    }
    free(x);
    free(y);
    free(w);
    cpu_matmul_destroy(mm);
    thread_pool_destroy(pool);
    return rc;
}

