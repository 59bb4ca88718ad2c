/* SPDX-License-Identifier: MIT */
/*
 * The Prometheus text exposition (format 0.0.4) of struct kvt_stats, for the
 * operator interface. Names follow https://prometheus.io/docs/practices/naming/:
 * a kvt_ prefix, base units (seconds, bytes), _total on counters, the tier as
 * a label. docs/metrics.md lists every family; keep the two in step.
 *
 * Every family is written as one block: # HELP, # TYPE, then its samples, so
 * a family never appears twice. The document is built from the snapshot
 * alone: no locks, no allocation, no output anywhere but buf.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <kvt/pager.h>
#include "pager/hooks.h"
#include "pager/out.h"

#define NS_PER_S 1000000000ull

/* Nanoseconds as exact decimal seconds, without trailing zeros: no float
 * rounding, so 1500000000 is "1.5" and 1000 is "0.000001". */
static void put_seconds(struct out *o, uint64_t ns)
{
	uint64_t frac = ns % NS_PER_S;
	int digits = 9;

	put(o, "%llu", (unsigned long long)(ns / NS_PER_S));
	if (!frac)
		return;
	while (frac % 10 == 0) {
		frac /= 10;
		digits--;
	}
	put(o, ".%0*llu", digits, (unsigned long long)frac);
}

/* HELP text escapes backslash and newline; a label value also the quote. */
static void put_escaped(struct out *o, const char *s, int quote)
{
	for (; *s; s++) {
		if (*s == '\\')
			put(o, "\\\\");
		else if (*s == '\n')
			put(o, "\\n");
		else if (quote && *s == '"')
			put(o, "\\\"");
		else
			put(o, "%c", *s);
	}
}

static void family(struct out *o, const char *name, const char *type, const char *help)
{
	put(o, "# HELP %s ", name);
	put_escaped(o, help, 0);
	put(o, "\n# TYPE %s %s\n", name, type);
}

/* name, then {k="v"} when k is given; the caller adds more labels or closes. */
static void sample_open(struct out *o, const char *name, const char *k, const char *v)
{
	put(o, "%s", name);
	if (!k)
		return;
	put(o, "{%s=\"", k);
	put_escaped(o, v, 1);
	put(o, "\"");
}

enum kind {
	V_U64,		/* a uint64_t, as is */
	V_NS,		/* a uint64_t of nanoseconds, shown in seconds */
	V_INT,		/* an int */
	V_FRAMES,	/* a uint64_t count of frames, shown in bytes (tiers only) */
	V_PCT,		/* a double of per cent, shown as a ratio (4 decimals) */
};

struct metric {
	const char *name, *type, *help;
	size_t off;	/* of the field in struct kvt_stats or struct kvt_tier_stats */
	enum kind kind;
};

#define S(f) offsetof(struct kvt_stats, f)
#define T(f) offsetof(struct kvt_tier_stats, f)

