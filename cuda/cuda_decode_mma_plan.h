/*
 * cuda_decode_mma_plan.h - the index arithmetic of decode attention on the
 * tensor cores (cuda_decode_attention_mma.cu), in plain C for the kernel
 * and for a CPU test (tests/test_decode_mma_plan.c) that runs the kernel's
 * fragment arithmetic without a GPU.
 *
 * The block's work is the FMA kernel's (cuda_decode_plan.h: one sequence,
 * up to eight query heads of one KV head, one split of the keys; the same
 * grid, workspace and merge). Inside it a warp takes its keys 16 at a time,
 * a "group", and computes S = Q K^T and O += P V with mma.m16n8k16 (float32
 * accumulate; the fragment patterns are cuda_flash_plan.h's): the query
 * heads are A's rows 0-7 (rows 8-15 zero: a decode step has time to spare
 * on the tensor cores, not on the load path), the group's keys are S's 16
 * columns, two n-tiles of 8. Values stay in registers between the load and
 * the mma: an fp8 cache's e4m3 bytes become exact f16 pairs
 * (cvt.rn.f16x2.e4m3x2), a bf16 cache's values are B's registers as they
 * are. Lane (gid, tig) = (lane / 4, lane % 4); positions below are in
 * elements (bytes for fp8, 2 bytes for bf16):
 *  - K (B of S: k = dimensions, n = keys). S sums over every dimension, so
 *    which dimension plays which k index is free as long as Q's A fragment
 *    uses the same: the lane reads key gid (n-tile 0) and key 8 + gid
 *    (n-tile 1), elements [64 c + 16 tig, + 16) of the row for each chunk
 *    of 64 dimensions c, so the four lanes of a key read 64 contiguous
 *    elements. k-step s takes the lane's dimensions 4 (s % 4) + 0..3 of
 *    chunk s / 4; the first two are B's k = 2 tig + 0, 1 and the last two
 *    its k = 2 tig + 8, 9: B's two registers in order (one cvt each for
 *    fp8, one 32-bit word each for bf16).
 *  - V (B of P V: k = the group's keys, n = dimensions). The lane needs
 *    keys 2 tig + {0, 1, 8, 9} at column gid of every n-tile; column n of
 *    n-tile nt is dimension (D / 8) n + nt, so the lane reads D / 8
 *    contiguous elements of each of its four rows (8 lanes a row: whole
 *    rows a load) and a byte permute puts two rows' values side by side
 *    (then one cvt for fp8).
 *  - O (C of P V): the lane holds columns 2 tig, 2 tig + 1 of every n-tile
 *    of head gid, dimensions (D / 8)(2 tig + e) + nt: [D/4 tig, D/4 (tig+1)).
 *  - P: S's accumulators of the two n-tiles are P's A fragment for the
 *    group's one k-step (test_flash_plan.c's scores_become_a_fragments).
 */
#ifndef NANOVLLM_CUDA_DECODE_MMA_PLAN_H
#define NANOVLLM_CUDA_DECODE_MMA_PLAN_H

#ifdef __CUDACC__
#define DMMA_FN __host__ __device__ static inline constexpr
#else
#define DMMA_FN static inline
#endif

#define DMMA_GROUP_KEYS 16 /* keys per mma step: S's 16 columns, P V's one k-step */
/* Both caches take this kernel from groups of 3 (blocks of 4 and 8 heads).
 * Measured on an H200 (cuda/PERFORMANCE.md, v15 measured): at eight heads
 * it is 2.46x the FMA kernel on a bf16 cache and 4.47x on fp8; at two, the
 * FMA kernel reads a bf16 cache at ~100% of copy with float32 products,
 * and an fp8 one 1-10% faster than this kernel. */
#define DMMA_MIN_GROUP 3

/* Groups a warp loads before using any: 8 KB of K and V in flight a warp
 * at D = 128 either way (two groups of fp8, one of bf16), and a pass's
 * keys a warp. */
