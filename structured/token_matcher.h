/*
 * token_matcher.h - a compiled grammar over a model's vocabulary: which
 * tokens may come next, as a bitmask, in microseconds per step.
 *
 * Tokens are byte strings (byte-level BPE: a token may hold part of a
 * UTF-8 character); special tokens never match text, and only the end ids
 * the caller names (EOS, stop ids) are allowed, where the grammar may end.
 *
 * Speed comes from precomputation (token_grammar_new, off the engine
 * thread): for every automaton state, the tokens it accepts whatever lies
 * below it on the stack are kept as a set, the tokens it rejects are
 * dropped, and only the rest - tokens that finish the current rule part-way
 * through - are kept as a short list to check against the real stack at
 * run time. A step ORs a few precomputed sets and checks that list.
 */
#ifndef NANOVLLM_TOKEN_MATCHER_H
#define NANOVLLM_TOKEN_MATCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar.h"
#include "text/tokenizer/tokenizer.h"

/* The bytes of every token id, sorted for prefix walks. Immutable, shared. */
typedef struct TokenVocab TokenVocab;

/* vocab_size: the model's (the mask's width; ids the tokenizer lacks never match). */
TokenVocab *token_vocab_new(const Tokenizer *tok, int vocab_size, Error *err);
/* For tests: a vocabulary of explicit byte strings (lens[i] 0: never matches). */
TokenVocab *token_vocab_from_strings(const char *const *tokens, const size_t *lens, int n, Error *err);
void token_vocab_free(TokenVocab *v);
int token_vocab_size(const TokenVocab *v);
/* 32-bit words in a mask over the vocabulary. */
static inline int token_mask_words(int vocab_size) { return (vocab_size + 31) / 32; }

/* A grammar with its per-state token sets. Immutable once built: any number
 * of matchers on any threads may share it. Takes ownership of cg (freed on
 * failure too). The vocabulary must outlive it. */
typedef struct TokenGrammar TokenGrammar;
TokenGrammar *token_grammar_new(CompiledGrammar *cg, const TokenVocab *v, Error *err);
void token_grammar_free(TokenGrammar *tg);
size_t token_grammar_bytes(const TokenGrammar *tg);
int token_grammar_vocab_size(const TokenGrammar *tg);

/* One sequence's position in the grammar. */
typedef struct TokenMatcher TokenMatcher;
TokenMatcher *token_matcher_new(const TokenGrammar *tg, Error *err);
void token_matcher_free(TokenMatcher *m);

/* mask[token_mask_words(vocab)]: bit t set when token t may come next. The
 * end ids are allowed only where the grammar can end (and after it ended).
 * -1 only on a limit or out of memory. */
int token_matcher_fill_mask(TokenMatcher *m, uint32_t *mask, const int32_t *end_ids, int num_end_ids, Error *err);

/* Moves on by one token (is_end: the caller's end id). -1 with err when the
 * token is not allowed here. */
int token_matcher_accept(TokenMatcher *m, int32_t token, bool is_end, Error *err);

/* The grammar is complete and nothing more may follow (only an end id). */
bool token_matcher_done(const TokenMatcher *m);
/* The text so far is a complete match (an end id is allowed now). */
bool token_matcher_can_end(const TokenMatcher *m);

#endif
