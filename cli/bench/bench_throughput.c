/*
 * bench_throughput.c - nano-vllm's bench.py, run through our engine.
 *
 * As bench.py: a short warm-up request, then every request submitted at once
 * (temperature 0.6, ignore_eos, max_tokens drawn per request) and the clock
 * runs until the last one finishes; throughput is output tokens / seconds.
 * Requests are seeded by their index, so runs repeat exactly.
 *
 * It also times the engine's steps. A step is a "decode step" when every
 * request has been prefilled and none has finished yet, i.e. all num_seqs
 * sequences decode one token: with the null runner its mean time is what
 * the engine itself costs per step (scheduling, blocks, batch, delivery).
 */
#include "bench_throughput.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench_tally.h"
#include "bench_workload.h"
#include "base/log.h"

static void warm_up(Engine *e, Error *err) {
    int32_t prompt[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    BenchTally p = {0};
    SamplingParams sp = sampling_params_default();
    sp.max_tokens = 4;
    sp.ignore_eos = true;
    EngineRequest req = {.prompt = prompt, .prompt_len = 8, .params = sp, .on_output = bench_tally_output, .user = &p};
    if (engine_submit(e, &req, NULL, err) == 0)
        while (p.finished < 1 && engine_step(e, err) >= 0) {
        }
}

static void show_progress(const BenchTally *p, int total, long want_tokens, double elapsed) {
    int width = 30, done = (int)(width * (double)p->tokens / (double)want_tokens);
    fprintf(stderr, "\r[%.*s%*s] %d/%d done, %ld/%ld tokens, %.1f tokens/s ", done,
            "==============================", width - done, "", p->finished, total,
            p->tokens, want_tokens, elapsed > 0 ? p->tokens / elapsed : 0.0);
}

int bench_throughput(Engine *e, const ThroughputConfig *c, Error *err) {
    BenchWorkload w;
    if (bench_workload_make(&w, c->num_seqs, c->min_input, c->max_input, c->min_output,
                            c->max_output, (uint32_t)c->seed))
        return error_set(err, "out of memory (workload)");
    warm_up(e, err);
    EngineStats before = engine_stats(e);

    BenchTally p = {0};
    int rc = 0;
    for (int i = 0; i < w.num_seqs && rc == 0; i++) {
        SamplingParams sp = sampling_params_default();
        sp.temperature = 0.6f;
        sp.ignore_eos = true;
        sp.max_tokens = w.max_tokens[i];
        sp.has_seed = true;
        sp.seed = (uint64_t)i;
        EngineRequest req = {.prompt = w.prompts[i], .prompt_len = w.prompt_lens[i], .params = sp, .on_output = bench_tally_output, .user = &p};
        rc = engine_submit(e, &req, NULL, err);
    }
    double t0 = now_seconds(), last_shown = 0, decode_seconds = 0;
    long decode_steps = 0, steps = 0;
    while (rc == 0 && p.finished < w.num_seqs) {
        bool all_decoding = p.started == w.num_seqs && p.finished == 0;
        double ts = now_seconds();
        if (engine_step(e, err) < 0) rc = -1;
        double dt = now_seconds() - ts;
        steps++;
        if (all_decoding && p.finished == 0) {
            decode_steps++;
            decode_seconds += dt;
        }
        if (c->progress && (ts - last_shown > 0.25 || p.finished == w.num_seqs)) {
            show_progress(&p, w.num_seqs, w.total_output_tokens, now_seconds() - t0);
            last_shown = ts;
        }
    }
    double seconds = now_seconds() - t0;
    if (c->progress) fputc('\n', stderr);
    if (rc == 0 && p.error[0]) rc = error_set(err, "a request failed: %s", p.error);
    if (rc == 0) {
        EngineStats st = engine_stats(e);
        double tps = w.total_output_tokens / seconds;
        double step_us = decode_steps ? 1e6 * decode_seconds / decode_steps : 0.0;
        long long preempt = st.preemptions - before.preemptions;
        ModelSize size = model_weights_size(engine_runner(e)->model);
        if (c->json) {
            json_t *o = json_pack(
                "{s:s, s:i, s:I, s:I, s:f, s:f, s:I, s:I, s:I, s:f, s:f, s:f, s:f}", "device",
                engine_runner(e)->description, "num_seqs", w.num_seqs, "prompt_tokens",
                (json_int_t)w.total_prompt_tokens, "output_tokens",
                (json_int_t)w.total_output_tokens, "seconds", seconds, "output_tokens_per_s", tps,
                "steps", (json_int_t)steps, "preemptions", (json_int_t)preempt, "decode_steps",
                (json_int_t)decode_steps, "decode_step_us", step_us, "total_params",
                size.total_params, "active_params", size.active_params, "weight_bytes_per_token",
                size.bytes_per_token);
            if (o) json_dumpf(o, stdout, JSON_COMPACT);
            json_decref(o);
            putchar('\n');
        } else {
            printf("device            %s\n", engine_runner(e)->description);
            printf("model             %.3gB parameters, %.3gB active per token (%.3g GB of "
                   "weights read per decode token)\n",
                   size.total_params / 1e9, size.active_params / 1e9, size.bytes_per_token / 1e9);
            printf("workload          %d requests, %ld prompt + %ld output tokens (bench.py, seed %d)\n",
                   w.num_seqs, w.total_prompt_tokens, w.total_output_tokens, c->seed);
            printf("throughput        %ld output tokens in %.3f s = %.1f tokens/s\n",
                   w.total_output_tokens, seconds, tps);
            printf("engine            %ld steps, %lld preemptions; %ld steps with all %d decoding: "
                   "%.1f us each\n",
                   steps, preempt, decode_steps, w.num_seqs, step_us);
        }
    }
    bench_workload_free(&w);
    return rc;
}
