/* SPDX-License-Identifier: MIT */
/*
 * "emu": a deliberately hostile backend plug-in (libkvt-emu.so) that
 * behaves as a GPU does, on the cpu, so that every path a GPU takes runs
 * in the test suite of a machine without one (in the manner of SQLite's
 * test_pcache.c):
 *
 * - Device memory is host memory behind tagged pointers (bit 62 set: not
 *   a canonical address), so the host reading or writing it directly
 *   faults at once. Only this plug-in untags them.
 * - Copies run on one thread per direction and complete later, in order;
 *   fences are sequence numbers.
 * - The kernels run on a worker thread, a stream: every call queues its
 *   work and returns, and the worker takes its time (random pauses, seed
 *   from KVT_EMU_SEED, none with KVT_EMU_DELAY=0). A page released, an
 *   input changed or a result read before sync() then shows as a wrong
 *   number or a sanitizer report.
 * - The host tier can be read in place (host_addressable) once it is
 *   registered; whether auto does is KVT_EMU_IN_PLACE (default 1), and
 *   KVT_EMU_REGISTER_FAIL refuses the registration.
 *
 * The kernels are the cpu kernels (kernels/cpu/kernels.c, linked into the
 * plug-in), so results equal the cpu backend's up to the order in which
 * pages are folded in.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/compute.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/qdots.h"
#include "kernels/plugin.h"

#define TAG	(1ull << 62)

static void *tag(void *p) { return (void *)((uintptr_t)p | TAG); }
static void *raw(const void *p) { return (void *)((uintptr_t)p & ~TAG); }

/* ---- a queue of work run in order on a thread of its own ---- */

struct work {
	void (*fn)(void *ctx, struct work *w);
	void *ctx;
	uintptr_t a[10];
	float f;
	unsigned pause_us;		/* waited before it runs (with the delays on) */
	struct work *next;
};

struct stream {
	pthread_mutex_t lock;
	pthread_cond_t	cv;
	struct work	*head, *tail;
	uint64_t	queued, done;	/* works queued, works finished */
	int		stop, delay;
	uint64_t	rng;
	pthread_t	th;
	uint64_t	*busy_ns;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *stream_main(void *arg)
{
	struct stream *s = arg;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (!s->head && !s->stop)
			pthread_cond_wait(&s->cv, &s->lock);
		if (!s->head)
			break;
		struct work *w = s->head;
		s->head = w->next;
		if (!s->head)
			s->tail = NULL;
		pthread_mutex_unlock(&s->lock);
		if (s->delay) {
			/* xorshift: about one work in four waits 20 to 300 us;
			 * attention waits longer (w->pause_us), long enough
			 * for the pager to reuse a frame given back too soon. */
			s->rng ^= s->rng << 13; s->rng ^= s->rng >> 7; s->rng ^= s->rng << 17;
			if ((s->rng & 3) == 0)
				usleep(20 + (unsigned)(s->rng >> 40) % 280);
			if (w->pause_us)
				usleep(w->pause_us);
		}
		uint64_t t0 = now_ns();
		w->fn(w->ctx, w);
		__atomic_add_fetch(s->busy_ns, now_ns() - t0, __ATOMIC_RELAXED);
		free(w);
		pthread_mutex_lock(&s->lock);
		s->done++;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

static int stream_init(struct stream *s, uint64_t seed, uint64_t *busy_ns)
{
	const char *d = getenv("KVT_EMU_DELAY");

	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->delay = !(d && d[0] == '0');
	s->rng = seed | 1;
	s->busy_ns = busy_ns;
	return -pthread_create(&s->th, NULL, stream_main, s);
}

static void stream_fini(struct stream *s)
{
	pthread_mutex_lock(&s->lock);
	s->stop = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->th, NULL);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cv);
}

