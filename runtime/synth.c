/* SPDX-License-Identifier: MIT */
/*
 * Synthetic Llama models (see runtime/synth.h). Tensors are named and
 * shaped as llama.cpp expects (ne[0] is the contiguous dimension); norm
 * weights are 1 and stay f32 whatever the matrix type, as llama.cpp's
 * converter keeps them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/quants.h"
#include "runtime/gguf.h"
#include "runtime/synth.h"

#define N_SPECIAL 3	/* <unk>, <s>, </s> */
#define SYNTH_ROPE_THETA 10000.0f	/* llama.rope.freq_base */
#define N_BYTE_VOCAB (N_SPECIAL + 256)
#define N_CHAR_VOCAB (N_BYTE_VOCAB + 1 + 94)	/* + U+2581 and '!'..'~' */

/* Every buffer handed to the writer, which borrows them until it writes. */
struct bufs {
	void **p;		/* (n) */
	size_t n, cap;
	int err;
};

struct rng {
	uint64_t s;
};

/* splitmix64: the same stream for a seed on every platform. */
static uint64_t rng_next(struct rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [-a, a). */
static float rng_uniform(struct rng *r, float a)
{
	return ((float)(rng_next(r) >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * a;
}

static void *keep(struct bufs *b, size_t bytes)
{
	void *p;

	if (b->err)
		return NULL;
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 64;
		void **np = realloc(b->p, cap * sizeof(*np));

		if (!np)
			goto nomem;
		b->p = np;
		b->cap = cap;
	}
	if (!(p = calloc(1, bytes ? bytes : 1)))
		goto nomem;
	b->p[b->n++] = p;
	return p;
nomem:
	b->err = -ENOMEM;
	return NULL;
}

static uint16_t to_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);	/* round to nearest even */
}

/* A 2-D weight (ne0 = fan-in contiguous) of random values, or a norm of ones. */
static void add_weight(struct kvt_gguf_writer *w, struct bufs *b, struct rng *r,
		       uint32_t type, const char *name, uint64_t ne0, uint64_t ne1, int norm)
{
	uint64_t ne[2] = { ne0, ne1 }, i, n = ne0 * ne1;
	float a = 1.0f / sqrtf((float)ne0);
	uint64_t bytes = 0;
	void *d;

	if (kvt_ggml_nbytes(type, 2, ne, &bytes)) {
		b->err = b->err ? b->err : -EINVAL;
		return;
	}
	if (!(d = keep(b, bytes)))
		return;
	if (type == KVT_GGML_Q8_0) {
		uint8_t *blk = d;

		for (i = 0; i < n; i += 32, blk += 34) {
			float v[32], amax = 0, dq;
			uint16_t h;
			int j;

			for (j = 0; j < 32; j++) {
				v[j] = rng_uniform(r, a);
				amax = fabsf(v[j]) > amax ? fabsf(v[j]) : amax;
			}
			dq = amax / 127.0f;
			kvt_f32_to_f16(&h, &dq, 1);
			memcpy(blk, &h, 2);
			for (j = 0; j < 32; j++)
				blk[2 + j] = (uint8_t)(int8_t)lrintf(dq ? v[j] / dq : 0);
		}
	} else if (kvt_qtype(type)) {
		const struct kvt_qtype *q = kvt_qtype(type);
		float v[256];

		for (i = 0; i < n; i += q->blk) {
			for (unsigned j = 0; j < q->blk; j++)
				v[j] = rng_uniform(r, a);
			kvt_quantize(type, (uint8_t *)d + i / q->blk * q->size, v, q->blk);
		}
	} else {
		for (i = 0; i < n; i++) {
			float v = norm ? 1.0f : rng_uniform(r, a);

			if (type == KVT_GGML_F32)
				((float *)d)[i] = v;
			else if (type == KVT_GGML_F16)
				kvt_f32_to_f16((uint16_t *)d + i, &v, 1);
			else
				((uint16_t *)d)[i] = to_bf16(v);
		}
	}
	kvt_gguf_add_tensor(w, name, norm ? 1 : 2, ne, type, d);
}

/*
 * The prose the vocabulary's pieces are learnt from (ASCII). Changing it
 * changes the vocabulary of every model written from then on.
 */
