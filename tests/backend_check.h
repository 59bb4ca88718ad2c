/* SPDX-License-Identifier: MIT */
/*
 * Checks any device backend against the cpu (in the manner of ggml's
 * test-backend-ops): every compute op on the same inputs as the cpu
 * kernels, compared by normalised mean squared error with a tolerance per
 * type written next to each case; the pager's device paths (copies both
 * ways, device-to-device appends, held batches, reading the host tier in
 * place) bit for bit; and the forward pass on the backend against the
 * dense cpu reference.
 *
 * t_emu runs it on the tests' emulated GPU (tests/emu_backend.c), which
 * is how it is checked on a machine without a GPU; t_cuda on a real one.
 */
#ifndef KVT_TESTS_BACKEND_CHECK_H
#define KVT_TESTS_BACKEND_CHECK_H

#include <math.h>

#include <pthread.h>

#include "tests/model_common.h"
#include "kernels/compute.h"
#include "kernels/cpu/qdots.h"
#include "kernels/cpu/quants.h"
#include "pager/internal.h"
#include "kernels/device.h"
#include "runtime/gguf.h"

static uint64_t bc_rng = 0x9e3779b97f4a7c15ull;

static float bc_rand(void)
{
	bc_rng ^= bc_rng << 13; bc_rng ^= bc_rng >> 7; bc_rng ^= bc_rng << 17;
	return (float)(bc_rng >> 40) / (float)(1 << 23) - 1.0f;	/* [-1, 1) */
}

static void bc_fill(float *x, size_t n, float scale)
{
	for (size_t i = 0; i < n; i++)
		x[i] = bc_rand() * scale;
}

/* sum (a - b)^2 / sum b^2 */
static double bc_nmse(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		double d = (double)a[i] - b[i];
		num += d * d;
		den += (double)b[i] * b[i];
	}
	return den > 0 ? num / den : num;
}

static void bc_expect(const char *backend, const char *what, const float *got, const float *want,
		      size_t n, double tol)
{
	double e = bc_nmse(got, want, n);

	printf("%-5s %-44s nmse %.2e (limit %.0e)\n", backend, what, e, tol);
	if (!(e <= tol)) {
		for (size_t i = 0; i < n; i++)
			if (fabsf(got[i] - want[i]) > 1e-3f * (fabsf(want[i]) + 1e-3f)) {
				fprintf(stderr, "first difference at %zu: %g vs %g\n", i, got[i], want[i]);
				break;
			}
		exit(1);
	}
}

/* A buffer of cx holding a copy of host. */
static void *bc_dup(struct kvt_compute *cx, const void *host, size_t bytes)
{
	void *p;

	CHECK_EQ(cx->ops->alloc(cx->ctx, bytes, &p), 0);
	CHECK_EQ(cx->ops->upload(cx->ctx, p, host, bytes), 0);
	return p;
}

static void bc_get(struct kvt_compute *cx, void *host, const void *buf, size_t bytes)
{
	CHECK_EQ(cx->ops->download(cx->ctx, host, buf, bytes), 0);
}

static void bc_free(struct kvt_compute *cx, void *p, size_t bytes)
{
	cx->ops->free(cx->ctx, p, bytes);
}

/* ---- weights in each type ---- */

static uint16_t bc_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	u += 0x7fff + ((u >> 16) & 1);		/* round to nearest even */
	return (uint16_t)(u >> 16);
}

