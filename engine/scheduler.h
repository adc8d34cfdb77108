/*
 * scheduler.h - what to compute next: continuous batching with chunked prefill.
 *
 * Each step fills a token budget (max_num_batched_tokens) and a sequence
 * budget (max_num_seqs), as vLLM's unified scheduler does: first every
 * running sequence, oldest first (a decode needs one token; a prompt still
 * being prefilled continues with as many as the budget allows), then waiting
 * sequences, head first, admitted after a prefix-cache lookup and prefilled
 * in chunks. So decode tokens and a prefill chunk share one step, and
 * running streams never stall behind a long prompt.
 *
 * Under block pressure the running sequence at the tail is preempted: its
 * blocks are released and it goes back to the waiting queue, to be
 * recomputed (its full blocks usually come back from the prefix cache). No
 * waiting sequence is admitted in a step that preempted. A sequence that
 * cannot grow even when it is the only one left holding blocks can never
 * fit: it fails (KV cache too small) instead of being preempted forever, and
 * the others go on.
 *
 * Which sequence is where depends on the policy (vLLM's --scheduling-policy):
 *  - SCHEDULING_FCFS (the default): queues in arrival order. New sequences
 *    join the waiting queue's tail; preempted and forked ones its head (they
 *    were there first). Admitted sequences join the running queue's tail, so
 *    the victim is the most recently admitted one (LIFO).
 *  - SCHEDULING_PRIORITY: both queues ordered by (priority, arrival) -
 *    Sequence.priority, lower first, then Sequence.arrival (the engine's
 *    submission order). New, preempted and forked sequences are all inserted
 *    at their place (new ones after their equals, preempted and forked ones
 *    before), admitted ones too. So the waiting head is the most urgent
 *    request, running sequences get the token budget most urgent first, and
 *    the victim is the running sequence with the largest (priority, arrival):
 *    the least urgent, most recent one (vLLM V1 preempts
 *    max(running, key=(priority, arrival))). As in vLLM, a waiting sequence
 *    never preempts a running one to be admitted: it waits for free blocks.
 */
#ifndef NANOVLLM_SCHEDULER_H
#define NANOVLLM_SCHEDULER_H

#include <stdbool.h>

#include "block_manager.h"
#include "sequence.h"
#include "state_cache.h"

typedef enum SchedulingPolicy { SCHEDULING_FCFS, SCHEDULING_PRIORITY } SchedulingPolicy;

typedef struct SchedulerOptions {
    int max_num_seqs;
    int max_num_batched_tokens;
    SchedulingPolicy policy;
    /* > 0: the model keeps a fixed-size recurrent state per sequence (Qwen3.5's
     * Gated DeltaNet layers) in this many runner slots. A sequence holds one
     * from admission until it finishes or is preempted (then recomputed from
     * its first token, the state being gone), is admitted only when one is
     * free. Cached prefix blocks hold the attention layers' K/V but not the
     * state: without state_cache no prefix is reused; with it, a prefix is
     * reused up to the longest one whose end has a checkpoint
     * (Sequence.restore_checkpoint), and a prefill is cut at the last block
     * boundary before the sequence's end, so that the state there can be
     * saved (the engine saves at every step that ends on a boundary). */
    int num_state_slots;
    StateCache *state_cache; /* borrowed; NULL: no prefix caching for stateful models */
} SchedulerOptions;

typedef struct ScheduledSeq {
    Sequence *seq;
    int num_new_tokens;  /* from seq->num_computed on */
    bool compute_logits; /* this step reaches the end of the sequence's tokens */
} ScheduledSeq;

typedef struct SchedulerOutput {
    ScheduledSeq *seqs; /* scheduler-owned, valid until the next call */
    int num_seqs;
    int num_tokens;
    Sequence **failed; /* removed from the queues: they can never fit */
    int num_failed;
} SchedulerOutput;

typedef struct Scheduler Scheduler;

Scheduler *scheduler_create(const SchedulerOptions *opts, BlockManager *bm, int max_sequences,
                            Error *err);
void scheduler_destroy(Scheduler *s);

/* Changes the policy; the queues are reordered for it (stably). */
void scheduler_set_policy(Scheduler *s, SchedulingPolicy policy);

/* Queues a new sequence (FCFS: tail) or a resumed one (FCFS: head; forked
 * samples); under SCHEDULING_PRIORITY both at their place (see above). */
void scheduler_add(Scheduler *s, Sequence *seq);
void scheduler_add_front(Scheduler *s, Sequence *seq);

/* Takes a sequence out of whichever queue holds it and releases its blocks. */
void scheduler_remove(Scheduler *s, Sequence *seq);

void scheduler_schedule(Scheduler *s, SchedulerOutput *out);

/* Which scheduling step the last scheduler_schedule made (state_cache pins). */
uint64_t scheduler_step_id(const Scheduler *s);

int scheduler_num_running(const Scheduler *s);
int scheduler_num_waiting(const Scheduler *s);
long long scheduler_num_preemptions(const Scheduler *s);

#endif
