/* SPDX-License-Identifier: MIT */
/*
 * Tokenizers from GGUF metadata (see runtime/tokenizer.h for the contract).
 *
 * Load copies every token string into one pool and indexes it with an
 * open-addressing hash table (XXH3 of the text); gpt2's merges go into a
 * second table keyed by the pair of token ids. Every decoded piece is
 * worked out once at load, so kvt_token_piece is a copy.
 *
 * Both models then run one merge loop over a linked list of symbols with
 * a binary heap of candidate bigrams, as llama.cpp does: llama ranks a
 * bigram by the score of its merged piece (higher first), gpt2 by the rank
 * of its merge (lower first); ties go to the leftmost. A merge always
 * folds the right symbol into the left one, so lengths only grow: a queued
 * bigram whose two lengths no longer add up to what they were when it was
 * queued is stale and skipped.
 *
 * gpt2 text is split before the merges by GPT-2's pattern, Llama 3's or
 * Qwen2's (tokenizer.ggml.pre), over code points classed as the patterns'
 * \p{L}, \p{N} and \s by the Unicode data (utf8proc; cclass()).
 *
 * Not handled: control (type 3) and user-defined (type 4) tokens that
 * appear literally in the text are not matched as specials; "<s>" in the
 * text is the characters '<', 's', '>'. Plain text in, ids out.
 *
 * kvt_tokenize allocates its scratch per call and only reads the
 * tokenizer, so one tokenizer may serve several threads at once.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include <xxhash.h>

#include "runtime/gguf.h"
#include "runtime/tokenizer.h"

#define KEY_MODEL	"tokenizer.ggml.model"
#define KEY_TOKENS	"tokenizer.ggml.tokens"
#define KEY_SCORES	"tokenizer.ggml.scores"
#define KEY_TYPES	"tokenizer.ggml.token_type"
#define KEY_MERGES	"tokenizer.ggml.merges"
#define KEY_BOS		"tokenizer.ggml.bos_token_id"
#define KEY_EOS		"tokenizer.ggml.eos_token_id"
#define KEY_UNK		"tokenizer.ggml.unknown_token_id"
#define KEY_ADD_BOS	"tokenizer.ggml.add_bos_token"
#define KEY_SPACE	"tokenizer.ggml.add_space_prefix"
#define KEY_PRE		"tokenizer.ggml.pre"

#define SPACE_MARK	"\xe2\x96\x81"	/* U+2581, SentencePiece's visible space */
#define N_GPT2_CP	324		/* bytes_to_unicode maps bytes into [0, 324) */
/* The longest text kvt_tokenize takes: a byte can become three tokens (a
 * space is U+2581, which may fall back to three byte tokens), plus the
 * prefix and BOS, and the count must fit the int returned. */
#define TEXT_MAX	((size_t)(INT_MAX - 8) / 3)

typedef unsigned long long ull;

enum { MODEL_LLAMA, MODEL_GPT2 };
/* How gpt2 text is split before the merges (tokenizer.ggml.pre). */
enum { PRE_GPT2, PRE_LLAMA3, PRE_QWEN2 };

/* llama_token_type */
enum {
	TT_UNDEFINED = 0, TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3,
	TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6,
};

struct merge {
	uint32_t left, right;		/* token ids of the pair */
	uint32_t rank;			/* index in tokenizer.ggml.merges: lower merges first */
	int32_t id;			/* the merged token; -1 marks a free slot */
};

struct kvt_tokenizer {
	int model;			/* MODEL_* */
	int pre;			/* PRE_*, gpt2 only */
	uint32_t n_vocab;
	char *text;			/* token texts back to back */
	size_t *text_off;		/* (n_vocab + 1) token i is text[off[i], off[i + 1]) */
	char *piece;			/* decoded pieces, laid out as text */
	size_t *piece_off;		/* (n_vocab + 1) */
	float *score;			/* (n_vocab) llama: higher merges first; 0 if absent */
	uint8_t *type;			/* (n_vocab) TT_* */
	size_t max_len;			/* longest token text: no merge makes a longer one */
	int32_t *slot;			/* (mask + 1) token ids by XXH3 of their text, -1 free */
	uint64_t mask;
	struct merge *merge;		/* (merge_mask + 1) gpt2, by hash of the id pair */
	uint64_t merge_mask;
	int32_t byte_tok[256];		/* llama: <0xXX>; gpt2: the byte's character; -1 none */
	int32_t bos, eos, unk;		/* -1: none */
	bool add_bos;			/* tokenizer.ggml.add_bos_token, the default of add_bos < 0 */
	bool space_prefix;		/* tokenizer.ggml.add_space_prefix (llama only) */
};

/* ---- helpers shared by load and tokenize ---- */

/* Bytes of the UTF-8 character at s (n > 0 bytes left): 1..4 for a well
 * formed one (no overlongs, surrogates or values past U+10FFFF), else 1:
 * a byte that starts no character stands alone. *cp is its code point, or
 * -1 for such a byte. */
