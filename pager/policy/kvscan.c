/* SPDX-License-Identifier: MIT */
/*
 * kvscan: SIEVE, until the references look like the decode scan of full
 * attention; then the page needed furthest in the future first.
 *
 * In decode with full attention every page of every layer is read once
 * per step, in the same order: a cyclic scan larger than the tier, on
 * which LRU, FIFO, CLOCK, ARC, S3-FIFO and SIEVE miss every reference.
 * In a cyclic scan a page read in the current step is not needed before
 * the next one, and the one read last is needed last; a page read in the
 * previous step and not yet in this one is needed later in this step, and
 * again the one read last is needed last. So "most recently referenced
 * first" (MRU) is what Belady's MIN would pick there: it keeps a fixed
 * part of the scan resident and streams the rest through the remaining
 * frames.
 *
 * Detection. An access is "continuing" when the page's previous reference
 * was in the step just before (r->step = last + 1). Over windows of
 * KS_WINDOW accesses, the policy enters scan mode when at least 60% of
 * them continue, and leaves it below 40%. A Zipf-like trace fed one
 * reference per step continues only when a key is referenced twice in a
 * row (a few percent), so it stays in SIEVE mode; a trace with many
 * references per step that mostly revisit the previous step's pages is a
 * scan, or a stable working set for which the ranking below is also
 * right. The pager counts an access at most once per page per step.
 * A scan larger than the tier gives SIEVE no hits, hence nothing to
 * judge: so a window of `capacity` references (at least KS_WINDOW) with
 * under 5% hits, in a tier that keeps evicting, enters scan mode on
 * probation (probe()); the detector then confirms it or leaves, and a
 * failed probe doubles the windows skipped before the next (up to 64).
 *
 * Scan mode, victims in order:
 *   1. dead pages, not referenced in this step or the one before (pages
 *      of a sequence no longer read, stale prefetches), least recent
 *      first;
 *   2. pending pages (below) inserted before this step;
 *   3. live pages, most recently referenced first;
 *   4. pending pages of this step, oldest first.
 * SIEVE mode: SIEVE's order (sieve.c). Both structures follow every
 * event, so a switch takes effect at once.
 *
 * Inserts. A replay that evicts on a miss and inserts the missing page
 * (policy_sim.h, libCacheSim) makes the insert the reference. The live
 * pager inserts a page (place) and counts its reference when it is read
 * (touch): right after the insert for a demand miss, later in the step
 * for a layer-ahead prefetch. The policy tells the two apart by counting
 * inserts whose page is accessed in the same step: when most are, an
 * inserted page is "pending" until its first access: it is kept ahead of
 * the pages already read in this step (it is about to be read), so a
 * prefetch of layer L+1 evicts pages of layer L already consumed, not the
 * prefetched pages before it. In either case an access in the insert's
 * own step is the same reference, not a second one: it updates recency
 * but neither sets SIEVE's visited bit nor counts for detection.
 *
 * params: "mode=N": 0 detects (the default), 1 always ranks as in scan
 * mode, 2 never (SIEVE alone). Per page 64 bytes: two list nodes (SIEVE's
 * queue and a recency list), two 32-bit steps (compared modulo 2^32),
 * flags. Every event is O(1); victims() in scan mode walks from the ends
 * of its lists, passing pinned pages, each page at most twice.
 */
#include <errno.h>
#include <stdlib.h>

#include "pager/policy.h"
#include "pager/policy/helpers.h"
#include "pager/policy/list.h"

#define KS_WINDOW	64	/* accesses per detection window */
#define KS_ENTER	60	/* % continuing to enter scan mode */
#define KS_LEAVE	40	/* % continuing below which it is left */
#define KS_FOLLOW_MAX	64	/* saturation of the insert-then-access count */

struct ks_meta {
	struct kvt_lnode q;		/* SIEVE's queue, by insertion */
	struct kvt_lnode rec;		/* recency list or the pending list */
	uint32_t last;			/* step of the last reference */
	uint32_t ins;			/* step of the insert */
	uint8_t visited;		/* SIEVE: used since the hand passed */
	uint8_t fresh;			/* not accessed since the insert */
	uint8_t pending;		/* on the pending list, not the recency list */
	uint8_t pad;
	/* == epoch: already returned by this victims() */
	uint32_t picked;
};

