/*
 * api_error.h - an OpenAI-style error on its way to the client.
 *
 * Every failure the HTTP API reports is one of these, rendered as
 * {"error": {"message", "type", "param", "code"}} with its HTTP status.
 */
#ifndef NANOVLLM_API_ERROR_H
#define NANOVLLM_API_ERROR_H

#include <stdarg.h>
#include <stdio.h>

#include "base/error.h"

typedef struct ApiError {
    unsigned status;  /* HTTP status */
    const char *type; /* invalid_request_error, authentication_error, not_found_error, server_error */
    const char *code; /* NULL or a machine-readable code such as "context_length_exceeded" */
    char param[64];   /* the offending field, "" when none */
    char message[1024];
} ApiError;

/* Fills e and returns -1: `return api_error(e, 400, "temperature", "...")`. */
static inline int api_error(ApiError *e, unsigned status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline int api_error(ApiError *e, unsigned status, const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = status == 401   ? "authentication_error"
              : status == 404 ? "not_found_error"
              : status >= 500 ? "server_error"
                              : "invalid_request_error";
    e->code = NULL;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* An error from the engine (or a library below it), its status chosen by its
 * kind: the request's fault is a 400, ours a 500. */
static inline int api_error_from(ApiError *e, ErrorKind kind, const char *param, const char *message) {
    return api_error(e, kind == ERROR_INTERNAL ? 500 : 400, param, "%s", message);
}

#endif
