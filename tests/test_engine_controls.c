/*
 * test_engine_controls.c - logit_bias, min_tokens and priority scheduling
 * through the engine, on the CPU runner with the tiny model (whose EOS id,
 * 151645, would otherwise rarely come): a bias forces or bans a token;
 * min_tokens holds back EOS, stop_token_ids and stop strings exactly until
 * the output is long enough (vLLM's semantics), also under a structured
 * constraint, which wins when it can only end; SCHEDULING_PRIORITY orders
 * the waiting queue and preempts the least urgent running request, while
 * FCFS stays as it was.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "cpu/cpu_runner.h"
#include "engine/engine.h"
#include "structured/constraint.h"

#define MAX_SAMPLES 3
#define MAX_OUT 80
#define EOS 151645 /* the tiny model's eos_token_id */

typedef struct Collected {
    int32_t ids[MAX_SAMPLES][MAX_OUT];
    size_t bounds[MAX_SAMPLES][MAX_OUT + 1]; /* text bytes delivered after each token */
    int num[MAX_SAMPLES];
    FinishReason finish[MAX_SAMPLES];
    char text[MAX_SAMPLES][2048];
    size_t len[MAX_SAMPLES];
    int stop_string;
    int finished_at; /* the finish clock's value at this request's last finish */
    int *clock;
    char error[256];
} Collected;

static void collect(const EngineOutput *o, void *user) {
    Collected *c = user;
    int s = o->sample_index;
    cr_assert_lt(s, MAX_SAMPLES);
    cr_assert_leq(c->len[s] + o->text_len, sizeof c->text[s]);
    if (o->text_len) memcpy(c->text[s] + c->len[s], o->text, o->text_len);
    c->len[s] += o->text_len;
    if (o->has_token) {
        cr_assert_lt(c->num[s], MAX_OUT);
        c->ids[s][c->num[s]++] = o->token;
        c->bounds[s][c->num[s]] = c->len[s];
    }
    if (o->finish != FINISH_NONE) {
        c->finish[s] = o->finish;
        c->stop_string = o->stop_string;
        if (c->clock) c->finished_at = ++*c->clock;
        if (o->error) snprintf(c->error, sizeof c->error, "%s", o->error);
    }
}

typedef struct TinyEngine {
    ModelWeights w;
    Runner *runner;
    Engine *e;
    Tokenizer *tok;
} TinyEngine;

static void open_engine(TinyEngine *t, int num_blocks, int max_num_seqs) {
    Error err = {0};
    memset(t, 0, sizeof *t);
    cr_assert(model_weights_load(&t->w, TINY_MODEL, &err) == 0, "%s", err.msg);
    RunnerOptions o = runner_default_options();
    o.device = "cpu";
    o.block_size = 16;
    o.kv_cache_bytes =
        cpu_runner_block_bytes(&t->w.config, 16, kv_cache_dtype_resolve(o.kv_cache_dtype, &t->w)) *
        (size_t)num_blocks;
    o.max_num_batched_tokens = 64;
    o.max_num_seqs = max_num_seqs;
    o.max_model_len = 1024;
    cr_assert(t->runner = cpu_runner_create(&t->w, &o, &err), "%s", err.msg);
    cr_assert(t->e = engine_create(&t->w, t->runner, &err), "%s", err.msg);
}

static void with_tokenizer(TinyEngine *t) {
    t->tok = tiny_tokenizer();
    engine_set_tokenizer(t->e, t->tok);
}

static void close_engine(TinyEngine *t) {
    engine_destroy(t->e);
    runner_destroy(t->runner);
    if (t->tok) tokenizer_free(t->tok);
    model_weights_free(&t->w);
}

static void run_to_completion(Engine *e) {
    Error err = {0};
    for (int steps = 0; engine_has_work(e); steps++) {
        cr_assert(engine_step(e, &err) >= 0, "%s", err.msg);
        cr_assert_lt(steps, 100000, "the engine does not finish");
    }
}

