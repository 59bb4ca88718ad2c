/* SPDX-License-Identifier: MIT */
/*
 * Integer dot products on 8-bit activations (qdots.h).
 *
 * The arithmetic, for a weight block with scale dw against x's block with
 * scale dx (the K-quants: x's block of 256 holds the weight's whole
 * super-block):
 *
 *   q4_0  dw dx sum (q - 8) xq          = dw dx (sum q xq - 8 sum xq)
 *   q5_0  dw dx sum (q - 16) xq
 *   q8_0  dw dx sum q xq
 *   q4_1  dw dx sum q xq  +  m dx sum xq                  (q5_1 alike)
 *   q2_k  d dx sum_g sc_g sum q xq  -  dmin dx sum_g mn_g sum xq   (g: 16 x 16)
 *   q3_k  d dx sum_g sc_g (sum q xq - 4 sum xq)                    (g: 16 x 16)
 *   q4_k  d dx sum_j sc_j sum q xq  -  dmin dx sum_j mn_j sum xq   (j: 8 x 32)
 *   q5_k  as q4_k
 *   q6_k  d dx sum_g sc_g (sum q xq - 32 sum xq)                   (g: 16 x 16)
 *
 * with q the stored quants (0..15 for q4_0, q4_1 and q4_k; 0..31 for
 * q5_0, q5_1 and q5_k; -128..127 for q8_0; 0..3 for q2_k; 0..7 for q3_k,
 * its high bit set where the mask's is; 0..63 for q6_k), q3_k's sc_g its
 * 6-bit scales less 32, and the sums of xq over 16 values precomputed
 * (kvt_xq.s). Every sum over a block is an exact integer: vpmaddubsw
 * multiplies the unsigned quants by x's signed bytes and adds pairs into
 * int16 (at most 2 * 63 * 127, or 2 * 128 * 127 for q8_0, whose sign moves
 * onto x as q4_0's and q5_0's do), and vpmaddwd adds pairs of those into
 * int32, times the sub-block scales where the type has them (q3_k's and
 * q6_k's signed). The AVX-512BW kernels take 64 values a vector, the AVX2
 * ones 32. q4_0, q4_1, q5_0 and q5_1 have a third kernel, on AVX512-VNNI,
 * VBMI and GFNI (q4x_vnni): vpdpbusd sums four products into int32 at
 * once, and q4_0's -8 (q5_0's -16) enters as a sum of x rather than as
 * signs.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/compute.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/qdots.h"
#include "kernels/cpu/quants.h"

#if defined(__x86_64__) || defined(__i386__)
#define KVT_X86 1
#include <cpuid.h>
#include <immintrin.h>
#define I8		__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define I8_INLINE	static inline __attribute__((always_inline, \
			target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define IV		__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi," \
						   "gfni,avx2,fma,f16c")))
#define IV_INLINE	static inline __attribute__((always_inline, \
			target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,gfni,avx2,fma,f16c")))
#define I2		__attribute__((target("avx2,fma,f16c")))
#define I2_INLINE	static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* vpmaddubsw and the masks on 512 bits: AVX-512BW (and VL), beyond
 * kvt_cpu_simd()'s level 2. */
static int have_bw(void)
{
	static int have = -1;
	int h = __atomic_load_n(&have, __ATOMIC_RELAXED);

	if (h < 0) {
		unsigned a, b, c, d;

		h = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_AVX512BW) &&
		    (b & bit_AVX512VL);
		__atomic_store_n(&have, h, __ATOMIC_RELAXED);
	}
	return h;
}

/* vpdpbusd, vpermt2b and gf2p8affineqb on 512 bits: AVX512-VNNI, VBMI and
 * GFNI, with BW. */
static int have_vnni(void)
{
	static int have = -1;
	int h = __atomic_load_n(&have, __ATOMIC_RELAXED);

	if (h < 0) {
		unsigned a, b, c, d;

		h = have_bw() && __get_cpuid_count(7, 0, &a, &b, &c, &d) &&
		    (c & bit_AVX512VNNI) && (c & bit_AVX512VBMI) && (c & bit_GFNI);
		__atomic_store_n(&have, h, __ATOMIC_RELAXED);
	}
	return h;
}
#endif

static int int8_on = -1;	/* atomic; -1: not read from the environment yet */

void kvt_cpu_set_int8_dots(int on)
{
	__atomic_store_n(&int8_on, !!on, __ATOMIC_RELAXED);
}

int kvt_cpu_int8_dots(void)
{
	int on = __atomic_load_n(&int8_on, __ATOMIC_RELAXED);

	if (on < 0) {
		const char *e = getenv("KVT_EXACT_DOTS");

		on = !(e && *e && strcmp(e, "0"));
		__atomic_store_n(&int8_on, on, __ATOMIC_RELAXED);
	}
	return on;
}

unsigned kvt_xq_blk(uint32_t wtype)
{
	switch (wtype) {
	case KVT_W_Q4_0: case KVT_W_Q4_1: case KVT_W_Q5_0: case KVT_W_Q5_1: case KVT_W_Q8_0:
		return 32;
	case KVT_W_Q2_K: case KVT_W_Q3_K: case KVT_W_Q4_K: case KVT_W_Q5_K: case KVT_W_Q6_K:
		return 256;
	default: return 0;
	}
}

static inline float scale16(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, sizeof(h));
	return h2f(h);
}

/* ---- rounding x ---- */

/* One block of m values: the scale and the int8s. The scalar code and the
 * AVX-512 code compute d, 1 / d and every x * (1 / d) alike, and both
 * round to nearest even, so they agree to the bit. */
static float xq_block(int8_t *q, const float *x, unsigned m)
{
	float amax = 0, d, id;

	for (unsigned i = 0; i < m; i++)
		amax = fmaxf(amax, fabsf(x[i]));
	d = amax / 127;
	id = d ? 1 / d : 0;
	for (unsigned i = 0; i < m; i++)
		q[i] = (int8_t)nearbyintf(x[i] * id);
	return d;
}

#ifdef KVT_X86
I8 static float xq_block512(int8_t *q, const float *x, unsigned m)
{
	__m512 mx = _mm512_setzero_ps();
	float d, id;

	for (unsigned i = 0; i < m; i += 16)
		mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
	d = _mm512_reduce_max_ps(mx) / 127;
	id = d ? 1 / d : 0;
	for (unsigned i = 0; i < m; i += 16) {
		__m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i),
							     _mm512_set1_ps(id)));
		_mm_storeu_si128((__m128i *)(q + i), _mm512_cvtsepi32_epi8(v));
	}
	return d;
}
#endif

int kvt_xq_make(struct kvt_xq *xq, const float *x, unsigned rows, unsigned n, unsigned blk)
{
	const size_t nb = n / blk, ng = n / 16;
#ifdef KVT_X86
	const int simd = kvt_cpu_simd() >= 2 && have_bw();
#endif

	memset(xq, 0, sizeof(*xq));
	if ((blk != 32 && blk != 256) || n % blk)
		return -EINVAL;
	xq->q = malloc((size_t)rows * n);
	xq->d = malloc((size_t)rows * nb * sizeof(float));
	xq->s = malloc((size_t)rows * ng * sizeof(int16_t));
	if (!xq->q || !xq->d || !xq->s) {
		kvt_xq_free(xq);
		return -ENOMEM;
	}
	xq->rows = rows;
	xq->n = n;
	xq->blk = blk;
	for (size_t r = 0; r < rows; r++) {
		for (size_t b = 0; b < nb; b++) {
			int8_t *q = xq->q + r * n + b * blk;
			const float *xb = x + r * n + b * blk;
#ifdef KVT_X86
			if (simd)
				xq->d[r * nb + b] = xq_block512(q, xb, blk);
			else
#endif
				xq->d[r * nb + b] = xq_block(q, xb, blk);
		}
		for (size_t g = 0; g < ng; g++) {
			const int8_t *q = xq->q + r * n + g * 16;
			int s = 0;

			for (unsigned i = 0; i < 16; i++)
				s += q[i];
			xq->s[r * ng + g] = (int16_t)s;
		}
	}
	return 0;
}

