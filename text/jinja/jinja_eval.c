/*
 * jinja_eval.c - running the syntax tree: expressions, statements, scopes,
 * macros and loops, and the render entry point (the operators themselves
 * are jinja_operators.c).
 *
 * Hand-written (see jinja.h). Jinja2's rules that decide output:
 *   - every loop iteration gets a fresh scope under the loop's, so a `set`
 *     inside a loop is gone after it (and at the next iteration); `if`
 *     makes no scope; macros, `with` and call blocks do;
 *   - obj.name tries the attribute (a method: dict.items, str.strip) and
 *     then the key; obj[key] tries the key and then the attribute; what is
 *     missing is Undefined, not an error, until it is used;
 *   - methods that modify a list or dict are refused, as the immutable
 *     sandbox refuses them;
 *   - `and`/`or` return an operand, not a bool; comparisons chain.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

enum { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE };

struct JMacro {
    const Node *def; /* S_MACRO, or S_CALLBLOCK for a caller */
    Scope *closure;
    const char *name;
    bool takes_varargs, takes_kwargs, takes_caller;
};

static JValue eval(JRender *r, const Node *n, Scope *sc);
static int exec_body(JRender *r, Node *const *body, size_t n, Scope *sc);

_Noreturn void jinja_fail(JRender *r, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->line) snprintf(r->err->msg, sizeof r->err->msg, "line %d: %s", r->line, msg);
    else snprintf(r->err->msg, sizeof r->err->msg, "%s", msg);
    r->err->line = r->line;
    longjmp(r->fail_jump, 1);
}

JinjaLimits jinja_default_limits(void) {
    return (JinjaLimits){.max_iterations = 1000000, .max_depth = 200, .max_output = 64u << 20, .max_memory = 512u << 20};
}

/* ---- scopes ---------------------------------------------------------------------------------------- */

static Scope *scope_new(JRender *r, Scope *parent) {
    Scope *s = arena_alloc(&r->arena, sizeof *s);
    s->parent = parent;
    return s;
}

static JValue *scope_find(Scope *s, const char *name) {
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (s->names[i] == name || strcmp(s->names[i], name) == 0) return &s->vals[i];
    return NULL;
}

void scope_set(JRender *r, Scope *s, const char *name, JValue v) {
    for (size_t i = 0; i < s->n; i++)
        if (s->names[i] == name || strcmp(s->names[i], name) == 0) {
            s->vals[i] = v;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        s->names = arena_grow(&r->arena, s->names, s->n * sizeof *s->names, cap * sizeof *s->names);
        s->vals = arena_grow(&r->arena, s->vals, s->n * sizeof *s->vals, cap * sizeof *s->vals);
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n++] = v;
}

static void count_iteration(JRender *r) {
    if (++r->iterations > r->limits->max_iterations)
        jinja_fail(r, "the template ran more than %lld loop iterations and macro calls", r->limits->max_iterations);
}

/* ---- attributes and items ----------------------------------------------------------------------------- */

static JValue loop_attr(JRender *r, JLoop *l, const char *name);

JValue jinja_getattr(JRender *r, JValue obj, const char *name) {
    if (obj.type == JT_UNDEFINED) jv_raise_undefined(r, obj);
    if (name[0] == '_' && name[1] == '_') {
        char hint[160];
        snprintf(hint, sizeof hint, "access to attribute '%s' of '%s' object is unsafe.", name, jv_type_name(obj));
        return jv_undefined_hint(r, jv_cstr(r, hint).s->s);
    }
    if (obj.type == JT_NAMESPACE) {
        JValue *v = jv_dict_get_str(obj.d, name);
        return v ? *v : jv_undefined(r, name, jv_owner_name(obj));
    }
    if (obj.type == JT_LOOP) return loop_attr(r, obj.loop, name);
    JValue m = jinja_method(r, obj, name);
    if (m.type != JT_UNDEFINED || (m.u && m.u->hint)) return m;
    if (obj.type == JT_DICT) {
        JValue *v = jv_dict_get_str(obj.d, name);
        if (v) return *v;
    }
    return jv_undefined(r, name, jv_owner_name(obj));
}

