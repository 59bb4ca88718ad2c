/* SPDX-License-Identifier: MIT */
/*
 * The pager core: page table, sequences, acquire/release, residency, the
 * migration thread and the watermarks.
 *
 * Residency of a page: one authoritative copy in tier `top` and optional
 * clean copies below it (pages are write-once once sealed, so a copy below
 * stays valid). Evicting a copy that is not the only one is a drop; the
 * only copy is written one tier down first. The fast tier's tail pages are
 * pinned; a pinned or MOVING page is never a victim.
 *
 * Threads: runtime threads take p->lock for bookkeeping only; all transfers
 * (device copies and NVMe I/O) run on the migration thread, which releases
 * the lock around them while the pages it moves are MOVING.
 */
#define _GNU_SOURCE		/* pthread_setname_np */
#include <errno.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "pager/errf.h"
#include "pager/internal.h"

#define MAX_MOVE	1024	/* pages per promotion batch, at most */
#define MAX_FLIGHT	4096	/* pages one promotion carries, its refills included */
#define MAX_VICTIMS	64	/* victims asked for at once */
#define RETRY_NS	10000000ull	/* back-off after a failed background reclaim */
#define NVME_PAUSE_NS	100000000ull	/* pause demotion to NVMe after ENOSPC/EIO */
#define ENOSPC_WAIT_NS	100000000ull	/* how long a batch waits for frames to unpin */
#define RETRY_WAIT_NS	5000000ull	/* a failed promotion is retried this often */

struct entry {
	uint32_t slot, gen, index;
	uint32_t ntok;
	const uint8_t *ptr;	/* frame, once pinned */
	int8_t	 tier;
	int8_t	 err;		/* -errno to report instead of a view */
	uint8_t	 pinned;
	uint8_t	 held;		/* missing and not asked for yet (ask()) */
	uint8_t	 asked;		/* asked for, not handed out yet: one of lead */
};

struct kvt_batch {
	struct kvt_pager *p;
	uint32_t seq;		/* slot of the sequence */
	uint32_t n;
	uint32_t nready;	/* entries queued in ready[] */
	uint32_t rpos;		/* next ready[] to hand out */
	uint32_t unpinned;	/* ready[] before this are unpinned */
	uint32_t done;		/* held batches: ready[] before this are no longer read */
	uint8_t	 hold;		/* kvt_batch_hold: unpin only what kvt_batch_done gave back */
	uint32_t npend;
	uint32_t nheld;		/* entries held */
	uint32_t ask;		/* no entry before e[ask] is held */
	uint32_t lead;		/* entries asked for and not handed out yet */
	uint32_t win;		/* asked for at most */
	uint32_t low;		/* ask for more when lead is down to this */
	int	 target;
	uint64_t handed, in_place;
	struct entry *e;	/* [n] */
	uint32_t *ready;	/* [n] entry indices in readiness order */
	uint32_t *pend;		/* [npend] entry indices still moving */
};

/* One page in flight in a promotion or demotion. */
struct move {
	uint32_t slot, gen;
	uint32_t from, to;	/* source and destination frame */
	uint32_t hf;		/* host frame used on the way up from NVMe */
	uint64_t fence;
	uint64_t csum;
	uint64_t lat_ns;	/* promotions from NVMe: the read's latency */
	int	 res;		/* demotions: the write or copy down */
	int	 rres, cres;	/* promotions: the read from NVMe, the copy up */
	uint8_t	 via_nvme;
	uint8_t	 up;		/* its destination is the fast tier */
	uint8_t	 landed;	/* promotions: done and published */
};

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

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void kvt_plog(struct kvt_pager *p, int level, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (!p->cfg.log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	p->cfg.log(p->cfg.log_arg, level, msg);
}

#if defined(KVT_DEBUG)
#include <assert.h>
#define CHECK_INVARIANTS(p) do { char _e[256]; \
	if ((p)->npages <= 8192 && kvt_pager_check(p, _e, sizeof(_e))) { \
		fprintf(stderr, "kvt invariant: %s\n", _e); abort(); } } while (0)
#else
#define CHECK_INVARIANTS(p) do { } while (0)
#endif

/* ---------------------------------------------------------------------
 * Frames
 */

static uint32_t frame_alloc_run(struct tier *t, uint32_t want, uint32_t *got)
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

static uint32_t frame_alloc(struct tier *t)
{
	uint32_t got;
	return frame_alloc_run(t, 1, &got);
}

static inline int frame_is_free(const struct tier *t, uint32_t f)
{
	return f < t->nframes && (t->freemap[f / 64] >> (f % 64) & 1);
}

/* Take frame f if it is free. */
static int frame_take(struct tier *t, uint32_t f)
{
	if (!frame_is_free(t, f))
		return 0;
	t->freemap[f / 64] &= ~(1ull << (f % 64));
	t->nfree--;
	return 1;
}

/* Frames still to be taken offline after a shrink. */
static inline uint32_t debt(const struct tier *t)
{
	return t->nframes - t->online - t->noff;
}

/* A frame leaves service: its free-map bit is clear and no page owns it,
 * so nothing reads or writes it until it comes back; where the tier may,
 * its memory goes back to the kernel (a later write faults in a zeroed
 * page). A failure leaves the memory as it was. */
static void frame_offline(struct tier *t, uint32_t f)
{
	t->offmap[f / 64] |= 1ull << (f % 64);
	t->noff++;
	if (t->release)
		(void)madvise(t->base + (uint64_t)f * t->stride, t->stride, MADV_DONTNEED);
}

/* An offline frame comes back into service (free). */
static void frame_online(struct tier *t, uint32_t f)
{
	t->offmap[f / 64] &= ~(1ull << (f % 64));
	t->noff--;
	t->freemap[f / 64] |= 1ull << (f % 64);
	t->nfree++;
}

/* While a shrink is being paid, a frame that comes free goes offline. */
static void frame_free(struct tier *t, uint32_t f)
{
	t->owner[f] = NO_PAGE;
	if (debt(t)) {
		frame_offline(t, f);
		return;
	}
	t->freemap[f / 64] |= 1ull << (f % 64);
	t->nfree++;
}

static inline uint8_t *frame_ptr(const struct tier *t, uint32_t f)
{
	return t->base + (uint64_t)f * t->stride;
}

static inline void *meta_of(const struct tier *t, uint32_t f)
{
	return t->meta + (size_t)f * t->pol->meta_size;
}

/* What the policies are told of a reference to page slot. */
static inline struct kvt_ref ref_of(const struct kvt_pager *p, uint32_t slot)
{
	const struct page *pg = &p->pages[slot];

	return (struct kvt_ref){
		.key = slot, .time = p->time, .step = p->step, .next = KVT_NEVER,
		.seq = pg->seq, .layer = pg->layer, .index = pg->index,
	};
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
static __attribute__((noinline)) void trace_page(struct kvt_pager *p, uint64_t t, uint8_t ev,
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

#define TRACE(p, ...) do { if (__builtin_expect((p)->rec != NULL, 0)) \
		trace_page((p), __VA_ARGS__); } while (0)

/* A record about no page (STEP). */
static void trace_step(struct kvt_pager *p)
{
	*kvt_recorder_slot(p->rec) = (struct kvt_trace_rec){
		.time = now_ns() - p->rec_t0, .step = p->step,
		.seq = KVT_REF_NONE, .layer = KVT_REF_NONE, .index = KVT_REF_NONE,
		.event = KVT_EV_STEP, .from = KVT_TRACE_NONE, .to = KVT_TRACE_NONE,
	};
}

static inline unsigned copies(const struct page *pg)
{
	return (pg->frame[0] != NO_FRAME) + (pg->frame[1] != NO_FRAME) +
	       (pg->frame[2] != NO_FRAME);
}

static void set_top(struct page *pg)
{
	pg->top = pg->frame[0] != NO_FRAME ? 0 : pg->frame[1] != NO_FRAME ? 1 : 2;
}

/* Give the page a copy in frame f of tier ti and tell the policy. */
static void stage_out(struct kvt_pager *p, struct page *pg);

/* A prefetched page is read, or goes: one fewer waiting to be read. */
static int pf_unset(struct kvt_pager *p, struct page *pg)
{
	if (!(pg->flags & PF_PREFETCHED))
		return 0;
	pg->flags &= ~PF_PREFETCHED;
	p->pf_landed--;
	return 1;
}

static void place(struct kvt_pager *p, uint32_t slot, int ti, uint32_t f)
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
static void unplace(struct kvt_pager *p, uint32_t slot, int ti, int demote, int drop)
{
	struct tier *t = &p->t[ti];
	struct page *pg = &p->pages[slot];
	uint32_t f = pg->frame[ti];

	t->pol->on_remove(t->pst, slot, meta_of(t, f));
	frame_free(t, f);
	pg->frame[ti] = NO_FRAME;
	if (ti < KVT_TIER_NVME && pg->frame[!ti] != NO_FRAME)
		p->dups--;
	if (ti == p->target && pf_unset(p, pg))
		p->st.prefetch_wasted++;
	/* A demotion is the page's top copy leaving; dropping a clean copy
	 * under a copy above is neither. */
	if (demote && pg->top == ti) {
		t->st.demotions++;
		t->st.drops += drop;
	}
	set_top(pg);
	/* to: where the top copy is now (below ti when ti was the top). */
	if (demote)
		TRACE(p, 0, drop ? KVT_EV_DROP : KVT_EV_DEMOTE, slot, ti, pg->top,
		      drop ? 0 : (uint32_t)p->page_bytes, 0, 0.f);
}

/* ---------------------------------------------------------------------
 * Pages
 */

static uint32_t page_new(struct kvt_pager *p)
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

static void page_free(struct kvt_pager *p, uint32_t s)
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
			unplace(p, s, ti, 0, 0);
	pg->state = P_FREE;
	pg->gen = (pg->gen + 1) & 0x7fffffff;
	pg->flags = 0;
	pg->next_free = p->free_page;
	p->free_page = s;
	p->live_pages--;
	p->events++;
}

static void page_unref(struct kvt_pager *p, uint32_t s)
{
	struct page *pg = &p->pages[s];
	if (pg->flags & PF_TAILPIN) {
		pg->flags &= ~PF_TAILPIN;
		pg->pins--;
	}
	if (--pg->refs == 0)
		page_free(p, s);
}

/* The page became unusable: free its frames, keep the slot (its owners
 * will get -EIO for it until they close). */
