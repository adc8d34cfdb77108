/*
 * api_send.c - what the client of a request receives: OpenAI error
 * bodies, the request's log line, and for generation requests either SSE
 * chunks as the events come (a role chunk opening each chat choice, text
 * and logprobs, a finish chunk, the usage chunk, [DONE]) or one JSON body
 * once the last choice has finished. The JSON shapes themselves are built
 * by openai_json.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "base/log.h"

/* ---- answers of every route ------------------------------------------------------------------ */

void api_log_request(ApiRequest *r, const char *note) {
    if (r->logged) return;
    r->logged = true;
    double now = now_seconds();
    char ttft[32] = "-";
    if (r->t_first > 0) snprintf(ttft, sizeof ttft, "%.3fs", r->t_first - r->t_arrival);
    log_info("%s %s %u prompt_tokens=%d completion_tokens=%d ttft=%s total=%.3fs%s%s", r->method,
             r->path, r->status, r->prompt_tokens, r->completion_tokens, ttft, now - r->t_arrival,
             note ? ": " : "", note ? note : "");
}

void api_respond_json(ApiRequest *r, unsigned status, json_t *body) {
    char *text = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(body);
    if (!text) {
        static const char oom[] = "{\"error\": {\"message\": \"out of memory\", \"type\": "
                                  "\"server_error\", \"param\": null, \"code\": null}}";
        http_respond(r->ex, 500, "application/json", oom, sizeof oom - 1, NULL);
        r->status = 500;
        return;
    }
    r->status = status;
    http_respond(r->ex, status, "application/json", text, strlen(text), NULL);
    free(text);
}

void api_respond_error(ApiRequest *r, const ApiError *e) {
    r->status = e->status;
    r->done = true;
    r->srv->metrics.http_errors++;
    if (r->ex) {
        size_t len;
        char *body = openai_error_body(e, &len);
        const char *retry[] = {"Retry-After: 1", NULL};
        char allow[32];
        snprintf(allow, sizeof allow, "Allow: %s", api_route_method(r->route));
        const char *allowed[] = {allow, NULL};
        if (body) http_respond(r->ex, e->status, "application/json", body, len,
                               e->status == 503 ? retry : e->status == 405 ? allowed : NULL);
        free(body);
    }
    api_log_request(r, e->message);
}

/* ---- streams ------------------------------------------------------------------------------------ */

static void stream_json(ApiRequest *r, json_t *chunk) {
    size_t len;
    char *data = chunk ? sse_event(chunk, &len) : NULL; /* floats at float precision */
    if (data) http_stream_write(r->ex, data, len);
    free(data);
    json_decref(chunk);
}

static Usage usage_of(const ApiRequest *r) {
    return (Usage){r->prompt_tokens, r->completion_tokens, r->cached_tokens};
}

/* A chunk of one choice; with continuous_usage_stats, the usage so far too. */
static json_t *chunk_for(ApiRequest *r, const ChoiceOut *c, const Usage *u, int count) {
    Usage so_far = usage_of(r);
    if (!u && r->params.continuous_usage) u = &so_far;
    return openai_response(r->kind, true, r->id, r->created, r->srv->model_name, c, count, u);
}

/* An error as an SSE event: "data: {"error": ...}". */
static void stream_error(ApiRequest *r, const ApiError *e) {
    size_t len;
    char *body = openai_error_body(e, &len);
    if (body) {
        http_stream_write(r->ex, "data: ", 6);
        http_stream_write(r->ex, body, len);
        http_stream_write(r->ex, "\n\n", 2);
    }
    free(body);
}

/* A parsed chat stream: reasoning and content deltas (with the event's
 * logprobs), then each released tool call as OpenAI streams one: a chunk
 * with its header, a chunk with its arguments. */
