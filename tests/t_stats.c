/* SPDX-License-Identifier: MIT */
/*
 * Statistics: kvt_stats_json is one valid JSON object (checked by a small
 * recursive-descent parser here) whose values agree with the struct; a
 * buffer one byte short gives -ENOSPC; notes with quotes, backslashes and
 * control characters are escaped and decode back unchanged. The counters
 * are consistent: fast hits + misses == pages looked up by acquires, each
 * lower tier is asked exactly for the misses above it, acquires == pages
 * handed out, NVMe bytes in/out match the pages written and read, the
 * latency histogram adds up to io_count.
 */
#include <errno.h>
#include <limits.h>
#include "common.h"

#define LAYERS	2u
#define NPG	24u
#define SEED	41u

/* ------------------------------------------------------------------
 * A JSON checker (RFC 8259): objects, arrays, strings with every escape
 * (surrogate pairs too), numbers, true/false/null. Strings decode to UTF-8.
 */
struct jp {
	const char *s;
	size_t i, n;
	int depth;
	const char *why;
};

static int j_fail(struct jp *j, const char *why)
{
	if (!j->why)
		j->why = why;
	return -1;
}

static void j_ws(struct jp *j)
{
	while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' ||
			       j->s[j->i] == '\n' || j->s[j->i] == '\r'))
		j->i++;
}