void kvt_xq_free(struct kvt_xq *xq)
{
	free(xq->q);
	free(xq->d);
	free(xq->s);
	memset(xq, 0, sizeof(*xq));
}

/* ---- the reference ---- */

float kvt_qdot_ref(uint32_t wtype, const void *w, const struct kvt_xq *xq, unsigned r)
{
	const uint8_t *b = w;
	const int8_t *x = xq->q + (size_t)r * xq->n;
	const int16_t *s = xq->s + (size_t)r * (xq->n / 16);
	const float *dx = xq->d + (size_t)r * (xq->n / xq->blk);
	double acc = 0;

	switch (wtype) {
	case KVT_W_Q4_0: case KVT_W_Q4_1: case KVT_W_Q5_0: case KVT_W_Q5_1: {
		const int mins = wtype == KVT_W_Q4_1 || wtype == KVT_W_Q5_1;
		const int five = wtype == KVT_W_Q5_0 || wtype == KVT_W_Q5_1;
		const unsigned size = kvt_qtype(wtype)->size, qs = 2 + 2 * mins + 4 * five;
		const int zero = mins ? 0 : five ? 16 : 8;	/* the quant of 0 */

		for (unsigned k = 0; k < xq->n / 32; k++, b += size, x += 32) {
			const int xs = s[2 * k] + s[2 * k + 1];
			uint32_t qh = 0;
			int sum = 0;

			if (five)
				memcpy(&qh, b + 2 + 2 * mins, sizeof(qh));
			for (unsigned i = 0; i < 32; i++) {
				int q = i < 16 ? b[qs + i] & 0xF : b[qs + i - 16] >> 4;

				sum += (q | (qh >> i & 1) << 4) * x[i];
			}
			acc += (double)(scale16(b) * dx[k]) * (sum - zero * xs);
			if (mins)
				acc += (double)(scale16(b + 2) * dx[k]) * xs;
		}
		break;
	}
	case KVT_W_Q8_0:
		for (unsigned k = 0; k < xq->n / 32; k++, b += 34, x += 32) {
			int sum = 0;
			for (unsigned i = 0; i < 32; i++)
				sum += (int8_t)b[2 + i] * x[i];
			acc += (double)(scale16(b) * dx[k]) * sum;
		}
		break;
	case KVT_W_Q2_K:	/* sc[16], qs[64], d, dmin */
		for (unsigned k = 0; k < xq->n / 256; k++, b += 84, x += 256, s += 16) {
			int sum = 0, msum = 0;
			for (unsigned g = 0; g < 16; g++) {
				/* half c, shift 2j, 16 values from l of its 32 bytes */
				unsigned c = g / 8, j = g % 8 / 2, l = 16 * (g % 2);
				int dot = 0;

				for (unsigned i = 0; i < 16; i++)
					dot += (b[16 + 32 * c + l + i] >> 2 * j & 3) * x[16 * g + i];
				sum += (b[g] & 0xF) * dot;
				msum += (b[g] >> 4) * s[g];
			}
			acc += (double)(scale16(b + 80) * dx[k]) * sum -
			       (double)(scale16(b + 82) * dx[k]) * msum;
		}
		break;
	case KVT_W_Q3_K:	/* hmask[32], qs[64], scales[12], d */
		for (unsigned k = 0; k < xq->n / 256; k++, b += 110, x += 256, s += 16) {
			int8_t sc[16];
			int sum = 0;

			kvt_q3k_scales(sc, b + 96);
			for (unsigned g = 0; g < 16; g++) {
				unsigned c = g / 8, j = g % 8 / 2, l = 16 * (g % 2);
				int dot = 0;

				for (unsigned i = 0; i < 16; i++) {
					int q = (b[32 + 32 * c + l + i] >> 2 * j & 3) |
						(b[l + i] >> (4 * c + j) & 1) << 2;
					dot += q * x[16 * g + i];
				}
				sum += (sc[g] - 32) * (dot - 4 * s[g]);
			}
			acc += (double)(scale16(b + 108) * dx[k]) * sum;
		}
		break;
	case KVT_W_Q4_K: case KVT_W_Q5_K: {	/* d, dmin, scales[12], (qh[32],) qs[128] */
		const int five = wtype == KVT_W_Q5_K;
		const unsigned size = five ? 176 : 144, qs = five ? 48 : 16;

		for (unsigned k = 0; k < xq->n / 256; k++, b += size, x += 256, s += 16) {
			int sum = 0, msum = 0;
			for (unsigned j = 0; j < 8; j++) {
				const uint8_t *q = b + qs + 32 * (j / 2);
				uint8_t sc, mn;
				int dot = 0;

				kvt_scale_min_k4((int)j, b + 4, &sc, &mn);
				for (unsigned i = 0; i < 32; i++) {
					int v = j & 1 ? q[i] >> 4 : q[i] & 0xF;

					if (five)
						v |= (b[16 + i] >> j & 1) << 4;
					dot += v * x[32 * j + i];
				}
				sum += sc * dot;
				msum += mn * (s[2 * j] + s[2 * j + 1]);
			}
			acc += (double)(scale16(b) * dx[k]) * sum -
			       (double)(scale16(b + 2) * dx[k]) * msum;
		}
		break;
	}
	case KVT_W_Q6_K:
		for (unsigned k = 0; k < xq->n / 256; k++, b += 210, x += 256, s += 16) {
			const int8_t *sc = (const int8_t *)(b + 192);
			int sum = 0;
			for (unsigned g = 0; g < 16; g++) {
				unsigned c = g / 8, at = g % 8;	/* half, 16s within it */
				int dot = 0;
				for (unsigned i = 0; i < 16; i++) {
					unsigned l = 16 * (at % 2) + i, part = at / 2;
					const uint8_t *ql = b + 64 * c, *qh = b + 128 + 32 * c;
					int lo = part & 1 ? ql[l + 32] : ql[l];
					int q = (part < 2 ? lo & 0xF : lo >> 4) |
						((qh[l] >> (2 * part)) & 3) << 4;
					dot += q * x[16 * g + i];
				}
				sum += sc[g] * (dot - 32 * s[g]);
			}
			acc += (double)(scale16(b + 208) * dx[k]) * sum;
		}
		break;
	}
	return (float)acc;
}

/* ---- AVX-512BW ---- */

#ifdef KVT_X86
/* A block's f16 scale through F16C (the same value as h2f). */
I2_INLINE float hscale(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, sizeof(h));
	return _cvtsh_ss(h);
}

/* A call reads NW rows wst apart a block from each, and the caller's
 * next call the rows after them (kernels.c, mm_small_task): ask for the
 * block PF_ROWS rows on in the same stream. */
