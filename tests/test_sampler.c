/*
 * test_sampler.c - Philox against Random123's known answers, and every
 * sampling control against its definition on small vocabularies.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "engine/philox.h"
#include "engine/sampler.h"

Test(sampler, philox_known_answers) {
    /* Random123's kat_vectors for philox4x32-10 */
    struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        philox4x32_10(kat[i].ctr, kat[i].key, out);
        cr_expect(memcmp(out, kat[i].out, sizeof out) == 0, "vector %d", i);
    }
    double sum = 0;
    for (uint32_t p = 0; p < 100000; p++) {
        double u = philox_uniform(42, 0, p);
        cr_assert(u >= 0.0 && u < 1.0);
        sum += u;
    }
    cr_expect(fabs(sum / 100000 - 0.5) < 0.005);
    cr_expect(philox_uniform(42, 0, 7) != philox_uniform(42, 1, 7), "sample index is in the key");
    cr_expect(philox_uniform(42, 0, 7) != philox_uniform(43, 0, 7));
}

#define V 8
/* probabilities 1/2, 1/4, ... 1/128, 1/128 */
static void dyadic_logits(float *l) {
    for (int i = 0; i < V; i++) l[i] = (float)log(i < V - 1 ? pow(0.5, i + 1) : pow(0.5, V - 1));
}

/* Frequencies of 40000 draws at consecutive positions. */
static void frequencies(const SamplingParams *p, double *freq) {
    SamplerScratch s;
    Error err;
    cr_assert(sampler_scratch_init(&s, V, &err) == 0);
    memset(freq, 0, sizeof(double) * V);
    for (uint32_t pos = 0; pos < 40000; pos++) {
        float l[V];
        dyadic_logits(l);
        SampleInput in = {.params = p, .seed = 1234, .position = pos};
        freq[sampler_sample(l, &in, &s, NULL)] += 1.0 / 40000;
    }
    sampler_scratch_free(&s);
}

static void expect_distribution(const double *got, const double *want, const char *what) {
    for (int i = 0; i < V; i++) {
        double sd = sqrt(want[i] * (1 - want[i]) / 40000) + 1e-9;
        cr_expect(fabs(got[i] - want[i]) <= 5 * sd, "%s: token %d at %.4f, expected %.4f", what, i,
                  got[i], want[i]);
    }
}

Test(sampler, temperature_top_k_top_p_min_p) {
    SamplingParams p = sampling_params_default();
    p.temperature = 1.0f;
    double got[V], want[V];
    frequencies(&p, got);
    for (int i = 0; i < V; i++) want[i] = i < V - 1 ? pow(0.5, i + 1) : pow(0.5, V - 1);
    expect_distribution(got, want, "temperature 1");

    p.temperature = 0.5f; /* squares the probabilities, renormalised */
    frequencies(&p, got);
    double z = 0;
    for (int i = 0; i < V; i++) z += want[i] * want[i];
    double t2[V];
    for (int i = 0; i < V; i++) t2[i] = want[i] * want[i] / z;
    expect_distribution(got, t2, "temperature 0.5");

    p.temperature = 1.0f;
    p.top_k = 2;
    frequencies(&p, got);
    double k2[V] = {2.0 / 3, 1.0 / 3};
    expect_distribution(got, k2, "top_k 2");

    p.top_k = 0;
    p.top_p = 0.7f; /* 0.5 < 0.7 <= 0.75: the nucleus is the first two */
    frequencies(&p, got);
    expect_distribution(got, k2, "top_p 0.7");

    p.top_p = 1.0f;
    p.min_p = 0.2f; /* keeps p >= 0.1: 1/2, 1/4, 1/8 */
    frequencies(&p, got);
    double m3[V] = {4.0 / 7, 2.0 / 7, 1.0 / 7};
    expect_distribution(got, m3, "min_p 0.2");

    p.min_p = 0.0f;
    p.top_k = 1;
    frequencies(&p, got);
    double one[V] = {1.0};
    expect_distribution(got, one, "top_k 1 is greedy");
}

Test(sampler, greedy_and_determinism) {
    SamplerScratch s;
    Error err;
    cr_assert(sampler_scratch_init(&s, V, &err) == 0);
    SamplingParams p = sampling_params_default();
    float l[V] = {0.1f, 3.0f, 2.0f, 3.0f, -1.0f, 0.0f, 0.5f, 1.0f};
    SampleInput in = {.params = &p, .seed = 9, .position = 3};
    cr_expect_eq(sampler_sample(l, &in, &s, NULL), 1, "greedy: first of equal maxima");
    p.temperature = 0.8f;
    int32_t first = -1;
    for (int rep = 0; rep < 3; rep++) {
        float m[V] = {0.1f, 3.0f, 2.0f, 3.0f, -1.0f, 0.0f, 0.5f, 1.0f};
        int32_t t = sampler_sample(m, &in, &s, NULL);
        if (rep == 0) first = t;
        cr_expect_eq(t, first, "same seed and position, same token");
    }
    sampler_scratch_free(&s);
}

