/*
 * scheduler.c - one step's batch (see scheduler.h for the policy).
 */
#include "scheduler.h"

#include <stdlib.h>

typedef struct Queue {
    Sequence *head, *tail;
    int size;
} Queue;

struct Scheduler {
    SchedulerOptions opts;
    BlockManager *bm;
    Queue waiting, running;
    ScheduledSeq *scheduled;
    Sequence **failed;
    int capacity; /* most sequences that can be scheduled or fail in one step */
    long long preemptions;
    int *free_slots; /* recurrent-state slots not held (a stack) */
    int num_free_slots;
    uint64_t step;
};

static void queue_unlink(Queue *q, Sequence *s) {
    if (s->prev) s->prev->next = s->next; else q->head = s->next;
    if (s->next) s->next->prev = s->prev; else q->tail = s->prev;
    s->prev = s->next = NULL;
    q->size--;
}

static void queue_push_back(Queue *q, Sequence *s) {
    s->next = NULL;
    s->prev = q->tail;
    if (q->tail) q->tail->next = s; else q->head = s;
    q->tail = s;
    q->size++;
}

static void queue_push_front(Queue *q, Sequence *s) {
    s->prev = NULL;
    s->next = q->head;
    if (q->head) q->head->prev = s; else q->tail = s;
    q->head = s;
    q->size++;
}

/* SCHEDULING_PRIORITY's order: a is more urgent than b. */
static bool precedes(const Sequence *a, const Sequence *b) {
    return a->priority < b->priority || (a->priority == b->priority && a->arrival < b->arrival);
}

/* Inserts s at its place by (priority, arrival): before its equals (ahead)
 * or after them. The walk starts at the tail, where new arrivals land. */
static void queue_insert_ordered(Queue *q, Sequence *s, bool ahead) {
    Sequence *after = q->tail; /* s goes right after this one (NULL: at the head) */
    if (ahead)
        while (after && !precedes(after, s)) after = after->prev;
    else
        while (after && precedes(s, after)) after = after->prev;
    if (!after) {
        queue_push_front(q, s);
        return;
    }
    s->prev = after;
    s->next = after->next;
    if (after->next) after->next->prev = s; else q->tail = s;
    after->next = s;
    q->size++;
}

/* Where a sequence enters a queue: FCFS at the tail (new) or the head
 * (resumed); PRIORITY at its place, resumed ones before their equals. */
static void enqueue(const Scheduler *sch, Queue *q, Sequence *s, bool resumed) {
    if (sch->opts.policy == SCHEDULING_PRIORITY) queue_insert_ordered(q, s, resumed);
    else if (resumed) queue_push_front(q, s);
    else queue_push_back(q, s);
}

/* Reinserts every sequence in order (stable: equals keep their order). */
static void queue_sort(Queue *q) {
    Sequence *s = q->head;
    *q = (Queue){0};
    while (s) {
        Sequence *next = s->next;
        queue_insert_ordered(q, s, false);
        s = next;
    }
}

Scheduler *scheduler_create(const SchedulerOptions *opts, BlockManager *bm, int max_sequences,
                            Error *err) {
    Scheduler *s = calloc(1, sizeof *s);
    if (!s) {
        error_set(err, "out of memory");
        return NULL;
    }
    s->opts = *opts;
    s->bm = bm;
    s->capacity = max_sequences > opts->max_num_seqs ? max_sequences : opts->max_num_seqs;
    s->scheduled = malloc(sizeof *s->scheduled * (size_t)s->capacity);
    s->failed = malloc(sizeof *s->failed * (size_t)s->capacity);
    int slots = opts->num_state_slots > 0 ? opts->num_state_slots : 0;
    s->free_slots = malloc(sizeof *s->free_slots * (size_t)(slots ? slots : 1));
    for (int i = 0; s->free_slots && i < slots; i++) s->free_slots[i] = slots - 1 - i;
    s->num_free_slots = slots;
    if (!s->scheduled || !s->failed || !s->free_slots) {
        scheduler_destroy(s);
        error_set(err, "out of memory");
        return NULL;
    }
    return s;
}

