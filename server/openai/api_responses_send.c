/*
 * api_responses_send.c - what a Responses client receives: the output
 * parsers' releases (api_chat_output.c) as output items - reasoning,
 * message, function_call - and, when streaming, the typed events OpenAI
 * sends while they are written, each numbered (sequence_number):
 *
 *   response.created, response.in_progress
 *   per item: response.output_item.added, for text items
 *     response.content_part.added, response.{output,reasoning}_text.delta...,
 *     response.{output,reasoning}_text.done, response.content_part.done;
 *     for calls response.function_call_arguments.delta and .done;
 *     response.output_item.done
 *   response.completed | response.incomplete (max_output_tokens) | response.failed
 *
 * The items are built the same way with or without a stream, so a stream
 * assembles to the body a non-streaming request gets. At the end the
 * response goes to the store with its conversation (api_responses.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "base/log.h"

static bool streaming(const ApiRequest *r) { return r->params.stream && r->ex && r->status == 200; }

/* One event: "event: TYPE" and its JSON, numbered. */
static void emit(ApiRequest *r, const char *type, json_t *event) {
    ResponsesState *st = r->responses;
    if (!event || !streaming(r) || json_object_set_new(event, "type", json_string(type)) ||
        json_object_set_new(event, "sequence_number", json_integer(st->sequence++))) {
        json_decref(event);
        return;
    }
    size_t len;
    char *data = sse_event(event, &len);
    json_decref(event);
    char head[96];
    int n = snprintf(head, sizeof head, "event: %s\n", type);
    if (data) {
        http_stream_write(r->ex, head, (size_t)n);
        http_stream_write(r->ex, data, len);
    }
    free(data);
}

static json_t *usage_json(const ApiRequest *r) {
    return json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens", r->prompt_tokens,
                     "input_tokens_details", "cached_tokens", r->cached_tokens, "output_tokens",
                     r->completion_tokens, "output_tokens_details", "reasoning_tokens",
                     r->responses->reasoning_tokens, "total_tokens", r->prompt_tokens + r->completion_tokens);
}

/* Drops the members given as null (not given), at any depth (jansson
 * bounds a parsed document's depth). */
static void drop_nulls_deep(json_t *v) {
    const char *key;
    json_t *member, *tmp;
    size_t i;
    if (json_is_object(v)) {
        json_object_foreach_safe(v, tmp, key, member) {
            if (json_is_null(member)) json_object_del(v, key);
            else drop_nulls_deep(member);
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, member) drop_nulls_deep(member);
    }
}

/* The request's own value of a field as the response echoes it (nulls
 * dropped: they were not given), or dflt; a new reference either way. */
static json_t *echo(const ApiRequest *r, const char *key, json_t *dflt) {
    json_t *v = json_object_get(r->responses->request, key);
    json_t *copy = v && !json_is_null(v) ? json_deep_copy(v) : NULL;
    drop_nulls_deep(copy);
    if (copy) {
        json_decref(dflt);
        return copy;
    }
    return dflt ? dflt : json_null();
}

