/*
 * test_cuda_runner.c - the CUDA runner end to end on the tiny model: golden
 * logits and greedy tokens (the MoE tiny model's against the CPU runner at
 * the GPU's precision, position by position), the same batches as
 * the CPU runner (scattered
 * blocks, cached prefixes, mixed prefill and decode), the engine under
 * forced preemption, and the host-sampled path. Skipped, with the reason,
 * where there is no GPU.
 *
 * Tolerances (issue: CUDA backend, part 1): the GPU path rounds GEMM inputs
 * and the KV cache to bf16, which moves the tiny model's logits by up to a
 * few tenths, so logits must agree to a relative error of 2e-2 and greedy
 * tokens only up to the first step whose reference margin (top-1 minus
 * top-2 logit) is below 0.1.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "cuda_test.h"
#include "helpers.h"
#include "cpu/cpu_ops.h"
#include "cpu/cpu_runner.h"
#include "cuda/cuda_runner.h"
#include "engine/engine.h"

#define VOCAB 151936
#define LOGIT_REL_TOL 2e-2
#define MARGIN_FLOOR 0.1

static Runner *open_model(const char *model, ModelWeights *w, const char *device, int block_size,
                          int blocks, bool eager) {
    Error err = {0};
    cr_assert(model_weights_load(w, model, &err) == 0, "%s", err.msg);
    const bool cuda = strcmp(device, "cuda") == 0;
    /* The CPU runner is the reference: float32 cache (CUDA's is bf16). */
    RunnerOptions o = runner_test_options(device, &w->config, block_size, blocks, cuda ? KV_CACHE_BF16 : KV_CACHE_F32,
                                          cuda ? COMPUTE_BF16 : COMPUTE_F32, eager);
    Runner *r = cuda ? cuda_runner_create(w, &o, &err) : cpu_runner_create(w, &o, &err);
    cr_assert(r, "%s runner: %s", device, err.msg);
    cr_assert_str_eq(r->device, device);
    return r;
}

static Runner *open_runner_eager(ModelWeights *w, const char *device, int block_size, int blocks,
                                 bool eager) {
    return open_model(TINY_MODEL, w, device, block_size, blocks, eager);
}

static Runner *open_runner(ModelWeights *w, const char *device, int block_size, int blocks) {
    return open_runner_eager(w, device, block_size, blocks, false);
}

/* Block ids spread over the cache (never in order), distinct per salt. */
static void scattered_table(int32_t *t, int n, int num_blocks, int salt) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(((long)(i + salt) * 37 + 5) % num_blocks);
}

/* Index of the first greedy step whose margin is below the floor (or steps). */
static int trusted_steps(json_t *margins, int steps) {
    for (int s = 0; s < steps; s++)
        if (json_real_value(json_array_get(margins, (size_t)s)) < MARGIN_FLOOR) return s;
    return steps;
}

