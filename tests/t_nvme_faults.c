/* SPDX-License-Identifier: MIT */
/*
 * The NVMe path's fault injection, one kind at a time: EIO on reads and
 * writes, ENOSPC on writes only, short reads (retried: data still right,
 * short_ios counted), a flipped bit (exactly one, only with the fault),
 * slow completions (latency at least slow_us). Clearing the faults
 * restores clean I/O.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "pager/nvme.h"

#define PG	4096u
#define N	32u
#define SLOW_US	20000u

static uint8_t *wbuf, *rbuf;	/* (N, PG) each */

static uint8_t byte_of(unsigned page, unsigned i)
{
	return (uint8_t)(page * 131u + i * 7u + (i >> 8));
}

/* Requests for pages [0, cnt): page p at page offset p (adjacent, so
 * merged where the op allows) or N + 2p (never merged). */
static void reqs(struct kvt_io *io, unsigned cnt, int op, int spread)
{
	for (unsigned p = 0; p < cnt; p++)
		io[p] = (struct kvt_io){
			.off = (uint64_t)(spread ? N + 2 * p : p) * PG,
			.buf = (op == KVT_IO_READ ? rbuf : wbuf) + (size_t)p * PG,
			.len = PG, .op = (uint8_t)op, .res = 1,
		};
}

static void run(struct kvt_nvme *n, struct kvt_io *io, unsigned cnt)
{
	CHECK_EQ(kvt_nvme_run(n, io, cnt, NULL, NULL), 0);
}

static unsigned bits_differ(unsigned p)
{
	unsigned d = 0;

	for (unsigned i = 0; i < PG; i++)
		d += (unsigned)__builtin_popcount(rbuf[(size_t)p * PG + i] ^ byte_of(p, i));
	return d;
}

/* Write the reference contents (both layouts), no faults. */
static void write_ref(struct kvt_nvme *n)
{
	struct kvt_io io[N];

	for (int spread = 0; spread < 2; spread++) {
		reqs(io, N, KVT_IO_WRITE, spread);
		run(n, io, N);
		for (unsigned p = 0; p < N; p++)
			CHECK_EQ(io[p].res, 0);
	}
}

