/*
 * engine.c - the engine's life and its requests (see engine.h): creation and
 * destruction, submission and aborts from any thread, and, on the stepping
 * thread, a request's samples: started, forked from the first one's prompt
 * blocks, delivered to and finished. engine_step.c drives them; what the
 * files share, and which thread owns what, is engine_internal.h.
 */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- requests and sequences ---------------------------------------------- */

static void free_request(Request *r) {
    for (int i = 0; r->seqs && i < r->params.n; i++) { /* unstarted samples are zeroed */
        free(r->seqs[i].tokens);
        block_table_free(&r->seqs[i].blocks);
        detokenizer_free(&r->seqs[i].detok);
        byte_buf_free(&r->seqs[i].held);
        token_matcher_free(r->seqs[i].matcher);
    }
    constraint_unref(r->constraint);
    for (int i = 0; i < r->num_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->seqs);
    free(r->prompt);
    free(r->pooled);
    free(r);
}

static int init_sequence(Request *r, int index) {
    Sequence *s = &r->seqs[index];
    memset(s, 0, sizeof *s);
    s->owner = r;
    s->sample_index = index;
    s->capacity = r->prompt_len + r->params.max_tokens;
    s->tokens = malloc(sizeof(int32_t) * (size_t)s->capacity);
    if (!s->tokens) return -1;
    memcpy(s->tokens, r->prompt, sizeof(int32_t) * (size_t)r->prompt_len);
    s->num_tokens = s->num_prompt_tokens = r->prompt_len;
    s->params = &r->params;
    s->seed = r->seed;
    s->priority = r->priority;
    s->no_prefix_reuse = r->pooling == POOLING_MEAN || r->pooling == POOLING_CLS;
    s->arrival = r->id; /* sample 0's is set at submission, when the id is known */
    if (r->tok) detokenizer_init(&s->detok, r->tok, !r->keep_special_tokens);
    if (r->constraint) {
        Error err;
        if (!(s->matcher = token_matcher_new(constraint_grammar(r->constraint), &err))) return -1;
        s->constraint_waiting = r->constraint_after >= 0;
    }
    r->num_started++;
    r->num_live++;
    return 0;
}

static void unlink_live(Engine *e, Request *r) {
    if (r->prev) r->prev->next = r->next; else e->live = r->next;
    if (r->next) r->next->prev = r->prev;
}

/* Ends one sample: out of the scheduler, blocks released, the user told. The
 * request goes when its last sample has. */
void engine_finish(Engine *e, Sequence *s, bool has_token, int32_t token, const SampleLogprobs *lp,
                   FinishReason reason, const Error *error, Text text) {
    Request *r = s->owner;
    scheduler_remove(e->sched, s);
    if (reason == FINISH_ABORT || reason == FINISH_ERROR) r->closed = true;
    r->num_live--;
    engine_emit(r, s, has_token, token, lp, reason, error, text);
    if (r->num_live == 0 && (r->closed || r->num_started == r->params.n)) {
        unlink_live(e, r);
        free_request(r);
    }
}

/* The other samples of a request start from the first one's prompt blocks:
 * all its full blocks except one holding the last prompt token, which each
 * sample recomputes to get its own logits (never writing a shared block). */
void engine_fork_samples(Engine *e, Request *r) {
    Sequence *first = &r->seqs[0];
    int k = (r->prompt_len - 1) / e->block_size;
    if (k > first->blocks.num_hashed) k = first->blocks.num_hashed;
    if (e->runner->num_state_slots > 0) k = 0; /* the recurrent state is not in the blocks */
    for (int i = r->params.n - 1; i >= 1; i--) {
        if (init_sequence(r, i) != 0) { /* out of memory: the samples started go on */
            r->closed = true;
            return;
        }
        if (block_manager_fork(e->bm, &first->blocks, k, &r->seqs[i].blocks) != 0) {
            r->closed = true;
            r->seqs[i].status = SEQ_FINISHED; /* in no queue yet */
            static const Error oom = {"out of memory", ERROR_INTERNAL};
            engine_finish(e, &r->seqs[i], false, 0, NULL, FINISH_ERROR, &oom, NO_TEXT);
            return;
        }
        r->seqs[i].num_computed = k * e->block_size;
        r->seqs[i].num_cached_prompt = first->num_cached_prompt;
        scheduler_add_front(e->sched, &r->seqs[i]);
    }
}

/* ---- creation -------------------------------------------------------------- */

