/*
 * bench_structured.c - `nanovllm bench --structured` (see bench_structured.h).
 *
 * Owns the structured-output benchmark: three constraints typical of real
 * requests (a nested 20-property JSON schema, a regex, a choice of ten
 * strings) over the model's whole vocabulary, and the goals they
 * are measured against (mask <= 50 us per token per row, median; compile
 * <= 50 ms, cache hit ~0; constrained generation >= 0.9x free).
 *
 *  - compile: the median of 5 fresh constraint_compile() calls (3 when
 *    they are slow), then a constraint cache's first get (a miss: a
 *    compile) and second (a hit), whose result the other parts use;
 *  - mask: one matcher walks random valid outputs (a seeded generator picks
 *    a random allowed token each step, the end id when only it is allowed,
 *    and starts over after the end), timing token_matcher_fill_mask and
 *    token_matcher_accept apart: median, p99 (and the mask's mean) in
 *    microseconds;
 *  - generation: the same rows (random prompts, temperature 1, seeded,
 *    ignore_eos so both runs generate exactly as many tokens) through the
 *    engine free, then each constrained by the JSON schema; tokens/s of both
 *    and their ratio. The two runs use different prompts so the second one
 *    gains nothing from the prefix cache.
 *
 * Progress goes to stderr; the report (header and table) is printed last.
 */
#include "bench_structured.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "structured/constraint.h"
#include "text/tokenizer/tokenizer.h"
#include "engine/model_tokenizer.h"

#define COMPILE_RUNS 5            /* fresh compiles timed, at most... */
#define COMPILE_BUDGET_SECONDS 3.0 /* ...and at least 3 once this much time is spent */
#define MASK_STEPS 4000
#define PROMPT_LEN 32
#define CACHE_BUDGET_BYTES ((size_t)1 << 30)
#define GOAL_MASK_US 50.0
#define GOAL_COMPILE_MS 50.0
#define GOAL_THROUGHPUT_RATIO 0.9

/* ---- the constraints measured ----------------------------------------------- */

/* 20 properties: bounded strings, bounded integers, enums, a nested object,
 * an array of objects, dates, booleans, a pattern and one optional field. */
static const char SCHEMA_20_PROPERTIES[] =
    "{\"type\": \"object\", \"additionalProperties\": false, \"properties\": {"
    "\"id\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 1000000},"
    "\"name\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 40},"
    "\"email\": {\"type\": \"string\", \"maxLength\": 64},"
    "\"age\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 130},"
    "\"status\": {\"enum\": [\"active\", \"inactive\", \"pending\", \"banned\"]},"
    "\"role\": {\"type\": \"string\", \"enum\": [\"admin\", \"editor\", \"viewer\"]},"
    "\"verified\": {\"type\": \"boolean\"},"
    "\"signup_date\": {\"type\": \"string\", \"format\": \"date\"},"
    "\"score\": {\"type\": \"integer\", \"minimum\": -100, \"maximum\": 100},"
    "\"nickname\": {\"type\": \"string\", \"maxLength\": 24},"
    "\"country\": {\"type\": \"string\", \"minLength\": 2, \"maxLength\": 2},"
    "\"city\": {\"type\": \"string\", \"maxLength\": 32},"
    "\"address\": {\"type\": \"object\", \"additionalProperties\": false, \"properties\": {"
    "  \"street\": {\"type\": \"string\", \"maxLength\": 48},"
    "  \"zip\": {\"type\": \"string\", \"pattern\": \"^[0-9]{5}$\"},"
    "  \"unit\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 9999}},"
    "  \"required\": [\"street\", \"zip\", \"unit\"]},"
    "\"tags\": {\"type\": \"array\", \"maxItems\": 5, \"items\": {\"type\": \"string\", \"maxLength\": 16}},"
    "\"orders\": {\"type\": \"array\", \"maxItems\": 3, \"items\": {\"type\": \"object\","
    "  \"additionalProperties\": false, \"properties\": {"
    "    \"sku\": {\"type\": \"string\", \"maxLength\": 12},"
    "    \"quantity\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 99},"
    "    \"priority\": {\"enum\": [\"low\", \"normal\", \"high\"]}},"
    "  \"required\": [\"sku\", \"quantity\", \"priority\"]}},"
    "\"newsletter\": {\"type\": \"boolean\"},"
    "\"language\": {\"enum\": [\"en\", \"de\", \"fr\", \"es\", \"ja\", \"zh\"]},"
    "\"timezone\": {\"type\": \"string\", \"maxLength\": 32},"
    "\"last_login\": {\"type\": \"string\", \"format\": \"date\"},"
    "\"notes\": {\"type\": \"string\", \"maxLength\": 120}},"
    "\"required\": [\"id\", \"name\", \"email\", \"age\", \"status\", \"role\", \"verified\","
    "  \"signup_date\", \"score\", \"country\", \"city\", \"address\", \"tags\", \"orders\","
    "  \"newsletter\", \"language\", \"timezone\", \"last_login\", \"notes\"]}";