static void page_lose(struct kvt_pager *p, uint32_t s)
{
	struct page *pg = &p->pages[s];
	TRACE(p, 0, KVT_EV_LOST, s, pg->top, -1, (uint32_t)p->page_bytes, 0, 0.f);
	for (int ti = 0; ti < KVT_NTIERS; ti++)
		if (pg->frame[ti] != NO_FRAME)
			unplace(p, s, ti, 0, 0);
	pg->state = P_LOST;
	pf_unset(p, pg);
	pg->flags &= ~PF_PFMOVE;
	p->st.lost_pages++;
}

static void unpin(struct kvt_pager *p, uint32_t s)
{
	if (--p->pages[s].pins == 0) {
		p->events++;
		if (p->t[KVT_TIER_FAST].waiters || p->demand.n)
			pthread_cond_signal(&p->work);
	}
}

/* The stage: promotions into the tier batches read from (p->target) in
 * flight at once, at most p->stage[target] of them, prefetches at most
 * half: so pages on their way in never take more of the tier than the
 * frames its policy does not get, and a demand is not held up behind a
 * stream of prefetches. A page counts from the moment it is picked until
 * it lands (or fails); a prefetched page, until it is read (p->pf_landed).
 * What batches ask for is held to the stage by ask(), landed or not. */
static void stage_in(struct kvt_pager *p, struct page *pg, int prefetch)
{
	pg->flags |= PF_STAGED | (prefetch ? PF_STAGEPF : 0);
	p->staged++;
	p->staged_pf += prefetch;
}

static void stage_out(struct kvt_pager *p, struct page *pg)
{
	if (!(pg->flags & PF_STAGED))
		return;
	p->staged--;
	p->staged_pf -= !!(pg->flags & PF_STAGEPF);
	pg->flags &= ~(PF_STAGED | PF_STAGEPF);
}

/* How many more pages may start on their way in now, for demand or
 * prefetch: what the stage has left, or, when the landing tier has more
 * free frames than its watermark keeps, those (they hold nothing the
 * tier keeps). */
static uint32_t stage_room(const struct kvt_pager *p, int prefetch)
{
	const struct tier *t = &p->t[p->target];
	uint32_t cap = p->stage[p->target], room = cap > p->staged ? cap - p->staged : 0;
	uint32_t spare = t->nfree > t->wm_high + debt(t) ? t->nfree - t->wm_high - debt(t) : 0;

	if (prefetch) {
		/* Prefetched pages count until they are read: on their way,
		 * or landed and waiting (they are kept for their reader). */
		uint32_t held = p->staged_pf + p->pf_landed;
		uint32_t pf = cap / 2 > held ? cap / 2 - held : 0;
		room = room < pf ? room : pf;
	}
	return room > spare ? room : spare;
}

/* Count an access: once per page per step. */
static inline void touch(struct kvt_pager *p, uint32_t s, int ti)
{
	struct page *pg = &p->pages[s];
	if (pg->last_step != p->step) {
		struct tier *t = &p->t[ti];
		pg->last_step = p->step;
		p->time++;
		p->step_pages++;
		struct kvt_ref r = ref_of(p, s);
		t->pol->on_access(t->pst, &r, meta_of(t, pg->frame[ti]));
	}
}

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
	memcpy(out, q->v + q->head, n * sizeof(*out));
	q->head += n;
	q->n -= n;
	if (!q->n)
		q->head = 0;
	return n;
}

static void queue_demand(struct kvt_pager *p, uint32_t s)
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
static void wake_migrate(struct kvt_pager *p)
{
	pthread_cond_signal(&p->work);
	if (p->feeding && !p->kicked) {
		p->kicked = 1;
		kvt_nvme_kick(p->nvme);
	}
}

static void queue_prefetch(struct kvt_pager *p, uint32_t s)
{
	struct page *pg = &p->pages[s];
	if (pg->state != P_READY || pg->frame[p->target] != NO_FRAME ||
	    (pg->frame[KVT_TIER_FAST] != NO_FRAME) ||
	    (pg->flags & (PF_QDEMAND | PF_QPREF)))
		return;
	if (pq_push(&p->prefetch, s, pg->gen) == 0) {
		pg->flags |= PF_QPREF;
		p->st.prefetch_issued++;
	}
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
		unplace(p, s, ti, 1, 1);
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
				if (frame_take(t, g - (i - first) + off))
					f = g - (i - first) + off;
				break;
			}
			uint32_t base = f == NO_FRAME ? free_run(t, e) : NO_FRAME;
			if (base != NO_FRAME && frame_take(t, base + off)) {
				f = base + off;
				t->cursor = (base + e) % t->nframes;
			}
		}
	}
	if (f == NO_FRAME)
		f = frame_alloc_run(t, 1, &got);
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
			unplace(p, s, ti, 1, 1);
			continue;
		}
		uint32_t f = ti + 1 == KVT_TIER_NVME ? nvme_frame(p, s) : frame_alloc_run(dst, 1, &got);
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
			frame_free(dst, mv[i].to);
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
			place(p, s, ti + 1, mv[i].to);
			if (ti + 1 == KVT_TIER_NVME) {
				pg->csum = mv[i].csum;
				kvt_lat_record(&dst->st, io[i].lat_ns);
			}
			unplace(p, s, ti, 1, 0);
			src->st.bytes_out += p->page_bytes;
			dst->st.bytes_in += p->page_bytes;
			moved++;
		}
		if (pg->flags & PF_DOOMED) {
			pg->flags &= ~PF_DOOMED;
			page_free(p, s);
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
static void scores_update(struct kvt_pager *p);
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
			place(p, x->slot, KVT_TIER_HOST, x->hf);
			nvme->st.bytes_out += p->page_bytes;
			host->st.bytes_in += p->page_bytes;
			host->st.promotions++;
			TRACE(p, 0, KVT_EV_PROMOTE, x->slot, KVT_TIER_NVME, KVT_TIER_HOST,
			      (uint32_t)p->page_bytes,
			      pg->flags & PF_PFMOVE ? KVT_TF_PREFETCH : 0, 0.f);
		} else {
			frame_free(host, x->hf);
			/* A read that failed, or data that does not match its
			 * checksum: the only copy is bad. A read that never ran
			 * leaves the page as it was. */
			if (x->rres != -ECANCELED)
				page_lose(p, x->slot);
		}
	}
	if (x->to != NO_FRAME) {
		if (up_ok) {
			pg->flags &= ~PF_UPFAST;
			place(p, x->slot, KVT_TIER_FAST, x->to);
			host->st.bytes_out += p->page_bytes;
			fast->st.bytes_in += p->page_bytes;
			fast->st.promotions++;
			TRACE(p, 0, KVT_EV_PROMOTE, x->slot, KVT_TIER_HOST, KVT_TIER_FAST,
			      (uint32_t)p->page_bytes,
			      pg->flags & PF_PFMOVE ? KVT_TF_PREFETCH : 0, 0.f);
		} else {
			frame_free(fast, x->to);
			if (pg->state == P_READY && !x->rres)
				pg->err = (int8_t)(x->cres ? x->cres : rc);
		}
	}
	if (pg->state == P_READY) {
		set_top(pg);
		if ((pg->flags & PF_PFMOVE) && (up_ok || (x->to == NO_FRAME && !x->rres))) {
			pg->flags |= PF_PREFETCHED;
			pg->pf_step = (uint32_t)p->step;
			p->pf_landed++;
		}
	}
	pg->flags &= ~PF_PFMOVE;
	stage_out(p, pg);	/* landed, or failed: no longer on its way */
	if (pg->flags & PF_DOOMED) {
		pg->flags &= ~PF_DOOMED;
		page_free(p, x->slot);
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
		 * reads the host tier in place (a tail brought back by resume). */
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
				page_free(p, x->slot);
			} else if (prefetch) {
				p->st.prefetch_dropped++;
			} else if (p->nowrite) {
				queue_demand(p, x->slot);
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
			x->to = frame_alloc(fast);
			fast->owner[x->to] = x->slot;
		}
		if (x->via_nvme) {
			uint32_t got;
			x->hf = frame_alloc_run(host, 1, &got);
			host->owner[x->hf] = x->slot;
			x->from = pg->frame[KVT_TIER_NVME];
			x->csum = pg->csum;
		} else {
			x->from = pg->frame[KVT_TIER_HOST];
		}
		/* Bound for the tier batches read from: staged until read. */
		if (x->up ? target == KVT_TIER_FAST : x->via_nvme)
			stage_in(p, pg, prefetch);
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

	for (uint32_t i = 0; i < got; i++) {
		struct page *pg = &p->pages[req[i].slot];
		if (pg->gen != req[i].gen)
			continue;
		pg->flags &= ~PF_QPREF;
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

		if (p->demand.n && (sr = stage_room(p, 0))) {
			n = pq_pop(&p->demand, req, want < sr ? want : sr);
		} else if (!p->demand.n && p->prefetch.n && (sr = stage_room(p, 1))) {
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

static void *migrate_main(void *arg)
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
		uint32_t room = stage_room(p, 0);
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
		room = stage_room(p, 1);
		if (p->prefetch.n && room) {
			promote(p, req, pop_prefetch(p, req, room < p->move_batch ? room : p->move_batch), 1);
			continue;
		}
		if (p->prefetch.n && !p->staged_pf && !p->moving) {
			/* Prefetch's share of the stage is all pages landed and
			 * not read yet: what is queued behind them could only
			 * come by evicting pages needed sooner. Dropped. */
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
static int run_job_sync(struct kvt_pager *p, struct job *j)
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
static uint32_t alloc_tail_frame(struct kvt_pager *p)
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
	uint32_t f = frame_alloc(t);
	if (t->nfree < t->wm_low)
		pthread_cond_signal(&p->work);
	return f;
}

/* ---------------------------------------------------------------------
 * Open and close
 */

static uint16_t next_tag(void)
{
	static uint32_t tags;
	uint32_t t;
	do
		t = __atomic_add_fetch(&tags, 1, __ATOMIC_RELAXED) & 0xffff;
	while (!t);
	return (uint16_t)t;
}

/* Watermarks in frames, from the per cents and the live capacity. */
static void tier_marks(struct kvt_pager *p, int ti)
{
	struct tier *t = &p->t[ti];
	const struct kvt_tier_config *tc = &p->cfg.tier[ti];

	t->wm_min = (uint32_t)((uint64_t)t->online * tc->wm_min / 100);
	t->wm_low = (uint32_t)((uint64_t)t->online * tc->wm_low / 100);
	t->wm_high = (uint32_t)((uint64_t)t->online * tc->wm_high / 100);
	/* The stage: frames the policy's share leaves for pages on their way
	 * in. Every tier keeps its watermark's free frames; the tier batches
	 * read from (the landing tier) also keeps what the pages in flight
	 * and not yet read take: one NVMe ring's worth (io.depth requests of
	 * io.max_io_bytes, what keeps the disk busy), at most an eighth of
	 * the tier, at least 8 frames where it has 16. */
	uint32_t st = t->wm_high;
	/* The landing tier, and when pages are copied up, the host tier
	 * their NVMe reads land in on the way. */
	if (ti == p->target || (ti == KVT_TIER_HOST && p->target == KVT_TIER_FAST)) {
		uint64_t ring = (uint64_t)p->cfg.io_depth * p->cfg.max_io_bytes / p->page_bytes;
		uint64_t r = t->online / 8 < ring ? t->online / 8 : ring;
		if (r < 8)
			r = t->online >= 16 ? 8 : t->online > 1 ? t->online / 2 : 1;
		if (r > st)
			st = (uint32_t)r;
	}
	p->stage[ti] = st;
}

/* bytes reserved, of which `online` bytes in service at open. */
static int tier_init(struct kvt_pager *p, int ti, uint64_t bytes, uint64_t online,
		     uint8_t *base)
{
	struct tier *t = &p->t[ti];
	const char *spec = p->cfg.tier[ti].policy;
	uint32_t nw;
	int r;

	t->id = ti;
	t->stride = p->page_bytes;
	t->nframes = (uint32_t)(bytes / t->stride);
	t->online = (uint32_t)(online / t->stride);
	if (t->online > t->nframes)
		t->online = t->nframes;
	t->nfree = t->online;
	t->base = base;
	char why[256];
	t->pol = kvt_policy_load(spec, why, sizeof(why));
	if (!t->pol) {
		kvt_plog(p, KVT_LOG_ERROR, "tier.%s.policy = %s: %s", kvt_tier_name(ti), spec, why);
		return -EINVAL;
	}
	if (t->pol->flags & KVT_POLICY_OFFLINE) {
		kvt_plog(p, KVT_LOG_ERROR, "tier.%s.policy = %s: needs future references; "
		     "it runs only in kvt-sim", kvt_tier_name(ti), spec);
		return -EINVAL;
	}
	nw = (t->nframes + 63) / 64;
	t->freemap = calloc(nw ? nw : 1, sizeof(uint64_t));
	t->offmap = calloc(nw ? nw : 1, sizeof(uint64_t));
	t->owner = malloc(((size_t)t->nframes + 1) * sizeof(uint32_t));
	t->meta = calloc((size_t)t->nframes + 1, t->pol->meta_size ? t->pol->meta_size : 1);
	if (!t->freemap || !t->offmap || !t->owner || !t->meta)
		return -ENOMEM;
	for (uint32_t f = 0; f < t->nframes; f++) {
		if (f < t->online)
			t->freemap[f / 64] |= 1ull << (f % 64);
		else
			frame_offline(t, f);
		t->owner[f] = NO_PAGE;
	}
	/* Sized for every frame reserved: the pages resident never exceed
	 * the capacity a policy was given, whatever the live capacity. */
	r = t->pol->init(&t->pst, kvt_policy_params(spec), t->nframes);
	if (r) {
		kvt_plog(p, KVT_LOG_ERROR, "tier.%s.policy = %s: %s", kvt_tier_name(ti), spec, strerror(-r));
		t->pst = NULL;
		return r;
	}
	tier_marks(p, ti);
	t->st.frame_bytes = t->stride;
	return 0;
}

static void pager_free(struct kvt_pager *p)
{
	for (int i = KVT_NSVC; i-- > 0;)
		if (p->svc[i].stop)
			p->svc[i].stop(p->svc[i].arg);
	if (p->thread_started) {
		pthread_mutex_lock(&p->lock);
		p->stop = 1;
		pthread_cond_signal(&p->work);
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->thread, NULL);
	}
	if (p->rec) {
		/* Nobody appends any more: no lock needed. The error is lost;
		 * kvt_pager_trace_stop reports it. */
		(void)kvt_recorder_finish(p->rec);
		p->rec = NULL;
	}
	for (uint32_t i = 0; i < p->nseqs; i++) {
		struct seq *s = p->seqs[i];
		if (s->lt)
			for (unsigned l = 0; l < p->cfg.n_layers; l++)
				free(s->lt[l].pg);
		free(s->lt);
		free(s);
	}
	free(p->seqs);
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		struct tier *t = &p->t[ti];
		if (t->pst)
			t->pol->destroy(t->pst);
		free(t->freemap);
		free(t->offmap);
		free(t->owner);
		free(t->meta);
	}
	if (p->nvme)
		kvt_nvme_close(p->nvme);
	if (p->host.base) {
		if (p->dev->ops->unregister_host)
			p->dev->ops->unregister_host(p->dev->ctx, p->host.base);
		kvt_host_arena_close(&p->host);
	}
	if (p->fast_mem)
		p->dev->ops->free(p->dev->ctx, p->fast_mem, p->fast_bytes);
	if (p->dev_log)		/* the log we lent the device goes with us */
		kvt_device_set_log(p->dev, NULL, NULL);
	free(p->pages);
	free(p->demand.v);
	free(p->prefetch.v);
	free(p->moves);
	free(p->ios);
	free(p->order);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->trace_mu);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->done);
	free(p);
}

