/* SPDX-License-Identifier: MIT */
/*
 * Pager internals, shared by the pager sources and the tests (which link the static
 * library). Not installed.
 *
 * Locking: one mutex per pager (p->lock) guards every field below except
 * where a comment says otherwise. The migration thread drops it around I/O
 * and device copies; the pages it moves are in state MOVING meanwhile, and
 * nobody else touches their frames.
 */
#ifndef KVT_PAGER_INTERNAL_H
#define KVT_PAGER_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include <kvt/pager.h>
#include "kernels/device.h"
#include "pager/hooks.h"
#include "pager/host.h"
#include "pager/nvme.h"
#include "pager/policy.h"
#include "pager/trace.h"

#define KVT_API __attribute__((visibility("default")))
#define NO_FRAME UINT32_MAX
#define NO_PAGE	 UINT32_MAX

enum page_state {
	P_FREE = 0,
	P_READY,		/* every copy it has is valid and still */
	P_MOVING,		/* a copy is being made; frames untouchable */
	P_LOST,			/* I/O error or checksum mismatch: never served */
};

enum page_flag {
	PF_SEALED	= 1 << 0,	/* full: never changes again */
	PF_TAILPIN	= 1 << 1,	/* holds the tail pin (one of pins) */
	PF_PREFETCHED	= 1 << 2,	/* brought up by prefetch, not yet used */
	PF_PFMOVE	= 1 << 3,	/* the move in flight is a prefetch */
	PF_QDEMAND	= 1 << 4,	/* in the demand queue */
	PF_QPREF	= 1 << 5,	/* in the prefetch queue */
	PF_DOOMED	= 1 << 6,	/* freed while MOVING: free when it lands */
	PF_UPFAST	= 1 << 7,	/* a batch needs it in the fast tier */
	PF_STAGED	= 1 << 8,	/* on its way into the landing tier: one of
					 * p->staged */
	PF_STAGEPF	= 1 << 9,	/* staged by a prefetch: one of p->staged_pf */
};

struct page {
	uint32_t gen;		/* bumped when the slot is freed */
	uint32_t refs;		/* sequences whose tables hold it */
	uint32_t pins;		/* batch pins + the tail pin */
	uint32_t want;		/* batches waiting for it: not a victim either */
	uint32_t ntok;		/* valid tokens */
	uint8_t	 state;		/* enum page_state */
	uint8_t	 top;		/* tier of the authoritative copy */
	uint16_t flags;		/* enum page_flag */
	int8_t	 err;		/* -errno of the last failed promotion, for waiters */
	uint32_t frame[KVT_NTIERS];	/* frame per tier, NO_FRAME when none */
	uint64_t csum;		/* XXH3 of the NVMe copy */
	uint64_t last_step;	/* step of the last counted access */
	uint32_t next_free;	/* free list link */
	uint32_t seq, layer, index;	/* who created it, for the policies */
	uint32_t home;		/* NVMe frame it was last given (a placement hint) */
	uint32_t pf_step;	/* step (mod 2^32) a prefetch landed it in */
};

/*
 * Live capacity: nframes frames are reserved at open (tier.X.max_bytes, or
 * bytes); `online` of them are in service. The others are offline: out of
 * the free map, never allocated, marked in offmap. A shrink takes free
 * frames offline at once; the rest of the shrink (nframes - online - noff
 * frames, the "debt") is paid by kvt_frame_free, which takes a frame offline
 * instead of freeing it while the debt lasts, and the migration thread
 * evicts pages until it is paid. A grow pays the debt off first, then
 * brings offline frames back. No page ever moves between frames of one
 * tier, so a pinned page stays where its views point.
 */
struct tier {
	int	 id;
	uint32_t nframes, nfree;
	uint32_t online;		/* frames in service: the live capacity */
	uint32_t noff;			/* frames offline now */
	uint64_t *offmap;		/* bit set = frame offline */
	uint8_t	 release;		/* host: offline frames' memory goes back
					 * to the kernel (nothing else pins it) */
	uint64_t stride;		/* bytes from one frame to the next */
	uint8_t	*base;			/* frame 0 (NULL for nvme: file offsets) */
	uint64_t *freemap;		/* bit set = frame free */
	uint32_t cursor;		/* next-fit allocation cursor */
	uint32_t *owner;		/* frame -> page slot, NO_PAGE when free */
	uint8_t	*meta;			/* nframes * pol->meta_size */
	const struct kvt_policy_ops *pol;
	void	*pst;
	uint32_t wm_min, wm_low, wm_high;	/* free frames */
	uint32_t waiters;		/* threads waiting in alloc for a frame */
	uint64_t retry_ns;		/* background reclaim failed: not before */
	struct kvt_tier_stats st;
};

