/*
 * test_scheduler.c - the scheduler's policies on hand-made sequences (no
 * model, no runner): FCFS keeps arrival order and preempts the most recently
 * admitted; PRIORITY keeps both queues ordered by (priority, arrival) -
 * new, resumed (forked) and preempted sequences each at their place - and
 * preempts the least urgent running sequence. With recurrent-state slots
 * (hybrid models) a sequence holds one from admission to its end or
 * preemption, admission waits for a free one, and no prefix is reused.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/scheduler.h"

#define MAX_SEQS 8

typedef struct Setup {
    BlockManager *bm;
    Scheduler *s;
    Sequence seqs[MAX_SEQS];
    int num;
} Setup;

static void setup_open_slots(Setup *t, int num_blocks, int block_size, int max_num_seqs,
                             SchedulingPolicy policy, int num_state_slots) {
    memset(t, 0, sizeof *t);
    Error err = {0};
    cr_assert(t->bm = block_manager_create(num_blocks, block_size, &err), "%s", err.msg);
    SchedulerOptions o = {max_num_seqs, 4096, policy, num_state_slots, NULL};
    cr_assert(t->s = scheduler_create(&o, t->bm, MAX_SEQS, &err), "%s", err.msg);
}

static void setup_open(Setup *t, int num_blocks, int block_size, int max_num_seqs,
                       SchedulingPolicy policy) {
    setup_open_slots(t, num_blocks, block_size, max_num_seqs, policy, 0);
}

static void setup_close(Setup *t) {
    for (int i = 0; i < t->num; i++) {
        free(t->seqs[i].tokens);
        block_table_free(&t->seqs[i].blocks);
    }
    scheduler_destroy(t->s);
    block_manager_destroy(t->bm);
}

/* A sequence of len distinct prompt tokens (no prefix-cache hits between
 * sequences), room for 64 more. */
static Sequence *new_seq(Setup *t, int len, int priority, uint64_t arrival) {
    cr_assert_lt(t->num, MAX_SEQS);
    Sequence *q = &t->seqs[t->num];
    q->capacity = len + 64;
    cr_assert(q->tokens = malloc(sizeof(int32_t) * (size_t)q->capacity));
    for (int i = 0; i < len; i++) q->tokens[i] = 1000 * (t->num + 1) + i;
    q->num_tokens = q->num_prompt_tokens = len;
    q->priority = priority;
    q->arrival = arrival;
    t->num++;
    return q;
}

/* One step as the engine takes it: the scheduled KV is computed and each
 * sequence that reached its end gets one more token. */
static void step(Setup *t, SchedulerOutput *out) {
    scheduler_schedule(t->s, out);
    cr_assert_eq(out->num_failed, 0);
    for (int i = 0; i < out->num_seqs; i++) {
        Sequence *q = out->seqs[i].seq;
        q->num_computed += out->seqs[i].num_new_tokens;
        if (out->seqs[i].compute_logits) q->tokens[q->num_tokens++] = 7;
    }
}

/* The step's sequences, in scheduling order, as indices into t->seqs. */
static void expect_order(const Setup *t, const SchedulerOutput *out, const int *want, int n,
                         const char *what) {
    cr_assert_eq(out->num_seqs, n, "%s: %d scheduled, expected %d", what, out->num_seqs, n);
    for (int i = 0; i < n; i++)
        cr_expect_eq(out->seqs[i].seq, &t->seqs[want[i]], "%s: position %d is sequence %d, expected %d",
                     what, i, (int)(out->seqs[i].seq - t->seqs), want[i]);
}

Test(scheduler, fcfs_keeps_arrival_order) {
    Setup t;
    setup_open(&t, 64, 4, 8, SCHEDULING_FCFS);
    const int prio[5] = {3, -1, 3, 0, -1};
    for (int i = 0; i < 5; i++) scheduler_add(t.s, new_seq(&t, 3, prio[i], (uint64_t)i + 1));
    SchedulerOutput out;
    step(&t, &out);
    expect_order(&t, &out, (const int[]){0, 1, 2, 3, 4}, 5, "admission, priorities ignored");
    step(&t, &out);
    expect_order(&t, &out, (const int[]){0, 1, 2, 3, 4}, 5, "running");
    setup_close(&t);
}

Test(scheduler, priority_orders_waiting_and_running) {
    Setup t;
    setup_open(&t, 64, 4, 8, SCHEDULING_PRIORITY);
    const int prio[5] = {3, -1, 3, 0, -1};
    for (int i = 0; i < 5; i++) scheduler_add(t.s, new_seq(&t, 3, prio[i], (uint64_t)i + 1));
    SchedulerOutput out;
    step(&t, &out);
    /* (priority, arrival): (-1, 2) (-1, 5) (0, 4) (3, 1) (3, 3) */
    const int want[5] = {1, 4, 3, 0, 2};
    expect_order(&t, &out, want, 5, "admission");
    step(&t, &out);
    expect_order(&t, &out, want, 5, "running");

    /* late arrivals are admitted after the running ones, and then run at
     * their place: the most urgent first, a forked sample of request 4
     * (same key as sequence 3) after its equal */
    scheduler_add(t.s, new_seq(&t, 3, -5, 6));
    scheduler_add_front(t.s, new_seq(&t, 3, 0, 4));
    step(&t, &out);
    expect_order(&t, &out, (const int[]){1, 4, 3, 0, 2, 5, 6}, 7, "admitted after the running");
    step(&t, &out);
    expect_order(&t, &out, (const int[]){5, 1, 4, 3, 6, 0, 2}, 7, "running at their place");
    setup_close(&t);
}

