/*
 * engine_step.c - the step loop: the intake taken (submissions, aborts),
 * a batch scheduled and built (each row with its allowed-token mask), the
 * runner run, and its sampled tokens turned into outputs; engine_start runs
 * the loop on a thread of its own. Apart from the requests' bookkeeping
 * (engine.c) so that one step reads top to bottom.
 */
#include "engine_internal.h"
#include "engine_text.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* Moves submissions into the scheduler and carries out aborts. */
static void take_intake(Engine *e) {
    pthread_mutex_lock(&e->lock);
    Request *in = e->intake_head;
    e->intake_head = e->intake_tail = NULL;
    int num_aborts = e->num_aborts;
    uint64_t small[64], *aborts = num_aborts <= 64 ? small : malloc(sizeof *aborts * (size_t)num_aborts);
    if (!aborts) num_aborts = 0; /* out of memory: the aborts wait for the next step */
    else if (num_aborts > 0) memcpy(aborts, e->aborts, sizeof *aborts * (size_t)num_aborts);
    e->num_aborts -= num_aborts;
    pthread_mutex_unlock(&e->lock);

    for (Request *r = in, *next; r; r = next) {
        next = r->next;
        r->prev = NULL;
        r->next = e->live;
        if (e->live) e->live->prev = r;
        e->live = r;
        scheduler_add(e->sched, &r->seqs[0]);
        e->prompt_tokens += r->prompt_len;
    }
    for (int i = 0; i < num_aborts; i++) {
        for (Request *r = e->live; r; r = r->next) {
            if (r->id != aborts[i]) continue;
            r->closed = true;
            int started = r->num_started;
            for (int k = 0; k < started; k++) {
                Sequence *s = &r->seqs[k];
                if (s->status == SEQ_FINISHED) continue;
                bool last = r->num_live == 1;
                engine_finish(e, s, false, 0, NULL, FINISH_ABORT, NULL, NO_TEXT);
                if (last) break; /* r is freed */
            }
            break;
        }
    }
    if (aborts != small) free(aborts);
}

/* A stateful sequence admitted on a cached prefix starts from the state
 * saved at its end; a step ending on a block boundary saves the state there
 * (state_cache.h), for later prompts that share this prefix. */
static void plan_state_checkpoints(Engine *e, Sequence *s, RunnerSeq *q, int num_new) {
    if (s->restore_checkpoint >= 0) {
        q->restore = true;
        q->restore_checkpoint = s->restore_checkpoint;
        s->restore_checkpoint = -1;
    }
    int bs = e->block_size, end = s->num_computed + num_new;
    if (end % bs != 0) return;
    /* The chain hash commit will give the block ending at `end`: from the
     * last hashed block on (this step may fill several). */
    int h = s->blocks.num_hashed;
    uint64_t hash = h > 0 ? s->blocks.hashes[h - 1] : 0;
    for (int b = h; b < end / bs; b++) hash = block_manager_chain_hash(e->bm, hash, s->tokens + (size_t)b * bs);
    uint64_t step = scheduler_step_id(e->sched);
    if (state_cache_holds(e->state_cache, hash, step)) return; /* the same state is kept already */
    int c = state_cache_take(e->state_cache, step, hash);
    if (c < 0) return;
    q->save = true;
    q->save_checkpoint = c;
}

