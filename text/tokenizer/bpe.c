/*
 * bpe.c - byte-level BPE: tables and merging (see bpe.h).
 *
 * Both tables are open-addressing hash tables at most half full: the
 * vocabulary maps a token's raw bytes to its id, the merge table maps a
 * pair of ids to (rank, merged id). Merging a word uses one of two
 * algorithms with the same result: for short words (nearly all) a scan for
 * the lowest rank over an array, which is quadratic but has no overhead;
 * for long words (a line of CJK text is one word) a min-heap of (rank,
 * position) over a linked list, as Hugging Face does, so no input can make
 * merging quadratic.
 */
#include "bpe.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

#define NO_RANK UINT32_MAX
#define MAX_TOKEN_ID (1 << 24) /* far above any real vocabulary; bounds the tables */
/* Words of up to this many symbols use the scan (tokenize --bench encode:
 * 46-47 MB/s at 8, 44-45 at 24, ~40 at 64, 44-46 at 2-4). */
#define SHORT_WORD_SYMBOLS 8
#define ALPHABET_END (0x100 + 68)

/* GPT-2's byte-level alphabet: printable Latin-1 stands for itself, the
 * other 68 bytes for U+0100.. in byte order. */
static bool byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

uint32_t bpe_byte_to_char(unsigned char b) {
    if (byte_is_printable(b)) return b;
    uint32_t n = 0;
    for (unsigned x = 0; x < b; x++) n += !byte_is_printable(x);
    return 0x100 + n;
}

/* The byte a byte-level character stands for, or -1. */
static int char_to_byte(uint32_t cp) {
    if (cp < 0x100) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= ALPHABET_END) return -1;
    uint32_t k = cp - 0x100;
    for (unsigned x = 0; x < 256; x++)
        if (!byte_is_printable(x) && k-- == 0) return (int)x;
    return -1;
}

/* Writes the raw bytes a byte-level token stands for into out (room for
 * len bytes); returns their count, or -1 when a character is outside the
 * alphabet. tok is well-formed UTF-8. */
static long token_to_raw(const int16_t *table, const char *tok, size_t len, unsigned char *out) {
    const unsigned char *p = (const unsigned char *)tok;
    size_t i = 0, o = 0;
    while (i < len) {
        int k;
        uint32_t cp = utf8_decode_valid(p + i, &k);
        if (cp >= ALPHABET_END || table[cp] < 0) return -1;
        out[o++] = (unsigned char)table[cp];
        i += (size_t)k;
    }
    return (long)o;
}

static int16_t alphabet[ALPHABET_END];
static pthread_once_t alphabet_once = PTHREAD_ONCE_INIT;

static void build_alphabet(void) {
    for (uint32_t cp = 0; cp < ALPHABET_END; cp++) alphabet[cp] = (int16_t)char_to_byte(cp);
}

static void init_alphabet(void) { pthread_once(&alphabet_once, build_alphabet); }

int bpe_char_to_byte(uint32_t cp) {
    init_alphabet();
    return cp < ALPHABET_END ? alphabet[cp] : -1;
}

static inline uint32_t mix_pair(uint64_t key) {
    key *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(key >> 32) ^ (uint32_t)key;
}

static uint32_t pow2_at_least(size_t n) {
    uint32_t c = 16;
    while (c < n && c < (1u << 30)) c *= 2;
    return c;
}

int bpe_init(Bpe *b, Error *err) {
    (void)err;
    memset(b, 0, sizeof *b);
    init_alphabet();
    b->unk_id = -1;
    for (int i = 0; i < 256; i++) b->byte_id[i] = -1;
    return 0;
}

void bpe_free(Bpe *b) {
    free(b->offset);
    free(b->len);
    free(b->reachable);
    byte_buf_free(&b->bytes);
    free(b->vocab_slots);
    free(b->merge_slots);
    free(b->byte_pairs);
    memset(b, 0, sizeof *b);
}

