/* SPDX-License-Identifier: MIT */
/*
 * Traces: what the pager did, one fixed-size record per event, after a
 * header that says how the pager was set up. The live pager writes them;
 * kvt-sim replays them; importers turn other tools' traces into them.
 * docs/trace-format.md is the byte-level description; this header is the
 * code's.
 *
 * File: struct kvt_trace_hdr (little-endian), then hdr.config_len bytes of
 * configuration text (the INI the pager ran with, NUL not included), zero
 * padding up to hdr.rec_off, then records of hdr.rec_size bytes each until
 * the end of the file. A reader takes rec_size from the header, so a later
 * version may add fields at the end of a record.
 */
#ifndef KVT_PAGER_TRACE_H
#define KVT_PAGER_TRACE_H

#include <stddef.h>
#include <stdint.h>

#define KVT_TRACE_MAGIC		"KVTTRACE"	/* 8 bytes, no NUL */
#define KVT_TRACE_VERSION	1
#define KVT_TRACE_NONE		0xff		/* tier field: no tier */

enum kvt_trace_event {
	KVT_EV_ACCESS	= 1,	/* a page was used (counted once per step):
				 * from = tier it was read from when resident
				 * (a hit there), NONE when it had to come up
				 * (to = where it came to) */
	KVT_EV_NEW	= 2,	/* a page was created (tail of seq/layer) */
	KVT_EV_FREE	= 3,	/* the last reference to a page went away */
	KVT_EV_PROMOTE	= 4,	/* a copy moved up: from -> to, bytes */
	KVT_EV_DEMOTE	= 5,	/* the top copy left tier from for tier to */
	KVT_EV_DROP	= 6,	/* a clean copy in tier from was dropped */
	KVT_EV_SCORE	= 7,	/* the attention mass on a page this step */
	KVT_EV_STEP	= 8,	/* the decode step advanced to `step` */
	KVT_EV_LOST	= 9,	/* a page became unreadable */
};

enum kvt_trace_flag {
	KVT_TF_PREFETCH	= 1,	/* the move was a prefetch, not a demand */
	KVT_TF_SEALED	= 2,	/* the page was full when the event happened */
};

/* The header: 256 bytes. */
struct kvt_trace_hdr {
	char	 magic[8];	/* KVT_TRACE_MAGIC */
	uint32_t version;	/* KVT_TRACE_VERSION */
	uint32_t hdr_size;	/* sizeof(struct kvt_trace_hdr) */
	uint32_t rec_size;	/* sizeof(struct kvt_trace_rec) */
	uint32_t config_len;	/* bytes of config text after the header */
	uint64_t rec_off;	/* file offset of the first record */
	uint64_t seed;		/* the run's seed, 0 when none */
	uint64_t config_hash;	/* XXH3-64 of the config text */
	uint64_t start_ns;	/* CLOCK_REALTIME when recording began */
	/* Geometry */
	uint32_t page_tokens, n_layers, n_kv_heads, head_dim;
	uint32_t kv_bytes;	/* bytes per K or V element (2 f16, 4 f32) */
	uint32_t page_bytes;	/* one page, K and V */
	/* Tiers: frames per tier (0 = absent), fast, host, nvme */
	uint32_t frames[3];
	char	 policy[3][32];	/* spec per tier, NUL-padded */
	uint32_t source;	/* enum kvt_trace_source */
	uint8_t	 pad[256 - 8 - 4 * 4 - 8 * 4 - 4 * 6 - 4 * 3 - 96 - 4];
};

enum kvt_trace_source {
	KVT_SRC_PAGER	= 0,	/* recorded by the live pager */
	KVT_SRC_ORACLE	= 1,	/* imported from libCacheSim oracleGeneral */
	KVT_SRC_MOONCAKE = 2,	/* imported from Mooncake JSONL */
	KVT_SRC_SYNTH	= 3,	/* generated (kvt-sim gen) */
};

/* One record: 48 bytes. */
struct kvt_trace_rec {
	uint64_t time;		/* ns since recording began (import: as given) */
	uint64_t step;		/* decode step */
	uint64_t key;		/* page id, unique over the trace */
	uint32_t seq;		/* sequence (KVT_REF_NONE when unknown) */
	uint32_t layer;
	uint32_t index;		/* page index in the layer */
	uint32_t bytes;		/* bytes moved (moves); page bytes otherwise */
	float	 score;		/* KVT_EV_SCORE: attention mass; else 0 */
	uint8_t	 event;		/* enum kvt_trace_event */
	uint8_t	 from, to;	/* tiers 0 fast, 1 host, 2 nvme; KVT_TRACE_NONE */
	uint8_t	 flags;		/* enum kvt_trace_flag */
};

_Static_assert(sizeof(struct kvt_trace_hdr) == 256, "trace header is 256 bytes");
_Static_assert(sizeof(struct kvt_trace_rec) == 48, "trace record is 48 bytes");

/* Reading: the whole file is mapped; every check is done at open. */
struct kvt_trace {
	struct kvt_trace_hdr hdr;
	const char *config;		/* config_len bytes, not NUL-terminated */
	const struct kvt_trace_rec *rec;
	size_t	 nrec;
	void	*map;
	size_t	 map_len;
};

/* Open and check a trace: bad magic, an unknown version, sizes that do not
 * fit, a truncated record, a record with an unknown event or tier: -EINVAL
 * (-errno for I/O) with err saying what and at which byte offset. */
int  kvt_trace_open(const char *path, struct kvt_trace *t, char *err, size_t errlen);
void kvt_trace_close(struct kvt_trace *t);

/* Writing: buffered; records go out in order. */
struct kvt_trace_writer;
int  kvt_trace_create(const char *path, const struct kvt_trace_hdr *hdr,
		      const char *config, size_t config_len,
		      struct kvt_trace_writer **w);
int  kvt_trace_put(struct kvt_trace_writer *w, const struct kvt_trace_rec *r, size_t n);
/* Flushes, fsyncs, closes; returns the first error seen, if any. */
int  kvt_trace_finish(struct kvt_trace_writer *w);

/* Interchange. Each returns 0 or -errno with err naming the problem (line
 * or byte offset). */
int kvt_trace_import_oracle(const char *in, const char *out, char *err, size_t errlen);
int kvt_trace_import_mooncake(const char *in, const char *out, char *err, size_t errlen);
int kvt_trace_export_oracle(const char *in, const char *out, char *err, size_t errlen);

#endif
