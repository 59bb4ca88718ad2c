/* SPDX-License-Identifier: MIT */
/*
 * The NVMe I/O path round trip: pages written at adjacent and scattered
 * offsets from adjacent and scattered buffers, read back in another order
 * into other buffers; contents, res, one done() per request, coalescing
 * (op counts), mixed batches with overlapping pairs kept in caller order,
 * and requests that need no I/O; kvt_nvme_run_more feeding a run in
 * flight. Once with plain buffers, once with registered ones.
 *
 * O_DIRECT (asked for as KVT_AUTO): where KVT_EXPECT_ODIRECT=1 says the
 * file system takes it (CI sets it), the file must have been opened with
 * it; elsewhere a buffered file is reported as the skipped part "direct".
 * Registered buffers the kernel refuses are the skipped part
 * "registered-buffers".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common.h"
#include "pager/nvme.h"

#define PG	4096u
#define N	64u		/* pages written and read per round */
#define RUN	48u		/* pages [0, RUN) sit at adjacent offsets */
#define FILE_PAGES 256u
#define MAX_IO	(16u * PG)
#define SLOTS	(4u * N)	/* buffer slots in the region */

static unsigned ndone[2 * N + 8];

static void on_done(void *arg, struct kvt_io *io)
{
	unsigned *cnt = arg;

	(*cnt)++;
	ndone[(uintptr_t)io->user]++;
}

static uint64_t word(unsigned round, unsigned page, unsigned i)
{
	uint64_t x = (uint64_t)round << 48 ^ (uint64_t)page << 32 ^ i;

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	return x ^ (x >> 32);
}

static void fill(void *buf, unsigned round, unsigned page)
{
	uint64_t *w = buf;

	for (unsigned i = 0; i < PG / 8; i++)
		w[i] = word(round, page, i);
}

static int same(const void *buf, unsigned round, unsigned page)
{
	const uint64_t *w = buf;

	for (unsigned i = 0; i < PG / 8; i++)
		if (w[i] != word(round, page, i))
			return 0;
	return 1;
}

/* File page of logical page p: [0, RUN) adjacent, the rest scattered. */
static uint64_t off_of(unsigned p)
{
	return (p < RUN ? p : 100 + (p - RUN) * 3) * (uint64_t)PG;
}