static const char corpus[] =
	"The town sits in a valley between two rivers, and for most of the year the "
	"weather is mild. In the spring the fields turn green, the farmers plant their "
	"crops, and the children walk to school along the river road. There is a small "
	"library near the market, a bakery that opens before the sun comes up, and a "
	"station where the morning train stops for a few minutes on its way to the city.\n"
	"People who live here like to say that nothing ever happens, but that is not "
	"quite true. Every summer there is a fair with music and dancing, and in the "
	"autumn the whole town comes together to bring in the harvest. The oldest house "
	"was built more than three hundred years ago, and it is still standing today. "
	"Its walls are made of stone, and the roof was repaired after a storm in the "
	"winter of the year when the river froze.\n"
	"A computer keeps the data it is working on in memory, which is fast but small, "
	"and the rest on a disk, which is large but slow. When a program needs a page "
	"that is not in memory, the system has to read it from the disk, and the program "
	"must wait. A good cache keeps the pages that will be used again soon and moves "
	"the others out of the way, so that most of the time the data is already where "
	"it is needed. Choosing which page to move is a question that has been studied "
	"for many years, and there is still no single answer that works best for every "
	"kind of work.\n"
	"Language models read text as a sequence of tokens. Each token is a short piece "
	"of a word, a whole word, or a mark of punctuation, and the model learns which "
	"token is likely to come next. For every new token it must look back at all of "
	"the tokens before it, and the keys and values it computed for them are kept so "
	"that they do not have to be computed again. As the text grows longer, this "
	"store of keys and values can become larger than the memory of the device, and "
	"then some of it has to be moved to slower memory and brought back when it is "
	"needed.\n"
	"She opened the window and looked out at the garden. The rain had stopped, and "
	"the air smelled of wet earth and cut grass. Somewhere a dog was barking, and a "
	"bird was singing in the tall tree by the gate. She thought about the letter "
	"that had arrived that morning, and about what she would say when she wrote back. "
	"It was not an easy question, and she did not want to answer it in a hurry. "
	"Instead she made a cup of tea, sat down at the kitchen table, and began to read "
	"the letter again from the beginning.\n"
	"To make bread, mix the flour with water, salt and a little yeast, and knead the "
	"dough for about ten minutes until it is smooth. Leave it in a warm place for an "
	"hour or two, until it has doubled in size. Then shape it into a loaf, let it "
	"rise once more, and bake it in a hot oven until the crust is brown and the loaf "
	"sounds hollow when you tap it on the bottom. Good bread needs time more than "
	"it needs skill, and the best way to learn is to make it often.\n"
	"The history of the world is often told as a story of kings and wars, but most "
	"of the people who ever lived were farmers, traders and workers whose names were "
	"never written down. They built the roads, raised the children, and kept the "
	"old songs and stories alive from one generation to the next. What we know about "
	"their lives comes from the things they left behind: tools, houses, letters, and "
	"the shape of the land they worked.\n"
	"When you travel to a new country, it helps to learn a few words of the language "
	"before you go. People are usually glad when a visitor makes the effort, even if "
	"the words come out wrong. Take a map, carry some water, and do not try to see "
	"everything in one day. The places you remember best are often the ones you "
	"found by chance, while you were looking for something else.\n";

/* Common English words, roughly most frequent first; learn_pieces() counts
 * them as if each appeared twice more in the corpus, so that a larger
 * vocabulary has whole words beyond those of the corpus. */
static const char words[] =
	"the of and to a in is it you that he was for on are with as I his "
	"they be at one have this from or had by not word but what some we "
	"can out other were all there when up use your how said an each "
	"she which do their time if will way about many then them write "
	"would like so these her long make thing see him two has look more "
	"day could go come did number sound no most people my over know "
	"water than call first who may down side been now find any new "
	"work part take get place made live where after back little only "
	"round man year came show every good me give our under name very "
	"through just form sentence great think say help low line differ "
	"turn cause much mean before move right boy old too same tell does "
	"set three want air well also play small end put home read hand "
	"port large spell add even land here must big high such follow act "
	"why ask men change went light kind off need house picture try us "
	"again animal point mother world near build self earth father head "
	"stand own page should country found answer school grow study "
	"still learn plant cover food sun four between state keep eye "
	"never last let thought city tree cross farm hard start might "
	"story saw far sea draw left late run while press close night real "
	"life few north open seem together next white children begin got "
	"walk example ease paper group always music those both mark often "
	"letter until mile river car feet care second book carry took "
	"science eat room friend began idea fish mountain stop once base "
	"hear horse cut sure watch color face wood main enough plain girl "
	"usual young ready above ever red list though feel talk bird soon "
	"body dog family direct pose leave song measure door product black "
	"short numeral class wind question happen complete ship area half "
	"rock order fire south problem piece told knew pass since top "
	"whole king space heard best hour better true during hundred five "
	"remember step early hold west ground interest reach fast verb "
	"sing listen six table travel less morning ten simple several "
	"vowel toward war lay against pattern slow center love person "
	"money serve appear road map rain rule govern pull cold notice "
	"voice unit power town fine certain fly fall lead cry dark machine "
	"note wait plan figure star box noun field rest correct able pound "
	"done beauty drive stood contain front teach week final gave green "
	"oh quick develop ocean warm free minute strong special mind "
	"behind clear tail produce fact street inch multiply nothing "
	"course stay wheel full force blue object decide surface deep moon "
	"island foot system busy test record boat common gold possible "
	"plane stead dry wonder laugh thousand ago ran check game shape "
	"equate hot miss brought heat snow tire bring yes distant fill "
	"east paint language among";

