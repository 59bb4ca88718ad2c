/* SPDX-License-Identifier: MIT */
/*
 * Matrix products on AMX tiles (amx.h).
 *
 * TDPBF16PS C += A . B takes A as 16 rows of 32 bf16 and B as 16 rows of
 * 16 pairs of bf16, and adds to C (16 x 16 f32)
 *
 *   C[m][n] += sum_k A[m][2k] B[k][2n] + A[m][2k+1] B[k][2n+1]
 *
 * so A is 16 weight rows over 32 inputs just as they lie (row-major), and
 * B is x turned on its side: row k holds, for each of 16 tokens, that
 * token's inputs 2k and 2k+1 in one 32-bit lane. C comes out as weight
 * rows by tokens and is turned back as it is written to y. Eight tiles: four
 * of C (32 weight rows by 32 tokens), two of A and two of B, so each tile
 * loaded feeds two products.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/amx.h"
#include "kernels/cpu/kernels.h"

#if defined(__x86_64__)
#define KVT_AMX 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define BF	__attribute__((target("avx512f,avx512bf16")))
#define BF_INLINE static inline __attribute__((always_inline, target("avx512f,avx512bf16")))
#define TILES	__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bf16")))

#define ARCH_REQ_XCOMP_PERM	0x1023
#define XFEATURE_XTILEDATA	18
#endif

#define TILE_BYTES	1024		/* 16 rows of 64 bytes */

/* What the cpu can do (a KVT_BF16_*) and what it does unless told,
 * have | dflt << 4; -1 until probed. */
static int amx_probed = -1;	/* atomic */
static int amx_mode = -1;	/* atomic: kvt_cpu_set_amx's, -1 for the default */

#ifdef KVT_AMX
/* cpuid (7, 1) EAX: AVX512-BF16 is bit 5; (7, 0) EDX: AMX-BF16 is bit
 * 22, AMX-TILE bit 24. Then the tile state from Linux, and XCR0's bits
 * 17 and 18 (tile configuration and data) on. The tiles are the default
 * where there are tiles. Without them the dots are the default on AMD's
 * cpus (Zen 4 and later), where a VDPBF16PS does twice an FMA's
 * multiply-adds: on an EPYC with AVX512-BF16 they ran at 2.1 times
 * OpenBLAS's AVX-512 sgemm. On Intel's they measured 0.84 to 0.86 of it
 * (a Sapphire Rapids), so there they run only when asked for. */
static int amx_probe(void)
{
	const char *env = getenv("KVT_AMX");
	unsigned a, b, c, d, lo, hi;
	int asked = env && !strcmp(env, "dots"), dots;

	if (env && !strcmp(env, "0"))
		return KVT_BF16_OFF;
	if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !(a & 1u << 5))
		return KVT_BF16_OFF;
	if (asked)
		return KVT_BF16_DOTS | KVT_BF16_DOTS << 4;
	__get_cpuid(0, &a, &b, &c, &d);		/* "AuthenticAMD": EBX, EDX, ECX */
	dots = b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163 ?
	       KVT_BF16_DOTS | KVT_BF16_DOTS << 4 : KVT_BF16_DOTS;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & 1u << 22) || !(d & 1u << 24) ||
	    syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA))
		return dots;
	__asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return (lo >> 17 & 3) == 3 ? KVT_BF16_TILES | KVT_BF16_TILES << 4 : dots;
}
#endif

static int amx_state(void)
{
	int st = __atomic_load_n(&amx_probed, __ATOMIC_RELAXED);

	if (st < 0) {
#ifdef KVT_AMX
		st = amx_probe();
#else
		st = KVT_BF16_OFF;
#endif
		__atomic_store_n(&amx_probed, st, __ATOMIC_RELAXED);
	}
	return kvt_cpu_simd() == 2 ? st : KVT_BF16_OFF;
}

int kvt_amx_can(void)
{
	return amx_state() & 15;
}

int kvt_amx(void)
{
	int st = amx_state(), m = __atomic_load_n(&amx_mode, __ATOMIC_RELAXED);

	if (m < 0)
		m = st >> 4;
	return m < (st & 15) ? m : st & 15;
}

void kvt_cpu_set_amx(int mode)
{
	__atomic_store_n(&amx_mode, mode > KVT_BF16_TILES ? KVT_BF16_TILES : mode < 0 ? -1 : mode,
			 __ATOMIC_RELAXED);
}

size_t kvt_amx_wbytes(unsigned n_in)
{
	return (size_t)2 * (n_in / 32) * TILE_BYTES;
}

