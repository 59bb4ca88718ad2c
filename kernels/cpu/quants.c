/* SPDX-License-Identifier: MIT */
/*
 * Quantized blocks (quants.h): the reference dequantizers, their AVX2 and
 * AVX-512 twins, and the quantizers.
 *
 * The reference code is written as ggml's is, operation for operation in
 * float, so that its roundings are llama.cpp's: where a product of two
 * scales and a quant is formed, it is formed in the same order. The SIMD
 * code forms the same products (every one exact in f32 but q6_k's last,
 * which both round once, the same way), or looks them up in a table of
 * them formed so, and agrees with the reference to the bit.
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

/* q3_k: hmask[32], qs[64], scales[12], d. */
static void dq_q3_k(float *y, const uint8_t *b)
{
	const uint8_t *hm = b, *q = b + 32;
	const float d_all = half_at(b + 108);
	int8_t scales[16];
	uint8_t m = 1;
	int is = 0;

	kvt_q3k_scales(scales, b + 96);
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

/* q4_k: d, dmin, scales[12], qs[128]. */
static void dq_q4_k(float *y, const uint8_t *b)
{
	const float d = half_at(b), min = half_at(b + 2);
	const uint8_t *sc = b + 4, *q = b + 16;
	int is = 0;
	uint8_t s, m;

	for (int j = 0; j < QK_K; j += 64) {
		kvt_scale_min_k4(is + 0, sc, &s, &m);
		const float d1 = d * s, m1 = min * m;
		kvt_scale_min_k4(is + 1, sc, &s, &m);
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
		kvt_scale_min_k4(is + 0, sc, &s, &m);
		const float d1 = d * s, m1 = min * m;
		kvt_scale_min_k4(is + 1, sc, &s, &m);
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

/*
 * Every value is the reference's own product: the same integer quant
 * times the same scales, formed in the same order. Where a quant is taken
 * at a power of two (a high nibble masked in place, 16 q, not shifted
 * down; AVX-512 q6_k's six bits at the top of a lane) its scale is taken
 * over the same power, exactly, so the real product, and with it the
 * rounding and the sign of a zero, is unchanged. A product of scale and
 * quant is exact in f32 but q6_k's last (rounded once, by both), so
 * d * q - m is one FMA.
 */
#ifdef KVT_X86
/* A constant in every lane, as a broadcast load: GCC builds a
 * _mm256_set1_epi32 in a general register and moves it over, two port-5
 * uops on every call. */
#define I32(v)		_mm256_broadcastd_epi32(_mm_cvtsi32_si128(v))
#define I8(v)		_mm256_broadcastb_epi8(_mm_cvtsi32_si128(v))

/* The per-block scales are stored, then broadcast from memory (a load
 * each); GCC would keep them in a register and shuffle each out on port
 * 5. */
#define FROM_MEMORY(a)	__asm__("" : "+m"(a))

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

/* d * q - m for eight int32 q, d * q exact: rounded once, where the
 * reference rounds its subtraction. */
AVX2_INLINE __m256 mulq_sub(__m256i q, __m256 d, __m256 m)
{
	return _mm256_fmsub_ps(_mm256_cvtepi32_ps(q), d, m);
}

/* d * q + m likewise. */
AVX2_INLINE __m256 mulq_add(__m256i q, __m256 d, __m256 m)
{
	return _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), d, m);
}

/* v shifted left by n bits in 16-bit lanes, right by -n (n a constant
 * once inlined). */
AVX2_INLINE __m256i shl_16(__m256i v, int n)
{
	return n >= 0 ? _mm256_slli_epi16(v, n) : _mm256_srli_epi16(v, -n);
}

/* The f16 at p in every lane, exactly as half_at reads it: a broadcast
 * load and one F16C conversion. */
AVX2_INLINE __m256 half8(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, sizeof(h));
	return _mm256_cvtph_ps(_mm_set1_epi16((short)h));
}

/* Sixteen int8 in x to float, times the scale at d. */
AVX2_INLINE void i8x16(float *y, __m128i x, const float *d)
{
	const __m256 dk = _mm256_broadcast_ss(d);

	_mm256_storeu_ps(y, mulq(_mm256_cvtepi8_epi32(x), dk));
	_mm256_storeu_ps(y + 8, mulq(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(x, x)), dk));
}