/* Makes the id-indexed tables cover id; new ids start absent. */
static int cover_id(Bpe *b, int32_t id, Error *err) {
    if (id < b->num_ids) return 0;
    size_t need = (size_t)id + 1;
    if (need > b->ids_cap) {
        size_t cap = b->ids_cap;
        if (array_reserve((void **)&b->offset, &cap, need, sizeof *b->offset)) goto oom;
        cap = b->ids_cap;
        if (array_reserve((void **)&b->len, &cap, need, sizeof *b->len)) goto oom;
        cap = b->ids_cap;
        if (array_reserve((void **)&b->reachable, &cap, need, sizeof *b->reachable)) goto oom;
        b->ids_cap = cap;
    }
    for (int32_t i = b->num_ids; i <= id; i++) {
        b->len[i] = -1;
        b->offset[i] = 0;
        b->reachable[i] = 0;
    }
    b->num_ids = id + 1;
    return 0;
oom:
    return error_set(err, "out of memory");
}

int bpe_add_token(Bpe *b, const char *tok, size_t len, int64_t id, Error *err) {
    if (id < 0 || id >= MAX_TOKEN_ID)
        return error_set(err, "vocabulary token '%.*s' has id %lld, outside [0, %d)",
                         (int)(len < 60 ? len : 60), tok, (long long)id, MAX_TOKEN_ID);
    if (len == 0) return error_set(err, "the vocabulary has an empty token (id %lld)", (long long)id);
    if (len > (1u << 20)) return error_set(err, "vocabulary token %lld is over 1 MiB", (long long)id);
    if (cover_id(b, (int32_t)id, err)) return -1;
    if (b->len[id] >= 0) return error_set(err, "two vocabulary tokens have id %lld", (long long)id);
    if (b->bytes.len + len > UINT32_MAX) return error_set(err, "the vocabulary is too large");
    if (byte_buf_reserve(&b->bytes, len)) return error_set(err, "out of memory");
    unsigned char *dst = (unsigned char *)b->bytes.data + b->bytes.len;
    long raw = token_to_raw(alphabet, tok, len, dst);
    b->reachable[id] = raw >= 0;
    if (raw < 0) { /* outside the alphabet: decodes to its own UTF-8 */
        memcpy(dst, tok, len);
        raw = (long)len;
    }
    b->offset[id] = (uint32_t)b->bytes.len;
    b->len[id] = (int32_t)raw;
    b->bytes.len += (size_t)raw;
    if ((size_t)raw > b->max_token_bytes) b->max_token_bytes = (size_t)raw;
    b->num_tokens++;
    return 0;
}

int32_t bpe_lookup_bytes(const Bpe *b, const void *bytes, size_t len) {
    if (!b->vocab_slots) return -1;
    uint32_t i = (uint32_t)bpe_hash_bytes(bytes, len) & b->vocab_mask;
    for (;;) {
        int32_t id = b->vocab_slots[i];
        if (id < 0) return -1;
        if ((size_t)b->len[id] == len && memcmp(b->bytes.data + b->offset[id], bytes, len) == 0)
            return id;
        i = (i + 1) & b->vocab_mask;
    }
}

int bpe_finish_vocab(Bpe *b, Error *err) {
    uint32_t cap = pow2_at_least(2 * (size_t)b->num_tokens + 2);
    b->vocab_mask = cap - 1;
    b->vocab_slots = malloc(cap * sizeof *b->vocab_slots);
    if (!b->vocab_slots) return error_set(err, "out of memory");
    memset(b->vocab_slots, 0xFF, cap * sizeof *b->vocab_slots); /* all -1 */
    for (int32_t id = 0; id < b->num_ids; id++) {
        if (b->len[id] < 0 || !b->reachable[id]) continue;
        const char *bytes = b->bytes.data + b->offset[id];
        size_t len = (size_t)b->len[id];
        uint32_t i = (uint32_t)bpe_hash_bytes(bytes, len) & b->vocab_mask;
        for (int32_t other; (other = b->vocab_slots[i]) >= 0; i = (i + 1) & b->vocab_mask)
            if ((size_t)b->len[other] == len && memcmp(b->bytes.data + b->offset[other], bytes, len) == 0)
                return error_set(err, "the vocabulary lists token %d twice (as %d too)", id, other);
        b->vocab_slots[i] = id;
        if (len == 1) b->byte_id[(unsigned char)bytes[0]] = id;
    }
    /* The merge table: merges are about as many as tokens; at most half full
     * (measured: emptier tables cut the probes of pairs that do not merge,
     * which end every word; 4 MB -> 8 MB gave +6% encode). All bytes 0xFF
     * is an empty slot (rank NO_RANK). */
    cap = pow2_at_least((size_t)b->num_tokens * 2 + 16);
    b->merge_mask = cap - 1;
    b->merge_slots = malloc((size_t)cap * sizeof *b->merge_slots);
    if (!b->merge_slots) return error_set(err, "out of memory");
    memset(b->merge_slots, 0xFF, (size_t)cap * sizeof *b->merge_slots);
    return 0;
}

