/*
 * added_tokens.c - finding added tokens in text (see added_tokens.h).
 *
 * A byte trie with first-child/next-sibling links: small for any number of
 * tokens, and matching only starts at bytes that begin some token (for
 * Qwen only '<', found with memchr), so ordinary text costs one scan.
 * Leftmost-longest: the first position where any token matches wins, and
 * there the longest token; the search then resumes after that match even
 * when single_word rejects it (as the Aho-Corasick iterator in Hugging
 * Face does).
 */
#include "added_tokens.h"

#include <stdlib.h>
#include <string.h>

#include "unicode_nfc.h"
#include "unicode_props.h"
#include "utf8.h"
#include "base/byte_buf.h"

static int trie_node(TokenTrie *t, unsigned char byte) {
    if (array_reserve((void **)&t->nodes, &t->cap, t->count + 1, sizeof *t->nodes)) return -1;
    t->nodes[t->count] = (TrieNode){-1, -1, -1, byte};
    return (int)t->count++;
}

static int trie_insert(TokenTrie *t, const char *s, size_t n, int32_t token) {
    if (t->count == 0 && trie_node(t, 0) < 0) return -1; /* the root */
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        int32_t child = t->nodes[node].first_child;
        while (child >= 0 && t->nodes[child].byte != b) child = t->nodes[child].next_sibling;
        if (child < 0) {
            int c = trie_node(t, b);
            if (c < 0) return -1;
            child = c;
            t->nodes[child].next_sibling = t->nodes[node].first_child;
            t->nodes[node].first_child = child;
        }
        node = child;
    }
    /* Two tokens with one content: the first keeps it. */
    if (t->nodes[node].token < 0) t->nodes[node].token = token;
    t->first_byte[(unsigned char)s[0]] = true;
    return 0;
}

static void trie_finish(TokenTrie *t) {
    t->single_first_byte = -1;
    int count = 0;
    for (int b = 0; b < 256; b++)
        if (t->first_byte[b]) {
            count++;
            t->single_first_byte = b;
        }
    if (count != 1) t->single_first_byte = -1;
}

/* Longest token starting at s[i]: its index (end in *end), or -1. */
static int32_t trie_longest(const TokenTrie *t, const unsigned char *s, size_t n, size_t i,
                            size_t *end) {
    int32_t node = 0, best = -1;
    for (size_t k = i; k < n; k++) {
        int32_t child = t->nodes[node].first_child;
        while (child >= 0 && t->nodes[child].byte != s[k]) child = t->nodes[child].next_sibling;
        if (child < 0) break;
        node = child;
        if (t->nodes[node].token >= 0) {
            best = t->nodes[node].token;
            *end = k + 1;
        }
    }
    return best;
}

/* Next position >= i where a token could start, or n. */
static size_t next_candidate(const TokenTrie *t, const unsigned char *s, size_t n, size_t i) {
    if (t->single_first_byte >= 0) {
        const unsigned char *p = memchr(s + i, t->single_first_byte, n - i);
        return p ? (size_t)(p - s) : n;
    }
    while (i < n && !t->first_byte[s[i]]) i++;
    return i;
}

int added_tokens_add(AddedTokens *a, const AddedToken *token, Error *err) {
    if (token->len == 0) return error_set(err, "added token %d has empty content", token->id);
    if (array_reserve((void **)&a->tokens, &a->cap, a->count + 1, sizeof *a->tokens))
        return error_set(err, "out of memory");
    AddedToken *t = &a->tokens[a->count];
    *t = *token;
    t->content = malloc(token->len + 1);
    if (!t->content) return error_set(err, "out of memory");
    memcpy(t->content, token->content, token->len);
    t->content[token->len] = '\0';
    a->count++;
    return 0;
}

int added_tokens_build(AddedTokens *a, bool nfc, Error *err) {
    ByteBuf norm = {0};
    NfcScratch scratch = {0};
    for (size_t i = 0; i < a->count; i++) {
        const AddedToken *t = &a->tokens[i];
        if (!t->normalized) {
            if (trie_insert(&a->raw, t->content, t->len, (int32_t)i)) goto oom;
            continue;
        }
        const char *s = t->content;
        size_t n = t->len;
        if (nfc && unicode_nfc(t->content, t->len, &norm, &scratch, &s, &n)) goto oom;
        if (n && trie_insert(&a->normalized, s, n, (int32_t)i)) goto oom;
    }
    byte_buf_free(&norm);
    nfc_scratch_free(&scratch);
    trie_finish(&a->raw);
    trie_finish(&a->normalized);
    return 0;
oom:
    byte_buf_free(&norm);
    nfc_scratch_free(&scratch);
    return error_set(err, "out of memory");
}

/* The character that ends at s[i] (i > 0), in well-formed UTF-8. */
static uint32_t char_before(const unsigned char *s, size_t i, size_t *start) {
    size_t k = i - 1;
    while (k > 0 && (s[k] & 0xC0) == 0x80) k--;
    int len;
    *start = k;
    return utf8_decode_valid(s + k, &len);
}

int added_tokens_split(const AddedTokens *a, bool normalized_set, const char *text, size_t n,
                       SegmentFn fn, void *ctx) {
    const TokenTrie *t = normalized_set ? &a->normalized : &a->raw;
    const unsigned char *s = (const unsigned char *)text;
    size_t done = 0, i = 0; /* done: end of the last piece given to fn */
    if (t->count == 0) return n ? fn(ctx, -1, text, n) : 0;
    while ((i = next_candidate(t, s, n, i)) < n) {
        size_t end = 0;
        int32_t k = trie_longest(t, s, n, i, &end);
        if (k < 0) {
            i++;
            continue;
        }
        const AddedToken *tok = &a->tokens[k];
        size_t start = i, stop = end, before;
        i = end;
        if (tok->single_word) {
            int len;
            bool word_before = start > 0 && unicode_is_word_char(char_before(s, start, &before));
            bool word_after = stop < n && unicode_is_word_char(utf8_decode_valid(s + stop, &len));
            if (word_before || word_after) continue;
        }
        if (tok->lstrip) {
            while (start > 0) {
                uint32_t cp = char_before(s, start, &before);
                if (!unicode_is_white_space(cp)) break;
                start = before;
            }
            if (start < done) start = done;
        }
        if (tok->rstrip) {
            while (stop < n) {
                int len;
                if (!unicode_is_white_space(utf8_decode_valid(s + stop, &len))) break;
                stop += (size_t)len;
            }
        }
        if (done < start && fn(ctx, -1, text + done, start - done)) return -1;
        if (fn(ctx, tok->id, text + start, stop - start)) return -1;
        done = stop;
    }
    if (done < n && fn(ctx, -1, text + done, n - done)) return -1;
    return 0;
}

const AddedToken *added_tokens_find(const AddedTokens *a, const char *content, size_t len) {
    for (size_t i = 0; i < a->count; i++)
        if (a->tokens[i].len == len && memcmp(a->tokens[i].content, content, len) == 0)
            return &a->tokens[i];
    return NULL;
}

void added_tokens_free(AddedTokens *a) {
    for (size_t i = 0; i < a->count; i++) free(a->tokens[i].content);
    free(a->tokens);
    free(a->raw.nodes);
    free(a->normalized.nodes);
    memset(a, 0, sizeof *a);
}
