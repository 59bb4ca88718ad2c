/* SPDX-License-Identifier: MIT */
/*
 * kvt-bench io: random-read and random-write bandwidth of the NVMe path
 * (kvt_nvme_run) beside fio on the same file with the same block size,
 * queue depth, size and O_DIRECT setting.
 *
 *   kvt-bench io [--file PATH] [--size BYTES] [--bs LIST] [--depth LIST]
 *                [--seconds S] [--repeat N] [--batch M] [--json] [--no-fio]
 *                [--fio-plain] [--fio-args ARGS]
 *
 * --file is a directory (a file is made in it), a block device, or a file
 * that does not exist yet (kvt never overwrites one); default: a file in
 * $TMPDIR or /tmp. The file is removed at the end (a device is left as it
 * is, but its first --size bytes are overwritten).
 *
 * Method. The file is first written once sequentially, so that reads hit
 * the device rather than unwritten extents, and flushed; every write
 * measurement is followed by a flush too (untimed), so that no run pays
 * for the write-back of the one before it. Then for each (bs, depth):
 * randread, then randwrite, each by kvt and then by fio. kvt walks the
 * blocks of the file in a random order (a fresh permutation each pass),
 * one bs request per block, handing kvt_nvme_run batches of depth * M
 * requests until the time is up; buffers come from one 2 MiB aligned
 * region registered as fixed buffers. max_io is the smallest bs, so no two
 * requests are ever merged: it measures the path, not the coalescing.
 *
 * fio runs like for like: with --fixedbufs --registerfiles (registered
 * buffers and files, as kvt's path has them), i.e. fio at its best;
 * --fio-plain drops those two, --fio-args adds more. The header line (on
 * stderr) says which fio options were used, and so does each JSON object.
 *
 * Batch size (M). kvt_nvme_run drains to zero before it returns, so each
 * call ends with a tail in which fewer than depth requests are in flight;
 * the longer the batch, the smaller that tail's share: about one service
 * time in M, i.e. roughly 1/(2M) of the bandwidth (M = 4: ~12 %, 8: ~6 %,
 * 16: ~3 %). The pager's real batches are small, but this is a comparison
 * with fio, which never drains. On the 2-core VM this was written on
 * (virtio disk, and a loop device over tmpfs), run-to-run noise (+-30 %)
 * was larger than any difference between M = 4, 8, 16 and 64, so the
 * default follows the model: M = 16, the first within a few per cent of
 * an endless queue. --batch overrides it.
 *
 * Output: a table (bs, depth, op, kvt MB/s, fio MB/s, kvt/fio, and the CPU
 * each used in per cent of one core: kvt's process including its io-wq
 * workers, fio's job usr + sys), or with --json one object per line per
 * measurement. MB = 10^6 bytes. Each value
 * is the median of --repeat runs, kvt and fio taking turns (see measure).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "pager/nvme.h"
#include "tools/bench.h"

#define MAX_LIST	32
#define SZ_2M		((uint64_t)2 << 20)
#define REGION_MAX	((uint64_t)1 << 30)	/* buffers: at most this much */
#define FILL_BS		((uint64_t)1 << 20)
#define DEFAULT_BATCH	16


struct bench {
	const char *file;
	uint64_t size;
	uint64_t bs[MAX_LIST];
	unsigned nbs;
	unsigned depth[MAX_LIST];
	unsigned ndepth;
	double	 seconds;
	unsigned repeat;
	unsigned batch;		/* requests per kvt_nvme_run = depth * batch */
	int	 json;
	int	 fio;
	int	 fio_plain;	/* no --fixedbufs --registerfiles */
	const char *fio_args;	/* appended to the fio command line */
	char	 fio_opts[1024];	/* what fio gets beyond the common options */

	struct kvt_nvme *n;
	struct kvt_nvme_info info;
	uint8_t *region;	/* (region_bytes) buffers, 2 MiB aligned */
	uint64_t region_bytes;
	uint64_t *perm;		/* block order of the current pass */
	uint64_t nperm, cursor;
	uint64_t rng;
};

static const char *const op_name[] = { "randread", "randwrite" };

