/*
 * cuda_flash_plan.h - the index arithmetic of the tensor-core prefill
 * attention (cuda_flash_attention.cu), in plain C for the kernel and for a
 * CPU test (tests/test_flash_plan.c) that checks it without a GPU.
 *
 * A block takes one item: FLASH_ROWS query rows (tokens x the query heads
 * of one KV head), 16 per warp, and walks the sequence's keys FLASH_KEYS
 * at a time. Each warp computes S = Q K^T and O += P V with mma.sync
 * m16n8k16 (bf16 in, float32 accumulate), whose operands are spread over
 * the warp's lanes in fixed patterns (PTX ISA, "Matrix fragments for
 * mma.m16n8k16"): the functions below name, for a lane and a register
 * element, the row and column it holds, and for ldmatrix the shared-memory
 * row each lane points at. The CPU test multiplies matrices through these
 * patterns and compares with a plain product, so a wrong index shows here
 * rather than as a silently wrong attention on a GPU.
 */
#ifndef NANOVLLM_CUDA_FLASH_PLAN_H
#define NANOVLLM_CUDA_FLASH_PLAN_H

#ifdef __CUDACC__
#define FLASH_PLAN_FN __host__ __device__ static inline
#else
#define FLASH_PLAN_FN static inline
#endif

#define FLASH_WARPS 4
#define FLASH_ROWS (16 * FLASH_WARPS) /* query rows per block */
#define FLASH_KEYS 64                 /* keys per tile */
#define FLASH_PAD 8                   /* bf16 per shared row of padding: ldmatrix rows 16 bytes apart in bank */

/* New tokens per item: the rows a block holds over the group's heads. */
FLASH_PLAN_FN int flash_tile_tokens(int group) { return group >= FLASH_ROWS ? 1 : FLASH_ROWS / group; }

/* Key tiles of a block whose last query sees keys [0, num_keys). */
FLASH_PLAN_FN int flash_key_tiles(int num_keys) { return (num_keys + FLASH_KEYS - 1) / FLASH_KEYS; }

/* Whether tile t needs the causal mask: some key of it lies past the first
 * row's position (rows see keys <= their position). */
FLASH_PLAN_FN int flash_tile_needs_mask(int tile, int first_pos) { return (tile + 1) * FLASH_KEYS - 1 > first_pos; }

/* mma.m16n8k16 accumulator (C, D; 16 x 8 float): element i (0..3) of lane. */
FLASH_PLAN_FN int flash_c_row(int lane, int i) { return lane / 4 + 8 * (i / 2); }
FLASH_PLAN_FN int flash_c_col(int lane, int i) { return 2 * (lane % 4) + i % 2; }

/* A operand (16 x 16 bf16, row-major): element i (0..7) of lane, registers
 * holding elements (0,1), (2,3), (4,5), (6,7). */
FLASH_PLAN_FN int flash_a_row(int lane, int i) { return lane / 4 + 8 * ((i / 2) % 2); }
FLASH_PLAN_FN int flash_a_col(int lane, int i) { return 2 * (lane % 4) + i % 2 + 8 * (i / 4); }

/* B operand (16 x 8 bf16, "col": k x n): element i (0..3) of lane. */
FLASH_PLAN_FN int flash_b_k(int lane, int i) { return 2 * (lane % 4) + i % 2 + 8 * (i / 2); }
FLASH_PLAN_FN int flash_b_n(int lane, int i) { return lane / 4 + 0 * i; }

/* ldmatrix.x4: lane l gives the address of row l % 8 of 8x8 matrix l / 8,
 * and receives, for matrix m, register m: elements (l / 4, 2 (l % 4) + 0..1)
 * of that matrix (with .trans: (2 (l % 4) + 0..1, l / 4)).
 *
 * Q (A operand, k-step ks): matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15)
 * in A's register order: the row and column a lane points at. */
FLASH_PLAN_FN int flash_ldq_row(int lane) { return lane % 8 + 8 * ((lane / 8) % 2); }
FLASH_PLAN_FN int flash_ldq_col(int lane, int ks) { return 16 * ks + 8 * (lane / 16); }

/* K (B operand of S = Q K^T, k = dims, n = keys; K rows in shared are
 * keys): one x4 covers key n-tiles nt and nt + 1 of k-step ks, matrices
 * (keys of nt, dims 0-7), (nt, dims 8-15), (nt + 1, 0-7), (nt + 1, 8-15). */
FLASH_PLAN_FN int flash_ldk_key(int lane, int nt) { return 8 * (nt + lane / 16) + lane % 8; }
FLASH_PLAN_FN int flash_ldk_dim(int lane, int ks) { return 16 * ks + 8 * ((lane / 8) % 2); }

/* V (B operand of O = P V, k = keys, n = dims; V rows are keys, so .trans):
 * one x4 covers dim n-tiles dt and dt + 1 of key k-step kk, matrices
 * (keys 0-7, dt), (keys 8-15, dt), (keys 0-7, dt + 1), (keys 8-15, dt + 1). */
FLASH_PLAN_FN int flash_ldv_key(int lane, int kk) { return 16 * kk + 8 * ((lane / 8) % 2) + lane % 8; }
FLASH_PLAN_FN int flash_ldv_dim(int lane, int dt) { return 8 * (dt + lane / 16); }

#endif
