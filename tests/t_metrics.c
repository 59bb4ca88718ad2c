/* SPDX-License-Identifier: MIT */
/*
 * The Prometheus exposition: kvt_stats_prometheus gives a document that a
 * strict checker of the text format (written here) accepts, for a zeroed
 * struct, a struct of known values (rendered exactly, ns as seconds,
 * frames as bytes, cumulative latency buckets) and a real pager's
 * snapshot. A buffer one byte short gives -ENOSPC and nothing is written
 * past len. Label values are escaped (reached through the file's static
 * helpers: the tier names never need it).
 */
#include <errno.h>
#include <math.h>
#include "common.h"

/* The file's static helpers, with its exported function renamed so that
 * this copy cannot clash with the library's. */
#define kvt_stats_prometheus t_metrics_copy
#include "ops/metrics.c"
#undef kvt_stats_prometheus

#include "prom_check.h"

/* The checker rejects what it must. */
static void t_checker(int arg)
{
#define H(n, t) "# HELP " n " h\n# TYPE " n " " t "\n"
	static const char *const good[] = {
		"",
		H("a_total", "counter") "a_total 1\n",
		H("a_total", "counter") "a_total{x=\"\\\\\\\"\\n\",y=\"\"} 1e3 1700000000\n",
		H("g", "gauge") "g -2\ng{k=\"v\"} NaN\ng{k=\"w\"} +Inf\n# a comment\n",
		H("h", "histogram") "h_bucket{le=\"1\"} 1\nh_bucket{le=\"2\"} 1\n"
		"h_bucket{le=\"+Inf\"} 3\nh_sum 4.5\nh_count 3\n",
		H("ns:x_total", "counter") "ns:x_total 0\n",
	};
	static const char *const bad[] = {
		"a_total 1\n",					/* no TYPE */
		H("a_total", "counter") "a_total 1",		/* no final newline */
		H("a_total", "counter") "\na_total 1\n",	/* empty line */
		"# HELP a h\n# TYPE a gauge\n# TYPE a gauge\na 1\n",
		"# HELP a h\n# HELP a h\n# TYPE a gauge\na 1\n",
		"# TYPE a gauge\na 1\n",			/* no HELP */
		"# HELP a h\na 1\n# TYPE a gauge\n",		/* TYPE after the sample */
		H("a", "counter") "a 1\n",			/* counter without _total */
		H("a_total", "gauge") "a_total 1\n",
		H("a", "summary") "a 1\n",
		H("1a", "gauge") "1a 1\n",
		H("a", "gauge") "a{1x=\"v\"} 1\n",
		H("a", "gauge") "a{__x=\"v\"} 1\n",
		H("a", "gauge") "a{x=\"v\",x=\"w\"} 1\n",
		H("a", "gauge") "a{x=\"v} 1\n",
		H("a", "gauge") "a{x=\"\\t\"} 1\n",
		H("a", "gauge") "a{x=v} 1\n",
		H("a", "gauge") "a one\n",
		H("a", "gauge") "a 1 x\n",
		H("a", "gauge") "a  1\n",
		H("a", "gauge") "a 1\na 2\n",			/* duplicate sample */
		H("a", "gauge") "a 1\n" H("b", "gauge") "b 1\na{x=\"y\"} 2\n",	/* two blocks */
		H("a_total", "counter") "a_total -1\n",
		H("h", "histogram") "h_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 0\nh_count 1\n",
		H("h", "histogram") "h_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\n"
		"h_bucket{le=\"+Inf\"} 1\nh_sum 0\nh_count 1\n",
		H("h", "histogram") "h_bucket{le=\"1\"} 1\nh_sum 0\nh_count 1\n",	/* no +Inf */
		H("h", "histogram") "h_bucket{le=\"+Inf\"} 2\nh_sum 0\nh_count 1\n",
		H("h", "histogram") "h_bucket{le=\"+Inf\"} 1\nh_count 1\n",		/* no _sum */
		H("h", "histogram") "h 1\n",
		H("h", "histogram") "h_bucket 1\n",
		H("h", "histogram") "h_bucket{le=\"x\"} 1\n",
	};
#undef H
	char why[256];
	for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++)
		if (prom_check(good[i], strlen(good[i]), why, sizeof(why))) {
			fprintf(stderr, "checker rejected:\n%s--\n%s\n", good[i], why);
			exit(1);
		}
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		if (!prom_check(bad[i], strlen(bad[i]), why, sizeof(why))) {
			fprintf(stderr, "checker accepted:\n%s--\n", bad[i]);
			exit(1);
		}
}