static const struct metric pager_metrics[] = {
	{ "kvt_steps_total", "counter", "Steps taken (kvt_pager_step).", S(step), V_U64 },
	{ "kvt_sequences", "gauge", "Open sequences.", S(seqs), V_U64 },
	{ "kvt_pages", "gauge", "Live pages, across all sequences and layers.", S(pages), V_U64 },
	{ "kvt_acquired_pages_total", "counter", "Pages handed out by kvt_batch_next.",
	  S(acquires), V_U64 },
	{ "kvt_host_in_place_pages_total", "counter",
	  "Pages handed out that were read in place from the host tier.", S(host_in_place), V_U64 },
	{ "kvt_prefetch_issued_total", "counter", "Pages queued for promotion by prefetch.",
	  S(prefetch_issued), V_U64 },
	{ "kvt_prefetch_hits_total", "counter",
	  "Prefetched pages that were acquired before being evicted.", S(prefetch_hit), V_U64 },
	{ "kvt_prefetch_late_total", "counter",
	  "Pages acquired while their prefetch was still queued or in flight.",
	  S(prefetch_late), V_U64 },
	{ "kvt_prefetch_wasted_total", "counter",
	  "Prefetched pages evicted from the target tier without being acquired.",
	  S(prefetch_wasted), V_U64 },
	{ "kvt_prefetch_dropped_total", "counter",
	  "Prefetches given up because no frame could be had.", S(prefetch_dropped), V_U64 },
	{ "kvt_lost_pages_total", "counter",
	  "Pages marked lost after an I/O error or checksum mismatch (never served).",
	  S(lost_pages), V_U64 },
	{ "kvt_checksum_failures_total", "counter", "Pages read back with a bad checksum.",
	  S(csum_failures), V_U64 },
	{ "kvt_io_errors_total", "counter", "Failed transfers, other than NVMe writes that hit ENOSPC.", S(io_errors), V_U64 },
	{ "kvt_short_ios_total", "counter", "NVMe transfers that completed short.",
	  S(short_ios), V_U64 },
	{ "kvt_enospc_total", "counter", "NVMe writes that failed with ENOSPC.", S(enospc), V_U64 },
	{ "kvt_nvme_ops_total", "counter",
	  "NVMe reads and writes issued (neighbouring pages coalesced into one).",
	  S(nvme_ops), V_U64 },
	{ "kvt_nvme_requests_total", "counter",
	  "Page transfers those NVMe operations carried.", S(nvme_reqs), V_U64 },
	{ "kvt_nvme_busy_seconds_total", "counter",
	  "Time with at least one NVMe operation in flight.", S(nvme_busy_ns), V_NS },
	{ "kvt_nvme_inflight_seconds_total", "counter",
	  "Seconds x NVMe operations in flight; over kvt_nvme_busy_seconds_total, the mean queue depth.",
	  S(nvme_depth_ns), V_NS },
	{ "kvt_nvme_read_min_bytes_total", "counter",
	  "The least the NVMe tier had to read: each step, the bytes of the pages it read that "
	  "the fast and host tiers (less their stage) cannot hold. Against "
	  "kvt_tier_read_bytes_total{tier=\"nvme\"}.", S(read_min_bytes), V_U64 },
	{ "kvt_read_steps_total", "counter", "Steps that read at least one page.",
	  S(read_steps), V_U64 },
	{ "kvt_stall_seconds_total", "counter", "Time kvt_batch_next spent waiting for pages.",
	  S(stall_ns), V_NS },
	{ "kvt_nvme_paused", "gauge", "1 while demotion to NVMe is paused after ENOSPC, else 0.",
	  S(nvme_paused), V_INT },
	{ "kvt_nvme_direct", "gauge", "1 if the NVMe tier uses O_DIRECT, 0 if buffered.",
	  S(nvme_direct), V_INT },
	{ "kvt_nvme_registered_files", "gauge", "Files registered with the io_uring ring.",
	  S(nvme_registered_files), V_INT },
	{ "kvt_nvme_registered_buffers", "gauge", "Buffers registered with the io_uring ring.",
	  S(nvme_registered_buffers), V_INT },
	{ "kvt_host_mlocked", "gauge", "1 if the host tier is locked in memory, else 0.",
	  S(host_mlocked), V_INT },
	{ "kvt_host_numa_node", "gauge",
	  "NUMA node of the host tier; -1 left to the kernel, -2 interleaved.",
	  S(host_numa_node), V_INT },
	{ "kvt_host_overhead_bytes", "gauge", "Host memory mapped beyond the configured size.",
	  S(host_overhead_bytes), V_U64 },
	{ "kvt_host_releases", "gauge",
	  "1 if the memory of offline host frames goes back to the kernel, else 0.",
	  S(host_releases), V_INT },
	{ "kvt_memory_pressure_watching", "gauge",
	  "1 if the memory-pressure watcher runs (psi.threshold > 0), else 0.",
	  S(psi_watching), V_INT },
	{ "kvt_memory_pressure_reading_ok", "gauge",
	  "1 if the watcher's last reading of psi.path worked, else 0.", S(psi_ok), V_INT },
	{ "kvt_memory_pressure_some_avg10_ratio", "gauge",
	  "The \"some\" avg10 of psi.path at the last reading, as a ratio (0.5 = 50 %).",
	  S(psi_some_avg10), V_PCT },
	{ "kvt_memory_pressure_shrinks_total", "counter",
	  "Times the watcher lowered the host tier's limit.", S(psi_shrinks), V_U64 },
	{ "kvt_memory_pressure_grows_total", "counter",
	  "Times the watcher raised the host tier's limit.", S(psi_grows), V_U64 },
	{ "kvt_host_limit_bytes", "gauge",
	  "The host tier's limit under memory pressure; 0 when there is none.",
	  S(host_limit_bytes), V_U64 },
	{ "kvt_trace_recording", "gauge", "1 while a trace is being recorded, else 0.",
	  S(trace_on), V_INT },
	{ "kvt_trace_records_total", "counter",
	  "Records of the trace being recorded (or of the last one).", S(trace_records), V_U64 },
	{ "kvt_trace_dropped_total", "counter",
	  "Of those, records dropped because the writer fell behind.", S(trace_dropped), V_U64 },
	{ "kvt_metadata_bytes", "gauge",
	  "The pager's own bookkeeping: page table, frame maps, policy metadata.",
	  S(meta_bytes), V_U64 },
	{ "kvt_device_memory_bytes", "gauge",
	  "Memory of the device (0 where the fast tier is host memory).", S(dev.mem_total), V_U64 },
	{ "kvt_device_memory_free_bytes", "gauge",
	  "Device memory free when the stats were taken.", S(dev.mem_free), V_U64 },
	{ "kvt_device_fast_tier_bytes", "gauge",
	  "Device memory the fast tier holds (all its frames, reserved at open).",
	  S(fast_alloc_bytes), V_U64 },
	{ "kvt_device_kernel_seconds_total", "counter",
	  "Time the device's compute stream was busy with kernels (and the small copies "
	  "between them).", S(dev.kernel_ns), V_NS },
	{ "kvt_device_host_in_place", "gauge",
	  "1 if access.host_in_place = auto reads the host tier in place on this device.",
	  S(dev.host_in_place), V_INT },
};

