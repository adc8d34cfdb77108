/*
 * cli_args.c - value parsers for command-line flags (see cli_args.h).
 */
#include "cli_args.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/log.h"
#include "base/read_file.h"

int parse_int_arg(const char *flag, const char *text, long lo, long hi, int *out, Error *err) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE)
        return error_set(err, "%s: '%s' is not an integer", flag, text);
    if (v < lo || v > hi)
        return error_set(err, "%s: %ld is out of range [%ld, %ld]", flag, v, lo, hi);
    *out = (int)v;
    return 0;
}

int parse_double_arg(const char *flag, const char *text, double lo, double hi, double *out,
                     Error *err) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno == ERANGE || !isfinite(v))
        return error_set(err, "%s: '%s' is not a number", flag, text);
    if (v < lo || v > hi) return error_set(err, "%s: %g is out of range [%g, %g]", flag, v, lo, hi);
    *out = v;
    return 0;
}

int parse_size_arg(const char *flag, const char *text, size_t *out, Error *err) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno == ERANGE || !isfinite(v) || v < 0)
        return error_set(err, "%s: '%s' is not a size (e.g. 4GiB, 512MB, 1000000)", flag, text);
    /* Case-insensitive: a bare letter or "iB" is a power of 1024, "B" of 1000. */
    static const struct {
        const char *suffix;
        double scale;
    } units[] = {{"", 1},          {"b", 1},          {"k", 0x1p10},  {"kib", 0x1p10},
                 {"kb", 1e3},      {"m", 0x1p20},     {"mib", 0x1p20}, {"mb", 1e6},
                 {"g", 0x1p30},    {"gib", 0x1p30},   {"gb", 1e9},    {"t", 0x1p40},
                 {"tib", 0x1p40},  {"tb", 1e12}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].suffix) != 0) continue;
        double bytes = v * units[i].scale;
        if (bytes >= 0x1p62) return error_set(err, "%s: '%s' is too large", flag, text);
        *out = (size_t)bytes;
        return 0;
    }
    return error_set(err, "%s: '%s' has an unknown unit (use K, M, G, T, KiB, MB, ...)", flag,
                     text);
}

int parse_id_list_arg(const char *flag, const char *text, int max_id, int32_t **ids, int *count,
                      Error *err) {
    size_t cap = 16;
    int n = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return error_set(err, "out of memory");
    const char *p = text;
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        char *end;
        errno = 0;
        long id = strtol(p, &end, 10);
        if (end == p || errno == ERANGE) {
            free(v);
            return error_set(err, "%s: expected comma-separated token ids, got '%.40s'", flag, p);
        }
        if (id < 0 || id >= max_id) {
            free(v);
            return error_set(err, "%s: token id %ld is outside the vocabulary [0, %d)", flag, id,
                             max_id);
        }
        if ((size_t)n == cap) {
            int32_t *bigger = realloc(v, 2 * cap * sizeof *v);
            if (!bigger) {
                free(v);
                return error_set(err, "out of memory");
            }
            v = bigger;
            cap *= 2;
        }
        v[n++] = (int32_t)id;
        p = end;
        while (isspace((unsigned char)*p)) p++;
        if (*p == '\0') break;
        if (*p != ',') {
            free(v);
            return error_set(err, "%s: expected ',' between token ids, got '%.40s'", flag, p);
        }
        p++;
    }
    *ids = v;
    *count = n;
    return 0;
}

int read_chat_template_arg(const char *value, char **text, Error *err) {
    struct stat st;
    if (stat(value, &st) != 0) {
        if (!strpbrk(value, "{}\n"))
            return error_set(err, "--chat-template: cannot open '%s': %s (and it does not look like "
                                  "a template)", value, strerror(errno));
        return (*text = strdup(value)) ? 0 : error_set(err, "out of memory");
    }
    size_t len;
    if (read_file(value, text, &len, err)) return error_prefix(err, "--chat-template");
    if (strlen(*text) == len) return 0;
    free(*text);
    *text = NULL;
    return error_set(err, "--chat-template: '%s' contains a NUL byte", value);
}

int read_stdin(ByteBuf *b, Error *err) {
    for (;;) {
        if (byte_buf_reserve(b, 65536)) return error_set(err, "out of memory");
        size_t got = fread(b->data + b->len, 1, 65536, stdin);
        b->len += got;
        if (got < 65536) break;
    }
    if (ferror(stdin)) return error_set(err, "cannot read stdin");
    return 0;
}

