/*
 * http_exchange.h - inside the HTTP server: one request on one connection,
 * shared by http_server.c (which reads the request and owns the
 * connection's life) and http_response.c (which writes the answer).
 *
 * While the server holds a connection it holds exactly one exchange, and
 * the exchange holds the socket: the request was read exactly to its end,
 * so whatever follows in the socket (a pipelined request) is left there
 * for the front door to check when the connection goes back to it.
 */
#ifndef NANOVLLM_HTTP_EXCHANGE_H
#define NANOVLLM_HTTP_EXCHANGE_H

#include "http_server.h"

#include <sys/socket.h>

#define CHUNK_LINE_MAX 256 /* a chunk-size line, extensions included */

typedef enum ExchangeState {
    EX_BODY,     /* the body arriving */
    EX_HANDLING, /* inside on_request */
    EX_DEFERRED, /* the handler will answer later */
    EX_ANSWERED, /* a response (or stream) is being written */
    EX_OVER,     /* ended: freed when its poll handle has closed */
} ExchangeState;

typedef enum ChunkState { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER, CH_DONE } ChunkState;

struct HttpExchange {
    HttpServer *srv;
    HttpExchange *prev, *next;
    int fd;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    int served; /* requests answered on this connection before this one */
    uv_poll_t poll;
    int poll_events; /* what the poll waits for now (0: stopped) */
    ExchangeState state;
    double started; /* the header block read */
    /* the request */
    char *head; /* the header block, cut into NUL-terminated pieces */
    const char *method;
    char *path; /* percent-decoded, without the query string */
    const char **fields; /* name, value, name, value, ... */
    int nfields;
    bool http10, head_only, chunked;
    unsigned long long content_length;
    ChunkState chunk;
    unsigned long long chunk_left;
    char line[CHUNK_LINE_MAX];
    size_t line_len, trailer_bytes;
    char *body;
    size_t body_len, body_cap;
    bool too_large, timed_out;
    void *user;
    char *always; /* http_add_header's lines, each ending CR LF: on whatever response follows */
    size_t always_len;
    bool closed_notified;
    bool watch_hangup; /* a half-closed client is not watched: the poll would fire forever */
    bool keep_alive;   /* back to the front door after the response */
    /* the response */
    char *out;
    size_t out_len, out_off, out_cap;
    bool streaming, stream_ended, chunked_out;
    double progress; /* the last write that moved, or when output began to wait */
};

struct HttpServer {
    uv_loop_t *loop;
    ConnectionGate *gate;
    uv_timer_t tick; /* body deadlines and stalled writes */
    HttpHandlers handlers;
    void *ctx;
    size_t max_body, max_header;
    double body_timeout, keep_alive_timeout;
    int keep_alive_requests;
    int port;
    int active; /* connections held here (one exchange each) */
    HttpExchange *all;
    char *scratch; /* [SCRATCH_BYTES]: chunked bodies are peeked through it */
    bool draining;
};

/* http_server.c: the poll follows the exchange's state (call after any change). */
void ex_update_poll(HttpExchange *ex);
/* http_response.c: writes what the socket takes; -1 when the client is gone. */
int ex_flush(HttpExchange *ex);
/* http_response.c: whether the whole response has been written. */
bool ex_response_done(const HttpExchange *ex);

#endif
