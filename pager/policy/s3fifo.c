/* SPDX-License-Identifier: MIT */
/*
 * S3-FIFO (Yang et al., SOSP '23): three FIFO queues. A new page enters a
 * small queue S (10% of the capacity by default); most pages are used once
 * and leave from S soon, cheaply. A page used at least twice while in S
 * moves to the main queue M when it reaches S's tail; the others are
 * evicted, and their keys go to a ghost queue G that remembers as many
 * keys as M holds pages. A page inserted while its key is in G was evicted
 * too early: it goes straight to M. M is CLOCK-like: at its tail a page
 * with a non-zero count loses one and goes back to M's head, a page with
 * count 0 is evicted. Counts grow by one per access, capped at 3, and are
 * reset when a page moves from S to M.
 *
 * Eviction takes from S while S holds at least its share of the capacity,
 * else from M. victims() only looks, but may reorganise as the algorithm
 * does while it searches: it moves pages from S to M and cycles M, as
 * CLOCK clears bits. It counts the pages it has already offered as gone
 * when choosing the queue, so several victims come out in the order that
 * as many evictions would take. A key enters G when a page of S that
 * victims() offered is removed: a page that leaves for another reason (the
 * pager frees it) was not evicted by this policy and is not remembered.
 *
 * Policies see keys only, so G is a one-list ghost of helpers.h (struct
 * kvt_ghost), sized at init from the capacity: a FIFO of the last keys
 * added, a key added again renewed, the oldest forgotten when it is full.
 *
 * Lists: head.next is the head of a queue (newest), head.prev its tail.
 * params: "small=PCT", S's share of the capacity in percent, 1..99.
 */
#include <errno.h>
#include <stdlib.h>

#include "pager/policy.h"
#include "pager/policy/helpers.h"
#include "pager/policy/list.h"

#define S3_FREQ_MAX 3

enum { IN_SMALL, IN_MAIN };

struct s3_meta {
	struct kvt_lnode node;		/* first: meta is also the list node */
	uint8_t freq;			/* accesses, capped at S3_FREQ_MAX */
	uint8_t where;			/* IN_SMALL or IN_MAIN */
	/* == epoch: already returned by this victims(); != 0: offered at
	 * some point (a removal from S then counts as an eviction). A mark
	 * 2^32 calls old can match again; the page is then skipped once. */
	uint32_t picked;
};

struct s3fifo {
	struct kvt_lnode small, main;	/* sentinels of S and M */
	size_t n_small, n_main;		/* pages in S, in M */
	size_t small_cap;		/* S's share: evict from S while n_small >= it */
	uint32_t epoch;			/* one per victims() call, never 0 */
	/* G, list 0 only: the capacity less S's share of keys (at least 1) */
	struct kvt_ghost ghost;
};

/* -EINVAL for bad params ("small=PCT", 1..99, no '%'; given again, the
 * last counts), a zero capacity or one too large for the ghost's indices;
 * -ENOMEM. G is sized from capacity here and never grows: about 32 bytes
 * per page of capacity. */
static int s3_init(void **state, const char *params, size_t capacity,
		   char *err, size_t errlen)
{
	uint64_t pct = 10;
	const struct seg_param known[] = {
		{ .key = "small", .num = &pct, .min = 1, .num_max = 99, .repeat = 1,
		  .what = "percent of the tier" },
	};
	struct s3fifo *s;
	int r;

	if (seg_params_parse(params, known, 1, err, errlen))
		return -EINVAL;
	if (!capacity)
		return kvt_errf(err, errlen, -EINVAL, "capacity 0: needs at least 1 page");
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	lnode_init_head(&s->small);
	lnode_init_head(&s->main);
	s->small_cap = seg_pct(capacity, (unsigned)pct);
	if (!s->small_cap)
		s->small_cap = 1;
	r = ghost_init(&s->ghost, capacity > s->small_cap ? capacity - s->small_cap : 1);
	if (r) {
		free(s);
		return r;
	}
	*state = s;
	return 0;
}

/* Frees the state and G; the pages' metadata belongs to the tier. */
static void s3_destroy(void *state)
{
	struct s3fifo *s = state;

	ghost_destroy(&s->ghost);
	free(s);
}

/* Move n to the head of the queue whose sentinel is head. */
static void move_to_head(struct kvt_lnode *head, struct kvt_lnode *n)
{
	lnode_del(n);
	lnode_add_before(head->next, n);
}

/* Link m at the head of M with count 0. */
static void s3_to_main(struct s3fifo *s, struct s3_meta *m)
{
	m->where = IN_MAIN;
	m->freq = 0;
	lnode_add_before(s->main.next, &m->node);
	s->n_main++;
}

