/* SPDX-License-Identifier: MIT */
/*
 * The migration engine: the demand and prefetch queues, reclaim and
 * demotion (a drop where a copy below exists, else a write one tier
 * down), promotion (frames picked, host -> fast copies, NVMe reads with
 * XXH3 verified, pages published as they land, the ring refilled from the
 * queues) and the migration thread that runs them all: jobs (park,
 * drain), demand, frames for waiting writers, background reclaim to the
 * watermarks, prefetch.
 *
 * Threads: runtime threads queue work and wake the thread
 * (kvt_queue_demand, kvt_queue_prefetch, kvt_run_job_sync,
 * kvt_alloc_tail_frame); the thread owns the io_uring and issues every
 * device copy, dropping p->lock around them while the pages it moves are
 * MOVING. docs/architecture.md, "The migration thread", has the order and
 * the limits.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "pager/internal.h"

/* A promotion in flight: moves are published (landed) as soon as their
 * data is where it goes, in the order their last transfer began, so
 * attention can start on the first pages of a batch while the rest are
 * still being read. While its reads run, the queues feed it more (refill),
 * so the disk does not idle from one batch to the next. */
struct flight {
	struct kvt_pager *p;
	struct move *mv;	/* [MAX_FLIGHT] */
	uint32_t *order;	/* moves whose read is in, in copy order */
	uint32_t m;		/* moves in mv */
	uint32_t n;		/* entries in order */
	uint32_t next;		/* order[next..n) not landed yet */
	uint32_t since;		/* reads in since the last landing */
	uint32_t every;		/* land after this many reads */
	uint8_t	 up;		/* some move goes to the fast tier */
	uint8_t	 full;		/* a refill found too few frames: stop refilling */
};

/* ---------------------------------------------------------------------
 * Queues
 */

static int pq_push(struct pqueue *q, uint32_t slot, uint32_t gen)
{
	if (q->head + q->n == q->cap) {
		if (q->head) {
			memmove(q->v, q->v + q->head, q->n * sizeof(*q->v));
			q->head = 0;
		} else {
			uint32_t cap = q->cap ? q->cap * 2 : 256;
			struct pref *v = realloc(q->v, cap * sizeof(*v));
			if (!v)
				return -ENOMEM;
			q->v = v;
			q->cap = cap;
		}
	}
	q->v[q->head + q->n++] = (struct pref){ slot, gen };
	return 0;
}

static uint32_t pq_pop(struct pqueue *q, struct pref *out, uint32_t max)
{
	uint32_t n = q->n < max ? q->n : max;

	if (!n)
		return 0;
	memcpy(out, q->v + q->head, n * sizeof(*out));
	q->head += n;
	q->n -= n;
	if (!q->n)
		q->head = 0;
	return n;
}

/* Drop the entries of a prefetch queue whose page was acquired or freed
 * since it was queued: a queue that prefetch does not get to (the stage
 * kept full by demand) would otherwise grow by a layer's pages a step. */
static void pq_compact(struct kvt_pager *p, struct pqueue *q)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < q->n; i++) {
		struct pref r = q->v[q->head + i];
		const struct page *pg = &p->pages[r.slot];

		if (pg->gen == r.gen && (pg->flags & PF_QPREF))
			q->v[k++] = r;
	}
	q->head = 0;
	q->n = k;
}

void kvt_queue_demand(struct kvt_pager *p, uint32_t s)
{
	struct page *pg = &p->pages[s];
	if (pg->flags & PF_QDEMAND)
		return;
	if (pq_push(&p->demand, s, pg->gen) == 0)
		pg->flags |= PF_QDEMAND;
}

/* A batch waits for pages just queued (lock held): wake the migration
 * thread, in its wait for work or, while a promotion's reads run, in its
 * wait for their completions, so that refill() takes them at once rather
 * than after the next read ends. Prefetches do not kick: taken early,
 * they hold frames that demand would then evict them from. */
void kvt_wake_migrate(struct kvt_pager *p)
{
	pthread_cond_signal(&p->work);
	if (p->feeding && !p->kicked) {
		p->kicked = 1;
		kvt_nvme_kick(p->nvme);
	}
}

/* Prefetches go in two queues, the next layer's pages and those of the
 * layers after it, and are read in that order: the batches of one layer
 * each queue their own pages of every layer ahead, so that a single
 * queue would hold the first batch's pages two layers ahead before the
 * second batch's of the next layer. */
int kvt_queue_prefetch(struct kvt_pager *p, uint32_t s, int far)
{
	struct page *pg = &p->pages[s];
	if (pg->state != P_READY || pg->frame[p->target] != NO_FRAME ||
	    (pg->frame[KVT_TIER_FAST] != NO_FRAME) ||
	    (pg->flags & (PF_QDEMAND | PF_QPREF)))
		return 0;
	struct pqueue *q = far ? &p->pf_far : &p->prefetch;

	if (q->n > 2 * p->pf_live + 256)
		pq_compact(p, q);
	if (pq_push(q, s, pg->gen) == 0) {
		pg->flags |= PF_QPREF;
		p->pf_live++;
		p->st.prefetch_issued++;
		return 1;
	}
	return 0;
}

