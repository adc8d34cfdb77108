/*
 * helpers.h - shared test utilities: fixture paths, temp folders, a minimal
 * safetensors writer (to build good and deliberately broken checkpoints),
 * the tiny model's golden data, and running the nanovllm binary.
 */
#ifndef NANOVLLM_TEST_HELPERS_H
#define NANOVLLM_TEST_HELPERS_H

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/cpu_runner.h"
#include "engine/runner.h"
#include "text/tokenizer/tokenizer.h"

/* A seeded stream for tests' random inputs: uniform in [0, 1) (53 bits of
 * a 64-bit LCG) and standard normal (Box-Muller). */
typedef struct TestRng {
    uint64_t state;
} TestRng;

static inline double test_rng_uniform(TestRng *r) {
    r->state = r->state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(r->state >> 11) / 9007199254740992.0;
}

static inline float test_rng_gauss(TestRng *r) {
    double u = test_rng_uniform(r) + 1e-12, v = test_rng_uniform(r);
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

#define TINY_MODEL "tests/fixtures/tiny-qwen3"
#define TINY_GOLDEN "tests/fixtures/tiny-qwen3-golden"
#define TINY_MOE_MODEL "tests/fixtures/tiny-qwen3-moe" /* 16 experts, 4 per token */
#define TINY_MOE_GOLDEN "tests/fixtures/tiny-qwen3-moe-golden"
#define GOLDEN_TOL 2e-3 /* the golden README's tolerance for float32 math */
#define TOKENIZER_FIXTURES "tests/fixtures/tokenizer" /* copied from ../shared/fixtures/tokenizer */
#define QWEN3_VOCAB_ROWS 151936 /* the model's embedding rows; the tokenizer has 151669 ids */

/* A fresh folder under /tmp (removed with rm_rf by the caller). */
char *make_temp_dir(void);
void rm_rf(const char *path);
void write_file(const char *path, const void *data, size_t size);
void write_text(const char *path, const char *text);
char *read_text(const char *path); /* malloc'ed, NUL-terminated */

/* One tensor for write_safetensors(). */
typedef struct TestTensor {
    const char *name;
    const char *dtype; /* "BF16", "F32", ... */
    int ndim;
    int64_t shape[4];
    const void *data;
    size_t nbytes;
} TestTensor;

/* Writes a well-formed safetensors file (offsets packed in order). */
void write_safetensors(const char *path, const TestTensor *tensors, int n);

/* Writes u64 header length + header text + data bytes verbatim. */
void write_raw_safetensors(const char *path, const char *header, const void *data, size_t size);

/* Copies config.json of the tiny model into dir. */
void copy_tiny_config(const char *dir);

/* A fresh folder with symlinks to the named files of the tiny model and a
 * generation_config.json holding generation_config (malloc'ed path; the
 * caller removes it with rm_rf). */
char *tiny_model_with_generation_config(const char *const *files, int num_files,
                                        const char *generation_config);

/* A model folder and its golden outputs (same format for dense and MoE). */
typedef struct GoldenFixture {
    const char *model, *golden;
} GoldenFixture;
extern const GoldenFixture TINY_DENSE, TINY_MOE;

/* Golden data of a fixture; the plain forms are the dense tiny model's. */
json_t *golden_load_from(const GoldenFixture *f);
float *golden_logits_from(const GoldenFixture *f, const char *name); /* NULL: not in this copy */
json_t *golden_load(void);
json_t *golden_prompt(json_t *golden, const char *name);
int32_t *json_ids(json_t *arr, int *n); /* malloc'ed */
float *golden_last_logits(const char *name); /* malloc'ed [vocab] */

/* A model folder and a CPU runner for it (block size and token budget as
 * given), with a float32 KV cache and float32 matmul inputs so the golden
 * checks keep float32 precision; tiny_open is the dense tiny model's.
 * fixture_open_dtype chooses the cache's dtype and the matmuls'. */
void fixture_open(const char *model_dir, ModelWeights *w, Runner **r, int block_size,
                  int max_tokens);
void fixture_open_dtype(const char *model_dir, ModelWeights *w, Runner **r, int block_size,
                        int max_tokens, KvCacheDtype kv_dtype, ComputeDtype dtype);
void tiny_open(ModelWeights *w, Runner **r, int block_size, int max_tokens);
void tiny_close(ModelWeights *w, Runner *r);

/* Runs `$NANOVLLM_BIN args` through the shell; returns the exit status and
 * malloc'ed stdout and stderr. */
int run_nanovllm(const char *args, char **out, char **err);

/* The same with stdin_data (stdin_len bytes) on its standard input. */
int run_nanovllm_stdin(const char *args, const void *stdin_data, size_t stdin_len, char **out,
                       char **err);

/* len pseudo-random token ids below 151000, the same for the same seed (malloc'ed). */
int32_t *random_prompt(int len, uint64_t seed);

/* The tiny model's (real Qwen3) tokenizer; the test fails if it does not load. */
Tokenizer *tiny_tokenizer(void);

/* Every line of a JSON-lines fixture (a JSON array of the rows). */
json_t *jsonl_load(const char *path);

/* max |a[i] - b[i]| over n floats; NaN if any difference is NaN (a NaN on
 * either side), so that `<= tol` fails on it. */
double max_abs_diff(const float *a, const float *b, size_t n);

/* The index of the largest of v[0..n) (the first of equal ones) and, in
 * *margin, its lead over the runner-up (0 at a tie; +inf where n is 1). */
int argmax_margin(const float *v, size_t n, double *margin);

/* The last position's logits and the greedy token of ids[0..n) (one KV
 * block) on the model in model_dir: a CPU runner with float32 matmuls
 * (auto would take bf16 for a bf16 checkpoint only). */
void prompt_last_logits(const char *model_dir, const int32_t *ids, int n, float *logits, int32_t *tok);
void prompt_last_logits_dtype(const char *model_dir, const int32_t *ids, int n, float *logits, int32_t *tok,
                              ComputeDtype dtype);

/* Loading the model in dir fails, with an error that mentions needle. */
void expect_model_error_in(const char *dir, const char *needle);

#endif
