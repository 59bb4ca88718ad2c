/* SPDX-License-Identifier: MIT */
/*
 * auto (the default): LRU, until the references loop; then MRU.
 *
 * Decode with full attention reads every page of every layer once a step,
 * in the same order: a cyclic scan larger than the tier, on which LRU
 * hits nothing and MRU (Belady, there) keeps a fixed share resident and
 * hits it on every lap. Other patterns (one sequence's pages read much
 * more than others', a working set that fits) want recency. Which one the
 * tier sees is told by the references themselves, with no help from the
 * pager's steps or layers, so that a bare trace of page ids
 * (libCacheSim's oracleGeneral) is judged as the live pager is.
 *
 * Set dueling (Qureshi et al., ISCA 2007), fully associative: two small
 * shadow caches replay a sample of the references, keys whose hash falls
 * in one of `sample` buckets, at capacity / sample frames each, one as LRU
 * and one as MRU. A reference that hits in one shadow and not the other
 * moves a saturating counter toward that one; the tier ranks as MRU while
 * the counter is past the middle by a margin, as LRU while it is below it
 * by one (hysteresis), so it does not flap on a tie. A sampled cyclic
 * scan is a cyclic scan of a sample's size, so the shadows see what the
 * tier would: the MRU shadow hits, the LRU one does not.
 *
 * MRU order alone would keep pages nobody reads any more (a sequence that
 * stopped) for ever at the LRU end. In MRU mode pages whose last reference
 * is more than twice the usual reuse interval back (an average of the
 * intervals of the hits, in this policy's references) go first, least
 * recent first; then the most recent. The mean starts at the first
 * interval seen, and is not trusted once the tier has gone twice its
 * capacity in references without a hit: a mean learnt on a few hot pages
 * would make every page of a later loop look dead, the tier would evict
 * as LRU, the loop would then hit nothing, and no hit would come to
 * correct the mean.
 *
 * params: "mode=N": 0 decides (the default), 1 always MRU, 2 always LRU;
 * "sample=N": the sampling divisor, a power of two (default: what leaves
 * the shadows about 1024 frames). Per page 32 bytes (a list node, the tick
 * of its last reference, whose top bit says it was the insert); the
 * shadows 2 x (capacity / sample) x 24 bytes, and 2 KiB of sampled keys
 * waiting for them. Events are O(1); the sampled keys go through the
 * shadows in runs of up to 256, before victims() ranks (duel()); victims()
 * walks from the ends of one list, past pinned pages.
 */
#include <errno.h>
#include <stdlib.h>

#include "pager/policy.h"
#include "pager/policy/helpers.h"
#include "pager/policy/list.h"

#define AU_PSEL_MAX	1024	/* the counter's range: 0 .. AU_PSEL_MAX */
#define AU_MARGIN	64	/* hysteresis around the middle */
#define AU_SHADOW	1024	/* shadow frames aimed at */
#define AU_PEND		256	/* sampled keys kept for the shadows' next run */

struct au_meta {
	struct kvt_lnode n;		/* first = least recently referenced */
	uint64_t last;			/* tick of the last reference, 0 when the
					 * last was the insert */
};

struct au {
	struct kvt_lnode rec;
	uint64_t tick;			/* references seen */
	uint64_t interval;		/* mean reuse interval of hits, x 8 */
	struct kvt_ghost shadow[2];	/* [0] LRU, [1] MRU, list 0 each */
	size_t scap;			/* frames of each shadow */
	uint64_t lasthit;		/* tick of the last hit */
	uint64_t stale;			/* ticks without a hit after which the mean
					 * interval is not trusted: 2 x capacity */
	uint64_t smask;			/* a key is sampled when its hash & smask is 0 */
	unsigned psel;			/* toward 0: LRU won, toward max: MRU won */
	int mru;			/* ranking as MRU now */
	int mode;			/* 0 decide, 1 MRU, 2 LRU */
	unsigned npend;			/* sampled keys not yet through the shadows */
	uint64_t pend[AU_PEND];
};

