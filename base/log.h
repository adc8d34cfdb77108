/*
 * log.h - start-up and progress messages on stderr.
 *
 * stdout belongs to results (--json output, generated text); everything a
 * human reads about what the program is doing goes through log_info().
 */
#ifndef NANOVLLM_LOG_H
#define NANOVLLM_LOG_H

#include <stdbool.h>

void log_set_quiet(bool quiet);
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Seconds on a monotonic clock, for timings in logs and benchmarks. */
double now_seconds(void);

#endif
