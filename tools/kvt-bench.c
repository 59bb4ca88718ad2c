/* SPDX-License-Identifier: MIT */
/*
 * kvt-bench: measurements of the pager, each printed beside the reference
 * it answers to, measured in the same run.
 *
 *   kvt-bench io     NVMe tier I/O path vs fio
 *   kvt-bench copy   fast<->host copies vs memcpy
 *   kvt-bench pager  acquire+release of resident pages per second
 *   kvt-bench scan   the full-attention scan over three tiers vs its bound
 *   kvt-bench decode   decode tokens/s at long contexts over tiers vs its bound
 *   kvt-bench resume   first token of a conversation parked on NVMe vs prefill
 *   kvt-bench serve    many conversations (parked or not), a shared prompt (fork or copy)
 *   kvt-bench sim    kvt-sim's replay rate against libCacheSim's
 *   kvt-bench prefill  prefill vs sgemm, decode vs the read bandwidth
 *   kvt-bench all    each of them with short defaults
 *
 * Every subcommand takes --json (one JSON object per measurement).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <kvt/pager.h>
#include "kernels/device.h"
#include "pager/host.h"
#include "tools/bench.h"

static int json;

static void die(const char *what, int r)
{
	fprintf(stderr, "kvt-bench: %s: %s\n", what, strerror(r < 0 ? -r : r));
	exit(1);
}

/* Read every byte of a page, as attention would: 4 independent lanes so
 * the loop runs at memory speed. */
static uint64_t touch(const void *p, size_t bytes)
{
	const uint64_t *q = p;
	uint64_t a = 0, b = 0, c = 0, d = 0;
	for (size_t i = 0; i + 4 <= bytes / 8; i += 4) {
		a += q[i];
		b ^= q[i + 1];
		c += q[i + 2];
		d ^= q[i + 3];
	}
	return a + b + c + d;
}

/* ---------------------------------------------------------------------
 * copy: the device copy engine, as the pager drives it (one copy a page),
 * against its reference measured in the same run: memcpy on the cpu
 * device; on a GPU one copy of the whole buffer (a plain cudaMemcpyAsync
 * of pinned memory, the rate the copy engine can reach).
 */

