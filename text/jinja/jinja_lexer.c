/*
 * jinja_lexer.c - template text to tokens, with Jinja2's whitespace rules
 * as transformers configures them (trim_blocks, lstrip_blocks).
 *
 * Hand-written (see jinja.h). What decides exact output:
 *   - newlines are normalised to "\n" and one trailing newline is dropped;
 *   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag, `-%}`, `-}}`,
 *     `-#}` all whitespace after it;
 *   - trim_blocks: a block or comment end eats one "\n" right after it
 *     (`+%}` keeps it);
 *   - lstrip_blocks: spaces and tabs between the start of a line and a
 *     block or comment tag go (`{%+` keeps them), never before `{{`;
 *   - inside a tag, `%}` and `}}` only end it when brackets are balanced.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

typedef struct Lexer {
    JArena *arena;
    const char *src;
    size_t len, pos;
    int line;
    bool line_starting; /* the last thing consumed ended with a newline */
    Token *toks;
    size_t n, cap;
    JinjaError *err;
} Lexer;

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (unsigned char)c >= 0x80; }
static bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

static int lex_fail(Lexer *lx, const char *msg) {
    snprintf(lx->err->msg, sizeof lx->err->msg, "line %d: %s", lx->line, msg);
    lx->err->line = lx->line;
    return -1;
}

static Token *push(Lexer *lx, TokKind kind) {
    if (lx->n == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        Token *t = arena_grow(lx->arena, lx->toks, lx->n * sizeof *t, cap * sizeof *t);
        if (!t) return NULL;
        lx->toks = t;
        lx->cap = cap;
    }
    Token *t = &lx->toks[lx->n++];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->line = lx->line;
    return t;
}

static char *copy(Lexer *lx, const char *s, size_t n) {
    char *c = arena_alloc(lx->arena, n + 1);
    if (c) memcpy(c, s, n);
    return c;
}

static void count_lines(Lexer *lx, size_t from, size_t to) {
    for (size_t i = from; i < to; i++) lx->line += lx->src[i] == '\n';
}

static int emit_data(Lexer *lx, const char *s, size_t n) {
    if (!n) return 0;
    Token *t = push(lx, TK_DATA);
    if (!t || !(t->text = copy(lx, s, n))) return lex_fail(lx, "out of memory");
    t->len = n;
    return 0;
}

/* Text before a tag, after `{%-` / lstrip_blocks. sign: '-', '+' or 0. */
static int emit_text_before(Lexer *lx, size_t start, size_t end, char sign, bool lstrip) {
    const char *s = lx->src + start;
    size_t n = end - start;
    if (sign == '-') {
        while (n && is_space(s[n - 1])) n--;
    } else if (sign != '+' && lstrip) {
        size_t l = n;
        while (l && s[l - 1] != '\n') l--;
        bool blank = l < n;
        for (size_t i = l; i < n; i++) blank = blank && is_space(s[i]);
        if (blank && (l > 0 || lx->line_starting)) n = l;
    }
    return emit_data(lx, s, n);
}

/* After an end tag: `-` strips whitespace, trim_blocks one newline. */
static void after_end(Lexer *lx, char sign, bool trim_newline) {
    size_t from = lx->pos;
    if (sign == '-') {
        while (lx->pos < lx->len && is_space(lx->src[lx->pos])) lx->pos++;
    } else if (sign != '+' && trim_newline && lx->pos < lx->len && lx->src[lx->pos] == '\n') {
        lx->pos++;
    }
    count_lines(lx, from, lx->pos);
    lx->line_starting = lx->pos > 0 && lx->src[lx->pos - 1] == '\n';
}

