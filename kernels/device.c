/* SPDX-License-Identifier: MIT */
/* Device wrappers: open by name, and fallbacks for optional methods. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"

#define KVT_API __attribute__((visibility("default")))

KVT_API int kvt_device_open(const char *name, double copy_gbps, struct kvt_device **out)
{
	struct kvt_device *d;
	int r;

	if (!name || !out || copy_gbps < 0)
		return -EINVAL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	if (!strcmp(name, "cpu") || !strcmp(name, "auto")) {
#ifdef KVT_HAVE_CUDA
		if (!strcmp(name, "auto") && kvt_cuda_device_open(d) == 0)
			goto done;
#endif
		r = kvt_cpu_device_open(copy_gbps, d);
	} else if (!strcmp(name, "cuda")) {
#ifdef KVT_HAVE_CUDA
		r = kvt_cuda_device_open(d);
#else
		r = -ENODEV;
#endif
	} else {
		r = -EINVAL;
	}
	if (r) {
		free(d);
		return r;
	}
#ifdef KVT_HAVE_CUDA
done:
#endif
	*out = d;
	return 0;
}

KVT_API void kvt_device_close(struct kvt_device *d)
{
	if (!d)
		return;
	if (d->ops && d->ops->close)
		d->ops->close(d->ctx);
	free(d);
}

KVT_API const char *kvt_device_name(const struct kvt_device *d)
{
	return d && d->ops ? d->ops->name : "none";
}

int kvt_dev_copy_async(struct kvt_device *d, void *dst, const void *src,
		       size_t bytes, int dir, uint64_t *fence)
{
	if (d->ops->copy_async)
		return d->ops->copy_async(d->ctx, dst, src, bytes, dir, fence);
	/* No async engine: the copy is done when this returns. */
	memcpy(dst, src, bytes);
	*fence = 0;
	return 0;
}

int kvt_dev_fence_wait(struct kvt_device *d, uint64_t fence)
{
	return d->ops->fence_wait ? d->ops->fence_wait(d->ctx, fence) : 0;
}

int kvt_dev_fence_done(struct kvt_device *d, uint64_t fence)
{
	if (!fence || !d->ops->fence_wait)
		return 1;
	return d->ops->fence_done ? d->ops->fence_done(d->ctx, fence) : 0;
}

int kvt_dev_copy(struct kvt_device *d, void *dst, const void *src, size_t bytes, int dir)
{
	uint64_t f;
	int r = kvt_dev_copy_async(d, dst, src, bytes, dir, &f);
	return r ? r : kvt_dev_fence_wait(d, f);
}