/* Python's slice indices for a sequence of n items. */
static size_t slice_indices(JRender *r, const Node *s, Scope *sc, int64_t n, int64_t *start, int64_t *step) {
    JValue a = s->a ? eval(r, s->a, sc) : jv_none(), b = s->b ? eval(r, s->b, sc) : jv_none(),
           c = s->c ? eval(r, s->c, sc) : jv_none();
    *step = c.type == JT_NONE ? 1 : jv_as_int(r, c, "a slice step");
    if (*step == 0) jinja_fail(r, "slice step cannot be zero");
    int64_t lo, hi;
    if (*step > 0) {
        lo = a.type == JT_NONE ? 0 : jv_as_int(r, a, "a slice index");
        hi = b.type == JT_NONE ? n : jv_as_int(r, b, "a slice index");
        if (lo < 0) lo = lo + n < 0 ? 0 : lo + n;
        if (lo > n) lo = n;
        if (hi < 0) hi = hi + n < 0 ? 0 : hi + n;
        if (hi > n) hi = n;
        *start = lo;
        return hi > lo ? (size_t)((hi - lo + *step - 1) / *step) : 0;
    }
    lo = a.type == JT_NONE ? n - 1 : jv_as_int(r, a, "a slice index");
    hi = b.type == JT_NONE ? -1 : jv_as_int(r, b, "a slice index");
    if (a.type != JT_NONE) {
        if (lo < 0) lo = lo + n < 0 ? -1 : lo + n;
        if (lo >= n) lo = n - 1;
    }
    if (b.type != JT_NONE) {
        if (hi < 0) hi = hi + n < 0 ? -1 : hi + n;
        if (hi >= n) hi = n - 1;
    }
    *start = lo;
    return lo > hi ? (size_t)((lo - hi - *step - 1) / -*step) : 0;
}

static JValue eval_slice(JRender *r, JValue obj, const Node *s, Scope *sc) {
    if (obj.type == JT_UNDEFINED) jv_raise_undefined(r, obj);
    int64_t start, step;
    if (obj.type == JT_LIST || obj.type == JT_TUPLE) {
        size_t count = slice_indices(r, s, sc, (int64_t)obj.l->n, &start, &step);
        JValue out = jv_list(r, count);
        out.type = obj.type;
        for (size_t k = 0; k < count; k++) jv_list_push(r, out.l, obj.l->items[start + (int64_t)k * step]);
        return out;
    }
    if (obj.type == JT_STR) {
        JList *chars = jv_iterate(r, obj);
        size_t count = slice_indices(r, s, sc, (int64_t)chars->n, &start, &step);
        JBuf b = {0};
        for (size_t k = 0; k < count; k++) {
            const JStr *c = chars->items[start + (int64_t)k * step].s;
            jbuf_put(r, &b, c->s, c->len);
        }
        return jbuf_value(r, &b);
    }
    return jv_undefined_hint(r, "this object cannot be sliced");
}

JValue jinja_getitem(JRender *r, JValue obj, JValue key) {
    if (obj.type == JT_UNDEFINED) jv_raise_undefined(r, obj);
    if (key.type == JT_UNDEFINED && obj.type != JT_DICT) jv_raise_undefined(r, key);
    if (obj.type == JT_DICT) {
        JValue *v = jv_dict_get(obj.d, key);
        if (v) return *v;
    } else if ((obj.type == JT_LIST || obj.type == JT_TUPLE || obj.type == JT_STR) &&
               (key.type == JT_INT || key.type == JT_BOOL)) {
        int64_t n = obj.type == JT_STR ? jv_length(r, obj) : (int64_t)obj.l->n;
        int64_t i = key.type == JT_INT ? key.i : key.b;
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
            if (obj.type != JT_STR) return obj.l->items[i];
            size_t at = jinja_utf8_offset(obj.s->s, obj.s->len, i), end = at;
            jinja_utf8_next(obj.s->s, obj.s->len, &end);
            return jv_str(r, obj.s->s + at, end - at);
        }
        char hint[96];
        snprintf(hint, sizeof hint, "%s has no element %lld", jv_owner_name(obj), (long long)(key.type == JT_INT ? key.i : key.b));
        return jv_undefined_hint(r, jv_cstr(r, hint).s->s);
    }
    if (key.type == JT_STR) {
        if (obj.type == JT_NAMESPACE || obj.type == JT_LOOP) return jinja_getattr(r, obj, key.s->s);
        JValue m = jinja_method(r, obj, key.s->s);
        if (m.type != JT_UNDEFINED || (m.u && m.u->hint)) return m;
        return jv_undefined(r, key.s->s, jv_owner_name(obj));
    }
    JValue k = jv_to_str(r, key);
    return jv_undefined(r, k.s->s, jv_owner_name(obj));
}