static void stream_parsed(ApiRequest *r, int index, Choice *c, const ApiEvent *ev, json_t *lp) {
    ChatOutputDelta d = {0};
    if (api_chat_output_take(r, c, ev, &d)) {
        log_info("%s: out of memory parsing the answer; the rest is lost", r->id);
        json_decref(lp);
        chat_output_delta_free(&d);
        return;
    }
    if (d.reasoning.len > 0 || d.content.len > 0 || lp) {
        ChoiceOut out = {.index = index, .text = d.content.data, .text_len = d.content.len, .logprobs = lp,
                         .parsed = true, .reasoning = d.reasoning.data, .reasoning_len = d.reasoning.len};
        stream_json(r, chunk_for(r, &out, NULL, 1));
    } else {
        json_decref(lp);
    }
    json_t *calls = d.num_calls > 0 ? api_tool_calls_json(&d, c->num_tool_calls, true) : NULL;
    size_t i;
    json_t *call;
    json_array_foreach(calls, i, call) {
        ChoiceOut out = {.index = index, .parsed = true, .tool_calls = json_pack("[O]", call)};
        stream_json(r, chunk_for(r, &out, NULL, 1));
    }
    json_decref(calls);
    c->num_tool_calls += d.num_calls;
    chat_output_delta_free(&d);
}

/* The chunks one event of a streaming request turns into. */
static void stream_event(ApiRequest *r, int index, Choice *c, const ApiEvent *ev, json_t *lp) {
    if (r->kind == API_CHAT && !c->opened) {
        ChoiceOut open = {.index = index, .text = "", .role = true, .finish = FINISH_NONE};
        stream_json(r, chunk_for(r, &open, NULL, 1));
    }
    const char *prefix = NULL;
    if (r->kind == API_COMPLETION && !c->opened && r->params.echo)
        prefix = r->prompt_texts[index / r->params.sampling.n];
    c->opened = true;
    if (ev->finish == FINISH_ERROR) {
        ApiError e;
        api_error_from(&e, ev->error_kind, NULL, ev->error ? ev->error : "the request failed");
        stream_error(r, &e);
        json_decref(lp);
        return;
    }
    bool finishing = ev->finish != FINISH_NONE;
    if (c->parser) {
        stream_parsed(r, index, c, ev, lp);
    } else {
        ByteBuf text = {0};
        if (prefix) byte_buf_append(&text, prefix, strlen(prefix));
        byte_buf_append(&text, ev->text, ev->text_len);
        if (text.len > 0 || lp || (finishing && r->kind == API_COMPLETION)) {
            ChoiceOut out = {.index = index, .text = text.data, .text_len = text.len, .logprobs = lp,
                             .finish = r->kind == API_COMPLETION ? ev->finish : FINISH_NONE,
                             .stop_str = c->stop_string};
            stream_json(r, chunk_for(r, &out, NULL, 1));
        } else {
            json_decref(lp);
        }
        byte_buf_free(&text);
    }
    if (finishing && r->kind == API_CHAT) {
        ChoiceOut fin = {.index = index, .finish = ev->finish, .stop_str = c->stop_string, .parsed = c->parser != NULL,
                         .finish_tool_calls = c->num_tool_calls > 0};
        stream_json(r, chunk_for(r, &fin, NULL, 1));
    }
}

/* ---- whole bodies ------------------------------------------------------------------------------- */

static void respond_whole(ApiRequest *r) {
    if (r->error_message) {
        ApiError e;
        api_error_from(&e, r->error_kind, NULL, r->error_message);
        api_respond_error(r, &e);
        return;
    }
    ChoiceOut *outs = calloc((size_t)r->num_choices, sizeof *outs);
    ByteBuf *texts = calloc((size_t)r->num_choices, sizeof *texts);
    Usage u = usage_of(r);
    json_t *body = NULL;
    if (outs && texts) {
        for (int i = 0; i < r->num_choices; i++) {
            Choice *c = &r->choices[i];
            const char *prefix = r->params.echo ? r->prompt_texts[i / r->params.sampling.n] : NULL;
            if (prefix) byte_buf_append(&texts[i], prefix, strlen(prefix));
            byte_buf_append(&texts[i], c->text.data, c->text.len);
            outs[i] = (ChoiceOut){.index = i, .text = texts[i].data, .text_len = texts[i].len,
                                  .finish = c->finish, .stop_str = c->stop_string,
                                  .logprobs = c->logprobs, .parsed = c->parser != NULL,
                                  .reasoning = c->reasoning.data, .reasoning_len = c->reasoning.len,
                                  .tool_calls = c->tool_calls, .finish_tool_calls = c->num_tool_calls > 0};
            c->logprobs = NULL; /* stolen by the response */
            c->tool_calls = NULL;
        }
        body = openai_response(r->kind, false, r->id, r->created, r->srv->model_name, outs,
                               r->num_choices, &u);
    }
    char *text = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    if (text) {
        r->status = 200;
        http_respond(r->ex, 200, "application/json", text, strlen(text), NULL);
    } else {
        ApiError e;
        api_error(&e, 500, NULL, "out of memory building the response");
        api_respond_error(r, &e);
    }
    free(text);
    json_decref(body);
    for (int i = 0; texts && i < r->num_choices; i++) byte_buf_free(&texts[i]);
    free(texts);
    free(outs);
}

