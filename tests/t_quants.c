/* SPDX-License-Identifier: MIT */
/*
 * GGML's block types (kernels/cpu/quants.h):
 *   layout     hand-built blocks of q4_0, q5_0, q4_k and q6_k give the
 *              values ggml's layouts say, worked out here by hand;
 *   roundtrip  every type: our quantizer, then the reference dequantizer,
 *              within a bound per type (a fraction of the block's range);
 *   ggml_ref   q4_0, q5_0 and q8_0 (the KV's types) byte for byte as
 *              ggml's reference quantizers make them;
 *   simd       the AVX2 and AVX-512 dequantizers equal the reference bit for bit, on
 *              quantized blocks and on random bytes with finite scales;
 *   matmul     kvt_matmul on each type (dot products with AVX2 and
 *              without, and the sgemm path) against a double product over
 *              the reference's values, with f32 activations;
 *   int8       x rounded to 8 bits (qdots.h): the rounding as written,
 *              the AVX-512BW and the AVX2 kernels of every block type
 *              against the integer reference (extreme quants and scales, and x at
 *              +-127, too), and kvt_matmul against the exact product
 *              within the bound the rounding of x allows;
 *   amx        the prefill's products on AMX tiles and on AVX512-BF16
 *              dots (amx.h), each where the cpu has it: every block type,
 *              rows and outputs that are not whole tiles, against a double
 *              product over the values rounded to bf16 (which is what
 *              both multiply) and within the bf16 bound of the exact
 *              product; kvt_matmul_n's shared x the same as one product
 *              at a time;
 *   speed      (figures, not checks) one row against 4096 x 4096
 *              weights of each type, in G values/s, with f32 activations
 *              and, for the types that have them, integer dots; and 256
 *              rows against 1024 x 2816 q4_k weights (a prefill chunk's
 *              down projection) on AMX tiles, AVX512-BF16 dots and
 *              through sgemm (on the kernels OpenBLAS chose: set
 *              OPENBLAS_CORETYPE for others);
 *   refused    a model with an iq4_nl tensor is refused naming the tensor
 *              and the type; kvt-mkmodel's checker refuses a _K type on
 *              rows that are not whole blocks.
 * llama.cpp itself reads the files kvt-mkmodel writes in every type the
 * same way (make xcheck: logits within 5e-2 on the quantized file, within
 * 1e-5 on its dequantization by tools/xcheck/tof32.py).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/model_common.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/qdots.h"
#include "kernels/cpu/quants.h"
#include "runtime/gguf.h"

static const uint32_t all[] = {
	KVT_W_Q4_0, KVT_W_Q4_1, KVT_W_Q5_0, KVT_W_Q5_1, KVT_W_Q8_0,
	KVT_W_Q2_K, KVT_W_Q3_K, KVT_W_Q4_K, KVT_W_Q5_K, KVT_W_Q6_K,
};
#define NTYPES (sizeof(all) / sizeof(all[0]))

static uint64_t rng = 88172645463325252ull;

static float frand(void)		/* uniform in [-1, 1) */
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 40) / (double)(1 << 24) * 2 - 1);
}

static void put_h(uint8_t *p, float f)
{
	uint16_t h = f2h(f);

	memcpy(p, &h, 2);
}

/* ---- layout ---- */

static void test_layout(void)
{
	uint8_t b[210];
	float y[256];

	/* q4_0: d = 0.5; byte j holds value j (low) and j + 16 (high). */
	memset(b, 0, sizeof(b));
	put_h(b, 0.5f);
	b[2 + 3] = 0x9F;		/* value 3: 15 - 8 = 7; value 19: 9 - 8 = 1 */
	kvt_dequant_ref(KVT_W_Q4_0, y, b, 1);
	CHECK(y[3] == 3.5f && y[19] == 0.5f && y[0] == -4.0f && y[16] == -4.0f);

	/* q5_0: bit j of qh is value j's fifth bit, bit j + 16 value j + 16's. */
	memset(b, 0, sizeof(b));
	put_h(b, 1.0f);
	b[2] = 1 << 5;			/* qh bit 5: value 5 gets 16 */
	b[4] = 1 << 1;			/* qh bit 17: value 17 gets 16 */
	b[6 + 5] = 0x03;		/* value 5 low 3 -> 19 - 16 = 3 */
	kvt_dequant_ref(KVT_W_Q5_0, y, b, 1);
	CHECK(y[5] == 3.0f && y[17] == 0.0f && y[0] == -16.0f && y[21] == -16.0f);

	/* q4_k: sub-block 5 (values 160..191) has scale (q[9] & 15) | (q[1] >> 6) << 4
	 * and min (q[9] >> 4) | (q[5] >> 6) << 4; its nibbles are the high
	 * ones of qs[64..95]. */
	memset(b, 0, sizeof(b));
	put_h(b, 0.25f);		/* d */
	put_h(b + 2, 1.0f);		/* dmin */
	b[4 + 9] = 0x32;		/* scale low 2, min low 3 */
	b[4 + 1] = 0x40;		/* scale high 1: 2 + 16 = 18 */
	b[4 + 5] = 0x80;		/* min high 2: 3 + 32 = 35 */
	b[16 + 64 + 7] = 0xA0;		/* value 160 + 7: nibble 10 */
	kvt_dequant_ref(KVT_W_Q4_K, y, b, 1);
	CHECK(y[167] == 0.25f * 18 * 10 - 35.0f);
	CHECK(y[160] == -35.0f && y[128] == 0.0f);

	/* q6_k: value 64 + l of chunk 0 is the high nibble of ql[l] with bits
	 * 4..5 of qh[l], scale sc[4 + l / 16]. */
	memset(b, 0, sizeof(b));
	put_h(b + 208, 0.5f);
	b[2] = 0x70;			/* ql[2] high nibble 7 */
	b[128 + 2] = 2 << 4;		/* qh[2] bits 4..5 = 2: q = 7 | 32 = 39 */
	b[192 + 4] = (uint8_t)-3;	/* sc[4] = -3 */
	kvt_dequant_ref(KVT_W_Q6_K, y, b, 1);
	CHECK(y[66] == 0.5f * -3 * (39 - 32));
	CHECK(y[2] == 0.0f);		/* sc[0] = 0 */
	printf("layout: q4_0, q5_0, q4_k and q6_k as worked by hand\n");
}