/* ---- calls ----------------------------------------------------------------------------------------- */

/* Evaluates a node's arguments (with *args and **kwargs spread). */
static void eval_args(JRender *r, const Node *n, Scope *sc, JArgs *a, size_t extra_kw) {
    JList *dyn = NULL;
    JDict *dynkw = NULL;
    if (n->dyn_args) dyn = jv_iterate(r, eval(r, n->dyn_args, sc));
    if (n->dyn_kwargs) {
        JValue d = eval(r, n->dyn_kwargs, sc);
        if (d.type != JT_DICT) jinja_fail(r, "argument after ** must be a mapping, not %s", jv_type_name(d));
        dynkw = d.d;
    }
    size_t npos = 0, nkw = extra_kw;
    for (size_t i = 0; i < n->nitems; i++) n->kw_names[i] ? nkw++ : npos++;
    npos += dyn ? dyn->n : 0;
    nkw += dynkw ? dynkw->n : 0;
    a->pos = arena_alloc(&r->arena, (npos + 1) * sizeof *a->pos);
    a->kw = arena_alloc(&r->arena, (nkw + 1) * sizeof *a->kw);
    a->kw_names = arena_alloc(&r->arena, (nkw + 1) * sizeof *a->kw_names);
    a->npos = a->nkw = 0;
    for (size_t i = 0; i < n->nitems; i++) {
        JValue v = eval(r, n->items[i], sc);
        if (n->kw_names[i]) {
            a->kw_names[a->nkw] = n->kw_names[i];
            a->kw[a->nkw++] = v;
        } else {
            a->pos[a->npos++] = v;
        }
    }
    for (size_t i = 0; dyn && i < dyn->n; i++) a->pos[a->npos++] = dyn->items[i];
    for (size_t i = 0; dynkw && i < dynkw->n; i++) {
        if (dynkw->keys[i].type != JT_STR) jinja_fail(r, "keywords must be strings");
        a->kw_names[a->nkw] = dynkw->keys[i].s->s;
        a->kw[a->nkw++] = dynkw->vals[i];
    }
}

static JValue render_to_string(JRender *r, Node *const *body, size_t n, Scope *sc) {
    JBuf buf = {0}, *saved = r->out;
    r->out = &buf;
    int flow = exec_body(r, body, n, sc);
    r->out = saved;
    if (flow != FLOW_NORMAL) jinja_fail(r, "'break' or 'continue' outside of a loop");
    return jbuf_value(r, &buf);
}

static JValue call_macro(JRender *r, JMacro *m, JArgs *a) {
    count_iteration(r);
    if (++r->depth > r->limits->max_depth) jinja_fail(r, "macro calls nest deeper than %d levels", r->limits->max_depth);
    const Node *def = m->def;
    Scope *sc = scope_new(r, m->closure);
    size_t np = def->ntargets;
    bool *given = arena_alloc(&r->arena, np + 1);
    for (size_t i = 0; i < np; i++) {
        if (i < a->npos) {
            scope_set(r, sc, def->targets[i], a->pos[i]);
            given[i] = true;
        }
    }
    if (a->npos > np && !m->takes_varargs)
        jinja_fail(r, "macro '%s' takes not more than %zu argument(s)", m->name, np);
    JValue varargs = jv_list(r, a->npos > np ? a->npos - np : 0), kwargs = jv_dict(r, 0);
    varargs.type = JT_TUPLE;
    for (size_t i = np; i < a->npos; i++) jv_list_push(r, varargs.l, a->pos[i]);
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i = 0;
        while (i < np && strcmp(def->targets[i], a->kw_names[k])) i++;
        if (i < np) {
            if (given[i]) jinja_fail(r, "macro '%s' got multiple values for argument '%s'", m->name, a->kw_names[k]);
            scope_set(r, sc, def->targets[i], a->kw[k]);
            given[i] = true;
        } else if (!strcmp(a->kw_names[k], "caller") && m->takes_caller) {
            scope_set(r, sc, "caller", a->kw[k]);
        } else if (m->takes_kwargs) {
            jv_dict_set(r, kwargs.d, jv_cstr(r, a->kw_names[k]), a->kw[k]);
        } else {
            jinja_fail(r, "macro '%s' takes no keyword argument '%s'", m->name, a->kw_names[k]);
        }
    }
    for (size_t i = 0; i < np; i++) {
        if (given[i]) continue;
        if (def->keys && def->keys[i]) {
            scope_set(r, sc, def->targets[i], eval(r, def->keys[i], sc));
        } else {
            char hint[160];
            snprintf(hint, sizeof hint, "parameter '%s' was not provided", def->targets[i]);
            scope_set(r, sc, def->targets[i], jv_undefined_hint(r, jv_cstr(r, hint).s->s));
        }
    }
    if (m->takes_varargs) scope_set(r, sc, "varargs", varargs);
    if (m->takes_kwargs) scope_set(r, sc, "kwargs", kwargs);
    JValue out = render_to_string(r, def->body, def->nbody, sc);
    r->depth--;
    return out;
}

