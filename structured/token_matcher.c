/*
 * token_matcher.c - token masks from a compiled grammar (token_matcher.h).
 *
 * Precomputation walks the vocabulary, sorted by bytes so tokens sharing a
 * prefix share the walk, once per automaton state whose top reads bytes,
 * with the stack below unknown. A token is then
 *  - accepted: some path reads all its bytes inside what the state knows;
 *  - uncertain: the state's rule may finish after k < len bytes (recorded
 *    per token), leaving the rest for whatever lies below;
 *  - rejected: neither.
 * At run time the matcher's stacks are expanded so every top reads bytes;
 * each top contributes its accepted set, and its uncertain tokens are
 * checked by reading their remaining bytes from the stack below. Finishing
 * a rule before reading anything is not "uncertain": the expansion already
 * holds the stack below as a top of its own.
 */
#include "token_matcher.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar_internal.h"

#define MAX_NODES_PRECOMPUTE (1 << 22)
#define MAX_NODES_MATCHER (1 << 22)
#define COMPACT_AFTER (1 << 15)
/* Parse stacks a matcher may hold at once: each costs a mask OR per step, so
 * an ambiguous grammar that multiplies them is refused, not waited for. */
#define MAX_LIVE_STACKS 128
/* Bytes read checking uncertain tokens in one mask: a bound on one step's
 * work whatever the grammar (typical steps read a few thousand). */
#define MAX_MASK_BYTES_READ (1 << 18)
#define MAX_PRECOMPUTE_SECONDS 10.0 /* of CPU time: a constraint that needs longer is refused */

struct TokenVocab {
    int size;
    int num_sorted;
    int32_t *sorted;  /* ids with bytes, by bytes */
    uint32_t *lcp;    /* [num_sorted]: common prefix with the previous one */
    uint32_t *offset; /* [size]: into storage */
    uint32_t *len;    /* [size] */
    uint8_t *storage;
    int max_len;
    int32_t first_index[257]; /* sorted[first_index[b]...] are the tokens starting with byte b */
};

typedef struct StateTokens {
    int32_t accepted, num_accepted; /* ids offset, or bitset word offset when bitset */
    bool bitset;
    int32_t unc_begin, unc_end;
} StateTokens;

typedef struct Uncertain {
    int32_t token;
    int32_t off_begin, off_count; /* into offsets: where the state's rule may finish */
} Uncertain;

struct TokenGrammar {
    CompiledGrammar *cg;
    const TokenVocab *v;
    StateTokens *states;
    int32_t *ids;
    int64_t num_ids, cap_ids;
    uint32_t *bitsets;
    int64_t num_bitset_words, cap_bitset_words;
    Uncertain *unc;
    int64_t num_unc, cap_unc;
    uint16_t *offsets;
    int64_t num_offsets, cap_offsets;
    size_t bytes;
};

struct TokenMatcher {
    const TokenGrammar *tg;
    StackPool pool;
    StackSet cur, base, a, b;
    bool ended;
    int32_t compacted_at; /* pool size after the last compaction */
};

/* ---- vocabulary ------------------------------------------------------------ */

static inline const uint8_t *token_bytes(const TokenVocab *v, int32_t id) { return v->storage + v->offset[id]; }

static int cmp_token(const void *x, const void *y, void *vocab) {
    const TokenVocab *v = vocab;
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    uint32_t la = v->len[a], lb = v->len[b];
    int c = memcmp(v->storage + v->offset[a], v->storage + v->offset[b], la < lb ? la : lb);
    if (c) return c;
    return la != lb ? (la < lb ? -1 : 1) : (a < b ? -1 : a > b);
}

