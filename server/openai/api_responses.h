/*
 * api_responses.h - OpenAI's Responses API (POST /v1/responses, GET and
 * DELETE /v1/responses/{id}) over the chat pipeline.
 *
 * A Responses request is a chat request in other clothes: its input items
 * (messages, the model's own earlier function calls and reasoning, the
 * tools' outputs), instructions, tools and text format become the messages,
 * tools and response_format of a chat body, which then takes the chat path
 * unchanged: the same parsing, template, constraints, engine and output
 * parsers (api_internal.h). Only the two ends differ: the request is
 * translated on arrival (api_responses.c), and what the output parsers
 * release becomes output items and typed stream events instead of chat
 * chunks (api_responses_send.c). So one request through chat and through
 * Responses, with the same seed, produces the same tokens.
 *
 * A finished response is kept in the bounded store (response_store.h)
 * unless the request says "store": false, with the conversation that led
 * to it as chat messages; previous_response_id continues from there.
 */
#ifndef NANOVLLM_API_RESPONSES_H
#define NANOVLLM_API_RESPONSES_H

#include <jansson.h>
#include <stdbool.h>

#include "base/byte_buf.h"

typedef struct ApiRequest ApiRequest;
typedef struct ApiError ApiError;
typedef struct ApiEvent ApiEvent;
typedef struct Choice Choice;

/* The kind of output item a stream has open. */
typedef enum ResponsesItem { ITEM_NONE, ITEM_REASONING, ITEM_MESSAGE } ResponsesItem;

typedef struct ResponsesState {
    json_t *request;      /* the body as the client sent it (its echoed fields) */
    json_t *conversation; /* chat messages: the previous response's, then this input */
    bool store;
    json_t *output; /* the output items, as they are complete */
    int reasoning_tokens;
    bool began, in_reasoning; /* the answer so far is reasoning (for reasoning_tokens) */
    /* the item being written (streaming or not, so both assemble the same) */
    ResponsesItem open;
    char open_id[48];
    ByteBuf open_text;
    long long sequence; /* streaming: the next event's sequence_number */
} ResponsesState;

/* api_responses.c (loop) */
/* Replaces r->body by the chat body it stands for (r->responses keeps the
 * original); -1 with err filled when the request cannot be served. */
int api_responses_parse(ApiRequest *r, ApiError *err);
/* GET and DELETE /v1/responses/{id}. */
void api_responses_stored(ApiRequest *r);
void api_responses_free(ResponsesState *st);
/* A reasoning effort (Responses' reasoning.effort, chat's reasoning_effort)
 * into the chat body's chat_template_kwargs, as the template can take it. */
int api_reasoning_effort(ApiRequest *r, json_t *chat, const json_t *effort, const char *param, ApiError *err);

/* api_responses_send.c (loop) */
void api_responses_stream_open(ApiRequest *r); /* response.created, response.in_progress */
void api_responses_event(ApiRequest *r, Choice *c, const ApiEvent *ev);
void api_responses_complete(ApiRequest *r); /* the last event, or the whole body; stored */
/* The stream ends with an error (the server is stopping). */
void api_responses_stream_fail(ApiRequest *r, const ApiError *e);

#endif
