/*
 * api_parse.c - strict parsing of request fields (see api_parse.h), and the
 * first stage of a generation request on the loop (api_internal.h): its
 * fields, its model name and the presence of its prompt or messages, all
 * checked before any work is queued.
 */
#include "api_parse.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"

int json_token_ids(const json_t *list, long long limit, int32_t **ids, size_t *count) {
    *ids = NULL;
    *count = 0;
    if (!json_is_array(list)) return -1;
    size_t n = json_array_size(list);
    if (n == 0) return 0;
    int32_t *v = malloc(sizeof *v * n);
    if (!v) return -2;
    for (size_t i = 0; i < n; i++) {
        json_t *item = json_array_get(list, i);
        json_int_t x = json_is_integer(item) ? json_integer_value(item) : -1;
        if (x < 0 || x >= limit || x > INT32_MAX) {
            free(v);
            return -1;
        }
        v[i] = (int32_t)x;
    }
    *ids = v;
    *count = n;
    return 0;
}

/* Each reader: absent or null leaves *out alone and returns 0. */

static int get_int(const json_t *o, const char *key, long long lo, long long hi, long long *out,
                   ApiError *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return api_error(err, 400, key, "'%s' must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return api_error(err, 400, key, "'%s' must be in [%lld, %lld], got %lld", key, lo, hi, x);
    *out = x;
    return 0;
}

static int get_float(const json_t *o, const char *key, double lo, double hi, float *out,
                     ApiError *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return api_error(err, 400, key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi)
        return api_error(err, 400, key, "'%s' must be in [%g, %g], got %g", key, lo, hi, x);
    *out = (float)x;
    return 0;
}

static int get_bool(const json_t *o, const char *key, bool *out, ApiError *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return api_error(err, 400, key, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

static int get_stop(const json_t *o, OpenAIParams *p, ApiError *err) {
    json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) {
        if (json_string_length(v) == 0) return api_error(err, 400, "stop", "'stop' must not be empty");
        p->stop[p->num_stop++] = json_string_value(v);
        return 0;
    }
    if (!json_is_array(v)) return api_error(err, 400, "stop", "'stop' must be a string or a list of strings");
    if (json_array_size(v) > MAX_STOP_STRINGS)
        return api_error(err, 400, "stop", "at most %d stop strings", MAX_STOP_STRINGS);
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s) || json_string_length(s) == 0)
            return api_error(err, 400, "stop", "'stop' must be a string or a list of non-empty strings");
        p->stop[p->num_stop++] = json_string_value(s);
    }
    return 0;
}

static int get_stop_token_ids(const json_t *o, SamplingParams *sp, ApiError *err) {
    json_t *v = json_object_get(o, "stop_token_ids");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_array(v)) return api_error(err, 400, "stop_token_ids", "'stop_token_ids' must be a list of integers");
    if (json_array_size(v) > MAX_STOP_TOKEN_IDS)
        return api_error(err, 400, "stop_token_ids", "at most %d stop_token_ids", MAX_STOP_TOKEN_IDS);
    int32_t *ids;
    size_t n;
    int rc = json_token_ids(v, (long long)INT32_MAX + 1, &ids, &n);
    if (rc == -2) return api_error(err, 500, "stop_token_ids", "out of memory");
    if (rc) return api_error(err, 400, "stop_token_ids", "'stop_token_ids' must be a list of non-negative integers");
    memcpy(sp->stop_token_ids, ids, sizeof *ids * n);
    sp->num_stop_token_ids = (int)n;
    free(ids);
    return 0;
}

/* logit_bias: {"token id": bias}, as OpenAI (keys are strings of ids). */
static int get_logit_bias(const json_t *o, SamplingParams *sp, int vocab, ApiError *err) {
    json_t *v = json_object_get(o, "logit_bias");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v)) return api_error(err, 400, "logit_bias", "'logit_bias' must be an object of token id -> bias");
    if (json_object_size(v) > MAX_LOGIT_BIAS)
        return api_error(err, 400, "logit_bias", "'logit_bias' may hold at most %d tokens", MAX_LOGIT_BIAS);
    const char *key;
    json_t *bias;
    json_object_foreach(v, key, bias) {
        char *end;
        errno = 0;
        long id = strtol(key, &end, 10);
        if (end == key || *end || errno == ERANGE || id < 0)
            return api_error(err, 400, "logit_bias", "'logit_bias' keys must be token ids, got '%.40s'", key);
        if (id >= vocab)
            return api_error(err, 400, "logit_bias", "'logit_bias': token id %ld is outside the vocabulary [0, %d)", id, vocab);
        double b = json_is_number(bias) ? json_number_value(bias) : NAN;
        if (!isfinite(b) || b < -100 || b > 100)
            return api_error(err, 400, "logit_bias", "'logit_bias' values must be numbers in [-100, 100] (token %ld)", id);
        for (int i = 0; i < sp->num_logit_bias; i++)
            if (sp->logit_bias[i].token == (int32_t)id)
                return api_error(err, 400, "logit_bias", "'logit_bias' names token %ld twice", id);
        sp->logit_bias[sp->num_logit_bias++] = (LogitBias){(int32_t)id, (float)b};
    }
    return 0;
}