/* Python's string escapes (the unicode-escape codec). */
static int unescape(Lexer *lx, const char *s, size_t n, Token *t) {
    char *out = arena_alloc(lx->arena, n + 1);
    if (!out) return lex_fail(lx, "out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 == n) {
            out[o++] = s[i];
            continue;
        }
        char c = s[++i], simple = 0;
        switch (c) {
        case '\\': case '\'': case '"': simple = c; break;
        case 'a': simple = '\a'; break;
        case 'b': simple = '\b'; break;
        case 'f': simple = '\f'; break;
        case 'n': simple = '\n'; break;
        case 'r': simple = '\r'; break;
        case 't': simple = '\t'; break;
        case 'v': simple = '\v'; break;
        default: break;
        }
        if (simple) {
            out[o++] = simple;
        } else if (c == '\n') { /* a line continuation */
        } else if (c >= '0' && c <= '7') {
            unsigned v = 0;
            for (int k = 0; k < 3 && i < n && s[i] >= '0' && s[i] <= '7'; k++, i++) v = v * 8 + (unsigned)(s[i] - '0');
            i--;
            if (v < 0x80) out[o++] = (char)v;
            else { out[o++] = (char)(0xC0 | (v >> 6)); out[o++] = (char)(0x80 | (v & 0x3F)); }
        } else if (c == 'x' || c == 'u' || c == 'U') {
            int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            uint32_t v = 0;
            for (int k = 0; k < digits; k++) {
                char h = i + 1 + (size_t)k < n ? s[i + 1 + (size_t)k] : 0;
                int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (d < 0) return lex_fail(lx, "truncated \\xXX, \\uXXXX or \\UXXXXXXXX escape in a string");
                v = v * 16 + (uint32_t)d;
            }
            i += (size_t)digits;
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return lex_fail(lx, "a string escape names no character");
            if (v < 0x80) out[o++] = (char)v;
            else if (v < 0x800) { out[o++] = (char)(0xC0 | (v >> 6)); out[o++] = (char)(0x80 | (v & 0x3F)); }
            else if (v < 0x10000) { out[o++] = (char)(0xE0 | (v >> 12)); out[o++] = (char)(0x80 | ((v >> 6) & 0x3F)); out[o++] = (char)(0x80 | (v & 0x3F)); }
            else { out[o++] = (char)(0xF0 | (v >> 18)); out[o++] = (char)(0x80 | ((v >> 12) & 0x3F)); out[o++] = (char)(0x80 | ((v >> 6) & 0x3F)); out[o++] = (char)(0x80 | (v & 0x3F)); }
        } else { /* unknown escapes stay as they are */
            out[o++] = '\\';
            out[o++] = c;
        }
    }
    out[o] = '\0';
    t->text = out;
    t->len = o;
    return 0;
}

static const char *const OPS[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "/", "*", "%", "~", "<",
                                  ">", "=", ".", ",", ":", "|", "(", ")", "[", "]", "{", "}", ";"};

/* Digits with single underscores between them, from p; returns the end. */
static size_t digits(const char *s, size_t p, size_t n, int base) {
    size_t start = p;
    while (p < n) {
        char c = s[p];
        bool ok = base == 16 ? (is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))
                             : (c >= '0' && c < '0' + (base < 10 ? base : 10));
        if (ok) p++;
        else if (c == '_' && p > start && p + 1 < n && s[p - 1] != '_') p++;
        else break;
    }
    while (p > start && s[p - 1] == '_') p--;
    return p;
}

static int lex_number(Lexer *lx) {
    const char *s = lx->src;
    size_t p = lx->pos, n = lx->len;
    char buf[128];
    size_t b = 0;
    if (s[p] == '0' && p + 1 < n && strchr("xXoObB", s[p + 1])) {
        int base = strchr("xX", s[p + 1]) ? 16 : strchr("oO", s[p + 1]) ? 8 : 2;
        size_t end = digits(s, p + 2, n, base);
        if (end == p + 2) return lex_fail(lx, "malformed number");
        for (size_t i = p + 2; i < end && b < sizeof buf - 1; i++) if (s[i] != '_') buf[b++] = s[i];
        buf[b] = '\0';
        Token *t = push(lx, TK_INT);
        if (!t) return lex_fail(lx, "out of memory");
        t->i = (int64_t)strtoull(buf, NULL, base);
        lx->pos = end;
        return 0;
    }
    size_t end = digits(s, p, n, 10);
    bool is_float = false;
    size_t fend = end;
    if (fend + 1 < n && s[fend] == '.' && is_digit(s[fend + 1])) {
        fend = digits(s, fend + 1, n, 10);
        is_float = true;
    }
    if (fend < n && (s[fend] == 'e' || s[fend] == 'E')) {
        size_t q = fend + 1;
        if (q < n && (s[q] == '+' || s[q] == '-')) q++;
        if (q < n && is_digit(s[q])) {
            fend = digits(s, q, n, 10);
            is_float = true;
        }
    }
    if (!is_float) fend = end;
    for (size_t i = p; i < fend && b < sizeof buf - 1; i++) if (s[i] != '_') buf[b++] = s[i];
    buf[b] = '\0';
    Token *t = push(lx, is_float ? TK_FLOAT : TK_INT);
    if (!t) return lex_fail(lx, "out of memory");
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        if (b > 18) return lex_fail(lx, "an integer literal over 18 digits");
        t->i = strtoll(buf, NULL, 10);
    }
    lx->pos = fend;
    return 0;
}

