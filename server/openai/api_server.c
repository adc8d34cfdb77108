/*
 * api_server.c - the server's life and its routes (see api_server.h): the
 * first and last stop of every request (api_internal.h has the others).
 *
 * Start-up: the HTTP server listens at once (so /health can say 503), the
 * model loads on libuv's worker pool, then the engine thread starts and
 * /health says 200. Shutdown (SIGINT/SIGTERM): answer new requests with
 * 503, let in-flight ones finish for the grace period, abort what is left,
 * stop everything, wait until the kernel has delivered the last bytes
 * (tcp_drain.c), exit 0.
 *
 * Routing: GET /health, /metrics and /v1/models are answered here; the POST
 * routes are parsed on the loop and their text work queued on the worker
 * pool, whose result decides the next stage (api_internal.h).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "api_internal.h"
#include "config/defaults.h"
#include "base/log.h"
#include "server/http/tcp_drain.h"
#include "server/webui/webui.h"
#include "engine/model_tokenizer.h"
#include "model/gguf.h"

/* After the grace period, how long the final events may take to reach clients. */
#define SHUTDOWN_FLUSH_SECONDS 2.0

/* ---- routes answered here ----------------------------------------------------------------------- */

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

static json_t *model_object(const ApiServer *s) {
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:i, s:s}", "id", s->model_name, "object", "model",
                     "created", (json_int_t)s->created, "owned_by", "nanovllm", "root",
                     s->opts.model_dir, "max_model_len", s->max_model_len, "task",
                     s->pooling.mode != POOLING_NONE ? "embed" : "generate");
}

