/* SPDX-License-Identifier: MIT */
/*
 * Tokenizers from hand-made GGUF vocabularies, with the expected ids
 * worked out by hand in the comments:
 *
 * - llama: merges by score (the same text tokenizes differently when one
 *   score changes), leftmost on ties, the space prefix (on and off), byte
 *   fallback for characters not in the vocabulary (2- and 4-byte UTF-8,
 *   invalid UTF-8), <unk> without byte tokens and -EILSEQ without <unk>,
 *   BOS (asked, refused, the vocabulary's default), empty text, too little
 *   room for the ids, literal "<s>" staying text, decoded pieces.
 * - gpt2: bytes_to_unicode tokens and merges whose ranks decide the order,
 *   GPT-2's pre-split (a space joins the next word, digits apart from
 *   letters, contractions, runs of white space giving up their last
 *   space), <unk> and -EILSEQ for a byte with no token, decoded pieces;
 *   Llama 3's pre-split (tokenizer.ggml.pre "llama-bpe": digits three at
 *   a time, white space up to its last line break, others taking the line
 *   breaks after them, a punctuation byte leading a word, contractions of
 *   either case), and an unknown pre-tokenizer refused.
 * - Round trips: decode(encode(x)) == x for random printable, random
 *   UTF-8 and random byte strings, for both models.
 * - A 100 KB text tokenizes in well under a second.
 * - Hostile metadata: each malformed key is refused with -EINVAL and a
 *   message naming it; random vocabularies never crash.
 * - kvt-mkmodel's vocabulary: an English paragraph round-trips in clearly
 *   fewer tokens than bytes (skipped when the tool is not built).
 */
#include <errno.h>
#include <math.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "runtime/gguf.h"
#include "runtime/tokenizer.h"

#define SP "\xe2\x96\x81"		/* U+2581 */
#define GS "\xc4\xa0"			/* U+0120, GPT-2's space */
#define GN "\xc4\x8a"			/* U+010A, GPT-2's newline */

static char path[4096];
static const char *argv0;

/* ---- building vocabularies ---- */

/* Write w to the test file and load a tokenizer from it; the GGUF is
 * closed before returning (the tokenizer must own what it needs). If
 * bool_key, that key (a u32, added last) is first turned into a bool of
 * the same value: the writer has no bools. Returns the load's result. */
static int load_w(struct kvt_gguf_writer *w, const char *bool_key, struct kvt_tokenizer **t,
		  char *err, size_t errlen)
{
	struct kvt_gguf *g;
	char e[512];
	int ret;

	*t = NULL;
	CHECK_EQ(kvt_gguf_writer_write(w, path, e, sizeof(e)), 0);
	kvt_gguf_writer_free(w);
	CHECK_EQ(kvt_gguf_open(path, &g, e, sizeof(e)), 0);
	if (bool_key) {
		const struct kvt_gguf_kv *kv = kvt_gguf_find_kv(g, bool_key);
		size_t size = g->size;
		uint8_t *buf = malloc(size);
		uint64_t at;
		uint32_t v;

		CHECK(kv && kv->type == KVT_GGUF_U32 && buf);
		memcpy(buf, g->base, g->size);
		memcpy(&v, kv->data, 4);
		at = kv->off + 8 + kv->key.len;
		buf[at] = KVT_GGUF_BOOL;		/* type, little-endian u32 */
		buf[at + 4] = (uint8_t)v;		/* the value; 3 stray bytes after the last kv */
		kvt_gguf_close(g);
		CHECK_EQ(kvt_gguf_open_mem(buf, size, "bool.gguf", &g, e, sizeof(e)), 0);
		ret = kvt_tokenizer_load(g, t, err, errlen);
		kvt_gguf_close(g);
		free(buf);
	} else {
		ret = kvt_tokenizer_load(g, t, err, errlen);
		kvt_gguf_close(g);
	}
	unlink(path);
	if (ret)
		CHECK(!*t);
	return ret;
}

/*
 * The llama vocabulary. Ids:
 *   0 <unk>  1 <s>  2 </s>  3 ▁  4 h  5 e  6 l  7 o  8 ▁h  9 he  10 ll
 *   11 llo  12 hello  13 ▁hello  14 é  15 "" (empty)  16 <0xZZ> (text)
 *   17 + b: <0xBB> for every byte b (when bytes)
 * Scores: ▁h h_score; he -1; ll -2; llo -3; hello -2.5; ▁hello -0.5;
 * single characters -10; the rest 0.
 */
#define LL_BYTE(b)	(17 + (b))
#define LL_N		(17 + 256)

struct ll_opts {
	float h_score;
	int bytes;		/* the 256 byte tokens */
	int unk;		/* tokenizer.ggml.unknown_token_id */
	int types;		/* tokenizer.ggml.token_type */
};

static const char *const ll_words[17] = {
	"<unk>", "<s>", "</s>", SP, "h", "e", "l", "o", SP "h", "he", "ll", "llo",
	"hello", SP "hello", "\xc3\xa9", "", "<0xZZ>",
};
static char ll_bytes[256][8];
static const char *ll_tok[LL_N];
static float ll_score[LL_N];
static int32_t ll_type[LL_N];

static unsigned ll_fill(const struct ll_opts *o)
{
	static const float sc[17] = { 0, 0, 0, -10, -10, -10, -10, -10, 0, -1, -2, -3,
				      -2.5f, -0.5f, -10, 0, 0 };
	unsigned i, n = o->bytes ? LL_N : 17;

	for (i = 0; i < n; i++) {
		if (i < 17) {
			ll_tok[i] = ll_words[i];
			ll_score[i] = i == 8 ? o->h_score : sc[i];
			ll_type[i] = i == 0 ? 2 : i < 3 ? 3 : 1;
		} else {
			snprintf(ll_bytes[i - 17], 8, "<0x%02X>", i - 17);
			ll_tok[i] = ll_bytes[i - 17];
			ll_score[i] = 0;
			ll_type[i] = 6;
		}
	}
	return n;
}

/* A writer holding the llama vocabulary of o (the caller may add keys). */
static struct kvt_gguf_writer *ll_writer(const struct ll_opts *o)
{
	struct kvt_gguf_writer *w;
	unsigned n = ll_fill(o);

	CHECK_EQ(kvt_gguf_writer_new(&w), 0);
	kvt_gguf_add_str(w, "tokenizer.ggml.model", "llama");
	kvt_gguf_add_str_arr(w, "tokenizer.ggml.tokens", ll_tok, n);
	kvt_gguf_add_f32_arr(w, "tokenizer.ggml.scores", ll_score, n);
	if (o->types)
		kvt_gguf_add_i32_arr(w, "tokenizer.ggml.token_type", ll_type, n);
	kvt_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
	kvt_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
	if (o->unk)
		kvt_gguf_add_u32(w, "tokenizer.ggml.unknown_token_id", 0);
	return w;
}

