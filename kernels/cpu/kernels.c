/* SPDX-License-Identifier: MIT */
/*
 * The cpu kernels of kernels.h except the thread pool (pool.c): f16
 * conversion, RMSNorm, RoPE, SwiGLU, weight rows and products, paged and
 * dense attention.
 *
 * Every hot loop exists twice: for AVX2 with FMA and F16C (functions
 * marked AVX2, compiled for that target whatever the build's -march), and
 * in portable C. kvt_cpu_simd() picks one per call, so one binary runs on
 * any x86-64 and the portable code alone builds anywhere else. The two
 * agree up to the order of float rounding; f16 conversion agrees to the
 * bit, NaNs included.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <cblas.h>

#include "kernels/cpu/half.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/qdots.h"
#include "kernels/cpu/quants.h"

#if defined(__x86_64__) || defined(__i386__)
#define KVT_X86 1
#include <cpuid.h>
#include <immintrin.h>
#define AVX2		__attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE	static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define AVX512		__attribute__((target("avx512f,avx2,fma,f16c")))
#define AVX512_INLINE	static inline __attribute__((always_inline, target("avx512f,avx2,fma,f16c")))
#endif

/* A loop unrolled in the optimized build. Unrolling keeps the floats (no
 * sums reordered), so the sanitizer builds (KVT_DEBUG), which check the
 * same kernels to the bit, leave it to the compiler: the unrolled decode
 * kernels took clang eight minutes to compile under ASan and UBSan. */
#define KVT_PRAGMA(x)	_Pragma(#x)
#if KVT_DEBUG
#define UNROLL(n)
#else
#define UNROLL(n)	KVT_PRAGMA(GCC unroll n)
#endif

/* The GGML type numbers, as the seam names them (kernels/compute.h). */
enum { W_F32 = KVT_W_F32, W_F16 = KVT_W_F16, W_Q8_0 = KVT_W_Q8_0, W_BF16 = KVT_W_BF16 };
#define QK	32		/* Q8_0 and Q4_0 values per block */
#define Q8_SZ	34		/* Q8_0 block: f16 scale d, then 32 int8 q; value d * q */
#define Q4_SZ	18		/* Q4_0 block: d, then 16 bytes of two 4-bit q; d * (q - 8) */

/*
 * Matrix products. With few rows of x the product is bound by reading the
 * weights, and the dot-product kernels, which read each weight row once
 * for all rows (and F16, BF16, Q8_0 at their own size), beat sgemm; with
 * more, sgemm's blocking wins. Where, measured on 2 cores of an AVX-512
 * EPYC with 4096 x 4096 weights: at 8 rows for F32 (OpenBLAS is slow at
 * odd row counts below that), and between 16 and 24 rows for the other
 * types, for which sgemm also pays a conversion pass over the weights.
 */
#define SMALL_ROWS_F32	8	/* rows below this take the dot products */
#define SMALL_ROWS_CONV	16	/* the same for F16, BF16, Q8_0 */
#define SMALL_BLK	16	/* output rows per task: a multiple of this (a line of y) */
#define SMALL_TASK_MIN	(32 << 10)	/* weight bytes per task at least */
/* sgemm calls take blocks of at most GEMM_BLK output rows (256 measured
 * 2-5% faster than 128 at 128-512 rows, 64 10% slower), at least two per
 * thread, and for converted types at most GEMM_SCRATCH floats of scratch
 * per thread. */
#define GEMM_BLK	256
#define GEMM_SCRATCH	(1u << 20)

/* ---- dispatch ---- */

static int simd_max = 2;	/* atomic; lowered by tests */

/* The best level the cpu and the OS (which must save the wider registers
 * on a switch: XCR0) support. From cpuid rather than
 * __builtin_cpu_supports, which older clang cannot ask about F16C. */
static int simd_probe(void)
{
#ifdef KVT_X86
	unsigned a, b, c, d, lo, hi;
	uint64_t xcr0;

	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_AVX) ||
	    !(c & bit_FMA) || !(c & bit_F16C))
		return 0;
	__asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	xcr0 = (uint64_t)hi << 32 | lo;
	if ((xcr0 & 0x6) != 0x6)		/* SSE and AVX state */
		return 0;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & bit_AVX2))
		return 0;
	if ((b & bit_AVX512F) && (xcr0 & 0xe0) == 0xe0)	/* opmask and ZMM state */
		return 2;
	return 1;
#else
	return 0;
#endif
}

/* Probed once: cpuid traps to the hypervisor in a VM. KVT_SIMD=0 or 1
 * holds the kernels to portable C or AVX2 on a cpu that has more (to run
 * those paths end to end, as make xcheck does). */
int kvt_cpu_simd(void)
{
	static int have = -1;	/* atomic: -1 until probed */
	int h = __atomic_load_n(&have, __ATOMIC_RELAXED), max;

	if (h < 0) {
		const char *env = getenv("KVT_SIMD");

		h = simd_probe();
		if (env && (!strcmp(env, "0") || !strcmp(env, "1")) && env[0] - '0' < h)
			h = env[0] - '0';
		__atomic_store_n(&have, h, __ATOMIC_RELAXED);
	}
	max = __atomic_load_n(&simd_max, __ATOMIC_RELAXED);
	return h < max ? h : max;
}

void kvt_cpu_set_simd_max(int level)
{
	__atomic_store_n(&simd_max, level < 0 ? 0 : level, __ATOMIC_RELAXED);
}

/* ---- f16 ---- */

#ifdef KVT_X86
AVX2 static void f16_to_f32_avx2(float *dst, const uint16_t *src, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
	for (; i < n; i++)
		dst[i] = _cvtsh_ss(src[i]);
}

AVX2 static void f32_to_f16_avx2(uint16_t *dst, const float *src, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm_storeu_si128((__m128i *)(dst + i),
				 _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
	for (; i < n; i++)
		dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}
#endif

void kvt_f16_to_f32(float *dst, const uint16_t *src, size_t n)
{
#ifdef KVT_X86
	if (kvt_cpu_simd()) {
		f16_to_f32_avx2(dst, src, n);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		dst[i] = h2f(src[i]);
}

void kvt_cpu_prefetch(const void *p, size_t bytes)
{
	for (size_t off = 0; off < bytes; off += 64)
		__builtin_prefetch((const char *)p + off, 0, 3);
}

void kvt_f32_to_f16(uint16_t *dst, const float *src, size_t n)
{
#ifdef KVT_X86
	if (kvt_cpu_simd()) {
		f32_to_f16_avx2(dst, src, n);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		dst[i] = f2h(src[i]);
}

/* ---- AVX2 helpers ---- */

#ifdef KVT_X86
AVX2_INLINE float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* The eight horizontal sums of a0..a7, in that order, in one vector. */
AVX2_INLINE __m256 hsum8x8(__m256 a0, __m256 a1, __m256 a2, __m256 a3,
			   __m256 a4, __m256 a5, __m256 a6, __m256 a7)
{
	__m256 s0 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
	__m256 s1 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));

	return _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20),
			     _mm256_permute2f128_ps(s0, s1, 0x31));
}

/* e^x on 8 floats to within 2 ulp: Cephes' expf polynomial on x - n ln2,
 * times 2^n applied in two halves so that n may reach 128 (overflow to
 * +inf) or -150 (subnormal results, to within a few subnormal ulp).
 * NaN stays NaN. */
AVX2_INLINE __m256 exp8(__m256 x)
{
	__m256 n, r, p;
	__m256i ni, e1, e2;

	x = _mm256_min_ps(_mm256_set1_ps(88.8f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x));
	n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
			    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
	p = _mm256_set1_ps(1.9875691500e-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
	p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	ni = _mm256_cvtps_epi32(n);
	e1 = _mm256_srai_epi32(ni, 1);
	e2 = _mm256_sub_epi32(ni, e1);
	e1 = _mm256_slli_epi32(_mm256_add_epi32(e1, _mm256_set1_epi32(127)), 23);
	e2 = _mm256_slli_epi32(_mm256_add_epi32(e2, _mm256_set1_epi32(127)), 23);
	p = _mm256_mul_ps(p, _mm256_castsi256_ps(e1));
	return _mm256_mul_ps(p, _mm256_castsi256_ps(e2));
}

/* exp8 on sixteen lanes: the same steps, so the same values. */
AVX512_INLINE __m512 exp16(__m512 x)
{
	__m512 n, r, p;
	__m512i ni, e1, e2;

	x = _mm512_min_ps(_mm512_set1_ps(88.8f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
	n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
				 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
	p = _mm512_set1_ps(1.9875691500e-4f);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
	p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
	ni = _mm512_cvtps_epi32(n);
	e1 = _mm512_srai_epi32(ni, 1);
	e2 = _mm512_sub_epi32(ni, e1);
	e1 = _mm512_slli_epi32(_mm512_add_epi32(e1, _mm512_set1_epi32(127)), 23);
	e2 = _mm512_slli_epi32(_mm512_add_epi32(e2, _mm512_set1_epi32(127)), 23);
	p = _mm512_mul_ps(p, _mm512_castsi512_ps(e1));
	return _mm512_mul_ps(p, _mm512_castsi512_ps(e2));
}
#endif

/* ---- RMSNorm, RoPE, SwiGLU ---- */

#ifdef KVT_X86
AVX2 static float sumsq_avx2(const float *x, unsigned n)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	unsigned i = 0;
	float s;

	for (; i + 32 <= n; i += 32) {
		__m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
		__m256 x2 = _mm256_loadu_ps(x + i + 16), x3 = _mm256_loadu_ps(x + i + 24);
		a0 = _mm256_fmadd_ps(x0, x0, a0);
		a1 = _mm256_fmadd_ps(x1, x1, a1);
		a2 = _mm256_fmadd_ps(x2, x2, a2);
		a3 = _mm256_fmadd_ps(x3, x3, a3);
	}
	for (; i + 8 <= n; i += 8) {
		__m256 x0 = _mm256_loadu_ps(x + i);
		a0 = _mm256_fmadd_ps(x0, x0, a0);
	}
	s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
	for (; i < n; i++)
		s += x[i] * x[i];
	return s;
}
#endif

void kvt_rmsnorm(float *out, const float *x, const float *w, unsigned n, float eps)
{
	double ss = 0;
	float r;

	if (!n)
		return;
#ifdef KVT_X86
	if (kvt_cpu_simd())
		ss = sumsq_avx2(x, n);
	else
#endif
		for (unsigned i = 0; i < n; i++)
			ss += (double)x[i] * x[i];
	r = (float)(1.0 / sqrt(ss / n + eps));
	for (unsigned i = 0; i < n; i++)
		out[i] = x[i] * r * w[i];
}

void kvt_rope_inv_freq(double *inv_freq, unsigned rope_dim, float theta, float freq_scale,
		       const float *factors)
{
	for (unsigned i = 0; i < rope_dim / 2; i++) {
		inv_freq[i] = freq_scale * pow(theta, -2.0 * i / rope_dim);
		if (factors)
			inv_freq[i] /= factors[i];
	}
}

/* The angles are computed in double: at large positions a float angle
 * (pos * freq) would already be off by many ulp before cos and sin. */
void kvt_rope_cs(float *cs, unsigned rope_dim, uint32_t pos, const double *inv_freq)
{
	for (unsigned i = 0; i < rope_dim / 2; i++) {
		double sd, cd;

		sincos((double)pos * inv_freq[i], &sd, &cd);
		cs[2 * i] = (float)cd;
		cs[2 * i + 1] = (float)sd;
	}
}

void kvt_rope_apply(float *x, unsigned n_heads, unsigned head_dim, unsigned rope_dim,
		    const float *cs)
{
	if (rope_dim > head_dim)
		rope_dim = head_dim;
	for (unsigned i = 0; i < rope_dim / 2; i++) {
		const float c = cs[2 * i], s = cs[2 * i + 1];

		for (unsigned h = 0; h < n_heads; h++) {
			float *p = x + (size_t)h * head_dim + 2 * i, x0 = p[0], x1 = p[1];

			p[0] = x0 * c - x1 * s;
			p[1] = x0 * s + x1 * c;
		}
	}
}

void kvt_rope(float *x, unsigned n_heads, unsigned head_dim, unsigned rope_dim,
	      uint32_t pos, const double *inv_freq)
{
	float cs[2 * KVT_ROPE_MAX_PAIRS];
	unsigned rd = rope_dim < head_dim ? rope_dim : head_dim;

	for (unsigned i0 = 0; i0 < rd / 2; i0 += KVT_ROPE_MAX_PAIRS) {
		unsigned n = rd / 2 - i0 < KVT_ROPE_MAX_PAIRS ? rd / 2 - i0 : KVT_ROPE_MAX_PAIRS;

		kvt_rope_cs(cs, 2 * n, pos, inv_freq + i0);
		kvt_rope_apply(x + 2 * i0, n_heads, head_dim, 2 * n, cs);
	}
}

#ifdef KVT_X86
AVX2 static void swiglu_avx2(float *g, const float *u, unsigned n)
{
	const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
	unsigned i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 x = _mm256_loadu_ps(g + i);
		__m256 e = exp8(_mm256_sub_ps(zero, x));

		_mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)),
						      _mm256_loadu_ps(u + i)));
	}
	for (; i < n; i++)
		g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
#endif

void kvt_swiglu(float *g, const float *u, unsigned n)
{
#ifdef KVT_X86
	if (kvt_cpu_simd()) {
		swiglu_avx2(g, u, n);
		return;
	}
#endif
	for (unsigned i = 0; i < n; i++)
		g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* ---- weight rows ---- */

/* Bytes of one weight row, 0 for a type or width we do not take. */
static size_t row_bytes(uint32_t type, uint32_t n_in)
{
	switch (type) {
	case W_F32:
		return (size_t)n_in * 4;
	case W_F16:
	case W_BF16:
		return (size_t)n_in * 2;
	}
	const struct kvt_qtype *t = kvt_qtype(type);
	return !t || n_in % t->blk ? 0 : (size_t)n_in / t->blk * t->size;
}

size_t kvt_mat_row_bytes(uint32_t type, uint32_t n_in)
{
	return row_bytes(type, n_in);
}

static inline float bf2f(uint16_t b)
{
	return f32_of((uint32_t)b << 16);
}

static inline float q8_scale(const uint8_t *blk)
{
	uint16_t d;

	memcpy(&d, blk, sizeof(d));
	return h2f(d);
}

#ifdef KVT_X86
AVX2 static void bf16_to_f32_avx2(float *dst, const uint16_t *src, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
		_mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
	}
	for (; i < n; i++)
		dst[i] = bf2f(src[i]);
}

AVX2 static void q8_to_f32_avx2(float *dst, const uint8_t *src, size_t nblk)
{
	for (size_t b = 0; b < nblk; b++, src += Q8_SZ, dst += QK) {
		uint16_t dh;
		__m256 d;

		memcpy(&dh, src, sizeof(dh));
		d = _mm256_set1_ps(_cvtsh_ss(dh));
		for (int k = 0; k < QK; k += 8) {
			__m128i q = _mm_loadl_epi64((const __m128i *)(src + 2 + k));
			__m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));

			_mm256_storeu_ps(dst + k, _mm256_mul_ps(d, v));
		}
	}
}
#endif

/* n values of a weight row from value i0 on, as f32 (for block types, i0
 * and n are whole blocks). */
static void row_to_f32(float *dst, uint32_t type, const void *row, size_t i0, size_t n, int simd)
{
	const uint16_t *h = (const uint16_t *)row + i0;
	const uint8_t *q = (const uint8_t *)row + i0 / QK * Q8_SZ;

	switch (type) {
	case W_F32:
		memcpy(dst, (const float *)row + i0, n * sizeof(float));
		return;
	case W_F16:
		if (simd)
			kvt_f16_to_f32(dst, h, n);
		else
			for (size_t i = 0; i < n; i++)
				dst[i] = h2f(h[i]);
		return;
	case W_BF16:
#ifdef KVT_X86
		if (simd) {
			bf16_to_f32_avx2(dst, h, n);
			return;
		}
#endif
		for (size_t i = 0; i < n; i++)
			dst[i] = bf2f(h[i]);
		return;
	case W_Q8_0:
#ifdef KVT_X86
		if (simd) {
			q8_to_f32_avx2(dst, q, n / QK);
			return;
		}
#endif
		for (size_t b = 0; b < n / QK; b++, q += Q8_SZ) {
			float d = q8_scale(q);
			for (int k = 0; k < QK; k++)
				dst[b * QK + k] = d * (float)(int8_t)q[2 + k];
		}
		return;
	}
	const struct kvt_qtype *t = kvt_qtype(type);
	kvt_dequant_block_fn dq = kvt_dequant_block(type, simd);
	const uint8_t *b = (const uint8_t *)row + i0 / t->blk * t->size;

	for (size_t k = 0; k < n / t->blk; k++, b += t->size)
		dq(dst + k * t->blk, b);
}

void kvt_mat_row(float *out, const struct kvt_mat *w, uint32_t id)
{
	size_t rb = row_bytes(w->type, w->n_in);

	if (!rb)
		return;
	row_to_f32(out, w->type, (const char *)w->data + (size_t)id * rb, 0, w->n_in, kvt_cpu_simd());
}

/* ---- dot products: R rows of x against NW weight rows ---- */

/* out[k * 4 + r] = sum_i w_k[i] * x[r * ldx + i] for k < NW <= 2 (weight
 * row k at w + k * wst bytes) and r < R <= 4, over n values. Each weight
 * row is read once for all R rows. */
typedef void (*dots_fn)(const void *w, size_t wst, unsigned NW, const float *x, size_t ldx,
			unsigned n, unsigned R, float *out);

#ifdef KVT_X86
AVX2_INLINE __m256 load8w(const void *w, size_t i, int type)
{
	__m128i h;

	if (type == W_F32)
		return _mm256_loadu_ps((const float *)w + i);
	h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
	if (type == W_F16)
		return _mm256_cvtph_ps(h);
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

AVX2_INLINE float load1w(const void *w, size_t i, int type)
{
	if (type == W_F32)
		return ((const float *)w)[i];
	if (type == W_F16)
		return _cvtsh_ss(((const uint16_t *)w)[i]);
	return bf2f(((const uint16_t *)w)[i]);
}

/* The body for F32, F16 and BF16: NW (1 or 2) weight rows w[k] = w0 +
 * k * wst against R rows of x, out[k * 4 + r]. Inlined with NW, R and
 * type constant so that the accumulators live in registers: U per pair,
 * enough to cover the FMA latency, at most eight in all. Two weight rows
 * at once halve the loads of x, which for R > 2 no longer sit in L1. */
AVX2_INLINE void dots_body(const void *w0, size_t wst, const float *x, size_t ldx, unsigned n,
			   unsigned NW, unsigned R, int type, float *out)
{
	const unsigned U = NW * R == 1 ? 4 : NW * R == 2 ? 4 : NW * R <= 4 ? 2 : 1;
	const void *w[2] = { w0, (const char *)w0 + wst };
	__m256 acc[2][4][4];
	unsigned i = 0;

	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			for (unsigned u = 0; u < U; u++)
				acc[k][r][u] = _mm256_setzero_ps();
	for (; i + 8 * U <= n; i += 8 * U)
		for (unsigned u = 0; u < U; u++) {
			__m256 wv[2];
			for (unsigned k = 0; k < NW; k++)
				wv[k] = load8w(w[k], i + 8 * u, type);
			for (unsigned r = 0; r < R; r++) {
				__m256 xv = _mm256_loadu_ps(x + r * ldx + i + 8 * u);
				for (unsigned k = 0; k < NW; k++)
					acc[k][r][u] = _mm256_fmadd_ps(wv[k], xv, acc[k][r][u]);
			}
		}
	for (; i + 8 <= n; i += 8) {
		__m256 wv[2];
		for (unsigned k = 0; k < NW; k++)
			wv[k] = load8w(w[k], i, type);
		for (unsigned r = 0; r < R; r++) {
			__m256 xv = _mm256_loadu_ps(x + r * ldx + i);
			for (unsigned k = 0; k < NW; k++)
				acc[k][r][0] = _mm256_fmadd_ps(wv[k], xv, acc[k][r][0]);
		}
	}
	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++) {
			__m256 s = acc[k][r][0];
			for (unsigned u = 1; u < U; u++)
				s = _mm256_add_ps(s, acc[k][r][u]);
			out[k * 4 + r] = hsum8(s);
		}
	for (; i < n; i++)
		for (unsigned k = 0; k < NW; k++) {
			float wv = load1w(w[k], i, type);
			for (unsigned r = 0; r < R; r++)
				out[k * 4 + r] += wv * x[r * ldx + i];
		}
}

AVX2_INLINE __m256 q8_load8(const uint8_t *q)
{
	return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q)));
}

/* One Q8_0 block against R rows: acc[r] += d * (q . x[r]). */
AVX2_INLINE void q8_block(const uint8_t *b, const float *x, size_t ldx, unsigned R, __m256 *acc)
{
	uint16_t dh;
	__m256 d, w0, w1, w2, w3;

	memcpy(&dh, b, sizeof(dh));
	d = _mm256_set1_ps(_cvtsh_ss(dh));
	w0 = q8_load8(b + 2);
	w1 = q8_load8(b + 10);
	w2 = q8_load8(b + 18);
	w3 = q8_load8(b + 26);
	for (unsigned r = 0; r < R; r++) {
		const float *xr = x + r * ldx;
		__m256 t = _mm256_mul_ps(w0, _mm256_loadu_ps(xr));
		__m256 t2 = _mm256_mul_ps(w1, _mm256_loadu_ps(xr + 8));

		t = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xr + 16), t);
		t2 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xr + 24), t2);
		acc[r] = _mm256_fmadd_ps(d, _mm256_add_ps(t, t2), acc[r]);
	}
}

/* Q8_0: two accumulators per row, alternating blocks. */
AVX2_INLINE void dots_q8_body(const void *w, const float *x, size_t ldx, unsigned n, unsigned R,
			      float *out)
{
	const uint8_t *b = w;
	__m256 a0[4], a1[4];
	unsigned nb = n / QK, j = 0;

	for (unsigned r = 0; r < R; r++)
		a0[r] = a1[r] = _mm256_setzero_ps();
	for (; j + 2 <= nb; j += 2, b += 2 * Q8_SZ) {
		q8_block(b, x + j * QK, ldx, R, a0);
		q8_block(b + Q8_SZ, x + (j + 1) * QK, ldx, R, a1);
	}
	if (j < nb)
		q8_block(b, x + j * QK, ldx, R, a0);
	for (unsigned r = 0; r < R; r++)
		out[r] = hsum8(_mm256_add_ps(a0[r], a1[r]));
}

/* A dots_fn from a body, instantiated for each NW and R (NN, RR). */
#define DEF_DOTS(target, name, body...)						\
target static void name(const void *w, size_t wst, unsigned NW, const float *x, size_t ldx,	\
			unsigned n, unsigned R, float *out)			\
{										\
	KVT_NW_R_DISPATCH(NW, R, body);					\
}

DEF_DOTS(AVX2, dots_f32_avx2, dots_body(w, wst, x, ldx, n, NN, RR, W_F32, out))
DEF_DOTS(AVX2, dots_f16_avx2, dots_body(w, wst, x, ldx, n, NN, RR, W_F16, out))
DEF_DOTS(AVX2, dots_bf16_avx2, dots_body(w, wst, x, ldx, n, NN, RR, W_BF16, out))
DEF_DOTS(AVX2, dots_q8_avx2, for (unsigned k = 0; k < NN; k++)
	 dots_q8_body((const char *)w + k * wst, x, ldx, n, RR, out + 4 * k))

/* The other block types: each weight row a block at a time into f32 in
 * L1 (dq, the block's AVX2 dequantizer where it has one), then FMAs
 * against R rows of x. blk values of bsz bytes per block. */
AVX2_INLINE void dq_body(kvt_dequant_block_fn dq, unsigned blk, unsigned bsz, const void *w0,
			 size_t wst, const float *x, size_t ldx, unsigned n, unsigned NW,
			 unsigned R, float *out)
{
	float buf[2][256] __attribute__((aligned(32)));
	__m256 acc[2][4][2];

	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			acc[k][r][0] = acc[k][r][1] = _mm256_setzero_ps();
	for (unsigned b = 0; b < n / blk; b++) {
		const float *xb = x + (size_t)b * blk;

		for (unsigned k = 0; k < NW; k++)
			dq(buf[k], (const uint8_t *)w0 + k * wst + (size_t)b * bsz);
		for (unsigned i = 0; i < blk; i += 16)
			for (unsigned r = 0; r < R; r++) {
				__m256 x0 = _mm256_loadu_ps(xb + r * ldx + i);
				__m256 x1 = _mm256_loadu_ps(xb + r * ldx + i + 8);
				for (unsigned k = 0; k < NW; k++) {
					acc[k][r][0] = _mm256_fmadd_ps(_mm256_load_ps(buf[k] + i), x0,
								       acc[k][r][0]);
					acc[k][r][1] = _mm256_fmadd_ps(_mm256_load_ps(buf[k] + i + 8), x1,
								       acc[k][r][1]);
				}
			}
	}
	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			out[k * 4 + r] = hsum8(_mm256_add_ps(acc[k][r][0], acc[k][r][1]));
}

