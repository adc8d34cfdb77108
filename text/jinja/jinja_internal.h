/*
 * jinja_internal.h - what the interpreter's files share: the arena, the
 * values (Python's types as Jinja2 sees them), the tokens, the syntax tree
 * and the render state.
 *
 * Memory: a compiled template (tokens are gone by then, the tree stays)
 * lives in one arena; each render allocates everything it makes - values,
 * scopes, output - in a second arena, freed at once when the render ends.
 * Errors therefore unwind with longjmp from wherever they are found
 * straight to jinja_render(): there is nothing to release on the way.
 */
#ifndef NANOVLLM_JINJA_INTERNAL_H
#define NANOVLLM_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jinja.h"

/* ---- arena ---------------------------------------------------------------------------------- */

typedef struct JChunk JChunk;
typedef struct JArena {
    JChunk *chunks;
    size_t used, limit; /* bytes handed out; over the limit, fail() */
    struct JRender *owner; /* a render's arena reports exhaustion as a template error */
} JArena;

/* n bytes, 16-aligned, zeroed; NULL only for an arena without an owner (compile). */
void *arena_alloc(JArena *a, size_t n);
/* A growing array moves: size new bytes with the first `used` of old copied
 * (arena memory is freed all at once, never block by block). */
void *arena_grow(JArena *a, const void *old, size_t used, size_t size);
void arena_free(JArena *a);

/* ---- values ----------------------------------------------------------------------------------- */

typedef enum {
    JT_UNDEFINED, /* Jinja2's Undefined: prints "", iterates empty, most else raises */
    JT_NONE,
    JT_BOOL,
    JT_INT,
    JT_FLOAT,
    JT_STR,
    JT_LIST,
    JT_TUPLE,
    JT_DICT,      /* insertion-ordered, as Python's */
    JT_NAMESPACE, /* namespace(): a dict whose attributes `set` may assign */
    JT_ITER,      /* a generator or iterator: truthy, no len, iterates once */
    JT_FUNC,      /* a builtin: a global, a filter-like helper, or a bound method */
    JT_MACRO,     /* a macro, or the caller of a call block */
    JT_LOOP,      /* the `loop` of a for loop */
} JType;

typedef struct JStr {
    size_t len;
    char s[]; /* NUL-terminated (the NUL is not counted) */
} JStr;

typedef struct JValue JValue;
typedef struct JList {
    size_t n, cap;
    JValue *items;
    bool consumed; /* JT_ITER: iterated once already */
} JList;
typedef struct JDict JDict;
typedef struct JUndef JUndef;
typedef struct JFunc JFunc;
typedef struct JMacro JMacro;
typedef struct JLoop JLoop;

struct JValue {
    uint8_t type;
    union {
        bool b;
        int64_t i;
        double f;
        JStr *s;
        JList *l; /* list, tuple, iter */
        JDict *d; /* dict, namespace */
        JUndef *u;
        JFunc *fn;
        JMacro *m;
        JLoop *loop;
    };
};

struct JDict {
    size_t n, cap;
    JValue *keys, *vals;
};

/* The `loop` of a for loop: its items (after the loop's filter) and position. */
struct JLoop {
    JList *items;
    size_t index0;
    int depth0;
    const struct Node *node; /* the S_FOR, for loop(...) of recursive loops */
    struct Scope *scope;     /* where the loop runs */
    JValue last_changed;     /* loop.changed() */
};

/* Why a value is undefined, for the message if it is used. */
struct JUndef {
    const char *name;  /* the variable, attribute or key */
    const char *owner; /* "dict object", "None", ... or NULL for a variable */
    const char *hint;  /* a whole message instead ("there is no previous item") */
};

typedef struct JArgs JArgs;
typedef struct JRender JRender;
typedef JValue (*JBuiltin)(JRender *r, JValue self, JArgs *a);
struct JFunc {
    const char *name;
    JBuiltin fn;
    JValue self; /* a bound method's object; JT_NONE for plain functions */
};

/* Call arguments: positional ones, then keyword ones. */
struct JArgs {
    size_t npos, nkw;
    JValue *pos;
    const char **kw_names;
    JValue *kw;
    const char *callee; /* for messages */
};

/* ---- tokens ---------------------------------------------------------------------------------- */

typedef enum {
    TK_EOF,
    TK_DATA,          /* template text (whitespace control already applied) */
    TK_VAR_BEGIN,     /* {{ */
    TK_VAR_END,       /* }} */
    TK_BLOCK_BEGIN,   /* {% */
    TK_BLOCK_END,     /* %} */
    TK_NAME,
    TK_STRING,        /* unescaped */
    TK_INT,
    TK_FLOAT,
    TK_OP,            /* op: one of the operator strings below */
} TokKind;

typedef struct Token {
    TokKind kind;
    int line;
    const char *text; /* DATA, NAME, STRING (arena copies), OP (a static string) */
    size_t len;
    int64_t i;
    double f;
} Token;

