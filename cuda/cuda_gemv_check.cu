/*
 * cuda_gemv_check.cu - the normalising gemvs (cuda_gemv.cu's NORM and GLU
 * forms, bf16 and FP8) and the experts' gate/up with SiLU x up
 * (cuda_gemv_experts_glu) against the launches they stand for, on random
 * data, byte for byte: the runner's start-up check (a fused decode step
 * must be the unfused one's numbers, and this is the one place a GPU, a
 * driver or a compiler could make it otherwise without a test seeing it)
 * and the body of tests/test_cuda_gemv_fused.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_fp8_plan.h"
#include "cuda_gemv_check.h"

static uint64_t next_random(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s;
}

/* Uniform in [-scale, scale). */
static float random_float(uint64_t *s, float scale) {
    return ((float)(next_random(s) >> 40) / (float)(1u << 24) * 2.0f - 1.0f) * scale;
}

/* The device buffers of one case, freed together. */
enum { W, W_SCALES, X, X_REF, DELTA, NORM_W, X_OUT, H, H_REF, Y, Y_REF, GATE_UP, BUFFERS };

/* bytes of host data (random floats of `scale`, or bf16 / e4m3 bytes by
 * kind) put on the device at *dst. kind: 0 floats, 1 bf16, 2 e4m3. */
static int upload_random(void **dst, size_t count, int kind, float scale, uint64_t *s, Error *err) {
    const size_t bytes = count * (kind == 0 ? 4 : kind == 1 ? 2 : 1);
    void *host = malloc(bytes ? bytes : 1);
    if (!host) return error_set(err, "out of memory (the gemv check)");
    for (size_t i = 0; i < count; i++) {
        if (kind == 0) ((float *)host)[i] = random_float(s, scale);
        else if (kind == 1) {
            const float f = random_float(s, scale);
            uint32_t bits;
            memcpy(&bits, &f, 4);
            ((uint16_t *)host)[i] = (uint16_t)(bits >> 16);
        } else {
            uint8_t b = (uint8_t)(next_random(s) >> 56);
            ((uint8_t *)host)[i] = (b & 0x7f) == 0x7f ? (uint8_t)(b ^ 1) : b; /* no NaNs */
        }
    }
    int rc = (*dst = cuda_alloc(bytes, err)) ? cuda_upload(*dst, host, bytes, err) : -1;
    free(host);
    return rc;
}

/* A random matrix of rows x in: bf16, or e4m3 with per-row scales 2^-6 ..
 * 2^-9 (CudaMatrix's layout) into *scales. */
static int upload_matrix(void **w, void **scales, int rows, int in, bool fp8, uint64_t *seed, Error *err) {
    int rc = upload_random(w, (size_t)rows * in, fp8 ? 2 : 1, 0.05f, seed, err);
    if (rc || !fp8) return rc;
    const size_t n = fp8_row_scale_count(rows, in);
    float *sc = (float *)malloc(n * sizeof(float));
    rc = sc ? 0 : error_set(err, "out of memory (the gemv check)");
    for (size_t i = 0; rc == 0 && i < n; i++) sc[i] = ldexpf(1.0f, -6 - (int)(i % 4));
    if (rc == 0) rc = (*scales = cuda_alloc(n * sizeof(float), err)) ? 0 : -1;
    if (rc == 0) rc = cuda_upload(*scales, sc, n * sizeof(float), err);
    free(sc);
    return rc;
}

static int poisoned(void **dst, size_t bytes, cudaStream_t s, Error *err) {
    if (!(*dst = cuda_alloc(bytes, err))) return -1;
    CUDA_TRY(cudaMemsetAsync(*dst, 0xff, bytes, s), "clearing a buffer of the gemv check", err);
    return 0;
}

/* 1 and why filled when the two device buffers differ (`shape` says which
 * case). */
static int compare(const void *a, const void *b, size_t bytes, const char *what, const char *shape, char *why,
                   size_t why_cap, Error *err) {
    unsigned char *ha = (unsigned char *)malloc(bytes), *hb = (unsigned char *)malloc(bytes);
    int rc = ha && hb ? 0 : error_set(err, "out of memory (the gemv check)");
    if (rc == 0) rc = cuda_download(ha, a, bytes, err);
    if (rc == 0) rc = cuda_download(hb, b, bytes, err);
    for (size_t i = 0; rc == 0 && i < bytes; i++)
        if (ha[i] != hb[i]) {
            snprintf(why, why_cap, "%s differs from the separate launches' at byte %zu of %zu (%s)", what, i, bytes,
                     shape);
            rc = 1;
        }
    free(ha);
    free(hb);
    return rc;
}

