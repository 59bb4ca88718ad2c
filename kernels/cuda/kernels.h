/* SPDX-License-Identifier: MIT */
/*
 * The CUDA kernels of the plug-in (kernels.cu), as C-callable launchers.
 * Each queues its work on the stream given and returns the launch's
 * cudaError_t (cudaSuccess, or the error of the launch itself; errors
 * while the kernel runs show at the next synchronisation). Pointers are
 * device memory (or, for pages read in place, mapped pinned host memory
 * at the same address) unless said otherwise.
 *
 * Numerics follow the cpu kernels (kernels/cpu/kernels.h) so that the two
 * backends can be compared element by element: the same formulas, f32
 * arithmetic, the RoPE angle in double, round-to-nearest-even to f16.
 */
#ifndef KVT_KERNELS_CUDA_KERNELS_H
#define KVT_KERNELS_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out row i (n) = x row (idx ? idx[i] : i) * r * w, r = 1 / sqrt(mean of
 * the squares + eps), the sum of squares in double; out may be x when idx
 * is NULL. idx is device memory. */
int kvt_cu_rmsnorm(cudaStream_t st, float *out, const float *x, const uint32_t *idx,
		   unsigned rows, unsigned n, const float *w, float eps);

/* RoPE in place on x (rows, n_heads, head_dim): for pair i < rope_dim / 2
 * of each head of row r, angle = pos[r] * inv_freq[i] in double, c and s
 * its cosine and sine rounded to f32, (x0, x1) = (x[2i], x[2i+1]) ->
 * (x0 c - x1 s, x0 s + x1 c). Dims past rope_dim are left alone. */
int kvt_cu_rope(cudaStream_t st, float *x, unsigned rows, unsigned n_heads, unsigned head_dim,
		unsigned rope_dim, const uint32_t *pos, const double *inv_freq);

/* g (n) = g / (1 + expf(-g)) * u */
int kvt_cu_swiglu(cudaStream_t st, float *g, const float *u, size_t n);
/* x (rows, n) += y (n) in every row */
int kvt_cu_add(cudaStream_t st, float *x, const float *y, unsigned rows, size_t n);

/* Conversions (n values): f32 -> IEEE half or bfloat16, round to nearest
 * even; Q8_0 blocks (34 bytes: an f16 scale d, then 32 int8 q; 2-byte
 * aligned at best) -> f16 values d * q (in f32, then rounded). */
int kvt_cu_f32_to_f16(cudaStream_t st, uint16_t *dst, const float *src, size_t n);
int kvt_cu_f32_to_bf16(cudaStream_t st, uint16_t *dst, const float *src, size_t n);
int kvt_cu_q8_0_to_f16(cudaStream_t st, uint16_t *dst, const uint8_t *src, size_t n_blocks);

/*
 * Paged attention, flash-decoding style: pages are split into groups,
 * each group's partial of the online softmax (running max m, sum l of
 * e^(s - m), unnormalised output o) lands in its own slot ("part") of the
 * partials buffer, and a merge folds the parts by log-sum-exp. Pages come
 * in any order and in as many calls as the runtime likes; a call folds
 * its groups into the slots earlier calls of the same attention left.
 *
 * q is (rows, n_head, head_dim) f32, rotated, not yet scaled; qpos (rows)
 * the query positions; a page's token t is at pos0 + t and row r sees it
 * iff pos0 + t <= qpos[r]. K and V of a page are (ntok, n_kv_heads,
 * head_dim) in kv_type (0 f16, 1 f32); query head h reads KV head
 * h / (n_head / n_kv_heads). head_dim <= 256.
 */
struct kvt_cu_page {
	const void *k, *v;
	uint32_t ntok, pos0;
};

struct kvt_cu_attn {
	unsigned rows, n_head, n_kv_heads, head_dim;
	float scale;
	int kv_type;
	const float *q;			/* (rows, n_head, head_dim) */
	const uint32_t *qpos;		/* (rows) */
	float *pm, *pl;			/* (parts_cap, rows, n_head) */
	float *po;			/* (parts_cap, rows, n_head, head_dim) */
	unsigned parts_cap;
};

/* Fold pages[0 .. n_pages) (device memory) into parts 0 ..
 * ceil(n_pages / per_part) - 1, per_part consecutive pages each. A part
 * below fold_end holds the partial of an earlier call of this attention
 * on the same stream, and is folded into; one at or past it is written.
 * A part whose (row, head) saw nothing has m = -inf, l = 0, o = 0.
 * aligned: every page's k and v is 16-byte aligned, so that rows may be
 * read as vectors. cudaErrorInvalidValue when a part would pass
 * parts_cap or head_dim is over 256. */
int kvt_cu_attn_pages(cudaStream_t st, const struct kvt_cu_attn *a,
		      const struct kvt_cu_page *pages, unsigned n_pages, unsigned per_part,
		      unsigned fold_end, int aligned);

/* The tiles of query vectors of one KV head that a kvt_cu_attn_pages
 * launch spreads over its blocks (0 for a shape it refuses). */
unsigned kvt_cu_attn_tiles(const struct kvt_cu_attn *a);

/* Merge parts 0 .. n_parts - 1 into out (rows, n_head, head_dim) as
 * o / l (zeros where l is 0). */
int kvt_cu_attn_merge(cudaStream_t st, const struct kvt_cu_attn *a, unsigned n_parts, float *out);

/* Read every byte of src (bytes a multiple of 16, src 16-aligned) and
 * write something that depends on all of it to *sink: the in-place read
 * rate of pinned host memory is measured with it. */
int kvt_cu_read(cudaStream_t st, const void *src, size_t bytes, unsigned blocks, float *sink);

#ifdef __cplusplus
}
#endif
#endif
