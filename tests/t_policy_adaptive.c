/* SPDX-License-Identifier: MIT */
/*
 * The segmented and adaptive policies (2q, slru, arc), driven by the cache
 * simulator in policy_sim.h. No pager. Every trace below is worked out by
 * hand in its comment; the test checks the policy against the hand.
 *
 * Notation: capacity 4 unless said; "m" a miss, "h" a hit, "-k" the page
 * evicted by that miss. Lists are written oldest (or least recent) first.
 * With capacity 4, 2Q has Kin = 1 and Kout = 2, SLRU a protected share of
 * 3, ARC c = 4.
 */
#include "policy_sim.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static unsigned run_trace_params(const struct kvt_policy_ops *ops, size_t cap,
				 const char *params, const uint64_t *tr, size_t n)
{
	struct sim s;
	unsigned hits;

	sim_open_params(&s, ops, cap, params);
	for (size_t i = 0; i < n; i++)
		sim_ref(&s, tr[i]);
	hits = s.hits;
	sim_close(&s);
	return hits;
}

/*
 * A hot set {1, 2} used twice, a cold page that pushes it about, the hot
 * set again, a one-time scan of four pages (the whole tier), and the hot
 * set once more.
 *
 * LRU:  1 2 m, 1 2 h [1 2]; 3 4 m [1 2 3 4]; 5 m -1; 1 m -2; 2 m -3
 *       [4 5 1 2]; 6 m -4; 7 m -5; 8 m -1; 9 m -2 [6 7 8 9]; 1 m; 2 m.
 *       2 hits; the scan flushed the hot set.
 *
 * 2Q:   1 2 m A1in [1 2]; 1 2 h change nothing; 3 4 m A1in [1 2 3 4].
 *       5 m: |A1in| 4 > 1, -1, A1out [1], A1in [2 3 4 5].
 *       1 m: -2, A1out [1 2]; 1 is in A1out: Am [1], A1out [2],
 *            A1in [3 4 5].
 *       2 m: -3, A1out [2 3]; 2 is in A1out: Am [1 2], A1out [3],
 *            A1in [4 5].
 *       6 m: -4, A1out [3 4], A1in [5 6]. 7 m: -5, A1out full: 3 is
 *       forgotten, [4 5], A1in [6 7]. 8 m: -6. 9 m: -7, A1in [8 9].
 *       1 h, 2 h: Am [1 2].
 *       4 hits. Victims left: A1in holds 2 > Kin: 8; then Am: 1 2; then 9.
 *
 * SLRU: 1 2 m prob [1 2]; 1 2 h prot [1 2]; 3 4 m prob [3 4];
 *       5 m -3 prob [4 5]; 1 2 h prot [1 2]; 6 m -4; 7 m -5; 8 m -6;
 *       9 m -7 prob [8 9]; 1 2 h.
 *       6 hits. Victims left: probation 8 9, then protected 1 2.
 *
 * ARC:  1 2 m T1 [1 2]; 1 2 h T2 [1 2]; 3 4 m T1 [3 4]; p = 0 throughout
 *       (no ghost hit).
 *       5 m: |T1| 2 > p, -3, B1 [3], T1 [4 5]. 1 2 h T2 [1 2].
 *       6 m: -4, B1 [3 4], T1 [5 6].
 *       7 m: -5, B1 [3 4 5], T1 [6 7]; |T1| + |B1| = 5 > c: B1 forgets
 *       3. 8 m: -6, forgets 4. 9 m: -7, forgets 5: B1 [6 7], T1 [8 9].
 *       1 2 h.
 *       6 hits. Victims left: T1 8 9, then T2 1 2.
 *
 * All three keep the hot set through the scan and hit it at the end,
 * where LRU misses both.
 */