void kvt_xb_free(struct kvt_xb *xb)
{
	free(xb->p);
	memset(xb, 0, sizeof(*xb));
}

#ifdef KVT_AMX
/* r[i] lane j <-> r[j] lane i, 32-bit lanes. */
BF_INLINE void tr16(__m512i r[16])
{
	__m512i t[16];
	unsigned i;

	for (i = 0; i < 16; i += 2) {
		t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
		t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
	}
	for (i = 0; i < 16; i += 4) {
		r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
		r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
		r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
		r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
	}
	/* r[4g + j] now holds, in each 128-bit lane L, rows 4g..4g+3 at
	 * column 4L + j; gather the lanes across groups */
	for (i = 0; i < 4; i++) {
		t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
		t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
		t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
		t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
	}
	for (i = 0; i < 8; i++) {
		r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
		r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
	}
}

/* 32 floats as 32 bf16, rounded to nearest even. */
BF_INLINE __m512i bf32(const float *v)
{
	return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(v + 16), _mm512_loadu_ps(v));
}

int kvt_xb_alloc(struct kvt_xb *xb, unsigned rows, unsigned n_in)
{
	unsigned blocks = (rows + 31) / 32 * 2;

	memset(xb, 0, sizeof(*xb));
	if (n_in % 32 || !n_in || !rows)
		return -EINVAL;
	if (!(xb->p = aligned_alloc(64, (size_t)blocks * (n_in / 32) * TILE_BYTES)))
		return -ENOMEM;
	xb->rows = rows;
	xb->n_in = n_in;
	xb->blocks = blocks;
	xb->mode = kvt_amx() == KVT_BF16_TILES ? KVT_BF16_TILES : KVT_BF16_DOTS;
	return 0;
}

BF void kvt_xb_fill(struct kvt_xb *xb, const float *x, unsigned tb)
{
	unsigned nks = xb->n_in / 32;

	for (unsigned ks = 0; ks < nks; ks++) {
		uint32_t *dst = xb->p + ((size_t)tb * nks + ks) * (TILE_BYTES / 4);
		__m512i r[16];

		for (unsigned t = 0; t < 16; t++)
			r[t] = tb * 16 + t < xb->rows ?
			       bf32(x + (size_t)(tb * 16 + t) * xb->n_in + ks * 32) :
			       _mm512_setzero_si512();
		tr16(r);
		for (unsigned p = 0; p < 16; p++)
			_mm512_store_si512((__m512i *)(dst + p * 16), r[p]);
	}
}

BF void kvt_amx_pack(uint16_t *wb, unsigned r, const float *row, unsigned n_in)
{
	unsigned nks = n_in / 32;
	uint16_t *dst = wb + (size_t)(r / 16) * nks * (TILE_BYTES / 2) + (r % 16) * 32;

	for (unsigned ks = 0; ks < nks; ks++)
		_mm512_storeu_si512((__m512i *)(dst + (size_t)ks * (TILE_BYTES / 2)), bf32(row + ks * 32));
}

/* Tile c (16 weight rows from o0 by 16 tokens from t0) into y. */
BF static void put_tile(float *y, size_t ldy, const float *c, unsigned o0, unsigned nrows,
			unsigned t0, unsigned rows)
{
	__mmask16 m;
	__m512i r[16];

	if (o0 >= nrows || t0 >= rows)
		return;
	m = nrows - o0 >= 16 ? 0xffff : (__mmask16)((1u << (nrows - o0)) - 1);
	for (unsigned i = 0; i < 16; i++)
		r[i] = _mm512_load_si512((const __m512i *)(c + i * 16));
	tr16(r);
	for (unsigned n = 0; n < 16 && t0 + n < rows; n++)
		_mm512_mask_storeu_ps(y + (size_t)(t0 + n) * ldy + o0, m, _mm512_castsi512_ps(r[n]));
}

struct tilecfg {
	uint8_t  palette, start_row, reserved[14];
	uint16_t colsb[16];
	uint8_t  rows[16];
};

