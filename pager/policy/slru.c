/* SPDX-License-Identifier: MIT */
/*
 * Segmented LRU: two LRU lists, probation and protected. A new page enters
 * probation. A hit in probation promotes the page to the most recent end
 * of protected; a hit in protected makes it the most recent there. When
 * protected grows past its share of the tier, its least recent page is
 * demoted to the most recent end of probation: it gets one more chance to
 * be hit before it can go. victims() takes probation's least recent pages
 * first and protected's only when probation has no unpinned page left, so
 * pages used once (a scan) leave before any page used twice.
 *
 * There is no ghost: a page removed for whatever reason is forgotten, and
 * the same key inserted again starts over in probation.
 *
 * Params: protected=PCT (protected's share of capacity, default 80,
 * 0..100, rounded down; 0 makes SLRU plain LRU). Per page: a list node and
 * a segment flag (32 bytes). No allocation beyond the state.
 */
#include <errno.h>
#include <stdlib.h>

#include "pager/policy.h"
#include "pager/policy/list.h"
#include "pager/policy/helpers.h"

struct slru_meta {
	struct kvt_lnode node;		/* first: meta is also the list node */
	uint32_t prot;			/* 0: probation, 1: protected */
};

struct slru {
	struct kvt_lnode prob;		/* LRU: first = least recently used */
	struct kvt_lnode prot;		/* LRU: first = least recently used */
	size_t n_prot;			/* pages on protected */
	size_t max_prot;		/* protected demotes past this */
};

/* params as in the file comment; -EINVAL for anything else; -ENOMEM. */
static int slru_init(void **state, const char *params, size_t capacity,
		     char *err, size_t errlen)
{
	unsigned pct = 80;
	const struct seg_param known[] = {
		{ .key = "protected", .val = &pct, .max = 100, .what = "percent of the tier" },
	};
	struct slru *s;

	if (seg_params_parse(params, known, 1, err, errlen))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	lnode_init_head(&s->prob);
	lnode_init_head(&s->prot);
	s->max_prot = seg_pct(capacity, pct);
	*state = s;
	return 0;
}

/* Frees the state only; the pages' metadata belongs to the tier. */
static void slru_destroy(void *state)
{
	free(state);
}

/* A new page is the most recent in probation (meta arrives zeroed). */
static void slru_on_insert(void *state, const struct kvt_ref *r, void *meta)
{
	uint64_t key = r->key;
	struct slru *s = state;
	struct slru_meta *m = meta;

	m->node.key = key;
	lnode_add_before(&s->prob, &m->node);
}

/* Promote a probation page, or refresh a protected one; a protected
 * segment over its share demotes its least recent page (possibly the one
 * just promoted, when the share is 0) to probation's most recent end.
 * step and score do not matter to SLRU. */
static void slru_on_access(void *state, const struct kvt_ref *r, void *meta)
{
	struct slru *s = state;
	struct slru_meta *m = meta;

	(void)r;
	lnode_move_last(&s->prot, &m->node);
	if (m->prot)
		return;
	m->prot = 1;
	if (++s->n_prot > s->max_prot) {
		struct slru_meta *d = (struct slru_meta *)s->prot.next;

		lnode_move_last(&s->prob, &d->node);
		d->prot = 0;
		s->n_prot--;
	}
}

/* Unlink the page; the tier may reuse meta as soon as this returns. */
static void slru_on_remove(void *state, uint64_t key, void *meta)
{
	struct slru *s = state;
	struct slru_meta *m = meta;

	(void)key;
	lnode_del(&m->node);
	s->n_prot -= m->prot;
}

/* Up to want unpinned keys: probation from its least recent end, then
 * protected from its least recent end. Only looks; visits each page at
 * most once, so an all-pinned tier returns 0 after one pass. */
static size_t slru_victims(void *state, uint64_t *out, size_t want,
			   int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct slru *s = state;
	size_t n = lnode_collect(&s->prob, 0, out, want, pinned, arg);

	return n + lnode_collect(&s->prot, 0, out + n, want - n, pinned, arg);
}

const struct kvt_policy_ops kvt_policy_slru = {
	.name		= "slru",
	.meta_size	= sizeof(struct slru_meta),
	.init		= slru_init,
	.destroy	= slru_destroy,
	.on_insert	= slru_on_insert,
	.on_access	= slru_on_access,
	.on_remove	= slru_on_remove,
	.victims	= slru_victims,
};
