/*
 * state_cache.h - prefix caching for models with recurrent state: which of
 * the runner's state checkpoints holds the state after which cached prefix.
 *
 * A hybrid model's KV blocks hold its attention layers' keys and values but
 * not its linear layers' recurrent state, so a cached prefix is usable only
 * where the state at its end was kept. The runner keeps copies of a
 * sequence's state (checkpoints, RunnerSeq.save); this maps the chain hash
 * of the block a checkpoint ends at (block_manager.h) to it, and picks the
 * checkpoint a new save goes to: a free one, else the least recently used
 * one not pinned for the current step (pinned: being restored or saved in
 * it). The engine saves at block boundaries (the end of a prompt's last full
 * block, and every block boundary decode crosses); a sequence admitted with
 * a cached prefix restores from the checkpoint at the end of the longest
 * prefix that has one.
 */
#ifndef NANOVLLM_STATE_CACHE_H
#define NANOVLLM_STATE_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

typedef struct StateCache StateCache;

StateCache *state_cache_create(int num_checkpoints, Error *err);
void state_cache_destroy(StateCache *c);

/* The checkpoint holding the state after the prefix whose last block has
 * this chain hash, or -1. A hit counts as a use (LRU). */
int state_cache_find(StateCache *c, uint64_t hash);

/* Whether a checkpoint holds, or a save of step `step` is about to hold, the
 * state after the prefix with this hash (then a new save is not needed). */
bool state_cache_holds(const StateCache *c, uint64_t hash, uint64_t step);

/* A checkpoint for a save in step `step` of the state after the prefix with
 * this hash: pinned for that step, findable once state_cache_publish says
 * the save is done (a step that fails never publishes: the checkpoint is
 * free again from the next step on); -1 when every one is pinned. */
int state_cache_take(StateCache *c, uint64_t step, uint64_t hash);

/* Pins a found checkpoint for the step that restores from it. */
void state_cache_pin(StateCache *c, int checkpoint, uint64_t step);

/* The save into `checkpoint` is done: findable by its hash from now on. */
void state_cache_publish(StateCache *c, int checkpoint);

#endif
