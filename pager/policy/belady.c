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
#include <stdlib.h>

#include "pager/policy.h"

#define NO_POS UINT32_MAX

struct bel_meta {
	uint64_t key;
	uint64_t next;			/* time of the next reference */
	uint32_t pos;			/* index in the heap, NO_POS when left out */
};

struct belady {
	struct bel_meta **heap;		/* (cap) max-heap on next */
	uint32_t *front;		/* (cap) victims()' frontier: heap positions */
	size_t n, cap;
};

static int bel_init(void **state, const char *params, size_t capacity)
{
	struct belady *s;

	if (params && *params)
		return -EINVAL;
	if (capacity >= NO_POS)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cap = capacity ? capacity : 1;
	s->heap = malloc(s->cap * sizeof(*s->heap));
	s->front = malloc(s->cap * sizeof(*s->front));
	if (!s->heap || !s->front) {
		free(s->heap);
		free(s->front);
		free(s);
		return -ENOMEM;
	}
	*state = s;
	return 0;
}

static void bel_destroy(void *state)
{
	struct belady *s = state;

	free(s->heap);
	free(s->front);
	free(s);
}

static void put(struct belady *s, size_t i, struct bel_meta *m)
{
	s->heap[i] = m;
	m->pos = (uint32_t)i;
}

/* Restore the heap around position i, whose next changed either way. */
static void fix(struct belady *s, size_t i)
{
	struct bel_meta *m = s->heap[i];

	while (i && s->heap[(i - 1) / 2]->next < m->next) {
		put(s, i, s->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= s->n)
			break;
		if (c + 1 < s->n && s->heap[c + 1]->next > s->heap[c]->next)
			c++;
		if (s->heap[c]->next <= m->next)
			break;
		put(s, i, s->heap[c]);
		i = c;
	}
	put(s, i, m);
}

/* Room for one more page; 0 when the arrays cannot grow (the page is
 * then left out of the heap and never offered). */
static int grow(struct belady *s)
{
	struct bel_meta **h;
	uint32_t *f;
	size_t cap = s->cap * 2;

	if (s->n < s->cap)
		return 1;
	if (cap >= NO_POS)
		return 0;
	h = realloc(s->heap, cap * sizeof(*h));
	if (!h)
		return 0;
	s->heap = h;
	f = realloc(s->front, cap * sizeof(*f));
	if (!f)
		return 0;
	s->front = f;
	s->cap = cap;
	return 1;
}

static void bel_on_insert(void *state, const struct kvt_ref *r, void *meta)
{
	struct belady *s = state;
	struct bel_meta *m = meta;

	m->key = r->key;
	m->next = r->next;
	m->pos = NO_POS;
	if (!grow(s))
		return;
	put(s, s->n++, m);
	fix(s, s->n - 1);
}

/* The reference r->next tells when the page is used again. */
static void bel_on_access(void *state, const struct kvt_ref *r, void *meta)
{
	struct belady *s = state;
	struct bel_meta *m = meta;

	m->next = r->next;
	if (m->pos != NO_POS)
		fix(s, m->pos);
}

static void bel_on_remove(void *state, uint64_t key, void *meta)
{
	struct belady *s = state;
	struct bel_meta *m = meta;
	size_t i = m->pos;

	(void)key;
	if (i == NO_POS)
		return;
	if (i != --s->n) {
		put(s, i, s->heap[s->n]);
		fix(s, i);
	}
}

/* Frontier: a max-heap of heap positions, ordered by their next. */
static uint64_t fnext(const struct belady *s, size_t i)
{
	return s->heap[s->front[i]]->next;
}

static void fpush(struct belady *s, size_t *nf, uint32_t pos)
{
	size_t i = (*nf)++;

	while (i && fnext(s, (i - 1) / 2) < s->heap[pos]->next) {
		s->front[i] = s->front[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	s->front[i] = pos;
}

static uint32_t fpop(struct belady *s, size_t *nf)
{
	uint32_t top = s->front[0], last = s->front[--*nf];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= *nf)
			break;
		if (c + 1 < *nf && fnext(s, c + 1) > fnext(s, c))
			c++;
		if (fnext(s, c) <= s->heap[last]->next)
			break;
		s->front[i] = s->front[c];
		i = c;
	}
	if (*nf)
		s->front[i] = last;
	return top;
}

/*
 * Up to want unpinned keys, furthest next use first. Only looks: the
 * frontier starts at the root; the best position on it is taken (or
 * passed, when pinned) and its children join it. Each heap position joins
 * at most once, so the frontier never outgrows the heap.
 */
static size_t bel_victims(void *state, uint64_t *out, size_t want,
			  int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct belady *s = state;
	size_t n = 0, nf = 0;

	if (!s->n || !want)
		return 0;
	fpush(s, &nf, 0);
	while (nf && n < want) {
		uint32_t i = fpop(s, &nf);
		const struct bel_meta *m = s->heap[i];

		if (!pinned || !pinned(arg, m->key))
			out[n++] = m->key;
		if (2 * (size_t)i + 1 < s->n)
			fpush(s, &nf, 2 * i + 1);
		if (2 * (size_t)i + 2 < s->n)
			fpush(s, &nf, 2 * i + 2);
	}
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
