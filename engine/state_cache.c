/*
 * state_cache.c - checkpoints of recurrent state by prefix hash (see
 * state_cache.h). A few hundred checkpoints at most (each is a whole
 * sequence's state, megabytes), so plain scans.
 */
#include "state_cache.h"

#include <stdlib.h>

typedef struct Entry {
    uint64_t hash;
    bool registered;      /* holds the state after `hash` (else: free, or a save in progress) */
    uint64_t last_use;    /* LRU clock */
    uint64_t pinned_step; /* 1 + the step that restores from or saves into it; 0: none */
} Entry;

struct StateCache {
    Entry *entries;
    int num;
    uint64_t clock;
};

StateCache *state_cache_create(int num_checkpoints, Error *err) {
    StateCache *c = calloc(1, sizeof *c);
    if (c) c->entries = calloc((size_t)(num_checkpoints > 0 ? num_checkpoints : 1), sizeof *c->entries);
    if (!c || !c->entries) {
        state_cache_destroy(c);
        error_set(err, "out of memory");
        return NULL;
    }
    c->num = num_checkpoints;
    return c;
}

void state_cache_destroy(StateCache *c) {
    if (!c) return;
    free(c->entries);
    free(c);
}

int state_cache_find(StateCache *c, uint64_t hash) {
    for (int i = 0; i < c->num; i++)
        if (c->entries[i].registered && c->entries[i].hash == hash) {
            c->entries[i].last_use = ++c->clock;
            return i;
        }
    return -1;
}

static bool pinned(const Entry *e, uint64_t step) { return e->pinned_step == step + 1; }

/* A save planned this step is pinned and not yet registered; one planned
 * in an earlier step that never published (the step failed) is just free. */
bool state_cache_holds(const StateCache *c, uint64_t hash, uint64_t step) {
    for (int i = 0; i < c->num; i++) {
        const Entry *e = &c->entries[i];
        if ((e->registered || pinned(e, step)) && e->hash == hash) return true;
    }
    return false;
}

int state_cache_take(StateCache *c, uint64_t step, uint64_t hash) {
    int best = -1;
    for (int i = 0; i < c->num; i++) {
        Entry *e = &c->entries[i];
        if (pinned(e, step)) continue;
        if (!e->registered) {
            best = i;
            break;
        }
        if (best < 0 || e->last_use < c->entries[best].last_use) best = i;
    }
    if (best < 0) return -1;
    Entry *e = &c->entries[best];
    e->registered = false;
    e->hash = hash;
    e->pinned_step = step + 1;
    return best;
}

void state_cache_pin(StateCache *c, int checkpoint, uint64_t step) {
    c->entries[checkpoint].pinned_step = step + 1;
}

void state_cache_publish(StateCache *c, int checkpoint) {
    Entry *e = &c->entries[checkpoint];
    e->registered = true;
    e->last_use = ++c->clock;
}
