/*
 * test_fp8_checkpoint.c - Qwen's FP8 checkpoint format from the loader to the
 * logits: the tiny model quantized here (each layer matrix to
 * float8_e4m3fn with one scale per 128 x 128 tile, amax / 448, as Qwen's
 * checkpoints are made) must load as FP8 in place, compute exactly what an
 * F32 checkpoint of its dequantized values computes (the same numbers,
 * so only float32 summation order may differ), and every malformed
 * variant must be refused with a message naming the tensor or the field.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "reference_check.h"
#include "base/half.h"
#include "cpu/cpu_runner.h"
#include "model/model_weights.h"
#include "model/safetensors.h"

static char *dir, *ref_dir;
static void setup(void) {
    dir = make_temp_dir();
    ref_dir = make_temp_dir();
}
static void teardown(void) {
    rm_rf(dir);
    rm_rf(ref_dir);
    free(dir);
    free(ref_dir);
}

static char *path_in(const char *folder, const char *name) {
    static char paths[4][512];
    static int next;
    char *path = paths[next++ % 4];
    snprintf(path, 512, "%s/%s", folder, name);
    return path;
}

/* The tiny model's config.json with a quantization_config (NULL: none). */
static void write_config(const char *folder, const char *quantization_json) {
    json_t *cfg = json_load_file(TINY_MODEL "/config.json", 0, NULL);
    cr_assert(cfg);
    if (quantization_json) json_object_set_new(cfg, "quantization_config", json_loads(quantization_json, 0, NULL));
    cr_assert(json_dump_file(cfg, path_in(folder, "config.json"), 0) == 0);
    json_decref(cfg);
}

#define QWEN_FP8 \
    "{\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", \"quant_method\": \"fp8\", " \
    "\"weight_block_size\": [128, 128]}"

/* How write_fp8_copy breaks the checkpoint (FINE: not at all). */
typedef enum Breakage { FINE, NO_SCALE, SCALE_SHAPE, NAN_BYTE, EMBED_FP8, NAN_SCALE } Breakage;

static bool layer_matrix(const TensorInfo *s) {
    return s->ndim == 2 && strncmp(s->name, "model.layers.", 13) == 0;
}

/* The tiny model with every layer matrix in FP8 at `dir` (broken as asked),
 * and its dequantized values as an F32 checkpoint at ref_dir. */
