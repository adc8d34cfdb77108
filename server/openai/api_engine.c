/*
 * api_engine.c - the bridge between a generation request and the engine.
 *
 * To the engine (loop): each prompt's max_tokens is settled against
 * max_model_len, the queue limit checked, and one engine request submitted
 * per prompt; a streaming answer starts only once everything that could
 * fail has passed. Back from it: the engine thread copies each output into
 * an ApiEvent, queues it on its request and the request on the dirty list -
 * both under events_lock, the only lock here - and wakes the loop with
 * uv_async_send. The loop takes the whole dirty list at once, brings each
 * request's counts and metrics up to date with its events and hands them to
 * the response writer (api_send.c). Choices are numbered
 * prompt * n + sample, as OpenAI numbers them.
 */
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "config/defaults.h"
#include "base/log.h"

/* ---- submission (loop) ---------------------------------------------------------------------- */

static int context_error(ApiRequest *r, int prompt_len, int max_tokens, ApiError *err) {
    const char *what = r->responses ? "input" : r->kind == API_CHAT ? "messages" : "prompt";
    api_error(err, 400, what,
              "This model's maximum context length is %d tokens. However, you requested %d tokens "
              "(%d in the %s, %d in the completion). Please reduce the length of the %s or "
              "completion.",
              r->srv->max_model_len, prompt_len + max_tokens, prompt_len, what, max_tokens, what);
    err->code = "context_length_exceeded";
    return -1;
}

/* The sampling parameters of one prompt, max_tokens settled. */
static int params_for(ApiRequest *r, int prompt_len, SamplingParams *sp, ApiError *err) {
    *sp = r->params.sampling;
    int room = r->srv->max_model_len - prompt_len;
    if (sp->max_tokens == 0) { /* not given */
        sp->max_tokens = r->kind == API_CHAT ? room : DEFAULT_MAX_TOKENS;
        if (sp->max_tokens > room) sp->max_tokens = room;
        if (sp->max_tokens < 1) return context_error(r, prompt_len, 1, err);
    }
    if (sp->max_tokens > room) return context_error(r, prompt_len, sp->max_tokens, err);
    return 0;
}

static int allocate_choices(ApiRequest *r) {
    int n = r->params.sampling.n;
    r->num_choices = r->num_prompts * n;
    r->choices = calloc((size_t)r->num_choices, sizeof *r->choices);
    r->contexts = calloc((size_t)r->num_prompts, sizeof *r->contexts);
    r->engine_ids = calloc((size_t)r->num_prompts, sizeof *r->engine_ids);
    if (!r->choices || !r->contexts || !r->engine_ids) return -1;
    for (int i = 0; i < r->num_choices; i++) {
        Choice *c = &r->choices[i];
        c->final_event = calloc(1, sizeof *c->final_event);
        if (!c->final_event) return -1;
        if (r->params.sampling.logprobs >= 0 && !(c->logprobs = logprobs_new(r->kind))) return -1;
    }
    return api_chat_output_begin(r);
}

void api_submit(ApiRequest *r) {
    ApiServer *s = r->srv;
    ApiError err = {0};
    if (r->failed) {
        api_respond_error(r, &r->error);
        return;
    }
    SamplingParams *sps = calloc((size_t)r->num_prompts, sizeof *sps);
    int rc = sps ? 0 : api_error(&err, 500, NULL, "out of memory");
    for (int i = 0; rc == 0 && i < r->num_prompts; i++) rc = params_for(r, r->prompt_lens[i], &sps[i], &err);
    if (rc == 0 && s->num_queued >= s->opts.max_queued_requests)
        rc = api_error(&err, 503, NULL, "the server is busy (%d requests waiting); retry later",
                       s->num_queued);
    if (rc == 0 && allocate_choices(r)) rc = api_error(&err, 500, NULL, "out of memory");
    for (int i = 0; rc == 0 && i < r->num_prompts; i++) {
        r->contexts[i] = (PromptContext){r, i};
        EngineRequest req = {.prompt = r->prompts[i], .prompt_len = r->prompt_lens[i],
                             .params = sps[i], .stop = r->params.stop,
                             .num_stop = r->params.num_stop, .constraint = r->constraint,
                             .constraint_after = r->constraint_after, .priority = r->params.priority,
                             .on_output = api_on_engine_output,
                             .user = &r->contexts[i]};
        Error e;
        if (engine_submit(s->engine, &req, &r->engine_ids[i], &e)) {
            rc = api_error_from(&err, e.kind, NULL, e.msg);
            break;
        }
        r->num_submitted++;
        r->prompt_tokens += r->prompt_lens[i];
    }
    free(sps);
    if (rc) {
        /* Prompts already with the engine end with aborts; the request
         * stays until they have. */
        api_abort(r);
        r->num_choices = r->num_submitted * r->params.sampling.n;
        api_respond_error(r, &err);
        return;
    }
    r->counted_queued = true;
    s->num_queued++;
    if (r->params.stream && http_stream_begin(r->ex, 200, "text/event-stream") != 0) {
        api_abort(r); /* cannot answer: let it end */
        return;
    }
    r->status = 200;
    if (r->responses && r->params.stream) api_responses_stream_open(r);
}

void api_abort(ApiRequest *r) {
    for (int i = 0; i < r->num_submitted; i++) engine_abort(r->srv->engine, r->engine_ids[i]);
}

/* ---- outputs, on the engine thread ---------------------------------------------------------- */

