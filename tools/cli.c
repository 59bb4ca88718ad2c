/* SPDX-License-Identifier: MIT */
#include <time.h>

#include "tools/cli.h"

int cli_bar_on;

double cli_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_bar(const char *what, double frac, const char *extra)
{
	int w = 30, n = (int)(frac * w + 0.5), i;

	if (!cli_bar_on)
		return;
	fprintf(stderr, "\r%-8s [", what);
	for (i = 0; i < w; i++)
		fputc(i < n ? '#' : ' ', stderr);
	fprintf(stderr, "] %3.0f%% %s\033[K", frac * 100, extra);
	fflush(stderr);
}

void cli_bar_done(void)
{
	if (cli_bar_on)
		fputc('\n', stderr);
}

void cli_print_tiers(FILE *f, const struct kvt_stats *st)
{
	static const char *const huge[] = { "none", "auto", "hugetlb", "thp" };
	int t;

	fprintf(f, "%-5s %9s %9s %10s %10s %6s %9s %9s %9s %9s %9s\n", "tier", "MiB", "used MiB",
		"hits", "misses", "hit%", "promoted", "demoted", "MB in", "MB out", "avg us");
	for (t = 0; t < KVT_NTIERS; t++) {
		const struct kvt_tier_stats *ts = &st->tier[t];
		double look = (double)(ts->hits + ts->misses);

		fprintf(f, "%-5s %9.0f %9.0f %10llu %10llu %6.1f %9llu %9llu %9.0f %9.0f %9.0f\n",
			kvt_tier_name(t), (double)(ts->capacity * ts->frame_bytes) / (1 << 20),
			(double)(ts->used * ts->frame_bytes) / (1 << 20),
			(unsigned long long)ts->hits, (unsigned long long)ts->misses,
			look ? 100.0 * (double)ts->hits / look : 0.0,
			(unsigned long long)ts->promotions, (unsigned long long)ts->demotions,
			(double)ts->bytes_in / 1e6, (double)ts->bytes_out / 1e6,
			ts->io_count ? (double)ts->io_ns_total / (double)ts->io_count / 1e3 : 0.0);
	}
	fprintf(f, "\nprefetch: issued %llu, hit %llu, late %llu, wasted %llu, dropped %llu; "
		"stalled %.0f ms; lost pages %llu\n",
		(unsigned long long)st->prefetch_issued, (unsigned long long)st->prefetch_hit,
		(unsigned long long)st->prefetch_late, (unsigned long long)st->prefetch_wasted,
		(unsigned long long)st->prefetch_dropped, (double)st->stall_ns / 1e6,
		(unsigned long long)st->lost_pages);
	fprintf(f, "nvme: %s I/O, registered files %s, buffers %s; %llu reads and writes, "
		"%.1f pages each, %.1f in flight while busy (%.1f s)%s%s\n",
		st->nvme_direct ? "O_DIRECT" : "buffered", st->nvme_registered_files ? "yes" : "no",
		st->nvme_registered_buffers ? "yes" : "no", (unsigned long long)st->nvme_ops,
		st->nvme_ops ? (double)st->nvme_reqs / (double)st->nvme_ops : 0.0,
		st->nvme_busy_ns ? (double)st->nvme_depth_ns / (double)st->nvme_busy_ns : 0.0,
		(double)st->nvme_busy_ns / 1e9, st->nvme_notes[0] ? "; " : "", st->nvme_notes);
	fprintf(f, "host: huge pages %s, mlocked %s%s%s\n", huge[st->host_hugepages & 3],
		st->host_mlocked ? "yes" : "no", st->host_notes[0] ? "; " : "", st->host_notes);
}