/* Fields we do not implement are refused rather than silently ignored when
 * they would change the output (OpenAI's and vLLM's); fields that change
 * nothing we return (user, metadata, store, service_tier, prediction,
 * cache_salt, ...) are accepted as unknown fields are. */
static int refuse_unsupported(const json_t *o, bool chat, ApiError *err) {
    static const char *const never_given[] = {
        "suffix", "functions", "function_call", "audio", "web_search_options", "verbosity", "bad_words", "allowed_token_ids", "prompt_logprobs", "logits_processors"};
    for (size_t i = 0; i < sizeof never_given / sizeof never_given[0]; i++) {
        json_t *v = json_object_get(o, never_given[i]);
        bool empty = json_is_null(v) || (json_is_object(v) && json_object_size(v) == 0) ||
                     (json_is_array(v) && json_array_size(v) == 0);
        if (v && !empty) {
            const char *hint = strncmp(never_given[i], "function", 8) == 0 ? " (use 'tools' and 'tool_choice')" : "";
            return api_error(err, 400, never_given[i], "'%s' is not supported%s", never_given[i], hint);
        }
    }
    static const char *const never_true[] = {"use_beam_search", "include_stop_str_in_output",
                                             "return_tokens_as_token_ids"};
    for (size_t i = 0; i < sizeof never_true / sizeof never_true[0]; i++)
        if (json_is_true(json_object_get(o, never_true[i])))
            return api_error(err, 400, never_true[i], "'%s' is not supported", never_true[i]);
    if (chat && json_is_true(json_object_get(o, "echo")))
        return api_error(err, 400, "echo", "'echo' is not supported in chat");
    if (json_is_false(json_object_get(o, "skip_special_tokens")))
        return api_error(err, 400, "skip_special_tokens", "'skip_special_tokens': false is not supported");
    json_t *modalities = json_object_get(o, "modalities");
    if (modalities && !json_is_null(modalities)) {
        size_t i;
        json_t *m;
        bool text_only = json_is_array(modalities);
        json_array_foreach(modalities, i, m) text_only &= json_is_string(m) && strcmp(json_string_value(m), "text") == 0;
        if (!text_only) return api_error(err, 400, "modalities", "only the \"text\" modality is supported");
    }
    json_t *best_of = json_object_get(o, "best_of");
    if (!chat && best_of && !json_is_null(best_of)) {
        json_t *n = json_object_get(o, "n");
        if (!json_is_integer(best_of) ||
            json_integer_value(best_of) != (json_is_integer(n) ? json_integer_value(n) : 1))
            return api_error(err, 400, "best_of", "'best_of' other than n is not supported");
    }
    return 0;
}

