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
};

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
	CHECK(s->meta && s->key && s->used && s->pin);
	CHECK_EQ(ops->init(&s->st, "", cap), 0);
}

static inline void sim_close(struct sim *s)
{
	s->ops->destroy(s->st);
	free(s->meta);
	free(s->key);
	free(s->used);
	free(s->pin);
}

static inline void *meta_of(struct sim *s, size_t slot)
{
	return s->meta + slot * s->ops->meta_size;
}

static inline long slot_of(const struct sim *s, uint64_t key)
{
	for (size_t i = 0; i < s->cap; i++)
		if (s->used[i] && s->key[i] == key)
			return (long)i;
	return -1;
}

static inline int sim_pinned(void *arg, uint64_t key)
{
	struct sim *s = arg;
	long i = slot_of(s, key);

	CHECK(i >= 0);		/* victims() only offers resident pages */
	return s->pin[i];
}

static inline void sim_insert(struct sim *s, uint64_t key)
{
	size_t i = 0;

	CHECK(s->n < s->cap && slot_of(s, key) < 0);
	while (s->used[i])
		i++;
	memset(meta_of(s, i), 0, s->ops->meta_size);
	s->used[i] = 1;
	s->pin[i] = 0;
	s->key[i] = key;
	s->n++;
	s->ops->on_insert(s->st, key, meta_of(s, i));
}

static inline void sim_remove(struct sim *s, uint64_t key)
{
	long i = slot_of(s, key);

	CHECK(i >= 0);
	s->ops->on_remove(s->st, key, meta_of(s, i));
	memset(meta_of(s, i), 0xa5, s->ops->meta_size);	/* catch later use */
	s->used[i] = 0;
	s->n--;
}

static inline void sim_access(struct sim *s, uint64_t key)
{
	long i = slot_of(s, key);

	CHECK(i >= 0);
	s->ops->on_access(s->st, key, meta_of(s, i), ++s->step, 0.0f);
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

#endif
