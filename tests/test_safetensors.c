/*
 * test_safetensors.c - checkpoint loading: every malformed file is a clear
 * error (never a crash or an out-of-bounds read), sharded checkpoints, and
 * bf16/f16/f32 checkpoints of the same model computing the same thing.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "base/half.h"
#include "model/safetensors.h"

static char *dir;
static void setup(void) { dir = make_temp_dir(); }
static void teardown(void) {
    rm_rf(dir);
    free(dir);
}

/* Paths inside the test's folder; four rotating buffers so that two may be
 * used in one call (rename). */
static char *path_in(const char *name) {
    static char paths[4][512];
    static int next;
    char *path = paths[next++ % 4];
    snprintf(path, 512, "%s/%s", dir, name);
    return path;
}

/* Opens a file made of `header` + `size` data bytes and expects an error
 * containing `needle`. */
static void expect_bad(const char *header, size_t size, const char *needle) {
    unsigned char *data = calloc(1, size ? size : 1);
    write_raw_safetensors(path_in("bad.safetensors"), header, data, size);
    free(data);
    Safetensors st;
    Error err = {0};
    cr_expect(safetensors_open_file(&st, path_in("bad.safetensors"), &err) == -1,
              "accepted header %s", header);
    cr_expect(strstr(err.msg, needle), "error '%s' does not mention '%s'", err.msg, needle);
}

TestSuite(safetensors, .init = setup, .fini = teardown);

Test(safetensors, reads_a_valid_file) {
    uint16_t bf[6] = {0x3f80, 0x4000, 0x4040, 0xbf80, 0, 0x3f00};
    float f32[2] = {1.5f, -2.25f};
    TestTensor t[] = {{"a", "BF16", 2, {2, 3}, bf, sizeof bf}, {"b", "F32", 1, {2}, f32, sizeof f32}};
    write_safetensors(path_in("m.safetensors"), t, 2);
    Safetensors st;
    Error err = {0};
    cr_assert(safetensors_open_file(&st, path_in("m.safetensors"), &err) == 0, "%s", err.msg);
    const TensorInfo *a = safetensors_find(&st, "a"), *b = safetensors_find(&st, "b");
    cr_assert(a && b && !safetensors_find(&st, "c"));
    cr_expect(a->dtype == DTYPE_BF16 && a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3);
    cr_expect(memcmp(a->data, bf, sizeof bf) == 0);
    cr_expect(b->dtype == DTYPE_F32 && memcmp(b->data, f32, sizeof f32) == 0);
    safetensors_close(&st);
}

Test(safetensors, truncated_and_lying_files) {
    write_file(path_in("tiny.safetensors"), "abc", 3);
    Safetensors st;
    Error err = {0};
    cr_expect(safetensors_open_file(&st, path_in("tiny.safetensors"), &err) == -1);
    cr_expect(strstr(err.msg, "truncated"), "%s", err.msg);

    /* Header length pointing past the end of the file. */
    unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, '{', '}'};
    write_file(path_in("len.safetensors"), huge, sizeof huge);
    cr_expect(safetensors_open_file(&st, path_in("len.safetensors"), &err) == -1);
    cr_expect(strstr(err.msg, "exceeds the file size"), "%s", err.msg);

    /* A real file cut short: its last tensor's bytes are gone. */
    float v[64] = {0};
    TestTensor t = {"w", "F32", 1, {64}, v, sizeof v};
    write_safetensors(path_in("cut.safetensors"), &t, 1);
    char *full = read_text(path_in("cut.safetensors"));
    FILE *f = fopen(path_in("cut.safetensors"), "r+b");
    cr_assert(f && fseek(f, 0, SEEK_END) == 0);
    long size = ftell(f);
    fclose(f);
    write_file(path_in("cut.safetensors"), full, (size_t)size - 100);
    free(full);
    cr_expect(safetensors_open_file(&st, path_in("cut.safetensors"), &err) == -1);
    cr_expect(strstr(err.msg, "past the end"), "%s", err.msg);
}