static void test_scan(void)
{
	static const uint64_t tr[] = { 1, 2, 1, 2, 3, 4, 5, 1, 2, 6, 7, 8, 9, 1, 2 };
	static const uint64_t twoq_left[] = { 8, 1, 2, 9 };
	static const uint64_t slru_left[] = { 8, 9, 1, 2 };
	static const uint64_t arc_left[] = { 8, 9, 1, 2 };
	static const uint64_t e9[] = { 9, 1, 2 };
	struct sim s;

	CHECK_EQ(run_trace(&kvt_policy_lru, 4, tr, N(tr), NULL), 2);

	CHECK_EQ(run_trace(&kvt_policy_2q, 4, tr, N(tr), &s), 4);
	check_victims(&s, 4, twoq_left, 4);
	check_victims(&s, 4, twoq_left, 4);		/* victims() only looks */
	/* 8 pinned: A1in still holds more than Kin, so 9 goes first. */
	s.pin[slot_of(&s, 8)] = 1;
	check_victims(&s, 4, e9, 3);
	sim_close(&s);

	CHECK_EQ(run_trace(&kvt_policy_slru, 4, tr, N(tr), &s), 6);
	check_victims(&s, 4, slru_left, 4);
	check_victims(&s, 4, slru_left, 4);
	sim_close(&s);

	CHECK_EQ(run_trace(&kvt_policy_arc, 4, tr, N(tr), &s), 6);
	check_victims(&s, 4, arc_left, 4);
	check_victims(&s, 4, arc_left, 4);
	sim_close(&s);

	/*
	 * Params that undo the protection. slru:protected=0 demotes every
	 * promoted page at once: plain LRU, 2 hits. 2q:kout=0 remembers
	 * nothing, so no page reaches Am and A1in is a FIFO whose hits
	 * change nothing: 1 2 m, 1 2 h, 3 4 m, then -1 -2 -3 -4 -5 -1 -2
	 * for 5 1 2 6 7 8 9, and 1 2 miss: 2 hits.
	 */
	CHECK_EQ(run_trace_params(&kvt_policy_slru, 4, "protected=0", tr, N(tr)), 2);
	CHECK_EQ(run_trace_params(&kvt_policy_2q, 4, "kout=0", tr, N(tr)), 2);
}

/*
 * 2Q's A1in treats re-use soon after the first use as one burst. A page
 * used ten times while in A1in is still evicted first; LRU would keep it.
 *   1 2 3 4 m A1in [1 2 3 4]; 1 h x3 (nothing); 5 m -1, A1out [1];
 *   1 m -2, A1out [1 2]: 1 comes back into Am, A1out [2], A1in [3 4 5].
 * 3 hits. Then victims with want 4: A1in holds 3 > 1: 3, 4 (A1in down
 * to Kin), then Am: 1, then A1in again: 5.
 */
static void test_2q_burst(void)
{
	static const uint64_t tr[] = { 1, 2, 3, 4, 1, 1, 1, 5, 1 };
	static const uint64_t left[] = { 3, 4, 1, 5 };
	struct sim s;

	CHECK_EQ(run_trace(&kvt_policy_2q, 4, tr, N(tr), &s), 3);
	check_victims(&s, 4, left, 4);
	sim_close(&s);
	/* kin=100: A1in gives victims only past the whole tier, so Am's
	 * page 1 goes first and then A1in in FIFO order. */
	{
		static const uint64_t left100[] = { 1, 3, 4, 5 };

		sim_open_params(&s, &kvt_policy_2q, 4, "kin=100");
		for (size_t i = 0; i < N(tr); i++)
			sim_ref(&s, tr[i]);
		CHECK_EQ(s.hits, 3);
		check_victims(&s, 4, left100, 4);
		sim_close(&s);
	}
}

/*
 * SLRU's protected overflow, capacity 6 (protected share 80%: 4).
 *   1..6 m prob [1 2 3 4 5 6]; 1 2 3 4 h prot [1 2 3 4], prob [5 6];
 *   5 h: promoted, protected holds 5 > 4: its least recent, 1, is
 *   demoted to probation's most recent end: prot [2 3 4 5], prob [6 1].
 *        victims(6): probation 6 1, then protected 2 3 4 5.
 *   7 m: -6 (probation first); prob [1 7].
 *   3 h: prot [2 4 5 3].
 *   8 m: -1; prob [7 8].
 * 6 hits. Victims: probation 7 8, then protected 2 4 5 3.
 */
