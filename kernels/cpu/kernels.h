/* SPDX-License-Identifier: MIT */
/*
 * The cpu backend's compute kernels: what the forward pass in runtime/
 * needs (matrix products, RMSNorm, RoPE, SwiGLU, embedding rows, f16
 * conversion, paged attention) and a fixed thread pool to run them on.
 *
 * Shapes are given as (outer, ..., inner) with the last one contiguous.
 * Weights keep the GGUF layout: a matrix of n_out rows of n_in values
 * (ne[0] = n_in contiguous), in F32, F16, BF16 or Q8_0.
 *
 * Nothing here prints, exits or allocates per call except where noted;
 * functions that can fail return 0 or -errno.
 */
#ifndef KVT_KERNELS_CPU_H
#define KVT_KERNELS_CPU_H

#include <stddef.h>
#include <stdint.h>

/* A fixed pool of worker threads. The caller's thread takes part in every
 * run, so a pool of n threads has n - 1 workers. Between runs the workers
 * spin briefly, then sleep. */
struct kvt_pool;

int  kvt_pool_new(unsigned n_threads, struct kvt_pool **out);	/* 0 = one per online cpu */
void kvt_pool_free(struct kvt_pool *pool);
unsigned kvt_pool_threads(const struct kvt_pool *pool);
/* Run fn(arg, task, thread) for task in 0..n_tasks-1 across the pool and
 * return when all have finished. thread is in 0..kvt_pool_threads()-1 and
 * names the thread running the task (for per-thread scratch). Runs are not
 * reentrant: fn must not call kvt_pool_run on the same pool. */
void kvt_pool_run(struct kvt_pool *pool, void (*fn)(void *arg, unsigned task, unsigned thread),
		  void *arg, unsigned n_tasks);

/* A weight matrix (n_out, n_in) in GGUF layout. type is enum kvt_ggml_type
 * (runtime/gguf.h): F32, F16, BF16 or Q8_0 (n_in a multiple of 32). */
struct kvt_mat {
	const void *data;
	uint32_t type;
	uint32_t n_in, n_out;
};

/* y (rows, n_out) = x (rows, n_in) * W^T. Many rows go through OpenBLAS
 * sgemm (non-f32 weights converted a block of rows at a time into
 * scratch); a few rows go through vectorised dot products that read W
 * once for all rows, parallel over output rows on the pool. Returns 0 or
 * -ENOMEM (scratch). */
int  kvt_matmul(struct kvt_pool *pool, float *y, const float *x, unsigned rows,
		const struct kvt_mat *w);

/* Row id of W as f32 (n_in values): the token embedding lookup. */
void kvt_mat_row(float *out, const struct kvt_mat *w, uint32_t id);

/* out (n) = x / rms(x) * w; out may be x. */
void kvt_rmsnorm(float *out, const float *x, const float *w, unsigned n, float eps);

/* Rotary embedding in place on x (n_heads, head_dim) at position pos, over
 * the first rope_dim dims of each head, in adjacent pairs (2i, 2i+1) as
 * llama.cpp's GGUF Llama models expect: angle = pos * freq_scale *
 * theta^(-2i/rope_dim). */
void kvt_rope(float *x, unsigned n_heads, unsigned head_dim, unsigned rope_dim,
	      uint32_t pos, float theta, float freq_scale);

/* g (n) = silu(g) * u */
void kvt_swiglu(float *g, const float *u, unsigned n);

/* f32 <-> IEEE half (F16C where the cpu has it). */
void kvt_f32_to_f16(uint16_t *dst, const float *src, size_t n);
void kvt_f16_to_f32(float *dst, const uint16_t *src, size_t n);

/* KV element types. */
enum kvt_kv_type { KVT_KV_F16 = 0, KVT_KV_F32 = 1 };

/*
 * Paged attention, split into page-sized pieces so pages can be consumed in
 * whatever order they become ready: an accumulator holds, for each query
 * row r and head h, the running max m, the running sum l of exp(s - m) and
 * the unnormalised output o (head_dim); kvt_attn_page folds one page in
 * (online softmax), kvt_attn_merge folds another accumulator in
 * (log-sum-exp merge), kvt_attn_finish writes o / l.
 *
 * q is (rows, n_head, head_dim) f32, already rotated and NOT yet scaled;
 * k and v are (ntok, n_kv_heads, head_dim) in kv_type; query head h reads
 * KV head h / (n_head / n_kv_heads). Causal: the page's token t is at
 * position pos0 + t and query row r sees it iff pos0 + t <= qpos[r].
 * A (row, head) that saw no token yet has m = -inf, l = 0.
 */
struct kvt_attn_shape {
	unsigned rows, n_head, n_kv_heads, head_dim;
	float scale;			/* 1/sqrt(head_dim) normally */
	int kv_type;			/* enum kvt_kv_type */
};

struct kvt_attn_acc {
	struct kvt_attn_shape sh;
	float *m, *l;			/* (rows, n_head) */
	float *o;			/* (rows, n_head, head_dim) */
	float *s;			/* scratch: (page tokens) scores, grown as needed */
	size_t s_cap;
};

int  kvt_attn_acc_init(struct kvt_attn_acc *a, const struct kvt_attn_shape *sh);	/* allocates */
void kvt_attn_acc_reset(struct kvt_attn_acc *a);	/* m = -inf, l = 0, o = 0 */
void kvt_attn_acc_free(struct kvt_attn_acc *a);
/* Returns 0 or -ENOMEM (score scratch for a page longer than any before). */
int  kvt_attn_page(struct kvt_attn_acc *a, const float *q, const uint32_t *qpos,
		   const void *k, const void *v, unsigned ntok, uint32_t pos0);
void kvt_attn_merge(struct kvt_attn_acc *dst, const struct kvt_attn_acc *src);
/* out (rows, n_head, head_dim); a row that saw nothing gets zeros. */
void kvt_attn_finish(const struct kvt_attn_acc *a, float *out);

/* The reference: plain two-pass softmax attention over a contiguous KV
 * (n_ctx, n_kv_heads, head_dim) in kv_type, no paging, no online softmax.
 * Used by the dense path and the tests. Allocates n_ctx floats of score
 * scratch per call: 0 or -ENOMEM. */
int  kvt_attn_dense(const struct kvt_attn_shape *sh, float *out, const float *q,
		    const uint32_t *qpos, const void *k, const void *v, unsigned n_ctx);

#endif
