/*
 * safetensors.c - mmap + header validation for safetensors checkpoints.
 *
 * File format: u64 little-endian header length N, N bytes of JSON
 * {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
 * then the data buffer that offsets are relative to. Everything in the header
 * is untrusted: each number is range-checked with overflow-safe arithmetic
 * before a pointer is formed (see safetensors.h for the guarantees).
 */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference implementation refuses headers above 100 MB, and so do we. */
#define MAX_HEADER_BYTES (100u << 20)

static const struct {
    const char *name;
    size_t size;
    TensorDtype dtype;
} DTYPES[] = {
    {"BF16", 2, DTYPE_BF16},   {"F16", 2, DTYPE_F16},      {"F32", 4, DTYPE_F32},
    {"F64", 8, DTYPE_OTHER},   {"I64", 8, DTYPE_OTHER},    {"U64", 8, DTYPE_OTHER},
    {"I32", 4, DTYPE_OTHER},   {"U32", 4, DTYPE_OTHER},    {"I16", 2, DTYPE_OTHER},
    {"U16", 2, DTYPE_OTHER},   {"I8", 1, DTYPE_OTHER},     {"U8", 1, DTYPE_OTHER},
    {"BOOL", 1, DTYPE_OTHER},  {"F8_E4M3", 1, DTYPE_F8_E4M3}, {"F8_E5M2", 1, DTYPE_OTHER},
};

size_t tensor_dtype_size(TensorDtype dtype) {
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (DTYPES[i].dtype == dtype) return DTYPES[i].size;
    return 0;
}

/* Maps path; a file too short for the 8-byte header length is an error. */
static int map_file(MappedFile *mf, const char *path, Error *err) {
    if (mapped_file_open(mf, path, err)) return -1;
    if (mf->size >= 8) return 0;
    error_set(err, "%s: truncated file (%zu bytes; a safetensors file starts with an "
                   "8-byte header length)", path, mf->size);
    mapped_file_close(mf);
    return -1;
}

static int parse_dtype(json_t *v, TensorInfo *t, size_t *elem_size, Error *err) {
    if (!json_is_string(v)) return error_set(err, "'dtype' must be a string");
    const char *s = json_string_value(v);
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++) {
        if (strcmp(s, DTYPES[i].name) == 0) {
            t->dtype = DTYPES[i].dtype;
            snprintf(t->dtype_name, sizeof t->dtype_name, "%s", DTYPES[i].name);
            *elem_size = DTYPES[i].size;
            return 0;
        }
    }
    return error_set(err, "unknown dtype '%.32s'", s);
}