static uint64_t rnd(struct bench *b)
{
	/* xorshift64* */
	b->rng ^= b->rng >> 12;
	b->rng ^= b->rng << 25;
	b->rng ^= b->rng >> 27;
	return b->rng * 2685821657736338717ull;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: kvt-bench io [--file PATH] [--size BYTES] [--bs LIST] [--depth LIST]\n"
		"                    [--seconds S] [--repeat N] [--batch M] [--json] [--no-fio]\n"
		"                    [--fio-plain] [--fio-args ARGS]\n"
		"  --file PATH   directory, block device, or new file (default: $TMPDIR or /tmp)\n"
		"  --size BYTES  bytes of the file used (default 1G)\n"
		"  --bs LIST     block sizes, multiples of 4K (default 64K,128K,256K,512K,1M,2M)\n"
		"  --depth LIST  queue depths (default 1,8,32,64)\n"
		"  --seconds S   per measurement (default 2)\n"
		"  --repeat N    median of N runs, at most 64 (default 1)\n"
		"  --batch M     requests per kvt_nvme_run call = depth * M (default %d)\n"
		"  --json        one JSON object per line instead of the table\n"
		"  --no-fio      kvt only\n"
		"  --fio-plain   fio without " BENCH_FIO_LIKE_KVT "\n"
		"                (by default fio has them, as kvt does: like for like)\n"
		"  --fio-args A  more fio options, appended to its command line\n", DEFAULT_BATCH);
}

/* argv[0] is the subcommand ("io"). Returns 0, or 2 on a usage error. */
static int parse_args(struct bench *b, int argc, char **argv)
{
	uint64_t list[MAX_LIST];
	int i, cnt;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = NULL;
		char name[32];
		const char *eq = strchr(a, '=');

		if (strncmp(a, "--", 2)) {
			fprintf(stderr, "kvt-bench io: unexpected argument '%s'\n", a);
			return 2;
		}
		if (eq) {
			snprintf(name, sizeof(name), "%.*s", (int)(eq - a), a);
			v = eq + 1;
		} else {
			snprintf(name, sizeof(name), "%s", a);
		}
		if (!strcmp(name, "--json") || !strcmp(name, "--no-fio") ||
		    !strcmp(name, "--fio-plain") || !strcmp(name, "--help")) {
			if (!strcmp(name, "--help")) {
				usage();
				return 2;
			}
			if (!strcmp(name, "--json"))
				b->json = 1;
			else if (!strcmp(name, "--fio-plain"))
				b->fio_plain = 1;
			else
				b->fio = 0;
			continue;
		}
		if (strcmp(name, "--file") && strcmp(name, "--fio-args") &&
		    strcmp(name, "--size") && strcmp(name, "--bs") &&
		    strcmp(name, "--depth") && strcmp(name, "--seconds") &&
		    strcmp(name, "--repeat") && strcmp(name, "--batch")) {
			fprintf(stderr, "kvt-bench io: unknown option %s\n", name);
			usage();
			return 2;
		}
		if (!v) {
			if (i + 1 >= argc) {
				fprintf(stderr, "kvt-bench io: %s needs a value\n", name);
				return 2;
			}
			v = argv[++i];
		}
		if (!strcmp(name, "--file")) {
			b->file = v;
		} else if (!strcmp(name, "--fio-args")) {
			b->fio_args = v;
		} else if (!strcmp(name, "--size")) {
			if (bench_parse_size(v, &b->size) || b->size < SZ_2M)
				goto bad;
		} else if (!strcmp(name, "--bs")) {
			cnt = bench_parse_list(v, b->bs, MAX_LIST);
			if (cnt < 0)
				goto bad;
			b->nbs = (unsigned)cnt;
			for (unsigned k = 0; k < b->nbs; k++)
				if (!b->bs[k] || b->bs[k] % 4096 || b->bs[k] > ((uint64_t)1 << 30))
					goto bad;
		} else if (!strcmp(name, "--depth")) {
			cnt = bench_parse_list(v, list, MAX_LIST);
			if (cnt < 0)
				goto bad;
			b->ndepth = (unsigned)cnt;
			for (unsigned k = 0; k < b->ndepth; k++) {
				if (!list[k] || list[k] > 4096)
					goto bad;
				b->depth[k] = (unsigned)list[k];
			}
		} else if (!strcmp(name, "--seconds")) {
			char *end;

			b->seconds = strtod(v, &end);
			if (*end || !(b->seconds > 0))
				goto bad;
		} else if (!strcmp(name, "--repeat") || !strcmp(name, "--batch")) {
			char *end;
			unsigned long x = strtoul(v, &end, 10);

			if (*end || !x || x > (!strcmp(name, "--repeat") ? 64 : 1000))
				goto bad;
			*(!strcmp(name, "--repeat") ? &b->repeat : &b->batch) = (unsigned)x;
		}
		continue;
bad:
		fprintf(stderr, "kvt-bench io: bad value for %s: '%s'\n", name, v);
		return 2;
	}
	if (snprintf(b->fio_opts, sizeof(b->fio_opts), "%s%s%s",
		     b->fio_plain ? "" : BENCH_FIO_LIKE_KVT,
		     !b->fio_plain && b->fio_args && b->fio_args[0] ? " " : "",
		     b->fio_args ? b->fio_args : "") >= (int)sizeof(b->fio_opts)) {
		fprintf(stderr, "kvt-bench io: --fio-args too long\n");
		return 2;
	}
	return 0;
}

