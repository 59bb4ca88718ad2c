/* SPDX-License-Identifier: MIT */
/*
 * ARC (Megiddo & Modha, FAST'03). The resident pages are split in two LRU
 * lists: T1, pages used once lately, and T2, pages used at least twice.
 * Two ghost lists of keys remember what each lost: B1 the pages evicted
 * from T1, B2 those evicted from T2. A target p (0..c, c = capacity) is
 * T1's share of the tier: a miss on a key in B1 says T1 was too small and
 * raises p, by 1 or |B2|/|B1| if larger; a miss on a key in B2 lowers it,
 * by 1 or |B1|/|B2| if larger. REPLACE evicts T1's least recent page when
 * |T1| > p, else T2's.
 *
 * The pager's split of a miss into victims(), on_remove and on_insert
 * changes three things, all of which converge to the paper's behaviour in
 * a full tier:
 *
 *  - The policy learns the missing key only at on_insert, after the victim
 *    has gone. So on_insert of a key found in B1 or B2 is the ghost hit:
 *    p adapts then and the page enters T2; any other key enters T1. The
 *    REPLACE of that miss ran earlier with the p of the misses before it.
 *  - For the same reason victims() cannot apply the paper's tie rule
 *    (evict from T1 when |T1| == p and the missing key is in B2): a tie
 *    evicts from T2, as for a key not in B2.
 *  - Any removal is an eviction: a page leaving T1 leaves its key in B1,
 *    one leaving T2 in B2, whether victims() named it or not. A page
 *    removed and inserted again with the same key is thus a ghost hit.
 *
 * Bounds, kept by on_insert and on_remove rather than inside REPLACE:
 * |T1| + |B1| <= c (a new key in T1 first forgets B1's oldest keys),
 * |T1| + |T2| + |B1| + |B2| <= 2c (then B2's oldest), and |B2| <= c (a
 * page entering B2 forgets B2's oldest key first). So each ghost list holds
 * at most c keys.
 *
 * No params. Per page: a list node and a list flag (32 bytes). The ghosts
 * cost 2c x 24 bytes plus a hash table of at least 2c 4-byte buckets,
 * allocated once at init.
 */
#include <errno.h>
#include <stdlib.h>

#include "pager/policy.h"
#include "pager/policy/list.h"
#include "pager/policy/helpers.h"

enum { B1, B2 };			/* the ghost's lists */

struct arc_meta {
	struct kvt_lnode node;		/* first: meta is also the list node */
	uint32_t in_t2;			/* 0: on T1, 1: on T2 */
};

struct arc {
	struct kvt_lnode t1, t2;	/* LRU: first = least recently used */
	size_t n1, n2;			/* pages on each */
	size_t c;			/* the capacity */
	size_t p;			/* T1's target, 0..c */
	struct kvt_ghost ghost;		/* lists B1 and B2, 2c keys in all */
};

/* params must be "" (ARC adapts itself): -EINVAL otherwise, and for a
 * capacity too large for the ghost's indices; -ENOMEM. */
static int arc_init(void **state, const char *params, size_t capacity,
		    char *err, size_t errlen)
{
	struct arc *s;
	int r;

	if (seg_params_parse(params, NULL, 0, err, errlen))
		return -EINVAL;
	if (capacity > SIZE_MAX / 2)
		return kvt_errf(err, errlen, -EINVAL, "capacity %zu: must be at most %zu pages",
				capacity, SIZE_MAX / 2);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	r = ghost_init(&s->ghost, 2 * capacity);
	if (r)
		goto fail;
	lnode_init_head(&s->t1);
	lnode_init_head(&s->t2);
	s->c = capacity;
	*state = s;
	return 0;
fail:
	free(s);
	return r;
}

/* Frees the state and the ghosts; the pages' metadata belongs to the tier. */
static void arc_destroy(void *state)
{
	struct arc *s = state;

	ghost_destroy(&s->ghost);
	free(s);
}