/* Bytes of the longest piece learnt: longer ones are not formed. */
#define PIECE_MAX 48

/* A unit of the corpus that pieces never cross: a run of letters, of
 * digits, or one other character; the first unit of a word starts with
 * U+2581. */
static int char_class(char c)
{
	if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
		return 0;
	if (c >= '0' && c <= '9')
		return 1;
	return 2;
}

/* The ids of text (ASCII) into seq from n on, -1 between units; returns
 * the new end. At most two ids a byte. */
static size_t text_ids(const char *text, int32_t *seq, size_t n)
{
	size_t i;

	for (i = 0; text[i]; i++) {
		char c = text[i];

		if (c < '!' || c > '~') {
			seq[n++] = -1;
			continue;
		}
		if (i == 0 || text[i - 1] < '!' || text[i - 1] > '~')
			seq[n++] = N_BYTE_VOCAB;			/* U+2581 */
		else if (char_class(c) != char_class(text[i - 1]) || char_class(c) == 2)
			seq[n++] = -1;
		seq[n++] = N_BYTE_VOCAB + 1 + (c - '!');
	}
	seq[n++] = -1;
	return n;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/*
 * Learn pieces from the corpus and the words by byte-pair encoding: start
 * from their characters (ids in tok[]: U+2581 and '!'..'~'), then again
 * and again join the adjacent pair seen most often (ties: the lowest pair
 * of ids) into a new piece, until tok[] holds vocab entries or no pair is
 * seen twice. The new pieces go to tok[first..], in the order learnt, and
 * the id after the last is returned. A pair whose text is already a piece
 * (learnt through another split) is joined into that piece, adding none.
 */
/* Join every adjacent l r in seq[0, *n) into one id: the piece among
 * tok[first, *nt) with their text, or a new one at tok[*nt]. Returns that
 * id, or -1 out of memory. */
static int32_t join_pair(struct bufs *b, const char **tok, unsigned first, unsigned *nt,
			 int32_t l, int32_t r, int32_t *seq, size_t *n)
{
	size_t ll = strlen(tok[l]), rl = strlen(tok[r]), i, j;
	char s[2 * PIECE_MAX + 1];
	int32_t id = -1;

	memcpy(s, tok[l], ll);
	memcpy(s + ll, tok[r], rl + 1);
	for (unsigned k = first; k < *nt && id < 0; k++)
		if (!strcmp(tok[k], s))
			id = (int32_t)k;
	if (id < 0) {
		char *p = keep(b, ll + rl + 1);

		if (!p)
			return -1;
		memcpy(p, s, ll + rl + 1);
		tok[*nt] = p;
		id = (int32_t)(*nt)++;
	}
	for (i = j = 0; i < *n; i++) {
		if (i + 1 < *n && seq[i] == l && seq[i + 1] == r) {
			seq[j++] = id;
			i++;
		} else {
			seq[j++] = seq[i];
		}
	}
	*n = j;
	return id;
}

static unsigned learn_pieces(struct bufs *b, const char **tok, unsigned first, unsigned vocab)
{
	size_t max = 2 * (sizeof(corpus) + 2 * sizeof(words)), n = 0, i;
	int32_t *seq = keep(b, max * sizeof(*seq));
	uint64_t *pairs = keep(b, max * sizeof(*pairs));
	unsigned nt = first;

	if (b->err)
		return first;

	n = text_ids(corpus, seq, n);
	n = text_ids(words, seq, n);
	n = text_ids(words, seq, n);
	while (nt < vocab) {
		uint64_t best = 0;
		size_t np = 0, run, best_run = 0;
		int32_t l, r;

		for (i = 0; i + 1 < n; i++)
			if (seq[i] >= 0 && seq[i + 1] >= 0 &&
			    strlen(tok[seq[i]]) + strlen(tok[seq[i + 1]]) <= PIECE_MAX)
				pairs[np++] = (uint64_t)seq[i] << 32 | (uint32_t)seq[i + 1];
		qsort(pairs, np, sizeof(*pairs), cmp_u64);
		for (i = 0; i < np; i += run) {
			for (run = 1; i + run < np && pairs[i + run] == pairs[i]; run++)
				;
			if (run > best_run) {
				best_run = run;
				best = pairs[i];
			}
		}
		if (best_run < 2)
			break;
		l = (int32_t)(best >> 32);
		r = (int32_t)(uint32_t)best;
		if (join_pair(b, tok, N_BYTE_VOCAB, &nt, l, r, seq, &n) < 0)
			break;
	}
	return nt;
}

/*
 * A SentencePiece-style vocabulary: <unk>, <s>, </s> (ids 0..2), the byte
 * tokens <0x00>..<0xFF> (3..258), U+2581 (259), the printable ASCII
 * characters '!'..'~' (260..353), then the pieces learn_pieces() finds,
 * then "<extra_N>" fillers (unused) up to vocab. Scores are what
 * SentencePiece's BPE models carry: a piece learnt k-th scores -k, so the
 * tokenizer joins pieces in the order they were learnt; characters,
 * bytes and specials never result from a join and score 0 or below all.
 */
static void add_vocab(struct kvt_gguf_writer *w, struct bufs *b, unsigned vocab)
{
	const char **tok = keep(b, vocab * sizeof(*tok));
	float *score = keep(b, vocab * sizeof(*score));
	int32_t *ttype = keep(b, vocab * sizeof(*ttype));
	char *names = keep(b, (size_t)vocab * 24);
	unsigned i, n_chars = 0, n_pieces = 0;

	if (b->err)
		return;
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
		else if (i == N_BYTE_VOCAB)
			snprintf(s, 24, "\xe2\x96\x81");
		else if (i < N_CHAR_VOCAB)
			snprintf(s, 24, "%c", '!' + (i - N_BYTE_VOCAB - 1));
		else
			s[0] = '\0';	/* a learnt piece or a filler, below */
		tok[i] = s;
	}
	if (vocab > N_CHAR_VOCAB)
		n_pieces = learn_pieces(b, tok, N_CHAR_VOCAB, vocab) - N_CHAR_VOCAB;
	for (i = N_CHAR_VOCAB + n_pieces; i < vocab; i++) {
		snprintf(names + (size_t)i * 24, 24, "<extra_%u>", i - N_CHAR_VOCAB - n_pieces);
		tok[i] = names + (size_t)i * 24;
	}
	if (vocab > N_BYTE_VOCAB)
		n_chars = (vocab < N_CHAR_VOCAB ? vocab : N_CHAR_VOCAB) - N_BYTE_VOCAB;
	for (i = 0; i < vocab; i++) {
		/* llama_token_type: 1 normal, 2 unknown, 3 control, 5 unused, 6 byte */
		if (i < N_BYTE_VOCAB) {
			score[i] = 0.0f;
			ttype[i] = i == 0 ? 2 : i < N_SPECIAL ? 3 : 6;
		} else if (i < N_BYTE_VOCAB + n_chars) {
			score[i] = -1e6f;
			ttype[i] = 1;
		} else if (i < N_CHAR_VOCAB + n_pieces) {
			score[i] = -(float)(i - N_CHAR_VOCAB);
			ttype[i] = 1;
		} else {
			score[i] = -2e6f;
			ttype[i] = 5;
		}
	}
	kvt_gguf_add_str(w, "tokenizer.ggml.model", "llama");
	kvt_gguf_add_str_arr(w, "tokenizer.ggml.tokens", tok, vocab);
	kvt_gguf_add_f32_arr(w, "tokenizer.ggml.scores", score, vocab);
	kvt_gguf_add_i32_arr(w, "tokenizer.ggml.token_type", ttype, vocab);
	kvt_gguf_add_u32(w, "tokenizer.ggml.unknown_token_id", 0);
	kvt_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
	kvt_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
}

