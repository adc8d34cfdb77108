/*
 * test_server_webui.c - CORS (--allowed-origins), against the real
 * `nanovllm serve` on the tiny model: preflights answered without the
 * key, the Allow-Origin on JSON, error and streamed answers for an allowed
 * origin and never for another, both forms of the flag, bad lists refused.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "helpers.h"
#include "server_helpers.h"

/* The value of header NAME in curl's -D dump (malloc'ed), or NULL. */
static char *header_value(const char *headers, const char *name) {
    size_t n = strlen(name);
    for (const char *line = headers; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncasecmp(line, name, n) == 0 && line[n] == ':') {
            const char *v = line + n + 1;
            while (*v == ' ') v++;
            size_t len = strcspn(v, "\r\n");
            return strndup(v, len);
        }
    }
    return NULL;
}

static void expect_header(const HttpResult *r, const char *name, const char *want) {
    char *got = header_value(r->headers, name);
    cr_expect(got && strcmp(got, want) == 0, "%s: '%s', expected '%s'\n%s", name, got ? got : "(none)",
              want, r->headers);
    free(got);
}

static void expect_no_header(const HttpResult *r, const char *name) {
    char *got = header_value(r->headers, name);
    cr_expect(!got, "%s: '%s', expected none\n%s", name, got, r->headers);
    free(got);
}

static const char PREFLIGHT[] = "-H 'Origin: %s' -H 'Access-Control-Request-Method: POST' %s";

Test(webui, cors_allowed_origins, .timeout = 120) {
    TestServer s;
    server_start(&s, "--api-key sekrit --allowed-origins 'https://a.example, http://localhost:3000'");
    char args[512];
    /* A preflight needs no key, and allows what the OpenAI SDK sends. */
    snprintf(args, sizeof args, PREFLIGHT, "https://a.example", "");
    HttpResult r = http(&s, "OPTIONS", "/v1/chat/completions", NULL, args);
    cr_expect_eq(r.status, 204, "%d %s", r.status, r.body);
    cr_expect_str_empty(r.body);
    expect_header(&r, "Access-Control-Allow-Origin", "https://a.example");
    expect_header(&r, "Vary", "Origin");
    expect_header(&r, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
    expect_header(&r, "Access-Control-Max-Age", "600");
    char *allow = header_value(r.headers, "Access-Control-Allow-Headers");
    cr_expect(allow && strstr(allow, "Authorization") && strstr(allow, "Content-Type") &&
              strstr(allow, "X-Stainless-Package-Version"), "%s", allow);
    free(allow);
    http_free(&r);
    /* The headers a preflight asks for are the ones allowed. */
    snprintf(args, sizeof args, PREFLIGHT, "http://localhost:3000",
             "-H 'Access-Control-Request-Headers: authorization, content-type, x-custom'");
    r = http(&s, "OPTIONS", "/v1/responses/abc", NULL, args);
    cr_expect_eq(r.status, 204);
    expect_header(&r, "Access-Control-Allow-Origin", "http://localhost:3000");
    expect_header(&r, "Access-Control-Allow-Headers", "authorization, content-type, x-custom");
    http_free(&r);
    /* Another origin's preflight is not one: the request as before (no key: 401). */
    snprintf(args, sizeof args, PREFLIGHT, "https://evil.example", "");
    r = http(&s, "OPTIONS", "/v1/chat/completions", NULL, args);
    cr_expect_eq(r.status, 401);
    expect_no_header(&r, "Access-Control-Allow-Origin");
    expect_header(&r, "Vary", "Origin");
    http_free(&r);

    /* JSON answers and errors carry it for an allowed origin... */
    r = http(&s, "GET", "/v1/models", NULL, "-H 'Origin: https://a.example' -H 'Authorization: Bearer sekrit'");
    cr_expect_eq(r.status, 200);
    expect_header(&r, "Access-Control-Allow-Origin", "https://a.example");
    http_free(&r);
    r = http(&s, "GET", "/v1/models", NULL, "-H 'Origin: https://a.example'");
    cr_expect_eq(r.status, 401);
    expect_header(&r, "Access-Control-Allow-Origin", "https://a.example");
    http_free(&r);
    r = http(&s, "POST", "/v1/completions", "{\"prompt\": 1}",
             "-H 'Origin: https://a.example' -H 'Authorization: Bearer sekrit'");
    cr_expect_eq(r.status, 400);
    expect_header(&r, "Access-Control-Allow-Origin", "https://a.example");
    http_free(&r);
    /* ...and so does a stream. */
    r = http(&s, "POST", "/v1/chat/completions",
             "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 4, \"stream\": true}",
             "-H 'Origin: http://localhost:3000' -H 'Authorization: Bearer sekrit'");
    cr_expect_eq(r.status, 200);
    expect_header(&r, "Content-Type", "text/event-stream");
    expect_header(&r, "Access-Control-Allow-Origin", "http://localhost:3000");
    expect_header(&r, "Vary", "Origin");
    cr_expect(strstr(r.body, "data: [DONE]"), "%s", r.body);
    http_free(&r);
    /* Another origin is served as before, without the header: the browser blocks it. */
    r = http(&s, "GET", "/v1/models", NULL, "-H 'Origin: https://evil.example' -H 'Authorization: Bearer sekrit'");
    cr_expect_eq(r.status, 200);
    expect_no_header(&r, "Access-Control-Allow-Origin");
    http_free(&r);
    r = http(&s, "GET", "/v1/models", NULL, "-H 'Origin: https://a.example.evil' -H 'Authorization: Bearer sekrit'");
    expect_no_header(&r, "Access-Control-Allow-Origin");
    http_free(&r);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

Test(webui, cors_json_list_and_bad_lists, .timeout = 120) {
    TestServer s;
    server_start(&s, "--allowed-origins '[\"*\"]'");
    HttpResult r = http(&s, "GET", "/health", NULL, "-H 'Origin: https://any.example'");
    cr_expect_eq(r.status, 200);
    expect_header(&r, "Access-Control-Allow-Origin", "https://any.example");
    http_free(&r);
    r = http(&s, "GET", "/health", NULL, NULL); /* no Origin: not a cross-origin request */
    expect_no_header(&r, "Access-Control-Allow-Origin");
    http_free(&r);
    char args[256];
    snprintf(args, sizeof args, PREFLIGHT, "null", "");
    r = http(&s, "OPTIONS", "/tokenize", NULL, args);
    cr_expect_eq(r.status, 204);
    expect_header(&r, "Access-Control-Allow-Origin", "null");
    http_free(&r);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);

    const char *bad[] = {"'[\"https://a.example\", 3]'", "'[\"https://a.example\"'", "https://a.example/path",
                         "a.example", "'https://a.example, http://b example'"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char cmd[512], *out = NULL, *err = NULL;
        snprintf(cmd, sizeof cmd, "serve --model " TINY_MODEL " --allowed-origins %s", bad[i]);
        int rc = run_nanovllm(cmd, &out, &err);
        cr_expect_eq(rc, 2, "--allowed-origins %s: exit %d\n%s", bad[i], rc, err);
        cr_expect(strstr(err, "--allowed-origins"), "%s", err);
        free(out);
        free(err);
    }
}