static void submit_full(Engine *e, const int32_t *prompt, int len, const SamplingParams *p,
                        const char *const *stop, int num_stop, Constraint *constraint, int priority,
                        Collected *c) {
    EngineRequest req = {.prompt = prompt, .prompt_len = len, .params = *p, .stop = stop,
                         .num_stop = num_stop, .constraint = constraint, .constraint_after = -1,
                         .priority = priority, .on_output = collect, .user = c};
    Error err = {0};
    cr_assert(engine_submit(e, &req, NULL, &err) == 0, "%s", err.msg);
}

static void submit(Engine *e, const int32_t *prompt, int len, const SamplingParams *p, Collected *c) {
    submit_full(e, prompt, len, p, NULL, 0, NULL, 0, c);
}

static SamplingParams greedy(int max_tokens) {
    SamplingParams p = sampling_params_default();
    p.max_tokens = max_tokens;
    return p;
}

static void add_bias(SamplingParams *p, int32_t token, float bias) {
    cr_assert_lt(p->num_logit_bias, MAX_LOGIT_BIAS);
    p->logit_bias[p->num_logit_bias++] = (LogitBias){token, bias};
}

static int count_of(const int32_t *ids, int n, int32_t token) {
    int k = 0;
    for (int i = 0; i < n; i++) k += ids[i] == token;
    return k;
}

/* ---- logit_bias ------------------------------------------------------------------ */

Test(engine_controls, logit_bias_forces_and_bans) {
    TinyEngine t;
    open_engine(&t, 64, 8);
    int32_t *prompt = random_prompt(12, 31);
    Collected *c = calloc(4, sizeof *c);
    cr_assert(c);
    SamplingParams p = greedy(8);
    p.ignore_eos = true;
    submit(t.e, prompt, 12, &p, &c[0]); /* free */
    SamplingParams forced = p;
    add_bias(&forced, 4242, 100.0f);
    submit(t.e, prompt, 12, &forced, &c[1]);
    forced.temperature = 1.0f; /* a bias of 100 outweighs any logit of the model */
    forced.has_seed = true;
    forced.seed = 3;
    forced.n = 2;
    submit(t.e, prompt, 12, &forced, &c[2]);
    run_to_completion(t.e);
    cr_expect_eq(count_of(c[1].ids[0], c[1].num[0], 4242), 8, "greedy: every token is the forced one");
    for (int s = 0; s < 2; s++)
        cr_expect_eq(count_of(c[2].ids[s], c[2].num[s], 4242), 8, "temperature 1, sample %d", s);

    SamplingParams banned = p;
    add_bias(&banned, c[0].ids[0][0], -100.0f);
    submit(t.e, prompt, 12, &banned, &c[3]);
    run_to_completion(t.e);
    cr_expect_eq(c[3].num[0], 8);
    cr_expect_eq(count_of(c[3].ids[0], 8, c[0].ids[0][0]), 0, "the greedy token %d is banned", c[0].ids[0][0]);
    free(c);
    free(prompt);
    close_engine(&t);
}

/* ---- min_tokens ------------------------------------------------------------------ */

