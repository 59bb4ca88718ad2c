/* SPDX-License-Identifier: MIT */
/* Compute contexts: the kernels a device names, opened for the runtime. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kernels/compute.h"
#include "kernels/device.h"

int kvt_compute_open(struct kvt_device *dev, unsigned n_threads, struct kvt_compute *out,
		     char *err, size_t errlen)
{
	const struct kvt_compute_ops *ops = dev && dev->compute ? dev->compute : &kvt_cpu_compute;
	int r;

	memset(out, 0, sizeof(*out));
	if (dev && !dev->compute && !dev->ops->host_visible) {
		snprintf(err, errlen, "device %s has no compute kernels", kvt_device_name(dev));
		return -ENOTSUP;
	}
	r = ops->open(dev, n_threads, &out->ctx, err, errlen);
	if (r)
		return r;
	out->ops = ops;
	out->dev = dev;
	return 0;
}

void kvt_compute_close(struct kvt_compute *cx)
{
	if (cx->ops)
		cx->ops->close(cx->ctx);
	memset(cx, 0, sizeof(*cx));
}
