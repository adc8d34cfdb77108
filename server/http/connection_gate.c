/*
 * connection_gate.c - the front door (see connection_gate.h).
 *
 * A waiting connection is in one of three states:
 *   WAITING  polled for readable; each wake-up peeks at what has arrived
 *            and checks it (an idle kept-alive connection waits so too,
 *            with the keep-alive deadline until its first byte);
 *   PARTIAL  an incomplete header block sits unread in the socket, which a
 *            level-triggered poll would report readable forever, so the
 *            poll stops and the tick (every 20 ms while anything waits)
 *            looks again once FIONREAD says more has come;
 *   LINGER   an error response was written and the sending side shut; the
 *            rest of the client's bytes are read and dropped until it
 *            closes (at most LINGER_SECONDS), because closing a socket with
 *            unread bytes sends a reset that can destroy the response
 *            before the client reads it.
 * The tick also enforces the header deadline and resumes accepting after
 * the process ran out of descriptors. The list is in arrival order, and a
 * kept-alive connection rejoins it at the new end, so its first idle
 * connection is the one idle longest: the first shed at the limit.
 */
#include "connection_gate.h"

#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "base/log.h"

#define TICK_MS 20
#define LINGER_SECONDS 1.0
#define SHED_AFTER_SECONDS 1.0 /* a header block this slow may make room for a new client */

const char *const HTTP_DROP_NAMES[NUM_DROPS] = {"bad_request",  "header_too_large",
                                                "header_timeout", "too_many",
                                                "shed",         "closed_early",
                                                "body_timeout", "bad_body"};

/* ---- the header block ------------------------------------------------------------------- */