static void golden_on_the_gpu(const GoldenFixture *f) {
    require_gpu();
    ModelWeights w;
    Runner *r = open_model(f->model, &w, "cuda", 16, 256, false);
    json_t *g = golden_load_from(f);
    json_t *prompts = json_object_get(g, "prompts");
    float *all = malloc(sizeof(float) * 300 * VOCAB);
    cr_assert(all);
    for (size_t i = 0; i < json_array_size(prompts); i++) {
        json_t *p = json_array_get(prompts, i);
        const char *name = json_string_value(json_object_get(p, "name"));
        int n, steps;
        int32_t *prompt = json_ids(json_object_get(p, "prompt_ids"), &n);
        int32_t *want = json_ids(json_object_get(p, "greedy_ids"), &steps);
        int nb = (n + steps + 15) / 16;
        int32_t table[32];
        scattered_table(table, nb, r->num_kv_blocks, (int)i);
        Error err = {0};
        RunnerSeq seq = {.tokens = prompt, .num_tokens = n, .start_pos = 0, .block_table = table,
                         .num_blocks = nb, .compute_logits = true};
        RunnerBatch batch = {.seqs = &seq, .num_seqs = 1, .all_logits = all};
        int32_t got[64];
        cr_assert(runner_step(r, &batch, &got[0], &err) == 0, "%s", err.msg);
        float *golden = golden_logits_from(f, name); /* NULL: not in this fixture's copy */
        if (golden) {
            double rel = rel_error(all + (size_t)(n - 1) * VOCAB, golden, VOCAB);
            cr_expect(rel <= LOGIT_REL_TOL, "%s %s: last-position logits relative error %g", f->model,
                      name, rel);
            cr_log_info("%s %s: logits relative error %.2e", f->model, name, rel);
            free(golden);
        }

        /* greedy through the cache, argmax on the GPU */
        batch.all_logits = NULL;
        for (int s = 1; s < steps; s++) {
            seq = (RunnerSeq){.tokens = &got[s - 1], .num_tokens = 1, .start_pos = n + s - 1,
                              .block_table = table, .num_blocks = nb, .compute_logits = true};
            cr_assert(runner_step(r, &batch, &got[s], &err) == 0, "%s", err.msg);
        }
        int trusted = trusted_steps(json_object_get(p, "greedy_margins"), steps);
        for (int s = 0; s < trusted; s++)
            cr_expect_eq(got[s], want[s], "%s step %d: GPU %d, golden %d (margin >= %.1f)", name, s,
                         got[s], want[s], MARGIN_FLOOR);
        free(prompt);
        free(want);
    }
    free(all);
    json_decref(g);
    runner_destroy(r);
    model_weights_free(&w);
}

Test(cuda_runner, golden_logits_and_greedy_tokens, .timeout = 120) { golden_on_the_gpu(&TINY_DENSE); }
/* ---- the MoE fixture: against the CPU runner at the GPU's precision ------------------------
 *
 * The tiny MoE's top-4 routing has near-ties that bf16 rounding flips: the
 * CPU runner with bf16 matmul inputs and a bf16 KV cache shows the same
 * error spikes against the float64 golden, at the same positions, as the
 * GPU (len016: ~5e-3 at every position, then 1.0 at position 15, on both).
 * So the GPU is compared here, position by position over the prompt and
 * its greedy continuation, with the CPU runner at its own precision; the
 * float64 golden stays the float32 CPU path's check (test_golden.c,
 * golden_moe::*).
 *
 * Every position's logits must be within MOE_POS_TOL of the CPU at bf16 or
 * of the CPU at float32: at a near-tie the GPU may take either routing, but
 * its logits must be one of the two legitimate results. 5e-2 is the bf16
 * noise of this model plus a margin: the CPU at bf16 is 4e-3 to 2e-2 from
 * float32 away from flips, up to 5e-2 downstream of one, 0.1 to 1.0 at a
 * flip. Some ties are so close that a third summation order breaks them a
 * third way, and the positions after such a flip read its KV: the CPU
 * runner with float32 matmuls and a bf16 KV cache, standing in for the GPU
 * on the development machine, matched neither at 4 of len064's 79
 * positions and 1 of len300's 315. So at most 2 + positions/16 positions
 * may match neither; a wrong kernel misses at nearly every position (that
 * stand-in without the top-k renormalisation, or with 3 experts per token
 * instead of 4, matched neither at every position of every prompt). The
 * median of the nearer distance (that stand-in: at most 3.4e-3; those
 * wrong ones: 0.35 to 0.5) must stay under the dense tolerance,
 * LOGIT_REL_TOL, so a small systematic error cannot hide under the
 * per-position limit. Where the GPU matches the bf16 CPU, its
 * argmax must too wherever the CPU's top-1/top-2 margin exceeds four
 * standard deviations of the difference of two logits at the measured
 * error (sqrt(2) x the per-logit rms difference), and never less than
 * MARGIN_FLOOR. */
#define MOE_POS_TOL 5e-2

static Runner *open_cpu_at(const char *model, ModelWeights *w, ComputeDtype dtype, KvCacheDtype kv) {
    Error err = {0};
    cr_assert(model_weights_load(w, model, &err) == 0, "%s", err.msg);
    RunnerOptions o = runner_test_options("cpu", &w->config, 16, 64, kv, dtype, true);
    Runner *r = cpu_runner_create(w, &o, &err);
    cr_assert(r, "cpu runner: %s", err.msg);
    return r;
}