/* EOS forced by logit_bias: exactly min_tokens other tokens, then EOS. */
Test(engine_controls, min_tokens_holds_back_eos) {
    TinyEngine t;
    open_engine(&t, 64, 8);
    int32_t *prompt = random_prompt(10, 32);
    const int mins[4] = {0, 1, 5, 20};
    Collected *c = calloc(6, sizeof *c);
    cr_assert(c);
    for (int k = 0; k < 4; k++) {
        SamplingParams p = greedy(20);
        add_bias(&p, EOS, 100.0f);
        p.min_tokens = mins[k];
        submit(t.e, prompt, 10, &p, &c[k]);
    }
    SamplingParams p = greedy(20); /* ignore_eos: EOS is held back all the same, then never ends it */
    add_bias(&p, EOS, 100.0f);
    p.min_tokens = 5;
    p.ignore_eos = true;
    submit(t.e, prompt, 10, &p, &c[4]);
    p.ignore_eos = false; /* n = 3, sampled: every sample forks and obeys */
    p.temperature = 0.8f;
    p.n = 3;
    p.has_seed = true;
    p.seed = 11;
    submit(t.e, prompt, 10, &p, &c[5]);
    run_to_completion(t.e);

    for (int k = 0; k < 3; k++) {
        cr_expect_eq(c[k].num[0], mins[k] + 1, "min_tokens %d: %d tokens", mins[k], c[k].num[0]);
        cr_expect_eq(c[k].ids[0][c[k].num[0] - 1], EOS, "min_tokens %d: ends on EOS", mins[k]);
        cr_expect_eq(count_of(c[k].ids[0], c[k].num[0], EOS), 1, "min_tokens %d: no EOS before", mins[k]);
        cr_expect_eq(c[k].finish[0], FINISH_STOP);
    }
    cr_expect_eq(c[3].num[0], 20, "min_tokens = max_tokens: the whole length");
    cr_expect_eq(count_of(c[3].ids[0], 20, EOS), 0);
    cr_expect_eq(c[3].finish[0], FINISH_LENGTH);
    cr_expect_eq(c[4].num[0], 20);
    cr_expect_eq(count_of(c[4].ids[0], 5, EOS), 0, "ignore_eos: no EOS before min_tokens");
    cr_expect_eq(count_of(c[4].ids[0] + 5, 15, EOS), 15, "then nothing but the forced EOS");
    cr_expect_eq(c[4].finish[0], FINISH_LENGTH);
    for (int s = 0; s < 3; s++) {
        cr_expect_eq(c[5].num[s], 6, "sample %d: %d tokens", s, c[5].num[s]);
        cr_expect_eq(count_of(c[5].ids[s], c[5].num[s], EOS), 1);
        cr_expect_eq(c[5].ids[s][5], EOS);
    }
    free(c);
    free(prompt);
    close_engine(&t);
}

Test(engine_controls, min_tokens_holds_back_stop_token_ids) {
    TinyEngine t;
    open_engine(&t, 64, 8);
    int32_t *prompt = random_prompt(10, 33);
    Collected c[3] = {0};
    for (int k = 0; k < 3; k++) {
        SamplingParams p = greedy(12);
        p.num_stop_token_ids = 2;
        p.stop_token_ids[0] = 777;
        p.stop_token_ids[1] = 778;
        add_bias(&p, 778, 100.0f);
        p.min_tokens = k == 0 ? 0 : k == 1 ? 4 : 12;
        submit(t.e, prompt, 10, &p, &c[k]);
    }
    run_to_completion(t.e);
    cr_expect(c[0].num[0] == 1 && c[0].ids[0][0] == 778 && c[0].finish[0] == FINISH_STOP);
    cr_expect_eq(c[1].num[0], 5);
    cr_expect_eq(count_of(c[1].ids[0], 4, 778) + count_of(c[1].ids[0], 4, 777), 0, "no stop id before min_tokens");
    cr_expect(c[1].ids[0][4] == 778 && c[1].finish[0] == FINISH_STOP);
    cr_expect(c[2].num[0] == 12 && c[2].finish[0] == FINISH_LENGTH);
    cr_expect_eq(count_of(c[2].ids[0], 12, 778) + count_of(c[2].ids[0], 12, EOS), 0);
    free(prompt);
    close_engine(&t);
}

/* Where a stop string must end the text with min_tokens = k: vLLM looks for
 * stop strings only once the output has more than k tokens, and then only
 * for matches that end in the new text - so the first match ending past the
 * k-th token's text. Returns its start in T (and the tokens the sample then
 * has in *tokens), or -1: no such match, the sample runs to its length. */
static long expected_stop(const Collected *full, const char *stop, int k, int *tokens) {
    const char *T = full->text[0];
    size_t n = full->len[0], len = strlen(stop), B = full->bounds[0][k];
    for (size_t at = 0; at + len <= n; at++) {
        if (at + len <= B || memcmp(T + at, stop, len) != 0) continue;
        int j = k + 1;
        while (full->bounds[0][j] < at + len) j++;
        *tokens = j;
        return (long)at;
    }
    return -1;
}

