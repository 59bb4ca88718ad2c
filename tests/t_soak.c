/* SPDX-License-Identifier: MIT */
/*
 * Fault soak: sequences decode over a tiny fast and host tier while the
 * NVMe tier fails (EIO on reads and writes, short reads, ENOSPC on
 * writes, flipped bits, slow completions) and two control-socket clients
 * swap policies, change prefetch depth, resize the fast and host tiers
 * and drain them, for KVT_SOAK_SECONDS (default 5; `make soak` runs it
 * for SOAK_SECONDS under ASan and under TSan).
 *
 * The faults come from the fault.* keys where the library is built with
 * KVT_FAULTS (the sanitizer builds), else straight through the NVMe
 * handle (as the t_fault_* tests do). Each decoder thread owns NSEQ /
 * NDEC sequences; a step appends one token to every layer of each and
 * reads every page of every layer back, as attention would. Checked:
 *  - every page handed out holds exactly the bytes appended; every other
 *    page comes back -EIO (lost), and a page once lost is never served;
 *  - a sequence that finishes (MAXTOK tokens) with no page lost has read
 *    back, in its last step, every token it was given: what a run
 *    without faults holds; then it is closed and a new one takes its
 *    place;
 *  - nothing is lost without a failed read: lost_pages is at least the
 *    pages seen -EIO and at most io_errors + csum_failures;
 *  - every control reply is "ok" or one error line for a reason the
 *    faults or the pins explain (pinned, nowhere, busy, I/O error, disk
 *    full); fault.* changes, from the API or the socket, are refused;
 *  - the page-table invariants hold throughout, and afterwards every live
 *    page still verifies, and closing everything frees every page.
 * Sanitizer reports fail the test through tests/run.sh.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include "fault_common.h"

#define LAYERS	2u
#define NSEQ	6u
#define NDEC	2u		/* decoder threads: sequence i is decoder i % NDEC's */
#define MAXTOK	72u		/* a sequence finishes at this many tokens */
#define MAXPG	(MAXTOK / 4)	/* its pages a layer (t_config: 4 tokens a page) */
#define FAST	24u		/* tier sizes in pages at open; the clients move */
#define FAST_MAX 40u		/* them between 16..FAST_MAX and 4..HOST_MAX */
#define HOST	32u
#define HOST_MAX 64u
#define NVME	4096u

/* One in N: primes, so the kinds do not line up. */
#define F_EIO	2003u
#define F_SHORT	17u
#define F_ENOSPC 97u
#define F_FLIP	3001u
#define F_SLOW	20u

struct sq {
	kvt_seq_t h;
	uint32_t seed;
	unsigned ntok;			/* tokens in every layer */
	unsigned nlost;			/* pages seen -EIO */
	uint8_t	 lost[LAYERS][MAXPG];
};

static struct kvt_config cfg;
static struct kvt_pager *P;
static struct sq seqs[NSEQ];
static char sock_path[108];
static int stop;
static uint32_t next_seed = 1000;

/* Counters, under their own atomics. */
static uint64_t served, rounds, lost_seen, finished, finished_clean;
static uint64_t sets, set_refused, drains, drain_refused;
static uint64_t append_waits, read_waits;	/* -ENOSPC, tried again */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static unsigned rnd(uint64_t *s, unsigned n)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (unsigned)((*s >> 11) % n);
}

static void add(uint64_t *c, uint64_t n)
{
	__atomic_add_fetch(c, n, __ATOMIC_RELAXED);
}

static uint64_t get(const uint64_t *c)
{
	return __atomic_load_n(c, __ATOMIC_RELAXED);
}

/* ---- sequences ---- */

/* Append tokens [tok0, tok0 + ntok) to every layer of q. A disk-full
 * pause (an NVMe write failed: demotion to NVMe waits 100 ms) can leave no
 * frame for a new tail: the append then stops with -ENOSPC, keeping what
 * it stored, and the rest is appended again once the pager has moved on.
 * The runner's timeout catches a pager that never does. */