/* Everything but the model and the runner, which `e` already points to. */
static int engine_init(Engine *e, Error *err) {
    Runner *runner = e->runner;
    e->block_size = runner->options.block_size;
    e->next_id = 1;
    e->seed_state = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)e;
    int max_seqs = runner->options.max_num_seqs;
    e->bm = block_manager_create(runner->num_kv_blocks, e->block_size, err);
    if (!e->bm) return -1;
    if (runner->num_state_slots > 0 && runner->num_state_checkpoints > 0 &&
        !(e->state_cache = state_cache_create(runner->num_state_checkpoints, err)))
        return -1;
    SchedulerOptions so = {max_seqs, runner->options.max_num_batched_tokens, SCHEDULING_FCFS,
                           runner->num_state_slots, e->state_cache};
    e->sched = scheduler_create(&so, e->bm, max_seqs, err);
    if (!e->sched) return -1;
    e->batch_seqs = malloc(sizeof *e->batch_seqs * (size_t)max_seqs);
    e->tokens_out = malloc(sizeof *e->tokens_out * (size_t)max_seqs);
    e->logprobs = malloc(sizeof *e->logprobs * (size_t)max_seqs);
    if (!e->batch_seqs || !e->tokens_out || !e->logprobs) return error_set(err, "out of memory");
    e->stats.kv_blocks_total = runner->num_kv_blocks;
    return 0;
}

static Engine *engine_alloc(Error *err) {
    Engine *e = calloc(1, sizeof *e);
    if (!e) {
        error_set(err, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->wake, NULL);
    pthread_mutex_init(&e->stats_lock, NULL);
    return e;
}

Engine *engine_create(const ModelWeights *model, Runner *runner, Error *err) {
    Engine *e = engine_alloc(err);
    if (!e) return NULL;
    e->model = model;
    e->runner = runner;
    if (engine_init(e, err) == 0) return e;
    engine_destroy(e);
    return NULL;
}

void engine_destroy(Engine *e) {
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->lock);
        e->stopping = true;
        pthread_cond_signal(&e->wake);
        pthread_mutex_unlock(&e->lock);
        pthread_join(e->thread, NULL);
    }
    for (Request *r = e->live, *next; r; r = next) {
        next = r->next;
        free_request(r);
    }
    for (Request *r = e->intake_head, *next; r; r = next) {
        next = r->next;
        free_request(r);
    }
    scheduler_destroy(e->sched);
    state_cache_destroy(e->state_cache);
    block_manager_destroy(e->bm);
    free(e->aborts);
    free(e->batch_seqs);
    free(e->masks);
    free(e->tokens_out);
    free(e->logprobs);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->wake);
    pthread_mutex_destroy(&e->stats_lock);
    free(e);
}

void engine_set_tokenizer(Engine *e, const Tokenizer *t) { e->tok = t; }

void engine_set_scheduling_policy(Engine *e, SchedulingPolicy policy) {
    scheduler_set_policy(e->sched, policy);
}

const ModelConfig *engine_model_config(const Engine *e) { return &e->model->config; }
const Runner *engine_runner(const Engine *e) { return e->runner; }

/* ---- submission ------------------------------------------------------------- */