/* A key in G goes to the head of M (and leaves G), any other to the head
 * of S. meta arrives zeroed: count 0, never offered. */
static void s3_on_insert(void *state, const struct kvt_ref *r, void *meta)
{
	uint64_t key = r->key;
	struct s3fifo *s = state;
	struct s3_meta *m = meta;

	m->node.key = key;
	if (ghost_take(&s->ghost, key) >= 0) {
		s3_to_main(s, m);
		return;
	}
	m->where = IN_SMALL;
	lnode_add_before(s->small.next, &m->node);
	s->n_small++;
}

/* Count the use, up to S3_FREQ_MAX; nothing moves. */
static void s3_on_access(void *state, const struct kvt_ref *r, void *meta)
{
	struct s3_meta *m = meta;

	(void)state; (void)r;
	if (m->freq < S3_FREQ_MAX)
		m->freq++;
}

/* Unlink the page. A page of S that victims() offered was evicted: its
 * key goes to G. */
static void s3_on_remove(void *state, uint64_t key, void *meta)
{
	struct s3fifo *s = state;
	struct s3_meta *m = meta;

	lnode_del(&m->node);
	if (m->where == IN_MAIN) {
		s->n_main--;
		return;
	}
	s->n_small--;
	if (m->picked)
		ghost_push(&s->ghost, 0, key);
}

/*
 * Up to want unpinned keys in eviction order, each at most once. While the
 * pages of S not yet offered are at least S's share (or M has nothing to
 * give), the next victim comes from S: from the tail, a page with count > 1
 * moves to M's head (pinned or not: that is not an eviction), a pinned page
 * is passed, any other is the victim. Otherwise it comes from M: from the
 * tail, pinned and offered pages are passed, a page with a count loses one
 * and goes to M's head, a page with count 0 is the victim.
 *
 * Bounded: one cursor per queue that never wraps. S's cursor passes each
 * page of S once. M's ends at M's sentinel, and a page sent to M's head
 * lies ahead of it, so each page of M (or moved into M) is met at most
 * 1 + S3_FREQ_MAX times. A tier of only pinned pages returns 0 after
 * O(count) steps.
 */
static size_t s3_victims(void *state, uint64_t *out, size_t want,
			 int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct s3fifo *s = state;
	/* S's cursor; M's, NULL until M is first asked (it starts at the tail) */
	struct kvt_lnode *sc = s->small.prev, *mc = NULL;
	size_t left_small = s->n_small, n = 0;	/* pages of S not offered or moved */
	int small_done = 0, main_done = 0;

	if (++s->epoch == 0)	/* 0 is what a fresh meta holds */
		s->epoch = 1;
	while (n < want) {
		if (!small_done && (main_done || left_small >= s->small_cap)) {
			for (;;) {
				struct s3_meta *m = (struct s3_meta *)sc;

				if (sc == &s->small) {
					small_done = 1;
					break;
				}
				sc = sc->prev;
				if (m->freq > 1) {
					lnode_del(&m->node);
					s->n_small--;
					left_small--;
					s3_to_main(s, m);
					if (main_done) {	/* M's cursor had finished */
						mc = &m->node;
						main_done = 0;
					}
					continue;
				}
				if (pinned && pinned(arg, m->node.key))
					continue;
				m->picked = s->epoch;
				out[n++] = m->node.key;
				left_small--;
				break;
			}
		} else if (!main_done) {
			if (!mc)
				mc = s->main.prev;
			for (;;) {
				struct s3_meta *m = (struct s3_meta *)mc;
				struct kvt_lnode *next;

				if (mc == &s->main) {
					main_done = 1;
					break;
				}
				next = mc->prev;
				if (m->picked == s->epoch ||
				    (pinned && pinned(arg, m->node.key))) {
					mc = next;
					continue;
				}
				if (m->freq) {
					m->freq--;
					/* At M's head already: meet it again. */
					if (next == &s->main)
						next = mc;
					move_to_head(&s->main, &m->node);
					mc = next;
					continue;
				}
				m->picked = s->epoch;
				out[n++] = m->node.key;
				mc = next;
				break;
			}
		} else {
			break;
		}
	}
	return n;
}

const struct kvt_policy_ops kvt_policy_s3fifo = {
	.name		= "s3fifo",
	.meta_size	= sizeof(struct s3_meta),
	.init		= s3_init,
	.destroy	= s3_destroy,
	.on_insert	= s3_on_insert,
	.on_access	= s3_on_access,
	.on_remove	= s3_on_remove,
	.victims	= s3_victims,
};