static void write_fp8_copy(Breakage breakage) {
    Safetensors src;
    Error err = {0};
    cr_assert(safetensors_open_file(&src, TINY_MODEL "/model.safetensors", &err) == 0, "%s", err.msg);
    write_config(dir, QWEN_FP8);
    write_config(ref_dir, NULL);
    int cap = 2 * src.num_tensors;
    TestTensor *fp8 = calloc((size_t)cap, sizeof *fp8), *ref = calloc((size_t)cap, sizeof *ref);
    void **bufs = calloc((size_t)(3 * cap), sizeof *bufs);
    char **names = calloc((size_t)cap, sizeof *names);
    int n = 0, nr = 0, nb = 0;
    for (int i = 0; i < src.num_tensors; i++) {
        const TensorInfo *s = &src.tensors[i];
        size_t count = s->nbytes / 2;
        const uint16_t *h = s->data;
        float *f = bufs[nb++] = malloc(count * sizeof(float));
        for (size_t k = 0; k < count; k++) f[k] = bf16_to_f32(h[k]);
        bool quantize = layer_matrix(s) || (breakage == EMBED_FP8 && strcmp(s->name, "model.embed_tokens.weight") == 0);
        TestTensor *r = &ref[nr++], *d = &fp8[n++];
        *r = (TestTensor){s->name, "F32", s->ndim, {s->shape[0], s->shape[1]}, f, count * 4};
        if (!quantize) {
            *d = (TestTensor){s->name, "BF16", s->ndim, {s->shape[0], s->shape[1]}, s->data, s->nbytes};
            continue;
        }
        int rows = (int)s->shape[0], cols = (int)s->shape[1];
        int tr = (rows + 127) / 128, tc = (cols + 127) / 128;
        float *scales = bufs[nb++] = calloc((size_t)tr * tc, sizeof(float));
        uint8_t *q = bufs[nb++] = malloc(count);
        for (int t = 0; t < tr * tc; t++) {
            float amax = 0;
            for (int rr = (t / tc) * 128; rr < rows && rr < (t / tc + 1) * 128; rr++)
                for (int cc = (t % tc) * 128; cc < cols && cc < (t % tc + 1) * 128; cc++)
                    amax = fmaxf(amax, fabsf(f[(size_t)rr * cols + cc]));
            scales[t] = amax > 0 ? amax / 448.0f : 1.0f;
        }
        for (int rr = 0; rr < rows; rr++)
            for (int cc = 0; cc < cols; cc++) {
                size_t k = (size_t)rr * cols + cc;
                q[k] = fp8_e4m3_from_float(f[k] / scales[(rr / 128) * tc + cc / 128]);
            }
        fp8_dequantize_rows(q, scales, cols, 0, rows, f); /* the reference: what FP8 means */
        if (breakage == NAN_BYTE && strcmp(s->name, "model.layers.1.mlp.down_proj.weight") == 0) q[77] = 0xff;
        if (breakage == NAN_SCALE && strcmp(s->name, "model.layers.2.self_attn.o_proj.weight") == 0)
            scales[0] = NAN;
        *d = (TestTensor){s->name, "F8_E4M3", 2, {rows, cols}, q, count};
        names[nr] = malloc(strlen(s->name) + 16);
        sprintf(names[nr], "%s_scale_inv", s->name);
        if (breakage == NO_SCALE && strcmp(s->name, "model.layers.0.self_attn.k_proj.weight") == 0) continue;
        int64_t r0 = tr + (breakage == SCALE_SHAPE && strcmp(s->name, "model.layers.0.mlp.up_proj.weight") == 0);
        fp8[n++] = (TestTensor){names[nr], "F32", 2, {r0, tc}, scales, (size_t)r0 * tc * sizeof(float)};
        if (r0 != tr) fp8[n - 1].data = bufs[nb++] = calloc((size_t)r0 * tc, sizeof(float));
    }
    write_safetensors(path_in(dir, "model.safetensors"), fp8, n);
    write_safetensors(path_in(ref_dir, "model.safetensors"), ref, nr);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    for (int i = 0; i < cap; i++) free(names[i]);
    free(bufs);
    free(names);
    free(fp8);
    free(ref);
    safetensors_close(&src);
}

Test(fp8_checkpoint, loads_in_place_with_scales, .init = setup, .fini = teardown) {
    write_fp8_copy(FINE);
    ModelWeights w;
    Error err = {0};
    cr_assert(model_weights_load(&w, dir, &err) == 0, "%s", err.msg);
    cr_expect(w.config.fp8_weights);
    const LayerWeights *L = &w.layers[1];
    cr_expect_eq(L->q_proj.type, WEIGHT_F8_E4M3);
    cr_expect_eq(L->down_proj.type, WEIGHT_F8_E4M3);
    cr_expect_eq(w.embed_tokens.type, WEIGHT_BF16);
    cr_expect(L->q_proj.scales && !w.embed_tokens.scales);
    /* in place: the bytes are the mapping's */
    const TensorInfo *t = safetensors_find(&w.checkpoint, "model.layers.1.self_attn.q_proj.weight");
    cr_expect_eq(L->q_proj.data, t->data);
    char enc[128];
    model_weights_encodings(&w, enc, sizeof enc);
    cr_expect(strstr(enc, "21 fp8_e4m3"), "%s", enc);
    /* 1 byte a value: the layers' matrices weigh a quarter of their F32 copy */
    ModelSize size = model_weights_size(&w);
    cr_expect(size.bytes_per_token > 0);
    model_weights_free(&w);
}

/* The FP8 copy's last logits against its dequantized float32 twin's, both
 * with the matmuls' inputs in `dtype`: within bound x the largest logit,
 * and the same greedy token. */
