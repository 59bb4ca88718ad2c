/* SPDX-License-Identifier: MIT */
/*
 * kvt-mkmodel: write a Llama-architecture GGUF v3 file with seeded random
 * weights for any geometry and a small SentencePiece-style or (--tokenizer
 * gpt2) byte-level BPE vocabulary (runtime/synth.h), so tests, benchmarks
 * and `make run` need no download.
 *
 *   kvt-mkmodel --layers 2 --dim 64 --heads 4 -o /tmp/tiny.gguf
 *   kvt-mkmodel --vocab 512 --tokenizer gpt2 -o /tmp/tiny-bpe.gguf
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/gguf.h"
#include "runtime/synth.h"
#include "tools/cli.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvt-mkmodel [options] -o FILE\n"
		"  --layers N     transformer blocks (2)\n"
		"  --dim N        embedding length (64)\n"
		"  --heads N      attention heads (4); dim must divide by it, head dim even\n"
		"  --kv-heads N   KV heads (= heads); heads must divide by it\n"
		"  --ff N         feed-forward length (4 * dim)\n"
		"  --ctx N        context length the model declares (2048)\n"
		"  --vocab N      vocabulary size (512), at least %d for llama, %d for\n"
		"                 gpt2: byte tokens (llama: then the printable\n"
		"                 characters), then learnt English pieces\n"
		"  --tokenizer K  llama: SentencePiece-style, <unk> <s> </s> and\n"
		"                 <0xXX> byte tokens; gpt2: byte-level BPE as Llama 3's,\n"
		"                 with merges, <|begin_of_text|> and <|end_of_text|>\n"
		"                 last (llama)\n"
		"  --pre NAME     gpt2 only: tokenizer.ggml.pre, the pre-tokenizer\n"
		"                 llama.cpp applies; none writes no key (llama-bpe)\n"
		"  --seed N       random seed (1)\n"
		"  --type T       weights: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0,\n"
		"                 q2_k, q3_k, q4_k, q5_k, q6_k, or the mixes q4_k_m and\n"
		"                 q5_k_m (output.weight and some layers' attn_v and\n"
		"                 ffn_down in q6_k, as llama.cpp's _M files) (f32)\n"
		"  --tied         no output.weight: the head reuses the token embedding\n"
		"  --arch A       llama or qwen2 (Q, K and V biases, NEOX RoPE; the gpt2\n"
		"                 tokenizer with pre qwen2 unless told otherwise) (llama)\n"
		"  --rope-freqs F none, or llama3: write rope_freqs.weight, Llama 3.1's\n"
		"                 per-pair RoPE divisors (factor 8, low/high frequency\n"
		"                 factors 1 and 4, original context 8192) as llama.cpp's\n"
		"                 converter computes them (none)\n"
		"  -o FILE        output file\n"
		"  --version      print the version and the build's features, and exit\n",
		KVT_SYNTH_MIN_VOCAB, KVT_SYNTH_MIN_VOCAB_GPT2);
}

static unsigned parse_uint(const char *flag, const char *s)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v == 0 || v > 1u << 30) {
		fprintf(stderr, "kvt-mkmodel: %s: \"%s\" is not an integer in 1..1073741824 (see --help)\n",
			flag, s);
		exit(2);
	}
	return (unsigned)v;
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
		{ "tied", no_argument, NULL, 'T' },
		{ "arch", required_argument, NULL, 'A' },
		{ "rope-freqs", required_argument, NULL, 'r' },
		{ "tokenizer", required_argument, NULL, 'k' },
		{ "pre", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const struct { const char *name; uint32_t type; int mix; } types[] = {
		{ "f32", KVT_GGML_F32, 0 }, { "f16", KVT_GGML_F16, 0 },
		{ "bf16", KVT_GGML_BF16, 0 }, { "q4_0", KVT_GGML_Q4_0, 0 },
		{ "q4_1", KVT_GGML_Q4_1, 0 }, { "q5_0", KVT_GGML_Q5_0, 0 },
		{ "q5_1", KVT_GGML_Q5_1, 0 }, { "q8_0", KVT_GGML_Q8_0, 0 },
		{ "q2_k", KVT_GGML_Q2_K, 0 }, { "q3_k", KVT_GGML_Q3_K, 0 },
		{ "q4_k", KVT_GGML_Q4_K, 0 }, { "q5_k", KVT_GGML_Q5_K, 0 },
		{ "q6_k", KVT_GGML_Q6_K, 0 }, { "q4_k_m", KVT_GGML_Q4_K, 1 },
		{ "q5_k_m", KVT_GGML_Q5_K, 1 },
	};
	struct kvt_synth s;
	const char *out = NULL;
	char err[512];
	unsigned i;
	int c, pre_set = 0, tok_set = 0;

	if (cli_version(argc, argv, "kvt-mkmodel"))
		return 0;
	kvt_synth_default(&s);
	while ((c = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
		switch (c) {
		case 'L': s.layers = parse_uint("--layers", optarg); break;
		case 'd': s.dim = parse_uint("--dim", optarg); break;
		case 'H': s.heads = parse_uint("--heads", optarg); break;
		case 'K': s.kv_heads = parse_uint("--kv-heads", optarg); break;
		case 'f': s.ff = parse_uint("--ff", optarg); break;
		case 'c': s.ctx = parse_uint("--ctx", optarg); break;
		case 'v': s.vocab = parse_uint("--vocab", optarg); break;
		case 's': s.seed = parse_uint("--seed", optarg); break;
		case 'T': s.tied = 1; break;
		case 'A':
			if (strcmp(optarg, "llama") && strcmp(optarg, "qwen2")) {
				fprintf(stderr, "kvt-mkmodel: --arch: \"%s\" is not llama or qwen2\n",
					optarg);
				return 2;
			}
			s.qwen2 = !strcmp(optarg, "qwen2");
			break;
		case 'r':
			if (!strcmp(optarg, "none")) {
				s.rope_freqs = KVT_SYNTH_ROPE_NONE;
			} else if (!strcmp(optarg, "llama3")) {
				s.rope_freqs = KVT_SYNTH_ROPE_LLAMA3;
			} else {
				fprintf(stderr, "kvt-mkmodel: --rope-freqs: \"%s\" is not none or llama3\n",
					optarg);
				return 2;
			}
			break;
		case 'k':
			tok_set = 1;
			if (!strcmp(optarg, "llama")) {
				s.tokenizer = KVT_SYNTH_TOK_LLAMA;
			} else if (!strcmp(optarg, "gpt2")) {
				s.tokenizer = KVT_SYNTH_TOK_GPT2;
			} else {
				fprintf(stderr, "kvt-mkmodel: --tokenizer: \"%s\" is not llama or gpt2\n",
					optarg);
				return 2;
			}
			break;
		case 'p':
			if (!*optarg) {
				fprintf(stderr, "kvt-mkmodel: --pre: the name is empty (--pre none writes no key)\n");
				return 2;
			}
			s.pre = strcmp(optarg, "none") ? optarg : NULL;
			pre_set = 1;
			break;
		case 't':
			for (i = 0; i < sizeof(types) / sizeof(types[0]); i++)
				if (!strcmp(optarg, types[i].name))
					break;
			if (i == sizeof(types) / sizeof(types[0])) {
				fprintf(stderr, "kvt-mkmodel: --type: \"%s\" is not a type written here "
					"(see --help)\n", optarg);
				return 2;
			}
			s.type = types[i].type;
			s.mix = types[i].mix;
			break;
		case 'o': out = optarg; break;
		case 'h': usage(stdout); return 0;
		default:
			fprintf(stderr, "kvt-mkmodel: bad option (see --help)\n");
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvt-mkmodel: unexpected argument \"%s\" (see --help)\n", argv[optind]);
		return 2;
	}
	if (!out) {
		fprintf(stderr, "kvt-mkmodel: -o FILE is required (see --help)\n");
		return 2;
	}
	if (s.qwen2 && !tok_set) {
		s.tokenizer = KVT_SYNTH_TOK_GPT2;
		if (!pre_set)
			s.pre = "qwen2";
	}
	if (pre_set && s.tokenizer != KVT_SYNTH_TOK_GPT2) {
		fprintf(stderr, "kvt-mkmodel: --pre needs --tokenizer gpt2 (see --help)\n");
		return 2;
	}
	if (kvt_synth_check(&s, err, sizeof(err))) {
		fprintf(stderr, "kvt-mkmodel: %s (see --help)\n", err);
		return 2;
	}
	if (kvt_synth_write(&s, out, err, sizeof(err))) {
		fprintf(stderr, "kvt-mkmodel: %s\n", err);
		return 1;
	}
	return 0;
}
