/*
 * test_engine.c - the engine (scheduler + block manager + sampler) on the CPU
 * runner with the tiny model: batching, preemption and chunking never change
 * what a request gets; bad requests fail alone and clearly. The cache is
 * float32 unless a test says otherwise; those about batches, preemption,
 * chunking and the prefix cache also run with a bf16 cache (_bf16) and an
 * fp8 (e4m3) one (_fp8): the same invariants, the same cache dtype on both
 * sides of each comparison.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "cpu/cpu_runner.h"
#include "engine/engine.h"

#define MAX_SAMPLES 4
#define MAX_OUT 64

typedef struct Collected {
    int32_t ids[MAX_SAMPLES][MAX_OUT];
    int num[MAX_SAMPLES];
    FinishReason finish[MAX_SAMPLES];
    char error[256];
    ErrorKind error_kind;
    int cached;
    int finished; /* samples finished */
} Collected;

static void collect(const EngineOutput *o, void *user) {
    Collected *c = user;
    cr_assert_lt(o->sample_index, MAX_SAMPLES);
    if (o->has_token) {
        cr_assert_lt(c->num[o->sample_index], MAX_OUT);
        c->ids[o->sample_index][c->num[o->sample_index]++] = o->token;
        cr_assert_eq(o->num_output_tokens, c->num[o->sample_index]);
    }
    c->cached = o->num_cached_tokens;
    if (o->finish != FINISH_NONE) {
        c->finish[o->sample_index] = o->finish;
        c->finished++;
        if (o->error) snprintf(c->error, sizeof c->error, "%s", o->error);
        if (o->error) c->error_kind = o->error_kind;
    }
}

typedef struct TinyEngine {
    ModelWeights w;
    Runner *runner;
    Engine *e;
} TinyEngine;

/* The KV cache dtype of every engine a test opens (each test runs in its own
 * process, so a test sets it once at its start). */
static KvCacheDtype kv_dtype = KV_CACHE_F32;

static void open_engine(TinyEngine *t, int block_size, int num_blocks, int max_batched) {
    Error err = {0};
    cr_assert(model_weights_load(&t->w, TINY_MODEL, &err) == 0, "%s", err.msg);
    RunnerOptions o = runner_default_options();
    o.device = "cpu";
    o.block_size = block_size;
    o.kv_cache_dtype = kv_dtype;
    /* float32 matmuls: batch shapes then change only the summation order, so
     * a sequence gets the same tokens alone, in a crowd or from the prefix
     * cache (rounding inputs to bf16 turns those last-bit differences into
     * whole bf16 steps; see golden's bf16 tests for that path). */
    o.dtype = COMPUTE_F32;
    o.kv_cache_bytes = cpu_runner_block_bytes(&t->w.config, block_size, kv_dtype) * (size_t)num_blocks;
    o.max_num_batched_tokens = max_batched;
    o.max_num_seqs = 32;
    o.max_model_len = 1024;
    t->runner = cpu_runner_create(&t->w, &o, &err);
    cr_assert(t->runner, "%s", err.msg);
    t->e = engine_create(&t->w, t->runner, &err);
    cr_assert(t->e, "%s", err.msg);
}

static void close_engine(TinyEngine *t) {
    engine_destroy(t->e);
    runner_destroy(t->runner);
    model_weights_free(&t->w);
}

static void run_to_completion(Engine *e) {
    Error err = {0};
    int steps = 0;
    while (engine_has_work(e)) {
        cr_assert(engine_step(e, &err) >= 0, "%s", err.msg);
        cr_assert_lt(++steps, 100000, "the engine does not finish");
    }
}

static uint64_t submit(Engine *e, const int32_t *prompt, int len, const SamplingParams *p,
                       Collected *c) {
    EngineRequest req = {.prompt = prompt, .prompt_len = len, .params = *p, .on_output = collect, .user = c};
    Error err = {0};
    uint64_t id = 0;
    cr_assert(engine_submit(e, &req, &id, &err) == 0, "%s", err.msg);
    return id;
}

static SamplingParams greedy(int max_tokens) {
    SamplingParams p = sampling_params_default();
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
}

