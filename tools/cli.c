/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu/kernels.h"
#include "pager/build.h"
#include "tools/cli.h"

int cli_bar_on;

void cli_blas_core(char **argv)
{
	const char *want = kvt_blas_core_wanted(), *keep = getenv("KVT_BLAS_KEEP");

	if (!want || getenv("OPENBLAS_CORETYPE") || (keep && !strcmp(keep, "1")))
		return;
	if (setenv("KVT_BLAS_CHOSE", kvt_blas_core(), 1) ||
	    setenv("OPENBLAS_CORETYPE", want, 1))
		return;
	execv("/proc/self/exe", argv);
	/* Could not start again: run on OpenBLAS's choice, which the kernels
	 * line then names as weaker than the cpu. */
	unsetenv("OPENBLAS_CORETYPE");
	unsetenv("KVT_BLAS_CHOSE");
}

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
	if (st->read_steps) {
		double rd = (double)st->tier[KVT_TIER_NVME].bytes_out / (double)st->read_steps;
		double mn = (double)st->read_min_bytes / (double)st->read_steps;

		fprintf(f, "\nnvme read %.1f MB a step, the least it had to read %.1f MB a step "
			"(what fast and host, less their stage, cannot hold)%s",
			rd / 1e6, mn / 1e6, mn > 0 ? "" : ": none");
		if (mn > 0)
			fprintf(f, "; %.2f times that", rd / mn);
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
	cli_print_device(f, st);
}

void cli_print_decode_io(FILE *f, const struct kvt_stats *a, const struct kvt_stats *b,
			 unsigned steps, double s)
{
	const struct kvt_tier_stats *na = &a->tier[KVT_TIER_NVME], *nb = &b->tier[KVT_TIER_NVME];
	double rd = (double)(nb->bytes_out - na->bytes_out);
	double io = rd + (double)(nb->bytes_in - na->bytes_in);
	double mn = (double)(b->read_min_bytes - a->read_min_bytes);
	double busy = (double)(b->nvme_busy_ns - a->nvme_busy_ns) / 1e9;

	if (!steps || s <= 0 || rd <= 0 || busy <= 0)
		return;
	double step = s / steps, rate = io / busy, least = mn / steps / rate;

	fprintf(f, "decode over nvme: %.1f ms a step, the disk busy %.0f %% of it at %.2f GB/s; "
		"the least a step had to read, %.1f MB, takes %.1f ms at that rate",
		step * 1e3, 100 * busy / s, rate / 1e9, mn / steps / 1e6, least * 1e3);
	if (least > 0)
		fprintf(f, ": the step is %.2f times that", step / least);
	fputc('\n', f);
}

/* GB/s of bytes moved in ns, 0 when nothing was timed. */
static double gbps(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0.0;
}

void cli_print_device(FILE *f, const struct kvt_stats *st)
{
	const struct kvt_device_info *d = &st->dev;

	fprintf(f, "device: %s (%s); fast tier %.0f MiB of device memory", d->name, d->desc,
		(double)st->fast_alloc_bytes / (1 << 20));
	if (d->mem_total)
		fprintf(f, ", %.1f of %.1f GiB free", d->mem_free / 1073741824.0,
			d->mem_total / 1073741824.0);
	/* Device-to-device copies run on the upward engine and its time
	 * counts them: its rate is over both. */
	fprintf(f, "\n        copies up %.1f MB and on the device %.1f MB at %.1f GB/s, down %.1f MB "
		"at %.1f GB/s", d->copy_bytes[KVT_DEV_H2D] / 1e6, d->copy_bytes[KVT_DEV_D2D] / 1e6,
		gbps(d->copy_bytes[KVT_DEV_H2D] + d->copy_bytes[KVT_DEV_D2D], d->copy_ns[KVT_DEV_H2D]),
		d->copy_bytes[KVT_DEV_D2H] / 1e6, gbps(d->copy_bytes[KVT_DEV_D2H], d->copy_ns[KVT_DEV_D2H]));
	if (d->kernel_ns)	/* the cpu's kernels are not timed: they are the run */
		fprintf(f, "; kernels %.1f ms (%.3f ms a step)", d->kernel_ns / 1e6,
			st->step ? d->kernel_ns / 1e6 / (double)st->step : 0.0);
	if (d->in_place_gbps > 0 || d->copy_up_gbps > 0)
		fprintf(f, "; host tier %s (in place %.1f GB/s, copy up %.1f GB/s at open)",
			d->host_in_place ? "read in place" : "copied up", d->in_place_gbps,
			d->copy_up_gbps);
	fputc('\n', f);
}

int cli_version(int argc, char **argv, const char *tool)
{
	struct kvt_build b;

	if (argc < 2 || strcmp(argv[1], "--version"))
		return 0;
	kvt_build_get(&b);
	printf("%s (kvtier) %s\n", tool, b.version);
	printf("git: %s\n", b.git[0] ? b.git : "unknown (not built in a git checkout)");
	printf("features: cuda plug-in %s, simd %s\n", b.cuda ? "built" : "not built", b.simd);
	return 1;
}
