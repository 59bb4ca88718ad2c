/* SPDX-License-Identifier: MIT */
/*
 * The device interface: one table of function pointers per backend plus a
 * context. The pager uses only the memory and copy part. Private to libkvt
 * (pager/ and kernels/); no backend type ever appears here.
 */
#ifndef KVT_KERNELS_DEVICE_H
#define KVT_KERNELS_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <kvt/device.h>

enum kvt_copy_dir { KVT_H2D = 0, KVT_D2H = 1 };

struct kvt_device_ops {
	const char *name;
	/* Device memory. alloc returns 0 or -errno; free takes the size
	 * that was allocated. */
	int  (*alloc)(void *ctx, size_t bytes, void **out);
	void (*free)(void *ctx, void *p, size_t bytes);
	/* Optional: make host memory usable by async copies (pinning). */
	int  (*register_host)(void *ctx, void *p, size_t bytes);
	void (*unregister_host)(void *ctx, void *p);
	/* Queue a copy; *fence is set to a value that fence_wait/done accept.
	 * Copies in one direction complete in order. Optional: without it the
	 * wrapper copies synchronously. */
	int  (*copy_async)(void *ctx, void *dst, const void *src, size_t bytes,
			   int dir, uint64_t *fence);
	int  (*fence_wait)(void *ctx, uint64_t fence);	/* 0 or -errno */
	int  (*fence_done)(void *ctx, uint64_t fence);	/* 1, 0, or -errno */
	/* Can the device's kernels read host memory in place? */
	int  host_addressable;
	/* Is device memory directly addressable by the host CPU (cpu backend)? */
	int  host_visible;
	void (*close)(void *ctx);
};

struct kvt_device {
	const struct kvt_device_ops *ops;
	void *ctx;
};

/* Wrappers: supply the fallbacks for optional methods. */
int kvt_dev_copy_async(struct kvt_device *d, void *dst, const void *src,
		       size_t bytes, int dir, uint64_t *fence);
int kvt_dev_fence_wait(struct kvt_device *d, uint64_t fence);
/* 1 when the copy behind fence is done (fence 0 always is), 0 when not or
 * when the device cannot tell without waiting, -errno. */
int kvt_dev_fence_done(struct kvt_device *d, uint64_t fence);
int kvt_dev_copy(struct kvt_device *d, void *dst, const void *src, size_t bytes, int dir);

/* Backends */
int kvt_cpu_device_open(double copy_gbps, struct kvt_device *out);
#ifdef KVT_HAVE_CUDA
int kvt_cuda_device_open(struct kvt_device *out);
#endif

#endif
