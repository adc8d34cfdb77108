/*
 * api_request.c - what a request is before any stage touches it: its route
 * and method, its id, and its life. It is created when its body has
 * arrived and freed only on the loop, once its client is gone or answered,
 * no work is pending for it and every engine output has been replayed - so
 * no stage frees what another may still read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "api_internal.h"
#include "base/log.h"

Route api_route_find(const char *path) {
    static const struct {
        const char *path;
        Route route;
    } routes[] = {{"/health", ROUTE_HEALTH},           {"/v1/models", ROUTE_MODELS},
                  {"/metrics", ROUTE_METRICS},         {"/v1/completions", ROUTE_COMPLETIONS},
                  {"/v1/chat/completions", ROUTE_CHAT}, {"/tokenize", ROUTE_TOKENIZE},
                  {"/detokenize", ROUTE_DETOKENIZE}};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(path, routes[i].path) == 0) return routes[i].route;
    if (strncmp(path, "/v1/models/", 11) == 0 && path[11]) return ROUTE_MODEL;
    if (strcmp(path, "/v1/responses") == 0) return ROUTE_RESPONSES;
    if (strcmp(path, "/v1/embeddings") == 0) return ROUTE_EMBEDDINGS;
    if (strncmp(path, "/v1/responses/", 14) == 0 && path[14] && !strchr(path + 14, '/')) return ROUTE_RESPONSE;
    return ROUTE_NONE;
}

const char *api_route_method(Route r) {
    if (r == ROUTE_RESPONSE) return "GET, DELETE";
    return r == ROUTE_HEALTH || r == ROUTE_MODELS || r == ROUTE_MODEL || r == ROUTE_METRICS ? "GET"
                                                                                              : "POST";
}

bool api_route_allows(Route r, const char *method) {
    if (r == ROUTE_RESPONSE) return strcmp(method, "GET") == 0 || strcmp(method, "DELETE") == 0;
    return r != ROUTE_NONE && strcmp(method, api_route_method(r)) == 0;
}

/* 96 random bits, as OpenAI's ids look: unguessable, not a counter. */
void api_random_id(char *out, size_t size, const char *prefix) {
    unsigned char rnd[12] = {0};
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        static unsigned long long counter;
        unsigned long long x = (unsigned long long)(now_seconds() * 1e9) ^ ++counter;
        memcpy(rnd, &x, sizeof x);
    }
    int o = snprintf(out, size, "%s", prefix);
    for (size_t i = 0; i < sizeof rnd && o > 0 && (size_t)o < size; i++)
        o += snprintf(out + o, size - (size_t)o, "%02x", rnd[i]);
}

ApiRequest *api_request_new(ApiServer *s, HttpExchange *ex, Route route) {
    ApiRequest *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->srv = s;
    r->ex = ex;
    r->route = route;
    r->t_arrival = now_seconds();
    r->created = (long)time(NULL);
    snprintf(r->method, sizeof r->method, "%s", http_method(ex));
    snprintf(r->path, sizeof r->path, "%s", http_path(ex));
    api_random_id(r->id, sizeof r->id, route == ROUTE_CHAT        ? "chatcmpl-"
                                       : route == ROUTE_RESPONSES  ? "resp_"
                                       : route == ROUTE_EMBEDDINGS ? "embd-"
                                                                   : "cmpl-");
    r->next = s->requests;
    if (s->requests) s->requests->prev = r;
    s->requests = r;
    s->num_requests++;
    http_set_user(ex, r);
    return r;
}

void api_request_maybe_free(ApiRequest *r) {
    ApiServer *s = r->srv;
    /* Once the engine is gone no output can come: what it held was dropped. */
    bool engine_done = !s->engine || r->num_finished >= r->num_choices || r->num_submitted == 0;
    if (r->ex || r->work_pending || !engine_done) return;
    pthread_mutex_lock(&s->events_lock);
    bool queued = r->dirty;
    pthread_mutex_unlock(&s->events_lock);
    if (queued) return; /* its last events are on their way */
    if (r->counted_queued) s->num_queued--;
    if (r->prev) r->prev->next = r->next; else s->requests = r->next;
    if (r->next) r->next->prev = r->prev;
    s->num_requests--;
    json_decref(r->body);
    api_responses_free(r->responses);
    free(r->result);
    free(r->error_message);
    for (int i = 0; i < r->num_prompts; i++) {
        free(r->prompts[i]);
        if (r->prompt_texts) free(r->prompt_texts[i]);
    }
    free(r->prompts);
    constraint_unref(r->constraint);
    json_decref(r->tool_spec);
    free(r->prompt_lens);
    free(r->prompt_texts);
    for (int i = 0; r->choices && i < r->params.sampling.n * r->num_prompts; i++) {
        byte_buf_free(&r->choices[i].text);
        json_decref(r->choices[i].logprobs);
        free(r->choices[i].final_event);
        free(r->choices[i].embedding);
        api_chat_output_end(&r->choices[i]);
    }
    free(r->choices);
    free(r->contexts);
    free(r->engine_ids);
    free(r);
}