struct layer_tab {
	uint32_t *pg;		/* page index -> page slot */
	uint32_t  n, cap;
	uint32_t  ntok;
};

struct seq {
	uint32_t gen;
	uint8_t	 open, parked;
	uint32_t batches;	/* unreleased batches */
	uint32_t busy;		/* appends, parks, resumes running: close waits */
	uint32_t next_free;
	struct layer_tab *lt;	/* [n_layers] */
};

/* Work queue of page references (slot, generation). */
struct pref {
	uint32_t slot, gen;
};
struct pqueue {
	struct pref *v;
	uint32_t head, n, cap;
};

/* Work for the migration thread that a caller waits for (park, drain). */
struct job {
	int	  lo, hi;	/* evict the pages out of tiers lo .. hi-1 */
	struct pref *pages;
	uint32_t  n;
	int	  done, res;
	struct job *next;
};

struct kvt_pager {
	pthread_mutex_t lock;
	pthread_cond_t	work;		/* the migration thread waits here */
	pthread_cond_t	done;		/* everybody else waits here */
	pthread_t	thread;
	int		thread_started;
	int		stop;

	struct kvt_config cfg;
	struct kvt_device *dev;
	int dev_log;		/* we set the device's log: unset it at close */
	uint16_t	tag;		/* in sequence handles */
	uint64_t	page_bytes;	/* payload of a page */
	uint64_t	half;		/* offset of V in a page */
	uint64_t	tok_bytes;	/* K (or V) bytes of one token */
	int		target;		/* tier acquire hands back: fast, or host in place */
	int		last;		/* lowest tier with frames */
	uint64_t	step;
	uint64_t	time;		/* counted accesses: the policies' clock */
	uint64_t	step_pages;	/* pages read in this step (each counted once) */
	uint32_t	stage[KVT_NTIERS];	/* frames kept for pages in flight into a tier */
	uint32_t	staged, staged_pf;	/* pages PF_STAGED (in flight up), of them PF_STAGEPF */
	uint32_t	pf_landed;	/* pages PF_PREFETCHED: landed by a prefetch, not read */
	uint32_t	asked;		/* open batches' pages asked for, not handed out
					 * (the sum of their lead; atomic: handing out
					 * takes no lock) */
	uint32_t	held;		/* open batches' pages not asked for yet (nheld) */
	uint32_t	pf_live;	/* pages PF_QPREF: queued for prefetch, still wanted */
	uint32_t	dups;		/* pages with a copy in both fast and host */
	int		wants_scores;	/* some tier's policy has on_score */

	struct tier	t[KVT_NTIERS];
	void		*fast_mem;	/* the device arena */
	size_t		fast_bytes;
	struct kvt_host_arena host;
	struct kvt_nvme *nvme;

	struct page	*pages;
	uint32_t	npages, free_page, live_pages;

	struct seq	**seqs;
	uint32_t	nseqs, free_seq, open_seqs;

	struct pqueue	demand, prefetch, pf_far;	/* pf_far: layers past the next */
	struct job	*jobs;
	uint64_t	events;		/* bumped when pins drop, pages free or moves land */
	uint64_t	err_ev;		/* events when a promotion last failed for want of frames */
	uint64_t	nvme_paused_until;	/* ns; demotion to NVMe paused */
	uint64_t	alloc_fail;	/* bumped when a waited-for frame cannot be had */
	uint64_t	frame_req;	/* bumped by each thread that starts waiting for one */
	uint32_t	moving;		/* pages in flight on the migration thread */
	uint32_t	move_batch;	/* pages per promotion batch */
	struct kvt_nvme_info nvme_info;	/* copied by the migration thread after I/O */
	uint32_t	psi_frames;	/* host tier limit under memory pressure (UINT32_MAX: none) */
	struct {			/* services beside the pager (kvt_pager_attach) */
		void	(*stop)(void *arg);
		void	*arg;
	} svc[KVT_NSVC];
	int		http_port;	/* the metrics endpoint's, 0 = none */
	double		psi_avg10;	/* the watcher's last reading */
	int		psi_ok;		/* the last reading worked */
	uint64_t	psi_shrinks, psi_grows;	/* limit changes it made */

	struct kvt_stats st;		/* counters not kept per tier */
	struct kvt_pager_error lasterr;	/* the last page lost (lasterr.c); under lock */

	/* Trace recording: rec is set and cleared under lock (so every
	 * record is appended under it); trace_mu serialises start and stop,
	 * which do their file I/O without the pager lock. */
	struct kvt_recorder *rec;
	uint64_t	rec_t0;		/* now_ns() when recording began */
	uint64_t	trace_records, trace_dropped;	/* of the last trace stopped */
	pthread_mutex_t trace_mu;

