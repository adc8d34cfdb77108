/*
 * server_helpers.h - a real `nanovllm serve` for end-to-end tests, and curl.
 *
 * server_start() launches build/nanovllm serve on 127.0.0.1 with an
 * ephemeral port (read back from its log) and waits for /health = 200;
 * http() runs curl against it and returns the status and body.
 */
#ifndef NANOVLLM_TEST_SERVER_HELPERS_H
#define NANOVLLM_TEST_SERVER_HELPERS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct TestServer {
    pid_t pid;
    int port;
    char dir[256]; /* temp folder: log, bodies */
    char log[300];
} TestServer;

/* extra: more `serve` flags (may be ""). */
void server_start(TestServer *s, const char *extra);
/* Sends sig, waits for the exit; returns the exit status (-1 if killed). */
int server_stop(TestServer *s, int sig);
char *server_log(const TestServer *s); /* malloc'ed */

typedef struct HttpResult {
    int status;
    char *body;    /* malloc'ed */
    char *headers; /* malloc'ed, with -i style header lines */
} HttpResult;

/* method, path, body (NULL: none), extra curl arguments (NULL: none). */
HttpResult http(const TestServer *s, const char *method, const char *path, const char *body,
                const char *curl_args);
void http_free(HttpResult *r);
json_t *http_json(const TestServer *s, const char *path, const char *body, int *status);

/* Polls /metrics (up to ~20 s) until the gauge nanovllm:NAME reads value;
 * false if it never does. Tests wait for states, never for fixed times. */
bool wait_for_gauge(const TestServer *s, const char *name, double value);

/* The SSE events of a streamed body: every "data: {...}" parsed, in order;
 * *done set when "data: [DONE]" ended it. */
json_t *sse_events(const char *body, int *done);

/* Raw sockets, for the tests of the HTTP edge. rcvbuf > 0: a small
 * receive buffer, set before the window is agreed. */
double monotonic_seconds(void);
void pause_ms(int ms);
int tcp_dial(int port, int rcvbuf);
void tcp_send_all(int fd, const void *data, size_t len);

#endif
