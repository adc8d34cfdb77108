/*
 * sampler_cases.h - logits rows and sampling parameters that stress the
 * sampler's exact semantics, shared by the CPU tests (against a reference
 * written straight from sampler.h) and the CUDA sampler's tests (against the
 * CPU sampler): ties, flat and peaked rows, underflow, negative logits,
 * every filter alone and together, penalties of both signs.
 */
#ifndef NANOVLLM_TEST_SAMPLER_CASES_H
#define NANOVLLM_TEST_SAMPLER_CASES_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "engine/sampling_params.h"

static inline uint64_t case_next(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return *state >> 11;
}

/* Uniform in [0, 1). */
static inline double case_uniform(uint64_t *state) {
    return (double)case_next(state) * (1.0 / 9007199254740992.0);
}

static inline double case_gauss(uint64_t *state) {
    double u1 = case_uniform(state) + 1e-300, u2 = case_uniform(state);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#define NUM_ROW_KINDS 10

/* Row kinds: 0 gaussian, 1 peaked, 2 all equal, 3 few distinct values (many
 * exact ties), 4 very wide (most probabilities underflow to 0), 5 nearly
 * flat (top-p keeps most of the vocabulary), 6 large negative logits,
 * 7 bf16-rounded gaussian (coarse values, ties), 8 two tied spikes,
 * 9 probabilities exactly 1 and 1/2, the halves holding as much as the ones
 * (at temperature 1 and top_p 0.5 the target equals a total exactly). */
static inline void case_logits(float *l, int vocab, int kind, uint64_t seed) {
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + (uint64_t)kind;
    static const float levels[4] = {-1.0f, 0.0f, 0.5f, 2.0f};
    for (int i = 0; i < vocab; i++) {
        double g = case_gauss(&st);
        switch (kind) {
        case 0: l[i] = (float)(2.0 * g); break;
        case 1: l[i] = (float)g + (case_next(&st) % 4000 == 0 ? 15.0f : 0.0f); break;
        case 2: l[i] = 0.0f; break;
        case 3: l[i] = levels[case_next(&st) % 4]; break;
        case 4: l[i] = (float)(12.0 * g); break;
        case 5: l[i] = (float)(0.05 * g); break;
        case 6: l[i] = (float)(-50.0 + 3.0 * g); break;
        case 7: {
            float f = (float)(3.0 * g);
            uint32_t b;
            memcpy(&b, &f, 4);
            b &= 0xFFFF0000u;
            memcpy(&f, &b, 4);
            l[i] = f;
            break;
        }
        case 8: l[i] = (float)(0.5 * g); break;
        default: /* sm_exp(-0.693147182f) == 0.5f exactly */
            l[i] = i >= vocab - vocab % 3 ? -1000.0f : i % 3 == 0 ? 0.0f : -0.693147182f;
            break;
        }
    }
    if (kind == 1 && vocab > 0) l[(int)(case_next(&st) % (uint64_t)vocab)] = 18.0f;
    if (kind == 8 && vocab > 1) {
        l[vocab / 3] = 9.0f;
        l[vocab - 1] = 9.0f;
    }
}

/* Parameter sets: each filter alone and together, greedy, temperatures,
 * penalties of both signs. */
static inline int case_params(SamplingParams *out, int max) {
    SamplingParams base = sampling_params_default();
    base.temperature = 1.0f;
    SamplingParams p[64];
    int n = 0;
    p[n] = base, p[n].temperature = 0.0f, n++;                      /* greedy */
    p[n] = base, n++;                                                /* plain */
    p[n] = base, p[n].temperature = 0.7f, n++;
    p[n] = base, p[n].temperature = 1.7f, n++;
    p[n] = base, p[n].temperature = 1e-5f, n++;                      /* the smallest non-greedy */
    p[n] = base, p[n].top_k = 1, n++;
    p[n] = base, p[n].top_k = 5, n++;
    p[n] = base, p[n].top_k = 50, n++;
    p[n] = base, p[n].top_k = 3000, n++;
    p[n] = base, p[n].top_p = 0.1f, n++;
    p[n] = base, p[n].top_p = 0.5f, n++;
    p[n] = base, p[n].top_p = 0.9f, n++;
    p[n] = base, p[n].top_p = 0.999f, n++;
    p[n] = base, p[n].top_p = 0.99999994f, n++;                      /* the largest float below 1 */
    p[n] = base, p[n].min_p = 0.02f, n++;
    p[n] = base, p[n].min_p = 0.5f, n++;
    p[n] = base, p[n].min_p = 1.0f, n++;
    p[n] = base, p[n].top_k = 40, p[n].top_p = 0.9f, p[n].min_p = 0.05f, p[n].temperature = 0.6f, n++;
    p[n] = base, p[n].top_k = 7, p[n].top_p = 0.3f, n++;
    p[n] = base, p[n].min_p = 0.1f, p[n].top_p = 0.8f, n++;
    p[n] = base, p[n].repetition_penalty = 1.3f, n++;
    p[n] = base, p[n].repetition_penalty = 0.7f, p[n].temperature = 0.0f, n++;
    p[n] = base, p[n].frequency_penalty = 0.5f, p[n].presence_penalty = 0.25f, n++;
    p[n] = base, p[n].frequency_penalty = -1.0f, p[n].presence_penalty = -2.0f, p[n].top_p = 0.9f, n++;
    p[n] = base, p[n].repetition_penalty = 1.1f, p[n].frequency_penalty = 0.3f,
    p[n].presence_penalty = 0.4f, p[n].top_k = 20, p[n].top_p = 0.95f, p[n].min_p = 0.01f,
    p[n].temperature = 0.8f, n++;
    if (n > max) n = max;
    memcpy(out, p, sizeof(SamplingParams) * (size_t)n);
    return n;
}

/* logit_bias entries for p over a row of logits: distinct tokens, biases
 * of both signs from tiny to +-100, the row's top token among them (banned,
 * forced or nudged) and up to 11 others. */
static inline void case_logit_bias(SamplingParams *p, const float *logits, int vocab, uint64_t seed) {
    static const float biases[8] = {100.0f, -100.0f, 2.5f, -0.75f, 0.3f, -7.0f, 12.25f, 1e-3f};
    uint64_t st = seed ^ 0xB1A5ull;
    int top = 0;
    for (int i = 1; i < vocab; i++)
        if (logits[i] > logits[top]) top = i;
    int want = 1 + (int)(case_next(&st) % 12);
    if (want > vocab) want = vocab;
    p->num_logit_bias = 0;
    for (int tries = 0; p->num_logit_bias < want && tries < 1000; tries++) {
        int32_t t = p->num_logit_bias == 0 ? top : (int32_t)(case_next(&st) % (uint64_t)vocab);
        bool dup = false;
        for (int k = 0; k < p->num_logit_bias; k++) dup |= p->logit_bias[k].token == t;
        if (dup) continue;
        p->logit_bias[p->num_logit_bias++] = (LogitBias){t, biases[case_next(&st) % 8]};
    }
}

/* A history: prompt and output tokens with repeats (output ids cluster so
 * that counts go above 1). */
static inline void case_history(int32_t *prompt, int prompt_len, int32_t *output, int output_len,
                                int vocab, uint64_t seed) {
    uint64_t st = seed ^ 0xC0FFEEull;
    for (int i = 0; i < prompt_len; i++) prompt[i] = (int32_t)(case_next(&st) % (uint64_t)vocab);
    int span = vocab < 16 ? vocab : 16;
    for (int i = 0; i < output_len; i++)
        output[i] = i % 3 == 0 ? prompt[case_next(&st) % (uint64_t)prompt_len]
                               : (int32_t)(case_next(&st) % (uint64_t)span);
}

#endif
