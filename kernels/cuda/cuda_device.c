/* SPDX-License-Identifier: MIT */
/*
 * The cuda device, the plug-in's half that the pager uses: device memory
 * for the fast tier (cudaMalloc, never managed memory), the host tier
 * registered with cudaHostRegister (mapped, in chunks of at most 1 GiB,
 * registered by several threads at once), and copies on one stream per
 * direction, gathered into batches while the stream is busy, with CUDA
 * events as the fences.
 *
 * Whether attention should read host-tier pages in place (over PCIe, from
 * the mapped registration) or have them copied up first is measured when
 * the device opens: a kernel reading pinned host memory against the copy
 * engine moving it; in place where the first is at least 0.8 of the
 * second (access.host_in_place = auto).
 *
 * Threads: the pager's migration thread, its callers and the runtime all
 * call in. Each copy direction has a lock that keeps the order of fences
 * the order of the stream; every entry point makes the device current.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/kernels.h"
#include "kernels/plugin.h"

#define REG_CHUNK	(1ull << 30)	/* bytes registered by one call, at most */
#define REG_THREADS	8		/* registering in parallel */
#define CAL_BYTES	(64u << 20)	/* the in-place measurement's buffer */

int kvt_cuda_enter(struct cuda_dev *d)
{
	int cur;

	if (cudaGetDevice(&cur) == cudaSuccess && cur == d->id)
		return 0;
	return CU(d->self, cudaSetDevice(d->id));
}

/* ---- memory ---- */

static int cu_alloc(void *ctx, size_t bytes, void **out)
{
	struct cuda_dev *d = ctx;
	int r = kvt_cuda_enter(d);

	*out = NULL;
	return r ? r : CU(d->self, cudaMalloc(out, bytes ? bytes : 1));
}

static void cu_free(void *ctx, void *p, size_t bytes)
{
	struct cuda_dev *d = ctx;

	if (p && !kvt_cuda_enter(d))
		CU(d->self, cudaFree(p));
}

static int cu_mem_info(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes)
{
	struct cuda_dev *d = ctx;
	size_t f, t;
	int r = kvt_cuda_enter(d);

	if (!r)
		r = CU(d->self, cudaMemGetInfo(&f, &t));
	if (r)
		return r;
	*free_bytes = f;
	*total_bytes = t;
	return 0;
}

struct reg_job {
	struct cuda_dev *d;
	struct cuda_reg *g;
	unsigned first, step;
	int err;
	uint8_t *ok;			/* (nchunks) registered */
};

static size_t chunk_len(const struct cuda_reg *g, unsigned i)
{
	size_t off = (size_t)i * g->chunk;

	return g->bytes - off < g->chunk ? g->bytes - off : g->chunk;
}

static void *reg_thread(void *arg)
{
	struct reg_job *j = arg;
	struct cuda_reg *g = j->g;

	if ((j->err = kvt_cuda_enter(j->d)))
		return NULL;
	for (unsigned i = j->first; i < g->nchunks; i += j->step) {
		j->err = CU(j->d->self, cudaHostRegister((uint8_t *)g->base + (size_t)i * g->chunk,
							 chunk_len(g, i),
							 cudaHostRegisterMapped |
							 cudaHostRegisterPortable));
		if (j->err)
			return NULL;
		j->ok[i] = 1;
	}
	return NULL;
}

static void unregister_chunks(struct cuda_dev *d, struct cuda_reg *g, const uint8_t *ok)
{
	for (unsigned i = 0; i < g->nchunks; i++)
		if (!ok || ok[i])
			CU(d->self, cudaHostUnregister((uint8_t *)g->base + (size_t)i * g->chunk));
}

/* Pin and map [p, p + bytes): a host tier of tens of GiB is ready in the
 * time its largest share takes one thread to pin. */