#define PF_ROWS	2

I2_INLINE void prefetch_ahead(const uint8_t *p, unsigned bytes)
{
	for (unsigned o = 0; o < bytes; o += 64)
		_mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* The loops over the NW weight rows say `#pragma GCC unroll 2`: rolled,
 * as GCC leaves them, acc[k][r] lives in memory, a load and a store each
 * block, and q4_k's kernel read 25 GB/s on one core from L2 where it now
 * reads 32. */

/* x's int8s at row r, value i. */
#define XQ(xq, r, i)	((xq)->q + (size_t)(r) * (xq)->n + (i))

I8_INLINE __m512i dot_u8s8(__m512i u, __m512i s, __m512i w16)
{
	return _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), w16);
}

/* Two 256-bit halves into one vector. */
I8_INLINE __m512i cat256(__m256i lo, __m256i hi)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* q4_k's 12 bytes of 6-bit scales and mins as 16 bytes, the 8 scales then
 * the 8 mins: ggml's unpacking, on the words u0 u1 u2 at p, in one
 * register (the 16-byte load takes 4 bytes of qs along, unused):
 *
 *   u0 & 0x3f3f3f3f,  (u2 & 0x0f0f0f0f) | (u0 >> 2 & 0x30303030),
 *   u1 & 0x3f3f3f3f,  (u2 >> 4 & 0x0f0f0f0f) | (u1 >> 2 & 0x30303030).
 *
 * Built in general registers and stored, the words were read back through
 * memory every block: 9 per cent of the kernel from L2. */
I2_INLINE __m128i q4k_scales(const uint8_t *p)
{
	const __m128i u = _mm_loadu_si128((const __m128i *)p);
	const __m128i a = _mm_shuffle_epi32(u, _MM_SHUFFLE(2, 1, 2, 0));	/* u0 u2 u1 u2 */
	const __m128i b = _mm_shuffle_epi32(u, _MM_SHUFFLE(1, 1, 0, 0));	/* u0 u0 u1 u1 */
	const __m128i lo = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
					 _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
	const __m128i hi = _mm_and_si128(_mm_srli_epi32(b, 2),
					 _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));

	return _mm_or_si128(lo, hi);
}

/* q3_k's 16 scales less 32 (kvt_q3k_scales' unpacking), formed in a
 * register rather than stored and read back. */
I2_INLINE __m128i q3k_scales(const uint8_t *p)
{
	const uint32_t m1 = 0x03030303, m2 = 0x0f0f0f0f;
	uint32_t a[3];

	memcpy(a, p, 12);
	return _mm_sub_epi8(_mm_setr_epi32((int)((a[0] & m2) | (a[2] & m1) << 4),
					   (int)((a[1] & m2) | (a[2] >> 2 & m1) << 4),
					   (int)((a[0] >> 4 & m2) | (a[2] >> 4 & m1) << 4),
					   (int)((a[1] >> 4 & m2) | (a[2] >> 6 & m1) << 4)),
			    _mm_set1_epi8(32));
}

/* The head of a q6_k, q2_k or q3_k block, the 16-group K-quants: its 16
 * scales as int8 (sc), what multiplies the sums of x over each 16 (of:
 * q6_k's and q3_k's scales, for their -32 and -4; q2_k's mins), and the
 * f32 factors of the two (d, dof). */
I2_INLINE void k16_head(uint32_t type, const uint8_t *blk, __m128i *sc, __m256i *of, float *d,
			float *dof)
{
	if (type == KVT_W_Q6_K) {		/* ql[128], qh[64], scales[16], d */
		*sc = _mm_loadu_si128((const __m128i *)(blk + 192));
		*of = _mm256_cvtepi8_epi16(*sc);
		*d = hscale(blk + 208);
		*dof = 32 * *d;
	} else if (type == KVT_W_Q2_K) {	/* scales[16], qs[64], d, dmin */
		const __m128i raw = _mm_loadu_si128((const __m128i *)blk);

		*sc = _mm_and_si128(raw, _mm_set1_epi8(0x0F));
		*of = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F)));
		*d = hscale(blk + 80);
		*dof = hscale(blk + 82);
	} else {				/* hmask[32], qs[64], scales[12], d */
		*sc = q3k_scales(blk + 96);
		*of = _mm256_cvtepi8_epi16(*sc);
		*d = hscale(blk + 108);
		*dof = 4 * *d;
	}
}

/* Bit 2t of each byte in the low 256 bits, bit 2t + 1 in the high: which
 * bit of q5_k's qh[32] (of q3_k's hmask[32]), loaded twice, is the high
 * bit of the 64 values of v[t] below. */
I8_INLINE __m512i bits_pair(unsigned t)
{
	return cat256(_mm256_set1_epi8((char)(1 << 2 * t)), _mm256_set1_epi8((char)(2 << 2 * t)));
}

/* q4_k and q5_k: 8 sub-blocks of 32, each with a 6-bit scale and min. */
I8_INLINE void qk32_i8(const uint8_t *w0, size_t wst, const struct kvt_xq *xq, unsigned r0,
		       unsigned NW, unsigned R, float *out, int five)
{
	const unsigned n = xq->n, nb = n / 256, bs = five ? 176 : 144, qs = five ? 48 : 16;
	const __m512i m4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
	/* vpshufb's picks from the 8 scales and 8 mins as bytes, in every
	 * 128-bit lane, each into an int16 (0x80: a zero high byte): scale
	 * 2j over 16 lanes, then scale 2j + 1 over 16 ... */
#define U16(i)	(short)(0x8000 | (i))
	const __m512i pat[4] = {
		cat256(_mm256_set1_epi16(U16(0)), _mm256_set1_epi16(U16(1))),
		cat256(_mm256_set1_epi16(U16(2)), _mm256_set1_epi16(U16(3))),
		cat256(_mm256_set1_epi16(U16(4)), _mm256_set1_epi16(U16(5))),
		cat256(_mm256_set1_epi16(U16(6)), _mm256_set1_epi16(U16(7))),
	};
	/* ... and each min twice, against the sums of x over each 16 */
	const __m256i patm = _mm256_setr_epi16(U16(8), U16(8), U16(9), U16(9), U16(10), U16(10),
					       U16(11), U16(11), U16(12), U16(12), U16(13), U16(13),
					       U16(14), U16(14), U16(15), U16(15));
#undef U16
	__m512 acc[2][4];
	__m256 macc[2][4];

	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++) {
			acc[k][r] = _mm512_setzero_ps();
			macc[k][r] = _mm256_setzero_ps();
		}
	for (unsigned b = 0; b < nb; b++)