int engine_submit(Engine *e, const EngineRequest *req, uint64_t *request_id, Error *err) {
    const ModelConfig *c = &e->model->config;
    /* An embedding request samples nothing: one sequence, no output tokens. */
    SamplingParams pooling_params = sampling_params_default();
    pooling_params.max_tokens = 0;
    const SamplingParams *p = req->pooling != POOLING_NONE ? &pooling_params : &req->params;
    int max_len = e->runner->options.max_model_len;
    if (!req->on_output)
        return error_set_kind(err, ERROR_INVALID, "a request needs an output callback");
    if (req->prompt_len < 1 || !req->prompt)
        return error_set_kind(err, ERROR_INVALID, "the prompt is empty");
    for (int i = 0; i < req->prompt_len; i++)
        if (req->prompt[i] < 0 || req->prompt[i] >= c->vocab_size)
            return error_set_kind(err, ERROR_INVALID,
                                  "prompt token id %d is outside the vocabulary [0, %d)",
                                  req->prompt[i], c->vocab_size);
    if (req->pooling < POOLING_NONE || req->pooling > POOLING_CLS)
        return error_set_kind(err, ERROR_INVALID, "unknown pooling mode %d", (int)req->pooling);
    if (req->pooling != POOLING_NONE && (req->num_stop > 0 || req->constraint))
        return error_set_kind(err, ERROR_INVALID, "an embedding request takes no stop strings or constraint");
    if (req->pooling == POOLING_NONE && sampling_params_validate(p, c->vocab_size, err)) return -1;
    if ((long)req->prompt_len + p->max_tokens > max_len)
        return error_set_kind(err, ERROR_TOO_LONG,
                              "this request needs %ld tokens (%d in the prompt + %d max_tokens), "
                              "more than max_model_len %d",
                              (long)req->prompt_len + p->max_tokens, req->prompt_len,
                              p->max_tokens, max_len);
    if (req->num_stop < 0 || req->num_stop > 64)
        return error_set_kind(err, ERROR_INVALID, "at most 64 stop strings");
    if (req->num_stop > 0 && !e->tok)
        return error_set_kind(err, ERROR_INVALID,
                              "stop strings need the model's tokenizer (tokenizer.json)");
    for (int i = 0; i < req->num_stop; i++)
        if (!req->stop[i] || !req->stop[i][0])
            return error_set_kind(err, ERROR_INVALID, "a stop string is empty");
    if (req->constraint && token_grammar_vocab_size(constraint_grammar(req->constraint)) != c->vocab_size)
        return error_set_kind(err, ERROR_INVALID, "the constraint was compiled for another vocabulary size");
    long blocks = (req->prompt_len + e->block_size) / e->block_size; /* prompt + 1 token */
    if (blocks > e->runner->num_kv_blocks)
        return error_set_kind(err, ERROR_TOO_LONG,
                              "KV cache too small for this request: its prompt needs %ld blocks "
                              "of %d tokens, the cache has %d",
                              blocks, e->block_size, e->runner->num_kv_blocks);

    Request *r = calloc(1, sizeof *r);
    if (r) r->prompt = malloc(sizeof(int32_t) * (size_t)req->prompt_len);
    if (r) r->seqs = calloc((size_t)p->n, sizeof *r->seqs);
    if (r && req->pooling != POOLING_NONE) r->pooled = calloc((size_t)c->hidden_size, sizeof *r->pooled);
    if (!r || !r->prompt || !r->seqs || (req->pooling != POOLING_NONE && !r->pooled)) {
        if (r) free_request(r);
        return error_set(err, "out of memory");
    }
    memcpy(r->prompt, req->prompt, sizeof(int32_t) * (size_t)req->prompt_len);
    r->prompt_len = req->prompt_len;
    r->params = *p;
    r->on_output = req->on_output;
    r->user = req->user;
    r->tok = e->tok;
    r->keep_special_tokens = req->keep_special_tokens;
    r->constraint = req->constraint ? constraint_ref(req->constraint) : NULL;
    r->constraint_after = req->constraint_after;
    r->priority = req->priority;
    r->pooling = req->pooling;
    r->pooled_dim = c->hidden_size;
    if (req->num_stop > 0 && !(r->stop = calloc((size_t)req->num_stop, sizeof *r->stop))) {
        free_request(r);
        return error_set(err, "out of memory");
    }
    for (int i = 0; i < req->num_stop; i++) {
        if (!(r->stop[r->num_stop] = strdup(req->stop[i]))) {
            free_request(r);
            return error_set(err, "out of memory");
        }
        size_t len = strlen(r->stop[r->num_stop++]);
        if (len > r->max_stop_len) r->max_stop_len = len;
    }
    if (init_sequence(r, 0) != 0) {
        free_request(r);
        return error_set(err, "out of memory");
    }
    pthread_mutex_lock(&e->lock);
    /* Once queued, r is the engine thread's: it may finish and free it
     * before this thread runs another line, so the id is read here. */
    uint64_t id = r->id = e->next_id++;
    /* Unseeded requests still get a seed: it keys their sampling (philox.h). */
    e->seed_state = e->seed_state * 6364136223846793005ull + 1442695040888963407ull;
    r->seed = p->has_seed ? p->seed : e->seed_state ^ (e->seed_state >> 29);
    r->seqs[0].seed = r->seed;
    r->seqs[0].arrival = id; /* the scheduler's tie-break under SCHEDULING_PRIORITY */
    if (e->intake_tail) e->intake_tail->next = r; else e->intake_head = r;
    e->intake_tail = r;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
    if (request_id) *request_id = id;
    return 0;
}

void engine_abort(Engine *e, uint64_t request_id) {
    pthread_mutex_lock(&e->lock);
    if (e->num_aborts == e->cap_aborts) {
        int cap = e->cap_aborts ? 2 * e->cap_aborts : 16;
        uint64_t *a = realloc(e->aborts, sizeof *a * (size_t)cap);
        if (!a) { /* keep the request running rather than fail the caller */
            pthread_mutex_unlock(&e->lock);
            return;
        }
        e->aborts = a;
        e->cap_aborts = cap;
    }
    e->aborts[e->num_aborts++] = request_id;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
}

EngineStats engine_stats(Engine *e) {
    pthread_mutex_lock(&e->stats_lock);
    EngineStats s = e->stats;
    pthread_mutex_unlock(&e->stats_lock);
    return s;
}
