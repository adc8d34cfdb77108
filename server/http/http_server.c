/*
 * http_server.c - libmicrohttpd on a libuv loop (see http_server.h).
 *
 * MHD's callbacks (access handler, content reader, completion) all run
 * inside MHD_run, which only the loop calls: from the poll on MHD's epoll
 * descriptor and from the timer that carries MHD's timeouts. Anything that
 * changes a connection from outside MHD_run (a resume) only "kicks" the
 * timer to fire now, because MHD_run must not be re-entered from a callback.
 *
 * An exchange's life: created at its first access-handler call, body
 * gathered (beyond max_body_bytes it is dropped and marked too large),
 * handed to on_request, answered, then freed in MHD's completion callback
 * after on_closed. A client that disconnects while suspended gets on_closed
 * at once (the watcher), and the exchange is freed once MHD has noticed.
 *
 * MHD listens on nothing itself: the front door (connection_gate.c) accepts,
 * checks the header block and hands the socket over. The body deadline is
 * checked here, by a timer over the exchanges still receiving: libmicrohttpd
 * only has an idle timeout, which a body trickling a byte a minute never
 * meets, and cannot answer mid-upload, so a late body's socket is shut.
 */
#include "http_server.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"

#define STREAM_BLOCK (16 * 1024)

typedef enum ExchangeState {
    EX_RECEIVING, /* headers and body arriving */
    EX_HANDLING,  /* inside on_request */
    EX_DEFERRED,  /* the handler will answer later */
    EX_ANSWERED,  /* a response (or stream) is ready or queued */
} ExchangeState;

struct HttpExchange {
    HttpServer *srv;
    struct MHD_Connection *conn;
    char *method, *path;
    char *body;
    size_t body_len, body_cap;
    bool too_large;
    bool timed_out; /* the body deadline passed: the socket was shut */
    double started; /* the header block complete */
    void *user;
    ExchangeState state;
    unsigned status;
    struct MHD_Response *response; /* ready, not yet queued */
    bool suspended;
    bool closed_notified;
    /* streaming */
    bool streaming, stream_ended;
    char *sbuf;
    size_t slen, soff, scap;
    uv_poll_t *watch; /* while suspended: is the peer still there? */
    HttpExchange *prev, *next;
};

struct HttpServer {
    uv_loop_t *loop;
    struct MHD_Daemon *daemon;
    ConnectionGate *gate;
    uv_poll_t poll;
    uv_timer_t timer;
    uv_timer_t body_deadline; /* every 250 ms: bodies past body_timeout */
    HttpHandlers handlers;
    void *ctx;
    size_t max_body;
    double body_timeout;
    int port;
    int active; /* connections MHD holds */
    HttpExchange *all;
    bool stopping;
};

/* ---- driving MHD from the loop ----------------------------------------------- */

static void on_timer(uv_timer_t *t);
static void dropped(void *ctx, HttpDrop why, const char *detail);

/* Runs MHD and re-arms the timer with MHD's next timeout. */
static void run_mhd(HttpServer *s) {
    MHD_run(s->daemon);
    MHD_UNSIGNED_LONG_LONG ms;
    if (MHD_get_timeout(s->daemon, &ms) == MHD_YES)
        uv_timer_start(&s->timer, on_timer, ms, 0);
    else
        uv_timer_stop(&s->timer);
}

static void on_timer(uv_timer_t *t) { run_mhd(t->data); }

static void on_poll(uv_poll_t *p, int status, int events) {
    (void)status;
    (void)events;
    run_mhd(p->data);
}

/* MHD_run soon, from the loop (never from inside an MHD callback). */
static void kick(HttpServer *s) { uv_timer_start(&s->timer, on_timer, 0, 0); }

/* ---- suspension and the disconnect watcher ------------------------------------ */

static void free_handle(uv_handle_t *h) { free(h); }

static void stop_watch(HttpExchange *ex) {
    if (!ex->watch) return;
    uv_poll_stop(ex->watch);
    uv_close((uv_handle_t *)ex->watch, free_handle);
    ex->watch = NULL;
}

static void notify_closed(HttpExchange *ex, bool completed) {
    if (ex->closed_notified) return;
    ex->closed_notified = true;
    HttpServer *s = ex->srv;
    if (s->handlers.on_closed) s->handlers.on_closed(s->ctx, ex, ex->user, completed);
    ex->user = NULL;
}

