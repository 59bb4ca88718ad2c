/* SPDX-License-Identifier: MIT */
/* What the plug-in's device (cuda_device.c) and its kernels' context
 * (cuda_compute.c) share. Private to kernels/cuda/. */
#ifndef KVT_KERNELS_CUDA_CUDA_H
#define KVT_KERNELS_CUDA_CUDA_H

#include <pthread.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#include "kernels/compute.h"
#include "kernels/device.h"

#define CUDA_NEV	1024	/* fence events per copy direction */
#define CUDA_BATCH	64	/* copies one cudaMemcpyBatchAsync takes, at most */

/* One copy direction: a stream, the open batch, and a ring of events, the
 * fences. Copies join the open batch, which goes onto the stream as one
 * cudaMemcpyBatchAsync (a copy a call costs the stream a few µs each:
 * docs/benchmarks.md, "Small copies on the GPU") when it is full, when
 * the stream has nothing left to do, when one of its fences is asked
 * after, or before a copy that must not wait or that touches its bytes.
 * A fence is its batch's number; batches complete in stream order, so
 * fence n is done once any fence >= n is, and a fence whose event was
 * recorded again for a later batch waits for that one (later, never
 * wrong). */
struct cuda_ring {
	pthread_mutex_t lock;
	cudaStream_t	st;
	cudaEvent_t	ev[CUDA_NEV];	/* ev[b % CUDA_NEV]: the end of batch b */
	uint64_t	next;		/* the open batch's number (from 1) */
	uint64_t	done;		/* batches <= done are known complete */
	uint64_t	bad;		/* the last batch that failed to queue, */
	int		bad_err;	/* and why (-errno) */
	unsigned	npend;		/* copies in the open batch */
	void		*pdst[CUDA_BATCH];
	const void	*psrc[CUDA_BATCH];
	size_t		plen[CUDA_BATCH];
	/* Busy time: a segment opens with an event at the first copy queued
	 * on an idle stream and closes when its last copy is seen done. */
	cudaEvent_t	seg_start;
	int		seg_open;
	uint64_t	seg_last;
	uint64_t	*busy_ns;	/* the device's counter */
};

/* A registration of host memory: chunks of at most 1 GiB. */
struct cuda_reg {
	void	*base;
	size_t	 bytes, chunk;
	unsigned nchunks;
	int	 ok;			/* every chunk registered */
};

struct cuda_dev {
	struct kvt_device *self;	/* for the log and the counters */
	int	 id;			/* CUDA device ordinal */
	struct cuda_ring ring[2];	/* [0] host -> device (and D2D), [1] device -> host */
	pthread_mutex_t read_lock;
	cudaStream_t read_st;		/* kvt_device_read */
	pthread_mutex_t reg_lock;
	struct cuda_reg regs[8];
	unsigned nregs;
	char	 name[256];
	int	 cc_major, cc_minor, sms;
	uint64_t total_mem;
	int	 numa_node;
	char	 pci[32];
	int	 can_map;		/* kernels read registered host memory at its address */
	int	 no_batch;		/* the driver refused cudaMemcpyBatchAsync */
	double	 in_place_gbps, copy_up_gbps;
};

/* Make d's device current on the calling thread (the runtime's and the
 * pager's threads all call in). 0 or -EIO. */
int kvt_cuda_enter(struct cuda_dev *d);

extern const struct kvt_compute_ops kvt_cuda_compute;

#endif
