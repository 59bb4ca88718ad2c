/* SPDX-License-Identifier: MIT */
/*
 * Synthetic Llama models: a valid GGUF v3 file with seeded random weights
 * for any geometry and a small SentencePiece-style vocabulary, so tests,
 * benchmarks and `make run` need no download. kvt-mkmodel is its
 * command-line face.
 *
 * The vocabulary ("llama"): <unk>, <s>, </s>, then the byte tokens
 * <0x00>..<0xFF> (ids 3..258), U+2581 (the space), the printable ASCII
 * characters, then pieces of English learnt from an embedded text, so any
 * text round-trips and prose takes well under one token per byte;
 * fillers once those run out. Below 260 tokens there is no U+2581 and
 * spaces come back from decoding as U+2581.
 *
 * The vocabulary ("gpt2"), byte-level BPE as Llama 3 has it: the 256
 * byte tokens in GPT-2's bytes_to_unicode form, ordered as GPT-2's own
 * vocabulary (by code point: '!'..'~', U+00A1..U+00AC, U+00AE..U+00FF,
 * then U+0100..U+0143 for the other 68 bytes, a space being U+0120), then
 * pieces learnt from the same text by byte-pair merges over GPT-2's
 * pre-split words (tokenizer.ggml.merges lists them in learning order),
 * "<|reserved_special_token_N|>" fillers (control) if those run out, and
 * last "<|begin_of_text|>" and "<|end_of_text|>" (control), the BOS and
 * EOS tokens. No scores.
 */
#ifndef KVT_RUNTIME_SYNTH_H
#define KVT_RUNTIME_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#define KVT_SYNTH_MIN_VOCAB	259	/* <unk>, <s>, </s> and the 256 byte tokens */
#define KVT_SYNTH_MIN_VOCAB_GPT2 258	/* the 256 byte tokens, BOS and EOS */

/* What kvt_synth.tokenizer writes. */
enum kvt_synth_tok {
	KVT_SYNTH_TOK_LLAMA = 0,	/* SentencePiece-style, tokenizer.ggml.model "llama" */
	KVT_SYNTH_TOK_GPT2,		/* byte-level BPE, tokenizer.ggml.model "gpt2" */
};

/* What kvt_synth.rope_freqs writes. */
enum kvt_synth_rope {
	KVT_SYNTH_ROPE_NONE = 0,	/* no rope_freqs.weight (plain RoPE) */
	KVT_SYNTH_ROPE_LLAMA3,		/* Llama 3.1's factors, as llama.cpp's converter computes them */
};

struct kvt_synth {
	unsigned layers, dim, heads, kv_heads, ff, ctx, vocab;
	uint64_t seed;
	uint32_t type;		/* the matrices': F32, F16, BF16 or a block type
				 * the kernels read (kernels/cpu/quants.h) */
	int	 mix;		/* with Q4_K or Q5_K: as llama.cpp's _M files,
				 * output.weight and some layers' attn_v and
				 * ffn_down in Q6_K */
	int	 tied;		/* no output.weight: the head reuses token_embd */
	int	 qwen2;		/* architecture qwen2 (Q, K, V biases; NEOX RoPE),
				 * else llama */
	int	 rope_freqs;	/* enum kvt_synth_rope; the other weights do not change */
	int	 tokenizer;	/* enum kvt_synth_tok */
	const char *pre;	/* gpt2: tokenizer.ggml.pre ("llama-bpe"); NULL or "": none */
};

/* The defaults kvt-mkmodel documents: 2 layers, dim 64, 4 heads, vocab 512,
 * the llama tokenizer (pre "llama-bpe" should gpt2 be chosen). */
void kvt_synth_default(struct kvt_synth *s);
/* Check the geometry: 0, or -EINVAL with one line in err. */
int  kvt_synth_check(const struct kvt_synth *s, char *err, size_t errlen);
/* Write the model to path. 0 or -errno with one line in err. */
int  kvt_synth_write(const struct kvt_synth *s, const char *path, char *err, size_t errlen);

#endif
