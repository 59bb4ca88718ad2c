/* SPDX-License-Identifier: MIT */
/*
 * The replay engine (pager/sim.c): hand-worked multi-tier traces (hits,
 * misses, demotions, bytes across each boundary, stall), tail pins and
 * SCORE mass, the calls a policy gets (a demand miss: on_insert only,
 * the use of its step; a prefetch: on_insert, then on_access when read),
 * the fast single-tier path against the general one, the miss-ratio
 * curves byte-identical whatever the thread count, the classic policies
 * on a decode scan, Belady (a tiny local one) through kvt_ref.next, and
 * bad input refused.
 */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <unistd.h>

#include "pager/policy.h"
#include "pager/sim.h"

static struct kvt_sim_config one_tier(const char *pol, uint64_t frames)
{
	struct kvt_sim_config c = { .ntiers = 1, .backed = -1 };

	snprintf(c.tier[0].policy, sizeof(c.tier[0].policy), "%s", pol);
	c.tier[0].frames = frames;
	return c;
}

static struct kvt_sim_config tiers2(const char *p0, uint64_t f0, const char *p1, uint64_t f1)
{
	struct kvt_sim_config c = one_tier(p0, f0);

	c.ntiers = 2;
	snprintf(c.tier[1].policy, sizeof(c.tier[1].policy), "%s", p1);
	c.tier[1].frames = f1;
	return c;
}

static void run_ok(const struct kvt_sim_config *c, const struct kvt_sim_trace *t,
		   struct kvt_sim_result *r)
{
	char err[256] = "";
	int rc = kvt_sim_run(c, t, r, err, sizeof(err));

	if (rc)
		fprintf(stderr, "kvt_sim_run: %d %s\n", rc, err);
	CHECK_EQ(rc, 0);
}

/*
 * Two LRU tiers of 2 and 3 frames over a backing store, references
 * 1 2 3 1 4 2 5 1. Worked by hand (t0 and t1 listed LRU first); a page
 * with a copy in both tiers gives one up before any other page goes:
 *   1, 2   from the store into t0                    t0 [1 2]
 *   3      t0 evicts 1, only copy: written to t1     t0 [2 3]   t1 [1]
 *   1      hit in t1; t0 evicts 2 (to t1); 1 up,     t0 [3 1]   t1 [1 2]
 *          its t1 copy stays
 *   4      t0 drops 1 (held twice) before 3          t0 [3 4]   t1 [1 2]
 *   2      hit in t1; t0 evicts 3 (to t1); 2 up      t0 [4 2]   t1 [1 2 3]
 *   5      t0 drops 2 (held twice)                   t0 [4 5]   t1 [1 2 3]
 *   1      hit in t1; t0 evicts 4: t1 must make      t0 [5 1]   t1 [2 3 4]
 *          room: its LRU is 1 itself (its hit does
 *          not reorder it before it moves), dropped
 *          to the store, so 1 comes from the store
 * (LRU puts a page at the MRU end on an insert as on an access, so how a
 * miss is counted does not matter here.)
 */
static void hand_two_tiers(void)
{
	const uint64_t keys[] = { 1, 2, 3, 1, 4, 2, 5, 1 };
	struct kvt_sim_trace t;
	struct kvt_sim_result r;

	CHECK_EQ(kvt_sim_trace_keys(&t, keys, 8), 0);
	CHECK_EQ(t.npages, 5);
	struct kvt_sim_config c = tiers2("lru", 2, "lru", 3);
	c.page_bytes = 4096;
	c.tier[1].up_lat = 1e-3;	/* a read up out of t1: 1 ms */
	c.tier[1].down_bw = 4096e3;	/* a write into t1: 1 ms */
	c.origin_lat = 10e-3;
	run_ok(&c, &t, &r);
	CHECK_EQ(r.refs, 8);
	CHECK_EQ(r.tier[0].hits, 0);
	CHECK_EQ(r.tier[0].misses, 8);
	CHECK_EQ(r.tier[1].hits, 3);
	CHECK_EQ(r.tier[1].misses, 5);
	CHECK_EQ(r.origin_reads, 6);
	CHECK_EQ(r.tier[0].promotions, 2);
	CHECK_EQ(r.tier[0].demotions, 6);
	CHECK_EQ(r.tier[0].drops, 2);
	CHECK_EQ(r.tier[1].demotions, 1);
	CHECK_EQ(r.tier[1].drops, 1);
	CHECK_EQ(r.tier[0].down_bytes, 4 * 4096);	/* 1 2 3 4 written down */
	CHECK_EQ(r.tier[0].up_bytes, 2 * 4096);		/* 1 and 2 read up */
	CHECK_EQ(r.tier[0].bytes_in, 8 * 4096);
	CHECK_EQ(r.tier[0].bytes_out, 4 * 4096);
	CHECK_EQ(r.tier[1].bytes_in, 4 * 4096);
	CHECK_EQ(r.tier[1].bytes_out, 2 * 4096);
	CHECK_EQ(r.tier[0].used, 2);
	CHECK_EQ(r.tier[1].used, 3);
	/* 6 store reads of 10 ms, 2 reads up of 1 ms, 4 writes of 1 ms */
	CHECK(fabs(r.stall_s - 0.066) < 1e-9);
	CHECK(fabs(r.tier[1].move_s - 0.004) < 1e-9);
	kvt_sim_trace_free(&t);
}

/*
 * Three tiers of 1, 1 and 4 frames: references 1 2 3 push 1 to the last
 * tier; 1 again is a hit there, staged through tier 1 (where it keeps a
 * copy) and up to tier 0: two promotions, bytes across both boundaries.
 */
