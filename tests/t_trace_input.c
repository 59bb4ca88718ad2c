/* SPDX-License-Identifier: MIT */
/*
 * Trace readers' inputs: a zstd-compressed oracleGeneral file (as
 * libCacheSim publishes them, *.oracleGeneral.zst, written here by
 * libzstd in two frames) loads to the same references as the plain file,
 * in kvt-sim's loader and through kvt-trace import; a compressed kvtier
 * trace opens as the plain one does; "-" reads standard input, from a
 * file and from a pipe; a truncated or corrupt zstd file is refused with
 * one message naming the file and the byte. oracleGeneral's clock_time is
 * in seconds, and kvt-trace info and kvt-sim info show it so.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include "common.h"
#include "pager/sim.h"
#include "pager/trace.h"

#define N	5000
#define T0	1700000000u	/* clock_time of the first request, seconds */

static char dir[1024], plain[1200], zst[1200], kvt[1200], kvtz[1200], cut[1200], bad[1200];
static char out[1 << 16];

static void *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *b;
	long len;

	CHECK(f && !fseek(f, 0, SEEK_END) && (len = ftell(f)) >= 0);
	rewind(f);
	b = malloc((size_t)len + 1);
	CHECK(b && fread(b, 1, (size_t)len, f) == (size_t)len);
	fclose(f);
	*n = (size_t)len;
	return b;
}

static void spill(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");

	CHECK(f && fwrite(p, 1, n, f) == n && !fclose(f));
}

/* src compressed into dst as two zstd frames (a split at half). */
static void compress_to(const char *src, const char *dst)
{
	size_t n, half, cap, a, b;
	char *in = slurp(src, &n), *z;

	half = n / 2;
	cap = ZSTD_compressBound(half) + ZSTD_compressBound(n - half);
	z = malloc(cap);
	CHECK(z);
	a = ZSTD_compress(z, cap, in, half, 3);
	CHECK(!ZSTD_isError(a));
	/* the second with a checksum, as the zstd tool writes them */
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	CHECK(cc && !ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1)));
	b = ZSTD_compress2(cc, z + a, cap - a, in + half, n - half);
	CHECK(!ZSTD_isError(b));
	ZSTD_freeCCtx(cc);
	spill(dst, z, a + b);
	free(in);
	free(z);
}

/* A shell command; its output into out; its exit status (tests/common.h). */
#define run(...) t_shell(out, sizeof(out), __VA_ARGS__)

static void same_trace(const struct kvt_sim_trace *a, const struct kvt_sim_trace *b)
{
	CHECK_EQ(a->n, N);
	CHECK_EQ(b->n, a->n);
	CHECK_EQ(b->npages, a->npages);
	CHECK(!memcmp(a->id, b->id, a->n * sizeof(*a->id)));
	CHECK(!memcmp(a->key, b->key, a->npages * sizeof(*a->key)));
	CHECK(a->time_s && b->time_s);
	CHECK_EQ(a->time_first, T0);
	CHECK_EQ(a->time_last, T0 + (N - 1) / 7);
	CHECK_EQ(b->time_first, a->time_first);
	CHECK_EQ(b->time_last, a->time_last);
}

/* kvt_sim_trace_load("-") with stdin from path (pipe: through a pipe fed
 * by a child, so it cannot be mapped). */
static int load_stdin(const char *path, int pipe_it, struct kvt_sim_trace *t, char *err,
		      size_t errlen)
{
	int saved = dup(0), fd, p[2], r;
	pid_t pid = -1;

	CHECK(saved >= 0);
	if (pipe_it) {
		CHECK(!pipe(p));
		pid = fork();
		CHECK(pid >= 0);
		if (!pid) {
			size_t n;
			char *b = slurp(path, &n);

			close(p[0]);
			_exit(write(p[1], b, n) == (ssize_t)n ? 0 : 1);
		}
		close(p[1]);
		fd = p[0];
	} else {
		fd = open(path, O_RDONLY);
		CHECK(fd >= 0);
	}
	CHECK(dup2(fd, 0) == 0);
	close(fd);
	r = kvt_sim_trace_load("-", t, err, errlen);
	CHECK(dup2(saved, 0) == 0);
	close(saved);
	if (pid > 0) {
		int st;

		CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && !WEXITSTATUS(st));
	}
	return r;
}