int32_t bpe_token_to_id(const Bpe *b, const char *tok, size_t len) {
    if (len == 0 || !utf8_is_valid(tok, len)) return -1;
    unsigned char stack[256], *raw = len <= sizeof stack ? stack : malloc(len);
    if (!raw) return -1;
    long n = token_to_raw(alphabet, tok, len, raw);
    int32_t id = -1;
    if (n >= 0) {
        id = bpe_lookup_bytes(b, raw, (size_t)n);
    } else { /* a token outside the alphabet is stored as its UTF-8 */
        for (int32_t i = 0; i < b->num_ids && id < 0; i++)
            if (b->len[i] == (int32_t)len && !b->reachable[i] &&
                memcmp(b->bytes.data + b->offset[i], tok, len) == 0)
                id = i;
    }
    if (raw != stack) free(raw);
    return id;
}

static inline uint32_t pair_rank(const Bpe *b, int32_t left, int32_t right, int32_t *merged) {
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    uint32_t i = mix_pair(key) & b->merge_mask;
    for (;;) {
        const MergeSlot *s = &b->merge_slots[i];
        if (s->rank == NO_RANK) return NO_RANK;
        if (s->pair == key) {
            *merged = s->merged;
            return s->rank;
        }
        i = (i + 1) & b->merge_mask;
    }
}

static void merge_insert(MergeSlot *slots, uint32_t mask, MergeSlot m) {
    uint32_t i = mix_pair(m.pair) & mask;
    while (slots[i].rank != NO_RANK && slots[i].pair != m.pair) i = (i + 1) & mask;
    /* A pair listed twice keeps its later rank, as Hugging Face's map does. */
    slots[i] = m;
}

static int merge_grow(Bpe *b, Error *err) {
    uint32_t cap = (b->merge_mask + 1) * 2;
    MergeSlot *slots = malloc((size_t)cap * sizeof *slots);
    if (!slots) return error_set(err, "out of memory");
    memset(slots, 0xFF, (size_t)cap * sizeof *slots);
    for (uint32_t i = 0; i <= b->merge_mask; i++)
        if (b->merge_slots[i].rank != NO_RANK) merge_insert(slots, cap - 1, b->merge_slots[i]);
    free(b->merge_slots);
    b->merge_slots = slots;
    b->merge_mask = cap - 1;
    return 0;
}

/* Id of one side of a merge: -2 when it is outside the alphabet (such a
 * merge can never apply), -1 with err set when the vocabulary lacks it. */
static int32_t merge_side(const Bpe *b, const char *tok, size_t len, unsigned char *raw,
                          long *raw_len, Error *err) {
    *raw_len = token_to_raw(alphabet, tok, len, raw);
    if (*raw_len < 0) return -2;
    int32_t id = *raw_len > 0 ? bpe_lookup_bytes(b, raw, (size_t)*raw_len) : -1;
    if (id < 0)
        error_set(err, "merge part '%.*s' is not in the vocabulary", (int)(len < 100 ? len : 100),
                  tok);
    return id;
}

