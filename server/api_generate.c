/*
 * api_generate.c - /v1/completions and /v1/chat/completions.
 *
 * A request goes through four stages (see api_internal.h for the state):
 *   begin    (loop)        fields parsed and checked, model name matched;
 *   prepare  (worker pool) prompts tokenized, or the chat rendered and
 *                          tokenized, so long text never stalls the loop;
 *   submit   (loop)        max_tokens settled against max_model_len, the
 *                          queue limit checked, one engine request per
 *                          prompt; streaming answers start here (headers
 *                          only once everything that could fail has passed);
 *   events   (loop)        each engine output becomes an SSE chunk, or
 *                          accumulates until the last choice finishes and
 *                          the whole body goes out.
 * Choices are numbered prompt * n + sample, as OpenAI numbers them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/log.h"
#include "api_internal.h"

#define MAX_PROMPTS 256
#define COMPLETIONS_DEFAULT_MAX_TOKENS 16 /* OpenAI's default for /v1/completions */

/* ---- begin (loop) --------------------------------------------------------- */

int api_generate_begin(ApiRequest *r, ApiError *err) {
    bool chat = r->route == ROUTE_CHAT;
    r->kind = chat ? API_CHAT : API_COMPLETION;
    if (openai_parse_params(r->body, chat, engine_model_config(r->srv->engine), &r->params, err))
        return -1;
    if (r->params.model && strcmp(r->params.model, r->srv->model_name) != 0) {
        api_error(err, 404, "model", "The model '%s' does not exist (this server serves '%s')",
                  r->params.model, r->srv->model_name);
        err->code = "model_not_found";
        return -1;
    }
    if (chat) {
        json_t *m = json_object_get(r->body, "messages");
        if (!json_is_array(m)) return api_error(err, 400, "messages", "'messages' must be a list");
        if (json_array_size(m) == 0) return api_error(err, 400, "messages", "'messages' must not be empty");
    } else if (!json_object_get(r->body, "prompt")) {
        return api_error(err, 400, "prompt", "'prompt' is required");
    }
    return 0;
}

/* ---- prepare (worker pool) --------------------------------------------------- */

static int add_prompt(ApiRequest *r, int32_t *ids, int len, char *text) {
    r->prompts[r->num_prompts] = ids;
    r->prompt_lens[r->num_prompts] = len;
    r->prompt_texts[r->num_prompts] = text;
    r->num_prompts++;
    return 0;
}

static int encode_text(ApiRequest *r, const char *text, size_t len, const char *param) {
    int32_t *ids;
    size_t n;
    Error e;
    if (len == 0) return api_error(&r->error, 400, param, "the prompt must not be empty");
    if (tokenizer_encode(r->srv->tok, text, len, &ids, &n, &e))
        return api_error(&r->error, 400, param, "%s", e.msg);
    if (n == 0) {
        free(ids);
        return api_error(&r->error, 400, param, "the prompt encodes to no tokens");
    }
    char *copy = r->params.echo ? strndup(text, len) : NULL;
    return add_prompt(r, ids, (int)n, copy);
}

static int take_ids(ApiRequest *r, const json_t *arr, const char *param) {
    size_t n = json_array_size(arr);
    if (n == 0) return api_error(&r->error, 400, param, "the prompt must not be empty");
    int vocab = engine_model_config(r->srv->engine)->vocab_size;
    int32_t *ids = malloc(sizeof(int32_t) * n);
    if (!ids) return api_error(&r->error, 500, param, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab) {
            free(ids);
            return api_error(&r->error, 400, param,
                             "token ids must be integers in [0, %d) (the vocabulary)", vocab);
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    char *text = NULL;
    size_t len;
    Error e;
    if (r->params.echo && tokenizer_decode(r->srv->tok, ids, n, false, &text, &len, &e)) text = NULL;
    return add_prompt(r, ids, (int)n, text);
}

/* "prompt": a string, a list of strings, a list of ids, or a list of id lists. */
static int prepare_completion(ApiRequest *r) {
    json_t *p = json_object_get(r->body, "prompt");
    if (json_is_string(p)) return encode_text(r, json_string_value(p), json_string_length(p), "prompt");
    if (!json_is_array(p) || json_array_size(p) == 0)
        return api_error(&r->error, 400, "prompt",
                         "'prompt' must be a string, a list of strings, a list of token ids or a "
                         "list of token id lists, and not empty");
    json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) return take_ids(r, p, "prompt");
    if (json_array_size(p) > MAX_PROMPTS)
        return api_error(&r->error, 400, "prompt", "at most %d prompts per request", MAX_PROMPTS);
    size_t i;
    json_t *item;
    json_array_foreach(p, i, item) {
        int rc;
        if (json_is_string(item) && json_is_string(first))
            rc = encode_text(r, json_string_value(item), json_string_length(item), "prompt");
        else if (json_is_array(item) && json_is_array(first))
            rc = take_ids(r, item, "prompt");
        else
            rc = api_error(&r->error, 400, "prompt", "'prompt' mixes strings, ids and lists");
        if (rc) return -1;
    }
    return 0;
}

