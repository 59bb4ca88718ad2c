/* SPDX-License-Identifier: MIT */
/*
 * The NVMe tier's I/O path (contract in nvme.h).
 *
 * Open: the file is always created (or the device opened) without
 * O_DIRECT, which is then switched on with fcntl(F_SETFL). Opening with
 * O_CREAT|O_DIRECT on a file system without direct I/O (ramfs, tmpfs
 * before Linux 6.6) fails with EINVAL only after creating the file, so the
 * create-then-switch order is what lets a failure leave nothing behind.
 *
 * Run: the caller's array is taken in windows of caller order (a window
 * ends before a request whose order against an earlier one of the window
 * matters: overlapping in the file, one of the two a write, or in memory,
 * one of the two a read). A window [s, e) is sorted by (op, off, index)
 * into ents[s, e) without moving the caller's array, cut into ops (runs
 * of adjacent offsets up to max_io, one contiguous or registered buffer,
 * else an iovec per buffer run) and driven through the ring with at most
 * depth_limit ops in flight. A window cut short by such a pair is drained
 * before the next starts, so overlapping requests complete in caller
 * order. Requests the caller adds through its more() hook, once every
 * earlier one has started, form new windows that start at once, the ops
 * before them still in flight: that is what keeps the queue full from one
 * of the caller's batches to the next.
 *
 * Each op in flight owns one slot of ops[] (depth of them, made at open);
 * a slot's iovec array is allocated on its first vectored op and kept, so
 * iovecs live until their completion and steady-state runs allocate
 * nothing. No locks: one thread at a time (nvme.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <poll.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <linux/fs.h>
#include <liburing.h>

#include "pager/nvme.h"

#define SZ_4K		4096u
#define SZ_1M		((uint64_t)1 << 20)
#define CHUNK_MAX	((uint64_t)1 << 30)	/* largest registered buffer */
#define MAX_DEPTH	4096u
#define CQE_BATCH	64u
#define TMP_TRIES	100
#define OP_BAD		2u			/* ent.op of a request that needs no I/O */

#define unlikely(x)	__builtin_expect(!!(x), 0)

/* One request of the run, in sort order within its window. */
struct ent {
	uint64_t off;
	uint32_t idx;		/* index into the caller's array */
	uint32_t op;		/* enum kvt_io_op, or OP_BAD */
};

/* A request's buffer, for the memory side of the conflict check. */
struct span {
	uintptr_t start, end;
	uint32_t op;
};

/* One op: a run of requests submitted as one SQE (and its retries). */
struct op {
	struct op *next_free;
	uint64_t off;		/* file offset of the next attempt */
	char	*buf;		/* contiguous op: buffer of the next attempt */
	struct iovec *iov;	/* vectored op: first iovec not yet done */
	struct iovec *iov_store;/* (iov_max) iovecs, or NULL until first needed */
	uint64_t t0;		/* first submission, CLOCK_MONOTONIC ns */
	uint32_t left;		/* bytes still to transfer */
	uint32_t total;
	unsigned niov;		/* iovecs left from iov (vectored op) */
	unsigned first, count;	/* its requests: ents[first, first + count) */
	int	 buf_index;	/* registered buffer of a contiguous op, or -1 */
	uint8_t	 rw;		/* enum kvt_io_op */
	uint8_t	 vec;		/* 1: readv/writev over iov */
	uint8_t	 retried;	/* a short completion was retried: no more injected shorts */
	uint8_t	 zero;		/* zero-byte completions in a row */
	uint8_t	 busy;		/* in flight (not on the free list) */
};

/* An op that completed, its requests not told yet. */
struct done {
	unsigned first, count;	/* ents[first, first + count) */
	int	 res;
	uint64_t lat;
};

struct kvt_nvme {
	int	 fd;
	int	 sqe_fd;		/* what SQEs name: 0 (registered index) or fd */
	uint8_t	 sqe_flags;		/* IOSQE_FIXED_FILE or 0 */
	int	 ring_ok;		/* ring is set up (and must be torn down) */
	int	 broken;		/* -errno once the ring failed; sticky */
	int	 unlink_at_close;	/* info.path is ours and still exists */
	struct io_uring ring;

	uint64_t max_io;
	unsigned iov_max;		/* iovecs in one vectored op */
	uint32_t short_align;		/* injected short reads keep a multiple of it */

	char	*buf_base;		/* registered buffers: [buf_base, +buf_bytes) */
	size_t	 buf_bytes;		/* in CHUNK_MAX pieces, index = offset / CHUNK_MAX */

	struct ent *ents;		/* (ents_cap) the run's windows, each sorted */
	struct span *spans;		/* (ents_cap) a window's buffers, by address */
	unsigned ents_cap;
	struct op *ops;			/* (info.depth) op slots */
	struct op *free;		/* free slots */
	unsigned inflight;		/* slots in use */
	uint64_t depth_t;		/* when inflight last changed */
	struct done *dq;		/* (info.depth) ops reaped, requests not told */
	unsigned ndq;
	int	 kick_fd;		/* eventfd kvt_nvme_kick writes, or -1 */
	uint8_t	 kick_armed;		/* a poll on it is in the ring */
	uint8_t	 kick_off;		/* the poll failed: runs do without */
	unsigned win_end;		/* end of the window being started */

	/* The current run (valid inside kvt_nvme_run only). */
	struct kvt_io *reqs;
	void	(*done)(void *arg, struct kvt_io *io);
	void	*done_arg;

