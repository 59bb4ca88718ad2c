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
 *
 * Decoding (kvt_token_piece) reverses the mapping: U+2581 to a space and
 * <0xXX> to the byte for llama; the byte table inverted for gpt2. Control
 * tokens (token_type 3) decode to nothing.
 */
#ifndef KVT_RUNTIME_TOKENIZER_H
#define KVT_RUNTIME_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct kvt_gguf;
struct kvt_tokenizer;

/* Build from g (which may be closed afterwards: everything is copied).
 * 0, or -EINVAL with one line in err naming the key that is missing or
 * malformed (unknown tokenizer.ggml.model, scores or token_type of the
 * wrong length, a merge that names no token, an id out of range), or
 * -ENOMEM. */
int  kvt_tokenizer_load(const struct kvt_gguf *g, struct kvt_tokenizer **out,
			char *err, size_t errlen);
void kvt_tokenizer_free(struct kvt_tokenizer *t);

/* Tokens of len bytes of text, after a BOS token when add_bos (and the
 * vocabulary has one). Writes at most cap ids and returns how many the
 * text needs (call again with more room if that is > cap), or -errno. */
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
