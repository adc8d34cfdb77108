/*
 * openai_json.c - OpenAI JSON shapes (see openai_json.h).
 */
#include "openai_json.h"

#include <stdlib.h>
#include <string.h>

const char *finish_reason_name(FinishReason f) {
    switch (f) {
    case FINISH_STOP: return "stop";
    case FINISH_LENGTH: return "length";
    case FINISH_ABORT: return "abort";
    case FINISH_ERROR: return "error";
    default: return NULL;
    }
}

static json_t *finish_json(FinishReason f) {
    const char *name = finish_reason_name(f);
    return name ? json_string(name) : json_null();
}

/* The thinking under both names vLLM has used: "reasoning" (its current
 * one) and "reasoning_content" (its older one, which most clients read), so
 * clients written against either see it. value is stolen; NULL: out of
 * memory, and neither is set. */
static void set_reasoning(json_t *m, json_t *value) {
    if (!value) return;
    json_object_set(m, "reasoning", value);
    json_object_set_new(m, "reasoning_content", value);
}

/* A chat message or delta. A plain stream delta always carries content (""
 * on a logprobs-only chunk, as before parsing existed); a parsed one only
 * the parts it has. */
static json_t *message_json(bool chunk, const ChoiceOut *c) {
    json_t *m = json_object();
    if (!m) return NULL;
    bool has_text = c->text_len > 0, has_reasoning = c->reasoning_len > 0;
    json_t *text = json_stringn(c->text ? c->text : "", c->text ? c->text_len : 0);
    if (c->role || !chunk) json_object_set_new(m, "role", json_string("assistant"));
    if (!chunk) {
        bool null_content = c->parsed && !has_text && c->tool_calls && json_array_size(c->tool_calls) > 0;
        json_object_set_new(m, "content", null_content ? json_null() : json_incref(text));
        if (c->parsed) set_reasoning(m, has_reasoning ? json_stringn(c->reasoning, c->reasoning_len) : json_null());
    } else {
        bool plain_empty = !c->parsed && c->finish == FINISH_NONE;
        if (c->role || has_text || plain_empty) json_object_set_new(m, "content", json_incref(text));
        if (has_reasoning) set_reasoning(m, json_stringn(c->reasoning, c->reasoning_len));
    }
    json_decref(text);
    if (c->tool_calls && json_array_size(c->tool_calls) > 0) json_object_set(m, "tool_calls", c->tool_calls);
    return m;
}

static json_t *choice_json(ApiKind kind, bool chunk, const ChoiceOut *c) {
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "index", json_integer(c->index));
    if (kind == API_COMPLETION)
        json_object_set_new(o, "text", json_stringn(c->text ? c->text : "", c->text ? c->text_len : 0));
    else
        json_object_set_new(o, chunk ? "delta" : "message", message_json(chunk, c));
    json_decref(c->tool_calls);
    json_object_set_new(o, "logprobs", c->logprobs ? c->logprobs : json_null());
    json_object_set_new(o, "finish_reason", c->finish_tool_calls && c->finish != FINISH_NONE ? json_string("tool_calls")
                                                                                            : finish_json(c->finish));
    if (c->finish != FINISH_NONE || !chunk)
        json_object_set_new(o, "stop_reason", c->stop_str ? json_string(c->stop_str) : json_null());
    return o;
}

json_t *openai_response(ApiKind kind, bool chunk, const char *id, long created, const char *model,
                        const ChoiceOut *choices, int num_choices, const Usage *usage) {
    const char *object = kind == API_COMPLETION ? "text_completion"
                         : chunk                 ? "chat.completion.chunk"
                                                 : "chat.completion";
    json_t *list = json_array();
    for (int i = 0; list && i < num_choices; i++) json_array_append_new(list, choice_json(kind, chunk, &choices[i]));
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", id, "object", object, "created",
                          (json_int_t)created, "model", model, "choices", list);
    if (o && usage) {
        json_t *u = json_pack("{s:i, s:i, s:i}", "prompt_tokens", usage->prompt_tokens,
                              "completion_tokens", usage->completion_tokens, "total_tokens",
                              usage->prompt_tokens + usage->completion_tokens);
        if (u && usage->cached_tokens > 0)
            json_object_set_new(u, "prompt_tokens_details",
                                json_pack("{s:i}", "cached_tokens", usage->cached_tokens));
        json_object_set_new(o, "usage", u);
    } else if (o && !chunk) {
        json_object_set_new(o, "usage", json_null());
    }
    return o;
}