static void test_slru_demote(void)
{
	static const uint64_t head[] = { 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5 };
	static const uint64_t e_demoted[] = { 6, 1, 2, 3, 4, 5 };
	static const uint64_t left[] = { 7, 8, 2, 4, 5, 3 };
	static const uint64_t pinned_left[] = { 2, 4, 5, 3 };
	struct sim s;

	sim_open(&s, &kvt_policy_slru, 6);
	for (size_t i = 0; i < N(head); i++)
		sim_ref(&s, head[i]);
	check_victims(&s, 6, e_demoted, 6);
	sim_ref(&s, 7);
	sim_ref(&s, 3);
	sim_ref(&s, 8);
	CHECK_EQ(s.hits, 6);
	check_victims(&s, 6, left, 6);
	/* Probation's pages pinned: protected gives the rest. */
	s.pin[slot_of(&s, 7)] = 1;
	s.pin[slot_of(&s, 8)] = 1;
	check_victims(&s, 6, pinned_left, 4);
	sim_close(&s);
}

/*
 * ARC's target p at work, capacity 4. p is internal, so each step is
 * checked through victims(): with T1 holding n1 pages, victims() takes T1
 * while it holds more than p, then T2, then the rest of T1.
 *
 *   1 2 m, 1 2 h: T2 [1 2]; 3 4 m: T1 [3 4]; p = 0.            2 hits
 *   5 m: |T1| 2 > 0: -3, B1 [3], T1 [4 5].
 *   3 m: |T1| 2 > 0: -4, B1 [3 4]. 3 is in B1, a ghost hit: |B1| 2 >=
 *        |B2| 0, so p += 1: p = 1. T2 [1 2 3], T1 [5], B1 [4].
 *        victims(4): |T1| 1 is not > 1: T2 1 2 3, then T1 5.
 *   4 m: |T1| 1 is not > 1: -1 from T2, B2 [1]. 4 is in B1: |B1| 1 >=
 *        |B2| 1, p = 2. T2 [2 3 4], T1 [5], B1 [].
 *   6 m: |T1| 1 not > 2: -2, B2 [1 2]. New: T1 [5 6].
 *        victims(4): |T1| 2 not > 2: T2 3 4, then T1 5 6.
 *   1 m: |T1| 2 not > 2: -3, B2 [1 2 3]. 1 is in B2: |B2| 3 >= |B1| 0,
 *        p -= 1: p = 1. T2 [4 1], B2 [2 3].
 *   7 m: |T1| 2 > 1: -5, B1 [5]. New: T1 [6 7].
 *        victims(4): T1 6 (T1 down to p), then T2 4 1, then T1 7.
 *   With 6 and 7 pinned:
 *   5 m: T1 has nothing unpinned: -4 from T2, B2 [2 3 4]. 5 is in B1:
 *        |B1| 1 < |B2| 3, so p += 3 / 1: p = 4. T2 [1 5], B1 [].
 *        Unpinned, victims(4): |T1| 2 not > 4: T2 1 5, then T1 6 7.
 *   8 m: |T1| 2 not > 4: -1, B2 [2 3 4 1]. New: T1 [6 7 8].
 *        victims(4): |T1| 3 not > 4: T2 5, then T1 6 7 8 (had p only
 *        risen by 1 to 2, 6 would come first).
 * 2 hits and 12 misses in all.
 */
