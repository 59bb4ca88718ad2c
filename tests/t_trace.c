/* SPDX-License-Identifier: MIT */
/*
 * Traces: a written trace reads back field for field; each kind of bad
 * file is refused with the byte offset of the fault in the message; a
 * live pager (three tiers, three sequences, a fork, a park and resume,
 * scores, closes) recorded from its open agrees with its statistics
 * exactly: hits and misses per tier from the ACCESS records, promotions,
 * demotions, drops and bytes from the moves, NEW and FREE with the pages
 * made and freed; libCacheSim oracleGeneral import and export round-trip
 * with next_access_vtime as traceConv writes it; a Mooncake JSONL file
 * imports to the expected records, and a malformed line is refused with
 * its line number.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common.h"
#include "pager/internal.h"
#include "pager/trace.h"

static char dir[512];

static void mkdir_tmp(void)
{
	const char *base = getenv("KVT_TEST_DIR");
	if (!base)
		base = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/kvt-trace.XXXXXX", base && *base ? base : "/tmp");
	CHECK(mkdtemp(dir) != NULL);
}

static void rm_tmp(void)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK_EQ(system(cmd), 0);
}

static void path_of(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", dir, name);
}

static void put_file(const char *path, const void *b, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, b, n), (long long)n);
	CHECK_EQ(close(fd), 0);
}

static uint8_t *get_file(const char *path, size_t *n)
{
	struct stat st;
	CHECK_EQ(stat(path, &st), 0);
	uint8_t *b = malloc((size_t)st.st_size + 1);
	int fd = open(path, O_RDONLY);
	CHECK(b && fd >= 0);
	CHECK_EQ(read(fd, b, (size_t)st.st_size), (long long)st.st_size);
	close(fd);
	*n = (size_t)st.st_size;
	return b;
}

static struct kvt_trace_rec mkrec(uint64_t i)
{
	return (struct kvt_trace_rec){
		.time = i * 1000 + 7, .step = i / 3, .key = (uint64_t)(i % 5) << 32 | (i * 7),
		.seq = (uint32_t)(i % 4), .layer = (uint32_t)(i % 3), .index = (uint32_t)i,
		.bytes = 4096, .score = (float)i / 8, .event = (uint8_t)(1 + i % KVT_EV_MAX),
		.from = (uint8_t)(i % 4 == 3 ? KVT_TRACE_NONE : i % 4),
		.to = (uint8_t)(i % 3), .flags = (uint8_t)(i & 7),
	};
}

/* ------------------------------------------------------------------ */

static void t_roundtrip(int arg)
{
	static const char cfg[] = "[geometry]\npage_tokens = 4\n";
	struct kvt_trace_hdr h = { .seed = 99, .page_tokens = 4, .n_layers = 2, .n_kv_heads = 2,
				   .head_dim = 64, .kv_bytes = 4, .page_bytes = 4096,
				   .frames = { 8, 16, 128 }, .source = KVT_SRC_SYNTH };
	struct kvt_trace_writer *w;
	struct kvt_trace t;
	char path[600], err[512];
	/* More than the writer's buffer, in pieces of several sizes. */
	const uint64_t n = 50000;

	(void)arg;
	mkdir_tmp();
	path_of(path, sizeof(path), "rt.kvtt");
	strcpy(h.policy[0], "lru");
	strcpy(h.policy[1], "s3fifo:small=10");
	strcpy(h.policy[2], "fifo");
	CHECK_EQ(kvt_trace_create(path, &h, cfg, strlen(cfg), &w), 0);
	struct kvt_trace_rec *v = malloc(n * sizeof(*v));
	CHECK(v);
	for (uint64_t i = 0; i < n; i++)
		v[i] = mkrec(i);
	for (uint64_t i = 0, k = 1; i < n; i += k, k = k * 3 % 30001 + 1)
		CHECK_EQ(kvt_trace_put(w, v + i, i + k > n ? n - i : k), 0);
	CHECK_EQ(kvt_trace_finish(w), 0);

	CHECK_EQ(kvt_trace_open(path, &t, err, sizeof(err)), 0);
	CHECK(!memcmp(t.hdr.magic, KVT_TRACE_MAGIC, 8));
	CHECK_EQ(t.hdr.version, KVT_TRACE_VERSION);
	CHECK_EQ(t.hdr.hdr_size, 256);
	CHECK_EQ(t.hdr.rec_size, 48);
	CHECK_EQ(t.hdr.config_len, strlen(cfg));
	CHECK_EQ(t.hdr.rec_off % 8, 0);
	CHECK(t.hdr.rec_off >= 256 + strlen(cfg));
	CHECK_EQ(t.hdr.seed, 99);
	CHECK_EQ(t.hdr.page_bytes, 4096);
	CHECK_EQ(t.hdr.frames[2], 128);
	CHECK_EQ(t.hdr.source, KVT_SRC_SYNTH);
	CHECK(!strcmp(t.hdr.policy[1], "s3fifo:small=10"));
	CHECK(!memcmp(t.config, cfg, strlen(cfg)));
	CHECK_EQ(t.nrec, n);
	CHECK(!memcmp(t.rec, v, n * sizeof(*v)));

	struct kvt_trace_summary s;
	CHECK_EQ(kvt_trace_summarize(&t, &s), 0);
	for (int e = 1; e <= KVT_EV_MAX; e++)
		CHECK(s.events[e] >= n / KVT_EV_MAX);
	kvt_trace_close(&t);

	/* A longer record (a later version's) is read for the known fields. */
	size_t fl;
	uint8_t *b = get_file(path, &fl);
	struct kvt_trace_hdr h2;
	memcpy(&h2, b, sizeof(h2));
	size_t big = 64, nb = 10;
	uint8_t *b2 = calloc(1, h2.rec_off + nb * big);
	CHECK(b2);
	memcpy(b2, b, h2.rec_off);
	((struct kvt_trace_hdr *)b2)->rec_size = (uint32_t)big;
	for (size_t i = 0; i < nb; i++)
		memcpy(b2 + h2.rec_off + i * big, &v[i], 48);
	path_of(path, sizeof(path), "big.kvtt");
	put_file(path, b2, h2.rec_off + nb * big);
	CHECK_EQ(kvt_trace_open(path, &t, err, sizeof(err)), 0);
	CHECK_EQ(t.nrec, nb);
	CHECK(!memcmp(t.rec, v, nb * sizeof(*v)));
	kvt_trace_close(&t);
	free(b2);
	free(b);
	free(v);
	rm_tmp();
}

