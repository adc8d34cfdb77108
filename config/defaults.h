/*
 * defaults.h - every default setting of nanovllm, defined once.
 *
 * The engine, the server and the commands take their defaults from here,
 * and so do the --help texts (DEFAULT_TEXT turns a value into the words
 * the help prints), so a default cannot say one thing and do another.
 * Values follow nano-vllm and vLLM where they have one; the CPU ones are
 * sized for a small host (the CPU runner's scratch grows with the token
 * budget, and untouched KV pages cost nothing).
 */
#ifndef NANOVLLM_DEFAULTS_H
#define NANOVLLM_DEFAULTS_H

#define DEFAULT_TEXT_(x) #x
#define DEFAULT_TEXT(x) DEFAULT_TEXT_(x) /* DEFAULT_TEXT(DEFAULT_PORT) is "8000" */

/* ---- the engine and its runners ---------------------------------------------------------- */
#define DEFAULT_BLOCK_SIZE 256 /* nano-vllm's kvcache_block_size */
#define MIN_BLOCK_SIZE 16
#define MAX_BLOCK_SIZE 256
#define DEFAULT_KV_CACHE_GIB 4 /* CPU KV budget, as vLLM's VLLM_CPU_KVCACHE_SPACE */
#define DEFAULT_KV_CACHE_BYTES ((unsigned long long)DEFAULT_KV_CACHE_GIB << 30)
#define DEFAULT_GPU_MEMORY_UTILIZATION 0.9
#define DEFAULT_MAX_NUM_SEQS 256
#define DEFAULT_MAX_NUM_BATCHED_TOKENS 2048

/* ---- requests ------------------------------------------------------------------------------ */
/* Completion length when a request does not say: `generate` and
 * /v1/completions (OpenAI's default); chat takes the rest of the context. */
#define DEFAULT_MAX_TOKENS 16

/* ---- serve ----------------------------------------------------------------------------------- */
#define DEFAULT_HOST "127.0.0.1"
#define DEFAULT_PORT 8000 /* unless $NANOVLLM_PORT says otherwise */
#define DEFAULT_MAX_QUEUED_REQUESTS 1024
#define DEFAULT_MAX_BODY_MIB 8
#define DEFAULT_SHUTDOWN_GRACE_SECONDS 30
#define DEFAULT_HEADER_TIMEOUT_SECONDS 10 /* the whole header block, from accept */
#define DEFAULT_BODY_TIMEOUT_SECONDS 30   /* the whole body, from the end of the headers */
#define DEFAULT_MAX_CONNECTIONS 4096
/* The Responses API's store of finished responses (previous_response_id, GET). */
#define DEFAULT_RESPONSES_STORE_ENTRIES 1000
#define DEFAULT_RESPONSES_STORE_MIB 256
#define DEFAULT_RESPONSES_STORE_TTL_SECONDS 3600
#define DEFAULT_KEEP_ALIVE_TIMEOUT_SECONDS 5 /* idle between requests on one connection */
#define DEFAULT_KEEP_ALIVE_REQUESTS 1000     /* then the connection closes */
#define DEFAULT_MAX_HEADER_BYTES 16384
#define STRUCTURED_CACHE_BYTES ((size_t)256 << 20) /* compiled structured-output constraints kept (LRU) */

/* ---- bench: nano-vllm's bench.py workload, and the latency run --------------------------------- */
#define DEFAULT_BENCH_NUM_SEQS 256
#define DEFAULT_BENCH_MIN_INPUT 100
#define DEFAULT_BENCH_MAX_INPUT 1024
#define DEFAULT_BENCH_MIN_OUTPUT 100
#define DEFAULT_BENCH_MAX_OUTPUT 1024
#define DEFAULT_BENCH_INPUT_LEN 512
#define DEFAULT_BENCH_OUTPUT_LEN 64

#endif