/* A fresh random order of the nperm blocks. */
static void shuffle(struct bench *b)
{
	for (uint64_t i = 0; i < b->nperm; i++)
		b->perm[i] = i;
	for (uint64_t i = b->nperm - 1; i > 0; i--) {
		uint64_t j = rnd(b) % (i + 1), t = b->perm[i];

		b->perm[i] = b->perm[j];
		b->perm[j] = t;
	}
	b->cursor = 0;
}

/* Write the whole file once, sequentially. Returns 0 or -errno. */
static int populate(struct bench *b, unsigned depth)
{
	uint64_t slots = b->region_bytes / FILL_BS, off = 0, bs = FILL_BS;
	unsigned nreq = 64, i;
	struct kvt_io *io = calloc(nreq, sizeof(*io));
	int r = 0;

	if (!io)
		return -ENOMEM;
	memset(b->region, 0x6b, slots < nreq ? b->region_bytes : nreq * bs);
	kvt_nvme_set_depth(b->n, depth < 32 ? depth : 32);
	while (off < b->size && !r) {
		for (i = 0; i < nreq && off < b->size; i++, off += bs) {
			uint64_t len = b->size - off < bs ? b->size - off : bs;

			io[i] = (struct kvt_io){ .off = off, .buf = b->region + (i % slots) * bs,
						 .len = (uint32_t)len, .op = KVT_IO_WRITE };
		}
		r = kvt_nvme_run(b->n, io, i, NULL, NULL);
		for (unsigned k = 0; k < i && !r; k++)
			r = io[k].res;
	}
	free(io);
	return r;
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);	/* io-wq workers are our threads: counted */
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

/* kvt: bytes per second of op at (bs, depth), or a negative errno; *cpu:
 * CPU time over wall time in per cent. */
static double kvt_point(struct bench *b, uint64_t bs, unsigned depth, int op, double *cpu)
{
	uint64_t slots = b->region_bytes / bs, bytes = 0;
	unsigned nreq = depth * b->batch < slots ? depth * b->batch : (unsigned)slots, i;
	struct kvt_io *io = calloc(nreq, sizeof(*io));
	double t0, t1, end, c0;
	int r = 0;

	if (!io)
		return -ENOMEM;
	kvt_nvme_set_depth(b->n, depth);
	b->nperm = b->size / bs;
	shuffle(b);
	c0 = cpu_s();
	t0 = cli_now();
	end = t0 + b->seconds;
	do {
		for (i = 0; i < nreq; i++) {
			if (b->cursor == b->nperm)
				shuffle(b);
			io[i] = (struct kvt_io){ .off = b->perm[b->cursor++] * bs,
						 .buf = b->region + i * bs,
						 .len = (uint32_t)bs, .op = (uint8_t)op };
		}
		r = kvt_nvme_run(b->n, io, nreq, NULL, NULL);
		for (i = 0; i < nreq && !r; i++)
			r = io[i].res;
		bytes += (uint64_t)nreq * bs;
		t1 = cli_now();
	} while (!r && t1 < end);
	*cpu = (cpu_s() - c0) / (t1 - t0) * 100;
	free(io);
	if (r) {
		fprintf(stderr, "kvt-bench io: kvt %s bs %" PRIu64 " depth %u: %s\n",
			op_name[op], bs, depth, strerror(-r));
		return r;
	}
	return (double)bytes / (t1 - t0);
}

/* fio: bytes per second of op at (bs, depth), 0 for no result; *cpu: its
 * job's usr_cpu + sys_cpu (per cent of its run time). */
static double fio_point(struct bench *b, uint64_t bs, unsigned depth, int op, double *cpu)
{
	return bench_fio(b->info.path, b->size, bs, depth, op_name[op], b->info.direct,
			 b->seconds, b->fio_opts, cpu);
}