/* Queue a copy of *w; returns its sequence number (from 1), 0 on ENOMEM. */
static uint64_t submit(struct stream *s, const struct work *w)
{
	struct work *c = malloc(sizeof(*c));
	uint64_t seq;

	if (!c)
		return 0;
	*c = *w;
	c->next = NULL;
	pthread_mutex_lock(&s->lock);
	if (s->tail)
		s->tail->next = c;
	else
		s->head = c;
	s->tail = c;
	seq = ++s->queued;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->lock);
	return seq;
}

static void wait_for(struct stream *s, uint64_t seq)
{
	pthread_mutex_lock(&s->lock);
	while (s->done < seq)
		pthread_cond_wait(&s->cv, &s->lock);
	pthread_mutex_unlock(&s->lock);
}

static uint64_t last(struct stream *s)
{
	pthread_mutex_lock(&s->lock);
	uint64_t q = s->queued;
	pthread_mutex_unlock(&s->lock);
	return q;
}

/* ---- the device ---- */

struct emu_dev {
	struct kvt_device *self;
	struct stream copy[2];		/* [0] h2d and d2d, [1] d2h */
};

static int emu_alloc(void *ctx, size_t bytes, void **out)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, bytes ? bytes : 1))
		return -ENOMEM;
	*out = tag(p);
	return 0;
}

static void emu_free(void *ctx, void *p, size_t bytes)
{
	if (p)
		free(raw(p));
}

/* KVT_EMU_REGISTER_FAIL: registration refused (as cudaHostRegister is
 * past the locked-memory limit), so the pager must not read in place. */
static int emu_register(void *ctx, void *p, size_t bytes)
{
	return getenv("KVT_EMU_REGISTER_FAIL") ? -ENOMEM : 0;
}

static void emu_unregister(void *ctx, void *p)
{
}

static void do_copy(void *ctx, struct work *w)
{
	memcpy(raw((void *)w->a[0]), raw((const void *)w->a[1]), (size_t)w->a[2]);
}

static int emu_copy_async(void *ctx, void *dst, const void *src, size_t bytes, int dir,
			  uint64_t *fence)
{
	struct emu_dev *d = ctx;
	struct work w = { .fn = do_copy, .a = { (uintptr_t)dst, (uintptr_t)src, bytes } };
	uint64_t seq;

	if (dir != KVT_H2D && dir != KVT_D2H && dir != KVT_D2D)
		return -EINVAL;
	/* Each end where its direction says: host memory untagged. */
	int sdev = !!((uintptr_t)src & TAG), ddev = !!((uintptr_t)dst & TAG);
	if (dir == KVT_H2D ? sdev || !ddev : dir == KVT_D2H ? !sdev || ddev : !sdev || !ddev) {
		kvt_dev_log(d->self, KVT_LOG_ERROR, "emu: a copy with its ends on the wrong sides");
		return -EFAULT;
	}
	if (!(seq = submit(&d->copy[dir == KVT_D2H], &w)))
		return -ENOMEM;
	*fence = seq << 1 | (uint64_t)(dir == KVT_D2H);
	return 0;
}

static int emu_fence_done(void *ctx, uint64_t fence)
{
	struct emu_dev *d = ctx;
	struct stream *s = &d->copy[fence & 1];

	pthread_mutex_lock(&s->lock);
	int r = s->done >= fence >> 1;
	pthread_mutex_unlock(&s->lock);
	return r;
}

static int emu_fence_wait(void *ctx, uint64_t fence)
{
	struct emu_dev *d = ctx;

	wait_for(&d->copy[fence & 1], fence >> 1);
	return 0;
}

static int emu_read(void *ctx, void *dst, const void *src, size_t bytes)
{
	memcpy(dst, raw(src), bytes);
	return 0;
}

static int emu_mem_info(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes)
{
	const char *lim = getenv("KVT_EMU_MEM");

	*total_bytes = lim ? strtoull(lim, NULL, 0) : 64ull << 30;
	*free_bytes = *total_bytes;
	return 0;
}