static void hand_three_tiers(void)
{
	const uint64_t keys[] = { 1, 2, 3, 1 };
	struct kvt_sim_trace t;
	struct kvt_sim_result r;
	struct kvt_sim_config c = tiers2("lru", 1, "lru", 1);

	c.ntiers = 3;
	snprintf(c.tier[2].policy, sizeof(c.tier[2].policy), "fifo");
	c.tier[2].frames = 4;
	CHECK_EQ(kvt_sim_trace_keys(&t, keys, 4), 0);
	run_ok(&c, &t, &r);
	CHECK_EQ(r.tier[2].hits, 1);
	CHECK_EQ(r.tier[0].misses, 4);
	CHECK_EQ(r.tier[1].misses, 4);
	CHECK_EQ(r.tier[1].promotions, 1);
	CHECK_EQ(r.tier[0].promotions, 1);
	CHECK_EQ(r.tier[1].up_bytes, 1);
	CHECK_EQ(r.tier[0].up_bytes, 1);
	/* 1 down twice, 2 down twice (the second time when 1 is staged) */
	CHECK_EQ(r.tier[0].down_bytes, 3);
	CHECK(r.tier[1].down_bytes >= 2);
	CHECK_EQ(r.origin_reads, 3);
	kvt_sim_trace_free(&t);
}

/* A pager-like trace: NEW pins a tail until it is sealed; FREE removes
 * every copy; SCORE mass is split by where the pages are; without a
 * backing store the last tier keeps only copies. */
static void pins_and_scores(void)
{
	struct kvt_trace_rec rec[32];
	size_t n = 0;
	struct kvt_sim_trace t;
	struct kvt_sim_result r;
	char err[256];

#define REC(ev, k, st, fl) rec[n++] = (struct kvt_trace_rec){ .event = (ev), .key = (k), \
	.step = (st), .seq = 0, .layer = 0, .index = (uint32_t)(k), .flags = (fl), \
	.from = KVT_TRACE_NONE, .to = KVT_TRACE_NONE }
	REC(KVT_EV_NEW, 0, 0, 0);		/* tail: pinned */
	REC(KVT_EV_NEW, 1, 0, 0);		/* another layer's tail below */
	rec[n - 1].layer = 1;
	REC(KVT_EV_ACCESS, 0, 1, 0);
	REC(KVT_EV_ACCESS, 1, 1, 0);
	REC(KVT_EV_NEW, 2, 1, 0);		/* tier 0 (2 frames) full: 0 and 1 pinned */
	rec[n - 1].layer = 3;
	REC(KVT_EV_ACCESS, 0, 2, KVT_TF_SEALED);	/* 0 sealed: now evictable */
	REC(KVT_EV_NEW, 3, 2, 0);		/* evicts 0 to tier 1 */
	rec[n - 1].layer = 2;
	REC(KVT_EV_SCORE, 0, 2, 0);
	rec[n - 1].score = 0.25f;
	REC(KVT_EV_SCORE, 1, 2, 0);
	rec[n - 1].score = 0.75f;
	REC(KVT_EV_FREE, 1, 3, 0);
	REC(KVT_EV_ACCESS, 1, 3, 0);		/* freed: a miss everywhere */
#undef REC
	CHECK_EQ(kvt_sim_trace_recs(&t, rec, n, NULL, err, sizeof(err)), 0);
	CHECK_EQ(t.nnew, 4);
	struct kvt_sim_config c = tiers2("lru", 2, "lru", 4);
	c.backed = 0;
	run_ok(&c, &t, &r);
	CHECK_EQ(r.refused, 1);			/* NEW 2: both frames pinned */
	CHECK_EQ(r.tier[0].demotions, 1);	/* 0 went down for 3 */
	CHECK_EQ(r.tier[0].hits, 3);
	CHECK(fabs(r.mass_total - 1.0) < 1e-6);
	CHECK(fabs(r.tier[0].mass - 0.75) < 1e-6);	/* 1 was up, 0 down */
	CHECK(fabs(r.tier[1].mass - 0.25) < 1e-6);
	CHECK_EQ(r.origin_reads, 1);
	kvt_sim_trace_free(&t);

	/* No store: a full last tier of only copies refuses a promotion. */
	const uint64_t keys[] = { 1, 2, 3, 4, 5 };
	CHECK_EQ(kvt_sim_trace_keys(&t, keys, 5), 0);
	c = tiers2("lru", 1, "lru", 2);
	c.backed = 0;
	run_ok(&c, &t, &r);
	CHECK_EQ(r.tier[1].used, 2);
	CHECK(r.refused >= 1);
	kvt_sim_trace_free(&t);
}

/* A policy that writes down every call it gets ("I<key>@<time>" on_insert,
 * "A<key>@<time>" on_access, "R<key>" on_remove) and evicts the page
 * whose last call has the lowest time: the calls themselves under test. */
static char call_log[1024];

struct tlog {
	uint64_t *key, *time;
	size_t cap, n;
};

static void log_add(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_add(const char *fmt, ...)
{
	size_t len = strlen(call_log);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(call_log + len, sizeof(call_log) - len, fmt, ap);
	va_end(ap);
}

static int tlog_init(void **st, const char *params, size_t cap, char *err, size_t errlen)
{
	struct tlog *l = calloc(1, sizeof(*l));
	(void)params;
	if (!l)
		return -ENOMEM;
	l->key = calloc(cap, sizeof(*l->key));
	l->time = calloc(cap, sizeof(*l->time));
	l->cap = cap;
	*st = l;
	return l->key && l->time ? 0 : -ENOMEM;
}

static void tlog_destroy(void *st)
{
	struct tlog *l = st;
	free(l->key);
	free(l->time);
	free(l);
}

static size_t tlog_find(const struct tlog *l, uint64_t key)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->key[i] == key)
			return i;
	CHECK(0);
	return 0;
}

