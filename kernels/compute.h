/* SPDX-License-Identifier: MIT */
/*
 * The compute seam: what the forward pass (runtime/infer.c) needs of a
 * backend, as one table of function pointers plus a context, in the
 * manner of kernels/device.h. The cpu kernels are one implementation
 * (kernels/cpu/cpu_compute.c), the cuda plug-in another
 * (kernels/cuda/cuda_compute.c); a device names its own in dev->compute.
 *
 * Memory. "Buffer" memory is what the backend's kernels read and write:
 * device memory on a GPU, host memory on cpu (flag KVT_CX_HOST_MEMORY:
 * the runtime may then touch buffers directly, and upload/download are
 * memcpy). Weights are prepared once (mat_prepare) into whatever the
 * backend multiplies fastest. Pages (struct kvt_page_ref) are read where
 * the pager has them: the fast tier (device memory) or, read in place,
 * the host tier.
 *
 * Order. Calls on one context run in the order they are made. With
 * KVT_CX_ASYNC they may still be running when the call returns (a CUDA
 * stream): the buffers and pages they read must stay as they are until
 * sync(), and so must the page list given to attn_pages; download()
 * waits for what came before it. The small host arguments (a shape, the
 * arrays of matrices and outputs of matmul_n, rmsnorm's row indices) are
 * read before the call returns. Without KVT_CX_ASYNC every call is done
 * when it returns.
 *
 * Threads: one thread drives a context, except that on a backend with
 * parallel() several tasks run attn_pages at once, each on its own part.
 *
 * Every function returns 0 or -errno (-EIO for a device error, which the
 * backend logs through the device's log with the call that failed).
 */
#ifndef KVT_KERNELS_COMPUTE_H
#define KVT_KERNELS_COMPUTE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct kvt_device;

/* Weight types: GGUF's type codes (runtime/gguf.h, enum kvt_ggml_type). */
enum kvt_wtype {
	KVT_W_F32 = 0, KVT_W_F16 = 1,
	KVT_W_Q4_0 = 2, KVT_W_Q4_1 = 3, KVT_W_Q5_0 = 6, KVT_W_Q5_1 = 7, KVT_W_Q8_0 = 8,
	KVT_W_Q2_K = 10, KVT_W_Q3_K = 11, KVT_W_Q4_K = 12, KVT_W_Q5_K = 13, KVT_W_Q6_K = 14,
	KVT_W_BF16 = 30,
};

/* A weight matrix (n_out, n_in) in GGUF layout: n_out rows of n_in values
 * (ne[0] = n_in contiguous), in F32, F16, BF16 or one of GGML's block
 * types above (kernels/cpu/quants.h: blocks of 32 values, 256 for the
 * _K types; n_in a whole number of blocks). */
struct kvt_mat {
	const void *data;
	uint32_t type;			/* enum kvt_wtype */
	uint32_t n_in, n_out;
};

/* KV element types. Q8_0 and Q4_0: each token's row of n_kv_heads *
 * head_dim values in GGML's blocks of 32 (an f16 scale d, then 32 int8 q
 * in 34 bytes, each d q, or 32 4-bit q in 18, each d (q - 8)), head_dim a
 * multiple of 32, so that a head's values are whole blocks; 1.0625 and
 * 0.5625 bytes a value where f16 takes 2. */
enum kvt_kv_type { KVT_KV_F16 = 0, KVT_KV_F32 = 1, KVT_KV_Q8_0 = 2, KVT_KV_Q4_0 = 3 };

/* The block type (enum kvt_wtype) a quantized KV type stores, 0 for f16
 * and f32. */
static inline int kvt_kv_block(int t)
{
	return t == KVT_KV_Q8_0 ? KVT_W_Q8_0 : t == KVT_KV_Q4_0 ? KVT_W_Q4_0 : 0;
}

/* The KV type's name as kvt-run's --kv-type takes it, NULL for none. */
static inline const char *kvt_kv_name(int t)
{
	static const char *const name[] = { "f16", "f32", "q8_0", "q4_0" };

	return t >= 0 && t <= KVT_KV_Q4_0 ? name[t] : NULL;
}

