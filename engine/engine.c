/*
 * engine.c - requests, the step loop, and delivery of tokens (see engine.h).
 *
 * Threads: engine_submit and engine_abort run on any thread and touch only
 * the intake queue (under `lock`). Everything else - requests, sequences,
 * the scheduler, the block manager, the runner - belongs to the one thread
 * that steps, so none of it needs a lock, and no lock is held while the
 * runner computes or a callback runs.
 */
#include "engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "scheduler.h"
#include "base/log.h"

typedef struct Request {
    uint64_t id;
    SamplingParams params;
    int32_t *prompt;
    int prompt_len;
    EngineOutputFn on_output;
    void *user;
    uint64_t seed;
    const Tokenizer *tok;
    char **stop; /* stop strings, copied */
    int num_stop;
    size_t max_stop_len;
    bool keep_special_tokens;
    Constraint *constraint; /* a reference, or NULL */
    int32_t constraint_after;
    int priority;   /* EngineRequest.priority */
    Sequence *seqs; /* [params.n]; seqs[0] starts, the others fork from it */
    int num_started, num_live;
    bool closed; /* no further samples will start (aborted or failed) */
    struct Request *prev, *next;
} Request;

struct Engine {
    const ModelWeights *model; /* borrowed, as the runner */
    Runner *runner;
    const Tokenizer *tok; /* optional: text and stop strings */
    BlockManager *bm;
    Scheduler *sched;
    int block_size;

    Request *live; /* admitted requests (engine thread only) */

    pthread_mutex_t lock; /* guards the intake fields below */
    pthread_cond_t wake;
    Request *intake_head, *intake_tail;
    uint64_t *aborts;
    int num_aborts, cap_aborts;
    uint64_t next_id;
    bool stopping;
    pthread_t thread;
    bool thread_started;
    uint64_t seed_state;

    RunnerSeq *batch_seqs; /* step buffers, [max_num_seqs] */
    int32_t *tokens_out;
    SampleLogprobs *logprobs;
    uint32_t *masks; /* [max_num_seqs][mask words], made at the first step that masks a row */

    long long prompt_tokens, generation_tokens, steps; /* engine thread's counters */
    pthread_mutex_t stats_lock; /* guards `stats`, the copy other threads read */
    EngineStats stats;
};

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

typedef struct Text {
    const char *data;
    size_t len;
    int stop_string;
} Text;

static const Text NO_TEXT = {NULL, 0, -1};

static void emit(Request *r, Sequence *s, bool has_token, int32_t token,
                 const SampleLogprobs *lp, FinishReason finish, const Error *error, Text text) {
    EngineOutput out = {
        .request_id = r->id,
        .sample_index = s->sample_index,
        .has_token = has_token,
        .token = token,
        .logprobs = lp,
        .text = text.data,
        .text_len = text.len,
        .stop_string = text.stop_string,
        .finish = finish,
        .error = error ? error->msg : NULL,
        .error_kind = error ? error->kind : ERROR_INTERNAL,
        .num_prompt_tokens = r->prompt_len,
        .num_cached_tokens = r->seqs[0].num_cached_prompt,
        .num_output_tokens = sequence_num_output(s),
    };
    r->on_output(&out, r->user);
}

static void unlink_live(Engine *e, Request *r) {
    if (r->prev) r->prev->next = r->next; else e->live = r->next;
    if (r->next) r->next->prev = r->prev;
}

/* Ends one sample: out of the scheduler, blocks released, the user told. The
 * request goes when its last sample has. */
static void finish(Engine *e, Sequence *s, bool has_token, int32_t token, const SampleLogprobs *lp,
                   FinishReason reason, const Error *error, Text text) {
    Request *r = s->owner;
    scheduler_remove(e->sched, s);
    if (reason == FINISH_ABORT || reason == FINISH_ERROR) r->closed = true;
    r->num_live--;
    emit(r, s, has_token, token, lp, reason, error, text);
    if (r->num_live == 0 && (r->closed || r->num_started == r->params.n)) {
        unlink_live(e, r);
        free_request(r);
    }
}

/* The other samples of a request start from the first one's prompt blocks:
 * all its full blocks except one holding the last prompt token, which each
 * sample recomputes to get its own logits (never writing a shared block). */