#pragma GCC unroll 2
		for (unsigned k = 0; k < NW; k++) {
			const uint8_t *blk = w0 + k * wst + (size_t)b * bs;
			uint32_t dd;

			memcpy(&dd, blk, sizeof(dd));
			prefetch_ahead(blk + PF_ROWS * (size_t)nb * bs, bs);
			const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dd));	/* d dmin */
			const __m512i sm = _mm512_broadcast_i32x4(q4k_scales(blk + 4));
			const __m256i mn = _mm256_shuffle_epi8(_mm512_castsi512_si256(sm), patm);
			const __m512i h = five ? _mm512_broadcast_i64x4(
					_mm256_loadu_si256((const __m256i *)(blk + 16))) : _mm512_setzero_si512();
			__m512i v[4], s[4];

			/* 64 bytes: sub-blocks 4p .. 4p + 3, the low nibbles of
			 * the first 32 bytes (4p) and their high (4p + 1), then
			 * the next 32's */
			for (unsigned p = 0; p < 2; p++) {
				__m512i q = _mm512_loadu_si512(blk + qs + 64 * p);
				__m512i lo = _mm512_and_si512(q, m4);
				__m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);

				v[2 * p] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
				v[2 * p + 1] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
			}
			for (unsigned j = 0; j < 4; j++) {
				if (five)
					v[j] = _mm512_mask_add_epi8(v[j], _mm512_test_epi8_mask(h, bits_pair(j)),
								    v[j], sixteen);
				s[j] = _mm512_shuffle_epi8(sm, pat[j]);
			}
			for (unsigned r = 0; r < R; r++) {
				const int8_t *x = XQ(xq, r0 + r, (size_t)b * 256);
				const int16_t *xs = xq->s + (size_t)(r0 + r) * (n / 16) + b * 16;
				const __m128 f = _mm_mul_ps(dm, _mm_broadcast_ss(xq->d +
									  (size_t)(r0 + r) * nb + b));
				__m512i ia = dot_u8s8(v[0], _mm512_loadu_si512(x), s[0]);
				__m256i im = _mm256_madd_epi16(mn, _mm256_loadu_si256((const __m256i *)xs));

				for (unsigned j = 1; j < 4; j++)
					ia = _mm512_add_epi32(ia, dot_u8s8(v[j],
						_mm512_loadu_si512(x + 64 * j), s[j]));
				acc[k][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), _mm512_broadcastss_ps(f),
							    acc[k][r]);
				macc[k][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(im),
							     _mm256_broadcastss_ps(_mm_movehdup_ps(f)),
							     macc[k][r]);
			}
		}
	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			out[k * 4 + r] = _mm512_reduce_add_ps(_mm512_sub_ps(acc[k][r],
				_mm512_zextps256_ps512(macc[k][r])));
}

/* q2_k, q3_k and q6_k: 16 groups of 16 values, each with an integer scale
 * sc, and a term in each group's sum of x: of times it, scaled by dof
 * (q2_k: its 4-bit mins and dmin; q3_k: sc and 4 d; q6_k: sc and 32 d),
 * subtracted. */
I8_INLINE void qk16_i8(const uint8_t *w0, size_t wst, const struct kvt_xq *xq, unsigned r0,
		       unsigned NW, unsigned R, float *out, uint32_t type)
{
	const unsigned n = xq->n, nb = n / 256;
	const unsigned bs = type == KVT_W_Q2_K ? 84 : type == KVT_W_Q3_K ? 110 : 210;
	const __m512i m3 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(0x0F);
	const __m512i m30 = _mm512_set1_epi8(0x30), four = _mm512_set1_epi8(4);
	/* scales 4t .. 4t + 3 (of 16, as int16), each over 8 int16 lanes (a
	 * 128-bit lane): 16 values; idx + 4t picks them with vpermw */
	const __m512i idx = _mm512_setr_epi64(0, 0, 0x0001000100010001ll, 0x0001000100010001ll,
					      0x0002000200020002ll, 0x0002000200020002ll,
					      0x0003000300030003ll, 0x0003000300030003ll);
	__m512 acc[2][4];
	__m256 oacc[2][4];

	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++) {
			acc[k][r] = _mm512_setzero_ps();
			oacc[k][r] = _mm256_setzero_ps();
		}
	for (unsigned b = 0; b < nb; b++)
#pragma GCC unroll 2
		for (unsigned k = 0; k < NW; k++) {
			const uint8_t *blk = w0 + k * wst + (size_t)b * bs;
			__m512i v[4], s[4];
			__m128i sc;		/* the 16 scales, int8 */
			__m256i of;		/* and what multiplies the sums of x, int16 */
			float d, dof;

			prefetch_ahead(blk + PF_ROWS * (size_t)nb * bs, bs);
			k16_head(type, blk, &sc, &of, &d, &dof);
			if (type == KVT_W_Q6_K) {
				for (unsigned c = 0; c < 2; c++) {
					__m512i a = _mm512_loadu_si512(blk + 64 * c);
					__m256i t = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * c));
					__m512i t2 = cat256(t, _mm256_srli_epi16(t, 2));

					/* values 0..63 of the half, then 64..127 */
					v[2 * c] = _mm512_or_si512(_mm512_and_si512(a, m4),
						_mm512_and_si512(_mm512_slli_epi16(t2, 4), m30));
					v[2 * c + 1] = _mm512_or_si512(
						_mm512_and_si512(_mm512_srli_epi16(a, 4), m4),
						_mm512_and_si512(t2, m30));
				}
			} else {		/* 2 bits at 16 (q2_k) or 32 (q3_k) */
				const unsigned qs = type == KVT_W_Q2_K ? 16 : 32;

				/* half c's 32 bytes: shifts 0 and 2 (values 0..63), then 4 and 6 */
				for (unsigned c = 0; c < 2; c++) {
					__m256i q = _mm256_loadu_si256((const __m256i *)(blk + qs + 32 * c));
					__m512i q2 = cat256(q, _mm256_srli_epi16(q, 2));

					v[2 * c] = _mm512_and_si512(q2, m3);
					v[2 * c + 1] = _mm512_and_si512(_mm512_srli_epi16(q2, 4), m3);
				}
				if (type == KVT_W_Q3_K) {
					const __m512i h = _mm512_broadcast_i64x4(
						_mm256_loadu_si256((const __m256i *)blk));

					for (unsigned t = 0; t < 4; t++)
						v[t] = _mm512_mask_add_epi8(v[t], _mm512_test_epi8_mask(h,
									bits_pair(t)), v[t], four);
				}
			}
			/* q6_k's and q3_k's of: their scales as int16 already */
			const __m512i sc16 = _mm512_castsi256_si512(type == KVT_W_Q2_K ?
						_mm256_cvtepu8_epi16(sc) : of);

			for (unsigned t = 0; t < 4; t++)
				s[t] = _mm512_permutexvar_epi16(_mm512_add_epi16(idx,
						_mm512_set1_epi16((short)(4 * t))), sc16);
			for (unsigned r = 0; r < R; r++) {
				const int8_t *x = XQ(xq, r0 + r, (size_t)b * 256);
				const int16_t *xs = xq->s + (size_t)(r0 + r) * (n / 16) + b * 16;
				const float dx = xq->d[(size_t)(r0 + r) * nb + b];
				__m512i ia = dot_u8s8(v[0], _mm512_loadu_si512(x), s[0]);
				__m256i io = _mm256_madd_epi16(of, _mm256_loadu_si256((const __m256i *)xs));

				for (unsigned j = 1; j < 4; j++)
					ia = _mm512_add_epi32(ia, dot_u8s8(v[j],
						_mm512_loadu_si512(x + 64 * j), s[j]));
				acc[k][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), _mm512_set1_ps(d * dx),
							    acc[k][r]);
				oacc[k][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(io), _mm256_set1_ps(dof * dx),
							     oacc[k][r]);
			}
		}
	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			out[k * 4 + r] = _mm512_reduce_add_ps(_mm512_sub_ps(acc[k][r],
				_mm512_zextps256_ps512(oacc[k][r])));
}

