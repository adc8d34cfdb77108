/*
 * response_store.h - the Responses API's memory: finished responses kept
 * for GET /v1/responses/{id} and for a later request's
 * previous_response_id.
 *
 * Each entry holds the response object as the client received it and the
 * conversation that led to it and through it, as chat messages (so a
 * continuation renders exactly what the chat template would have seen).
 * The store is bounded three ways, each a serve flag: a number of entries,
 * a number of bytes (the entries' compact JSON), and an age after which an
 * entry is gone. When a new entry does not fit, the oldest go first. It
 * belongs to the event-loop thread; nothing here locks.
 */
#ifndef NANOVLLM_RESPONSE_STORE_H
#define NANOVLLM_RESPONSE_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct ResponseStoreLimits {
    int max_entries;    /* 0: nothing is stored */
    size_t max_bytes;   /* the entries' JSON, in all */
    double ttl_seconds; /* an entry older than this is gone */
} ResponseStoreLimits;

typedef struct ResponseStore ResponseStore;

ResponseStore *response_store_new(const ResponseStoreLimits *limits);
void response_store_free(ResponseStore *s);

/* Keeps the response (its "id" names it) and its conversation, taking a
 * reference to each. 1: stored; 0: not stored (storing is off, or the
 * entry alone is larger than the whole store); -1: out of memory. */
int response_store_put(ResponseStore *s, json_t *response, json_t *conversation, double now);

/* Borrowed until the next put or delete; false when unknown or expired. */
bool response_store_get(ResponseStore *s, const char *id, double now, json_t **response,
                        json_t **conversation);

/* false when unknown or expired. */
bool response_store_delete(ResponseStore *s, const char *id, double now);

int response_store_count(const ResponseStore *s);
size_t response_store_bytes(const ResponseStore *s);

#endif
