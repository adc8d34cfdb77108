/*
 * test_engine_structured.c - structured outputs inside the engine, on the
 * CPU runner with the tiny model and the real Qwen3 vocabulary: every
 * sample of a constrained request matches the constraint, with n > 1,
 * under preemption (the same tokens as without it), with seeds; a
 * constraint that waits for a token (</think>) leaves the text before it
 * alone; the sampler never picks a masked token.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "cpu/cpu_runner.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "structured/gbnf.h"

#define MAX_SAMPLES 4
#define MAX_OUT 96

typedef struct Collected {
    int32_t ids[MAX_SAMPLES][MAX_OUT];
    int num[MAX_SAMPLES];
    FinishReason finish[MAX_SAMPLES];
    char error[256];
} Collected;

static void collect(const EngineOutput *o, void *user) {
    Collected *c = user;
    cr_assert_lt(o->sample_index, MAX_SAMPLES);
    if (o->has_token) {
        cr_assert_lt(c->num[o->sample_index], MAX_OUT);
        c->ids[o->sample_index][c->num[o->sample_index]++] = o->token;
    }
    if (o->finish != FINISH_NONE) {
        c->finish[o->sample_index] = o->finish;
        if (o->error) snprintf(c->error, sizeof c->error, "%s", o->error);
    }
}

typedef struct Setup {
    ModelWeights w;
    Runner *runner;
    Engine *e;
    Tokenizer *tok;
    TokenVocab *vocab;
} Setup;

static void open_setup(Setup *t, int num_blocks) {
    Error err = {0};
    cr_assert(model_weights_load(&t->w, TINY_MODEL, &err) == 0, "%s", err.msg);
    RunnerOptions o = runner_default_options();
    o.device = "cpu";
    o.block_size = 16;
    o.kv_cache_dtype = KV_CACHE_F32;
    o.dtype = COMPUTE_F32;
    o.kv_cache_bytes = cpu_runner_block_bytes(&t->w.config, 16, o.kv_cache_dtype) * (size_t)num_blocks;
    o.max_num_batched_tokens = 64;
    o.max_num_seqs = 32;
    o.max_model_len = 1024;
    cr_assert(t->runner = cpu_runner_create(&t->w, &o, &err), "%s", err.msg);
    cr_assert(t->e = engine_create(&t->w, t->runner, &err), "%s", err.msg);
    cr_assert(t->tok = tokenizer_load(TINY_MODEL, t->w.config.vocab_size, &err), "%s", err.msg);
    cr_assert(t->vocab = token_vocab_new(t->tok, t->w.config.vocab_size, &err), "%s", err.msg);
}

static void close_setup(Setup *t) {
    engine_destroy(t->e);
    runner_destroy(t->runner);
    token_vocab_free(t->vocab);
    tokenizer_free(t->tok);
    model_weights_free(&t->w);
}

static void run_to_completion(Engine *e) {
    Error err = {0};
    for (int steps = 0; engine_has_work(e); steps++) {
        cr_assert(engine_step(e, &err) >= 0, "%s", err.msg);
        cr_assert_lt(steps, 100000, "the engine does not finish");
    }
}

/* Words of lowercase letters and a final period: long enough outputs to
 * outgrow a tiny KV cache. */
static const char WORDS_GRAMMAR[] = "root ::= word (\" \" word){11,15} \".\"\nword ::= [a-z]{2,6}\n";

static Constraint *compile_gbnf(const TokenVocab *vocab, const char *text) {
    Error err = {0};
    Constraint *c = constraint_compile(CONSTRAINT_GRAMMAR, text, strlen(text), vocab, &err);
    cr_assert(c, "%s", err.msg);
    return c;
}