static void fork_samples(Engine *e, Request *r) {
    Sequence *first = &r->seqs[0];
    int k = (r->prompt_len - 1) / e->block_size;
    if (k > first->blocks.num_hashed) k = first->blocks.num_hashed;
    for (int i = r->params.n - 1; i >= 1; i--) {
        if (init_sequence(r, i) != 0) { /* out of memory: the samples started go on */
            r->closed = true;
            return;
        }
        if (block_manager_fork(e->bm, &first->blocks, k, &r->seqs[i].blocks) != 0) {
            r->closed = true;
            r->seqs[i].status = SEQ_FINISHED; /* in no queue yet */
            static const Error oom = {"out of memory", ERROR_INTERNAL};
            finish(e, &r->seqs[i], false, 0, NULL, FINISH_ERROR, &oom, NO_TEXT);
            return;
        }
        r->seqs[i].num_computed = k * e->block_size;
        r->seqs[i].num_cached_prompt = first->num_cached_prompt;
        scheduler_add_front(e->sched, &r->seqs[i]);
    }
}

/* Whether the output (the new token included) is long enough for an end id
 * to end it: vLLM's check_stop returns early while num_output < min_tokens.
 * The mask keeps end ids out until then, unless a constraint forced one. */
static bool may_end(const Sequence *s) {
    return sequence_num_output(s) >= s->params->min_tokens || s->end_forced;
}

static FinishReason stop_reason(const Engine *e, const Sequence *s, int32_t token) {
    const SamplingParams *p = s->params;
    if (may_end(s)) {
        if (!p->ignore_eos && model_config_is_eos(&e->model->config, token)) return FINISH_STOP;
        for (int i = 0; i < p->num_stop_token_ids; i++)
            if (p->stop_token_ids[i] == token) return FINISH_STOP;
    }
    if (sequence_num_output(s) >= p->max_tokens || s->num_tokens >= s->capacity)
        return FINISH_LENGTH;
    return FINISH_NONE;
}

/* The new token's text, through the sample's detokenizer, with the stop
 * strings applied: text that could still turn out to begin a stop string is
 * held back (the longest stop string's length - 1 bytes, cut at a character
 * boundary), the rest is delivered. A stop string found ends the sample and
 * cuts the text before it; at any other end everything held is delivered.
 * As vLLM's stop checker, only a stop string that ends in the new text is
 * looked for (an earlier one would have been found earlier, except in text
 * from before min_tokens), and none while the output has at most min_tokens
 * tokens. */
static Text next_text(Engine *e, Sequence *s, int32_t token, bool ending) {
    Request *r = s->owner;
    if (!e->tok) return NO_TEXT;
    const char *piece;
    size_t n;
    Error err;
    size_t old = s->held.len;
    if (detokenizer_push(&s->detok, token, &piece, &n, &err) == 0 && n > 0)
        byte_buf_append(&s->held, piece, n); /* out of memory: the text lacks this piece */
    size_t best = s->held.len;
    int which = -1;
    bool check = sequence_num_output(s) > s->params->min_tokens;
    for (int i = 0; check && i < r->num_stop; i++) {
        size_t len = strlen(r->stop[i]);
        size_t from = old + 1 > len ? old + 1 - len : 0; /* a match from here on ends past old */
        if (from >= s->held.len) continue;
        const char *p = memmem(s->held.data + from, s->held.len - from, r->stop[i], len);
        if (p && (size_t)(p - s->held.data) < best) {
            best = (size_t)(p - s->held.data);
            which = i;
        }
    }
    if (which >= 0) return (Text){s->held.data, best, which};
    if (ending) {
        if (detokenizer_finish(&s->detok, &piece, &n, &err) == 0 && n > 0)
            byte_buf_append(&s->held, piece, n);
        return (Text){s->held.data, s->held.len, -1};
    }
    size_t keep = r->num_stop ? r->max_stop_len - 1 : 0;
    size_t cut = s->held.len > keep ? s->held.len - keep : 0;
    while (cut > 0 && cut < s->held.len && ((unsigned char)s->held.data[cut] & 0xC0) == 0x80) cut--;
    return (Text){s->held.data, cut, -1};
}

/* Drops the delivered start of the held text. */
static void consume_held(Sequence *s, size_t n) {
    if (n == 0) return;
    memmove(s->held.data, s->held.data + n, s->held.len - n);
    s->held.len -= n;
}

