/*
 * webui.c - the chat page's files, assembled into the binary and answered
 * from memory (see webui.h).
 *
 * The assembler's .incbin copies each file in at build time: no generator,
 * no tool beyond the compiler, and the Makefile names the files as this
 * object's prerequisites so an edit rebuilds it. Every answer has a strong
 * ETag (a hash of the bytes, so a new build invalidates what browsers
 * hold) with Cache-Control: no-cache (always revalidated: a 304 is cheap),
 * and a Content-Security-Policy that lets the page load and fetch only
 * from this server - a model's answer drawn into it can never run code.
 */
#include "webui.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Each file between NAME and NAME_end, in .rodata; paths are relative to
 * the repository root, where make runs the compiler. */
#define EMBED(name, file)                                                                         \
    __asm__(".section .rodata\n"                                                                  \
            ".balign 16\n"                                                                        \
            ".global " #name "\n"                                                                 \
            ".hidden " #name "\n" #name ":\n"                                                     \
            ".incbin \"" file "\"\n"                                                              \
            ".global " #name "_end\n"                                                             \
            ".hidden " #name "_end\n" #name "_end:\n"                                              \
            ".previous\n");                                                                       \
    extern const char name[], name##_end[]

EMBED(webui_index_html, "server/webui/index.html");
EMBED(webui_app_js, "server/webui/app.js");
EMBED(webui_style_css, "server/webui/style.css");

#define CSP                                                                                       \
    "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; "          \
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "             \
    "frame-ancestors 'none'"

typedef struct Asset {
    const char *path, *type;
    const char *start, *end;
    char etag[32]; /* "ETag: ..." value, made on first use (the loop thread only) */
} Asset;

static Asset assets[] = {
    {"/", "text/html; charset=utf-8", webui_index_html, webui_index_html_end, ""},
    {"/webui/app.js", "text/javascript; charset=utf-8", webui_app_js, webui_app_js_end, ""},
    {"/webui/style.css", "text/css; charset=utf-8", webui_style_css, webui_style_css_end, ""},
};

/* FNV-1a: the ETag only has to change when the bytes do. */
static uint64_t fnv1a(const char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3ULL;
    return h;
}

/* If-None-Match: "*", or a list of tags one of which is ours (W/ too: a
 * weak comparison is what the RFC asks of If-None-Match). */
static bool not_modified(const char *inm, const char *etag) {
    if (!inm) return false;
    if (strcmp(inm, "*") == 0) return true;
    size_t n = strlen(etag);
    for (const char *p = strstr(inm, etag); p; p = strstr(p + 1, etag)) {
        char after = p[n];
        if (after == '\0' || after == ',' || after == ' ') return true;
    }
    return false;
}

bool webui_serve(HttpExchange *ex) {
    const char *method = http_method(ex);
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) return false;
    Asset *a = NULL;
    for (size_t i = 0; i < sizeof assets / sizeof *assets && !a; i++)
        if (strcmp(http_path(ex), assets[i].path) == 0) a = &assets[i];
    if (!a) return false;
    size_t len = (size_t)(a->end - a->start);
    if (!a->etag[0])
        snprintf(a->etag, sizeof a->etag, "\"%016llx\"", (unsigned long long)fnv1a(a->start, len));
    char etag[48];
    snprintf(etag, sizeof etag, "ETag: %s", a->etag);
    const char *extra[] = {etag, "Cache-Control: no-cache", CSP, "X-Content-Type-Options: nosniff",
                           "Referrer-Policy: no-referrer", NULL};
    if (not_modified(http_header(ex, "If-None-Match"), a->etag))
        http_respond(ex, 304, NULL, "", 0, extra);
    else
        http_respond(ex, 200, a->type, a->start, len, extra);
    return true;
}