Test(safetensors, malformed_headers) {
    expect_bad("not json", 0, "not valid JSON");
    expect_bad("[1,2]", 0, "not a JSON object");
    expect_bad("{\"a\": 5}", 0, "not a JSON object");
    expect_bad("{\"a\": {\"dtype\": \"Q4\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1,
               "unknown dtype");
    expect_bad("{\"a\": {\"dtype\": 7, \"shape\": [1], \"data_offsets\": [0, 2]}}", 2, "dtype");
    expect_bad("{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4,
               "non-negative");
    expect_bad("{\"a\": {\"dtype\": \"F32\", \"shape\": \"2\", \"data_offsets\": [0, 8]}}", 8, "shape");
    expect_bad("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0]}}", 8,
               "data_offsets");
    expect_bad("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 0]}}", 8, "before");
    expect_bad("{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8,
               "need 12");
    expect_bad("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 4,
               "past the end");
    expect_bad("{\"a\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4294967296], "
               "\"data_offsets\": [0, 8]}}", 8, "overflows");
    expect_bad("{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}",
               4, "dimensions");
    expect_bad("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
               "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 12, "overlap");
    expect_bad("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
               "\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8, "duplicate");
}

Test(safetensors, metadata_and_other_dtypes_are_fine) {
    expect_bad("{\"__metadata__\": {\"format\": \"pt\"}, \"a\": {\"dtype\": \"I64\", \"shape\": [1], "
               "\"data_offsets\": [0, 8]}, \"b\": {\"dtype\": \"Q4\", \"shape\": [0], \"data_offsets\": [8, 8]}}",
               8, "unknown dtype");
    write_raw_safetensors(path_in("ok.safetensors"),
                          "{\"__metadata__\": {\"format\": \"pt\"}, \"a\": {\"dtype\": \"I64\", "
                          "\"shape\": [1], \"data_offsets\": [0, 8]}}", "\0\0\0\0\0\0\0\0", 8);
    Safetensors st;
    Error err = {0};
    cr_assert(safetensors_open_file(&st, path_in("ok.safetensors"), &err) == 0, "%s", err.msg);
    cr_expect(safetensors_find(&st, "a")->dtype == DTYPE_OTHER);
    cr_expect(st.num_tensors == 1);
    safetensors_close(&st);
}

/* ---- whole checkpoints built from the tiny model ------------------------ */

typedef enum { AS_BF16, AS_F32, AS_F16 } Convert;

/* Rewrites the tiny model's tensors into dir, optionally converted, split
 * into `shards` files with an index (shards > 1), optionally skipping or
 * reshaping one tensor. */
static void write_tiny_copy(Convert conv, int shards, const char *skip, const char *reshape) {
    Safetensors src;
    Error err = {0};
    cr_assert(safetensors_open_file(&src, TINY_MODEL "/model.safetensors", &err) == 0, "%s", err.msg);
    copy_tiny_config(dir);
    TestTensor *t = calloc((size_t)src.num_tensors, sizeof *t);
    void **bufs = calloc((size_t)src.num_tensors, sizeof *bufs);
    int n = 0;
    for (int i = 0; i < src.num_tensors; i++) {
        const TensorInfo *s = &src.tensors[i];
        if (skip && strcmp(s->name, skip) == 0) continue;
        size_t count = s->nbytes / 2;
        TestTensor *d = &t[n];
        d->name = s->name;
        d->ndim = s->ndim;
        for (int k = 0; k < s->ndim; k++) d->shape[k] = s->shape[k];
        if (reshape && strcmp(s->name, reshape) == 0) d->shape[0] -= 1, count -= count / s->shape[0];
        const uint16_t *h = s->data;
        if (conv == AS_BF16) {
            d->dtype = "BF16";
            d->data = s->data;
            d->nbytes = count * 2;
        } else if (conv == AS_F32) {
            float *f = bufs[n] = malloc(count * 4);
            for (size_t k = 0; k < count; k++) f[k] = bf16_to_f32(h[k]);
            d->dtype = "F32";
            d->data = f;
            d->nbytes = count * 4;
        } else { /* f16 of a bf16 value: exact for the tiny model's small magnitudes */
            uint16_t *o = bufs[n] = malloc(count * 2);
            for (size_t k = 0; k < count; k++) {
                float x = bf16_to_f32(h[k]);
                _Float16 y = (_Float16)x;
                memcpy(&o[k], &y, 2);
            }
            d->dtype = "F16";
            d->data = o;
            d->nbytes = count * 2;
        }
        n++;
    }
    if (shards == 1) {
        write_safetensors(path_in("model.safetensors"), t, n);
    } else {
        json_t *map = json_object();
        int per = (n + shards - 1) / shards;
        for (int s = 0; s < shards; s++) {
            char name[64];
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
            int lo = s * per, hi = lo + per < n ? lo + per : n;
            write_safetensors(path_in(name), t + lo, hi - lo);
            for (int i = lo; i < hi; i++) json_object_set_new(map, t[i].name, json_string(name));
        }
        json_t *index = json_pack("{s:{s:i}, s:o}", "metadata", "total_size", 0, "weight_map", map);
        cr_assert(json_dump_file(index, path_in("model.safetensors.index.json"), 0) == 0);
        json_decref(index);
    }
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(t);
    safetensors_close(&src);
}

static void expect_same_as_bf16(double tol) {
    float *want = malloc(sizeof(float) * 151936), *got = malloc(sizeof(float) * 151936);
    static const int32_t ids[7] = {9707, 11, 1879, 151643, 100000, 151935, 785};
    int32_t t1, t2;
    prompt_last_logits(TINY_MODEL, ids, 7, want, &t1);
    prompt_last_logits(dir, ids, 7, got, &t2);
    double d = 0;
    for (int i = 0; i < 151936; i++) d = fmax(d, fabs(want[i] - got[i]));
    cr_expect(d <= tol, "logits differ by %g", d);
    cr_expect_eq(t1, t2);
    free(want);
    free(got);
}

Test(safetensors, f32_checkpoint_matches_bf16) {
    write_tiny_copy(AS_F32, 1, NULL, NULL);
    expect_same_as_bf16(1e-4);
}

Test(safetensors, f16_checkpoint_matches_bf16) {
    write_tiny_copy(AS_F16, 1, NULL, NULL);
    expect_same_as_bf16(2e-2); /* f16 rounds the largest embeddings slightly */
}

Test(safetensors, sharded_checkpoint_matches_single_file) {
    write_tiny_copy(AS_BF16, 3, NULL, NULL);
    expect_same_as_bf16(0);
}

Test(safetensors, missing_tensor_is_named) {
    write_tiny_copy(AS_BF16, 1, "model.layers.2.mlp.up_proj.weight", NULL);
    expect_model_error_in(dir, "missing tensor 'model.layers.2.mlp.up_proj.weight'");
}

Test(safetensors, wrong_shape_is_named) {
    write_tiny_copy(AS_BF16, 1, NULL, "model.layers.1.self_attn.k_proj.weight");
    expect_model_error_in(dir, "'model.layers.1.self_attn.k_proj.weight' has shape [255, 32] but "
                               "config.json implies [256, 32]");
}

Test(safetensors, non_float_weight_is_refused) {
    write_tiny_copy(AS_BF16, 1, "model.norm.weight", NULL);
    /* Append model.norm.weight back as I16 (same byte size as BF16). */
    int16_t v[32] = {0};
    TestTensor t = {"model.norm.weight", "I16", 1, {32}, v, sizeof v};
    write_safetensors(path_in("extra.safetensors"), &t, 1);
    Safetensors st;
    Error err = {0};
    cr_assert(safetensors_open_file(&st, path_in("extra.safetensors"), &err) == 0);
    safetensors_close(&st);
    rename(path_in("model.safetensors"), path_in("main.safetensors"));
    json_t *map = json_object();
    cr_assert(safetensors_open_file(&st, path_in("main.safetensors"), &err) == 0);
    for (int i = 0; i < st.num_tensors; i++)
        json_object_set_new(map, st.tensors[i].name, json_string("main.safetensors"));
    safetensors_close(&st);
    json_object_set_new(map, "model.norm.weight", json_string("extra.safetensors"));
    json_t *index = json_pack("{s:o}", "weight_map", map);
    cr_assert(json_dump_file(index, path_in("model.safetensors.index.json"), 0) == 0);
    json_decref(index);
    expect_model_error_in(dir, "dtype I16");
}

Test(safetensors, bad_shard_index) {
    write_tiny_copy(AS_BF16, 2, NULL, NULL);
    char *text = read_text(path_in("model.safetensors.index.json"));
    /* A tensor claimed by the wrong shard. */
    json_t *index = json_loads(text, 0, NULL);
    json_t *map = json_object_get(index, "weight_map");
    json_object_set_new(map, "model.embed_tokens.weight", json_string("model-00002-of-00002.safetensors"));
    cr_assert(json_dump_file(index, path_in("model.safetensors.index.json"), 0) == 0);
    expect_model_error_in(dir, "is not in shard");
    /* A shard name that leaves the folder. */
    json_object_set_new(map, "model.embed_tokens.weight", json_string("../model.safetensors"));
    cr_assert(json_dump_file(index, path_in("model.safetensors.index.json"), 0) == 0);
    expect_model_error_in(dir, "invalid shard file name");
    /* A shard that does not exist. */
    json_object_set_new(map, "model.embed_tokens.weight", json_string("model-00009-of-00009.safetensors"));
    cr_assert(json_dump_file(index, path_in("model.safetensors.index.json"), 0) == 0);
    expect_model_error_in(dir, "cannot open");
    json_decref(index);
    write_text(path_in("model.safetensors.index.json"), "{\"weight_map\": 3}");
    expect_model_error_in(dir, "weight_map");
    free(text);
}

Test(safetensors, no_checkpoint_in_folder) {
    copy_tiny_config(dir);
    expect_model_error_in(dir, "no model.safetensors");
}
