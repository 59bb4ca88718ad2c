/* SPDX-License-Identifier: MIT */
/*
 * The built-in list policies (lru, clock, mru, lifo) and the registry,
 * driven by the cache simulator in policy_sim.h. No pager.
 *
 * White-box: the list policies keep a struct kvt_lnode (pager/policy/list.h)
 * at the start of their metadata, so the test walks their rings directly to
 * check the invariants.
 */
#include "policy_sim.h"
#include "pager/policy/list.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/*
 * Ring invariants, through the list nodes at the start of each meta: the
 * ring is a consistent doubly linked cycle holding every resident page
 * exactly once (with its key) plus one sentinel outside the meta array.
 * Fills order[] with the keys from the sentinel on; returns the count.
 */
static size_t check_ring(struct sim *s, uint64_t *order)
{
	static unsigned char seen[4096];
	const struct kvt_lnode *sent = NULL, *e;
	size_t steps = 0, n = 0;
	long first = -1;

	CHECK(s->ops->meta_size >= sizeof(struct kvt_lnode));
	if (!s->n)
		return 0;
	CHECK(s->cap <= sizeof(seen));
	memset(seen, 0, s->cap);
	for (size_t i = 0; i < s->cap && first < 0; i++)
		if (s->used[i])
			first = (long)i;
	e = meta_of(s, (size_t)first);
	do {
		uintptr_t p = (uintptr_t)e, lo = (uintptr_t)s->meta;

		CHECK(e->next->prev == e && e->prev->next == e);
		if (p < lo || p >= lo + s->cap * s->ops->meta_size) {
			CHECK(!sent);		/* one sentinel */
			sent = e;
		} else {
			size_t i = (p - lo) / s->ops->meta_size;
			CHECK_EQ((p - lo) % s->ops->meta_size, 0);
			CHECK(s->used[i] && !seen[i]);
			CHECK_EQ(e->key, s->key[i]);
			seen[i] = 1;
		}
		e = e->next;
		CHECK(++steps <= s->cap + 1);
	} while (e != (const struct kvt_lnode *)meta_of(s, (size_t)first));
	CHECK(sent);
	CHECK_EQ(steps, s->n + 1);
	for (e = sent->next; e != sent; e = e->next)
		order[n++] = e->key;
	return n;
}

static void test_registry(void)
{
	const struct kvt_policy_ops *const want[] = {
		&kvt_policy_lru, &kvt_policy_clock, &kvt_policy_mru, &kvt_policy_lifo,
		&kvt_policy_fifo, &kvt_policy_lfu, &kvt_policy_sieve, &kvt_policy_s3fifo,
		&kvt_policy_2q, &kvt_policy_slru, &kvt_policy_arc,
	};
	size_t i, j, found = 0;

	/* The build lists every policy file: each appears once, by a name no
	 * other uses, and the classic ones are all there. */
	for (i = 0; kvt_policies[i]; i++) {
		CHECK(kvt_policy_find(kvt_policies[i]->name) == kvt_policies[i]);
		for (j = 0; j < i; j++)
			CHECK(strcmp(kvt_policies[j]->name, kvt_policies[i]->name));
		for (j = 0; j < N(want); j++)
			found += kvt_policies[i] == want[j];
	}
	CHECK_EQ(found, N(want));

	CHECK(kvt_policy_find("lru:x=1") == &kvt_policy_lru);
	CHECK(!strcmp(kvt_policy_params("lru:x=1"), "x=1"));
	CHECK(!strcmp(kvt_policy_params("lru"), ""));
	CHECK(!strcmp(kvt_policy_params("lru:"), ""));
	CHECK(!strcmp(kvt_policy_params("a:b:c"), "b:c"));
	CHECK(kvt_policy_find("clock:") == &kvt_policy_clock);
	CHECK(kvt_policy_find("mru") == &kvt_policy_mru);
	CHECK(!kvt_policy_find("nope"));
	CHECK(!kvt_policy_find("lr"));
	CHECK(!kvt_policy_find("lrux"));
	CHECK(!kvt_policy_find("LRU"));
	CHECK(!kvt_policy_find(""));
	CHECK(!kvt_policy_find(":lru"));
	CHECK(!kvt_policy_find(NULL));

	/* None of the three takes parameters. */
	for (i = 0; i < N(want); i++) {
		check_params(want[i], 8, kvt_policy_params("x:x=1"), -EINVAL);
		check_params(want[i], 8, "", 0);
	}
}

