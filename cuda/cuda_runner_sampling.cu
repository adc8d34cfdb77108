/*
 * cuda_runner_sampling.cu - the sampling half of a CUDA step (see
 * cuda_runner_internal.h): each logits row's parameters, distinct penalty
 * tokens, logit_bias entries and allowed-token mask packed in pinned memory
 * and copied to the GPU sampler (cuda_sampler.h), and the rows that ask for
 * logprobs sampled on the host with the CPU sampler.
 */
#include <string.h>

#include "cuda_check.h"
#include "cuda_runner_internal.h"

bool cuda_runner_sampled_on_host(const SampleInput *in) { return in->params && in->params->logprobs >= 0; }

/* Room for `entries` penalty tokens, pinned and on the device, keeping the
 * first `keep` already written this step (grown as long histories need; the
 * previous step has finished with the old buffers). */
int cuda_runner_reserve_penalties(CudaRunner *r, int entries, int keep, Error *err) {
    if (entries <= r->penalty_capacity) return 0;
    int cap = r->penalty_capacity > 0 ? r->penalty_capacity : 4096;
    while (cap < entries) cap *= 2;
    CudaPenalty *host = NULL;
    CUDA_TRY(cudaMallocHost((void **)&host, sizeof(CudaPenalty) * (size_t)cap),
             "allocating pinned host memory", err);
    CudaPenalty *dev = (CudaPenalty *)cuda_alloc(sizeof(CudaPenalty) * (size_t)cap, err);
    if (!dev) {
        cudaFreeHost(host);
        return error_prefix(err, "penalty tokens");
    }
    if (keep > 0) memcpy(host, r->penalties_host, sizeof(CudaPenalty) * (size_t)keep);
    if (r->penalties_host) cudaFreeHost(r->penalties_host);
    cuda_free(r->penalties_dev);
    r->penalties_host = host;
    r->penalties_dev = dev;
    r->penalty_capacity = cap;
    return 0;
}

/* Each logits row's sampling parameters, distinct penalty tokens, logit_bias
 * entries and allowed-token mask, to the device. Rows the host samples get a
 * row too (their token is unused; sampler_sample applies their mask and
 * biases itself). */
int cuda_runner_upload_sampling(CudaRunner *r, const RunnerBatch *b, Error *err) {
    const SamplingParams greedy = sampling_params_default();
    const size_t words = (size_t)r->mask_words;
    int rows = 0, used = 0, masked_rows = 0; /* masked_rows: up to the last row with a mask */
    int biases = 0;
    for (int s = 0; s < b->num_seqs; s++) {
        if (!b->seqs[s].compute_logits) continue;
        SampleInput in = b->seqs[s].sample;
        if (!in.params) in.params = &greedy;
        int added;
        while ((added = cuda_sample_row_prepare(&r->sample_rows_host[rows], r->penalties_host,
                                                r->penalty_capacity, used, r->biases_host,
                                                r->bias_capacity, biases, &in, &r->sampler)) < 0) {
            if (added == -2) /* only a request that skipped sampling_params_validate */
                return error_set(err, "row %d: %d logit_bias entries do not fit (at most %d a row)",
                                 s, in.params->num_logit_bias, MAX_LOGIT_BIAS);
            int need = used + in.prompt_len + in.output_len;
            if (cuda_runner_reserve_penalties(r, need > 2 * r->penalty_capacity ? need : 2 * r->penalty_capacity, used,
                                  err))
                return -1;
        }
        used += added;
        biases += r->sample_rows_host[rows].bias_count;
        if (in.allowed) {
            memcpy(r->masks_host + (size_t)rows * words, in.allowed, sizeof(uint32_t) * words);
            r->sample_rows_host[rows].mask_offset = (int32_t)((size_t)rows * words);
            masked_rows = rows + 1;
        }
        rows++;
    }
    CUDA_TRY(cudaMemcpyAsync(r->sample_rows_dev, r->sample_rows_host, sizeof(CudaSampleRow) * rows,
                             cudaMemcpyHostToDevice, r->stream),
             "copying sampling parameters to the GPU", err);
    if (used > 0)
        CUDA_TRY(cudaMemcpyAsync(r->penalties_dev, r->penalties_host, sizeof(CudaPenalty) * used,
                                 cudaMemcpyHostToDevice, r->stream),
                 "copying penalty tokens to the GPU", err);
    if (biases > 0)
        CUDA_TRY(cudaMemcpyAsync(r->biases_dev, r->biases_host, sizeof(LogitBias) * biases,
                                 cudaMemcpyHostToDevice, r->stream),
                 "copying logit_bias entries to the GPU", err);
    /* rows without a mask in between carry stale words; mask_offset -1 keeps them unread */
    if (masked_rows > 0)
        CUDA_TRY(cudaMemcpyAsync(r->masks_dev, r->masks_host,
                                 sizeof(uint32_t) * words * (size_t)masked_rows,
                                 cudaMemcpyHostToDevice, r->stream),
                 "copying allowed-token masks to the GPU", err);
    return 0;
}

int32_t cuda_runner_sample_on_host(CudaRunner *r, float *row, const RunnerBatch *b, int s) {
    SamplingParams greedy = sampling_params_default();
    SampleInput in = b->seqs[s].sample;
    if (!in.params) in.params = &greedy;
    return sampler_sample(row, &in, &r->sampler, b->logprobs ? &b->logprobs[s] : NULL);
}