int api_parse_params(const json_t *o, bool chat, const ModelConfig *d, OpenAIParams *p,
                     ApiError *err) {
    memset(p, 0, sizeof *p);
    SamplingParams *sp = &p->sampling;
    *sp = sampling_params_default();
    sp->max_tokens = 0; /* not given: the caller picks the default */
    sp->temperature = d && d->has_temperature ? (float)d->temperature : 1.0f; /* OpenAI's default */
    if (d && d->has_top_p) sp->top_p = (float)d->top_p;
    if (d && d->has_top_k) sp->top_k = d->top_k;
    if (d && d->has_min_p) sp->min_p = (float)d->min_p;
    if (d && d->has_repetition_penalty) sp->repetition_penalty = (float)d->repetition_penalty;
    json_t *model = json_object_get(o, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model)) return api_error(err, 400, "model", "'model' must be a string");
        p->model = json_string_value(model);
    }
    long long n = 1, max_tokens = 0, top_k = sp->top_k, seed = -1, min_tokens = 0, truncate = 0, priority = 0;
    if (get_int(o, "max_tokens", 1, 1 << 30, &max_tokens, err)) return -1;
    if (chat && get_int(o, "max_completion_tokens", 1, 1 << 30, &max_tokens, err)) return -1;
    if (get_int(o, "n", 1, 128, &n, err) || get_int(o, "top_k", -1, 1 << 30, &top_k, err) ||
        get_int(o, "seed", INT64_MIN, INT64_MAX, &seed, err) ||
        get_float(o, "temperature", 0, 2, &sp->temperature, err) ||
        get_float(o, "top_p", 1e-9, 1, &sp->top_p, err) ||
        get_float(o, "min_p", 0, 1, &sp->min_p, err) ||
        get_float(o, "presence_penalty", -2, 2, &sp->presence_penalty, err) ||
        get_float(o, "frequency_penalty", -2, 2, &sp->frequency_penalty, err) ||
        get_float(o, "repetition_penalty", 1e-9, 100, &sp->repetition_penalty, err) ||
        get_bool(o, "ignore_eos", &sp->ignore_eos, err) || get_bool(o, "stream", &p->stream, err) ||
        get_stop(o, p, err) || get_stop_token_ids(o, sp, err) || refuse_unsupported(o, chat, err) ||
        get_int(o, "min_tokens", 0, 1 << 30, &min_tokens, err) ||
        get_int(o, "truncate_prompt_tokens", -1, 1 << 30, &truncate, err) ||
        get_int(o, "priority", INT32_MIN, INT32_MAX, &priority, err) ||
        get_logit_bias(o, sp, d ? d->vocab_size : INT32_MAX, err) || api_parse_constraint(o, p, err))
        return -1;
    if (truncate == 0 && json_object_get(o, "truncate_prompt_tokens") && !json_is_null(json_object_get(o, "truncate_prompt_tokens")))
        return api_error(err, 400, "truncate_prompt_tokens", "'truncate_prompt_tokens' must be -1 (the model's length) or at least 1");
    if (max_tokens > 0 && min_tokens > max_tokens)
        return api_error(err, 400, "min_tokens", "'min_tokens' (%lld) must not exceed max_tokens (%lld)", min_tokens, max_tokens);
    sp->min_tokens = (int)min_tokens;
    p->truncate_prompt_tokens = (int)truncate;
    p->priority = (int)priority;
    sp->max_tokens = (int)max_tokens;
    sp->n = (int)n;
    sp->top_k = (int)top_k;
    if (json_object_get(o, "seed") && !json_is_null(json_object_get(o, "seed"))) {
        sp->has_seed = true;
        sp->seed = (uint64_t)seed;
    }

    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return api_error(err, 400, "stream_options", "'stream_options' must be an object");
        if (!p->stream)
            return api_error(err, 400, "stream_options", "'stream_options' is only allowed with \"stream\": true");
        if (get_bool(so, "include_usage", &p->include_usage, err) ||
            get_bool(so, "continuous_usage_stats", &p->continuous_usage, err))
            return -1;
    }

    if (chat) {
        bool logprobs = false;
        long long top = 0;
        if (get_bool(o, "logprobs", &logprobs, err) || get_int(o, "top_logprobs", 0, MAX_TOP_LOGPROBS, &top, err))
            return -1;
        json_t *tl = json_object_get(o, "top_logprobs");
        if (tl && !json_is_null(tl) && !logprobs)
            return api_error(err, 400, "top_logprobs", "'top_logprobs' needs \"logprobs\": true");
        sp->logprobs = logprobs ? (int)top : -1;
    } else {
        long long lp = -1;
        if (get_int(o, "logprobs", 0, 5, &lp, err) || get_bool(o, "echo", &p->echo, err)) return -1;
        sp->logprobs = (int)lp;
    }
    return 0;
}

/* A completion or chat body (a Responses request's, translated, is a chat one). */
static int parse_generation(ApiRequest *r, bool chat, ApiError *err) {
    r->kind = chat ? API_CHAT : API_COMPLETION;
    json_t *effort = json_object_get(r->body, "reasoning_effort");
    if (effort && !json_is_null(effort) &&
        (chat ? api_reasoning_effort(r, r->body, effort, "reasoning_effort", err)
              : api_error(err, 400, "reasoning_effort", "'reasoning_effort' is for chat requests")))
        return -1;
    if (api_parse_params(r->body, chat, engine_model_config(r->srv->engine), &r->params, err))
        return -1;
    if (r->params.priority != 0 && r->srv->opts.scheduling_policy != SCHEDULING_PRIORITY)
        return api_error(err, 400, "priority", "'priority' needs a server started with --scheduling-policy priority");
    if (chat && api_parse_tools(r, err)) return -1;
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
    } else if (json_is_null(json_object_get(r->body, "prompt")) || !json_object_get(r->body, "prompt")) {
        return api_error(err, 400, "prompt", "'prompt' is required");
    }
    return 0;
}

/* A Responses request's error about a chat field it was translated to
 * names the field the client sent. */
static int responses_field_names(ApiError *err) {
    static const char *const names[][2] = {{"max_completion_tokens", "max_output_tokens"},
                                           {"response_format", "text.format"},
                                           {"messages", "input"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strncmp(err->param, names[i][0], strlen(names[i][0])) == 0)
            snprintf(err->param, sizeof err->param, "%s", names[i][1]);
    return -1;
}

int api_parse_request(ApiRequest *r, ApiError *err) {
    if (r->route != ROUTE_RESPONSES) return parse_generation(r, r->route == ROUTE_CHAT, err);
    if (api_responses_parse(r, err)) return -1;
    return parse_generation(r, true, err) ? responses_field_names(err) : 0;
}