int main(void)
{
	const char *build = getenv("BUILD");
	struct kvt_sim_trace a, b;
	struct kvt_trace t1, t2;
	char err[512];
	size_t n;
	uint8_t *z;

	if (!build || !*build)
		build = "build";
	snprintf(dir, sizeof(dir), "%s/t_trace_input.%d", t_dir(), (int)getpid());
	CHECK(!mkdir(dir, 0700));
	snprintf(plain, sizeof(plain), "%s/t.oracleGeneral", dir);
	snprintf(zst, sizeof(zst), "%s/t.oracleGeneral.zst", dir);
	snprintf(kvt, sizeof(kvt), "%s/t.kvt", dir);
	snprintf(kvtz, sizeof(kvtz), "%s/t.kvt.zst", dir);
	snprintf(cut, sizeof(cut), "%s/cut.zst", dir);
	snprintf(bad, sizeof(bad), "%s/bad.zst", dir);

	/* oracleGeneral: {u32 clock_time; u64 obj_id; u32 obj_size; i64 next},
	 * seven requests a second, 300 objects in a skewed mix */
	{
		FILE *f = fopen(plain, "wb");

		CHECK(f);
		for (uint32_t i = 0; i < N; i++) {
			uint8_t r[24];
			uint32_t clock = T0 + i / 7, size = 4096;
			uint64_t id = (uint64_t)(i * 2654435761u % 300) * (i % 3 ? 1 : 7) + 1;
			int64_t next = -1;

			memcpy(r, &clock, 4);
			memcpy(r + 4, &id, 8);
			memcpy(r + 12, &size, 4);
			memcpy(r + 16, &next, 8);
			CHECK(fwrite(r, 1, 24, f) == 24);
		}
		CHECK(!fclose(f));
	}
	compress_to(plain, zst);

	/* kvt-sim's loader: the same references from both, and from stdin */
	CHECK_EQ(kvt_sim_trace_load(plain, &a, err, sizeof(err)), 0);
	CHECK_EQ(kvt_sim_trace_load(zst, &b, err, sizeof(err)), 0);
	same_trace(&a, &b);
	kvt_sim_trace_free(&b);
	CHECK_EQ(load_stdin(zst, 0, &b, err, sizeof(err)), 0);
	same_trace(&a, &b);
	kvt_sim_trace_free(&b);
	CHECK_EQ(load_stdin(zst, 1, &b, err, sizeof(err)), 0);
	same_trace(&a, &b);
	kvt_sim_trace_free(&b);
	CHECK_EQ(load_stdin(plain, 1, &b, err, sizeof(err)), 0);
	same_trace(&a, &b);
	kvt_sim_trace_free(&b);
	printf("oracleGeneral: %u pages in %d requests, the same from the file, .zst and stdin\n",
	       a.npages, N);

	/* import from the .zst; the kvtier trace, compressed, opens as itself */
	CHECK_EQ(kvt_trace_import_oracle(zst, kvt, err, sizeof(err)), 0);
	compress_to(kvt, kvtz);
	CHECK_EQ(kvt_trace_open(kvt, &t1, err, sizeof(err)), 0);
	CHECK_EQ(kvt_trace_open(kvtz, &t2, err, sizeof(err)), 0);
	CHECK_EQ(t1.nrec, N);
	CHECK_EQ(t2.nrec, t1.nrec);
	CHECK(!memcmp(t1.rec, t2.rec, t1.nrec * sizeof(*t1.rec)));
	CHECK(t2.in.zstd && !t1.in.zstd);
	CHECK_EQ(t1.rec[0].time, T0);		/* seconds, as given */
	CHECK_EQ(t1.rec[N - 1].time, T0 + (N - 1) / 7);
	kvt_trace_close(&t2);
	CHECK_EQ(kvt_sim_trace_load(kvtz, &b, err, sizeof(err)), 0);
	same_trace(&a, &b);
	kvt_sim_trace_free(&b);
	kvt_sim_trace_free(&a);

	/* truncated: the last frame cut short; corrupt: a byte of the last
	 * frame's data changed (its checksum catches what decoding does
	 * not). One message each, naming the file and the byte. */
	z = slurp(zst, &n);
	spill(cut, z, n - 40);
	CHECK_EQ(kvt_sim_trace_load(cut, &b, err, sizeof(err)), -EINVAL);
	printf("refused: %s\n", err);
	CHECK(!strncmp(err, cut, strlen(cut)) && strstr(err, "truncated") && !strchr(err, '\n'));
	z[n - 10] ^= 0x5a;
	spill(bad, z, n);
	free(z);
	CHECK_EQ(kvt_trace_open(bad, &t2, err, sizeof(err)), -EINVAL);
	printf("refused: %s\n", err);
	CHECK(!strncmp(err, bad, strlen(bad)) && strstr(err, ": the zstd frame at byte "));
	CHECK_EQ(kvt_trace_import_oracle(bad, kvtz, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, ": the zstd frame at byte "));
	/* what cannot be read whole is refused, not read forever */
	CHECK_EQ(kvt_trace_open(dir, &t2, err, sizeof(err)), -EISDIR);
	CHECK_EQ(kvt_sim_trace_load("/dev/zero", &b, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "/dev/zero: not a regular file or a pipe"));

	/* The tools: stdin and seconds. */
	{
		char bin[1100];

		snprintf(bin, sizeof(bin), "%s/kvt-trace", build);
		if (!access(bin, X_OK)) {
			CHECK_EQ(run("%s info - < %s 2>&1", bin, kvtz), 0);
			CHECK(strstr(out, "source oracleGeneral") &&
			      strstr(out, ", time 1700000000 s .. 1700000714 s, "));
			CHECK_EQ(run("%s import oracle - %s/stdin.kvt < %s 2>&1", bin, dir, zst), 0);
			snprintf(kvtz, sizeof(kvtz), "%s/stdin.kvt", dir);
			CHECK_EQ(kvt_trace_open(kvtz, &t2, err, sizeof(err)), 0);
			CHECK_EQ(t2.nrec, t1.nrec);
			CHECK(!memcmp(t1.rec, t2.rec, t1.nrec * sizeof(*t1.rec)));
			kvt_trace_close(&t2);
			snprintf(kvtz, sizeof(kvtz), "%s/t.kvt.zst", dir);
			CHECK_EQ(run("%s dump %s -n 1 2>&1", bin, kvtz), 0);
			CHECK(strstr(out, "time_s") && strstr(out, " 1700000000 "));
		} else {
			fprintf(stderr, "(%s not built: not checked)\n", bin);
		}
		snprintf(bin, sizeof(bin), "%s/kvt-sim", build);
		if (!access(bin, X_OK)) {
			CHECK_EQ(run("cat %s | %s info - 2>&1", zst, bin), 0);
			CHECK(strstr(out, "oracleGeneral") &&
			      strstr(out, "\ntime 1700000000 s .. 1700000714 s\n"));
		} else {
			fprintf(stderr, "(%s not built: not checked)\n", bin);
		}
	}
	kvt_trace_close(&t1);
	run("rm -rf %s", dir);
	return 0;
}
