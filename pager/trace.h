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
 * version may add fields at the end of a record (and hdr_size, of the
 * header) without changing the version.
 *
 * The live pager appends every record under its lock: the file order is
 * the order of the events, and time and step never decrease along it.
 */
#ifndef KVT_PAGER_TRACE_H
#define KVT_PAGER_TRACE_H

#include <stddef.h>
#include <stdint.h>

#define KVT_TRACE_MAGIC		"KVTTRACE"	/* 8 bytes, no NUL */
#define KVT_TRACE_VERSION	1
#define KVT_TRACE_NONE		0xff		/* tier field: no tier */

enum kvt_trace_event {
	/* A lookup of a page by an acquire, counted as kvt_tier_stats counts
	 * hits and misses (every lookup, not once per step): from = the tier
	 * of the page's top copy at the lookup (a hit there, a miss in each
	 * tier numbered below it), NONE when the page was lost (a miss in
	 * every tier down to the last one with frames). to = the tier the
	 * batch reads it from: == from and no KVT_TF_WAIT when it was pinned
	 * at once; with KVT_TF_WAIT it had to come up (PROMOTE records follow
	 * when it moves) or wait for a move in flight. NONE when lost. The
	 * policies see the first ACCESS of a key in a step (once per step). */
	KVT_EV_ACCESS	= 1,
	KVT_EV_NEW	= 2,	/* a page was created (tail of seq/layer):
				 * to = fast, where its frame is */
	KVT_EV_FREE	= 3,	/* the last reference to a page went away:
				 * from = its top tier (NONE when lost); every
				 * copy it had is gone */
	KVT_EV_PROMOTE	= 4,	/* a copy was made one tier up: from -> to,
				 * bytes (nvme -> host, host -> fast) */
	KVT_EV_DEMOTE	= 5,	/* the only copy was written from -> to
				 * (to = from + 1) and left tier from */
	KVT_EV_DROP	= 6,	/* the copy in tier from went without a write:
				 * to = the tier of the top copy that remains.
				 * to > from: it was the top copy (counted as a
				 * demotion and a drop of tier from); to < from:
				 * a clean copy below the top (counted nowhere) */
	KVT_EV_SCORE	= 7,	/* the attention mass on a page this step;
				 * from = its top tier */
	KVT_EV_STEP	= 8,	/* the decode step advanced to `step` */
	KVT_EV_LOST	= 9,	/* a page became unreadable: from = the tier
				 * of the copy that failed; its copies are gone */
	KVT_EV_GAP	= 10,	/* the recorder fell behind and dropped `key`
				 * records just before this one */
	KVT_EV_SEAL	= 11,	/* an append filled the tail page: from = its
				 * top tier; it lost its tail pin (flag SEALED) */
	KVT_EV_MAX	= 11,
};

enum kvt_trace_flag {
	KVT_TF_PREFETCH	= 1,	/* the move was a prefetch, not a demand */
	KVT_TF_SEALED	= 2,	/* the page was full when the event happened */
	KVT_TF_WAIT	= 4,	/* ACCESS: not readable at once; the batch waited */
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
	uint64_t dropped;	/* records the recorder could not keep (KVT_EV_GAP),
				 * written when the trace is finished */
	uint8_t	 pad[256 - 8 - 4 * 4 - 8 * 4 - 4 * 6 - 4 * 3 - 96 - 4 - 8];
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
	uint64_t key;		/* page id, unique over the trace: pager traces
				 * slot | (uint64_t)generation << 32 */
	uint32_t seq;		/* sequence slot that created the page (slots
				 * are reused after a close); KVT_REF_NONE when
				 * unknown */
	uint32_t layer;
	uint32_t index;		/* page index in the layer */
	uint32_t bytes;		/* bytes moved (PROMOTE, DEMOTE); 0 for DROP,
				 * GAP, STEP; page bytes otherwise */
	float	 score;		/* KVT_EV_SCORE: attention mass; else 0 */
	uint8_t	 event;		/* enum kvt_trace_event */
	uint8_t	 from, to;	/* tiers 0 fast, 1 host, 2 nvme; KVT_TRACE_NONE */
	uint8_t	 flags;		/* enum kvt_trace_flag; readers ignore bits they
				 * do not know */
};

_Static_assert(sizeof(struct kvt_trace_hdr) == 256, "trace header is 256 bytes");
_Static_assert(sizeof(struct kvt_trace_rec) == 48, "trace record is 48 bytes");

/* A whole input in memory, whatever it comes from: a regular file is
 * mapped; "-" is standard input, which is read, as is a named pipe (a
 * device or a directory is refused); zstd-compressed bytes (told by the zstd
 * magic, not by the name: published oracleGeneral traces are *.zst) are
 * decompressed. p stays valid until kvt_input_close and is 8-aligned, so
 * records can be read in place. 0, or -errno with err naming the input
 * ("standard input" for "-") and what is wrong: a corrupt or truncated
 * zstd frame is -EINVAL naming the byte (of the compressed input) where
 * that frame starts. */
struct kvt_input {
	const uint8_t *p;
	size_t	 n;
	void	*map;			/* the mapping (n bytes), or NULL */
	void	*buf;			/* what was read or decompressed, or NULL */
	int	 zstd;			/* it was zstd-compressed */
};
int  kvt_input_open(const char *path, struct kvt_input *in, char *err, size_t errlen);
void kvt_input_close(struct kvt_input *in);

