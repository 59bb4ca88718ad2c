/* SPDX-License-Identifier: MIT */
/*
 * The cpu kernels (kernels/cpu/kernels.h) against naive references written
 * here, once per code path the cpu has (AVX-512, AVX2, portable C, chosen
 * with kvt_cpu_set_simd_max):
 *
 *   pool       every task of every run exactly once, on a valid thread,
 *              for 1..4 threads (more than the cpus too), runs back to
 *              back and after sleeps (the futex path);
 *   f16        all 65536 halves to f32 and back; f32 to f16 against a
 *              rounding done here by search over the half values, for
 *              every exponent, ties, overflow, subnormals, NaN;
 *   rmsnorm, rope (vs the formula, in double), swiglu;
 *   mat_row    bit-exact dequantisation for F32, F16, BF16, Q8_0;
 *   matmul     every weight type, rows through the dot-product path and
 *              the sgemm path, widths that are not multiples of the
 *              vector width, pools of 1..3 threads and none. Bound:
 *              |y - y_ref| <= n_in * 2^-23 * sum_i |x_i w_i|, twice the
 *              worst case of any float summation order;
 *   attention  pages of random split, folded in random order into 1..3
 *              accumulators then merged, against kvt_attn_dense and a
 *              dense reference written here; f16, f32, q8_0 and q4_0 KV,
 *              GQA and MHA, one row and many (causal, with rows that see
 *              nothing of a page, or of anything, and chunks whose rows
 *              all see the pages before them whole: those are gathered
 *              and folded up to KVT_ATTN_PEND tokens at a time). Bound:
 *              per (row, head), max |out - ref| <= 1e-5 * max |ref|.
 *
 * Then speed lines, printed and not checked: pool overhead, matvec GB/s of
 * weight bytes against a plain read of the same bytes, sgemm GFLOP/s,
 * decode attention, RoPE with and without its angles kept. KVT_TEST_SCALE
 * shrinks them (sanitizer builds).
 */
#define _GNU_SOURCE	/* sincos */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "common.h"
#include "kernels/compute.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/qdots.h"
#include "kernels/cpu/quants.h"
#include "runtime/gguf.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static unsigned rndn(unsigned n)
{
	return rnd32() % n;
}