/* Each prompt alone, one request at a time. */
static void run_alone(const int32_t *const *prompts, const int *lens, int n, const SamplingParams *p,
                      Collected *out) {
    TinyEngine t;
    open_engine(&t, 16, 256, 512);
    for (int i = 0; i < n; i++) {
        submit(t.e, prompts[i], lens[i], p, &out[i]);
        run_to_completion(t.e);
    }
    close_engine(&t);
}

static void expect_same(const Collected *a, const Collected *b, int samples, const char *what) {
    for (int s = 0; s < samples; s++) {
        cr_expect_eq(a->num[s], b->num[s], "%s: sample %d lengths %d vs %d", what, s, a->num[s], b->num[s]);
        cr_expect(memcmp(a->ids[s], b->ids[s], sizeof(int32_t) * (size_t)a->num[s]) == 0,
                  "%s: sample %d tokens differ", what, s);
        cr_expect_eq(a->finish[s], b->finish[s], "%s: sample %d finish", what, s);
    }
}

#define N 8
static const int LENS[N] = {1, 7, 16, 31, 40, 64, 90, 130};

static void batch_equals_sequential_and_golden(KvCacheDtype dtype) {
    kv_dtype = dtype;
    int32_t *prompts[N];
    for (int i = 0; i < N; i++) prompts[i] = random_prompt(LENS[i], 100 + i);
    SamplingParams p = greedy(12);
    Collected alone[N] = {0}, together[N] = {0};
    run_alone((const int32_t *const *)prompts, LENS, N, &p, alone);
    TinyEngine t;
    open_engine(&t, 16, 256, 512);
    for (int i = 0; i < N; i++) submit(t.e, prompts[i], LENS[i], &p, &together[i]);
    run_to_completion(t.e);
    for (int i = 0; i < N; i++) {
        expect_same(&alone[i], &together[i], 1, "batched");
        cr_expect_eq(together[i].finish[0], FINISH_LENGTH);
    }
    /* and the golden greedy tokens through the engine */
    json_t *g = golden_load();
    int n, steps;
    json_t *gp = golden_prompt(g, "len300");
    int32_t *prompt = json_ids(json_object_get(gp, "prompt_ids"), &n);
    int32_t *want = json_ids(json_object_get(gp, "greedy_ids"), &steps);
    Collected c = {0};
    SamplingParams p16 = greedy(16);
    submit(t.e, prompt, n, &p16, &c);
    run_to_completion(t.e);
    /* float32: all 16 (every golden margin is >= 0.0075). bf16 cache: the
     * golden README's bf16 rule, up to the first step whose margin is < 0.1;
     * fp8: test_cpu_kv_fp8_model.c's, up to the first margin <= 0.3. */
    int check = 16;
    json_t *margins = json_object_get(gp, "greedy_margins");
    double min_margin = dtype == KV_CACHE_BF16 ? 0.1 : dtype == KV_CACHE_FP8 ? 0.3 : 0;
    for (int s = 0; s < 16; s++)
        if (json_real_value(json_array_get(margins, (size_t)s)) < min_margin) {
            check = s;
            break;
        }
    cr_expect(c.num[0] == 16 && memcmp(c.ids[0], want, sizeof(int32_t) * (size_t)check) == 0,
              "golden greedy tokens differ within the first %d steps", check);
    free(prompt);
    free(want);
    json_decref(g);
    close_engine(&t);
    for (int i = 0; i < N; i++) free(prompts[i]);
}

Test(engine, batch_equals_sequential_and_golden) { batch_equals_sequential_and_golden(KV_CACHE_F32); }
Test(engine, batch_equals_sequential_and_golden_bf16) {
    batch_equals_sequential_and_golden(KV_CACHE_BF16);
}
Test(engine, batch_equals_sequential_and_golden_fp8) {
    batch_equals_sequential_and_golden(KV_CACHE_FP8);
}

/* Short prompts, long outputs: 16 requests are admitted at once (a block
 * each), then outgrow the 12 blocks (up to 5 each would be needed):
 * preemption after preemption, and every request still gets exactly its
 * tokens. */