static bool is_tchar(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static void verdict(HttpHeadVerdict *v, unsigned status, const char *reason) {
    v->status = status;
    snprintf(v->reason, sizeof v->reason, "%s", reason);
}

/* The next line of buf[*at..len): its bounds without the CR LF (or bare
 * LF); false when its end has not arrived. */
static bool next_line(const char *buf, size_t len, size_t *at, size_t *start, size_t *end) {
    const char *nl = memchr(buf + *at, '\n', len - *at);
    if (!nl) return false;
    *start = *at;
    *end = (size_t)(nl - buf);
    if (*end > *start && buf[*end - 1] == '\r') (*end)--;
    *at = (size_t)(nl - buf) + 1;
    return true;
}

/* "METHOD SP target SP HTTP/1.x", checked as far as it has arrived. */
static void check_request_line(const char *b, size_t len, bool whole, HttpHeadVerdict *v) {
    size_t i = 0;
    while (i < len && is_tchar((unsigned char)b[i])) i++;
    if (i == len) {
        if (whole || i > 32) verdict(v, 400, "the request line must be: METHOD target HTTP/1.1");
        return;
    }
    if (i == 0 || b[i] != ' ')
        return verdict(v, 400, "the request line must start with a method (letters) and a space");
    size_t t0 = ++i;
    while (i < len && (unsigned char)b[i] > ' ' && (unsigned char)b[i] < 0x7f) i++;
    if (i == len) {
        if (whole) verdict(v, 400, "the request line has no HTTP version");
        return;
    }
    if (i == t0 || b[i] != ' ')
        return verdict(v, 400, "the request target must be printable ASCII followed by a space");
    const char *version = b + i + 1;
    size_t n = len - i - 1;
    if (n > 8 || memcmp(version, "HTTP/1.1", n < 8 ? n : 8) != 0 ||
        (whole && n != 8)) { /* a prefix of "HTTP/1.1" is still fine while arriving */
        if (n >= 5 && memcmp(version, "HTTP/", 5) == 0 && (!whole || n == 8) &&
            !(n == 8 && memcmp(version, "HTTP/1.0", 8) == 0))
            return verdict(v, 505, "only HTTP/1.0 and HTTP/1.1 are served");
        if (!(n <= 8 && memcmp(version, "HTTP/1.0", n) == 0) || (whole && n != 8))
            return verdict(v, 400, "the request line must end with HTTP/1.1 or HTTP/1.0");
    }
}

typedef struct Framing {
    int content_lengths;
    unsigned long long content_length;
    bool length_conflict, length_malformed, length_huge;
    bool transfer_encoding, chunked;
} Framing;

static void read_framing(const char *name, size_t name_len, const char *value, size_t value_len,
                         Framing *f) {
    while (value_len && (value[0] == ' ' || value[0] == '\t')) value++, value_len--;
    while (value_len && (value[value_len - 1] == ' ' || value[value_len - 1] == '\t')) value_len--;
    if (name_len == 14 && strncasecmp(name, "content-length", 14) == 0) {
        unsigned long long x = 0;
        bool digits = value_len > 0;
        for (size_t i = 0; i < value_len; i++) digits &= value[i] >= '0' && value[i] <= '9';
        if (!digits) {
            f->length_malformed = true;
        } else if (value_len > 18) {
            f->length_huge = true;
        } else {
            for (size_t i = 0; i < value_len; i++) x = x * 10 + (unsigned long long)(value[i] - '0');
            if (f->content_lengths > 0 && x != f->content_length) f->length_conflict = true;
            f->content_length = x;
        }
        f->content_lengths++;
    } else if (name_len == 17 && strncasecmp(name, "transfer-encoding", 17) == 0) {
        f->transfer_encoding = true;
        f->chunked = value_len == 7 && strncasecmp(value, "chunked", 7) == 0;
    }
}

/* One "name: value" line; folded lines and control bytes are refused. */
static void check_field(const char *b, size_t len, Framing *f, HttpHeadVerdict *v) {
    if (b[0] == ' ' || b[0] == '\t')
        return verdict(v, 400, "folded header lines (starting with white space) are not accepted");
    size_t i = 0;
    while (i < len && is_tchar((unsigned char)b[i])) i++;
    if (i == 0 || i == len || b[i] != ':')
        return verdict(v, 400, "a header field must be a name (a token) and a colon, with no space "
                               "between them");
    for (size_t k = i + 1; k < len; k++) {
        unsigned char c = (unsigned char)b[k];
        if ((c < ' ' && c != '\t') || c == 0x7f)
            return verdict(v, 400, "a header value holds a control character");
    }
    read_framing(b, i, b + i + 1, len - i - 1, f);
}

static void check_framing(const Framing *f, bool http10, size_t max_body, HttpHeadVerdict *v) {
    if (f->transfer_encoding && f->content_lengths)
        return verdict(v, 400, "a request must not have both Transfer-Encoding and Content-Length");
    if (f->transfer_encoding && http10)
        return verdict(v, 400, "Transfer-Encoding is not allowed in HTTP/1.0");
    if (f->transfer_encoding && !f->chunked)
        return verdict(v, 501, "the only Transfer-Encoding served is chunked");
    if (f->length_malformed) return verdict(v, 400, "Content-Length must be a decimal number");
    if (f->length_conflict) return verdict(v, 400, "conflicting Content-Length headers");
    if (f->length_huge || f->content_length > max_body) {
        char msg[160];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", max_body);
        return verdict(v, 413, msg);
    }
}

void http_head_check(const char *buf, size_t len, size_t max_body, HttpHeadVerdict *v) {
    memset(v, 0, sizeof *v);
    size_t at = 0, start, end;
    /* RFC 9112 2.2: empty lines before the request line are ignored. */
    for (int k = 0; k < 2 && at < len && (buf[at] == '\r' || buf[at] == '\n');) {
        if (buf[at] == '\n') k++;
        at++;
    }
    if (!next_line(buf, len, &at, &start, &end)) {
        check_request_line(buf + at, len - at, false, v);
        return;
    }
    check_request_line(buf + start, end - start, true, v);
    if (v->status) return;
    bool http10 = end - start >= 8 && memcmp(buf + end - 8, "HTTP/1.0", 8) == 0;
    Framing f = {0};
    for (int fields = 0;; fields++) {
        size_t line_at = at;
        if (!next_line(buf, len, &at, &start, &end)) {
            if (len > line_at) { /* the line so far must not already be wrong */
                unsigned char c = (unsigned char)buf[line_at];
                if (c == ' ' || c == '\t' || (c != '\r' && !is_tchar(c)))
                    verdict(v, 400, "a header field must start with its name");
            }
            return;
        }
        if (end == start) break; /* the blank line: the block is complete */
        if (fields == 100) return verdict(v, 431, "more than 100 header fields");
        check_field(buf + start, end - start, &f, v);
        if (v->status) return;
    }
    v->complete = true;
    v->head_bytes = at;
    check_framing(&f, http10, max_body, v);
}

/* ---- answering at the front door ----------------------------------------------------------- */

const char *http_status_text(unsigned status) {
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return status < 300 ? "OK" : status < 500 ? "Bad Request" : "Server Error";
    }
}