/* Splits a template into tokens (jinja_lexer.c). NULL + err on a lexical error. */
Token *jinja_lex(JArena *a, const char *src, size_t len, size_t *ntok, JinjaError *err);

/* ---- syntax tree ------------------------------------------------------------------------------ */

typedef enum {
    /* expressions */
    N_CONST,   /* value */
    N_NAME,    /* name */
    N_ATTR,    /* a.name */
    N_ITEM,    /* a[b] */
    N_SLICE,   /* [a:b:c], each may be NULL */
    N_CALL,    /* a(args) */
    N_FILTER,  /* a|name(args); a NULL in a filter block or `set` block */
    N_TEST,    /* a is name(args) */
    N_NEG,     /* -a */
    N_POS,     /* +a */
    N_NOT,     /* not a */
    N_BINOP,   /* a op b: + - * / // % ** and or */
    N_CONCAT,  /* items joined by ~ */
    N_COMPARE, /* a op1 items[0] op2 items[1] ...: ops in cmp_ops */
    N_COND,    /* b if a else c (c may be NULL) */
    N_LIST,    /* [items] */
    N_TUPLE,   /* (items) */
    N_DICT,    /* {keys[i]: items[i]} */
    /* statements */
    S_TEXT,     /* value: the text */
    S_PRINT,    /* {{ a }} */
    S_IF,       /* if a: body else: orelse (elif is an S_IF in orelse) */
    S_FOR,      /* for targets in a if b: body else: orelse; recursive */
    S_SET,      /* targets = a (or ns.attr: name = ns, attr) */
    S_SETBLOCK, /* {% set target | filter %}body{% endset %}; b: the filter chain or NULL */
    S_MACRO,    /* name(params=defaults): body */
    S_CALLBLOCK, /* {% call(params) a %}body: a is the call */
    S_FILTERBLOCK, /* b: the filter chain */
    S_WITH,     /* targets = items: body */
    S_BREAK,
    S_CONTINUE,
    S_SCOPE,    /* {% generation %}: transformers' marker, rendered as its body */
} NodeKind;

typedef enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_AND, OP_OR } BinOp;
typedef enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN } CmpOp;

typedef struct Node Node;
struct Node {
    uint8_t kind;
    uint8_t op;        /* BinOp */
    bool recursive;    /* S_FOR */
    bool negated;      /* N_TEST: `is not` */
    int line;
    const char *name;  /* N_NAME, N_ATTR, N_FILTER, N_TEST, S_MACRO, S_SET ns attr */
    const char *attr;  /* S_SET: the namespace attribute */
    JValue value;      /* N_CONST, S_TEXT */
    Node *a, *b, *c;
    Node **items;      /* operands, list items, call args, dict values */
    size_t nitems;
    const char **kw_names; /* N_CALL/N_FILTER/N_TEST: per arg, NULL = positional */
    Node *dyn_args, *dyn_kwargs; /* *args, **kwargs */
    Node **keys;       /* N_DICT keys; S_MACRO/S_CALLBLOCK: parameter defaults (NULL = none) */
    uint8_t *cmp_ops;  /* N_COMPARE */
    const char **targets; /* S_FOR, S_SET, S_WITH, S_MACRO params */
    size_t ntargets;
    bool target_tuple; /* S_FOR/S_SET: `a, b = ...` even with one name */
    Node **body, **orelse;
    size_t nbody, norelse;
};

/* Builds the tree (jinja_parser.c). NULL + err on a syntax error. */
struct JinjaTemplate {
    JArena arena;
    Node **body;
    size_t nbody;
    bool iterates_content;
};
int jinja_parse(JinjaTemplate *t, const Token *toks, size_t ntok, JinjaError *err);

/* ---- rendering --------------------------------------------------------------------------------- */

typedef struct Scope Scope;
struct Scope {
    Scope *parent;
    size_t n, cap;
    const char **names;
    JValue *vals;
};

typedef struct JBuf {
    char *data;
    size_t len, cap;
} JBuf;

struct JRender {
    JArena arena;
    jmp_buf fail_jump;
    JinjaError *err;
    const JinjaLimits *limits;
    JBuf *out;            /* where output goes now (captures swap it) */
    Scope *globals;       /* builtins, then the caller's variables */
    long long iterations; /* loop iterations and macro calls so far */
    int depth;            /* nested macro calls, loops and evaluations */
    double now;           /* strftime_now's time (seconds since the epoch) */
    int line;             /* the line being run, for messages */
};

