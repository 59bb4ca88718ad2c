/* SPDX-License-Identifier: MIT */
/*
 * kvt-trace: look into traces and convert them (docs/trace-format.md).
 *
 *   kvt-trace info FILE                      header, records per event, and
 *                                            hits/misses/moves per tier
 *   kvt-trace dump FILE [-n N]               one line per record (the first N)
 *   kvt-trace import oracle|mooncake IN OUT  libCacheSim oracleGeneral binary or
 *                                            Mooncake JSONL -> a kvtier trace
 *   kvt-trace export oracle IN OUT           the ACCESS records as oracleGeneral
 *
 * FILE and IN may be "-" (standard input) and zstd-compressed: published
 * oracleGeneral traces are *.oracleGeneral.zst. Their clock_time is in
 * seconds, and info and dump show an imported one's time as such.
 *
 * Exit 0, 1 on a bad or unreadable file (one message naming the file and
 * the byte offset or line), 2 on a usage error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pager/trace.h"
#include "pager/policy.h"
#include "tools/cli.h"

static const char *const ev_names[KVT_EV_MAX + 1] = {
	[KVT_EV_ACCESS] = "access", [KVT_EV_NEW] = "new", [KVT_EV_FREE] = "free",
	[KVT_EV_PROMOTE] = "promote", [KVT_EV_DEMOTE] = "demote", [KVT_EV_DROP] = "drop",
	[KVT_EV_SCORE] = "score", [KVT_EV_STEP] = "step", [KVT_EV_LOST] = "lost",
	[KVT_EV_GAP] = "gap", [KVT_EV_SEAL] = "seal",
};
static const char *const src_names[] = { "pager", "oracleGeneral", "mooncake", "synthetic" };
static const char *const tier_names[] = { "fast", "host", "nvme" };

static void usage(FILE *f)
{
	fprintf(f, "usage: kvt-trace info FILE\n"
		   "       kvt-trace dump FILE [-n N]\n"
		   "       kvt-trace import oracle|mooncake IN OUT\n"
		   "       kvt-trace export oracle IN OUT\n"
		   "  info    header, records per event, hits/misses/moves per tier\n"
		   "  dump    one line per record (the first N with -n)\n"
		   "  import  libCacheSim oracleGeneral (binary) or Mooncake JSONL -> kvtier trace\n"
		   "  export  a trace's ACCESS records as oracleGeneral (next_access_vtime computed)\n"
		   "FILE and IN may be - (standard input), and zstd-compressed (*.zst).\n"
		   "  --version  the version and the build's features\n");
}

static const char *tier_str(uint8_t t)
{
	return t < 3 ? tier_names[t] : "-";
}

static void u32_str(char *buf, size_t len, uint32_t v)
{
	if (v == KVT_REF_NONE)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%" PRIu32, v);
}

static int open_or_say(const char *path, struct kvt_trace *t)
{
	char err[512];
	int r = kvt_trace_open(path, t, err, sizeof(err));

	if (r)
		fprintf(stderr, "kvt-trace: %s\n", err);
	return r;
}

static int info(const char *path)
{
	struct kvt_trace t;
	struct kvt_trace_summary s;
	const struct kvt_trace_hdr *h = &t.hdr;
	char when[64] = "?";
	time_t secs;
	struct tm tm;

	if (open_or_say(path, &t))
		return 1;
	if (kvt_trace_summarize(&t, &s)) {
		fprintf(stderr, "kvt-trace: %s: out of memory\n", path);
		kvt_trace_close(&t);
		return 1;
	}
	secs = (time_t)(h->start_ns / 1000000000ull);
	if (h->start_ns && gmtime_r(&secs, &tm))
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
	printf("%s: kvtier trace version %u, source %s, %zu records of %u bytes from byte %" PRIu64
	       ", %" PRIu64 " dropped\n", path, h->version,
	       h->source < 4 ? src_names[h->source] : "?", t.nrec, h->rec_size, h->rec_off,
	       h->dropped);
	printf("started %s, seed %" PRIu64 ", config %u bytes (xxh3 %016" PRIx64 ")\n", when,
	       h->seed, h->config_len, h->config_hash);
	printf("geometry: page_tokens %u, layers %u, kv_heads %u, head_dim %u, kv_bytes %u, "
	       "page %u bytes\n", h->page_tokens, h->n_layers, h->n_kv_heads, h->head_dim,
	       h->kv_bytes, h->page_bytes);
	printf("tiers:");
	for (int ti = 0; ti < 3; ti++)
		printf("%s %s %u frames%s%s%s", ti ? "," : "", tier_names[ti], h->frames[ti],
		       h->policy[ti][0] ? " (" : "", h->policy[ti], h->policy[ti][0] ? ")" : "");
	printf("\n");
	/* oracleGeneral's clock_time is in seconds, and an import keeps it */
	if (t.nrec && h->source == KVT_SRC_ORACLE)
		printf("steps %" PRIu64 "..%" PRIu64 ", time %" PRIu64 " s .. %" PRIu64 " s, %" PRIu64
		       " distinct keys accessed\n", s.first_step, s.last_step, t.rec[0].time,
		       t.rec[t.nrec - 1].time, s.keys);
	else if (t.nrec)
		printf("steps %" PRIu64 "..%" PRIu64 ", time %.6f s .. %.6f s, %" PRIu64
		       " distinct keys accessed\n", s.first_step, s.last_step,
		       (double)t.rec[0].time / 1e9, (double)t.rec[t.nrec - 1].time / 1e9, s.keys);
	printf("%-8s %14s\n", "event", "records");
	for (int e = 1; e <= KVT_EV_MAX; e++)
		printf("%-8s %14" PRIu64 "\n", ev_names[e], s.events[e]);
	if (h->source == KVT_SRC_PAGER) {
		printf("\nper tier, counted as the pager's statistics count them:\n");
		printf("%-5s %12s %12s %12s %12s %12s %14s %14s\n", "tier", "hits", "misses",
		       "promotions", "demotions", "drops", "bytes in", "bytes out");
		for (int ti = 0; ti < 3; ti++)
			printf("%-5s %12" PRIu64 " %12" PRIu64 " %12" PRIu64 " %12" PRIu64 " %12" PRIu64
			       " %14" PRIu64 " %14" PRIu64 "\n", tier_names[ti], s.hits[ti],
			       s.misses[ti], s.promotions[ti], s.demotions[ti], s.drops[ti],
			       s.bytes_in[ti], s.bytes_out[ti]);
	}
	kvt_trace_close(&t);
	return 0;
}

