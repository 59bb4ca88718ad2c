/* SPDX-License-Identifier: MIT */
/*
 * The page table: frames of each tier (a free map, an owner per frame,
 * offline frames of a shrink), page slots (generation, references, pins,
 * the copies in each tier), the trace records about pages, and
 * kvt_pager_check, which verifies it all against the tiers.
 *
 * Residency of a page: one authoritative copy in tier `top` and optional
 * clean copies below it (pages are write-once once sealed, so a copy below
 * stays valid). Evicting a copy that is not the only one is a drop; the
 * only copy is written one tier down first. A pinned or MOVING page is
 * never a victim.
 *
 * Everything here runs with p->lock held and never waits: it is the
 * bookkeeping under the sequences, the batches and the migration thread.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "pager/internal.h"

/* ---------------------------------------------------------------------
 * Frames
 */

uint32_t kvt_frame_alloc_run(struct tier *t, uint32_t want, uint32_t *got)
{
	uint32_t nw = (t->nframes + 63) / 64;

	*got = 0;
	if (!t->nfree || !want)
		return NO_FRAME;
	for (uint32_t k = 0; k <= nw; k++) {
		uint32_t w = (t->cursor / 64 + k) % nw;
		uint64_t bits = t->freemap[w];
		if (k == 0)
			bits &= ~0ull << (t->cursor % 64);
		if (!bits)
			continue;
		uint32_t f = w * 64 + (uint32_t)__builtin_ctzll(bits), n = 0;
		while (n < want && f + n < t->nframes &&
		       (t->freemap[(f + n) / 64] >> ((f + n) % 64) & 1)) {
			t->freemap[(f + n) / 64] &= ~(1ull << ((f + n) % 64));
			n++;
		}
		t->nfree -= n;
		t->cursor = (f + n) % t->nframes;
		*got = n;
		return f;
	}
	return NO_FRAME;
}

uint32_t kvt_frame_alloc(struct tier *t)
{
	uint32_t got;
	return kvt_frame_alloc_run(t, 1, &got);
}

/* Take frame f if it is free. */
int kvt_frame_take(struct tier *t, uint32_t f)
{
	if (!frame_is_free(t, f))
		return 0;
	t->freemap[f / 64] &= ~(1ull << (f % 64));
	t->nfree--;
	return 1;
}

/* A frame leaves service: its free-map bit is clear and no page owns it,
 * so nothing reads or writes it until it comes back; where the tier may,
 * its memory goes back to the kernel (a later write faults in a zeroed
 * page). A failure leaves the memory as it was. */
void kvt_frame_offline(struct tier *t, uint32_t f)
{
	t->offmap[f / 64] |= 1ull << (f % 64);
	t->noff++;
	if (t->release)
		(void)madvise(t->base + (uint64_t)f * t->stride, t->stride, MADV_DONTNEED);
}

/* An offline frame comes back into service (free). */
void kvt_frame_online(struct tier *t, uint32_t f)
{
	t->offmap[f / 64] &= ~(1ull << (f % 64));
	t->noff--;
	t->freemap[f / 64] |= 1ull << (f % 64);
	t->nfree++;
}

/* While a shrink is being paid, a frame that comes free goes offline. */
void kvt_frame_free(struct tier *t, uint32_t f)
{
	t->owner[f] = NO_PAGE;
	if (debt(t)) {
		kvt_frame_offline(t, f);
		return;
	}
	t->freemap[f / 64] |= 1ull << (f % 64);
	t->nfree++;
}

/* ---------------------------------------------------------------------
 * Trace recording (lock held). TRACE costs a test of p->rec when no trace
 * is being recorded.
 */

static inline uint8_t tier8(int ti)
{
	return ti >= 0 && ti < KVT_NTIERS ? (uint8_t)ti : KVT_TRACE_NONE;
}

/* One record about page slot; t is now_ns() or 0 to read the clock here. */
__attribute__((noinline)) void kvt_trace_page(struct kvt_pager *p, uint64_t t, uint8_t ev,
					      uint32_t slot, int from, int to, uint32_t bytes,
					      uint8_t flags, float score)
{
	const struct page *pg = &p->pages[slot];
	struct kvt_trace_rec *r = kvt_recorder_slot(p->rec);

	r->time = (t ? t : now_ns()) - p->rec_t0;
	r->step = p->step;
	r->key = (uint64_t)pg->gen << 32 | slot;
	r->seq = pg->seq;
	r->layer = pg->layer;
	r->index = pg->index;
	r->bytes = bytes;
	r->score = score;
	r->event = ev;
	r->from = tier8(from);
	r->to = tier8(to);
	r->flags = (uint8_t)(flags | (pg->flags & PF_SEALED ? KVT_TF_SEALED : 0));
}