/* ---- roundtrip ---- */

/* Worst error over a block, as a fraction of the block's range: about
 * half a step of each type's grid, plus the rounding of its scales. */
static double bound(uint32_t t)
{
	switch (t) {
	case KVT_W_Q8_0: return 0.006;
	case KVT_W_Q6_K: return 0.03;
	case KVT_W_Q5_0: case KVT_W_Q5_1: case KVT_W_Q5_K: return 0.04;
	case KVT_W_Q4_0: case KVT_W_Q4_1: case KVT_W_Q4_K: return 0.08;
	case KVT_W_Q3_K: return 0.2;
	}
	return 0.25;			/* q2_k: four levels */
}

static void test_roundtrip(void)
{
	enum { N = 4096 };
	static float x[N], y[N];
	static uint8_t q[N * 2];

	for (unsigned k = 0; k < NTYPES; k++) {
		const struct kvt_qtype *t = kvt_qtype(all[k]);
		double worst = 0;

		for (unsigned i = 0; i < N; i++)	/* blocks of different scales */
			x[i] = frand() * (float)(1 + i / 512) * 0.01f;
		CHECK_EQ(kvt_quantize(all[k], q, x, N), 0);
		kvt_dequant_ref(all[k], y, q, N / t->blk);
		for (unsigned b = 0; b < N / t->blk; b++) {
			float mn = x[b * t->blk], mx = mn;
			for (unsigned i = 0; i < t->blk; i++) {
				mn = fminf(mn, x[b * t->blk + i]);
				mx = fmaxf(mx, x[b * t->blk + i]);
			}
			for (unsigned i = 0; i < t->blk; i++) {
				double e = fabs((double)y[b * t->blk + i] - x[b * t->blk + i]) / (mx - mn);
				worst = e > worst ? e : worst;
			}
		}
		printf("roundtrip %-5s worst error %.4f of a block's range (bound %.3f)\n", t->name,
		       worst, bound(all[k]));
		CHECK(worst <= bound(all[k]));
		CHECK_EQ(kvt_quantize(all[k], q, x, t->blk / 2), -EINVAL);
	}
	CHECK_EQ(kvt_quantize(KVT_W_F16, q, x, 32), -EINVAL);
	CHECK(kvt_qtype(KVT_W_F32) == NULL && kvt_qtype(20) == NULL && kvt_qtype(1000) == NULL);
}

/* ---- ggml's reference quantizers ---- */

/* One block of 32 as ggml's quantize_row_q4_0_ref, _q5_0_ref and
 * _q8_0_ref write it, transcribed from ggml-quants.c. */
