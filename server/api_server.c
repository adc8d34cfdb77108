/*
 * api_server.c - the server's life, its routes, and the bridge from the
 * engine thread to the event loop (see api_server.h).
 *
 * Start-up: the HTTP server listens at once (so /health can say 503), the
 * model loads on libuv's worker pool, then the engine thread starts and
 * /health says 200. Shutdown (SIGINT/SIGTERM): stop accepting, answer new
 * requests with 503, let in-flight ones finish for the grace period, abort
 * what is left, then stop everything and exit 0.
 *
 * The bridge: the engine thread copies each output into an ApiEvent, queues
 * it on its request and the request on the dirty list - both under
 * events_lock, the only lock here - and wakes the loop with uv_async_send.
 * The loop takes the whole dirty list at once and replays the events. A
 * request is freed only by the loop, once its client is gone or answered,
 * no work is pending for it and every engine output has been replayed.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include "engine/base/log.h"
#include "api_internal.h"

static const char *route_method(Route r);

/* ---- answering ---------------------------------------------------------------- */

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

static void respond_json(ApiRequest *r, unsigned status, json_t *body) {
    char *text = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(body);
    if (!text) {
        static const char oom[] = "{\"error\": {\"message\": \"out of memory\", \"type\": "
                                  "\"server_error\", \"param\": null, \"code\": 500}}";
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
        snprintf(allow, sizeof allow, "Allow: %s", route_method(r->route));
        const char *allowed[] = {allow, NULL};
        if (body) http_respond(r->ex, e->status, "application/json", body, len,
                               e->status == 503 ? retry : e->status == 405 ? allowed : NULL);
        free(body);
    }
    api_log_request(r, e->message);
}

/* ---- requests ------------------------------------------------------------------ */

static ApiRequest *request_new(ApiServer *s, HttpExchange *ex, Route route) {
    ApiRequest *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->srv = s;
    r->ex = ex;
    r->route = route;
    r->t_arrival = now_seconds();
    r->created = (long)time(NULL);
    snprintf(r->method, sizeof r->method, "%s", http_method(ex));
    snprintf(r->path, sizeof r->path, "%s", http_path(ex));
    /* 96 random bits, as OpenAI's ids look: unguessable, not a counter. */
    unsigned char rnd[12] = {0};
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        static unsigned long long counter;
        unsigned long long x = (unsigned long long)(r->t_arrival * 1e9) ^ ++counter;
        memcpy(rnd, &x, sizeof x);
    }
    int o = snprintf(r->id, sizeof r->id, "%s-", route == ROUTE_CHAT ? "chatcmpl" : "cmpl");
    for (size_t i = 0; i < sizeof rnd; i++) o += snprintf(r->id + o, sizeof r->id - (size_t)o, "%02x", rnd[i]);
    r->next = s->requests;
    if (s->requests) s->requests->prev = r;
    s->requests = r;
    s->num_requests++;
    http_set_user(ex, r);
    return r;
}

void api_request_maybe_free(ApiRequest *r) {
    ApiServer *s = r->srv;
    bool engine_done = r->num_finished >= r->num_choices || r->num_submitted == 0;
    if (r->ex || r->work_pending || !engine_done) return;
    pthread_mutex_lock(&s->events_lock);
    bool queued = r->dirty;
    pthread_mutex_unlock(&s->events_lock);
    if (queued) return; /* its last events are on their way */
    if (r->counted_queued) s->num_queued--;
    if (r->prev) r->prev->next = r->next; else s->requests = r->next;
    if (r->next) r->next->prev = r->prev;
    s->num_requests--;
    api_generate_free(r);
    json_decref(r->body);
    free(r->result);
    free(r);
}

/* ---- the engine thread's side of the bridge ----------------------------------------- */