/* The high nibbles as 16 q, over d / 16. */
AVX2 static void dq_q4_0_avx2(float *y, const uint8_t *b)
{
	const __m256 d = half8(b), d16 = _mm256_mul_ps(d, _mm256_set1_ps(0.0625f));

	for (int j = 0; j < 16; j += 8) {
		__m256i q = u8x8(b + 2 + j);
		_mm256_storeu_ps(y + j, mulq(_mm256_sub_epi32(_mm256_and_si256(q, I32(0xF)), I32(8)), d));
		_mm256_storeu_ps(y + j + 16, mulq(_mm256_sub_epi32(_mm256_and_si256(q, I32(0xF0)),
								    I32(0x80)), d16));
	}
}

AVX2 static void dq_q4_1_avx2(float *y, const uint8_t *b)
{
	const __m256 d = half8(b), m = half8(b + 2), d16 = _mm256_mul_ps(d, _mm256_set1_ps(0.0625f));

	for (int j = 0; j < 16; j += 8) {
		__m256i q = u8x8(b + 4 + j);
		_mm256_storeu_ps(y + j, mulq_add(_mm256_and_si256(q, I32(0xF)), d, m));
		_mm256_storeu_ps(y + j + 16, mulq_add(_mm256_and_si256(q, I32(0xF0)), d16, m));
	}
}

/* Value i's fifth bit is bit i of qh: shifted right by i from qh << 4 for
 * the first 16 (it lands on bit 4), by i - 4 from qh for the rest. */
static const int32_t q5_shift[4][8] __attribute__((aligned(32))) = {
	{ 0, 1, 2, 3, 4, 5, 6, 7 }, { 8, 9, 10, 11, 12, 13, 14, 15 },
	{ 12, 13, 14, 15, 16, 17, 18, 19 }, { 20, 21, 22, 23, 24, 25, 26, 27 },
};

/* q - 16 as the nibble less 16 where the fifth bit is clear: the bits of
 * ~qh, subtracted. */
AVX2 static void dq_q5_0_avx2(float *y, const uint8_t *b)
{
	const __m256 d = half8(b);
	uint32_t qh;

	memcpy(&qh, b + 2, sizeof(qh));
	const __m256i h0 = I32((int)(~qh << 4)), h1 = I32((int)~qh);

	for (int j = 0; j < 2; j++) {
		__m256i q = u8x8(b + 6 + 8 * j);
		__m256i n0 = _mm256_srlv_epi32(h0, _mm256_load_si256((const __m256i *)q5_shift[j]));
		__m256i n1 = _mm256_srlv_epi32(h1, _mm256_load_si256((const __m256i *)q5_shift[j + 2]));
		__m256i x0 = _mm256_sub_epi32(_mm256_and_si256(q, I32(0xF)), _mm256_and_si256(n0, I32(0x10)));
		__m256i x1 = _mm256_sub_epi32(_mm256_srli_epi32(q, 4), _mm256_and_si256(n1, I32(0x10)));
		_mm256_storeu_ps(y + 8 * j, mulq(x0, d));
		_mm256_storeu_ps(y + 8 * j + 16, mulq(x1, d));
	}
}

AVX2 static void dq_q5_1_avx2(float *y, const uint8_t *b)
{
	const __m256 d = half8(b), m = half8(b + 2);
	uint32_t qh;

	memcpy(&qh, b + 4, sizeof(qh));
	const __m256i h0 = I32((int)(qh << 4)), h1 = I32((int)qh);

	for (int j = 0; j < 2; j++) {
		__m256i q = u8x8(b + 8 + 8 * j);
		__m256i e0 = _mm256_srlv_epi32(h0, _mm256_load_si256((const __m256i *)q5_shift[j]));
		__m256i e1 = _mm256_srlv_epi32(h1, _mm256_load_si256((const __m256i *)q5_shift[j + 2]));
		__m256i x0 = _mm256_or_si256(_mm256_and_si256(q, I32(0xF)), _mm256_and_si256(e0, I32(0x10)));
		__m256i x1 = _mm256_or_si256(_mm256_srli_epi32(q, 4), _mm256_and_si256(e1, I32(0x10)));
		_mm256_storeu_ps(y + 8 * j, mulq_add(x0, d, m));
		_mm256_storeu_ps(y + 8 * j + 16, mulq_add(x1, d, m));
	}
}