/* After writing, flush (untimed): a virtual disk's host cache still
 * writing back one run's data would slow whichever run comes next. */
static void settle(struct bench *b, int op)
{
	if (op == KVT_IO_WRITE)
		fdatasync(kvt_nvme_fd(b->n));
}

/* Medians of repeat runs of kvt and fio, taken in turns, who goes first
 * alternating (kvt fio, fio kvt, kvt fio, ...): on a virtual disk the
 * host's cache still flushing one side's writes, or its throttling,
 * would otherwise always hit the same side. r[0], r[1]: kvt bandwidth and CPU per cent, r[2], r[3]:
 * fio's. r[0] < 0: kvt's errno; r[2] < 0: no fio result. */
static void measure(struct bench *b, uint64_t bs, unsigned depth, int op, double r[4])
{
	double v[4][64];
	unsigned k, cnt = b->repeat < 64 ? b->repeat : 64, nf = 0;

	r[2] = r[3] = -1;
	for (k = 0; k < cnt; k++) {
		int fio_first = b->fio && (k & 1);

		if (fio_first) {
			v[2][nf] = fio_point(b, bs, depth, op, &v[3][nf]);
			nf += v[2][nf] > 0;
			settle(b, op);
		}
		v[0][k] = kvt_point(b, bs, depth, op, &v[1][k]);
		if (v[0][k] < 0) {
			r[0] = v[0][k];
			return;
		}
		settle(b, op);
		if (b->fio && !fio_first) {
			v[2][nf] = fio_point(b, bs, depth, op, &v[3][nf]);
			nf += v[2][nf] > 0;
			settle(b, op);
		}
	}
	r[0] = bench_median(v[0], (int)cnt);
	r[1] = bench_median(v[1], (int)cnt);
	if (nf) {
		r[2] = bench_median(v[2], (int)nf);
		r[3] = bench_median(v[3], (int)nf);
	}
}

/* s as the inside of a JSON string. */
static void json_str(const char *s)
{
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", (unsigned char)*s);
		else
			putchar(*s);
	}
}