void api_on_engine_output(const EngineOutput *o, void *user) {
    PromptContext *ctx = user;
    ApiRequest *r = ctx->request;
    ApiServer *s = r->srv;
    int choice = ctx->prompt_index * r->params.sampling.n + o->sample_index;
    ApiEvent *ev = o->finish != FINISH_NONE ? r->choices[choice].final_event : calloc(1, sizeof *ev);
    if (!ev) return; /* out of memory: this token's text is lost, the stream goes on */
    *ev = (ApiEvent){.choice = choice, .has_token = o->has_token, .token = o->token,
                     .finish = o->finish, .stop_string = o->stop_string,
                     .num_cached_tokens = o->num_cached_tokens, .time = now_seconds(),
                     .error_kind = o->error_kind};
    if (o->logprobs) {
        ev->has_logprobs = true;
        ev->logprobs = *o->logprobs;
    }
    if (o->text_len > 0 && (ev->text = malloc(o->text_len))) {
        memcpy(ev->text, o->text, o->text_len);
        ev->text_len = o->text_len;
    }
    if (o->error) ev->error = strdup(o->error);
    if (o->embedding && r->choices[choice].embedding) /* read by the loop only after the event */
        memcpy(r->choices[choice].embedding, o->embedding, sizeof(float) * (size_t)o->embedding_dim);
    pthread_mutex_lock(&s->events_lock);
    if (r->ev_tail) r->ev_tail->next = ev; else r->ev_head = ev;
    r->ev_tail = ev;
    if (!r->dirty) {
        r->dirty = true;
        r->dirty_next = s->dirty_head;
        s->dirty_head = r;
    }
    pthread_mutex_unlock(&s->events_lock);
    uv_async_send(&s->wake);
}

/* ---- the loop's side -------------------------------------------------------------------------- */

/* What one event changes in its request: token counts, latencies, the
 * queue count, and how its choice ended. */
static void account(ApiRequest *r, const ApiEvent *ev) {
    ApiServer *s = r->srv;
    Choice *c = &r->choices[ev->choice];
    if (ev->has_token) {
        if (r->t_first == 0) {
            r->t_first = ev->time;
            histogram_observe(&s->metrics.ttft, ev->time - r->t_arrival);
        }
        if (c->num_tokens > 0) histogram_observe(&s->metrics.itl, ev->time - c->last_token_time);
        c->last_token_time = ev->time;
        c->num_tokens++;
        r->completion_tokens++;
    }
    if (r->counted_queued && (ev->has_token || ev->finish != FINISH_NONE)) {
        r->counted_queued = false;
        s->num_queued--;
    }
    if (ev->choice % r->params.sampling.n == 0 && ev->num_cached_tokens > 0 && c->num_tokens == 1)
        r->cached_tokens += ev->num_cached_tokens;
    if (ev->finish == FINISH_NONE) return;
    c->finished = true;
    c->finish = ev->finish;
    if (ev->stop_string >= 0 && ev->stop_string < r->params.num_stop)
        c->stop_string = r->params.stop[ev->stop_string];
    r->num_finished++;
    s->metrics.finished[ev->finish]++;
    if (ev->finish == FINISH_ERROR && !r->error_message) {
        r->error_message = strdup(ev->error ? ev->error : "the request failed");
        r->error_kind = ev->error_kind;
    }
}

void api_on_wake(uv_async_t *a) {
    ApiServer *s = a->data;
    pthread_mutex_lock(&s->events_lock);
    ApiRequest *list = s->dirty_head;
    s->dirty_head = NULL;
    /* Each request with its events, taken while the engine cannot be
     * appending. The list itself must not be walked after the unlock: an
     * event arriving then re-links its request (dirty_next) into the next
     * list, which would strand the rest of this one. */
    typedef struct Taken {
        ApiRequest *r;
        ApiEvent *events;
    } Taken;
    Taken small[64], *taken = small;
    int n = 0;
    for (ApiRequest *r = list; r; r = r->dirty_next) n++;
    if (n > 64 && !(taken = malloc(sizeof *taken * (size_t)n))) taken = NULL;
    int k = 0;
    for (ApiRequest *r = list; r && taken; r = r->dirty_next, k++) {
        taken[k] = (Taken){r, r->ev_head};
        r->ev_head = r->ev_tail = NULL;
    }
    if (taken)
        for (ApiRequest *r = list; r; r = r->dirty_next) r->dirty = false;
    pthread_mutex_unlock(&s->events_lock);
    if (!taken) { /* out of memory: leave them (still marked dirty) for the next wake */
        pthread_mutex_lock(&s->events_lock);
        ApiRequest *last = list;
        while (last->dirty_next) last = last->dirty_next;
        last->dirty_next = s->dirty_head;
        s->dirty_head = list;
        pthread_mutex_unlock(&s->events_lock);
        uv_async_send(&s->wake);
        return;
    }
    for (k = 0; k < n; k++) {
        ApiRequest *r = taken[k].r;
        for (ApiEvent *ev = taken[k].events, *ev_next; ev; ev = ev_next) {
            ev_next = ev->next;
            account(r, ev);
            api_response_event(r, ev);
            free(ev->text);
            free(ev->error);
            bool final = ev->finish != FINISH_NONE; /* the choice's preallocated event */
            if (!final) free(ev);
            else *ev = (ApiEvent){0};
        }
        api_request_maybe_free(r);
    }
    if (taken != small) free(taken);
}
