/* SPDX-License-Identifier: MIT */
/*
 * Device backends. The public side is an opaque handle: the pager reaches
 * device memory only through the ops table in kernels/device.h.
 */
#ifndef KVT_DEVICE_H
#define KVT_DEVICE_H

#ifdef __cplusplus
extern "C" {
#endif

struct kvt_device;

/* Open a backend by name: "cpu", "cuda" or "auto" (cuda where a GPU is
 * usable, else cpu). copy_gbps caps the cpu device's copy bandwidth to
 * emulate PCIe (0 = uncapped); other backends ignore it.
 * Returns 0, -ENODEV (backend not built or no device), -EINVAL, -ENOMEM. */
int  kvt_device_open(const char *name, double copy_gbps, struct kvt_device **out);
void kvt_device_close(struct kvt_device *dev);
const char *kvt_device_name(const struct kvt_device *dev);

#ifdef __cplusplus
}
#endif
#endif