extern "C" int cuda_gemv_norm_check(CudaGemvNormCase c, uint64_t seed, CudaStream stream, char *why, size_t why_cap,
                                    Error *err) {
    why[0] = '\0';
    cudaStream_t s = (cudaStream_t)stream;
    const int rows = c.rows, in = c.in, w_rows = c.glu ? 2 * c.out : c.out;
    const size_t xs = (size_t)rows * in, ws = (size_t)w_rows * in;
    const size_t y_bytes = (size_t)rows * c.out * (c.glu ? sizeof(uint16_t) : sizeof(float));
    const float eps = 1e-6f;
    void *d[BUFFERS] = {};
    int rc = upload_matrix(&d[W], &d[W_SCALES], w_rows, in, c.fp8, &seed, err);
    if (rc == 0) rc = upload_random(&d[X], xs, 0, 2.0f, &seed, err);
    if (rc == 0 && c.delta) rc = upload_random(&d[DELTA], xs, 0, 1.0f, &seed, err);
    if (rc == 0) rc = upload_random(&d[NORM_W], (size_t)in, 0, 1.5f, &seed, err);
    if (rc == 0) rc = poisoned(&d[X_REF], xs * sizeof(float), s, err);
    if (rc == 0) rc = poisoned(&d[X_OUT], xs * sizeof(float), s, err);
    if (rc == 0) rc = poisoned(&d[H], xs * sizeof(uint16_t), s, err);
    if (rc == 0) rc = poisoned(&d[H_REF], xs * sizeof(uint16_t), s, err);
    if (rc == 0) rc = poisoned(&d[Y], y_bytes, s, err);
    if (rc == 0) rc = poisoned(&d[Y_REF], y_bytes, s, err);
    if (rc == 0 && c.glu) rc = poisoned(&d[GATE_UP], (size_t)rows * w_rows * sizeof(float), s, err);
    /* the separate launches, on a copy of the residual (add_rmsnorm adds in place) */
    if (rc == 0 && cudaMemcpyAsync(d[X_REF], d[X], xs * sizeof(float), cudaMemcpyDeviceToDevice, s) != cudaSuccess)
        rc = error_set(err, "copying a buffer of the gemv check");
    float *plain = (float *)(c.glu ? d[GATE_UP] : d[Y_REF]);
    const uint16_t *h_ref = (const uint16_t *)d[H_REF];
    if (rc == 0)
        rc = cuda_add_rmsnorm((float *)d[X_REF], (const float *)d[DELTA], (uint16_t *)d[H_REF], (const float *)d[NORM_W],
                              rows, in, eps, stream, err);
    if (rc == 0)
        rc = c.fp8 ? cuda_gemv_fp8(plain, h_ref, (const uint8_t *)d[W], (const float *)d[W_SCALES], rows, w_rows, in,
                                   stream, err)
                   : cuda_gemv(plain, h_ref, (const uint16_t *)d[W], rows, w_rows, in, stream, err);
    if (rc == 0 && c.glu) rc = cuda_silu_mul((uint16_t *)d[Y_REF], plain, rows, c.out, stream, err);
    /* the fused launch */
    const CudaGemvNorm n = {(const float *)d[X], (const float *)d[DELTA], (const float *)d[NORM_W], (float *)d[X_OUT],
                            (uint16_t *)d[H], eps};
    const CudaMatrix w = {d[W], (const float *)d[W_SCALES], NULL};
    if (rc == 0 && !cuda_gemv_norm_fits(rows, in, &n, w)) {
        snprintf(why, why_cap, "the fused gemv does not take %d rows of %d", rows, in);
        rc = 1;
    }
    if (rc == 0)
        rc = c.glu ? cuda_gemv_norm_glu((uint16_t *)d[Y], &n, w, rows, c.out, in, stream, err)
                   : cuda_gemv_norm((float *)d[Y], &n, w, rows, c.out, in, stream, err);
    if (rc == 0 && cudaStreamSynchronize(s) != cudaSuccess) rc = error_set(err, "running the gemv check");
    char shape[96];
    snprintf(shape, sizeof shape, "%d rows, %d x %d, delta %d, glu %d, fp8 %d", c.rows, c.out, c.in, c.delta, c.glu,
             c.fp8);
    if (rc == 0) rc = compare(d[Y], d[Y_REF], y_bytes, c.glu ? "SiLU x up" : "the product", shape, why, why_cap, err);
    if (rc == 0) rc = compare(d[H], d[H_REF], xs * sizeof(uint16_t), "h", shape, why, why_cap, err);
    if (rc == 0 && c.delta)
        rc = compare(d[X_OUT], d[X_REF], xs * sizeof(float), "the new residual", shape, why, why_cap, err);
    for (int i = 0; i < BUFFERS; i++) cuda_free(d[i]);
    return rc;
}