/* ------------------------------------------------------------------ */

/* Expect path to be refused with "byte OFF:" in the message. */
static void refused(const char *path, uint64_t off, const char *what)
{
	struct kvt_trace t;
	char err[512] = "", want[64];

	int r = kvt_trace_open(path, &t, err, sizeof(err));
	snprintf(want, sizeof(want), "byte %llu:", (unsigned long long)off);
	if (r != -EINVAL || !strstr(err, want) || !strstr(err, path) || !strstr(err, what)) {
		fprintf(stderr, "%s: rc %d, message \"%s\"; wanted -EINVAL, \"%s\", \"%s\"\n",
			path, r, err, want, what);
		exit(1);
	}
}

static void t_bad(int arg)
{
	static const char cfg[] = "x = 1\n";
	struct kvt_trace_hdr h = { .source = KVT_SRC_PAGER };
	struct kvt_trace_writer *w;
	char path[600], bad[600];
	struct kvt_trace_rec r[3] = { mkrec(0), mkrec(1), mkrec(2) };
	size_t n;

	(void)arg;
	mkdir_tmp();
	for (int i = 0; i < 3; i++) {
		r[i].event = KVT_EV_ACCESS;
		r[i].from = 0;
		r[i].to = KVT_TRACE_NONE;
	}
	path_of(path, sizeof(path), "good.kvtt");
	path_of(bad, sizeof(bad), "bad.kvtt");
	CHECK_EQ(kvt_trace_create(path, &h, cfg, strlen(cfg), &w), 0);
	CHECK_EQ(kvt_trace_put(w, r, 3), 0);
	CHECK_EQ(kvt_trace_finish(w), 0);
	uint8_t *g = get_file(path, &n);
	uint8_t *b = malloc(n);
	uint64_t ro = ((struct kvt_trace_hdr *)g)->rec_off;
	CHECK(b && n == ro + 3 * 48);
	struct kvt_trace t;
	char err[256];
	CHECK_EQ(kvt_trace_open(path, &t, err, sizeof(err)), 0);
	CHECK_EQ(t.nrec, 3);
	kvt_trace_close(&t);

#define VARIANT(len, edit) do { memcpy(b, g, n); edit; put_file(bad, b, (len)); } while (0)
	VARIANT(n, b[3] ^= 1);
	refused(bad, 0, "magic");
	VARIANT(n, b[8] = 7);
	refused(bad, 8, "version 7");
	VARIANT(100, (void)0);
	refused(bad, 100, "truncated header");
	VARIANT(5, (void)0);
	refused(bad, 5, "truncated header");
	VARIANT(0, (void)0);
	refused(bad, 0, "truncated header");
	VARIANT(n, b[16] = 40);
	refused(bad, 16, "rec_size 40");
	VARIANT(n, ((struct kvt_trace_hdr *)b)->hdr_size = 200);
	refused(bad, 12, "hdr_size 200");
	VARIANT(n, ((struct kvt_trace_hdr *)b)->config_len = (uint32_t)n);
	refused(bad, 20, "config_len");
	VARIANT(n, ((struct kvt_trace_hdr *)b)->rec_off = 260);
	refused(bad, 24, "rec_off 260");
	VARIANT(n - 20, (void)0);
	refused(bad, ro + 2 * 48, "truncated record 2 (28 of 48 bytes)");
	VARIANT(n, b[ro + 48 + offsetof(struct kvt_trace_rec, event)] = 0);
	refused(bad, ro + 48 + 44, "record 1: unknown event 0");
	VARIANT(n, b[ro + 48 + offsetof(struct kvt_trace_rec, event)] = KVT_EV_MAX + 1);
	refused(bad, ro + 48 + 44, "unknown event");
	VARIANT(n, b[ro + 2 * 48 + offsetof(struct kvt_trace_rec, from)] = 3);
	refused(bad, ro + 2 * 48 + 45, "record 2: bad tier 3 in from");
	VARIANT(n, b[ro + offsetof(struct kvt_trace_rec, to)] = 0x80);
	refused(bad, ro + 46, "record 0: bad tier 128 in to");
	VARIANT(n, ((struct kvt_trace_hdr *)b)->source = 9);
	refused(bad, offsetof(struct kvt_trace_hdr, source), "unknown source 9");
	/* A missing file is an I/O error, not EINVAL. */
	path_of(bad, sizeof(bad), "absent.kvtt");
	CHECK_EQ(kvt_trace_open(bad, &t, err, sizeof(err)), -ENOENT);
#undef VARIANT
	free(g);
	free(b);
	rm_tmp();
}