	/* migration thread scratch (owned by it), MAX_FLIGHT each */
	struct move	*moves;
	struct kvt_io	*ios;
	uint32_t	*order;
	int		 nowrite;	/* reclaim only drops: a promotion is feeding the ring */
	uint8_t		 feeding;	/* a promotion's reads run and refill() feeds them */
	uint8_t		 kicked;	/* the ring was kicked since refill() last looked */
	uint32_t	 extent;	/* NVMe frames placed together: io.max_io_bytes of pages */
};

#define MAX_MOVE	1024	/* pages per promotion batch, at most */
#define MAX_FLIGHT	4096	/* pages one promotion carries, its refills included */
#define MAX_VICTIMS	64	/* victims asked for at once */
#define RETRY_NS	10000000ull	/* back-off after a failed background reclaim */
#define NVME_PAUSE_NS	100000000ull	/* pause demotion to NVMe after ENOSPC/EIO */
#define ENOSPC_WAIT_NS	100000000ull	/* how long a batch waits for frames to unpin */
#define RETRY_WAIT_NS	5000000ull	/* a failed promotion is retried this often */

/* A batch (acquire.c) and its entries, one per page asked for. */
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
	uint64_t seen;		/* p->events when landed pages were last taken */
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

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* p->lock, taken by the decode threads as they acquire, hand out and
 * release pages: each holds it for microseconds, several at once. A
 * waiter asleep on the futex took tens of microseconds to wake on a VM
 * (more than the hold it waited for), so spin on it first, for a while
 * (a holder preempted on a busy machine: then sleep). */
#define LOCK_SPIN_NS	100000

static inline void kvt_lock(struct kvt_pager *p)
{
	uint64_t t0 = 0;

	for (unsigned i = 1; pthread_mutex_trylock(&p->lock); i++) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#elif defined(__aarch64__)
		__asm__ __volatile__("yield");
#endif
		if (i % 32 == 0) {
			uint64_t t = now_ns();

			if (!t0) {
				t0 = t;
			} else if (t - t0 > LOCK_SPIN_NS) {
				pthread_mutex_lock(&p->lock);
				return;
			}
		}
	}
}

#if defined(KVT_DEBUG)
#include <assert.h>
#define CHECK_INVARIANTS(p) do { char _e[256]; \
	if ((p)->npages <= 8192 && kvt_pager_check(p, _e, sizeof(_e))) { \
		fprintf(stderr, "kvt invariant: %s\n", _e); abort(); } } while (0)
#else
#define CHECK_INVARIANTS(p) do { } while (0)
#endif

/* table.c: frames, pages, trace records (lock held) */
int  kvt_pager_check(struct kvt_pager *p, char *err, size_t errlen);
uint32_t kvt_frame_alloc_run(struct tier *t, uint32_t want, uint32_t *got);
uint32_t kvt_frame_alloc(struct tier *t);
int  kvt_frame_take(struct tier *t, uint32_t f);
void kvt_frame_offline(struct tier *t, uint32_t f);
void kvt_frame_online(struct tier *t, uint32_t f);
void kvt_frame_free(struct tier *t, uint32_t f);
void kvt_trace_page(struct kvt_pager *p, uint64_t t, uint8_t ev, uint32_t slot, int from,
		    int to, uint32_t bytes, uint8_t flags, float score);
void kvt_trace_step(struct kvt_pager *p);
void kvt_set_top(struct page *pg);
int  kvt_pf_unset(struct kvt_pager *p, struct page *pg);
void kvt_place(struct kvt_pager *p, uint32_t slot, int ti, uint32_t f);
void kvt_unplace(struct kvt_pager *p, uint32_t slot, int ti, int demote, int drop);
uint32_t kvt_page_new(struct kvt_pager *p);
void kvt_page_free(struct kvt_pager *p, uint32_t s);
void kvt_page_unref(struct kvt_pager *p, uint32_t s);
void kvt_page_lose(struct kvt_pager *p, uint32_t s);
void kvt_unpin(struct kvt_pager *p, uint32_t s);
void kvt_stage_in(struct kvt_pager *p, struct page *pg, int prefetch);
void kvt_stage_out(struct kvt_pager *p, struct page *pg);
uint32_t kvt_stage_room(const struct kvt_pager *p, int prefetch);
uint32_t kvt_transit(const struct kvt_pager *p);

/* TRACE costs a test of p->rec when no trace is being recorded. */
#define TRACE(p, ...) do { if (__builtin_expect((p)->rec != NULL, 0)) \
		kvt_trace_page((p), __VA_ARGS__); } while (0)

static inline int frame_is_free(const struct tier *t, uint32_t f)
{
	return f < t->nframes && (t->freemap[f / 64] >> (f % 64) & 1);
}

