/*
 * metrics.c - histograms and the Prometheus text page (see metrics.h).
 */
#include "metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* vLLM's bucket boundaries, in seconds. */
static const double E2E_BOUNDS[] = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                                    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0};
static const double TTFT_BOUNDS[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                     0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                     20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double ITL_BOUNDS[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                    0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};

static void histogram_init(Histogram *h, const double *bounds, int n) {
    memset(h, 0, sizeof *h);
    h->num_bounds = n;
    memcpy(h->bounds, bounds, sizeof(double) * (size_t)n);
}

void metrics_init(Metrics *m) {
    memset(m, 0, sizeof *m);
    histogram_init(&m->e2e_latency, E2E_BOUNDS, (int)(sizeof E2E_BOUNDS / sizeof E2E_BOUNDS[0]));
    histogram_init(&m->ttft, TTFT_BOUNDS, (int)(sizeof TTFT_BOUNDS / sizeof TTFT_BOUNDS[0]));
    histogram_init(&m->itl, ITL_BOUNDS, (int)(sizeof ITL_BOUNDS / sizeof ITL_BOUNDS[0]));
}

void histogram_observe(Histogram *h, double v) {
    int i = 0;
    while (i < h->num_bounds && v > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

typedef struct Page {
    char *data;
    size_t len, cap;
    int failed;
} Page;

static void emit(Page *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(Page *p, const char *fmt, ...) {
    if (p->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(p->data + p->len, p->cap - p->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            p->failed = 1;
            return;
        }
        if ((size_t)n < p->cap - p->len) {
            p->len += (size_t)n;
            return;
        }
        size_t cap = p->cap * 2 + (size_t)n;
        char *d = realloc(p->data, cap);
        if (!d) {
            p->failed = 1;
            return;
        }
        p->data = d;
        p->cap = cap;
    }
}

static void metric(Page *p, const char *type, const char *name, const char *help,
                   const char *model, double value) {
    emit(p, "# HELP nanovllm:%s %s\n# TYPE nanovllm:%s %s\nnanovllm:%s{model_name=\"%s\"} %.17g\n",
         name, help, name, type, name, model, value);
}

static void histogram(Page *p, const char *name, const char *help, const char *model,
                      const Histogram *h) {
    emit(p, "# HELP nanovllm:%s %s\n# TYPE nanovllm:%s histogram\n", name, help, name);
    long long cum = 0;
    for (int i = 0; i <= h->num_bounds; i++) {
        cum += h->counts[i];
        if (i < h->num_bounds)
            emit(p, "nanovllm:%s_bucket{le=\"%g\",model_name=\"%s\"} %lld\n", name, h->bounds[i],
                 model, cum);
        else
            emit(p, "nanovllm:%s_bucket{le=\"+Inf\",model_name=\"%s\"} %lld\n", name, model, cum);
    }
    emit(p, "nanovllm:%s_sum{model_name=\"%s\"} %.17g\nnanovllm:%s_count{model_name=\"%s\"} %lld\n",
         name, model, h->sum, name, model, h->count);
}

char *metrics_render(const Metrics *m, const EngineStats *s, int connections, const char *model,
                     size_t *len) {
    Page p = {malloc(8192), 0, 8192, 0};
    if (!p.data) return NULL;
    double usage = s->kv_blocks_total ? (double)s->kv_blocks_used / s->kv_blocks_total : 0.0;
    metric(&p, "gauge", "num_requests_running", "Requests in the running queue.", model, s->num_running);
    metric(&p, "gauge", "num_requests_waiting", "Requests waiting to be scheduled.", model, s->num_waiting);
    metric(&p, "gauge", "kv_cache_usage_perc", "Fraction of KV cache blocks in use (1 = 100%).",
           model, usage);
    metric(&p, "gauge", "kv_cache_blocks_used", "KV cache blocks held by requests.", model,
           s->kv_blocks_used);
    metric(&p, "gauge", "kv_cache_blocks_total", "KV cache blocks in all.", model, s->kv_blocks_total);
    metric(&p, "counter", "prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
           model, (double)s->prefix_query_tokens);
    metric(&p, "counter", "prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", model,
           (double)s->prefix_hit_tokens);
    metric(&p, "counter", "num_preemptions_total", "Preemptions of running requests.", model,
           (double)s->preemptions);
    metric(&p, "counter", "prompt_tokens_total", "Prompt tokens admitted.", model,
           (double)s->prompt_tokens);
    metric(&p, "counter", "generation_tokens_total", "Tokens generated.", model,
           (double)s->generation_tokens);
    static const char *reasons[5] = {"none", "stop", "length", "abort", "error"};
    emit(&p, "# HELP nanovllm:request_success_total Finished requests by finish reason.\n"
             "# TYPE nanovllm:request_success_total counter\n");
    for (int i = 1; i < 5; i++)
        emit(&p, "nanovllm:request_success_total{finished_reason=\"%s\",model_name=\"%s\"} %lld\n",
             reasons[i], model, m->finished[i]);
    metric(&p, "counter", "http_request_errors_total", "Requests answered with an error.", model,
           (double)m->http_errors);
    metric(&p, "counter", "http_client_closed_total",
           "Requests whose client left before the answer was complete (logged as 499).", model,
           (double)m->client_closed);
    metric(&p, "gauge", "http_connections", "Connections open now.", model, connections);
    emit(&p, "# HELP nanovllm:http_connections_dropped_total Connections dropped before a request "
             "was handled, by reason.\n# TYPE nanovllm:http_connections_dropped_total counter\n");
    for (int i = 0; i < NUM_DROPS; i++)
        emit(&p, "nanovllm:http_connections_dropped_total{reason=\"%s\",model_name=\"%s\"} %lld\n",
             HTTP_DROP_NAMES[i], model, m->dropped[i]);
    histogram(&p, "e2e_request_latency_seconds", "End-to-end request latency.", model, &m->e2e_latency);
    histogram(&p, "time_to_first_token_seconds", "Time to the first token.", model, &m->ttft);
    histogram(&p, "inter_token_latency_seconds", "Time between consecutive tokens.", model, &m->itl);
    if (p.failed) {
        free(p.data);
        return NULL;
    }
    *len = p.len;
    return p.data;
}
