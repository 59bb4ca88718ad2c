/* SPDX-License-Identifier: MIT */
/*
 * kvt-mkmodel: write a Llama-architecture GGUF v3 file with seeded random
 * weights for any geometry, named and shaped as llama.cpp expects
 * (ne[0] is the contiguous dimension). The vocabulary is byte-level in
 * SentencePiece's layout: <unk>, <s>, </s>, then <0x00>..<0xFF>, then
 * --vocab minus 259 filler tokens. Norm weights are 1 and stay f32 with
 * --type f16, as llama.cpp's converter keeps them.
 *
 *   kvt-mkmodel --layers 2 --dim 64 --heads 4 -o /tmp/tiny.gguf
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/gguf.h"

#define N_SPECIAL 3	/* <unk>, <s>, </s> */
#define N_BYTE_VOCAB (N_SPECIAL + 256)

struct opts {
	unsigned layers, dim, heads, kv_heads, ff, ctx, vocab;
	unsigned long long seed;
	uint32_t type;		/* KVT_GGML_F32 or KVT_GGML_F16 */
	const char *out;
};

/* Every tensor buffer, freed after the write (the writer borrows them). */
struct bufs {
	void **p;		/* (n) */
	size_t n, cap;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvt-mkmodel [options] -o FILE\n"
		"  --layers N     transformer blocks (2)\n"
		"  --dim N        embedding length (64)\n"
		"  --heads N      attention heads (4); dim must divide by it, head dim even\n"
		"  --kv-heads N   KV heads (= heads); heads must divide by it\n"
		"  --ff N         feed-forward length (4 * dim)\n"
		"  --ctx N        context length (2048)\n"
		"  --vocab N      vocabulary size, at least %d (%d)\n"
		"  --seed N       random seed (1)\n"
		"  --type T       f32 or f16 weights (f32)\n"
		"  -o FILE        output file\n", N_BYTE_VOCAB, N_BYTE_VOCAB);
}

static void die_usage(const char *fmt, const char *a, const char *b)
{
	fprintf(stderr, "kvt-mkmodel: ");
	fprintf(stderr, fmt, a, b);
	fprintf(stderr, " (see --help)\n");
	exit(2);
}

static unsigned parse_uint(const char *flag, const char *s)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v == 0 || v > 1u << 30)
		die_usage("%s: \"%s\" is not an integer in 1..1073741824", flag, s);
	return (unsigned)v;
}

static uint64_t rng_state;

