/* SPDX-License-Identifier: MIT */
/*
 * Quantized blocks (quants.h): the reference dequantizers, their AVX2
 * twins, and the quantizers.
 *
 * The reference code is written as ggml's is, operation for operation in
 * float, so that its roundings are llama.cpp's: where a product of two
 * scales and a quant is formed, it is formed in the same order. The AVX2
 * code forms the same products (every one exact in f32 but q6_k's last,
 * which both round once, the same way), so the two agree to the bit.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "kernels/compute.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/quants.h"

#if defined(__x86_64__) || defined(__i386__)
#define KVT_X86 1
#include <immintrin.h>
#define AVX2		__attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE	static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#endif

#define QK_K	256

static const struct kvt_qtype types[] = {
	[KVT_W_Q4_0] = { "q4_0", 32, 18 },
	[KVT_W_Q4_1] = { "q4_1", 32, 20 },
	[KVT_W_Q5_0] = { "q5_0", 32, 22 },
	[KVT_W_Q5_1] = { "q5_1", 32, 24 },
	[KVT_W_Q8_0] = { "q8_0", 32, 34 },
	[KVT_W_Q2_K] = { "q2_k", QK_K, 84 },
	[KVT_W_Q3_K] = { "q3_k", QK_K, 110 },
	[KVT_W_Q4_K] = { "q4_k", QK_K, 144 },
	[KVT_W_Q5_K] = { "q5_k", QK_K, 176 },
	[KVT_W_Q6_K] = { "q6_k", QK_K, 210 },
};

const struct kvt_qtype *kvt_qtype(uint32_t type)
{
	return type < sizeof(types) / sizeof(types[0]) && types[type].name ? &types[type] : NULL;
}

static inline float half_at(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, sizeof(h));
	return h2f(h);
}

static inline void put_half(uint8_t *p, float f)
{
	uint16_t h = f2h(f);

	memcpy(p, &h, sizeof(h));
}

/* ---- the reference: ggml's dequantize_row_*, one block ---- */

static void dq_q4_0(float *y, const uint8_t *b)
{
	const float d = half_at(b);

	for (int j = 0; j < 16; j++) {
		const int x0 = (b[2 + j] & 0x0F) - 8;
		const int x1 = (b[2 + j] >> 4) - 8;

		y[j] = x0 * d;
		y[j + 16] = x1 * d;
	}
}

static void dq_q4_1(float *y, const uint8_t *b)
{
	const float d = half_at(b), m = half_at(b + 2);

	for (int j = 0; j < 16; j++) {
		const int x0 = b[4 + j] & 0x0F;
		const int x1 = b[4 + j] >> 4;

		y[j] = x0 * d + m;
		y[j + 16] = x1 * d + m;
	}
}

static void dq_q5_0(float *y, const uint8_t *b)
{
	const float d = half_at(b);
	uint32_t qh;

	memcpy(&qh, b + 2, sizeof(qh));
	for (int j = 0; j < 16; j++) {
		const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
		const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;
		const int32_t x0 = ((b[6 + j] & 0x0F) | xh_0) - 16;
		const int32_t x1 = ((b[6 + j] >> 4) | xh_1) - 16;

		y[j] = x0 * d;
		y[j + 16] = x1 * d;
	}
}

static void dq_q5_1(float *y, const uint8_t *b)
{
	const float d = half_at(b), m = half_at(b + 2);
	uint32_t qh;

	memcpy(&qh, b + 4, sizeof(qh));
	for (int j = 0; j < 16; j++) {
		const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
		const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;
		const int x0 = (b[8 + j] & 0x0F) | xh_0;
		const int x1 = (b[8 + j] >> 4) | xh_1;

		y[j] = x0 * d + m;
		y[j + 16] = x1 * d + m;
	}
}

static void dq_q8_0(float *y, const uint8_t *b)
{
	const float d = half_at(b);

	for (int j = 0; j < 32; j++)
		y[j] = (int8_t)b[2 + j] * d;
}