static void test_arc_adapt(void)
{
	static const uint64_t e_p1[] = { 1, 2, 3, 5 }, e_p2[] = { 3, 4, 5, 6 };
	static const uint64_t e_p1b[] = { 6, 4, 1, 7 }, e_p4[] = { 1, 5, 6, 7 };
	static const uint64_t e_p4b[] = { 5, 6, 7, 8 };
	static const uint64_t head[] = { 1, 2, 1, 2, 3, 4, 5, 3 };
	struct sim s;

	sim_open(&s, &kvt_policy_arc, 4);
	for (size_t i = 0; i < N(head); i++)
		sim_ref(&s, head[i]);
	check_victims(&s, 4, e_p1, 4);
	sim_ref(&s, 4);
	sim_ref(&s, 6);
	check_victims(&s, 4, e_p2, 4);
	sim_ref(&s, 1);
	sim_ref(&s, 7);
	check_victims(&s, 4, e_p1b, 4);
	s.pin[slot_of(&s, 6)] = 1;
	s.pin[slot_of(&s, 7)] = 1;
	sim_ref(&s, 5);
	s.pin[slot_of(&s, 6)] = 0;
	s.pin[slot_of(&s, 7)] = 0;
	check_victims(&s, 4, e_p4, 4);
	sim_ref(&s, 8);
	check_victims(&s, 4, e_p4b, 4);
	CHECK_EQ(s.hits, 2);
	CHECK_EQ(s.misses, 12);
	sim_close(&s);
}

/*
 * ARC's ghost bounds, capacity 2: each forgets a key that the paper's
 * ARC would have forgotten, so the key comes back as a plain miss.
 *
 * |T1| + |B1| <= c: 1 2 3 m: -1, B1 [1], T1 [2 3]: 3 > 2, B1 forgets 1.
 *   1 m: -2; 1 is new again: T1 [3 1] (a ghost hit would have put it
 *   in T2 with p = 1, and victims() would give 1 3). Victims: 3 1.
 * |B2| <= c: 1 2 inserted and used: T2 [1 2]; both removed: B2 [1 2];
 *   3 4 inserted and used, then removed: B2 forgets 1, then 2: [3 4].
 *   1 and 5 inserted: both new, T1 [1 5], victims 1 5. (Had B2 kept 1,
 *   it would be a ghost hit into T2 and 5 would go first.)
 */
static void test_arc_bounds(void)
{
	static const uint64_t tr[] = { 1, 2, 3, 1 }, e31[] = { 3, 1 };
	static const uint64_t e15[] = { 1, 5 };
	struct sim s;

	CHECK_EQ(run_trace(&kvt_policy_arc, 2, tr, N(tr), &s), 0);
	check_victims(&s, 2, e31, 2);
	sim_close(&s);

	sim_open(&s, &kvt_policy_arc, 2);
	for (uint64_t k = 1; k <= 3; k += 2) {
		sim_insert(&s, k);
		sim_insert(&s, k + 1);
		sim_access(&s, k);
		sim_access(&s, k + 1);
		sim_remove(&s, k);
		sim_remove(&s, k + 1);
	}
	sim_insert(&s, 1);
	sim_insert(&s, 5);
	check_victims(&s, 2, e15, 2);
	sim_close(&s);
}

/*
 * A removal that victims() did not ask for is an eviction all the same,
 * and the key may come back. Capacity 4, pages 1 2 3 inserted, none used.
 *
 * 2Q: remove 2 (from A1in: A1out [2]); insert 2: in A1out, so Am [2].
 *     Victims: A1in [1 3] holds 2 > 1: 1; then Am: 2; then 3.
 *     Remove 2 again (from Am: forgotten); insert 2: A1in [1 3 2].
 *     Victims: 1, 3 (A1in down to Kin), Am is empty: 2.
 * SLRU: 1 h: prot [1], prob [2 3]. Remove 1, insert 1: no memory,
 *     prob [2 3 1]. 2 h: prot [2]. Victims: 3 1 2.
 * ARC: remove 2 (from T1: B1 [2]); insert 2: B1 ghost hit, p = 1,
 *     T2 [2]. Victims: T1 [1 3] holds 2 > 1: 1; then T2: 2; then 3.
 *     Remove 2 (from T2: B2 [2]); insert 2: B2 ghost hit, p = 0,
 *     T2 [2]. Victims: 1 3 2.
 */