static void exec_loop(JRender *r, const Node *n, JList *items, Scope *sc, int depth0);

JValue jinja_call(JRender *r, JValue callee, JArgs *a) {
    switch (callee.type) {
    case JT_FUNC: return callee.fn->fn(r, callee.fn->self, a);
    case JT_MACRO: return call_macro(r, callee.m, a);
    case JT_LOOP: {
        JLoop *l = callee.loop;
        if (!l->node->recursive) jinja_fail(r, "the loop must have the 'recursive' marker to be called recursively");
        if (a->npos != 1 || a->nkw) jinja_fail(r, "loop() takes one iterable");
        JBuf buf = {0}, *saved = r->out;
        r->out = &buf;
        exec_loop(r, l->node, jv_iterate(r, a->pos[0]), l->scope, l->depth0 + 1);
        r->out = saved;
        return jbuf_value(r, &buf);
    }
    case JT_UNDEFINED: jv_raise_undefined(r, callee);
    default: jinja_fail(r, "'%s' object is not callable", jv_type_name(callee));
    }
}

/* ---- expressions ------------------------------------------------------------------------------------ */

static JValue apply_filter(JRender *r, const Node *f, JValue input, Scope *sc) {
    if (f->a) input = eval(r, f->a, sc);
    JFilterFn fn = jinja_filter(f->name);
    if (!fn) jinja_fail(r, "No filter named '%s'.", f->name);
    JArgs a = {.callee = f->name};
    if (f->kw_names) eval_args(r, f, sc, &a, 0);
    return fn(r, input, &a);
}

/* A chain of filters whose innermost operand is missing (filter and set blocks). */
static JValue apply_chain(JRender *r, const Node *f, JValue input, Scope *sc) {
    if (!f) return input;
    JValue inner = f->a ? apply_chain(r, f->a, input, sc) : input;
    JFilterFn fn = jinja_filter(f->name);
    if (!fn) jinja_fail(r, "No filter named '%s'.", f->name);
    JArgs a = {.callee = f->name};
    if (f->kw_names) eval_args(r, f, sc, &a, 0);
    return fn(r, inner, &a);
}

static JValue eval_items(JRender *r, const Node *n, Scope *sc, JType type) {
    JValue out = jv_list(r, n->nitems);
    out.type = (uint8_t)type;
    for (size_t i = 0; i < n->nitems; i++) jv_list_push(r, out.l, eval(r, n->items[i], sc));
    return out;
}