static void tlog_insert(void *st, const struct kvt_ref *r, void *meta)
{
	struct tlog *l = st;
	(void)meta;
	CHECK(l->n < l->cap);
	l->key[l->n] = r->key;
	l->time[l->n++] = r->time;
	log_add("I%llu@%llu ", (unsigned long long)r->key, (unsigned long long)r->time);
}

static void tlog_access(void *st, const struct kvt_ref *r, void *meta)
{
	struct tlog *l = st;
	(void)meta;
	l->time[tlog_find(l, r->key)] = r->time;
	log_add("A%llu@%llu ", (unsigned long long)r->key, (unsigned long long)r->time);
}

static void tlog_remove(void *st, uint64_t key, void *meta)
{
	struct tlog *l = st;
	size_t i = tlog_find(l, key);
	(void)meta;
	l->n--;
	l->key[i] = l->key[l->n];
	l->time[i] = l->time[l->n];
	log_add("R%llu ", (unsigned long long)key);
}

static size_t tlog_victims(void *st, uint64_t *out, size_t want,
			   int (*pinned)(void *, uint64_t), void *arg)
{
	struct tlog *l = st;
	size_t got = 0;

	for (; got < want; got++) {
		size_t best = SIZE_MAX;
		for (size_t i = 0; i < l->n; i++) {
			int taken = 0;
			for (size_t j = 0; j < got; j++)
				taken |= out[j] == l->key[i];
			if (taken || (pinned && pinned(arg, l->key[i])))
				continue;
			if (best == SIZE_MAX || l->time[i] < l->time[best])
				best = i;
		}
		if (best == SIZE_MAX)
			break;
		out[got] = l->key[best];
	}
	return got;
}

static const struct kvt_policy_ops test_log = {
	.name = "tlog", .meta_size = 8,
	.init = tlog_init, .destroy = tlog_destroy, .on_insert = tlog_insert,
	.on_access = tlog_access, .on_remove = tlog_remove, .victims = tlog_victims,
};

/*
 * The pager's rule for the calls, as land() and touch() make them: the
 * clock (kvt_ref.time) moves on once per counted use (a page's first
 * reference in a step), and a page brought up on demand is used by its
 * arrival: on_insert at the new time and no on_access in that step. A
 * prefetched page gets on_insert at the time it lands and on_access when
 * it is first read.
 */
static void policy_calls(void)
{
	struct kvt_trace_rec rec[20];
	struct kvt_sim_trace t, g;
	struct kvt_sim_result r;
	char err[256];
	size_t n = 0;

	/*
	 * Keys 1 2 1 3 in 2 frames, one step per record (ids 0 1 0 2): 1 and
	 * 2 arrive at times 1 and 2; 1 is a hit at 3; 3 evicts 2 (last call
	 * at 2, before 1's at 3) and arrives at 4. The fast path and the
	 * general one (an event array) make the same calls.
	 */
	const uint64_t keys[] = { 1, 2, 1, 3 };
	const char *want = "I0@1 I1@2 A0@3 R1 I2@4 ";
	struct kvt_sim_config c = one_tier("tlog", 2);
	c.tier[0].ops = &test_log;
	CHECK_EQ(kvt_sim_trace_keys(&t, keys, 4), 0);
	CHECK_EQ(kvt_sim_trace_keys(&g, keys, 4), 0);
	g.ev = malloc(4);
	CHECK(g.ev);
	memset(g.ev, KVT_EV_ACCESS, 4);
	call_log[0] = 0;
	run_ok(&c, &t, &r);
	if (strcmp(call_log, want))
		fprintf(stderr, "fast: %s\n", call_log);
	CHECK(!strcmp(call_log, want));
	call_log[0] = 0;
	run_ok(&c, &g, &r);
	if (strcmp(call_log, want))
		fprintf(stderr, "general: %s\n", call_log);
	CHECK(!strcmp(call_log, want));
	kvt_sim_trace_free(&t);
	kvt_sim_trace_free(&g);

	/*
	 * Within one step (0): 1 2 1 in one frame, then 1 again. 1 arrives
	 * at 1 and 2 at 2 (evicting 1); 1 comes back, evicting 2, but was
	 * used in this step already: no tick, on_insert at 2. The last 1 is
	 * a hit in a step that counted it: no call at all.
	 */
	for (int i = 0; i < 4; i++)
		rec[n++] = (struct kvt_trace_rec){ .event = KVT_EV_ACCESS, .step = 0,
			.key = i == 1 ? 2 : 1, .seq = KVT_REF_NONE, .layer = KVT_REF_NONE,
			.index = KVT_REF_NONE, .from = KVT_TRACE_NONE, .to = KVT_TRACE_NONE };
	CHECK_EQ(kvt_sim_trace_recs(&t, rec, n, NULL, err, sizeof(err)), 0);
	c = one_tier("tlog", 1);
	c.tier[0].ops = &test_log;
	call_log[0] = 0;
	run_ok(&c, &t, &r);
	if (strcmp(call_log, "I0@1 R0 I1@2 R1 I0@2 "))
		fprintf(stderr, "one step: %s\n", call_log);
	CHECK(!strcmp(call_log, "I0@1 R0 I1@2 R1 I0@2 "));
	CHECK_EQ(r.tier[0].hits, 1);
	kvt_sim_trace_free(&t);

	/*
	 * Prefetch: layers 0 and 1 of one page (ids 0 and 1), read in that
	 * order for 3 steps; tier 0 (tlog) has one frame, tier 1 (lru) ten;
	 * depth 1. Step 0: 0 arrives at 1; 1 evicts it (written to tier 1)
	 * and arrives at 2. Step 1: 0 comes up from tier 1 on demand,
	 * evicting 1 (written down), at 3; the prefetch of 1 evicts 0 (a
	 * copy is below: dropped) and lands at 3, no tick; reading 1 is its
	 * use: on_access at 4. Step 2 the same at 5 and 6, 1 dropped this
	 * time (its copy from step 1 is still in tier 1).
	 */
	n = 0;
	for (uint32_t st = 0; st < 3; st++)
		for (uint32_t l = 0; l < 2; l++)
			rec[n++] = (struct kvt_trace_rec){ .event = KVT_EV_ACCESS, .step = st,
				.key = (uint64_t)l << 32, .seq = 0, .layer = l, .index = 0,
				.from = KVT_TRACE_NONE, .to = KVT_TRACE_NONE };
	CHECK_EQ(kvt_sim_trace_recs(&t, rec, n, NULL, err, sizeof(err)), 0);
	c = tiers2("tlog", 1, "lru", 10);
	c.tier[0].ops = &test_log;
	c.prefetch_depth = 1;
	call_log[0] = 0;
	run_ok(&c, &t, &r);
	want = "I0@1 R0 I1@2 R1 I0@3 R0 I1@3 A1@4 R1 I0@5 R0 I1@5 A1@6 ";
	if (strcmp(call_log, want))
		fprintf(stderr, "prefetch: %s\n", call_log);
	CHECK(!strcmp(call_log, want));
	CHECK_EQ(r.prefetch_issued, 2);
	CHECK_EQ(r.prefetch_hit, 2);
	CHECK_EQ(r.tier[0].hits, 2);
	kvt_sim_trace_free(&t);
}

