/*
 * tool_call_json.h - what the tool-call formats' readers share (defined in
 * tool_call_json.c): finding a function in the request's "tools", writing
 * arguments as compact JSON, and formatting a rejection's reason (which the
 * chat-output parser also uses for the "tool call N: " it puts before one).
 */
#ifndef NANOVLLM_TOOL_CALL_JSON_H
#define NANOVLLM_TOOL_CALL_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "base/byte_buf.h"

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