void http_write_error(int fd, unsigned status, const char *message) {
    json_t *o = json_pack("{s:{s:s, s:s, s:n, s:n}}", "error", "message", message, "type",
                          status >= 500 ? "server_error" : "invalid_request_error", "param", "code");
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    char buf[1024];
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n%s\r\n%s",
                     status, http_status_text(status), body ? strlen(body) : 0,
                     status == 503 ? "Retry-After: 1\r\n" : "", body ? body : "");
    free(body);
    if (n > 0 && (size_t)n < sizeof buf) {
        ssize_t sent = send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)sent; /* best effort: a client that cannot take 300 bytes is gone anyway */
    }
}

/* ---- waiting connections ------------------------------------------------------------------- */

typedef enum PendingState { P_WAITING, P_PARTIAL, P_LINGER } PendingState;

typedef struct Pending {
    struct Pending *prev, *next;
    ConnectionGate *gate;
    int fd;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    double started, deadline;
    PendingState state;
    bool idle;   /* kept alive, no byte of its next request yet */
    int served;  /* requests answered on this connection before */
    size_t seen; /* bytes available when last checked (PARTIAL) */
    uv_poll_t poll;
    bool polling;
} Pending;

struct ConnectionGate {
    uv_loop_t *loop;
    ConnectionGateOptions opts;
    ConnectionGateHooks hooks;
    void *ctx;
    uv_poll_t listen;
    bool listening;
    uv_timer_t tick;
    bool ticking;
    Pending *oldest, *newest; /* a list in arrival order */
    int waiting;              /* WAITING or PARTIAL (idle ones too): they count against the limit */
    int lingering;
    char *buf; /* [max_header_bytes + 1], for peeking */
    bool stopping;
};

static void on_pending(uv_poll_t *h, int status, int events);
static void on_tick(uv_timer_t *t);
static void on_listen(uv_poll_t *h, int status, int events);

static void ensure_tick(ConnectionGate *f) {
    if (f->ticking || f->stopping) return;
    f->ticking = true;
    uv_timer_start(&f->tick, on_tick, TICK_MS, TICK_MS);
}

static void unlink_pending(ConnectionGate *f, Pending *p) {
    if (p->prev) p->prev->next = p->next; else f->oldest = p->next;
    if (p->next) p->next->prev = p->prev; else f->newest = p->prev;
    if (p->state == P_LINGER) f->lingering--; else f->waiting--;
}

static void free_after_close(uv_handle_t *h) {
    Pending *p = h->data;
    if (p->fd >= 0) close(p->fd);
    free(p);
}

/* Gone from here: closed (fd >= 0) or handed off (fd set to -1 first). */
static void release(Pending *p) {
    ConnectionGate *f = p->gate;
    unlink_pending(f, p);
    if (p->polling) uv_poll_stop(&p->poll);
    uv_close((uv_handle_t *)&p->poll, free_after_close);
}

static void watch(Pending *p, int events) {
    p->polling = uv_poll_start(&p->poll, events, on_pending) == 0;
}

static void unwatch(Pending *p) {
    if (p->polling) uv_poll_stop(&p->poll);
    p->polling = false;
}