static void build_batch(Engine *e, const SchedulerOutput *so, RunnerBatch *batch) {
    bool any_logprobs = false;
    for (int i = 0; i < so->num_seqs; i++) {
        Sequence *s = so->seqs[i].seq;
        const Request *r = s->owner;
        e->batch_seqs[i] = (RunnerSeq){
            .tokens = s->tokens + s->num_computed,
            .num_tokens = so->seqs[i].num_new_tokens,
            .start_pos = s->num_computed,
            .block_table = s->blocks.ids,
            .num_blocks = s->blocks.num_blocks,
            .state_slot = s->state_slot,
            .compute_logits = so->seqs[i].compute_logits,
            .sample = {.params = s->params,
                       .seed = s->seed,
                       .sample_index = (uint32_t)s->sample_index,
                       .position = (uint32_t)s->num_tokens,
                       .prompt = s->tokens,
                       .prompt_len = s->num_prompt_tokens,
                       .output = s->tokens + s->num_prompt_tokens,
                       .output_len = sequence_num_output(s)},
        };
        if (e->state_cache) plan_state_checkpoints(e, s, &e->batch_seqs[i], so->seqs[i].num_new_tokens);
        if (r->pooling != POOLING_NONE) {
            /* Prefill only: the last chunk pools instead of sampling. A
             * mean restarts whenever the prompt is computed from its start
             * (the first chunk, or again after a preemption). */
            RunnerSeq *q = &e->batch_seqs[i];
            q->compute_logits = false;
            q->pooled = r->pooled;
            q->pooling = r->pooling == POOLING_LAST && !so->seqs[i].compute_logits ? POOLING_NONE
                                                                                   : r->pooling;
            if (r->pooling == POOLING_MEAN && s->num_computed == 0)
                memset(r->pooled, 0, sizeof(float) * (size_t)r->pooled_dim);
            continue;
        }
        any_logprobs |= r->params.logprobs >= 0;
        if (!so->seqs[i].compute_logits) continue;
        s->end_forced = false;
        uint32_t *allowed = NULL;
        if (s->matcher && !s->constraint_waiting) {
            allowed = engine_constraint_mask(e, s, i);
            if (!allowed) continue; /* the sample ends with an error: nothing to ban */
        }
        /* vLLM's MinTokensLogitsProcessor: the end ids are banned while the
         * output so far is shorter than min_tokens */
        e->batch_seqs[i].sample.allowed = sequence_num_output(s) < s->params->min_tokens
                                              ? engine_min_tokens_mask(e, s, i, allowed)
                                              : allowed;
    }
    *batch = (RunnerBatch){.seqs = e->batch_seqs, .num_seqs = so->num_seqs,
                           .logprobs = any_logprobs ? e->logprobs : NULL};
}

/* After the runner: the computed KV is committed (full blocks become
 * findable), sampled tokens appended and delivered, finished samples ended. */
static void postprocess(Engine *e, const SchedulerOutput *so) {
    for (int i = 0; i < so->num_seqs; i++) {
        Sequence *s = so->seqs[i].seq;
        s->num_computed += so->seqs[i].num_new_tokens;
        block_manager_commit(e->bm, &s->blocks, s->tokens, s->num_computed);
        const RunnerSeq *q = &e->batch_seqs[i];
        if (q->save) state_cache_publish(e->state_cache, q->save_checkpoint); /* saved: findable */
        if (!so->seqs[i].compute_logits) continue;
        Request *r = s->owner;
        if (r->pooling != POOLING_NONE) { /* the whole prompt is in: the vector is done */
            if (r->pooling == POOLING_MEAN)
                for (int j = 0; j < r->pooled_dim; j++) r->pooled[j] /= (float)r->prompt_len;
            engine_finish(e, s, false, 0, NULL, FINISH_STOP, NULL, NO_TEXT);
            continue;
        }
        int32_t token = e->tokens_out[i];
        Error constraint_err;
        if (s->mask_failed) {
            static const Error oom = {"out of memory (a token mask)", ERROR_INTERNAL};
            engine_finish(e, s, false, 0, NULL, FINISH_ERROR, &oom, NO_TEXT);
            continue;
        }
        if (s->constraint_failed) {
            error_set_kind(&constraint_err, ERROR_INVALID,
                           "structured output: the constraint cannot go on (too ambiguous a grammar, or "
                           "no token of this model's vocabulary continues it; the server log says which)");
            engine_finish(e, s, false, 0, NULL, FINISH_ERROR, &constraint_err, NO_TEXT);
            continue;
        }
        if (s->matcher && engine_constraint_advance(e, s, token, &constraint_err) < 0) {
            engine_finish(e, s, false, 0, NULL, FINISH_ERROR, &constraint_err, NO_TEXT);
            continue;
        }
        s->tokens[s->num_tokens++] = token;
        e->generation_tokens++;
        if (s->sample_index == 0 && r->num_started < r->params.n && !r->closed)
            engine_fork_samples(e, r);
        const SampleLogprobs *lp = r->params.logprobs >= 0 ? &e->logprobs[i] : NULL;
        FinishReason reason = engine_stop_reason(e, s, token);
        Text text = engine_next_text(e, s, token, reason != FINISH_NONE);
        if (text.stop_string >= 0) reason = FINISH_STOP;
        if (reason != FINISH_NONE) {
            engine_finish(e, s, true, token, lp, reason, NULL, text);
        } else {
            engine_emit(r, s, true, token, lp, FINISH_NONE, NULL, text);
            engine_consume_held(s, text.len);
        }
    }
}