/* q2_k: scales[16], qs[64], d, dmin. */
static void dq_q2_k(float *y, const uint8_t *b)
{
	const uint8_t *sc = b, *q = b + 16;
	const float d = half_at(b + 80), min = half_at(b + 82);
	int is = 0;

	for (int n = 0; n < QK_K; n += 128) {
		int shift = 0;
		for (int j = 0; j < 4; ++j) {
			uint8_t s = sc[is++];
			float dl = d * (s & 0xF), ml = min * (s >> 4);
			for (int l = 0; l < 16; ++l)
				*y++ = dl * ((int8_t)((q[l] >> shift) & 3)) - ml;
			s = sc[is++];
			dl = d * (s & 0xF);
			ml = min * (s >> 4);
			for (int l = 0; l < 16; ++l)
				*y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3)) - ml;
			shift += 2;
		}
		q += 32;
	}
}

/* q3_k's sixteen 6-bit scales, unpacked from 12 bytes (as int8, 0..63). */
static void q3_k_scales(int8_t *scales, const uint8_t *packed)
{
	const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
	uint32_t aux[4], tmp;

	memcpy(aux, packed, 12);
	tmp = aux[2];
	aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
	aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
	aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
	aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
	memcpy(scales, aux, 16);
}

/* q3_k: hmask[32], qs[64], scales[12], d. */
static void dq_q3_k(float *y, const uint8_t *b)
{
	const uint8_t *hm = b, *q = b + 32;
	const float d_all = half_at(b + 108);
	int8_t scales[16];
	uint8_t m = 1;
	int is = 0;

	q3_k_scales(scales, b + 96);
	for (int n = 0; n < QK_K; n += 128) {
		int shift = 0;
		for (int j = 0; j < 4; ++j) {
			float dl = d_all * (scales[is++] - 32);
			for (int l = 0; l < 16; ++l)
				*y++ = dl * ((int8_t)((q[l + 0] >> shift) & 3) - ((hm[l + 0] & m) ? 0 : 4));
			dl = d_all * (scales[is++] - 32);
			for (int l = 0; l < 16; ++l)
				*y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
			shift += 2;
			m <<= 1;
		}
		q += 32;
	}
}

/* q4_k and q5_k's 6-bit scale and min of sub-block j (ggml's
 * get_scale_min_k4). */
static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
	}
}

/* q4_k: d, dmin, scales[12], qs[128]. */
static void dq_q4_k(float *y, const uint8_t *b)
{
	const float d = half_at(b), min = half_at(b + 2);
	const uint8_t *sc = b + 4, *q = b + 16;
	int is = 0;
	uint8_t s, m;

	for (int j = 0; j < QK_K; j += 64) {
		scale_min_k4(is + 0, sc, &s, &m);
		const float d1 = d * s, m1 = min * m;
		scale_min_k4(is + 1, sc, &s, &m);
		const float d2 = d * s, m2 = min * m;
		for (int l = 0; l < 32; ++l)
			*y++ = d1 * (q[l] & 0xF) - m1;
		for (int l = 0; l < 32; ++l)
			*y++ = d2 * (q[l] >> 4) - m2;
		q += 32;
		is += 2;
	}
}

/* q5_k: d, dmin, scales[12], qh[32], qs[128]. */
static void dq_q5_k(float *y, const uint8_t *b)
{
	const float d = half_at(b), min = half_at(b + 2);
	const uint8_t *sc = b + 4, *qh = b + 16, *ql = b + 48;
	int is = 0;
	uint8_t s, m, u1 = 1, u2 = 2;

	for (int j = 0; j < QK_K; j += 64) {
		scale_min_k4(is + 0, sc, &s, &m);
		const float d1 = d * s, m1 = min * m;
		scale_min_k4(is + 1, sc, &s, &m);
		const float d2 = d * s, m2 = min * m;
		for (int l = 0; l < 32; ++l)
			*y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
		for (int l = 0; l < 32; ++l)
			*y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
		ql += 32;
		is += 2;
		u1 <<= 2;
		u2 <<= 2;
	}
}