/* ------------------------------------------------------------------ */

static char doc[1 << 16];

/* kvt_stats_prometheus into doc, checked. Returns its length. */
static size_t render(const struct kvt_stats *st)
{
	char why[256];
	int n = kvt_stats_prometheus(st, doc, sizeof(doc));
	if (n < 0) {
		fprintf(stderr, "kvt_stats_prometheus: %s\n", strerror(-n));
		exit(1);
	}
	CHECK((size_t)n < sizeof(doc));
	CHECK_EQ(strlen(doc), n);
	if (prom_check(doc, (size_t)n, why, sizeof(why))) {
		fprintf(stderr, "%s\ninvalid exposition: %s\n", doc, why);
		exit(1);
	}
	return (size_t)n;
}

/* The document has this exact line. */
static void has_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void has_line(const char *fmt, ...)
{
	char want[512];
	va_list ap;
	want[0] = '\n';
	va_start(ap, fmt);
	vsnprintf(want + 1, sizeof(want) - 2, fmt, ap);
	va_end(ap);
	strcat(want, "\n");
	if (!strstr(doc, want)) {
		fprintf(stderr, "%s\n[%s] no line: %s", doc, t_sub, want + 1);
		exit(1);
	}
}

static unsigned count_lines(const char *prefix)
{
	unsigned n = 0;
	size_t pl = strlen(prefix);
	for (const char *s = doc; s && *s; s = strchr(s, '\n'), s = s ? s + 1 : s)
		n += !strncmp(s, prefix, pl);
	return n;
}

static void t_zeroed(int arg)
{
	struct kvt_stats st;
	memset(&st, 0, sizeof(st));
	render(&st);
	has_line("kvt_steps_total 0");
	has_line("kvt_stall_seconds_total 0");
	has_line("kvt_host_hugepages{mode=\"off\"} 1");
	has_line("kvt_host_hugepages{mode=\"thp\"} 0");
	for (int t = 0; t < KVT_NTIERS; t++) {
		has_line("kvt_tier_capacity_bytes{tier=\"%s\"} 0", kvt_tier_name(t));
		has_line("kvt_tier_io_latency_seconds_bucket{tier=\"%s\",le=\"+Inf\"} 0",
			 kvt_tier_name(t));
		has_line("kvt_tier_io_latency_seconds_sum{tier=\"%s\"} 0", kvt_tier_name(t));
		has_line("kvt_tier_io_latency_seconds_count{tier=\"%s\"} 0", kvt_tier_name(t));
	}
	/* One block per family: as many HELP as TYPE lines, each name once. */
	CHECK_EQ(count_lines("# HELP "), count_lines("# TYPE "));
	CHECK_EQ(count_lines("# HELP kvt_tier_hits_total "), 1);
	CHECK_EQ(count_lines("kvt_tier_hits_total{"), KVT_NTIERS);
	CHECK_EQ(count_lines("kvt_tier_io_latency_seconds_bucket{tier=\"host\","), KVT_LAT_BUCKETS);
	CHECK_EQ(count_lines("kvt_host_hugepages{"), 4);
	/* The build, once: the version the headers say, the features as the
	 * tools' --version reads them. */
	struct kvt_build b;
	kvt_build_get(&b);
	CHECK(!strcmp(b.version, KVT_VERSION_STRING));
	CHECK(!strcmp(kvt_version(), KVT_VERSION_STRING));
	CHECK(!strcmp(b.simd, "portable") || !strcmp(b.simd, "avx2") || !strcmp(b.simd, "avx512"));
	has_line("kvt_build_info{version=\"%s\",git=\"%s\",cuda=\"%s\",simd=\"%s\"} 1",
		 KVT_VERSION_STRING, b.git, b.cuda ? "yes" : "no", b.simd);
	CHECK_EQ(count_lines("kvt_build_info{"), 1);
}