/* A North American phone number or an email-like address. */
static const char REGEX_PHONE_OR_EMAIL[] =
    "\\d{3}-\\d{3}-\\d{4}|[a-z0-9._%+-]{1,32}@[a-z0-9-]{1,24}(\\.[a-z0-9-]{1,24}){0,2}\\.(com|org|net|io|dev)";

static const char CHOICE_10[] =
    "[\"positive\", \"negative\", \"neutral\", \"mixed\", \"unknown\", \"very positive\", "
    "\"very negative\", \"sarcastic\", \"question\", \"off-topic\"]";

typedef struct BenchConstraint {
    const char *label;
    ConstraintKind kind;
    const char *text;
} BenchConstraint;

static const BenchConstraint CONSTRAINTS[] = {
    {"json schema, 20 properties", CONSTRAINT_JSON_SCHEMA, SCHEMA_20_PROPERTIES},
    {"regex, phone | email", CONSTRAINT_REGEX, REGEX_PHONE_OR_EMAIL},
    {"choice of 10 strings", CONSTRAINT_CHOICE, CHOICE_10},
};
#define NUM_CONSTRAINTS ((int)(sizeof CONSTRAINTS / sizeof CONSTRAINTS[0]))

typedef struct ConstraintResult {
    int compile_runs;
    double compile_median_ms, cache_miss_ms, cache_hit_us;
    size_t compiled_bytes;
    double fill_p50_us, fill_p99_us, fill_mean_us, accept_p50_us, accept_p99_us;
    int mask_steps, outputs_completed;
    bool failed;
    Error error; /* why this constraint could not be measured */
} ConstraintResult;

typedef struct GenerationResult {
    double free_seconds, constrained_seconds;
    long free_tokens, constrained_tokens;
    bool failed;
    Error error; /* why the comparison did not run */
} GenerationResult;

/* ---- helpers ------------------------------------------------------------------- */

typedef struct Rng {
    uint64_t state;
} Rng;

static uint64_t rng_next(Rng *r) { /* splitmix64 */
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double mean(const double *values, int n) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += values[i];
    return n > 0 ? sum / n : 0;
}

/* The p-quantile (0..1) of n values, sorting them in place. */
static double quantile(double *values, int n, double p) {
    if (n <= 0) return 0;
    qsort(values, (size_t)n, sizeof *values, cmp_double);
    return values[(int)(p * (n - 1) + 0.5)];
}

/* /proc/cpuinfo's first "model name", or "unknown CPU". */
static void cpu_model_name(char *out, size_t size) {
    snprintf(out, size, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *colon = strchr(line, ':');
        if (!colon) continue;
        colon++;
        while (*colon == ' ' || *colon == '\t') colon++;
        snprintf(out, size, "%s", colon);
        out[strcspn(out, "\n")] = '\0';
        break;
    }
    fclose(f);
}

