/*
 * response_store.c - the Responses API's bounded memory (see
 * response_store.h).
 *
 * Entries form one list in the order they were stored, which is also the
 * order they expire and are evicted in: expiry and eviction only ever cut
 * the oldest end. Lookups walk the list; the list is as long as
 * --responses-store-entries allows (a thousand by default), and a walk
 * compares short ids, far below the cost of the request that asks.
 */
#include "response_store.h"

#include <stdlib.h>
#include <string.h>

typedef struct Entry {
    struct Entry *newer, *older;
    char *id;
    json_t *response, *conversation;
    size_t bytes;
    double stored_at;
} Entry;

struct ResponseStore {
    ResponseStoreLimits limits;
    Entry *newest, *oldest;
    int count;
    size_t bytes;
};

ResponseStore *response_store_new(const ResponseStoreLimits *limits) {
    ResponseStore *s = calloc(1, sizeof *s);
    if (s) s->limits = *limits;
    return s;
}

static void unlink_entry(ResponseStore *s, Entry *e) {
    if (e->newer) e->newer->older = e->older; else s->newest = e->older;
    if (e->older) e->older->newer = e->newer; else s->oldest = e->newer;
    s->count--;
    s->bytes -= e->bytes;
    json_decref(e->response);
    json_decref(e->conversation);
    free(e->id);
    free(e);
}

void response_store_free(ResponseStore *s) {
    if (!s) return;
    while (s->oldest) unlink_entry(s, s->oldest);
    free(s);
}

static void expire(ResponseStore *s, double now) {
    while (s->oldest && now - s->oldest->stored_at > s->limits.ttl_seconds) unlink_entry(s, s->oldest);
}

static size_t json_bytes(const json_t *j) {
    char *text = json_dumps(j, JSON_COMPACT);
    size_t n = text ? strlen(text) : 0;
    free(text);
    return n;
}

int response_store_put(ResponseStore *s, json_t *response, json_t *conversation, double now) {
    const char *id = json_string_value(json_object_get(response, "id"));
    if (!id || s->limits.max_entries <= 0) return 0;
    expire(s, now);
    size_t bytes = json_bytes(response) + json_bytes(conversation) + strlen(id);
    if (bytes > s->limits.max_bytes) return 0;
    Entry *e = calloc(1, sizeof *e);
    if (!e || !(e->id = strdup(id))) {
        free(e);
        return -1;
    }
    while (s->oldest && (s->count >= s->limits.max_entries || s->bytes + bytes > s->limits.max_bytes))
        unlink_entry(s, s->oldest);
    e->response = json_incref(response);
    e->conversation = json_incref(conversation);
    e->bytes = bytes;
    e->stored_at = now;
    e->older = s->newest;
    if (s->newest) s->newest->newer = e; else s->oldest = e;
    s->newest = e;
    s->count++;
    s->bytes += bytes;
    return 1;
}

static Entry *find(ResponseStore *s, const char *id, double now) {
    expire(s, now);
    for (Entry *e = s->newest; e; e = e->older)
        if (strcmp(e->id, id) == 0) return e;
    return NULL;
}

bool response_store_get(ResponseStore *s, const char *id, double now, json_t **response,
                        json_t **conversation) {
    Entry *e = find(s, id, now);
    if (!e) return false;
    if (response) *response = e->response;
    if (conversation) *conversation = e->conversation;
    return true;
}

bool response_store_delete(ResponseStore *s, const char *id, double now) {
    Entry *e = find(s, id, now);
    if (!e) return false;
    unlink_entry(s, e);
    return true;
}

int response_store_count(const ResponseStore *s) { return s->count; }
size_t response_store_bytes(const ResponseStore *s) { return s->bytes; }
