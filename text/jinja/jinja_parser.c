/*
 * jinja_parser.c - tokens to the syntax tree, by recursive descent in the
 * order of Jinja2's own grammar (so precedence and associativity are its):
 *
 *   expression := or ('if' or ('else' expression)?)*
 *   or := and ('or' and)*          and := not ('and' not)*
 *   not := 'not' not | compare     compare := math1 (cmpop math1)*
 *   math1 := concat (('+'|'-') concat)*   concat := math2 ('~' math2)*
 *   math2 := pow (('*'|'/'|'//'|'%') pow)*  pow := unary ('**' unary)*
 *   unary := ('-'|'+') unary' | primary postfix; then filters, tests, calls
 *
 * Hand-written (see jinja.h). Statements: if/elif/else, for (with a
 * filter, else, recursive), set (names, tuples, namespace attributes,
 * blocks), macro, call, filter, with, break/continue, raw (in the lexer),
 * and transformers' generation block. Nesting is bounded so a hostile
 * template cannot exhaust the stack.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "jinja_internal.h"

#define MAX_NESTING 200

typedef struct Parser {
    JinjaTemplate *t;
    const Token *toks;
    size_t n, pos;
    int depth;
    JinjaError *err;
    jmp_buf fail_jump;
} Parser;

typedef struct NodeList {
    Node **items;
    size_t n, cap;
} NodeList;

static _Noreturn void fail(Parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static _Noreturn void fail(Parser *p, const char *fmt, ...) {
    int line = p->toks[p->pos < p->n ? p->pos : p->n - 1].line;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err->msg, sizeof p->err->msg, "line %d: %s", line, msg);
    p->err->line = line;
    longjmp(p->fail_jump, 1);
}

static void *alloc(Parser *p, size_t n) {
    void *m = arena_alloc(&p->t->arena, n);
    if (!m) fail(p, "out of memory");
    return m;
}

static Node *node(Parser *p, NodeKind kind) {
    Node *nd = alloc(p, sizeof *nd);
    nd->kind = (uint8_t)kind;
    nd->line = p->toks[p->pos].line;
    return nd;
}

static void list_push(Parser *p, NodeList *l, Node *nd) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        Node **items = arena_grow(&p->t->arena, l->items, l->n * sizeof *items, cap * sizeof *items);
        if (!items) fail(p, "out of memory");
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = nd;
}

static const Token *cur(Parser *p) { return &p->toks[p->pos]; }
static const Token *peek(Parser *p, size_t k) { return &p->toks[p->pos + k < p->n ? p->pos + k : p->n - 1]; }
static void advance(Parser *p) { if (p->pos + 1 < p->n) p->pos++; }
static bool tok_is_op(const Token *t, const char *op) { return t->kind == TK_OP && strcmp(t->text, op) == 0; }
static bool tok_is_name(const Token *t, const char *name) { return t->kind == TK_NAME && strcmp(t->text, name) == 0; }
static bool is_op(Parser *p, const char *op) { return tok_is_op(cur(p), op); }
static bool is_name(Parser *p, const char *name) { return tok_is_name(cur(p), name); }
static bool skip_op(Parser *p, const char *op) { return is_op(p, op) ? (advance(p), true) : false; }
static bool skip_name(Parser *p, const char *name) { return is_name(p, name) ? (advance(p), true) : false; }

static const char *describe(const Token *t) {
    switch (t->kind) {
    case TK_EOF: return "end of template";
    case TK_DATA: return "template data";
    case TK_VAR_BEGIN: return "begin of print statement";
    case TK_VAR_END: return "end of print statement";
    case TK_BLOCK_BEGIN: return "begin of statement block";
    case TK_BLOCK_END: return "end of statement block";
    case TK_STRING: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    default: return t->text;
    }
}

static void expect_op(Parser *p, const char *op) {
    if (!skip_op(p, op)) fail(p, "expected '%s', got '%s'", op, describe(cur(p)));
}
static const char *expect_name(Parser *p) {
    if (cur(p)->kind != TK_NAME) fail(p, "expected a name, got '%s'", describe(cur(p)));
    const char *s = cur(p)->text;
    advance(p);
    return s;
}
static void expect_kind(Parser *p, TokKind kind, const char *what) {
    if (cur(p)->kind != kind) fail(p, "expected %s, got '%s'", what, describe(cur(p)));
    advance(p);
}

static void enter(Parser *p) {
    if (++p->depth > MAX_NESTING) fail(p, "the template nests deeper than %d levels", MAX_NESTING);
}

static Node *parse_expression(Parser *p, bool with_condexpr);
static Node *parse_tuple(Parser *p, bool simplified, bool with_condexpr, const char *extra_end, bool explicit_parens);
static Node *parse_unary(Parser *p, bool with_filter);
static Node *parse_primary(Parser *p);
static Node *parse_postfix(Parser *p, Node *nd);
static Node *parse_filter(Parser *p, Node *nd, bool start_inline);

/* ---- expressions --------------------------------------------------------------------------------- */