/* Answers with an error, then reads and drops the rest until the client leaves. */
static void refuse(Pending *p, unsigned status, HttpDrop why, const char *reason) {
    ConnectionGate *f = p->gate;
    http_write_error(p->fd, status, reason);
    shutdown(p->fd, SHUT_WR);
    if (f->hooks.dropped) f->hooks.dropped(f->ctx, why, reason);
    f->waiting--;
    f->lingering++;
    p->state = P_LINGER;
    p->deadline = now_seconds() + LINGER_SECONDS;
    unwatch(p);
    watch(p, UV_READABLE | UV_DISCONNECT);
    ensure_tick(f);
}

static void drop_quietly(Pending *p, HttpDrop why, const char *reason) {
    ConnectionGate *f = p->gate;
    if (f->hooks.dropped) f->hooks.dropped(f->ctx, why, reason);
    release(p);
}

static void hand_off(Pending *p, size_t head_bytes) {
    ConnectionGate *f = p->gate;
    int fd = p->fd;
    p->fd = -1; /* the server's from now on */
    struct sockaddr_storage addr = p->addr;
    socklen_t len = p->addr_len;
    int served = p->served;
    release(p); /* its poll is closed now, before the server polls the same socket */
    f->hooks.hand_off(f->ctx, fd, (struct sockaddr *)&addr, len, head_bytes, served);
}

/* Looks at everything that has arrived and decides, or waits for more. */
static void examine(Pending *p) {
    ConnectionGate *f = p->gate;
    size_t cap = f->opts.max_header_bytes + 1;
    ssize_t n = recv(p->fd, f->buf, cap, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0 && p->idle) return release(p); /* a kept-alive client may leave between requests */
    if (n == 0) return drop_quietly(p, DROP_CLOSED_EARLY, "closed before its header block was complete");
    if (n < 0) return drop_quietly(p, DROP_CLOSED_EARLY, strerror(errno));
    if (p->idle) { /* the next request has begun: from now on, as a new connection */
        p->idle = false;
        p->started = now_seconds();
        p->deadline = p->started + f->opts.header_timeout;
    }
    HttpHeadVerdict v;
    http_head_check(f->buf, (size_t)n, f->opts.max_body_bytes, &v);
    if (v.status) {
        HttpDrop why = v.status == 431 ? DROP_HEADER_TOO_LARGE : DROP_BAD_REQUEST;
        return refuse(p, v.status, why, v.reason);
    }
    if (v.complete && v.head_bytes <= f->opts.max_header_bytes) return hand_off(p, v.head_bytes);
    if ((size_t)n >= cap || v.head_bytes > f->opts.max_header_bytes) {
        char msg[96];
        snprintf(msg, sizeof msg, "the header block is larger than %zu bytes", f->opts.max_header_bytes);
        return refuse(p, 431, DROP_HEADER_TOO_LARGE, msg);
    }
    /* Incomplete: the poll would fire on the same bytes forever. */
    p->state = P_PARTIAL;
    p->seen = (size_t)n;
    unwatch(p);
    ensure_tick(f);
}

static void on_pending(uv_poll_t *h, int status, int events) {
    Pending *p = h->data;
    if (p->state == P_LINGER) {
        char sink[4096];
        ssize_t n = recv(p->fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
            status < 0)
            release(p);
        return;
    }
    if (status < 0 && p->idle) return release(p);
    if (status < 0) return drop_quietly(p, DROP_CLOSED_EARLY, uv_strerror(status));
    (void)events;
    examine(p);
}

/* The connection idle longest, else the oldest one still sending its
 * header block if it has been at it a while. */
static Pending *sheddable(ConnectionGate *f, double now) {
    for (Pending *p = f->oldest; p; p = p->next)
        if (p->idle) return p;
    for (Pending *p = f->oldest; p; p = p->next)
        if (p->state != P_LINGER) return now - p->started >= SHED_AFTER_SECONDS ? p : NULL;
    return NULL;
}