AVX2 static void dots_dq_avx2(kvt_dequant_block_fn dq, const struct kvt_qtype *t, const void *w,
			      size_t wst, unsigned NW, const float *x, size_t ldx, unsigned n,
			      unsigned R, float *out)
{
	switch ((NW - 1) * 4 + R - 1) {
	case 0: dq_body(dq, t->blk, t->size, w, wst, x, ldx, n, 1, 1, out); break;
	case 1: dq_body(dq, t->blk, t->size, w, wst, x, ldx, n, 1, 2, out); break;
	case 2: dq_body(dq, t->blk, t->size, w, wst, x, ldx, n, 1, 3, out); break;
	case 3: dq_body(dq, t->blk, t->size, w, wst, x, ldx, n, 1, 4, out); break;
	case 4: dq_body(dq, t->blk, t->size, w, wst, x, ldx, n, 2, 1, out); break;
	case 5: dq_body(dq, t->blk, t->size, w, wst, x, ldx, n, 2, 2, out); break;
	case 6: dq_body(dq, t->blk, t->size, w, wst, x, ldx, n, 2, 3, out); break;
	default: dq_body(dq, t->blk, t->size, w, wst, x, ldx, n, 2, 4, out); break;
	}
}

/*
 * q4_k and q6_k, the bulk of the _K_M files, fused: the quants go from
 * bytes to f32 lanes and into FMAs with x without a pass through memory,
 * and each sub-block's scale multiplies its sum once. q4_k's mins come out
 * of the sums of x over each 32 values (xs, computed once per product):
 * sum_i (d s q_i - dmin m) x_i = d s sum_i q_i x_i - dmin m sum_i x_i.
 * Same value as the reference's dequantized row up to float rounding.
 */
typedef void (*fdots_fn)(const void *w, size_t wst, unsigned NW, const float *x, size_t ldx,
			 const float *xs, size_t ldxs, unsigned n, unsigned R, float *out);

AVX2_INLINE void q4k_body(const void *w0, size_t wst, const float *x, size_t ldx,
			  const float *xs, size_t ldxs, unsigned n, unsigned NW, unsigned R,
			  float *out)
{
	const __m256i lo = _mm256_set1_epi32(0xF);
	__m256 acc[2][4];
	float mins[2][4] = { { 0 } };

	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			acc[k][r] = _mm256_setzero_ps();
	for (unsigned b = 0; b < n / 256; b++)
		for (unsigned k = 0; k < NW; k++) {
			const uint8_t *blk = (const uint8_t *)w0 + k * wst + (size_t)b * 144;
			const float d = q8_scale(blk), dmin = q8_scale(blk + 2);
			uint8_t sc[8], mn[8];

			for (int j = 0; j < 8; j++)
				kvt_scale_min_k4(j, blk + 4, &sc[j], &mn[j]);
			for (unsigned j = 0; j < 4; j++) {
				const uint8_t *q = blk + 16 + 32 * j;
				const float *xb = x + (size_t)b * 256 + 64 * j;
				__m256 sl[4], sh[4];

				for (unsigned r = 0; r < R; r++)
					sl[r] = sh[r] = _mm256_setzero_ps();
				for (unsigned l = 0; l < 32; l += 8) {
					__m256i v = _mm256_cvtepu8_epi32(
						_mm_loadl_epi64((const __m128i *)(q + l)));
					__m256 ql = _mm256_cvtepi32_ps(_mm256_and_si256(v, lo));
					__m256 qh = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
					for (unsigned r = 0; r < R; r++) {
						sl[r] = _mm256_fmadd_ps(ql, _mm256_loadu_ps(xb + r * ldx + l),
									sl[r]);
						sh[r] = _mm256_fmadd_ps(qh, _mm256_loadu_ps(xb + r * ldx + 32 + l),
									sh[r]);
					}
				}
				const __m256 d1 = _mm256_set1_ps(d * sc[2 * j]);
				const __m256 d2 = _mm256_set1_ps(d * sc[2 * j + 1]);
				for (unsigned r = 0; r < R; r++) {
					const float *s = xs + r * ldxs + b * 8 + 2 * j;
					acc[k][r] = _mm256_fmadd_ps(d1, sl[r], acc[k][r]);
					acc[k][r] = _mm256_fmadd_ps(d2, sh[r], acc[k][r]);
					mins[k][r] += dmin * mn[2 * j] * s[0] + dmin * mn[2 * j + 1] * s[1];
				}
			}
		}
	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			out[k * 4 + r] = hsum8(acc[k][r]) - mins[k][r];
}

AVX2_INLINE void q6k_body(const void *w0, size_t wst, const float *x, size_t ldx,
			  unsigned n, unsigned NW, unsigned R, float *out)
{
	const __m256i lo = _mm256_set1_epi32(0xF), two = _mm256_set1_epi32(0x30),
		      off = _mm256_set1_epi32(32);
	__m256 acc[2][4];

	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			acc[k][r] = _mm256_setzero_ps();
	for (unsigned b = 0; b < n / 256; b++)
		for (unsigned k = 0; k < NW; k++) {
			const uint8_t *blk = (const uint8_t *)w0 + k * wst + (size_t)b * 210;
			const float d = q8_scale(blk + 208);

			for (unsigned c = 0; c < 2; c++) {
				const uint8_t *ql = blk + 64 * c, *qh = blk + 128 + 32 * c;
				const int8_t *sc = (const int8_t *)(blk + 192) + 8 * c;
				const float *xb = x + (size_t)b * 256 + 128 * c;

				for (unsigned h = 0; h < 2; h++) {	/* values 16h.. of each 32 */
					__m256 s[4][4];

					for (unsigned r = 0; r < R; r++)
						s[r][0] = s[r][1] = s[r][2] = s[r][3] = _mm256_setzero_ps();
					for (unsigned l = 16 * h; l < 16 * h + 16; l += 8) {
						__m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + l)));
						__m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + l + 32)));
						__m256i t = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qh + l)));
						__m256 q[4] = {
							_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_or_si256(
								_mm256_and_si256(a, lo),
								_mm256_and_si256(_mm256_slli_epi32(t, 4), two)), off)),
							_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_or_si256(
								_mm256_and_si256(e, lo),
								_mm256_and_si256(_mm256_slli_epi32(t, 2), two)), off)),
							_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_or_si256(
								_mm256_srli_epi32(a, 4), _mm256_and_si256(t, two)), off)),
							_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_or_si256(
								_mm256_srli_epi32(e, 4),
								_mm256_and_si256(_mm256_srli_epi32(t, 2), two)), off)),
						};
						for (unsigned r = 0; r < R; r++)
							for (unsigned g = 0; g < 4; g++)
								s[r][g] = _mm256_fmadd_ps(q[g],
									_mm256_loadu_ps(xb + r * ldx + 32 * g + l), s[r][g]);
					}
					for (unsigned r = 0; r < R; r++)
						for (unsigned g = 0; g < 4; g++)
							acc[k][r] = _mm256_fmadd_ps(
								_mm256_set1_ps(d * sc[h + 2 * g]), s[r][g], acc[k][r]);
				}
			}
		}
	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			out[k * 4 + r] = hsum8(acc[k][r]);
}

#define DEF_FDOTS(name, body...)						\
AVX2 static void name(const void *w, size_t wst, unsigned NW, const float *x, size_t ldx,	\
		      const float *xs, size_t ldxs, unsigned n, unsigned R, float *out)	\
{										\
	KVT_NW_R_DISPATCH(NW, R, body);					\
}

DEF_FDOTS(fdots_q4k_avx2, q4k_body(w, wst, x, ldx, xs, ldxs, n, NN, RR, out))
DEF_FDOTS(fdots_q6k_avx2, q6k_body(w, wst, x, ldx, n, NN, RR, out))

/* q4_0 fused: d * sum_i (q_i - 8) x_i, a block of 32 at a time. */
AVX2_INLINE void q40_body(const void *w0, size_t wst, const float *x, size_t ldx, unsigned n,
			  unsigned NW, unsigned R, float *out)
{
	const __m256i lo = _mm256_set1_epi32(0xF), eight = _mm256_set1_epi32(8);
	__m256 acc[2][4];

	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			acc[k][r] = _mm256_setzero_ps();
	for (unsigned b = 0; b < n / 32; b++)
		for (unsigned k = 0; k < NW; k++) {
			const uint8_t *blk = (const uint8_t *)w0 + k * wst + (size_t)b * 18;
			const float *xb = x + (size_t)b * 32;
			__m256 s[4];

			for (unsigned r = 0; r < R; r++)
				s[r] = _mm256_setzero_ps();
			for (unsigned l = 0; l < 16; l += 8) {
				__m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 2 + l)));
				__m256 ql = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(v, lo), eight));
				__m256 qh = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(v, 4), eight));
				for (unsigned r = 0; r < R; r++) {
					s[r] = _mm256_fmadd_ps(ql, _mm256_loadu_ps(xb + r * ldx + l), s[r]);
					s[r] = _mm256_fmadd_ps(qh, _mm256_loadu_ps(xb + r * ldx + 16 + l), s[r]);
				}
			}
			const __m256 d = _mm256_set1_ps(q8_scale(blk));
			for (unsigned r = 0; r < R; r++)
				acc[k][r] = _mm256_fmadd_ps(d, s[r], acc[k][r]);
		}
	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			out[k * 4 + r] = hsum8(acc[k][r]);
}

DEF_FDOTS(fdots_q40_avx2, q40_body(w, wst, x, ldx, n, NN, RR, out))

/* The three with AVX-512F: sixteen lanes, one load of sixteen bytes
 * widening to both nibbles' vectors. */
#define DEF_FDOTS512(name, body...)						\
AVX512 static void name(const void *w, size_t wst, unsigned NW, const float *x, size_t ldx,	\
			const float *xs, size_t ldxs, unsigned n, unsigned R, float *out)	\
{										\
	KVT_NW_R_DISPATCH(NW, R, body);					\
}

AVX512_INLINE __m512i u8x16(const uint8_t *p)
{
	return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}

AVX512_INLINE void q4k_body512(const void *w0, size_t wst, const float *x, size_t ldx,
			       const float *xs, size_t ldxs, unsigned n, unsigned NW, unsigned R,
			       float *out)
{
	const __m512i lo = _mm512_set1_epi32(0xF);
	__m512 acc[2][4];
	float mins[2][4] = { { 0 } };

	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			acc[k][r] = _mm512_setzero_ps();
	for (unsigned b = 0; b < n / 256; b++)
		for (unsigned k = 0; k < NW; k++) {
			const uint8_t *blk = (const uint8_t *)w0 + k * wst + (size_t)b * 144;
			const float d = q8_scale(blk), dmin = q8_scale(blk + 2);
			uint8_t sc[8], mn[8];

			for (int j = 0; j < 8; j++)
				kvt_scale_min_k4(j, blk + 4, &sc[j], &mn[j]);
			for (unsigned j = 0; j < 4; j++) {
				const uint8_t *q = blk + 16 + 32 * j;
				const float *xb = x + (size_t)b * 256 + 64 * j;
				__m512i v0 = u8x16(q), v1 = u8x16(q + 16);
				__m512 l0 = _mm512_cvtepi32_ps(_mm512_and_si512(v0, lo));
				__m512 l1 = _mm512_cvtepi32_ps(_mm512_and_si512(v1, lo));
				__m512 h0 = _mm512_cvtepi32_ps(_mm512_srli_epi32(v0, 4));
				__m512 h1 = _mm512_cvtepi32_ps(_mm512_srli_epi32(v1, 4));
				const __m512 d1 = _mm512_set1_ps(d * sc[2 * j]);
				const __m512 d2 = _mm512_set1_ps(d * sc[2 * j + 1]);

				for (unsigned r = 0; r < R; r++) {
					const float *xr = xb + r * ldx, *s = xs + r * ldxs + b * 8 + 2 * j;
					__m512 sl = _mm512_mul_ps(l0, _mm512_loadu_ps(xr));
					__m512 sh = _mm512_mul_ps(h0, _mm512_loadu_ps(xr + 32));

					sl = _mm512_fmadd_ps(l1, _mm512_loadu_ps(xr + 16), sl);
					sh = _mm512_fmadd_ps(h1, _mm512_loadu_ps(xr + 48), sh);
					acc[k][r] = _mm512_fmadd_ps(d1, sl, acc[k][r]);
					acc[k][r] = _mm512_fmadd_ps(d2, sh, acc[k][r]);
					mins[k][r] += dmin * mn[2 * j] * s[0] + dmin * mn[2 * j + 1] * s[1];
				}
			}
		}
	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			out[k * 4 + r] = _mm512_reduce_add_ps(acc[k][r]) - mins[k][r];
}

AVX512_INLINE void q6k_body512(const void *w0, size_t wst, const float *x, size_t ldx,
			       unsigned n, unsigned NW, unsigned R, float *out)
{
	const __m512i lo = _mm512_set1_epi32(0xF), two = _mm512_set1_epi32(0x30),
		      off = _mm512_set1_epi32(32);
	__m512 acc[2][4];

	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			acc[k][r] = _mm512_setzero_ps();
	for (unsigned b = 0; b < n / 256; b++)
		for (unsigned k = 0; k < NW; k++) {
			const uint8_t *blk = (const uint8_t *)w0 + k * wst + (size_t)b * 210;
			const float d = q8_scale(blk + 208);

			for (unsigned c = 0; c < 2; c++) {
				const uint8_t *ql = blk + 64 * c, *qh = blk + 128 + 32 * c;
				const int8_t *sc = (const int8_t *)(blk + 192) + 8 * c;
				const float *xb = x + (size_t)b * 256 + 128 * c;

				for (unsigned h = 0; h < 2; h++) {	/* values 16h.. of each 32 */
					unsigned l = 16 * h;
					__m512i a = u8x16(ql + l), e = u8x16(ql + l + 32), t = u8x16(qh + l);
					__m512 q[4] = {
						_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_or_si512(
							_mm512_and_si512(a, lo),
							_mm512_and_si512(_mm512_slli_epi32(t, 4), two)), off)),
						_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_or_si512(
							_mm512_and_si512(e, lo),
							_mm512_and_si512(_mm512_slli_epi32(t, 2), two)), off)),
						_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_or_si512(
							_mm512_srli_epi32(a, 4), _mm512_and_si512(t, two)), off)),
						_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_or_si512(
							_mm512_srli_epi32(e, 4),
							_mm512_and_si512(_mm512_srli_epi32(t, 2), two)), off)),
					};
					for (unsigned r = 0; r < R; r++)
						for (unsigned g = 0; g < 4; g++)
							acc[k][r] = _mm512_fmadd_ps(
								_mm512_set1_ps(d * sc[h + 2 * g]),
								_mm512_mul_ps(q[g], _mm512_loadu_ps(
									xb + r * ldx + 32 * g + l)),
								acc[k][r]);
				}
			}
		}
	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			out[k * 4 + r] = _mm512_reduce_add_ps(acc[k][r]);
}

AVX512_INLINE void q40_body512(const void *w0, size_t wst, const float *x, size_t ldx,
			       unsigned n, unsigned NW, unsigned R, float *out)
{
	const __m512i lo = _mm512_set1_epi32(0xF), eight = _mm512_set1_epi32(8);
	__m512 acc[2][4];

	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			acc[k][r] = _mm512_setzero_ps();
	for (unsigned b = 0; b < n / 32; b++)
		for (unsigned k = 0; k < NW; k++) {
			const uint8_t *blk = (const uint8_t *)w0 + k * wst + (size_t)b * 18;
			const float *xb = x + (size_t)b * 32;
			__m512i v = u8x16(blk + 2);
			__m512 ql = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(v, lo), eight));
			__m512 qh = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(v, 4), eight));
			const __m512 d = _mm512_set1_ps(q8_scale(blk));

			for (unsigned r = 0; r < R; r++) {
				__m512 s = _mm512_mul_ps(ql, _mm512_loadu_ps(xb + r * ldx));

				s = _mm512_fmadd_ps(qh, _mm512_loadu_ps(xb + r * ldx + 16), s);
				acc[k][r] = _mm512_fmadd_ps(d, s, acc[k][r]);
			}
		}
	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			out[k * 4 + r] = _mm512_reduce_add_ps(acc[k][r]);
}

DEF_FDOTS512(fdots_q4k_avx512, q4k_body512(w, wst, x, ldx, xs, ldxs, n, NN, RR, out))
DEF_FDOTS512(fdots_q6k_avx512, q6k_body512(w, wst, x, ldx, n, NN, RR, out))
DEF_FDOTS512(fdots_q40_avx512, q40_body512(w, wst, x, ldx, n, NN, RR, out))

/* The same with AVX-512F: twice the lanes per instruction, which the
 * conversions (F16, BF16, and above all Q8_0) need to keep up with
 * memory. Not used for F32 (see kvt_matmul). */

/* F16 or BF16 (type constant). */
/* The f16 and bf16 dot products ask for the weights this far ahead of
 * their loads (one a line, into L2: prefetcht1): rows follow one another,
 * so it runs into the next rows. On a Zen 5 EPYC a 1-row product from
 * memory went from 0.46-0.56 of a plain read of the same bytes to
 * 0.58-0.86 with 4 KiB into L1; 8 KiB into L2 took a further 5 per cent
 * off a decode step (docs/benchmarks.md), where 8 KiB into L1 or 16 KiB
 * into L2 did not. */
#define DOTS_PF		8192

AVX512_INLINE __m512 load16w(const void *w, size_t i, int type)
{
	__m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));

	if (type == W_F16)
		return _mm512_cvtph_ps(h);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AVX512_INLINE void dots512_body(const void *w0, size_t wst, const float *x, size_t ldx,
				unsigned n, unsigned NW, unsigned R, int type, float *out)
{
	const unsigned U = NW * R == 1 ? 4 : NW * R == 2 ? 4 : NW * R <= 4 ? 2 : 1;
	const void *w[2] = { w0, (const char *)w0 + wst };
	__m512 acc[2][4][4];
	unsigned i = 0;

	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			for (unsigned u = 0; u < U; u++)
				acc[k][r][u] = _mm512_setzero_ps();
	for (; i + 16 * U <= n; i += 16 * U)
		for (unsigned u = 0; u < U; u++) {
			__m512 wv[2];
			for (unsigned k = 0; k < NW; k++) {
				if (u % 2 == 0)		/* 32 values: a line */
					_mm_prefetch((const char *)w[k] + 2 * (size_t)(i + 16 * u) + DOTS_PF,
						     _MM_HINT_T1);
				wv[k] = load16w(w[k], i + 16 * u, type);
			}
			for (unsigned r = 0; r < R; r++) {
				__m512 xv = _mm512_loadu_ps(x + r * ldx + i + 16 * u);
				for (unsigned k = 0; k < NW; k++)
					acc[k][r][u] = _mm512_fmadd_ps(wv[k], xv, acc[k][r][u]);
			}
		}
	for (; i + 16 <= n; i += 16) {
		__m512 wv[2];
		for (unsigned k = 0; k < NW; k++)
			wv[k] = load16w(w[k], i, type);
		for (unsigned r = 0; r < R; r++) {
			__m512 xv = _mm512_loadu_ps(x + r * ldx + i);
			for (unsigned k = 0; k < NW; k++)
				acc[k][r][0] = _mm512_fmadd_ps(wv[k], xv, acc[k][r][0]);
		}
	}
	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++) {
			__m512 s = acc[k][r][0];
			for (unsigned u = 1; u < U; u++)
				s = _mm512_add_ps(s, acc[k][r][u]);
			out[k * 4 + r] = _mm512_reduce_add_ps(s);
		}
	for (; i < n; i++)
		for (unsigned k = 0; k < NW; k++) {
			float wv = load1w(w[k], i, type);
			for (unsigned r = 0; r < R; r++)
				out[k * 4 + r] += wv * x[r * ldx + i];
		}
}

AVX512_INLINE __m512 q8_load16(const uint8_t *q)
{
	return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q)));
}

AVX512_INLINE void q8_block512(const uint8_t *b, const float *x, size_t ldx, unsigned R,
			       __m512 *acc)
{
	uint16_t dh;
	__m512 d, w0, w1;

	memcpy(&dh, b, sizeof(dh));
	d = _mm512_set1_ps(_cvtsh_ss(dh));
	w0 = q8_load16(b + 2);
	w1 = q8_load16(b + 18);
	for (unsigned r = 0; r < R; r++) {
		const float *xr = x + r * ldx;
		__m512 t = _mm512_mul_ps(w0, _mm512_loadu_ps(xr));

		t = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xr + 16), t);
		acc[r] = _mm512_fmadd_ps(d, t, acc[r]);
	}
}

AVX512_INLINE void dots512_q8_body(const void *w, const float *x, size_t ldx, unsigned n,
				   unsigned R, float *out)
{
	const uint8_t *b = w;
	__m512 a0[4], a1[4];
	unsigned nb = n / QK, j = 0;

	for (unsigned r = 0; r < R; r++)
		a0[r] = a1[r] = _mm512_setzero_ps();
	for (; j + 2 <= nb; j += 2, b += 2 * Q8_SZ) {
		q8_block512(b, x + j * QK, ldx, R, a0);
		q8_block512(b + Q8_SZ, x + (j + 1) * QK, ldx, R, a1);
	}
	if (j < nb)
		q8_block512(b, x + j * QK, ldx, R, a0);
	for (unsigned r = 0; r < R; r++)
		out[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0[r], a1[r]));
}

DEF_DOTS(AVX512, dots_f16_avx512, dots512_body(w, wst, x, ldx, n, NN, RR, W_F16, out))
DEF_DOTS(AVX512, dots_bf16_avx512, dots512_body(w, wst, x, ldx, n, NN, RR, W_BF16, out))
DEF_DOTS(AVX512, dots_q8_avx512, for (unsigned k = 0; k < NN; k++)
	 dots512_q8_body((const char *)w + k * wst, x, ldx, n, RR, out + 4 * k))
#endif

/* The portable dot products: the weight row a chunk at a time into f32,
 * accumulated in double. Slower, but only for cpus without AVX2. */
static void dots_scalar(uint32_t type, const void *w, size_t wst, unsigned NW, const float *x,
			size_t ldx, unsigned n, unsigned R, float *out)
{
	float buf[256];

	for (unsigned k = 0; k < NW; k++) {
		const void *wk = (const char *)w + k * wst;
		double acc[4] = { 0 };

		for (unsigned i0 = 0; i0 < n; i0 += 256) {
			unsigned m = n - i0 < 256 ? n - i0 : 256;

			row_to_f32(buf, type, wk, i0, m, 0);
			for (unsigned r = 0; r < R; r++) {
				const float *xr = x + r * ldx + i0;
				double s = 0;
				for (unsigned i = 0; i < m; i++)
					s += (double)buf[i] * xr[i];
				acc[r] += s;
			}
		}
		for (unsigned r = 0; r < R; r++)
			out[k * 4 + r] = (float)acc[r];
	}
}

/* ---- kvt_matmul ---- */

struct mm_job {
	float		*y;		/* (rows, n_out) */
	const float	*x;		/* (rows, n_in) */
	unsigned	 rows;
	const struct kvt_mat *w;
	size_t		 rb;		/* bytes per weight row */
	unsigned	 blk;		/* weight rows per task */
	int		 simd;
	dots_fn		 dots;		/* NULL: dots_dq_avx2 if dq, else dots_scalar */
	kvt_dequant_block_fn dq;	/* block types but Q8_0, with AVX2 */
	fdots_fn	 fdots;		/* fused q4_k, q6_k: before dots and dq */
	kvt_qdots_fn	 qdots;		/* integer dots on x rounded to 8 bits: before all */
	const float	*xs;		/* (rows, n_in / 32): sums of x, for q4_k */
	const struct kvt_xq *xq;	/* x rounded, for qdots */
	const struct kvt_xb *xb;	/* x as bf16 tiles, for AMX */
	float		*scratch;	/* (threads, blk, n_in): converted weight rows */
};

static void mm_small_task(void *arg, unsigned task, unsigned thread)
{
	const struct mm_job *j = arg;
	const struct kvt_mat *w = j->w;
	unsigned o0 = task * j->blk, o1 = o0 + j->blk < w->n_out ? o0 + j->blk : w->n_out;

	/* Rows o and o + H go together, H = half the task's rows, then
	 * the last row alone if the count is odd: two streams each read
	 * straight on, which the hardware prefetchers follow, where rows o
	 * and o + 1 a block from each in turn stepped back and forth
	 * within a few lines and left them behind (docs/benchmarks.md). */
	const unsigned H = (o1 - o0) / 2;
	const size_t wst = (size_t)H * j->rb;

	for (unsigned i = 0; i < H + (o1 - o0) % 2; i++) {
		const unsigned o = o0 + (i < H ? i : 2 * H);
		const void *wr = (const char *)w->data + (size_t)o * j->rb;
		const unsigned NW = i < H ? 2 : 1;

		for (unsigned r = 0; r < j->rows; r += 4) {
			unsigned R = j->rows - r < 4 ? j->rows - r : 4;
			const float *xr = j->x + (size_t)r * w->n_in;
			float d[8];

			if (j->qdots)
				j->qdots(wr, wst, NW, j->xq, r, R, d);
			else if (j->fdots)
				j->fdots(wr, wst, NW, xr, w->n_in, j->xs + (size_t)r * (w->n_in / 32),
					 w->n_in / 32, w->n_in, R, d);
			else if (j->dots)
				j->dots(wr, wst, NW, xr, w->n_in, w->n_in, R, d);
#ifdef KVT_X86
			else if (j->dq)
				dots_dq_avx2(j->dq, kvt_qtype(w->type), wr, wst, NW, xr, w->n_in,
					     w->n_in, R, d);
#endif
			else
				dots_scalar(w->type, wr, wst, NW, xr, w->n_in, w->n_in, R, d);
			for (unsigned k = 0; k < NW; k++)
				for (unsigned q = 0; q < R; q++)
					j->y[(size_t)(r + q) * w->n_out + o + k * H] = d[k * 4 + q];
		}
	}
}

/* One block of blk weight rows: converted into this thread's scratch
 * (f32 weights are used in place), then y[:, block] = x * block^T by a
 * single-threaded sgemm. */
