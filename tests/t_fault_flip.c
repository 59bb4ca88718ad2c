/* SPDX-License-Identifier: MIT */
/*
 * A bit flipped in an NVMe read fails the page's XXH3 check: the page is
 * lost (-EIO, counted in csum_failures and lost_pages), every other page is
 * served intact, and the loss is permanent. The body is t_fault_eio's,
 * with flip_every instead of eio_every.
 */
#define FAULT_FLIP 1
#include "t_fault_eio.c"