/* ---- creation -------------------------------------------------------------- */

/* Everything but the model and the runner, which `e` already points to. */
static int engine_init(Engine *e, Error *err) {
    Runner *runner = e->runner;
    e->block_size = runner->options.block_size;
    e->next_id = 1;
    e->seed_state = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)e;
    int max_seqs = runner->options.max_num_seqs;
    SchedulerOptions so = {max_seqs, runner->options.max_num_batched_tokens, SCHEDULING_FCFS};
    e->bm = block_manager_create(runner->num_kv_blocks, e->block_size, err);
    if (!e->bm) return -1;
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
    const SamplingParams *p = &req->params;
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
    if (sampling_params_validate(p, c->vocab_size, err)) return -1;
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
    if (!r || !r->prompt || !r->seqs) {
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

/* ---- the step --------------------------------------------------------------- */

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
                finish(e, s, false, 0, NULL, FINISH_ABORT, NULL, NO_TEXT);
                if (last) break; /* r is freed */
            }
            break;
        }
    }
    if (aborts != small) free(aborts);
}

/* Ends of the output the constraint lets through where it may end: the
 * model's EOS ids and the request's stop ids. */
static int end_ids(const Engine *e, const Sequence *s, int32_t *ids) {
    const ModelConfig *c = &e->model->config;
    int n = 0;
    for (int i = 0; i < c->num_eos_ids; i++) ids[n++] = c->eos_ids[i];
    for (int i = 0; i < s->params->num_stop_token_ids; i++) ids[n++] = s->params->stop_token_ids[i];
    return n;
}

/* Row i's words of the step's mask buffer, made at the first step that
 * masks a row and kept ([max_num_seqs] rows: a batch has at most that many);
 * NULL when out of memory, which marks the sample to end with an error. */
static uint32_t *mask_row(Engine *e, Sequence *s, int i) {
    size_t words = (size_t)token_mask_words(e->model->config.vocab_size);
    if (!e->masks && !(e->masks = malloc(sizeof *e->masks * words * (size_t)e->runner->options.max_num_seqs))) {
        s->mask_failed = true;
        return NULL;
    }
    return e->masks + (size_t)i * words;
}

/* Row i's mask of allowed tokens; NULL (every token) when the constraint
 * cannot go on, which marks the sample to end with an error instead. */
static uint32_t *constraint_mask(Engine *e, Sequence *s, int i) {
    int words = token_mask_words(e->model->config.vocab_size);
    uint32_t *mask = mask_row(e, s, i);
    if (!mask) return NULL;
    int32_t ends[MODEL_MAX_EOS_IDS + MAX_STOP_TOKEN_IDS];
    Error err;
    if (token_matcher_fill_mask(s->matcher, mask, ends, end_ids(e, s, ends), &err) < 0) {
        log_info("structured output: %s", err.msg);
        s->constraint_failed = true;
        return NULL;
    }
    for (int w = 0; w < words; w++)
        if (mask[w]) return mask;
    s->constraint_failed = true; /* the vocabulary cannot spell what must come next */
    return NULL;
}

/* min_tokens: row i's mask without the end ids (end_ids: the model's EOS
 * ids, even with ignore_eos, as vLLM's _all_stop_token_ids, and the stop
 * ids). `allowed` is the constraint's mask (row i of the buffer) or NULL for
 * a free row, which gets every token but those. If no token would be left,
 * the mask is kept as it was: a constraint that can only end now ends (the
 * constraint wins over min_tokens, and end_forced lets that end id end the
 * sample); a vocabulary of nothing but end ids is left to them. NULL (and
 * mask_failed) when out of memory. */