static void append(struct sq *q, unsigned tok0, unsigned ntok)
{
	unsigned per = cfg.n_kv_heads * cfg.head_dim;
	float k[MAXTOK * 128], v[MAXTOK * 128];

	CHECK(per * ntok <= MAXTOK * 128);
	for (unsigned l = 0; l < LAYERS; l++) {
		t_fill_tokens(&cfg, q->seed, l, tok0, ntok, k, v);
		for (unsigned done = 0;;) {
			int r = kvt_seq_append(P, q->h, l, k + done * per, v + done * per,
					       ntok - done);
			if (!r)
				break;
			if (r != -ENOSPC) {
				fprintf(stderr, "seq %u layer %u: kvt_seq_append: %s\n", q->seed, l,
					strerror(-r));
				exit(1);
			}
			add(&append_waits, 1);
			r = kvt_seq_tokens(P, q->h, l);
			CHECK(r >= (int)(tok0 + done) && r < (int)(tok0 + ntok));
			done = (unsigned)r - tok0;
			usleep(1000);
		}
	}
	q->ntok = tok0 + ntok;
}

static void seq_start(struct sq *q, unsigned prefill)
{
	memset(q, 0, sizeof(*q));
	q->seed = __atomic_fetch_add(&next_seed, 1, __ATOMIC_RELAXED);
	CHECK_EQ(kvt_seq_open(P, &q->h), 0);
	append(q, 0, prefill);
}

/* Read every page of one layer of q: each comes out bit-exact or -EIO,
 * and a page lost once stays lost. A page no frame could be had for
 * (-ENOSPC: the tiers are full of pins and a disk-full pause holds the
 * rest) is asked for again in a new batch once this one is released. */
static void read_layer(struct sq *q, unsigned l)
{
	unsigned npg = (q->ntok + cfg.page_tokens - 1) / cfg.page_tokens, left = npg;
	uint8_t done[MAXPG] = { 0 };
	uint32_t want[MAXPG];

	for (unsigned pass = 0; left; pass++) {
		uint8_t seen[MAXPG] = { 0 };
		struct kvt_batch *b;
		struct kvt_view v;
		unsigned nwant = 0;
		int r;

		if (pass) {
			add(&read_waits, 1);
			usleep(1000);
		}
		for (unsigned i = 0; i < npg; i++)
			if (!done[i])
				want[nwant++] = i;
		r = kvt_acquire(P, q->h, l, pass ? want : NULL, pass ? nwant : 0, &b);
		if (r) {
			fprintf(stderr, "seq %u layer %u: kvt_acquire: %s\n", q->seed, l,
				strerror(-r));
			exit(1);
		}
		while ((r = kvt_batch_next(b, &v)) != 0) {
			CHECK(v.page < npg);
			CHECK(!seen[v.page] && !done[v.page]);
			seen[v.page] = 1;
			if (r == -ENOSPC)
				continue;
			done[v.page] = 1;
			left--;
			if (r == -EIO) {
				CHECK(v.k == NULL && v.v == NULL);
				if (!q->lost[l][v.page]) {
					q->lost[l][v.page] = 1;
					q->nlost++;
					add(&lost_seen, 1);
				}
				continue;
			}
			if (r != 1) {
				fprintf(stderr, "seq %u layer %u page %u: %s\n", q->seed, l, v.page,
					strerror(-r));
				exit(1);
			}
			if (q->lost[l][v.page]) {
				fprintf(stderr, "seq %u layer %u page %u: served after it was lost\n",
					q->seed, l, v.page);
				exit(1);
			}
			CHECK_EQ(v.ntok, v.page + 1 < npg ? cfg.page_tokens :
				 q->ntok - v.page * cfg.page_tokens);
			if (t_check_view(&cfg, q->seed, l, &v)) {
				fprintf(stderr, "seq %u: layer %u page %u served with wrong bytes\n",
					q->seed, l, v.page);
				exit(1);
			}
			add(&served, 1);
		}
		kvt_batch_release(b);
		for (unsigned i = 0; i < npg; i++)
			CHECK(seen[i] || done[i]);
	}
}

/* One decode step of q: a token more, every page read. At MAXTOK the
 * sequence is done: counted clean (read back whole) or hit, closed, and
 * a new one started in its place. */
