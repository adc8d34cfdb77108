/*
 * forced_calls.h - tool_choice "required" or a named function as a grammar:
 * the answer is one or more tool calls written the way the chat template
 * taught the model to write them, each naming one of the offered
 * functions, with arguments its JSON Schema accepts.
 *
 * The spec (the constraint's text, so the cache keys on it) is JSON:
 *   {"format": "hermes" | "qwen3_xml",
 *    "tools": [{"name": "...", "parameters": {JSON Schema}}, ...],
 *    "max_calls": 1 | 0 (no limit)}
 * hermes:    <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
 * qwen3_xml: <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n
 *            ...</function>\n</tool_call>
 * Calls are separated by "\n"; up to two newlines may come first (what a
 * reasoning model writes after </think>). In the XML form the parameters
 * come in the schema's order, each required one present, and a value is
 * JSON by the parameter's schema except for strings, which are written
 * raw: any text without '<' (the parser on the other side reads them back
 * by type; enum and pattern on a string parameter are not enforced there).
 */
#ifndef NANOVLLM_TOOL_CALLS_H
#define NANOVLLM_TOOL_CALLS_H

#include <jansson.h>

#include "structured/grammar.h"

/* Defines the rules and sets the root; 0, or -1 with grammar_error(g). */
int tool_calls_to_grammar(Grammar *g, const json_t *spec);

#endif