static void fill(struct kvt_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->step = 1234567;
	st->seqs = 3;
	st->pages = 96;
	st->acquires = 5000;
	st->host_in_place = 70;
	st->prefetch_issued = 11;
	st->prefetch_hit = 7;
	st->prefetch_late = 2;
	st->prefetch_wasted = 1;
	st->prefetch_dropped = 4;
	st->lost_pages = 5;
	st->csum_failures = 6;
	st->io_errors = 8;
	st->short_ios = 9;
	st->enospc = 10;
	st->stall_ns = 2500000000ull;		/* 2.5 s */
	st->read_min_bytes = 987654321;
	st->read_steps = 4321;
	st->nvme_paused = 1;
	st->nvme_direct = 1;
	st->nvme_registered_files = 1;
	st->nvme_registered_buffers = 2;
	st->host_hugepages = KVT_HUGE_THP;
	st->host_mlocked = 1;
	st->host_numa_node = KVT_NUMA_INTERLEAVE;
	st->host_overhead_bytes = 2 << 20;
	st->meta_bytes = 123456;
	st->psi_watching = 1;
	st->host_releases = 1;
	st->psi_ok = 1;
	st->psi_some_avg10 = 12.5;
	st->psi_shrinks = 3;
	st->psi_grows = 2;
	st->host_limit_bytes = 8192;
	for (int t = 0; t < KVT_NTIERS; t++) {
		struct kvt_tier_stats *ts = &st->tier[t];
		ts->capacity = 8u << t;
		ts->online = 9u << t;
		ts->reserved = 12u << t;
		ts->shrinks = 30 + (uint64_t)t;
		ts->grows = 40 + (uint64_t)t;
		ts->used = 5u << t;
		ts->frame_bytes = 4096;
		ts->hits = 100 + (uint64_t)t;
		ts->misses = 200 + (uint64_t)t;
		ts->promotions = 300 + (uint64_t)t;
		ts->demotions = 400 + (uint64_t)t;
		ts->drops = 50 + (uint64_t)t;
		ts->bytes_in = 4096 * (600 + (uint64_t)t);
		ts->bytes_out = 4096 * (700 + (uint64_t)t);
	}
	/* fast: 1 under 1 us, 2 in [1, 2) us, 4 in [4, 8) us. */
	struct kvt_tier_stats *f = &st->tier[KVT_TIER_FAST];
	f->lat_hist[0] = 1;
	f->lat_hist[1] = 2;
	f->lat_hist[3] = 4;
	f->io_count = 7;
	f->io_ns_total = 1500;			/* 0.0000015 s */
	f->io_ns_max = 7999;
	/* nvme: the open-ended last bucket counts only in +Inf. */
	struct kvt_tier_stats *n = &st->tier[KVT_TIER_NVME];
	n->lat_hist[10] = 3;
	n->lat_hist[KVT_LAT_BUCKETS - 2] = 1;
	n->lat_hist[KVT_LAT_BUCKETS - 1] = 5;
	n->io_count = 9;
	n->io_ns_total = 12 * NS_PER_S + 345;
	n->io_ns_max = 9 * NS_PER_S;
}

