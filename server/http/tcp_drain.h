/*
 * tcp_drain.h - at exit, wait until the kernel has delivered what the server
 * wrote (see tcp_drain.c for why).
 */
#ifndef NANOVLLM_TCP_DRAIN_H
#define NANOVLLM_TCP_DRAIN_H

#include <stdbool.h>

/* TCP sockets on local port `port` whose written bytes or FIN the peer has
 * not yet acknowledged; -1 when the kernel's tables cannot be read. */
int tcp_undelivered(int port);

/* Waits (polling every 20 ms) until tcp_undelivered(port) is 0 or the
 * timeout passes; returns how many were still undelivered (0: all arrived). */
int tcp_drain(int port, double timeout_seconds);

#endif