static void publish_stats(Engine *e) {
    BlockManagerStats bs = block_manager_stats(e->bm);
    pthread_mutex_lock(&e->stats_lock);
    e->stats.num_running = scheduler_num_running(e->sched);
    e->stats.num_waiting = scheduler_num_waiting(e->sched);
    e->stats.kv_blocks_used = e->stats.kv_blocks_total - bs.num_free;
    e->stats.prefix_query_tokens = bs.prefix_query_tokens;
    e->stats.prefix_hit_tokens = bs.prefix_hit_tokens;
    e->stats.preemptions = scheduler_num_preemptions(e->sched);
    e->stats.prompt_tokens = e->prompt_tokens;
    e->stats.generation_tokens = e->generation_tokens;
    e->stats.steps = e->steps;
    pthread_mutex_unlock(&e->stats_lock);
}

int engine_step(Engine *e, Error *err) {
    take_intake(e);
    if (scheduler_num_running(e->sched) + scheduler_num_waiting(e->sched) == 0) {
        publish_stats(e);
        return 0;
    }
    SchedulerOutput so;
    scheduler_schedule(e->sched, &so);
    for (int i = 0; i < so.num_failed; i++) {
        Error too_long;
        Sequence *s = so.failed[i];
        error_set_kind(&too_long, ERROR_TOO_LONG,
                       "KV cache too small for this request: it needs more than the %d blocks of "
                       "%d tokens there are (%d tokens so far)",
                       block_manager_num_blocks(e->bm), e->block_size, s->num_tokens);
        s->status = SEQ_FINISHED; /* the scheduler already released it */
        engine_finish(e, s, false, 0, NULL, FINISH_ERROR, &too_long, NO_TEXT);
    }
    int rc = 0;
    if (so.num_seqs > 0) {
        RunnerBatch batch;
        build_batch(e, &so, &batch);
        Error runner_err = {"runner failure", ERROR_INTERNAL};
        if (runner_step(e->runner, &batch, e->tokens_out, &runner_err) != 0) {
            /* The step's requests cannot trust their KV any more: end them. */
            for (int i = 0; i < so.num_seqs; i++) {
                Sequence *s = so.seqs[i].seq;
                if (s->status != SEQ_FINISHED)
                    engine_finish(e, s, false, 0, NULL, FINISH_ERROR, &runner_err, NO_TEXT);
            }
            if (err) *err = runner_err;
            rc = -1;
        } else {
            postprocess(e, &so);
        }
    }
    e->steps++;
    publish_stats(e);
    return rc < 0 ? -1 : 1;
}

bool engine_has_work(Engine *e) {
    pthread_mutex_lock(&e->lock);
    bool queued = e->intake_head != NULL || e->num_aborts > 0;
    pthread_mutex_unlock(&e->lock);
    return queued || scheduler_num_running(e->sched) + scheduler_num_waiting(e->sched) > 0;
}

static void *engine_main(void *arg) {
    Engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->lock);
        while (!e->stopping && !e->intake_head && e->num_aborts == 0 &&
               scheduler_num_running(e->sched) + scheduler_num_waiting(e->sched) == 0)
            pthread_cond_wait(&e->wake, &e->lock);
        bool stop = e->stopping;
        pthread_mutex_unlock(&e->lock);
        if (stop) return NULL;
        Error err = {0};
        if (engine_step(e, &err) < 0) log_info("engine step failed: %s", err.msg);
    }
}

int engine_start(Engine *e, Error *err) {
    int rc = pthread_create(&e->thread, NULL, engine_main, e);
    if (rc != 0) return error_set(err, "cannot start the engine thread: %s", strerror(rc));
    e->thread_started = true;
    return 0;
}
