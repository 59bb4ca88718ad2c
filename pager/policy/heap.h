/* SPDX-License-Identifier: MIT */
/*
 * An indexed binary heap of pointers to per-page policy metadata, for the
 * policies that rank pages by a key that changes in place (belady, h2o).
 * The entries are the pages' metadata (owned by the tier, stable until
 * on_remove); each holds its own position in the heap as a uint32_t at
 * byte offset pos_off, HEAP_NO_POS when left out, so a page whose key
 * changed is fixed in O(log n) without a search. add, fix and del are
 * O(log n) and allocate only when the heap outgrows its capacity.
 *
 * The order is before(a, b): nonzero when a must come out ahead of b (a
 * strict order; equal entries go in heap order, deterministic for one
 * sequence of calls). Every function takes before and pos_off from the
 * caller rather than from the struct: a policy passes the same constants
 * everywhere, so the compiler calls its before() directly (or inlines it)
 * as it would in a hand-written heap.
 *
 * victims() reads the best entries in order without touching the heap:
 * heap_walk_begin() and heap_walk_next() run a second, small heap over the
 * first one's positions (the frontier): the best position on it comes out
 * and its children join it. Each position joins at most once, so the
 * frontier never outgrows the heap, and k entries cost O(k log k).
 */
#ifndef KVT_PAGER_POLICY_HEAP_H
#define KVT_PAGER_POLICY_HEAP_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define HEAP_NO_POS	UINT32_MAX

struct kvt_heap {
	void **v;		/* (cap) the entries, v[0] the first out */
	uint32_t *front;	/* (cap) the walk's frontier: positions in v */
	size_t n, cap;
};

typedef int (*kvt_heap_before)(const void *a, const void *b);

/*
 * Room for capacity entries (0 counts as 1). The caller has checked that
 * capacity < HEAP_NO_POS. -ENOMEM, with nothing left allocated: then
 * heap_destroy() is still safe.
 */
static inline int heap_init(struct kvt_heap *h, size_t capacity)
{
	h->n = 0;
	h->cap = capacity ? capacity : 1;
	h->v = malloc(h->cap * sizeof(*h->v));
	h->front = malloc(h->cap * sizeof(*h->front));
	if (!h->v || !h->front) {
		free(h->v);
		free(h->front);
		h->v = NULL;
		h->front = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* Frees the arrays only; the entries belong to the tier. */
static inline void heap_destroy(struct kvt_heap *h)
{
	free(h->v);
	free(h->front);
}

static inline uint32_t *heap_pos(void *m, size_t pos_off)
{
	return (uint32_t *)((char *)m + pos_off);
}

static inline void heap_put(struct kvt_heap *h, size_t i, void *m, size_t pos_off)
{
	h->v[i] = m;
	*heap_pos(m, pos_off) = (uint32_t)i;
}

/* Restore the heap around position i, whose entry moved either way. */
static inline void heap_fix(struct kvt_heap *h, size_t i, kvt_heap_before before,
			    size_t pos_off)
{
	void *m = h->v[i];

	while (i && before(m, h->v[(i - 1) / 2])) {
		heap_put(h, i, h->v[(i - 1) / 2], pos_off);
		i = (i - 1) / 2;
	}
	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= h->n)
			break;
		if (c + 1 < h->n && before(h->v[c + 1], h->v[c]))
			c++;
		if (!before(h->v[c], m))
			break;
		heap_put(h, i, h->v[c], pos_off);
		i = c;
	}
	heap_put(h, i, m, pos_off);
}

/* Room for one more entry; 0 when the arrays cannot grow. */
static inline int heap_grow(struct kvt_heap *h)
{
	void **v;
	uint32_t *f;
	size_t cap = h->cap * 2;

	if (h->n < h->cap)
		return 1;
	if (cap >= HEAP_NO_POS)
		return 0;
	v = realloc(h->v, cap * sizeof(*v));
	if (!v)
		return 0;
	h->v = v;
	f = realloc(h->front, cap * sizeof(*f));
	if (!f)
		return 0;
	h->front = f;
	h->cap = cap;
	return 1;
}

/* Add m, its key already set. When the arrays cannot grow, m is left out
 * (its position HEAP_NO_POS): never walked, and fix and del ignore it. */
static inline void heap_add(struct kvt_heap *h, void *m, kvt_heap_before before,
			    size_t pos_off)
{
	*heap_pos(m, pos_off) = HEAP_NO_POS;
	if (!heap_grow(h))
		return;
	heap_put(h, h->n++, m, pos_off);
	heap_fix(h, h->n - 1, before, pos_off);
}

/* m's key changed, either way. */
static inline void heap_moved(struct kvt_heap *h, void *m, kvt_heap_before before,
			      size_t pos_off)
{
	uint32_t i = *heap_pos(m, pos_off);

	if (i != HEAP_NO_POS)
		heap_fix(h, i, before, pos_off);
}

/* Take m out; the tier may reuse m as soon as this returns. */
static inline void heap_del(struct kvt_heap *h, void *m, kvt_heap_before before,
			    size_t pos_off)
{
	size_t i = *heap_pos(m, pos_off);

	if (i == HEAP_NO_POS)
		return;
	if (i != --h->n) {
		heap_put(h, i, h->v[h->n], pos_off);
		heap_fix(h, i, before, pos_off);
	}
}

/* ---- the frontier walk --------------------------------------------- */

static inline void *heap_fat(const struct kvt_heap *h, size_t i)
{
	return h->v[h->front[i]];
}

static inline void heap_fpush(struct kvt_heap *h, size_t *nf, uint32_t pos,
			      kvt_heap_before before)
{
	size_t i = (*nf)++;

	while (i && before(h->v[pos], heap_fat(h, (i - 1) / 2))) {
		h->front[i] = h->front[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h->front[i] = pos;
}

static inline uint32_t heap_fpop(struct kvt_heap *h, size_t *nf, kvt_heap_before before)
{
	uint32_t top = h->front[0], last = h->front[--*nf];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= *nf)
			break;
		if (c + 1 < *nf && before(heap_fat(h, c + 1), heap_fat(h, c)))
			c++;
		if (!before(heap_fat(h, c), h->v[last]))
			break;
		h->front[i] = h->front[c];
		i = c;
	}
	if (*nf)
		h->front[i] = last;
	return top;
}

/*
 * Start a walk: returns the frontier's size, to pass to heap_walk_next().
 * The walk uses the heap's frontier array: one walk at a time, and no
 * add, fix or del until it ends.
 */
static inline size_t heap_walk_begin(struct kvt_heap *h)
{
	if (!h->n)
		return 0;
	h->front[0] = 0;
	return 1;
}

/* The next entry in order (the first call: the best), or NULL once the
 * walk has passed every entry. Only reads the heap. */
static inline void *heap_walk_next(struct kvt_heap *h, size_t *nf, kvt_heap_before before)
{
	uint32_t i;

	if (!*nf)
		return NULL;
	i = heap_fpop(h, nf, before);
	if (2 * (size_t)i + 1 < h->n)
		heap_fpush(h, nf, 2 * i + 1, before);
	if (2 * (size_t)i + 2 < h->n)
		heap_fpush(h, nf, 2 * i + 2, before);
	return h->v[i];
}

#endif
