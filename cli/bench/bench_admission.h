/*
 * bench_admission.h - `nanovllm bench --admission`: a long prompt admitted
 * while other sequences decode (bench_admission.c).
 */
#ifndef NANOVLLM_BENCH_ADMISSION_H
#define NANOVLLM_BENCH_ADMISSION_H

#include <stdbool.h>

#include "engine/engine.h"

typedef struct AdmissionConfig {
    int num_seqs;   /* sequences decoding when the long prompt arrives */
    int prompt_len; /* their prompts */
    int long_len;   /* the long prompt */
    bool json;      /* one JSON object on stdout instead of the table */
} AdmissionConfig;

int bench_admission(Engine *e, const AdmissionConfig *cfg, Error *err);

#endif