AVX2 static void dq_q8_0_avx2(float *y, const uint8_t *b)
{
	const __m256 d = half8(b);

	for (int j = 0; j < 32; j += 8)
		_mm256_storeu_ps(y + j, mulq(_mm256_cvtepi8_epi32(
			_mm_loadl_epi64((const __m128i *)(b + 2 + j))), d));
}

/* q2_k's 2-bit quants masked in place, 4^j q in sub-blocks 2j and 2j + 1
 * of each half, so their scales are over 4^j. */
static const float q2_pow[8] __attribute__((aligned(32))) = {
	1, 1, 1.0f / 4, 1.0f / 4, 1.0f / 16, 1.0f / 16, 1.0f / 64, 1.0f / 64,
};

AVX2 static void dq_q2_k_avx2(float *y, const uint8_t *b)
{
	const uint8_t *q = b + 16;
	const __m256 d4 = _mm256_mul_ps(half8(b + 80), _mm256_load_ps(q2_pow)), mn = half8(b + 82);
	const __m128i s = _mm_loadu_si128((const __m128i *)b);
	float dl[16] __attribute__((aligned(32))), ml[16] __attribute__((aligned(32)));

	for (int h = 0; h < 2; h++) {
		__m256i v = _mm256_cvtepu8_epi32(h ? _mm_srli_si128(s, 8) : s);
		_mm256_store_ps(dl + 8 * h, mulq(_mm256_and_si256(v, I32(0xF)), d4));
		_mm256_store_ps(ml + 8 * h, mulq(_mm256_srli_epi32(v, 4), mn));
	}
	FROM_MEMORY(dl);
	FROM_MEMORY(ml);
	/* Each quant byte holds four values 32 apart. */
	for (int n = 0; n < 2; n++, q += 32, y += 128)
		for (int h = 0; h < 2; h++) {
			__m256i v0 = u8x8(q + 16 * h), v1 = u8x8(q + 16 * h + 8);
#pragma GCC unroll 4
			for (int j = 0; j < 4; j++) {
				const int k = 8 * n + 2 * j + h;
				__m256 dk = _mm256_broadcast_ss(dl + k), mk = _mm256_broadcast_ss(ml + k);
				__m256i m = I32(3 << 2 * j);
				float *yj = y + 32 * j + 16 * h;

				_mm256_storeu_ps(yj, mulq_sub(_mm256_and_si256(v0, m), dk, mk));
				_mm256_storeu_ps(yj + 8, mulq_sub(_mm256_and_si256(v1, m), dk, mk));
			}
		}
}

/*
 * q3_k's quants, 32 at a time as bytes: the pair of bits j shifted down,
 * less 4 where mask bit 4n + j is clear (that bit of the inverted mask
 * moved onto bit 2); no shift moves a wanted bit across a byte. Halves
 * of the vector are sub-blocks 8n + 2j and 8n + 2j + 1.
 */
AVX2_INLINE __m256i q3_k_bytes(__m256i v, __m256i nh, int n, int j)
{
	return _mm256_sub_epi8(_mm256_and_si256(shl_16(v, -2 * j), I8(3)),
			       _mm256_and_si256(shl_16(nh, 2 - 4 * n - j), I8(4)));
}

AVX2 static void dq_q3_k_avx2(float *y, const uint8_t *b)
{
	const uint8_t *q = b + 32;
	const __m256 d = half8(b + 108);
	const __m256i nh = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)b), I8(0xFF));
	float dl[16] __attribute__((aligned(32)));
	int8_t sc[16];

	kvt_q3k_scales(sc, b + 96);
	const __m128i s = _mm_loadu_si128((const __m128i *)sc);
	for (int h = 0; h < 2; h++) {
		__m256i v = _mm256_cvtepu8_epi32(h ? _mm_srli_si128(s, 8) : s);
		_mm256_store_ps(dl + 8 * h, mulq(_mm256_sub_epi32(v, I32(32)), d));
	}
	FROM_MEMORY(dl);
	for (int n = 0; n < 2; n++, q += 32, y += 128) {
		const __m256i v = _mm256_loadu_si256((const __m256i *)q);
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++) {
			__m256i x = q3_k_bytes(v, nh, n, j);
			i8x16(y + 32 * j, _mm256_castsi256_si128(x), dl + 8 * n + 2 * j);
			i8x16(y + 32 * j + 16, _mm256_extracti128_si256(x, 1), dl + 8 * n + 2 * j + 1);
		}
	}
}