static Node *binop(Parser *p, BinOp op, Node *a, Node *b) {
    Node *nd = node(p, N_BINOP);
    nd->op = (uint8_t)op;
    nd->a = a;
    nd->b = b;
    return nd;
}

static Node *parse_condexpr(Parser *p);
static Node *parse_or(Parser *p);

static Node *parse_expression(Parser *p, bool with_condexpr) {
    enter(p);
    Node *nd = with_condexpr ? parse_condexpr(p) : parse_or(p);
    p->depth--;
    return nd;
}

static Node *parse_condexpr(Parser *p) {
    Node *expr = parse_or(p);
    while (skip_name(p, "if")) {
        Node *nd = node(p, N_COND);
        nd->a = parse_or(p);
        nd->b = expr;
        nd->c = skip_name(p, "else") ? parse_condexpr(p) : NULL;
        expr = nd;
    }
    return expr;
}

static Node *parse_and(Parser *p);
static Node *parse_or(Parser *p) {
    Node *left = parse_and(p);
    while (skip_name(p, "or")) left = binop(p, OP_OR, left, parse_and(p));
    return left;
}

static Node *parse_not(Parser *p);
static Node *parse_and(Parser *p) {
    Node *left = parse_not(p);
    while (skip_name(p, "and")) left = binop(p, OP_AND, left, parse_not(p));
    return left;
}

static Node *parse_compare(Parser *p);
static Node *parse_not(Parser *p) {
    if (is_name(p, "not")) {
        advance(p);
        enter(p);
        Node *nd = node(p, N_NOT);
        nd->a = parse_not(p);
        p->depth--;
        return nd;
    }
    return parse_compare(p);
}

static Node *parse_math1(Parser *p);
static Node *parse_compare(Parser *p) {
    Node *expr = parse_math1(p);
    NodeList ops = {0};
    uint8_t kinds[64];
    for (;;) {
        const Token *t = cur(p);
        int op = -1;
        if (t->kind == TK_OP) {
            static const char *const names[] = {"==", "!=", "<", "<=", ">", ">="};
            for (int k = 0; k < 6; k++) if (strcmp(t->text, names[k]) == 0) op = k;
            if (op >= 0) advance(p);
        } else if (tok_is_name(t, "in")) {
            op = CMP_IN;
            advance(p);
        } else if (tok_is_name(t, "not") && tok_is_name(peek(p, 1), "in")) {
            op = CMP_NOTIN;
            advance(p);
            advance(p);
        }
        if (op < 0) break;
        if (ops.n == sizeof kinds) fail(p, "too many comparisons in a row");
        kinds[ops.n] = (uint8_t)op;
        list_push(p, &ops, parse_math1(p));
    }
    if (!ops.n) return expr;
    Node *nd = node(p, N_COMPARE);
    nd->a = expr;
    nd->items = ops.items;
    nd->nitems = ops.n;
    nd->cmp_ops = alloc(p, ops.n);
    memcpy(nd->cmp_ops, kinds, ops.n);
    return nd;
}

static Node *parse_concat(Parser *p);
static Node *parse_math1(Parser *p) {
    Node *left = parse_concat(p);
    for (;;) {
        if (skip_op(p, "+")) left = binop(p, OP_ADD, left, parse_concat(p));
        else if (skip_op(p, "-")) left = binop(p, OP_SUB, left, parse_concat(p));
        else return left;
    }
}