	int	 fault_on;		/* any field of fault set: the one branch */
	struct kvt_fault fault;
	unsigned eio_n, short_n, enospc_n, flip_n;	/* requests seen per kind */

	kvt_log_fn log;
	void	*log_arg;
	struct kvt_nvme_info info;	/* bytes, path, notes, counters */
};

/* Append one "; "-separated entry to info.notes; silently truncated. */
static void note(struct kvt_nvme *n, const char *fmt, ...)
{
	char *s = n->info.notes;
	size_t len = strlen(s);
	va_list ap;

	if (len + 3 >= sizeof(n->info.notes))
		return;
	if (len) {
		memcpy(s + len, "; ", 3);
		len += 2;
	}
	va_start(ap, fmt);
	vsnprintf(s + len, sizeof(n->info.notes) - len, fmt, ap);
	va_end(ap);
}

static void logf_(struct kvt_nvme *n, int level, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (!n->log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	n->log(n->log_arg, level, msg);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------- open */

/* Size a new file: fallocate, or ftruncate (sparse) where the file system
 * has no fallocate. Returns 0 or -errno. */
static int preallocate(struct kvt_nvme *n, uint64_t bytes)
{
	if (fallocate(n->fd, 0, 0, (off_t)bytes) == 0)
		return 0;
	if (errno != EOPNOTSUPP && errno != ENOSYS)
		return -errno;
	if (ftruncate(n->fd, (off_t)bytes))
		return -errno;
	note(n, "fallocate unsupported here: file is sparse");
	return 0;
}

/* Create path O_EXCL; close removes it. Returns 0 or -errno (-EEXIST when
 * anything is there, -ENOENT without the parent directory). */
static int open_new(struct kvt_nvme *n, const char *path, uint64_t bytes)
{
	if (!bytes)
		return -EINVAL;
	if (snprintf(n->info.path, sizeof(n->info.path), "%s", path) >=
	    (int)sizeof(n->info.path))
		return -ENAMETOOLONG;
	n->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (n->fd < 0)
		return -errno;
	n->info.created = 1;
	n->unlink_at_close = 1;
	return preallocate(n, bytes);
}

/* Create a file with a fresh name in dir and unlink it at once: it lives
 * as long as the descriptor. Returns 0 or -errno. */
static int open_tmp(struct kvt_nvme *n, const char *dir, uint64_t bytes)
{
	static const char abc[] = "abcdefghijklmnopqrstuvwxyz"
				  "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	static unsigned seq;	/* only varies the names; races are harmless */
	char *p = n->info.path;
	size_t len;
	int i, j;

	if (!bytes)
		return -EINVAL;
	len = (size_t)snprintf(p, sizeof(n->info.path), "%s%skvt-nvme-XXXXXXXX", dir,
			       dir[strlen(dir) - 1] == '/' ? "" : "/");
	if (len >= sizeof(n->info.path))
		return -ENAMETOOLONG;
	for (i = 0; i < TMP_TRIES; i++) {
		uint64_t x = now_ns() ^ ((uint64_t)getpid() << 32) ^
			     ((uint64_t)__atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED) << 20);

		for (j = 0; j < 8; j++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			p[len - 8 + j] = abc[(x >> 33) % (sizeof(abc) - 1)];
		}
		n->fd = open(p, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (n->fd >= 0 || errno != EEXIST)
			break;
	}
	if (n->fd < 0)
		return -errno;
	n->info.created = 1;
	n->unlink_at_close = 1;		/* until the unlink below succeeds */
	if (unlink(p))
		return -errno;
	n->unlink_at_close = 0;
	return preallocate(n, bytes);
}

/* Open a block device (O_EXCL: refused while mounted or claimed). */
static int open_blk(struct kvt_nvme *n, const char *path, uint64_t bytes)
{
	uint64_t size;

	if (snprintf(n->info.path, sizeof(n->info.path), "%s", path) >=
	    (int)sizeof(n->info.path))
		return -ENAMETOOLONG;
	n->fd = open(path, O_RDWR | O_EXCL | O_CLOEXEC);
	if (n->fd < 0)
		return -errno;
	if (ioctl(n->fd, BLKGETSIZE64, &size))
		return -errno;
	if (!bytes || bytes > size)
		bytes = size;
	bytes &= ~(uint64_t)(SZ_4K - 1);
	if (!bytes)
		return -ENOSPC;
	n->info.bytes = bytes;
	return 0;
}

/* Pick the kind of target from what path names (see nvme.h). */
static int open_target(struct kvt_nvme *n, const struct kvt_nvme_opts *o)
{
	const char *path = o->path;
	struct stat st;
	size_t len;

	n->info.bytes = o->bytes;
	if (!path || !path[0]) {
		path = getenv("TMPDIR");
		if (!path || !path[0])
			path = "/tmp";
		if (stat(path, &st))
			return -errno;
		if (!S_ISDIR(st.st_mode))
			return -ENOTDIR;
		return open_tmp(n, path, o->bytes);
	}
	if (stat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			return open_tmp(n, path, o->bytes);
		if (S_ISBLK(st.st_mode))
			return open_blk(n, path, o->bytes);
		if (S_ISREG(st.st_mode))
			return -EEXIST;
		return -EINVAL;
	}
	if (errno != ENOENT)
		return -errno;
	len = strlen(path);
	if (path[len - 1] == '/')	/* meant a directory that is not there */
		return -ENOENT;
	return open_new(n, path, o->bytes);
}

/* The file offset alignment O_DIRECT needs here (a power of two). Only
 * injected short reads use it, to cut where a real retry may start; when
 * unknown, the 4 KiB the contract asks of every request. */
static uint32_t dio_align(int fd)
{
	uint32_t a = 0;
#ifdef STATX_DIOALIGN
	struct statx sx;

	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
	    (sx.stx_mask & STATX_DIOALIGN))
		a = sx.stx_dio_offset_align > sx.stx_dio_mem_align ?
		    sx.stx_dio_offset_align : sx.stx_dio_mem_align;
#endif
	if (!a) {
		int ss;

		if (ioctl(fd, BLKSSZGET, &ss) == 0 && ss > 0)
			a = (uint32_t)ss;
	}
	return a && !(a & (a - 1)) && a <= SZ_4K ? a : SZ_4K;
}

/* Switch O_DIRECT on per mode (enum kvt_tristate). EINVAL from F_SETFL
 * means the file system has no direct I/O: AUTO falls back to buffered. */
static int set_direct(struct kvt_nvme *n, int mode)
{
	int fl;

	if (mode == KVT_OFF) {
		n->short_align = 1;
		return 0;
	}
	fl = fcntl(n->fd, F_GETFL);
	if (fl < 0)
		return -errno;
	if (fcntl(n->fd, F_SETFL, fl | O_DIRECT) == 0) {
		n->info.direct = 1;
		n->short_align = dio_align(n->fd);
		return 0;
	}
	if (errno != EINVAL)
		return -errno;
	if (mode == KVT_ON)
		return -EINVAL;
	n->short_align = 1;
	note(n, "O_DIRECT refused by the file system (EINVAL): buffered I/O");
	logf_(n, KVT_LOG_WARN, "nvme: %s: no O_DIRECT on this file system; "
	      "using buffered I/O (page cache)", n->info.path);
	return 0;
}

/* Ring, registered file, op slots and the sort scratch. */
static int setup_ring(struct kvt_nvme *n, unsigned depth)
{
	struct io_uring_params p;
	unsigned i;
	int r;

	/* COOP_TASKRUN (5.19): completions are reaped when we enter the
	 * kernel anyway, so no need to interrupt us for them. */
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_COOP_TASKRUN;
	r = io_uring_queue_init_params(depth, &n->ring, &p);
	if (r == -EINVAL) {
		memset(&p, 0, sizeof(p));
		r = io_uring_queue_init_params(depth, &n->ring, &p);
	}
	if (r)
		return r;
	n->ring_ok = 1;

	r = io_uring_register_files(&n->ring, &n->fd, 1);
	if (r == 0) {
		n->sqe_fd = 0;
		n->sqe_flags = IOSQE_FIXED_FILE;
		n->info.registered_files = 1;
	} else {
		n->sqe_fd = n->fd;
		n->sqe_flags = 0;
		note(n, "register_files: %s", strerror(-r));
	}

	/* The kick: a poll on an eventfd in the same ring, so a run waiting
	 * for a completion also wakes when there is more to read. */
	n->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (n->kick_fd < 0)
		note(n, "eventfd: %s", strerror(errno));
	n->ops = calloc(depth, sizeof(*n->ops));
	n->dq = malloc(sizeof(*n->dq) * depth);
	if (!n->ops || !n->dq)
		return -ENOMEM;
	for (i = depth; i-- > 0;) {
		n->ops[i].next_free = n->free;
		n->free = &n->ops[i];
	}
	n->ents_cap = depth * 8 > 256 ? depth * 8 : 256;
	n->ents = malloc(sizeof(*n->ents) * n->ents_cap);
	n->spans = malloc(sizeof(*n->spans) * n->ents_cap);
	if (!n->ents || !n->spans)
		return -ENOMEM;
	return 0;
}

/* Tear down whatever part of an open got done. The ring's own teardown
 * is asynchronous in the kernel and would hold the registered file a
 * while longer (a block device's O_EXCL claim, a mount): unregistering
 * first drops that reference before we return. */
static void nvme_free(struct kvt_nvme *n)
{
	unsigned i;

	if (n->ring_ok) {
		if (n->info.registered_files)
			io_uring_unregister_files(&n->ring);
		if (n->buf_base)
			io_uring_unregister_buffers(&n->ring);
		io_uring_queue_exit(&n->ring);
	}
	if (n->fd >= 0)
		close(n->fd);
	if (n->kick_fd >= 0)
		close(n->kick_fd);
	if (n->unlink_at_close)
		unlink(n->info.path);
	if (n->ops)
		for (i = 0; i < n->info.depth; i++)
			free(n->ops[i].iov_store);
	free(n->ops);
	free(n->dq);
	free(n->ents);
	free(n->spans);
	free(n);
}

int kvt_nvme_open(const struct kvt_nvme_opts *opts, struct kvt_nvme **out)
{
	struct kvt_nvme *n;
	int ret;

	if (!opts || !out || !opts->depth || opts->depth > MAX_DEPTH ||
	    opts->direct < KVT_OFF || opts->direct > KVT_ON)
		return -EINVAL;
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->fd = -1;
	n->kick_fd = -1;
	n->log = opts->log;
	n->log_arg = opts->log_arg;
	n->info.depth = opts->depth;
	n->info.depth_limit = opts->depth;
	n->max_io = opts->max_io ? opts->max_io : SZ_1M;
	if (n->max_io > CHUNK_MAX)
		n->max_io = CHUNK_MAX;
	n->info.max_io = n->max_io;
	n->iov_max = (unsigned)(n->max_io / SZ_4K);
	if (n->iov_max < 2)
		n->iov_max = 2;
	if (n->iov_max > IOV_MAX)
		n->iov_max = IOV_MAX;

	ret = open_target(n, opts);
	if (ret)
		goto fail;
	ret = set_direct(n, opts->direct);
	if (ret)
		goto fail;
	ret = setup_ring(n, opts->depth);
	if (ret)
		goto fail;
	*out = n;
	return 0;
fail:
	nvme_free(n);
	return ret;
}

void kvt_nvme_close(struct kvt_nvme *n)
{
	if (n)
		nvme_free(n);
}

int kvt_nvme_register_buffers(struct kvt_nvme *n, void *base, size_t bytes)
{
	struct iovec *iov = NULL;
	unsigned nb, i;
	int ret;

	if (!n || (bytes && !base))
		return -EINVAL;
	if (n->inflight)
		return -EBUSY;
	if (n->buf_base) {
		io_uring_unregister_buffers(&n->ring);
		n->buf_base = NULL;
		n->buf_bytes = 0;
		n->info.registered_buffers = 0;
	}
	if (!bytes)
		return 0;

	nb = (unsigned)((bytes + CHUNK_MAX - 1) / CHUNK_MAX);
	iov = calloc(nb, sizeof(*iov));
	if (!iov) {
		ret = -ENOMEM;
		goto fail;
	}
	for (i = 0; i < nb; i++) {
		uint64_t off = (uint64_t)i * CHUNK_MAX;

		iov[i].iov_base = (char *)base + off;
		iov[i].iov_len = bytes - off < CHUNK_MAX ? bytes - off : CHUNK_MAX;
	}
	ret = io_uring_register_buffers(&n->ring, iov, nb);
	if (ret)
		goto fail;
	free(iov);
	n->buf_base = base;
	n->buf_bytes = bytes;
	n->info.registered_buffers = 1;
	return 0;
fail:
	free(iov);
	if (ret == -ENOMEM || ret == -EPERM) {
		struct rlimit rl;

		if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
			note(n, "register_buffers: %s (RLIMIT_MEMLOCK %llu KiB)",
			     strerror(-ret), (unsigned long long)rl.rlim_cur >> 10);
		else
			note(n, "register_buffers: %s", strerror(-ret));
	} else {
		note(n, "register_buffers: %s", strerror(-ret));
	}
	return ret;
}

void kvt_nvme_kick(struct kvt_nvme *n)
{
	uint64_t one = 1;

	if (n && n->kick_fd >= 0)
		while (write(n->kick_fd, &one, sizeof(one)) < 0 && errno == EINTR)
			;
}

void kvt_nvme_info(const struct kvt_nvme *n, struct kvt_nvme_info *info)
{
	*info = n->info;
}

int kvt_nvme_fd(const struct kvt_nvme *n)
{
	return n->fd;
}

void kvt_nvme_set_fault(struct kvt_nvme *n, const struct kvt_fault *f)
{
	static const struct kvt_fault none;

	n->fault = f ? *f : none;
	n->fault_on = memcmp(&n->fault, &none, sizeof(none)) != 0;
	n->eio_n = n->short_n = n->enospc_n = n->flip_n = 0;
}

int kvt_nvme_set_depth(struct kvt_nvme *n, unsigned depth)
{
	if (!n || !depth || depth > n->info.depth || n->inflight)
		return -EINVAL;
	n->info.depth_limit = depth;
	return 0;
}

/* ------------------------------------------------------- sort, windows */

static int ent_cmp(const void *a, const void *b)
{
	const struct ent *x = a, *y = b;

	if (x->op != y->op)
		return x->op < y->op ? -1 : 1;
	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int bad_req(const struct kvt_nvme *n, const struct kvt_io *io)
{
	return io->op > KVT_IO_WRITE || !io->len || io->len > n->info.bytes ||
	       io->off > n->info.bytes - io->len;
}

/* Fill ents[s, s + k) with reqs[s, s + k) in sort order. */
static void build(struct kvt_nvme *n, const struct kvt_io *reqs, unsigned s, unsigned k)
{
	struct ent *e = n->ents + s;
	unsigned i;

	for (i = 0; i < k; i++) {
		const struct kvt_io *io = &reqs[s + i];

		e[i].off = io->off;
		e[i].idx = s + i;
		e[i].op = bad_req(n, io) ? OP_BAD : io->op;
	}
	qsort(e, k, sizeof(*e), ent_cmp);
}

/* Does the sorted window e[0, k) hold two overlapping requests, one of
 * them a write? Reads sort before writes, each by offset. */
static int file_conflicts(const struct ent *e, const struct kvt_io *reqs, unsigned k)
{
	unsigned r, w, nr = 0;
	uint64_t end = 0;

	while (nr < k && e[nr].op == KVT_IO_READ)
		nr++;
	for (w = nr; w < k && e[w].op == KVT_IO_WRITE; w++) {
		uint64_t we = e[w].off + reqs[e[w].idx].len;

		if (w > nr && e[w].off < end)
			return 1;		/* a write over a write */
		if (we > end)
			end = we;
	}
	/* A read against a write: both lists sorted by start. */
	for (r = 0, w = nr; r < nr && w < k && e[w].op == KVT_IO_WRITE;) {
		uint64_t rs = e[r].off, re = rs + reqs[e[r].idx].len;
		uint64_t ws = e[w].off, we = ws + reqs[e[w].idx].len;

		if (re <= ws)
			r++;
		else if (we <= rs)
			w++;
		else
			return 1;
	}
	return 0;
}

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* Do two requests of the sorted window e[0, k) use overlapping memory, one
 * of them a read (which writes that memory)? E.g. a frame written out and
 * read into again in one batch. */
static int mem_conflicts(struct kvt_nvme *n, const struct ent *e, const struct kvt_io *reqs,
			 unsigned k)
{
	uintptr_t any = 0, rd = 0;	/* furthest end so far: all, reads */
	unsigned i, m = 0;

	for (i = 0; i < k; i++) {
		const struct kvt_io *io = &reqs[e[i].idx];

		if (e[i].op == OP_BAD)
			continue;
		n->spans[m].start = (uintptr_t)io->buf;
		n->spans[m].end = (uintptr_t)io->buf + io->len;
		n->spans[m++].op = e[i].op;
	}
	qsort(n->spans, m, sizeof(*n->spans), span_cmp);
	for (i = 0; i < m; i++) {
		const struct span *sp = &n->spans[i];

		if (sp->start < (sp->op == KVT_IO_READ ? any : rd))
			return 1;
		if (sp->end > any)
			any = sp->end;
		if (sp->op == KVT_IO_READ && sp->end > rd)
			rd = sp->end;
	}
	return 0;
}

/* Build the window reqs[s, s + k) and say whether it must be cut: two of
 * its requests overlap in the file (one a write) or in memory (one a
 * read), so their order matters. */
static int build_conflicts(struct kvt_nvme *n, const struct kvt_io *reqs,
			   unsigned s, unsigned k)
{
	build(n, reqs, s, k);
	return file_conflicts(n->ents + s, reqs, k) || mem_conflicts(n, n->ents + s, reqs, k);
}

/* ------------------------------------------------------------ the ring */

static struct io_uring_sqe *get_sqe(struct kvt_nvme *n)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&n->ring);

	/* Cannot happen (ops in flight <= depth <= SQ entries), but if the
	 * SQ is full, flush it once. */
	if (unlikely(!sqe)) {
		io_uring_submit(&n->ring);
		sqe = io_uring_get_sqe(&n->ring);
	}
	return sqe;
}