/* A record about no page (STEP). */
void kvt_trace_step(struct kvt_pager *p)
{
	*kvt_recorder_slot(p->rec) = (struct kvt_trace_rec){
		.time = now_ns() - p->rec_t0, .step = p->step,
		.seq = KVT_REF_NONE, .layer = KVT_REF_NONE, .index = KVT_REF_NONE,
		.event = KVT_EV_STEP, .from = KVT_TRACE_NONE, .to = KVT_TRACE_NONE,
	};
}

void kvt_set_top(struct page *pg)
{
	pg->top = pg->frame[0] != NO_FRAME ? 0 : pg->frame[1] != NO_FRAME ? 1 : 2;
}

/* Give the page a copy in frame f of tier ti and tell the policy. */

/* A prefetched page is read, or goes: one fewer waiting to be read. */
int kvt_pf_unset(struct kvt_pager *p, struct page *pg)
{
	if (!(pg->flags & PF_PREFETCHED))
		return 0;
	pg->flags &= ~PF_PREFETCHED;
	p->pf_landed--;
	return 1;
}

void kvt_place(struct kvt_pager *p, uint32_t slot, int ti, uint32_t f)
{
	struct tier *t = &p->t[ti];
	struct page *pg = &p->pages[slot];

	pg->frame[ti] = f;
	t->owner[f] = slot;
	if (ti < KVT_TIER_NVME && pg->frame[!ti] != NO_FRAME)
		p->dups++;
	struct kvt_ref r = ref_of(p, slot);

	memset(meta_of(t, f), 0, t->pol->meta_size);
	t->pol->on_insert(t->pst, &r, meta_of(t, f));
}

/* Remove the page's copy from tier ti. Counts it as a demotion when
 * `demote` (another copy remains below), with `drop` when no write was
 * needed for it. */
void kvt_unplace(struct kvt_pager *p, uint32_t slot, int ti, int demote, int drop)
{
	struct tier *t = &p->t[ti];
	struct page *pg = &p->pages[slot];
	uint32_t f = pg->frame[ti];

	t->pol->on_remove(t->pst, slot, meta_of(t, f));
	kvt_frame_free(t, f);
	pg->frame[ti] = NO_FRAME;
	if (ti < KVT_TIER_NVME && pg->frame[!ti] != NO_FRAME)
		p->dups--;
	if (ti == p->target && kvt_pf_unset(p, pg))
		p->st.prefetch_wasted++;
	/* A demotion is the page's top copy leaving; dropping a clean copy
	 * under a copy above is neither. */
	if (demote && pg->top == ti) {
		t->st.demotions++;
		t->st.drops += drop;
	}
	kvt_set_top(pg);
	/* to: where the top copy is now (below ti when ti was the top). */
	if (demote)
		TRACE(p, 0, drop ? KVT_EV_DROP : KVT_EV_DEMOTE, slot, ti, pg->top,
		      drop ? 0 : (uint32_t)p->page_bytes, 0, 0.f);
}

/* ---------------------------------------------------------------------
 * Pages
 */

uint32_t kvt_page_new(struct kvt_pager *p)
{
	uint32_t s = p->free_page;
	if (s == NO_PAGE)
		return NO_PAGE;
	struct page *pg = &p->pages[s];
	p->free_page = pg->next_free;
	uint32_t gen = pg->gen;
	memset(pg, 0, sizeof(*pg));
	pg->gen = gen;
	pg->frame[0] = pg->frame[1] = pg->frame[2] = NO_FRAME;
	pg->home = NO_FRAME;
	pg->state = P_READY;
	pg->last_step = UINT64_MAX;
	p->live_pages++;
	return s;
}

void kvt_page_free(struct kvt_pager *p, uint32_t s)
{
	struct page *pg = &p->pages[s];

	if (pg->state == P_MOVING) {
		pg->flags |= PF_DOOMED;
		return;
	}
	TRACE(p, 0, KVT_EV_FREE, s, pg->state == P_LOST ? -1 : pg->top, -1,
	      (uint32_t)p->page_bytes, 0, 0.f);
	for (int ti = 0; ti < KVT_NTIERS; ti++)
		if (pg->frame[ti] != NO_FRAME)
			kvt_unplace(p, s, ti, 0, 0);
	pg->state = P_FREE;
	pg->gen = (pg->gen + 1) & 0x7fffffff;
	kvt_pf_unqueue(p, pg);
	pg->flags = 0;
	pg->next_free = p->free_page;
	p->free_page = s;
	p->live_pages--;
	p->events++;
}

void kvt_page_unref(struct kvt_pager *p, uint32_t s)
{
	struct page *pg = &p->pages[s];
	if (pg->flags & PF_TAILPIN) {
		pg->flags &= ~PF_TAILPIN;
		pg->pins--;
	}
	if (--pg->refs == 0)
		kvt_page_free(p, s);
}

