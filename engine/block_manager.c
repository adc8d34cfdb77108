/*
 * block_manager.c - blocks, free lists and the prefix hash map (see the header).
 *
 * Every block with ref_count 0 sits in exactly one free list: `plain` (a
 * stack of blocks holding no registered prefix, used first) or the LRU list
 * of cached blocks (registered, kept for hits, evicted oldest first). The
 * hash map is open addressing with linear probing and backward-shift
 * deletion, sized to twice the block count, so it never fills.
 */
#include "block_manager.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct Block {
    int32_t ref_count;
    bool registered;     /* the map's entry for `hash` points here */
    uint64_t hash;       /* chain hash of the content, when registered */
    uint64_t prev_hash;  /* the hash it was chained from (invariant checks) */
    int32_t prev, next;  /* LRU links, while cached and free */
} Block;

struct BlockManager {
    int num_blocks, block_size;
    Block *blocks;
    int32_t *tokens; /* [num_blocks][block_size]: content of registered blocks */

    int32_t *plain; /* stack of free, unregistered blocks */
    int num_plain;
    int32_t lru_head, lru_tail; /* free registered blocks, least recently freed first */
    int num_lru;

    uint64_t *keys; /* hash map: keys[i] -> vals[i], vals[i] < 0 = empty */
    int32_t *vals;
    uint32_t mask;
    int map_size;

    int32_t *match_ids; /* scratch for block_manager_match */
    uint64_t *match_hashes;
    uint8_t *hash_buf; /* prev hash + one block of tokens */

    long long query_tokens, hit_tokens;
};

/* ---- hash map ------------------------------------------------------------ */

static int32_t map_get(const BlockManager *bm, uint64_t key) {
    for (uint32_t i = (uint32_t)key & bm->mask;; i = (i + 1) & bm->mask) {
        if (bm->vals[i] < 0) return -1;
        if (bm->keys[i] == key) return bm->vals[i];
    }
}

static void map_put(BlockManager *bm, uint64_t key, int32_t val) {
    uint32_t i = (uint32_t)key & bm->mask;
    while (bm->vals[i] >= 0) i = (i + 1) & bm->mask;
    bm->keys[i] = key;
    bm->vals[i] = val;
    bm->map_size++;
}

static void map_delete(BlockManager *bm, uint64_t key) {
    uint32_t i = (uint32_t)key & bm->mask;
    while (bm->vals[i] >= 0 && bm->keys[i] != key) i = (i + 1) & bm->mask;
    if (bm->vals[i] < 0) return;
    bm->vals[i] = -1;
    bm->map_size--;
    /* Shift back later entries of the probe run that could live at i. */
    for (uint32_t j = (i + 1) & bm->mask; bm->vals[j] >= 0; j = (j + 1) & bm->mask) {
        uint32_t home = (uint32_t)bm->keys[j] & bm->mask;
        bool movable = (j > i) ? (home <= i || home > j) : (home <= i && home > j);
        if (!movable) continue;
        bm->keys[i] = bm->keys[j];
        bm->vals[i] = bm->vals[j];
        bm->vals[j] = -1;
        i = j;
    }
}

/* ---- free lists ---------------------------------------------------------- */

static void lru_unlink(BlockManager *bm, int32_t id) {
    Block *b = &bm->blocks[id];
    if (b->prev >= 0) bm->blocks[b->prev].next = b->next; else bm->lru_head = b->next;
    if (b->next >= 0) bm->blocks[b->next].prev = b->prev; else bm->lru_tail = b->prev;
    b->prev = b->next = -1;
    bm->num_lru--;
}

static void lru_append(BlockManager *bm, int32_t id) {
    Block *b = &bm->blocks[id];
    b->prev = bm->lru_tail;
    b->next = -1;
    if (bm->lru_tail >= 0) bm->blocks[bm->lru_tail].next = id; else bm->lru_head = id;
    bm->lru_tail = id;
    bm->num_lru++;
}

