/*
 * thread_pool.h - a fixed set of threads that run one parallel loop at a time.
 *
 * The CPU forward pass runs a few hundred short parallel loops per token
 * (every matmul, every attention layer), so waking threads must cost far less
 * than a syscall: workers spin briefly on an atomic generation counter and
 * only then sleep on a condition variable. The calling thread takes tasks
 * too, so a pool of N threads starts N-1 of them.
 */
#ifndef NANOVLLM_THREAD_POOL_H
#define NANOVLLM_THREAD_POOL_H

#include "base/error.h"

typedef struct ThreadPool ThreadPool;

/* task in [0, num_tasks); thread in [0, thread_pool_size()), 0 is the caller. */
typedef void (*ThreadTaskFn)(void *ctx, int task, int thread);

/* num_threads <= 0 means one per CPU this process may run on. */
ThreadPool *thread_pool_create(int num_threads, Error *err);
int thread_pool_size(const ThreadPool *pool);

/* Runs fn for every task index and returns when all are done. Not reentrant:
 * one thread drives the pool, and tasks must not call thread_pool_run. */
void thread_pool_run(ThreadPool *pool, int num_tasks, ThreadTaskFn fn, void *ctx);

void thread_pool_destroy(ThreadPool *pool);

/* CPUs this process may run on (at least 1). */
int cpu_count(void);

#endif