static int au_init(void **state, const char *params, size_t capacity,
		   char *err, size_t errlen)
{
	uint64_t mode = 0, sample = 0;
	const struct seg_param known[] = {
		{ .key = "mode", .num = &mode, .num_max = 2,
		  .what = "0 decide, 1 always MRU, 2 always LRU" },
		{ .key = "sample", .num = &sample, .min = 1, .num_max = 1u << 20,
		  .what = "a power of two" },
	};
	struct au *s;

	if (seg_params_parse(params, known, 2, err, errlen))
		return -EINVAL;
	if (sample & (sample - 1))
		return kvt_errf(err, errlen, -EINVAL, "sample=%llu: must be a power of two in 1..%u",
				(unsigned long long)sample, 1u << 20);
	if (!sample)
		for (sample = 1; capacity / sample > AU_SHADOW; sample <<= 1)
			;
	if (!(s = calloc(1, sizeof(*s))))
		return -ENOMEM;
	s->mode = (int)mode;
	s->smask = sample - 1;
	s->scap = capacity / sample ? capacity / sample : 1;
	s->stale = 2 * (uint64_t)capacity;
	s->psel = AU_PSEL_MAX / 2;
	s->mru = mode == 1;
	lnode_init_head(&s->rec);
	if (ghost_init(&s->shadow[0], s->scap) || ghost_init(&s->shadow[1], s->scap)) {
		ghost_destroy(&s->shadow[0]);
		ghost_destroy(&s->shadow[1]);
		free(s);
		return -ENOMEM;
	}
	*state = s;
	return 0;
}

static void au_destroy(void *state)
{
	struct au *s = state;

	ghost_destroy(&s->shadow[0]);
	ghost_destroy(&s->shadow[1]);
	free(s);
}

/* One sampled reference through a shadow; 1 on a hit. The LRU shadow
 * forgets its oldest key when full (ghost_push does), the MRU shadow its
 * newest. */
static int shadow_ref(struct kvt_ghost *g, size_t cap, int mru, uint64_t key)
{
	if (ghost_find(g, key) >= 0) {
		ghost_push(g, 0, key);		/* now the newest */
		return 1;
	}
	if (mru && ghost_count(g, 0) >= cap)
		ghost_take(g, g->node[g->node[0].prev].key);
	ghost_push(g, 0, key);
	return 0;
}

/* Is key in the sample? A finaliser's low bits (keys that share low bits
 * or strides spread out). */
static int sampled(const struct au *s, uint64_t key)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdull;
	key ^= key >> 33;
	key *= 0xc4ceb9fe1a85ec53ull;
	key ^= key >> 33;
	return !(key & s->smask);
}

/* The sampled references kept since the last run through the shadows,
 * in order: the counter and the mode. Only victims() reads the mode, and
 * it runs them first, so it ranks as if each had gone through at once.
 * A run of many warms the shadows first, unless they are so large (a
 * small sample= on a large tier) that it would touch few of their lines:
 * a reference touches a few lines of each. */
static void duel(struct au *s)
{
	if (s->npend >= AU_PEND / 4 && ghost_lines(&s->shadow[0]) <= 8 * (size_t)s->npend) {
		ghost_warm(&s->shadow[0]);
		ghost_warm(&s->shadow[1]);
	}
	for (unsigned i = 0; i < s->npend; i++) {
		uint64_t key = s->pend[i];
		int hl = shadow_ref(&s->shadow[0], s->scap, 0, key);
		int hm = shadow_ref(&s->shadow[1], s->scap, 1, key);

		if (hm && !hl && s->psel < AU_PSEL_MAX)
			s->psel++;
		else if (hl && !hm && s->psel > 0)
			s->psel--;
		if (s->psel > AU_PSEL_MAX / 2 + AU_MARGIN)
			s->mru = 1;
		else if (s->psel < AU_PSEL_MAX / 2 - AU_MARGIN)
			s->mru = 0;
	}
	s->npend = 0;
}

