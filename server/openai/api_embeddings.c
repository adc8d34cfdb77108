/*
 * api_embeddings.c - POST /v1/embeddings, every stage of it: the body
 * checked on the loop, the texts tokenized on the worker pool, one engine
 * request per input (prefill-only, pooled as the model folder says:
 * engine.h's EngineRequest.pooling), and the answer written once every
 * input has its vector. Apart from the generation files because nothing
 * in between is shared with them: no sampling, no text out, no stream.
 *
 * Vectors: the engine hands back the raw pooled hidden state; here it is
 * cut to `dimensions` (Matryoshka, as Qwen3-Embedding documents) and, when
 * the folder has a Normalize module, L2-normalised after the cut - which is
 * what re-normalising a cut unit vector gives. A model without Normalize
 * gets its raw vector, cut but not rescaled. base64 is the little-endian
 * float32 bytes, as OpenAI sends it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "base/log.h"

#define MAX_EMBEDDING_INPUTS 2048 /* OpenAI's limit on one request's inputs */

/* A field that is absent or null is not given (SDKs send null for unset ones). */
static json_t *given(const json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

/* ---- the body (loop) -------------------------------------------------------------------------- */

/* Token-id inputs are read here (the loop has all it needs); texts wait for
 * the worker pool. */
static int take_token_lists(ApiRequest *r, const json_t *input, bool nested, ApiError *err) {
    int vocab = engine_model_config(r->srv->engine)->vocab_size;
    size_t n = nested ? json_array_size(input) : 1;
    r->prompts = calloc(n, sizeof *r->prompts);
    r->prompt_lens = calloc(n, sizeof *r->prompt_lens);
    if (!r->prompts || !r->prompt_lens) return api_error(err, 500, NULL, "out of memory");
    r->num_prompts = (int)n;
    for (size_t i = 0; i < n; i++) {
        const json_t *list = nested ? json_array_get(input, i) : input;
        size_t count;
        int rc = json_token_ids(list, vocab, &r->prompts[i], &count);
        if (rc == -2) return api_error(err, 500, NULL, "out of memory");
        if (rc) return api_error(err, 400, "input", "'input' token ids must be integers in [0, %d)", vocab);
        if (count == 0) return api_error(err, 400, "input", "'input' must not hold an empty list of token ids");
        r->prompt_lens[i] = (int)count;
    }
    return 0;
}

/* input: a string, a list of strings, a list of ids or a list of lists of ids. */
static int parse_input(ApiRequest *r, ApiError *err) {
    json_t *input = given(r->body, "input");
    if (!input) return api_error(err, 400, "input", "'input' is required");
    if (json_is_string(input)) {
        r->embed.num_texts = 1;
        return 0;
    }
    const char *shape = "'input' must be a string, a list of strings, a list of token ids or a list of lists of token ids";
    if (!json_is_array(input)) return api_error(err, 400, "input", "%s", shape);
    size_t n = json_array_size(input);
    if (n == 0) return api_error(err, 400, "input", "'input' must not be empty");
    const json_t *first = json_array_get(input, 0);
    bool texts = json_is_string(first), ids = json_is_integer(first), lists = json_is_array(first);
    size_t i;
    json_t *item;
    json_array_foreach(input, i, item)
        if ((texts && !json_is_string(item)) || (ids && !json_is_integer(item)) || (lists && !json_is_array(item)) ||
            !(texts || ids || lists))
            return api_error(err, 400, "input", "%s, not a mixture", shape);
    if (ids) return take_token_lists(r, input, false, err);
    if (n > MAX_EMBEDDING_INPUTS)
        return api_error(err, 400, "input", "'input' may hold at most %d inputs, got %zu", MAX_EMBEDDING_INPUTS, n);
    if (lists) return take_token_lists(r, input, true, err);
    r->embed.num_texts = (int)n;
    return 0;
}

int api_embeddings_parse(ApiRequest *r, ApiError *err) {
    ApiServer *s = r->srv;
    r->kind = API_COMPLETION;
    r->params.sampling.n = 1; /* one choice per input: api_engine.c numbers them prompt * n */
    json_t *model = given(r->body, "model");
    if (model && !json_is_string(model)) return api_error(err, 400, "model", "'model' must be a string");
    if (model && strcmp(json_string_value(model), s->model_name) != 0) {
        api_error(err, 404, "model", "The model '%s' does not exist (this server serves '%s')",
                  json_string_value(model), s->model_name);
        err->code = "model_not_found";
        return -1;
    }
    json_t *format = given(r->body, "encoding_format");
    if (format) {
        const char *f = json_string_value(format);
        if (!f || (strcmp(f, "float") != 0 && strcmp(f, "base64") != 0))
            return api_error(err, 400, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
        r->embed.base64 = strcmp(f, "base64") == 0;
    }
    int hidden = engine_model_config(s->engine)->hidden_size;
    json_t *dims = given(r->body, "dimensions");
    if (dims) {
        if (!json_is_integer(dims)) return api_error(err, 400, "dimensions", "'dimensions' must be an integer");
        json_int_t d = json_integer_value(dims);
        if (d < 1 || d > hidden)
            return api_error(err, 400, "dimensions", "'dimensions' must be in [1, %d] (the model's hidden size), got %lld",
                             hidden, (long long)d);
        r->embed.dimensions = (int)d;
    }
    json_t *user = given(r->body, "user");
    if (user && !json_is_string(user)) return api_error(err, 400, "user", "'user' must be a string");
    json_t *truncate = given(r->body, "truncate_prompt_tokens");
    if (truncate) {
        json_int_t t = json_is_integer(truncate) ? json_integer_value(truncate) : 0;
        if (t < -1 || t == 0 || t > (1 << 30))
            return api_error(err, 400, "truncate_prompt_tokens",
                             "'truncate_prompt_tokens' must be -1 (the model's length) or at least 1");
        r->embed.truncate = (int)t;
    }
    return parse_input(r, err);
}

/* ---- texts to ids, and the lengths (worker pool) ---------------------------------------------- */

static int too_long(ApiRequest *r, int i, int len) {
    api_error(&r->error, 400, "input",
              "This model's maximum context length is %d tokens. However, input %d has %d tokens. "
              "Please reduce the length of the input, or pass truncate_prompt_tokens.",
              r->srv->max_model_len, i, len);
    r->error.code = "context_length_exceeded";
    return -1;
}

static int prepare(ApiRequest *r) {
    if (r->embed.num_texts > 0) {
        json_t *input = json_object_get(r->body, "input");
        int n = r->embed.num_texts;
        r->prompts = calloc((size_t)n, sizeof *r->prompts);
        r->prompt_lens = calloc((size_t)n, sizeof *r->prompt_lens);
        if (!r->prompts || !r->prompt_lens) return api_error(&r->error, 500, NULL, "out of memory");
        r->num_prompts = n;
        for (int i = 0; i < n; i++) {
            const json_t *text = json_is_string(input) ? input : json_array_get(input, (size_t)i);
            size_t count;
            Error e;
            /* add_special_tokens, as sentence-transformers and vLLM encode an
             * input: Qwen3-Embedding's tokenizer appends <|endoftext|>. */
            if (tokenizer_encode(r->srv->tok, json_string_value(text), json_string_length(text),
                                 &r->prompts[i], &count, &e) ||
                tokenizer_add_special_tokens(r->srv->tok, &r->prompts[i], &count, &e))
                return api_error_from(&r->error, e.kind, "input", e.msg);
            if (count == 0) return api_error(&r->error, 400, "input", "input %d is empty (no tokens)", i);
            if (count > (size_t)INT32_MAX / 2) return too_long(r, i, INT32_MAX / 2);
            r->prompt_lens[i] = (int)count;
        }
    }
    int limit = r->srv->max_model_len;
    int keep = r->embed.truncate > 0 && r->embed.truncate < limit ? r->embed.truncate : limit;
    for (int i = 0; i < r->num_prompts; i++) {
        int len = r->prompt_lens[i];
        if (r->embed.truncate != 0 && len > keep) { /* the last tokens stay, as vLLM truncates (left) */
            memmove(r->prompts[i], r->prompts[i] + (len - keep), sizeof(int32_t) * (size_t)keep);
            r->prompt_lens[i] = len = keep;
        }
        if (len > limit) return too_long(r, i, len);
    }
    return 0;
}

void api_embeddings_prepare(ApiRequest *r) {
    if (prepare(r)) r->failed = true;
}

/* ---- to the engine (loop) --------------------------------------------------------------------- */

void api_embeddings_submit(ApiRequest *r) {
    ApiServer *s = r->srv;
    ApiError err = {0};
    if (r->failed) {
        api_respond_error(r, &r->error);
        return;
    }
    int hidden = engine_model_config(s->engine)->hidden_size, rc = 0;
    if (s->num_queued >= s->opts.max_queued_requests)
        rc = api_error(&err, 503, NULL, "the server is busy (%d requests waiting); retry later", s->num_queued);
    r->num_choices = r->num_prompts;
    if (rc == 0) {
        r->choices = calloc((size_t)r->num_choices, sizeof *r->choices);
        r->contexts = calloc((size_t)r->num_prompts, sizeof *r->contexts);
        r->engine_ids = calloc((size_t)r->num_prompts, sizeof *r->engine_ids);
        if (!r->choices || !r->contexts || !r->engine_ids) rc = api_error(&err, 500, NULL, "out of memory");
    }
    for (int i = 0; rc == 0 && i < r->num_choices; i++) {
        Choice *c = &r->choices[i];
        c->final_event = calloc(1, sizeof *c->final_event);
        c->embedding = calloc((size_t)hidden, sizeof *c->embedding);
        if (!c->final_event || !c->embedding) rc = api_error(&err, 500, NULL, "out of memory");
    }
    for (int i = 0; rc == 0 && i < r->num_prompts; i++) {
        r->contexts[i] = (PromptContext){r, i};
        EngineRequest req = {.prompt = r->prompts[i], .prompt_len = r->prompt_lens[i],
                             .pooling = s->pooling.mode, .on_output = api_on_engine_output,
                             .user = &r->contexts[i]};
        Error e;
        if (engine_submit(s->engine, &req, &r->engine_ids[i], &e)) {
            rc = api_error_from(&err, e.kind, "input", e.msg);
            break;
        }
        r->num_submitted++;
        r->prompt_tokens += r->prompt_lens[i];
    }
    if (rc) {
        api_abort(r); /* inputs already with the engine end with aborts; the request waits for them */
        r->num_choices = r->num_submitted;
        api_respond_error(r, &err);
        return;
    }
    r->counted_queued = true;
    s->num_queued++;
    r->status = 200;
}

/* ---- the answer (loop) ------------------------------------------------------------------------ */

/* v[0, dim) as the model folder and the request want it, in place. */
static void finish_vector(const ApiServer *s, float *v, int dim) {
    if (!s->pooling.normalize) return;
    double sum = 0;
    for (int j = 0; j < dim; j++) sum += (double)v[j] * v[j];
    /* sentence-transformers' Normalize: F.normalize, eps 1e-12 */
    float scale = (float)(1.0 / fmax(sqrt(sum), 1e-12));
    for (int j = 0; j < dim; j++) v[j] *= scale;
}

static int append_base64(ByteBuf *b, const float *v, int dim) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = (size_t)dim * 4;
    if (byte_buf_reserve(b, (n + 2) / 3 * 4)) return -1;
    unsigned char bytes[4];
    uint32_t acc = 0;
    int have = 0;
    char *o = b->data + b->len;
    for (int j = 0; j < dim; j++) {
        uint32_t u;
        memcpy(&u, &v[j], 4);
        for (int k = 0; k < 4; k++) bytes[k] = (unsigned char)(u >> (8 * k)); /* little-endian */
        for (int k = 0; k < 4; k++) {
            acc = acc << 8 | bytes[k];
            if (++have == 3) {
                *o++ = abc[acc >> 18 & 63], *o++ = abc[acc >> 12 & 63];
                *o++ = abc[acc >> 6 & 63], *o++ = abc[acc & 63];
                acc = 0, have = 0;
            }
        }
    }
    if (have == 1) *o++ = abc[acc >> 2 & 63], *o++ = abc[acc << 4 & 63], *o++ = '=', *o++ = '=';
    if (have == 2) *o++ = abc[acc >> 10 & 63], *o++ = abc[acc >> 4 & 63], *o++ = abc[acc << 2 & 63], *o++ = '=';
    b->len = (size_t)(o - b->data);
    return 0;
}

static int append(ByteBuf *b, const char *text) { return byte_buf_append(b, text, strlen(text)); }

/* The body, written directly: a vector of 1,024 floats through jansson
 * would be 1,024 objects to build and free. */
static int write_body(ApiRequest *r, ByteBuf *b) {
    ApiServer *s = r->srv;
    int hidden = engine_model_config(s->engine)->hidden_size;
    int dim = r->embed.dimensions > 0 ? r->embed.dimensions : hidden;
    char num[96];
    if (append(b, "{\"object\":\"list\",\"data\":[")) return -1;
    for (int i = 0; i < r->num_choices; i++) {
        float *v = r->choices[i].embedding;
        finish_vector(s, v, dim);
        snprintf(num, sizeof num, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "", i);
        if (append(b, num)) return -1;
        if (r->embed.base64) {
            if (append(b, "\"") || append_base64(b, v, dim) || append(b, "\"")) return -1;
        } else {
            if (append(b, "[")) return -1;
            for (int j = 0; j < dim; j++) {
                /* 9 significant digits: a float32 read back is the same float32 */
                snprintf(num, sizeof num, "%s%.9g", j ? "," : "", isfinite(v[j]) ? v[j] : 0.0f);
                if (append(b, num)) return -1;
            }
            if (append(b, "]")) return -1;
        }
        if (append(b, "}")) return -1;
    }
    json_t *model = json_string(s->model_name);
    char *name = model ? json_dumps(model, JSON_ENCODE_ANY) : NULL;
    json_decref(model);
    if (!name) return -1;
    int rc = append(b, "],\"model\":") || append(b, name);
    free(name);
    snprintf(num, sizeof num, ",\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d}}", r->prompt_tokens,
             r->prompt_tokens);
    return rc || append(b, num) ? -1 : 0;
}

void api_embeddings_event(ApiRequest *r, const ApiEvent *ev) {
    (void)ev;
    if (r->num_finished < r->num_choices || r->done || r->status != 200) return;
    r->done = true;
    histogram_observe(&r->srv->metrics.e2e_latency, now_seconds() - r->t_arrival);
    ApiError err;
    if (r->error_message) {
        api_error_from(&err, r->error_kind, NULL, r->error_message);
        api_respond_error(r, &err);
        return;
    }
    for (int i = 0; i < r->num_choices; i++)
        if (r->choices[i].finish != FINISH_STOP) { /* aborted: the client is gone, or the server stops */
            api_error(&err, 503, NULL, "the request was aborted before every input was embedded");
            api_respond_error(r, &err);
            return;
        }
    ByteBuf body = {0};
    if (write_body(r, &body)) {
        byte_buf_free(&body);
        api_error(&err, 500, NULL, "out of memory");
        api_respond_error(r, &err);
        return;
    }
    if (r->ex) http_respond(r->ex, 200, "application/json", body.data, body.len, NULL);
    byte_buf_free(&body);
    api_log_request(r, NULL);
}
