/* SPDX-License-Identifier: MIT */
/*
 * The cuda kernels behind the compute seam (kernels/compute.h). One
 * stream runs everything a context issues, in order; calls return before
 * the work is done (KVT_CX_ASYNC) and download/sync wait for it.
 *
 * Matrix products go through cuBLAS with f32 accumulation: F32 weights by
 * SGEMM (no TF32: cuBLAS's default math), F16 and BF16 weights by
 * cublasGemmEx with the activations rounded to the weight's type first
 * (as llama.cpp's CUDA backend does), Q8_0 widened to F16 once, at
 * prepare, on the GPU; the other block types (Q4_0 to Q6_K) widened to F16
 * on the host at prepare (kernels/cpu/quants.c, ggml's dequantization),
 * then copied up. Attention is kernels.cu's paged kernel: each attn_pages call
 * splits its pages over enough parts to fill the GPU, every part leaves
 * an online-softmax partial, and attn_end merges them by log-sum-exp.
 *
 * The time the stream spends from its first piece of work after a
 * synchronisation to the next synchronisation is added to the device's
 * kernel_ns: the kernels, and the small copies between them.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kernels/cpu/half.h"
#include "kernels/cpu/quants.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/kernels.h"

#define PART_BUDGET	(64ull << 20)	/* bytes of attention partials, at least */
#ifndef ATT_BLOCKS_PER_SM
#define ATT_BLOCKS_PER_SM 4		/* attention blocks a call aims at, per SM */
#endif

struct cuda_cx {
	struct cuda_dev *d;
	struct kvt_device *dev;
	cudaStream_t st;
	cublasHandle_t blas;
	cudaEvent_t t0, t1;		/* the stream's busy span, for kernel_ns */
	int timing;			/* t0 recorded since the last sync */

	void	*xc;			/* activations rounded for cublasGemmEx */
	size_t	 xc_bytes;
	uint32_t *idx;			/* rmsnorm's row indices */
	size_t	 idx_bytes;

	/* Attention: the call's shape and partials, and its pages. */
	struct kvt_cu_attn a;
	void	*parts;			/* pm, pl, po carved from one allocation */
	size_t	 parts_bytes;
	unsigned parts_used;
	struct kvt_cu_page *pg_host;	/* (pg_cap) pinned: the call's pages */
	struct kvt_cu_page *pg_dev;	/* (pg_cap) */
	unsigned pg_cap, pg_used;
	int	 pg_inflight;		/* pages copied up since the last sync */
};

#define ERR(c, call)	CU((c)->dev, (call))
/* A launcher's result (kernels.h: the launch's cudaError_t), logged with
 * the launcher call that failed. */
#define LAUNCH(c, call)	CU((c)->dev, (cudaError_t)(call))

/* The device current on this thread: every entry point that makes a CUDA
 * call (the engine may be driven from another thread than the one that
 * opened it; cudaMalloc there would allocate on whatever device that
 * thread has current). 0 or -EIO. */
static int enter(struct cuda_cx *c)
{
	return kvt_cuda_enter(c->d);
}

/* Every call that issues work: the device current, and the start of a
 * busy span marked. An error an earlier call on this thread left behind
 * (the pager's, whose failures the runtime may ride over) is cleared, so
 * that cuBLAS, which reads it after its launches, does not fail with it. */
static int busy(struct cuda_cx *c)
{
	int r = enter(c);

	if (r)
		return r;
	(void)cudaGetLastError();
	if (!c->timing && cudaEventRecord(c->t0, c->st) == cudaSuccess)
		c->timing = 1;
	return 0;
}