#define P 16
static void preemption_under_a_tiny_cache(KvCacheDtype dtype) {
    kv_dtype = dtype;
    int lens[P];
    int32_t *prompts[P];
    for (int i = 0; i < P; i++) {
        lens[i] = 3 + (i * 7) % 15;
        prompts[i] = random_prompt(lens[i], 200 + i);
    }
    SamplingParams p = greedy(60);
    Collected *alone = calloc(P, sizeof *alone), *squeezed = calloc(P, sizeof *squeezed);
    run_alone((const int32_t *const *)prompts, lens, P, &p, alone);
    TinyEngine t;
    open_engine(&t, 16, 12, 64);
    for (int i = 0; i < P; i++) submit(t.e, prompts[i], lens[i], &p, &squeezed[i]);
    run_to_completion(t.e);
    EngineStats st = engine_stats(t.e);
    cr_expect_geq(st.preemptions, 10, "only %lld preemptions", st.preemptions);
    for (int i = 0; i < P; i++) {
        expect_same(&alone[i], &squeezed[i], 1, "preempted");
        cr_expect_eq(squeezed[i].finish[0], FINISH_LENGTH);
    }
    cr_expect_eq(st.kv_blocks_used, 0, "every block is free again");
    cr_log_info("tiny cache: %lld preemptions in %lld steps", st.preemptions, st.steps);
    close_engine(&t);
    for (int i = 0; i < P; i++) free(prompts[i]);
    free(alone);
    free(squeezed);
}

Test(engine, preemption_under_a_tiny_cache) { preemption_under_a_tiny_cache(KV_CACHE_F32); }
Test(engine, preemption_under_a_tiny_cache_bf16) { preemption_under_a_tiny_cache(KV_CACHE_BF16); }
Test(engine, preemption_under_a_tiny_cache_fp8) { preemption_under_a_tiny_cache(KV_CACHE_FP8); }

static void chunked_prefill_equals_unchunked(KvCacheDtype dtype) {
    kv_dtype = dtype;
    int32_t *prompt = random_prompt(300, 7);
    SamplingParams p = greedy(10);
    Collected one = {0}, chunked = {0};
    TinyEngine t;
    open_engine(&t, 16, 256, 512);
    submit(t.e, prompt, 300, &p, &one);
    run_to_completion(t.e);
    close_engine(&t);
    open_engine(&t, 16, 256, 24); /* 24 tokens a step: 13 chunks, and decodes ride along */
    submit(t.e, prompt, 300, &p, &chunked);
    int32_t *other = random_prompt(50, 8);
    Collected c2 = {0};
    submit(t.e, other, 50, &p, &c2);
    run_to_completion(t.e);
    expect_same(&one, &chunked, 1, "chunked");
    cr_expect_eq(c2.num[0], 10);
    close_engine(&t);
    free(prompt);
    free(other);
}

Test(engine, chunked_prefill_equals_unchunked) { chunked_prefill_equals_unchunked(KV_CACHE_F32); }
Test(engine, chunked_prefill_equals_unchunked_bf16) {
    chunked_prefill_equals_unchunked(KV_CACHE_BF16);
}
Test(engine, chunked_prefill_equals_unchunked_fp8) {
    chunked_prefill_equals_unchunked(KV_CACHE_FP8);
}

Test(engine, seeded_sampling_ignores_the_batch) {
    int32_t *prompt = random_prompt(20, 9);
    SamplingParams p = greedy(20);
    p.temperature = 0.9f;
    p.top_p = 0.95f;
    p.top_k = 50;
    p.has_seed = true;
    p.seed = 42;
    Collected alone = {0}, crowd = {0}, again = {0};
    TinyEngine t;
    open_engine(&t, 16, 256, 512);
    submit(t.e, prompt, 20, &p, &alone);
    run_to_completion(t.e);
    int32_t *others[5];
    Collected *oc = calloc(5, sizeof *oc);
    for (int i = 0; i < 5; i++) {
        others[i] = random_prompt(10 + 13 * i, 300 + i);
        SamplingParams q = p;
        q.seed = 1000 + (uint64_t)i;
        submit(t.e, others[i], 10 + 13 * i, &q, &oc[i]);
    }
    submit(t.e, prompt, 20, &p, &crowd);
    run_to_completion(t.e);
    expect_same(&alone, &crowd, 1, "seeded in a crowd");
    p.seed = 43;
    submit(t.e, prompt, 20, &p, &again);
    run_to_completion(t.e);
    cr_expect(memcmp(alone.ids[0], again.ids[0], sizeof(int32_t) * 20) != 0,
              "another seed gives other tokens");
    close_engine(&t);
    free(prompt);
    for (int i = 0; i < 5; i++) free(others[i]);
    free(oc);
}