static void t_filled(int arg)
{
	struct kvt_stats st;
	fill(&st);
	render(&st);
	has_line("kvt_steps_total 1234567");
	has_line("kvt_nvme_read_min_bytes_total 987654321");
	has_line("kvt_read_steps_total 4321");
	has_line("kvt_sequences 3");
	has_line("kvt_pages 96");
	has_line("kvt_acquired_pages_total 5000");
	has_line("kvt_host_in_place_pages_total 70");
	has_line("kvt_prefetch_issued_total 11");
	has_line("kvt_prefetch_hits_total 7");
	has_line("kvt_prefetch_late_total 2");
	has_line("kvt_prefetch_wasted_total 1");
	has_line("kvt_prefetch_dropped_total 4");
	has_line("kvt_lost_pages_total 5");
	has_line("kvt_checksum_failures_total 6");
	has_line("kvt_io_errors_total 8");
	has_line("kvt_short_ios_total 9");
	has_line("kvt_enospc_total 10");
	has_line("kvt_stall_seconds_total 2.5");
	has_line("kvt_nvme_paused 1");
	has_line("kvt_memory_pressure_watching 1");
	has_line("kvt_host_releases 1");
	has_line("kvt_memory_pressure_reading_ok 1");
	has_line("kvt_memory_pressure_some_avg10_ratio 0.125");
	has_line("kvt_memory_pressure_shrinks_total 3");
	has_line("kvt_memory_pressure_grows_total 2");
	has_line("kvt_host_limit_bytes 8192");
	has_line("kvt_nvme_direct 1");
	has_line("kvt_nvme_registered_files 1");
	has_line("kvt_nvme_registered_buffers 2");
	has_line("kvt_host_mlocked 1");
	has_line("kvt_host_numa_node -2");
	has_line("kvt_host_overhead_bytes 2097152");
	has_line("kvt_metadata_bytes 123456");
	has_line("kvt_host_hugepages{mode=\"thp\"} 1");
	has_line("kvt_host_hugepages{mode=\"off\"} 0");
	has_line("kvt_host_hugepages{mode=\"auto\"} 0");
	has_line("kvt_host_hugepages{mode=\"hugetlb\"} 0");
	for (int t = 0; t < KVT_NTIERS; t++) {
		const char *tn = kvt_tier_name(t);
		has_line("kvt_tier_capacity_bytes{tier=\"%s\"} %u", tn, 4096u * (8u << t));
		has_line("kvt_tier_used_bytes{tier=\"%s\"} %u", tn, 4096u * (5u << t));
		has_line("kvt_tier_online_bytes{tier=\"%s\"} %u", tn, 4096u * (9u << t));
		has_line("kvt_tier_reserved_bytes{tier=\"%s\"} %u", tn, 4096u * (12u << t));
		has_line("kvt_tier_shrinks_total{tier=\"%s\"} %d", tn, 30 + t);
		has_line("kvt_tier_grows_total{tier=\"%s\"} %d", tn, 40 + t);
		has_line("kvt_tier_frame_bytes{tier=\"%s\"} 4096", tn);
		has_line("kvt_tier_hits_total{tier=\"%s\"} %d", tn, 100 + t);
		has_line("kvt_tier_misses_total{tier=\"%s\"} %d", tn, 200 + t);
		has_line("kvt_tier_promotions_total{tier=\"%s\"} %d", tn, 300 + t);
		has_line("kvt_tier_demotions_total{tier=\"%s\"} %d", tn, 400 + t);
		has_line("kvt_tier_drops_total{tier=\"%s\"} %d", tn, 50 + t);
		has_line("kvt_tier_written_bytes_total{tier=\"%s\"} %d", tn, 4096 * (600 + t));
		has_line("kvt_tier_read_bytes_total{tier=\"%s\"} %d", tn, 4096 * (700 + t));
	}
	/* Buckets: le in seconds, counts cumulative. */
#define B(tier, le, n) has_line("kvt_tier_io_latency_seconds_bucket{tier=\"" tier "\",le=\"" le "\"} " #n)
	B("fast", "0.000001", 1);
	B("fast", "0.000002", 3);
	B("fast", "0.000004", 3);
	B("fast", "0.000008", 7);
	B("fast", "4.194304", 7);
	B("fast", "+Inf", 7);
	B("host", "0.000001", 0);
	B("host", "+Inf", 0);
	B("nvme", "0.000512", 0);
	B("nvme", "0.001024", 3);
	B("nvme", "2.097152", 3);
	B("nvme", "4.194304", 4);
	B("nvme", "+Inf", 9);
#undef B
	has_line("kvt_tier_io_latency_seconds_sum{tier=\"fast\"} 0.0000015");
	has_line("kvt_tier_io_latency_seconds_count{tier=\"fast\"} 7");
	has_line("kvt_tier_io_latency_seconds_sum{tier=\"nvme\"} 12.000000345");
	has_line("kvt_tier_io_latency_seconds_count{tier=\"nvme\"} 9");
	has_line("kvt_tier_io_latency_max_seconds{tier=\"fast\"} 0.000007999");
	has_line("kvt_tier_io_latency_max_seconds{tier=\"nvme\"} 9");

	/* Extremes: the largest counter, and buckets that add up to more or
	 * less than io_count still give a valid histogram. */
	st.step = UINT64_MAX;
	st.tier[KVT_TIER_FAST].io_count = 3;
	st.tier[KVT_TIER_HOST].lat_hist[0] = UINT64_MAX;
	st.tier[KVT_TIER_HOST].lat_hist[1] = 2;
	st.tier[KVT_TIER_HOST].io_count = UINT64_MAX;
	st.tier[KVT_TIER_NVME].io_count = 100;
	st.stall_ns = 1;
	st.host_hugepages = 7;			/* none of the modes */
	render(&st);
	has_line("kvt_steps_total 18446744073709551615");
	has_line("kvt_stall_seconds_total 0.000000001");
	has_line("kvt_tier_io_latency_seconds_bucket{tier=\"fast\",le=\"0.000002\"} 3");
	has_line("kvt_tier_io_latency_seconds_bucket{tier=\"fast\",le=\"+Inf\"} 3");
	has_line("kvt_tier_io_latency_seconds_bucket{tier=\"host\",le=\"0.000002\"} 18446744073709551615");
	has_line("kvt_tier_io_latency_seconds_bucket{tier=\"nvme\",le=\"+Inf\"} 100");
	CHECK_EQ(count_lines("kvt_host_hugepages{mode=\"thp\"} 0"), 1);
}