/* One slot: sequences are admitted one at a time, in waiting order. */
static void expect_admission_order(Setup *t, const int *want, int n, const char *what) {
    for (int i = 0; i < n; i++) {
        SchedulerOutput out;
        step(t, &out);
        cr_assert_eq(out.num_seqs, 1);
        cr_expect_eq(out.seqs[0].seq, &t->seqs[want[i]], "%s: admission %d is sequence %d, expected %d",
                     what, i, (int)(out.seqs[0].seq - t->seqs), want[i]);
        scheduler_remove(t->s, out.seqs[0].seq);
    }
}

Test(scheduler, resumed_sequences_go_before_their_equals) {
    Setup t;
    setup_open(&t, 64, 4, 1, SCHEDULING_PRIORITY);
    scheduler_add(t.s, new_seq(&t, 3, 0, 4));       /* 0: new */
    scheduler_add_front(t.s, new_seq(&t, 3, 0, 4)); /* 1: a fork of the same request */
    scheduler_add(t.s, new_seq(&t, 3, -1, 9));      /* 2: more urgent, later */
    scheduler_add(t.s, new_seq(&t, 3, 0, 4));       /* 3: new, equal */
    scheduler_add_front(t.s, new_seq(&t, 3, 1, 2)); /* 4: resumed, less urgent */
    expect_admission_order(&t, (const int[]){2, 1, 0, 3, 4}, 5, "priority");
    setup_close(&t);

    setup_open(&t, 64, 4, 1, SCHEDULING_FCFS);
    scheduler_add(t.s, new_seq(&t, 3, 0, 4));
    scheduler_add_front(t.s, new_seq(&t, 3, 0, 4));
    scheduler_add(t.s, new_seq(&t, 3, -1, 9));
    scheduler_add(t.s, new_seq(&t, 3, 0, 4));
    scheduler_add_front(t.s, new_seq(&t, 3, 1, 2));
    expect_admission_order(&t, (const int[]){4, 1, 0, 2, 3}, 5, "fcfs: the head, whatever the priority");
    setup_close(&t);
}

Test(scheduler, set_policy_reorders_the_queues) {
    Setup t;
    setup_open(&t, 64, 4, 8, SCHEDULING_FCFS);
    const int prio[4] = {2, 1, 2, 0};
    for (int i = 0; i < 4; i++) scheduler_add(t.s, new_seq(&t, 3, prio[i], (uint64_t)i + 1));
    scheduler_set_policy(t.s, SCHEDULING_PRIORITY);
    SchedulerOutput out;
    step(&t, &out);
    expect_order(&t, &out, (const int[]){3, 1, 0, 2}, 4, "reordered");
    setup_close(&t);
}

/* Three sequences outgrow a 6-block cache at their third block each: the
 * victim is FCFS's most recently admitted (2) or PRIORITY's least urgent
 * (0, priority 2), which goes back to the waiting queue at its place. */
static void squeeze(SchedulingPolicy policy, int victim, const int *running_order) {
    Setup t;
    setup_open(&t, 6, 4, 8, policy);
    const int prio[3] = {2, 0, 1};
    for (int i = 0; i < 3; i++) scheduler_add(t.s, new_seq(&t, 4, prio[i], (uint64_t)i + 1));
    SchedulerOutput out;
    for (int k = 0; k < 5; k++) { /* 4 prompt tokens, then 4 more each: 2 blocks each */
        step(&t, &out);
        cr_assert_eq(out.num_seqs, 3);
        cr_assert_eq(scheduler_num_preemptions(t.s), 0);
    }
    expect_order(&t, &out, running_order, 3, "running");
    step(&t, &out); /* the ninth token needs a third block each */
    cr_expect_eq(scheduler_num_preemptions(t.s), 1);
    cr_expect_eq(t.seqs[victim].status, SEQ_WAITING, "sequence %d is the victim", victim);
    cr_expect_eq(t.seqs[victim].num_computed, 0);
    cr_expect_eq(t.seqs[victim].blocks.num_blocks, 0);
    int others[2], n = 0;
    for (int i = 0; i < 3; i++)
        if (running_order[i] != victim) others[n++] = running_order[i];
    expect_order(&t, &out, others, 2, "after the preemption");
    cr_expect_eq(scheduler_num_waiting(t.s), 1);
    setup_close(&t);
}

