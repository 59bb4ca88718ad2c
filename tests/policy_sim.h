/* SPDX-License-Identifier: MIT */
/*
 * A tiny cache simulator that plays a tier for the policy tests: it owns
 * the per-page metadata (zeroed before on_insert, poisoned after
 * on_remove), maps keys to slots, and on a miss in a full cache asks
 * victims(1) and evicts that page. No pager. Included by the t_policy*
 * tests; everything is static.
 */
#ifndef KVT_TESTS_POLICY_SIM_H
#define KVT_TESTS_POLICY_SIM_H

#include "common.h"

#include <errno.h>
#include <math.h>

#include "pager/policy.h"

struct sim {
	const struct kvt_policy_ops *ops;
	void *st;
	size_t cap, n;			/* slots, resident pages */
	unsigned char *meta;		/* (cap, meta_size), 64-byte aligned */
	uint64_t *key;			/* (cap) key held by each slot */
	unsigned char *used, *pin;	/* (cap) flags per slot */
	uint64_t step;
	unsigned hits, misses;
	size_t low;			/* no free slot below this one */
	/* key -> slot: open addressing, linear probing, (hmask + 1) entries
	 * of slot + 1 (0 = empty), at least twice cap */
	uint32_t *hix;
	size_t hmask;
	/* Optional, for sim_ref_r: pages it says are pinned are skipped by
	 * victims() (default: the per-slot pin flags), and with pager_like a
	 * miss is an insert followed by an access in the same step, as the
	 * live pager does (place() then touch()). */
	int (*pin_fn)(void *arg, uint64_t key);
	void *pin_arg;
	int pager_like;
	/* With positions, sim_insert and sim_access describe key as page
	 * (key >> 8) % 64 of table (key % 3, (key >> 2) % 4), so policies
	 * that keep windows of each table see many tables. */
	int positions;
};

static inline size_t sim_hash(const struct sim *s, uint64_t key)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	return (size_t)key & s->hmask;
}

/* A reference to key at step (and time) t, nothing else known. */
static inline struct kvt_ref ref_at(uint64_t key, uint64_t t)
{
	return (struct kvt_ref){ .key = key, .time = t, .step = t, .next = KVT_NEVER,
				 .seq = KVT_REF_NONE, .layer = KVT_REF_NONE,
				 .index = KVT_REF_NONE };
}

static inline void sim_open(struct sim *s, const struct kvt_policy_ops *ops, size_t cap)
{
	size_t bytes = (cap * ops->meta_size + 63) & ~(size_t)63;

	memset(s, 0, sizeof(*s));
	s->ops = ops;
	s->cap = cap;
	s->meta = aligned_alloc(64, bytes);
	s->key = calloc(cap, sizeof(*s->key));
	s->used = calloc(cap, 1);
	s->pin = calloc(cap, 1);
	for (s->hmask = 1; s->hmask < 2 * cap; s->hmask <<= 1)
		;
	s->hix = calloc(s->hmask, sizeof(*s->hix));
	s->hmask--;
	CHECK(s->meta && s->key && s->used && s->pin && s->hix);
	CHECK_EQ(ops->init(&s->st, "", cap, NULL, 0), 0);
}

/* Replace the policy state with one made from params. */
static inline void sim_reinit(struct sim *s, const char *params)
{
	s->ops->destroy(s->st);
	s->st = NULL;
	CHECK_EQ(s->ops->init(&s->st, params, s->cap, NULL, 0), 0);
	CHECK(s->st);
}

/* sim_open, with the policy made from params (sim_open passes ""). */
static inline void sim_open_params(struct sim *s, const struct kvt_policy_ops *ops,
				   size_t cap, const char *params)
{
	sim_open(s, ops, cap);
	sim_reinit(s, params);
}

static inline void sim_close(struct sim *s)
{
	s->ops->destroy(s->st);
	free(s->meta);
	free(s->key);
	free(s->used);
	free(s->pin);
	free(s->hix);
}

static inline void *meta_of(struct sim *s, size_t slot)
{
	return s->meta + slot * s->ops->meta_size;
}

