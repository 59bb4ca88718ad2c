/* SPDX-License-Identifier: MIT */
/*
 * libkvt: a pager for LLM KV-cache pages across fast (device), host and
 * NVMe tiers. What an inference runtime sees.
 *
 * Conventions: every function returns 0 (or a count) on success and
 * -errno on failure; none prints, none exits. Handles are opaque.
 * A sequence handle carries a generation: a closed sequence's handle is
 * refused with -ESTALE, another pager's (or a made-up) one with -EINVAL.
 *
 * Threads: any function may be called from any thread. One sequence must
 * not be appended to by two threads at once; acquiring its pages from
 * several threads is fine.
 */
#ifndef KVT_PAGER_H
#define KVT_PAGER_H

#include <stddef.h>
#include <stdint.h>
#include <kvt/config.h>
#include <kvt/device.h>
#include <kvt/version.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kvt_pager;
struct kvt_batch;
typedef uint64_t kvt_seq_t;		/* (pager tag, generation, slot) */

/* One page, ready to read. */
struct kvt_view {
	const void *k, *v;	/* (page_tokens, n_kv_heads, head_dim) each */
	uint64_t id;		/* page id (generation, slot): for traces */
	uint32_t page;		/* index in the sequence's layer table */
	uint32_t ntok;		/* valid tokens (the tail page may be short) */
	uint8_t  tier;		/* enum kvt_tier_id it is read from: fast or host */
};

/* Open a pager over a device (which must outlive it). Copies *cfg. */
int  kvt_pager_open(const struct kvt_config *cfg, struct kvt_device *dev,
		    struct kvt_pager **out);
/* Closes every sequence, stops the migration thread, frees the tiers and
 * removes an NVMe file the pager created. Returns 0, or -EBUSY while a
 * batch is not released (then nothing is closed: release it, and close
 * again). NULL is fine. */
int  kvt_pager_close(struct kvt_pager *p);
/* The device the pager was opened over. */
struct kvt_device *kvt_pager_device(const struct kvt_pager *p);

/* Bytes of one page. */
size_t kvt_pager_page_bytes(const struct kvt_pager *p);
/* The configuration in force: the one it was opened with, as changed
 * since by kvt_pager_set. */
void kvt_pager_config(const struct kvt_pager *p, struct kvt_config *out);

/* Change one configuration key ("section.key", as kvt_config_set takes it)
 * while the pager runs. Live: access.prefetch_depth,
 * tier.{fast,host,nvme}.wm_min|wm_low|wm_high (wm_min <= wm_low <= wm_high
 * must hold afterwards), tier.{fast,host,nvme}.policy (the tier's pages
 * stay where they are; the new policy starts with them ranked by last
 * use) and tier.{fast,host}.bytes (the live capacity, at most what was
 * reserved at open: tier.X.max_bytes, else bytes; a shrink returns at
 * once and the migration thread demotes what lives in the frames going
 * offline: kvt_tier_stats.online falls to capacity when it is done),
 * tier.host.floor, and psi.threshold where the memory-pressure watcher
 * was started at open (docs/config.md).
 * Returns 0, -EINVAL for an unknown key, a bad value or a policy that
 * does not exist or refuses its parameters, -EPERM for a key that only
 * takes effect at open, -ERANGE for a capacity above the reservation,
 * -EBUSY for one not above the tier's pinned pages (tails, batches),
 * -ENOSPC for one that leaves the pages below nowhere to go, -ENOMEM
 * (message in err). On error nothing changes. kvt_pager_config returns
 * the configuration in force. */
int  kvt_pager_set(struct kvt_pager *p, const char *key, const char *value,
		   char *err, size_t errlen);

/* Advance the decode step. A page's accesses count once per step for the
 * policies, however many times it is acquired in that step. Returns the
 * new step number. */
uint64_t kvt_pager_step(struct kvt_pager *p);

/* Report the attention mass each of the first n pages of a sequence's layer
 * carried in this step (mass[i] for page i; the masses of one query sum to
 * 1 over its pages). Policies that use it (h2o) are told; the others
 * ignore it. -EINVAL when n exceeds the layer's pages. */
int  kvt_seq_score(struct kvt_pager *p, kvt_seq_t seq, unsigned layer,
		   const float *mass, unsigned n);
/* 1 while some tier's policy uses the masses (so they are worth working
 * out), else 0. Lock-free; it changes when a policy is swapped live. */
int  kvt_pager_wants_scores(const struct kvt_pager *p);

