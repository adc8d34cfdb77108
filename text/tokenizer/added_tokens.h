/*
 * added_tokens.h - tokens matched in the text before anything else.
 *
 * tokenizer.json's added_tokens (<|im_start|>, <think>, ...) are cut out of
 * the text before normalization and BPE, so they always become their own
 * id and are never merged with their neighbours. Matching follows Hugging
 * Face's AddedVocabulary: leftmost-longest over all contents; single_word
 * drops a match touching a word character; lstrip/rstrip take the white
 * space beside the match into it; tokens with normalized=false are matched
 * in the raw text, those with normalized=true in each normalized piece of
 * what is left.
 */
#ifndef NANOVLLM_ADDED_TOKENS_H
#define NANOVLLM_ADDED_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct AddedToken {
    char *content; /* UTF-8, as in tokenizer.json */
    size_t len;
    int32_t id;
    bool special, single_word, lstrip, rstrip, normalized;
} AddedToken;

typedef struct TrieNode {
    int32_t first_child, next_sibling;
    int32_t token; /* index into tokens of the content ending here, or -1 */
    unsigned char byte;
} TrieNode;

/* A byte trie over a set of token contents. */
typedef struct TokenTrie {
    TrieNode *nodes;
    size_t count, cap;
    bool first_byte[256];
    int single_first_byte; /* the only first byte (memchr), or -1 */
} TokenTrie;

typedef struct AddedTokens {
    AddedToken *tokens;
    size_t count, cap;
    TokenTrie raw;        /* normalized == false */
    TokenTrie normalized; /* normalized == true, matched against NFC'd content */
} AddedTokens;

/* Receives the pieces of a split in order: id >= 0 for an added token,
 * -1 for text between tokens (s[0..n), never empty). */
typedef int (*SegmentFn)(void *ctx, int32_t id, const char *s, size_t n);

int added_tokens_add(AddedTokens *a, const AddedToken *token, Error *err);

/* Builds the tries once all tokens are added. nfc: whether the normalizer
 * is NFC (normalized tokens are then matched by their NFC form). */
int added_tokens_build(AddedTokens *a, bool nfc, Error *err);

/* Splits well-formed UTF-8 s[0..n) with the raw or the normalized set. */
int added_tokens_split(const AddedTokens *a, bool normalized_set, const char *s, size_t n,
                       SegmentFn fn, void *ctx);

/* The added token with this exact content, or NULL. */
const AddedToken *added_tokens_find(const AddedTokens *a, const char *content, size_t len);

void added_tokens_free(AddedTokens *a);

#endif
