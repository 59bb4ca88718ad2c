/* SPDX-License-Identifier: MIT */
/*
 * Acquire and release: a batch pins the pages of a layer that are where
 * compute reads them and asks the migration thread for the rest, held to
 * the stage of the tier batches read from; kvt_batch_next hands pages out
 * in readiness order (pinned ones first, then as their moves land), and
 * consumed pages are unpinned in groups, or at once while pages are still
 * on their way. kvt_prefetch queues promotions of a layer ahead.
 *
 * A view stays valid until the next call on its batch or its release.
 * Takes p->lock for bookkeeping only; hands pinned pages out without it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pager/internal.h"

/* ---------------------------------------------------------------------
 * Acquire
 */

/* The layer table of (h, layer) when every index in pages[0..*n) is in it
 * (pages == NULL: all of them; *n is set). NULL with *err set otherwise.
 * Lock held. */
static struct layer_tab *layer_pages(struct kvt_pager *p, kvt_seq_t h, unsigned layer,
				     const uint32_t *pages, unsigned *n, struct seq **sp, int *err)
{
	struct seq *s = kvt_seq_get(p, h, err);
	if (!s)
		return NULL;
	if (layer >= p->cfg.n_layers) {
		*err = -EINVAL;
		return NULL;
	}
	struct layer_tab *lt = &s->lt[layer];
	if (!pages)
		*n = lt->n;
	for (unsigned i = 0; pages && i < *n; i++)
		if (pages[i] >= lt->n) {
			*err = -EINVAL;
			return NULL;
		}
	*sp = s;
	return lt;
}

/* Pin a page that is readable at `target` (or above) and fill e. A page
 * a prefetch brought, read now, stays in transit (kvt_transit()) until it
 * is handed out: it counts as asked for by the batch. */
static int try_pin(struct kvt_pager *p, struct kvt_batch *b, struct entry *e, int target)
{
	struct page *pg = &p->pages[e->slot];
	int ti;

	if (pg->state != P_READY)
		return 0;
	if (pg->frame[KVT_TIER_FAST] != NO_FRAME)
		ti = KVT_TIER_FAST;
	else if (target == KVT_TIER_HOST && pg->frame[KVT_TIER_HOST] != NO_FRAME)
		ti = KVT_TIER_HOST;
	else
		return 0;
	pg->pins++;
	e->pinned = 1;
	e->tier = (int8_t)ti;
	e->ptr = frame_ptr(&p->t[ti], pg->frame[ti]);
	e->ntok = pg->ntok;
	touch(p, e->slot, ti);
	if (kvt_pf_unset(p, pg)) {
		p->st.prefetch_hit++;
		if (!e->asked) {
			e->asked = 1;
			b->lead++;
			__atomic_add_fetch(&p->asked, 1, __ATOMIC_RELAXED);
		}
	}
	return 1;
}

static void count_lookup(struct kvt_pager *p, const struct page *pg)
{
	int top = pg->state == P_LOST ? KVT_NTIERS : pg->top;
	for (int ti = 0; ti <= p->last; ti++) {
		if (top == ti) {
			p->t[ti].st.hits++;
			break;
		}
		p->t[ti].st.misses++;
	}
}

/* Ask for more of the batch's missing pages (lock held); returns whether
 * a demand was queued. Not all at once: a page asked for takes a frame in
 * the tier batches read, from the moment it is picked until its reader has
 * it, and landed, it waits there for a reader that may not be running (a
 * busy machine). Asked for all at once, a reader the scheduler left
 * behind had the rest of its layer brought up ahead of it, the frames
 * taken from pages due later in the step, each read again when its turn
 * came (t_scan_min copying up, two busy loops on its two cores: 1.1 to
 * 1.4 times the least a step must read). So all open batches together,
 * with the prefetches on their way or landed and not read, have no more
 * pages in transit than the stage (the frames the tier keeps for them:
 * kvt_transit()), and ask for more in runs of what one read carries
 * (p->extent pages, what the batch has left, or the stage where that is
 * less), so that the reads still coalesce. A batch with nothing on its way
 * asks for what the stage has room for, and for one page when it has
 * none, so that it always goes on (a whole run there put two readers
 * falling behind at once 1.12 times over the least: each asked a run
 * past the stage every time).
 * Prefetch leaves the pages a batch waits for to it (pop_prefetch()). */
