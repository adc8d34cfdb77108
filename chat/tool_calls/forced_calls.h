/*
 * forced_calls.h - tool_choice "required" or a named function as a grammar:
 * the answer is one or more tool calls written the way the chat template
 * taught the model to write them, each naming one of the offered
 * functions, with arguments its JSON Schema accepts.
 *
 * The spec (the constraint's text, so the cache keys on it) is JSON:
 *   {"format": the name of a tool-call format (tool_call_format.h),
 *    "tools": [{"name": "...", "parameters": {JSON Schema}}, ...],
 *    "max_calls": 1 | 0 (no limit)}
 * Calls are separated by "\n"; up to two newlines may come first (what a
 * reasoning model writes after </think>). This file owns that frame; what
 * one call looks like is its format's (call_grammar: hermes.c, qwen3_xml.c).
 */
#ifndef NANOVLLM_FORCED_CALLS_H
#define NANOVLLM_FORCED_CALLS_H

#include <jansson.h>

#include "structured/constraint.h"
#include "structured/grammar.h"

/* Defines the rules and sets the root; 0, or -1 with grammar_error(g). */
int tool_calls_to_grammar(Grammar *g, const json_t *spec);

/* What the server hands the constraint cache for forced calls: the spec as
 * JSON text into tool_calls_to_grammar, named "tool_calls" in messages and
 * logs. */
extern const ConstraintBuilder forced_tool_calls;

/* For a format's call_grammar: a tool's parameters schema (NULL or JSON
 * null: any object) compiled into fresh rules of g; the root of those
 * rules, or -1 with grammar_error(g) naming the tool. */
int tool_call_arguments_rule(Grammar *g, const json_t *schema, const char *tool);

#endif