int parse_runner_option(const char *name, const char *value, RunnerOptions *o, Error *err) {
    char flag[64];
    snprintf(flag, sizeof flag, "--%s", name);
    if (strcmp(name, "device") == 0) {
        if (strcmp(value, "auto") && strcmp(value, "cuda") && strcmp(value, "cpu") &&
            strcmp(value, "null"))
            return error_set(err, "--device: '%s' is not one of auto, cuda, cpu", value);
        o->device = value;
        return 1;
    }
    if (strcmp(name, "block-size") == 0) {
        if (parse_int_arg(flag, value, MIN_BLOCK_SIZE, MAX_BLOCK_SIZE, &o->block_size, err))
            return -1;
        if (o->block_size & (o->block_size - 1))
            return error_set(err, "--block-size: %d is not a power of two", o->block_size);
        return 1;
    }
    if (strcmp(name, "kv-cache-memory") == 0)
        return parse_size_arg(flag, value, &o->kv_cache_bytes, err) ? -1 : 1;
    if (strcmp(name, "max-model-len") == 0)
        return parse_int_arg(flag, value, 1, 1 << 24, &o->max_model_len, err) ? -1 : 1;
    if (strcmp(name, "max-num-seqs") == 0)
        return parse_int_arg(flag, value, 1, 1 << 16, &o->max_num_seqs, err) ? -1 : 1;
    if (strcmp(name, "max-num-batched-tokens") == 0)
        return parse_int_arg(flag, value, 1, 1 << 20, &o->max_num_batched_tokens, err) ? -1 : 1;
    if (strcmp(name, "threads") == 0)
        return parse_int_arg(flag, value, 1, 1024, &o->num_threads, err) ? -1 : 1;
    if (strcmp(name, "gpu-memory-utilization") == 0)
        return parse_double_arg(flag, value, 0.01, 1.0, &o->gpu_memory_utilization, err) ? -1 : 1;
    if (strcmp(name, "enforce-eager") == 0) { /* takes no value */
        o->enforce_eager = true;
        return 1;
    }
    if (strcmp(name, "load-format") == 0) {
        if (strcmp(value, "auto") && strcmp(value, "safetensors") && strcmp(value, "dummy"))
            return error_set(err, "--load-format: '%s' is not one of auto, safetensors, dummy",
                             value);
        o->load_format = strcmp(value, "dummy") == 0 ? "dummy" : "auto";
        return 1;
    }
    if (strcmp(name, "kv-cache-dtype") == 0) {
        /* vLLM's spellings ("fp8" is e4m3 there too); "bf16"/"fp32" as
         * people type them. e5m2 is not stored by any backend here. */
        if (strcmp(value, "auto") == 0) o->kv_cache_dtype = KV_CACHE_AUTO;
        else if (strcmp(value, "bfloat16") == 0 || strcmp(value, "bf16") == 0)
            o->kv_cache_dtype = KV_CACHE_BF16;
        else if (strcmp(value, "float32") == 0 || strcmp(value, "fp32") == 0)
            o->kv_cache_dtype = KV_CACHE_F32;
        else if (strcmp(value, "fp8") == 0 || strcmp(value, "fp8_e4m3") == 0)
            o->kv_cache_dtype = KV_CACHE_FP8;
        else
            return error_set(err, "--kv-cache-dtype: '%s' is not one of auto, bfloat16, float32, "
                                  "fp8, fp8_e4m3", value);
        return 1;
    }
    if (strcmp(name, "dtype") == 0) {
        if (strcmp(value, "auto") == 0) o->dtype = COMPUTE_AUTO;
        else if (strcmp(value, "bfloat16") == 0 || strcmp(value, "bf16") == 0)
            o->dtype = COMPUTE_BF16;
        else if (strcmp(value, "float32") == 0 || strcmp(value, "float") == 0 ||
                 strcmp(value, "fp32") == 0)
            o->dtype = COMPUTE_F32;
        else
            return error_set(err, "--dtype: '%s' is not one of auto, bfloat16, float32", value);
        return 1;
    }
    if (strcmp(name, "num-gpu-blocks-override") == 0)
        return parse_int_arg(flag, value, 1, 1 << 30, &o->num_gpu_blocks_override, err) ? -1 : 1;
    return 0;
}

int parse_common_option(int c, const char *name, const char *value, RunnerOptions *opts,
                        const char *usage, const char *help, Error *err) {
    switch (c) {
    case 'q': log_set_quiet(true); return 1;
    case 'h':
        fputs(usage, stdout);
        fputs(help, stdout);
        return 2;
    case 0: return parse_runner_option(name, value, opts, err) < 0 ? -1 : 1;
    default: return 0;
    }
}
