/*
 * bench_tokenizer.c - the tokenizer benchmark (see bench_tokenizer.h).
 *
 * Single thread, wall clock: tokenizer.json load (several loads: min and
 * median), then encode and decode passes over a few MB of documents. The
 * documents are generated from a fixed seed, so every run and every
 * engine sees the same bytes: English-like prose (40%), code (15%),
 * multi-script text (25%: CJK, Japanese, Korean, Cyrillic, Arabic,
 * Devanagari, Greek, accented Latin), numbers (8%), emoji (5%), random
 * code points (4%) and white-space-heavy text (3%), 0.3-8 KB each.
 * scripts/bench_tokenizer.sh writes them out (--bench-write) and times
 * Hugging Face's Rust tokenizers on the same file, in the same run.
 * bench_chat_template times the chat template on one request
 * (scripts/bench_chat_template.sh compares it with Python's Jinja2).
 */
#include "bench_tokenizer.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/byte_buf.h"
#include "base/log.h"
#include "text/tokenizer/pretokenizer.h"
#include "text/tokenizer/unicode9_assigned.h"
#include "text/tokenizer/utf8.h"
#include "engine/model_tokenizer.h"

/* ---- deterministic text ---- */

typedef struct Rng {
    uint64_t s;
} Rng;

static uint64_t next_u64(Rng *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint32_t below(Rng *r, uint32_t n) { return (uint32_t)(next_u64(r) % n); }
static uint32_t between(Rng *r, uint32_t lo, uint32_t hi) { return lo + below(r, hi - lo + 1); }

static const char *const WORDS[] = {
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have",
    "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "time", "people", "year",
    "way", "day", "man", "thing", "woman", "life", "child", "world", "school", "state", "family",
    "student", "group", "country", "problem", "hand", "part", "place", "case", "week", "company",
    "system", "program", "question", "work", "government", "number", "night", "point", "home",
    "water", "room", "mother", "area", "money", "story", "fact", "month", "lot", "right", "study",
    "book", "eye", "job", "word", "business", "issue", "side", "kind", "head", "house", "service",
    "friend", "father", "power", "hour", "game", "line", "end", "member", "law", "car", "city",
    "community", "name", "president", "team", "minute", "idea", "kid", "body", "information",
    "back", "parent", "face", "others", "level", "office", "door", "health", "person", "art",
    "war", "history", "party", "result", "change", "morning", "reason", "research", "girl", "guy",
    "moment", "air", "teacher", "force", "education", "understand", "remember", "important",
    "different", "following", "without", "program", "problem", "however", "interesting",
    "tokenizer", "inference", "server", "model", "attention", "transformer", "quickly", "simply"};
static const char *const CONTRACTIONS[] = {"don't", "it's", "we're", "they'll", "I'm",
                                           "you've", "he'd", "can't", "She's", "WE'RE"};
static const char *const CODE_WORDS[] = {
    "buffer", "index", "count", "value", "result", "node", "next", "size", "data", "offset",
    "token", "batch", "cache", "block", "seq", "len", "ptr", "state", "config", "error"};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static int put(ByteBuf *b, const char *s) { return byte_buf_append(b, s, strlen(s)); }
static int put_cp(ByteBuf *b, uint32_t cp) {
    char u[4];
    return byte_buf_append(b, u, (size_t)utf8_encode(cp, u));
}

static int prose(ByteBuf *b, Rng *r, size_t end) {
    while (b->len < end) {
        int words = (int)between(r, 6, 20);
        for (int i = 0; i < words; i++) {
            const char *w = below(r, 12) == 0 ? CONTRACTIONS[below(r, COUNT(CONTRACTIONS))]
                                              : WORDS[below(r, COUNT(WORDS))];
            char tmp[64];
            snprintf(tmp, sizeof tmp, "%s%s", i ? " " : "", w);
            if (i == 0 && tmp[0] >= 'a' && tmp[0] <= 'z') tmp[0] = (char)(tmp[0] - 32);
            if (put(b, tmp)) return -1;
            if (below(r, 9) == 0 && i + 1 < words && put(b, ",")) return -1;
            if (below(r, 40) == 0) {
                snprintf(tmp, sizeof tmp, " %u", below(r, 2025));
                if (put(b, tmp)) return -1;
            }
        }
        if (put(b, below(r, 8) == 0 ? "?" : ".")) return -1;
        if (put(b, below(r, 6) == 0 ? "\n\n" : " ")) return -1;
    }
    return 0;
}

static int code(ByteBuf *b, Rng *r, size_t end) {
    int depth = 0;
    while (b->len < end) {
        char line[256], ident[64];
        snprintf(ident, sizeof ident, "%s_%s", CODE_WORDS[below(r, COUNT(CODE_WORDS))],
                 CODE_WORDS[below(r, COUNT(CODE_WORDS))]);
        for (int i = 0; i < depth; i++)
            if (put(b, "    ")) return -1;
        switch (below(r, 6)) {
        case 0:
            snprintf(line, sizeof line, "static int %s(const char *%s, size_t n) {\n", ident,
                     CODE_WORDS[below(r, COUNT(CODE_WORDS))]);
            depth = depth < 3 ? depth + 1 : depth;
            break;
        case 1:
            snprintf(line, sizeof line, "for (size_t i = 0; i < %s->len; i++) {\n", ident);
            depth = depth < 3 ? depth + 1 : depth;
            break;
        case 2: snprintf(line, sizeof line, "%s += 0x%X * (%s[i] >> %u);\n", ident,
                         below(r, 65536), CODE_WORDS[below(r, COUNT(CODE_WORDS))], below(r, 32));
            break;
        case 3: snprintf(line, sizeof line, "if (%s == NULL) return error(\"%s failed\");\n",
                         ident, ident);
            break;
        case 4: snprintf(line, sizeof line, "// %s: keep the %s aligned to %u bytes\n", ident,
                         WORDS[below(r, COUNT(WORDS))], 1u << below(r, 8));
            break;
        default:
            snprintf(line, sizeof line, "}\n");
            depth = depth > 0 ? depth - 1 : 0;
        }
        if (put(b, line)) return -1;
    }
    return 0;
}

/* A word of n characters drawn from [lo, hi]. */
static int script_word(ByteBuf *b, Rng *r, uint32_t lo, uint32_t hi, int n) {
    for (int i = 0; i < n; i++)
        if (put_cp(b, between(r, lo, hi))) return -1;
    return 0;
}

static int multi_script(ByteBuf *b, Rng *r, size_t end) {
    while (b->len < end) {
        int kind = (int)below(r, 8), words = (int)between(r, 5, 25);
        for (int w = 0; w < words; w++) {
            int rc = 0;
            switch (kind) {
            case 0: rc = script_word(b, r, 0x4E00, 0x62FF, (int)between(r, 4, 20)) ||
                         put(b, below(r, 3) ? "，" : "。");
                break;
            case 1: rc = script_word(b, r, 0x3041, 0x3093, (int)between(r, 2, 6)) ||
                         script_word(b, r, 0x4E00, 0x5FFF, (int)between(r, 1, 3)) ||
                         script_word(b, r, 0x30A1, 0x30F3, (int)between(r, 0, 4)) ||
                         put(b, below(r, 4) ? "、" : "。");
                break;
            case 2: rc = script_word(b, r, 0xAC00, 0xD7A3, (int)between(r, 2, 4)) || put(b, " "); break;
            case 3: rc = script_word(b, r, 0x0430, 0x044F, (int)between(r, 3, 10)) || put(b, " "); break;
            case 4: rc = script_word(b, r, 0x0627, 0x064A, (int)between(r, 3, 8)) || put(b, " "); break;
            case 5: /* Devanagari: consonant + vowel sign syllables */
                for (int s = (int)between(r, 2, 4); s > 0 && !rc; s--)
                    rc = put_cp(b, between(r, 0x0915, 0x0939)) ||
                         (below(r, 2) && put_cp(b, between(r, 0x093E, 0x094C)));
                rc = rc || put(b, " ");
                break;
            case 6: rc = script_word(b, r, 0x03B1, 0x03C9, (int)between(r, 3, 9)) || put(b, " "); break;
            default: {
                static const char *const latin[] = {"été", "Übermäßig", "garçon", "naïve", "déjà",
                                                    "Straße", "mañana", "São", "crème", "fiancée"};
                rc = put(b, latin[below(r, COUNT(latin))]) || put(b, below(r, 5) ? " " : ". ");
            }
            }
            if (rc) return -1;
        }
        if (put(b, "\n")) return -1;
    }
    return 0;
}

static int numbers(ByteBuf *b, Rng *r, size_t end) {
    while (b->len < end) {
        char tmp[64];
        switch (below(r, 4)) {
        case 0: snprintf(tmp, sizeof tmp, "%u,%03u.%02u", below(r, 1000), below(r, 1000), below(r, 100)); break;
        case 1: snprintf(tmp, sizeof tmp, "%u-%02u-%02u", between(r, 1900, 2099), between(r, 1, 12), between(r, 1, 28)); break;
        case 2: snprintf(tmp, sizeof tmp, "%u.%05u", below(r, 100), below(r, 100000)); break;
        default: snprintf(tmp, sizeof tmp, "+1 (%03u) %03u-%04u", below(r, 1000), below(r, 1000), below(r, 10000));
        }
        if (put(b, tmp) || put(b, below(r, 6) == 0 ? "\n" : below(r, 3) ? " " : "\t")) return -1;
    }
    return 0;
}

static int emoji(ByteBuf *b, Rng *r, size_t end) {
    while (b->len < end) {
        int rc;
        switch (below(r, 5)) {
        case 0: rc = put_cp(b, between(r, 0x1F600, 0x1F64F)); break;
        case 1: rc = put_cp(b, between(r, 0x1F300, 0x1F5FF)); break;
        case 2: rc = put(b, "👨‍👩‍👧") ; break;
        case 3: rc = put_cp(b, between(r, 0x1F1E6, 0x1F1FF)) || put_cp(b, between(r, 0x1F1E6, 0x1F1FF)); break;
        default: rc = put(b, " ") || put(b, WORDS[below(r, COUNT(WORDS))]) || put(b, " ");
        }
        if (rc) return -1;
    }
    return 0;
}

/* Code points assigned by Unicode 9.0 (so every engine's tables agree). */
static int random_code_points(ByteBuf *b, Rng *r, size_t end) {
    size_t n = COUNT(UNICODE9_ASSIGNED);
    while (b->len < end) {
        const uint32_t *range = UNICODE9_ASSIGNED[below(r, (uint32_t)n)];
        uint32_t cp = between(r, range[0], range[1] < range[0] + 4096 ? range[1] : range[0] + 4096);
        if ((cp >= 0xD800 && cp <= 0xDFFF) || (cp & 0xFFFE) == 0xFFFE) continue;
        if (put_cp(b, cp) || (below(r, 8) == 0 && put(b, " "))) return -1;
    }
    return 0;
}

static int white_space(ByteBuf *b, Rng *r, size_t end) {
    static const char *const gaps[] = {"  ", "\t", "\n", "\r\n", "    ", "\n\n\n", " \n", "\t\t "};
    while (b->len < end)
        if (put(b, WORDS[below(r, COUNT(WORDS))]) || put(b, gaps[below(r, COUNT(gaps))])) return -1;
    return 0;
}

typedef struct Corpus {
    char **docs;
    size_t *lens;
    size_t count, cap, bytes;
} Corpus;

static void corpus_free(Corpus *c) {
    for (size_t i = 0; i < c->count; i++) free(c->docs[i]);
    free(c->docs);
    free(c->lens);
}

static int corpus_add(Corpus *c, const char *s, size_t n, Error *err) {
    size_t cap = c->cap;
    if (array_reserve((void **)&c->docs, &cap, c->count + 1, sizeof *c->docs)) goto oom;
    cap = c->cap;
    if (array_reserve((void **)&c->lens, &cap, c->count + 1, sizeof *c->lens)) goto oom;
    c->cap = cap;
    if (!(c->docs[c->count] = malloc(n + 1))) goto oom;
    memcpy(c->docs[c->count], s, n);
    c->docs[c->count][n] = '\0';
    c->lens[c->count++] = n;
    c->bytes += n;
    return 0;
oom:
    return error_set(err, "out of memory");
}

static int generate(Corpus *c, size_t bytes, Error *err) {
    Rng r = {20250501};
    ByteBuf doc = {0};
    int rc = 0;
    while (c->bytes < bytes && rc == 0) {
        doc.len = 0;
        size_t end = between(&r, 300, 8000);
        uint32_t pick = below(&r, 100);
        rc = pick < 40   ? prose(&doc, &r, end)
             : pick < 55 ? code(&doc, &r, end)
             : pick < 80 ? multi_script(&doc, &r, end)
             : pick < 88 ? numbers(&doc, &r, end)
             : pick < 93 ? emoji(&doc, &r, end)
             : pick < 97 ? random_code_points(&doc, &r, end)
                         : white_space(&doc, &r, end);
        if (rc) rc = error_set(err, "out of memory");
        else rc = corpus_add(c, doc.data, doc.len, err);
    }
    byte_buf_free(&doc);
    return rc;
}

static int read_corpus(Corpus *c, const char *path, Error *err) {
    FILE *f = fopen(path, "r");
    if (!f) return error_set(err, "cannot open %s", path);
    json_error_t jerr;
    int rc = 0;
    for (size_t line = 1; rc == 0; line++) {
        json_t *s = json_loadf(f, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        if (!s) {
            if (!feof(f) && jerr.position > 1)
                rc = error_set(err, "%s: line %zu: %s", path, line, jerr.text);
            break;
        }
        if (!json_is_string(s)) rc = error_set(err, "%s: line %zu is not a string", path, line);
        else rc = corpus_add(c, json_string_value(s), json_string_length(s), err);
        json_decref(s);
    }
    fclose(f);
    return rc;
}

static int write_corpus(const Corpus *c, const char *path, Error *err) {
    FILE *f = fopen(path, "w");
    if (!f) return error_set(err, "cannot write %s", path);
    for (size_t i = 0; i < c->count; i++) {
        json_t *s = json_stringn(c->docs[i], c->lens[i]);
        if (!s || json_dumpf(s, f, JSON_ENCODE_ANY) || fputc('\n', f) == EOF) {
            json_decref(s);
            fclose(f);
            return error_set(err, "cannot write %s", path);
        }
        json_decref(s);
    }
    return fclose(f) == 0 ? 0 : error_set(err, "cannot write %s", path);
}

/* Compares the ids of every document with a file of expected ids (JSON
 * lines of lists, e.g. Hugging Face's, from scripts/bench_tokenizer_hf.mjs). */
static int check_ids(const Corpus *c, int32_t *const *ids, const size_t *n_ids, const char *path,
                     size_t *differ, Error *err) {
    FILE *f = fopen(path, "r");
    if (!f) return error_set(err, "cannot open %s", path);
    *differ = 0;
    size_t i = 0;
    for (; i < c->count; i++) {
        json_error_t jerr;
        json_t *v = json_loadf(f, JSON_DISABLE_EOF_CHECK, &jerr);
        if (!json_is_array(v)) {
            json_decref(v);
            fclose(f);
            return error_set(err, "%s: line %zu is not a list of ids", path, i + 1);
        }
        bool same = json_array_size(v) == n_ids[i];
        for (size_t k = 0; same && k < n_ids[i]; k++)
            same = json_integer_value(json_array_get(v, k)) == ids[i][k];
        if (!same && (*differ)++ < 5)
            log_info("document %zu: ids differ from %s (%zu here, %zu there)", i + 1, path,
                     n_ids[i], json_array_size(v));
        json_decref(v);
    }
    fclose(f);
    return 0;
}

/* ---- timings ---- */

static int count_piece(void *ctx, const char *piece, size_t len) {
    (void)piece;
    (void)len;
    ++*(size_t *)ctx;
    return 0;
}

/* The Qwen pre-tokenizer regex alone over the (valid UTF-8) documents:
 * MB/s of the hand-written splitter (force_pcre2 false) or PCRE2's JIT. */
static int time_split(const Corpus *c, bool force_pcre2, double *mb_per_s, Error *err) {
    PreTokenizer pt;
    PretokScratch scratch = {0};
    if (pretokenizer_init_regex(&pt, PRETOK_QWEN_PATTERN, force_pcre2, err)) return -1;
    size_t pieces = 0, bytes = 0;
    double t0 = now_seconds();
    int rc = 0;
    for (size_t i = 0; i < c->count && rc == 0; i++) {
        if (!utf8_is_valid(c->docs[i], c->lens[i])) continue;
        rc = pretokenizer_split(&pt, c->docs[i], c->lens[i], &scratch, count_piece, &pieces, err);
        bytes += c->lens[i];
    }
    *mb_per_s = bytes / 1e6 / (now_seconds() - t0);
    pretok_scratch_free(&scratch);
    pretokenizer_free(&pt);
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int bench_tokenizer(const Tokenizer *t, const char *model_dir, const TokenizerBenchArgs *a,
                   bool json, Error *err) {
    enum { LOADS = 5 };
    double load_ms[LOADS];
    for (int i = 0; i < LOADS; i++) {
        double t0 = now_seconds();
        Tokenizer *again = model_tokenizer_load(model_dir, tokenizer_model_vocab_size(t), err);
        load_ms[i] = (now_seconds() - t0) * 1e3;
        if (!again) return -1;
        tokenizer_free(again);
    }
    qsort(load_ms, LOADS, sizeof load_ms[0], cmp_double);

    Corpus c = {0};
    int rc = a->text_path ? read_corpus(&c, a->text_path, err)
                          : generate(&c, (size_t)a->megabytes << 20, err);
    if (rc == 0 && a->write_path) rc = write_corpus(&c, a->write_path, err);
    int32_t **ids = rc == 0 ? calloc(c.count ? c.count : 1, sizeof *ids) : NULL;
    size_t *n_ids = rc == 0 ? calloc(c.count ? c.count : 1, sizeof *n_ids) : NULL;
    if (rc == 0 && (!ids || !n_ids)) rc = error_set(err, "out of memory");
    double enc[100], dec[100];
    size_t tokens = 0, decoded_bytes = 0, differ = 0;
    int runs = a->runs > 100 ? 100 : a->runs;
    for (int run = 0; run < runs && rc == 0; run++) {
        tokens = 0;
        double t0 = now_seconds();
        for (size_t i = 0; i < c.count && rc == 0; i++) {
            free(ids[i]);
            ids[i] = NULL;
            rc = tokenizer_encode(t, c.docs[i], c.lens[i], &ids[i], &n_ids[i], err);
            tokens += n_ids[i];
        }
        enc[run] = now_seconds() - t0;
        decoded_bytes = 0;
        t0 = now_seconds();
        for (size_t i = 0; i < c.count && rc == 0; i++) {
            char *text;
            size_t len;
            rc = tokenizer_decode(t, ids[i], n_ids[i], false, &text, &len, err);
            if (rc == 0) free(text);
            decoded_bytes += len;
        }
        dec[run] = now_seconds() - t0;
    }
    if (rc == 0 && a->check_path) rc = check_ids(&c, ids, n_ids, a->check_path, &differ, err);
    double split_native = 0, split_pcre2 = 0;
    if (rc == 0) rc = time_split(&c, false, &split_native, err);
    if (rc == 0) rc = time_split(&c, true, &split_pcre2, err);
    if (rc == 0) {
        double mb = c.bytes / 1e6;
        if (json) {
            json_t *e = json_array(), *d = json_array();
            for (int i = 0; i < runs; i++) {
                json_array_append_new(e, json_real(mb / enc[i]));
                json_array_append_new(d, json_real(decoded_bytes / 1e6 / dec[i]));
            }
            json_t *o = json_pack("{s:s, s:f, s:f, s:f, s:I, s:I, s:o, s:o}", "engine", "nanovllm",
                                  "load_ms_min", load_ms[0], "load_ms_median", load_ms[LOADS / 2],
                                  "megabytes", mb, "documents", (json_int_t)c.count,
                                  "tokens", (json_int_t)tokens, "encode_mb_per_s", e,
                                  "decode_mb_per_s", d);
            json_object_set_new(o, "split_only_mb_per_s",
                                json_pack("{s:f, s:f}", "hand_written", split_native, "pcre2_jit",
                                          split_pcre2));
            if (o && a->check_path)
                json_object_set_new(o, "documents_with_different_ids", json_integer((json_int_t)differ));
            if (!o || json_dumpf(o, stdout, JSON_COMPACT | JSON_REAL_PRECISION(4))) rc = -1;
            json_decref(o);
            putchar('\n');
        } else {
            printf("load tokenizer.json: min %.1f ms, median %.1f ms (%d loads)\n", load_ms[0],
                   load_ms[LOADS / 2], LOADS);
            printf("text: %.2f MB in %zu documents, %zu tokens\n", mb, c.count, tokens);
            for (int i = 0; i < runs; i++)
                printf("run %d: encode %.2f MB/s (%.0fk tokens/s), decode %.1f MB/s\n", i + 1,
                       mb / enc[i], tokens / enc[i] / 1e3, decoded_bytes / 1e6 / dec[i]);
            printf("pre-tokenizer regex alone: hand-written %.1f MB/s, PCRE2 JIT %.1f MB/s\n",
                   split_native, split_pcre2);
            if (a->check_path)
                printf("ids: %zu of %zu documents differ from %s\n", differ, c.count,
                       a->check_path);
        }
        if (rc) error_set(err, "cannot write the result");
    }
    for (size_t i = 0; ids && i < c.count; i++) free(ids[i]);
    free(ids);
    free(n_ids);
    corpus_free(&c);
    return rc;
}

/* ---- the chat template ---- */

/* Each render timed alone; the request is parsed once, as the server parses
 * it once before rendering. */
int bench_chat_template(const ChatTemplate *ct, const json_t *request, int runs, bool json,
                        Error *err) {
    double *ms = calloc((size_t)runs, sizeof *ms);
    if (!ms) return error_set(err, "out of memory");
    size_t len = 0;
    char *text = chat_template_render(ct, request, chat_template_clock(), &len, err); /* warm-up */
    if (!text) {
        free(ms);
        return -1;
    }
    free(text);
    double total = 0;
    for (int i = 0; i < runs; i++) {
        double t0 = now_seconds();
        text = chat_template_render(ct, request, chat_template_clock(), &len, err);
        ms[i] = (now_seconds() - t0) * 1e3;
        total += ms[i];
        if (!text) {
            free(ms);
            return -1;
        }
        free(text);
    }
    qsort(ms, (size_t)runs, sizeof *ms, cmp_double);
    size_t messages = json_array_size(json_object_get(request, "messages"));
    size_t tools = json_array_size(json_object_get(request, "tools"));
    if (json)
        printf("{\"messages\": %zu, \"tools\": %zu, \"prompt_bytes\": %zu, \"runs\": %d, "
               "\"median_ms\": %.4f, \"best_ms\": %.4f, \"mean_ms\": %.4f}\n",
               messages, tools, len, runs, ms[runs / 2], ms[0], total / runs);
    else
        printf("chat template: %zu messages, %zu tools -> %zu bytes; %d renders: median %.3f ms, "
               "best %.3f ms, mean %.3f ms\n",
               messages, tools, len, runs, ms[runs / 2], ms[0], total / runs);
    free(ms);
    return fflush(stdout) == 0 ? 0 : error_set(err, "cannot write to stdout");
}
