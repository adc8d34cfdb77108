/*
 * test_cli.c - the nanovllm binary as a user runs it: generate's JSON output
 * on the tiny model, and a clear message and exit status for every bad flag,
 * value, model folder or device.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cpu_isa.h"
#include "helpers.h"
#include "cuda/cuda_device.h"

static void expect_failure(const char *args, int status, const char *needle) {
    char *out, *err;
    int rc = run_nanovllm(args, &out, &err);
    cr_expect_eq(rc, status, "`nanovllm %s` exited %d, stderr: %s", args, rc, err);
    cr_expect(strstr(err, needle), "`nanovllm %s`: stderr lacks '%s': %s", args, needle, err);
    cr_expect(strstr(err, "usage:") || status != 2, "no usage line: %s", err);
    free(out);
    free(err);
}

Test(cli, generate_json_matches_golden) {
    json_t *g = golden_load();
    json_t *p = golden_prompt(g, "len007");
    /* float32 cache and matmuls: the golden tolerance is float32's (auto is
     * bf16 for this model, and bf16 matmul inputs on CPUs with AVX512-BF16). */
    char args[1024] = "generate --model " TINY_MODEL " --device cpu --kv-cache-dtype float32 --dtype float32 --json "
                      "--ignore-eos --prompt-ids ";
    size_t i;
    json_t *id;
    json_array_foreach(json_object_get(p, "prompt_ids"), i, id)
        snprintf(args + strlen(args), sizeof args - strlen(args), "%s%lld", i ? "," : "",
                 (long long)json_integer_value(id));
    char *dir = make_temp_dir(), dump[512];
    snprintf(dump, sizeof dump, "%s/logits.f32", dir);
    snprintf(args + strlen(args), sizeof args - strlen(args), " --max-tokens 16 --dump-logits %s", dump);
    char *out, *err;
    cr_assert_eq(run_nanovllm(args, &out, &err), 0, "%s", err);
    /* --dump-logits: [7 positions, vocab] float32; the last row is golden */
    FILE *f = fopen(dump, "rb");
    cr_assert(f, "no %s", dump);
    float *rows = malloc(sizeof(float) * 8 * QWEN3_VOCAB_ROWS), *golden = golden_last_logits("len007");
    cr_expect_eq(fread(rows, sizeof(float), 8 * (size_t)QWEN3_VOCAB_ROWS, f), 7 * (size_t)QWEN3_VOCAB_ROWS);
    fclose(f);
    for (int v = 0; v < QWEN3_VOCAB_ROWS; v++)
        cr_assert(fabsf(rows[6 * (size_t)QWEN3_VOCAB_ROWS + v] - golden[v]) <= GOLDEN_TOL, "logit %d", v);
    free(rows);
    free(golden);
    rm_rf(dir);
    free(dir);
    json_error_t jerr;
    json_t *res = json_loads(out, JSON_ALLOW_NUL, &jerr);
    cr_assert(res, "stdout is not one JSON object: %s", out);
    cr_expect(json_equal(json_object_get(res, "prompt_ids"), json_object_get(p, "prompt_ids")));
    cr_expect(json_equal(json_object_get(res, "ids"), json_object_get(p, "greedy_ids")),
              "ids %s", out);
    cr_expect_str_eq(json_string_value(json_object_get(res, "finish_reason")), "length");
    cr_expect(strstr(err, "KV cache"), "start-up log names the KV capacity: %s", err);
    json_decref(res);
    json_decref(g);
    free(out);
    free(err);
}

/* generation_config.json's eos ids stop generation: make the tiny model's
 * first greedy token (14981 after <|im_start|>) an end-of-sequence id. */