/* The blocks of 32: two a vector, lanes 0..7 the first. Two blocks'
 * nibbles, at q0 and q1, in the order of their values: each block's 16
 * low nibbles, then its 16 high. */
I8_INLINE __m512i nib_pair(const uint8_t *q0, const uint8_t *q1)
{
	const __m256i m4 = _mm256_set1_epi8(0x0F);
	__m256i q = _mm256_inserti128_si256(
		_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)q0)),
		_mm_loadu_si128((const __m128i *)q1), 1);
	__m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);

	return cat256(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
}

/* q4_0 (as q - 8), q5_0 (q - 16) and q8_0: the weights' signs move onto
 * x, so that vpmaddubsw multiplies |q| by signed x. q4_1 and q5_1: q
 * unsigned, and each block's m dx sum xq added apart, in f32. */
I8_INLINE void qb32_i8(const uint8_t *w0, size_t wst, const struct kvt_xq *xq, unsigned r0,
		       unsigned NW, unsigned R, float *out, uint32_t type)
{
	const int mins = type == KVT_W_Q4_1 || type == KVT_W_Q5_1;
	const int five = type == KVT_W_Q5_0 || type == KVT_W_Q5_1;
	const unsigned n = xq->n, nb = n / 32, qs = 2 + 2 * mins + 4 * five;
	const unsigned bs = type == KVT_W_Q8_0 ? 34 : qs + 16;
	const __m512i one = _mm512_set1_epi16(1), zero = _mm512_setzero_si512();
	__m512 acc[2][4];
	float macc[2][4];

	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++) {
			acc[k][r] = _mm512_setzero_ps();
			macc[k][r] = 0;
		}
	for (unsigned b = 0; b < nb; b += 2)
#pragma GCC unroll 2
		for (unsigned k = 0; k < NW; k++) {
			const uint8_t *b0 = w0 + k * wst + (size_t)b * bs;
			const int odd = b + 1 == nb;	/* a last block alone: */
			const uint8_t *b1 = odd ? b0 : b0 + bs;		/* twice, */
			const float d0 = hscale(b0), d1 = odd ? 0 : hscale(b1);	/* once weighed */
			const float m0 = mins ? hscale(b0 + 2) : 0, m1 = mins && !odd ? hscale(b1 + 2) : 0;
			__m512i v;
			__mmask64 neg = 0;

			if (type == KVT_W_Q8_0) {
				v = cat256(_mm256_loadu_si256((const __m256i *)(b0 + 2)),
					   _mm256_loadu_si256((const __m256i *)(b1 + 2)));
			} else {
				v = nib_pair(b0 + qs, b1 + qs);
				if (five) {	/* qh: bit i is value i's fifth */
					uint32_t h0, h1;

					memcpy(&h0, b0 + qs - 4, sizeof(h0));
					memcpy(&h1, b1 + qs - 4, sizeof(h1));
					v = _mm512_mask_add_epi8(v, (__mmask64)h1 << 32 | h0, v,
								 _mm512_set1_epi8(16));
				}
				if (!mins)
					v = _mm512_sub_epi8(v, _mm512_set1_epi8(five ? 16 : 8));
			}
			if (!mins) {
				neg = _mm512_movepi8_mask(v);
				v = _mm512_abs_epi8(v);
			}

			prefetch_ahead(b0 + PF_ROWS * (size_t)nb * bs, 2 * bs);

			for (unsigned r = 0; r < R; r++) {
				const int8_t *x = XQ(xq, r0 + r, (size_t)b * 32);
				const float *dx = xq->d + (size_t)(r0 + r) * nb + b;
				__m512i xv = odd ? _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)x)) :
						   _mm512_loadu_si512(x);
				__m512 s = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(d0 * dx[0]),
								_mm512_set1_ps(odd ? 0 : d1 * dx[1]));

				if (mins) {
					const int16_t *xs = xq->s + (size_t)(r0 + r) * (n / 16) + 2 * b;

					macc[k][r] += m0 * dx[0] * (float)(xs[0] + xs[1]);
					if (!odd)
						macc[k][r] += m1 * dx[1] * (float)(xs[2] + xs[3]);
				} else {
					xv = _mm512_mask_sub_epi8(xv, neg, zero, xv);
				}
				acc[k][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot_u8s8(v, xv, one)), s,
							    acc[k][r]);
			}
		}
	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			out[k * 4 + r] = _mm512_reduce_add_ps(acc[k][r]) + macc[k][r];
}

/*
 * q4_0, q4_1, q5_0 and q5_1 with AVX512-VNNI, VBMI and GFNI, four blocks
 * (72, 80, 88 or 96 bytes) a step: vpermt2b lays out two blocks' 16 bytes
 * of quants twice each, and one gf2p8affineqb keeps the low nibbles of
 * the first copy and shifts down the high ones of the second, which
 * leaves every block's 32 values in the order x has them; q5's fifth bits
 * (qh, bit i: value i) are added as 16 under a mask of the two blocks'
 * words. vpdpbusd sums q xq four products a lane, 8 lanes a block,
 * unsigned q (0..31) by signed xq. For q4_0 and q5_0 the sums start from
 * -8 or -16 times the same lanes' sums of xq (a vpdpbusd of 8s or 16s,
 * once for both weight rows), so that each block's lanes add up to sum
 * (q - 8) xq or (q - 16) xq, the integer qb32_i8 computes; for q4_1 and
 * q5_1, m dx times the lanes' sums of xq (a vpdpbusd of 1s) is added in
 * f32. d dx (and m dx), four blocks' in one vector, weighs the lanes. The
 * bytes come in as 64 and then the rest, 16 or 32 (q4_0 and q5_0: from
 * byte 56 on, 8 bytes over the first): two 64-byte loads 8 bytes apart
 * read memory at 43-46 GB/s on two threads where these loads read 62-66
 * (docs/benchmarks.md). n a multiple of 128.
 */
struct q4x_layout {
	uint8_t ix[2][64] __attribute__((aligned(64)));	/* vpermt2b's picks: blocks 0, 1; 2, 3 */
	int16_t dm[8];			/* the four blocks' d words, then m's, of lo:hi */
	unsigned bs, at2, qh;		/* block bytes; the second load's start; qh's offset */
	uint8_t per;			/* q4_0, q5_0: the offset; else 1 (mins) */
};

/* Byte i of 128-bit lane L: byte i of block 2h + L / 2's quants, at bs k +
 * qs, taken from the first load below 64 and from the second (64 + byte -
 * at2) above. */
#define Q4X_PICK(bs, qs, at2, k, i)	((bs) * (k) + (qs) + (i) < 64 ? (bs) * (k) + (qs) + (i) : \
					 64 + (bs) * (k) + (qs) + (i) - (at2))
#define Q4X_L16(bs, qs, at2, k)								\
	Q4X_PICK(bs, qs, at2, k, 0), Q4X_PICK(bs, qs, at2, k, 1), Q4X_PICK(bs, qs, at2, k, 2),	\
	Q4X_PICK(bs, qs, at2, k, 3), Q4X_PICK(bs, qs, at2, k, 4), Q4X_PICK(bs, qs, at2, k, 5),	\
	Q4X_PICK(bs, qs, at2, k, 6), Q4X_PICK(bs, qs, at2, k, 7), Q4X_PICK(bs, qs, at2, k, 8),	\
	Q4X_PICK(bs, qs, at2, k, 9), Q4X_PICK(bs, qs, at2, k, 10), Q4X_PICK(bs, qs, at2, k, 11),	\
	Q4X_PICK(bs, qs, at2, k, 12), Q4X_PICK(bs, qs, at2, k, 13), Q4X_PICK(bs, qs, at2, k, 14),	\
	Q4X_PICK(bs, qs, at2, k, 15)
