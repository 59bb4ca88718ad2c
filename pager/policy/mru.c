/* SPDX-License-Identifier: MIT */
/*
 * MRU: evict the page used most recently. The classic answer to a cyclic
 * scan larger than the tier, where LRU always evicts the page needed next
 * and hits nothing, while MRU keeps a fixed subset resident and hits it on
 * every lap. Same recency list as LRU (first = least recently used, last =
 * most recently used); only the direction of victims() differs.
 */
#include "pager/policy.h"
#include "pager/policy/list.h"

const struct kvt_policy_ops kvt_policy_mru = {
	.name		= "mru",
	.meta_size	= sizeof(struct kvt_lnode),
	.init		= lpol_init,
	.destroy	= lpol_destroy,
	.on_insert	= lpol_insert_last,	/* a new page is the most recent: next victim */
	.on_access	= lpol_access_last,
	.on_remove	= lpol_remove,
	.victims	= lpol_victims_last,	/* most recently used first */
};
