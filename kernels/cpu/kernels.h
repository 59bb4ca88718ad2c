/* SPDX-License-Identifier: MIT */
/*
 * The cpu backend's compute kernels: what the forward pass in runtime/
 * needs (matrix products, RMSNorm, RoPE, SwiGLU, embedding rows, f16
 * conversion, paged attention) and a fixed thread pool to run them on.
 *
 * Shapes are given as (outer, ..., inner) with the last one contiguous.
 * Weights keep the GGUF layout: a matrix of n_out rows of n_in values
 * (ne[0] = n_in contiguous), in F32, F16, BF16 or one of GGML's block
 * types (quants.h).
 *
 * Nothing here prints, exits or allocates per call except where noted;
 * functions that can fail return 0 or -errno.
 */
#ifndef KVT_KERNELS_CPU_H
#define KVT_KERNELS_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/compute.h"

/* A fixed pool of worker threads. The caller's thread takes part in every
 * run, so a pool of n threads has n - 1 workers. Between runs the workers
 * spin for 50 us, then sleep on a futex: a run that follows within that
 * costs well under a microsecond, one after a longer pause pays the
 * wake-up. */
struct kvt_pool;

/* 0 or -ENOMEM/-EAGAIN. n_threads 0: one per cpu this process may run on
 * (its affinity mask). */
int  kvt_pool_new(unsigned n_threads, struct kvt_pool **out);
void kvt_pool_free(struct kvt_pool *pool);	/* NULL is fine */
unsigned kvt_pool_threads(const struct kvt_pool *pool);	/* NULL: 1 */
/* Run fn(arg, task, thread) for task in 0..n_tasks-1 across the pool and
 * return when all have finished. thread is in 0..kvt_pool_threads()-1 and
 * names the thread running the task (for per-thread scratch); the caller
 * is thread 0. Tasks are handed out in order from a shared counter, so
 * uneven tasks balance themselves. One run at a time per pool: callers on
 * different threads must serialise, and fn must not call kvt_pool_run on
 * the same pool. pool NULL runs every task on the caller as thread 0. */
void kvt_pool_run(struct kvt_pool *pool, void (*fn)(void *arg, unsigned task, unsigned thread),
		  void *arg, unsigned n_tasks);

/* Weight matrices (struct kvt_mat), KV types and the attention shape are
 * the compute seam's (kernels/compute.h). */

/* y (rows, n_out) = x (rows, n_in) * W^T, on the pool (NULL: the caller
 * alone); x and y do not overlap. A few rows (under 8 for F32, under 16
 * for the other types) go through vectorised dot products that read W
 * once for all rows, parallel over blocks of output rows. More rows go
 * through OpenBLAS sgemm, one block of up to 256 output rows per pool
 * task, non-f32 weights first converted into per-call scratch (per
 * thread, one block: about 4 MiB at most unless rows are over 64 Ki
 * values wide; allocated and freed by the call). The first sgemm call
 * sets OpenBLAS to one thread, process-wide: the pool supplies the
 * parallelism, which measured faster on 2 cores than OpenBLAS's own
 * threads, and OpenBLAS's idle threads no longer spin against the pool's.
 * Block-quantized weights take integer dot products on x rounded to 8
 * bits where the cpu has AVX2 (AVX-512BW kernels where it has those;
 * qdots.h; off with kvt_cpu_set_int8_dots or KVT_EXACT_DOTS=1), as
 * llama.cpp does; with them off, q4_k, q6_k and q4_0 have fused f32
 * kernels, and the other block types take the dot products through their
 * AVX2 dequantizer a block at a time (quants.h), or the reference where
 * they have none. Returns 0, -EINVAL (a type not listed above, an n_in not a
 * whole number of the type's blocks) or -ENOMEM (scratch). */
int  kvt_matmul(struct kvt_pool *pool, float *y, const float *x, unsigned rows,
		const struct kvt_mat *w);

/* y[k] (rows, w[k]->n_out) = x * w[k]^T for k < n: products of one x
 * (Q, K and V; gate and up) in one pool run when all take the dot-product
 * path, so a decode step pays one hand-out for them instead of n. Falls
 * back to kvt_matmul one by one otherwise. Same returns. */