/* The stage has room for queued prefetches now (lock held): wake the
 * migration thread, which may be waiting for it. Called as batches hand
 * pages out and go. */
void kvt_wake_prefetch(struct kvt_pager *p)
{
	if (kvt_pf_queued(p) && !p->held && kvt_stage_room(p, 1))
		pthread_cond_signal(&p->work);
}

/* ---------------------------------------------------------------------
 * Reclaim and demotion (migration thread, lock held; may drop it)
 */

struct vctx {
	struct kvt_pager *p;
	int tier;
	int keep_pf;		/* recent prefetched pages are not victims */
	int dup_only;		/* only pages with a copy in the other upper tier */
};

static int unevictable(void *arg, uint64_t key)
{
	const struct vctx *c = arg;
	const struct page *pg = &c->p->pages[key];
	if (pg->state != P_READY)
		return 1;
	/* Views point into the fast or host tier, never into NVMe: a copy
	 * there under another one may go even while the page is pinned or
	 * waited for (else a full NVMe tier holding clean copies of pinned
	 * pages could block every demotion). */
	if (c->tier == KVT_TIER_NVME)
		return copies(pg) == 1;
	if (c->dup_only && pg->frame[!c->tier] == NO_FRAME)
		return 1;
	/* A page prefetched in this step or the last stays where batches
	 * read until it is used; one older than that was not wanted after
	 * all, and goes like any other (wasted). */
	if (c->keep_pf && (pg->flags & PF_PREFETCHED) && c->tier == c->p->target &&
	    (uint32_t)c->p->step - pg->pf_step < 2)
		return 1;
	/* A page a batch waits for is kept where the batch will read it. */
	return pg->pins || (pg->want && c->tier <= c->p->target) ||
	       (copies(pg) == 1 && c->tier == c->p->last);
}

static int demote_write(struct kvt_pager *p, int ti, const uint32_t *slots, uint32_t n);

/* Evicting page s from tier ti: drop the copy when another one remains,
 * else add s to the list wl[*nw] of pages to write one tier down. */
static void drop_or_list(struct kvt_pager *p, uint32_t s, int ti, uint32_t *wl, uint32_t *nw)
{
	if (copies(&p->pages[s]) > 1)
		kvt_unplace(p, s, ti, 1, 1);
	else
		wl[(*nw)++] = s;
}

/* Make `need` frames of tier ti free. Returns 0 when they are, -ENOSPC when
 * everything left is pinned or moving (or the tier below is full), -EAGAIN
 * for a prefetch that would evict a page needed sooner, or when p->nowrite
 * is set and the next victim has no other copy. */