int kvt_pager_open_core(const struct kvt_config *cfg, struct kvt_device *dev,
			struct kvt_pager **out)
{
	struct kvt_pager *p;
	char err[256];
	uint64_t pb, frames[KVT_NTIERS], res[KVT_NTIERS];
	int r;

	if (!cfg || !dev || !out)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->lock, NULL);
	pthread_mutex_init(&p->trace_mu, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->done, NULL);
	p->cfg = *cfg;
	p->dev = dev;
	if (!dev->log && cfg->log) {
		kvt_device_set_log(dev, cfg->log, cfg->log_arg);
		p->dev_log = 1;
	}
	r = kvt_config_validate(cfg, err, sizeof(err));
	if (r) {
		kvt_plog(p, KVT_LOG_ERROR, "%s", err);
		goto fail;
	}
	p->tag = next_tag();
	pb = kvt_config_page_bytes(cfg);
	p->page_bytes = pb;
	p->half = pb / 2;
	p->tok_bytes = (uint64_t)cfg->n_kv_heads * cfg->head_dim * cfg->dtype_bytes;
	/* Auto reads in place where the device says it pays: always on
	 * cpu (the copy up would be a memcpy that buys nothing), on a GPU
	 * where its kernels read pinned host memory about as fast as its
	 * copy engine moves it (measured when the device opened). */
	int in_place = cfg->host_in_place == KVT_IN_PLACE_AUTO ? dev->in_place_auto
							       : cfg->host_in_place;
	p->target = in_place && dev->ops->host_addressable ? KVT_TIER_HOST : KVT_TIER_FAST;
	/* frames: in service at open; res: reserved (max_bytes), the most a
	 * live change may grow the tier to. */
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		uint64_t mb = cfg->tier[ti].max_bytes;
		frames[ti] = cfg->tier[ti].bytes / pb;
		res[ti] = (mb > cfg->tier[ti].bytes ? mb : cfg->tier[ti].bytes) / pb;
	}
	p->last = frames[KVT_TIER_NVME] ? KVT_TIER_NVME : KVT_TIER_HOST;
	if (res[0] + res[1] + res[2] >= NO_PAGE) {
		kvt_plog(p, KVT_LOG_ERROR, "too many frames: %llu", (unsigned long long)(res[0] + res[1] + res[2]));
		r = -EINVAL;
		goto fail;
	}

	p->fast_bytes = res[KVT_TIER_FAST] * pb;
	uint64_t dfree, dtotal;
	if (dev->ops->mem_info && !dev->ops->mem_info(dev->ctx, &dfree, &dtotal) &&
	    p->fast_bytes > dfree) {
		kvt_plog(p, KVT_LOG_ERROR, "fast tier: %llu MiB asked for, %s has %llu MiB free "
			 "of %llu MiB", (unsigned long long)(p->fast_bytes >> 20), dev->ops->name,
			 (unsigned long long)(dfree >> 20), (unsigned long long)(dtotal >> 20));
		r = -ENOMEM;
		goto fail;
	}
	r = dev->ops->alloc(dev->ctx, p->fast_bytes, &p->fast_mem);
	if (r) {
		kvt_plog(p, KVT_LOG_ERROR, "fast tier: %s cannot allocate %llu bytes: %s",
		     dev->ops->name, (unsigned long long)p->fast_bytes, strerror(-r));
		p->fast_mem = NULL;
		goto fail;
	}
	/* The host tier goes on the device's node when the device knows it
	 * and the configuration leaves the choice to us: preferred, not
	 * bound, so a host tier larger than that node spills over. */
	int node = cfg->host_numa_node;
	struct kvt_device_info di;
	if (node == KVT_NUMA_ANY && !dev->ops->host_visible && !kvt_device_info(dev, &di) &&
	    di.numa_node >= 0)
		node = di.numa_node | KVT_NUMA_PREFER;
	r = kvt_host_arena_open(&p->host, res[KVT_TIER_HOST] * pb, cfg->host_hugepages,
				cfg->host_mlock, node, cfg->host_prefault_threads);
	if (r) {
		kvt_plog(p, KVT_LOG_ERROR, "host tier: %llu bytes: %s%s%s",
		     (unsigned long long)(res[KVT_TIER_HOST] * pb), strerror(-r),
		     p->host.notes[0] ? ": " : "", p->host.notes);
		memset(&p->host, 0, sizeof(p->host));
		goto fail;
	}
	if (p->host.notes[0])
		kvt_plog(p, KVT_LOG_INFO, "host tier: %s", p->host.notes);
	if (dev->ops->register_host) {
		r = dev->ops->register_host(dev->ctx, p->host.base, p->host.bytes);
		if (r && !dev->ops->host_visible && p->target == KVT_TIER_HOST) {
			/* Kernels can read only registered host memory in place. */
			p->target = KVT_TIER_FAST;
			tier_marks(p, KVT_TIER_FAST);	/* the stages move with it */
			tier_marks(p, KVT_TIER_HOST);
			kvt_plog(p, KVT_LOG_WARN, "host tier: %s cannot register it (%s): pages are "
				 "copied up, not read in place", dev->ops->name, strerror(-r));
		} else if (r) {
			kvt_plog(p, KVT_LOG_WARN, "host tier: device cannot register it: %s", strerror(-r));
		}
		r = 0;
	}
	if (p->last == KVT_TIER_NVME) {
		struct kvt_nvme_opts o = {
			.path = cfg->nvme_path, .bytes = frames[KVT_TIER_NVME] * pb,
			.direct = cfg->nvme_direct, .depth = cfg->io_depth,
			.max_io = cfg->max_io_bytes, .log = cfg->log, .log_arg = cfg->log_arg,
		};
		r = kvt_nvme_open(&o, &p->nvme);
		if (r) {
			kvt_plog(p, KVT_LOG_ERROR, "nvme tier: %s: %s",
			     cfg->nvme_path[0] ? cfg->nvme_path : "(temp dir)", strerror(-r));
			p->nvme = NULL;
			goto fail;
		}
		if (kvt_nvme_register_buffers(p->nvme, p->host.base, p->host.bytes))
			kvt_plog(p, KVT_LOG_INFO, "nvme tier: plain buffers (registration refused)");
		kvt_nvme_info(p->nvme, &p->nvme_info);
	}

	/* The memory of offline host frames can go back to the kernel unless
	 * something holds it: buffers registered with io_uring (their pages
	 * stay pinned: a read would land in pages we no longer map), a
	 * device's registration, hugetlb pages (released only whole), or
	 * mlock (unlocking frame by frame would split the mapping into as
	 * many pieces as there are runs of offline frames, up to the
	 * system's limit on mappings). */
	p->t[KVT_TIER_HOST].release = p->host.hugepages != KVT_HUGE_HUGETLB &&
				      !p->host.mlocked && !dev->ops->register_host &&
				      !(p->nvme && p->nvme_info.registered_buffers);
	r = tier_init(p, KVT_TIER_FAST, p->fast_bytes, frames[KVT_TIER_FAST] * pb, p->fast_mem);
	if (!r)
		r = tier_init(p, KVT_TIER_HOST, p->host.bytes, frames[KVT_TIER_HOST] * pb,
			      p->host.base);
	if (!r)
		r = tier_init(p, KVT_TIER_NVME, frames[KVT_TIER_NVME] * pb,
			      frames[KVT_TIER_NVME] * pb, NULL);
	if (r)
		goto fail;
	scores_update(p);

	/* Pages in flight take frames beyond the resident set twice over
	 * (landing, and waiting to be consumed): a batch is an eighth of the
	 * fast tier, so the set a policy keeps is not eaten by it, but at
	 * least what fills the NVMe queue (depth x largest request: one
	 * batch's reads are all the disk sees at a time), up to a quarter. */
	uint64_t fill = (uint64_t)cfg->io_depth * cfg->max_io_bytes / pb;
	uint64_t mb = frames[KVT_TIER_FAST] / 8;
	if (mb < fill)
		mb = fill < frames[KVT_TIER_FAST] / 4 ? fill : frames[KVT_TIER_FAST] / 4;
	p->move_batch = (uint32_t)(mb > MAX_MOVE ? MAX_MOVE : mb < 8 ? 8 : mb);
	p->extent = cfg->max_io_bytes / pb > 1 ? (uint32_t)(cfg->max_io_bytes / pb) : 1;
	p->npages = (uint32_t)(res[0] + res[1] + res[2]);
	p->pages = calloc((size_t)p->npages + 1, sizeof(*p->pages));
	p->moves = malloc(MAX_FLIGHT * sizeof(*p->moves));
	p->ios = malloc(MAX_FLIGHT * sizeof(*p->ios));
	p->order = malloc(MAX_FLIGHT * sizeof(*p->order));
	if (!p->pages || !p->moves || !p->ios || !p->order) {
		r = -ENOMEM;
		goto fail;
	}
	p->free_page = NO_PAGE;
	for (uint32_t s = p->npages; s-- > 0;) {
		struct page *pg = &p->pages[s];
		pg->frame[0] = pg->frame[1] = pg->frame[2] = NO_FRAME;
		pg->next_free = p->free_page;
		p->free_page = s;
	}
	p->free_seq = NO_PAGE;
	p->psi_frames = UINT32_MAX;

	r = -pthread_create(&p->thread, NULL, migrate_main, p);
	if (r)
		goto fail;
	p->thread_started = 1;
	pthread_setname_np(p->thread, "kvt-migrate");
	*out = p;
	return 0;
