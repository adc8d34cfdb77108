/*
 * test_decode_mma_plan.c - decode attention on the tensor cores
 * (cuda/cuda_decode_attention_mma.cu, an fp8 or a bf16 KV cache) run on the
 * CPU through its own index arithmetic (cuda/cuda_decode_mma_plan.h), so a
 * wrong fragment, byte or key shows here rather than as a silently wrong
 * attention on a GPU.
 *
 * The emulation keeps what each of the 32 lanes of each warp holds, as the
 * kernel does: the K chunks and V rows' elements at the plan's offsets
 * from the slots the kernel computes (one table look-up a group where the
 * block size is a multiple of 16, one a key otherwise), 32-bit words taken
 * apart into B's registers (a cvt of e4m3 pairs, or bf16 pairs as they
 * are), V's pairs through an emulated prmt, q at
 * the plan's dimensions in A's registers, and mma.m16n8k16 emulated from
 * its PTX fragment patterns (cuda/cuda_flash_plan.h: element i of lane l is
 * A's (flash_a_row, flash_a_col), B's (flash_b_k, flash_b_n), C's
 * (flash_c_row, flash_c_col)). The online softmax per lane with the quad's
 * max exchanged, then warps and splits merged, must equal a plain float64
 * softmax over the dequantized cache. Arithmetic is exact here (double, no
 * f16 rounding): what is checked is where every value comes from and goes.
 * Cache slots no sequence owns hold NaNs (e4m3 0x7f, bf16 0x7fc0), so
 * reading one shows.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_decode_mma_plan.h"
#include "cuda/cuda_decode_plan.h"
#include "cuda/cuda_flash_plan.h"
#include "model/weight_format.h"

#define LANES 32
#define MAX_D 128
#define MAX_HB 8

typedef struct Case {
    int D, heads, block_size, num_keys, num_splits;
    int kv_bytes;         /* 1: e4m3, 2: bf16 */
    const uint8_t *k, *v; /* [slot][D] elements of one KV head */
    const int32_t *table;
    const double *q; /* [heads][D] */
} Case;

/* prmt.b32 d, a, b, selector (the default mode): byte i of d is byte
 * (selector >> 4 i) & 7 of the eight bytes b:a, a's first. */
static uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
    const uint64_t bytes = (uint64_t)b << 32 | a;
    uint32_t d = 0;
    for (int i = 0; i < 4; i++) d |= (uint32_t)(bytes >> 8 * ((selector >> 4 * i) & 7) & 0xff) << 8 * i;
    return d;
}

static uint32_t word(const uint8_t *bytes, int w) {
    return (uint32_t)bytes[4 * w] | (uint32_t)bytes[4 * w + 1] << 8 | (uint32_t)bytes[4 * w + 2] << 16 |
           (uint32_t)bytes[4 * w + 3] << 24;
}