void api_on_engine_output(const EngineOutput *o, void *user) {
    PromptContext *ctx = user;
    ApiRequest *r = ctx->request;
    ApiServer *s = r->srv;
    int choice = ctx->prompt_index * r->params.sampling.n + o->sample_index;
    ApiEvent *ev = o->finish != FINISH_NONE ? r->choices[choice].final_event : calloc(1, sizeof *ev);
    if (!ev) return; /* out of memory: this token's text is lost, the stream goes on */
    *ev = (ApiEvent){.choice = choice, .has_token = o->has_token, .token = o->token,
                     .finish = o->finish, .stop_string = o->stop_string,
                     .num_cached_tokens = o->num_cached_tokens, .time = now_seconds()};
    if (o->logprobs) {
        ev->has_logprobs = true;
        ev->logprobs = *o->logprobs;
    }
    if (o->text_len > 0 && (ev->text = malloc(o->text_len))) {
        memcpy(ev->text, o->text, o->text_len);
        ev->text_len = o->text_len;
    }
    if (o->error) ev->error = strdup(o->error);
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

/* ---- the loop's side ------------------------------------------------------------------ */

static void on_wake(uv_async_t *a) {
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
            api_generate_event(r, ev);
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

/* ---- simple routes ----------------------------------------------------------------------- */

static Route find_route(const char *path) {
    static const struct {
        const char *path;
        Route route;
    } routes[] = {{"/health", ROUTE_HEALTH},           {"/v1/models", ROUTE_MODELS},
                  {"/metrics", ROUTE_METRICS},         {"/v1/completions", ROUTE_COMPLETIONS},
                  {"/v1/chat/completions", ROUTE_CHAT}, {"/tokenize", ROUTE_TOKENIZE},
                  {"/detokenize", ROUTE_DETOKENIZE}};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(path, routes[i].path) == 0) return routes[i].route;
    return ROUTE_NONE;
}

static const char *route_method(Route r) {
    return r == ROUTE_HEALTH || r == ROUTE_MODELS || r == ROUTE_METRICS ? "GET" : "POST";
}

/* "Authorization: Bearer KEY", compared in time independent of where it differs. */
static bool authorized(const ApiServer *s, HttpExchange *ex) {
    if (!s->opts.api_key) return true;
    const char *h = http_header(ex, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0) return false;
    const char *got = h + 7, *want = s->opts.api_key;
    size_t gl = strlen(got), wl = strlen(want);
    unsigned char diff = gl != wl;
    for (size_t i = 0; i < wl; i++) diff |= (unsigned char)(want[i] ^ (i < gl ? got[i] : 0));
    return diff == 0;
}

static void models(ApiRequest *r) {
    ApiServer *s = r->srv;
    respond_json(r, 200, json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:s, s:i}]}", "object", "list",
                                   "data", "id", s->model_name, "object", "model", "created",
                                   (json_int_t)s->created, "owned_by", "nanovllm", "root",
                                   s->opts.model_dir, "max_model_len", s->max_model_len));
}

static void metrics_page(ApiRequest *r) {
    EngineStats st = {0};
    if (r->srv->engine) st = engine_stats(r->srv->engine);
    size_t len;
    char *page = metrics_render(&r->srv->metrics, &st, r->srv->model_name, &len);
    r->status = page ? 200 : 500;
    if (page) http_respond(r->ex, 200, "text/plain; version=0.0.4", page, len, NULL);
    else http_respond(r->ex, 500, "text/plain", "out of memory\n", 14, NULL);
    free(page);
}

