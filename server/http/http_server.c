/*
 * http_server.c - the server's half of a connection: from a checked header
 * block to the end of its exchange (see http_server.h; the answer itself
 * is written by http_response.c).
 *
 * An exchange's life: the front door hands the socket over with the length
 * of its checked header block; the block is read, the body gathered
 * (Content-Length: exactly that many bytes; chunked: peeked and consumed
 * exactly to the last chunk, so a pipelined request stays in the socket),
 * handed to on_request, answered, and then the exchange ends in one place,
 * end_exchange(): on_closed first, then the socket goes back to the front
 * door (kept alive), to linger there (closed after an answer), or is
 * closed. Handlers' calls (http_respond, http_stream_write, ...) never end
 * an exchange themselves - on_closed must not run under a handler's feet
 * - they only arm the poll, whose callback does the writing and the end.
 *
 * A 250 ms tick carries the deadlines: a body slower than body_timeout is
 * answered 408 and closed; a response the client stopped reading for
 * body_timeout is cut.
 */
#include "http_exchange.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/log.h"

#define TICK_MS 250
#define SCRATCH_BYTES (64 * 1024)
#define MAX_FIELDS 100 /* the front door refuses more */

typedef enum Afterwards { KEEP, LINGER, CLOSE } Afterwards;

static void on_io(uv_poll_t *h, int status, int events);

static void free_exchange(uv_handle_t *h) {
    HttpExchange *ex = h->data;
    free(ex->head);
    free(ex->path);
    free(ex->fields);
    free(ex->body);
    free(ex->out);
    free(ex->always);
    free(ex);
}

static void notify_closed(HttpExchange *ex, bool completed) {
    if (ex->closed_notified) return;
    ex->closed_notified = true;
    HttpServer *s = ex->srv;
    if (s->handlers.on_closed) s->handlers.on_closed(s->ctx, ex, ex->user, completed);
    ex->user = NULL;
}

static void dropped(HttpServer *s, HttpDrop why, const char *detail) {
    if (s->handlers.on_dropped) s->handlers.on_dropped(s->ctx, why, detail);
}

/* The one way out: the handler hears first, then the socket moves on. */
static void end_exchange(HttpExchange *ex, bool completed, Afterwards then) {
    if (ex->state == EX_OVER) return;
    HttpServer *s = ex->srv;
    notify_closed(ex, completed);
    ex->state = EX_OVER;
    if (ex->prev) ex->prev->next = ex->next; else s->all = ex->next;
    if (ex->next) ex->next->prev = ex->prev;
    s->active--;
    /* Stopped and closed before the front door polls the same socket. */
    uv_poll_stop(&ex->poll);
    uv_close((uv_handle_t *)&ex->poll, free_exchange);
    if (then == KEEP && s->gate)
        connection_gate_keep(s->gate, ex->fd, (struct sockaddr *)&ex->addr, ex->addr_len,
                             ex->served + 1);
    else if (then != CLOSE && s->gate)
        connection_gate_linger(s->gate, ex->fd);
    else
        close(ex->fd);
    ex->fd = -1;
}

/* Answered here, not by the handler (a bad body, a late body): the socket lingers. */
static void refuse(HttpExchange *ex, unsigned status, HttpDrop why, const char *reason,
                   bool completed) {
    http_write_error(ex->fd, status, reason);
    dropped(ex->srv, why, reason);
    end_exchange(ex, completed, LINGER);
}

void ex_update_poll(HttpExchange *ex) {
    if (ex->state == EX_OVER) return;
    int events = 0;
    if (ex->state == EX_BODY) events |= UV_READABLE;
    if (ex->state == EX_ANSWERED && (ex->out_off < ex->out_len || ex_response_done(ex)))
        events |= UV_WRITABLE; /* writes, or ends the exchange from the loop */
    if (ex->state != EX_BODY && ex->watch_hangup) events |= UV_DISCONNECT;
    if (events == ex->poll_events) return;
    int rc = events ? uv_poll_start(&ex->poll, events, on_io) : uv_poll_stop(&ex->poll);
    if (rc == 0) ex->poll_events = events;
    else log_info("http: cannot poll a connection: %s (the tick retries)", uv_strerror(rc));
}

/* Whether the peer is gone: an error or a hang-up in both directions. A
 * read-side end of file alone is a half-close, and the client still reads. */
