/* SPDX-License-Identifier: MIT */
/*
 * The replay engine behind kvt-sim: a trace played against any number of
 * tiers, each with a capacity, a policy and the cost of moving a page in
 * and out, under the pager's residency rules (pager/table.c,
 * pager/migrate.c) and with the same policy objects (pager/policy.h).
 * Library code: no printing, no exit; 0 or -errno, with a message in err
 * where one is asked for.
 *
 * A trace is loaded once into dense arrays (struct kvt_sim_trace): every
 * page key is remapped to a small id in one hash pass, so a replay touches
 * flat per-page and per-frame arrays only. One loaded trace may be
 * replayed by many threads at once (kvt_sim_mrc); a replay never writes
 * to it.
 *
 * The rules mirrored, per reference to page X (docs/kvt-sim.md says it in
 * prose):
 *   - lookup: every tier above X's top copy counts a miss, the top copy's
 *     tier a hit (a page in no tier: a miss everywhere, read from the
 *     backing store);
 *   - a hit in tier 0 is an access (on_access), at most once per page per
 *     step; the policy clock (kvt_ref.time) counts these;
 *   - a miss promotes X to tier 0: reclaim one frame of tier 0, then, for
 *     a page whose top copy is below tier 1, one frame of tier 1, where it
 *     is staged and keeps a clean copy; the copy it came from stays too;
 *     the arrival is the step's use of X: the clock moves on before the
 *     on_insert calls, and no on_access follows in that step (a miss
 *     inserts without an access, as in libCacheSim);
 *   - reclaim asks the tier's policy for victims, skipping unevictable
 *     pages (tail pins, the page being moved, the only copy in the last
 *     tier unless the trace is backed); a victim with another copy is
 *     dropped, an only copy is written one tier down (reclaiming there
 *     first), in batches of at most 64 as the pager does;
 *   - NEW puts a page in tier 0 (reclaiming below wm_min + 1 free frames)
 *     with a tail pin, released by SEAL (the append that filled it), any
 *     record flagged KVT_TF_SEALED, the next NEW of the same (seq, layer),
 *     or FREE; FREE removes every copy;
 *   - optionally (wm_low > 0) a tier under wm_low free frames is reclaimed
 *     up to wm_high after each record: the migration thread's background
 *     work, made synchronous;
 *   - optionally (prefetch_depth > 0) the same page index of the next
 *     layers is brought up after each reference, at once (the pager's
 *     layer-ahead prefetch, which its thread makes later); a prefetched
 *     page gets on_insert when it lands and on_access when first read.
 */
#ifndef KVT_PAGER_SIM_H
#define KVT_PAGER_SIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pager/policy.h"
#include "pager/trace.h"

#define KVT_SIM_MAX_TIERS	8
#define KVT_SIM_NONE		UINT32_MAX

struct kvt_sim_tier {
	char	 policy[64];	/* spec: "lru", "s3fifo:small=20" */
	/* The policy object; NULL: kvt_policy_find(policy). A plug-in or a
	 * test's own policy goes here (policy then holds "name:params"). */
	const struct kvt_policy_ops *ops;
	uint64_t frames;	/* capacity in pages, >= 1 */
	/* Moving a page up out of this tier (a promotion's read) and down
	 * into it (a demotion's write): bytes/s (0 = no limit) and seconds
	 * per page. Tier 0's up figures are not used; the backing store's
	 * read is kvt_sim_config.origin_bw/lat. */
	double	 up_bw, up_lat, down_bw, down_lat;
	/* Watermarks in free frames, as the pager's (0 = off). wm_min: a NEW
	 * reclaims to wm_min + 1 free frames first (tier 0 only). wm_low,
	 * wm_high: after each record a tier below wm_low free frames is
	 * reclaimed up to wm_high. */
	uint32_t wm_min, wm_low, wm_high;
};

