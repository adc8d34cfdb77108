/*
 * model_setup.c - checkpoint + runner start-up with logging (see model_setup.h).
 */
#include "model_setup.h"

#include <string.h>

#include "../engine/log.h"

int loaded_model_open(LoadedModel *m, const char *model_dir, const RunnerOptions *opts,
                      Error *err) {
    memset(m, 0, sizeof *m);
    double t0 = now_seconds();
    if (model_weights_load(&m->weights, model_dir, err)) return -1;
    const ModelConfig *c = &m->weights.config;
    log_info("model %s: Qwen3, %d layers, hidden %d, %d/%d heads x %d, vocab %d, %.2f GB of "
             "weights (%s)",
             model_dir, c->num_layers, c->hidden_size, c->num_heads, c->num_kv_heads, c->head_dim,
             c->vocab_size, model_weights_bytes(&m->weights) / 1e9,
             c->torch_dtype[0] ? c->torch_dtype : "dtype not stated");
    char note[640];
    m->runner = runner_create(&m->weights, opts, note, sizeof note, err);
    if (!m->runner) {
        model_weights_free(&m->weights);
        return -1;
    }
    if (note[0]) log_info("device auto: %s", note);
    m->load_seconds = now_seconds() - t0;
    const Runner *r = m->runner;
    log_info("device %s; KV cache %d blocks x %d tokens = %ld tokens (%.2f GB); max_model_len %d; "
             "ready in %.2f s",
             r->description, r->num_kv_blocks, r->options.block_size,
             (long)r->num_kv_blocks * r->options.block_size, r->kv_cache_bytes / 1e9,
             r->options.max_model_len, m->load_seconds);
    return 0;
}

void loaded_model_close(LoadedModel *m) {
    runner_destroy(m->runner);
    model_weights_free(&m->weights);
    memset(m, 0, sizeof *m);
}