/* q4_k and q5_k's eight 6-bit scales (bytes 0-7) and eight mins (8-15)
 * from the 12 bytes at p (the 4 after are read, unused): ggml's kmask
 * arithmetic, get_scale_min_k4 for all sixteen at once, on the words
 * u0, u2, u1, u2 >> 4 (low bits) and u0, u0, u1, u1 (high bits). */
AVX2_INLINE __m128i k4_scales(const uint8_t *p)
{
	const __m128i x = _mm_loadu_si128((const __m128i *)p);
	const __m128i lo = _mm_srlv_epi32(_mm_shuffle_epi32(x, _MM_SHUFFLE(2, 1, 2, 0)),
					  _mm_setr_epi32(0, 0, 0, 4));
	const __m128i hi = _mm_srli_epi32(_mm_shuffle_epi32(x, _MM_SHUFFLE(1, 1, 0, 0)), 2);

	return _mm_or_si128(_mm_and_si128(lo, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f,
							      0x3f3f3f3f, 0x0f0f0f0f)),
			    _mm_and_si128(hi, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030)));
}

/* d * scale * f (f per sub-block, a power of two) and dmin * min, for
 * q4_k and q5_k. */
AVX2_INLINE void k4_dm(float *dl, float *ml, const uint8_t *b, __m256 f)
{
	const __m128i s = k4_scales(b + 4);

	_mm256_store_ps(dl, mulq(_mm256_cvtepu8_epi32(s), _mm256_mul_ps(half8(b), f)));
	_mm256_store_ps(ml, mulq(_mm256_cvtepu8_epi32(_mm_srli_si128(s, 8)), half8(b + 2)));
	FROM_MEMORY(*(float (*)[8])dl);
	FROM_MEMORY(*(float (*)[8])ml);
}

/* The odd sub-blocks' nibbles masked in place, 16 q, over d / 16. */
AVX2 static void dq_q4_k_avx2(float *y, const uint8_t *b)
{
	const uint8_t *q = b + 16;
	float dl[8] __attribute__((aligned(32))), ml[8] __attribute__((aligned(32)));

	k4_dm(dl, ml, b, _mm256_setr_ps(1, 0.0625f, 1, 0.0625f, 1, 0.0625f, 1, 0.0625f));
	for (int j = 0; j < 4; j++, q += 32, y += 64) {
		const __m256 d1 = _mm256_broadcast_ss(dl + 2 * j), m1 = _mm256_broadcast_ss(ml + 2 * j);
		const __m256 d2 = _mm256_broadcast_ss(dl + 2 * j + 1);
		const __m256 m2 = _mm256_broadcast_ss(ml + 2 * j + 1);
		for (int l = 0; l < 32; l += 8) {
			__m256i v = u8x8(q + l);
			_mm256_storeu_ps(y + l, mulq_sub(_mm256_and_si256(v, I32(0xF)), d1, m1));
			_mm256_storeu_ps(y + 32 + l, mulq_sub(_mm256_and_si256(v, I32(0xF0)), d2, m2));
		}
	}
}

/* q5_k's sub-blocks 2j and 2j + 1 as bytes: the nibbles with qh's bits 2j
 * and 2j + 1 moved onto bit 4. */
AVX2_INLINE void q5_k_bytes(__m256i *x1, __m256i *x2, const uint8_t *ql, __m256i h, int j)
{
	const __m256i l = _mm256_loadu_si256((const __m256i *)ql);

	*x1 = _mm256_or_si256(_mm256_and_si256(l, I8(0xF)),
			      _mm256_and_si256(shl_16(h, 4 - 2 * j), I8(0x10)));
	*x2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l, 4), I8(0xF)),
			      _mm256_and_si256(shl_16(h, 3 - 2 * j), I8(0x10)));
}

