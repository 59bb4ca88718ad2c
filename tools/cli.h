/* SPDX-License-Identifier: MIT */
/* What the command-line tools share: the clock, progress bars, the tier table. */
#ifndef KVT_TOOLS_CLI_H
#define KVT_TOOLS_CLI_H

#include <stdint.h>
#include <stdio.h>

#include <kvt/pager.h>

double cli_now(void);			/* CLOCK_MONOTONIC seconds */

/* First thing in main() of a tool that runs matrix products: when
 * OpenBLAS chose kernels weaker than the cpu has (kvt_blas_core_wanted)
 * and OPENBLAS_CORETYPE is not set, set it to the right core and start
 * the program again (OpenBLAS reads it only when it loads), with
 * KVT_BLAS_CHOSE naming OpenBLAS's own choice so the kernels line can say
 * so. KVT_BLAS_KEEP=1 keeps OpenBLAS's choice. Returns if it did not
 * start again. */
void cli_blas_core(char **argv);

/* A one-line progress bar on stderr, redrawn in place; a no-op unless
 * cli_bar_on was set (tools set it when stderr is a terminal). */
extern int cli_bar_on;
void cli_bar(const char *what, double frac, const char *extra);
void cli_bar_done(void);		/* ends the bar's line */

/* The tier table (hits, misses, bytes moved each way, latency), the
 * prefetch outcomes, stall time and what the tiers could not get. */
void cli_print_tiers(FILE *f, const struct kvt_stats *st);
/* Decode against its disk: between the snapshots a (decode began) and b
 * (it ended), over steps steps and seconds s, the step time, how much of
 * it the NVMe tier was busy, the rate it read at while busy, and the
 * least bytes a step had to read at that rate. Nothing when decode read
 * nothing from NVMe. */
void cli_print_decode_io(FILE *f, const struct kvt_stats *a, const struct kvt_stats *b,
			 unsigned steps, double s);
/* The device's lines of the tier table: what it is, its copies each way
 * and their rate, its kernel time (cli_print_tiers ends with them). */
void cli_print_device(FILE *f, const struct kvt_stats *st);

/* --version: when argv[1] is "--version", print on stdout what the tool
 * is: its name and the library's version, the commit the build came from
 * (git describe, when it was built in a git checkout) and the build's
 * features (CUDA plug-in built or not, the cpu kernels' SIMD level), and
 * return 1: the tool exits 0. Else 0, printing nothing. */
int cli_version(int argc, char **argv, const char *tool);

#endif