/* The KV type named name (as kvt_kv_name gives it), or -1. */
static inline int kvt_kv_parse(const char *name)
{
	for (int t = KVT_KV_F16; kvt_kv_name(t); t++)
		if (!strcmp(name, kvt_kv_name(t)))
			return t;
	return -1;
}

/* Bytes of n values (a multiple of 32 for the block types) in KV type
 * t, 0 for a type not listed. */
static inline size_t kvt_kv_bytes(int t, size_t n)
{
	switch (t) {
	case KVT_KV_F16:  return n * 2;
	case KVT_KV_F32:  return n * 4;
	case KVT_KV_Q8_0: return n / 32 * 34;
	case KVT_KV_Q4_0: return n / 32 * 18;
	}
	return 0;
}

/* The shape of an attention call. q is (rows, n_head, head_dim) f32,
 * rotated and not yet scaled; K and V are (ntok, n_kv_heads, head_dim) in
 * kv_type; query head h reads KV head h / (n_head / n_kv_heads). */
struct kvt_attn_shape {
	unsigned rows, n_head, n_kv_heads, head_dim;
	float scale;			/* 1/sqrt(head_dim) normally */
	int kv_type;			/* enum kvt_kv_type */
};

/* One page for attention: token t of it is at position pos0 + t, and
 * query row r sees it iff pos0 + t <= qpos[r] (causal). */
struct kvt_page_ref {
	const void *k, *v;		/* (ntok, n_kv_heads, head_dim) each, as the
					 * pager's view has them */
	uint32_t ntok;
	uint32_t pos0;
	/* Optional (host memory, (rows, n_head) each): the page's own
	 * partial of the online softmax, as kvt_attn_page_partial writes it,
	 * for attention scores. Backends without it refuse non-NULL. */
	float *pm, *pl;
};

#define KVT_CX_HOST_MEMORY	1u	/* buffers are host memory */
#define KVT_CX_ASYNC		2u	/* calls return before their work is done */
#define KVT_CX_SCORES		4u	/* attn_pages takes pm/pl; attn_mass exists */

struct kvt_compute_ops {
	const char *name;
	unsigned flags;			/* KVT_CX_* */

	/* A context on dev running n_threads host threads (0: one per cpu
	 * this process may use; backends that compute elsewhere may ignore
	 * it). 0 or -errno with one line in err. */
	int  (*open)(struct kvt_device *dev, unsigned n_threads, void **ctx,
		     char *err, size_t errlen);
	void (*close)(void *ctx);
	/* Host threads the context runs on (parts for attention). */
	unsigned (*threads)(void *ctx);
	/* Optional: run fn(arg, task, thread) for every task across the
	 * threads (thread < threads()) and return when all are done. The
	 * runtime runs host-side attention tasks on it. */
	void (*parallel)(void *ctx, void (*fn)(void *arg, unsigned task, unsigned thread),
			 void *arg, unsigned n_tasks);
	/* A one-line description of what the kernels run on, e.g. "cpu
	 * avx512, OpenBLAS Haswell" or "NVIDIA H200, cuBLAS 13.0". */
	void (*describe)(void *ctx, char *buf, size_t len);

	/* Buffers. */
	int  (*alloc)(void *ctx, size_t bytes, void **out);
	void (*free)(void *ctx, void *p, size_t bytes);
	/* host src -> buffer dst (src may be reused once this returns). */
	int  (*upload)(void *ctx, void *dst, const void *src, size_t bytes);
	/* buffer or page memory src -> host dst; waits for what came before. */
	int  (*download)(void *ctx, void *dst, const void *src, size_t bytes);
	/* Wait for everything issued so far. */
	int  (*sync)(void *ctx);

	/* Weights: *out is w as the backend keeps it (on cpu, w itself: the
	 * mapping is read in place; on a GPU, a copy in device memory, Q8_0
	 * widened to F16). Released with mat_release. */
	int  (*mat_prepare)(void *ctx, const struct kvt_mat *w, struct kvt_mat *out);
	void (*mat_release)(void *ctx, struct kvt_mat *w);