json_t *logprobs_new(ApiKind kind) {
    if (kind == API_CHAT) return json_pack("{s:[]}", "content");
    return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs",
                     "text_offset");
}

/* The token as text (the API's "token") and its raw bytes. */
static json_t *token_string(const Tokenizer *tok, int32_t id, json_t **bytes) {
    char *text = NULL;
    size_t len = 0;
    Error err;
    json_t *s = tokenizer_decode(tok, &id, 1, false, &text, &len, &err) == 0 ? json_stringn(text, len)
                                                                           : json_string("");
    free(text);
    if (bytes) {
        *bytes = json_array();
        const char *b;
        size_t n;
        if (tokenizer_token_bytes(tok, id, &b, &n, &err) == 0)
            for (size_t i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((unsigned char)b[i]));
    }
    return s;
}

static size_t utf8_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

int logprobs_append(json_t *lp, ApiKind kind, const Tokenizer *tok, int32_t token,
                    const SampleLogprobs *sl, int top_n, size_t *text_offset) {
    if (kind == API_CHAT) {
        json_t *bytes, *top = json_array();
        json_t *entry = json_pack("{s:o, s:f}", "token", token_string(tok, token, &bytes), "logprob",
                                  (double)sl->logprob);
        if (!entry) return -1;
        json_object_set_new(entry, "bytes", bytes);
        for (int i = 0; i < sl->num_top && i < top_n; i++) {
            json_t *tb;
            json_t *t = json_pack("{s:o, s:f}", "token", token_string(tok, sl->top_ids[i], &tb),
                                  "logprob", (double)sl->top_logprobs[i]);
            if (t) json_object_set_new(t, "bytes", tb);
            json_array_append_new(top, t);
        }
        json_object_set_new(entry, "top_logprobs", top);
        return json_array_append_new(json_object_get(lp, "content"), entry);
    }
    json_t *tstr = token_string(tok, token, NULL);
    size_t len = json_string_length(tstr);
    json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)*text_offset));
    *text_offset += utf8_chars(json_string_value(tstr), len);
    json_array_append_new(json_object_get(lp, "tokens"), tstr);
    json_array_append_new(json_object_get(lp, "token_logprobs"), json_real(sl->logprob));
    json_t *top = json_object();
    for (int i = 0; i < sl->num_top && i < top_n; i++) {
        json_t *k = token_string(tok, sl->top_ids[i], NULL);
        json_object_set_new(top, json_string_value(k), json_real(sl->top_logprobs[i]));
        json_decref(k);
    }
    return json_array_append_new(json_object_get(lp, "top_logprobs"), top);
}

char *openai_error_body(const ApiError *e, size_t *len) {
    json_t *o = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", e->message, "type",
                          e->type ? e->type : "invalid_request_error", "param",
                          e->param[0] ? json_string(e->param) : json_null(), "code",
                          e->code ? json_string(e->code) : json_null());
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (s) *len = strlen(s);
    return s;
}

char *sse_event(json_t *chunk, size_t *len) {
    char *body = json_dumps(chunk, JSON_COMPACT | JSON_REAL_PRECISION(9));
    if (!body) return NULL;
    size_t n = strlen(body);
    char *out = malloc(n + 9);
    if (out) {
        memcpy(out, "data: ", 6);
        memcpy(out + 6, body, n);
        memcpy(out + 6 + n, "\n\n", 3);
        *len = n + 8;
    }
    free(body);
    return out;
}