static void emu_describe(void *ctx, struct kvt_device_info *out)
{
	snprintf(out->desc, sizeof(out->desc), "emulated GPU on the cpu (tests only)");
}

static void emu_close(void *ctx)
{
	struct emu_dev *d = ctx;

	for (int i = 0; i < 2; i++)
		stream_fini(&d->copy[i]);
	free(d);
}

static const struct kvt_device_ops emu_ops = {
	.name		  = "emu",
	.alloc		  = emu_alloc,
	.free		  = emu_free,
	.register_host	  = emu_register,
	.unregister_host  = emu_unregister,
	.copy_async	  = emu_copy_async,
	.fence_wait	  = emu_fence_wait,
	.fence_done	  = emu_fence_done,
	.read		  = emu_read,
	.mem_info	  = emu_mem_info,
	.describe	  = emu_describe,
	.host_addressable = 1,
	.host_visible	  = 0,
	.close		  = emu_close,
};

/* ---- the kernels ---- */

struct emu_cx {
	struct kvt_device *dev;
	struct stream st;
	struct kvt_attn_acc acc;	/* the worker's */
	int have_acc;
	struct kvt_attn_shape sh;
	const float *q;			/* raw */
	const uint32_t *qpos;		/* raw */
	int err;			/* the first error a work met, reported at sync */
	uint64_t rng;			/* the caller's: attention's pauses */
};

static void fail(struct emu_cx *c, int r)
{
	if (r && !c->err)
		c->err = r;
}

static int queue(struct emu_cx *c, void (*fn)(void *, struct work *), const uintptr_t *a,
		 unsigned n, float f)
{
	struct work w = { .fn = fn, .ctx = c, .f = f };

	memcpy(w.a, a, n * sizeof(*a));
	return submit(&c->st, &w) ? 0 : -ENOMEM;
}

#define Q(c, fn, f, ...) queue((c), (fn), (const uintptr_t[]){ __VA_ARGS__ }, \
			       sizeof((uintptr_t[]){ __VA_ARGS__ }) / sizeof(uintptr_t), (f))

static int cx_sync(void *ctx)
{
	struct emu_cx *c = ctx;
	int r;

	wait_for(&c->st, last(&c->st));
	r = c->err;
	c->err = 0;
	return r;
}

static int cx_open(struct kvt_device *dev, unsigned n_threads, void **out, char *err,
		   size_t errlen)
{
	struct emu_cx *c = calloc(1, sizeof(*c));
	const char *seed = getenv("KVT_EMU_SEED");
	int r;

	if (!c)
		return -ENOMEM;
	c->dev = dev;
	c->rng = 0x9e3779b97f4a7c15ull;
	if ((r = stream_init(&c->st, seed ? strtoull(seed, NULL, 0) : 0x5eed, &dev->cnt.kernel_ns))) {
		snprintf(err, errlen, "emu: no stream thread");
		free(c);
		return r;
	}
	*out = c;
	return 0;
}

static void cx_close(void *ctx)
{
	struct emu_cx *c = ctx;

	stream_fini(&c->st);
	if (c->have_acc)
		kvt_attn_acc_free(&c->acc);
	free(c);
}

static unsigned cx_threads(void *ctx)
{
	return 1;
}

static void cx_describe(void *ctx, char *buf, size_t len)
{
	snprintf(buf, len, "emu (the cpu kernels behind tagged pointers, asynchronous)");
}

static int cx_alloc(void *ctx, size_t bytes, void **out)
{
	return emu_alloc(NULL, bytes, out);
}

static void cx_free(void *ctx, void *p, size_t bytes)
{
	cx_sync(ctx);
	emu_free(NULL, p, bytes);
}

/* Uploads copy the source now (as a CUDA copy from pageable memory is
 * staged before it returns) and land in order with the kernels. */
static void do_upload(void *ctx, struct work *w)
{
	memcpy(raw((void *)w->a[0]), (void *)w->a[1], (size_t)w->a[2]);
	free((void *)w->a[1]);
}