struct kvt_sim_config {
	unsigned ntiers;		/* 1..KVT_SIM_MAX_TIERS */
	struct kvt_sim_tier tier[KVT_SIM_MAX_TIERS];
	uint64_t page_bytes;		/* bytes a move carries (0: 1, count pages) */
	/* 1: a backing store below the last tier holds every page, so the
	 * only copy in the last tier may be evicted (a drop). 0: as the
	 * pager: the last tier keeps only copies; a page exists because a
	 * NEW made it. -1: 1 for traces without NEW records, else 0. */
	int	 backed;
	double	 origin_bw, origin_lat;	/* reading from the backing store */
	/* The pager's layer-ahead prefetch: after a reference to page
	 * (seq, layer, index), the same index of the next prefetch_depth
	 * layers is brought up to tier 0 at once (0: none, the default).
	 * Needs seq, layer and index in the trace. */
	unsigned prefetch_depth;
	/* Called about every million records with the fraction done; may be
	 * NULL. From the replaying thread. */
	void	(*progress)(void *arg, double frac);
	void	*progress_arg;
};

/* A loaded trace: input records only, in dense form. */
struct kvt_sim_trace {
	size_t	  n;		/* records kept */
	uint32_t *id;		/* (n) page id, KVT_SIM_NONE for STEP */
	uint8_t	 *ev;		/* (n) enum kvt_trace_event; NULL: all ACCESS */
	uint8_t	 *flags;	/* (n) enum kvt_trace_flag; NULL: none */
	uint64_t *step;		/* (n) decode step; NULL: record i is step i */
	float	 *score;	/* (n) SCORE mass; NULL when there is none */
	uint32_t *next;		/* (n) policy time of the page's next counted
				 * reference, UINT32_MAX never; NULL until
				 * kvt_sim_trace_next() */
	uint32_t  npages;
	uint64_t *key;		/* (npages) the key the trace gave */
	uint32_t *seq, *layer, *index;	/* (npages) or NULL (unknown) */
	uint64_t  naccess, nnew, nscore, steps;
	int	  source;	/* enum kvt_trace_source */
	int	  has_hdr;	/* hdr below is a kvtier trace's header */
	struct kvt_trace_hdr hdr;
	char	  format[16];	/* "kvtier", "oracleGeneral", "keys" */
	/* What the records say the live pager did (kvt_trace_summarize):
	 * for a trace recorded by the pager, its hits, misses, promotions,
	 * demotions and drops per tier. */
	struct kvt_trace_summary live;
	uint64_t  gaps;		/* GAP records: the recorder dropped some */
	uint64_t  time_first, time_last;	/* the first and the last record's time */
	int	  time_s;	/* 1: those are seconds (oracleGeneral's clock_time,
				 * imported as given), 0: nanoseconds */
	double	  load_s;	/* seconds spent reading and remapping */
	char	 *config;	/* a kvtier trace's configuration text (NUL
				 * added), or NULL */
};

/* Per tier results of a replay. Boundary b is between tier b and b + 1
 * (the last tier's is with the backing store). */
struct kvt_sim_tier_result {
	uint64_t hits, misses;		/* lookups, as the pager counts them */
	uint64_t promotions;		/* copies that came into this tier from below */
	uint64_t demotions, drops;	/* top copies that left it (drops: no write) */
	uint64_t bytes_in, bytes_out;	/* moved into / out of the tier */
	uint64_t down_bytes, up_bytes;	/* across boundary b: down (writes), up (reads) */
	double	 move_s;		/* estimated time of the moves into it
					 * (demand and prefetch) */
	double	 mass;			/* SCORE mass on pages resident here */
	uint64_t used;			/* frames in use at the end */
};

struct kvt_sim_result {
	uint64_t refs;			/* ACCESS records */
	uint64_t steps;			/* distinct steps seen */
	uint64_t origin_reads;		/* pages read from the backing store */
	uint64_t refused;		/* references or NEWs that found no frame */
	double	 stall_s;		/* estimated time of the moves made on
					 * demand (every move but prefetches) */
	double	 prefetch_s;		/* estimated time of the prefetches' moves */
	uint64_t prefetch_issued, prefetch_hit, prefetch_wasted, prefetch_dropped;
	double	 mass_total;		/* all SCORE mass */
	struct kvt_sim_tier_result tier[KVT_SIM_MAX_TIERS];
};

/* Loading. Each returns 0 or -errno (-EINVAL for a bad file, with err
 * naming it and the byte offset); the trace is empty on failure. path
 * may be "-" (standard input) and the bytes zstd-compressed
 * (kvt_input_open). kvt_sim_trace_load tells a kvtier trace by its magic
 * and takes anything else for oracleGeneral. */
