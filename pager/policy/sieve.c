/* SPDX-License-Identifier: MIT */
/*
 * SIEVE (Zhang et al., NSDI '24): one FIFO queue, a visited bit per page
 * and a hand. A new page enters at the head of the queue with its bit
 * clear; an access only sets the bit. To evict, the hand moves from the
 * tail towards the head: a visited page loses its bit and stays where it
 * is, an unvisited page is the victim, and the hand wraps from the head
 * back to the tail. Unlike CLOCK, a page the hand passes is not moved to
 * the head, so pages that keep being used settle behind the hand while
 * new ones are sifted out quickly near the head.
 *
 * The queue is a list through a sentinel: head.next is the head (newest),
 * head.prev the tail (oldest), and the hand walks ->prev. The hand resting
 * on the sentinel means "start at the tail". victims() only looks: it
 * leaves the hand on the last victim it returns, so when the caller
 * removes that page on_remove moves the hand on to the next one towards
 * the head, as SIEVE's own eviction does, and a caller that removes
 * nothing gets the same answer again.
 */
#include <errno.h>
#include <stdlib.h>

#include "pager/policy.h"
#include "pager/policy/helpers.h"
#include "pager/policy/list.h"

struct sieve_meta {
	struct kvt_lnode node;		/* first: meta is also the list node */
	uint32_t visited;		/* 1 = used since the hand last passed */
	/* == epoch: already returned by this victims(). A mark 2^32 calls
	 * old can match again; the page is then merely skipped once. */
	uint32_t picked;
};

struct sieve {
	struct kvt_lnode head;		/* sentinel; head.next newest, head.prev oldest */
	struct kvt_lnode *hand;		/* next page the hand examines (&head: the tail) */
	size_t count;			/* pages in the queue */
	uint32_t epoch;			/* one per victims() call, never 0 */
};

/* params must be "" (SIEVE has no knobs): -EINVAL otherwise; -ENOMEM. */
static int sieve_init(void **state, const char *params, size_t capacity,
		      char *err, size_t errlen)
{
	struct sieve *s;

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
static void sieve_destroy(void *state)
{
	free(state);
}

/* A new page goes to the head of the queue, unvisited (meta arrives
 * zeroed). A hand between the tail and the head reaches it before it
 * wraps, as in SIEVE. */
static void sieve_on_insert(void *state, const struct kvt_ref *r, void *meta)
{
	uint64_t key = r->key;
	struct sieve *s = state;
	struct sieve_meta *m = meta;

	m->node.key = key;
	lnode_add_before(s->head.next, &m->node);
	s->count++;
}

/* Set the visited bit; nothing moves. step and score do not matter. */
static void sieve_on_access(void *state, const struct kvt_ref *r, void *meta)
{
	(void)state; (void)r;
	((struct sieve_meta *)meta)->visited = 1;
}

/* Unlink the page; a hand resting on it moves on towards the head (onto
 * the sentinel when the page was the head: the next sweep wraps). */
static void sieve_on_remove(void *state, uint64_t key, void *meta)
{
	struct sieve *s = state;
	struct kvt_lnode *n = meta;

	(void)key;
	s->hand = s->hand == n ? n->prev : s->hand;
	lnode_del(n);
	s->count--;
}

/*
 * Up to want unpinned keys in the hand's order, each at most once. Does
 * not evict, but clears the visited bits it passes; a pinned page is
 * passed with its bit left as it is. Leaves the hand on the last victim
 * returned, or where the sweep stopped when there is none. Examines at
 * most 2 x count pages: enough for every unpinned page to lose its bit and
 * come round again, so a queue of only pinned pages returns 0 in bounded
 * time.
 */
static size_t sieve_victims(void *state, uint64_t *out, size_t want,
			    int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct sieve *s = state;
	struct kvt_lnode *e = s->hand, *last = NULL;
	size_t budget = 2 * s->count, n = 0;

	if (++s->epoch == 0)	/* 0 is what a fresh meta holds */
		s->epoch = 1;
	while (n < want && budget) {
		struct sieve_meta *m = (struct sieve_meta *)e;

		if (e == &s->head) {	/* wrap: from the head back to the tail */
			e = e->prev;
			continue;
		}
		budget--;
		e = e->prev;
		if (m->picked == s->epoch || (pinned && pinned(arg, m->node.key)))
			continue;
		if (m->visited) {
			m->visited = 0;
			continue;
		}
		m->picked = s->epoch;
		out[n++] = m->node.key;
		last = &m->node;
	}
	s->hand = last ? last : e;
	return n;
}

const struct kvt_policy_ops kvt_policy_sieve = {
	.name		= "sieve",
	.meta_size	= sizeof(struct sieve_meta),
	.init		= sieve_init,
	.destroy	= sieve_destroy,
	.on_insert	= sieve_on_insert,
	.on_access	= sieve_on_access,
	.on_remove	= sieve_on_remove,
	.victims	= sieve_victims,
};