/* A free block for new content: a plain one, else the oldest cached one,
 * whose prefix stops being findable (its entry is removed only if it still
 * names this block). Caller has checked that one exists. */
static int32_t take_free_block(BlockManager *bm) {
    int32_t id;
    if (bm->num_plain > 0) {
        id = bm->plain[--bm->num_plain];
    } else {
        id = bm->lru_head;
        lru_unlink(bm, id);
        Block *b = &bm->blocks[id];
        if (map_get(bm, b->hash) == id) map_delete(bm, b->hash);
        b->registered = false;
    }
    bm->blocks[id].ref_count = 1;
    return id;
}

/* ---- tables --------------------------------------------------------------- */

static int table_reserve(BlockTable *t, int n, Error *err) {
    if (n <= t->capacity) return 0;
    int cap = t->capacity ? t->capacity : 8;
    while (cap < n) cap *= 2;
    int32_t *ids = realloc(t->ids, sizeof *ids * (size_t)cap);
    if (ids) t->ids = ids;
    uint64_t *hashes = ids ? realloc(t->hashes, sizeof *hashes * (size_t)cap) : NULL;
    if (!ids || !hashes) return error_set(err, "out of memory (block table)");
    t->hashes = hashes;
    t->capacity = cap;
    return 0;
}

void block_table_free(BlockTable *t) {
    free(t->ids);
    free(t->hashes);
    memset(t, 0, sizeof *t);
}

/* ---- hashing -------------------------------------------------------------- */

static uint64_t block_hash(BlockManager *bm, uint64_t prev, const int32_t *tokens) {
    memcpy(bm->hash_buf, &prev, sizeof prev);
    memcpy(bm->hash_buf + sizeof prev, tokens, sizeof(int32_t) * (size_t)bm->block_size);
    return XXH64(bm->hash_buf, sizeof prev + sizeof(int32_t) * (size_t)bm->block_size, 0);
}

/* ---- the interface -------------------------------------------------------- */

BlockManager *block_manager_create(int num_blocks, int block_size, Error *err) {
    if (num_blocks < 1 || block_size < 1 || (block_size & (block_size - 1)) != 0) {
        error_set(err, "block manager: need >= 1 block and a power-of-two block size");
        return NULL;
    }
    BlockManager *bm = calloc(1, sizeof *bm);
    if (!bm) {
        error_set(err, "out of memory");
        return NULL;
    }
    bm->num_blocks = num_blocks;
    bm->block_size = block_size;
    uint32_t cap = 16;
    while (cap < 2u * (uint32_t)num_blocks) cap *= 2;
    bm->mask = cap - 1;
    bm->blocks = calloc((size_t)num_blocks, sizeof *bm->blocks);
    bm->tokens = malloc(sizeof(int32_t) * (size_t)num_blocks * (size_t)block_size);
    bm->plain = malloc(sizeof(int32_t) * (size_t)num_blocks);
    bm->keys = malloc(sizeof(uint64_t) * cap);
    bm->vals = malloc(sizeof(int32_t) * cap);
    bm->match_ids = malloc(sizeof(int32_t) * (size_t)num_blocks);
    bm->match_hashes = malloc(sizeof(uint64_t) * (size_t)num_blocks);
    bm->hash_buf = malloc(sizeof(uint64_t) + sizeof(int32_t) * (size_t)block_size);
    if (!bm->blocks || !bm->tokens || !bm->plain || !bm->keys || !bm->vals || !bm->match_ids ||
        !bm->match_hashes || !bm->hash_buf) {
        block_manager_destroy(bm);
        error_set(err, "out of memory (%d KV blocks)", num_blocks);
        return NULL;
    }
    for (uint32_t i = 0; i < cap; i++) bm->vals[i] = -1;
    /* Hand out low ids first: the stack pops from the end. */
    for (int i = 0; i < num_blocks; i++) {
        bm->plain[i] = num_blocks - 1 - i;
        bm->blocks[i].prev = bm->blocks[i].next = -1;
    }
    bm->num_plain = num_blocks;
    bm->lru_head = bm->lru_tail = -1;
    return bm;
}