	/* y[k] (rows, w[k]->n_out) = x (rows, n_in) * w[k]^T for k < n
	 * (n <= 4), prepared weights of one n_in; x and the y do not
	 * overlap. -EINVAL for a type the backend does not take. */
	int  (*matmul_n)(void *ctx, unsigned n, float *const *y, const float *x, unsigned rows,
			 const struct kvt_mat *const *w);
	/* out row i (n) = x row idx[i] / rms(x row) * w, for i < rows; idx is
	 * host memory, NULL for 0, 1, 2, ...; out may be x when idx is NULL. */
	int  (*rmsnorm)(void *ctx, float *out, const float *x, const uint32_t *idx,
			unsigned rows, unsigned n, const float *w, float eps);
	/* RoPE in place on x (rows, n_heads, head_dim): row r at position
	 * pos[r], over the first rope_dim dims of each head in adjacent pairs,
	 * angle pos * inv_freq[i] in double (kvt_rope). pos (rows) and
	 * inv_freq (rope_dim / 2) are buffers. */
	int  (*rope)(void *ctx, float *x, unsigned rows, unsigned n_heads, unsigned head_dim,
		     unsigned rope_dim, const uint32_t *pos, const double *inv_freq);
	/* g (n) = silu(g) * u */
	int  (*swiglu)(void *ctx, float *g, const float *u, size_t n);
	/* x (rows, n) += y (n) in every row: a residual with rows 1, a
	 * bias (Qwen2's Q, K and V) with a row a token, in one call */
	int  (*add)(void *ctx, float *x, const float *y, unsigned rows, size_t n);
	/* dst (n) = src in kv_type (f16: round to nearest even; f32: a copy;
	 * q8_0, q4_0: ggml's reference quantizers, n whole blocks). */
	int  (*to_kv)(void *ctx, void *dst, const float *src, size_t n, int kv_type);

	/* Attention over pages handed over in any order (online softmax,
	 * log-sum-exp merge). attn_begin starts a call: q (sh->rows, n_head,
	 * head_dim) and qpos (rows) are buffers, parts the accumulators
	 * (<= threads()), max_pages the most pages attn_pages will be given
	 * in this call, in all; q and qpos may be NULL to reserve what a
	 * call of this shape needs, and nothing more (an engine does so at
	 * creation, so that decode cannot run out of memory later).
	 * attn_pages folds pages into accumulator part
	 * (on a backend with parallel(), from task threads, one part each);
	 * attn_end merges the parts and writes out (rows, n_head, head_dim),
	 * zeros for a row that saw nothing. A row sees a token iff its
	 * position is <= qpos. */
	int  (*attn_begin)(void *ctx, const struct kvt_attn_shape *sh, const float *q,
			   const uint32_t *qpos, unsigned parts, unsigned max_pages);
	int  (*attn_pages)(void *ctx, unsigned part, const struct kvt_page_ref *pages, unsigned n);
	int  (*attn_end)(void *ctx, float *out);
	/* KVT_CX_SCORES only, after attn_end: each page's share of the
	 * softmax mass from the partials attn_pages wrote (kvt_attn_mass). */
	void (*attn_mass)(void *ctx, const float *pm, const float *pl, unsigned n_pages,
			  float *mass);
	/* Optional hint: the next page attention will read (the cpu pulls
	 * it into its caches). */
	void (*prefetch)(void *ctx, const void *p, size_t bytes);
};

/* A context, as the runtime holds it. */
struct kvt_compute {
	const struct kvt_compute_ops *ops;
	void *ctx;
	struct kvt_device *dev;		/* NULL: cpu without a device (dense path) */
};

/* Open the compute context of dev: its own kernels, or the cpu kernels
 * for the cpu device and for dev NULL. 0 or -errno with one line in err;
 * -ENOTSUP where dev has no kernels. */
int  kvt_compute_open(struct kvt_device *dev, unsigned n_threads, struct kvt_compute *out,
		      char *err, size_t errlen);
void kvt_compute_close(struct kvt_compute *cx);	/* also on a zeroed one */

/* The cpu kernels behind the seam. */
extern const struct kvt_compute_ops kvt_cpu_compute;

#endif
