/*
 * mapped_file.h - a model file mapped read-only (safetensors shards, GGUF
 * files): opened, checked to be a non-empty regular file, mmap'ed, the
 * descriptor closed. What the bytes mean is the caller's to check.
 */
#ifndef NANOVLLM_MAPPED_FILE_H
#define NANOVLLM_MAPPED_FILE_H

#include <stddef.h>

#include "base/error.h"

typedef struct MappedFile {
    char *path;
    void *map;
    size_t size;
} MappedFile;

/* On failure *mf is left zeroed and nothing is held. */
int mapped_file_open(MappedFile *mf, const char *path, Error *err);

/* Unmaps and frees; safe on a zeroed MappedFile. */
void mapped_file_close(MappedFile *mf);

#endif