/* The response object; status "in_progress" while streaming. */
static json_t *response_object(ApiRequest *r, const char *status) {
    ResponsesState *st = r->responses;
    const SamplingParams *sp = &r->params.sampling;
    json_t *o = json_object();
    json_t *reasoning = echo(r, "reasoning", NULL);
    if (!json_is_object(reasoning)) {
        json_decref(reasoning);
        reasoning = json_pack("{s:n, s:n}", "effort", "summary");
    }
    json_t *text = echo(r, "text", json_object());
    if (json_is_object(text) && !json_object_get(text, "format"))
        json_object_set_new(text, "format", json_pack("{s:s}", "type", "text"));
    bool finished = strcmp(status, "in_progress") != 0;
    if (!o || json_object_set_new(o, "id", json_string(r->id)) ||
        json_object_set_new(o, "object", json_string("response")) ||
        json_object_set_new(o, "created_at", json_integer(r->created)) ||
        json_object_set_new(o, "status", json_string(status)) ||
        json_object_set_new(o, "background", json_false()) ||
        json_object_set_new(o, "error", json_null()) ||
        json_object_set_new(o, "incomplete_details", json_null()) ||
        json_object_set_new(o, "instructions", echo(r, "instructions", NULL)) ||
        json_object_set_new(o, "max_output_tokens", echo(r, "max_output_tokens", NULL)) ||
        json_object_set_new(o, "max_tool_calls", json_null()) ||
        json_object_set_new(o, "metadata", echo(r, "metadata", json_object())) ||
        json_object_set_new(o, "model", json_string(r->srv->model_name)) ||
        json_object_set_new(o, "output", finished ? json_incref(st->output) : json_array()) ||
        json_object_set_new(o, "parallel_tool_calls", json_boolean(r->params.parallel_tool_calls)) ||
        json_object_set_new(o, "previous_response_id", echo(r, "previous_response_id", NULL)) ||
        json_object_set_new(o, "reasoning", reasoning) ||
        json_object_set_new(o, "service_tier", json_string("default")) ||
        json_object_set_new(o, "store", json_boolean(st->store && r->srv->opts.responses_store.max_entries > 0)) ||
        json_object_set_new(o, "temperature", json_real(sp->temperature)) ||
        json_object_set_new(o, "text", text) ||
        json_object_set_new(o, "tool_choice", echo(r, "tool_choice", json_string("auto"))) ||
        json_object_set_new(o, "tools", echo(r, "tools", json_array())) ||
        json_object_set_new(o, "top_p", json_real(sp->top_p)) ||
        json_object_set_new(o, "truncation", json_string("disabled")) ||
        json_object_set_new(o, "usage", finished ? usage_json(r) : json_null()) ||
        json_object_set_new(o, "user", echo(r, "user", NULL))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

void api_responses_stream_open(ApiRequest *r) {
    emit(r, "response.created", json_pack("{s:o}", "response", response_object(r, "in_progress")));
    emit(r, "response.in_progress", json_pack("{s:o}", "response", response_object(r, "in_progress")));
}

/* ---- items --------------------------------------------------------------------------------------- */

static const char *text_kind(ResponsesItem kind) { return kind == ITEM_REASONING ? "reasoning_text" : "output_text"; }

/* A text part as it stands: {type, text} (output_text with annotations). */
static json_t *text_part(ResponsesItem kind, const char *text, size_t len) {
    if (kind == ITEM_REASONING) return json_pack("{s:s, s:s%}", "type", "reasoning_text", "text", text ? text : "", len);
    return json_pack("{s:s, s:s%, s:[], s:[]}", "type", "output_text", "text", text ? text : "", len, "annotations",
                     "logprobs");
}

static json_t *text_item(ApiRequest *r, const char *status, json_t *part) {
    ResponsesState *st = r->responses;
    json_t *content = part ? json_pack("[o]", part) : json_array();
    if (st->open == ITEM_REASONING)
        return json_pack("{s:s, s:s, s:[], s:o, s:s}", "id", st->open_id, "type", "reasoning", "summary",
                         "content", content, "status", status);
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", st->open_id, "type", "message", "status", status, "role",
                     "assistant", "content", content);
}

static int output_index(const ApiRequest *r) { return (int)json_array_size(r->responses->output); }

/* status: the item's, "completed" unless max_output_tokens cut it short. */
static void close_item_as(ApiRequest *r, const char *status) {
    ResponsesState *st = r->responses;
    if (st->open == ITEM_NONE) return;
    const char *text = st->open_text.data ? st->open_text.data : "";
    size_t len = st->open_text.len;
    int index = output_index(r);
    char done[48];
    snprintf(done, sizeof done, "response.%s.done", text_kind(st->open));
    json_t *ev = json_pack("{s:s, s:i, s:i, s:s%}", "item_id", st->open_id, "output_index", index, "content_index", 0,
                           "text", text, len);
    if (ev && st->open == ITEM_MESSAGE) json_object_set_new(ev, "logprobs", json_array());
    emit(r, done, ev);
    emit(r, "response.content_part.done", json_pack("{s:s, s:i, s:i, s:o}", "item_id", st->open_id, "output_index",
                                                    index, "content_index", 0, "part", text_part(st->open, text, len)));
    json_t *item = text_item(r, status, text_part(st->open, text, len));
    emit(r, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", index, "item", item));
    if (!item || json_array_append_new(st->output, item)) log_info("%s: out of memory: an output item is lost", r->id);
    st->open = ITEM_NONE;
    st->open_text.len = 0;
}

static void close_item(ApiRequest *r) { close_item_as(r, "completed"); }

static void append_text(ApiRequest *r, ResponsesItem kind, const char *text, size_t len) {
    ResponsesState *st = r->responses;
    if (len == 0) return;
    if (st->open != kind) {
        close_item(r);
        st->open = kind;
        api_random_id(st->open_id, sizeof st->open_id, kind == ITEM_REASONING ? "rs_" : "msg_");
        int index = output_index(r);
        emit(r, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", index, "item",
                                                        text_item(r, "in_progress", NULL)));
        emit(r, "response.content_part.added", json_pack("{s:s, s:i, s:i, s:o}", "item_id", st->open_id,
                                                         "output_index", index, "content_index", 0, "part",
                                                         text_part(kind, "", 0)));
    }
    if (byte_buf_append(&st->open_text, text, len)) log_info("%s: out of memory: output text is lost", r->id);
    char delta[48];
    snprintf(delta, sizeof delta, "response.%s.delta", text_kind(kind));
    json_t *ev = json_pack("{s:s, s:i, s:i, s:s%}", "item_id", st->open_id, "output_index", output_index(r),
                           "content_index", 0, "delta", text, len);
    if (ev && kind == ITEM_MESSAGE) json_object_set_new(ev, "logprobs", json_array());
    emit(r, delta, ev);
}

static void add_function_call(ApiRequest *r, const ChatToolCallOut *call) {
    ResponsesState *st = r->responses;
    close_item(r);
    char id[48], call_id[32];
    api_random_id(id, sizeof id, "fc_");
    api_random_id(call_id, sizeof call_id, "call_");
    int index = output_index(r);
    json_t *item = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "id", id, "type", "function_call", "status",
                             "completed", "call_id", call_id, "name", call->name, "arguments", call->arguments);
    emit(r, "response.output_item.added",
         json_pack("{s:i, s:{s:s, s:s, s:s, s:s, s:s, s:s}}", "output_index", index, "item", "id", id, "type",
                   "function_call", "status", "in_progress", "call_id", call_id, "name", call->name, "arguments", ""));
    emit(r, "response.function_call_arguments.delta",
         json_pack("{s:s, s:i, s:s}", "item_id", id, "output_index", index, "delta", call->arguments));
    emit(r, "response.function_call_arguments.done", json_pack("{s:s, s:i, s:s, s:s}", "item_id", id, "output_index",
                                                               index, "name", call->name, "arguments", call->arguments));
    emit(r, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", index, "item", item));
    if (!item || json_array_append_new(st->output, item)) log_info("%s: out of memory: a function call is lost", r->id);
}

void api_responses_event(ApiRequest *r, Choice *c, const ApiEvent *ev) {
    ResponsesState *st = r->responses;
    if (ev->finish == FINISH_ERROR) return; /* the end says so */
    if (!st->began) {
        st->began = true;
        ChatOutputOptions o = api_chat_output_options(r, 0);
        st->in_reasoning = o.parse_reasoning && o.starts_in_reasoning;
    }
    if (!c->parser) {
        append_text(r, ITEM_MESSAGE, ev->text, ev->text_len);
        return;
    }
    ChatOutputDelta d = {0};
    if (api_chat_output_take(r, c, ev, &d)) {
        log_info("%s: out of memory parsing the answer; part of it is lost", r->id);
        chat_output_delta_free(&d);
        return;
    }
    /* A token counts as reasoning when its text went there (or, held back
     * by the parser, while the answer is still reasoning). */
    if (d.reasoning.len > 0 || d.content.len > 0 || d.num_calls > 0)
        st->in_reasoning = d.reasoning.len > 0 && d.content.len == 0 && d.num_calls == 0;
    if (ev->has_token && st->in_reasoning) st->reasoning_tokens++;
    append_text(r, ITEM_REASONING, d.reasoning.data, d.reasoning.len);
    append_text(r, ITEM_MESSAGE, d.content.data, d.content.len);
    for (int i = 0; i < d.num_calls; i++) add_function_call(r, &d.calls[i]);
    c->num_tool_calls += d.num_calls;
    chat_output_delta_free(&d);
}

/* ---- the end ------------------------------------------------------------------------------------- */

/* The conversation through this response, for previous_response_id: the
 * input's messages and the answer as one assistant message. */
static json_t *conversation_after(ApiRequest *r) {
    ResponsesState *st = r->responses;
    json_t *conv = json_copy(st->conversation), *msg = json_pack("{s:s, s:n}", "role", "assistant", "content");
    json_t *calls = json_array();
    ByteBuf reasoning = {0}, content = {0};
    size_t i;
    json_t *item;
    json_array_foreach(st->output, i, item) {
        const char *type = json_string_value(json_object_get(item, "type"));
        json_t *parts = json_object_get(item, "content");
        const char *text = json_string_value(json_object_get(json_array_get(parts, 0), "text"));
        if (strcmp(type, "reasoning") == 0 && text) byte_buf_append(&reasoning, text, strlen(text));
        else if (strcmp(type, "message") == 0 && text) byte_buf_append(&content, text, strlen(text));
        else if (strcmp(type, "function_call") == 0 && calls)
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", json_object_get(item, "call_id"),
                                                   "type", "function", "function", "name", json_object_get(item, "name"),
                                                   "arguments", json_object_get(item, "arguments")));
    }
    bool ok = conv && msg && calls;
    if (ok && content.len) ok = !json_object_set_new(msg, "content", json_stringn(content.data, content.len));
    if (ok && reasoning.len) ok = !json_object_set_new(msg, "reasoning_content", json_stringn(reasoning.data, reasoning.len));
    if (ok && json_array_size(calls)) ok = !json_object_set(msg, "tool_calls", calls);
    if (ok) ok = !json_array_append(conv, msg);
    byte_buf_free(&reasoning);
    byte_buf_free(&content);
    json_decref(calls);
    json_decref(msg);
    if (!ok) json_decref(conv);
    return ok ? conv : NULL;
}