void block_manager_destroy(BlockManager *bm) {
    if (!bm) return;
    free(bm->blocks);
    free(bm->tokens);
    free(bm->plain);
    free(bm->keys);
    free(bm->vals);
    free(bm->match_ids);
    free(bm->match_hashes);
    free(bm->hash_buf);
    free(bm);
}

int block_manager_block_size(const BlockManager *bm) { return bm->block_size; }
int block_manager_num_blocks(const BlockManager *bm) { return bm->num_blocks; }
int block_manager_num_free(const BlockManager *bm) { return bm->num_plain + bm->num_lru; }

BlockManagerStats block_manager_stats(const BlockManager *bm) {
    return (BlockManagerStats){bm->query_tokens, bm->hit_tokens, block_manager_num_free(bm),
                               bm->num_lru};
}

PrefixMatch block_manager_match(BlockManager *bm, const int32_t *tokens, int n, int max_blocks,
                                bool count_stats) {
    PrefixMatch m = {0, 0, bm->match_ids, bm->match_hashes};
    int bs = bm->block_size, limit = n / bs < max_blocks ? n / bs : max_blocks;
    uint64_t prev = 0;
    for (int b = 0; b < limit; b++) {
        uint64_t h = block_hash(bm, prev, tokens + (size_t)b * bs);
        int32_t id = map_get(bm, h);
        if (id < 0 || memcmp(bm->tokens + (size_t)id * bs, tokens + (size_t)b * bs,
                             sizeof(int32_t) * (size_t)bs) != 0)
            break; /* a miss, or a hash collision caught by the token check */
        m.ids[b] = id;
        m.hashes[b] = h;
        if (bm->blocks[id].ref_count == 0) m.num_free++;
        m.num_blocks = b + 1;
        prev = h;
    }
    if (count_stats) {
        bm->query_tokens += n;
        bm->hit_tokens += (long long)m.num_blocks * bs;
    }
    return m;
}

uint64_t block_manager_chain_hash(BlockManager *bm, uint64_t prev, const int32_t *block_tokens) {
    return block_hash(bm, prev, block_tokens);
}

void block_manager_count_prefix(BlockManager *bm, long long query_tokens, long long hit_tokens) {
    bm->query_tokens += query_tokens;
    bm->hit_tokens += hit_tokens;
}

int block_manager_take_match(BlockManager *bm, BlockTable *t, const PrefixMatch *m) {
    Error err;
    if (t->num_blocks != 0 || table_reserve(t, m->num_blocks, &err)) return -1;
    for (int b = 0; b < m->num_blocks; b++) {
        int32_t id = m->ids[b];
        if (bm->blocks[id].ref_count++ == 0) lru_unlink(bm, id);
        t->ids[b] = id;
        t->hashes[b] = m->hashes[b];
    }
    t->num_blocks = t->num_hashed = m->num_blocks;
    return 0;
}

int block_manager_blocks_needed(const BlockManager *bm, const BlockTable *t, int num_tokens) {
    int total = (num_tokens + bm->block_size - 1) / bm->block_size;
    return total > t->num_blocks ? total - t->num_blocks : 0;
}

int block_manager_grow(BlockManager *bm, BlockTable *t, int num_tokens) {
    int need = block_manager_blocks_needed(bm, t, num_tokens);
    if (need == 0) return 0;
    Error err;
    if (need > block_manager_num_free(bm) || table_reserve(t, t->num_blocks + need, &err))
        return -1;
    for (int i = 0; i < need; i++) t->ids[t->num_blocks++] = take_free_block(bm);
    return 0;
}