Test(cli, generate_stops_at_eos) {
    const char *files[] = {"config.json", "model.safetensors"}; /* no tokenizer: ids only */
    char *dir = tiny_model_with_generation_config(files, 2, "{\"eos_token_id\": [151643, 14981]}"), args[2048];
    char *out, *err;
    snprintf(args, sizeof args, "generate --model %s --prompt-ids 151644 --max-tokens 8 --json --quiet", dir);
    cr_assert_eq(run_nanovllm(args, &out, &err), 0, "%s", err);
    cr_expect_str_eq(out, "{\"prompt_ids\":[151644],\"ids\":[14981],\"finish_reason\":\"stop\"}\n");
    cr_expect_str_eq(err, "", "--quiet leaves stderr empty");
    free(out);
    free(err);
    strcat(args, " --ignore-eos");
    cr_assert_eq(run_nanovllm(args, &out, &err), 0, "%s", err);
    json_t *res = json_loads(out, JSON_ALLOW_NUL, NULL);
    cr_assert(res);
    cr_expect_eq(json_array_size(json_object_get(res, "ids")), 8);
    cr_expect_str_eq(json_string_value(json_object_get(res, "finish_reason")), "length");
    json_decref(res);
    free(out);
    free(err);
    rm_rf(dir);
    free(dir);
}

Test(cli, plain_output_is_ids) {
    char *out, *err;
    cr_assert_eq(run_nanovllm("generate --model " TINY_MODEL " --prompt-ids 151644 --max-tokens 4 "
                              "--ignore-eos --quiet", &out, &err), 0, "%s", err);
    cr_expect_str_eq(out, "14981 106102 73229 125565\n");
    free(out);
    free(err);
    /* --enforce-eager takes no value; it only changes how the GPU launches */
    cr_assert_eq(run_nanovllm("generate --model " TINY_MODEL " --prompt-ids 151644 --max-tokens 4 "
                              "--enforce-eager --ignore-eos --quiet", &out, &err), 0, "%s", err);
    cr_expect_str_eq(out, "14981 106102 73229 125565\n");
    free(out);
    free(err);
}

Test(cli, usage_errors) {
    expect_failure("", 2, "usage: nanovllm <command>");
    expect_failure("frobnicate", 2, "unknown command 'frobnicate'");
    expect_failure("generate --prompt-ids 1", 2, "--model is required");
    expect_failure("generate --model " TINY_MODEL, 2, "exactly one of --prompt, --prompt-ids and --chat");
    expect_failure("generate --model " TINY_MODEL " --prompt-ids 1 --bogus", 2, "invalid option");
    expect_failure("generate --model " TINY_MODEL " --prompt-ids 1 --max-tokens abc", 2,
                   "--max-tokens: 'abc' is not an integer");
    expect_failure("generate --model " TINY_MODEL " --prompt-ids 1 --max-tokens 0", 2, "out of range");
    expect_failure("generate --model " TINY_MODEL " --prompt-ids 1 --top-p 1.5", 2,
                   "--top-p: 1.5 is out of range");
    expect_failure("generate --model " TINY_MODEL " --prompt-ids 1 --n 0", 2, "--n: 0 is out of range");
    expect_failure("generate --model " TINY_MODEL " --prompt-ids 1 --device tpu", 2,
                   "'tpu' is not one of auto, cuda, cpu");
    expect_failure("generate --model " TINY_MODEL " --prompt-ids 1 --block-size 48", 2,
                   "not a power of two");
    expect_failure("generate --model " TINY_MODEL " --prompt-ids 1 --kv-cache-memory 3XB", 2,
                   "unknown unit");
    expect_failure("generate --model " TINY_MODEL " --prompt-ids 1 --kv-cache-dtype fp8_e5m2", 2,
                   "--kv-cache-dtype: 'fp8_e5m2' is not one of auto, bfloat16, float32, fp8, fp8_e4m3");
    expect_failure("generate --model " TINY_MODEL " --prompt-ids 1 --dtype float16", 2,
                   "--dtype: 'float16' is not one of auto, bfloat16, float32");
    expect_failure("generate --model " TINY_MODEL " --prompt-ids 1,x", 2,
                   "expected comma-separated token ids, got 'x'");
    expect_failure("generate --model " TINY_MODEL " --prompt-ids 1,151936", 2,
                   "outside the vocabulary");
    expect_failure("generate --model " TINY_MODEL " --prompt-ids 1 extra", 2, "unexpected argument");
    expect_failure("bench", 2, "--model is required");
    expect_failure("serve --port 0", 2, "no model: nanovllm serve DIR (or --model DIR)");
    expect_failure("serve " TINY_MODEL " extra", 2, "unexpected argument 'extra'");
    expect_failure("serve --model " TINY_MODEL " /other/model", 2,
                   "two models: --model " TINY_MODEL " and /other/model");
}

