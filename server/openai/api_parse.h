/*
 * api_parse.h - the first stage of a completion or chat request: its
 * fields, as OpenAI (and vLLM) define them, read and checked.
 *
 * Parsing is strict in types, as the API is specified (and as vLLM's
 * pydantic models are): an integer field takes a JSON integer only (3.0 and
 * "3" are errors), a number field a JSON number, a boolean a boolean; null
 * means "not given". Ranges are checked here too, so an accepted request is
 * one the engine will take. Unknown fields are ignored, as OpenAI does.
 */
#ifndef NANOVLLM_API_PARSE_H
#define NANOVLLM_API_PARSE_H

#include <jansson.h>
#include <stdbool.h>

#include <stdint.h>

#include "api_error.h"
#include "model/model_config.h"
#include "engine/sampling_params.h"

#define MAX_STOP_STRINGS 16

/* "tool_choice", as it applies: NONE also when no tools were given. */
typedef enum ToolChoice { TOOL_CHOICE_NONE, TOOL_CHOICE_AUTO, TOOL_CHOICE_REQUIRED, TOOL_CHOICE_NAMED } ToolChoice;

typedef struct OpenAIParams {
    SamplingParams sampling; /* max_tokens 0 here means "not given" */
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    bool continuous_usage; /* stream_options.continuous_usage_stats: usage in every chunk */
    int truncate_prompt_tokens; /* > 0: only the prompt's last N tokens are kept; 0: all */
    int priority;               /* --scheduling-policy priority: lower first */
    bool echo;          /* completions: the prompt before the completion */
    int num_stop;
    const char *stop[MAX_STOP_STRINGS]; /* point into the request JSON */
    const char *model;                  /* NULL when absent */
    /* Structured outputs (api_structured.c): a ConstraintKind or -1, its
     * value in the request JSON (NULL for json_object) and the field it
     * came from, for errors. */
    int constraint_kind;
    const json_t *constraint;
    const char *constraint_field;
    /* Chat tools (api_tools.c): the request's list (NULL when none), the
     * choice, the named function, parallel_tool_calls. */
    const json_t *tools;
    ToolChoice tool_choice;
    const char *tool_choice_name;
    bool parallel_tool_calls;
} OpenAIParams;

/* chat selects chat's fields (max_completion_tokens, logprobs as a boolean
 * with top_logprobs) over completions' (logprobs as an integer, echo).
 * defaults: the model's generation_config.json sampling defaults, used for
 * the fields a request leaves out (else OpenAI's: temperature 1, top_p 1). */
int api_parse_params(const json_t *body, bool chat, const ModelConfig *defaults,
                     OpenAIParams *out, ApiError *err);

/* response_format, structured_outputs and guided_* into p->constraint_*
 * (api_structured.c); exactly one constraint, every option understood. */
int api_parse_constraint(const json_t *body, OpenAIParams *p, ApiError *err);

/* A JSON list of integers in [0, limit) to token ids: *ids malloc'ed
 * (*count of them; NULL for an empty list). -1 when it is not such a list
 * (the caller says what it expected), -2 when out of memory. The one
 * reader of id lists: prompts, stop_token_ids and /detokenize. */
int json_token_ids(const json_t *list, long long limit, int32_t **ids, size_t *count);

#endif