/* Sequences */
int  kvt_seq_open(struct kvt_pager *p, kvt_seq_t *out);
/* Append ntok tokens of one layer: k and v are (ntok, n_kv_heads, head_dim)
 * in the page dtype. The tail page stays pinned in the fast tier and is
 * sealed when full. -EBUSY if the sequence is parked. */
int  kvt_seq_append(struct kvt_pager *p, kvt_seq_t s, unsigned layer,
		    const void *k, const void *v, unsigned ntok);
/* The same with k and v in the pager's device memory (a runtime whose
 * forward pass runs on the device): the copy stays on the device. The
 * caller's writes to k and v must be complete (its kernels synchronised). */
int  kvt_seq_append_dev(struct kvt_pager *p, kvt_seq_t s, unsigned layer,
			const void *k, const void *v, unsigned ntok);
/* Tokens stored in a layer, pages in a layer. */
int  kvt_seq_tokens(struct kvt_pager *p, kvt_seq_t s, unsigned layer);
int  kvt_seq_pages(struct kvt_pager *p, kvt_seq_t s, unsigned layer);
/* A new sequence sharing the first ntok tokens of every layer of s: whole
 * pages are shared (refcounted, never copied); a partial page at the
 * boundary is copied into the child's tail. */
int  kvt_seq_fork(struct kvt_pager *p, kvt_seq_t s, unsigned ntok, kvt_seq_t *out);
/* Demote every page of the sequence as far down as the tiers allow and
 * unpin its tails; returns when done. Appends fail with -EBUSY until
 * resume. */
int  kvt_seq_park(struct kvt_pager *p, kvt_seq_t s);
/* Bring the tails back (synchronously) and queue every page for prefetch. */
int  kvt_seq_resume(struct kvt_pager *p, kvt_seq_t s);
/* Free the sequence (pages shared with a fork live on). -EBUSY while one
 * of its batches is not released. */
int  kvt_seq_close(struct kvt_pager *p, kvt_seq_t s);

/* Acquire pages of one layer as a batch. pages == NULL means every page of
 * the layer. Resident pages are pinned at once, the rest are queued for
 * promotion (demand beats prefetch). Also queues layers layer+1 ..
 * layer+prefetch_depth of the same pages for prefetch, modulo the layer
 * count: the last layers queue the first ones, the next step's. */
int  kvt_acquire(struct kvt_pager *p, kvt_seq_t s, unsigned layer,
		 const uint32_t *pages, unsigned n, struct kvt_batch **out);
/* Next page in readiness order: resident pages first, the rest as their
 * transfers complete. Returns 1 with *view filled, 0 when the batch is
 * exhausted, -EIO for a lost page (view->page names it; keep calling for
 * the rest), -ENOSPC when no frame could be had for it. The view stays
 * valid (pinned) until the next call on this batch or the release. */
int  kvt_batch_next(struct kvt_batch *b, struct kvt_view *view);
/* Where the page the next kvt_batch_next hands out lies (its K; V follows
 * half a page on, kvt_pager_page_bytes in all) when it is ready already,
 * else NULL: a caller prefetches it while it works on the current one. */
const void *kvt_batch_peek(const struct kvt_batch *b);
/* For a consumer whose reads of a view outlive the next call (a kernel
 * queued on a GPU): after kvt_batch_hold, every page handed out stays
 * pinned, its view valid, until kvt_batch_done says the views handed out
 * so far are no longer read, or the release. Call kvt_batch_done before a
 * kvt_batch_next that may wait: the pages waited for may need the frames
 * the held ones occupy. */
void kvt_batch_hold(struct kvt_batch *b);
void kvt_batch_done(struct kvt_batch *b);
void kvt_batch_release(struct kvt_batch *b);

/* Queue pages for promotion without waiting (pages == NULL: all). */
int  kvt_prefetch(struct kvt_pager *p, kvt_seq_t s, unsigned layer,
		  const uint32_t *pages, unsigned n);

/* Demote everything out of a tier (fast or host) and wait. */
int  kvt_pager_drain(struct kvt_pager *p, int tier);

/* Why the pager last lost a page (a page it will not serve: its readers
 * get -EIO). Lost pages are also counted in kvt_stats (lost_pages,
 * csum_failures, io_errors); this keeps the detail of the latest. */
