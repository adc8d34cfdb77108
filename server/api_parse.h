/*
 * openai_params.h - the fields of an OpenAI completion or chat request.
 *
 * Parsing is strict in types, as the API is specified (and as vLLM's
 * pydantic models are): an integer field takes a JSON integer only (3.0 and
 * "3" are errors), a number field a JSON number, a boolean a boolean; null
 * means "not given". Ranges are checked here too, so an accepted request is
 * one the engine will take. Unknown fields are ignored, as OpenAI does.
 */
#ifndef NANOVLLM_OPENAI_PARAMS_H
#define NANOVLLM_OPENAI_PARAMS_H

#include <jansson.h>
#include <stdbool.h>

#include "engine/model/model_config.h"
#include "engine/sampling_params.h"
#include "api_error.h"

#define MAX_STOP_STRINGS 16

typedef struct OpenAIParams {
    SamplingParams sampling; /* max_tokens 0 here means "not given" */
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    bool echo;          /* completions: the prompt before the completion */
    int num_stop;
    const char *stop[MAX_STOP_STRINGS]; /* point into the request JSON */
    const char *model;                  /* NULL when absent */
} OpenAIParams;

/* chat selects chat's fields (max_completion_tokens, logprobs as a boolean
 * with top_logprobs) over completions' (logprobs as an integer, echo).
 * defaults: the model's generation_config.json sampling defaults, used for
 * the fields a request leaves out (else OpenAI's: temperature 1, top_p 1). */
int openai_parse_params(const json_t *body, bool chat, const ModelConfig *defaults,
                        OpenAIParams *out, ApiError *err);

#endif