static void resume(HttpExchange *ex) {
    if (!ex->suspended) return;
    stop_watch(ex);
    ex->suspended = false;
    MHD_resume_connection(ex->conn);
    kick(ex->srv);
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

static void on_watch(uv_poll_t *h, int status, int events) {
    HttpExchange *ex = h->data;
    if (status == 0 && !(events & UV_DISCONNECT)) return;
    int fd = -1;
    uv_fileno((uv_handle_t *)h, &fd);
    if (status == 0 && fd >= 0 && !peer_gone(fd)) {
        /* Half-closed: stop watching (the poll would report it forever);
         * a write to a client that has really gone fails and ends it. */
        stop_watch(ex);
        return;
    }
    /* The client is gone: tell the handler now, let MHD clean up. */
    notify_closed(ex, false);
    resume(ex);
}

static void suspend(HttpExchange *ex) {
    if (ex->suspended) return;
    MHD_suspend_connection(ex->conn);
    ex->suspended = true;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(ex->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return;
    uv_poll_t *w = malloc(sizeof *w);
    if (!w) return; /* no watcher: a disconnect is noticed at the next write */
    if (uv_poll_init(ex->srv->loop, w, ci->connect_fd) != 0) {
        free(w);
        return;
    }
    w->data = ex;
    if (uv_poll_start(w, UV_DISCONNECT, on_watch) != 0) {
        uv_close((uv_handle_t *)w, free_handle);
        return;
    }
    ex->watch = w;
}

/* ---- MHD callbacks ------------------------------------------------------------- */

static void queue_ready_response(HttpExchange *ex) {
    if (!ex->response) return;
    MHD_queue_response(ex->conn, ex->status, ex->response);
    MHD_destroy_response(ex->response);
    ex->response = NULL;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version,
                                 const char *upload_data, size_t *upload_size, void **con_cls) {
    (void)version;
    HttpServer *s = cls;
    HttpExchange *ex = *con_cls;
    if (!ex) {
        ex = calloc(1, sizeof *ex);
        if (!ex) return MHD_NO;
        ex->srv = s;
        ex->conn = conn;
        ex->method = strdup(method);
        const char *q = strchr(url, '?');
        ex->path = q ? strndup(url, (size_t)(q - url)) : strdup(url);
        if (!ex->method || !ex->path) {
            free(ex->method);
            free(ex->path);
            free(ex);
            return MHD_NO;
        }
        ex->started = uv_now(s->loop) / 1e3;
        ex->next = s->all;
        if (s->all) s->all->prev = ex;
        s->all = ex;
        *con_cls = ex;
        return MHD_YES;
    }
    if (ex->timed_out) return MHD_NO;
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (ex->too_large) return MHD_YES;
        if (n > s->max_body - ex->body_len) { /* drop it, but read it: then answer 413 */
            ex->too_large = true;
            free(ex->body);
            ex->body = NULL;
            ex->body_len = ex->body_cap = 0;
            return MHD_YES;
        }
        if (ex->body_len + n + 1 > ex->body_cap) {
            size_t cap = ex->body_cap ? ex->body_cap : 4096;
            while (cap < ex->body_len + n + 1) cap *= 2;
            char *b = realloc(ex->body, cap);
            if (!b) return MHD_NO;
            ex->body = b;
            ex->body_cap = cap;
        }
        memcpy(ex->body + ex->body_len, upload_data, n);
        ex->body_len += n;
        ex->body[ex->body_len] = '\0';
        return MHD_YES;
    }
    if (ex->state == EX_RECEIVING) {
        ex->state = EX_HANDLING;
        s->handlers.on_request(s->ctx, ex);
        if (ex->state == EX_HANDLING) {
            static const char msg[] = "{\"error\": {\"message\": \"internal error: no response\", "
                                      "\"type\": \"server_error\", \"param\": null, "
                                      "\"code\": null}}";
            http_respond(ex, 500, "application/json", msg, sizeof msg - 1, NULL);
        }
    }
    if (ex->response) {
        queue_ready_response(ex);
        return MHD_YES;
    }
    if (ex->closed_notified) return MHD_NO; /* the client left before an answer: close */
    if (ex->state == EX_DEFERRED) suspend(ex);
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)conn;
    HttpServer *s = cls;
    HttpExchange *ex = *con_cls;
    if (!ex) return;
    *con_cls = NULL;
    stop_watch(ex);
    if (toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED && ex->state == EX_RECEIVING && !ex->timed_out) {
        ex->timed_out = true; /* MHD's idle timeout came first: the same verdict */
        dropped(s, DROP_BODY_TIMEOUT, "the request body did not arrive in time");
    }
    notify_closed(ex, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    if (ex->response) MHD_destroy_response(ex->response);
    if (ex->prev) ex->prev->next = ex->next; else s->all = ex->next;
    if (ex->next) ex->next->prev = ex->prev;
    free(ex->method);
    free(ex->path);
    free(ex->body);
    free(ex->sbuf);
    free(ex);
}

/* Streamed bodies: what is buffered, else suspend until http_stream_write. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    HttpExchange *ex = cls;
    if (ex->soff < ex->slen) {
        size_t n = ex->slen - ex->soff < max ? ex->slen - ex->soff : max;
        memcpy(buf, ex->sbuf + ex->soff, n);
        ex->soff += n;
        if (ex->soff == ex->slen) ex->soff = ex->slen = 0;
        return (ssize_t)n;
    }
    if (ex->stream_ended || ex->closed_notified) return MHD_CONTENT_READER_END_OF_STREAM;
    suspend(ex);
    return 0;
}

/* ---- the response --------------------------------------------------------------- */

static int add_headers(struct MHD_Response *r, const char *content_type,
                       const char *const *extra) {
    if (content_type && MHD_add_response_header(r, "Content-Type", content_type) != MHD_YES) return -1;
    /* One request per connection: each passes the front door's checks. */
    if (MHD_add_response_header(r, "Connection", "close") != MHD_YES) return -1;
    for (int i = 0; extra && extra[i]; i++) {
        const char *colon = strchr(extra[i], ':');
        if (!colon) continue;
        char name[128];
        size_t n = (size_t)(colon - extra[i]);
        if (n >= sizeof name) continue;
        memcpy(name, extra[i], n);
        name[n] = '\0';
        const char *value = colon + 1;
        while (*value == ' ') value++;
        if (MHD_add_response_header(r, name, value) != MHD_YES) return -1;
    }
    return 0;
}

int http_respond(HttpExchange *ex, unsigned status, const char *content_type, const char *body,
                 size_t len, const char *const *extra_headers) {
    if (ex->state == EX_ANSWERED || ex->closed_notified) return -1;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return -1;
    if (add_headers(r, content_type, extra_headers)) {
        MHD_destroy_response(r);
        return -1;
    }
    ex->response = r;
    ex->status = status;
    ex->state = EX_ANSWERED;
    resume(ex);
    return 0;
}

void http_defer(HttpExchange *ex) {
    if (ex->state == EX_HANDLING) ex->state = EX_DEFERRED;
}

int http_stream_begin(HttpExchange *ex, unsigned status, const char *content_type) {
    if (ex->state == EX_ANSWERED || ex->closed_notified) return -1;
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_reader, ex, NULL);
    if (!r) return -1;
    const char *extra[] = {"Cache-Control: no-cache", "X-Accel-Buffering: no", NULL};
    if (add_headers(r, content_type, extra)) {
        MHD_destroy_response(r);
        return -1;
    }
    ex->response = r;
    ex->status = status;
    ex->state = EX_ANSWERED;
    ex->streaming = true;
    resume(ex);
    return 0;
}