/* The tokens of one {{ ... }} or {% ... %}, up to and including its end. */
static int lex_tag(Lexer *lx, bool block) {
    char stack[64];
    int depth = 0;
    for (;;) {
        size_t from = lx->pos;
        while (lx->pos < lx->len && is_space(lx->src[lx->pos])) lx->pos++;
        count_lines(lx, from, lx->pos);
        if (lx->pos >= lx->len) return lex_fail(lx, block ? "Unexpected end of template: a block tag is not closed with %}" : "Unexpected end of template: a variable tag is not closed with }}");
        const char *s = lx->src + lx->pos;
        size_t left = lx->len - lx->pos;
        const char *close = block ? "%}" : "}}";
        if (depth == 0) {
            char sign = 0;
            if (left >= 3 && (s[0] == '-' || (block && s[0] == '+')) && memcmp(s + 1, close, 2) == 0) sign = s[0];
            if (sign || (left >= 2 && memcmp(s, close, 2) == 0)) {
                if (!push(lx, block ? TK_BLOCK_END : TK_VAR_END)) return lex_fail(lx, "out of memory");
                lx->pos += sign ? 3 : 2;
                after_end(lx, sign, block);
                return 0;
            }
        }
        char c = s[0];
        if (is_digit(c)) {
            if (lex_number(lx)) return -1;
        } else if (is_name_start(c)) {
            size_t e = 1;
            while (e < left && is_name_char(s[e])) e++;
            Token *t = push(lx, TK_NAME);
            if (!t || !(t->text = copy(lx, s, e))) return lex_fail(lx, "out of memory");
            t->len = e;
            lx->pos += e;
        } else if (c == '\'' || c == '"') {
            size_t e = 1;
            while (e < left && s[e] != c) e += s[e] == '\\' ? 2 : 1;
            if (e >= left) return lex_fail(lx, "a string is not closed");
            Token *t = push(lx, TK_STRING);
            if (!t || unescape(lx, s + 1, e - 1, t)) return t ? -1 : lex_fail(lx, "out of memory");
            count_lines(lx, lx->pos, lx->pos + e);
            lx->pos += e + 1;
        } else {
            const char *op = NULL;
            for (size_t k = 0; k < sizeof OPS / sizeof *OPS && !op; k++) {
                size_t l = strlen(OPS[k]);
                if (l <= left && memcmp(s, OPS[k], l) == 0) op = OPS[k];
            }
            if (!op) {
                char msg[64];
                snprintf(msg, sizeof msg, "unexpected character '%c' in a tag", c);
                return lex_fail(lx, msg);
            }
            if (strchr("([{", op[0]) && op[1] == '\0') {
                if (depth == (int)sizeof stack) return lex_fail(lx, "brackets nested too deeply");
                stack[depth++] = op[0] == '(' ? ')' : op[0] == '[' ? ']' : '}';
            } else if (strchr(")]}", op[0]) && op[1] == '\0') {
                if (depth == 0 || stack[depth - 1] != op[0]) {
                    char msg[64];
                    snprintf(msg, sizeof msg, "unexpected '%c'", op[0]);
                    return lex_fail(lx, msg);
                }
                depth--;
            }
            Token *t = push(lx, TK_OP);
            if (!t) return lex_fail(lx, "out of memory");
            t->text = op;
            t->len = strlen(op);
            lx->pos += t->len;
        }
    }
}

