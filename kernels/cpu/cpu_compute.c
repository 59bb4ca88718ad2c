/* SPDX-License-Identifier: MIT */
/*
 * The cpu kernels behind the compute seam (kernels/compute.h). Buffers are
 * host memory, every call is done when it returns, and attention runs one
 * accumulator per pool thread: the runtime's tasks fold pages into their
 * own part while they acquire them, and attn_end merges the parts.
 * Nothing here adds work to the kernels it wraps: the forward pass on cpu
 * computes exactly what it did before the seam.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/compute.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/qdots.h"
#include "kernels/cpu/quants.h"

struct cpu_cx {
	struct kvt_pool *pool;
	unsigned nthreads;
	struct kvt_attn_acc *acc;	/* (nthreads), made at the first attn_begin */
	struct kvt_attn_shape acc_sh;	/* what they were made for; rows = capacity */
	unsigned parts;			/* accumulators in the current call */
	const float *q;			/* (rows, n_head, head_dim) of the current call */
	const uint32_t *qpos;		/* (rows) */
	/* RoPE's angles for the positions of the last call (cpu_rope). */
	struct {
		float	 *cs;		/* (cap, dim): (cos, sin) pairs a row */
		uint32_t *pos;		/* (cap) */
		double	 *freq;		/* (dim / 2) the inv_freq they were made with */
		unsigned  rows, cap, dim;
	} rope;
};

static int cpu_open(struct kvt_device *dev, unsigned n_threads, void **out, char *err,
		    size_t errlen)
{
	struct cpu_cx *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	r = kvt_pool_new(n_threads, &c->pool);
	if (r) {
		snprintf(err, errlen, "cpu: cannot start %u compute threads: %s", n_threads,
			 strerror(-r));
		free(c);
		return r;
	}
	c->nthreads = kvt_pool_threads(c->pool);
	*out = c;
	return 0;
}

static void free_acc(struct cpu_cx *c)
{
	if (c->acc)
		for (unsigned i = 0; i < c->nthreads; i++)
			kvt_attn_acc_free(&c->acc[i]);
	free(c->acc);
	c->acc = NULL;
}

static void cpu_close(void *ctx)
{
	struct cpu_cx *c = ctx;

	free(c->rope.cs);
	free(c->rope.pos);
	free(c->rope.freq);
	free_acc(c);
	kvt_pool_free(c->pool);
	free(c);
}

static unsigned cpu_threads(void *ctx)
{
	return ((struct cpu_cx *)ctx)->nthreads;
}

static void cpu_parallel(void *ctx, void (*fn)(void *, unsigned, unsigned), void *arg,
			 unsigned n_tasks)
{
	kvt_pool_run(((struct cpu_cx *)ctx)->pool, fn, arg, n_tasks);
}

static void cpu_describe(void *ctx, char *buf, size_t len)
{
	static const char *const simd[] = { "portable C", "AVX2", "AVX-512" };

	static const char *const bf16[] = { "", "AVX512-BF16 dots for the block types, ",
					    "AMX bf16 tiles for the block types, " };
	const char *want = kvt_blas_core_wanted(), *was = getenv("KVT_BLAS_CHOSE");
	int q = kvt_qdots(KVT_W_Q4_K) != NULL;
	int n = snprintf(buf, len, "cpu, %s kernels, %u threads; %s; GEMM: %sOpenBLAS %s",
			 simd[kvt_cpu_simd()], ((struct cpu_cx *)ctx)->nthreads,
			 !q ? "f32 activations" : kvt_cpu_kv_int8() ?
			 "int8 dots for the block types and q8_0/q4_0 K" : "int8 dots for the block types",
			 bf16[q ? kvt_amx() : KVT_BF16_OFF], kvt_blas_core());

	if (n < 0 || (size_t)n >= len)
		return;
	if (want)
		snprintf(buf + n, len - n, ", weaker than this cpu (set OPENBLAS_CORETYPE=%s)", want);
	else if (was && getenv("OPENBLAS_CORETYPE"))
		snprintf(buf + n, len - n, " (OPENBLAS_CORETYPE, over its own choice of %s)", was);
}

/* On a cache line: past malloc's mmap threshold a buffer starts 16 bytes
 * into one, and every vector load of a row spans two lines (decode
 * attention took about 15 per cent longer so, docs/benchmarks.md). */
static int cpu_alloc(void *ctx, size_t bytes, void **out)
{
	if (posix_memalign(out, 64, bytes ? bytes : 1)) {
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
}

static void cpu_free(void *ctx, void *p, size_t bytes)
{
	free(p);
}

static int cpu_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
	if (dst != src)
		memcpy(dst, src, bytes);
	return 0;
}