/* The same prompt twice: the second is served from the prefix cache, except
 * the block holding its last token, and gets the same tokens. */
static void cached_prompt(int len, KvCacheDtype dtype) {
    kv_dtype = dtype;
    int32_t *prompt = random_prompt(len, 11);
    SamplingParams p = greedy(8);
    Collected first = {0}, second = {0};
    TinyEngine t;
    open_engine(&t, 16, 256, 512);
    submit(t.e, prompt, len, &p, &first);
    run_to_completion(t.e);
    submit(t.e, prompt, len, &p, &second);
    run_to_completion(t.e);
    cr_expect_eq(first.cached, 0);
    cr_expect_eq(second.cached, (len - 1) / 16 * 16, "len %d: %d cached", len, second.cached);
    expect_same(&first, &second, 1, "cached");
    EngineStats st = engine_stats(t.e);
    cr_expect_eq(st.prefix_hit_tokens, (len - 1) / 16 * 16);
    close_engine(&t);
    free(prompt);
}

Test(engine, fully_cached_prompt) { cached_prompt(45, KV_CACHE_F32); }
Test(engine, prompt_a_multiple_of_the_block_size) { cached_prompt(64, KV_CACHE_F32); }
Test(engine, fully_cached_prompt_bf16) { cached_prompt(45, KV_CACHE_BF16); }
Test(engine, prompt_a_multiple_of_the_block_size_bf16) { cached_prompt(64, KV_CACHE_BF16); }
Test(engine, fully_cached_prompt_fp8) { cached_prompt(45, KV_CACHE_FP8); }
Test(engine, prompt_a_multiple_of_the_block_size_fp8) { cached_prompt(64, KV_CACHE_FP8); }

Test(engine, too_large_for_the_cache_fails_alone) {
    TinyEngine t;
    open_engine(&t, 16, 10, 512); /* 160 tokens of KV in all */
    int32_t *big = random_prompt(100, 12), *small = random_prompt(20, 13);
    SamplingParams p_big = greedy(200), p_small = greedy(10);
    Collected cb = {0}, cs = {0}, alone = {0};
    submit(t.e, big, 100, &p_big, &cb);
    submit(t.e, small, 20, &p_small, &cs);
    run_to_completion(t.e);
    cr_expect_eq(cb.finish[0], FINISH_ERROR);
    cr_expect(strstr(cb.error, "KV cache too small"), "%s", cb.error);
    cr_expect_eq(cb.error_kind, ERROR_TOO_LONG, "the request's size, not a failure of ours");
    cr_expect_gt(cb.num[0], 0, "it ran until it could not grow");
    cr_expect_eq(cs.finish[0], FINISH_LENGTH);
    const int32_t *sp[1] = {small};
    int sl[1] = {20};
    run_alone(sp, sl, 1, &p_small, &alone);
    expect_same(&alone, &cs, 1, "neighbour of a failed request");

    /* rejected at submission: a prompt larger than the cache, or than max_model_len */
    int32_t *huge = random_prompt(200, 14);
    EngineRequest req = {.prompt = huge, .prompt_len = 200, .params = greedy(4), .on_output = collect, .user = &cb};
    Error err = {0};
    cr_expect(engine_submit(t.e, &req, NULL, &err) == -1 && strstr(err.msg, "KV cache too small"),
              "%s", err.msg);
    cr_expect_eq(err.kind, ERROR_TOO_LONG);
    req = (EngineRequest){.prompt = small, .prompt_len = 20, .params = greedy(1010), .on_output = collect, .user = &cb};
    cr_expect(engine_submit(t.e, &req, NULL, &err) == -1 && strstr(err.msg, "max_model_len"), "%s",
              err.msg);
    cr_expect_eq(err.kind, ERROR_TOO_LONG);
    req.params.max_tokens = 4;
    req.params.temperature = -1;
    cr_expect(engine_submit(t.e, &req, NULL, &err) == -1 && strstr(err.msg, "temperature"), "%s",
              err.msg);
    cr_expect_eq(err.kind, ERROR_INVALID);
    req.params = greedy(4);
    req.prompt_len = 0;
    cr_expect(engine_submit(t.e, &req, NULL, &err) == -1 && strstr(err.msg, "empty"), "%s", err.msg);
    cr_expect_eq(err.kind, ERROR_INVALID);
    close_engine(&t);
    free(big);
    free(small);
    free(huge);
}

