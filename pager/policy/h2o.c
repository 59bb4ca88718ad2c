/* SPDX-License-Identifier: MIT */
/*
 * h2o: Heavy-Hitter Oracle (Zhang et al., NeurIPS '23) at page grain. A
 * few tokens gather most of the attention mass over a generation; H2O
 * keeps those heavy hitters and the most recent tokens. Here: each page
 * accumulates the attention mass the runtime reports for it (on_score,
 * r->score, through kvt_seq_score), optionally decayed per step; the
 * recent window (the last `recent` pages of each (sequence, layer) table,
 * see window.h) is kept; outside it the page with the lowest accumulated
 * mass goes first, ties to the page that entered first. Window pages are
 * returned only when nothing else is left, lowest mass first.
 *
 * Decay: with decay=D (percent, 1..100), mass reported at step s counts
 * D/100 ^ (now - s). Kept without touching every page: a page holds its
 * mass divided by (D/100)^(step - base), a common scale, and the scale is
 * folded back into every page (which keeps the heap order) when it grows
 * past 2^100.
 *
 * A page whose seq, layer or index is unknown (KVT_REF_NONE) is never in
 * the window. Without scores (a runtime that reports none) every mass is
 * 0 and the policy evicts pages outside the window in insertion order.
 *
 * A binary min-heap on (mass, insertion) in the state, positions in the
 * metadata: every event O(log n); victims() reads the k best without
 * changing the heap (the frontier walk of heap.h), passing pinned and
 * window pages, so its cost grows with the pages it passes.
 *
 * params: "recent=N" pages (default 4, 0..2^20), "decay=PCT" (default
 * 100: none). Per page 48 bytes; the state holds 12 bytes per page of
 * capacity (heap and frontier) and the window map.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "pager/policy.h"
#include "pager/policy/heap.h"
#include "pager/policy/helpers.h"
#include "pager/policy/window.h"

#define RESCALE_AT	0x1p100

struct h2o_meta {
	uint64_t key;
	double mass;			/* accumulated, divided by the state's scale */
	uint64_t order;			/* insertion count: the tie break */
	uint32_t pos;			/* heap index, HEAP_NO_POS when left out */
	uint32_t seq, layer, index;
	uint32_t tracked;		/* counted in the window map */
};

#define POS	offsetof(struct h2o_meta, pos)

struct h2o {
	struct kvt_heap h;		/* min-heap on (mass, order) */
	uint64_t order;
	uint64_t recent;
	double keep;			/* decay per step, 0..1 (1: none) */
	double scale;			/* 1 / keep^(step - base) */
	uint64_t step;			/* the latest step seen */
	struct kvwin win;
};

static int h2o_init(void **state, const char *params, size_t capacity,
		    char *err, size_t errlen)
{
	uint64_t recent = 4, decay = 100;
	const struct seg_param known[] = {
		{ .key = "recent", .num = &recent, .num_max = 1u << 20,
		  .what = "pages" },
		{ .key = "decay", .num = &decay, .min = 1, .num_max = 100,
		  .what = "percent of a score kept per step" },
	};
	struct h2o *s;

	if (seg_params_parse(params, known, 2, err, errlen))
		return -EINVAL;
	if (capacity >= HEAP_NO_POS)
		return kvt_errf(err, errlen, -EINVAL, "capacity %zu: must be below %zu pages",
				capacity, (size_t)HEAP_NO_POS);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	if (heap_init(&s->h, capacity) || kvwin_init(&s->win)) {
		heap_destroy(&s->h);
		free(s);
		return -ENOMEM;
	}
	s->recent = recent;
	s->keep = (double)decay / 100.0;
	s->scale = 1.0;
	*state = s;
	return 0;
}

static void h2o_destroy(void *state)
{
	struct h2o *s = state;

	kvwin_destroy(&s->win);
	heap_destroy(&s->h);
	free(s);
}

/* a goes before b (evicted first). */
static int before(const void *pa, const void *pb)
{
	const struct h2o_meta *a = pa, *b = pb;

	return a->mass < b->mass || (a->mass == b->mass && a->order < b->order);
}

/* Move the common scale on to step; fold it into the pages when large. */
static void advance(struct h2o *s, uint64_t step)
{
	if (step <= s->step || s->keep >= 1.0) {
		if (step > s->step)
			s->step = step;
		return;
	}
	s->scale /= pow(s->keep, (double)(step - s->step));
	s->step = step;
	if (s->scale > RESCALE_AT || !isfinite(s->scale)) {
		double f = isfinite(s->scale) ? 1.0 / s->scale : 0.0;

		for (size_t i = 0; i < s->h.n; i++)
			((struct h2o_meta *)s->h.v[i])->mass *= f;
		s->scale = 1.0;
	}
}

static void h2o_on_insert(void *state, const struct kvt_ref *r, void *meta)
{
	struct h2o *s = state;
	struct h2o_meta *m = meta;

	advance(s, r->step);
	m->key = r->key;
	m->order = s->order++;
	m->seq = r->seq;
	m->layer = r->layer;
	m->index = r->index;
	m->tracked = (uint32_t)kvwin_add(&s->win, r);
	heap_add(&s->h, m, before, POS);
}

static void h2o_on_access(void *state, const struct kvt_ref *r, void *meta)
{
	(void)meta;
	advance(state, r->step);
}

/* Add the page's attention mass of step r->step (negative or NaN: none). */
static void h2o_on_score(void *state, const struct kvt_ref *r, void *meta)
{
	struct h2o *s = state;
	struct h2o_meta *m = meta;

	advance(s, r->step);
	if (!(r->score > 0))
		return;
	m->mass += (double)r->score * s->scale;
	heap_moved(&s->h, m, before, POS);
}

static void h2o_on_remove(void *state, uint64_t key, void *meta)
{
	struct h2o *s = state;
	struct h2o_meta *m = meta;

	(void)key;
	if (m->tracked)
		kvwin_del(&s->win, m->seq, m->layer);
	heap_del(&s->h, m, before, POS);
}

static int in_window(const struct h2o *s, const struct h2o_meta *m)
{
	return m->tracked &&
	       (uint64_t)m->index + s->recent >= kvwin_top(&s->win, m->seq, m->layer);
}

/* Pages of the class (window or not) in heap order, lowest mass first. */
static size_t walk(struct h2o *s, int window, uint64_t *out, size_t n, size_t want,
		   int (*pinned)(void *arg, uint64_t key), void *arg)
{
	size_t nf = heap_walk_begin(&s->h);
	const struct h2o_meta *m;

	while (n < want && (m = heap_walk_next(&s->h, &nf, before)))
		if (in_window(s, m) == window && (!pinned || !pinned(arg, m->key)))
			out[n++] = m->key;
	return n;
}

/* Up to want unpinned keys: outside the window lowest mass first, then
 * the window's pages the same way. Only looks. */
static size_t h2o_victims(void *state, uint64_t *out, size_t want,
			  int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct h2o *s = state;
	size_t n = walk(s, 0, out, 0, want, pinned, arg);

	return walk(s, 1, out, n, want, pinned, arg);
}

const struct kvt_policy_ops kvt_policy_h2o = {
	.name		= "h2o",
	.meta_size	= sizeof(struct h2o_meta),
	.init		= h2o_init,
	.destroy	= h2o_destroy,
	.on_insert	= h2o_on_insert,
	.on_access	= h2o_on_access,
	.on_score	= h2o_on_score,
	.on_remove	= h2o_on_remove,
	.victims	= h2o_victims,
};