static void decode(struct sq *q, uint64_t *rng)
{
	append(q, q->ntok, 1);
	for (unsigned l = 0; l < LAYERS; l++)
		read_layer(q, l);
	if (q->ntok < MAXTOK)
		return;
	add(&finished, 1);
	if (!q->nlost)
		add(&finished_clean, 1);
	CHECK_EQ(kvt_seq_close(P, q->h), 0);
	seq_start(q, 1 + rnd(rng, MAXTOK / 2));
}

static void *decoder(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;
	uint64_t rng = 0x9e3779b97f4a7c15ull * (id + 1);

	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		for (unsigned i = id; i < NSEQ; i += NDEC)
			decode(&seqs[i], &rng);
		kvt_pager_step(P);
		add(&rounds, 1);
	}
	return NULL;
}

/* ---- control clients ---- */

static int dial(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	CHECK(fd >= 0);
	strcpy(sa.sun_path, sock_path);
	CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	return fd;
}

static void send_all(int fd, const char *s, size_t n)
{
	while (n) {
		ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
		CHECK(w > 0);
		s += w;
		n -= (size_t)w;
	}
}

/* One request; its reply without the final "." line (malloc'd). Waits as
 * long as the pager takes: the runner's timeout catches a hang. */
static char *ask(int fd, const char *req)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);

	CHECK(buf);
	send_all(fd, req, strlen(req));
	send_all(fd, "\n", 1);
	for (;;) {
		buf[len] = 0;
		if (len >= 2 && !strcmp(buf + len - 2, ".\n") && (len == 2 || buf[len - 3] == '\n'))
			break;
		if (cap - len < 4096) {
			buf = realloc(buf, cap *= 2);
			CHECK(buf);
		}
		ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
		if (r <= 0) {
			fprintf(stderr, "'%s': connection closed; got: %.200s\n", req, buf);
			exit(1);
		}
		len += (size_t)r;
	}
	buf[len - 2] = 0;
	return buf;
}

/* 1 for "ok", 0 for one error line holding one of why[], else the test fails. */
static int ok_or(const char *req, const char *r, const char *const *why)
{
	if (!strcmp(r, "ok\n"))
		return 1;
	for (; why && *why; why++)
		if (!strncmp(r, "error ", 6) && strstr(r, *why) &&
		    strchr(r, '\n') == r + strlen(r) - 1)
			return 0;
	fprintf(stderr, "'%s': %s", req, r);
	exit(1);
}

/* Client 0: policies and prefetch depth. Client 1: tier sizes, drains,
 * stats and metrics. */
static void *client(void *arg)
{
	static const char *const policies[] = { "lru", "clock", "arc", "s3fifo", "2q", "sieve" };
	static const char *const cap_why[] = { "pinned", "nowhere", NULL };
	static const char *const drain_why[] = {
		"Device or resource busy", "Input/output error", "No space left on device", NULL
	};
	unsigned id = (unsigned)(uintptr_t)arg;
	uint64_t rng = 0x2545f4914f6cdd1dull * (id + 7);
	uint64_t pb = kvt_config_page_bytes(&cfg);
	int fd = dial();
	char req[128], *r;

	/* The faults are set at open; the socket cannot change them. */
	r = ask(fd, "set fault.eio=1");
	CHECK(!strncmp(r, "error ", 6) && strstr(r, "fault.eio"));
	free(r);
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		unsigned what = rnd(&rng, 4);

		if (id == 0 && what < 3) {
			snprintf(req, sizeof(req), "set tier.%s.policy=%s",
				 kvt_tier_name((int)rnd(&rng, KVT_NTIERS)), policies[rnd(&rng, 6)]);
			r = ask(fd, req);
			ok_or(req, r, NULL);
		} else if (id == 0) {
			snprintf(req, sizeof(req), "set access.prefetch_depth=%u", rnd(&rng, 4));
			r = ask(fd, req);
			ok_or(req, r, NULL);
		} else if (what < 2) {
			int fast = what == 0;
			unsigned n = fast ? 16 + rnd(&rng, FAST_MAX - 15) : 4 + rnd(&rng, HOST_MAX - 3);
			snprintf(req, sizeof(req), "set tier.%s.bytes=%llu", fast ? "fast" : "host",
				 (unsigned long long)(n * pb));
			r = ask(fd, req);
			add(ok_or(req, r, cap_why) ? &sets : &set_refused, 1);
		} else if (what == 2) {
			snprintf(req, sizeof(req), "drain %s", rnd(&rng, 2) ? "host" : "fast");
			r = ask(fd, req);
			add(ok_or(req, r, drain_why) ? &drains : &drain_refused, 1);
		} else {
			r = ask(fd, rnd(&rng, 2) ? "stats" : "metrics");
			CHECK(strstr(r, "online") || strstr(r, "kvt_tier_online_bytes{tier=\"host\"}"));
		}
		free(r);
		usleep(1000);
	}
	close(fd);
	return NULL;
}