static int cx_upload(void *ctx, void *dst, const void *src, size_t bytes)
{
	struct emu_cx *c = ctx;
	void *copy;

	if (!((uintptr_t)dst & TAG))
		return -EFAULT;
	if (!bytes)
		return 0;
	if (!(copy = malloc(bytes)))
		return -ENOMEM;
	memcpy(copy, src, bytes);
	return Q(c, do_upload, 0, (uintptr_t)dst, (uintptr_t)copy, bytes);
}

static int cx_download(void *ctx, void *dst, const void *src, size_t bytes)
{
	int r = cx_sync(ctx);

	if (!r)
		memcpy(dst, raw(src), bytes);
	return r;
}

static int cx_mat_prepare(void *ctx, const struct kvt_mat *w, struct kvt_mat *out)
{
	size_t rb = kvt_mat_row_bytes(w->type, w->n_in);
	void *p;
	int r;

	*out = *w;
	if (!rb)
		return -EINVAL;
	if ((r = emu_alloc(NULL, rb * w->n_out, &p)))
		return r;
	memcpy(raw(p), w->data, rb * w->n_out);
	out->data = p;
	return 0;
}

static void cx_mat_release(void *ctx, struct kvt_mat *w)
{
	emu_free(NULL, (void *)w->data, 0);
	w->data = NULL;
}

static void do_matmul(void *ctx, struct work *w)
{
	unsigned n = (unsigned)w->a[0], rows = (unsigned)w->a[2];
	struct kvt_mat m[4];
	const struct kvt_mat *mp[4];
	float *y[4];

	for (unsigned k = 0; k < n; k++) {
		const struct kvt_mat *src = (const struct kvt_mat *)w->a[3] + k;

		m[k] = *src;
		m[k].data = raw(src->data);
		mp[k] = &m[k];
		y[k] = raw(((float **)w->a[7])[k]);
	}
	fail(ctx, kvt_matmul_n(NULL, n, y, raw((void *)w->a[1]), rows, mp));
	free((void *)w->a[3]);
	free((void *)w->a[7]);
}

static int cx_matmul_n(void *ctx, unsigned n, float *const *y, const float *x, unsigned rows,
		       const struct kvt_mat *const *w)
{
	struct kvt_mat *m = malloc(n * sizeof(*m));
	float **ys = malloc(n * sizeof(*ys));

	if (!m || !ys || n > 4) {
		free(m);
		free(ys);
		return n > 4 ? -EINVAL : -ENOMEM;
	}
	for (unsigned k = 0; k < n; k++) {
		m[k] = *w[k];
		ys[k] = y[k];
	}
	return Q(ctx, do_matmul, 0, n, (uintptr_t)x, rows, (uintptr_t)m, 0, 0, 0, (uintptr_t)ys);
}

static void do_rmsnorm(void *ctx, struct work *w)
{
	float *out = raw((void *)w->a[0]);
	const float *x = raw((void *)w->a[1]), *g = raw((void *)w->a[5]);
	const uint32_t *idx = (const uint32_t *)w->a[2];
	unsigned rows = (unsigned)w->a[3], n = (unsigned)w->a[4];

	for (unsigned i = 0; i < rows; i++)
		kvt_rmsnorm(out + (size_t)i * n, x + (size_t)(idx ? idx[i] : i) * n, g, n, w->f);
	free((void *)idx);
}

static int cx_rmsnorm(void *ctx, float *out, const float *x, const uint32_t *idx, unsigned rows,
		      unsigned n, const float *w, float eps)
{
	uint32_t *ic = NULL;

	if (idx) {
		if (!(ic = malloc(rows * sizeof(*ic))))
			return -ENOMEM;
		memcpy(ic, idx, rows * sizeof(*ic));
	}
	return Q(ctx, do_rmsnorm, eps, (uintptr_t)out, (uintptr_t)x, (uintptr_t)ic, rows, n,
		 (uintptr_t)w);
}

