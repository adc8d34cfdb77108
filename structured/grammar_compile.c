/*
 * grammar_compile.c - rules into automata (grammar_internal.h).
 *
 * Each rule's expression becomes a Thompson NFA whose edges read a byte
 * range or call a rule, then a DFA by subset construction (a call is a
 * symbol like a byte class, so one state calls each rule at most once).
 * Then the checks that make matching safe: rules that can never complete
 * are cut out (and the root must complete), states that cannot reach an
 * end lose their incoming edges, and left recursion - a rule that can
 * re-enter itself without reading a byte, which would need an infinite
 * stack - is refused.
 */
#include "grammar_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_NFA_STATES (1 << 21)
#define MAX_DFA_STATES (1 << 16)
#define MAX_BUILD_DEPTH 2000
#define MAX_COMPILE_SECONDS 5.0 /* of CPU time: a grammar that needs longer is refused, not waited for */

enum { N_EPS, N_RANGE, N_CALL };

typedef struct NEdge {
    uint8_t kind, lo, hi;
    int32_t to, rule, next;
} NEdge;

typedef struct Nfa {
    int32_t *first; /* [states] first edge */
    int32_t num_states, cap_states;
    NEdge *edges;
    int32_t num_edges, cap_edges;
} Nfa;

typedef struct Build {
    const Grammar *g;
    Error *err;
    Nfa nfa;
    const uint8_t *class_of; /* byte -> class */
    int num_classes;
    /* DFA under construction, all rules */
    int32_t *next;
    uint8_t *flags;
    int32_t *call_offset;
    GCall *calls;
    int32_t num_states, cap_states, num_calls, cap_calls;
    int32_t *call_rule; /* [calls] callee rule, until starts are known */
    int32_t cap_call_rule;
    double deadline;
} Build;

/* CPU time of this thread: a busy machine slows a compile, it must not make
 * a grammar that fits the budget fail. */
static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Checked once per pass or per batch of states: the passes are linear, but a
 * hostile grammar (a repetition count of thousands) makes many of them. */
static int past_deadline(Build *b) {
    if (now_seconds() <= b->deadline) return 0;
    return error_set_kind(b->err, ERROR_INVALID, "the grammar is too large: compiling it takes over %.0f s of CPU time",
                          MAX_COMPILE_SECONDS);
}

static int grow_array(Build *b, void **p, int32_t *cap, int32_t need, size_t elem, int32_t limit, const char *what) {
    if (need <= *cap) return 0;
    if (need > limit) return error_set_kind(b->err, ERROR_INVALID, "the grammar is too large (over %d %s)", limit, what);
    int32_t c = *cap ? *cap : 256;
    while (c < need) c = c > limit / 2 ? limit : c * 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return error_set(b->err, "out of memory compiling a grammar");
    *p = q;
    *cap = c;
    return 0;
}

/* ---- NFA ------------------------------------------------------------------ */

static int32_t nfa_state(Build *b) {
    Nfa *n = &b->nfa;
    if (grow_array(b, (void **)&n->first, &n->cap_states, n->num_states + 1, sizeof(int32_t), MAX_NFA_STATES,
                   "automaton states") < 0)
        return -1;
    n->first[n->num_states] = -1;
    return n->num_states++;
}

static int nfa_edge(Build *b, int32_t from, uint8_t kind, uint8_t lo, uint8_t hi, int32_t to, int32_t rule) {
    Nfa *n = &b->nfa;
    if (grow_array(b, (void **)&n->edges, &n->cap_edges, n->num_edges + 1, sizeof(NEdge), MAX_NFA_STATES * 2,
                   "automaton edges") < 0)
        return -1;
    n->edges[n->num_edges] = (NEdge){kind, lo, hi, to, rule, n->first[from]};
    n->first[from] = n->num_edges++;
    return 0;
}