static int cx_sync(void *ctx)
{
	struct cuda_cx *c = ctx;
	float ms;
	int r, timed = 0;

	if ((r = enter(c)))
		return r;
	if (c->timing)
		timed = !ERR(c, cudaEventRecord(c->t1, c->st));
	/* Waited for even when t1 could not be recorded: the callers take
	 * this for "nothing is in flight" (pg_host is rewritten, buffers
	 * are freed). */
	r = ERR(c, cudaStreamSynchronize(c->st));
	if (!r && timed && cudaEventElapsedTime(&ms, c->t0, c->t1) == cudaSuccess && ms > 0)
		__atomic_add_fetch(&c->dev->cnt.kernel_ns, (uint64_t)((double)ms * 1e6),
				   __ATOMIC_RELAXED);
	c->timing = 0;
	c->pg_inflight = 0;
	return r;
}

/* *buf holds at least bytes (device memory), reallocated after the
 * stream is idle when it does not. */
static int ensure(struct cuda_cx *c, void **buf, size_t *have, size_t bytes)
{
	int r;

	if (*have >= bytes)
		return 0;
	if ((r = cx_sync(c)))	/* makes the device current too */
		return r;
	if (*buf)
		ERR(c, cudaFree(*buf));
	*buf = NULL;
	*have = 0;
	bytes = bytes < 4096 ? 4096 : bytes + bytes / 2;
	if ((r = ERR(c, cudaMalloc(buf, bytes))))
		return r;
	*have = bytes;
	return 0;
}

static void cx_close(void *ctx)
{
	struct cuda_cx *c = ctx;

	if (kvt_cuda_enter(c->d) == 0) {
		if (c->st)	/* NULL (the legacy stream) when open failed early */
			cudaStreamSynchronize(c->st);
		cudaFree(c->xc);
		cudaFree(c->idx);
		cudaFree(c->parts);
		cudaFree(c->pg_dev);
		cudaFreeHost(c->pg_host);
		if (c->blas)
			cublasDestroy(c->blas);
		if (c->t0)
			cudaEventDestroy(c->t0);
		if (c->t1)
			cudaEventDestroy(c->t1);
		if (c->st)
			cudaStreamDestroy(c->st);
	}
	free(c);
}

static int cx_open(struct kvt_device *dev, unsigned n_threads, void **out, char *err,
		   size_t errlen)
{
	struct cuda_cx *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	c->dev = dev;
	c->d = dev->ctx;
	if ((r = kvt_cuda_enter(c->d)) ||
	    (r = ERR(c, cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking))) ||
	    (r = ERR(c, cudaEventCreate(&c->t0))) || (r = ERR(c, cudaEventCreate(&c->t1))) ||
	    (r = CUBLAS(dev, cublasCreate(&c->blas))) ||
	    (r = CUBLAS(dev, cublasSetStream(c->blas, c->st))) ||
	    (r = CUBLAS(dev, cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH)))) {
		snprintf(err, errlen, "cuda: cannot set up a stream and cuBLAS on %s (the log "
			 "has the call that failed)", c->d->name);
		cx_close(c);
		return r;
	}
	*out = c;
	return 0;
}

static unsigned cx_threads(void *ctx)
{
	return 1;
}

static void cx_describe(void *ctx, char *buf, size_t len)
{
	struct cuda_cx *c = ctx;
	int v = 0;

	cublasGetVersion(c->blas, &v);
	snprintf(buf, len, "%s (sm_%d%d), cuBLAS %d.%d.%d", c->d->name, c->d->cc_major,
		 c->d->cc_minor, v / 10000, v / 100 % 100, v % 100);
}

/* ---- buffers ---- */

static int cx_alloc(void *ctx, size_t bytes, void **out)
{
	struct cuda_cx *c = ctx;
	int r;

	*out = NULL;
	if ((r = enter(c)))
		return r;
	return ERR(c, cudaMalloc(out, bytes ? bytes : 1));
}

/* cudaFree waits for the device to be idle: work still queued that reads
 * p finishes first. */
static void cx_free(void *ctx, void *p, size_t bytes)
{
	struct cuda_cx *c = ctx;

	if (p && !enter(c))
		ERR(c, cudaFree(p));
}

/* From pageable memory (what the runtime has) the copy is staged before
 * cudaMemcpyAsync returns, so src may be reused at once. From pinned
 * memory the copy is a true DMA that runs later, reading src then: the
 * contract (src reusable on return) is kept by waiting for it. */
