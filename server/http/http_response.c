/*
 * http_response.c - the answer half of an exchange (see http_server.h):
 * the status line and headers, a body with Content-Length, or a stream in
 * chunked encoding, all gathered in the exchange's output buffer and
 * written as the socket takes them.
 *
 * The handler's calls only fill the buffer and arm the poll; the writing,
 * and the end of the exchange once the last byte is out, happen in the
 * poll's callback (http_server.c), so that on_closed never runs inside a
 * handler's own call. Whether the connection stays open is decided with
 * the request (http_server.c) and said here: Connection: close when not.
 */
#include "http_exchange.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Appends to the output buffer; -1 if out of memory. */
static int append(HttpExchange *ex, const char *data, size_t len) {
    if (ex->out_off == ex->out_len) ex->out_off = ex->out_len = 0; /* all sent: start over */
    if (ex->out_len + len > ex->out_cap) {
        if (ex->out_off > 0) { /* move what is still unsent to the front first */
            memmove(ex->out, ex->out + ex->out_off, ex->out_len - ex->out_off);
            ex->out_len -= ex->out_off;
            ex->out_off = 0;
        }
        size_t cap = ex->out_cap ? ex->out_cap : 4096;
        while (cap < ex->out_len + len) cap *= 2;
        if (cap != ex->out_cap) {
            char *b = realloc(ex->out, cap);
            if (!b) return -1;
            ex->out = b;
            ex->out_cap = cap;
        }
    }
    if (ex->out_off == ex->out_len) ex->progress = uv_now(ex->srv->loop) / 1e3; /* it waits from now */
    memcpy(ex->out + ex->out_len, data, len);
    ex->out_len += len;
    return 0;
}

static int appendf(HttpExchange *ex, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf) return -1;
    return append(ex, buf, (size_t)n);
}

/* A header line from a handler, if it is one: "Name: value", no CR or LF. */
static bool header_line_ok(const char *h) {
    const char *colon = strchr(h, ':');
    return colon && colon > h && !strpbrk(h, "\r\n");
}

int http_add_header(HttpExchange *ex, const char *line) {
    if (!header_line_ok(line)) return -1;
    size_t n = strlen(line);
    char *b = realloc(ex->always, ex->always_len + n + 2);
    if (!b) return -1;
    memcpy(b + ex->always_len, line, n);
    memcpy(b + ex->always_len + n, "\r\n", 2);
    ex->always = b;
    ex->always_len += n + 2;
    return 0;
}

/* No body at all, by RFC 9110: not even a Content-Length of 0. */
static bool bodiless(unsigned status) { return status == 204 || status == 304; }

/* The status line and headers; content_length < 0: a stream. */
static int begin(HttpExchange *ex, unsigned status, const char *content_type,
                 const char *const *extra, long long content_length) {
    char date[64];
    time_t t = time(NULL);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || !strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm))
        date[0] = '\0';
    if (appendf(ex, "HTTP/1.1 %u %s\r\n", status, http_status_text(status)) != 0) return -1;
    if (date[0] && appendf(ex, "Date: %s\r\n", date) != 0) return -1;
    if (content_type && !strpbrk(content_type, "\r\n") &&
        appendf(ex, "Content-Type: %s\r\n", content_type) != 0)
        return -1;
    for (int i = 0; extra && extra[i]; i++)
        if (header_line_ok(extra[i]) &&
            (append(ex, extra[i], strlen(extra[i])) != 0 || append(ex, "\r\n", 2) != 0))
            return -1;
    if (ex->always_len && append(ex, ex->always, ex->always_len) != 0) return -1;
    if (content_length >= 0 && !bodiless(status) && appendf(ex, "Content-Length: %lld\r\n", content_length) != 0) return -1;
    if (content_length < 0 && ex->chunked_out && append(ex, "Transfer-Encoding: chunked\r\n", 28) != 0)
        return -1;
    if (!ex->keep_alive && append(ex, "Connection: close\r\n", 19) != 0) return -1;
    return append(ex, "\r\n", 2);
}

static bool can_answer(const HttpExchange *ex) {
    return (ex->state == EX_HANDLING || ex->state == EX_DEFERRED) && !ex->closed_notified;
}

int http_respond(HttpExchange *ex, unsigned status, const char *content_type, const char *body,
                 size_t len, const char *const *extra_headers) {
    if (!can_answer(ex)) return -1;
    if (bodiless(status)) len = 0;
    if (begin(ex, status, content_type, extra_headers, (long long)len) != 0 ||
        (!ex->head_only && len && append(ex, body, len) != 0)) {
        ex->out_off = ex->out_len = 0;
        return -1;
    }
    ex->state = EX_ANSWERED;
    ex_update_poll(ex);
    return 0;
}

void http_defer(HttpExchange *ex) {
    if (ex->state == EX_HANDLING) ex->state = EX_DEFERRED;
}

int http_stream_begin(HttpExchange *ex, unsigned status, const char *content_type) {
    if (!can_answer(ex)) return -1;
    /* HTTP/1.0 has no chunks: its stream ends with the connection. */
    ex->chunked_out = !ex->http10;
    if (!ex->chunked_out) ex->keep_alive = false;
    const char *extra[] = {"Cache-Control: no-cache", "X-Accel-Buffering: no", NULL};
    if (begin(ex, status, content_type, extra, -1) != 0) {
        ex->out_off = ex->out_len = 0;
        return -1;
    }
    ex->streaming = true;
    ex->state = EX_ANSWERED;
    ex_update_poll(ex);
    return 0;
}

int http_stream_write(HttpExchange *ex, const char *data, size_t len) {
    if (!ex->streaming || ex->stream_ended || ex->closed_notified || ex->state != EX_ANSWERED) return -1;
    if (len == 0 || ex->head_only) return 0; /* an empty chunk would end the stream */
    if ((ex->chunked_out && appendf(ex, "%zx\r\n", len) != 0) || append(ex, data, len) != 0 ||
        (ex->chunked_out && append(ex, "\r\n", 2) != 0))
        return -1;
    ex_update_poll(ex);
    return 0;
}

void http_stream_end(HttpExchange *ex) {
    if (!ex->streaming || ex->stream_ended || ex->state != EX_ANSWERED) return;
    ex->stream_ended = true;
    if (ex->chunked_out && !ex->head_only && append(ex, "0\r\n\r\n", 5) != 0)
        ex->keep_alive = false; /* no terminator: only the close can end it */
    ex_update_poll(ex);
}

bool ex_response_done(const HttpExchange *ex) {
    return ex->state == EX_ANSWERED && ex->out_off == ex->out_len &&
           (!ex->streaming || ex->stream_ended);
}

int ex_flush(HttpExchange *ex) {
    while (ex->out_off < ex->out_len) {
        ssize_t n = send(ex->fd, ex->out + ex->out_off, ex->out_len - ex->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
        if (n <= 0) return -1;
        ex->out_off += (size_t)n;
        ex->progress = uv_now(ex->srv->loop) / 1e3;
    }
    if (ex->out_cap > 1024 * 1024) { /* a long stream's peak is not kept for its whole life */
        free(ex->out);
        ex->out = NULL;
        ex->out_cap = ex->out_len = ex->out_off = 0;
    }
    return 0;
}