static const struct metric tier_metrics[] = {
	{ "kvt_tier_capacity_bytes", "gauge", "Bytes of frames the tier may use (its live capacity).",
	  T(capacity), V_FRAMES },
	{ "kvt_tier_online_bytes", "gauge",
	  "Bytes of frames in service: the capacity plus frames a shrink has yet to empty.",
	  T(online), V_FRAMES },
	{ "kvt_tier_reserved_bytes", "gauge",
	  "Bytes of frames reserved at open: the most the capacity can grow to.",
	  T(reserved), V_FRAMES },
	{ "kvt_tier_shrinks_total", "counter", "Live capacity changes down.", T(shrinks), V_U64 },
	{ "kvt_tier_grows_total", "counter", "Live capacity changes up.", T(grows), V_U64 },
	{ "kvt_tier_used_bytes", "gauge", "Bytes of frames holding a page.", T(used), V_FRAMES },
	{ "kvt_tier_stage_bytes", "gauge",
	  "Bytes of the capacity kept for pages on their way into this tier (not the policy's).",
	  T(stage), V_FRAMES },
	{ "kvt_tier_frame_bytes", "gauge", "Bytes per frame.", T(frame_bytes), V_U64 },
	{ "kvt_tier_hits_total", "counter", "Page lookups that found the page in this tier.",
	  T(hits), V_U64 },
	{ "kvt_tier_misses_total", "counter",
	  "Page lookups that reached this tier and did not find the page here.", T(misses), V_U64 },
	{ "kvt_tier_promotions_total", "counter", "Pages copied into this tier from below.",
	  T(promotions), V_U64 },
	{ "kvt_tier_demotions_total", "counter", "Pages that left this tier downward.",
	  T(demotions), V_U64 },
	{ "kvt_tier_drops_total", "counter",
	  "Demotions that needed no write (a clean copy was already below).", T(drops), V_U64 },
	{ "kvt_tier_written_bytes_total", "counter", "Bytes written into this tier.",
	  T(bytes_in), V_U64 },
	{ "kvt_tier_read_bytes_total", "counter", "Bytes read out of this tier.",
	  T(bytes_out), V_U64 },
	{ "kvt_tier_io_latency_max_seconds", "gauge",
	  "Longest transfer into or out of this tier.", T(io_ns_max), V_NS },
};