fail:
	pager_free(p);
	return r;
}

KVT_API int kvt_pager_close(struct kvt_pager *p)
{
	if (!p)
		return 0;
	/* A batch still held would be released into freed memory. */
	pthread_mutex_lock(&p->lock);
	for (uint32_t i = 0; i < p->nseqs; i++)
		if (p->seqs[i]->batches) {
			pthread_mutex_unlock(&p->lock);
			return -EBUSY;
		}
	pthread_mutex_unlock(&p->lock);
	pager_free(p);
	return 0;
}

KVT_API struct kvt_device *kvt_pager_device(const struct kvt_pager *p)
{
	return p ? p->dev : NULL;
}

KVT_API size_t kvt_pager_page_bytes(const struct kvt_pager *p)
{
	return p->page_bytes;
}

KVT_API void kvt_pager_config(const struct kvt_pager *p, struct kvt_config *out)
{
	/* kvt_pager_set changes parts of it while the pager runs. */
	struct kvt_pager *q = (struct kvt_pager *)p;
	pthread_mutex_lock(&q->lock);
	*out = p->cfg;
	pthread_mutex_unlock(&q->lock);
}

/* The bytes a tier can hold of a step's pages: its capacity less the
 * frames kept for pages on their way. Lock held. */
static uint64_t holds(const struct kvt_pager *p, int ti)
{
	uint64_t cap = p->t[ti].online;

	return (cap > p->stage[ti] ? cap - p->stage[ti] : 0) * p->page_bytes;
}

KVT_API uint64_t kvt_pager_step(struct kvt_pager *p)
{
	pthread_mutex_lock(&p->lock);
	if (p->step_pages) {
		/* What the step read beyond what the tiers above NVMe hold. */
		uint64_t read = p->step_pages * p->page_bytes;
		uint64_t held = holds(p, KVT_TIER_FAST) + holds(p, KVT_TIER_HOST);
		p->st.read_min_bytes += read > held ? read - held : 0;
		p->st.read_steps++;
		p->step_pages = 0;
	}
	uint64_t s = ++p->step;
	if (p->rec)
		trace_step(p);
	pthread_mutex_unlock(&p->lock);
	return s;
}

/* ---------------------------------------------------------------------
 * Sequences
 */

static struct seq *seq_get(struct kvt_pager *p, kvt_seq_t h, int *err)
{
	uint32_t slot = (uint32_t)(h & 0xffffff), gen = (uint32_t)(h >> 24) & 0xffffff;
	struct seq *s;

	if ((uint16_t)(h >> 48) != p->tag || slot >= p->nseqs) {
		*err = -EINVAL;
		return NULL;
	}
	s = p->seqs[slot];
	if (!s->open || s->gen != gen) {
		*err = -ESTALE;
		return NULL;
	}
	return s;
}

/* Recompute wants_scores after a tier's policy changed (lock held, or
 * before the pager runs). */
static void scores_update(struct kvt_pager *p)
{
	int w = 0;

	for (int ti = 0; ti < KVT_NTIERS; ti++)
		w |= p->t[ti].pol && p->t[ti].pol->on_score;
	__atomic_store_n(&p->wants_scores, w, __ATOMIC_RELAXED);
}

KVT_API int kvt_pager_wants_scores(const struct kvt_pager *p)
{
	return p ? __atomic_load_n(&p->wants_scores, __ATOMIC_RELAXED) : 0;
}

KVT_API int kvt_seq_score(struct kvt_pager *p, kvt_seq_t h, unsigned layer,
			  const float *mass, unsigned n)
{
	int r = 0;

	if (!p || (n && !mass))
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	struct seq *s = seq_get(p, h, &r);
	if (s && (layer >= p->cfg.n_layers || n > s->lt[layer].n))
		r = -EINVAL;
	uint64_t tnow = p->rec ? now_ns() : 0;
	for (unsigned i = 0; s && !r && i < n; i++) {
		uint32_t slot = s->lt[layer].pg[i];
		struct page *pg = &p->pages[slot];
		struct kvt_ref ref = ref_of(p, slot);

		ref.score = mass[i];
		TRACE(p, tnow, KVT_EV_SCORE, slot, pg->state == P_LOST ? -1 : pg->top, -1,
		      (uint32_t)p->page_bytes, 0, mass[i]);
		for (int ti = 0; ti < KVT_NTIERS; ti++) {
			struct tier *t = &p->t[ti];
			if (pg->frame[ti] != NO_FRAME && t->pol->on_score)
				t->pol->on_score(t->pst, &ref, meta_of(t, pg->frame[ti]));
		}
	}
	pthread_mutex_unlock(&p->lock);
	return r;
}

static kvt_seq_t seq_handle(const struct kvt_pager *p, uint32_t slot)
{
	return (uint64_t)p->tag << 48 | (uint64_t)(p->seqs[slot]->gen & 0xffffff) << 24 | slot;
}

static int seq_new(struct kvt_pager *p, uint32_t *slot)
{
	struct seq *s;
	uint32_t i = p->free_seq;

	if (i != NO_PAGE) {
		s = p->seqs[i];
		p->free_seq = s->next_free;
	} else {
		if (p->nseqs >= 0xffffff)
			return -EMFILE;
		struct seq **v = realloc(p->seqs, (p->nseqs + 1) * sizeof(*v));
		if (!v)
			return -ENOMEM;
		p->seqs = v;
		s = calloc(1, sizeof(*s));
		if (!s)
			return -ENOMEM;
		i = p->nseqs++;
		p->seqs[i] = s;
	}
	s->lt = calloc(p->cfg.n_layers, sizeof(*s->lt));
	if (!s->lt) {
		s->next_free = p->free_seq;
		p->free_seq = i;
		return -ENOMEM;
	}
	s->open = 1;
	s->parked = 0;
	s->batches = 0;
	p->open_seqs++;
	*slot = i;
	return 0;
}