static void complete(ApiRequest *r) {
    r->done = true;
    ApiServer *s = r->srv;
    histogram_observe(&s->metrics.e2e_latency, now_seconds() - r->t_arrival);
    if (r->ex) {
        if (r->params.stream) {
            if (r->params.include_usage) {
                Usage u = usage_of(r);
                stream_json(r, chunk_for(r, NULL, &u, 0));
            }
            http_stream_write(r->ex, "data: [DONE]\n\n", 14);
            http_stream_end(r->ex);
        } else {
            respond_whole(r);
        }
    }
    api_log_request(r, NULL);
}

/* The server can wait no longer (the shutdown grace is over): a stream that
 * has begun ends with an error event and [DONE], a request not yet answered
 * gets a 503; either way the client sees a proper end, not a cut. */
void api_respond_shutdown(ApiRequest *r) {
    if (!r->ex || r->done) return;
    ApiError e;
    api_error(&e, 503, NULL, "the server is shutting down and could not finish this request");
    if (r->params.stream && r->status == 200 && r->responses) {
        api_responses_stream_fail(r, &e);
        return;
    }
    if (r->params.stream && r->status == 200) {
        stream_error(r, &e);
        http_stream_write(r->ex, "data: [DONE]\n\n", 14);
        http_stream_end(r->ex);
        r->done = true;
        api_log_request(r, e.message);
        return;
    }
    if (!r->work_pending) api_respond_error(r, &e); /* a pending one is answered when its work returns */
}

/* ---- one event (its accounting done by api_engine.c) -------------------------------------------- */

/* Non-streaming: what the parser releases is kept for the whole body. */
static void take_parsed(ApiRequest *r, Choice *c, const ApiEvent *ev) {
    ChatOutputDelta d = {0};
    int rc = api_chat_output_take(r, c, ev, &d);
    json_t *calls = rc == 0 && d.num_calls > 0 ? api_tool_calls_json(&d, c->num_tool_calls, false) : NULL;
    if (rc || byte_buf_append(&c->reasoning, d.reasoning.data, d.reasoning.len) ||
        byte_buf_append(&c->text, d.content.data, d.content.len) || (d.num_calls > 0 && !calls) ||
        (calls && json_array_extend(c->tool_calls, calls)))
        log_info("%s: out of memory parsing the answer; part of it is lost", r->id);
    c->num_tool_calls += d.num_calls;
    json_decref(calls);
    chat_output_delta_free(&d);
}

void api_response_event(ApiRequest *r, const ApiEvent *ev) {
    if (r->route == ROUTE_EMBEDDINGS) {
        api_embeddings_event(r, ev);
        return;
    }
    Choice *c = &r->choices[ev->choice];
    if (r->responses) {
        if (!r->done) api_responses_event(r, c, ev);
        if (r->num_finished == r->num_choices && !r->done && r->status == 200) api_responses_complete(r);
        return;
    }
    json_t *lp = NULL;
    if (ev->has_token && ev->has_logprobs && r->params.sampling.logprobs >= 0) {
        json_t *target = c->logprobs;
        if (r->params.stream) target = lp = logprobs_new(r->kind);
        if (target)
            logprobs_append(target, r->kind, r->srv->tok, ev->token, &ev->logprobs,
                            r->params.sampling.logprobs, &c->text_offset);
    }
    if (r->ex && r->params.stream && !r->done) {
        stream_event(r, ev->choice, c, ev, lp);
    } else {
        json_decref(lp);
        if (c->parser) take_parsed(r, c, ev);
        else byte_buf_append(&c->text, ev->text, ev->text_len);
    }
    if (r->num_finished == r->num_choices && !r->done && r->status == 200) complete(r);
}