/* ------------------------------------------------------------------ */

#define LAYERS	2u
#define PT	4u			/* t_config's page_tokens */

/* Acquire every page of every layer of s and check each view. */
static unsigned read_all(struct kvt_pager *p, kvt_seq_t s, const struct kvt_config *cfg,
			 uint32_t seed)
{
	unsigned seen = 0;
	for (unsigned l = 0; l < LAYERS; l++) {
		struct kvt_batch *b;
		struct kvt_view v;
		int r;
		CHECK_EQ(kvt_acquire(p, s, l, NULL, 0, &b), 0);
		while ((r = kvt_batch_next(b, &v)) == 1) {
			CHECK_EQ(t_check_view(cfg, seed, l, &v), 0);
			seen++;
		}
		CHECK_EQ(r, 0);
		kvt_batch_release(b);
	}
	return seen;
}

/* Wait until the migration thread has nothing queued or in flight; with
 * the watermarks at 0 it then stays idle. */
static void settle(struct kvt_pager *p)
{
	for (;;) {
		t_quiesce_locked(p);
		int idle = !p->demand.n && !kvt_pf_queued(p) && !p->moving && !p->jobs;
		pthread_mutex_unlock(&p->lock);
		if (idle)
			return;
		usleep(2000);
	}
}

static void t_live(int in_place)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_stats st0, st1;
	struct kvt_trace t;
	struct kvt_trace_summary s;
	char path[600], err[512];
	kvt_seq_t q[3], child;
	unsigned acquired = 0, steps = 0, scores = 0;
	uint64_t made = 0;

	mkdir_tmp();
	path_of(path, sizeof(path), "live.kvtt");
	t_config(&cfg, LAYERS, 8, 8, 128);
	cfg.host_in_place = in_place;
	cfg.prefetch_depth = 1;
	for (int ti = 0; ti < KVT_NTIERS; ti++)
		cfg.tier[ti].wm_min = cfg.tier[ti].wm_low = cfg.tier[ti].wm_high = 0;
	struct kvt_pager *p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_pager_trace_start(p, "relative-is-fine-here/../x"), -ENOENT);
	CHECK_EQ(kvt_pager_trace_start(p, path), 0);
	CHECK_EQ(kvt_pager_trace_start(p, path), -EBUSY);
	CHECK_EQ(kvt_pager_stats(p, &st0), 0);
	CHECK_EQ(st0.trace_on, 1);

	/* Two sequences of whole pages, one with a partial tail. */
	for (int i = 0; i < 3; i++) {
		CHECK_EQ(kvt_seq_open(p, &q[i]), 0);
		t_append(p, q[i], &cfg, 10 + (uint32_t)i, 0, i == 2 ? 22 : 24);
		made += LAYERS * (i == 2 ? 6 : 6);
	}
	for (int step = 0; step < 4; step++) {
		for (int i = 0; i < 3; i++)
			acquired += read_all(p, q[i], &cfg, 10 + (uint32_t)i);
		float mass[6] = { .5f, .1f, .1f, .1f, .1f, .1f };
		CHECK_EQ(kvt_seq_score(p, q[step % 3], 1, mass, 6), 0);
		scores += 6;
		kvt_pager_step(p);
		steps++;
	}
	/* Park and resume the one with a partial tail, then append to the
	 * tail: its copies below are dropped (DROP with to < from). */
	CHECK_EQ(kvt_seq_park(p, q[2]), 0);
	CHECK_EQ(kvt_seq_resume(p, q[2]), 0);
	acquired += LAYERS;	/* resume acquires the partial tails */
	t_append(p, q[2], &cfg, 12, 22, 2);
	acquired += read_all(p, q[2], &cfg, 12);
	/* A fork shares the first 4 pages of each layer of q[1]. */
	CHECK_EQ(kvt_seq_fork(p, q[1], 16, &child), 0);
	acquired += read_all(p, child, &cfg, 11);
	kvt_pager_step(p);
	steps++;
	CHECK_EQ(kvt_seq_close(p, q[0]), 0);	/* frees 12 */
	CHECK_EQ(kvt_seq_close(p, q[1]), 0);	/* frees 4: the rest is the child's */
	acquired += read_all(p, child, &cfg, 11);
	CHECK_EQ(kvt_seq_close(p, child), 0);	/* frees 8 */
	settle(p);
	CHECK_EQ(kvt_pager_stats(p, &st1), 0);
	CHECK_EQ(st1.trace_on, 1);
	uint64_t nrec = st1.trace_records;
	CHECK_EQ(kvt_pager_trace_stop(p), 0);
	CHECK_EQ(kvt_pager_trace_stop(p), -ENOENT);
	struct kvt_stats st2;
	CHECK_EQ(kvt_pager_stats(p, &st2), 0);
	CHECK_EQ(st2.trace_on, 0);
	CHECK_EQ(st2.trace_records, nrec);
	CHECK_EQ(st2.trace_dropped, 0);

	CHECK_EQ(kvt_trace_open(path, &t, err, sizeof(err)), 0);
	CHECK_EQ(t.nrec, nrec);
	CHECK_EQ(t.hdr.source, KVT_SRC_PAGER);
	CHECK_EQ(t.hdr.page_bytes, kvt_pager_page_bytes(p));
	CHECK_EQ(t.hdr.frames[0], 8);
	CHECK_EQ(t.hdr.frames[1], 8);
	CHECK_EQ(t.hdr.frames[2], 128);
	CHECK_EQ(t.hdr.page_tokens, PT);
	CHECK_EQ(t.hdr.n_layers, LAYERS);
	CHECK_EQ(t.hdr.dropped, 0);
	CHECK(!strcmp(t.hdr.policy[0], "auto"));
	CHECK(t.hdr.config_len > 0 && memmem(t.config, t.hdr.config_len, "page_tokens", 11));
	CHECK_EQ(kvt_trace_summarize(&t, &s), 0);

	/* The statistics, exactly. */
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		const struct kvt_tier_stats *a = &st0.tier[ti], *b = &st1.tier[ti];
		if (s.hits[ti] != b->hits - a->hits || s.misses[ti] != b->misses - a->misses ||
		    s.promotions[ti] != b->promotions - a->promotions ||
		    s.demotions[ti] != b->demotions - a->demotions ||
		    s.drops[ti] != b->drops - a->drops ||
		    s.bytes_in[ti] != b->bytes_in - a->bytes_in ||
		    s.bytes_out[ti] != b->bytes_out - a->bytes_out) {
			fprintf(stderr, "%s: trace hits %llu misses %llu prom %llu dem %llu drops %llu "
				"in %llu out %llu; stats %llu %llu %llu %llu %llu %llu %llu\n",
				kvt_tier_name(ti), (unsigned long long)s.hits[ti],
				(unsigned long long)s.misses[ti], (unsigned long long)s.promotions[ti],
				(unsigned long long)s.demotions[ti], (unsigned long long)s.drops[ti],
				(unsigned long long)s.bytes_in[ti], (unsigned long long)s.bytes_out[ti],
				(unsigned long long)(b->hits - a->hits),
				(unsigned long long)(b->misses - a->misses),
				(unsigned long long)(b->promotions - a->promotions),
				(unsigned long long)(b->demotions - a->demotions),
				(unsigned long long)(b->drops - a->drops),
				(unsigned long long)(b->bytes_in - a->bytes_in),
				(unsigned long long)(b->bytes_out - a->bytes_out));
			exit(1);
		}
	}
	/* Pages moved through every tier, and some waited. */
	CHECK(s.hits[0] > 0 && s.misses[0] > 0 && s.promotions[0] > 0);
	CHECK(s.demotions[0] > 0 && s.demotions[1] > 0);
	CHECK(s.hits[KVT_TIER_NVME] > 0 || s.promotions[KVT_TIER_HOST] > 0);
	CHECK_EQ(s.events[KVT_EV_ACCESS], acquired);
	CHECK_EQ(s.events[KVT_EV_ACCESS], st1.acquires - st0.acquires);
	CHECK_EQ(s.events[KVT_EV_NEW], made);
	CHECK_EQ(s.events[KVT_EV_FREE], 12 + 4 + 8);
	CHECK_EQ(s.events[KVT_EV_NEW] - s.events[KVT_EV_FREE], st1.pages);
	CHECK_EQ(s.events[KVT_EV_STEP], steps + 1);	/* and the one at the start */
	CHECK_EQ(s.events[KVT_EV_SCORE], scores);
	CHECK_EQ(s.events[KVT_EV_LOST], 0);
	CHECK_EQ(s.events[KVT_EV_GAP], 0);
	CHECK_EQ(s.keys, made);
	CHECK_EQ(s.first_step, 0);
	CHECK_EQ(s.last_step, steps);

	/* Record by record: keys are born once, used only while alive, freed
	 * once; steps and times never go back. */
	uint64_t last_step = 0, last_time = 0, waited = 0, below = 0, sealed = 0, pf = 0;
	uint64_t *born = calloc(t.nrec + 1, sizeof(*born));
	size_t nb = 0;
	CHECK(born);
	for (size_t i = 0; i < t.nrec; i++) {
		const struct kvt_trace_rec *r = &t.rec[i];
		CHECK(r->step >= last_step);
		CHECK(r->time >= last_time);
		last_step = r->step;
		last_time = r->time;
		if (r->event == KVT_EV_STEP)
			continue;
		if (r->event == KVT_EV_NEW) {
			for (size_t k = 0; k < nb; k++)
				CHECK(born[k] != r->key);
			born[nb++] = r->key;
			CHECK_EQ(r->to, KVT_TIER_FAST);
			CHECK(r->seq < 8 && r->layer < LAYERS && r->index < 6);
			continue;
		}
		size_t k = 0;
		while (k < nb && born[k] != r->key)
			k++;
		CHECK(k < nb);		/* every page was seen made */
		if (r->event == KVT_EV_FREE)
			born[k] = UINT64_MAX;
		if (r->event == KVT_EV_ACCESS) {
			CHECK(r->from <= 2 && r->to <= 2);
			CHECK_EQ(r->bytes, kvt_pager_page_bytes(p));
			waited += !!(r->flags & KVT_TF_WAIT);
			if (!(r->flags & KVT_TF_WAIT))
				CHECK_EQ(r->from, r->to);
			sealed += !!(r->flags & KVT_TF_SEALED);
		}
		if (r->event == KVT_EV_DROP && r->to < r->from)
			below++;
		if (r->event == KVT_EV_PROMOTE && (r->flags & KVT_TF_PREFETCH))
			pf++;
		if (r->event == KVT_EV_SCORE)
			CHECK(r->score > 0.f && r->score <= .5f);
	}
	CHECK(waited > 0);
	CHECK(sealed > 0);
	CHECK(below > 0);
	CHECK(pf <= st1.prefetch_issued);
	free(born);

	/* Exported to oracleGeneral: one request per ACCESS, page-sized. */
	char og[600];
	path_of(og, sizeof(og), "live.og");
	CHECK_EQ(kvt_trace_export_oracle(path, og, err, sizeof(err)), 0);
	size_t ogn;
	uint8_t *ob = get_file(og, &ogn);
	CHECK_EQ(ogn, 24 * s.events[KVT_EV_ACCESS]);
	for (size_t i = 0; i < ogn / 24; i++) {
		uint32_t size;
		memcpy(&size, ob + i * 24 + 12, 4);
		CHECK_EQ(size, kvt_pager_page_bytes(p));
	}
	free(ob);
	kvt_trace_close(&t);
	t_close(p, dev);
	rm_tmp();
}

