/*
 * block_manager.h - the paged KV cache's blocks: ownership, prefix caching, eviction.
 *
 * The cache is num_blocks blocks of block_size token slots. A sequence holds
 * a BlockTable (its blocks in position order). Blocks are reference counted:
 * sequences sharing a prefix share its full blocks, and a shared block
 * (ref_count > 1) is never written, because only full blocks are ever shared
 * and a sequence writes only past its shared prefix.
 *
 * Prefix caching: a full block's hash is xxh64 over the previous block's
 * hash and the block's token ids, so a hash names the whole prefix. A hash is
 * registered (hash -> block) only once the block's KV has been computed
 * (block_manager_commit after the step), never while it is being written. A
 * lookup walks the prompt's full blocks, verifying each hit token by token.
 *
 * Freed blocks keep their content and hash, and can still be hit. Allocation
 * takes blocks that hold no cached prefix first, then the least recently
 * freed cached block, dropping its hash entry if it still points there.
 */
#ifndef NANOVLLM_BLOCK_MANAGER_H
#define NANOVLLM_BLOCK_MANAGER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

typedef struct BlockTable {
    int32_t *ids;
    uint64_t *hashes; /* chain hash of each block in [0, num_hashed) */
    int num_blocks;
    int num_hashed; /* leading full blocks whose hash is known (committed or matched) */
    int capacity;
} BlockTable;

typedef struct PrefixMatch {
    int num_blocks;     /* leading full blocks found in the cache */
    int num_free;       /* of them, blocks nobody holds now (taking them uses free capacity) */
    int32_t *ids;       /* [num_blocks], points into the manager's scratch */
    uint64_t *hashes;
} PrefixMatch;

typedef struct BlockManagerStats {
    long long prefix_query_tokens; /* prompt tokens looked up */
    long long prefix_hit_tokens;   /* of them, found in the cache */
    int num_free;                  /* blocks nobody holds (cached ones included) */
    int num_cached_free;           /* of them, still holding a registered prefix */
} BlockManagerStats;

typedef struct BlockManager BlockManager;

BlockManager *block_manager_create(int num_blocks, int block_size, Error *err);
void block_manager_destroy(BlockManager *bm);

int block_manager_block_size(const BlockManager *bm);
int block_manager_num_blocks(const BlockManager *bm);
int block_manager_num_free(const BlockManager *bm);
BlockManagerStats block_manager_stats(const BlockManager *bm);

/* Looks up the longest cached prefix of tokens[0..n) made of at most
 * max_blocks full blocks. No side effects besides the query/hit counters
 * (counted once per call with count_stats). The result stays valid until
 * the next call into the manager. */
PrefixMatch block_manager_match(BlockManager *bm, const int32_t *tokens, int n, int max_blocks,
                                bool count_stats);

/* The chain hash a block of these block_size tokens gets after the block
 * whose hash is prev (0 for the first block), as commit will give it. */
uint64_t block_manager_chain_hash(BlockManager *bm, uint64_t prev, const int32_t *block_tokens);

/* Adds a lookup to the query/hit counters (for a caller that matched without
 * counting and used only part of the match). */
void block_manager_count_prefix(BlockManager *bm, long long query_tokens, long long hit_tokens);

/* Appends the matched blocks to an empty table (taking a reference on each). */
int block_manager_take_match(BlockManager *bm, BlockTable *t, const PrefixMatch *m);

/* Appends fresh blocks until t covers num_tokens positions. Returns -1 and
 * changes nothing when there are not enough free blocks. */
int block_manager_grow(BlockManager *bm, BlockTable *t, int num_tokens);

/* Fresh blocks t needs to cover num_tokens positions. */
int block_manager_blocks_needed(const BlockManager *bm, const BlockTable *t, int num_tokens);

/* The KV of tokens[0..num_computed) is now in t's blocks: hashes every block
 * that became full and registers it unless another block already holds the
 * same prefix. */
void block_manager_commit(BlockManager *bm, BlockTable *t, const int32_t *tokens, int num_computed);

/* dst (empty) shares src's first num_blocks blocks, which must be hashed (full). */
int block_manager_fork(BlockManager *bm, const BlockTable *src, int num_blocks, BlockTable *dst);

/* Drops all of t's blocks (last block first, so a prefix outlives its tail
 * in the LRU order) and empties t. */
void block_manager_release(BlockManager *bm, BlockTable *t);

/* For tests: the reference count of a block, and whether hash -> block is registered. */
int block_manager_ref_count(const BlockManager *bm, int32_t block);
bool block_manager_check_invariants(const BlockManager *bm, char *why, int why_size);

void block_table_free(BlockTable *t);

#endif
