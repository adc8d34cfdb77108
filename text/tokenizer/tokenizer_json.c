/*
 * tokenizer_json.c - the two big tables of tokenizer.json, read in place
 * (see tokenizer_json.h for why).
 *
 * Two small readers over the text: a walker that only knows enough JSON
 * to skip values (strings with escapes, nesting) and find the top-level
 * "model" object's "vocab" and "merges" values, and strict readers for
 * exactly those two shapes. The walker validates nothing it skips; jansson
 * parses and validates all of it afterwards, with the two values replaced.
 */
#include "tokenizer_json.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"
#include "base/byte_buf.h"

typedef struct Scan {
    const char *p, *end;
    ByteBuf buf[2]; /* decoded strings that had escapes (two for merge pairs) */
    Error *err;
} Scan;

static void skip_ws(Scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

static bool at(Scan *s, char c) {
    skip_ws(s);
    return s->p < s->end && *s->p == c;
}

static int expect(Scan *s, char c, const char *what) {
    if (!at(s, c)) return error_set(s->err, "expected %s", what);
    s->p++;
    return 0;
}

static int hex4(const char *p, const char *end, uint32_t *v) {
    if (end - p < 4) return -1;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* One escape at s->p (just after the backslash), appended to b. */
static int read_escape(Scan *s, ByteBuf *b) {
    if (s->p >= s->end) return error_set(s->err, "unterminated string");
    char c = *s->p++, out;
    switch (c) {
    case '"': out = '"'; break;
    case '\\': out = '\\'; break;
    case '/': out = '/'; break;
    case 'b': out = '\b'; break;
    case 'f': out = '\f'; break;
    case 'n': out = '\n'; break;
    case 'r': out = '\r'; break;
    case 't': out = '\t'; break;
    case 'u': {
        uint32_t cp, lo;
        if (hex4(s->p, s->end, &cp)) return error_set(s->err, "bad \\u escape");
        s->p += 4;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return error_set(s->err, "lone surrogate \\u%04X", cp);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s->end - s->p < 6 || s->p[0] != '\\' || s->p[1] != 'u' ||
                hex4(s->p + 2, s->end, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                return error_set(s->err, "lone surrogate \\u%04X", cp);
            s->p += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        char u[4];
        int n = utf8_encode(cp, u);
        return byte_buf_append(b, u, (size_t)n) ? error_set(s->err, "out of memory") : 0;
    }
    default: return error_set(s->err, "bad escape '\\%c'", c);
    }
    return byte_buf_append(b, &out, 1) ? error_set(s->err, "out of memory") : 0;
}

/* Reads the string at s->p (after white space). *out points into the text
 * when it has no escapes, else into s->buf[slot]. */
static int read_string(Scan *s, int slot, const char **out, size_t *n) {
    if (expect(s, '"', "a string")) return -1;
    const char *start = s->p, *run = s->p;
    ByteBuf *b = &s->buf[slot];
    bool escaped = false;
    b->len = 0;
    for (;;) {
        if (s->p >= s->end) return error_set(s->err, "unterminated string");
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') break;
        if (c < 0x20) return error_set(s->err, "control character inside a string");
        if (c == '\\') {
            if (byte_buf_append(b, run, (size_t)(s->p - run))) return error_set(s->err, "out of memory");
            escaped = true;
            s->p++;
            if (read_escape(s, b)) return -1;
            run = s->p;
            continue;
        }
        if (c < 0x80) {
            s->p++;
            continue;
        }
        uint32_t cp;
        int k = utf8_next((const unsigned char *)s->p, (size_t)(s->end - s->p), &cp);
        if (k <= 0) return error_set(s->err, "invalid UTF-8 inside a string");
        s->p += k;
    }
    if (escaped) {
        if (byte_buf_append(b, run, (size_t)(s->p - run))) return error_set(s->err, "out of memory");
        *out = b->data;
        *n = b->len;
    } else {
        *out = start;
        *n = (size_t)(s->p - start);
    }
    s->p++; /* closing quote */
    return 0;
}

/* Skips one value of any kind; checks only what finding its end needs. */
static int skip_value(Scan *s) {
    skip_ws(s);
    if (s->p >= s->end) return error_set(s->err, "expected a value");
    int depth = 0;
    do {
        if (s->p >= s->end) return error_set(s->err, "unterminated object or array");
        char c = *s->p;
        if (c == '"') {
            for (s->p++; s->p < s->end && *s->p != '"'; s->p++)
                if (*s->p == '\\') s->p++;
            if (s->p >= s->end) return error_set(s->err, "unterminated string");
            s->p++;
        } else if (c == '{' || c == '[') {
            depth++;
            s->p++;
        } else if (c == '}' || c == ']') {
            if (--depth < 0) return error_set(s->err, "unbalanced '%c'", c);
            s->p++;
        } else if (depth == 0) { /* a number or literal ends at a delimiter */
            while (s->p < s->end && !strchr(",}] \t\r\n", *s->p)) s->p++;
        } else {
            s->p++;
        }
    } while (depth > 0);
    return 0;
}

static bool key_is(const char *k, size_t n, const char *want) {
    return n == strlen(want) && memcmp(k, want, n) == 0;
}

/* Walks an object at s->p, calling on_key for each key with s->p at its value;
 * on_key must consume the value. */
typedef int (*KeyFn)(Scan *s, const char *key, size_t n, void *ctx);

static int walk_object(Scan *s, KeyFn on_key, void *ctx) {
    if (expect(s, '{', "an object")) return -1;
    if (at(s, '}')) {
        s->p++;
        return 0;
    }
    for (;;) {
        const char *k;
        size_t n;
        if (read_string(s, 0, &k, &n) || expect(s, ':', "':'")) return -1;
        skip_ws(s);
        if (on_key(s, k, n, ctx)) return -1;
        if (at(s, ',')) {
            s->p++;
            continue;
        }
        return expect(s, '}', "',' or '}'");
    }
}

typedef struct Found {
    const TableReader *r;
    JsonSpan vocab, merges;
    bool model, bpe, vocab_read, merges_read;
    bool table_failed; /* a table entry was wrong: its error is final */
    Error *table_err;
} Found;

static int record(Scan *s, JsonSpan *span, const char *name) {
    if (span->p) return error_set(s->err, "model.%s appears twice", name);
    const char *start = s->p;
    if (skip_value(s)) return -1;
    *span = (JsonSpan){start, (size_t)(s->p - start)};
    return 0;
}

static int read_vocab(Scan *s, const TableReader *r, Error *err);
static int read_merges(Scan *s, const TableReader *r, Error *err);

/* Reads a table where it stands, with the real error on failure. */
static int read_table(Scan *s, Found *f, bool vocab) {
    JsonSpan *span = vocab ? &f->vocab : &f->merges;
    if (span->p) return error_set(s->err, "model.%s appears twice", vocab ? "vocab" : "merges");
    Scan t = {.p = s->p, .end = s->end, .err = f->table_err};
    int rc = vocab ? read_vocab(&t, f->r, f->table_err) : read_merges(&t, f->r, f->table_err);
    byte_buf_free(&t.buf[0]);
    byte_buf_free(&t.buf[1]);
    if (rc) {
        f->table_failed = true;
        return -1;
    }
    *span = (JsonSpan){s->p, (size_t)(t.p - s->p)};
    s->p = t.p;
    return 0;
}

static int model_key(Scan *s, const char *k, size_t n, void *ctx) {
    Found *f = ctx;
    if (key_is(k, n, "type") && at(s, '"')) {
        const char *v;
        size_t vn;
        if (read_string(s, 1, &v, &vn)) return -1;
        f->bpe = key_is(v, vn, "BPE");
        return 0;
    }
    if (key_is(k, n, "vocab")) {
        if (!f->bpe || f->vocab.p) return record(s, &f->vocab, "vocab");
        if (read_table(s, f, true)) return -1;
        f->vocab_read = true;
        return 0;
    }
    if (key_is(k, n, "merges")) {
        if (!f->vocab_read || f->merges.p) return record(s, &f->merges, "merges");
        if (read_table(s, f, false)) return -1;
        f->merges_read = true;
        return 0;
    }
    return skip_value(s);
}

static int top_key(Scan *s, const char *k, size_t n, void *ctx) {
    Found *f = ctx;
    if (!key_is(k, n, "model") || !at(s, '{')) return skip_value(s);
    if (f->model) return error_set(s->err, "\"model\" appears twice");
    f->model = true;
    return walk_object(s, model_key, ctx);
}

static void scan_free(Scan *s) {
    byte_buf_free(&s->buf[0]);
    byte_buf_free(&s->buf[1]);
}

/* Line of byte offset pos in text, for error messages. */
static int line_of(const char *text, size_t pos) {
    int line = 1;
    for (size_t i = 0; i < pos; i++) line += text[i] == '\n';
    return line;
}

int tokenizer_json_open(const char *text, size_t len, const TableReader *r, TokenizerJson *out,
                        Error *err) {
    memset(out, 0, sizeof *out);
    Error walk_err = {0};
    Scan s = {.p = text, .end = text + len, .err = &walk_err};
    Found f = {.r = r, .table_err = err};
    int walked = walk_object(&s, top_key, &f);
    scan_free(&s);
    if (f.table_failed) return error_prefix(err, "model.%s", f.vocab_read ? "merges" : "vocab");
    if (walked) f = (Found){0}; /* jansson reports the syntax error below */

    /* The document with the two tables (in text order) cut out. */
    JsonSpan cut[2] = {f.vocab, f.merges};
    const char *repl[2] = {"{}", "[]"};
    if (cut[0].p && cut[1].p && cut[1].p < cut[0].p) {
        JsonSpan t = cut[0];
        cut[0] = cut[1];
        cut[1] = t;
        repl[0] = "[]";
        repl[1] = "{}";
    }
    char *doc = malloc(len + 5);
    if (!doc) return error_set(err, "out of memory");
    size_t o = 0, from = 0;
    for (int i = 0; i < 2; i++) {
        if (!cut[i].p) continue;
        size_t at_ = (size_t)(cut[i].p - text);
        memcpy(doc + o, text + from, at_ - from);
        o += at_ - from;
        memcpy(doc + o, repl[i], 2);
        o += 2;
        from = at_ + cut[i].n;
    }
    memcpy(doc + o, text + from, len - from);
    o += len - from;
    json_error_t jerr;
    out->doc = json_loadb(doc, o, JSON_REJECT_DUPLICATES, &jerr);
    free(doc);
    if (!out->doc) {
        /* Map jansson's offset in doc back to the file. */
        size_t pos = (size_t)jerr.position, shift = 0;
        for (int i = 0; i < 2; i++)
            if (cut[i].p && pos >= (size_t)(cut[i].p - text) - shift + 2) shift += cut[i].n - 2;
        pos = pos + shift > len ? len : pos + shift;
        return error_set(err, "not valid JSON: %s (line %d)", jerr.text, line_of(text, pos));
    }
    if (walked) { /* jansson accepted what the walker could not read */
        bool object = json_is_object(out->doc);
        json_decref(out->doc);
        out->doc = NULL;
        if (!object) return error_set(err, "the top level is not an object");
        return error_set(err, "cannot read the layout: %s", walk_err.msg);
    }
    out->vocab_read = f.vocab_read;
    out->merges_read = f.merges_read;
    if (!f.vocab_read) out->vocab = f.vocab;
    if (!f.merges_read) out->merges = f.merges;
    return 0;
}

static int read_int(Scan *s, int64_t *v) {
    skip_ws(s);
    const char *p = s->p;
    bool neg = p < s->end && *p == '-';
    if (neg) p++;
    if (p >= s->end || *p < '0' || *p > '9') return error_set(s->err, "expected an integer id");
    uint64_t x = 0;
    for (; p < s->end && *p >= '0' && *p <= '9'; p++) {
        if (x > (UINT64_MAX - 9) / 10) return error_set(s->err, "id out of range");
        x = x * 10 + (uint64_t)(*p - '0');
    }
    if (p < s->end && (*p == '.' || *p == 'e' || *p == 'E'))
        return error_set(s->err, "token ids must be integers");
    if (x > INT64_MAX) return error_set(s->err, "id out of range");
    *v = neg ? -(int64_t)x : (int64_t)x;
    s->p = p;
    return 0;
}

/* Where the reader stopped, for messages. */
static int fail_at(Scan *s, const char *start, Error *err) {
    return error_prefix(err, "entry near byte %zu of the value", (size_t)(s->p - start));
}

static int read_vocab(Scan *s, const TableReader *r, Error *err) {
    const char *start = s->p;
    if (expect(s, '{', "an object")) return fail_at(s, start, err);
    if (at(s, '}')) {
        s->p++;
        return r->vocab_end(r->ctx, err);
    }
    for (;;) {
        const char *tok;
        size_t n;
        int64_t id = 0;
        if (read_string(s, 0, &tok, &n) || expect(s, ':', "':'") || read_int(s, &id) ||
            r->token(r->ctx, tok, n, id, err))
            return fail_at(s, start, err);
        if (at(s, ',')) {
            s->p++;
            continue;
        }
        if (expect(s, '}', "',' or '}'")) return fail_at(s, start, err);
        return r->vocab_end(r->ctx, err);
    }
}

static int read_merge(Scan *s, const TableReader *r, Error *err) {
    const char *a, *b;
    size_t an, bn;
    if (at(s, '[')) {
        s->p++;
        if (read_string(s, 0, &a, &an) || expect(s, ',', "','") || read_string(s, 1, &b, &bn) ||
            expect(s, ']', "']' after two tokens"))
            return -1;
        return r->merge(r->ctx, a, an, b, bn, err);
    }
    const char *m;
    size_t n;
    if (read_string(s, 0, &m, &n)) return -1;
    const char *space = memchr(m, ' ', n);
    if (!space || memchr(space + 1, ' ', n - (size_t)(space - m) - 1) || space == m ||
        space == m + n - 1)
        return error_set(err, "merge '%.*s' is not two tokens separated by one space",
                         (int)(n > 100 ? 100 : n), m);
    return r->merge(r->ctx, m, (size_t)(space - m), space + 1, n - (size_t)(space - m) - 1, err);
}

static int read_merges(Scan *s, const TableReader *r, Error *err) {
    const char *start = s->p;
    if (expect(s, '[', "a list")) return fail_at(s, start, err);
    if (at(s, ']')) {
        s->p++;
        return 0;
    }
    for (;;) {
        if (read_merge(s, r, err)) return fail_at(s, start, err);
        if (at(s, ',')) {
            s->p++;
            continue;
        }
        if (expect(s, ']', "',' or ']'")) return fail_at(s, start, err);
        return 0;
    }
}

static int read_span(JsonSpan span, const TableReader *r, bool vocab, Error *err) {
    Scan s = {.p = span.p, .end = span.p + span.n, .err = err};
    int rc = vocab ? read_vocab(&s, r, err) : read_merges(&s, r, err);
    scan_free(&s);
    return rc;
}

int tokenizer_json_vocab(JsonSpan span, const TableReader *r, Error *err) {
    return read_span(span, r, true, err) ? error_prefix(err, "model.vocab") : 0;
}

int tokenizer_json_merges(JsonSpan span, const TableReader *r, Error *err) {
    return read_span(span, r, false, err) ? error_prefix(err, "model.merges") : 0;
}