/*
 * The gpt2 vocabulary (see runtime/synth.h): byte-level BPE as GPT-2 and
 * Llama 3 have it.
 */
#define N_GPT2_BYTES	256
#define N_GPT2_SELF	188	/* bytes that stand for themselves */

/* GPT-2's bytes_to_unicode: '!'..'~', 0xa1..0xac and 0xae..0xff are their
 * own code points, the other 68 bytes take 0x100, 0x101, ... in order. */
static int gpt2_self(unsigned b)
{
	return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
}

/*
 * The byte tokens in the order of GPT-2's vocabulary, which is that of
 * their code points: the 188 bytes that are themselves, then the other 68
 * (U+0100..U+0143). Each token's UTF-8 text into names[24 * id], its id
 * into id_of[byte].
 */
static void gpt2_bytes(const char **tok, char *names, int32_t id_of[N_GPT2_BYTES])
{
	unsigned b, self = 0, other = 0;

	for (b = 0; b < N_GPT2_BYTES; b++) {
		unsigned id = gpt2_self(b) ? self++ : N_GPT2_SELF + other++;
		unsigned cp = id < N_GPT2_SELF ? b : 0x100 + id - N_GPT2_SELF;
		char *s = names + (size_t)id * 24;

		if (cp < 0x80) {
			s[0] = (char)cp;
			s[1] = '\0';
		} else {
			s[0] = (char)(0xc0 | cp >> 6);
			s[1] = (char)(0x80 | (cp & 0x3f));
			s[2] = '\0';
		}
		tok[id] = s;
		id_of[b] = (int32_t)id;
	}
}

