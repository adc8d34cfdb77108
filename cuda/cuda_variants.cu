/*
 * cuda_variants.cu - NANOVLLM_CUDA_LEGACY, read once (see cuda_variants.h).
 */
#include "cuda_variants.h"

#include <stdlib.h>
#include <string.h>

extern "C" bool cuda_variant_legacy(const char *part) {
    static const char *list = NULL;
    static bool read = false;
    if (!read) { /* first called from the runner's set-up, before any worker thread */
        list = getenv("NANOVLLM_CUDA_LEGACY");
        read = true;
    }
    if (!list || !part || !*part) return false;
    const size_t n = strlen(part);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, part, n) == 0) return true;
        if (!end) break;
        p = end + 1;
    }
    return false;
}