/* Ends the render with a template error (a formatted message). */
_Noreturn void jinja_fail(JRender *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* values (jinja_value.c) */
JValue jv_none(void);
JValue jv_bool(bool b);
JValue jv_int(int64_t i);
JValue jv_float(double f);
JValue jv_str(JRender *r, const char *s, size_t n);
JValue jv_cstr(JRender *r, const char *s);
JValue jv_static_str(JStr *s);
JValue jv_undefined(JRender *r, const char *name, const char *owner);
JValue jv_undefined_hint(JRender *r, const char *hint);
JValue jv_list(JRender *r, size_t cap);
JValue jv_dict(JRender *r, size_t cap);
JValue jv_func(JRender *r, const char *name, JBuiltin fn, JValue self);
void jv_list_push(JRender *r, JList *l, JValue v);
void jv_dict_set(JRender *r, JDict *d, JValue key, JValue val);
JValue *jv_dict_get(const JDict *d, JValue key); /* NULL when absent */
JValue *jv_dict_get_str(const JDict *d, const char *key);
bool jv_truthy(JValue v);
bool jv_equal(JValue a, JValue b);
int jv_compare(JRender *r, JValue a, JValue b); /* <0, 0, >0; raises for unordered types */
const char *jv_type_name(JValue v);  /* Python's: "str", "int", "dict", ... */
const char *jv_owner_name(JValue v); /* Jinja2's: "str object", "None", ... */
_Noreturn void jv_raise_undefined(JRender *r, JValue u);
/* str() and repr() as Python writes them, appended to b. */
void jv_write_str(JRender *r, JBuf *b, JValue v);
void jv_write_repr(JRender *r, JBuf *b, JValue v);
JValue jv_to_str(JRender *r, JValue v); /* str(v) as a JT_STR */
void jbuf_put(JRender *r, JBuf *b, const char *s, size_t n);
void jbuf_puts(JRender *r, JBuf *b, const char *s);
JValue jbuf_value(JRender *r, const JBuf *b);
/* Items of an iterable (list, tuple, dict keys, string characters, iterator);
 * raises "'X' object is not iterable". Undefined iterates empty. */
JList *jv_iterate(JRender *r, JValue v);
int64_t jv_length(JRender *r, JValue v); /* len(); raises where Python does */
int64_t jv_as_int(JRender *r, JValue v, const char *what);
size_t jinja_utf8_count(const char *s, size_t n);
size_t jinja_utf8_offset(const char *s, size_t n, int64_t index); /* byte offset of the index-th character */

/* Python's json.dumps(v, ensure_ascii=False, indent, separators, sort_keys) (jinja_json.c). */
typedef struct JsonStyle {
    const char *indent;    /* NULL: none */
    const char *item_sep, *key_sep;
    bool sort_keys;
} JsonStyle;
void jinja_tojson(JRender *r, JBuf *b, JValue v, const JsonStyle *style);
void jinja_write_float(JBuf *b, JRender *r, double f, bool json);
JValue jinja_from_json(JRender *r, const void *json);

/* attribute and item access, calls (jinja_eval.c) */
JValue jinja_getattr(JRender *r, JValue obj, const char *name);
JValue jinja_getitem(JRender *r, JValue obj, JValue key);
JValue jinja_call(JRender *r, JValue callee, JArgs *a);

/* Python's operators (jinja_operators.c) */
JValue jinja_arith(JRender *r, BinOp op, JValue a, JValue b); /* not `and`/`or`: they short-circuit */
bool jinja_compare(JRender *r, CmpOp op, JValue a, JValue b);
JValue jinja_unary(JRender *r, bool negate, JValue a); /* -a, or +a */

/* filters and tests by name (jinja_filters.c): NULL when there is none */
typedef JValue (*JFilterFn)(JRender *r, JValue v, JArgs *a);
typedef bool (*JTestFn)(JRender *r, JValue v, JArgs *a);
JFilterFn jinja_filter(const char *name);
JTestFn jinja_test(const char *name);

/* methods of str/dict/list, and the globals (jinja_builtins.c) */
JValue jinja_method(JRender *r, JValue obj, const char *name); /* undefined when none */
void jinja_add_globals(JRender *r, Scope *s);
void scope_set(JRender *r, Scope *s, const char *name, JValue v);

/* arguments: the i-th positional or the named keyword, else dflt */
JValue jarg(JArgs *a, size_t i, const char *kw, JValue dflt);
void jargs_check(JRender *r, JArgs *a, size_t max_pos, const char *const *kw_allowed);

/* Python string helpers shared by filters and methods (jinja_builtins.c) */
JValue py_strip(JRender *r, JValue s, JValue chars, bool left, bool right);
JValue py_lower(JRender *r, JValue s);
JValue py_upper(JRender *r, JValue s);
JValue py_replace(JRender *r, JValue s, JValue old, JValue new_, int64_t count);
JValue py_splitlines_join(JRender *r, JValue s, const char *indent, bool first, bool blank);
bool py_isspace_cp(uint32_t cp);
JValue py_percent_format(JRender *r, JValue fmt, JValue args); /* fmt % args (jinja_format.c) */
JValue py_str_format(JRender *r, JValue fmt, JArgs *a);        /* fmt.format(...) (jinja_format.c) */
const JStr *jinja_need_str(JRender *r, JValue v, const char *what); /* v, or raise: it must be a str */
void jinja_put_cp(JRender *r, JBuf *b, uint32_t cp);                /* one code point as UTF-8 */
JValue jinja_str_method(JRender *r, JValue s, const char *name); /* a bound str method, or undefined */
uint32_t jinja_utf8_next(const char *s, size_t n, size_t *i);

#endif