static void mm_gemm_task(void *arg, unsigned task, unsigned thread)
{
	const struct mm_job *j = arg;
	const struct kvt_mat *w = j->w;
	unsigned o0 = task * j->blk, nb = o0 + j->blk < w->n_out ? j->blk : w->n_out - o0;
	const float *b;

	if (w->type == W_F32) {
		b = (const float *)w->data + (size_t)o0 * w->n_in;
	} else {
		float *s = j->scratch + (size_t)thread * j->blk * w->n_in;
		for (unsigned k = 0; k < nb; k++)
			row_to_f32(s + (size_t)k * w->n_in, w->type,
				   (const char *)w->data + (size_t)(o0 + k) * j->rb, 0, w->n_in, j->simd);
		b = s;
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->rows, (int)nb, (int)w->n_in,
		    1.0f, j->x, (int)w->n_in, b, (int)w->n_in, 0.0f, j->y + o0, (int)w->n_out);
}

/* AMX: 32 weight rows dequantized into this thread's scratch (one row of
 * f32, then the rows as bf16 tiles), multiplied against every row of x. */
#define AMX_ROWS	32

static size_t amx_scratch(unsigned n_in)
{
	return ((size_t)n_in * sizeof(float) + kvt_amx_wbytes(n_in) + 63) & ~(size_t)63;
}

static void mm_amx_task(void *arg, unsigned task, unsigned thread)
{
	const struct mm_job *j = arg;
	const struct kvt_mat *w = j->w;
	unsigned o0 = task * AMX_ROWS, n = w->n_out - o0 < AMX_ROWS ? w->n_out - o0 : AMX_ROWS;
	char *s = (char *)j->scratch + (size_t)thread * amx_scratch(w->n_in);
	uint16_t *wb = (uint16_t *)s;
	float *f = (float *)(s + kvt_amx_wbytes(w->n_in));

	if (n < AMX_ROWS)
		memset(wb, 0, kvt_amx_wbytes(w->n_in));
	for (unsigned k = 0; k < n; k++) {
		row_to_f32(f, w->type, (const char *)w->data + (size_t)(o0 + k) * j->rb, 0, w->n_in,
			   j->simd);
		kvt_amx_pack(wb, k, f, w->n_in);
	}
	kvt_amx_rows(j->y + o0, w->n_out, wb, n, j->xb);
}

/* The products that take AMX: x rounded already (the block types, with
 * their integer dots on) and rows enough for sgemm otherwise. */
static int amx_takes(const struct kvt_mat *w)
{
	return kvt_qdots(w->type) && w->n_in % 32 == 0 && kvt_amx();
}

struct xb_job {
	struct kvt_xb	*xb;
	const float	*x;
};

static void xb_task(void *arg, unsigned task, unsigned thread)
{
	const struct xb_job *j = arg;

	kvt_xb_fill(j->xb, j->x, task);
}

/* x as bf16 tiles, a block of 16 tokens a task. 0 or -ENOMEM. */
static int xb_make(struct kvt_pool *pool, struct kvt_xb *xb, const float *x, unsigned rows,
		   unsigned n_in)
{
	struct xb_job j = { xb, x };
	int ret = kvt_xb_alloc(xb, rows, n_in);

	if (!ret)
		kvt_pool_run(pool, xb_task, &j, xb->blocks);
	return ret;
}

/* y = x . w^T on tiles, x already as xb. 0 or -ENOMEM. */
static int mm_amx(struct kvt_pool *pool, float *y, const struct kvt_mat *w, const struct kvt_xb *xb)
{
	unsigned nt = kvt_pool_threads(pool);
	struct mm_job j = { .y = y, .w = w, .rb = row_bytes(w->type, w->n_in),
			    .simd = kvt_cpu_simd(), .xb = xb };

	if (!(j.scratch = aligned_alloc(64, nt * amx_scratch(w->n_in))))
		return -ENOMEM;
	kvt_pool_run(pool, mm_amx_task, &j, (w->n_out + AMX_ROWS - 1) / AMX_ROWS);
	free(j.scratch);
	return 0;
}

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_one_thread(void)
{
	openblas_set_num_threads(1);
}

/* OpenBLAS picks its kernels once, when it is loaded, from a table of
 * processors it knew when it was built: Debian 12's 0.3.21 takes recent
 * Xeons for a Pentium 4 ("Prescott") and runs SSE3 kernels on them. The
 * core these cpu features deserve, from cpuid as kvt_cpu_simd() reads it:
 * AVX-512 with the subsets OpenBLAS's SkylakeX kernels use, or AVX2 with
 * FMA (Haswell's kernels, which its Zen target uses too). */
static const char *blas_core_for_cpu(void)
{
#ifdef KVT_X86
	unsigned a, b, c, d;
	int simd = simd_probe();

	if (simd >= 2 && __get_cpuid_count(7, 0, &a, &b, &c, &d) &&
	    (b & bit_AVX512CD) && (b & bit_AVX512BW) && (b & bit_AVX512DQ) && (b & bit_AVX512VL))
		return "SkylakeX";
	if (simd >= 1)
		return "Haswell";
#endif
	return NULL;
}

const char *kvt_blas_core(void)
{
	return openblas_get_corename();
}

const char *kvt_blas_core_wanted(void)
{
	static const char *const avx512[] = { "skylakex", "cooperlake", "sapphirerapids" };
	static const char *const avx2[] = { "haswell", "zen", "skylakex", "cooperlake",
					    "sapphirerapids" };
	const char *want = blas_core_for_cpu(), *have = openblas_get_corename();
	const char *const *ok = want && !strcmp(want, "SkylakeX") ? avx512 : avx2;
	unsigned n = ok == avx512 ? 3 : 5;

	if (!want || !have)
		return NULL;
	for (unsigned i = 0; i < n; i++)
		if (!strcasecmp(have, ok[i]))
			return NULL;
	return want;
}

/* Rows few enough for the dot products rather than sgemm. */
static int small_rows(const struct kvt_mat *w, unsigned rows)
{
	return rows < (w->type == W_F32 ? SMALL_ROWS_F32 : SMALL_ROWS_CONV);
}

/* The dot-product kernel for j's weights on f32 activations. */
static void pick_dots(struct mm_job *j)
{
	const struct kvt_mat *w = j->w;

#ifdef KVT_X86
	/* F32 stays on AVX2: with nothing to convert it is bound by memory
	 * either way, and 64-byte loads, which straddle two lines unless
	 * the data is 64-byte aligned (GGUF promises 32), measured 5-10%
	 * slower. */
	if (j->simd >= 2 && (w->type == KVT_W_Q4_K || w->type == KVT_W_Q6_K ||
			     w->type == KVT_W_Q4_0)) {
		j->fdots = w->type == KVT_W_Q4_K ? fdots_q4k_avx512 :
			   w->type == KVT_W_Q6_K ? fdots_q6k_avx512 : fdots_q40_avx512;
	} else if (j->simd && (w->type == KVT_W_Q4_K || w->type == KVT_W_Q6_K ||
			       w->type == KVT_W_Q4_0)) {
		j->fdots = w->type == KVT_W_Q4_K ? fdots_q4k_avx2 :
			   w->type == KVT_W_Q6_K ? fdots_q6k_avx2 : fdots_q40_avx2;
	} else if (w->type != W_F32 && w->type != W_F16 && w->type != W_BF16 && w->type != W_Q8_0) {
		if (j->simd)
			j->dq = kvt_dequant_block(w->type, j->simd);
	} else if (j->simd >= 2 && w->type != W_F32) {
		j->dots = w->type == W_F16 ? dots_f16_avx512 : w->type == W_BF16 ?
			  dots_bf16_avx512 : dots_q8_avx512;
	} else if (j->simd) {
		j->dots = w->type == W_F32 ? dots_f32_avx2 : w->type == W_F16 ? dots_f16_avx2 :
			  w->type == W_BF16 ? dots_bf16_avx2 : dots_q8_avx2;
	}
#endif
}

/* Set up j for the dot-product path; returns its task count. Weights
 * with an integer kernel take it (qdots.h) unless it is turned off. */
static unsigned mm_small_setup(struct mm_job *j, unsigned nt)
{
	const struct kvt_mat *w = j->w;
	unsigned tasks;

	if (!(j->qdots = kvt_qdots(w->type)))
		pick_dots(j);
	/* One task per thread, each a whole number of cache lines of y and
	 * worth a task hand-out. More, smaller tasks balance the threads
	 * better but cost more than they save: each starts new streams,
	 * and the threads' reads interleave. Decode's products from memory,
	 * 8 layers of a 1024-wide q4_k model, two threads: 43-45 GB/s at
	 * four tasks a thread, 47 at two, 51-52 at one (docs/benchmarks.md). */
	tasks = nt;
	if ((size_t)w->n_out * j->rb / SMALL_TASK_MIN < tasks)
		tasks = (unsigned)((size_t)w->n_out * j->rb / SMALL_TASK_MIN) + 1;
	j->blk = (w->n_out + tasks - 1) / tasks;
	j->blk = (j->blk + SMALL_BLK - 1) / SMALL_BLK * SMALL_BLK;
	return (w->n_out + j->blk - 1) / j->blk;
}

/* Several products of one x: the jobs' tasks numbered one after another. */
struct mm_multi {
	struct mm_job j[KVT_MATMUL_MAX];
	unsigned first[KVT_MATMUL_MAX + 1];	/* first task of each job, then the total */
	unsigned n;
};

static void mm_multi_task(void *arg, unsigned task, unsigned thread)
{
	const struct mm_multi *mm = arg;
	unsigned k = 0;

	while (task >= mm->first[k + 1])
		k++;
	mm_small_task((void *)&mm->j[k], task - mm->first[k], thread);
}

/* What the jobs' kernels take besides x, made once for all of them: the
 * sums of x over each 32 values (q4_k's fused mins) and x rounded to 8
 * bits in blocks of 32 and of 256 (qdots.h). */
struct x_prep {
	float		*xs;		/* (rows, n_in / 32) or NULL */
	struct kvt_xq	 xq[2];		/* blocks of 32, of 256; unused ones zeroed */
};

static void prep_free(struct x_prep *p)
{
	free(p->xs);
	kvt_xq_free(&p->xq[0]);
	kvt_xq_free(&p->xq[1]);
}

/* 0 or -ENOMEM (nothing left allocated then). */
static int prep_x(struct x_prep *p, struct mm_job *j, unsigned n, const float *x, unsigned rows,
		  unsigned n_in)
{
	unsigned k, g, r, ng = n_in / 32;
	int ret = 0;

	memset(p, 0, sizeof(*p));
	for (k = 0; k < n && !ret; k++) {
		unsigned blk = j[k].qdots ? kvt_xq_blk(j[k].w->type) : 0;
		struct kvt_xq *xq = &p->xq[blk == 256];

		if (!blk)
			continue;
		if (!xq->q)
			ret = kvt_xq_make(xq, x, rows, n_in, blk);
		j[k].xq = xq;
	}
	for (k = 0; k < n && j[k].fdots != fdots_q4k_avx2 && j[k].fdots != fdots_q4k_avx512; k++)
		;
	if (ret || k == n)
		goto out;
	if (!(p->xs = malloc((size_t)rows * ng * sizeof(float)))) {
		ret = -ENOMEM;
		goto out;
	}
	for (r = 0; r < rows; r++)
		for (g = 0; g < ng; g++) {
			const float *v = x + (size_t)r * n_in + 32 * g;
			float s = 0;
			for (unsigned i = 0; i < 32; i++)
				s += v[i];
			p->xs[(size_t)r * ng + g] = s;
		}
	for (k = 0; k < n; k++)
		j[k].xs = p->xs;
out:
	if (ret)
		prep_free(p);
	return ret;
}

int kvt_matmul_n(struct kvt_pool *pool, unsigned n, float *const *y, const float *x,
		 unsigned rows, const struct kvt_mat *const *w)
{
	struct x_prep prep;
	struct mm_multi mm;
	unsigned nt = kvt_pool_threads(pool), k;
	int ret, fuse = n <= KVT_MATMUL_MAX && rows > 0;

	for (k = 0; fuse && k < n; k++)
		fuse = small_rows(w[k], rows) && w[k]->n_in && w[k]->n_out &&
		       row_bytes(w[k]->type, w[k]->n_in);
	if (!fuse && rows >= SMALL_ROWS_CONV) {
		struct kvt_xb xb;

		for (k = 0; k < n && amx_takes(w[k]) && w[k]->n_in == w[0]->n_in && w[k]->n_out; k++)
			;
		if (n > 1 && k == n) {
			if ((ret = xb_make(pool, &xb, x, rows, w[0]->n_in)))
				return ret;
			for (k = 0; k < n && !ret; k++)
				ret = mm_amx(pool, y[k], w[k], &xb);
			kvt_xb_free(&xb);
			return ret;
		}
	}
	if (!fuse) {
		for (k = 0; k < n; k++)
			if ((ret = kvt_matmul(pool, y[k], x, rows, w[k])))
				return ret;
		return 0;
	}
	mm.n = n;
	mm.first[0] = 0;
	for (k = 0; k < n; k++) {
		mm.j[k] = (struct mm_job){ .y = y[k], .x = x, .rows = rows, .w = w[k],
					   .rb = row_bytes(w[k]->type, w[k]->n_in),
					   .simd = kvt_cpu_simd() };
		mm.first[k + 1] = mm.first[k] + mm_small_setup(&mm.j[k], nt);
	}
	if ((ret = prep_x(&prep, mm.j, n, x, rows, w[0]->n_in)))
		return ret;
	kvt_pool_run(pool, mm_multi_task, &mm, mm.first[n]);
	prep_free(&prep);
	return 0;
}

int kvt_matmul(struct kvt_pool *pool, float *y, const float *x, unsigned rows,
	       const struct kvt_mat *w)
{
	struct mm_job j = { .y = y, .x = x, .rows = rows, .w = w,
			    .rb = row_bytes(w->type, w->n_in), .simd = kvt_cpu_simd() };
	unsigned nt = kvt_pool_threads(pool);

	if (!j.rb && w->n_in)
		return -EINVAL;
	if (!rows || !w->n_out)
		return 0;
	if (!w->n_in) {
		memset(y, 0, (size_t)rows * w->n_out * sizeof(float));
		return 0;
	}
	if (small_rows(w, rows)) {
		unsigned tasks = mm_small_setup(&j, nt);
		struct x_prep prep;
		int r;

		if ((r = prep_x(&prep, &j, 1, x, rows, w->n_in)))
			return r;
		kvt_pool_run(pool, mm_small_task, &j, tasks);
		prep_free(&prep);
		return 0;
	}
	if (amx_takes(w)) {
		struct kvt_xb xb;
		int r;

		if ((r = xb_make(pool, &xb, x, rows, w->n_in)))
			return r;
		r = mm_amx(pool, y, w, &xb);
		kvt_xb_free(&xb);
		return r;
	}
	pthread_once(&blas_once, blas_one_thread);
	j.blk = (w->n_out + 2 * nt - 1) / (2 * nt);
	j.blk = (j.blk + SMALL_BLK - 1) / SMALL_BLK * SMALL_BLK;
	if (j.blk > GEMM_BLK)
		j.blk = GEMM_BLK;
	while (w->type != W_F32 && j.blk > SMALL_BLK && (size_t)j.blk * w->n_in > GEMM_SCRATCH)
		j.blk -= SMALL_BLK;
	if (w->type != W_F32) {
		j.scratch = malloc((size_t)nt * j.blk * w->n_in * sizeof(float));
		if (!j.scratch)
			return -ENOMEM;
	}
	kvt_pool_run(pool, mm_gemm_task, &j, (w->n_out + j.blk - 1) / j.blk);
	free(j.scratch);
	return 0;
}

/* ---- attention ---- */

static int shape_ok(const struct kvt_attn_shape *sh)
{
	return sh->rows && sh->n_head && sh->n_kv_heads && sh->head_dim &&
	       sh->n_head % sh->n_kv_heads == 0 &&
	       (sh->kv_type == KVT_KV_F16 || sh->kv_type == KVT_KV_F32 ||
		(kvt_kv_block(sh->kv_type) && sh->head_dim % QK == 0));
}

int kvt_attn_acc_init(struct kvt_attn_acc *a, const struct kvt_attn_shape *sh)
{
	size_t nh = (size_t)sh->rows * sh->n_head;

	memset(a, 0, sizeof(*a));
	if (!shape_ok(sh))
		return -EINVAL;
	if (nh > SIZE_MAX / sizeof(float) / (2 + (size_t)sh->head_dim))
		return -ENOMEM;
	/* One allocation: m, l, o. */
	a->m = malloc(nh * (2 + (size_t)sh->head_dim) * sizeof(float));
	if (!a->m)
		return -ENOMEM;
	a->l = a->m + nh;
	a->o = a->l + nh;
	a->sh = *sh;
	kvt_attn_acc_reset(a);
	return 0;
}

void kvt_attn_acc_reset(struct kvt_attn_acc *a)
{
	size_t nh = (size_t)a->sh.rows * a->sh.n_head;

	for (size_t i = 0; i < nh; i++) {
		a->m[i] = -INFINITY;
		a->l[i] = 0;
	}
	memset(a->o, 0, nh * a->sh.head_dim * sizeof(float));
	a->pn = 0;
}

void kvt_attn_acc_free(struct kvt_attn_acc *a)
{
	free(a->m);
	free(a->s);
	free(a->pk);
	memset(a, 0, sizeof(*a));
}

/* Tokens of a page of ntok tokens at pos0 that a query at qpos sees. */
static inline unsigned visible(uint32_t qpos, uint32_t pos0, unsigned ntok)
{
	if (qpos < pos0)
		return 0;
	return qpos - pos0 >= ntok ? ntok : qpos - pos0 + 1;
}

/*
 * A page is folded in four query vectors at a time (a "group": up to four
 * (row, head) pairs that share one KV head), so that each K and V row read
 * serves four of them:
 *
 *   1. S (4, T) = scale * q . K_t for t < T, T the most any of the four
 *      sees;
 *   2. per vector, the online softmax step: m' = max(m, max S), c =
 *      e^(m - m'), S = e^(S - m') where seen and 0 beyond, l = l c + sum S;
 *   3. o = o c + sum_t S_t V_t.
 *
 * A group of fewer than four fills the rest with dummies: the first query
 * again, writing into a dummy o, with nothing seen.
 *
 * K and V are read in place (f16 converted in registers) when a KV head
 * has at most eight groups, as in decode: the first group brings the
 * page's rows of that head into L1 and the others read them there; two
 * groups that both fuse (fused_body) go through it together. With
 * more (prefill) the rows are first gathered into contiguous f32 scratch,
 * and gathered pages are folded together (attn_pend): in place, each f16
 * value would be converted once per group, and the rows, n_kv_heads *
 * head_dim apart (4 KiB for 8 heads of 128 floats), would fight over the
 * same L1 sets. The gather costs a page's worth of conversions a KV head
 * whatever the groups: in decode with eight query heads to a KV head it
 * made attention 4 to 7 times slower than in place, and with 32 (MQA) 2
 * times (kvt-bench attn, docs/benchmarks.md). The portable kernels
 * always gather.
 */
#define ATTN_INPLACE_NQ	32	/* query vectors a KV head, at most, read in place */
/* Step 3 runs over at most this many tokens per pass over the dims: a
 * pass touches one line of each token's V row, and rows a power of two
 * apart (in place, n_kv_heads * head_dim apart) share a few L1 sets. It
 * costs nothing measurable with K and V in cache; reading them from
 * memory it was up to 3x faster in some runs, but this machine's memory
 * timing varies too much between runs to be sure. */
#define PV_TOK	16

struct attn_group {
	const float	*q[4];		/* (head_dim) each */
	float		*o[4];		/* (head_dim) each */
	float		*m[4], *l[4];
	float		*pm[4], *pl[4];	/* the page's own partial, or NULL */
	unsigned	 nv[4];		/* tokens seen */
	unsigned	 pad;		/* bit s: slot s is a filler */
	float		 c[4];		/* rescale of the old o */
};

struct attn_page {
	const void	*k, *v;		/* token t's K row: k + t * kst elements */
	size_t		 kst, vst;
	int		 f16;		/* k and v hold f16, else f32 */
	int		 q;		/* or q8_0 or q4_0 blocks (its kvt_kv_type), else 0 */
	float		*S;		/* (4, sst) scores, then probabilities */
	size_t		 sst;
	unsigned	 hd;
	float		 scale;
	const char	*pf;		/* the next page's share for this KV head, */
	size_t		 pfn;		/* pfn bytes: kernels that spread it ask */
	unsigned	 pft;		/* for it over pft tokens (pf_part) */
};

/* The portable kernels take f32 K and V only. */
static void scores4_scalar(const struct attn_page *pg, const struct attn_group *gr, unsigned T)
{
	const float *k = pg->k;

	for (unsigned s = 0; s < 4; s++)
		for (unsigned t = 0; t < T; t++) {
			float acc = 0;
			for (unsigned d = 0; d < pg->hd; d++)
				acc += gr->q[s][d] * k[t * pg->kst + d];
			pg->S[s * pg->sst + t] = acc * pg->scale;
		}
}

static void pv4_scalar(const struct attn_page *pg, const struct attn_group *gr, unsigned t0,
		       unsigned T)
{
	const float *v = pg->v;

	for (unsigned s = 0; s < 4; s++)
		for (unsigned d = 0; d < pg->hd; d++) {
			float acc = gr->o[s][d] * gr->c[s];
			for (unsigned t = t0; t < T; t++)
				acc += pg->S[s * pg->sst + t] * v[t * pg->vst + d];
			gr->o[s][d] = acc;
		}
}

#ifdef KVT_X86
AVX2_INLINE const void *kv_at(const void *p, size_t i, int f16)
{
	return f16 ? (const void *)((const uint16_t *)p + i) : (const void *)((const float *)p + i);
}