static void ggml_ref_block(uint32_t type, uint8_t *y, const float *x)
{
	float amax = 0, max = 0;

	for (int j = 0; j < 32; j++)
		if (amax < fabsf(x[j])) {
			amax = fabsf(x[j]);
			max = x[j];
		}
	if (type == KVT_W_Q8_0) {
		const float d = amax / ((1 << 7) - 1), id = d ? 1.0f / d : 0.0f;

		put_h(y, d);
		for (int j = 0; j < 32; j++)
			y[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
	} else if (type == KVT_W_Q4_0) {
		const float d = max / -8, id = d ? 1.0f / d : 0.0f;

		put_h(y, d);
		for (int j = 0; j < 16; j++) {
			const float x0 = x[j] * id, x1 = x[16 + j] * id;
			const uint8_t xi0 = (uint8_t)fmin(15, (int8_t)(x0 + 8.5f));
			const uint8_t xi1 = (uint8_t)fmin(15, (int8_t)(x1 + 8.5f));

			y[2 + j] = (uint8_t)(xi0 | xi1 << 4);
		}
	} else {
		const float d = max / -16, id = d ? 1.0f / d : 0.0f;
		uint32_t qh = 0;

		put_h(y, d);
		for (int j = 0; j < 16; j++) {
			const float x0 = x[j] * id, x1 = x[16 + j] * id;
			const uint8_t xi0 = (uint8_t)fmin(31, (int8_t)(x0 + 16.5f));
			const uint8_t xi1 = (uint8_t)fmin(31, (int8_t)(x1 + 16.5f));

			y[6 + j] = (uint8_t)((xi0 & 0x0F) | (xi1 & 0x0F) << 4);
			qh |= ((xi0 & 0x10u) >> 4) << j | ((xi1 & 0x10u) >> 4) << (j + 16);
		}
		memcpy(y + 2, &qh, 4);
	}
}

/* q4_0, q5_0 and q8_0 (the KV's types) byte for byte as ggml's reference
 * quantizers make them: random blocks of many scales, a block of zeros,
 * values on the half steps where rounding to nearest even and ggml's
 * +0.5 part, and extremes of equal size and opposite sign. */
static void test_ggml_ref(void)
{
	static const uint32_t types[] = { KVT_W_Q4_0, KVT_W_Q5_0, KVT_W_Q8_0 };
	enum { NB = 400 };
	static float x[NB * 32];
	unsigned blocks = 0;

	for (unsigned b = 0; b < NB; b++) {
		float *xb = x + b * 32;

		for (unsigned j = 0; j < 32; j++) {
			switch (b % 4) {
			case 0: xb[j] = frand() * ldexpf(1, (int)(b % 23) - 12); break;
			case 1: xb[j] = b == 1 ? 0 : frand(); break;
			case 2:	/* q4_0's half steps: max 1 makes d -1/8 */
				xb[j] = j ? (float)((int)(rng >> 40) % 16 - 8 + 0.5) / -8.0f : 1.0f;
				frand();
				break;
			case 3: xb[j] = j == 3 ? -2.0f : j == 17 ? 2.0f : frand() * 2; break;
			}
		}
	}
	for (unsigned k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
		const struct kvt_qtype *t = kvt_qtype(types[k]);
		static uint8_t got[NB * 34], want[NB * 34];

		CHECK_EQ(kvt_quantize(types[k], got, x, NB * 32), 0);
		for (unsigned b = 0; b < NB; b++)
			ggml_ref_block(types[k], want + b * t->size, x + b * 32);
		for (unsigned b = 0; b < NB; b++, blocks++)
			if (memcmp(got + b * t->size, want + b * t->size, t->size)) {
				fprintf(stderr, "%s block %u differs from ggml's reference quantizer\n",
					t->name, b);
				exit(1);
			}
	}
	printf("ggml_ref: q4_0, q5_0 and q8_0 blocks equal ggml's reference quantizers' (%u blocks)\n",
	       blocks);
}

/* ---- simd ---- */

/* Whether byte o of a block of type is part of one of its f16 scales. */
static int f16_byte(uint32_t type, unsigned o)
{
	switch (type) {
	case KVT_W_Q4_1: case KVT_W_Q5_1: return o < 4;
	case KVT_W_Q2_K: return o >= 80;
	case KVT_W_Q3_K: return o >= 108;
	case KVT_W_Q4_K: case KVT_W_Q5_K: return o < 4;
	case KVT_W_Q6_K: return o >= 208;
	}
	return o < 2;
}

static void test_simd(void)
{
	enum { NB = 64 };
	static uint8_t q[NB * 210];
	static float x[NB * 256], a[NB * 256], b[NB * 256];
	unsigned checked = 0;

	if (!kvt_cpu_simd()) {
		printf("simd: this cpu has no AVX2, only the reference runs\n");
		return;
	}
	for (unsigned k = 0; k < NTYPES; k++) {
		const struct kvt_qtype *t = kvt_qtype(all[k]);

		for (int pass = 0; pass < 2; pass++) {
			if (!pass) {
				for (unsigned i = 0; i < NB * t->blk; i++)
					x[i] = frand() * 3;
				kvt_quantize(all[k], q, x, NB * t->blk);
			} else {
				/* Random bytes; the f16 scales made finite. */
				for (unsigned i = 0; i < NB * t->size; i++)
					q[i] = (uint8_t)(frand() * 128 + 128);
				for (unsigned bl = 0; bl < NB; bl++)
					for (unsigned o = 0; o < t->size; o++)
						if (f16_byte(all[k], o) && (o & 1))	/* high byte: exponent < 31 */
							q[bl * t->size + o] &= 0xBF;
			}
			kvt_dequant_ref(all[k], a, q, NB);
			for (int lvl = 0; lvl <= kvt_cpu_simd(); lvl++) {	/* AVX2, AVX-512 */
				kvt_dequant(all[k], b, q, NB, lvl);
				CHECK(memcmp(a, b, NB * t->blk * sizeof(float)) == 0);
				checked++;
			}
		}
	}
	printf("simd: the AVX2 and AVX-512 dequantizers equal the reference bit for bit (%u cases)\n",
	       checked);
}

/* ---- matmul ---- */

static void test_matmul(struct kvt_pool *pool)
{
	static const unsigned rowss[] = { 1, 3, 4, 20 };
	const unsigned n_in = 512, n_out = 40;
	float *w = malloc((size_t)n_in * n_out * 4), *wd = malloc((size_t)n_in * n_out * 4);
	float *x = malloc((size_t)20 * n_in * 4), *y = malloc((size_t)20 * n_out * 4);
	uint8_t *q = malloc((size_t)n_in * n_out * 2);

	CHECK(w && wd && x && y && q);
	for (unsigned i = 0; i < n_in * n_out; i++)
		w[i] = frand() * 0.1f;
	for (unsigned i = 0; i < 20 * n_in; i++)
		x[i] = frand();
	kvt_cpu_set_int8_dots(0);
	for (unsigned k = 0; k < NTYPES; k++) {
		const struct kvt_qtype *t = kvt_qtype(all[k]);
		struct kvt_mat m = { q, all[k], n_in, n_out };
		double worst = 0;

		CHECK_EQ(kvt_quantize(all[k], q, w, (size_t)n_in * n_out), 0);
		kvt_dequant_ref(all[k], wd, q, (size_t)n_in * n_out / t->blk);
		CHECK_EQ(kvt_mat_row_bytes(all[k], n_in), n_in / t->blk * t->size);
		for (int simd = 0; simd <= kvt_cpu_simd(); simd++) {
			kvt_cpu_set_simd_max(simd);
			for (unsigned ri = 0; ri < sizeof(rowss) / sizeof(rowss[0]); ri++) {
				unsigned rows = rowss[ri];

				CHECK_EQ(kvt_matmul(pool, y, x, rows, &m), 0);
				for (unsigned r = 0; r < rows; r++)
					for (unsigned o = 0; o < n_out; o++) {
						double s = 0, mag = 0;
						for (unsigned i = 0; i < n_in; i++) {
							s += (double)wd[o * n_in + i] * x[r * n_in + i];
							mag += fabs((double)wd[o * n_in + i] * x[r * n_in + i]);
						}
						double e = fabs(y[r * n_out + o] - s) / mag;
						worst = e > worst ? e : worst;
					}
				/* The embedding row: the reference's values exactly. */
				float row[512];
				kvt_mat_row(row, &m, 7);
				CHECK(memcmp(row, wd + 7 * n_in, n_in * 4) == 0);
			}
		}
		kvt_cpu_set_simd_max(2);
		printf("matmul %-5s worst error %.2e of sum |w x| (rows 1, 3, 4, 20; every simd level)\n",
		       t->name, worst);
		CHECK(worst < 1e-5);
		/* Rows that are not whole blocks are refused. */
		struct kvt_mat bad = { q, all[k], t->blk + t->blk / 2, 1 };
		CHECK_EQ(kvt_matmul(pool, y, x, 1, &bad), -EINVAL);
	}
	kvt_cpu_set_int8_dots(1);
	free(w);
	free(wd);
	free(x);
	free(y);
	free(q);
}

/* ---- int8 ---- */

/* Rounding x: per block d = max |x| / 127 and q = x / d to nearest even,
 * written out again here; the sums of q over each 16. */
static void check_xq(const struct kvt_xq *xq, const float *x)
{
	for (unsigned r = 0; r < xq->rows; r++)
		for (unsigned b = 0; b < xq->n / xq->blk; b++) {
			const float *v = x + (size_t)r * xq->n + b * xq->blk;
			float amax = 0, d, id;

			for (unsigned i = 0; i < xq->blk; i++)
				amax = fmaxf(amax, fabsf(v[i]));
			d = amax / 127;
			id = d ? 1 / d : 0;
			CHECK(xq->d[r * (xq->n / xq->blk) + b] == d);
			for (unsigned i = 0; i < xq->blk; i++)
				CHECK_EQ(xq->q[(size_t)r * xq->n + b * xq->blk + i],
					 (int8_t)nearbyintf(v[i] * id));
		}
	for (unsigned r = 0; r < xq->rows; r++)
		for (unsigned g = 0; g < xq->n / 16; g++) {
			int s = 0;
			for (unsigned i = 0; i < 16; i++)
				s += xq->q[(size_t)r * xq->n + 16 * g + i];
			CHECK_EQ(xq->s[r * (xq->n / 16) + g], s);
		}
}

/* Every type's kernel at the current simd level. */
static void test_int8_level(struct kvt_pool *pool)
{
	enum { ROWS = 6, OUT = 37 };
	static const unsigned n_ins[] = { 256, 544, 1024 };	/* 544: 17 blocks of 32 */
	unsigned kernels = 0;
	double worst_ref = 0, worst_bound = 0;

	for (unsigned ni = 0; ni < 3; ni++)
	for (unsigned k = 0; k < NTYPES; k++) {
		const uint32_t type = all[k];
		const struct kvt_qtype *t = kvt_qtype(type);
		const unsigned n = n_ins[ni], blk = kvt_xq_blk(type);
		size_t rb = kvt_mat_row_bytes(type, n);
		float *w = malloc((size_t)n * OUT * 4), *wd = malloc((size_t)n * OUT * 4);
		float *x = malloc((size_t)n * ROWS * 4), y[ROWS * OUT], ye[ROWS * OUT];
		uint8_t *q = malloc(rb * OUT);
		struct kvt_mat m = { q, type, n, OUT };
		struct kvt_xq xq;

		if (n % t->blk)
			goto next;
		CHECK(w && wd && x && q);
		/* each 16 of its own range, each 32 about its own centre:
		 * sub-block scales and mins that differ */
		for (unsigned i = 0; i < n * OUT; i++)
			w[i] = frand() * 0.02f * (float)(1 + i / 16 % 5) + 0.03f * (float)(i / 32 % 3) - 0.03f;
		/* x with an outlier now and then, as activations have; row 3
		 * at +-127 throughout, in runs of 3 of one sign, so that
		 * vpmaddubsw's pairs reach their largest sums */
		for (unsigned i = 0; i < n * ROWS; i++)
			x[i] = i / n == 3 ? (i / 3 % 2 ? -0.75f : 0.75f) : frand() * (i % 97 == 5 ? 20 : 1);
		CHECK_EQ(kvt_quantize(type, q, w, (size_t)n * OUT), 0);
		if (ni == 1 && type == KVT_W_Q8_0)	/* -128 too, whose sign goes onto x */
			for (unsigned o = 0; o < OUT; o++)
				q[o * rb + 2 + 3] = 0x80;
		/* In three rows of four one block of extremes: every byte but
		 * the f16 scales 0xFF (the largest quants, scales and mins),
		 * 0x00 (the smallest; q3_k's scale -32) or 0x80 (q8_0's and
		 * q6_k's -128) */
		for (unsigned o = 0; o < OUT; o++) {
			uint8_t *bl = q + o * rb + o % (n / t->blk) * t->size;

			for (unsigned i = 0; i < t->size && o % 4; i++)
				if (!f16_byte(type, i))
					bl[i] = (uint8_t[]){ 0xFF, 0x00, 0x80 }[o % 4 - 1];
		}
		kvt_dequant_ref(type, wd, q, (size_t)n * OUT / t->blk);
		CHECK_EQ(kvt_xq_make(&xq, x, ROWS, n, blk), 0);
		check_xq(&xq, x);

		/* The kernel against the integer reference, every NW x R, on
		 * weight rows 0 and 1 (quantized; extremes), then 2 and 3, and
		 * rows two apart as kvt_matmul pairs them (0 and 2, 1 and 3). */
		for (unsigned pr = 0; pr < 4; pr++)
		for (unsigned NW = 1; NW <= 2; NW++)
			for (unsigned R = 1; R <= 4; R++) {
				const unsigned o0 = (unsigned[]){ 0, 2, 0, 1 }[pr], gap = pr < 2 ? 1 : 2;
				float out[8];
				kvt_qdots(type)(q + o0 * rb, gap * rb, NW, &xq, 1, R, out);
				for (unsigned o = 0; o < NW; o++)
					for (unsigned r = 0; r < R; r++) {
						const uint8_t *wr = q + (o0 + o * gap) * rb;
						const float *wdr = wd + (size_t)(o0 + o * gap) * n;
						double ref = kvt_qdot_ref(type, wr, &xq, 1 + r), mag = 0;
						for (unsigned i = 0; i < n; i++)
							mag += fabs((double)wdr[i] * x[(1 + r) * n + i]);
						/* (a row of zero scales: mag 0, and out exactly 0) */
						double e = fabs(out[o * 4 + r] - ref);
						worst_ref = fmax(worst_ref, e / (mag + 1e-30));
						CHECK(e <= 1e-5 * mag);
					}
				kernels++;
			}

		/* kvt_matmul: within the rounding of x of the exact product. */
		CHECK_EQ(kvt_matmul(pool, y, x, ROWS, &m), 0);
		kvt_cpu_set_int8_dots(0);
		CHECK_EQ(kvt_matmul(pool, ye, x, ROWS, &m), 0);
		kvt_cpu_set_int8_dots(1);
		for (unsigned r = 0; r < ROWS; r++)
			for (unsigned o = 0; o < OUT; o++) {
				double bound = 0, mag = 0;
				for (unsigned i = 0; i < n; i++) {
					double d = xq.d[r * (n / blk) + i / blk];
					bound += fabs((double)wd[o * n + i]) * d / 2;
					mag += fabs((double)wd[o * n + i] * x[r * n + i]);
				}
				double e = fabs((double)y[r * OUT + o] - ye[r * OUT + o]);
				CHECK(e <= bound + 1e-5 * mag);
				worst_bound = fmax(worst_bound, e / (bound + 1e-30));
			}
		CHECK(memcmp(y, ye, sizeof(y)) != 0);	/* and x was rounded */
		kvt_xq_free(&xq);
next:
		free(w);
		free(wd);
		free(x);
		free(q);
	}
	printf("int8 (%s kernels): every block type: %u kernel cases within %.1e of the integer reference; "
	       "kvt_matmul at most %.2f of the bound x's rounding allows\n",
	       kvt_cpu_simd() == 2 ? "AVX-512BW" : "AVX2", kernels, worst_ref, worst_bound);
}

/* The AVX-512BW kernels where the cpu has them, then the AVX2 ones. */
static void test_int8(struct kvt_pool *pool)
{
	for (unsigned k = 0; k < NTYPES; k++)
		CHECK(kvt_xq_blk(all[k]) == kvt_qtype(all[k])->blk);
	CHECK(kvt_xq_blk(KVT_W_F32) == 0 && kvt_xq_blk(KVT_W_F16) == 0 && kvt_xq_blk(KVT_W_BF16) == 0);
	if (!kvt_cpu_simd()) {
		printf("int8: no AVX2 here: f32 activations only\n");
		CHECK(kvt_qdots(KVT_W_Q4_K) == NULL);
		return;
	}
	for (int lvl = kvt_cpu_simd(); lvl >= 1; lvl--) {
		kvt_cpu_set_simd_max(1);
		kvt_qdots_fn avx2 = kvt_qdots(KVT_W_Q4_K);

		kvt_cpu_set_simd_max(lvl);
		if (lvl == 2 && kvt_qdots(KVT_W_Q4_K) == avx2) {
			printf("int8: AVX-512 but not AVX-512BW here: the AVX2 kernels alone\n");
			continue;
		}
		for (unsigned k = 0; k < NTYPES; k++)
			CHECK(kvt_qdots(all[k]) != NULL);
		CHECK(kvt_qdots(KVT_W_F32) == NULL && kvt_qdots(KVT_W_F16) == NULL &&
		      kvt_qdots(KVT_W_BF16) == NULL);
		test_int8_level(pool);
	}
	kvt_cpu_set_simd_max(0);
	CHECK(kvt_qdots(KVT_W_Q4_K) == NULL);
	kvt_cpu_set_simd_max(2);
	kvt_cpu_set_int8_dots(0);
	CHECK(kvt_qdots(KVT_W_Q4_K) == NULL);
	kvt_cpu_set_int8_dots(1);
}

/* ---- amx ---- */

static float bf16_round(float f)	/* to nearest even, as VCVTNEPS2BF16 (no NaNs here) */
{
	uint32_t u;

	memcpy(&u, &f, 4);
	u = (u + 0x7fff + (u >> 16 & 1)) & 0xffff0000u;
	memcpy(&f, &u, 4);
	return f;
}

static void amx_mode(struct kvt_pool *pool, int mode)
{
	static const unsigned rowss[] = { 16, 21, 45, 64 }, outs[] = { 40, 70 };
	const unsigned n_in = 512, R = 64;
	double worst_bf = 0, worst_exact = 0;
	unsigned cases = 0;
	float *w = malloc((size_t)n_in * 70 * 4), *wd = malloc((size_t)n_in * 70 * 4);
	float *x = malloc((size_t)R * n_in * 4), *y = malloc((size_t)R * 70 * 4);
	float *ye = malloc((size_t)R * 70 * 4), *y3[3];
	uint8_t *q = malloc((size_t)n_in * 70 * 2);

	CHECK(w && wd && x && y && ye && q);
	CHECK_EQ(kvt_amx(), mode);	/* the kernel asked for is the one that runs */
	for (unsigned i = 0; i < n_in * 70; i++)
		w[i] = frand() * 0.1f * (float)(1 + i / 32 % 3);
	for (unsigned i = 0; i < R * n_in; i++)
		x[i] = frand() * (i % 89 == 7 ? 30 : 1);
	for (unsigned k = 0; k < NTYPES; k++) {
		const struct kvt_qtype *t = kvt_qtype(all[k]);

		CHECK_EQ(kvt_quantize(all[k], q, w, (size_t)n_in * 70), 0);
		kvt_dequant_ref(all[k], wd, q, (size_t)n_in * 70 / t->blk);
		for (unsigned oi = 0; oi < 2; oi++)
		for (unsigned ri = 0; ri < sizeof(rowss) / sizeof(rowss[0]); ri++) {
			struct kvt_mat m = { q, all[k], n_in, outs[oi] };
			unsigned rows = rowss[ri];

			CHECK_EQ(kvt_matmul(pool, y, x, rows, &m), 0);
			kvt_cpu_set_amx(KVT_BF16_OFF);
			CHECK_EQ(kvt_matmul(pool, ye, x, rows, &m), 0);
			kvt_cpu_set_amx(mode);
			CHECK(memcmp(y, ye, (size_t)rows * m.n_out * 4) != 0);	/* bf16 ran */
			for (unsigned r = 0; r < rows; r++)
				for (unsigned o = 0; o < m.n_out; o++) {
					double sb = 0, se = 0, mag = 0;
					for (unsigned i = 0; i < n_in; i++) {
						float a = wd[o * n_in + i], b = x[r * n_in + i];
						sb += (double)bf16_round(a) * bf16_round(b);
						se += (double)a * b;
						mag += fabs((double)a * b);
					}
					double got = y[r * m.n_out + o], e = fabs(got - sb) / (mag + 1e-30);
					/* f32 sums of products that are exact in f32 */
					CHECK(e <= 1e-5);
					worst_bf = fmax(worst_bf, e);
					/* each factor within 2^-9 of its value */
					e = fabs(got - se) / (mag + 1e-30);
					CHECK(e <= 1.0 / 256 + 1e-5);
					worst_exact = fmax(worst_exact, e);
				}
			cases++;
		}
		/* Three products of one x share its tiles: the same floats. */
		struct kvt_mat m3[3] = { { q, all[k], n_in, 40 }, { q, all[k], n_in, 70 },
					 { q, all[k], n_in, 33 } };
		const struct kvt_mat *mp[3] = { &m3[0], &m3[1], &m3[2] };
		for (unsigned i = 0; i < 3; i++)
			CHECK((y3[i] = malloc((size_t)R * 70 * 4)) != NULL);
		CHECK_EQ(kvt_matmul_n(pool, 3, y3, x, 45, mp), 0);
		for (unsigned i = 0; i < 3; i++) {
			CHECK_EQ(kvt_matmul(pool, y, x, 45, &m3[i]), 0);
			CHECK(memcmp(y, y3[i], (size_t)45 * m3[i].n_out * 4) == 0);
			free(y3[i]);
		}
	}
	printf("amx (%s): %u products, every block type: within %.1e of the bf16 product, %.1e of "
	       "the exact (of sum |w x|)\n", mode == KVT_BF16_TILES ? "tiles" : "AVX512-BF16 dots",
	       cases, worst_bf, worst_exact);
	free(w);
	free(wd);
	free(x);
	free(y);
	free(ye);
	free(q);
}

/* The tiles where the cpu has them, then the AVX512-BF16 dots. */
static void test_amx(struct kvt_pool *pool)
{
	const int have = kvt_amx_can();

	if (have == KVT_BF16_OFF) {
		t_skip_part("amx", "no AVX512-BF16 here (or KVT_AMX=0, or KVT_SIMD below 2): the "
			    "prefill takes sgemm\n");
		return;
	}
	if (have != KVT_BF16_TILES)
		t_skip_part("amx-tiles", "no AMX tiles here (or KVT_AMX=dots): the AVX512-BF16 dots "
			    "were checked\n");
	for (int mode = have; mode >= KVT_BF16_DOTS; mode--) {
		kvt_cpu_set_amx(mode);
		amx_mode(pool, mode);
	}
	kvt_cpu_set_amx(-1);
}

/* ---- speed ---- */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One row against 4096 x 4096 weights of each type, eight copies so that
 * they come from memory, on the pool: best of five, in G values/s (f16
 * as the reference). A figure, not a check. */
static void bench_matvec(struct kvt_pool *pool)
{
	static const uint32_t types[] = { KVT_W_F16, KVT_W_Q8_0, KVT_W_Q4_0, KVT_W_Q4_1,
		KVT_W_Q5_0, KVT_W_Q5_1, KVT_W_Q2_K, KVT_W_Q3_K, KVT_W_Q4_K, KVT_W_Q5_K, KVT_W_Q6_K };
	const unsigned n = t_scale(4096) < 256 ? 256 : t_scale(4096), copies = 8;
	float *w = malloc((size_t)n * n * 4), x[4096], y[4096];

	CHECK(w);
	for (size_t i = 0; i < (size_t)n * n; i++)
		w[i] = frand() * 0.05f;
	for (unsigned i = 0; i < n; i++)
		x[i] = frand();
	printf("speed: matvec, 1 row x %u x %u, %u copies, %u threads, G values/s:", n, n, copies,
	       kvt_pool_threads(pool));
	for (unsigned k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
		size_t bytes = (size_t)n * kvt_mat_row_bytes(types[k], n);
		char *q = malloc(bytes * copies);
		double best;

		CHECK(q);
		if (types[k] == KVT_W_F16)
			kvt_f32_to_f16((uint16_t *)q, w, (size_t)n * n);
		else
			CHECK_EQ(kvt_quantize(types[k], q, w, (size_t)n * n), 0);
		for (unsigned c = 1; c < copies; c++)
			memcpy(q + c * bytes, q, bytes);
		int has_int8 = kvt_qdots(types[k]) != NULL;

		for (int int8 = 0; int8 <= has_int8; int8++) {
			kvt_cpu_set_int8_dots(int8);
			best = 1e9;
			for (int rep = 0; rep < 5; rep++) {
				double t0 = now_s();
				for (unsigned c = 0; c < copies; c++) {
					struct kvt_mat m = { q + c * bytes, types[k], n, n };
					CHECK_EQ(kvt_matmul(pool, y, x, 1, &m), 0);
				}
				best = fmin(best, now_s() - t0);
			}
			if (int8)
				printf(" (int8 %.1f)", (double)n * n * copies / best / 1e9);
			else
				printf(" %s %.1f", types[k] == KVT_W_F16 ? "f16" : kvt_qtype(types[k])->name,
				       (double)n * n * copies / best / 1e9);
		}
		kvt_cpu_set_int8_dots(1);
		free(q);
	}
	printf("\n");
	free(w);
}

/* 256 rows against 1024 x 2816 q4_k: the tiles against sgemm on the
 * dequantized weights, best of five, G multiply-adds/s. A figure. */
static void bench_gemm(struct kvt_pool *pool)
{
	const unsigned rows = 256, n_in = 2816, n_out = 1024;
	float *w = malloc((size_t)n_in * n_out * 4), *x = malloc((size_t)rows * n_in * 4);
	float *y = malloc((size_t)rows * n_out * 4);
	uint8_t *q = malloc(kvt_mat_row_bytes(KVT_W_Q4_K, n_in) * n_out);
	struct kvt_mat m = { q, KVT_W_Q4_K, n_in, n_out };

	if (!kvt_amx_can() || t_scale(4) < 4)
		goto out;
	CHECK(w && x && y && q);
	for (size_t i = 0; i < (size_t)n_in * n_out; i++)
		w[i] = frand() * 0.05f;
	for (size_t i = 0; i < (size_t)rows * n_in; i++)
		x[i] = frand();
	CHECK_EQ(kvt_quantize(KVT_W_Q4_K, q, w, (size_t)n_in * n_out), 0);
	printf("speed: gemm, %u rows x %u x %u q4_k, %u threads, G multiply-adds/s:", rows, n_in, n_out,
	       kvt_pool_threads(pool));
	for (int mode = kvt_amx_can(); mode >= KVT_BF16_OFF; mode--) {
		static const char *const name[] = { "sgemm on OpenBLAS ", "AVX512-BF16 dots", "AMX" };
		double best = 1e9;

		kvt_cpu_set_amx(mode);
		for (int rep = 0; rep < 5; rep++) {
			double t0 = now_s();
			CHECK_EQ(kvt_matmul(pool, y, x, rows, &m), 0);
			best = fmin(best, now_s() - t0);
		}
		printf(" %s%s %.1f", name[mode], mode ? "" : kvt_blas_core(),
		       (double)rows * n_in * n_out / best / 1e9);
	}
	kvt_cpu_set_amx(-1);
	printf("\n");
out:
	free(w);
	free(x);
	free(y);
	free(q);
}

/* ---- refused ---- */

static void test_refused(void)
{
	struct kvt_synth s = {
		.layers = 1, .dim = 128, .heads = 4, .kv_heads = 2, .ff = 256, .ctx = 256,
		.vocab = 300, .seed = 3, .type = KVT_GGML_Q4_0,
	};
	char path[512], err[512];
	struct kvt_gguf *g;
	struct kvt_model *m;
	const struct kvt_gguf_tensor *t;
	uint64_t off;
	uint32_t iq4_nl = 20;	/* blocks of 32 in 18 bytes, as q4_0's */
	int fd;

	snprintf(path, sizeof(path), "%s/quants-%d.gguf", t_dir(), (int)getpid());
	CHECK_EQ(kvt_synth_write(&s, path, err, sizeof(err)), 0);
	CHECK_EQ(kvt_gguf_open(path, &g, err, sizeof(err)), 0);
	CHECK(t = kvt_gguf_find_tensor(g, "blk.0.attn_q.weight"));
	off = t->info_off + 8 + t->name.len + 4 + 8 * t->n_dims;
	kvt_gguf_close(g);
	CHECK((fd = open(path, O_WRONLY)) >= 0);
	CHECK(pwrite(fd, &iq4_nl, 4, (off_t)off) == 4);
	close(fd);
	CHECK_EQ(kvt_model_load(path, &m, err, sizeof(err)), -EINVAL);
	printf("refused: %s\n", err);
	CHECK(strstr(err, "blk.0.attn_q.weight") && strstr(err, "iq4_nl"));
	unlink(path);

	s.type = KVT_GGML_Q4_K;		/* dim 128: half a block */
	CHECK_EQ(kvt_synth_check(&s, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "multiples of 256"));
	s.dim = 256;
	s.ff = 512;
	CHECK_EQ(kvt_synth_check(&s, err, sizeof(err)), 0);
}

int main(void)
{
	struct kvt_pool *pool;

	CHECK_EQ(kvt_pool_new(2, &pool), 0);
	test_layout();
	test_roundtrip();
	test_ggml_ref();
	test_simd();
	test_matmul(pool);
	test_int8(pool);
	test_amx(pool);
	test_refused();
	bench_gemm(pool);
	bench_matvec(pool);
	kvt_pool_free(pool);
	return 0;
}
