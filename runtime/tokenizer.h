/* SPDX-License-Identifier: MIT */
/*
 * Tokenizers from GGUF metadata (tokenizer.ggml.*):
 *
 * - "llama": SentencePiece-style. Spaces become U+2581, a U+2581 is
 *   prepended to the text, the text is split into UTF-8 characters and
 *   adjacent symbols are merged greedily, always the pair whose merged
 *   string is in the vocabulary with the highest score (leftmost on ties),
 *   as llama.cpp's llm_tokenizer_spm does. A character that is not in the
 *   vocabulary falls back to its bytes as <0xXX> tokens, or <unk>.
 * - "gpt2": byte-level BPE. The text is pre-split GPT-2 style (contractions,
 *   letter runs, digit runs, other runs, with an optional leading space;
 *   whitespace runs), each piece's bytes are mapped through GPT-2's
 *   bytes-to-unicode table, and tokenizer.ggml.merges are applied by rank.
 *   The pre-split classifies bytes, not Unicode characters: ASCII letters
 *   and every byte >= 0x80 are letters, so non-ASCII digits, spaces and
 *   punctuation group with letters (GPT-2's regex would split them).
 *
 * Decoding (kvt_token_piece) reverses the mapping: U+2581 to a space and
 * <0xXX> to the byte for llama; the byte table inverted for gpt2. Control
 * and unused tokens (token_type 3 and 5) decode to nothing, <unk> to its
 * text. With llama's space prefix (tokenizer.ggml.add_space_prefix,
 * default true) the pieces of a text start with one space the text did
 * not have: a caller joining pieces drops it. A U+2581 in the text comes
 * back as a space, as with SentencePiece.
 *
 * Control and user-defined tokens written literally in the text are not
 * recognised: "<s>" is tokenized as the three characters.
 *
 * A tokenizer is read-only once loaded: any number of threads may call
 * kvt_tokenize and kvt_token_piece on it at once.
 */
#ifndef KVT_RUNTIME_TOKENIZER_H
#define KVT_RUNTIME_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct kvt_gguf;
struct kvt_tokenizer;

/* Build from g (which may be closed afterwards: everything is copied).
 * Keys: model and tokens always; scores (f32) for llama; merges for gpt2;
 * token_type (i32), bos/eos/unknown_token_id (u32; absent is none) and
 * add_bos_token / add_space_prefix (bool) if present. Without token_type,
 * llama's "<0xXX>" tokens are its byte tokens. Of two tokens with one
 * text, text maps to the lower id.
 * 0, or -EINVAL with one line in err naming the key that is missing or
 * malformed (unknown tokenizer.ggml.model, a key of the wrong type, scores
 * or token_type of the wrong length, a NaN score, a type outside 0..6, a
 * merge that names no token, an id out of range), or -ENOMEM. */
int  kvt_tokenizer_load(const struct kvt_gguf *g, struct kvt_tokenizer **out,
			char *err, size_t errlen);
void kvt_tokenizer_free(struct kvt_tokenizer *t);

/* Tokens of len bytes of text (any bytes: invalid UTF-8 falls back to byte
 * tokens), after a BOS token when add_bos (and the vocabulary has one);
 * add_bos < 0 asks the vocabulary (tokenizer.ggml.add_bos_token, default
 * true for llama and for gpt2 with Llama 3's pre-tokenizer, false for other
 * gpt2). Writes at most cap ids and returns
 * how many the text needs (call again with more room if that is > cap),
 * or -EINVAL (NULL arguments), -EOVERFLOW (text over ~700 MB), -ENOMEM,
 * -EILSEQ (a character the vocabulary has no piece, byte token or <unk>
 * for). Empty text is no tokens (or just BOS). */
int  kvt_tokenize(const struct kvt_tokenizer *t, const char *text, size_t len,
		  int add_bos, int32_t *out, size_t cap);

/* The bytes token id stands for (not NUL-terminated): writes at most cap
 * and returns the full length, or -EINVAL for an id out of range. */
int  kvt_token_piece(const struct kvt_tokenizer *t, int32_t id, char *buf, size_t cap);

uint32_t kvt_tokenizer_n_vocab(const struct kvt_tokenizer *t);
int32_t  kvt_tokenizer_bos(const struct kvt_tokenizer *t);	/* -1 if none */
int32_t  kvt_tokenizer_eos(const struct kvt_tokenizer *t);	/* -1 if none */
const char *kvt_tokenizer_model(const struct kvt_tokenizer *t);	/* "llama" or "gpt2" */

#endif