static int cu_register_host(void *ctx, void *p, size_t bytes)
{
	struct cuda_dev *d = ctx;
	struct reg_job jobs[REG_THREADS];
	pthread_t th[REG_THREADS];
	struct cuda_reg g = { .base = p, .bytes = bytes, .chunk = REG_CHUNK };
	unsigned nt, started = 0;
	uint8_t *ok;
	int r = 0;

	if (!bytes)
		return 0;
	if ((r = kvt_cuda_enter(d)))
		return r;
	g.nchunks = (unsigned)((bytes + REG_CHUNK - 1) / REG_CHUNK);
	nt = g.nchunks < REG_THREADS ? g.nchunks : REG_THREADS;
	if (!(ok = calloc(g.nchunks, 1)))
		return -ENOMEM;
	pthread_mutex_lock(&d->reg_lock);
	if (d->nregs == sizeof(d->regs) / sizeof(d->regs[0])) {
		r = -ENOSPC;
		goto out;
	}
	for (unsigned t = 0; t < nt; t++) {
		jobs[t] = (struct reg_job){ .d = d, .g = &g, .first = t, .step = nt, .ok = ok };
		/* The first share runs here; the others on threads of their own. */
		if (t && pthread_create(&th[t], NULL, reg_thread, &jobs[t]) == 0)
			started |= 1u << t;
	}
	/* A share whose thread could not start runs here too: failing the
	 * registration for it would leave the pager a host tier that is not
	 * pinned (it goes on without), slower to copy and not readable in
	 * place. */
	for (unsigned t = 0; t < nt; t++)
		if (!(started & 1u << t))
			reg_thread(&jobs[t]);
	for (unsigned t = 1; t < nt; t++)
		if (started & 1u << t)
			pthread_join(th[t], NULL);
	for (unsigned t = 0; t < nt && !r; t++)
		r = jobs[t].err;
	if (r) {
		unregister_chunks(d, &g, ok);
		goto out;
	}
	g.ok = 1;
	d->regs[d->nregs++] = g;
out:
	pthread_mutex_unlock(&d->reg_lock);
	free(ok);
	return r;
}

static void cu_unregister_host(void *ctx, void *p)
{
	struct cuda_dev *d = ctx;

	if (kvt_cuda_enter(d))
		return;
	pthread_mutex_lock(&d->reg_lock);
	for (unsigned i = 0; i < d->nregs; i++)
		if (d->regs[i].base == p) {
			unregister_chunks(d, &d->regs[i], NULL);
			d->regs[i] = d->regs[--d->nregs];
			break;
		}
	pthread_mutex_unlock(&d->reg_lock);
}

/* ---- copies and fences ---- */

/* Lock held: fence seq is known done; close the busy segment it ends. */
static void ring_done(struct cuda_dev *d, struct cuda_ring *g, uint64_t seq)
{
	float ms;

	if (seq > g->done)
		g->done = seq;
	if (g->seg_open && g->done >= g->seg_last) {
		if (cudaEventElapsedTime(&ms, g->seg_start, g->ev[g->seg_last % CUDA_NEV]) ==
		    cudaSuccess && ms > 0)
			__atomic_add_fetch(g->busy_ns, (uint64_t)((double)ms * 1e6), __ATOMIC_RELAXED);
		g->seg_open = 0;
	}
}

/* Whether the host end of a copy is registered (pinned) memory: only such
 * a copy joins a batch. One to or from pageable memory (an append's
 * source can be) goes alone, as a cudaMemcpyAsync that stages it, as it
 * always did; how cudaMemcpyBatchAsync would treat it is not relied on. A
 * copy that names a host end it did not register (dir H2D from device
 * memory, say) is taken as pageable. */
static int pinned_ends(struct cuda_dev *d, const void *dst, const void *src, size_t bytes, int dir)
{
	const uint8_t *h = dir == KVT_H2D ? src : dir == KVT_D2H ? dst : NULL;
	int in = 0;

	if (!h)
		return 1;		/* device to device */
	pthread_mutex_lock(&d->reg_lock);
	for (unsigned i = 0; i < d->nregs && !in; i++) {
		const uint8_t *b = d->regs[i].base;

		in = h >= b && bytes <= d->regs[i].bytes && (size_t)(h - b) <= d->regs[i].bytes - bytes;
	}
	pthread_mutex_unlock(&d->reg_lock);
	return in;
}

static int overlap(const void *a, size_t an, const void *b, size_t bn)
{
	uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;

	return x < y + bn && y < x + an;
}

/* Lock held: whether a copy depends on one in the open batch (reads what
 * it writes, writes what it reads or writes): the copies of one batch run
 * in any order. */
