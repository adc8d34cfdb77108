/*
 * bench_limits.c - bench_limits.h. The memory read probe: 64 tasks XOR their
 * share of a huge-page buffer, as the weight read of a decode step streams
 * each task's rows.
 */
#include "bench_limits.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "base/log.h"

double bench_fastest_run(ThreadPool *pool, int num_tasks, ThreadTaskFn fn, void *ctx, int passes) {
    double best = 1e30;
    for (int pass = 0; pass < passes; pass++) {
        double t0 = now_seconds();
        thread_pool_run(pool, num_tasks, fn, ctx);
        double dt = now_seconds() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

typedef struct StreamJob {
    const uint64_t *data;
    size_t words_per_task;
    uint64_t sums[64];
} StreamJob;

static void stream_task(void *ctx, int task, int thread) {
    StreamJob *j = ctx;
    const uint64_t *p = j->data + (size_t)task * j->words_per_task;
    uint64_t acc = 0;
    for (size_t i = 0; i < j->words_per_task; i++) acc ^= p[i];
    j->sums[thread % 64] ^= acc;
}

double memory_read_bandwidth(ThreadPool *pool, size_t bytes) {
    enum { TASKS = 64 };
    if (bytes < MEMORY_PROBE_MIN_BYTES) bytes = MEMORY_PROBE_MIN_BYTES;
    size_t words = bytes / sizeof(uint64_t) / TASKS * TASKS;
    void *mem = mmap(NULL, words * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return 0;
    madvise(mem, words * sizeof(uint64_t), MADV_HUGEPAGE);
    memset(mem, 1, words * sizeof(uint64_t));
    StreamJob job = {mem, words / TASKS, {0}};
    double best = bench_fastest_run(pool, TASKS, stream_task, &job, 3);
    munmap(mem, words * sizeof(uint64_t));
    return (double)(words * sizeof(uint64_t)) / best;
}