int bench_io(int argc, char **argv)
{
	struct bench b = {
		.size = (uint64_t)1 << 30,
		.bs = { 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20 },
		.nbs = 6,
		.depth = { 1, 8, 32, 64 },
		.ndepth = 4,
		.seconds = 2,
		.repeat = 1,
		.batch = DEFAULT_BATCH,
		.fio = 1,
	};
	char path[KVT_PATH_MAX];
	const char *dir;
	uint64_t min_bs = UINT64_MAX, max_bs = 0;
	unsigned max_depth = 0, i, j;
	struct stat st;
	int r, ret = 1;

	r = parse_args(&b, argc, argv);
	if (r)
		return r;
	for (i = 0; i < b.nbs; i++) {
		min_bs = b.bs[i] < min_bs ? b.bs[i] : min_bs;
		max_bs = b.bs[i] > max_bs ? b.bs[i] : max_bs;
	}
	for (i = 0; i < b.ndepth; i++)
		max_depth = b.depth[i] > max_depth ? b.depth[i] : max_depth;
	b.size -= b.size % max_bs;
	if (b.size < max_bs) {
		fprintf(stderr, "kvt-bench io: --size must hold one block of %" PRIu64 "\n", max_bs);
		return 2;
	}

	/* A directory (or none): a file of our own in it, by name, so fio
	 * can open it too. */
	dir = b.file;
	if (!dir || !dir[0]) {
		dir = getenv("TMPDIR");
		if (!dir || !dir[0])
			dir = "/tmp";
	} else if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
		dir = NULL;
	}
	if (dir)
		snprintf(path, sizeof(path), "%s/kvt-bench-io.%d", dir, (int)getpid());
	else
		snprintf(path, sizeof(path), "%s", b.file);

	struct kvt_nvme_opts o = {
		.path = path, .bytes = b.size, .direct = KVT_AUTO, .depth = max_depth,
		.max_io = min_bs, .log = bench_log, .log_arg = "kvt-bench io",
	};
	r = kvt_nvme_open(&o, &b.n);
	if (r) {
		fprintf(stderr, "kvt-bench io: open %s: %s%s\n", path, strerror(-r),
			r == -EEXIST ? " (kvt never overwrites a file: name a new one)" : "");
		return 1;
	}
	kvt_nvme_info(b.n, &b.info);
	b.size = b.info.bytes - b.info.bytes % max_bs;

	/* A buffer for every request of the largest batch, up to REGION_MAX.
	 * Requests of one call must not share one (two reads into the same
	 * memory are ordered, which cuts the batch): kvt_point shortens the
	 * batch to the buffers there are instead. */
	b.region_bytes = (uint64_t)max_depth * b.batch * max_bs;
	if (b.region_bytes > REGION_MAX)
		b.region_bytes = REGION_MAX > max_bs * max_depth ? REGION_MAX : max_bs * max_depth;
	if (b.region_bytes < FILL_BS)
		b.region_bytes = FILL_BS;
	b.region_bytes = (b.region_bytes + SZ_2M - 1) & ~(SZ_2M - 1);
	if (posix_memalign((void **)&b.region, SZ_2M, b.region_bytes)) {
		fprintf(stderr, "kvt-bench io: no memory for %" PRIu64 " bytes of buffers\n",
			b.region_bytes);
		goto out;
	}
	b.perm = malloc(sizeof(*b.perm) * (b.size / min_bs));
	if (!b.perm) {
		fprintf(stderr, "kvt-bench io: no memory\n");
		goto out;
	}
	b.rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
	kvt_nvme_register_buffers(b.n, b.region, b.region_bytes);	/* failure: noted */
	kvt_nvme_info(b.n, &b.info);

	fprintf(stderr, "kvt-bench io: %s, %" PRIu64 " MiB, %s, registered files %d, "
		"buffers %d; fio %s%s%s%s\n", b.info.path, b.size >> 20,
		b.info.direct ? "O_DIRECT" : "buffered", b.info.registered_files,
		b.info.registered_buffers, !b.fio ? "off" : "options: ",
		!b.fio ? "" : b.fio_opts[0] ? b.fio_opts : "(plain)",
		b.info.notes[0] ? "; " : "", b.info.notes);
	r = populate(&b, max_depth);
	if (!r && fdatasync(kvt_nvme_fd(b.n)))
		r = -errno;
	if (r) {
		fprintf(stderr, "kvt-bench io: writing the file: %s\n", strerror(-r));
		goto out;
	}
	if (!b.json)
		printf("%6s %6s %-10s %10s %10s %8s %8s %8s\n", "bs", "depth", "op",
		       "kvt MB/s", "fio MB/s", "kvt/fio", "kvt cpu%", "fio cpu%");

	for (i = 0; i < b.nbs; i++)
		for (j = 0; j < b.ndepth; j++)
			for (int op = KVT_IO_READ; op <= KVT_IO_WRITE; op++) {
				uint64_t bs = b.bs[i];
				unsigned depth = b.depth[j];
				double m[4];
				char bss[32], fios[32], rat[32], fcpu[32];

				measure(&b, bs, depth, op, m);
				if (m[0] < 0)
					goto out;
				bench_fmt_size(bs, bss, sizeof(bss));
				if (b.json) {
					printf("{\"bench\":\"io\",\"bs\":%" PRIu64 ",\"depth\":%u,"
					       "\"op\":\"%s\",\"direct\":%d,\"batch\":%u,"
					       "\"repeat\":%u,\"kvt_mbps\":%.1f,\"kvt_cpu_pct\":%.1f",
					       bs, depth, op_name[op], b.info.direct, b.batch,
					       b.repeat, m[0] / 1e6, m[1]);
					if (m[2] > 0) {
						printf(",\"fio_mbps\":%.1f,\"fio_cpu_pct\":%.1f,"
						       "\"ratio\":%.3f,\"fio_opts\":\"", m[2] / 1e6, m[3],
						       m[0] / m[2]);
						json_str(b.fio_opts);
						putchar('"');
					}
					printf("}\n");
				} else {
					if (m[2] > 0) {
						snprintf(fios, sizeof(fios), "%.1f", m[2] / 1e6);
						snprintf(rat, sizeof(rat), "%.2f", m[0] / m[2]);
						snprintf(fcpu, sizeof(fcpu), "%.0f", m[3]);
					} else {
						strcpy(fios, "-");
						strcpy(rat, "-");
						strcpy(fcpu, "-");
					}
					printf("%6s %6u %-10s %10.1f %10s %8s %8.0f %8s\n", bss,
					       depth, op_name[op], m[0] / 1e6, fios, rat, m[1], fcpu);
				}
				fflush(stdout);
			}
	ret = 0;
out:
	kvt_nvme_close(b.n);
	free(b.perm);
	free(b.region);
	return ret;
}