static JValue eval(JRender *r, const Node *n, Scope *sc) {
    if (++r->depth > r->limits->max_depth) jinja_fail(r, "the template nests deeper than %d levels", r->limits->max_depth);
    JValue v, a, b;
    switch (n->kind) {
    case N_CONST: v = n->value; break;
    case N_NAME: {
        JValue *found = scope_find(sc, n->name);
        v = found ? *found : jv_undefined(r, n->name, NULL);
        break;
    }
    case N_ATTR: v = jinja_getattr(r, eval(r, n->a, sc), n->name); break;
    case N_ITEM:
        a = eval(r, n->a, sc);
        v = n->b->kind == N_SLICE ? eval_slice(r, a, n->b, sc) : jinja_getitem(r, a, eval(r, n->b, sc));
        break;
    case N_CALL: {
        JValue callee = eval(r, n->a, sc);
        JArgs args = {.callee = n->a->kind == N_NAME || n->a->kind == N_ATTR ? n->a->name : "function"};
        eval_args(r, n, sc, &args, 0);
        v = jinja_call(r, callee, &args);
        break;
    }
    case N_FILTER: v = apply_filter(r, n, jv_none(), sc); break;
    case N_TEST: {
        JTestFn fn = jinja_test(n->name);
        if (!fn) jinja_fail(r, "No test named '%s'.", n->name);
        a = eval(r, n->a, sc);
        JArgs args = {.callee = n->name};
        if (n->kw_names) eval_args(r, n, sc, &args, 0);
        v = jv_bool(fn(r, a, &args) != n->negated);
        break;
    }
    case N_NEG:
    case N_POS:
        v = jinja_unary(r, n->kind == N_NEG, eval(r, n->a, sc));
        break;
    case N_NOT: v = jv_bool(!jv_truthy(eval(r, n->a, sc))); break;
    case N_BINOP:
        a = eval(r, n->a, sc);
        if (n->op == OP_AND) v = jv_truthy(a) ? eval(r, n->b, sc) : a;
        else if (n->op == OP_OR) v = jv_truthy(a) ? a : eval(r, n->b, sc);
        else v = jinja_arith(r, (BinOp)n->op, a, eval(r, n->b, sc));
        break;
    case N_CONCAT: {
        JBuf buf = {0};
        for (size_t i = 0; i < n->nitems; i++) jv_write_str(r, &buf, eval(r, n->items[i], sc));
        v = jbuf_value(r, &buf);
        break;
    }
    case N_COMPARE: {
        a = eval(r, n->a, sc);
        v = jv_bool(true);
        for (size_t i = 0; i < n->nitems; i++) {
            b = eval(r, n->items[i], sc);
            if (!jinja_compare(r, (CmpOp)n->cmp_ops[i], a, b)) {
                v = jv_bool(false);
                break;
            }
            a = b;
        }
        break;
    }
    case N_COND:
        if (jv_truthy(eval(r, n->a, sc))) v = eval(r, n->b, sc);
        else v = n->c ? eval(r, n->c, sc) : jv_undefined_hint(r, "the inline if-expression evaluated to false and no else section was defined.");
        break;
    case N_LIST: v = eval_items(r, n, sc, JT_LIST); break;
    case N_TUPLE: v = eval_items(r, n, sc, JT_TUPLE); break;
    case N_DICT:
        v = jv_dict(r, n->nitems);
        for (size_t i = 0; i < n->nitems; i++) {
            JValue key = eval(r, n->keys[i], sc);
            if (key.type == JT_LIST || key.type == JT_DICT || key.type == JT_UNDEFINED)
                jinja_fail(r, "unhashable type: '%s'", jv_type_name(key));
            jv_dict_set(r, v.d, key, eval(r, n->items[i], sc));
        }
        break;
    default: jinja_fail(r, "internal error: not an expression");
    }
    r->depth--;
    return v;
}

/* ---- statements ------------------------------------------------------------------------------------- */

static void assign(JRender *r, Scope *sc, const Node *n, JValue v) {
    if (!n->target_tuple) {
        scope_set(r, sc, n->targets[0], v);
        return;
    }
    JList *items = jv_iterate(r, v);
    if (items->n != n->ntargets)
        jinja_fail(r, items->n > n->ntargets ? "too many values to unpack (expected %zu)" : "not enough values to unpack (expected %zu, got %zu)",
                   n->ntargets, items->n);
    for (size_t i = 0; i < n->ntargets; i++) scope_set(r, sc, n->targets[i], items->items[i]);
}

static JValue loop_attr(JRender *r, JLoop *l, const char *name);

static JValue loop_cycle(JRender *r, JValue self, JArgs *a) {
    if (!a->npos) jinja_fail(r, "no items for cycling given");
    return a->pos[self.loop->index0 % a->npos];
}

static JValue loop_changed(JRender *r, JValue self, JArgs *a) {
    JValue now = jv_list(r, a->npos);
    for (size_t i = 0; i < a->npos; i++) jv_list_push(r, now.l, a->pos[i]);
    JLoop *l = self.loop;
    if (l->last_changed.type == JT_LIST && jv_equal(l->last_changed, now)) return jv_bool(false);
    l->last_changed = now;
    return jv_bool(true);
}