/* Eight bytes in x to float, d * q - m. */
AVX2_INLINE void u8x8_sub(float *y, __m128i x, __m256 d, __m256 m)
{
	_mm256_storeu_ps(y, mulq_sub(_mm256_cvtepu8_epi32(x), d, m));
}

AVX2 static void dq_q5_k_avx2(float *y, const uint8_t *b)
{
	const __m256i h = _mm256_loadu_si256((const __m256i *)(b + 16));
	float dl[8] __attribute__((aligned(32))), ml[8] __attribute__((aligned(32)));

	k4_dm(dl, ml, b, _mm256_set1_ps(1));
#pragma GCC unroll 4
	for (int j = 0; j < 4; j++, y += 64) {
		const __m256 d1 = _mm256_broadcast_ss(dl + 2 * j), m1 = _mm256_broadcast_ss(ml + 2 * j);
		const __m256 d2 = _mm256_broadcast_ss(dl + 2 * j + 1);
		const __m256 m2 = _mm256_broadcast_ss(ml + 2 * j + 1);
		__m256i x1, x2;

		q5_k_bytes(&x1, &x2, b + 48 + 32 * j, h, j);
		for (int k = 0; k < 2; k++) {
			__m128i a = k ? _mm256_extracti128_si256(x1, 1) : _mm256_castsi256_si128(x1);
			__m128i c = k ? _mm256_extracti128_si256(x2, 1) : _mm256_castsi256_si128(x2);
			u8x8_sub(y + 16 * k, a, d1, m1);
			u8x8_sub(y + 16 * k + 8, _mm_unpackhi_epi64(a, a), d1, m1);
			u8x8_sub(y + 32 + 16 * k, c, d2, m2);
			u8x8_sub(y + 32 + 16 * k + 8, _mm_unpackhi_epi64(c, c), d2, m2);
		}
	}
}

/*
 * q6_k's quants, 32 at a time as bytes: (nibble | two high bits << 4) -
 * 32, then to float, times d * sc formed first as in the reference. The
 * 16-bit shifts carry bits across bytes only where the masks drop them.
 * Each 16 bytes are one sub-block.
 */
AVX2 static void dq_q6_k_avx2(float *y, const uint8_t *b)
{
	const uint8_t *ql = b, *qh = b + 128;
	const __m128i s = _mm_loadu_si128((const __m128i *)(b + 192));
	const __m256 d = half8(b + 208);
	const __m256i m4 = I8(0x0F), m3 = I8(0x30), o = I8(32);
	float dl[16] __attribute__((aligned(32)));

	for (int h = 0; h < 2; h++)
		_mm256_store_ps(dl + 8 * h, mulq(_mm256_cvtepi8_epi32(h ? _mm_srli_si128(s, 8) : s), d));
	FROM_MEMORY(dl);
	for (int n = 0; n < 2; n++, y += 128, ql += 64, qh += 32) {
		const __m256i a = _mm256_loadu_si256((const __m256i *)ql);
		const __m256i c = _mm256_loadu_si256((const __m256i *)(ql + 32));
		const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
		__m256i q[4];
#define Q6(x, hb)	_mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(x, m4), \
							_mm256_and_si256(hb, m3)), o)
		q[0] = Q6(a, _mm256_slli_epi16(h, 4));
		q[1] = Q6(c, _mm256_slli_epi16(h, 2));
		q[2] = Q6(_mm256_srli_epi16(a, 4), h);
		q[3] = Q6(_mm256_srli_epi16(c, 4), _mm256_srli_epi16(h, 2));
#undef Q6
		for (int i = 0; i < 4; i++) {
			i8x16(y + 32 * i, _mm256_castsi256_si128(q[i]), dl + 8 * n + 2 * i);
			i8x16(y + 32 * i + 16, _mm256_extracti128_si256(q[i], 1), dl + 8 * n + 2 * i + 1);
		}
	}
}

/* ---- AVX-512 ---- */

/*
 * Sixteen lanes, and vpermps, which looks sixteen floats up by the low
 * four bits of each index (vpermt2ps: 32, by five). Where 16 or 32 quants
 * share their scales (q4_0, q4_1, q5_0, q5_1, q4_k), a table of the values
 * a quant can take, each formed by the reference's own operations, and one
 * lookup per sixteen values, with no conversion or arithmetic per value;
 * q8_0 and q6_k do their arithmetic sixteen wide. AVX-512F only, which is
 * all kvt_cpu_simd() 2 promises.
 */