/* /tokenize {"prompt"} or {"messages"}; /detokenize {"tokens"}: vLLM's shapes. */
static void tokenize_work(ApiRequest *r) {
    ApiServer *s = r->srv;
    json_t *out = NULL;
    Error e;
    if (r->route == ROUTE_DETOKENIZE) {
        json_t *t = json_object_get(r->body, "tokens");
        size_t n = json_array_size(t);
        int32_t *ids = malloc(sizeof(int32_t) * (n ? n : 1));
        bool ok = json_is_array(t) && ids;
        for (size_t i = 0; ok && i < n; i++) {
            json_t *v = json_array_get(t, i);
            ok = json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= INT32_MAX;
            if (ok) ids[i] = (int32_t)json_integer_value(v);
        }
        char *text = NULL;
        size_t len;
        if (!ok) api_error(&r->error, 400, "tokens", "'tokens' must be a list of token ids");
        else if (tokenizer_decode(s->tok, ids, n, false, &text, &len, &e))
            api_error(&r->error, 400, "tokens", "%s", e.msg);
        else out = json_pack("{s:s%}", "prompt", text, len);
        free(text);
        free(ids);
    } else {
        json_t *messages = json_object_get(r->body, "messages");
        json_t *prompt = json_object_get(r->body, "prompt");
        char *rendered = NULL;
        const char *text = NULL;
        size_t len = 0;
        if (messages) {
            rendered = chat_template_render(s->chat_kind, r->body, &len, &e);
            if (!rendered) api_error(&r->error, 400, "messages", "%s", e.msg);
            text = rendered;
        } else if (json_is_string(prompt)) {
            text = json_string_value(prompt);
            len = json_string_length(prompt);
        } else {
            api_error(&r->error, 400, "prompt", "give 'prompt' (a string) or 'messages'");
        }
        int32_t *ids = NULL;
        size_t n = 0;
        if (text && tokenizer_encode(s->tok, text, len, &ids, &n, &e))
            api_error(&r->error, 400, "prompt", "%s", e.msg);
        else if (text) {
            json_t *list = json_array();
            for (size_t i = 0; list && i < n; i++) json_array_append_new(list, json_integer(ids[i]));
            out = json_pack("{s:i, s:i, s:o}", "count", (int)n, "max_model_len", s->max_model_len,
                            "tokens", list);
        }
        free(ids);
        free(rendered);
    }
    if (out) r->result = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    if (!r->result && r->error.status == 0) api_error(&r->error, 500, NULL, "out of memory");
    r->failed = r->result == NULL;
}

/* ---- worker-pool jobs ------------------------------------------------------------------------ */

static void work_run(uv_work_t *w) {
    ApiRequest *r = w->data;
    if (r->route == ROUTE_TOKENIZE || r->route == ROUTE_DETOKENIZE) tokenize_work(r);
    else api_generate_prepare(r);
}

static void work_done(uv_work_t *w, int status) {
    ApiRequest *r = w->data;
    r->work_pending = false;
    if (!r->ex || status != 0) { /* the client left (or the loop is closing) */
        api_request_maybe_free(r);
        return;
    }
    if (r->route == ROUTE_TOKENIZE || r->route == ROUTE_DETOKENIZE) {
        if (r->failed) {
            api_respond_error(r, &r->error);
        } else {
            r->status = 200;
            http_respond(r->ex, 200, "application/json", r->result, strlen(r->result), NULL);
            api_log_request(r, NULL);
        }
    } else if (r->srv->shutting_down) {
        ApiError e;
        api_error(&e, 503, NULL, "the server is shutting down");
        api_respond_error(r, &e);
    } else {
        api_generate_submit(r);
    }
}

/* ---- the HTTP handlers ------------------------------------------------------------------------- */

