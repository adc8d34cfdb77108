/*
 * test_kv_fp8_plan.c - the fp8 KV cache's arithmetic (cuda/cuda_kv_fp8.h,
 * cuda/cuda_decode_plan.h) checked on the CPU, so it holds on machines
 * without a GPU: the sm_80 store encoder is fp8_e4m3_from_float bit for bit
 * (every rounding boundary of every exponent, the subnormals, the
 * saturation, NaN, both zeros); every e4m3 value is exact in bf16 (what the
 * prefill kernels' shared tiles hold); and decode attention's lane mapping
 * for 16 fp8 values a lane (and 8, with four or eight heads a block) gives
 * each dimension of each key to exactly one lane, with aligned loads,
 * shuffle trees that stay inside a key's lanes or a dimension's lanes, and
 * every key of a split read once.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/half.h"
#include "cuda/cuda_decode_plan.h"
#include "cuda/cuda_kv_fp8.h"
#include "model/weight_format.h"

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void expect_encoder(uint32_t u) {
    const uint8_t got = kv_fp8_from_float_bits(u), want = fp8_e4m3_from_float(from_bits(u));
    cr_assert_eq(got, want, "float 0x%08x (%.9g): encoder 0x%02x, fp8_e4m3_from_float 0x%02x", u, from_bits(u), got,
                 want);
}

/* Every 16-bit prefix (sign, exponent, 7 mantissa bits) with low halves
 * on both sides of each rounding point: e4m3 keeps 3 mantissa bits, so a
 * normal's tie is bits 0..19 = 0x80000 (prefix nibble 8, low half 0) and
 * its neighbours are low halves 0xffff under prefix nibble 7 and 0x0001;
 * a subnormal's tie sits at bit 20 or above, inside the prefix. */
Test(kv_fp8_plan, encoder_is_fp8_e4m3_from_float_at_every_boundary) {
    static const uint32_t LOW[] = {0x0000, 0x0001, 0x0002, 0x7fff, 0x8000, 0x8001, 0xfffe, 0xffff};
    for (uint32_t hi = 0; hi < 0x10000; hi++)
        for (size_t i = 0; i < sizeof LOW / sizeof LOW[0]; i++) expect_encoder(hi << 16 | LOW[i]);
}

Test(kv_fp8_plan, encoder_on_random_floats) {
    uint64_t s = 12345;
    for (int i = 0; i < 2000000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        expect_encoder((uint32_t)(s >> 32));
    }
}

/* The values the issue names: every e4m3 value and the midpoints between
 * neighbours (ties to even), past 448, the subnormals and their ties,
 * infinities, NaN, both zeros. */
Test(kv_fp8_plan, encoder_on_named_values) {
    for (int b = 0; b < 0x7e; b++) {
        float lo = fp8_e4m3_to_float((uint8_t)b), hi = fp8_e4m3_to_float((uint8_t)(b + 1)), mid = (lo + hi) / 2;
        float xs[] = {lo, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY), -lo, -mid};
        for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) expect_encoder(to_bits(xs[i]));
        cr_assert_eq(kv_fp8_from_float_bits(to_bits(lo)), b, "0x%02x round trip", b);
    }
    const float named[] = {448.0f, 449.0f, 463.99f, 464.0f, 465.0f, 1e30f, INFINITY, -INFINITY, -448.5f,
                           ldexpf(1, -6), ldexpf(1, -7), ldexpf(1, -9), ldexpf(1, -10), ldexpf(3, -11),
                           ldexpf(1, -11), ldexpf(1, -126), ldexpf(1, -149), 0.0f, -0.0f, NAN, -NAN};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) expect_encoder(to_bits(named[i]));
    cr_assert_eq(kv_fp8_from_float_bits(0x43e00000u), 0x7e, "448 is the largest");
    cr_assert_eq(kv_fp8_from_float_bits(0xff800000u), 0xfe, "-inf saturates to -448");
    cr_assert_eq(kv_fp8_from_float_bits(0x80000000u), 0x80, "-0 keeps its sign");
    cr_assert_eq(kv_fp8_from_float_bits(0x7fc00000u), 0x7f, "NaN");
}

/* The prefill kernels round e4m3 * scale to bf16 once: at scale 1 that
 * must lose nothing, so the tiles hold the cache's exact values. */
Test(kv_fp8_plan, every_e4m3_value_is_exact_in_bf16) {
    for (int b = 0; b < 256; b++) {
        if (fp8_e4m3_is_nan((uint8_t)b)) continue;
        float v = fp8_e4m3_to_float((uint8_t)b);
        float w = bf16_to_f32(f32_to_bf16(v));
        cr_assert(w == v && signbit(w) == signbit(v), "byte 0x%02x: %g in bf16 is %g", b, v, w);
    }
}

static const int HEAD_DIMS[] = {64, 128, 256};
static const int HEADS_PER_BLOCK[] = {1, 2, 4, 8};

/* Per (head_dim, element size, heads per block): each lane's load is
 * aligned and inside the row, every (key subgroup, dimension) belongs to
 * one lane, and the two shuffle trees pair the right lanes. */