/* The fast single-tier path and the general one agree on everything. */
static void fast_equals_general(void)
{
	static const char *const pols[] = { "lru", "clock", "sieve", "s3fifo", "arc", "2q",
					    "lfu", "fifo", "slru", "mru" };
	size_t n = t_scale(200000);
	uint64_t *keys = malloc(n * sizeof(*keys));
	struct kvt_sim_trace t, g;

	CHECK(keys);
	CHECK_EQ(kvt_sim_gen_zipf(n, 5000, 0.9, 42, keys), 0);
	CHECK_EQ(kvt_sim_trace_keys(&t, keys, n), 0);
	CHECK_EQ(kvt_sim_trace_keys(&g, keys, n), 0);
	g.ev = malloc(n);			/* an event array: the general path */
	CHECK(g.ev);
	memset(g.ev, KVT_EV_ACCESS, n);
	for (size_t p = 0; p < sizeof(pols) / sizeof(pols[0]); p++) {
		if (!kvt_policy_find(pols[p]))
			continue;
		struct kvt_sim_config c = one_tier(pols[p], 700);
		struct kvt_sim_result a, b;
		c.page_bytes = 8192;
		c.origin_lat = 1e-4;
		run_ok(&c, &t, &a);
		run_ok(&c, &g, &b);
		if (memcmp(&a, &b, sizeof(a))) {
			fprintf(stderr, "%s: fast %llu hits, general %llu\n", pols[p],
				(unsigned long long)a.tier[0].hits, (unsigned long long)b.tier[0].hits);
			CHECK(0);
		}
		CHECK(a.tier[0].hits > 0 && a.tier[0].hits < n);
	}
	kvt_sim_trace_free(&t);
	kvt_sim_trace_free(&g);
	free(keys);
}

static char *mrc_csv(const struct kvt_sim_trace *t, unsigned threads, char **json)
{
	const char *pols[] = { "lru", "clock", "s3fifo", "sieve", "arc" };
	const uint64_t frames[] = { 50, 100, 200, 400, 800 };
	struct kvt_sim_point pt[25];
	char err[256], *buf = NULL;
	size_t len = 0;
	FILE *f;

	CHECK_EQ(kvt_sim_mrc(t, pols, 5, frames, 5, threads, pt, NULL, NULL, err, sizeof(err)),
		 0);
	f = open_memstream(&buf, &len);
	CHECK(f);
	kvt_sim_mrc_csv(f, pt, 25, t->npages);
	fclose(f);
	f = open_memstream(json, &len);
	CHECK(f);
	kvt_sim_mrc_json(f, pt, 25, t->npages, "zipf");
	fclose(f);
	for (int i = 1; i < 25; i++)	/* policy-major, sizes in the order given */
		CHECK(!strcmp(pt[i].policy, pt[i - 1].policy) ? pt[i].frames > pt[i - 1].frames
							       : pt[i].frames == 50);
	return buf;
}

static void mrc_threads(void)
{
	size_t n = t_scale(100000);
	uint64_t *keys = malloc(n * sizeof(*keys));
	struct kvt_sim_trace t;
	char *j1, *j2, *j4;

	CHECK(keys);
	CHECK_EQ(kvt_sim_gen_zipf(n, 3000, 1.0, 7, keys), 0);
	CHECK_EQ(kvt_sim_trace_keys(&t, keys, n), 0);
	char *a = mrc_csv(&t, 1, &j1), *b = mrc_csv(&t, 2, &j2), *c = mrc_csv(&t, 4, &j4);
	CHECK(!strcmp(a, b));
	CHECK(!strcmp(a, c));
	CHECK(!strcmp(j1, j2));
	CHECK(!strcmp(j1, j4));
	CHECK(!strncmp(a, "policy,frames,size_pct,refs,hits,misses,miss_ratio\nlru,50,", 58));
	free(a);
	free(b);
	free(c);
	free(j1);
	free(j2);
	free(j4);
	kvt_sim_trace_free(&t);
	free(keys);
}

/* A tiny Belady for this test: evict the page used again furthest ahead
 * (kvt_ref.next). Linear in the capacity for everything: small tiers only. */
