/* SPDX-License-Identifier: MIT */
/*
 * Belady's MIN (1966): evict the page whose next reference lies furthest
 * in the future (kvt_ref.next; KVT_NEVER, never again, is the furthest).
 * Without pins and with one eviction per miss no policy misses less, so it
 * is the yardstick for the others. Only an offline replay knows the
 * future: the policy is flagged KVT_POLICY_OFFLINE and the pager refuses
 * it; kvt-sim and the tests fill kvt_ref.next.
 *
 * Pinned pages break the optimality: the page MIN wants may be pinned, and
 * the next best is then not the optimal choice in general.
 *
 * A binary max-heap of the resident pages by next use, in the state; each
 * page's metadata holds its next use and its heap position. on_insert,
 * on_access and on_remove are O(log n). victims() reads the k best without
 * touching the heap: a second, small heap over the first one's positions
 * (the frontier) yields them in order in O(k log k) when nothing is
 * pinned; a pinned page costs one frontier step, so a tier of only pinned
 * pages costs O(n log n) and returns 0.
 *
 * Ties (equal next, KVT_NEVER above all) go in heap order: deterministic
 * for one sequence of calls, not specified beyond that.
 *
 * No params. Per page 24 bytes; the state holds two arrays of a pointer
 * (heap) and a 4-byte index (frontier) per page of capacity, grown if the
 * tier ever holds more.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

#include "pager/policy.h"
#include "pager/policy/heap.h"
#include "pager/policy/helpers.h"

struct bel_meta {
	uint64_t key;
	uint64_t next;			/* time of the next reference */
	uint32_t pos;			/* index in the heap, HEAP_NO_POS when left out */
};

#define POS	offsetof(struct bel_meta, pos)

struct belady {
	struct kvt_heap h;		/* max-heap on next */
};

static int bel_init(void **state, const char *params, size_t capacity,
		    char *err, size_t errlen)
{
	struct belady *s;

	if (seg_params_parse(params, NULL, 0, err, errlen))
		return -EINVAL;
	if (capacity >= HEAP_NO_POS)
		return kvt_errf(err, errlen, -EINVAL, "capacity %zu: must be below %zu pages",
				capacity, (size_t)HEAP_NO_POS);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	if (heap_init(&s->h, capacity)) {
		free(s);
		return -ENOMEM;
	}
	*state = s;
	return 0;
}

static void bel_destroy(void *state)
{
	struct belady *s = state;

	heap_destroy(&s->h);
	free(s);
}

/* a is used again later than b, so it goes first. */
static int later(const void *a, const void *b)
{
	return ((const struct bel_meta *)a)->next > ((const struct bel_meta *)b)->next;
}

/* A page the heap cannot grow for is left out and never offered. */
static void bel_on_insert(void *state, const struct kvt_ref *r, void *meta)
{
	struct belady *s = state;
	struct bel_meta *m = meta;

	m->key = r->key;
	m->next = r->next;
	heap_add(&s->h, m, later, POS);
}

/* The reference r->next tells when the page is used again. */
static void bel_on_access(void *state, const struct kvt_ref *r, void *meta)
{
	struct belady *s = state;
	struct bel_meta *m = meta;

	m->next = r->next;
	heap_moved(&s->h, m, later, POS);
}

static void bel_on_remove(void *state, uint64_t key, void *meta)
{
	struct belady *s = state;

	(void)key;
	heap_del(&s->h, meta, later, POS);
}

/*
 * Up to want unpinned keys, furthest next use first. Only looks: a walk
 * of the heap's frontier, where a pinned page costs one step.
 */
static size_t bel_victims(void *state, uint64_t *out, size_t want,
			  int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct belady *s = state;
	size_t n = 0, nf = heap_walk_begin(&s->h);
	const struct bel_meta *m;

	while (n < want && (m = heap_walk_next(&s->h, &nf, later)))
		if (!pinned || !pinned(arg, m->key))
			out[n++] = m->key;
	return n;
}

const struct kvt_policy_ops kvt_policy_belady = {
	.name		= "belady",
	.meta_size	= sizeof(struct bel_meta),
	.flags		= KVT_POLICY_OFFLINE,
	.init		= bel_init,
	.destroy	= bel_destroy,
	.on_insert	= bel_on_insert,
	.on_access	= bel_on_access,
	.on_remove	= bel_on_remove,
	.victims	= bel_victims,
};