static void on_tick(uv_timer_t *t) {
    ConnectionGate *f = t->data;
    double now = now_seconds();
    for (Pending *p = f->oldest, *next; p; p = next) {
        next = p->next;
        if (now >= p->deadline) {
            if (p->state == P_LINGER || p->idle) release(p); /* an idle one simply ends */
            else refuse(p, 408, DROP_HEADER_TIMEOUT, "the header block did not arrive in time");
            continue;
        }
        if (p->state != P_PARTIAL) continue;
        int avail = 0;
        struct pollfd pf = {p->fd, POLLRDHUP, 0};
        if (poll(&pf, 1, 0) == 1 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR)) &&
            ioctl(p->fd, FIONREAD, &avail) == 0 && (size_t)avail <= p->seen) {
            drop_quietly(p, DROP_CLOSED_EARLY, "closed before its header block was complete");
            continue;
        }
        if (ioctl(p->fd, FIONREAD, &avail) == 0 && (size_t)avail > p->seen) {
            p->state = P_WAITING;
            watch(p, UV_READABLE);
            examine(p);
        }
    }
    if (!f->listening && !f->stopping) /* paused after EMFILE: try again */
        f->listening = uv_poll_start(&f->listen, UV_READABLE, on_listen) == 0;
    if (!f->oldest && f->listening) {
        uv_timer_stop(&f->tick);
        f->ticking = false;
    }
}

/* ---- accepting ------------------------------------------------------------------------------- */

/* A stream is one small write per token. Nagle's algorithm would hold each
 * until the peer acknowledged the last, and a peer that delays its ACKs
 * (up to 40 ms on Linux) would set the pace of the stream. */
static void send_without_delay(int fd) {
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
        static double last_log;
        if (now_seconds() - last_log >= 60.0) {
            last_log = now_seconds();
            log_info("cannot set TCP_NODELAY on a connection: %s (streams may stall behind proxies)",
                     strerror(errno));
        }
    }
}

static void admit(ConnectionGate *f, int fd, const struct sockaddr_storage *addr, socklen_t len) {
    double now = now_seconds();
    send_without_delay(fd);
    int open = f->waiting + (f->hooks.active ? f->hooks.active(f->ctx) : 0);
    bool full = open >= f->opts.max_connections;
    if (full) { /* an idle or slow connection makes room before a new client is turned away */
        Pending *old = sheddable(f, now);
        if (old && old->idle) {
            release(old); /* between requests a client must expect a close */
            full = false;
        } else if (old) {
            refuse(old, 408, DROP_SHED, "closed to make room: the header block was too slow");
            full = false;
        }
    }
    Pending *p = NULL;
    if (!full || f->lingering < f->opts.max_connections) p = calloc(1, sizeof *p);
    if (p && uv_poll_init(f->loop, &p->poll, fd) != 0) {
        free(p);
        p = NULL;
    }
    if (full) {
        http_write_error(fd, 503, "the server is at its connection limit; retry later");
        if (f->hooks.dropped) f->hooks.dropped(f->ctx, DROP_TOO_MANY, "at the connection limit");
        shutdown(fd, SHUT_WR);
    }
    if (!p) { /* out of memory, or even the lingering list is full */
        close(fd);
        return;
    }
    p->prev = f->newest;
    p->gate = f;
    p->fd = fd;
    p->addr = *addr;
    p->addr_len = len;
    p->started = now;
    p->poll.data = p;
    if (f->newest) f->newest->next = p; else f->oldest = p;
    f->newest = p;
    if (full) { /* the 503 is written: read what the client still sends, then close */
        p->state = P_LINGER;
        p->deadline = now + LINGER_SECONDS;
        f->lingering++;
    } else {
        p->state = P_WAITING;
        p->deadline = now + f->opts.header_timeout;
        f->waiting++;
    }
    watch(p, UV_READABLE | UV_DISCONNECT);
    ensure_tick(f);
}