int http_stream_write(HttpExchange *ex, const char *data, size_t len) {
    if (!ex->streaming || ex->stream_ended || ex->closed_notified) return -1;
    if (ex->slen + len > ex->scap) {
        size_t cap = ex->scap ? ex->scap : STREAM_BLOCK;
        while (cap < ex->slen + len) cap *= 2;
        char *b = realloc(ex->sbuf, cap);
        if (!b) return -1;
        ex->sbuf = b;
        ex->scap = cap;
    }
    memcpy(ex->sbuf + ex->slen, data, len);
    ex->slen += len;
    resume(ex);
    return 0;
}

void http_stream_end(HttpExchange *ex) {
    if (!ex->streaming || ex->stream_ended) return;
    ex->stream_ended = true;
    resume(ex);
}

/* ---- the request ------------------------------------------------------------------ */

const char *http_method(const HttpExchange *ex) { return ex->method; }
const char *http_path(const HttpExchange *ex) { return ex->path; }
const char *http_header(const HttpExchange *ex, const char *name) {
    return MHD_lookup_connection_value(ex->conn, MHD_HEADER_KIND, name);
}
const char *http_body(const HttpExchange *ex, size_t *len) {
    *len = ex->body_len;
    return ex->body ? ex->body : "";
}
bool http_body_too_large(const HttpExchange *ex) { return ex->too_large; }
bool http_timed_out(const HttpExchange *ex) { return ex->timed_out; }
void http_set_user(HttpExchange *ex, void *user) { ex->user = user; }

/* ---- the server -------------------------------------------------------------------- */

static int listen_on(const char *host, int port, int *bound_port, Error *err);
static void free_server(uv_handle_t *h);

/* The front door's hooks. */
static void hand_off(void *ctx, int fd, const struct sockaddr *addr, socklen_t len) {
    HttpServer *s = ctx;
    if (MHD_add_connection(s->daemon, fd, addr, len) != MHD_YES) return; /* MHD closed it */
    kick(s);
}

static int active_connections(void *ctx) { return ((HttpServer *)ctx)->active; }