/* Character classes of GPT-2's pre-tokenizer, for ASCII. */
enum { GC_LETTER, GC_DIGIT, GC_SPACE, GC_OTHER };

static int gpt2_class(unsigned char c)
{
	if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
		return GC_LETTER;
	if (c >= '0' && c <= '9')
		return GC_DIGIT;
	if (c == ' ' || (c >= '\t' && c <= '\r'))
		return GC_SPACE;
	return GC_OTHER;
}

/* The length of the word of text at i by GPT-2's pre-tokenizer pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (for ASCII; len > i). */
static size_t gpt2_word(const char *text, size_t i, size_t len)
{
	size_t k = i, j;
	int c;

	if (text[i] == '\'' && i + 1 < len) {
		if (strchr("stmd", text[i + 1]))
			return 2;
		if (i + 2 < len && (!strncmp(text + i + 1, "re", 2) || !strncmp(text + i + 1, "ve", 2) ||
				    !strncmp(text + i + 1, "ll", 2)))
			return 3;
	}
	if (text[i] == ' ' && i + 1 < len && gpt2_class((unsigned char)text[i + 1]) != GC_SPACE)
		k = i + 1;
	c = gpt2_class((unsigned char)text[k]);
	if (c != GC_SPACE) {
		for (j = k + 1; j < len && gpt2_class((unsigned char)text[j]) == c; j++)
			;
		return j - i;
	}
	for (j = i + 1; j < len && gpt2_class((unsigned char)text[j]) == GC_SPACE; j++)
		;
	if (j < len && j - i >= 2)
		return j - 1 - i;	/* the last space goes with the next word */
	return j - i;
}

/* The byte-token ids of text's words into seq from n on, -1 after each
 * word; returns the new end. At most two ids a byte. */
static size_t gpt2_text_ids(const char *text, const int32_t id_of[N_GPT2_BYTES],
			    int32_t *seq, size_t n)
{
	size_t len = strlen(text), i = 0, w, k;

	while (i < len) {
		w = gpt2_word(text, i, len);
		for (k = 0; k < w; k++)
			seq[n++] = id_of[(unsigned char)text[i + k]];
		seq[n++] = -1;
		i += w;
	}
	return n;
}

struct pair_slot {
	uint64_t key;		/* left << 32 | right */
	uint32_t count, first;	/* occurrences; position of the first */
	uint32_t gen;		/* the round that filled it; another: empty */
};

/*
 * Learn byte-level BPE pieces from the corpus and the words (each counted
 * twice, as learn_pieces() does) split into GPT-2's words: join the
 * adjacent pair within a word seen most often (ties: the pair seen first
 * in the text) into a piece, again and again, until tok[] holds limit
 * entries or no pair is seen twice. New pieces go to tok[first..] in the
 * order learnt and the id after the last is returned; each join's "left
 * right" goes to merges[], *n_merges of them. A join whose text is already
 * a piece (learnt through another split) adds a merge but no piece.
 */
static unsigned gpt2_learn(struct bufs *b, const char **tok, const int32_t id_of[N_GPT2_BYTES],
			   unsigned first, unsigned limit, const char ***merges, size_t *n_merges)
{
	size_t max = 2 * (sizeof(corpus) + 2 * sizeof(words)), n = 0, i, nm = 0;
	size_t mask = 1;
	int32_t *seq = keep(b, max * sizeof(*seq));
	const char **mg = keep(b, max * sizeof(*mg));
	struct pair_slot *tab;
	unsigned nt = first, gen = 0;

	while (mask < 2 * max)
		mask <<= 1;
	tab = keep(b, mask * sizeof(*tab));
	mask--;
	*merges = mg;
	*n_merges = 0;
	if (b->err)
		return first;

	n = gpt2_text_ids(corpus, id_of, seq, n);
	n = gpt2_text_ids(words, id_of, seq, n);
	n = gpt2_text_ids(words, id_of, seq, n);
	while (nt < limit) {
		struct pair_slot *best = NULL;
		int32_t l, r;
		size_t ll, rl;
		char *m;

		gen++;
		for (i = 0; i + 1 < n; i++) {
			uint64_t key, h;
			struct pair_slot *e;

			if (seq[i] < 0 || seq[i + 1] < 0 ||
			    strlen(tok[seq[i]]) + strlen(tok[seq[i + 1]]) > PIECE_MAX)
				continue;
			key = (uint64_t)seq[i] << 32 | (uint32_t)seq[i + 1];
			h = (key * 0x9e3779b97f4a7c15ull) >> 20;
			for (e = &tab[h & mask]; e->gen == gen && e->key != key; e = &tab[++h & mask])
				;
			if (e->gen != gen)
				*e = (struct pair_slot){ .key = key, .first = (uint32_t)i, .gen = gen };
			e->count++;
			if (!best || e->count > best->count ||
			    (e->count == best->count && e->first < best->first))
				best = e;
		}
		if (!best || best->count < 2)
			break;
		l = (int32_t)(best->key >> 32);
		r = (int32_t)(uint32_t)best->key;
		ll = strlen(tok[l]);
		rl = strlen(tok[r]);
		if (!(m = keep(b, ll + rl + 2)))
			break;
		memcpy(m, tok[l], ll);
		m[ll] = ' ';
		memcpy(m + ll + 1, tok[r], rl + 1);
		mg[nm++] = m;
		if (join_pair(b, tok, first, &nt, l, r, seq, &n) < 0)
			break;
	}
	*n_merges = nm;
	return nt;
}

