/* SPDX-License-Identifier: MIT */
/*
 * Integer dot products on 8-bit activations, the way llama.cpp multiplies
 * its quantized weights: x is rounded to int8 once per product, with one
 * f32 scale per block of 32 values (for q4_0, q4_1, q5_0, q5_1 and q8_0
 * weights) or of 256 (for the K-quants, q2_k to q6_k, whose sub-block
 * scales are integers), and each weight block's quants multiply x's int8s
 * exactly, in integers; the f32 scales, and the mins of the types that
 * have them against sums of x's int8s, enter once per block. Against f32
 * activations this trades the rounding of x (half a step of its block's
 * scale, about 0.4 % of the block's largest |x|) for two to four times the
 * speed of the decode's matrix-vector products, which with 4-bit weights
 * are bound by the cpu, not by memory.
 *
 * AVX-512BW kernels, and AVX2 ones (vpmaddubsw and vpmaddwd on 256 bits)
 * for cpus without it; q4_0's, q4_1's, q5_0's and q5_1's on AVX512-VNNI,
 * VBMI and GFNI where the cpu has those too. kvt_qdots() says whether this cpu, and the current
 * setting, use them. The reference, kvt_qdot_ref, is the same integer
 * arithmetic in portable C and what the tests hold the vector code to.
 */
#ifndef KVT_KERNELS_CPU_QDOTS_H
#define KVT_KERNELS_CPU_QDOTS_H

#include <stddef.h>
#include <stdint.h>

/* rows of n values rounded to int8 in blocks of blk (32 or 256):
 * value ~ d * q, q in -127..127, d = max |x| / 127 over the block. */
struct kvt_xq {
	int8_t	*q;		/* (rows, n) */
	float	*d;		/* (rows, n / blk) */
	int16_t	*s;		/* (rows, n / 16): sums of q over each 16 */
	unsigned rows, n, blk;
};

/* The block of x the integer kernel of weight type wants (32 or 256: the
 * type's own block), or 0 where there is none: f32, f16 and bf16 keep f32
 * activations. */
unsigned kvt_xq_blk(uint32_t wtype);

/* Round x (rows, n) into *xq (allocated here; n a multiple of blk): 0 or
 * -ENOMEM / -EINVAL. Bit-identical on every cpu. */
int  kvt_xq_make(struct kvt_xq *xq, const float *x, unsigned rows, unsigned n, unsigned blk);
void kvt_xq_free(struct kvt_xq *xq);		/* also on a zeroed struct */

/* out[k * 4 + r] = row k (< NW <= 2) of the weights at w (rows wst bytes
 * apart) . row r0 + r (r < R <= 4) of xq, for weights of one type and
 * n_in = xq->n. */
typedef void (*kvt_qdots_fn)(const void *w, size_t wst, unsigned NW, const struct kvt_xq *xq,
			     unsigned r0, unsigned R, float *out);

/* The kernel for wtype, or NULL: no integer kernel for the type (f32,
 * f16, bf16), a cpu without AVX2 (or kvt_cpu_simd() lowered to 0), or
 * integer dots turned off. The AVX-512BW kernel where kvt_cpu_simd() is 2
 * and the cpu has AVX-512BW (for q4_0, q4_1, q5_0 and q5_1, the VNNI one
 * where it also has AVX512-VNNI, VBMI and GFNI), else the AVX2 one. */
kvt_qdots_fn kvt_qdots(uint32_t wtype);

/* The same product in portable C, one weight row against row r of xq:
 * each block's integer sum exactly, the blocks summed in double. */
float kvt_qdot_ref(uint32_t wtype, const void *w, const struct kvt_xq *xq, unsigned r);

/* Integer dots on (1, the default) or off (0: quantized weights multiply
 * f32 activations, exactly as the dequantized weights would). The default
 * is on unless the environment sets KVT_EXACT_DOTS to anything but 0.
 * Call between kernel calls, never during one. */
void kvt_cpu_set_int8_dots(int on);
int  kvt_cpu_int8_dots(void);

#endif
