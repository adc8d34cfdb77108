/*
 * error.h - the one way errors travel in nanovllm.
 *
 * Every fallible function takes an Error* and returns -1 (or NULL) after
 * writing a complete, user-facing sentence into it.  Callers add context with
 * error_prefix() as the error climbs ("model.safetensors: tensor x: ...").
 * The CLI prints the message; the HTTP server turns it into an OpenAI-style
 * JSON error whose status comes from the error's kind, never from its text.
 * Nothing in the engine aborts on user input.
 */
#ifndef NANOVLLM_ERROR_H
#define NANOVLLM_ERROR_H

#include <stddef.h>

/* Whose fault, so that a caller can answer without reading the message. */
typedef enum ErrorKind {
    ERROR_INTERNAL, /* ours or the machine's: out of memory, a device, a broken model folder */
    ERROR_INVALID,  /* the request is wrong: a bad value, id or field */
    ERROR_TOO_LONG, /* the request is valid but does not fit: max_model_len, the KV cache */
} ErrorKind;

typedef struct Error {
    char msg[1024];
    ErrorKind kind;
} Error;

/* Formats msg into e (if e is not NULL), with kind ERROR_INTERNAL, and
 * returns -1, so that a failing function can end with
 * `return error_set(e, "...", ...);`. */
int error_set(Error *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The same with another kind: `return error_set_kind(e, ERROR_INVALID, ...);`. */
int error_set_kind(Error *e, ErrorKind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to the message already in e (its kind stays); returns -1. */
int error_prefix(Error *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