/*
 * The gpt2 vocabulary: byte tokens (0..255), learnt pieces, fillers
 * "<|reserved_special_token_N|>", then <|begin_of_text|> and
 * <|end_of_text|> (vocab - 2, vocab - 1). Types as llama.cpp's converter
 * writes Llama 3's: 1 (normal) for bytes and pieces, 3 (control) for the
 * rest. vocab >= KVT_SYNTH_MIN_VOCAB_GPT2.
 */
static void add_vocab_gpt2(struct kvt_gguf_writer *w, struct bufs *b, unsigned vocab,
			   const char *pre)
{
	const char **tok = keep(b, vocab * sizeof(*tok));
	int32_t *ttype = keep(b, vocab * sizeof(*ttype));
	char *names = keep(b, (size_t)N_GPT2_BYTES * 24);
	const char **merges = NULL;
	int32_t id_of[N_GPT2_BYTES];
	size_t n_merges = 0;
	unsigned i, nt;

	if (b->err)
		return;
	gpt2_bytes(tok, names, id_of);
	nt = gpt2_learn(b, tok, id_of, N_GPT2_BYTES, vocab - 2, &merges, &n_merges);
	for (i = nt; i < vocab - 2; i++) {
		char *s = keep(b, 48);

		if (!s)
			return;
		snprintf(s, 48, "<|reserved_special_token_%u|>", i - nt);
		tok[i] = s;
	}
	tok[vocab - 2] = "<|begin_of_text|>";
	tok[vocab - 1] = "<|end_of_text|>";
	for (i = 0; i < vocab; i++)
		ttype[i] = i < nt ? 1 : 3;	/* llama_token_type: normal, control */
	if (b->err)
		return;
	kvt_gguf_add_str(w, "tokenizer.ggml.model", "gpt2");
	if (pre && *pre)
		kvt_gguf_add_str(w, "tokenizer.ggml.pre", pre);
	kvt_gguf_add_str_arr(w, "tokenizer.ggml.tokens", tok, vocab);
	kvt_gguf_add_i32_arr(w, "tokenizer.ggml.token_type", ttype, vocab);
	kvt_gguf_add_str_arr(w, "tokenizer.ggml.merges", merges, n_merges);
	kvt_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", vocab - 2);
	kvt_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", vocab - 1);
}

/*
 * Llama 3.1's "llama3" RoPE scaling as per-pair divisors, the way
 * llama.cpp's convert_hf_to_gguf.py writes rope_freqs.weight: factor 8,
 * low_freq_factor 1, high_freq_factor 4, original context 8192. Pairs of
 * short wavelength keep their frequency, long ones are divided by the
 * factor, and those between are interpolated smoothly.
 */
static void llama3_freqs(float *out, unsigned rope_dim, double theta)
{
	const double factor = 8, low = 1, high = 4, orig_ctx = 8192;
	const double low_wavelen = orig_ctx / low, high_wavelen = orig_ctx / high;

	for (unsigned i = 0; i < rope_dim / 2; i++) {
		double wavelen = 2 * M_PI * pow(theta, 2.0 * i / rope_dim), smooth;

		if (wavelen < high_wavelen) {
			out[i] = 1.0f;
		} else if (wavelen > low_wavelen) {
			out[i] = (float)factor;
		} else {
			smooth = (orig_ctx / wavelen - low) / (high - low);
			out[i] = (float)(1 / ((1 - smooth) / factor + smooth));
		}
	}
}

