/*
 * gguf.c - the GGUF reader: maps a file (or takes bytes in memory) and
 * validates every byte of its header before anything points into it.
 *
 * Parsing order, as the bytes come: "GGUF" magic; u32 version (2 or 3);
 * i64 tensor count; i64 metadata count; the metadata pairs (key = u64
 * length + bytes, u32 value type, value: scalar, string, or array = u32
 * element type + u64 count + elements); the tensor infos (name, u32 ndim,
 * ndim x i64 ne, u32 type, u64 offset into the data section); padding to
 * general.alignment; the data section. Each count is checked against the
 * bytes left before anything is allocated for it, so a lying count fails
 * fast. Tensors are checked last, once the alignment is known: type, shape,
 * alignment, inside the file, no two overlapping.
 *
 * Multi-byte values are read with memcpy (the file is not aligned) and taken
 * as little-endian: the host is assumed little-endian (x86-64, aarch64).
 * Hand-written because no packaged C library reads GGUF; ggml's sources
 * were read to learn the format, not copied.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mapped_file.h"

#define GGUF_DEFAULT_ALIGNMENT 32
#define ALIGNMENT_KEY "general.alignment"
/* The fewest bytes a metadata pair (key length, type, 1-byte value) and a
 * tensor info (name length, ndim, one ne, type, offset) can take: counts
 * are checked against these before anything is allocated. */
#define MIN_KV_BYTES (8 + 4 + 1)
#define MIN_TENSOR_INFO_BYTES (8 + 4 + 8 + 4 + 8)

/* ------------------------------------------------------------------ types */

static const struct {
    const char *name;
    int block_elems;
    size_t block_bytes;
} TENSOR_TYPES[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_F32] = {"f32", 1, 4},          [GGUF_TYPE_F16] = {"f16", 1, 2},
    [GGUF_TYPE_Q4_0] = {"q4_0", 32, 18},      [GGUF_TYPE_Q4_1] = {"q4_1", 32, 20},
    [GGUF_TYPE_Q5_0] = {"q5_0", 32, 22},      [GGUF_TYPE_Q5_1] = {"q5_1", 32, 24},
    [GGUF_TYPE_Q8_0] = {"q8_0", 32, 34},      [GGUF_TYPE_Q8_1] = {"q8_1", 32, 36},
    [GGUF_TYPE_Q2_K] = {"q2_K", 256, 84},     [GGUF_TYPE_Q3_K] = {"q3_K", 256, 110},
    [GGUF_TYPE_Q4_K] = {"q4_K", 256, 144},    [GGUF_TYPE_Q5_K] = {"q5_K", 256, 176},
    [GGUF_TYPE_Q6_K] = {"q6_K", 256, 210},    [GGUF_TYPE_Q8_K] = {"q8_K", 256, 292},
    [GGUF_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66}, [GGUF_TYPE_IQ2_XS] = {"iq2_xs", 256, 74},
    [GGUF_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98}, [GGUF_TYPE_IQ1_S] = {"iq1_s", 256, 50},
    [GGUF_TYPE_IQ4_NL] = {"iq4_nl", 32, 18},  [GGUF_TYPE_IQ3_S] = {"iq3_s", 256, 110},
    [GGUF_TYPE_IQ2_S] = {"iq2_s", 256, 82},   [GGUF_TYPE_IQ4_XS] = {"iq4_xs", 256, 136},
    [GGUF_TYPE_I8] = {"i8", 1, 1},            [GGUF_TYPE_I16] = {"i16", 1, 2},
    [GGUF_TYPE_I32] = {"i32", 1, 4},          [GGUF_TYPE_I64] = {"i64", 1, 8},
    [GGUF_TYPE_F64] = {"f64", 1, 8},          [GGUF_TYPE_IQ1_M] = {"iq1_m", 256, 56},
    [GGUF_TYPE_BF16] = {"bf16", 1, 2},        [GGUF_TYPE_TQ1_0] = {"tq1_0", 256, 54},
    [GGUF_TYPE_TQ2_0] = {"tq2_0", 256, 66},   [GGUF_TYPE_MXFP4] = {"mxfp4", 32, 17},
};

static bool tensor_type_known(uint32_t t) { return t < GGUF_TYPE_COUNT && TENSOR_TYPES[t].name; }

