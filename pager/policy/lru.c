/* SPDX-License-Identifier: MIT */
/*
 * LRU: evict the page used longest ago. One recency list through the pages'
 * metadata: first = least recently used, last = most recently used.
 * Every event is O(1); victims() walks from the LRU end and stops after want
 * unpinned keys, so its cost is want plus the pinned pages it passes.
 */
#include "pager/policy.h"
#include "pager/policy/list.h"

const struct kvt_policy_ops kvt_policy_lru = {
	.name		= "lru",
	.meta_size	= sizeof(struct kvt_lnode),
	.init		= lpol_init,
	.destroy	= lpol_destroy,
	.on_insert	= lpol_insert_last,	/* a new page is the most recent */
	.on_access	= lpol_access_last,
	.on_remove	= lpol_remove,
	.victims	= lpol_victims_first,	/* least recently used first */
};
