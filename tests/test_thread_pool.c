/*
 * test_thread_pool.c - every task runs exactly once, loop after loop, at
 * every pool size (a lost wake-up would hang or skip tasks here).
 */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "cpu/thread_pool.h"

typedef struct Counts {
    atomic_int *hits;
    atomic_int max_thread;
} Counts;

static void count_task(void *ctx, int task, int thread) {
    Counts *c = ctx;
    atomic_fetch_add(&c->hits[task], 1);
    int m = atomic_load(&c->max_thread);
    while (thread > m && !atomic_compare_exchange_weak(&c->max_thread, &m, thread)) {
    }
}

Test(thread_pool, every_task_exactly_once) {
    int sizes[] = {1, 2, 3, 8};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        Error err = {0};
        ThreadPool *pool = thread_pool_create(sizes[s], &err);
        cr_assert(pool, "%s", err.msg);
        cr_assert_eq(thread_pool_size(pool), sizes[s]);
        atomic_int hits[257];
        Counts c = {hits, 0};
        for (int loop = 0; loop < 3000; loop++) {
            int n = loop % 257 + (loop % 7 == 0 ? 0 : 1);
            for (int i = 0; i < 257; i++) atomic_store(&hits[i], 0);
            thread_pool_run(pool, n, count_task, &c);
            for (int i = 0; i < 257; i++)
                cr_assert_eq(atomic_load(&hits[i]), i < n ? 1 : 0, "pool %d loop %d task %d",
                             sizes[s], loop, i);
        }
        cr_expect(atomic_load(&c.max_thread) < sizes[s]);
        thread_pool_destroy(pool);
    }
}

Test(thread_pool, default_size_is_cpu_count) {
    Error err = {0};
    ThreadPool *pool = thread_pool_create(0, &err);
    cr_assert(pool);
    cr_expect_eq(thread_pool_size(pool), cpu_count());
    cr_expect_geq(cpu_count(), 1);
    thread_pool_destroy(pool);
}