static Node *parse_math2(Parser *p);
static Node *parse_concat(Parser *p) {
    Node *first = parse_math2(p);
    if (!is_op(p, "~")) return first;
    NodeList args = {0};
    list_push(p, &args, first);
    while (skip_op(p, "~")) list_push(p, &args, parse_math2(p));
    Node *nd = node(p, N_CONCAT);
    nd->items = args.items;
    nd->nitems = args.n;
    return nd;
}

static Node *parse_pow(Parser *p);
static Node *parse_math2(Parser *p) {
    Node *left = parse_pow(p);
    for (;;) {
        if (skip_op(p, "*")) left = binop(p, OP_MUL, left, parse_pow(p));
        else if (skip_op(p, "/")) left = binop(p, OP_DIV, left, parse_pow(p));
        else if (skip_op(p, "//")) left = binop(p, OP_FLOORDIV, left, parse_pow(p));
        else if (skip_op(p, "%")) left = binop(p, OP_MOD, left, parse_pow(p));
        else return left;
    }
}

static Node *parse_pow(Parser *p) {
    Node *left = parse_unary(p, true);
    while (skip_op(p, "**")) left = binop(p, OP_POW, left, parse_unary(p, true));
    return left;
}

static Node *parse_filter_expr(Parser *p, Node *nd);
static Node *parse_unary(Parser *p, bool with_filter) {
    enter(p);
    Node *nd;
    if (is_op(p, "-") || is_op(p, "+")) {
        nd = node(p, is_op(p, "-") ? N_NEG : N_POS);
        advance(p);
        nd->a = parse_unary(p, false);
    } else {
        nd = parse_primary(p);
    }
    nd = parse_postfix(p, nd);
    if (with_filter) nd = parse_filter_expr(p, nd);
    p->depth--;
    return nd;
}

static Node *parse_list_or_dict(Parser *p, bool dict) {
    Node *nd = node(p, dict ? N_DICT : N_LIST);
    advance(p);
    NodeList keys = {0}, vals = {0};
    const char *close = dict ? "}" : "]";
    while (!is_op(p, close)) {
        if (vals.n) expect_op(p, ",");
        if (is_op(p, close)) break;
        if (dict) {
            list_push(p, &keys, parse_expression(p, true));
            expect_op(p, ":");
        }
        list_push(p, &vals, parse_expression(p, true));
    }
    expect_op(p, close);
    nd->items = vals.items;
    nd->nitems = vals.n;
    nd->keys = keys.items;
    return nd;
}

static Node *parse_primary(Parser *p) {
    const Token *t = cur(p);
    Node *nd;
    switch (t->kind) {
    case TK_NAME:
        nd = node(p, N_CONST);
        if (!strcmp(t->text, "true") || !strcmp(t->text, "True")) nd->value = jv_bool(true);
        else if (!strcmp(t->text, "false") || !strcmp(t->text, "False")) nd->value = jv_bool(false);
        else if (!strcmp(t->text, "none") || !strcmp(t->text, "None")) nd->value = jv_none();
        else {
            nd->kind = N_NAME;
            nd->name = t->text;
        }
        advance(p);
        return nd;
    case TK_STRING: {
        /* adjacent strings join, as in Python */
        size_t total = 0, k = 0;
        while (peek(p, k)->kind == TK_STRING) total += peek(p, k++)->len;
        JStr *s = alloc(p, sizeof *s + total + 1);
        for (size_t i = 0; i < k; i++) {
            memcpy(s->s + s->len, cur(p)->text, cur(p)->len);
            s->len += cur(p)->len;
            advance(p);
        }
        nd = node(p, N_CONST);
        nd->value = jv_static_str(s);
        return nd;
    }
    case TK_INT:
    case TK_FLOAT:
        nd = node(p, N_CONST);
        nd->value = t->kind == TK_INT ? jv_int(t->i) : jv_float(t->f);
        advance(p);
        return nd;
    case TK_OP:
        if (tok_is_op(t, "(")) {
            advance(p);
            nd = parse_tuple(p, false, true, NULL, true);
            expect_op(p, ")");
            return nd;
        }
        if (tok_is_op(t, "[")) return parse_list_or_dict(p, false);
        if (tok_is_op(t, "{")) return parse_list_or_dict(p, true);
        break;
    default: break;
    }
    fail(p, "unexpected '%s'", describe(t));
}

