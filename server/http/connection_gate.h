/*
 * connection_gate.h - the front door: every request passes here before the
 * server reads it.
 *
 * It was built because libmicrohttpd 0.9.75, which the server used, draws
 * too few lines: it answers a malformed Content-Length with a malformed
 * response (its error page after a second status line), takes the first
 * of two conflicting Content-Length headers, waits for a body over the
 * limit before anyone can answer 413, keeps a connection that trickles one
 * header byte a minute for as long as the bytes keep coming, and past its
 * connection limit neither accepts nor refuses. The front door accepts
 * connections itself and reads - with MSG_PEEK, leaving every byte in the
 * socket - until the whole header block is there, then checks it
 * (http_head_check) and either answers with a well-formed error of its own
 * and closes, or hands the socket to the server (http_server.c), which
 * reads exactly that request. Around that: a deadline for the header
 * block, a limit on its size, a connection limit answered with a fast 503
 * (closing the connection idle longest, else shedding the oldest slow
 * header first), and counts of every connection dropped, by reason.
 *
 * Every request passes here, not only a connection's first: the server
 * (http_server.c) reads a request exactly to its end and, when the
 * connection is kept alive, gives it back (connection_gate_keep) to wait
 * here for its next header block. Such an idle connection is closed
 * quietly after the keep-alive timeout if nothing comes; once a byte of
 * the next request is in, the header deadline runs as for a new one. Idle
 * connections count against the connection limit, and at the limit the
 * oldest idle one is closed for a new client before anyone is refused.
 * A connection the server is done with comes back to linger
 * (connection_gate_linger), so that its last response is not lost to a
 * reset.
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
    DROP_BAD_BODY,       /* a malformed chunked body: 400 (http_server.c) */
    NUM_DROPS
} HttpDrop;

extern const char *const HTTP_DROP_NAMES[NUM_DROPS];

typedef struct ConnectionGate ConnectionGate;

typedef struct ConnectionGateOptions {
    int listen_fd;
    size_t max_body_bytes;   /* a Content-Length above: 413 at once */
    size_t max_header_bytes; /* a header block above: 431 */
    double header_timeout;   /* seconds from accept to the end of the header block */
    double keep_alive_timeout; /* seconds an idle kept-alive connection waits here */
    int max_connections;     /* in all, here and in the server */
} ConnectionGateOptions;

typedef struct ConnectionGateHooks {
    /* The socket passed every check: it belongs to the callee now. Its
     * next head_bytes bytes are the checked header block; `served`
     * requests were answered on it before. */
    void (*hand_off)(void *ctx, int fd, const struct sockaddr *addr, socklen_t len,
                     size_t head_bytes, int served);
    /* Connections the server holds now (for the limit). */
    int (*active)(void *ctx);
    /* A connection was dropped (for metrics and a log line). */
    void (*dropped)(void *ctx, HttpDrop why, const char *detail);
} ConnectionGateHooks;

ConnectionGate *connection_gate_start(uv_loop_t *loop, const ConnectionGateOptions *opts,
                                      const ConnectionGateHooks *hooks, void *ctx, Error *err);
/* Closes the listening socket and every connection still waiting. */
void connection_gate_stop(ConnectionGate *f);
/* Connections waiting here for a header block, idle kept-alive ones included. */
int connection_gate_pending(const ConnectionGate *f);
/* A kept-alive connection back from the server, after `served` requests:
 * it waits for its next header block (or closes after the idle timeout). */
void connection_gate_keep(ConnectionGate *f, int fd, const struct sockaddr *addr, socklen_t len,
                          int served);
/* A connection the server is done with: its sending side is shut, the
 * rest of the client's bytes are read and dropped until it closes (at
 * most a second), then it is closed. */
void connection_gate_linger(ConnectionGate *f, int fd);

/* Writes a complete JSON error response with Connection: close to fd
 * (best effort, non-blocking). */
void http_write_error(int fd, unsigned status, const char *message);
/* The reason phrase of a status code ("Bad Request"). */
const char *http_status_text(unsigned status);

#endif