/* Builds e between a new state *start and a new state *end. */
static int build_expr(Build *b, GExpr e, int32_t *start, int32_t *end, int depth) {
    const Grammar *g = b->g;
    if (depth > MAX_BUILD_DEPTH) return error_set_kind(b->err, ERROR_INVALID, "the grammar is nested too deeply");
    const Expr *x = &g->exprs[e];
    int32_t s = nfa_state(b);
    if (s < 0) return -1;
    *start = s;
    switch (x->kind) {
    case E_EMPTY:
        *end = s;
        return 0;
    case E_NOTHING:
        return (*end = nfa_state(b)) < 0 ? -1 : 0;
    case E_RANGE:
        if ((*end = nfa_state(b)) < 0) return -1;
        return nfa_edge(b, s, N_RANGE, x->lo, x->hi, *end, -1);
    case E_REF:
        if ((*end = nfa_state(b)) < 0) return -1;
        return nfa_edge(b, s, N_CALL, 0, 0, *end, x->a);
    case E_BYTES: {
        int32_t cur = s;
        for (int i = 0; i < x->n; i++) {
            int32_t t = nfa_state(b);
            uint8_t c = g->bytes[x->a + i];
            if (t < 0 || nfa_edge(b, cur, N_RANGE, c, c, t, -1) < 0) return -1;
            cur = t;
        }
        *end = cur;
        return 0;
    }
    case E_SEQ: {
        int32_t cur = s;
        for (int i = 0; i < x->n; i++) {
            int32_t cs, ce;
            if (build_expr(b, g->children[x->a + i], &cs, &ce, depth + 1) < 0) return -1;
            if (nfa_edge(b, cur, N_EPS, 0, 0, cs, -1) < 0) return -1;
            cur = ce;
        }
        *end = cur;
        return 0;
    }
    case E_ALT: {
        if ((*end = nfa_state(b)) < 0) return -1;
        for (int i = 0; i < x->n; i++) {
            int32_t cs, ce;
            if (build_expr(b, g->children[x->a + i], &cs, &ce, depth + 1) < 0) return -1;
            if (nfa_edge(b, s, N_EPS, 0, 0, cs, -1) < 0 || nfa_edge(b, ce, N_EPS, 0, 0, *end, -1) < 0) return -1;
        }
        return 0;
    }
    case E_REPEAT: {
        int32_t cur = s;
        for (int i = 0; i < x->min; i++) {
            int32_t cs, ce;
            if (build_expr(b, x->a, &cs, &ce, depth + 1) < 0) return -1;
            if (nfa_edge(b, cur, N_EPS, 0, 0, cs, -1) < 0) return -1;
            cur = ce;
        }
        if (x->max == G_UNBOUNDED) {
            int32_t cs, ce;
            if (build_expr(b, x->a, &cs, &ce, depth + 1) < 0) return -1;
            if (nfa_edge(b, cur, N_EPS, 0, 0, cs, -1) < 0 || nfa_edge(b, ce, N_EPS, 0, 0, cur, -1) < 0) return -1;
            *end = cur;
            return 0;
        }
        int32_t fin = nfa_state(b);
        if (fin < 0) return -1;
        for (int i = x->min; i < x->max; i++) {
            int32_t cs, ce;
            if (nfa_edge(b, cur, N_EPS, 0, 0, fin, -1) < 0) return -1;
            if (build_expr(b, x->a, &cs, &ce, depth + 1) < 0) return -1;
            if (nfa_edge(b, cur, N_EPS, 0, 0, cs, -1) < 0) return -1;
            cur = ce;
        }
        if (nfa_edge(b, cur, N_EPS, 0, 0, fin, -1) < 0) return -1;
        *end = fin;
        return 0;
    }
    }
    return error_set(b->err, "grammar: unknown expression kind %d", x->kind);
}

/* ---- byte classes --------------------------------------------------------- */

static int byte_classes(const Grammar *g, uint8_t class_of[256]) {
    uint8_t cut[257] = {0}; /* cut[i]: a class starts at byte i */
    cut[0] = 1;
    for (int32_t i = 0; i < g->num_exprs; i++) {
        const Expr *x = &g->exprs[i];
        if (x->kind == E_RANGE) {
            cut[x->lo] = 1;
            cut[x->hi + 1] = 1;
        } else if (x->kind == E_BYTES) {
            for (int k = 0; k < x->n; k++) {
                uint8_t c = g->bytes[x->a + k];
                cut[c] = 1;
                cut[c + 1] = 1;
            }
        }
    }
    int c = -1;
    for (int i = 0; i < 256; i++) {
        if (cut[i]) c++;
        class_of[i] = (uint8_t)c;
    }
    return c + 1;
}

/* ---- subset construction --------------------------------------------------- */

typedef struct Subsets {
    int32_t *items; /* all sets, concatenated */
    int64_t num_items, cap_items;
    int64_t *offset; /* [num + 1] */
    int32_t num, cap;
    int32_t *table; /* hash -> set + 1 */
    int32_t table_cap;
} Subsets;

static uint64_t set_hash(const int32_t *s, int32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)s[i]) * 1099511628211ull;
    return h;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* The id of the (sorted) set, added if new; *added tells. */