/* The value of element i of a cache row (an e4m3 byte, or bf16's 2 bytes). */
static double element(const uint8_t *row, int i, int kv_bytes) {
    if (kv_bytes == 1) return fp8_e4m3_to_float(row[i]);
    const uint32_t bits = (uint32_t)(row[2 * i] | row[2 * i + 1] << 8) << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* v rounded to f16 (nearest even; subnormals in steps of 2^-24, past
 * 65504 infinite), as the kernel's __floats2half2_rn. */
static double f16_round(double v) {
    if (v == 0) return v;
    int e;
    frexp(v, &e); /* |v| in [2^(e-1), 2^e): 11 significant bits below 2^e */
    const int quantum = e - 11 < -24 ? -24 : e - 11;
    const double r = ldexp(nearbyint(ldexp(v, -quantum)), quantum);
    return fabs(r) > 65504 ? copysign(INFINITY, v) : r;
}

/* v rounded to bf16's 8 significant bits (the q the kernel reads). */
static double bf16_round(double v) {
    if (v == 0) return v;
    int e;
    frexp(v, &e);
    return ldexp(nearbyint(ldexp(v, 8 - e)), e - 8);
}

/* One B register from the low 16 bits of `pair` (element 0 low): fp8's
 * cvt.rn.f16x2.e4m3x2, or a bf16 pair's two halves. */
static void fp8_pair(uint32_t pair, double out[2]) {
    out[0] = fp8_e4m3_to_float((uint8_t)(pair & 0xff));
    out[1] = fp8_e4m3_to_float((uint8_t)(pair >> 8 & 0xff));
}
static void bf16_pair(uint32_t pair, double out[2]) {
    uint8_t b[4] = {(uint8_t)pair, (uint8_t)(pair >> 8), (uint8_t)(pair >> 16), (uint8_t)(pair >> 24)};
    out[0] = element(b, 0, 2);
    out[1] = element(b, 1, 2);
}

/* MmaKv<KV>::k_regs: B's four elements of k-step s from a key's words. */
static void k_regs(const uint8_t *key_bytes, int s, int kv_bytes, double b[4]) {
    if (kv_bytes == 1) {
        const uint32_t w = word(key_bytes, s);
        fp8_pair(w, b);
        fp8_pair(w >> 16, b + 2);
    } else {
        bf16_pair(word(key_bytes, 2 * s), b);
        bf16_pair(word(key_bytes, 2 * s + 1), b + 2);
    }
}

/* MmaKv<KV>::v_reg: n-tile nt's pair of two rows' values. */
static void v_reg(const uint8_t *ra, const uint8_t *rb, int nt, int kv_bytes, double out[2]) {
    if (kv_bytes == 1) {
        const uint32_t pair = prmt(word(ra, nt / 4), word(rb, nt / 4), dmma_pair_selector(nt / 2 % 2));
        fp8_pair(nt % 2 ? pair >> 16 : pair, out);
    } else {
        bf16_pair(prmt(word(ra, nt / 2), word(rb, nt / 2), dmma_bf16_pair_selector(nt % 2)), out);
    }
}

/* D[16 x 8] = C + A B over the warp: a[l][i] (8 a lane), b[l][i] (4), c and
 * d[l][i] (4), placed and read by the fragment patterns. */
static void mma(double d[LANES][4], double a[LANES][8], double b[LANES][4], double c[LANES][4]) {
    double A[16][16], B[16][8];
    for (int l = 0; l < LANES; l++) {
        for (int i = 0; i < 8; i++) A[flash_a_row(l, i)][flash_a_col(l, i)] = a[l][i];
        for (int i = 0; i < 4; i++) B[flash_b_k(l, i)][flash_b_n(l, i)] = b[l][i];
    }
    for (int l = 0; l < LANES; l++)
        for (int i = 0; i < 4; i++) {
            const int r = flash_c_row(l, i), n = flash_c_col(l, i);
            double sum = c[l][i];
            for (int k = 0; k < 16; k++) sum += A[r][k] * B[k][n];
            d[l][i] = sum;
        }
}

/* The kernel's slot of `key`, given the group's first key. */
static size_t slot_of(const Case *c, int key, int key0) {
    const int bs = c->block_size;
    if (bs % DMMA_GROUP_KEYS == 0) {
        const size_t slot0 = (size_t)c->table[key0 / bs] * bs + key0 % bs;
        return slot0 + (size_t)(key - key0);
    }
    return (size_t)c->table[key / bs] * bs + key % bs;
}

typedef struct Partial { /* one warp's, or a merge of several: per head */
    double m[MAX_HB], l[MAX_HB], o[MAX_HB][MAX_D];
} Partial;

static void merge_into(Partial *into, const Partial *from, int heads, int D) {
    for (int h = 0; h < heads; h++) {
        const double m = fmax(into->m[h], from->m[h]);
        if (m == -INFINITY) continue;
        const double a = into->m[h] == -INFINITY ? 0 : exp2(into->m[h] - m);
        const double b = from->m[h] == -INFINITY ? 0 : exp2(from->m[h] - m);
        into->l[h] = into->l[h] * a + from->l[h] * b;
        for (int d = 0; d < D; d++) into->o[h][d] = into->o[h][d] * a + from->o[h][d] * b;
        into->m[h] = m;
    }
}

static void empty(Partial *p, int heads) {
    for (int h = 0; h < heads; h++) {
        p->m[h] = -INFINITY;
        p->l[h] = 0;
        memset(p->o[h], 0, sizeof p->o[h]);
    }
}

/* One warp of one split, as the kernel's loop runs it. q is already in A's
 * layout per lane: qa[l][s][j] = q[gid][dmma_k_dim(l, s, j)] (0 past the
 * block's heads). Scores are in base 2 (q pre-scaled). */
static void run_warp(const Case *c, int warp, int key_begin, int key_end, Partial *out) {
    const int D = c->D, KSTEPS = D / 16, NTILES = D / 8, CHUNKS = D / 64, E = c->kv_bytes;
    const int GROUPS = dmma_groups(E), CHUNK_BYTES = 16 * E, VBYTES = D / 8 * E;
    double m[LANES], l[LANES], o[LANES][MAX_D / 8][2];
    /* fp8: q * 2^q_exp rounded to f16 in A (exact for bf16 q), 2^-q_exp on S */
    float amax = 0;
    for (int i = 0; i < c->heads * D; i++) amax = fmaxf(amax, (float)fabs(c->q[i]));
    const int q_exp = E == 1 ? dmma_q_exponent(amax) : 0;
    const double s_scale = ldexp(1.0, -q_exp);
    for (int ln = 0; ln < LANES; ln++) {
        m[ln] = -INFINITY;
        l[ln] = 0;
        memset(o[ln], 0, sizeof o[ln]);
    }
    for (int pass0 = key_begin; dmma_group_key0(pass0, warp, 0, E) < key_end;
         pass0 += DECODE_WARPS * dmma_warp_keys(E)) {
        /* the lanes' loads (zeros past the end) */
        static uint8_t kr[2][LANES][2][MAX_D / 4 * 2], vr[2][LANES][4][MAX_D / 8 * 2];
        for (int g = 0; g < GROUPS; g++) {
            const int key0 = dmma_group_key0(pass0, warp, g, E);
            for (int ln = 0; ln < LANES; ln++) {
                for (int nt = 0; nt < 2; nt++) {
                    const int key = key0 + dmma_k_key(ln, nt);
                    for (int ch = 0; ch < CHUNKS; ch++) {
                        uint8_t *dst = kr[g][ln][nt] + CHUNK_BYTES * ch;
                        if (key < key_end)
                            memcpy(dst, c->k + (slot_of(c, key, key0) * D + dmma_k_offset(ln, ch)) * E, CHUNK_BYTES);
                        else
                            memset(dst, 0, CHUNK_BYTES);
                    }
                }
                for (int r = 0; r < 4; r++) {
                    const int key = key0 + dmma_v_key(ln, r);
                    if (key < key_end)
                        memcpy(vr[g][ln][r], c->v + (slot_of(c, key, key0) * D + dmma_v_offset(D, ln)) * E, VBYTES);
                    else
                        memset(vr[g][ln][r], 0, VBYTES);
                }
            }
        }
        /* S, scaled and masked, and the quad's new max */
        double s[2][LANES][2][2], m_new[LANES];
        for (int ln = 0; ln < LANES; ln++) m_new[ln] = m[ln];
        for (int g = 0; g < GROUPS; g++) {
            const int key0 = dmma_group_key0(pass0, warp, g, E);
            for (int nt = 0; nt < 2; nt++) {
                double acc[LANES][4] = {{0}};
                for (int ks = 0; ks < KSTEPS; ks++) {
                    double a[LANES][8] = {{0}}, b[LANES][4];
                    for (int ln = 0; ln < LANES; ln++) {
                        const int gid = ln / 4;
                        /* A registers 0 and 2 (elements 0, 1 and 4, 5): head gid at the lane's dimensions */
                        if (gid < c->heads)
                            for (int j = 0; j < 4; j++) {
                                const double qv = c->q[gid * D + dmma_k_dim(ln, ks, j)];
                                a[ln][j < 2 ? j : j + 2] = E == 1 ? f16_round(ldexp(qv, q_exp)) : qv;
                            }
                        k_regs(kr[g][ln][nt], ks, E, b[ln]);
                    }
                    mma(acc, a, b, acc);
                }
                for (int ln = 0; ln < LANES; ln++)
                    for (int e = 0; e < 2; e++) {
                        const int key = key0 + 8 * nt + 2 * (ln % 4) + e;
                        s[g][ln][nt][e] = key < key_end ? acc[ln][e] * s_scale : -INFINITY;
                        m_new[ln] = fmax(m_new[ln], s[g][ln][nt][e]);
                    }
            }
        }
        for (int ln = 0; ln < LANES; ln += 4) { /* shuffles xor 1, 2: the quad's max */
            const double q4 = fmax(fmax(m_new[ln], m_new[ln + 1]), fmax(m_new[ln + 2], m_new[ln + 3]));
            for (int i = 0; i < 4; i++) m_new[ln + i] = q4;
        }
        for (int ln = 0; ln < LANES; ln++) {
            cr_assert(m_new[ln] > -INFINITY, "a pass whose first key is in range has a finite max");
            if (m_new[ln] > m[ln]) {
                const double corr = m[ln] == -INFINITY ? 0 : exp2(m[ln] - m_new[ln]);
                l[ln] *= corr;
                for (int nt = 0; nt < NTILES; nt++) o[ln][nt][0] *= corr, o[ln][nt][1] *= corr;
                m[ln] = m_new[ln];
            }
        }
        /* O += P V */
        for (int g = 0; g < GROUPS; g++) {
            double a[LANES][8] = {{0}};
            for (int ln = 0; ln < LANES; ln++)
                for (int nt = 0; nt < 2; nt++)
                    for (int e = 0; e < 2; e++) {
                        const double p = s[g][ln][nt][e] == -INFINITY ? 0 : exp2(s[g][ln][nt][e] - m[ln]);
                        l[ln] += p;
                        a[ln][4 * nt + e] = p; /* registers 0 and 2 */
                    }
            for (int nt = 0; nt < NTILES; nt++) {
                double b[LANES][4], acc[LANES][4];
                for (int ln = 0; ln < LANES; ln++) {
                    v_reg(vr[g][ln][0], vr[g][ln][1], nt, E, b[ln]);
                    v_reg(vr[g][ln][2], vr[g][ln][3], nt, E, b[ln] + 2);
                    acc[ln][0] = o[ln][nt][0], acc[ln][1] = o[ln][nt][1], acc[ln][2] = acc[ln][3] = 0;
                }
                mma(acc, a, b, acc);
                for (int ln = 0; ln < LANES; ln++) o[ln][nt][0] = acc[ln][0], o[ln][nt][1] = acc[ln][1];
            }
        }
    }
    empty(out, c->heads);
    for (int ln = 0; ln < LANES; ln++) {
        const int gid = ln / 4;
        if (gid >= c->heads) continue;
        out->m[gid] = m[ln];
        if (ln % 4 == 0) out->l[gid] = l[ln] + l[ln + 1] + l[ln + 2] + l[ln + 3];
        for (int nt = 0; nt < NTILES; nt++)
            for (int e = 0; e < 2; e++) out->o[gid][dmma_o_dim(D, ln, nt, e)] = o[ln][nt][e];
    }
}

/* The kernel over every split and warp, against the plain softmax. */
static void check_case(const Case *c) {
    Partial total, part;
    empty(&total, c->heads);
    const int used = decode_splits_used(c->num_keys, c->num_splits);
    const int per = decode_split_keys(c->num_keys, c->num_splits);
    for (int split = 0; split < used; split++) {
        const int begin = split * per, end = begin + per < c->num_keys ? begin + per : c->num_keys;
        cr_assert(begin % DMMA_GROUP_KEYS == 0, "groups start at multiples of 16 (one cache block each)");
        for (int w = 0; w < DECODE_WARPS; w++) {
            run_warp(c, w, begin, end, &part);
            merge_into(&total, &part, c->heads, c->D);
        }
    }
    for (int h = 0; h < c->heads; h++) {
        double mx = -INFINITY, sum = 0, want[MAX_D] = {0};
        double *sc = malloc(sizeof(double) * (size_t)c->num_keys);
        cr_assert(sc);
        for (int k = 0; k < c->num_keys; k++) {
            const uint8_t *row =
                c->k + ((size_t)c->table[k / c->block_size] * c->block_size + k % c->block_size) * c->D * c->kv_bytes;
            double dot = 0;
            for (int d = 0; d < c->D; d++) dot += c->q[h * c->D + d] * element(row, d, c->kv_bytes);
            sc[k] = dot;
            mx = fmax(mx, dot);
        }
        for (int k = 0; k < c->num_keys; k++) {
            const uint8_t *row =
                c->v + ((size_t)c->table[k / c->block_size] * c->block_size + k % c->block_size) * c->D * c->kv_bytes;
            const double p = exp2(sc[k] - mx);
            sum += p;
            for (int d = 0; d < c->D; d++) want[d] += p * element(row, d, c->kv_bytes);
        }
        free(sc);
        for (int d = 0; d < c->D; d++) {
            const double got = total.o[h][d] / total.l[h], w = want[d] / sum;
            cr_assert(fabs(got - w) <= 1e-9 * (1 + fabs(w)),
                      "%s, D %d, %d heads, %d keys, block %d, %d splits: head %d dim %d: %.12g vs %.12g",
                      c->kv_bytes == 1 ? "fp8" : "bf16", c->D, c->heads, c->num_keys, c->block_size, c->num_splits, h,
                      d, got, w);
        }
    }
}

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* A random cache (e4m3 bytes, or bf16 over a few binades) with the
 * sequence's blocks in a shuffled order among unused (NaN) ones, and random
 * q (the scale keeps exp2 of the scores tame). */
static void run(int kv_bytes, int D, int heads, int block_size, int num_keys, int num_splits, uint64_t seed) {
    const int blocks = (num_keys + block_size - 1) / block_size, pool = 2 * blocks + 3;
    const size_t elems = (size_t)pool * block_size * D;
    uint8_t *k = malloc(elems * kv_bytes), *v = malloc(elems * kv_bytes);
    int32_t *table = malloc(sizeof(int32_t) * (size_t)pool);
    double *q = malloc(sizeof(double) * (size_t)heads * D);
    cr_assert(k && v && table && q);
    for (size_t i = 0; i < elems; i++) { /* NaN where no sequence writes */
        if (kv_bytes == 1) {
            k[i] = v[i] = 0x7f;
        } else {
            k[2 * i] = v[2 * i] = 0xc0;
            k[2 * i + 1] = v[2 * i + 1] = 0x7f;
        }
    }
    for (int i = 0; i < pool; i++) table[i] = i;
    for (int i = pool - 1; i > 0; i--) {
        const int j = (int)(next(&seed) % (uint64_t)(i + 1));
        const int32_t t = table[i];
        table[i] = table[j], table[j] = t;
    }
    for (int b = 0; b < blocks; b++)
        for (int s = 0; s < block_size && b * block_size + s < num_keys; s++)
            for (int d = 0; d < D; d++) {
                const size_t at = ((size_t)table[b] * block_size + s) * D + d;
                if (kv_bytes == 1) {
                    uint8_t kb = (uint8_t)next(&seed), vb = (uint8_t)next(&seed);
                    if ((vb & 0x7f) == 0x7f) vb ^= 1; /* no NaN in the sequence's own rows */
                    k[at] = kb & 0xbf, v[at] = vb;    /* K under 1.875: scores stay finite */
                } else { /* sign, exponent 2^-4 .. 2^3, 7 random mantissa bits */
                    const uint64_t r = next(&seed);
                    for (int kv = 0; kv < 2; kv++) {
                        const uint64_t x = r >> 16 * kv;
                        const uint16_t bits = (uint16_t)((x >> 15 & 1) << 15 | (123 + (x >> 7 & 7)) << 7 | (x & 0x7f));
                        uint8_t *dst = (kv ? v : k) + 2 * at;
                        dst[0] = (uint8_t)bits, dst[1] = (uint8_t)(bits >> 8);
                    }
                }
            }
    for (int i = 0; i < heads * D; i++) q[i] = bf16_round(((double)(next(&seed) % 2001) - 1000) / 1000.0 * 0.05);
    const Case c = {D, heads, block_size, num_keys, num_splits, kv_bytes, k, v, table, q};
    check_case(&c);
    free(k), free(v), free(table), free(q);
}

Test(decode_mma_plan, lanes_cover_every_dimension_and_k_index) {
    for (int D = 64; D <= 128; D *= 2) {
        int seen[MAX_D] = {0}, v_seen[MAX_D] = {0}, o_seen[MAX_D] = {0};
        for (int ln = 0; ln < 4; ln++) /* one key's (or row's) four lanes: tig 0..3 */
            for (int s = 0; s < D / 16; s++)
                for (int j = 0; j < 4; j++) seen[dmma_k_dim(ln, s, j)]++;
        for (int n = 0; n < 8; n++)
            for (int nt = 0; nt < D / 8; nt++) v_seen[dmma_v_dim(D, n, nt)]++;
        for (int ln = 0; ln < 4; ln++)
            for (int nt = 0; nt < D / 8; nt++)
                for (int e = 0; e < 2; e++) o_seen[dmma_o_dim(D, ln, nt, e)]++;
        for (int d = 0; d < D; d++) {
            cr_assert_eq(seen[d], 1, "K dimension %d of D %d", d, D);
            cr_assert_eq(v_seen[d], 1, "V dimension %d of D %d", d, D);
            cr_assert_eq(o_seen[d], 1, "O dimension %d of D %d", d, D);
        }
    }
    for (int ln = 0; ln < LANES; ln++)
        for (int j = 0; j < 4; j++) {
            cr_assert_eq(dmma_k_index(ln, j), flash_b_k(ln, j), "byte j is B's element j");
            cr_assert_eq(dmma_k_index(ln, j), flash_a_col(ln, j < 2 ? j : j + 2), "and A's element of registers 0, 2");
            cr_assert_eq(dmma_v_key(ln, j), flash_b_k(ln, j), "V row r is B's element r");
        }
}

Test(decode_mma_plan, q_exponent_keeps_f16_in_range) {
    cr_assert_eq(dmma_q_exponent(0.0f), 0);
    cr_assert_eq(dmma_q_exponent(INFINITY), 0);
    cr_assert_eq(dmma_q_exponent(NAN), 0);
    for (int b = -140; b <= 127; b++)
        for (int i = 0; i < 4; i++) {
            const float amax = ldexpf(1.0f + i / 4.0f - (i == 3 ? 0x1p-23f : 0), b); /* 1, 1.25, 1.5, ~2 */
            if (amax == 0 || isinf(amax)) continue;
            const int e = dmma_q_exponent(amax);
            cr_assert_leq(e, 100);
            if (e < 100) {
                const double scaled = ldexp(amax, e);
                cr_assert(scaled >= 0x1p14 && scaled < 0x1p15, "amax %g: 2^%d -> %g", amax, e, scaled);
            }
            cr_assert(isnormal(ldexpf(1.0f, -e)), "2^-%d stays normal", e);
        }
}

Test(decode_mma_plan, pairs_from_prmt) {
    const uint32_t a = 0x03020100u, b = 0x13121110u;
    cr_assert_eq(prmt(a, b, dmma_pair_selector(0)), 0x11011000u);
    cr_assert_eq(prmt(a, b, dmma_pair_selector(1)), 0x13031202u);
    cr_assert_eq(prmt(a, b, dmma_bf16_pair_selector(0)), 0x11100100u);
    cr_assert_eq(prmt(a, b, dmma_bf16_pair_selector(1)), 0x13120302u);
}

static void odd_lengths(int kv_bytes) {
    static const int lengths[] = {1, 2, 15, 16, 17, 31, 32, 33, 127, 128, 129, 255, 256, 257, 1000};
    static const int splits[] = {1, 3, 64};
    static const int block_sizes[] = {8, 16, 48, 256};
    static const int heads[] = {1, 2, 5, 8};
    uint64_t seed = 0x9e3779b97f4a7c15ull + (uint64_t)kv_bytes;
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
        for (size_t si = 0; si < sizeof splits / sizeof splits[0]; si++)
            for (size_t bi = 0; bi < sizeof block_sizes / sizeof block_sizes[0]; bi++) {
                const int h = heads[(li + si + bi) % 4], D = (li + bi) % 2 ? 64 : 128;
                run(kv_bytes, D, h, block_sizes[bi], lengths[li], splits[si], next(&seed));
            }
}

Test(decode_mma_plan, fp8_at_odd_lengths_splits_and_blocks, .timeout = 300) { odd_lengths(1); }
Test(decode_mma_plan, bf16_at_odd_lengths_splits_and_blocks, .timeout = 300) { odd_lengths(2); }

Test(decode_mma_plan, long_context, .timeout = 300) {
    run(1, 128, 2, 256, 16384, 33, 7);
    run(1, 128, 8, 16, 4097, 1, 8);
    run(2, 128, 8, 256, 16384, 64, 9);
    run(2, 64, 4, 16, 4097, 3, 10);
}