TILES static void tile_rows(float *y, size_t ldy, const uint16_t *wb, unsigned nrows,
			     const struct kvt_xb *xb)
{
	const unsigned nks = xb->n_in / 32;
	const char *a0 = (const char *)wb, *a1 = a0 + (size_t)nks * TILE_BYTES;
	struct tilecfg cfg;
	_Alignas(64) float c[4][256];

	memset(&cfg, 0, sizeof(cfg));
	cfg.palette = 1;
	for (unsigned i = 0; i < 8; i++) {
		cfg.colsb[i] = 64;
		cfg.rows[i] = 16;
	}
	_tile_loadconfig(&cfg);
	for (unsigned tb = 0; tb < xb->blocks; tb += 2) {
		const char *b0 = (const char *)xb->p + (size_t)tb * nks * TILE_BYTES;
		const char *b1 = b0 + (size_t)nks * TILE_BYTES;

		_tile_zero(0);
		_tile_zero(1);
		_tile_zero(2);
		_tile_zero(3);
		for (unsigned ks = 0; ks < nks; ks++) {
			size_t off = (size_t)ks * TILE_BYTES;

			_tile_loadd(4, a0 + off, 64);
			_tile_loadd(6, b0 + off, 64);
			_tile_loadd(7, b1 + off, 64);
			_tile_dpbf16ps(0, 4, 6);
			_tile_dpbf16ps(1, 4, 7);
			_tile_loadd(5, a1 + off, 64);
			_tile_dpbf16ps(2, 5, 6);
			_tile_dpbf16ps(3, 5, 7);
		}
		_tile_stored(0, c[0], 64);
		_tile_stored(1, c[1], 64);
		_tile_stored(2, c[2], 64);
		_tile_stored(3, c[3], 64);
		put_tile(y, ldy, c[0], 0, nrows, tb * 16, xb->rows);
		put_tile(y, ldy, c[1], 0, nrows, tb * 16 + 16, xb->rows);
		put_tile(y, ldy, c[2], 16, nrows, tb * 16, xb->rows);
		put_tile(y, ldy, c[3], 16, nrows, tb * 16 + 16, xb->rows);
	}
	_tile_release();
}

/* The same product on AVX512-BF16 dot products (VDPBF16PS), for the cpus
 * that have them and no tiles (AMD Zen 4 and later, Cooper Lake): 16
 * weight rows by 16 tokens in sixteen registers, each pair of a row's
 * weights broadcast against the pairs of 16 tokens, a row of an x tile.
 * The same operands as the tiles, so the same packing and x. (8 rows by
 * 32 tokens, ten loads for sixteen products where this takes seventeen,
 * measured slower on a Xeon.) */
BF static void dot_rows(float *y, size_t ldy, const uint16_t *wb, unsigned nrows,
			const struct kvt_xb *xb)
{
	const unsigned nks = xb->n_in / 32;
	const size_t tile = TILE_BYTES / 4;
	_Alignas(64) float c[256];

	for (unsigned h = 0; h * 16 < nrows; h++)
		for (unsigned tb = 0; tb * 16 < xb->rows; tb++) {
			const uint32_t *a = (const uint32_t *)wb + h * nks * tile;
			const uint32_t *b = xb->p + tb * nks * tile;
			__m512 acc[16];

			for (unsigned r = 0; r < 16; r++)
				acc[r] = _mm512_setzero_ps();
			for (unsigned ks = 0; ks < nks; ks++, a += tile, b += tile)
				for (unsigned p = 0; p < 16; p++) {
					__m512bh xv = (__m512bh)_mm512_load_si512((const __m512i *)(b + p * 16));

					for (unsigned r = 0; r < 16; r++)
						acc[r] = _mm512_dpbf16_ps(acc[r],
							(__m512bh)_mm512_set1_epi32((int)a[r * 16 + p]), xv);
				}
			for (unsigned r = 0; r < 16; r++)
				_mm512_store_ps(c + r * 16, acc[r]);
			put_tile(y, ldy, c, h * 16, nrows, tb * 16, xb->rows);
		}
}

void kvt_amx_rows(float *y, size_t ldy, const uint16_t *wb, unsigned nrows,
		  const struct kvt_xb *xb)
{
	if (xb->mode == KVT_BF16_TILES)
		tile_rows(y, ldy, wb, nrows, xb);
	else
		dot_rows(y, ldy, wb, nrows, xb);
}
#else
int kvt_xb_alloc(struct kvt_xb *xb, unsigned rows, unsigned n_in)
{
	memset(xb, 0, sizeof(*xb));
	return -EOPNOTSUPP;
}

void kvt_xb_fill(struct kvt_xb *xb, const float *x, unsigned tb)
{
}

void kvt_amx_pack(uint16_t *wb, unsigned r, const float *row, unsigned n_in)
{
}

void kvt_amx_rows(float *y, size_t ldy, const uint16_t *wb, unsigned nrows,
		  const struct kvt_xb *xb)
{
}
#endif