static void on_listen(uv_poll_t *h, int status, int events) {
    (void)events;
    ConnectionGate *f = h->data;
    if (status < 0) return;
    for (int i = 0; i < 64; i++) { /* a burst, then let the loop breathe */
        struct sockaddr_storage addr;
        socklen_t len = sizeof addr;
        int fd = accept4(f->opts.listen_fd, (struct sockaddr *)&addr, &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* Out of descriptors: stop accepting for a tick instead of spinning. */
                static double last_log;
                if (now_seconds() - last_log >= 1.0) {
                    last_log = now_seconds();
                    log_info("cannot accept connections: %s (pausing)", strerror(errno));
                }
                uv_poll_stop(&f->listen);
                f->listening = false;
                ensure_tick(f);
            }
            return;
        }
        admit(f, fd, &addr, len);
    }
}

ConnectionGate *connection_gate_start(uv_loop_t *loop, const ConnectionGateOptions *opts,
                                      const ConnectionGateHooks *hooks, void *ctx, Error *err) {
    ConnectionGate *f = calloc(1, sizeof *f);
    if (f) f->buf = malloc(opts->max_header_bytes + 1);
    if (!f || !f->buf) {
        if (f) free(f);
        error_set(err, "out of memory");
        return NULL;
    }
    f->loop = loop;
    f->opts = *opts;
    f->hooks = *hooks;
    f->ctx = ctx;
    if (uv_poll_init(loop, &f->listen, opts->listen_fd) != 0 || uv_timer_init(loop, &f->tick) != 0) {
        free(f->buf);
        free(f);
        error_set(err, "cannot watch the listening socket");
        return NULL;
    }
    f->listen.data = f;
    f->tick.data = f;
    f->listening = uv_poll_start(&f->listen, UV_READABLE, on_listen) == 0;
    return f;
}

int connection_gate_pending(const ConnectionGate *f) { return f ? f->waiting : 0; }

/* A connection from the server rejoins the list at its new end. */
static Pending *rejoin(ConnectionGate *f, int fd) {
    Pending *p = f->stopping ? NULL : calloc(1, sizeof *p);
    if (p && uv_poll_init(f->loop, &p->poll, fd) != 0) {
        free(p);
        p = NULL;
    }
    if (!p) {
        close(fd);
        return NULL;
    }
    p->prev = f->newest;
    p->gate = f;
    p->fd = fd;
    p->started = now_seconds();
    p->poll.data = p;
    if (f->newest) f->newest->next = p; else f->oldest = p;
    f->newest = p;
    return p;
}

void connection_gate_keep(ConnectionGate *f, int fd, const struct sockaddr *addr, socklen_t len,
                          int served) {
    Pending *p = rejoin(f, fd);
    if (!p) return;
    if (len <= sizeof p->addr) memcpy(&p->addr, addr, len);
    p->addr_len = len;
    p->served = served;
    p->idle = true;
    p->state = P_WAITING;
    p->deadline = p->started + f->opts.keep_alive_timeout;
    f->waiting++;
    watch(p, UV_READABLE | UV_DISCONNECT); /* a pipelined request is there already: at once */
    ensure_tick(f);
}

void connection_gate_linger(ConnectionGate *f, int fd) {
    Pending *p = rejoin(f, fd);
    if (!p) return;
    shutdown(fd, SHUT_WR);
    p->state = P_LINGER;
    p->deadline = p->started + LINGER_SECONDS;
    f->lingering++;
    watch(p, UV_READABLE | UV_DISCONNECT);
    ensure_tick(f);
}

static void free_gate(uv_handle_t *h) {
    ConnectionGate *f = h->data;
    if ((uv_handle_t *)&f->tick == h) {
        close(f->opts.listen_fd);
        free(f->buf);
        free(f);
    }
}

void connection_gate_stop(ConnectionGate *f) {
    if (!f) return;
    f->stopping = true;
    while (f->oldest) release(f->oldest);
    uv_poll_stop(&f->listen);
    uv_timer_stop(&f->tick);
    uv_close((uv_handle_t *)&f->listen, NULL);
    uv_close((uv_handle_t *)&f->tick, free_gate);
}
