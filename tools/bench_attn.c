/* SPDX-License-Identifier: MIT */
/*
 * kvt-bench attn: paged decode attention's effective read rate (the K and
 * V bytes of every page over the time of one attention call, one query
 * row) on a device's kernels, against a device-to-device copy of the same
 * bytes measured in the same run. Attention reads each byte once, a copy
 * reads and writes it: the copy's rate here is bytes copied per second,
 * the bound a kernel that only reads should approach or pass.
 *
 * The pages live in the device's memory (the fast tier), handed to the
 * kernels as the runtime does: on an asynchronous backend in calls of
 * --chunk pages (16384, the runtime's), on the cpu one contiguous run per
 * thread.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/compute.h"
#include "kernels/device.h"
#include "tools/bench.h"
#include "tools/cli.h"

struct attn_run {
	const struct kvt_compute_ops *o;
	void *ctx;
	const struct kvt_page_ref *refs;
	unsigned n, tasks;
	int err;
};

static void attn_task(void *arg, unsigned task, unsigned thread)
{
	struct attn_run *a = arg;
	unsigned lo = (unsigned)((uint64_t)task * a->n / a->tasks);
	unsigned hi = (unsigned)((uint64_t)(task + 1) * a->n / a->tasks);
	int r = a->o->attn_pages(a->ctx, thread, a->refs + lo, hi - lo);

	if (r)
		__atomic_store_n(&a->err, r, __ATOMIC_RELAXED);
}

/* One attention call over every page, finished. */
static int attend_all(struct kvt_compute *cx, const struct kvt_attn_shape *sh, const float *q,
		      const uint32_t *qpos, const struct kvt_page_ref *refs, unsigned n,
		      unsigned chunk, float *out)
{
	const struct kvt_compute_ops *o = cx->ops;
	unsigned parts = o->parallel ? o->threads(cx->ctx) : 1;
	struct attn_run a = { o, cx->ctx, refs, n, parts < n ? parts : n, 0 };
	int r = o->attn_begin(cx->ctx, sh, q, qpos, parts, n);

	if (r)
		return r;
	if (o->parallel) {
		o->parallel(cx->ctx, attn_task, &a, a.tasks);
	} else {
		for (unsigned i = 0; i < n && !a.err; i += chunk)
			a.err = o->attn_pages(cx->ctx, 0, refs + i, n - i < chunk ? n - i : chunk);
	}
	if (a.err)
		return a.err;
	if ((r = o->attn_end(cx->ctx, out)))
		return r;
	return o->sync(cx->ctx);
}

static int fail(const char *what, int r)
{
	fprintf(stderr, "kvt-bench attn: %s: %s\n", what, strerror(-r));
	return 1;
}