static int32_t subset_intern(Build *b, Subsets *s, const int32_t *set, int32_t n, bool *added) {
    *added = false;
    if (s->num * 2 + 2 >= s->table_cap) {
        int32_t cap = s->table_cap ? s->table_cap * 2 : 1024;
        int32_t *t = calloc((size_t)cap, sizeof *t);
        if (!t) return error_set(b->err, "out of memory compiling a grammar");
        for (int32_t i = 0; i < s->num; i++) {
            uint64_t h = set_hash(s->items + s->offset[i], (int32_t)(s->offset[i + 1] - s->offset[i]));
            uint32_t k = (uint32_t)h & (uint32_t)(cap - 1);
            while (t[k]) k = (k + 1) & (uint32_t)(cap - 1);
            t[k] = i + 1;
        }
        free(s->table);
        s->table = t;
        s->table_cap = cap;
    }
    uint32_t k = (uint32_t)set_hash(set, n) & (uint32_t)(s->table_cap - 1);
    for (; s->table[k]; k = (k + 1) & (uint32_t)(s->table_cap - 1)) {
        int32_t id = s->table[k] - 1;
        int64_t len = s->offset[id + 1] - s->offset[id];
        if (len == n && memcmp(s->items + s->offset[id], set, (size_t)n * sizeof *set) == 0) return id;
    }
    if (s->num + 2 > s->cap) {
        int32_t cap = s->cap ? s->cap * 2 : 256;
        int64_t *o = realloc(s->offset, ((size_t)cap + 1) * sizeof *o);
        if (!o) return error_set(b->err, "out of memory compiling a grammar");
        s->offset = o;
        s->cap = cap;
        if (s->num == 0) s->offset[0] = 0;
    }
    if (s->num_items + n > s->cap_items) {
        int64_t cap = s->cap_items ? s->cap_items * 2 : 4096;
        while (cap < s->num_items + n) cap *= 2;
        if (cap > (int64_t)1 << 28) return error_set_kind(b->err, ERROR_INVALID, "the grammar is too large to compile");
        int32_t *p = realloc(s->items, (size_t)cap * sizeof *p);
        if (!p) return error_set(b->err, "out of memory compiling a grammar");
        s->items = p;
        s->cap_items = cap;
    }
    memcpy(s->items + s->num_items, set, (size_t)n * sizeof *set);
    s->num_items += n;
    s->offset[s->num + 1] = s->num_items;
    s->table[k] = s->num + 1;
    *added = true;
    return s->num++;
}

typedef struct Scratch {
    int32_t *stack, *set, *mark;
    uint32_t epoch;
    int32_t **bucket; /* per class: targets */
    int32_t *bucket_n, *bucket_cap;
    int32_t *call_targets; /* pairs (rule, target) */
    int32_t num_call_targets, cap_call_targets;
} Scratch;

/* Epsilon closure of the n states in set, written back sorted into set; returns its size. */
static int32_t closure(Build *b, Scratch *sc, int32_t *set, int32_t n) {
    sc->epoch++;
    int32_t top = 0, out = 0;
    for (int32_t i = 0; i < n; i++)
        if (sc->mark[set[i]] != (int32_t)sc->epoch) sc->mark[set[i]] = (int32_t)sc->epoch, sc->stack[top++] = set[i];
    while (top) {
        int32_t s = sc->stack[--top];
        set[out++] = s;
        for (int32_t e = b->nfa.first[s]; e >= 0; e = b->nfa.edges[e].next) {
            const NEdge *ed = &b->nfa.edges[e];
            if (ed->kind == N_EPS && sc->mark[ed->to] != (int32_t)sc->epoch) {
                sc->mark[ed->to] = (int32_t)sc->epoch;
                sc->stack[top++] = ed->to;
            }
        }
    }
    qsort(set, (size_t)out, sizeof *set, cmp_i32);
    return out;
}

static int bucket_push(Build *b, Scratch *sc, int c, int32_t to) {
    if (sc->bucket_n[c] == sc->bucket_cap[c]) {
        int32_t cap = sc->bucket_cap[c] ? sc->bucket_cap[c] * 2 : 16;
        int32_t *p = realloc(sc->bucket[c], (size_t)cap * sizeof *p);
        if (!p) return error_set(b->err, "out of memory compiling a grammar");
        sc->bucket[c] = p;
        sc->bucket_cap[c] = cap;
    }
    sc->bucket[c][sc->bucket_n[c]++] = to;
    return 0;
}