static void test_lru(void)
{
	/*
	 * LRU, capacity 3; resident pages listed LRU first:
	 *   1 m [1]      2 m [1 2]    3 m [1 2 3]  1 h [2 3 1]
	 *   4 m -2 [3 1 4]            1 h [3 4 1]  2 m -3 [4 1 2]
	 *   5 m -4 [1 2 5]            1 h [2 5 1]  2 h [5 1 2]
	 *   3 m -5 [1 2 3]            4 m -1 [2 3 4]
	 *   5 m -2 [3 4 5]
	 * 4 hits, and the eviction order left is 3 4 5.
	 */
	static const uint64_t tr[] = { 1, 2, 3, 1, 4, 1, 2, 5, 1, 2, 3, 4, 5 };
	static const uint64_t left[] = { 3, 4, 5 };
	struct sim s;

	CHECK_EQ(run_trace(&kvt_policy_lru, 3, tr, N(tr), &s), 4);
	check_victims(&s, 3, left, 3);
	check_victims(&s, 3, left, 3);		/* victims() only looks */
	sim_close(&s);
}

static void test_clock(void)
{
	/*
	 * CLOCK, capacity 3. Ring written in sweep order from the hand, ref
	 * bits as ', a new page enters just behind the hand with ref 0.
	 *   1 2 3 m      ring 1 2 3
	 *   2 h, 1 h     ring 1' 2' 3
	 *   4 m          sweep: 1' -> 1, 2' -> 2, 3 out; ring 1 2 4
	 *   5 m          sweep: 1 out;                  ring 2 4 5
	 *   2 h
	 * CLOCK: 3 hits. LRU ([3 2 1] at the 4, so 3 then 2 go): 2 hits.
	 * FIFO (1 then 2 go): 2 hits. Second chance kept 2 for its last use.
	 */
	static const uint64_t a[] = { 1, 2, 3, 2, 1, 4, 5, 2 };
	static const uint64_t a_left[] = { 4, 5, 2 };
	/*
	 * A trace where CLOCK does worse than both:
	 *   1 2 3 m      ring 1 2 3
	 *   2 h          ring 1 2' 3
	 *   4 m          sweep: 1 out;            ring 2' 3 4
	 *   1 m          sweep: 2' -> 2, 3 out;   ring 4 2 1
	 *   3 m          sweep: 4 out;            ring 2 1 3
	 *   4 m          sweep: 2 out;            ring 1 3 4
	 * CLOCK: 1 hit. LRU: [1 3 2] -1 [3 2 4] -3 [2 4 1] -2 [4 1 3], 4 h:
	 * 2 hits. FIFO: -1 [2 3 4] -2 [3 4 1], 3 h, 4 h: 3 hits.
	 */
	static const uint64_t b[] = { 1, 2, 3, 2, 4, 1, 3, 4 };
	struct sim s;

	CHECK_EQ(run_trace(&kvt_policy_clock, 3, a, N(a), &s), 3);
	CHECK_EQ(run_trace(&kvt_policy_lru, 3, a, N(a), NULL), 2);
	/* ring 2' 4 5 from the hand: 2 loses its bit, 4 5 go, then 2. */
	check_victims(&s, 3, a_left, 3);
	sim_close(&s);

	CHECK_EQ(run_trace(&kvt_policy_clock, 3, b, N(b), NULL), 1);
	CHECK_EQ(run_trace(&kvt_policy_lru, 3, b, N(b), NULL), 2);
}

static void test_clock_hand(void)
{
	static const uint64_t e1[] = { 1 }, e23[] = { 2, 3 }, e3[] = { 3 };
	static const uint64_t e14[] = { 1, 4 }, e41[] = { 4, 1 };
	struct sim s;

	sim_open(&s, &kvt_policy_clock, 4);
	sim_insert(&s, 1);
	sim_insert(&s, 2);
	sim_insert(&s, 3);
	sim_access(&s, 1);
	sim_access(&s, 2);
	sim_access(&s, 3);
	/* All referenced: one sweep clears them, the second takes 1; the hand
	 * stops on 2. Nothing was removed, so the next call goes on from 2. */
	check_victims(&s, 1, e1, 1);
	check_victims(&s, 2, e23, 2);
	/* Each key at most once per call, however many sweeps it makes. */
	s.pin[slot_of(&s, 1)] = 1;
	s.pin[slot_of(&s, 2)] = 1;
	check_victims(&s, 3, e3, 1);
	/* The hand is on the sentinel, so 1 is next. Remove the
	 * page under the hand: the hand moves on to 2, and a new page goes in
	 * just behind it, last in the sweep: 2 3 4. */
	s.pin[slot_of(&s, 1)] = 0;
	s.pin[slot_of(&s, 2)] = 0;
	check_victims(&s, 1, e1, 1);	/* hand now on 2 */
	sim_remove(&s, 2);		/* the hand's page: hand -> 3 */
	sim_insert(&s, 4);		/* ring from hand: 3 1 4 */
	s.pin[slot_of(&s, 3)] = 1;
	check_victims(&s, 2, e14, 2);	/* hand back on 3 */
	check_victims(&s, 2, e14, 2);	/* same again */
	sim_remove(&s, 3);		/* hand -> sentinel: ring 1 4 */
	sim_access(&s, 1);
	check_victims(&s, 2, e41, 2);
	s.pin[slot_of(&s, 1)] = 1;
	s.pin[slot_of(&s, 4)] = 1;
	check_victims(&s, 2, NULL, 0);	/* all pinned */
	sim_close(&s);
}

