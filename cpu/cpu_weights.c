/*
 * cpu_weights.c - huge-page copies of the weight matrices (see cpu_weights.h).
 */
#include "cpu_weights.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Every matrix the forward pass streams, in order, with the tied lm_head once. */
static int collect_matrices(CpuWeights *cw, const ModelWeights *model, Weight **out) {
    int n = 0;
    for (int l = 0; l < model->config.num_layers; l++)
        n += model_layer_matrices(&model->config, &cw->layers[l], out + n);
    out[n++] = &cw->embed_tokens;
    if (!model_weights_tied(model)) out[n++] = &cw->lm_head;
    return n;
}

static size_t count_matrices(const ModelWeights *model) {
    return (size_t)model->config.num_layers * (size_t)model_layer_max_matrices(&model->config) + 2;
}

/* The layers and experts, copied so their matrices can be repointed. */
static int copy_layers(CpuWeights *cw, const ModelWeights *model) {
    const ModelConfig *c = &model->config;
    size_t sparse = 0;
    for (int l = 0; l < c->num_layers; l++) sparse += model->layers[l].experts != NULL;
    cw->layers = malloc(sizeof *cw->layers * (size_t)c->num_layers);
    if (sparse) cw->experts = malloc(sizeof *cw->experts * sparse * (size_t)c->num_experts);
    if (!cw->layers || (sparse && !cw->experts)) return -1;
    memcpy(cw->layers, model->layers, sizeof *cw->layers * (size_t)c->num_layers);
    if (sparse) memcpy(cw->experts, model->experts, sizeof *cw->experts * sparse * (size_t)c->num_experts);
    for (int l = 0; l < c->num_layers; l++)
        if (cw->layers[l].experts) cw->layers[l].experts = cw->experts + (model->layers[l].experts - model->experts);
    return 0;
}

static bool huge_pages_available(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return false;
    char line[128] = "";
    bool ok = fgets(line, sizeof line, f) && !strstr(line, "[never]");
    fclose(f);
    return ok;
}

typedef struct CopyJob {
    const ModelWeights *model;
    Weight **mats;
    const Weight *sources; /* the matrices as loaded, same order as mats */
    pthread_mutex_t lock;
    int failed;
    Error err;
} CopyJob;

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
#define CHUNK (2u << 20)

typedef struct PopulateJob {
    char *memory;
    size_t size;
} PopulateJob;

/* Faults in one 2 MiB chunk. Populating before the copy matters: pread into
 * untouched huge-page memory measured 3.3 s for 1.2 GB, populate + pread 0.5 s. */
static void populate_task(void *ctx, int task, int thread) {
    (void)thread;
    PopulateJob *j = ctx;
    size_t off = (size_t)task * CHUNK, len = j->size - off < CHUNK ? j->size - off : CHUNK;
    if (madvise(j->memory + off, len, MADV_POPULATE_WRITE) != 0) memset(j->memory + off, 0, len);
}

static void copy_task(void *ctx, int task, int thread) {
    (void)thread;
    CopyJob *j = ctx;
    Error err = {0};
    if (model_weights_copy_matrix(j->model, &j->sources[task], (void *)j->mats[task]->data, &err)) {
        pthread_mutex_lock(&j->lock);
        if (!j->failed) j->err = err;
        j->failed = 1;
        pthread_mutex_unlock(&j->lock);
    }
}

int cpu_weights_init(CpuWeights *cw, const ModelWeights *model, ThreadPool *pool, Error *err) {
    memset(cw, 0, sizeof *cw);
    Weight **mats = malloc(sizeof *mats * count_matrices(model));
    Weight *sources = malloc(sizeof *sources * count_matrices(model));
    if (!mats || !sources || copy_layers(cw, model)) {
        free(mats);
        free(sources);
        cpu_weights_free(cw);
        return error_set(err, "out of memory");
    }
    cw->embed_tokens = model->embed_tokens;
    cw->lm_head = model->lm_head;
    int n = collect_matrices(cw, model, mats);
    for (int i = 0; i < n; i++) {
        sources[i] = *mats[i];
        cw->size += (weight_bytes(mats[i]) + 63) / 64 * 64;
    }

    /* A dummy model has nothing to use in place: it is always copied (generated). */
    const char *env = getenv("NANOVLLM_CPU_WEIGHTS");
    bool mapped = env && strcmp(env, "mapped") == 0 && !model->dummy;
    bool huge = !mapped && huge_pages_available();
    int rc = 0;
    void *mem = huge || model->dummy ? mmap(NULL, cw->size, PROT_READ | PROT_WRITE,
                                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                                     : MAP_FAILED;
    if (mem == MAP_FAILED && model->dummy) {
        free(mats);
        free(sources);
        cpu_weights_free(cw);
        return error_set(err, "cannot allocate %.2f GB for the dummy weights", cw->size / 1e9);
    }
    if (mem != MAP_FAILED && huge && madvise(mem, cw->size, MADV_HUGEPAGE) != 0 && !model->dummy) {
        munmap(mem, cw->size); /* no huge pages: a copy would only cost memory */
        mem = MAP_FAILED;
    }
    if (mem != MAP_FAILED) {
        cw->memory = mem;
        size_t off = 0;
        for (int i = 0; i < n; i++) {
            mats[i]->data = (char *)mem + off;
            off += (weight_bytes(mats[i]) + 63) / 64 * 64;
        }
        PopulateJob populate = {mem, cw->size};
        thread_pool_run(pool, (int)((cw->size + CHUNK - 1) / CHUNK), populate_task, &populate);
        CopyJob job = {.model = model, .mats = mats, .sources = sources};
        pthread_mutex_init(&job.lock, NULL);
        thread_pool_run(pool, n, copy_task, &job);
        pthread_mutex_destroy(&job.lock);
        if (job.failed) rc = error_set(err, "%s", job.err.msg);
        if (model_weights_tied(model)) cw->lm_head = cw->embed_tokens;
    } else {
        cw->size = 0;
    }
    free(mats);
    free(sources);
    if (rc) cpu_weights_free(cw);
    return rc;
}

void cpu_weights_free(CpuWeights *cw) {
    if (cw->memory) munmap(cw->memory, cw->size);
    free(cw->layers);
    free(cw->experts);
    memset(cw, 0, sizeof *cw);
}