static struct kvt_tokenizer *ll_load(const struct ll_opts *o)
{
	struct kvt_tokenizer *t;
	char err[512];

	CHECK_EQ(load_w(ll_writer(o), NULL, &t, err, sizeof(err)), 0);
	return t;
}

static const struct ll_opts LL_DEF = { .h_score = -4, .bytes = 1, .unk = 1, .types = 1 };

/* GPT-2's bytes_to_unicode, written out again. */
static unsigned b2u(unsigned b)
{
	unsigned x, next = 256;

	for (x = 0; x < 256; x++) {
		int self = (x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || x >= 0xae;

		if (x == b)
			return self ? x : next;
		if (!self)
			next++;
	}
	return 0;
}

static void put_cp(char *d, unsigned cp)
{
	if (cp < 0x80) {
		d[0] = (char)cp;
		d[1] = 0;
	} else {
		d[0] = (char)(0xc0 | cp >> 6);
		d[1] = (char)(0x80 | (cp & 0x3f));
		d[2] = 0;
	}
}

/*
 * The gpt2 vocabulary. Ids 0..255: the character of byte b (so an
 * unmerged byte's id is the byte), then
 *   256 Ġt  257 he  258 Ġthe  259 ab  260 bc  261 's  262 12  263 Ġw
 *   264 or  265 Ġwor  266 ld  267 Ġworld  268 ĠĠ  269 Ġb  270 ĊĊ
 *   271 <|endoftext|> (control, BOS and EOS)
 * merges, by rank: Ġ t, h e, Ġt he, a b, b c (swapped when swap_abc),
 * ' s, 1 2, Ġ w, o r, Ġw or, l d, Ġwor ld, Ġ Ġ, Ġ b, Ċ Ċ.
 * no_z: token 122 ('z') is "<unk>" instead, type unknown, and is the
 * unknown token when unk.
 */
#define G_N 272

struct g_opts {
	int swap_abc, no_z, unk;
	const char *pre;	/* tokenizer.ggml.pre, or NULL: none */
};

static char g_bytes[256][4];
static const char *g_tok[G_N];
static int32_t g_type[G_N];
static const char *const g_more[G_N - 256] = {
	GS "t", "he", GS "the", "ab", "bc", "'s", "12", GS "w", "or", GS "wor", "ld",
	GS "world", GS GS, GS "b", GN GN, "<|endoftext|>",
};
static const char *g_merges[] = {
	GS " t", "h e", GS "t he", "a b", "b c", "' s", "1 2", GS " w", "o r",
	GS "w or", "l d", GS "wor ld", GS " " GS, GS " b", GN " " GN,
};
#define G_NM (sizeof(g_merges) / sizeof(g_merges[0]))

static struct kvt_gguf_writer *g_writer(const struct g_opts *o)
{
	const char *m[G_NM];
	struct kvt_gguf_writer *w;
	unsigned i;

	for (i = 0; i < G_N; i++) {
		if (i < 256) {
			put_cp(g_bytes[i], b2u(i));
			g_tok[i] = g_bytes[i];
		} else {
			g_tok[i] = g_more[i - 256];
		}
		g_type[i] = i == 271 ? 3 : 1;
	}
	if (o->no_z) {
		g_tok['z'] = "<unk>";
		g_type['z'] = 2;
	}
	memcpy(m, g_merges, sizeof(m));
	if (o->swap_abc) {
		m[3] = "b c";
		m[4] = "a b";
	}
	CHECK_EQ(kvt_gguf_writer_new(&w), 0);
	kvt_gguf_add_str(w, "tokenizer.ggml.model", "gpt2");
	kvt_gguf_add_str_arr(w, "tokenizer.ggml.tokens", g_tok, G_N);
	kvt_gguf_add_i32_arr(w, "tokenizer.ggml.token_type", g_type, G_N);
	kvt_gguf_add_str_arr(w, "tokenizer.ggml.merges", m, G_NM);
	kvt_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", 271);
	kvt_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", 271);
	if (o->unk)
		kvt_gguf_add_u32(w, "tokenizer.ggml.unknown_token_id", 'z');
	if (o->pre)
		kvt_gguf_add_str(w, "tokenizer.ggml.pre", o->pre);
	return w;
}

static struct kvt_tokenizer *g_load(const struct g_opts *o)
{
	struct kvt_tokenizer *t;
	char err[512];

	CHECK_EQ(load_w(g_writer(o), NULL, &t, err, sizeof(err)), 0);
	return t;
}

/* ---- checking ---- */

/* Tokenize s (NUL-terminated) and compare with the n ids of want. */
static void expect(const struct kvt_tokenizer *t, const char *s, int bos,
		   const int32_t *want, int n, int line)
{
	int32_t got[256];
	int r = kvt_tokenize(t, s, strlen(s), bos, got, 256), i;

	if (r != n || (n > 0 && memcmp(got, want, sizeof(*got) * (size_t)n))) {
		fprintf(stderr, "%s:%d: \"%s\": got %d [", __FILE__, line, s, r);
		for (i = 0; i < r && i < 256; i++)
			fprintf(stderr, "%s%d", i ? " " : "", got[i]);
		fprintf(stderr, "], wanted %d [", n);
		for (i = 0; i < n; i++)
			fprintf(stderr, "%s%d", i ? " " : "", want[i]);
		fprintf(stderr, "]\n");
		exit(1);
	}
}

#define EXPECT(t, s, bos, ...) do { \
	static const int32_t w_[] = { __VA_ARGS__ }; \
	expect(t, s, bos, w_, (int)(sizeof(w_) / sizeof(w_[0])), __LINE__); \
} while (0)
#define EXPECT_NONE(t, s, bos) expect(t, s, bos, NULL, 0, __LINE__)

static void expect_piece(const struct kvt_tokenizer *t, int32_t id, const char *want, size_t n)
{
	char buf[64];
	int r = kvt_token_piece(t, id, buf, sizeof(buf));

	if (r != (int)n || memcmp(buf, want, n)) {
		fprintf(stderr, "piece of %d: %d bytes \"%.*s\", wanted %zu \"%.*s\"\n", id, r,
			r > 0 ? r : 0, buf, n, (int)n, want);
		exit(1);
	}
}
#define PIECE(t, id, s) expect_piece(t, id, s, sizeof(s) - 1)

/* decode(encode(s)) == s: ids from a first call with no room, then the
 * pieces joined, less the space llama puts in front. */