struct bel {
	uint64_t *key, *next;
	size_t cap, n;
};

static int bel_init(void **st, const char *params, size_t cap, char *err, size_t errlen)
{
	struct bel *b = calloc(1, sizeof(*b));
	(void)params;
	if (!b)
		return -ENOMEM;
	b->key = calloc(cap, sizeof(*b->key));
	b->next = calloc(cap, sizeof(*b->next));
	b->cap = cap;
	*st = b;
	return b->key && b->next ? 0 : -ENOMEM;
}

static void bel_destroy(void *st)
{
	struct bel *b = st;
	free(b->key);
	free(b->next);
	free(b);
}

static size_t bel_find(const struct bel *b, uint64_t key)
{
	for (size_t i = 0; i < b->n; i++)
		if (b->key[i] == key)
			return i;
	CHECK(0);
	return 0;
}

static void bel_insert(void *st, const struct kvt_ref *r, void *meta)
{
	struct bel *b = st;
	(void)meta;
	CHECK(b->n < b->cap);
	b->key[b->n] = r->key;
	b->next[b->n++] = r->next;
}

static void bel_access(void *st, const struct kvt_ref *r, void *meta)
{
	struct bel *b = st;
	(void)meta;
	b->next[bel_find(b, r->key)] = r->next;
}

static void bel_remove(void *st, uint64_t key, void *meta)
{
	struct bel *b = st;
	size_t i = bel_find(b, key);
	(void)meta;
	b->n--;
	b->key[i] = b->key[b->n];
	b->next[i] = b->next[b->n];
}

static size_t bel_victims(void *st, uint64_t *out, size_t want,
			  int (*pinned)(void *, uint64_t), void *arg)
{
	struct bel *b = st;
	size_t got = 0;

	for (; got < want; got++) {
		size_t best = SIZE_MAX;
		for (size_t i = 0; i < b->n; i++) {
			int taken = 0;
			for (size_t j = 0; j < got; j++)
				taken |= out[j] == b->key[i];
			if (taken || (pinned && pinned(arg, b->key[i])))
				continue;
			if (best == SIZE_MAX || b->next[i] > b->next[best])
				best = i;
		}
		if (best == SIZE_MAX)
			break;
		out[got] = b->key[best];
	}
	return got;
}

static const struct kvt_policy_ops test_belady = {
	.name = "tbelady", .meta_size = 8, .flags = KVT_POLICY_OFFLINE,
	.init = bel_init, .destroy = bel_destroy, .on_insert = bel_insert,
	.on_access = bel_access, .on_remove = bel_remove, .victims = bel_victims,
};

static double scan_miss(const struct kvt_sim_trace *t, const char *pol,
			const struct kvt_policy_ops *ops, double frac)
{
	struct kvt_sim_config c = one_tier(pol, (uint64_t)(frac * t->npages));
	struct kvt_sim_result r;

	c.tier[0].ops = ops;
	run_ok(&c, t, &r);
	return (double)r.tier[0].misses / (double)r.refs;
}

/* The decode scan: every classic policy misses (nearly) always at 25% and
 * 50% of the pages; Belady misses about 1 - capacity share. */
static void scan_classic(void)
{
	static const char *const pols[] = { "lru", "fifo", "clock", "arc", "s3fifo", "sieve" };
	uint64_t *keys, *steps;
	int64_t n = kvt_sim_gen_scan(2, 256, 16, 60, &keys, &steps);
	struct kvt_sim_trace t;

	CHECK(n > 0);
	/* As a kvtier trace would carry it: one step per decode step. */
	CHECK_EQ(kvt_sim_trace_keys(&t, keys, (size_t)n), 0);
	t.step = steps;
	CHECK_EQ(t.npages, 2 * (256 + 3));
	for (size_t p = 0; p < sizeof(pols) / sizeof(pols[0]); p++) {
		if (!kvt_policy_find(pols[p]))
			continue;
		double m25 = scan_miss(&t, pols[p], NULL, 0.25);
		double m50 = scan_miss(&t, pols[p], NULL, 0.50);
		if (getenv("T_SIM_VERBOSE") || m25 < 0.99 || m50 < 0.99)
			fprintf(stderr, "%s: miss %.4f %.4f\n", pols[p], m25, m50);
		CHECK(m25 >= 0.99 && m50 >= 0.99);
	}
	CHECK_EQ(kvt_sim_trace_next(&t), 0);
	double b25 = scan_miss(&t, "tbelady", &test_belady, 0.25);
	double b50 = scan_miss(&t, "tbelady", &test_belady, 0.50);
	if (getenv("T_SIM_VERBOSE"))
		fprintf(stderr, "tbelady: miss %.4f %.4f\n", b25, b50);
	CHECK(b25 > 0.70 && b25 < 0.78);
	CHECK(b50 > 0.45 && b50 < 0.53);
	/* On a pure scan MRU keeps what Belady keeps, nearly. */
	CHECK(fabs(scan_miss(&t, "mru", NULL, 0.25) - b25) < 0.01);
	kvt_sim_trace_free(&t);
	free(keys);
}

/* The decode scan as bare page ids: an oracleGeneral file written here
 * (24-byte records: time, id, size, next), no steps, layers or sequences.
 * The default policy (auto) must find the scan from the ids alone: within
 * 2 points of Belady's miss ratio at 25% and 50% of the pages; LRU misses
 * every time. */