/* Link m as the most recent page of T2 (in_t2 = 1) or T1. */
static void arc_link(struct arc *s, struct arc_meta *m, uint32_t in_t2)
{
	m->in_t2 = in_t2;
	lnode_add_before(in_t2 ? &s->t2 : &s->t1, &m->node);
	if (in_t2)
		s->n2++;
	else
		s->n1++;
}

/*
 * A key in B1 or B2 is a ghost hit: p moves (towards T1 for B1, towards
 * T2 for B2; the ratio uses the list sizes with the key still counted) and
 * the page enters T2 as the most recent. Any other key enters T1 as the
 * most recent, and the oldest ghost keys are forgotten to keep the bounds
 * in the file comment.
 */
static void arc_on_insert(void *state, const struct kvt_ref *r, void *meta)
{
	uint64_t key = r->key;
	struct arc *s = state;
	struct kvt_ghost *g = &s->ghost;
	struct arc_meta *m = meta;
	int hit = ghost_take(g, key);
	size_t b1 = ghost_count(g, B1), b2 = ghost_count(g, B2), d;

	m->node.key = key;
	if (hit == B1) {
		b1++;
		d = b1 >= b2 ? 1 : b2 / b1;
		s->p = s->p + d < s->c ? s->p + d : s->c;
		arc_link(s, m, 1);
		return;
	}
	if (hit == B2) {
		b2++;
		d = b2 >= b1 ? 1 : b1 / b2;
		s->p = s->p > d ? s->p - d : 0;
		arc_link(s, m, 1);
		return;
	}
	arc_link(s, m, 0);
	while (s->n1 + ghost_count(g, B1) > s->c && !ghost_pop(g, B1))
		;
	while (s->n1 + s->n2 + ghost_count(g, B1) + ghost_count(g, B2) > 2 * s->c &&
	       !ghost_pop(g, B2))
		;
}

/* A hit moves the page to T2's most recent end (from T1 or within T2).
 * step and score do not matter to ARC. */
static void arc_on_access(void *state, const struct kvt_ref *r, void *meta)
{
	struct arc *s = state;
	struct arc_meta *m = meta;

	(void)r;
	lnode_move_last(&s->t2, &m->node);
	if (!m->in_t2) {
		m->in_t2 = 1;
		s->n1--;
		s->n2++;
	}
}

/* Any removal is an eviction: the key becomes the newest of B1 (from T1)
 * or of B2 (from T2, forgetting B2's oldest key when it holds c). */
static void arc_on_remove(void *state, uint64_t key, void *meta)
{
	struct arc *s = state;
	struct arc_meta *m = meta;

	lnode_del(&m->node);
	if (!m->in_t2) {
		s->n1--;
		ghost_push(&s->ghost, B1, key);
		return;
	}
	s->n2--;
	if (ghost_count(&s->ghost, B2) >= s->c)
		ghost_pop(&s->ghost, B2);
	ghost_push(&s->ghost, B2, key);
}

/*
 * Up to want unpinned keys, in the order that repeated REPLACE would take
 * them if the caller removed each: T1's least recent while T1 would still
 * hold more than p pages, else T2's least recent; each falls back on the
 * other when it has nothing unpinned. Uses the current p (see the file
 * comment). Only looks. Visits each page at most once, so an all-pinned
 * tier returns 0 after one pass.
 */
static size_t arc_victims(void *state, uint64_t *out, size_t want,
			  int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct arc *s = state;

	return seg_collect2(&s->t1, s->n1, s->p, &s->t2, out, want, pinned, arg);
}

const struct kvt_policy_ops kvt_policy_arc = {
	.name		= "arc",
	.meta_size	= sizeof(struct arc_meta),
	.init		= arc_init,
	.destroy	= arc_destroy,
	.on_insert	= arc_on_insert,
	.on_access	= arc_on_access,
	.on_remove	= arc_on_remove,
	.victims	= arc_victims,
};
