/* SPDX-License-Identifier: MIT */
/*
 * FIFO: evict the page that entered the tier first; accesses change
 * nothing. One list in insertion order (first = oldest), so every event is
 * O(1) and victims() walks from the oldest page, stopping after want
 * unpinned keys: its cost is want plus the pinned pages it passes.
 *
 * FIFO is the baseline the other queue policies (sieve, s3fifo) improve on,
 * and it shows Belady's anomaly: on some traces a larger tier hits less.
 * A page removed and inserted again is a new page: it goes last.
 */
#include "pager/policy.h"
#include "pager/policy/list.h"

/* Accesses do not reorder anything: insertion order alone decides. */
static void fifo_on_access(void *state, const struct kvt_ref *r, void *meta)
{
	(void)state; (void)r; (void)meta;
}

const struct kvt_policy_ops kvt_policy_fifo = {
	.name		= "fifo",
	.meta_size	= sizeof(struct kvt_lnode),
	.init		= lpol_init,		/* no params */
	.destroy	= lpol_destroy,
	.on_insert	= lpol_insert_last,	/* a new page is the newest */
	.on_access	= fifo_on_access,
	.on_remove	= lpol_remove,
	.victims	= lpol_victims_first,	/* oldest first */
};
