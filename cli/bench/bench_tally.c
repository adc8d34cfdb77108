/*
 * bench_tally.c - counting a benchmark's request outputs (see bench_tally.h).
 */
#include "bench_tally.h"

#include <stdio.h>

void bench_tally_output(const EngineOutput *o, void *user) {
    BenchTally *t = user;
    if (o->has_token) {
        t->tokens++;
        if (o->num_output_tokens == 1) t->started++;
    }
    if (o->finish != FINISH_NONE) {
        t->finished++;
        if (o->finish == FINISH_ERROR && !t->error[0])
            snprintf(t->error, sizeof t->error, "%s", o->error ? o->error : "unknown error");
    }
}