#define KVT_MATMUL_MAX 4
int  kvt_matmul_n(struct kvt_pool *pool, unsigned n, float *const *y, const float *x,
		  unsigned rows, const struct kvt_mat *const *w);

/* The dot-product kernels' dispatch (kernels.c, qdots.c): body once for
 * each count of weight rows NW (1 or 2) and of x rows R (1 to 4), which it
 * sees as the constants NN and RR, so that the compiler unrolls every loop
 * over them. */
#define KVT_NW_R_DISPATCH(NW, R, body...)					\
	switch (((NW) - 1) * 4 + (R) - 1) {					\
	case 0: { const unsigned NN = 1, RR = 1; body; break; }			\
	case 1: { const unsigned NN = 1, RR = 2; body; break; }			\
	case 2: { const unsigned NN = 1, RR = 3; body; break; }			\
	case 3: { const unsigned NN = 1, RR = 4; body; break; }			\
	case 4: { const unsigned NN = 2, RR = 1; body; break; }			\
	case 5: { const unsigned NN = 2, RR = 2; body; break; }			\
	case 6: { const unsigned NN = 2, RR = 3; body; break; }			\
	default: { const unsigned NN = 2, RR = 4; body; break; }		\
	}

/* Bytes of one row of n_in values of type, or 0 for a type the kernels
 * do not read (or an n_in that is not a whole number of its blocks). */
size_t kvt_mat_row_bytes(uint32_t type, uint32_t n_in);

/* OpenBLAS's name for the kernels it chose when it was loaded
 * ("Haswell", "Prescott", ...), and the core this cpu deserves when that
 * choice is weaker than what the cpu has ("SkylakeX" on AVX-512, "Haswell"
 * on AVX2 with FMA), else NULL. OpenBLAS reads OPENBLAS_CORETYPE only
 * when it loads, so the tools set it and start again (tools/cli.c); a
 * program linking libkvt can set it before it starts. */
const char *kvt_blas_core(void);
const char *kvt_blas_core_wanted(void);

/* Row id (< n_out) of W as f32 (n_in values): the token embedding lookup.
 * Exact: f16, bf16 and d * q all fit an f32; the block types as
 * llama.cpp dequantizes them. Writes nothing for a matrix
 * kvt_matmul would refuse. */
void kvt_mat_row(float *out, const struct kvt_mat *w, uint32_t id);

/* out (n) = x / rms(x) * w; out may be x. */
void kvt_rmsnorm(float *out, const float *x, const float *w, unsigned n, float eps);

/* The per-pair inverse frequencies of RoPE, once per model: inv_freq
 * (rope_dim / 2) gets freq_scale * theta^(-2i/rope_dim) / factors[i], in
 * double. factors (rope_dim / 2) are llama.cpp's freq_factors (Llama 3's
 * rope_freqs.weight): positive divisors of each pair's angle; NULL is all 1. */
void kvt_rope_inv_freq(double *inv_freq, unsigned rope_dim, float theta, float freq_scale,
		       const float *factors);

/* Rotary embedding in place on x (n_heads, head_dim) at position pos, over
 * the first rope_dim dims of each head, in adjacent pairs (2i, 2i+1) as
 * llama.cpp's GGUF Llama models expect: angle = pos * inv_freq[i] (see
 * kvt_rope_inv_freq), (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos).
 * The angles are computed in double. rope_dim is even and at most
 * head_dim; the dims past it are left alone. */
void kvt_rope(float *x, unsigned n_heads, unsigned head_dim, unsigned rope_dim,
	      uint32_t pos, const double *inv_freq);
/* kvt_rope in two: the (cos, sin) of the rope_dim / 2 angles at pos, as
 * floats, into cs (rope_dim), and their rotation of x, the same floats as
 * kvt_rope's. Positions shared by many calls (every layer's Q and K)
 * take the angles once. */