static JValue loop_attr(JRender *r, JLoop *l, const char *name) {
    int64_t n = (int64_t)l->items->n, i = (int64_t)l->index0;
    JValue self = {.type = JT_LOOP, .loop = l};
    if (!strcmp(name, "index")) return jv_int(i + 1);
    if (!strcmp(name, "index0")) return jv_int(i);
    if (!strcmp(name, "revindex")) return jv_int(n - i);
    if (!strcmp(name, "revindex0")) return jv_int(n - i - 1);
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i == n - 1);
    if (!strcmp(name, "length")) return jv_int(n);
    if (!strcmp(name, "depth")) return jv_int(l->depth0 + 1);
    if (!strcmp(name, "depth0")) return jv_int(l->depth0);
    if (!strcmp(name, "previtem")) return i > 0 ? l->items->items[i - 1] : jv_undefined_hint(r, "there is no previous item");
    if (!strcmp(name, "nextitem")) return i + 1 < n ? l->items->items[i + 1] : jv_undefined_hint(r, "there is no next item");
    if (!strcmp(name, "cycle")) return jv_func(r, "cycle", loop_cycle, self);
    if (!strcmp(name, "changed")) return jv_func(r, "changed", loop_changed, self);
    return jv_undefined(r, name, "jinja2.runtime.LoopContext object");
}

static void exec_loop(JRender *r, const Node *n, JList *items, Scope *sc, int depth0) {
    if (++r->depth > r->limits->max_depth) jinja_fail(r, "loops nest deeper than %d levels", r->limits->max_depth);
    if (n->b) { /* for ... if test: the test sees the loop variables, not `loop` */
        JValue kept = jv_list(r, items->n);
        for (size_t i = 0; i < items->n; i++) {
            count_iteration(r);
            Scope *ts = scope_new(r, sc);
            assign(r, ts, n, items->items[i]);
            if (jv_truthy(eval(r, n->b, ts))) jv_list_push(r, kept.l, items->items[i]);
        }
        items = kept.l;
    }
    JLoop *loop = arena_alloc(&r->arena, sizeof *loop);
    loop->items = items;
    loop->depth0 = depth0;
    loop->node = n;
    loop->scope = sc;
    JValue loop_value = {.type = JT_LOOP, .loop = loop};
    for (size_t i = 0; i < items->n; i++) {
        count_iteration(r);
        loop->index0 = i;
        Scope *is = scope_new(r, sc);
        assign(r, is, n, items->items[i]);
        scope_set(r, is, "loop", loop_value);
        int flow = exec_body(r, n->body, n->nbody, is);
        if (flow == FLOW_BREAK) break;
    }
    if (!items->n && n->norelse && exec_body(r, n->orelse, n->norelse, scope_new(r, sc)) != FLOW_NORMAL)
        jinja_fail(r, "'break' or 'continue' outside of a loop");
    r->depth--;
}

static bool uses_name(const Node *n, const char *name, int depth) {
    if (!n || depth > 400) return false;
    if (n->kind == N_NAME && !strcmp(n->name, name)) return true;
    if (uses_name(n->a, name, depth + 1) || uses_name(n->b, name, depth + 1) || uses_name(n->c, name, depth + 1) ||
        uses_name(n->dyn_args, name, depth + 1) || uses_name(n->dyn_kwargs, name, depth + 1))
        return true;
    for (size_t i = 0; i < n->nitems; i++)
        if (uses_name(n->items[i], name, depth + 1) || (n->keys && uses_name(n->keys[i], name, depth + 1))) return true;
    for (size_t i = 0; i < n->nbody; i++)
        if (uses_name(n->body[i], name, depth + 1)) return true;
    for (size_t i = 0; i < n->norelse; i++)
        if (uses_name(n->orelse[i], name, depth + 1)) return true;
    return false;
}

static JValue make_macro(JRender *r, const Node *def, Scope *sc, const char *name) {
    JMacro *m = arena_alloc(&r->arena, sizeof *m);
    m->def = def;
    m->closure = sc;
    m->name = name;
    m->takes_varargs = uses_name(def, "varargs", 0);
    m->takes_kwargs = uses_name(def, "kwargs", 0);
    m->takes_caller = uses_name(def, "caller", 0);
    return (JValue){.type = JT_MACRO, .m = m};
}