#undef S
#undef T

static void put_value(struct out *o, const void *base, const struct metric *m, uint64_t frame_bytes)
{
	const char *p = (const char *)base + m->off;
	uint64_t u;
	double d;
	int i;

	switch (m->kind) {
	case V_PCT:
		/* Integers only: the ratio is printed the same in any locale. */
		memcpy(&d, p, sizeof(d));
		u = d > 0 && d <= 100 ? (uint64_t)(d * 100 + 0.5) : 0;	/* 1e-4 units */
		put(o, " %llu", (unsigned long long)(u / 10000));
		if (u % 10000) {
			int digits = 4;
			u %= 10000;
			while (u % 10 == 0) {
				u /= 10;
				digits--;
			}
			put(o, ".%0*llu", digits, (unsigned long long)u);
		}
		put(o, "\n");
		return;
	case V_INT:
		memcpy(&i, p, sizeof(i));
		put(o, " %d\n", i);
		return;
	case V_NS:
		memcpy(&u, p, sizeof(u));
		put(o, " ");
		put_seconds(o, u);
		put(o, "\n");
		return;
	case V_FRAMES:
	case V_U64:
		memcpy(&u, p, sizeof(u));
		if (m->kind == V_FRAMES)
			u *= frame_bytes;
		put(o, " %llu\n", (unsigned long long)u);
		return;
	}
}

/*
 * The log2 buckets as a Prometheus histogram. Bucket b < KVT_LAT_BUCKETS-1
 * holds transfers under 2^b us, so its upper bound is le = 2^b us (a
 * transfer of exactly 2^b us falls in the next one: the bounds are
 * exclusive where Prometheus's are inclusive, a difference of one
 * nanosecond). The last bucket has no upper bound and becomes +Inf.
 *
 * A snapshot whose buckets add up to more than io_count (a struct filled by
 * hand) still gives a valid histogram: cumulative counts are capped at
 * io_count, which is +Inf and _count.
 */
static void latency_histogram(struct out *o, const struct kvt_stats *st)
{
	static const char name[] = "kvt_tier_io_latency_seconds",
			  bucket[] = "kvt_tier_io_latency_seconds_bucket";

	family(o, name, "histogram",
	       "Latency of transfers into or out of the tier (log2 microsecond buckets).");
	for (int t = 0; t < KVT_NTIERS; t++) {
		const struct kvt_tier_stats *ts = &st->tier[t];
		uint64_t cum = 0;

		for (int b = 0; b < KVT_LAT_BUCKETS - 1; b++) {
			cum += ts->lat_hist[b];
			if (cum > ts->io_count || cum < ts->lat_hist[b])
				cum = ts->io_count;
			sample_open(o, bucket, "tier", kvt_tier_name(t));
			put(o, ",le=\"");
			put_seconds(o, (1ull << b) * 1000);
			put(o, "\"} %llu\n", (unsigned long long)cum);
		}
		sample_open(o, bucket, "tier", kvt_tier_name(t));
		put(o, ",le=\"+Inf\"} %llu\n", (unsigned long long)ts->io_count);
		sample_open(o, "kvt_tier_io_latency_seconds_sum", "tier", kvt_tier_name(t));
		put(o, "} ");
		put_seconds(o, ts->io_ns_total);
		put(o, "\n");
		sample_open(o, "kvt_tier_io_latency_seconds_count", "tier", kvt_tier_name(t));
		put(o, "} %llu\n", (unsigned long long)ts->io_count);
	}
}