Test(cli, runtime_errors) {
    expect_failure("generate --model /nonexistent --prompt-ids 1", 1, "no config.json");
    expect_failure("generate --model " TINY_MODEL " --prompt-ids 1,2,3 --max-tokens 10 "
                   "--max-model-len 8", 1, "more than max_model_len 8");
    expect_failure("generate --model " TINY_MODEL " --prompt-ids 1 --max-tokens 100 "
                   "--block-size 16 --kv-cache-memory 100KB", 1, "KV cache too small");
    expect_failure("generate --model " TINY_MODEL " --prompt-ids 1 --kv-cache-memory 1KB", 1,
                   "smaller than one block");
    expect_failure("generate --model " TINY_MODEL " --prompt-ids 1 --max-model-len 50000", 1,
                   "max_model_len 50000 is outside");
}

/* No usable GPU here (CI, this machine): cuda is refused with the reason,
 * auto says it falls back and then runs on the CPU. On a GPU machine without
 * the CUDA runner the message names that instead. */
Test(cli, device_selection) {
    char *out, *err, why[256];
    bool gpu = cuda_device_probe(why, sizeof why) > 0;
    int rc = run_nanovllm("generate --model " TINY_MODEL " --prompt-ids 1 --device cuda --max-tokens 2",
                          &out, &err);
    if (gpu) {
        cr_expect_eq(rc, 0, "%s", err);
        cr_expect(strstr(err, "device cuda ("), "%s", err);
    } else {
        cr_expect_eq(rc, 1);
        cr_expect(strstr(err, "--device cuda: no CUDA GPU available"), "%s", err);
    }
    free(out);
    free(err);
    rc = run_nanovllm("generate --model " TINY_MODEL " --prompt-ids 1 --device auto --max-tokens 2",
                      &out, &err);
    cr_expect_eq(rc, 0, "%s", err);
    cr_expect(strstr(err, gpu ? "device cuda (" : "using the CPU"), "%s", err);
    free(out);
    free(err);
    /* the attention benchmark needs no model; without a GPU it says why */
    rc = run_nanovllm("bench --attention --num-seqs 3 --input-len 300 --json", &out, &err);
    if (gpu) {
        cr_expect_eq(rc, 0, "%s", err);
        cr_expect(strstr(out, "\"fraction_of_copy\""), "%s", out);
    } else {
        cr_expect_eq(rc, 1);
        cr_expect(strstr(err, "--attention: "), "%s", err);
    }
    free(out);
    free(err);
    /* the CPU's decode attention needs neither: it reports its read rate
     * beside the plain read of the same rows */
    rc = run_nanovllm("bench --attention --device cpu --num-seqs 3 --input-len 300 --json", &out, &err);
    cr_expect_eq(rc, 0, "%s", err);
    cr_expect(strstr(out, "\"fraction_of_block_read\"") && strstr(out, "\"context\": 300"), "%s", out);
    free(out);
    free(err);
    rc = run_nanovllm("bench --attention --device cpu --num-seqs 1000 --input-len 40000", &out, &err);
    cr_expect_eq(rc, 1);
    cr_expect(strstr(err, "GB of cache"), "%s", err);
    free(out);
    free(err);
}