/* ---- compile ------------------------------------------------------------------- */

/* Times fresh compiles and the cache; returns the cache's compiled
 * constraint (a reference) for the other measurements, or NULL. */
static Constraint *time_compile(const BenchConstraint *bc, const TokenVocab *v, ConstraintResult *res, Error *err) {
    double ms[COMPILE_RUNS], spent = 0;
    size_t len = strlen(bc->text);
    int runs = 0;
    while (runs < COMPILE_RUNS && (runs < 3 || spent < COMPILE_BUDGET_SECONDS * 1e3)) {
        double t0 = now_seconds();
        Constraint *c = constraint_compile(bc->kind, bc->text, len, v, err);
        ms[runs] = (now_seconds() - t0) * 1e3;
        if (!c) return NULL;
        spent += ms[runs++];
        res->compiled_bytes = token_grammar_bytes(constraint_grammar(c));
        constraint_unref(c);
    }
    res->compile_runs = runs;
    res->compile_median_ms = quantile(ms, runs, 0.5);

    ConstraintCache *cache = constraint_cache_new(v, CACHE_BUDGET_BYTES, err);
    if (!cache) return NULL;
    bool first_hit = true, second_hit = false;
    double t0 = now_seconds();
    Constraint *first = constraint_cache_get(cache, bc->kind, bc->text, len, &first_hit, err);
    double t1 = now_seconds();
    Constraint *second = first ? constraint_cache_get(cache, bc->kind, bc->text, len, &second_hit, err) : NULL;
    double t2 = now_seconds();
    if (!first || !second) error_prefix(err, "through the cache");
    else if (first_hit || !second_hit) error_set(err, "the constraint cache did not keep the compiled constraint");
    res->cache_miss_ms = (t1 - t0) * 1e3;
    res->cache_hit_us = (t2 - t1) * 1e6;
    constraint_unref(second);
    constraint_cache_free(cache);
    if (first && (first_hit || !second_hit)) {
        constraint_unref(first);
        return NULL;
    }
    return first;
}

/* ---- masks ----------------------------------------------------------------------- */

static bool mask_has(const uint32_t *mask, int32_t t) { return mask[t >> 5] >> (t & 31) & 1; }

/* A random allowed token, end ids left out unless nothing else is allowed;
 * -1 when nothing is. Clears the end ids' bits in mask. */
static int32_t pick_allowed(uint32_t *mask, int words, const int32_t *ends, int num_ends, Rng *rng) {
    int32_t end = -1;
    for (int i = 0; i < num_ends; i++) {
        if (!mask_has(mask, ends[i])) continue;
        end = ends[i];
        mask[ends[i] >> 5] &= ~(1u << (ends[i] & 31));
    }
    uint64_t count = 0;
    for (int w = 0; w < words; w++) count += (uint64_t)__builtin_popcount(mask[w]);
    if (count == 0) return end;
    uint64_t k = rng_next(rng) % count;
    for (int w = 0; w < words; w++) {
        uint64_t in_word = (uint64_t)__builtin_popcount(mask[w]);
        if (k >= in_word) {
            k -= in_word;
            continue;
        }
        uint32_t bits = mask[w];
        for (; k > 0; k--) bits &= bits - 1; /* drop the lowest k set bits */
        return (int32_t)(w * 32 + __builtin_ctz(bits));
    }
    return end; /* unreachable: k < count */
}