static TokenVocab *vocab_build(int size, const char *const *bytes, const size_t *lens, Error *err) {
    TokenVocab *v = calloc(1, sizeof *v);
    size_t total = 0;
    for (int i = 0; i < size; i++) total += lens[i];
    if (!v || !(v->offset = calloc((size_t)size, sizeof *v->offset)) || !(v->len = calloc((size_t)size, sizeof *v->len)) ||
        !(v->sorted = malloc((size_t)size * sizeof *v->sorted)) || !(v->lcp = calloc((size_t)size + 1, sizeof *v->lcp)) ||
        !(v->storage = malloc(total + 1))) {
        token_vocab_free(v);
        error_set(err, "out of memory for the token vocabulary");
        return NULL;
    }
    v->size = size;
    size_t at = 0;
    for (int i = 0; i < size; i++) {
        v->offset[i] = (uint32_t)at;
        v->len[i] = (uint32_t)lens[i];
        if (lens[i]) memcpy(v->storage + at, bytes[i], lens[i]);
        at += lens[i];
        if (lens[i]) v->sorted[v->num_sorted++] = i;
        if ((int)lens[i] > v->max_len) v->max_len = (int)lens[i];
    }
    qsort_r(v->sorted, (size_t)v->num_sorted, sizeof *v->sorted, cmp_token, v); /* glibc's (_GNU_SOURCE) */
    for (int b = 0, i = 0; b <= 256; b++) {
        while (i < v->num_sorted && token_bytes(v, v->sorted[i])[0] < b) i++;
        v->first_index[b] = i;
    }
    for (int i = 1; i < v->num_sorted; i++) {
        int32_t a = v->sorted[i - 1], b = v->sorted[i];
        uint32_t n = v->len[a] < v->len[b] ? v->len[a] : v->len[b], k = 0;
        const uint8_t *pa = v->storage + v->offset[a], *pb = v->storage + v->offset[b];
        while (k < n && pa[k] == pb[k]) k++;
        v->lcp[i] = k;
    }
    return v;
}

TokenVocab *token_vocab_new(const Tokenizer *tok, int vocab_size, Error *err) {
    const char **bytes = calloc((size_t)vocab_size, sizeof *bytes);
    size_t *lens = calloc((size_t)vocab_size, sizeof *lens);
    TokenVocab *v = NULL;
    if (!bytes || !lens) {
        error_set(err, "out of memory for the token vocabulary");
        goto out;
    }
    int n = tokenizer_size(tok) < vocab_size ? tokenizer_size(tok) : vocab_size;
    for (int i = 0; i < n; i++) {
        if (tokenizer_is_special(tok, i)) continue; /* never text: only named end ids pass */
        if (tokenizer_token_bytes(tok, i, &bytes[i], &lens[i], err) < 0) goto out;
    }
    v = vocab_build(vocab_size, bytes, lens, err);
out:
    free(bytes);
    free(lens);
    return v;
}

TokenVocab *token_vocab_from_strings(const char *const *tokens, const size_t *lens, int n, Error *err) {
    return vocab_build(n, tokens, lens, err);
}

void token_vocab_free(TokenVocab *v) {
    if (!v) return;
    free(v->sorted), free(v->lcp), free(v->offset), free(v->len), free(v->storage);
    free(v);
}

int token_vocab_size(const TokenVocab *v) { return v->size; }


/* ---- precomputation --------------------------------------------------------- */

static int push_i32(int32_t **a, int64_t *n, int64_t *cap, int32_t x) {
    if (*n == *cap) {
        int64_t c = *cap ? *cap * 2 : 1024;
        int32_t *p = realloc(*a, (size_t)c * sizeof *p);
        if (!p) return -1;
        *a = p, *cap = c;
    }
    (*a)[(*n)++] = x;
    return 0;
}

static int add_uncertain(TokenGrammar *tg, int32_t token, const int32_t *offs, int n) {
    if (tg->num_unc == tg->cap_unc) {
        int64_t c = tg->cap_unc ? tg->cap_unc * 2 : 1024;
        Uncertain *p = realloc(tg->unc, (size_t)c * sizeof *p);
        if (!p) return -1;
        tg->unc = p, tg->cap_unc = c;
    }
    if (tg->num_offsets + n > tg->cap_offsets) {
        int64_t c = tg->cap_offsets ? tg->cap_offsets * 2 : 1024;
        while (c < tg->num_offsets + n) c *= 2;
        uint16_t *p = realloc(tg->offsets, (size_t)c * sizeof *p);
        if (!p) return -1;
        tg->offsets = p, tg->cap_offsets = c;
    }
    tg->unc[tg->num_unc++] = (Uncertain){token, (int32_t)tg->num_offsets, n};
    for (int i = 0; i < n; i++) tg->offsets[tg->num_offsets++] = (uint16_t)offs[i];
    return 0;
}