static inline long slot_of(const struct sim *s, uint64_t key)
{
	for (size_t h = sim_hash(s, key); s->hix[h]; h = (h + 1) & s->hmask)
		if (s->key[s->hix[h] - 1] == key)
			return (long)s->hix[h] - 1;
	return -1;
}

/* Index slot i under key (not indexed yet). */
static inline void sim_hadd(struct sim *s, uint64_t key, size_t i)
{
	size_t h = sim_hash(s, key);

	while (s->hix[h])
		h = (h + 1) & s->hmask;
	s->hix[h] = (uint32_t)i + 1;
}

/* Drop key from the index (backward-shift deletion). */
static inline void sim_hdel(struct sim *s, uint64_t key)
{
	size_t h = sim_hash(s, key), j;

	while (s->key[s->hix[h] - 1] != key)
		h = (h + 1) & s->hmask;
	for (j = h;;) {
		j = (j + 1) & s->hmask;
		if (!s->hix[j])
			break;
		size_t home = sim_hash(s, s->key[s->hix[j] - 1]);
		/* move j's entry into the hole at h unless its home lies in (h, j] */
		if ((j > h && (home <= h || home > j)) || (j < h && home <= h && home > j)) {
			s->hix[h] = s->hix[j];
			h = j;
		}
	}
	s->hix[h] = 0;
}

static inline int sim_pinned(void *arg, uint64_t key)
{
	struct sim *s = arg;
	long i = slot_of(s, key);

	CHECK(i >= 0);		/* victims() only offers resident pages */
	return s->pin[i];
}

/* Put the page of r->key in a free slot and tell the policy; returns the slot. */
static inline size_t sim_insert_r(struct sim *s, const struct kvt_ref *r)
{
	size_t i = s->low;

	CHECK(s->n < s->cap && slot_of(s, r->key) < 0);
	while (s->used[i])
		i++;
	s->low = i + 1;
	memset(meta_of(s, i), 0, s->ops->meta_size);
	s->used[i] = 1;
	s->pin[i] = 0;
	s->key[i] = r->key;
	sim_hadd(s, r->key, i);
	s->n++;
	s->ops->on_insert(s->st, r, meta_of(s, i));
	return i;
}

/* The reference sim_insert and sim_access make of key at step t. */
static inline struct kvt_ref sim_ref_for(const struct sim *s, uint64_t key, uint64_t t)
{
	struct kvt_ref r = ref_at(key, t);

	if (s->positions) {
		r.seq = (uint32_t)(key % 3);
		r.layer = (uint32_t)(key >> 2) % 4;
		r.index = (uint32_t)(key >> 8) % 64;
	}
	return r;
}

static inline void sim_insert(struct sim *s, uint64_t key)
{
	struct kvt_ref r = sim_ref_for(s, key, s->step);

	sim_insert_r(s, &r);
}

static inline void sim_remove(struct sim *s, uint64_t key)
{
	long i = slot_of(s, key);

	CHECK(i >= 0);
	s->ops->on_remove(s->st, key, meta_of(s, i));
	memset(meta_of(s, i), 0xa5, s->ops->meta_size);	/* catch later use */
	sim_hdel(s, key);
	s->used[i] = 0;
	if ((size_t)i < s->low)
		s->low = (size_t)i;
	s->n--;
}

static inline void sim_access(struct sim *s, uint64_t key)
{
	long i = slot_of(s, key);

	CHECK(i >= 0);
	struct kvt_ref r = sim_ref_for(s, key, ++s->step);
	s->ops->on_access(s->st, &r, meta_of(s, i));
	if (s->positions && s->ops->on_score) {	/* some attention mass */
		r.score = (float)(key % 7) / 8.0f;
		s->ops->on_score(s->st, &r, meta_of(s, i));
	}
}

/* One reference: a hit is an access; a miss evicts victims(1) when full. */
static inline void sim_ref(struct sim *s, uint64_t key)
{
	if (slot_of(s, key) >= 0) {
		s->hits++;
		sim_access(s, key);
		return;
	}
	s->misses++;
	if (s->n == s->cap) {
		uint64_t v;
		CHECK_EQ(s->ops->victims(s->st, &v, 1, sim_pinned, s), 1);
		sim_remove(s, v);
	}
	sim_insert(s, key);
}

