/*
 * api_tokenize.c - POST /tokenize {"prompt"} or {"messages"} and POST
 * /detokenize {"tokens"}, in vLLM's shapes. They share a generation
 * request's preparation (the chat template, the id-list reader) and stop
 * there: the work runs on the worker pool, the answer goes out on the loop.
 */
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"

static json_t *detokenize(ApiRequest *r) {
    int32_t *ids = NULL;
    size_t n = 0, len;
    char *text = NULL;
    Error e;
    json_t *out = NULL;
    int rc = json_token_ids(json_object_get(r->body, "tokens"), (long long)INT32_MAX + 1, &ids, &n);
    if (rc == -2) api_error(&r->error, 500, "tokens", "out of memory");
    else if (rc) api_error(&r->error, 400, "tokens", "'tokens' must be a list of token ids");
    else if (tokenizer_decode(r->srv->tok, ids, n, false, &text, &len, &e))
        api_error(&r->error, 400, "tokens", "%s", e.msg);
    else out = json_pack("{s:s%}", "prompt", text, len);
    free(text);
    free(ids);
    return out;
}

static json_t *tokenize(ApiRequest *r) {
    json_t *prompt = json_object_get(r->body, "prompt");
    char *rendered = NULL;
    const char *text = NULL;
    size_t len = 0;
    json_t *messages = json_object_get(r->body, "messages");
    if (messages && !json_is_null(messages)) {
        text = rendered = api_render_chat(r, &len);
    } else if (json_is_string(prompt)) {
        text = json_string_value(prompt);
        len = json_string_length(prompt);
    } else {
        api_error(&r->error, 400, "prompt", "give 'prompt' (a string) or 'messages'");
    }
    int32_t *ids = NULL;
    size_t n = 0;
    Error e;
    json_t *out = NULL;
    if (text && tokenizer_encode(r->srv->tok, text, len, &ids, &n, &e)) {
        api_error(&r->error, 400, "prompt", "%s", e.msg);
    } else if (text) {
        json_t *list = json_array();
        for (size_t i = 0; list && i < n; i++) json_array_append_new(list, json_integer(ids[i]));
        out = json_pack("{s:i, s:i, s:o}", "count", (int)n, "max_model_len", r->srv->max_model_len,
                        "tokens", list);
    }
    free(ids);
    free(rendered);
    return out;
}

void api_tokenize(ApiRequest *r) {
    json_t *out = r->route == ROUTE_DETOKENIZE ? detokenize(r) : tokenize(r);
    if (out) r->result = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    if (!r->result && r->error.status == 0) api_error(&r->error, 500, NULL, "out of memory");
    r->failed = r->result == NULL;
}

void api_tokenize_respond(ApiRequest *r) {
    if (r->failed) {
        api_respond_error(r, &r->error);
        return;
    }
    r->status = 200;
    http_respond(r->ex, 200, "application/json", r->result, strlen(r->result), NULL);
    api_log_request(r, NULL);
}