struct kvt_pager_error {
	int	 cause;		/* 0: none yet; -EBADMSG: the data read back does not
				 * match its XXH3 checksum; -ENODATA: the read came
				 * back short (the file ends early); another -errno:
				 * the read failed with it (-EIO) */
	int	 tier;		/* where the bad copy was: KVT_TIER_NVME */
	uint64_t offset;	/* its byte offset in that tier (the NVMe file or device) */
	uint32_t bytes;		/* its length */
	uint32_t page;		/* the page id (slot) */
	uint32_t seq, layer, index;	/* the page's sequence, layer and index in the
				 * layer's table (when it was created) */
	uint64_t step;		/* the pager's decode step at the time */
	uint64_t count;		/* pages lost so far */
};
/* Fill e (may be NULL) with the last page lost, and write it as one line
 * into buf (len bytes, always terminated; buf may be NULL): "page 7 (seq 0,
 * layer 1, index 3) lost: checksum mismatch reading tier nvme at offset
 * 458752 (65536 bytes)". Returns its cause: 0 when no page was lost (buf
 * then holds ""), else a -errno as in e->cause. */
int  kvt_pager_last_error(struct kvt_pager *p, struct kvt_pager_error *e,
			  char *buf, size_t len);

/* Statistics */
#define KVT_LAT_BUCKETS 24		/* log2 microsecond buckets: <1us .. >=2^22us */

struct kvt_tier_stats {
	uint64_t capacity;		/* frames the tier may use (its live capacity) */
	uint64_t online;		/* frames in service: capacity, plus frames a
					 * shrink has yet to empty */
	uint64_t reserved;		/* frames reserved at open (max_bytes) */
	uint64_t shrinks, grows;	/* live capacity changes, down and up */
	uint64_t used;			/* frames holding a page */
	uint64_t stage;			/* of the capacity, frames kept for pages on
					 * their way into this tier */
	uint64_t frame_bytes;		/* bytes per frame */
	uint64_t hits, misses;		/* acquires that found / did not find the page here */
	uint64_t promotions;		/* pages copied into this tier from below */
	uint64_t demotions;		/* pages that left this tier downward */
	uint64_t drops;			/* demotions that needed no write (clean copy below) */
	uint64_t bytes_in, bytes_out;	/* bytes written into / read out of this tier */
	uint64_t io_count;		/* completed transfers into or out of this tier */
	uint64_t io_ns_total, io_ns_max;/* their latency */
	uint64_t lat_hist[KVT_LAT_BUCKETS];
};

struct kvt_stats {
	uint64_t step;
	uint64_t seqs, pages;		/* open sequences, live pages */
	uint64_t acquires;		/* pages handed out by kvt_batch_next */
	uint64_t host_in_place;		/* of them, read in place from the host tier */
	uint64_t prefetch_issued, prefetch_hit, prefetch_late, prefetch_wasted,
		 prefetch_dropped;
	uint64_t lost_pages;		/* pages marked lost (never served) */
	uint64_t csum_failures, io_errors, short_ios, enospc;
	uint64_t nvme_ops, nvme_reqs;	/* NVMe reads and writes issued, and the
					 * page requests they carried (coalesced) */
	uint64_t nvme_busy_ns;		/* time with an NVMe operation in flight */
	uint64_t nvme_depth_ns;		/* ns x operations in flight over that time:
					 * / nvme_busy_ns = the mean queue depth */
	uint64_t stall_ns;		/* time kvt_batch_next spent waiting */
	/* The least the NVMe tier must read: for each step, the bytes of the
	 * pages it read that the fast and host tiers cannot hold (their
	 * capacity less the frames kept for pages on their way up,
	 * kvt_tier_stats.stage), summed over the steps: with full attention every
	 * page is read once a step, and what does not fit above must come
	 * up from NVMe. Against tier[KVT_TIER_NVME].bytes_out it says how
	 * close the tiers come to the minimum. */
	uint64_t read_min_bytes;
	uint64_t read_steps;		/* steps that read at least one page */
	int	 nvme_paused;		/* demotion to NVMe paused after ENOSPC */
	int	 nvme_direct;		/* 1 O_DIRECT, 0 buffered */
	int	 nvme_registered_files, nvme_registered_buffers;
	int	 host_hugepages;	/* enum kvt_hugepages actually obtained */
	int	 host_mlocked;
	int	 host_numa_node;	/* node obtained, or KVT_NUMA_ANY/INTERLEAVE */
	uint64_t host_overhead_bytes;	/* mapped beyond the configured size */
	int	 host_releases;		/* 1 if the memory of offline host frames
					 * goes back to the kernel (docs/config.md) */
	uint64_t meta_bytes;		/* the pager's own bookkeeping (page table,
					 * frame maps, policy metadata) */
	int	 metrics_http_port;	/* port of the metrics endpoint, 0 = none */
	/* Memory pressure (psi.*): */
	int	 psi_watching;		/* 1 if the watcher runs */
	int	 psi_ok;		/* 1 if its last reading of psi.path worked */
	double	 psi_some_avg10;	/* that reading: "some" avg10, per cent */
	uint64_t psi_shrinks, psi_grows;/* host tier limit changes it made */
	uint64_t host_limit_bytes;	/* the host tier's limit under pressure, 0 = none */
	char	 host_notes[256];	/* what the host tier could not get, and why */
	char	 nvme_notes[256];	/* fallbacks taken by the NVMe tier, and why */
	struct kvt_tier_stats tier[KVT_NTIERS];
	int	 trace_on;		/* a trace is being recorded */
	uint64_t trace_records;		/* records of the trace being recorded, or of
					 * the last one stopped */
	uint64_t trace_dropped;		/* of those, dropped: the writer fell behind */
	/* The device (kvt_device_info): what it is, and its copies and
	 * kernels since it was opened. */
	struct kvt_device_info dev;
	uint64_t fast_alloc_bytes;	/* device memory the fast tier holds (reserved) */
};

