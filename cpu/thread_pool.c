/*
 * thread_pool.c - spin-then-sleep worker threads (see thread_pool.h).
 *
 * Protocol: the driver publishes (fn, ctx, num_tasks), resets the task and
 * completion counters, then bumps `generation` (release). Workers notice the
 * new generation (acquire), claim task indices with fetch_add until none are
 * left, and count themselves done. The driver claims tasks too and returns
 * once every worker is done, so no worker can still be reading fn/ctx when the
 * next loop is published.
 */
#include "thread_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* About 50-100 us of polling before a worker sleeps: covers the gap between
 * the loops of one forward pass, not idle time between requests. */
#define SPIN_ITERATIONS 20000

struct ThreadPool {
    int num_threads;
    pthread_t *threads;
    ThreadTaskFn fn;
    void *ctx;
    int num_tasks;
    atomic_int next_task;
    atomic_int workers_done;
    atomic_uint generation;
    atomic_bool stopping;
    pthread_mutex_t lock;
    pthread_cond_t wake;
};

typedef struct WorkerArg {
    ThreadPool *pool;
    int index;
} WorkerArg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void run_tasks(ThreadPool *p, int thread) {
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next_task, 1, memory_order_relaxed);
        if (t >= p->num_tasks) break;
        p->fn(p->ctx, t, thread);
    }
}

static void *worker_main(void *arg) {
    WorkerArg wa = *(WorkerArg *)arg;
    free(arg);
    ThreadPool *p = wa.pool;
    /* Generation 0 is the pool's state at creation: reading the counter here
     * instead would skip a loop published before this thread got to run. */
    unsigned seen = 0;
    for (;;) {
        unsigned gen = seen;
        for (int i = 0; i < SPIN_ITERATIONS && gen == seen; i++) {
            cpu_relax();
            gen = atomic_load_explicit(&p->generation, memory_order_acquire);
        }
        if (gen == seen) {
            pthread_mutex_lock(&p->lock);
            while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
                   !atomic_load(&p->stopping))
                pthread_cond_wait(&p->wake, &p->lock);
            pthread_mutex_unlock(&p->lock);
        }
        if (atomic_load(&p->stopping)) return NULL;
        seen = gen;
        run_tasks(p, wa.index);
        atomic_fetch_add_explicit(&p->workers_done, 1, memory_order_release);
    }
}

int cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

ThreadPool *thread_pool_create(int num_threads, Error *err) {
    if (num_threads <= 0) num_threads = cpu_count();
    ThreadPool *p = calloc(1, sizeof *p);
    if (!p) {
        error_set(err, "out of memory");
        return NULL;
    }
    p->num_threads = 1;
    if (pthread_mutex_init(&p->lock, NULL) != 0 || pthread_cond_init(&p->wake, NULL) != 0) {
        free(p);
        error_set(err, "cannot initialise thread pool synchronisation");
        return NULL;
    }
    p->threads = calloc((size_t)num_threads, sizeof *p->threads);
    if (!p->threads) {
        thread_pool_destroy(p);
        error_set(err, "out of memory");
        return NULL;
    }
    for (int i = 1; i < num_threads; i++) {
        WorkerArg *wa = malloc(sizeof *wa);
        int rc = wa ? 0 : -1;
        if (wa) {
            *wa = (WorkerArg){p, i};
            rc = pthread_create(&p->threads[i], NULL, worker_main, wa);
            if (rc != 0) free(wa);
        }
        if (rc != 0) {
            thread_pool_destroy(p);
            error_set(err, "cannot start worker thread %d: %s", i, rc > 0 ? strerror(rc) : "out of memory");
            return NULL;
        }
        p->num_threads = i + 1;
    }
    return p;
}

int thread_pool_size(const ThreadPool *pool) { return pool->num_threads; }

void thread_pool_run(ThreadPool *p, int num_tasks, ThreadTaskFn fn, void *ctx) {
    if (num_tasks <= 0) return;
    if (p->num_threads == 1 || num_tasks == 1) {
        for (int t = 0; t < num_tasks; t++) fn(ctx, t, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->num_tasks = num_tasks;
    atomic_store_explicit(&p->next_task, 0, memory_order_relaxed);
    atomic_store_explicit(&p->workers_done, 0, memory_order_relaxed);
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    run_tasks(p, 0);
    while (atomic_load_explicit(&p->workers_done, memory_order_acquire) < p->num_threads - 1)
        cpu_relax();
}

void thread_pool_destroy(ThreadPool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->stopping, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->num_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    free(p->threads);
    free(p);
}
