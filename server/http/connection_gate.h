/*
 * connection_gate.h - the front door: every connection passes here before
 * libmicrohttpd sees it.
 *
 * libmicrohttpd 0.9.75 draws too few lines itself: it answers a malformed
 * Content-Length with a malformed response (its error page after a second
 * status line), takes the first of two conflicting Content-Length headers,
 * waits for a body over the limit before anyone can answer 413, keeps a
 * connection that trickles one header byte a minute for as long as the
 * bytes keep coming, and past its connection limit neither accepts nor
 * refuses. So the front door accepts connections itself and reads - with
 * MSG_PEEK, leaving every byte in the socket for libmicrohttpd - until the
 * whole header block is there, then checks it (http_head_check) and either
 * answers with a well-formed error of its own and closes, or hands the
 * socket to libmicrohttpd (MHD_add_connection). Around that: a deadline for
 * the header block, a limit on its size, a connection limit answered with
 * a fast 503 (shedding the oldest slow header first), and counts of every
 * connection dropped, by reason.
 *
 * Only a connection's first request can be checked this way, so the server
 * closes every connection after its response (http_server.c): each request
 * comes through the front door.
 */
#ifndef NANOVLLM_CONNECTION_GATE_H
#define NANOVLLM_CONNECTION_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <uv.h>

#include "base/error.h"

/* ---- the header block check (pure, for the tests too) ------------------------------------ */

typedef struct HttpHeadVerdict {
    bool complete;     /* the block's end (CRLF CRLF) was found */
    size_t head_bytes; /* through the blank line, when complete */
    unsigned status;   /* 0: acceptable so far; else the status to answer */
    char reason[160];  /* why, for the error body and the log */
} HttpHeadVerdict;

/* Checks buf[0..len), the start of a connection's bytes: the request line
 * (method, target, HTTP/1.0 or 1.1), the header fields (a token name and a
 * colon, no folded lines, no control bytes), and the framing: one
 * Content-Length of digits (or repeats of the same value), not with a
 * Transfer-Encoding, at most max_body; Transfer-Encoding only chunked.
 * Garbage is answered as soon as it is seen, not after a header block that
 * never comes. */
void http_head_check(const char *buf, size_t len, size_t max_body, HttpHeadVerdict *v);

/* ---- the front door ---------------------------------------------------------------------- */

/* Why connections were dropped before a request reached the handler. */
typedef enum HttpDrop {
    DROP_BAD_REQUEST,   /* malformed header block: 400 (or 413, 501, 505) */
    DROP_HEADER_TOO_LARGE, /* 431 */
    DROP_HEADER_TIMEOUT, /* the block did not arrive in time: 408 */
    DROP_TOO_MANY,       /* at the connection limit: 503 */
    DROP_SHED,           /* an old slow header block closed for a new client: 408 */
    DROP_CLOSED_EARLY,   /* the client left before its header block was complete */
    DROP_BODY_TIMEOUT,   /* the body did not arrive in time (http_server.c) */
    NUM_DROPS
} HttpDrop;

extern const char *const HTTP_DROP_NAMES[NUM_DROPS];

typedef struct ConnectionGate ConnectionGate;

typedef struct ConnectionGateOptions {
    int listen_fd;
    size_t max_body_bytes;   /* a Content-Length above: 413 at once */
    size_t max_header_bytes; /* a header block above: 431 */
    double header_timeout;   /* seconds from accept to the end of the header block */
    int max_connections;     /* in all, here and in libmicrohttpd */
} ConnectionGateOptions;

typedef struct ConnectionGateHooks {
    /* The socket passed every check: it belongs to the callee now. */
    void (*hand_off)(void *ctx, int fd, const struct sockaddr *addr, socklen_t len);
    /* Connections libmicrohttpd holds now (for the limit). */
    int (*active)(void *ctx);
    /* A connection was dropped (for metrics and a log line). */
    void (*dropped)(void *ctx, HttpDrop why, const char *detail);
} ConnectionGateHooks;

ConnectionGate *connection_gate_start(uv_loop_t *loop, const ConnectionGateOptions *opts,
                                      const ConnectionGateHooks *hooks, void *ctx, Error *err);
/* Closes the listening socket and every connection still waiting. */
void connection_gate_stop(ConnectionGate *f);
int connection_gate_pending(const ConnectionGate *f);

/* Writes a complete JSON error response with Connection: close to fd
 * (best effort, non-blocking). */
void http_write_error(int fd, unsigned status, const char *message);

#endif
