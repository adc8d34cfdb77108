/*
 * log.c - stderr logging with a timestamp (see log.h).
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static bool quiet;

void log_set_quiet(bool q) { quiet = q; }

void log_info(const char *fmt, ...) {
    if (quiet) return;
    char stamp[32];
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
    fprintf(stderr, "%s nanovllm: ", stamp);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