/* Uniform in [-1, 1). */
static float rndf(void)
{
	return (float)((double)rnd32() / 2147483648.0 - 1.0);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float f32_of(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint32_t bits_of(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	CHECK(p);
	return p;
}

/* ---- references ---- */

/* A finite half's value from its definition. */
static double half_value(uint16_t h)
{
	int e = h >> 10 & 0x1f, m = h & 0x3ff;
	double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
	return h & 0x8000 ? -v : v;
}

/* Nearest half to x (ties to even mantissa), by bisection over the
 * positive finite halves, whose bit patterns are ordered like their
 * values. 65536 stands for the value one step above the largest half, so
 * rounding to it gives inf. */
static uint16_t ref_f2h(float x)
{
	uint32_t b = bits_of(x);
	uint16_t sign = b >> 16 & 0x8000, lo = 0, hi = 0x7bff, mid;
	double a = fabs((double)x), vlo, vhi;

	if (isnan(x))
		return sign | 0x7e00 | (b >> 13 & 0x3ff);
	if (a >= 65520.0)
		return sign | 0x7c00;
	while (lo < hi) {	/* largest h with value <= a */
		mid = (uint16_t)((lo + hi + 1) / 2);
		if (half_value(mid) <= a)
			lo = mid;
		else
			hi = (uint16_t)(mid - 1);
	}
	vlo = half_value(lo);
	vhi = lo == 0x7bff ? 65536.0 : half_value((uint16_t)(lo + 1));
	if (a - vlo < vhi - a || (a - vlo == vhi - a && !(lo & 1)))
		return sign | lo;
	return sign | (uint16_t)(lo + 1);
}

/* Weight value i of row o, from the type's definition. */
static double ref_w(const struct kvt_mat *w, unsigned o, unsigned i)
{
	const uint8_t *row;
	uint16_t h;

	switch (w->type) {
	case KVT_GGML_F32:
		return ((const float *)w->data)[(size_t)o * w->n_in + i];
	case KVT_GGML_F16:
		return half_value(((const uint16_t *)w->data)[(size_t)o * w->n_in + i]);
	case KVT_GGML_BF16:
		return f32_of((uint32_t)((const uint16_t *)w->data)[(size_t)o * w->n_in + i] << 16);
	case KVT_GGML_Q8_0:
		row = (const uint8_t *)w->data + (size_t)o * (w->n_in / 32 * 34);
		row += i / 32 * 34;
		memcpy(&h, row, 2);
		return (double)(float)((float)half_value(h) * (float)(int8_t)row[2 + i % 32]);
	}
	CHECK(0);
	return 0;
}

static size_t mat_bytes(uint32_t type, unsigned n_in, unsigned n_out)
{
	switch (type) {
	case KVT_GGML_F32:
		return (size_t)n_out * n_in * 4;
	case KVT_GGML_F16:
	case KVT_GGML_BF16:
		return (size_t)n_out * n_in * 2;
	default:
		return (size_t)n_out * (n_in / 32) * 34;
	}
}

/* Random weights of magnitude about 1; Q8_0 scales about 1/64. */
static void *rand_weights(uint32_t type, unsigned n_in, unsigned n_out)
{
	size_t bytes = mat_bytes(type, n_in, n_out), n = (size_t)n_in * n_out;
	uint8_t *p = xmalloc(bytes);

	switch (type) {
	case KVT_GGML_F32:
		for (size_t i = 0; i < n; i++)
			((float *)p)[i] = rndf();
		break;
	case KVT_GGML_F16:
		/* kvt_f32_to_f16: checked against ref_f2h by test_f16, and
		 * much faster for the speed lines' 16 M values. */
		for (size_t i = 0; i < n; i++) {
			float f = rndf();
			kvt_f32_to_f16((uint16_t *)p + i, &f, 1);
		}
		break;
	case KVT_GGML_BF16:
		for (size_t i = 0; i < n; i++)
			((uint16_t *)p)[i] = (uint16_t)(bits_of(rndf()) >> 16);
		break;
	default:
		for (size_t b = 0; b < bytes; b += 34) {
			uint16_t d = ref_f2h((0.5f + (float)rndn(1000) / 1000.0f) / 64.0f);
			memcpy(p + b, &d, 2);
			for (int k = 0; k < 32; k++)
				p[b + 2 + k] = (uint8_t)(rnd32() & 0xff);
		}
	}
	return p;
}

/* ---- pool ---- */

struct pool_chk {
	unsigned *count;	/* (n_tasks) atomic */
	unsigned n_threads;
	unsigned bad;		/* atomic: tasks on a thread id out of range */
	unsigned *per_thread;	/* (n_threads) plain: only thread t writes slot t */
};

static void count_task(void *arg, unsigned task, unsigned thread)
{
	struct pool_chk *c = arg;

	__atomic_fetch_add(&c->count[task], 1, __ATOMIC_RELAXED);
	if (thread >= c->n_threads)
		__atomic_fetch_add(&c->bad, 1, __ATOMIC_RELAXED);
	else
		c->per_thread[thread]++;
}

static void nop_task(void *arg, unsigned task, unsigned thread)
{
}

static void test_pool(void)
{
	unsigned *count = xmalloc(4096 * sizeof(unsigned)), per[8];

	for (unsigned nt = 1; nt <= 4; nt++) {
		struct kvt_pool *p;
		struct pool_chk c = { .count = count, .n_threads = nt, .per_thread = per };
		unsigned runs = t_scale(4000), total = 0, sum = 0;

		CHECK_EQ(kvt_pool_new(nt, &p), 0);
		CHECK_EQ(kvt_pool_threads(p), nt);
		memset(per, 0, sizeof(per));
		for (unsigned r = 0; r < runs; r++) {
			/* Mostly short runs (the decode loop's), now and then a
			 * long one, a few empty or single. */
			unsigned n = r % 97 == 0 ? 4096 : r % 13 == 0 ? rndn(3) : 1 + rndn(64);

			memset(count, 0, n * sizeof(unsigned));
			kvt_pool_run(p, count_task, &c, n);
			for (unsigned i = 0; i < n; i++)
				CHECK_EQ(count[i], 1);
			total += n;
			/* A pause longer than the spin now and then: workers
			 * go to sleep and must be woken. */
			if (r % 500 == 499)
				usleep(300);
		}
		CHECK_EQ(c.bad, 0);
		for (unsigned t = 0; t < nt; t++)
			sum += per[t];
		CHECK_EQ(sum, total);
		kvt_pool_free(p);
	}
	/* NULL pool: everything on the caller, as thread 0. */
	{
		struct pool_chk c = { .count = count, .n_threads = 1, .per_thread = per };
		memset(count, 0, 10 * sizeof(unsigned));
		kvt_pool_run(NULL, count_task, &c, 10);
		for (unsigned i = 0; i < 10; i++)
			CHECK_EQ(count[i], 1);
		CHECK_EQ(c.bad, 0);
		CHECK_EQ(kvt_pool_threads(NULL), 1);
	}
	/* A pool made and freed at once, workers never used. */
	{
		struct kvt_pool *p;
		CHECK_EQ(kvt_pool_new(0, &p), 0);
		CHECK(kvt_pool_threads(p) >= 1);
		kvt_pool_free(p);
		kvt_pool_free(NULL);
	}
	free(count);
	fprintf(stderr, "pool: ok\n");
}

/* Pool overhead per run: back to back (workers spinning), and after an
 * idle pause (workers asleep: the cost of waking them). */
static void bench_pool(void)
{
	for (unsigned nt = 1; nt <= 2; nt++) {
		struct kvt_pool *p;
		unsigned n = t_scale(200000), m = t_scale(400);
		double t0, best = 1e9, wake = 0;

		CHECK_EQ(kvt_pool_new(nt, &p), 0);
		for (int rep = 0; rep < 3; rep++) {
			t0 = now();
			for (unsigned i = 0; i < n; i++)
				kvt_pool_run(p, nop_task, NULL, nt);
			best = fmin(best, (now() - t0) / n);
		}
		for (unsigned i = 0; i < m; i++) {
			usleep(500);
			t0 = now();
			kvt_pool_run(p, nop_task, NULL, nt);
			wake += now() - t0;
		}
		fprintf(stderr, "speed: pool %u thread%s: %.3f us per empty run back to back, "
			"%.1f us after 0.5 ms idle\n", nt, nt > 1 ? "s" : "", best * 1e6, wake / m * 1e6);
		kvt_pool_free(p);
	}
}

/* ---- f16 ---- */

static void test_f16(void)
{
	uint16_t *h = xmalloc(65536 * 2), *back = xmalloc(65536 * 2);
	float *f = xmalloc(65536 * 4);
	enum { NF = 200003 };
	float *xs = xmalloc(NF * sizeof(float));
	uint16_t *hs = xmalloc(NF * 2);
	unsigned n = 0;

	for (unsigned i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	kvt_f16_to_f32(f, h, 65536);
	kvt_f32_to_f16(back, f, 65536);
	for (unsigned i = 0; i < 65536; i++) {
		unsigned e = i >> 10 & 0x1f, m = i & 0x3ff;
		if (e == 0x1f && m) {
			/* NaN: sign and payload kept, made quiet. */
			CHECK(isnan(f[i]));
			CHECK_EQ(bits_of(f[i]), (uint32_t)(i & 0x8000) << 16 | 0x7fc00000 | m << 13);
			CHECK_EQ(back[i], i | 0x200);
			continue;
		}
		if (e == 0x1f)
			CHECK(isinf(f[i]) && (f[i] < 0) == !!(i & 0x8000));
		else
			CHECK((double)f[i] == half_value((uint16_t)i) && !!signbit(f[i]) == !!(i & 0x8000));
		CHECK_EQ(back[i], i);
	}

	/* f32 -> f16: edge cases, then every exponent with random
	 * mantissas, and the exact midpoints between neighbouring halves. */
	const float edge[] = { 0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e10f,
			       INFINITY, -INFINITY, 0x1p-24f, 0x1p-25f, 0x1.000002p-25f,
			       0x1.8p-24f, 0x1p-26f, 0x1p-14f, 0x1.ff8p-15f, FLT_MIN, FLT_TRUE_MIN,
			       1.0f, 1.0f + 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-23f, 1.0f + 3 * 0x1p-11f,
			       2049.0f, 2051.0f, -65519.0f };
	for (unsigned i = 0; i < sizeof(edge) / sizeof(edge[0]); i++)
		xs[n++] = edge[i];
	xs[n++] = f32_of(0x7f800001);	/* signalling NaN */
	xs[n++] = f32_of(0xffc12345);
	while (n < NF / 2) {
		uint32_t e = rndn(256), m = rnd32() & 0x7fffff;
		xs[n++] = f32_of((rnd32() & 0x80000000u) | e << 23 | m);
	}
	while (n < NF) {
		uint16_t a = (uint16_t)rndn(0x7bff);
		xs[n++] = (float)((half_value(a) + half_value((uint16_t)(a + 1))) / 2) *
			  (rnd32() & 1 ? -1.0f : 1.0f);
	}
	kvt_f32_to_f16(hs, xs, NF);	/* NF is odd: the vector loop and a tail */
	for (unsigned i = 0; i < NF; i++)
		if (hs[i] != ref_f2h(xs[i])) {
			fprintf(stderr, "f32_to_f16(%a = 0x%08x) = 0x%04x, expected 0x%04x\n",
				xs[i], bits_of(xs[i]), hs[i], ref_f2h(xs[i]));
			exit(1);
		}
	free(h);
	free(back);
	free(f);
	free(xs);
	free(hs);
}

/* ---- rmsnorm, rope, swiglu ---- */

static void test_elementwise(void)
{
	const unsigned ns[] = { 1, 7, 8, 33, 4099 };

	for (unsigned c = 0; c < sizeof(ns) / sizeof(ns[0]); c++) {
		unsigned n = ns[c];
		float *x = xmalloc(n * 4), *w = xmalloc(n * 4), *out = xmalloc(n * 4);
		float *g = xmalloc(n * 4), *u = xmalloc(n * 4);
		double ss = 0, r;

		for (unsigned i = 0; i < n; i++) {
			x[i] = rndf() * 3;
			w[i] = rndf() + 1.5f;
			ss += (double)x[i] * x[i];
		}
		r = 1.0 / sqrt(ss / n + 1e-5);
		kvt_rmsnorm(out, x, w, n, 1e-5f);
		for (unsigned i = 0; i < n; i++) {
			double ref = x[i] * r * w[i];
			CHECK(fabs(out[i] - ref) <= 1e-6 * fabs(ref) + 1e-30);
		}
		kvt_rmsnorm(x, x, w, n, 1e-5f);	/* in place */
		CHECK(!memcmp(x, out, n * 4));

		for (unsigned i = 0; i < n; i++) {
			/* Mostly moderate, some far out where e^-g overflows. */
			g[i] = i % 17 == 3 ? rndf() * 200 : rndf() * 12;
			u[i] = rndf();
			x[i] = g[i];
		}
		kvt_swiglu(g, u, n);
		for (unsigned i = 0; i < n; i++) {
			double ref = x[i] / (1.0 + exp(-(double)x[i])) * u[i];
			CHECK(fabs(g[i] - ref) <= 1e-6 * fabs(ref) + 1e-30);
		}
		free(x);
		free(w);
		free(out);
		free(g);
		free(u);
	}

	/* RoPE against the formula, in double. */
	const struct { unsigned heads, hd, rd; uint32_t pos; float theta, fs; } rc[] = {
		{ 3, 64, 64, 0, 10000, 1 }, { 3, 64, 64, 1, 10000, 1 }, { 2, 128, 128, 17, 10000, 1 },
		{ 4, 64, 32, 1234, 10000, 1 }, { 1, 128, 128, 100000, 500000, 1 },
		{ 2, 80, 80, 4097, 1000000, 0.25f }, { 1, 6, 6, 3, 10000, 1 },
	};
	for (unsigned c = 0; c < sizeof(rc) / sizeof(rc[0]); c++) {
		unsigned n = rc[c].heads * rc[c].hd;
		float *x = xmalloc(n * 4), *x0 = xmalloc(n * 4);
		double *inv = xmalloc(rc[c].rd / 2 * sizeof(double));

		for (unsigned i = 0; i < n; i++)
			x[i] = x0[i] = rndf();
		kvt_rope_inv_freq(inv, rc[c].rd, rc[c].theta, rc[c].fs, NULL);
		kvt_rope(x, rc[c].heads, rc[c].hd, rc[c].rd, rc[c].pos, inv);
		for (unsigned h = 0; h < rc[c].heads; h++)
			for (unsigned i = 0; i < rc[c].hd / 2; i++) {
				const float *p0 = x0 + h * rc[c].hd + 2 * i;
				const float *p = x + h * rc[c].hd + 2 * i;
				double a = (double)rc[c].pos * rc[c].fs *
					   pow(rc[c].theta, -2.0 * i / rc[c].rd);
				double r0 = p0[0] * cos(a) - p0[1] * sin(a);
				double r1 = p0[0] * sin(a) + p0[1] * cos(a);
				double tol = 1e-6 * (fabs(p0[0]) + fabs(p0[1]));

				if (2 * i >= rc[c].rd) {
					CHECK(p[0] == p0[0] && p[1] == p0[1]);
					continue;
				}
				if (fabs(p[0] - r0) > tol || fabs(p[1] - r1) > tol) {
					fprintf(stderr, "rope case %u head %u pair %u: (%g, %g), expected "
						"(%g, %g)\n", c, h, i, p[0], p[1], r0, r1);
					exit(1);
				}
			}
		free(x);
		free(x0);
		free(inv);
	}
}

/* ---- weights ---- */

static const uint32_t types[] = { KVT_GGML_F32, KVT_GGML_F16, KVT_GGML_BF16, KVT_GGML_Q8_0 };
static const char *const type_name[] = { "f32", "f16", "bf16", "q8_0" };

static void test_mat_row(void)
{
	for (unsigned t = 0; t < 4; t++) {
		unsigned n_in = types[t] == KVT_GGML_Q8_0 ? 96 : 37, n_out = 9;
		struct kvt_mat w = { rand_weights(types[t], n_in, n_out), types[t], n_in, n_out };
		float *row = xmalloc(n_in * 4);

		for (unsigned o = 0; o < n_out; o++) {
			kvt_mat_row(row, &w, o);
			for (unsigned i = 0; i < n_in; i++)
				CHECK((double)row[i] == ref_w(&w, o, i));
		}
		free((void *)w.data);
		free(row);
	}
}

/* One product against the double reference; returns the largest error
 * seen as a fraction of sum |x w|. */
static double check_matmul(struct kvt_pool *pool, uint32_t type, unsigned rows, unsigned n_in,
			   unsigned n_out)
{
	struct kvt_mat w = { rand_weights(type, n_in, n_out), type, n_in, n_out };
	float *x = xmalloc((size_t)rows * n_in * 4), *y = xmalloc((size_t)rows * n_out * 4);
	double *wd = xmalloc((size_t)n_in * sizeof(double)), worst = 0;

	for (size_t i = 0; i < (size_t)rows * n_in; i++)
		x[i] = rndf();
	for (size_t i = 0; i < (size_t)rows * n_out; i++)
		y[i] = NAN;
	CHECK_EQ(kvt_matmul(pool, y, x, rows, &w), 0);
	for (unsigned o = 0; o < n_out; o++) {
		for (unsigned i = 0; i < n_in; i++)
			wd[i] = ref_w(&w, o, i);
		for (unsigned r = 0; r < rows; r++) {
			double s = 0, mag = 0, err;
			for (unsigned i = 0; i < n_in; i++) {
				s += x[(size_t)r * n_in + i] * wd[i];
				mag += fabs(x[(size_t)r * n_in + i] * wd[i]);
			}
			err = fabs(y[(size_t)r * n_out + o] - s);
			if (!(err <= n_in * 0x1p-23 * mag)) {
				fprintf(stderr, "matmul type %u rows %u n_in %u n_out %u threads %u: y[%u][%u] = "
					"%.9g, expected %.9g (sum |x w| %g)\n", type, rows, n_in, n_out,
					kvt_pool_threads(pool), r, o, y[(size_t)r * n_out + o], s, mag);
				exit(1);
			}
			if (mag > 0)
				worst = fmax(worst, err / mag);
		}
	}
	free((void *)w.data);
	free(x);
	free(y);
	free(wd);
	return worst;
}

/* kvt_matmul_n against kvt_matmul one by one: bit-identical, whether the
 * products are fused (few rows) or run one after another (many). Three
 * products of one x, of different widths and types. */
static void check_matmul_n(struct kvt_pool *pool, unsigned rows)
{
	const unsigned n_in = 96, n_out[3] = { 96, 32, 200 };
	const uint32_t type[3] = { KVT_GGML_F16, KVT_GGML_Q8_0, KVT_GGML_F32 };
	struct kvt_mat w[3];
	float *x = xmalloc((size_t)rows * n_in * 4), *y[3], *z[3];

	for (size_t i = 0; i < (size_t)rows * n_in; i++)
		x[i] = rndf();
	for (int k = 0; k < 3; k++) {
		w[k] = (struct kvt_mat){ rand_weights(type[k], n_in, n_out[k]), type[k], n_in, n_out[k] };
		y[k] = xmalloc((size_t)rows * n_out[k] * 4);
		z[k] = xmalloc((size_t)rows * n_out[k] * 4);
		for (size_t i = 0; i < (size_t)rows * n_out[k]; i++)
			y[k][i] = z[k][i] = NAN;
		CHECK_EQ(kvt_matmul(pool, z[k], x, rows, &w[k]), 0);
	}
	CHECK_EQ(kvt_matmul_n(pool, 3, y, x, rows,
			      (const struct kvt_mat *const[]){ &w[0], &w[1], &w[2] }), 0);
	for (int k = 0; k < 3; k++) {
		CHECK(!memcmp(y[k], z[k], (size_t)rows * n_out[k] * 4));
		free((void *)w[k].data);
		free(y[k]);
		free(z[k]);
	}
	free(x);
}

static void test_matmul(struct kvt_pool **pools, unsigned n_pools)
{
	/* Rows below 8 always take the dot products, 13 and up always
	 * sgemm; between, whichever the threshold says. */
	const unsigned rows[] = { 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 33 };
	const unsigned shapes[][2] = { { 1, 1 }, { 7, 3 }, { 33, 17 }, { 100, 130 }, { 257, 301 } };
	const unsigned qshapes[][2] = { { 32, 1 }, { 64, 3 }, { 96, 17 }, { 288, 301 }, { 160, 130 } };

	for (unsigned t = 0; t < 4; t++) {
		double worst = 0;
		for (unsigned r = 0; r < sizeof(rows) / sizeof(rows[0]); r++)
			for (unsigned s = 0; s < 5; s++) {
				const unsigned *sh = types[t] == KVT_GGML_Q8_0 ? qshapes[s] : shapes[s];
				struct kvt_pool *pool = pools[(r + s) % n_pools];
				worst = fmax(worst, check_matmul(pool, types[t], rows[r], sh[0], sh[1]));
			}
		fprintf(stderr, "matmul %s: ok, worst error %.2e of sum |x w|\n", type_name[t], worst);
	}
	/* Rows so wide that the sgemm blocks shrink to fit the scratch. */
	check_matmul(pools[2], KVT_GGML_BF16, 16, 40000, 130);
	for (unsigned r = 1; r < 20; r += 3)
		check_matmul_n(pools[(r / 3) % n_pools], r);
	fprintf(stderr, "matmul_n: ok, equal to one product at a time\n");
	/* Refused: a Q8_0 width that is not whole blocks, an unknown type. */
	{
		float x[40] = { 0 }, y[2];
		uint8_t wb[2 * 34] = { 0 };
		struct kvt_mat w = { wb, KVT_GGML_Q8_0, 40, 1 };
		CHECK_EQ(kvt_matmul(pools[0], y, x, 1, &w), -EINVAL);
		w.type = 2;
		CHECK_EQ(kvt_matmul(pools[0], y, x, 1, &w), -EINVAL);
	}
}

/* ---- attention ---- */

/* Value idx of a KV array: f16, f32, q8_0 blocks of 32 (an f16 scale
 * d, then 32 int8; the value is d q) or q4_0 blocks of 32 (d, then 16
 * bytes: value j in the low nibble of byte j, j + 16 in its high nibble;
 * the value is d (q - 8)). */
static double ref_kv(const void *p, int type, size_t idx)
{
	if (type == KVT_KV_Q8_0) {
		const uint8_t *b = (const uint8_t *)p + idx / 32 * 34;

		return half_value((uint16_t)(b[0] | b[1] << 8)) * (int8_t)b[2 + idx % 32];
	}
	if (type == KVT_KV_Q4_0) {
		const uint8_t *b = (const uint8_t *)p + idx / 32 * 18;
		unsigned j = idx % 32, q = j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4;

		return half_value((uint16_t)(b[0] | b[1] << 8)) * ((int)q - 8);
	}
	return type == KVT_KV_F16 ? half_value(((const uint16_t *)p)[idx]) : ((const float *)p)[idx];
}

/* Set: ref_attn rounds each query to q8_0 first, as the decode does on
 * q8_0 and q4_0 K with the integer dot products on: per block of 32, d =
 * max |x| / 127 rounded to f16, x 127 / max rounded to nearest even. */
static int ref_q8;
static double q8_moved;		/* the most an output moved for it */

static void round_q8(float *x, unsigned n)
{
	for (unsigned b = 0; b < n; b += 32) {
		float mx = 0, id, d;

		for (unsigned i = 0; i < 32; i++)
			mx = fmaxf(mx, fabsf(x[b + i]));
		id = mx != 0 ? 127.f / mx : 0.f;
		d = (float)half_value(ref_f2h(mx / 127.f));
		for (unsigned i = 0; i < 32; i++)
			x[b + i] = d * nearbyintf(x[b + i] * id);
	}
}

/* Plain softmax attention in double over the contiguous KV, written
 * independently of kvt_attn_dense. */
static void ref_attn(const struct kvt_attn_shape *sh, double *out, const float *q,
		     const uint32_t *qpos, const void *k, const void *v, unsigned n_ctx)
{
	float *qr = NULL;

	if (ref_q8) {
		size_t n = (size_t)sh->rows * sh->n_head * sh->head_dim;

		qr = xmalloc(n * sizeof(float));
		memcpy(qr, q, n * sizeof(float));
		round_q8(qr, (unsigned)n);
		q = qr;
	}
	unsigned G = sh->n_head / sh->n_kv_heads, hd = sh->head_dim;
	double *s = xmalloc((n_ctx + 1) * sizeof(double));

	for (unsigned r = 0; r < sh->rows; r++)
		for (unsigned h = 0; h < sh->n_head; h++) {
			double *o = out + ((size_t)r * sh->n_head + h) * hd, mx = -INFINITY, sum = 0;
			const float *qv = q + ((size_t)r * sh->n_head + h) * hd;
			unsigned n = 0;

			for (unsigned t = 0; t < n_ctx && t <= qpos[r]; t++, n++) {
				double d = 0;
				for (unsigned i = 0; i < hd; i++) {
					size_t idx = ((size_t)t * sh->n_kv_heads + h / G) * hd + i;
					double kv = ref_kv(k, sh->kv_type, idx);
					d += qv[i] * kv;
				}
				s[t] = d * sh->scale;
				mx = fmax(mx, s[t]);
			}
			for (unsigned i = 0; i < hd; i++)
				o[i] = 0;
			for (unsigned t = 0; t < n; t++) {
				double p = exp(s[t] - mx);
				sum += p;
				for (unsigned i = 0; i < hd; i++) {
					size_t idx = ((size_t)t * sh->n_kv_heads + h / G) * hd + i;
					double vv = ref_kv(v, sh->kv_type, idx);
					o[i] += p * vv;
				}
			}
			for (unsigned i = 0; i < hd; i++)
				o[i] = n ? o[i] / sum : 0;
		}
	free(s);
	free(qr);
}

/* Largest per-(row, head) error relative to the largest |ref| of that
 * (row, head); a (row, head) whose ref is all zero must be exactly 0. */
static double attn_err(const struct kvt_attn_shape *sh, const float *out, const double *ref)
{
	double worst = 0;

	for (size_t rh = 0; rh < (size_t)sh->rows * sh->n_head; rh++) {
		double mx = 0, err = 0;
		for (unsigned i = 0; i < sh->head_dim; i++) {
			mx = fmax(mx, fabs(ref[rh * sh->head_dim + i]));
			err = fmax(err, fabs(out[rh * sh->head_dim + i] - ref[rh * sh->head_dim + i]));
		}
		if (!(mx > 0 ? err / mx <= 1e-5 : err == 0))
			return INFINITY;
		if (mx > 0)
			worst = fmax(worst, err / mx);
	}
	return worst;
}

/* n random values of magnitude about 1 at p in KV type kv_type (q8_0,
 * q4_0: n whole blocks). */
static void fill_rnd(int kv_type, void *p, size_t n)
{
	float row[1024];

	for (size_t i = 0; i < n; i += 1024) {
		const unsigned m = n - i < 1024 ? (unsigned)(n - i) : 1024;

		for (unsigned j = 0; j < m; j++)
			row[j] = rndf();
		if (kvt_kv_block(kv_type))
			kvt_quantize((uint32_t)kvt_kv_block(kv_type),
				     (uint8_t *)p + kvt_kv_bytes(kv_type, i), row, m);
		else if (kv_type == KVT_KV_F16)
			for (unsigned j = 0; j < m; j++)
				((uint16_t *)p)[i + j] = ref_f2h(row[j]);
		else
			memcpy((float *)p + i, row, m * sizeof(float));
	}
}

/* n random values into each of k and v. */
static void fill_kv(int kv_type, void *k, void *v, size_t n)
{
	fill_rnd(kv_type, k, n);
	fill_rnd(kv_type, v, n);
}

/* Accumulators kept from case to case, and the rows each was made for. */
struct accs {
	struct kvt_attn_acc a[3];
	unsigned rows[3];
};

static double attn_case(int kv_type, unsigned n_head, unsigned n_kv, unsigned hd, unsigned rows,
			unsigned n_ctx, struct accs *accs, int variable_pages)
{
	struct kvt_attn_acc *acc = accs->a;
	struct kvt_attn_shape sh = { rows, n_head, n_kv, hd, 1.0f / sqrtf((float)hd), kv_type };
	size_t tok = kvt_kv_bytes(kv_type, (size_t)n_kv * hd);
	uint8_t *k = xmalloc(n_ctx * tok), *v = xmalloc(n_ctx * tok);
	float *q = xmalloc((size_t)rows * n_head * hd * 4);
	float *out = xmalloc((size_t)rows * n_head * hd * 4);
	float *dense = xmalloc((size_t)rows * n_head * hd * 4);
	double *ref = xmalloc((size_t)rows * n_head * hd * sizeof(double)), e1, e2;
	uint32_t *qpos = xmalloc(rows * 4);
	unsigned n_pages = 0, *p_start = xmalloc((n_ctx + 1) * sizeof(unsigned)), *order;
	unsigned n_acc = 1 + rndn(3), page = 1 + rndn(64);
	float qscale = rnd32() & 1 ? 1.0f : 4.0f;	/* flat or peaked softmax */

	fill_kv(kv_type, k, v, (size_t)n_ctx * n_kv * hd);
	for (size_t i = 0; i < (size_t)rows * n_head * hd; i++)
		q[i] = rndf() * qscale;
	/* Rows: the last `rows` positions (prefill of a chunk), except that
	 * with an odd number of rows, three or more, one sees only the first
	 * token and one sees beyond the end (everything). With an even
	 * number the pages before the chunk are seen whole by every row, so
	 * they are gathered and folded together (kvt_attn_flush). */
	for (unsigned r = 0; r < rows; r++)
		qpos[r] = n_ctx - rows + r;
	if (rows > 2 && rows % 2) {
		qpos[rndn(rows)] = 0;
		qpos[rndn(rows)] = n_ctx + 5;
	}

	/* Pages: fixed size with a short tail, or each of random size. */
	for (unsigned t = 0; t < n_ctx; t += variable_pages ? 1 + rndn(64) : page)
		p_start[n_pages++] = t;
	p_start[n_pages] = n_ctx;
	order = xmalloc(n_pages * sizeof(unsigned));
	for (unsigned i = 0; i < n_pages; i++)
		order[i] = i;
	for (unsigned i = n_pages; i > 1; i--) {
		unsigned j = rndn(i), x = order[i - 1];
		order[i - 1] = order[j];
		order[j] = x;
	}

	/* Reuse an accumulator of the same heads for as many rows or fewer
	 * (scratch kept), as the runtime does; else make a new one. */
	for (unsigned a = 0; a < n_acc; a++) {
		if (accs->rows[a] >= rows && acc[a].sh.n_head == n_head &&
		    acc[a].sh.n_kv_heads == n_kv && acc[a].sh.head_dim == hd &&
		    acc[a].sh.kv_type == kv_type) {
			acc[a].sh.rows = rows;
			acc[a].sh.scale = sh.scale;
			kvt_attn_acc_reset(&acc[a]);
		} else {
			kvt_attn_acc_free(&acc[a]);
			CHECK_EQ(kvt_attn_acc_init(&acc[a], &sh), 0);
			accs->rows[a] = rows;
		}
	}
	for (unsigned i = 0; i < n_pages; i++) {
		unsigned pg = order[i], t0 = p_start[pg], nt = p_start[pg + 1] - t0;
		/* Each page in its own exact-size buffers: ASan sees any
		 * read past the page. */
		void *pk = xmalloc(nt * tok), *pv = xmalloc(nt * tok);

		memcpy(pk, k + t0 * tok, nt * tok);
		memcpy(pv, v + t0 * tok, nt * tok);
		/* Half the time told of the next page, as the runtime does:
		 * its lines are asked for while this one is folded. */
		if (i + 1 < n_pages && rndn(2)) {
			unsigned nx = order[i + 1], nx0 = p_start[nx];

			CHECK_EQ(kvt_attn_page_ahead(&acc[rndn(n_acc)], q, qpos, pk, pv, nt, t0, NULL,
						     NULL, k + nx0 * tok,
						     (p_start[nx + 1] - nx0) * tok), 0);
		} else {
			CHECK_EQ(kvt_attn_page(&acc[rndn(n_acc)], q, qpos, pk, pv, nt, t0), 0);
		}
		free(pk);
		free(pv);
	}
	for (unsigned a = n_acc; a-- > 1;)
		kvt_attn_merge(&acc[0], &acc[a]);
	kvt_attn_finish(&acc[0], out);

	ref_attn(&sh, ref, q, qpos, k, v, n_ctx);
	CHECK_EQ(kvt_attn_dense(&sh, dense, q, qpos, k, v, n_ctx), 0);
	e1 = attn_err(&sh, out, ref);
	if (ref_q8) {	/* the dense path keeps f32 queries */
		ref_q8 = 0;
		ref_attn(&sh, ref, q, qpos, k, v, n_ctx);
		ref_q8 = 1;
		for (size_t i = 0; i < (size_t)rows * n_head * hd; i++)
			q8_moved = fmax(q8_moved, fabs(out[i] - ref[i]));
	}
	e2 = attn_err(&sh, dense, ref);
	if (!(e1 <= 1e-5 && e2 <= 1e-5)) {
		fprintf(stderr, "attention %s n_head %u n_kv %u hd %u rows %u n_ctx %u pages %u "
			"(%s) accumulators %u: error paged %g dense %g\n",
			kvt_kv_name(kv_type), n_head, n_kv, hd, rows, n_ctx, n_pages,
			variable_pages ? "random sizes" : "fixed", n_acc, e1, e2);
		exit(1);
	}
	free(k);
	free(v);
	free(q);
	free(out);
	free(dense);
	free(ref);
	free(qpos);
	free(p_start);
	free(order);
	return e1;
}

/* Decode on q8_0 and q4_0 K with the integer dot products on: the
 * queries rounded to q8_0 (AVX512-VNNI and VBMI), head sizes of one to
 * eight blocks, one, two and four queries a KV head; then up to 16
 * query heads at once (G one to eight), which must take that kernel. Against
 * the reference on the rounded queries; that the rounding happened, by
 * how far the outputs moved from the f32 queries' reference. */
static void test_attention_int8(struct accs *accs)
{
	static const unsigned qheads[][2] = { { 8, 2 }, { 4, 4 }, { 4, 2 } };
	static const unsigned hds[] = { 32, 64, 96, 128, 256 };
	unsigned a, b, c, d, cases = 0;
	double worst = 0;

	if (kvt_cpu_simd() < 2)		/* the AVX2 and portable kernels keep f32 */
		return;
#if defined(__x86_64__) || defined(__i386__)
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(c & bit_AVX512VNNI) ||
	    !(c & bit_AVX512VBMI))
#endif
	{
		t_skip_part("int8-kv", "no AVX512-VNNI and VBMI here: decode on q8_0 and q4_0 K "
			    "keeps f32 queries\n");
		return;
	}
	kvt_cpu_set_int8_dots(1);
	ref_q8 = 1;
	q8_moved = 0;
	for (unsigned i = 0; i < t_scale(60) || i < 30; i++, cases++) {
		const unsigned *h = qheads[i % 3], hd = hds[i / 3 % 5];
		int kv_type = i / 15 % 2 ? KVT_KV_Q4_0 : KVT_KV_Q8_0;

		worst = fmax(worst, attn_case(kv_type, h[0], h[1], hd, 1, 1 + rndn(300),
					      &accs[kv_type], i % 4 == 0));
	}
	/* up to 16 query heads at once (rowpagei_body): one to eight to a KV
	 * head, one chunk or two, both head sizes, both types */
	for (unsigned i = 0; i < 52; i++, cases++) {
		static const unsigned geo[][2] = { { 16, 16 }, { 16, 8 }, { 16, 4 }, { 16, 2 },
						   { 32, 32 }, { 32, 16 }, { 32, 8 }, { 32, 4 },
						   { 24, 8 }, { 30, 6 }, { 12, 2 }, { 14, 2 },
						   { 28, 4 } };
		const unsigned *h = geo[i % 13], hd = i / 13 % 2 ? 128 : 64;
		int kv_type = i / 26 ? KVT_KV_Q4_0 : KVT_KV_Q8_0;
		struct kvt_attn_shape sh = { 1, h[0], h[1], hd, 1, kv_type };

		CHECK_EQ(kvt_cpu_attn_rowpage(&sh), 2);

		worst = fmax(worst, attn_case(kv_type, h[0], h[1], hd, 1, 1 + rndn(300),
					      &accs[kv_type], i % 4 == 0));
	}
	ref_q8 = 0;
	kvt_cpu_set_int8_dots(0);
	fprintf(stderr, "attention, queries rounded to q8_0: %u cases ok, worst error %.2e of "
		"max |ref|; the rounding moved outputs by up to %.2e\n", cases, worst, q8_moved);
	CHECK(q8_moved > 1e-4);
}

/* The cpu backend's attn_pages given a run of pages in one call, each
 * page told of the next (K then V in one buffer, as the pager lays a
 * page out; the last page short, so its V does not follow its K): the
 * same output, to the bit, as kvt_attn_page a page at a time. */
static void test_attn_pages_call(void)
{
	static const int kv_types[] = { KVT_KV_F16, KVT_KV_F32, KVT_KV_Q8_0, KVT_KV_Q4_0 };
	static const unsigned geo[][3] = { { 16, 8, 64 }, { 32, 8, 128 }, { 4, 4, 64 } };
	struct kvt_compute cx;
	char why[256];

	CHECK_EQ(kvt_compute_open(NULL, 1, &cx, why, sizeof(why)), 0);
	for (unsigned c = 0; c < 12; c++) {
		const int kv_type = kv_types[c % 4];
		const unsigned n_head = geo[c / 4][0], n_kv = geo[c / 4][1], hd = geo[c / 4][2];
		const unsigned pt = kvt_kv_block(kv_type) ? 64 : 16, n_pages = 2 + rndn(8);
		const unsigned last = 1 + rndn(pt), n_ctx = (n_pages - 1) * pt + last;
		const size_t half = kvt_kv_bytes(kv_type, (size_t)pt * n_kv * hd), pb = 2 * half;
		struct kvt_attn_shape sh = { 1, n_head, n_kv, hd, 1.0f / sqrtf((float)hd), kv_type };
		uint8_t *buf = xmalloc(n_pages * pb);
		float *q = xmalloc((size_t)n_head * hd * 4), *o1 = xmalloc((size_t)n_head * hd * 4);
		float *o2 = xmalloc((size_t)n_head * hd * 4), row[1024];
		struct kvt_page_ref *refs = xmalloc(n_pages * sizeof(*refs));
		struct kvt_attn_acc a;
		uint32_t qpos = n_ctx - 1;

		for (size_t r = 0; r < (size_t)n_pages * pt * 2; r++) {	/* K and V rows */
			uint8_t *dst = buf + kvt_kv_bytes(kv_type, r * n_kv * hd);

			for (unsigned j = 0; j < n_kv * hd; j++)
				row[j] = rndf();
			if (kvt_kv_block(kv_type))
				kvt_quantize((uint32_t)kvt_kv_block(kv_type), dst, row, n_kv * hd);
			else if (kv_type == KVT_KV_F16)
				kvt_f32_to_f16((uint16_t *)dst, row, n_kv * hd);
			else
				memcpy(dst, row, n_kv * hd * sizeof(float));
		}
		for (size_t i = 0; i < (size_t)n_head * hd; i++)
			q[i] = 2 * rndf();
		for (unsigned i = 0; i < n_pages; i++)
			refs[i] = (struct kvt_page_ref){ .k = buf + i * pb, .v = buf + i * pb + half,
							 .ntok = i + 1 < n_pages ? pt : last,
							 .pos0 = i * pt };
		CHECK_EQ(cx.ops->attn_begin(cx.ctx, &sh, q, &qpos, 1, n_pages), 0);
		CHECK_EQ(cx.ops->attn_pages(cx.ctx, 0, refs, n_pages), 0);
		CHECK_EQ(cx.ops->attn_end(cx.ctx, o1), 0);
		CHECK_EQ(kvt_attn_acc_init(&a, &sh), 0);
		for (unsigned i = 0; i < n_pages; i++)
			CHECK_EQ(kvt_attn_page(&a, q, &qpos, refs[i].k, refs[i].v, refs[i].ntok,
					       refs[i].pos0), 0);
		kvt_attn_finish(&a, o2);
		CHECK(!memcmp(o1, o2, (size_t)n_head * hd * 4));
		kvt_attn_acc_free(&a);
		free(buf); free(q); free(o1); free(o2); free(refs);
	}
	kvt_compute_close(&cx);
	fprintf(stderr, "attention: the cpu backend's attn_pages over runs of pages equals kvt_attn_page, to the bit\n");
}

/* RoPE as it was written before its angles were split out: each angle's
 * sincos in double, then the rotation. kvt_rope and the backend must give
 * these floats. */
static void rope_ref(float *x, unsigned n_heads, unsigned head_dim, unsigned rope_dim,
		     uint32_t pos, const double *inv_freq)
{
	if (rope_dim > head_dim)
		rope_dim = head_dim;
	for (unsigned i = 0; i < rope_dim / 2; i++) {
		double sd, cd;

		sincos((double)pos * inv_freq[i], &sd, &cd);
		const float c = (float)cd, s = (float)sd;
		for (unsigned h = 0; h < n_heads; h++) {
			float *p = x + (size_t)h * head_dim + 2 * i, x0 = p[0], x1 = p[1];

			p[0] = x0 * c - x1 * s;
			p[1] = x0 * s + x1 * c;
		}
	}
}

/* The cpu backend's RoPE keeps the angles of the last call's positions:
 * calls that change the rows' positions, their count (up and down, and up
 * again to rows whose angles were made with other frequencies), the
 * frequencies or the dims rotate as the reference does, to the bit, and so
 * do calls that repeat them; so does kvt_rope, over heads of more pairs
 * than it takes at a time, and with rope_dim past head_dim. */
static void test_rope_call(void)
{
	static const uint32_t pa[8] = { 5, 6, 7, 8, 9, 10, 11, 12 };
	static const uint32_t pb[8] = { 5, 9, 7, 8, 100000, 10, 11, 4097 };
	static const struct { const uint32_t *pos; unsigned rows, f, hd, rd; } seq[] = {
		{ pa, 3, 0, 64, 48 }, { pa, 3, 0, 64, 48 }, { pb, 3, 0, 64, 48 }, { pb, 2, 0, 64, 48 },
		{ pb, 2, 1, 64, 48 }, { pa, 3, 1, 64, 48 }, { pb, 8, 1, 64, 48 }, { pb, 8, 1, 64, 64 },
		{ pa, 5, 1, 64, 64 }, { pa, 5, 1, 32, 64 }, { pb, 8, 0, 512, 512 },
		{ pb, 8, 0, 512, 512 }, { pa, 1, 0, 64, 64 },
		{ pa, 3, 0, 64, 48 }, { pa, 2, 1, 64, 48 }, { pa, 3, 1, 64, 48 },
	};
	const unsigned nh = 3;
	double inv[2][256];
	float *x = xmalloc(8 * nh * 512 * 4), *y = xmalloc(8 * nh * 512 * 4);
	float *z = xmalloc(8 * nh * 512 * 4);
	struct kvt_compute cx;
	char why[256];

	CHECK_EQ(kvt_compute_open(NULL, 1, &cx, why, sizeof(why)), 0);
	for (unsigned c = 0; c < sizeof(seq) / sizeof(seq[0]); c++) {
		const unsigned hd = seq[c].hd, rd = seq[c].rd, n = seq[c].rows * nh * hd;

		kvt_rope_inv_freq(inv[0], rd, 10000, 1, NULL);
		kvt_rope_inv_freq(inv[1], rd, 500000, 1, NULL);
		for (unsigned i = 0; i < n; i++)
			x[i] = y[i] = z[i] = rndf();
		CHECK_EQ(cx.ops->rope(cx.ctx, x, seq[c].rows, nh, hd, rd, seq[c].pos,
				      inv[seq[c].f]), 0);
		for (unsigned r = 0; r < seq[c].rows; r++) {
			rope_ref(y + r * nh * hd, nh, hd, rd, seq[c].pos[r], inv[seq[c].f]);
			kvt_rope(z + r * nh * hd, nh, hd, rd, seq[c].pos[r], inv[seq[c].f]);
		}
		CHECK(!memcmp(x, y, n * sizeof(float)));
		CHECK(!memcmp(z, y, n * sizeof(float)));
	}
	kvt_compute_close(&cx);
	free(x); free(y); free(z);
}

/* A decode row on the kernels that read a page in address order (up to
 * 16 queries at once, G = one to eight to a KV head, head sizes 64
 * and 128): the same floats, to the bit, as the kernels that take a KV
 * head at a time, reached by folding the same query as two rows; for q8_0
 * and q4_0 KV, as the row over f32 KV holding the same values (f32 and
 * the per-head kernels: above). Pages of 16 tokens, the last one short,
 * told of the next one or not; 6 to 40 query heads, in one chunk, two,
 * or chunks and a short one (8 over 2, 12 over 6, 6 over 1, 15 over 5),
 * which q8_0 and q4_0 leave to the per-head kernels. Against the
 * reference too, and the pages' partials (pm, pl) as well. */
static void test_attn_rowpage(void)
{
	static const unsigned geo[][2] = { { 16, 8 }, { 16, 16 }, { 12, 6 }, { 32, 16 }, { 32, 32 },
					   { 16, 4 }, { 16, 2 }, { 32, 8 }, { 32, 4 }, { 8, 2 }, { 8, 1 },
					   { 15, 5 }, { 24, 8 }, { 30, 6 }, { 40, 8 }, { 12, 2 },
					   { 6, 1 }, { 14, 2 }, { 28, 4 }, { 12, 4 } };
	const unsigned ng = sizeof(geo) / sizeof(geo[0]);
	unsigned cases = 0;

	for (unsigned c = 0; c < 16 * ng; c++) {
		const int kv_type = (int)(c % 4);	/* f16, f32, q8_0, q4_0 */
		const unsigned n_head = geo[c / 4 % ng][0], n_kv = geo[c / 4 % ng][1];
		const unsigned hd = c / (4 * ng) % 2 ? 128 : 64, pt = 16, n_pages = 1 + rndn(6);
		const unsigned n_ctx = (n_pages - 1) * pt + 1 + rndn(pt), nh = n_head * hd;
		const size_t n = (size_t)n_ctx * n_kv * hd, tok = kvt_kv_bytes(kv_type, (size_t)n_kv * hd);
		const int blk = kvt_kv_block(kv_type) != 0;
		const unsigned G = n_head / n_kv;
		const unsigned C = G * (G == 3 ? 4 : G == 5 ? 2 : 16 / G);	/* a chunk's heads */
		const int exact = !blk || n_head % C == 0;	/* else per-head q8_0 kernels */
		struct kvt_attn_shape s1 = { 1, n_head, n_kv, hd, 1.0f / sqrtf((float)hd), kv_type };
		struct kvt_attn_shape s2 = s1;
		struct kvt_attn_acc a1, a2;
		uint8_t *k = xmalloc(n_ctx * tok), *v = xmalloc(n_ctx * tok), *k2 = k, *v2 = v;
		float *q = xmalloc(2 * (size_t)nh * 4), *o1 = xmalloc((size_t)nh * 4);
		float *o2 = xmalloc(2 * (size_t)nh * 4), *pm = xmalloc(4 * (size_t)n_head * 4);
		float *pl = pm + n_head, *pm2 = pl + n_head, *pl2 = xmalloc(2 * (size_t)n_head * 4);
		double *ref = xmalloc((size_t)nh * sizeof(double));
		uint32_t qpos[2] = { n_ctx - 1, n_ctx - 1 };
		float qs = c / (8 * ng) ? 4.0f : 1.0f;
		size_t tok2 = tok;

		CHECK_EQ(kvt_cpu_attn_rowpage(&s1), kvt_cpu_simd() == 2 && exact);
		fill_kv(kv_type, k, v, n);
		for (unsigned i = 0; i < nh; i++)
			q[i] = q[nh + i] = rndf() * qs;
		if (blk) {
			k2 = xmalloc(n * 4);
			v2 = xmalloc(n * 4);
			for (size_t i = 0; i < n; i++) {
				((float *)k2)[i] = (float)ref_kv(k, kv_type, i);
				((float *)v2)[i] = (float)ref_kv(v, kv_type, i);
			}
			s2.kv_type = KVT_KV_F32;
			tok2 = (size_t)n_kv * hd * 4;
		} else {
			s2.rows = 2;
		}
		CHECK_EQ(kvt_attn_acc_init(&a1, &s1), 0);
		CHECK_EQ(kvt_attn_acc_init(&a2, &s2), 0);
		for (unsigned p = 0; p < n_pages; p++) {
			const unsigned t0 = p * pt, nt = n_ctx - t0 < pt ? n_ctx - t0 : pt;
			const void *next = p + 1 < n_pages && rndn(2) ? k + (t0 + pt) * tok : NULL;
			const size_t nb = next ? (n_ctx - t0 - pt < pt ? n_ctx - t0 - pt : pt) * tok : 0;

			CHECK_EQ(kvt_attn_page_ahead(&a1, q, qpos, k + t0 * tok, v + t0 * tok, nt, t0,
						     pm, pl, next, nb), 0);
			CHECK_EQ(kvt_attn_page_ahead(&a2, q, qpos, k2 + t0 * tok2, v2 + t0 * tok2, nt,
						     t0, pm2, pl2, NULL, 0), 0);
			for (unsigned r = 0; exact && r < s2.rows; r++)
				CHECK(!memcmp(pm, pm2 + r * n_head, n_head * 4) &&
				      !memcmp(pl, pl2 + r * n_head, n_head * 4));
		}
		kvt_attn_finish(&a1, o1);
		kvt_attn_finish(&a2, o2);
		for (unsigned r = 0; exact && r < s2.rows; r++)
			CHECK(!memcmp(o1, o2 + r * nh, (size_t)nh * 4));
		cases += exact;
		ref_attn(&s1, ref, q, qpos, k, v, n_ctx);
		CHECK(attn_err(&s1, o1, ref) <= 1e-5);
		kvt_attn_acc_free(&a1);
		kvt_attn_acc_free(&a2);
		if (blk) {
			free(k2);
			free(v2);
		}
		free(k); free(v); free(q); free(o1); free(o2); free(pm); free(pl2); free(ref);
	}
	fprintf(stderr, "attention: a decode row read in address order equals the per-head kernels "
		"(f16, f32) or f32 KV of the same values (q8_0, q4_0), to the bit: %u cases\n", cases);
}

static void test_attention(void)
{
	struct accs accs[4];	/* one set per KV type: reused */
	/* four, one, six and seven query heads to a KV head: in decode, six
	 * and seven are read in place two groups a KV head, the second
	 * with fillers */
	const unsigned heads[][2] = { { 8, 2 }, { 4, 4 }, { 6, 1 }, { 14, 2 } };
	/* 64 and 128 as in the models; 80 leaves 16 past the AVX-512
	 * kernels' 32-wide steps, 20 is no multiple of 16 (AVX2 kernels,
	 * with tails). */
	const unsigned hds[] = { 64, 128, 80, 20 };
	/* Every combination of KV type, one row or many, heads and head
	 * size once in 64 cases, twice in 128. Scaled down (the sanitizer
	 * builds), still all 64, so the head sizes with tails are there at
	 * every scale; the contexts shrink instead. */
	unsigned cases = t_scale(128) < 64 ? 64 : t_scale(128), long_ctx = t_scale(300);
	double worst = 0;

	memset(accs, 0, sizeof(accs));
	for (unsigned c = 0; c < cases; c++) {
		int kv_type = c & 1 ? KVT_KV_F32 : KVT_KV_F16;
		unsigned rows = c >> 1 & 1 ? 1 : 2 + rndn(14);
		const unsigned *h = heads[(c >> 2) % 4];
		unsigned hd = hds[(c >> 2) / 4 % 4];
		unsigned n_ctx = 1 + rndn(c % 5 == 0 ? 40 : long_ctx < 40 ? 40 : long_ctx);

		worst = fmax(worst, attn_case(kv_type, h[0], h[1], hd, rows, n_ctx, &accs[kv_type],
					      c % 3 == 0));
	}
	/* q8_0 and q4_0 KV: head sizes of whole blocks; one query, two,
	 * four, six or eight per KV head (decode: read in place with
	 * AVX-512) and more (dequantized a head at a time). */
	for (unsigned c = 0; c < t_scale(80); c++) {
		static const unsigned qheads[][2] = { { 8, 2 }, { 4, 4 }, { 4, 2 }, { 6, 1 }, { 16, 2 } };
		unsigned rows = c & 1 ? 1 : 2 + rndn(14), hd = c & 2 ? 128 : 64;
		const unsigned *h = qheads[(c >> 3) % 5];
		int kv_type = c & 4 ? KVT_KV_Q4_0 : KVT_KV_Q8_0;

		worst = fmax(worst, attn_case(kv_type, h[0], h[1], hd, rows, 1 + rndn(300),
					      &accs[kv_type], c % 3 == 0));
		cases++;
	}
	fprintf(stderr, "attention: %u cases ok (f16, f32, q8_0, q4_0 KV), worst error %.2e of max |ref|\n",
		cases, worst);
	test_attention_int8(accs);
	test_attn_pages_call();
	test_rope_call();
	test_attn_rowpage();

	/* A row that sees nothing at all: the page lies after it. m stays
	 * -inf, l 0, the output zeros, and merging it changes nothing. */
	{
		struct kvt_attn_shape sh = { 1, 2, 1, 8, 0.5f, KVT_KV_F32 };
		struct kvt_attn_acc a, b;
		float q[16], kv[4 * 8], out[16];
		uint32_t qpos = 5;

		for (unsigned i = 0; i < 16; i++)
			q[i] = out[i] = 1;
		for (unsigned i = 0; i < 32; i++)
			kv[i] = rndf();
		CHECK_EQ(kvt_attn_acc_init(&a, &sh), 0);
		CHECK_EQ(kvt_attn_acc_init(&b, &sh), 0);
		CHECK_EQ(kvt_attn_page(&a, q, &qpos, kv, kv, 4, 6), 0);
		CHECK(a.m[0] == -INFINITY && a.l[0] == 0 && a.m[1] == -INFINITY && a.l[1] == 0);
		kvt_attn_merge(&b, &a);
		kvt_attn_finish(&b, out);
		for (unsigned i = 0; i < 16; i++)
			CHECK(out[i] == 0);
		/* The page at 5 is seen by its first token only: softmax of
		 * one score is 1, so the output is exactly that V row. */
		CHECK_EQ(kvt_attn_page(&a, q, &qpos, kv, kv, 4, 5), 0);
		kvt_attn_merge(&b, &a);
		kvt_attn_finish(&b, out);
		for (unsigned i = 0; i < 16; i++)
			CHECK(fabsf(out[i] - kv[i % 8]) <= 1e-6f * fabsf(kv[i % 8]));
		kvt_attn_acc_free(&a);
		kvt_attn_acc_free(&b);
		sh.n_kv_heads = 3;	/* 2 heads do not share 3 KV heads */
		CHECK_EQ(kvt_attn_acc_init(&a, &sh), -EINVAL);
	}
	for (unsigned t = 0; t < sizeof(accs) / sizeof(accs[0]); t++)
		for (unsigned a = 0; a < 3; a++)
			kvt_attn_acc_free(&accs[t].a[a]);
}

/* ---- speed ---- */

struct rd_job {
	const uint8_t *p;
	size_t bytes;
	unsigned parts;
	double sum[64];
};

/* Sum of the bytes' 64-bit words: a plain read, no stores, as a ceiling
 * for what a matvec could read. */
static void read_task(void *arg, unsigned task, unsigned thread)
{
	struct rd_job *j = arg;
	typedef uint64_t v4 __attribute__((vector_size(32)));
	size_t per = j->bytes / j->parts / 128 * 128;
	const uint8_t *p = j->p + per * task;
	v4 a = { 0 }, b = a, c = a, d = a, t;

	for (size_t i = 0; i < per; i += 128) {
		memcpy(&t, p + i, 32);
		a += t;
		memcpy(&t, p + i + 32, 32);
		b += t;
		memcpy(&t, p + i + 64, 32);
		c += t;
		memcpy(&t, p + i + 96, 32);
		d += t;
	}
	a += b + c + d;
	j->sum[task] = (double)(a[0] + a[1] + a[2] + a[3]);
}

static double best_of(int reps, struct kvt_pool *p, float *y, const float *x, unsigned rows,
		      const struct kvt_mat *w)
{
	double best = 1e9;

	CHECK_EQ(kvt_matmul(p, y, x, rows, w), 0);
	for (int i = 0; i < reps; i++) {
		double t0 = now();
		CHECK_EQ(kvt_matmul(p, y, x, rows, w), 0);
		best = fmin(best, now() - t0);
	}
	return best;
}

/* RoPE on a decode layer's Q and K (16 and 8 heads of 64, one row, a new
 * position every 8 layers): kvt_rope, which takes each angle's sincos,
 * against the cpu backend's rope, which keeps the angles of the last
 * positions; microseconds a layer, best of three runs of each. */
static void bench_rope(void)
{
	const int n = t_scale(20000);
	static float q[16 * 64], k[8 * 64];
	double inv[32], best[2] = { 1e9, 1e9 };
	struct kvt_compute cx;
	char why[256];

	CHECK_EQ(kvt_compute_open(NULL, 1, &cx, why, sizeof(why)), 0);
	kvt_rope_inv_freq(inv, 64, 10000, 1, NULL);
	for (unsigned i = 0; i < 16 * 64; i++)
		q[i] = k[i / 2] = rndf();
	for (int rep = 0; rep < 3; rep++) {
		double t0 = now(), t1, t2;

		for (int l = 0; l < n; l++) {
			uint32_t pos = 4096 + l / 8;

			kvt_rope(q, 16, 64, 64, pos, inv);
			kvt_rope(k, 8, 64, 64, pos, inv);
		}
		t1 = now();
		for (int l = 0; l < n; l++) {
			uint32_t pos = 4096 + l / 8;

			CHECK_EQ(cx.ops->rope(cx.ctx, q, 1, 16, 64, 64, &pos, inv), 0);
			CHECK_EQ(cx.ops->rope(cx.ctx, k, 1, 8, 64, 64, &pos, inv), 0);
		}
		t2 = now();
		best[0] = fmin(best[0], (t1 - t0) / n * 1e6);
		best[1] = fmin(best[1], (t2 - t1) / n * 1e6);
	}
	fprintf(stderr, "speed: rope, a layer's Q and K (16 and 8 heads of 64): kvt_rope %.2f us, "
		"the backend's (angles kept) %.2f us: %.2f\n", best[0], best[1], best[1] / best[0]);
	kvt_compute_close(&cx);
}

/* Decode attention, one thread, one row, f16, f32, q8_0 and q4_0 KV: 32 heads over 8
 * KV heads of 128 with 64-token pages (GQA, four queries a KV head),
 * 8 heads of 64 with 16-token pages (MHA, one query a KV head), and 16
 * heads over 8 of 64 with 16-token pages (two queries a KV head, the
 * q4_k_m file's shape in docs/benchmarks.md); for that one, f16 KV with the
 * queries 16 bytes past a cache line as well. */
static void bench_attn(void)
{
	static const unsigned shapes[3][4] = { { 32, 8, 128, 64 }, { 8, 8, 64, 16 },
					       { 16, 8, 64, 16 } };
	const unsigned ctx = t_scale(4096);
	float q[32 * 128 + 16] __attribute__((aligned(64))), out[32 * 128];
	uint32_t qpos = ctx - 1;

	for (unsigned i = 0; i < 32 * 128 + 16; i++)
		q[i] = rndf();
	for (unsigned si = 0; si < 3; si++) {
		const unsigned n_head = shapes[si][0], n_kv = shapes[si][1], hd = shapes[si][2];
		const unsigned page = shapes[si][3];

		fprintf(stderr, "speed: attention decode, 1 thread, %u tokens, %u heads over %u of "
			"%u, %u-token pages:", ctx, n_head, n_kv, hd, page);
		for (int kv_type = KVT_KV_F16; kv_type <= KVT_KV_Q4_0; kv_type++) {
			struct kvt_attn_shape sh = { 1, n_head, n_kv, hd, 1.0f / sqrtf((float)hd),
						     kv_type };
			size_t tok = kvt_kv_bytes(kv_type, (size_t)n_kv * hd);
			uint8_t *k = xmalloc(ctx * tok), *v = xmalloc(ctx * tok);
			struct kvt_attn_acc a;
			double best = 1e9;

			for (size_t i = 0; i < (size_t)ctx * n_kv * hd; i++) {
				float fk = rndf(), fv = rndf();

				if (kvt_kv_block(kv_type)) {
					if (i % 32 == 0) {	/* a block of random values */
						float bk[32], bv[32];
						uint32_t bt = (uint32_t)kvt_kv_block(kv_type);

						bk[0] = fk;
						bv[0] = fv;
						for (int j = 1; j < 32; j++) {
							bk[j] = rndf();
							bv[j] = rndf();
						}
						kvt_quantize(bt, k + kvt_kv_bytes(kv_type, i), bk, 32);
						kvt_quantize(bt, v + kvt_kv_bytes(kv_type, i), bv, 32);
					}
				} else if (kv_type == KVT_KV_F16) {
					kvt_f32_to_f16((uint16_t *)k + i, &fk, 1);
					kvt_f32_to_f16((uint16_t *)v + i, &fv, 1);
				} else {
					((float *)k)[i] = fk;
					((float *)v)[i] = fv;
				}
			}
			CHECK_EQ(kvt_attn_acc_init(&a, &sh), 0);
			/* int8: quantized K with queries rounded to q8_0; off:
			 * the queries 16 bytes into a line */
			const int off = si == 2 && kv_type == KVT_KV_F16;

			for (int int8 = 0; int8 <= (kvt_kv_block(kv_type) != 0 || off); int8++) {
				const float *qx = off && int8 ? q + 4 : q;

				kvt_cpu_set_int8_dots(int8 && !off);
				best = 1e9;
				for (int rep = 0; rep < 10; rep++) {
					double t0 = now();
					kvt_attn_acc_reset(&a);
					for (unsigned t = 0; t < ctx; t += page)
						CHECK_EQ(kvt_attn_page(&a, qx, &qpos, k + t * tok,
								       v + t * tok,
								       ctx - t < page ? ctx - t : page,
								       t), 0);
					kvt_attn_finish(&a, out);
					best = fmin(best, now() - t0);
				}
				if (int8 && off)
					fprintf(stderr, " (queries 16 bytes off a line %.3f ms)", best * 1e3);
				else if (int8)
					fprintf(stderr, " (int8 q %.3f ms)", best * 1e3);
				else
					fprintf(stderr, " %s KV %.3f ms (%.1f GB/s)", kvt_kv_name(kv_type),
						best * 1e3, 2.0 * ctx * tok / best / 1e9);
			}
			kvt_cpu_set_int8_dots(0);
			kvt_attn_acc_free(&a);
			free(k);
			free(v);
		}
		fprintf(stderr, "\n");
	}
}

static void bench(void)
{
	unsigned n = t_scale(4096) / 32 * 32, grows = t_scale(128);
	float *x = xmalloc((size_t)grows * n * 4), *y = xmalloc((size_t)grows * n * 4);
	void *w[4];

	for (size_t i = 0; i < (size_t)grows * n; i++)
		x[i] = rndf();
	for (unsigned t = 0; t < 4; t++)
		w[t] = rand_weights(types[t], n, n);
	bench_pool();
	for (unsigned nt = 1; nt <= 2; nt++) {
		struct kvt_pool *p;

		CHECK_EQ(kvt_pool_new(nt, &p), 0);
		/* Each matvec against a plain read of the same bytes, so
		 * that both see the same caches. */
		fprintf(stderr, "speed: %u thread%s: matvec (1 row, %ux%u) GB/s of weights, "
			"(plain read of them):", nt, nt > 1 ? "s" : "", n, n);
		for (unsigned t = 0; t < 4; t++) {
			struct kvt_mat m = { w[t], types[t], n, n };
			struct rd_job rj = { .p = w[t], .bytes = mat_bytes(types[t], n, n), .parts = nt };
			double s = best_of(10, p, y, x, 1, &m), r = 1e9;

			for (int i = 0; i < 10; i++) {
				double t0 = now();
				kvt_pool_run(p, read_task, &rj, nt);
				r = fmin(r, now() - t0);
			}
			fprintf(stderr, " %s %.1f (%.1f)", type_name[t], rj.bytes / s / 1e9,
				rj.bytes / r / 1e9);
		}
		fprintf(stderr, "\n");
		fprintf(stderr, "speed: %u thread%s: matmul %u rows, GFLOP/s:", nt, nt > 1 ? "s" : "",
			grows);
		for (unsigned t = 0; t < 4; t++) {
			struct kvt_mat m = { w[t], types[t], n, n };
			double s = best_of(3, p, y, x, grows, &m);
			fprintf(stderr, " %s %.1f", type_name[t], 2.0 * grows * n * n / s / 1e9);
		}
		fprintf(stderr, "\n");
		kvt_pool_free(p);
	}
	for (unsigned t = 0; t < 4; t++)
		free(w[t]);
	free(x);
	free(y);
	bench_attn();
	bench_rope();
}

/* The cpu backend's buffers start on a cache line, small and large (past
 * malloc's mmap threshold, where malloc's would start 16 bytes in). */
static void test_cpu_alloc(void)
{
	static const size_t sizes[] = { 0, 1, 100, 4096 + 16, 1u << 20, (3u << 20) + 8 };
	struct kvt_compute cx;
	char why[256];

	CHECK_EQ(kvt_compute_open(NULL, 1, &cx, why, sizeof(why)), 0);
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		void *p = NULL;

		CHECK_EQ(cx.ops->alloc(cx.ctx, sizes[i], &p), 0);
		CHECK(p && (uintptr_t)p % 64 == 0);
		memset(p, 0x5a, sizes[i]);
		cx.ops->free(cx.ctx, p, sizes[i]);
	}
	kvt_compute_close(&cx);
	fprintf(stderr, "cpu backend: buffers start on a cache line\n");
}

int main(void)
{
	static const char *const level_name[] = { "portable C", "AVX2", "AVX-512" };
	struct kvt_pool *pools[4] = { NULL };
	const char *seed = getenv("KVT_TEST_SEED");
	int top = kvt_cpu_simd();

	if (seed)
		rng = strtoull(seed, NULL, 0) | 1;
	kvt_cpu_set_int8_dots(0);	/* f32 activations: exact products (t_quants: int8) */
	fprintf(stderr, "seed 0x%llx\n", (unsigned long long)rng);
	test_pool();
	test_cpu_alloc();
	CHECK_EQ(kvt_pool_new(1, &pools[1]), 0);
	CHECK_EQ(kvt_pool_new(2, &pools[2]), 0);
	CHECK_EQ(kvt_pool_new(3, &pools[3]), 0);
	for (int level = top; level >= 0; level--) {
		kvt_cpu_set_simd_max(level);
		CHECK_EQ(kvt_cpu_simd(), level);
		fprintf(stderr, "-- %s\n", level_name[level]);
		test_f16();
		test_elementwise();
		test_mat_row();
		test_matmul(pools, 4);
		test_attention();
	}
	kvt_cpu_set_simd_max(top);
	for (int i = 1; i < 4; i++)
		kvt_pool_free(pools[i]);
	bench();
	return 0;
}