static int cx_upload(void *ctx, void *dst, const void *src, size_t bytes)
{
	struct cuda_cx *c = ctx;
	struct cudaPointerAttributes at;
	int r;

	if (!bytes)
		return 0;
	if ((r = busy(c)) ||
	    (r = ERR(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c->st))))
		return r;
	if (cudaPointerGetAttributes(&at, src) != cudaSuccess) {
		(void)cudaGetLastError();	/* unknown to CUDA: pageable */
		return 0;
	}
	return at.type == cudaMemoryTypeHost ? ERR(c, cudaStreamSynchronize(c->st)) : 0;
}

static int cx_download(void *ctx, void *dst, const void *src, size_t bytes)
{
	struct cuda_cx *c = ctx;
	int r = 0;

	if (bytes && !(r = busy(c)))
		r = ERR(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c->st));
	return r ? r : cx_sync(c);
}

/* ---- weights ---- */

/* A block-type matrix w into f16 at dev: dequantized on the host a slab
 * of rows at a time (at most 32 MiB of f16), each slab copied up before
 * the next is written. */
static int widen_host(struct cuda_cx *c, void *dev, const struct kvt_mat *w)
{
	const struct kvt_qtype *t = kvt_qtype(w->type);
	size_t rb = (size_t)w->n_in / t->blk * t->size;
	uint32_t slab = (uint32_t)((32u << 20) / ((size_t)w->n_in * 2)), r0, i;
	float *row = malloc((size_t)w->n_in * sizeof(float));
	uint16_t *h = NULL;
	int r = 0;

	if (!slab)
		slab = 1;
	if (slab > w->n_out)
		slab = w->n_out;
	if (row)
		h = malloc((size_t)slab * w->n_in * sizeof(uint16_t));
	if (!row || !h) {
		free(row);
		free(h);
		return -ENOMEM;
	}
	for (r0 = 0; r0 < w->n_out && !r; r0 += slab) {
		uint32_t nr = w->n_out - r0 < slab ? w->n_out - r0 : slab;

		for (uint32_t k = 0; k < nr; k++) {
			kvt_dequant(w->type, row, (const char *)w->data + (size_t)(r0 + k) * rb,
				    w->n_in / t->blk, 0);
			for (i = 0; i < w->n_in; i++)
				h[(size_t)k * w->n_in + i] = f2h(row[i]);
		}
		r = ERR(c, cudaMemcpyAsync((uint16_t *)dev + (size_t)r0 * w->n_in, h,
					   (size_t)nr * w->n_in * 2, cudaMemcpyHostToDevice, c->st));
		if (!r)
			r = ERR(c, cudaStreamSynchronize(c->st));	/* before h is rewritten */
	}
	free(row);
	free(h);
	return r;
}

