/*
 * api_cors.h - Cross-Origin Resource Sharing for `--allowed-origins`
 * (vLLM's flag): which web pages on other origins may call the API from a
 * browser. Off by default: no CORS header is ever sent, so a browser keeps
 * other origins' pages out, and the server answers every request as it
 * always did (CORS is a rule browsers enforce, not an access control).
 */
#ifndef NANOVLLM_API_CORS_H
#define NANOVLLM_API_CORS_H

#include <stdbool.h>

#include "base/error.h"
#include "server/http/http_server.h"

typedef struct CorsOrigins {
    char **origins; /* exact "scheme://host[:port]" strings */
    int count;
    bool any; /* "*" was listed */
} CorsOrigins;

/* A comma-separated list ("https://a.example,http://localhost:3000") or a
 * JSON array of strings (vLLM's form, '["*"]'); an empty list is none. */
int cors_origins_parse(const char *arg, CorsOrigins *out, Error *err);
void cors_origins_free(CorsOrigins *o);
bool cors_origins_enabled(const CorsOrigins *o);

/* Adds this exchange's CORS headers (Vary: Origin whenever CORS is on; the
 * Allow-Origin for an allowed Origin) to whatever response it gets. True
 * when the request is a preflight from an allowed origin: the caller then
 * answers it with cors_answer_preflight and nothing else. */
bool cors_prepare(const CorsOrigins *o, HttpExchange *ex);
void cors_answer_preflight(HttpExchange *ex);

#endif
