/* SPDX-License-Identifier: MIT */
/*
 * Backend plug-ins the loader must refuse or report (t_backend), built as
 * libkvt-cuda.so in folders of their own: FAKE=abi claims another ABI,
 * FAKE=name another backend's name, FAKE=nodev finds no device and says
 * so, FAKE=nokernels opens a device without compute kernels.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kernels/plugin.h"

#define FAKE_ABI	1
#define FAKE_NAME	2
#define FAKE_NODEV	3
#define FAKE_NOKERNELS	4

static int dummy_alloc(void *ctx, size_t bytes, void **out)
{
	return -ENOMEM;
}

static void dummy_free(void *ctx, void *p, size_t bytes)
{
}

static const struct kvt_device_ops dummy_ops = {
	.name = "cuda", .alloc = dummy_alloc, .free = dummy_free,
};

static int fake_open(struct kvt_device *out, char *why, size_t whylen)
{
	if (FAKE == FAKE_NODEV) {
		snprintf(why, whylen, "cuda: fake: no device here");
		return -ENODEV;
	}
	out->ops = &dummy_ops;	/* and no out->compute */
	return 0;
}

__attribute__((visibility("default")))
const struct kvt_backend_plugin kvt_backend_plugin_v1 = {
	.abi  = FAKE == FAKE_ABI ? 99 : KVT_PLUGIN_ABI,
	.size = sizeof(struct kvt_backend_plugin),
	.name = FAKE == FAKE_NAME ? "emu" : "cuda",
	.open = fake_open,
};