#define Q4X_IX(bs, qs, at2)								\
	{ { Q4X_L16(bs, qs, at2, 0), Q4X_L16(bs, qs, at2, 0),					\
	    Q4X_L16(bs, qs, at2, 1), Q4X_L16(bs, qs, at2, 1) },					\
	  { Q4X_L16(bs, qs, at2, 2), Q4X_L16(bs, qs, at2, 2),					\
	    Q4X_L16(bs, qs, at2, 3), Q4X_L16(bs, qs, at2, 3) } }
/* word of byte b of the four blocks, lo then hi */
#define Q4X_W(b, at2)	((b) < 64 ? (b) / 2 : 32 + ((b) - (at2)) / 2)

static const struct q4x_layout q4x_layouts[4] = {
	{ .bs = 18, .at2 = 56, .qh = 0, .per = 8, .ix = Q4X_IX(18, 2, 56),
	  .dm = { Q4X_W(0, 56), Q4X_W(18, 56), Q4X_W(36, 56), Q4X_W(54, 56) } },
	{ .bs = 20, .at2 = 64, .qh = 0, .per = 1, .ix = Q4X_IX(20, 4, 64),
	  .dm = { Q4X_W(0, 64), Q4X_W(20, 64), Q4X_W(40, 64), Q4X_W(60, 64),
		  Q4X_W(2, 64), Q4X_W(22, 64), Q4X_W(42, 64), Q4X_W(62, 64) } },
	{ .bs = 22, .at2 = 56, .qh = 2, .per = 16, .ix = Q4X_IX(22, 6, 56),
	  .dm = { Q4X_W(0, 56), Q4X_W(22, 56), Q4X_W(44, 56), Q4X_W(66, 56) } },
	{ .bs = 24, .at2 = 64, .qh = 4, .per = 1, .ix = Q4X_IX(24, 8, 64),
	  .dm = { Q4X_W(0, 64), Q4X_W(24, 64), Q4X_W(48, 64), Q4X_W(72, 64),
		  Q4X_W(2, 64), Q4X_W(26, 64), Q4X_W(50, 64), Q4X_W(74, 64) } },
};

/* lay: 0 q4_0, 1 q4_1, 2 q5_0, 3 q5_1 */
IV_INLINE void q4x_vnni(const uint8_t *w0, size_t wst, const struct kvt_xq *xq, unsigned r0,
			unsigned NW, unsigned R, float *out, const unsigned lay)
{
	const struct q4x_layout *L = &q4x_layouts[lay];
	const int mins = lay & 1, five = lay >= 2;
	const unsigned n = xq->n, nb = n / 32, bs = L->bs, at2 = L->at2;
	const __m512i ix[2] = { _mm512_load_si512(L->ix[0]), _mm512_load_si512(L->ix[1]) };
	const __m512i idm = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)L->dm));
	/* gf2p8affineqb's matrices, one a qword: x & 0x0F in lanes 0 and 2,
	 * x >> 4 in lanes 1 and 3 */
	const __m512i nib = _mm512_setr_epi64(0x0102040800000000ll, 0x0102040800000000ll,
					      0x1020408000000000ll, 0x1020408000000000ll,
					      0x0102040800000000ll, 0x0102040800000000ll,
					      0x1020408000000000ll, 0x1020408000000000ll);
	/* d dx, then m dx, of blocks 2h and 2h + 1, 8 lanes each */
	const __m512i rep[2][2] = {
		{ _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
		  _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5) },
		{ _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3),
		  _mm512_setr_epi32(6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7) } };
	const __m512i per = _mm512_set1_epi8((char)L->per), sixteen = _mm512_set1_epi8(16);
	__m512 acc[2][4][2];

	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			acc[k][r][0] = acc[k][r][1] = _mm512_setzero_ps();
	for (unsigned b = 0; b < nb; b += 4) {
		/* x, and the lanes' sums of it: -8 or -16 times (q4_0, q5_0),
		 * as f32 (q4_1, q5_1) */
		__m512i xv[4][2], nu[4][2];
		__m512 sx[4][2];
		__m256 dx[4];

		for (unsigned r = 0; r < R; r++) {
			const int8_t *x = XQ(xq, r0 + r, (size_t)b * 32);

			dx[r] = _mm256_broadcast_ps((const __m128 *)(xq->d + (size_t)(r0 + r) * nb + b));
			for (unsigned h = 0; h < 2; h++) {
				__m512i t;

				xv[r][h] = _mm512_loadu_si512(x + 64 * h);
				t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), per, xv[r][h]);
				if (mins)
					sx[r][h] = _mm512_cvtepi32_ps(t);
				else
					nu[r][h] = _mm512_sub_epi32(_mm512_setzero_si512(), t);
			}
		}
#pragma GCC unroll 2
		for (unsigned k = 0; k < NW; k++) {
			const uint8_t *g = w0 + k * wst + (size_t)b * bs;
			const __m512i lo = _mm512_loadu_si512(g);
			const __m512i hi = five ? _mm512_castsi256_si512(
					_mm256_loadu_si256((const __m256i *)(g + at2))) :
				_mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(g + at2)));
			const __m256 dm = _mm256_cvtph_ps(_mm512_castsi512_si128(
				_mm512_permutex2var_epi16(lo, idm, hi)));
			__m512i v[2];

			prefetch_ahead(g + PF_ROWS * (size_t)nb * bs, 4 * bs);
			for (unsigned h = 0; h < 2; h++) {
				v[h] = _mm512_gf2p8affine_epi64_epi8(
					_mm512_permutex2var_epi8(lo, ix[h], hi), nib, 0);
				if (five) {
					uint32_t h0, h1;

					memcpy(&h0, g + 2 * h * bs + L->qh, sizeof(h0));
					memcpy(&h1, g + (2 * h + 1) * bs + L->qh, sizeof(h1));
					v[h] = _mm512_mask_add_epi8(v[h], (__mmask64)h1 << 32 | h0, v[h],
								    sixteen);
				}
			}
			for (unsigned r = 0; r < R; r++) {
				const __m512 f = _mm512_castps256_ps512(_mm256_mul_ps(dm, dx[r]));

				for (unsigned h = 0; h < 2; h++) {
					const __m512 sd = _mm512_permutexvar_ps(rep[h][0], f);

					if (mins) {
						__m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
										v[h], xv[r][h]);
						__m512 t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sd,
							_mm512_mul_ps(sx[r][h],
								      _mm512_permutexvar_ps(rep[h][1], f)));

						acc[k][r][h] = _mm512_add_ps(acc[k][r][h], t);
					} else {
						__m512i p = _mm512_dpbusd_epi32(nu[r][h], v[h], xv[r][h]);

						acc[k][r][h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sd,
									       acc[k][r][h]);
					}
				}
			}
		}
	}
	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			out[k * 4 + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[k][r][0], acc[k][r][1]));
}