/* Every position's logits of tokens[0..n) from one prefill. */
static void cpu_all_logits(Runner *r, const int32_t *tokens, int n, float *out) {
    int32_t table[64];
    int nb = (n + 15) / 16;
    cr_assert(nb <= 64);
    for (int b = 0; b < nb; b++) table[b] = b;
    Error err = {0};
    int32_t tok;
    RunnerSeq seq = {.tokens = tokens, .num_tokens = n, .block_table = table, .num_blocks = nb,
                     .compute_logits = true};
    RunnerBatch batch = {.seqs = &seq, .num_seqs = 1, .all_logits = out};
    cr_assert(runner_step(r, &batch, &tok, &err) == 0, "%s", err.msg);
}

static double rms_diff(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s / (double)n);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

Test(cuda_runner, moe_golden_logits_and_greedy_tokens, .timeout = 300) {
    require_gpu();
    const GoldenFixture *f = &TINY_MOE;
    ModelWeights wg, wb, wf;
    Runner *gpu = open_model(f->model, &wg, "cuda", 16, 256, false);
    Runner *cbf = open_cpu_at(f->model, &wb, COMPUTE_BF16, KV_CACHE_BF16);
    Runner *cf32 = open_cpu_at(f->model, &wf, COMPUTE_F32, KV_CACHE_F32);
    json_t *g = golden_load_from(f);
    json_t *prompts = json_object_get(g, "prompts");
    for (size_t i = 0; i < json_array_size(prompts); i++) {
        json_t *p = json_array_get(prompts, i);
        const char *name = json_string_value(json_object_get(p, "name"));
        int n, steps;
        int32_t *prompt = json_ids(json_object_get(p, "prompt_ids"), &n);
        free(json_ids(json_object_get(p, "greedy_ids"), &steps));
        int P = n + steps - 1; /* the prompt and the continuation but its last token */
        int32_t *seq_ids = malloc(sizeof(int32_t) * (size_t)(n + steps));
        float *lg = malloc(sizeof(float) * (size_t)P * VOCAB), *lb = malloc(sizeof(float) * (size_t)P * VOCAB);
        float *lf = malloc(sizeof(float) * (size_t)P * VOCAB);
        double *nearer = malloc(sizeof(double) * (size_t)P);
        cr_assert(seq_ids && lg && lb && lf && nearer);
        memcpy(seq_ids, prompt, sizeof(int32_t) * (size_t)n);

        /* the GPU: prefill, then greedy decode through its cache, every logit kept */
        int nb = (n + steps + 15) / 16;
        int32_t table[32];
        scattered_table(table, nb, gpu->num_kv_blocks, (int)i);
        Error err = {0};
        RunnerSeq seq = {.tokens = prompt, .num_tokens = n, .start_pos = 0, .block_table = table,
                         .num_blocks = nb, .compute_logits = true};
        RunnerBatch batch = {.seqs = &seq, .num_seqs = 1, .all_logits = lg};
        cr_assert(runner_step(gpu, &batch, &seq_ids[n], &err) == 0, "%s", err.msg);
        for (int s = 1; s < steps; s++) {
            seq = (RunnerSeq){.tokens = &seq_ids[n + s - 1], .num_tokens = 1, .start_pos = n + s - 1,
                              .block_table = table, .num_blocks = nb, .compute_logits = true};
            batch.all_logits = lg + (size_t)(n + s - 1) * VOCAB;
            cr_assert(runner_step(gpu, &batch, &seq_ids[n + s], &err) == 0, "%s", err.msg);
        }
        /* the CPU at bf16 and at float32 on the GPU's tokens */
        cpu_all_logits(cbf, seq_ids, P, lb);
        cpu_all_logits(cf32, seq_ids, P, lf);

        int neither = 0, first_neither = -1, argmax_bad = 0;
        char line[4096];
        size_t used = 0;
        line[0] = 0;
        for (int q = 0; q < P; q++) {
            const float *a = lg + (size_t)q * VOCAB, *b = lb + (size_t)q * VOCAB, *c = lf + (size_t)q * VOCAB;
            double eb = rel_error(a, b, VOCAB), ef = rel_error(a, c, VOCAB);
            nearer[q] = eb < ef ? eb : ef;
            if (used + 16 < sizeof line) used += (size_t)snprintf(line + used, sizeof line - used, " %.0e", eb);
            if (nearer[q] > MOE_POS_TOL) {
                if (first_neither < 0) first_neither = q;
                neither++;
                cr_log_info("%s position %d: GPU vs CPU bf16 %.2e, vs CPU f32 %.2e, CPU bf16 vs f32 %.2e",
                            name, q, eb, ef, rel_error(b, c, VOCAB));
                continue;
            }
            if (eb > MOE_POS_TOL) continue; /* took the float32 routing: argmax judged by that match */
            double margin, gmargin;
            int want = argmax_margin(b, VOCAB, &margin), got = argmax_margin(a, VOCAB, &gmargin);
            double floor = 4.0 * sqrt(2.0) * rms_diff(a, b, VOCAB);
            if (floor < MARGIN_FLOOR) floor = MARGIN_FLOOR;
            if (margin >= floor && got != want) {
                argmax_bad++;
                cr_log_error("%s position %d: GPU argmax %d, CPU bf16 %d at margin %.3f (floor %.3f)", name,
                             q, got, want, margin, floor);
            }
        }
        qsort(nearer, (size_t)P, sizeof(double), cmp_double);
        double median = nearer[P / 2];
        cr_log_info("%s %s: GPU vs CPU bf16 per position:%s", f->model, name, line);
        cr_log_info("%s %s: %d positions, median nearer error %.2e, %d match neither CPU (first %d)",
                    f->model, name, P, median, neither, first_neither);
        cr_expect(neither <= 2 + P / 16,
                  "%s: %d of %d positions match neither the CPU at bf16 nor at float32 within %g (first %d)",
                  name, neither, P, MOE_POS_TOL, first_neither);
        cr_expect(median <= LOGIT_REL_TOL, "%s: median per-position error %g over %g", name, median,
                  LOGIT_REL_TOL);
        cr_expect(argmax_bad == 0, "%s: %d positions' argmax differs at a clear margin", name, argmax_bad);
        free(prompt);
        free(seq_ids);
        free(lg);
        free(lb);
        free(lf);
        free(nearer);
    }
    json_decref(g);
    runner_destroy(gpu);
    runner_destroy(cbf);
    runner_destroy(cf32);
    model_weights_free(&wg);
    model_weights_free(&wb);
    model_weights_free(&wf);
}