static void test_reinsert(void)
{
	static const uint64_t e123[] = { 1, 2, 3 }, e132[] = { 1, 3, 2 };
	static const uint64_t e312[] = { 3, 1, 2 };
	const struct kvt_policy_ops *ghosted[] = { &kvt_policy_2q, &kvt_policy_arc };
	struct sim s;

	for (size_t i = 0; i < N(ghosted); i++) {
		sim_open_fill(&s, ghosted[i], 4, 3);
		sim_reinsert(&s, 2);
		check_victims(&s, 4, e123, 3);
		sim_reinsert(&s, 2);
		check_victims(&s, 4, e132, 3);
		/* The same key in and out many times stays one page. */
		for (int r = 0; r < 100; r++)
			sim_reinsert(&s, 2);
		CHECK_EQ(ghosted[i]->victims(s.st, (uint64_t[8]){ 0 }, 8, sim_pinned, &s), 3);
		sim_close(&s);
	}

	sim_open_fill(&s, &kvt_policy_slru, 4, 3);
	sim_access(&s, 1);
	sim_reinsert(&s, 1);
	sim_access(&s, 2);
	check_victims(&s, 4, e312, 3);
	sim_close(&s);
}

static void test_params(void)
{
	static const char *const twoq_ok[] = {
		"", "kin=25", "kout=50", "kin=10,kout=100", "kout=0,kin=0",
		"kin=30%", "kin=100,kout=0%", "kin=007",
	};
	static const char *const twoq_bad[] = {
		"x=1", "kin", "kin=", "kin=101", "kin=-1", "kin=+1", "kin=1x",
		"kin=1,", ",kin=1", "kin=1,,kout=2", "kin=1,kin=2", "protected=80",
		"KIN=1", "kin =1", "kin= 1", "kin=99999999999999999999999", "kin=1%%",
		"=1", ",", "kin=1;kout=2", "kinx=1", "ki=1",
	};
	static const char *const slru_ok[] = {
		"", "protected=0", "protected=100", "protected=50%", "protected=80",
	};
	static const char *const slru_bad[] = {
		"protected=101", "prot=5", "kin=25", "protected=", "protected",
		"protected=1,protected=2", "protected=50,kin=1", "protected=5.5",
	};
	static const char *const arc_bad[] = { "p=1", "x", "=", "," };
	void *st;

	check_params_all(&kvt_policy_2q, 16, twoq_ok, N(twoq_ok), 0);
	check_params_all(&kvt_policy_2q, 16, twoq_bad, N(twoq_bad), -EINVAL);
	check_params_all(&kvt_policy_slru, 16, slru_ok, N(slru_ok), 0);
	check_params_all(&kvt_policy_slru, 16, slru_bad, N(slru_bad), -EINVAL);
	check_params(&kvt_policy_arc, 16, "", 0);
	check_params_all(&kvt_policy_arc, 16, arc_bad, N(arc_bad), -EINVAL);

	/* NULL params are no params; capacity 0 and 1 work. */
	CHECK_EQ(kvt_policy_2q.init(&st, NULL, 0, NULL, 0), 0);
	kvt_policy_2q.destroy(st);
	CHECK_EQ(kvt_policy_slru.init(&st, NULL, 1, NULL, 0), 0);
	kvt_policy_slru.destroy(st);
	CHECK_EQ(kvt_policy_arc.init(&st, NULL, 0, NULL, 0), 0);
	kvt_policy_arc.destroy(st);

	/* From a full spec. */
	CHECK_EQ(kvt_policy_2q.init(&st, kvt_policy_params("2q:kin=10,kout=20"), 16, NULL, 0), 0);
	kvt_policy_2q.destroy(st);

	/* Once registered, the names lead to these tables. */
	for (size_t i = 0; kvt_policies[i]; i++) {
		const char *nm = kvt_policies[i]->name;

		if (!strcmp(nm, "2q"))
			CHECK(kvt_policies[i] == &kvt_policy_2q);
		if (!strcmp(nm, "slru"))
			CHECK(kvt_policies[i] == &kvt_policy_slru);
		if (!strcmp(nm, "arc"))
			CHECK(kvt_policies[i] == &kvt_policy_arc);
	}
	CHECK(!strcmp(kvt_policy_2q.name, "2q"));
	CHECK(!strcmp(kvt_policy_slru.name, "slru"));
	CHECK(!strcmp(kvt_policy_arc.name, "arc"));
	CHECK(kvt_policy_2q.meta_size <= 32);
	CHECK(kvt_policy_slru.meta_size <= 32);
	CHECK(kvt_policy_arc.meta_size <= 32);
}