static void scan_bare(void)
{
	uint64_t *keys, *steps;
	int64_t n = kvt_sim_gen_scan(4, 256, 16, 40, &keys, &steps);
	char path[512], err[256];
	struct kvt_sim_trace t;
	FILE *f;

	CHECK(n > 0);
	snprintf(path, sizeof(path), "%s/scan-%d.oracleGeneral", t_dir(), (int)getpid());
	CHECK(f = fopen(path, "wb"));
	for (int64_t i = 0; i < n; i++) {
		uint8_t rec[24] = { 0 };
		uint32_t size = 4096;
		int64_t next = -1;	/* not used by the replay of auto, lru, mru */

		memcpy(rec + 4, &keys[i], 8);
		memcpy(rec + 12, &size, 4);
		memcpy(rec + 16, &next, 8);
		CHECK(fwrite(rec, sizeof(rec), 1, f) == 1);
	}
	CHECK(fclose(f) == 0);
	CHECK_EQ(kvt_sim_trace_load(path, &t, err, sizeof(err)), 0);
	unlink(path);
	CHECK(!strcmp(t.format, "oracleGeneral"));
	CHECK_EQ(kvt_sim_trace_next(&t), 0);
	for (int k = 0; k < 2; k++) {
		double frac = k ? 0.50 : 0.25;
		double bel = scan_miss(&t, "tbelady", &test_belady, frac);
		double au = scan_miss(&t, "auto", NULL, frac);
		double lru = scan_miss(&t, "lru", NULL, frac);

		fprintf(stderr, "bare ids at %.0f%%: belady %.4f, auto %.4f, lru %.4f\n",
			frac * 100, bel, au, lru);
		CHECK(au - bel <= 0.02);
		CHECK(lru >= 0.99);
	}
	kvt_sim_trace_free(&t);
	free(keys);
	free(steps);
}

/* Belady on a hand trace, 1 2 3 1 2 4 1 2 in 2 frames (a miss always
 * inserts): 3 evicts 2 (used again later than 1), 2 evicts 3 (never
 * again), 4 evicts 2 (used after 1): misses 1 2 3 2 4 2, six; LRU has
 * eight. next is the time of the next use. */
static void belady_hand(void)
{
	const uint64_t keys[] = { 1, 2, 3, 1, 2, 4, 1, 2 };
	struct kvt_sim_trace t;
	struct kvt_sim_config c = one_tier("tbelady", 2);
	struct kvt_sim_result r;
	char err[256];

	CHECK_EQ(kvt_sim_trace_keys(&t, keys, 8), 0);
	c.tier[0].ops = &test_belady;
	CHECK_EQ(kvt_sim_run(&c, &t, &r, err, sizeof(err)), -EINVAL);	/* no next yet */
	CHECK(strstr(err, "next"));
	CHECK_EQ(kvt_sim_trace_next(&t), 0);
	CHECK_EQ(t.next[0], 4);			/* 1 again at time 4 */
	CHECK_EQ(t.next[2], UINT32_MAX);	/* 3 never */
	run_ok(&c, &t, &r);
	CHECK_EQ(r.tier[0].misses, 6);
	c = one_tier("lru", 2);
	run_ok(&c, &t, &r);
	CHECK_EQ(r.tier[0].misses, 8);
	kvt_sim_trace_free(&t);
}

/* The watermarks and full policy specs of a trace's configuration text;
 * background reclaim keeps wm_low frames free after every record. */
static void config_text(void)
{
	struct kvt_sim_trace t = { 0 };
	struct kvt_sim_config c;
	struct kvt_sim_result r;

	t.has_hdr = 1;
	t.hdr.frames[0] = 200;
	t.hdr.frames[1] = 400;
	snprintf(t.hdr.policy[0], sizeof(t.hdr.policy[0]), "s3fifo");
	snprintf(t.hdr.policy[1], sizeof(t.hdr.policy[1]), "clock");
	t.config = strdup("; comment\n[tier.fast]\npolicy = s3fifo:small=20\nwm_min = 1\n"
			  "wm_low = 2\nwm_high = 4\n[tier.host]\nwm_low = 5\n[io]\nwm_low = 9\n");
	CHECK(t.config);
	kvt_sim_config_trace(&c, &t);
	CHECK_EQ(c.ntiers, 2);
	CHECK(!strcmp(c.tier[0].policy, "s3fifo:small=20"));
	CHECK(!strcmp(c.tier[1].policy, "clock"));
	CHECK_EQ(c.tier[0].wm_min, 2);
	CHECK_EQ(c.tier[0].wm_low, 4);
	CHECK_EQ(c.tier[0].wm_high, 8);
	CHECK_EQ(c.tier[1].wm_low, 20);
	kvt_sim_trace_free(&t);

	uint64_t keys[5000];
	CHECK_EQ(kvt_sim_gen_zipf(5000, 2000, 0.8, 3, keys), 0);
	CHECK_EQ(kvt_sim_trace_keys(&t, keys, 5000), 0);
	c = tiers2("lru", 100, "lru", 200);
	c.tier[0].wm_low = 10;
	c.tier[0].wm_high = 20;
	run_ok(&c, &t, &r);
	CHECK(r.tier[0].used <= 90 && r.tier[0].used >= 80);
	CHECK(r.tier[0].demotions > 0);
	kvt_sim_trace_free(&t);
}

/* The layer-ahead prefetch, by hand: two layers of one page, one frame
 * in tier 0, read 0 then 1 each step. Without prefetch every reference
 * misses (the frame alternates). With depth 1, from step 1 on reading
 * page 0 brings page 1 up from tier 1 at once (evicting page 0, which
 * has a copy there: a drop), and page 1 is a hit: 9 hits, 9 prefetches,
 * all used. Step 0 has nothing to prefetch from: page 1 is in no tier. */