AVX2_INLINE __m256 kv_load8(const void *p, int f16)
{
	if (f16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
	return _mm256_loadu_ps((const float *)p);
}

AVX2_INLINE float kv_load1(const void *p, size_t i, int f16)
{
	return f16 ? _cvtsh_ss(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* Step i of n of a kernel that asks for half h (0 or 1) of the next
 * page's share, the rest of it a step at a time. */
AVX2_INLINE void pf_part(const struct attn_page *pg, unsigned h, unsigned i, unsigned n)
{
	const unsigned lines = (unsigned)(pg->pfn / 64), h0 = h * lines / 2;
	const unsigned h1 = (h + 1) * lines / 2, step = (h1 - h0 + n - 1) / n;
	unsigned a = h0 + i * step, b = a + step < h1 ? a + step : h1;

	for (; a < b; a++)
		_mm_prefetch(pg->pf + 64 * (size_t)a, _MM_HINT_T0);
}

/* Step 1 two tokens at a time: eight accumulators, reduced together. */
AVX2_INLINE void scores4_avx2_body(const struct attn_page *pg, const struct attn_group *gr,
				   unsigned T, int f16)
{
	const float *q0 = gr->q[0], *q1 = gr->q[1], *q2 = gr->q[2], *q3 = gr->q[3];
	unsigned hd = pg->hd;

	for (unsigned t = 0; t < T; t += 2) {
		const void *k0 = kv_at(pg->k, t * pg->kst, f16);
		const void *k1 = t + 1 < T ? kv_at(k0, pg->kst, f16) : k0;
		__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
		__m256 a4 = a0, a5 = a0, a6 = a0, a7 = a0;
		float r[8];
		unsigned d = 0;

		for (; d + 8 <= hd; d += 8) {
			__m256 x0 = kv_load8(kv_at(k0, d, f16), f16), x1 = kv_load8(kv_at(k1, d, f16), f16);
			__m256 y0 = _mm256_loadu_ps(q0 + d), y1 = _mm256_loadu_ps(q1 + d);
			__m256 y2 = _mm256_loadu_ps(q2 + d), y3 = _mm256_loadu_ps(q3 + d);

			a0 = _mm256_fmadd_ps(y0, x0, a0);
			a1 = _mm256_fmadd_ps(y1, x0, a1);
			a2 = _mm256_fmadd_ps(y2, x0, a2);
			a3 = _mm256_fmadd_ps(y3, x0, a3);
			a4 = _mm256_fmadd_ps(y0, x1, a4);
			a5 = _mm256_fmadd_ps(y1, x1, a5);
			a6 = _mm256_fmadd_ps(y2, x1, a6);
			a7 = _mm256_fmadd_ps(y3, x1, a7);
		}
		_mm256_storeu_ps(r, hsum8x8(a0, a1, a2, a3, a4, a5, a6, a7));
		for (; d < hd; d++)
			for (unsigned s = 0; s < 4; s++) {
				r[s] += gr->q[s][d] * kv_load1(k0, d, f16);
				r[4 + s] += gr->q[s][d] * kv_load1(k1, d, f16);
			}
		for (unsigned s = 0; s < 4; s++) {
			pg->S[s * pg->sst + t] = r[s] * pg->scale;
			if (t + 1 < T)
				pg->S[s * pg->sst + t + 1] = r[4 + s] * pg->scale;
		}
	}
}

/* Step 3 for tokens t0..T-1, sixteen dims at a time: eight accumulators. */
AVX2_INLINE void pv4_avx2_body(const struct attn_page *pg, const struct attn_group *gr,
			       unsigned t0, unsigned T, int f16)
{
	const float *S0 = pg->S, *S1 = S0 + pg->sst, *S2 = S1 + pg->sst, *S3 = S2 + pg->sst;
	__m256 c0 = _mm256_set1_ps(gr->c[0]), c1 = _mm256_set1_ps(gr->c[1]);
	__m256 c2 = _mm256_set1_ps(gr->c[2]), c3 = _mm256_set1_ps(gr->c[3]);
	float *const *o = gr->o;
	unsigned hd = pg->hd, d = 0;

	for (; d + 16 <= hd; d += 16) {
		__m256 o00 = _mm256_mul_ps(_mm256_loadu_ps(o[0] + d), c0);
		__m256 o01 = _mm256_mul_ps(_mm256_loadu_ps(o[0] + d + 8), c0);
		__m256 o10 = _mm256_mul_ps(_mm256_loadu_ps(o[1] + d), c1);
		__m256 o11 = _mm256_mul_ps(_mm256_loadu_ps(o[1] + d + 8), c1);
		__m256 o20 = _mm256_mul_ps(_mm256_loadu_ps(o[2] + d), c2);
		__m256 o21 = _mm256_mul_ps(_mm256_loadu_ps(o[2] + d + 8), c2);
		__m256 o30 = _mm256_mul_ps(_mm256_loadu_ps(o[3] + d), c3);
		__m256 o31 = _mm256_mul_ps(_mm256_loadu_ps(o[3] + d + 8), c3);

		for (unsigned t = t0; t < T; t++) {
			const void *vr = kv_at(pg->v, t * pg->vst + d, f16);
			__m256 v0 = kv_load8(vr, f16), v1 = kv_load8(kv_at(vr, 8, f16), f16);
			__m256 p;

			p = _mm256_broadcast_ss(S0 + t);
			o00 = _mm256_fmadd_ps(p, v0, o00);
			o01 = _mm256_fmadd_ps(p, v1, o01);
			p = _mm256_broadcast_ss(S1 + t);
			o10 = _mm256_fmadd_ps(p, v0, o10);
			o11 = _mm256_fmadd_ps(p, v1, o11);
			p = _mm256_broadcast_ss(S2 + t);
			o20 = _mm256_fmadd_ps(p, v0, o20);
			o21 = _mm256_fmadd_ps(p, v1, o21);
			p = _mm256_broadcast_ss(S3 + t);
			o30 = _mm256_fmadd_ps(p, v0, o30);
			o31 = _mm256_fmadd_ps(p, v1, o31);
		}
		_mm256_storeu_ps(o[3] + d, o30);
		_mm256_storeu_ps(o[3] + d + 8, o31);
		_mm256_storeu_ps(o[2] + d, o20);
		_mm256_storeu_ps(o[2] + d + 8, o21);
		_mm256_storeu_ps(o[1] + d, o10);
		_mm256_storeu_ps(o[1] + d + 8, o11);
		_mm256_storeu_ps(o[0] + d, o00);
		_mm256_storeu_ps(o[0] + d + 8, o01);
	}
	for (; d + 8 <= hd; d += 8) {
		__m256 o0 = _mm256_mul_ps(_mm256_loadu_ps(o[0] + d), c0);
		__m256 o1 = _mm256_mul_ps(_mm256_loadu_ps(o[1] + d), c1);
		__m256 o2 = _mm256_mul_ps(_mm256_loadu_ps(o[2] + d), c2);
		__m256 o3 = _mm256_mul_ps(_mm256_loadu_ps(o[3] + d), c3);

		for (unsigned t = t0; t < T; t++) {
			__m256 v0 = kv_load8(kv_at(pg->v, t * pg->vst + d, f16), f16);
			o0 = _mm256_fmadd_ps(_mm256_broadcast_ss(S0 + t), v0, o0);
			o1 = _mm256_fmadd_ps(_mm256_broadcast_ss(S1 + t), v0, o1);
			o2 = _mm256_fmadd_ps(_mm256_broadcast_ss(S2 + t), v0, o2);
			o3 = _mm256_fmadd_ps(_mm256_broadcast_ss(S3 + t), v0, o3);
		}
		_mm256_storeu_ps(o[3] + d, o3);
		_mm256_storeu_ps(o[2] + d, o2);
		_mm256_storeu_ps(o[1] + d, o1);
		_mm256_storeu_ps(o[0] + d, o0);
	}
	for (; d < hd; d++)
		for (unsigned s = 4; s-- > 0;) {
			float acc = o[s][d] * gr->c[s];
			for (unsigned t = t0; t < T; t++)
				acc += pg->S[s * pg->sst + t] * kv_load1(pg->v, t * pg->vst + d, f16);
			o[s][d] = acc;
		}
}

AVX2 static void scores4_avx2(const struct attn_page *pg, const struct attn_group *gr, unsigned T)
{
	if (pg->f16)
		scores4_avx2_body(pg, gr, T, 1);
	else
		scores4_avx2_body(pg, gr, T, 0);
}

AVX2 static void pv4_avx2(const struct attn_page *pg, const struct attn_group *gr, unsigned t0,
		       unsigned T)
{
	if (pg->f16)
		pv4_avx2_body(pg, gr, t0, T, 1);
	else
		pv4_avx2_body(pg, gr, t0, T, 0);
}

/*
 * One live query in a group (decode without GQA, or the last group of a
 * row): the four-wide kernels would spend three quarters of their work on
 * dummies. Step 1 eight tokens at a time, one accumulator each, reduced
 * together; step 3 with the output's dims in registers, one broadcast per
 * token. Tokens past T read the first row of their block again; their
 * scores are dropped.
 */
AVX2_INLINE void scores1_avx2_body(const struct attn_page *pg, const struct attn_group *gr,
				   unsigned T, int f16)
{
	const float *q = gr->q[0];
	unsigned hd = pg->hd;

	for (unsigned t = 0; t < T; t += 8) {
		const void *k[8];
		float r[8];
		unsigned d = 0;

		for (unsigned j = 0; j < 8; j++)
			k[j] = kv_at(pg->k, (size_t)(t + j < T ? t + j : t) * pg->kst, f16);
		__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
		__m256 a4 = a0, a5 = a0, a6 = a0, a7 = a0;

		for (; d + 8 <= hd; d += 8) {
			__m256 y = _mm256_loadu_ps(q + d);

			a0 = _mm256_fmadd_ps(y, kv_load8(kv_at(k[0], d, f16), f16), a0);
			a1 = _mm256_fmadd_ps(y, kv_load8(kv_at(k[1], d, f16), f16), a1);
			a2 = _mm256_fmadd_ps(y, kv_load8(kv_at(k[2], d, f16), f16), a2);
			a3 = _mm256_fmadd_ps(y, kv_load8(kv_at(k[3], d, f16), f16), a3);
			a4 = _mm256_fmadd_ps(y, kv_load8(kv_at(k[4], d, f16), f16), a4);
			a5 = _mm256_fmadd_ps(y, kv_load8(kv_at(k[5], d, f16), f16), a5);
			a6 = _mm256_fmadd_ps(y, kv_load8(kv_at(k[6], d, f16), f16), a6);
			a7 = _mm256_fmadd_ps(y, kv_load8(kv_at(k[7], d, f16), f16), a7);
		}
		_mm256_storeu_ps(r, hsum8x8(a0, a1, a2, a3, a4, a5, a6, a7));
		for (; d < hd; d++)
			for (unsigned j = 0; j < 8; j++)
				r[j] += q[d] * kv_load1(k[j], d, f16);
		for (unsigned j = 0; j < 8 && t + j < T; j++)
			pg->S[t + j] = r[j] * pg->scale;
	}
}

AVX2_INLINE void pv1_avx2_body(const struct attn_page *pg, const struct attn_group *gr,
			       unsigned t0, unsigned T, int f16)
{
	const float *S = pg->S;
	__m256 c = _mm256_set1_ps(gr->c[0]);
	float *o = gr->o[0];
	unsigned hd = pg->hd, d = 0;

	for (; d + 32 <= hd; d += 32) {
		__m256 o0 = _mm256_mul_ps(_mm256_loadu_ps(o + d), c);
		__m256 o1 = _mm256_mul_ps(_mm256_loadu_ps(o + d + 8), c);
		__m256 o2 = _mm256_mul_ps(_mm256_loadu_ps(o + d + 16), c);
		__m256 o3 = _mm256_mul_ps(_mm256_loadu_ps(o + d + 24), c);

		for (unsigned t = t0; t < T; t++) {
			const void *vr = kv_at(pg->v, t * pg->vst + d, f16);
			__m256 p = _mm256_broadcast_ss(S + t);

			o0 = _mm256_fmadd_ps(p, kv_load8(vr, f16), o0);
			o1 = _mm256_fmadd_ps(p, kv_load8(kv_at(vr, 8, f16), f16), o1);
			o2 = _mm256_fmadd_ps(p, kv_load8(kv_at(vr, 16, f16), f16), o2);
			o3 = _mm256_fmadd_ps(p, kv_load8(kv_at(vr, 24, f16), f16), o3);
		}
		_mm256_storeu_ps(o + d, o0);
		_mm256_storeu_ps(o + d + 8, o1);
		_mm256_storeu_ps(o + d + 16, o2);
		_mm256_storeu_ps(o + d + 24, o3);
	}
	for (; d + 8 <= hd; d += 8) {
		__m256 o0 = _mm256_mul_ps(_mm256_loadu_ps(o + d), c);

		for (unsigned t = t0; t < T; t++)
			o0 = _mm256_fmadd_ps(_mm256_broadcast_ss(S + t),
					     kv_load8(kv_at(pg->v, t * pg->vst + d, f16), f16), o0);
		_mm256_storeu_ps(o + d, o0);
	}
	for (; d < hd; d++) {
		float acc = o[d] * gr->c[0];
		for (unsigned t = t0; t < T; t++)
			acc += S[t] * kv_load1(pg->v, t * pg->vst + d, f16);
		o[d] = acc;
	}
}

AVX2 static void scores1_avx2(const struct attn_page *pg, const struct attn_group *gr, unsigned T)
{
	if (pg->f16)
		scores1_avx2_body(pg, gr, T, 1);
	else
		scores1_avx2_body(pg, gr, T, 0);
}

AVX2 static void pv1_avx2(const struct attn_page *pg, const struct attn_group *gr, unsigned t0,
			  unsigned T)
{
	if (pg->f16)
		pv1_avx2_body(pg, gr, t0, T, 1);
	else
		pv1_avx2_body(pg, gr, t0, T, 0);
}

/* Two live queries in a group (decode with two query heads a KV head, or
 * a row's last group): four tokens' scores for both reduced together,
 * then both outputs' dims in registers. */
AVX2_INLINE void scores2_avx2_body(const struct attn_page *pg, const struct attn_group *gr,
				   unsigned T, int f16)
{
	const float *q0 = gr->q[0], *q1 = gr->q[1];
	unsigned hd = pg->hd;

	for (unsigned t = 0; t < T; t += 4) {
		const void *k[4];
		float r[8];
		unsigned d = 0;

		for (unsigned j = 0; j < 4; j++)
			k[j] = kv_at(pg->k, (size_t)(t + j < T ? t + j : t) * pg->kst, f16);
		__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
		__m256 a4 = a0, a5 = a0, a6 = a0, a7 = a0;

		for (; d + 8 <= hd; d += 8) {
			__m256 y0 = _mm256_loadu_ps(q0 + d), y1 = _mm256_loadu_ps(q1 + d);
			__m256 x0 = kv_load8(kv_at(k[0], d, f16), f16);
			__m256 x1 = kv_load8(kv_at(k[1], d, f16), f16);
			__m256 x2 = kv_load8(kv_at(k[2], d, f16), f16);
			__m256 x3 = kv_load8(kv_at(k[3], d, f16), f16);

			a0 = _mm256_fmadd_ps(y0, x0, a0);
			a1 = _mm256_fmadd_ps(y1, x0, a1);
			a2 = _mm256_fmadd_ps(y0, x1, a2);
			a3 = _mm256_fmadd_ps(y1, x1, a3);
			a4 = _mm256_fmadd_ps(y0, x2, a4);
			a5 = _mm256_fmadd_ps(y1, x2, a5);
			a6 = _mm256_fmadd_ps(y0, x3, a6);
			a7 = _mm256_fmadd_ps(y1, x3, a7);
		}
		_mm256_storeu_ps(r, hsum8x8(a0, a1, a2, a3, a4, a5, a6, a7));
		for (; d < hd; d++)
			for (unsigned j = 0; j < 4; j++) {
				r[2 * j] += q0[d] * kv_load1(k[j], d, f16);
				r[2 * j + 1] += q1[d] * kv_load1(k[j], d, f16);
			}
		for (unsigned j = 0; j < 4 && t + j < T; j++) {
			pg->S[t + j] = r[2 * j] * pg->scale;
			pg->S[pg->sst + t + j] = r[2 * j + 1] * pg->scale;
		}
	}
}

AVX2_INLINE void pv2_avx2_body(const struct attn_page *pg, const struct attn_group *gr,
			       unsigned t0, unsigned T, int f16)
{
	const float *S0 = pg->S, *S1 = S0 + pg->sst;
	__m256 c0 = _mm256_set1_ps(gr->c[0]), c1 = _mm256_set1_ps(gr->c[1]);
	float *o0 = gr->o[0], *o1 = gr->o[1];
	unsigned hd = pg->hd, d = 0;

	for (; d + 32 <= hd; d += 32) {
		__m256 u0 = _mm256_mul_ps(_mm256_loadu_ps(o0 + d), c0);
		__m256 u1 = _mm256_mul_ps(_mm256_loadu_ps(o0 + d + 8), c0);
		__m256 u2 = _mm256_mul_ps(_mm256_loadu_ps(o0 + d + 16), c0);
		__m256 u3 = _mm256_mul_ps(_mm256_loadu_ps(o0 + d + 24), c0);
		__m256 w0 = _mm256_mul_ps(_mm256_loadu_ps(o1 + d), c1);
		__m256 w1 = _mm256_mul_ps(_mm256_loadu_ps(o1 + d + 8), c1);
		__m256 w2 = _mm256_mul_ps(_mm256_loadu_ps(o1 + d + 16), c1);
		__m256 w3 = _mm256_mul_ps(_mm256_loadu_ps(o1 + d + 24), c1);

		for (unsigned t = t0; t < T; t++) {
			const void *vr = kv_at(pg->v, t * pg->vst + d, f16);
			__m256 v0 = kv_load8(vr, f16), v1 = kv_load8(kv_at(vr, 8, f16), f16);
			__m256 v2 = kv_load8(kv_at(vr, 16, f16), f16);
			__m256 v3 = kv_load8(kv_at(vr, 24, f16), f16);
			__m256 p0 = _mm256_broadcast_ss(S0 + t), p1 = _mm256_broadcast_ss(S1 + t);

			u0 = _mm256_fmadd_ps(p0, v0, u0);
			u1 = _mm256_fmadd_ps(p0, v1, u1);
			u2 = _mm256_fmadd_ps(p0, v2, u2);
			u3 = _mm256_fmadd_ps(p0, v3, u3);
			w0 = _mm256_fmadd_ps(p1, v0, w0);
			w1 = _mm256_fmadd_ps(p1, v1, w1);
			w2 = _mm256_fmadd_ps(p1, v2, w2);
			w3 = _mm256_fmadd_ps(p1, v3, w3);
		}
		_mm256_storeu_ps(o1 + d, w0);
		_mm256_storeu_ps(o1 + d + 8, w1);
		_mm256_storeu_ps(o1 + d + 16, w2);
		_mm256_storeu_ps(o1 + d + 24, w3);
		_mm256_storeu_ps(o0 + d, u0);
		_mm256_storeu_ps(o0 + d + 8, u1);
		_mm256_storeu_ps(o0 + d + 16, u2);
		_mm256_storeu_ps(o0 + d + 24, u3);
	}
	for (; d + 8 <= hd; d += 8) {
		__m256 u0 = _mm256_mul_ps(_mm256_loadu_ps(o0 + d), c0);
		__m256 w0 = _mm256_mul_ps(_mm256_loadu_ps(o1 + d), c1);

		for (unsigned t = t0; t < T; t++) {
			__m256 v0 = kv_load8(kv_at(pg->v, t * pg->vst + d, f16), f16);
			u0 = _mm256_fmadd_ps(_mm256_broadcast_ss(S0 + t), v0, u0);
			w0 = _mm256_fmadd_ps(_mm256_broadcast_ss(S1 + t), v0, w0);
		}
		_mm256_storeu_ps(o1 + d, w0);
		_mm256_storeu_ps(o0 + d, u0);
	}
	for (; d < hd; d++) {
		float a0 = o0[d] * gr->c[0], a1 = o1[d] * gr->c[1];
		for (unsigned t = t0; t < T; t++) {
			float x = kv_load1(pg->v, t * pg->vst + d, f16);
			a0 += S0[t] * x;
			a1 += S1[t] * x;
		}
		o1[d] = a1;
		o0[d] = a0;
	}
}

AVX2 static void scores2_avx2(const struct attn_page *pg, const struct attn_group *gr, unsigned T)
{
	if (pg->f16)
		scores2_avx2_body(pg, gr, T, 1);
	else
		scores2_avx2_body(pg, gr, T, 0);
}

AVX2 static void pv2_avx2(const struct attn_page *pg, const struct attn_group *gr, unsigned t0,
			  unsigned T)
{
	if (pg->f16)
		pv2_avx2_body(pg, gr, t0, T, 1);
	else
		pv2_avx2_body(pg, gr, t0, T, 0);
}

/* The AVX-512 kernels, for head_dim a multiple of 16 (all the usual
 * ones): the same steps on twice the lanes. */
AVX512_INLINE __m512 kv_load16(const void *p, int f16)
{
	if (f16)
		return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
	return _mm512_loadu_ps((const float *)p);
}

AVX512_INLINE __m256 fold16(__m512 a)
{
	return _mm256_add_ps(_mm512_castps512_ps256(a),
			     _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}

AVX512_INLINE void scores4_avx512_body(const struct attn_page *pg, const struct attn_group *gr,
				       unsigned T, int f16)
{
	const float *q0 = gr->q[0], *q1 = gr->q[1], *q2 = gr->q[2], *q3 = gr->q[3];
	unsigned hd = pg->hd;

	for (unsigned t = 0; t < T; t += 2) {
		const void *k0 = kv_at(pg->k, t * pg->kst, f16);
		const void *k1 = t + 1 < T ? kv_at(k0, pg->kst, f16) : k0;
		__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
		__m512 a4 = a0, a5 = a0, a6 = a0, a7 = a0;
		float r[8];

		for (unsigned d = 0; d < hd; d += 16) {
			__m512 x0 = kv_load16(kv_at(k0, d, f16), f16);
			__m512 x1 = kv_load16(kv_at(k1, d, f16), f16);
			__m512 y0 = _mm512_loadu_ps(q0 + d), y1 = _mm512_loadu_ps(q1 + d);
			__m512 y2 = _mm512_loadu_ps(q2 + d), y3 = _mm512_loadu_ps(q3 + d);

			a0 = _mm512_fmadd_ps(y0, x0, a0);
			a1 = _mm512_fmadd_ps(y1, x0, a1);
			a2 = _mm512_fmadd_ps(y2, x0, a2);
			a3 = _mm512_fmadd_ps(y3, x0, a3);
			a4 = _mm512_fmadd_ps(y0, x1, a4);
			a5 = _mm512_fmadd_ps(y1, x1, a5);
			a6 = _mm512_fmadd_ps(y2, x1, a6);
			a7 = _mm512_fmadd_ps(y3, x1, a7);
		}
		_mm256_storeu_ps(r, _mm256_mul_ps(hsum8x8(fold16(a0), fold16(a1), fold16(a2),
							  fold16(a3), fold16(a4), fold16(a5),
							  fold16(a6), fold16(a7)),
						  _mm256_set1_ps(pg->scale)));
		for (unsigned s = 0; s < 4; s++) {
			pg->S[s * pg->sst + t] = r[s];
			if (t + 1 < T)
				pg->S[s * pg->sst + t + 1] = r[4 + s];
		}
	}
}

AVX512_INLINE void pv4_avx512_body(const struct attn_page *pg, const struct attn_group *gr,
				   unsigned t0, unsigned T, int f16)
{
	const float *S0 = pg->S, *S1 = S0 + pg->sst, *S2 = S1 + pg->sst, *S3 = S2 + pg->sst;
	__m512 c0 = _mm512_set1_ps(gr->c[0]), c1 = _mm512_set1_ps(gr->c[1]);
	__m512 c2 = _mm512_set1_ps(gr->c[2]), c3 = _mm512_set1_ps(gr->c[3]);
	float *const *o = gr->o;
	unsigned hd = pg->hd, d = 0;

	/* 64 dims a pass where there are: each V row read once for the
	 * four, four loads and four broadcasts a sixteen FMAs */
	for (; d + 64 <= hd; d += 64) {
		const __m512 cs[4] = { c0, c1, c2, c3 };
		__m512 acc[4][4];

		for (unsigned s = 0; s < 4; s++)
			for (unsigned j = 0; j < 4; j++)
				acc[s][j] = _mm512_mul_ps(_mm512_loadu_ps(o[s] + d + 16 * j), cs[s]);
		for (unsigned t = t0; t < T; t++) {
			const void *vr = kv_at(pg->v, t * pg->vst + d, f16);
			__m512 v0 = kv_load16(vr, f16), v1 = kv_load16(kv_at(vr, 16, f16), f16);
			__m512 v2 = kv_load16(kv_at(vr, 32, f16), f16);
			__m512 v3 = kv_load16(kv_at(vr, 48, f16), f16);

			for (unsigned s = 0; s < 4; s++) {
				__m512 p = _mm512_set1_ps(pg->S[s * pg->sst + t]);

				acc[s][0] = _mm512_fmadd_ps(p, v0, acc[s][0]);
				acc[s][1] = _mm512_fmadd_ps(p, v1, acc[s][1]);
				acc[s][2] = _mm512_fmadd_ps(p, v2, acc[s][2]);
				acc[s][3] = _mm512_fmadd_ps(p, v3, acc[s][3]);
			}
		}
		for (unsigned s = 4; s-- > 0;)
			for (unsigned j = 0; j < 4; j++)
				_mm512_storeu_ps(o[s] + d + 16 * j, acc[s][j]);
	}
	for (; d + 32 <= hd; d += 32) {
		__m512 o00 = _mm512_mul_ps(_mm512_loadu_ps(o[0] + d), c0);
		__m512 o01 = _mm512_mul_ps(_mm512_loadu_ps(o[0] + d + 16), c0);
		__m512 o10 = _mm512_mul_ps(_mm512_loadu_ps(o[1] + d), c1);
		__m512 o11 = _mm512_mul_ps(_mm512_loadu_ps(o[1] + d + 16), c1);
		__m512 o20 = _mm512_mul_ps(_mm512_loadu_ps(o[2] + d), c2);
		__m512 o21 = _mm512_mul_ps(_mm512_loadu_ps(o[2] + d + 16), c2);
		__m512 o30 = _mm512_mul_ps(_mm512_loadu_ps(o[3] + d), c3);
		__m512 o31 = _mm512_mul_ps(_mm512_loadu_ps(o[3] + d + 16), c3);

		for (unsigned t = t0; t < T; t++) {
			const void *vr = kv_at(pg->v, t * pg->vst + d, f16);
			__m512 v0 = kv_load16(vr, f16), v1 = kv_load16(kv_at(vr, 16, f16), f16);
			__m512 p;

			p = _mm512_set1_ps(S0[t]);
			o00 = _mm512_fmadd_ps(p, v0, o00);
			o01 = _mm512_fmadd_ps(p, v1, o01);
			p = _mm512_set1_ps(S1[t]);
			o10 = _mm512_fmadd_ps(p, v0, o10);
			o11 = _mm512_fmadd_ps(p, v1, o11);
			p = _mm512_set1_ps(S2[t]);
			o20 = _mm512_fmadd_ps(p, v0, o20);
			o21 = _mm512_fmadd_ps(p, v1, o21);
			p = _mm512_set1_ps(S3[t]);
			o30 = _mm512_fmadd_ps(p, v0, o30);
			o31 = _mm512_fmadd_ps(p, v1, o31);
		}
		_mm512_storeu_ps(o[3] + d, o30);
		_mm512_storeu_ps(o[3] + d + 16, o31);
		_mm512_storeu_ps(o[2] + d, o20);
		_mm512_storeu_ps(o[2] + d + 16, o21);
		_mm512_storeu_ps(o[1] + d, o10);
		_mm512_storeu_ps(o[1] + d + 16, o11);
		_mm512_storeu_ps(o[0] + d, o00);
		_mm512_storeu_ps(o[0] + d + 16, o01);
	}
	if (d < hd) {			/* 16 left */
		__m512 o0 = _mm512_mul_ps(_mm512_loadu_ps(o[0] + d), c0);
		__m512 o1 = _mm512_mul_ps(_mm512_loadu_ps(o[1] + d), c1);
		__m512 o2 = _mm512_mul_ps(_mm512_loadu_ps(o[2] + d), c2);
		__m512 o3 = _mm512_mul_ps(_mm512_loadu_ps(o[3] + d), c3);

		for (unsigned t = t0; t < T; t++) {
			__m512 v0 = kv_load16(kv_at(pg->v, t * pg->vst + d, f16), f16);
			o0 = _mm512_fmadd_ps(_mm512_set1_ps(S0[t]), v0, o0);
			o1 = _mm512_fmadd_ps(_mm512_set1_ps(S1[t]), v0, o1);
			o2 = _mm512_fmadd_ps(_mm512_set1_ps(S2[t]), v0, o2);
			o3 = _mm512_fmadd_ps(_mm512_set1_ps(S3[t]), v0, o3);
		}
		_mm512_storeu_ps(o[3] + d, o3);
		_mm512_storeu_ps(o[2] + d, o2);
		_mm512_storeu_ps(o[1] + d, o1);
		_mm512_storeu_ps(o[0] + d, o0);
	}
}

AVX512 static void scores4_avx512(const struct attn_page *pg, const struct attn_group *gr,
				  unsigned T)
{
	if (pg->f16)
		scores4_avx512_body(pg, gr, T, 1);
	else
		scores4_avx512_body(pg, gr, T, 0);
}

AVX512 static void pv4_avx512(const struct attn_page *pg, const struct attn_group *gr, unsigned t0,
		       unsigned T)
{
	if (pg->f16)
		pv4_avx512_body(pg, gr, t0, T, 1);
	else
		pv4_avx512_body(pg, gr, t0, T, 0);
}

/* Scores of four queries against K turned on its side (the gathered
 * pages: row d of K^T at k + d * kst, f32), 64 tokens a pass: each
 * element of K^T read once for the four, no sums across lanes. Reads
 * whole vectors past T (the rows are KVT_ATTN_PEND long, T at most that);
 * stores only below T. */
AVX512 static void scores4t_avx512(const struct attn_page *pg, const struct attn_group *gr,
				   unsigned T)
{
	const float *kt = pg->k, *const *q = gr->q;
	const __m512 sc = _mm512_set1_ps(pg->scale);
	unsigned hd = pg->hd;

	for (unsigned t0 = 0; t0 < T; t0 += 64) {
		__m512 a[4][4];

		for (unsigned s = 0; s < 4; s++)
			for (unsigned j = 0; j < 4; j++)
				a[s][j] = _mm512_setzero_ps();
		for (unsigned d = 0; d < hd; d++) {
			const float *kr = kt + d * pg->kst + t0;
			__m512 k0 = _mm512_loadu_ps(kr), k1 = _mm512_loadu_ps(kr + 16);
			__m512 k2 = _mm512_loadu_ps(kr + 32), k3 = _mm512_loadu_ps(kr + 48);

			for (unsigned s = 0; s < 4; s++) {
				__m512 x = _mm512_set1_ps(q[s][d]);

				a[s][0] = _mm512_fmadd_ps(x, k0, a[s][0]);
				a[s][1] = _mm512_fmadd_ps(x, k1, a[s][1]);
				a[s][2] = _mm512_fmadd_ps(x, k2, a[s][2]);
				a[s][3] = _mm512_fmadd_ps(x, k3, a[s][3]);
			}
		}
		for (unsigned j = 0; j < 4 && t0 + 16 * j < T; j++) {
			unsigned left = T - t0 - 16 * j;
			__mmask16 m = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);

			for (unsigned s = 0; s < 4; s++)
				_mm512_mask_storeu_ps(pg->S + s * pg->sst + t0 + 16 * j, m,
						      _mm512_mul_ps(a[s][j], sc));
		}
	}
}

/* One live query, as scores1_avx2 and pv1_avx2. */
AVX512_INLINE void scores1_avx512_body(const struct attn_page *pg, const struct attn_group *gr,
				       unsigned T, int f16)
{
	const float *q = gr->q[0];
	unsigned hd = pg->hd;

	for (unsigned t = 0; t < T; t += 8) {
		const void *k[8];
		float r[8];

		for (unsigned j = 0; j < 8; j++)
			k[j] = kv_at(pg->k, (size_t)(t + j < T ? t + j : t) * pg->kst, f16);
		__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
		__m512 a4 = a0, a5 = a0, a6 = a0, a7 = a0;

		for (unsigned d = 0; d < hd; d += 16) {
			__m512 y = _mm512_loadu_ps(q + d);

			a0 = _mm512_fmadd_ps(y, kv_load16(kv_at(k[0], d, f16), f16), a0);
			a1 = _mm512_fmadd_ps(y, kv_load16(kv_at(k[1], d, f16), f16), a1);
			a2 = _mm512_fmadd_ps(y, kv_load16(kv_at(k[2], d, f16), f16), a2);
			a3 = _mm512_fmadd_ps(y, kv_load16(kv_at(k[3], d, f16), f16), a3);
			a4 = _mm512_fmadd_ps(y, kv_load16(kv_at(k[4], d, f16), f16), a4);
			a5 = _mm512_fmadd_ps(y, kv_load16(kv_at(k[5], d, f16), f16), a5);
			a6 = _mm512_fmadd_ps(y, kv_load16(kv_at(k[6], d, f16), f16), a6);
			a7 = _mm512_fmadd_ps(y, kv_load16(kv_at(k[7], d, f16), f16), a7);
		}
		_mm256_storeu_ps(r, _mm256_mul_ps(hsum8x8(fold16(a0), fold16(a1), fold16(a2),
							  fold16(a3), fold16(a4), fold16(a5),
							  fold16(a6), fold16(a7)),
						  _mm256_set1_ps(pg->scale)));
		for (unsigned j = 0; j < 8 && t + j < T; j++)
			pg->S[t + j] = r[j];
	}
}

AVX512_INLINE void pv1_avx512_body(const struct attn_page *pg, const struct attn_group *gr,
				   unsigned t0, unsigned T, int f16)
{
	const float *S = pg->S;
	__m512 c = _mm512_set1_ps(gr->c[0]);
	float *o = gr->o[0];
	unsigned hd = pg->hd, d = 0;

	for (; d + 64 <= hd; d += 64) {
		__m512 o0 = _mm512_mul_ps(_mm512_loadu_ps(o + d), c);
		__m512 o1 = _mm512_mul_ps(_mm512_loadu_ps(o + d + 16), c);
		__m512 o2 = _mm512_mul_ps(_mm512_loadu_ps(o + d + 32), c);
		__m512 o3 = _mm512_mul_ps(_mm512_loadu_ps(o + d + 48), c);

		for (unsigned t = t0; t < T; t++) {
			const void *vr = kv_at(pg->v, t * pg->vst + d, f16);
			__m512 p = _mm512_set1_ps(S[t]);

			o0 = _mm512_fmadd_ps(p, kv_load16(vr, f16), o0);
			o1 = _mm512_fmadd_ps(p, kv_load16(kv_at(vr, 16, f16), f16), o1);
			o2 = _mm512_fmadd_ps(p, kv_load16(kv_at(vr, 32, f16), f16), o2);
			o3 = _mm512_fmadd_ps(p, kv_load16(kv_at(vr, 48, f16), f16), o3);
		}
		_mm512_storeu_ps(o + d, o0);
		_mm512_storeu_ps(o + d + 16, o1);
		_mm512_storeu_ps(o + d + 32, o2);
		_mm512_storeu_ps(o + d + 48, o3);
	}
	for (; d < hd; d += 16) {
		__m512 o0 = _mm512_mul_ps(_mm512_loadu_ps(o + d), c);

		for (unsigned t = t0; t < T; t++)
			o0 = _mm512_fmadd_ps(_mm512_set1_ps(S[t]),
					     kv_load16(kv_at(pg->v, t * pg->vst + d, f16), f16), o0);
		_mm512_storeu_ps(o + d, o0);
	}
}

AVX512 static void scores1_avx512(const struct attn_page *pg, const struct attn_group *gr,
				  unsigned T)
{
	if (pg->f16)
		scores1_avx512_body(pg, gr, T, 1);
	else
		scores1_avx512_body(pg, gr, T, 0);
}

AVX512 static void pv1_avx512(const struct attn_page *pg, const struct attn_group *gr,
			      unsigned t0, unsigned T)
{
	if (pg->f16)
		pv1_avx512_body(pg, gr, t0, T, 1);
	else
		pv1_avx512_body(pg, gr, t0, T, 0);
}

/* Two live queries, as scores2_avx2 and pv2_avx2. */
AVX512_INLINE void scores2_avx512_body(const struct attn_page *pg, const struct attn_group *gr,
				       unsigned T, int f16)
{
	const float *q0 = gr->q[0], *q1 = gr->q[1];
	unsigned hd = pg->hd;

	for (unsigned t = 0; t < T; t += 4) {
		const void *k[4];
		float r[8];

		for (unsigned j = 0; j < 4; j++)
			k[j] = kv_at(pg->k, (size_t)(t + j < T ? t + j : t) * pg->kst, f16);
		__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
		__m512 a4 = a0, a5 = a0, a6 = a0, a7 = a0;

		for (unsigned d = 0; d < hd; d += 16) {
			__m512 y0 = _mm512_loadu_ps(q0 + d), y1 = _mm512_loadu_ps(q1 + d);
			__m512 x0 = kv_load16(kv_at(k[0], d, f16), f16);
			__m512 x1 = kv_load16(kv_at(k[1], d, f16), f16);
			__m512 x2 = kv_load16(kv_at(k[2], d, f16), f16);
			__m512 x3 = kv_load16(kv_at(k[3], d, f16), f16);

			a0 = _mm512_fmadd_ps(y0, x0, a0);
			a1 = _mm512_fmadd_ps(y1, x0, a1);
			a2 = _mm512_fmadd_ps(y0, x1, a2);
			a3 = _mm512_fmadd_ps(y1, x1, a3);
			a4 = _mm512_fmadd_ps(y0, x2, a4);
			a5 = _mm512_fmadd_ps(y1, x2, a5);
			a6 = _mm512_fmadd_ps(y0, x3, a6);
			a7 = _mm512_fmadd_ps(y1, x3, a7);
		}
		_mm256_storeu_ps(r, _mm256_mul_ps(hsum8x8(fold16(a0), fold16(a1), fold16(a2),
							  fold16(a3), fold16(a4), fold16(a5),
							  fold16(a6), fold16(a7)),
						  _mm256_set1_ps(pg->scale)));
		for (unsigned j = 0; j < 4 && t + j < T; j++) {
			pg->S[t + j] = r[2 * j];
			pg->S[pg->sst + t + j] = r[2 * j + 1];
		}
	}
}

AVX512_INLINE void pv2_avx512_body(const struct attn_page *pg, const struct attn_group *gr,
				   unsigned t0, unsigned T, int f16)
{
	const float *S0 = pg->S, *S1 = S0 + pg->sst;
	__m512 c0 = _mm512_set1_ps(gr->c[0]), c1 = _mm512_set1_ps(gr->c[1]);
	float *o0 = gr->o[0], *o1 = gr->o[1];
	unsigned hd = pg->hd, d = 0;

	for (; d + 64 <= hd; d += 64) {
		__m512 u0 = _mm512_mul_ps(_mm512_loadu_ps(o0 + d), c0);
		__m512 u1 = _mm512_mul_ps(_mm512_loadu_ps(o0 + d + 16), c0);
		__m512 u2 = _mm512_mul_ps(_mm512_loadu_ps(o0 + d + 32), c0);
		__m512 u3 = _mm512_mul_ps(_mm512_loadu_ps(o0 + d + 48), c0);
		__m512 w0 = _mm512_mul_ps(_mm512_loadu_ps(o1 + d), c1);
		__m512 w1 = _mm512_mul_ps(_mm512_loadu_ps(o1 + d + 16), c1);
		__m512 w2 = _mm512_mul_ps(_mm512_loadu_ps(o1 + d + 32), c1);
		__m512 w3 = _mm512_mul_ps(_mm512_loadu_ps(o1 + d + 48), c1);

		for (unsigned t = t0; t < T; t++) {
			const void *vr = kv_at(pg->v, t * pg->vst + d, f16);
			__m512 v0 = kv_load16(vr, f16), v1 = kv_load16(kv_at(vr, 16, f16), f16);
			__m512 v2 = kv_load16(kv_at(vr, 32, f16), f16);
			__m512 v3 = kv_load16(kv_at(vr, 48, f16), f16);
			__m512 p0 = _mm512_set1_ps(S0[t]), p1 = _mm512_set1_ps(S1[t]);

			u0 = _mm512_fmadd_ps(p0, v0, u0);
			u1 = _mm512_fmadd_ps(p0, v1, u1);
			u2 = _mm512_fmadd_ps(p0, v2, u2);
			u3 = _mm512_fmadd_ps(p0, v3, u3);
			w0 = _mm512_fmadd_ps(p1, v0, w0);
			w1 = _mm512_fmadd_ps(p1, v1, w1);
			w2 = _mm512_fmadd_ps(p1, v2, w2);
			w3 = _mm512_fmadd_ps(p1, v3, w3);
		}
		_mm512_storeu_ps(o1 + d, w0);
		_mm512_storeu_ps(o1 + d + 16, w1);
		_mm512_storeu_ps(o1 + d + 32, w2);
		_mm512_storeu_ps(o1 + d + 48, w3);
		_mm512_storeu_ps(o0 + d, u0);
		_mm512_storeu_ps(o0 + d + 16, u1);
		_mm512_storeu_ps(o0 + d + 32, u2);
		_mm512_storeu_ps(o0 + d + 48, u3);
	}
	for (; d < hd; d += 16) {
		__m512 u0 = _mm512_mul_ps(_mm512_loadu_ps(o0 + d), c0);
		__m512 w0 = _mm512_mul_ps(_mm512_loadu_ps(o1 + d), c1);

		for (unsigned t = t0; t < T; t++) {
			__m512 v0 = kv_load16(kv_at(pg->v, t * pg->vst + d, f16), f16);
			u0 = _mm512_fmadd_ps(_mm512_set1_ps(S0[t]), v0, u0);
			w0 = _mm512_fmadd_ps(_mm512_set1_ps(S1[t]), v0, w0);
		}
		_mm512_storeu_ps(o1 + d, w0);
		_mm512_storeu_ps(o0 + d, u0);
	}
}

AVX512 static void scores2_avx512(const struct attn_page *pg, const struct attn_group *gr,
				  unsigned T)
{
	if (pg->f16)
		scores2_avx512_body(pg, gr, T, 1);
	else
		scores2_avx512_body(pg, gr, T, 0);
}

AVX512 static void pv2_avx512(const struct attn_page *pg, const struct attn_group *gr,
			      unsigned t0, unsigned T)
{
	if (pg->f16)
		pv2_avx512_body(pg, gr, t0, T, 1);
	else
		pv2_avx512_body(pg, gr, t0, T, 0);
}

/*
 * Decode with K and V read in place, when each of the group's NQ live
 * queries sees the same first T tokens of the page (all of them in every
 * page of a decode but a batch's last): steps 1 to 3 fused, 16 tokens at a time, with the
 * scores, probabilities, m, l and c in registers. Apart, the steps cost
 * more than their arithmetic on 16-token pages: three calls a KV head,
 * each token's score reduced alone, S written and read twice. Here each
 * token's dot products sum in a vector each, and 16 such vectors (16 / NQ
 * tokens) are reduced together; the online softmax takes 16 tokens at
 * once (c and p from exp16); o += p V goes 64 dims at a time, o in
 * registers. The next page's share for this KV head (pg->pf) is asked
 * for a line or two at a time between the products, so that its reads
 * overlap them: asked for in one burst, the prefetches wait on the line
 * fill buffers, and nothing is computed meanwhile (docs/benchmarks.md).
 */

/* The 16 sums of a[0..15] in one vector: lane i is the sum of a[i]. */
AVX512_INLINE __m512 hsum16x16(const __m512 *a)
{
	__m512 b[8], c[4], d[2];

	/* The tree leaves lane 4L + j holding the sum of its input 4j + L:
	 * so input m is a[4 (m % 4) + m / 4]. */
	for (unsigned i = 0; i < 8; i++) {
		__m512 x = a[4 * (2 * i % 4) + 2 * i / 4], y = a[4 * ((2 * i + 1) % 4) + 2 * i / 4];

		b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xee));
	}
	for (unsigned i = 0; i < 4; i++)
		c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
				     _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xdd));
	for (unsigned i = 0; i < 2; i++)
		d[i] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0x44),
				     _mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0xee));
	return _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xdd));
}