/*
 * One reference described in full (time, step, seq, layer, index, next
 * as the caller knows them): a hit is on_access(r); a miss in a full
 * tier evicts victims(1) (skipping what pin_fn, or the pin flags, hold),
 * then on_insert(r), and with pager_like on_access(r) as well. Returns 1
 * for a hit.
 */
static inline int sim_ref_r(struct sim *s, const struct kvt_ref *r)
{
	long i = slot_of(s, r->key);

	if (i >= 0) {
		s->hits++;
		s->ops->on_access(s->st, r, meta_of(s, (size_t)i));
		return 1;
	}
	s->misses++;
	if (s->n == s->cap) {
		uint64_t v;

		CHECK_EQ(s->ops->victims(s->st, &v, 1, s->pin_fn ? s->pin_fn : sim_pinned,
					 s->pin_fn ? s->pin_arg : s), 1);
		sim_remove(s, v);
	}
	i = (long)sim_insert_r(s, r);
	if (s->pager_like)
		s->ops->on_access(s->st, r, meta_of(s, (size_t)i));
	return 0;
}

static inline unsigned run_trace(const struct kvt_policy_ops *ops, size_t cap,
			  const uint64_t *tr, size_t n, struct sim *keep)
{
	struct sim s;
	unsigned hits;

	sim_open(&s, ops, cap);
	for (size_t i = 0; i < n; i++)
		sim_ref(&s, tr[i]);
	CHECK_EQ(s.hits + s.misses, n);
	hits = s.hits;
	if (keep)
		*keep = s;
	else
		sim_close(&s);
	return hits;
}

/* victims(want) must return exactly the keys in exp, in order. */
static inline void check_victims(struct sim *s, size_t want, const uint64_t *exp, size_t n)
{
	uint64_t out[16];

	CHECK(want <= 16);
	CHECK_EQ(s->ops->victims(s->st, out, want, sim_pinned, s), n);
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(out[i], exp[i]);
}

/* victims(8) with no pinned() callback must return exactly the keys in exp. */
static inline void check_victims_nocb(struct sim *s, const uint64_t *exp, size_t n)
{
	uint64_t out[8];

	CHECK(n <= 8);
	CHECK_EQ(s->ops->victims(s->st, out, 8, NULL, NULL), n);
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(out[i], exp[i]);
}

/* A tier of cap with pages 1..n inserted in order, none used; victims()
 * of the empty tier gives 0 first. */
static inline void sim_open_fill(struct sim *s, const struct kvt_policy_ops *ops,
				 size_t cap, uint64_t n)
{
	uint64_t out[1];

	sim_open(s, ops, cap);
	CHECK_EQ(ops->victims(s->st, out, 1, sim_pinned, s), 0);
	for (uint64_t k = 1; k <= n; k++)
		sim_insert(s, k);
}

/* Remove key and insert it again. */
static inline void sim_reinsert(struct sim *s, uint64_t key)
{
	sim_remove(s, key);
	sim_insert(s, key);
}

/*
 * Pinned pages are skipped, the order is kept, all pinned gives 0. Pages
 * 1..5 go into a tier of 5 and are never used; exp is their eviction
 * order. The steps, in turn:
 *   0  no callback: all five
 *   1  want 3: the first three, distinct, in order
 *   2  exp[0] pinned, want 1: exp[1]
 *   3  exp[0] pinned, want 8: the other four
 *   4  exp[0] and exp[2] pinned, want 8: exp[1] exp[3] exp[4]; want 0: 0
 *   5  all pinned: none
 * Step 0 starts on a new tier, and so does each step in the mask fresh
 * (bit i for step i); the others go on with the tier before them. A
 * policy whose victims() moves a hand wants the steps it moves it for
 * on a new tier.
 */