Test(sampler, penalties) {
    SamplerScratch s;
    Error err;
    cr_assert(sampler_scratch_init(&s, V, &err) == 0);
    SamplingParams p = sampling_params_default();
    float l[V] = {2.0f, 1.0f, -1.0f, -2.0f, 0.5f, 0.0f, 0.0f, 0.0f};
    int32_t prompt[2] = {0, 3}, output[3] = {1, 1, 2};
    SampleInput in = {.params = &p, .prompt = prompt, .prompt_len = 2, .output = output, .output_len = 3};
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    sampler_sample(l, &in, &s, NULL);
    cr_expect_float_eq(l[0], 1.0f, 1e-6, "positive logit of a prompt token is divided");
    cr_expect_float_eq(l[3], -4.0f, 1e-6, "negative logit is multiplied");
    cr_expect_float_eq(l[1], 0.5f - 2 * 0.5f - 0.25f, 1e-6, "repetition, then 2 x frequency + presence");
    cr_expect_float_eq(l[2], -2.0f - 0.5f - 0.25f, 1e-6);
    cr_expect_float_eq(l[4], 0.5f, 0, "untouched");
    /* the scratch is clean again: a second call with no history changes nothing */
    float m[V] = {2.0f, 1.0f, -1.0f, -2.0f, 0.5f, 0.0f, 0.0f, 0.0f};
    SampleInput none = {.params = &p};
    sampler_sample(m, &none, &s, NULL);
    cr_expect_float_eq(m[1], 1.0f, 0);
    sampler_scratch_free(&s);
}

Test(sampler, logprobs_from_raw_logits) {
    SamplerScratch s;
    Error err;
    cr_assert(sampler_scratch_init(&s, V, &err) == 0);
    SamplingParams p = sampling_params_default();
    p.logprobs = 3;
    p.repetition_penalty = 3.0f; /* does not affect logprobs */
    float l[V];
    dyadic_logits(l);
    int32_t prompt[1] = {0};
    SampleInput in = {.params = &p, .prompt = prompt, .prompt_len = 1};
    SampleLogprobs lp;
    int32_t t = sampler_sample(l, &in, &s, &lp);
    cr_expect_eq(t, 1, "the penalty moved greedy off token 0");
    cr_expect_float_eq(lp.logprob, log(0.25), 1e-5);
    cr_expect_eq(lp.num_top, 3);
    cr_expect(lp.top_ids[0] == 0 && lp.top_ids[1] == 1 && lp.top_ids[2] == 2);
    cr_expect_float_eq(lp.top_logprobs[0], log(0.5), 1e-5);
    cr_expect_float_eq(lp.top_logprobs[2], log(0.125), 1e-5);
    sampler_scratch_free(&s);
}

/* logprobs 0: the chosen token's logprob and no top list (a zero-length top
 * list once read the entry before its array). */
Test(sampler, logprobs_zero_has_no_top) {
    SamplerScratch s;
    Error err;
    cr_assert(sampler_scratch_init(&s, V, &err) == 0);
    SamplingParams p = sampling_params_default();
    p.logprobs = 0;
    float l[V];
    dyadic_logits(l);
    SampleInput in = {.params = &p};
    SampleLogprobs lp;
    memset(&lp, 0xFF, sizeof lp); /* num_top -1 and garbage ids: nothing may read them */
    cr_expect_eq(sampler_sample(l, &in, &s, &lp), 0);
    cr_expect_float_eq(lp.logprob, log(0.5), 1e-5);
    cr_expect_eq(lp.num_top, 0);
    sampler_scratch_free(&s);
}

/* ---- logit_bias ---------------------------------------------------------------- */

/* +100 forces a token, greedy or at temperature 1 and whatever the filters;
 * -100 bans the greedy token. */
