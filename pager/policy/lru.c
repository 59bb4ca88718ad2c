/* SPDX-License-Identifier: MIT */
/*
 * LRU: evict the page used longest ago. One recency list through the pages'
 * metadata: first = least recently used, last = most recently used.
 * Every event is O(1); victims() walks from the LRU end and stops after want
 * unpinned keys, so its cost is want plus the pinned pages it passes.
 */
#include <errno.h>
#include <stdlib.h>

#include "pager/policy.h"
#include "pager/policy/list.h"

struct lru {
	struct kvt_lnode head;		/* next: LRU end, prev: MRU end */
};

/* params must be "" (LRU has no knobs): -EINVAL otherwise; -ENOMEM. The
 * capacity is not needed: the list grows through the tier's metadata. */
static int lru_init(void **state, const char *params, size_t capacity)
{
	struct lru *s;

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
static void lru_destroy(void *state)
{
	free(state);
}

/* A new page is the most recently used. */
static void lru_on_insert(void *state, uint64_t key, void *meta)
{
	struct lru *s = state;
	struct kvt_lnode *n = meta;

	n->key = key;
	lnode_add_before(&s->head, n);
}

/* Move the page to the MRU end; step and score do not matter to LRU. */
static void lru_on_access(void *state, uint64_t key, void *meta,
			  uint64_t step, float score)
{
	struct lru *s = state;

	(void)key; (void)step; (void)score;
	lnode_move_last(&s->head, meta);
}

/* Unlink the page; the tier may reuse meta as soon as this returns. */
static void lru_on_remove(void *state, uint64_t key, void *meta)
{
	(void)state; (void)key;
	lnode_del(meta);
}

/* Up to want unpinned keys, least recently used first. Only looks. */
static size_t lru_victims(void *state, uint64_t *out, size_t want,
			  int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct lru *s = state;

	return lnode_collect(&s->head, 0, out, want, pinned, arg);
}

const struct kvt_policy_ops kvt_policy_lru = {
	.name		= "lru",
	.meta_size	= sizeof(struct kvt_lnode),
	.init		= lru_init,
	.destroy	= lru_destroy,
	.on_insert	= lru_on_insert,
	.on_access	= lru_on_access,
	.on_remove	= lru_on_remove,
	.victims	= lru_victims,
};