static int time_masks(const Constraint *c, const int32_t *ends, int num_ends, uint64_t seed, ConstraintResult *res,
                      Error *err) {
    const TokenGrammar *tg = constraint_grammar(c);
    int words = token_mask_words(token_grammar_vocab_size(tg));
    uint32_t *mask = malloc((size_t)words * sizeof *mask);
    double *fill_us = malloc(MASK_STEPS * sizeof *fill_us), *accept_us = malloc(MASK_STEPS * sizeof *accept_us);
    TokenMatcher *m = NULL;
    int rc = 0, num_fill = 0, num_accept = 0;
    Rng rng = {seed};
    if (!mask || !fill_us || !accept_us) {
        rc = error_set(err, "out of memory");
        goto out;
    }
    res->outputs_completed = 0;
    for (int step = 0; step < MASK_STEPS && rc == 0; step++) {
        if (!m && !(m = token_matcher_new(tg, err))) {
            rc = -1;
            break;
        }
        double t0 = now_seconds();
        if (token_matcher_fill_mask(m, mask, ends, num_ends, err) < 0) {
            rc = -1;
            break;
        }
        fill_us[num_fill++] = (now_seconds() - t0) * 1e6;
        int32_t token = pick_allowed(mask, words, ends, num_ends, &rng);
        if (token < 0) { /* the model has no end id and the output is complete */
            if (!token_matcher_can_end(m))
                rc = error_set(err, "the mask allows no token after %d steps", step);
            token_matcher_free(m);
            m = NULL;
            res->outputs_completed++;
            continue;
        }
        bool is_end = false;
        for (int i = 0; i < num_ends; i++) is_end |= token == ends[i];
        t0 = now_seconds();
        if (token_matcher_accept(m, token, is_end, err) < 0) {
            rc = error_prefix(err, "an allowed token was refused");
            break;
        }
        accept_us[num_accept++] = (now_seconds() - t0) * 1e6;
        if (is_end) {
            token_matcher_free(m);
            m = NULL;
            res->outputs_completed++;
        }
    }
    if (rc < 0) error_prefix(err, "mask walk");
    res->mask_steps = num_fill;
    res->fill_mean_us = mean(fill_us, num_fill);
    res->fill_p50_us = quantile(fill_us, num_fill, 0.5);
    res->fill_p99_us = quantile(fill_us, num_fill, 0.99);
    res->accept_p50_us = quantile(accept_us, num_accept, 0.5);
    res->accept_p99_us = quantile(accept_us, num_accept, 0.99);
out:
    token_matcher_free(m);
    free(mask);
    free(fill_us);
    free(accept_us);
    return rc;
}

/* ---- generation ------------------------------------------------------------------- */

typedef struct GenerationTally {
    long tokens;
    int finished;
    char error[256];
} GenerationTally;

static void on_generated(const EngineOutput *o, void *user) {
    GenerationTally *t = user;
    if (o->has_token) t->tokens++;
    if (o->finish == FINISH_NONE) return;
    t->finished++;
    if (o->finish == FINISH_ERROR && !t->error[0])
        snprintf(t->error, sizeof t->error, "%s", o->error ? o->error : "unknown error");
}

/* Submits num_seqs rows (prompts drawn from prompt_seed), each constrained
 * when constraint is not NULL, and steps the engine until all finish. */
static int generate_rows(Engine *e, const StructuredBenchConfig *c, Constraint *constraint, int max_tokens,
                         uint64_t prompt_seed, double *seconds, long *tokens, Error *err) {
    int vocab = engine_model_config(e)->vocab_size;
    int32_t prompt[PROMPT_LEN];
    Rng rng = {prompt_seed};
    GenerationTally tally = {0};
    for (int i = 0; i < c->num_seqs; i++) {
        for (int k = 0; k < PROMPT_LEN; k++)
            prompt[k] = (int32_t)(rng_next(&rng) % (uint64_t)(vocab < 10000 ? vocab : 10000));
        SamplingParams sp = sampling_params_default();
        sp.temperature = 1.0f;
        sp.max_tokens = max_tokens;
        sp.ignore_eos = true;
        sp.has_seed = true;
        sp.seed = (uint64_t)c->seed * 1000003u + (uint64_t)i;
        EngineRequest req = {.prompt = prompt, .prompt_len = PROMPT_LEN, .params = sp,
                             .constraint = constraint, .constraint_after = -1,
                             .on_output = on_generated, .user = &tally};
        if (engine_submit(e, &req, NULL, err) < 0) return -1;
    }
    double t0 = now_seconds();
    while (tally.finished < c->num_seqs) {
        int stepped = engine_step(e, err);
        if (stepped < 0) return -1;
        if (stepped == 0 && !engine_has_work(e))
            return error_set(err, "the engine went idle with rows unfinished");
    }
    *seconds = now_seconds() - t0;
    *tokens = tally.tokens;
    if (tally.error[0]) return error_set(err, "a request failed: %s", tally.error);
    return 0;
}