/* The byte length of the UTF-8 character starting with b. */
static size_t char_len(unsigned char b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

Test(engine_controls, min_tokens_holds_back_stop_strings) {
    TinyEngine t;
    open_engine(&t, 128, 8);
    with_tokenizer(&t);
    int32_t *prompt = random_prompt(9, 21);
    const int max_tokens = 40;
    Collected *full = calloc(1, sizeof *full);
    cr_assert(full);
    SamplingParams p = greedy(max_tokens);
    p.ignore_eos = true;
    submit(t.e, prompt, 9, &p, full); /* no stop strings: every token's text is delivered at once */
    run_to_completion(t.e);
    cr_assert_eq(full->num[0], max_tokens);
    const char *T = full->text[0];
    int checked = 0, stopped = 0;
    for (int k = 1; k <= 6; k++) {
        size_t B = full->bounds[0][k];
        if (B == 0) continue;
        /* Stop strings that occur within the first k tokens' text: the first
         * character, and the characters either side of the k-th token's end
         * (a match straddling the boundary ends past it: it counts). */
        char stops[2][16] = {{0}};
        size_t a = char_len((unsigned char)T[0]);
        memcpy(stops[0], T, a);
        size_t before = B - 1;
        while (before > 0 && ((unsigned char)T[before] & 0xC0) == 0x80) before--;
        size_t after = B < full->len[0] ? B + char_len((unsigned char)T[B]) : B;
        memcpy(stops[1], T + before, after - before);
        for (int which = 0; which < 2; which++) {
            const char *stop_list[1] = {stops[which]};
            int want_tokens = max_tokens;
            long at = expected_stop(full, stops[which], k, &want_tokens);
            Collected *c = calloc(2, sizeof *c);
            cr_assert(c);
            SamplingParams q = p;
            q.min_tokens = k;
            submit_full(t.e, prompt, 9, &q, stop_list, 1, NULL, 0, &c[0]);
            q.min_tokens = 0;
            submit_full(t.e, prompt, 9, &q, stop_list, 1, NULL, 0, &c[1]);
            run_to_completion(t.e);
            size_t want_len = at >= 0 ? (size_t)at : full->len[0];
            cr_expect_eq(c[0].num[0], want_tokens, "k %d, stop '%s': %d tokens, expected %d", k,
                         stops[which], c[0].num[0], want_tokens);
            cr_expect_eq(c[0].finish[0], at >= 0 ? FINISH_STOP : FINISH_LENGTH, "k %d, stop '%s'", k, stops[which]);
            cr_expect(c[0].len[0] == want_len && memcmp(c[0].text[0], T, want_len) == 0,
                      "k %d, stop '%s': text of %zu bytes, expected %zu", k, stops[which], c[0].len[0], want_len);
            cr_expect(memcmp(c[0].ids[0], full->ids[0], sizeof(int32_t) * (size_t)c[0].num[0]) == 0);
            /* without min_tokens: the first match anywhere (within the first k
             * tokens' text for the first character) */
            int free_tokens = max_tokens;
            long free_at = expected_stop(full, stops[which], 0, &free_tokens);
            cr_assert_geq(free_at, 0);
            cr_expect_eq(c[1].finish[0], FINISH_STOP);
            cr_expect(c[1].num[0] == free_tokens && c[1].len[0] == (size_t)free_at,
                      "k %d, stop '%s' without min_tokens: %d tokens, %zu bytes; expected %d, %ld", k,
                      stops[which], c[1].num[0], c[1].len[0], free_tokens, free_at);
            if (which == 0) cr_expect_leq(c[1].num[0], k);
            checked++;
            stopped += at >= 0;
            free(c);
        }
    }
    cr_expect_geq(checked, 6, "only %d cases had text", checked);
    cr_expect_gt(stopped, 0, "no case stopped past min_tokens: the test lost its point");
    cr_log_info("stop strings under min_tokens: %d cases, %d stopped past min_tokens", checked, stopped);
    free(full);
    free(prompt);
    close_engine(&t);
}

/* Under a constraint: min_tokens clears the end ids from the constraint's
 * mask - unless the constraint allows nothing else: it wins and ends. */
Test(engine_controls, min_tokens_under_a_constraint, .timeout = 120) {
    TinyEngine t;
    open_engine(&t, 64, 8);
    with_tokenizer(&t);
    Error err = {0};
    TokenVocab *vocab = token_vocab_new(t.tok, t.w.config.vocab_size, &err);
    cr_assert(vocab, "%s", err.msg);
    const char *letters = "root ::= [a-z]+\n", *yes = "root ::= \"yes\"\n";
    Constraint *cl = constraint_compile(CONSTRAINT_GRAMMAR, letters, strlen(letters), vocab, &err);
    cr_assert(cl, "%s", err.msg);
    Constraint *cy = constraint_compile(CONSTRAINT_GRAMMAR, yes, strlen(yes), vocab, &err);
    cr_assert(cy, "%s", err.msg);
    int32_t *prompt = random_prompt(8, 34);
    Collected *c = calloc(4, sizeof *c);
    cr_assert(c);
    SamplingParams p = greedy(30);
    add_bias(&p, EOS, 100.0f); /* EOS as soon as the grammar and min_tokens let it */
    submit_full(t.e, prompt, 8, &p, NULL, 0, cl, 0, &c[0]);
    p.min_tokens = 6;
    submit_full(t.e, prompt, 8, &p, NULL, 0, cl, 0, &c[1]);
    p.min_tokens = 10; /* "yes" is at most 3 tokens, then only EOS: the constraint wins */
    submit_full(t.e, prompt, 8, &p, NULL, 0, cy, 0, &c[2]);
    SamplingParams free_row = greedy(6); /* a neighbour without a constraint, under min_tokens too */
    free_row.min_tokens = 6;
    add_bias(&free_row, EOS, 100.0f);
    free_row.ignore_eos = true;
    submit(t.e, prompt, 8, &free_row, &c[3]);
    run_to_completion(t.e);

    cr_expect_eq(c[0].num[0], 2, "free of min_tokens: one token of letters, then EOS");
    cr_expect_eq(c[1].num[0], 7, "min_tokens 6: six tokens of letters, then EOS (%d tokens)", c[1].num[0]);
    for (int k = 0; k < 3; k++) {
        cr_expect_eq(c[k].finish[0], FINISH_STOP, "request %d: %s", k, c[k].error);
        cr_expect_eq(c[k].ids[0][c[k].num[0] - 1], EOS, "request %d ends on EOS", k);
        cr_expect_eq(count_of(c[k].ids[0], c[k].num[0], EOS), 1);
    }
    for (int k = 0; k < 2; k++) {
        cr_expect_gt(c[k].len[0], 0);
        for (size_t i = 0; i < c[k].len[0]; i++)
            cr_expect(c[k].text[0][i] >= 'a' && c[k].text[0][i] <= 'z', "request %d: '%.*s'", k,
                      (int)c[k].len[0], c[k].text[0]);
    }
    cr_expect(c[2].len[0] == 3 && memcmp(c[2].text[0], "yes", 3) == 0, "'%.*s'", (int)c[2].len[0], c[2].text[0]);
    cr_expect_lt(c[2].num[0], 10, "the constraint ended it before min_tokens");
    cr_expect(c[3].num[0] == 6 && count_of(c[3].ids[0], 6, EOS) == 0);
    free(c);
    free(prompt);
    constraint_unref(cl);
    constraint_unref(cy);
    close_engine(&t);
    token_vocab_free(vocab);
}

Test(engine_controls, min_tokens_is_validated) {
    TinyEngine t;
    open_engine(&t, 64, 8);
    int32_t prompt[2] = {1, 2};
    Collected c = {0};
    SamplingParams p = greedy(4);
    p.min_tokens = 5;
    EngineRequest req = {.prompt = prompt, .prompt_len = 2, .params = p, .on_output = collect, .user = &c};
    Error err = {0};
    cr_expect(engine_submit(t.e, &req, NULL, &err) == -1 && strstr(err.msg, "min_tokens"), "%s", err.msg);
    cr_expect_eq(err.kind, ERROR_INVALID);
    req.params = greedy(4);
    add_bias(&req.params, t.w.config.vocab_size, 1.0f);
    cr_expect(engine_submit(t.e, &req, NULL, &err) == -1 && strstr(err.msg, "151936"), "%s", err.msg);
    close_engine(&t);
}

/* ---- priority scheduling --------------------------------------------------------- */

/* One sequence at a time: requests finish in waiting-queue order. */
static void finish_order(SchedulingPolicy policy, const int *want) {
    TinyEngine t;
    open_engine(&t, 64, 1);
    engine_set_scheduling_policy(t.e, policy);
    const int prio[5] = {3, -1, 3, 0, -1};
    int clock = 0;
    Collected *c = calloc(5, sizeof *c);
    int32_t *prompts[5];
    cr_assert(c);
    for (int i = 0; i < 5; i++) {
        prompts[i] = random_prompt(6 + i, 40 + (uint64_t)i);
        c[i].clock = &clock;
        SamplingParams p = greedy(3);
        p.ignore_eos = true;
        submit_full(t.e, prompts[i], 6 + i, &p, NULL, 0, NULL, prio[i], &c[i]);
    }
    run_to_completion(t.e);
    for (int i = 0; i < 5; i++) {
        cr_expect_eq(c[want[i]].finished_at, i + 1, "%s: request %d finished %d-th, expected %d-th",
                     policy == SCHEDULING_FCFS ? "fcfs" : "priority", want[i], c[want[i]].finished_at, i + 1);
        cr_expect_eq(c[i].num[0], 3);
    }
    for (int i = 0; i < 5; i++) free(prompts[i]);
    free(c);
    close_engine(&t);
}

Test(engine_controls, priority_orders_the_waiting_queue) {
    finish_order(SCHEDULING_PRIORITY, (const int[]){1, 4, 3, 0, 2}); /* (priority, arrival) */
}

Test(engine_controls, fcfs_ignores_priority) { finish_order(SCHEDULING_FCFS, (const int[]){0, 1, 2, 3, 4}); }

/* Two long requests outgrow a 7-block cache: A (priority 5) runs first, B
 * (priority 0) arrives three steps later. FCFS preempts B, the most
 * recently admitted, and A finishes first; PRIORITY preempts A, the least
 * urgent, and B finishes first. Either way both get the tokens they get
 * alone. */
static void squeeze(SchedulingPolicy policy) {
    int32_t *a = random_prompt(20, 50), *b = random_prompt(20, 51);
    SamplingParams p = greedy(60);
    p.ignore_eos = true;
    Collected *alone = calloc(2, sizeof *alone), *c = calloc(2, sizeof *c);
    cr_assert(alone && c);
    TinyEngine t;
    open_engine(&t, 64, 8);
    submit(t.e, a, 20, &p, &alone[0]);
    run_to_completion(t.e);
    submit(t.e, b, 20, &p, &alone[1]);
    run_to_completion(t.e);
    close_engine(&t);

    open_engine(&t, 7, 8);
    engine_set_scheduling_policy(t.e, policy);
    int clock = 0;
    c[0].clock = c[1].clock = &clock;
    submit_full(t.e, a, 20, &p, NULL, 0, NULL, 5, &c[0]);
    Error err = {0};
    for (int i = 0; i < 3; i++) cr_assert(engine_step(t.e, &err) > 0, "%s", err.msg);
    submit_full(t.e, b, 20, &p, NULL, 0, NULL, 0, &c[1]);
    run_to_completion(t.e);
    EngineStats st = engine_stats(t.e);
    cr_expect_geq(st.preemptions, 1, "the cache was meant to be too small for both");
    int first = policy == SCHEDULING_PRIORITY ? 1 : 0;
    cr_expect_eq(c[first].finished_at, 1, "%s: request %d finishes first",
                 policy == SCHEDULING_PRIORITY ? "priority" : "fcfs", first);
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(c[i].num[0], 60);
        cr_expect_eq(c[i].finish[0], FINISH_LENGTH);
        cr_expect(memcmp(c[i].ids[0], alone[i].ids[0], sizeof(int32_t) * 60) == 0,
                  "request %d: preemption changed its tokens", i);
    }
    cr_expect_eq(st.kv_blocks_used, 0);
    cr_log_info("%s: %lld preemptions", policy == SCHEDULING_PRIORITY ? "priority" : "fcfs", st.preemptions);
    close_engine(&t);
    free(a);
    free(b);
    free(alone);
    free(c);
}

Test(engine_controls, priority_preempts_the_least_urgent) { squeeze(SCHEDULING_PRIORITY); }
Test(engine_controls, fcfs_preempts_the_most_recent) { squeeze(SCHEDULING_FCFS); }