static int depends(const struct cuda_ring *g, const void *dst, const void *src, size_t bytes)
{
	for (unsigned i = 0; i < g->npend; i++)
		if (overlap(src, bytes, g->pdst[i], g->plen[i]) ||
		    overlap(dst, bytes, g->psrc[i], g->plen[i]) ||
		    overlap(dst, bytes, g->pdst[i], g->plen[i]))
			return 1;
	return 0;
}

/* Lock held: the open batch onto the stream, then its event; a batch of
 * one is a plain cudaMemcpyAsync. The next batch opens whatever happens.
 * A batch that failed to queue is remembered (bad): its fence reports the
 * error; what of it was queued has finished when this returns. */
static int ring_flush(struct cuda_dev *d, struct cuda_ring *g)
{
	const uint64_t b = g->next;
	int r, opening = 0, batched = 0;

	if (!g->npend)
		return 0;
	if (!g->seg_open && !CU(d->self, cudaEventRecord(g->seg_start, g->st)))
		opening = 1;
	if (g->npend > 1 && !d->no_batch) {
		struct cudaMemcpyAttributes at = { .srcAccessOrder = cudaMemcpySrcAccessOrderStream };
		size_t first = 0;

		if (cudaMemcpyBatchAsync(g->pdst, g->psrc, g->plen, g->npend, &at, &first, 1,
					 g->st) == cudaSuccess) {
			batched = 1;
		} else {
			/* Refused (a driver without it): a copy a call from now on. */
			cudaGetLastError();
			d->no_batch = 1;
			kvt_dev_log(d->self, KVT_LOG_WARN,
				    "cuda: cudaMemcpyBatchAsync refused: copies go one a call");
		}
	}
	/* cudaMemcpyDefault: unified addressing tells host from device. */
	r = 0;
	for (unsigned i = 0; !batched && !r && i < g->npend; i++)
		r = CU(d->self, cudaMemcpyAsync(g->pdst[i], g->psrc[i], g->plen[i], cudaMemcpyDefault,
						g->st));
	g->npend = 0;
	g->next++;
	if (!r)
		r = CU(d->self, cudaEventRecord(g->ev[b % CUDA_NEV], g->st));
	if (!r) {
		/* The segment opens only with a batch and its event queued
		 * behind seg_start: a segment whose seg_last is an older
		 * batch would be closed at once, timing an event recorded
		 * after its end (and maybe not done). */
		if (opening)
			g->seg_open = 1;
		if (g->seg_open)
			g->seg_last = b;
		return 0;
	}
	/* The callers, told it failed, will reuse the copies' ends: let
	 * whatever was queued finish first. */
	cudaStreamSynchronize(g->st);
	g->bad = b;
	g->bad_err = r;
	return r;
}

static int cu_copy_async(void *ctx, void *dst, const void *src, size_t bytes, int dir,
			 uint64_t *fence)
{
	struct cuda_dev *d = ctx;
	struct cuda_ring *g;
	uint64_t b;
	int r, pinned;

	if (dir != KVT_H2D && dir != KVT_D2H && dir != KVT_D2D)
		return -EINVAL;
	if ((r = kvt_cuda_enter(d)))
		return r;
	pinned = pinned_ends(d, dst, src, bytes, dir);
	g = &d->ring[dir == KVT_D2H];
	pthread_mutex_lock(&g->lock);
	if (g->seg_open && cudaEventQuery(g->ev[g->seg_last % CUDA_NEV]) == cudaSuccess)
		ring_done(d, g, g->seg_last);
	/* A copy that must not wait, or that the open batch's copies could
	 * race, goes behind them in a batch of its own. */
	if (g->npend && (!pinned || depends(g, dst, src, bytes)) && (r = ring_flush(d, g)))
		goto out;
	g->pdst[g->npend] = dst;
	g->psrc[g->npend] = src;
	g->plen[g->npend] = bytes;
	g->npend++;
	b = g->next;
	/* An idle stream gets the batch at once; a busy one lets it grow
	 * until the stream is idle, it is full, or a fence is asked after. */
	if ((g->npend == CUDA_BATCH || !g->seg_open || !pinned) && (r = ring_flush(d, g)))
		goto out;
	*fence = b << 1 | (uint64_t)(dir == KVT_D2H);
out:
	pthread_mutex_unlock(&g->lock);
	return r;
}

