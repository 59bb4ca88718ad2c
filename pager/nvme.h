/* SPDX-License-Identifier: MIT */
/*
 * The NVMe tier's I/O path: a file or block device opened O_DIRECT, driven
 * through io_uring with registered files and (where RLIMIT_MEMLOCK allows)
 * registered buffers over the host tier. Adjacent requests are coalesced
 * up to max_io bytes; at most depth requests are in flight.
 *
 * Owned by one thread at a time (the pager's migration thread): no locks.
 */
#ifndef KVT_PAGER_NVME_H
#define KVT_PAGER_NVME_H

#include <stddef.h>
#include <stdint.h>
#include <kvt/config.h>

struct kvt_nvme;

enum kvt_io_op { KVT_IO_READ = 0, KVT_IO_WRITE = 1 };

/* One page-sized request. The caller fills op, off, buf, len, user; the
 * I/O path sets res (0 or -errno; -ENODATA for a read that the file ends
 * before) and lat_ns. off, buf and len must be
 * multiples of 4096 for O_DIRECT. */
struct kvt_io {
	uint64_t off;
	void	*buf;
	uint32_t len;
	uint8_t	 op;
	int	 res;
	uint64_t lat_ns;	/* submit to completion of the request carrying it */
	void	*user;
};

struct kvt_nvme_opts {
	const char *path;	/* file to create, block device, or directory */
	uint64_t bytes;		/* size to preallocate (files) or use (devices) */
	int	 direct;	/* enum kvt_tristate */
	unsigned depth;		/* queue depth, 1..4096 */
	uint64_t max_io;	/* largest coalesced request in bytes
				 * (0 = 1 MiB; at most 1 GiB) */
	kvt_log_fn log;
	void	*log_arg;
};

/* Fault injection, for tests: every Nth request of a kind fails that way
 * (0 = never). Counters start at the call. */
struct kvt_fault {
	unsigned eio_every;	/* reads and writes complete with -EIO */
	unsigned short_every;	/* a read completes short (the path retries) */
	unsigned enospc_every;	/* writes complete with -ENOSPC */
	unsigned flip_every;	/* a read completes with one bit flipped */
	unsigned slow_us;	/* every completion is delayed this long */
};

struct kvt_nvme_info {
	int	 direct;		/* 1 O_DIRECT, 0 buffered */
	int	 registered_files;
	int	 registered_buffers;
	int	 created;		/* the file was created by open (and is removed by close) */
	uint64_t bytes;
	char	 path[KVT_PATH_MAX];
	char	 notes[256];		/* fallbacks taken and why */
	uint64_t short_ios;		/* short completions retried */
	uint64_t ops;			/* read/write SQEs issued (merged; retries not counted) */
	uint64_t reqs;			/* requests carried by them */
	uint64_t busy_ns;		/* time with at least one op in flight */
	uint64_t depth_ns;		/* the sum over that time of the ops in flight
					 * (ns x ops): depth_ns / busy_ns is the mean
					 * queue depth while busy */
	uint64_t kicks;			/* kvt_nvme_kick wake-ups a run has seen */
	unsigned depth;			/* ring depth given at open */
	unsigned depth_limit;		/* ops in flight at most (kvt_nvme_set_depth) */
	uint64_t max_io;		/* effective coalescing limit in bytes */
};

/* Open (creating a file O_EXCL, mode 0600, preallocated with fallocate, or
 * a temp file in a directory, unlinked at once) and set up the ring.
 * Without O_DIRECT support: buffered I/O with a warning through log, or
 * -EINVAL when opts->direct is KVT_ON.
 *
 * path: an existing directory (also "" or NULL: $TMPDIR, else /tmp), a
 * block device (opened O_EXCL, so not while mounted; min(bytes, its size)
 * used, bytes == 0 = all of it), or a file that must not exist yet
 * (-EEXIST; removed again by close). A missing parent directory, or a
 * missing path ending in '/': -ENOENT. Nothing is left behind on failure.
 * Returns 0 or -errno; *out is set only on success. */
