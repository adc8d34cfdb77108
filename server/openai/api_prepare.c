/*
 * api_prepare.c - the second stage of a generation request, on libuv's
 * worker pool so that long text never stalls the loop: the prompt (a
 * string, strings, ids or id lists) or the chat (rendered with the model's
 * template) becomes token ids, one list per prompt. Failures go into
 * r->error for the loop to answer. The chat rendering here is also what
 * /tokenize uses (api_tokenize.c).
 */
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"

#define MAX_PROMPTS 256

/* truncate_prompt_tokens: only the prompt's last N tokens are kept (-1:
 * max_model_len of them), as vLLM truncates, from the left; an echoed
 * prompt is what was kept. */
static int add_prompt(ApiRequest *r, int32_t *ids, int len, char *text) {
    int keep = r->params.truncate_prompt_tokens < 0 ? r->srv->max_model_len : r->params.truncate_prompt_tokens;
    if (keep > 0 && len > keep) {
        memmove(ids, ids + (len - keep), sizeof *ids * (size_t)keep);
        len = keep;
        if (text) {
            free(text);
            size_t text_len;
            Error e;
            if (tokenizer_decode(r->srv->tok, ids, (size_t)len, false, &text, &text_len, &e)) text = NULL;
        }
    }
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

static int take_ids(ApiRequest *r, const json_t *list, const char *param) {
    if (json_array_size(list) == 0) return api_error(&r->error, 400, param, "the prompt must not be empty");
    int vocab = engine_model_config(r->srv->engine)->vocab_size;
    int32_t *ids;
    size_t n;
    int rc = json_token_ids(list, vocab, &ids, &n);
    if (rc == -2) return api_error(&r->error, 500, param, "out of memory");
    if (rc) return api_error(&r->error, 400, param, "token ids must be integers in [0, %d) (the vocabulary)", vocab);
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

/* A request may bring its own template ("chat_template", vLLM's field) only
 * when the server trusts its clients with running one. */
char *api_render_chat(ApiRequest *r, size_t *len) {
    Error e;
    ChatTemplate *own = NULL;
    json_t *field = json_object_get(r->body, "chat_template");
    if (field && !json_is_null(field)) {
        if (!r->srv->opts.trust_request_chat_template) {
            api_error(&r->error, 400, "chat_template", "a request's own 'chat_template' is refused: "
                                                       "the server was not started with "
                                                       "--trust-request-chat-template");
            return NULL;
        }
        if (!json_is_string(field)) {
            api_error(&r->error, 400, "chat_template", "'chat_template' must be a string");
            return NULL;
        }
        own = chat_template_new(r->srv->tok, json_string_value(field), r->srv->opts.chat_content_format,
                                NULL, &e);
        if (!own) {
            api_error_from(&r->error, e.kind, "chat_template", e.msg);
            return NULL;
        }
    }
    /* --default-chat-template-kwargs sits under the request's own, for
     * every route that renders a chat through here. */
    char *text = chat_template_render_with(own ? own : r->srv->chat, r->body,
                                           r->srv->opts.default_chat_template_kwargs, chat_template_clock(), len,
                                           &e);
    if (!text) api_error_from(&r->error, e.kind, "messages", e.msg);
    chat_template_free(own);
    return text;
}

static int prepare_chat(ApiRequest *r) {
    size_t len;
    char *text = api_render_chat(r, &len);
    if (!text) return -1;
    int rc = encode_text(r, text, len, "messages");
    free(text);
    return rc;
}

void api_prepare(ApiRequest *r) {
    r->prompts = calloc(MAX_PROMPTS, sizeof *r->prompts);
    r->prompt_lens = calloc(MAX_PROMPTS, sizeof *r->prompt_lens);
    r->prompt_texts = calloc(MAX_PROMPTS, sizeof *r->prompt_texts);
    int rc = (!r->prompts || !r->prompt_lens || !r->prompt_texts)
                 ? api_error(&r->error, 500, NULL, "out of memory")
                 : r->kind == API_CHAT ? prepare_chat(r) : prepare_completion(r);
    if (rc == 0) rc = api_prepare_constraint(r);
    if (rc) r->failed = true;
}
