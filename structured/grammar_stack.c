/*
 * grammar_stack.c - the stacks of a pushdown matcher over a compiled
 * grammar: hash-consed nodes, expansion (enter rules, leave finished ones,
 * until every stack's top reads a byte) and advancing by one byte. The
 * byte-level match for tests lives here too; token_matcher.c builds token
 * masks on the same calls.
 */
#include "grammar_internal.h"

#include <stdlib.h>
#include <string.h>

static uint32_t node_hash(int32_t state, int32_t parent) {
    uint64_t h = ((uint64_t)(uint32_t)state << 32 | (uint32_t)parent) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

int stack_pool_init(StackPool *p, const CompiledGrammar *cg, int32_t max_nodes, Error *err) {
    memset(p, 0, sizeof *p);
    p->cg = cg;
    p->max_nodes = max_nodes;
    p->num_buckets = 1024;
    p->buckets = calloc((size_t)p->num_buckets, sizeof *p->buckets);
    if (!p->buckets) return error_set(err, "out of memory for a grammar matcher");
    return 0;
}

void stack_pool_free(StackPool *p) {
    free(p->nodes);
    free(p->buckets);
    free(p->work);
    memset(p, 0, sizeof *p);
}

static int rehash(StackPool *p) {
    int32_t nb = p->num_buckets * 2;
    int32_t *b = calloc((size_t)nb, sizeof *b);
    if (!b) return -1;
    /* Oldest first, so every chain stays in decreasing node order (truncate relies on it). */
    for (int32_t i = 0; i < p->num_nodes; i++) {
        uint32_t k = node_hash(p->nodes[i].state, p->nodes[i].parent) & (uint32_t)(nb - 1);
        p->nodes[i].chain = b[k] - 1;
        b[k] = i + 1;
    }
    free(p->buckets);
    p->buckets = b;
    p->num_buckets = nb;
    return 0;
}

int32_t stack_node(StackPool *p, int32_t state, int32_t parent) {
    uint32_t k = node_hash(state, parent) & (uint32_t)(p->num_buckets - 1);
    for (int32_t i = p->buckets[k] - 1; i >= 0; i = p->nodes[i].chain)
        if (p->nodes[i].state == state && p->nodes[i].parent == parent) return i;
    if (p->num_nodes >= p->max_nodes) return -1;
    if (p->num_nodes == p->cap_nodes) {
        int32_t cap = p->cap_nodes ? p->cap_nodes * 2 : 256;
        StackNode *n = realloc(p->nodes, (size_t)cap * sizeof *n);
        if (!n) return -1;
        p->nodes = n;
        p->cap_nodes = cap;
    }
    int32_t id = p->num_nodes++;
    p->nodes[id] = (StackNode){state, parent, p->buckets[k] - 1, 0};
    p->buckets[k] = id + 1;
    if (p->num_nodes > p->num_buckets && rehash(p) < 0) {
        p->num_nodes--;
        p->buckets[k] = p->nodes[id].chain + 1;
        return -1;
    }
    return id;
}

void stack_pool_truncate(StackPool *p, int32_t keep) {
    /* Newer nodes sit at the heads of their chains: unlink from the newest down. */
    for (int32_t i = p->num_nodes - 1; i >= keep; i--) {
        uint32_t k = node_hash(p->nodes[i].state, p->nodes[i].parent) & (uint32_t)(p->num_buckets - 1);
        p->buckets[k] = p->nodes[i].chain + 1;
    }
    if (keep < p->num_nodes) p->num_nodes = keep;
}

void stack_set_clear(StackSet *s) {
    s->n = 0;
    s->can_end = s->hit_unknown = s->advanced = false;
}

void stack_set_free(StackSet *s) {
    free(s->ids);
    memset(s, 0, sizeof *s);
}

static int set_push(StackSet *s, int32_t id) {
    if (s->n == s->cap) {
        int32_t cap = s->cap ? s->cap * 2 : 16;
        int32_t *ids = realloc(s->ids, (size_t)cap * sizeof *ids);
        if (!ids) return -1;
        s->ids = ids;
        s->cap = cap;
    }
    s->ids[s->n++] = id;
    return 0;
}

void stack_round_begin(StackPool *p) {
    if (++p->epoch == 0) { /* wrapped: forget every old mark */
        for (int32_t i = 0; i < p->num_nodes; i++) p->nodes[i].mark = 0;
        p->epoch = 1;
    }
}

static int work_push(StackPool *p, int32_t *top, int32_t id) {
    if (*top == p->cap_work) {
        int32_t cap = p->cap_work ? p->cap_work * 2 : 64;
        int32_t *w = realloc(p->work, (size_t)cap * sizeof *w);
        if (!w) return -1;
        p->work = w;
        p->cap_work = cap;
    }
    p->work[(*top)++] = id;
    return 0;
}

int stack_expand(StackPool *p, int32_t node, StackSet *out) {
    const CompiledGrammar *cg = p->cg;
    int32_t top = 0;
    if (work_push(p, &top, node) < 0) return -1;
    while (top) {
        int32_t n = p->work[--top];
        if (p->nodes[n].mark == p->epoch) continue;
        p->nodes[n].mark = p->epoch;
        int32_t state = p->nodes[n].state, parent = p->nodes[n].parent;
        uint8_t f = cg->flags[state];
        if ((f & GS_BYTES) && set_push(out, n) < 0) return -1;
        if (f & GS_CALLS) {
            for (int32_t k = cg->call_offset[state]; k < cg->call_offset[state + 1]; k++) {
                int32_t ret = stack_node(p, cg->calls[k].return_state, parent);
                if (ret < 0) return -1;
                int32_t callee = stack_node(p, cg->calls[k].callee_start, ret);
                if (callee < 0 || work_push(p, &top, callee) < 0) return -1;
            }
        }
        if (f & GS_FINAL) {
            if (parent == STACK_ROOT) out->can_end = true;
            else if (parent == STACK_UNKNOWN) out->hit_unknown = true;
            else if (work_push(p, &top, parent) < 0) return -1;
        }
    }
    return 0;
}

int stack_advance(StackPool *p, const StackSet *in, uint8_t byte, StackSet *out) {
    stack_set_clear(out);
    /* The common case - one stack, moving inside its rule - without an expansion round. */
    if (in->n == 1) {
        const StackNode *n = &p->nodes[in->ids[0]];
        int32_t next = cg_next(p->cg, n->state, byte);
        if (next < 0) return 0;
        if (p->cg->flags[next] == GS_BYTES) {
            int32_t id = stack_node(p, next, n->parent);
            if (id < 0 || set_push(out, id) < 0) return -1;
            out->advanced = true;
            return 0;
        }
    }
    stack_round_begin(p);
    for (int32_t i = 0; i < in->n; i++) {
        const StackNode *n = &p->nodes[in->ids[i]];
        int32_t next = cg_next(p->cg, n->state, byte);
        if (next < 0) continue;
        out->advanced = true;
        int32_t id = stack_node(p, next, p->nodes[in->ids[i]].parent);
        if (id < 0 || stack_expand(p, id, out) < 0) return -1;
    }
    return 0;
}

int stack_start(StackPool *p, int32_t state, int32_t bottom, StackSet *out) {
    stack_set_clear(out);
    stack_round_begin(p);
    int32_t id = stack_node(p, state, bottom);
    if (id < 0) return -1;
    return stack_expand(p, id, out);
}

int compiled_grammar_match(const CompiledGrammar *cg, const void *text, size_t len, bool *viable_prefix) {
    StackPool pool;
    StackSet a = {0}, b = {0};
    int result = 0;
    bool viable = false;
    if (stack_pool_init(&pool, cg, 1 << 24, NULL) < 0) goto out;
    if (stack_start(&pool, cg->root_start, STACK_ROOT, &a) < 0) goto out;
    const uint8_t *t = text;
    for (size_t i = 0; i < len; i++) {
        if (stack_advance(&pool, &a, t[i], &b) < 0) goto out;
        StackSet tmp = a;
        a = b;
        b = tmp;
        if (!a.n && !a.can_end) goto out;
    }
    viable = true;
    result = a.can_end;
out:
    if (viable_prefix) *viable_prefix = viable;
    stack_set_free(&a);
    stack_set_free(&b);
    stack_pool_free(&pool);
    return result;
}