void kvt_synth_default(struct kvt_synth *s)
{
	*s = (struct kvt_synth){
		.layers = 2, .dim = 64, .heads = 4, .ctx = 2048, .vocab = 512,
		.seed = 1, .type = KVT_GGML_F32, .tokenizer = KVT_SYNTH_TOK_LLAMA,
		.pre = "llama-bpe",
	};
}

static int sfail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

int kvt_synth_check(const struct kvt_synth *s, char *err, size_t errlen)
{
	unsigned kvh = s->kv_heads ? s->kv_heads : s->heads;
	unsigned ff = s->ff ? s->ff : 4 * s->dim;

	if (!s->layers || !s->dim || !s->heads || !s->ctx)
		return sfail(err, errlen, "layers, dim, heads and ctx must be positive");
	if (s->dim % s->heads || (s->dim / s->heads) % 2)
		return sfail(err, errlen, "dim %u must be a multiple of heads %u with an even head dimension",
			     s->dim, s->heads);
	if (kvh > s->heads || s->heads % kvh)
		return sfail(err, errlen, "heads %u must be a multiple of kv-heads %u", s->heads, kvh);
	if (s->tokenizer != KVT_SYNTH_TOK_LLAMA && s->tokenizer != KVT_SYNTH_TOK_GPT2)
		return sfail(err, errlen, "tokenizer must be llama or gpt2");
	if (s->tokenizer == KVT_SYNTH_TOK_LLAMA && s->vocab < KVT_SYNTH_MIN_VOCAB)
		return sfail(err, errlen, "vocab must be at least %d", KVT_SYNTH_MIN_VOCAB);
	if (s->tokenizer == KVT_SYNTH_TOK_GPT2 && s->vocab < KVT_SYNTH_MIN_VOCAB_GPT2)
		return sfail(err, errlen, "vocab %u is too small for the gpt2 tokenizer: it needs at "
			     "least %d (256 byte tokens, <|begin_of_text|> and <|end_of_text|>)",
			     s->vocab, KVT_SYNTH_MIN_VOCAB_GPT2);
	if (s->type != KVT_GGML_F32 && s->type != KVT_GGML_F16 && s->type != KVT_GGML_BF16 &&
	    !kvt_qtype(s->type))
		return sfail(err, errlen, "weight type must be one of " KVT_WTYPES);
	if (s->mix && (s->type != KVT_GGML_Q4_K && s->type != KVT_GGML_Q5_K))
		return sfail(err, errlen, "the _m mix is made of q4_k or q5_k");
	if (kvt_qtype(s->type)) {
		unsigned blk = s->mix ? 256 : kvt_qtype(s->type)->blk;
		if (s->dim % blk || ff % blk)
			return sfail(err, errlen, "%s%s needs dim and ff to be multiples of %u",
				     kvt_ggml_type_name(s->type), s->mix ? "_m" : "", blk);
	}
	if (s->rope_freqs != KVT_SYNTH_ROPE_NONE && s->rope_freqs != KVT_SYNTH_ROPE_LLAMA3)
		return sfail(err, errlen, "rope_freqs must be none or llama3");
	return 0;
}

/* The layers whose attn_v and ffn_down an _M file keeps at q6_k, as
 * llama.cpp's quantize chooses them (use_more_bits): the first and last
 * eighth, and every third between. */
static int more_bits(unsigned l, unsigned n)
{
	return l < n / 8 || l >= 7 * n / 8 || (l - n / 8) % 3 == 2;
}

/* general.file_type: llama.cpp's llama_ftype for what is written. */
static uint32_t file_type(const struct kvt_synth *s)
{
	switch (s->type) {
	case KVT_GGML_F32: return 0;
	case KVT_GGML_F16: return 1;
	case KVT_GGML_Q4_0: return 2;
	case KVT_GGML_Q4_1: return 3;
	case KVT_GGML_Q8_0: return 7;
	case KVT_GGML_Q5_0: return 8;
	case KVT_GGML_Q5_1: return 9;
	case KVT_GGML_Q2_K: return 10;
	case KVT_GGML_Q3_K: return 12;	/* Q3_K_M */
	case KVT_GGML_Q4_K: return s->mix ? 15 : 14;	/* Q4_K_M, Q4_K_S */
	case KVT_GGML_Q5_K: return s->mix ? 17 : 16;	/* Q5_K_M, Q5_K_S */
	case KVT_GGML_Q6_K: return 18;
	}
	return 32;				/* BF16 */
}

