/* SPDX-License-Identifier: MIT */
/*
 * The classic policies fifo, lfu, sieve and s3fifo, driven by the cache
 * simulator in policy_sim.h: hand-worked traces (hits and victim orders),
 * pins, removal and re-insertion, params, and a randomized stress run. At
 * the end it prints (does not check) miss ratios on a Zipf-like trace.
 */
#include "policy_sim.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const struct kvt_policy_ops *const classic[] = {
	&kvt_policy_fifo, &kvt_policy_lfu, &kvt_policy_sieve, &kvt_policy_s3fifo,
};

static void test_fifo(void)
{
	/*
	 * Belady's anomaly, 1 2 3 4 1 2 5 1 2 3 4 5. Resident pages oldest first.
	 * Capacity 3:
	 *   1 2 3 m [1 2 3]; 4 m -1 [2 3 4]; 1 m -2 [3 4 1]; 2 m -3 [4 1 2];
	 *   5 m -4 [1 2 5]; 1 h; 2 h; 3 m -1 [2 5 3]; 4 m -2 [5 3 4]; 5 h
	 *   3 hits, 9 faults; left in the order 5 3 4.
	 * Capacity 4:
	 *   1 2 3 4 m [1 2 3 4]; 1 h; 2 h; 5 m -1 [2 3 4 5]; 1 m -2 [3 4 5 1];
	 *   2 m -3 [4 5 1 2]; 3 m -4 [5 1 2 3]; 4 m -5 [1 2 3 4];
	 *   5 m -1 [2 3 4 5]
	 *   2 hits, 10 faults: more room, more faults. Left: 2 3 4 5.
	 */
	static const uint64_t tr[] = { 1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5 };
	static const uint64_t left3[] = { 5, 3, 4 }, left4[] = { 2, 3, 4, 5 };
	struct sim s;

	CHECK_EQ(run_trace(&kvt_policy_fifo, 3, tr, N(tr), &s), 3);
	check_victims(&s, 3, left3, 3);
	check_victims(&s, 3, left3, 3);		/* victims() only looks */
	sim_close(&s);
	CHECK_EQ(run_trace(&kvt_policy_fifo, 4, tr, N(tr), &s), 2);
	check_victims(&s, 4, left4, 4);
	sim_close(&s);
}

static void test_lfu(void)
{
	/*
	 * Capacity 3, default aging (every 64 accesses: not reached). Counts
	 * as k:c; a new page has count 1; ties go least recent first.
	 *   1 m 1:1; 1 h 1:2; 2 m 2:1; 2 h 2:2; 3 m 3:1
	 *   4 m: the lowest count is 3:1, out          [1:2 2:2 4:1]
	 *   5 m: 4:1 out                                [1:2 2:2 5:1]
	 *   1 h 1:3; 2 h 2:3
	 * 4 hits. LRU: after 1 1 2 2 3 the order is 1 2 3; 4 m -1; 5 m -2;
	 * 1 m -3; 2 m -4: 2 hits. Left: 5 (count 1), then 1 and 2 (count 3,
	 * 1 used longer ago).
	 */
	static const uint64_t tr[] = { 1, 1, 2, 2, 3, 4, 5, 1, 2 };
	static const uint64_t left[] = { 5, 1, 2 };
	struct sim s;

	CHECK_EQ(run_trace(&kvt_policy_lfu, 3, tr, N(tr), &s), 4);
	CHECK_EQ(run_trace(&kvt_policy_lru, 3, tr, N(tr), NULL), 2);
	check_victims(&s, 3, left, 3);
	check_victims(&s, 3, left, 3);
	sim_close(&s);
}

/* Insert 1 2 3, access 1 1 1 3 2 2 3 under params; check the victims. */
static void lfu_aging_case(const char *params, const uint64_t *exp)
{
	static const uint64_t acc[] = { 1, 1, 1, 3, 2, 2, 3 };
	struct sim s;

	sim_open(&s, &kvt_policy_lfu, 3);
	sim_reinit(&s, params);
	for (uint64_t k = 1; k <= 3; k++)
		sim_insert(&s, k);
	for (size_t i = 0; i < N(acc); i++)
		sim_access(&s, acc[i]);
	check_victims(&s, 3, exp, 3);
	sim_close(&s);
}