/* Up to k more lines of the next page (*pf, *pn bytes left) on their way. */
AVX512_INLINE void pf_step(const char **pf, size_t *pn, unsigned k)
{
	for (unsigned i = 0; i < k && *pn; i++) {
		_mm_prefetch(*pf, _MM_HINT_T0);
		if (*pn <= 64) {
			*pn = 0;
			break;
		}
		*pf += 64;
		*pn -= 64;
	}
}

/* o[0..NQ) (DW vectors from dim d) = o c + sum_t P[q][t] V_t over n tokens. */
AVX512_INLINE void pvf_dims(const struct attn_page *pg, const struct attn_group *gr,
			    unsigned t0, unsigned n, unsigned d, const float (*P)[16],
			    const float *c, unsigned NQ, unsigned DW, int f16, const char **pfp,
			    size_t *pnp, unsigned pk)
{
	__m512 o[4][4];

	for (unsigned q = 0; q < NQ; q++)
		for (unsigned i = 0; i < DW; i++)
			o[q][i] = _mm512_mul_ps(_mm512_loadu_ps(gr->o[q] + d + 16 * i),
						_mm512_set1_ps(c[q]));
	for (unsigned t = 0; t < n; t++) {
		const void *vr = kv_at(pg->v, (t0 + t) * pg->vst + d, f16);
		__m512 v[4];

		pf_step(pfp, pnp, pk);
		for (unsigned i = 0; i < DW; i++)
			v[i] = kv_load16(kv_at(vr, 16 * i, f16), f16);
		for (unsigned q = 0; q < NQ; q++) {
			__m512 p = _mm512_set1_ps(P[q][t]);

			for (unsigned i = 0; i < DW; i++)
				o[q][i] = _mm512_fmadd_ps(p, v[i], o[q][i]);
		}
	}
	for (unsigned q = 0; q < NQ; q++)
		for (unsigned i = 0; i < DW; i++)
			_mm512_storeu_ps(gr->o[q] + d + 16 * i, o[q][i]);
}

/* s[q] lane t: the scores of query q of gr against tokens t0 + t, scaled
 * (past T: token T - 1 again; past NQ: s[0] again). */
AVX512_INLINE void fused_scores(const struct attn_page *pg, const struct attn_group *gr,
				unsigned t0, unsigned T, unsigned NQ, int f16, const char **pf,
				size_t *pn, unsigned pk, __m512 *s)
{
	const unsigned hd = pg->hd, TB = 16 / NQ;
	__m512 z[4];

	/* z[r] lane j NQ + q: query q against token t0 + r TB + j */
	for (unsigned r = 0; r < NQ; r++) {
		const void *k[16];
		__m512 a[16];

		for (unsigned j = 0; j < TB; j++) {
			unsigned t = t0 + r * TB + j;

			k[j] = kv_at(pg->k, (size_t)(t < T ? t : T - 1) * pg->kst, f16);
		}
		for (unsigned i = 0; i < 16; i++)
			a[i] = _mm512_setzero_ps();
		for (unsigned d = 0; d < hd; d += 16) {
			__m512 y[4];

			pf_step(pf, pn, pk);
			for (unsigned q = 0; q < NQ; q++)
				y[q] = _mm512_loadu_ps(gr->q[q] + d);
			for (unsigned j = 0; j < TB; j++) {
				__m512 x = kv_load16(kv_at(k[j], d, f16), f16);

				for (unsigned q = 0; q < NQ; q++)
					a[j * NQ + q] = _mm512_fmadd_ps(y[q], x, a[j * NQ + q]);
			}
		}
		z[r] = hsum16x16(a);
	}
	if (NQ == 1) {
		s[0] = z[0];
	} else if (NQ == 2) {
		const __m512i i0 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22,
						     24, 26, 28, 30);

		s[0] = _mm512_permutex2var_ps(z[0], i0, z[1]);
		s[1] = _mm512_permutex2var_ps(z[0], _mm512_add_epi32(i0, _mm512_set1_epi32(1)), z[1]);
	} else {
		const __m512i i0 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0,
						     0, 0, 0, 0);

		for (unsigned q = 0; q < 4; q++) {
			__m512i iq = _mm512_add_epi32(i0, _mm512_set1_epi32((int)q));
			__m512 u = _mm512_permutex2var_ps(z[0], iq, z[1]);
			__m512 w = _mm512_permutex2var_ps(z[2], iq, z[3]);

			s[q] = _mm512_shuffle_f32x4(u, w, 0x44);
		}
	}
	for (unsigned q = 0; q < 4; q++)
		s[q] = q < NQ ? _mm512_mul_ps(s[q], _mm512_set1_ps(pg->scale)) : s[0];
}

/*
 * The four queries' reductions at once: lanes 4q .. 4q + 3 of the result
 * all hold x[q]'s 16 lanes reduced by op (max or add), in the order
 * _mm512_reduce_add_ps takes them (i and i + 8, then i and i + 4, i and
 * i + 2, i and i + 1), so the sums are the same floats: 13 instructions
 * for four queries where four reduce_*_ps take 32.
 */
#define HRED4(op, x)	({								\
	__m512 a_ = op(_mm512_shuffle_f32x4(x[0], x[1], 0x44), _mm512_shuffle_f32x4(x[0], x[1], 0xee)); \
	__m512 b_ = op(_mm512_shuffle_f32x4(x[2], x[3], 0x44), _mm512_shuffle_f32x4(x[2], x[3], 0xee)); \
	__m512 c_ = op(_mm512_shuffle_f32x4(a_, b_, 0x88), _mm512_shuffle_f32x4(a_, b_, 0xdd));	\
	c_ = op(c_, _mm512_permute_ps(c_, 0x4e));						\
	op(c_, _mm512_permute_ps(c_, 0xb1));							\
})

/* A group's online softmax state, query q in lanes 4q .. 4q + 3: m, l,
 * the page's own l; c, the rescale of the old o, also as floats (cq). */
struct fsm {
	__m512 m, l, pl;
	float cq[16] __attribute__((aligned(64)));
	float P[4][16] __attribute__((aligned(64)));	/* probabilities */
};

/* The softmax step over 16 tokens (those past live masked to 0), the four
 * queries side by side. */
AVX512_INLINE void fused_softmax(struct fsm *f, __m512 *s, __mmask16 live, unsigned NQ)
{
	/* lanes past the page hold token T - 1 again: the max is right */
	__m512 mn = _mm512_max_ps(HRED4(_mm512_max_ps, s), f->m), c, sum;

	c = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(f->m, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ),
				exp16(_mm512_sub_ps(f->m, mn)));
	for (unsigned q = 0; q < 4; q++) {
		__m512 mq = _mm512_permutexvar_ps(_mm512_set1_epi32(4 * (int)q), mn);

		s[q] = q < NQ ? _mm512_maskz_mov_ps(live, exp16(_mm512_sub_ps(s[q], mq))) : s[0];
		if (q < NQ)
			_mm512_store_ps(f->P[q], s[q]);
	}
	sum = HRED4(_mm512_add_ps, s);
	f->l = _mm512_fmadd_ps(f->l, c, sum);
	f->pl = _mm512_fmadd_ps(f->pl, c, sum);
	f->m = mn;
	_mm512_store_ps(f->cq, _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0,
									0, 0, 0, 0, 0, 0, 0, 0), c));
}

/* NG groups of NQ queries that share the page (two groups: the eight
 * query heads of a KV head), each block of 16 tokens in the order scores,
 * softmax of group 0, scores, softmax of group 1, o += p V of both: a
 * group's softmax, a chain of dependent steps, runs while the next one's
 * products do. */
AVX512_INLINE void fused_body(const struct attn_page *pg, struct attn_group *const *gr,
			      unsigned NG, unsigned T, unsigned NQ, int f16)
{
	const unsigned hd = pg->hd;
	struct fsm f[2];
	/* the next page's share: pk lines an inner step, pn bytes left */
	const unsigned its = NG * ((T + 15) / 16 * NQ * (hd / 16) + T * ((hd + 63) / 64));
	const unsigned pk = (unsigned)((pg->pfn / 64 + its - 1) / its);
	const char *pf = pg->pf;
	size_t pn = pg->pfn;

	for (unsigned g = 0; g < NG; g++) {
		for (unsigned q = 0; q < 4; q++) {
			f[g].cq[q] = *gr[g]->m[q < NQ ? q : 0];
			f[g].cq[4 + q] = *gr[g]->l[q < NQ ? q : 0];
		}
		f[g].m = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2,
								 3, 3, 3, 3), _mm512_load_ps(f[g].cq));
		f[g].l = _mm512_permutexvar_ps(_mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6,
								 7, 7, 7, 7), _mm512_load_ps(f[g].cq));
		f[g].pl = _mm512_setzero_ps();
	}
	for (unsigned t0 = 0; t0 < T; t0 += 16) {
		const unsigned n = T - t0 < 16 ? T - t0 : 16;
		const __mmask16 live = (__mmask16)((1u << n) - 1);

		for (unsigned g = 0; g < NG; g++) {
			__m512 s[4];

			fused_scores(pg, gr[g], t0, T, NQ, f16, &pf, &pn, pk, s);
			fused_softmax(&f[g], s, live, NQ);
		}
		for (unsigned g = 0; g < NG; g++) {
			unsigned d = 0;

			for (; d + 64 <= hd; d += 64)
				pvf_dims(pg, gr[g], t0, n, d, f[g].P, f[g].cq, NQ, 4, f16, &pf, &pn, pk);
			for (; d < hd; d += 16)
				pvf_dims(pg, gr[g], t0, n, d, f[g].P, f[g].cq, NQ, 1, f16, &pf, &pn, pk);
		}
	}
	for (unsigned g = 0; g < NG; g++) {
		float m[16] __attribute__((aligned(64))), l[16] __attribute__((aligned(64)));

		_mm512_store_ps(m, f[g].m);
		_mm512_store_ps(l, f[g].l);
		_mm512_store_ps(f[g].cq, f[g].pl);
		for (unsigned q = 0; q < NQ; q++) {
			*gr[g]->m[q] = m[4 * q];
			*gr[g]->l[q] = l[4 * q];
			if (gr[g]->pm[q]) {
				*gr[g]->pm[q] = m[4 * q];
				*gr[g]->pl[q] = f[g].cq[4 * q];
			}
		}
	}
}

