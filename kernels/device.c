/* SPDX-License-Identifier: MIT */
/*
 * Devices: open by name (cpu built in, every other backend a plug-in
 * loaded with dlopen: kernels/plugin.h), and the wrappers that supply
 * the fallbacks for optional methods.
 */
#define _GNU_SOURCE		/* dladdr */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/compute.h"
#include "kernels/plugin.h"

#define KVT_API __attribute__((visibility("default")))

static void say(char *why, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void say(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!why || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
}

/* The folder of the program or shared library this code was linked
 * into, with a trailing slash ("" when unknown). */
static void own_dir(char *dir, size_t len)
{
	char path[PATH_MAX];
	Dl_info info;
	ssize_t n = -1;

	dir[0] = 0;
	if (dladdr((void *)own_dir, &info) && info.dli_fname && strchr(info.dli_fname, '/') &&
	    realpath(info.dli_fname, path))
		n = (ssize_t)strlen(path);
	if (n < 0) {
		n = readlink("/proc/self/exe", path, sizeof(path) - 1);
		if (n < 0)
			return;
		path[n] = 0;
	}
	char *slash = strrchr(path, '/');
	if (slash) {
		slash[1] = 0;
		snprintf(dir, len, "%s", path);
	}
}

/* out = a b c, or "" when that does not fit. */
static void path3(char *out, size_t len, const char *a, const char *b, const char *c)
{
	size_t la = strlen(a), lb = strlen(b), lc = strlen(c);

	out[0] = 0;
	if (la + lb + lc >= len)
		return;
	memcpy(out, a, la);
	memcpy(out + la, b, lb);
	memcpy(out + la + lb, c, lc + 1);
}

/* Load libkvt-NAME.so and check what it exports. 0 with *out and *dl,
 * or -ENODEV with the reason in why. */
static int plugin_load(const char *name, const struct kvt_backend_plugin **out, void **dl,
		       char *why, size_t whylen)
{
	char dir[PATH_MAX], cand[3][PATH_MAX], file[64], tried[1024] = "";
	const char *env = getenv("KVT_PLUGIN_DIR");
	const struct kvt_backend_plugin *pl;
	const char *where = file;	/* what was loaded */
	void *h = NULL;
	int n = 0;

	snprintf(file, sizeof(file), "libkvt-%s.so", name);
	if (env && env[0]) {
		path3(cand[n++], sizeof(cand[0]), env, "/", file);
	} else {
		own_dir(dir, sizeof(dir));
		if (dir[0]) {
			path3(cand[n++], sizeof(cand[0]), dir, "", file);
			path3(cand[n++], sizeof(cand[0]), dir, "../lib/kvt/", file);
			path3(cand[n++], sizeof(cand[0]), dir, "kvt/", file);
		}
	}
	for (int i = 0; i < n && !h; i++) {
		size_t tl = strlen(tried);
		if (!cand[i][0])
			continue;
		say(tried + tl, sizeof(tried) - tl, "%s%s", tl ? ", " : "", cand[i]);
		if (access(cand[i], F_OK))
			continue;
		h = dlopen(cand[i], RTLD_NOW | RTLD_LOCAL);
		where = cand[i];
		if (!h) {
			const char *e = dlerror();
			say(why, whylen, "%s: cannot load %s: %s%s", name, cand[i], e ? e : "?",
			    e && (strstr(e, "libcuda") || strstr(e, "libcublas"))
			    ? " (the CUDA runtime libraries are not installed or not on the "
			      "library path)" : "");
			return -ENODEV;
		}
	}
	if (!h && !(env && env[0])) {
		/* The dynamic linker's own search: LD_LIBRARY_PATH, ld.so.cache. */
		h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			const char *e = dlerror();
			if (e && !strstr(e, file)) {
				say(why, whylen, "%s: cannot load %s: %s", name, file, e);
				return -ENODEV;
			}
		}
	}
	if (!h) {
		say(why, whylen, "%s: no plug-in %s (looked at %s%s); this build of kvtier has no "
		    "%s backend", name, file, tried, env && env[0] ? "" : " and the library path",
		    name);
		return -ENODEV;
	}
	pl = dlsym(h, KVT_PLUGIN_SYMBOL);
	if (!pl) {
		say(why, whylen, "%s: %s exports no %s: not a kvtier backend", name, where,
		    KVT_PLUGIN_SYMBOL);
		goto refuse;
	}
	if (pl->abi != KVT_PLUGIN_ABI || pl->size < sizeof(*pl)) {
		say(why, whylen, "%s: %s was built for plug-in ABI %u (size %u), this libkvt "
		    "takes ABI %u (size %zu): rebuild it", name, where, pl->abi, pl->size,
		    KVT_PLUGIN_ABI, sizeof(*pl));
		goto refuse;
	}
	if (!pl->name || strcmp(pl->name, name) || !pl->open) {
		say(why, whylen, "%s: %s calls itself \"%s\"", name, where,
		    pl->name ? pl->name : "(null)");
		goto refuse;
	}
	*out = pl;
	*dl = h;
	return 0;
refuse:
	dlclose(h);
	return -ENODEV;
}