static void round_trip(const struct kvt_tokenizer *t, const char *s, size_t n)
{
	int cnt = kvt_tokenize(t, s, n, 1, NULL, 0), i, r;
	int32_t *ids;
	char *d;
	size_t k = 0, cap = 4 * n + 16, skip;

	CHECK(cnt >= 0);
	ids = malloc(sizeof(*ids) * (size_t)(cnt + 1));
	d = malloc(cap);
	CHECK(ids && d);
	CHECK_EQ(kvt_tokenize(t, s, n, 1, ids, (size_t)cnt), cnt);
	for (i = 0; i < cnt; i++) {
		CHECK(ids[i] >= 0 && (uint32_t)ids[i] < kvt_tokenizer_n_vocab(t));
		r = kvt_token_piece(t, ids[i], d + k, cap - k);
		CHECK(r >= 0 && (size_t)r <= cap - k);
		k += (size_t)r;
	}
	skip = !strcmp(kvt_tokenizer_model(t), "llama") && n ? 1 : 0;
	if (k != n + skip || (skip && d[0] != ' ') || memcmp(d + skip, s, n)) {
		fprintf(stderr, "round trip of %zu bytes gave %zu:\n  in  ", n, k);
		for (i = 0; i < (int)n; i++)
			fprintf(stderr, "%02x", (unsigned char)s[i]);
		fprintf(stderr, "\n  out ");
		for (i = 0; i < (int)k; i++)
			fprintf(stderr, "%02x", (unsigned char)d[i]);
		fprintf(stderr, "\n");
		exit(1);
	}
	free(ids);
	free(d);
}

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)((rng >> 16) % n);
}

/* ---- cases ---- */

static void c_llama(int arg)
{
	struct ll_opts o = LL_DEF;
	struct kvt_tokenizer *t = ll_load(&o);
	int32_t out[8];
	char err[256];

	CHECK_EQ(kvt_tokenizer_n_vocab(t), LL_N);
	CHECK_EQ(kvt_tokenizer_bos(t), 1);
	CHECK_EQ(kvt_tokenizer_eos(t), 2);
	CHECK(!strcmp(kvt_tokenizer_model(t), "llama"));

	/* ▁ h e l l o: he (-1) first, then ll (-2), llo (-3), hello (-2.5),
	 * ▁hello (-0.5); ▁h (-4) went stale when h joined he. */
	EXPECT(t, "hello", 0, 13);
	EXPECT(t, "hello", 1, 1, 13);
	EXPECT(t, "hello", -1, 1, 13);		/* llama adds BOS by default */
	EXPECT(t, "hello hello", 0, 13, 13);
	EXPECT(t, " hello", 0, 3, 13);		/* ▁ ▁hello */
	EXPECT(t, "hello ", 0, 13, 3);
	/* ▁ l l l: the two ll tie, the left one wins: ▁ ll l. */
	EXPECT(t, "lll", 0, 3, 10, 6);
	/* ▁ he x: x is no token, so its byte 0x78. */
	EXPECT(t, "hex", 0, 3, 9, LL_BYTE(0x78));
	/* A 2-byte character in the vocabulary is one symbol; one not in it is
	 * its bytes; so is a 4-byte emoji (U+1F600, f0 9f 98 80). */
	EXPECT(t, "\xc3\xa9", 0, 3, 14);
	EXPECT(t, "\xc3\xbc", 0, 3, LL_BYTE(0xc3), LL_BYTE(0xbc));
	EXPECT(t, "h\xf0\x9f\x98\x80", 0, 8, LL_BYTE(0xf0), LL_BYTE(0x9f), LL_BYTE(0x98),
	       LL_BYTE(0x80));
	/* Invalid UTF-8: a lead byte alone, a stray continuation byte. */
	EXPECT(t, "\xc3h", 0, 3, LL_BYTE(0xc3), 4);
	EXPECT(t, "\x80", 0, 3, LL_BYTE(0x80));
	/* Literal specials are text: < s > are bytes here. */
	EXPECT(t, "<s>", 0, 3, LL_BYTE('<'), LL_BYTE('s'), LL_BYTE('>'));
	/* Nor do byte tokens come out of text. */
	EXPECT(t, "<0x41>", 0, 3, LL_BYTE('<'), LL_BYTE('0'), LL_BYTE('x'), LL_BYTE('4'),
	       LL_BYTE('1'), LL_BYTE('>'));
	/* Empty text: nothing, or just BOS; no space prefix. */
	EXPECT_NONE(t, "", 0);
	EXPECT(t, "", 1, 1);
	CHECK_EQ(kvt_tokenize(t, NULL, 0, 0, NULL, 0), 0);

	/* Too little room: the count is what the text needs, nothing past cap
	 * is written. */
	out[2] = 12345;
	CHECK_EQ(kvt_tokenize(t, "hello hello", 11, 1, out, 2), 3);
	CHECK(out[0] == 1 && out[1] == 13 && out[2] == 12345);
	CHECK_EQ(kvt_tokenize(t, "hello hello", 11, 1, NULL, 0), 3);
	CHECK_EQ(kvt_tokenize(t, "x", 1, 0, NULL, 4), -EINVAL);
	CHECK_EQ(kvt_tokenize(t, NULL, 1, 0, out, 8), -EINVAL);

	/* Pieces: ▁ is a space, bytes are bytes, control tokens nothing. */
	PIECE(t, 13, " hello");
	PIECE(t, 3, " ");
	PIECE(t, 14, "\xc3\xa9");
	PIECE(t, LL_BYTE(0x41), "A");
	PIECE(t, LL_BYTE(0), "\0");
	PIECE(t, LL_BYTE(0xff), "\xff");
	PIECE(t, 1, "");
	PIECE(t, 2, "");
	PIECE(t, 0, "<unk>");
	PIECE(t, 15, "");
	PIECE(t, 16, "<0xZZ>");
	CHECK_EQ(kvt_token_piece(t, 13, err, 3), 6);
	CHECK(!memcmp(err, " he", 3));
	CHECK_EQ(kvt_token_piece(t, 13, NULL, 0), 6);
	CHECK_EQ(kvt_token_piece(t, -1, err, sizeof(err)), -EINVAL);
	CHECK_EQ(kvt_token_piece(t, LL_N, err, sizeof(err)), -EINVAL);
	kvt_tokenizer_free(t);

	/* Score order matters: with ▁h at -0.1 it goes first, then he is
	 * stale, ll and llo follow, and "▁he" is no token: ▁h e llo. */
	o.h_score = -0.1f;
	t = ll_load(&o);
	EXPECT(t, "hello", 0, 8, 5, 11);
	kvt_tokenizer_free(t);

	/* No token_type: <0xXX> texts are still the bytes; <s> is text. */
	o = LL_DEF;
	o.types = 0;
	t = ll_load(&o);
	EXPECT(t, "hex", 0, 3, 9, LL_BYTE(0x78));
	PIECE(t, 1, "<s>");
	PIECE(t, LL_BYTE(0x41), "A");
	kvt_tokenizer_free(t);

	/* No byte tokens: <unk> for a character, once per character. */
	o = LL_DEF;
	o.bytes = 0;
	t = ll_load(&o);
	EXPECT(t, "hex", 0, 3, 9, 0);
	EXPECT(t, "h\xf0\x9f\x98\x80o", 0, 8, 0, 7);
	kvt_tokenizer_free(t);

	/* Neither: -EILSEQ; text the vocabulary covers still works. */
	o.unk = 0;
	t = ll_load(&o);
	CHECK_EQ(kvt_tokenize(t, "hex", 3, 0, out, 8), -EILSEQ);
	EXPECT(t, "hello", 0, 13);
	kvt_tokenizer_free(t);
	(void)arg;
}

