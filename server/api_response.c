/*
 * api_response.c - what the client of a request receives: OpenAI error
 * bodies, the request's log line, and for generation requests either SSE
 * chunks as the events come (a role chunk opening each chat choice, text
 * and logprobs, a finish chunk, the usage chunk, [DONE]) or one JSON body
 * once the last choice has finished. The JSON shapes themselves are built
 * by openai_response.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "engine/base/log.h"

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

static json_t *chunk_for(ApiRequest *r, const ChoiceOut *c, const Usage *u, int count) {
    return openai_response(r->kind, true, r->id, r->created, r->srv->model_name, c, count, u);
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
        size_t len;
        char *body = openai_error_body(&e, &len);
        if (body) {
            http_stream_write(r->ex, "data: ", 6);
            http_stream_write(r->ex, body, len);
            http_stream_write(r->ex, "\n\n", 2);
        }
        free(body);
        json_decref(lp);
        return;
    }
    ByteBuf text = {0};
    if (prefix) byte_buf_append(&text, prefix, strlen(prefix));
    byte_buf_append(&text, ev->text, ev->text_len);
    bool finishing = ev->finish != FINISH_NONE;
    if (text.len > 0 || lp || (finishing && r->kind == API_COMPLETION)) {
        ChoiceOut out = {.index = index, .text = text.data, .text_len = text.len, .logprobs = lp,
                         .finish = r->kind == API_COMPLETION ? ev->finish : FINISH_NONE,
                         .stop_str = c->stop_string};
        stream_json(r, chunk_for(r, &out, NULL, 1));
    } else {
        json_decref(lp);
    }
    if (finishing && r->kind == API_CHAT) {
        ChoiceOut fin = {.index = index, .finish = ev->finish, .stop_str = c->stop_string};
        stream_json(r, chunk_for(r, &fin, NULL, 1));
    }
    byte_buf_free(&text);
}

/* ---- whole bodies ------------------------------------------------------------------------------- */

static Usage usage_of(const ApiRequest *r) {
    return (Usage){r->prompt_tokens, r->completion_tokens, r->cached_tokens};
}

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
                                  .logprobs = c->logprobs};
            c->logprobs = NULL; /* stolen by the response */
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
    if (r->params.stream && r->status == 200) {
        size_t len;
        char *body = openai_error_body(&e, &len);
        if (body) {
            http_stream_write(r->ex, "data: ", 6);
            http_stream_write(r->ex, body, len);
            http_stream_write(r->ex, "\n\n", 2);
        }
        free(body);
        http_stream_write(r->ex, "data: [DONE]\n\n", 14);
        http_stream_end(r->ex);
        r->done = true;
        api_log_request(r, e.message);
        return;
    }
    if (!r->work_pending) api_respond_error(r, &e); /* a pending one is answered when its work returns */
}

/* ---- one event (its accounting done by api_engine.c) -------------------------------------------- */

void api_response_event(ApiRequest *r, const ApiEvent *ev) {
    Choice *c = &r->choices[ev->choice];
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
        byte_buf_append(&c->text, ev->text, ev->text_len);
    }
    if (r->num_finished == r->num_choices && !r->done && r->status == 200) complete(r);
}