/* One function per type, specialised for every NW x R. */
#define DEF_QDOTS(name, body...)						\
I8 static void name(const void *w, size_t wst, unsigned NW, const struct kvt_xq *xq,	\
		    unsigned r0, unsigned R, float *out)				\
{										\
	KVT_NW_R_DISPATCH(NW, R, body);					\
}

DEF_QDOTS(qdots_q40, qb32_i8(w, wst, xq, r0, NN, RR, out, KVT_W_Q4_0))
DEF_QDOTS(qdots_q41, qb32_i8(w, wst, xq, r0, NN, RR, out, KVT_W_Q4_1))
DEF_QDOTS(qdots_q50, qb32_i8(w, wst, xq, r0, NN, RR, out, KVT_W_Q5_0))
DEF_QDOTS(qdots_q51, qb32_i8(w, wst, xq, r0, NN, RR, out, KVT_W_Q5_1))
DEF_QDOTS(qdots_q80, qb32_i8(w, wst, xq, r0, NN, RR, out, KVT_W_Q8_0))
DEF_QDOTS(qdots_q2k, qk16_i8(w, wst, xq, r0, NN, RR, out, KVT_W_Q2_K))
DEF_QDOTS(qdots_q3k, qk16_i8(w, wst, xq, r0, NN, RR, out, KVT_W_Q3_K))
DEF_QDOTS(qdots_q4k, qk32_i8(w, wst, xq, r0, NN, RR, out, 0))
DEF_QDOTS(qdots_q5k, qk32_i8(w, wst, xq, r0, NN, RR, out, 1))
DEF_QDOTS(qdots_q6k, qk16_i8(w, wst, xq, r0, NN, RR, out, KVT_W_Q6_K))

/* q4_0, q4_1, q5_0 and q5_1 where the cpu has VNNI, VBMI and GFNI, rows
 * of whole steps of 4 blocks; else qb32_i8 */
#define DEF_Q4V(name, fallback, lay)						\
IV static void name(const void *w, size_t wst, unsigned NW, const struct kvt_xq *xq,	\
		    unsigned r0, unsigned R, float *out)				\
{										\
	if (xq->n % 128) {							\
		fallback(w, wst, NW, xq, r0, R, out);				\
		return;								\
	}									\
	KVT_NW_R_DISPATCH(NW, R, q4x_vnni(w, wst, xq, r0, NN, RR, out, lay));	\
}
DEF_Q4V(qdots_q40v, qdots_q40, 0)
DEF_Q4V(qdots_q41v, qdots_q41, 1)
DEF_Q4V(qdots_q50v, qdots_q50, 2)
DEF_Q4V(qdots_q51v, qdots_q51, 3)

/* ---- AVX2 ---- */

I2_INLINE float hsum256(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* The same sums a vector of 32 values at a time (vpmaddubsw and vpmaddwd
 * are AVX2's too), and the signs onto x by vpsignb. One accumulator per
 * pair of rows, the mins and offsets subtracted into it: AVX2 has 16
 * registers, not 32. */

/* 32 bytes, 0xFF where bit i of m is set. */
I2_INLINE __m256i bits_to_bytes(uint32_t m)
{
	const __m256i at = _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll,
					      0x0303030303030303ll);
	const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
	__m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)m), at);	/* byte i / 8 of m */

	return _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
}

/* The blocks of 32, one a vector: as qb32_i8. */
I2_INLINE void qb32_avx2(const uint8_t *w0, size_t wst, const struct kvt_xq *xq, unsigned r0,
			 unsigned NW, unsigned R, float *out, uint32_t type)
{
	const int mins = type == KVT_W_Q4_1 || type == KVT_W_Q5_1;
	const int five = type == KVT_W_Q5_0 || type == KVT_W_Q5_1;
	const unsigned n = xq->n, nb = n / 32, qs = 2 + 2 * mins + 4 * five;
	const unsigned bs = type == KVT_W_Q8_0 ? 34 : qs + 16;
	const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi16(1);
	__m256 acc[2][4];
	float macc[2][4];

	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++) {
			acc[k][r] = _mm256_setzero_ps();
			macc[k][r] = 0;
		}
	for (unsigned b = 0; b < nb; b++)
#pragma GCC unroll 2
		for (unsigned k = 0; k < NW; k++) {
			const uint8_t *b0 = w0 + k * wst + (size_t)b * bs;
			const float d = hscale(b0), m = mins ? hscale(b0 + 2) : 0;
			__m256i v;

			if (type == KVT_W_Q8_0) {
				v = _mm256_loadu_si256((const __m256i *)(b0 + 2));
			} else {
				__m128i q = _mm_loadu_si128((const __m128i *)(b0 + qs));

				v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
				if (five) {
					uint32_t h;

					memcpy(&h, b0 + qs - 4, sizeof(h));
					v = _mm256_or_si256(v, _mm256_and_si256(bits_to_bytes(h),
										_mm256_set1_epi8(16)));
				}
				if (!mins)
					v = _mm256_sub_epi8(v, _mm256_set1_epi8(five ? 16 : 8));
			}
			const __m256i av = mins ? v : _mm256_sign_epi8(v, v);

			prefetch_ahead(b0 + PF_ROWS * (size_t)nb * bs, bs);
			for (unsigned r = 0; r < R; r++) {
				const __m256i x = _mm256_loadu_si256((const __m256i *)XQ(xq, r0 + r, (size_t)b * 32));
				const float dx = xq->d[(size_t)(r0 + r) * nb + b];
				__m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(av,
						mins ? x : _mm256_sign_epi8(x, v)), one);

				acc[k][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(d * dx),
							    acc[k][r]);
				if (mins) {
					const int16_t *xs = xq->s + (size_t)(r0 + r) * (n / 16) + 2 * b;

					macc[k][r] += m * dx * (float)(xs[0] + xs[1]);
				}
			}
		}
	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			out[k * 4 + r] = hsum256(acc[k][r]) + macc[k][r];
}

/* The K-quants, 8 vectors of 32 values a super-block: q4_k and q5_k
 * with one scale each, q2_k, q3_k and q6_k with two (16 values each);
 * what multiplies the sums of x over each 16, and its scale, as in
 * qk32_i8 and qk16_i8. */