/* One batch both runners compute: a prompt from zero, a chunk on top of a
 * cached prefix (filled by an earlier step) and decodes deep in their
 * contexts, every token's logits compared. */
Test(cuda_runner, same_batches_as_the_cpu_runner, .timeout = 120) {
    require_gpu();
    ModelWeights wc, wg;
    Runner *cpu = open_runner(&wc, "cpu", 16, 128), *gpu = open_runner(&wg, "cuda", 16, 128);
    uint64_t seed = 5;
    int32_t ids[4][400];
    for (int s = 0; s < 4; s++)
        for (int i = 0; i < 400; i++) ids[s][i] = (int32_t)((test_uniform(&seed) + 1.0f) * 75000);
    int32_t tables[4][32];
    for (int s = 0; s < 4; s++) scattered_table(tables[s], 26, 128, 26 * s);
    /* step 1: sequence 1's first 40 tokens, 2's first 250, 3's first 399 */
    RunnerSeq warm[3] = {
        {.tokens = ids[1], .num_tokens = 40, .block_table = tables[1], .num_blocks = 26, .compute_logits = false},
        {.tokens = ids[2], .num_tokens = 250, .block_table = tables[2], .num_blocks = 26, .compute_logits = true},
        {.tokens = ids[3], .num_tokens = 200, .block_table = tables[3], .num_blocks = 26, .compute_logits = true},
    };
    RunnerSeq warm2 = {.tokens = ids[3] + 200, .num_tokens = 199, .start_pos = 200, .block_table = tables[3],
                       .num_blocks = 26, .compute_logits = true};
    /* step 2: 0 from zero (50 tokens), 1's next 30, decodes of 2 and 3 */
    RunnerSeq mixed[4] = {
        {.tokens = ids[0], .num_tokens = 50, .block_table = tables[0], .num_blocks = 26, .compute_logits = true},
        {.tokens = ids[1] + 40, .num_tokens = 30, .start_pos = 40, .block_table = tables[1], .num_blocks = 26, .compute_logits = true},
        {.tokens = ids[2] + 250, .num_tokens = 1, .start_pos = 250, .block_table = tables[2], .num_blocks = 26, .compute_logits = true},
        {.tokens = ids[3] + 399, .num_tokens = 1, .start_pos = 399, .block_table = tables[3], .num_blocks = 26, .compute_logits = true},
    };
    size_t rows = 82;
    float *a = malloc(sizeof(float) * rows * VOCAB), *b = malloc(sizeof(float) * rows * VOCAB);
    cr_assert(a && b);
    Runner *runners[2] = {cpu, gpu};
    float *outs[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        Error err = {0};
        int32_t tok[4];
        RunnerBatch b1 = {.seqs = warm, .num_seqs = 3};
        RunnerBatch b2 = {.seqs = &warm2, .num_seqs = 1};
        RunnerBatch b3 = {.seqs = mixed, .num_seqs = 4, .all_logits = outs[k]};
        cr_assert(runner_step(runners[k], &b1, tok, &err) == 0, "%s", err.msg);
        cr_assert_eq(tok[0], -1, "no logits, no token");
        cr_assert(runner_step(runners[k], &b2, tok, &err) == 0, "%s", err.msg);
        cr_assert(runner_step(runners[k], &b3, tok, &err) == 0, "%s", err.msg);
    }
    double rel = rel_error(b, a, rows * VOCAB);
    cr_expect(rel <= LOGIT_REL_TOL, "GPU vs CPU logits: relative error %g", rel);
    cr_log_info("GPU vs CPU, mixed batch: logits relative error %.2e", rel);
    free(a);
    free(b);
    runner_destroy(cpu);
    runner_destroy(gpu);
    model_weights_free(&wc);
    model_weights_free(&wg);
}