/* The page became unusable: free its frames, keep the slot (its owners
 * will get -EIO for it until they close). */
void kvt_page_lose(struct kvt_pager *p, uint32_t s)
{
	struct page *pg = &p->pages[s];
	TRACE(p, 0, KVT_EV_LOST, s, pg->top, -1, (uint32_t)p->page_bytes, 0, 0.f);
	for (int ti = 0; ti < KVT_NTIERS; ti++)
		if (pg->frame[ti] != NO_FRAME)
			kvt_unplace(p, s, ti, 0, 0);
	pg->state = P_LOST;
	kvt_pf_unset(p, pg);
	pg->flags &= ~PF_PFMOVE;
	p->st.lost_pages++;
}

void kvt_unpin(struct kvt_pager *p, uint32_t s)
{
	if (--p->pages[s].pins == 0) {
		p->events++;
		if (p->t[KVT_TIER_FAST].waiters || p->demand.n)
			pthread_cond_signal(&p->work);
	}
}

/* The stage: pages in transit into the tier batches read from
 * (p->target), at most p->stage[target] of them, so that they never take
 * more of the tier than the frames its policy does not get. A page counts
 * from the moment it is picked until it lands (or fails), the staged
 * count; a page a batch asked for, until the batch hands it out (ask(),
 * p->asked); a prefetched page, until it is read (p->pf_landed).
 * Prefetch has only what demand leaves (kvt_stage_room()). */
void kvt_stage_in(struct kvt_pager *p, struct page *pg, int prefetch)
{
	pg->flags |= PF_STAGED | (prefetch ? PF_STAGEPF : 0);
	p->staged++;
	p->staged_pf += prefetch;
}

void kvt_stage_out(struct kvt_pager *p, struct page *pg)
{
	if (!(pg->flags & PF_STAGED))
		return;
	p->staged--;
	p->staged_pf -= !!(pg->flags & PF_STAGEPF);
	pg->flags &= ~(PF_STAGED | PF_STAGEPF);
}

/* Pages in transit into the tier batches read from: asked for by open
 * batches and not handed out yet (on their way, landed, or pinned at
 * acquire after a prefetch brought them), and prefetched ones on their
 * way or landed and not read. The stage holds them all. */
uint32_t kvt_transit(const struct kvt_pager *p)
{
	return __atomic_load_n(&p->asked, __ATOMIC_RELAXED) + p->staged_pf + p->pf_landed;
}

/* How many more pages may start on their way in now, for demand or
 * prefetch: what the stage has left, or, when the landing tier has more
 * free frames than its watermark keeps, those (they hold nothing the
 * tier keeps). */
uint32_t kvt_stage_room(const struct kvt_pager *p, int prefetch)
{
	const struct tier *t = &p->t[p->target];
	uint32_t cap = p->stage[p->target], room = cap > p->staged ? cap - p->staged : 0;
	uint32_t spare = t->nfree > t->wm_high + debt(t) ? t->nfree - t->wm_high - debt(t) : 0;

	if (prefetch) {
		/* Demand first: while a batch has pages it has not asked for
		 * yet, the stage is kept for them. Then prefetch has what the
		 * pages in transit leave. So the reads go on past the end of
		 * a layer into the next ones, in the frames the batches no
		 * longer need. */
		uint32_t used = kvt_transit(p), pf = p->held || used >= cap ? 0 : cap - used;
		uint32_t run = p->extent < p->pf_live ? p->extent : p->pf_live;

		/* In runs of a read, as demand asks (ask()): room that came
		 * back a page at a time went out as reads of a page. With no
		 * batch open the room will not grow, and the migration thread
		 * drops the queue instead (kvt_migrate_main()). */
		if (pf < run && pf < cap)
			pf = 0;
		room = room < pf ? room : pf;
	}
	return room > spare ? room : spare;
}

/* ---------------------------------------------------------------------
 * The invariant check
 */

#define BAD(...) do { snprintf(err, errlen, __VA_ARGS__); return -EUCLEAN; } while (0)

