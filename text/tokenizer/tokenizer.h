/*
 * tokenizer.h - the tokenizer library's front door: everything text in and
 * out of the model. Nothing outside text/tokenizer/ needs another of its
 * headers but chat_template.h (tests and benchmarks of its internals
 * excepted).
 *
 * Two parts, one section each below: the Tokenizer (Hugging Face
 * byte-level BPE, Qwen3's first: text to ids and back exactly as Hugging
 * Face's tokenizers library does with the model folder's tokenizer.json,
 * plus tokenizer_config.json's special tokens and chat template text) and
 * the Detokenizer (ids back to text one at a time, for streams and stop
 * strings). chat_template.h turns OpenAI-style chat requests into prompt
 * text with the folder's template.
 *
 * After tokenizer_load() a Tokenizer is read-only, and every function here
 * may be called from any number of threads at once (the HTTP server
 * tokenizes on libuv's worker pool); encode takes per-call work memory
 * (BPE cache included) from a small pool. Free it only when no thread
 * uses it any more.
 *
 * Input text is bytes with a length: U+0000 is an ordinary character, and
 * bytes that are not valid UTF-8 are read as Hugging Face reads a Python
 * str decoded with errors='replace': each maximal invalid subpart becomes
 * U+FFFD. Nothing here crashes or reads out of bounds on any input.
 */
#ifndef NANOVLLM_TOKENIZER_H
#define NANOVLLM_TOKENIZER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/byte_buf.h"
#include "base/error.h"

/* ---- tokenizer ------------------------------------------------------------- */

typedef struct Tokenizer Tokenizer;

/* Loads DIR/tokenizer.json and (when present) DIR/tokenizer_config.json.
 * model_vocab_size is the model's embedding rows (151936 for Qwen3): ids
 * from the tokenizer's size up to it decode to nothing, ids beyond are
 * errors. 0 means the tokenizer's own size. A tokenizer.json using a
 * component this code does not implement is an error naming it. */
Tokenizer *tokenizer_load(const char *model_dir, int model_vocab_size, Error *err);
void tokenizer_free(Tokenizer *t);

/* text[0..len) -> *ids (malloc'ed, *n_ids of them; free() it). Added tokens
 * such as <|im_start|> in the text become their ids, as in Hugging Face. */
int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int32_t **ids,
                     size_t *n_ids, Error *err);

/* What Hugging Face's add_special_tokens=True adds to an encoded text: a
 * TemplateProcessing post_processor's special tokens around *ids (realloc'ed;
 * *n grows). Nothing for a tokenizer without one (Qwen3's own); Qwen3-Embedding's
 * appends <|endoftext|>, the token its embedding is read at. */
int tokenizer_add_special_tokens(const Tokenizer *t, int32_t **ids, size_t *n, Error *err);

/* ids -> *text (malloc'ed, NUL-terminated, *len bytes without the NUL; it
 * may contain U+0000). skip_special_tokens drops the special added tokens
 * (special: true in tokenizer.json). Invalid UTF-8 in the joined token
 * bytes becomes U+FFFD, one per maximal invalid subpart. Ids in
 * [tokenizer_size, model_vocab_size) decode to nothing; any other id
 * outside [0, model_vocab_size) is an error. */
int tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, bool skip_special_tokens,
                     char **text, size_t *len, Error *err);

/* 1 + the largest token id (151669 for Qwen3), and the model's size. */
int tokenizer_size(const Tokenizer *t);
int tokenizer_model_vocab_size(const Tokenizer *t);

/* The id of a token by its text as tokenizer.json writes it (an added
 * token's content such as "<|im_end|>", or a vocabulary entry such as
 * "Ġhello"), or -1. */
int32_t tokenizer_token_to_id(const Tokenizer *t, const char *token, size_t len);

/* The bytes id decodes to on its own (part of a character, possibly):
 * *bytes points into the tokenizer. Returns 0 (*len 0 for an id in
 * [tokenizer_size, model_vocab_size) or a hole), -1 for a bad id. */
int tokenizer_token_bytes(const Tokenizer *t, int32_t id, const char **bytes, size_t *len,
                          Error *err);

/* The token's text as tokenizer.json writes it (Hugging Face's
 * convert_ids_to_tokens), malloc'ed; NULL with err set for a bad id or one
 * the tokenizer lacks. */
char *tokenizer_id_to_token(const Tokenizer *t, int32_t id, Error *err);

bool tokenizer_is_special(const Tokenizer *t, int32_t id);

/* Ids of tokenizer_config.json's eos_token, pad_token, bos_token; -1 when
 * not set. */
int32_t tokenizer_eos_id(const Tokenizer *t);
int32_t tokenizer_pad_id(const Tokenizer *t);
int32_t tokenizer_bos_id(const Tokenizer *t);