static int prepare_chat(ApiRequest *r) {
    size_t len;
    Error e;
    char *text = chat_template_render(r->srv->chat_kind, r->body, &len, &e);
    if (!text) return api_error(&r->error, 400, "messages", "%s", e.msg);
    int rc = encode_text(r, text, len, "messages");
    free(text);
    return rc;
}

void api_generate_prepare(ApiRequest *r) {
    r->prompts = calloc(MAX_PROMPTS, sizeof *r->prompts);
    r->prompt_lens = calloc(MAX_PROMPTS, sizeof *r->prompt_lens);
    r->prompt_texts = calloc(MAX_PROMPTS, sizeof *r->prompt_texts);
    int rc = (!r->prompts || !r->prompt_lens || !r->prompt_texts)
                 ? api_error(&r->error, 500, NULL, "out of memory")
                 : r->kind == API_CHAT ? prepare_chat(r) : prepare_completion(r);
    if (rc) r->failed = true;
}

/* ---- submit (loop) ----------------------------------------------------------- */

static int context_error(ApiRequest *r, int prompt_len, int max_tokens, ApiError *err) {
    api_error(err, 400, r->kind == API_CHAT ? "messages" : "prompt",
              "This model's maximum context length is %d tokens. However, you requested %d tokens "
              "(%d in the %s, %d in the completion). Please reduce the length of the %s or "
              "completion.",
              r->srv->max_model_len, prompt_len + max_tokens, prompt_len,
              r->kind == API_CHAT ? "messages" : "prompt", max_tokens,
              r->kind == API_CHAT ? "messages" : "prompt");
    err->code = "context_length_exceeded";
    return -1;
}

/* The sampling parameters of one prompt, max_tokens settled. */
static int params_for(ApiRequest *r, int prompt_len, SamplingParams *sp, ApiError *err) {
    *sp = r->params.sampling;
    int room = r->srv->max_model_len - prompt_len;
    if (sp->max_tokens == 0) { /* not given */
        sp->max_tokens = r->kind == API_CHAT ? room : COMPLETIONS_DEFAULT_MAX_TOKENS;
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
    return 0;
}

void api_generate_submit(ApiRequest *r) {
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
                             .num_stop = r->params.num_stop, .on_output = api_on_engine_output,
                             .user = &r->contexts[i]};
        Error e;
        if (engine_submit(s->engine, &req, &r->engine_ids[i], &e)) {
            rc = api_error(&err, 400, NULL, "%s", e.msg);
            break;
        }
        r->num_submitted++;
        r->prompt_tokens += r->prompt_lens[i];
    }
    free(sps);
    if (rc) {
        /* Prompts already with the engine end with aborts; the request
         * stays until they have. */
        api_generate_abort(r);
        r->num_choices = r->num_submitted * r->params.sampling.n;
        api_respond_error(r, &err);
        return;
    }
    r->counted_queued = true;
    s->num_queued++;
    if (r->params.stream && http_stream_begin(r->ex, 200, "text/event-stream") != 0) {
        api_generate_abort(r); /* cannot answer: let it end */
        return;
    }
    r->status = 200;
}

/* ---- events (loop) ------------------------------------------------------------- */

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
        api_error(&e, 500, NULL, "%s", ev->error ? ev->error : "the request failed");
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

static Usage usage_of(const ApiRequest *r) {
    return (Usage){r->prompt_tokens, r->completion_tokens, r->cached_tokens};
}

static void respond_whole(ApiRequest *r) {
    if (r->error_message) {
        ApiError e;
        bool too_big = strstr(r->error_message, "KV cache too small") != NULL;
        api_error(&e, too_big ? 400 : 500, NULL, "%s", r->error_message);
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

void api_generate_event(ApiRequest *r, ApiEvent *ev) {
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
    if (ev->finish != FINISH_NONE) {
        c->finished = true;
        c->finish = ev->finish;
        if (ev->stop_string >= 0 && ev->stop_string < r->params.num_stop)
            c->stop_string = r->params.stop[ev->stop_string];
        r->num_finished++;
        s->metrics.finished[ev->finish]++;
        if (ev->finish == FINISH_ERROR && !r->error_message)
            r->error_message = strdup(ev->error ? ev->error : "the request failed");
    }
    json_t *lp = NULL;
    if (ev->has_token && ev->has_logprobs && r->params.sampling.logprobs >= 0) {
        json_t *target = c->logprobs;
        if (r->params.stream) target = lp = logprobs_new(r->kind);
        if (target)
            logprobs_append(target, r->kind, s->tok, ev->token, &ev->logprobs,
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

void api_generate_abort(ApiRequest *r) {
    for (int i = 0; i < r->num_submitted; i++) engine_abort(r->srv->engine, r->engine_ids[i]);
}

void api_generate_free(ApiRequest *r) {
    for (int i = 0; i < r->num_prompts; i++) {
        free(r->prompts[i]);
        if (r->prompt_texts) free(r->prompt_texts[i]);
    }
    free(r->prompts);
    free(r->prompt_lens);
    free(r->prompt_texts);
    for (int i = 0; r->choices && i < r->params.sampling.n * r->num_prompts; i++) {
        byte_buf_free(&r->choices[i].text);
        json_decref(r->choices[i].logprobs);
        free(r->choices[i].final_event);
    }
    free(r->choices);
    free(r->contexts);
    free(r->engine_ids);
    free(r->error_message);
}
