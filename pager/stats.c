/* SPDX-License-Identifier: MIT */
/* Statistics: latency buckets and the JSON form of struct kvt_stats. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "pager/internal.h"
#include "pager/out.h"

KVT_API const char *kvt_tier_name(int tier)
{
	static const char *const names[KVT_NTIERS] = { "fast", "host", "nvme" };
	return tier >= 0 && tier < KVT_NTIERS ? names[tier] : "?";
}

void kvt_lat_record(struct kvt_tier_stats *st, uint64_t ns)
{
	uint64_t us = ns / 1000;
	unsigned b = us ? 64 - (unsigned)__builtin_clzll(us) : 0;	/* bucket b: us < 2^b */

	if (b >= KVT_LAT_BUCKETS)
		b = KVT_LAT_BUCKETS - 1;
	st->lat_hist[b]++;
	st->io_count++;
	st->io_ns_total += ns;
	if (ns > st->io_ns_max)
		st->io_ns_max = ns;
}

/* A JSON string: notes come from strerror and paths. */
static void put_str(struct out *o, const char *s)
{
	put(o, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			put(o, "\\%c", c);
		else if (c < 0x20)
			put(o, "\\u%04x", c);
		else
			put(o, "%c", c);
	}
	put(o, "\"");
}

#define U(name, v) put(&o, "\"%s\":%llu,", name, (unsigned long long)(v))

KVT_API int kvt_stats_json(const struct kvt_stats *st, char *buf, size_t len)
{
	struct out o = { buf, len, 0 };
	char dummy[1];

	if (!buf || !len) {
		o.buf = dummy;
		o.len = 0;
	}
	put(&o, "{");
	U("step", st->step);
	U("seqs", st->seqs);
	U("pages", st->pages);
	U("meta_bytes", st->meta_bytes);
	U("acquires", st->acquires);
	U("host_in_place", st->host_in_place);
	put(&o, "\"prefetch\":{");
	U("issued", st->prefetch_issued);
	U("hit", st->prefetch_hit);
	U("late", st->prefetch_late);
	U("wasted", st->prefetch_wasted);
	put(&o, "\"dropped\":%llu},", (unsigned long long)st->prefetch_dropped);
	U("lost_pages", st->lost_pages);
	U("csum_failures", st->csum_failures);
	U("io_errors", st->io_errors);
	U("short_ios", st->short_ios);
	U("nvme_ops", st->nvme_ops);
	U("nvme_requests", st->nvme_reqs);
	U("nvme_busy_ns", st->nvme_busy_ns);
	U("nvme_depth_ns", st->nvme_depth_ns);
	U("enospc", st->enospc);
	U("stall_ns", st->stall_ns);
	U("read_min_bytes", st->read_min_bytes);
	U("read_steps", st->read_steps);
	put(&o, "\"nvme\":{\"paused\":%d,\"direct\":%d,\"registered_files\":%d,"
		"\"registered_buffers\":%d,\"notes\":", st->nvme_paused, st->nvme_direct,
	    st->nvme_registered_files, st->nvme_registered_buffers);
	put_str(&o, st->nvme_notes);
	static const char *const huge[] = { "off", "auto", "hugetlb", "thp" };
	put(&o, "},\"host\":{\"hugepages\":\"%s\",\"mlocked\":%d,\"numa_node\":%d,"
		"\"overhead_bytes\":%llu,\"releases\":%d,\"notes\":",
	    huge[st->host_hugepages & 3], st->host_mlocked, st->host_numa_node,
	    (unsigned long long)st->host_overhead_bytes, st->host_releases);
	put_str(&o, st->host_notes);
	uint64_t h = st->psi_some_avg10 > 0 && st->psi_some_avg10 <= 100 ?
		     (uint64_t)(st->psi_some_avg10 * 100 + 0.5) : 0;
	put(&o, "},\"psi\":{\"watching\":%d,\"ok\":%d,\"some_avg10\":%llu.%02llu,",
	    st->psi_watching, st->psi_ok, (unsigned long long)(h / 100),
	    (unsigned long long)(h % 100));
	U("shrinks", st->psi_shrinks);
	U("grows", st->psi_grows);
	put(&o, "\"host_limit_bytes\":%llu", (unsigned long long)st->host_limit_bytes);
	put(&o, "},\"trace\":{\"on\":%d,", st->trace_on);
	U("records", st->trace_records);
	put(&o, "\"dropped\":%llu", (unsigned long long)st->trace_dropped);
	put(&o, "},\"device\":{\"name\":");
	put_str(&o, st->dev.name);
	put(&o, ",\"desc\":");
	put_str(&o, st->dev.desc);
	put(&o, ",");
	U("mem_total", st->dev.mem_total);
	U("mem_free", st->dev.mem_free);
	U("fast_alloc_bytes", st->fast_alloc_bytes);
	put(&o, "\"numa_node\":%d,\"host_addressable\":%d,\"host_in_place\":%d,"
		"\"in_place_gbps\":%.3f,\"copy_up_gbps\":%.3f,", st->dev.numa_node,
	    st->dev.host_addressable, st->dev.host_in_place, st->dev.in_place_gbps,
	    st->dev.copy_up_gbps);
	U("kernel_ns", st->dev.kernel_ns);
	static const char *const dir[KVT_DEV_DIRS] = { "h2d", "d2h", "d2d" };
	put(&o, "\"copies\":{");
	for (int d = 0; d < KVT_DEV_DIRS; d++)
		put(&o, "%s\"%s\":{\"count\":%llu,\"bytes\":%llu,\"ns\":%llu}", d ? "," : "",
		    dir[d], (unsigned long long)st->dev.copies[d],
		    (unsigned long long)st->dev.copy_bytes[d], (unsigned long long)st->dev.copy_ns[d]);
	put(&o, "}");
	put(&o, "},\"tiers\":{");
	for (int t = 0; t < KVT_NTIERS; t++) {
		const struct kvt_tier_stats *ts = &st->tier[t];
		put(&o, "%s\"%s\":{", t ? "," : "", kvt_tier_name(t));
		U("capacity", ts->capacity);
		U("online", ts->online);
		U("reserved", ts->reserved);
		U("shrinks", ts->shrinks);
		U("grows", ts->grows);
		U("used", ts->used);
		U("stage", ts->stage);
		U("frame_bytes", ts->frame_bytes);
		U("hits", ts->hits);
		U("misses", ts->misses);
		U("promotions", ts->promotions);
		U("demotions", ts->demotions);
		U("drops", ts->drops);
		U("bytes_in", ts->bytes_in);
		U("bytes_out", ts->bytes_out);
		U("io_count", ts->io_count);
		U("io_ns_total", ts->io_ns_total);
		U("io_ns_max", ts->io_ns_max);
		put(&o, "\"lat_hist_log2_us\":[");
		for (int b = 0; b < KVT_LAT_BUCKETS; b++)
			put(&o, "%s%llu", b ? "," : "", (unsigned long long)ts->lat_hist[b]);
		put(&o, "]}");
	}
	put(&o, "}}");
	if (!buf || o.pos >= len)
		return -ENOSPC;
	return (int)o.pos;
}