/* Lock held: fence b's batch on the stream (0), or why it is not (-errno). */
static int ring_sent(struct cuda_dev *d, struct cuda_ring *g, uint64_t b)
{
	return b == g->next ? ring_flush(d, g) : 0;
}

static int cu_fence_done(void *ctx, uint64_t fence)
{
	struct cuda_dev *d = ctx;
	struct cuda_ring *g = &d->ring[fence & 1];
	uint64_t b = fence >> 1;
	cudaError_t e;
	int r = 1;

	if (!fence)
		return 1;
	pthread_mutex_lock(&g->lock);
	if (b == g->bad) {
		r = g->bad_err;
	} else if (b > g->done) {
		/* The device current before the first CUDA call: on a thread
		 * that never had one (an I/O completion polls here) the
		 * runtime would set up a context on device 0 for it, memory
		 * on a GPU that may not be ours. */
		if ((r = kvt_cuda_enter(d)) || (r = ring_sent(d, g, b)))
			goto out;
		e = cudaEventQuery(g->ev[b % CUDA_NEV]);
		if (e == cudaSuccess) {
			ring_done(d, g, b);
			r = 1;
		} else if (e == cudaErrorNotReady) {
			r = 0;
		} else {
			r = CU(d->self, e);
		}
	}
out:
	pthread_mutex_unlock(&g->lock);
	return r;
}

static int cu_fence_wait(void *ctx, uint64_t fence)
{
	struct cuda_dev *d = ctx;
	struct cuda_ring *g = &d->ring[fence & 1];
	uint64_t b = fence >> 1;
	int r;

	if (!fence)
		return 0;
	if ((r = kvt_cuda_enter(d)))
		return r;
	pthread_mutex_lock(&g->lock);
	if (b == g->bad)
		r = g->bad_err;
	else if (b <= g->done)
		r = 1;
	else
		r = ring_sent(d, g, b);
	pthread_mutex_unlock(&g->lock);
	if (r)
		return r < 0 ? r : 0;
	/* The event handle never changes; if it is recorded again meanwhile
	 * this waits for that later batch, which is later in the same stream. */
	if ((r = CU(d->self, cudaEventSynchronize(g->ev[b % CUDA_NEV]))))
		return r;
	pthread_mutex_lock(&g->lock);
	ring_done(d, g, b);
	pthread_mutex_unlock(&g->lock);
	return 0;
}

static int cu_read(void *ctx, void *dst, const void *src, size_t bytes)
{
	struct cuda_dev *d = ctx;
	int r;

	if ((r = kvt_cuda_enter(d)))
		return r;
	pthread_mutex_lock(&d->read_lock);
	r = CU(d->self, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, d->read_st));
	if (!r)
		r = CU(d->self, cudaStreamSynchronize(d->read_st));
	pthread_mutex_unlock(&d->read_lock);
	return r;
}

static void cu_describe(void *ctx, struct kvt_device_info *out)
{
	struct cuda_dev *d = ctx;

	snprintf(out->desc, sizeof(out->desc), "%.64s, sm_%d%d, %d SMs, PCI %.16s", d->name,
		 d->cc_major, d->cc_minor, d->sms, d->pci);
	out->numa_node = d->numa_node;
	out->in_place_gbps = d->in_place_gbps;
	out->copy_up_gbps = d->copy_up_gbps;
}

static void ring_free(struct cuda_dev *d, struct cuda_ring *g)
{
	for (unsigned i = 0; i < CUDA_NEV; i++)
		if (g->ev[i])
			cudaEventDestroy(g->ev[i]);
	if (g->seg_start)
		cudaEventDestroy(g->seg_start);
	if (g->st)
		cudaStreamDestroy(g->st);
	pthread_mutex_destroy(&g->lock);
}

static void cu_close(void *ctx)
{
	struct cuda_dev *d = ctx;

	if (!kvt_cuda_enter(d)) {
		for (int i = 0; i < 2; i++) {
			pthread_mutex_lock(&d->ring[i].lock);
			ring_flush(d, &d->ring[i]);
			pthread_mutex_unlock(&d->ring[i].lock);
		}
		cudaDeviceSynchronize();
		while (d->nregs)
			cu_unregister_host(d, d->regs[0].base);
		for (int i = 0; i < 2; i++)
			ring_free(d, &d->ring[i]);
		if (d->read_st)
			cudaStreamDestroy(d->read_st);
	}
	pthread_mutex_destroy(&d->read_lock);
	pthread_mutex_destroy(&d->reg_lock);
	free(d);
}

