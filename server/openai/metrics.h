/*
 * metrics.h - what /metrics reports, in Prometheus' text format.
 *
 * Names follow vLLM's `vllm:*` metrics under our own prefix, `nanovllm:`.
 * Gauges and counters of the engine come from engine_stats(); latency
 * histograms (end-to-end, time to first token, inter-token) and finished
 * request counts are observed by the server on the event-loop thread, the
 * only thread that touches this struct.
 */
#ifndef NANOVLLM_METRICS_H
#define NANOVLLM_METRICS_H

#include <stddef.h>

#include "engine/engine.h"
#include "server/http/connection_gate.h"

#define HISTOGRAM_MAX_BUCKETS 24

typedef struct Histogram {
    int num_bounds;
    double bounds[HISTOGRAM_MAX_BUCKETS]; /* upper bounds, ascending; +Inf implied */
    long long counts[HISTOGRAM_MAX_BUCKETS + 1];
    double sum;
    long long count;
} Histogram;

typedef struct Metrics {
    Histogram e2e_latency, ttft, itl;
    long long finished[5]; /* by FinishReason */
    long long http_errors; /* requests answered with an error */
    long long client_closed; /* requests whose client left before the answer (logged 499) */
    long long dropped[NUM_DROPS]; /* connections dropped before a request, by reason */
} Metrics;

void metrics_init(Metrics *m);
void histogram_observe(Histogram *h, double value);

/* The /metrics page (malloc'ed). model_name labels the series; connections
 * is the number of connections open now. */
char *metrics_render(const Metrics *m, const EngineStats *s, int connections, const char *model_name,
                     size_t *len);

#endif