/* A trace still running at close is finished by kvt_pager_close. */
static void t_close_running(int arg)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_trace t;
	char path[600], err[512];
	kvt_seq_t s;

	(void)arg;
	mkdir_tmp();
	path_of(path, sizeof(path), "close.kvtt");
	t_config(&cfg, LAYERS, 8, 8, 0);
	struct kvt_pager *p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_pager_trace_start(p, path), 0);
	CHECK_EQ(kvt_seq_open(p, &s), 0);
	t_append(p, s, &cfg, 3, 0, 9);
	read_all(p, s, &cfg, 3);
	t_close(p, dev);
	CHECK_EQ(kvt_trace_open(path, &t, err, sizeof(err)), 0);
	CHECK_EQ(t.hdr.frames[2], 0);
	struct kvt_trace_summary sm;
	CHECK_EQ(kvt_trace_summarize(&t, &sm), 0);
	CHECK_EQ(sm.events[KVT_EV_NEW], 3 * LAYERS);
	CHECK_EQ(sm.events[KVT_EV_ACCESS], 3 * LAYERS);
	CHECK_EQ(sm.hits[0], 3 * LAYERS);
	kvt_trace_close(&t);
	rm_tmp();
}

/* trace start|stop over the control socket. */
static char *ctl_ask(int fd, const char *req)
{
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);

	CHECK(buf);
	CHECK_EQ(send(fd, req, strlen(req), MSG_NOSIGNAL), (long long)strlen(req));
	CHECK_EQ(send(fd, "\n", 1, MSG_NOSIGNAL), 1);
	for (;;) {
		buf[len] = 0;
		if (len >= 2 && !strcmp(buf + len - 2, ".\n") && (len == 2 || buf[len - 3] == '\n'))
			break;
		CHECK(len + 1 < cap);
		ssize_t r = recv(fd, buf + len, 1, 0);
		CHECK(r > 0);
		len += (size_t)r;
	}
	buf[len - 2] = 0;
	return buf;
}

