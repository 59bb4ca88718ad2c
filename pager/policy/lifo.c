/* SPDX-License-Identifier: MIT */
/*
 * LIFO: evict the page that entered the tier last; accesses change
 * nothing. Under the pager's full-attention scan (every page of every
 * layer each step, in the same order) this keeps a fixed set of pages
 * resident and hits all of them on every lap, where LRU, FIFO and CLOCK
 * hit nothing and MRU loses some of its hits: a hit makes a page the most
 * recently used, so MRU evicts it as soon as its batch lets go of it.
 * The list is in insertion order.
 */
#include "pager/policy.h"
#include "pager/policy/list.h"

/* Accesses do not reorder anything. */
static void lifo_on_access(void *state, const struct kvt_ref *r, void *meta)
{
	(void)state; (void)r; (void)meta;
}

const struct kvt_policy_ops kvt_policy_lifo = {
	.name		= "lifo",
	.meta_size	= sizeof(struct kvt_lnode),
	.init		= lpol_init,
	.destroy	= lpol_destroy,
	.on_insert	= lpol_insert_last,
	.on_access	= lifo_on_access,
	.on_remove	= lpol_remove,
	.victims	= lpol_victims_last,	/* newest first */
};