static size_t utf8_char(const unsigned char *s, size_t n, int32_t *cp)
{
	uint32_t c = s[0], min;
	size_t len, i;

	if (c < 0x80) {
		*cp = (int32_t)c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2; c &= 0x1f; min = 0x80;
	} else if ((c & 0xf0) == 0xe0) {
		len = 3; c &= 0x0f; min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4; c &= 0x07; min = 0x10000;
	} else {
		goto bad;
	}
	if (len > n)
		goto bad;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			goto bad;
		c = c << 6 | (s[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		goto bad;
	*cp = (int32_t)c;
	return len;
bad:
	*cp = -1;
	return 1;
}

static size_t utf8_put(uint32_t cp, char *dst)
{
	if (cp < 0x80) {
		dst[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		dst[0] = (char)(0xc0 | cp >> 6);
		dst[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		dst[0] = (char)(0xe0 | cp >> 12);
		dst[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		dst[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	dst[0] = (char)(0xf0 | cp >> 18);
	dst[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	dst[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	dst[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/*
 * GPT-2's bytes_to_unicode: the printable bytes '!'..'~', 0xa1..0xac and
 * 0xae..0xff stand for themselves; the other 68 take the code points 256,
 * 257, ... in byte order. So every byte is one visible character and a
 * space is U+0120 'Ġ'.
 */
static void gpt2_byte_table(uint16_t cp[256], int16_t inv[N_GPT2_CP])
{
	unsigned b, next = 256;

	for (b = 0; b < N_GPT2_CP; b++)
		inv[b] = -1;
	for (b = 0; b < 256; b++) {
		bool self = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;

		cp[b] = (uint16_t)(self ? b : next++);
		inv[cp[b]] = (int16_t)b;
	}
}

/* The byte of a "<0xXX>" token (hex digits of either case), or -1. */
static int parse_byte(const char *s, size_t n)
{
	int v = 0, i, d;

	if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
		return -1;
	for (i = 3; i < 5; i++) {
		char c = s[i];

		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else
			return -1;
		v = v * 16 + d;
	}
	return v;
}

/* Token types whose text the merges may produce: SentencePiece never makes
 * a control, unknown, unused or byte token out of text. */
static bool mergeable(uint8_t type)
{
	return type == TT_NORMAL || type == TT_UNDEFINED || type == TT_USER;
}

static const char *tok_text(const struct kvt_tokenizer *t, int32_t id, size_t *len)
{
	*len = t->text_off[id + 1] - t->text_off[id];
	return t->text + t->text_off[id];
}

/* The lowest id whose text is s, or -1. */
static int32_t find(const struct kvt_tokenizer *t, const char *s, size_t n)
{
	uint64_t i = XXH3_64bits(s, n) & t->mask;
	int32_t id;

	while ((id = t->slot[i]) >= 0) {
		size_t len;
		const char *p = tok_text(t, id, &len);

		if (len == n && !memcmp(p, s, n))
			return id;
		i = (i + 1) & t->mask;
	}
	return -1;
}

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t pair_hash(uint32_t l, uint32_t r)
{
	return mix64((uint64_t)l << 32 | r);
}

static const struct merge *find_merge(const struct kvt_tokenizer *t, uint32_t l, uint32_t r)
{
	uint64_t i = pair_hash(l, r) & t->merge_mask;
	const struct merge *m;

	for (; (m = &t->merge[i])->id >= 0; i = (i + 1) & t->merge_mask)
		if (m->left == l && m->right == r)
			return m;
	return NULL;
}

/* Slots for n entries at a load factor of at most 1/2. */
static uint64_t table_size(uint64_t n)
{
	uint64_t s = 16;

	while (s < 2 * n)
		s *= 2;
	return s;
}

/* ---- load ---- */

struct ld {
	const struct kvt_gguf *g;
	struct kvt_tokenizer *t;
	char *err;
	size_t errlen;
};

/* One line "key: msg" into err; returns -EINVAL. */
static int fail(struct ld *l, const char *key, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	if (l->err && l->errlen) {
		va_start(ap, fmt);
		vsnprintf(msg, sizeof(msg), fmt, ap);
		va_end(ap);
		snprintf(l->err, l->errlen, "%s: %s", key, msg);
	}
	return -EINVAL;
}

/* s quoted for a message: at most 40 bytes, control bytes as '?'. */
static const char *quote(char *buf, size_t cap, const char *s, uint64_t n)
{
	size_t i, m = n > 40 ? 40 : (size_t)n, k = 0;

	buf[k++] = '"';
	for (i = 0; i < m && k + 6 < cap; i++) {
		unsigned char c = (unsigned char)s[i];

		buf[k++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
	}
	buf[k++] = '"';
	if (i < n && k + 4 < cap) {
		memcpy(buf + k, "...", 3);
		k += 3;
	}
	buf[k] = '\0';
	return buf;
}

static const char *vtype_name(uint32_t t)
{
	static const char *const names[] = {
		"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
		"string", "array", "u64", "i64", "f64",
	};
	return t < sizeof(names) / sizeof(names[0]) ? names[t] : "unknown";
}

/* "a u32", "an array of i32": what kv holds, for a message. */
static const char *kv_desc(const struct kvt_gguf_kv *kv, char *buf, size_t cap)
{
	if (kv->type == KVT_GGUF_ARRAY)
		snprintf(buf, cap, "an array of %s", vtype_name(kv->arr_type));
	else
		snprintf(buf, cap, "a%s %s", strchr("if", vtype_name(kv->type)[0]) ? "n" : "",
			 vtype_name(kv->type));
	return buf;
}

/* *kv = the array at key with elements of type at; NULL when absent and
 * not required. */
static int get_arr(struct ld *l, const char *key, uint32_t at, bool required,
		   const struct kvt_gguf_kv **kv)
{
	const struct kvt_gguf_kv *k = kvt_gguf_find_kv(l->g, key);
	char d[48];

	*kv = NULL;
	if (!k)
		return required ? fail(l, key, "missing") : 0;
	if (k->type != KVT_GGUF_ARRAY || k->arr_type != at)
		return fail(l, key, "is %s, expected an array of %s", kv_desc(k, d, sizeof(d)),
			    at == KVT_GGUF_STRING ? "strings" : vtype_name(at));
	if (at != KVT_GGUF_STRING && k->n != l->t->n_vocab)
		return fail(l, key, "has %llu entries for %u tokens", (ull)k->n, l->t->n_vocab);
	*kv = k;
	return 0;
}

/* A token id at key: *id untouched when absent. */
static int get_id(struct ld *l, const char *key, int32_t *id)
{
	const struct kvt_gguf_kv *k = kvt_gguf_find_kv(l->g, key);
	uint32_t v;
	char d[48];

	if (!k)
		return 0;
	if (k->type != KVT_GGUF_U32)
		return fail(l, key, "is %s, expected a u32", kv_desc(k, d, sizeof(d)));
	memcpy(&v, k->data, 4);
	if (v >= l->t->n_vocab)
		return fail(l, key, "%u is out of range (%u tokens)", v, l->t->n_vocab);
	*id = (int32_t)v;
	return 0;
}

/* A bool at key: *v untouched when absent. */
static int get_bool(struct ld *l, const char *key, bool *v)
{
	const struct kvt_gguf_kv *k = kvt_gguf_find_kv(l->g, key);
	char d[48];

	if (!k)
		return 0;
	if (k->type != KVT_GGUF_BOOL)
		return fail(l, key, "is %s, expected a bool", kv_desc(k, d, sizeof(d)));
	*v = *(const uint8_t *)k->data != 0;
	return 0;
}

/* gpt2's pre-tokenizer, by the names llama.cpp's converter writes:
 * absent, "default", "gpt2" or "gpt-2": GPT-2's pattern (llama.cpp's
 * "default" splits digits and punctuation apart further); "llama-bpe",
 * "llama3" or "llama-v3": Llama 3's; "qwen2": Qwen2's (Llama 3's with
 * digits one at a time). Others are refused: their splits
 * differ, and a model fed other ids than it was trained on still runs,
 * badly, with nothing to say so. */
static int load_pre(struct ld *l)
{
	static const struct { const char *name; int pre; } known[] = {
		{ "default", PRE_GPT2 }, { "gpt2", PRE_GPT2 }, { "gpt-2", PRE_GPT2 },
		{ "llama-bpe", PRE_LLAMA3 }, { "llama3", PRE_LLAMA3 }, { "llama-v3", PRE_LLAMA3 },
		{ "qwen2", PRE_QWEN2 },
	};
	const struct kvt_gguf_kv *k = kvt_gguf_find_kv(l->g, KEY_PRE);
	char d[64];

	l->t->pre = PRE_GPT2;
	if (!k)
		return 0;
	if (k->type != KVT_GGUF_STRING)
		return fail(l, KEY_PRE, "is %s, expected a string", kv_desc(k, d, sizeof(d)));
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (k->strs[0].len == strlen(known[i].name) &&
		    !memcmp(k->strs[0].ptr, known[i].name, k->strs[0].len)) {
			l->t->pre = known[i].pre;
			return 0;
		}
	return fail(l, KEY_PRE, "pre-tokenizer %s is not supported (gpt2, llama-bpe and qwen2 are)",
		    quote(d, sizeof(d), k->strs[0].ptr, k->strs[0].len));
}

static int load_model(struct ld *l)
{
	const struct kvt_gguf_kv *k = kvt_gguf_find_kv(l->g, KEY_MODEL);
	char d[64];

	if (!k)
		return fail(l, KEY_MODEL, "missing");
	if (k->type != KVT_GGUF_STRING)
		return fail(l, KEY_MODEL, "is %s, expected a string", kv_desc(k, d, sizeof(d)));
	if (k->strs[0].len == 5 && !memcmp(k->strs[0].ptr, "llama", 5))
		l->t->model = MODEL_LLAMA;
	else if (k->strs[0].len == 4 && !memcmp(k->strs[0].ptr, "gpt2", 4))
		l->t->model = MODEL_GPT2;
	else
		return fail(l, KEY_MODEL, "unknown model %s (llama and gpt2 are read)",
			    quote(d, sizeof(d), k->strs[0].ptr, k->strs[0].len));
	return l->t->model == MODEL_GPT2 ? load_pre(l) : 0;
}

/* Tokens, scores and types into the pools; the text hash table. */
static int load_tokens(struct ld *l)
{
	struct kvt_tokenizer *t = l->t;
	const struct kvt_gguf_kv *kv, *sk, *tk;
	size_t total = 0;
	uint64_t i, n, j;
	char q[64];
	int ret;

	ret = get_arr(l, KEY_TOKENS, KVT_GGUF_STRING, true, &kv);
	if (ret)
		return ret;
	n = kv->n;
	if (!n)
		return fail(l, KEY_TOKENS, "is empty");
	if (n > INT32_MAX)
		return fail(l, KEY_TOKENS, "has %llu entries (at most %d)", (ull)n, INT32_MAX);
	t->n_vocab = (uint32_t)n;
	/* The strings lie apart in the file, so their sum cannot overflow. */
	for (i = 0; i < n; i++) {
		if (kv->strs[i].len > INT_MAX)
			return fail(l, KEY_TOKENS, "token %llu is %llu bytes long (at most %d)",
				    (ull)i, (ull)kv->strs[i].len, INT_MAX);
		total += kv->strs[i].len;
	}
	t->text = malloc(total ? total : 1);
	t->piece = malloc(total ? total : 1);
	t->text_off = malloc((n + 1) * sizeof(*t->text_off));
	t->piece_off = malloc((n + 1) * sizeof(*t->piece_off));
	t->score = calloc(n, sizeof(*t->score));
	t->type = malloc(n);
	if (!t->text || !t->piece || !t->text_off || !t->piece_off || !t->score || !t->type)
		return -ENOMEM;
	t->text_off[0] = 0;
	for (i = 0; i < n; i++) {
		size_t len = kv->strs[i].len;

		if (len)
			memcpy(t->text + t->text_off[i], kv->strs[i].ptr, len);
		t->text_off[i + 1] = t->text_off[i] + len;
		if (len > t->max_len)
			t->max_len = len;
	}

	ret = get_arr(l, KEY_SCORES, KVT_GGUF_F32, t->model == MODEL_LLAMA, &sk);
	if (ret)
		return ret;
	if (sk) {
		kvt_gguf_get_f32_arr(l->g, KEY_SCORES, t->score, n, &j);
		for (i = 0; i < n; i++)
			if (isnan(t->score[i]))
				return fail(l, KEY_SCORES, "score of token %llu is NaN", (ull)i);
	}

	ret = get_arr(l, KEY_TYPES, KVT_GGUF_I32, false, &tk);
	if (ret)
		return ret;
	for (i = 0; i < n; i++) {
		size_t len;
		const char *s = tok_text(t, (int32_t)i, &len);
		int32_t ty;

		if (!tk) {
			/* No types: llama's <0xXX> tokens are its bytes, the rest is text. */
			t->type[i] = t->model == MODEL_LLAMA && parse_byte(s, len) >= 0 ?
				     TT_BYTE : TT_NORMAL;
			continue;
		}
		memcpy(&ty, (const char *)tk->data + 4 * i, 4);
		if (ty < TT_UNDEFINED || ty > TT_BYTE)
			return fail(l, KEY_TYPES, "token %llu has type %d (0..6 are defined)",
				    (ull)i, ty);
		if (ty == TT_BYTE && parse_byte(s, len) < 0)
			return fail(l, KEY_TYPES, "token %llu %s has type 6 (byte) but is not <0xXX>",
				    (ull)i, quote(q, sizeof(q), s, len));
		t->type[i] = (uint8_t)ty;
	}

	/* Text to id; of two tokens with one text the lower id wins. */
	t->mask = table_size(n) - 1;
	t->slot = malloc((t->mask + 1) * sizeof(*t->slot));
	if (!t->slot)
		return -ENOMEM;
	memset(t->slot, 0xff, (t->mask + 1) * sizeof(*t->slot));
	for (i = 0; i < n; i++) {
		size_t len;
		const char *s = tok_text(t, (int32_t)i, &len);
		uint64_t h;

		if (find(t, s, len) >= 0)
			continue;
		for (h = XXH3_64bits(s, len) & t->mask; t->slot[h] >= 0; h = (h + 1) & t->mask)
			;
		t->slot[h] = (int32_t)i;
	}
	return 0;
}

/* gpt2: each merge "left right" (split at the first space after the first
 * byte, so a left piece may start with one) must name three tokens: left,
 * right and their concatenation. A pair listed twice keeps its first rank. */
static int load_merges(struct ld *l)
{
	struct kvt_tokenizer *t = l->t;
	const struct kvt_gguf_kv *kv;
	char *cat = NULL, q[64], q2[64];
	size_t max = 0;
	uint64_t i;
	int ret;

	ret = get_arr(l, KEY_MERGES, KVT_GGUF_STRING, true, &kv);
	if (ret)
		return ret;
	if (kv->n > INT32_MAX)
		return fail(l, KEY_MERGES, "has %llu entries (at most %d)", (ull)kv->n, INT32_MAX);
	for (i = 0; i < kv->n; i++)
		if (kv->strs[i].len > max)
			max = kv->strs[i].len;
	t->merge_mask = table_size(kv->n) - 1;
	t->merge = malloc((t->merge_mask + 1) * sizeof(*t->merge));
	cat = malloc(max ? max : 1);
	ret = -ENOMEM;
	if (!t->merge || !cat)
		goto out;
	for (i = 0; i <= t->merge_mask; i++)
		t->merge[i].id = -1;
	for (i = 0; i < kv->n; i++) {
		const char *s = kv->strs[i].ptr, *sp;
		size_t n = kv->strs[i].len, ln;
		int32_t a, b, c;
		uint64_t h;

		sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
		if (!sp || sp == s + n - 1) {
			ret = fail(l, KEY_MERGES, "merge %llu %s is not two pieces separated by a space",
				   (ull)i, quote(q, sizeof(q), s, n));
			goto out;
		}
		ln = (size_t)(sp - s);
		memcpy(cat, s, ln);
		memcpy(cat + ln, sp + 1, n - ln - 1);
		a = find(t, s, ln);
		b = find(t, sp + 1, n - ln - 1);
		c = find(t, cat, n - 1);
		if (a < 0 || b < 0 || c < 0) {
			const char *what = a < 0 ? s : b < 0 ? sp + 1 : cat;
			size_t wn = a < 0 ? ln : b < 0 ? n - ln - 1 : n - 1;

			ret = fail(l, KEY_MERGES, "merge %llu %s: %s is not a token", (ull)i,
				   quote(q, sizeof(q), s, n), quote(q2, sizeof(q2), what, wn));
			goto out;
		}
		if (find_merge(t, (uint32_t)a, (uint32_t)b))
			continue;
		for (h = pair_hash((uint32_t)a, (uint32_t)b) & t->merge_mask; t->merge[h].id >= 0;
		     h = (h + 1) & t->merge_mask)
			;
		t->merge[h] = (struct merge){ .left = (uint32_t)a, .right = (uint32_t)b,
					      .rank = (uint32_t)i, .id = c };
	}
	ret = 0;
out:
	free(cat);
	return ret;
}

/*
 * The bytes each token stands for. llama: U+2581 becomes a space. gpt2:
 * each character goes back through bytes_to_unicode; one outside the
 * table (not produced by the byte-level encoding) is kept as it is, and
 * user-defined tokens are taken literally. Both: a byte token is its
 * byte; control and unused tokens are empty; <unk> is its text.
 */
static void load_pieces(struct kvt_tokenizer *t)
{
	uint16_t cp[256];
	int16_t inv[N_GPT2_CP];
	uint32_t id;
	size_t k = 0;

	gpt2_byte_table(cp, inv);
	t->piece_off[0] = 0;
	for (id = 0; id < t->n_vocab; id++) {
		size_t n, i = 0;
		const char *s = tok_text(t, (int32_t)id, &n);
		char *d = t->piece;

		switch (t->type[id]) {
		case TT_CONTROL:
		case TT_UNUSED:
			break;
		case TT_BYTE:
			d[k++] = (char)parse_byte(s, n);
			break;
		default:
			if (t->model == MODEL_LLAMA) {
				while (i < n) {
					if (n - i >= 3 && !memcmp(s + i, SPACE_MARK, 3)) {
						d[k++] = ' ';
						i += 3;
					} else {
						d[k++] = s[i++];
					}
				}
			} else if (t->type[id] == TT_USER) {
				memcpy(d + k, s, n);
				k += n;
			} else {
				while (i < n) {
					int32_t c;
					size_t cl = utf8_char((const unsigned char *)s + i, n - i, &c);

					if (c >= 0 && c < N_GPT2_CP && inv[c] >= 0) {
						d[k++] = (char)inv[c];
					} else {
						memcpy(d + k, s + i, cl);
						k += cl;
					}
					i += cl;
				}
			}
		}
		t->piece_off[id + 1] = k;	/* never longer than the text */
	}
}

/* llama: <0xXX> byte tokens (the lowest id per byte); gpt2: the token of
 * each byte's character. */
static void load_bytes(struct kvt_tokenizer *t)
{
	uint16_t cp[256];
	int16_t inv[N_GPT2_CP];
	uint32_t id;
	int b;

	for (b = 0; b < 256; b++)
		t->byte_tok[b] = -1;
	if (t->model == MODEL_LLAMA) {
		for (id = 0; id < t->n_vocab; id++) {
			size_t n;
			const char *s = tok_text(t, (int32_t)id, &n);

			if (t->type[id] == TT_BYTE && t->byte_tok[b = parse_byte(s, n)] < 0)
				t->byte_tok[b] = (int32_t)id;
		}
		return;
	}
	gpt2_byte_table(cp, inv);
	for (b = 0; b < 256; b++) {
		char u[4];

		t->byte_tok[b] = find(t, u, utf8_put(cp[b], u));
	}
}

int kvt_tokenizer_load(const struct kvt_gguf *g, struct kvt_tokenizer **out,
		       char *err, size_t errlen)
{
	struct ld l = { .g = g, .err = err, .errlen = errlen };
	struct kvt_tokenizer *t;
	int ret;

	*out = NULL;
	if (err && errlen)
		err[0] = '\0';
	t = l.t = calloc(1, sizeof(*t));
	ret = -ENOMEM;
	if (!t)
		goto fail;
	t->bos = t->eos = t->unk = -1;
	t->space_prefix = true;
	ret = load_model(&l);
	if (ret)
		goto fail;
	/* As llama.cpp: BOS by default for llama, and for gpt2 split the
	 * Llama 3 way; the key, when present, decides. */
	t->add_bos = t->model == MODEL_LLAMA || t->pre == PRE_LLAMA3;
	if ((ret = load_tokens(&l)) ||
	    (ret = get_id(&l, KEY_BOS, &t->bos)) ||
	    (ret = get_id(&l, KEY_EOS, &t->eos)) ||
	    (ret = get_id(&l, KEY_UNK, &t->unk)) ||
	    (ret = get_bool(&l, KEY_ADD_BOS, &t->add_bos)) ||
	    (ret = get_bool(&l, KEY_SPACE, &t->space_prefix)))
		goto fail;
	if (t->model == MODEL_GPT2) {
		ret = load_merges(&l);
		if (ret)
			goto fail;
	}
	load_bytes(t);
	load_pieces(t);
	*out = t;
	return 0;
fail:
	if (ret == -ENOMEM && err && errlen)
		snprintf(err, errlen, "tokenizer: out of memory");
	kvt_tokenizer_free(t);
	return ret;
}

void kvt_tokenizer_free(struct kvt_tokenizer *t)
{
	if (!t)
		return;
	free(t->text);
	free(t->text_off);
	free(t->piece);
	free(t->piece_off);
	free(t->score);
	free(t->type);
	free(t->slot);
	free(t->merge);
	free(t);
}

/* ---- tokenize ---- */

struct sym {
	int32_t prev, next;		/* neighbours in the list, -1 at the ends */
	uint32_t start, len;		/* bytes of the text merged; len 0 once folded away */
	int32_t id;			/* token; -1 not yet known (llama) or none (gpt2) */
};

struct bigram {
	double prio;			/* higher merges first */
	int32_t left;			/* symbol index of the left side */
	uint32_t len;			/* bytes of both sides when queued */
	int32_t id;			/* the merged token */
};

struct work {
	const struct kvt_tokenizer *t;
	const char *s;			/* the text the symbols index */
	struct sym *sym;		/* (n_sym) */
	struct bigram *heap;		/* (n_heap) binary heap, capacity cap_heap */
	size_t n_heap, cap_heap;
	int32_t *out;			/* (cap) ids; n counts all of them, written or not */
	size_t cap, n;
};

static bool before(const struct bigram *a, const struct bigram *b)
{
	return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

static int heap_push(struct work *w, const struct bigram *b)
{
	size_t i;

	if (w->n_heap == w->cap_heap) {
		size_t cap = w->cap_heap ? w->cap_heap * 2 : 64;
		struct bigram *h = realloc(w->heap, cap * sizeof(*h));

		if (!h)
			return -ENOMEM;
		w->heap = h;
		w->cap_heap = cap;
	}
	for (i = w->n_heap++; i; i = (i - 1) / 2) {
		if (!before(b, &w->heap[(i - 1) / 2]))
			break;
		w->heap[i] = w->heap[(i - 1) / 2];
	}
	w->heap[i] = *b;
	return 0;
}

static struct bigram heap_pop(struct work *w)
{
	struct bigram top = w->heap[0], last = w->heap[--w->n_heap];
	size_t i = 0, c, n = w->n_heap;

	while ((c = 2 * i + 1) < n) {
		if (c + 1 < n && before(&w->heap[c + 1], &w->heap[c]))
			c++;
		if (!before(&w->heap[c], &last))
			break;
		w->heap[i] = w->heap[c];
		i = c;
	}
	if (n)
		w->heap[i] = last;
	return top;
}

/* Queue the bigram of symbol li and its right neighbour, if a merge exists. */
static int try_bigram(struct work *w, int32_t li)
{
	const struct kvt_tokenizer *t = w->t;
	const struct sym *a, *b;
	struct bigram bg;

	if (li < 0 || w->sym[li].next < 0)
		return 0;
	a = &w->sym[li];
	b = &w->sym[a->next];
	bg.left = li;
	bg.len = a->len + b->len;
	if (t->model == MODEL_LLAMA) {
		if (bg.len > t->max_len)
			return 0;
		bg.id = find(t, w->s + a->start, bg.len);
		if (bg.id < 0 || !mergeable(t->type[bg.id]))
			return 0;
		bg.prio = t->score[bg.id];
	} else {
		const struct merge *m;

		if (a->id < 0 || b->id < 0)
			return 0;
		m = find_merge(t, (uint32_t)a->id, (uint32_t)b->id);
		if (!m)
			return 0;
		bg.id = m->id;
		bg.prio = -(double)m->rank;
	}
	return heap_push(w, &bg);
}

/* Merge the n symbols w->sym[0..n) (a list in index order) until no
 * queued bigram is left. */
static int merge_all(struct work *w, int32_t n)
{
	int32_t i;
	int ret;

	w->n_heap = 0;
	for (i = 0; i + 1 < n; i++) {
		ret = try_bigram(w, i);
		if (ret)
			return ret;
	}
	while (w->n_heap) {
		struct bigram bg = heap_pop(w);
		struct sym *a = &w->sym[bg.left], *b;

		if (!a->len || a->next < 0)
			continue;
		b = &w->sym[a->next];
		if (a->len + b->len != bg.len)
			continue;
		a->len = bg.len;
		a->id = bg.id;
		b->len = 0;
		a->next = b->next;
		if (a->next >= 0)
			w->sym[a->next].prev = bg.left;
		ret = try_bigram(w, a->prev);
		if (!ret)
			ret = try_bigram(w, bg.left);
		if (ret)
			return ret;
	}
	return 0;
}

static void emit(struct work *w, int32_t id)
{
	if (w->n < w->cap)
		w->out[w->n] = id;
	w->n++;
}

/* Emit the symbols left in the list from 0. A llama symbol that merged
 * with nothing is one character: its token if it has one, else its bytes
 * as byte tokens; failing those (either model), one <unk>. */
static int emit_all(struct work *w)
{
	const struct kvt_tokenizer *t = w->t;
	int32_t i;
	uint32_t j;

	for (i = 0; i >= 0; i = w->sym[i].next) {
		const struct sym *y = &w->sym[i];
		const unsigned char *p = (const unsigned char *)w->s + y->start;
		int32_t id = y->id;

		if (id < 0 && t->model == MODEL_LLAMA) {
			id = find(t, (const char *)p, y->len);
			if (id >= 0 && !mergeable(t->type[id]))
				id = -1;
		}
		if (id >= 0) {
			emit(w, id);
			continue;
		}
		for (j = 0; j < y->len && t->byte_tok[p[j]] >= 0; j++)
			;
		if (t->model == MODEL_LLAMA && j == y->len) {
			for (j = 0; j < y->len; j++)
				emit(w, t->byte_tok[p[j]]);
		} else if (t->unk >= 0) {
			emit(w, t->unk);
		} else {
			return -EILSEQ;
		}
	}
	return 0;
}

static int tok_llama(struct work *w, const char *text, size_t len)
{
	const struct kvt_tokenizer *t = w->t;
	size_t n = 0, i, cl;
	int32_t nsym = 0, cp;
	char *s;
	int ret;

	/* Spaces as U+2581, and one in front: the text grows by at most 2
	 * bytes per byte plus 3, but gains only the prefix in characters. */
	s = malloc(3 * len + 3);
	w->sym = malloc((len + 1) * sizeof(*w->sym));
	if (!s || !w->sym) {
		free(s);
		return -ENOMEM;
	}
	if (t->space_prefix) {
		memcpy(s, SPACE_MARK, 3);
		n = 3;
	}
	for (i = 0; i < len; i++) {
		if (text[i] == ' ') {
			memcpy(s + n, SPACE_MARK, 3);
			n += 3;
		} else {
			s[n++] = text[i];
		}
	}
	for (i = 0; i < n; i += cl) {
		cl = utf8_char((const unsigned char *)s + i, n - i, &cp);
		w->sym[nsym] = (struct sym){ .prev = nsym - 1, .next = nsym + 1,
					     .start = (uint32_t)i, .len = (uint32_t)cl, .id = -1 };
		nsym++;
	}
	w->sym[nsym - 1].next = -1;
	w->s = s;
	ret = merge_all(w, nsym);
	if (!ret)
		ret = emit_all(w);
	free(s);
	return ret;
}

enum { C_LETTER, C_DIGIT, C_SPACE, C_OTHER };

/* gpt2 text as code points, for the pre-tokenizers: each one's value (-1
 * for a byte that starts no UTF-8 character), its class in the patterns'
 * terms, and where it starts in the text (off[n] is the text's length). */
struct cpts {
	int32_t *cp;
	uint8_t *cls;
	size_t *off;
	size_t n;
};

/* The classes of the patterns: \p{L} is Unicode's letters (Lu, Ll, Lt,
 * Lm, Lo), \p{N} its numbers (Nd, Nl, No), \s its White_Space property
 * (the separators Zs, Zl, Zp, and U+0009..U+000D and U+0085), as
 * utf8proc's tables of the Unicode data have them; the rest, invalid
 * bytes included, are other. */
static int cclass(int32_t cp)
{
	if (cp < 0)
		return C_OTHER;
	if (cp < 0x80) {		/* the common case, without a table lookup */
		if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z')
			return C_LETTER;
		if (cp >= '0' && cp <= '9')
			return C_DIGIT;
		return cp == ' ' || (cp >= '\t' && cp <= '\r') ? C_SPACE : C_OTHER;
	}
	if (cp == 0x85)
		return C_SPACE;
	switch (utf8proc_category(cp)) {
	case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
	case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
		return C_LETTER;
	case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
		return C_DIGIT;
	case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
		return C_SPACE;
	default:
		return C_OTHER;
	}
}

static int cpts_split(struct cpts *c, const unsigned char *s, size_t len)
{
	size_t i, k;

	c->cp = malloc(len * sizeof(*c->cp));
	c->cls = malloc(len);
	c->off = malloc((len + 1) * sizeof(*c->off));
	if (!c->cp || !c->cls || !c->off)
		return -ENOMEM;
	for (i = 0, k = 0; i < len; k++) {
		c->off[k] = i;
		i += utf8_char(s + i, len - i, &c->cp[k]);
		c->cls[k] = (uint8_t)cclass(c->cp[k]);
	}
	c->off[k] = len;
	c->n = k;
	return 0;
}

static bool is_nl(const struct cpts *c, size_t i)
{
	return c->cp[i] == '\r' || c->cp[i] == '\n';
}

/* ASCII letter l (lower case) at i, of either case when any_case. */
static bool is_ascii(const struct cpts *c, size_t i, char l, bool any_case)
{
	return i < c->n && (c->cp[i] == l || (any_case && c->cp[i] == (l & ~0x20)));
}

/* A contraction at i: 's 't 'm 'd 're 've 'll, of either case (Llama 3,
 * Qwen2) or lower case only (GPT-2). Returns its length, or 0. */
static size_t contraction(const struct cpts *c, size_t i, bool any_case)
{
	if (c->cp[i] != '\'' || i + 1 >= c->n)
		return 0;
	if (is_ascii(c, i + 1, 's', any_case) || is_ascii(c, i + 1, 't', any_case) ||
	    is_ascii(c, i + 1, 'm', any_case) || is_ascii(c, i + 1, 'd', any_case))
		return 2;
	if ((is_ascii(c, i + 1, 'r', any_case) && is_ascii(c, i + 2, 'e', any_case)) ||
	    (is_ascii(c, i + 1, 'v', any_case) && is_ascii(c, i + 2, 'e', any_case)) ||
	    (is_ascii(c, i + 1, 'l', any_case) && is_ascii(c, i + 2, 'l', any_case)))
		return 3;
	return 0;
}

/*
 * End of the piece starting at code point i, as GPT-2's pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * splits it: a contraction; else one optional ' ' and a run of letters,
 * digits or others; else a run of white space, less its last code point
 * when a non-space follows and the run is longer than one (that one then
 * leads the next piece).
 */
static size_t pretoken_end(const struct cpts *c, size_t i)
{
	size_t j = i, k = contraction(c, i, false), n = c->n;
	int cl;

	if (k)
		return i + k;
	if (c->cp[j] == ' ' && j + 1 < n && c->cls[j + 1] != C_SPACE)
		j++;
	cl = c->cls[j];
	if (cl != C_SPACE) {
		while (j < n && c->cls[j] == cl)
			j++;
		return j;
	}
	while (j < n && c->cls[j] == C_SPACE)
		j++;
	if (j < n && j - i >= 2)
		j--;
	return j;
}

/*
 * End of the piece starting at code point i, as Llama 3's pattern
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * splits it (the first alternative that matches wins), or Qwen2's, the
 * same with \p{N} for \p{N}{1,3} (digits at most max_digits at a time):
 * a contraction of either case; one code point that is no letter, digit
 * or line break, then letters (or letters alone); the digits; an
 * optional ' ', others, then line breaks; white space up to its last line
 * break; white space, less its last code point when a non-space follows
 * (unless that leaves nothing).
 */
static size_t pretoken_end_llama3(const struct cpts *c, size_t i, size_t max_digits)
{
	size_t j = i, k, n = c->n, ct = contraction(c, i, true);
	int a = c->cls[i];

	if (ct)
		return i + ct;
	if (a == C_LETTER || (!is_nl(c, i) && a != C_DIGIT && i + 1 < n &&
			      c->cls[i + 1] == C_LETTER)) {
		for (j = i + 1; j < n && c->cls[j] == C_LETTER; j++)
			;
		return j;
	}
	if (a == C_DIGIT) {
		for (j = i + 1; j < n && j < i + max_digits && c->cls[j] == C_DIGIT; j++)
			;
		return j;
	}
	if (c->cp[j] == ' ' && j + 1 < n && c->cls[j + 1] == C_OTHER)
		j++;
	if (c->cls[j] == C_OTHER) {
		while (j < n && c->cls[j] == C_OTHER)
			j++;
		while (j < n && is_nl(c, j))
			j++;
		return j;
	}
	/* White space from i; the run's last line break, if it has one. */
	for (j = i, k = 0; j < n && c->cls[j] == C_SPACE; j++)
		if (is_nl(c, j))
			k = j + 1;
	if (k)
		return k;
	return j < n && j - i >= 2 ? j - 1 : j;
}

static int tok_gpt2(struct work *w, const char *text, size_t len)
{
	const struct kvt_tokenizer *t = w->t;
	const unsigned char *u = (const unsigned char *)text;
	struct cpts c = { 0 };
	size_t i, j, k;
	int ret;

	w->sym = malloc(len * sizeof(*w->sym));
	if (!w->sym || (ret = cpts_split(&c, u, len))) {
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i < c.n; i = j) {
		size_t b0, b1;
		int32_t nsym;

		j = t->pre == PRE_GPT2 ? pretoken_end(&c, i) :
		    pretoken_end_llama3(&c, i, t->pre == PRE_QWEN2 ? 1 : 3);
		b0 = c.off[i];
		b1 = c.off[j];
		nsym = (int32_t)(b1 - b0);
		for (k = 0; k < b1 - b0; k++)
			w->sym[k] = (struct sym){ .prev = (int32_t)k - 1, .next = (int32_t)k + 1,
						  .start = (uint32_t)k, .len = 1,
						  .id = t->byte_tok[u[b0 + k]] };
		w->sym[nsym - 1].next = -1;
		w->s = text + b0;
		ret = merge_all(w, nsym);
		if (!ret)
			ret = emit_all(w);
		if (ret)
			goto out;
	}
	ret = 0;
out:
	free(c.cp);
	free(c.cls);
	free(c.off);
	return ret;
}

int kvt_tokenize(const struct kvt_tokenizer *t, const char *text, size_t len,
		 int add_bos, int32_t *out, size_t cap)
{
	struct work w = { .t = t, .out = out, .cap = cap };
	int ret = 0;

	if (!t || (!text && len) || (!out && cap))
		return -EINVAL;
	if (len > TEXT_MAX)
		return -EOVERFLOW;
	if (add_bos < 0)
		add_bos = t->add_bos;
	if (add_bos && t->bos >= 0)
		emit(&w, t->bos);
	if (len)
		ret = t->model == MODEL_LLAMA ? tok_llama(&w, text, len) : tok_gpt2(&w, text, len);
	free(w.sym);
	free(w.heap);
	return ret ? ret : (int)w.n;
}

int kvt_token_piece(const struct kvt_tokenizer *t, int32_t id, char *buf, size_t cap)
{
	size_t n;

	if (!t || id < 0 || (uint32_t)id >= t->n_vocab || (!buf && cap))
		return -EINVAL;
	n = t->piece_off[id + 1] - t->piece_off[id];
	if (cap)
		memcpy(buf, t->piece + t->piece_off[id], n < cap ? n : cap);
	return (int)n;
}

uint32_t kvt_tokenizer_n_vocab(const struct kvt_tokenizer *t)
{
	return t->n_vocab;
}

int32_t kvt_tokenizer_bos(const struct kvt_tokenizer *t)
{
	return t->bos;
}

int32_t kvt_tokenizer_eos(const struct kvt_tokenizer *t)
{
	return t->eos;
}

const char *kvt_tokenizer_model(const struct kvt_tokenizer *t)
{
	return t->model == MODEL_LLAMA ? "llama" : "gpt2";
}