/* {% raw %}...{% endraw %}: the text as is (the tag's own whitespace rules apply). */
static int lex_raw(Lexer *lx) {
    for (size_t p = lx->pos; p + 1 < lx->len; p++) {
        if (lx->src[p] != '{' || lx->src[p + 1] != '%') continue;
        size_t q = p + 2;
        char sign = 0;
        if (q < lx->len && (lx->src[q] == '-' || lx->src[q] == '+')) sign = lx->src[q++];
        while (q < lx->len && is_space(lx->src[q])) q++;
        if (lx->len - q < 6 || memcmp(lx->src + q, "endraw", 6) != 0) continue;
        q += 6;
        while (q < lx->len && is_space(lx->src[q])) q++;
        char end_sign = 0;
        if (q < lx->len && (lx->src[q] == '-' || lx->src[q] == '+')) end_sign = lx->src[q++];
        if (lx->len - q < 2 || memcmp(lx->src + q, "%}", 2) != 0) continue;
        if (emit_text_before(lx, lx->pos, p, sign, true)) return -1;
        count_lines(lx, lx->pos, q + 2);
        lx->pos = q + 2;
        after_end(lx, end_sign, true);
        return 0;
    }
    return lex_fail(lx, "missing end of raw directive");
}

/* Is this `{%[-+]? raw [-]?%}`? Sets *end past it and *end_sign. */
static bool raw_begin(const Lexer *lx, size_t p, size_t *end, char *end_sign) {
    const char *s = lx->src;
    size_t q = p + 2;
    if (q < lx->len && (s[q] == '-' || s[q] == '+')) q++;
    while (q < lx->len && is_space(s[q])) q++;
    if (lx->len - q < 3 || memcmp(s + q, "raw", 3) != 0 || (q + 3 < lx->len && is_name_char(s[q + 3]))) return false;
    q += 3;
    while (q < lx->len && is_space(s[q])) q++;
    *end_sign = 0;
    if (q < lx->len && s[q] == '-') *end_sign = s[q++];
    if (lx->len - q < 2 || memcmp(s + q, "%}", 2) != 0) return false;
    *end = q + 2;
    return true;
}

static int lex_all(Lexer *lx) {
    while (lx->pos < lx->len) {
        const char *s = lx->src;
        size_t p = lx->pos;
        while (p + 1 < lx->len && !(s[p] == '{' && (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#'))) p++;
        if (p + 1 >= lx->len) {
            if (emit_data(lx, s + lx->pos, lx->len - lx->pos)) return -1;
            count_lines(lx, lx->pos, lx->len);
            lx->pos = lx->len;
            break;
        }
        char kind = s[p + 1];
        char sign = p + 2 < lx->len && (s[p + 2] == '-' || s[p + 2] == '+') ? s[p + 2] : 0;
        size_t raw_end;
        char raw_sign;
        if (kind == '%' && raw_begin(lx, p, &raw_end, &raw_sign)) {
            if (emit_text_before(lx, lx->pos, p, sign, true)) return -1;
            count_lines(lx, lx->pos, raw_end);
            lx->pos = raw_end;
            if (raw_sign == '-') after_end(lx, '-', false);
            if (lex_raw(lx)) return -1;
            continue;
        }
        if (emit_text_before(lx, lx->pos, p, sign, kind != '{')) return -1;
        count_lines(lx, lx->pos, p);
        lx->pos = p + 2 + (sign ? 1 : 0);
        lx->line_starting = false;
        if (kind == '#') {
            size_t q = lx->pos;
            while (q + 1 < lx->len && !(s[q] == '#' && s[q + 1] == '}')) q++;
            if (q + 1 >= lx->len) return lex_fail(lx, "missing end of comment tag");
            char end_sign = q > lx->pos && (s[q - 1] == '-' || s[q - 1] == '+') ? s[q - 1] : 0;
            count_lines(lx, lx->pos, q + 2);
            lx->pos = q + 2;
            after_end(lx, end_sign, true);
            continue;
        }
        if (!push(lx, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN)) return lex_fail(lx, "out of memory");
        if (lex_tag(lx, kind == '%')) return -1;
    }
    return push(lx, TK_EOF) ? 0 : lex_fail(lx, "out of memory");
}

Token *jinja_lex(JArena *a, const char *src, size_t len, size_t *ntok, JinjaError *err) {
    /* "\r\n" and "\r" become "\n"; one trailing newline goes. */
    char *norm = arena_alloc(a, len + 1);
    if (!norm) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return NULL;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            norm[n++] = src[i];
        }
    }
    if (n && norm[n - 1] == '\n') n--;
    Lexer lx = {.arena = a, .src = norm, .len = n, .line = 1, .line_starting = true, .err = err};
    if (lex_all(&lx)) return NULL;
    *ntok = lx.n;
    return lx.toks;
}