static int dump(const char *path, uint64_t max)
{
	struct kvt_trace t;

	if (open_or_say(path, &t))
		return 1;
	printf("# %-10s %16s %10s %-7s %18s %6s %6s %6s %4s %4s %10s %10s %s\n", "record",
	       t.hdr.source == KVT_SRC_ORACLE ? "time_s" : "time_ns", "step", "event", "key", "seq", "layer", "index", "from", "to", "bytes",
	       "score", "flags");
	for (size_t i = 0; i < t.nrec && i < max; i++) {
		const struct kvt_trace_rec *r = &t.rec[i];
		char seq[16], layer[16], index[16], flags[32] = "";

		u32_str(seq, sizeof(seq), r->seq);
		u32_str(layer, sizeof(layer), r->layer);
		u32_str(index, sizeof(index), r->index);
		if (r->flags & KVT_TF_PREFETCH)
			strcat(flags, "prefetch,");
		if (r->flags & KVT_TF_SEALED)
			strcat(flags, "sealed,");
		if (r->flags & KVT_TF_WAIT)
			strcat(flags, "wait,");
		if (r->flags & ~(KVT_TF_PREFETCH | KVT_TF_SEALED | KVT_TF_WAIT))
			snprintf(flags + strlen(flags), sizeof(flags) - strlen(flags), "%#x,",
				 r->flags & ~(KVT_TF_PREFETCH | KVT_TF_SEALED | KVT_TF_WAIT));
		if (flags[0])
			flags[strlen(flags) - 1] = 0;
		else
			strcpy(flags, "-");
		printf("  %-10zu %16" PRIu64 " %10" PRIu64 " %-7s %#18" PRIx64 " %6s %6s %6s %4s %4s %10"
		       PRIu32 " %10.6g %s\n", i, r->time, r->step, ev_names[r->event], r->key, seq,
		       layer, index, tier_str(r->from), tier_str(r->to), r->bytes, (double)r->score,
		       flags);
	}
	kvt_trace_close(&t);
	return 0;
}

int main(int argc, char **argv)
{
	char err[512];
	int r;

	if (cli_version(argc, argv, "kvt-trace"))
		return 0;
	if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		usage(stdout);
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "info"))
		return info(argv[2]);
	if ((argc == 3 || argc == 5) && !strcmp(argv[1], "dump")) {
		uint64_t n = UINT64_MAX;
		if (argc == 5) {
			char *end;
			errno = 0;
			if (strcmp(argv[3], "-n") || !argv[4][0] || argv[4][0] == '-' ||
			    ((n = strtoull(argv[4], &end, 10)), errno || *end)) {
				usage(stderr);
				return 2;
			}
		}
		return dump(argv[2], n);
	}
	if (argc == 5 && !strcmp(argv[1], "import") &&
	    (!strcmp(argv[2], "oracle") || !strcmp(argv[2], "mooncake"))) {
		r = !strcmp(argv[2], "oracle")
			? kvt_trace_import_oracle(argv[3], argv[4], err, sizeof(err))
			: kvt_trace_import_mooncake(argv[3], argv[4], err, sizeof(err));
		if (r) {
			fprintf(stderr, "kvt-trace: %s\n", err);
			return 1;
		}
		return 0;
	}
	if (argc == 5 && !strcmp(argv[1], "export") && !strcmp(argv[2], "oracle")) {
		if (kvt_trace_export_oracle(argv[3], argv[4], err, sizeof(err))) {
			fprintf(stderr, "kvt-trace: %s\n", err);
			return 1;
		}
		return 0;
	}
	usage(stderr);
	return 2;
}