/* The bools, which the writer cannot write: patched in. */
static void c_llama_flags(int arg)
{
	struct kvt_gguf_writer *w;
	struct kvt_tokenizer *t;
	char err[256];

	/* add_space_prefix false: h e l l o gives hello (12), and a leading
	 * space is the only ▁. */
	w = ll_writer(&LL_DEF);
	kvt_gguf_add_u32(w, "tokenizer.ggml.add_space_prefix", 0);
	CHECK_EQ(load_w(w, "tokenizer.ggml.add_space_prefix", &t, err, sizeof(err)), 0);
	EXPECT(t, "hello", 0, 12);
	EXPECT(t, " hello", 0, 13);
	EXPECT(t, "hello hello", 0, 12, 13);
	kvt_tokenizer_free(t);

	w = ll_writer(&LL_DEF);
	kvt_gguf_add_u32(w, "tokenizer.ggml.add_space_prefix", 1);
	CHECK_EQ(load_w(w, "tokenizer.ggml.add_space_prefix", &t, err, sizeof(err)), 0);
	EXPECT(t, "hello", 0, 13);
	kvt_tokenizer_free(t);

	/* add_bos_token false: the default (-1) leaves BOS out; asking adds it. */
	w = ll_writer(&LL_DEF);
	kvt_gguf_add_u32(w, "tokenizer.ggml.add_bos_token", 0);
	CHECK_EQ(load_w(w, "tokenizer.ggml.add_bos_token", &t, err, sizeof(err)), 0);
	EXPECT(t, "hello", -1, 13);
	EXPECT(t, "hello", 1, 1, 13);
	kvt_tokenizer_free(t);
	(void)arg;
}

static void c_gpt2(int arg)
{
	struct g_opts o = { 0 };
	struct kvt_tokenizer *t = g_load(&o);
	int32_t out[8];

	CHECK(!strcmp(kvt_tokenizer_model(t), "gpt2"));
	CHECK_EQ(kvt_tokenizer_bos(t), 271);
	/* Ġ t h e: Ġt (rank 0), he (1), Ġthe (2). No space, no Ġt: t he. */
	EXPECT(t, " the", 0, 258);
	EXPECT(t, "the", 0, 't', 257);
	/* gpt2 adds no BOS by default; asked, it does. */
	EXPECT(t, "the", -1, 't', 257);
	EXPECT(t, "the", 1, 271, 't', 257);
	/* The space goes with the next word: "hello", " world"; Ġw (7), or (8),
	 * Ġwor (9), ld (10), Ġworld (11). */
	EXPECT(t, "hello world", 0, 257, 'l', 'l', 'o', 267);
	/* a b c: ab (rank 3) before bc (4): ab c; swapped ranks: a bc. */
	EXPECT(t, "abc", 0, 259, 'c');
	/* Digits apart from letters: "abc", "123" (12 then 3). */
	EXPECT(t, "abc123", 0, 259, 'c', 262, '3');
	/* Contractions: "cat", "'s"; "don", "'t" (no merge for ' t). */
	EXPECT(t, "cat's", 0, 'c', 'a', 't', 261);
	EXPECT(t, "don't", 0, 'd', 'o', 'n', '\'', 't');
	/* Not a contraction after a space: " '" (a run of others), "s". */
	EXPECT(t, " 's", 0, ' ', '\'', 's');
	/* Three spaces before a word: "a", "  " (ĠĠ), " b" (Ġb); at the end
	 * the run keeps all of its spaces. */
	EXPECT(t, "a   b", 0, 'a', 268, 269);
	EXPECT(t, "a  ", 0, 'a', 268);
	/* Newlines: "\n\n" then a word gives up its last: "\n", "\n"; at the
	 * end it stays whole (ĊĊ); of three, two and one. */
	EXPECT(t, "x\n\ny", 0, 'x', '\n', '\n', 'y');
	EXPECT(t, "x\n\n", 0, 'x', 270);
	EXPECT(t, "x\n\n\ny", 0, 'x', 270, '\n', 'y');
	/* A tab then a space then a word: "\t", " b". */
	EXPECT(t, "\t b", 0, '\t', 269);
	/* Bytes >= 0x80 count as letters: one piece, each byte its token. */
	EXPECT(t, "h\xc3\xa9llo", 0, 'h', 0xc3, 0xa9, 'l', 'l', 'o');
	/* A literal control token is text. */
	EXPECT(t, "<|endoftext|>", 0, '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>');
	EXPECT_NONE(t, "", 0);
	EXPECT(t, "", 1, 271);

	PIECE(t, 258, " the");
	PIECE(t, ' ', " ");
	PIECE(t, '\n', "\n");
	PIECE(t, 0xc3, "\xc3");
	PIECE(t, 0, "\0");
	PIECE(t, 268, "  ");
	PIECE(t, 270, "\n\n");
	PIECE(t, 271, "");
	kvt_tokenizer_free(t);

	o.swap_abc = 1;
	t = g_load(&o);
	EXPECT(t, "abc", 0, 'a', 260);
	kvt_tokenizer_free(t);

	/* A byte without a token: <unk>, or -EILSEQ without one. */
	o = (struct g_opts){ .no_z = 1, .unk = 1 };
	t = g_load(&o);
	EXPECT(t, "zz the", 0, 'z', 'z', 258);
	kvt_tokenizer_free(t);
	o.unk = 0;
	t = g_load(&o);
	CHECK_EQ(kvt_tokenize(t, "zz", 2, 0, out, 8), -EILSEQ);
	EXPECT(t, " the", 0, 258);
	kvt_tokenizer_free(t);
	(void)arg;
}

/* The same vocabulary under Llama 3's pre-tokenizer ("llama-bpe"), where
 * it splits otherwise than GPT-2's; and the names it is known by, and one
 * it is not. */
