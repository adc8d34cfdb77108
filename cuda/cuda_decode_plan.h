/*
 * cuda_decode_plan.h - how decode attention (cuda_decode_attention.cu)
 * divides one step's work, in plain C for the kernel and for a CPU test.
 *
 * A thread block takes one sequence, one KV head (or up to eight query
 * heads of its group, see decode_heads_per_block) and one split: a range
 * of the sequence's keys. Inside the block each key is read by a subgroup
 * of head_dim / 8 lanes, 16 bytes (8 bf16) a lane, so a warp reads
 * 32 / (head_dim / 8) whole K or V rows per load and every query head of
 * the block is scored from that one load (an fp8 cache: head_dim / 16
 * lanes of 16 bytes, decode_elems_per_lane). The split ranges follow from the
 * sequence's length on the GPU, so a launch shape (and a CUDA graph) serves
 * any length: short contexts leave the higher splits empty rather than
 * cutting the keys into slivers.
 *
 * The kernel and tests/test_cuda_decode_plan.c both take the key layout
 * and the split arithmetic from here, so the CPU test checks the kernel's
 * own mapping (every key once, merged in any order to the plain softmax).
 */
#ifndef NANOVLLM_CUDA_DECODE_PLAN_H
#define NANOVLLM_CUDA_DECODE_PLAN_H

#ifdef __CUDACC__
#define DECODE_PLAN_FN __host__ __device__ static inline
#else
#define DECODE_PLAN_FN static inline
#endif

#define DECODE_WARPS 4
#define DECODE_MAX_SPLITS 64
#define DECODE_MIN_SPLIT_KEYS 64 /* below it a split's fixed costs outweigh its reads */
#define DECODE_SPLIT_ALIGN 32
#define DECODE_MAX_HEADS_PER_BLOCK 8 /* registers: q and the output, 8 floats per head and lane */

/* Query heads one block serves: the group rounded up to a power of two,
 * at most DECODE_MAX_HEADS_PER_BLOCK (larger groups take several blocks
 * per KV head, each reading the head's keys). */
DECODE_PLAN_FN int decode_heads_per_block(int group) {
    int hb = 1;
    while (hb < group && hb < DECODE_MAX_HEADS_PER_BLOCK) hb *= 2;
    return hb;
}

/* Values of a K or V row one lane reads with one load: 8 of a bf16 cache
 * (16 bytes). An fp8 cache (kv_bytes 1) gives 16 (16 bytes, head_dim / 16
 * lanes a row, twice the keys per warp load: half the shuffles and the
 * per-key work a byte) where the block has at most two query heads; with
 * four or eight, 8 (8-byte loads): 16 dimensions a lane would double the
 * registers of q and the output (16 floats a head each), past what leaves
 * blocks resident. */
DECODE_PLAN_FN int decode_elems_per_lane(int kv_bytes, int heads_per_block) {
    return kv_bytes == 1 && heads_per_block <= 2 ? 16 : 8;
}

/* Lanes that read one row, and which part of which key's row a lane holds:
 * lane l is in subgroup l / lanes_per_key (its key, decode_key's `sub`)
 * and holds dimensions [decode_lane_dim0, + elems) of it. */
DECODE_PLAN_FN int decode_lanes_per_key(int head_dim, int elems) { return head_dim / elems; }
DECODE_PLAN_FN int decode_lane_sub(int lane, int lanes_per_key) { return lane / lanes_per_key; }
DECODE_PLAN_FN int decode_lane_dim0(int lane, int lanes_per_key, int elems) {
    return lane % lanes_per_key * elems;
}

/* Keys a lane has in flight per pass (K and V rows, 16 bytes each). Four
 * at every head count: with eight heads (241 registers, two blocks an SM)
 * two keys left too few bytes in flight (23% of the copy bandwidth on an
 * H200 at Qwen3-30B-A3B's shape). */
DECODE_PLAN_FN int decode_keys_per_lane(void) { return 4; }

/* Keys one warp load covers: 32 lanes / (head_dim / elems lanes per key);
 * the bf16 cache's 8 elements a lane unless given. */
DECODE_PLAN_FN int decode_keys_per_load_of(int head_dim, int elems) {
    return 32 / decode_lanes_per_key(head_dim, elems);
}
DECODE_PLAN_FN int decode_keys_per_load(int head_dim) { return decode_keys_per_load_of(head_dim, 8); }

/* Keys a block covers per pass of its loop. */
DECODE_PLAN_FN int decode_keys_per_pass_of(int head_dim, int elems) {
    return DECODE_WARPS * decode_keys_per_load_of(head_dim, elems) * decode_keys_per_lane();
}
DECODE_PLAN_FN int decode_keys_per_pass(int head_dim) { return decode_keys_per_pass_of(head_dim, 8); }

/* Keys per split for a sequence of num_keys keys and a launch of
 * num_splits splits: an even share, aligned, never below the minimum. */
DECODE_PLAN_FN int decode_split_keys(int num_keys, int num_splits) {
    int per = (num_keys + num_splits - 1) / num_splits;
    per = (per + DECODE_SPLIT_ALIGN - 1) / DECODE_SPLIT_ALIGN * DECODE_SPLIT_ALIGN;
    return per < DECODE_MIN_SPLIT_KEYS ? DECODE_MIN_SPLIT_KEYS : per;
}

/* Splits that get keys (the rest of the launch's splits return at once). */
DECODE_PLAN_FN int decode_splits_used(int num_keys, int num_splits) {
    int per = decode_split_keys(num_keys, num_splits);
    return (num_keys + per - 1) / per;
}

/* The key that lane subgroup `sub` of warp `warp` reads as its t-th key of
 * the pass starting at key `pass0`: consecutive subgroups, then warps,
 * take consecutive keys, so each load instruction of a warp covers
 * neighbouring rows of the cache block. */
DECODE_PLAN_FN int decode_key(int pass0, int t, int warp, int sub, int keys_per_load) {
    return pass0 + (t * DECODE_WARPS + warp) * keys_per_load + sub;
}

#endif