static void t_control(int arg)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_control *ctl;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kvt_trace t;
	char sock[600], path[600], req[700], err[512], *r;
	kvt_seq_t s;

	(void)arg;
	mkdir_tmp();
	path_of(sock, sizeof(sock), "ctl.sock");
	path_of(path, sizeof(path), "ctl.kvtt");
	if (strlen(sock) >= sizeof(sa.sun_path))
		SKIP("socket path too long: %s", sock);
	t_config(&cfg, LAYERS, 8, 8, 0);
	struct kvt_pager *p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_control_start(p, sock, &ctl), 0);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	strcpy(sa.sun_path, sock);
	CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);

	r = ctl_ask(fd, "trace start relative.kvtt");
	CHECK(!strncmp(r, "error ", 6) && strstr(r, "absolute"));
	free(r);
	r = ctl_ask(fd, "trace stop");
	CHECK(!strncmp(r, "error ", 6) && strstr(r, "no trace"));
	free(r);
	r = ctl_ask(fd, "trace");
	CHECK(!strncmp(r, "error usage", 11));
	free(r);
	snprintf(req, sizeof(req), "trace start %s", path);
	r = ctl_ask(fd, req);
	CHECK(!strcmp(r, "ok\n"));
	free(r);
	r = ctl_ask(fd, req);
	CHECK(!strncmp(r, "error ", 6) && strstr(r, "already"));
	free(r);
	CHECK_EQ(kvt_seq_open(p, &s), 0);
	t_append(p, s, &cfg, 5, 0, 8);
	read_all(p, s, &cfg, 5);
	kvt_pager_step(p);
	/* 1 STEP at the start, 4 NEW, 4 SEAL (8 tokens fill each tail), 4
	 * ACCESS, 1 STEP. */
	r = ctl_ask(fd, "trace stop");
	if (strcmp(r, "ok\n14 records, 0 dropped\n")) {
		fprintf(stderr, "trace stop: '%s'\n", r);
		exit(1);
	}
	free(r);
	r = ctl_ask(fd, "help");
	CHECK(strstr(r, "trace start FILE") && strstr(r, "trace stop"));
	free(r);
	close(fd);
	kvt_control_stop(ctl);
	CHECK_EQ(kvt_trace_open(path, &t, err, sizeof(err)), 0);
	CHECK_EQ(t.nrec, 14);
	kvt_trace_close(&t);
	t_close(p, dev);
	rm_tmp();
}