static int cx_mat_prepare(void *ctx, const struct kvt_mat *w, struct kvt_mat *out)
{
	struct cuda_cx *c = ctx;
	size_t n = (size_t)w->n_out * w->n_in, bytes;
	void *p = NULL, *tmp = NULL;
	int r, rs;

	*out = *w;
	out->data = NULL;
	if ((r = kvt_cuda_enter(c->d)))
		return r;
	switch (w->type) {
	case KVT_W_F32:
		bytes = n * 4;
		break;
	case KVT_W_F16:
	case KVT_W_BF16:
		bytes = n * 2;
		break;
	case KVT_W_Q8_0:
		if (w->n_in % 32)
			return -EINVAL;
		bytes = n * 2;
		out->type = KVT_W_F16;
		break;
	default:
		if (!kvt_qtype(w->type) || w->n_in % kvt_qtype(w->type)->blk)
			return -EINVAL;
		bytes = n * 2;
		out->type = KVT_W_F16;
		break;
	}
	if ((r = ERR(c, cudaMalloc(&p, bytes)))) {
		kvt_dev_log(c->dev, KVT_LOG_ERROR, "cuda: no room for a %u x %u weight matrix (%zu MiB)",
		       w->n_out, w->n_in, bytes >> 20);
		return r;
	}
	/* The copies go on the context's stream, not through cudaMemcpy: from
	 * pageable memory (the model's mapping) cudaMemcpy returns once the
	 * data is staged, before its DMA is done, and it runs on the legacy
	 * stream, with which c->st (non-blocking) does not synchronise: the
	 * widening kernel, or a later GEMM, could read the copy half done. */
	if (out->type == KVT_W_F16 && w->type != KVT_W_F16 && w->type != KVT_W_Q8_0) {
		r = widen_host(c, p, w);
	} else if (w->type != KVT_W_Q8_0) {
		r = ERR(c, cudaMemcpyAsync(p, w->data, bytes, cudaMemcpyHostToDevice, c->st));
	} else {
		size_t blocks = n / 32;

		r = ERR(c, cudaMalloc(&tmp, blocks * 34));
		if (!r)
			r = ERR(c, cudaMemcpyAsync(tmp, w->data, blocks * 34, cudaMemcpyHostToDevice,
						   c->st));
		if (!r)
			r = LAUNCH(c, kvt_cu_q8_0_to_f16(c->st, p, tmp, blocks));
	}
	/* Done when this returns (tmp is freed below), whatever failed: no
	 * copy or kernel may still use p or tmp once they are freed. */
	if ((rs = ERR(c, cudaStreamSynchronize(c->st))) && !r)
		r = rs;
	if (tmp)
		cudaFree(tmp);
	if (r) {
		cudaFree(p);
		return r;
	}
	out->data = p;
	return 0;
}

static void cx_mat_release(void *ctx, struct kvt_mat *w)
{
	struct cuda_cx *c = ctx;

	if (w->data && !enter(c))
		ERR(c, cudaFree((void *)w->data));
	w->data = NULL;
}

/* ---- kernels ---- */

static int cx_matmul_n(void *ctx, unsigned n, float *const *y, const float *x, unsigned rows,
		       const struct kvt_mat *const *w)
{
	struct cuda_cx *c = ctx;
	const float one = 1.0f, zero = 0.0f;
	uint32_t rounded = UINT32_MAX;	/* the type x was last rounded to */
	int r;

	if (!rows)
		return 0;
	/* cuBLAS takes int dimensions. */
	if (rows > INT_MAX)
		return -EINVAL;
	for (unsigned k = 0; k < n; k++)
		if (w[k]->n_in > INT_MAX || w[k]->n_out > INT_MAX)
			return -EINVAL;
	if ((r = busy(c)))
		return r;
	for (unsigned k = 0; k < n && !r; k++) {
		const struct kvt_mat *m = w[k];
		cudaDataType_t t = m->type == KVT_W_F16 ? CUDA_R_16F : CUDA_R_16BF;

		if (m->type == KVT_W_F32) {
			r = CUBLAS(c->dev, cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m->n_out,
						       (int)rows, (int)m->n_in, &one, m->data,
						       (int)m->n_in, x, (int)m->n_in, &zero, y[k],
						       (int)m->n_out));
			continue;
		}
		if (m->type != KVT_W_F16 && m->type != KVT_W_BF16)
			return -EINVAL;
		if (rounded != m->type) {
			size_t cnt = (size_t)rows * m->n_in;

			if ((r = ensure(c, &c->xc, &c->xc_bytes, cnt * 2)) || (r = busy(c)))
				break;
			r = LAUNCH(c, m->type == KVT_W_F16
					? kvt_cu_f32_to_f16(c->st, c->xc, x, cnt)
					: kvt_cu_f32_to_bf16(c->st, c->xc, x, cnt));
			rounded = m->type;
		}
		/* Column-major: y^T (n_out, rows) = W^T (n_out, n_in) x^T (n_in, rows). */
		if (!r)
			r = CUBLAS(c->dev, cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m->n_out,
							(int)rows, (int)m->n_in, &one, m->data, t,
							(int)m->n_in, c->xc, t, (int)m->n_in, &zero,
							y[k], CUDA_R_32F, (int)m->n_out,
							CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	}
	return r;
}