static void test_lfu_aging(void)
{
	/*
	 * age=4 (inserts do not count, accesses do):
	 *   1 2 3 in, count 1 each: bucket 1 = [1 2 3]
	 *   1 1 1 (accesses 1-3): 1:4
	 *   3 (access 4: halve first): 1:2, 2:0, 3:0, bucket 0 = [2 3];
	 *     then 3:1
	 *   2 (1): 2:1, bucket 1 = [3 2]; 2 (2): 2:2, bucket 2 = [1 2]
	 *   3 (3): 3:2, bucket 2 = [1 2 3]
	 * All count 2, least recent first: 1 2 3. Without aging (age=0) the
	 * counts are 1:4 2:3 3:3 and the order is 2 3 1: page 1's burst long
	 * ago keeps it.
	 */
	static const uint64_t aged[] = { 1, 2, 3 }, plain[] = { 2, 3, 1 };

	lfu_aging_case("age=4", aged);
	lfu_aging_case("age=0", plain);

	/*
	 * The merge order of a halving, age=4: 1 2 in (bucket 1 = [1 2]);
	 * 2 (access 1) 2:2; 2 (2) 2:3; 1 (3) 1:2: bucket 2 = [1], 3 = [2];
	 * 3 in (3:1, bucket 1 = [3]); 3 (4: halve first): bucket 0 = old 1
	 * = [3], bucket 1 = old 2 then old 3 = [1 2]; then 3:0 -> 3:1,
	 * bucket 1 = [1 2 3]. Victims 1 2 3: 1 was used after 2, but its
	 * count before the halving was lower, and that decides.
	 */
	{
		static const uint64_t exp[] = { 1, 2, 3 };
		struct sim s;

		sim_open(&s, &kvt_policy_lfu, 3);
		sim_reinit(&s, "age=4");
		sim_insert(&s, 1);
		sim_insert(&s, 2);
		sim_access(&s, 2);
		sim_access(&s, 2);
		sim_access(&s, 1);
		sim_insert(&s, 3);
		sim_access(&s, 3);
		check_victims(&s, 3, exp, 3);
		sim_close(&s);
	}
}

static void test_sieve(void)
{
	/*
	 * SIEVE, capacity 3. Queue written tail (oldest) to head (newest), *
	 * the visited bit, ^ the hand; a new page enters at the head.
	 *   1 2 3 m      1 2 3, hand at the tail
	 *   1 h          1* 2 3
	 *   4 m          hand: 1* -> 1 (stays in place), 2 out; hand on 3:
	 *                1 3^ 4
	 *   1 h          1* 3^ 4
	 *   5 m          3 out, hand on 4: 1* 4^ 5
	 *   2 m          4 out, hand on 5: 1* 5^ 2
	 *   1 h
	 * 3 hits. FIFO: -1 [2 3 4], 1 m -2 [3 4 1], 5 m -3, 2 m -4, 1 h: 2.
	 * Victims from the hand: 5, 2, wrap, 1* loses its bit, wrap again
	 * (5 and 2 already given), 1: 5 2 1, the hand left on 1. Asked again,
	 * with nothing removed: 1 (its bit is gone), then 5 2.
	 */
	static const uint64_t tr[] = { 1, 2, 3, 1, 4, 1, 5, 2, 1 };
	static const uint64_t left[] = { 5, 2, 1 }, again[] = { 1, 5, 2 };
	struct sim s;

	CHECK_EQ(run_trace(&kvt_policy_sieve, 3, tr, N(tr), &s), 3);
	CHECK_EQ(run_trace(&kvt_policy_fifo, 3, tr, N(tr), NULL), 2);
	check_victims(&s, 3, left, 3);
	check_victims(&s, 3, again, 3);
	sim_close(&s);
}

static void test_sieve_hand(void)
{
	static const uint64_t e2[] = { 2 }, e3[] = { 3 }, e1[] = { 1 };
	static const uint64_t e51[] = { 5, 1 };
	struct sim s;

	sim_open(&s, &kvt_policy_sieve, 5);
	for (uint64_t k = 1; k <= 4; k++)
		sim_insert(&s, k);
	sim_access(&s, 1);
	check_victims(&s, 1, e2, 1);	/* 1 loses its bit; the hand on 2 */
	check_victims(&s, 1, e2, 1);	/* nothing removed: same answer */
	sim_remove(&s, 2);		/* the hand's page: hand -> 3 */
	check_victims(&s, 1, e3, 1);
	sim_remove(&s, 3);		/* hand -> 4 */
	sim_remove(&s, 4);		/* the head: hand -> sentinel */
	sim_insert(&s, 5);		/* queue 1 5, hand wraps to 1 */
	check_victims(&s, 1, e1, 1);
	s.pin[slot_of(&s, 1)] = 1;
	sim_access(&s, 5);
	/* Queue 1 5*, the hand on 1 (pinned): 5 loses its bit, wraps, 5. */
	check_victims(&s, 2, e51, 1);
	/* The hand stays on 5: 5, wrap, 1. */
	s.pin[slot_of(&s, 1)] = 0;
	check_victims(&s, 2, e51, 2);
	sim_close(&s);
}

