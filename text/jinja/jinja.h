/*
 * jinja.h - a Jinja2 interpreter for chat templates.
 *
 * Hugging Face chat templates are Jinja2 programs, and transformers runs
 * them in ImmutableSandboxedEnvironment(trim_blocks=True,
 * lstrip_blocks=True) with the loopcontrols extension. No C Jinja library
 * is packaged anywhere (llama.cpp wrote its own, in C++), so this one is
 * hand-written, to render byte for byte what transformers renders: Python's
 * semantics for values (None prints "None", 1/2 is 0.5, a dict keeps its
 * order, strings are sequences of code points), Jinja2's Undefined, its
 * scoping (a `set` in a loop stays in the loop), whitespace control, and the
 * filters, tests, methods and globals templates use. jinja_internal.h is the
 * map of the files.
 *
 * A render cannot hang or exhaust the process: loop iterations, nesting,
 * output and memory are bounded (JinjaLimits), and going past a bound is an
 * ordinary template error.
 */
#ifndef NANOVLLM_JINJA_H
#define NANOVLLM_JINJA_H

#include <jansson.h>
#include <stddef.h>

typedef struct JinjaError {
    char msg[512]; /* "line 12: 'dict object' has no attribute 'x'" */
    int line;      /* 0: not tied to a line */
    int raised;    /* 1: the template called raise_exception(msg); msg is its text */
} JinjaError;

typedef struct JinjaLimits {
    long long max_iterations; /* loop iterations + macro calls, all together */
    int max_depth;            /* nested macro calls, loops and expressions */
    size_t max_output;        /* bytes of the rendered text (and of any string built) */
    size_t max_memory;        /* bytes a render may allocate */
} JinjaLimits;

/* Defaults: 1,000,000 iterations, depth 200, 64 MiB output, 512 MiB memory. */
JinjaLimits jinja_default_limits(void);

typedef struct JinjaTemplate JinjaTemplate;

/* Parses a template. NULL with err set on a syntax error or out of memory. */
JinjaTemplate *jinja_compile(const char *source, size_t len, JinjaError *err);
void jinja_free(JinjaTemplate *t);

/* True when the template loops over a message's content (`for x in
 * message['content']`): it takes OpenAI's list of parts as is. */
int jinja_iterates_content(const JinjaTemplate *t);

/* Renders with the members of vars (a JSON object) as variables, next to
 * Jinja2's globals (range, dict, namespace, ...) and transformers'
 * (raise_exception, strftime_now, formatting the time `now`, seconds since
 * the epoch, in local time). limits NULL: the defaults. Returns the
 * malloc'ed text (NUL-terminated, *len bytes) or NULL with err set. */
char *jinja_render(const JinjaTemplate *t, const json_t *vars, double now,
                   const JinjaLimits *limits, size_t *len, JinjaError *err);

/* Python's str.strip() on UTF-8 text: *start and *end bound s[0..n) without
 * the Unicode whitespace at both ends. */
void jinja_py_strip(const char *s, size_t n, size_t *start, size_t *end);

#endif
