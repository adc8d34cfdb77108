/*
 * bench_chat_template.c - timing the chat template (see the header). Each
 * render is timed alone; the request is parsed once, as the server parses
 * it once before rendering.
 */
#include "bench_chat_template.h"

#include <stdio.h>
#include <stdlib.h>

#include "engine/base/log.h"

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int bench_chat_template(const ChatTemplate *ct, const json_t *request, int runs, bool json,
                        Error *err) {
    double *ms = calloc((size_t)runs, sizeof *ms);
    if (!ms) return error_set(err, "out of memory");
    size_t len = 0;
    char *text = chat_template_render(ct, request, chat_template_clock(), &len, err); /* warm-up */
    free(text);
    if (!text) {
        free(ms);
        return -1;
    }
    double total = 0;
    for (int i = 0; i < runs; i++) {
        double t0 = now_seconds();
        text = chat_template_render(ct, request, chat_template_clock(), &len, err);
        ms[i] = (now_seconds() - t0) * 1e3;
        total += ms[i];
        free(text);
        if (!text) {
            free(ms);
            return -1;
        }
    }
    qsort(ms, (size_t)runs, sizeof *ms, compare_doubles);
    size_t messages = json_array_size(json_object_get(request, "messages"));
    size_t tools = json_array_size(json_object_get(request, "tools"));
    if (json)
        printf("{\"messages\": %zu, \"tools\": %zu, \"prompt_bytes\": %zu, \"runs\": %d, "
               "\"median_ms\": %.4f, \"best_ms\": %.4f, \"mean_ms\": %.4f}\n",
               messages, tools, len, runs, ms[runs / 2], ms[0], total / runs);
    else
        printf("chat template: %zu messages, %zu tools -> %zu bytes; %d renders: median %.3f ms, "
               "best %.3f ms, mean %.3f ms\n",
               messages, tools, len, runs, ms[runs / 2], ms[0], total / runs);
    free(ms);
    return fflush(stdout) == 0 ? 0 : error_set(err, "cannot write to stdout");
}