Test(scheduler, fcfs_preempts_the_most_recent) { squeeze(SCHEDULING_FCFS, 2, (const int[]){0, 1, 2}); }

Test(scheduler, priority_preempts_the_least_urgent) {
    squeeze(SCHEDULING_PRIORITY, 0, (const int[]){1, 2, 0});
}

/* A preempted sequence goes back before a newer one of its priority, after
 * a more urgent one that arrived later. */
Test(scheduler, priority_requeues_the_preempted_at_its_place) {
    Setup t;
    setup_open(&t, 4, 4, 8, SCHEDULING_PRIORITY);
    Sequence *a = new_seq(&t, 4, 1, 1), *b = new_seq(&t, 4, 0, 2);
    scheduler_add(t.s, a);
    scheduler_add(t.s, b);
    SchedulerOutput out;
    for (int k = 0; k < 5; k++) step(&t, &out); /* 8 tokens each: all 4 blocks */
    cr_assert_eq(scheduler_num_preemptions(t.s), 0);
    Sequence *late_same = new_seq(&t, 3, 1, 3), *late_urgent = new_seq(&t, 3, -1, 4);
    scheduler_add(t.s, late_same);
    scheduler_add(t.s, late_urgent);
    step(&t, &out); /* b grows, a (priority 1) is preempted */
    cr_assert_eq(scheduler_num_preemptions(t.s), 1);
    cr_assert_eq(a->status, SEQ_WAITING);
    cr_assert_eq(scheduler_num_waiting(t.s), 3);
    /* b finishes: the waiting queue is admitted in its order */
    scheduler_remove(t.s, b);
    step(&t, &out);
    cr_assert_geq(out.num_seqs, 1);
    cr_expect_eq(out.seqs[0].seq, late_urgent, "the most urgent first");
    if (out.num_seqs >= 2) cr_expect_eq(out.seqs[1].seq, a, "then the preempted one, before its newer equal");
    setup_close(&t);
}

/* Two slots for three sequences: the third waits for a slot, not for
 * blocks; slots come back on removal and on preemption; a repeated prompt
 * reuses no cached blocks. */
Test(scheduler, state_slots) {
    Setup t;
    setup_open_slots(&t, 64, 4, 8, SCHEDULING_FCFS, 2);
    Sequence *a = new_seq(&t, 8, 0, 1), *b = new_seq(&t, 8, 0, 2), *c = new_seq(&t, 8, 0, 3);
    scheduler_add(t.s, a);
    scheduler_add(t.s, b);
    scheduler_add(t.s, c);
    SchedulerOutput out;
    step(&t, &out);
    expect_order(&t, &out, (const int[]){0, 1}, 2, "two slots");
    cr_expect(a->state_slot >= 0 && b->state_slot >= 0 && a->state_slot != b->state_slot);
    cr_expect_eq(c->state_slot, -1);
    int freed = a->state_slot;
    scheduler_remove(t.s, a);
    cr_expect_eq(a->state_slot, -1);
    step(&t, &out);
    expect_order(&t, &out, (const int[]){1, 2}, 2, "a's slot to c");
    cr_expect_eq(c->state_slot, freed);
    cr_expect_eq(c->num_computed, 8); /* its whole prompt was computed: no prefix from anyone */

    /* The same prompt as b: computed from its first token all the same. */
    Sequence *d = new_seq(&t, 8, 0, 4);
    memcpy(d->tokens, b->tokens, sizeof(int32_t) * 8);
    scheduler_remove(t.s, c);
    scheduler_add(t.s, d);
    scheduler_schedule(t.s, &out);
    cr_assert_eq(out.num_seqs, 2);
    cr_expect_eq(out.seqs[1].seq, d);
    cr_expect_eq(d->num_computed, 0);
    cr_expect_eq(out.seqs[1].num_new_tokens, 8, "no prefix reused by a stateful sequence");
    setup_close(&t);
}

/* Under block pressure the victim gives its slot back with its blocks, and
 * starts again from its first token. */
Test(scheduler, preemption_returns_the_slot) {
    Setup t;
    setup_open_slots(&t, 5, 4, 8, SCHEDULING_FCFS, 2);
    Sequence *a = new_seq(&t, 8, 0, 1), *b = new_seq(&t, 8, 0, 2);
    scheduler_add(t.s, a);
    scheduler_add(t.s, b);
    SchedulerOutput out;
    step(&t, &out); /* a: 2 blocks + b: 2 blocks, one left */
    cr_assert_eq(out.num_seqs, 2);
    step(&t, &out); /* a grows into the last block */
    step(&t, &out); /* a needs another: b is preempted */
    cr_expect_eq(scheduler_num_preemptions(t.s), 1);
    cr_expect_eq(b->state_slot, -1);
    cr_expect_eq(b->num_computed, 0);
    cr_expect(a->state_slot >= 0);
    setup_close(&t);
}