/* Reading: the whole file in memory (kvt_input_open); every check is done
 * at open. */
struct kvt_trace {
	struct kvt_trace_hdr hdr;
	const char *config;		/* config_len bytes, not NUL-terminated */
	const struct kvt_trace_rec *rec;
	size_t	 nrec;
	struct kvt_input in;		/* the bytes rec and config point into */
	void	*own;			/* records copied to 48-byte stride when the
					 * file's rec_size is larger; NULL otherwise */
};

/* Open and check a trace: bad magic, an unknown version, sizes that do not
 * fit (hdr_size >= 256, rec_size >= 48, both multiples of 8; config_len
 * within the file; rec_off 8-aligned, after the config, within the file),
 * a truncated record, a record with an unknown event or tier: -EINVAL
 * (-errno for I/O) with err naming the file, the byte offset and what is
 * wrong there. A header or record longer than this version's is read for
 * the fields this version knows (t->rec always has a 48-byte stride).
 * path may be "-" or zstd-compressed (kvt_input_open); byte offsets are
 * then of the decompressed bytes. */
int  kvt_trace_open(const char *path, struct kvt_trace *t, char *err, size_t errlen);
/* The same on an input already read (the caller looked at its first bytes,
 * say): *in passes to t, and is closed here on failure. */
int  kvt_trace_open_input(struct kvt_input *in, const char *path, struct kvt_trace *t,
			  char *err, size_t errlen);
void kvt_trace_close(struct kvt_trace *t);

/* Writing: buffered; records go out in order. kvt_trace_create starts
 * path's temporary (pager/afile.h: PATH.PID.tmp, never through a link)
 * and writes the header: hdr's magic, version, hdr_size, rec_size,
 * config_len, rec_off and config_hash are filled in here, the rest is the
 * caller's. path itself appears only at kvt_trace_finish, whole. */
struct kvt_trace_writer;
int  kvt_trace_create(const char *path, const struct kvt_trace_hdr *hdr,
		      const char *config, size_t config_len,
		      struct kvt_trace_writer **w);
int  kvt_trace_put(struct kvt_trace_writer *w, const struct kvt_trace_rec *r, size_t n);
/* Flushes, fsyncs, closes and renames the trace into place; returns the
 * first error seen, if any (then path is left as it was). */
int  kvt_trace_finish(struct kvt_trace_writer *w);
/* Drops the trace: the temporary goes, path is left as it was. */
void kvt_trace_abort(struct kvt_trace_writer *w);

/* What a trace says, counted the way the pager's statistics count it.
 * For traces recorded by the pager (source KVT_SRC_PAGER), hits and misses
 * per tier equal kvt_tier_stats hits/misses over the same period; so do
 * promotions (PROMOTE by to), demotions (DEMOTE by from, plus DROP with
 * to > from) and drops (DROP with to > from). Imported traces carry no
 * tiers: those counts stay 0. */
struct kvt_trace_summary {
	uint64_t events[KVT_EV_MAX + 1];	/* records per event */
	uint64_t hits[3], misses[3];
	uint64_t promotions[3], demotions[3], drops[3];
	uint64_t bytes_in[3], bytes_out[3];	/* PROMOTE and DEMOTE bytes */
	uint64_t keys;				/* distinct keys of ACCESS records */
	uint64_t first_step, last_step;		/* over all records */
	uint64_t dropped;			/* sum of GAP keys */
};
int kvt_trace_summarize(const struct kvt_trace *t, struct kvt_trace_summary *s);

/* Interchange. Each returns 0 or -errno with err naming the problem (line
 * or byte offset). */
/* libCacheSim oracleGeneral: 24-byte packed little-endian requests
 * {u32 clock_time; u64 obj_id; u32 obj_size; i64 next_access_vtime}.
 * Import: one ACCESS per request, key = obj_id, time = clock_time (as
 * given), step = request index, bytes = obj_size, seq/layer/index
 * KVT_REF_NONE, tiers NONE. */
int kvt_trace_import_oracle(const char *in, const char *out, char *err, size_t errlen);
/* Mooncake JSONL: one object per line with "timestamp" (ms) and
 * "hash_ids" (required), "input_length", "output_length" (checked, not
 * used); other fields skipped. Each hash id of request r (0-based line of
 * a request; blank lines skipped) becomes an ACCESS: key = hash id,
 * time = timestamp in ns, step = seq = r, index = position in hash_ids,
 * layer KVT_REF_NONE, bytes 0; hdr.page_tokens = 512 (the trace's block). */
int kvt_trace_import_mooncake(const char *in, const char *out, char *err, size_t errlen);
/* The ACCESS records of any trace as oracleGeneral: obj_id = key,
 * next_access_vtime = 1-based index (among the exported requests) of the
 * key's next request, -1 when none (libCacheSim's traceConv convention).
 * Imported oracle traces keep clock_time and obj_size as they were; other
 * traces get clock_time = time in seconds and obj_size = bytes, or the
 * header's page_bytes when 0, or 1 (libCacheSim may skip size-0 requests). */
int kvt_trace_export_oracle(const char *in, const char *out, char *err, size_t errlen);

#endif
