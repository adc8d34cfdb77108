/*
 * api_cors.c - `--allowed-origins` (see api_cors.h): the list read once at
 * start-up, then each request's Origin matched against it and the headers
 * a browser needs attached to the exchange, so that every answer - JSON,
 * an error, an SSE stream - carries them without each stage knowing.
 */
#include "api_cors.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The OpenAI SDKs' own headers too (x-stainless-*, openai-*): a preflight
 * that does not list them is refused by the browser. Sent when the
 * preflight names no headers; otherwise the ones it names are allowed, as
 * vLLM's default (allow_headers ["*"], which echoes them) does. */
#define DEFAULT_ALLOW_HEADERS                                                                     \
    "Authorization, Content-Type, Accept, OpenAI-Organization, OpenAI-Project, OpenAI-Beta, "     \
    "Idempotency-Key, X-Stainless-Arch, X-Stainless-Lang, X-Stainless-OS, "                       \
    "X-Stainless-Package-Version, X-Stainless-Retry-Count, X-Stainless-Runtime, "                 \
    "X-Stainless-Runtime-Version, X-Stainless-Timeout"
#define PREFLIGHT_MAX_AGE "600" /* seconds a browser may reuse a preflight's answer */

static int add_origin(CorsOrigins *o, const char *s, size_t len, Error *err) {
    while (len && (*s == ' ' || *s == '\t')) s++, len--;
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t')) len--;
    if (len == 0) return 0;
    if (len == 1 && *s == '*') {
        o->any = true;
        return 0;
    }
    /* An origin is what a browser sends: no path, no spaces, no CR/LF that
     * could split the header it is echoed into. */
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] <= ' ' || s[i] == 0x7f || s[i] == ',' || s[i] == '"')
            return error_set(err, "--allowed-origins: '%.*s' is not an origin", (int)len, s);
    const char *scheme_end = memchr(s, ':', len);
    if (!scheme_end || len < (size_t)(scheme_end - s) + 4 || memcmp(scheme_end, "://", 3) != 0 ||
        memchr(scheme_end + 3, '/', len - (size_t)(scheme_end + 3 - s)))
        return error_set(err, "--allowed-origins: '%.*s' is not an origin (scheme://host[:port], "
                              "no path)", (int)len, s);
    char **grown = realloc(o->origins, (size_t)(o->count + 1) * sizeof *grown);
    if (!grown) return error_set(err, "out of memory");
    o->origins = grown;
    if (!(o->origins[o->count] = strndup(s, len))) return error_set(err, "out of memory");
    o->count++;
    return 0;
}

int cors_origins_parse(const char *arg, CorsOrigins *out, Error *err) {
    CorsOrigins o = {0};
    const char *p = arg;
    while (*p == ' ' || *p == '\t') p++;
    int rc = 0;
    if (*p == '[') {
        json_error_t jerr;
        json_t *list = json_loads(p, 0, &jerr);
        if (!list || !json_is_array(list)) {
            json_decref(list);
            return error_set(err, "--allowed-origins: not a JSON list of strings (%s)",
                             list ? "not a list" : jerr.text);
        }
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) {
            if (!json_is_string(v)) {
                rc = error_set(err, "--allowed-origins: item %zu is not a string", i);
                break;
            }
            if ((rc = add_origin(&o, json_string_value(v), json_string_length(v), err))) break;
        }
        json_decref(list);
    } else {
        for (const char *at = p; rc == 0;) {
            const char *comma = strchr(at, ',');
            size_t len = comma ? (size_t)(comma - at) : strlen(at);
            rc = add_origin(&o, at, len, err);
            if (!comma) break;
            at = comma + 1;
        }
    }
    if (rc) {
        cors_origins_free(&o);
        return -1;
    }
    *out = o;
    return 0;
}

void cors_origins_free(CorsOrigins *o) {
    for (int i = 0; i < o->count; i++) free(o->origins[i]);
    free(o->origins);
    *o = (CorsOrigins){0};
}

bool cors_origins_enabled(const CorsOrigins *o) { return o->any || o->count > 0; }

/* Origins compare exactly, except the scheme and host, which browsers send
 * in lower case anyway; a case-insensitive match costs nothing. */
static bool allowed(const CorsOrigins *o, const char *origin) {
    if (!origin || !origin[0] || strpbrk(origin, "\r\n")) return false;
    if (o->any) return true;
    for (int i = 0; i < o->count; i++)
        if (strcasecmp(o->origins[i], origin) == 0) return true;
    return false;
}

/* Access-Control-Request-Headers, if it is a plain list of header names. */
static bool header_list_ok(const char *s) {
    if (!s || !s[0] || strlen(s) > 1024) return false;
    for (; *s; s++)
        if (!(*s == ',' || *s == ' ' || *s == '-' || *s == '_' || *s == '.' ||
              (*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
            return false;
    return true;
}

bool cors_prepare(const CorsOrigins *o, HttpExchange *ex) {
    if (!cors_origins_enabled(o)) return false;
    /* The answer depends on Origin whenever CORS is on: caches must key on it. */
    http_add_header(ex, "Vary: Origin");
    const char *origin = http_header(ex, "Origin");
    if (!allowed(o, origin)) return false;
    char line[1100];
    int n = snprintf(line, sizeof line, "Access-Control-Allow-Origin: %s", origin);
    if (n < 0 || (size_t)n >= sizeof line) return false; /* an origin that long is nobody's */
    /* A header that is lost to memory only costs the browser's view of this
     * answer; the request is still served. */
    http_add_header(ex, line);
    return strcmp(http_method(ex), "OPTIONS") == 0 && http_header(ex, "Access-Control-Request-Method");
}

void cors_answer_preflight(HttpExchange *ex) {
    const char *asked = http_header(ex, "Access-Control-Request-Headers");
    char headers[1100];
    snprintf(headers, sizeof headers, "Access-Control-Allow-Headers: %s",
             header_list_ok(asked) ? asked : DEFAULT_ALLOW_HEADERS);
    const char *extra[] = {"Access-Control-Allow-Methods: GET, POST, DELETE, OPTIONS", headers,
                           "Access-Control-Max-Age: " PREFLIGHT_MAX_AGE, NULL};
    http_respond(ex, 204, NULL, "", 0, extra);
}