static void prefetch(void)
{
	struct kvt_trace_rec rec[20];
	size_t n = 0;
	struct kvt_sim_trace t;
	struct kvt_sim_result r0, r1;
	char err[256];

	for (uint32_t st = 0; st < 10; st++)
		for (uint32_t l = 0; l < 2; l++)
			rec[n++] = (struct kvt_trace_rec){ .event = KVT_EV_ACCESS, .step = st,
				.key = (uint64_t)l << 32, .seq = 0, .layer = l, .index = 0,
				.from = KVT_TRACE_NONE, .to = KVT_TRACE_NONE };
	CHECK_EQ(kvt_sim_trace_recs(&t, rec, n, NULL, err, sizeof(err)), 0);
	struct kvt_sim_config c = tiers2("lru", 1, "lru", 10);
	run_ok(&c, &t, &r0);
	CHECK_EQ(r0.tier[0].hits, 0);
	CHECK_EQ(r0.prefetch_issued, 0);
	c.prefetch_depth = 1;
	c.tier[1].up_lat = 1e-3;
	run_ok(&c, &t, &r1);
	CHECK_EQ(r1.tier[0].hits, 9);
	CHECK_EQ(r1.prefetch_issued, 9);
	CHECK_EQ(r1.prefetch_hit, 9);
	CHECK_EQ(r1.prefetch_wasted, 0);
	CHECK_EQ(r1.prefetch_dropped, 0);
	CHECK(fabs(r1.prefetch_s - 9e-3) < 1e-9);	/* 9 reads up, off the demand path */
	CHECK(fabs(r1.stall_s - 9e-3) < 1e-9);		/* page 0 from step 1 on */
	kvt_sim_trace_free(&t);

	/* Three layers, the same frame: depth 2 is cut to the one layer
	 * tier 0 holds, as in the pager, and runs as depth 1 does (uncut,
	 * the prefetch of layer 2 would find only the unused prefetch of
	 * layer 1 to evict, and be dropped). */
	n = 0;
	for (uint32_t st = 0; st < 6; st++)
		for (uint32_t l = 0; l < 3; l++)
			rec[n++] = (struct kvt_trace_rec){ .event = KVT_EV_ACCESS, .step = st,
				.key = (uint64_t)l << 32, .seq = 0, .layer = l, .index = 0,
				.from = KVT_TRACE_NONE, .to = KVT_TRACE_NONE };
	CHECK_EQ(kvt_sim_trace_recs(&t, rec, n, NULL, err, sizeof(err)), 0);
	c.prefetch_depth = 1;
	run_ok(&c, &t, &r0);
	c.prefetch_depth = 2;
	run_ok(&c, &t, &r1);
	CHECK(r0.prefetch_issued > 0);
	CHECK_EQ(r1.prefetch_issued, r0.prefetch_issued);
	CHECK_EQ(r1.prefetch_hit, r0.prefetch_hit);
	CHECK_EQ(r1.tier[0].hits, r0.tier[0].hits);
	CHECK_EQ(r1.prefetch_dropped, 0);
	kvt_sim_trace_free(&t);

	/* The cut follows a layer as it grows, as the pager's does. Sequence
	 * 0 has one page in layers 0 and 1, sequence 1 one page in layer 0;
	 * two frames, read 1:0, 0:0, 0:1 each step: the loop is one longer
	 * than the tier, and reading 0:0 prefetches 0:1. After four steps
	 * both layers of sequence 0 grow to three pages (sealed NEWs): two
	 * frames hold no layer, and four more steps prefetch nothing more. */
	struct kvt_trace_rec g[64];
	size_t ng = 0, n1 = 0;
#define GREC(ev, st, sq, ly, ix) g[ng++] = (struct kvt_trace_rec){ .event = (ev), .step = (st), \
	.key = (uint64_t)(sq) << 40 | (uint64_t)(ly) << 20 | (ix), .seq = (sq), .layer = (ly), \
	.index = (ix), .flags = (ev) == KVT_EV_NEW ? KVT_TF_SEALED : 0, \
	.from = KVT_TRACE_NONE, .to = KVT_TRACE_NONE }
	GREC(KVT_EV_NEW, 0, 0, 0, 0);
	GREC(KVT_EV_NEW, 0, 0, 1, 0);
	GREC(KVT_EV_NEW, 0, 1, 0, 0);
	for (uint32_t st = 1; st <= 8; st++) {
		if (st == 5) {
			n1 = ng;
			for (uint32_t ix = 1; ix < 3; ix++) {
				GREC(KVT_EV_NEW, st, 0, 0, ix);
				GREC(KVT_EV_NEW, st, 0, 1, ix);
			}
		}
		GREC(KVT_EV_ACCESS, st, 1, 0, 0);
		GREC(KVT_EV_ACCESS, st, 0, 0, 0);
		GREC(KVT_EV_ACCESS, st, 0, 1, 0);
	}
#undef GREC
	c = tiers2("lru", 2, "lru", 10);
	c.prefetch_depth = 1;
	CHECK_EQ(kvt_sim_trace_recs(&t, g, n1, NULL, err, sizeof(err)), 0);
	run_ok(&c, &t, &r0);
	kvt_sim_trace_free(&t);
	CHECK_EQ(kvt_sim_trace_recs(&t, g, ng, NULL, err, sizeof(err)), 0);
	run_ok(&c, &t, &r1);
	kvt_sim_trace_free(&t);
	CHECK(r0.prefetch_issued > 0);
	CHECK_EQ(r1.prefetch_issued, r0.prefetch_issued);
}