/* The recorder when the disk is behind: a FIFO nobody reads stands for a
 * stuck disk. Appends never block; once the buffers are full, records are
 * dropped and counted, and a GAP record with the count stands where they
 * were, with the time and step of the record after it. */
struct sink {
	int fd;
	uint8_t *buf;
	size_t n, cap;
};

static void *drain(void *arg)
{
	struct sink *k = arg;
	for (;;) {
		if (k->cap - k->n < (1u << 20)) {
			k->cap = k->cap ? k->cap * 2 : (4u << 20);
			k->buf = realloc(k->buf, k->cap);
			CHECK(k->buf);
		}
		ssize_t r = read(k->fd, k->buf + k->n, k->cap - k->n);
		CHECK(r >= 0);
		if (!r)
			return NULL;
		k->n += (size_t)r;
	}
}

static void put_recs(struct kvt_recorder *r, uint64_t from, uint64_t to)
{
	for (uint64_t i = from; i < to; i++) {
		struct kvt_trace_rec *x = kvt_recorder_slot(r);
		*x = mkrec(i);
		x->time = x->step = i;
		x->event = KVT_EV_ACCESS;
	}
}

static void t_drops(int arg)
{
	struct kvt_trace_hdr h = { .source = KVT_SRC_SYNTH };
	struct kvt_recorder *r;
	struct sink k = { 0 };
	pthread_t th;
	char path[600];
	uint64_t recs, dropped;
	/* More than the recorder holds (4 buffers of 2048) and the pipe. */
	const uint64_t n = 30000, more = 1000;

	(void)arg;
	mkdir_tmp();
	path_of(path, sizeof(path), "fifo");
	CHECK_EQ(mkfifo(path, 0600), 0);
	int hold = open(path, O_RDWR);		/* a reader exists, and never reads */
	CHECK(hold >= 0);
	CHECK_EQ(kvt_recorder_start(path, &h, NULL, 0, 4, &r), 0);
	put_recs(r, 0, n);
	kvt_recorder_counts(r, &recs, &dropped);
	CHECK(dropped > 0 && recs + dropped >= n);	/* GAPs when the pipe took some */
	/* Now read: buffers come free, and the next append puts a GAP first. */
	k.fd = open(path, O_RDONLY);
	CHECK(k.fd >= 0);
	close(hold);
	CHECK_EQ(pthread_create(&th, NULL, drain, &k), 0);
	/* Appends are dropped until the writer frees a buffer; the first that
	 * gets one brings a GAP in first. */
	uint64_t i = n;
	for (;;) {
		uint64_t rr, dd;
		put_recs(r, i, i + 1);
		i++;
		kvt_recorder_counts(r, &rr, &dd);
		if (rr > recs)
			break;
		usleep(1000);
	}
	put_recs(r, i, i + more);
	i += more;
	uint64_t recs2, dropped2;
	kvt_recorder_counts(r, &recs2, &dropped2);
	/* A FIFO cannot take the header again at the end: that is an error. */
	CHECK_EQ(kvt_recorder_finish(r), -ESPIPE);
	CHECK_EQ(pthread_join(th, NULL), 0);
	close(k.fd);

	CHECK(k.n >= 256 && (k.n - 256) % 48 == 0);
	size_t nr = (k.n - 256) / 48;
	const struct kvt_trace_rec *v = (const struct kvt_trace_rec *)(k.buf + 256);
	/* On a busy machine the last appends may be dropped too: a GAP at
	 * the end, written by finish, stands for them. */
	int trailing = nr && v[nr - 1].event == KVT_EV_GAP;
	CHECK_EQ(nr, recs2 + trailing);
	uint64_t gaps = 0, lost = 0, expect = 0;
	for (size_t j = 0; j < nr; j++) {
		if (v[j].event == KVT_EV_GAP) {
			gaps++;
			lost += v[j].key;
			if (j + 1 < nr) {
				CHECK_EQ(v[j].time, v[j + 1].time);
				CHECK_EQ(v[j].step, v[j + 1].step);
			} else {
				CHECK_EQ(v[j].time, i - 1);	/* the last dropped */
			}
			expect += v[j].key;	/* the records it stands for */
			continue;
		}
		CHECK_EQ(v[j].time, expect);	/* in order, none missing but those counted */
		expect++;
	}
	CHECK(gaps >= 1);
	CHECK_EQ(nr + dropped2, i + gaps);	/* every append, and the GAPs */
	CHECK_EQ(lost, dropped2);
	CHECK_EQ(expect, i);
	free(k.buf);
	rm_tmp();
}