/* n_out x n_in values in type, from f32 src. Returns the bytes. */
static size_t bc_weights(void *dst, const float *src, uint32_t type, unsigned n_out, unsigned n_in)
{
	size_t n = (size_t)n_out * n_in;

	switch (type) {
	case KVT_W_F32:
		memcpy(dst, src, n * 4);
		return n * 4;
	case KVT_W_F16:
		kvt_f32_to_f16(dst, src, n);
		return n * 2;
	case KVT_W_BF16:
		for (size_t i = 0; i < n; i++)
			((uint16_t *)dst)[i] = bc_bf16(src[i]);
		return n * 2;
	case KVT_W_Q8_0:
		for (size_t b = 0; b < n / 32; b++) {
			uint8_t *blk = (uint8_t *)dst + b * 34;
			float amax = 0, d;
			uint16_t dh;

			for (int i = 0; i < 32; i++)
				amax = fabsf(src[b * 32 + i]) > amax ? fabsf(src[b * 32 + i]) : amax;
			d = amax / 127.0f;
			kvt_f32_to_f16(&dh, &d, 1);
			kvt_f16_to_f32(&d, &dh, 1);
			memcpy(blk, &dh, 2);
			for (int i = 0; i < 32; i++) {
				float q = d > 0 ? roundf(src[b * 32 + i] / d) : 0;
				blk[2 + i] = (uint8_t)(int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
			}
		}
		return n / 32 * 34;
	}
	const struct kvt_qtype *q = kvt_qtype(type);
	CHECK(q && kvt_quantize(type, dst, src, n) == 0);
	return q ? n / q->blk * q->size : 0;
}

static void bc_matmul(struct kvt_compute *cx, struct kvt_compute *ref, const char *name)
{
	static const struct { uint32_t type; const char *tn; double tol; } types[] = {
		/* f32: cuBLAS SGEMM sums in another order than the cpu */
		{ KVT_W_F32, "f32", 1e-10 },
		/* f16, q8_0 (widened to f16) and bf16: a GPU rounds the
		 * activations to the weight's type first, as llama.cpp does */
		{ KVT_W_F16, "f16", 1e-5 },
		{ KVT_W_Q8_0, "q8_0", 1e-5 },
		{ KVT_W_BF16, "bf16", 1e-4 },
		/* the other block types, widened to f16 on a GPU: as q8_0 */
		{ KVT_W_Q4_0, "q4_0", 1e-5 },
		{ KVT_W_Q4_K, "q4_k", 1e-5 },
		{ KVT_W_Q6_K, "q6_k", 1e-5 },
	};
	static const unsigned rowss[] = { 1, 3, 37 };
	const unsigned n_in = 256, n_out[3] = { 96, 32, 160 };

	for (unsigned ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
		for (unsigned ri = 0; ri < sizeof(rowss) / sizeof(rowss[0]); ri++) {
			unsigned rows = rowss[ri], n = ri == 1 ? 3 : 1;
			struct kvt_mat wh[3], wd[3];
			const struct kvt_mat *wph[3], *wpd[3];
			float *x = malloc((size_t)rows * n_in * 4), *xd;
			float *yh[3], *yd[3], *got = malloc((size_t)rows * 160 * 4);
			void *wmem[3];
			char what[96];

			CHECK(x && got);
			bc_fill(x, (size_t)rows * n_in, 1.0f);
			xd = bc_dup(cx, x, (size_t)rows * n_in * 4);
			for (unsigned k = 0; k < n; k++) {
				float *wf = malloc((size_t)n_out[k] * n_in * 4);

				CHECK(wf && (wmem[k] = malloc((size_t)n_out[k] * n_in * 4)));
				bc_fill(wf, (size_t)n_out[k] * n_in, 0.1f);
				bc_weights(wmem[k], wf, types[ti].type, n_out[k], n_in);
				free(wf);
				wh[k] = (struct kvt_mat){ wmem[k], types[ti].type, n_in, n_out[k] };
				CHECK_EQ(cx->ops->mat_prepare(cx->ctx, &wh[k], &wd[k]), 0);
				wph[k] = &wh[k];
				wpd[k] = &wd[k];
				CHECK(yh[k] = malloc((size_t)rows * n_out[k] * 4));
				CHECK_EQ(cx->ops->alloc(cx->ctx, (size_t)rows * n_out[k] * 4,
							(void **)&yd[k]), 0);
			}
			CHECK_EQ(ref->ops->matmul_n(ref->ctx, n, yh, x, rows, wph), 0);
			CHECK_EQ(cx->ops->matmul_n(cx->ctx, n, yd, xd, rows, wpd), 0);
			for (unsigned k = 0; k < n; k++) {
				bc_get(cx, got, yd[k], (size_t)rows * n_out[k] * 4);
				snprintf(what, sizeof(what), "matmul %s %u rows, %u of %u", types[ti].tn,
					 rows, k + 1, n);
				bc_expect(name, what, got, yh[k], (size_t)rows * n_out[k], types[ti].tol);
				cx->ops->mat_release(cx->ctx, &wd[k]);
				bc_free(cx, yd[k], (size_t)rows * n_out[k] * 4);
				free(yh[k]);
				free(wmem[k]);
			}
			bc_free(cx, xd, (size_t)rows * n_in * 4);
			free(x);
			free(got);
		}
}

/* rmsnorm, RoPE, SwiGLU, add and the f16 conversion. */
static void bc_elementwise(struct kvt_compute *cx, struct kvt_compute *ref, const char *name)
{
	const unsigned rows = 5, n = 384, heads = 6, hd = 64;
	const size_t N = (size_t)rows * n;
	float *x = malloc(N * 4), *y = malloc(N * 4), *w = malloc(n * 4), *a = malloc(N * 4),
	      *got = malloc(N * 4);
	uint32_t idx[3] = { 4, 0, 2 }, pos[5] = { 0, 1, 4095, 70000, 131071 };
	double inv[32];
	uint16_t kh[64], kd[64];
	void *xd, *yd, *wd, *pd, *fd, *hd16;

	CHECK(x && y && w && a && got);
	bc_fill(x, N, 3.0f);
	bc_fill(y, N, 3.0f);
	bc_fill(w, n, 1.0f);
	xd = bc_dup(cx, x, N * 4);
	yd = bc_dup(cx, y, N * 4);
	wd = bc_dup(cx, w, n * 4);

	/* rmsnorm: sums of squares in double on both */
	CHECK_EQ(ref->ops->rmsnorm(ref->ctx, a, x, NULL, rows, n, w, 1e-5f), 0);
	CHECK_EQ(cx->ops->rmsnorm(cx->ctx, yd, xd, NULL, rows, n, wd, 1e-5f), 0);
	bc_get(cx, got, yd, N * 4);
	bc_expect(name, "rmsnorm, 5 rows", got, a, N, 1e-12);
	CHECK_EQ(ref->ops->rmsnorm(ref->ctx, a, x, idx, 3, n, w, 1e-6f), 0);
	CHECK_EQ(cx->ops->rmsnorm(cx->ctx, yd, xd, idx, 3, n, wd, 1e-6f), 0);
	bc_get(cx, got, yd, 3 * n * 4);
	bc_expect(name, "rmsnorm of rows 4, 0, 2", got, a, 3 * (size_t)n, 1e-12);

	/* RoPE: angles in double on both, two rope widths */
	for (unsigned rd = 64; rd >= 32; rd -= 32) {
		kvt_rope_inv_freq(inv, rd, 500000.0f, 1.0f, NULL);
		pd = bc_dup(cx, pos, sizeof(pos));
		fd = bc_dup(cx, inv, rd / 2 * sizeof(double));
		memcpy(a, x, (size_t)rows * heads * hd * 4);
		CHECK_EQ(cx->ops->upload(cx->ctx, yd, x, N * 4), 0);
		CHECK_EQ(ref->ops->rope(ref->ctx, a, rows, heads, hd, rd, pos, inv), 0);
		CHECK_EQ(cx->ops->rope(cx->ctx, yd, rows, heads, hd, rd, pd, fd), 0);
		bc_get(cx, got, yd, (size_t)rows * heads * hd * 4);
		bc_expect(name, rd == 64 ? "rope, positions to 131071" : "rope over half the dims",
			  got, a, (size_t)rows * heads * hd, 1e-12);
		bc_free(cx, pd, sizeof(pos));
		bc_free(cx, fd, rd / 2 * sizeof(double));
	}

	/* SwiGLU: expf may differ by an ulp or two */
	memcpy(a, x, N * 4);
	CHECK_EQ(cx->ops->upload(cx->ctx, yd, x, N * 4), 0);
	CHECK_EQ(cx->ops->upload(cx->ctx, xd, y, N * 4), 0);
	CHECK_EQ(ref->ops->swiglu(ref->ctx, a, y, N), 0);
	CHECK_EQ(cx->ops->swiglu(cx->ctx, yd, xd, N), 0);
	bc_get(cx, got, yd, N * 4);
	bc_expect(name, "swiglu", got, a, N, 1e-12);

	/* add: exact, as a residual (one row of N) and as a bias (y's
	 * first n added to each of the rows) */
	memcpy(a, x, N * 4);
	CHECK_EQ(cx->ops->upload(cx->ctx, yd, x, N * 4), 0);
	CHECK_EQ(ref->ops->add(ref->ctx, a, y, 1, N), 0);
	CHECK_EQ(cx->ops->add(cx->ctx, yd, xd, 1, N), 0);
	bc_get(cx, got, yd, N * 4);
	CHECK(memcmp(got, a, N * 4) == 0);
	printf("%-5s %-44s bit for bit\n", name, "add");
	memcpy(a, x, N * 4);
	for (unsigned r = 0; r < rows; r++)
		for (unsigned i = 0; i < n; i++)
			a[r * n + i] += y[i];
	CHECK_EQ(cx->ops->upload(cx->ctx, yd, x, N * 4), 0);
	CHECK_EQ(cx->ops->add(cx->ctx, yd, xd, rows, n), 0);
	bc_get(cx, got, yd, N * 4);
	CHECK(memcmp(got, a, N * 4) == 0);
	printf("%-5s %-44s bit for bit\n", name, "add, a bias to each of 5 rows");

	/* f32 -> f16: round to nearest even, bit for bit, with a subnormal,
	 * an overflow and a negative zero among them */
	bc_fill(x, 64, 8.0f);
	x[0] = 1e-6f;
	x[1] = 70000.0f;
	x[2] = -0.0f;
	x[3] = 0.000061035156f;
	CHECK_EQ(ref->ops->to_kv(ref->ctx, kh, x, 64, KVT_KV_F16), 0);
	hd16 = bc_dup(cx, x, 64 * 4);
	CHECK_EQ(cx->ops->alloc(cx->ctx, 128, &fd), 0);
	CHECK_EQ(cx->ops->to_kv(cx->ctx, fd, hd16, 64, KVT_KV_F16), 0);
	bc_get(cx, kd, fd, 128);
	CHECK(memcmp(kh, kd, 128) == 0);
	printf("%-5s %-44s bit for bit\n", name, "f32 -> f16");
	bc_free(cx, fd, 128);
	bc_free(cx, hd16, 64 * 4);

	bc_free(cx, xd, N * 4);
	bc_free(cx, yd, N * 4);
	bc_free(cx, wd, n * 4);
	free(x); free(y); free(w); free(a); free(got);
}

struct bc_attn_case {
	const char *what;
	unsigned rows, n_head, n_kv, hd, pt, pages, last_ntok, calls;
	int kv_type;
	unsigned off;		/* bytes every page starts past a 16-byte boundary,
				 * a multiple of the KV type's size */
};

/* Paged attention: pages in shuffled order over several calls, half of
 * them (where the device reads host memory in place) in host memory,
 * against the cpu kernels folding the same pages in index order. */
static void bc_attention(struct kvt_device *dev, struct kvt_compute *cx, struct kvt_compute *ref,
			 const char *name)
{
	static const struct bc_attn_case cases[] = {
		{ "decode, GQA 4, d64, f16", 1, 8, 2, 64, 16, 37, 5, 1, KVT_KV_F16, 0 },
		{ "prefill 4 rows, MHA, d128, f32", 4, 4, 4, 128, 16, 9, 16, 3, KVT_KV_F32, 0 },
		{ "decode, GQA 8, d128, f16, 200 pages", 1, 32, 4, 128, 16, 200, 11, 4, KVT_KV_F16, 0 },
		/* a GPU reads two tokens a warp side by side here */
		{ "decode, GQA 4, d128, f16, 70 pages", 1, 32, 8, 128, 16, 70, 13, 3, KVT_KV_F16, 0 },
		{ "decode, GQA 2, d128, f32", 1, 8, 4, 128, 16, 11, 5, 2, KVT_KV_F32, 0 },
		{ "prefill 3 rows, d80, f16", 3, 6, 3, 80, 16, 12, 3, 2, KVT_KV_F16, 0 },
		{ "decode, MQA, d256, f16", 1, 2, 1, 256, 16, 3, 16, 1, KVT_KV_F16, 0 },
		{ "prefill 128 rows, 150 calls of one page", 128, 8, 2, 64, 16, 150, 16, 150,
		  KVT_KV_F16, 0 },
		{ "decode, 64-token pages, d96, f32", 1, 12, 4, 96, 64, 20, 40, 2, KVT_KV_F32, 0 },
		{ "decode, GQA 4, d96, f16", 1, 16, 4, 96, 16, 30, 9, 2, KVT_KV_F16, 0 },
		/* unaligned rows: a GPU reads them element by element, not
		 * as vectors; and four query heads over three calls */
		{ "decode, GQA 4, d128, f16, pages 2 bytes off", 1, 32, 8, 128, 16, 40, 7, 3,
		  KVT_KV_F16, 2 },
	};
	const int in_place = dev->ops->host_addressable && dev->ops->register_host;

	for (unsigned ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		const struct bc_attn_case *c = &cases[ci];
		const unsigned kvb = c->kv_type == KVT_KV_F16 ? 2 : 4, D = c->hd;
		const size_t rowb = (size_t)c->n_kv * D * kvb, pageb = rowb * c->pt;
		const unsigned ntot = (c->pages - 1) * c->pt + c->last_ntok;
		const size_t qn = (size_t)c->rows * c->n_head * D;
		struct kvt_attn_shape sh = {
			.rows = c->rows, .n_head = c->n_head, .n_kv_heads = c->n_kv, .head_dim = D,
			.scale = 1.0f / sqrtf((float)D), .kv_type = c->kv_type,
		};
		size_t hostb = ((size_t)c->pages * 2 * pageb + c->off + 4095) / 4096 * 4096;
		uint8_t *kvh = NULL, *kvd;
		float *q = malloc(qn * 4), *want = malloc(qn * 4), *got = malloc(qn * 4), *f;
		uint32_t *qpos = malloc(c->rows * 4), *order = malloc(c->pages * 4);
		struct kvt_page_ref *rh = malloc(c->pages * sizeof(*rh)), *rd = malloc(c->pages * sizeof(*rd));
		void *qd, *qposd;
		char what[128];

		CHECK(q && want && got && qpos && order && rh && rd);
		CHECK(posix_memalign((void **)&kvh, 4096, hostb) == 0);
		CHECK(f = malloc((size_t)c->pt * c->n_kv * D * 4));
		/* K and V of every page, K then V, page after page */
		for (unsigned p = 0; p < c->pages; p++)
			for (int kv = 0; kv < 2; kv++) {
				bc_fill(f, (size_t)c->pt * c->n_kv * D, 1.0f);
				if (kvb == 2)
					kvt_f32_to_f16((uint16_t *)(kvh + c->off + (2 * p + kv) * pageb),
						       f, (size_t)c->pt * c->n_kv * D);
				else
					memcpy(kvh + c->off + (2 * p + kv) * pageb, f, pageb);
			}
		free(f);
		bc_fill(q, qn, 2.0f);
		for (unsigned r = 0; r < c->rows; r++)
			qpos[r] = ntot - c->rows + r;		/* causal: the last rows */
		kvd = bc_dup(cx, kvh, hostb);
		if (in_place)
			CHECK_EQ(dev->ops->register_host(dev->ctx, kvh, hostb), 0);
		for (unsigned p = 0; p < c->pages; p++) {
			unsigned nt = p + 1 == c->pages ? c->last_ntok : c->pt;
			const uint8_t *base = (in_place && p % 2 ? kvh : kvd) + c->off;

			rh[p] = (struct kvt_page_ref){ kvh + c->off + 2 * p * pageb,
						      kvh + c->off + (2 * p + 1) * pageb,
						      nt, p * c->pt, NULL, NULL };
			rd[p] = (struct kvt_page_ref){ base + 2 * p * pageb, base + (2 * p + 1) * pageb,
						      nt, p * c->pt, NULL, NULL };
			order[p] = p;
		}
		for (unsigned p = c->pages; p-- > 1;) {		/* shuffle */
			unsigned j = (unsigned)(bc_rng % (p + 1)), t = order[p];
			bc_rand();
			order[p] = order[j];
			order[j] = t;
		}
		struct kvt_page_ref *shuf = malloc(c->pages * sizeof(*shuf));
		CHECK(shuf);
		for (unsigned p = 0; p < c->pages; p++)
			shuf[p] = rd[order[p]];

		CHECK_EQ(ref->ops->attn_begin(ref->ctx, &sh, q, qpos, 1, c->pages), 0);
		CHECK_EQ(ref->ops->attn_pages(ref->ctx, 0, rh, c->pages), 0);
		CHECK_EQ(ref->ops->attn_end(ref->ctx, want), 0);

		qd = bc_dup(cx, q, qn * 4);
		qposd = bc_dup(cx, qpos, c->rows * 4);
		CHECK_EQ(cx->ops->alloc(cx->ctx, qn * 4, (void **)&f), 0);
		CHECK_EQ(cx->ops->attn_begin(cx->ctx, &sh, qd, qposd, 1, c->pages), 0);
		for (unsigned k = 0, at = 0; k < c->calls; k++) {
			unsigned upto = (unsigned)((uint64_t)(k + 1) * c->pages / c->calls);

			CHECK_EQ(cx->ops->attn_pages(cx->ctx, 0, shuf + at, upto - at), 0);
			at = upto;
		}
		CHECK_EQ(cx->ops->attn_end(cx->ctx, f), 0);
		bc_get(cx, got, f, qn * 4);
		CHECK_EQ(cx->ops->sync(cx->ctx), 0);
		snprintf(what, sizeof(what), "attention: %s%s", c->what, in_place ? ", half in place" : "");
		bc_expect(name, what, got, want, qn, 1e-9);

		if (in_place)
			dev->ops->unregister_host(dev->ctx, kvh);
		bc_free(cx, f, qn * 4);
		bc_free(cx, qd, qn * 4);
		bc_free(cx, qposd, c->rows * 4);
		bc_free(cx, kvd, hostb);
		free(kvh); free(q); free(want); free(got); free(qpos); free(order);
		free(rh); free(rd); free(shuf);
	}
}

/* The device's copies as the pager makes them, and as a device that
 * gathers them into batches must keep them: pages queued with no wait
 * between them, then copies that depend on queued ones (device to device
 * from pages just copied up, a page written twice), and one from pageable
 * memory among them. */
static void bc_copies(struct kvt_device *dev, const char *name)
{
	const size_t sz = 64 << 10, n = 96;
	uint8_t *h = aligned_alloc(4096, sz * n), *h2 = aligned_alloc(4096, sz * n);
	uint8_t *pageable = malloc(sz), *d1, *d2;
	uint64_t f = 0, last = 0;

	CHECK(h && h2 && pageable);
	for (size_t i = 0; i < sz * n; i++)
		h[i] = (uint8_t)(i * 2654435761u >> 13);
	memset(h2, 0, sz * n);
	if (dev->ops->register_host) {
		CHECK_EQ(dev->ops->register_host(dev->ctx, h, sz * n), 0);
		CHECK_EQ(dev->ops->register_host(dev->ctx, h2, sz * n), 0);
	}
	CHECK_EQ(dev->ops->alloc(dev->ctx, sz * n, (void **)&d1), 0);
	CHECK_EQ(dev->ops->alloc(dev->ctx, sz * n, (void **)&d2), 0);
	/* Fences of a direction never decrease (copies may share one). */
	for (size_t i = 0; i < n; i++) {
		CHECK_EQ(kvt_dev_copy_async(dev, d1 + i * sz, h + i * sz, sz, KVT_H2D, &f), 0);
		CHECK(f >= last);
		last = f;
	}
	/* Device to device goes in host to device's order. */
	for (size_t i = 0; i < n; i++) {
		CHECK_EQ(kvt_dev_copy_async(dev, d2 + i * sz, d1 + i * sz, sz, KVT_D2D, &f), 0);
		CHECK(f >= last);
		last = f;
	}
	/* Page 0 of d1 written twice: the second copy's bytes stay. */
	CHECK_EQ(kvt_dev_copy_async(dev, d1, h + sz, sz, KVT_H2D, &f), 0);
	CHECK_EQ(kvt_dev_copy_async(dev, d1, h + 2 * sz, sz, KVT_H2D, &f), 0);
	memset(pageable, 0x5a, sz);
	CHECK_EQ(kvt_dev_copy_async(dev, d1 + sz, pageable, sz, KVT_H2D, &f), 0);
	CHECK(f >= last);
	CHECK_EQ(kvt_dev_fence_wait(dev, f), 0);
	CHECK_EQ(kvt_dev_fence_done(dev, f), 1);
	CHECK_EQ(kvt_dev_fence_done(dev, 0), 1);
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(kvt_dev_copy_async(dev, h2 + i * sz, d2 + i * sz, sz, KVT_D2H, &f), 0);
	CHECK_EQ(kvt_dev_fence_wait(dev, f), 0);
	CHECK(memcmp(h2, h, sz * n) == 0);
	CHECK_EQ(kvt_dev_copy(dev, h2, d1, 2 * sz, KVT_D2H), 0);
	CHECK(memcmp(h2, h + 2 * sz, sz) == 0);
	for (size_t i = 0; i < sz; i++)
		CHECK_EQ(h2[sz + i], 0x5a);
	dev->ops->free(dev->ctx, d1, sz * n);
	dev->ops->free(dev->ctx, d2, sz * n);
	if (dev->ops->unregister_host) {
		dev->ops->unregister_host(dev->ctx, h);
		dev->ops->unregister_host(dev->ctx, h2);
	}
	free(h); free(h2); free(pageable);
	printf("%-5s %-44s bit for bit\n", name, "copies: queued, dependent, pageable");
}

/* Every op of dev's kernels against the cpu kernels, and its copies. */
static void bc_ops(struct kvt_device *dev, const char *name)
{
	struct kvt_compute cx, ref;
	char err[256];

	bc_copies(dev, name);
	CHECK_EQ(kvt_compute_open(dev, 1, &cx, err, sizeof(err)), 0);
	CHECK_EQ(kvt_compute_open(NULL, 1, &ref, err, sizeof(err)), 0);
	bc_matmul(&cx, &ref, name);
	bc_elementwise(&cx, &ref, name);
	bc_attention(dev, &cx, &ref, name);
	kvt_compute_close(&cx);
	kvt_compute_close(&ref);
}

/* ---- the pager on the device ---- */

static void bc_pager(const char *name)
{
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p;
	struct kvt_batch *b;
	struct kvt_stats st;
	kvt_seq_t a, c, d;
	unsigned n;
	int r;

	/* Copies up and down and through NVMe, bit for bit. */
	t_config(&cfg, 3, 24, 16, 400);
	p = t_open_dev(&cfg, name, &dev);
	CHECK_EQ(kvt_seq_open(p, &a), 0);
	t_append(p, a, &cfg, 1, 0, 30);			/* 8 pages a layer, the tail partial */
	CHECK_EQ(t_verify_seq(p, a, &cfg, 1, 0), 24);
	t_drain_pinned(p, KVT_TIER_FAST);
	t_drain_pinned(p, KVT_TIER_HOST);
	CHECK_EQ(t_verify_seq(p, a, &cfg, 1, 0), 24);	/* back up from NVMe */
	printf("%-5s %-44s bit for bit\n", name, "pager: through the tiers and back");

	/* A fork at a partial page copies it on the device. */
	CHECK_EQ(kvt_seq_fork(p, a, 21, &c), 0);
	CHECK_EQ(t_verify_seq(p, c, &cfg, 1, 0), 18);
	CHECK_EQ(kvt_seq_close(p, c), 0);


	/* An append from device memory. */
	unsigned per = cfg.n_kv_heads * cfg.head_dim, nt = 7;
	size_t bytes = (size_t)per * nt * 4;
	float *k = malloc(bytes), *vv = malloc(bytes);
	void *kd, *vd;
	CHECK(k && vv);
	CHECK_EQ(kvt_seq_open(p, &d), 0);
	CHECK_EQ(dev->ops->alloc(dev->ctx, bytes, &kd), 0);
	CHECK_EQ(dev->ops->alloc(dev->ctx, bytes, &vd), 0);
	for (unsigned l = 0; l < cfg.n_layers; l++) {
		t_fill_tokens(&cfg, 9, l, 0, nt, k, vv);
		CHECK_EQ(kvt_dev_copy(dev, kd, k, bytes, KVT_H2D), 0);
		CHECK_EQ(kvt_dev_copy(dev, vd, vv, bytes, KVT_H2D), 0);
		CHECK_EQ(kvt_seq_append_dev(p, d, l, kd, vd, nt), 0);
	}
	CHECK_EQ(t_verify_seq(p, d, &cfg, 9, 0), 6);
	dev->ops->free(dev->ctx, kd, bytes);
	dev->ops->free(dev->ctx, vd, bytes);
	free(k);
	free(vv);
	CHECK_EQ(kvt_pager_stats(p, &st), 0);
	CHECK(!strcmp(st.dev.name, name));
	CHECK(st.dev.copies[KVT_DEV_D2D] >= 2 * cfg.n_layers);
	CHECK(st.dev.copy_bytes[KVT_DEV_H2D] > 0 && st.dev.copy_bytes[KVT_DEV_D2H] > 0);
	CHECK_EQ(st.fast_alloc_bytes, 24 * kvt_pager_page_bytes(p));
	CHECK_EQ(kvt_seq_close(p, d), 0);
	CHECK_EQ(kvt_seq_close(p, a), 0);
	t_close(p, dev);

	/* A held batch: every page handed out stays pinned, its view valid,
	 * until done gives them back. 40 pages: past the 32 after which a
	 * plain batch gives consumed pages back on its own. */
	struct kvt_view views[48];
	unsigned pinned = 0;

	t_config(&cfg, 1, 64, 16, 200);
	p = t_open_dev(&cfg, name, &dev);
	CHECK_EQ(kvt_seq_open(p, &a), 0);
	t_append(p, a, &cfg, 5, 0, 158);	/* 40 pages, the tail (39) partial */
	CHECK_EQ(kvt_acquire(p, a, 0, NULL, 0, &b), 0);
	kvt_batch_hold(b);
	for (n = 0; (r = kvt_batch_next(b, &views[n])) == 1; n++)
		CHECK(n < 47);
	CHECK_EQ(r, 0);
	CHECK_EQ(n, 40);
	pthread_mutex_lock(&p->lock);
	for (unsigned i = 0; i < n; i++)	/* the tail is pinned anyway */
		pinned += views[i].page != 39 && p->pages[(uint32_t)views[i].id].pins > 0;
	pthread_mutex_unlock(&p->lock);
	CHECK_EQ(pinned, n - 1);
	for (unsigned i = 0; i < n; i++)
		CHECK(t_check_view(&cfg, 5, 0, &views[i]) == 0);
	kvt_batch_done(b);
	pthread_mutex_lock(&p->lock);
	for (unsigned i = 0; i < n; i++)
		if (views[i].page != 39)
			CHECK_EQ(p->pages[(uint32_t)views[i].id].pins, 0);
	pthread_mutex_unlock(&p->lock);
	kvt_batch_release(b);
	t_check_inv(p);
	CHECK_EQ(kvt_seq_close(p, a), 0);
	t_close(p, dev);
	printf("%-5s %-44s ok\n", name, "pager: fork, held batch, device append");

	/* The host tier read in place, where the device can. */
	t_config(&cfg, 2, 6, 40, 100);
	cfg.host_in_place = 1;
	p = t_open_dev(&cfg, name, &dev);
	if (dev->ops->host_addressable) {
		CHECK_EQ(kvt_seq_open(p, &a), 0);
		t_append(p, a, &cfg, 3, 0, 60);
		CHECK_EQ(t_verify_seq(p, a, &cfg, 3, 0), 30);
		CHECK_EQ(kvt_pager_stats(p, &st), 0);
		CHECK(st.host_in_place > 0);
		CHECK_EQ(kvt_seq_close(p, a), 0);
		printf("%-5s %-44s bit for bit, %llu pages in place\n", name,
		       "pager: the host tier read in place", (unsigned long long)st.host_in_place);
	}
	t_close(p, dev);
}

/* ---- the forward pass on the device ---- */

struct bc_geo {
	const char *name;
	struct kvt_synth syn;
	int kv_type;
	unsigned page_tokens, chunk, prompt, gen;
	double tol;		/* logits, relative to the dense cpu path */
};

static void bc_prompt(int32_t *t, unsigned n, uint32_t V, unsigned seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (unsigned i = 0; i < n; i++) {
		x ^= x << 13; x ^= x >> 7; x ^= x << 17;
		t[i] = (int32_t)(3 + x % (V - 3));
	}
}

/* Greedy tokens must agree wherever the reference's best two logits are
 * further apart than the backend's rounding could move them. */
static void bc_same_tokens(const char *what, const float *got, const float *want, const int32_t *tg,
			   const int32_t *tw, unsigned gen, uint32_t V, double tol)
{
	for (unsigned i = 0; i < gen; i++) {
		const float *w = want + (size_t)i * V;
		double e = t_rel_err(got + (size_t)i * V, w, V);
		float best = -INFINITY, second = -INFINITY, amax = 0;

		for (uint32_t j = 0; j < V; j++) {
			amax = fabsf(w[j]) > amax ? fabsf(w[j]) : amax;
			if (w[j] > best) {
				second = best;
				best = w[j];
			} else if (w[j] > second) {
				second = w[j];
			}
		}
		if (!(e <= tol) || (tg[i] != tw[i] && best - second > 4 * tol * amax)) {
			fprintf(stderr, "%s: step %u: relative error %.3g (limit %g), token %d vs %d\n",
				what, i, e, tol, tg[i], tw[i]);
			exit(1);
		}
	}
}

static void bc_decode(const char *name, double tol_f16w)
{
	const struct bc_geo geos[] = {
		{ "mha-f32w-f16kv", { .layers = 2, .dim = 64, .heads = 4, .kv_heads = 4, .ctx = 4096,
				      .vocab = 300, .seed = 11, .type = KVT_GGML_F32 },
		  KVT_KV_F16, 16, 64, 300, 8, 1e-4 },
		{ "gqa-f16w-f32kv", { .layers = 3, .dim = 128, .heads = 8, .kv_heads = 2,
				      .ctx = 4096, .vocab = 320, .seed = 12, .type = KVT_GGML_F16 },
		  KVT_KV_F32, 16, 7, 200, 8, tol_f16w },
		{ "mqa-q8w-f16kv", { .layers = 2, .dim = 64, .heads = 4, .kv_heads = 1, .ctx = 4096,
				     .vocab = 288, .seed = 13, .type = KVT_GGML_Q8_0, .tied = 1 },
		  KVT_KV_F16, 64, 64, 260, 8, tol_f16w },
		/* Qwen2 on the q4_k_m mix, deep enough that its norms and
		 * biases take seventy device buffers (the engine once had
		 * room for 24). */
		{ "qwen2-q4km-14l", { .layers = 14, .dim = 256, .heads = 4, .kv_heads = 2,
				      .ctx = 4096, .vocab = 300, .seed = 17, .type = KVT_GGML_Q4_K,
				      .mix = 1, .qwen2 = 1, .tokenizer = KVT_SYNTH_TOK_GPT2,
				      .pre = "qwen2" },
		  KVT_KV_F16, 16, 32, 96, 4, tol_f16w },
	};
	/* fast, host in per cent of the KV's pages; in place or copied up */
	const struct { const char *name; unsigned fast, host; int in_place; } tiers[] = {
		{ "all-fast", 100, 0, 0 },
		{ "fast10-host25-copied-up", 10, 25, 0 },
		{ "fast10-host25-in-place", 10, 25, 1 },
		{ "fast10-nvme", 10, 0, 0 },
	};

	for (unsigned gi = 0; gi < sizeof(geos) / sizeof(geos[0]); gi++) {
		const struct bc_geo *g = &geos[gi];
		struct kvt_model *m = make_model(&g->syn, g->name);
		const uint32_t V = m->hp.n_vocab;
		unsigned np = t_scale(g->prompt) < 16 ? 16 : t_scale(g->prompt), n_ctx = np + g->gen;
		int32_t *prompt = malloc(np * 4), tref[16], tgot[16];
		float *ref = malloc((size_t)g->gen * V * 4), *got = malloc((size_t)g->gen * V * 4);
		struct kvt_engine_params ep;
		struct kvt_session *s;
		struct rig r;

		CHECK(prompt && ref && got && g->gen <= 16);
		bc_prompt(prompt, np, V, gi + 5);
		kvt_engine_params_default(&ep);
		ep.n_ctx = n_ctx;
		ep.chunk = g->chunk;
		ep.kv_type = g->kv_type;
		ep.n_threads = 1;
		ep.dense = 1;
		memset(&r, 0, sizeof(r));
		rig_engine(&r, m, &ep);
		CHECK_EQ(kvt_session_new(r.e, &s), 0);
		t_greedy(r.e, s, prompt, np, g->gen, ref, tref, V);
		kvt_session_free(r.e, s);
		rig_close(&r);

		for (unsigned ti = 0; ti < sizeof(tiers) / sizeof(tiers[0]); ti++) {
			uint64_t pages = (uint64_t)m->hp.n_layer * ((n_ctx + g->page_tokens - 1) /
								    g->page_tokens);
			uint64_t fast = pages * tiers[ti].fast / 100, host = pages * tiers[ti].host / 100;
			struct kvt_config cfg;
			struct kvt_stats st;
			char what[128];

			fast = fast < 2ull * m->hp.n_layer ? 2ull * m->hp.n_layer : fast;
			host = host < 4 ? 4 : host;
			kvt_config_default(&cfg);
			kvt_engine_pager_geometry(m, g->kv_type, &cfg);
			cfg.page_tokens = g->page_tokens;
			cfg.tier[KVT_TIER_FAST].bytes = fast * kvt_config_page_bytes(&cfg);
			cfg.tier[KVT_TIER_HOST].bytes = host * kvt_config_page_bytes(&cfg);
			cfg.tier[KVT_TIER_NVME].bytes = (pages + 16) * kvt_config_page_bytes(&cfg);
			cfg.host_in_place = tiers[ti].in_place;
			cfg.host_hugepages = KVT_HUGE_OFF;
			snprintf(cfg.nvme_path, sizeof(cfg.nvme_path), "%s", t_dir());
			cfg.log = t_log;
			memset(&r, 0, sizeof(r));
			r.p = t_open_dev(&cfg, name, &r.dev);
			ep.dense = 0;
			rig_engine(&r, m, &ep);
			CHECK_EQ(kvt_session_new(r.e, &s), 0);
			t_greedy(r.e, s, prompt, np, g->gen, got, tgot, V);
			snprintf(what, sizeof(what), "%s %s/%s", name, g->name, tiers[ti].name);
			bc_same_tokens(what, got, ref, tgot, tref, g->gen, V, g->tol);
			CHECK_EQ(kvt_pager_stats(r.p, &st), 0);
			CHECK_EQ(st.lost_pages, 0);
			/* A fast tier smaller than the KV must really have paged. */
			if (st.tier[KVT_TIER_FAST].capacity < st.pages)
				CHECK(st.tier[KVT_TIER_FAST].misses > 0);
			CHECK(st.dev.kernel_ns > 0);
			printf("%-5s decode %-38s ok, worst relative error %.2e (limit %.0e)\n", name,
			       what + strlen(name) + 1, t_rel_err(got, ref, V), g->tol);
			kvt_session_free(r.e, s);
			rig_close(&r);
		}
		free(prompt); free(ref); free(got);
		kvt_model_free(m);
	}
}

/* Batched decode with a fork at a partial page, park and resume, and a
 * session saved on the device and restored on the cpu: the same logits
 * as the cpu doing the same. */
static void bc_sessions(const char *name)
{
	const struct kvt_synth syn = { .layers = 2, .dim = 64, .heads = 4, .kv_heads = 2,
				       .ctx = 4096, .vocab = 300, .seed = 21, .type = KVT_GGML_F32 };
	struct kvt_model *m = make_model(&syn, "sessions");
	const uint32_t V = m->hp.n_vocab;
	const char *devs[2] = { "cpu", name };
	float *lg[2][2];
	char path[512], err[512];
	int32_t prompt[100];
	struct rig r[2];

	bc_prompt(prompt, 100, V, 9);
	snprintf(path, sizeof(path), "%s/bc-session-%d", t_dir(), (int)getpid());
	for (int k = 0; k < 2; k++) {
		struct kvt_engine_params ep;
		struct kvt_config cfg;
		struct kvt_session *s, *c, *pair[2];
		int32_t tk[2] = { 7, 8 };

		kvt_engine_params_default(&ep);
		ep.n_ctx = 256;
		ep.chunk = 32;
		ep.n_threads = 1;
		kvt_config_default(&cfg);
		kvt_engine_pager_geometry(m, KVT_KV_F16, &cfg);
		cfg.page_tokens = 32;
		cfg.tier[KVT_TIER_FAST].bytes = 6 * kvt_config_page_bytes(&cfg);
		cfg.tier[KVT_TIER_HOST].bytes = 4 * kvt_config_page_bytes(&cfg);
		cfg.tier[KVT_TIER_NVME].bytes = 200 * kvt_config_page_bytes(&cfg);
		cfg.host_in_place = 0;
		cfg.host_hugepages = KVT_HUGE_OFF;
		snprintf(cfg.nvme_path, sizeof(cfg.nvme_path), "%s", t_dir());
		cfg.log = t_log;
		memset(&r[k], 0, sizeof(r[k]));
		r[k].p = t_open_dev(&cfg, devs[k], &r[k].dev);
		rig_engine(&r[k], m, &ep);
		CHECK_EQ(kvt_session_new(r[k].e, &s), 0);
		CHECK_EQ(kvt_eval(r[k].e, s, prompt, 100, NULL, NULL), 0);
		CHECK_EQ(kvt_session_fork(r[k].e, s, 90, &c), 0);	/* 90 % 32 != 0 */
		CHECK_EQ(kvt_session_park(r[k].e, s), 0);
		CHECK_EQ(kvt_session_resume(r[k].e, s), 0);
		pair[0] = s;
		pair[1] = c;
		CHECK_EQ(kvt_decode(r[k].e, pair, tk, 2), 2);
		for (int j = 0; j < 2; j++) {
			CHECK(lg[k][j] = malloc(V * 4));
			memcpy(lg[k][j], kvt_session_logits(pair[j]), V * 4);
		}
		if (k == 1)
			CHECK_EQ(kvt_session_save(r[k].e, s, path, err, sizeof(err)), 0);
		kvt_session_free(r[k].e, c);
		kvt_session_free(r[k].e, s);
	}
	for (int j = 0; j < 2; j++)
		if (!(t_rel_err(lg[1][j], lg[0][j], V) <= 1e-4)) {
			fprintf(stderr, "%s: batched decode, sequence %d: relative error %.3g\n", name,
				j, t_rel_err(lg[1][j], lg[0][j], V));
			exit(1);
		}
	/* Saved from the device, restored on the cpu: it goes on the same. */
	struct kvt_session *s;
	int32_t t3 = 3;
	CHECK_EQ(kvt_session_restore(r[0].e, path, &s, err, sizeof(err)), 0);
	CHECK_EQ(kvt_session_len(s), 101);
	CHECK(t_rel_err(kvt_session_logits(s), lg[1][0], V) == 0);
	CHECK_EQ(kvt_decode(r[0].e, &s, &t3, 1), 1);
	kvt_session_free(r[0].e, s);
	unlink(path);
	for (int k = 0; k < 2; k++) {
		for (int j = 0; j < 2; j++)
			free(lg[k][j]);
		rig_close(&r[k]);
	}
	kvt_model_free(m);
	printf("%-5s %-44s ok\n", name, "sessions: fork, park, batch, save/restore");
}

#endif