#define KVT_ROPE_MAX_PAIRS	128	/* kvt_rope's angles at a time */
void kvt_rope_cs(float *cs, unsigned rope_dim, uint32_t pos, const double *inv_freq);
void kvt_rope_apply(float *x, unsigned n_heads, unsigned head_dim, unsigned rope_dim,
		    const float *cs);

/* g (n) = silu(g) * u */
void kvt_swiglu(float *g, const float *u, unsigned n);

/* Ask for [p, p + bytes) in the caches (a hint: never faults). */
void kvt_cpu_prefetch(const void *p, size_t bytes);

/* Whether decode's scores on q8_0 and q4_0 K multiply 8-bit integers,
 * the queries rounded to q8_0 as llama.cpp does: with the integer dot
 * products on (kvt_cpu_int8_dots), AVX-512 kernels, and AVX512-VNNI and
 * VBMI. Otherwise f32 queries against K dequantized in registers. */
int kvt_cpu_kv_int8(void);

/* Which kernel decode attention (one row) takes for shape sh: 0 those of
 * a KV head at a time, 1 those of a chunk of KV heads' queries at once, in
 * address order, 2 those on q8_0 or q4_0 K's integer products (for tests
 * and benchmarks). */
int kvt_cpu_attn_rowpage(const struct kvt_attn_shape *sh);

/* f32 <-> IEEE half (F16C where the cpu has it). Round to nearest even;
 * overflow gives inf, subnormals are kept; NaNs keep sign and payload (the
 * top 10 bits of it on the way down) and come out quiet, exactly as F16C
 * does, on every cpu. */
void kvt_f32_to_f16(uint16_t *dst, const float *src, size_t n);
void kvt_f16_to_f32(float *dst, const uint16_t *src, size_t n);

/* Which code the kernels run: 0 the portable C, 1 AVX2 with FMA and F16C,
 * 2 that and AVX-512F. The best the cpu has, unless the environment holds
 * it lower (KVT_SIMD=0 or 1, read once) or kvt_cpu_set_simd_max lowers it
 * (tests use it to reach every path; call it between kernel calls, never
 * during one). */
int  kvt_cpu_simd(void);
void kvt_cpu_set_simd_max(int level);

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
struct kvt_attn_acc {
	struct kvt_attn_shape sh;
	float *m, *l;			/* (rows, n_head) */
	float *o;			/* (rows, n_head, head_dim) */
	float *s;			/* scratch for kvt_attn_page, grown as needed */
	size_t s_cap;			/* floats at s */
	/* Whole pages every row sees, of a call with many queries, gathered
	 * as f32 to be folded in together (kvt_attn_flush): (n_kv_heads, 2,
	 * KVT_ATTN_PEND, head_dim), K then V (K as (head_dim,
	 * KVT_ATTN_PEND) where pkt is set), then one head's K rows; pn
	 * tokens there, for the queries at pq. */
	float *pk;
	const float *pq;
	unsigned pn;
	int pkt;
};

#define KVT_ATTN_PEND	128	/* tokens gathered before they are folded */

/* Allocates m, l and o, and resets them: 0, -ENOMEM, or -EINVAL (a zero
 * dimension, n_head not a multiple of n_kv_heads, an unknown kv_type). */
int  kvt_attn_acc_init(struct kvt_attn_acc *a, const struct kvt_attn_shape *sh);
/* m = -inf, l = 0, o = 0; scratch kept. sh.rows may be lowered (never
 * above the rows at init) before a reset, to reuse one accumulator for
 * fewer rows. */
void kvt_attn_acc_reset(struct kvt_attn_acc *a);
void kvt_attn_acc_free(struct kvt_attn_acc *a);	/* also on a zeroed struct */
/* Fold in one page. An accumulator is used by one thread at a time (its
 * scratch); different accumulators may fold pages concurrently. Returns 0
 * or -ENOMEM (scratch for a page longer than any before). */
int  kvt_attn_page(struct kvt_attn_acc *a, const float *q, const uint32_t *qpos,
		   const void *k, const void *v, unsigned ntok, uint32_t pos0);