static int cx_rmsnorm(void *ctx, float *out, const float *x, const uint32_t *idx, unsigned rows,
		      unsigned n, const float *w, float eps)
{
	struct cuda_cx *c = ctx;
	int r;

	if (idx) {
		if ((r = ensure(c, (void **)&c->idx, &c->idx_bytes, rows * sizeof(uint32_t))) ||
		    (r = cx_upload(c, c->idx, idx, rows * sizeof(uint32_t))))
			return r;
	}
	if ((r = busy(c)))
		return r;
	return LAUNCH(c, kvt_cu_rmsnorm(c->st, out, x, idx ? c->idx : NULL, rows, n, w, eps));
}

static int cx_rope(void *ctx, float *x, unsigned rows, unsigned n_heads, unsigned head_dim,
		   unsigned rope_dim, const uint32_t *pos, const double *inv_freq)
{
	struct cuda_cx *c = ctx;
	int r;

	if ((r = busy(c)))
		return r;
	return LAUNCH(c, kvt_cu_rope(c->st, x, rows, n_heads, head_dim, rope_dim, pos, inv_freq));
}

static int cx_swiglu(void *ctx, float *g, const float *u, size_t n)
{
	struct cuda_cx *c = ctx;
	int r;

	if ((r = busy(c)))
		return r;
	return LAUNCH(c, kvt_cu_swiglu(c->st, g, u, n));
}

static int cx_add(void *ctx, float *x, const float *y, unsigned rows, size_t n)
{
	struct cuda_cx *c = ctx;
	int r;

	if ((r = busy(c)))
		return r;
	return LAUNCH(c, kvt_cu_add(c->st, x, y, rows, n));
}

static int cx_to_kv(void *ctx, void *dst, const float *src, size_t n, int kv_type)
{
	struct cuda_cx *c = ctx;
	int r;

	if (kv_type != KVT_KV_F16 && kv_type != KVT_KV_F32)
		return -EINVAL;
	if ((r = busy(c)))
		return r;
	if (kv_type == KVT_KV_F16)
		return LAUNCH(c, kvt_cu_f32_to_f16(c->st, dst, src, n));
	return dst == src ? 0 : ERR(c, cudaMemcpyAsync(dst, src, n * sizeof(float),
						       cudaMemcpyDeviceToDevice, c->st));
}

/* ---- attention ---- */

static int cx_attn_begin(void *ctx, const struct kvt_attn_shape *sh, const float *q,
			 const uint32_t *qpos, unsigned parts, unsigned max_pages)
{
	struct cuda_cx *c = ctx;
	size_t per, need, vecs;
	int r;

	/* Until this call succeeds, attn_pages and attn_end refuse (the
	 * shape of a call that is over, or none: n_kv_heads 0). */
	c->a = (struct kvt_cu_attn){ 0 };
	c->parts_used = 0;
	c->pg_used = 0;
	/* n_head 0 would make per 0 below, a division by zero. */
	if (parts != 1 || !sh->rows || !sh->n_head || !sh->n_kv_heads ||
	    sh->n_head % sh->n_kv_heads || !sh->head_dim || sh->head_dim > 256 ||
	    (sh->kv_type != KVT_KV_F16 && sh->kv_type != KVT_KV_F32))
		return -EINVAL;
	if ((r = enter(c)))
		return r;
	/* The previous call's pages may still be on their way up. */
	if (c->pg_inflight && (r = cx_sync(c)))
		return r;
	if (max_pages > c->pg_cap) {
		unsigned cap = max_pages < 256 ? 256 : max_pages;

		if ((r = cx_sync(c)))
			return r;
		cudaFreeHost(c->pg_host);
		cudaFree(c->pg_dev);
		c->pg_host = NULL;
		c->pg_dev = NULL;
		c->pg_cap = 0;
		if ((r = ERR(c, cudaMallocHost((void **)&c->pg_host, cap * sizeof(*c->pg_host)))) ||
		    (r = ERR(c, cudaMalloc((void **)&c->pg_dev, cap * sizeof(*c->pg_dev)))))
			return r;
		c->pg_cap = cap;
	}
	/* Partials: as many parts as the budget holds, two at least. */
	vecs = (size_t)sh->rows * sh->n_head;
	per = vecs * (sh->head_dim + 2) * sizeof(float);
	need = per * 2 > PART_BUDGET ? per * 2 : PART_BUDGET;
	if ((r = ensure(c, &c->parts, &c->parts_bytes, need)))
		return r;
	c->a = (struct kvt_cu_attn){
		.rows = sh->rows, .n_head = sh->n_head, .n_kv_heads = sh->n_kv_heads,
		.head_dim = sh->head_dim, .scale = sh->scale, .kv_type = sh->kv_type,
		.q = q, .qpos = qpos,
	};
	c->a.parts_cap = (unsigned)(c->parts_bytes / per < 4096 ? c->parts_bytes / per : 4096);
	c->a.pm = c->parts;
	c->a.pl = c->a.pm + (size_t)c->a.parts_cap * vecs;
	c->a.po = c->a.pl + (size_t)c->a.parts_cap * vecs;
	return 0;
}