/* GET /v1/models, and GET /v1/models/{id} (OpenAI's retrieve). */
static void models(ApiRequest *r) {
    ApiServer *s = r->srv;
    if (r->route == ROUTE_MODELS) {
        api_respond_json(r, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", model_object(s)));
        return;
    }
    const char *id = http_path(r->ex) + strlen("/v1/models/");
    if (strcmp(id, s->model_name) == 0) {
        api_respond_json(r, 200, model_object(s));
        return;
    }
    ApiError e;
    api_error(&e, 404, "model", "The model '%s' does not exist (this server serves '%s')", id,
              s->model_name);
    e.code = "model_not_found";
    api_respond_error(r, &e);
}

static void metrics_page(ApiRequest *r) {
    EngineStats st = {0};
    if (r->srv->engine) st = engine_stats(r->srv->engine);
    size_t len;
    char *page = metrics_render(&r->srv->metrics, &st, http_server_connections(r->srv->http),
                                r->srv->model_name, &len);
    r->status = page ? 200 : 500;
    if (page) http_respond(r->ex, 200, "text/plain; version=0.0.4", page, len, NULL);
    else http_respond(r->ex, 500, "text/plain", "out of memory\n", 14, NULL);
    free(page);
}

/* ---- worker-pool jobs ------------------------------------------------------------------------ */

static void work_run(uv_work_t *w) {
    ApiRequest *r = w->data;
    if (r->route == ROUTE_TOKENIZE || r->route == ROUTE_DETOKENIZE) api_tokenize(r);
    else if (r->route == ROUTE_EMBEDDINGS) api_embeddings_prepare(r);
    else api_prepare(r);
}

static void work_done(uv_work_t *w, int status) {
    ApiRequest *r = w->data;
    r->work_pending = false;
    if (!r->ex || status != 0) { /* the client left (or the loop is closing) */
        api_request_maybe_free(r);
        return;
    }
    if (r->route == ROUTE_TOKENIZE || r->route == ROUTE_DETOKENIZE) {
        api_tokenize_respond(r);
    } else if (r->srv->shutting_down) {
        ApiError e;
        api_error(&e, 503, NULL, "the server is shutting down");
        api_respond_error(r, &e);
    } else if (r->route == ROUTE_EMBEDDINGS) {
        api_embeddings_submit(r);
    } else {
        api_submit(r);
    }
}

/* ---- the HTTP handlers ------------------------------------------------------------------------- */

static void on_request(void *ctx, HttpExchange *ex) {
    ApiServer *s = ctx;
    /* Before the key: a browser's preflight never carries one, and the page
     * is public (it asks for the key itself). */
    if (cors_prepare(&s->opts.allowed_origins, ex)) {
        cors_answer_preflight(ex);
        return;
    }
    if (!s->opts.no_webui && webui_serve(ex)) return;
    Route route = api_route_find(http_path(ex));
    ApiRequest *r = api_request_new(s, ex, route);
    if (!r) {
        static const char oom[] = "{\"error\": {\"message\": \"out of memory\", \"type\": "
                                  "\"server_error\", \"param\": null, \"code\": null}}";
        http_respond(ex, 500, "application/json", oom, sizeof oom - 1, NULL);
        return;
    }
    ApiError e = {0};
    bool open_route = route == ROUTE_HEALTH || route == ROUTE_METRICS; /* probes need no key */
    bool right_method = api_route_allows(route, http_method(ex));
    if (!open_route && !authorized(s, ex)) { /* before 404: no probing routes without the key */
        api_error(&e, 401, NULL, "a valid API key is required (Authorization: Bearer KEY)");
        e.code = "invalid_api_key";
    } else if (route == ROUTE_NONE) {
        api_error(&e, 404, NULL, "no route %s %s", http_method(ex), http_path(ex));
    } else if (!right_method) {
        api_error(&e, 405, NULL, "%s %s is not allowed (use %s)", http_method(ex), http_path(ex),
                  api_route_method(route));
    } else if (route == ROUTE_HEALTH) {
        r->status = s->ready && !s->shutting_down ? 200 : 503;
        http_respond(ex, r->status, "text/plain", "", 0, NULL);
        return;
    } else if (route == ROUTE_METRICS) {
        metrics_page(r);
        return;
    } else if (route == ROUTE_MODELS || route == ROUTE_MODEL) {
        models(r);
        return;
    } else if (route == ROUTE_RESPONSE) {
        api_responses_stored(r);
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
    bool generation = route == ROUTE_COMPLETIONS || route == ROUTE_CHAT || route == ROUTE_RESPONSES;
    if (generation && s->pooling.mode != POOLING_NONE)
        api_error(&e, 400, NULL, "this model serves embeddings only (it was started as a pooling model): "
                                 "use /v1/embeddings");
    else if (route == ROUTE_EMBEDDINGS && s->pooling.mode == POOLING_NONE)
        api_error(&e, 400, NULL, "this model does not serve embeddings: it has no sentence-transformers "
                                 "Pooling module (modules.json); start it with --runner pooling to embed");
    else if (route == ROUTE_EMBEDDINGS) api_embeddings_parse(r, &e);
    else if (generation) api_parse_request(r, &e);
    if (e.status) {
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
    ApiServer *s = ctx;
    ApiRequest *r = user;
    if (!r) { /* it never became a request: the body was cut short or too slow */
        if (completed) return;
        bool slow = http_timed_out(ex);
        s->metrics.client_closed++;
        log_info("%s %s %u: %s", http_method(ex), http_path(ex), slow ? 408 : 499,
                 slow ? "the request body did not arrive in time" : "the client left before its "
                                                                    "request was complete");
        return;
    }
    r->ex = NULL;
    if (!completed && !r->logged) {
        r->status = 499; /* nginx's code: the client closed the connection */
        s->metrics.client_closed++;
        if (r->num_finished < r->num_choices) {
            api_abort(r); /* the client is gone: free its KV blocks */
            api_log_request(r, "client disconnected, aborted");
        } else {
            api_log_request(r, "client disconnected");
        }
    }
    api_request_maybe_free(r);
}

/* The front door answered or dropped a connection: counted, and logged at
 * most once a second per reason (a flood must not flood the log too). */
static void on_dropped(void *ctx, HttpDrop why, const char *detail) {
    ApiServer *s = ctx;
    s->metrics.dropped[why]++;
    double now = now_seconds();
    if (now - s->last_drop_log[why] < 1.0) {
        s->unlogged_drops[why]++;
        return;
    }
    if (s->unlogged_drops[why])
        log_info("connection dropped (%s): %s (and %lld more since the last line)",
                 HTTP_DROP_NAMES[why], detail, s->unlogged_drops[why]);
    else
        log_info("connection dropped (%s): %s", HTTP_DROP_NAMES[why], detail);
    s->last_drop_log[why] = now;
    s->unlogged_drops[why] = 0;
}

/* ---- loading --------------------------------------------------------------------------------------- */

static void load_run(uv_work_t *w) {
    ApiServer *s = w->data;
    s->load_rc = s->opts.loader.open(&s->model, s->opts.model_dir, &s->opts.runner, &s->load_err);
    if (s->load_rc) return;
    const ModelConfig *c = &s->model.weights.config;
    if (s->model.weights.gguf.map ? model_pooling_from_gguf(&s->pooling, &s->model.weights.gguf, &s->load_err)
                                  : model_pooling_load(&s->pooling, s->opts.model_dir, &s->load_err)) {
        s->load_rc = -1;
        return;
    }
    if (s->opts.runner_kind == API_RUNNER_GENERATE) {
        s->pooling.mode = POOLING_NONE;
    } else if (s->opts.runner_kind == API_RUNNER_POOLING && s->pooling.mode == POOLING_NONE) {
        /* vLLM's default for a causal LM run as a pooling model */
        s->pooling = (ModelPooling){POOLING_LAST, true, false};
    }
    if (s->pooling.mode != POOLING_NONE)
        log_info("embeddings: %s pooling%s (%s); generation endpoints off", pooling_mode_name(s->pooling.mode),
                 s->pooling.normalize ? ", L2-normalised" : ", not normalised",
                 !s->pooling.from_folder        ? "--runner pooling's default"
                 : s->model.weights.gguf.map ? "from the file's pooling_type"
                                             : "from modules.json");
    s->tok = model_tokenizer_load(s->opts.model_dir, c->vocab_size, &s->load_err);
    s->engine = s->tok ? engine_create(&s->model.weights, s->model.runner, &s->load_err) : NULL;
    if (!s->engine) {
        s->load_rc = -1;
        return;
    }
    engine_set_tokenizer(s->engine, s->tok);
    const char *warning;
    s->chat = chat_template_new(s->tok, s->opts.chat_template, s->opts.chat_content_format, &warning,
                                &s->load_err);
    if (!s->chat) {
        s->load_rc = -1;
        return;
    }
    if (warning) log_info("%s", warning);
    bool has_think = tokenizer_token_to_id(s->tok, "<think>", 7) >= 0 && tokenizer_token_to_id(s->tok, "</think>", 8) >= 0;
    s->reasoning = s->opts.reasoning_parser == REASONING_PARSER_QWEN3 ||
                   (s->opts.reasoning_parser == REASONING_PARSER_AUTO && has_think);
    s->tool_format = s->opts.tool_call_parser_auto ? chat_template_tool_call_format(s->chat) : s->opts.tool_call_parser;
    s->tool_format_unknown = s->opts.tool_call_parser_auto && !s->tool_format && chat_template_takes_tools(s->chat);
    log_info("chat answers: reasoning %s; tool calls %s", s->reasoning ? "split off (<think>...</think>)" : "not split",
             s->tool_format ? s->tool_format->name : s->tool_format_unknown ? "not parsed (unknown format)" : "none");
    engine_set_scheduling_policy(s->engine, s->opts.scheduling_policy);
    if (!(s->vocab = token_vocab_new(s->tok, c->vocab_size, &s->load_err)) ||
        !(s->constraints = constraint_cache_new(s->vocab, STRUCTURED_CACHE_BYTES, &s->load_err)))
        s->load_rc = -1;
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
    /* Events of aborted requests may still be queued: replay them. Aborts
     * the engine had no step left to carry out end with no event at all,
     * so every request still here goes now (the engine is gone, its
     * clients too), then the loop's handles close. */
    api_on_wake(&s->wake);
    for (ApiRequest *r = s->requests, *next; r; r = next) {
        next = r->next;
        api_request_maybe_free(r); /* one with work on the pool goes when it returns */
    }
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
    if (busy && !s->cut_off) {
        /* Out of grace: every client still waiting gets a proper end (an
         * error event and [DONE], or a 503), then a moment to receive it. */
        log_info("shutdown: ending the %d unfinished requests", s->num_requests);
        s->cut_off = true;
        for (ApiRequest *r = s->requests; r; r = r->next) {
            api_abort(r);
            api_respond_shutdown(r);
        }
        return;
    }
    if (busy && waited < s->opts.shutdown_grace_seconds + SHUTDOWN_FLUSH_SECONDS) return;
    finish_shutdown(s);
}

static void begin_shutdown(ApiServer *s, const char *why) {
    if (s->shutting_down) { /* a second signal: do not wait */
        s->opts.shutdown_grace_seconds = 0;
        return;
    }
    s->shutting_down = true;
    s->shutdown_started = now_seconds();
    http_server_drain(s->http); /* kept-alive clients learn it from their next response */
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
    if (!(s->responses = response_store_new(&opts->responses_store))) {
        free(s);
        return error_set(err, "out of memory");
    }
    pthread_mutex_init(&s->events_lock, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct stat st;
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/config.json", opts->model_dir);
    if (stat(cfg, &st) != 0 && !gguf_is_file(opts->model_dir)) {
        response_store_free(s->responses);
        free(s);
        return error_set(err, "%s: no config.json (is this a Hugging Face model folder or a GGUF file?)",
                         opts->model_dir);
    }
    HttpHandlers handlers = {on_request, on_closed, on_dropped};
    HttpServerOptions ho = {opts->host,          opts->port,          opts->max_body_bytes,
                            DEFAULT_MAX_HEADER_BYTES, opts->header_timeout, opts->body_timeout,
                            opts->max_connections, opts->keep_alive_timeout,
                            opts->keep_alive_requests};
    s->http = http_server_start(s->loop, &ho, &handlers, s, err);
    if (!s->http) {
        response_store_free(s->responses);
        free(s);
        return -1;
    }
    int port = http_server_port(s->http);
    log_info("listening on http://%s:%d (loading %s)", opts->host, port, opts->model_dir);
    uv_async_init(s->loop, &s->wake, api_on_wake);
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
    if (s->shutting_down) {
        /* The last responses may still sit in the kernel's send buffers; in a
         * container they would die with us. They get what is left of the
         * grace, and never less than the flush time. */
        double left = s->shutdown_started + s->opts.shutdown_grace_seconds + SHUTDOWN_FLUSH_SECONDS -
                      now_seconds();
        int undelivered = tcp_drain(port, left > SHUTDOWN_FLUSH_SECONDS ? left : SHUTDOWN_FLUSH_SECONDS);
        if (undelivered > 0)
            log_info("shutdown: %d connections had not received everything by the deadline", undelivered);
    }
    uv_loop_close(s->loop);
    chat_template_free(s->chat);
    constraint_cache_free(s->constraints);
    response_store_free(s->responses);
    token_vocab_free(s->vocab);
    tokenizer_free(s->tok);
    if (s->opts.loader.close) s->opts.loader.close(&s->model);
    pthread_mutex_destroy(&s->events_lock);
    free(s);
    if (rc == 0) log_info("stopped");
    return rc;
}