static bool has_prefix(const TokenVocab *v, int index, const uint8_t *prefix, uint32_t plen) {
    int32_t id = v->sorted[index];
    return v->len[id] >= plen && memcmp(token_bytes(v, id), prefix, plen) == 0;
}

/* First sorted index after `from` whose token does not start with
 * prefix[0..plen) (from's own): tokens sharing a prefix are contiguous.
 * Galloping, then binary search: dead prefixes mostly cover few tokens. */
static int subtree_end(const TokenVocab *v, int from, const uint8_t *prefix, uint32_t plen) {
    int lo = from + 1, step = 1;
    while (lo < v->num_sorted && has_prefix(v, lo, prefix, plen)) {
        lo = from + 1 + step;
        step *= 2;
    }
    int hi = lo < v->num_sorted ? lo : v->num_sorted; /* not inside (or the end) */
    lo = from + 1 + step / 4;                        /* inside, or from + 1 */
    if (lo > hi) lo = hi;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (has_prefix(v, mid, prefix, plen)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

typedef struct Walk {
    StackSet *level; /* [max_len + 1] */
    int32_t *offs;   /* path offsets where the rule may finish */
    int32_t *npend;  /* [max_len + 1]: offsets valid at each depth */
    int32_t *accepted;
    int64_t num_accepted, cap_accepted;
} Walk;

static int walk_state(TokenGrammar *tg, StackPool *pool, Walk *w, int32_t state, Error *err) {
    const TokenVocab *v = tg->v;
    stack_pool_truncate(pool, 0);
    if (stack_start(pool, state, STACK_UNKNOWN, &w->level[0]) < 0) goto limit;
    w->npend[0] = 0; /* finishing before reading: the stack below is its own top at run time */
    w->num_accepted = 0;
    int64_t unc_begin = tg->num_unc;
    uint32_t computed = 0;
    /* Only the first bytes some stack reads: most states read few, and
     * skipping the rest here saves a search per dead first byte. */
    for (int first = 0; first < 256; first++) {
        bool readable = false;
        for (int32_t k = 0; k < w->level[0].n && !readable; k++)
            readable = cg_next(tg->cg, pool->nodes[w->level[0].ids[k]].state, (uint8_t)first) >= 0;
        if (!readable) continue;
        computed = 0;
        for (int i = v->first_index[first]; i < v->first_index[first + 1];) {
            int32_t id = v->sorted[i];
            const uint8_t *tb = token_bytes(v, id);
            uint32_t len = v->len[id];
            uint32_t d = v->lcp[i] < computed ? v->lcp[i] : computed;
            bool dead = false;
            while (d < len) {
                if (w->level[d].n == 0) {
                    dead = true;
                    break;
                }
                if (stack_advance(pool, &w->level[d], tb[d], &w->level[d + 1]) < 0) goto limit;
                w->npend[d + 1] = w->npend[d];
                if (w->level[d + 1].hit_unknown) w->offs[w->npend[d + 1]++] = (int32_t)(d + 1);
                d++;
            }
            computed = d;
            if (dead) {
                /* Nothing reads byte d: every token under this prefix is decided by
                 * the offsets already met. d >= 1: the state itself reads bytes. */
                int end = subtree_end(v, i, tb, d);
                if (w->npend[d] > 0)
                    for (int j = i; j < end; j++)
                        if (add_uncertain(tg, v->sorted[j], w->offs, w->npend[d]) < 0) goto oom;
                i = end;
                continue;
            }
            if (w->level[len].advanced) {
                if (push_i32(&w->accepted, &w->num_accepted, &w->cap_accepted, id) < 0) goto oom;
            } else if (w->npend[len - 1] > 0) {
                if (add_uncertain(tg, id, w->offs, w->npend[len - 1]) < 0) goto oom;
            }
            i++;
        }
    }
    StateTokens *st = &tg->states[state];
    st->unc_begin = (int32_t)unc_begin;
    st->unc_end = (int32_t)tg->num_unc;
    st->num_accepted = (int32_t)w->num_accepted;
    int words = token_mask_words(v->size);
    st->bitset = w->num_accepted > words;
    if (st->bitset) {
        if (tg->num_bitset_words + words > tg->cap_bitset_words) {
            int64_t c = tg->cap_bitset_words ? tg->cap_bitset_words * 2 : (int64_t)words * 4;
            while (c < tg->num_bitset_words + words) c *= 2;
            uint32_t *p = realloc(tg->bitsets, (size_t)c * sizeof *p);
            if (!p) goto oom;
            tg->bitsets = p, tg->cap_bitset_words = c;
        }
        st->accepted = (int32_t)tg->num_bitset_words;
        uint32_t *bits = tg->bitsets + tg->num_bitset_words;
        memset(bits, 0, (size_t)words * sizeof *bits);
        for (int64_t k = 0; k < w->num_accepted; k++) bits[w->accepted[k] >> 5] |= 1u << (w->accepted[k] & 31);
        tg->num_bitset_words += words;
    } else {
        st->accepted = (int32_t)tg->num_ids;
        for (int64_t k = 0; k < w->num_accepted; k++)
            if (push_i32(&tg->ids, &tg->num_ids, &tg->cap_ids, w->accepted[k]) < 0) goto oom;
    }
    return 0;
limit:
    return error_set_kind(err, ERROR_INVALID, "the grammar is too ambiguous to compile (too many parse stacks)");
oom:
    return error_set(err, "out of memory precomputing token masks");
}

TokenGrammar *token_grammar_new(CompiledGrammar *cg, const TokenVocab *v, Error *err) {
    TokenGrammar *tg = calloc(1, sizeof *tg);
    Walk w = {0};
    StackPool pool = {0};
    if (!tg) {
        compiled_grammar_free(cg);
        error_set(err, "out of memory precomputing token masks");
        return NULL;
    }
    tg->cg = cg;
    tg->v = v;
    tg->states = calloc((size_t)cg->num_states, sizeof *tg->states);
    w.level = calloc((size_t)v->max_len + 1, sizeof *w.level);
    w.offs = malloc(((size_t)v->max_len + 1) * sizeof *w.offs);
    w.npend = malloc(((size_t)v->max_len + 1) * sizeof *w.npend);
    if (!tg->states || !w.level || !w.offs || !w.npend) {
        error_set(err, "out of memory precomputing token masks");
        goto fail;
    }
    if (stack_pool_init(&pool, cg, MAX_NODES_PRECOMPUTE, err) < 0) goto fail;
    struct timespec t0, t1; /* CPU time: a busy machine must not turn a fitting constraint away */
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    for (int32_t s = 0; s < cg->num_states; s++) {
        if ((cg->flags[s] & GS_BYTES) && walk_state(tg, &pool, &w, s, err) < 0) goto fail;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        if ((double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9 > MAX_PRECOMPUTE_SECONDS) {
            error_set_kind(err, ERROR_INVALID, "the constraint is too large: its token masks take over %.0f s of CPU time to compute",
                           MAX_PRECOMPUTE_SECONDS);
            goto fail;
        }
    }
    tg->bytes = sizeof *tg + cg->bytes + (size_t)cg->num_states * sizeof *tg->states + (size_t)tg->num_ids * 4 +
                (size_t)tg->num_bitset_words * 4 + (size_t)tg->num_unc * sizeof(Uncertain) + (size_t)tg->num_offsets * 2;
    goto out;
fail:
    token_grammar_free(tg);
    tg = NULL;
out:
    for (int i = 0; w.level && i <= v->max_len; i++) stack_set_free(&w.level[i]);
    free(w.level), free(w.offs), free(w.npend), free(w.accepted);
    stack_pool_free(&pool);
    return tg;
}

void token_grammar_free(TokenGrammar *tg) {
    if (!tg) return;
    compiled_grammar_free(tg->cg);
    free(tg->states), free(tg->ids), free(tg->bitsets), free(tg->unc), free(tg->offsets);
    free(tg);
}

size_t token_grammar_bytes(const TokenGrammar *tg) { return tg->bytes; }
int token_grammar_vocab_size(const TokenGrammar *tg) { return tg->v->size; }

/* ---- matcher ------------------------------------------------------------------ */

TokenMatcher *token_matcher_new(const TokenGrammar *tg, Error *err) {
    TokenMatcher *m = calloc(1, sizeof *m);
    if (!m) {
        error_set(err, "out of memory for a grammar matcher");
        return NULL;
    }
    m->tg = tg;
    if (stack_pool_init(&m->pool, tg->cg, MAX_NODES_MATCHER, err) < 0) goto fail;
    if (stack_start(&m->pool, tg->cg->root_start, STACK_ROOT, &m->cur) < 0) {
        error_set(err, "out of memory for a grammar matcher");
        goto fail;
    }
    return m;
fail:
    token_matcher_free(m);
    return NULL;
}

void token_matcher_free(TokenMatcher *m) {
    if (!m) return;
    stack_pool_free(&m->pool);
    stack_set_free(&m->cur), stack_set_free(&m->base);
    stack_set_free(&m->a), stack_set_free(&m->b);
    free(m);
}

bool token_matcher_done(const TokenMatcher *m) { return m->ended || m->cur.n == 0; }
bool token_matcher_can_end(const TokenMatcher *m) { return m->ended || m->cur.can_end; }

/* Whether bytes can be read from the expanded stacks in base (to the end). */
static int reads_all(TokenMatcher *m, const uint8_t *bytes, uint32_t len, int64_t *budget) {
    const StackSet *from = &m->base;
    StackSet *to = &m->a;
    for (uint32_t i = 0; i < len; i++) {
        if (--*budget < 0) return -1;
        if (stack_advance(&m->pool, from, bytes[i], to) < 0) return -1;
        if (!to->advanced) return 0;
        from = to;
        to = to == &m->a ? &m->b : &m->a;
    }
    return 1;
}

int token_matcher_fill_mask(TokenMatcher *m, uint32_t *mask, const int32_t *end_ids, int num_end_ids, Error *err) {
    const TokenGrammar *tg = m->tg;
    const TokenVocab *v = tg->v;
    int words = token_mask_words(v->size);
    memset(mask, 0, (size_t)words * sizeof *mask);
    int32_t keep = m->pool.num_nodes;
    int rc = 0;
    int64_t budget = MAX_MASK_BYTES_READ;
    for (int32_t i = 0; i < m->cur.n && !m->ended; i++) {
        const StackNode node = m->pool.nodes[m->cur.ids[i]];
        const StateTokens *st = &tg->states[node.state];
        if (st->bitset) {
            const uint32_t *bits = tg->bitsets + st->accepted;
            for (int k = 0; k < words; k++) mask[k] |= bits[k];
        } else {
            for (int32_t k = 0; k < st->num_accepted; k++) {
                int32_t t = tg->ids[st->accepted + k];
                mask[t >> 5] |= 1u << (t & 31);
            }
        }
        if (st->unc_begin == st->unc_end || node.parent == STACK_ROOT) continue; /* nothing may follow the root */
        stack_set_clear(&m->base);
        stack_round_begin(&m->pool);
        if (stack_expand(&m->pool, node.parent, &m->base) < 0) goto limit;
        for (int32_t u = st->unc_begin; u < st->unc_end; u++) {
            const Uncertain *unc = &tg->unc[u];
            int32_t t = unc->token;
            if (mask[t >> 5] >> (t & 31) & 1) continue;
            for (int32_t k = 0; k < unc->off_count; k++) {
                uint16_t off = tg->offsets[unc->off_begin + k];
                int r = reads_all(m, token_bytes(v, t) + off, v->len[t] - off, &budget);
                if (r < 0) goto limit;
                if (r) {
                    mask[t >> 5] |= 1u << (t & 31);
                    break;
                }
            }
        }
    }
    if (token_matcher_can_end(m))
        for (int i = 0; i < num_end_ids; i++)
            if (end_ids[i] >= 0 && end_ids[i] < v->size) mask[end_ids[i] >> 5] |= 1u << (end_ids[i] & 31);
    goto out;
limit:
    rc = error_set_kind(err, ERROR_INVALID, "the grammar is too ambiguous (too many parse stacks)");
out:
    stack_pool_truncate(&m->pool, keep);
    return rc;
}

/* Copies the live stacks into a fresh pool, dropping every dead node. */
static int compact(TokenMatcher *m) {
    StackPool fresh;
    int32_t *map = malloc((size_t)m->pool.num_nodes * sizeof *map), *chain = NULL;
    int32_t cap_chain = 0;
    if (!map || stack_pool_init(&fresh, m->tg->cg, MAX_NODES_MATCHER, NULL) < 0) {
        free(map);
        return -1;
    }
    for (int32_t i = 0; i < m->pool.num_nodes; i++) map[i] = -1;
    for (int32_t i = 0; i < m->cur.n; i++) {
        int32_t depth = 0;
        for (int32_t id = m->cur.ids[i]; id >= 0 && map[id] < 0; id = m->pool.nodes[id].parent) {
            if (depth == cap_chain) {
                cap_chain = cap_chain ? cap_chain * 2 : 64;
                int32_t *c = realloc(chain, (size_t)cap_chain * sizeof *c);
                if (!c) goto fail;
                chain = c;
            }
            chain[depth++] = id;
        }
        while (depth) {
            int32_t id = chain[--depth], parent = m->pool.nodes[id].parent;
            int32_t np = parent >= 0 ? map[parent] : parent;
            if ((map[id] = stack_node(&fresh, m->pool.nodes[id].state, np)) < 0) goto fail;
        }
        m->cur.ids[i] = map[m->cur.ids[i]];
    }
    stack_pool_free(&m->pool);
    m->pool = fresh;
    free(map), free(chain);
    return 0;
fail:
    stack_pool_free(&fresh);
    free(map), free(chain);
    return -1;
}

int token_matcher_accept(TokenMatcher *m, int32_t token, bool is_end, Error *err) {
    const TokenVocab *v = m->tg->v;
    if (is_end) {
        if (!token_matcher_can_end(m)) return error_set(err, "grammar: the end token came before the grammar could end");
        m->ended = true;
        return 0;
    }
    if (m->ended) return error_set(err, "grammar: token %d after the end", token);
    if (token < 0 || token >= v->size || v->len[token] == 0)
        return error_set(err, "grammar: token %d is not allowed here", token);
    const uint8_t *bytes = token_bytes(v, token);
    const StackSet *from = &m->cur;
    StackSet *to = &m->a;
    for (uint32_t i = 0; i < v->len[token]; i++) {
        if (stack_advance(&m->pool, from, bytes[i], to) < 0)
            return error_set_kind(err, ERROR_INVALID, "the grammar is too ambiguous (too many parse stacks)");
        if (!to->advanced) return error_set(err, "grammar: token %d is not allowed here", token);
        from = to;
        to = to == &m->a ? &m->b : &m->a;
    }
    if (from->n > MAX_LIVE_STACKS)
        return error_set_kind(err, ERROR_INVALID, "the grammar is too ambiguous (over %d parse stacks at once)",
                              MAX_LIVE_STACKS);
    /* from is a or b: swap it into cur. */
    StackSet *res = (StackSet *)from, tmp = m->cur;
    m->cur = *res;
    *res = tmp;
    /* Compacting costs the live nodes: only once the pool has doubled since
     * the last time, so deep nesting stays linear. */
    if (m->pool.num_nodes > COMPACT_AFTER && m->pool.num_nodes > 2 * m->compacted_at) {
        if (compact(m) < 0) return error_set(err, "out of memory for a grammar matcher");
        m->compacted_at = m->pool.num_nodes;
    }
    return 0;
}
