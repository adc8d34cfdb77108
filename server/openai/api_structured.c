/*
 * api_structured.c - a request's output constraint: OpenAI's
 * response_format and vLLM's structured_outputs / guided_* fields read on
 * the loop (exactly one constraint, every option either honoured or a 400
 * naming it), compiled on the worker pool through the server's constraint
 * cache, and where it starts: with a reasoning model's chat still
 * thinking, after </think> (vLLM's behaviour), else at the first token.
 */
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "base/log.h"

typedef struct Found {
    int kind; /* ConstraintKind, -1 none */
    const json_t *value;
    const char *field;
} Found;

static int found_one(Found *f, int kind, const json_t *value, const char *field, ApiError *err) {
    if (f->kind >= 0)
        return api_error(err, 400, field, "only one structured output constraint per request: '%s' and '%s' both given",
                         f->field, field);
    *f = (Found){kind, value, field};
    return 0;
}

static bool given(const json_t *v) { return v && !json_is_null(v); }

static int check_value(int kind, const json_t *v, const char *field, ApiError *err) {
    switch (kind) {
    case CONSTRAINT_JSON_SCHEMA:
        if (!json_is_object(v) && !json_is_boolean(v) && !json_is_string(v))
            return api_error(err, 400, field, "'%s' must be a JSON Schema (an object)", field);
        return 0;
    case CONSTRAINT_REGEX:
    case CONSTRAINT_GRAMMAR:
        if (!json_is_string(v) || json_string_length(v) == 0)
            return api_error(err, 400, field, "'%s' must be a non-empty string", field);
        return 0;
    case CONSTRAINT_CHOICE:
        if (!json_is_array(v) || json_array_size(v) == 0)
            return api_error(err, 400, field, "'%s' must be a non-empty list of strings", field);
        for (size_t i = 0; i < json_array_size(v); i++)
            if (!json_is_string(json_array_get(v, i)))
                return api_error(err, 400, field, "'%s' must be a list of strings", field);
        return 0;
    }
    return 0;
}

static int parse_response_format(const json_t *rf, Found *f, ApiError *err) {
    if (!json_is_object(rf)) return api_error(err, 400, "response_format", "'response_format' must be an object");
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!type) return api_error(err, 400, "response_format", "'response_format.type' must be a string");
    if (strcmp(type, "text") == 0) return 0;
    if (strcmp(type, "json_object") == 0) return found_one(f, CONSTRAINT_JSON_OBJECT, NULL, "response_format", err);
    if (strcmp(type, "json_schema") != 0)
        return api_error(err, 400, "response_format",
                         "'response_format.type' %s is not supported (text, json_object or json_schema)", type);
    const json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js))
        return api_error(err, 400, "response_format", "'response_format.json_schema' must be an object");
    const json_t *schema = json_object_get(js, "schema");
    if (!given(schema)) /* OpenAI allows it absent: any JSON value */
        schema = NULL;
    else if (!json_is_object(schema) && !json_is_boolean(schema))
        return api_error(err, 400, "response_format", "'response_format.json_schema.schema' must be an object");
    const json_t *strict = json_object_get(js, "strict");
    if (given(strict) && !json_is_boolean(strict))
        return api_error(err, 400, "response_format", "'response_format.json_schema.strict' must be a boolean");
    /* strict or not, the output follows the schema exactly. */
    return found_one(f, CONSTRAINT_JSON_SCHEMA, schema, "response_format", err);
}

/* vLLM's StructuredOutputsParams: one of json, regex, choice, grammar,
 * json_object; options that would change the output are refused. */
static int parse_structured_outputs(const json_t *so, Found *f, ApiError *err) {
    if (!json_is_object(so)) return api_error(err, 400, "structured_outputs", "'structured_outputs' must be an object");
    static const struct {
        const char *name, *field;
        int kind;
    } kinds[] = {{"json", "structured_outputs.json", CONSTRAINT_JSON_SCHEMA},
                 {"regex", "structured_outputs.regex", CONSTRAINT_REGEX},
                 {"choice", "structured_outputs.choice", CONSTRAINT_CHOICE},
                 {"grammar", "structured_outputs.grammar", CONSTRAINT_GRAMMAR}};
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)so, key, v) {
        if (!given(v)) continue;
        bool known = false;
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
            if (strcmp(key, kinds[i].name) != 0) continue;
            if (check_value(kinds[i].kind, v, kinds[i].field, err) || found_one(f, kinds[i].kind, v, kinds[i].field, err))
                return -1;
            known = true;
        }
        if (known) continue;
        if (strcmp(key, "json_object") == 0) {
            if (!json_is_boolean(v))
                return api_error(err, 400, "structured_outputs", "'structured_outputs.json_object' must be a boolean");
            if (json_is_true(v) && found_one(f, CONSTRAINT_JSON_OBJECT, NULL, "structured_outputs.json_object", err))
                return -1;
        } else if (strcmp(key, "disable_fallback") == 0 || strcmp(key, "disable_any_whitespace") == 0) {
            /* No fallback backend exists, and the output is always compact. */
            if (!json_is_boolean(v))
                return api_error(err, 400, "structured_outputs", "'structured_outputs.%s' must be a boolean", key);
        } else {
            return api_error(err, 400, "structured_outputs", "'structured_outputs.%s' is not supported", key);
        }
    }
    return 0;
}