/* kvt_attn_page that also writes the page's own partial of each (row,
 * head), for attention scores: pl the sum of e^(s - pm) over the tokens
 * of the page the row sees, pm the max the terms were taken against (the
 * accumulator's running max after the page, so pm >= the page's own max
 * and pl cannot overflow); pm = -inf, pl = 0 where the row sees none of
 * the page. pm and pl are (rows, n_head), written whatever else happens.
 * Once every page is folded and merged into (M, L), the page's share of
 * the softmax mass of (row, head) is e^(pm - M) pl / L: see
 * kvt_attn_mass. Same returns as kvt_attn_page; the extra work is two
 * stores per (row, head). */
int  kvt_attn_page_partial(struct kvt_attn_acc *a, const float *q, const uint32_t *qpos,
			   const void *k, const void *v, unsigned ntok, uint32_t pos0,
			   float *pm, float *pl);
/* kvt_attn_page_partial (pm NULL: kvt_attn_page) that also pulls the next
 * page it will be given, next_bytes at next (NULL: none), into the caches
 * a KV head's share at a time while it folds this one. */
int  kvt_attn_page_ahead(struct kvt_attn_acc *a, const float *q, const uint32_t *qpos,
			 const void *k, const void *v, unsigned ntok, uint32_t pos0,
			 float *pm, float *pl, const void *next, size_t next_bytes);
/* mass (n_pages): each page's share of the softmax mass, averaged over
 * the (row, head) pairs of a that saw any token (the query heads, in
 * decode), from the pages' partials pm, pl (n_pages, rows, n_head) as
 * kvt_attn_page_partial wrote them and a's merged m and l. The masses of
 * all pages sum to 1 (up to rounding) when every page was folded in; a
 * page whose pm is -inf gets 0. All zeros when no pair saw anything. */
void kvt_attn_mass(struct kvt_attn_acc *a, const float *pm, const float *pl,
		   unsigned n_pages, float *mass);
/* Fold in the pages kvt_attn_page has gathered and not folded yet: a
 * page that every query row sees whole, in a call with more than four
 * query vectors per KV head, is gathered and folded with the next ones,
 * up to KVT_ATTN_PEND tokens at a time (the online softmax's steps, per
 * query, come once for them all). The functions below flush first; m, l
 * and o are whole only after a flush. */
void kvt_attn_flush(struct kvt_attn_acc *a);
/* dst += src, both of the same shape (src flushed first, then unchanged). */
void kvt_attn_merge(struct kvt_attn_acc *dst, struct kvt_attn_acc *src);
/* out (rows, n_head, head_dim); a row that saw nothing gets zeros. */
void kvt_attn_finish(struct kvt_attn_acc *a, float *out);

/*
 * Query-aware page selection (Quest, Tang et al. 2024): a page keeps the
 * element-wise min and max of its keys, per KV head, and a query bounds
 * its logit on any key of the page by sum_i max(q_i min_i, q_i max_i),
 * which is >= q . k for every key k of the page.
 *
 * score (n_pages) = scale * the largest bound over the query heads of one
 * row q (n_head, head_dim) (query head h reads KV head h / (n_head /
 * n_kv_heads)), for the pages whose bounds are (n_pages, n_kv_heads, 2,
 * head_dim) f32: min then max of each dim. The largest, not the sum: a
 * page stays when any one head may attend to it strongly. A page whose
 * bounds are still empty (min +inf, max -inf) scores -inf or NaN: callers
 * only score pages that hold tokens. shape_ok as kvt_attn_acc_init (else
 * nothing is written).
 */
void kvt_attn_key_bound(const struct kvt_attn_shape *sh, const float *q, const float *bounds,
			unsigned n_pages, float *score);

/* The reference: plain two-pass softmax attention over a contiguous KV
 * (n_ctx, n_kv_heads, head_dim) in kv_type, token t at position t, no
 * paging, no online softmax, scalar and in double. Used by the dense path
 * and the tests. Allocates n_ctx + head_dim doubles of scratch per call:
 * 0, -ENOMEM or -EINVAL (as kvt_attn_acc_init). */
int  kvt_attn_dense(const struct kvt_attn_shape *sh, float *out, const float *q,
		    const uint32_t *qpos, const void *k, const void *v, unsigned n_ctx);

#endif