/* ---- the benchmark ----------------------------------------------------------------- */

static const char *goal_mark(bool met) { return met ? "ok" : "MISSED"; }

/* Prints the report: header, the constraints' table, the generation. */
static int print_report(Engine *e, const StructuredBenchConfig *c, double vocab_ms, const ConstraintResult *results,
                        const GenerationResult *gen, Error *err) {
    const ModelConfig *mc = engine_model_config(e);
    char cpu[256];
    cpu_model_name(cpu, sizeof cpu);
    printf("structured outputs on %s\n", cpu);
    printf("vocabulary        %d ids (%s), token table built in %.0f ms\n", mc->vocab_size, c->model_dir,
           vocab_ms);
    printf("device            %s\n", engine_runner(e)->description);
    printf("mask walk         %d steps per constraint, random allowed tokens (seed %d), end ids:", MASK_STEPS,
           c->seed);
    for (int i = 0; i < mc->num_eos_ids; i++) printf(" %d", mc->eos_ids[i]);
    printf("\n\n");
    printf("%-26s %10s %9s %8s %8s | %8s %8s %8s %8s %8s %7s\n", "constraint", "compile", "cache", "cache",
           "compiled", "mask", "mask", "mask", "accept", "accept", "outputs");
    printf("%-26s %10s %9s %8s %8s | %8s %8s %8s %8s %8s %7s\n", "", "med ms/n", "miss ms", "hit us", "MB",
           "p50 us", "p99 us", "mean us", "p50 us", "p99 us", "walked");
    bool mask_ok = true;
    for (int i = 0; i < NUM_CONSTRAINTS; i++) {
        const ConstraintResult *r = &results[i];
        if (r->failed) {
            printf("%-26s failed: %s\n", CONSTRAINTS[i].label, r->error.msg);
            mask_ok = false;
            continue;
        }
        char median[32];
        snprintf(median, sizeof median, "%.2f/%d", r->compile_median_ms, r->compile_runs);
        printf("%-26s %10s %9.2f %8.2f %8.2f | %8.2f %8.1f %8.1f %8.2f %8.2f %7d\n", CONSTRAINTS[i].label,
               median, r->cache_miss_ms, r->cache_hit_us, r->compiled_bytes / 1e6, r->fill_p50_us,
               r->fill_p99_us, r->fill_mean_us, r->accept_p50_us, r->accept_p99_us, r->outputs_completed);
        mask_ok &= r->fill_p50_us <= GOAL_MASK_US;
    }
    bool compile_ok = !results[0].failed && results[0].compile_median_ms <= GOAL_COMPILE_MS;
    printf("\ngeneration        %d rows x %d tokens, prompts of %d random ids, temperature 1, seed %d\n",
           c->num_seqs, c->max_tokens, PROMPT_LEN, c->seed);
    double ratio = 0;
    if (gen->failed) {
        printf("  failed          %s\n", gen->error.msg);
    } else {
        double free_tps = gen->free_tokens / gen->free_seconds;
        double constrained_tps = gen->constrained_tokens / gen->constrained_seconds;
        ratio = constrained_tps / free_tps;
        printf("  unconstrained   %ld tokens in %.3f s = %.1f tokens/s\n", gen->free_tokens, gen->free_seconds,
               free_tps);
        printf("  json schema     %ld tokens in %.3f s = %.1f tokens/s (every row constrained)\n",
               gen->constrained_tokens, gen->constrained_seconds, constrained_tps);
        printf("  ratio           %.3fx\n", ratio);
    }
    printf("\ngoals             mask median <= %.0f us: %s; schema compile <= %.0f ms: %s; "
           "constrained >= %.1fx: %s\n",
           GOAL_MASK_US, goal_mark(mask_ok), GOAL_COMPILE_MS, goal_mark(compile_ok), GOAL_THROUGHPUT_RATIO,
           goal_mark(!gen->failed && ratio >= GOAL_THROUGHPUT_RATIO));
    return fflush(stdout) == 0 ? 0 : error_set(err, "cannot write to stdout");
}

