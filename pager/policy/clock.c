/* SPDX-License-Identifier: MIT */
/*
 * CLOCK (second chance): the pages sit on a ring swept by a hand. An access
 * only sets the page's reference bit, so the hot path never touches the
 * ring. victims() sweeps from the hand: a pinned page is passed over with
 * its bit left as it is, a referenced page loses its bit and is passed
 * over, an unreferenced page is a victim.
 *
 * The ring is a list through a sentinel that the hand skips over: a page
 * inserted "just behind the hand" is linked before it, which puts it last
 * in the sweep order whether the hand is on a page or on the sentinel.
 */
#include <errno.h>
#include <stdlib.h>

#include "pager/policy.h"
#include "pager/policy/helpers.h"
#include "pager/policy/list.h"

struct clock_meta {
	struct kvt_lnode node;		/* first: meta is also the list node */
	uint32_t ref;			/* 1 = used since the hand last passed */
	/* == epoch: already returned by this victims(). A mark 2^32 calls
	 * old can match again; the page is then merely skipped once. */
	uint32_t picked;
};

struct clock {
	struct kvt_lnode head;		/* sentinel; ring order is head.next... */
	struct kvt_lnode *hand;		/* next node the sweep examines (maybe &head) */
	size_t count;			/* pages on the ring */
	uint32_t epoch;			/* one per victims() call, never 0 */
};

/* params must be "" (CLOCK has no knobs): -EINVAL otherwise; -ENOMEM. */
static int clock_init(void **state, const char *params, size_t capacity,
		      char *err, size_t errlen)
{
	struct clock *s;

	(void)capacity;
	if (seg_params_parse(params, NULL, 0, err, errlen))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	lnode_init_head(&s->head);
	s->hand = &s->head;
	*state = s;
	return 0;
}

/* Frees the state only; the pages' metadata belongs to the tier. */
static void clock_destroy(void *state)
{
	free(state);
}

/* A new page goes just behind the hand (last to be examined) with its
 * reference bit clear: it must be used again to earn a second chance.
 * meta arrives zeroed, so ref and picked are already 0. */
static void clock_on_insert(void *state, const struct kvt_ref *r, void *meta)
{
	uint64_t key = r->key;
	struct clock *s = state;
	struct clock_meta *m = meta;

	m->node.key = key;
	lnode_add_before(s->hand, &m->node);
	s->count++;
}

/* Set the reference bit; step and score do not matter to CLOCK. */
static void clock_on_access(void *state, const struct kvt_ref *r, void *meta)
{
	(void)state; (void)r;
	((struct clock_meta *)meta)->ref = 1;
}

/* Unlink the page; a hand resting on it moves on to the next node. */
static void clock_on_remove(void *state, uint64_t key, void *meta)
{
	struct clock *s = state;
	struct kvt_lnode *n = meta;

	(void)key;
	s->hand = s->hand == n ? n->next : s->hand;
	lnode_del(n);
	s->count--;
}

/*
 * Up to want unpinned keys in sweep order, each at most once. Does not
 * evict, but clears the reference bits it passes and leaves the hand just
 * past the last page examined, as the contract allows. Examines at most
 * 2 x count pages: enough for every unpinned page to lose its bit and come
 * round again, so a ring of only pinned pages returns 0 in bounded time.
 */
static size_t clock_victims(void *state, uint64_t *out, size_t want,
			    int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct clock *s = state;
	struct kvt_lnode *e = s->hand;
	size_t budget = 2 * s->count, n = 0;

	if (++s->epoch == 0)	/* 0 is what a fresh meta holds */
		s->epoch = 1;
	while (n < want && budget) {
		struct clock_meta *m = (struct clock_meta *)e;

		if (e == &s->head) {
			e = e->next;
			continue;
		}
		budget--;
		e = e->next;
		if (m->picked == s->epoch || (pinned && pinned(arg, m->node.key)))
			continue;
		if (m->ref) {
			m->ref = 0;
			continue;
		}
		m->picked = s->epoch;
		out[n++] = m->node.key;
	}
	s->hand = e;
	return n;
}

const struct kvt_policy_ops kvt_policy_clock = {
	.name		= "clock",
	.meta_size	= sizeof(struct clock_meta),
	.init		= clock_init,
	.destroy	= clock_destroy,
	.on_insert	= clock_on_insert,
	.on_access	= clock_on_access,
	.on_remove	= clock_on_remove,
	.victims	= clock_victims,
};
