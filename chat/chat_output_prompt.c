/*
 * chat_output_prompt.c - what a rendered chat prompt says about how its
 * answer begins: a template that opens <think> itself (and does not close
 * it) makes the answer start inside reasoning. Read from the prompt's
 * token ids, where the tags are single tokens (Qwen3: 151667, 151668).
 */
#include "chat_output.h"

int chat_prompt_last_think_tag(const Tokenizer *tok, const int32_t *ids, int n, int32_t *close_id) {
    int32_t open = tokenizer_token_to_id(tok, "<think>", 7), close = tokenizer_token_to_id(tok, "</think>", 8);
    if (close_id) *close_id = close;
    if (open < 0 || close < 0) return -1;
    for (int i = n - 1; i >= 0; i--) {
        if (ids[i] == close) return 0;
        if (ids[i] == open) return 1;
    }
    return -1;
}
