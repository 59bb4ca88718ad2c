/* SPDX-License-Identifier: MIT */
/*
 * Matrix products on AMX tiles (Intel's Advanced Matrix Extensions), for
 * the prefill's products on quantized weights: the weights dequantized a
 * block of 32 rows at a time and rounded to bf16, x rounded to bf16 once
 * per product, and TDPBF16PS multiplying 16 x 32 by 32 x 16 into f32 in
 * one instruction, sixteen times the rate of AVX-512 FMAs. These are the
 * weights whose products already round x (to int8, qdots.h) in the
 * decode; f32, f16 and bf16 weights keep the exact products.
 *
 * Linux hands the tile state to a process that asks for it
 * (arch_prctl(ARCH_REQ_XCOMP_PERM)); kvt_amx() asks once. A process that
 * has it gets larger signal frames, which is why KVT_AMX=0 turns the tiles
 * off before they are asked for. The same operands also go through
 * AVX512-BF16's VDPBF16PS, 32 multiply-adds an instruction (16 lanes of
 * bf16 pairs), for cpus with it and no tiles: AMD's by default, others
 * when asked (KVT_AMX=dots).
 */
#ifndef KVT_KERNELS_CPU_AMX_H
#define KVT_KERNELS_CPU_AMX_H

#include <stddef.h>
#include <stdint.h>

/* How the products run, kvt_amx():
 *   KVT_BF16_TILES  on tiles: the cpu has AMX-BF16 and AVX512-BF16, and
 *                   Linux granted the tile state (the default there);
 *   KVT_BF16_DOTS   on AVX512-BF16 dot products (VDPBF16PS): the default
 *                   on AMD's cpus that have them (Zen 4 and later), else
 *                   asked for with KVT_AMX=dots or kvt_cpu_set_amx;
 *   KVT_BF16_OFF    not at all (sgemm): the default on other cpus without
 *                   tiles, and always with KVT_AMX=0 or kvt_cpu_simd()
 *                   below 2.
 * kvt_amx_can() is the most the cpu can do. The cpu and the kernel are
 * asked once. kvt_cpu_set_amx picks a mode (capped at kvt_amx_can(); -1:
 * the default again) between kernel calls, never during one: tests and
 * the speed lines. */
enum { KVT_BF16_OFF = 0, KVT_BF16_DOTS = 1, KVT_BF16_TILES = 2 };
int  kvt_amx(void);
int  kvt_amx_can(void);
void kvt_cpu_set_amx(int mode);

/* x (rows, n_in) rounded to bf16, in the layout of the tiles' second
 * operand: tokens in blocks of 16 (padded with zeros to an even number
 * of blocks), each block as n_in / 32 tiles of 16 rows (pairs of inputs)
 * by 16 tokens. n_in a multiple of 32. */
struct kvt_xb {
	uint32_t *p;
	unsigned rows, n_in, blocks;	/* blocks of 16 tokens, even */
	int	 mode;		/* KVT_BF16_TILES or _DOTS, kvt_amx()'s at alloc: every
				 * product of this x multiplies the same way */
};
/* Room for x: 0, -EINVAL (n_in not a multiple of 32, or nothing) or
 * -ENOMEM; then kvt_xb_fill for each block of 16 tokens (tb < blocks), in
 * any order, from any thread. */
int  kvt_xb_alloc(struct kvt_xb *xb, unsigned rows, unsigned n_in);
void kvt_xb_fill(struct kvt_xb *xb, const float *x, unsigned tb);
void kvt_xb_free(struct kvt_xb *xb);		/* also on a zeroed struct */

/* Bytes of the packed weights of kvt_amx_pack / kvt_amx_rows for n_in. */
size_t kvt_amx_wbytes(unsigned n_in);

/* Row r (< 32) of a block of weight rows, n_in f32 values, rounded to
 * bf16 into wb (kvt_amx_wbytes). Rows never packed must be zero. */
void kvt_amx_pack(uint16_t *wb, unsigned r, const float *row, unsigned n_in);

/* y[t * ldy + o] = the packed row o (o < nrows <= 32) . row t of x, for
 * every row t < xb->rows, on tiles or dot products as xb->mode says. */
void kvt_amx_rows(float *y, size_t ldy, const uint16_t *wb, unsigned nrows,
		  const struct kvt_xb *xb);

#endif