#define AVX512		__attribute__((target("avx512f,avx2,fma,f16c")))
#define AVX512_INLINE	static inline __attribute__((always_inline, target("avx512f,avx2,fma,f16c")))
#define Z32(v)		_mm512_broadcastd_epi32(_mm_cvtsi32_si128(v))
#define SEL		0xE4		/* vpternlogd: c ? a : b, bit by bit */

static const float iota[32] __attribute__((aligned(64))) = {
	0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
	16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
};

/* Sixteen bytes, zero-extended to sixteen int32 lanes. */
AVX512_INLINE __m512i u8x16(const uint8_t *p)
{
	return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}

AVX512_INLINE __m512 bcast(float f)
{
	return _mm512_set1_ps(f);
}

AVX512_INLINE __m512 half16(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, sizeof(h));
	return _mm512_cvtph_ps(_mm256_set1_epi16((short)h));
}

/* d * q for sixteen int32 q. */
AVX512_INLINE __m512 mulq16(__m512i q, __m512 d)
{
	return _mm512_mul_ps(_mm512_cvtepi32_ps(q), d);
}

/* d * scale (0-7) and dmin * min (8-15), for q4_k. */
AVX512_INLINE void k4_dm16(float *dm, const uint8_t *b)
{
	const __m512i two = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
	int32_t h;

	memcpy(&h, b, sizeof(h));
	const __m512 dd = _mm512_permutexvar_ps(two, _mm512_castps128_ps512(_mm_cvtph_ps(
		_mm_cvtsi32_si128(h))));

	_mm512_store_ps(dm, mulq16(_mm512_cvtepu8_epi32(k4_scales(b + 4)), dd));
	FROM_MEMORY(*(float (*)[16])dm);
}

/* d * (i - 8), looked up by the nibbles as they lie. */
AVX512 static void dq_q4_0_avx512(float *y, const uint8_t *b)
{
	const __m512 t = _mm512_mul_ps(_mm512_sub_ps(_mm512_load_ps(iota), bcast(8)), half16(b));
	const __m512i v = u8x16(b + 2);

	_mm512_storeu_ps(y, _mm512_permutexvar_ps(v, t));
	_mm512_storeu_ps(y + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), t));
}

/* d * i + m. */
AVX512 static void dq_q4_1_avx512(float *y, const uint8_t *b)
{
	const __m512 t = _mm512_fmadd_ps(_mm512_load_ps(iota), half16(b), half16(b + 2));
	const __m512i v = u8x16(b + 4);

	_mm512_storeu_ps(y, _mm512_permutexvar_ps(v, t));
	_mm512_storeu_ps(y + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), t));
}

/* 32 entries, d * (i - 16); the fifth bit from qh as a lane mask (value
 * i's is bit i). */
AVX512 static void dq_q5_0_avx512(float *y, const uint8_t *b)
{
	const __m512 d = half16(b), t1 = _mm512_mul_ps(_mm512_load_ps(iota), d);
	const __m512 t0 = _mm512_mul_ps(_mm512_sub_ps(_mm512_load_ps(iota), bcast(16)), d);
	const __m512i v = u8x16(b + 6);
	__m512i i0 = _mm512_and_si512(v, Z32(0xF)), i1 = _mm512_srli_epi32(v, 4);
	uint32_t qh;

	memcpy(&qh, b + 2, sizeof(qh));
	i0 = _mm512_mask_or_epi32(i0, (__mmask16)qh, i0, Z32(16));
	i1 = _mm512_mask_or_epi32(i1, (__mmask16)(qh >> 16), i1, Z32(16));
	_mm512_storeu_ps(y, _mm512_permutex2var_ps(t0, i0, t1));
	_mm512_storeu_ps(y + 16, _mm512_permutex2var_ps(t0, i1, t1));
}