/* Queue the next attempt of op. Returns 0 or -EBUSY (no SQE). */
static int prep(struct kvt_nvme *n, struct op *op)
{
	struct io_uring_sqe *sqe = get_sqe(n);

	if (unlikely(!sqe))
		return -EBUSY;
	if (op->vec) {
		if (op->rw == KVT_IO_READ)
			io_uring_prep_readv(sqe, n->sqe_fd, op->iov, op->niov, op->off);
		else
			io_uring_prep_writev(sqe, n->sqe_fd, op->iov, op->niov, op->off);
	} else if (op->buf_index >= 0) {
		if (op->rw == KVT_IO_READ)
			io_uring_prep_read_fixed(sqe, n->sqe_fd, op->buf, op->left,
						 op->off, op->buf_index);
		else
			io_uring_prep_write_fixed(sqe, n->sqe_fd, op->buf, op->left,
						  op->off, op->buf_index);
	} else {
		if (op->rw == KVT_IO_READ)
			io_uring_prep_read(sqe, n->sqe_fd, op->buf, op->left, op->off);
		else
			io_uring_prep_write(sqe, n->sqe_fd, op->buf, op->left, op->off);
	}
	sqe->flags |= n->sqe_flags;
	io_uring_sqe_set_data(sqe, op);
	return 0;
}