/* expr, expr, ...: a tuple when a comma appears; simplified: names and literals only. */
static Node *parse_tuple(Parser *p, bool simplified, bool with_condexpr, const char *extra_end, bool explicit_parens) {
    NodeList args = {0};
    bool is_tuple = false;
    int line = cur(p)->line;
    for (;;) {
        if (args.n) expect_op(p, ",");
        TokKind k = cur(p)->kind;
        if (k == TK_VAR_END || k == TK_BLOCK_END || is_op(p, ")") || (extra_end && is_name(p, extra_end))) break;
        list_push(p, &args, simplified ? parse_primary(p) : parse_expression(p, with_condexpr));
        if (is_op(p, ",")) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (args.n) return args.items[0];
        if (!explicit_parens) fail(p, "expected an expression, got '%s'", describe(cur(p)));
    }
    Node *nd = node(p, N_TUPLE);
    nd->line = line;
    nd->items = args.items;
    nd->nitems = args.n;
    return nd;
}

/* (args, name=kw, *dyn, **dynkw) into nd's items/kw_names/dyn_*. */
static void parse_call_args(Parser *p, Node *nd) {
    expect_op(p, "(");
    NodeList args = {0};
    const char *names[256];
    bool require_comma = false;
    while (!is_op(p, ")")) {
        if (require_comma) {
            expect_op(p, ",");
            if (is_op(p, ")")) break;
        }
        if (skip_op(p, "*")) {
            if (nd->dyn_args || nd->dyn_kwargs) fail(p, "invalid syntax for function call expression");
            nd->dyn_args = parse_expression(p, true);
        } else if (skip_op(p, "**")) {
            if (nd->dyn_kwargs) fail(p, "invalid syntax for function call expression");
            nd->dyn_kwargs = parse_expression(p, true);
        } else {
            if (args.n == 256) fail(p, "more than 256 arguments");
            if (cur(p)->kind == TK_NAME && tok_is_op(peek(p, 1), "=")) {
                if (nd->dyn_kwargs) fail(p, "invalid syntax for function call expression");
                names[args.n] = cur(p)->text;
                advance(p);
                advance(p);
            } else {
                if (nd->dyn_args || nd->dyn_kwargs || (args.n && names[args.n - 1]))
                    fail(p, "a positional argument follows a keyword argument");
                names[args.n] = NULL;
            }
            list_push(p, &args, parse_expression(p, true));
        }
        require_comma = true;
    }
    expect_op(p, ")");
    nd->items = args.items;
    nd->nitems = args.n;
    nd->kw_names = alloc(p, (args.n ? args.n : 1) * sizeof *nd->kw_names);
    memcpy(nd->kw_names, names, args.n * sizeof *names);
}

static Node *parse_call(Parser *p, Node *callee) {
    Node *nd = node(p, N_CALL);
    nd->a = callee;
    parse_call_args(p, nd);
    return nd;
}

/* [start:stop:step] or [key] */
static Node *parse_subscribed(Parser *p) {
    Node *parts[3] = {NULL, NULL, NULL};
    if (!is_op(p, ":")) {
        Node *e = parse_expression(p, true);
        if (!is_op(p, ":")) return e;
        parts[0] = e;
    }
    advance(p); /* the first ':' */
    if (!is_op(p, ":") && !is_op(p, "]") && !is_op(p, ",")) parts[1] = parse_expression(p, true);
    if (skip_op(p, ":") && !is_op(p, "]") && !is_op(p, ",")) parts[2] = parse_expression(p, true);
    Node *nd = node(p, N_SLICE);
    nd->a = parts[0];
    nd->b = parts[1];
    nd->c = parts[2];
    return nd;
}

static Node *parse_postfix(Parser *p, Node *nd) {
    for (;;) {
        if (skip_op(p, ".")) {
            const Token *t = cur(p);
            Node *acc;
            if (t->kind == TK_NAME) {
                acc = node(p, N_ATTR);
                acc->name = t->text;
            } else if (t->kind == TK_INT) {
                acc = node(p, N_ITEM);
                acc->b = node(p, N_CONST);
                acc->b->value = jv_int(t->i);
            } else {
                fail(p, "expected a name or number after '.'");
            }
            advance(p);
            acc->a = nd;
            nd = acc;
        } else if (skip_op(p, "[")) {
            NodeList args = {0};
            while (!is_op(p, "]")) {
                if (args.n) expect_op(p, ",");
                list_push(p, &args, parse_subscribed(p));
            }
            expect_op(p, "]");
            if (!args.n) fail(p, "expected a subscript expression");
            Node *acc = node(p, N_ITEM);
            acc->a = nd;
            if (args.n == 1) {
                acc->b = args.items[0];
            } else {
                acc->b = node(p, N_TUPLE);
                acc->b->items = args.items;
                acc->b->nitems = args.n;
            }
            nd = acc;
        } else if (is_op(p, "(")) {
            nd = parse_call(p, nd);
        } else {
            return nd;
        }
    }
}