static int bench_copy(int argc, char **argv)
{
	uint64_t sizes[16];
	int nsizes = bench_parse_list("64K,256K,1M,2M", sizes, 16);
	uint64_t total = 256ull << 20;
	int reps = 5;
	const char *devname = "cpu";
	static const struct option opts[] = {
		{ "sizes", required_argument, 0, 's' }, { "total", required_argument, 0, 't' },
		{ "repeat", required_argument, 0, 'r' }, { "json", no_argument, 0, 'j' },
		{ "device", required_argument, 0, 'd' }, { 0 } };
	int c;

	while ((c = getopt_long(argc, argv, "s:t:r:jd:", opts, NULL)) != -1) {
		switch (c) {
		case 's': nsizes = bench_parse_list(optarg, sizes, 16); break;
		case 't':
			if (bench_parse_size(optarg, &total) || !total) {
				fprintf(stderr, "kvt-bench copy: bad --total '%s'\n", optarg);
				return 2;
			}
			break;
		case 'r': reps = atoi(optarg); break;
		case 'j': json = 1; break;
		case 'd': devname = optarg; break;
		default: return 2;
		}
	}
	if (nsizes <= 0 || reps < 1) {
		fprintf(stderr, "kvt-bench copy: bad --sizes or --repeat\n");
		return 2;
	}
	struct kvt_device *dev;
	char why[512];
	void *dmem;
	int r = kvt_device_open_why(devname, 0, &dev, why, sizeof(why));
	if (r) {
		fprintf(stderr, "kvt-bench copy: --device %s: %s\n", devname, why);
		return 1;
	}
	const int hv = dev->ops->host_visible;
	r = dev->ops->alloc(dev->ctx, total, &dmem);
	if (r)
		die("device alloc", r);
	uint8_t *host = mmap(NULL, total, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (host == MAP_FAILED)
		die("mmap", -errno);
	memset(host, 1, total);
	/* Pinned, as the pager's host tier is. */
	if (dev->ops->register_host && (r = dev->ops->register_host(dev->ctx, host, total)))
		die("registering host memory", r);
	if (hv)
		memset(dmem, 2, total);

	if (!json)
		printf("device %s: %s\n%-6s %-4s %12s %12s %7s\n", kvt_device_name(dev),
		       hv ? "reference memcpy" : "reference one copy of the whole buffer",
		       "size", "dir", "copy GB/s", "ref GB/s", "ratio");
	for (int si = 0; si < nsizes; si++) {
		uint64_t sz = sizes[si], n = total / sz;
		for (int dir = 0; dir < 2; dir++) {
			double tc[32], tm[32];
			uint8_t *dst = dir == KVT_H2D ? dmem : host;
			const uint8_t *src = dir == KVT_H2D ? host : dmem;
			for (int k = 0; k < reps && k < 32; k++) {
				/* Alternate the two so drift hits both alike. */
				uint64_t f = 0;
				double t0 = cli_now();
				for (uint64_t i = 0; i < n; i++)
					if (kvt_dev_copy_async(dev, dst + i * sz, src + i * sz, sz, dir, &f))
						die("copy", -EIO);
				if (kvt_dev_fence_wait(dev, f))
					die("copy", -EIO);
				tc[k] = cli_now() - t0;
				t0 = cli_now();
				if (hv) {
					for (uint64_t i = 0; i < n; i++)
						memcpy(dst + i * sz, src + i * sz, sz);
				} else if ((r = kvt_dev_copy(dev, dst, src, n * sz, dir))) {
					die("copy", r);
				}
				tm[k] = cli_now() - t0;
			}
			int nk = reps < 32 ? reps : 32;
			double bc = (double)(n * sz) / bench_median(tc, nk) / 1e9;
			double bm = (double)(n * sz) / bench_median(tm, nk) / 1e9;
			char hb[32];
			bench_fmt_size(sz, hb, sizeof(hb));
			if (json)
				printf("{\"bench\":\"copy\",\"device\":\"%s\",\"size\":%llu,\"dir\":\"%s\","
				       "\"copy_gbps\":%.3f,\"ref\":\"%s\",\"ref_gbps\":%.3f,\"ratio\":%.3f}\n",
				       kvt_device_name(dev), (unsigned long long)sz, dir ? "d2h" : "h2d", bc,
				       hv ? "memcpy" : "one copy", bm, bc / bm);
			else
				printf("%-6s %-4s %12.2f %12.2f %7.2f\n", hb, dir ? "d2h" : "h2d", bc, bm, bc / bm);
			fflush(stdout);
		}
	}
	if (dev->ops->unregister_host)
		dev->ops->unregister_host(dev->ctx, host);
	munmap(host, total);
	dev->ops->free(dev->ctx, dmem, total);
	kvt_device_close(dev);
	return 0;
}

/* ---------------------------------------------------------------------
 * Pager set-up shared by pager and scan
 */

struct setup {
	unsigned layers, pages, page_tokens, kv_heads, head_dim;
	uint64_t fast, host, nvme;	/* pages */
	const char *policy, *dir;
	unsigned depth, prefetch;
	int host_in_place;
};

static struct kvt_pager *open_pager(const struct setup *su, struct kvt_device **dev,
				    kvt_seq_t *seq)
{
	struct kvt_config cfg;
	struct kvt_pager *p;
	char err[256];
	int r;

	kvt_config_default(&cfg);
	cfg.n_layers = su->layers;
	cfg.n_kv_heads = su->kv_heads;
	cfg.head_dim = su->head_dim;
	cfg.page_tokens = su->page_tokens;
	cfg.dtype_bytes = 2;
	uint64_t pb = kvt_config_page_bytes(&cfg);
	cfg.tier[KVT_TIER_FAST].bytes = su->fast * pb;
	cfg.tier[KVT_TIER_HOST].bytes = su->host * pb;
	cfg.tier[KVT_TIER_NVME].bytes = su->nvme * pb;
	for (int t = 0; t < KVT_NTIERS; t++)
		snprintf(cfg.tier[t].policy, sizeof(cfg.tier[t].policy), "%s", su->policy);
	if (su->dir)
		snprintf(cfg.nvme_path, sizeof(cfg.nvme_path), "%s", su->dir);
	cfg.io_depth = su->depth;
	cfg.prefetch_depth = su->prefetch;
	cfg.host_in_place = su->host_in_place;
	cfg.log = bench_log;
	if ((r = kvt_config_validate(&cfg, err, sizeof(err)))) {
		fprintf(stderr, "kvt-bench: %s\n", err);
		exit(2);
	}
	if ((r = kvt_device_open("cpu", 0, dev)))
		die("device", r);
	if ((r = kvt_pager_open(&cfg, *dev, &p)))
		die("pager", r);
	if ((r = kvt_seq_open(p, seq)))
		die("seq", r);
	/* Prefill: every layer, whole pages, a pattern per token. */
	size_t tb = (size_t)su->kv_heads * su->head_dim * 2, chunk = su->page_tokens * 64;
	uint8_t *k = malloc(tb * chunk), *v = malloc(tb * chunk);
	if (!k || !v)
		die("malloc", -ENOMEM);
	for (size_t i = 0; i < tb * chunk; i++) {
		k[i] = (uint8_t)(i * 7);
		v[i] = (uint8_t)(i * 13);
	}
	uint64_t ntok = (uint64_t)su->pages * su->page_tokens;
	for (uint64_t t = 0; t < ntok; t += chunk) {
		unsigned n = (unsigned)(ntok - t < chunk ? ntok - t : chunk);
		for (unsigned l = 0; l < su->layers; l++)
			if ((r = kvt_seq_append(p, *seq, l, k, v, n)))
				die("append", r);
	}
	free(k);
	free(v);
	return p;
}

/* One decode step of full attention: every page of every layer. Returns
 * the bytes read. */
static uint64_t scan_step(struct kvt_pager *p, kvt_seq_t s, unsigned layers, int do_touch,
			  uint64_t *sink)
{
	uint64_t pages = 0;
	size_t pb = kvt_pager_page_bytes(p);
	for (unsigned l = 0; l < layers; l++) {
		struct kvt_batch *b;
		struct kvt_view v;
		int r = kvt_acquire(p, s, l, NULL, 0, &b);
		if (r)
			die("acquire", r);
		while ((r = kvt_batch_next(b, &v)) > 0) {
			if (do_touch)
				*sink += touch(v.k, pb);
			pages++;
		}
		if (r < 0)
			die("batch_next", r);
		kvt_batch_release(b);
	}
	kvt_pager_step(p);
	return pages;
}

/* ---------------------------------------------------------------------
 * pager: acquire + release of resident pages
 */

static int bench_pager(int argc, char **argv)
{
	struct setup su = { .layers = 4, .pages = 1024, .page_tokens = 16, .kv_heads = 1,
			    .head_dim = 64, .policy = "lru", .depth = 32 };
	unsigned batch = 0;
	double seconds = 1;
	int reps = 5;
	static const struct option opts[] = {
		{ "batch", required_argument, 0, 'b' }, { "seconds", required_argument, 0, 's' },
		{ "policy", required_argument, 0, 'p' }, { "repeat", required_argument, 0, 'r' },
		{ "json", no_argument, 0, 'j' }, { 0 } };
	int c;

	while ((c = getopt_long(argc, argv, "b:s:p:r:j", opts, NULL)) != -1) {
		switch (c) {
		case 'b': batch = (unsigned)atoi(optarg); break;
		case 's': seconds = atof(optarg); break;
		case 'p': su.policy = optarg; break;
		case 'r': reps = atoi(optarg); break;
		case 'j': json = 1; break;
		default: return 2;
		}
	}
	su.fast = (uint64_t)su.layers * (su.pages + 1) + 16;
	su.host = 16;
	su.nvme = 0;
	struct kvt_device *dev;
	kvt_seq_t s;
	struct kvt_pager *p = open_pager(&su, &dev, &s);
	unsigned bsz[] = { 16, 64, 1024 };
	uint32_t *idx = malloc(sizeof(uint32_t) * su.pages);
	for (unsigned i = 0; i < su.pages; i++)
		idx[i] = (i * 7919u) % su.pages;	/* a scattered order */

	if (!json)
		printf("%-8s %14s %10s\n", "batch", "pages/s", "ns/page");
	for (unsigned bi = 0; bi < 3; bi++) {
		unsigned n = batch ? batch : bsz[bi];
		if (n > su.pages)
			n = su.pages;
		double rate[32];
		int nk = reps < 32 ? reps : 32;
		for (int k = 0; k < nk; k++) {
			uint64_t pages = 0;
			double t0 = cli_now(), t;
			do {
				for (int it = 0; it < 64; it++) {
					unsigned l = (unsigned)it % su.layers;
					unsigned off = (unsigned)(pages / n * n) % (su.pages - n + 1);
					struct kvt_batch *b;
					struct kvt_view v;
					if (kvt_acquire(p, s, l, idx + off, n, &b))
						die("acquire", -EIO);
					while (kvt_batch_next(b, &v) > 0)
						pages++;
					kvt_batch_release(b);
				}
				kvt_pager_step(p);
				t = cli_now() - t0;
			} while (t < seconds / nk);
			rate[k] = (double)pages / t;
		}
		double m = bench_median(rate, nk);
		if (json)
			printf("{\"bench\":\"pager\",\"batch\":%u,\"pages_per_s\":%.0f,\"ns_per_page\":%.2f,"
			       "\"goal\":10000000,\"ratio_to_goal\":%.2f}\n", n, m, 1e9 / m, m / 1e7);
		else
			printf("%-8u %14.0f %10.2f\n", n, m, 1e9 / m);
		fflush(stdout);
		if (batch)
			break;
	}
	free(idx);
	kvt_pager_close(p);
	kvt_device_close(dev);
	return 0;
}

/* ---------------------------------------------------------------------
 * scan: every page of every layer each step, over three tiers
 */

struct scan_result {
	double step_s;		/* median seconds per step */
	double fast_hit, upper_hit;	/* fast hits / lookups; (fast+host) / lookups */
	double nvme_bytes;	/* per step */
	double stall_s;		/* per step, waiting in kvt_batch_next */
	uint64_t dropped, wasted, late, hit;	/* prefetch outcomes in the measured steps */
};

static void run_scan(const struct setup *su, unsigned steps, int do_touch, struct scan_result *res)
{
	struct kvt_device *dev;
	struct kvt_stats a, b;
	kvt_seq_t s;
	uint64_t sink = 0;
	double t[64];
	struct kvt_pager *p = open_pager(su, &dev, &s);

	scan_step(p, s, su->layers, do_touch, &sink);	/* warm: reach steady state */
	kvt_pager_stats(p, &a);
	for (unsigned i = 0; i < steps && i < 64; i++) {
		double t0 = cli_now();
		scan_step(p, s, su->layers, do_touch, &sink);
		t[i] = cli_now() - t0;
	}
	kvt_pager_stats(p, &b);
	unsigned n = steps < 64 ? steps : 64;
	res->step_s = bench_median(t, (int)n);
	double look = (double)(b.tier[0].hits + b.tier[0].misses - a.tier[0].hits - a.tier[0].misses);
	res->fast_hit = look ? (double)(b.tier[0].hits - a.tier[0].hits) / look : 0;
	res->upper_hit = look ? (double)(b.tier[0].hits - a.tier[0].hits + b.tier[1].hits - a.tier[1].hits) / look : 0;
	res->nvme_bytes = (double)(b.tier[2].bytes_out - a.tier[2].bytes_out) / n;
	res->stall_s = (double)(b.stall_ns - a.stall_ns) / 1e9 / n;
	res->dropped = b.prefetch_dropped - a.prefetch_dropped;
	res->wasted = b.prefetch_wasted - a.prefetch_wasted;
	res->late = b.prefetch_late - a.prefetch_late;
	res->hit = b.prefetch_hit - a.prefetch_hit;
	if (sink == 42)
		fputc(' ', stderr);	/* keep the reads */
	kvt_pager_close(p);
	kvt_device_close(dev);
}

static int bench_scan(int argc, char **argv)
{
	struct setup su = { .layers = 8, .pages = 1024, .page_tokens = 16, .kv_heads = 8,
			    .head_dim = 128, .depth = 32, .prefetch = 2 };
	const char *policies = "lru,clock,mru";
	unsigned steps = 5;
	int no_touch = 0;
	static const struct option opts[] = {
		{ "layers", required_argument, 0, 'l' }, { "pages", required_argument, 0, 'n' },
		{ "steps", required_argument, 0, 's' }, { "policies", required_argument, 0, 'p' },
		{ "dir", required_argument, 0, 'd' }, { "depth", required_argument, 0, 'q' },
		{ "prefetch", required_argument, 0, 'f' }, { "no-touch", no_argument, 0, 'T' },
		{ "json", no_argument, 0, 'j' }, { 0 } };
	int c;

	while ((c = getopt_long(argc, argv, "l:n:s:p:d:q:f:Tj", opts, NULL)) != -1) {
		switch (c) {
		case 'l': su.layers = (unsigned)atoi(optarg); break;
		case 'n': su.pages = (unsigned)atoi(optarg); break;
		case 's': steps = (unsigned)atoi(optarg); break;
		case 'p': policies = optarg; break;
		case 'd': su.dir = optarg; break;
		case 'q': su.depth = (unsigned)atoi(optarg); break;
		case 'f': su.prefetch = (unsigned)atoi(optarg); break;
		case 'T': no_touch = 1; break;
		case 'j': json = 1; break;
		default: return 2;
		}
	}
	uint64_t total = (uint64_t)su.layers * su.pages;
	uint64_t pb = (uint64_t)su.page_tokens * su.kv_heads * su.head_dim * 2 * 2;

	/* Reference 1: everything resident in the fast tier. */
	struct scan_result res;
	struct setup all = su;
	all.fast = total + su.layers + 16;
	all.host = 16;
	all.nvme = 0;
	all.policy = "lru";
	run_scan(&all, steps, !no_touch, &res);
	double t_res = res.step_s;

	/* Reference 2: what the pager's NVMe reads can be at best. It
	 * coalesces neighbouring pages into requests of up to max_io_bytes
	 * (1 MiB) and issues them in offset order, with registered files
	 * and buffers: so fio sequential reads of 1 MiB at the pager's depth,
	 * with --fixedbufs --registerfiles, O_DIRECT, over a file the size of
	 * the scan's KV. */
	char file[512], fbss[32];
	double fio = 0;
	uint64_t fsz = total * pb, fbs = 1 << 20;
	if (fsz < fbs)
		fbs = fsz >= 4096 ? fsz & ~4095ull : fsz;
	if (bench_make_file(su.dir, fsz, file, sizeof(file)) == 0) {
		fio = bench_fio(file, fsz, fbs, su.depth, "read", 1, 3, BENCH_FIO_LIKE_KVT, NULL);
		unlink(file);
	}
	bench_fmt_size(fbs, fbss, sizeof(fbss));
	if (!json) {
		printf("scan: %u layers x %u pages of %llu KiB = %.0f MiB; fast %llu, host %llu pages\n",
		       su.layers, su.pages, (unsigned long long)(pb >> 10), (double)(total * pb) / (1 << 20),
		       (unsigned long long)(total / 4), (unsigned long long)(total / 4));
		printf("all resident: %.1f ms/step; fio read %s qd%u fixedbufs: %.2f GB/s%s\n",
		       t_res * 1e3, fbss, su.depth, fio / 1e9,
		       fio ? "" : " (no fio result: bound uses the resident time only)");
		printf("%-8s %9s %9s %12s %9s %9s %9s %7s  %s\n", "policy", "fast hit", "fast+host",
		       "nvme MB/step", "ms/step", "stall ms", "bound ms", "ratio",
		       "prefetch hit/late/wasted/dropped");
	}
	char list[256];
	snprintf(list, sizeof(list), "%s", policies);
	for (char *save = NULL, *pol = strtok_r(list, ",", &save); pol; pol = strtok_r(NULL, ",", &save)) {
		struct setup tiered = su;
		tiered.fast = total / 4 + su.layers;	/* the tails' frames on top */
		tiered.host = total / 4;
		tiered.nvme = total + total / 8;
		tiered.policy = pol;
		run_scan(&tiered, steps, !no_touch, &res);
		double io_bound = fio ? res.nvme_bytes / fio : 0;
		double bound = t_res > io_bound ? t_res : io_bound;
		if (json)
			printf("{\"bench\":\"scan\",\"policy\":\"%s\",\"layers\":%u,\"pages\":%u,\"page_bytes\":%llu,"
			       "\"fast_hit\":%.4f,\"upper_hit\":%.4f,\"nvme_bytes_per_step\":%.0f,"
			       "\"step_ms\":%.2f,\"stall_ms\":%.2f,\"resident_ms\":%.2f,\"fio_gbps\":%.3f,"
			       "\"bound_ms\":%.2f,\"ratio\":%.3f}\n", pol, su.layers, su.pages,
			       (unsigned long long)pb, res.fast_hit, res.upper_hit, res.nvme_bytes,
			       res.step_s * 1e3, res.stall_s * 1e3, t_res * 1e3, fio / 1e9, bound * 1e3,
			       res.step_s / bound);
		else
			printf("%-8s %9.3f %9.3f %12.1f %9.1f %9.1f %9.1f %7.2f  %llu/%llu/%llu/%llu\n", pol,
			       res.fast_hit, res.upper_hit, res.nvme_bytes / 1e6, res.step_s * 1e3,
			       res.stall_s * 1e3, bound * 1e3, res.step_s / bound,
			       (unsigned long long)res.hit, (unsigned long long)res.late,
			       (unsigned long long)res.wasted, (unsigned long long)res.dropped);
		fflush(stdout);
	}
	return 0;
}

/* ---------------------------------------------------------------------
 * host: how fast a host tier is ready, against the naive mmap + memset
 */

static int bench_host(int argc, char **argv)
{
	uint64_t size = 2ull << 30;
	static const struct option opts[] = {
		{ "size", required_argument, 0, 's' }, { "json", no_argument, 0, 'j' }, { 0 } };
	int c;

	while ((c = getopt_long(argc, argv, "s:j", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (bench_parse_size(optarg, &size) || !size) {
				fprintf(stderr, "kvt-bench host: bad --size '%s'\n", optarg);
				return 2;
			}
			break;
		case 'j': json = 1; break;
		default: return 2;
		}
	}
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	static const char *const huge[] = { "4k", "auto", "hugetlb", "thp" };
	/* Reference: one thread faults the pages in by writing them. */
	double t0 = cli_now();
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		die("mmap", -errno);
	memset(m, 0, size);
	double t_ref = cli_now() - t0;
	munmap(m, size);
	if (!json)
		printf("%-9s %-8s %8s %10s %9s  %s\n", "hugepages", "threads", "seconds", "GB/s",
		       "vs memset", "obtained");
	for (int hp = 0; hp < 2; hp++) {
		for (long th = 1; th <= ncpu; th = th < ncpu && th * 2 > ncpu ? ncpu : th * 2) {
			struct kvt_host_arena a;
			t0 = cli_now();
			int r = kvt_host_arena_open(&a, size, hp ? KVT_HUGE_AUTO : KVT_HUGE_OFF, KVT_AUTO,
						    KVT_NUMA_ANY, (unsigned)th);
			double t = cli_now() - t0;
			if (r)
				die("host arena", r);
			if (json)
				printf("{\"bench\":\"host\",\"bytes\":%llu,\"hugepages\":\"%s\",\"threads\":%ld,"
				       "\"seconds\":%.4f,\"memset_seconds\":%.4f,\"speedup\":%.2f,\"mlocked\":%d}\n",
				       (unsigned long long)size, huge[a.hugepages & 3], th, t, t_ref, t_ref / t,
				       a.mlocked);
			else
				printf("%-9s %-8ld %8.3f %10.2f %9.2f  %s%s%s\n", hp ? "auto" : "off", th, t,
				       (double)size / t / 1e9, t_ref / t, huge[a.hugepages & 3],
				       a.mlocked ? ", mlocked" : "", a.notes[0] ? "" : "");
			kvt_host_arena_close(&a);
			if (th == ncpu)
				break;
		}
	}
	if (!json)
		printf("reference: mmap + memset by one thread: %.3f s (%.2f GB/s)\n", t_ref,
		       (double)size / t_ref / 1e9);
	return 0;
}

/* ---------------------------------------------------------------------
 * main
 */

static int usage(FILE *f)
{
	fprintf(f, "usage: kvt-bench io|copy|attn|pager|scan|host|decode|resume|serve|prefill|sim|all\n"
		   "                 [options]\n"
		   "                 [--json]\n"
		   "  io     NVMe tier read/write bandwidth vs fio (--bs, --depth, --seconds, --file)\n"
		   "  copy   fast<->host copy bandwidth, page by page, vs memcpy (cpu) or one large\n"
		   "         copy (a GPU) (--sizes, --total, --device)\n"
		   "  attn   paged decode attention's effective read rate vs a copy of the same\n"
		   "         bytes on the device (--ctx, --device, --kv-type, model geometry\n"
		   "         flags)\n"
		   "  pager  acquire+release of resident pages per second on one core (--batch)\n"
		   "  scan   full-attention scan, fast 1/4, host 1/4, NVMe the rest, vs its bound\n"
		   "         (--layers, --pages, --steps, --policies, --dir, --depth, --prefetch)\n"
		   "  host   time to map, place, prefault and lock the host tier (--size)\n"
		   "  decode   decode tokens/s at 4K..64K contexts, all-fast vs fast/host/NVMe\n"
		   "           splits, vs max(all-fast time, NVMe bytes / fio rate) (--ctx, --steps)\n"
		   "  resume   first token of a conversation parked on NVMe vs recomputing its\n"
		   "           prefill (--ctx, --repeat)\n"
		   "  serve    many conversations, parked between turns or not, vs all resident;\n"
		   "           a shared system prompt, forked vs copied (--convs, --batch, ...)\n"
		   "  sim      kvt-sim's replay rate for lru, clock, s3fifo, sieve on a 50M-request\n"
		   "           Zipf trace, vs libCacheSim's (--requests, --objects, --policies)\n"
		   "  prefill  prefill GFLOP/s vs OpenBLAS sgemm; decode vs weights+KV at the\n"
		   "           read bandwidth (--tokens, --ctx)\n"
		   "           each of the four: model geometry flags or -m FILE, --dir; --help\n"
		   "  all    each of the above with short defaults (decode, resume, prefill at 4K,\n"
		   "         sim on 5M requests)\n"
		   "  --version  the version and the build's features\n");
	return f == stderr ? 2 : 0;
}

int main(int argc, char **argv)
{
	if (cli_version(argc, argv, "kvt-bench"))
		return 0;
	cli_blas_core(argv);
	if (argc < 2)
		return usage(stderr);
	const char *cmd = argv[1];
	argc--;
	argv++;
	if (!strcmp(cmd, "io"))
		return bench_io(argc, argv);
	if (!strcmp(cmd, "copy"))
		return bench_copy(argc, argv);
	if (!strcmp(cmd, "attn"))
		return bench_attn(argc, argv);
	if (!strcmp(cmd, "pager"))
		return bench_pager(argc, argv);
	if (!strcmp(cmd, "scan"))
		return bench_scan(argc, argv);
	if (!strcmp(cmd, "host"))
		return bench_host(argc, argv);
	if (!strcmp(cmd, "decode"))
		return bench_decode(argc, argv);
	if (!strcmp(cmd, "resume"))
		return bench_resume(argc, argv);
	if (!strcmp(cmd, "serve"))
		return bench_serve(argc, argv);
	if (!strcmp(cmd, "prefill"))
		return bench_prefill(argc, argv);
	if (!strcmp(cmd, "sim"))
		return bench_sim(argc, argv);
	if (!strcmp(cmd, "all")) {
		char *io[] = { "io", "--bs", "256K,1M", "--depth", "1,8,32", "--seconds", "2", NULL };
		char *cp[] = { "copy", NULL };
		char *pg[] = { "pager", NULL };
		char *sc[] = { "scan", NULL };
		int r = 0;
		printf("== io\n");
		fflush(stdout);
		r |= bench_io(7, io);
		optind = 1;
		printf("== copy\n");
		r |= bench_copy(1, cp);
		optind = 1;
		printf("== pager\n");
		r |= bench_pager(1, pg);
		optind = 1;
		printf("== scan\n");
		fflush(stdout);
		r |= bench_scan(1, sc);
		/* The inference benchmarks at small contexts: seconds, not minutes. */
		char *dc[] = { "decode", "--ctx", "4K", "--steps", "4", "--fio-seconds", "1", NULL };
		char *rs[] = { "resume", "--ctx", "4K", "--repeat", "3", "--fio-seconds", "1", NULL };
		char *pf[] = { "prefill", "--tokens", "512", "--steps", "4", "--repeat", "2",
			       "--bw-bytes", "256M", NULL };
		optind = 1;
		printf("== decode\n");
		fflush(stdout);
		r |= bench_decode(7, dc);
		optind = 1;
		printf("== resume\n");
		fflush(stdout);
		r |= bench_resume(7, rs);
		optind = 1;
		printf("== prefill\n");
		fflush(stdout);
		r |= bench_prefill(9, pf);
		char *sv[] = { "serve", "--convs", "8", "--batch", "2", "--history", "1024",
			       "--system", "1024", NULL };
		char *sm[] = { "sim", "--requests", "5000000", "--objects", "100000", "--repeat", "1",
			       NULL };
		optind = 1;
		printf("== serve\n");
		fflush(stdout);
		r |= bench_serve(9, sv);
		optind = 1;
		printf("== sim\n");
		fflush(stdout);
		r |= bench_sim(7, sm);
		return r;
	}
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help"))
		return usage(stdout);
	fprintf(stderr, "kvt-bench: unknown command \"%s\"\n", cmd);
	return usage(stderr);
}
