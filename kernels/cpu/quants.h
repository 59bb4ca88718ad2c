/* SPDX-License-Identifier: MIT */
/*
 * GGML's quantized weight types, as the cpu backend reads and writes
 * them: the block layouts of llama.cpp's ggml-common.h, dequantized
 * exactly as its reference code (ggml-quants.c, dequantize_row_*) does,
 * value for value and bit for bit, and a quantizer of our own for each,
 * so that kvt-mkmodel and the tests can write every type the runtime
 * reads.
 *
 *   type  values/block  bytes  layout (value = ...)
 *   q4_0      32          18   f16 d, 16 bytes of nibbles: d * (q - 8)
 *   q4_1      32          20   f16 d, f16 m, nibbles: d * q + m
 *   q5_0      32          22   f16 d, 32 high bits, nibbles: d * (q - 16)
 *   q5_1      32          24   f16 d, f16 m, 32 high bits, nibbles: d * q + m
 *   q8_0      32          34   f16 d, 32 int8: d * q
 *   q2_k     256          84   16 x (4-bit scale, 4-bit min) over 16 values,
 *                              2-bit q, f16 d and dmin
 *   q3_k     256         110   high-bit mask, 2-bit q, 16 6-bit signed
 *                              scales, f16 d
 *   q4_k     256         144   f16 d and dmin, 8 x (6-bit scale, 6-bit
 *                              min) over 32 values, 4-bit q
 *   q5_k     256         176   as q4_k with a fifth bit per value
 *   q6_k     256         210   4 + 2 bits per value, 16 int8 scales, f16 d
 *
 * Nothing here allocates, prints or fails except as noted, and nothing
 * calls into the rest of the cpu backend: the CUDA plug-in links this file
 * alone, to widen these types to f16 at load.
 */
#ifndef KVT_KERNELS_CPU_QUANTS_H
#define KVT_KERNELS_CPU_QUANTS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Every weight type the kernels read, for messages. */
#define KVT_WTYPES "f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k and q6_k"

struct kvt_qtype {
	const char *name;
	uint16_t blk;			/* values per block */
	uint16_t size;			/* bytes per block */
};

/* q4_k and q5_k's 6-bit scale d and min m of sub-block j (0..7) from the
 * block's 12 bytes of them (ggml's get_scale_min_k4). */
static inline void kvt_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
	}
}

/* q3_k's sixteen 6-bit scales (0..63; the scale is that minus 32),
 * unpacked from the block's 12 bytes of them. Always inlined: called from
 * AVX2 and AVX-512 code, as a function of its own it would be SSE code run
 * with the upper halves dirty. */
static inline __attribute__((always_inline)) void kvt_q3k_scales(int8_t *scales,
								 const uint8_t *packed)
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

/* The block type of GGML type number type (enum kvt_wtype), or NULL for
 * one that is not a block type read here (f32, f16, bf16 included). */
const struct kvt_qtype *kvt_qtype(uint32_t type);

/* nblk blocks at src of type into nblk * blk floats at dst, with ggml's
 * reference arithmetic. */
void kvt_dequant_ref(uint32_t type, float *dst, const void *src, size_t nblk);

/* The same through the code for simd level simd (kvt_cpu_simd(): 0 is
 * the reference); bit-identical to kvt_dequant_ref for every input whose
 * scales are finite. */
void kvt_dequant(uint32_t type, float *dst, const void *src, size_t nblk, int simd);

/* One block of src into dst: the code for simd level simd (as
 * kvt_cpu_simd() says; every type has AVX2 code, and all but q2_k, q3_k
 * and q5_k AVX-512 code for level 2), NULL for a type not read here. For
 * the dot-product kernels, which dequantize a block at a time. */
typedef void (*kvt_dequant_block_fn)(float *dst, const uint8_t *src);
kvt_dequant_block_fn kvt_dequant_block(uint32_t type, int simd);

/* n values at src (n a multiple of the type's block) into n / blk blocks
 * at dst. Our own quantizer: each block's scales from its extremes, then
 * every value rounded to the nearest step of the scales as stored (no
 * search for better scales, unlike llama.cpp's quantize tool); q4_0, q5_0
 * and q8_0 are ggml's reference quantizers exactly, as the q4_0 and q8_0
 * KV store them. 0, or
 * -EINVAL for a type not read here or n not a whole number of blocks. */
int  kvt_quantize(uint32_t type, void *dst, const float *src, size_t n);

#endif