/* Frames still to be taken offline after a shrink. */
static inline uint32_t debt(const struct tier *t)
{
	return t->nframes - t->online - t->noff;
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

static inline unsigned copies(const struct page *pg)
{
	return (pg->frame[0] != NO_FRAME) + (pg->frame[1] != NO_FRAME) +
	       (pg->frame[2] != NO_FRAME);
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

/* migrate.c: the queues and the migration thread */
void kvt_queue_demand(struct kvt_pager *p, uint32_t s);
void kvt_wake_migrate(struct kvt_pager *p);
/* Queues a prefetch of page s; 1 if it did, 0 if the page needs none
 * (where it is read already, on its way, or not ready). */
int kvt_queue_prefetch(struct kvt_pager *p, uint32_t s, int far);
void kvt_wake_prefetch(struct kvt_pager *p);

/* Pages open batches asked for and have not been handed (p->asked). */
static inline uint32_t kvt_transit_asked(const struct kvt_pager *p)
{
	return __atomic_load_n(&p->asked, __ATOMIC_RELAXED);
}

/* Prefetches queued and still wanted, both queues (the queues may also
 * hold entries for pages acquired or freed since, skipped when popped). */
static inline uint32_t kvt_pf_queued(const struct kvt_pager *p)
{
	return p->pf_live;
}

/* The page's queued prefetch, if any, is no longer wanted (lock held). */
static inline void kvt_pf_unqueue(struct kvt_pager *p, struct page *pg)
{
	if (pg->flags & PF_QPREF) {
		pg->flags &= ~PF_QPREF;
		p->pf_live--;
	}
}
void *kvt_migrate_main(void *arg);
int  kvt_run_job_sync(struct kvt_pager *p, struct job *j);
uint32_t kvt_alloc_tail_frame(struct kvt_pager *p);

/* watermark.c: watermarks and live capacity (lock held) */
void kvt_tier_marks(struct kvt_pager *p, int ti);
void kvt_tier_apply(struct kvt_pager *p, int ti);
int  kvt_resize_check(struct kvt_pager *p, int ti, uint64_t n, const char *key,
		      const char *value, char *err, size_t errlen);
/* Limit the host tier to n frames under memory pressure (UINT32_MAX: no
 * limit); its capacity is the smaller of that and tier.host.bytes. Lock
 * held. 0, or the refusal of a shrink that the pinned pages or the pages
 * with nowhere else to go do not allow (nothing changes then). */
int  kvt_host_limit(struct kvt_pager *p, uint32_t n);

/* seq.c: sequences */
struct seq *kvt_seq_get(struct kvt_pager *p, kvt_seq_t h, int *err);
void kvt_scores_update(struct kvt_pager *p);

/* acquire.c: batches */
int  kvt_acquire_tier(struct kvt_pager *p, kvt_seq_t h, unsigned layer, const uint32_t *pages,
		      unsigned n, int target, int ahead, struct kvt_batch **out);

/* trace.c: the recorder behind kvt_pager_trace_start. kvt_recorder_slot
 * is called under the caller's lock (one appender at a time) and returns
 * the record to fill in; it never waits for I/O: a thread of the recorder
 * writes full buffers, and when too many wait the record handed out is a
 * scratch one that goes nowhere, counted as dropped (a KVT_EV_GAP record
 * marks the spot). finish flushes, writes the header again (dropped) and
 * closes; the appender must be done by then. */
struct kvt_recorder;
struct kvt_recorder_head {		/* first member of struct kvt_recorder */
	struct kvt_trace_rec *next, *end;	/* free records of the current buffer */
};
/* max_bufs: buffers of 2048 records that may wait for the disk; 0 = the
 * default, 512 (48 MiB). */
int  kvt_recorder_start(const char *path, const struct kvt_trace_hdr *hdr, const char *config,
			size_t config_len, unsigned max_bufs, struct kvt_recorder **out);
struct kvt_trace_rec *kvt_recorder_slot_slow(struct kvt_recorder *r);
static inline struct kvt_trace_rec *kvt_recorder_slot(struct kvt_recorder *r)
{
	struct kvt_recorder_head *h = (struct kvt_recorder_head *)r;
	if (__builtin_expect(h->next < h->end, 1))
		return h->next++;
	return kvt_recorder_slot_slow(r);
}
void kvt_recorder_counts(const struct kvt_recorder *r, uint64_t *records, uint64_t *dropped);
int  kvt_recorder_finish(struct kvt_recorder *r);

/* lasterr.c: record the page lost (lock held); r names it. */
void kvt_lasterr_read(struct kvt_pager *p, int cause, int tier, uint64_t offset,
		      uint32_t bytes, uint32_t page, const struct kvt_ref *r);

/* stats.c (and kvt_plog, pager/hooks.h) */
void kvt_lat_record(struct kvt_tier_stats *st, uint64_t ns);

#endif
