/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the kvt-bench subcommands: time, medians, sizes, shell
 * quoting, the fio runner and benchmark files (declared in tools/bench.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include <kvt/config.h>
#include "tools/bench.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double bench_median(double *v, int n)
{
	if (n <= 0)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One size from s up to the first ',' or the end; *end: where it stopped. */
static int parse_size_at(const char *s, uint64_t *out, const char **endp)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (*s < '0' || *s > '9')	/* strtoull would take " 1" and "-1" */
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: break;
	}
	if (shift && v > (UINT64_MAX >> shift))
		return -EINVAL;
	v <<= shift;
	if (shift && *end == 'i' && end[1] == 'B')	/* 64KiB */
		end += 2;
	else if (*end == 'B')				/* 64KB, 4096B */
		end++;
	*out = v;
	*endp = end;
	return 0;
}

int bench_parse_size(const char *s, uint64_t *out)
{
	const char *end;
	uint64_t v;

	if (parse_size_at(s, &v, &end) || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

int bench_parse_list(const char *s, uint64_t *v, int max)
{
	int n = 0;

	while (*s) {
		const char *end;

		if (*s == ',') {
			s++;
			continue;
		}
		if (n == max || parse_size_at(s, &v[n], &end) || (*end && *end != ','))
			return -1;
		n++;
		s = end;
	}
	return n ? n : -1;
}

const char *bench_fmt_size(uint64_t v, char *buf, size_t len)
{
	if (v >= (1u << 20) && v % (1u << 20) == 0)
		snprintf(buf, len, "%" PRIu64 "M", v >> 20);
	else if (v >= (1u << 10) && v % (1u << 10) == 0)
		snprintf(buf, len, "%" PRIu64 "K", v >> 10);
	else
		snprintf(buf, len, "%" PRIu64, v);
	return buf;
}

int bench_shell_quote(const char *s, char *out, size_t len)
{
	size_t o = 0;

	if (len < 3)
		return -ENAMETOOLONG;
	out[o++] = '\'';
	for (; *s; s++) {
		const char *piece = *s == '\'' ? "'\\''" : NULL;	/* ' -> '\'' */
		size_t pl = piece ? 4 : 1;

		if (o + pl + 2 > len)
			return -ENAMETOOLONG;
		if (piece)
			memcpy(out + o, piece, pl);
		else
			out[o] = *s;
		o += pl;
	}
	out[o++] = '\'';
	out[o] = 0;
	return 0;
}

/* All of f's output, NUL-terminated (NULL: no memory). */
static char *slurp(FILE *f)
{
	char *out = NULL;
	size_t len = 0, cap = 0;

	for (;;) {
		if (cap - len < 4096) {
			char *nb = realloc(out, cap + 65536);

			if (!nb)
				break;
			out = nb;
			cap += 65536;
		}
		size_t got = fread(out + len, 1, cap - len - 1, f);

		if (!got)
			break;
		len += got;
	}
	if (out)
		out[len] = 0;
	return out;
}

/* The first "key" : number after p into *v; 0 or -1. */
static int json_number(const char *p, const char *key, double *v)
{
	char pat[64];

	snprintf(pat, sizeof(pat), "\"%s\"", key);
	p = p ? strstr(p, pat) : NULL;
	if (!p)
		return -1;
	p += strlen(pat);
	while (*p == ' ' || *p == ':')
		p++;
	char *end;

	*v = strtod(p, &end);
	return end == p ? -1 : 0;
}

double bench_fio(const char *file, uint64_t size, uint64_t bs, unsigned depth,
		 const char *rw, int direct, double seconds, const char *extra,
		 double *cpu)
{
	static const char *const dirs[] = { "\"read\" : {", "\"write\" : {", "\"trim\" : {" };
	size_t qlen = strlen(file) * 4 + 3, clen;
	char *qfile = malloc(qlen), *cmd = NULL, *out = NULL;
	double bw = 0, dbw, usr = 0, sys = 0;
	int st, parsed = 0;
	FILE *f;

	if (cpu)
		*cpu = 0;
	if (!extra)
		extra = "";
	clen = qlen + strlen(rw) + strlen(extra) + 512;
	if (!qfile || !(cmd = malloc(clen)) || bench_shell_quote(file, qfile, qlen))
		goto out;
	snprintf(cmd, clen,
		 "fio --name=kvt-ref --filename=%s --size=%" PRIu64 " --bs=%" PRIu64
		 " --iodepth=%u --rw=%s --ioengine=io_uring --direct=%d --time_based"
		 " --runtime=%llums --output-format=json %s 2>&1",
		 qfile, size, bs, depth, rw, direct ? 1 : 0,
		 (unsigned long long)(seconds * 1000 + 0.5), extra);
	f = popen(cmd, "r");
	if (!f)
		goto out;
	out = slurp(f);
	st = pclose(f);
	if (!out)
		goto out;
	/* The first job's read, write and trim sections: the directions it
	 * does not do report 0, so the sum is its bandwidth whatever rw is.
	 * ("rw" : "read" in the job options has no '{' after it.) */
	for (unsigned i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		if (!json_number(strstr(out, dirs[i]), "bw_bytes", &dbw)) {
			bw += dbw;
			parsed++;
		}
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) || !parsed || !(bw > 0)) {
		size_t n = strlen(out);

		while (n && (out[n - 1] == '\n' || out[n - 1] == ' '))
			out[--n] = 0;
		if (!(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 127))	/* sh: no fio */
			fprintf(stderr, "kvt-bench: fio %s failed (status %d): %.400s\n", rw,
				st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
		bw = 0;
		goto out;
	}
	if (cpu) {
		json_number(out, "usr_cpu", &usr);
		json_number(out, "sys_cpu", &sys);
		*cpu = usr + sys;
	}
out:
	free(out);
	free(cmd);
	free(qfile);
	return bw;
}

void bench_log(void *arg, int level, const char *msg)
{
	if (level <= KVT_LOG_WARN)
		fprintf(stderr, "%s: %s\n", arg ? (const char *)arg : "kvt-bench", msg);
}

int bench_make_file(const char *dir, uint64_t size, char *path, size_t len)
{
	const char *d = dir ? dir : getenv("TMPDIR");
	static char block[1 << 20];
	int fd;

	snprintf(path, len, "%s/kvt-bench.XXXXXX", d && *d ? d : "/tmp");
	fd = mkstemp(path);
	if (fd < 0)
		return -errno;
	memset(block, 0x5a, sizeof(block));
	for (uint64_t off = 0; off < size; off += sizeof(block)) {
		size_t n = size - off < sizeof(block) ? size - off : sizeof(block);

		if (pwrite(fd, block, n, (off_t)off) != (ssize_t)n) {
			int e = -errno;

			close(fd);
			unlink(path);
			return e ? e : -EIO;
		}
	}
	fsync(fd);
	close(fd);
	return 0;
}
