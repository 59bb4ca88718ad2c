/* SPDX-License-Identifier: MIT */
/*
 * The backend plug-in interface: what libkvt-NAME.so (kernels/cuda/ builds
 * libkvt-cuda.so) exports, and what kernels/device.c checks before it
 * trusts it.
 *
 * A plug-in exports one symbol, KVT_PLUGIN_SYMBOL, a const struct
 * kvt_backend_plugin. It must be self-contained: it calls nothing in
 * libkvt (whose symbols a program linked statically does not export), so
 * it carries whatever helpers it needs. It fills a struct kvt_device
 * (kernels/device.h) whose layout is part of this interface: a change to
 * that struct, to the ops tables or to the compute seam
 * (kernels/compute.h) bumps KVT_PLUGIN_ABI, and the loader refuses a
 * plug-in built for another ABI, or whose struct is smaller than the one
 * it knows.
 */
#ifndef KVT_KERNELS_PLUGIN_H
#define KVT_KERNELS_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/device.h"

#define KVT_PLUGIN_ABI		2
#define KVT_PLUGIN_SYMBOL	"kvt_backend_plugin_v1"

struct kvt_backend_plugin {
	uint32_t abi;			/* KVT_PLUGIN_ABI the plug-in was built with */
	uint32_t size;			/* sizeof(struct kvt_backend_plugin) there */
	const char *name;		/* the backend's name: "cuda" */
	/* Open the backend's device: fill out->ops, ctx, compute and
	 * in_place_auto, and keep out to log through later (out->log is set
	 * by the caller after the open: a failure to open is told in why).
	 * 0, or -ENODEV (no driver, no device), -ENOMEM, -EIO, with one line
	 * in why saying what is missing. */
	int (*open)(struct kvt_device *out, char *why, size_t whylen);
};

#endif