const char *gguf_type_name(GgufTensorType t) {
    return tensor_type_known((uint32_t)t) ? TENSOR_TYPES[t].name : "unknown";
}

int gguf_type_block_elems(GgufTensorType t) {
    return tensor_type_known((uint32_t)t) ? TENSOR_TYPES[t].block_elems : 0;
}

size_t gguf_type_block_bytes(GgufTensorType t) {
    return tensor_type_known((uint32_t)t) ? TENSOR_TYPES[t].block_bytes : 0;
}

/* Bytes of one scalar of a metadata value type; 0 for strings, arrays and unknown types. */
static size_t value_size(uint32_t type) {
    switch (type) {
    case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL: return 1;
    case GGUF_UINT16: case GGUF_INT16: return 2;
    case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32: return 4;
    case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static const char *value_type_name(GgufValueType type) {
    static const char *const NAMES[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                        "bool", "string", "array", "uint64", "int64", "float64"};
    return (unsigned)type < sizeof NAMES / sizeof NAMES[0] ? NAMES[type] : "unknown type";
}

/* A name from the file, fit for a message: bytes outside printable ASCII
 * become \xNN and a long name is cut with "...". */
typedef struct QuotedName {
    char s[96];
} QuotedName;

static QuotedName quoted(GgufString name) {
    QuotedName q;
    size_t n = 0;
    for (uint64_t i = 0; i < name.len; i++) {
        unsigned char c = (unsigned char)name.p[i];
        if (n + 8 >= sizeof q.s) {
            memcpy(q.s + n, "...", 3);
            n += 3;
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\\') q.s[n++] = (char)c;
        else n += (size_t)snprintf(q.s + n, sizeof q.s - n, "\\x%02x", c);
    }
    q.s[n] = '\0';
    return q;
}

/* ----------------------------------------------------------------- reader */

typedef struct Reader {
    const uint8_t *base;
    size_t size, pos;
    Error *err;
} Reader;

/* Checks that n more bytes are there; `what` names them in the message. */
static int need(Reader *r, uint64_t n, const char *what) {
    if (n <= r->size - r->pos) return 0;
    return error_set(r->err, "the file ends at byte %zu, %llu bytes short of %s", r->size,
                     (unsigned long long)(n - (r->size - r->pos)), what);
}

static int read_u32(Reader *r, uint32_t *out, const char *what) {
    if (need(r, 4, what)) return -1;
    memcpy(out, r->base + r->pos, 4);
    r->pos += 4;
    return 0;
}

static int read_u64(Reader *r, uint64_t *out, const char *what) {
    if (need(r, 8, what)) return -1;
    memcpy(out, r->base + r->pos, 8);
    r->pos += 8;
    return 0;
}

static int read_string(Reader *r, GgufString *out, const char *what) {
    uint64_t len;
    size_t at = r->pos;
    if (read_u64(r, &len, what)) return -1;
    if (len > r->size - r->pos)
        return error_set(r->err, "%s at byte %zu is %llu bytes long, past the end of the file (%zu bytes)",
                         what, at, (unsigned long long)len, r->size);
    out->p = (const char *)r->base + r->pos;
    out->len = len;
    r->pos += (size_t)len;
    return 0;
}

static bool string_equals(GgufString s, const char *text) {
    size_t n = strlen(text);
    return s.len == n && memcmp(s.p, text, n) == 0;
}

static int compare_strings(GgufString a, GgufString b) {
    size_t n = a.len < b.len ? (size_t)a.len : (size_t)b.len;
    int c = memcmp(a.p, b.p, n);
    if (c) return c;
    return a.len < b.len ? -1 : a.len > b.len;
}

/* --------------------------------------------------------------- metadata */

/* An array value: element type, count, then the elements. */
static int read_array(Reader *r, GgufKv *kv, Error *err) {
    uint32_t elem;
    uint64_t count;
    if (read_u32(r, &elem, "the array's element type") || read_u64(r, &count, "the array's length"))
        return -1;
    kv->arr_type = (GgufValueType)elem;
    kv->arr_count = count;
    kv->arr_data = r->base + r->pos;
    if (elem == GGUF_ARRAY) return error_set(err, "arrays of arrays are not supported");
    if (elem == GGUF_STRING) {
        if (count > (r->size - r->pos) / 8)
            return error_set(err, "a string array of %llu elements at byte %zu cannot fit in the %zu bytes "
                                  "left",
                             (unsigned long long)count, r->pos, r->size - r->pos);
        GgufString *strings = calloc(count ? (size_t)count : 1, sizeof *strings);
        if (!strings) return error_set(err, "out of memory for a string array of %llu elements",
                                       (unsigned long long)count);
        kv->arr_strings = strings;
        for (uint64_t i = 0; i < count; i++) {
            if (read_string(r, &strings[i], "a string element")) {
                return error_prefix(err, "element %llu of the string array", (unsigned long long)i);
            }
        }
        return 0;
    }
    size_t size = value_size(elem);
    if (!size) return error_set(err, "the array's element type %u is unknown", elem);
    if (count > (r->size - r->pos) / size)
        return error_set(err, "an array of %llu %s values at byte %zu cannot fit in the %zu bytes left",
                         (unsigned long long)count, value_type_name(elem), r->pos, r->size - r->pos);
    if (elem == GGUF_BOOL) {
        for (uint64_t i = 0; i < count; i++) {
            uint8_t b = r->base[r->pos + i];
            if (b > 1) return error_set(err, "element %llu of the bool array is %u, not 0 or 1",
                                        (unsigned long long)i, b);
        }
    }
    r->pos += (size_t)(count * size);
    return 0;
}

static int read_kv(Reader *r, GgufKv *kv, int64_t index, Error *err) {
    size_t at = r->pos;
    if (read_string(r, &kv->key, "a metadata key"))
        return error_prefix(err, "metadata entry %lld (byte %zu)", (long long)index, at);
    uint32_t type;
    if (read_u32(r, &type, "the value type")) goto fail;
    kv->type = (GgufValueType)type;
    kv->value = r->base + r->pos;
    if (type == GGUF_STRING) {
        if (read_string(r, &kv->str, "the string value")) goto fail;
    } else if (type == GGUF_ARRAY) {
        if (read_array(r, kv, err)) goto fail;
    } else {
        size_t size = value_size(type);
        if (!size) {
            error_set(err, "the value type %u is unknown", type);
            goto fail;
        }
        if (need(r, size, "the value")) goto fail;
        if (type == GGUF_BOOL && r->base[r->pos] > 1) {
            error_set(err, "the bool value is %u, not 0 or 1", r->base[r->pos]);
            goto fail;
        }
        r->pos += size;
    }
    return 0;
fail:
    return error_prefix(err, "metadata key '%s' (byte %zu)", quoted(kv->key).s, at);
}

static int compare_names(const void *a, const void *b) {
    return compare_strings(*(const GgufString *)a, *(const GgufString *)b);
}

/* Refuses a name given twice among n items of `stride` bytes that each
 * start with their name (GgufKv.key, GgufTensor.name): sorts a copy of the
 * names, then compares neighbours. */
_Static_assert(offsetof(GgufKv, key) == 0 && offsetof(GgufTensor, name) == 0,
               "keys and tensor names come first");

static int refuse_duplicates(const void *items, size_t stride, size_t n, const char *what, Error *err) {
    if (n < 2) return 0;
    GgufString *sorted = malloc(n * sizeof *sorted);
    if (!sorted) return error_set(err, "out of memory");
    for (size_t i = 0; i < n; i++) memcpy(&sorted[i], (const char *)items + i * stride, sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, compare_names);
    int rc = 0;
    for (size_t i = 1; i < n && rc == 0; i++)
        if (compare_strings(sorted[i - 1], sorted[i]) == 0)
            rc = error_set(err, "%s '%s' appears more than once", what, quoted(sorted[i]).s);
    free(sorted);
    return rc;
}

static int read_metadata(Reader *r, Gguf *g, uint64_t count, Error *err) {
    if (count > (r->size - r->pos) / MIN_KV_BYTES)
        return error_set(err, "the metadata count %llu cannot fit in the %zu bytes left after the header",
                         (unsigned long long)count, r->size - r->pos);
    g->kv = calloc(count ? (size_t)count : 1, sizeof *g->kv);
    if (!g->kv) return error_set(err, "out of memory for %llu metadata entries", (unsigned long long)count);
    g->num_kv = (int64_t)count; /* calloc'ed: gguf_close frees a partly read list */
    for (uint64_t i = 0; i < count; i++)
        if (read_kv(r, &g->kv[i], (int64_t)i, err)) return -1;
    return refuse_duplicates(g->kv, sizeof *g->kv, (size_t)count, "metadata key", err);
}

/* general.alignment if present: a uint32, a nonzero power of two. */
static int read_alignment(Gguf *g, Error *err) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const GgufKv *kv = gguf_find_kv(g, ALIGNMENT_KEY);
    if (!kv) return 0;
    if (kv->type != GGUF_UINT32)
        return error_set(err, "metadata key '" ALIGNMENT_KEY "' holds a value of type %s, not uint32",
                         value_type_name(kv->type));
    uint32_t a;
    memcpy(&a, kv->value, 4);
    if (a == 0 || (a & (a - 1)) != 0)
        return error_set(err, "metadata key '" ALIGNMENT_KEY "' is %u, not a nonzero power of two", a);
    g->alignment = a;
    return 0;
}

/* ---------------------------------------------------------------- tensors */

/* One tensor info: name, ndim, ne, type, offset (kept in *offset until the
 * data section's start is known). Checks the shape and type and sets nbytes. */
static int read_tensor_info(Reader *r, GgufTensor *t, uint64_t *offset, Error *err) {
    size_t at = r->pos;
    if (read_string(r, &t->name, "a tensor name")) return error_prefix(err, "tensor info at byte %zu", at);
    uint32_t ndim, type;
    if (read_u32(r, &ndim, "the dimension count")) goto fail;
    if (ndim < 1 || ndim > GGUF_MAX_DIMS) {
        error_set(err, "%u dimensions (1 to %d are allowed)", ndim, GGUF_MAX_DIMS);
        goto fail;
    }
    t->ndim = (int)ndim;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < ndim; d++) {
        uint64_t ne;
        if (read_u64(r, &ne, "a dimension")) goto fail;
        if (ne < 1 || ne > INT64_MAX) {
            error_set(err, "dimension %u is %lld, not positive", d, (long long)ne);
            goto fail;
        }
        t->ne[d] = (int64_t)ne;
    }
    if (read_u32(r, &type, "the tensor type") || read_u64(r, offset, "the data offset")) goto fail;
    if (!tensor_type_known(type)) {
        error_set(err, "the tensor type %u is unknown", type);
        goto fail;
    }
    t->type = (GgufTensorType)type;
    int64_t block = TENSOR_TYPES[type].block_elems;
    if (t->ne[0] % block != 0) {
        error_set(err, "its %lld columns are not a multiple of %s's block of %lld values",
                  (long long)t->ne[0], TENSOR_TYPES[type].name, (long long)block);
        goto fail;
    }
    /* Elements and bytes both must fit: the element count in int64, the bytes in size_t. */
    int64_t elems = t->ne[0];
    uint64_t blocks = (uint64_t)(t->ne[0] / block), bytes = 0;
    bool too_big = blocks > SIZE_MAX / TENSOR_TYPES[type].block_bytes;
    if (!too_big) bytes = blocks * TENSOR_TYPES[type].block_bytes;
    for (int d = 1; d < GGUF_MAX_DIMS; d++) {
        if (too_big || elems > INT64_MAX / t->ne[d] || bytes > SIZE_MAX / (uint64_t)t->ne[d]) {
            error_set(err, "the shape [%lld, %lld, %lld, %lld] is too large (its element or byte count "
                           "overflows 64 bits)",
                      (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
            goto fail;
        }
        elems *= t->ne[d];
        bytes *= (uint64_t)t->ne[d];
    }
    t->nbytes = (size_t)bytes;
    return 0;
fail:
    return error_prefix(err, "tensor '%s' (byte %zu)", quoted(t->name).s, at);
}

typedef struct Span {
    uint64_t begin, end;
    GgufString name;
} Span;

static int compare_spans(const void *a, const void *b) {
    const Span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Places every tensor in the data section: aligned, inside the file, no two overlapping. */
static int place_tensors(Gguf *g, const uint64_t *offsets, Error *err) {
    size_t n = (size_t)g->num_tensors;
    if (n == 0) return 0;
    if (g->data_offset > g->size)
        return error_set(err, "the tensor data section would start at byte %zu, past the end of the file "
                              "(%zu bytes)", g->data_offset, g->size);
    size_t data_size = g->size - g->data_offset;
    Span *spans = malloc(n * sizeof *spans);
    if (!spans) return error_set(err, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        GgufTensor *t = &g->tensors[i];
        uint64_t off = offsets[i];
        if (off % g->alignment != 0)
            rc = error_set(err, "tensor '%s': its data offset %llu is not a multiple of the alignment %zu",
                           quoted(t->name).s, (unsigned long long)off, g->alignment);
        else if (off > data_size || t->nbytes > data_size - off)
            rc = error_set(err, "tensor '%s': its %zu bytes at data offset %llu (file byte %zu + %llu) end "
                           "past the end of the file (%zu bytes)", quoted(t->name).s, t->nbytes,
                           (unsigned long long)off, g->data_offset, (unsigned long long)off, g->size);
        else {
            t->data = (const uint8_t *)g->map + g->data_offset + off;
            spans[i] = (Span){off, off + t->nbytes, t->name};
        }
    }
    if (rc == 0) {
        qsort(spans, n, sizeof *spans, compare_spans);
        for (size_t i = 1; i < n && rc == 0; i++)
            if (spans[i].begin < spans[i - 1].end)
                rc = error_set(err, "tensors '%s' and '%s' overlap in the data section (at data offsets "
                                    "%llu and %llu)",
                               quoted(spans[i - 1].name).s, quoted(spans[i].name).s,
                               (unsigned long long)spans[i - 1].begin, (unsigned long long)spans[i].begin);
    }
    free(spans);
    return rc;
}

static int read_tensors(Reader *r, Gguf *g, uint64_t count, Error *err) {
    if (count > (r->size - r->pos) / MIN_TENSOR_INFO_BYTES)
        return error_set(err, "the tensor count %llu cannot fit in the %zu bytes left after the metadata",
                         (unsigned long long)count, r->size - r->pos);
    g->tensors = calloc(count ? (size_t)count : 1, sizeof *g->tensors);
    uint64_t *offsets = calloc(count ? (size_t)count : 1, sizeof *offsets);
    if (!g->tensors || !offsets) {
        free(offsets);
        return error_set(err, "out of memory for %llu tensors", (unsigned long long)count);
    }
    g->num_tensors = (int64_t)count;
    int rc = 0;
    for (uint64_t i = 0; i < count && rc == 0; i++)
        rc = read_tensor_info(r, &g->tensors[i], &offsets[i], err);
    if (rc == 0) rc = refuse_duplicates(g->tensors, sizeof *g->tensors, (size_t)count, "tensor name", err);
    if (rc == 0) {
        /* The data section starts at the first aligned byte after the tensor infos. */
        size_t pad = (g->alignment - r->pos % g->alignment) % g->alignment;
        if (pad > SIZE_MAX - r->pos) rc = error_set(err, "the data section's start overflows");
        else g->data_offset = r->pos + pad;
    }
    if (rc == 0) rc = place_tensors(g, offsets, err);
    free(offsets);
    return rc;
}

/* ------------------------------------------------------------------- file */

static int parse(Gguf *g, Error *err) {
    Reader r = {.base = g->map, .size = g->size, .pos = 0, .err = err};
    if (g->size < 4 || memcmp(g->map, "GGUF", 4) != 0)
        return error_set(err, "not a GGUF file: it does not start with the 4 bytes \"GGUF\"");
    r.pos = 4;
    uint32_t version;
    uint64_t tensor_count, kv_count;
    if (read_u32(&r, &version, "the version")) return -1;
    if (version != 2 && version != 3) {
        /* A big-endian file's version (2 or 3) reads as 0x02000000 or 0x03000000 here. */
        if ((version & 0xffffu) == 0 && version != 0)
            return error_set(err, "big-endian GGUF is not supported (version field 0x%08x)", version);
        return error_set(err, "GGUF version %u is not supported (versions 2 and 3 are)", version);
    }
    g->version = version;
    if (read_u64(&r, &tensor_count, "the tensor count") || read_u64(&r, &kv_count, "the metadata count"))
        return -1;
    /* Both counts are int64 in the format: a negative one reads here as above INT64_MAX. */
    if (tensor_count > r.size / MIN_TENSOR_INFO_BYTES)
        return error_set(err, "the tensor count %llu cannot fit in a file of %zu bytes",
                         (unsigned long long)tensor_count, r.size);
    if (read_metadata(&r, g, kv_count, err) || read_alignment(g, err)) return -1;
    return read_tensors(&r, g, tensor_count, err);
}

int gguf_open_memory(Gguf *g, const void *data, size_t size, Error *err) {
    memset(g, 0, sizeof *g);
    g->map = (void *)data; /* never written, never unmapped (no path) */
    g->size = data ? size : 0;
    if (parse(g, err) == 0) return 0;
    gguf_close(g);
    return -1;
}

int gguf_open(Gguf *g, const char *path, Error *err) {
    memset(g, 0, sizeof *g);
    MappedFile mf;
    if (mapped_file_open(&mf, path, err)) return -1;
    g->path = mf.path;
    g->map = mf.map;
    g->size = mf.size;
    if (parse(g, err) == 0) return 0;
    error_prefix(err, "%s", path);
    gguf_close(g);
    return -1;
}

void gguf_close(Gguf *g) {
    if (!g) return;
    if (g->kv)
        for (int64_t i = 0; i < g->num_kv; i++) free((void *)g->kv[i].arr_strings);
    free(g->kv);
    free(g->tensors);
    if (g->path) { /* mapped by gguf_open (gguf_open_memory's bytes are the caller's) */
        MappedFile mf = {g->path, g->map, g->size};
        mapped_file_close(&mf);
    }
    memset(g, 0, sizeof *g);
}

bool gguf_is_file(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat sb;
    char magic[4];
    bool yes = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && read(fd, magic, 4) == 4 &&
               memcmp(magic, "GGUF", 4) == 0;
    close(fd);
    return yes;
}

/* ---------------------------------------------------------------- look-ups */

const GgufKv *gguf_find_kv(const Gguf *g, const char *key) {
    for (int64_t i = 0; i < g->num_kv; i++)
        if (string_equals(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const GgufTensor *gguf_find_tensor(const Gguf *g, const char *name) {
    for (int64_t i = 0; i < g->num_tensors; i++)
        if (string_equals(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

static const GgufKv *find_or_fail(const Gguf *g, const char *key, Error *err) {
    const GgufKv *kv = gguf_find_kv(g, key);
    if (!kv) error_set(err, "the GGUF file has no metadata key '%s'", key);
    return kv;
}

static int wrong_type(const GgufKv *kv, const char *key, const char *wanted, Error *err) {
    return error_set(err, "metadata key '%s' holds a value of type %s, not %s", key,
                     value_type_name(kv->type), wanted);
}

/* An integer of any integer type at p: false for other types; *is_signed says whether *s or *u holds it. */
static bool read_integer(GgufValueType type, const void *p, bool *is_signed, int64_t *s, uint64_t *u) {
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
    *is_signed = false;
    switch (type) {
    case GGUF_UINT8: memcpy(&u8, p, 1); *u = u8; return true;
    case GGUF_UINT16: memcpy(&u16, p, 2); *u = u16; return true;
    case GGUF_UINT32: memcpy(&u32, p, 4); *u = u32; return true;
    case GGUF_UINT64: memcpy(u, p, 8); return true;
    default: break;
    }
    *is_signed = true;
    switch (type) {
    case GGUF_INT8: memcpy(&i8, p, 1); *s = i8; return true;
    case GGUF_INT16: memcpy(&i16, p, 2); *s = i16; return true;
    case GGUF_INT32: memcpy(&i32, p, 4); *s = i32; return true;
    case GGUF_INT64: memcpy(s, p, 8); return true;
    default: return false;
    }
}

int gguf_get_u32(const Gguf *g, const char *key, uint32_t *out, Error *err) {
    const GgufKv *kv = find_or_fail(g, key, err);
    if (!kv) return -1;
    bool is_signed;
    int64_t s = 0;
    uint64_t u = 0;
    if (!read_integer(kv->type, kv->value, &is_signed, &s, &u)) return wrong_type(kv, key, "an integer", err);
    if (is_signed && (s < 0 || s > UINT32_MAX))
        return error_set(err, "metadata key '%s' is %lld, outside the uint32 range", key, (long long)s);
    if (!is_signed && u > UINT32_MAX)
        return error_set(err, "metadata key '%s' is %llu, outside the uint32 range", key,
                         (unsigned long long)u);
    *out = is_signed ? (uint32_t)s : (uint32_t)u;
    return 0;
}

int gguf_get_i64(const Gguf *g, const char *key, int64_t *out, Error *err) {
    const GgufKv *kv = find_or_fail(g, key, err);
    if (!kv) return -1;
    bool is_signed;
    int64_t s = 0;
    uint64_t u = 0;
    if (!read_integer(kv->type, kv->value, &is_signed, &s, &u)) return wrong_type(kv, key, "an integer", err);
    if (!is_signed && u > INT64_MAX)
        return error_set(err, "metadata key '%s' is %llu, above the int64 range", key, (unsigned long long)u);
    *out = is_signed ? s : (int64_t)u;
    return 0;
}

int gguf_get_f64(const Gguf *g, const char *key, double *out, Error *err) {
    const GgufKv *kv = find_or_fail(g, key, err);
    if (!kv) return -1;
    if (kv->type == GGUF_FLOAT32) {
        float f;
        memcpy(&f, kv->value, 4);
        *out = f;
    } else if (kv->type == GGUF_FLOAT64) {
        memcpy(out, kv->value, 8);
    } else {
        return wrong_type(kv, key, "a float", err);
    }
    return 0;
}

int gguf_get_bool(const Gguf *g, const char *key, bool *out, Error *err) {
    const GgufKv *kv = find_or_fail(g, key, err);
    if (!kv) return -1;
    if (kv->type != GGUF_BOOL) return wrong_type(kv, key, "a bool", err);
    *out = *(const uint8_t *)kv->value != 0;
    return 0;
}

int gguf_get_string(const Gguf *g, const char *key, GgufString *out, Error *err) {
    const GgufKv *kv = find_or_fail(g, key, err);
    if (!kv) return -1;
    if (kv->type != GGUF_STRING) return wrong_type(kv, key, "a string", err);
    *out = kv->str;
    return 0;
}

int gguf_get_array(const Gguf *g, const char *key, GgufValueType elem, const GgufKv **out, Error *err) {
    const GgufKv *kv = find_or_fail(g, key, err);
    if (!kv) return -1;
    if (kv->type != GGUF_ARRAY) return wrong_type(kv, key, "an array", err);
    if (kv->arr_type != elem)
        return error_set(err, "metadata key '%s' is an array of %s, not of %s", key,
                         value_type_name(kv->arr_type), value_type_name(elem));
    *out = kv;
    return 0;
}

/* Element i of a numeric array as a double (integers converted, bools 0/1). */
double gguf_array_f64(const GgufKv *kv, uint64_t i) {
    size_t size = value_size(kv->arr_type);
    if (kv->type != GGUF_ARRAY || !size || i >= kv->arr_count) return 0;
    const uint8_t *p = (const uint8_t *)kv->arr_data + i * size;
    if (kv->arr_type == GGUF_FLOAT32 || kv->arr_type == GGUF_FLOAT64) {
        if (kv->arr_type == GGUF_FLOAT64) {
            double d;
            memcpy(&d, p, 8);
            return d;
        }
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    if (kv->arr_type == GGUF_BOOL) return *p;
    bool is_signed;
    int64_t s = 0;
    uint64_t u = 0;
    read_integer(kv->arr_type, p, &is_signed, &s, &u);
    return is_signed ? (double)s : (double)u;
}

int64_t gguf_array_i64(const GgufKv *kv, uint64_t i) {
    size_t size = value_size(kv->arr_type);
    if (kv->type != GGUF_ARRAY || !size || i >= kv->arr_count) return 0;
    const uint8_t *p = (const uint8_t *)kv->arr_data + i * size;
    bool is_signed;
    int64_t s = 0;
    uint64_t u = 0;
    if (read_integer(kv->arr_type, p, &is_signed, &s, &u))
        return is_signed ? s : u > INT64_MAX ? INT64_MAX : (int64_t)u;
    double d = gguf_array_f64(kv, i);
    /* Truncated toward zero, saturated (a cast out of range would be undefined); NaN is 0. */
    if (isnan(d)) return 0;
    if (d >= 9223372036854775808.0) return INT64_MAX;
    if (d <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)d;
}