Test(sampler, logit_bias_forces_and_bans) {
    SamplerScratch s;
    Error err;
    cr_assert(sampler_scratch_init(&s, V, &err) == 0);
    SamplingParams p = sampling_params_default();
    p.num_logit_bias = 1;
    p.logit_bias[0] = (LogitBias){6, 100.0f}; /* 1/128: the second least likely */
    for (int t = 0; t < 3; t++) {
        p.temperature = t == 0 ? 0.0f : 1.0f;
        p.top_k = t == 2 ? 2 : 0;
        p.top_p = t == 2 ? 0.5f : 1.0f;
        for (uint32_t pos = 0; pos < 2000; pos++) {
            float l[V];
            dyadic_logits(l);
            SampleInput in = {.params = &p, .seed = 77, .position = pos};
            cr_assert_eq(sampler_sample(l, &in, &s, NULL), 6, "temperature %g, position %u", p.temperature, pos);
        }
    }
    p = sampling_params_default();
    p.num_logit_bias = 1;
    p.logit_bias[0] = (LogitBias){0, -100.0f};
    float l[V];
    dyadic_logits(l);
    SampleInput in = {.params = &p};
    cr_expect_eq(sampler_sample(l, &in, &s, NULL), 1, "the greedy token is banned: the next one");
    sampler_scratch_free(&s);
}

/* A bias is an addition to the logit: the draws follow softmax(l + bias). */
Test(sampler, logit_bias_shifts_probabilities) {
    SamplingParams p = sampling_params_default();
    p.temperature = 1.0f;
    p.num_logit_bias = 3;
    p.logit_bias[0] = (LogitBias){0, -(float)log(4.0)}; /* 1/2 -> 1/8 */
    p.logit_bias[1] = (LogitBias){3, (float)log(8.0)};  /* 1/16 -> 1/2 */
    p.logit_bias[2] = (LogitBias){7, (float)log(16.0)}; /* 1/128 -> 1/8 */
    double got[V], want[V], z = 0;
    frequencies(&p, got);
    for (int i = 0; i < V; i++) {
        float l[V];
        dyadic_logits(l);
        double b = 0;
        for (int k = 0; k < p.num_logit_bias; k++)
            if (p.logit_bias[k].token == i) b = p.logit_bias[k].bias;
        want[i] = exp((double)l[i] + b);
        z += want[i];
    }
    for (int i = 0; i < V; i++) want[i] /= z;
    expect_distribution(got, want, "biased");

    /* token for token: the same as sampling logits that already carry the biases */
    SamplerScratch s;
    Error err;
    cr_assert(sampler_scratch_init(&s, V, &err) == 0);
    SamplingParams plain = p;
    plain.num_logit_bias = 0;
    p.top_p = plain.top_p = 0.9f;
    p.repetition_penalty = plain.repetition_penalty = 1.5f; /* after the bias */
    int32_t prompt[2] = {3, 7};
    for (uint32_t pos = 0; pos < 3000; pos++) {
        float a[V], b[V];
        dyadic_logits(a);
        dyadic_logits(b);
        for (int k = 0; k < p.num_logit_bias; k++) b[p.logit_bias[k].token] += p.logit_bias[k].bias;
        SampleInput in = {.params = &p, .seed = 5, .position = pos, .prompt = prompt, .prompt_len = 2};
        SampleInput ref = in;
        ref.params = &plain;
        cr_assert_eq(sampler_sample(a, &in, &s, NULL), sampler_sample(b, &ref, &s, NULL), "position %u", pos);
    }
    sampler_scratch_free(&s);
}

/* After the mask: a masked token stays masked whatever its bias; logprobs
 * see the biased logits. */
Test(sampler, logit_bias_after_the_mask_before_logprobs) {
    SamplerScratch s;
    Error err;
    cr_assert(sampler_scratch_init(&s, V, &err) == 0);
    SamplingParams p = sampling_params_default();
    p.num_logit_bias = 2;
    p.logit_bias[0] = (LogitBias){4, 100.0f}; /* masked below */
    p.logit_bias[1] = (LogitBias){2, (float)log(4.0)}; /* 1/8 -> 1/2 */
    p.logprobs = 2;
    uint32_t mask = 0xFFu & ~(1u << 4);
    float l[V];
    dyadic_logits(l);
    SampleInput in = {.params = &p, .allowed = &mask};
    SampleLogprobs lp;
    int32_t t = sampler_sample(l, &in, &s, &lp);
    cr_expect(t == 0 || t == 2, "greedy among the allowed: %d", t);
    cr_expect(isinf(l[4]) && l[4] < 0, "the masked token stays -inf");
    /* the row logprobs see: token 2 biased to 1/2, token 4 masked to 0 */
    double z = 0;
    float raw[V];
    dyadic_logits(raw);
    raw[2] += (float)log(4.0);
    for (int i = 0; i < V; i++)
        if (i != 4) z += exp((double)raw[i]);
    cr_expect_float_eq(lp.logprob, (float)(raw[0] - log(z)), 1e-5, "the chosen token's logprob is of the biased row");
    cr_expect(lp.num_top == 2 && ((lp.top_ids[0] == 0 && lp.top_ids[1] == 2) || (lp.top_ids[0] == 2 && lp.top_ids[1] == 0)));
    cr_expect_float_eq(lp.top_logprobs[1], (float)(raw[2] - log(z)), 1e-5);
    sampler_scratch_free(&s);
}

