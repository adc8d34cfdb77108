/*
 * test_gguf.c - the GGUF reader (model/gguf.c): valid files with every
 * metadata type and several tensor types read back exactly, and every
 * malformed file (bad header, lying counts and lengths, bad shapes, types,
 * offsets, every truncation of a valid file) is an error naming what is
 * wrong, never a crash. Files are built here, byte by byte.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "helpers.h"
#include "model/gguf.h"

/* ---------------------------------------------------------- the builder */

typedef struct Bytes {
    uint8_t *p;
    size_t len, cap;
} Bytes;

static void put(Bytes *b, const void *data, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        cr_assert(b->p);
    }
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void put_u8(Bytes *b, uint8_t v) { put(b, &v, 1); }
static void put_u32(Bytes *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(Bytes *b, uint64_t v) { put(b, &v, 8); }
static void put_str(Bytes *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

static void header(Bytes *b, uint32_t version, uint64_t num_tensors, uint64_t num_kv) {
    put(b, "GGUF", 4);
    put_u32(b, version);
    put_u64(b, num_tensors);
    put_u64(b, num_kv);
}

/* A key and its type; the caller appends the value. */
static void key(Bytes *b, const char *k, GgufValueType type) {
    put_str(b, k);
    put_u32(b, type);
}

static void kv_u32(Bytes *b, const char *k, uint32_t v) {
    key(b, k, GGUF_UINT32);
    put_u32(b, v);
}

static void kv_string(Bytes *b, const char *k, const char *v) {
    key(b, k, GGUF_STRING);
    put_str(b, v);
}

static void array_header(Bytes *b, const char *k, GgufValueType elem, uint64_t count) {
    key(b, k, GGUF_ARRAY);
    put_u32(b, elem);
    put_u64(b, count);
}

static void tensor_info(Bytes *b, const char *name, int ndim, const int64_t *ne, uint32_t type,
                        uint64_t offset) {
    put_str(b, name);
    put_u32(b, (uint32_t)ndim);
    for (int d = 0; d < ndim; d++) put_u64(b, (uint64_t)ne[d]);
    put_u32(b, type);
    put_u64(b, offset);
}

static void pad_to(Bytes *b, size_t alignment) {
    while (b->len % alignment) put_u8(b, 0);
}

/* n data bytes counting up from `seed`. */
static void data(Bytes *b, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++) put_u8(b, (uint8_t)(seed + i));
}

/* A minimal valid file: one key, one 8-float tensor. */
static Bytes small_file(void) {
    Bytes b = {0};
    header(&b, 3, 1, 1);
    kv_string(&b, "general.architecture", "llama");
    tensor_info(&b, "w", 1, (int64_t[]){8}, GGUF_TYPE_F32, 0);
    pad_to(&b, 32);
    data(&b, 32, 1);
    return b;
}

static char *dir;
static void setup(void) { dir = make_temp_dir(); }
static void teardown(void) {
    rm_rf(dir);
    free(dir);
}

static char *path_in(const char *name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* Opens the bytes from memory and expects an error mentioning `needle`; the
 * struct is zeroed afterwards (nothing left allocated: ASan's leak check). */
static void expect_bad(Bytes *b, const char *needle) {
    Gguf g;
    Error err = {0};
    int rc = gguf_open_memory(&g, b->p, b->len, &err);
    cr_expect(rc == -1, "accepted a file that should fail with '%s'", needle);
    if (rc == 0) gguf_close(&g);
    cr_expect(strstr(err.msg, needle), "error '%s' does not mention '%s'", err.msg, needle);
    cr_expect(g.kv == NULL && g.tensors == NULL && g.num_kv == 0 && g.map == NULL);
    free(b->p);
    *b = (Bytes){0};
}

TestSuite(gguf, .init = setup, .fini = teardown);

/* ------------------------------------------------------------ valid files */

typedef struct Expected {
    const char *name;
    int ndim;
    int64_t ne[4];
    GgufTensorType type;
    size_t nbytes;
} Expected;

static const Expected TENSORS[] = {
    {"token_embd.weight", 2, {4, 3, 1, 1}, GGUF_TYPE_F32, 48},
    {"blk.0.attn_norm.weight", 1, {5, 1, 1, 1}, GGUF_TYPE_F16, 10},
    {"blk.0.bf", 3, {3, 2, 2, 1}, GGUF_TYPE_BF16, 24},
    {"blk.0.ffn_up.weight", 2, {64, 3, 1, 1}, GGUF_TYPE_Q8_0, 2 * 3 * 34},
    {"blk.0.ffn_down.weight", 4, {256, 1, 2, 1}, GGUF_TYPE_Q4_K, 2 * 144},
    {"output.weight", 2, {512, 2, 1, 1}, GGUF_TYPE_Q6_K, 4 * 210},
};
#define NUM_TENSORS (sizeof TENSORS / sizeof TENSORS[0])
#define NUM_KV 20

/* A file with every metadata type and the tensors above; alignment 0 means
 * no general.alignment key (the default 32). */
static Bytes full_file(uint32_t alignment, size_t offsets[NUM_TENSORS]) {
    Bytes b = {0};
    header(&b, 3, NUM_TENSORS, NUM_KV - (alignment ? 0 : 1));
    key(&b, "u8", GGUF_UINT8), put_u8(&b, 200);
    key(&b, "i8", GGUF_INT8), put_u8(&b, (uint8_t)-5);
    key(&b, "u16", GGUF_UINT16), put(&b, &(uint16_t){60000}, 2);
    key(&b, "i16", GGUF_INT16), put(&b, &(int16_t){-30000}, 2);
    kv_u32(&b, "u32", 4000000000u);
    key(&b, "i32", GGUF_INT32), put(&b, &(int32_t){-7}, 4);
    key(&b, "f32", GGUF_FLOAT32), put(&b, &(float){1.5f}, 4);
    key(&b, "yes", GGUF_BOOL), put_u8(&b, 1);
    kv_string(&b, "general.name", "tiny model");
    key(&b, "u64", GGUF_UINT64), put_u64(&b, UINT64_MAX);
    key(&b, "i64", GGUF_INT64), put_u64(&b, (uint64_t)-123456789012LL);
    key(&b, "f64", GGUF_FLOAT64), put(&b, &(double){-2.25}, 8);
    array_header(&b, "tokenizer.ggml.tokens", GGUF_STRING, 3);
    put_str(&b, "hello"), put_str(&b, ""), put_str(&b, "\xe4\xb8\x96");
    array_header(&b, "ids", GGUF_INT32, 3);
    for (int32_t v = -1; v <= 1; v++) put(&b, &v, 4);
    array_header(&b, "scores", GGUF_FLOAT32, 2);
    put(&b, &(float){0.5f}, 4), put(&b, &(float){-1e30f}, 4);
    array_header(&b, "empty", GGUF_UINT8, 0);
    array_header(&b, "no_strings", GGUF_STRING, 0);
    array_header(&b, "flags", GGUF_BOOL, 2);
    put_u8(&b, 0), put_u8(&b, 1);
    key(&b, "no", GGUF_BOOL), put_u8(&b, 0);
    if (alignment) kv_u32(&b, "general.alignment", alignment);
    size_t align = alignment ? alignment : 32, at = 0;
    for (size_t i = 0; i < NUM_TENSORS; i++) {
        offsets[i] = at;
        tensor_info(&b, TENSORS[i].name, TENSORS[i].ndim, TENSORS[i].ne, TENSORS[i].type, at);
        at += (TENSORS[i].nbytes + align - 1) / align * align;
    }
    pad_to(&b, align);
    size_t data_start = b.len;
    for (size_t i = 0; i < NUM_TENSORS; i++) {
        while (b.len < data_start + offsets[i]) put_u8(&b, 0xee);
        data(&b, TENSORS[i].nbytes, (uint8_t)(i * 16));
    }
    return b;
}

static void check_full_file(const Gguf *g, size_t alignment, const size_t offsets[NUM_TENSORS]) {
    cr_expect(g->version == 3 && g->alignment == alignment);
    cr_expect(g->num_kv == NUM_KV - (alignment == 32 ? 1 : 0) && g->num_tensors == (int64_t)NUM_TENSORS);
    cr_expect(g->data_offset % alignment == 0);
    for (size_t i = 0; i < NUM_TENSORS; i++) {
        const GgufTensor *t = gguf_find_tensor(g, TENSORS[i].name);
        cr_assert(t, "no tensor %s", TENSORS[i].name);
        cr_expect(t->ndim == TENSORS[i].ndim && t->type == TENSORS[i].type && t->nbytes == TENSORS[i].nbytes,
                  "%s", TENSORS[i].name);
        for (int d = 0; d < 4; d++) cr_expect(t->ne[d] == TENSORS[i].ne[d], "%s ne[%d]", TENSORS[i].name, d);
        cr_expect((const uint8_t *)t->data == (const uint8_t *)g->map + g->data_offset + offsets[i]);
        const uint8_t *p = t->data;
        cr_expect(p[0] == (uint8_t)(i * 16) && p[t->nbytes - 1] == (uint8_t)(i * 16 + t->nbytes - 1));
    }
    cr_expect(gguf_find_tensor(g, "missing") == NULL && gguf_find_tensor(g, "output.weigh") == NULL);

    Error err = {0};
    uint32_t u32;
    int64_t i64;
    double f64;
    bool flag;
    GgufString s;
    cr_expect(gguf_get_u32(g, "u8", &u32, &err) == 0 && u32 == 200);
    cr_expect(gguf_get_u32(g, "u16", &u32, &err) == 0 && u32 == 60000);
    cr_expect(gguf_get_u32(g, "u32", &u32, &err) == 0 && u32 == 4000000000u);
    cr_expect(gguf_get_i64(g, "i8", &i64, &err) == 0 && i64 == -5);
    cr_expect(gguf_get_i64(g, "i16", &i64, &err) == 0 && i64 == -30000);
    cr_expect(gguf_get_i64(g, "i32", &i64, &err) == 0 && i64 == -7);
    cr_expect(gguf_get_i64(g, "i64", &i64, &err) == 0 && i64 == -123456789012LL);
    cr_expect(gguf_get_i64(g, "u32", &i64, &err) == 0 && i64 == 4000000000LL);
    cr_expect(gguf_get_f64(g, "f32", &f64, &err) == 0 && f64 == 1.5);
    cr_expect(gguf_get_f64(g, "f64", &f64, &err) == 0 && f64 == -2.25);
    cr_expect(gguf_get_bool(g, "yes", &flag, &err) == 0 && flag);
    cr_expect(gguf_get_bool(g, "no", &flag, &err) == 0 && !flag);
    cr_expect(gguf_get_string(g, "general.name", &s, &err) == 0 && s.len == 10 &&
              memcmp(s.p, "tiny model", 10) == 0);

    const GgufKv *kv;
    cr_assert(gguf_get_array(g, "tokenizer.ggml.tokens", GGUF_STRING, &kv, &err) == 0, "%s", err.msg);
    cr_assert(kv->arr_count == 3 && kv->arr_strings);
    cr_expect(kv->arr_strings[0].len == 5 && memcmp(kv->arr_strings[0].p, "hello", 5) == 0);
    cr_expect(kv->arr_strings[1].len == 0);
    cr_expect(kv->arr_strings[2].len == 3 && memcmp(kv->arr_strings[2].p, "\xe4\xb8\x96", 3) == 0);
    cr_assert(gguf_get_array(g, "ids", GGUF_INT32, &kv, &err) == 0, "%s", err.msg);
    cr_expect(kv->arr_count == 3 && kv->arr_strings == NULL);
    cr_expect(gguf_array_i64(kv, 0) == -1 && gguf_array_i64(kv, 2) == 1 && gguf_array_f64(kv, 0) == -1.0);
    cr_assert(gguf_get_array(g, "scores", GGUF_FLOAT32, &kv, &err) == 0, "%s", err.msg);
    cr_expect(gguf_array_f64(kv, 0) == 0.5 && gguf_array_f64(kv, 1) == (double)-1e30f);
    cr_expect(gguf_array_i64(kv, 0) == 0 && gguf_array_i64(kv, 1) == INT64_MIN);
    cr_assert(gguf_get_array(g, "flags", GGUF_BOOL, &kv, &err) == 0, "%s", err.msg);
    cr_expect(gguf_array_i64(kv, 0) == 0 && gguf_array_i64(kv, 1) == 1);
    cr_expect(gguf_get_array(g, "empty", GGUF_UINT8, &kv, &err) == 0 && kv->arr_count == 0);
    cr_expect(gguf_get_array(g, "no_strings", GGUF_STRING, &kv, &err) == 0 && kv->arr_count == 0);
}

Test(gguf, reads_every_metadata_type_and_tensor_type) {
    size_t offsets[NUM_TENSORS];
    Bytes b = full_file(0, offsets);
    Gguf g;
    Error err = {0};
    cr_assert(gguf_open_memory(&g, b.p, b.len, &err) == 0, "%s", err.msg);
    cr_expect(g.path == NULL && g.map == b.p && g.size == b.len);
    check_full_file(&g, 32, offsets);
    gguf_close(&g);

    /* The same bytes through a file: mapped, the path kept. */
    write_file(path_in("m.gguf"), b.p, b.len);
    cr_assert(gguf_open(&g, path_in("m.gguf"), &err) == 0, "%s", err.msg);
    cr_expect(g.path && strcmp(g.path, path_in("m.gguf")) == 0 && g.size == b.len);
    check_full_file(&g, 32, offsets);
    gguf_close(&g);
    cr_expect(gguf_is_file(path_in("m.gguf")));
    free(b.p);
}

Test(gguf, honours_general_alignment) {
    size_t offsets[NUM_TENSORS];
    Bytes b = full_file(64, offsets);
    Gguf g;
    Error err = {0};
    cr_assert(gguf_open_memory(&g, b.p, b.len, &err) == 0, "%s", err.msg);
    check_full_file(&g, 64, offsets);
    for (size_t i = 0; i < NUM_TENSORS; i++) cr_expect(offsets[i] % 64 == 0);
    cr_expect(offsets[2] == 128); /* 96 with the default alignment */
    gguf_close(&g);
    free(b.p);
}

Test(gguf, version_2_reads_the_same) {
    Bytes b = small_file();
    b.p[4] = 2;
    Gguf g;
    Error err = {0};
    cr_assert(gguf_open_memory(&g, b.p, b.len, &err) == 0, "%s", err.msg);
    cr_expect(g.version == 2 && g.num_tensors == 1 && g.tensors[0].nbytes == 32);
    gguf_close(&g);
    free(b.p);
}

Test(gguf, getters_name_the_key_when_they_fail) {
    size_t offsets[NUM_TENSORS];
    Bytes b = full_file(0, offsets);
    Gguf g;
    Error err = {0};
    cr_assert(gguf_open_memory(&g, b.p, b.len, &err) == 0, "%s", err.msg);
    uint32_t u32;
    int64_t i64;
    double f64;
    bool flag;
    GgufString s;
    const GgufKv *kv;
    cr_expect(gguf_get_u32(&g, "nope", &u32, &err) == -1 && strstr(err.msg, "no metadata key 'nope'"), "%s",
              err.msg);
    cr_expect(gguf_get_u32(&g, "general.name", &u32, &err) == -1 && strstr(err.msg, "'general.name'") &&
              strstr(err.msg, "string"), "%s", err.msg);
    cr_expect(gguf_get_u32(&g, "i32", &u32, &err) == -1 && strstr(err.msg, "'i32' is -7"), "%s", err.msg);
    cr_expect(gguf_get_u32(&g, "u64", &u32, &err) == -1 && strstr(err.msg, "'u64'"), "%s", err.msg);
    cr_expect(gguf_get_u32(&g, "f32", &u32, &err) == -1 && strstr(err.msg, "'f32'"), "%s", err.msg);
    cr_expect(gguf_get_u32(&g, "yes", &u32, &err) == -1 && strstr(err.msg, "'yes'"), "%s", err.msg);
    cr_expect(gguf_get_i64(&g, "u64", &i64, &err) == -1 && strstr(err.msg, "'u64'") &&
              strstr(err.msg, "int64 range"), "%s", err.msg);
    cr_expect(gguf_get_f64(&g, "i32", &f64, &err) == -1 && strstr(err.msg, "'i32' holds a value of type int32"),
              "%s", err.msg);
    cr_expect(gguf_get_bool(&g, "u8", &flag, &err) == -1 && strstr(err.msg, "'u8'"), "%s", err.msg);
    cr_expect(gguf_get_string(&g, "ids", &s, &err) == -1 && strstr(err.msg, "'ids'") &&
              strstr(err.msg, "array"), "%s", err.msg);
    cr_expect(gguf_get_array(&g, "u32", GGUF_UINT32, &kv, &err) == -1 && strstr(err.msg, "'u32'"), "%s",
              err.msg);
    cr_expect(gguf_get_array(&g, "ids", GGUF_FLOAT32, &kv, &err) == -1 &&
              strstr(err.msg, "'ids' is an array of int32, not of float32"), "%s", err.msg);
    cr_expect(gguf_get_array(&g, "missing", GGUF_STRING, &kv, &err) == -1 && strstr(err.msg, "'missing'"));
    gguf_close(&g);
    free(b.p);
}

Test(gguf, type_table) {
    const struct {
        GgufTensorType t;
        const char *name;
        int elems;
        size_t bytes;
    } cases[] = {
        {GGUF_TYPE_F32, "f32", 1, 4},         {GGUF_TYPE_F16, "f16", 1, 2},
        {GGUF_TYPE_BF16, "bf16", 1, 2},       {GGUF_TYPE_Q4_0, "q4_0", 32, 18},
        {GGUF_TYPE_Q8_0, "q8_0", 32, 34},     {GGUF_TYPE_Q4_K, "q4_K", 256, 144},
        {GGUF_TYPE_Q5_K, "q5_K", 256, 176},   {GGUF_TYPE_Q6_K, "q6_K", 256, 210},
        {GGUF_TYPE_IQ4_XS, "iq4_xs", 256, 136}, {GGUF_TYPE_I64, "i64", 1, 8},
        {GGUF_TYPE_MXFP4, "mxfp4", 32, 17},   {GGUF_TYPE_TQ1_0, "tq1_0", 256, 54},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_expect_str_eq(gguf_type_name(cases[i].t), cases[i].name);
        cr_expect(gguf_type_block_elems(cases[i].t) == cases[i].elems, "%s", cases[i].name);
        cr_expect(gguf_type_block_bytes(cases[i].t) == cases[i].bytes, "%s", cases[i].name);
    }
    GgufTensorType unknown[] = {4, 5, 31, 33, 36, 38, GGUF_TYPE_COUNT, 200, (GgufTensorType)-1};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        cr_expect_str_eq(gguf_type_name(unknown[i]), "unknown");
        cr_expect(gguf_type_block_elems(unknown[i]) == 0 && gguf_type_block_bytes(unknown[i]) == 0);
    }
}

/* -------------------------------------------------------- malformed files */

Test(gguf, refuses_bad_headers) {
    Bytes b = {0};
    put(&b, "GGUG", 4), put_u32(&b, 3), put_u64(&b, 0), put_u64(&b, 0);
    expect_bad(&b, "does not start with the 4 bytes \"GGUF\"");
    put(&b, "GG", 2);
    expect_bad(&b, "does not start with the 4 bytes \"GGUF\"");
    header(&b, 1, 0, 0);
    expect_bad(&b, "GGUF version 1 is not supported");
    header(&b, 4, 0, 0);
    expect_bad(&b, "GGUF version 4 is not supported");
    put(&b, "GGUF", 4), put_u8(&b, 0), put_u8(&b, 0), put_u8(&b, 0), put_u8(&b, 3);
    put_u64(&b, 0), put_u64(&b, 0);
    expect_bad(&b, "big-endian GGUF is not supported");
    header(&b, 3, 0, 0);
    b.len -= 1;
    expect_bad(&b, "short of the metadata count");

    /* Absurd counts fail before allocating anything for them. */
    const uint64_t absurd[] = {1ull << 40, INT64_MAX, UINT64_MAX, 1ull << 62};
    for (size_t i = 0; i < sizeof absurd / sizeof absurd[0]; i++) {
        header(&b, 3, 0, absurd[i]);
        expect_bad(&b, "the metadata count");
        header(&b, 3, absurd[i], 0);
        expect_bad(&b, "the tensor count");
    }
    /* A tensor count that the whole file could hold, but not what is left after the metadata. */
    header(&b, 3, 2, 1);
    kv_string(&b, "k", "a string long enough to hold the two tensor infos were they there");
    expect_bad(&b, "the tensor count 2 cannot fit");
}

Test(gguf, refuses_bad_metadata) {
    const uint64_t absurd[] = {1ull << 40, INT64_MAX, UINT64_MAX};
    Bytes b = {0};
    for (size_t i = 0; i < sizeof absurd / sizeof absurd[0]; i++) {
        header(&b, 3, 0, 1);
        put_u64(&b, absurd[i]), put(&b, "key and more bytes", 18);
        expect_bad(&b, "metadata entry 0 (byte 24): a metadata key at byte 24 is");

        header(&b, 3, 0, 1);
        key(&b, "general.name", GGUF_STRING);
        put_u64(&b, absurd[i]), put(&b, "abc", 3);
        expect_bad(&b, "metadata key 'general.name' (byte 24): the string value at byte 48 is");

        header(&b, 3, 0, 1);
        array_header(&b, "tokenizer.ggml.tokens", GGUF_STRING, absurd[i]);
        put_str(&b, "a");
        expect_bad(&b, "'tokenizer.ggml.tokens' (byte 24): a string array of");

        header(&b, 3, 0, 1);
        array_header(&b, "scores", GGUF_FLOAT32, absurd[i]);
        put_u32(&b, 0);
        expect_bad(&b, "'scores' (byte 24): an array of");
    }
    /* A string array whose third element runs past the end. */
    header(&b, 3, 0, 1);
    array_header(&b, "tokens", GGUF_STRING, 3);
    put_str(&b, "a"), put_str(&b, "b"), put_u64(&b, 100), put(&b, "c", 1);
    expect_bad(&b, "'tokens' (byte 24): element 2 of the string array");

    header(&b, 3, 0, 1);
    key(&b, "odd", 13), put_u32(&b, 0);
    expect_bad(&b, "metadata key 'odd' (byte 24): the value type 13 is unknown");
    header(&b, 3, 0, 1);
    key(&b, "odd", 0xffffffffu), put_u32(&b, 0);
    expect_bad(&b, "the value type 4294967295 is unknown");
    header(&b, 3, 0, 1);
    array_header(&b, "odd", 77, 1), put_u32(&b, 0);
    expect_bad(&b, "'odd' (byte 24): the array's element type 77 is unknown");
    header(&b, 3, 0, 1);
    array_header(&b, "nested", GGUF_ARRAY, 1), put_u32(&b, GGUF_UINT8), put_u64(&b, 0);
    expect_bad(&b, "'nested' (byte 24): arrays of arrays are not supported");
    header(&b, 3, 0, 1);
    key(&b, "flag", GGUF_BOOL), put_u8(&b, 2);
    expect_bad(&b, "'flag' (byte 24): the bool value is 2, not 0 or 1");
    header(&b, 3, 0, 1);
    array_header(&b, "flags", GGUF_BOOL, 3), put_u8(&b, 1), put_u8(&b, 0), put_u8(&b, 255);
    expect_bad(&b, "element 2 of the bool array is 255");
    header(&b, 3, 0, 1);
    key(&b, "wide", GGUF_UINT64), put_u32(&b, 1);
    expect_bad(&b, "'wide' (byte 24): the file ends at byte 44, 4 bytes short of the value");

    header(&b, 3, 0, 3);
    kv_u32(&b, "a", 1), kv_string(&b, "b", "x"), kv_u32(&b, "a", 2);
    expect_bad(&b, "metadata key 'a' appears more than once");
    /* Keys are bytes: one with a NUL and a control character is named escaped. */
    header(&b, 3, 0, 2);
    put_u64(&b, 3), put(&b, "a\0\n", 3), put_u32(&b, GGUF_UINT8), put_u8(&b, 0);
    put_u64(&b, 3), put(&b, "a\0\n", 3), put_u32(&b, GGUF_UINT8), put_u8(&b, 0);
    expect_bad(&b, "metadata key 'a\\x00\\x0a' appears more than once");

    header(&b, 3, 0, 1);
    kv_u32(&b, "general.alignment", 0);
    expect_bad(&b, "'general.alignment' is 0, not a nonzero power of two");
    header(&b, 3, 0, 1);
    kv_u32(&b, "general.alignment", 3);
    expect_bad(&b, "'general.alignment' is 3, not a nonzero power of two");
    header(&b, 3, 0, 1);
    kv_string(&b, "general.alignment", "32");
    expect_bad(&b, "'general.alignment' holds a value of type string, not uint32");
}

/* A file of one key and the given tensor infos + `data_bytes` bytes of data. */
typedef struct Info {
    const char *name;
    int ndim;
    int64_t ne[5];
    uint32_t type;
    uint64_t offset;
} Info;

static Bytes tensors_file(const Info *infos, int n, size_t data_bytes) {
    Bytes b = {0};
    header(&b, 3, (uint64_t)n, 1);
    kv_string(&b, "general.architecture", "llama");
    for (int i = 0; i < n; i++)
        tensor_info(&b, infos[i].name, infos[i].ndim, infos[i].ne, infos[i].type, infos[i].offset);
    pad_to(&b, 32);
    data(&b, data_bytes, 0);
    return b;
}

static void expect_bad_tensors(const Info *infos, int n, size_t data_bytes, const char *needle) {
    Bytes b = tensors_file(infos, n, data_bytes);
    expect_bad(&b, needle);
}

Test(gguf, refuses_bad_tensors) {
    /* Sanity: the builder's file is fine as it stands. */
    Bytes ok = tensors_file((Info[]){{"a", 2, {32, 2}, GGUF_TYPE_Q8_0, 0}, {"b", 1, {8}, GGUF_TYPE_F32, 96}},
                            2, 128);
    Gguf g;
    Error err = {0};
    cr_assert(gguf_open_memory(&g, ok.p, ok.len, &err) == 0, "%s", err.msg);
    gguf_close(&g);
    free(ok.p);

    expect_bad_tensors((Info[]){{"w", 1, {8}, 4, 0}}, 1, 32,
                       "tensor 'w' (byte 69): the tensor type 4 is unknown");
    expect_bad_tensors((Info[]){{"w", 1, {8}, 31, 0}}, 1, 32, "the tensor type 31 is unknown");
    expect_bad_tensors((Info[]){{"w", 1, {8}, 200, 0}}, 1, 32, "the tensor type 200 is unknown");
    expect_bad_tensors((Info[]){{"w", 1, {8}, GGUF_TYPE_COUNT, 0}}, 1, 32, "the tensor type 40 is unknown");
    expect_bad_tensors((Info[]){{"w", 0, {8}, GGUF_TYPE_F32, 0}}, 1, 32, "tensor 'w' (byte 69): 0 dimensions");
    expect_bad_tensors((Info[]){{"w", 5, {8, 1, 1, 1, 1}, GGUF_TYPE_F32, 0}}, 1, 32, "5 dimensions (1 to 4");
    expect_bad_tensors((Info[]){{"w", 2, {8, 0}, GGUF_TYPE_F32, 0}}, 1, 32,
                       "tensor 'w' (byte 69): dimension 1 is 0");
    expect_bad_tensors((Info[]){{"w", 2, {8, -3}, GGUF_TYPE_F32, 0}}, 1, 32, "dimension 1 is -3, not positive");
    expect_bad_tensors((Info[]){{"w", 2, {48, 2}, GGUF_TYPE_Q8_0, 0}}, 1, 128,
                       "its 48 columns are not a multiple of q8_0's block of 32 values");
    expect_bad_tensors((Info[]){{"w", 1, {300}, GGUF_TYPE_Q4_K, 0}}, 1, 512,
                       "not a multiple of q4_K's block of 256");
    expect_bad_tensors((Info[]){{"w", 3, {1ll << 30, 1ll << 30, 1ll << 4}, GGUF_TYPE_F32, 0}}, 1, 32,
                       "is too large (its element or byte count overflows 64 bits)");
    expect_bad_tensors((Info[]){{"w", 1, {1ll << 62}, GGUF_TYPE_I64, 0}}, 1, 32,
                       "is too large (its element or byte count overflows 64 bits)");
    expect_bad_tensors((Info[]){{"w", 4, {INT64_MAX, 1, 1, 2}, GGUF_TYPE_I8, 0}}, 1, 32,
                       "is too large (its element or byte count overflows 64 bits)");
    expect_bad_tensors((Info[]){{"w", 1, {8}, GGUF_TYPE_F32, 16}}, 1, 64,
                       "tensor 'w': its data offset 16 is not a multiple of the alignment 32");
    expect_bad_tensors((Info[]){{"w", 1, {8}, GGUF_TYPE_F32, 32}}, 1, 32,
                       "tensor 'w': its 32 bytes at data offset 32");
    expect_bad_tensors((Info[]){{"w", 1, {9}, GGUF_TYPE_F32, 0}}, 1, 32, "end past the end of the file");
    expect_bad_tensors((Info[]){{"w", 1, {8}, GGUF_TYPE_F32, UINT64_MAX - 31}}, 1, 32,
                       "end past the end of the file");
    expect_bad_tensors((Info[]){{"a", 1, {16}, GGUF_TYPE_F32, 0}, {"b", 1, {8}, GGUF_TYPE_F32, 32}}, 2, 128,
                       "tensors 'a' and 'b' overlap in the data section");
    expect_bad_tensors((Info[]){{"b", 1, {8}, GGUF_TYPE_F32, 64}, {"a", 1, {24}, GGUF_TYPE_F32, 0}}, 2, 128,
                       "tensors 'a' and 'b' overlap");
    expect_bad_tensors((Info[]){{"w", 1, {8}, GGUF_TYPE_F32, 0}, {"x", 1, {8}, GGUF_TYPE_F32, 32},
                                {"w", 1, {8}, GGUF_TYPE_F32, 64}},
                       3, 96, "tensor name 'w' appears more than once");

    /* An absurd name length, and the data section missing entirely. */
    Bytes b = {0};
    header(&b, 3, 1, 0);
    put_u64(&b, 1ull << 40), put(&b, "w", 1), put_u32(&b, 1), put_u64(&b, 8), put_u32(&b, 0), put_u64(&b, 0);
    put(&b, "0123456789", 10);
    expect_bad(&b, "tensor info at byte 24: a tensor name at byte 24 is 1099511627776 bytes long");
    header(&b, 3, 1, 0);
    tensor_info(&b, "w", 1, (int64_t[]){8}, GGUF_TYPE_F32, 0);
    expect_bad(&b, "the tensor data section would start at byte 64, past the end of the file (57 bytes)");
    header(&b, 3, 1, 1);
    kv_u32(&b, "general.alignment", 1u << 31);
    tensor_info(&b, "w", 1, (int64_t[]){8}, GGUF_TYPE_F32, 0);
    data(&b, 64, 0);
    expect_bad(&b, "would start at byte 2147483648, past the end");
}

Test(gguf, every_truncation_is_an_error) {
    size_t offsets[NUM_TENSORS];
    Bytes full = full_file(64, offsets);
    Bytes small = small_file();
    const Bytes *files[] = {&small, &full};
    for (int f = 0; f < 2; f++) {
        for (size_t n = 0; n < files[f]->len; n++) {
            /* A copy of exactly n bytes, so that ASan sees any read past it. */
            uint8_t *cut = malloc(n ? n : 1);
            cr_assert(cut);
            memcpy(cut, files[f]->p, n);
            Gguf g;
            Error err = {0};
            cr_expect(gguf_open_memory(&g, cut, n, &err) == -1, "file %d accepted %zu of %zu bytes", f, n,
                      files[f]->len);
            cr_expect(err.msg[0] != '\0', "no message at %zu bytes", n);
            cr_expect(g.kv == NULL && g.tensors == NULL);
            free(cut);
        }
    }
    Gguf g;
    Error err = {0};
    cr_expect(gguf_open_memory(&g, NULL, 0, &err) == -1 && strstr(err.msg, "GGUF"));
    free(full.p);
    free(small.p);
}

Test(gguf, files_that_are_not_there_or_not_gguf) {
    Gguf g;
    Error err = {0};
    cr_expect(gguf_open(&g, path_in("missing.gguf"), &err) == -1);
    cr_expect(strstr(err.msg, "missing.gguf") && strstr(err.msg, "No such file"), "%s", err.msg);
    cr_expect(g.path == NULL && g.map == NULL);
    cr_expect(gguf_open(&g, dir, &err) == -1 && strstr(err.msg, "not a regular file"), "%s", err.msg);
    write_file(path_in("empty.gguf"), "", 0);
    cr_expect(gguf_open(&g, path_in("empty.gguf"), &err) == -1 && strstr(err.msg, "is empty"), "%s", err.msg);
    write_file(path_in("text.gguf"), "GGUF but then nothing useful", 28);
    cr_expect(gguf_open(&g, path_in("text.gguf"), &err) == -1, "%s", err.msg);
    cr_expect(strstr(err.msg, path_in("text.gguf")) && strstr(err.msg, "version"), "%s", err.msg);
    cr_expect(g.path == NULL && g.map == NULL && g.kv == NULL);

    cr_expect(!gguf_is_file(path_in("missing.gguf")));
    cr_expect(!gguf_is_file(dir));
    cr_expect(!gguf_is_file(path_in("empty.gguf")));
    cr_expect(gguf_is_file(path_in("text.gguf"))); /* the magic is all it looks at */
    write_file(path_in("gguf.txt"), "GGU", 3);
    cr_expect(!gguf_is_file(path_in("gguf.txt")));

    /* Closing twice, or a struct never opened, is harmless. */
    Gguf zero = {0};
    gguf_close(&zero);
    gguf_close(&g);
    gguf_close(NULL);
}

/* Seeds for build-fuzz/fuzz_gguf: with GGUF_SEED_DIR set, the valid files
 * above are written there (otherwise this does nothing). */
Test(gguf, writes_fuzz_seeds_on_request) {
    const char *seeds = getenv("GGUF_SEED_DIR");
    if (!seeds) return;
    size_t offsets[NUM_TENSORS];
    Bytes files[] = {small_file(), full_file(0, offsets), full_file(64, offsets)};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/seed%zu.gguf", seeds, i);
        write_file(path, files[i].p, files[i].len);
        free(files[i].p);
    }
}