int kvt_synth_write(const struct kvt_synth *s, const char *path, char *err, size_t errlen)
{
	struct kvt_gguf_writer *w = NULL;
	struct bufs b = { 0 };
	struct rng r = { s->seed };
	unsigned kvh = s->kv_heads ? s->kv_heads : s->heads;
	unsigned ff = s->ff ? s->ff : 4 * s->dim;
	unsigned hd, kv_dim, l;
	char name[64], akey[96];
	const char *arch;
	int ret;
#define AK(k) (snprintf(akey, sizeof(akey), "%s." k, arch), akey)

	if ((ret = kvt_synth_check(s, err, errlen)))
		return ret;
	arch = s->qwen2 ? "qwen2" : "llama";
	hd = s->dim / s->heads;
	kv_dim = hd * kvh;
	if ((ret = kvt_gguf_writer_new(&w))) {
		sfail(err, errlen, "out of memory");
		return ret;
	}
	kvt_gguf_add_str(w, "general.architecture", arch);
	kvt_gguf_add_str(w, "general.name", "kvtier synthetic");
	kvt_gguf_add_u32(w, "general.file_type", file_type(s));
	kvt_gguf_add_u32(w, AK("block_count"), s->layers);
	kvt_gguf_add_u32(w, AK("context_length"), s->ctx);
	kvt_gguf_add_u32(w, AK("embedding_length"), s->dim);
	kvt_gguf_add_u32(w, AK("feed_forward_length"), ff);
	kvt_gguf_add_u32(w, AK("attention.head_count"), s->heads);
	kvt_gguf_add_u32(w, AK("attention.head_count_kv"), kvh);
	kvt_gguf_add_u32(w, AK("rope.dimension_count"), hd);
	kvt_gguf_add_f32(w, AK("rope.freq_base"), SYNTH_ROPE_THETA);
	kvt_gguf_add_f32(w, AK("attention.layer_norm_rms_epsilon"), 1e-5f);
	kvt_gguf_add_u32(w, AK("vocab_size"), s->vocab);
	if (s->tokenizer == KVT_SYNTH_TOK_GPT2)
		add_vocab_gpt2(w, &b, s->vocab, s->pre);
	else
		add_vocab(w, &b, s->vocab);

	add_weight(w, &b, &r, s->type, "token_embd.weight", s->dim, s->vocab, 0);
	for (l = 0; l < s->layers; l++) {
		uint32_t more = s->mix && more_bits(l, s->layers) ? KVT_GGML_Q6_K : s->type;
#define BLK(x) (snprintf(name, sizeof(name), "blk.%u." x, l), name)
		add_weight(w, &b, &r, KVT_GGML_F32, BLK("attn_norm.weight"), s->dim, 1, 1);
		add_weight(w, &b, &r, s->type, BLK("attn_q.weight"), s->dim, s->dim, 0);
		add_weight(w, &b, &r, s->type, BLK("attn_k.weight"), s->dim, kv_dim, 0);
		add_weight(w, &b, &r, more, BLK("attn_v.weight"), s->dim, kv_dim, 0);
		if (s->qwen2) {
			add_weight(w, &b, &r, KVT_GGML_F32, BLK("attn_q.bias"), s->dim, 1, 0);
			add_weight(w, &b, &r, KVT_GGML_F32, BLK("attn_k.bias"), kv_dim, 1, 0);
			add_weight(w, &b, &r, KVT_GGML_F32, BLK("attn_v.bias"), kv_dim, 1, 0);
		}
		add_weight(w, &b, &r, s->type, BLK("attn_output.weight"), s->dim, s->dim, 0);
		add_weight(w, &b, &r, KVT_GGML_F32, BLK("ffn_norm.weight"), s->dim, 1, 1);
		add_weight(w, &b, &r, s->type, BLK("ffn_gate.weight"), s->dim, ff, 0);
		add_weight(w, &b, &r, s->type, BLK("ffn_up.weight"), s->dim, ff, 0);
		add_weight(w, &b, &r, more, BLK("ffn_down.weight"), ff, s->dim, 0);
#undef BLK
	}
	add_weight(w, &b, &r, KVT_GGML_F32, "output_norm.weight", s->dim, 1, 1);
	if (!s->tied)
		add_weight(w, &b, &r, s->mix ? KVT_GGML_Q6_K : s->type, "output.weight", s->dim,
			   s->vocab, 0);
	if (s->rope_freqs == KVT_SYNTH_ROPE_LLAMA3) {
		uint64_t ne = hd / 2;
		float *f = keep(&b, ne * sizeof(float));

		if (f) {
			llama3_freqs(f, hd, SYNTH_ROPE_THETA);
			kvt_gguf_add_tensor(w, "rope_freqs.weight", 1, &ne, KVT_GGML_F32, f);
		}
	}

	if (b.err) {
		sfail(err, errlen, "%s: out of memory", path);
		ret = b.err;
	} else
		ret = kvt_gguf_writer_write(w, path, err, errlen);
	kvt_gguf_writer_free(w);
	while (b.n)
		free(b.p[--b.n]);
	free(b.p);
	return ret;
}