static int ask(struct kvt_pager *p, struct kvt_batch *b)
{
	uint32_t st = p->stage[p->target], used = kvt_transit(p);
	uint32_t run = p->extent < b->nheld ? p->extent : b->nheld;
	uint32_t room = st > used ? st - used : 0;
	int queued = 0;

	if (run > st)
		run = st ? st : 1;
	if (!run || (room < run && b->lead))
		return 0;
	if (!room)
		room = 1;
	for (; b->nheld && room; b->ask++) {
		struct entry *e = &b->e[b->ask];
		struct page *pg = &p->pages[e->slot];

		if (!e->held)
			continue;
		e->held = 0;
		e->asked = 1;
		b->nheld--;
		p->held--;
		b->lead++;
		room--;
		__atomic_add_fetch(&p->asked, 1, __ATOMIC_RELAXED);
		if (pg->state == P_READY) {
			kvt_queue_demand(p, e->slot);
			queued = 1;
		}
	}
	return queued;
}

int kvt_acquire_tier(struct kvt_pager *p, kvt_seq_t h, unsigned layer, const uint32_t *pages,
		     unsigned n, int target, int ahead, struct kvt_batch **out)
{
	struct kvt_batch *b = NULL;
	int r = 0;

	if (!p || !out)
		return -EINVAL;
	kvt_lock(p);
	struct seq *s;
	struct layer_tab *lt = layer_pages(p, h, layer, pages, &n, &s, &r);
	if (!lt)
		goto out;
	b = malloc(sizeof(*b) + (size_t)n * (sizeof(struct entry) + 2 * sizeof(uint32_t)));
	if (!b) {
		r = -ENOMEM;
		goto out;
	}
	*b = (struct kvt_batch){ .p = p, .seq = (uint32_t)(h & 0xffffff), .n = n, .target = target };
	b->e = (struct entry *)(b + 1);
	b->ready = (uint32_t *)(b->e + n);
	b->pend = b->ready + n;

	int queued = 0;
	uint64_t tnow = p->rec ? now_ns() : 0;
	for (unsigned i = 0; i < n; i++) {
		uint32_t idx = pages ? pages[i] : i, slot = lt->pg[idx];
		struct page *pg = &p->pages[slot];
		struct entry *e = &b->e[i];
		*e = (struct entry){ .slot = slot, .gen = pg->gen, .index = idx };
		/* A prefetch still queued for the page is moot now: the batch
		 * has it, or will ask for it. Left in the queue, it read the
		 * page again after the batch was done with it and had it
		 * evicted, into a frame of the stage that it then held until
		 * the next step read it. */
		uint16_t queued_pf = pg->flags & (PF_PFMOVE | PF_QPREF);
		kvt_pf_unqueue(p, pg);
		count_lookup(p, pg);
		/* ACCESS: from = where count_lookup found it (a hit there),
		 * to = where the batch reads it. */
		int found = pg->state == P_LOST ? -1 : pg->top;
		if (try_pin(p, b, e, target)) {
			TRACE(p, tnow, KVT_EV_ACCESS, slot, found, e->tier, (uint32_t)p->page_bytes,
			      0, 0.f);
			b->ready[b->nready++] = i;
			continue;
		}
		if (pg->state == P_LOST) {
			TRACE(p, tnow, KVT_EV_ACCESS, slot, -1, -1, (uint32_t)p->page_bytes, 0, 0.f);
			e->err = -EIO;
			b->ready[b->nready++] = i;
			continue;
		}
		TRACE(p, tnow, KVT_EV_ACCESS, slot, found, target, (uint32_t)p->page_bytes,
		      KVT_TF_WAIT, 0.f);
		if (queued_pf) {
			p->st.prefetch_late++;
			pg->flags &= ~PF_PFMOVE;
		}
		if (target == KVT_TIER_FAST && p->target != KVT_TIER_FAST)
			pg->flags |= PF_UPFAST;
		pg->want++;
		e->held = 1;
		b->nheld++;
		p->held++;
		b->pend[b->npend++] = i;
	}
	/* Pages a prefetch brought go out first: they hold frames of the
	 * stage (take_landed()). */
	for (uint32_t i = 0, k = 0; i < b->nready; i++) {
		uint32_t x = b->ready[i];
		if (b->e[x].asked) {
			b->ready[i] = b->ready[k];
			b->ready[k++] = x;
		}
	}
	s->batches++;
	if (ask(p, b))
		queued = 2;
	/* Layer-ahead prefetch: the same pages of the next layers, past the
	 * last layer those of the first (the next step's), the next layer's
	 * read first (kvt_queue_prefetch). No more layers than the tier
	 * batches read from holds: deeper, the prefetched pages were evicted
	 * before their layer came; but always the next one, whose reads
	 * keep the disk busy while this layer's compute ends (a tier that
	 * holds less than a layer used to prefetch nothing). Prefetch goes
	 * no further ahead than the stage has room (kvt_stage_room()). */
	unsigned depth = p->cfg.prefetch_depth;
	uint64_t fits = lt->n ? p->t[p->target].online / lt->n : depth;

	if (depth > fits)
		depth = fits ? (unsigned)fits : 1;
	for (unsigned d = 1; ahead && d <= depth && d < p->cfg.n_layers; d++) {
		struct layer_tab *nl = &s->lt[(layer + d) % p->cfg.n_layers];
		for (unsigned i = 0; i < n; i++) {
			uint32_t idx = pages ? pages[i] : i;
			if (idx < nl->n)
				queued |= kvt_queue_prefetch(p, nl->pg[idx], d > 1);
		}
	}
	if (queued & 2)
		kvt_wake_migrate(p);
	else if (queued)
		pthread_cond_signal(&p->work);
	*out = b;
out:
	pthread_mutex_unlock(&p->lock);
	return r;
}