/* The registered buffer holding [p, p + len) whole, or -1. */
static int find_buf(const struct kvt_nvme *n, const char *p, uint64_t len)
{
	uint64_t off;

	if (!n->buf_base || p < n->buf_base || (uint64_t)(p - n->buf_base) > n->buf_bytes ||
	    len > n->buf_bytes - (uint64_t)(p - n->buf_base))
		return -1;
	off = (uint64_t)(p - n->buf_base);
	if (off / CHUNK_MAX != (off + len - 1) / CHUNK_MAX)
		return -1;
	return (int)(off / CHUNK_MAX);
}

/* Give op a second iovec slot: its first is the contiguous part so far.
 * Returns 0, or -ENOMEM (then the op simply ends here). */
static int make_vec(struct kvt_nvme *n, struct op *op)
{
	if (!op->iov_store) {
		op->iov_store = malloc(sizeof(struct iovec) * n->iov_max);
		if (!op->iov_store)
			return -ENOMEM;
	}
	op->iov_store[0].iov_base = op->buf;
	op->iov_store[0].iov_len = op->total;
	op->iov = op->iov_store;
	op->niov = 1;
	op->vec = 1;
	return 0;
}

/* Finish one request: res, latency, injected faults (only on requests
 * that did I/O), callback. */
static void complete_req(struct kvt_nvme *n, struct kvt_io *io, int res, uint64_t lat,
			 int did_io)
{
	io->res = res;
	io->lat_ns = lat;
	if (unlikely(n->fault_on) && did_io) {
		const struct kvt_fault *f = &n->fault;

		if (f->eio_every && ++n->eio_n % f->eio_every == 0) {
			io->res = -EIO;
		} else if (io->op == KVT_IO_WRITE) {
			if (f->enospc_every && ++n->enospc_n % f->enospc_every == 0)
				io->res = -ENOSPC;
		} else if (f->flip_every && io->res == 0 &&
			   ++n->flip_n % f->flip_every == 0) {
			uint32_t at = (n->flip_n * 2654435761u) % io->len;

			((uint8_t *)io->buf)[at] ^= (uint8_t)(1u << (n->flip_n & 7));
		}
	}
	if (n->done)
		n->done(n->done_arg, io);
}

