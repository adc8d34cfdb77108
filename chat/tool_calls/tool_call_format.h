/*
 * tool_call_format.h - one tool-call format (how a chat template teaches a
 * model to write a call) as everything the rest of the program asks of it:
 * whether a template teaches it, the grammar that forces one call
 * (tool_choice "required" or a named function, forced_calls.h), and the
 * reader that turns one call's text back into a name and arguments
 * (chat_output.h cuts the calls out of an answer by the format's tags).
 *
 * Each format is one file in chat/tool_calls/ exporting one
 * `const ToolCallFormat`; tool_call_formats.c lists them. To add a format:
 *   1. write chat/tool_calls/NAME.c defining
 *      `const ToolCallFormat tool_call_format_NAME = {...}` (hermes.c is
 *      the short example: a JSON body; qwen3_xml.c one whose values are
 *      typed by the request's tool schemas);
 *   2. declare it at the end of this header;
 *   3. add it to the table in tool_call_formats.c, before any format whose
 *      test its templates would also pass.
 * --tool-call-parser then takes its name and aliases, detection finds it in
 * a template, and forced calls and answers use it. The lists of names
 * written out for people stay as they are worded until edited by hand:
 * cli/cli_serve.c's help and --tool-call-parser error, the 400 in
 * server/openai/api_tools.c for a format that cannot be forced, README.md.
 */
#ifndef NANOVLLM_TOOL_CALL_FORMAT_H
#define NANOVLLM_TOOL_CALL_FORMAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "structured/grammar.h"

/* Room for a rejection's reason (the delta's rejected_reason is smaller and
 * takes a prefix of it). */
#define TOOL_CALL_WHY_SIZE 200

typedef struct ToolCallFormat {
    /* The name --tool-call-parser takes, the start-up log prints and the
     * forced-calls spec carries ("hermes"). */
    const char *name;
    /* Other names --tool-call-parser takes for it (vLLM's); NULL-terminated,
     * or NULL for none. */
    const char *const *aliases;
    /* The tags around one call in an answer: what the output parser holds
     * back, and what it releases as content when the call is rejected. */
    const char *call_open, *call_close;
    /* Whether a chat template's text (one that renders tools) teaches this
     * format. */
    bool (*taught_by)(const char *template_text);
    /* The grammar of one call of function name, tags included, with
     * arguments parameters (a JSON Schema object, or NULL: any object)
     * accepts; G_ERROR with grammar_error(g) set on failure. NULL: calls in
     * this format cannot be forced. */
    GExpr (*call_grammar)(Grammar *g, const char *name, const json_t *parameters);
    /* Reads one call's body, the text between the tags: 1 with *name and
     * *arguments (malloc'ed: the function name, and the arguments object as
     * compact JSON text, tool_call_json.h), 0 when the body is rejected (why,
     * NUL-terminated, says what was wrong, without the "tool call N: "
     * prefix the caller adds), -1 when out of memory. tools: the request's
     * list (NULL: none given), for formats whose values its schemas type.
     * The name is not checked against tools: the caller does that, once,
     * for every format. */
    int (*read_call)(const char *body, size_t len, const json_t *tools, char **name, char **arguments,
                     char why[TOOL_CALL_WHY_SIZE]);
} ToolCallFormat;

/* The format called name (its name or an alias), or NULL. */
const ToolCallFormat *tool_call_format_named(const char *name);

/* The first format in the table that the template's text teaches, or NULL
 * (none known; whether the template renders tools at all is the caller's
 * question). */
const ToolCallFormat *tool_call_format_taught_by(const char *template_text);

/* The table's i-th format, or NULL past its end:
 *   for (size_t i = 0; (f = tool_call_format_at(i)); i++) */
const ToolCallFormat *tool_call_format_at(size_t i);

/* The formats (one file each). */
extern const ToolCallFormat tool_call_format_hermes;
extern const ToolCallFormat tool_call_format_qwen3_xml;

#endif
