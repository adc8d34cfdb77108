/*
 * helpers.c - see helpers.h.
 */
#include "helpers.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

char *make_temp_dir(void) {
    char tmpl[] = "/tmp/nanovllm-test-XXXXXX";
    char *dir = mkdtemp(tmpl);
    cr_assert(dir, "mkdtemp failed");
    return strdup(dir);
}

void rm_rf(const char *path) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    cr_assert(system(cmd) == 0);
}

void write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    cr_assert(size == 0 || fwrite(data, 1, size, f) == size);
    cr_assert(fclose(f) == 0);
}

void write_text(const char *path, const char *text) { write_file(path, text, strlen(text)); }

char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot read %s", path);
    cr_assert(fseek(f, 0, SEEK_END) == 0);
    long n = ftell(f);
    cr_assert(n >= 0 && fseek(f, 0, SEEK_SET) == 0);
    char *buf = malloc((size_t)n + 1);
    cr_assert(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

void write_raw_safetensors(const char *path, const char *header, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    uint64_t len = strlen(header);
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(len >> (8 * i));
    cr_assert(fwrite(le, 1, 8, f) == 8);
    cr_assert(fwrite(header, 1, len, f) == len);
    cr_assert(size == 0 || fwrite(data, 1, size, f) == size);
    cr_assert(fclose(f) == 0);
}

void write_safetensors(const char *path, const TestTensor *tensors, int n) {
    json_t *header = json_object();
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < tensors[i].ndim; d++)
            json_array_append_new(shape, json_integer(tensors[i].shape[d]));
        json_object_set_new(header, tensors[i].name,
                            json_pack("{s:s, s:o, s:[I,I]}", "dtype", tensors[i].dtype, "shape",
                                      shape, "data_offsets", (json_int_t)offset,
                                      (json_int_t)(offset + tensors[i].nbytes)));
        offset += tensors[i].nbytes;
    }
    char *text = json_dumps(header, JSON_COMPACT);
    /* Pad the header so the data starts 8-byte aligned, as Hugging Face does. */
    size_t len = strlen(text), padded = (8 + len + 7) / 8 * 8 - 8;
    char *hdr = malloc(padded + 1);
    memcpy(hdr, text, len);
    memset(hdr + len, ' ', padded - len);
    hdr[padded] = '\0';
    unsigned char *data = malloc(offset ? offset : 1);
    offset = 0;
    for (int i = 0; i < n; i++) {
        memcpy(data + offset, tensors[i].data, tensors[i].nbytes);
        offset += tensors[i].nbytes;
    }
    write_raw_safetensors(path, hdr, data, offset);
    free(data);
    free(hdr);
    free(text);
    json_decref(header);
}

void copy_tiny_config(const char *dir) {
    char *cfg = read_text(TINY_MODEL "/config.json");
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, cfg);
    free(cfg);
}

char *tiny_model_with_generation_config(const char *const *files, int num_files,
                                        const char *generation_config) {
    char *dir = make_temp_dir(), cwd[1024], target[1400], path[1400];
    cr_assert(getcwd(cwd, sizeof cwd));
    for (int i = 0; i < num_files; i++) {
        snprintf(target, sizeof target, "%s/" TINY_MODEL "/%s", cwd, files[i]);
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        cr_assert(symlink(target, path) == 0, "linking %s", files[i]);
    }
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    write_text(path, generation_config);
    return dir;
}

const GoldenFixture TINY_DENSE = {TINY_MODEL, TINY_GOLDEN};
const GoldenFixture TINY_MOE = {TINY_MOE_MODEL, TINY_MOE_GOLDEN};

json_t *golden_load_from(const GoldenFixture *f) {
    char path[512];
    snprintf(path, sizeof path, "%s/golden.json", f->golden);
    json_error_t jerr;
    json_t *g = json_load_file(path, 0, &jerr);
    cr_assert(g, "%s: %s", path, jerr.text);
    return g;
}

json_t *golden_load(void) { return golden_load_from(&TINY_DENSE); }

json_t *golden_prompt(json_t *golden, const char *name) {
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(golden, "prompts"), i, p) {
        if (strcmp(json_string_value(json_object_get(p, "name")), name) == 0) return p;
    }
    cr_assert_fail("no golden prompt %s", name);
    return NULL;
}