static void test_s3fifo(void)
{
	/*
	 * S3-FIFO, capacity 4, small=10%: S's share is 1 page, G holds 3 keys.
	 * Queues tail to head, counts as k:c (0 unless shown).
	 *   1 2 3 4 m      S [1 2 3 4]
	 *   1 h 1 h 2 h    1:2, 2:1
	 *   5 m  S has 4 >= 1: S's tail 1:2 > 1 moves to M (count reset);
	 *        2:1 is the victim, G [2]          S [3 4 5]  M [1]
	 *   2 m  S 3 >= 1: 3 out, G [2 3]; 2 is in G: to M, G [3]
	 *                                          S [4 5]    M [1 2]
	 *   3 m  4 out, G [3 4]; 3 in G: to M, G [4]
	 *                                          S [5]      M [1 2 3]
	 *   1 h 5 h        1:1, 5:1
	 *   6 m  S 1 >= 1: 5:1 is not > 1: out, G [4 5]   S [6]
	 *   5 m  6 out, G [4 5 6]; 5 in G: to M, G [4 6]
	 *                                          S []       M [1:1 2 3 5]
	 *   7 m  S 0 < 1: M: 1:1 -> 1:0 to M's head, 2 out  M [3 5 1]  S [7]
	 *   2 m  2 left from M, so not in G: S 1 >= 1, 7 out, G [4 6 7];
	 *        2 to S                            S [2]      M [3 5 1]
	 *   1 h            1:1
	 * 6 hits. Victims: S holds its share: 2; then M: 3, 5, 1:1 loses its
	 * count at M's head and comes round at once: 1. Order 2 3 5 1.
	 */
	static const uint64_t tr[] = { 1, 2, 3, 4, 1, 1, 2, 5, 2, 3, 1, 5, 6, 5, 7, 2, 1 };
	static const uint64_t left[] = { 2, 3, 5, 1 };
	struct sim s;

	CHECK_EQ(run_trace(&kvt_policy_s3fifo, 4, tr, N(tr), &s), 6);
	check_victims(&s, 4, left, 4);
	sim_close(&s);
}

static void test_s3fifo_ghost(void)
{
	static const uint64_t e1[] = { 1 }, e321[] = { 3, 2, 1 }, e12[] = { 1, 2 };
	struct sim s;

	/* Capacity 4: S's share 1, G 3 keys. 1 is offered then removed: an
	 * eviction, so G [1]. 2 is removed without being offered: not in G.
	 * Back in, 1 goes to M, 2 to S: S [3 2], M [1], victims 3 2 1 (had 1
	 * gone to S the order would be 3 1 2; had 2 gone to M, 3 1 2). */
	sim_open(&s, &kvt_policy_s3fifo, 4);
	for (uint64_t k = 1; k <= 3; k++)
		sim_insert(&s, k);
	check_victims(&s, 1, e1, 1);
	sim_remove(&s, 1);
	sim_remove(&s, 2);
	sim_insert(&s, 1);
	sim_insert(&s, 2);
	check_victims(&s, 3, e321, 3);
	sim_close(&s);

	/* G forgets the oldest of more than 3: 1 2 3 4 evicted from S in turn,
	 * G [2 3 4]. Insert 2 (to M) then 1 (to S): S first, 1 then 2. Had G
	 * kept 1, both would be in M and the order 2 1. */
	sim_open(&s, &kvt_policy_s3fifo, 4);
	for (uint64_t k = 1; k <= 4; k++)
		sim_insert(&s, k);
	for (uint64_t k = 1; k <= 4; k++) {
		uint64_t v;
		CHECK_EQ(kvt_policy_s3fifo.victims(s.st, &v, 1, sim_pinned, &s), 1);
		CHECK_EQ(v, k);
		sim_remove(&s, v);
	}
	sim_insert(&s, 2);
	sim_insert(&s, 1);
	check_victims(&s, 2, e12, 2);
	sim_close(&s);
}

/* Insert 1 2 3, remove 2, insert 2 again: 2 is a new page, last to go
 * under every one of the four (s3fifo: 2 was not evicted by the policy, so
 * it is not in G and goes to S like any new page). */
static void test_reinsert(const struct kvt_policy_ops *ops)
{
	static const uint64_t exp[] = { 1, 3, 2 };
	struct sim s;

	sim_open_fill(&s, ops, 3, 3);
	sim_reinsert(&s, 2);
	check_victims(&s, 3, exp, 3);
	sim_remove(&s, 2);
	sim_remove(&s, 1);
	sim_remove(&s, 3);
	check_victims(&s, 3, NULL, 0);
	sim_insert(&s, 3);
	check_victims(&s, 3, exp + 1, 1);
	sim_close(&s);
}

