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
	void *st;
	size_t i;

	for (i = 0; kvt_policies[i]; i++) {
		CHECK(i < N(want));
		CHECK(kvt_policies[i] == want[i]);
		CHECK(kvt_policy_find(kvt_policies[i]->name) == want[i]);
	}
	CHECK_EQ(i, N(want));

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
		st = NULL;
		CHECK_EQ(want[i]->init(&st, kvt_policy_params("x:x=1"), 8), -EINVAL);
		CHECK_EQ(want[i]->init(&st, "", 8), 0);
		CHECK(st);
		want[i]->destroy(st);
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

/* Pinned pages are skipped, order is kept, all pinned gives 0. Each case
 * starts afresh (clock moves its hand): pages 1..5 inserted in order and
 * never accessed; exp is the eviction order. */
static void pinned_case(const struct kvt_policy_ops *ops, const uint64_t *exp,
			int pin_first, int pin_all, size_t want,
			const uint64_t *out_exp, size_t n)
{
	struct sim s;

	sim_open(&s, ops, 5);
	for (uint64_t k = 1; k <= 5; k++)
		sim_insert(&s, k);
	if (pin_first)
		s.pin[slot_of(&s, exp[0])] = 1;
	for (size_t i = 0; pin_all && i < s.cap; i++)
		s.pin[i] = 1;
	check_victims(&s, want, out_exp, n);
	sim_close(&s);
}

static void test_pinned(const struct kvt_policy_ops *ops, const uint64_t *exp)
{
	uint64_t out[8];
	struct sim s;

	sim_open(&s, ops, 5);
	CHECK_EQ(ops->victims(s.st, out, 1, sim_pinned, &s), 0);	/* empty */
	for (uint64_t k = 1; k <= 5; k++)
		sim_insert(&s, k);
	/* No callback: nothing is pinned. */
	CHECK_EQ(ops->victims(s.st, out, 8, NULL, NULL), 5);
	for (size_t i = 0; i < 5; i++)
		CHECK_EQ(out[i], exp[i]);
	sim_close(&s);

	pinned_case(ops, exp, 0, 0, 3, exp, 3);		/* 3 distinct, in order */
	pinned_case(ops, exp, 1, 0, 1, exp + 1, 1);	/* first pinned: next */
	pinned_case(ops, exp, 1, 0, 8, exp + 1, 4);
	pinned_case(ops, exp, 0, 1, 3, NULL, 0);	/* all pinned: none */
}

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
	uint64_t x = rnd_state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rnd_state = x;
}

/*
 * Random inserts, removes, accesses and victims() with random pin sets.
 * After every op the ring holds each resident page once; victims() returns
 * distinct, resident, unpinned keys, min(want, unpinned) of them (lru and
 * mru walk everything; clock's two sweeps reach every unpinned page), and
 * leaves the ring order as it was. Keys cover the whole uint64 range.
 */
static void test_stress(const struct kvt_policy_ops *ops)
{
	enum { CAP = 48, KEYS = 96, OPS = 100000 };
	uint64_t keys[KEYS], out[CAP + 4], before[CAP], after[CAP];
	struct sim s;

	for (size_t i = 0; i < KEYS; i++)
		keys[i] = i * 0x9e3779b97f4a7c15ull;	/* 0 included */
	keys[KEYS - 1] = UINT64_MAX;
	sim_open(&s, ops, CAP);
	for (unsigned op = 0; op < OPS; op++) {
		uint64_t r = rnd(), k = keys[r % KEYS];
		long slot = slot_of(&s, k);
		unsigned what = (r >> 8) % 10;

		if (what < 3) {				/* insert or access */
			if (slot >= 0)
				sim_access(&s, k);
			else if (s.n < s.cap)
				sim_insert(&s, k);
		} else if (what < 6) {			/* access */
			if (slot >= 0)
				sim_access(&s, k);
		} else if (what < 7) {			/* remove */
			if (slot >= 0)
				sim_remove(&s, k);
		} else {				/* victims, evict some */
			unsigned pct = (unsigned[]){ 0, 30, 90, 100 }[(r >> 16) & 3];
			size_t want = 1 + (r >> 20) % (CAP + 3), free_ = 0, got, nb;

			for (size_t i = 0; i < s.cap; i++) {
				s.pin[i] = s.used[i] && rnd() % 100 < pct;
				free_ += s.used[i] && !s.pin[i];
			}
			nb = check_ring(&s, before);
			got = ops->victims(s.st, out, want, sim_pinned, &s);
			CHECK_EQ(got, want < free_ ? want : free_);
			CHECK_EQ(check_ring(&s, after), nb);
			CHECK(!memcmp(before, after, nb * sizeof(*before)));
			for (size_t i = 0; i < got; i++) {
				long j = slot_of(&s, out[i]);
				CHECK(j >= 0 && !s.pin[j]);
				for (size_t m = 0; m < i; m++)
					CHECK(out[m] != out[i]);
			}
			/* The caller may take some, none or all of them. */
			for (size_t i = 0, take = rnd() % (got + 1); i < take; i++)
				sim_remove(&s, out[i]);
		}
		check_ring(&s, before);
	}
	while (s.n) {				/* drain through victims */
		uint64_t v;
		memset(s.pin, 0, s.cap);
		CHECK_EQ(ops->victims(s.st, &v, 1, NULL, NULL), 1);
		sim_remove(&s, v);
		check_ring(&s, before);
	}
	CHECK_EQ(ops->victims(s.st, out, 4, NULL, NULL), 0);
	sim_close(&s);
}

int main(void)
{
	static const uint64_t fwd[] = { 1, 2, 3, 4, 5 }, rev[] = { 5, 4, 3, 2, 1 };

	test_registry();
	test_lru();
	test_clock();
	test_clock_hand();
	test_mru();
	test_lifo();
	test_pinned(&kvt_policy_lru, fwd);
	test_pinned(&kvt_policy_clock, fwd);
	test_pinned(&kvt_policy_mru, rev);
	test_pinned(&kvt_policy_lifo, rev);
	/* The single-ring policies; the others have their own stress runs
	 * (t_policy_classic, t_policy_adaptive). */
	test_stress(&kvt_policy_lru);
	test_stress(&kvt_policy_clock);
	test_stress(&kvt_policy_mru);
	test_stress(&kvt_policy_lifo);
	test_stress(&kvt_policy_fifo);
	return 0;
}