static void do_rope(void *ctx, struct work *w)
{
	float *x = raw((void *)w->a[0]);
	unsigned rows = (unsigned)w->a[1], nh = (unsigned)w->a[2], hd = (unsigned)w->a[3];
	const uint32_t *pos = raw((void *)w->a[5]);

	for (unsigned r = 0; r < rows; r++)
		kvt_rope(x + (size_t)r * nh * hd, nh, hd, (unsigned)w->a[4], pos[r],
			 raw((void *)w->a[6]));
}

static int cx_rope(void *ctx, float *x, unsigned rows, unsigned n_heads, unsigned head_dim,
		   unsigned rope_dim, const uint32_t *pos, const double *inv_freq)
{
	return Q(ctx, do_rope, 0, (uintptr_t)x, rows, n_heads, head_dim, rope_dim, (uintptr_t)pos,
		 (uintptr_t)inv_freq);
}

static void do_swiglu(void *ctx, struct work *w)
{
	kvt_swiglu(raw((void *)w->a[0]), raw((void *)w->a[1]), (unsigned)w->a[2]);
}

static int cx_swiglu(void *ctx, float *g, const float *u, size_t n)
{
	return Q(ctx, do_swiglu, 0, (uintptr_t)g, (uintptr_t)u, n);
}

static void do_add(void *ctx, struct work *w)
{
	float *x = raw((void *)w->a[0]);
	const float *y = raw((void *)w->a[1]);

	const size_t n = (size_t)w->a[3];

	for (size_t r = 0; r < (size_t)w->a[2]; r++, x += n)
		for (size_t i = 0; i < n; i++)
			x[i] += y[i];
}

static int cx_add(void *ctx, float *x, const float *y, unsigned rows, size_t n)
{
	return Q(ctx, do_add, 0, (uintptr_t)x, (uintptr_t)y, rows, n);
}

static void do_to_kv(void *ctx, struct work *w)
{
	if (w->a[3] == KVT_KV_F16)
		kvt_f32_to_f16(raw((void *)w->a[0]), raw((void *)w->a[1]), (size_t)w->a[2]);
	else
		memmove(raw((void *)w->a[0]), raw((void *)w->a[1]), (size_t)w->a[2] * 4);
}

static int cx_to_kv(void *ctx, void *dst, const float *src, size_t n, int kv_type)
{
	if (kv_type != KVT_KV_F16 && kv_type != KVT_KV_F32)
		return -EINVAL;
	return Q(ctx, do_to_kv, 0, (uintptr_t)dst, (uintptr_t)src, n, (uintptr_t)kv_type);
}

static void do_attn_begin(void *ctx, struct work *w)
{
	struct emu_cx *c = ctx;
	const struct kvt_attn_shape *sh = (const struct kvt_attn_shape *)w->a[0];

	if (c->have_acc && (c->acc.sh.rows < sh->rows || c->acc.sh.n_head != sh->n_head ||
			    c->acc.sh.head_dim != sh->head_dim || c->acc.sh.kv_type != sh->kv_type ||
			    c->acc.sh.n_kv_heads != sh->n_kv_heads)) {
		kvt_attn_acc_free(&c->acc);
		c->have_acc = 0;
	}
	if (!c->have_acc) {
		int r = kvt_attn_acc_init(&c->acc, sh);
		if (r) {
			fail(c, r);
			free((void *)sh);
			return;
		}
		c->have_acc = 1;
	}
	c->acc.sh = *sh;
	kvt_attn_acc_reset(&c->acc);
	c->q = raw((void *)w->a[1]);
	c->qpos = raw((void *)w->a[2]);
	free((void *)sh);
}

static int cx_attn_begin(void *ctx, const struct kvt_attn_shape *sh, const float *q,
			 const uint32_t *qpos, unsigned parts, unsigned max_pages)
{
	struct kvt_attn_shape *s;

	if (parts != 1)
		return -EINVAL;
	if (!(s = malloc(sizeof(*s))))
		return -ENOMEM;
	*s = *sh;
	return Q(ctx, do_attn_begin, 0, (uintptr_t)s, (uintptr_t)q, (uintptr_t)qpos);
}

