/*
 * chat_template.h - OpenAI-style chat requests to prompt text, with the
 * model folder's own chat template run by the Jinja interpreter
 * (text/jinja), as vLLM and transformers run it.
 *
 * A ChatTemplate is compiled once (at start-up, or per request for a
 * trusted per-request template) and is then read-only: any number of
 * threads may render with it at once.
 *
 * What the template sees, as vLLM hands it to transformers:
 *   messages               the request's messages; `content` as the content
 *                          format says (below); an assistant's tool call
 *                          `function.arguments` given as a JSON string is
 *                          parsed into the object templates expect; null
 *                          members dropped (null is "not given"); a passed-
 *                          back thinking under both reasoning_content and
 *                          reasoning (VERBATIM: all as sent)
 *   tools, documents       the request's (tools without null members), or None
 *   add_generation_prompt  default true
 *   bos_token, eos_token.. the tokenizer's special-token strings
 *   chat_template_kwargs   each member a variable (enable_thinking, ...),
 *                          over the server's defaults if any (a member
 *                          given as null is not given: the default stays)
 * and the globals raise_exception and strftime_now (the clock `now`).
 */
#ifndef NANOVLLM_CHAT_TEMPLATE_H
#define NANOVLLM_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "chat/tool_calls/tool_call_format.h"
#include "text/tokenizer/tokenizer.h"

/* How a message's `content` reaches the template (vLLM's
 * --chat-template-content-format). A string stays a string in every format;
 * a list of text parts and null differ:
 *   STRING    parts joined with "\n"; null is ""
 *   OPENAI    the list of {"type": "text", "text"} parts; null is []
 *   AUTO      OPENAI for templates that loop over a message's content,
 *             else STRING
 *   VERBATIM  the messages exactly as sent (nothing parsed or joined):
 *             what transformers' apply_chat_template renders from them */
typedef enum ChatContentFormat {
    CHAT_CONTENT_AUTO,
    CHAT_CONTENT_STRING,
    CHAT_CONTENT_OPENAI,
    CHAT_CONTENT_VERBATIM,
} ChatContentFormat;

/* "auto" | "string" | "openai" | "verbatim"; -1 otherwise. */
int chat_content_format_parse(const char *name, ChatContentFormat *out);

typedef struct ChatTemplate ChatTemplate;

/* Compiles a template. text NULL: the tokenizer's own (its "default", and
 * its "tool_use" for requests with tools); a folder without any gets plain
 * ChatML, which refuses tools, and *warning (if not NULL) says so for the
 * start-up log. The tokenizer gives the special-token strings and must
 * outlive the template. A syntax error is an ERROR_INVALID naming the
 * line. */
ChatTemplate *chat_template_new(const Tokenizer *t, const char *text, ChatContentFormat format,
                                const char **warning, Error *err);
void chat_template_free(ChatTemplate *ct);

/* Whether the template renders a request's tools, and so teaches the model
 * some way to write tool calls. */
bool chat_template_takes_tools(const ChatTemplate *ct);

/* The way it teaches, so that the parser reading the answer can match it:
 * the format tool_call_format.h detects in the template's text, or NULL
 * (it takes no tools, or writes calls in a format not known here:
 * Llama's, Mistral's, ...). */
const ToolCallFormat *chat_template_tool_call_format(const ChatTemplate *ct);

/* How a request can steer the model's reasoning through the template's
 * variables: Qwen3's switch it on or off (enable_thinking), others take a
 * level (reasoning_effort, as gpt-oss's). Read from the template's text. */
typedef struct ChatTemplateReasoning {
    bool thinking_switch; /* enable_thinking */
    bool effort;          /* reasoning_effort */
} ChatTemplateReasoning;
ChatTemplateReasoning chat_template_reasoning(const ChatTemplate *ct);

/* Renders a chat request object {messages, tools?, documents?,
 * add_generation_prompt?, continue_final_message?, chat_template_kwargs?}.
 * now: seconds since the epoch for strftime_now. Returns the malloc'ed,
 * NUL-terminated prompt (*len bytes), or NULL with err: ERROR_INVALID for a
 * malformed request and for a template that raises (its message) or runs
 * past its bounds. */
char *chat_template_render(const ChatTemplate *ct, const json_t *request, double now, size_t *len,
                           Error *err);

/* chat_template_render under server-wide defaults for chat_template_kwargs
 * (serve --default-chat-template-kwargs): default_kwargs NULL, or an
 * object chat_template_kwargs_check accepts. */
char *chat_template_render_with(const ChatTemplate *ct, const json_t *request, const json_t *default_kwargs,
                                double now, size_t *len, Error *err);

/* The template variables a request sets: defaults (NULL: none), then its
 * "enable_thinking" shorthand, then its own "chat_template_kwargs", key by
 * key. A new object, or NULL with err (ERROR_INVALID for a malformed
 * field). The one place the layers meet, for every route that renders a
 * chat. */
json_t *chat_template_kwargs_merge(const json_t *defaults, const json_t *request, Error *err);

/* kwargs is an object that sets none of the request's own fields
 * (messages, tools, ...); else -1 with an ERROR_INVALID naming what. */
int chat_template_kwargs_check(const json_t *kwargs, const char *what, Error *err);

/* The clock for strftime_now: SOURCE_DATE_EPOCH when set (reproducible
 * output, as build tools read it), else the current time. */
double chat_template_clock(void);

#endif