Test(engine, abort_frees_everything) {
    TinyEngine t;
    open_engine(&t, 16, 64, 512);
    int32_t *a = random_prompt(30, 15), *b = random_prompt(40, 16);
    SamplingParams p = greedy(40);
    Collected ca = {0}, cb = {0};
    uint64_t ida = submit(t.e, a, 30, &p, &ca);
    submit(t.e, b, 40, &p, &cb);
    Error err = {0};
    for (int i = 0; i < 5; i++) cr_assert(engine_step(t.e, &err) > 0);
    engine_abort(t.e, ida);
    engine_abort(t.e, 999999); /* unknown ids are ignored */
    run_to_completion(t.e);
    cr_expect_eq(ca.finish[0], FINISH_ABORT);
    cr_expect_lt(ca.num[0], 40);
    cr_expect_eq(cb.finish[0], FINISH_LENGTH);
    cr_expect_eq(cb.num[0], 40);
    EngineStats st = engine_stats(t.e);
    cr_expect_eq(st.kv_blocks_used, 0);
    cr_expect_eq(st.num_running + st.num_waiting, 0);
    close_engine(&t);
    free(a);
    free(b);
}

Test(engine, stop_token_ids_and_eos) {
    int32_t *prompt = random_prompt(12, 17);
    SamplingParams p = greedy(20);
    Collected full = {0}, stopped = {0};
    TinyEngine t;
    open_engine(&t, 16, 64, 512);
    submit(t.e, prompt, 12, &p, &full);
    run_to_completion(t.e);
    p.stop_token_ids[0] = full.ids[0][4];
    p.num_stop_token_ids = 1;
    submit(t.e, prompt, 12, &p, &stopped);
    run_to_completion(t.e);
    int first = 0;
    while (full.ids[0][first] != p.stop_token_ids[0]) first++;
    cr_expect_eq(stopped.num[0], first + 1, "stops at (and includes) the stop token");
    cr_expect_eq(stopped.finish[0], FINISH_STOP);
    close_engine(&t);
    free(prompt);
}

Test(engine, parallel_samples_share_the_prompt) {
    int32_t *prompt = random_prompt(70, 18);
    TinyEngine t;
    open_engine(&t, 16, 128, 512);
    SamplingParams p = greedy(10);
    p.n = 3;
    Collected g3 = {0}, g1 = {0};
    submit(t.e, prompt, 70, &p, &g3);
    run_to_completion(t.e);
    cr_expect_eq(g3.finished, 3);
    p.n = 1;
    submit(t.e, prompt, 70, &p, &g1);
    run_to_completion(t.e);
    for (int s = 0; s < 3; s++)
        cr_expect(g3.num[s] == 10 && memcmp(g3.ids[s], g1.ids[0], sizeof(int32_t) * 10) == 0,
                  "greedy sample %d equals the single run", s);

    p.n = 3;
    p.temperature = 1.0f;
    p.has_seed = true;
    p.seed = 5;
    Collected r1 = {0}, r2 = {0};
    submit(t.e, prompt, 70, &p, &r1);
    run_to_completion(t.e);
    submit(t.e, prompt, 70, &p, &r2);
    run_to_completion(t.e);
    expect_same(&r1, &r2, 3, "seeded n=3 twice");
    cr_expect(memcmp(r1.ids[0], r1.ids[1], sizeof(int32_t) * 10) != 0, "samples differ");
    EngineStats st = engine_stats(t.e);
    cr_expect_eq(st.kv_blocks_used, 0);
    close_engine(&t);
    free(prompt);
}

