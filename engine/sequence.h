/*
 * sequence.h - one stream of tokens the engine is generating.
 *
 * A request becomes one sequence per sample (n). A sequence owns its tokens
 * (prompt, then output), the KV blocks that hold their keys and values, and
 * how far the KV has been computed. The scheduler moves it between the
 * waiting and running queues (intrusive links: no allocation per move).
 */
#ifndef NANOVLLM_SEQUENCE_H
#define NANOVLLM_SEQUENCE_H

#include <stdint.h>

#include "block_manager.h"
#include "sampling_params.h"
#include "base/byte_buf.h"
#include "structured/token_matcher.h"
#include "text/tokenizer/tokenizer.h"

typedef enum SeqStatus { SEQ_WAITING, SEQ_RUNNING, SEQ_FINISHED } SeqStatus;

typedef struct Sequence {
    void *owner;      /* the engine's request */
    int sample_index; /* which of the request's n samples */
    int32_t *tokens;  /* [capacity]: prompt, then generated tokens */
    int num_tokens;
    int capacity;
    int num_prompt_tokens;
    int num_computed;      /* tokens whose KV is in the cache */
    int num_cached_prompt; /* prompt tokens found in the prefix cache when first admitted */
    BlockTable blocks;
    SeqStatus status;
    const SamplingParams *params;
    uint64_t seed;
    Detokenizer detok; /* when the engine has a tokenizer */
    ByteBuf held;      /* text not yet delivered: it may begin a stop string */
    TokenMatcher *matcher;   /* structured outputs: where the output is in the constraint */
    bool constraint_waiting; /* the constraint starts after the request's constraint_after token */
    bool constraint_failed;  /* no token can follow (the vocabulary cannot spell it) or a limit */
    bool end_forced;  /* min_tokens: this step's constraint allowed only end ids, which it kept */
    bool mask_failed; /* no memory for this step's token mask: the sample ends with an error */
    bool no_prefix_reuse; /* mean or CLS pooling: every token's hidden state is needed; or a
                           * model with recurrent state (it is not in the KV blocks) */
    int state_slot;   /* the runner's recurrent-state slot while running (hybrid models), else -1 */
    int restore_checkpoint; /* admitted on a cached prefix: the state to start from (state_cache.h), else -1 */
    int priority;     /* the request's: lower is served first (scheduler.h, SCHEDULING_PRIORITY) */
    uint64_t arrival; /* the request's submission order (its id): breaks ties of priority */
    struct Sequence *prev, *next; /* queue links */
} Sequence;

static inline int sequence_num_output(const Sequence *s) {
    return s->num_tokens - s->num_prompt_tokens;
}

#endif