/* tokenizer_config.json's chat_template (or chat_template.jinja), or NULL;
 * with the named-list form, its "default" and its "tool_use" entries. */
const char *tokenizer_chat_template(const Tokenizer *t);
const char *tokenizer_tool_use_template(const Tokenizer *t);

/* The special tokens' texts for the chat template, as transformers'
 * special_tokens_map: {"bos_token": ..., "eos_token": ...} (only those set). */
const json_t *tokenizer_special_token_strings(const Tokenizer *t);

/* Diagnosis and benchmarks: run the pre-tokenizer regex on PCRE2 even when
 * the hand-written splitter knows it. Call before any encode. */
int tokenizer_use_pcre2(Tokenizer *t, Error *err);

/* ---- tokenizer from tables (GGUF) ------------------------------------------ */

/* A tokenizer given as tables (a GGUF file's tokenizer.ggml.* keys) instead of tokenizer.json. */
typedef struct TokenizerText { const char *p; size_t len; } TokenizerText;
typedef enum TokenKind { TOKEN_KIND_NORMAL = 1, TOKEN_KIND_UNKNOWN = 2, TOKEN_KIND_CONTROL = 3,
                         TOKEN_KIND_USER_DEFINED = 4, TOKEN_KIND_UNUSED = 5, TOKEN_KIND_BYTE = 6 } TokenKind;
typedef struct TokenizerVocab {
    TokenizerText model;          /* tokenizer.ggml.model: only "gpt2" (byte-level BPE) */
    TokenizerText pre;            /* tokenizer.ggml.pre: "qwen2" (Qwen2/2.5/3's pre-tokenizer); others refused by name */
    const TokenizerText *tokens;  /* tokenizer.ggml.tokens: id -> token text as tokenizer.json writes it ("Ġhello") */
    const int32_t *token_types;   /* tokenizer.ggml.token_type, TokenKind per id; NULL: all normal */
    int num_tokens;
    const TokenizerText *merges;  /* tokenizer.ggml.merges: "a b" */
    int num_merges;
    int32_t bos_id, eos_id, pad_id; /* tokenizer.ggml.{bos,eos,padding}_token_id; -1 absent */
    bool add_bos, add_eos;          /* tokenizer.ggml.add_{bos,eos}_token */
    TokenizerText chat_template;    /* tokenizer.chat_template; p NULL when absent */
} TokenizerVocab;

/* The same Tokenizer tokenizer_load gives for the tokenizer.json these
 * tables were converted from (llama.cpp's convert_hf_to_gguf.py): NORMAL
 * tokens are the BPE vocabulary, CONTROL and USER_DEFINED tokens added
 * tokens (CONTROL ones special), UNUSED ids ("[PAD<id>]") holes that
 * decode to nothing; UNKNOWN is BPE's unknown token (at most one); BYTE is
 * refused. bos/eos/pad become tokenizer_bos_id() etc. and the special
 * token strings; add_bos/add_eos make tokenizer_add_special_tokens put
 * them around the text. model_vocab_size as in tokenizer_load. Anything
 * else or out of range is an error naming the key. The tables are copied:
 * v may be freed once this returns. */
Tokenizer *tokenizer_load_vocab(const TokenizerVocab *v, int model_vocab_size, Error *err);

/* ---- detokenizer --------------------------------------------------------- */

/*
 * Token ids back to text, all at once or one id at a time.
 *
 * Streaming (SSE) and stop strings need text while tokens arrive, but a
 * token may end inside a multi-byte character. The Detokenizer holds such
 * an unfinished character back until the bytes that complete it arrive, so
 * it only ever emits whole characters, and everything it emits joined
 * together is exactly tokenizer_decode() of the same ids (bad bytes become
 * U+FFFD as soon as they are known to be bad; a character still unfinished
 * at the end becomes one U+FFFD in detokenizer_finish).
 */

typedef struct Detokenizer {
    const Tokenizer *t;
    bool skip_special_tokens;
    unsigned char pending[4]; /* a character's first bytes, waiting for the rest */
    size_t n_pending;
    ByteBuf out;
} Detokenizer;

void detokenizer_init(Detokenizer *d, const Tokenizer *t, bool skip_special_tokens);

/* Adds one id. *out (valid until the next call on d) receives the text
 * completed by it, *out_len bytes (often 0). A bad id is an error and
 * changes nothing. */
int detokenizer_push(Detokenizer *d, int32_t id, const char **out, size_t *out_len, Error *err);

/* The end of the stream: the text still held back (U+FFFD for an unfinished
 * character, else nothing). d can then start a new stream. */
int detokenizer_finish(Detokenizer *d, const char **out, size_t *out_len, Error *err);

void detokenizer_free(Detokenizer *d);

#endif