static int open_plugin(const char *name, struct kvt_device *d, char *why, size_t whylen)
{
	const struct kvt_backend_plugin *pl;
	void *h;
	int r = plugin_load(name, &pl, &h, why, whylen);

	if (r)
		return r;
	r = pl->open(d, why, whylen);
	if (!r && (!d->ops || !d->ops->alloc || !d->ops->free || !d->compute)) {
		say(why, whylen, "%s: the plug-in opened a device without memory ops or kernels",
		    name);
		if (d->ops && d->ops->close)
			d->ops->close(d->ctx);
		r = -ENODEV;
	}
	if (r) {
		if (why && whylen && !why[0])
			say(why, whylen, "%s: %s", name, strerror(-r));
		dlclose(h);
		memset(d, 0, sizeof(*d));
		return r;
	}
	d->dl = h;
	return 0;
}

static int valid_name(const char *name)
{
	size_t n = strlen(name);

	if (!n || n > 15)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!(name[i] >= 'a' && name[i] <= 'z') && !(name[i] >= '0' && name[i] <= '9'))
			return 0;
	return 1;
}

KVT_API int kvt_device_open_why(const char *name, double copy_gbps, struct kvt_device **out,
				char *why, size_t whylen)
{
	struct kvt_device *d;
	int r;

	if (why && whylen)
		why[0] = 0;
	if (!name || !out || !(copy_gbps >= 0) || !valid_name(name)) {
		say(why, whylen, "device \"%s\": expected cpu, cuda or auto", name ? name : "(null)");
		return -EINVAL;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	if (!strcmp(name, "cpu")) {
		r = kvt_cpu_device_open(copy_gbps, d);
	} else if (!strcmp(name, "auto")) {
		char sub[512];

		r = open_plugin("cuda", d, sub, sizeof(sub));
		if (r) {
			say(why, whylen, "%s; using cpu", sub);
			r = kvt_cpu_device_open(copy_gbps, d);
		}
	} else {
		r = open_plugin(name, d, why, whylen);
	}
	if (r) {
		free(d);
		return r;
	}
	*out = d;
	return 0;
}

KVT_API int kvt_device_open(const char *name, double copy_gbps, struct kvt_device **out)
{
	return kvt_device_open_why(name, copy_gbps, out, NULL, 0);
}

KVT_API void kvt_device_close(struct kvt_device *d)
{
	if (!d)
		return;
	if (d->ops && d->ops->close)
		d->ops->close(d->ctx);
	/* The plug-in's code is mapped until here. */
	if (d->dl)
		dlclose(d->dl);
	free(d);
}

KVT_API const char *kvt_device_name(const struct kvt_device *d)
{
	return d && d->ops ? d->ops->name : "none";
}

KVT_API void kvt_device_set_log(struct kvt_device *d, kvt_log_fn fn, void *arg)
{
	if (!d)
		return;
	d->log_arg = arg;
	__atomic_store_n(&d->log, fn, __ATOMIC_RELEASE);
}

KVT_API int kvt_device_read(struct kvt_device *d, void *dst, const void *src, size_t bytes)
{
	if (!d || (!dst && bytes) || (!src && bytes))
		return -EINVAL;
	if (d->ops->read)
		return d->ops->read(d->ctx, dst, src, bytes);
	if (!d->ops->host_visible)
		return -ENOTSUP;
	memcpy(dst, src, bytes);
	return 0;
}

KVT_API int kvt_device_info(struct kvt_device *d, struct kvt_device_info *out)
{
	if (!d || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "%s", d->ops->name);
	snprintf(out->desc, sizeof(out->desc), "%s", d->ops->name);
	out->numa_node = -1;
	out->host_visible = d->ops->host_visible;
	out->host_addressable = d->ops->host_addressable;
	out->host_in_place = d->in_place_auto;
	if (d->ops->describe)
		d->ops->describe(d->ctx, out);
	if (d->ops->mem_info)
		d->ops->mem_info(d->ctx, &out->mem_free, &out->mem_total);
	for (int i = 0; i < KVT_DEV_DIRS; i++) {
		out->copies[i] = __atomic_load_n(&d->cnt.copies[i], __ATOMIC_RELAXED);
		out->copy_bytes[i] = __atomic_load_n(&d->cnt.copy_bytes[i], __ATOMIC_RELAXED);
		out->copy_ns[i] = __atomic_load_n(&d->cnt.copy_ns[i], __ATOMIC_RELAXED);
	}
	out->kernel_ns = __atomic_load_n(&d->cnt.kernel_ns, __ATOMIC_RELAXED);
	return 0;
}

int kvt_dev_copy_async(struct kvt_device *d, void *dst, const void *src,
		       size_t bytes, int dir, uint64_t *fence)
{
	if (dir != KVT_H2D && dir != KVT_D2H && dir != KVT_D2D)
		return -EINVAL;
	kvt_dev_count(&d->cnt.copies[dir], 1);
	kvt_dev_count(&d->cnt.copy_bytes[dir], bytes);
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