static void c_gpt2_llama3(int arg)
{
	struct g_opts o = { .pre = "llama-bpe" };
	struct kvt_tokenizer *t = g_load(&o);
	struct kvt_gguf_writer *w;
	char err[512];

	/* As GPT-2: a space joins the next word; contractions. */
	EXPECT(t, " the", 0, 258);
	EXPECT(t, "hello world", 0, 257, 'l', 'l', 'o', 267);
	EXPECT(t, "cat's", 0, 'c', 'a', 't', 261);
	/* Digits three at a time: "121", "2" (GPT-2: "1212", 12 12). */
	EXPECT(t, "1212", 0, 262, '1', '2');
	/* A space before digits stands alone: " ", "12". */
	EXPECT(t, "a 12", 0, 'a', ' ', 262);
	/* White space up to its last line break is one piece: "\n\n" (GPT-2:
	 * "\n", "\n" before a word); "  \n" (ĠĠ, \n), then " " and " y" (no
	 * merge for Ġy). */
	EXPECT(t, "x\n\ny", 0, 'x', 270, 'y');
	EXPECT(t, "x  \n  y", 0, 'x', 268, '\n', ' ', ' ', 'y');
	/* Others take the line breaks after them: ".\n\n" (merged to . ĊĊ). */
	EXPECT(t, "x.\n\ny", 0, 'x', '.', 270, 'y');
	/* One byte that is no letter, digit or line break leads a word:
	 * "\tthe" is one piece (no merge spans it here: \t t he). */
	EXPECT(t, "\tthe", 0, '\t', 't', 257);
	/* Contractions of either case: "CAT", "'S". */
	EXPECT(t, "CAT'S", 0, 'C', 'A', 'T', '\'', 'S');
	/* BOS by default, as llama.cpp gives Llama 3's vocabularies one. */
	EXPECT(t, "1212", -1, 271, 262, '1', '2');
	kvt_tokenizer_free(t);

	/* The same text under GPT-2's pattern, named or not, for contrast. */
	o.pre = "gpt-2";
	t = g_load(&o);
	EXPECT(t, "1212", -1, 262, 262);
	EXPECT(t, "x\n\ny", 0, 'x', '\n', '\n', 'y');
	kvt_tokenizer_free(t);
	o.pre = "llama3";
	t = g_load(&o);
	EXPECT(t, "1212", 0, 262, '1', '2');
	kvt_tokenizer_free(t);

	/* Qwen2's: Llama 3's with digits one at a time. */
	o.pre = "qwen2";
	t = g_load(&o);
	EXPECT(t, "1212", 0, '1', '2', '1', '2');
	kvt_tokenizer_free(t);

	/* Another pre-tokenizer is refused, naming the key and the value. */
	o.pre = "falcon";
	CHECK_EQ(load_w(g_writer(&o), NULL, &t, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "tokenizer.ggml.pre") && strstr(err, "falcon"));
	CHECK(!t);
	o.pre = NULL;
	w = g_writer(&o);
	kvt_gguf_add_u32(w, "tokenizer.ggml.pre", 1);
	CHECK_EQ(load_w(w, NULL, &t, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "tokenizer.ggml.pre"));
	(void)arg;
}

/* Random strings: printable ASCII, UTF-8 of any code point (but U+2581,
 * which llama turns into a space), any bytes (llama and gpt2). */
static size_t rand_text(char *s, size_t cap, int kind)
{
	size_t n = 0, want = rnd(80);

	while (n < want && n + 4 < cap) {
		uint32_t c;

		if (kind == 0) {
			s[n++] = (char)(' ' + rnd(95));
			continue;
		}
		if (kind == 2) {
			s[n++] = (char)rnd(256);
			continue;
		}
		switch (rnd(4)) {
		case 0: c = rnd(0x80); break;
		case 1: c = 0x80 + rnd(0x800 - 0x80); break;
		case 2: c = 0x800 + rnd(0x10000 - 0x800); break;
		default: c = 0x10000 + rnd(0x110000 - 0x10000); break;
		}
		if ((c >= 0xd800 && c <= 0xdfff) || c == 0x2581)
			continue;
		if (c < 0x80) {
			s[n++] = (char)c;
		} else if (c < 0x800) {
			s[n++] = (char)(0xc0 | c >> 6);
			s[n++] = (char)(0x80 | (c & 0x3f));
		} else if (c < 0x10000) {
			s[n++] = (char)(0xe0 | c >> 12);
			s[n++] = (char)(0x80 | (c >> 6 & 0x3f));
			s[n++] = (char)(0x80 | (c & 0x3f));
		} else {
			s[n++] = (char)(0xf0 | c >> 18);
			s[n++] = (char)(0x80 | (c >> 12 & 0x3f));
			s[n++] = (char)(0x80 | (c >> 6 & 0x3f));
			s[n++] = (char)(0x80 | (c & 0x3f));
		}
	}
	return n;
}

