/*
 * tcp_drain.c - at exit, wait until the kernel has delivered what the server
 * wrote.
 *
 * For the server a response is complete once its last byte is in the
 * socket's send buffer; the socket is then closed and the kernel sends the
 * rest on its own. On a host a process may exit then. In a container it may
 * not: the network namespace goes with the pod, and with it the bytes still
 * queued (a stream's last events, [DONE]) - the client, or the proxy in
 * front of us, then waits for them until its timeout. Rolling restarts
 * under load showed it (scripts/k8s_test.sh). Closed sockets are no longer
 * ours to ask, so the kernel's tables are read (/proc/net/tcp and tcp6, the
 * sockets of our network namespace): a socket on our port with bytes not yet
 * acknowledged, or in a state whose FIN is not yet acknowledged, has not
 * delivered everything. Linux only; elsewhere nothing is waited for.
 */
#include "tcp_drain.h"

#include <stdio.h>
#include <time.h>

#include "base/log.h"

/* The states of include/net/tcp_states.h in which our FIN awaits its ACK. */
enum { TCP_FIN_WAIT1 = 4, TCP_LAST_ACK = 9, TCP_LISTEN = 10, TCP_CLOSING = 11 };

/* Undelivered sockets on `port` in one table; -1 if it cannot be opened. */
static int count_in(const char *table, int port) {
    FILE *f = fopen(table, "r");
    if (!f) return -1;
    char line[512];
    int n = 0;
    if (!fgets(line, sizeof line, f)) { /* the column titles */
        fclose(f);
        return 0;
    }
    while (fgets(line, sizeof line, f)) {
        char local[64];
        unsigned local_port, state;
        unsigned long tx_queue;
        /* "  0: 0100007F:1F40 0100007F:C350 01 00000000:00000000 ..." */
        if (sscanf(line, " %*d: %63[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x %lx:%*x", local, &local_port,
                   &state, &tx_queue) != 4)
            continue;
        if ((int)local_port != port || state == TCP_LISTEN) continue;
        if (tx_queue > 0 || state == TCP_FIN_WAIT1 || state == TCP_LAST_ACK || state == TCP_CLOSING) n++;
    }
    fclose(f);
    return n;
}

int tcp_undelivered(int port) {
    int v4 = count_in("/proc/net/tcp", port), v6 = count_in("/proc/net/tcp6", port);
    if (v4 < 0 && v6 < 0) return -1;
    return (v4 > 0 ? v4 : 0) + (v6 > 0 ? v6 : 0);
}

int tcp_drain(int port, double timeout_seconds) {
    double deadline = now_seconds() + timeout_seconds;
    for (;;) {
        int n = tcp_undelivered(port);
        if (n <= 0 || now_seconds() >= deadline) return n > 0 ? n : 0;
        struct timespec pause = {0, 20 * 1000000L};
        nanosleep(&pause, NULL);
    }
}
