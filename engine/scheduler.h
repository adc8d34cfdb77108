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
 * Under block pressure the most recently admitted running sequence is
 * preempted (LIFO): its blocks are released and it goes back to the head of
 * the waiting queue, to be recomputed (its full blocks usually come back from
 * the prefix cache). No waiting sequence is admitted in a step that
 * preempted. A sequence that cannot grow even when it is the only one left
 * holding blocks can never fit: it fails (KV cache too small) instead of
 * being preempted forever, and the others go on.
 */
#ifndef NANOVLLM_SCHEDULER_H
#define NANOVLLM_SCHEDULER_H

#include <stdbool.h>

#include "block_manager.h"
#include "sequence.h"

typedef struct SchedulerOptions {
    int max_num_seqs;
    int max_num_batched_tokens;
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

/* Queues a new sequence (tail) or a resumed one (head: forked samples). */
void scheduler_add(Scheduler *s, Sequence *seq);
void scheduler_add_front(Scheduler *s, Sequence *seq);

/* Takes a sequence out of whichever queue holds it and releases its blocks. */
void scheduler_remove(Scheduler *s, Sequence *seq);

void scheduler_schedule(Scheduler *s, SchedulerOutput *out);

int scheduler_num_running(const Scheduler *s);
int scheduler_num_waiting(const Scheduler *s);
long long scheduler_num_preemptions(const Scheduler *s);

#endif
