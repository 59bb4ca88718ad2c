/* SPDX-License-Identifier: MIT */
/*
 * kvt-bench sim: how fast kvt-sim replays, per core, next to libCacheSim.
 *
 * The bench writes a seeded Zipf trace (alpha 1.0 by default, a million
 * objects, 50 million requests) as a libCacheSim oracleGeneral file, loads
 * it as kvt-sim does (mmap, every key remapped to a dense id in one hash
 * pass: timed and reported on its own), then replays it single-threaded
 * through each policy's ops table, a one-tier cache of --size, with
 * libCacheSim's miss model, which is the pager's too (a miss inserts; no
 * access), a few times each; the median counts. The machine's reference,
 * in the same run: one pass that reads every record's key from the same
 * mapped file, and one that reads every remapped id (what a replay can do
 * at best without a cache).
 *
 * libCacheSim's figures (the issue's, for this kind of 2-core machine,
 * single-threaded): LRU 6, CLOCK 7, SIEVE 8, S3-FIFO 2.5 M req/s; the goal
 * is twice that.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pager/policy.h"
#include "pager/sim.h"
#include "tools/bench.h"

struct ref_fig {
	const char *policy;
	double libcachesim, goal;	/* M requests/s */
};

static const struct ref_fig figs[] = {
	{ "lru", 6, 12 }, { "clock", 7, 14 }, { "sieve", 8, 16 }, { "s3fifo", 2.5, 5 },
};

static double fig_of(const char *pol, int goal)
{
	for (size_t i = 0; i < sizeof(figs) / sizeof(figs[0]); i++)
		if (!strcmp(figs[i].policy, pol))
			return goal ? figs[i].goal : figs[i].libcachesim;
	return 0;
}

/* CPU seconds of the calling thread: on a shared 2-core machine wall time
 * also counts what the other processes took. */
static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A pass over the mapped oracleGeneral file reading each record's key:
 * seconds. The sum keeps the compiler from dropping the loop. */
static double read_pass(const char *path, uint64_t *sum)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	double t0;
	uint64_t s = 0;

	if (fd < 0 || fstat(fd, &st)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	const uint8_t *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE,
				fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -1;
	t0 = cpu_now();
	for (size_t i = 0, n = (size_t)st.st_size / 24; i < n; i++) {
		uint64_t k;
		memcpy(&k, m + i * 24 + 4, sizeof(k));
		s += k;
	}
	t0 = cpu_now() - t0;
	munmap((void *)m, (size_t)st.st_size);
	*sum += s;
	return t0;
}

/* Write keys as oracleGeneral (next_access_vtime left -1: not needed). */
static int write_trace(const char *path, const uint64_t *keys, size_t n)
{
	static uint8_t buf[24 * 8192];
	FILE *f = fopen(path, "w");
	size_t k = 0;

	if (!f)
		return -errno;
	for (size_t i = 0; i < n; i++) {
		uint32_t tm = (uint32_t)i, sz = 4096;
		int64_t nx = -1;
		memcpy(buf + k * 24, &tm, 4);
		memcpy(buf + k * 24 + 4, &keys[i], 8);
		memcpy(buf + k * 24 + 12, &sz, 4);
		memcpy(buf + k * 24 + 16, &nx, 8);
		if (++k == 8192 || i + 1 == n) {
			if (fwrite(buf, 24, k, f) != k)
				break;
			k = 0;
		}
	}
	if (ferror(f) | fclose(f))
		return -EIO;
	return 0;
}