/* ---- the engine on the GPU -------------------------------------------------------------- */

#define REQS 16
#define OUT 48

typedef struct Result {
    int32_t ids[OUT];
    float margin[OUT]; /* top-1 minus top-2 logprob (= logit) gap, when asked */
    int num;
    FinishReason finish;
} Result;

static void collect(const EngineOutput *o, void *user) {
    Result *r = user;
    if (o->has_token && r->num < OUT) {
        if (o->logprobs && o->logprobs->num_top >= 2)
            r->margin[r->num] = o->logprobs->top_logprobs[0] - o->logprobs->top_logprobs[1];
        r->ids[r->num++] = o->token;
    }
    if (o->finish != FINISH_NONE) r->finish = o->finish;
}

/* base: the requests' sampling parameters (NULL: greedy); each request gets its own seed. */
static EngineStats run_engine_with(const char *device, int blocks, int logprobs, const SamplingParams *base,
                                   Result *res) {
    ModelWeights w;
    Runner *r = open_runner(&w, device, 16, blocks);
    Error err = {0};
    Engine *e = engine_create(&w, r, &err);
    cr_assert(e, "%s", err.msg);
    uint64_t seed = 9;
    for (int i = 0; i < REQS; i++) {
        int32_t prompt[20];
        int len = 3 + (i * 7) % 15;
        for (int j = 0; j < len; j++) prompt[j] = (int32_t)((test_uniform(&seed) + 1.0f) * 75000);
        SamplingParams p = base ? *base : sampling_params_default();
        p.has_seed = true;
        p.seed = 1000 + (uint64_t)i;
        p.max_tokens = OUT;
        p.ignore_eos = true;
        p.logprobs = logprobs;
        EngineRequest req = {.prompt = prompt, .prompt_len = len, .params = p, .on_output = collect, .user = &res[i]};
        uint64_t id;
        cr_assert(engine_submit(e, &req, &id, &err) == 0, "%s", err.msg);
    }
    for (int steps = 0; engine_has_work(e); steps++) {
        cr_assert(engine_step(e, &err) >= 0, "%s", err.msg);
        cr_assert_lt(steps, 100000);
    }
    EngineStats st = engine_stats(e);
    engine_destroy(e);
    runner_destroy(r);
    model_weights_free(&w);
    return st;
}