/* The user data of the kick's poll: no op has this address. */
#define KICK_DATA(n)	((void *)&(n)->kick_fd)

/* Ops in flight go from n->inflight to n->inflight + by at now: count the
 * time since the last change towards busy_ns and depth_ns. */
static void depth_change(struct kvt_nvme *n, int by, uint64_t now)
{
	if (n->inflight && now > n->depth_t) {
		n->info.busy_ns += now - n->depth_t;
		n->info.depth_ns += (now - n->depth_t) * n->inflight;
	}
	n->depth_t = now;
	n->inflight += (unsigned)by;
}

/* Op is done with res: its slot is freed at once, its requests are told
 * by deliver(), once the ring has been given more to do. */
static void finish(struct kvt_nvme *n, struct op *op, int res, uint64_t now)
{
	n->dq[n->ndq++] = (struct done){ .first = op->first, .count = op->count, .res = res,
					 .lat = now - op->t0 };
	op->busy = 0;
	op->next_free = n->free;
	n->free = op;
	depth_change(n, -1, now);
}

/* Tell the requests of the ops reaped so far how they ended. Their
 * callbacks (the pager checksums each page read and publishes it) run
 * while the next reads are in flight, not in a gap between two of them. */
static void deliver(struct kvt_nvme *n)
{
	for (unsigned d = 0; d < n->ndq; d++) {
		const struct done *x = &n->dq[d];

		for (unsigned i = x->first; i < x->first + x->count; i++)
			complete_req(n, &n->reqs[n->ents[i].idx], x->res, x->lat, 1);
	}
	n->ndq = 0;
}

