/*
 * test_engine_hybrid.c - the engine with a model that keeps recurrent state
 * per sequence (the tiny Qwen3.5 fixtures, tests/fixtures/tiny-qwen3_5):
 * state slots taken and given back with the sequences, preemption
 * (recompute from the first token), chunked prefill, n > 1 samples, a
 * repeated prompt and a conversation's next turn (prefix caching through
 * state checkpoints: each reuses the cached prefix up to the last block
 * boundary whose state was saved) all give what a request alone gets,
 * greedy, with a float32 cache and matmuls; without checkpoints nothing is
 * reused.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "cpu/cpu_runner.h"
#include "engine/engine.h"

#define HYBRID_DENSE "tests/fixtures/tiny-qwen3_5/dense"
#define HYBRID_MOE "tests/fixtures/tiny-qwen3_5/moe"
#define MAX_SAMPLES 3
#define MAX_OUT 24

typedef struct Got {
    int32_t ids[MAX_SAMPLES][MAX_OUT];
    int num[MAX_SAMPLES];
    int cached, finished;
    char error[256];
} Got;

static void collect(const EngineOutput *o, void *user) {
    Got *g = user;
    cr_assert_lt(o->sample_index, MAX_SAMPLES);
    if (o->has_token) {
        cr_assert_lt(g->num[o->sample_index], MAX_OUT);
        g->ids[o->sample_index][g->num[o->sample_index]++] = o->token;
    }
    g->cached = o->num_cached_tokens;
    if (o->finish != FINISH_NONE) {
        g->finished++;
        if (o->error) snprintf(g->error, sizeof g->error, "%s", o->error);
    }
}

typedef struct Hybrid {
    ModelWeights w;
    Runner *runner;
    Engine *e;
} Hybrid;

/* num_blocks blocks of 16 tokens beside max_seqs state slots and as many
 * checkpoints (prefix caching), or none (checkpoints false). */
static void open_hybrid_with(Hybrid *h, const char *model, int num_blocks, int max_seqs, int max_batched,
                             bool checkpoints) {
    Error err = {0};
    cr_assert(model_weights_load(&h->w, model, &err) == 0, "%s", err.msg);
    RunnerOptions o = runner_default_options();
    o.device = "cpu";
    o.block_size = 16;
    o.kv_cache_dtype = KV_CACHE_F32;
    o.dtype = COMPUTE_F32;
    o.max_num_seqs = max_seqs;
    o.max_num_batched_tokens = max_batched;
    o.max_model_len = 1024;
    o.kv_cache_bytes = cpu_runner_block_bytes(&h->w.config, 16, KV_CACHE_F32) * (size_t)num_blocks +
                       cpu_runner_state_slot_bytes(&h->w.config) * 2 * (size_t)max_seqs;
    h->runner = cpu_runner_create(&h->w, &o, &err);
    cr_assert(h->runner, "%s", err.msg);
    cr_assert_eq(h->runner->num_state_slots, max_seqs);
    cr_assert_eq(h->runner->num_state_checkpoints, max_seqs);
    cr_assert_eq(h->runner->num_kv_blocks, num_blocks);
    if (!checkpoints) h->runner->num_state_checkpoints = 0; /* the engine then caches no prefix */
    h->e = engine_create(&h->w, h->runner, &err);
    cr_assert(h->e, "%s", err.msg);
}

static void open_hybrid(Hybrid *h, const char *model, int num_blocks, int max_seqs, int max_batched) {
    open_hybrid_with(h, model, num_blocks, max_seqs, max_batched, true);
}

static void close_hybrid(Hybrid *h) {
    engine_destroy(h->e);
    runner_destroy(h->runner);
    model_weights_free(&h->w);
}

static void run_all(Engine *e) {
    Error err = {0};
    for (int steps = 0; engine_has_work(e); steps++) {
        cr_assert(engine_step(e, &err) >= 0, "%s", err.msg);
        cr_assert_lt(steps, 100000, "the engine does not finish");
    }
}

static void submit(Engine *e, const int32_t *prompt, int len, int max_tokens, int n, Got *g) {
    SamplingParams p = sampling_params_default();
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.n = n;
    EngineRequest req = {.prompt = prompt, .prompt_len = len, .params = p, .on_output = collect, .user = g};
    Error err = {0};
    uint64_t id;
    cr_assert(engine_submit(e, &req, &id, &err) == 0, "%s", err.msg);
}

#define N 6
static const int LENS[N] = {3, 17, 40, 64, 90, 130};

/* Each prompt alone in a roomy engine: what every other run must match. */
static void run_alone(const char *model, int32_t *const *prompts, Got *alone) {
    Hybrid h;
    open_hybrid(&h, model, 200, 4, 512);
    for (int i = 0; i < N; i++) {
        submit(h.e, prompts[i], LENS[i], 20, 1, &alone[i]);
        run_all(h.e);
        cr_expect_eq(alone[i].num[0], 20);
    }
    close_hybrid(&h);
}