static bool peer_gone(int fd) {
    struct pollfd pf = {fd, POLLRDHUP, 0};
    if (poll(&pf, 1, 0) != 1) return false;
    if (pf.revents & (POLLERR | POLLHUP)) return true;
    int error = 0;
    socklen_t len = sizeof error;
    return getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error != 0;
}

/* ---- the request ------------------------------------------------------------------------ */

static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static char *decode_path(const char *target) {
    size_t n = strcspn(target, "?");
    char *p = malloc(n + 1);
    if (!p) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (target[i] == '%' && i + 2 < n + 1 && hex(target[i + 1]) >= 0 && hex(target[i + 2]) >= 0) {
            char c = (char)(hex(target[i + 1]) * 16 + hex(target[i + 2]));
            if (c != '\0') { /* a NUL would cut the path short */
                p[o++] = c;
                i += 2;
                continue;
            }
        }
        p[o++] = target[i];
    }
    p[o] = '\0';
    return p;
}

static char *trim(char *v) {
    while (*v == ' ' || *v == '\t') v++;
    size_t n = strlen(v);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) v[--n] = '\0';
    return v;
}

/* Whether a comma-separated header value holds the token (Connection: close). */
static bool has_token(const char *value, const char *token) {
    size_t n = strlen(token);
    for (const char *p = value; p && *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        size_t k = strcspn(p, ",");
        size_t e = k;
        while (e && (p[e - 1] == ' ' || p[e - 1] == '\t')) e--;
        if (e == n && strncasecmp(p, token, n) == 0) return true;
        p += k;
    }
    return false;
}

/* Cuts the (already checked) header block into its pieces; -1 if it
 * cannot, -2 out of memory. */