/* The sample's text (up to an end id) is in the grammar's language. */
static void expect_matches(Setup *t, const char *grammar, const Collected *c, int sample) {
    Grammar *g = grammar_new();
    cr_assert(gbnf_to_grammar(g, grammar, strlen(grammar)) == 0, "%s", grammar_error(g));
    Error err = {0};
    CompiledGrammar *cg = grammar_compile(g, &err);
    cr_assert(cg, "%s", err.msg);
    int n = c->num[sample];
    while (n > 0 && model_config_is_eos(&t->w.config, c->ids[sample][n - 1])) n--;
    char *text;
    size_t len;
    cr_assert(tokenizer_decode(t->tok, c->ids[sample], (size_t)n, false, &text, &len, &err) == 0, "%s", err.msg);
    bool viable;
    int match = compiled_grammar_match(cg, text, len, &viable);
    if (c->finish[sample] == FINISH_STOP) cr_expect(match, "sample %d: '%s' does not match", sample, text);
    else cr_expect(viable, "sample %d: '%s' is not a prefix of a match", sample, text);
    free(text);
    compiled_grammar_free(cg);
    grammar_free(g);
}

static SamplingParams seeded(uint64_t seed, int n) {
    SamplingParams p = sampling_params_default();
    p.temperature = 1.0f;
    p.has_seed = true;
    p.seed = seed;
    p.max_tokens = MAX_OUT - 1;
    p.n = n;
    return p;
}

static void submit(Setup *t, const int32_t *prompt, int len, const SamplingParams *p, Constraint *c,
                   int32_t after, Collected *out) {
    EngineRequest req = {.prompt = prompt, .prompt_len = len, .params = *p, .constraint = c,
                         .constraint_after = after, .on_output = collect, .user = out};
    Error err = {0};
    cr_assert(engine_submit(t->e, &req, NULL, &err) == 0, "%s", err.msg);
}

#define R 8
Test(engine_structured, every_sample_matches_and_preemption_changes_nothing, .timeout = 240) {
    int32_t prompts[R][4];
    for (int i = 0; i < R; i++)
        for (int k = 0; k < 4; k++) prompts[i][k] = 1000 + 37 * i + k;
    Collected *alone = calloc(R, sizeof *alone), *squeezed = calloc(R, sizeof *squeezed);
    Setup t;
    /* The constraint outlives the first engine: its own vocabulary. */
    Error err = {0};
    Tokenizer *tok = tokenizer_load(TINY_MODEL, QWEN3_VOCAB_ROWS, &err);
    cr_assert(tok, "%s", err.msg);
    TokenVocab *vocab = token_vocab_new(tok, QWEN3_VOCAB_ROWS, &err);
    cr_assert(vocab, "%s", err.msg);
    Constraint *c = compile_gbnf(vocab, WORDS_GRAMMAR);
    open_setup(&t, 256);
    for (int i = 0; i < R; i++) {
        SamplingParams p = seeded(50 + (uint64_t)i, 3);
        submit(&t, prompts[i], 4, &p, c, -1, &alone[i]);
        run_to_completion(t.e);
    }
    close_setup(&t);
    open_setup(&t, 14); /* 24 samples of up to ~6 blocks each in 14 blocks */
    for (int i = 0; i < R; i++) {
        SamplingParams p = seeded(50 + (uint64_t)i, 3);
        submit(&t, prompts[i], 4, &p, c, -1, &squeezed[i]);
    }
    run_to_completion(t.e);
    EngineStats st = engine_stats(t.e);
    cr_expect_geq(st.preemptions, 1, "no preemption happened");
    /* The CPU's logits are not batch-invariant (the matmul strategy and the
     * attention path depend on how many rows and query tokens a step has,
     * and a preempted sample is recomputed as a prefill), so a seeded draw
     * near a boundary may flip. What preemption must not change is the
     * constraint: every squeezed sample matches the grammar on its own, and
     * nearly all of them are the unpreempted run's token for token. */
    int stopped = 0, identical = 0;
    for (int i = 0; i < R; i++)
        for (int s = 0; s < 3; s++) {
            bool same = alone[i].num[s] == squeezed[i].num[s] &&
                        memcmp(alone[i].ids[s], squeezed[i].ids[s], sizeof(int32_t) * (size_t)alone[i].num[s]) == 0;
            identical += same;
            if (!same) cr_log_info("request %d sample %d: a different draw under preemption", i, s);
            cr_expect(squeezed[i].finish[s] == FINISH_STOP || squeezed[i].finish[s] == FINISH_LENGTH, "%s",
                      squeezed[i].error);
            stopped += squeezed[i].finish[s] == FINISH_STOP;
            expect_matches(&t, WORDS_GRAMMAR, &squeezed[i], s);
        }
    cr_expect_geq(identical, R * 3 * 3 / 4, "only %d of %d samples unchanged by preemption", identical, R * 3);
    cr_expect_geq(stopped, R * 3 / 2, "most samples should complete the grammar (%d did)", stopped);
    cr_log_info("constrained under a tiny cache: %lld preemptions, %d/%d samples complete, %d identical to the "
                "unpreempted run", st.preemptions, stopped, R * 3, identical);
    constraint_unref(c);
    close_setup(&t);
    token_vocab_free(vocab);
    tokenizer_free(tok);
    free(alone);
    free(squeezed);
}

