/*
 * error.h - the one way errors travel in nanovllm.
 *
 * Every fallible function takes an Error* and returns -1 (or NULL) after
 * writing a complete, user-facing sentence into it.  Callers add context with
 * error_prefix() as the error climbs ("model.safetensors: tensor x: ...").
 * The CLI prints the message; the HTTP server will turn it into an
 * OpenAI-style JSON error.  Nothing in the engine aborts on user input.
 */
#ifndef NANOVLLM_ERROR_H
#define NANOVLLM_ERROR_H

#include <stddef.h>

typedef struct Error {
    char msg[1024];
} Error;

/* Formats msg into e (if e is not NULL) and returns -1, so that a failing
 * function can end with `return error_set(e, "...", ...);`. */
int error_set(Error *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends "prefix: " to the message already in e; returns -1. */
int error_prefix(Error *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