static void c_round_trip(int arg)
{
	struct g_opts go = { 0 }, g3 = { .pre = "llama-bpe" };
	struct kvt_tokenizer *t[3] = { ll_load(&LL_DEF), g_load(&go), g_load(&g3) };
	static const char *const fixed[] = {
		"hello world", " leading", "trailing ", "  two  spaces  ", "\t\n\r\v\f",
		"caf\xc3\xa9 \xf0\x9f\x98\x80 \xe4\xb8\xad\xe6\x96\x87", "it's 2024, isn't it?",
		"<s></s><unk><0x41>",
	};
	char s[512];
	unsigned i, m, kind, iters = t_scale(2000);

	for (m = 0; m < 3; m++) {
		for (i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
			round_trip(t[m], fixed[i], strlen(fixed[i]));
		round_trip(t[m], "a\0b", 3);
		for (kind = 0; kind < 3; kind++)
			for (i = 0; i < iters; i++)
				round_trip(t[m], s, rand_text(s, sizeof(s), kind));
	}
	printf("  %u random strings of 3 kinds round-trip through llama, gpt2 and gpt2 with "
	       "llama-bpe\n", iters);
	for (m = 0; m < 3; m++)
		kvt_tokenizer_free(t[m]);
	(void)arg;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* 100 KB of words from the vocabularies, spaces, digits and UTF-8; and
 * 100 KB of one letter, where every pair can merge. */
static void c_speed(int arg)
{
	static const char *const words[] = {
		"hello", "the", "world", "abc", "123", "cat's", "\xc3\xa9t\xc3\xa9", "lll", "x",
		"\xf0\x9f\x98\x80", "hex", "\n",
	};
	struct g_opts go = { 0 };
	struct kvt_tokenizer *t[2] = { ll_load(&LL_DEF), g_load(&go) };
	size_t n = 0, cap = 100 << 10;
	char *s = malloc(cap + 16), *l = malloc(cap);
	unsigned m;

	CHECK(s && l);
	while (n < cap) {
		const char *w = words[rnd(sizeof(words) / sizeof(words[0]))];
		size_t k = strlen(w);

		memcpy(s + n, w, k);
		n += k;
		s[n++] = ' ';
	}
	memset(l, 'l', cap);
	for (m = 0; m < 2; m++) {
		double t0 = now(), t1, t2;
		int r = kvt_tokenize(t[m], s, n, 0, NULL, 0);

		t1 = now();
		CHECK(r > 0);
		CHECK(kvt_tokenize(t[m], l, cap, 0, NULL, 0) > 0);
		t2 = now();
		printf("  %s: %zu bytes of words in %.1f ms (%d tokens), %zu of 'l' in %.1f ms\n",
		       kvt_tokenizer_model(t[m]), n, (t1 - t0) * 1e3, r, cap, (t2 - t1) * 1e3);
		CHECK(t1 - t0 < 1.0 && t2 - t1 < 1.0);
		round_trip(t[m], s, n);
	}
	free(s);
	free(l);
	kvt_tokenizer_free(t[0]);
	kvt_tokenizer_free(t[1]);
	(void)arg;
}

/* ---- hostile metadata ---- */

enum {
	K_MODEL = 1, K_TOKENS = 2, K_SCORES = 4, K_TYPES = 8, K_MERGES = 16, K_IDS = 32,
};

/* The llama (or gpt2) vocabulary without the keys in skip. */
static struct kvt_gguf_writer *base(int gpt2, int skip)
{
	struct kvt_gguf_writer *w;
	unsigned n = gpt2 ? G_N : ll_fill(&LL_DEF);

	if (gpt2)
		kvt_gguf_writer_free(g_writer(&(struct g_opts){ 0 }));	/* fills g_tok */
	CHECK_EQ(kvt_gguf_writer_new(&w), 0);
	if (!(skip & K_MODEL))
		kvt_gguf_add_str(w, "tokenizer.ggml.model", gpt2 ? "gpt2" : "llama");
	if (!(skip & K_TOKENS))
		kvt_gguf_add_str_arr(w, "tokenizer.ggml.tokens", gpt2 ? g_tok : ll_tok, n);
	if (!(skip & K_SCORES) && !gpt2)
		kvt_gguf_add_f32_arr(w, "tokenizer.ggml.scores", ll_score, n);
	if (!(skip & K_TYPES))
		kvt_gguf_add_i32_arr(w, "tokenizer.ggml.token_type", gpt2 ? g_type : ll_type, n);
	if (!(skip & K_MERGES) && gpt2)
		kvt_gguf_add_str_arr(w, "tokenizer.ggml.merges", g_merges, G_NM);
	if (!(skip & K_IDS)) {
		kvt_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
		kvt_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
	}
	return w;
}

static void refused(struct kvt_gguf_writer *w, const char *bool_key, const char *what,
		    const char *want1, const char *want2)
{
	struct kvt_tokenizer *t;
	char err[512] = "";
	int ret = load_w(w, bool_key, &t, err, sizeof(err));

	if (ret != -EINVAL || !strstr(err, want1) || (want2 && !strstr(err, want2)) ||
	    strchr(err, '\n')) {
		fprintf(stderr, "%s: ret %d, err \"%s\", wanted -EINVAL and \"%s\"%s%s\n",
			what, ret, err, want1, want2 ? " and " : "", want2 ? want2 : "");
		exit(1);
	}
	printf("  %-26s %s\n", what, err);
}

static void c_hostile(int arg)
{
	static const int32_t i32s[3] = { 1, 2, 3 };
	const char *bad_merge[G_NM + 1];
	struct kvt_gguf_writer *w;
	struct kvt_tokenizer *t;
	float sc[LL_N];
	int32_t ty[LL_N];
	unsigned n = ll_fill(&LL_DEF);

	/* The bases load. */
	CHECK_EQ(load_w(base(0, 0), NULL, &t, NULL, 0), 0);
	kvt_tokenizer_free(t);
	CHECK_EQ(load_w(base(1, 0), NULL, &t, NULL, 0), 0);
	kvt_tokenizer_free(t);

	refused(base(0, K_MODEL), NULL, "no model", "tokenizer.ggml.model", "missing");
	w = base(0, K_MODEL);
	kvt_gguf_add_str(w, "tokenizer.ggml.model", "bert");
	refused(w, NULL, "unknown model", "tokenizer.ggml.model", "\"bert\"");
	w = base(0, K_MODEL);
	kvt_gguf_add_u32(w, "tokenizer.ggml.model", 1);
	refused(w, NULL, "model not a string", "tokenizer.ggml.model", "a u32");

	refused(base(0, K_TOKENS), NULL, "no tokens", "tokenizer.ggml.tokens", "missing");
	w = base(0, K_TOKENS);
	kvt_gguf_add_i32_arr(w, "tokenizer.ggml.tokens", i32s, 3);
	refused(w, NULL, "tokens not strings", "tokenizer.ggml.tokens", "array of i32");
	w = base(0, K_TOKENS);
	kvt_gguf_add_str(w, "tokenizer.ggml.tokens", "hello");
	refused(w, NULL, "tokens a string", "tokenizer.ggml.tokens", "a string");
	w = base(0, K_TOKENS);
	kvt_gguf_add_str_arr(w, "tokenizer.ggml.tokens", NULL, 0);
	refused(w, NULL, "tokens empty", "tokenizer.ggml.tokens", "empty");

	refused(base(0, K_SCORES), NULL, "llama without scores", "tokenizer.ggml.scores", "missing");
	w = base(0, K_SCORES);
	kvt_gguf_add_f32_arr(w, "tokenizer.ggml.scores", ll_score, n - 1);
	refused(w, NULL, "scores too short", "tokenizer.ggml.scores", "272 entries for 273");
	w = base(0, K_SCORES);
	kvt_gguf_add_i32_arr(w, "tokenizer.ggml.scores", ll_type, n);
	refused(w, NULL, "scores of i32", "tokenizer.ggml.scores", "expected an array of f32");
	memcpy(sc, ll_score, sizeof(sc));
	sc[9] = NAN;
	w = base(0, K_SCORES);
	kvt_gguf_add_f32_arr(w, "tokenizer.ggml.scores", sc, n);
	refused(w, NULL, "NaN score", "tokenizer.ggml.scores", "token 9 is NaN");

	w = base(0, K_TYPES);
	kvt_gguf_add_i32_arr(w, "tokenizer.ggml.token_type", ll_type, 3);
	refused(w, NULL, "types of wrong length", "tokenizer.ggml.token_type", "entries");
	memcpy(ty, ll_type, sizeof(ty));
	ty[5] = 7;
	w = base(0, K_TYPES);
	kvt_gguf_add_i32_arr(w, "tokenizer.ggml.token_type", ty, n);
	refused(w, NULL, "type 7", "tokenizer.ggml.token_type", "token 5 has type 7");
	ty[5] = -1;
	w = base(0, K_TYPES);
	kvt_gguf_add_i32_arr(w, "tokenizer.ggml.token_type", ty, n);
	refused(w, NULL, "type -1", "tokenizer.ggml.token_type", "type -1");
	ty[5] = 6;
	w = base(0, K_TYPES);
	kvt_gguf_add_i32_arr(w, "tokenizer.ggml.token_type", ty, n);
	refused(w, NULL, "byte type on \"e\"", "tokenizer.ggml.token_type", "\"e\"");
	ty[5] = 1;
	ty[15] = 6;	/* the empty token */
	w = base(0, K_TYPES);
	kvt_gguf_add_i32_arr(w, "tokenizer.ggml.token_type", ty, n);
	refused(w, NULL, "byte type on \"\"", "tokenizer.ggml.token_type", "token 15");

	w = base(0, K_IDS);
	kvt_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", LL_N);
	refused(w, NULL, "bos out of range", "tokenizer.ggml.bos_token_id", "273 is out of range");
	w = base(0, K_IDS);
	kvt_gguf_add_i32(w, "tokenizer.ggml.eos_token_id", 2);
	refused(w, NULL, "eos an i32", "tokenizer.ggml.eos_token_id", "an i32, expected a u32");
	w = base(0, 0);
	kvt_gguf_add_u32(w, "tokenizer.ggml.unknown_token_id", UINT32_MAX);
	refused(w, NULL, "unk out of range", "tokenizer.ggml.unknown_token_id", "out of range");
	w = base(0, 0);
	kvt_gguf_add_u32(w, "tokenizer.ggml.add_space_prefix", 1);
	refused(w, NULL, "space prefix a u32", "tokenizer.ggml.add_space_prefix", "expected a bool");
	w = base(0, 0);
	kvt_gguf_add_str(w, "tokenizer.ggml.add_bos_token", "yes");
	refused(w, NULL, "add_bos a string", "tokenizer.ggml.add_bos_token", "expected a bool");

	refused(base(1, K_MERGES), NULL, "gpt2 without merges", "tokenizer.ggml.merges", "missing");
	w = base(1, K_MERGES);
	kvt_gguf_add_i32_arr(w, "tokenizer.ggml.merges", i32s, 3);
	refused(w, NULL, "merges of i32", "tokenizer.ggml.merges", "array of i32");
	memcpy(bad_merge, g_merges, sizeof(g_merges));
	bad_merge[G_NM] = "x yz";
	w = base(1, K_MERGES);
	kvt_gguf_add_str_arr(w, "tokenizer.ggml.merges", bad_merge, G_NM + 1);
	refused(w, NULL, "merge of an unknown token", "tokenizer.ggml.merges",
		"merge 15 \"x yz\": \"yz\" is not a token");
	bad_merge[G_NM] = "q z";
	w = base(1, K_MERGES);
	kvt_gguf_add_str_arr(w, "tokenizer.ggml.merges", bad_merge, G_NM + 1);
	refused(w, NULL, "merge into no token", "tokenizer.ggml.merges", "\"qz\" is not a token");
	bad_merge[G_NM] = "abc";
	w = base(1, K_MERGES);
	kvt_gguf_add_str_arr(w, "tokenizer.ggml.merges", bad_merge, G_NM + 1);
	refused(w, NULL, "merge without a space", "tokenizer.ggml.merges", "not two pieces");
	bad_merge[G_NM] = "a ";
	w = base(1, K_MERGES);
	kvt_gguf_add_str_arr(w, "tokenizer.ggml.merges", bad_merge, G_NM + 1);
	refused(w, NULL, "merge \"a \"", "tokenizer.ggml.merges", "not two pieces");
	bad_merge[G_NM] = "";
	w = base(1, K_MERGES);
	kvt_gguf_add_str_arr(w, "tokenizer.ggml.merges", bad_merge, G_NM + 1);
	refused(w, NULL, "empty merge", "tokenizer.ggml.merges", "not two pieces");
	bad_merge[G_NM] = "a\nb c";
	w = base(1, K_MERGES);
	kvt_gguf_add_str_arr(w, "tokenizer.ggml.merges", bad_merge, G_NM + 1);
	refused(w, NULL, "merge with a newline", "tokenizer.ggml.merges", "\"a?b\" is not a token");

	/* gpt2 takes no scores, and other optional keys may be absent. */
	w = base(1, K_TYPES | K_IDS);
	CHECK_EQ(load_w(w, NULL, &t, NULL, 0), 0);
	CHECK_EQ(kvt_tokenizer_bos(t), -1);
	CHECK_EQ(kvt_tokenizer_eos(t), -1);
	EXPECT(t, "the", 1, 't', 257);
	kvt_tokenizer_free(t);
	(void)arg;
}

/* Random vocabularies (random bytes, empty tokens, <0xXX> tokens, types,
 * scores with infinities, merges over them, now and then something
 * malformed) load or are refused with one line, and random text
 * tokenizes to ids in range or -EILSEQ: never a crash. */
static void c_fuzz(int arg)
{
	unsigned it, iters = t_scale(400), loaded = 0;

	for (it = 0; it < iters; it++) {
		unsigned nb = 1 + rnd(40), nm = rnd(30), n = nb + nm, i, j;
		char **tok = calloc(n, sizeof(*tok)), **mg = calloc(nm + 1, sizeof(*mg));
		float *sc = malloc(n * sizeof(*sc));
		int32_t *ty = malloc(n * sizeof(*ty)), ids[600];
		int gpt2 = rnd(2), ret;
		struct kvt_gguf_writer *w;
		struct kvt_tokenizer *t;
		char err[512], text[200];

		CHECK(tok && mg && sc && ty);
		for (i = 0; i < nb; i++) {
			unsigned len = rnd(4);

			tok[i] = calloc(8, 1);
			CHECK(tok[i]);
			if (rnd(8) == 0)
				snprintf(tok[i], 8, "<0x%02X>", rnd(256));
			else
				for (j = 0; j < len; j++)
					tok[i][j] = (char)(rnd(2) ? 'a' + rnd(4) : 1 + rnd(255));
		}
		/* Each merge joins two earlier tokens into a new one. */
		for (i = 0; i < nm; i++) {
			const char *a = tok[rnd(nb + i)], *b = tok[rnd(nb + i)];

			mg[i] = malloc(strlen(a) + strlen(b) + 2);
			tok[nb + i] = malloc(strlen(a) + strlen(b) + 1);
			CHECK(mg[i] && tok[nb + i]);
			sprintf(mg[i], "%s %s", a, b);
			sprintf(tok[nb + i], "%s%s", a, b);
		}
		for (i = 0; i < n; i++) {
			sc[i] = rnd(10) == 0 ? -INFINITY : (float)rnd(100) - 50;
			ty[i] = rnd(100) == 0 ? (int32_t)rnd(10) :
				!strncmp(tok[i], "<0x", 3) && strlen(tok[i]) == 6 ? 6 : 1 + (int32_t)rnd(5);
		}
		CHECK_EQ(kvt_gguf_writer_new(&w), 0);
		kvt_gguf_add_str(w, "tokenizer.ggml.model", gpt2 ? "gpt2" : "llama");
		kvt_gguf_add_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)tok, n);
		if (rnd(10))
			kvt_gguf_add_f32_arr(w, "tokenizer.ggml.scores", sc, n);
		if (rnd(2))
			kvt_gguf_add_i32_arr(w, "tokenizer.ggml.token_type", ty, n);
		if (gpt2 && rnd(20))
			kvt_gguf_add_str_arr(w, "tokenizer.ggml.merges", (const char *const *)mg, nm);
		if (rnd(2))
			kvt_gguf_add_u32(w, "tokenizer.ggml.unknown_token_id", rnd(n + 1));
		if (rnd(2))
			kvt_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", rnd(n + 1));
		ret = load_w(w, NULL, &t, err, sizeof(err));
		if (ret) {
			CHECK_EQ(ret, -EINVAL);
			CHECK(err[0] && !strchr(err, '\n'));
		} else {
			loaded++;
			for (j = 0; j < 20; j++) {
				size_t len = rand_text(text, sizeof(text), (int)rnd(3));
				int r = kvt_tokenize(t, text, len, (int)rnd(3) - 1, ids, 600);

				CHECK(r >= 0 || r == -EILSEQ);
				for (i = 0; r > 0 && i < (unsigned)r; i++)
					CHECK(ids[i] >= 0 && (uint32_t)ids[i] < n);
			}
			for (i = 0; i < n; i++)
				CHECK(kvt_token_piece(t, (int32_t)i, text, sizeof(text)) >= 0);
			kvt_tokenizer_free(t);
		}
		for (i = 0; i < n; i++)
			free(tok[i]);
		for (i = 0; i < nm; i++)
			free(mg[i]);
		free(tok);
		free(mg);
		free(sc);
		free(ty);
	}
	printf("  %u random vocabularies, %u loaded\n", iters, loaded);
	CHECK(loaded > iters / 3);
	(void)arg;
}