static EngineStats run_engine(const char *device, int blocks, int logprobs, Result *res) {
    return run_engine_with(device, blocks, logprobs, NULL, res);
}

/* 16 requests outgrowing 12 blocks on the GPU: preemption after preemption,
 * and each request still gets the CPU's greedy tokens wherever the CPU's
 * margin says the choice is clear. */
Test(cuda_runner, engine_with_preemption_matches_the_cpu, .timeout = 180) {
    require_gpu();
    Result *cpu = calloc(REQS, sizeof *cpu), *gpu = calloc(REQS, sizeof *gpu);
    run_engine("cpu", 256, 2, cpu);
    EngineStats st = run_engine("cuda", 12, -1, gpu);
    cr_expect_geq(st.preemptions, 5, "only %lld preemptions", st.preemptions);
    int compared = 0;
    for (int i = 0; i < REQS; i++) {
        cr_expect_eq(gpu[i].num, OUT);
        cr_expect_eq(gpu[i].finish, FINISH_LENGTH);
        for (int s = 0; s < OUT && cpu[i].margin[s] >= MARGIN_FLOOR; s++, compared++)
            cr_expect_eq(gpu[i].ids[s], cpu[i].ids[s], "request %d step %d: GPU %d, CPU %d (margin %.3f)",
                         i, s, gpu[i].ids[s], cpu[i].ids[s], cpu[i].margin[s]);
    }
    cr_log_info("engine on the GPU: %lld preemptions; %d of %d tokens compared", st.preemptions, compared,
                REQS * OUT);
    free(cpu);
    free(gpu);
}

/* Greedy with logprobs goes through the host sampler, plain greedy through
 * the GPU's argmax: same logits, so the same tokens. */
Test(cuda_runner, host_and_gpu_sampling_paths_agree, .timeout = 120) {
    require_gpu();
    Result *plain = calloc(REQS, sizeof *plain), *with_lp = calloc(REQS, sizeof *with_lp);
    run_engine("cuda", 256, -1, plain);
    run_engine("cuda", 256, 2, with_lp);
    for (int i = 0; i < REQS; i++)
        cr_expect(memcmp(plain[i].ids, with_lp[i].ids, sizeof plain[i].ids) == 0, "request %d", i);
    free(plain);
    free(with_lp);
}

/* Decode steps replayed from CUDA graphs (batches padded to their bucket,
 * attention split as the bucket says) against the same steps launched
 * kernel by kernel: batch sizes on and between buckets, contexts of
 * different lengths crossing blocks. */