#define PIN_FRESH(i) (1u << (i))
static inline void check_pinned_order(const struct kvt_policy_ops *ops, const uint64_t *exp,
				      unsigned fresh)
{
	const uint64_t e134[] = { exp[1], exp[3], exp[4] };
	uint64_t out[8];
	struct sim s;

	for (unsigned step = 0; step <= 5; step++) {
		if (!step || fresh & PIN_FRESH(step)) {
			if (step)
				sim_close(&s);
			sim_open_fill(&s, ops, 5, 5);
		}
		memset(s.pin, 0, s.cap);
		if (step >= 2)
			s.pin[slot_of(&s, exp[0])] = 1;
		if (step == 4)
			s.pin[slot_of(&s, exp[2])] = 1;
		if (step == 5)
			memset(s.pin, 1, s.cap);
		switch (step) {
		case 0: check_victims_nocb(&s, exp, 5); break;
		case 1: check_victims(&s, 3, exp, 3); break;
		case 2: check_victims(&s, 1, exp + 1, 1); break;
		case 3: check_victims(&s, 8, exp + 1, 4); break;
		case 4:
			check_victims(&s, 8, e134, 3);
			CHECK_EQ(ops->victims(s.st, out, 0, sim_pinned, &s), 0);	/* want 0 */
			break;
		default: check_victims(&s, 3, NULL, 0); break;
		}
	}
	sim_close(&s);
}

/* A pinned() that counts its calls (in *(size_t *)arg) and pins everything. */
static inline int count_pinned(void *arg, uint64_t key)
{
	(void)key;
	++*(size_t *)arg;
	return 1;
}

/*
 * A large tier (cap) of only pinned pages: victims() returns 0, for want
 * 16 and for want 1, after at most looks * cap calls of pinned(); with no
 * callback it then gives 16. Driven straight through the ops (slot_of is
 * too slow here), keys 0..cap-1. The pages are warmed first: with
 * !segments page k is used k % 4 times (counts and bits set); with
 * segments every other page is used, removed, inserted again and used
 * again, which takes it into the second segment of a segmented policy
 * (2Q's Am needs the trip through A1out).
 */
static inline void check_all_pinned(const struct kvt_policy_ops *ops, size_t cap,
				    size_t looks, int segments)
{
	unsigned char *meta = calloc(cap, ops->meta_size);
	uint64_t out[16];
	size_t calls;
	void *st;

	CHECK(meta);
	CHECK_EQ(ops->init(&st, "", cap, NULL, 0), 0);
	for (size_t k = 0; k < cap; k++) {
		void *m = meta + k * ops->meta_size;

		struct kvt_ref r = ref_at(k, 0);
		ops->on_insert(st, &r, m);
		for (uint64_t a = 0; !segments && a < k % 4; a++) {
			r = ref_at(k, a);
			ops->on_access(st, &r, m);
		}
	}
	for (size_t k = 0; segments && k < cap; k += 2) {
		void *m = meta + k * ops->meta_size;

		struct kvt_ref r = ref_at(k, 1);
		ops->on_access(st, &r, m);
		ops->on_remove(st, k, m);
		memset(m, 0, ops->meta_size);
		ops->on_insert(st, &r, m);
		r = ref_at(k, 2);
		ops->on_access(st, &r, m);
	}
	calls = 0;
	CHECK_EQ(ops->victims(st, out, 16, count_pinned, &calls), 0);
	CHECK(calls <= looks * cap);
	calls = 0;
	CHECK_EQ(ops->victims(st, out, 1, count_pinned, &calls), 0);
	CHECK(calls <= looks * cap);
	CHECK_EQ(ops->victims(st, out, 16, NULL, NULL), cap < 16 ? cap : 16);
	ops->destroy(st);
	free(meta);
}

/* init(params) on a tier of cap gives want; on success the state is
 * destroyed again; a refusal (-EINVAL) comes with one line of reason, and
 * the same refusal without a buffer for it still fails cleanly. */
static inline void check_params(const struct kvt_policy_ops *ops, size_t cap,
				const char *params, int want)
{
	char why[256] = "";
	void *st = NULL;
	int r = ops->init(&st, params, cap, why, sizeof(why));

	if (r != want)
		fprintf(stderr, "%s: params \"%s\": %d, expected %d\n", ops->name,
			params ? params : "(null)", r, want);
	CHECK_EQ(r, want);
	if (r == -EINVAL) {
		if (!why[0] || strchr(why, '\n'))
			fprintf(stderr, "%s: params \"%s\": reason \"%s\"\n", ops->name,
				params ? params : "(null)", why);
		CHECK(why[0] && !strchr(why, '\n'));
		CHECK_EQ(ops->init(&st, params, cap, NULL, 0), -EINVAL);
		CHECK_EQ(ops->init(&st, params, cap, why, 1), -EINVAL);
		CHECK_EQ(why[0], 0);
	}
	if (!r) {
		CHECK(st);
		ops->destroy(st);
	}
}