int main(void)
{
	const char *dir = getenv("KVT_TEST_DIR");
	struct kvt_nvme_opts o = {
		.path = dir ? dir : "", .bytes = (uint64_t)3 * N * PG,
		.direct = KVT_AUTO, .depth = 4, .max_io = 8 * PG, .log = t_log,
	};
	struct kvt_nvme_info a, b;
	struct kvt_io io[N];
	struct kvt_nvme *n;
	struct kvt_fault f;
	int r;

	r = kvt_nvme_open(&o, &n);
	if (r == -ENOSYS || r == -EPERM)
		SKIP("io_uring unavailable: %s", strerror(-r));
	CHECK_EQ(r, 0);
	CHECK(posix_memalign((void **)&wbuf, PG, (size_t)N * PG) == 0);
	CHECK(posix_memalign((void **)&rbuf, PG, (size_t)N * PG) == 0);
	for (unsigned p = 0; p < N; p++)
		for (unsigned i = 0; i < PG; i++)
			wbuf[(size_t)p * PG + i] = byte_of(p, i);
	write_ref(n);

	/* EIO: every request of both kinds, then every second one. */
	f = (struct kvt_fault){ .eio_every = 1 };
	kvt_nvme_set_fault(n, &f);
	reqs(io, N, KVT_IO_READ, 0);
	run(n, io, N);
	for (unsigned p = 0; p < N; p++)
		CHECK_EQ(io[p].res, -EIO);
	reqs(io, 4, KVT_IO_WRITE, 1);
	run(n, io, 4);
	for (unsigned p = 0; p < 4; p++)
		CHECK_EQ(io[p].res, -EIO);
	f.eio_every = 2;
	kvt_nvme_set_fault(n, &f);
	reqs(io, N, KVT_IO_READ, 1);
	run(n, io, N);
	unsigned eio = 0;

	for (unsigned p = 0; p < N; p++) {
		CHECK(io[p].res == 0 || io[p].res == -EIO);
		eio += io[p].res == -EIO;
	}
	CHECK_EQ(eio, N / 2);

	/* ENOSPC: writes only. */
	f = (struct kvt_fault){ .enospc_every = 1 };
	kvt_nvme_set_fault(n, &f);
	reqs(io, N, KVT_IO_WRITE, 0);
	run(n, io, N);
	for (unsigned p = 0; p < N; p++)
		CHECK_EQ(io[p].res, -ENOSPC);
	reqs(io, N, KVT_IO_READ, 0);
	memset(rbuf, 0, (size_t)N * PG);
	run(n, io, N);
	for (unsigned p = 0; p < N; p++) {
		CHECK_EQ(io[p].res, 0);
		CHECK_EQ(bits_differ(p), 0);
	}

	/* Short reads: merged (adjacent) and single, every one and every third. */
	for (unsigned every = 1; every <= 3; every += 2)
		for (int spread = 0; spread < 2; spread++) {
			f = (struct kvt_fault){ .short_every = every };
			kvt_nvme_set_fault(n, &f);
			kvt_nvme_info(n, &a);
			reqs(io, N, KVT_IO_READ, spread);
			memset(rbuf, 0, (size_t)N * PG);
			run(n, io, N);
			kvt_nvme_info(n, &b);
			for (unsigned p = 0; p < N; p++) {
				CHECK_EQ(io[p].res, 0);
				CHECK_EQ(bits_differ(p), 0);
			}
			CHECK(b.short_ios > a.short_ios);
			if (spread)	/* one request per op: one retry per hit */
				CHECK_EQ(b.short_ios - a.short_ios, N / every);
		}
	/* Writes are never cut short. */
	kvt_nvme_info(n, &a);
	write_ref(n);
	kvt_nvme_info(n, &b);
	CHECK_EQ(b.short_ios, a.short_ios);

	/* Flip: exactly one bit in each read, none on writes. */
	f = (struct kvt_fault){ .flip_every = 1 };
	kvt_nvme_set_fault(n, &f);
	write_ref(n);
	reqs(io, N, KVT_IO_READ, 0);
	memset(rbuf, 0, (size_t)N * PG);
	run(n, io, N);
	for (unsigned p = 0; p < N; p++) {
		CHECK_EQ(io[p].res, 0);
		CHECK_EQ(bits_differ(p), 1);
	}

	/* Requests that do no I/O get no faults (and no division by len 0). */
	f = (struct kvt_fault){ .flip_every = 1, .eio_every = 1 };
	kvt_nvme_set_fault(n, &f);
	memset(rbuf, 0x33, PG);
	struct kvt_io noio[] = {
		{ .off = 0, .buf = rbuf, .len = 0, .op = KVT_IO_READ, .res = 1 },
		{ .off = 0, .buf = rbuf, .len = PG, .op = 9, .res = 1 },
		{ .off = (uint64_t)3 * N * PG, .buf = rbuf, .len = PG, .op = KVT_IO_READ, .res = 1 },
	};
	run(n, noio, 3);
	CHECK_EQ(noio[0].res, 0);
	CHECK_EQ(noio[1].res, -EINVAL);
	CHECK_EQ(noio[2].res, -EINVAL);
	for (unsigned i = 0; i < PG; i++)
		CHECK_EQ(rbuf[i], 0x33);

	/* Slow: every completion waits slow_us first. */
	f = (struct kvt_fault){ .slow_us = SLOW_US };
	kvt_nvme_set_fault(n, &f);
	reqs(io, 3, KVT_IO_READ, 1);
	run(n, io, 3);
	for (unsigned p = 0; p < 3; p++) {
		CHECK_EQ(io[p].res, 0);
		CHECK(io[p].lat_ns >= (uint64_t)SLOW_US * 1000);
	}

	/* Cleared: clean again. */
	kvt_nvme_set_fault(n, NULL);
	reqs(io, N, KVT_IO_READ, 1);
	memset(rbuf, 0, (size_t)N * PG);
	run(n, io, N);
	for (unsigned p = 0; p < N; p++) {
		CHECK_EQ(io[p].res, 0);
		CHECK_EQ(bits_differ(p), 0);
	}

	kvt_nvme_close(n);
	free(wbuf);
	free(rbuf);
	return 0;
}