int bench_attn(int argc, char **argv)
{
	uint64_t ctxs[16];
	int nctx = bench_parse_list("4K,16K,64K", ctxs, 16), reps = 5, json = 0, c, r;
	unsigned heads = 32, kv_heads = 8, hd = 128, pt = 16, threads = 0, chunk = 16384;
	int kvt = KVT_KV_F16;
	const char *devname = "cpu";
	static const struct option opts[] = {
		{ "ctx", required_argument, 0, 'c' }, { "repeat", required_argument, 0, 'r' },
		{ "device", required_argument, 0, 'd' }, { "heads", required_argument, 0, 'H' },
		{ "kv-heads", required_argument, 0, 'K' }, { "head-dim", required_argument, 0, 'D' },
		{ "page-tokens", required_argument, 0, 'P' }, { "threads", required_argument, 0, 't' },
		{ "kv-type", required_argument, 0, 'k' }, { "json", no_argument, 0, 'j' },
		{ "chunk", required_argument, 0, 'C' }, { 0 } };

	while ((c = getopt_long(argc, argv, "c:r:d:H:K:D:P:t:k:jC:", opts, NULL)) != -1) {
		switch (c) {
		case 'c': nctx = bench_parse_list(optarg, ctxs, 16); break;
		case 'r': reps = atoi(optarg); break;
		case 'd': devname = optarg; break;
		case 'H': heads = (unsigned)atoi(optarg); break;
		case 'K': kv_heads = (unsigned)atoi(optarg); break;
		case 'D': hd = (unsigned)atoi(optarg); break;
		case 'P': pt = (unsigned)atoi(optarg); break;
		case 't': threads = (unsigned)atoi(optarg); break;
		case 'k':
			if ((kvt = kvt_kv_parse(optarg)) < 0) {
				fprintf(stderr, "kvt-bench attn: --kv-type %s: not f16, f32, q8_0 or "
					"q4_0\n", optarg);
				return 2;
			}
			break;
		case 'j': json = 1; break;
		case 'C': chunk = (unsigned)atoi(optarg); break;
		default: return 2;
		}
	}
	if (nctx <= 0 || reps < 1 || reps > 64 || !heads || !kv_heads || heads % kv_heads || !hd ||
	    hd > 256 || !pt || (kvt_kv_block(kvt) && hd % 32) || !chunk) {
		fprintf(stderr, "kvt-bench attn: bad --ctx, --repeat, --chunk or geometry (heads a "
			"multiple of kv-heads, head-dim 1..256, a multiple of 32 for q8_0 and q4_0)\n");
		return 2;
	}

	struct kvt_device *dev;
	struct kvt_compute cx;
	char why[512];

	if ((r = kvt_device_open_why(devname, 0, &dev, why, sizeof(why)))) {
		fprintf(stderr, "kvt-bench attn: --device %s: %s\n", devname, why);
		return 1;
	}
	if ((r = kvt_compute_open(dev, threads, &cx, why, sizeof(why)))) {
		fprintf(stderr, "kvt-bench attn: %s\n", why);
		kvt_device_close(dev);
		return 1;
	}
	cx.ops->describe(cx.ctx, why, sizeof(why));
	if (!json)
		printf("attention on %s: %u heads, %u KV heads x %u, %s, %u-token pages, one query "
		       "row\n%-6s %8s %10s %12s %12s %7s\n", why, heads, kv_heads, hd, kvt_kv_name(kvt),
		       pt, "ctx", "pages",
		       "MiB", "attn GB/s", "copy GB/s", "ratio");

	const struct kvt_attn_shape sh = {
		.rows = 1, .n_head = heads, .n_kv_heads = kv_heads, .head_dim = hd,
		.scale = 1.0f / sqrtf((float)hd), .kv_type = kvt,
	};
	const size_t half = kvt_kv_bytes(kvt, (size_t)pt * kv_heads * hd), pb = 2 * half;
	/* the fill repeats whole blocks: 34 and 18 bytes for q8_0 and q4_0 */
	const size_t bs = kvt_kv_block(kvt) ? kvt_kv_bytes(kvt, 32) : 4;
	for (int ci = 0; ci < nctx; ci++) {
		unsigned n = (unsigned)((ctxs[ci] + pt - 1) / pt);
		size_t bytes = (size_t)n * pb, fill_bytes = (64u << 20) / bs * bs;
		uint8_t *kv, *kv2;
		float *q, *qh = malloc((size_t)heads * hd * 4), *out;
		uint32_t *qpos, qp = (uint32_t)ctxs[ci] - 1;
		uint16_t *fill = malloc(fill_bytes);
		struct kvt_page_ref *refs = malloc(n * sizeof(*refs));
		double ta[64], tc[64];
		uint64_t x = 0x9e3779b97f4a7c15ull;

		if (!qh || !fill || !refs)
			return fail("memory", -ENOMEM);
		if ((r = cx.ops->alloc(cx.ctx, bytes, (void **)&kv)) ||
		    (r = cx.ops->alloc(cx.ctx, bytes, (void **)&kv2)) ||
		    (r = cx.ops->alloc(cx.ctx, (size_t)heads * hd * 4, (void **)&q)) ||
		    (r = cx.ops->alloc(cx.ctx, (size_t)heads * hd * 4, (void **)&out)) ||
		    (r = cx.ops->alloc(cx.ctx, 4, (void **)&qpos)))
			return fail("device memory for the pages", r);
		/* Values in [-1, 1) as f16 (sign, and exponents 0x3800..0x3bff). */
		for (size_t i = 0; i < fill_bytes / 2; i++) {
			x ^= x << 13; x ^= x >> 7; x ^= x << 17;
			fill[i] = (uint16_t)((x & 0x8000) | (0x3800 + (x >> 20) % 0x400));
		}
		/* and each block's scale d such that |d q| < 1 */
		for (size_t i = 0; kvt_kv_block(kvt) && i < fill_bytes / 2; i += bs / 2)
			fill[i] = (uint16_t)((kvt == KVT_KV_Q8_0 ? 0x2000 : 0x3000) + fill[i] % 0x400);
		for (size_t off = 0; off < bytes; off += fill_bytes)
			if ((r = cx.ops->upload(cx.ctx, kv + off, fill,
						bytes - off < fill_bytes ? bytes - off : fill_bytes)))
				return fail("upload", r);
		for (size_t i = 0; i < (size_t)heads * hd; i++)
			qh[i] = (float)((int)(i % 17) - 8) / 8.0f;
		if ((r = cx.ops->upload(cx.ctx, q, qh, (size_t)heads * hd * 4)) ||
		    (r = cx.ops->upload(cx.ctx, qpos, &qp, 4)) || (r = cx.ops->sync(cx.ctx)))
			return fail("upload", r);
		for (unsigned i = 0; i < n; i++)
			refs[i] = (struct kvt_page_ref){ kv + i * pb, kv + i * pb + half,
							 i + 1 == n ? (unsigned)(ctxs[ci] - (uint64_t)i * pt) : pt,
							 i * pt, NULL, NULL };
		/* A warm-up of each, then the two alternated. */
		if ((r = attend_all(&cx, &sh, q, qpos, refs, n, chunk, out)) ||
		    (r = kvt_dev_copy(dev, kv2, kv, bytes, KVT_D2D)))
			return fail("warm-up", r);
		for (int k = 0; k < reps; k++) {
			double t0 = cli_now();

			if ((r = attend_all(&cx, &sh, q, qpos, refs, n, chunk, out)))
				return fail("attention", r);
			ta[k] = cli_now() - t0;
			t0 = cli_now();
			if ((r = kvt_dev_copy(dev, kv2, kv, bytes, KVT_D2D)))
				return fail("copy", r);
			tc[k] = cli_now() - t0;
		}
		double ga = (double)bytes / bench_median(ta, reps) / 1e9;
		double gc = (double)bytes / bench_median(tc, reps) / 1e9;
		if (json)
			printf("{\"bench\":\"attn\",\"device\":\"%s\",\"ctx\":%llu,\"pages\":%u,\"chunk\":%u,"
			       "\"bytes\":%zu,\"attn_ms\":%.4f,\"attn_gbps\":%.3f,\"copy_gbps\":%.3f,"
			       "\"ratio\":%.3f}\n", kvt_device_name(dev), (unsigned long long)ctxs[ci], n,
			       chunk, bytes, bench_median(ta, reps) * 1e3, ga, gc, ga / gc);
		else
			printf("%-6llu %8u %10.1f %12.1f %12.1f %7.2f\n", (unsigned long long)ctxs[ci], n,
			       bytes / 1048576.0, ga, gc, ga / gc);
		fflush(stdout);
		cx.ops->free(cx.ctx, kv, bytes);
		cx.ops->free(cx.ctx, kv2, bytes);
		cx.ops->free(cx.ctx, q, (size_t)heads * hd * 4);
		cx.ops->free(cx.ctx, out, (size_t)heads * hd * 4);
		cx.ops->free(cx.ctx, qpos, 4);
		free(qh);
		free(fill);
		free(refs);
	}
	kvt_compute_close(&cx);
	kvt_device_close(dev);
	return 0;
}
