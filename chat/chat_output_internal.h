/*
 * chat_output_internal.h - what the chat-output state machine
 * (chat_output.c) asks of the files that read one tool-call body: the
 * Hermes JSON body (hermes.c), the Qwen3-Coder XML body
 * (qwen3_xml.c), and the helpers both share (tool_call_json.c: the
 * request's tool list and compact JSON text of the arguments).
 *
 * A body parser returns 1 with *name and *arguments (malloc'ed: the
 * function name and the arguments object as compact JSON text), 0 when the
 * body is rejected (why, NUL-terminated, says what was wrong, without the
 * "tool call N: " prefix the caller adds), or -1 when out of memory. It
 * does not check the name against the request's tools: the caller does,
 * once, for every format.
 */
#ifndef NANOVLLM_CHAT_OUTPUT_INTERNAL_H
#define NANOVLLM_CHAT_OUTPUT_INTERNAL_H

#include <jansson.h>
#include <stddef.h>

#include "base/byte_buf.h"

/* Room for a rejection's reason (the delta's rejected_reason is smaller and
 * takes a prefix of it). */
#define TOOL_CALL_WHY_SIZE 200

int hermes_tool_call_parse(const char *body, size_t len, char **name, char **arguments,
                           char why[TOOL_CALL_WHY_SIZE]);

/* tools: the request's list (NULL: no types known, every value a string). */
int xml_tool_call_parse(const char *body, size_t len, const json_t *tools, char **name,
                        char **arguments, char why[TOOL_CALL_WHY_SIZE]);

/* The "function" object of the request's tool called name, or NULL. Tools
 * are OpenAI's {"type": "function", "function": {"name", ...}}; a flat
 * {"type": "function", "name", ...} (the Responses API's shape) is read
 * too. */
const json_t *tool_call_find_function(const json_t *tools, const char *name);

/* v as compact JSON text (no spaces, object keys in their order, non-ASCII
 * kept as UTF-8, reals in their shortest form that reads back to the same
 * double: 0.1, not jansson's 0.10000000000000001), appended to b. 0 or -1
 * (out of memory). */
int tool_call_dump_json(const json_t *v, ByteBuf *b);

/* The same into a malloc'ed NUL-terminated string, or NULL (out of memory). */
char *tool_call_json_text(const json_t *v);

/* Formats into why as snprintf does; a message too long is cut at a UTF-8
 * character boundary, so that a log line or JSON string holding it stays
 * valid. */
void tool_call_why(char *why, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