/* A reference to key. The shadows see sampled keys in runs (duel()):
 * one at a time, each waited for its ghosts' lines, cold again by the
 * next, and on the decode's acquires, under the pager's lock, that was
 * most of their cost (docs/benchmarks.md). */
static void see(struct au *s, uint64_t key)
{
	s->tick++;
	if (s->mode || !sampled(s, key))
		return;
	s->pend[s->npend++] = key;
	if (s->npend == AU_PEND)
		duel(s);
}

/* A new page is the most recent, and its arrival a reference. */
static void au_on_insert(void *state, const struct kvt_ref *r, void *meta)
{
	struct au *s = state;
	struct au_meta *m = meta;

	see(s, r->key);
	m->n.key = r->key;
	m->last = s->tick | 1ull << 63;	/* the insert's (not an interval's start) */
	lnode_add_before(&s->rec, &m->n);
}

static void au_on_access(void *state, const struct kvt_ref *r, void *meta)
{
	struct au *s = state;
	struct au_meta *m = meta;

	see(s, r->key);
	/* The mean interval between uses of a page, in ticks (x 8). From an
	 * insert to the first use is not one: a prefetched page is used a
	 * moment after it lands. */
	if (s->tick - s->lasthit > s->stale)
		s->interval = 0;		/* learnt before a long dry spell */
	if (!(m->last >> 63)) {
		uint64_t d = s->tick - m->last;

		s->interval = s->interval ? s->interval + d - s->interval / 8 : 8 * d;
	}
	s->lasthit = s->tick;
	m->last = s->tick;
	lnode_move_last(&s->rec, &m->n);
}

static void au_on_remove(void *state, uint64_t key, void *meta)
{
	(void)state; (void)key;
	lnode_del(&((struct au_meta *)meta)->n);
}

/* Take e's key unless pinned. */
static int au_take(const struct kvt_lnode *e, uint64_t *out, size_t *n,
		   int (*pinned)(void *arg, uint64_t key), void *arg)
{
	if (pinned && pinned(arg, e->key))
		return 0;
	out[(*n)++] = e->key;
	return 1;
}

/*
 * Up to want unpinned keys, best first, each once. LRU: from the least
 * recent. MRU: the pages not referenced for twice the mean interval (from
 * the least recent, where they are), then from the most recent back to
 * where that stopped. Only looks, but for the sampled references kept,
 * which go through the shadows first.
 */
static size_t au_victims(void *state, uint64_t *out, size_t want,
			 int (*pinned)(void *arg, uint64_t key), void *arg)
{
	struct au *s = state;
	const struct kvt_lnode *e, *stop;
	size_t n = 0;

	duel(s);
	if (!s->mru)
		return lnode_collect(&s->rec, 0, out, want, pinned, arg);
	/* Twice the mean (kept x 8); none while the tier has gone without a
	 * hit for long: the mean is from before. */
	uint64_t horizon = s->tick - s->lasthit > s->stale ? 0 : s->interval / 4;
	for (e = s->rec.next; e != &s->rec && n < want; e = e->next) {
		const struct au_meta *m = (const struct au_meta *)e;

		if (!horizon || s->tick - (m->last & ~(1ull << 63)) <= horizon)
			break;
		au_take(e, out, &n, pinned, arg);
	}
	stop = e->prev;		/* the last page the loop above looked at */
	for (e = s->rec.prev; e != stop && n < want; e = e->prev)
		au_take(e, out, &n, pinned, arg);
	return n;
}

const struct kvt_policy_ops kvt_policy_auto = {
	.name		= "auto",
	.meta_size	= sizeof(struct au_meta),
	.init		= au_init,
	.destroy	= au_destroy,
	.on_insert	= au_on_insert,
	.on_access	= au_on_access,
	.on_remove	= au_on_remove,
	.victims	= au_victims,
};