/* 32 entries, d * i + m. */
AVX512 static void dq_q5_1_avx512(float *y, const uint8_t *b)
{
	const __m512 d = half16(b), m = half16(b + 2);
	const __m512 t0 = _mm512_fmadd_ps(_mm512_load_ps(iota), d, m);
	const __m512 t1 = _mm512_fmadd_ps(_mm512_load_ps(iota + 16), d, m);
	const __m512i v = u8x16(b + 8);
	__m512i i0 = _mm512_and_si512(v, Z32(0xF)), i1 = _mm512_srli_epi32(v, 4);
	uint32_t qh;

	memcpy(&qh, b + 4, sizeof(qh));
	i0 = _mm512_mask_or_epi32(i0, (__mmask16)qh, i0, Z32(16));
	i1 = _mm512_mask_or_epi32(i1, (__mmask16)(qh >> 16), i1, Z32(16));
	_mm512_storeu_ps(y, _mm512_permutex2var_ps(t0, i0, t1));
	_mm512_storeu_ps(y + 16, _mm512_permutex2var_ps(t0, i1, t1));
}

AVX512 static void dq_q8_0_avx512(float *y, const uint8_t *b)
{
	const __m512 d = half16(b);

	for (int j = 0; j < 32; j += 16)
		_mm512_storeu_ps(y + j, mulq16(_mm512_cvtepi8_epi32(
			_mm_loadu_si128((const __m128i *)(b + 2 + j))), d));
}

/* A table per sub-block, d * scale * i - dmin * min. */
AVX512 static void dq_q4_k_avx512(float *y, const uint8_t *b)
{
	const uint8_t *q = b + 16;
	const __m512 i16 = _mm512_load_ps(iota);
	float dl[16] __attribute__((aligned(64))), *ml = dl + 8;

	k4_dm16(dl, b);
	for (int j = 0; j < 4; j++, q += 32, y += 64) {
		const __m512 t1 = _mm512_fmsub_ps(i16, bcast(dl[2 * j]), bcast(ml[2 * j]));
		const __m512 t2 = _mm512_fmsub_ps(i16, bcast(dl[2 * j + 1]), bcast(ml[2 * j + 1]));
		const __m512i v0 = u8x16(q), v1 = u8x16(q + 16);

		_mm512_storeu_ps(y, _mm512_permutexvar_ps(v0, t1));
		_mm512_storeu_ps(y + 16, _mm512_permutexvar_ps(v1, t1));
		_mm512_storeu_ps(y + 32, _mm512_permutexvar_ps(_mm512_srli_epi32(v0, 4), t2));
		_mm512_storeu_ps(y + 48, _mm512_permutexvar_ps(_mm512_srli_epi32(v1, 4), t2));
	}
}

/*
 * q6_k: each quant's six bits, the top one inverted, at the top of an
 * int32 lane: (q - 32) * 2^26, two's complement, exact as a float, over
 * a scale d * sc * 2^-26. Low nibbles lie at bit 0 with their high bits
 * put at 4, high nibbles in place at 4 with theirs at 8, each merged by
 * one vpternlogd; what lies above the six bits is shifted out.
 */
AVX512 static void dq_q6_k_avx512(float *y, const uint8_t *b)
{
	const uint8_t *ql = b, *qh = b + 128;
	float ds[16] __attribute__((aligned(64)));

	_mm512_store_ps(ds, _mm512_mul_ps(mulq16(_mm512_cvtepi8_epi32(_mm_loadu_si128(
					(const __m128i *)(b + 192))), half16(b + 208)), bcast(0x1p-26f)));
	FROM_MEMORY(ds);
	for (int n = 0; n < 2; n++, y += 128, ql += 64, qh += 32)
		for (int c = 0; c < 2; c++) {
			const float *sc = ds + 8 * n + c;
			__m512i a = u8x16(ql + 16 * c), e = u8x16(ql + 32 + 16 * c);
			__m512i h = _mm512_xor_si512(u8x16(qh + 16 * c), Z32(0xAA));
			__m512i h4 = _mm512_slli_epi32(h, 4);
			__m512i h2 = _mm512_slli_epi32(_mm512_and_si512(h, Z32(0xFC)), 2);
			__m512i q1 = _mm512_ternarylogic_epi32(a, h4, Z32(0x0F), SEL);
			__m512i q2 = _mm512_ternarylogic_epi32(e, h2, Z32(0x0F), SEL);
			__m512i q3 = _mm512_ternarylogic_epi32(a, h4, Z32(0xF0), SEL);
			__m512i q4 = _mm512_ternarylogic_epi32(e, h2, Z32(0xF0), SEL);
			_mm512_storeu_ps(y + 16 * c, mulq16(_mm512_slli_epi32(q1, 26), bcast(sc[0])));
			_mm512_storeu_ps(y + 16 * c + 32, mulq16(_mm512_slli_epi32(q2, 26), bcast(sc[2])));
			_mm512_storeu_ps(y + 16 * c + 64, mulq16(_mm512_slli_epi32(q3, 22), bcast(sc[4])));
			_mm512_storeu_ps(y + 16 * c + 96, mulq16(_mm512_slli_epi32(q4, 22), bcast(sc[6])));
		}
}
#endif