I2_INLINE void qk_avx2(const uint8_t *w0, size_t wst, const struct kvt_xq *xq, unsigned r0,
		       unsigned NW, unsigned R, float *out, uint32_t type)
{
	const unsigned n = xq->n, nb = n / 256;
	const unsigned bs = type == KVT_W_Q2_K ? 84 : type == KVT_W_Q3_K ? 110 :
			    type == KVT_W_Q4_K ? 144 : type == KVT_W_Q5_K ? 176 : 210;
	const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(0x0F);
	const __m256i m30 = _mm256_set1_epi8(0x30), bit0 = _mm256_set1_epi8(1);
	/* scales 2j and 2j + 1 (of 16), each over 8 int16 lanes */
	const __m128i two = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
	/* q4_k, q5_k: each min twice, against the sums of x over each 16 */
	const __m128i patm = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
	__m256 acc[2][4];

	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			acc[k][r] = _mm256_setzero_ps();
	for (unsigned b = 0; b < nb; b++)
#pragma GCC unroll 2
		for (unsigned k = 0; k < NW; k++) {
			const uint8_t *blk = w0 + k * wst + (size_t)b * bs;
			__m256i v[8], s[8], of;
			float d, dof;

			prefetch_ahead(blk + PF_ROWS * (size_t)nb * bs, bs);
			if (type == KVT_W_Q4_K || type == KVT_W_Q5_K) {
				const int five = type == KVT_W_Q5_K;
				const __m128i sm = q4k_scales(blk + 4);
				const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 16));

				d = hscale(blk);
				dof = hscale(blk + 2);
				of = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, patm));
				for (unsigned j = 0; j < 8; j++) {
					__m256i q = _mm256_loadu_si256((const __m256i *)
								       (blk + (five ? 48 : 16) + 32 * (j / 2)));

					v[j] = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(q, 4) : q, m4);
					if (five)	/* bit j of qh */
						v[j] = _mm256_or_si256(v[j], _mm256_slli_epi16(_mm256_and_si256(
							_mm256_srli_epi16(qh, (int)j), bit0), 4));
					s[j] = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, _mm_set1_epi8((char)j)));
				}
			} else {
				__m128i sc;	/* the 16 scales, int8 */

				k16_head(type, blk, &sc, &of, &d, &dof);
				if (type == KVT_W_Q6_K) {
					for (unsigned j = 0; j < 8; j++) {
						/* half c, part p: ql from 32 (p & 1), high nibbles
						 * for p >= 2; qh's bits 2p and 2p + 1 */
						const unsigned c = j / 4, p = j % 4;
						__m256i ql = _mm256_loadu_si256((const __m256i *)
										(blk + 64 * c + 32 * (p & 1)));
						__m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * c));
						__m256i hi = p == 0 ? _mm256_slli_epi16(qh, 4) :
							     p == 1 ? _mm256_slli_epi16(qh, 2) :
							     p == 2 ? qh : _mm256_srli_epi16(qh, 2);

						v[j] = _mm256_or_si256(_mm256_and_si256(p >= 2 ?
								_mm256_srli_epi16(ql, 4) : ql, m4),
								_mm256_and_si256(hi, m30));
					}
				} else {
					const unsigned qs = type == KVT_W_Q2_K ? 16 : 32;

					/* half c, shift 2p; q3_k's high bit: bit j of hmask */
					const __m256i hm = _mm256_loadu_si256((const __m256i *)blk);

					for (unsigned j = 0; j < 8; j++) {
						__m256i q = _mm256_loadu_si256((const __m256i *)(blk + qs + 32 * (j / 4)));

						v[j] = _mm256_and_si256(_mm256_srli_epi16(q, (int)(2 * (j % 4))), m3);
						if (type == KVT_W_Q3_K)
							v[j] = _mm256_or_si256(v[j], _mm256_slli_epi16(
								_mm256_and_si256(_mm256_srli_epi16(hm, (int)j), bit0), 2));
					}
				}
				for (unsigned j = 0; j < 8; j++)
					s[j] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc,
							_mm_add_epi8(two, _mm_set1_epi8((char)(2 * j)))));
			}
			for (unsigned r = 0; r < R; r++) {
				const int8_t *x = XQ(xq, r0 + r, (size_t)b * 256);
				const int16_t *xs = xq->s + (size_t)(r0 + r) * (n / 16) + b * 16;
				const float dx = xq->d[(size_t)(r0 + r) * nb + b];
				__m256i ia = _mm256_setzero_si256();
				__m256i io = _mm256_madd_epi16(of, _mm256_loadu_si256((const __m256i *)xs));

				for (unsigned j = 0; j < 8; j++)
					ia = _mm256_add_epi32(ia, _mm256_madd_epi16(_mm256_maddubs_epi16(v[j],
						_mm256_loadu_si256((const __m256i *)(x + 32 * j))), s[j]));
				acc[k][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia), _mm256_set1_ps(d * dx),
							    acc[k][r]);
				acc[k][r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(io), _mm256_set1_ps(dof * dx),
							     acc[k][r]);
			}
		}
	for (unsigned k = 0; k < NW; k++)
		for (unsigned r = 0; r < R; r++)
			out[k * 4 + r] = hsum256(acc[k][r]);
}

#define DEF_QDOTS2(name, body...)						\
I2 static void name(const void *w, size_t wst, unsigned NW, const struct kvt_xq *xq,	\
		    unsigned r0, unsigned R, float *out)				\
{										\
	KVT_NW_R_DISPATCH(NW, R, body);					\
}

DEF_QDOTS2(qdots2_q40, qb32_avx2(w, wst, xq, r0, NN, RR, out, KVT_W_Q4_0))
DEF_QDOTS2(qdots2_q41, qb32_avx2(w, wst, xq, r0, NN, RR, out, KVT_W_Q4_1))
DEF_QDOTS2(qdots2_q50, qb32_avx2(w, wst, xq, r0, NN, RR, out, KVT_W_Q5_0))
DEF_QDOTS2(qdots2_q51, qb32_avx2(w, wst, xq, r0, NN, RR, out, KVT_W_Q5_1))
DEF_QDOTS2(qdots2_q80, qb32_avx2(w, wst, xq, r0, NN, RR, out, KVT_W_Q8_0))
DEF_QDOTS2(qdots2_q2k, qk_avx2(w, wst, xq, r0, NN, RR, out, KVT_W_Q2_K))
DEF_QDOTS2(qdots2_q3k, qk_avx2(w, wst, xq, r0, NN, RR, out, KVT_W_Q3_K))
DEF_QDOTS2(qdots2_q4k, qk_avx2(w, wst, xq, r0, NN, RR, out, KVT_W_Q4_K))
DEF_QDOTS2(qdots2_q5k, qk_avx2(w, wst, xq, r0, NN, RR, out, KVT_W_Q5_K))
DEF_QDOTS2(qdots2_q6k, qk_avx2(w, wst, xq, r0, NN, RR, out, KVT_W_Q6_K))

#endif

kvt_qdots_fn kvt_qdots(uint32_t wtype)
{
#ifdef KVT_X86
	static const struct {
		uint32_t type;
		kvt_qdots_fn avx512, avx2, vnni;
	} fns[] = {
		{ KVT_W_Q4_0, qdots_q40, qdots2_q40, qdots_q40v },
		{ KVT_W_Q4_1, qdots_q41, qdots2_q41, qdots_q41v },
		{ KVT_W_Q5_0, qdots_q50, qdots2_q50, qdots_q50v },
		{ KVT_W_Q5_1, qdots_q51, qdots2_q51, qdots_q51v },
		{ KVT_W_Q8_0, qdots_q80, qdots2_q80, NULL },
		{ KVT_W_Q2_K, qdots_q2k, qdots2_q2k, NULL },
		{ KVT_W_Q3_K, qdots_q3k, qdots2_q3k, NULL },
		{ KVT_W_Q4_K, qdots_q4k, qdots2_q4k, NULL },
		{ KVT_W_Q5_K, qdots_q5k, qdots2_q5k, NULL },
		{ KVT_W_Q6_K, qdots_q6k, qdots2_q6k, NULL },
	};
	const int simd = kvt_cpu_simd();

	if (!simd || !kvt_cpu_int8_dots())
		return NULL;
	for (unsigned i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
		if (fns[i].type != wtype)
			continue;
		if (simd >= 2 && fns[i].vnni && have_vnni())
			return fns[i].vnni;
		return simd >= 2 && have_bw() ? fns[i].avx512 : fns[i].avx2;
	}
#else
	(void)wtype;
#endif
	return NULL;
}
