/* SPDX-License-Identifier: MIT */
/*
 * LIRS (Jiang and Zhang, SIGMETRICS '02). Pages are ranked by their
 * inter-reference recency (IRR): the number of other pages referenced
 * between their last two references. Pages with a low IRR are LIR, the
 * others HIR. LIR pages hold most of the tier (c - h frames, h = hir% of
 * the capacity, at least 1); the resident HIR pages hold the rest, in a
 * FIFO list Q, and are the victims. A stack S, by recency, holds the LIR
 * pages and the HIR pages (resident or not) referenced more recently than
 * the least recent LIR page; "pruning" keeps a LIR page at its bottom.
 *
 * A page referenced while it is in S has an IRR below the bottom LIR
 * page's recency: it becomes LIR and the bottom LIR page becomes a
 * resident HIR page at the end of Q. A HIR page referenced while not in S
 * stays HIR and moves to the end of Q.
 *
 * S is not kept as a list. Every reference gets a stamp from a counter,
 * and a page is in S exactly when its stamp is newer than the bottom LIR
 * page's (after pruning, nothing older remains in S). So S is the LIR list
 * (by recency, bottom first) plus a test on the stamps, and pruning is
 * free: when the bottom LIR page changes, the HIR entries below it fall
 * out of S by themselves.
 *
 * Non-resident HIR pages in S ("ghosts") are remembered in the state: a
 * ring of the last `capacity` evicted HIR keys, with their stamps, and a
 * hash over it. A ghost older than the bottom LIR page is out of S and
 * ignored; a full ring forgets its oldest key.
 *
 * A page the pager removes that is not the victim LIRS would choose is
 * dropped the same way: a LIR page simply leaves (new pages become LIR
 * until the LIR set is full again), a HIR page in S leaves a ghost.
 *
 * params: "hir=PCT" (default 1, 0..100; at least one frame). Per page
 * 40 bytes; the ghost ring costs 24 bytes per page of capacity plus a
 * hash of 4-byte slots, at least twice as many.
 */
#include <errno.h>
#include <stdlib.h>

#include "pager/policy.h"
#include "pager/policy/helpers.h"
#include "pager/policy/list.h"

#define EMPTY	UINT32_MAX

struct lirs_meta {
	struct kvt_lnode node;		/* first: on the LIR list or on Q */
	uint64_t stamp;			/* when it was last referenced */
	uint32_t lir;			/* 1: LIR, 0: resident HIR */
};

struct ghost_ent {
	uint64_t key, stamp;
	uint32_t live;			/* 0: forgotten, the slot is stale */
};

struct lirs {
	struct kvt_lnode lir, q;	/* LIR by recency (next = bottom); Q FIFO */
	size_t nlir, lir_cap;
	uint64_t clock;
	/* ghosts: a ring of gcap entries (next: the oldest or a free one)
	 * and a hash of ring positions + 1 (0 = empty), hmask + 1 slots */
	struct ghost_ent *ring;
	uint32_t *hash;
	size_t gcap, gnext, hmask;
};

static int lirs_init(void **state, const char *params, size_t capacity,
		     char *err, size_t errlen)
{
	unsigned pct = 1;
	const struct seg_param known[] = {
		{ .key = "hir", .val = &pct, .max = 100, .what = "percent of the tier" },
	};
	struct lirs *s;
	size_t hir, hs = 4;

	if (seg_params_parse(params, known, 1, err, errlen))
		return -EINVAL;
	if (capacity > UINT32_MAX / 4)
		return kvt_errf(err, errlen, -EINVAL, "capacity %zu: must be at most %u pages",
				capacity, UINT32_MAX / 4);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	hir = seg_pct(capacity, pct);
	if (!hir)
		hir = 1;
	s->lir_cap = capacity > hir ? capacity - hir : 0;
	s->gcap = capacity ? capacity : 1;
	while (hs < 2 * s->gcap)
		hs <<= 1;
	s->hmask = hs - 1;
	s->ring = calloc(s->gcap, sizeof(*s->ring));
	s->hash = calloc(hs, sizeof(*s->hash));
	if (!s->ring || !s->hash) {
		free(s->ring);
		free(s->hash);
		free(s);
		return -ENOMEM;
	}
	lnode_init_head(&s->lir);
	lnode_init_head(&s->q);
	*state = s;
	return 0;
}

static void lirs_destroy(void *state)
{
	struct lirs *s = state;

	free(s->ring);
	free(s->hash);
	free(s);
}

static size_t ghash(const struct lirs *s, uint64_t key)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	return (size_t)key & s->hmask;
}

/* The hash slot holding key, or the empty one where it would go. */
static size_t gslot(const struct lirs *s, uint64_t key)
{
	size_t h = ghash(s, key);

	while (s->hash[h] && s->ring[s->hash[h] - 1].key != key)
		h = (h + 1) & s->hmask;
	return h;
}

