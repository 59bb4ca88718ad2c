/* SPDX-License-Identifier: MIT */
/*
 * LIFO: evict the page that entered the tier last; accesses change
 * nothing. Under the pager's full-attention scan (every page of every
 * layer each step, in the same order) this keeps a fixed set of pages
 * resident and hits all of them on every lap, where LRU, FIFO and CLOCK
 * hit nothing and MRU loses its hits: a hit makes a page the most
 * recently used, so MRU evicts it as soon as its batch lets go of it.
 * Same list as LRU, in insertion order.
 */
#include <errno.h>
#include <stdlib.h>

#include "pager/policy.h"
#include "pager/policy/list.h"

struct lifo {
	struct kvt_lnode head;		/* next: oldest, prev: newest */
};

/* params must be "": -EINVAL otherwise; -ENOMEM. */
static int lifo_init(void **state, const char *params, size_t capacity)
{
	struct lifo *s;

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
static void lifo_destroy(void *state)
{
	free(state);
}

/* A new page is the newest, so the next victim. */
static void lifo_on_insert(void *state, uint64_t key, void *meta)
{
	struct lifo *s = state;
	struct kvt_lnode *n = meta;

	n->key = key;
	lnode_add_before(&s->head, n);
}

/* Accesses do not reorder anything. */
static void lifo_on_access(void *state, uint64_t key, void *meta,
			   uint64_t step, float score)
{
	(void)state; (void)key; (void)meta; (void)step; (void)score;
}

/* Unlink the page; the tier may reuse meta as soon as this returns. */
static void lifo_on_remove(void *state, uint64_t key, void *meta)
{
	(void)state; (void)key;
	lnode_del(meta);
}

/* Up to want unpinned keys, newest first. Only looks. */
static size_t lifo_victims(void *state, uint64_t *out, size_t want,
			   int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct lifo *s = state;

	return lnode_collect(&s->head, 1, out, want, pinned, arg);
}

const struct kvt_policy_ops kvt_policy_lifo = {
	.name		= "lifo",
	.meta_size	= sizeof(struct kvt_lnode),
	.init		= lifo_init,
	.destroy	= lifo_destroy,
	.on_insert	= lifo_on_insert,
	.on_access	= lifo_on_access,
	.on_remove	= lifo_on_remove,
	.victims	= lifo_victims,
};