static inline void check_params_all(const struct kvt_policy_ops *ops, size_t cap,
				    const char *const *params, size_t n, int want)
{
	for (size_t i = 0; i < n; i++)
		check_params(ops, cap, params[i], want);
}

/* The tests' random numbers: xorshift64, one sequence per test program. */
static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;
static inline uint64_t rnd(void)
{
	uint64_t x = rnd_state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rnd_state = x;
}

/*
 * A randomized stress run. Each op draws r = rnd() and a key (from nkeys
 * keys spread over the whole uint64 range, 0 and UINT64_MAX included;
 * with skew some keys come back much more often), then by (r >> 8) % 10:
 *   < ref      a reference through the simulator (a miss in a full tier
 *              evicts victims(1)), nothing pinned
 *   < put      an access if resident, else an insert if there is room
 *   < access   an access if resident
 *   < remove   a removal if resident (with reinsert, half of them put
 *              the key back at once)
 *   else       victims(want) with a random pin set, the caller taking
 *              some, none or all of what it returns
 * victims() must return distinct, resident, unpinned keys, exactly
 * min(want, unpinned) of them. With same_again it must return the same
 * keys when asked again at once; with same_one, one time in four, two
 * calls for one victim give the same key. With order (an optional
 * white-box check that also writes the policy's eviction order and
 * returns its length), the structure is checked after every op and
 * victims() must leave the order as it was. At the end the tier drains
 * through victims(1), and then victims() gives 0. The simulator poisons
 * the metadata of removed pages, so a policy that keeps using it shows
 * up here or under the sanitizers.
 */
struct stress {
	size_t cap, nkeys;
	unsigned ops;
	const char *params;
	unsigned ref, put, access, remove;	/* op thresholds, as above */
	int skew, reinsert, same_again, same_one;
	int positions;				/* as in struct sim */
	size_t (*order)(struct sim *s, uint64_t *keys);
};

static inline void stress_run(const struct kvt_policy_ops *ops, const struct stress *c)
{
	size_t cap = c->cap, nkeys = c->nkeys;
	uint64_t *keys = calloc(nkeys + 4 * (cap + 4), sizeof(*keys));
	uint64_t *out = keys + nkeys, *again = out + cap + 4;
	uint64_t *before = again + cap + 4, *after = before + cap + 4;
	struct sim s;

	CHECK(keys);
	for (size_t i = 0; i < nkeys; i++)
		keys[i] = i * 0x9e3779b97f4a7c15ull;	/* 0 included */
	keys[nkeys - 1] = UINT64_MAX;
	sim_open_params(&s, ops, cap, c->params);
	s.positions = c->positions;
	for (unsigned op = 0; op < c->ops; op++) {
		uint64_t r = rnd();
		uint64_t k = c->skew ? keys[(r % nkeys) % (1 + (r >> 40) % nkeys)] : keys[r % nkeys];
		long slot = slot_of(&s, k);
		unsigned what = (r >> 8) % 10;

		if (what < c->ref) {
			memset(s.pin, 0, s.cap);
			sim_ref(&s, k);
		} else if (what < c->put) {
			if (slot >= 0)
				sim_access(&s, k);
			else if (s.n < s.cap)
				sim_insert(&s, k);
		} else if (what < c->access) {
			if (slot >= 0)
				sim_access(&s, k);
		} else if (what < c->remove) {
			if (slot >= 0) {
				sim_remove(&s, k);
				if (c->reinsert && (r >> 40 & 1))
					sim_insert(&s, k);
			}
		} else {
			unsigned pct = (unsigned[]){ 0, 30, 90, 100 }[(r >> 16) & 3];
			size_t want = 1 + (r >> 20) % (cap + 3), free_ = 0, got, nb = 0;

			for (size_t i = 0; i < s.cap; i++) {
				s.pin[i] = s.used[i] && rnd() % 100 < pct;
				free_ += s.used[i] && !s.pin[i];
			}
			if (c->order)
				nb = c->order(&s, before);
			got = ops->victims(s.st, out, want, sim_pinned, &s);
			CHECK_EQ(got, want < free_ ? want : free_);
			if (c->same_again) {
				CHECK_EQ(ops->victims(s.st, again, want, sim_pinned, &s), got);
				CHECK(!memcmp(out, again, got * sizeof(*out)));
			}
			if (c->order) {
				CHECK_EQ(c->order(&s, after), nb);
				CHECK(!memcmp(before, after, nb * sizeof(*before)));
			}
			for (size_t i = 0; i < got; i++) {
				long j = slot_of(&s, out[i]);
				CHECK(j >= 0 && !s.pin[j]);
				for (size_t m = 0; m < i; m++)
					CHECK(out[m] != out[i]);
			}
			if (c->same_one && free_ && (r >> 30) % 4 == 0) {
				uint64_t a, b;
				CHECK_EQ(ops->victims(s.st, &a, 1, sim_pinned, &s), 1);
				CHECK_EQ(ops->victims(s.st, &b, 1, sim_pinned, &s), 1);
				CHECK_EQ(a, b);
			}
			for (size_t i = 0, take = rnd() % (got + 1); i < take; i++)
				sim_remove(&s, out[i]);
		}
		if (c->order)
			c->order(&s, before);
	}
	while (s.n) {				/* drain through victims */
		uint64_t v;
		memset(s.pin, 0, s.cap);
		CHECK_EQ(ops->victims(s.st, &v, 1, NULL, NULL), 1);
		sim_remove(&s, v);
		if (c->order)
			c->order(&s, before);
	}
	CHECK_EQ(ops->victims(s.st, out, 4, NULL, NULL), 0);
	sim_close(&s);
	free(keys);
}