/* Empty hash slot h (backward-shift deletion) and mark its entry stale. */
static void gdel(struct lirs *s, size_t h)
{
	size_t j = h;

	s->ring[s->hash[h] - 1].live = 0;
	for (;;) {
		size_t home;

		j = (j + 1) & s->hmask;
		if (!s->hash[j])
			break;
		home = ghash(s, s->ring[s->hash[j] - 1].key);
		if ((j > h && (home <= h || home > j)) || (j < h && home <= h && home > j)) {
			s->hash[h] = s->hash[j];
			h = j;
		}
	}
	s->hash[h] = 0;
}

/* Forget key; its stamp, or 0 when it was not remembered. */
static uint64_t gtake(struct lirs *s, uint64_t key)
{
	size_t h = gslot(s, key);
	uint64_t stamp;

	if (!s->hash[h])
		return 0;
	stamp = s->ring[s->hash[h] - 1].stamp;
	gdel(s, h);
	return stamp;
}

/* Remember key with stamp, forgetting the oldest when the ring is full. */
static void gput(struct lirs *s, uint64_t key, uint64_t stamp)
{
	struct ghost_ent *e = &s->ring[s->gnext];
	size_t h;

	gtake(s, key);
	if (e->live)
		gdel(s, gslot(s, e->key));
	*e = (struct ghost_ent){ .key = key, .stamp = stamp, .live = 1 };
	h = gslot(s, key);
	s->hash[h] = (uint32_t)s->gnext + 1;
	s->gnext = (s->gnext + 1) % s->gcap;
}

/* The bottom LIR page's stamp: pages newer than it are in S. */
static uint64_t bottom(const struct lirs *s)
{
	return s->nlir ? ((const struct lirs_meta *)s->lir.next)->stamp : 0;
}

static void to_lir(struct lirs *s, struct lirs_meta *m)
{
	m->lir = 1;
	lnode_add_before(&s->lir, &m->node);
	s->nlir++;
}

/* The bottom LIR page becomes a resident HIR page at the end of Q. */
static void demote_bottom(struct lirs *s)
{
	struct lirs_meta *b = (struct lirs_meta *)s->lir.next;

	lnode_del(&b->node);
	s->nlir--;
	b->lir = 0;
	lnode_add_before(&s->q, &b->node);
}

/* A referenced HIR page (m, unlinked) found in S: LIR, and the bottom LIR
 * page steps down when the LIR set is full. */
static void promote(struct lirs *s, struct lirs_meta *m)
{
	int full = s->nlir >= s->lir_cap;

	to_lir(s, m);
	if (full && s->nlir > 1)
		demote_bottom(s);
}

static void lirs_on_insert(void *state, const struct kvt_ref *r, void *meta)
{
	struct lirs *s = state;
	struct lirs_meta *m = meta;
	uint64_t g = gtake(s, r->key);

	m->node.key = r->key;
	if (s->nlir < s->lir_cap) {
		m->stamp = ++s->clock;
		to_lir(s, m);
		return;
	}
	if (s->lir_cap && g && g > bottom(s)) {
		m->stamp = ++s->clock;
		promote(s, m);
		return;
	}
	m->stamp = ++s->clock;
	m->lir = 0;
	lnode_add_before(&s->q, &m->node);
}

static void lirs_on_access(void *state, const struct kvt_ref *r, void *meta)
{
	struct lirs *s = state;
	struct lirs_meta *m = meta;
	int in_s = m->stamp > bottom(s);

	(void)r;
	m->stamp = ++s->clock;
	if (m->lir) {
		lnode_move_last(&s->lir, &m->node);
		return;
	}
	lnode_del(&m->node);
	if (s->lir_cap && (in_s || s->nlir < s->lir_cap)) {
		promote(s, m);
		return;
	}
	lnode_add_before(&s->q, &m->node);
}

static void lirs_on_remove(void *state, uint64_t key, void *meta)
{
	struct lirs *s = state;
	struct lirs_meta *m = meta;

	lnode_del(&m->node);
	if (m->lir) {
		s->nlir--;
		return;
	}
	if (m->stamp > bottom(s))
		gput(s, key, m->stamp);
}

/* Up to want unpinned keys: Q from its front, then the LIR pages from
 * the bottom of S. Only looks. */
static size_t lirs_victims(void *state, uint64_t *out, size_t want,
			   int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct lirs *s = state;
	size_t n = lnode_collect(&s->q, 0, out, want, pinned, arg);

	return n + lnode_collect(&s->lir, 0, out + n, want - n, pinned, arg);
}

const struct kvt_policy_ops kvt_policy_lirs = {
	.name		= "lirs",
	.meta_size	= sizeof(struct lirs_meta),
	.init		= lirs_init,
	.destroy	= lirs_destroy,
	.on_insert	= lirs_on_insert,
	.on_access	= lirs_on_access,
	.on_remove	= lirs_on_remove,
	.victims	= lirs_victims,
};