int bpe_add_merge(Bpe *b, const char *left, size_t left_len, const char *right, size_t right_len,
                  Error *err) {
    uint32_t rank = b->num_merges++;
    if (left_len + right_len > 4096)
        return error_set(err, "merge %u is longer than 4096 bytes", rank);
    unsigned char raw[4096];
    long ln, rn;
    int32_t l = merge_side(b, left, left_len, raw, &ln, err);
    if (l == -1) return -1;
    int32_t r = l == -2 ? -2 : merge_side(b, right, right_len, raw + ln, &rn, err);
    if (r == -1) return -1;
    if (l == -2 || r == -2) return 0;
    int32_t merged = bpe_lookup_bytes(b, raw, (size_t)(ln + rn));
    if (merged < 0)
        return error_set(err, "merge '%.*s' + '%.*s': the merged token is not in the vocabulary",
                         (int)(left_len < 60 ? left_len : 60), left,
                         (int)(right_len < 60 ? right_len : 60), right);
    if ((size_t)(rank + 1) * 2 >= b->merge_mask && merge_grow(b, err)) return -1;
    merge_insert(b->merge_slots, b->merge_mask,
                 (MergeSlot){((uint64_t)(uint32_t)l << 32) | (uint32_t)r, rank, merged});
    return 0;
}

int bpe_finish(Bpe *b, Error *err) {
    for (int i = 0; i < 256; i++)
        if (b->byte_id[i] < 0) return 0; /* an incomplete byte alphabet: no shortcut */
    b->byte_pairs = malloc(65536 * sizeof *b->byte_pairs);
    if (!b->byte_pairs) return error_set(err, "out of memory");
    for (unsigned p = 0; p < 65536; p++) {
        int32_t merged = -1;
        uint32_t rank = pair_rank(b, b->byte_id[p >> 8], b->byte_id[p & 255], &merged);
        b->byte_pairs[p] = (struct BytePair){rank, merged};
    }
    return 0;
}

/* ---- merging one word ---- */

static int scratch_reserve(BpeScratch *s, size_t n) {
    if (n <= s->cap) return 0;
    size_t cap = s->cap, c2;
    c2 = cap;
    if (array_reserve((void **)&s->sym, &c2, n, sizeof *s->sym)) return -1;
    c2 = cap;
    if (array_reserve((void **)&s->prev, &c2, n, sizeof *s->prev)) return -1;
    c2 = cap;
    if (array_reserve((void **)&s->next, &c2, n, sizeof *s->next)) return -1;
    c2 = cap;
    if (array_reserve((void **)&s->merged, &c2, n, sizeof *s->merged)) return -1;
    c2 = cap;
    if (array_reserve((void **)&s->rank, &c2, n, sizeof *s->rank)) return -1;
    s->cap = c2;
    return 0;
}

void bpe_scratch_free(BpeScratch *s) {
    free(s->sym);
    free(s->prev);
    free(s->next);
    free(s->merged);
    free(s->rank);
    free(s->heap);
    memset(s, 0, sizeof *s);
}

/* The word's bytes as initial symbols; a byte without a token becomes the
 * unknown token (consecutive ones fused when asked) or is dropped, as in
 * Hugging Face. Returns the symbol count. */
static size_t initial_symbols(const Bpe *b, const unsigned char *w, size_t n, int32_t *sym) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = b->byte_id[w[i]];
        if (id < 0) {
            if (b->unk_id < 0) continue;
            if (b->fuse_unk && m > 0 && sym[m - 1] == b->unk_id) continue;
            id = b->unk_id;
        }
        sym[m++] = id;
    }
    return m;
}

/* Rank and result of merging each adjacent pair of the initial symbols:
 * from the byte-pair table when the symbols are the word's bytes. */
static void first_ranks(const Bpe *b, const unsigned char *w, const int32_t *sym, size_t m,
                        uint32_t *rank, int32_t *merged) {
    if (b->byte_pairs) {
        for (size_t i = 0; i + 1 < m; i++) {
            const struct BytePair *p = &b->byte_pairs[(unsigned)w[i] << 8 | w[i + 1]];
            rank[i] = p->rank;
            merged[i] = p->merged;
        }
    } else {
        for (size_t i = 0; i + 1 < m; i++) rank[i] = pair_rank(b, sym[i], sym[i + 1], &merged[i]);
    }
}