extern "C" int cuda_gemv_experts_glu_check(CudaGemvExpertsCase c, uint64_t seed, CudaStream stream, char *why,
                                           size_t why_cap, Error *err) {
    why[0] = '\0';
    cudaStream_t s = (cudaStream_t)stream;
    const int tokens = (c.pairs + c.x_div - 1) / c.x_div;
    const size_t act_bytes = (size_t)c.pairs * c.out * sizeof(uint16_t);
    void *d[BUFFERS] = {};
    int32_t *ids = (int32_t *)malloc(sizeof(int32_t) * (size_t)(c.pairs > 0 ? c.pairs : 1));
    int rc = ids ? 0 : error_set(err, "out of memory (the gemv check)");
    for (int p = 0; rc == 0 && p < c.pairs; p++) ids[p] = (int)(next_random(&seed) >> 33) % c.experts;
    /* W: the stack [experts][2 out, in]; X: the tokens' rows; X_REF: the ids */
    if (rc == 0) rc = upload_matrix(&d[W], &d[W_SCALES], c.experts * 2 * c.out, c.in, c.fp8, &seed, err);
    if (rc == 0) rc = upload_random(&d[X], (size_t)tokens * c.in, 1, 2.0f, &seed, err);
    if (rc == 0) rc = (d[X_REF] = cuda_alloc(sizeof(int32_t) * (size_t)c.pairs, err)) ? 0 : -1;
    if (rc == 0) rc = cuda_upload(d[X_REF], ids, sizeof(int32_t) * (size_t)c.pairs, err);
    if (rc == 0) rc = poisoned(&d[GATE_UP], (size_t)c.pairs * 2 * c.out * sizeof(float), s, err);
    if (rc == 0) rc = poisoned(&d[Y], act_bytes, s, err);
    if (rc == 0) rc = poisoned(&d[Y_REF], act_bytes, s, err);
    const CudaMatrix w = {d[W], (const float *)d[W_SCALES], NULL};
    const uint16_t *x = (const uint16_t *)d[X];
    const int32_t *expert_of = (const int32_t *)d[X_REF];
    if (rc == 0)
        rc = cuda_gemv_experts((float *)d[GATE_UP], x, c.x_div, w, expert_of, c.pairs, 2 * c.out, c.in, stream, err);
    if (rc == 0)
        rc = cuda_silu_mul_rows((uint16_t *)d[Y_REF], (const float *)d[GATE_UP], c.pairs, NULL, c.out, stream, err);
    if (rc == 0) rc = cuda_gemv_experts_glu((uint16_t *)d[Y], x, c.x_div, w, expert_of, c.pairs, c.out, c.in, stream, err);
    if (rc == 0 && cudaStreamSynchronize(s) != cudaSuccess) rc = error_set(err, "running the expert gemv check");
    char shape[96];
    snprintf(shape, sizeof shape, "%d pairs of %d experts, %d x %d, fp8 %d", c.pairs, c.experts, c.out, c.in, c.fp8);
    if (rc == 0) rc = compare(d[Y], d[Y_REF], act_bytes, "the experts' SiLU x up", shape, why, why_cap, err);
    for (int i = 0; i < BUFFERS; i++) cuda_free(d[i]);
    free(ids);
    return rc;
}