static int exec_node(JRender *r, const Node *n, Scope *sc) {
    r->line = n->line;
    switch (n->kind) {
    case S_TEXT: jbuf_put(r, r->out, n->value.s->s, n->value.s->len); break;
    case S_PRINT: jv_write_str(r, r->out, eval(r, n->a, sc)); break;
    case S_IF:
        if (jv_truthy(eval(r, n->a, sc))) return exec_body(r, n->body, n->nbody, sc);
        return exec_body(r, n->orelse, n->norelse, sc);
    case S_FOR: {
        JValue it = eval(r, n->a, sc);
        exec_loop(r, n, jv_iterate(r, it), sc, 0);
        break;
    }
    case S_SET:
        if (n->attr) {
            JValue *ns = scope_find(sc, n->name);
            if (!ns || ns->type != JT_NAMESPACE) jinja_fail(r, "cannot assign attribute on non-namespace object");
            jv_dict_set(r, ns->d, jv_cstr(r, n->attr), eval(r, n->a, sc));
        } else {
            assign(r, sc, n, eval(r, n->a, sc));
        }
        break;
    case S_SETBLOCK: {
        JValue body = render_to_string(r, n->body, n->nbody, sc);
        scope_set(r, sc, n->targets[0], apply_chain(r, n->b, body, sc));
        break;
    }
    case S_MACRO: scope_set(r, sc, n->name, make_macro(r, n, sc, n->name)); break;
    case S_CALLBLOCK: {
        JValue caller = make_macro(r, n, sc, "caller");
        const Node *call = n->a;
        JValue callee = eval(r, call->a, sc);
        JArgs args = {.callee = "call"};
        eval_args(r, call, sc, &args, 1);
        args.kw_names[args.nkw] = "caller";
        args.kw[args.nkw++] = caller;
        jv_write_str(r, r->out, jinja_call(r, callee, &args));
        break;
    }
    case S_FILTERBLOCK: {
        JValue body = render_to_string(r, n->body, n->nbody, sc);
        jv_write_str(r, r->out, apply_chain(r, n->b, body, sc));
        break;
    }
    case S_WITH: {
        Scope *ws = scope_new(r, sc);
        for (size_t i = 0; i < n->ntargets; i++) scope_set(r, ws, n->targets[i], eval(r, n->items[i], sc));
        return exec_body(r, n->body, n->nbody, ws);
    }
    case S_SCOPE: return exec_body(r, n->body, n->nbody, sc);
    case S_BREAK: return FLOW_BREAK;
    case S_CONTINUE: return FLOW_CONTINUE;
    default: jinja_fail(r, "internal error: not a statement");
    }
    return FLOW_NORMAL;
}

static int exec_body(JRender *r, Node *const *body, size_t n, Scope *sc) {
    for (size_t i = 0; i < n; i++) {
        int flow = exec_node(r, body[i], sc);
        if (flow != FLOW_NORMAL) return flow;
    }
    return FLOW_NORMAL;
}

/* ---- entry points -------------------------------------------------------------------------------------- */

JinjaTemplate *jinja_compile(const char *source, size_t len, JinjaError *err) {
    memset(err, 0, sizeof *err);
    JinjaTemplate *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return NULL;
    }
    size_t ntok;
    Token *toks = jinja_lex(&t->arena, source, len, &ntok, err);
    if (!toks || jinja_parse(t, toks, ntok, err)) {
        jinja_free(t);
        return NULL;
    }
    return t;
}

void jinja_free(JinjaTemplate *t) {
    if (!t) return;
    arena_free(&t->arena);
    free(t);
}

int jinja_iterates_content(const JinjaTemplate *t) { return t->iterates_content; }

char *jinja_render(const JinjaTemplate *t, const json_t *vars, double now, const JinjaLimits *limits, size_t *len,
                   JinjaError *err) {
    memset(err, 0, sizeof *err);
    JinjaLimits lim = limits ? *limits : jinja_default_limits();
    JRender *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return NULL;
    }
    r->arena.limit = lim.max_memory;
    r->arena.owner = r;
    r->limits = &lim;
    r->err = err;
    r->now = now;
    char *volatile result = NULL;
    if (setjmp(r->fail_jump) == 0) {
        Scope *globals = scope_new(r, NULL);
        jinja_add_globals(r, globals);
        Scope *root = scope_new(r, globals);
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)vars, key, val) scope_set(r, root, jv_cstr(r, key).s->s, jinja_from_json(r, val));
        JBuf out = {0};
        r->out = &out;
        if (exec_body(r, t->body, t->nbody, root) != FLOW_NORMAL) jinja_fail(r, "'break' or 'continue' outside of a loop");
        char *text = malloc(out.len + 1);
        if (!text) jinja_fail(r, "out of memory");
        if (out.len) memcpy(text, out.data, out.len);
        text[out.len] = '\0';
        *len = out.len;
        result = text;
    }
    arena_free(&r->arena);
    free(r);
    return result;
}