/* A short warm-up, then the same rows free and with every row constrained. */
static void compare_generation(Engine *e, const StructuredBenchConfig *c, Constraint *schema,
                               GenerationResult *gen) {
    Error *err = &gen->error;
    double seconds;
    long tokens;
    StructuredBenchConfig warm = *c;
    warm.num_seqs = 2;
    if (c->progress) fprintf(stderr, "structured: warm-up generation\n");
    int rc = generate_rows(e, &warm, schema, 4, 1, &seconds, &tokens, err);
    if (rc == 0 && c->progress)
        fprintf(stderr, "structured: %d rows x %d tokens, unconstrained\n", c->num_seqs, c->max_tokens);
    if (rc == 0) rc = generate_rows(e, c, NULL, c->max_tokens, 2, &gen->free_seconds, &gen->free_tokens, err);
    if (rc == 0 && c->progress)
        fprintf(stderr, "structured: %d rows x %d tokens, every row constrained\n", c->num_seqs, c->max_tokens);
    if (rc == 0)
        rc = generate_rows(e, c, schema, c->max_tokens, 3, &gen->constrained_seconds, &gen->constrained_tokens,
                           err);
    gen->failed = rc < 0;
}

int bench_structured(Engine *e, const StructuredBenchConfig *c, Error *err) {
    const ModelConfig *mc = engine_model_config(e);
    double t0 = now_seconds();
    Tokenizer *tok = model_tokenizer_load(c->model_dir, mc->vocab_size, err);
    if (!tok) return -1;
    TokenVocab *v = token_vocab_new(tok, mc->vocab_size, err);
    double vocab_ms = (now_seconds() - t0) * 1e3;
    tokenizer_free(tok);
    if (!v) return -1;

    /* A constraint that fails (a limit, a refused token) is a row of the
     * table saying why; the others are still measured. */
    ConstraintResult results[NUM_CONSTRAINTS];
    memset(results, 0, sizeof results);
    int failures = 0;
    Constraint *schema = NULL; /* CONSTRAINTS[0], for the generation */
    for (int i = 0; i < NUM_CONSTRAINTS; i++) {
        const BenchConstraint *bc = &CONSTRAINTS[i];
        Error *one = &results[i].error;
        if (c->progress) fprintf(stderr, "structured: compiling %s\n", bc->label);
        Constraint *compiled = time_compile(bc, v, &results[i], one);
        if (compiled) {
            if (c->progress) fprintf(stderr, "structured: %d mask steps over %s\n", MASK_STEPS, bc->label);
            if (time_masks(compiled, mc->eos_ids, mc->num_eos_ids, (uint64_t)c->seed * 7919u + (uint64_t)i,
                           &results[i], one) < 0) {
                constraint_unref(compiled);
                compiled = NULL;
            }
        }
        if (!compiled) {
            results[i].failed = true;
            failures++;
        } else if (i == 0) {
            schema = compiled;
        } else {
            constraint_unref(compiled);
        }
    }

    GenerationResult gen = {0};
    if (schema) compare_generation(e, c, schema, &gen);
    else gen.failed = error_set(&gen.error, "skipped: the schema could not be measured") < 0;
    if (gen.failed) failures++;
    constraint_unref(schema);
    token_vocab_free(v);
    if (print_report(e, c, vocab_ms, results, &gen, err) < 0) return -1;
    return failures ? error_set(err, "%d of the measurements failed (see the report)", failures) : 0;
}