/* ------------------------------------------------------------------ */

static void og_put(uint8_t *q, uint32_t clock, uint64_t id, uint32_t size, int64_t next)
{
	memcpy(q, &clock, 4);
	memcpy(q + 4, &id, 8);
	memcpy(q + 12, &size, 4);
	memcpy(q + 16, &next, 8);
}

static void t_oracle(int arg)
{
	static const uint64_t id[] = { 10, 20, 10, 30, 20, 10, 1ull << 63 };
	enum { N = sizeof(id) / sizeof(id[0]) };
	uint8_t in[N * 24];
	char pin[600], pt[600], pout[600], err[512];
	struct kvt_trace t;

	(void)arg;
	mkdir_tmp();
	path_of(pin, sizeof(pin), "in.og");
	path_of(pt, sizeof(pt), "in.kvtt");
	path_of(pout, sizeof(pout), "out.og");
	for (int i = 0; i < N; i++)
		og_put(in + i * 24, 100 + (uint32_t)i, id[i], 1000 * (uint32_t)(id[i] % 7) + 1,
		       12345);	/* the importer does not read next_access_vtime */
	put_file(pin, in, sizeof(in));
	CHECK_EQ(kvt_trace_import_oracle(pin, pt, err, sizeof(err)), 0);
	CHECK_EQ(kvt_trace_open(pt, &t, err, sizeof(err)), 0);
	CHECK_EQ(t.hdr.source, KVT_SRC_ORACLE);
	CHECK_EQ(t.nrec, N);
	for (int i = 0; i < N; i++) {
		const struct kvt_trace_rec *r = &t.rec[i];
		CHECK_EQ(r->event, KVT_EV_ACCESS);
		CHECK(r->key == id[i]);
		CHECK_EQ(r->time, 100 + i);
		CHECK_EQ(r->step, i);
		CHECK_EQ(r->bytes, 1000 * (id[i] % 7) + 1);
		CHECK(r->seq == KVT_REF_NONE && r->layer == KVT_REF_NONE && r->index == KVT_REF_NONE);
		CHECK(r->from == KVT_TRACE_NONE && r->to == KVT_TRACE_NONE);
	}
	struct kvt_trace_summary s;
	CHECK_EQ(kvt_trace_summarize(&t, &s), 0);
	CHECK_EQ(s.keys, 4);
	CHECK_EQ(s.hits[0] + s.misses[0], 0);	/* no tiers in an import */
	kvt_trace_close(&t);

	CHECK_EQ(kvt_trace_export_oracle(pt, pout, err, sizeof(err)), 0);
	size_t n;
	uint8_t *out = get_file(pout, &n);
	CHECK_EQ(n, sizeof(in));
	for (int i = 0; i < N; i++) {
		/* traceConv: the 1-based index of the next request for the same
		 * object, -1 when there is none. */
		int64_t want = -1, got;
		for (int j = i + 1; j < N; j++)
			if (id[j] == id[i]) {
				want = j + 1;
				break;
			}
		memcpy(&got, out + i * 24 + 16, 8);
		CHECK_EQ(got, want);
		CHECK(!memcmp(out + i * 24, in + i * 24, 16));	/* time, id, size kept */
	}
	/* The values themselves, spelled out: 10 at 0, 2, 5; 20 at 1, 4. */
	int64_t v;
	memcpy(&v, out + 16, 8);
	CHECK_EQ(v, 3);
	memcpy(&v, out + 24 + 16, 8);
	CHECK_EQ(v, 5);
	memcpy(&v, out + 2 * 24 + 16, 8);
	CHECK_EQ(v, 6);
	memcpy(&v, out + 3 * 24 + 16, 8);
	CHECK_EQ(v, -1);
	free(out);

	/* A truncated request. */
	put_file(pin, in, sizeof(in) - 5);
	CHECK_EQ(unlink(pt), 0);
	int r = kvt_trace_import_oracle(pin, pt, err, sizeof(err));
	CHECK_EQ(r, -EINVAL);
	CHECK(strstr(err, "byte 144:") && strstr(err, "truncated request 6"));
	CHECK(access(pt, F_OK) != 0);	/* no half-written output left */
	/* An empty file is an empty trace. */
	put_file(pin, in, 0);
	CHECK_EQ(kvt_trace_import_oracle(pin, pt, err, sizeof(err)), 0);
	CHECK_EQ(kvt_trace_open(pt, &t, err, sizeof(err)), 0);
	CHECK_EQ(t.nrec, 0);
	kvt_trace_close(&t);
	rm_tmp();
}