static void expect_invalid(SamplingParams p, const char *needle) {
    Error err = {0};
    cr_expect(sampling_params_validate(&p, 100, &err) == -1, "accepted (%s)", needle);
    cr_expect(strstr(err.msg, needle), "'%s' does not mention %s", err.msg, needle);
}

Test(sampler, validation) {
    SamplingParams ok = sampling_params_default(), p;
    Error err = {0};
    cr_expect(sampling_params_validate(&ok, 100, &err) == 0);
    p = ok, p.temperature = -0.1f, expect_invalid(p, "temperature");
    p = ok, p.temperature = NAN, expect_invalid(p, "temperature");
    p = ok, p.top_p = 0.0f, expect_invalid(p, "top_p");
    p = ok, p.top_p = 1.5f, expect_invalid(p, "top_p");
    p = ok, p.min_p = -1.0f, expect_invalid(p, "min_p");
    p = ok, p.top_k = 101, expect_invalid(p, "top_k");
    p = ok, p.top_k = -2, expect_invalid(p, "top_k");
    p = ok, p.repetition_penalty = 0.0f, expect_invalid(p, "repetition_penalty");
    p = ok, p.presence_penalty = 2.5f, expect_invalid(p, "presence_penalty");
    p = ok, p.frequency_penalty = -3.0f, expect_invalid(p, "frequency_penalty");
    p = ok, p.logprobs = 21, expect_invalid(p, "logprobs");
    p = ok, p.max_tokens = 0, expect_invalid(p, "max_tokens");
    p = ok, p.n = 0, expect_invalid(p, "n must");
    p = ok, p.num_stop_token_ids = 1, p.stop_token_ids[0] = 100, expect_invalid(p, "stop_token_ids");
    p = ok, p.top_k = -1;
    cr_expect(sampling_params_validate(&p, 100, &err) == 0, "top_k -1 means off (vLLM)");

    /* min_tokens: 0 (off) to max_tokens */
    p = ok, p.min_tokens = -1, expect_invalid(p, "min_tokens");
    p = ok, p.max_tokens = 8, p.min_tokens = 9, expect_invalid(p, "min_tokens");
    p = ok, p.max_tokens = 8, p.min_tokens = 8;
    cr_expect(sampling_params_validate(&p, 100, &err) == 0, "min_tokens may equal max_tokens");

    /* logit_bias: tokens in the vocabulary, distinct, biases in [-100, 100] */
    p = ok, p.num_logit_bias = 1, p.logit_bias[0] = (LogitBias){100, 1.0f};
    expect_invalid(p, "logit_bias: token 100 is outside the vocabulary [0, 100)");
    p = ok, p.num_logit_bias = 1, p.logit_bias[0] = (LogitBias){-1, 1.0f}, expect_invalid(p, "token -1");
    p = ok, p.num_logit_bias = 1, p.logit_bias[0] = (LogitBias){5, 100.5f}, expect_invalid(p, "[-100, 100]");
    p = ok, p.num_logit_bias = 1, p.logit_bias[0] = (LogitBias){5, -101.0f}, expect_invalid(p, "[-100, 100]");
    p = ok, p.num_logit_bias = 1, p.logit_bias[0] = (LogitBias){5, NAN}, expect_invalid(p, "logit_bias");
    p = ok, p.num_logit_bias = 1, p.logit_bias[0] = (LogitBias){5, INFINITY}, expect_invalid(p, "logit_bias");
    p = ok, p.num_logit_bias = 3, p.logit_bias[0] = (LogitBias){5, 1.0f},
    p.logit_bias[1] = (LogitBias){6, 1.0f}, p.logit_bias[2] = (LogitBias){5, -1.0f};
    expect_invalid(p, "token 5 appears twice");
    p = ok, p.num_logit_bias = MAX_LOGIT_BIAS + 1, expect_invalid(p, "at most 300");
    p = ok, p.num_logit_bias = -1, expect_invalid(p, "logit_bias");
    p = ok, p.num_logit_bias = 2, p.logit_bias[0] = (LogitBias){0, -100.0f}, p.logit_bias[1] = (LogitBias){99, 100.0f};
    cr_expect(sampling_params_validate(&p, 100, &err) == 0, "the bounds are inclusive: %s", err.msg);
    SamplingParams full = ok;
    full.num_logit_bias = MAX_LOGIT_BIAS;
    for (int i = 0; i < MAX_LOGIT_BIAS; i++) full.logit_bias[i] = (LogitBias){i, 0.5f};
    cr_expect(sampling_params_validate(&full, 1000, &err) == 0, "300 distinct entries: %s", err.msg);
}