DMMA_FN int dmma_groups(int kv_bytes) { return kv_bytes == 1 ? 2 : 1; }
DMMA_FN int dmma_warp_keys(int kv_bytes) { return DMMA_GROUP_KEYS * dmma_groups(kv_bytes); }

/* Head sizes it serves: D / 64 chunks of K a key, D / 8 elements of V a
 * row; 256 would hold 64 accumulators a lane for O alone (the FMA
 * kernel's). */
DMMA_FN int dmma_supports(int head_dim) { return head_dim == 64 || head_dim == 128; }

/* The first key of group g of warp `warp` in the pass starting at pass0
 * (a block pass covers DECODE_WARPS x dmma_warp_keys keys). */
DMMA_FN int dmma_group_key0(int pass0, int warp, int g, int kv_bytes) {
    return pass0 + warp * dmma_warp_keys(kv_bytes) + g * DMMA_GROUP_KEYS;
}

/* K: the key (within its group) lane `lane` reads for n-tile nt, and where
 * its chunk c (16 elements) starts in the row. */
DMMA_FN int dmma_k_key(int lane, int nt) { return 8 * nt + lane / 4; }
DMMA_FN int dmma_k_offset(int lane, int c) { return 64 * c + 16 * (lane % 4); }

/* The dimension of element j (0..3) of k-step s in lane `lane`'s K, and the
 * k index of B (and of A's columns) that element plays. */
DMMA_FN int dmma_k_dim(int lane, int s, int j) { return dmma_k_offset(lane, s / 4) + 4 * (s % 4) + j; }
DMMA_FN int dmma_k_index(int lane, int j) { return 2 * (lane % 4) + j % 2 + 8 * (j / 2); }

/* V: the key (within its group) of the lane's row r (0..3: B's elements in
 * order), where its D / 8 elements start, and the dimension of column n of
 * n-tile nt. */
DMMA_FN int dmma_v_key(int lane, int r) { return 2 * (lane % 4) + r % 2 + 8 * (r / 2); }
DMMA_FN int dmma_v_offset(int head_dim, int lane) { return head_dim / 8 * (lane / 4); }
DMMA_FN int dmma_v_dim(int head_dim, int n, int nt) { return head_dim / 8 * n + nt; }

/* O: the dimension of element e (0, 1: row gid's) of n-tile nt. */
DMMA_FN int dmma_o_dim(int head_dim, int lane, int nt, int e) { return dmma_v_dim(head_dim, 2 * (lane % 4) + e, nt); }

/* fp8's q goes to f16 as q * 2^e, e from the block's largest |q| (amax):
 * amax * 2^e lands in [2^14, 2^15), under f16's 65504 whatever q's range,
 * and S is multiplied by 2^-e in float32 (a power of two: exact). 0 for
 * amax 0 (or not finite); e at most 100, so 2^-e stays a normal float. */
DMMA_FN int dmma_q_exponent(float amax) {
    if (!(amax > 0.0f) || amax > 3.4e38f) return 0;
    int x = 0; /* amax in [2^(x-1), 2^x) */
    float m = amax;
    while (m >= 1.0f) m *= 0.5f, x++;
    while (m < 0.5f) m *= 2.0f, x--;
    return 15 - x < 100 ? 15 - x : 100;
}

/* fp8: the byte permute (prmt) that takes bytes 2h, 2h + 1 of two words a,
 * b to (a[2h], b[2h], a[2h + 1], b[2h + 1]): the low half is n-tile 4 w +
 * 2 h's (row a, row b) pair, the high half n-tile 4 w + 2 h + 1's, w the
 * word of the rows' bytes. */
DMMA_FN unsigned dmma_pair_selector(int h) { return h ? 0x7362u : 0x5140u; }

/* bf16: the permute that takes half h of two words a, b to (a[h], b[h]):
 * n-tile 2 w + h's pair. */
DMMA_FN unsigned dmma_bf16_pair_selector(int h) { return h ? 0x7632u : 0x5410u; }

#endif