static uint64_t rng_next(void)
{
	/* splitmix64: deterministic across platforms for a given seed */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [-a, a). */
static float rng_uniform(float a)
{
	return ((float)(rng_next() >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * a;
}

static void *keep(struct bufs *b, size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);

	if (!p || (b->n == b->cap &&
		   !(b->p = realloc(b->p, (b->cap = b->cap ? b->cap * 2 : 64) * sizeof(*b->p))))) {
		fprintf(stderr, "kvt-mkmodel: out of memory\n");
		exit(1);
	}
	b->p[b->n++] = p;
	return p;
}

/* A 2-D weight (ne0 contiguous = fan-in) of random values, or a norm of ones. */
static void add_weight(struct kvt_gguf_writer *w, struct bufs *b, const struct opts *o,
		       const char *name, uint64_t ne0, uint64_t ne1, int norm)
{
	uint64_t ne[2] = { ne0, ne1 }, i, n = ne0 * ne1;
	uint32_t type = norm ? KVT_GGML_F32 : o->type;
	float a = 1.0f / sqrtf((float)ne0);

	if (type == KVT_GGML_F32) {
		float *d = keep(b, n * sizeof(float));

		for (i = 0; i < n; i++)
			d[i] = norm ? 1.0f : rng_uniform(a);
	} else {
		_Float16 *d = keep(b, n * sizeof(_Float16));

		for (i = 0; i < n; i++)
			d[i] = (_Float16)rng_uniform(a);
	}
	kvt_gguf_add_tensor(w, name, norm ? 1 : 2, ne, type, b->p[b->n - 1]);
}

static void add_vocab(struct kvt_gguf_writer *w, struct bufs *b, unsigned vocab)
{
	const char **tok = keep(b, vocab * sizeof(*tok));
	float *score = keep(b, vocab * sizeof(*score));
	int32_t *ttype = keep(b, vocab * sizeof(*ttype));
	char *names = keep(b, (size_t)vocab * 24);
	unsigned i;

	for (i = 0; i < vocab; i++) {
		char *s = names + (size_t)i * 24;

		if (i == 0)
			snprintf(s, 24, "<unk>");
		else if (i == 1)
			snprintf(s, 24, "<s>");
		else if (i == 2)
			snprintf(s, 24, "</s>");
		else if (i < N_BYTE_VOCAB)
			snprintf(s, 24, "<0x%02X>", i - N_SPECIAL);
		else
			snprintf(s, 24, "<extra_%u>", i - N_BYTE_VOCAB);
		tok[i] = s;
		score[i] = i < N_SPECIAL ? 0.0f : -(float)i;
		/* llama_token_type: 1 normal, 2 unknown, 3 control, 6 byte */
		ttype[i] = i == 0 ? 2 : i < N_SPECIAL ? 3 : i < N_BYTE_VOCAB ? 6 : 1;
	}
	kvt_gguf_add_str(w, "tokenizer.ggml.model", "llama");
	kvt_gguf_add_str_arr(w, "tokenizer.ggml.tokens", tok, vocab);
	kvt_gguf_add_f32_arr(w, "tokenizer.ggml.scores", score, vocab);
	kvt_gguf_add_i32_arr(w, "tokenizer.ggml.token_type", ttype, vocab);
	kvt_gguf_add_u32(w, "tokenizer.ggml.unknown_token_id", 0);
	kvt_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
	kvt_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "layers", required_argument, NULL, 'L' },
		{ "dim", required_argument, NULL, 'd' },
		{ "heads", required_argument, NULL, 'H' },
		{ "kv-heads", required_argument, NULL, 'K' },
		{ "ff", required_argument, NULL, 'f' },
		{ "ctx", required_argument, NULL, 'c' },
		{ "vocab", required_argument, NULL, 'v' },
		{ "seed", required_argument, NULL, 's' },
		{ "type", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = {
		.layers = 2, .dim = 64, .heads = 4, .ctx = 2048, .vocab = N_BYTE_VOCAB,
		.seed = 1, .type = KVT_GGML_F32,
	};
	struct kvt_gguf_writer *w = NULL;
	struct bufs b = { 0 };
	char name[64], err[512];
	unsigned l, hd, kv_dim;
	int c, ret;

	while ((c = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
		switch (c) {
		case 'L': o.layers = parse_uint("--layers", optarg); break;
		case 'd': o.dim = parse_uint("--dim", optarg); break;
		case 'H': o.heads = parse_uint("--heads", optarg); break;
		case 'K': o.kv_heads = parse_uint("--kv-heads", optarg); break;
		case 'f': o.ff = parse_uint("--ff", optarg); break;
		case 'c': o.ctx = parse_uint("--ctx", optarg); break;
		case 'v': o.vocab = parse_uint("--vocab", optarg); break;
		case 's': o.seed = parse_uint("--seed", optarg); break;
		case 't':
			if (!strcmp(optarg, "f32"))
				o.type = KVT_GGML_F32;
			else if (!strcmp(optarg, "f16"))
				o.type = KVT_GGML_F16;
			else
				die_usage("--type: \"%s\" is not f32 or f16%s", optarg, "");
			break;
		case 'o': o.out = optarg; break;
		case 'h': usage(stdout); return 0;
		default:
			fprintf(stderr, "kvt-mkmodel: bad option (see --help)\n");
			return 2;
		}
	}
	if (optind < argc)
		die_usage("unexpected argument \"%s\"%s", argv[optind], "");
	if (!o.out)
		die_usage("-o FILE is required%s%s", "", "");
	if (!o.kv_heads)
		o.kv_heads = o.heads;
	if (!o.ff)
		o.ff = 4 * o.dim;
	if (o.dim % o.heads || (o.dim / o.heads) % 2)
		die_usage("--dim must be a multiple of --heads with an even head dimension%s%s", "", "");
	if (o.kv_heads > o.heads || o.heads % o.kv_heads)
		die_usage("--heads must be a multiple of --kv-heads%s%s", "", "");
	if (o.vocab < N_BYTE_VOCAB) {
		fprintf(stderr, "kvt-mkmodel: --vocab must be at least %d (see --help)\n", N_BYTE_VOCAB);
		return 2;
	}
	hd = o.dim / o.heads;
	kv_dim = hd * o.kv_heads;
	rng_state = o.seed;

	if (kvt_gguf_writer_new(&w)) {
		fprintf(stderr, "kvt-mkmodel: out of memory\n");
		return 1;
	}
	kvt_gguf_add_str(w, "general.architecture", "llama");
	kvt_gguf_add_str(w, "general.name", "kvtier synthetic");
	kvt_gguf_add_u32(w, "general.file_type", o.type == KVT_GGML_F32 ? 0 : 1);
	kvt_gguf_add_u32(w, "llama.block_count", o.layers);
	kvt_gguf_add_u32(w, "llama.context_length", o.ctx);
	kvt_gguf_add_u32(w, "llama.embedding_length", o.dim);
	kvt_gguf_add_u32(w, "llama.feed_forward_length", o.ff);
	kvt_gguf_add_u32(w, "llama.attention.head_count", o.heads);
	kvt_gguf_add_u32(w, "llama.attention.head_count_kv", o.kv_heads);
	kvt_gguf_add_u32(w, "llama.rope.dimension_count", hd);
	kvt_gguf_add_f32(w, "llama.rope.freq_base", 10000.0f);
	kvt_gguf_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
	kvt_gguf_add_u32(w, "llama.vocab_size", o.vocab);
	add_vocab(w, &b, o.vocab);

	add_weight(w, &b, &o, "token_embd.weight", o.dim, o.vocab, 0);
	for (l = 0; l < o.layers; l++) {
#define BLK(s) (snprintf(name, sizeof(name), "blk.%u." s, l), name)
		add_weight(w, &b, &o, BLK("attn_norm.weight"), o.dim, 1, 1);
		add_weight(w, &b, &o, BLK("attn_q.weight"), o.dim, o.dim, 0);
		add_weight(w, &b, &o, BLK("attn_k.weight"), o.dim, kv_dim, 0);
		add_weight(w, &b, &o, BLK("attn_v.weight"), o.dim, kv_dim, 0);
		add_weight(w, &b, &o, BLK("attn_output.weight"), o.dim, o.dim, 0);
		add_weight(w, &b, &o, BLK("ffn_norm.weight"), o.dim, 1, 1);
		add_weight(w, &b, &o, BLK("ffn_gate.weight"), o.dim, o.ff, 0);
		add_weight(w, &b, &o, BLK("ffn_up.weight"), o.dim, o.ff, 0);
		add_weight(w, &b, &o, BLK("ffn_down.weight"), o.ff, o.dim, 0);
#undef BLK
	}
	add_weight(w, &b, &o, "output_norm.weight", o.dim, 1, 1);
	add_weight(w, &b, &o, "output.weight", o.dim, o.vocab, 0);

	ret = kvt_gguf_writer_write(w, o.out, err, sizeof(err));
	if (ret)
		fprintf(stderr, "kvt-mkmodel: %s\n", err);
	kvt_gguf_writer_free(w);
	while (b.n)
		free(b.p[--b.n]);
	free(b.p);
	return ret ? 1 : 0;
}