static int parse_head(HttpExchange *ex) {
    char *p = ex->head;
    while (*p == '\r' || *p == '\n') p++; /* empty lines before the request line */
    char *eol = strchr(p, '\n');
    if (!eol) return -1;
    *eol = '\0';
    if (eol > p && eol[-1] == '\r') eol[-1] = '\0';
    char *sp1 = strchr(p, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (!sp2) return -1;
    *sp1 = *sp2 = '\0';
    ex->method = p;
    ex->path = decode_path(sp1 + 1);
    ex->http10 = strcmp(sp2 + 1, "HTTP/1.0") == 0;
    ex->head_only = strcmp(p, "HEAD") == 0;
    ex->fields = malloc(2 * MAX_FIELDS * sizeof *ex->fields);
    if (!ex->path || !ex->fields) return -2;
    for (p = eol + 1; *p && *p != '\r' && *p != '\n';) {
        eol = strchr(p, '\n');
        if (!eol || ex->nfields == MAX_FIELDS) return -1;
        *eol = '\0';
        if (eol > p && eol[-1] == '\r') eol[-1] = '\0';
        char *colon = strchr(p, ':');
        if (!colon) return -1;
        *colon = '\0';
        ex->fields[2 * ex->nfields] = p;
        ex->fields[2 * ex->nfields + 1] = trim(colon + 1);
        ex->nfields++;
        p = eol + 1;
    }
    const char *te = http_header(ex, "Transfer-Encoding"), *cl = http_header(ex, "Content-Length");
    ex->chunked = te != NULL;
    ex->content_length = cl ? strtoull(cl, NULL, 10) : 0;
    return 0;
}

static void handle(HttpExchange *ex);

/* The client left, or its socket failed, before the request was whole. */
static void gone(HttpExchange *ex) { end_exchange(ex, false, CLOSE); }

static bool grow_body(HttpExchange *ex, size_t more) {
    if (ex->body_len + more + 1 <= ex->body_cap) return true;
    size_t cap = ex->body_cap ? ex->body_cap : 4096;
    while (cap < ex->body_len + more + 1) cap *= 2;
    char *b = realloc(ex->body, cap);
    if (!b) return false;
    ex->body = b;
    ex->body_cap = cap;
    return true;
}

/* Content-Length: at most what is still owed, never a byte past it. */
static void read_sized(HttpExchange *ex) {
    while (ex->body_len < ex->content_length) {
        size_t want = (size_t)(ex->content_length - ex->body_len);
        if (want > SCRATCH_BYTES) want = SCRATCH_BYTES;
        if (!grow_body(ex, want)) return refuse(ex, 503, DROP_BAD_BODY, "out of memory for the body", false);
        ssize_t n = recv(ex->fd, ex->body + ex->body_len, want, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        if (n <= 0) return gone(ex);
        ex->body_len += (size_t)n;
    }
    handle(ex);
}

/* Runs the chunked framing over buf[0..len); returns the bytes it used (up
 * to the body's end), or -1 with *why set when the framing is wrong. */
static ssize_t unchunk(HttpExchange *ex, const char *buf, size_t len, const char **why) {
    size_t i = 0;
    while (i < len && ex->chunk != CH_DONE) {
        char c = buf[i];
        switch (ex->chunk) {
        case CH_SIZE:
            i++;
            if (c != '\n') {
                if (ex->line_len == sizeof ex->line - 1) return *why = "a chunk-size line is too long", -1;
                ex->line[ex->line_len++] = c;
                break;
            }
            if (ex->line_len && ex->line[ex->line_len - 1] == '\r') ex->line_len--;
            ex->line[ex->line_len] = '\0';
            ex->line_len = 0;
            unsigned long long size = 0;
            int digits = 0;
            for (const char *p = ex->line; hex(*p) >= 0; p++, digits++)
                if (digits < 16) size = size * 16 + (unsigned long long)hex(*p);
            char next = ex->line[digits];
            if (digits == 0 || (next && next != ';' && next != ' ' && next != '\t'))
                return *why = "a chunk size must be hexadecimal digits", -1;
            if (digits > 15 || size > ex->srv->max_body - ex->body_len) {
                ex->too_large = true; /* answered at once; the rest is not read */
                return (ssize_t)i;
            }
            ex->chunk_left = size;
            ex->chunk = size ? CH_DATA : CH_TRAILER;
            break;
        case CH_DATA: {
            size_t n = len - i < ex->chunk_left ? len - i : (size_t)ex->chunk_left;
            if (!grow_body(ex, n)) return *why = "out of memory for the body", -1;
            memcpy(ex->body + ex->body_len, buf + i, n);
            ex->body_len += n;
            ex->chunk_left -= n;
            i += n;
            if (!ex->chunk_left) ex->chunk = CH_DATA_END;
            break;
        }
        case CH_DATA_END: /* CR LF after the data (a bare LF is taken too); line_len counts the CR */
            i++;
            if (c == '\n') {
                ex->chunk = CH_SIZE;
                ex->line_len = 0;
            } else if (c == '\r' && ex->line_len == 0) {
                ex->line_len = 1;
            } else {
                return *why = "chunk data must end with CR LF", -1;
            }
            break;
        case CH_TRAILER: /* trailer fields are read and dropped; an empty line ends them */
            i++;
            if (++ex->trailer_bytes > ex->srv->max_header)
                return *why = "the chunked trailer is too large", -1;
            if (c == '\n') {
                if (ex->line_len == 0) ex->chunk = CH_DONE;
                ex->line_len = 0;
            } else if (c != '\r') {
                ex->line_len++;
            }
            break;
        case CH_DONE:
            break;
        }
    }
    return (ssize_t)i;
}

/* Chunked: peek, run the framing, consume exactly what it used. */
static void read_chunked(HttpExchange *ex) {
    HttpServer *s = ex->srv;
    while (ex->chunk != CH_DONE && !ex->too_large) {
        ssize_t n = recv(ex->fd, s->scratch, SCRATCH_BYTES, MSG_PEEK | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        if (n <= 0) return gone(ex);
        const char *why = NULL;
        ssize_t used = unchunk(ex, s->scratch, (size_t)n, &why);
        if (used < 0) return refuse(ex, 400, DROP_BAD_BODY, why, true);
        if (recv(ex->fd, s->scratch, (size_t)used, MSG_DONTWAIT) != used) return gone(ex);
    }
    if (ex->body) ex->body[ex->body_len] = '\0';
    handle(ex);
}

static void read_body(HttpExchange *ex) {
    if (ex->chunked) read_chunked(ex); else read_sized(ex);
}

/* Writes what it can of an answer and ends the exchange when all is out. */
static void service(HttpExchange *ex) {
    if (ex->state == EX_ANSWERED) {
        if (ex_flush(ex) != 0) return end_exchange(ex, false, CLOSE);
        if (ex_response_done(ex)) return end_exchange(ex, true, ex->keep_alive ? KEEP : LINGER);
    }
    ex_update_poll(ex);
}

/* The handler's turn. */
static void handle(HttpExchange *ex) {
    HttpServer *s = ex->srv;
    if (ex->body) ex->body[ex->body_len] = '\0';
    if (ex->too_large) ex->keep_alive = false; /* the rest of the body is still in the socket */
    ex->state = EX_HANDLING;
    s->handlers.on_request(s->ctx, ex);
    if (ex->state == EX_HANDLING) {
        static const char msg[] = "{\"error\": {\"message\": \"internal error: no response\", "
                                  "\"type\": \"server_error\", \"param\": null, \"code\": null}}";
        if (http_respond(ex, 500, "application/json", msg, sizeof msg - 1, NULL) != 0)
            return end_exchange(ex, false, CLOSE);
    }
    service(ex);
}

static void on_io(uv_poll_t *h, int status, int events) {
    HttpExchange *ex = h->data;
    if (ex->state == EX_OVER) return;
    if (ex->state == EX_BODY) {
        if (status < 0) return gone(ex);
        return read_body(ex);
    }
    if (events & UV_DISCONNECT) {
        if (status < 0 || peer_gone(ex->fd)) return end_exchange(ex, false, CLOSE);
        /* Half-closed: it still reads, but sends nothing more. */
        ex->watch_hangup = false;
        ex->keep_alive = false;
    }
    if (status < 0 && ex->state != EX_ANSWERED) return end_exchange(ex, false, CLOSE);
    service(ex);
}

/* ---- the request, for the handler -------------------------------------------------------- */

const char *http_method(const HttpExchange *ex) { return ex->method ? ex->method : ""; }
const char *http_path(const HttpExchange *ex) { return ex->path ? ex->path : ""; }
const char *http_header(const HttpExchange *ex, const char *name) {
    for (int i = 0; i < ex->nfields; i++)
        if (strcasecmp(ex->fields[2 * i], name) == 0) return ex->fields[2 * i + 1];
    return NULL;
}
const char *http_body(const HttpExchange *ex, size_t *len) {
    *len = ex->body_len;
    return ex->body ? ex->body : "";
}
bool http_body_too_large(const HttpExchange *ex) { return ex->too_large; }
bool http_timed_out(const HttpExchange *ex) { return ex->timed_out; }
void http_set_user(HttpExchange *ex, void *user) { ex->user = user; }

/* ---- the front door's hooks ---------------------------------------------------------------- */

static void hand_off(void *ctx, int fd, const struct sockaddr *addr, socklen_t len, size_t head_bytes,
                     int served) {
    HttpServer *s = ctx;
    HttpExchange *ex = calloc(1, sizeof *ex);
    if (!ex || uv_poll_init(s->loop, &ex->poll, fd) != 0) {
        free(ex);
        close(fd);
        return;
    }
    ex->srv = s;
    ex->fd = fd;
    ex->poll.data = ex;
    if (len <= sizeof ex->addr) memcpy(&ex->addr, addr, len);
    ex->addr_len = len;
    ex->served = served;
    ex->started = uv_now(s->loop) / 1e3;
    ex->watch_hangup = true;
    ex->next = s->all;
    if (s->all) s->all->prev = ex;
    s->all = ex;
    s->active++;
    ex->head = malloc(head_bytes + 1);
    ssize_t n = ex->head ? recv(fd, ex->head, head_bytes, MSG_DONTWAIT) : -1;
    if (n != (ssize_t)head_bytes) return end_exchange(ex, true, CLOSE); /* the peeked block is gone */
    ex->head[head_bytes] = '\0';
    int parsed = parse_head(ex);
    if (parsed != 0) {
        bool oom = parsed == -2;
        return refuse(ex, oom ? 503 : 400, DROP_BAD_REQUEST,
                      oom ? "out of memory for the header block" : "the header block cannot be read", true);
    }
    ex->keep_alive = s->keep_alive_timeout > 0 && !ex->http10 && !s->draining &&
                     served + 1 < s->keep_alive_requests;
    const char *conn = http_header(ex, "Connection");
    if (conn && has_token(conn, "close")) ex->keep_alive = false;
    bool body = ex->chunked || ex->content_length > 0;
    const char *expect = http_header(ex, "Expect");
    if (body && !ex->http10 && expect && strcasecmp(expect, "100-continue") == 0) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        ssize_t sent = send(fd, cont, sizeof cont - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)sent; /* 25 bytes into an empty socket; a client that waits without it waits a second */
    }
    ex->state = EX_BODY;
    if (!body) return handle(ex);
    read_body(ex);
    ex_update_poll(ex); /* still arriving: wait for readable */
}

static int active_connections(void *ctx) { return ((HttpServer *)ctx)->active; }

static void gate_dropped(void *ctx, HttpDrop why, const char *detail) { dropped(ctx, why, detail); }

/* Bodies past their deadline are answered 408; writes that stopped moving are cut. */
static void on_tick(uv_timer_t *t) {
    HttpServer *s = t->data;
    double now = uv_now(s->loop) / 1e3;
    double stall = s->body_timeout > 1 ? s->body_timeout : 1;
    for (HttpExchange *ex = s->all, *next; ex; ex = next) {
        next = ex->next;
        if (ex->state == EX_BODY && now - ex->started >= s->body_timeout) {
            ex->timed_out = true;
            refuse(ex, 408, DROP_BODY_TIMEOUT, "the request body did not arrive in time", false);
        } else if (ex->state == EX_ANSWERED && ex->out_off < ex->out_len && now - ex->progress >= stall) {
            end_exchange(ex, false, CLOSE); /* the client stopped reading */
        } else if (ex->state == EX_ANSWERED || ex->state == EX_DEFERRED) {
            service(ex); /* the poll never fails to start; if it did, this carries on */
        }
    }
}

/* ---- the server -------------------------------------------------------------------------- */

static int listen_on(const char *host, int port, int *bound_port, Error *err) {
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res;
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) return error_set(err, "cannot resolve --host %s: %s", host, gai_strerror(rc));
    int fd = -1, e = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        int one = 1;
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
            bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
            e = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) return error_set(err, "cannot listen on %s:%d: %s", host, port, strerror(e));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                     : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

static void free_server(uv_handle_t *h) {
    HttpServer *s = h->data;
    free(s->scratch);
    free(s);
}

HttpServer *http_server_start(uv_loop_t *loop, const HttpServerOptions *opts,
                              const HttpHandlers *handlers, void *ctx, Error *err) {
    HttpServer *s = calloc(1, sizeof *s);
    if (s) s->scratch = malloc(SCRATCH_BYTES);
    if (!s || !s->scratch) {
        if (s) free(s);
        error_set(err, "out of memory");
        return NULL;
    }
    s->loop = loop;
    s->handlers = *handlers;
    s->ctx = ctx;
    s->max_body = opts->max_body_bytes;
    s->max_header = opts->max_header_bytes;
    s->body_timeout = opts->body_timeout;
    s->keep_alive_timeout = opts->keep_alive_timeout;
    s->keep_alive_requests = opts->keep_alive_requests;
    int fd = listen_on(opts->host, opts->port, &s->port, err);
    if (fd < 0 || uv_timer_init(loop, &s->tick) != 0) {
        if (fd >= 0) {
            close(fd);
            error_set(err, "cannot start a timer on the event loop");
        }
        free(s->scratch);
        free(s);
        return NULL;
    }
    s->tick.data = s;
    ConnectionGateOptions fo = {fd, opts->max_body_bytes, opts->max_header_bytes, opts->header_timeout,
                                opts->keep_alive_timeout, opts->max_connections};
    ConnectionGateHooks hooks = {hand_off, active_connections, gate_dropped};
    s->gate = connection_gate_start(loop, &fo, &hooks, s, err);
    if (!s->gate) {
        close(fd);
        uv_close((uv_handle_t *)&s->tick, free_server);
        return NULL;
    }
    uv_timer_start(&s->tick, on_tick, TICK_MS, TICK_MS);
    return s;
}

int http_server_connections(const HttpServer *s) {
    return s ? s->active + connection_gate_pending(s->gate) : 0;
}

int http_server_port(const HttpServer *s) { return s->port; }

void http_server_drain(HttpServer *s) {
    if (!s) return;
    s->draining = true;
    for (HttpExchange *ex = s->all; ex; ex = ex->next) ex->keep_alive = false;
}

void http_server_stop(HttpServer *s) {
    if (!s) return;
    while (s->all) end_exchange(s->all, false, CLOSE);
    connection_gate_stop(s->gate); /* no new connections; the waiting ones closed */
    s->gate = NULL;
    uv_timer_stop(&s->tick);
    uv_close((uv_handle_t *)&s->tick, free_server);
}
