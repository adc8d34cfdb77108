/*
 * jinja_operators.c - Python's operators on template values: + - * / // %
 * ** (ints that overflow 64 bits are an error, not a big int), string and
 * list concatenation and repetition, `%` formatting, unary - and +, `in`,
 * and comparisons with Python's equality and ordering. Hand-written with
 * the rest of the interpreter (see jinja.h).
 */
#include <math.h>
#include <string.h>

#include "jinja_internal.h"

static bool numeric(JValue v) { return v.type == JT_INT || v.type == JT_BOOL || v.type == JT_FLOAT; }
static int64_t ival(JValue v) { return v.type == JT_INT ? v.i : v.type == JT_BOOL ? v.b : 0; }
static double fval(JValue v) { return v.type == JT_FLOAT ? v.f : (double)ival(v); }

static const char *const BINOP_SYMBOLS[] = {"+", "-", "*", "/", "//", "%", "**"};

static _Noreturn void unsupported(JRender *r, BinOp op, JValue a, JValue b) {
    if (op == OP_ADD && (a.type == JT_STR || a.type == JT_LIST || a.type == JT_TUPLE))
        jinja_fail(r, "can only concatenate %s (not \"%s\") to %s", jv_type_name(a), jv_type_name(b), jv_type_name(a));
    jinja_fail(r, "unsupported operand type(s) for %s: '%s' and '%s'", BINOP_SYMBOLS[op], jv_type_name(a), jv_type_name(b));
}

static JValue repeat(JRender *r, JValue seq, int64_t times) {
    if (times < 0) times = 0;
    if (seq.type == JT_STR) {
        if (seq.s->len && (uint64_t)times > r->limits->max_output / seq.s->len) jinja_fail(r, "a repeated string is over the limit");
        JBuf b = {0};
        for (int64_t i = 0; i < times; i++) jbuf_put(r, &b, seq.s->s, seq.s->len);
        return jbuf_value(r, &b);
    }
    if (seq.l->n && (uint64_t)times > r->limits->max_memory / sizeof(JValue) / seq.l->n) jinja_fail(r, "a repeated list is over the limit");
    JValue out = jv_list(r, seq.l->n * (size_t)times);
    out.type = seq.type;
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq.l->n; k++) jv_list_push(r, out.l, seq.l->items[k]);
    return out;
}


