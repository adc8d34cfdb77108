/*
 * backend_setup.c - checkpoint + backend choice + runner start-up, with
 * logging (see backend_setup.h).
 */
#include "backend_setup.h"

#include <stdio.h>
#include <string.h>

#include "cpu/cpu_runner.h"
#include "cpu/null_runner.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_runner.h"
#include "base/log.h"

static void write_note(char *note, size_t size, const char *text) {
    if (note && size) snprintf(note, size, "%s", text);
}

Runner *runner_create(const ModelWeights *model, const RunnerOptions *opts, char *note,
                      size_t note_size, Error *err) {
    write_note(note, note_size, "");
    const char *device = opts->device ? opts->device : "auto";
    bool want_cuda = strcmp(device, "cuda") == 0, want_auto = strcmp(device, "auto") == 0;
    if (strcmp(device, "null") == 0) return null_runner_create(model, opts, err);
    if (!want_cuda && !want_auto && strcmp(device, "cpu") != 0) {
        error_set(err, "unknown device '%s' (expected auto, cuda or cpu)", device);
        return NULL;
    }
    if (want_cuda || want_auto) {
        char why[256];
        int gpus = cuda_device_probe(why, sizeof why);
        if (gpus > 0) {
            Error cuda_err = {0};
            Runner *r = cuda_runner_create(model, opts, &cuda_err);
            if (r) return r;
            if (want_cuda) return error_set(err, "--device cuda: %s", cuda_err.msg), NULL;
            /* auto: a GPU that cannot run the model (too small, no cuBLAS)
             * still leaves the CPU, and the log says why */
            snprintf(why, sizeof why, "the GPU cannot run it (%.200s)", cuda_err.msg);
        } else if (want_cuda) {
            error_set(err, "--device cuda: %s", why);
            return NULL;
        }
        char text[400];
        snprintf(text, sizeof text, "%s; using the CPU", why);
        write_note(note, note_size, text);
    }
    return cpu_runner_create(model, opts, err);
}

/* The checkpoint, or (--load-format dummy) random weights of its config's shapes. */
static int load_weights(ModelWeights *w, const char *model_dir, const RunnerOptions *opts,
                        Error *err) {
    if (!opts->load_format || strcmp(opts->load_format, "dummy") != 0)
        return model_weights_load(w, model_dir, err);
    ModelConfig cfg;
    return model_config_load(&cfg, model_dir, err) ? -1
                                                   : model_weights_load_dummy(w, &cfg, 0, err);
}

/* One line: the architecture, its shape, and what a token costs. */
static void log_model(const ModelWeights *w, const char *model_dir) {
    const ModelConfig *c = &w->config;
    ModelSize size = model_weights_size(w);
    char arch[256] = "Qwen3";
    size_t used = 0;
    if (c->hybrid)
        used = (size_t)snprintf(arch, sizeof arch, "Qwen3.5 (%d of %d layers Gated DeltaNet, %d full "
                                "attention; rotary dims %d of %d)", c->num_linear_layers, c->num_layers,
                                c->num_layers - c->num_linear_layers, model_config_rotary_dim(c), c->head_dim);
    if (c->num_experts > 0) {
        int sparse = 0;
        for (int l = 0; l < c->num_layers; l++) sparse += model_config_layer_is_sparse(c, l);
        snprintf(arch + used, sizeof arch - used, "%s MoE (%d of %d layers sparse: %d experts, %d per "
                 "token%s)", c->hybrid ? "," : "Qwen3", sparse, c->num_layers, c->num_experts,
                 c->num_experts_per_tok, c->shared_expert_intermediate_size ? ", plus a shared one" : "");
    }
    char encodings[160];
    if (w->gguf.map || c->fp8_weights) { /* GGUF and FP8 files mix encodings: say which */
        char counts[128];
        model_weights_encodings(w, counts, sizeof counts);
        snprintf(encodings, sizeof encodings, "%s%s matrices: %s", w->dummy ? "dummy " : "",
                 w->gguf.map ? "GGUF" : "FP8 checkpoint", counts);
    } else {
        snprintf(encodings, sizeof encodings, "%s",
                 w->dummy ? "dummy bf16, seed 0" : c->torch_dtype[0] ? c->torch_dtype : "dtype not stated");
    }
    log_info("model %s: %s, %d layers, hidden %d, %d/%d heads x %d, vocab %d; %.3gB parameters, "
             "%.3gB active per token; %.3g GB of weights (%s), %.3g GB read per decode token",
             model_dir, arch, c->num_layers, c->hidden_size, c->num_heads, c->num_kv_heads,
             c->head_dim, c->vocab_size, size.total_params / 1e9, size.active_params / 1e9,
             model_weights_bytes(w) / 1e9, encodings, size.bytes_per_token / 1e9);
}

int loaded_model_open(LoadedModel *m, const char *model_dir, const RunnerOptions *opts,
                      Error *err) {
    memset(m, 0, sizeof *m);
    double t0 = now_seconds();
    if (load_weights(&m->weights, model_dir, opts, err)) return -1;
    log_model(&m->weights, model_dir);
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
    if (strcmp(r->device, "cpu") == 0)
        log_info("the CPU KV cache is reserved, not yet resident: memory use grows toward the "
                 "weights + %.2f GB as blocks are first written, and stays there (blocks are "
                 "reused, not freed); --kv-cache-memory sets it",
                 r->kv_cache_bytes / 1e9);
    return 0;
}

void loaded_model_close(LoadedModel *m) {
    runner_destroy(m->runner);
    model_weights_free(&m->weights);
    memset(m, 0, sizeof *m);
}

const ModelLoader backend_model_loader = {loaded_model_open, loaded_model_close};