/* The ops, for a device whose kernels read registered host memory at its
 * own address (addressable) and for one whose cannot: there the host
 * tier is always copied up. */
#define CUDA_OPS(addressable) {				\
	.name		  = "cuda",			\
	.alloc		  = cu_alloc,			\
	.free		  = cu_free,			\
	.register_host	  = cu_register_host,		\
	.unregister_host  = cu_unregister_host,		\
	.copy_async	  = cu_copy_async,		\
	.fence_wait	  = cu_fence_wait,		\
	.fence_done	  = cu_fence_done,		\
	.read		  = cu_read,			\
	.mem_info	  = cu_mem_info,		\
	.describe	  = cu_describe,		\
	.host_addressable = (addressable),		\
	.host_visible	  = 0,				\
	.close		  = cu_close,			\
}
static const struct kvt_device_ops cuda_ops = CUDA_OPS(1), cuda_ops_nomap = CUDA_OPS(0);

/* ---- open ---- */

static int ring_init(struct cuda_dev *d, struct cuda_ring *g, uint64_t *busy_ns)
{
	int r;

	pthread_mutex_init(&g->lock, NULL);
	g->next = 1;
	g->busy_ns = busy_ns;
	if ((r = CU(d->self, cudaStreamCreateWithFlags(&g->st, cudaStreamNonBlocking))) ||
	    (r = CU(d->self, cudaEventCreate(&g->seg_start))))
		return r;
	for (unsigned i = 0; i < CUDA_NEV; i++)
		if ((r = CU(d->self, cudaEventCreate(&g->ev[i]))))
			return r;
	return 0;
}

/* The NUMA node of the device's PCI function, from sysfs; -1 unknown. */
static int numa_of(const char *pci)
{
	char path[128], bus[32];
	FILE *f;
	int node = -1;
	size_t i;

	for (i = 0; pci[i] && i + 1 < sizeof(bus); i++)
		bus[i] = (char)(pci[i] >= 'A' && pci[i] <= 'F' ? pci[i] - 'A' + 'a' : pci[i]);
	bus[i] = 0;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bus);
	if ((f = fopen(path, "re"))) {
		if (fscanf(f, "%d", &node) != 1)
			node = -1;
		fclose(f);
	}
	return node;
}

/* Best of three: the copy engine moving pinned host memory up, and a
 * kernel reading the same memory in place. Either stays 0 if it cannot
 * be measured. */
