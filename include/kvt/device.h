/* SPDX-License-Identifier: MIT */
/*
 * Device backends. The public side is an opaque handle: the pager reaches
 * device memory only through the ops table in kernels/device.h.
 *
 * "cpu" is built into libkvt. Every other backend ("cuda") is a plug-in,
 * libkvt-NAME.so, loaded with dlopen when it is asked for, so that libkvt
 * and the tools never link a GPU library and run unchanged where there is
 * none. The plug-in is looked for at $KVT_PLUGIN_DIR/libkvt-NAME.so when
 * that is set, else next to the program or library that holds libkvt, in
 * ../lib/kvt/ and kvt/ from there (make install puts it in PREFIX/lib/kvt:
 * that is ../lib/kvt/ from a tool in PREFIX/bin, kvt/ from libkvt.so in
 * PREFIX/lib), then by the dynamic linker's search path.
 */
#ifndef KVT_DEVICE_H
#define KVT_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <kvt/config.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kvt_device;

/* Open a backend by name: "cpu", "cuda" or "auto" (cuda where a GPU is
 * usable, else cpu). copy_gbps caps the cpu device's copy bandwidth to
 * emulate PCIe (0 = uncapped); other backends ignore it.
 * Returns 0, -ENODEV (backend not built, its libraries missing, or no
 * device), -EINVAL, -ENOMEM. */
int  kvt_device_open(const char *name, double copy_gbps, struct kvt_device **out);
/* The same, saying why in one line (into why, when why is not NULL):
 * for a backend asked for by name that cannot be used (the return is
 * -errno), and for "auto" that fell back to cpu (the return is 0: the
 * line says what the GPU path lacked: no plug-in, no CUDA runtime, no
 * driver, no device). why is "" when there is nothing to say. */
int  kvt_device_open_why(const char *name, double copy_gbps, struct kvt_device **out,
			 char *why, size_t whylen);
void kvt_device_close(struct kvt_device *dev);
const char *kvt_device_name(const struct kvt_device *dev);	/* "cpu", "cuda" */

/* Where the device reports its errors (a failed CUDA call: the call, file,
 * line and error string). NULL drops them. A pager opened on a device
 * without a log sets its own. */
void kvt_device_set_log(struct kvt_device *dev, kvt_log_fn fn, void *arg);

/* Copy bytes from src, which may be device memory (a view of the fast
 * tier) or host memory, into host memory at dst; returns when done.
 * 0 or -errno (-EIO for a device error, logged). */
int  kvt_device_read(struct kvt_device *dev, void *dst, const void *src, size_t bytes);

/* What a device is and what it has done. */
enum { KVT_DEV_H2D = 0, KVT_DEV_D2H = 1, KVT_DEV_D2D = 2, KVT_DEV_DIRS = 3 };
struct kvt_device_info {
	char	 name[16];		/* backend: "cpu", "cuda" */
	char	 desc[128];		/* e.g. "NVIDIA H200, sm_90, 132 SMs" */
	uint64_t mem_total, mem_free;	/* device memory; 0 where it is host memory */
	int	 numa_node;		/* the node the device sits on, -1 unknown */
	int	 host_visible;		/* device memory is host memory (cpu): a view may
					 * be read directly; else kvt_device_read */
	int	 host_addressable;	/* kernels can read the host tier in place */
	int	 host_in_place;		/* what access.host_in_place = auto picks here */
	double	 in_place_gbps;		/* measured at open: a kernel reading pinned
					 * host memory in place, GB/s (0: not measured) */
	double	 copy_up_gbps;		/* measured at open: host -> device copies of
					 * pinned memory, GB/s (0: not measured) */
	uint64_t copies[KVT_DEV_DIRS];	/* copies done, by direction */
	uint64_t copy_bytes[KVT_DEV_DIRS];
	uint64_t copy_ns[KVT_DEV_DIRS];	/* time each direction's copy engine was busy */
	uint64_t kernel_ns;		/* time the device spent running kernels */
};
/* Fill *out. 0 or -EINVAL. */
int  kvt_device_info(struct kvt_device *dev, struct kvt_device_info *out);

#ifdef __cplusplus
}
#endif
#endif
