/*
 * api_chat_output.c - between the engine's text and a chat response: each
 * choice's text goes through its parser (chat/), which
 * splits reasoning and tool calls off the content, and the calls it
 * releases become OpenAI's tool_calls entries, each with a fresh id. Only
 * chats with reasoning parsing on or tools in play have a parser; other
 * text passes untouched.
 */
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "base/log.h"

int api_chat_output_begin(ApiRequest *r) {
    if (r->kind != API_CHAT) return 0;
    for (int i = 0; i < r->num_choices; i++) {
        ChatOutputOptions o = api_chat_output_options(r, i / r->params.sampling.n);
        if (!o.parse_reasoning && !o.tool_format) continue;
        Choice *c = &r->choices[i];
        if (!(c->parser = chat_output_parser_new(&o))) return -1;
        if (o.tool_format && !(c->tool_calls = json_array())) return -1;
    }
    return 0;
}

int api_chat_output_take(ApiRequest *r, Choice *c, const ApiEvent *ev, ChatOutputDelta *d) {
    if (ev->text_len > 0 && chat_output_feed(c->parser, ev->text, ev->text_len, d)) return -1;
    if (ev->finish != FINISH_NONE && chat_output_finish(c->parser, d)) return -1;
    if (d->num_rejected > 0)
        log_info("%s: %d tool call%s returned as content: %s", r->id, d->num_rejected, d->num_rejected > 1 ? "s" : "",
                 d->rejected_reason);
    /* parallel_tool_calls false: the first call only (as vLLM). */
    int keep = r->params.parallel_tool_calls ? d->num_calls : c->num_tool_calls > 0 ? 0 : d->num_calls > 0;
    for (int i = keep; i < d->num_calls; i++) {
        log_info("%s: parallel_tool_calls is false: dropped a further call of '%s'", r->id, d->calls[i].name);
        free(d->calls[i].name);
        free(d->calls[i].arguments);
    }
    if (keep < d->num_calls) d->num_calls = keep;
    return 0;
}

json_t *api_tool_calls_json(const ChatOutputDelta *d, int first, bool stream) {
    json_t *list = json_array();
    for (int i = 0; list && i < d->num_calls; i++) {
        char id[32];
        api_random_id(id, sizeof id, "call_");
        const ChatToolCallOut *call = &d->calls[i];
        if (!stream) {
            json_array_append_new(list, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function",
                                                  "name", call->name, "arguments", call->arguments));
            continue;
        }
        /* OpenAI's stream shape: the call's header, then its arguments. */
        json_array_append_new(list, json_pack("{s:i, s:s, s:s, s:{s:s, s:s}}", "index", first + i, "id", id, "type",
                                              "function", "function", "name", call->name, "arguments", ""));
        json_array_append_new(list, json_pack("{s:i, s:{s:s}}", "index", first + i, "function", "arguments",
                                              call->arguments));
    }
    return list;
}

void api_chat_output_end(Choice *c) {
    chat_output_parser_free(c->parser);
    c->parser = NULL;
    byte_buf_free(&c->reasoning);
    json_decref(c->tool_calls);
    c->tool_calls = NULL;
}