/* --dtype reaches the CPU runner (its start-up line says what the matmuls
 * take) and auto is bf16 exactly where the CPU has bf16 dot products. */
Test(cli, dtype_choice) {
    const char *base = "generate --model " TINY_MODEL " --device cpu --prompt-ids 1 --max-tokens 1";
    const char *flags[] = {" --dtype float32", " --dtype bfloat16", ""};
    bool native = cpu_isa_active() >= CPU_ISA_AVX512_BF16;
    const char *want[] = {"float32 matmul inputs", "bf16 matmul inputs",
                          native ? "bf16 matmul inputs" : "float32 matmul inputs"};
    for (int i = 0; i < 3; i++) {
        char args[512], *out, *err;
        snprintf(args, sizeof args, "%s%s", base, flags[i]);
        cr_expect_eq(run_nanovllm(args, &out, &err), 0, "%s", err);
        cr_expect(strstr(err, want[i]), "%s: %s", args, err);
        free(out);
        free(err);
    }
}

/* --kv-cache-dtype reaches the CPU runner: its start-up line names the
 * cache, and one byte per value holds twice bf16's tokens (four times
 * float32's) in the same --kv-cache-memory. The attention benchmark takes
 * it too, and so does the CUDA runner where a GPU is present. */
static long kv_tokens(const char *log) {
    const char *at = strstr(log, " tokens = ");
    return at ? atol(at + strlen(" tokens = ")) : -1;
}

Test(cli, kv_cache_dtype_choice) {
    const char *base = "generate --model " TINY_MODEL " --device cpu --prompt-ids 1,2,3 --max-tokens 3 "
                       "--ignore-eos --kv-cache-memory 48MiB --kv-cache-dtype ";
    const char *flags[] = {"fp8", "fp8_e4m3", "bfloat16", "float32"};
    const char *want[] = {"fp8_e4m3 (scales 1.0) KV cache", "fp8_e4m3 (scales 1.0) KV cache", "bf16 KV cache",
                          "float32 KV cache"};
    long tokens[4];
    for (int i = 0; i < 4; i++) {
        char args[512], *out, *err;
        snprintf(args, sizeof args, "%s%s", base, flags[i]);
        cr_expect_eq(run_nanovllm(args, &out, &err), 0, "%s", err);
        cr_expect(strstr(err, want[i]), "%s: %s", args, err);
        tokens[i] = kv_tokens(err);
        free(out);
        free(err);
    }
    cr_expect(tokens[0] > 0 && tokens[0] == tokens[1] && tokens[0] == 2 * tokens[2] && tokens[0] == 4 * tokens[3],
              "KV tokens fp8 %ld, bf16 %ld, float32 %ld", tokens[0], tokens[2], tokens[3]);

    char *out, *err;
    int rc = run_nanovllm("bench --attention --device cpu --kv-cache-dtype fp8 --num-seqs 2 --input-len 40 --json",
                          &out, &err);
    cr_expect_eq(rc, 0, "%s", err);
    cr_expect(strstr(out, "\"kv_cache_dtype\": \"fp8_e4m3\""), "%s", out);
    free(out);
    free(err);

    char why[256];
    if (cuda_device_probe(why, sizeof why) > 0) {
        rc = run_nanovllm("generate --model " TINY_MODEL " --prompt-ids 1 --device cuda --kv-cache-dtype fp8",
                          &out, &err);
        cr_expect_eq(rc, 0, "%s", err);
        cr_expect(strstr(err, "fp8 e4m3 KV cache"), "%s", err);
        free(out);
        free(err);
    }
}