static void bad_inputs(void)
{
	char path[] = "/tmp/kvt-t_sim-XXXXXX", err[256];
	struct kvt_sim_trace t;
	struct kvt_sim_config c;
	struct kvt_sim_result r;
	int fd = mkstemp(path);
	uint8_t buf[60] = { 0 };

	CHECK(fd >= 0);
	CHECK_EQ(write(fd, buf, 50), 50);	/* two records and 2 bytes */
	close(fd);
	CHECK_EQ(kvt_sim_trace_load(path, &t, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "byte offset 48"));
	CHECK(strstr(err, path));
	CHECK(strstr(err, "not a kvtier trace"));
	CHECK_EQ(kvt_sim_trace_load("/nonexistent/trace", &t, err, sizeof(err)), -ENOENT);
	CHECK(strstr(err, "/nonexistent/trace"));
	fd = open(path, O_WRONLY | O_TRUNC);
	CHECK(fd >= 0);
	close(fd);
	CHECK_EQ(kvt_sim_trace_load(path, &t, err, sizeof(err)), -EINVAL);	/* empty */
	/* A kvtier trace that is cut short. */
	fd = open(path, O_WRONLY | O_TRUNC);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, KVT_TRACE_MAGIC "\x01\0\0\0", 12), 12);
	close(fd);
	CHECK(kvt_sim_trace_load(path, &t, err, sizeof(err)) < 0);
	CHECK(strstr(err, path));
	unlink(path);

	struct kvt_trace_rec rec[2] = { { .event = KVT_EV_ACCESS, .key = 1, .from = 0xff, .to = 0xff },
					{ .event = 77, .key = 2, .from = 0xff, .to = 0xff } };
	CHECK_EQ(kvt_sim_trace_recs(&t, rec, 2, NULL, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "byte offset 48"));
	rec[1].event = KVT_EV_ACCESS;
	rec[1].from = 9;
	CHECK_EQ(kvt_sim_trace_recs(&t, rec, 2, NULL, err, sizeof(err)), -EINVAL);
	rec[1].from = 0xff;
	CHECK_EQ(kvt_sim_trace_recs(&t, rec, 2, NULL, err, sizeof(err)), 0);
	kvt_sim_trace_free(&t);

	/* In a trace the pager wrote, two pages made in one slot with no FREE
	 * between (a record altered: the pager's keys are slot | generation
	 * << 32) are refused, naming the record; the same with the FREE, or
	 * after a GAP (records may be missing), are read. */
	{
		const struct kvt_trace_hdr ph = { .source = KVT_SRC_PAGER };
		const uint64_t g1 = 1ull << 32, g2 = 2ull << 32;
		struct kvt_trace_rec x[4] = {
			{ .event = KVT_EV_NEW, .key = 5 | g1, .from = 0xff, .to = 0 },
			{ .event = KVT_EV_ACCESS, .key = 5 | g1, .from = 0xff, .to = 0xff },
			{ .event = KVT_EV_FREE, .key = 5 | g1, .from = 0xff, .to = 0xff },
			{ .event = KVT_EV_NEW, .key = 5 | g2, .from = 0xff, .to = 0 },
		};

		CHECK_EQ(kvt_sim_trace_recs(&t, x, 4, &ph, err, sizeof(err)), 0);
		kvt_sim_trace_free(&t);
		x[2].key = 6 | g1;		/* frees another slot's page */
		CHECK_EQ(kvt_sim_trace_recs(&t, x, 4, &ph, err, sizeof(err)), -EINVAL);
		CHECK(strstr(err, "record 3") && strstr(err, "slot 5"));
		x[2] = (struct kvt_trace_rec){ .event = KVT_EV_NEW, .key = 5 | g1, .from = 0xff, .to = 0 };
		CHECK_EQ(kvt_sim_trace_recs(&t, x, 4, &ph, err, sizeof(err)), -EINVAL);
		CHECK(strstr(err, "record 2"));	/* the same page made twice */
		x[1] = (struct kvt_trace_rec){ .event = KVT_EV_GAP, .from = 0xff, .to = 0xff };
		CHECK_EQ(kvt_sim_trace_recs(&t, x, 4, &ph, err, sizeof(err)), 0);
		kvt_sim_trace_free(&t);
	}
	CHECK_EQ(kvt_sim_trace_recs(&t, rec, 2, NULL, err, sizeof(err)), 0);
	c = one_tier("nosuchpolicy", 4);
	CHECK_EQ(kvt_sim_run(&c, &t, &r, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "nosuchpolicy"));
	c = one_tier("lru:bogus=1", 4);
	CHECK_EQ(kvt_sim_run(&c, &t, &r, err, sizeof(err)), -EINVAL);
	c = one_tier("lru", 0);
	CHECK_EQ(kvt_sim_run(&c, &t, &r, err, sizeof(err)), -EINVAL);
	c.ntiers = 0;
	CHECK_EQ(kvt_sim_run(&c, &t, &r, err, sizeof(err)), -EINVAL);
	const char *bad[] = { "lru", "nope" };
	uint64_t fr[] = { 2 };
	struct kvt_sim_point pt[2];
	CHECK_EQ(kvt_sim_mrc(&t, bad, 2, fr, 1, 2, pt, NULL, NULL, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "nope"));
	struct kvt_sim_tier ti = { 0 };
	CHECK_EQ(kvt_sim_parse_costs("bw=12G,lat=80us", &ti, err, sizeof(err)), 0);
	CHECK(fabs(ti.up_bw - 12.0 * (1ull << 30)) < 1 && fabs(ti.down_lat - 80e-6) < 1e-12);
	CHECK_EQ(kvt_sim_parse_costs("bw=fast", &ti, err, sizeof(err)), -EINVAL);
	CHECK_EQ(kvt_sim_parse_costs("speed=1G", &ti, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "speed"));
	kvt_sim_trace_free(&t);
}

int main(void)
{
	hand_two_tiers();
	hand_three_tiers();
	pins_and_scores();
	policy_calls();
	belady_hand();
	config_text();
	prefetch();
	fast_equals_general();
	mrc_threads();
	scan_classic();
	scan_bare();
	bad_inputs();
	printf("t_sim: ok\n");
	return 0;
}
