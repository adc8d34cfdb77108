/*
 * test_http_keepalive.c - persistent connections against the real server,
 * with raw sockets: one connection serving many requests up to its limit,
 * pipelined requests answered in order, the idle timeout, the header
 * deadline and the header checks on a later request as on the first,
 * chunked bodies read exactly to their end, streams followed by another
 * request, HTTP/1.0 and Connection: close, and 4,000 idle connections
 * that must not lock out a new client. Responses are read one at a time,
 * by their framing, not until a close. Loopback only; every wait bounded.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "server_helpers.h"


static void put(int fd, const char *data) { tcp_send_all(fd, data, strlen(data)); }

/* A connection's bytes, read as they come; responses are cut off its front. */
typedef struct Conn {
    int fd;
    char buf[1 << 16];
    size_t len;
    bool eof;
} Conn;

typedef struct Resp {
    int status;
    char head[4096];
    char body[1 << 15];
    size_t body_len;
    bool closes; /* said Connection: close */
} Resp;

/* Reads more into c within the deadline; false when nothing more can come. */
static bool fill(Conn *c, double deadline) {
    while (monotonic_seconds() < deadline && !c->eof) {
        struct pollfd pf = {c->fd, POLLIN, 0};
        if (poll(&pf, 1, 20) <= 0) continue;
        ssize_t n = recv(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len, 0);
        if (n <= 0) c->eof = true;
        else c->len += (size_t)n;
        c->buf[c->len] = '\0';
        return n > 0;
    }
    return false;
}

static void consume(Conn *c, size_t n) {
    memmove(c->buf, c->buf + n, c->len - n);
    c->len -= n;
    c->buf[c->len] = '\0';
}

