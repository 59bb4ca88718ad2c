/* SPDX-License-Identifier: MIT */
/*
 * libkvt's replay engine, as a stable API: load a trace, replay it against
 * policies and sizes, read back hits and misses. The engine is kvt-sim's
 * (docs/kvt-sim.md): the pager's residency rules and the very policy
 * objects the live pager runs, so what a replay says is what the pager
 * would have done with those tiers.
 *
 * Conventions as in <kvt/pager.h>: 0 or -errno, never a print or an exit;
 * where err is given (errlen bytes, always terminated), a failure leaves
 * one line there naming the file, byte offset, policy or tier at fault.
 * The trace handle is opaque. A trace is read only by replays, except
 * that the first replay under an offline policy (belady) adds the
 * next-use times to it: calls on one trace must not overlap.
 *
 * python/kvtier wraps this header with ctypes (python/README.md).
 */
#ifndef KVT_SIM_H
#define KVT_SIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kvt_sim_trace;		/* a loaded trace */
/* A policy's table of methods, the plug-in interface of pager/policy.h
 * (docs/policies.md). The replay calls it from the calling thread only. */
struct kvt_policy_ops;

/* What a loaded trace holds. */
struct kvt_sim_info {
	uint64_t records;	/* records kept for replay (ACCESS, NEW, SEAL, ...) */
	uint64_t refs;		/* of them, ACCESS records: the references */
	uint64_t news;		/* NEW records (0: pages exist from the start) */
	uint64_t steps;		/* decode steps */
	uint64_t pages;		/* distinct pages referenced or created */
	uint64_t page_bytes;	/* a kvtier trace's page size, else 0 */
	uint64_t gaps;		/* places where the recorder dropped records */
	uint32_t source;	/* a kvtier trace's enum kvt_trace_source
				 * (docs/trace-format.md), else UINT32_MAX */
	char	 format[16];	/* "kvtier", "oracleGeneral" or "keys" */
};

/* Load the trace at path: a kvtier trace (docs/trace-format.md), else a
 * libCacheSim oracleGeneral file (24-byte requests). On success *out is
 * the trace, to be freed with kvt_sim_close. -EINVAL for a file that is
 * neither or is damaged (err names the byte offset), -errno from opening
 * or reading it, -ENOMEM. */
int  kvt_sim_open(const char *path, struct kvt_sim_trace **out, char *err, size_t errlen);
/* A trace from bare keys: record i is an ACCESS of keys[i] in step i (the
 * caller's array may go once this returns). -E2BIG from 2^32 - 1 keys,
 * -ENOMEM. */
int  kvt_sim_open_keys(const uint64_t *keys, size_t n, struct kvt_sim_trace **out);
/* Free a trace. NULL is fine. */
void kvt_sim_close(struct kvt_sim_trace *t);
/* Fill *out with what t holds. */
int  kvt_sim_describe(const struct kvt_sim_trace *t, struct kvt_sim_info *out);

/* Miss-ratio curves, as `kvt-sim mrc` draws them: one single-tier replay
 * per policy and size, with a backing store under the tier. policies are
 * np specs ("lru", "s3fifo:small=20", a plug-in path); frames are nsizes
 * capacities in pages (1 .. 2^32 - 2). For policy p at size s, index
 * i = p * nsizes + s of hits[] and misses[] gets the replay's tier
 * lookups; *refs gets the trace's references (the same for all; the miss
 * ratio is misses[i] / *refs). Replays run on up to `threads` threads
 * (0 or 1: the calling thread); each is deterministic, so the numbers do
 * not depend on it. -EINVAL for an unknown policy, parameters it refuses
 * or a size out of range; -ENOMEM. */
int  kvt_sim_curve(struct kvt_sim_trace *t, const char *const *policies, unsigned np,
		   const uint64_t *frames, unsigned nsizes, unsigned threads,
		   uint64_t *hits, uint64_t *misses, uint64_t *refs,
		   char *err, size_t errlen);

/* One tier of a replay: top first. */
struct kvt_sim_level {
	/* The policy spec ("lru", "s3fifo:small=20"); with ops, the text
	 * after its ':' is what ops->init gets as params (NULL: "") */
	const char *policy;
	/* NULL: look policy up (built-in or plug-in path). Else this table,
	 * which must outlive the call: a policy made outside the library,
	 * such as one the Python package builds from callbacks. */
	const struct kvt_policy_ops *ops;
	uint64_t frames;	/* capacity in pages, 1 .. 2^32 - 2 */
};

/* One tier's counts after a replay (the pager's kvt_tier_stats). */
struct kvt_sim_counts {
	uint64_t refs;		/* the trace's references (every tier alike) */
	uint64_t hits, misses;	/* lookups that found / missed the page here */
	uint64_t promotions;	/* copies that came in from below */
	uint64_t demotions;	/* top copies that left downward */
	uint64_t drops;		/* of those, the ones that needed no write */
	uint64_t used;		/* frames in use at the end */
};

/* Replay t through n tiers (1 .. 8) and fill out[0 .. n - 1]. backed: 1,
 * a backing store under the last tier holds every page, so a page may
 * leave the last tier; 0, as the pager, the last tier keeps the only
 * copies; -1, 1 for a trace without NEW records, else 0. A move costs
 * nothing here: the counts are the result (kvt-sim run adds costs).
 * -EINVAL for a bad level (err says which and why: no such policy, a
 * table without one of its methods, refused parameters, no frames), an
 * n out of range; -ENOMEM. */
int  kvt_sim_replay(struct kvt_sim_trace *t, const struct kvt_sim_level *lv, unsigned n,
		    int backed, struct kvt_sim_counts *out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
