/*
 * test_server_webui.c - the chat page at / and CORS (--allowed-origins),
 * against the real `nanovllm serve` on the tiny model.
 *
 * The page's files are checked byte for byte against server/webui/ with
 * their headers (type, ETag and 304, CSP), with and without an API key and
 * with --no-webui. CORS: none by default, preflights answered without the
 * key, the Allow-Origin on JSON, error and streamed answers for an allowed
 * origin and never for another, both forms of the flag, bad lists refused.
 *
 * webui/browser runs tests/e2e/webui.mjs: the page in headless Chromium
 * (Debian's /usr/bin/chromium) through puppeteer-core. A missing browser or
 * package fails the test, naming the set-up step; nothing is skipped.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

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

static const char CSP[] = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                          "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/* GET path: 200, the type, the file's bytes, an ETag that a 304 honours. */
static void expect_asset(const TestServer *s, const char *path, const char *file, const char *type) {
    HttpResult r = http(s, "GET", path, NULL, NULL);
    cr_expect_eq(r.status, 200, "GET %s: %d %s", path, r.status, r.body);
    char *want = read_text(file);
    cr_expect(strcmp(r.body, want) == 0, "GET %s is not %s", path, file);
    free(want);
    expect_header(&r, "Content-Type", type);
    expect_header(&r, "Cache-Control", "no-cache");
    expect_header(&r, "Content-Security-Policy", CSP);
    expect_header(&r, "X-Content-Type-Options", "nosniff");
    char *etag = header_value(r.headers, "ETag");
    cr_assert(etag && etag[0] == '"', "a strong ETag: %s", r.headers);
    char args[128];
    snprintf(args, sizeof args, "-H 'If-None-Match: %s'", etag);
    HttpResult again = http(s, "GET", path, NULL, args);
    cr_expect_eq(again.status, 304, "If-None-Match %s: %d", etag, again.status);
    cr_expect_str_empty(again.body);
    expect_no_header(&again, "Content-Length");
    expect_header(&again, "ETag", etag);
    http_free(&again);
    HttpResult head = http(s, "HEAD", path, NULL, "-I"); /* -I: the headers go where the body would */
    cr_expect_eq(head.status, 200);
    size_t hl = strlen(head.body);
    cr_expect(hl >= 4 && strcmp(head.body + hl - 4, "\r\n\r\n") == 0, "HEAD %s has a body: %s", path, head.body);
    http_free(&head);
    free(etag);
    http_free(&r);
}

Test(webui, page_and_assets, .timeout = 120) {
    TestServer s;
    server_start(&s, "");
    expect_asset(&s, "/", "server/webui/index.html", "text/html; charset=utf-8");
    expect_asset(&s, "/webui/app.js", "server/webui/app.js", "text/javascript; charset=utf-8");
    expect_asset(&s, "/webui/style.css", "server/webui/style.css", "text/css; charset=utf-8");
    HttpResult r = http(&s, "GET", "/", NULL, NULL);
    cr_expect(strstr(r.body, "<script src=\"/webui/app.js\"") && strstr(r.body, "href=\"/webui/style.css\""));
    http_free(&r);
    /* Only GET and HEAD, only those paths: the rest is the API's as before. */
    r = http(&s, "POST", "/", "{}", NULL);
    cr_expect_eq(r.status, 404, "%s", r.body);
    http_free(&r);
    r = http(&s, "GET", "/webui/missing.js", NULL, NULL);
    cr_expect_eq(r.status, 404);
    http_free(&r);
    /* CORS is off by default: no header for anyone, a preflight is a 405. */
    r = http(&s, "GET", "/v1/models", NULL, "-H 'Origin: https://a.example'");
    cr_expect_eq(r.status, 200);
    expect_no_header(&r, "Access-Control-Allow-Origin");
    expect_no_header(&r, "Vary");
    http_free(&r);
    r = http(&s, "OPTIONS", "/v1/chat/completions", NULL,
             "-H 'Origin: https://a.example' -H 'Access-Control-Request-Method: POST'");
    cr_expect_eq(r.status, 405, "%s", r.body);
    expect_no_header(&r, "Access-Control-Allow-Origin");
    http_free(&r);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

Test(webui, public_with_api_key_and_off_with_no_webui, .timeout = 120) {
    TestServer s;
    server_start(&s, "--api-key sekrit");
    HttpResult r = http(&s, "GET", "/", NULL, NULL); /* the page asks for the key itself */
    cr_expect_eq(r.status, 200);
    http_free(&r);
    r = http(&s, "GET", "/webui/app.js", NULL, NULL);
    cr_expect_eq(r.status, 200);
    http_free(&r);
    r = http(&s, "GET", "/v1/models", NULL, NULL);
    cr_expect_eq(r.status, 401);
    http_free(&r);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);

    server_start(&s, "--no-webui");
    const char *paths[] = {"/", "/webui/app.js", "/webui/style.css"};
    for (size_t i = 0; i < 3; i++) {
        r = http(&s, "GET", paths[i], NULL, NULL);
        cr_expect_eq(r.status, 404, "GET %s with --no-webui: %d", paths[i], r.status);
        cr_expect(strstr(r.body, "\"error\""), "%s", r.body);
        http_free(&r);
    }
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
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

/* ---- the page in a browser -------------------------------------------------------------------- */

static void require_browser(void) {
    const char *chromium = getenv("CHROMIUM") ? getenv("CHROMIUM") : "/usr/bin/chromium";
    if (access(chromium, X_OK) != 0)
        cr_assert_fail("no browser at %s: run scripts/setup.sh (apt-get install chromium)", chromium);
    if (access("tests/e2e/node_modules/puppeteer-core/package.json", R_OK) != 0)
        cr_assert_fail("the e2e package puppeteer-core is not installed: run scripts/setup.sh "
                       "(npm ci --prefix tests/e2e)");
}

Test(webui, browser, .timeout = 600) {
    require_browser();
    TestServer s, keyed;
    server_start(&s, "--served-model-name tiny-qwen3");
    server_start(&keyed, "--served-model-name tiny-qwen3 --api-key sekrit");
    /* Kept after the test (not under a server's folder): the screenshots are for people. */
    char *shots = make_temp_dir();
    char cmd[1024], out_path[300];
    snprintf(out_path, sizeof out_path, "%s/out.txt", shots);
    snprintf(cmd, sizeof cmd, "node tests/e2e/webui.mjs %d tiny-qwen3 %d sekrit %s > %s 2>&1", s.port,
             keyed.port, shots, out_path);
    int rc = system(cmd);
    char *out = read_text(out_path);
    cr_expect_eq(rc, 0, "webui.mjs failed:\n%s", out);
    cr_expect(strstr(out, "\nok 11\n"), "webui.mjs: expected \"ok 11\" last:\n%s", out);
    fprintf(stderr, "webui/browser: screenshots in %s (webui-desktop.png, webui-phone.png, webui-key.png)\n", shots);
    free(out);
    /* Stop aborted the long answer on the server, not only in the page. */
    char *log = server_log(&s);
    cr_expect(strstr(log, "POST /v1/chat/completions 499") && strstr(log, "client disconnected, aborted"),
              "the server did not abort the stopped request:\n%s", log);
    free(log);
    free(shots);
    cr_expect_eq(server_stop(&keyed, SIGTERM), 0);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}