KVT_API int kvt_acquire(struct kvt_pager *p, kvt_seq_t s, unsigned layer,
			const uint32_t *pages, unsigned n, struct kvt_batch **out)
{
	return kvt_acquire_tier(p, s, layer, pages, n, p ? p->target : 0, 1, out);
}

/* Move pending entries that have become ready (or failed) to ready[]
 * (lock held). Returns how many moved. */
static uint32_t collect(struct kvt_pager *p, struct kvt_batch *b, int give_up, int tick)
{
	uint32_t moved = 0, k = 0;

	for (uint32_t j = 0; j < b->npend; j++) {
		uint32_t i = b->pend[j];
		struct entry *e = &b->e[i];
		struct page *pg = &p->pages[e->slot];
		if (try_pin(p, b, e, b->target)) {
			b->nheld -= e->held;
			p->held -= e->held;
			e->held = 0;
			pg->want--;
			b->ready[b->nready++] = i;
			moved++;
			continue;
		}
		if (pg->state == P_LOST) {
			b->nheld -= e->held;
			p->held -= e->held;
			e->held = 0;
			pg->want--;
			e->err = -EIO;
			b->ready[b->nready++] = i;
			moved++;
			continue;
		}
		if (e->held) {
			b->pend[k++] = i;	/* not asked for yet */
			continue;
		}
		if (pg->state == P_READY && pg->err && !(pg->flags & PF_QDEMAND) && give_up) {
			pg->want--;
			e->err = pg->err;
			pg->err = 0;
			b->ready[b->nready++] = i;
			moved++;
			continue;
		}
		if (pg->state == P_READY && !(pg->flags & PF_QDEMAND) && pg->err &&
		    p->events == p->err_ev && !tick) {
			/* It failed for want of a frame and nothing has been
			 * unpinned, freed or landed since: asking again at once
			 * would fail the same way (and spin). Wait for a change
			 * or the next tick. */
			b->pend[k++] = i;
			continue;
		}
		if (pg->state == P_READY && !(pg->flags & PF_QDEMAND) && (!pg->err || !give_up)) {
			/* Not where we need it and not queued (it failed to get a
			 * frame, or was evicted again): ask again. */
			pg->err = 0;
			if (b->target == KVT_TIER_FAST && p->target != KVT_TIER_FAST)
				pg->flags |= PF_UPFAST;
			kvt_queue_demand(p, e->slot);
			kvt_wake_migrate(p);
		}
		b->pend[k++] = i;
	}
	b->npend = k;
	return moved;
}