static size_t merge_by_scan(const Bpe *b, const unsigned char *w, int32_t *sym, size_t m,
                            BpeScratch *s) {
    uint32_t *rank = s->rank;
    int32_t *merged = s->merged;
    first_ranks(b, w, sym, m, rank, merged);
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == NO_RANK) break;
        sym[best] = merged[best];
        size_t tail = m - best - 2;
        memmove(sym + best + 1, sym + best + 2, tail * sizeof *sym);
        memmove(rank + best + 1, rank + best + 2, tail * sizeof *rank);
        memmove(merged + best + 1, merged + best + 2, tail * sizeof *merged);
        m--;
        if (best > 0) rank[best - 1] = pair_rank(b, sym[best - 1], sym[best], &merged[best - 1]);
        if (best + 1 < m) rank[best] = pair_rank(b, sym[best], sym[best + 1], &merged[best]);
    }
    return m;
}

/* Min-heap of (rank << 32 | position): pops the lowest rank, leftmost first. */
static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = v;
    return top;
}

/* rank[p] and merged[p] always describe the current pair at position p,
 * so a heap entry (r, p) is current exactly when rank[p] == r (a rank
 * names one pair): stale entries are dropped without a lookup. */
static size_t merge_by_heap(const Bpe *b, const unsigned char *w, int32_t *sym, size_t m,
                            BpeScratch *s) {
    int32_t *prev = s->prev, *next = s->next, *merged = s->merged;
    uint32_t *rank = s->rank;
    /* Each merge pushes at most two pairs. */
    if (array_reserve((void **)&s->heap, &s->heap_cap, 3 * m, sizeof *s->heap)) return SIZE_MAX;
    uint64_t *heap = s->heap;
    size_t hn = 0;
    first_ranks(b, w, sym, m, rank, merged);
    rank[m - 1] = NO_RANK;
    for (size_t i = 0; i < m; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < m ? (int32_t)i + 1 : -1;
        if (rank[i] != NO_RANK) heap_push(heap, &hn, (uint64_t)rank[i] << 32 | i);
    }
    while (hn) {
        uint64_t top = heap_pop(heap, &hn);
        int32_t p = (int32_t)(uint32_t)top;
        if (sym[p] < 0 || rank[p] != (uint32_t)(top >> 32)) continue;
        int32_t q = next[p];
        sym[p] = merged[p];
        sym[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        rank[p] = next[p] >= 0 ? pair_rank(b, sym[p], sym[next[p]], &merged[p]) : NO_RANK;
        if (rank[p] != NO_RANK) heap_push(heap, &hn, (uint64_t)rank[p] << 32 | (uint32_t)p);
        int32_t l = prev[p];
        if (l >= 0) {
            rank[l] = pair_rank(b, sym[l], sym[p], &merged[l]);
            if (rank[l] != NO_RANK) heap_push(heap, &hn, (uint64_t)rank[l] << 32 | (uint32_t)l);
        }
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) sym[k++] = sym[i];
    return k;
}

int bpe_encode_word_with(const Bpe *b, const unsigned char *w, size_t n, int32_t *out,
                         BpeScratch *s, int method) {
    if (n == 1 && b->byte_id[w[0]] >= 0) {
        out[0] = b->byte_id[w[0]];
        return 1;
    }
    if (b->ignore_merges) {
        int32_t id = bpe_lookup_bytes(b, w, n);
        if (id >= 0) {
            out[0] = id;
            return 1;
        }
    }
    if (n > INT32_MAX / 4 || scratch_reserve(s, n)) return -1;
    size_t m = initial_symbols(b, w, n, s->sym);
    if (m == 0) return 0;
    if (method == 0) method = m <= SHORT_WORD_SYMBOLS ? 1 : 2;
    m = method == 1 ? merge_by_scan(b, w, s->sym, m, s) : merge_by_heap(b, w, s->sym, m, s);
    if (m == SIZE_MAX) return -1;
    memcpy(out, s->sym, m * sizeof *out);
    return (int)m;
}

int bpe_encode_word(const Bpe *b, const unsigned char *w, size_t n, int32_t *out, BpeScratch *s) {
    return bpe_encode_word_with(b, w, n, out, s, 0);
}
