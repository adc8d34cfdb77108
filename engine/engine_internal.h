/*
 * engine_internal.h - what the engine's files share: the request and engine
 * structs, a delivered piece of text, and the functions one file lends the
 * others.
 *
 * The engine is cut by job: engine.c (its life and the requests),
 * engine_step.c (the step loop), engine_text.h (when a sample ends, and its
 * text with the stop strings), engine_masks.c (the allowed-token masks of
 * constraints and min_tokens).
 *
 * Threads: engine_submit and engine_abort run on any thread and touch only
 * the intake queue (under `lock`). Everything else - requests, sequences,
 * the scheduler, the block manager, the runner - belongs to the one thread
 * that steps, so none of it needs a lock, and no lock is held while the
 * runner computes or a callback runs.
 */
#ifndef NANOVLLM_ENGINE_INTERNAL_H
#define NANOVLLM_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "scheduler.h"

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
    PoolingMode pooling; /* EngineRequest.pooling */
    float *pooled;       /* [hidden_size] with pooling: the runner's output buffer */
    int pooled_dim;
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
    StateCache *state_cache; /* models with recurrent state and runner checkpoints; else NULL */
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

/* Text an output delivers: data[0, len), and the stop string that ended the
 * sample or -1 (engine_text.h's engine_next_text). */
typedef struct Text {
    const char *data;
    size_t len;
    int stop_string;
} Text;

static const Text NO_TEXT = {NULL, 0, -1};

/* ---- engine.c: a request's samples ---------------------------------------- */

/* One output to the request's callback; the sample goes on unless `finish`.
 * Inline for the reason engine_text.h gives: the step loop calls it for
 * every token of every sample. */
static inline void engine_emit(Request *r, Sequence *s, bool has_token, int32_t token,
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
        .embedding = finish == FINISH_STOP ? r->pooled : NULL,
        .embedding_dim = r->pooled ? (int)r->pooled_dim : 0,
    };
    r->on_output(&out, r->user);
}
/* Ends one sample (and its request after the last); r may be freed. */
void engine_finish(Engine *e, Sequence *s, bool has_token, int32_t token, const SampleLogprobs *lp,
                   FinishReason reason, const Error *error, Text text);
/* Starts samples 1..n-1 from sample 0's prompt blocks, once it has its first token. */
void engine_fork_samples(Engine *e, Request *r);


/* ---- engine_masks.c: allowed-token masks ---------------------------------- */

/* Row i's mask from the sample's constraint; NULL marks the sample to end. */
uint32_t *engine_constraint_mask(Engine *e, Sequence *s, int i);
/* Row i's mask (or `allowed`) with the end ids banned, while under min_tokens. */
const uint32_t *engine_min_tokens_mask(Engine *e, Sequence *s, int i, uint32_t *allowed);
/* Moves the sample's matcher past its new token; -1 if it does not fit. */
int engine_constraint_advance(Engine *e, Sequence *s, int32_t token, Error *err);

#endif