/* fusedN_avx512 takes one group, fused4x2_avx512 two (gr[0], gr[1]). */
#define DEF_FUSED(NG, NQ, name)								\
AVX512 static void name(const struct attn_page *pg, struct attn_group *const *gr, unsigned T) \
{											\
	if (pg->f16)									\
		fused_body(pg, gr, NG, T, NQ, 1);					\
	else										\
		fused_body(pg, gr, NG, T, NQ, 0);					\
}
DEF_FUSED(1, 1, fused1_avx512)
DEF_FUSED(1, 2, fused2_avx512)
DEF_FUSED(1, 4, fused4_avx512)
DEF_FUSED(2, 4, fused4x2_avx512)

/* The 32 values of the q8_0 or q4_0 block at b, in two vectors: d q or
 * d (q - 8), exact in f32. */
AVX512_INLINE void kvq_block(const uint8_t *b, int type, __m512 *x0, __m512 *x1)
{
	uint16_t h;

	memcpy(&h, b, sizeof(h));
	const __m512 d = _mm512_set1_ps(_cvtsh_ss(h));
	const __m128i lo = _mm_loadu_si128((const __m128i *)(b + 2));

	if (type == KVT_KV_Q8_0) {
		const __m128i hi = _mm_loadu_si128((const __m128i *)(b + 18));

		*x0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)));
		*x1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)));
	} else {
		/* Value j in the low nibble of byte j, j + 16 in its high one:
		 * the sixteen d (q - 8) looked up, VPERMPS taking the low four
		 * bits of each byte widened (shifted down for the high). */
		const __m512 tab = _mm512_mul_ps(d, _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1,
								    0, 1, 2, 3, 4, 5, 6, 7));
		const __m512i q = _mm512_cvtepu8_epi32(lo);

		*x0 = _mm512_permutexvar_ps(q, tab);
		*x1 = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), tab);
	}
}

/* 32 values of KV type type from value i of p (for q8_0 and q4_0 a
 * block's start), in two vectors. */
AVX512_INLINE void kv_load32(const void *p, size_t i, int type, __m512 *x0, __m512 *x1)
{
	const uint8_t *b = (const uint8_t *)p + kvt_kv_bytes(type, i);

	if (kvt_kv_block(type)) {
		kvq_block(b, type, x0, x1);
	} else {
		*x0 = kv_load16(b, type == KVT_KV_F16);
		*x1 = kv_load16(b + kvt_kv_bytes(type, 16), type == KVT_KV_F16);
	}
}

/*
 * One query row (decode) against a page in address order. The kernels
 * above take a KV head at a time, each with its own group, softmax state
 * and reductions; with one or two query heads to a KV head that per-head
 * work, not the products, held them. These take up to sixteen query
 * heads at once (G = 1 to 8 to a KV head, ROWPAGE_KV(G) KV heads: sixteen
 * heads, or 12, 10, 12 and 14 for G = 3, 5, 6, 7): each K row's heads in turn,
 * their dot products reduced into one vector (lane h: head h's score),
 * the online softmax on all sixteen lanes at once,
 * then P V a KV head at a time over the block from L1. From the caches
 * that is up to 1.8 times faster with one or two queries to a KV head
 * ("Decode attention in address order" in docs/benchmarks.md), and 1.2
 * to 1.3 times with four or eight since the sums stay in registers
 * ("Decode attention's sums in registers"). The sums are those of the
 * fused kernels, in the same order, so the floats are the same. q8_0 and
 * q4_0 KV are read the same way, a block dequantized in registers where
 * f16 converts 16 values (kv_load32), so their floats are those of f32
 * KV holding the same values; in whole chunks only. With the queries
 * rounded to q8_0 (kvt_cpu_kv_int8), K's products are integers
 * (rowpagei_scores, below).
 */
/* The KV heads of a chunk: as many as fill sixteen lanes, but a power of
 * two, since models have 2, 4 or 8 KV heads (12 heads for G = 3, as Llama
 * 3.2 3B's 24 over 8, not 15). */
#define ROWPAGE_KV(G)	((G) == 3 ? 4u : (G) == 5 ? 2u : 16u / (G))

struct rowpage {
	const float	*q;		/* the chunk's query heads, hd apart */
	const void	*k, *v;		/* its first KV head's row 0 */
	size_t		 kvst;		/* elements from a token's row to the next */
	unsigned	 nh;		/* live query heads of the chunk, <= 16 */
	unsigned	 T;		/* tokens the row sees */
	float		 scale;
	float		*m, *l, *o;	/* the chunk's state */
	float		*pm, *pl;	/* the page's partials, or NULL */
	const char	*pf;		/* the next page's lines to ask for */
	unsigned	 pfn;
};

/* A row's softmax state over a page, and how far it has asked for the
 * next page (pfn lines at pf): pk lines a KV head of a K row, pv a V
 * step, pfi so far. */
struct rowstate {
	__m512		 M, L, PL;	/* running max and sum, the page's sum */
	const char	*pf;
	unsigned	 pfn, pk, pv, pfi;
};

AVX512_INLINE void rowstate_init(struct rowstate *st, const struct rowpage *rp, const unsigned G,
				 const unsigned HV, const unsigned KV)
{
	const unsigned DW = G > 4 ? 2 : HV < 4 ? HV : 4, T = rp->T, pfn = rp->pfn;
	const __mmask16 live = (__mmask16)((1u << rp->nh) - 1);

	st->M = _mm512_maskz_loadu_ps(live, rp->m);
	st->L = _mm512_maskz_loadu_ps(live, rp->l);
	st->PL = _mm512_setzero_ps();
	st->pk = (pfn / 2 + KV * T - 1) / (KV * T);
	st->pv = (pfn - pfn / 2 + KV * (HV / DW) * T - 1) / (KV * (HV / DW) * T);
	st->pf = rp->pf;
	st->pfn = pfn;
	st->pfi = 0;
}

/* Ask for n more of the next page's lines. */
AVX512_INLINE void rowpage_pf(struct rowstate *st, unsigned n)
{
	for (unsigned i = 0; i < n && st->pfi < st->pfn; i++, st->pfi++)
		_mm_prefetch(st->pf + 64 * (size_t)st->pfi, _MM_HINT_T0);
}

/* S[t] lane h: head h against token t0 + t, t < n, scaled. */
AVX512_INLINE void rowpage_scores(const struct rowpage *rp, struct rowstate *st, unsigned t0,
				  unsigned n, __m512 *S, const unsigned G, const unsigned HV,
				  const int type, const unsigned KV)
{
	const unsigned hd = 16 * HV;

	for (unsigned t = 0; t < n; t++) {
		const size_t kr = (t0 + t) * rp->kvst;
		__m512 a[16];

UNROLL(16)
		for (unsigned i = 0; i < 16; i++)
			a[i] = _mm512_setzero_ps();
UNROLL(16)
		for (unsigned g = 0; g < KV; g++) {
			__m512 x[2];	/* x[1]: a block's second half, for odd d */

			rowpage_pf(st, st->pk);
UNROLL(8)
			for (unsigned d = 0; d < HV; d++) {
				/* a block of 32 at even d, 16 f16 or f32 at every d */
				if (kvt_kv_block(type) && d % 2)
					x[0] = x[1];
				else if (kvt_kv_block(type))
					kv_load32(rp->k, kr + g * hd + 16 * d, type, &x[0], &x[1]);
				else
					x[0] = kv_load16(kv_at(rp->k, kr + g * hd + 16 * d,
							       type == KVT_KV_F16), type == KVT_KV_F16);
				for (unsigned j = 0; j < G; j++)
					a[g * G + j] = _mm512_fmadd_ps(
						_mm512_loadu_ps(rp->q + (g * G + j) * hd + 16 * d), x[0],
						a[g * G + j]);
			}
		}
		S[t] = _mm512_mul_ps(hsum16x16(a), _mm512_set1_ps(rp->scale));
	}
}

/* The softmax step over S[0 .. n), then o = o c + P V over tokens t0 ..
 * t0 + n. */
AVX512_INLINE void rowpage_pv(const struct rowpage *rp, struct rowstate *st, unsigned t0,
			      unsigned n, __m512 *S, const unsigned G, const unsigned HV,
			      const int type, const unsigned KV)
{
	const unsigned hd = 16 * HV, DW = G > 4 ? 2 : HV < 4 ? HV : 4;
	float P[16][16] __attribute__((aligned(64))), cq[16] __attribute__((aligned(64)));
	__m512 mn = st->M, c;

	/* as fused_softmax's; the sum over the tokens in
	 * _mm512_reduce_add_ps's order (HRED4) */
	for (unsigned t = 0; t < n; t++)
		mn = _mm512_max_ps(mn, S[t]);
	c = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(st->M, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ),
				exp16(_mm512_sub_ps(st->M, mn)));
	for (unsigned t = 0; t < 16; t++) {
		S[t] = t < n ? exp16(_mm512_sub_ps(S[t], mn)) : _mm512_setzero_ps();
		_mm512_store_ps(P[t], S[t]);
	}
	for (unsigned w = 8; w; w >>= 1)
		for (unsigned t = 0; t < w; t++)
			S[t] = _mm512_add_ps(S[t], S[t + w]);
	st->L = _mm512_fmadd_ps(st->L, c, S[0]);
	st->PL = _mm512_fmadd_ps(st->PL, c, S[0]);
	st->M = mn;
	_mm512_store_ps(cq, c);
	/* a KV head's G queries and DW vectors of dims at a time in
	 * registers (eight queries: two vectors, sixteen sums) */
	for (unsigned g = 0; g < KV; g++)
		for (unsigned d = 0; d < hd; d += 16 * DW) {
			float *o = rp->o + g * G * hd + d;
			__m512 acc[8][4];

			for (unsigned j = 0; j < G; j++)
				for (unsigned i = 0; i < DW; i++)
					acc[j][i] = _mm512_mul_ps(_mm512_loadu_ps(o + j * hd + 16 * i),
								  _mm512_set1_ps(cq[g * G + j]));
			for (unsigned t = 0; t < n; t++) {
				const size_t vr = (t0 + t) * rp->kvst + g * hd + d;
				__m512 x[4];

				rowpage_pf(st, st->pv);
				for (unsigned i = 0; i < DW; i += 2)
					kv_load32(rp->v, vr + 16 * i, type, &x[i], &x[i + 1]);
				for (unsigned j = 0; j < G; j++) {
					__m512 p = _mm512_set1_ps(P[t][g * G + j]);

					for (unsigned i = 0; i < DW; i++)
						acc[j][i] = _mm512_fmadd_ps(p, x[i], acc[j][i]);
				}
			}
			for (unsigned j = 0; j < G; j++)
				for (unsigned i = 0; i < DW; i++)
					_mm512_storeu_ps(o + j * hd + 16 * i, acc[j][i]);
		}
}

AVX512_INLINE void rowpage_end(const struct rowpage *rp, const struct rowstate *st)
{
	const __mmask16 live = (__mmask16)((1u << rp->nh) - 1);

	_mm512_mask_storeu_ps(rp->m, live, st->M);
	_mm512_mask_storeu_ps(rp->l, live, st->L);
	if (rp->pm) {
		_mm512_mask_storeu_ps(rp->pm, live, st->M);
		_mm512_mask_storeu_ps(rp->pl, live, st->PL);
	}
}

AVX512_INLINE void rowpage_body(struct rowpage *rp, const unsigned G, const unsigned HV,
				const int type, const unsigned KV)
{
	struct rowstate st;

	rowstate_init(&st, rp, G, HV, KV);
	for (unsigned t0 = 0; t0 < rp->T; t0 += 16) {
		const unsigned n = rp->T - t0 < 16 ? rp->T - t0 : 16;
		__m512 S[16];

		rowpage_scores(rp, &st, t0, n, S, G, HV, type, KV);
		rowpage_pv(rp, &st, t0, n, S, G, HV, type, KV);
	}
	rowpage_end(rp, &st);
}

/* A full chunk (ROWPAGE_KV(G) KV heads, G each) with its KV heads known when
 * compiled, so the K loop unrolls and the sums stay in registers (through
 * memory they made the kernel a third slower); a short chunk counts them
 * at run time, f16 or f32 KV only (rowpage_pick). */
#define DEF_ROWPAGE(G, HV, name)							\
AVX512 static void name(struct rowpage *rp, int type)					\
{											\
	if (rp->nh < ROWPAGE_KV(G) * G && type == KVT_KV_F16)					\
		rowpage_body(rp, G, HV, KVT_KV_F16, (rp->nh + G - 1) / G);		\
	else if (rp->nh < ROWPAGE_KV(G) * G)							\
		rowpage_body(rp, G, HV, KVT_KV_F32, (rp->nh + G - 1) / G);		\
	else if (type == KVT_KV_F16)							\
		rowpage_body(rp, G, HV, KVT_KV_F16, ROWPAGE_KV(G));				\
	else if (type == KVT_KV_F32)							\
		rowpage_body(rp, G, HV, KVT_KV_F32, ROWPAGE_KV(G));				\
	else if (type == KVT_KV_Q8_0)							\
		rowpage_body(rp, G, HV, KVT_KV_Q8_0, ROWPAGE_KV(G));				\
	else										\
		rowpage_body(rp, G, HV, KVT_KV_Q4_0, ROWPAGE_KV(G));				\
}
DEF_ROWPAGE(1, 4, rowpage1_64)
DEF_ROWPAGE(2, 4, rowpage2_64)
DEF_ROWPAGE(3, 4, rowpage3_64)
DEF_ROWPAGE(4, 4, rowpage4_64)
DEF_ROWPAGE(5, 4, rowpage5_64)
DEF_ROWPAGE(6, 4, rowpage6_64)
DEF_ROWPAGE(7, 4, rowpage7_64)
DEF_ROWPAGE(8, 4, rowpage8_64)
DEF_ROWPAGE(1, 8, rowpage1_128)
DEF_ROWPAGE(2, 8, rowpage2_128)
DEF_ROWPAGE(3, 8, rowpage3_128)
DEF_ROWPAGE(4, 8, rowpage4_128)
DEF_ROWPAGE(5, 8, rowpage5_128)
DEF_ROWPAGE(6, 8, rowpage6_128)
DEF_ROWPAGE(7, 8, rowpage7_128)
DEF_ROWPAGE(8, 8, rowpage8_128)

/* The page for a decode row (ntok: the tokens it sees), a chunk of
 * ROWPAGE_KV(G) KV heads' queries at a time; the next page asked for a
 * share in each chunk, so that reads are in flight all through the page
 * (over the first chunk alone, Llama 3.2 3B's shape took 7 per cent
 * longer a step at 16K than the per-head kernels). */
static void rowpage_fold(struct kvt_attn_acc *a, void (*fn)(struct rowpage *, int),
			 const float *q, const void *k, const void *v, unsigned ntok,
			 float *pm, float *pl, const void *next, size_t next_bytes)
{
	const struct kvt_attn_shape *sh = &a->sh;
	const unsigned hd = sh->head_dim, G = sh->n_head / sh->n_kv_heads, C = ROWPAGE_KV(G) * G;
	const unsigned nc = (sh->n_head + C - 1) / C;

	if (!next) {
		size_t bytes = kvt_kv_bytes(sh->kv_type, (size_t)ntok * sh->n_kv_heads * hd);

		kvt_cpu_prefetch(k, bytes);
		kvt_cpu_prefetch(v, bytes);
	}
	for (unsigned h0 = 0; h0 < sh->n_head; h0 += C) {
		const size_t g0 = kvt_kv_bytes(sh->kv_type, (size_t)h0 / G * hd);
		struct rowpage rp = {
			.q = q + (size_t)h0 * hd, .k = (const char *)k + g0, .v = (const char *)v + g0,
			.kvst = (size_t)sh->n_kv_heads * hd, .T = ntok, .scale = sh->scale,
			.nh = sh->n_head - h0 < C ? sh->n_head - h0 : C,
			.m = a->m + h0, .l = a->l + h0, .o = a->o + (size_t)h0 * hd,
			.pm = pm ? pm + h0 : NULL, .pl = pm ? pl + h0 : NULL,
		};

		if (next) {	/* the chunk's share of it */
			const unsigned i = h0 / C;
			const size_t b0 = next_bytes * i / nc & ~(size_t)63;
			const size_t b1 = i + 1 == nc ? next_bytes : next_bytes * (i + 1) / nc & ~(size_t)63;

			rp.pf = (const char *)next + b0;
			rp.pfn = (unsigned)((b1 - b0 + 63) / 64);
		}
		fn(&rp, sh->kv_type);
	}
}

/* Decode over q8_0 and q4_0 KV, read in place (pg->q): each block
 * dequantized in registers (kvq_block, above), then the same sums in the
 * same order as the f32 kernels over a gathered page, so the same floats. */

/* K rows t .. t + TT of a page of T tokens (past T: row t again). */
static inline void kvq_rows(const struct attn_page *pg, unsigned t, unsigned T, unsigned TT,
			    int type, const uint8_t **k)
{
	for (unsigned j = 0; j < TT; j++)
		k[j] = (const uint8_t *)pg->k +
		       kvt_kv_bytes(type, (size_t)(t + j < T ? t + j : t) * pg->kst);
}

/* The eight sums a of NQ queries by 8 / NQ tokens from t, scaled, into S. */
AVX512_INLINE void scores8_put(const struct attn_page *pg, const __m512 a[8], unsigned t,
			       unsigned T, const unsigned NQ)
{
	float r[8];

	_mm256_storeu_ps(r, _mm256_mul_ps(hsum8x8(fold16(a[0]), fold16(a[1]), fold16(a[2]),
						  fold16(a[3]), fold16(a[4]), fold16(a[5]),
						  fold16(a[6]), fold16(a[7])),
					  _mm256_set1_ps(pg->scale)));
	for (unsigned j = 0; j < 8 / NQ && t + j < T; j++)
		for (unsigned s = 0; s < NQ; s++)
			pg->S[s * pg->sst + t + j] = r[j * NQ + s];
}

/* NQ (1, 2 or 4) queries against 8 / NQ tokens at a time: eight sums. */
AVX512_INLINE void scoresq_body(const struct attn_page *pg, const struct attn_group *gr,
				unsigned T, const unsigned NQ, int type)
{
	const unsigned TT = 8 / NQ;

	for (unsigned t = 0; t < T; t += TT) {
		const uint8_t *k[8];
		__m512 a[8];

		pf_part(pg, 0, t / TT, (T + TT - 1) / TT);
		kvq_rows(pg, t, T, TT, type, k);
		for (unsigned i = 0; i < 8; i++)
			a[i] = _mm512_setzero_ps();
		for (unsigned d = 0; d < pg->hd; d += 32) {
			size_t off = kvt_kv_bytes(type, d);

			for (unsigned j = 0; j < TT; j++) {
				__m512 x0, x1;

				kvq_block(k[j] + off, type, &x0, &x1);
				for (unsigned s = 0; s < NQ; s++) {
					a[j * NQ + s] = _mm512_fmadd_ps(_mm512_loadu_ps(gr->q[s] + d), x0,
									a[j * NQ + s]);
					a[j * NQ + s] = _mm512_fmadd_ps(_mm512_loadu_ps(gr->q[s] + d + 16), x1,
									a[j * NQ + s]);
				}
			}
		}
		scores8_put(pg, a, t, T, NQ);
	}
}

/* NQ queries' outputs over dims d .. d + 32 W (W blocks, 1 or 2). */
AVX512_INLINE void pvq_chunk(const struct attn_page *pg, const struct attn_group *gr,
			     unsigned t0, unsigned T, const unsigned NQ, int type, unsigned d,
			     const unsigned W)
{
	__m512 o[4][4], x[4];

	for (unsigned s = 0; s < NQ; s++)
		for (unsigned i = 0; i < 2 * W; i++)
			o[s][i] = _mm512_mul_ps(_mm512_loadu_ps(gr->o[s] + d + 16 * i),
						_mm512_set1_ps(gr->c[s]));
	for (unsigned t = t0; t < T; t++) {
		const uint8_t *vr = (const uint8_t *)pg->v + kvt_kv_bytes(type, (size_t)t * pg->vst + d);

		if (!d)
			pf_part(pg, 1, t, pg->pft);
		for (unsigned b = 0; b < W; b++)
			kvq_block(vr + kvt_kv_bytes(type, 32 * b), type, &x[2 * b], &x[2 * b + 1]);
		for (unsigned s = 0; s < NQ; s++) {
			__m512 p = _mm512_set1_ps(pg->S[s * pg->sst + t]);

			for (unsigned i = 0; i < 2 * W; i++)
				o[s][i] = _mm512_fmadd_ps(p, x[i], o[s][i]);
		}
	}
	for (unsigned s = 0; s < NQ; s++)
		for (unsigned i = 0; i < 2 * W; i++)
			_mm512_storeu_ps(gr->o[s] + d + 16 * i, o[s][i]);
}

AVX512_INLINE void pvq_body(const struct attn_page *pg, const struct attn_group *gr,
			    unsigned t0, unsigned T, const unsigned NQ, int type)
{
	unsigned d = 0;

	for (; d + 64 <= pg->hd; d += 64)
		pvq_chunk(pg, gr, t0, T, NQ, type, d, 2);
	if (d < pg->hd)
		pvq_chunk(pg, gr, t0, T, NQ, type, d, 1);
}

/* The kernels of NQ queries for scores_fn and pv_fn: the KV type made a
 * constant of each body. */
#define DEF_KVQ(target, NQ, scores, sbody, pv, pbody)				\
target static void scores(const struct attn_page *pg, const struct attn_group *gr,	\
			  unsigned T)						\
{										\
	if (pg->q == KVT_KV_Q8_0)						\
		sbody(pg, gr, T, NQ, KVT_KV_Q8_0);				\
	else									\
		sbody(pg, gr, T, NQ, KVT_KV_Q4_0);				\
}										\
target static void pv(const struct attn_page *pg, const struct attn_group *gr,	\
		      unsigned t0, unsigned T)					\
{										\
	if (pg->q == KVT_KV_Q8_0)						\
		pbody(pg, gr, t0, T, NQ, KVT_KV_Q8_0);				\
	else									\
		pbody(pg, gr, t0, T, NQ, KVT_KV_Q4_0);				\
}
DEF_KVQ(AVX512, 1, scoresq1, scoresq_body, pvq1, pvq_body)
DEF_KVQ(AVX512, 2, scoresq2, scoresq_body, pvq2, pvq_body)
DEF_KVQ(AVX512, 4, scoresq4, scoresq_body, pvq4, pvq_body)

/*
 * Decode scores on q8_0 and q4_0 K with each query rounded to q8_0, as
 * llama.cpp computes them (with kvt_cpu_int8_dots() on, the default, and
 * AVX512-VNNI and VBMI): per block of 32, d_k d_q times the dot product of
 * the 8-bit values, which VPDPBUSD takes four pairs at a time, unsigned K
 * by signed Q. K's bytes are unsigned as they stand (q4_0: q in 0..15) or
 * with 128 added (q8_0: the top bit flipped); 8 or 128 times the sum of
 * the query's bytes starts each sum, which takes the offset back out. A
 * chunk is 64 of K's bytes in one vector, picked out of the row by VPERMB:
 * two q8_0 blocks (lane l, four values, of block l / 8) or four q4_0 ones
 * (lane l of block l / 4, its low nibbles in one vector and its high ones
 * in another). The rounding is the only difference from the f32 kernels:
 * the sums are exact integers, and the floats that scale them few.
 */
#define VNNI		__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")))
#define VNNI_INLINE	static inline __attribute__((always_inline, \
			target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")))
#define KVQI_CH		4	/* chunks a row at most: head_dim up to 256 */

/* A query rounded to q8_0, laid out as K's chunks. */
struct kvqi {
	__m512i q[KVQI_CH][2];	/* its bytes (q4_0: those of the low nibbles, then the high) */
	__m512i c[KVQI_CH];	/* -(128 or 8) times each lane's sum of them */
	__m512	d[KVQI_CH];	/* each lane's block's d */
};

/* Where a chunk's bytes are in the 64 + 8 bytes of the row loaded: VPERMB
 * indexes of the values, then of the f16 scales (lane l: block l / 8 or
 * l / 4), for q8_0 and q4_0. */
static uint8_t kvqi_idx[2][2][64];

static void kvqi_idx_init(void)
{
	for (unsigned i = 0; i < 64; i++) {
		kvqi_idx[0][0][i] = (uint8_t)(i / 32 * Q8_SZ + 2 + i % 32);
		kvqi_idx[1][0][i] = (uint8_t)(i / 16 * Q4_SZ + 2 + i % 16);
	}
	for (unsigned l = 0; l < 16; l++)
		for (unsigned b = 0; b < 2; b++) {
			kvqi_idx[0][1][2 * l + b] = (uint8_t)(l / 8 * Q8_SZ + b);
			kvqi_idx[1][1][2 * l + b] = (uint8_t)(l / 4 * Q4_SZ + b);
		}
}

static pthread_once_t kvqi_once = PTHREAD_ONCE_INIT;

/* q (hd values) rounded as ggml's AVX quantize_row_q8_0: d = max |x| / 127
 * stored as f16, x 127 / max rounded to nearest even. */