/* Shape -> element count, refusing negative dims and products that overflow. */
static int parse_shape(json_t *v, TensorInfo *t, uint64_t *numel, Error *err) {
    if (!json_is_array(v)) return error_set(err, "'shape' must be a list of integers");
    size_t ndim = json_array_size(v);
    if (ndim > TENSOR_MAX_DIMS) return error_set(err, "shape has %zu dimensions (max %d)", ndim,
                                                 TENSOR_MAX_DIMS);
    t->ndim = (int)ndim;
    *numel = 1;
    for (size_t i = 0; i < ndim; i++) {
        json_t *d = json_array_get(v, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return error_set(err, "'shape' must be a list of non-negative integers");
        uint64_t dim = (uint64_t)json_integer_value(d);
        t->shape[i] = (int64_t)dim;
        if (dim != 0 && *numel > UINT64_MAX / dim) return error_set(err, "shape overflows");
        *numel *= dim;
    }
    return 0;
}

static int parse_offsets(json_t *v, uint64_t *begin, uint64_t *end, Error *err) {
    if (!json_is_array(v) || json_array_size(v) != 2 ||
        !json_is_integer(json_array_get(v, 0)) || !json_is_integer(json_array_get(v, 1)) ||
        json_integer_value(json_array_get(v, 0)) < 0 || json_integer_value(json_array_get(v, 1)) < 0)
        return error_set(err, "'data_offsets' must be [begin, end] with non-negative integers");
    *begin = (uint64_t)json_integer_value(json_array_get(v, 0));
    *end = (uint64_t)json_integer_value(json_array_get(v, 1));
    if (*end < *begin) return error_set(err, "data_offsets end %llu is before begin %llu",
                                        (unsigned long long)*end, (unsigned long long)*begin);
    return 0;
}

static int parse_entry(const char *name, json_t *entry, const uint8_t *data, uint64_t data_size,
                       TensorInfo *t, Error *err) {
    memset(t, 0, sizeof *t);
    if (!json_is_object(entry)) return error_set(err, "entry is not a JSON object");
    size_t elem_size = 0;
    uint64_t numel = 0, begin = 0, end = 0;
    if (parse_dtype(json_object_get(entry, "dtype"), t, &elem_size, err) ||
        parse_shape(json_object_get(entry, "shape"), t, &numel, err) ||
        parse_offsets(json_object_get(entry, "data_offsets"), &begin, &end, err))
        return -1;
    if (numel > UINT64_MAX / elem_size) return error_set(err, "shape overflows");
    uint64_t nbytes = numel * elem_size;
    if (end - begin != nbytes)
        return error_set(err, "data_offsets [%llu, %llu] hold %llu bytes but shape and dtype %s "
                              "need %llu",
                         (unsigned long long)begin, (unsigned long long)end,
                         (unsigned long long)(end - begin), t->dtype_name,
                         (unsigned long long)nbytes);
    if (end > data_size)
        return error_set(err, "data_offsets end %llu is past the end of the data (%llu bytes; "
                              "the file is truncated or the header lies)",
                         (unsigned long long)end, (unsigned long long)data_size);
    t->name = strdup(name);
    if (!t->name) return error_set(err, "out of memory");
    t->data = data + begin;
    t->nbytes = (size_t)nbytes;
    return 0;
}

static int compare_by_data(const void *a, const void *b) {
    const TensorInfo *x = *(const TensorInfo *const *)a, *y = *(const TensorInfo *const *)b;
    if (x->data != y->data) return (const uint8_t *)x->data < (const uint8_t *)y->data ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Two tensors sharing bytes means the header lies (HF never writes aliases). */
static int check_no_overlap(TensorInfo *tensors, int n, Error *err) {
    if (n < 2) return 0;
    const TensorInfo **sorted = malloc(sizeof *sorted * (size_t)n);
    if (!sorted) return error_set(err, "out of memory");
    for (int i = 0; i < n; i++) sorted[i] = &tensors[i];
    qsort(sorted, (size_t)n, sizeof *sorted, compare_by_data);
    int rc = 0;
    for (int i = 1; i < n && rc == 0; i++) {
        const TensorInfo *prev = sorted[i - 1], *cur = sorted[i];
        if ((const uint8_t *)prev->data + prev->nbytes > (const uint8_t *)cur->data)
            rc = error_set(err, "tensors '%s' and '%s' overlap in the data buffer", prev->name,
                           cur->name);
    }
    free(sorted);
    return rc;
}

static int grow_tensors(Safetensors *st, size_t extra, Error *err) {
    TensorInfo *t = realloc(st->tensors, sizeof *t * ((size_t)st->num_tensors + extra));
    if (!t) return error_set(err, "out of memory");
    st->tensors = t;
    return 0;
}

/* Maps one file and appends its tensors to st. */
static int add_file(Safetensors *st, const char *path, Error *err) {
    MappedFile *files = realloc(st->files, sizeof *files * (size_t)(st->num_files + 1));
    if (!files) return error_set(err, "out of memory");
    st->files = files;
    MappedFile *mf = &st->files[st->num_files];
    if (map_file(mf, path, err)) return -1;
    int file_index = st->num_files++;

    const uint8_t *bytes = mf->map;
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--) header_len = header_len << 8 | bytes[i];
    if (header_len > mf->size - 8)
        return error_set(err, "%s: header length %llu exceeds the file size (%zu bytes): "
                              "truncated file or not a safetensors file",
                         path, (unsigned long long)header_len, mf->size);
    if (header_len > MAX_HEADER_BYTES)
        return error_set(err, "%s: header of %llu bytes is larger than the 100 MB limit", path,
                         (unsigned long long)header_len);

    json_error_t jerr;
    json_t *header = json_loadb((const char *)bytes + 8, header_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!header)
        return error_set(err, "%s: header is not valid JSON (%s at byte %d)", path, jerr.text,
                         jerr.position);
    int rc = 0;
    if (!json_is_object(header)) rc = error_set(err, "%s: header is not a JSON object", path);
    if (rc == 0 && grow_tensors(st, json_object_size(header), err))
        rc = error_prefix(err, "%s", path);

    const uint8_t *data = bytes + 8 + header_len;
    uint64_t data_size = mf->size - 8 - header_len;
    int first = st->num_tensors;
    const char *name;
    json_t *entry;
    json_object_foreach(header, name, entry) {
        if (rc) break;
        if (strcmp(name, "__metadata__") == 0) continue;
        if (safetensors_find(st, name)) {
            rc = error_set(err, "%s: tensor '%s' appears in more than one file", path, name);
            break;
        }
        TensorInfo *t = &st->tensors[st->num_tensors];
        rc = parse_entry(name, entry, data, data_size, t, err);
        if (rc) {
            error_prefix(err, "%s: tensor '%.200s'", path, name);
            break;
        }
        t->file_index = file_index;
        st->num_tensors++;
    }
    json_decref(header);
    if (rc == 0 && check_no_overlap(st->tensors + first, st->num_tensors - first, err))
        rc = error_prefix(err, "%s", path);
    return rc;
}

int safetensors_open_file(Safetensors *st, const char *path, Error *err) {
    memset(st, 0, sizeof *st);
    if (add_file(st, path, err)) {
        safetensors_close(st);
        return -1;
    }
    return 0;
}

/* A shard name from the index must name a file inside the model folder. */
static bool is_plain_file_name(const char *s) {
    return s[0] != '\0' && s[0] != '.' && strchr(s, '/') == NULL && strlen(s) < 256;
}

static int open_sharded(Safetensors *st, const char *model_dir, const char *index_path,
                        Error *err) {
    json_error_t jerr;
    json_t *index = json_load_file(index_path, JSON_REJECT_DUPLICATES, &jerr);
    if (!index)
        return error_set(err, "%s: invalid JSON at line %d: %s", index_path, jerr.line, jerr.text);
    json_t *map = json_object_get(index, "weight_map");
    int rc = 0;
    if (!json_is_object(map))
        rc = error_set(err, "%s: missing object 'weight_map'", index_path);

    /* Open each distinct shard once, in order of first mention. */
    const char *name;
    json_t *file;
    json_object_foreach(map, name, file) {
        if (rc) break;
        if (!json_is_string(file) || !is_plain_file_name(json_string_value(file))) {
            rc = error_set(err, "%s: tensor '%.200s' maps to an invalid shard file name", index_path,
                           name);
            break;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", model_dir, json_string_value(file));
        bool seen = false;
        for (int i = 0; i < st->num_files && !seen; i++) seen = strcmp(st->files[i].path, path) == 0;
        if (!seen) rc = add_file(st, path, err);
    }
    /* Every tensor the index promises must be in the shard it names. */
    json_object_foreach(map, name, file) {
        if (rc) break;
        const TensorInfo *t = safetensors_find(st, name);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", model_dir, json_string_value(file));
        if (!t || strcmp(st->files[t->file_index].path, path) != 0)
            rc = error_set(err, "%s: tensor '%.200s' is not in shard %s", index_path, name,
                           json_string_value(file));
    }
    json_decref(index);
    return rc;
}

int safetensors_open_dir(Safetensors *st, const char *model_dir, Error *err) {
    memset(st, 0, sizeof *st);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", model_dir);
    int rc;
    if (access(path, F_OK) == 0) {
        rc = open_sharded(st, model_dir, path, err);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", model_dir);
        if (access(path, F_OK) != 0)
            return error_set(err, "%s: no model.safetensors or model.safetensors.index.json",
                             model_dir);
        rc = add_file(st, path, err);
    }
    if (rc) safetensors_close(st);
    return rc;
}

const TensorInfo *safetensors_find(const Safetensors *st, const char *name) {
    for (int i = 0; i < st->num_tensors; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}

void safetensors_close(Safetensors *st) {
    for (int i = 0; i < st->num_tensors; i++) free(st->tensors[i].name);
    free(st->tensors);
    for (int i = 0; i < st->num_files; i++) mapped_file_close(&st->files[i]);
    free(st->files);
    memset(st, 0, sizeof *st);
}