int bench_sim(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "requests", required_argument, 0, 'n' }, { "objects", required_argument, 0, 'm' },
		{ "alpha", required_argument, 0, 'a' }, { "seed", required_argument, 0, 's' },
		{ "size", required_argument, 0, 'z' }, { "policies", required_argument, 0, 'p' },
		{ "repeat", required_argument, 0, 'r' }, { "trace", required_argument, 0, 't' },
		{ "dir", required_argument, 0, 'd' }, { "json", no_argument, 0, 'j' },
		{ "help", no_argument, 0, 'h' }, { 0 } };
	uint64_t n = 50000000, objects = 1000000, seed = 42;
	double alpha = 1.0, size_pct = 10;
	int repeat = 3, json = 0, c;
	char pol_buf[512] = "lru,clock,s3fifo,sieve", path[4096] = "";
	const char *given = NULL, *dir = NULL;

	optind = 1;
	while ((c = getopt_long(argc, argv, "jh", lo, NULL)) != -1) {
		char *end = NULL;
		switch (c) {
		case 'h':
			printf("usage: kvt-bench sim [--requests 50000000] [--objects 1000000] "
			       "[--alpha 1.0]\n       [--seed 42] [--size 10%%] [--policies "
			       "lru,clock,s3fifo,sieve] [--repeat 3]\n       [--trace FILE.oracleGeneral] "
			       "[--dir DIR] [--json]\n"
			       "replay speed per policy, single-threaded, on a Zipf trace written as "
			       "oracleGeneral\n(docs/kvt-sim.md)\n");
			return 0;
		case 'n': n = strtoull(optarg, &end, 10); break;
		case 'm': objects = strtoull(optarg, &end, 10); break;
		case 's': seed = strtoull(optarg, &end, 10); break;
		case 'a': alpha = strtod(optarg, &end); break;
		case 'z': size_pct = strtod(optarg, &end); if (*end == '%') end++; break;
		case 'r': repeat = (int)strtol(optarg, &end, 10); break;
		case 'p': snprintf(pol_buf, sizeof(pol_buf), "%s", optarg); end = (char *)""; break;
		case 't': given = optarg; end = (char *)""; break;
		case 'd': dir = optarg; end = (char *)""; break;
		case 'j': json = 1; end = (char *)""; break;
		default: return 2;
		}
		if (!end || *end || !n || !objects || objects >= UINT32_MAX || n >= UINT32_MAX ||
		    repeat < 1 || repeat > 99 || !(size_pct > 0 && size_pct <= 100) ||
		    !(alpha >= 0 && alpha <= 10)) {
			fprintf(stderr, "kvt-bench sim: bad value '%s'\n", optarg ? optarg : "");
			return 2;
		}
	}
	char *pol[16];
	int np = 0;
	for (char *tok = strtok(pol_buf, ","); tok && np < 16; tok = strtok(NULL, ",")) {
		if (!kvt_policy_find(tok)) {
			fprintf(stderr, "kvt-bench sim: no such policy '%s'\n", tok);
			return 2;
		}
		pol[np++] = tok;
	}

	double gen_s = 0, write_s = 0;
	if (given) {
		snprintf(path, sizeof(path), "%s", given);
	} else {
		const char *d = dir ? dir : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
		snprintf(path, sizeof(path), "%s/kvt-bench-sim-%d.oracle", d, (int)getpid());
		uint64_t *keys = malloc(n * sizeof(*keys));
		if (!keys) {
			fprintf(stderr, "kvt-bench sim: out of memory for %llu requests\n",
				(unsigned long long)n);
			return 1;
		}
		double t0 = cli_now();
		int r = kvt_sim_gen_zipf(n, objects, alpha, seed, keys);
		gen_s = cli_now() - t0;
		if (!r) {
			t0 = cli_now();
			r = write_trace(path, keys, n);
			write_s = cli_now() - t0;
		}
		free(keys);
		if (r) {
			fprintf(stderr, "kvt-bench sim: %s: %s\n", path, strerror(-r));
			unlink(path);
			return 1;
		}
	}

	/* Load: mmap + remap, timed (the median of the repeats: the first one
	 * also warms the page cache). */
	struct kvt_sim_trace t = { 0 };
	double loads[99], loadw[99];
	char err[512];
	for (int i = 0; i < repeat; i++) {
		if (i)
			kvt_sim_trace_free(&t);
		double c0 = cpu_now();
		int r = kvt_sim_trace_oracle(path, &t, err, sizeof(err));
		loads[i] = cpu_now() - c0;
		if (r) {
			fprintf(stderr, "kvt-bench sim: %s\n", err);
			if (!given)
				unlink(path);
			return 1;
		}
		loadw[i] = t.load_s;
	}
	double load_s = bench_median(loads, repeat), load_wall = bench_median(loadw, repeat);
	if (given)
		objects = t.npages;	/* what the given trace has */

	/* References: the file read pass and an id read pass. */
	double rd[99], idp[99];
	uint64_t sum = 0;
	for (int i = 0; i < repeat; i++) {
		rd[i] = read_pass(path, &sum);
		double t0 = cpu_now();
		uint64_t s = 0;
		for (size_t k = 0; k < t.n; k++)
			s += t.id[k];
		idp[i] = cpu_now() - t0;
		sum += s;
	}
	double read_s = bench_median(rd, repeat), id_s = bench_median(idp, repeat);
	uint64_t frames = (uint64_t)(size_pct / 100.0 * t.npages);
	if (!frames)
		frames = 1;

	struct row {
		double mrps, miss, s, wall;
	} rows[16];
	for (int p = 0; p < np; p++) {
		double v[99], w[99];
		struct kvt_sim_result res;
		for (int i = 0; i < repeat; i++) {
			struct kvt_sim_config cfg = { .ntiers = 1, .backed = 1 };
			snprintf(cfg.tier[0].policy, sizeof(cfg.tier[0].policy), "%s", pol[p]);
			cfg.tier[0].frames = frames;
			double t0 = cli_now(), c0 = cpu_now();
			if (kvt_sim_run(&cfg, &t, &res, err, sizeof(err))) {
				fprintf(stderr, "kvt-bench sim: %s: %s\n", pol[p], err);
				kvt_sim_trace_free(&t);
				if (!given)
					unlink(path);
				return 1;
			}
			v[i] = cpu_now() - c0;
			w[i] = cli_now() - t0;
		}
		rows[p].s = bench_median(v, repeat);
		rows[p].wall = bench_median(w, repeat);
		rows[p].mrps = (double)t.n / rows[p].s / 1e6;
		rows[p].miss = (double)res.tier[0].misses / (double)res.refs;
	}

	double mb = (double)t.n * 24 / (1 << 20);
	if (json) {
		printf("{\"bench\": \"sim\", \"trace\": \"%s\", \"requests\": %zu, \"objects\": %llu, "
		       "\"objects_seen\": %u, "
		       "\"alpha\": %g, \"seed\": %llu, \"frames\": %llu, \"size_pct\": %g, "
		       "\"repeat\": %d, \"timing\": \"thread CPU time\", "
		       "\"gen_s\": %.3f, \"write_s\": %.3f, \"load_s\": %.3f, \"load_wall_s\": %.3f, "
		       "\"load_mrps\": %.2f, \"read_pass_mrps\": %.2f, \"read_pass_mibps\": %.0f, "
		       "\"id_pass_mrps\": %.2f, \"policies\": [",
		       given ? path : "generated", t.n, (unsigned long long)objects, t.npages, alpha,
		       (unsigned long long)seed, (unsigned long long)frames, size_pct,
		       repeat, gen_s, write_s, load_s, load_wall, (double)t.n / load_s / 1e6,
		       (double)t.n / read_s / 1e6, mb / read_s, (double)t.n / id_s / 1e6);
		for (int p = 0; p < np; p++)
			printf("%s\n  {\"policy\": \"%s\", \"replay_s\": %.3f, \"mrps\": %.2f, "
			       "\"wall_mrps\": %.2f, \"goal_mrps\": %.1f, \"libcachesim_mrps\": %.1f, "
			       "\"miss_ratio\": %.4f, \"with_load_mrps\": %.2f}", p ? "," : "", pol[p],
			       rows[p].s, rows[p].mrps, (double)t.n / rows[p].wall / 1e6,
			       fig_of(pol[p], 1), fig_of(pol[p], 0), rows[p].miss,
			       (double)t.n / (rows[p].s + load_s) / 1e6);
		printf("\n]}\n");
	} else {
		printf("kvt-bench sim: %zu requests, Zipf alpha %g over %llu objects (%u seen), seed "
		       "%llu, oracleGeneral %.0f MiB%s\n", t.n, alpha, (unsigned long long)objects,
		       t.npages, (unsigned long long)seed, mb, given ? " (given)" : "");
		if (!given)
			printf("  generated in %.2f s, written in %.2f s\n", gen_s, write_s);
		printf("  times are the thread's CPU time (per core), medians of %d; wall-clock M req/s "
		       "beside them\n", repeat);
		printf("  load (mmap + remap of every key to a dense id), not in the replay "
		       "figures: %.2f s CPU (%.2f s wall) = %.1f M req/s\n", load_s, load_wall,
		       (double)t.n / load_s / 1e6);
		printf("  reference, same file, same run: reading every key of the mapped file "
		       "%.1f M req/s (%.0f MiB/s); every remapped id %.1f M req/s\n",
		       (double)t.n / read_s / 1e6, mb / read_s, (double)t.n / id_s / 1e6);
		printf("  one tier of %llu frames (%g%% of the objects seen), single-threaded\n\n",
		       (unsigned long long)frames, size_pct);
		printf("%-10s %10s %10s %10s %12s %9s %10s %14s\n", "policy", "M req/s", "wall M/s",
		       "goal", "libCacheSim", "vs goal", "miss ratio", "with load M/s");
		for (int p = 0; p < np; p++) {
			double g = fig_of(pol[p], 1);
			printf("%-10s %10.2f %10.2f %10.1f %12.1f %8.2fx %10.4f %14.2f\n", pol[p],
			       rows[p].mrps, (double)t.n / rows[p].wall / 1e6, g, fig_of(pol[p], 0),
			       g > 0 ? rows[p].mrps / g : 0, rows[p].miss,
			       (double)t.n / (rows[p].s + load_s) / 1e6);
		}
	}
	if (sum == 42)
		fputc(' ', stderr);
	kvt_sim_trace_free(&t);
	if (!given)
		unlink(path);
	return 0;
}