static int cpu_sync(void *ctx)
{
	return 0;
}

static int cpu_mat_prepare(void *ctx, const struct kvt_mat *w, struct kvt_mat *out)
{
	*out = *w;
	return 0;
}

static void cpu_mat_release(void *ctx, struct kvt_mat *w)
{
	w->data = NULL;
}

static int cpu_matmul_n(void *ctx, unsigned n, float *const *y, const float *x, unsigned rows,
			const struct kvt_mat *const *w)
{
	struct cpu_cx *c = ctx;

	if (n == 1)
		return kvt_matmul(c->pool, y[0], x, rows, w[0]);
	return kvt_matmul_n(c->pool, n, y, x, rows, w);
}

static int cpu_rmsnorm(void *ctx, float *out, const float *x, const uint32_t *idx,
		       unsigned rows, unsigned n, const float *w, float eps)
{
	for (unsigned i = 0; i < rows; i++)
		kvt_rmsnorm(out + (size_t)i * n, x + (size_t)(idx ? idx[i] : i) * n, w, n, eps);
	return 0;
}

/*
 * The angles of rows at pos, kept for the next call: a step's Q and K in
 * every layer have the same positions, and the sincos of each angle (32
 * to 64 a row, in double) cost more than the rotations. NULL where they
 * cannot be kept (no memory): the caller works them out itself.
 */
static const float *rope_angles(struct cpu_cx *c, unsigned rows, unsigned dim,
				const uint32_t *pos, const double *inv_freq)
{
	if (!rows || !dim)
		return NULL;
	if (c->rope.dim == dim && c->rope.rows == rows &&
	    !memcmp(c->rope.pos, pos, rows * sizeof(*pos)) &&
	    !memcmp(c->rope.freq, inv_freq, dim / 2 * sizeof(*inv_freq)))
		return c->rope.cs;
	if (rows > c->rope.cap || dim != c->rope.dim) {
		float *cs = realloc(c->rope.cs, (size_t)rows * dim * sizeof(*cs));
		uint32_t *p;
		double *f;

		if (cs)
			c->rope.cs = cs;
		p = realloc(c->rope.pos, rows * sizeof(*p));
		if (p)
			c->rope.pos = p;
		f = realloc(c->rope.freq, (dim / 2 + 1) * sizeof(*f));
		if (f)
			c->rope.freq = f;
		c->rope.rows = c->rope.cap = c->rope.dim = 0;
		if (!cs || !p || !f)
			return NULL;
		c->rope.cap = rows;
		c->rope.dim = dim;
	}
	for (unsigned r = 0; r < rows; r++)
		kvt_rope_cs(c->rope.cs + (size_t)r * dim, dim, pos[r], inv_freq);
	memcpy(c->rope.pos, pos, rows * sizeof(*pos));
	memcpy(c->rope.freq, inv_freq, dim / 2 * sizeof(*inv_freq));
	c->rope.rows = rows;
	return c->rope.cs;
}

static int cpu_rope(void *ctx, float *x, unsigned rows, unsigned n_heads, unsigned head_dim,
		    unsigned rope_dim, const uint32_t *pos, const double *inv_freq)
{
	unsigned dim = rope_dim < head_dim ? rope_dim : head_dim;
	const float *cs = rope_angles(ctx, rows, dim, pos, inv_freq);

	for (unsigned r = 0; r < rows; r++) {
		float *xr = x + (size_t)r * n_heads * head_dim;

		if (cs)
			kvt_rope_apply(xr, n_heads, head_dim, dim, cs + (size_t)r * dim);
		else
			kvt_rope(xr, n_heads, head_dim, rope_dim, pos[r], inv_freq);
	}
	return 0;
}

static int cpu_swiglu(void *ctx, float *g, const float *u, size_t n)
{
	kvt_swiglu(g, u, (unsigned)n);
	return 0;
}

static int cpu_add(void *ctx, float *x, const float *y, unsigned rows, size_t n)
{
	for (unsigned r = 0; r < rows; r++, x += n)
		for (size_t i = 0; i < n; i++)
			x[i] += y[i];
	return 0;
}

static int cpu_to_kv(void *ctx, void *dst, const float *src, size_t n, int kv_type)
{
	if (kv_type == KVT_KV_F16)
		kvt_f32_to_f16(dst, src, n);
	else if (kv_type == KVT_KV_F32)
		cpu_copy(ctx, dst, src, n * sizeof(float));
	else if (kvt_kv_block(kv_type))
		return kvt_quantize((uint32_t)kvt_kv_block(kv_type), dst, src, n);	/* -EINVAL unless whole blocks */
	else
		return -EINVAL;
	return 0;
}

