/*
 * cpu_ops.c - per-token operations (see cpu_ops.h). Plain loops: they are a
 * few percent of the forward pass next to the matmuls and attention.
 */
#include "cpu_ops.h"

#include <math.h>
#include <string.h>

#include "half.h"

void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * inv * w[i];
}

void add_rmsnorm(float *x, const float *delta, float *out, const float *w, int n, float eps) {
    for (int i = 0; i < n; i++) x[i] += delta[i];
    rmsnorm(out, x, w, n, eps);
}

void rope_inv_freq(double *inv_freq, int head_dim, double theta) {
    for (int i = 0; i < head_dim / 2; i++) inv_freq[i] = 1.0 / pow(theta, (2.0 * i) / head_dim);
}

void rope_cos_sin(float *cos_sin, int pos, const double *inv_freq, int half_dim) {
    for (int i = 0; i < half_dim; i++) {
        double angle = (double)pos * inv_freq[i];
        cos_sin[2 * i] = (float)cos(angle);
        cos_sin[2 * i + 1] = (float)sin(angle);
    }
}

void rope_apply(float *head, int head_dim, const float *cos_sin) {
    int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        float x1 = head[i], x2 = head[i + half];
        head[i] = x1 * c - x2 * s;
        head[i + half] = x2 * c + x1 * s;
    }
}

void silu_mul(float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

void embed_row(float *out, const Weight *embed, int id) {
    size_t off = (size_t)id * (size_t)embed->cols;
    if (embed->type == WEIGHT_F32) {
        memcpy(out, (const float *)embed->data + off, sizeof(float) * (size_t)embed->cols);
        return;
    }
    const uint16_t *row = (const uint16_t *)embed->data + off;
    for (int i = 0; i < embed->cols; i++) out[i] = bf16_to_f32(row[i]);
}