static void t_mooncake(int arg)
{
	static const char good[] =
		"{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 10, \"hash_ids\": [0, 1]}\n"
		"{\"timestamp\": 3052, \"input_length\": 1536, \"output_length\": 5, \"hash_ids\": "
		"[0, 2, 3], \"extra\": {\"a\": [1, \"x\\\"y\", null, true, -2.5e3]}}\n"
		"\r\n"
		"{\"hash_ids\":[18446744073709551615],\"timestamp\":3052.5}";
	static const uint64_t key[] = { 0, 1, 0, 2, 3, UINT64_MAX };
	static const uint64_t step[] = { 0, 0, 1, 1, 1, 2 };
	static const uint32_t idx[] = { 0, 1, 0, 1, 2, 0 };
	static const uint64_t ns[] = { 0, 0, 3052000000ull, 3052000000ull, 3052000000ull,
				       3052500000ull };
	char pin[600], pout[600], err[512];
	struct kvt_trace t;

	(void)arg;
	mkdir_tmp();
	path_of(pin, sizeof(pin), "mc.jsonl");
	path_of(pout, sizeof(pout), "mc.kvtt");
	put_file(pin, good, strlen(good));
	CHECK_EQ(kvt_trace_import_mooncake(pin, pout, err, sizeof(err)), 0);
	CHECK_EQ(kvt_trace_open(pout, &t, err, sizeof(err)), 0);
	CHECK_EQ(t.hdr.source, KVT_SRC_MOONCAKE);
	CHECK_EQ(t.nrec, 6);
	for (int i = 0; i < 6; i++) {
		const struct kvt_trace_rec *r = &t.rec[i];
		CHECK_EQ(r->event, KVT_EV_ACCESS);
		CHECK(r->key == key[i]);
		CHECK_EQ(r->step, step[i]);
		CHECK_EQ(r->seq, step[i]);
		CHECK_EQ(r->index, idx[i]);
		CHECK(r->time == ns[i]);
		CHECK(r->layer == KVT_REF_NONE);
	}
	kvt_trace_close(&t);
	size_t ngood;
	uint8_t *before = get_file(pout, &ngood);

	static const struct { const char *text; const char *want; } bad[] = {
		{ "{\"timestamp\": 1, \"hash_ids\": [1]}\n\n{\"timestamp\": 2, \"hash_ids\": [1, 2,]}\n",
		  "line 3: column 36: expected a number" },
		{ "{\"timestamp\": 1}\n", "line 1: column 17: no \"hash_ids\"" },
		{ "{\"timestamp\": -1, \"hash_ids\": []}\n", "line 1: column 15: \"timestamp\"" },
		{ "{\"timestamp\": 1, \"hash_ids\": [1.5]}\n", "line 1: column 31: hash ids" },
		{ "{\"timestamp\": 1, \"hash_ids\": [1]} x\n", "line 1: column 35: text after" },
		{ "{\"timestamp\": 1, \"hash_ids\": [1]}\n{\"timestamp\": 1, \"timestamp\": 2, \"hash_ids\": []}",
		  "line 2: column 30: \"timestamp\" given twice" },
		{ "[1, 2]\n", "line 1: column 1: expected '{'" },
		{ "{\"timestamp\": 1, \"hash_ids\": [1], \"s\": \"abc}\n", "line 1: column 45: unterminated" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		put_file(pin, bad[i].text, strlen(bad[i].text));
		err[0] = 0;
		int r = kvt_trace_import_mooncake(pin, pout, err, sizeof(err));
		if (r != -EINVAL || !strstr(err, bad[i].want) || !strstr(err, pin)) {
			fprintf(stderr, "case %zu: rc %d, \"%s\"; wanted \"%s\"\n", i, r, err,
				bad[i].want);
			exit(1);
		}
		/* A failed import leaves the earlier output as it was. */
		size_t nnow;
		uint8_t *now = get_file(pout, &nnow);
		CHECK(nnow == ngood && !memcmp(now, before, ngood));
		free(now);
	}
	free(before);
	rm_tmp();
}

int main(void)
{
	static const struct t_case plain[] = {
		{ "roundtrip", t_roundtrip },
		{ "bad files", t_bad },
		{ "close while recording", t_close_running },
		{ "control socket", t_control },
		{ "recorder drops when behind", t_drops },
		{ "oracleGeneral", t_oracle },
		{ "mooncake", t_mooncake },
	};
	static const struct t_case live[] = {
		{ "live pager vs stats", t_live },
	};
	int a = t_run_cases(plain, sizeof(plain) / sizeof(plain[0]), 0, 40);
	int b = t_run_cases(live, 1, 1, 40);
	if (a == 1 || b == 1)
		return 1;
	return a == T_SKIP && b == T_SKIP ? T_SKIP : 0;
}