Test(kv_fp8_plan, lanes_cover_each_row_once_with_aligned_loads) {
    for (size_t di = 0; di < sizeof HEAD_DIMS / sizeof HEAD_DIMS[0]; di++)
        for (int kv_bytes = 1; kv_bytes <= 2; kv_bytes++)
            for (size_t hi = 0; hi < sizeof HEADS_PER_BLOCK / sizeof HEADS_PER_BLOCK[0]; hi++) {
                const int D = HEAD_DIMS[di], hb = HEADS_PER_BLOCK[hi];
                const int elems = decode_elems_per_lane(kv_bytes, hb), load = elems * kv_bytes;
                const int lpk = decode_lanes_per_key(D, elems), kpl = decode_keys_per_load_of(D, elems);
                cr_assert(kv_bytes == 2 ? elems == 8 : elems == (hb <= 2 ? 16 : 8), "%d bytes, %d heads: %d", kv_bytes,
                          hb, elems);
                cr_assert(load == 8 || load == 16, "loads of %d bytes", load);
                cr_assert(lpk >= 1 && 32 % lpk == 0 && lpk * kpl == 32, "D %d, %d values a lane", D, elems);
                if (kv_bytes == 2) cr_assert_eq(kpl, decode_keys_per_load(D), "bf16: the kernel's old mapping");
                int *owner = malloc(sizeof(int) * (size_t)kpl * D);
                cr_assert(owner);
                for (int i = 0; i < kpl * D; i++) owner[i] = -1;
                for (int lane = 0; lane < 32; lane++) {
                    const int sub = decode_lane_sub(lane, lpk), dim0 = decode_lane_dim0(lane, lpk, elems);
                    cr_assert(sub >= 0 && sub < kpl);
                    cr_assert(dim0 >= 0 && dim0 + elems <= D, "lane %d: dims %d..%d of %d", lane, dim0, dim0 + elems, D);
                    /* the row starts 16-byte aligned (slot x KV heads x D values and head x D are) */
                    cr_assert_eq(dim0 * kv_bytes % load, 0, "lane %d's load is misaligned", lane);
                    for (int e = 0; e < elems; e++) {
                        cr_assert_eq(owner[sub * D + dim0 + e], -1, "D %d, %d values: dim %d of key %d twice", D,
                                     elems, dim0 + e, sub);
                        owner[sub * D + dim0 + e] = lane;
                    }
                    for (int o = lpk / 2; o > 0; o /= 2) /* the score's sum: inside the key's lanes */
                        cr_assert_eq(decode_lane_sub(lane ^ o, lpk), sub, "lane %d ^ %d leaves its key", lane, o);
                    for (int o = lpk; o < 32; o *= 2) { /* the subgroups' merge: the same dimensions */
                        cr_assert_eq(decode_lane_dim0(lane ^ o, lpk, elems), dim0, "lane %d ^ %d: other dims", lane, o);
                        cr_assert_neq(decode_lane_sub(lane ^ o, lpk), sub);
                    }
                }
                for (int i = 0; i < kpl * D; i++) cr_assert_neq(owner[i], -1, "D %d: dim %d of key %d unread", D, i % D, i / D);
                free(owner);
            }
}

/* With the fp8 mapping's keys per load (8 at head_dim 64, 4 at 128, 2 at
 * 256), a split's passes still read each of its keys once. */
Test(kv_fp8_plan, every_key_once_with_sixteen_values_a_lane) {
    static const int LENGTHS[] = {1, 2, 31, 63, 64, 65, 127, 128, 129, 1000, 4097};
    static const int SPLITS[] = {1, 2, 3, 7, 64};
    for (size_t di = 0; di < sizeof HEAD_DIMS / sizeof HEAD_DIMS[0]; di++)
        for (size_t li = 0; li < sizeof LENGTHS / sizeof LENGTHS[0]; li++)
            for (size_t si = 0; si < sizeof SPLITS / sizeof SPLITS[0]; si++) {
                const int D = HEAD_DIMS[di], n = LENGTHS[li], splits = SPLITS[si], elems = 16;
                const int kpl = decode_keys_per_load_of(D, elems), T = decode_keys_per_lane();
                const int pass = decode_keys_per_pass_of(D, elems);
                const int per = decode_split_keys(n, splits), used = decode_splits_used(n, splits);
                cr_assert_eq(pass, DECODE_WARPS * kpl * T);
                int *seen = calloc((size_t)n, sizeof(int));
                cr_assert(seen);
                for (int z = 0; z < used; z++) {
                    const int begin = z * per, end = begin + per < n ? begin + per : n;
                    for (int p0 = begin; p0 < end; p0 += pass)
                        for (int t = 0; t < T; t++)
                            for (int w = 0; w < DECODE_WARPS; w++)
                                for (int sub = 0; sub < kpl; sub++) {
                                    const int key = decode_key(p0, t, w, sub, kpl);
                                    cr_assert(key >= p0 && key < p0 + pass);
                                    if (key < end) seen[key]++;
                                }
                }
                for (int k = 0; k < n; k++)
                    cr_assert_eq(seen[k], 1, "D %d, %d keys, %d splits: key %d read %d times", D, n, splits, k,
                                 seen[k]);
                free(seen);
            }
}
