/*
 * test_http_edge.c - the layer under the JSON, tried as a hostile or merely
 * odd client would, with raw sockets against the real server: malformed
 * and conflicting Content-Length, bodies over the limit, garbage, slow
 * header blocks and bodies, the connection limit, half-closed clients,
 * streams cut by the shutdown grace, an exit that waits until the last bytes
 * are delivered, the accounting of clients that leave,
 * and a soak of 2,000 requests with a fifth of the streams hung up midway,
 * half of them on kept-alive connections.
 * Every loop is bounded in count and time; loopback only.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "server_helpers.h"


typedef struct Reply {
    char data[65536];
    size_t len;
    bool closed; /* the server closed (else the timeout ended the wait) */
    double seconds;
} Reply;

/* What the server sends until it closes or `timeout` seconds pass: all of
 * it, or its start and, for a long stream, its last 32 KiB. */
static void read_reply(int fd, double timeout, Reply *r) {
    double t0 = monotonic_seconds();
    r->len = 0;
    r->closed = false;
    while (monotonic_seconds() - t0 < timeout) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 50) <= 0) continue;
        if (r->len > sizeof r->data - 4096) { /* keep the head (status line) and the tail */
            memmove(r->data + 1024, r->data + r->len - 32768, 32768);
            r->len = 1024 + 32768;
        }
        ssize_t n = recv(fd, r->data + r->len, sizeof r->data - 1 - r->len, 0);
        if (n <= 0) {
            r->closed = true;
            break;
        }
        r->len += (size_t)n;
    }
    r->data[r->len] = '\0';
    r->seconds = monotonic_seconds() - t0;
}

