/*
 * server_helpers.c - see server_helpers.h.
 */
#include "server_helpers.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

char *server_log(const TestServer *s) { return read_text(s->log); }

void server_start(TestServer *s, const char *extra) {
    char *dir = make_temp_dir();
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    free(dir);
    snprintf(s->log, sizeof s->log, "%s/server.log", s->dir);
    write_text(s->log, ""); /* exists before the child can write it */
    const char *bin = getenv("NANOVLLM_BIN") ? getenv("NANOVLLM_BIN") : "build/nanovllm";
    /* The model first, as vLLM takes it, unless the test names its own. */
    const char *model = strstr(extra, "--model ") ? "" : TINY_MODEL;
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "exec %s serve %s --device cpu --port 0 --kv-cache-memory 256MiB "
             "--max-model-len 2048 --shutdown-grace 10 %s",
             bin, model, extra);
    s->pid = fork();
    cr_assert(s->pid >= 0, "fork failed");
    if (s->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test must not leave servers behind */
        FILE *f = freopen(s->log, "w", stderr);
        if (!f) _exit(127);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* the port, from "listening on http://127.0.0.1:PORT" */
    s->port = 0;
    for (int i = 0; i < 400 && !s->port; i++) {
        sleep_ms(25);
        char *log = read_text(s->log);
        const char *p = strstr(log, "listening on http://127.0.0.1:");
        if (p) s->port = atoi(p + strlen("listening on http://127.0.0.1:"));
        free(log);
        int st;
        cr_assert(waitpid(s->pid, &st, WNOHANG) == 0, "the server exited at start-up");
    }
    cr_assert(s->port > 0, "no port in the server log");
    for (int i = 0; i < 400; i++) {
        HttpResult r = http(s, "GET", "/health", NULL, NULL);
        int status = r.status;
        http_free(&r);
        if (status == 200) return;
        sleep_ms(25);
    }
    cr_assert_fail("the server never became healthy");
}

int server_stop(TestServer *s, int sig) {
    if (s->pid <= 0) return -1;
    kill(s->pid, sig);
    int st = 0;
    for (int i = 0; i < 600; i++) {
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            s->pid = 0;
            int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            if (code != 0) { /* show why before the folder goes */
                char *log = server_log(s);
                size_t n = strlen(log);
                cr_log_error("server exited with %d (signal %d); log tail:\n%s", code,
                             WIFSIGNALED(st) ? WTERMSIG(st) : 0, log + (n > 3000 ? n - 3000 : 0));
                free(log);
            }
            rm_rf(s->dir);
            return code;
        }
        sleep_ms(25);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, &st, 0);
    s->pid = 0;
    cr_assert_fail("the server did not stop within 15 s of signal %d", sig);
    return -1;
}

HttpResult http(const TestServer *s, const char *method, const char *path, const char *body,
                const char *curl_args) {
    static int counter;
    char req[400], resp[400], hdr[400], cmd[4096];
    int k = ++counter;
    snprintf(req, sizeof req, "%s/req%d-%d", s->dir, (int)getpid(), k);
    snprintf(resp, sizeof resp, "%s/resp%d-%d", s->dir, (int)getpid(), k);
    snprintf(hdr, sizeof hdr, "%s/hdr%d-%d", s->dir, (int)getpid(), k);
    if (body) write_text(req, body);
    char data[512] = "";
    if (body) snprintf(data, sizeof data, "-H 'Content-Type: application/json' --data-binary @%s", req);
    snprintf(cmd, sizeof cmd, "curl -s -N -X %s %s %s -D %s -o %s -w '%%{http_code}' "
                              "http://127.0.0.1:%d%s",
             method, data, curl_args ? curl_args : "", hdr, resp, s->port, path);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    HttpResult r = {0};
    if (fscanf(p, "%d", &r.status) != 1) r.status = 0;
    pclose(p);
    FILE *f = fopen(resp, "r");
    r.body = f ? (fclose(f), read_text(resp)) : strdup("");
    f = fopen(hdr, "r");
    r.headers = f ? (fclose(f), read_text(hdr)) : strdup("");
    unlink(req);
    unlink(resp);
    unlink(hdr);
    return r;
}

void http_free(HttpResult *r) {
    free(r->body);
    free(r->headers);
}

json_t *http_json(const TestServer *s, const char *path, const char *body, int *status) {
    HttpResult r = http(s, body ? "POST" : "GET", path, body, NULL);
    json_error_t jerr;
    json_t *j = json_loads(r.body, JSON_ALLOW_NUL, &jerr);
    if (status) *status = r.status;
    cr_assert(j, "%s %s -> %d, not JSON: %s", body ? "POST" : "GET", path, r.status, r.body);
    http_free(&r);
    return j;
}

json_t *sse_events(const char *body, int *done) {
    json_t *events = json_array();
    *done = 0;
    const char *p = body;
    while ((p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        cr_assert(end, "an SSE event without its blank line");
        cr_assert(!*done, "an event after [DONE]");
        if (end - p == 6 && strncmp(p, "[DONE]", 6) == 0) {
            *done = 1;
        } else {
            json_error_t jerr;
            json_t *e = json_loadb(p, (size_t)(end - p), JSON_ALLOW_NUL, &jerr);
            cr_assert(e, "SSE event is not JSON: %.*s", (int)(end - p), p);
            json_array_append_new(events, e);
        }
        p = end + 2;
    }
    return events;
}

bool wait_for_gauge(const TestServer *s, const char *name, double value) {
    char key[160];
    snprintf(key, sizeof key, "nanovllm:%s{", name);
    for (int tries = 0; tries < 800; tries++) {
        HttpResult m = http(s, "GET", "/metrics", NULL, NULL);
        const char *p = m.body ? strstr(m.body, key) : NULL;
        const char *close = p ? strchr(p, '}') : NULL;
        bool reached = close && strtod(close + 1, NULL) == value;
        http_free(&m);
        if (reached) return true;
        sleep_ms(25);
    }
    return false;
}

double monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

void pause_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int tcp_dial(int port, int rcvbuf) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0, "socket: %s", strerror(errno));
    if (rcvbuf > 0) cr_assert(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf) == 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s", strerror(errno));
    return fd;
}

void tcp_send_all(int fd, const void *data, size_t len) {
    cr_assert(send(fd, data, len, MSG_NOSIGNAL) == (ssize_t)len, "send: %s", strerror(errno));
}