static void against_dequantized(ComputeDtype dtype, double bound) {
    write_fp8_copy(FINE);
    enum { V = 151936 };
    float *want = malloc(sizeof(float) * V), *got = malloc(sizeof(float) * V);
    cr_assert(want && got);
    static const int32_t ids[9] = {9707, 11, 1879, 151643, 100000, 151935, 785, 13, 40};
    int32_t t_ref, t_fp8;
    prompt_last_logits_dtype(ref_dir, ids, 9, want, &t_ref, dtype);
    prompt_last_logits_dtype(dir, ids, 9, got, &t_fp8, dtype);
    double d = 0, scale = 0;
    for (int i = 0; i < V; i++) {
        d = fmax(d, fabs(want[i] - got[i]));
        scale = fmax(scale, fabs(want[i]));
    }
    cr_log_info("%s inputs: FP8 and dequantized logits differ by %g (largest %g)",
                dtype == COMPUTE_BF16 ? "bf16" : "float32", d, scale);
    cr_expect(d <= bound * scale, "logits differ by %g (largest %g)", d, scale);
    cr_expect_eq(t_ref, t_fp8);
    free(want);
    free(got);
}

/* The same products, summed in another order: float32 rounding only. */
Test(fp8_checkpoint, computes_what_its_dequantized_values_compute, .init = setup, .fini = teardown) {
    against_dequantized(COMPUTE_F32, 1e-4);
}

/* With the matmuls' inputs in bf16 (--dtype bfloat16: on CPUs with
 * AVX512-BF16 and VBMI, fp8_gemm_bf16 multiplies the bytes as bf16), under
 * the same rounding of the inputs on both sides: the products are exact,
 * the sums float32, and an input that rounds to the other bf16 neighbour
 * moves the next layer (measured 1.9e-6 of the largest logit on Zen 4). */
Test(fp8_checkpoint, computes_what_its_dequantized_values_compute_bf16, .init = setup, .fini = teardown) {
    against_dequantized(COMPUTE_BF16, 1e-3);
}

Test(fp8_checkpoint, missing_scale_is_named, .init = setup, .fini = teardown) {
    write_fp8_copy(NO_SCALE);
    expect_model_error_in(dir, "no 'model.layers.0.self_attn.k_proj.weight_scale_inv'");
}

Test(fp8_checkpoint, wrong_scale_shape_is_named, .init = setup, .fini = teardown) {
    write_fp8_copy(SCALE_SHAPE);
    expect_model_error_in(dir, "'model.layers.0.mlp.up_proj.weight_scale_inv' has shape [2, 1] but "
                               "config.json implies [1, 1]");
}

Test(fp8_checkpoint, nan_byte_is_refused, .init = setup, .fini = teardown) {
    write_fp8_copy(NAN_BYTE);
    expect_model_error_in(dir, "'model.layers.1.mlp.down_proj.weight' holds a NaN");
}

Test(fp8_checkpoint, nan_scale_is_refused, .init = setup, .fini = teardown) {
    write_fp8_copy(NAN_SCALE);
    expect_model_error_in(dir, "'model.layers.2.self_attn.o_proj.weight_scale_inv': scale 0 of 4 is nan");
}

Test(fp8_checkpoint, fp8_embeddings_are_refused, .init = setup, .fini = teardown) {
    write_fp8_copy(EMBED_FP8);
    expect_model_error_in(dir, "'model.embed_tokens.weight' has dtype F8_E4M3; expected BF16, F16 or F32 "
                               "(FP8 checkpoints keep it in bf16)");
}

Test(fp8_checkpoint, fp8_without_quantization_config_is_refused, .init = setup, .fini = teardown) {
    write_fp8_copy(FINE);
    write_config(dir, NULL);
    expect_model_error_in(dir, "needs config.json's fp8 quantization_config");
}

Test(fp8_checkpoint, other_quantization_configs_are_refused, .init = setup, .fini = teardown) {
    static const struct {
        const char *config, *needle;
    } cases[] = {
        {"{\"quant_method\": \"awq\", \"bits\": 4}", "quant_method 'awq' is not supported"},
        {"{\"bits\": 4}", "quant_method '(missing)' is not supported"},
        {"{\"quant_method\": \"fp8\", \"fmt\": \"e5m2\", \"weight_block_size\": [128, 128]}", "fmt 'e5m2'"},
        {"{\"quant_method\": \"fp8\", \"activation_scheme\": \"static\", \"weight_block_size\": [128, 128]}",
         "activation_scheme 'static'"},
        {"{\"quant_method\": \"fp8\", \"weight_block_size\": [64, 64]}", "weight_block_size must be [128, 128]"},
        {"{\"quant_method\": \"fp8\"}", "weight_block_size must be [128, 128]"},
        {"[1]", "quantization_config must be an object"},
    };
    write_fp8_copy(FINE);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_config(dir, cases[i].config);
        expect_model_error_in(dir, cases[i].needle);
    }
}