static void test_params(void)
{
	static const char *const none_bad[] = { "x=1", "age=1", "small=10", ",", "=" };
	static const char *const lfu_good[] = { "age=0", "age=1", "age=100", "age=1,age=7",
						"age=18446744073709551615" };
	static const char *const lfu_bad[] = { "age", "age=", "age=-1", "age=+1", "age= 1",
		"age=1x", "age=0x10", "age=1,", ",age=1", "age=1,,age=2", "aged=1", "AGE=1",
		"small=10", "age=18446744073709551616", "x" };
	static const char *const s3_good[] = { "small=1", "small=10", "small=99", "small=5,small=20" };
	static const char *const s3_bad[] = { "small", "small=", "small=0", "small=100",
		"small=-5", "small=abc", "small=10%", "small=10,", "big=1", "age=1",
		"small=99999999999999999999" };
	void *st;

	for (size_t i = 0; i < N(classic); i++) {
		CHECK(!strcmp(classic[i]->name,
			      (const char *[]){ "fifo", "lfu", "sieve", "s3fifo" }[i]));
		CHECK(classic[i]->meta_size <= 32);
		check_params(classic[i], 100, "", 0);
		st = NULL;
		CHECK_EQ(classic[i]->init(&st, NULL, 8, NULL, 0), 0);	/* NULL reads as "" */
		classic[i]->destroy(st);
	}
	check_params_all(&kvt_policy_fifo, 100, none_bad, N(none_bad), -EINVAL);
	check_params_all(&kvt_policy_sieve, 100, none_bad, N(none_bad), -EINVAL);
	check_params_all(&kvt_policy_lfu, 100, lfu_good, N(lfu_good), 0);
	check_params_all(&kvt_policy_lfu, 100, lfu_bad, N(lfu_bad), -EINVAL);
	check_params_all(&kvt_policy_s3fifo, 100, s3_good, N(s3_good), 0);
	check_params_all(&kvt_policy_s3fifo, 100, s3_bad, N(s3_bad), -EINVAL);
	/* Tiny capacities still give S and G one entry each. */
	for (size_t cap = 1; cap <= 3; cap++) {
		CHECK_EQ(kvt_policy_s3fifo.init(&st, "small=99", cap, NULL, 0), 0);
		kvt_policy_s3fifo.destroy(st);
	}
}

/*
 * The randomized stress run of policy_sim.h (stress_run) over many more
 * keys than fit, chosen with a skew so that some come back often. Each of
 * the four can reach every unpinned page in one call, so victims() gives
 * min(want, unpinned); asking twice for one victim with nothing removed in
 * between gives the same key.
 */
static void test_stress(const struct kvt_policy_ops *ops, const char *params)
{
	const struct stress c = {
		.cap = 64, .nkeys = 1000, .ops = t_scale(200000), .params = params,
		.ref = 0, .put = 4, .access = 4, .remove = 5,
		.skew = 1, .same_one = 1,
	};

	stress_run(ops, &c);
}

/* Miss ratios on a Zipf-like trace (alpha 1, 2000 keys, a tier of 200),
 * printed for the record: not checked, a policy may legitimately lose. */
static void print_zipf(void)
{
	enum { KEYS = 2000, CAP = 200, REFS = 40000 };
	static const struct kvt_policy_ops *const all[] = {
		&kvt_policy_lru, &kvt_policy_clock, &kvt_policy_fifo,
		&kvt_policy_lfu, &kvt_policy_sieve, &kvt_policy_s3fifo,
	};
	uint64_t *tr = malloc(REFS * sizeof(*tr));

	CHECK(tr);
	/* the ranks scattered so that key order means nothing */
	zipf_trace(tr, REFS, KEYS, 1.0, 0x9e3779b97f4a7c15ull, 0);
	printf("zipf(1.0) %d keys, capacity %d, %d refs: miss ratio", KEYS, CAP, REFS);
	for (size_t p = 0; p < N(all); p++)
		printf(" %s %.3f", all[p]->name, miss_ratio(all[p], CAP, tr, REFS));
	printf("\n");
	free(tr);
}

int main(void)
{
	static const uint64_t fwd[] = { 1, 2, 3, 4, 5 };

	test_fifo();
	test_lfu();
	test_lfu_aging();
	test_sieve();
	test_sieve_hand();
	test_s3fifo();
	test_s3fifo_ghost();
	test_params();
	for (size_t i = 0; i < N(classic); i++) {
		/* Steps 2 and 3 on one tier (sieve leaves its hand on the
		 * last victim, and goes on from it), the others each afresh. */
		check_pinned_order(classic[i], fwd, PIN_FRESH(1) | PIN_FRESH(2) |
				   PIN_FRESH(4) | PIN_FRESH(5));
		check_all_pinned(classic[i], 4096, 8, 0);
		test_reinsert(classic[i]);
		test_stress(classic[i], "");
	}
	test_stress(&kvt_policy_lfu, "age=5");		/* frequent halvings */
	test_stress(&kvt_policy_s3fifo, "small=50");
	test_stress(&kvt_policy_s3fifo, "small=1");
	print_zipf();
	return 0;
}