/*
 * A Zipf-like trace of n references: rank i (from 0) of nkeys drawn with
 * weight 1 / (i + 1)^alpha, written as the key i * mul + add.
 */
static inline void zipf_trace(uint64_t *tr, size_t n, size_t nkeys, double alpha,
			      uint64_t mul, uint64_t add)
{
	double *cdf = malloc(nkeys * sizeof(*cdf)), sum = 0;

	CHECK(cdf);
	for (size_t i = 0; i < nkeys; i++)
		cdf[i] = sum += 1.0 / pow((double)(i + 1), alpha);
	for (size_t i = 0; i < n; i++) {
		double u = (double)(rnd() >> 11) / 9007199254740992.0 * sum;
		size_t lo = 0, hi = nkeys - 1;

		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			if (cdf[mid] < u)
				lo = mid + 1;
			else
				hi = mid;
		}
		tr[i] = (uint64_t)lo * mul + add;
	}
	free(cdf);
}

/*
 * The decode scan of full attention: layers x pages0 pages at the start,
 * one page appended to every layer every `every` steps (at the start of
 * the step), and in each step every page of every layer read once, layer
 * by layer, pages in index order. One sequence (seq 0). Generated one
 * reference at a time, next-use times included (every page is read again
 * in the next step), so a long trace costs no memory.
 */
struct scan_gen {
	uint32_t layers, pages0, every;
	uint64_t steps;
	uint64_t step, time;		/* position: the next reference */
	uint64_t rstep;			/* step of the reference last returned */
	uint64_t start_next;		/* time of the first reference of step + 1 */
	uint32_t layer, index;
};

static inline uint32_t scan_pages(const struct scan_gen *g, uint64_t step)
{
	return g->pages0 + (uint32_t)(step / g->every);
}

/* The key of page index of layer: readable, distinct, opaque to policies. */
static inline uint64_t scan_key(uint32_t layer, uint32_t index)
{
	return (uint64_t)layer << 32 | index;
}

static inline void scan_start(struct scan_gen *g, uint32_t layers, uint32_t pages0,
			      uint32_t every, uint64_t steps)
{
	*g = (struct scan_gen){ .layers = layers, .pages0 = pages0, .every = every,
				.steps = steps };
	g->start_next = (uint64_t)layers * scan_pages(g, 0);
}