/* Pages asked for that have landed since the batch last looked (lock
 * held): they go out next, ahead of the pages pinned at acquire. Those
 * hold frames of the policy's share, which nothing waits for; a landed
 * page holds a frame of the stage, and the reads behind it wait for that
 * frame (ask() asks for more only as pages are handed out). Handed out
 * first, the disk keeps reading while the resident pages are folded in
 * the time it takes; handed out last, it idled until they were. Only the
 * asked entries are looked at: pend[] is in index order and those are
 * the entries before b->ask. */
static void take_landed(struct kvt_pager *p, struct kvt_batch *b)
{
	uint32_t j, k, first = b->nready;

	b->seen = p->events;
	for (j = k = 0; j < b->npend; j++) {
		uint32_t i = b->pend[j];
		struct entry *e = &b->e[i];

		if (e->held)
			break;
		if (try_pin(p, b, e, b->target)) {
			p->pages[e->slot].want--;
			b->ready[b->nready++] = i;
		} else {
			b->pend[k++] = i;
		}
	}
	if (k == j)
		return;
	memmove(b->pend + k, b->pend + j, (b->npend - j) * sizeof(*b->pend));
	b->npend -= j - k;
	for (uint32_t a = b->rpos, n = first; a < first && n < b->nready; a++, n++) {
		uint32_t x = b->ready[a];
		b->ready[a] = b->ready[n];
		b->ready[n] = x;
	}
}

/* Views handed out and no longer read: all before rpos, or for a held
 * batch, what kvt_batch_done gave back. */
static uint32_t consumed(const struct kvt_batch *b)
{
	return b->hold ? b->done : b->rpos;
}

static void unpin_consumed(struct kvt_pager *p, struct kvt_batch *b)
{
	for (uint32_t lim = consumed(b); b->unpinned < lim; b->unpinned++) {
		struct entry *e = &b->e[b->ready[b->unpinned]];
		if (e->pinned) {
			e->pinned = 0;
			kvt_unpin(p, e->slot);
		}
	}
}

KVT_API const void *kvt_batch_peek(const struct kvt_batch *b)
{
	if (!b || b->rpos >= b->nready)
		return NULL;
	const struct entry *e = &b->e[b->ready[b->rpos]];
	return e->err ? NULL : e->ptr;
}