static void seq_free(struct kvt_pager *p, uint32_t i)
{
	struct seq *s = p->seqs[i];
	for (unsigned l = 0; l < p->cfg.n_layers; l++) {
		struct layer_tab *lt = &s->lt[l];
		for (uint32_t k = 0; k < lt->n; k++)
			page_unref(p, lt->pg[k]);
		free(lt->pg);
	}
	free(s->lt);
	s->lt = NULL;
	s->open = 0;
	s->gen = (s->gen + 1) & 0xffffff;
	s->next_free = p->free_seq;
	p->free_seq = i;
	p->open_seqs--;
	p->events++;
	pthread_cond_signal(&p->work);
	if (p->t[KVT_TIER_FAST].waiters)
		pthread_cond_broadcast(&p->done);
}

static int lt_push(struct layer_tab *lt, uint32_t slot)
{
	if (lt->n == lt->cap) {
		uint32_t cap = lt->cap ? lt->cap * 2 : 16;
		uint32_t *v = realloc(lt->pg, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		lt->pg = v;
		lt->cap = cap;
	}
	lt->pg[lt->n++] = slot;
	return 0;
}

KVT_API int kvt_seq_open(struct kvt_pager *p, kvt_seq_t *out)
{
	uint32_t slot;
	int r;

	if (!p || !out)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	r = seq_new(p, &slot);
	if (!r)
		*out = seq_handle(p, slot);
	pthread_mutex_unlock(&p->lock);
	return r;
}

KVT_API int kvt_seq_close(struct kvt_pager *p, kvt_seq_t h)
{
	int r = 0;
	pthread_mutex_lock(&p->lock);
	struct seq *s = seq_get(p, h, &r);
	if (s && (s->batches || s->busy))
		r = -EBUSY;
	else if (s)
		seq_free(p, (uint32_t)(h & 0xffffff));
	CHECK_INVARIANTS(p);
	pthread_mutex_unlock(&p->lock);
	return r;
}

/* A new tail page for layer tab lt (lock held). */
static int new_tail(struct kvt_pager *p, uint32_t seq, uint32_t layer,
		    struct layer_tab *lt)
{
	uint32_t s, f;
	int r;

	f = alloc_tail_frame(p);
	if (f == NO_FRAME)
		return -ENOSPC;
	s = page_new(p);
	if (s == NO_PAGE) {
		frame_free(&p->t[KVT_TIER_FAST], f);
		return -ENOSPC;
	}
	struct page *pg = &p->pages[s];
	pg->seq = seq;
	pg->layer = layer;
	pg->index = lt->n;
	/* Before lt_push: if it fails, the FREE below pairs with this NEW. */
	TRACE(p, 0, KVT_EV_NEW, s, -1, KVT_TIER_FAST, (uint32_t)p->page_bytes, 0, 0.f);
	r = lt_push(lt, s);
	if (r) {
		frame_free(&p->t[KVT_TIER_FAST], f);
		p->pages[s].refs = 1;
		page_unref(p, s);
		return r;
	}
	pg->refs = 1;
	pg->pins = 1;
	pg->flags = PF_TAILPIN;
	place(p, s, KVT_TIER_FAST, f);
	set_top(pg);
	return 0;
}

/* Append ntok tokens from k and v, which are device memory (src_dev) or
 * host memory. */
static int append(struct kvt_pager *p, kvt_seq_t h, unsigned layer, const void *k,
		  const void *v, unsigned ntok, int src_dev)
{
	const uint8_t *kb = k, *vb = v;
	int r = 0;

	if (!p || (ntok && (!k || !v)))
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	struct seq *s = seq_get(p, h, &r);
	if (!s)
		goto out;
	if (layer >= p->cfg.n_layers) {
		r = -EINVAL;
		goto out;
	}
	if (s->parked) {
		r = -EBUSY;
		goto out;
	}
	/* The lock is dropped below: keep park and close off meanwhile. */
	s->busy++;
	while (ntok) {
		struct layer_tab *lt = &s->lt[layer];
		struct page *pg = lt->n ? &p->pages[lt->pg[lt->n - 1]] : NULL;
		if (!pg || (pg->flags & PF_SEALED)) {
			r = new_tail(p, (uint32_t)(h & 0xffffff), layer, lt);
			if (r)
				break;
			/* The lock may have been dropped: the table may have moved. */
			pg = &p->pages[lt->pg[lt->n - 1]];
		}
		uint32_t slot = lt->pg[lt->n - 1];
		/* The tail changes: copies below it are stale now. */
		for (int ti = KVT_TIER_HOST; ti < KVT_NTIERS; ti++)
			if (pg->frame[ti] != NO_FRAME) {
				unplace(p, slot, ti, 0, 0);
				TRACE(p, 0, KVT_EV_DROP, slot, ti, pg->top, 0, 0, 0.f);
			}
		unsigned n = p->cfg.page_tokens - pg->ntok;
		if (n > ntok)
			n = ntok;
		uint8_t *dst = frame_ptr(&p->t[KVT_TIER_FAST], pg->frame[KVT_TIER_FAST]);
		uint64_t off = pg->ntok * p->tok_bytes, len = n * p->tok_bytes;
		/* The tail is pinned: its frame cannot move while we copy. */
		pthread_mutex_unlock(&p->lock);
		if (p->dev->ops->host_visible) {
			memcpy(dst + off, kb, len);
			memcpy(dst + p->half + off, vb, len);
		} else {
			int dir = src_dev ? KVT_D2D : KVT_H2D;
			r = kvt_dev_copy(p->dev, dst + off, kb, len, dir);
			if (!r)
				r = kvt_dev_copy(p->dev, dst + p->half + off, vb, len, dir);
		}
		pthread_mutex_lock(&p->lock);
		if (r)
			break;
		pg = &p->pages[slot];
		pg->ntok += n;
		lt->ntok += n;
		kb += len;
		vb += len;
		ntok -= n;
		if (pg->ntok == p->cfg.page_tokens) {
			pg->flags |= PF_SEALED;
			TRACE(p, 0, KVT_EV_SEAL, slot, pg->top, -1, 0, 0, 0.f);
			if (pg->flags & PF_TAILPIN) {
				pg->flags &= ~PF_TAILPIN;
				unpin(p, slot);
			}
		}
	}
	s->busy--;
out:
	CHECK_INVARIANTS(p);
	pthread_mutex_unlock(&p->lock);
	return r;
}

KVT_API int kvt_seq_append(struct kvt_pager *p, kvt_seq_t h, unsigned layer,
			   const void *k, const void *v, unsigned ntok)
{
	return append(p, h, layer, k, v, ntok, 0);
}

KVT_API int kvt_seq_append_dev(struct kvt_pager *p, kvt_seq_t h, unsigned layer,
			       const void *k, const void *v, unsigned ntok)
{
	return append(p, h, layer, k, v, ntok, 1);
}

/* Tokens (pages = 0) or pages (pages = 1) in a layer of the sequence. */
static int seq_count(struct kvt_pager *p, kvt_seq_t h, unsigned layer, int pages)
{
	int r = 0;
	pthread_mutex_lock(&p->lock);
	struct seq *s = seq_get(p, h, &r);
	if (s && layer >= p->cfg.n_layers)
		r = -EINVAL;
	else if (s)
		r = (int)(pages ? s->lt[layer].n : s->lt[layer].ntok);
	pthread_mutex_unlock(&p->lock);
	return r;
}

KVT_API int kvt_seq_tokens(struct kvt_pager *p, kvt_seq_t h, unsigned layer)
{
	return seq_count(p, h, layer, 0);
}

KVT_API int kvt_seq_pages(struct kvt_pager *p, kvt_seq_t h, unsigned layer)
{
	return seq_count(p, h, layer, 1);
}

/* ---------------------------------------------------------------------
 * Acquire
 */

/* The layer table of (h, layer) when every index in pages[0..*n) is in it
 * (pages == NULL: all of them; *n is set). NULL with *err set otherwise.
 * Lock held. */
static struct layer_tab *layer_pages(struct kvt_pager *p, kvt_seq_t h, unsigned layer,
				     const uint32_t *pages, unsigned *n, struct seq **sp, int *err)
{
	struct seq *s = seq_get(p, h, err);
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

/* Pin a page that is readable at `target` (or above) and fill e. */
static int try_pin(struct kvt_pager *p, struct entry *e, int target)
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
	if (pf_unset(p, pg))
		p->st.prefetch_hit++;
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
 * 1.4 times the least a step must read; 1.2 to 1.4 every time with readers
 * that let the pager run ahead). So a sequence's open batches have no more
 * asked for and not handed out, together, than the stage (the frames the
 * tier keeps for pages on their way), and ask for more in runs of what one
 * read carries (p->extent pages), or of the whole window where that is
 * less, so that the reads still coalesce. Prefetch leaves the pages a
 * batch waits for to it (pop_prefetch()). */
static int ask(struct kvt_pager *p, struct kvt_batch *b)
{
	uint32_t batches = p->seqs[b->seq]->batches, st = p->stage[p->target];
	int queued = 0;

	b->win = st / (batches ? batches : 1);
	if (!b->win)
		b->win = 1;
	b->low = b->win - (p->extent < b->win ? p->extent : b->win);
	if (b->lead > b->low)
		return 0;
	for (; b->nheld && b->lead < b->win; b->ask++) {
		struct entry *e = &b->e[b->ask];
		struct page *pg = &p->pages[e->slot];

		if (!e->held)
			continue;
		e->held = 0;
		e->asked = 1;
		b->nheld--;
		b->lead++;
		if (pg->state == P_READY) {
			queue_demand(p, e->slot);
			queued = 1;
		}
	}
	return queued;
}

static int acquire(struct kvt_pager *p, kvt_seq_t h, unsigned layer, const uint32_t *pages,
		   unsigned n, int target, int ahead, struct kvt_batch **out)
{
	struct kvt_batch *b = NULL;
	int r = 0;

	if (!p || !out)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
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
		count_lookup(p, pg);
		/* ACCESS: from = where count_lookup found it (a hit there),
		 * to = where the batch reads it. */
		int found = pg->state == P_LOST ? -1 : pg->top;
		if (try_pin(p, e, target)) {
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
		if ((pg->flags & (PF_PFMOVE | PF_QPREF))) {
			p->st.prefetch_late++;
			pg->flags &= ~PF_PFMOVE;
		}
		if (target == KVT_TIER_FAST && p->target != KVT_TIER_FAST)
			pg->flags |= PF_UPFAST;
		pg->want++;
		e->held = 1;
		b->nheld++;
		b->pend[b->npend++] = i;
	}
	s->batches++;
	if (ask(p, b))
		queued = 2;
	/* Layer-ahead prefetch: the same pages of the next layers, past the
	 * last layer those of the first (the next step's). No more layers
	 * than the tier batches read from holds: deeper, the prefetched pages
	 * were evicted before their layer came. At the limit this layer's
	 * pinned pages leave less room, and a prefetch that finds no frame is
	 * dropped (docs/architecture.md has the measurements). */
	unsigned depth = p->cfg.prefetch_depth;
	uint64_t fits = lt->n ? p->t[p->target].online / lt->n : depth;

	if (depth > fits)
		depth = (unsigned)fits;
	for (unsigned d = 1; ahead && d <= depth && d < p->cfg.n_layers; d++) {
		struct layer_tab *nl = &s->lt[(layer + d) % p->cfg.n_layers];
		for (unsigned i = 0; i < n; i++) {
			uint32_t idx = pages ? pages[i] : i;
			if (idx < nl->n) {
				queue_prefetch(p, nl->pg[idx]);
				queued |= 1;
			}
		}
	}
	if (queued & 2)
		wake_migrate(p);
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
	return acquire(p, s, layer, pages, n, p ? p->target : 0, 1, out);
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
		if (try_pin(p, e, b->target)) {
			b->nheld -= e->held;
			e->held = 0;
			pg->want--;
			b->ready[b->nready++] = i;
			moved++;
			continue;
		}
		if (pg->state == P_LOST) {
			b->nheld -= e->held;
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
			queue_demand(p, e->slot);
			wake_migrate(p);
		}
		b->pend[k++] = i;
	}
	b->npend = k;
	return moved;
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
			unpin(p, e->slot);
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
	int more = b->nheld && b->lead <= b->low;
	if (b->rpos < b->nready && ((nc && (nc >= 32 || b->npend)) || more)) {
		/* Hand consumed pages back now and then, so a large batch does
		 * not hold the tier for its whole run; at once while pages are
		 * still on their way: they come through the frames these hold.
		 * Ask for more once a run's worth of those asked for are out. */
		pthread_mutex_lock(&p->lock);
		unpin_consumed(p, b);
		if (more && ask(p, b))
			wake_migrate(p);
		pthread_mutex_unlock(&p->lock);
	}
	if (b->rpos == b->nready) {
		if (!b->npend)
			return 0;
		uint64_t t0 = now_ns(), ev = 0, quiet_since = 0;
		int give_up = 0, tick = 0;
		pthread_mutex_lock(&p->lock);
		unpin_consumed(p, b);
		if (ask(p, b))
			wake_migrate(p);
		ev = p->events;
		while (!collect(p, b, give_up, tick)) {
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
	b->lead -= e->asked;
	e->asked = 0;
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
		wake_migrate(b->p);
	pthread_mutex_unlock(&b->p->lock);
}

KVT_API void kvt_batch_release(struct kvt_batch *b)
{
	if (!b)
		return;
	struct kvt_pager *p = b->p;
	pthread_mutex_lock(&p->lock);
	for (uint32_t j = b->unpinned; j < b->nready; j++) {
		struct entry *e = &b->e[b->ready[j]];
		if (e->pinned)
			unpin(p, e->slot);
	}
	for (uint32_t j = 0; j < b->npend; j++)
		p->pages[b->e[b->pend[j]].slot].want--;
	p->seqs[b->seq]->batches--;
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
	for (unsigned i = 0; i < n; i++)
		queue_prefetch(p, lt->pg[pages ? pages[i] : i]);
	pthread_cond_signal(&p->work);
out:
	pthread_mutex_unlock(&p->lock);
	return r;
}

/* ---------------------------------------------------------------------
 * Fork, park, resume, drain
 */

KVT_API int kvt_seq_fork(struct kvt_pager *p, kvt_seq_t h, unsigned ntok, kvt_seq_t *out)
{
	uint32_t cslot;
	unsigned pt;
	int r = 0;

	if (!p || !out)
		return -EINVAL;
	pt = p->cfg.page_tokens;
	pthread_mutex_lock(&p->lock);
	struct seq *s = seq_get(p, h, &r);
	if (!s)
		goto unlock;
	for (unsigned l = 0; l < p->cfg.n_layers; l++)
		if (ntok > s->lt[l].ntok) {
			r = -EINVAL;
			goto unlock;
		}
	r = seq_new(p, &cslot);
	if (r)
		goto unlock;
	s = p->seqs[(uint32_t)(h & 0xffffff)];
	struct seq *c = p->seqs[cslot];
	for (unsigned l = 0; l < p->cfg.n_layers && !r; l++) {
		for (unsigned i = 0; i < ntok / pt; i++) {
			uint32_t slot = s->lt[l].pg[i];
			r = lt_push(&c->lt[l], slot);
			if (r)
				break;
			p->pages[slot].refs++;
		}
		c->lt[l].ntok = (ntok / pt) * pt;
	}
	kvt_seq_t child = seq_handle(p, cslot);
	pthread_mutex_unlock(&p->lock);

	/* The partial page at the boundary is copied into the child's tail. */
	for (unsigned l = 0; l < p->cfg.n_layers && !r && ntok % pt; l++) {
		uint32_t idx = ntok / pt;
		struct kvt_batch *b;
		struct kvt_view v;
		r = acquire(p, h, l, &idx, 1, p->target, 0, &b);
		if (r)
			break;
		r = kvt_batch_next(b, &v);
		if (r == 1)
			r = append(p, child, l, v.k, v.v, ntok % pt, v.tier == KVT_TIER_FAST);
		else if (r == 0)
			r = -EIO;
		kvt_batch_release(b);
	}
	if (r) {
		kvt_seq_close(p, child);
		return r;
	}
	*out = child;
	return 0;
unlock:
	pthread_mutex_unlock(&p->lock);
	return r;
}

/* Every page of the sequence as (slot, gen) references (lock held). */
static int seq_refs(struct kvt_pager *p, struct seq *s, struct job *j)
{
	uint32_t n = 0;
	for (unsigned l = 0; l < p->cfg.n_layers; l++)
		n += s->lt[l].n;
	j->pages = malloc((n ? n : 1) * sizeof(*j->pages));
	if (!j->pages)
		return -ENOMEM;
	j->n = 0;
	for (unsigned l = 0; l < p->cfg.n_layers; l++)
		for (uint32_t i = 0; i < s->lt[l].n; i++) {
			uint32_t slot = s->lt[l].pg[i];
			j->pages[j->n++] = (struct pref){ slot, p->pages[slot].gen };
		}
	return 0;
}

KVT_API int kvt_seq_park(struct kvt_pager *p, kvt_seq_t h)
{
	struct job j = { 0 };
	int r = 0;

	pthread_mutex_lock(&p->lock);
	struct seq *s = seq_get(p, h, &r);
	if (!s || s->parked)
		goto out;
	if (s->batches || s->busy) {
		r = -EBUSY;
		goto out;
	}
	s->parked = 1;
	s->busy++;
	for (unsigned l = 0; l < p->cfg.n_layers; l++) {
		struct layer_tab *lt = &s->lt[l];
		if (lt->n) {
			uint32_t slot = lt->pg[lt->n - 1];
			if (p->pages[slot].flags & PF_TAILPIN) {
				p->pages[slot].flags &= ~PF_TAILPIN;
				unpin(p, slot);
			}
		}
	}
	r = seq_refs(p, s, &j);
	if (!r) {
		j.lo = 0;
		j.hi = p->last;
		r = run_job_sync(p, &j);
		free(j.pages);
	}
	s->busy--;
	/* Shared pages pinned by another sequence's batch stay up: fine. */
	if (r == -EBUSY)
		r = 0;
out:
	pthread_mutex_unlock(&p->lock);
	return r;
}

KVT_API int kvt_seq_resume(struct kvt_pager *p, kvt_seq_t h)
{
	int r = 0;

	pthread_mutex_lock(&p->lock);
	struct seq *s = seq_get(p, h, &r);
	if (s && s->busy)
		r = -EBUSY;
	if (!s || !s->parked || r) {
		pthread_mutex_unlock(&p->lock);
		return r;
	}
	/* busy keeps close, park and another resume off while the lock is
	 * dropped below. */
	s->busy++;
	pthread_mutex_unlock(&p->lock);

	/* Tails first, synchronously, and pinned again. */
	for (unsigned l = 0; l < p->cfg.n_layers && !r; l++) {
		pthread_mutex_lock(&p->lock);
		struct layer_tab *lt = &s->lt[l];
		uint32_t idx = lt->n ? lt->n - 1 : 0;
		int partial = lt->n && !(p->pages[lt->pg[idx]].flags & PF_SEALED);
		pthread_mutex_unlock(&p->lock);
		if (!partial)
			continue;
		struct kvt_batch *b;
		struct kvt_view v;
		r = acquire(p, h, l, &idx, 1, KVT_TIER_FAST, 0, &b);
		if (r)
			break;
		r = kvt_batch_next(b, &v);
		if (r == 1) {
			pthread_mutex_lock(&p->lock);
			struct page *pg = &p->pages[b->e[0].slot];
			if (!(pg->flags & PF_TAILPIN)) {
				pg->pins++;
				pg->flags |= PF_TAILPIN;
			}
			pthread_mutex_unlock(&p->lock);
			r = 0;
		} else if (r == 0) {
			r = -EIO;
		}
		kvt_batch_release(b);
	}
	pthread_mutex_lock(&p->lock);
	s->busy--;
	if (r) {
		pthread_mutex_unlock(&p->lock);
		return r;
	}
	s->parked = 0;
	for (unsigned l = 0; l < p->cfg.n_layers; l++)
		for (uint32_t i = 0; i < s->lt[l].n; i++)
			queue_prefetch(p, s->lt[l].pg[i]);
	pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

KVT_API int kvt_pager_drain(struct kvt_pager *p, int tier)
{
	struct job j = { .lo = tier, .hi = tier + 1 };
	int r;

	if (!p || tier < 0 || tier >= p->last)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	struct tier *t = &p->t[tier];
	j.pages = malloc(((size_t)t->nframes + 1) * sizeof(*j.pages));
	if (!j.pages) {
		pthread_mutex_unlock(&p->lock);
		return -ENOMEM;
	}
	for (uint32_t f = 0; f < t->nframes; f++)
		if (t->owner[f] != NO_PAGE)
			j.pages[j.n++] = (struct pref){ t->owner[f], p->pages[t->owner[f]].gen };
	r = run_job_sync(p, &j);
	free(j.pages);
	pthread_mutex_unlock(&p->lock);
	return r;
}

/* ---------------------------------------------------------------------
 * Live changes
 */

/* "tier.<name>.<field>": the tier and the field, or -1. */
static int tier_key(const char *key, const char **field)
{
	if (strncmp(key, "tier.", 5))
		return -1;
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		const char *n = kvt_tier_name(ti);
		size_t l = strlen(n);
		if (!strncmp(key + 5, n, l) && key[5 + l] == '.') {
			*field = key + 6 + l;
			return ti;
		}
	}
	return -1;
}

struct by_step {
	uint64_t step;
	uint32_t frame;
};

static int by_step_cmp(const void *a, const void *b)
{
	const struct by_step *x = a, *y = b;
	if (x->step != y->step)
		return x->step < y->step ? -1 : 1;
	return x->frame < y->frame ? -1 : x->frame > y->frame;
}

/* Replace the policy of tier ti by spec. The new state and its metadata
 * area are built first, without the lock (the tier's frame count never
 * changes), so a failure changes nothing. Under the lock the new policy
 * is told about every page resident in the tier, least recently used
 * first, and takes over; frames reserved for a move in flight are not
 * resident yet (place() tells whichever policy is in force when the move
 * lands). The old state is destroyed after the lock is dropped: nothing
 * can reach it any more. Pages neither move nor change state. */
static int swap_policy(struct kvt_pager *p, int ti, const char *key, const char *spec,
		       char *err, size_t errlen)
{
	struct tier *t = &p->t[ti];
	char why[256];
	const struct kvt_policy_ops *pol = kvt_policy_load(spec, why, sizeof(why)), *old_pol;
	struct by_step *order;
	uint8_t *meta, *old_meta;
	void *pst = NULL, *old_pst;
	uint32_t n = 0;
	int r;

	if (!pol)
		return kvt_errf(err, errlen, -EINVAL, "%s = %s: %s", key, spec, why);
	if (pol->flags & KVT_POLICY_OFFLINE)
		return kvt_errf(err, errlen, -EINVAL, "%s = %s: needs future references; "
				"it runs only in kvt-sim", key, spec);
	meta = calloc((size_t)t->nframes + 1, pol->meta_size ? pol->meta_size : 1);
	order = malloc(((size_t)t->nframes + 1) * sizeof(*order));
	if (!meta || !order) {
		free(meta);
		free(order);
		return kvt_errf(err, errlen, -ENOMEM, "%s = %s: out of memory", key, spec);
	}
	r = pol->init(&pst, kvt_policy_params(spec), t->nframes);
	if (r) {
		free(meta);
		free(order);
		if (r != -ENOMEM)
			r = -EINVAL;
		return kvt_errf(err, errlen, r, "%s = %s: %s", key, spec, strerror(-r));
	}

	pthread_mutex_lock(&p->lock);
	for (uint32_t f = 0; f < t->nframes; f++) {
		uint32_t s = t->owner[f];
		if (s != NO_PAGE && p->pages[s].frame[ti] == f)
			order[n++] = (struct by_step){ p->pages[s].last_step, f };
	}
	qsort(order, n, sizeof(*order), by_step_cmp);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t f = order[i].frame;
		struct kvt_ref ref = ref_of(p, t->owner[f]);
		pol->on_insert(pst, &ref, meta + (size_t)f * pol->meta_size);
	}
	old_pol = t->pol;
	old_pst = t->pst;
	old_meta = t->meta;
	t->pol = pol;
	t->pst = pst;
	t->meta = meta;
	scores_update(p);
	snprintf(p->cfg.tier[ti].policy, sizeof(p->cfg.tier[ti].policy), "%s", spec);
	pthread_cond_signal(&p->work);	/* the new ranking may free frames */
	pthread_mutex_unlock(&p->lock);

	old_pol->destroy(old_pst);
	free(old_meta);
	free(order);
	return 0;
}

/* Set the live capacity of tier ti to n frames (lock held; n checked by
 * resize_check). A shrink takes free frames offline at once and leaves
 * the rest to the migration thread (reclaim pays the debt before anything
 * else); a grow pays off what is left of a shrink, then brings offline
 * frames back. Watermarks follow the capacity. */
static void tier_resize(struct kvt_pager *p, int ti, uint32_t n)
{
	struct tier *t = &p->t[ti];
	uint32_t nw = (t->nframes + 63) / 64, got;

	if (n < t->online) {
		t->online = n;
		t->st.shrinks++;
		while (debt(t) && t->nfree)
			frame_offline(t, frame_alloc_run(t, 1, &got));
	} else if (n > t->online) {
		t->online = n;
		t->st.grows++;
		for (uint32_t w = 0; w < nw && t->online + t->noff > t->nframes; w++)
			while (t->offmap[w] && t->online + t->noff > t->nframes)
				frame_online(t, w * 64 + (uint32_t)__builtin_ctzll(t->offmap[w]));
	}
	tier_marks(p, ti);
	t->retry_ns = 0;
	pthread_cond_signal(&p->work);
	/* Frames came back: allocations and batches waiting may go on. */
	pthread_cond_broadcast(&p->done);
	p->events++;
}

/* The capacity tier ti should have: its configured bytes, and for the
 * host tier no more than the memory-pressure limit (lock held). */
static void tier_apply(struct kvt_pager *p, int ti)
{
	uint64_t n = p->cfg.tier[ti].bytes / p->page_bytes;

	if (ti == KVT_TIER_HOST && n > p->psi_frames)
		n = p->psi_frames;
	if (n > p->t[ti].nframes)
		n = p->t[ti].nframes;
	tier_resize(p, ti, (uint32_t)n);
}

/* Whether tier ti can be given n frames (lock held). Refused: more than
 * were reserved at open (-ERANGE), fewer than 2 (-EINVAL), not more than
 * the pages pinned or in flight in it (-EBUSY: they cannot leave), or
 * fewer than the pages that have no copy above it need with the tiers
 * below (-ENOSPC: they would have nowhere to go). */
static int resize_check(struct kvt_pager *p, int ti, uint64_t n, const char *key,
			const char *value, char *err, size_t errlen)
{
	struct tier *t = &p->t[ti];
	uint64_t room = n, need = 0, busy = 0;

	if (n > t->nframes)
		return kvt_errf(err, errlen, -ERANGE,
				"%s = %s: %llu frames, above the %u reserved at open "
				"(tier.%s.max_bytes = %llu bytes)", key, value,
				(unsigned long long)n, t->nframes, kvt_tier_name(ti),
				(unsigned long long)t->nframes * t->stride);
	if (n < 2)
		return kvt_errf(err, errlen, -EINVAL, "%s = %s: holds %llu page%s: must hold at "
				"least 2", key, value, (unsigned long long)n, n == 1 ? "" : "s");
	for (uint32_t f = 0; f < t->nframes; f++) {
		uint32_t s = t->owner[f];
		if (s != NO_PAGE && (p->pages[s].pins || p->pages[s].state == P_MOVING))
			busy++;
	}
	if (n <= busy)
		return kvt_errf(err, errlen, -EBUSY, "%s = %s: %llu frames, but %llu pages of the "
				"%s tier are pinned (sequence tails, batches) or moving: it needs "
				"more than that", key, value, (unsigned long long)n,
				(unsigned long long)busy, kvt_tier_name(ti));
	for (int b = ti + 1; b <= p->last; b++)
		room += p->t[b].online;
	for (uint32_t s = 0; s < p->npages; s++) {
		const struct page *pg = &p->pages[s];
		need += (pg->state == P_READY || pg->state == P_MOVING) && pg->top >= ti;
	}
	if (need > room)
		return kvt_errf(err, errlen, -ENOSPC, "%s = %s: %llu pages have no copy above the "
				"%s tier, and at %llu frames it and the tiers below hold %llu: "
				"they would have nowhere to go",
				key, value, (unsigned long long)need, kvt_tier_name(ti),
				(unsigned long long)n, (unsigned long long)room);
	return 0;
}

int kvt_host_limit(struct kvt_pager *p, uint32_t n)
{
	uint64_t want = p->cfg.tier[KVT_TIER_HOST].bytes / p->page_bytes;

	if (n < want && n < p->t[KVT_TIER_HOST].online) {
		char v[24];
		snprintf(v, sizeof(v), "%u", n);
		int r = resize_check(p, KVT_TIER_HOST, n, "psi", v, NULL, 0);
		if (r)
			return r;
	}
	p->psi_frames = n;
	tier_apply(p, KVT_TIER_HOST);
	return 0;
}

void kvt_pager_attach(struct kvt_pager *p, enum kvt_service kind, void (*stop)(void *arg),
		      void *arg, int port)
{
	p->svc[kind].stop = stop;
	p->svc[kind].arg = arg;
	if (kind == KVT_SVC_HTTP)
		p->http_port = port;
}

void kvt_pager_pressure(struct kvt_pager *p, int r, double avg10, int triggered)
{
	pthread_mutex_lock(&p->lock);
	p->psi_ok = !r;
	p->psi_avg10 = r ? 0 : avg10;
	uint64_t pb = p->page_bytes;
	uint64_t top = p->cfg.tier[KVT_TIER_HOST].bytes / pb;
	uint64_t floor = p->cfg.host_floor / pb;
	double th = p->cfg.psi_threshold;
	if (floor < 2)
		floor = 2;
	if (top > p->t[KVT_TIER_HOST].nframes)
		top = p->t[KVT_TIER_HOST].nframes;
	uint64_t step = top > floor ? (top - floor + 7) / 8 : 1;
	uint64_t cur = p->psi_frames < top ? p->psi_frames : top;
	if (!r && th > 0 && (avg10 >= th || triggered) && cur > floor) {
		uint64_t n = cur > floor + step ? cur - step : floor;
		/* Not below what the pinned pages and the pages with nowhere
		 * else to go need: try smaller steps down to one frame. */
		while (n < cur && kvt_host_limit(p, (uint32_t)n))
			n += (cur - n + 1) / 2;
		if (n < cur)
			p->psi_shrinks++;
	} else if ((r || th <= 0 || avg10 < th / 2) && p->psi_frames != UINT32_MAX) {
		uint64_t n = cur + step;
		if (!kvt_host_limit(p, n >= top ? UINT32_MAX : (uint32_t)n))
			p->psi_grows++;
	}
	pthread_mutex_unlock(&p->lock);
}

/* Change one configuration key while the pager runs. The value is parsed
 * and range-checked by kvt_config_set on a copy of the configuration;
 * what can change live is applied, the rest refused with -EPERM. All or
 * nothing: on any error nothing changes. */
KVT_API int kvt_pager_set(struct kvt_pager *p, const char *key, const char *value,
			  char *err, size_t errlen)
{
	struct kvt_config c;
	const char *field = NULL;
	int ti, r;

	if (!p)
		return kvt_errf(err, errlen, -EINVAL, "no pager given");
	pthread_mutex_lock(&p->lock);
	c = p->cfg;
	r = kvt_config_set(&c, key, value, err, errlen);
	if (r)
		goto out;
	ti = tier_key(key, &field);
	if (!strcmp(key, "access.prefetch_depth")) {
		p->cfg.prefetch_depth = c.prefetch_depth;
	} else if (!strcmp(key, "tier.host.floor") ||
		   (!strcmp(key, "psi.threshold") && p->svc[KVT_SVC_PSI].stop)) {
		/* The watcher reads both at its next reading. */
		p->cfg.host_floor = c.host_floor;
		p->cfg.psi_threshold = c.psi_threshold;
	} else if (!strcmp(key, "psi.threshold")) {
		r = kvt_errf(err, errlen, -EPERM, "%s: the memory-pressure watcher was not started "
			     "at open (psi.threshold was 0 or psi.path empty): restart with it in "
			     "the config", key);
	} else if (ti >= 0 && !strcmp(field, "policy")) {
		pthread_mutex_unlock(&p->lock);
		return swap_policy(p, ti, key, c.tier[ti].policy, err, errlen);
	} else if (ti >= 0 && (!strcmp(field, "wm_min") || !strcmp(field, "wm_low") ||
			       !strcmp(field, "wm_high"))) {
		const struct kvt_tier_config *tc = &c.tier[ti];
		struct tier *t = &p->t[ti];
		if (tc->wm_min > tc->wm_low || tc->wm_low > tc->wm_high) {
			r = kvt_errf(err, errlen, -EINVAL,
				     "%s = %s: wm_min = %u, wm_low = %u, wm_high = %u: must be "
				     "wm_min <= wm_low <= wm_high", key, value,
				     tc->wm_min, tc->wm_low, tc->wm_high);
			goto out;
		}
		p->cfg.tier[ti].wm_min = tc->wm_min;
		p->cfg.tier[ti].wm_low = tc->wm_low;
		p->cfg.tier[ti].wm_high = tc->wm_high;
		tier_marks(p, ti);
		t->retry_ns = 0;
		/* Reclaim to the new marks; an allocation waiting at the old
		 * min may now go ahead. */
		pthread_cond_signal(&p->work);
		pthread_cond_broadcast(&p->done);
	} else if (ti >= 0 && ti != KVT_TIER_NVME && !strcmp(field, "bytes")) {
		r = resize_check(p, ti, c.tier[ti].bytes / p->page_bytes, key, value, err, errlen);
		if (r)
			goto out;
		p->cfg.tier[ti].bytes = c.tier[ti].bytes;
		tier_apply(p, ti);
	} else {
		/* access.host_in_place among them: batches, queued moves and
		 * prefetched pages are bound to the tier acquire hands back. */
		r = kvt_errf(err, errlen, -EPERM,
			     "%s cannot change while the pager runs (restart with it in the config)",
			     key);
	}
out:
	pthread_mutex_unlock(&p->lock);
	return r;
}

/* ---------------------------------------------------------------------
 * Stats and the invariant check
 */

KVT_API int kvt_pager_stats(struct kvt_pager *p, struct kvt_stats *st)
{
	struct kvt_nvme_info ni;

	if (!p || !st)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	*st = p->st;
	st->step = p->step;
	st->seqs = p->open_seqs;
	st->pages = p->live_pages;
	st->nvme_paused = now_ns() < p->nvme_paused_until;
	st->trace_on = p->rec != NULL;
	if (p->rec)
		kvt_recorder_counts(p->rec, &st->trace_records, &st->trace_dropped);
	else {
		st->trace_records = p->trace_records;
		st->trace_dropped = p->trace_dropped;
	}
	st->metrics_http_port = p->http_port;
	st->host_releases = p->t[KVT_TIER_HOST].release;
	st->psi_watching = p->svc[KVT_SVC_PSI].stop != NULL;
	st->psi_ok = p->psi_ok;
	st->psi_some_avg10 = p->psi_avg10;
	st->psi_shrinks = p->psi_shrinks;
	st->psi_grows = p->psi_grows;
	st->host_limit_bytes = p->psi_frames == UINT32_MAX ? 0 : (uint64_t)p->psi_frames * p->page_bytes;
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		const struct tier *t = &p->t[ti];
		st->tier[ti] = t->st;
		st->tier[ti].capacity = t->online;
		st->tier[ti].online = t->nframes - t->noff;
		st->tier[ti].reserved = t->nframes;
		st->tier[ti].used = t->nframes - t->nfree - t->noff;
		st->tier[ti].stage = p->stage[ti];
	}
	/* The ring's own counters, as the migration thread last copied them
	 * (it owns the ring and runs it without the lock). */
	ni = p->nvme_info;
	/* Under the lock: kvt_pager_set may swap a tier's policy. */
	st->meta_bytes = (uint64_t)(p->npages + 1) * sizeof(struct page);
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		const struct tier *t = &p->t[ti];
		st->meta_bytes += ((uint64_t)t->nframes + 1) * (sizeof(uint32_t) + t->pol->meta_size) +
				  ((t->nframes + 63) / 64) * 2 * sizeof(uint64_t);
	}
	pthread_mutex_unlock(&p->lock);
	kvt_device_info(p->dev, &st->dev);
	st->fast_alloc_bytes = p->fast_bytes;
	st->host_hugepages = p->host.hugepages;
	st->host_mlocked = p->host.mlocked;
	st->host_numa_node = p->host.numa_node;
	st->host_overhead_bytes = p->host.mapped - p->host.bytes;
	snprintf(st->host_notes, sizeof(st->host_notes), "%s", p->host.notes);
	if (p->nvme) {
		st->nvme_direct = ni.direct;
		st->nvme_registered_files = ni.registered_files;
		st->nvme_registered_buffers = ni.registered_buffers;
		st->short_ios = ni.short_ios;
		st->nvme_ops = ni.ops;
		st->nvme_reqs = ni.reqs;
		st->nvme_busy_ns = ni.busy_ns;
		st->nvme_depth_ns = ni.depth_ns;
		snprintf(st->nvme_notes, sizeof(st->nvme_notes), "%s", ni.notes);
	}
	return 0;
}

