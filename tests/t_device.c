/* SPDX-License-Identifier: MIT */
/* The cpu device: allocation, async copies both ways in order, fences,
 * and the bandwidth cap that emulates PCIe. */
#include <errno.h>
#include <time.h>

#include "common.h"
#include "kernels/device.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void)
{
	struct kvt_device *dev;
	const size_t sz = 64 << 10, n = 256;
	uint8_t *d, *h = malloc(sz * n), *back = malloc(sz * n);
	uint64_t f, last = 0;

	CHECK(h && back);
	CHECK_EQ(kvt_device_open("no such", 0, &dev), -EINVAL);
	CHECK_EQ(kvt_device_open("", 0, &dev), -EINVAL);
	CHECK_EQ(kvt_device_open("cpu", -1, &dev), -EINVAL);
	/* A name that is not built in is a plug-in; none by that name. */
	CHECK_EQ(kvt_device_open("nope", 0, &dev), -ENODEV);
	CHECK_EQ(kvt_device_open("cpu", 0, &dev), 0);
	CHECK(!strcmp(kvt_device_name(dev), "cpu"));
	CHECK_EQ(dev->ops->alloc(dev->ctx, sz * n, (void **)&d), 0);
	for (size_t i = 0; i < sz * n; i++)
		h[i] = (uint8_t)(i * 2654435761u >> 13);

	/* Many copies queued (more than the ring holds), one fence at the end:
	 * copies in one direction complete in order, so the last fence covers
	 * them all. */
	for (int rep = 0; rep < 8; rep++)
		for (size_t i = 0; i < n; i++) {
			CHECK_EQ(kvt_dev_copy_async(dev, d + i * sz, h + i * sz, sz, KVT_H2D, &f), 0);
			CHECK(f > last);
			last = f;
		}
	CHECK_EQ(kvt_dev_fence_wait(dev, last), 0);
	CHECK_EQ(dev->ops->fence_done(dev->ctx, last), 1);
	CHECK(memcmp(d, h, sz * n) == 0);
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(kvt_dev_copy_async(dev, back + (n - 1 - i) * sz, d + i * sz, sz, KVT_D2H, &f), 0);
	CHECK_EQ(kvt_dev_fence_wait(dev, f), 0);
	for (size_t i = 0; i < n; i++)
		CHECK(memcmp(back + (n - 1 - i) * sz, h + i * sz, sz) == 0);
	CHECK_EQ(kvt_dev_copy_async(dev, d, h, sz, 7, &f), -EINVAL);
	dev->ops->free(dev->ctx, d, sz * n);
	kvt_device_close(dev);

	/* The cap: 16 MiB at 1 GB/s takes at least 16.7 ms, both ways. */
	CHECK_EQ(kvt_device_open("cpu", 1.0, &dev), 0);
	CHECK_EQ(dev->ops->alloc(dev->ctx, sz * n, (void **)&d), 0);
	for (int dir = 0; dir < 2; dir++) {
		double t0 = now();
		for (size_t i = 0; i < n; i++)
			CHECK_EQ(kvt_dev_copy_async(dev, dir ? h + i * sz : d + i * sz,
						    dir ? d + i * sz : h + i * sz, sz, dir, &f), 0);
		CHECK_EQ(kvt_dev_fence_wait(dev, f), 0);
		double dt = now() - t0, want = (double)(sz * n) / 1e9;
		fprintf(stderr, "capped at 1 GB/s: %zu bytes in %.1f ms (floor %.1f ms)\n",
			sz * n, dt * 1e3, want * 1e3);
		CHECK(dt >= want * 0.98);
	}
	CHECK(memcmp(d, h, sz * n) == 0);
	dev->ops->free(dev->ctx, d, sz * n);
	kvt_device_close(dev);
	free(h);
	free(back);
	return 0;
}