static void test_mru(void)
{
	/*
	 * A cyclic scan of 1..5, four laps, capacity 3. LRU always evicts the
	 * page needed next: 0 hits. MRU (resident pages LRU first; a new page
	 * is the MRU, so the next victim):
	 *   lap 1: 1 2 3 m [1 2 3]; 4 m -3 [1 2 4]; 5 m -4 [1 2 5]
	 *   lap 2: 1 h [2 5 1]; 2 h [5 1 2]; 3 m -2 [5 1 3]; 4 m -3 [5 1 4];
	 *          5 h [1 4 5]                                      3 hits
	 *   lap 3: 1 h [4 5 1]; 2 m -1 [4 5 2]; 3 m -2 [4 5 3]; 4 h [5 3 4];
	 *          5 h [3 4 5]                                      3 hits
	 *   lap 4: 1 m -5 [3 4 1]; 2 m -1 [3 4 2]; 3 h [4 2 3]; 4 h [2 3 4];
	 *          5 m -4 [2 3 5]                                   2 hits
	 * MRU: 8 hits; it evicts from the MRU end: 5 3 2.
	 */
	static const uint64_t left[] = { 5, 3, 2 };
	uint64_t tr[20];
	struct sim s;

	for (size_t i = 0; i < N(tr); i++)
		tr[i] = 1 + i % 5;
	CHECK_EQ(run_trace(&kvt_policy_lru, 3, tr, N(tr), NULL), 0);
	CHECK_EQ(run_trace(&kvt_policy_clock, 3, tr, N(tr), NULL), 0);
	CHECK_EQ(run_trace(&kvt_policy_mru, 3, tr, N(tr), &s), 8);
	check_victims(&s, 3, left, 3);
	sim_close(&s);
}

static void test_lifo(void)
{
	/*
	 * The same scan under LIFO (resident pages oldest first; accesses do
	 * not reorder; the newest page is the next victim):
	 *   lap 1: 1 2 3 m [1 2 3]; 4 m -3 [1 2 4]; 5 m -4 [1 2 5]
	 *   lap 2: 1 h; 2 h; 3 m -5 [1 2 3]; 4 m -3 [1 2 4]; 5 m -4 [1 2 5]
	 *                                                          2 hits
	 *   laps 3 and 4 the same: 6 hits; pages 1 and 2 never leave, and
	 * the victims, newest first, are 5 2 1.
	 */
	static const uint64_t left[] = { 5, 2, 1 };
	uint64_t tr[20];
	struct sim s;

	for (size_t i = 0; i < N(tr); i++)
		tr[i] = 1 + i % 5;
	CHECK_EQ(run_trace(&kvt_policy_lifo, 3, tr, N(tr), &s), 6);
	check_victims(&s, 3, left, 3);
	sim_close(&s);
}

/*
 * Random inserts, removes, accesses and victims() with random pin sets
 * (stress_run in policy_sim.h). After every op the ring holds each
 * resident page once; victims() returns distinct, resident, unpinned keys,
 * min(want, unpinned) of them (lru and mru walk everything; clock's two
 * sweeps reach every unpinned page), and leaves the ring order as it was.
 */
static void test_stress(const struct kvt_policy_ops *ops)
{
	const struct stress c = {
		.cap = 48, .nkeys = 96, .ops = 100000, .params = "",
		.ref = 0, .put = 3, .access = 6, .remove = 7,
		.order = check_ring,
	};

	stress_run(ops, &c);
}

int main(void)
{
	static const uint64_t fwd[] = { 1, 2, 3, 4, 5 }, rev[] = { 5, 4, 3, 2, 1 };
	const unsigned fresh = PIN_FRESH(1) | PIN_FRESH(2) | PIN_FRESH(3) |
			       PIN_FRESH(4) | PIN_FRESH(5);

	test_registry();
	test_lru();
	test_clock();
	test_clock_hand();
	test_mru();
	test_lifo();
	/* Each pinned case on a new tier: clock moves its hand. */
	check_pinned_order(&kvt_policy_lru, fwd, fresh);
	check_pinned_order(&kvt_policy_clock, fwd, fresh);
	check_pinned_order(&kvt_policy_mru, rev, fresh);
	check_pinned_order(&kvt_policy_lifo, rev, fresh);
	/* The single-ring policies; the others have their own stress runs
	 * (t_policy_classic, t_policy_adaptive). */
	test_stress(&kvt_policy_lru);
	test_stress(&kvt_policy_clock);
	test_stress(&kvt_policy_mru);
	test_stress(&kvt_policy_lifo);
	test_stress(&kvt_policy_fifo);
	return 0;
}
