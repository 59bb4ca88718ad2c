/* SPDX-License-Identifier: MIT */
/*
 * The tokenizer (runtime/tokenizer.c): a vocabulary built from fuzzed
 * data, then fuzzed text tokenized with it and the tokens decoded.
 *
 * Input: byte 0 flags (bit 0 gpt2, else llama; bit 1 token types; bit 2
 * BOS/EOS/UNK ids; bits 3-4 tokenizer.ggml.pre for gpt2; bit 5 add BOS),
 * bytes 1-2 the vocabulary's length L (little-endian, at most what is
 * there), then L bytes of vocabulary: lines, each a token; for gpt2 a line
 * "A B" whose A and B are both tokens is a merge instead. The rest is the
 * text. Scores and token types come from the token bytes, so they vary
 * with the input too.
 *
 * Checked: a vocabulary the loader takes tokenizes any text into ids
 * below n_vocab, the same ids twice, with the count the first call gave
 * when it had no room; every id decodes.
 */
#include "tests/fuzz/fuzz.h"
#include "runtime/gguf.h"
#include "runtime/tokenizer.h"

#define MAX_TOKENS 4096

static struct fuzz_file file;

static int build(const uint8_t *voc, size_t n, unsigned flags, const char *path)
{
	static const char *const pre[] = { NULL, "llama-bpe", "qwen2", "default" };
	const char *tok[MAX_TOKENS], *mer[MAX_TOKENS];
	float score[MAX_TOKENS];
	int32_t type[MAX_TOKENS];
	uint32_t nt = 0, nm = 0;
	int gpt2 = flags & 1, r;
	char *text = fuzz_cstr(voc, n), *line = text, err[256];
	struct kvt_gguf_writer *w;

	/* Lines (a NUL ends a token early: the writer takes C strings). */
	while (line <= text + n && nt < MAX_TOKENS) {
		char *nl = memchr(line, '\n', (size_t)(text + n - line));
		char *sp;

		if (nl)
			*nl = 0;
		sp = strchr(line, ' ');
		if (gpt2 && sp && sp != line && sp[1] && !strchr(sp + 1, ' ') && nm < MAX_TOKENS)
			mer[nm++] = line;
		else {
			size_t len = strlen(line);
			unsigned h = len ? (unsigned char)line[0] * 31u + (unsigned char)line[len - 1] : 7;

			score[nt] = -(float)(h % 1000) / 10.0f;
			type[nt] = (int32_t)(len > 1 && line[0] == '<' ? 3 + h % 4 : 1 + h % 2);
			tok[nt++] = line;
		}
		if (!nl)
			break;
		line = nl + 1;
	}
	if ((r = kvt_gguf_writer_new(&w)))
		goto out;
	kvt_gguf_add_str(w, "general.architecture", "llama");
	kvt_gguf_add_str(w, "tokenizer.ggml.model", gpt2 ? "gpt2" : "llama");
	kvt_gguf_add_str_arr(w, "tokenizer.ggml.tokens", tok, nt);
	if (!gpt2)
		kvt_gguf_add_f32_arr(w, "tokenizer.ggml.scores", score, nt);
	if (gpt2) {
		kvt_gguf_add_str_arr(w, "tokenizer.ggml.merges", mer, nm);
		if (pre[(flags >> 3) & 3])
			kvt_gguf_add_str(w, "tokenizer.ggml.pre", pre[(flags >> 3) & 3]);
	}
	if (flags & 2)
		kvt_gguf_add_i32_arr(w, "tokenizer.ggml.token_type", type, nt);
	if (flags & 4) {
		kvt_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", nt > 1 ? 1 : 0);
		kvt_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", nt > 2 ? 2 : 0);
		kvt_gguf_add_u32(w, "tokenizer.ggml.unknown_token_id", 0);
	}
	r = kvt_gguf_writer_write(w, path, err, sizeof(err));
	kvt_gguf_writer_free(w);
out:
	free(text);
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int32_t ids[2][8192];
	struct kvt_tokenizer *t;
	struct kvt_gguf *g;
	char err[512], piece[256];
	size_t L;
	int n, n2;

	if (size < 3)
		return 0;
	L = (size_t)data[1] | (size_t)data[2] << 8;
	if (L > size - 3)
		L = size - 3;
	const char *path = fuzz_file_empty(&file, "vocab");
	if (build(data + 3, L, data[0], path))
		return 0;
	FUZZ_CHECK(kvt_gguf_open(path, &g, err, sizeof(err)) == 0);
	err[0] = 0;
	if (kvt_tokenizer_load(g, &t, err, sizeof(err))) {
		fuzz_check_err(err, sizeof(err));
		kvt_gguf_close(g);
		return 0;
	}
	kvt_gguf_close(g);	/* the tokenizer copied what it needs */

	const char *text = (const char *)data + 3 + L;
	size_t tlen = size - 3 - L;
	int bos = data[0] & 32 ? 1 : -1;
	uint32_t nv = kvt_tokenizer_n_vocab(t);

	n = kvt_tokenize(t, text, tlen, bos, NULL, 0);
	FUZZ_CHECK(n >= 0 || n == -EILSEQ);
	if (n >= 0 && (size_t)n <= sizeof(ids[0]) / sizeof(ids[0][0])) {
		FUZZ_CHECK(kvt_tokenize(t, text, tlen, bos, ids[0], (size_t)n) == n);
		n2 = kvt_tokenize(t, text, tlen, bos, ids[1], sizeof(ids[1]) / sizeof(ids[1][0]));
		FUZZ_CHECK(n2 == n);
		FUZZ_CHECK(!memcmp(ids[0], ids[1], (size_t)n * sizeof(int32_t)));
		for (int i = 0; i < n; i++) {
			FUZZ_CHECK(ids[0][i] >= 0 && (uint32_t)ids[0][i] < nv);
			int len = kvt_token_piece(t, ids[0][i], piece, sizeof(piece));
			FUZZ_CHECK(len >= 0);
		}
	}
	FUZZ_CHECK(kvt_token_piece(t, (int32_t)nv, piece, sizeof(piece)) == -EINVAL);
	FUZZ_CHECK(kvt_token_piece(t, -1, piece, sizeof(piece)) == -EINVAL);
	kvt_tokenizer_free(t);
	return 0;
}
