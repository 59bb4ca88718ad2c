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

#include <kvt/pager.h>
#include "kernels/device.h"
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
 * frames, the "debt") is paid by frame_free, which takes a frame offline
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

	struct pqueue	demand, prefetch;
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
	struct kvt_psi	*psi;		/* the memory-pressure watcher, or NULL */
	struct kvt_http	*http;		/* the metrics endpoint, or NULL */
	double		psi_avg10;	/* its last reading */
	int		psi_ok;		/* the last reading worked */
	uint64_t	psi_shrinks, psi_grows;	/* limit changes it made */

	struct kvt_stats st;		/* counters not kept per tier */

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

/* pager.c */
int  kvt_pager_check(struct kvt_pager *p, char *err, size_t errlen);
/* Limit the host tier to n frames under memory pressure (UINT32_MAX: no
 * limit); its capacity is the smaller of that and tier.host.bytes. Lock
 * held. 0, or the refusal of a shrink that the pinned pages or the pages
 * with nowhere else to go do not allow (nothing changes then). */
int  kvt_host_limit(struct kvt_pager *p, uint32_t n);

/* psi.c: the memory-pressure watcher thread (started at open when
 * psi.threshold > 0 and psi.path is set; stopped first at close). */
struct kvt_psi;
int  kvt_psi_start(struct kvt_pager *p);
void kvt_psi_stop(struct kvt_pager *p);
int  kvt_psi_parse(const char *buf, double *avg10);

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

/* stats.c */
void kvt_lat_record(struct kvt_tier_stats *st, uint64_t ns);
/* One message through the configured log callback, if any. */
void kvt_plog(struct kvt_pager *p, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* control.c: the control protocol without a socket, for the fuzz target.
 * The n bytes at in are one client's whole stream (lines, then EOF):
 * every complete line is answered against p as the socket's thread would
 * answer it, and the replies, concatenated and NUL-terminated, go to *out
 * (malloc'd, NULL when there are none; *outlen bytes before the NUL).
 * An unfinished last line is dropped, as at EOF. 0 or -ENOMEM. */
int kvt_control_feed(struct kvt_pager *p, const char *in, size_t n, char **out, size_t *outlen);

#endif
