/* SPDX-License-Identifier: MIT */
/*
 * A Llama-family model built from a GGUF file: hyperparameters from the
 * metadata, weights pointing into the read-only mapping (nothing is copied
 * but the norm vectors, kept as f32, and the RoPE factors), and the
 * tokenizer.
 */
#ifndef KVT_RUNTIME_MODEL_H
#define KVT_RUNTIME_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kernels.h"

struct kvt_gguf;
struct kvt_tokenizer;

struct kvt_hparams {
	char	 arch[16];		/* general.architecture: "llama" or "qwen2" */
	int	 rope_neox;		/* qwen2: dims i and i + rope_dim / 2 rotate
					 * together; wq and wk are loaded with their
					 * rows in adjacent pairs (see runtime/model.c) */
	uint32_t n_layer;
	uint32_t n_embd;		/* model width */
	uint32_t n_head, n_head_kv;	/* query heads, KV heads (GQA when fewer) */
	uint32_t head_dim;		/* n_embd / n_head */
	uint32_t n_ff;			/* feed-forward width */
	uint32_t n_vocab;
	uint32_t n_ctx_train;		/* llama.context_length */
	uint32_t rope_dim;		/* rotated dims per head */
	float	 rope_theta;		/* llama.rope.freq_base */
	float	 rope_freq_scale;	/* 1 / linear scaling factor */
	float	 rms_eps;
};

struct kvt_layer {
	float *attn_norm, *ffn_norm;		/* (n_embd) */
	struct kvt_mat wq, wk, wv, wo;		/* (n_embd | kv_dim, n_embd) */
	float *bq, *bk, *bv;			/* (n_embd | kv_dim) biases added after
						 * wq, wk, wv (qwen2); NULL without */
	void *wqk_own;				/* rope_neox: wq's and wk's rows, reordered */
	struct kvt_mat w_gate, w_up;		/* (n_ff, n_embd) */
	struct kvt_mat w_down;			/* (n_embd, n_ff) */
};

struct kvt_model {
	struct kvt_gguf *g;		/* owns the mapping the weights point into */
	struct kvt_hparams hp;
	struct kvt_mat tok_embd;	/* (n_vocab, n_embd) */
	struct kvt_layer *layers;	/* (n_layer) */
	float *out_norm;		/* (n_embd) */
	float *rope_freqs;		/* (rope_dim / 2) rope_freqs.weight; NULL without */
	double *rope_inv_freq;		/* (rope_dim / 2) kvt_rope_inv_freq of hp and rope_freqs */
	struct kvt_mat output;		/* (n_vocab, n_embd); token_embd when tied */
	int tied;			/* no output.weight: the head is token_embd */
	struct kvt_tokenizer *tok;
	uint64_t weight_bytes;		/* bytes of tensor data */
	char name[64];			/* general.name, or the file's base name */
	char type[32];			/* weight types of the layers' matrices, most
					 * bytes first: "f16", "q4_k+q6_k" */
};

/* Map and check a GGUF Llama model. 0, or -errno with one line in err:
 * -ENOENT/-EACCES for the file, -EINVAL for a malformed file, an
 * architecture other than llama, a missing or misshapen tensor (named,
 * with its offset in the file), an unsupported rope scaling, a
 * rope_freqs.weight that is not rope_dim / 2 positive f32 divisors;
 * -ENOMEM. */
int  kvt_model_load(const char *path, struct kvt_model **out, char *err, size_t errlen);
void kvt_model_free(struct kvt_model *m);

/* Bytes of K and V for one token over all layers, at kv_bytes per value. */
/* KV bytes a token takes over all layers, K and V, in KV type kv_type
 * (enum kvt_kv_type). */
uint64_t kvt_model_kv_bytes_per_token(const struct kvt_model *m, int kv_type);

#endif