/* Start the op beginning at ents[pos] (requests needing no I/O complete
 * here). Returns the position after it, or -errno (no SQE). */
static int start_op(struct kvt_nvme *n, unsigned pos, unsigned k, uint64_t now)
{
	const struct ent *e = n->ents;
	struct kvt_io *io;
	struct op *op;
	uint64_t oend;
	char *bend;
	int r;

	while (pos < k && e[pos].op == OP_BAD) {
		io = &n->reqs[e[pos++].idx];
		complete_req(n, io, io->len ? -EINVAL : 0, 0, 0);
	}
	if (pos == k)
		return (int)pos;

	op = n->free;
	n->free = op->next_free;
	depth_change(n, 1, now);
	op->busy = 1;
	io = &n->reqs[e[pos].idx];
	op->first = pos;
	op->rw = (uint8_t)e[pos].op;
	op->off = io->off;
	op->buf = io->buf;
	op->total = io->len;
	op->vec = 0;
	op->niov = 1;
	op->retried = 0;
	op->zero = 0;
	op->t0 = now;
	oend = io->off + io->len;
	bend = (char *)io->buf + io->len;
	for (pos++; pos < k; pos++) {
		io = &n->reqs[e[pos].idx];
		if (e[pos].op != op->rw || io->off != oend ||
		    (uint64_t)op->total + io->len > n->max_io)
			break;
		if ((char *)io->buf == bend) {
			if (op->vec)
				op->iov[op->niov - 1].iov_len += io->len;
		} else {
			if (!op->vec && make_vec(n, op))
				break;
			if (op->niov == n->iov_max)
				break;
			op->iov[op->niov].iov_base = io->buf;
			op->iov[op->niov].iov_len = io->len;
			op->niov++;
		}
		op->total += io->len;
		oend += io->len;
		bend = (char *)io->buf + io->len;
	}
	op->count = pos - op->first;
	op->left = op->total;
	op->buf_index = op->vec ? -1 : find_buf(n, op->buf, op->total);
	n->info.ops++;
	n->info.reqs += op->count;
	r = prep(n, op);
	return r ? r : (int)pos;
}

/* Injected short read: on an op's first full completion, the first
 * request whose turn it is keeps half its bytes (rounded down to
 * short_align), and the op pretends to have stopped there. */
static int fault_short(struct kvt_nvme *n, struct op *op, int res)
{
	uint64_t prefix = 0, cut = UINT64_MAX;
	unsigned i;

	if (!n->fault.short_every || op->rw != KVT_IO_READ || op->retried ||
	    (uint32_t)res != op->total)
		return res;
	for (i = op->first; i < op->first + op->count; i++) {
		uint32_t len = n->reqs[n->ents[i].idx].len;

		if (++n->short_n % n->fault.short_every == 0 && cut == UINT64_MAX)
			cut = prefix + ((len / 2) & ~(n->short_align - 1));
		prefix += len;
	}
	return cut == UINT64_MAX ? res : (int)cut;
}