static int same_shape(const struct kvt_attn_shape *a, const struct kvt_attn_shape *b)
{
	return a->n_head == b->n_head && a->n_kv_heads == b->n_kv_heads &&
	       a->head_dim == b->head_dim && a->scale == b->scale && a->kv_type == b->kv_type;
}

static int cpu_attn_begin(void *ctx, const struct kvt_attn_shape *sh, const float *q,
			  const uint32_t *qpos, unsigned parts, unsigned max_pages)
{
	struct cpu_cx *c = ctx;

	if (!parts || parts > c->nthreads || !sh->rows)
		return -EINVAL;
	if (!c->acc || !same_shape(&c->acc_sh, sh) || sh->rows > c->acc_sh.rows) {
		free_acc(c);
		c->acc_sh = *sh;
		if (!(c->acc = calloc(c->nthreads, sizeof(*c->acc))))
			return -ENOMEM;
		for (unsigned i = 0; i < c->nthreads; i++) {
			int r = kvt_attn_acc_init(&c->acc[i], sh);
			if (r) {
				free_acc(c);
				return r;
			}
		}
	}
	for (unsigned i = 0; i < parts; i++) {
		c->acc[i].sh.rows = sh->rows;
		kvt_attn_acc_reset(&c->acc[i]);
	}
	c->parts = parts;
	c->q = q;
	c->qpos = qpos;
	return 0;
}

/* The page the runtime said comes next (cpu_prefetch), on this thread:
 * read while the next attn_pages call folds its pages. */
static __thread const void *pf_next;
static __thread size_t pf_bytes;

static int cpu_attn_pages(void *ctx, unsigned part, const struct kvt_page_ref *pg, unsigned n)
{
	struct cpu_cx *c = ctx;
	struct kvt_attn_acc *a = &c->acc[part];
	const struct kvt_attn_shape *sh = &c->acc_sh;
	const void *last = pf_next, *next;
	size_t bytes;
	int r = 0;

	pf_next = NULL;
	for (unsigned i = 0; i < n && !r; i++) {
		/* Within the call the next page is the next ref: its K, and its
		 * V where it follows K, as in the pager's pages; after the last
		 * one, the page the runtime named (cpu_prefetch). */
		if (i + 1 < n) {
			const struct kvt_page_ref *x = &pg[i + 1];
			size_t kb = kvt_kv_bytes(sh->kv_type,
						 (size_t)x->ntok * sh->n_kv_heads * sh->head_dim);

			next = x->k;
			bytes = (const char *)x->v == (const char *)x->k + kb ? 2 * kb : kb;
		} else {
			next = last;
			bytes = pf_bytes;
		}
		r = kvt_attn_page_ahead(a, c->q, c->qpos, pg[i].k, pg[i].v, pg[i].ntok, pg[i].pos0,
					pg[i].pm, pg[i].pl, next, bytes);
	}
	return r;
}

static int cpu_attn_end(void *ctx, float *out)
{
	struct cpu_cx *c = ctx;

	for (unsigned i = 1; i < c->parts; i++)
		kvt_attn_merge(&c->acc[0], &c->acc[i]);
	kvt_attn_finish(&c->acc[0], out);
	return 0;
}

static void cpu_attn_mass(void *ctx, const float *pm, const float *pl, unsigned n_pages,
			  float *mass)
{
	kvt_attn_mass(&((struct cpu_cx *)ctx)->acc[0], pm, pl, n_pages, mass);
}

static void cpu_prefetch(void *ctx, const void *p, size_t bytes)
{
	pf_next = p;
	pf_bytes = bytes;
}

const struct kvt_compute_ops kvt_cpu_compute = {
	.name		= "cpu",
	.flags		= KVT_CX_HOST_MEMORY | KVT_CX_SCORES,
	.open		= cpu_open,
	.close		= cpu_close,
	.threads	= cpu_threads,
	.parallel	= cpu_parallel,
	.describe	= cpu_describe,
	.alloc		= cpu_alloc,
	.free		= cpu_free,
	.upload		= cpu_copy,
	.download	= cpu_copy,
	.sync		= cpu_sync,
	.mat_prepare	= cpu_mat_prepare,
	.mat_release	= cpu_mat_release,
	.matmul_n	= cpu_matmul_n,
	.rmsnorm	= cpu_rmsnorm,
	.rope		= cpu_rope,
	.swiglu		= cpu_swiglu,
	.add		= cpu_add,
	.to_kv		= cpu_to_kv,
	.attn_begin	= cpu_attn_begin,
	.attn_pages	= cpu_attn_pages,
	.attn_end	= cpu_attn_end,
	.attn_mass	= cpu_attn_mass,
	.prefetch	= cpu_prefetch,
};
