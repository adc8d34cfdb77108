/*
 * attention_reference.c - see attention_reference.h.
 */
#include "attention_reference.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

void paged_attention_reference(double *out, const float *q, const float *kf, const float *vf,
                               const int32_t *table, int ctx, int bs, int kv_heads, int kv_head, int G, int D) {
    double *score = malloc(sizeof(double) * (size_t)ctx);
    cr_assert(score);
    for (int g = 0; g < G; g++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < ctx; j++) {
            size_t row = (((size_t)table[j / bs] * kv_heads + kv_head) * bs + j % bs) * D;
            double d = 0;
            for (int e = 0; e < D; e++) d += (double)q[g * D + e] * kf[row + e];
            score[j] = d / sqrt((double)D);
            mx = fmax(mx, score[j]);
        }
        for (int j = 0; j < ctx; j++) sum += (score[j] = exp(score[j] - mx));
        for (int e = 0; e < D; e++) {
            double o = 0;
            for (int j = 0; j < ctx; j++) {
                size_t row = (((size_t)table[j / bs] * kv_heads + kv_head) * bs + j % bs) * D;
                o += score[j] / sum * vf[row + e];
            }
            out[g * D + e] = o;
        }
    }
    free(score);
}

void decode_in_parts(float *out, CpuIsa isa, const DecodeKv *kv, const float *q, int G, int ctx, int parts,
                     const DecodeScratch *s) {
    DecodePart p[4];
    int D = kv->head_dim;
    for (int i = 0; i < parts; i++)
        p[i] = (DecodePart){s->max + i * G, s->sum + i * G, s->acc + (size_t)i * G * D};
    for (int i = 0; i < parts; i++) {
        int k0 = (int)((long)ctx * i / parts), k1 = (int)((long)ctx * (i + 1) / parts);
        cr_assert(k0 < k1);
        decode_attend_range(isa, kv, q, G, k0, k1, s->scores, p[i]);
    }
    decode_finish(out, D, p, parts, G, D);
}