void block_manager_commit(BlockManager *bm, BlockTable *t, const int32_t *tokens,
                          int num_computed) {
    int bs = bm->block_size, full = num_computed / bs;
    if (full > t->num_blocks) full = t->num_blocks;
    for (int b = t->num_hashed; b < full; b++) {
        uint64_t prev = b > 0 ? t->hashes[b - 1] : 0;
        uint64_t h = block_hash(bm, prev, tokens + (size_t)b * bs);
        t->hashes[b] = h;
        int32_t id = t->ids[b];
        Block *blk = &bm->blocks[id];
        /* Another block may already hold this prefix (two sequences computed
         * it in the same step); the first one registered stays the one found. */
        if (!blk->registered && map_get(bm, h) < 0) {
            map_put(bm, h, id);
            blk->registered = true;
            blk->hash = h;
            blk->prev_hash = prev;
            memcpy(bm->tokens + (size_t)id * bs, tokens + (size_t)b * bs, sizeof(int32_t) * (size_t)bs);
        }
        t->num_hashed = b + 1;
    }
}

int block_manager_fork(BlockManager *bm, const BlockTable *src, int num_blocks, BlockTable *dst) {
    Error err;
    if (dst->num_blocks != 0 || num_blocks > src->num_hashed ||
        table_reserve(dst, num_blocks, &err))
        return -1;
    for (int b = 0; b < num_blocks; b++) {
        bm->blocks[src->ids[b]].ref_count++;
        dst->ids[b] = src->ids[b];
        dst->hashes[b] = src->hashes[b];
    }
    dst->num_blocks = dst->num_hashed = num_blocks;
    return 0;
}

void block_manager_release(BlockManager *bm, BlockTable *t) {
    for (int b = t->num_blocks - 1; b >= 0; b--) {
        int32_t id = t->ids[b];
        Block *blk = &bm->blocks[id];
        if (--blk->ref_count > 0) continue;
        if (blk->registered) lru_append(bm, id);
        else bm->plain[bm->num_plain++] = id;
    }
    t->num_blocks = t->num_hashed = 0;
}

int block_manager_ref_count(const BlockManager *bm, int32_t block) {
    return bm->blocks[block].ref_count;
}

bool block_manager_check_invariants(const BlockManager *bm, char *why, int why_size) {
#define FAIL(...) do { snprintf(why, (size_t)why_size, __VA_ARGS__); return false; } while (0)
    int held = 0, registered = 0;
    for (int i = 0; i < bm->num_blocks; i++) {
        const Block *b = &bm->blocks[i];
        if (b->ref_count < 0) FAIL("block %d has ref_count %d", i, b->ref_count);
        held += b->ref_count > 0;
        registered += b->registered;
        if (b->registered) {
            if (map_get(bm, b->hash) != i) FAIL("registered block %d is not in the map", i);
            XXH64_state_t *st = XXH64_createState();
            if (!st) FAIL("out of memory");
            XXH64_reset(st, 0);
            XXH64_update(st, &b->prev_hash, sizeof b->prev_hash);
            XXH64_update(st, bm->tokens + (size_t)i * bm->block_size, 4 * (size_t)bm->block_size);
            uint64_t h = XXH64_digest(st);
            XXH64_freeState(st);
            if (h != b->hash) FAIL("block %d holds tokens that do not hash to its entry", i);
        }
    }
    if (registered != bm->map_size) FAIL("%d registered blocks but %d map entries", registered, bm->map_size);
    if (held + bm->num_plain + bm->num_lru != bm->num_blocks)
        FAIL("held %d + plain %d + cached %d != %d blocks", held, bm->num_plain, bm->num_lru,
             bm->num_blocks);
    for (int i = 0; i < bm->num_plain; i++) {
        const Block *b = &bm->blocks[bm->plain[i]];
        if (b->ref_count != 0 || b->registered) FAIL("plain free block %d is held or registered", bm->plain[i]);
    }
    int n = 0;
    for (int32_t id = bm->lru_head; id >= 0; id = bm->blocks[id].next, n++) {
        const Block *b = &bm->blocks[id];
        if (b->ref_count != 0 || !b->registered) FAIL("cached free block %d is held or unregistered", id);
        if (n > bm->num_blocks) FAIL("LRU list has a cycle");
    }
    if (n != bm->num_lru) FAIL("LRU list has %d blocks, counted %d", n, bm->num_lru);
    return true;
#undef FAIL
}