/* ---- kvt-mkmodel's vocabulary ---- */

static const char paragraph[] =
	"The old bridge over the river was closed for repairs last spring, so the people "
	"who lived on the far side had to drive around through the next village. It added "
	"twenty minutes to every trip, and by the end of the summer everyone was tired of "
	"it. When the bridge finally opened again, there was a small party with music, and "
	"the children were the first to walk across. Memory is a strange thing: we forget "
	"what we did last week, but we remember the smell of bread from years ago.";

/* Run kvt-mkmodel with --vocab vocab into path; 0, or T_SKIP without the tool. */
static int mkmodel(unsigned vocab)
{
	const char *build = getenv("BUILD");
	char tool[4200], dir[4096], vs[16];
	pid_t pid;
	int st;

	if (build && *build) {
		snprintf(tool, sizeof(tool), "%s/kvt-mkmodel", build);
	} else {
		/* this test lives in BUILD/tests/ */
		snprintf(dir, sizeof(dir), "%s", argv0);
		*(strrchr(dir, '/') ? strrchr(dir, '/') : dir) = '\0';
		snprintf(tool, sizeof(tool), "%s/../kvt-mkmodel", *dir ? dir : ".");
	}
	if (access(tool, X_OK))
		return T_SKIP;
	snprintf(vs, sizeof(vs), "%u", vocab);
	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		execl(tool, tool, "--layers", "1", "--dim", "8", "--heads", "2", "--ff", "8",
		      "--ctx", "16", "--vocab", vs, "-o", path, (char *)NULL);
		_exit(127);
	}
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return 0;
}