void scheduler_destroy(Scheduler *s) {
    if (!s) return;
    free(s->scheduled);
    free(s->failed);
    free(s->free_slots);
    free(s);
}

void scheduler_set_policy(Scheduler *s, SchedulingPolicy policy) {
    s->opts.policy = policy;
    if (policy == SCHEDULING_PRIORITY) {
        queue_sort(&s->waiting);
        queue_sort(&s->running);
    }
}

static void arrive(Scheduler *s, Sequence *seq) {
    seq->status = SEQ_WAITING;
    seq->state_slot = -1;
    seq->restore_checkpoint = -1;
    if (s->opts.num_state_slots > 0 && !s->opts.state_cache) seq->no_prefix_reuse = true;
}

void scheduler_add(Scheduler *s, Sequence *seq) {
    arrive(s, seq);
    enqueue(s, &s->waiting, seq, false);
}

void scheduler_add_front(Scheduler *s, Sequence *seq) {
    arrive(s, seq);
    enqueue(s, &s->waiting, seq, true);
}

static void release_slot(Scheduler *s, Sequence *seq) {
    if (seq->state_slot < 0) return;
    s->free_slots[s->num_free_slots++] = seq->state_slot;
    seq->state_slot = -1;
}

void scheduler_remove(Scheduler *s, Sequence *seq) {
    if (seq->status == SEQ_WAITING) queue_unlink(&s->waiting, seq);
    else if (seq->status == SEQ_RUNNING) queue_unlink(&s->running, seq);
    block_manager_release(s->bm, &seq->blocks);
    release_slot(s, seq);
    seq->num_computed = 0;
    seq->status = SEQ_FINISHED;
}

static void preempt(Scheduler *s, Sequence *seq) {
    queue_unlink(&s->running, seq);
    block_manager_release(s->bm, &seq->blocks);
    release_slot(s, seq);
    seq->num_computed = 0;
    enqueue(s, &s->waiting, seq, true);
    seq->status = SEQ_WAITING;
    s->preemptions++;
}

static void fail(Scheduler *s, Sequence *seq, SchedulerOutput *out) {
    scheduler_remove(s, seq);
    out->failed[out->num_failed++] = seq;
}

/* A stateful sequence's prefill stops at the last block boundary before its
 * end, once, so that the state there can be saved for a later prompt with
 * the same prefix (SchedulerOptions.state_cache). */
static int cut_at_boundary(const Scheduler *s, const Sequence *seq, int computed, int num_new) {
    if (!s->opts.state_cache) return num_new;
    int bs = block_manager_block_size(s->bm), boundary = (seq->num_tokens - 1) / bs * bs;
    if (computed < boundary && computed + num_new > boundary) return boundary - computed;
    return num_new;
}

/* A stateful sequence can start from a cached prefix only where a
 * checkpoint holds the state: the longest matched prefix that has one. */
static int trim_to_checkpoint(Scheduler *s, PrefixMatch *m) {
    int k = m->num_blocks, checkpoint = -1;
    while (k > 0 && (checkpoint = state_cache_find(s->opts.state_cache, m->hashes[k - 1])) < 0) k--;
    m->num_blocks = k;
    m->num_free = 0;
    for (int b = 0; b < k; b++) m->num_free += block_manager_ref_count(s->bm, m->ids[b]) == 0;
    return checkpoint;
}

static void add_scheduled(SchedulerOutput *out, Sequence *seq, int num_new) {
    out->seqs[out->num_seqs++] = (ScheduledSeq){seq, num_new,
                                                seq->num_computed + num_new == seq->num_tokens};
    out->num_tokens += num_new;
}

/* Running sequences, head first (FCFS: oldest; PRIORITY: most urgent), the
 * tail preempted while one cannot grow; returns whether anything was. */
