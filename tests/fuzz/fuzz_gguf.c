/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader (model/gguf.c, make
 * fuzz): a model file is untrusted bytes.
 *
 * The input is the file. gguf_open_memory must end with an error or with a
 * Gguf whose every promise holds: each key, string value, array (every
 * string element included) and tensor's bytes lie inside the input, which
 * is checked by reading their first and last bytes (ASan stops a lie) and
 * by comparing pointers with the input's bounds; a failure leaves nothing
 * allocated (the leak check), and names are unique. Seeds: GGUF_SEED_DIR=CORPUS
 * build/test_nanovllm --filter 'gguf/writes*' writes three valid files.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink;

/* Reads the first and last byte of p..p+n and checks they lie in data..data+size. */
static void touch(const uint8_t *data, size_t size, const void *p, uint64_t n) {
    if (n == 0) return;
    const uint8_t *b = p;
    if (b < data || n > size || (size_t)(b - data) > size - n) abort();
    sink ^= b[0];
    sink ^= b[n - 1];
}

static void walk_kv(const uint8_t *data, size_t size, const GgufKv *kv) {
    static const uint8_t scalar_size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    touch(data, size, kv->key.p, kv->key.len);
    if (kv->type == GGUF_STRING) {
        touch(data, size, kv->str.p, kv->str.len);
    } else if (kv->type == GGUF_ARRAY) {
        if (kv->arr_type == GGUF_STRING) {
            if (!kv->arr_strings) abort();
            for (uint64_t i = 0; i < kv->arr_count; i++)
                touch(data, size, kv->arr_strings[i].p, kv->arr_strings[i].len);
        } else {
            if ((unsigned)kv->arr_type >= sizeof scalar_size || !scalar_size[kv->arr_type]) abort();
            touch(data, size, kv->arr_data, kv->arr_count * scalar_size[kv->arr_type]);
            for (uint64_t i = 0; i < kv->arr_count && i < 64; i++)
                sink ^= (uint8_t)(gguf_array_i64(kv, i) ^ (int64_t)(gguf_array_f64(kv, i) != 0));
        }
    } else {
        if ((unsigned)kv->type >= sizeof scalar_size || !scalar_size[kv->type]) abort();
        touch(data, size, kv->value, scalar_size[kv->type]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Gguf g;
    Error err = {0};
    if (gguf_open_memory(&g, data, size, &err) != 0) {
        if (err.msg[0] == '\0' || g.kv || g.tensors) abort();
        return 0;
    }
    for (int64_t i = 0; i < g.num_kv; i++) walk_kv(data, size, &g.kv[i]);
    for (int64_t i = 0; i < g.num_tensors; i++) {
        const GgufTensor *t = &g.tensors[i];
        if (t->ndim < 1 || t->ndim > GGUF_MAX_DIMS || t->nbytes == 0) abort();
        if (gguf_type_block_bytes(t->type) == 0) abort();
        touch(data, size, t->name.p, t->name.len);
        touch(data, size, t->data, t->nbytes);
        if (((const uint8_t *)t->data - data - g.data_offset) % g.alignment != 0) abort();
        /* Names are unique, so a name without a NUL finds its own tensor. */
        char name[64];
        if (i < 64 && t->name.len < sizeof name && !memchr(t->name.p, 0, t->name.len)) {
            memcpy(name, t->name.p, t->name.len);
            name[t->name.len] = '\0';
            if (gguf_find_tensor(&g, name) != t) abort();
        }
    }
    uint32_t u32;
    int64_t i64;
    double f64;
    bool flag;
    GgufString s;
    const GgufKv *kv;
    gguf_get_u32(&g, "general.alignment", &u32, &err);
    gguf_get_i64(&g, "llama.context_length", &i64, &err);
    gguf_get_f64(&g, "llama.rope.freq_base", &f64, &err);
    gguf_get_bool(&g, "tokenizer.ggml.add_bos_token", &flag, &err);
    gguf_get_string(&g, "general.architecture", &s, &err);
    gguf_get_array(&g, "tokenizer.ggml.tokens", GGUF_STRING, &kv, &err);
    gguf_close(&g);
    return 0;
}