/* ---- the engine on its own thread ------------------------------------------ */

typedef struct Waiter {
    Collected c;
    pthread_mutex_t lock;
    pthread_cond_t done;
} Waiter;

static void collect_and_signal(const EngineOutput *o, void *user) {
    Waiter *w = user;
    pthread_mutex_lock(&w->lock);
    collect(o, &w->c);
    pthread_cond_signal(&w->done);
    pthread_mutex_unlock(&w->lock);
}

Test(engine, background_thread) {
    int32_t *prompts[N];
    for (int i = 0; i < N; i++) prompts[i] = random_prompt(LENS[i], 400 + i);
    SamplingParams p = greedy(9);
    Collected alone[N] = {0};
    run_alone((const int32_t *const *)prompts, LENS, N, &p, alone);
    TinyEngine t;
    open_engine(&t, 16, 256, 512);
    Error err = {0};
    cr_assert(engine_start(t.e, &err) == 0, "%s", err.msg);
    Waiter *w = calloc(N, sizeof *w);
    for (int i = 0; i < N; i++) {
        pthread_mutex_init(&w[i].lock, NULL);
        pthread_cond_init(&w[i].done, NULL);
        EngineRequest req = {.prompt = prompts[i], .prompt_len = LENS[i], .params = p, .on_output = collect_and_signal, .user = &w[i]};
        cr_assert(engine_submit(t.e, &req, NULL, &err) == 0, "%s", err.msg);
    }
    for (int i = 0; i < N; i++) {
        pthread_mutex_lock(&w[i].lock);
        while (w[i].c.finished < 1) pthread_cond_wait(&w[i].done, &w[i].lock);
        pthread_mutex_unlock(&w[i].lock);
        expect_same(&alone[i], &w[i].c, 1, "threaded");
    }
    close_engine(&t); /* joins the thread */
    free(w);
    for (int i = 0; i < N; i++) free(prompts[i]);
}

typedef struct LogprobCheck {
    int tokens;
    bool ok;
} LogprobCheck;

static void check_logprobs(const EngineOutput *o, void *user) {
    LogprobCheck *c = user;
    if (!o->has_token) return;
    c->tokens++;
    const SampleLogprobs *lp = o->logprobs;
    bool ok = lp && lp->num_top == 3 && lp->top_ids[0] == o->token && /* greedy: the top one */
              lp->logprob == lp->top_logprobs[0] && lp->logprob <= 0.0f &&
              lp->top_logprobs[0] >= lp->top_logprobs[1] && lp->top_logprobs[1] >= lp->top_logprobs[2];
    if (!ok) c->ok = false;
}

Test(engine, logprobs_reach_the_caller) {
    TinyEngine t;
    open_engine(&t, 16, 64, 512);
    int32_t *prompt = random_prompt(10, 19);
    SamplingParams p = greedy(6);
    p.logprobs = 3;
    LogprobCheck c = {0, true};
    EngineRequest req = {.prompt = prompt, .prompt_len = 10, .params = p, .on_output = check_logprobs, .user = &c};
    Error err = {0};
    cr_assert(engine_submit(t.e, &req, NULL, &err) == 0, "%s", err.msg);
    run_to_completion(t.e);
    cr_expect_eq(c.tokens, 6);
    cr_expect(c.ok, "every token carries consistent logprobs");
    close_engine(&t);
    free(prompt);
}

/* ---- text and stop strings ---------------------------------------------------- */

typedef struct TextCollected {
    Collected c;
    char text[4096];
    size_t len;
    int stop_string;
} TextCollected;

static void collect_text(const EngineOutput *o, void *user) {
    TextCollected *t = user;
    collect(o, &t->c);
    cr_assert_leq(t->len + o->text_len, sizeof t->text);
    if (o->text_len) memcpy(t->text + t->len, o->text, o->text_len);
    t->len += o->text_len;
    if (o->finish != FINISH_NONE) t->stop_string = o->stop_string;
}

