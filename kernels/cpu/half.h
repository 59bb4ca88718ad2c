/* SPDX-License-Identifier: MIT */
/*
 * IEEE half <-> float, one value at a time, in portable integer code: the
 * reference the F16C paths agree with to the bit (kernels.c), and the
 * scales of quantized blocks (quants.c).
 */
#ifndef KVT_KERNELS_CPU_HALF_H
#define KVT_KERNELS_CPU_HALF_H

#include <stdint.h>
#include <string.h>

static inline float f32_of(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline uint32_t bits_of(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	return u;
}

/* Half to float, exact. A NaN keeps its sign and payload and comes back
 * quiet, as vcvtph2ps does. */
static inline float h2f(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = h >> 10 & 0x1f, m = h & 0x3ff;

	if (e == 0x1f)
		return f32_of(sign | 0x7f800000 | (m ? 0x400000 | m << 13 : 0));
	if (e)
		return f32_of(sign | (e + 112) << 23 | m << 13);
	if (!m)
		return f32_of(sign);
	e = 113;			/* subnormal m * 2^-24: normalise */
	while (!(m & 0x400)) {
		m <<= 1;
		e--;
	}
	return f32_of(sign | e << 23 | (m & 0x3ff) << 13);
}

/* Float to half, rounding to nearest even; overflow gives inf, tiny
 * values subnormals or zero; a NaN comes back quiet with the top of its
 * payload, as vcvtps2ph does. Integer only, so no FPU mode matters. */
static inline uint16_t f2h(float f)
{
	uint32_t x = bits_of(f), sign = x >> 16 & 0x8000, m, q, rem, half;
	unsigned shift;

	x &= 0x7fffffff;
	if (x > 0x7f800000)
		return (uint16_t)(sign | 0x7e00 | (x >> 13 & 0x3ff));
	if (x >= 0x477ff000)		/* 65520 and up round to inf */
		return (uint16_t)(sign | 0x7c00);
	if (x >= 0x38800000) {		/* normal half: rebias by 112 */
		x -= 0x38000000;
		return (uint16_t)(sign | (x + 0xfff + (x >> 13 & 1)) >> 13);
	}
	if (x <= 0x33000000)		/* at most half the smallest subnormal */
		return (uint16_t)sign;
	m = (x & 0x7fffff) | 0x800000;	/* value m * 2^(e - 150), in units of 2^-24: */
	shift = 126 - (x >> 23);	/* 14..24 */
	q = m >> shift;
	rem = m & ((1u << shift) - 1);
	half = 1u << (shift - 1);
	q += rem > half || (rem == half && (q & 1));
	return (uint16_t)(sign | q);
}

#endif