static void on_request(void *ctx, HttpExchange *ex) {
    ApiServer *s = ctx;
    Route route = find_route(http_path(ex));
    ApiRequest *r = request_new(s, ex, route);
    if (!r) {
        static const char oom[] = "{\"error\": {\"message\": \"out of memory\", \"type\": "
                                  "\"server_error\", \"param\": null, \"code\": 500}}";
        http_respond(ex, 500, "application/json", oom, sizeof oom - 1, NULL);
        return;
    }
    ApiError e = {0};
    if (route == ROUTE_NONE) {
        api_error(&e, 404, NULL, "no route %s %s", http_method(ex), http_path(ex));
    } else if (strcmp(http_method(ex), route_method(route)) != 0) {
        api_error(&e, 405, NULL, "%s %s is not allowed (use %s)", http_method(ex), http_path(ex),
                  route_method(route));
    } else if (route == ROUTE_HEALTH) {
        r->status = s->ready && !s->shutting_down ? 200 : 503;
        http_respond(ex, r->status, "text/plain", "", 0, NULL);
        return;
    } else if (route == ROUTE_METRICS) {
        metrics_page(r);
        return;
    } else if (!authorized(s, ex)) {
        api_error(&e, 401, NULL, "a valid API key is required (Authorization: Bearer KEY)");
        e.code = "invalid_api_key";
    } else if (route == ROUTE_MODELS) {
        models(r);
        return;
    } else if (!s->ready) {
        api_error(&e, 503, NULL, "the model is still loading");
    } else if (s->shutting_down) {
        api_error(&e, 503, NULL, "the server is shutting down");
    } else if (http_body_too_large(ex)) {
        api_error(&e, 413, NULL, "the request body is larger than %zu bytes", s->opts.max_body_bytes);
    }
    if (e.status) {
        api_respond_error(r, &e);
        return;
    }
    size_t len;
    const char *body = http_body(ex, &len);
    json_error_t jerr;
    r->body = json_loadb(body, len, 0, &jerr);
    if (!r->body || !json_is_object(r->body)) {
        api_error(&e, 400, NULL, r->body ? "the body must be a JSON object"
                                         : "the body is not valid JSON: %s (position %d)",
                  jerr.text, jerr.position);
        api_respond_error(r, &e);
        return;
    }
    if ((route == ROUTE_COMPLETIONS || route == ROUTE_CHAT) && api_generate_begin(r, &e)) {
        api_respond_error(r, &e);
        return;
    }
    r->work.data = r;
    if (uv_queue_work(s->loop, &r->work, work_run, work_done) != 0) {
        api_error(&e, 500, NULL, "cannot queue the request");
        api_respond_error(r, &e);
        return;
    }
    r->work_pending = true;
    http_defer(ex);
}

static void on_closed(void *ctx, HttpExchange *ex, void *user, bool completed) {
    (void)ctx;
    (void)ex;
    ApiRequest *r = user;
    if (!r) return;
    r->ex = NULL;
    if (!completed && r->num_finished < r->num_choices) {
        api_generate_abort(r); /* the client is gone: free its KV blocks */
        api_log_request(r, "client disconnected, aborted");
    }
    api_request_maybe_free(r);
}

/* ---- loading --------------------------------------------------------------------------------------- */

static void load_run(uv_work_t *w) {
    ApiServer *s = w->data;
    s->load_rc = loaded_model_open(&s->model, s->opts.model_dir, &s->opts.runner, &s->load_err);
    if (s->load_rc) return;
    const ModelConfig *c = &s->model.weights.config;
    s->tok = tokenizer_load(s->opts.model_dir, c->vocab_size, &s->load_err);
    s->engine = s->tok ? engine_create(&s->model.weights, s->model.runner, &s->load_err) : NULL;
    if (!s->engine) {
        s->load_rc = -1;
        return;
    }
    engine_set_tokenizer(s->engine, s->tok);
    char warning[512];
    s->chat_kind = chat_template_detect(tokenizer_chat_template(s->tok), warning, sizeof warning);
    if (warning[0]) log_info("%s", warning);
}

static void begin_shutdown(ApiServer *s, const char *why);

static void load_done(uv_work_t *w, int status) {
    ApiServer *s = w->data;
    if (status != 0 || s->load_rc != 0 || engine_start(s->engine, &s->load_err) != 0) {
        log_info("cannot serve: %s", s->load_err.msg);
        s->exit_code = -1;
        begin_shutdown(s, NULL);
        return;
    }
    s->max_model_len = s->model.runner->options.max_model_len;
    s->ready = true;
    log_info("serving %s on http://%s:%d (ready %.2f s after start)", s->model_name,
             s->opts.host, http_server_port(s->http), now_seconds() - s->started);
}

/* ---- shutdown ---------------------------------------------------------------------------------------- */