/* Sizes: exactly enough works; anything less is -ENOSPC and leaves every
 * byte from len on untouched. */
static void t_enospc(int arg)
{
	static char full[1 << 16], buf[(1 << 16) + 64];
	struct kvt_stats st;
	fill(&st);
	int n = kvt_stats_prometheus(&st, full, sizeof(full));
	CHECK(n > 0);
	size_t lens[] = { 0, 1, 2, 16, 100, (size_t)n / 2, (size_t)n - 1, (size_t)n, (size_t)n + 1,
			  (size_t)n + 2 };
	for (size_t i = 0; i < sizeof(lens) / sizeof(*lens); i++) {
		size_t len = lens[i];
		memset(buf, 0xa5, sizeof(buf));
		int r = kvt_stats_prometheus(&st, buf, len);
		if (len <= (size_t)n) {
			CHECK_EQ(r, -ENOSPC);
		} else {
			CHECK_EQ(r, n);
			CHECK(!memcmp(buf, full, (size_t)n + 1));
		}
		for (size_t k = len; k < sizeof(buf); k++)
			if ((unsigned char)buf[k] != 0xa5) {
				fprintf(stderr, "len %zu: byte %zu written\n", len, k);
				exit(1);
			}
		/* What fits is a NUL-terminated prefix of the document. */
		if (len && len <= (size_t)n) {
			CHECK_EQ(buf[len - 1], 0);
			CHECK(!memcmp(buf, full, len - 1));
		}
	}
	CHECK_EQ(kvt_stats_prometheus(&st, NULL, 0), -ENOSPC);
	CHECK_EQ(kvt_stats_prometheus(&st, NULL, sizeof(full)), -ENOSPC);
}