static void expect_same(const Got *a, const Got *b, int samples, const char *what, int i) {
    for (int s = 0; s < samples; s++) {
        cr_expect_eq(b->num[s], a->num[0], "%s, prompt %d sample %d: %d tokens", what, i, s, b->num[s]);
        cr_expect(memcmp(a->ids[0], b->ids[s], sizeof(int32_t) * (size_t)a->num[0]) == 0,
                  "%s, prompt %d sample %d: tokens differ", what, i, s);
    }
}

/* All at once with room for two sequences' states, few blocks (preemptions)
 * and a small token budget (chunked prefill). */
static void crowded_equals_alone(const char *model) {
    int32_t *prompts[N];
    for (int i = 0; i < N; i++) prompts[i] = random_prompt(LENS[i], 500 + i);
    Got alone[N] = {0}, crowd[N] = {0};
    run_alone(model, prompts, alone);
    Hybrid h;
    open_hybrid(&h, model, 14, 2, 48);
    for (int i = 0; i < N; i++) submit(h.e, prompts[i], LENS[i], 20, 1, &crowd[i]);
    run_all(h.e);
    EngineStats st = engine_stats(h.e);
    cr_log_info("%s: %lld preemptions", model, st.preemptions);
    cr_expect_gt(st.preemptions, 0, "the test means to preempt");
    for (int i = 0; i < N; i++) {
        cr_expect_str_empty(crowd[i].error);
        expect_same(&alone[i], &crowd[i], 1, "crowded", i);
    }
    close_hybrid(&h);
    for (int i = 0; i < N; i++) free(prompts[i]);
}

Test(engine_hybrid, crowded_equals_alone_dense, .timeout = 120) { crowded_equals_alone(HYBRID_DENSE); }
Test(engine_hybrid, crowded_equals_alone_moe, .timeout = 120) { crowded_equals_alone(HYBRID_MOE); }

/* n = 3 samples and the same prompt again: every sample equals the prompt
 * alone; the repeat (and the forked samples) start from the state saved at
 * the prompt's last block boundary, the repeat's num_cached_tokens says so.
 * Without checkpoints the same runs reuse nothing. */
static void samples_and_repeats(bool checkpoints) {
    int32_t *prompts[N];
    for (int i = 0; i < N; i++) prompts[i] = random_prompt(LENS[i], 700 + i);
    Got alone[N] = {0};
    run_alone(HYBRID_DENSE, prompts, alone);
    Hybrid h;
    open_hybrid_with(&h, HYBRID_DENSE, 200, 4, 512, checkpoints);
    for (int i = 2; i < 5; i++) {
        Got many = {0}, again = {0};
        submit(h.e, prompts[i], LENS[i], 20, 3, &many);
        run_all(h.e);
        expect_same(&alone[i], &many, 3, "n = 3", i);
        submit(h.e, prompts[i], LENS[i], 20, 1, &again);
        run_all(h.e);
        expect_same(&alone[i], &again, 1, "repeated", i);
        int want = checkpoints ? (LENS[i] - 1) / 16 * 16 : 0;
        cr_expect_eq(again.cached, want, "prompt %d: %d tokens reused, expected %d", i, again.cached, want);
    }
    EngineStats st = engine_stats(h.e);
    cr_expect_eq(st.num_running, 0);
    if (!checkpoints) cr_expect_eq(st.prefix_hit_tokens, 0);
    close_hybrid(&h);
    for (int i = 0; i < N; i++) free(prompts[i]);
}

Test(engine_hybrid, samples_and_repeats_reuse_checkpoints) { samples_and_repeats(true); }
Test(engine_hybrid, samples_and_repeats_recompute_without) { samples_and_repeats(false); }

/* A conversation's next turn: the first turn's prompt and answer, then more
 * tokens. Decode saved the state at each block boundary it crossed, so the
 * second turn starts past the first prompt; its tokens equal a fresh engine's. */
Test(engine_hybrid, next_turn_reuses_the_answer) {
    int32_t *first = random_prompt(40, 900), *more = random_prompt(9, 901);
    Hybrid h;
    open_hybrid(&h, HYBRID_DENSE, 200, 4, 512);
    Got turn1 = {0}, turn2 = {0}, fresh = {0};
    submit(h.e, first, 40, 20, 1, &turn1);
    run_all(h.e);
    int32_t second[69];
    memcpy(second, first, sizeof(int32_t) * 40);
    memcpy(second + 40, turn1.ids[0], sizeof(int32_t) * 20);
    memcpy(second + 60, more, sizeof(int32_t) * 9);
    submit(h.e, second, 69, 20, 1, &turn2);
    run_all(h.e);
    /* 59 tokens of turn one were computed (its last answer token never was):
     * the boundary at 48 was saved during decode; 64 is not reached. */
    cr_expect_eq(turn2.cached, 48, "turn two reused %d tokens", turn2.cached);
    close_hybrid(&h);
    open_hybrid_with(&h, HYBRID_DENSE, 200, 4, 512, false);
    submit(h.e, second, 69, 20, 1, &fresh);
    run_all(h.e);
    cr_expect_eq(fresh.cached, 0);
    expect_same(&fresh, &turn2, 1, "next turn", 0);
    close_hybrid(&h);
    free(first);
    free(more);
}
