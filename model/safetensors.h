/*
 * safetensors.h - read-only, zero-copy access to a Hugging Face checkpoint.
 *
 * A checkpoint is either DIR/model.safetensors or the shards named by
 * DIR/model.safetensors.index.json. Each file is mmap'ed; its JSON header is
 * parsed with jansson and every entry is checked before anything points into
 * the mapping: known dtype, sane shape, byte range inside the file, size equal
 * to shape x dtype, no two tensors overlapping. After safetensors_open()
 * succeeds, every TensorInfo.data..data+nbytes is readable memory, so a
 * truncated or lying file is an error here and never a fault later.
 */
#ifndef NANOVLLM_SAFETENSORS_H
#define NANOVLLM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "mapped_file.h"

#define TENSOR_MAX_DIMS 8

typedef enum TensorDtype {
    DTYPE_BF16,
    DTYPE_F16,
    DTYPE_F32,
    DTYPE_F8_E4M3, /* FP8 checkpoints' weights (model/weight_format.h) */
    DTYPE_OTHER, /* a valid safetensors dtype that no weight of ours may have */
} TensorDtype;

typedef struct TensorInfo {
    char *name;
    TensorDtype dtype;
    char dtype_name[12]; /* as in the header: "BF16", "I64", ... */
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    const void *data; /* inside the file's mapping */
    size_t nbytes;
    int file_index;
} TensorInfo;

typedef struct Safetensors {
    MappedFile *files;
    int num_files;
    TensorInfo *tensors;
    int num_tensors;
} Safetensors;

/* Opens DIR/model.safetensors.index.json (sharded) when present, else DIR/model.safetensors. */
int safetensors_open_dir(Safetensors *st, const char *model_dir, Error *err);

/* Opens one .safetensors file. */
int safetensors_open_file(Safetensors *st, const char *path, Error *err);

/* NULL when the checkpoint has no tensor of that name. */
const TensorInfo *safetensors_find(const Safetensors *st, const char *name);

void safetensors_close(Safetensors *st);

size_t tensor_dtype_size(TensorDtype dtype);

#endif