Test(engine_structured, the_constraint_waits_for_its_start_token, .timeout = 120) {
    Setup t;
    open_setup(&t, 256);
    int32_t prompt[3] = {9707, 11, 1879};
    SamplingParams greedy = sampling_params_default();
    greedy.max_tokens = 12;
    greedy.ignore_eos = true;
    Collected free_run = {0}, waiting = {0}, never = {0};
    submit(&t, prompt, 3, &greedy, NULL, -1, &free_run);
    run_to_completion(t.e);
    cr_assert_eq(free_run.num[0], 12);
    /* The constraint starts after the token the free run chose third: the
     * first three tokens are the free run's, the rest follow the grammar. */
    const char *digits = "root ::= [0-9]+";
    Constraint *c = compile_gbnf(t.vocab, digits);
    greedy.ignore_eos = false;
    submit(&t, prompt, 3, &greedy, c, free_run.ids[0][2], &waiting);
    submit(&t, prompt, 3, &greedy, c, 151668 /* </think>, never produced here */, &never);
    run_to_completion(t.e);
    cr_assert_geq(waiting.num[0], 4);
    cr_expect(memcmp(waiting.ids[0], free_run.ids[0], 3 * sizeof(int32_t)) == 0);
    for (int k = 3; k < waiting.num[0]; k++) {
        const char *bytes;
        size_t len;
        Error err;
        int32_t id = waiting.ids[0][k];
        if (model_config_is_eos(&t.w.config, id)) continue;
        cr_assert(tokenizer_token_bytes(t.tok, id, &bytes, &len, &err) == 0);
        for (size_t b = 0; b < len; b++) cr_expect(bytes[b] >= '0' && bytes[b] <= '9', "token %d is not digits", id);
    }
    cr_expect(memcmp(never.ids[0], free_run.ids[0], (size_t)never.num[0] * sizeof(int32_t)) == 0,
              "a constraint that never starts changes nothing");
    constraint_unref(c);
    close_setup(&t);
}

Test(engine_structured, the_sampler_never_picks_a_masked_token) {
    enum { V = 1000 };
    SamplerScratch s;
    Error err;
    cr_assert(sampler_scratch_init(&s, V, &err) == 0);
    uint32_t mask[(V + 31) / 32];
    float logits[V];
    uint64_t x = 88172645463325252ull;
    for (int trial = 0; trial < 200; trial++) {
        memset(mask, 0, sizeof mask);
        int allowed = 1 + trial % 7;
        for (int k = 0; k < allowed; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int t = (int)(x % V);
            mask[t / 32] |= 1u << (t % 32);
        }
        for (int i = 0; i < V; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            logits[i] = (float)(x % 1000) / 50.0f;
        }
        SamplingParams p = sampling_params_default();
        p.temperature = trial % 2 ? 1.0f : 0.0f;
        p.top_k = trial % 3 == 0 ? 5 : -1;
        p.logprobs = 2;
        SampleInput in = {.params = &p, .seed = 1, .position = (uint32_t)trial, .allowed = mask};
        SampleLogprobs lp;
        int32_t t = sampler_sample(logits, &in, &s, &lp);
        cr_assert(t >= 0 && t < V && (mask[t / 32] >> (t % 32) & 1), "trial %d: token %d is masked", trial, t);
        cr_expect(isfinite(lp.logprob) && lp.logprob <= 0.0f);
    }
    sampler_scratch_free(&s);
}