VNNI_INLINE void kvqi_make(struct kvqi *r, const float *q, unsigned hd, int type)
{
	const unsigned bpc = type == KVT_KV_Q8_0 ? 2 : 4, nb = hd / QK;
	const __m512i ones = _mm512_set1_epi8(1);

	for (unsigned b = 0; b < nb; b++) {
		__m512 x0 = _mm512_loadu_ps(q + QK * b), x1 = _mm512_loadu_ps(q + QK * b + 16);
		float mx = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
		__m512 id = _mm512_set1_ps(mx != 0 ? 127.f / mx : 0.f);
		__m128i i0 = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x0, id)));
		__m128i i1 = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x1, id)));
		__m512 d = _mm512_set1_ps(_cvtsh_ss(_cvtss_sh(mx / 127.f, 0)));
		unsigned c = b / bpc, j = b % bpc;

		if (!j) {
			r->q[c][0] = r->q[c][1] = _mm512_setzero_si512();
			r->d[c] = _mm512_setzero_ps();
		}
		/* a 16-byte part placed by a mask of its four lanes */
		if (type == KVT_KV_Q8_0) {
			r->q[c][0] = _mm512_mask_broadcast_i32x4(r->q[c][0], 0xF << 8 * j, i0);
			r->q[c][0] = _mm512_mask_broadcast_i32x4(r->q[c][0], 0xF0 << 8 * j, i1);
			r->d[c] = _mm512_mask_mov_ps(r->d[c], 0xFF << 8 * j, d);
		} else {
			r->q[c][0] = _mm512_mask_broadcast_i32x4(r->q[c][0], 0xF << 4 * j, i0);
			r->q[c][1] = _mm512_mask_broadcast_i32x4(r->q[c][1], 0xF << 4 * j, i1);
			r->d[c] = _mm512_mask_mov_ps(r->d[c], 0xF << 4 * j, d);
		}
		if (j == bpc - 1 || b == nb - 1) {
			__m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, r->q[c][0]);

			if (type == KVT_KV_Q4_0)
				s = _mm512_dpbusd_epi32(s, ones, r->q[c][1]);
			r->c[c] = _mm512_sub_epi32(_mm512_setzero_si512(),
						   _mm512_slli_epi32(s, type == KVT_KV_Q8_0 ? 7 : 3));
		}
	}
}

/* A chunk of a K row at p (m0, m1: its bytes in the two loads) as
 * unsigned bytes, u0 and u1 (q4_0: the low nibbles, the high ones), and
 * each lane's block's d in dk. */
VNNI_INLINE void kvqi_load(const uint8_t *p, __mmask64 m0, __mmask64 m1, __m512i iq, __m512i id,
			   int q4, __m512i *u0, __m512i *u1, __m512 *dk)
{
	__m512i lo = _mm512_maskz_loadu_epi8(m0, p), hi = _mm512_maskz_loadu_epi8(m1, p + 64);
	__m512i x = _mm512_permutex2var_epi8(lo, iq, hi);

	*dk = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi8(lo, id, hi)));
	if (q4) {
		*u0 = _mm512_and_si512(x, _mm512_set1_epi8(0x0F));
		*u1 = _mm512_and_si512(_mm512_srli_epi16(x, 4), _mm512_set1_epi8(0x0F));
	} else {
		*u0 = *u1 = _mm512_xor_si512(x, _mm512_set1_epi8((char)0x80));
	}
}

/* a plus query r's products with chunk c of a K row (kvqi_load's). */
VNNI_INLINE __m512 kvqi_dot(const struct kvqi *r, unsigned c, __m512i u0, __m512i u1, __m512 dk,
			    int q4, __m512 a)
{
	__m512i acc = _mm512_dpbusd_epi32(r->c[c], u0, r->q[c][0]);

	if (q4)
		acc = _mm512_dpbusd_epi32(acc, u1, r->q[c][1]);
	return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), r->d[c]), dk, a);
}

/* NQ (1, 2 or 4) queries against 8 / NQ tokens at a time, as scoresq_body. */
VNNI_INLINE void scoresi_body(const struct attn_page *pg, const struct attn_group *gr,
			      unsigned T, const unsigned NQ, int type)
{
	const unsigned TT = 8 / NQ, q4 = type == KVT_KV_Q4_0, bpc = q4 ? 4 : 2;
	const unsigned nb = pg->hd / QK, nc = (nb + bpc - 1) / bpc;
	const size_t cb = kvt_kv_bytes(type, (size_t)QK * bpc);
	const __m512i iq = _mm512_loadu_si512(kvqi_idx[q4][0]);
	const __m512i id = _mm512_loadu_si512(kvqi_idx[q4][1]);
	__mmask64 m0[KVQI_CH], m1[KVQI_CH];
	struct kvqi qi[4];

	for (unsigned s = 0; s < NQ; s++)
		kvqi_make(&qi[s], gr->q[s], pg->hd, type);
	for (unsigned c = 0; c < nc; c++) {	/* the bytes of each chunk */
		size_t n = kvt_kv_bytes(type, (size_t)QK * (nb - c * bpc < bpc ? nb - c * bpc : bpc));

		m0[c] = n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
		m1[c] = n > 64 ? ((__mmask64)1 << (n - 64)) - 1 : 0;
	}
	for (unsigned t = 0; t < T; t += TT) {
		const uint8_t *k[8];
		__m512 a[8];

		pf_part(pg, 0, t / TT, (T + TT - 1) / TT);
		kvq_rows(pg, t, T, TT, type, k);
		for (unsigned i = 0; i < 8; i++)
			a[i] = _mm512_setzero_ps();
		for (unsigned c = 0; c < nc; c++)
			for (unsigned j = 0; j < TT; j++) {
				__m512i u0, u1;
				__m512 dk;

				kvqi_load(k[j] + c * cb, m0[c], m1[c], iq, id, q4, &u0, &u1, &dk);
				for (unsigned s = 0; s < NQ; s++)
					a[j * NQ + s] = kvqi_dot(&qi[s], c, u0, u1, dk, q4, a[j * NQ + s]);
			}
		scores8_put(pg, a, t, T, NQ);
	}
}

#define DEF_KVQI(NQ, scores)							\
VNNI static void scores(const struct attn_page *pg, const struct attn_group *gr,	\
			unsigned T)						\
{										\
	if (pg->q == KVT_KV_Q8_0)						\
		scoresi_body(pg, gr, T, NQ, KVT_KV_Q8_0);			\
	else									\
		scoresi_body(pg, gr, T, NQ, KVT_KV_Q4_0);			\
}
DEF_KVQI(1, scoresi1)
DEF_KVQI(2, scoresi2)
DEF_KVQI(4, scoresi4)

/* The integer scores run here: AVX512-VNNI and VBMI, with BW. */
static int kvqi_can(void)
{
	static int can = -1;	/* atomic; 1 only once kvqi_idx is made */
	int c = __atomic_load_n(&can, __ATOMIC_ACQUIRE);

	if (c < 0) {
		unsigned a, b, cx, d;

		c = __get_cpuid_count(7, 0, &a, &b, &cx, &d) && (b & bit_AVX512BW) &&
		    (cx & bit_AVX512VNNI) && (cx & bit_AVX512VBMI);
		if (c)
			pthread_once(&kvqi_once, kvqi_idx_init);
		__atomic_store_n(&can, c, __ATOMIC_RELEASE);
	}
	return c;
}

/* A decode row in address order (rowpage_body) on q8_0 and q4_0 K with
 * the queries rounded to q8_0: K's products in integers, as scoresi_body
 * takes them; the sixteen heads' sums reduced as rowpage_scores does. */
VNNI_INLINE void rowpagei_scores(const struct rowpage *rp, struct rowstate *st,
				 const struct kvqi *qi, unsigned t0, unsigned n, __m512 *S,
				 const unsigned G, const unsigned HV, const int type)
{
	const unsigned KV = ROWPAGE_KV(G), hd = 16 * HV, q4 = type == KVT_KV_Q4_0, bpc = q4 ? 4 : 2;
	const unsigned nb = hd / QK, nc = (nb + bpc - 1) / bpc;
	const size_t cb = kvt_kv_bytes(type, (size_t)QK * bpc);
	const __m512i iq = _mm512_loadu_si512(kvqi_idx[q4][0]);
	const __m512i id = _mm512_loadu_si512(kvqi_idx[q4][1]);

	for (unsigned t = 0; t < n; t++) {
		const uint8_t *kr = (const uint8_t *)rp->k + kvt_kv_bytes(type, (t0 + t) * rp->kvst);
		__m512 a[16];

UNROLL(16)
		for (unsigned i = 0; i < 16; i++)
			a[i] = _mm512_setzero_ps();
UNROLL(16)
		for (unsigned g = 0; g < KV; g++) {
			rowpage_pf(st, st->pk);
			for (unsigned c = 0; c < nc; c++) {
				const uint8_t *p = kr + kvt_kv_bytes(type, (size_t)g * hd) + c * cb;
				const size_t nbytes = kvt_kv_bytes(type, (size_t)QK *
								   (nb - c * bpc < bpc ? nb - c * bpc : bpc));
				const __mmask64 m0 = nbytes >= 64 ? ~(__mmask64)0 :
							((__mmask64)1 << nbytes) - 1;
				const __mmask64 m1 = nbytes > 64 ? ((__mmask64)1 << (nbytes - 64)) - 1 : 0;
				__m512i u0, u1;
				__m512 dk;

				kvqi_load(p, m0, m1, iq, id, q4, &u0, &u1, &dk);
				for (unsigned j = 0; j < G; j++)
					a[g * G + j] = kvqi_dot(&qi[g * G + j], c, u0, u1, dk, q4, a[g * G + j]);
			}
		}
		S[t] = _mm512_mul_ps(hsum16x16(a), _mm512_set1_ps(rp->scale));
	}
}

VNNI_INLINE void rowpagei_body(struct rowpage *rp, const unsigned G, const unsigned HV,
			       const int type)
{
	struct kvqi qi[16];
	struct rowstate st;

	for (unsigned h = 0; h < ROWPAGE_KV(G) * G; h++)
		kvqi_make(&qi[h], rp->q + h * 16 * HV, 16 * HV, type);
	rowstate_init(&st, rp, G, HV, ROWPAGE_KV(G));
	for (unsigned t0 = 0; t0 < rp->T; t0 += 16) {
		const unsigned n = rp->T - t0 < 16 ? rp->T - t0 : 16;
		__m512 S[16];

		rowpagei_scores(rp, &st, qi, t0, n, S, G, HV, type);
		rowpage_pv(rp, &st, t0, n, S, G, HV, type, ROWPAGE_KV(G));
	}
	rowpage_end(rp, &st);
}

/* Full chunks of sixteen heads only (rowpage_pick). */
#define DEF_ROWPAGEI(G, HV, name)						\
VNNI static void name(struct rowpage *rp, int type)				\
{										\
	if (type == KVT_KV_Q8_0)						\
		rowpagei_body(rp, G, HV, KVT_KV_Q8_0);				\
	else									\
		rowpagei_body(rp, G, HV, KVT_KV_Q4_0);				\
}
DEF_ROWPAGEI(1, 4, rowpagei1_64)
DEF_ROWPAGEI(2, 4, rowpagei2_64)
DEF_ROWPAGEI(3, 4, rowpagei3_64)
DEF_ROWPAGEI(4, 4, rowpagei4_64)
DEF_ROWPAGEI(5, 4, rowpagei5_64)
DEF_ROWPAGEI(6, 4, rowpagei6_64)
DEF_ROWPAGEI(7, 4, rowpagei7_64)
DEF_ROWPAGEI(8, 4, rowpagei8_64)
DEF_ROWPAGEI(1, 8, rowpagei1_128)
DEF_ROWPAGEI(2, 8, rowpagei2_128)
DEF_ROWPAGEI(3, 8, rowpagei3_128)
DEF_ROWPAGEI(4, 8, rowpagei4_128)
DEF_ROWPAGEI(5, 8, rowpagei5_128)
DEF_ROWPAGEI(6, 8, rowpagei6_128)
DEF_ROWPAGEI(7, 8, rowpagei7_128)
DEF_ROWPAGEI(8, 8, rowpagei8_128)

/* The kernel for a decode row of shape sh, or NULL: one to eight query
 * heads to a KV head, head sizes 64 and 128, chunks of ROWPAGE_KV(G) KV heads
 * (the last of f16 or f32 KV may be short); K's products in integers on
 * q8_0 and q4_0 when kvt_cpu_kv_int8. */
static void (*rowpage_pick(const struct kvt_attn_shape *sh))(struct rowpage *, int)
{
	typedef void (*rowpage_fn)(struct rowpage *, int);
	static const rowpage_fn fns[2][2][8] = {
		{ { rowpage1_64, rowpage2_64, rowpage3_64, rowpage4_64,
		    rowpage5_64, rowpage6_64, rowpage7_64, rowpage8_64 },
		  { rowpage1_128, rowpage2_128, rowpage3_128, rowpage4_128,
		    rowpage5_128, rowpage6_128, rowpage7_128, rowpage8_128 } },
		{ { rowpagei1_64, rowpagei2_64, rowpagei3_64, rowpagei4_64,
		    rowpagei5_64, rowpagei6_64, rowpagei7_64, rowpagei8_64 },
		  { rowpagei1_128, rowpagei2_128, rowpagei3_128, rowpagei4_128,
		    rowpagei5_128, rowpagei6_128, rowpagei7_128, rowpagei8_128 } },
	};
	const unsigned G = sh->n_head / sh->n_kv_heads, C = G && G <= 8 ? ROWPAGE_KV(G) * G : 0;
	const int blk = kvt_kv_block(sh->kv_type) != 0;

	if (sh->rows != 1 || kvt_cpu_simd() < 2 || !C ||
	    (sh->head_dim != 64 && sh->head_dim != 128) ||
	    (blk && sh->n_head % C))
		return NULL;
	return fns[blk && kvt_cpu_kv_int8()][sh->head_dim == 128][G - 1];
}

#endif

int kvt_cpu_attn_rowpage(const struct kvt_attn_shape *sh)
{
#ifdef KVT_X86
	if (rowpage_pick(sh))
		return kvt_kv_block(sh->kv_type) && kvt_cpu_kv_int8() ? 2 : 1;
#endif
	return 0;
}

int kvt_cpu_kv_int8(void)
{
#ifdef KVT_X86
	return kvt_cpu_simd() == 2 && kvt_cpu_int8_dots() && kvqi_can();
#else
	return 0;
#endif
}
#ifdef KVT_X86

/* The same on AVX2: 8 lanes, so a block is four vectors, and four
 * queries' outputs go two at a time (sixteen registers). */
AVX2_INLINE void kvq_block8(const uint8_t *b, int type, __m256 x[4])
{
	uint16_t h;

	memcpy(&h, b, sizeof(h));
	const __m256 d = _mm256_set1_ps(_cvtsh_ss(h));

	if (type == KVT_KV_Q8_0) {
		for (unsigned i = 0; i < 4; i++)
			x[i] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
				_mm_loadl_epi64((const __m128i *)(b + 2 + 8 * i)))));
	} else {
		const __m128i m4 = _mm_set1_epi8(0x0F), qs = _mm_loadu_si128((const __m128i *)(b + 2));
		const __m128i lo = _mm_and_si128(qs, m4), hi = _mm_and_si128(_mm_srli_epi16(qs, 4), m4);
		const __m128i q[4] = { lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8) };
		const __m256i eight = _mm256_set1_epi32(8);

		for (unsigned i = 0; i < 4; i++)
			x[i] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(
				_mm256_cvtepu8_epi32(q[i]), eight)));
	}
}

AVX2_INLINE void scoresq8_body(const struct attn_page *pg, const struct attn_group *gr,
			       unsigned T, const unsigned NQ, int type)
{
	const unsigned TT = 8 / NQ;

	for (unsigned t = 0; t < T; t += TT) {
		const uint8_t *k[8];
		__m256 a[8];
		float r[8];

		kvq_rows(pg, t, T, TT, type, k);
		for (unsigned i = 0; i < 8; i++)
			a[i] = _mm256_setzero_ps();
		for (unsigned d = 0; d < pg->hd; d += 32) {
			size_t off = kvt_kv_bytes(type, d);

			for (unsigned j = 0; j < TT; j++) {
				__m256 x[4];

				kvq_block8(k[j] + off, type, x);
				for (unsigned s = 0; s < NQ; s++)
					for (unsigned i = 0; i < 4; i++)
						a[j * NQ + s] = _mm256_fmadd_ps(
							_mm256_loadu_ps(gr->q[s] + d + 8 * i), x[i],
							a[j * NQ + s]);
			}
		}
		_mm256_storeu_ps(r, _mm256_mul_ps(hsum8x8(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]),
						  _mm256_set1_ps(pg->scale)));
		for (unsigned j = 0; j < TT && t + j < T; j++)
			for (unsigned s = 0; s < NQ; s++)
				pg->S[s * pg->sst + t + j] = r[j * NQ + s];
	}
}

/* Queries s0 .. s0 + NS (1 or 2) over one block of dims from d. */
AVX2_INLINE void pvq8_block(const struct attn_page *pg, const struct attn_group *gr,
			    unsigned t0, unsigned T, unsigned s0, const unsigned NS, int type,
			    unsigned d)
{
	__m256 o[2][4], x[4];

	for (unsigned s = 0; s < NS; s++)
		for (unsigned i = 0; i < 4; i++)
			o[s][i] = _mm256_mul_ps(_mm256_loadu_ps(gr->o[s0 + s] + d + 8 * i),
						_mm256_set1_ps(gr->c[s0 + s]));
	for (unsigned t = t0; t < T; t++) {
		kvq_block8((const uint8_t *)pg->v + kvt_kv_bytes(type, (size_t)t * pg->vst + d), type, x);
		for (unsigned s = 0; s < NS; s++) {
			__m256 p = _mm256_set1_ps(pg->S[(s0 + s) * pg->sst + t]);

			for (unsigned i = 0; i < 4; i++)
				o[s][i] = _mm256_fmadd_ps(p, x[i], o[s][i]);
		}
	}
	for (unsigned s = 0; s < NS; s++)
		for (unsigned i = 0; i < 4; i++)
			_mm256_storeu_ps(gr->o[s0 + s] + d + 8 * i, o[s][i]);
}

AVX2_INLINE void pvq8_body(const struct attn_page *pg, const struct attn_group *gr,
			   unsigned t0, unsigned T, const unsigned NQ, int type)
{
	for (unsigned d = 0; d < pg->hd; d += 32)
		for (unsigned s0 = 0; s0 < NQ; s0 += 2)
			pvq8_block(pg, gr, t0, T, s0, NQ == 1 ? 1 : 2, type, d);
}

DEF_KVQ(AVX2, 1, scoresq8_1, scoresq8_body, pvq8_1, pvq8_body)
DEF_KVQ(AVX2, 2, scoresq8_2, scoresq8_body, pvq8_2, pvq8_body)
DEF_KVQ(AVX2, 4, scoresq8_4, scoresq8_body, pvq8_4, pvq8_body)

/* S[0..nv) = e^(S - m), returning their sum. */
AVX2 static float exp_sum_avx2(float *S, unsigned nv, float m)
{
	__m256 mv = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
	unsigned t = 0;
	float sum;

	for (; t + 8 <= nv; t += 8) {
		__m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(S + t), mv));
		_mm256_storeu_ps(S + t, e);
		acc = _mm256_add_ps(acc, e);
	}
	sum = hsum8(acc);
	for (; t < nv; t++) {
		S[t] = expf(S[t] - m);
		sum += S[t];
	}
	return sum;
}

AVX512 static float exp_sum_avx512(float *S, unsigned nv, float m)
{
	__m512 mv = _mm512_set1_ps(m), acc = _mm512_setzero_ps();
	unsigned t = 0;
	float sum;

	for (; t + 16 <= nv; t += 16) {
		__m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(S + t), mv));
		_mm512_storeu_ps(S + t, e);
		acc = _mm512_add_ps(acc, e);
	}
	sum = hsum8(fold16(acc));
	for (; t < nv; t++) {
		S[t] = expf(S[t] - m);
		sum += S[t];
	}
	return sum;
}

/* max over S[0..nv), NaNs passed over as the scalar loop does. */
AVX2 static float max_avx2(const float *S, unsigned nv)
{
	__m256 a = _mm256_set1_ps(-INFINITY), b = a;
	__m128 x;
	unsigned t = 0;
	float m;

	for (; t + 16 <= nv; t += 16) {
		a = _mm256_max_ps(_mm256_loadu_ps(S + t), a);
		b = _mm256_max_ps(_mm256_loadu_ps(S + t + 8), b);
	}
	for (; t + 8 <= nv; t += 8)
		a = _mm256_max_ps(_mm256_loadu_ps(S + t), a);
	a = _mm256_max_ps(a, b);
	x = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	x = _mm_max_ps(x, _mm_movehl_ps(x, x));
	x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
	m = _mm_cvtss_f32(x);
	for (; t < nv; t++)
		m = S[t] > m ? S[t] : m;
	return m;
}
#endif

/* Step 2 for slot s of a group; T is the group's token count. */
static void softmax_step(const struct attn_page *pg, struct attn_group *gr, unsigned s,
			 unsigned T, int simd)
{
	float *S = pg->S + s * pg->sst, mx = -INFINITY, m_old = *gr->m[s], m, sum = 0;
	unsigned nv = gr->nv[s];

	if (!nv) {
		gr->c[s] = 1;
		memset(S, 0, T * sizeof(float));
		return;
	}
#ifdef KVT_X86
	if (simd)
		mx = max_avx2(S, nv);
	else
#endif
		for (unsigned t = 0; t < nv; t++)
			mx = S[t] > mx ? S[t] : mx;
	m = mx > m_old ? mx : m_old;
	gr->c[s] = m_old == -INFINITY ? 0 : expf(m_old - m);
#ifdef KVT_X86
	if (simd >= 2)
		sum = exp_sum_avx512(S, nv, m);
	else if (simd)
		sum = exp_sum_avx2(S, nv, m);
	else
#endif
		for (unsigned t = 0; t < nv; t++) {
			S[t] = expf(S[t] - m);
			sum += S[t];
		}
	if (nv < T)
		memset(S + nv, 0, (T - nv) * sizeof(float));
	*gr->l[s] = *gr->l[s] * gr->c[s] + sum;
	*gr->m[s] = m;
	if (gr->pm[s]) {
		*gr->pm[s] = m;
		*gr->pl[s] = sum;
	}
}

typedef void scores_fn(const struct attn_page *pg, const struct attn_group *gr, unsigned T);
typedef void pv_fn(const struct attn_page *pg, const struct attn_group *gr, unsigned t0,
		   unsigned T);
typedef void fused_fn(const struct attn_page *pg, struct attn_group *const *gr, unsigned T);

/* The kernels for one page, picked once per call: scores[n - 1] and
 * pv[n - 1] for a group in which only the first n queries may see
 * something (n = 1, 2, 4; NULL where only the four-wide ones exist);
 * fused[n - 1], where set, when those n all see the same T tokens, and
 * fused4x2 two such groups of four at once. */
struct attn_kernels {
	scores_fn *scores[4];
	pv_fn *pv[4];
	fused_fn *fused[4];
	fused_fn *fused4x2;
	int spread;		/* the kernels ask for pg->pf themselves */
	int simd;
};

/* pg's share of the next page, asked for at once. */
static void pf_burst(struct attn_page *pg)
{
	for (size_t off = 0; off < pg->pfn; off += 64)
		__builtin_prefetch(pg->pf + off, 0, 2);
	pg->pfn = 0;
}

/* The tokens T the group sees at most (0: none), and *n, how many of its
 * queries go to the kernels; *fuse, whether fused[*n - 1] takes them: each
 * of the first *n sees T, or is a filler (it writes into the dummy). */
static unsigned group_plan(const struct attn_group *gr, const struct attn_kernels *kn,
			   unsigned *n, int *fuse)
{
	unsigned T = 0, s = 0;

	for (unsigned i = 0; i < 4; i++)
		T = gr->nv[i] > T ? gr->nv[i] : T;
	/* Slots that see nothing keep their o, m and l (c = 1, S = 0): when
	 * only the first one or two see anything, they go alone. */
	*n = 4;
	if (!gr->nv[2] && !gr->nv[3])
		*n = gr->nv[1] ? 2 : 1;
	if (!kn->scores[*n - 1])
		*n = 4;
	while (s < *n && (gr->nv[s] == T || gr->pad >> s & 1))
		s++;
	*fuse = T && kn->fused[*n - 1] && s == *n;
	return T;
}

static void attend_group(struct attn_page *pg, struct attn_group *gr,
			 const struct attn_kernels *kn)
{
	unsigned n;
	int fuse;
	unsigned T = group_plan(gr, kn, &n, &fuse);

	if (!T)
		return;
	if (fuse) {
		kn->fused[n - 1](pg, &gr, T);
		pg->pfn = 0;
		return;
	}
	if (kn->fused[n - 1])
		pf_burst(pg);	/* the kernels below do not spread it */
	pg->pft = T;
	kn->scores[n - 1](pg, gr, T);
	for (unsigned s = 0; s < n; s++)
		softmax_step(pg, gr, s, T, kn->simd);
	for (unsigned t0 = 0; t0 < T; t0 += PV_TOK) {
		kn->pv[n - 1](pg, gr, t0, t0 + PV_TOK < T ? t0 + PV_TOK : T);
		gr->c[0] = gr->c[1] = gr->c[2] = gr->c[3] = 1;
	}
	pg->pfn = 0;
}

/* A quantized KV row run of nblk blocks into floats, as kvt_dequant does
 * it (d q and d (q - 8), exact), without its per-call dispatch: the
 * gather calls it for every token of a page, twice. */
