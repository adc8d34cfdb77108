/*
 * chat_output.c - the chat-output parser's state machine (see
 * chat_output.h): where reasoning ends, where content is, where a tool
 * call starts and stops, what is held back and what is released. A call
 * is cut out by its format's tags and its body handed to the format's
 * reader (tool_call_format.h; "<tool_call>" and "</tool_call>" below stand
 * for the format's tags, which may be others).
 *
 * Input is appended to one buffer; each feed runs the states over it and
 * keeps only what cannot be released yet: a suffix that may be the start
 * of a tag, or an open tool call. Everything released goes through one of
 * two Streams (reasoning, content), which do the trimming. Releases depend
 * only on the text, never on where it was cut, because:
 *   - a state decides only on complete tags or on bytes that cannot begin
 *     one (it holds any suffix that is a proper prefix of the tag it looks
 *     for: "<", "</thi", "<tool_");
 *   - a Stream drops leading whitespace and holds trailing whitespace until
 *     non-whitespace follows, which is the same at any split;
 *   - the size limit on a call body is decided on the body's length alone
 *     (see ST_CALL_TOO_LONG).
 *
 * States:
 *   ST_START      (parse_reasoning) whitespace, then "<think>" or not;
 *   ST_REASONING  up to "</think>";
 *   ST_CONTENT    up to "<tool_call>" (when tool calls are parsed);
 *   ST_CALL       an open call, buffered up to "</tool_call>";
 *   ST_CALL_TOO_LONG  a call whose body passed MAX_CALL_BODY bytes: it is
 *                 rejected, released as content as it comes, up to its
 *                 "</tool_call>" (so memory stays bounded against a model
 *                 that loops inside a call);
 *   ST_DONE       finished; later feeds are ignored.
 */
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "chat_output.h"
#include "chat/tool_calls/tool_call_json.h"

#define TAG(s) s, sizeof s - 1
#define THINK_OPEN "<think>"
#define THINK_CLOSE "</think>"

/* A tool-call body longer than this is rejected without being parsed (and
 * without being held: it streams out as content). */
#define MAX_CALL_BODY ((size_t)1 << 20)

typedef enum State {
    ST_START,
    ST_REASONING,
    ST_CONTENT,
    ST_CALL,
    ST_CALL_TOO_LONG,
    ST_DONE,
} State;

/* One output stream (reasoning or content) and its trimming. */
typedef struct Stream {
    bool started; /* something other than whitespace was released */
    ByteBuf ws;   /* trailing whitespace, held until more text follows */
} Stream;

struct ChatOutputParser {
    const json_t *tools;
    bool starts_in_reasoning;
    const ToolCallFormat *format; /* NULL: calls are not parsed */
    const char *call_open, *call_close; /* the format's tags */
    size_t call_open_len, call_close_len;
    bool trim;        /* any parsing at all; otherwise a pure pass-through */
    bool failed;      /* out of memory once: unusable */
    State state;
    ByteBuf buf;  /* input not released yet: a possible partial tag, or an open call */
    size_t scan;  /* ST_CALL: offset in buf where "</tool_call>" may start, at the earliest */
    int blocks;   /* <tool_call> blocks met so far, for "tool call N" */
    Stream reasoning, content;
};