static int dfa_add_state(Build *b) {
    int32_t old_cap = b->cap_states;
    if (grow_array(b, (void **)&b->flags, &b->cap_states, b->num_states + 1, 1, MAX_DFA_STATES, "automaton states") < 0)
        return -1;
    if (b->cap_states != old_cap) { /* the arrays beside flags grow with it, geometrically */
        int32_t *next = realloc(b->next, (size_t)b->cap_states * (size_t)b->num_classes * sizeof *next);
        if (next) b->next = next;
        int32_t *off = realloc(b->call_offset, ((size_t)b->cap_states + 2) * sizeof *off);
        if (off) b->call_offset = off;
        if (!next || !off) return error_set(b->err, "out of memory compiling a grammar");
    }
    if ((b->num_states & 255) == 255 && past_deadline(b) < 0) return -1;
    for (int c = 0; c < b->num_classes; c++) b->next[(size_t)b->num_states * (size_t)b->num_classes + c] = -1;
    b->flags[b->num_states] = 0;
    return b->num_states++;
}

static int cmp_pair(const void *a, const void *b) {
    const int32_t *x = a, *y = b;
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

/* Determinizes one rule's NFA (start, end); its states are appended to the
 * DFA. Returns the start state, or -1. */
static int32_t determinize(Build *b, Scratch *sc, int32_t nfa_start, int32_t nfa_end) {
    Subsets subsets = {0};
    int32_t first = b->num_states, result = -1;
    int32_t *set = sc->set;
    set[0] = nfa_start;
    int32_t n = closure(b, sc, set, 1);
    bool added;
    if (subset_intern(b, &subsets, set, n, &added) < 0 || dfa_add_state(b) < 0) goto done;
    for (int32_t d = 0; d < subsets.num; d++) {
        int32_t state = first + d;
        const int32_t *members = subsets.items + subsets.offset[d];
        int32_t count = (int32_t)(subsets.offset[d + 1] - subsets.offset[d]);
        sc->num_call_targets = 0;
        for (int c = 0; c < b->num_classes; c++) sc->bucket_n[c] = 0;
        for (int32_t i = 0; i < count; i++) {
            if (members[i] == nfa_end) b->flags[state] |= GS_FINAL;
            for (int32_t e = b->nfa.first[members[i]]; e >= 0; e = b->nfa.edges[e].next) {
                const NEdge *ed = &b->nfa.edges[e];
                if (ed->kind == N_RANGE) {
                    for (int c = b->class_of[ed->lo]; c <= b->class_of[ed->hi]; c++)
                        if (bucket_push(b, sc, c, ed->to) < 0) goto done;
                } else if (ed->kind == N_CALL) {
                    if (sc->num_call_targets + 1 > sc->cap_call_targets) {
                        int32_t cap = sc->cap_call_targets ? sc->cap_call_targets * 2 : 64;
                        int32_t *p = realloc(sc->call_targets, (size_t)cap * 2 * sizeof *p);
                        if (!p) {
                            error_set(b->err, "out of memory compiling a grammar");
                            goto done;
                        }
                        sc->call_targets = p;
                        sc->cap_call_targets = cap;
                    }
                    sc->call_targets[2 * sc->num_call_targets] = ed->rule;
                    sc->call_targets[2 * sc->num_call_targets + 1] = ed->to;
                    sc->num_call_targets++;
                }
            }
        }
        for (int c = 0; c < b->num_classes; c++) {
            if (!sc->bucket_n[c]) continue;
            memcpy(set, sc->bucket[c], (size_t)sc->bucket_n[c] * sizeof *set);
            int32_t m = closure(b, sc, set, sc->bucket_n[c]);
            int32_t id = subset_intern(b, &subsets, set, m, &added);
            if (id < 0 || (added && dfa_add_state(b) < 0)) goto done;
            b->next[(size_t)state * (size_t)b->num_classes + c] = first + id;
        }
        /* One call per callee: the union of its targets. */
        if (sc->num_call_targets > 1)
            qsort(sc->call_targets, (size_t)sc->num_call_targets, 2 * sizeof(int32_t), cmp_pair);
        for (int32_t i = 0; i < sc->num_call_targets;) {
            int32_t rule = sc->call_targets[2 * i], m = 0;
            for (; i < sc->num_call_targets && sc->call_targets[2 * i] == rule; i++)
                set[m++] = sc->call_targets[2 * i + 1];
            m = closure(b, sc, set, m);
            int32_t id = subset_intern(b, &subsets, set, m, &added);
            if (id < 0 || (added && dfa_add_state(b) < 0)) goto done;
            if (grow_array(b, (void **)&b->calls, &b->cap_calls, b->num_calls + 1, sizeof(GCall), MAX_DFA_STATES * 4,
                           "rule calls") < 0)
                goto done;
            if (b->num_calls == 0 || b->cap_calls != b->cap_call_rule) {
                int32_t *cr = realloc(b->call_rule, (size_t)b->cap_calls * sizeof *cr);
                if (!cr) {
                    error_set(b->err, "out of memory compiling a grammar");
                    goto done;
                }
                b->call_rule = cr;
                b->cap_call_rule = b->cap_calls;
            }
            b->call_rule[b->num_calls] = rule;
            b->calls[b->num_calls++] = (GCall){-1, first + id};
        }
        b->call_offset[state + 1] = b->num_calls;
    }
    result = first;
done:
    free(subsets.items);
    free(subsets.offset);
    free(subsets.table);
    return result;
}

/* ---- checks --------------------------------------------------------------- */

static const char *rule_name(const Build *b, int rule) { return b->g->rules[rule].name; }

/* Cuts what can never complete; refuses a root that cannot. */
static int prune(Build *b, CompiledGrammar *cg, const int32_t *state_rule) {
    int32_t ns = cg->num_states, nc = cg->num_classes;
    uint8_t *done = calloc((size_t)ns, 1);
    if (!done) return error_set(b->err, "out of memory compiling a grammar");
    for (bool changed = true; changed;) {
        changed = false;
        if (past_deadline(b) < 0) {
            free(done);
            return -1;
        }
        for (int32_t s = ns - 1; s >= 0; s--) {
            if (done[s]) continue;
            bool ok = cg->flags[s] & GS_FINAL;
            for (int c = 0; c < nc && !ok; c++) {
                int32_t t = cg->next[(size_t)s * (size_t)nc + c];
                ok = t >= 0 && done[t];
            }
            for (int32_t k = cg->call_offset[s]; k < cg->call_offset[s + 1] && !ok; k++)
                ok = done[cg->calls[k].callee_start] && done[cg->calls[k].return_state];
            if (ok) done[s] = 1, changed = true;
        }
    }
    int rc = 0;
    if (!done[cg->root_start]) {
        rc = error_set_kind(b->err, ERROR_INVALID, "the grammar accepts nothing (rule '%s' can never complete)",
                            rule_name(b, state_rule[cg->root_start]));
        goto out;
    }
    /* Keep only edges into states that can complete; compact the calls. */
    int32_t w = 0;
    for (int32_t s = 0; s < ns; s++) {
        uint8_t f = cg->flags[s] & GS_FINAL;
        for (int c = 0; c < nc; c++) {
            int32_t *t = &cg->next[(size_t)s * (size_t)nc + c];
            if (*t >= 0 && !done[*t]) *t = -1;
            if (*t >= 0) f |= GS_BYTES;
        }
        int32_t begin = cg->call_offset[s], end = cg->call_offset[s + 1];
        cg->call_offset[s] = w;
        for (int32_t k = begin; k < end; k++)
            if (done[cg->calls[k].callee_start] && done[cg->calls[k].return_state]) cg->calls[w++] = cg->calls[k];
        if (w > cg->call_offset[s]) f |= GS_CALLS;
        cg->flags[s] = done[s] ? f : 0;
    }
    cg->call_offset[ns] = w;
out:
    free(done);
    return rc;
}

/* Left recursion: rule A enters rule B before reading a byte (through rules
 * that may match nothing); a cycle of such entries has no finite stack. */
static int check_left_recursion(Build *b, const CompiledGrammar *cg, const int32_t *state_rule) {
    int32_t ns = cg->num_states;
    int nr = cg->num_rules;
    uint8_t *nullable_from = calloc((size_t)ns, 1), *nullable = calloc((size_t)nr, 1);
    uint8_t *color = calloc((size_t)nr, 1);
    int32_t *reach = malloc((size_t)ns * sizeof *reach), *seen = calloc((size_t)ns, sizeof *seen);
    int32_t *edges_first = malloc((size_t)nr * sizeof(int32_t)), *edge_next = NULL, *edge_to = NULL;
    int32_t num_edges = 0, cap_edges = 0, *dfs = malloc((size_t)nr * 2 * sizeof *dfs);
    int rc = -1;
    if (!nullable_from || !nullable || !color || !reach || !seen || !edges_first || !dfs) {
        error_set(b->err, "out of memory compiling a grammar");
        goto out;
    }
    for (bool changed = true; changed;) {
        changed = false;
        if (past_deadline(b) < 0) goto out;
        for (int32_t s = ns - 1; s >= 0; s--) {
            if (nullable_from[s]) continue;
            bool ok = cg->flags[s] & GS_FINAL;
            for (int32_t k = cg->call_offset[s]; k < cg->call_offset[s + 1] && !ok; k++)
                ok = nullable[state_rule[cg->calls[k].callee_start]] && nullable_from[cg->calls[k].return_state];
            if (ok) {
                nullable_from[s] = 1, changed = true;
                if (cg->rule_start[state_rule[s]] == s) nullable[state_rule[s]] = 1;
            }
        }
    }
    /* Entry edges: from each rule's start, through nullable callees. */
    for (int r = 0; r < nr; r++) {
        edges_first[r] = -1;
        int32_t top = 0;
        reach[top++] = cg->rule_start[r];
        seen[cg->rule_start[r]] = r + 1;
        while (top) {
            int32_t s = reach[--top];
            for (int32_t k = cg->call_offset[s]; k < cg->call_offset[s + 1]; k++) {
                int callee = state_rule[cg->calls[k].callee_start];
                if (grow_array(b, (void **)&edge_next, &cap_edges, num_edges + 1, sizeof(int32_t), MAX_DFA_STATES * 8,
                               "rule calls") < 0)
                    goto out;
                int32_t *to = realloc(edge_to, (size_t)cap_edges * sizeof *to);
                if (!to) {
                    error_set(b->err, "out of memory compiling a grammar");
                    goto out;
                }
                edge_to = to;
                edge_to[num_edges] = callee;
                edge_next[num_edges] = edges_first[r];
                edges_first[r] = num_edges++;
                int32_t ret = cg->calls[k].return_state;
                if (nullable[callee] && seen[ret] != r + 1) seen[ret] = r + 1, reach[top++] = ret;
            }
        }
    }
    /* Cycle search, iterative DFS over rules (color 1: on the path). */
    for (int r0 = 0; r0 < nr; r0++) {
        if (color[r0]) continue;
        int32_t top = 0;
        dfs[0] = r0, dfs[1] = edges_first[r0], top = 1, color[r0] = 1;
        while (top) {
            int32_t r = dfs[2 * (top - 1)], e = dfs[2 * (top - 1) + 1];
            if (e < 0) {
                color[r] = 2, top--;
                continue;
            }
            dfs[2 * (top - 1) + 1] = edge_next[e];
            int32_t to = edge_to[e];
            if (color[to] == 1) {
                error_set_kind(b->err, ERROR_INVALID, "the grammar is left-recursive: rule '%s' can reach itself without reading anything",
                               rule_name(b, to));
                goto out;
            }
            if (!color[to]) color[to] = 1, dfs[2 * top] = to, dfs[2 * top + 1] = edges_first[to], top++;
        }
    }
    rc = 0;
out:
    free(nullable_from), free(nullable), free(color), free(reach), free(seen);
    free(edges_first), free(edge_next), free(edge_to), free(dfs);
    return rc;
}

/* ---- minimization ------------------------------------------------------------ */

/* Moore's partition refinement over all states: two states are equivalent
 * when they agree on finality, on the block every byte class leads to and
 * on their calls (callee and return blocks). Fewer states, fewer masks to
 * precompute: bounded repetitions of UTF-8 characters shrink most. */
static int minimize(Build *b, CompiledGrammar *cg) {
    int32_t ns = cg->num_states, nc = cg->num_classes;
    int32_t *block = calloc((size_t)ns, sizeof *block), *nblock = malloc((size_t)ns * sizeof *nblock);
    int32_t *table = NULL, *rep = NULL, num_blocks = 1;
    int rc = -1;
    if (!block || !nblock) goto oom;
    for (int32_t s = 0; s < ns; s++) block[s] = cg->flags[s] & GS_FINAL ? 1 : 0;
    num_blocks = 0; /* unknown (every state may be final): refine at least twice */
    for (;;) {
        if (past_deadline(b) < 0) goto out;
        int32_t table_cap = 1;
        while (table_cap < ns * 2) table_cap *= 2;
        free(table);
        if (!(table = calloc((size_t)table_cap, sizeof *table))) goto oom;
        free(rep);
        if (!(rep = malloc((size_t)ns * sizeof *rep))) goto oom;
        int32_t count = 0;
        for (int32_t s = 0; s < ns; s++) {
            /* The signature's hash; candidates are compared in full with their representative. */
            uint64_t h = 1469598103934665603ull ^ (uint32_t)block[s];
            for (int c = 0; c < nc; c++) {
                int32_t t = cg->next[(size_t)s * (size_t)nc + c];
                h = (h ^ (uint32_t)(t < 0 ? -1 : block[t])) * 1099511628211ull;
            }
            for (int32_t k = cg->call_offset[s]; k < cg->call_offset[s + 1]; k++) {
                h = (h ^ (uint32_t)block[cg->calls[k].callee_start]) * 1099511628211ull;
                h = (h ^ (uint32_t)block[cg->calls[k].return_state]) * 1099511628211ull;
            }
            uint32_t slot = (uint32_t)h & (uint32_t)(table_cap - 1);
            int32_t found = -1;
            for (; table[slot]; slot = (slot + 1) & (uint32_t)(table_cap - 1)) {
                int32_t r = rep[table[slot] - 1];
                if (block[r] != block[s] || cg->call_offset[r + 1] - cg->call_offset[r] != cg->call_offset[s + 1] - cg->call_offset[s])
                    continue;
                bool same = true;
                for (int c = 0; c < nc && same; c++) {
                    int32_t tr = cg->next[(size_t)r * (size_t)nc + c], ts = cg->next[(size_t)s * (size_t)nc + c];
                    same = (tr < 0 ? -1 : block[tr]) == (ts < 0 ? -1 : block[ts]);
                }
                for (int32_t k = 0; same && k < cg->call_offset[s + 1] - cg->call_offset[s]; k++) {
                    const GCall *x = &cg->calls[cg->call_offset[r] + k], *y = &cg->calls[cg->call_offset[s] + k];
                    same = block[x->callee_start] == block[y->callee_start] && block[x->return_state] == block[y->return_state];
                }
                if (same) {
                    found = table[slot] - 1;
                    break;
                }
            }
            if (found < 0) {
                found = count;
                rep[count++] = s;
                table[slot] = found + 1;
            }
            nblock[s] = found;
        }
        int32_t *t = block;
        block = nblock;
        nblock = t;
        if (count == num_blocks) break;
        num_blocks = count;
    }
    /* Rebuild with one state per block, from each block's representative. */
    int32_t *next = malloc((size_t)num_blocks * (size_t)nc * sizeof *next);
    uint8_t *flags = malloc((size_t)num_blocks);
    int32_t *offset = malloc(((size_t)num_blocks + 1) * sizeof *offset);
    GCall *calls = malloc(((size_t)cg->call_offset[ns] + 1) * sizeof *calls);
    if (!next || !flags || !offset || !calls) {
        free(next), free(flags), free(offset), free(calls);
        goto oom;
    }
    int32_t w = 0;
    for (int32_t k = 0; k < num_blocks; k++) {
        int32_t r = rep[k];
        for (int c = 0; c < nc; c++) {
            int32_t t = cg->next[(size_t)r * (size_t)nc + c];
            next[(size_t)k * (size_t)nc + c] = t < 0 ? -1 : block[t];
        }
        flags[k] = cg->flags[r];
        offset[k] = w;
        for (int32_t j = cg->call_offset[r]; j < cg->call_offset[r + 1]; j++)
            calls[w++] = (GCall){block[cg->calls[j].callee_start], block[cg->calls[j].return_state]};
    }
    offset[num_blocks] = w;
    for (int r = 0; r < cg->num_rules; r++) cg->rule_start[r] = block[cg->rule_start[r]];
    cg->root_start = block[cg->root_start];
    free(cg->next), free(cg->flags), free(cg->call_offset), free(cg->calls);
    cg->next = next, cg->flags = flags, cg->call_offset = offset, cg->calls = calls, cg->num_states = num_blocks;
    rc = 0;
    goto out;
oom:
    rc = error_set(b->err, "out of memory compiling a grammar");
out:
    free(block), free(nblock), free(table), free(rep);
    return rc;
}

/* ---- compile -------------------------------------------------------------- */

CompiledGrammar *grammar_compile(const Grammar *g, Error *err) {
    if (g->failed) {
        error_set_kind(err, g->error.kind, "%s", g->error.msg);
        return NULL;
    }
    if (g->root < 0) {
        error_set_kind(err, ERROR_INVALID, "the grammar has no rules");
        return NULL;
    }
    for (int r = 0; r < g->num_rules; r++)
        if (g->rules[r].body < 0) {
            error_set_kind(err, ERROR_INVALID, "the grammar uses rule '%s' without defining it", g->rules[r].name);
            return NULL;
        }
    uint8_t class_of[256];
    Build b = {.g = g, .err = err, .class_of = class_of, .deadline = now_seconds() + MAX_COMPILE_SECONDS};
    b.num_classes = byte_classes(g, class_of);
    Scratch sc = {0};
    CompiledGrammar *cg = calloc(1, sizeof *cg);
    int32_t *rule_start = calloc((size_t)g->num_rules, sizeof *rule_start);
    int32_t *state_rule = NULL;
    int32_t *nfa_starts = malloc((size_t)g->num_rules * 2 * sizeof(int32_t));
    sc.bucket = calloc((size_t)b.num_classes, sizeof *sc.bucket);
    sc.bucket_n = calloc((size_t)b.num_classes, sizeof *sc.bucket_n);
    sc.bucket_cap = calloc((size_t)b.num_classes, sizeof *sc.bucket_cap);
    if (!cg || !rule_start || !nfa_starts || !sc.bucket || !sc.bucket_n || !sc.bucket_cap) {
        error_set(err, "out of memory compiling a grammar");
        goto fail;
    }
    for (int r = 0; r < g->num_rules; r++)
        if (build_expr(&b, g->rules[r].body, &nfa_starts[2 * r], &nfa_starts[2 * r + 1], 0) < 0) goto fail;
    /* A set may list a target once per edge into it before the closure dedupes. */
    sc.stack = malloc(((size_t)b.nfa.num_states + 1) * sizeof(int32_t));
    sc.set = malloc(((size_t)b.nfa.num_states + (size_t)b.nfa.num_edges + 1) * sizeof(int32_t));
    sc.mark = calloc((size_t)b.nfa.num_states, sizeof(int32_t));
    if (!sc.stack || !sc.set || !sc.mark) {
        error_set(err, "out of memory compiling a grammar");
        goto fail;
    }
    if (!(b.call_offset = malloc(sizeof(int32_t)))) {
        error_set(err, "out of memory compiling a grammar");
        goto fail;
    }
    b.call_offset[0] = 0;
    for (int r = 0; r < g->num_rules; r++) {
        int32_t first = b.num_states;
        if ((rule_start[r] = determinize(&b, &sc, nfa_starts[2 * r], nfa_starts[2 * r + 1])) < 0) goto fail;
        int32_t *sr = realloc(state_rule, (size_t)b.num_states * sizeof *sr);
        if (!sr) {
            error_set(err, "out of memory compiling a grammar");
            goto fail;
        }
        state_rule = sr;
        for (int32_t s = first; s < b.num_states; s++) state_rule[s] = r;
    }
    for (int32_t k = 0; k < b.num_calls; k++) b.calls[k].callee_start = rule_start[b.call_rule[k]];
    *cg = (CompiledGrammar){.num_classes = b.num_classes, .num_states = b.num_states, .next = b.next,
                            .flags = b.flags, .call_offset = b.call_offset, .calls = b.calls,
                            .num_rules = g->num_rules, .rule_start = rule_start, .root_start = rule_start[g->root]};
    memcpy(cg->byte_class, class_of, 256);
    b.next = NULL, b.flags = NULL, b.call_offset = NULL, b.calls = NULL, rule_start = NULL;
    if (prune(&b, cg, state_rule) < 0 || check_left_recursion(&b, cg, state_rule) < 0 || minimize(&b, cg) < 0) goto fail;
    cg->bytes = sizeof *cg + (size_t)cg->num_states * ((size_t)cg->num_classes * 4 + 1 + 4) +
                (size_t)(cg->call_offset[cg->num_states]) * sizeof(GCall) + (size_t)cg->num_rules * 4;
    goto out;
fail:
    compiled_grammar_free(cg);
    cg = NULL;
out:
    free(b.nfa.first), free(b.nfa.edges), free(b.next), free(b.flags), free(b.call_offset), free(b.calls);
    free(b.call_rule), free(rule_start), free(state_rule), free(nfa_starts);
    for (int c = 0; sc.bucket && c < b.num_classes; c++) free(sc.bucket[c]);
    free(sc.bucket), free(sc.bucket_n), free(sc.bucket_cap), free(sc.stack), free(sc.set), free(sc.mark);
    free(sc.call_targets);
    return cg;
}

void compiled_grammar_free(CompiledGrammar *cg) {
    if (!cg) return;
    free(cg->next), free(cg->flags), free(cg->call_offset), free(cg->calls), free(cg->rule_start);
    free(cg);
}

int compiled_grammar_num_states(const CompiledGrammar *cg) { return cg->num_states; }