JValue jinja_arith(JRender *r, BinOp op, JValue a, JValue b) {
    if (a.type == JT_UNDEFINED) jv_raise_undefined(r, a);
    if (b.type == JT_UNDEFINED) jv_raise_undefined(r, b);
    if (numeric(a) && numeric(b)) {
        bool ints = a.type != JT_FLOAT && b.type != JT_FLOAT;
        int64_t x = ival(a), y = ival(b), z;
        double fx = fval(a), fy = fval(b);
        switch (op) {
        case OP_ADD:
            if (!ints) return jv_float(fx + fy);
            if (__builtin_add_overflow(x, y, &z)) jinja_fail(r, "integer overflow");
            return jv_int(z);
        case OP_SUB:
            if (!ints) return jv_float(fx - fy);
            if (__builtin_sub_overflow(x, y, &z)) jinja_fail(r, "integer overflow");
            return jv_int(z);
        case OP_MUL:
            if (!ints) return jv_float(fx * fy);
            if (__builtin_mul_overflow(x, y, &z)) jinja_fail(r, "integer overflow");
            return jv_int(z);
        case OP_DIV:
            if (fy == 0) jinja_fail(r, "division by zero");
            return jv_float(fx / fy);
        case OP_FLOORDIV:
        case OP_MOD:
            if (ints ? y == 0 : fy == 0) jinja_fail(r, ints ? "integer division or modulo by zero" : "float modulo");
            if (ints) {
                if (x == INT64_MIN && y == -1) jinja_fail(r, "integer overflow");
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    q--;
                    m += y;
                }
                return jv_int(op == OP_FLOORDIV ? q : m);
            } else {
                double m = fmod(fx, fy);
                if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
                return jv_float(op == OP_FLOORDIV ? floor((fx - m) / fy + 0.5) : m);
            }
        case OP_POW:
            if (ints && y >= 0) { /* by squaring: 1 ** 10**18 must not loop */
                int64_t acc = 1, base = x;
                for (; y; y >>= 1) {
                    if ((y & 1) && __builtin_mul_overflow(acc, base, &acc)) jinja_fail(r, "integer overflow");
                    if (y > 1 && __builtin_mul_overflow(base, base, &base)) jinja_fail(r, "integer overflow");
                }
                return jv_int(acc);
            }
            return jv_float(pow(fx, fy));
        default: break;
        }
    }
    if (op == OP_ADD && a.type == b.type && a.type == JT_STR) {
        JBuf buf = {0};
        jbuf_put(r, &buf, a.s->s, a.s->len);
        jbuf_put(r, &buf, b.s->s, b.s->len);
        return jbuf_value(r, &buf);
    }
    if (op == OP_ADD && a.type == b.type && (a.type == JT_LIST || a.type == JT_TUPLE)) {
        JValue out = jv_list(r, a.l->n + b.l->n);
        out.type = a.type;
        for (size_t i = 0; i < a.l->n; i++) jv_list_push(r, out.l, a.l->items[i]);
        for (size_t i = 0; i < b.l->n; i++) jv_list_push(r, out.l, b.l->items[i]);
        return out;
    }
    if (op == OP_MUL && (a.type == JT_STR || a.type == JT_LIST || a.type == JT_TUPLE) && (b.type == JT_INT || b.type == JT_BOOL))
        return repeat(r, a, ival(b));
    if (op == OP_MUL && (b.type == JT_STR || b.type == JT_LIST || b.type == JT_TUPLE) && (a.type == JT_INT || a.type == JT_BOOL))
        return repeat(r, b, ival(a));
    if (op == OP_MOD && a.type == JT_STR) return py_percent_format(r, a, b);
    unsupported(r, op, a, b);
}

static bool contains(JRender *r, JValue container, JValue item) {
    switch (container.type) {
    case JT_STR:
        if (item.type == JT_UNDEFINED) jv_raise_undefined(r, item);
        if (item.type != JT_STR) jinja_fail(r, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        if (!item.s->len) return true;
        for (size_t i = 0; i + item.s->len <= container.s->len; i++)
            if (memcmp(container.s->s + i, item.s->s, item.s->len) == 0) return true;
        return false;
    case JT_DICT:
    case JT_NAMESPACE: return jv_dict_get(container.d, item) != NULL;
    case JT_UNDEFINED: return false;
    case JT_LIST:
    case JT_TUPLE:
    case JT_ITER: {
        JList *l = jv_iterate(r, container);
        for (size_t i = 0; i < l->n; i++)
            if (jv_equal(l->items[i], item)) return true;
        return false;
    }
    default: jinja_fail(r, "argument of type '%s' is not iterable", jv_type_name(container));
    }
}

bool jinja_compare(JRender *r, CmpOp op, JValue a, JValue b) {
    switch (op) {
    case CMP_EQ: return jv_equal(a, b);
    case CMP_NE: return !jv_equal(a, b);
    case CMP_LT: return jv_compare(r, a, b) < 0;
    case CMP_LE: return jv_compare(r, a, b) <= 0;
    case CMP_GT: return jv_compare(r, a, b) > 0;
    case CMP_GE: return jv_compare(r, a, b) >= 0;
    case CMP_IN: return contains(r, b, a);
    case CMP_NOTIN: return !contains(r, b, a);
    }
    return false;
}

JValue jinja_unary(JRender *r, bool negate, JValue a) {
    if (a.type == JT_UNDEFINED) jv_raise_undefined(r, a);
    if (!numeric(a)) jinja_fail(r, "bad operand type for unary %c: '%s'", negate ? '-' : '+', jv_type_name(a));
    if (!negate) return a.type == JT_BOOL ? jv_int(a.b) : a;
    if (a.type == JT_FLOAT) return jv_float(-a.f);
    if (ival(a) == INT64_MIN) jinja_fail(r, "integer overflow");
    return jv_int(-ival(a));
}