static void close_handle(uv_handle_t *h) {
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void finish_shutdown(ApiServer *s) {
    if (s->stopped) return;
    s->stopped = true;
    uv_timer_stop(&s->shutdown_timer);
    http_server_stop(s->http); /* on_closed for what is left */
    s->http = NULL;
    engine_destroy(s->engine); /* joins the engine thread */
    s->engine = NULL;
    /* Events of aborted requests may still be queued: replay them so the
     * requests can go, then close the loop's handles. */
    on_wake(&s->wake);
    close_handle((uv_handle_t *)&s->wake);
    close_handle((uv_handle_t *)&s->sigint);
    close_handle((uv_handle_t *)&s->sigterm);
    /* Already stopping: a late signal must not turn the exit into a kill. */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    close_handle((uv_handle_t *)&s->shutdown_timer);
}

static void on_shutdown_tick(uv_timer_t *t) {
    ApiServer *s = t->data;
    double waited = now_seconds() - s->shutdown_started;
    /* A request leaves the list only once its response has reached the
     * client (or the client left): `done` alone means the last bytes are
     * still in the HTTP server's buffers, and stopping then cuts the stream. */
    bool busy = s->requests != NULL;
    if (busy && waited < s->opts.shutdown_grace_seconds) return;
    if (busy) {
        log_info("shutdown: aborting the %d unfinished requests", s->num_requests);
        for (ApiRequest *r = s->requests; r; r = r->next) api_generate_abort(r);
    }
    finish_shutdown(s);
}

static void begin_shutdown(ApiServer *s, const char *why) {
    if (s->shutting_down) { /* a second signal: do not wait */
        s->opts.shutdown_grace_seconds = 0;
        return;
    }
    s->shutting_down = true;
    s->shutdown_started = now_seconds();
    if (why) log_info("%s: finishing %d in-flight requests, then exiting", why, s->num_requests);
    uv_timer_start(&s->shutdown_timer, on_shutdown_tick, 0, 50);
}

static void on_signal(uv_signal_t *h, int signum) {
    begin_shutdown(h->data, signum == SIGINT ? "SIGINT" : "SIGTERM");
}

/* ---- the server -------------------------------------------------------------------------------------- */

int api_server_run(const ApiServerOptions *opts, Error *err) {
    ApiServer *s = calloc(1, sizeof *s);
    if (!s) return error_set(err, "out of memory");
    s->opts = *opts;
    s->model_name = opts->served_model_name ? opts->served_model_name : opts->model_dir;
    s->started = now_seconds();
    s->created = (long)time(NULL);
    s->loop = uv_default_loop();
    metrics_init(&s->metrics);
    pthread_mutex_init(&s->events_lock, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct stat st;
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/config.json", opts->model_dir);
    if (stat(cfg, &st) != 0) {
        free(s);
        return error_set(err, "%s: no config.json (is this a Hugging Face model folder?)", opts->model_dir);
    }
    HttpHandlers handlers = {on_request, on_closed};
    HttpServerOptions ho = {opts->host, opts->port, opts->max_body_bytes};
    s->http = http_server_start(s->loop, &ho, &handlers, s, err);
    if (!s->http) {
        free(s);
        return -1;
    }
    log_info("listening on http://%s:%d (loading %s)", opts->host, http_server_port(s->http),
             opts->model_dir);
    uv_async_init(s->loop, &s->wake, on_wake);
    s->wake.data = s;
    uv_signal_init(s->loop, &s->sigint);
    uv_signal_init(s->loop, &s->sigterm);
    s->sigint.data = s->sigterm.data = s;
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_timer_init(s->loop, &s->shutdown_timer);
    s->shutdown_timer.data = s;
    s->load_work.data = s;
    uv_queue_work(s->loop, &s->load_work, load_run, load_done);

    uv_run(s->loop, UV_RUN_DEFAULT);

    int rc = s->exit_code;
    if (rc) error_set(err, "%s", s->load_err.msg);
    uv_loop_close(s->loop);
    tokenizer_free(s->tok);
    loaded_model_close(&s->model);
    pthread_mutex_destroy(&s->events_lock);
    free(s);
    if (rc == 0) log_info("stopped");
    return rc;
}