/* q6_k: ql[128], qh[64], scales[16] (int8), d. */
static void dq_q6_k(float *y, const uint8_t *b)
{
	const float d = half_at(b + 208);
	const uint8_t *ql = b, *qh = b + 128;
	const int8_t *sc = (const int8_t *)(b + 192);

	for (int n = 0; n < QK_K; n += 128) {
		for (int l = 0; l < 32; ++l) {
			int is = l / 16;
			const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
			const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
			const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
			const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;

			y[l + 0] = d * sc[is + 0] * q1;
			y[l + 32] = d * sc[is + 2] * q2;
			y[l + 64] = d * sc[is + 4] * q3;
			y[l + 96] = d * sc[is + 6] * q4;
		}
		y += 128;
		ql += 64;
		qh += 32;
		sc += 8;
	}
}

static kvt_dequant_block_fn ref_fn(uint32_t type)
{
	switch (type) {
	case KVT_W_Q4_0: return dq_q4_0;
	case KVT_W_Q4_1: return dq_q4_1;
	case KVT_W_Q5_0: return dq_q5_0;
	case KVT_W_Q5_1: return dq_q5_1;
	case KVT_W_Q8_0: return dq_q8_0;
	case KVT_W_Q2_K: return dq_q2_k;
	case KVT_W_Q3_K: return dq_q3_k;
	case KVT_W_Q4_K: return dq_q4_k;
	case KVT_W_Q5_K: return dq_q5_k;
	case KVT_W_Q6_K: return dq_q6_k;
	}
	return NULL;
}

void kvt_dequant_ref(uint32_t type, float *dst, const void *src, size_t nblk)
{
	const struct kvt_qtype *t = kvt_qtype(type);
	kvt_dequant_block_fn f = ref_fn(type);
	const uint8_t *b = src;

	if (!t)
		return;
	for (size_t i = 0; i < nblk; i++, b += t->size, dst += t->blk)
		f(dst, b);
}

/* ---- AVX2 ---- */

#ifdef KVT_X86
/* Eight bytes, zero-extended to eight int32 lanes. */
AVX2_INLINE __m256i u8x8(const uint8_t *p)
{
	return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

/* d * q for eight int32 q. */
AVX2_INLINE __m256 mulq(__m256i q, __m256 d)
{
	return _mm256_mul_ps(_mm256_cvtepi32_ps(q), d);
}

AVX2 static void dq_q4_0_avx2(float *y, const uint8_t *b)
{
	const __m256 d = _mm256_set1_ps(half_at(b));
	const __m256i lo = _mm256_set1_epi32(0xF), eight = _mm256_set1_epi32(8);

	for (int j = 0; j < 16; j += 8) {
		__m256i q = u8x8(b + 2 + j);
		_mm256_storeu_ps(y + j, mulq(_mm256_sub_epi32(_mm256_and_si256(q, lo), eight), d));
		_mm256_storeu_ps(y + j + 16, mulq(_mm256_sub_epi32(_mm256_srli_epi32(q, 4), eight), d));
	}
}

AVX2 static void dq_q8_0_avx2(float *y, const uint8_t *b)
{
	const __m256 d = _mm256_set1_ps(half_at(b));

	for (int j = 0; j < 32; j += 8)
		_mm256_storeu_ps(y + j, mulq(_mm256_cvtepi8_epi32(
			_mm_loadl_epi64((const __m128i *)(b + 2 + j))), d));
}

/* d * q - m for eight int32 q. */
AVX2_INLINE __m256 mulq_sub(__m256i q, __m256 d, __m256 m)
{
	return _mm256_sub_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(q), d), m);
}

AVX2 static void dq_q4_k_avx2(float *y, const uint8_t *b)
{
	const float d = half_at(b), min = half_at(b + 2);
	const uint8_t *sc = b + 4, *q = b + 16;
	const __m256i lo = _mm256_set1_epi32(0xF);
	uint8_t s, m;

	for (int j = 0; j < 4; j++, q += 32, y += 64) {
		scale_min_k4(2 * j, sc, &s, &m);
		const __m256 d1 = _mm256_set1_ps(d * s), m1 = _mm256_set1_ps(min * m);
		scale_min_k4(2 * j + 1, sc, &s, &m);
		const __m256 d2 = _mm256_set1_ps(d * s), m2 = _mm256_set1_ps(min * m);
		for (int l = 0; l < 32; l += 8) {
			__m256i v = u8x8(q + l);
			_mm256_storeu_ps(y + l, mulq_sub(_mm256_and_si256(v, lo), d1, m1));
			_mm256_storeu_ps(y + 32 + l, mulq_sub(_mm256_srli_epi32(v, 4), d2, m2));
		}
	}
}

