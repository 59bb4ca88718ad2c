/* SPDX-License-Identifier: MIT */
/*
 * The device interface: one table of function pointers per backend plus a
 * context. The pager uses only the memory and copy part; the forward pass
 * reaches the kernels through dev->compute (kernels/compute.h). Private to
 * libkvt and its backend plug-ins (kernels/plugin.h); no backend type ever
 * appears here.
 */
#ifndef KVT_KERNELS_DEVICE_H
#define KVT_KERNELS_DEVICE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <kvt/device.h>

/* Copy directions; a D2D copy runs on the H2D engine (in its order). */
enum kvt_copy_dir { KVT_H2D = 0, KVT_D2H = 1, KVT_D2D = 2 };

struct kvt_compute_ops;

struct kvt_device_ops {
	const char *name;
	/* Device memory. alloc returns 0 or -errno; free takes the size
	 * that was allocated. */
	int  (*alloc)(void *ctx, size_t bytes, void **out);
	void (*free)(void *ctx, void *p, size_t bytes);
	/* Optional: make host memory usable by async copies (pinning) and,
	 * where host_addressable, readable by kernels in place. */
	int  (*register_host)(void *ctx, void *p, size_t bytes);
	void (*unregister_host)(void *ctx, void *p);
	/* Queue a copy; *fence is set to a value that fence_wait/done accept.
	 * Copies in one direction complete in order (D2D in H2D's order): a
	 * fence is done once every copy queued before it in its direction
	 * is. Fences of a direction never decrease; copies may share one.
	 * Both ends stay untouched until the fence is done. Optional:
	 * without it the wrapper copies synchronously. */
	int  (*copy_async)(void *ctx, void *dst, const void *src, size_t bytes,
			   int dir, uint64_t *fence);
	int  (*fence_wait)(void *ctx, uint64_t fence);	/* 0 or -errno */
	int  (*fence_done)(void *ctx, uint64_t fence);	/* 1, 0, or -errno */
	/* Optional: copy src (device or host memory) to host memory and wait;
	 * without it (host_visible devices) a memcpy. */
	int  (*read)(void *ctx, void *dst, const void *src, size_t bytes);
	/* Optional: free and total device memory, for a refusal that says
	 * how much there is. */
	int  (*mem_info)(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes);
	/* Optional: what the device is (desc, numa_node, the in-place
	 * figures); the wrapper fills name and the counters. */
	void (*describe)(void *ctx, struct kvt_device_info *out);
	/* Can the device's kernels read host memory in place (registered
	 * host memory, at the same address)? */
	int  host_addressable;
	/* Is device memory directly addressable by the host CPU (cpu backend)? */
	int  host_visible;
	void (*close)(void *ctx);
};

/* Counters every backend keeps (atomics, relaxed): kvt_device_info
 * reports them. */
struct kvt_device_counters {
	uint64_t copies[KVT_DEV_DIRS];
	uint64_t copy_bytes[KVT_DEV_DIRS];
	uint64_t copy_ns[KVT_DEV_DIRS];
	uint64_t kernel_ns;
};

struct kvt_device {
	const struct kvt_device_ops *ops;
	void *ctx;
	/* The kernels of this backend, for the forward pass (compute.h);
	 * NULL on the cpu device, whose kernels kvt_compute_open supplies
	 * (so that a program using the pager alone links no BLAS). */
	const struct kvt_compute_ops *compute;
	/* What access.host_in_place = auto picks on this device. */
	int in_place_auto;
	kvt_log_fn log;			/* kvt_device_set_log; NULL drops */
	void *log_arg;
	struct kvt_device_counters cnt;
	void *dl;			/* the plug-in's dlopen handle, NULL for cpu */
};

/* Wrappers: supply the fallbacks for optional methods. */
int kvt_dev_copy_async(struct kvt_device *d, void *dst, const void *src,
		       size_t bytes, int dir, uint64_t *fence);
int kvt_dev_fence_wait(struct kvt_device *d, uint64_t fence);
/* 1 when the copy behind fence is done (fence 0 always is), 0 when not or
 * when the device cannot tell without waiting, -errno. */
int kvt_dev_fence_done(struct kvt_device *d, uint64_t fence);
int kvt_dev_copy(struct kvt_device *d, void *dst, const void *src, size_t bytes, int dir);
/* Log one line through d->log (printf format); NULL d or log drops it.
 * Inline: plug-ins, which call nothing in libkvt, use it too. */
static inline void kvt_dev_log(struct kvt_device *d, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static inline void kvt_dev_log(struct kvt_device *d, int level, const char *fmt, ...)
{
	kvt_log_fn fn = d ? __atomic_load_n(&d->log, __ATOMIC_ACQUIRE) : NULL;
	char msg[512];
	va_list ap;

	if (!fn)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fn(d->log_arg, level, msg);
}

static inline void kvt_dev_count(uint64_t *c, uint64_t v)
{
	__atomic_add_fetch(c, v, __ATOMIC_RELAXED);
}

/* Backends */
int kvt_cpu_device_open(double copy_gbps, struct kvt_device *out);

#endif