/* Label values and HELP text are escaped; the checker decodes them back. */
static void t_escape(int arg)
{
	static const char odd[] = "a\\b\"c\nd}e,f=g";
	char buf[256], why[256];
	struct out o = { buf, sizeof(buf), 0 };

	family(&o, "kvt_x", "gauge", "help \\ with\nnewline \"quoted\"");
	sample_open(&o, "kvt_x", "k", odd);
	put(&o, ",le2=\"");
	put_escaped(&o, "plain", 1);
	put(&o, "\"} 1\n");
	CHECK(o.pos < sizeof(buf));
	CHECK(!strcmp(buf, "# HELP kvt_x help \\\\ with\\nnewline \"quoted\"\n"
			   "# TYPE kvt_x gauge\n"
			   "kvt_x{k=\"a\\\\b\\\"c\\nd}e,f=g\",le2=\"plain\"} 1\n"));
	if (prom_check(buf, o.pos, why, sizeof(why))) {
		fprintf(stderr, "%s\n%s\n", buf, why);
		exit(1);
	}
	/* The checker's decoding gives the value back. */
	static struct prom p;
	p.cur = -1;
	struct label lab[MAXLAB];
	int nlab;
	const char *s = strchr(strstr(buf, "\nkvt_x{"), '{');
	CHECK(p_labels(&p, &s, lab, &nlab) == 0);
	CHECK_EQ(nlab, 2);
	CHECK(!strcmp(lab[0].name, "k") && !strcmp(lab[0].value, odd));

	/* Seconds: exact decimals without trailing zeros. */
	static const struct { uint64_t ns; const char *s; } secs[] = {
		{ 0, "0" }, { 1, "0.000000001" }, { 10, "0.00000001" }, { 1000, "0.000001" },
		{ 1000000000, "1" }, { 1500000000, "1.5" }, { 4194304000, "4.194304" },
		{ UINT64_MAX, "18446744073.709551615" },
	};
	for (size_t i = 0; i < sizeof(secs) / sizeof(*secs); i++) {
		o = (struct out){ buf, sizeof(buf), 0 };
		put_seconds(&o, secs[i].ns);
		if (strcmp(buf, secs[i].s)) {
			fprintf(stderr, "%llu ns: '%s', expected '%s'\n",
				(unsigned long long)secs[i].ns, buf, secs[i].s);
			exit(1);
		}
	}
}

/* A real pager's snapshot, after appends, steps and acquires. */
static void t_pager(int arg)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_stats st;
	struct kvt_pager *p;
	kvt_seq_t s;
	const unsigned layers = 2, npg = 16;

	t_config(&cfg, layers, 4, 4, 4 * npg);
	cfg.prefetch_depth = 1;
	p = t_open(&cfg, &dev);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	render(&st);
	CHECK_EQ(kvt_seq_open(p, &s), 0);
	t_append(p, s, &cfg, 7, 0, npg * cfg.page_tokens);
	for (int round = 0; round < 2; round++) {
		CHECK_EQ(kvt_pager_step(p), round + 1);
		CHECK_EQ(t_verify_seq(p, s, &cfg, 7, 0), layers * npg);
	}
	t_quiesce(p);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	render(&st);
	uint64_t pb = kvt_pager_page_bytes(p);
	has_line("kvt_steps_total 2");
	has_line("kvt_sequences 1");
	has_line("kvt_pages %u", layers * npg);
	has_line("kvt_acquired_pages_total %llu", (unsigned long long)st.acquires);
	CHECK_EQ(st.acquires, 2 * layers * npg);
	has_line("kvt_tier_capacity_bytes{tier=\"fast\"} %llu", (unsigned long long)(4 * pb));
	has_line("kvt_tier_online_bytes{tier=\"fast\"} %llu", (unsigned long long)(4 * pb));
	has_line("kvt_tier_reserved_bytes{tier=\"host\"} %llu", (unsigned long long)(4 * pb));
	has_line("kvt_tier_used_bytes{tier=\"nvme\"} %llu",
		 (unsigned long long)(st.tier[KVT_TIER_NVME].used * pb));
	for (int t = 0; t < KVT_NTIERS; t++) {
		has_line("kvt_tier_hits_total{tier=\"%s\"} %llu", kvt_tier_name(t),
			 (unsigned long long)st.tier[t].hits);
		has_line("kvt_tier_io_latency_seconds_count{tier=\"%s\"} %llu", kvt_tier_name(t),
			 (unsigned long long)st.tier[t].io_count);
		has_line("kvt_tier_io_latency_seconds_bucket{tier=\"%s\",le=\"+Inf\"} %llu",
			 kvt_tier_name(t), (unsigned long long)st.tier[t].io_count);
	}
	CHECK(st.tier[KVT_TIER_NVME].io_count > 0);
	CHECK_EQ(kvt_seq_close(p, s), 0);
	t_close(p, dev);
}

int main(void)
{
	static const struct t_case cases[] = {
		{ "checker", t_checker },
		{ "zeroed", t_zeroed },
		{ "filled", t_filled },
		{ "enospc", t_enospc },
		{ "escape", t_escape },
		{ "pager", t_pager },
	};
	return t_run_cases(cases, sizeof(cases) / sizeof(cases[0]), 0, 12);
}
