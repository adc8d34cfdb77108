/*
 * engine.h - the inference engine: requests in, tokens out.
 *
 * Owns the block manager, the scheduler and the requests; drives a runner
 * it is given (engine/runner.h), over weights it is given, both created and
 * freed by the caller - the engine never chooses or knows the backend.
 * Requests are submitted from any thread (engine_submit / engine_abort only
 * take a lock and queue); the engine's step loop - on its own thread after
 * engine_start(), or in the caller with engine_step() - drains them,
 * schedules, runs one forward + sampling step on the runner and delivers
 * each new token through the request's callback, on the stepping thread,
 * with no engine lock held.
 *
 * Embedding requests (EngineRequest.pooling) are prefill-only sequences
 * in the same queues and batches; they end with their pooled vector.
 *
 * A request with n samples is prefilled once: its first sample computes the
 * prompt, and when it has its first token the other samples fork from it,
 * sharing the prompt's full KV blocks.
 *
 * Sampling: SamplingParams (sampling_params.h; the sampler's order in
 * sampler.h). min_tokens is the engine's: until a sample has min_tokens
 * output tokens, its rows' allowed-token mask bans the end ids (the model's
 * EOS ids, even with ignore_eos, and the request's stop_token_ids), no end
 * id ends it and stop strings are not looked for (vLLM's semantics). With a
 * structured-output constraint the end ids are cleared from the
 * constraint's mask, unless that leaves no token at all: then the
 * constraint wins, its end id is sampled and ends the sample early.
 */
#ifndef NANOVLLM_ENGINE_H
#define NANOVLLM_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "runner.h"
#include "sampling_params.h"
#include "scheduler.h"
#include "structured/constraint.h"
#include "text/tokenizer/tokenizer.h"

typedef enum FinishReason {
    FINISH_NONE,   /* not finished */
    FINISH_STOP,   /* an end-of-sequence or stop token */
    FINISH_LENGTH, /* max_tokens */
    FINISH_ABORT,  /* engine_abort */
    FINISH_ERROR,  /* could not be served (error says why) */
} FinishReason;

typedef struct EngineOutput {
    uint64_t request_id;
    int sample_index;
    bool has_token; /* false only on a finish without a new token (abort, error) */
    int32_t token;
    const SampleLogprobs *logprobs; /* when the request asked for logprobs */
    /* Text completed by this output (engine with a tokenizer only): whole
     * UTF-8 characters, valid during the call. Concatenated, a sample's
     * texts are its completion, cut before a stop string if one matched. */
    const char *text;
    size_t text_len;
    int stop_string; /* index of the stop string that ended it, else -1 */
    FinishReason finish;            /* FINISH_NONE while the sample goes on */
    const char *error;              /* for FINISH_ERROR: the message */
    ErrorKind error_kind;           /* for FINISH_ERROR: whose fault (base/error.h) */
    int num_prompt_tokens;
    int num_cached_tokens; /* prompt tokens served from the prefix cache */
    int num_output_tokens; /* of this sample, so far */
    /* An embedding request's finish (FINISH_STOP, no token): the pooled
     * vector, [embedding_dim] floats, valid during the call; raw (the
     * caller normalises as the model says). NULL otherwise. */
    const float *embedding;
    int embedding_dim;
} EngineOutput;

/* Called on the stepping thread. The request is forgotten after its last
 * sample's output with finish != FINISH_NONE. */
typedef void (*EngineOutputFn)(const EngineOutput *out, void *user);

typedef struct EngineRequest {
    const int32_t *prompt; /* copied at submission */
    int prompt_len;
    SamplingParams params; /* copied at submission */
    /* Stop strings (copied): generation ends where one appears in the text,
     * which is then cut before it. Need engine_set_tokenizer. */
    const char *const *stop;
    int num_stop;
    bool keep_special_tokens; /* in the text; default: left out, as HF's skip_special_tokens */
    /* Structured outputs (structured/constraint.h): every sample's
     * tokens are masked to the constraint, which the engine references for
     * the request's life. NULL: free text. constraint_after: a token id
     * after which the constraint starts (a reasoning model's </think>), or
     * -1 to start at the first token. */
    Constraint *constraint;
    int32_t constraint_after;
    /* SCHEDULING_PRIORITY only (engine_set_scheduling_policy): lower values
     * are scheduled first and preempted last; ties go by submission order.
     * Under SCHEDULING_FCFS (the default) it is ignored. */
    int priority;
    /* POOLING_NONE (0): generation. Otherwise an embedding request: the
     * prompt is prefilled (chunked and batched like any other, max_tokens
     * and n ignored), nothing is sampled, and it finishes after its last
     * chunk with EngineOutput.embedding. Last-token pooling reuses cached
     * prefix blocks (the last token is always computed); mean and CLS
     * pooling need every token's hidden state, so they skip the prefix
     * cache (their blocks are still committed for others to reuse). */
    PoolingMode pooling;
    EngineOutputFn on_output;
    void *user;
} EngineRequest;

typedef struct EngineStats {
    int num_running, num_waiting;
    int kv_blocks_total, kv_blocks_used;
    long long prefix_query_tokens, prefix_hit_tokens;
    long long preemptions;
    long long prompt_tokens, generation_tokens;
    long long steps;
} EngineStats;

typedef struct Engine Engine;

/* An engine over a loaded model and its runner; both must outlive it. */
Engine *engine_create(const ModelWeights *model, Runner *runner, Error *err);

void engine_destroy(Engine *e); /* stops the thread; pending requests are dropped silently */

/* Gives the engine a tokenizer to turn tokens into text (EngineOutput.text)
 * and to check stop strings. Call before submitting; borrowed. */
void engine_set_tokenizer(Engine *e, const Tokenizer *t);

/* Which requests go first (scheduler.h): SCHEDULING_FCFS (the default) or
 * SCHEDULING_PRIORITY (EngineRequest.priority, vLLM's --scheduling-policy
 * priority). Call before engine_start and the first submission: the
 * scheduler belongs to the stepping thread and is not locked. */
void engine_set_scheduling_policy(Engine *e, SchedulingPolicy policy);

const ModelConfig *engine_model_config(const Engine *e);
const Runner *engine_runner(const Engine *e);

/* Validates and queues a request; -1 with a message (too long for
 * max_model_len, larger than the KV cache, bad ids or parameters). */
int engine_submit(Engine *e, const EngineRequest *req, uint64_t *request_id, Error *err);

/* Stops a request at the next step; its samples finish with FINISH_ABORT. */
void engine_abort(Engine *e, uint64_t request_id);

/* One step in the calling thread: takes submissions, schedules, runs.
 * Returns 1 if work was done, 0 when idle, -1 on a runner failure (every
 * request in the step then finishes with FINISH_ERROR). */
int engine_step(Engine *e, Error *err);

/* Whether any request is queued or running. */
bool engine_has_work(Engine *e);

/* Runs steps on a background thread until engine_destroy. */
int engine_start(Engine *e, Error *err);

EngineStats engine_stats(Engine *e);

#endif