static bool is_space(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

/* Appends to a delta's buffer, keeping it NUL-terminated. */
static int out_append(ByteBuf *b, const char *s, size_t n) {
    if (!n) return 0;
    if (byte_buf_reserve(b, n + 1)) return -1;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

/* Releases s[0..n) into the stream, whose text goes to dst. */
static int stream_put(const ChatOutputParser *p, Stream *st, ByteBuf *dst, const char *s, size_t n) {
    if (!p->trim) return out_append(dst, s, n);
    if (!st->started) {
        while (n && is_space(*s)) s++, n--;
        if (!n) return 0;
        st->started = true;
    }
    size_t k = n;
    while (k && is_space(s[k - 1])) k--;
    if (!k) return byte_buf_append(&st->ws, s, n);
    if (out_append(dst, st->ws.data, st->ws.len) || out_append(dst, s, k)) return -1;
    st->ws.len = 0;
    return byte_buf_append(&st->ws, s + k, n - k);
}

static int put_reasoning(ChatOutputParser *p, ChatOutputDelta *out, const char *s, size_t n) {
    return stream_put(p, &p->reasoning, &out->reasoning, s, n);
}

static int put_content(ChatOutputParser *p, ChatOutputDelta *out, const char *s, size_t n) {
    return stream_put(p, &p->content, &out->content, s, n);
}

/* The length of the longest suffix of s[0..n) that is a proper prefix of
 * tag: the part that must be held. */
static size_t partial_tag(const char *s, size_t n, const char *tag, size_t tag_len) {
    for (size_t k = n < tag_len - 1 ? n : tag_len - 1; k > 0; k--)
        if (memcmp(s + n - k, tag, k) == 0) return k;
    return 0;
}

static int add_call(ChatOutputDelta *d, char *name, char *arguments) {
    if (d->num_calls == d->calls_capacity) {
        size_t cap = (size_t)d->calls_capacity;
        if (d->num_calls == INT_MAX ||
            array_reserve((void **)&d->calls, &cap, (size_t)d->num_calls + 1, sizeof *d->calls))
            return -1;
        d->calls_capacity = cap > INT_MAX ? INT_MAX : (int)cap;
    }
    d->calls[d->num_calls++] = (ChatToolCallOut){name, arguments};
    return 0;
}

/* Block number n, s[0..len) verbatim, is released as content. */
static int reject(ChatOutputParser *p, ChatOutputDelta *out, int n, const char *why,
                  const char *s, size_t len) {
    out->num_rejected++;
    tool_call_why(out->rejected_reason, sizeof out->rejected_reason, "tool call %d: %s", n, why);
    return put_content(p, out, s, len);
}

/* A whole block s[0..len), from "<tool_call>" to "</tool_call>": a call,
 * or content. 0 or -1 (out of memory). */
static int close_call(ChatOutputParser *p, ChatOutputDelta *out, const char *s, size_t len) {
    int n = ++p->blocks;
    const char *body = s + p->call_open_len;
    size_t body_len = len - p->call_open_len - p->call_close_len;
    char why[TOOL_CALL_WHY_SIZE], *name = NULL, *arguments = NULL;
    int rc;
    if (body_len > MAX_CALL_BODY) {
        tool_call_why(why, sizeof why, "longer than %zu bytes", MAX_CALL_BODY);
        rc = 0;
    } else {
        rc = p->format->read_call(body, body_len, p->tools, &name, &arguments, why);
    }
    if (rc < 0) return -1;
    if (rc == 1 && p->tools && !json_is_null(p->tools) && !tool_call_find_function(p->tools, name)) {
        tool_call_why(why, sizeof why, "unknown function '%s'", name);
        free(name);
        free(arguments);
        rc = 0;
    }
    if (rc == 0) return reject(p, out, n, why, s, len);
    if (add_call(out, name, arguments) == 0) return 0;
    free(name);
    free(arguments);
    return -1;
}

/* Runs the states over buf, releasing into out what is settled; keeps the
 * rest in buf. 0 or -1 (out of memory). */
static int run(ChatOutputParser *p, ChatOutputDelta *out) {
    char *b = p->buf.data;
    size_t len = p->buf.len, pos = 0;
    const char *e;
    size_t h;
    for (;;) {
        switch (p->state) {
        case ST_START: {
            while (pos < len && is_space(b[pos])) pos++; /* both streams would drop it */
            size_t n = len - pos, k = n < sizeof THINK_OPEN - 1 ? n : sizeof THINK_OPEN - 1;
            if (memcmp(b + pos, THINK_OPEN, k) != 0) {
                p->state = p->starts_in_reasoning ? ST_REASONING : ST_CONTENT;
                continue;
            }
            if (k < sizeof THINK_OPEN - 1) goto held;
            pos += k;
            p->state = ST_REASONING;
            continue;
        }
        case ST_REASONING:
            if ((e = memmem(b + pos, len - pos, TAG(THINK_CLOSE)))) {
                if (put_reasoning(p, out, b + pos, (size_t)(e - b) - pos)) return -1;
                p->reasoning.ws.len = 0; /* the reasoning's end: its trailing whitespace goes */
                pos = (size_t)(e - b) + sizeof THINK_CLOSE - 1;
                p->state = ST_CONTENT;
                continue;
            }
            h = partial_tag(b + pos, len - pos, TAG(THINK_CLOSE));
            if (put_reasoning(p, out, b + pos, len - pos - h)) return -1;
            pos = len - h;
            goto held;
        case ST_CONTENT:
            if (!p->format) {
                if (put_content(p, out, b + pos, len - pos)) return -1;
                pos = len;
                goto held;
            }
            if ((e = memmem(b + pos, len - pos, p->call_open, p->call_open_len))) {
                if (put_content(p, out, b + pos, (size_t)(e - b) - pos)) return -1;
                pos = (size_t)(e - b);
                p->scan = pos + p->call_open_len;
                p->state = ST_CALL;
                continue;
            }
            h = partial_tag(b + pos, len - pos, p->call_open, p->call_open_len);
            if (put_content(p, out, b + pos, len - pos - h)) return -1;
            pos = len - h;
            goto held;
        case ST_CALL: {
            /* pos stays at "<tool_call>" until the block is decided. */
            if ((e = memmem(b + p->scan, len - p->scan, p->call_close, p->call_close_len))) {
                size_t end = (size_t)(e - b) + p->call_close_len;
                if (close_call(p, out, b + pos, end - pos)) return -1;
                pos = end;
                p->state = ST_CONTENT;
                continue;
            }
            size_t body = pos + p->call_open_len, close_len = p->call_close_len;
            /* A "</tool_call>" not found whole starts at len - (its length - 1) or later. */
            p->scan = len - body > close_len - 1 ? len - (close_len - 1) : body;
            if (p->scan - body > MAX_CALL_BODY) {
                /* The body is already longer than the limit, wherever it ends. */
                char why[TOOL_CALL_WHY_SIZE];
                tool_call_why(why, sizeof why, "longer than %zu bytes", MAX_CALL_BODY);
                h = partial_tag(b + body, len - body, p->call_close, close_len);
                if (reject(p, out, ++p->blocks, why, b + pos, len - h - pos)) return -1;
                pos = len - h;
                p->state = ST_CALL_TOO_LONG;
            }
            goto held;
        }
        case ST_CALL_TOO_LONG:
            if ((e = memmem(b + pos, len - pos, p->call_close, p->call_close_len))) {
                size_t end = (size_t)(e - b) + p->call_close_len;
                if (put_content(p, out, b + pos, end - pos)) return -1;
                pos = end;
                p->state = ST_CONTENT;
                continue;
            }
            h = partial_tag(b + pos, len - pos, p->call_close, p->call_close_len);
            if (put_content(p, out, b + pos, len - pos - h)) return -1;
            pos = len - h;
            goto held;
        case ST_DONE:
            pos = len;
            goto held;
        }
    }
held:
    if (pos) {
        memmove(b, b + pos, len - pos);
        p->buf.len = len - pos;
        if (p->state == ST_CALL) p->scan -= pos;
    }
    return 0;
}

ChatOutputParser *chat_output_parser_new(const ChatOutputOptions *o) {
    ChatOutputParser *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->tools = o->tools;
    p->format = o->tool_format;
    if (p->format) {
        p->call_open = p->format->call_open;
        p->call_close = p->format->call_close;
        p->call_open_len = strlen(p->call_open);
        p->call_close_len = strlen(p->call_close);
    }
    p->trim = o->parse_reasoning || p->format != NULL;
    p->starts_in_reasoning = o->parse_reasoning && o->starts_in_reasoning;
    p->state = o->parse_reasoning ? ST_START : ST_CONTENT;
    return p;
}

void chat_output_parser_free(ChatOutputParser *p) {
    if (!p) return;
    byte_buf_free(&p->buf);
    byte_buf_free(&p->reasoning.ws);
    byte_buf_free(&p->content.ws);
    free(p);
}

int chat_output_feed(ChatOutputParser *p, const char *text, size_t len, ChatOutputDelta *out) {
    if (p->failed) return -1;
    if (p->state == ST_DONE || !len) return 0;
    if (byte_buf_append(&p->buf, text, len) || run(p, out)) {
        p->failed = true;
        return -1;
    }
    return 0;
}

int chat_output_finish(ChatOutputParser *p, ChatOutputDelta *out) {
    if (p->failed) return -1;
    if (p->state == ST_DONE) return 0;
    const char *b = p->buf.data;
    size_t len = p->buf.len;
    int rc = 0;
    switch (p->state) {
    case ST_START: /* a partial "<think>" */
        rc = p->starts_in_reasoning ? put_reasoning(p, out, b, len) : put_content(p, out, b, len);
        break;
    case ST_REASONING: rc = put_reasoning(p, out, b, len); break;
    case ST_CONTENT:
    case ST_CALL_TOO_LONG: rc = put_content(p, out, b, len); break;
    case ST_CALL: {
        char why[TOOL_CALL_WHY_SIZE];
        tool_call_why(why, sizeof why, "unclosed %s", p->call_open);
        rc = reject(p, out, ++p->blocks, why, b, len);
        break;
    }
    case ST_DONE: break;
    }
    p->buf.len = 0;
    p->reasoning.ws.len = p->content.ws.len = 0;
    p->state = ST_DONE;
    if (rc) p->failed = true;
    return rc;
}

void chat_output_delta_clear(ChatOutputDelta *d) {
    d->reasoning.len = d->content.len = 0;
    if (d->reasoning.data) d->reasoning.data[0] = '\0';
    if (d->content.data) d->content.data[0] = '\0';
    for (int i = 0; i < d->num_calls; i++) {
        free(d->calls[i].name);
        free(d->calls[i].arguments);
    }
    d->num_calls = 0;
    d->num_rejected = 0;
    d->rejected_reason[0] = '\0';
}

void chat_output_delta_free(ChatOutputDelta *d) {
    chat_output_delta_clear(d);
    byte_buf_free(&d->reasoning);
    byte_buf_free(&d->content);
    free(d->calls);
    *d = (ChatOutputDelta){0};
}