AVX2 static void dq_q5_k_avx2(float *y, const uint8_t *b)
{
	const float d = half_at(b), min = half_at(b + 2);
	const uint8_t *sc = b + 4, *qh = b + 16, *ql = b + 48;
	const __m256i lo = _mm256_set1_epi32(0xF), bit = _mm256_set1_epi32(0x10);
	uint8_t s, m;

	for (int j = 0; j < 4; j++, ql += 32, y += 64) {
		scale_min_k4(2 * j, sc, &s, &m);
		const __m256 d1 = _mm256_set1_ps(d * s), m1 = _mm256_set1_ps(min * m);
		scale_min_k4(2 * j + 1, sc, &s, &m);
		const __m256 d2 = _mm256_set1_ps(d * s), m2 = _mm256_set1_ps(min * m);
		const __m128i s1 = _mm_cvtsi32_si128(2 * j), s2 = _mm_cvtsi32_si128(2 * j + 1);
		for (int l = 0; l < 32; l += 8) {
			__m256i v = u8x8(ql + l), h = u8x8(qh + l);
			/* bits 2j and 2j + 1 of qh, as 16 */
			__m256i h1 = _mm256_slli_epi32(_mm256_srl_epi32(h, s1), 4);
			__m256i h2 = _mm256_slli_epi32(_mm256_srl_epi32(h, s2), 4);
			__m256i q1 = _mm256_or_si256(_mm256_and_si256(v, lo), _mm256_and_si256(h1, bit));
			__m256i q2 = _mm256_or_si256(_mm256_srli_epi32(v, 4), _mm256_and_si256(h2, bit));
			_mm256_storeu_ps(y + l, mulq_sub(q1, d1, m1));
			_mm256_storeu_ps(y + 32 + l, mulq_sub(q2, d2, m2));
		}
	}
}

AVX2 static void dq_q6_k_avx2(float *y, const uint8_t *b)
{
	const float d = half_at(b + 208);
	const uint8_t *ql = b, *qh = b + 128;
	const int8_t *sc = (const int8_t *)(b + 192);
	const __m256i lo = _mm256_set1_epi32(0xF), two = _mm256_set1_epi32(0x30),
		      off = _mm256_set1_epi32(32);

	for (int n = 0; n < 2; n++, y += 128, ql += 64, qh += 32, sc += 8)
		for (int l = 0; l < 32; l += 8) {
			int is = l / 16;
			__m256i a = u8x8(ql + l), c = u8x8(ql + l + 32), h = u8x8(qh + l);
			__m256i q1 = _mm256_or_si256(_mm256_and_si256(a, lo),
						     _mm256_and_si256(_mm256_slli_epi32(h, 4), two));
			__m256i q2 = _mm256_or_si256(_mm256_and_si256(c, lo),
						     _mm256_and_si256(_mm256_slli_epi32(h, 2), two));
			__m256i q3 = _mm256_or_si256(_mm256_srli_epi32(a, 4), _mm256_and_si256(h, two));
			__m256i q4 = _mm256_or_si256(_mm256_srli_epi32(c, 4),
						     _mm256_and_si256(_mm256_srli_epi32(h, 2), two));
			_mm256_storeu_ps(y + l, mulq(_mm256_sub_epi32(q1, off),
						     _mm256_set1_ps(d * sc[is + 0])));
			_mm256_storeu_ps(y + l + 32, mulq(_mm256_sub_epi32(q2, off),
							  _mm256_set1_ps(d * sc[is + 2])));
			_mm256_storeu_ps(y + l + 64, mulq(_mm256_sub_epi32(q3, off),
							  _mm256_set1_ps(d * sc[is + 4])));
			_mm256_storeu_ps(y + l + 96, mulq(_mm256_sub_epi32(q4, off),
							  _mm256_set1_ps(d * sc[is + 6])));
		}
}
#endif

