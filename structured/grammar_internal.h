/*
 * grammar_internal.h - the builder's expressions and the compiled automata,
 * shared by grammar.c (builder), grammar_compile.c (automata),
 * grammar_stack.c (the stacks a matcher walks) and token_matcher.c.
 *
 * Compiled form: every rule is a DFA; all rules' states share one numbering.
 * A state has byte transitions (through byte classes: maximal byte
 * intervals no grammar edge splits), calls (enter a rule, continue at a
 * return state when it completes) and may be final (the rule can end).
 * Every state left after compilation can reach a final state, and every
 * called rule can complete, so any stack of states a matcher holds can
 * still be finished.
 */
#ifndef NANOVLLM_GRAMMAR_INTERNAL_H
#define NANOVLLM_GRAMMAR_INTERNAL_H

#include <stdint.h>

#include "grammar.h"

typedef enum ExprKind { E_EMPTY, E_NOTHING, E_BYTES, E_RANGE, E_SEQ, E_ALT, E_REPEAT, E_REF } ExprKind;

typedef struct Expr {
    uint8_t kind;
    uint8_t lo, hi; /* E_RANGE */
    int32_t a;      /* E_BYTES: offset in bytes; E_SEQ/E_ALT: offset in children; E_REPEAT: child; E_REF: rule */
    int32_t n;      /* E_BYTES: length; E_SEQ/E_ALT: count */
    int32_t min, max;
} Expr;

typedef struct GRule {
    char *name;
    GExpr body; /* G_ERROR while undefined */
} GRule;

struct Grammar {
    Expr *exprs;
    int32_t num_exprs, cap_exprs;
    uint8_t *bytes;
    int32_t num_bytes, cap_bytes;
    int32_t *children;
    int32_t num_children, cap_children;
    GRule *rules;
    int32_t num_rules, cap_rules;
    int32_t *rule_index; /* open addressing on names: rule + 1, 0 empty */
    int32_t rule_index_cap;
    int root;
    int fresh_counter;
    Error error;
    int failed;
};

enum {
    GS_FINAL = 1,     /* the rule may end here */
    GS_BYTES = 2,     /* some byte moves on */
    GS_CALLS = 4,     /* some rule may be entered */
};

typedef struct GCall {
    int32_t callee_start; /* first state of the called rule */
    int32_t return_state; /* where this rule goes on when the callee completes */
} GCall;

struct CompiledGrammar {
    int num_classes;
    uint8_t byte_class[256];
    int num_states;
    int32_t *next;        /* [num_states * num_classes]: state, or -1 */
    uint8_t *flags;       /* [num_states] GS_* */
    int32_t *call_offset; /* [num_states + 1] into calls */
    GCall *calls;
    int num_rules;
    int32_t *rule_start; /* [num_rules] */
    int root_start;
    size_t bytes;
};

static inline int32_t cg_next(const CompiledGrammar *cg, int32_t state, uint8_t byte) {
    return cg->next[(size_t)state * (size_t)cg->num_classes + cg->byte_class[byte]];
}

/* ---- stacks (grammar_stack.c) -------------------------------------------- */

/*
 * A matcher's position is a set of stacks of states; a stack is a node
 * (its top state) whose parent is the stack below. Nodes are hash-consed in
 * a pool, so equal stacks are the same node id and a set is a list of ids.
 * The parent of a bottom frame is STACK_ROOT (the whole text may end when
 * it completes) or STACK_UNKNOWN (precomputation: what lies below is not
 * known yet).
 */
#define STACK_ROOT (-1)
#define STACK_UNKNOWN (-2)

typedef struct StackNode {
    int32_t state, parent;
    int32_t chain; /* next node in the same hash bucket */
    uint32_t mark; /* == pool epoch: visited in the current expansion */
} StackNode;

typedef struct StackPool {
    const CompiledGrammar *cg;
    StackNode *nodes;
    int32_t num_nodes, cap_nodes;
    int32_t *buckets; /* node + 1, 0 empty; power of two */
    int32_t num_buckets;
    uint32_t epoch;
    int32_t *work; /* expansion worklist */
    int32_t cap_work;
    int32_t max_nodes;
} StackPool;

/* A set of stacks whose tops all have byte transitions, plus what the
 * expansion met: the whole text can end, or (precomputation) a pop past an
 * unknown bottom. */
typedef struct StackSet {
    int32_t *ids;
    int32_t n, cap;
    bool can_end, hit_unknown;
    bool advanced; /* stack_advance: some stack read the byte (its result may have no byte-reading top) */
} StackSet;

int stack_pool_init(StackPool *p, const CompiledGrammar *cg, int32_t max_nodes, Error *err);
void stack_pool_free(StackPool *p);
/* The node (state, parent), made if new; -1 when out of memory or over max_nodes. */
int32_t stack_node(StackPool *p, int32_t state, int32_t parent);
/* Forgets every node made after the pool had `keep` nodes (they must not
 * be referenced any more). */
void stack_pool_truncate(StackPool *p, int32_t keep);

void stack_set_clear(StackSet *s);
void stack_set_free(StackSet *s);
/* Starts an expansion round: nodes added with stack_expand until the next
 * begin are deduplicated. */
void stack_round_begin(StackPool *p);
/* Adds to out every stack reachable from node without reading a byte
 * (entering rules, leaving finished ones). -1 on a limit or out of memory. */
int stack_expand(StackPool *p, int32_t node, StackSet *out);
/* out = the stacks of in after reading byte (in and out distinct). */
int stack_advance(StackPool *p, const StackSet *in, uint8_t byte, StackSet *out);
/* The initial set of a grammar whose bottom is `bottom` (STACK_ROOT). */
int stack_start(StackPool *p, int32_t state, int32_t bottom, StackSet *out);

#endif
