/*
 * cli_health.c - `nanovllm health`: is a server answering /health with 200?
 *
 * The container image's HEALTHCHECK runs this, so the runtime image needs
 * no curl: one HTTP/1.0 GET over a plain socket, exit 0 on status 200 and 1
 * otherwise (refused, timed out, 503 while loading or stopping). Without
 * --url it asks 127.0.0.1 on $NANOVLLM_PORT (default 8000), the port
 * `nanovllm serve` takes by default too.
 */
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli_args.h"
#include "commands.h"

static const char USAGE[] = "usage: nanovllm health [--url http://127.0.0.1:$NANOVLLM_PORT/health] [--timeout SECONDS]\n";

/* Reads until the status line is complete or the deadline passes. */
static int fetch_status(const char *host, const char *port, const char *path, int timeout_ms) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    if (getaddrinfo(host, port, &hints, &res) != 0) return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) return -1;
    char req[512];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, host);
    if (n < 0 || (size_t)n >= sizeof req || write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    char buf[64] = {0};
    size_t got = 0;
    struct pollfd p = {fd, POLLIN, 0};
    while (got < sizeof buf - 1 && !memchr(buf, '\n', got) && poll(&p, 1, timeout_ms) == 1) {
        ssize_t r = read(fd, buf + got, sizeof buf - 1 - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    int status;
    return sscanf(buf, "HTTP/%*d.%*d %d", &status) == 1 ? status : -1;
}

int command_health(int argc, char **argv) {
    static const struct option options[] = {{"url", required_argument, 0, 'u'},
                                            {"timeout", required_argument, 0, 't'},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};
    const char *env_port = getenv("NANOVLLM_PORT");
    char default_url[96];
    snprintf(default_url, sizeof default_url, "http://127.0.0.1:%.8s/health",
             env_port && env_port[0] ? env_port : "8000");
    const char *url = default_url;
    double timeout = 3;
    Error err = {0};
    optind = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
        if (c == 'u') url = optarg;
        else if (c == 't') {
            if (parse_double_arg("--timeout", optarg, 0.001, 3600, &timeout, &err)) {
                fprintf(stderr, "nanovllm health: %s\n", err.msg);
                return 2;
            }
        } else if (c == 'h') {
            fputs(USAGE, stdout);
            return 0;
        } else {
            fputs(USAGE, stderr);
            return 2;
        }
    }
    char host[256], port[16] = "80", path[512] = "/";
    if (strncmp(url, "http://", 7) != 0 || sscanf(url + 7, "%255[^:/]", host) != 1) {
        fprintf(stderr, "nanovllm health: --url must be http://HOST[:PORT]/PATH\n");
        return 2;
    }
    const char *rest = url + 7 + strlen(host);
    if (*rest == ':' && sscanf(rest + 1, "%15[0-9]", port) == 1) rest += 1 + strlen(port);
    if (*rest == '/') snprintf(path, sizeof path, "%s", rest);
    int status = fetch_status(host, port, path, (int)(timeout * 1000));
    if (status == 200) return 0;
    if (status < 0) fprintf(stderr, "nanovllm health: no answer from %s\n", url);
    else fprintf(stderr, "nanovllm health: %s answered %d\n", url, status);
    return 1;
}
