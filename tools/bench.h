/* SPDX-License-Identifier: MIT */
/* Shared by the kvt-bench subcommands (tools/kvt-bench.c, tools/bench_*.c);
 * defined in tools/bench_util.c. */
#ifndef KVT_TOOLS_BENCH_H
#define KVT_TOOLS_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "tools/cli.h"	/* cli_now(): monotonic seconds */

double bench_median(double *v, int n);		/* sorts v; 0 when n <= 0 */

/* A size: a number with an optional K, M, G or T suffix (powers of 1024),
 * optionally followed by B or iB ("64K", "64KiB", "1M", "2G"). Returns 0 or
 * -EINVAL (also on overflow). */
int    bench_parse_size(const char *s, uint64_t *out);
/* A comma-separated list of sizes as above ("64K,1M,..."; plain numbers
 * too) into v, at most max of them; empty items are skipped. Returns the
 * count (at least 1) or -1. */
int    bench_parse_list(const char *s, uint64_t *v, int max);
/* v as "64K", "1M" where it is a whole number of those, else in bytes. */
const char *bench_fmt_size(uint64_t v, char *buf, size_t len);

/* s single-quoted for sh into out. Returns 0 or -ENAMETOOLONG. */
int    bench_shell_quote(const char *s, char *out, size_t len);

/* The fio options that give fio what kvt's I/O path has: registered files
 * and registered (fixed) buffers. */
#define BENCH_FIO_LIKE_KVT	"--fixedbufs --registerfiles"

/* fio's bandwidth in bytes/s for one job of rw ("randread", "randwrite",
 * "read", "write", ...) over the first size bytes of file, bs bytes a
 * request, depth requests in flight, io_uring engine, O_DIRECT if direct,
 * for seconds; extra (NULL or "") is appended to fio's command line as it
 * is (shell words), after everything else. *cpu (if cpu): the job's usr +
 * sys CPU in per cent of its run time. Returns 0 (and *cpu 0) when fio is
 * missing or fails; a failure other than a missing fio is said on stderr. */
double bench_fio(const char *file, uint64_t size, uint64_t bs, unsigned depth,
		 const char *rw, int direct, double seconds, const char *extra,
		 double *cpu);

/* A log callback (kvt_config.log, kvt_nvme_opts.log) that prints warnings
 * and errors on stderr, each after the prefix in arg (NULL: "kvt-bench"). */
void   bench_log(void *arg, int level, const char *msg);

/* A file of `size` bytes for I/O benchmarks in dir (NULL: $TMPDIR or
 * /tmp), filled so reads hit real blocks. Path written to path. */
int    bench_make_file(const char *dir, uint64_t size, char *path, size_t len);

int bench_io(int argc, char **argv);
/* The inference runtime (tools/bench_infer.c). */
int bench_decode(int argc, char **argv);
/* kvt-bench attn (bench_attn.c) */
int bench_attn(int argc, char **argv);
int bench_resume(int argc, char **argv);
int bench_serve(int argc, char **argv);
int bench_sim(int argc, char **argv);
int bench_prefill(int argc, char **argv);

#endif