static int j_hex4(struct jp *j, unsigned *out)
{
	unsigned v = 0;
	for (int k = 0; k < 4; k++, j->i++) {
		if (j->i >= j->n)
			return j_fail(j, "short \\u escape");
		char c = j->s[j->i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return j_fail(j, "bad hex digit in \\u escape");
	}
	*out = v;
	return 0;
}

static void put_utf8(char *out, size_t cap, size_t *len, unsigned cp)
{
	char b[4];
	size_t n;
	if (cp < 0x80) {
		b[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = (char)(0xc0 | cp >> 6);
		b[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		b[0] = (char)(0xe0 | cp >> 12);
		b[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		b[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		b[0] = (char)(0xf0 | cp >> 18);
		b[1] = (char)(0x80 | (cp >> 12 & 0x3f));
		b[2] = (char)(0x80 | (cp >> 6 & 0x3f));
		b[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	for (size_t k = 0; k < n; k++, (*len)++)
		if (out && *len + 1 < cap)
			out[*len] = b[k];
}

/* A string at j->i; decoded into out (NUL-terminated, truncated) if out. */
static int j_string(struct jp *j, char *out, size_t cap)
{
	size_t len = 0;

	if (j->i >= j->n || j->s[j->i] != '"')
		return j_fail(j, "expected a string");
	j->i++;
	for (;;) {
		if (j->i >= j->n)
			return j_fail(j, "unterminated string");
		unsigned char c = (unsigned char)j->s[j->i++];
		unsigned cp;
		if (c == '"')
			break;
		if (c < 0x20)
			return j_fail(j, "raw control character in a string");
		if (c != '\\') {
			if (out && len + 1 < cap)
				out[len] = (char)c;
			len++;
			continue;
		}
		if (j->i >= j->n)
			return j_fail(j, "unterminated escape");
		switch (j->s[j->i++]) {
		case '"': cp = '"'; break;
		case '\\': cp = '\\'; break;
		case '/': cp = '/'; break;
		case 'b': cp = '\b'; break;
		case 'f': cp = '\f'; break;
		case 'n': cp = '\n'; break;
		case 'r': cp = '\r'; break;
		case 't': cp = '\t'; break;
		case 'u':
			if (j_hex4(j, &cp))
				return -1;
			if (cp >= 0xdc00 && cp <= 0xdfff)
				return j_fail(j, "lone low surrogate");
			if (cp >= 0xd800 && cp <= 0xdbff) {
				unsigned lo;
				if (j->i + 2 > j->n || j->s[j->i] != '\\' || j->s[j->i + 1] != 'u')
					return j_fail(j, "lone high surrogate");
				j->i += 2;
				if (j_hex4(j, &lo))
					return -1;
				if (lo < 0xdc00 || lo > 0xdfff)
					return j_fail(j, "bad low surrogate");
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			}
			break;
		default:
			return j_fail(j, "unknown escape");
		}
		put_utf8(out, cap, &len, cp);
	}
	if (out && cap)
		out[len < cap ? len : cap - 1] = 0;
	return 0;
}

static int j_digits(struct jp *j)
{
	size_t i0 = j->i;
	while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9')
		j->i++;
	return j->i > i0 ? 0 : j_fail(j, "expected a digit");
}

static int j_number(struct jp *j)
{
	if (j->i < j->n && j->s[j->i] == '-')
		j->i++;
	if (j->i < j->n && j->s[j->i] == '0')
		j->i++;		/* no leading zeros */
	else if (j_digits(j))
		return -1;
	if (j->i < j->n && j->s[j->i] == '.') {
		j->i++;
		if (j_digits(j))
			return -1;
	}
	if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
		j->i++;
		if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-'))
			j->i++;
		if (j_digits(j))
			return -1;
	}
	return 0;
}

static int j_lit(struct jp *j, const char *w)
{
	size_t l = strlen(w);
	if (j->n - j->i < l || memcmp(j->s + j->i, w, l))
		return j_fail(j, "bad literal");
	j->i += l;
	return 0;
}

static int j_value(struct jp *j);

static int j_object(struct jp *j)
{
	j->i++;		/* '{' */
	j_ws(j);
	if (j->i < j->n && j->s[j->i] == '}') {
		j->i++;
		return 0;
	}
	for (;;) {
		j_ws(j);
		if (j_string(j, NULL, 0))
			return -1;
		j_ws(j);
		if (j->i >= j->n || j->s[j->i] != ':')
			return j_fail(j, "expected ':'");
		j->i++;
		if (j_value(j))
			return -1;
		j_ws(j);
		if (j->i >= j->n)
			return j_fail(j, "unterminated object");
		if (j->s[j->i] == '}') {
			j->i++;
			return 0;
		}
		if (j->s[j->i] != ',')
			return j_fail(j, "expected ',' or '}'");
		j->i++;
	}
}

static int j_array(struct jp *j)
{
	j->i++;		/* '[' */
	j_ws(j);
	if (j->i < j->n && j->s[j->i] == ']') {
		j->i++;
		return 0;
	}
	for (;;) {
		if (j_value(j))
			return -1;
		j_ws(j);
		if (j->i >= j->n)
			return j_fail(j, "unterminated array");
		if (j->s[j->i] == ']') {
			j->i++;
			return 0;
		}
		if (j->s[j->i] != ',')
			return j_fail(j, "expected ',' or ']'");
		j->i++;
	}
}

static int j_value(struct jp *j)
{
	int r;

	j_ws(j);
	if (j->i >= j->n)
		return j_fail(j, "expected a value");
	if (++j->depth > 64)
		return j_fail(j, "nested too deep");
	switch (j->s[j->i]) {
	case '{': r = j_object(j); break;
	case '[': r = j_array(j); break;
	case '"': r = j_string(j, NULL, 0); break;
	case 't': r = j_lit(j, "true"); break;
	case 'f': r = j_lit(j, "false"); break;
	case 'n': r = j_lit(j, "null"); break;
	default:
		r = (j->s[j->i] == '-' || (j->s[j->i] >= '0' && j->s[j->i] <= '9'))
			? j_number(j) : j_fail(j, "unexpected character");
	}
	j->depth--;
	return r;
}

/* 0 when s[0, n) is exactly one JSON value whose top level is an object. */
static int json_valid(const char *s, size_t n, const char **why, size_t *at)
{
	struct jp j = { s, 0, n, 0, NULL };
	j_ws(&j);
	if (j.i >= n || s[j.i] != '{') {
		*why = "top level is not an object";
		*at = j.i;
		return -1;
	}
	int r = j_value(&j);
	if (!r) {
		j_ws(&j);
		if (j.i != n)
			r = j_fail(&j, "trailing characters");
	}
	*why = j.why;
	*at = j.i;
	return r;
}

/* The value at a dotted path of object keys ("tiers.nvme.bytes_in"):
 * its offset, or -1. The document must be valid. */
static long json_find(const char *s, size_t n, const char *path)
{
	struct jp j = { s, 0, n, 0, NULL };
	char key[128], want[128];

	while (*path) {
		const char *dot = strchr(path, '.');
		size_t kl = dot ? (size_t)(dot - path) : strlen(path);
		if (kl >= sizeof(want))
			return -1;
		memcpy(want, path, kl);
		want[kl] = 0;
		path += kl + (dot != NULL);
		j_ws(&j);
		if (j.i >= n || s[j.i] != '{')
			return -1;
		j.i++;
		for (;;) {
			j_ws(&j);
			if (j.i >= n || s[j.i] == '}')
				return -1;
			if (j_string(&j, key, sizeof(key)))
				return -1;
			j_ws(&j);
			j.i++;	/* ':' */
			j_ws(&j);
			if (!strcmp(key, want))
				break;
			if (j_value(&j))
				return -1;
			j_ws(&j);
			if (j.i < n && s[j.i] == ',')
				j.i++;
		}
	}
	return (long)j.i;
}

static unsigned long long json_u64(const char *s, size_t n, const char *path)
{
	long at = json_find(s, n, path);
	if (at < 0) {
		fprintf(stderr, "json: no %s\n", path);
		exit(1);
	}
	char *end;
	unsigned long long v = strtoull(s + at, &end, 10);
	CHECK(end > s + at);
	return v;
}

static void json_str(const char *s, size_t n, const char *path, char *out, size_t cap)
{
	long at = json_find(s, n, path);
	if (at < 0) {
		fprintf(stderr, "json: no %s\n", path);
		exit(1);
	}
	struct jp j = { s, (size_t)at, n, 0, NULL };
	CHECK(j_string(&j, out, cap) == 0);
}

/* The parser itself rejects what it must. */
static void self_test(void)
{
	static const char *const good[] = {
		"{}", " {\"a\":[1,-2.5e+3,0,true,false,null,\"x\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\"]} ",
		"{\"a\":{\"b\":{}},\"c\":[[],[{}]]}",
	};
	static const char *const bad[] = {
		"", "[]", "{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{\"a\":01}", "{\"a\":1.}",
		"{\"a\":\"\\x\"}", "{\"a\":\"\x01\"}", "{\"a\":\"\\ud800\"}", "{\"a\":tru}",
		"{\"a\":1}x", "{\"a\":[1,]}", "{a:1}", "{\"a\":-}", "{\"a\":\"\\u12g4\"}",
	};
	const char *why;
	size_t at;
	for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++)
		if (json_valid(good[i], strlen(good[i]), &why, &at)) {
			fprintf(stderr, "self test: rejected %s: %s at %zu\n", good[i], why, at);
			exit(1);
		}
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		if (!json_valid(bad[i], strlen(bad[i]), &why, &at)) {
			fprintf(stderr, "self test: accepted %s\n", bad[i]);
			exit(1);
		}
	char out[16];
	const char *e = "{\"k\":\"a\\u00e9\\ud83d\\ude00\"}";
	json_str(e, strlen(e), "k", out, sizeof(out));
	CHECK(!strcmp(out, "a\xc3\xa9\xf0\x9f\x98\x80"));
}

/* kvt_stats_json into a fitting buffer, validated. Returns its length. */
static int to_json(const struct kvt_stats *st, char *buf, size_t cap)
{
	const char *why;
	size_t at;
	int n = kvt_stats_json(st, buf, cap);
	if (n < 0) {
		fprintf(stderr, "kvt_stats_json: %s\n", strerror(-n));
		exit(1);
	}
	CHECK((size_t)n < cap);
	CHECK_EQ(strlen(buf), n);
	if (json_valid(buf, (size_t)n, &why, &at)) {
		fprintf(stderr, "invalid JSON (%s) at %zu: ...%.40s\n%s\n", why, at,
			buf + (at > 20 ? at - 20 : 0), buf);
		exit(1);
	}
	return n;
}

static void check_json(const struct kvt_stats *st)
{
	static char buf[1 << 16], small[1 << 16];
	int n = to_json(st, buf, sizeof(buf));
	size_t len = (size_t)n;

	/* Sizes: exactly enough (with the NUL) works, one byte less does not. */
	CHECK_EQ(kvt_stats_json(st, small, len + 1), n);
	CHECK(!memcmp(small, buf, len + 1));
	CHECK_EQ(kvt_stats_json(st, small, len), -ENOSPC);
	CHECK_EQ(kvt_stats_json(st, small, 16), -ENOSPC);
	CHECK_EQ(kvt_stats_json(st, small, 1), -ENOSPC);
	CHECK_EQ(kvt_stats_json(st, NULL, 0), -ENOSPC);
	CHECK_EQ(kvt_stats_json(st, NULL, sizeof(buf)), -ENOSPC);

	/* Plain text search, as a shell script would do it. */
	char pat[64];
	snprintf(pat, sizeof(pat), "\"step\":%llu", (unsigned long long)st->step);
	CHECK(strstr(buf, pat) != NULL);

	CHECK_EQ(json_u64(buf, len, "step"), st->step);
	CHECK_EQ(json_u64(buf, len, "seqs"), st->seqs);
	CHECK_EQ(json_u64(buf, len, "pages"), st->pages);
	CHECK_EQ(json_u64(buf, len, "acquires"), st->acquires);
	CHECK_EQ(json_u64(buf, len, "lost_pages"), st->lost_pages);
	CHECK_EQ(json_u64(buf, len, "prefetch.issued"), st->prefetch_issued);
	CHECK_EQ(json_u64(buf, len, "prefetch.hit"), st->prefetch_hit);
	CHECK_EQ(json_u64(buf, len, "nvme.paused"), (unsigned long long)st->nvme_paused);
	for (int t = 0; t < KVT_NTIERS; t++) {
		char path[64];
		const struct kvt_tier_stats *ts = &st->tier[t];
#define TF(f) do { snprintf(path, sizeof(path), "tiers.%s." #f, kvt_tier_name(t)); \
		CHECK_EQ(json_u64(buf, len, path), ts->f); } while (0)
		TF(capacity);
		TF(used);
		TF(frame_bytes);
		TF(hits);
		TF(misses);
		TF(bytes_in);
		TF(bytes_out);
		TF(io_count);
		TF(io_ns_max);
#undef TF
	}
	char notes[sizeof(st->nvme_notes) * 2];
	json_str(buf, len, "nvme.notes", notes, sizeof(notes));
	CHECK(!strcmp(notes, st->nvme_notes));
	json_str(buf, len, "host.notes", notes, sizeof(notes));
	CHECK(!strcmp(notes, st->host_notes));
}

int main(void)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_stats st;
	struct kvt_pager *p;
	kvt_seq_t s[2];
	uint64_t looked_up = 0, handed = 0;

	self_test();

	/* Tiers smaller than a layer: batches come up in rounds, pages are
	 * dropped and written down all the time. */
	t_config(&cfg, LAYERS, 8, 8, 4 * NPG);
	cfg.prefetch_depth = 1;
	p = t_open(&cfg, &dev);

	/* A fresh pager. */
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.step, 0);
	CHECK_EQ(st.seqs, 0);
	CHECK_EQ(st.pages, 0);
	CHECK_EQ(st.tier[KVT_TIER_FAST].capacity, 8);
	CHECK_EQ(st.tier[KVT_TIER_HOST].capacity, 8);
	CHECK_EQ(st.tier[KVT_TIER_NVME].capacity, 4 * NPG);
	for (int t = 0; t < KVT_NTIERS; t++)
		CHECK_EQ(st.tier[t].frame_bytes, kvt_pager_page_bytes(p));
	check_json(&st);

	/* Two sequences, one with a partial tail. */
	CHECK_EQ(kvt_seq_open(p, &s[0]), 0);
	CHECK_EQ(kvt_seq_open(p, &s[1]), 0);
	t_append(p, s[0], &cfg, SEED, 0, NPG * cfg.page_tokens);
	t_append(p, s[1], &cfg, SEED + 1, 0, NPG * cfg.page_tokens / 2 + 1);
	unsigned np1 = NPG / 2 + 1;
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.seqs, 2);
	CHECK_EQ(st.pages, LAYERS * (NPG + np1));

	for (int round = 0; round < 3; round++) {
		CHECK_EQ(kvt_pager_step(p), round + 1);
		for (int q = 0; q < 2; q++) {
			unsigned got = t_verify_seq(p, s[q], &cfg, SEED + q, 0);
			CHECK_EQ(got, LAYERS * (q ? np1 : NPG));
			looked_up += got;
			handed += got;
		}
		/* A subset, twice the same page in one batch. */
		uint32_t idx[3] = { 1, 5, 1 };
		struct kvt_batch *b;
		struct kvt_view v;
		int r;
		CHECK_EQ(kvt_acquire(p, s[0], 1, idx, 3, &b), 0);
		looked_up += 3;
		while ((r = kvt_batch_next(b, &v)) == 1) {
			CHECK(t_check_view(&cfg, SEED, 1, &v) == 0);
			handed++;
		}
		CHECK_EQ(r, 0);
		kvt_batch_release(b);
		/* A batch released before it is consumed hands out nothing. */
		CHECK_EQ(kvt_acquire(p, s[1], 0, NULL, 0, &b), 0);
		looked_up += np1;
		kvt_batch_release(b);
	}

	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	check_json(&st);
	const struct kvt_tier_stats *f = &st.tier[KVT_TIER_FAST], *h = &st.tier[KVT_TIER_HOST],
				    *nv = &st.tier[KVT_TIER_NVME];
	uint64_t pb = kvt_pager_page_bytes(p);
	fprintf(stderr, "looked up %llu handed %llu; fast %llu/%llu host %llu/%llu nvme %llu/%llu\n",
		(unsigned long long)looked_up, (unsigned long long)handed,
		(unsigned long long)f->hits, (unsigned long long)f->misses,
		(unsigned long long)h->hits, (unsigned long long)h->misses,
		(unsigned long long)nv->hits, (unsigned long long)nv->misses);
	CHECK_EQ(st.step, 3);
	CHECK_EQ(st.acquires, handed);
	CHECK_EQ(st.lost_pages, 0);
	/* Every lookup starts at the fast tier; a miss goes one tier down. */
	CHECK_EQ(f->hits + f->misses, looked_up);
	CHECK_EQ(h->hits + h->misses, f->misses);
	CHECK_EQ(nv->hits + nv->misses, h->misses);
	CHECK_EQ(nv->misses, 0);	/* nothing lost */
	CHECK(f->misses > 0 && nv->hits > 0);
	/* Bytes: NVMe takes in what the host tier wrote down (demotions that
	 * were not drops) and gives out what the host tier promoted. */
	CHECK(nv->bytes_in > 0 && nv->bytes_out > 0);
	CHECK_EQ(nv->bytes_in, nv->frame_bytes * (h->demotions - h->drops));
	CHECK_EQ(nv->bytes_out, nv->frame_bytes * h->promotions);
	CHECK_EQ(h->bytes_in, pb * (h->promotions + f->demotions - f->drops));
	CHECK_EQ(f->bytes_in, pb * f->promotions);
	CHECK_EQ(f->bytes_out, pb * (f->demotions - f->drops));
	CHECK_EQ(h->bytes_out, pb * (f->promotions + h->demotions - h->drops));
	CHECK_EQ(nv->promotions, 0);
	CHECK_EQ(nv->demotions, 0);
	/* Latencies: the histogram holds every transfer. */
	for (int t = 0; t < KVT_NTIERS; t++) {
		uint64_t sum = 0;
		for (int k = 0; k < KVT_LAT_BUCKETS; k++)
			sum += st.tier[t].lat_hist[k];
		CHECK_EQ(sum, st.tier[t].io_count);
		CHECK(st.tier[t].io_ns_max <= st.tier[t].io_ns_total);
	}
	CHECK(nv->io_count >= (h->demotions - h->drops) + h->promotions);
	CHECK(nv->io_ns_max > 0);

	/* Notes that need escaping survive the round trip. */
	struct kvt_stats odd = st;
	snprintf(odd.nvme_notes, sizeof(odd.nvme_notes), "quote \" backslash \\ nl \n tab \t bell \a del \x7f /x");
	snprintf(odd.host_notes, sizeof(odd.host_notes), "\x01\x1f end");
	odd.step = ULLONG_MAX;
	check_json(&odd);
	/* A notes field filled to the brim (no NUL inside the array) must not
	 * be read past; fill all but the last byte. */
	memset(odd.nvme_notes, '"', sizeof(odd.nvme_notes) - 1);
	odd.nvme_notes[sizeof(odd.nvme_notes) - 1] = 0;
	check_json(&odd);

	/* Closing: seqs and pages go to zero, the counters stay. */
	CHECK_EQ(kvt_seq_close(p, s[0]), 0);
	CHECK_EQ(kvt_seq_close(p, s[1]), 0);
	t_quiesce(p);	/* pages closed in flight are freed as they land */
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK_EQ(st.seqs, 0);
	CHECK_EQ(st.pages, 0);
	CHECK_EQ(st.acquires, handed);
	for (int t = 0; t < KVT_NTIERS; t++)
		CHECK_EQ(st.tier[t].used, 0);
	check_json(&st);
	t_close(p, dev);
	return 0;
}