static void c_mkmodel(int arg)
{
	static const unsigned sizes[] = { 512, 259, 300, 4000 };
	unsigned i;

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizeof(paragraph) - 1;
		struct kvt_tokenizer *t;
		struct kvt_gguf *g;
		char err[512];
		int cnt;

		if (mkmodel(sizes[i]))
			SKIP("kvt-mkmodel is not built");
		CHECK_EQ(kvt_gguf_open(path, &g, err, sizeof(err)), 0);
		CHECK_EQ(kvt_tokenizer_load(g, &t, err, sizeof(err)), 0);
		kvt_gguf_close(g);
		unlink(path);
		CHECK(!strcmp(kvt_tokenizer_model(t), "llama"));
		CHECK_EQ(kvt_tokenizer_n_vocab(t), sizes[i]);
		CHECK_EQ(kvt_tokenizer_bos(t), 1);
		CHECK_EQ(kvt_tokenizer_eos(t), 2);
		PIECE(t, 0, "<unk>");
		PIECE(t, 1, "");
		PIECE(t, 3, "\0");
		PIECE(t, 3 + 'A', "A");
		PIECE(t, 258, "\xff");
		cnt = kvt_tokenize(t, paragraph, n, 0, NULL, 0);
		printf("  --vocab %-4u %d tokens for %zu bytes (%.2f bytes a token)\n", sizes[i],
		       cnt, n, (double)n / cnt);
		if (sizes[i] == 259) {
			/* Bytes only: no U+2581, so every space is its 3 bytes. */
			CHECK(cnt > (int)n);
		} else {
			round_trip(t, paragraph, n);
			round_trip(t, "caf\xc3\xa9 \xf0\x9f\x98\x80 {x}", 14);
			PIECE(t, 259, " ");
		}
		/* Clearly fewer tokens than bytes: at most 55% with 512 (about 150
		 * pieces), 40% with 4000 (all of them, about 970). */
		if (sizes[i] == 512)
			CHECK(cnt * 20 <= (int)n * 11);
		if (sizes[i] == 4000)
			CHECK(cnt * 10 <= (int)n * 4);
		kvt_tokenizer_free(t);
	}
	(void)arg;
}

int main(int argc, char **argv)
{
	static const struct t_case cases[] = {
		{ "llama", c_llama },
		{ "llama_flags", c_llama_flags },
		{ "gpt2", c_gpt2 },
		{ "gpt2_llama3", c_gpt2_llama3 },
		{ "round_trip", c_round_trip },
		{ "speed", c_speed },
		{ "hostile", c_hostile },
		{ "fuzz", c_fuzz },
		{ "mkmodel", c_mkmodel },
	};
	const char *dir = getenv("KVT_TEST_DIR");

	argv0 = argc > 0 ? argv[0] : "";
	snprintf(path, sizeof(path), "%s/t_tokenizer.%d.gguf", dir && *dir ? dir : "/tmp",
		 (int)getpid());
	return t_run_cases(cases, sizeof(cases) / sizeof(cases[0]), 0, 14);
}