struct kvscan {
	struct kvt_lnode q;		/* SIEVE: next newest, prev oldest */
	struct kvt_lnode *hand;		/* SIEVE's hand (&q: start at the tail) */
	struct kvt_lnode rec;		/* by last reference: next least recent */
	struct kvt_lnode pend;		/* pending inserts: next oldest */
	size_t count;
	uint32_t epoch;			/* one per victims() call, never 0 */
	uint32_t step;			/* the latest step seen */
	uint32_t acc, cont;		/* this window: accesses, continuing ones */
	int scan;			/* scan mode */
	int mode;			/* 0 detect, 1 scan, 2 SIEVE */
	int probing;			/* scan mode entered on a probe, unconfirmed */
	int follow;			/* > 0: inserts are followed by their access */
	size_t cap;			/* the tier's capacity */
	size_t nref, nhit, nrem;	/* this probe window: references, hits, removals */
	unsigned gap, wait;		/* probe windows to skip after a failed probe */
};

#define Q_META(n)	((struct ks_meta *)((char *)(n) - offsetof(struct ks_meta, q)))
#define R_META(n)	((struct ks_meta *)((char *)(n) - offsetof(struct ks_meta, rec)))

static int ks_init(void **state, const char *params, size_t capacity,
		   char *err, size_t errlen)
{
	uint64_t mode = 0;
	const struct seg_param known[] = {
		{ .key = "mode", .num = &mode, .num_max = 2,
		  .what = "0 detect, 1 scan ranking, 2 SIEVE only" },
	};
	struct kvscan *s;

	if (seg_params_parse(params, known, 1, err, errlen))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->mode = (int)mode;
	lnode_init_head(&s->q);
	lnode_init_head(&s->rec);
	lnode_init_head(&s->pend);
	s->hand = &s->q;
	s->cap = capacity;
	*state = s;
	return 0;
}

static void ks_destroy(void *state)
{
	free(state);
}

static void see_step(struct kvscan *s, uint64_t step)
{
	if ((int32_t)((uint32_t)step - s->step) > 0)
		s->step = (uint32_t)step;
}

/* One reference (hit or not) for the probe (file comment). */
static void probe(struct kvscan *s, int hit)
{
	size_t win = s->cap > KS_WINDOW ? s->cap : KS_WINDOW;

	s->nref++;
	s->nhit += hit;
	if (s->nref < win)
		return;
	if (!s->scan && s->nhit * 20 < s->nref && s->nrem * 2 >= s->nref) {
		if (s->wait) {
			s->wait--;
		} else {
			s->scan = s->probing = 1;
			s->acc = s->cont = 0;
		}
	}
	s->nref = s->nhit = s->nrem = 0;
}

/* The end of a detection window: enter, stay in or leave scan mode. */
static void judge(struct kvscan *s)
{
	int was = s->scan;

	s->scan = s->cont * 100 >= s->acc * (s->scan ? KS_LEAVE : KS_ENTER);
	if (s->scan && s->cont * 100 >= s->acc * KS_ENTER) {
		s->probing = 0;
		s->gap = 0;
	}
	if (was && !s->scan && s->probing) {
		s->probing = 0;
		s->gap = s->gap ? (s->gap < 64 ? 2 * s->gap : 64) : 1;
		s->wait = s->gap;
	}
	s->acc = s->cont = 0;
}

static void follow(struct kvscan *s, int up)
{
	if (up && s->follow < KS_FOLLOW_MAX)
		s->follow++;
	else if (!up && s->follow > -KS_FOLLOW_MAX)
		s->follow--;
}

/* The page enters SIEVE's queue at the head, unvisited, and the recency
 * list as the most recent (the insert is the reference), or the pending
 * list when inserts are followed by their access. */
static void ks_on_insert(void *state, const struct kvt_ref *r, void *meta)
{
	struct kvscan *s = state;
	struct ks_meta *m = meta;

	see_step(s, r->step);
	m->q.key = m->rec.key = r->key;
	m->last = m->ins = (uint32_t)r->step;
	m->fresh = 1;
	m->pending = s->follow > 0;
	lnode_add_before(s->q.next, &m->q);
	lnode_add_before(m->pending ? &s->pend : &s->rec, &m->rec);
	s->count++;
	probe(s, 0);
}