Test(fp8_checkpoint, dummy_fp8_config_makes_fp8_layers, .init = setup, .fini = teardown) {
    write_config(dir, QWEN_FP8);
    ModelConfig cfg;
    Error err = {0};
    cr_assert(model_config_load(&cfg, dir, &err) == 0, "%s", err.msg);
    ModelWeights w;
    cr_assert(model_weights_load_dummy(&w, &cfg, 7, &err) == 0, "%s", err.msg);
    const Weight *q = &w.layers[0].q_proj;
    cr_expect_eq(q->type, WEIGHT_F8_E4M3);
    cr_expect_eq(w.embed_tokens.type, WEIGHT_BF16);
    uint8_t *bytes = malloc(weight_bytes(q));
    cr_assert(model_weights_copy_matrix(&w, q, bytes, &err) == 0, "%s", err.msg);
    /* the spread of the bf16 dummies: variance 1 / fan_in */
    double sum2 = 0;
    size_t n = (size_t)q->rows * q->cols;
    for (size_t i = 0; i < n; i++) {
        cr_assert(!fp8_e4m3_is_nan(bytes[i]));
        double v = fp8_e4m3_to_float(bytes[i]) * q->scales[0];
        sum2 += v * v;
    }
    double var = sum2 / (double)n;
    cr_expect(fabs(var * q->cols - 1.0) < 0.1, "variance x fan_in = %g", var * q->cols);
    free(bytes);
    model_weights_free(&w);
}

/* ---- the generated fixtures (make fixtures: scripts/make_fp8_qwen3.py) ---- */

#define FP8_DIR "tests/fixtures/tiny-qwen3-fp8"

Test(fp8_checkpoint, every_e4m3_byte_as_numpy_decodes_it) {
    FILE *f = fopen(FP8_DIR "/e4m3.f32", "rb");
    cr_assert(f, FP8_DIR "/e4m3.f32 is missing (make fixtures writes it)");
    float table[256];
    cr_assert_eq(fread(table, sizeof(float), 256, f), 256);
    fclose(f);
    for (int b = 0; b < 256; b++) {
        float v = fp8_e4m3_to_float((uint8_t)b);
        if (isnan(table[b])) cr_expect(isnan(v), "byte %02x", b);
        else cr_expect(memcmp(&v, &table[b], sizeof v) == 0, "byte %02x: %g, numpy %g", b, v, table[b]);
    }
}

/* The FP8 weights are exact; what remains is float32 arithmetic against a
 * float64 reference of the same dequantized values (as bf16 GGUF: measured
 * below 1e-6), and greedy decoding wherever the reference's margin is clear. */
Test(fp8_checkpoint, dense_logits) { reference_logits_within(FP8_DIR "/dense.ref", FP8_DIR "/dense", 1e-4); }
Test(fp8_checkpoint, moe_logits) { reference_logits_within(FP8_DIR "/moe.ref", FP8_DIR "/moe", 1e-4); }
Test(fp8_checkpoint, partial_tiles_logits) { reference_logits_within(FP8_DIR "/odd.ref", FP8_DIR "/odd", 1e-4); }
/* bf16 inputs (fp8_gemm_bf16 where the CPU has it; the dense layers and
 * the MoE experts' grouped products): within the golden README's bf16 rule. */
Test(fp8_checkpoint, dense_logits_bf16) {
    reference_logits_within_dtype(FP8_DIR "/dense.ref", FP8_DIR "/dense", 2e-2, COMPUTE_BF16);
}
Test(fp8_checkpoint, moe_logits_bf16) {
    reference_logits_within_dtype(FP8_DIR "/moe.ref", FP8_DIR "/moe", 2e-2, COMPUTE_BF16);
}
Test(fp8_checkpoint, dense_greedy) { reference_greedy_matches(FP8_DIR "/dense.ref", FP8_DIR "/dense", 0.005); }
Test(fp8_checkpoint, moe_greedy) { reference_greedy_matches(FP8_DIR "/moe.ref", FP8_DIR "/moe", 0.005); }
Test(fp8_checkpoint, partial_tiles_greedy) { reference_greedy_matches(FP8_DIR "/odd.ref", FP8_DIR "/odd", 0.005); }