Test(cli, chunked_prefill_matches_one_step) {
    char *one, *chunked, *err;
    const char *base = "generate --model " TINY_MODEL " --quiet --ignore-eos --max-tokens 5 "
                       "--prompt-ids 100,200,300,400,500,600,700,800,900,1000,1100,1200";
    cr_assert_eq(run_nanovllm(base, &one, &err), 0, "%s", err);
    free(err);
    char args[512];
    snprintf(args, sizeof args, "%s --max-num-batched-tokens 5 --block-size 16", base);
    cr_assert_eq(run_nanovllm(args, &chunked, &err), 0, "%s", err);
    cr_expect_str_eq(one, chunked);
    free(one);
    free(chunked);
    free(err);
}

/* Seeded sampling through the CLI: n samples, reproducible, JSON "choices". */
Test(cli, seeded_samples) {
    const char *args = "generate --model " TINY_MODEL " --prompt-ids 9707,11,1879 --max-tokens 6 "
                       "--temperature 0.8 --top-k 40 --seed 1 --n 3 --json --quiet";
    char *out1, *out2, *err;
    cr_assert_eq(run_nanovllm(args, &out1, &err), 0, "%s", err);
    free(err);
    cr_assert_eq(run_nanovllm(args, &out2, &err), 0, "%s", err);
    free(err);
    cr_expect_str_eq(out1, out2, "the same seed gives the same samples");
    json_t *res = json_loads(out1, JSON_ALLOW_NUL, NULL);
    cr_assert(res, "%s", out1);
    json_t *choices = json_object_get(res, "choices");
    cr_assert_eq(json_array_size(choices), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *c = json_array_get(choices, i);
        cr_expect_eq(json_array_size(json_object_get(c, "ids")), 6);
        cr_expect_str_eq(json_string_value(json_object_get(c, "finish_reason")), "length");
    }
    cr_expect(!json_equal(json_object_get(json_array_get(choices, 0), "ids"),
                          json_object_get(json_array_get(choices, 1), "ids")));
    json_decref(res);
    free(out1);
    free(out2);
}

/* bench --admission: a 200-token prompt arriving while 4 sequences decode is
 * prefilled in ceil(200 / (64 - 4)) = 4 steps of a 64-token budget, each of
 * which also decodes all 4 (the scheduler's shared step); with a budget
 * past the prompt, one step. A prompt past max_model_len is refused. */
Test(cli, admission_bench_shares_steps) {
    const int budgets[] = {64, 512}, want_steps[] = {4, 1};
    for (int i = 0; i < 2; i++) {
        char args[256], *out, *err;
        snprintf(args, sizeof args,
                 "bench --admission --model " TINY_MODEL " --device cpu --num-seqs 4 --input-len 200 "
                 "--max-num-batched-tokens %d --json --quiet", budgets[i]);
        int rc = run_nanovllm(args, &out, &err);
        cr_assert_eq(rc, 0, "%s", err);
        json_error_t jerr;
        json_t *j = json_loads(out, 0, &jerr);
        cr_assert(j, "%s: %s", jerr.text, out);
        int steps = (int)json_integer_value(json_object_get(j, "admission_steps"));
        int tokens = (int)json_integer_value(json_object_get(j, "admission_decode_tokens"));
        cr_expect_eq(steps, want_steps[i], "budget %d: %d steps", budgets[i], steps);
        cr_expect_eq(tokens, 4 * want_steps[i], "budget %d: %d decode tokens meanwhile", budgets[i], tokens);
        cr_expect_gt(json_real_value(json_object_get(j, "ttft_s")), 0.0);
        cr_expect_gt(json_real_value(json_object_get(j, "steady_decode_tokens_per_s")), 0.0);
        json_decref(j);
        free(out);
        free(err);
    }
    char *out, *err;
    int rc = run_nanovllm("bench --admission --model " TINY_MODEL " --device cpu --num-seqs 2 --input-len 1000000 "
                          "--max-model-len 4096 --quiet", &out, &err);
    cr_expect_eq(rc, 1);
    cr_expect(strstr(err, "max_model_len 4096"), "%s", err);
    free(out);
    free(err);
}