/* Total references of the trace. */
static inline uint64_t scan_total(const struct scan_gen *g)
{
	uint64_t n = 0;

	for (uint64_t s = 0; s < g->steps; s++)
		n += (uint64_t)g->layers * scan_pages(g, s);
	return n;
}

/* The next reference into *r; 0 at the end of the trace. */
static inline int scan_next(struct scan_gen *g, struct kvt_ref *r)
{
	uint32_t np = scan_pages(g, g->step);

	if (g->step >= g->steps)
		return 0;
	*r = (struct kvt_ref){ .key = scan_key(g->layer, g->index), .time = g->time,
			       .step = g->step, .seq = 0, .layer = g->layer,
			       .index = g->index, .next = KVT_NEVER };
	g->rstep = g->step;
	if (g->step + 1 < g->steps)
		r->next = g->start_next + (uint64_t)g->layer * scan_pages(g, g->step + 1) +
			  g->index;
	g->time++;
	if (++g->index == np) {
		g->index = 0;
		if (++g->layer == g->layers) {
			g->layer = 0;
			g->step++;
			g->start_next += (uint64_t)g->layers * scan_pages(g, g->step);
		}
	}
	return 1;
}

/* The tail page of each layer is open for appends: the pager pins it. */
static inline int scan_tail_pinned(void *arg, uint64_t key)
{
	const struct scan_gen *g = arg;

	return (uint32_t)key == scan_pages(g, g->rstep) - 1;
}

/*
 * Miss ratio of ops (made from params) on a tier of cap over the decode
 * scan (layers, pages0, every, steps), one eviction per miss like the
 * simulator, the tails pinned when pin_tails, pager_like as in struct sim.
 */
static inline double scan_miss_ratio(const struct kvt_policy_ops *ops, const char *params,
				     size_t cap, uint32_t layers, uint32_t pages0,
				     uint32_t every, uint64_t steps, int pin_tails,
				     int pager_like)
{
	struct scan_gen g;
	struct kvt_ref r;
	struct sim s;
	uint64_t n = 0;

	scan_start(&g, layers, pages0, every, steps);
	sim_open_params(&s, ops, cap, params);
	s.pager_like = pager_like;
	if (pin_tails) {
		s.pin_fn = scan_tail_pinned;
		s.pin_arg = &g;
	}
	while (scan_next(&g, &r)) {
		sim_ref_r(&s, &r);
		n++;
	}
	sim_close(&s);
	return (double)s.misses / (double)n;
}

/*
 * Next-use times of a trace of keys below nkeys: next[i] is the position
 * of the next reference to tr[i], KVT_NEVER if none.
 */
static inline void trace_next(const uint64_t *tr, uint64_t *next, size_t n, size_t nkeys)
{
	uint64_t *seen = malloc(nkeys * sizeof(*seen));

	CHECK(seen);
	for (size_t k = 0; k < nkeys; k++)
		seen[k] = KVT_NEVER;
	for (size_t i = n; i-- > 0; ) {
		CHECK(tr[i] < nkeys);
		next[i] = seen[tr[i]];
		seen[tr[i]] = i;
	}
	free(seen);
}

/*
 * Miss ratio of ops (from params) on a tier of cap over keys tr[] with
 * next-use times next[] (or NULL), per_step references to a decode step
 * (1: every reference its own step), nothing pinned.
 */
static inline double trace_miss_ratio(const struct kvt_policy_ops *ops, const char *params,
				      size_t cap, const uint64_t *tr, const uint64_t *next,
				      size_t n, size_t per_step, int pager_like)
{
	struct sim s;

	sim_open_params(&s, ops, cap, params);
	s.pager_like = pager_like;
	for (size_t i = 0; i < n; i++) {
		struct kvt_ref r = ref_at(tr[i], i);

		r.step = i / per_step;
		r.next = next ? next[i] : KVT_NEVER;
		sim_ref_r(&s, &r);
	}
	sim_close(&s);
	return (double)s.misses / (double)n;
}

/* The miss ratio of ops on a tier of cap over the trace. */
static inline double miss_ratio(const struct kvt_policy_ops *ops, size_t cap,
				const uint64_t *tr, size_t n)
{
	return 1.0 - (double)run_trace(ops, cap, tr, n, NULL) / (double)n;
}

#endif
