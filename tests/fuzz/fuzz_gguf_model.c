/*
 * fuzz_gguf_model.c - libFuzzer target for what is read from a GGUF file's
 * metadata above the container (make fuzz): the model config of the qwen3,
 * qwen3moe, qwen35 and qwen35moe architectures (model/gguf_model.c,
 * model_config.c), its embedding pooling (model_pooling.c) and the tokenizer
 * built from the tokenizer.ggml.* tables (engine/model_tokenizer.c,
 * text/tokenizer/tokenizer_vocab.c).
 *
 * The input is the file. Each step must end in an error with a message or
 * in a result that holds: a config whose counts are within the bounds the
 * rest of the program sizes buffers by, and a tokenizer that encodes and
 * decodes a text with special tokens in it, every id inside its vocabulary
 * (ASan and UBSan stop the rest). Seeds: tests/fuzz/make_gguf_model_seeds.py.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model_tokenizer.h"
#include "model/gguf.h"
#include "model/gguf_model.h"
#include "model/model_pooling.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_config(const ModelConfig *c) {
    if (c->num_layers < 1 || c->num_layers > MODEL_MAX_LAYERS || c->hidden_size < 1 || c->vocab_size < 1 ||
        c->num_heads < 1 || c->num_kv_heads < 1 || c->num_heads % c->num_kv_heads || c->head_dim < 1)
        abort();
    if (c->hybrid) {
        if (c->num_linear_layers < 0 || c->num_linear_layers >= c->num_layers) abort();
        if (c->linear_num_v_heads % c->linear_num_k_heads || c->rotary_dim < 2 || c->rotary_dim > c->head_dim)
            abort();
    }
    if (c->num_experts && (c->num_experts_per_tok < 1 || c->num_experts_per_tok > c->num_experts)) abort();
}

static void check_tokenizer(Tokenizer *t) {
    static const char text[] = "Hello <|im_start|>user\nw\xc3\xb6rld 123<|im_end|> \xf0\x9f\x99\x82";
    int32_t *ids = NULL;
    size_t n = 0;
    Error err = {0};
    if (tokenizer_encode(t, text, sizeof text - 1, &ids, &n, &err) == 0 &&
        tokenizer_add_special_tokens(t, &ids, &n, &err) == 0) {
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= tokenizer_model_vocab_size(t)) abort();
        char *out = NULL;
        size_t len = 0;
        if (tokenizer_decode(t, ids, n, false, &out, &len, &err) == 0 && strlen(out) > len) abort();
        free(out);
    } else if (err.msg[0] == '\0') {
        abort();
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Gguf g;
    Error err = {0};
    if (gguf_open_memory(&g, data, size, &err) != 0) return 0;
    ModelConfig cfg;
    int vocab = 0;
    if (model_config_from_gguf(&cfg, &g, &err) == 0) {
        check_config(&cfg);
        vocab = cfg.vocab_size;
    } else if (err.msg[0] == '\0') {
        abort();
    }
    ModelPooling pooling;
    err = (Error){0};
    if (model_pooling_from_gguf(&pooling, &g, &err) != 0 && err.msg[0] == '\0') abort();
    err = (Error){0};
    Tokenizer *t = model_tokenizer_from_gguf(&g, vocab, &err);
    if (t) {
        check_tokenizer(t);
        tokenizer_free(t);
    } else if (err.msg[0] == '\0') {
        abort();
    }
    gguf_close(&g);
    return 0;
}
