/*
 * http_server.h - HTTP/1.1 with keep-alive on a libuv loop.
 *
 * The loop thread owns every connection and nothing here is called from
 * any other thread. Every request passes the front door first
 * (connection_gate.h): it is answered there if its header block is
 * malformed, too large, too slow or over the connection limit, and only a
 * checked header block comes here. The server then reads that request
 * exactly to its end (a Content-Length or a chunked body, within
 * body_timeout of the headers) and gives the connection back to the front
 * door after the response, where the next request (pipelined or later)
 * is checked as the first was. A connection closes after its response
 * instead when keep-alive is off (keep_alive_timeout 0), it has served
 * keep_alive_requests, the client asked (HTTP/1.0, Connection: close,
 * half-close), the body was not read (over the limit), or the server is
 * draining; such a response says Connection: close.
 *
 * The exchange is not left to libmicrohttpd: 0.9.75 parses a kept-alive
 * connection's later requests itself, before anything here can check
 * them, and then answers a malformed Content-Length with two status
 * blocks, closes on garbage without an answer, waits forever on binary
 * junk, and takes folded lines, conflicting or oversized Content-Lengths
 * (tried; see docs/serving.md). Keep-alive with those lines kept means
 * owning the socket's reads and writes.
 *
 * Each request is an HttpExchange. When its body has arrived the handler
 * gets it and answers in one of three ways:
 *   - http_respond(): a complete response now (or later, after http_defer);
 *   - http_defer(): the handler answers later (work on another thread,
 *     tokenization, a whole completion);
 *   - http_stream_begin(): a streamed body (SSE), fed with
 *     http_stream_write() and closed with http_stream_end(); for HTTP/1.1
 *     it is sent chunked, so a stream that ends cleanly keeps its
 *     connection (HTTP/1.0: delimited by the close).
 * While the handler works the socket is watched, and on_closed runs as
 * soon as the peer is gone - mid-stream included - so the work behind it
 * can be aborted. A client that only shut its sending side (half-close,
 * legal once the request is sent) is not gone: it still reads, and its
 * connection closes after the answer. A client that stops reading a
 * response is cut after body_timeout without progress.
 */
#ifndef NANOVLLM_HTTP_SERVER_H
#define NANOVLLM_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "base/error.h"
#include "connection_gate.h"

typedef struct HttpServer HttpServer;
typedef struct HttpExchange HttpExchange;

typedef struct HttpHandlers {
    /* The request is complete (method, path, headers, body). Must answer
     * with http_respond, http_defer or http_stream_begin before returning. */
    void (*on_request)(void *ctx, HttpExchange *ex);
    /* The exchange is over (response sent, client gone, or server stopping).
     * `user` is what the handler attached (NULL when the request never
     * reached on_request: the client left, or the body came too slowly);
     * the exchange is freed after. */
    void (*on_closed)(void *ctx, HttpExchange *ex, void *user, bool completed);
    /* A connection the front door answered itself or dropped (may be NULL). */
    void (*on_dropped)(void *ctx, HttpDrop why, const char *detail);
} HttpHandlers;

typedef struct HttpServerOptions {
    const char *host;
    int port; /* 0: any free port (see http_server_port) */
    size_t max_body_bytes;
    size_t max_header_bytes;
    double header_timeout, body_timeout; /* seconds */
    int max_connections;
    double keep_alive_timeout; /* seconds idle between requests; 0: one request per connection */
    int keep_alive_requests;   /* the last response on a connection is its Nth */
} HttpServerOptions;

HttpServer *http_server_start(uv_loop_t *loop, const HttpServerOptions *opts,
                              const HttpHandlers *handlers, void *ctx, Error *err);
int http_server_port(const HttpServer *s);
/* Connections open now: waiting at the front door (idle ones too) or held here. */
int http_server_connections(const HttpServer *s);
/* From now on every response closes its connection (a shutdown begins). */
void http_server_drain(HttpServer *s);
/* Stops accepting and ends every exchange (on_closed with completed false). */
void http_server_stop(HttpServer *s);

/* ---- the request ---------------------------------------------------------- */
const char *http_method(const HttpExchange *ex);
const char *http_path(const HttpExchange *ex); /* without the query string */
const char *http_header(const HttpExchange *ex, const char *name); /* NULL if absent */
const char *http_body(const HttpExchange *ex, size_t *len);
bool http_body_too_large(const HttpExchange *ex);
bool http_timed_out(const HttpExchange *ex); /* closed for a body slower than body_timeout */
void http_set_user(HttpExchange *ex, void *user);

/* ---- the response ----------------------------------------------------------- */
/* A "Name: value" line for this exchange's response, whichever call makes
 * it (http_respond, http_stream_begin): headers every answer must carry,
 * such as CORS's, are added once when the request arrives. -1 if it is not
 * a header line or memory ran out. */
int http_add_header(HttpExchange *ex, const char *line);
/* extra_headers: NULL or "Name: value" strings, NULL-terminated. 204 and
 * 304 carry no body and no Content-Length. */
int http_respond(HttpExchange *ex, unsigned status, const char *content_type, const char *body,
                 size_t len, const char *const *extra_headers);
void http_defer(HttpExchange *ex);
int http_stream_begin(HttpExchange *ex, unsigned status, const char *content_type);
int http_stream_write(HttpExchange *ex, const char *data, size_t len);
void http_stream_end(HttpExchange *ex);

#endif