kvt_dequant_block_fn kvt_dequant_block(uint32_t type, int simd)
{
#ifdef KVT_X86
	if (simd)
		switch (type) {
		case KVT_W_Q4_0: return dq_q4_0_avx2;
		case KVT_W_Q8_0: return dq_q8_0_avx2;
		case KVT_W_Q4_K: return dq_q4_k_avx2;
		case KVT_W_Q5_K: return dq_q5_k_avx2;
		case KVT_W_Q6_K: return dq_q6_k_avx2;
		}
#endif
	return ref_fn(type);
}

void kvt_dequant(uint32_t type, float *dst, const void *src, size_t nblk, int simd)
{
	const struct kvt_qtype *t = kvt_qtype(type);
	kvt_dequant_block_fn f = kvt_dequant_block(type, simd);
	const uint8_t *b = src;

	if (!t)
		return;
	for (size_t i = 0; i < nblk; i++, b += t->size, dst += t->blk)
		f(dst, b);
}

/* ---- quantizers ---- */

static inline int nearest(float x)
{
	return (int)lrintf(x);
}

static inline int clampi(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* The value of largest magnitude, with its sign. */
static float signed_max(const float *x, int n)
{
	float amax = 0, max = 0;

	for (int i = 0; i < n; i++)
		if (fabsf(x[i]) > amax) {
			amax = fabsf(x[i]);
			max = x[i];
		}
	return max;
}

static void min_max(const float *x, int n, float *mn, float *mx)
{
	*mn = *mx = x[0];
	for (int i = 1; i < n; i++) {
		if (x[i] < *mn)
			*mn = x[i];
		if (x[i] > *mx)
			*mx = x[i];
	}
}

/* Round-trip a scale through f16, as it will be read. */
static inline float as_half(float f)
{
	return h2f(f2h(f));
}

/* q4_0 and q5_0: d = the signed extreme / -half, q = x / d + half. */
static void q_sym32(uint8_t *b, const float *x, int bits)
{
	const int half = 1 << (bits - 1), top = (1 << bits) - 1;
	const float d = as_half(signed_max(x, 32) / -half), id = d ? 1.0f / d : 0.0f;
	uint32_t qh = 0;
	uint8_t *qs = b + (bits == 5 ? 6 : 2);

	put_half(b, d);
	for (int j = 0; j < 16; j++) {
		int q0 = clampi(nearest(x[j] * id) + half, 0, top);
		int q1 = clampi(nearest(x[j + 16] * id) + half, 0, top);

		qs[j] = (uint8_t)((q0 & 0xF) | (q1 & 0xF) << 4);
		qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
	}
	if (bits == 5)
		memcpy(b + 2, &qh, sizeof(qh));
}

/* q4_1 and q5_1: d = (max - min) / top, m = min, q = (x - m) / d. */
static void q_asym32(uint8_t *b, const float *x, int bits)
{
	const int top = (1 << bits) - 1;
	float mn, mx;
	uint32_t qh = 0;
	uint8_t *qs = b + (bits == 5 ? 8 : 4);

	min_max(x, 32, &mn, &mx);
	const float d = as_half((mx - mn) / top), m = as_half(mn), id = d ? 1.0f / d : 0.0f;
	put_half(b, d);
	put_half(b + 2, m);
	for (int j = 0; j < 16; j++) {
		int q0 = clampi(nearest((x[j] - m) * id), 0, top);
		int q1 = clampi(nearest((x[j + 16] - m) * id), 0, top);

		qs[j] = (uint8_t)((q0 & 0xF) | (q1 & 0xF) << 4);
		qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
	}
	if (bits == 5)
		memcpy(b + 4, &qh, sizeof(qh));
}

static void q_q8_0(uint8_t *b, const float *x)
{
	float amax = fabsf(signed_max(x, 32));
	const float d = as_half(amax / 127), id = d ? 1.0f / d : 0.0f;

	put_half(b, d);
	for (int j = 0; j < 32; j++)
		b[2 + j] = (uint8_t)(int8_t)clampi(nearest(x[j] * id), -127, 127);
}

/* The scale and min of each of nsub sub-blocks of len values for
 * asymmetric quants 0..top (min <= 0 kept as -min >= 0), then both
 * quantized against super-block scales of lbits bits: ls, lm, and d,
 * dmin as stored (f16). */
static void sub_scales(const float *x, int nsub, int len, int top, int lbits,
		       uint8_t *ls, uint8_t *lm, float *d, float *dmin)
{
	float sc[16], mins[16], max_sc = 0, max_min = 0;
	const int lmax = (1 << lbits) - 1;

	for (int j = 0; j < nsub; j++) {
		float mn, mx;
		min_max(x + j * len, len, &mn, &mx);
		if (mn > 0)
			mn = 0;
		sc[j] = (mx - mn) / top;
		mins[j] = -mn;
		if (sc[j] > max_sc)
			max_sc = sc[j];
		if (mins[j] > max_min)
			max_min = mins[j];
	}
	*d = as_half(max_sc / lmax);
	*dmin = as_half(max_min / lmax);
	for (int j = 0; j < nsub; j++) {
		ls[j] = (uint8_t)(*d ? clampi(nearest(sc[j] / *d), 0, lmax) : 0);
		lm[j] = (uint8_t)(*dmin ? clampi(nearest(mins[j] / *dmin), 0, lmax) : 0);
	}
}

/* Value x against a sub-block of step dl and offset ml: 0..top. */
static inline int asym_q(float x, float dl, float ml, int top)
{
	return dl ? clampi(nearest((x + ml) / dl), 0, top) : 0;
}

/* Four 2-bit values a stride of 32 apart per byte, as q2_k and q3_k
 * store them. */
static void pack2(uint8_t *qs, const uint8_t *L)
{
	for (int j = 0; j < QK_K; j += 128)
		for (int l = 0; l < 32; ++l)
			qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 |
						  L[j + l + 96] << 6);
}