static void ks_on_access(void *state, const struct kvt_ref *r, void *meta)
{
	struct kvscan *s = state;
	struct ks_meta *m = meta;
	uint32_t step = (uint32_t)r->step;
	int same = m->fresh && m->ins == step;

	see_step(s, r->step);
	if (m->fresh) {
		follow(s, same);
		m->fresh = 0;
	}
	if (!same) {
		m->visited = 1;
		s->acc++;
		s->cont += step - m->last == 1;
		if (s->acc >= KS_WINDOW)
			judge(s);
		probe(s, 1);
	}
	m->last = step;
	m->pending = 0;
	lnode_move_last(&s->rec, &m->rec);
}

static void ks_on_remove(void *state, uint64_t key, void *meta)
{
	struct kvscan *s = state;
	struct ks_meta *m = meta;

	(void)key;
	if (m->fresh && m->ins != s->step)
		follow(s, 0);		/* never accessed in its insert's step */
	s->hand = s->hand == &m->q ? m->q.prev : s->hand;
	lnode_del(&m->q);
	lnode_del(&m->rec);
	s->count--;
	s->nrem++;
}

/* SIEVE's victims (sieve.c): the hand walks from the tail to the head,
 * clearing visited bits; at most 2 x count pages examined. */
static size_t sieve_pick(struct kvscan *s, uint64_t *out, size_t want,
			 int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct kvt_lnode *e = s->hand, *last = NULL;
	size_t budget = 2 * s->count, n = 0;

	while (n < want && budget) {
		struct ks_meta *m = Q_META(e);

		if (e == &s->q) {
			e = e->prev;
			continue;
		}
		budget--;
		e = e->prev;
		if (m->picked == s->epoch || (pinned && pinned(arg, m->q.key)))
			continue;
		if (m->visited) {
			m->visited = 0;
			continue;
		}
		m->picked = s->epoch;
		out[n++] = m->q.key;
		last = &m->q;
	}
	s->hand = last ? last : e;
	return n;
}

/* Take m unless it is pinned or already taken. */
static int take(struct kvscan *s, struct ks_meta *m, uint64_t *out, size_t *n,
		int (*pinned)(void *arg, uint64_t key), void *arg)
{
	if (m->picked == s->epoch || (pinned && pinned(arg, m->rec.key)))
		return 0;
	m->picked = s->epoch;
	out[(*n)++] = m->rec.key;
	return 1;
}

/* Scan mode's order (file comment). Each page is examined at most twice. */
static size_t scan_pick(struct kvscan *s, uint64_t *out, size_t want,
			int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct kvt_lnode *e, *live;
	size_t n = 0;

	for (e = s->rec.next; e != &s->rec && n < want; e = e->next) {
		if (s->step - R_META(e)->last < 2)
			break;
		take(s, R_META(e), out, &n, pinned, arg);
	}
	live = e;
	for (e = s->pend.next; e != &s->pend && n < want; e = e->next)
		if (R_META(e)->ins != s->step)
			take(s, R_META(e), out, &n, pinned, arg);
	if (live != &s->rec)
		for (e = s->rec.prev; n < want; e = e->prev) {
			take(s, R_META(e), out, &n, pinned, arg);
			if (e == live)
				break;
		}
	for (e = s->pend.next; e != &s->pend && n < want; e = e->next)
		take(s, R_META(e), out, &n, pinned, arg);
	return n;
}

/*
 * Up to want unpinned keys, best first, each at most once: scan mode's
 * order or SIEVE's. Does not evict; SIEVE mode clears visited bits and
 * moves the hand as sieve.c does. Bounded when everything is pinned.
 */
static size_t ks_victims(void *state, uint64_t *out, size_t want,
			 int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct kvscan *s = state;

	if (++s->epoch == 0)
		s->epoch = 1;
	if (s->mode == 1 || (s->mode == 0 && s->scan))
		return scan_pick(s, out, want, pinned, arg);
	return sieve_pick(s, out, want, pinned, arg);
}

const struct kvt_policy_ops kvt_policy_kvscan = {
	.name		= "kvscan",
	.meta_size	= sizeof(struct ks_meta),
	.init		= ks_init,
	.destroy	= ks_destroy,
	.on_insert	= ks_on_insert,
	.on_access	= ks_on_access,
	.on_remove	= ks_on_remove,
	.victims	= ks_victims,
};