static void dropped(void *ctx, HttpDrop why, const char *detail) {
    HttpServer *s = ctx;
    if (s->handlers.on_dropped) s->handlers.on_dropped(s->ctx, why, detail);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    (void)conn;
    (void)socket_context;
    HttpServer *s = cls;
    s->active += toe == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1;
}

/* Bodies past the deadline: their sockets are shut, MHD sees the error and
 * completes the exchange (on_closed with user NULL: the request was never
 * handed on). */
static void on_body_deadline(uv_timer_t *t) {
    HttpServer *s = t->data;
    double now = uv_now(s->loop) / 1e3;
    for (HttpExchange *ex = s->all; ex; ex = ex->next) {
        if (ex->state != EX_RECEIVING || ex->timed_out || now - ex->started < s->body_timeout) continue;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(ex->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        ex->timed_out = true;
        dropped(s, DROP_BODY_TIMEOUT, "the request body did not arrive in time");
        if (ci) shutdown(ci->connect_fd, SHUT_RDWR);
        kick(s);
    }
}

/* ---- the server -------------------------------------------------------------------- */

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
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
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

HttpServer *http_server_start(uv_loop_t *loop, const HttpServerOptions *opts,
                              const HttpHandlers *handlers, void *ctx, Error *err) {
    HttpServer *s = calloc(1, sizeof *s);
    if (!s) {
        error_set(err, "out of memory");
        return NULL;
    }
    s->loop = loop;
    s->handlers = *handlers;
    s->ctx = ctx;
    s->max_body = opts->max_body_bytes;
    s->body_timeout = opts->body_timeout;
    int fd = listen_on(opts->host, opts->port, &s->port, err);
    if (fd < 0) {
        free(s);
        return NULL;
    }
    /* MHD's idle timeout: a stream whose client stops reading, a body that
     * stops; the front door and the body deadline draw the finer lines. */
    unsigned idle = (unsigned)(opts->body_timeout > 1 ? opts->body_timeout : 1);
    s->daemon = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_NO_LISTEN_SOCKET, 0, NULL, NULL,
        on_access, s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_CONNECTION_TIMEOUT, idle,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)opts->max_connections + 64, MHD_OPTION_END);
    if (!s->daemon) {
        close(fd);
        free(s);
        error_set(err, "cannot start the HTTP daemon (libmicrohttpd)");
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    if (!di || uv_poll_init(loop, &s->poll, di->epoll_fd) != 0 ||
        uv_timer_init(loop, &s->timer) != 0 || uv_timer_init(loop, &s->body_deadline) != 0) {
        MHD_stop_daemon(s->daemon);
        close(fd);
        free(s);
        error_set(err, "cannot attach the HTTP daemon to the event loop");
        return NULL;
    }
    s->poll.data = s;
    s->timer.data = s;
    s->body_deadline.data = s;
    ConnectionGateOptions fo = {fd, opts->max_body_bytes, opts->max_header_bytes, opts->header_timeout,
                           opts->max_connections};
    ConnectionGateHooks hooks = {hand_off, active_connections, dropped};
    s->gate = connection_gate_start(loop, &fo, &hooks, s, err);
    if (!s->gate) { /* the handles are set up: close them on the loop */
        close(fd);
        MHD_stop_daemon(s->daemon);
        uv_close((uv_handle_t *)&s->poll, NULL);
        uv_close((uv_handle_t *)&s->body_deadline, NULL);
        uv_close((uv_handle_t *)&s->timer, free_server);
        return NULL;
    }
    uv_poll_start(&s->poll, UV_READABLE, on_poll);
    uv_timer_start(&s->body_deadline, on_body_deadline, 250, 250);
    kick(s);
    return s;
}

int http_server_connections(const HttpServer *s) {
    return s ? s->active + connection_gate_pending(s->gate) : 0;
}

int http_server_port(const HttpServer *s) { return s->port; }

static void free_server(uv_handle_t *h) {
    HttpServer *s = h->data;
    if ((uv_handle_t *)&s->timer == h) free(s); /* the timer is closed last */
}

void http_server_stop(HttpServer *s) {
    if (!s) return;
    /* MHD must not stop with suspended connections: resume them all, and
     * tell their handlers first that they are over. */
    for (HttpExchange *ex = s->all; ex; ex = ex->next) {
        notify_closed(ex, false);
        resume(ex);
    }
    connection_gate_stop(s->gate); /* no new connections; the waiting ones closed */
    s->gate = NULL;
    uv_poll_stop(&s->poll);
    uv_timer_stop(&s->timer);
    uv_timer_stop(&s->body_deadline);
    MHD_stop_daemon(s->daemon); /* completion callbacks free the exchanges */
    uv_close((uv_handle_t *)&s->poll, NULL);
    uv_close((uv_handle_t *)&s->body_deadline, NULL);
    uv_close((uv_handle_t *)&s->timer, free_server);
}