/* Move op past res transferred bytes. */
static void advance(struct op *op, uint32_t res)
{
	op->off += res;
	op->left -= res;
	if (!op->vec) {
		op->buf += res;
		return;
	}
	while (res) {
		if (res >= op->iov->iov_len) {
			res -= (uint32_t)op->iov->iov_len;
			op->iov++;
			op->niov--;
		} else {
			op->iov->iov_base = (char *)op->iov->iov_base + res;
			op->iov->iov_len -= res;
			res = 0;
		}
	}
}

/* One completion of op. Returns 0 or -errno (no SQE for a retry). */
static int handle(struct kvt_nvme *n, struct op *op, int res, uint64_t now)
{
	if (unlikely(n->fault_on) && res > 0)
		res = fault_short(n, op, res);
	if (res < 0) {
		finish(n, op, res, now);
		return 0;
	}
	if ((uint32_t)res >= op->left) {
		finish(n, op, 0, now);
		return 0;
	}
	/* Short: retry the rest; a second zero-byte one in a row is EOF
	 * (the file shrank under us) and fails the op: -ENODATA for a read
	 * (the pager's message says "short read"), -EIO for a write. */
	if (res == 0 && op->zero++) {
		finish(n, op, op->rw == KVT_IO_READ ? -ENODATA : -EIO, now);
		return 0;
	}
	if (res)
		op->zero = 0;
	n->info.short_ios++;
	op->retried = 1;
	advance(op, (uint32_t)res);
	return prep(n, op);
}

/* The kick's poll fired: empty the eventfd (the caller asks more() again
 * after any reap); the next wait arms the poll again. One the kernel
 * refuses is not tried again. */
static void kicked(struct kvt_nvme *n, const struct io_uring_cqe *cqe)
{
	uint64_t v;

	n->kick_armed = 0;
	if (cqe->res > 0)
		n->info.kicks++;
	if (cqe->res < 0 && cqe->res != -ECANCELED) {
		n->kick_off = 1;
		note(n, "kick poll: %s", strerror(-cqe->res));
	}
	while (read(n->kick_fd, &v, sizeof(v)) < 0 && errno == EINTR)
		;
}

/* Submit what is queued and, when no completion is ready, wait for one.
 * EINTR, EAGAIN and EBUSY are retried. Returns 0 or -errno. */
static int submit_wait(struct kvt_nvme *n)
{
	struct io_uring_cqe *cqe;
	int r;

	for (;;) {
		unsigned want = io_uring_cq_ready(&n->ring) ? 0 : 1;

		if (io_uring_sq_ready(&n->ring))
			r = want ? io_uring_submit_and_wait(&n->ring, 1)
				 : io_uring_submit(&n->ring);
		else if (want)
			r = io_uring_wait_cqe(&n->ring, &cqe);
		else
			return 0;
		if (r >= 0) {
			if (!io_uring_sq_ready(&n->ring) || io_uring_cq_ready(&n->ring))
				return 0;
			continue;	/* part submitted, nothing to reap yet */
		}
		if (r != -EINTR && r != -EAGAIN && r != -EBUSY && r != -ETIME)
			return r;
		if (io_uring_cq_ready(&n->ring))
			return 0;	/* reaping frees what the kernel lacked */
	}
}

/* The ring failed: requests of the run not yet done (not started: from
 * pos on; started: in a busy op) get err. */
static int fail_run(struct kvt_nvme *n, unsigned pos, unsigned nreq, int err)
{
	unsigned i, j;

	deliver(n);		/* those ended before the failure */
	for (i = pos; i < nreq; i++)
		n->reqs[i < n->win_end ? n->ents[i].idx : i].res = err;
	for (i = 0; i < n->info.depth; i++) {
		const struct op *op = &n->ops[i];

		for (j = 0; op->busy && j < op->count; j++)
			n->reqs[n->ents[op->first + j].idx].res = err;
	}
	/* Ops already in the kernel may still write into their buffers, which
	 * the caller frees once we return: reap what can be reaped first,
	 * giving up once no op has ended for a second (kicks do not count:
	 * another thread kicking must not keep us here). */
	uint64_t until = now_ns() + 1000000000ull;

	while (n->inflight) {
		struct io_uring_cqe *cqe;
		uint64_t now = now_ns();
		struct __kernel_timespec ts = { .tv_sec = (long long)((until - now) / 1000000000ull),
						.tv_nsec = (long long)((until - now) % 1000000000ull) };

		if (now >= until || io_uring_wait_cqe_timeout(&n->ring, &cqe, &ts) < 0)
			break;
		if (io_uring_cqe_get_data(cqe) == KICK_DATA(n)) {
			kicked(n, cqe);
		} else {
			depth_change(n, -1, now_ns());
			until = now_ns() + 1000000000ull;
		}
		io_uring_cqe_seen(&n->ring, cqe);
	}
	n->broken = err;
	return err;
}

/* Keep a poll on the kick eventfd in the ring while a run with a more()
 * waits, so that kvt_nvme_kick wakes it. One-shot, armed again at the
 * next wait after it fires: at most one of its completions is ever in the
 * ring, however often other threads kick. */
static void arm_kick(struct kvt_nvme *n)
{
	struct io_uring_sqe *sqe;

	if (n->kick_armed || n->kick_off || n->kick_fd < 0 || !(sqe = get_sqe(n)))
		return;
	io_uring_prep_poll_add(sqe, n->kick_fd, POLLIN);
	io_uring_sqe_set_data(sqe, KICK_DATA(n));
	n->kick_armed = 1;
}

/* Reap the completions that are ready. Returns 0 or -errno (no SQE for a
 * retry). */
