/*
 * chat_template.h - OpenAI-style chat requests to prompt text.
 *
 * There is no mature Jinja engine in C, so the one template we serve,
 * Qwen3's, is implemented in C and renders byte for byte what Hugging
 * Face's apply_chat_template renders from Qwen3's tokenizer_config.json
 * (tools, tool calls, reasoning stripped from earlier turns,
 * enable_thinking). A model folder whose template is not that one gets
 * plain ChatML, and chat_template_detect() says so for the start-up log;
 * nothing guesses silently.
 */
#ifndef NANOVLLM_CHAT_TEMPLATE_H
#define NANOVLLM_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>

#include "error.h"

typedef enum {
    CHAT_TEMPLATE_QWEN3,  /* the Qwen3 template, recognised by its exact text */
    CHAT_TEMPLATE_CHATML, /* fallback: <|im_start|>role\ncontent<|im_end|>\n */
} ChatTemplateKind;

/* Picks the renderer for a model's template text (NULL when the folder has
 * none). On a fallback, writes a one-line warning for the caller to log
 * into warning (else warning[0] = '\0'). */
ChatTemplateKind chat_template_detect(const char *template_text, char *warning,
                                      size_t warning_size);

/* Renders a request object:
 *   messages               [{role, content, ...}], roles system, user,
 *                          assistant, tool; content a string or a list of
 *                          {"type": "text", "text": ...} parts (joined with
 *                          "\n", as vLLM does); assistant messages may have
 *                          tool_calls (then content may be null) and
 *                          reasoning_content
 *   tools                  optional list of tool definitions
 *   add_generation_prompt  optional, default true
 *   enable_thinking        optional boolean, also read from
 *                          chat_template_kwargs.enable_thinking
 * Returns the malloc'ed, NUL-terminated prompt (*len bytes), or NULL with
 * err naming what is malformed ("messages[2].role: ..."). */
char *chat_template_render(ChatTemplateKind kind, const json_t *request, size_t *len, Error *err);

#endif