static int cx_attn_pages(void *ctx, unsigned part, const struct kvt_page_ref *pg, unsigned n)
{
	struct cuda_cx *c = ctx;
	const struct kvt_cu_attn *a = &c->a;
	unsigned blocks, want, per, nsplit;
	uintptr_t addr = 0;
	int r;

	if (!n)
		return 0;
	if (!a->n_kv_heads)
		return -EINVAL;		/* no attn_begin that succeeded */
	if (n > c->pg_cap - c->pg_used)
		return -EINVAL;		/* more pages than attn_begin was told */
	for (unsigned i = 0; i < n; i++) {
		if (pg[i].pm)
			return -ENOTSUP;
		c->pg_host[c->pg_used + i] = (struct kvt_cu_page){
			.k = pg[i].k, .v = pg[i].v, .ntok = pg[i].ntok, .pos0 = pg[i].pos0,
		};
		addr |= (uintptr_t)pg[i].k | (uintptr_t)pg[i].v;
	}
	if ((r = busy(c)))
		return r;
	/* Pinned and never rewritten before a sync: a true async copy. */
	if ((r = ERR(c, cudaMemcpyAsync(c->pg_dev + c->pg_used, c->pg_host + c->pg_used,
					n * sizeof(*c->pg_dev), cudaMemcpyHostToDevice, c->st))))
		return r;
	c->pg_inflight = 1;
	/* Enough parts for ATT_BLOCKS_PER_SM blocks an SM, given the heads and
	 * the rows; each call folds into the parts the calls before it left,
	 * so the merge at the end reads no more than the widest call wrote. */
	blocks = a->n_kv_heads * kvt_cu_attn_tiles(a);
	want = blocks ? (ATT_BLOCKS_PER_SM * (unsigned)c->d->sms + blocks - 1) / blocks : 1;
	want = want < 1 ? 1 : want > a->parts_cap ? a->parts_cap : want;
	per = (n + want - 1) / want;
	nsplit = (n + per - 1) / per;
	r = LAUNCH(c, kvt_cu_attn_pages(c->st, a, c->pg_dev + c->pg_used, n, per, c->parts_used,
					addr % 16 == 0));
	c->pg_used += n;
	/* A failed launch wrote none of its slots: none is folded into. */
	if (!r && nsplit > c->parts_used)
		c->parts_used = nsplit;
	return r;
}

static int cx_attn_end(void *ctx, float *out)
{
	struct cuda_cx *c = ctx;
	int r;

	if (!c->a.n_kv_heads)
		return -EINVAL;		/* no attn_begin that succeeded */
	if ((r = busy(c)))
		return r;
	return LAUNCH(c, kvt_cu_attn_merge(c->st, &c->a, c->parts_used, out));
}

const struct kvt_compute_ops kvt_cuda_compute = {
	.name		= "cuda",
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