static int reap(struct kvt_nvme *n)
{
	struct io_uring_cqe *cqes[CQE_BATCH];
	unsigned got = io_uring_peek_batch_cqe(&n->ring, cqes, CQE_BATCH), i;
	uint64_t now = now_ns();
	int r = 0;

	for (i = 0; i < got && !r; i++) {
		struct op *op = io_uring_cqe_get_data(cqes[i]);
		int res = cqes[i]->res;

		if ((void *)op == KICK_DATA(n)) {
			kicked(n, cqes[i]);
			continue;
		}
		if (unlikely(n->fault_on) && n->fault.slow_us) {
			struct timespec ts = {
				.tv_sec = n->fault.slow_us / 1000000,
				.tv_nsec = (long)(n->fault.slow_us % 1000000) * 1000,
			};

			while (nanosleep(&ts, &ts) && errno == EINTR)
				;
			now = now_ns();
		}
		r = handle(n, op, res, now);
	}
	/* Past the ones handled only: after a failure, fail_run reaps the
	 * rest (their ops are still counted in flight). */
	io_uring_cq_advance(&n->ring, i);
	return r;
}

/* The longest prefix of reqs[s, s + k) without a conflict (>= 1; monotone,
 * so a binary search), left built in ents. */
static unsigned clean_prefix(struct kvt_nvme *n, const struct kvt_io *reqs,
			     unsigned s, unsigned k)
{
	unsigned lo = 1, hi = k;	/* lo has none, hi has one */

	while (hi - lo > 1) {
		unsigned mid = lo + (hi - lo) / 2;

		if (build_conflicts(n, reqs, s, mid))
			hi = mid;
		else
			lo = mid;
	}
	build(n, reqs, s, lo);
	return lo;
}

int kvt_nvme_run_more(struct kvt_nvme *n, struct kvt_io *reqs, unsigned nreq, unsigned cap,
		      void (*done)(void *arg, struct kvt_io *io), kvt_nvme_more_fn more,
		      void *arg)
{
	unsigned pos = 0, i;
	int drain = 0, idle = 0, r;	/* idle: more had nothing since the last reap */

	if (!n || (nreq && !reqs) || cap < nreq || (more && !reqs))
		return -EINVAL;
	if (n->broken)
		return n->broken;
	if (!more)
		cap = nreq;
	if (cap > n->ents_cap) {
		struct ent *e = realloc(n->ents, sizeof(*e) * cap);
		struct span *sp = e ? realloc(n->spans, sizeof(*sp) * cap) : NULL;

		if (e)
			n->ents = e;
		if (sp)
			n->spans = sp;
		if (!e || !sp) {
			for (i = 0; i < nreq; i++)
				reqs[i].res = -ENOMEM;
			return -ENOMEM;
		}
		n->ents_cap = cap;
	}
	n->reqs = reqs;
	n->done = done;
	n->done_arg = arg;
	n->win_end = 0;
	for (;;) {
		if (pos == n->win_end && pos < nreq && !(drain && n->inflight)) {
			/* The next window; after a cut, once the one before
			 * has drained (their order matters). */
			unsigned k = nreq - pos;

			if (drain)
				deliver(n);	/* as if the cut were two runs */
			if (build_conflicts(n, reqs, pos, k))
				k = clean_prefix(n, reqs, pos, k);
			n->win_end = pos + k;
			drain = n->win_end < nreq;
		}
		if (pos == n->win_end && pos == nreq && more && !idle && nreq < cap &&
		    n->inflight < n->info.depth_limit) {
			/* Everything so far has started: let the kernel have it,
			 * then ask for more. */
			if (io_uring_sq_ready(&n->ring))
				(void)io_uring_submit(&n->ring);	/* failures: submit_wait */
			unsigned m = more(arg, reqs + nreq, cap - nreq);

			nreq += m < cap - nreq ? m : cap - nreq;
			idle = !m;
			drain = 0;
			continue;
		}
		while (pos < n->win_end && n->inflight < n->info.depth_limit) {
			r = start_op(n, pos, n->win_end, now_ns());
			if (r < 0)
				return fail_run(n, pos, nreq, r);
			pos = (unsigned)r;
		}
		if (n->ndq) {
			/* The ring has its next reads: let the kernel have them,
			 * then tell the ones that ended. Their callbacks may free
			 * what more() was waiting for. */
			if (io_uring_sq_ready(&n->ring))
				(void)io_uring_submit(&n->ring);	/* failures: submit_wait */
			deliver(n);
			idle = 0;
			continue;
		}
		if (!n->inflight) {
			if (pos == nreq && (idle || !more || nreq == cap))
				break;
			continue;
		}
		if (pos == n->win_end && (pos < nreq ? !drain : more && !idle && nreq < cap &&
					  n->inflight < n->info.depth_limit))
			continue;	/* more to start before waiting */
		if (more && nreq < cap)
			arm_kick(n);
		r = submit_wait(n);
		if (!r)
			r = reap(n);
		if (r)
			return fail_run(n, pos, nreq, r);
		idle = 0;
	}
	n->reqs = NULL;
	n->done = NULL;
	return 0;
}

int kvt_nvme_run(struct kvt_nvme *n, struct kvt_io *reqs, unsigned nreq,
		 void (*done)(void *arg, struct kvt_io *io), void *arg)
{
	return kvt_nvme_run_more(n, reqs, nreq, nreq, done, NULL, arg);
}