/* ---------------------------------------------------------------------
 * Trace start and stop
 */

/* The configuration in force as INI text (malloc'd), or NULL. */
static char *config_text(const struct kvt_config *cfg, size_t *len)
{
	for (size_t cap = 16384; cap <= (1u << 24); cap *= 2) {
		char *buf = malloc(cap);
		if (!buf)
			return NULL;
		int n = kvt_config_print(cfg, buf, cap);
		if (n >= 0 && (size_t)n < cap) {
			*len = (size_t)n;
			return buf;
		}
		free(buf);
		if (n != -ENOSPC)
			return NULL;
	}
	return NULL;
}

KVT_API int kvt_pager_trace_start(struct kvt_pager *p, const char *path)
{
	struct kvt_trace_hdr hdr = { 0 };
	struct kvt_recorder *rec;
	struct kvt_config *cfg;
	struct timespec ts;
	char *text;
	size_t len = 0;
	int r;

	if (!p || !path || !*path)
		return -EINVAL;
	cfg = malloc(sizeof(*cfg));
	if (!cfg)
		return -ENOMEM;
	/* trace_mu: one start or stop at a time; p->rec changes only under
	 * both locks, so reading it under either is enough. */
	pthread_mutex_lock(&p->trace_mu);
	if (p->rec) {
		r = -EBUSY;
		goto out;
	}
	pthread_mutex_lock(&p->lock);
	*cfg = p->cfg;
	for (int ti = 0; ti < KVT_NTIERS; ti++) {
		hdr.frames[ti] = p->t[ti].nframes;
		snprintf(hdr.policy[ti], sizeof(hdr.policy[ti]), "%s", p->cfg.tier[ti].policy);
	}
	pthread_mutex_unlock(&p->lock);
	hdr.page_tokens = cfg->page_tokens;
	hdr.n_layers = cfg->n_layers;
	hdr.n_kv_heads = cfg->n_kv_heads;
	hdr.head_dim = cfg->head_dim;
	hdr.kv_bytes = cfg->dtype_bytes;
	hdr.page_bytes = (uint32_t)p->page_bytes;
	hdr.source = KVT_SRC_PAGER;
	clock_gettime(CLOCK_REALTIME, &ts);
	hdr.start_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	text = config_text(cfg, &len);
	if (!text) {
		r = -ENOMEM;
		goto out;
	}
	/* The file is created and its header written without the pager lock. */
	r = kvt_recorder_start(path, &hdr, text, len, 0, &rec);
	free(text);
	if (r)
		goto out;
	pthread_mutex_lock(&p->lock);
	p->rec = rec;
	p->rec_t0 = now_ns();
	p->trace_records = p->trace_dropped = 0;
	trace_step(p);		/* the step the trace starts at */
	pthread_mutex_unlock(&p->lock);
out:
	pthread_mutex_unlock(&p->trace_mu);
	free(cfg);
	return r;
}

KVT_API int kvt_pager_trace_stop(struct kvt_pager *p)
{
	struct kvt_recorder *rec;
	int r;

	if (!p)
		return -EINVAL;
	pthread_mutex_lock(&p->trace_mu);
	pthread_mutex_lock(&p->lock);
	rec = p->rec;
	if (rec) {
		kvt_recorder_counts(rec, &p->trace_records, &p->trace_dropped);
		p->rec = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	/* Nobody appends to rec any more: flush and close without the lock. */
	r = rec ? kvt_recorder_finish(rec) : -ENOENT;
	pthread_mutex_unlock(&p->trace_mu);
	return r;
}

#define BAD(...) do { snprintf(err, errlen, __VA_ARGS__); return -EUCLEAN; } while (0)

int kvt_pager_check(struct kvt_pager *p, char *err, size_t errlen)
{
	uint32_t live = 0, dups = 0, staged = 0, staged_pf = 0, pf_landed = 0;

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
