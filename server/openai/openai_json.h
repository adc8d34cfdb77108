/*
 * openai_json.h - OpenAI response bodies: completions, chat, their SSE
 * chunks, logprobs, usage, errors, models.
 *
 * Pure builders (jansson in, JSON text out); the server decides when to
 * send what. Shapes follow OpenAI's API reference (and vLLM where OpenAI is
 * silent: stop_reason, the usage chunk with empty choices).
 */
#ifndef NANOVLLM_OPENAI_JSON_H
#define NANOVLLM_OPENAI_JSON_H

#include <jansson.h>
#include <stdbool.h>

#include "api_error.h"
#include "engine/engine.h"
#include "text/tokenizer/tokenizer.h"

typedef enum ApiKind { API_COMPLETION, API_CHAT } ApiKind;

/* What a response chunk or body says about one choice. */
typedef struct ChoiceOut {
    int index;
    const char *text; /* completion text (or delta) */
    size_t text_len;
    bool role;            /* chat stream: this chunk opens the message */
    FinishReason finish;  /* FINISH_NONE: not finished */
    const char *stop_str; /* the stop string that ended it, or NULL */
    json_t *logprobs;     /* NULL: "logprobs": null; stolen */
    /* Chat with its answer parsed (chat/): */
    bool parsed;            /* content is null when empty; message has reasoning(_content) */
    const char *reasoning;  /* reasoning and reasoning_content (stream: its delta) */
    size_t reasoning_len;
    json_t *tool_calls;     /* message.tool_calls / delta.tool_calls; NULL: none; stolen */
    bool finish_tool_calls; /* finish_reason "tool_calls" */
} ChoiceOut;

typedef struct Usage {
    int prompt_tokens, completion_tokens, cached_tokens;
} Usage;

/* "stop" / "length" / "abort" / "error" (OpenAI has only the first two; an
 * error ends a request with an error chunk, not a finish reason). */
const char *finish_reason_name(FinishReason f);

/* A whole response (stream false) or one SSE chunk (stream true), without
 * the "data: " framing. usage may be NULL (and a chunk with usage and no
 * choices is the usage chunk). */
json_t *openai_response(ApiKind kind, bool chunk, const char *id, long created, const char *model,
                        const ChoiceOut *choices, int num_choices, const Usage *usage);

/* Logprobs of consecutive tokens, as the API lays them out: completions
 * {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; chat
 * {"content": [{"token", "logprob", "bytes", "top_logprobs"}]}. Append to
 * an object made by logprobs_new(). */
json_t *logprobs_new(ApiKind kind);
int logprobs_append(json_t *lp, ApiKind kind, const Tokenizer *tok, int32_t token,
                    const SampleLogprobs *sl, int top_n, size_t *text_offset);

/* {"error": {"message", "type", "param", "code"}} */
char *openai_error_body(const ApiError *e, size_t *len);

/* "data: <json>\n\n" into a malloc'ed string. */
char *sse_event(json_t *chunk, size_t *len);

#endif