Test(cuda_runner, decode_graphs_match_eager_steps, .timeout = 120) {
    require_gpu();
    ModelWeights wg, we;
    Runner *graphs = open_runner(&wg, "cuda", 16, 256), *eager = open_runner_eager(&we, "cuda", 16, 256, true);
    cr_assert(strstr(graphs->description, "decode graphs") && !strstr(graphs->description, " 0 decode graphs"),
              "%s", graphs->description);
    uint64_t seed = 77;
    enum { SEQS = 16, BLOCKS = 13 };
    int32_t ids[SEQS][BLOCKS * 16], tables[SEQS][BLOCKS], len[SEQS];
    RunnerSeq seqs[SEQS];
    for (int s = 0; s < SEQS; s++) {
        len[s] = 5 + 12 * s; /* 5 .. 185 */
        for (int i = 0; i < BLOCKS * 16; i++) ids[s][i] = (int32_t)((test_uniform(&seed) + 1.0f) * 75000);
        scattered_table(tables[s], BLOCKS, 256, BLOCKS * s);
        seqs[s] = (RunnerSeq){.tokens = ids[s], .num_tokens = len[s], .block_table = tables[s],
                              .num_blocks = BLOCKS, .compute_logits = false};
    }
    Runner *runners[2] = {graphs, eager};
    Error err = {0};
    int32_t tok[SEQS];
    for (int k = 0; k < 2; k++)
        for (int s = 0; s < SEQS; s++) {
            RunnerBatch one = {.seqs = &seqs[s], .num_seqs = 1};
            cr_assert(runner_step(runners[k], &one, tok, &err) == 0, "%s", err.msg);
        }
    float *a = malloc(sizeof(float) * SEQS * VOCAB), *b = malloc(sizeof(float) * SEQS * VOCAB);
    cr_assert(a && b);
    const int sizes[] = {1, 3, 8, 9, 16};
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        int n = sizes[t];
        for (int s = 0; s < n; s++) /* the next token of each: the same KV writes on both */
            seqs[s] = (RunnerSeq){.tokens = &ids[s][len[s]], .num_tokens = 1, .start_pos = len[s],
                                  .block_table = tables[s], .num_blocks = BLOCKS, .compute_logits = true};
        int32_t tg[SEQS], te[SEQS];
        RunnerBatch bg = {.seqs = seqs, .num_seqs = n, .last_logits = a};
        RunnerBatch be = {.seqs = seqs, .num_seqs = n, .last_logits = b};
        cr_assert(runner_step(graphs, &bg, tg, &err) == 0, "%s", err.msg);
        cr_assert(runner_step(eager, &be, te, &err) == 0, "%s", err.msg);
        double rel = rel_error(a, b, (size_t)n * VOCAB);
        cr_expect(rel <= 1e-3, "batch %d: graph vs eager logits relative error %g", n, rel);
        for (int s = 0; s < n; s++) {
            cr_expect_eq(tg[s], argmax(a + (size_t)s * VOCAB, VOCAB), "batch %d seq %d: token vs its logits", n, s);
            float *row = b + (size_t)s * VOCAB;
            int best = argmax(row, VOCAB);
            float second = -INFINITY;
            for (int i = 0; i < VOCAB; i++)
                if (i != best && row[i] > second) second = row[i];
            if (row[best] - second >= MARGIN_FLOOR)
                cr_expect_eq(tg[s], te[s], "batch %d seq %d: graph %d, eager %d", n, s, tg[s], te[s]);
        }
        for (int s = 0; s < n; s++) len[s]++;
    }
    free(a);
    free(b);
    runner_destroy(graphs);
    runner_destroy(eager);
    model_weights_free(&wg);
    model_weights_free(&we);
}

/* Seeded sampling with every control: the GPU sampler (no logprobs) and the
 * CPU sampler (logprobs send rows to the host) see the very same logits, so
 * they must choose the very same tokens (cuda_sampler.h's promise). */
Test(cuda_runner, gpu_sampler_matches_the_cpu_sampler, .timeout = 180) {
    require_gpu();
    SamplingParams variants[4];
    for (int v = 0; v < 4; v++) variants[v] = sampling_params_default();
    variants[0].temperature = 1.0f;
    variants[1].temperature = 0.7f;
    variants[1].top_p = 0.9f;
    variants[1].top_k = 40;
    variants[1].min_p = 0.02f;
    variants[2].temperature = 1.3f;
    variants[2].repetition_penalty = 1.3f;
    variants[2].presence_penalty = 0.5f;
    variants[2].frequency_penalty = 0.3f;
    variants[2].top_p = 0.5f;
    variants[3].temperature = 0.0f; /* greedy with penalties */
    variants[3].repetition_penalty = 0.8f;
    variants[3].frequency_penalty = -0.4f;
    for (int v = 0; v < 4; v++) {
        Result *gpu = calloc(REQS, sizeof *gpu), *host = calloc(REQS, sizeof *host);
        run_engine_with("cuda", 256, -1, &variants[v], gpu);
        run_engine_with("cuda", 256, 0, &variants[v], host);
        for (int i = 0; i < REQS; i++)
            cr_expect(memcmp(gpu[i].ids, host[i].ids, sizeof gpu[i].ids) == 0,
                      "variant %d request %d: GPU and CPU samplers chose differently", v, i);
        free(gpu);
        free(host);
    }
}