static const uint32_t *min_tokens_mask(Engine *e, Sequence *s, int i, uint32_t *allowed) {
    int vocab = e->model->config.vocab_size, words = token_mask_words(vocab);
    uint32_t *mask = allowed;
    if (!mask) {
        if (!(mask = mask_row(e, s, i))) return NULL;
        memset(mask, 0xFF, sizeof *mask * (size_t)words);
        if (vocab % 32) mask[words - 1] = (1u << (vocab % 32)) - 1; /* no bits past the vocabulary */
    }
    int32_t ends[MODEL_MAX_EOS_IDS + MAX_STOP_TOKEN_IDS], cleared[MODEL_MAX_EOS_IDS + MAX_STOP_TOKEN_IDS];
    int n = end_ids(e, s, ends), num_cleared = 0;
    for (int k = 0; k < n; k++) {
        uint32_t bit = 1u << (ends[k] % 32);
        if (mask[ends[k] / 32] & bit) {
            mask[ends[k] / 32] &= ~bit;
            cleared[num_cleared++] = ends[k];
        }
    }
    if (num_cleared == 0) return mask;
    uint32_t last = vocab % 32 ? (1u << (vocab % 32)) - 1 : 0xFFFFFFFFu; /* bits past vocab are not tokens */
    for (int w = 0; w < words; w++)
        if (mask[w] & (w == words - 1 ? last : 0xFFFFFFFFu)) return mask;
    for (int k = 0; k < num_cleared; k++) mask[cleared[k] / 32] |= 1u << (cleared[k] % 32);
    s->end_forced = true;
    return mask;
}

/* Moves the sample's matcher past its new token; -1 if it does not fit. */
static int constraint_advance(Engine *e, Sequence *s, int32_t token, Error *err) {
    if (s->constraint_waiting) {
        if (token == ((Request *)s->owner)->constraint_after) s->constraint_waiting = false;
        return 0;
    }
    int32_t ends[MODEL_MAX_EOS_IDS + MAX_STOP_TOKEN_IDS];
    int n = end_ids(e, s, ends);
    bool is_end = false;
    for (int k = 0; k < n; k++) is_end |= ends[k] == token;
    return token_matcher_accept(s->matcher, token, is_end, err);
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
        any_logprobs |= r->params.logprobs >= 0;
        if (!so->seqs[i].compute_logits) continue;
        s->end_forced = false;
        uint32_t *allowed = NULL;
        if (s->matcher && !s->constraint_waiting) {
            allowed = constraint_mask(e, s, i);
            if (!allowed) continue; /* the sample ends with an error: nothing to ban */
        }
        /* vLLM's MinTokensLogitsProcessor: the end ids are banned while the
         * output so far is shorter than min_tokens */
        e->batch_seqs[i].sample.allowed = sequence_num_output(s) < s->params->min_tokens
                                              ? min_tokens_mask(e, s, i, allowed)
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
        if (!so->seqs[i].compute_logits) continue;
        Request *r = s->owner;
        int32_t token = e->tokens_out[i];
        Error constraint_err;
        if (s->mask_failed) {
            static const Error oom = {"out of memory (a token mask)", ERROR_INTERNAL};
            finish(e, s, false, 0, NULL, FINISH_ERROR, &oom, NO_TEXT);
            continue;
        }
        if (s->constraint_failed) {
            error_set_kind(&constraint_err, ERROR_INVALID,
                           "structured output: the constraint cannot go on (too ambiguous a grammar, or "
                           "no token of this model's vocabulary continues it; the server log says which)");
            finish(e, s, false, 0, NULL, FINISH_ERROR, &constraint_err, NO_TEXT);
            continue;
        }
        if (s->matcher && constraint_advance(e, s, token, &constraint_err) < 0) {
            finish(e, s, false, 0, NULL, FINISH_ERROR, &constraint_err, NO_TEXT);
            continue;
        }
        s->tokens[s->num_tokens++] = token;
        e->generation_tokens++;
        if (s->sample_index == 0 && r->num_started < r->params.n && !r->closed)
            fork_samples(e, r);
        const SampleLogprobs *lp = r->params.logprobs >= 0 ? &e->logprobs[i] : NULL;
        FinishReason reason = stop_reason(e, s, token);
        Text text = next_text(e, s, token, reason != FINISH_NONE);
        if (text.stop_string >= 0) reason = FINISH_STOP;
        if (reason != FINISH_NONE) {
            finish(e, s, true, token, lp, reason, NULL, text);
        } else {
            emit(r, s, true, token, lp, FINISH_NONE, NULL, text);
            consume_held(s, text.len);
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
        finish(e, s, false, 0, NULL, FINISH_ERROR, &too_long, NO_TEXT);
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
                    finish(e, s, false, 0, NULL, FINISH_ERROR, &runner_err, NO_TEXT);
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

EngineStats engine_stats(Engine *e) {
    pthread_mutex_lock(&e->stats_lock);
    EngineStats s = e->stats;
    pthread_mutex_unlock(&e->stats_lock);
    return s;
}