KVT_API int kvt_batch_next(struct kvt_batch *b, struct kvt_view *view)
{
	struct kvt_pager *p;

	if (!b || !view)
		return -EINVAL;
	p = b->p;
	uint32_t nc = consumed(b) - b->unpinned;
	if (b->rpos < b->nready && ((nc && (nc >= 32 || b->npend)) || b->nheld)) {
		/* Hand consumed pages back now and then, so a large batch does
		 * not hold the tier for its whole run; at once while pages are
		 * still on their way: they come through the frames these hold.
		 * Ask for more as the stage has room. */
		kvt_lock(p);
		unpin_consumed(p, b);
		if (ask(p, b))
			kvt_wake_migrate(p);
		if (b->npend && b->seen != p->events)
			take_landed(p, b);
		kvt_wake_prefetch(p);
		pthread_mutex_unlock(&p->lock);
	}
	if (b->rpos == b->nready) {
		if (!b->npend)
			return 0;
		uint64_t t0 = now_ns(), ev = 0, quiet_since = 0;
		int give_up = 0, tick = 0;
		kvt_lock(p);
		unpin_consumed(p, b);
		if (ask(p, b))
			kvt_wake_migrate(p);
		ev = p->events;
		while (!collect(p, b, give_up, tick)) {
			if (ask(p, b))
				kvt_wake_migrate(p);
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += (long)RETRY_WAIT_NS;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			int w = pthread_cond_timedwait(&p->done, &p->lock, &ts);
			/* A promotion that failed for want of a frame is asked for
			 * again when something changed, and every tick anyway;
			 * after a quiet ENOSPC_WAIT_NS with nothing in flight it
			 * is reported. */
			tick = w == ETIMEDOUT;
			if (p->events != ev || p->moving)
				quiet_since = 0;
			else if (!quiet_since)
				quiet_since = now_ns();
			give_up = quiet_since && now_ns() - quiet_since >= ENOSPC_WAIT_NS;
			ev = p->events;
		}
		p->st.stall_ns += now_ns() - t0;
		pthread_mutex_unlock(&p->lock);
	}
	struct entry *e = &b->e[b->ready[b->rpos++]];
	if (e->asked) {
		b->lead--;
		e->asked = 0;
		__atomic_sub_fetch(&p->asked, 1, __ATOMIC_RELAXED);
	}
	view->page = e->index;
	view->id = (uint64_t)e->gen << 32 | e->slot;
	if (e->err) {
		view->k = view->v = NULL;
		view->ntok = 0;
		view->tier = 0;
		return e->err;
	}
	view->k = e->ptr;
	view->v = e->ptr + p->half;
	view->ntok = e->ntok;
	view->tier = (uint8_t)e->tier;
	b->handed++;
	b->in_place += e->tier == KVT_TIER_HOST;
	return 1;
}

KVT_API void kvt_batch_hold(struct kvt_batch *b)
{
	if (b && !b->hold) {
		b->hold = 1;
		b->done = b->rpos;
	}
}

KVT_API void kvt_batch_done(struct kvt_batch *b)
{
	if (!b || !b->hold || b->done == b->rpos)
		return;
	b->done = b->rpos;
	pthread_mutex_lock(&b->p->lock);
	unpin_consumed(b->p, b);
	if (ask(b->p, b))
		kvt_wake_migrate(b->p);
	pthread_mutex_unlock(&b->p->lock);
}

KVT_API void kvt_batch_release(struct kvt_batch *b)
{
	if (!b)
		return;
	struct kvt_pager *p = b->p;
	kvt_lock(p);
	for (uint32_t j = b->unpinned; j < b->nready; j++) {
		struct entry *e = &b->e[b->ready[j]];
		if (e->pinned)
			kvt_unpin(p, e->slot);
	}
	for (uint32_t j = 0; j < b->npend; j++)
		p->pages[b->e[b->pend[j]].slot].want--;
	p->seqs[b->seq]->batches--;
	p->held -= b->nheld;
	__atomic_sub_fetch(&p->asked, b->lead, __ATOMIC_RELAXED);
	kvt_wake_prefetch(p);
	p->st.acquires += b->handed;
	p->st.host_in_place += b->in_place;
	pthread_mutex_unlock(&p->lock);
	free(b);
}

KVT_API int kvt_prefetch(struct kvt_pager *p, kvt_seq_t h, unsigned layer,
			 const uint32_t *pages, unsigned n)
{
	int r = 0;
	if (!p)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	struct seq *s;
	struct layer_tab *lt = layer_pages(p, h, layer, pages, &n, &s, &r);
	if (!lt)
		goto out;
	int queued = 0;

	for (unsigned i = 0; i < n; i++)
		queued |= kvt_queue_prefetch(p, lt->pg[pages ? pages[i] : i], 0);
	if (queued)
		pthread_cond_signal(&p->work);
out:
	pthread_mutex_unlock(&p->lock);
	return r;
}