int kvt_pager_check(struct kvt_pager *p, char *err, size_t errlen)
{
	uint32_t live = 0, dups = 0, staged = 0, staged_pf = 0, pf_landed = 0, pf_live = 0;

	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		struct tier *t = &p->t[ti];
		uint32_t nfree = 0, noff = 0;
		if (t->online + t->noff > t->nframes || t->online > t->nframes)
			BAD("%s: %u frames online, %u offline, %u in all", kvt_tier_name(ti),
			    t->online, t->noff, t->nframes);
		for (uint32_t f = 0; f < t->nframes; f++) {
			int isfree = t->freemap[f / 64] >> (f % 64) & 1;
			int off = t->offmap[f / 64] >> (f % 64) & 1;
			nfree += isfree;
			noff += off;
			if (off && (isfree || t->owner[f] != NO_PAGE))
				BAD("%s frame %u: offline but free bit %d, owner %u", kvt_tier_name(ti),
				    f, isfree, t->owner[f]);
			if (off)
				continue;
			if (isfree != (t->owner[f] == NO_PAGE))
				BAD("%s frame %u: free bit %d but owner %u", kvt_tier_name(ti), f, isfree, t->owner[f]);
			if (isfree)
				continue;
			struct page *pg = &p->pages[t->owner[f]];
			if (pg->state == P_FREE)
				BAD("%s frame %u owned by free page %u", kvt_tier_name(ti), f, t->owner[f]);
			if (pg->state != P_MOVING && pg->frame[ti] != f)
				BAD("%s frame %u: page %u says frame %u", kvt_tier_name(ti), f, t->owner[f], pg->frame[ti]);
		}
		if (nfree != t->nfree)
			BAD("%s: %u free frames counted, %u recorded", kvt_tier_name(ti), nfree, t->nfree);
		if (noff != t->noff)
			BAD("%s: %u offline frames counted, %u recorded", kvt_tier_name(ti), noff, t->noff);
		if (debt(t) && t->nfree)
			BAD("%s: %u frames free while %u are still to go offline", kvt_tier_name(ti),
			    t->nfree, debt(t));
	}
	for (uint32_t s = 0; s < p->npages; s++) {
		struct page *pg = &p->pages[s];
		if (pg->state == P_FREE) {
			if (copies(pg))
				BAD("free page %u holds frames", s);
			continue;
		}
		live++;
		dups += pg->frame[KVT_TIER_FAST] != NO_FRAME && pg->frame[KVT_TIER_HOST] != NO_FRAME;
		staged += !!(pg->flags & PF_STAGED);
		staged_pf += !!(pg->flags & PF_STAGEPF);
		pf_landed += !!(pg->flags & PF_PREFETCHED);
		pf_live += !!(pg->flags & PF_QPREF);
		if (!pg->refs && !(pg->flags & PF_DOOMED))
			BAD("page %u live with no references", s);
		for (int ti = 0; ti < KVT_NTIERS; ti++)
			if (pg->frame[ti] != NO_FRAME && p->t[ti].owner[pg->frame[ti]] != s)
				BAD("page %u: %s frame %u owned by %u", s, kvt_tier_name(ti), pg->frame[ti],
				    p->t[ti].owner[pg->frame[ti]]);
		if (pg->state == P_READY) {
			if (!copies(pg))
				BAD("page %u ready with no copy", s);
			unsigned top = pg->frame[0] != NO_FRAME ? 0 : pg->frame[1] != NO_FRAME ? 1 : 2;
			if (pg->top != top)
				BAD("page %u: top %u, first copy in %u", s, pg->top, top);
		}
		if (pg->state == P_LOST && copies(pg))
			BAD("lost page %u holds frames", s);
		if ((pg->flags & PF_TAILPIN) &&
		    (!pg->pins || (pg->flags & PF_SEALED) ||
		     (pg->state == P_READY && pg->frame[KVT_TIER_FAST] == NO_FRAME)))
			BAD("tail page %u: pins %u flags %#x, not pinned in the fast tier", s, pg->pins, pg->flags);
	}
	if (live != p->live_pages)
		BAD("%u live pages counted, %u recorded", live, p->live_pages);
	if (dups != p->dups || staged != p->staged || staged_pf != p->staged_pf ||
	    pf_landed != p->pf_landed)
		BAD("counted %u in fast and host, %u staged (%u by prefetch), %u prefetched "
		    "unread; recorded %u, %u (%u), %u", dups, staged, staged_pf, pf_landed, p->dups,
		    p->staged, p->staged_pf, p->pf_landed);
	if (pf_live != p->pf_live)
		BAD("%u pages queued for prefetch counted, %u recorded", pf_live, p->pf_live);
	/* References held by the sequences' tables. */
	uint32_t *refs = calloc(p->npages + 1, sizeof(*refs));
	if (!refs)
		return 0;
	for (uint32_t i = 0; i < p->nseqs; i++) {
		struct seq *q = p->seqs[i];
		if (!q->open)
			continue;
		for (unsigned l = 0; l < p->cfg.n_layers; l++)
			for (uint32_t k = 0; k < q->lt[l].n; k++)
				refs[q->lt[l].pg[k]]++;
	}
	for (uint32_t s = 0; s < p->npages; s++)
		if (p->pages[s].state != P_FREE && refs[s] != p->pages[s].refs &&
		    !(p->pages[s].flags & PF_DOOMED)) {
			snprintf(err, errlen, "page %u: %u references held, %u recorded", s, refs[s],
				 p->pages[s].refs);
			free(refs);
			return -EUCLEAN;
		}
	free(refs);
	return 0;
}