int api_parse_constraint(const json_t *body, OpenAIParams *p, ApiError *err) {
    Found f = {-1, NULL, NULL};
    p->constraint_kind = -1;
    p->constraint = NULL;
    const json_t *rf = json_object_get(body, "response_format");
    if (given(rf) && parse_response_format(rf, &f, err)) return -1;
    const json_t *so = json_object_get(body, "structured_outputs");
    if (given(so) && parse_structured_outputs(so, &f, err)) return -1;
    static const struct {
        const char *name;
        int kind;
    } guided[] = {{"guided_json", CONSTRAINT_JSON_SCHEMA},
                  {"guided_regex", CONSTRAINT_REGEX},
                  {"guided_choice", CONSTRAINT_CHOICE},
                  {"guided_grammar", CONSTRAINT_GRAMMAR}};
    for (size_t i = 0; i < sizeof guided / sizeof guided[0]; i++) {
        const json_t *v = json_object_get(body, guided[i].name);
        if (!given(v)) continue;
        if (check_value(guided[i].kind, v, guided[i].name, err) || found_one(&f, guided[i].kind, v, guided[i].name, err))
            return -1;
    }
    /* vLLM's older companions of guided_*: refused where they change the output. */
    const json_t *ws = json_object_get(body, "guided_whitespace_pattern");
    if (given(ws)) return api_error(err, 400, "guided_whitespace_pattern", "'guided_whitespace_pattern' is not supported");
    const json_t *backend = json_object_get(body, "guided_decoding_backend");
    if (given(backend) && !json_is_string(backend))
        return api_error(err, 400, "guided_decoding_backend", "'guided_decoding_backend' must be a string");
    p->constraint_kind = f.kind;
    p->constraint = f.value;
    p->constraint_field = f.field;
    return 0;
}

/* The constraint's text as the cache keys it. */
static char *constraint_text(const OpenAIParams *p, size_t *len) {
    const json_t *v = p->constraint;
    if (p->constraint_kind == CONSTRAINT_JSON_OBJECT) return *len = 0, strdup("");
    if (p->constraint_kind == CONSTRAINT_JSON_SCHEMA && !v) return *len = 2, strdup("{}");
    if (json_is_string(v) && p->constraint_kind != CONSTRAINT_JSON_SCHEMA) {
        *len = json_string_length(v);
        char *s = malloc(*len + 1);
        if (s) memcpy(s, json_string_value(v), *len + 1);
        return s;
    }
    if (json_is_string(v)) { /* guided_json may be the schema as a string */
        *len = json_string_length(v);
        return strndup(json_string_value(v), *len);
    }
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    *len = s ? strlen(s) : 0;
    return s;
}

static int last_think_tag(const ApiRequest *r, int prompt_index, int32_t *close_id) {
    return chat_prompt_last_think_tag(r->srv->tok, r->prompts[prompt_index], r->prompt_lens[prompt_index], close_id);
}

bool api_prompt_in_reasoning(const ApiRequest *r, int prompt_index) {
    int32_t close;
    return r->kind == API_CHAT && last_think_tag(r, prompt_index, &close) == 1;
}

/* Where the constraint starts in a chat: a reasoning model that has not
 * closed its thinking in the prompt thinks first (the template may have
 * opened it, or the model will), so the constraint waits for </think> -
 * unless the server does not treat the answer as reasoning. */
static int32_t start_after(const ApiRequest *r) {
    if (r->kind != API_CHAT || r->num_prompts != 1 || !r->srv->reasoning) return -1;
    int32_t close;
    int last = last_think_tag(r, 0, &close);
    return close >= 0 && last != 0 ? close : -1;
}

int api_prepare_constraint(ApiRequest *r) {
    const OpenAIParams *p = &r->params;
    if (p->constraint_kind < 0) return 0;
    if (!r->srv->constraints)
        return api_error(&r->error, 400, p->constraint_field, "structured outputs need the model's tokenizer");
    size_t len;
    char *text = constraint_text(p, &len);
    if (!text) return api_error(&r->error, 500, NULL, "out of memory");
    Error e;
    bool hit;
    ConstraintCache *cache = r->srv->constraints;
    r->constraint = r->constraint_builder
                        ? constraint_cache_get_built(cache, r->constraint_builder, text, len, &hit, &e)
                        : constraint_cache_get(cache, (ConstraintKind)p->constraint_kind, text, len, &hit, &e);
    free(text);
    if (!r->constraint) return api_error_from(&r->error, e.kind, p->constraint_field, e.msg);
    if (!hit)
        log_info("structured output: compiled a %s constraint in %.1f ms", constraint_name(r->constraint),
                 constraint_compile_ms(r->constraint));
    r->constraint_after = start_after(r);
    return 0;
}