static bool schedule_running(Scheduler *s, SchedulerOutput *out, int *budget) {
    bool preempted = false;
    Sequence *seq = s->running.head;
    while (seq && *budget > 0) {
        int num_new = seq->num_tokens - seq->num_computed;
        if (num_new > *budget) num_new = *budget;
        if (seq->state_slot >= 0) num_new = cut_at_boundary(s, seq, seq->num_computed, num_new);
        bool fits = true;
        while (block_manager_grow(s->bm, &seq->blocks, seq->num_computed + num_new) != 0) {
            Sequence *victim = s->running.tail;
            if (victim == seq) {
                /* Everything after it (newer; under PRIORITY, less urgent) is
                 * gone. If nothing before it holds blocks either, all the
                 * cache there is cannot hold this sequence. */
                if (seq == s->running.head) fail(s, seq, out);
                else preempt(s, seq);
                fits = false;
                break;
            }
            preempt(s, victim);
            preempted = true;
        }
        if (!fits) break; /* seq was the tail: nothing follows it */
        add_scheduled(out, seq, num_new);
        *budget -= num_new;
        seq = seq->next;
    }
    return preempted;
}

/* Waiting sequences, head first, while blocks, tokens and sequence slots last. */
static void schedule_waiting(Scheduler *s, SchedulerOutput *out, int *budget) {
    int bs = block_manager_block_size(s->bm);
    bool stateful = s->opts.num_state_slots > 0;
    while (s->waiting.head && *budget > 0 && s->running.size < s->opts.max_num_seqs &&
           (!stateful || s->num_free_slots > 0)) {
        Sequence *seq = s->waiting.head;
        PrefixMatch match = {0};
        int cached = seq->num_computed; /* forked samples arrive holding blocks */
        int checkpoint = -1;
        if (seq->blocks.num_blocks == 0 && !seq->no_prefix_reuse) {
            /* The block holding the last token is never reused, so at least
             * that token is computed and gives logits. */
            match = block_manager_match(s->bm, seq->tokens, seq->num_tokens,
                                        (seq->num_tokens - 1) / bs, !stateful);
            if (stateful) {
                checkpoint = trim_to_checkpoint(s, &match);
                block_manager_count_prefix(s->bm, seq->num_tokens, (long long)match.num_blocks * bs);
            }
            cached = match.num_blocks * bs;
        }
        int num_new = seq->num_tokens - cached;
        if (num_new > *budget) num_new = *budget;
        if (stateful) num_new = cut_at_boundary(s, seq, cached, num_new);
        int held = seq->blocks.num_blocks + match.num_blocks;
        int need = (cached + num_new + bs - 1) / bs - held;
        if (need > block_manager_num_free(s->bm) - match.num_free) {
            if (s->running.size == 0 && out->num_seqs == 0) fail(s, seq, out); /* even an empty cache is too small */
            break;
        }
        if (match.num_blocks > 0) block_manager_take_match(s->bm, &seq->blocks, &match);
        if (block_manager_grow(s->bm, &seq->blocks, cached + num_new) != 0) break; /* out of memory */
        queue_unlink(&s->waiting, seq);
        if (stateful) {
            seq->state_slot = s->free_slots[--s->num_free_slots];
            seq->restore_checkpoint = cached > 0 ? checkpoint : -1;
            if (seq->restore_checkpoint >= 0) state_cache_pin(s->opts.state_cache, checkpoint, s->step);
        }
        seq->num_computed = cached;
        if (seq->num_tokens == seq->num_prompt_tokens && seq->sample_index == 0)
            seq->num_cached_prompt = cached;
        seq->status = SEQ_RUNNING;
        enqueue(s, &s->running, seq, false);
        add_scheduled(out, seq, num_new);
        *budget -= num_new;
    }
}

void scheduler_schedule(Scheduler *s, SchedulerOutput *out) {
    s->step++;
    *out = (SchedulerOutput){.seqs = s->scheduled, .failed = s->failed};
    int budget = s->opts.max_num_batched_tokens;
    if (!schedule_running(s, out, &budget)) schedule_waiting(s, out, &budget);
}

uint64_t scheduler_step_id(const Scheduler *s) { return s->step; }

int scheduler_num_running(const Scheduler *s) { return s->running.size; }
int scheduler_num_waiting(const Scheduler *s) { return s->waiting.size; }
long long scheduler_num_preemptions(const Scheduler *s) { return s->preemptions; }