static void run_with_stops(TinyEngine *t, const int32_t *prompt, int len, int max_tokens,
                           const char *const *stop, int num_stop, TextCollected *out) {
    SamplingParams p = greedy(max_tokens);
    EngineRequest req = {.prompt = prompt, .prompt_len = len, .params = p, .stop = stop,
                         .num_stop = num_stop, .on_output = collect_text, .user = out};
    Error err = {0};
    cr_assert(engine_submit(t->e, &req, NULL, &err) == 0, "%s", err.msg);
    run_to_completion(t->e);
}

Test(engine, text_and_stop_strings) {
    TinyEngine t;
    open_engine(&t, 16, 128, 512);
    Tokenizer *tok = tiny_tokenizer();
    engine_set_tokenizer(t.e, tok);
    int32_t *prompt = random_prompt(9, 21);

    /* The streamed text is the decode of the tokens. */
    TextCollected *full = calloc(1, sizeof *full);
    run_with_stops(&t, prompt, 9, 40, NULL, 0, full);
    char *want;
    size_t want_len;
    Error err = {0};
    cr_assert(tokenizer_decode(tok, full->c.ids[0], (size_t)full->c.num[0], true, &want, &want_len,
                               &err) == 0);
    cr_assert_eq(full->len, want_len);
    cr_assert(memcmp(full->text, want, want_len) == 0, "streamed text differs from the decode");
    cr_assert_gt(want_len, 24);

    /* A stop string from the middle of that text (whole characters): the text
     * ends just before its first occurrence. */
    size_t a = want_len / 3, b = a + 6;
    while (((unsigned char)want[a] & 0xC0) == 0x80) a++;
    while (b < want_len && ((unsigned char)want[b] & 0xC0) == 0x80) b++;
    char stop[32];
    memcpy(stop, want + a, b - a);
    stop[b - a] = '\0';
    size_t first = (size_t)((char *)memmem(want, want_len, stop, b - a) - want);
    const char *stops[2] = {"no such text anywhere", stop};
    TextCollected *cut = calloc(1, sizeof *cut);
    run_with_stops(&t, prompt, 9, 40, stops, 2, cut);
    cr_expect_eq(cut->c.finish[0], FINISH_STOP);
    cr_expect_eq(cut->stop_string, 1);
    cr_expect_eq(cut->len, first, "text ends before the stop string (%zu vs %zu)", cut->len, first);
    cr_expect(memcmp(cut->text, want, first) == 0);
    cr_expect_lt(cut->c.num[0], full->c.num[0]);

    /* Two stop strings: the earlier match wins. */
    char early[8];
    size_t e0 = 0, e1 = 1;
    while (e1 < want_len && ((unsigned char)want[e1] & 0xC0) == 0x80) e1++;
    memcpy(early, want + e0, e1 - e0);
    early[e1 - e0] = '\0';
    const char *two[2] = {stop, early};
    TextCollected *both = calloc(1, sizeof *both);
    run_with_stops(&t, prompt, 9, 40, two, 2, both);
    cr_expect_eq(both->stop_string, 1);
    cr_expect_eq(both->len, 0);

    /* A stop string never produced: the whole text, finish by length. */
    const char *never[1] = {"\x01\x02"};
    TextCollected *none = calloc(1, sizeof *none);
    run_with_stops(&t, prompt, 9, 40, never, 1, none);
    cr_expect_eq(none->c.finish[0], FINISH_LENGTH);
    cr_expect(none->len == want_len && memcmp(none->text, want, want_len) == 0);

    free(want);
    free(full);
    free(cut);
    free(both);
    free(none);
    free(prompt);
    close_engine(&t);
    tokenizer_free(tok);
}

Test(engine, stop_strings_need_a_tokenizer) {
    TinyEngine t;
    open_engine(&t, 16, 64, 512);
    int32_t prompt[2] = {1, 2};
    const char *stop[1] = {"x"};
    Collected c = {0};
    EngineRequest req = {.prompt = prompt, .prompt_len = 2, .params = greedy(4), .stop = stop,
                         .num_stop = 1, .on_output = collect, .user = &c};
    Error err = {0};
    cr_expect(engine_submit(t.e, &req, NULL, &err) == -1 && strstr(err.msg, "tokenizer"), "%s", err.msg);
    close_engine(&t);
}