static int status_of(const Reply *r) {
    return strncmp(r->data, "HTTP/1.1 ", 9) == 0 ? atoi(r->data + 9) : 0;
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

/* One connection: send, optionally shut the sending side, read the reply. */
static void exchange(int port, const char *data, size_t len, bool half_close, double timeout,
                     Reply *r) {
    int fd = tcp_dial(port, 0);
    tcp_send_all(fd, data, len);
    if (half_close) shutdown(fd, SHUT_WR);
    read_reply(fd, timeout, r);
    close(fd);
}

/* A whole POST /v1/completions with body into req; its length. It asks
 * for the connection to close after the answer (these tests read until
 * the close; keep-alive has its own, tests/test_http_keepalive.c). */
static size_t completion_request(char *req, size_t cap, const char *body) {
    int n = snprintf(req, cap, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
    cr_assert(n > 0 && (size_t)n < cap);
    return (size_t)n;
}

static void post(int port, const char *headers, const char *body, Reply *r) {
    char req[4096];
    int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "%s\r\n\r\n%s", headers, body);
    exchange(port, req, (size_t)n, false, 5, r);
}

/* The JSON body of a reply: an OpenAI error with a string-or-null code. */
static void expect_openai_error(const Reply *r, const char *what) {
    const char *body = strstr(r->data, "\r\n\r\n");
    cr_assert(body, "%s: no body: %s", what, r->data);
    json_t *j = json_loads(body + 4, 0, NULL);
    cr_expect(j, "%s: body is not JSON: %s", what, body + 4);
    json_t *e = json_object_get(j, "error");
    cr_expect(json_is_string(json_object_get(e, "message")) && json_is_string(json_object_get(e, "type")),
              "%s: %s", what, body + 4);
    json_t *code = json_object_get(e, "code");
    cr_expect(json_is_string(code) || json_is_null(code), "%s: code %s", what, body + 4);
    json_decref(j);
}

static const char BODY[] = "{\"prompt\": \"hi\", \"max_tokens\": 2}";

/* 1: one well-formed 400 for each bad Content-Length, never two status lines. */
Test(http_edge, malformed_content_length_gets_one_well_formed_400, .timeout = 60) {
    TestServer s;
    server_start(&s, "");
    const char *values[] = {"-1", "abc", "1 2", "+5", "0x10", "5, 5", ""};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char h[64];
        snprintf(h, sizeof h, "Content-Length: %s", values[i]);
        Reply r;
        post(s.port, h, BODY, &r);
        cr_expect_eq(status_of(&r), 400, "'%s': %s", values[i], r.data);
        cr_expect_eq(count(r.data, "HTTP/1.1 "), 1, "'%s': one status line: %s", values[i], r.data);
        cr_expect(r.closed && r.seconds < 2, "'%s': answered and closed at once", values[i]);
        expect_openai_error(&r, values[i]);
    }
    Reply big;
    post(s.port, "Content-Length: 12345678901234567890", BODY, &big);
    cr_expect_eq(status_of(&big), 413, "%s", big.data);
    cr_expect_eq(count(big.data, "HTTP/1.1 "), 1);
    Reply ok;
    char h[64];
    snprintf(h, sizeof h, "Content-Length: %zu", strlen(BODY));
    post(s.port, h, BODY, &ok);
    cr_expect_eq(status_of(&ok), 200, "a good request still works: %s", ok.data);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* 2: two different Content-Lengths are refused (RFC 9112); the same value twice is not. */
Test(http_edge, conflicting_content_lengths_are_refused, .timeout = 60) {
    TestServer s;
    server_start(&s, "");
    char h[128];
    snprintf(h, sizeof h, "Content-Length: 5\r\nContent-Length: %zu", strlen(BODY));
    Reply r;
    post(s.port, h, BODY, &r);
    cr_expect_eq(status_of(&r), 400, "%s", r.data);
    cr_expect(strstr(r.data, "conflicting Content-Length"), "%s", r.data);
    snprintf(h, sizeof h, "Content-Length: %zu\r\nTransfer-Encoding: chunked", strlen(BODY));
    post(s.port, h, BODY, &r);
    cr_expect_eq(status_of(&r), 400, "Content-Length with Transfer-Encoding: %s", r.data);
    snprintf(h, sizeof h, "Content-Length: %zu\r\ncontent-length: %zu", strlen(BODY), strlen(BODY));
    post(s.port, h, BODY, &r);
    cr_expect_eq(status_of(&r), 200, "the same length twice: %s", r.data);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* 4: a body over the limit is refused at its headers; garbage at once. */
Test(http_edge, refused_at_the_headers_not_after_a_wait, .timeout = 60) {
    TestServer s;
    server_start(&s, "");
    Reply r;
    post(s.port, "Content-Length: 9000000", "", &r); /* no body sent at all */
    cr_expect_eq(status_of(&r), 413, "%s", r.data);
    cr_expect(r.seconds < 2, "413 took %.1f s", r.seconds);
    struct {
        const char *bytes;
        size_t len;
        int status;
    } junk[] = {{"GARBAGE\r\n\r\n", 11, 400}, {"\x00\xff\xfe", 3, 400},
                {"GET / HTTP/2.0\r\n\r\n", 18, 505}, {"GET /health HTTP/1.1\r\n bad: fold\r\n\r\n", 36, 400},
                {"GET /health HTTP/1.1\r\nBad Name: x\r\n\r\n", 37, 400}};
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        exchange(s.port, junk[i].bytes, junk[i].len, false, 5, &r);
        cr_expect_eq(status_of(&r), junk[i].status, "junk %zu: %s", i, r.data);
        cr_expect(r.closed && r.seconds < 2, "junk %zu answered in %.1f s", i, r.seconds);
    }
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* 3: a header block trickling in is cut at the deadline with a 408. */
Test(http_edge, slow_header_blocks_time_out, .timeout = 60) {
    TestServer s;
    server_start(&s, "--header-timeout 1");
    enum { N = 5 };
    int fds[N];
    for (int i = 0; i < N; i++) fds[i] = tcp_dial(s.port, 0);
    const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
    double t0 = monotonic_seconds();
    bool open[N] = {true, true, true, true, true};
    for (size_t k = 0; k < strlen(head) && monotonic_seconds() - t0 < 4; k++) {
        for (int i = 0; i < N; i++)
            if (open[i] && send(fds[i], head + k, 1, MSG_NOSIGNAL) != 1) open[i] = false;
        pause_ms(200);
    }
    for (int i = 0; i < N; i++) {
        Reply r;
        read_reply(fds[i], 3, &r);
        cr_expect_eq(status_of(&r), 408, "connection %d: %s", i, r.data);
        cr_expect(r.closed);
        close(fds[i]);
    }
    cr_expect(monotonic_seconds() - t0 < 6, "the deadline is for the whole block, not idle time");
    HttpResult m = http(&s, "GET", "/metrics", NULL, NULL);
    cr_expect(strstr(m.body, "http_connections_dropped_total{reason=\"header_timeout\",model_name=\"" TINY_MODEL "\"} 5"),
              "%s", m.body);
    http_free(&m);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* 3: at the connection limit a new client gets a fast 503, or, when a slow
 * header block has been waiting a second, that one is shed for it. */
Test(http_edge, connection_limit_refuses_fast_and_sheds_slow_headers, .timeout = 60) {
    TestServer s;
    server_start(&s, "--max-connections 4 --header-timeout 20");
    int slow[4];
    for (int i = 0; i < 4; i++) {
        slow[i] = tcp_dial(s.port, 0);
        tcp_send_all(slow[i], "POST /v1/comp", 13);
    }
    pause_ms(100);
    char req[256];
    size_t n = completion_request(req, sizeof req, BODY);
    Reply r;
    exchange(s.port, req, n, false, 5, &r);
    cr_expect_eq(status_of(&r), 503, "at the limit: %s", r.data);
    cr_expect(strstr(r.data, "Retry-After: 1"), "%s", r.data);
    cr_expect(r.seconds < 1, "refused in %.2f s", r.seconds);
    pause_ms(1100); /* now the slow ones have waited over a second */
    exchange(s.port, req, n, false, 10, &r);
    cr_expect_eq(status_of(&r), 200, "the oldest slow header made room: %s", r.data);
    Reply shed;
    read_reply(slow[0], 2, &shed);
    cr_expect_eq(status_of(&shed), 408, "the oldest was shed: %s", shed.data);
    for (int i = 0; i < 4; i++) close(slow[i]);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* 4: a body shorter than its Content-Length is cut at the body deadline. */
Test(http_edge, slow_body_is_cut, .timeout = 60) {
    TestServer s;
    server_start(&s, "--body-timeout 1");
    int fd = tcp_dial(s.port, 0);
    const char *req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"";
    tcp_send_all(fd, req, strlen(req));
    Reply r;
    read_reply(fd, 5, &r);
    cr_expect(r.closed && r.seconds < 3, "closed after %.1f s", r.seconds);
    close(fd);
    pause_ms(100);
    char *log = server_log(&s);
    cr_expect(strstr(log, "POST /v1/completions 408"), "the late body is logged: %s", log);
    free(log);
    HttpResult m = http(&s, "GET", "/metrics", NULL, NULL);
    cr_expect(strstr(m.body, "reason=\"body_timeout\",model_name=\"" TINY_MODEL "\"} 1"), "%s", m.body);
    http_free(&m);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* 5: a client that sends its request and shuts its sending side still reads the answer. */
Test(http_edge, half_closed_client_gets_its_answer, .timeout = 60) {
    TestServer s;
    server_start(&s, "");
    const char *bodies[] = {"{\"prompt\": \"hi\", \"max_tokens\": 20}",
                            "{\"prompt\": \"hi\", \"max_tokens\": 20, \"stream\": true}"};
    for (int i = 0; i < 2; i++) {
        char req[512];
        size_t n = completion_request(req, sizeof req, bodies[i]);
        Reply r;
        exchange(s.port, req, n, true, 10, &r);
        cr_expect_eq(status_of(&r), 200, "%s", r.data);
        cr_expect(i == 0 ? strstr(r.data, "\"finish_reason\":\"length\"") != NULL
                         : strstr(r.data, "data: [DONE]") != NULL,
                  "the whole answer: %s", r.data);
    }
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* 6: streams still running when the grace ends get an error event and [DONE]. */
Test(http_edge, streams_cut_by_shutdown_end_properly, .timeout = 60) {
    TestServer s;
    server_start(&s, "--shutdown-grace 0.5");
    const char *body = "{\"prompt\": \"a\", \"max_tokens\": 1900, \"ignore_eos\": true, \"stream\": true}";
    char req[512];
    size_t n = completion_request(req, sizeof req, body);
    int fds[2];
    for (int i = 0; i < 2; i++) {
        fds[i] = tcp_dial(s.port, 0);
        tcp_send_all(fds[i], req, n);
    }
    cr_assert(wait_for_gauge(&s, "num_requests_running", 2), "the streams never started");
    kill(s.pid, SIGTERM);
    for (int i = 0; i < 2; i++) {
        Reply r;
        read_reply(fds[i], 10, &r);
        const char *tail = r.len > 400 ? r.data + r.len - 400 : r.data;
        cr_expect(strstr(tail, "\"type\":\"server_error\""), "an error event ends stream %d: %s", i, tail);
        cr_expect(strstr(tail, "data: [DONE]\n\n"), "then [DONE]: %s", tail);
        cr_expect(strstr(tail, "\r\n0\r\n\r\n"), "then the terminating chunk: %s", tail);
        close(fds[i]);
    }
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* 6b: the server exits only once the kernel has delivered what it wrote: a
 * client that has not read its stream yet still gets all of it after
 * SIGTERM (in a container, bytes still queued die with the process). */
Test(http_edge, exit_waits_until_responses_are_delivered, .timeout = 60) {
    TestServer s;
    server_start(&s, "");
    int fd = tcp_dial(s.port, 2048); /* a stream of ~13 KB: more than this holds */
    char req[512];
    size_t n = completion_request(req, sizeof req,
                                  "{\"prompt\": \"a\", \"max_tokens\": 64, \"ignore_eos\": true, \"stream\": true}");
    tcp_send_all(fd, req, n);
    /* Done for the server (its only connection left is the /metrics poll)... */
    cr_assert(wait_for_gauge(&s, "http_connections", 1), "the stream never completed");
    /* ...while its end is still queued: not in our receive buffer yet. */
    static char queued[65536];
    ssize_t got = recv(fd, queued, sizeof queued - 1, MSG_PEEK | MSG_DONTWAIT);
    cr_assert(got > 0 && got < (ssize_t)sizeof queued - 1);
    queued[got] = '\0';
    cr_assert(!strstr(queued, "[DONE]"), "the whole stream fit the receive buffer: no test");
    kill(s.pid, SIGTERM);
    pause_ms(500);
    siginfo_t info = {0};
    cr_assert_eq(waitid(P_PID, (id_t)s.pid, &info, WEXITED | WNOHANG | WNOWAIT), 0);
    cr_expect_eq(info.si_pid, 0, "the server exited with its answer undelivered");
    Reply r;
    read_reply(fd, 10, &r);
    cr_expect(r.closed && strstr(r.data, "data: [DONE]\n\n") && strstr(r.data, "\r\n0\r\n\r\n"),
              "the whole stream arrived: %s", r.len > 200 ? r.data + r.len - 200 : r.data);
    close(fd);
    double t0 = monotonic_seconds();
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
    cr_expect(monotonic_seconds() - t0 < 2, "the server exited %.1f s after the client read everything", monotonic_seconds() - t0);
}

/* 7: who left is logged as 499 and counted; routes and codes as OpenAI has them. */
Test(http_edge, accounting_and_routes, .timeout = 60) {
    TestServer s;
    server_start(&s, "--api-key sk-edge");
    const char *auth = "Authorization: Bearer sk-edge\r\n";
    Reply r;
    char req[1024];
    /* a stream whose client leaves after the headers */
    const char *body = "{\"prompt\": \"a\", \"max_tokens\": 1500, \"ignore_eos\": true, \"stream\": true}";
    int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n%sContent-Length: %zu\r\n\r\n%s",
                     auth, strlen(body), body);
    int fd = tcp_dial(s.port, 0);
    tcp_send_all(fd, req, (size_t)n);
    read_reply(fd, 0.3, &r);
    close(fd);
    /* clients that close before their body is complete */
    for (int i = 0; i < 5; i++) {
        fd = tcp_dial(s.port, 0);
        n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n%sContent-Length: 50\r\n\r\n{", auth);
        tcp_send_all(fd, req, (size_t)n);
        pause_ms(50);
        close(fd);
    }
    cr_assert(wait_for_gauge(&s, "num_requests_running", 0));
    pause_ms(200);
    char *log = server_log(&s);
    cr_expect(strstr(log, "POST /v1/completions 499") && strstr(log, "client disconnected, aborted"),
              "the stream's client left: 499: %s", log);
    cr_expect_eq(count(log, "499: the client left before its request was complete"), 5, "%s", log);
    free(log);
    HttpResult m = http(&s, "GET", "/metrics", NULL, NULL);
    cr_expect(strstr(m.body, "nanovllm:http_client_closed_total{model_name=\"" TINY_MODEL "\"} 6"), "%s", m.body);
    http_free(&m);
    /* GET /v1/models/{id}; unknown routes need the key before they are told apart */
    n = snprintf(req, sizeof req, "GET /v1/models/" TINY_MODEL " HTTP/1.1\r\nHost: x\r\n%s\r\n", auth);
    exchange(s.port, req, (size_t)n, false, 5, &r);
    cr_expect_eq(status_of(&r), 200, "%s", r.data);
    cr_expect(strstr(r.data, "\"object\":\"model\""), "%s", r.data);
    n = snprintf(req, sizeof req, "GET /v1/models/nope HTTP/1.1\r\nHost: x\r\n%s\r\n", auth);
    exchange(s.port, req, (size_t)n, false, 5, &r);
    cr_expect_eq(status_of(&r), 404, "%s", r.data);
    expect_openai_error(&r, "unknown model");
    exchange(s.port, "GET /v2/secret HTTP/1.1\r\nHost: x\r\n\r\n", 36, false, 5, &r);
    cr_expect_eq(status_of(&r), 401, "no key, no route probing: %s", r.data);
    expect_openai_error(&r, "no key");
    exchange(s.port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 34, false, 5, &r);
    cr_expect_eq(status_of(&r), 200, "probes need no key: %s", r.data);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}

/* ---- the soak --------------------------------------------------------------------------------- */

typedef struct SoakConn {
    int fd;
    bool keep;    /* a kept-alive connection: the next request follows on it */
    bool busy;    /* a request is out */
    bool hang_up; /* leaves after its first event */
    bool ok_status, saw_data, saw_done, saw_end;
    char tail[64]; /* the last bytes, for markers split across reads */
    size_t tail_len;
} SoakConn;

/* Whether the server runs under AddressSanitizer, whose quarantine keeps
 * freed memory resident by design (so RSS says nothing about leaks there). */
static bool under_asan(pid_t pid) {
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    bool asan = false;
    while (f && !asan && fgets(line, sizeof line, f)) asan = strstr(line, "libasan") != NULL;
    if (f) fclose(f);
    return asan;
}

static long rss_kib(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) kib = atol(line + 6);
    if (f) fclose(f);
    return kib;
}

/* Looks for the markers in tail + the new bytes. */
static void soak_feed(SoakConn *c, const char *data, size_t n) {
    char buf[64 + 8192];
    memcpy(buf, c->tail, c->tail_len);
    size_t m = n < 8192 ? n : 8192;
    memcpy(buf + c->tail_len, data + (n - m), m);
    size_t len = c->tail_len + m;
    buf[len] = '\0';
    if (strstr(buf, "HTTP/1.1 200")) c->ok_status = true;
    if (strstr(buf, "data: {")) c->saw_data = true;
    if (strstr(buf, "data: [DONE]")) c->saw_done = true;
    if (c->saw_done && strstr(buf, "\r\n0\r\n\r\n")) c->saw_end = true; /* the last chunk */
    c->tail_len = len < 48 ? len : 48;
    memcpy(c->tail, buf + len - c->tail_len, c->tail_len);
}

/* 2,000 streamed requests, 32 at a time, a fifth hung up after their first
 * event: the rest all end with [DONE], the KV cache and the gauges go back
 * to 0, and resident memory grows by less than the KV budget after warm-up.
 * Half the slots keep their connection alive and send their next request
 * on it once a stream has ended with its last chunk; the others ask for a
 * close and read until it. */
Test(http_edge, soak_with_hung_up_streams, .timeout = 300) {
    TestServer s;
    server_start(&s, "--kv-cache-memory 64MiB --max-num-seqs 32");
    enum { TOTAL = 2000, CONCURRENCY = 32, WARM = 200 };
    SoakConn conns[CONCURRENCY];
    for (int i = 0; i < CONCURRENCY; i++) conns[i] = (SoakConn){.fd = -1, .keep = i % 2 == 0};
    int started = 0, finished = 0, hung = 0, done = 0, failed = 0, reused = 0;
    long rss_warm = -1;
    uint64_t seed = 12345;
    double t0 = monotonic_seconds();
    while (finished < TOTAL && monotonic_seconds() - t0 < 240) {
        for (int i = 0; i < CONCURRENCY && started < TOTAL; i++) {
            if (conns[i].busy) continue;
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            char body[160], req[512];
            snprintf(body, sizeof body, "{\"prompt\": \"w%d\", \"max_tokens\": %d, \"ignore_eos\": true, \"stream\": true}",
                     started, 2 + (int)((seed >> 33) % 10));
            int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n%sContent-Length: %zu\r\n\r\n%s",
                             conns[i].keep ? "" : "Connection: close\r\n", strlen(body), body);
            int fd = conns[i].fd;
            if (fd < 0) fd = tcp_dial(s.port, 0); else reused++;
            conns[i] = (SoakConn){.fd = fd, .keep = conns[i].keep, .busy = true, .hang_up = (seed >> 20) % 5 == 0};
            tcp_send_all(fd, req, (size_t)n);
            started++;
        }
        struct pollfd pf[CONCURRENCY];
        for (int i = 0; i < CONCURRENCY; i++) pf[i] = (struct pollfd){conns[i].fd, POLLIN, 0};
        if (poll(pf, CONCURRENCY, 100) <= 0) continue;
        for (int i = 0; i < CONCURRENCY; i++) {
            SoakConn *c = &conns[i];
            if (!c->busy || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char data[8192];
            ssize_t n = recv(c->fd, data, sizeof data, 0);
            if (n > 0) soak_feed(c, data, (size_t)n);
            bool leave = c->hang_up && c->saw_data && !c->saw_done;
            bool next = c->keep && c->saw_end && !leave; /* the connection stays for the next */
            if (n > 0 && !leave && !next) continue;
            if (leave) hung++;
            else if (c->ok_status && c->saw_done) done++;
            else failed++;
            c->busy = false;
            if (!next) {
                close(c->fd);
                c->fd = -1;
            }
            if (++finished == WARM) rss_warm = rss_kib(s.pid);
        }
    }
    cr_expect_eq(finished, TOTAL, "%d of %d requests ended in time", finished, TOTAL);
    cr_expect_eq(failed, 0, "%d requests failed (%d done, %d hung up)", failed, done, hung);
    cr_expect_gt(hung, TOTAL / 10, "a fifth hung up: %d", hung);
    cr_expect_gt(reused, TOTAL / 4, "requests on kept-alive connections: %d", reused);
    for (int i = 0; i < CONCURRENCY; i++)
        if (conns[i].fd >= 0) close(conns[i].fd);
    cr_assert(wait_for_gauge(&s, "num_requests_running", 0) && wait_for_gauge(&s, "num_requests_waiting", 0));
    cr_expect(wait_for_gauge(&s, "kv_cache_blocks_used", 0), "every hung-up stream's blocks came back");
    long rss_end = rss_kib(s.pid);
    cr_log_info("soak: %d done (%d on kept-alive connections), %d hung up in %.1f s; RSS %ld KiB after "
                "warm-up, %ld KiB at the end", done, reused, hung, monotonic_seconds() - t0, rss_warm, rss_end);
    if (under_asan(s.pid))
        cr_log_info("soak: RSS bound not checked under AddressSanitizer (its quarantine holds freed memory)");
    else
        cr_expect(rss_warm > 0 && rss_end - rss_warm < (64 + 32) * 1024,
                  "RSS grew by %ld KiB after warm-up (bound: the 64 MiB KV budget + 32 MiB)", rss_end - rss_warm);
    cr_expect_eq(server_stop(&s, SIGTERM), 0);
}
