/* SPDX-License-Identifier: MIT */
/*
 * MRU: evict the page used most recently. The classic answer to a cyclic
 * scan larger than the tier, where LRU always evicts the page needed next
 * and hits nothing, while MRU keeps a fixed subset resident and hits it on
 * every lap. Same recency list as LRU (first = least recently used, last =
 * most recently used); only the direction of victims() differs.
 */
#include <errno.h>
#include <stdlib.h>

#include "pager/policy.h"
#include "pager/policy/list.h"

struct mru {
	struct kvt_lnode head;		/* next: LRU end, prev: MRU end */
};

/* params must be "" (MRU has no knobs): -EINVAL otherwise; -ENOMEM. */
static int mru_init(void **state, const char *params, size_t capacity)
{
	struct mru *s;

	(void)capacity;
	if (params && *params)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	lnode_init_head(&s->head);
	*state = s;
	return 0;
}

/* Frees the state only; the pages' metadata belongs to the tier. */
static void mru_destroy(void *state)
{
	free(state);
}

/* A new page is the most recently used (so, under MRU, the next victim). */
static void mru_on_insert(void *state, uint64_t key, void *meta)
{
	struct mru *s = state;
	struct kvt_lnode *n = meta;

	n->key = key;
	lnode_add_before(&s->head, n);
}

/* Move the page to the MRU end; step and score do not matter to MRU. */
static void mru_on_access(void *state, uint64_t key, void *meta,
			  uint64_t step, float score)
{
	struct mru *s = state;

	(void)key; (void)step; (void)score;
	lnode_move_last(&s->head, meta);
}

/* Unlink the page; the tier may reuse meta as soon as this returns. */
static void mru_on_remove(void *state, uint64_t key, void *meta)
{
	(void)state; (void)key;
	lnode_del(meta);
}

/* Up to want unpinned keys, most recently used first. Only looks. */
static size_t mru_victims(void *state, uint64_t *out, size_t want,
			  int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct mru *s = state;

	return lnode_collect(&s->head, 1, out, want, pinned, arg);
}

const struct kvt_policy_ops kvt_policy_mru = {
	.name		= "mru",
	.meta_size	= sizeof(struct kvt_lnode),
	.init		= mru_init,
	.destroy	= mru_destroy,
	.on_insert	= mru_on_insert,
	.on_access	= mru_on_access,
	.on_remove	= mru_on_remove,
	.victims	= mru_victims,
};