/* A permutation of [0, N) from a seed. */
static void shuffle(unsigned *perm, unsigned seed)
{
	for (unsigned i = 0; i < N; i++)
		perm[i] = i;
	for (unsigned i = N - 1; i > 0; i--) {
		seed = seed * 1103515245u + 12345u;
		unsigned j = (seed >> 8) % (i + 1), t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
}

static void run_checked(struct kvt_nvme *n, struct kvt_io *io, unsigned cnt_req)
{
	unsigned cnt = 0;

	memset(ndone, 0, sizeof(ndone));
	CHECK_EQ(kvt_nvme_run(n, io, cnt_req, on_done, &cnt), 0);
	CHECK_EQ(cnt, cnt_req);
	for (unsigned i = 0; i < cnt_req; i++)
		CHECK_EQ(ndone[(uintptr_t)io[i].user], 1);
}

/* A run fed through more(): it starts with 4 reads and is given the rest of
 * the N pages 6 at a time, with nothing on every third call; one chunk
 * writes a page no earlier request touches and reads it back (kept in
 * order among themselves). */
struct feed {
	struct kvt_io *io;
	unsigned next, added, calls, done, done_at_first, added_at_first;
	uint8_t *rd;
	unsigned round;
};

static void feed_done(void *arg, struct kvt_io *io)
{
	struct feed *f = arg;

	f->done++;
	ndone[(uintptr_t)io->user]++;
}

static unsigned feed_more(void *arg, struct kvt_io *more, unsigned room)
{
	struct feed *f = arg;
	unsigned k = 0;

	if (f->calls++ == 0) {
		f->done_at_first = f->done;
		f->added_at_first = f->added;
	}
	/* Nothing now, while some are in flight: asked again after a reap. */
	if ((f->calls % 3 == 0 && f->done < f->added) || f->next == N)
		return 0;
	if (f->next == 10) {		/* file page 200 written, then read back */
		fill(f->rd + (size_t)(N + 1) * PG, f->round + 500, 200);
		more[k++] = (struct kvt_io){ .off = 200 * PG, .buf = f->rd + (size_t)(N + 1) * PG,
					     .len = PG, .op = KVT_IO_WRITE,
					     .user = (void *)(uintptr_t)N };
		more[k++] = (struct kvt_io){ .off = 200 * PG, .buf = f->rd + (size_t)N * PG,
					     .len = PG, .op = KVT_IO_READ,
					     .user = (void *)(uintptr_t)(N + 1) };
	}
	while (k < 6 && k < room && f->next < N) {
		unsigned p = f->next++;

		more[k++] = (struct kvt_io){ .off = off_of(p), .buf = f->rd + (size_t)p * PG,
					     .len = PG, .op = KVT_IO_READ, .res = 1,
					     .user = (void *)(uintptr_t)(N + 2 + p) };
	}
	f->added += k;
	return k;
}

static void fed_run(struct kvt_nvme *n, uint8_t *region, unsigned round)
{
	static struct kvt_io io[2 * N];
	uint8_t *rd = region + (size_t)2 * N * PG;
	struct feed f = { .io = io, .rd = rd, .round = round };

	memset(ndone, 0, sizeof(ndone));
	memset(rd, 0xa5, (size_t)(N + 2) * PG);
	for (f.next = 0; f.next < 4; f.next++)
		io[f.next] = (struct kvt_io){ .off = off_of(f.next),
			.buf = rd + (size_t)f.next * PG, .len = PG, .op = KVT_IO_READ,
			.user = (void *)(uintptr_t)(N + 2 + f.next) };
	f.added = 4;
	CHECK_EQ(kvt_nvme_run_more(n, io, 4, 2 * N, feed_done, feed_more, &f), 0);
	/* First asked with all 4 started (one op) and, with room for another
	 * op, none complete yet: in flight. At depth 1, only once that op is
	 * done, but still before its requests are told: the ring gets its
	 * next op before the callbacks run. */
	CHECK_EQ(f.added_at_first, 4);
	CHECK_EQ(f.done_at_first, 0);
	CHECK_EQ(f.next, N);
	CHECK_EQ(f.done, N + 2);
	for (unsigned i = 0; i < N + 2; i++)
		CHECK_EQ(ndone[i < N ? N + 2 + i : i], 1);
	for (unsigned i = 0; i < N + 2; i++)
		CHECK_EQ(io[i].res, 0);
	for (unsigned p = 0; p < N; p++)
		CHECK(same(rd + (size_t)p * PG, round, p));
	CHECK(same(rd + (size_t)N * PG, round + 500, 200));	/* the write came first */
	/* A cap below what is queued, and a missing array, are refused. */
	CHECK_EQ(kvt_nvme_run_more(n, io, 4, 3, NULL, NULL, NULL), -EINVAL);
	CHECK_EQ(kvt_nvme_run_more(n, NULL, 0, 4, NULL, feed_more, &f), -EINVAL);
}

static void round_trip(struct kvt_nvme *n, uint8_t *region, unsigned round)
{
	struct kvt_io io[N];
	unsigned perm[N];
	struct kvt_nvme_info a, b;

	/* Writes: slots [0, 32) follow the pages (contiguous buffers), pages
	 * [32, 48) take scattered slots (one vectored op), the last 16 are at
	 * scattered offsets (one op each). */
	shuffle(perm, round * 7 + 1);
	for (unsigned i = 0; i < N; i++) {
		unsigned p = perm[i];
		unsigned slot = p < 32 ? p : N + ((p - 32) * 5) % 32 * 2;

		fill(region + (size_t)slot * PG, round, p);
		io[i] = (struct kvt_io){ .off = off_of(p), .buf = region + (size_t)slot * PG,
					 .len = PG, .op = KVT_IO_WRITE, .res = 1,
					 .user = (void *)(uintptr_t)i };
	}
	kvt_nvme_info(n, &a);
	run_checked(n, io, N);
	kvt_nvme_info(n, &b);
	for (unsigned i = 0; i < N; i++)
		CHECK_EQ(io[i].res, 0);
	/* 48 adjacent pages in 64 KiB ops: 3 (2 contiguous, 1 vectored),
	 * plus 16 singles. */
	CHECK_EQ(b.ops - a.ops, RUN / 16 + (N - RUN));
	CHECK_EQ(b.reqs - a.reqs, N);
	CHECK_EQ(b.short_ios, a.short_ios);

	/* Reads into other slots: [0, 16) contiguous, [16, 48) in reverse
	 * (adjacent offsets, buffers going down: vectored), the rest
	 * contiguous slots but scattered offsets. */
	uint8_t *rd = region + (size_t)2 * N * PG;

	memset(rd, 0xa5, (size_t)2 * N * PG);
	shuffle(perm, round * 13 + 5);
	for (unsigned i = 0; i < N; i++) {
		unsigned p = perm[i];
		unsigned slot = p < 16 ? p : p < RUN ? 16 + (RUN - 1 - p) : p;

		io[i] = (struct kvt_io){ .off = off_of(p), .buf = rd + (size_t)slot * PG,
					 .len = PG, .op = KVT_IO_READ, .res = 1,
					 .user = (void *)(uintptr_t)i };
	}
	kvt_nvme_info(n, &a);
	run_checked(n, io, N);
	kvt_nvme_info(n, &b);
	for (unsigned i = 0; i < N; i++) {
		CHECK_EQ(io[i].res, 0);
		CHECK(io[i].lat_ns > 0);
		CHECK(same(io[i].buf, round, perm[i]));
	}
	CHECK(b.ops - a.ops < N);
	CHECK_EQ(b.ops - a.ops, RUN / 16 + (N - RUN));
	/* The queue depth while busy: at least one op, at most the limit
	 * (exactly one at depth 1). */
	uint64_t busy = b.busy_ns - a.busy_ns, depth = b.depth_ns - a.depth_ns;
	CHECK(busy > 0);
	CHECK(depth >= busy && depth <= (uint64_t)b.depth_limit * busy);
	if (b.depth_limit == 1)
		CHECK_EQ(depth, busy);
	fed_run(n, region, round);

	/* Mixed, with overlapping pairs: page 0 is rewritten then read (the
	 * read must see the new data), page 1 read then rewritten (the read
	 * sees the old), page 2 written twice (the second wins). */
	uint8_t *w0 = rd, *r0 = rd + PG, *r1 = rd + 2 * PG, *w1 = rd + 3 * PG;
	uint8_t *w2a = rd + 4 * PG, *w2b = rd + 5 * PG, *r2 = rd + 6 * PG;

	fill(w0, round + 100, 0);
	fill(w1, round + 100, 1);
	fill(w2a, round + 200, 2);
	fill(w2b, round + 100, 2);
	struct kvt_io mix[] = {
		{ .off = off_of(0), .buf = w0, .len = PG, .op = KVT_IO_WRITE, .user = (void *)0 },
		{ .off = off_of(1), .buf = r1, .len = PG, .op = KVT_IO_READ, .user = (void *)1 },
		{ .off = off_of(2), .buf = w2a, .len = PG, .op = KVT_IO_WRITE, .user = (void *)2 },
		{ .off = off_of(0), .buf = r0, .len = PG, .op = KVT_IO_READ, .user = (void *)3 },
		{ .off = off_of(1), .buf = w1, .len = PG, .op = KVT_IO_WRITE, .user = (void *)4 },
		{ .off = off_of(2), .buf = w2b, .len = PG, .op = KVT_IO_WRITE, .user = (void *)5 },
		{ .off = off_of(60), .buf = r2, .len = PG, .op = KVT_IO_READ, .user = (void *)6 },
	};
	unsigned nmix = sizeof(mix) / sizeof(mix[0]);

	run_checked(n, mix, nmix);
	for (unsigned i = 0; i < nmix; i++)
		CHECK_EQ(mix[i].res, 0);
	CHECK(same(r0, round + 100, 0));
	CHECK(same(r1, round, 1));
	CHECK(same(r2, round, 60));
	struct kvt_io chk = { .off = off_of(2), .buf = r2, .len = PG, .op = KVT_IO_READ };

	CHECK_EQ(kvt_nvme_run(n, &chk, 1, NULL, NULL), 0);	/* done may be NULL */
	CHECK_EQ(chk.res, 0);
	CHECK(same(r2, round + 100, 2));

	/* Overlapping in memory: one buffer written out, then read into (a
	 * frame reused within a batch), and the other way round. */
	uint8_t *x = rd + 8 * PG, *y = rd + 9 * PG;

	fill(x, round + 300, 30);
	struct kvt_io swap1[] = {
		{ .off = off_of(30), .buf = x, .len = PG, .op = KVT_IO_WRITE, .user = (void *)0 },
		{ .off = off_of(31), .buf = x, .len = PG, .op = KVT_IO_READ, .user = (void *)1 },
	};
	run_checked(n, swap1, 2);
	CHECK_EQ(swap1[0].res, 0);
	CHECK_EQ(swap1[1].res, 0);
	CHECK(same(x, round, 31));
	struct kvt_io swap2[] = {
		{ .off = off_of(32), .buf = x, .len = PG, .op = KVT_IO_READ, .user = (void *)0 },
		{ .off = off_of(33), .buf = x, .len = PG, .op = KVT_IO_WRITE, .user = (void *)1 },
		{ .off = off_of(30), .buf = y, .len = PG, .op = KVT_IO_READ, .user = (void *)2 },
	};
	run_checked(n, swap2, 3);
	for (unsigned i = 0; i < 3; i++)
		CHECK_EQ(swap2[i].res, 0);
	CHECK(same(y, round + 300, 30));	/* swap1's write took x before the read */
	chk = (struct kvt_io){ .off = off_of(33), .buf = y, .len = PG, .op = KVT_IO_READ };
	CHECK_EQ(kvt_nvme_run(n, &chk, 1, NULL, NULL), 0);
	CHECK_EQ(chk.res, 0);
	CHECK(same(y, round, 32));		/* swap2's write saw the read's data */

	/* No I/O: past the end, unknown op, empty. */
	struct kvt_io bad[] = {
		{ .off = (uint64_t)FILE_PAGES * PG, .buf = r2, .len = PG, .op = KVT_IO_READ, .res = 1, .user = (void *)0 },
		{ .off = 0, .buf = r2, .len = PG, .op = 7, .res = 1, .user = (void *)1 },
		{ .off = 0, .buf = r2, .len = 0, .op = KVT_IO_WRITE, .res = 1, .user = (void *)2 },
		{ .off = UINT64_MAX - 100, .buf = r2, .len = PG, .op = KVT_IO_WRITE, .res = 1, .user = (void *)3 },
	};
	run_checked(n, bad, 4);
	CHECK_EQ(bad[0].res, -EINVAL);
	CHECK_EQ(bad[1].res, -EINVAL);
	CHECK_EQ(bad[2].res, 0);
	CHECK_EQ(bad[3].res, -EINVAL);
	CHECK_EQ(kvt_nvme_run(n, NULL, 0, NULL, NULL), 0);
}

struct kicker {
	struct kvt_nvme *n;
	int stop;
	unsigned kicks;
};

static void *kick_loop(void *arg)
{
	struct kicker *k = arg;

	while (!__atomic_load_n(&k->stop, __ATOMIC_ACQUIRE)) {
		kvt_nvme_kick(k->n);
		k->kicks++;
		usleep(50);
	}
	return NULL;
}

int main(void)
{
	const char *dir = getenv("KVT_TEST_DIR");
	struct kvt_nvme_opts o = {
		.path = dir ? dir : "", .bytes = (uint64_t)FILE_PAGES * PG,
		.direct = KVT_AUTO, .depth = 8, .max_io = MAX_IO, .log = t_log,
	};
	struct kvt_nvme_info info;
	struct kvt_nvme *n;
	uint8_t *region;
	size_t rbytes = (size_t)SLOTS * PG;
	int r;

	r = kvt_nvme_open(&o, &n);
	if (r == -ENOSYS || r == -EPERM)
		SKIP("io_uring unavailable: %s", strerror(-r));
	CHECK_EQ(r, 0);
	kvt_nvme_info(n, &info);
	fprintf(stderr, "direct %d, registered files %d, notes: %s\n", info.direct,
		info.registered_files, info.notes);
	if (!info.direct) {
		const char *want = getenv("KVT_EXPECT_ODIRECT");

		if (want && !strcmp(want, "1")) {
			fprintf(stderr, "O_DIRECT not engaged on %s, and KVT_EXPECT_ODIRECT=1 "
				"says it should be: %s\n", o.path, info.notes);
			exit(1);
		}
		t_skip_part("direct", "buffered I/O on %s: %s", o.path, info.notes);
	}
	CHECK_EQ(info.bytes, (uint64_t)FILE_PAGES * PG);
	CHECK(kvt_nvme_fd(n) >= 0);
	CHECK(posix_memalign((void **)&region, 2u << 20, rbytes) == 0);

	round_trip(n, region, 1);

	r = kvt_nvme_register_buffers(n, region, rbytes);
	kvt_nvme_info(n, &info);
	if (r) {
		t_skip_part("registered-buffers", "refused (%s): %s", strerror(-r), info.notes);
		CHECK(info.notes[0]);
		CHECK_EQ(info.registered_buffers, 0);
	} else {
		CHECK_EQ(info.registered_buffers, 1);
		round_trip(n, region, 2);
		/* A buffer outside the registered region still works (plain op). */
		uint8_t *other;

		CHECK(posix_memalign((void **)&other, PG, PG) == 0);
		fill(other, 3, 9);
		struct kvt_io w = { .off = 9 * PG, .buf = other, .len = PG, .op = KVT_IO_WRITE };

		CHECK_EQ(kvt_nvme_run(n, &w, 1, NULL, NULL), 0);
		CHECK_EQ(w.res, 0);
		memset(other, 0, PG);
		w.op = KVT_IO_READ;
		CHECK_EQ(kvt_nvme_run(n, &w, 1, NULL, NULL), 0);
		CHECK_EQ(w.res, 0);
		CHECK(same(other, 3, 9));
		free(other);
		CHECK_EQ(kvt_nvme_register_buffers(n, NULL, 0), 0);
		kvt_nvme_info(n, &info);
		CHECK_EQ(info.registered_buffers, 0);
	}

	/* Depth 1 still runs everything. */
	CHECK_EQ(kvt_nvme_set_depth(n, 1), 0);
	round_trip(n, region, 4);
	CHECK_EQ(kvt_nvme_set_depth(n, 9), -EINVAL);

	/* Kicks. Between runs they leave completions of the kick's poll in
	 * the ring, which the next run (with or without more) must take for
	 * what they are: not an op, so results and the depth accounting
	 * (checked in round_trip) stay right. During runs, from another
	 * thread, they wake the waits; every run still ends with its data. */
	kvt_nvme_kick(n);
	kvt_nvme_kick(n);
	round_trip(n, region, 5);
	CHECK_EQ(kvt_nvme_set_depth(n, 8), 0);
	kvt_nvme_kick(n);
	round_trip(n, region, 6);
	struct kicker k = { .n = n };
	pthread_t th;

	CHECK_EQ(pthread_create(&th, NULL, kick_loop, &k), 0);
	for (unsigned i = 0; i < 8; i++) {
		CHECK_EQ(kvt_nvme_set_depth(n, i % 2 ? 8 : 1), 0);
		round_trip(n, region, 7 + i);
	}
	__atomic_store_n(&k.stop, 1, __ATOMIC_RELEASE);
	CHECK_EQ(pthread_join(th, NULL), 0);
	/* The runs saw the kicks through their poll, which the kernel took. */
	kvt_nvme_info(n, &info);
	fprintf(stderr, "%u kicks, %llu seen by the runs\n", k.kicks,
		(unsigned long long)info.kicks);
	CHECK(info.kicks > 0 && info.kicks <= k.kicks + 3);
	CHECK(!strstr(info.notes, "kick"));

	kvt_nvme_close(n);
	free(region);
	return 0;
}