/* The pages are read here, on the worker, later: the array and the pages
 * must still be what they were (the contract of KVT_CX_ASYNC). */
static void do_attn_pages(void *ctx, struct work *w)
{
	struct emu_cx *c = ctx;
	const struct kvt_page_ref *pg = (const struct kvt_page_ref *)w->a[0];

	for (unsigned i = 0; i < (unsigned)w->a[1] && c->have_acc; i++)
		fail(c, kvt_attn_page(&c->acc, c->q, c->qpos, raw(pg[i].k), raw(pg[i].v), pg[i].ntok,
				      pg[i].pos0));
}

static int cx_attn_pages(void *ctx, unsigned part, const struct kvt_page_ref *pg, unsigned n)
{
	struct emu_cx *c = ctx;
	struct work w = { .fn = do_attn_pages, .ctx = c, .a = { (uintptr_t)pg, n } };

	for (unsigned i = 0; i < n; i++)
		if (pg[i].pm)
			return -ENOTSUP;
	c->rng ^= c->rng << 13; c->rng ^= c->rng >> 7; c->rng ^= c->rng << 17;
	w.pause_us = (unsigned)(c->rng >> 33) % 2000;
	return submit(&c->st, &w) ? 0 : -ENOMEM;
}

static void do_attn_end(void *ctx, struct work *w)
{
	struct emu_cx *c = ctx;

	if (c->have_acc)
		kvt_attn_finish(&c->acc, raw((void *)w->a[0]));
}

static int cx_attn_end(void *ctx, float *out)
{
	return Q(ctx, do_attn_end, 0, (uintptr_t)out);
}

static const struct kvt_compute_ops emu_compute = {
	.name		= "emu",
	.flags		= KVT_CX_ASYNC,
	.open		= cx_open,
	.close		= cx_close,
	.threads	= cx_threads,
	.describe	= cx_describe,
	.alloc		= cx_alloc,
	.free		= cx_free,
	.upload		= cx_upload,
	.download	= cx_download,
	.sync		= cx_sync,
	.mat_prepare	= cx_mat_prepare,
	.mat_release	= cx_mat_release,
	.matmul_n	= cx_matmul_n,
	.rmsnorm	= cx_rmsnorm,
	.rope		= cx_rope,
	.swiglu		= cx_swiglu,
	.add		= cx_add,
	.to_kv		= cx_to_kv,
	.attn_begin	= cx_attn_begin,
	.attn_pages	= cx_attn_pages,
	.attn_end	= cx_attn_end,
};

static int emu_open(struct kvt_device *out, char *why, size_t whylen)
{
	struct emu_dev *d = calloc(1, sizeof(*d));
	const char *ip = getenv("KVT_EMU_IN_PLACE");
	int r;

	if (!d)
		return -ENOMEM;
	d->self = out;
	for (int i = 0; i < 2; i++)
		if ((r = stream_init(&d->copy[i], 0x1234 + (uint64_t)i, &out->cnt.copy_ns[i]))) {
			snprintf(why, whylen, "emu: no copy threads");
			if (i)
				stream_fini(&d->copy[0]);
			free(d);
			return r;
		}
	out->ops = &emu_ops;
	out->ctx = d;
	out->compute = &emu_compute;
	out->in_place_auto = !(ip && ip[0] == '0');
	/* As the CUDA backend: f32 activations, no integer dots. */
	kvt_cpu_set_int8_dots(0);
	return 0;
}

__attribute__((visibility("default")))
const struct kvt_backend_plugin kvt_backend_plugin_v1 = {
	.abi  = KVT_PLUGIN_ABI,
	.size = sizeof(struct kvt_backend_plugin),
	.name = "emu",
	.open = emu_open,
};