/*
 * The randomized stress run of policy_sim.h (stress_run): misses through
 * the simulator, inserts, removes (half of them put back at once),
 * accesses and victims() with random pin sets, over four times as many
 * keys as slots so the ghosts fill, wrap and hit. Each policy walks all
 * its pages, so victims() gives exactly min(want, unpinned), and the same
 * keys when asked again. Capacities 1 and 2 and extreme params are
 * included.
 */
static void test_stress(const struct kvt_policy_ops *ops, size_t cap, const char *params)
{
	const struct stress c = {
		.cap = cap, .nkeys = 4 * cap, .ops = t_scale(60000), .params = params,
		.ref = 3, .put = 5, .access = 5, .remove = 6,
		.reinsert = 1, .same_again = 1,
	};

	stress_run(ops, &c);
}

/*
 * For the record, not a check: miss ratios on a Zipf-like trace (key i
 * drawn with weight 1 / i^0.9, 2000 keys, tier of 100), alone and with a
 * one-time scan of 300 new keys every 2000 references.
 */
static void report_zipf(void)
{
	enum { KEYS = 2000, CAP = 100, REFS = 40000 };
	const struct kvt_policy_ops *ops[] = {
		&kvt_policy_lru, &kvt_policy_clock, &kvt_policy_2q,
		&kvt_policy_slru, &kvt_policy_arc,
	};
	uint64_t *tr = malloc(2 * REFS * sizeof(*tr));
	size_t n = t_scale(REFS), n_scan = 0;
	uint64_t *tr_scan = tr + REFS, next_scan = KEYS + 1;

	CHECK(tr);
	zipf_trace(tr, n, KEYS, 0.9, 1, 1);
	for (size_t i = 0; i < n && n_scan < REFS; i++) {
		if (i % 2000 == 1999)
			for (int j = 0; j < 300 && n_scan < REFS; j++)
				tr_scan[n_scan++] = next_scan++;
		if (n_scan < REFS)
			tr_scan[n_scan++] = tr[i];
	}
	printf("miss ratio, Zipf 0.9, %d keys, tier %d:  zipf  zipf+scans\n", KEYS, CAP);
	for (size_t i = 0; i < N(ops); i++)
		printf("  %-6s %6.3f %6.3f\n", ops[i]->name, miss_ratio(ops[i], CAP, tr, n),
		       miss_ratio(ops[i], CAP, tr_scan, n_scan));
	free(tr);
}

int main(void)
{
	static const uint64_t fwd[] = { 1, 2, 3, 4, 5 };
	const struct kvt_policy_ops *all[] = {
		&kvt_policy_2q, &kvt_policy_slru, &kvt_policy_arc,
	};

	test_params();
	test_scan();
	test_2q_burst();
	test_slru_demote();
	test_arc_adapt();
	test_arc_bounds();
	test_reinsert();
	for (size_t i = 0; i < N(all); i++) {
		/* Each evicts pages never used oldest first (2Q: all on A1in;
		 * SLRU: all on probation; ARC: all on T1), all on one tier. */
		check_pinned_order(all[i], fwd, 0);
		/* Spread over both segments: pinned() asked once a page at most. */
		check_all_pinned(all[i], 50000, 1, 1);
		test_stress(all[i], 48, "");
		test_stress(all[i], 1, "");
		test_stress(all[i], 2, "");
		test_stress(all[i], 7, "");
	}
	test_stress(&kvt_policy_2q, 32, "kin=0,kout=100");
	test_stress(&kvt_policy_2q, 32, "kin=100,kout=0");
	test_stress(&kvt_policy_slru, 32, "protected=0");
	test_stress(&kvt_policy_slru, 32, "protected=100");
	report_zipf();
	return 0;
}
