/*
 * error.c - formatting of Error messages (see error.h).
 */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void set(Error *e, ErrorKind kind, const char *fmt, va_list ap) {
    if (!e) return;
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    e->kind = kind;
}

int error_set(Error *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set(e, ERROR_INTERNAL, fmt, ap);
    va_end(ap);
    return -1;
}

int error_set_kind(Error *e, ErrorKind kind, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set(e, kind, fmt, ap);
    va_end(ap);
    return -1;
}

int error_prefix(Error *e, const char *fmt, ...) {
    if (!e) return -1;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Both parts are cut to fit: the message keeps its start, which says most. */
    char old[sizeof e->msg];
    memcpy(old, e->msg, sizeof old);
    size_t cap = sizeof e->msg - 1, n = strnlen(prefix, cap - 2);
    memcpy(e->msg, prefix, n);
    memcpy(e->msg + n, ": ", 2);
    n += 2;
    size_t rest = strnlen(old, sizeof old - 1);
    if (rest > cap - n) rest = cap - n;
    memcpy(e->msg + n, old, rest);
    e->msg[n + rest] = '\0';
    return -1;
}