int32_t *json_ids(json_t *arr, int *n) {
    *n = (int)json_array_size(arr);
    int32_t *ids = malloc(sizeof *ids * (size_t)(*n ? *n : 1));
    for (int i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
    return ids;
}

float *golden_logits_from(const GoldenFixture *fx, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/logits/%s.f32", fx->golden, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    float *v = malloc(sizeof(float) * 151936);
    cr_assert(fread(v, sizeof(float), 151936, f) == 151936);
    fclose(f);
    return v;
}

float *golden_last_logits(const char *name) {
    float *v = golden_logits_from(&TINY_DENSE, name);
    cr_assert(v, "no golden logits for %s", name);
    return v;
}

void tiny_open(ModelWeights *w, Runner **r, int block_size, int max_tokens) {
    fixture_open(TINY_MODEL, w, r, block_size, max_tokens);
}

void fixture_open(const char *model_dir, ModelWeights *w, Runner **r, int block_size,
                  int max_tokens) {
    fixture_open_dtype(model_dir, w, r, block_size, max_tokens, KV_CACHE_F32, COMPUTE_F32);
}

void fixture_open_dtype(const char *model_dir, ModelWeights *w, Runner **r, int block_size,
                        int max_tokens, KvCacheDtype kv_dtype, ComputeDtype dtype) {
    Error err = {0};
    cr_assert(model_weights_load(w, model_dir, &err) == 0, "%s", err.msg);
    RunnerOptions o = runner_default_options();
    o.device = "cpu";
    o.block_size = block_size;
    o.max_num_batched_tokens = max_tokens;
    o.max_num_seqs = 16;
    o.kv_cache_bytes = 64u << 20;
    o.kv_cache_dtype = kv_dtype;
    o.dtype = dtype;
    *r = cpu_runner_create(w, &o, &err);
    cr_assert(*r, "%s", err.msg);
}

void tiny_close(ModelWeights *w, Runner *r) {
    runner_destroy(r);
    model_weights_free(w);
}

int run_nanovllm(const char *args, char **out, char **err) {
    return run_nanovllm_stdin(args, NULL, 0, out, err);
}

int run_nanovllm_stdin(const char *args, const void *stdin_data, size_t stdin_len, char **out,
                       char **err) {
    const char *bin = getenv("NANOVLLM_BIN") ? getenv("NANOVLLM_BIN") : "build/nanovllm";
    char *dir = make_temp_dir();
    char cmd[8192], in[600] = "/dev/null";
    if (stdin_data) {
        snprintf(in, sizeof in, "%s/in", dir);
        write_file(in, stdin_data, stdin_len);
    }
    snprintf(cmd, sizeof cmd, "%s %s >%s/out 2>%s/err <%s", bin, args, dir, dir, in);
    int status = system(cmd);
    char path[512];
    snprintf(path, sizeof path, "%s/out", dir);
    *out = read_text(path);
    snprintf(path, sizeof path, "%s/err", dir);
    *err = read_text(path);
    rm_rf(dir);
    free(dir);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Tokenizer *tiny_tokenizer(void) {
    Error err = {0};
    Tokenizer *t = tokenizer_load(TINY_MODEL, QWEN3_VOCAB_ROWS, &err);
    cr_assert(t, "%s", err.msg);
    return t;
}

json_t *jsonl_load(const char *path) {
    FILE *f = fopen(path, "r");
    cr_assert(f, "cannot open %s", path);
    json_t *rows = json_array();
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int lineno = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        lineno++;
        json_error_t jerr;
        json_t *row = json_loadb(line, (size_t)n, JSON_ALLOW_NUL, &jerr);
        cr_assert(row, "%s:%d: %s", path, lineno, jerr.text);
        json_array_append_new(rows, row);
    }
    free(line);
    fclose(f);
    return rows;
}

int32_t *random_prompt(int len, uint64_t seed) {
    int32_t *p = malloc(sizeof(int32_t) * (size_t)len);
    cr_assert(p);
    for (int i = 0; i < len; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (int32_t)((seed >> 33) % 151000);
    }
    return p;
}

double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (isnan(d)) return d;
        if (d > m) m = d;
    }
    return m;
}

int argmax_margin(const float *v, size_t n, double *margin) {
    int best = 0;
    float second = -INFINITY;
    for (size_t i = 1; i < n; i++) {
        if (v[i] > v[best]) {
            second = v[best];
            best = (int)i;
        } else if (v[i] > second) {
            second = v[i];
        }
    }
    *margin = (double)v[best] - second;
    return best;
}

void prompt_last_logits(const char *model_dir, const int32_t *ids, int n, float *logits, int32_t *tok) {
    prompt_last_logits_dtype(model_dir, ids, n, logits, tok, COMPUTE_F32);
}

void prompt_last_logits_dtype(const char *model_dir, const int32_t *ids, int n, float *logits, int32_t *tok,
                              ComputeDtype dtype) {
    ModelWeights w;
    Error err = {0};
    cr_assert(model_weights_load(&w, model_dir, &err) == 0, "%s", err.msg);
    RunnerOptions o = runner_default_options();
    o.device = "cpu";
    o.kv_cache_bytes = 16u << 20;
    o.dtype = dtype;
    Runner *r = cpu_runner_create(&w, &o, &err);
    cr_assert(r, "%s", err.msg);
    int32_t table[1] = {0};
    RunnerSeq seq = {.tokens = ids, .num_tokens = n, .start_pos = 0, .block_table = table, .num_blocks = 1,
                     .compute_logits = true};
    RunnerBatch batch = {.seqs = &seq, .num_seqs = 1, .last_logits = logits};
    cr_assert(runner_step(r, &batch, tok, &err) == 0, "%s", err.msg);
    runner_destroy(r);
    model_weights_free(&w);
}

void expect_model_error_in(const char *dir, const char *needle) {
    ModelWeights w;
    Error err = {0};
    cr_expect(model_weights_load(&w, dir, &err) == -1, "loaded; expected an error mentioning '%s'", needle);
    cr_expect(strstr(err.msg, needle), "error '%s' does not mention '%s'", err.msg, needle);
}
