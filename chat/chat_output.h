/*
 * chat_output.h - a chat answer's text split the way OpenAI's API returns
 * it: reasoning (<think>...</think>) into reasoning_content, tool calls
 * (<tool_call>...</tool_call>, or whatever tags the format the chat
 * template taught the model puts around a call: tool_call_format.h) into
 * tool_calls, the rest into content.
 *
 * Incremental, for streams: text is fed piece by piece as the engine
 * delivers it, and each feed releases only what can no longer change
 * (never half a tag: a piece ending in "<tool_" is held until the next one
 * says what it is). A tool call is released whole, once its closing tag has
 * arrived and its body has parsed; a call whose body does not parse, names
 * a function the request did not offer, or is still open when the output
 * ends, is released as content, verbatim, tags included - never lost,
 * never an error. Whatever the split of the text into pieces, the
 * concatenated releases are the same (reasoning, content, and the list of
 * calls), so a stream assembles to the non-streamed answer.
 *
 * Whitespace: reasoning and content are each trimmed at both ends (the
 * "\n" after <think>, the "\n\n" after </think>, the newlines around tool
 * calls); leading whitespace is dropped as it comes, trailing whitespace
 * is held until more text follows it and dropped at the end. Content is
 * the text outside calls, so "A\n<tool_call>...</tool_call>\nB" has the
 * content "A\n\nB". With neither reasoning nor tool calls parsed, the
 * parser is a pure pass-through: nothing is trimmed or held.
 *
 * Memory: a tool-call body longer than 1 MiB is not held: the call is
 * rejected and streams out as content up to its </tool_call> (a model
 * looping inside a call cannot make the parser buffer its whole output).
 * Which bytes end up where still does not depend on the split.
 */
#ifndef NANOVLLM_CHAT_OUTPUT_H
#define NANOVLLM_CHAT_OUTPUT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/byte_buf.h"
#include "chat/tool_calls/tool_call_format.h"
#include "text/tokenizer/tokenizer.h"

typedef struct ChatOutputOptions {
    bool parse_reasoning; /* split <think>...</think> off (--reasoning-parser qwen3) */
    /* The prompt opened <think> and did not close it (a template that
     * starts the thinking itself): the output begins as reasoning, and
     * </think> ends it. Otherwise reasoning starts only with a <think> at
     * the very start of the output (after whitespace). */
    bool starts_in_reasoning;
    const ToolCallFormat *tool_format; /* NULL: no tool-call parsing */
    /* The request's "tools" (OpenAI's list of {"type": "function",
     * "function": {"name", "parameters"}}), borrowed for the parser's
     * life: the names a call may use (NULL or JSON null: any name), and
     * (formats whose values are raw text, Qwen3 XML) the parameter types
     * that turn a value's text into JSON. */
    const json_t *tools;
} ChatOutputOptions;

typedef struct ChatToolCallOut {
    char *name;      /* malloc'ed */
    char *arguments; /* malloc'ed: the arguments object as compact JSON text */
} ChatToolCallOut;

/* What one feed (or the finish) releases; appended to, never overwritten.
 * Start from a zeroed one ({0}). reasoning.data and content.data, once
 * allocated, are kept NUL-terminated. */
typedef struct ChatOutputDelta {
    ByteBuf reasoning;
    ByteBuf content;
    ChatToolCallOut *calls; /* completed calls, in the order they appeared */
    int num_calls, calls_capacity;
    int num_rejected;         /* tool-call blocks released as content */
    char rejected_reason[200]; /* why the last one was (for the server's log line):
                                * "tool call N: ...", N counting every <tool_call>
                                * block of the answer from 1 */
} ChatOutputDelta;

typedef struct ChatOutputParser ChatOutputParser;

/* NULL when out of memory. */
ChatOutputParser *chat_output_parser_new(const ChatOutputOptions *o);
void chat_output_parser_free(ChatOutputParser *p);

/* The next piece of the answer (whole UTF-8 characters); what it releases
 * is appended to *out. 0, or -1 when out of memory (the parser is then
 * unusable). */
int chat_output_feed(ChatOutputParser *p, const char *text, size_t len, ChatOutputDelta *out);

/* The answer ended: everything held is released (an open <think> block as
 * reasoning, an open tool call as content). 0 or -1 (out of memory).
 * Feeds after it are ignored. */
int chat_output_finish(ChatOutputParser *p, ChatOutputDelta *out);

/* Empties d for the next feed (its buffers kept for reuse). */
void chat_output_delta_clear(ChatOutputDelta *d);
void chat_output_delta_free(ChatOutputDelta *d);

/* The prompt's last thinking tag (chat_output_prompt.c): 1 when it is an
 * open <think> (the answer starts as reasoning), 0 for </think>, -1 when it
 * has neither or the tokenizer lacks the tags. *close_id (if not NULL):
 * the id of </think>, or -1. */
int chat_prompt_last_think_tag(const Tokenizer *tok, const int32_t *ids, int n, int32_t *close_id);

#endif
