/*
 * gguf.h - read-only, zero-copy access to a GGUF file (llama.cpp's format).
 *
 * Version 3 (and 2, which differs only in nothing we read), little-endian.
 * gguf_open() maps the file and checks everything before anything points
 * into the mapping: magic and version, every count against what the bytes
 * left could hold, every string's length, metadata value types (arrays
 * included, nested arrays refused), tensor names unique, dimensions
 * positive and their product not overflowing, tensor types known, every
 * tensor's byte range aligned (general.alignment, default 32) and inside
 * the file, no two tensors overlapping. After it succeeds, every
 * GgufTensor.data..data+nbytes and every metadata value is readable
 * memory, so a truncated or lying file is an error here and never a fault
 * later. Hand-written: no packaged C library reads GGUF.
 */
#ifndef NANOVLLM_GGUF_H
#define NANOVLLM_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define GGUF_MAX_DIMS 4

/* Metadata value types, numbered as in the file. */
typedef enum GgufValueType {
    GGUF_UINT8 = 0,
    GGUF_INT8 = 1,
    GGUF_UINT16 = 2,
    GGUF_INT16 = 3,
    GGUF_UINT32 = 4,
    GGUF_INT32 = 5,
    GGUF_FLOAT32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_UINT64 = 10,
    GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
} GgufValueType;

/* Tensor types we can name (ggml's numbering). Any other number in a file
 * is refused by gguf_open with the tensor's name and the number. */
typedef enum GgufTensorType {
    GGUF_TYPE_F32 = 0,
    GGUF_TYPE_F16 = 1,
    GGUF_TYPE_Q4_0 = 2,
    GGUF_TYPE_Q4_1 = 3,
    GGUF_TYPE_Q5_0 = 6,
    GGUF_TYPE_Q5_1 = 7,
    GGUF_TYPE_Q8_0 = 8,
    GGUF_TYPE_Q8_1 = 9,
    GGUF_TYPE_Q2_K = 10,
    GGUF_TYPE_Q3_K = 11,
    GGUF_TYPE_Q4_K = 12,
    GGUF_TYPE_Q5_K = 13,
    GGUF_TYPE_Q6_K = 14,
    GGUF_TYPE_Q8_K = 15,
    GGUF_TYPE_IQ2_XXS = 16,
    GGUF_TYPE_IQ2_XS = 17,
    GGUF_TYPE_IQ3_XXS = 18,
    GGUF_TYPE_IQ1_S = 19,
    GGUF_TYPE_IQ4_NL = 20,
    GGUF_TYPE_IQ3_S = 21,
    GGUF_TYPE_IQ2_S = 22,
    GGUF_TYPE_IQ4_XS = 23,
    GGUF_TYPE_I8 = 24,
    GGUF_TYPE_I16 = 25,
    GGUF_TYPE_I32 = 26,
    GGUF_TYPE_I64 = 27,
    GGUF_TYPE_F64 = 28,
    GGUF_TYPE_IQ1_M = 29,
    GGUF_TYPE_BF16 = 30,
    GGUF_TYPE_TQ1_0 = 34,
    GGUF_TYPE_TQ2_0 = 35,
    GGUF_TYPE_MXFP4 = 39,
    GGUF_TYPE_COUNT = 40, /* numbers >= this (and the holes 4, 5, 31-33, 36-38) are unknown */
} GgufTensorType;

/* A string inside the mapping: not NUL-terminated. */
typedef struct GgufString {
    const char *p;
    uint64_t len;
} GgufString;

typedef struct GgufKv {
    GgufString key;
    GgufValueType type;
    /* Scalars (numbers and bools) are read with gguf_get_*; a string is
     * `str`; an array is `arr_type` x `arr_count` starting at `arr_data`
     * (for GGUF_STRING arrays, each element is a u64 length then bytes:
     * each is in arr_strings, checked). */
    const void *value; /* the raw scalar bytes */
    GgufString str;
    GgufValueType arr_type;
    uint64_t arr_count;
    const void *arr_data;
    const GgufString *arr_strings; /* GGUF_STRING arrays: arr_count entries, else NULL */
} GgufKv;

typedef struct GgufTensor {
    GgufString name;
    int ndim;
    int64_t ne[GGUF_MAX_DIMS]; /* ggml order: ne[0] is the innermost (columns of a matrix) */
    GgufTensorType type;
    const void *data;
    size_t nbytes;
} GgufTensor;

typedef struct Gguf {
    char *path;
    void *map;
    size_t size;
    uint32_t version;
    GgufKv *kv;
    int64_t num_kv;
    GgufTensor *tensors;
    int64_t num_tensors;
    size_t alignment;
    size_t data_offset; /* start of the tensor data section */
} Gguf;

/* Maps and validates path (see above). */
int gguf_open(Gguf *g, const char *path, Error *err);

/* Same over bytes already in memory (the fuzzer; nothing is mapped or
 * freed: g->map points at data, which must outlive g). */
int gguf_open_memory(Gguf *g, const void *data, size_t size, Error *err);

void gguf_close(Gguf *g);

/* Whether path names a GGUF file (a regular file starting with "GGUF"). */
bool gguf_is_file(const char *path);

/* Look-ups: NULL / -1 when absent. */
const GgufKv *gguf_find_kv(const Gguf *g, const char *key);
const GgufTensor *gguf_find_tensor(const Gguf *g, const char *name);

/* Typed getters: 0 on success; -1 with err naming the key when it is
 * absent, of another type, or out of range. Integers of any integer type
 * are accepted where they fit; floats accept FLOAT32 and FLOAT64. */
int gguf_get_u32(const Gguf *g, const char *key, uint32_t *out, Error *err);
int gguf_get_i64(const Gguf *g, const char *key, int64_t *out, Error *err);
int gguf_get_f64(const Gguf *g, const char *key, double *out, Error *err);
int gguf_get_bool(const Gguf *g, const char *key, bool *out, Error *err);
int gguf_get_string(const Gguf *g, const char *key, GgufString *out, Error *err);
/* An array of the given element type (any length, 0 included). */
int gguf_get_array(const Gguf *g, const char *key, GgufValueType elem, const GgufKv **out,
                   Error *err);

/* Element i of a numeric array as int64 / double (i < arr_count, checked by the caller). */
int64_t gguf_array_i64(const GgufKv *kv, uint64_t i);
double gguf_array_f64(const GgufKv *kv, uint64_t i);

const char *gguf_type_name(GgufTensorType t); /* "q4_K", ...; "unknown" */

/* Values per block and bytes per block of a tensor type (0 for unknown). */
int gguf_type_block_elems(GgufTensorType t);
size_t gguf_type_block_bytes(GgufTensorType t);

#endif
