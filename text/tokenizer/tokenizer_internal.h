/*
 * tokenizer_internal.h - the Tokenizer struct, shared by the files that
 * implement tokenizer.h: tokenizer.c (loading, lookups), tokenizer_vocab.c
 * (loading from tables), tokenizer_encode.c and detokenizer.c. Nothing
 * outside them includes this.
 */
#ifndef NANOVLLM_TOKENIZER_INTERNAL_H
#define NANOVLLM_TOKENIZER_INTERNAL_H

#include <pthread.h>

#include "added_tokens.h"
#include "bpe.h"
#include "pretokenizer.h"
#include "tokenizer.h"

enum { TOKEN_PRESENT = 1, TOKEN_SPECIAL = 2, TOKEN_ADDED = 4 };

typedef struct EncodeState EncodeState;

/* Work memory for encode calls: each call takes a state for itself. */
typedef struct StatePool {
    pthread_mutex_t lock;
    EncodeState *idle; /* states no call is using */
    EncodeState *all;  /* every state, for tokenizer_free */
} StatePool;

#define TOKENIZER_MAX_TEMPLATE_IDS 8

struct Tokenizer {
    Bpe bpe;
    AddedTokens added;
    PreTokenizer pretok;
    bool nfc;
    int32_t size;             /* 1 + the largest id */
    int32_t model_vocab_size; /* >= size */
    /* By id: TOKEN_* flags and the bytes it decodes to. */
    uint8_t *flags;
    const char **bytes;
    uint32_t *bytes_len;
    ByteBuf added_bytes; /* what added tokens decode to */
    int32_t eos_id, pad_id, bos_id;
    /* A TemplateProcessing post_processor's single-sequence template: the
     * ids around the text, added by tokenizer_add_special_tokens. */
    int32_t post_before[TOKENIZER_MAX_TEMPLATE_IDS], post_after[TOKENIZER_MAX_TEMPLATE_IDS];
    int num_post_before, num_post_after;
    char *chat_template, *tool_use_template; /* tool_use: the named list's, for requests with tools */
    json_t *special_strings;                 /* {"eos_token": "<|im_end|>", ...} */
    StatePool *pool;
};

void tokenizer_free_states(StatePool *pool);

/* The steps tokenizer_load (tokenizer.c) and tokenizer_load_vocab
 * (tokenizer_vocab.c) share. tokenizer_new: an empty tokenizer (no special
 * ids) for tokenizer_free. tokenizer_build_id_tables: the per-id tables,
 * once the BPE model and the added tokens are complete. tokenizer_fit_model_vocab:
 * sets the model's size (0: the tokenizer's own), an error naming source
 * when the tokenizer has more ids. */
Tokenizer *tokenizer_new(Error *err);
int tokenizer_build_id_tables(Tokenizer *t, Error *err);
int tokenizer_fit_model_vocab(Tokenizer *t, int model_vocab_size, const char *source, Error *err);

#endif