/* ---- set-up ---- */

static unsigned soak_seconds(void)
{
	const char *s = getenv("KVT_SOAK_SECONDS");
	char *end;

	if (!s || !*s)
		return 5;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (*end || errno || v < 1 || v > 86400 || s[0] == '-') {
		fprintf(stderr, "KVT_SOAK_SECONDS = %s: must be a whole number of seconds, "
			"1..86400\n", s);
		exit(1);
	}
	return (unsigned)v;
}

static void set_faults(void)
{
#ifdef KVT_FAULTS
	static const struct { const char *key; unsigned every; } f[] = {
		{ "fault.eio", F_EIO }, { "fault.short", F_SHORT }, { "fault.enospc", F_ENOSPC },
		{ "fault.flip", F_FLIP }, { "fault.slow_us", F_SLOW },
	};
	char v[16], err[256];

	for (unsigned i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		snprintf(v, sizeof(v), "%u", f[i].every);
		if (kvt_config_set(&cfg, f[i].key, v, err, sizeof(err))) {
			fprintf(stderr, "%s\n", err);
			exit(1);
		}
	}
#else
	struct kvt_fault f = { F_EIO, F_SHORT, F_ENOSPC, F_FLIP, F_SLOW };
	fault_set(P, &f);
#endif
}

int main(void)
{
	const char *tdir = getenv("KVT_TEST_DIR");
	unsigned secs = soak_seconds();
	struct kvt_control *ctl;
	struct kvt_device *dev;
	struct kvt_stats st;
	pthread_t dec[NDEC], cli[2];
	char err[256];

	t_config(&cfg, LAYERS, FAST, HOST, NVME);
	uint64_t pb = kvt_config_page_bytes(&cfg);
	cfg.tier[KVT_TIER_FAST].max_bytes = FAST_MAX * pb;
	cfg.tier[KVT_TIER_HOST].max_bytes = HOST_MAX * pb;
	uint64_t seed = getenv("KVT_SOAK_SEED") ? strtoull(getenv("KVT_SOAK_SEED"), NULL, 0) :
		(uint64_t)time(NULL) ^ (uint64_t)getpid() << 20;
	cfg.host_in_place = (int)(seed & 1);
	next_seed += (uint32_t)(seed >> 1) % 1000000 * 16;
	fprintf(stderr, "KVT_SOAK_SEED=%#llx: %u s, host_in_place %d\n", (unsigned long long)seed,
		secs, cfg.host_in_place);
#ifdef KVT_FAULTS
	set_faults();
	P = t_open(&cfg, &dev);
#else
	P = t_open(&cfg, &dev);
	set_faults();
#endif
	/* Faults are set at open only. */
	CHECK(kvt_pager_set(P, "fault.eio", "3", err, sizeof(err)) != 0);
	CHECK(strstr(err, "fault.eio"));

	uint64_t rng = seed | 1;
	/* Each decoder's first sequence starts a few tokens short of the end,
	 * so that a short run on a slow build sees sequences finish too. */
	for (unsigned i = 0; i < NSEQ; i++)
		seq_start(&seqs[i], i < NDEC ? MAXTOK - 4 - i : 1 + rnd(&rng, MAXTOK / 2));
	snprintf(sock_path, sizeof(sock_path), "%s/soak.%d.sock", tdir && *tdir ? tdir : "/tmp",
		 (int)getpid());
	CHECK_EQ(kvt_control_start(P, sock_path, &ctl), 0);

	double t0 = now();
	for (unsigned i = 0; i < NDEC; i++)
		CHECK(pthread_create(&dec[i], NULL, decoder, (void *)(uintptr_t)i) == 0);
	for (unsigned i = 0; i < 2; i++)
		CHECK(pthread_create(&cli[i], NULL, client, (void *)(uintptr_t)i) == 0);

	/* Run for the time asked, and at least until every decoder has seen
	 * a sequence through (a busy machine gets there late, not never). */
	uint64_t checks = 0;
	while (now() - t0 < secs || get(&finished) < NDEC) {
		usleep(100000);
		t_check_inv(P);
		checks++;
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < NDEC; i++)
		pthread_join(dec[i], NULL);
	for (unsigned i = 0; i < 2; i++)
		pthread_join(cli[i], NULL);
	double secs_run = now() - t0;
	kvt_control_stop(ctl);

	/* Everything still open reads back as before: lost pages stay lost,
	 * the rest is bit-exact. */
	t_quiesce(P);
	t_check_inv(P);
	for (unsigned i = 0; i < NSEQ; i++)
		for (unsigned l = 0; l < LAYERS; l++)
			read_layer(&seqs[i], l);
	t_quiesce(P);
	t_check_inv(P);

	CHECK_EQ(kvt_pager_stats(P, &st), 0);
	/* The pager's copy, which the migration thread updates under the
	 * lock after its I/O: the ring's own counters move without it, and a
	 * prefetch queued by the last reads may be running now. */
	struct kvt_nvme_info ni;
	pthread_mutex_lock(&P->lock);
	ni = P->nvme_info;
	pthread_mutex_unlock(&P->lock);
	uint64_t faults = st.io_errors + st.csum_failures + st.enospc + ni.short_ios;
	printf("soak: %.0f s, %llu steps, %llu pages served, %llu faults injected "
	       "(%llu I/O errors, %llu checksum failures, %llu ENOSPC, %llu short reads), "
	       "%llu pages lost (%llu seen -EIO), %llu sequences finished (%llu without a lost "
	       "page), %llu tier resizes (%llu refused), %llu drains (%llu refused), "
	       "%llu appends and %llu reads waited out a full disk, %llu invariant checks\n",
	       secs_run,
	       (unsigned long long)st.step, (unsigned long long)get(&served),
	       (unsigned long long)faults, (unsigned long long)st.io_errors,
	       (unsigned long long)st.csum_failures, (unsigned long long)st.enospc,
	       (unsigned long long)ni.short_ios, (unsigned long long)st.lost_pages,
	       (unsigned long long)get(&lost_seen), (unsigned long long)get(&finished),
	       (unsigned long long)get(&finished_clean), (unsigned long long)get(&sets),
	       (unsigned long long)get(&set_refused), (unsigned long long)get(&drains),
	       (unsigned long long)get(&drain_refused), (unsigned long long)get(&append_waits),
	       (unsigned long long)get(&read_waits), (unsigned long long)checks);
	fflush(stdout);

	CHECK(faults > 0);
	CHECK(ni.short_ios > 0);
	/* Every loss reported was counted, and none came without a failed
	 * read (a failed write keeps the page where it was). */
	CHECK(st.lost_pages >= get(&lost_seen));
	CHECK(st.lost_pages <= st.io_errors + st.csum_failures);
	CHECK(get(&finished) >= NDEC);

	for (unsigned i = 0; i < NSEQ; i++)
		CHECK_EQ(kvt_seq_close(P, seqs[i].h), 0);
	t_quiesce(P);
	CHECK_EQ(kvt_pager_stats(P, &st), 0);
	CHECK_EQ(st.seqs, 0);
	CHECK_EQ(st.pages, 0);
	for (int t = 0; t < KVT_NTIERS; t++)
		CHECK_EQ(st.tier[t].used, 0);
	t_check_inv(P);
	t_close(P, dev);
	return 0;
}