int  kvt_nvme_open(const struct kvt_nvme_opts *opts, struct kvt_nvme **out);
/* Close (NULL is fine), removing a file open created. Returns after the
 * kernel has let go of the file (a device's claim ends with it); after a
 * ring failure that waits for any I/O still in flight. */
void kvt_nvme_close(struct kvt_nvme *n);

/* Register [base, base+bytes) as fixed buffers (chunks of at most 1 GiB),
 * replacing any earlier registration; bytes == 0 only unregisters. Not
 * during kvt_nvme_run. Returns 0, or -errno with the reason in info.notes;
 * I/O then uses plain buffers. */
int  kvt_nvme_register_buffers(struct kvt_nvme *n, void *base, size_t bytes);

/* Run n requests with at most depth in flight, coalescing neighbours
 * (adjacent offsets of the same op; one fixed-buffer op when the buffers
 * are adjacent too, a vectored op otherwise). done (may be NULL) is called
 * once per request as it completes, in completion order (a request that
 * needs no I/O, below, is told at once, perhaps ahead of ones that
 * completed before it), from the calling thread; it must not call
 * kvt_nvme_run. Short transfers are retried for
 * the rest. Reads and writes may be mixed; requests are not reordered
 * across an overlapping pair: in the file, one of them a write, or in
 * memory, one of them a read (such a pair splits the batch, which costs a
 * drain of the queue). A request past the end (off + len > bytes) or with
 * an unknown op completes with -EINVAL, one with len 0 with 0, both
 * without I/O.
 * Returns 0 when every request ran (each has its own res), or -errno when
 * the ring itself failed: requests not yet done then have that res, may
 * still be in flight, and the handle returns the same error from then on
 * until kvt_nvme_close. -ENOMEM when the run's index (40 bytes a request,
 * kept for later runs) cannot grow: nothing started, every res is -ENOMEM,
 * and the handle stays usable. */
int  kvt_nvme_run(struct kvt_nvme *n, struct kvt_io *reqs, unsigned nreq,
		  void (*done)(void *arg, struct kvt_io *io), void *arg);

/* More requests for a run in progress: write up to room of them at more
 * and return how many (0: none now). */
typedef unsigned (*kvt_nvme_more_fn)(void *arg, struct kvt_io *more, unsigned room);

/* kvt_nvme_run, with a way to keep the queue full: whenever every request
 * so far has started and fewer than depth ops are in flight, more (may be
 * NULL) is asked for requests to add, written at reqs[nreq, cap), and they
 * start at once, while the earlier ones are still in flight. The run ends
 * when all have completed and more has nothing. What more adds must not
 * overlap, in the file with one of the two a write or in memory with one
 * of the two a read, a request of the run that has not completed (among
 * themselves, the ordering rule of kvt_nvme_run holds). more is called from
 * the calling thread and must not call kvt_nvme_run. It is asked after
 * each reap before done hears of the requests just completed, so that the
 * ring has its next ops while done runs; and again after a kvt_nvme_kick.
 * The index is sized for cap requests. Otherwise as kvt_nvme_run. */
int  kvt_nvme_run_more(struct kvt_nvme *n, struct kvt_io *reqs, unsigned nreq, unsigned cap,
		       void (*done)(void *arg, struct kvt_io *io), kvt_nvme_more_fn more,
		       void *arg);

/* Wake a kvt_nvme_run_more that waits for a completion, so that it asks
 * its more() now (from any thread: the one call on a handle that may run
 * beside a run). Without a run in progress, the next one wakes at once
 * and finds nothing new: harmless. */
void kvt_nvme_kick(struct kvt_nvme *n);
void kvt_nvme_info(const struct kvt_nvme *n, struct kvt_nvme_info *info);
/* Replace the fault settings (NULL or all zero: none) and restart their
 * counters. */
void kvt_nvme_set_fault(struct kvt_nvme *n, const struct kvt_fault *f);
/* Keep at most depth ops in flight from now on, 1 <= depth <= the depth
 * given at open (which sized the ring). Not during kvt_nvme_run.
 * Returns 0 or -EINVAL. */
int  kvt_nvme_set_depth(struct kvt_nvme *n, unsigned depth);
int  kvt_nvme_fd(const struct kvt_nvme *n);

#endif