int  kvt_sim_trace_load(const char *path, struct kvt_sim_trace *t, char *err, size_t errlen);
int  kvt_sim_trace_oracle(const char *path, struct kvt_sim_trace *t, char *err, size_t errlen);
int  kvt_sim_trace_kvt(const char *path, struct kvt_sim_trace *t, char *err, size_t errlen);
/* From records in memory (hdr may be NULL). */
int  kvt_sim_trace_recs(struct kvt_sim_trace *t, const struct kvt_trace_rec *r, size_t n,
			const struct kvt_trace_hdr *hdr, char *err, size_t errlen);
/* From bare keys: record i is an ACCESS of keys[i] in step i. */
int  kvt_sim_trace_keys(struct kvt_sim_trace *t, const uint64_t *keys, size_t n);
/* Fill t->next (one backward pass; idempotent). */
int  kvt_sim_trace_next(struct kvt_sim_trace *t);
void kvt_sim_trace_free(struct kvt_sim_trace *t);

/* A configuration with the tiers of a kvtier trace's header (frames and
 * policy per present tier, page bytes), backed = -1. */
void kvt_sim_config_hdr(struct kvt_sim_config *c, const struct kvt_trace_hdr *h);
/* kvt_sim_config_hdr, then what the trace's configuration text adds: the
 * full policy specs and the watermarks (per cent of each tier's frames,
 * as the pager computes them). */
void kvt_sim_config_trace(struct kvt_sim_config *c, const struct kvt_sim_trace *t);
/* Parse "bw=10G,lat=5us,rbw=..,rlat=..,wbw=..,wlat=.." into a tier's
 * cost figures (bw: bytes/s with K/M/G/T, binary; lat: s, ms, us or ns;
 * bw and lat set both directions, r* the read up, w* the write down).
 * -EINVAL with err for anything else. */
int  kvt_sim_parse_costs(const char *s, struct kvt_sim_tier *t, char *err, size_t errlen);

/* Replay t under c. -EINVAL (err says why) for a bad configuration: an
 * unknown policy, bad parameters, a tier without frames. */
int  kvt_sim_run(const struct kvt_sim_config *c, const struct kvt_sim_trace *t,
		 struct kvt_sim_result *res, char *err, size_t errlen);

/* Miss-ratio curves: one single-tier replay (backed) per policy and size,
 * on up to `threads` threads. out[p * nsizes + s] gets the result of
 * policies[p] at frames[s]; every replay is deterministic, so the output
 * is the same whatever the thread count. progress (may be NULL) is called
 * from the calling thread every 200 ms or so with the fraction done. */
struct kvt_sim_point {
	char	 policy[64];
	uint64_t frames;
	uint64_t refs, hits, misses;
	double	 miss_ratio;
	double	 seconds;		/* wall time of this replay (not in the CSV) */
};
int  kvt_sim_mrc(const struct kvt_sim_trace *t, const char *const *policies, unsigned np,
		 const uint64_t *frames, unsigned nsizes, unsigned threads,
		 struct kvt_sim_point *out, void (*progress)(void *arg, double frac),
		 void *arg, char *err, size_t errlen);
/* The points as CSV (header "policy,frames,size_pct,refs,hits,misses,
 * miss_ratio") and JSON; size_pct is frames over the trace's pages. */
void kvt_sim_mrc_csv(FILE *f, const struct kvt_sim_point *pt, size_t n, uint32_t npages);
void kvt_sim_mrc_json(FILE *f, const struct kvt_sim_point *pt, size_t n, uint32_t npages,
		      const char *trace);

/* Synthetic traces (kvt-sim gen). Keys only; the caller writes them. */
/* The decode scan: `pages` pages per layer to start with; each step reads
 * every page of every layer once, in order (layer by layer), and every
 * append_every steps one page is appended to each layer before the reads.
 * Page (layer l, index i) has key l << 32 | i. Returns the record count
 * (*keys and *steps malloc'd; *steps may be NULL when not wanted). */
int64_t kvt_sim_gen_scan(unsigned layers, unsigned pages, unsigned append_every,
			 unsigned steps, uint64_t **keys, uint64_t **step);
/* n references to nkeys objects, rank r drawn with weight 1/(r+1)^alpha
 * (Vose's alias method, xorshift64* from seed); rank r's key is a fixed
 * odd multiple of r + 1, so keys are sparse. */
int  kvt_sim_gen_zipf(uint64_t n, uint64_t nkeys, double alpha, uint64_t seed, uint64_t *keys);

#endif
