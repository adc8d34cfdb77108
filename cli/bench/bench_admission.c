/*
 * bench_admission.c - what a long prompt costs the sequences already
 * decoding, and how soon it starts (`nanovllm bench --admission`).
 *
 * num_seqs requests with short prompts decode without end (ignore_eos);
 * once all have their first token, STEADY_STEPS steps time their decode
 * rate. Then one prompt of long_len tokens arrives and the clock runs until
 * its first token: its time to first token, the decoders' tokens and rate
 * in that window, and the longest step in it (the longest any stream waited
 * for its next token). The scheduler shares each step's token budget
 * (--max-num-batched-tokens) between the decodes and a chunk of the prompt,
 * so the budget decides the trade: one long step stalls every stream for
 * the whole prefill, small chunks stretch the first token over many steps.
 */
#include "bench_admission.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/log.h"
#include "bench_tally.h"

#define STEADY_STEPS 16

/* A request of n token ids (1..10,000, from seed) that decodes up to max_tokens. */
static int submit(Engine *e, int32_t *ids, int n, int seed, int max_tokens, BenchTally *t, Error *err) {
    for (int i = 0; i < n; i++) ids[i] = 1 + (int32_t)(((uint32_t)i * 2654435761u + (uint32_t)seed * 40503u) % 10000u);
    SamplingParams sp = sampling_params_default();
    sp.ignore_eos = true;
    sp.max_tokens = max_tokens;
    EngineRequest req = {.prompt = ids, .prompt_len = n, .params = sp, .on_output = bench_tally_output, .user = t};
    return engine_submit(e, &req, NULL, err);
}

/* One engine step: an error, a failed request or a decoder that finished is an error. */
static int step(Engine *e, const BenchTally *decoders, const BenchTally *extra, Error *err) {
    if (engine_step(e, err) < 0) return -1;
    const BenchTally *bad = decoders->error[0] ? decoders : extra && extra->error[0] ? extra : NULL;
    if (bad) return error_set(err, "a request failed: %s", bad->error);
    if (decoders->finished) return error_set(err, "a decoding request finished early (max_model_len too short)");
    return 0;
}

int bench_admission(Engine *e, const AdmissionConfig *c, Error *err) {
    const RunnerOptions *o = &engine_runner(e)->options;
    const int max_len = o->max_model_len;
    if (c->long_len + 1 > max_len || c->prompt_len + 1 > max_len)
        return error_set(err, "--input-len %d and the decoders' %d-token prompts must leave room for a token "
                              "in max_model_len %d", c->long_len, c->prompt_len, max_len);
    int32_t *ids = malloc(sizeof *ids * (size_t)(c->long_len > c->prompt_len ? c->long_len : c->prompt_len));
    if (!ids) return error_set(err, "out of memory (prompt of %d tokens)", c->long_len);
    BenchTally decoders = {0}, admitted = {0};
    int rc = 0;
    for (int i = 0; i < c->num_seqs && rc == 0; i++)
        rc = submit(e, ids, c->prompt_len, i + 1, max_len - c->prompt_len, &decoders, err);
    while (rc == 0 && decoders.started < c->num_seqs) rc = step(e, &decoders, NULL, err);

    double t0 = now_seconds();
    long tokens0 = decoders.tokens;
    for (int i = 0; i < STEADY_STEPS && rc == 0; i++) rc = step(e, &decoders, NULL, err);
    const double steady_s = now_seconds() - t0;
    const long steady_tokens = decoders.tokens - tokens0;

    if (rc == 0) rc = submit(e, ids, c->long_len, 0, 1, &admitted, err);
    const double t_submit = now_seconds();
    tokens0 = decoders.tokens;
    int steps = 0;
    double longest = 0;
    while (rc == 0 && admitted.started == 0) {
        const double ts = now_seconds();
        rc = step(e, &decoders, &admitted, err);
        const double dt = now_seconds() - ts;
        if (dt > longest) longest = dt;
        steps++;
    }
    const double ttft = now_seconds() - t_submit;
    const long window_tokens = decoders.tokens - tokens0;
    free(ids);
    if (rc) return -1;

    const double steady_tps = steady_tokens / steady_s, window_tps = window_tokens / ttft;
    if (c->json) {
        json_t *j = json_pack("{s:s, s:i, s:i, s:i, s:i, s:f, s:f, s:I, s:f, s:i, s:f}", "device",
                              engine_runner(e)->description, "num_seqs", c->num_seqs, "prompt_len", c->prompt_len,
                              "long_prompt_len", c->long_len, "max_num_batched_tokens", o->max_num_batched_tokens,
                              "steady_decode_tokens_per_s", steady_tps, "admission_decode_tokens_per_s", window_tps,
                              "admission_decode_tokens", (json_int_t)window_tokens, "ttft_s", ttft,
                              "admission_steps", steps, "longest_step_ms", 1e3 * longest);
        if (j) json_dumpf(j, stdout, JSON_COMPACT);
        json_decref(j);
        putchar('\n');
        return 0;
    }
    printf("device            %s\n", engine_runner(e)->description);
    printf("decoding          %d sequences (%d-token prompts): %.1f tokens/s over %d steps\n", c->num_seqs,
           c->prompt_len, steady_tps, STEADY_STEPS);
    printf("admitted          a %d-token prompt, %d tokens a step at most: first token after %.3f s, %d steps\n",
           c->long_len, o->max_num_batched_tokens, ttft, steps);
    printf("meanwhile         %ld decode tokens = %.1f tokens/s (%.2fx the steady rate); longest step %.1f ms\n",
           window_tokens, window_tps, steady_tps > 0 ? window_tps / steady_tps : 0.0, 1e3 * longest);
    return 0;
}