static const char *dotted_name(Parser *p) {
    const char *name = expect_name(p);
    while (is_op(p, ".") && peek(p, 1)->kind == TK_NAME) {
        advance(p);
        const char *more = expect_name(p);
        size_t a = strlen(name), b = strlen(more);
        char *joined = alloc(p, a + b + 2);
        memcpy(joined, name, a);
        joined[a] = '.';
        memcpy(joined + a + 1, more, b);
        name = joined;
    }
    return name;
}

static Node *parse_filter(Parser *p, Node *nd, bool start_inline) {
    while (is_op(p, "|") || start_inline) {
        if (!start_inline) advance(p);
        start_inline = false;
        Node *f = node(p, N_FILTER);
        f->name = dotted_name(p);
        f->a = nd;
        if (is_op(p, "(")) parse_call_args(p, f);
        nd = f;
    }
    return nd;
}

static Node *parse_test(Parser *p, Node *nd) {
    advance(p); /* is */
    Node *t = node(p, N_TEST);
    t->negated = skip_name(p, "not");
    t->name = dotted_name(p);
    t->a = nd;
    const Token *c = cur(p);
    if (is_op(p, "(")) {
        parse_call_args(p, t);
    } else if ((c->kind == TK_NAME || c->kind == TK_STRING || c->kind == TK_INT || c->kind == TK_FLOAT ||
                tok_is_op(c, "(") || tok_is_op(c, "[") || tok_is_op(c, "{")) &&
               !tok_is_name(c, "else") && !tok_is_name(c, "or") && !tok_is_name(c, "and")) {
        if (tok_is_name(c, "is")) fail(p, "you cannot chain multiple tests with is");
        Node *arg = parse_postfix(p, parse_primary(p));
        t->items = alloc(p, sizeof *t->items);
        t->items[0] = arg;
        t->nitems = 1;
        t->kw_names = alloc(p, sizeof *t->kw_names);
    }
    return t;
}

static Node *parse_filter_expr(Parser *p, Node *nd) {
    for (;;) {
        if (is_op(p, "|")) nd = parse_filter(p, nd, false);
        else if (is_name(p, "is")) nd = parse_test(p, nd);
        else if (is_op(p, "(")) nd = parse_call(p, nd);
        else return nd;
    }
}

/* ---- statements ------------------------------------------------------------------------------------ */

static void parse_until(Parser *p, const char *const *ends, NodeList *out);