void api_responses_complete(ApiRequest *r) {
    ResponsesState *st = r->responses;
    r->done = true;
    histogram_observe(&r->srv->metrics.e2e_latency, now_seconds() - r->t_arrival);
    const Choice *c = &r->choices[0];
    close_item_as(r, c->finish == FINISH_LENGTH ? "incomplete" : "completed");
    const char *status = r->error_message ? "failed" : c->finish == FINISH_STOP ? "completed" : "incomplete";
    json_t *resp = response_object(r, status);
    if (resp && c->finish == FINISH_LENGTH)
        json_object_set_new(resp, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    if (resp && r->error_message)
        json_object_set_new(resp, "error", json_pack("{s:s, s:s}", "code", "server_error", "message", r->error_message));
    if (resp && !r->error_message && st->store && r->srv->opts.responses_store.max_entries > 0) {
        json_t *conv = conversation_after(r);
        if (!conv || response_store_put(r->srv->responses, resp, conv, now_seconds()) < 0)
            log_info("%s: out of memory: the response was not stored", r->id);
        json_decref(conv);
    }
    if (r->ex && streaming(r)) {
        const char *type = r->error_message ? "response.failed" : c->finish == FINISH_STOP ? "response.completed"
                                                                                           : "response.incomplete";
        emit(r, type, json_pack("{s:O}", "response", resp));
        http_stream_end(r->ex);
    } else if (r->ex && r->error_message) {
        ApiError e;
        api_error_from(&e, r->error_kind, NULL, r->error_message);
        api_respond_error(r, &e);
    } else if (r->ex && resp) {
        api_respond_json(r, 200, json_incref(resp));
    } else if (r->ex) {
        ApiError e;
        api_error(&e, 500, NULL, "out of memory building the response");
        api_respond_error(r, &e);
    }
    json_decref(resp);
    api_log_request(r, NULL);
}

void api_responses_stream_fail(ApiRequest *r, const ApiError *e) {
    emit(r, "error", json_pack("{s:s, s:s, s:n}", "code", "server_error", "message", e->message, "param"));
    json_t *resp = response_object(r, "failed");
    if (resp) json_object_set_new(resp, "error", json_pack("{s:s, s:s}", "code", "server_error", "message", e->message));
    emit(r, "response.failed", resp ? json_pack("{s:o}", "response", resp) : NULL);
    http_stream_end(r->ex);
    r->done = true;
    api_log_request(r, e->message);
}
