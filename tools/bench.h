/* SPDX-License-Identifier: MIT */
/* Shared by the kvt-bench subcommands (tools/kvt-bench.c, tools/bench_*.c). */
#ifndef KVT_TOOLS_BENCH_H
#define KVT_TOOLS_BENCH_H

#include <stdint.h>

double bench_now(void);				/* monotonic seconds */
int    bench_median_cmp(const void *a, const void *b);
double bench_median(double *v, int n);		/* sorts v */
/* Parse "64K,1M,..." (sizes) into v; returns the count or -1. */
int    bench_parse_list(const char *s, uint64_t *v, int max);
/* fio's bandwidth (bytes/s) for rw ("randread", "randwrite", "read") on
 * file with O_DIRECT and the io_uring engine; 0 when fio is missing or
 * fails. */
double bench_fio(const char *file, uint64_t size, uint64_t bs, unsigned depth,
		 const char *rw, double seconds);
/* A file of `size` bytes for I/O benchmarks in dir (NULL: $TMPDIR or
 * /tmp), filled so reads hit real blocks. Path written to path. */
int    bench_make_file(const char *dir, uint64_t size, char *path, size_t len);

int bench_io(int argc, char **argv);

#endif