/* What the device is (as labels of a 1), and its copies by direction. */
static void device_metrics(struct out *o, const struct kvt_stats *st)
{
	static const char *const dir[KVT_DEV_DIRS] = { "h2d", "d2h", "d2d" };

	family(o, "kvt_device_info", "gauge",
	       "The device the pager runs on: its backend and description as labels, value 1.");
	sample_open(o, "kvt_device_info", "backend", st->dev.name);
	put(o, ",desc=\"");
	put_escaped(o, st->dev.desc, 1);
	put(o, "\"} 1\n");
	family(o, "kvt_device_copies_total", "counter", "Device copies, by direction.");
	for (int d = 0; d < KVT_DEV_DIRS; d++) {
		sample_open(o, "kvt_device_copies_total", "dir", dir[d]);
		put(o, "} %llu\n", (unsigned long long)st->dev.copies[d]);
	}
	family(o, "kvt_device_copy_bytes_total", "counter", "Bytes copied by the device, by direction.");
	for (int d = 0; d < KVT_DEV_DIRS; d++) {
		sample_open(o, "kvt_device_copy_bytes_total", "dir", dir[d]);
		put(o, "} %llu\n", (unsigned long long)st->dev.copy_bytes[d]);
	}
	family(o, "kvt_device_copy_seconds_total", "counter",
	       "Time each direction's copy engine was busy (device-to-device copies count under "
	       "h2d, whose engine runs them).");
	for (int d = 0; d < KVT_DEV_DIRS; d++) {
		sample_open(o, "kvt_device_copy_seconds_total", "dir", dir[d]);
		put(o, "} ");
		put_seconds(o, st->dev.copy_ns[d]);
		put(o, "\n");
	}
}

/* What the library is: its version, commit and features as labels of a 1. */
static void build_info(struct out *o)
{
	struct kvt_build b;

	kvt_build_get(&b);
	family(o, "kvt_build_info", "gauge",
	       "The library's version, the commit it was built from, whether the build made the "
	       "CUDA plug-in, and the cpu kernels' SIMD level, as labels; value 1.");
	sample_open(o, "kvt_build_info", "version", b.version);
	put(o, ",git=\"");
	put_escaped(o, b.git, 1);
	put(o, "\",cuda=\"%s\",simd=\"%s\"} 1\n", b.cuda ? "yes" : "no", b.simd);
}

KVT_API int kvt_stats_prometheus(const struct kvt_stats *st, char *buf, size_t len)
{
	static const char *const huge[] = { "off", "auto", "hugetlb", "thp" };
	struct out o = { buf, len, 0 };
	char dummy[1];

	if (!buf || !len) {
		o.buf = dummy;
		o.len = 0;
	}
	for (size_t i = 0; i < sizeof(pager_metrics) / sizeof(*pager_metrics); i++) {
		const struct metric *m = &pager_metrics[i];
		family(&o, m->name, m->type, m->help);
		sample_open(&o, m->name, NULL, NULL);
		put_value(&o, st, m, 0);
	}

	/* An enum as a set of 0/1 samples, one per mode: the one in effect is 1. */
	family(&o, "kvt_host_hugepages", "gauge",
	       "Huge pages the host tier obtained: 1 for the mode in effect, 0 for the others.");
	for (int h = 0; h < (int)(sizeof(huge) / sizeof(*huge)); h++) {
		sample_open(&o, "kvt_host_hugepages", "mode", huge[h]);
		put(&o, "} %d\n", st->host_hugepages == h);
	}

	for (size_t i = 0; i < sizeof(tier_metrics) / sizeof(*tier_metrics); i++) {
		const struct metric *m = &tier_metrics[i];
		family(&o, m->name, m->type, m->help);
		for (int t = 0; t < KVT_NTIERS; t++) {
			sample_open(&o, m->name, "tier", kvt_tier_name(t));
			put(&o, "}");
			put_value(&o, &st->tier[t], m, st->tier[t].frame_bytes);
		}
	}
	latency_histogram(&o, st);
	device_metrics(&o, st);
	build_info(&o);

	if (!buf || o.pos >= len)
		return -ENOSPC;
	return (int)o.pos;
}