static void calibrate(struct cuda_dev *d)
{
	cudaStream_t st = d->ring[0].st;
	cudaEvent_t a = NULL, b = NULL;
	void *h = NULL, *dv = NULL;
	float ms;

	if (cudaHostAlloc(&h, CAL_BYTES, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
		h = NULL;
		goto out;
	}
	memset(h, 1, CAL_BYTES);
	if (cudaMalloc(&dv, CAL_BYTES + 64) != cudaSuccess || cudaEventCreate(&a) != cudaSuccess ||
	    cudaEventCreate(&b) != cudaSuccess)
		goto out;
	for (int rep = 0; rep < 3; rep++) {
		cudaEventRecord(a, st);
		cudaMemcpyAsync(dv, h, CAL_BYTES, cudaMemcpyHostToDevice, st);
		cudaEventRecord(b, st);
		if (cudaEventSynchronize(b) != cudaSuccess || cudaEventElapsedTime(&ms, a, b) != cudaSuccess)
			goto out;
		if (ms > 0 && CAL_BYTES / (ms * 1e6) > d->copy_up_gbps)
			d->copy_up_gbps = CAL_BYTES / (ms * 1e6);
		if (!d->can_map)
			continue;
		cudaEventRecord(a, st);
		kvt_cu_read(st, h, CAL_BYTES, (unsigned)d->sms * 4, (float *)((uint8_t *)dv + CAL_BYTES));
		cudaEventRecord(b, st);
		if (cudaEventSynchronize(b) != cudaSuccess || cudaEventElapsedTime(&ms, a, b) != cudaSuccess)
			goto out;
		if (ms > 0 && CAL_BYTES / (ms * 1e6) > d->in_place_gbps)
			d->in_place_gbps = CAL_BYTES / (ms * 1e6);
	}
out:
	cudaGetLastError();	/* a failed measurement is not the device's error */
	if (a)
		cudaEventDestroy(a);
	if (b)
		cudaEventDestroy(b);
	if (dv)
		cudaFree(dv);
	if (h)
		cudaFreeHost(h);
}

static int cuda_open(struct kvt_device *out, char *why, size_t whylen)
{
	struct cudaDeviceProp prop;
	struct cuda_dev *d;
	const char *env = getenv("KVT_CUDA_DEVICE");
	cudaError_t e;
	int n = 0, attr = 0, r;

	int rt = 0;

	cudaRuntimeGetVersion(&rt);
	e = cudaGetDeviceCount(&n);
	if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || (e == cudaSuccess && !n)) {
		if (e == cudaErrorInsufficientDriver)
			snprintf(why, whylen, "cuda: no NVIDIA driver (libcuda.so.1), or one older "
				 "than the CUDA %d.%d runtime", rt / 1000, rt % 1000 / 10);
		else
			snprintf(why, whylen, "cuda: no CUDA device");
		return -ENODEV;
	}
	if (e != cudaSuccess) {
		snprintf(why, whylen, "cuda: cannot count devices: %s (%s)", cudaGetErrorString(e),
			 cudaGetErrorName(e));
		return -ENODEV;
	}
	if (!(d = calloc(1, sizeof(*d)))) {
		snprintf(why, whylen, "cuda: out of memory");
		return -ENOMEM;
	}
	d->self = out;
	d->id = env && env[0] ? atoi(env) : 0;
	if (d->id < 0 || d->id >= n) {
		snprintf(why, whylen, "cuda: KVT_CUDA_DEVICE=%s: there are %d devices", env, n);
		free(d);
		return -ENODEV;
	}
	pthread_mutex_init(&d->read_lock, NULL);
	pthread_mutex_init(&d->reg_lock, NULL);
	if ((e = cudaSetDevice(d->id)) != cudaSuccess ||
	    (e = cudaGetDeviceProperties(&prop, d->id)) != cudaSuccess) {
		snprintf(why, whylen, "cuda: device %d: %s (%s)", d->id, cudaGetErrorString(e),
			 cudaGetErrorName(e));
		r = -ENODEV;
		goto fail;
	}
	snprintf(d->name, sizeof(d->name), "%s", prop.name);
	d->cc_major = prop.major;
	d->cc_minor = prop.minor;
	d->sms = prop.multiProcessorCount;
	d->total_mem = prop.totalGlobalMem;
	if (cudaDeviceGetPCIBusId(d->pci, sizeof(d->pci), d->id) != cudaSuccess)
		snprintf(d->pci, sizeof(d->pci), "?");
	d->numa_node = numa_of(d->pci);
	if (cudaDeviceGetAttribute(&attr, cudaDevAttrCanUseHostPointerForRegisteredMem, d->id) ==
	    cudaSuccess)
		d->can_map = attr;
	if ((r = ring_init(d, &d->ring[0], &out->cnt.copy_ns[KVT_DEV_H2D])) ||
	    (r = ring_init(d, &d->ring[1], &out->cnt.copy_ns[KVT_DEV_D2H])) ||
	    (r = CU(out, cudaStreamCreateWithFlags(&d->read_st, cudaStreamNonBlocking)))) {
		snprintf(why, whylen, "cuda: cannot create streams and events on %s", d->name);
		goto fail;
	}
	calibrate(d);
	out->ops = d->can_map ? &cuda_ops : &cuda_ops_nomap;
	out->ctx = d;
	out->compute = &kvt_cuda_compute;
	out->in_place_auto = d->can_map && d->in_place_gbps > 0 &&
			     d->in_place_gbps >= 0.8 * d->copy_up_gbps;
	return 0;
fail:
	cu_close(d);
	return r;
}

__attribute__((visibility("default")))
const struct kvt_backend_plugin kvt_backend_plugin_v1 = {
	.abi  = KVT_PLUGIN_ABI,
	.size = sizeof(struct kvt_backend_plugin),
	.name = "cuda",
	.open = cuda_open,
};