/* Skips "%}", parses up to one of ends (left as the current token); fails at the end of the template. */
static void parse_body(Parser *p, const char *const *ends, Node ***body, size_t *n, bool drop_end) {
    skip_op(p, ":");
    expect_kind(p, TK_BLOCK_END, "'%}'");
    NodeList l = {0};
    parse_until(p, ends, &l);
    if (cur(p)->kind == TK_EOF) {
        char want[160] = "";
        for (size_t i = 0; ends[i]; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s'%s'", i ? " or " : "", ends[i]);
        fail(p, "Unexpected end of template. Jinja was looking for the following tags: %s.", want);
    }
    if (drop_end) advance(p);
    *body = l.items;
    *n = l.n;
}

/* Names for `for` and `set`: a, or a, b, or (a, b). */
static void parse_targets(Parser *p, Node *st, const char *extra_end) {
    Node *t = parse_tuple(p, true, true, extra_end, false);
    Node *single[1] = {t};
    Node **items = t->kind == N_TUPLE ? t->items : single;
    size_t n = t->kind == N_TUPLE ? t->nitems : 1;
    st->target_tuple = t->kind == N_TUPLE;
    st->targets = alloc(p, (n ? n : 1) * sizeof *st->targets);
    for (size_t i = 0; i < n; i++) {
        if (items[i]->kind != N_NAME) fail(p, "can only assign to names");
        if (!strcmp(items[i]->name, "loop") && extra_end) fail(p, "can't assign to special loop variable in for-loop target");
        st->targets[i] = items[i]->name;
    }
    st->ntargets = n;
}

/* (a, b=default, ...) of a macro or call block */
static void parse_signature(Parser *p, Node *st) {
    expect_op(p, "(");
    NodeList defaults = {0};
    const char *names[128];
    size_t n = 0;
    bool any_default = false;
    while (!is_op(p, ")")) {
        if (n) expect_op(p, ",");
        if (n == 128) fail(p, "more than 128 parameters");
        names[n] = expect_name(p);
        Node *dflt = NULL;
        if (skip_op(p, "=")) {
            dflt = parse_expression(p, true);
            any_default = true;
        } else if (any_default) {
            fail(p, "non-default argument follows default argument");
        }
        list_push(p, &defaults, dflt);
        n++;
    }
    expect_op(p, ")");
    st->targets = alloc(p, (n ? n : 1) * sizeof *st->targets);
    memcpy(st->targets, names, n * sizeof *names);
    st->ntargets = n;
    st->keys = defaults.items;
}

static Node *parse_for(Parser *p) {
    Node *st = node(p, S_FOR);
    parse_targets(p, st, "in");
    if (!skip_name(p, "in")) fail(p, "expected 'in' in a for loop");
    st->a = parse_tuple(p, false, false, "recursive", false);
    Node *it = st->a;
    if ((it->kind == N_ATTR && !strcmp(it->name, "content")) ||
        (it->kind == N_ITEM && it->b->kind == N_CONST && it->b->value.type == JT_STR &&
         !strcmp(it->b->value.s->s, "content")))
        p->t->iterates_content = true;
    if (skip_name(p, "if")) st->b = parse_expression(p, true);
    st->recursive = skip_name(p, "recursive");
    static const char *const ends[] = {"endfor", "else", NULL};
    parse_body(p, ends, &st->body, &st->nbody, false);
    if (is_name(p, "else")) {
        advance(p);
        static const char *const end[] = {"endfor", NULL};
        parse_body(p, end, &st->orelse, &st->norelse, true);
    } else {
        advance(p);
    }
    return st;
}

static Node *parse_if(Parser *p) {
    Node *st = node(p, S_IF);
    st->a = parse_tuple(p, false, false, NULL, false);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    parse_body(p, ends, &st->body, &st->nbody, false);
    if (is_name(p, "elif")) {
        advance(p);
        enter(p);
        Node *elif = parse_if(p);
        p->depth--;
        st->orelse = alloc(p, sizeof *st->orelse);
        st->orelse[0] = elif;
        st->norelse = 1;
    } else if (is_name(p, "else")) {
        advance(p);
        static const char *const end[] = {"endif", NULL};
        parse_body(p, end, &st->orelse, &st->norelse, true);
    } else {
        advance(p);
    }
    return st;
}

static Node *parse_set(Parser *p) {
    Node *st = node(p, S_SET);
    if (cur(p)->kind == TK_NAME && tok_is_op(peek(p, 1), ".")) {
        st->name = expect_name(p);
        advance(p);
        st->attr = expect_name(p);
    } else {
        parse_targets(p, st, NULL);
    }
    if (skip_op(p, "=")) {
        st->a = parse_tuple(p, false, true, NULL, false);
        return st;
    }
    if (st->target_tuple || st->ntargets > 1) fail(p, "a set block assigns one name");
    st->kind = S_SETBLOCK;
    st->b = parse_filter(p, NULL, false);
    static const char *const end[] = {"endset", NULL};
    parse_body(p, end, &st->body, &st->nbody, true);
    return st;
}

static Node *parse_statement(Parser *p) {
    const Token *t = cur(p);
    if (t->kind != TK_NAME) fail(p, "tag name expected");
    const char *tag = t->text;
    advance(p);
    enter(p);
    Node *st = NULL;
    if (!strcmp(tag, "for")) {
        st = parse_for(p);
    } else if (!strcmp(tag, "if")) {
        st = parse_if(p);
    } else if (!strcmp(tag, "set")) {
        st = parse_set(p);
    } else if (!strcmp(tag, "macro")) {
        st = node(p, S_MACRO);
        st->name = expect_name(p);
        parse_signature(p, st);
        static const char *const end[] = {"endmacro", NULL};
        parse_body(p, end, &st->body, &st->nbody, true);
    } else if (!strcmp(tag, "call")) {
        st = node(p, S_CALLBLOCK);
        if (is_op(p, "(")) parse_signature(p, st);
        st->a = parse_expression(p, true);
        if (st->a->kind != N_CALL) fail(p, "expected a call after {%% call %%}");
        static const char *const end[] = {"endcall", NULL};
        parse_body(p, end, &st->body, &st->nbody, true);
    } else if (!strcmp(tag, "filter")) {
        st = node(p, S_FILTERBLOCK);
        st->b = parse_filter(p, NULL, true);
        static const char *const end[] = {"endfilter", NULL};
        parse_body(p, end, &st->body, &st->nbody, true);
    } else if (!strcmp(tag, "with")) {
        st = node(p, S_WITH);
        NodeList vals = {0};
        const char *names[64];
        while (cur(p)->kind != TK_BLOCK_END) {
            if (vals.n) expect_op(p, ",");
            if (vals.n == 64) fail(p, "too many names in a with statement");
            names[vals.n] = expect_name(p);
            expect_op(p, "=");
            list_push(p, &vals, parse_expression(p, true));
        }
        st->targets = alloc(p, (vals.n ? vals.n : 1) * sizeof *st->targets);
        memcpy(st->targets, names, vals.n * sizeof *names);
        st->ntargets = vals.n;
        st->items = vals.items;
        st->nitems = vals.n;
        static const char *const end[] = {"endwith", NULL};
        parse_body(p, end, &st->body, &st->nbody, true);
    } else if (!strcmp(tag, "generation")) {
        st = node(p, S_SCOPE);
        static const char *const end[] = {"endgeneration", NULL};
        parse_body(p, end, &st->body, &st->nbody, true);
    } else if (!strcmp(tag, "break") || !strcmp(tag, "continue")) {
        st = node(p, tag[0] == 'b' ? S_BREAK : S_CONTINUE);
    } else if (!strcmp(tag, "print")) {
        st = node(p, S_PRINT);
        st->a = parse_tuple(p, false, true, NULL, false);
    } else if (!strcmp(tag, "include") || !strcmp(tag, "extends") || !strcmp(tag, "import") ||
               !strcmp(tag, "from") || !strcmp(tag, "block")) {
        fail(p, "'%s' needs other templates, which a chat template cannot load", tag);
    } else {
        fail(p, "encountered unknown tag '%s'", tag);
    }
    p->depth--;
    return st;
}

static void parse_until(Parser *p, const char *const *ends, NodeList *out) {
    for (;;) {
        const Token *t = cur(p);
        if (t->kind == TK_EOF) return;
        if (t->kind == TK_DATA) {
            Node *nd = node(p, S_TEXT);
            JStr *s = alloc(p, sizeof *s + t->len + 1);
            memcpy(s->s, t->text, t->len);
            s->len = t->len;
            nd->value = jv_static_str(s);
            list_push(p, out, nd);
            advance(p);
        } else if (t->kind == TK_VAR_BEGIN) {
            advance(p);
            Node *nd = node(p, S_PRINT);
            nd->a = parse_tuple(p, false, true, NULL, false);
            expect_kind(p, TK_VAR_END, "'}}'");
            list_push(p, out, nd);
        } else if (t->kind == TK_BLOCK_BEGIN) {
            advance(p);
            for (size_t i = 0; ends && ends[i]; i++)
                if (is_name(p, ends[i])) return;
            list_push(p, out, parse_statement(p));
            expect_kind(p, TK_BLOCK_END, "'%}'");
        } else {
            fail(p, "unexpected '%s'", describe(t));
        }
    }
}

int jinja_parse(JinjaTemplate *t, const Token *toks, size_t ntok, JinjaError *err) {
    Parser p = {.t = t, .toks = toks, .n = ntok, .err = err};
    if (setjmp(p.fail_jump)) return -1;
    NodeList body = {0};
    parse_until(&p, NULL, &body);
    t->body = body.items;
    t->nbody = body.n;
    return 0;
}