static void q_q2_k(uint8_t *b, const float *x)
{
	uint8_t ls[16], lm[16], L[QK_K];
	float d, dmin;

	sub_scales(x, 16, 16, 3, 4, ls, lm, &d, &dmin);
	for (int j = 0; j < 16; j++) {
		b[j] = (uint8_t)(ls[j] | lm[j] << 4);
		for (int i = 0; i < 16; i++)
			L[16 * j + i] = (uint8_t)asym_q(x[16 * j + i], d * ls[j], dmin * lm[j], 3);
	}
	pack2(b + 16, L);
	put_half(b + 80, d);
	put_half(b + 82, dmin);
}

static void q_q3_k(uint8_t *b, const float *x)
{
	float sc[16], d;
	uint8_t L[QK_K], *hmask = b, *packed = b + 96;
	int Ls[16];

	for (int j = 0; j < 16; j++)
		sc[j] = signed_max(x + 16 * j, 16) / -4;
	d = as_half(signed_max(sc, 16) / -32);
	for (int j = 0; j < 16; j++)
		Ls[j] = d ? clampi(nearest(sc[j] / d), -32, 31) + 32 : 32;
	memset(packed, 0, 12);
	for (int j = 0; j < 16; j++) {
		int l = Ls[j];
		if (j < 8)
			packed[j] = (uint8_t)(l & 0xF);
		else
			packed[j - 8] |= (uint8_t)((l & 0xF) << 4);
		packed[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
	}
	for (int j = 0; j < 16; j++) {
		float dl = d * (Ls[j] - 32);
		for (int i = 0; i < 16; i++)
			L[16 * j + i] = (uint8_t)(dl ? clampi(nearest(x[16 * j + i] / dl), -4, 3) + 4 : 4);
	}
	memset(hmask, 0, 32);
	for (int j = 0; j < QK_K; j++)
		if (L[j] > 3) {
			hmask[j % 32] |= (uint8_t)(1u << (j / 32));
			L[j] -= 4;
		}
	pack2(b + 32, L);
	put_half(b + 108, d);
}

/* q4_k and q5_k's scales and mins: 6 bits each, in 12 bytes. */
static void pack_k4(uint8_t *q, const uint8_t *ls, const uint8_t *lm)
{
	for (int j = 0; j < 8; j++) {
		if (j < 4) {
			q[j] = ls[j];
			q[j + 4] = lm[j];
		} else {
			q[j + 4] = (uint8_t)((ls[j] & 0xF) | (lm[j] & 0xF) << 4);
			q[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
			q[j] |= (uint8_t)((lm[j] >> 4) << 6);
		}
	}
}

/* q4_k (bits 4) and q5_k (bits 5). */
static void q_k45(uint8_t *b, const float *x, int bits)
{
	const int top = (1 << bits) - 1;
	uint8_t ls[8], lm[8], L[QK_K];
	uint8_t *qh = b + 16, *ql = b + (bits == 5 ? 48 : 16);
	float d, dmin;

	sub_scales(x, 8, 32, top, 6, ls, lm, &d, &dmin);
	put_half(b, d);
	put_half(b + 2, dmin);
	pack_k4(b + 4, ls, lm);
	for (int j = 0; j < 8; j++)
		for (int i = 0; i < 32; i++)
			L[32 * j + i] = (uint8_t)asym_q(x[32 * j + i], d * ls[j], dmin * lm[j], top);
	if (bits == 5)
		memset(qh, 0, 32);
	for (int c = 0; c < 4; c++)
		for (int l = 0; l < 32; l++) {
			uint8_t a = L[64 * c + l], e = L[64 * c + 32 + l];
			ql[32 * c + l] = (uint8_t)((a & 0xF) | (e & 0xF) << 4);
			if (bits == 5)
				qh[l] |= (uint8_t)((a >> 4) << (2 * c) | (e >> 4) << (2 * c + 1));
		}
}

static void q_q6_k(uint8_t *b, const float *x)
{
	float sc[16], d;
	int8_t *scales = (int8_t *)(b + 192);
	uint8_t L[QK_K], *ql = b, *qh = b + 128;

	for (int j = 0; j < 16; j++)
		sc[j] = signed_max(x + 16 * j, 16) / -32;
	d = as_half(signed_max(sc, 16) / -128);
	for (int j = 0; j < 16; j++) {
		scales[j] = (int8_t)(d ? clampi(nearest(sc[j] / d), -128, 127) : 0);
		float dl = d * scales[j];
		for (int i = 0; i < 16; i++)
			L[16 * j + i] = (uint8_t)(dl ? clampi(nearest(x[16 * j + i] / dl), -32, 31) + 32 : 32);
	}
	for (int n = 0; n < QK_K; n += 128)
		for (int l = 0; l < 32; l++) {
			uint8_t q1 = L[n + l], q2 = L[n + l + 32], q3 = L[n + l + 64], q4 = L[n + l + 96];
			ql[n / 2 + l] = (uint8_t)((q1 & 0xF) | (q3 & 0xF) << 4);
			ql[n / 2 + l + 32] = (uint8_t)((q2 & 0xF) | (q4 & 0xF) << 4);
			qh[n / 4 + l] = (uint8_t)((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
		}
	put_half(b + 208, d);
}

int kvt_quantize(uint32_t type, void *dst, const float *src, size_t n)
{
	const struct kvt_qtype *t = kvt_qtype(type);
	uint8_t *b = dst;

	if (!t || n % t->blk)
		return -EINVAL;
	for (size_t i = 0; i < n / t->blk; i++, b += t->size, src += t->blk) {
		switch (type) {
		case KVT_W_Q4_0: q_sym32(b, src, 4); break;
		case KVT_W_Q5_0: q_sym32(b, src, 5); break;
		case KVT_W_Q4_1: q_asym32(b, src, 4); break;
		case KVT_W_Q5_1: q_asym32(b, src, 5); break;
		case KVT_W_Q8_0: q_q8_0(b, src); break;
		case KVT_W_Q2_K: q_q2_k(b, src); break;
		case KVT_W_Q3_K: q_q3_k(b, src); break;
		case KVT_W_Q4_K: q_k45(b, src, 4); break;
		case KVT_W_Q5_K: q_k45(b, src, 5); break;
		case KVT_W_Q6_K: q_q6_k(b, src); break;
		}
	}
	return 0;
}
