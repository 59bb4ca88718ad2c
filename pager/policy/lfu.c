/* SPDX-License-Identifier: MIT */
/*
 * LFU with aging: evict the page with the fewest uses, the least recently
 * used of those first. A page's count is 1 when it enters the tier and
 * grows by one per access up to LFU_MAX. Every `age` accesses all counts
 * are halved (rounding down), so a page that was hot long ago does not
 * stay forever: its count decays towards 0 unless it keeps being used.
 *
 * The pages sit in frequency buckets, one list per count 0..LFU_MAX, each
 * in the order of the pages' last access (first = least recent). An
 * access moves the page to the end of the next bucket; victims() walks
 * the buckets from the lowest non-empty one (a bitmap finds it), so every
 * event is O(1) and victims() costs want plus the pinned pages it passes.
 *
 * Halving touches no page. The state counts halvings in gen; a page keeps
 * its count and the gen it was last written in, and its count now is
 * count >> (gen - page gen), since halving twice is a shift by two. The
 * halving itself splices bucket 2k and then bucket 2k+1 into bucket k:
 * O(LFU_MAX) per halving. Within the merged bucket the pages of the lower
 * old count come first, then those of the higher, each group in its order
 * of last access: ties by recency are kept within a group, and across the
 * two groups the older count decides.
 *
 * params: "age=N": accesses between halvings, 0 = never (plain LFU).
 * Default 8 x capacity (at least 64): with the pager's scans, which touch
 * every resident page about once per step, that halves every few steps.
 */
#include <errno.h>
#include <stdlib.h>

#include "pager/policy.h"
#include "pager/policy/helpers.h"
#include "pager/policy/list.h"

#define LFU_MAX 63			/* highest count: buckets 0..63, one bitmap word */

struct lfu_meta {
	struct kvt_lnode node;		/* first: meta is also the list node */
	uint32_t gen;			/* s->gen when count was last written */
	uint32_t count;			/* uses, before the halvings since gen */
};

struct lfu {
	struct kvt_lnode bucket[LFU_MAX + 1];	/* (LFU_MAX + 1) sentinels, by count */
	uint64_t nonempty;		/* bit c: bucket[c] holds a page */
	uint64_t age;			/* accesses between halvings, 0 = never */
	uint64_t ticks;			/* accesses since the last halving */
	/* halvings so far; a page untouched for 2^32 of them reads a wrong
	 * count on its next access: it is merely misplaced, not corrupt */
	uint32_t gen;
};

/* -EINVAL for bad params ("age=N", any 64-bit N; given again, the last
 * counts), -ENOMEM. */
static int lfu_init(void **state, const char *params, size_t capacity,
		    char *err, size_t errlen)
{
	uint64_t age = capacity < 8 ? 64 : 8 * (uint64_t)capacity;
	const struct seg_param known[] = {
		{ .key = "age", .num = &age, .num_max = UINT64_MAX, .repeat = 1,
		  .what = "accesses between halvings" },
	};
	struct lfu *s;

	if (seg_params_parse(params, known, 1, err, errlen))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	for (int c = 0; c <= LFU_MAX; c++)
		lnode_init_head(&s->bucket[c]);
	s->age = age;
	*state = s;
	return 0;
}

/* Frees the state only; the pages' metadata belongs to the tier. */
static void lfu_destroy(void *state)
{
	free(state);
}

/* The page's count now: its stored count less the halvings since. */
static uint32_t lfu_count(const struct lfu *s, const struct lfu_meta *m)
{
	uint32_t shift = s->gen - m->gen;

	return shift >= 32 ? 0 : m->count >> shift;
}

/* Set the page's count to c (<= LFU_MAX) and link it last in bucket c. */
static void lfu_link(struct lfu *s, struct lfu_meta *m, uint32_t c)
{
	m->count = c;
	m->gen = s->gen;
	lnode_add_before(&s->bucket[c], &m->node);
	s->nonempty |= 1ull << c;
}

/* Unlink the page; clear its bucket's bit if the bucket is now empty. A
 * node whose two neighbours are one node was alone with that node, which
 * is therefore its bucket's sentinel. */
static void lfu_unlink(struct lfu *s, struct lfu_meta *m)
{
	struct kvt_lnode *n = &m->node;

	lnode_del(n);
	if (n->prev == n->next)
		s->nonempty &= ~(1ull << (n->prev - s->bucket));
}

/* Append src's pages to the end of dst, leaving src empty. O(1). */
static void lfu_splice(struct kvt_lnode *dst, struct kvt_lnode *src)
{
	if (src->next == src)
		return;
	src->next->prev = dst->prev;
	dst->prev->next = src->next;
	src->prev->next = dst;
	dst->prev = src->prev;
	lnode_init_head(src);
}

/* Halve every count: bucket k becomes old 2k then old 2k+1. Ascending k is
 * safe: old bucket k (k >= 1) already went to k/2 < k, and 2k, 2k+1 > k
 * are still untouched. */
static void lfu_halve(struct lfu *s)
{
	s->gen++;
	for (int k = 0; k <= LFU_MAX / 2; k++) {
		if (k)
			lfu_splice(&s->bucket[k], &s->bucket[2 * k]);
		lfu_splice(&s->bucket[k], &s->bucket[2 * k + 1]);
	}
	s->nonempty = 0;
	for (int c = 0; c <= LFU_MAX; c++)
		if (s->bucket[c].next != &s->bucket[c])
			s->nonempty |= 1ull << c;
}

/* A new page has count 1 (the use that brought it in) and is the most
 * recent of bucket 1. meta arrives zeroed. */
static void lfu_on_insert(void *state, const struct kvt_ref *r, void *meta)
{
	uint64_t key = r->key;
	struct lfu_meta *m = meta;

	m->node.key = key;
	lfu_link(state, m, 1);
}

/* Count the use (up to LFU_MAX) and make the page the most recent of its
 * new bucket; every age-th access halves all counts first. */
static void lfu_on_access(void *state, const struct kvt_ref *r, void *meta)
{
	struct lfu *s = state;
	struct lfu_meta *m = meta;
	uint32_t c;

	(void)r;
	if (s->age && ++s->ticks >= s->age) {
		s->ticks = 0;
		lfu_halve(s);
	}
	c = lfu_count(s, m);
	lfu_unlink(s, m);
	lfu_link(s, m, c < LFU_MAX ? c + 1 : LFU_MAX);
}

/* Unlink the page; the tier may reuse meta as soon as this returns. */
static void lfu_on_remove(void *state, uint64_t key, void *meta)
{
	(void)key;
	lfu_unlink(state, meta);
}

/* Up to want unpinned keys: lowest count first, least recent first within
 * a bucket. Only reads; visits each page at most once. */
static size_t lfu_victims(void *state, uint64_t *out, size_t want,
			  int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct lfu *s = state;
	uint64_t bits = s->nonempty;
	size_t n = 0;

	while (n < want && bits) {
		int c = __builtin_ctzll(bits);

		bits &= bits - 1;
		n += lnode_collect(&s->bucket[c], 0, out + n, want - n, pinned, arg);
	}
	return n;
}

const struct kvt_policy_ops kvt_policy_lfu = {
	.name		= "lfu",
	.meta_size	= sizeof(struct lfu_meta),
	.init		= lfu_init,
	.destroy	= lfu_destroy,
	.on_insert	= lfu_on_insert,
	.on_access	= lfu_on_access,
	.on_remove	= lfu_on_remove,
	.victims	= lfu_victims,
};