static const char *header_in(const char *head, const char *name) {
    size_t n = strlen(name);
    for (const char *p = strstr(head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n"))
        if (strncasecmp(p + 2, name, n) == 0 && p[2 + n] == ':') return p + 3 + n;
    return NULL;
}

/* One response off the connection, by its framing (Content-Length or
 * chunked); false if it did not come whole within `timeout` seconds. */
static bool read_response(Conn *c, double timeout, Resp *r) {
    double deadline = monotonic_seconds() + timeout;
    memset(r, 0, sizeof *r);
    char *end;
    while (!(end = strstr(c->buf, "\r\n\r\n")))
        if (!fill(c, deadline)) return false;
    size_t head_len = (size_t)(end - c->buf) + 4;
    cr_assert(head_len < sizeof r->head);
    memcpy(r->head, c->buf, head_len);
    r->head[head_len] = '\0';
    r->status = strncmp(r->head, "HTTP/1.1 ", 9) == 0 ? atoi(r->head + 9) : -1;
    const char *conn = header_in(r->head, "Connection");
    r->closes = conn && strncasecmp(conn + strspn(conn, " "), "close", 5) == 0;
    consume(c, head_len);
    const char *cl = header_in(r->head, "Content-Length");
    if (cl) {
        size_t n = strtoul(cl, NULL, 10);
        cr_assert(n < sizeof r->body);
        while (c->len < n)
            if (!fill(c, deadline)) return false;
        memcpy(r->body, c->buf, n);
        r->body_len = n;
        consume(c, n);
        return true;
    }
    cr_assert(header_in(r->head, "Transfer-Encoding"), "no framing: %s", r->head);
    for (;;) { /* chunks */
        char *eol;
        while (!(eol = strstr(c->buf, "\r\n")))
            if (!fill(c, deadline)) return false;
        size_t size = strtoul(c->buf, NULL, 16);
        size_t need = (size_t)(eol - c->buf) + 2 + size + 2;
        while (c->len < need)
            if (!fill(c, deadline)) return false;
        cr_assert(r->body_len + size < sizeof r->body);
        memcpy(r->body + r->body_len, eol + 2, size);
        r->body_len += size;
        consume(c, need);
        if (size == 0) return true;
    }
}

/* Whether the server closes the connection within `timeout` (no bytes first). */
static bool closed_within(Conn *c, double timeout) {
    double deadline = monotonic_seconds() + timeout;
    while (!c->eof && monotonic_seconds() < deadline) fill(c, deadline);
    return c->eof && c->len == 0;
}

static const char HEALTH[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";

static void completion(char *req, size_t cap, const char *body, const char *extra) {
    snprintf(req, cap, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n%sContent-Length: %zu\r\n\r\n%s",
             extra, strlen(body), body);
}

/* One connection serves N requests; the Nth answer says close and closes. */
Test(http_keepalive, one_connection_serves_n_requests, .timeout = 60) {
    TestServer s;
    server_start(&s, "--keep-alive-requests 20");
    Conn c = {.fd = tcp_dial(s.port, 0)};
    char req[512];
    for (int i = 1; i <= 20; i++) {
        if (i % 2) put(c.fd, HEALTH);
        else {
            completion(req, sizeof req, "{\"prompt\": \"hi\", \"max_tokens\": 2}", "");
            put(c.fd, req);
        }
        Resp r;
        cr_assert(read_response(&c, 10, &r), "request %d: no whole response", i);
        cr_expect_eq(r.status, 200, "request %d: %s", i, r.head);
        cr_expect_eq(r.closes, i == 20, "request %d: Connection: close only on the 20th: %s", i, r.head);
        if (i % 2 == 0) cr_expect(strstr(r.body, "\"text_completion\""), "request %d: %s", i, r.body);
    }
    cr_expect(closed_within(&c, 3), "closed after the 20th");
    close(c.fd);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* Requests written at once are answered in order, each whole. */
Test(http_keepalive, pipelined_requests_answered_in_order, .timeout = 60) {
    TestServer s;
    server_start(&s, "");
    Conn c = {.fd = tcp_dial(s.port, 0)};
    char req[2048], one[512];
    completion(one, sizeof one, "{\"prompt\": \"hi\", \"max_tokens\": 3}", "");
    snprintf(req, sizeof req, "%sGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n%s"
             "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
             "5\r\n{\"pro\r\n1d;ext=1\r\nmpt\": \"yo\", \"max_tokens\": 1}\r\n0\r\nX-Trailer: t\r\n\r\n%s",
             one, HEALTH, HEALTH);
    put(c.fd, req);
    Resp r[5];
    for (int i = 0; i < 5; i++) cr_assert(read_response(&c, 10, &r[i]), "response %d", i);
    cr_expect(r[0].status == 200 && strstr(r[0].body, "\"text_completion\""), "1st: %s", r[0].body);
    cr_expect(r[1].status == 200 && strstr(r[1].body, "\"list\""), "2nd (models): %s", r[1].body);
    cr_expect(r[2].status == 200 && !strstr(r[2].body, "\"list\"") && !strstr(r[2].body, "text_completion"),
              "3rd (health): %s", r[2].body);
    cr_expect(r[3].status == 200 && strstr(r[3].body, "\"text_completion\""), "4th (chunked): %s %s",
              r[3].head, r[3].body);
    cr_expect_eq(r[4].status, 200, "5th (health) after a chunked body read exactly to its end");
    for (int i = 0; i < 5; i++) cr_expect(!r[i].closes);
    close(c.fd);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* An idle connection is closed after --keep-alive-timeout, not before. */
Test(http_keepalive, idle_connection_closes_after_timeout, .timeout = 60) {
    TestServer s;
    server_start(&s, "--keep-alive-timeout 1");
    Conn c = {.fd = tcp_dial(s.port, 0)};
    put(c.fd, HEALTH);
    Resp r;
    cr_assert(read_response(&c, 5, &r));
    cr_expect(!r.closes);
    double t0 = monotonic_seconds();
    cr_expect(closed_within(&c, 5), "the idle connection was closed");
    double idle = monotonic_seconds() - t0;
    cr_expect(idle > 0.7 && idle < 2.5, "closed after %.2f s idle (timeout 1 s)", idle);
    close(c.fd);
    /* An idle close is no drop: nothing counted. */
    HttpResult m = http(&s, "GET", "/metrics", NULL, NULL);
    cr_expect(strstr(m.body, "reason=\"header_timeout\",model_name=\"" TINY_MODEL "\"} 0"), "%s", m.body);
    http_free(&m);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* A second request trickling its header block is cut at the header deadline. */
Test(http_keepalive, slow_headers_on_a_later_request_are_cut, .timeout = 60) {
    TestServer s;
    server_start(&s, "--header-timeout 1 --keep-alive-timeout 30");
    Conn c = {.fd = tcp_dial(s.port, 0)};
    put(c.fd, HEALTH);
    Resp r;
    cr_assert(read_response(&c, 5, &r));
    pause_ms(500); /* idle a while first: the deadline runs from the first byte */
    const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
    double t0 = monotonic_seconds();
    for (size_t k = 0; k < strlen(head) && monotonic_seconds() - t0 < 4; k++) {
        if (send(c.fd, head + k, 1, MSG_NOSIGNAL) != 1) break;
        struct pollfd pf = {c.fd, POLLIN, 0};
        if (poll(&pf, 1, 200) > 0) break; /* the server answered */
    }
    bool whole = read_response(&c, 3, &r);
    double took = monotonic_seconds() - t0;
    cr_expect(whole && r.status == 408 && r.closes, "408 and close: %s", r.head);
    cr_expect(took < 3, "cut %.2f s after its first byte (header timeout 1 s)", took);
    cr_expect(closed_within(&c, 3));
    close(c.fd);
    HttpResult m = http(&s, "GET", "/metrics", NULL, NULL);
    cr_expect(strstr(m.body, "reason=\"header_timeout\",model_name=\"" TINY_MODEL "\"} 1"), "%s", m.body);
    http_free(&m);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* A malformed later request gets one well-formed error and a close, as a first would. */
Test(http_keepalive, malformed_later_request_gets_a_well_formed_error, .timeout = 60) {
    TestServer s;
    server_start(&s, "");
    struct {
        const char *bytes;
        int status;
    } bad[] = {
        {"POST /v1/completions HTTP/1.1\r\nContent-Length: abc\r\n\r\nxx", 400},
        {"POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n", 400},
        {"POST /v1/completions HTTP/1.1\r\nContent-Length: 9000000\r\n\r\n", 413},
        {"GARBAGE\r\n\r\n", 400},
        {"\x01\xff\xfe\r\n\r\n", 400},
        {"GET /health HTTP/1.1\r\n bad: fold\r\n\r\n", 400},
        {"GET / HTTP/2.0\r\n\r\n", 505},
        {"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
        {"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX", 400},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Conn c = {.fd = tcp_dial(s.port, 0)};
        put(c.fd, HEALTH);
        Resp r;
        cr_assert(read_response(&c, 5, &r) && r.status == 200 && !r.closes, "%zu: the first", i);
        put(c.fd, bad[i].bytes);
        cr_assert(read_response(&c, 5, &r), "%zu: no whole answer: %s", i, c.buf);
        cr_expect_eq(r.status, bad[i].status, "%zu: %s", i, r.head);
        cr_expect(r.closes, "%zu: Connection: close", i);
        cr_expect(strstr(r.body, "\"error\"") && strstr(r.body, "\"message\""), "%zu: an error body: %s", i,
                  r.body);
        cr_expect(strstr(c.buf, "HTTP/1.1") == NULL, "%zu: nothing after it: %s", i, c.buf);
        cr_expect(closed_within(&c, 3), "%zu: closed", i);
        close(c.fd);
    }
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* HTTP/1.0 and Connection: close get one request; keep-alive 0 turns it off. */
Test(http_keepalive, http10_and_connection_close_still_close, .timeout = 60) {
    TestServer s;
    server_start(&s, "");
    const char *reqs[] = {"GET /health HTTP/1.0\r\n\r\n",
                          "GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                          "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                          "GET /health HTTP/1.1\r\nHost: x\r\nConnection: foo, Close\r\n\r\n"};
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        Conn c = {.fd = tcp_dial(s.port, 0)};
        put(c.fd, reqs[i]);
        Resp r;
        cr_assert(read_response(&c, 5, &r), "%zu", i);
        cr_expect(r.status == 200 && r.closes, "%zu: %s", i, r.head);
        cr_expect(closed_within(&c, 3), "%zu: closed", i);
        close(c.fd);
    }
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
    server_start(&s, "--keep-alive-timeout 0");
    Conn c = {.fd = tcp_dial(s.port, 0)};
    put(c.fd, HEALTH);
    Resp r;
    cr_assert(read_response(&c, 5, &r));
    cr_expect(r.status == 200 && r.closes, "keep-alive off: %s", r.head);
    cr_expect(closed_within(&c, 3));
    close(c.fd);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* A stream that ends cleanly (its last chunk) keeps the connection. */
Test(http_keepalive, stream_then_another_request, .timeout = 60) {
    TestServer s;
    server_start(&s, "");
    Conn c = {.fd = tcp_dial(s.port, 0)};
    char req[512];
    completion(req, sizeof req, "{\"prompt\": \"hi\", \"max_tokens\": 4, \"stream\": true}", "");
    for (int i = 0; i < 2; i++) {
        put(c.fd, req);
        Resp r;
        cr_assert(read_response(&c, 10, &r), "stream %d", i);
        cr_expect(r.status == 200 && !r.closes, "stream %d: %s", i, r.head);
        cr_expect(strstr(r.body, "data: [DONE]"), "stream %d: %s", i, r.body);
    }
    put(c.fd, HEALTH);
    Resp r;
    cr_assert(read_response(&c, 5, &r));
    cr_expect_eq(r.status, 200);
    close(c.fd);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* 4,000 idle kept-alive connections at a limit of 4,000: a new client is
 * served, and the connection idle longest is the one closed for it. */
Test(http_keepalive, idle_connections_do_not_lock_out_a_new_client, .timeout = 180) {
    enum { IDLE = 4000 };
    struct rlimit rl;
    cr_assert(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < IDLE + 256) {
        cr_log_warn("skipped: the hard limit on open files is %llu, under %d (ulimit -Hn)",
                    (unsigned long long)rl.rlim_max, IDLE + 256);
        cr_skip_test();
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < IDLE + 256) { /* the server inherits it */
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? IDLE + 256 : rl.rlim_max;
        cr_assert(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit: %s", strerror(errno));
    }
    TestServer s;
    server_start(&s, "--max-connections 4000 --keep-alive-timeout 120 --header-timeout 60");
    static int fds[IDLE];
    static Conn c; /* one reader at a time: each answer is read whole before the next */
    Resp r;
    for (int i = 0; i < IDLE; i++) {
        fds[i] = tcp_dial(s.port, 0);
        put(fds[i], HEALTH);
        if (i % 200 == 199 || i == IDLE - 1) /* answers in batches: a bounded backlog */
            for (int k = i - (i % 200); k <= i; k++) {
                c = (Conn){.fd = fds[k]};
                cr_assert(read_response(&c, 30, &r), "connection %d: no answer", k);
                cr_assert(r.status == 200 && !r.closes, "connection %d: %s", k, r.head);
            }
    }
    HttpResult m = http(&s, "GET", "/metrics", NULL, NULL); /* a new client, past the limit */
    cr_expect_eq(m.status, 200, "a new client is served: %d %s", m.status, m.body);
    http_free(&m);
    c = (Conn){.fd = fds[0]};
    cr_expect(closed_within(&c, 5), "the connection idle longest was closed for it");
    double t0 = monotonic_seconds();
    c = (Conn){.fd = tcp_dial(s.port, 0)};
    put(c.fd, HEALTH);
    cr_expect(read_response(&c, 5, &r) && r.status == 200, "and another: %s", r.head);
    cr_expect(monotonic_seconds() - t0 < 2, "served in %.2f s", monotonic_seconds() - t0);
    close(c.fd);
    /* The newest idle one is still served on its connection. */
    c = (Conn){.fd = fds[IDLE - 1]};
    put(c.fd, HEALTH);
    cr_expect(read_response(&c, 5, &r) && r.status == 200, "the newest idle one still works");
    for (int i = 0; i < IDLE; i++) close(fds[i]);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}