kvt_dequant_block_fn kvt_dequant_block(uint32_t type, int simd)
{
#ifdef KVT_X86
	/* q2_k, q3_k and q5_k keep their AVX2 code: AVX-512 versions (a
	 * table per sub-block, or the same bytes converted sixteen at a
	 * time) converted 13-20% faster but made the dot products, where the
	 * FMAs over the block weigh as much, no faster. */
	if (simd >= 2)
		switch (type) {
		case KVT_W_Q4_0: return dq_q4_0_avx512;
		case KVT_W_Q4_1: return dq_q4_1_avx512;
		case KVT_W_Q5_0: return dq_q5_0_avx512;
		case KVT_W_Q5_1: return dq_q5_1_avx512;
		case KVT_W_Q8_0: return dq_q8_0_avx512;
		case KVT_W_Q4_K: return dq_q4_k_avx512;
		case KVT_W_Q6_K: return dq_q6_k_avx512;
		}
	if (simd)
		switch (type) {
		case KVT_W_Q4_0: return dq_q4_0_avx2;
		case KVT_W_Q4_1: return dq_q4_1_avx2;
		case KVT_W_Q5_0: return dq_q5_0_avx2;
		case KVT_W_Q5_1: return dq_q5_1_avx2;
		case KVT_W_Q8_0: return dq_q8_0_avx2;
		case KVT_W_Q2_K: return dq_q2_k_avx2;
		case KVT_W_Q3_K: return dq_q3_k_avx2;
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

/* v truncated to 0..top, as ggml's MIN(top, (int8_t)v) for the v its
 * quantizers make (0.5 <= v < top + 1); NaN (from NaN or infinite x, or
 * a d so small that 1 / d overflows) to 0, which ggml's cast gives on
 * x86, without the cast's undefined behaviour. */
static inline int trunc_q(float v, int top)
{
	return v >= 1 ? (v < (float)top ? (int)v : top) : 0;
}

/* q4_0 and q5_0 as ggml's reference quantizers make them (the KV type
 * KVT_KV_Q4_0 stores q4_0 so): d = the signed extreme / -half, stored in
 * f16, each q = x / d + half rounded half up, with the unrounded d. */
static void q_sym32(uint8_t *b, const float *x, int bits)
{
	const int half = 1 << (bits - 1), top = (1 << bits) - 1;
	const float d = signed_max(x, 32) / -half, id = d ? 1.0f / d : 0.0f;
	const float off = (float)half + 0.5f;
	uint32_t qh = 0;
	uint8_t *qs = b + (bits == 5 ? 6 : 2);

	put_half(b, d);
	for (int j = 0; j < 16; j++) {
		int q0 = trunc_q(x[j] * id + off, top);
		int q1 = trunc_q(x[j + 16] * id + off, top);

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

/* q8_0 as ggml's reference quantizer makes it (the KV type KVT_KV_Q8_0
 * stores these): d = max |x| / 127 stored in f16, each q = round(x / d)
 * with the unrounded d. */
static void q_q8_0(uint8_t *b, const float *x)
{
	const float d = fabsf(signed_max(x, 32)) / 127, id = d ? 1.0f / d : 0.0f;

	put_half(b, d);
	for (int j = 0; j < 32; j++) {
		float r = roundf(x[j] * id);	/* -127..127, but for NaN or infinite x */

		b[2 + j] = (uint8_t)(int8_t)(r >= -127 ? (r <= 127 ? (int)r : 127) : r < 0 ? -127 : 0);
	}
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