#ifdef KVT_X86
AVX512 static void kv_run512(int kv_type, float *dst, const uint8_t *src, unsigned nblk)
{
	const size_t bs = kvt_kv_bytes(kv_type, QK);

	for (unsigned b = 0; b < nblk; b++, src += bs, dst += QK) {
		__m512 x0, x1;

		kvq_block(src, kv_type, &x0, &x1);
		_mm512_storeu_ps(dst, x0);
		_mm512_storeu_ps(dst + 16, x1);
	}
}
#endif

static void kv_run(int kv_type, float *dst, const uint8_t *src, unsigned nblk, int simd)
{
#ifdef KVT_X86
	if (simd >= 2) {
		kv_run512(kv_type, dst, src, nblk);
		return;
	}
#endif
	kvt_dequant((uint32_t)kvt_kv_block(kv_type), dst, src, nblk, simd);
}

/* The kernels for head_dim hd on this cpu. */
static void attn_kernels_pick(struct attn_kernels *kn, unsigned hd)
{
	*kn = (struct attn_kernels){ .scores = { [3] = scores4_scalar }, .pv = { [3] = pv4_scalar },
				     .simd = kvt_cpu_simd() };
#ifdef KVT_X86
	if (kn->simd >= 2 && hd % 16 == 0) {
		*kn = (struct attn_kernels){
			.scores = { scores1_avx512, scores2_avx512, NULL, scores4_avx512 },
			.pv = { pv1_avx512, pv2_avx512, NULL, pv4_avx512 }, .simd = kn->simd };
	} else if (kn->simd) {
		*kn = (struct attn_kernels){
			.scores = { scores1_avx2, scores2_avx2, NULL, scores4_avx2 },
			.pv = { pv1_avx2, pv2_avx2, NULL, pv4_avx2 }, .simd = kn->simd };
	}
#endif
}

/* KV head g's K and V rows of a page (ntok tokens) as f32, hd apart. */
static void gather_head(const struct kvt_attn_shape *sh, float *kf, float *vf, const void *k,
			const void *v, unsigned g, unsigned ntok, int simd)
{
	size_t kvst = (size_t)sh->n_kv_heads * sh->head_dim;
	unsigned hd = sh->head_dim;

	for (unsigned t = 0; t < ntok; t++) {
		size_t src = t * kvst + g * hd, dst = (size_t)t * hd;

		if (kvt_kv_block(sh->kv_type)) {
			size_t b = kvt_kv_bytes(sh->kv_type, src);

			kv_run(sh->kv_type, kf + dst, (const uint8_t *)k + b, hd / QK, simd);
			kv_run(sh->kv_type, vf + dst, (const uint8_t *)v + b, hd / QK, simd);
		} else if (sh->kv_type == KVT_KV_F16) {
			kvt_f16_to_f32(kf + dst, (const uint16_t *)k + src, hd);
			kvt_f16_to_f32(vf + dst, (const uint16_t *)v + src, hd);
		} else {
			memcpy(kf + dst, (const float *)k + src, hd * sizeof(float));
			memcpy(vf + dst, (const float *)v + src, hd * sizeof(float));
		}
	}
}

/* The query vectors of KV head g, four at a time, against the page pg
 * (ntok tokens at pos0; qpos NULL: every row sees all of them). The
 * scratch at a->s holds the dummy o, m and l, then pg->S. */
/* The group of query vectors i0 .. i0 + 3 of KV head g (query vector i:
 * row i / G, head g G + i % G); past the last, fillers. */
static void make_group(struct kvt_attn_acc *a, struct attn_group *gr, unsigned g, unsigned i0,
		       const float *q, const uint32_t *qpos, uint32_t pos0, unsigned ntok,
		       float *pm, float *pl)
{
	const struct kvt_attn_shape *sh = &a->sh;
	unsigned G = sh->n_head / sh->n_kv_heads, hd = sh->head_dim, nq = sh->rows * G;
	float *dummy = a->s;

	gr->pad = 0;
	for (unsigned s = 0; s < 4; s++) {
		unsigned i = i0 + s, r = i / G;
		size_t rh = (size_t)r * sh->n_head + g * G + i % G;

		if (i >= nq) {
			gr->q[s] = gr->q[0];
			gr->o[s] = dummy;
			gr->m[s] = dummy + hd;
			gr->l[s] = dummy + hd + 1;
			gr->pm[s] = gr->pl[s] = NULL;
			gr->nv[s] = 0;
			gr->pad |= 1u << s;
			continue;
		}
		gr->q[s] = q + rh * hd;
		gr->o[s] = a->o + rh * hd;
		gr->m[s] = a->m + rh;
		gr->l[s] = a->l + rh;
		gr->pm[s] = pm ? pm + rh : NULL;
		gr->pl[s] = pm ? pl + rh : NULL;
		gr->nv[s] = qpos ? visible(qpos[r], pos0, ntok) : ntok;
	}
}

static void fold_head(struct kvt_attn_acc *a, struct attn_page *pg,
		      const struct attn_kernels *kn, unsigned g, const float *q,
		      const uint32_t *qpos, uint32_t pos0, unsigned ntok, float *pm, float *pl)
{
	const struct kvt_attn_shape *sh = &a->sh;
	unsigned nq = sh->rows * (sh->n_head / sh->n_kv_heads);

	for (unsigned i0 = 0; i0 < nq; i0 += 4) {
		struct attn_group gr[2], *two[2] = { &gr[0], &gr[1] };
		unsigned n0, n1, T0, T1;
		int f0, f1;

		make_group(a, &gr[0], g, i0, q, qpos, pos0, ntok, pm, pl);
		if (!kn->fused4x2 || i0 + 4 >= nq) {
			attend_group(pg, &gr[0], kn);
			continue;
		}
		/* two groups of four that fuse, as with eight query heads to
		 * a KV head, go together */
		make_group(a, &gr[1], g, i0 + 4, q, qpos, pos0, ntok, pm, pl);
		i0 += 4;
		T0 = group_plan(&gr[0], kn, &n0, &f0);
		T1 = group_plan(&gr[1], kn, &n1, &f1);
		if (f0 && f1 && n0 == 4 && n1 == 4 && T0 == T1) {
			kn->fused4x2(pg, two, T0);
			pg->pfn = 0;
			continue;
		}
		attend_group(pg, &gr[0], kn);
		attend_group(pg, &gr[1], kn);
	}
}

/* a->s at least need floats: 0 or -ENOMEM. */
static int attn_scratch(struct kvt_attn_acc *a, size_t need)
{
	if (need > a->s_cap) {
		float *s = realloc(a->s, need * sizeof(float));
		if (!s)
			return -ENOMEM;
		a->s = s;
		a->s_cap = need;
	}
	return 0;
}

/* The gathered pages keep K turned on its side where the cpu has
 * AVX-512 (scores4t_avx512), else as rows. */
static int pend_kt(unsigned hd)
{
#ifdef KVT_X86
	return kvt_cpu_simd() >= 2 && hd % 16 == 0;
#else
	return 0;
#endif
}

void kvt_attn_flush(struct kvt_attn_acc *a)
{
	const struct kvt_attn_shape *sh = &a->sh;
	unsigned hd = sh->head_dim;
	struct attn_page pg = { .sst = a->pn, .hd = hd, .scale = sh->scale, .kst = hd, .vst = hd };
	struct attn_kernels kn;

	if (!a->pn)
		return;
	attn_kernels_pick(&kn, hd);
#ifdef KVT_X86
	if (a->pkt) {
		kn.scores[0] = kn.scores[1] = kn.scores[3] = scores4t_avx512;
		pg.kst = KVT_ATTN_PEND;
	}
#endif
	memset(a->s, 0, (hd + 2) * sizeof(float));	/* room made when the pages came */
	pg.S = a->s + hd + 2;
	for (unsigned g = 0; g < sh->n_kv_heads; g++) {
		pg.k = a->pk + (size_t)g * 2 * KVT_ATTN_PEND * hd;
		pg.v = (const float *)pg.k + (size_t)KVT_ATTN_PEND * hd;
		fold_head(a, &pg, &kn, g, a->pq, NULL, 0, a->pn, NULL, NULL);
	}
	a->pn = 0;
}

/* A page every row sees whole, gathered to be folded with the next:
 * 0 or -ENOMEM. */
static int attn_pend(struct kvt_attn_acc *a, const float *q, const void *k, const void *v,
		     unsigned ntok, int simd)
{
	const struct kvt_attn_shape *sh = &a->sh;
	unsigned hd = sh->head_dim;
	int r;

	int kt = pend_kt(hd);

	if (a->pn && (a->pq != q || a->pn + ntok > KVT_ATTN_PEND || a->pkt != kt))
		kvt_attn_flush(a);
	if (!a->pk) {
		/* zeroed: the AVX-512 scores read whole vectors past the tokens */
		a->pk = calloc((size_t)(sh->n_kv_heads * 2 + 1) * KVT_ATTN_PEND * hd, sizeof(float));
		if (!a->pk)
			return -ENOMEM;
	}
	/* the scores, and the rows of K before they are turned */
	if ((r = attn_scratch(a, hd + 2 + 4 * (size_t)KVT_ATTN_PEND)))
		return r;
	for (unsigned g = 0; g < sh->n_kv_heads; g++) {
		float *kb = a->pk + (size_t)g * 2 * KVT_ATTN_PEND * hd, *vb = kb + (size_t)KVT_ATTN_PEND * hd;
		float *rows = a->pk + (size_t)sh->n_kv_heads * 2 * KVT_ATTN_PEND * hd;

		if (!kt) {
			gather_head(sh, kb + (size_t)a->pn * hd, vb + (size_t)a->pn * hd, k, v, g, ntok,
				    simd);
			continue;
		}
		gather_head(sh, rows, vb + (size_t)a->pn * hd, k, v, g, ntok, simd);
		for (unsigned t = 0; t < ntok; t++)
			for (unsigned d = 0; d < hd; d++)
				kb[(size_t)d * KVT_ATTN_PEND + a->pn + t] = rows[(size_t)t * hd + d];
	}
	a->pkt = kt;
	a->pn += ntok;
	a->pq = q;
	return 0;
}

/*
 * Scratch in a->s, in floats: a dummy o, m and l (hd + 2), the scores
 * (4, ntok), and when K and V are gathered (see above) one KV head's K and
 * V rows of the page (2, nmax, hd), nmax the most tokens any row sees.
 */
int kvt_attn_page(struct kvt_attn_acc *a, const float *q, const uint32_t *qpos,
		  const void *k, const void *v, unsigned ntok, uint32_t pos0)
{
	return kvt_attn_page_partial(a, q, qpos, k, v, ntok, pos0, NULL, NULL);
}

int kvt_attn_page_partial(struct kvt_attn_acc *a, const float *q, const uint32_t *qpos,
			  const void *k, const void *v, unsigned ntok, uint32_t pos0,
			  float *pm, float *pl)
{
	return kvt_attn_page_ahead(a, q, qpos, k, v, ntok, pos0, pm, pl, NULL, 0);
}

int kvt_attn_page_ahead(struct kvt_attn_acc *a, const float *q, const uint32_t *qpos,
			const void *k, const void *v, unsigned ntok, uint32_t pos0,
			float *pm, float *pl, const void *next, size_t next_bytes)
{
	const struct kvt_attn_shape *sh = &a->sh;
	unsigned G = sh->n_head / sh->n_kv_heads, hd = sh->head_dim, nq = sh->rows * G;
	unsigned nmax = 0, nmin = ntok;
	size_t need, kvst = (size_t)sh->n_kv_heads * hd;
	struct attn_page pg = { .sst = ntok, .hd = hd, .scale = sh->scale };
	struct attn_kernels kn;
	int gather = 1, pend, ret;
#ifdef KVT_X86
	void (*row)(struct rowpage *, int);
#endif

	attn_kernels_pick(&kn, hd);
#ifdef KVT_X86
	/* Decode reads K and V in place, q8_0 and q4_0 through kernels of
	 * their own; the portable kernels take f32 only. */
	if (kn.simd && nq <= ATTN_INPLACE_NQ && !kvt_kv_block(sh->kv_type))
		gather = 0;
	if (!gather && kn.simd >= 2 && hd % 16 == 0 && !kvt_kv_block(sh->kv_type)) {
		kn.fused[0] = fused1_avx512;
		kn.fused[1] = fused2_avx512;
		kn.fused[3] = fused4_avx512;
		kn.fused4x2 = fused4x2_avx512;
		kn.spread = 1;
	}
	if (kn.simd >= 2 && nq <= ATTN_INPLACE_NQ && kvt_kv_block(sh->kv_type)) {
		kn = (struct attn_kernels){ .scores = { scoresq1, scoresq2, NULL, scoresq4 },
					    .pv = { pvq1, pvq2, NULL, pvq4 }, .simd = kn.simd };
		if (hd <= 2 * QK * KVQI_CH && kvt_cpu_kv_int8())
			kn.scores[0] = scoresi1, kn.scores[1] = scoresi2, kn.scores[3] = scoresi4;
		kn.spread = 1;
		gather = 0;
	} else if (kn.simd == 1 && nq <= ATTN_INPLACE_NQ && kvt_kv_block(sh->kv_type)) {
		kn = (struct attn_kernels){ .scores = { scoresq8_1, scoresq8_2, NULL, scoresq8_4 },
					    .pv = { pvq8_1, pvq8_2, NULL, pvq8_4 }, .simd = kn.simd };
		gather = 0;
	}
#endif
	for (unsigned r = 0; r < sh->rows; r++) {
		unsigned nv = visible(qpos[r], pos0, ntok);
		nmax = nv > nmax ? nv : nmax;
		nmin = nv < nmin ? nv : nmin;
	}
	if (pm)
		for (size_t i = 0; i < (size_t)sh->rows * sh->n_head; i++) {
			pm[i] = -INFINITY;
			pl[i] = 0;
		}
	/* Every row sees the whole page: gathered, to be folded with the next */
	pend = gather && nq > 4 && !pm && nmin == ntok && ntok <= KVT_ATTN_PEND;
	if (next && (!nmax || pend))
		kvt_cpu_prefetch(next, next_bytes);
	if (!nmax)
		return 0;
	if (pend)
		return attn_pend(a, q, k, v, ntok, kn.simd);
#ifdef KVT_X86
	if ((row = rowpage_pick(sh)) != NULL) {
		rowpage_fold(a, row, q, k, v, nmax, pm, pl, next, next_bytes);
		return 0;
	}
#endif
	need = hd + 2 + 4 * (size_t)ntok;
	if (gather)
		need += 2 * (size_t)nmax * hd;
	if ((ret = attn_scratch(a, need)))
		return ret;
	memset(a->s, 0, (hd + 2) * sizeof(float));
	pg.S = a->s + hd + 2;

#ifdef KVT_X86
	/* Read in place, each KV head walks the page's rows kvst apart, a
	 * stride that leaves the hardware prefetchers behind: ask for the
	 * whole page up front, which at 16K tokens of MHA decode made the
	 * step 1.4 times faster on a Xeon (kvt-bench prefill,
	 * docs/benchmarks.md). Not when the kernels that spread the next
	 * page's reads over their work are told of one (below): this page
	 * came in while the last was folded. */
	if (!gather && (!kn.spread || !next)) {
		size_t bytes = kvt_kv_bytes(sh->kv_type, (size_t)nmax * kvst);

		kvt_cpu_prefetch(k, bytes);
		kvt_cpu_prefetch(v, bytes);
	}
#endif
	for (unsigned g = 0; g < sh->n_kv_heads; g++) {
		/* The next page's share for this head, so that its reads run
		 * while this page is folded rather than all at once before
		 * it. The fused and the quantized kernels spread it over their
		 * loops, a line or two between the products (pf_step, pf_part);
		 * the others ask for it here, into
		 * L2 (prefetcht1), which measured faster than into L1 or L3 at
		 * 16K (docs/benchmarks.md). A burst waits once the line fill
		 * buffers are full, and then nothing is computed meanwhile. */
		pg.pf = NULL;
		pg.pfn = 0;
		if (next) {
			size_t b0 = next_bytes * g / sh->n_kv_heads & ~(size_t)63;
			size_t b1 = g + 1 == sh->n_kv_heads ? next_bytes :
				    next_bytes * (g + 1) / sh->n_kv_heads & ~(size_t)63;

			pg.pf = (const char *)next + b0;
			pg.pfn = b1 - b0;
			if (!kn.spread)
				pf_burst(&pg);
		}
		if (gather) {
			float *kf = pg.S + 4 * (size_t)ntok, *vf = kf + (size_t)nmax * hd;

			gather_head(sh, kf, vf, k, v, g, nmax, kn.simd);
			pg.k = kf;
			pg.v = vf;
			pg.kst = pg.vst = hd;
			pg.f16 = 0;
		} else if (kvt_kv_block(sh->kv_type)) {
			pg.k = (const uint8_t *)k + kvt_kv_bytes(sh->kv_type, (size_t)g * hd);
			pg.v = (const uint8_t *)v + kvt_kv_bytes(sh->kv_type, (size_t)g * hd);
			pg.kst = pg.vst = kvst;
			pg.q = sh->kv_type;
		} else if (sh->kv_type == KVT_KV_F16) {
			pg.k = (const uint16_t *)k + g * hd;
			pg.v = (const uint16_t *)v + g * hd;
			pg.kst = pg.vst = kvst;
			pg.f16 = 1;
		} else {
			pg.k = (const float *)k + g * hd;
			pg.v = (const float *)v + g * hd;
			pg.kst = pg.vst = kvst;
			pg.f16 = 0;
		}
		fold_head(a, &pg, &kn, g, q, qpos, pos0, ntok, pm, pl);
	}
	return 0;
}

void kvt_attn_merge(struct kvt_attn_acc *dst, struct kvt_attn_acc *src)
{
	size_t nh = (size_t)dst->sh.rows * dst->sh.n_head;
	unsigned hd = dst->sh.head_dim;

	kvt_attn_flush(dst);
	kvt_attn_flush(src);
	for (size_t i = 0; i < nh; i++) {
		float sm = src->m[i], dm = dst->m[i], m, cd, cs;
		float *o = dst->o + i * hd;
		const float *so = src->o + i * hd;

		if (sm == -INFINITY)
			continue;
		if (dm == -INFINITY) {
			dst->m[i] = sm;
			dst->l[i] = src->l[i];
			memcpy(o, so, hd * sizeof(float));
			continue;
		}
		m = sm > dm ? sm : dm;
		cd = expf(dm - m);
		cs = expf(sm - m);
		dst->m[i] = m;
		dst->l[i] = dst->l[i] * cd + src->l[i] * cs;
		for (unsigned d = 0; d < hd; d++)
			o[d] = o[d] * cd + so[d] * cs;
	}
}

void kvt_attn_mass(struct kvt_attn_acc *a, const float *pm, const float *pl,
		   unsigned n_pages, float *mass)
{
	size_t nh = (size_t)a->sh.rows * a->sh.n_head, n = 0;
	float inv;

	kvt_attn_flush(a);
	for (unsigned j = 0; j < n_pages; j++)
		mass[j] = 0;
	for (size_t i = 0; i < nh; i++) {
		float M = a->m[i], L = a->l[i];

		if (!(L > 0))
			continue;
		n++;
		for (unsigned j = 0; j < n_pages; j++) {
			float m = pm[j * nh + i], l = pl[j * nh + i];

			if (l > 0)
				mass[j] += expf(m - M) * l / L;
		}
	}
	if (!n)
		return;
	inv = 1.0f / (float)n;
	for (unsigned j = 0; j < n_pages; j++)
		mass[j] *= inv;
}

void kvt_attn_finish(struct kvt_attn_acc *a, float *out)
{
	size_t nh = (size_t)a->sh.rows * a->sh.n_head;
	unsigned hd = a->sh.head_dim;

	kvt_attn_flush(a);
	for (size_t i = 0; i < nh; i++) {
		float inv = a->l[i] > 0 ? 1.0f / a->l[i] : 0;
		for (unsigned d = 0; d < hd; d++)
			out[i * hd + d] = a->o[i * hd + d] * inv;
	}
}

/* One query head's bound over one KV head's page bounds: the portable
 * path, summed in eight lanes as the AVX2 path below does. */
static float key_bound(const float *q, const float *mn, const float *mx, unsigned hd)
{
	float acc[8] = { 0 }, sum = 0;
	unsigned i = 0;

	for (; i + 8 <= hd; i += 8)
		for (unsigned j = 0; j < 8; j++) {
			float a = q[i + j] * mn[i + j], b = q[i + j] * mx[i + j];
			acc[j] += a > b ? a : b;
		}
	for (; i < hd; i++) {
		float a = q[i] * mn[i], b = q[i] * mx[i];
		sum += a > b ? a : b;
	}
	for (unsigned j = 0; j < 8; j++)
		sum += acc[j];
	return sum;
}

#ifdef KVT_X86
/* The same for head_dim a multiple of 8, eight dims a step; the bounds of
 * a KV head are read once for all the query heads of its group. */
AVX2 static void key_bound_avx2(const struct kvt_attn_shape *sh, const float *q,
				const float *bounds, unsigned n_pages, float *score)
{
	unsigned G = sh->n_head / sh->n_kv_heads, hd = sh->head_dim;
	size_t pst = (size_t)sh->n_kv_heads * 2 * hd;

	for (unsigned j = 0; j < n_pages; j++) {
		const float *b = bounds + j * pst;
		float best = -INFINITY;

		for (unsigned g = 0; g < sh->n_kv_heads; g++) {
			const float *mn = b + (size_t)g * 2 * hd, *mx = mn + hd;

			for (unsigned h = g * G; h < (g + 1) * G; h++) {
				const float *qh = q + (size_t)h * hd;
				__m256 acc = _mm256_setzero_ps();
				__m128 lo;
				float u;

				for (unsigned i = 0; i < hd; i += 8) {
					__m256 qv = _mm256_loadu_ps(qh + i);
					__m256 a = _mm256_mul_ps(qv, _mm256_loadu_ps(mn + i));
					__m256 c = _mm256_mul_ps(qv, _mm256_loadu_ps(mx + i));

					acc = _mm256_add_ps(acc, _mm256_max_ps(a, c));
				}
				lo = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
				lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
				lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
				u = _mm_cvtss_f32(lo);
				best = u > best ? u : best;
			}
		}
		score[j] = best * sh->scale;
	}
}
#endif

void kvt_attn_key_bound(const struct kvt_attn_shape *sh, const float *q, const float *bounds,
			unsigned n_pages, float *score)
{
	unsigned G, hd = sh->head_dim;
	size_t pst = (size_t)sh->n_kv_heads * 2 * hd;

	if (!shape_ok(sh))
		return;
#ifdef KVT_X86
	if (kvt_cpu_simd() && hd % 8 == 0) {
		key_bound_avx2(sh, q, bounds, n_pages, score);
		return;
	}
#endif
	G = sh->n_head / sh->n_kv_heads;
	for (unsigned j = 0; j < n_pages; j++) {
		const float *b = bounds + j * pst;
		float best = -INFINITY;

		for (unsigned h = 0; h < sh->n_head; h++) {
			const float *mn = b + (size_t)(h / G) * 2 * hd;
			float u = key_bound(q + (size_t)h * hd, mn, mn + hd, hd);

			best = u > best ? u : best;
		}
		score[j] = best * sh->scale;
	}
}

/* Value i of a KV row run; q8_0 and q4_0 as llama.cpp dequantizes them
 * (q * d, (q - 8) * d). */
static inline float kv_val(const void *p, int type, size_t i)
{
	if (type == KVT_KV_Q8_0 || type == KVT_KV_Q4_0) {
		const uint8_t *b = (const uint8_t *)p + kvt_kv_bytes(type, i / QK * QK);
		uint16_t d;

		memcpy(&d, b, 2);
		if (type == KVT_KV_Q8_0)
			return (int8_t)b[2 + i % QK] * h2f(d);
		return ((b[2 + i % 16] >> (i % QK >= 16 ? 4 : 0) & 0xF) - 8) * h2f(d);
	}
	return type == KVT_KV_F16 ? h2f(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

int kvt_attn_dense(const struct kvt_attn_shape *sh, float *out, const float *q,
		   const uint32_t *qpos, const void *k, const void *v, unsigned n_ctx)
{
	unsigned G, hd = sh->head_dim;
	size_t kvst = (size_t)sh->n_kv_heads * hd;
	double *s, *acc;

	if (!shape_ok(sh))
		return -EINVAL;
	G = sh->n_head / sh->n_kv_heads;
	s = malloc(((size_t)n_ctx + hd + 1) * sizeof(double));
	if (!s)
		return -ENOMEM;
	acc = s + n_ctx;
	for (unsigned r = 0; r < sh->rows; r++)
		for (unsigned h = 0; h < sh->n_head; h++) {
			const float *qv = q + ((size_t)r * sh->n_head + h) * hd;
			float *ov = out + ((size_t)r * sh->n_head + h) * hd;
			size_t kh = (size_t)(h / G) * hd;
			unsigned n = qpos[r] >= n_ctx ? n_ctx : qpos[r] + 1;
			double mx = -INFINITY, sum = 0;

			for (unsigned t = 0; t < n; t++) {
				double d = 0;
				for (unsigned i = 0; i < hd; i++)
					d += (double)qv[i] * kv_val(k, sh->kv_type, t * kvst + kh + i);
				s[t] = d * sh->scale;
				mx = s[t] > mx ? s[t] : mx;
			}
			memset(acc, 0, hd * sizeof(double));
			for (unsigned t = 0; t < n; t++) {
				double p = exp(s[t] - mx);
				sum += p;
				for (unsigned i = 0; i < hd; i++)
					acc[i] += p * kv_val(v, sh->kv_type, t * kvst + kh + i);
			}
			for (unsigned i = 0; i < hd; i++)
				ov[i] = n ? (float)(acc[i] / sum) : 0.0f;
		}
	free(s);
	return 0;
}