int kvt_pager_stats(struct kvt_pager *p, struct kvt_stats *st);
/* One JSON object. Returns its length, or -ENOSPC if buf is too small. */
int kvt_stats_json(const struct kvt_stats *st, char *buf, size_t len);
/* The Prometheus text exposition (format 0.0.4; docs/metrics.md lists the
 * metrics). Returns its length, or -ENOSPC if buf is too small; writes
 * nothing past len. A pager opened with metrics.http set serves it itself
 * at http://ADDR/metrics (loopback only; kvt_stats.metrics_http_port). */
int kvt_stats_prometheus(const struct kvt_stats *st, char *buf, size_t len);

const char *kvt_tier_name(int tier);	/* "fast", "host", "nvme" */

/* Traces (docs/trace-format.md): record what the pager does, one 48-byte
 * record per event (page lookups, creations, frees, moves, steps, scores,
 * losses), into path: written as path's temporary (PATH.PID.tmp, never
 * through a link) and renamed over path, whole, when the trace stops; a
 * FIFO at path is written in place. The header carries the
 * geometry, the frames per tier, the policies and the configuration text.
 * Records are appended to memory under the pager's lock and written by a
 * thread of their own; if the disk falls behind by more than 48 MiB,
 * records are dropped, counted (kvt_stats.trace_dropped, the header's
 * `dropped`) and marked by a GAP record. A trace started on a pager that
 * already holds pages sees them first when they are used. Returns 0,
 * -EBUSY when a trace is already being recorded, -EINVAL, or -errno from
 * creating the file. */
int  kvt_pager_trace_start(struct kvt_pager *p, const char *path);
/* Flush and close the trace: returns 0, -ENOENT when none is being
 * recorded, or the first write error. kvt_pager_close stops a trace too
 * (call this first to see the error). */
int  kvt_pager_trace_stop(struct kvt_pager *p);

/* Control socket: a thread serving a Unix stream socket with a line
 * protocol (stats, stats json, metrics, get KEY, set KEY=VALUE, drain
 * fast|host, trace start /ABS/FILE, trace stop, help; every line gets a
 * reply, which ends with a line "." alone; errors are one line
 * "error ..."). path NULL or "": kvt_control_default_path's (a refused
 * fallback directory is -ENOTDIR or -EPERM, the reason through the log
 * callback). The socket is made mode 0600 and peers must have our uid or
 * be root. -EEXIST if the path holds anything but a socket nobody listens
 * on (such a stale socket is replaced). At most 16 clients: one silent
 * for the pager's control.idle_ms is closed, and a connection that finds
 * all 16 taken takes the slot of the one idle the longest. The pager
 * must outlive it. */
struct kvt_control;
int  kvt_control_start(struct kvt_pager *p, const char *path, struct kvt_control **out);
/* Stops the thread, closes every client and removes the socket file. */
void kvt_control_stop(struct kvt_control *c);
/* The control socket's default path into buf (len bytes, 108 suffice):
 * $XDG_RUNTIME_DIR/kvtier.sock, else /run/user/UID/kvtier.sock where that
 * directory is ours, else DIR/kvtier.sock with DIR ${TMPDIR:-/tmp}/kvtier-UID
 * (UID our effective uid), a private directory: made here mode 0700 when
 * absent; when present, refused unless it is a directory (not a symbolic
 * link) owned by us with mode 0700 exactly. kvt_control_start and kvtctl
 * both call it, so they agree. Returns 0; -ENOTDIR or -EPERM for a
 * refused directory, -ENAMETOOLONG, or -errno from mkdir, with one line
 * naming the path and what is wrong in why (whylen bytes; why may be
 * NULL). buf is "" on error. */
int  kvt_control_default_path(char *buf, size_t len, char *why, size_t whylen);

#ifdef __cplusplus
}
#endif
#endif