static int reclaim(struct kvt_pager *p, int ti, uint32_t need, int prefetch)
{
	struct tier *t = &p->t[ti];
	uint64_t keys[MAX_VICTIMS];
	uint32_t wl[MAX_VICTIMS];
	struct vctx c = { p, ti, 1, 0 };

	if (need > t->online)
		need = t->online;
	/* Pages evicted while a shrink is pending pay its debt first. */
	while (t->nfree < need || debt(t)) {
		uint32_t want = need - (need < t->nfree ? need : t->nfree) + debt(t);
		if (want > MAX_VICTIMS)
			want = MAX_VICTIMS;
		size_t nv = 0;
		if (p->target == KVT_TIER_FAST && ti < KVT_TIER_NVME && p->dups) {
			/* Copying up, a page in both fast and host is held
			 * twice: drop one of its copies before any page goes. */
			c.dup_only = 1;
			nv = t->pol->victims(t->pst, keys, want, unevictable, &c);
			c.dup_only = 0;
		}
		if (!nv)
			nv = t->pol->victims(t->pst, keys, want, unevictable, &c);
		if (!nv && c.keep_pf && !prefetch) {
			/* Nothing else to take: prefetched pages go too. */
			c.keep_pf = 0;
			nv = t->pol->victims(t->pst, keys, want, unevictable, &c);
		}
		if (!nv)
			return -ENOSPC;
		uint32_t nw = 0;
		for (size_t i = 0; i < nv; i++) {
			uint32_t s = (uint32_t)keys[i];
			struct page *pg = &p->pages[s];
			/* A prefetch evicts only what is needed later than the
			 * page it brings: pages read in this step (not needed
			 * again before the next) or in none of the last two
			 * (not being read); not one read in the last step and
			 * not yet in this one (it is due in this step), nor a
			 * page prefetched or demanded. */
			if (prefetch && ((pg->flags & (PF_PREFETCHED | PF_QDEMAND)) ||
					 pg->last_step + 1 == p->step))
				return -EAGAIN;
			drop_or_list(p, s, ti, wl, &nw);
		}
		if (nw) {
			if (p->nowrite)
				return -EAGAIN;
			int r = demote_write(p, ti, wl, nw);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

/* The first free frame from the cursor on that starts len free frames in
 * a row, looking at 64K frames at most; or NO_FRAME. */
static uint32_t free_run(const struct tier *t, uint32_t len)
{
	uint32_t f = t->cursor, seen = 0, limit = t->nframes < 65536 ? t->nframes : 65536;

	while (seen < limit) {
		if (f >= t->nframes)
			f = 0;
		uint64_t w = t->freemap[f / 64] >> (f % 64);
		uint32_t skip = w ? (uint32_t)__builtin_ctzll(w) : 64 - f % 64, n = 0;
		f += skip;
		seen += skip;
		if (!w || f >= t->nframes)
			continue;
		while (n < len && frame_is_free(t, f + n))
			n++;
		if (n == len)
			return f;
		f += n + 1;
		seen += n + 1;
	}
	return NO_FRAME;
}

/* An NVMe frame for page s (there is a free one), placed so that a
 * layer's pages read back in index order coalesce into io.max_io_bytes
 * reads. Page indices go in extents of p->extent; an extent's pages keep
 * the order of their indices in the tier: a page takes base + its offset
 * when another page of its extent is there already (base follows from
 * that page's frame) and that frame is free; the first to come down
 * starts the extent where p->extent free frames begin, and the next-fit
 * cursor moves past them. Anything else takes any free frame. */
static uint32_t nvme_frame(struct kvt_pager *p, uint32_t s)
{
	struct tier *t = &p->t[KVT_TIER_NVME];
	struct page *pg = &p->pages[s];
	uint32_t e = p->extent, off = pg->index % e, got, f = NO_FRAME;

	if (e > 1 && pg->seq < p->nseqs && p->seqs[pg->seq]->open &&
	    pg->layer < p->cfg.n_layers) {
		const struct layer_tab *lt = &p->seqs[pg->seq]->lt[pg->layer];
		if (pg->index < lt->n && lt->pg[pg->index] == s) {
			uint32_t first = pg->index - off;
			/* Where a neighbour went (in this batch too: its
			 * write may not be in yet, hence the hint). */
			for (uint32_t i = first; i < first + e && i < lt->n; i++) {
				uint32_t g = p->pages[lt->pg[i]].home;
				if (i == pg->index || g == NO_FRAME || g < i - first)
					continue;
				if (kvt_frame_take(t, g - (i - first) + off))
					f = g - (i - first) + off;
				break;
			}
			uint32_t base = f == NO_FRAME ? free_run(t, e) : NO_FRAME;
			if (base != NO_FRAME && kvt_frame_take(t, base + off)) {
				f = base + off;
				t->cursor = (base + e) % t->nframes;
			}
		}
	}
	if (f == NO_FRAME)
		f = kvt_frame_alloc_run(t, 1, &got);
	pg->home = f;
	return f;
}

/* Write the only copy of n pages of tier ti one tier down, then drop
 * them from ti. Returns the number moved or -errno when none could be. */
static int demote_write(struct kvt_pager *p, int ti, const uint32_t *slots, uint32_t n)
{
	struct tier *src = &p->t[ti], *dst = &p->t[ti + 1];
	struct move mv[MAX_VICTIMS];
	struct kvt_io io[MAX_VICTIMS];
	uint32_t m = 0;
	int r;

	if (ti + 1 > p->last)
		return -ENOSPC;
	if (ti + 1 == KVT_TIER_NVME && now_ns() < p->nvme_paused_until)
		return -ENOSPC;
	r = reclaim(p, ti + 1, n, 0);
	if (dst->nfree == 0)
		return r ? r : -ENOSPC;

	/* The lock was dropped: take only pages that are still candidates. */
	for (uint32_t i = 0; i < n && dst->nfree; i++) {
		uint32_t s = slots[i], got;
		struct page *pg = &p->pages[s];
		if (pg->state != P_READY || pg->pins || pg->frame[ti] == NO_FRAME ||
		    pg->frame[ti + 1] != NO_FRAME)
			continue;
		if (copies(pg) > 1) {
			kvt_unplace(p, s, ti, 1, 1);
			continue;
		}
		uint32_t f = ti + 1 == KVT_TIER_NVME ? nvme_frame(p, s) : kvt_frame_alloc_run(dst, 1, &got);
		dst->owner[f] = s;
		pg->state = P_MOVING;
		p->moving++;
		mv[m++] = (struct move){ .slot = s, .from = pg->frame[ti], .to = f };
	}
	if (!m)
		return 0;

	pthread_mutex_unlock(&p->lock);
	uint64_t t0 = now_ns();
	if (ti == KVT_TIER_FAST) {
		uint64_t last = 0;
		for (uint32_t i = 0; i < m; i++) {
			mv[i].res = kvt_dev_copy_async(p->dev, frame_ptr(dst, mv[i].to),
						       frame_ptr(src, mv[i].from),
						       p->page_bytes, KVT_D2H, &mv[i].fence);
			if (!mv[i].res)
				last = mv[i].fence;
		}
		r = kvt_dev_fence_wait(p->dev, last);
		for (uint32_t i = 0; i < m; i++)
			if (!mv[i].res)
				mv[i].res = r;
	} else {
		for (uint32_t i = 0; i < m; i++) {
			const uint8_t *buf = frame_ptr(src, mv[i].from);
			mv[i].csum = XXH3_64bits(buf, p->page_bytes);
			io[i] = (struct kvt_io){ .off = (uint64_t)mv[i].to * dst->stride,
				.buf = (void *)buf, .len = (uint32_t)dst->stride,
				.op = KVT_IO_WRITE, .user = &mv[i] };
		}
		r = kvt_nvme_run(p->nvme, io, m, NULL, NULL);
		for (uint32_t i = 0; i < m; i++)
			mv[i].res = r ? r : io[i].res;
	}
	uint64_t dt = now_ns() - t0;
	pthread_mutex_lock(&p->lock);

	int moved = 0;
	if (ti + 1 == KVT_TIER_NVME)
		kvt_nvme_info(p->nvme, &p->nvme_info);
	p->moving -= m;
	for (uint32_t i = 0; i < m; i++) {
		uint32_t s = mv[i].slot;
		struct page *pg = &p->pages[s];
		pg->state = P_READY;
		if (mv[i].res) {
			kvt_frame_free(dst, mv[i].to);
			if (ti + 1 == KVT_TIER_NVME) {
				p->nvme_paused_until = now_ns() + NVME_PAUSE_NS;
				if (mv[i].res == -ENOSPC)
					p->st.enospc++;
				else
					p->st.io_errors++;
			} else {
				p->st.io_errors++;
			}
		} else {
			kvt_place(p, s, ti + 1, mv[i].to);
			if (ti + 1 == KVT_TIER_NVME) {
				pg->csum = mv[i].csum;
				kvt_lat_record(&dst->st, io[i].lat_ns);
			}
			kvt_unplace(p, s, ti, 1, 0);
			src->st.bytes_out += p->page_bytes;
			dst->st.bytes_in += p->page_bytes;
			moved++;
		}
		if (pg->flags & PF_DOOMED) {
			pg->flags &= ~PF_DOOMED;
			kvt_page_free(p, s);
		}
	}
	if (ti == KVT_TIER_FAST)
		kvt_lat_record(&src->st, dt);
	p->events++;
	if (mv[0].res && r == 0 && moved == 0)
		r = mv[0].res;
	pthread_cond_broadcast(&p->done);
	CHECK_INVARIANTS(p);
	return moved ? moved : (r ? r : 0);
}

/* Evict every page of the list out of tier ti (drop or write down).
 * Pinned pages stay. Returns 0, or -EBUSY if some stayed, or -errno. */
static int evict_out(struct kvt_pager *p, const struct pref *pages, uint32_t n, int ti)
{
	uint32_t wl[MAX_VICTIMS];
	int res = 0;

	for (uint32_t i = 0; i < n;) {
		uint32_t nw = 0, start = i;
		for (; i < n && nw < MAX_VICTIMS; i++) {
			uint32_t s = pages[i].slot;
			struct page *pg = &p->pages[s];
			if (pg->gen != pages[i].gen || pg->state == P_FREE ||
			    pg->state == P_LOST || pg->frame[ti] == NO_FRAME)
				continue;
			if (pg->state != P_READY || pg->pins || pg->want) {
				res = -EBUSY;
				continue;
			}
			drop_or_list(p, s, ti, wl, &nw);
		}
		if (nw) {
			int r = demote_write(p, ti, wl, nw);
			if (r < 0)
				return r;
			/* The tier below had room for only some: it makes more
			 * (writing further down) on the next round. */
			if (r > 0 && (uint32_t)r < nw)
				i = start;
			else if ((uint32_t)r < nw && !res)
				res = -EBUSY;
		}
	}
	return res;
}

/* ---------------------------------------------------------------------
 * Promotion (migration thread, lock held; drops it around the transfers)
 */

static void land(struct kvt_pager *p, struct move *x, int rc);
static void land_ready(struct flight *fl);

static void verify_read(void *arg, struct kvt_io *io)
{
	struct flight *fl = arg;
	struct kvt_pager *p = fl->p;
	struct move *m = io->user;

	/* The checksum stored at write time; the slot cannot be reused while
	 * the page is MOVING, so reading it unlocked is safe. */
	m->rres = io->res;
	m->lat_ns = io->lat_ns;
	if (!m->rres && XXH3_64bits(io->buf, p->page_bytes) != m->csum)
		m->rres = -EBADMSG;
	/* Start the copy up as soon as the read is in (target fast). */
	if (!m->rres && m->to != NO_FRAME)
		m->cres = kvt_dev_copy_async(p->dev, frame_ptr(&p->t[KVT_TIER_FAST], m->to),
					     io->buf, p->page_bytes, KVT_H2D, &m->fence);
	fl->order[fl->n++] = (uint32_t)(m - fl->mv);
	if (++fl->since >= fl->every)
		land_ready(fl);
}

/* Publish the moves at the head of fl->order whose copies are done. */
static void land_ready(struct flight *fl)
{
	struct kvt_pager *p = fl->p;
	uint32_t i = fl->next;

	while (i < fl->n && kvt_dev_fence_done(p->dev, fl->mv[fl->order[i]].fence) == 1)
		i++;
	fl->since = 0;
	if (i == fl->next)
		return;
	pthread_mutex_lock(&p->lock);
	kvt_nvme_info(p->nvme, &p->nvme_info);
	for (; fl->next < i; fl->next++)
		land(p, &fl->mv[fl->order[fl->next]], 0);
	p->events++;
	pthread_cond_broadcast(&p->done);
	pthread_mutex_unlock(&p->lock);
}

/* A promotion is over (lock held): publish where its page is now. rc is
 * the fence wait's result for copies not known to be done. */
static void land(struct kvt_pager *p, struct move *x, int rc)
{
	struct tier *fast = &p->t[KVT_TIER_FAST], *host = &p->t[KVT_TIER_HOST];
	struct tier *nvme = &p->t[KVT_TIER_NVME];
	struct page *pg = &p->pages[x->slot];
	int up_ok = x->to != NO_FRAME && !x->rres && !x->cres && !rc;

	x->landed = 1;
	p->moving--;
	pg->state = P_READY;
	/* A page brought up on demand is being used in this step: its arrival
	 * (on_insert) is that use, so the pin that follows does not count it
	 * again. A prefetched page is used when it is acquired. */
	if (!(pg->flags & PF_PFMOVE) && !x->rres && pg->last_step != p->step) {
		pg->last_step = p->step;
		p->time++;
		p->step_pages++;
	}
	if (x->via_nvme && x->rres != -ECANCELED) {
		kvt_lat_record(&nvme->st, x->lat_ns);
		if (x->rres == -EBADMSG)
			p->st.csum_failures++;
		else if (x->rres)
			p->st.io_errors++;
	}
	if (x->via_nvme) {
		if (!x->rres) {
			kvt_place(p, x->slot, KVT_TIER_HOST, x->hf);
			nvme->st.bytes_out += p->page_bytes;
			host->st.bytes_in += p->page_bytes;
			host->st.promotions++;
			TRACE(p, 0, KVT_EV_PROMOTE, x->slot, KVT_TIER_NVME, KVT_TIER_HOST,
			      (uint32_t)p->page_bytes,
			      pg->flags & PF_PFMOVE ? KVT_TF_PREFETCH : 0, 0.f);
		} else {
			kvt_frame_free(host, x->hf);
			/* A read that failed, or data that does not match its
			 * checksum: the only copy is bad. A read that never ran
			 * leaves the page as it was. */
			if (x->rres != -ECANCELED) {
				struct kvt_ref r = ref_of(p, x->slot);

				kvt_lasterr_read(p, x->rres, KVT_TIER_NVME,
						 (uint64_t)x->from * nvme->stride,
						 (uint32_t)p->page_bytes, x->slot, &r);
				kvt_page_lose(p, x->slot);
			}
		}
	}
	if (x->to != NO_FRAME) {
		if (up_ok) {
			pg->flags &= ~PF_UPFAST;
			kvt_place(p, x->slot, KVT_TIER_FAST, x->to);
			host->st.bytes_out += p->page_bytes;
			fast->st.bytes_in += p->page_bytes;
			fast->st.promotions++;
			TRACE(p, 0, KVT_EV_PROMOTE, x->slot, KVT_TIER_HOST, KVT_TIER_FAST,
			      (uint32_t)p->page_bytes,
			      pg->flags & PF_PFMOVE ? KVT_TF_PREFETCH : 0, 0.f);
		} else {
			kvt_frame_free(fast, x->to);
			if (pg->state == P_READY && !x->rres)
				pg->err = (int8_t)(x->cres ? x->cres : rc);
		}
	}
	if (pg->state == P_READY) {
		kvt_set_top(pg);
		if ((pg->flags & PF_PFMOVE) && (up_ok || (x->to == NO_FRAME && !x->rres))) {
			pg->flags |= PF_PREFETCHED;
			pg->pf_step = (uint32_t)p->step;
			p->pf_landed++;
		}
	}
	pg->flags &= ~PF_PFMOVE;
	kvt_stage_out(p, pg);	/* landed, or failed: no longer on its way */
	if (pg->flags & PF_DOOMED) {
		pg->flags &= ~PF_DOOMED;
		kvt_page_free(p, x->slot);
	}
}

/* Choose which of req go up and give each its frames (lock held; reclaim
 * may drop it, unless p->nowrite). The moves are written at mv, their
 * pages made MOVING; returns how many. A page that gets no frame: a
 * prefetch is dropped; a demand fails with the reason (the batch asks
 * again after the next change), or under p->nowrite goes back in the
 * queue and *full is set. */
static uint32_t pick(struct kvt_pager *p, const struct pref *req, uint32_t n, int prefetch,
		     struct move *mv, int *full)
{
	struct tier *fast = &p->t[KVT_TIER_FAST], *host = &p->t[KVT_TIER_HOST];
	uint32_t m = 0, need_fast = 0, need_host = 0;
	int target = p->target;
	uint64_t ev0 = p->events;

	/* Which pages go up, and how many fast frames that takes. */
	for (uint32_t i = 0; i < n; i++) {
		uint32_t s = req[i].slot;
		struct page *pg = &p->pages[s];
		if (pg->gen != req[i].gen)
			continue;
		/* A batch may need a page in the fast tier even when acquire
		 * reads the host tier in kvt_place (a tail brought back by resume). */
		int up = target == KVT_TIER_FAST || (pg->flags & PF_UPFAST);
		if (pg->state != P_READY || pg->frame[KVT_TIER_FAST] != NO_FRAME ||
		    (!up && pg->frame[target] != NO_FRAME) || (!prefetch && !pg->want)) {
			if (!prefetch)
				pg->flags &= ~PF_QDEMAND;
			continue;
		}
		mv[m++] = (struct move){ .slot = s, .gen = req[i].gen, .from = NO_FRAME,
					 .to = NO_FRAME, .hf = NO_FRAME, .up = (uint8_t)up };
		need_fast += up;
	}
	if (!m)
		return 0;

	/* Fast frames first. Their reclaim may push pages into the host tier,
	 * and host pages down to NVMe, ours among them: a page waiting to go
	 * up is only protected in the tier it is wanted in, so a host tier
	 * full of pages wanting the fast tier cannot deadlock the move. */
	int rf = need_fast ? reclaim(p, KVT_TIER_FAST, need_fast, prefetch) : 0;
	uint32_t k = 0;
	for (uint32_t i = 0; i < m; i++) {
		struct move x = mv[i];
		struct page *pg = &p->pages[x.slot];
		if (pg->gen != x.gen)
			continue;
		if (!prefetch)
			pg->flags &= ~PF_QDEMAND;
		if (pg->state != P_READY || pg->frame[KVT_TIER_FAST] != NO_FRAME ||
		    (!x.up && pg->frame[target] != NO_FRAME))
			continue;
		pg->state = P_MOVING;
		p->moving++;
		if (prefetch)
			pg->flags |= PF_PFMOVE;
		x.via_nvme = pg->top == KVT_TIER_NVME;
		need_host += x.via_nvme;
		mv[k++] = x;
	}
	m = k;
	int rh = need_host ? reclaim(p, KVT_TIER_HOST, need_host, prefetch) : 0;
	uint32_t kept = 0;
	for (uint32_t i = 0; i < m; i++) {
		struct move *x = &mv[i];
		struct page *pg = &p->pages[x->slot];
		int ok = 1, why = 0;
		if (x->up && !fast->nfree) {
			ok = 0;
			why = rf ? rf : -ENOSPC;
		}
		if (ok && x->via_nvme && !host->nfree) {
			ok = 0;
			why = rh ? rh : -ENOSPC;
		}
		if (!ok) {
			pg->state = P_READY;
			p->moving--;
			pg->flags &= ~PF_PFMOVE;
			if (pg->flags & PF_DOOMED) {
				pg->flags &= ~PF_DOOMED;
				kvt_page_free(p, x->slot);
			} else if (prefetch) {
				p->st.prefetch_dropped++;
			} else if (p->nowrite) {
				kvt_queue_demand(p, x->slot);
				*full = 1;
			} else {
				pg->err = (int8_t)why;
				/* Progress made while trying (pages written down
				 * by the reclaim) counts as a change: retry. */
				p->err_ev = ev0;
			}
			continue;
		}
		if (x->up) {
			x->to = kvt_frame_alloc(fast);
			fast->owner[x->to] = x->slot;
		}
		if (x->via_nvme) {
			uint32_t got;
			x->hf = kvt_frame_alloc_run(host, 1, &got);
			host->owner[x->hf] = x->slot;
			x->from = pg->frame[KVT_TIER_NVME];
			x->csum = pg->csum;
		} else {
			x->from = pg->frame[KVT_TIER_HOST];
		}
		/* Bound for the tier batches read from: staged until read. */
		if (x->up ? target == KVT_TIER_FAST : x->via_nvme)
			kvt_stage_in(p, pg, prefetch);
		mv[kept++] = *x;
	}
	return kept;
}

/* Start the transfers of fl->mv[first, first + m) (lock not held): host
 * pages go up at once; NVMe pages get a read at io (sorted by offset
 * inside kvt_nvme_run, so neighbours coalesce) and start their copy up
 * from its completion. Returns the reads written. */
static uint32_t start_moves(struct kvt_pager *p, struct flight *fl, uint32_t first, uint32_t m,
			    struct kvt_io *io)
{
	struct tier *fast = &p->t[KVT_TIER_FAST], *host = &p->t[KVT_TIER_HOST];
	uint32_t nio = 0;

	for (uint32_t i = first; i < first + m; i++) {
		struct move *x = &fl->mv[i];
		x->cres = 0;
		x->fence = 0;
		x->landed = 0;
		fl->up |= x->up;
		if (x->via_nvme) {
			x->rres = -ECANCELED;	/* until its completion says otherwise */
			io[nio++] = (struct kvt_io){
				.off = (uint64_t)x->from * p->t[KVT_TIER_NVME].stride,
				.buf = frame_ptr(host, x->hf),
				.len = (uint32_t)p->t[KVT_TIER_NVME].stride,
				.op = KVT_IO_READ, .user = x };
		} else {
			x->rres = 0;
			x->cres = kvt_dev_copy_async(p->dev, frame_ptr(fast, x->to),
						     frame_ptr(host, x->from), p->page_bytes,
						     KVT_H2D, &x->fence);
			fl->order[fl->n++] = i;
		}
	}
	return nio;
}

/* How many reads to land at a time once a batch of m joins the flight: a
 * quarter of the largest batch so far, at least 8 (the lock and the
 * wake-up are not paid per page), at most 256. */
static uint32_t land_every(uint32_t every, uint32_t m)
{
	uint32_t e = m / 4 + 1;
	if (e < every)
		e = every;
	return e < 8 ? 8 : e > 256 ? 256 : e;
}

/* Take up to max pages off the prefetch queue (lock held), leaving out
 * pages freed since and pages a batch waits for meanwhile: the demand
 * queue has them, or will when the batch asks for them (ask()). Returns
 * how many are in req. */
static uint32_t pop_prefetch(struct kvt_pager *p, struct pref *req, uint32_t max)
{
	uint32_t got = pq_pop(&p->prefetch, req, max), n = 0;

	got += pq_pop(&p->pf_far, req + got, max - got);

	for (uint32_t i = 0; i < got; i++) {
		struct page *pg = &p->pages[req[i].slot];
		/* Freed since, or acquired since (acquire cleared the flag). */
		if (pg->gen != req[i].gen || !(pg->flags & PF_QPREF))
			continue;
		kvt_pf_unqueue(p, pg);
		if (!(pg->flags & PF_QDEMAND) && !pg->want)
			req[n++] = req[i];
	}
	return n;
}

/* kvt_nvme_run_more's hook: while the reads of a promotion run, take the
 * next pages from the queues (demand first) as long as frames come free
 * without writing anything down, and add their reads. Pending jobs and
 * writers waiting for a fast frame end it, so the migration thread gets
 * back to them. */
static unsigned refill(void *arg, struct kvt_io *io, unsigned room)
{
	struct flight *fl = arg;
	struct kvt_pager *p = fl->p;
	struct pref req[MAX_MOVE];
	uint32_t want = p->move_batch, n = 0, k, moving = fl->m - fl->next;
	int prefetch = 0, full = 0;

	/* Pages going to the fast tier: at most two batches' worth not landed
	 * yet, so the frames its policy keeps are not all taken by pages on
	 * their way (move_batch is sized from the fast tier). Reading the host
	 * tier in place, they land there, as many as it has frames for. */
	if (p->target == KVT_TIER_FAST) {
		if (moving >= 2 * p->move_batch)
			return 0;
		if (want > 2 * p->move_batch - moving)
			want = 2 * p->move_batch - moving;
	}
	if (want > MAX_FLIGHT - fl->m)
		want = MAX_FLIGHT - fl->m;
	if (want > room)
		want = room;
	if (fl->full || !want)
		return 0;
	pthread_mutex_lock(&p->lock);
	p->kicked = 0;
	if (!p->stop && !p->jobs && !p->t[KVT_TIER_FAST].waiters) {
		uint32_t sr;

		if (p->demand.n && (sr = kvt_stage_room(p, 0))) {
			n = pq_pop(&p->demand, req, want < sr ? want : sr);
		} else if (!p->demand.n && kvt_pf_queued(p) && (sr = kvt_stage_room(p, 1))) {
			n = pop_prefetch(p, req, want < sr ? want : sr);
			prefetch = 1;
		}
	}
	p->nowrite = 1;
	k = n ? pick(p, req, n, prefetch, fl->mv + fl->m, &full) : 0;
	p->nowrite = 0;
	pthread_mutex_unlock(&p->lock);
	if (full)
		fl->full = 1;
	uint32_t nio = start_moves(p, fl, fl->m, k, io);
	fl->m += k;
	fl->every = land_every(fl->every, k);
	return nio;
}

static void promote(struct kvt_pager *p, const struct pref *req, uint32_t n, int prefetch)
{
	struct tier *fast = &p->t[KVT_TIER_FAST];
	struct flight fl = { .p = p, .mv = p->moves, .order = p->order };
	int full = 0;

	fl.m = pick(p, req, n, prefetch, fl.mv, &full);
	if (!fl.m) {
		pthread_cond_broadcast(&p->done);
		return;
	}

	/* Transfers, lock dropped. Pages are published as they land, a few
	 * at a time; the queues keep the reads coming while they run. */
	p->feeding = p->nvme != NULL;
	p->kicked = 0;
	pthread_mutex_unlock(&p->lock);
	uint64_t t0 = now_ns(), last = 0;
	uint32_t nio = start_moves(p, &fl, 0, fl.m, p->ios);
	fl.every = land_every(0, fl.m);
	if (nio) {
		/* On a ring failure the reads not completed keep -ECANCELED. */
		(void)kvt_nvme_run_more(p->nvme, p->ios, nio, MAX_FLIGHT, verify_read, refill, &fl);
	}
	/* Every copy started must be finished before its frames are touched,
	 * whatever happened to the others. */
	for (uint32_t i = 0; i < fl.m; i++)
		if (fl.mv[i].fence > last)
			last = fl.mv[i].fence;
	int rc = kvt_dev_fence_wait(p->dev, last);
	uint64_t dt = now_ns() - t0;
	pthread_mutex_lock(&p->lock);
	p->feeding = 0;

	if (nio)
		kvt_nvme_info(p->nvme, &p->nvme_info);
	for (uint32_t i = 0; i < fl.m; i++)
		if (!fl.mv[i].landed)
			land(p, &fl.mv[i], rc);
	if (fl.up)
		kvt_lat_record(&fast->st, dt);
	p->events++;		/* the moved pages can be evicted again */
	pthread_cond_broadcast(&p->done);
	CHECK_INVARIANTS(p);
}

/* ---------------------------------------------------------------------
 * The migration thread
 */

static int run_job(struct kvt_pager *p, struct job *j)
{
	int res = 0;
	for (int ti = j->lo; ti < j->hi; ti++) {
		int r = evict_out(p, j->pages, j->n, ti);
		if (r && !res)
			res = r;
	}
	return res;
}

void *kvt_migrate_main(void *arg)
{
	struct kvt_pager *p = arg;
	struct pref req[MAX_MOVE];

	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		struct tier *fast = &p->t[KVT_TIER_FAST];
		uint64_t now;

		if (p->jobs) {
			struct job *j = p->jobs;
			p->jobs = j->next;
			j->res = run_job(p, j);
			j->done = 1;
			pthread_cond_broadcast(&p->done);
			continue;
		}
		uint32_t room = kvt_stage_room(p, 0);
		if (p->demand.n && room) {
			/* The pages keep PF_QDEMAND until promote() has them
			 * MOVING or lets them go, so a batch woken meanwhile
			 * does not queue them twice. */
			uint32_t n = pq_pop(&p->demand, req, room < p->move_batch ? room : p->move_batch);
			promote(p, req, n, 0);
			continue;
		}
		if (fast->waiters && fast->nfree > fast->wm_min)
			pthread_cond_broadcast(&p->done);	/* frames came free some other way */
		if (fast->waiters && fast->nfree <= fast->wm_min) {
			uint64_t ev = p->events, fr = p->frame_req;
			if (reclaim(p, KVT_TIER_FAST, fast->wm_min + 1, 0) < 0) {
				p->alloc_fail++;
				pthread_cond_broadcast(&p->done);
				/* Nothing to evict: wait for a pin or a page to go,
				 * or for a new request to refuse. */
				while (!p->stop && p->events == ev && p->frame_req == fr &&
				       fast->waiters && !p->demand.n && !p->jobs)
					pthread_cond_wait(&p->work, &p->lock);
			} else {
				pthread_cond_broadcast(&p->done);
			}
			continue;
		}
		now = now_ns();
		int worked = 0;
		/* Below low, or a shrink to finish (the last tier too: it can
		 * drop clean copies of pages held above). */
		for (int ti = 0; ti <= p->last; ti++) {
			struct tier *t = &p->t[ti];
			if (((ti < p->last && t->nfree < t->wm_low) || debt(t)) &&
			    now >= t->retry_ns) {
				if (reclaim(p, ti, t->wm_high, 0) < 0)
					t->retry_ns = now_ns() + RETRY_NS;
				worked = 1;
			}
		}
		if (worked)
			continue;
		room = kvt_stage_room(p, 1);
		if (kvt_pf_queued(p) && room) {
			promote(p, req, pop_prefetch(p, req, room < p->move_batch ? room : p->move_batch), 1);
			continue;
		}
		if (kvt_pf_queued(p) && !p->moving && !p->held && !kvt_transit_asked(p)) {
			/* No room for a run, nothing on its way and no batch
			 * open, so none will come: the stage is prefetched pages
			 * landed and not read yet, and what is queued behind them
			 * could only come by evicting pages needed sooner.
			 * Dropped. */
			uint32_t n = pop_prefetch(p, req, MAX_MOVE);
			p->st.prefetch_dropped += n;
			continue;
		}

		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 20000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&p->work, &p->lock, &ts);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* Post a job to the migration thread and wait for it (lock held). */
int kvt_run_job_sync(struct kvt_pager *p, struct job *j)
{
	struct job **pp = &p->jobs;
	while (*pp)
		pp = &(*pp)->next;
	*pp = j;
	pthread_cond_signal(&p->work);
	while (!j->done)
		pthread_cond_wait(&p->done, &p->lock);
	return j->res;
}

/* A fast frame for a tail page, from a runtime thread (lock held). Below
 * the min watermark it waits for reclaim; it fails only when reclaim found
 * nothing to evict and no frame is left. */
uint32_t kvt_alloc_tail_frame(struct kvt_pager *p)
{
	struct tier *t = &p->t[KVT_TIER_FAST];
	uint64_t fail0 = p->alloc_fail;

	while (t->nfree <= t->wm_min) {
		if (p->alloc_fail != fail0) {
			if (t->nfree)
				break;
			return NO_FRAME;
		}
		t->waiters++;
		p->frame_req++;
		pthread_cond_signal(&p->work);
		pthread_cond_wait(&p->done, &p->lock);
		t->waiters--;
	}
	uint32_t f = kvt_frame_alloc(t);
	if (t->nfree < t->wm_low)
		pthread_cond_signal(&p->work);
	return f;
}
